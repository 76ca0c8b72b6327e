//! The host lock of an embedded database: one running host per SQLite file.
//!
//! A host holds an exclusive OS lock (`flock` on Unix, `LockFileEx` on Windows, through
//! `std::fs::File::try_lock`) on `<database>.lock` for its whole life. The OS releases it when
//! the process ends however it ends — a `kill -9`, a power cut — so it can never be left stuck,
//! and a host that gets it knows every life recorded in the file before it is gone: no live
//! process can hold a run of that file. A separate file rather than the database itself,
//! because SQLite's own POSIX locks on the database must not be disturbed (on some systems
//! `flock` is emulated with the same `fcntl` locks SQLite uses).
//!
//! The lock file also says who holds it (pid, host, node, since) for the refusal message of a
//! second host. Windows locks the whole file against reads too, so there the second host
//! learns only that the file is locked; the message then says so.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use takt_core::node::NodeInfo;
use takt_core::store::{StoreError, StoreResult};

/// The lock file of the database at `db`.
pub(crate) fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the host lock of the database at `db` for `node`, or refuses with who holds it.
pub(crate) fn acquire(db: &Path, node: &NodeInfo, now: Timestamp) -> StoreResult<File> {
    let path = lock_path(db);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| {
            StoreError::invalid(format!(
                "cannot open the host lock file {} ({e}); the host needs to create it beside \
                 the database: check that the directory is writable by this user",
                path.display()
            ))
            .with_source(e)
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let holder = read_holder(&mut file);
            return Err(StoreError::conflict(format!(
                "the database {} is in use by another running takt host ({holder}); one host \
                 runs on a SQLite file at a time. stop that host first (commands such as `takt \
                 job list` or `takt job add` work beside it), or use PostgreSQL or SQL Server \
                 for several nodes",
                db.display()
            )));
        }
        Err(TryLockError::Error(e)) => {
            return Err(StoreError::invalid(format!(
                "cannot lock the host lock file {} ({e}); the file system may not support \
                 locks (a network share?): keep the database on a local disk",
                path.display()
            ))
            .with_source(e));
        }
    }
    let info = format!(
        "pid={}\nhost={}\nnode={}\nsince={now}\n",
        node.pid, node.host_name, node.id
    );
    // Best effort: the lock itself is what counts; the text only helps the next message.
    let _ = file
        .set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(info.as_bytes()))
        .and_then(|()| file.flush());
    Ok(file)
}

/// Who holds the lock, as its file says ("pid 4242 on host box, node n1, since …").
fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    if file.read_to_string(&mut text).is_err() || text.trim().is_empty() {
        return "the lock file does not say which process; on Windows it cannot be read while \
                locked"
            .to_string();
    }
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    format!(
        "pid {} on host {}, node {}, since {}",
        field("pid"),
        field("host"),
        field("node"),
        field("since")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use takt_core::node::InstanceId;
    use takt_core::run::NodeId;

    #[test]
    fn a_second_lock_is_refused_with_the_holder_and_freed_on_drop() {
        let dir = std::env::temp_dir().join(format!("takt-host-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("x.db");
        let node = NodeInfo {
            id: NodeId("line-1".into()),
            instance: InstanceId("i".into()),
            host_name: "box".into(),
            pid: 777,
            version: "0".into(),
            capacity: 1,
            tags: vec![],
        };
        let now: Timestamp = "2026-06-01T10:00:00Z".parse().unwrap();
        let held = acquire(&db, &node, now).unwrap();
        let e = acquire(&db, &node, now).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("in use by another running takt host"), "{m}");
        assert!(m.contains(&db.display().to_string()), "{m}");
        #[cfg(unix)]
        assert!(m.contains("pid 777 on host box, node line-1"), "{m}");
        drop(held);
        acquire(&db, &node, now).expect("free again once the holder is gone");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
