//! Opening the SQLite file: the connection settings, the checkpointing thread that keeps WAL
//! checkpoints out of the commits, and the mapping of driver errors to store errors.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use takt_core::store::StoreError;
use takt_core::store::StoreResult;

use super::SqliteOptions;
use super::migrate;

/// The store's connection, and the checkpointing thread that serves it.
#[derive(Debug)]
pub(super) struct Db {
    pub(super) conn: Connection,
    pub(super) path: Arc<str>,
    /// The checkpointing thread ([`checkpoint_in_background`]), if it runs.
    pub(super) checkpointer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Db {
    /// Ends the checkpointing thread (and closes its connection) before `conn` closes, so
    /// that `conn` is the file's last connection when it does: SQLite then checkpoints the
    /// whole WAL and removes it, and a stopped host leaves a self-contained database file, as
    /// without the thread (a copy of `takt.db` alone is a complete backup).
    fn drop(&mut self) {
        if let Some(thread) = self.checkpointer.take() {
            // Dropping the hook drops the thread's sender: its wait ends.
            let _ = self
                .conn
                .wal_hook(None::<fn(&mut rusqlite::hooks::Wal, i32) -> rusqlite::Result<()>>);
            let _ = thread.join();
        }
    }
}

/// The WAL growth, in pages, after which a commit asks the checkpointing thread to run
/// (SQLite's own automatic checkpoint threshold).
const CHECKPOINT_PAGES: i32 = 1000;

/// The WAL size, in pages, at which the writer checkpoints between its own transactions
/// (see [`checkpoint_in_background`]): 32 MB with 4 KB pages.
const WAL_LIMIT_PAGES: i32 = 8 * CHECKPOINT_PAGES;

/// Moves WAL checkpoints off the store's connection onto a thread of their own.
///
/// SQLite checkpoints automatically inside the commit that grows the WAL past 1 000 pages:
/// that commit copies the WAL into the database file and syncs both, a few milliseconds
/// (B4: one due run in ~50 took 5–7 ms instead of ~1 ms, always a claim or finish that
/// happened to checkpoint; the fire's start waited for it). Here `conn` keeps no automatic
/// checkpoint; its commits only signal the thread, once per 1 000 pages the WAL grew, and
/// the thread runs a PASSIVE checkpoint on a second connection, which waits for nobody and
/// holds up no writer (and one more when the writes pause: [`checkpoint_loop`]).
///
/// A checkpoint beside the writer copies the frames written before it began, and SQLite
/// starts the WAL over only after a checkpoint that copied every frame. Under writes that
/// never pause (a burst of short runs, a bulk import) that never happens, and the WAL grew
/// without bound: 450 MB for B3's 20 000 job inserts, with the thread asked at every commit
/// past the threshold (two fsyncs a commit, 30 000 in one B3 round). So once the WAL holds
/// [`WAL_LIMIT_PAGES`], the commit's own hook checkpoints, as SQLite's automatic checkpoint
/// would: between this writer's transactions nothing is written while it copies, so it
/// copies the frames the thread left (a few milliseconds) and the next transaction starts
/// the WAL over. Its file keeps its largest size, reused from its start.
///
/// If the second connection or the thread cannot be had, `conn` keeps SQLite's automatic
/// checkpoints (slower fires, nothing lost). Returns the thread, which ends when the hook
/// is removed or `conn` is closed (see `Db`'s `Drop`).
pub(super) fn checkpoint_in_background(
    conn: &mut Connection,
    path: &Path,
    options: &SqliteOptions,
    shown: &str,
) -> Option<std::thread::JoinHandle<()>> {
    let checkpointer = match connect(path, options) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("{e}; checkpoints stay in the commits of {shown}");
            return None;
        }
    };
    let (tx, rx) = mpsc::sync_channel::<()>(1);
    let thread_path = shown.to_string();
    let commits = Arc::new(AtomicU64::new(0));
    let counted = commits.clone();
    let started = std::thread::Builder::new()
        .name("takt-sqlite-checkpoint".into())
        .spawn(move || checkpoint_loop(&checkpointer, &rx, &counted, &thread_path));
    let thread = match started {
        Ok(thread) => thread,
        Err(e) => {
            tracing::warn!(
                "cannot start the sqlite checkpointing thread ({e}); checkpoints stay in the \
                 commits of {shown}"
            );
            return None;
        }
    };
    // Replaces SQLite's automatic checkpoint, which is itself a WAL hook. `asked`: the WAL's
    // size at the last ask (a smaller size means the WAL started over). A full channel means
    // a checkpoint is already asked for; the next commit asks again.
    let mut asked = 0;
    let hook_path = shown.to_string();
    let hooked = conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
        commits.fetch_add(1, Ordering::Relaxed);
        if pages < asked {
            asked = 0;
        }
        if pages >= WAL_LIMIT_PAGES {
            match wal.checkpoint_v2(rusqlite::wal::CheckpointMode::PASSIVE) {
                Ok(_) => {}
                // The thread is checkpointing: the next commit tries again.
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {}
                Err(e) => tracing::warn!("checkpointing the WAL of {hook_path} failed: {e}"),
            }
        } else if pages >= CHECKPOINT_PAGES
            && pages - asked >= CHECKPOINT_PAGES
            && tx.try_send(()).is_ok()
        {
            asked = pages;
        }
        // An error here would fail the statement whose commit has happened: never one.
        Ok(())
    }));
    if let Err(e) = hooked {
        // The hook, and with it the thread's sender, is dropped: the thread ends on its own.
        tracing::warn!("cannot hook the WAL of {shown} ({e}); checkpoints stay in its commits");
        drop(thread);
        return None;
    }
    Some(thread)
}

/// How long the writes must have paused before the checkpointing thread finishes what its
/// last checkpoint left (see [`checkpoint_loop`]).
const QUIET: Duration = Duration::from_millis(10);

/// The checkpointing thread: a PASSIVE checkpoint each time a commit asks for one; ends when
/// the store's connection (and with it the hook holding the sender) is closed.
///
/// Each asked checkpoint is followed by one more once no commit (`commits`, counted by the
/// hook) has come for [`QUIET`]: the asked one copied the frames written before it began,
/// the writes went on, and SQLite starts the WAL over only at a write after a checkpoint
/// that copied every frame. A host writes in bursts (a second's fires and their ends), so
/// its WAL starts over between them and stays near the threshold, not near the limit.
fn checkpoint_loop(conn: &Connection, asks: &mpsc::Receiver<()>, commits: &AtomicU64, path: &str) {
    let mut failing = false;
    // The commit count when the last asked checkpoint began, while one more is to follow.
    let mut follow: Option<u64> = None;
    loop {
        let asked = match follow {
            None => match asks.recv() {
                Ok(()) => true,
                Err(_) => return,
            },
            Some(seen) => match asks.recv_timeout(QUIET) {
                Ok(()) => true,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let now = commits.load(Ordering::Relaxed);
                    if now != seen {
                        // Still writing: wait for a pause.
                        follow = Some(now);
                        continue;
                    }
                    false
                }
            },
        };
        let before = commits.load(Ordering::Relaxed);
        match conn.wal_checkpoint_v2(None::<&str>, rusqlite::wal::CheckpointMode::PASSIVE) {
            Ok(_) => failing = false,
            // Another connection (another process, the writer at the limit) is
            // checkpointing: it does the work.
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {}
            Err(e) => {
                // Once per streak: the next commit past the threshold asks again.
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!("checkpointing the WAL of {path} failed: {e}");
                }
            }
        }
        follow = asked.then_some(before);
    }
}

/// The store's reading connection (see `SqliteDialect::read_session`): a second connection
/// to the file with the store's settings, made read-only (`query_only`), so a read routed
/// here by mistake fails instead of writing outside the writer's order. `None`, after a
/// warning, when it cannot be had: reads then share the writer's connection, as before.
pub(super) fn open_reader(path: &Path, options: &SqliteOptions, shown: &Arc<str>) -> Option<Db> {
    let opened = connect(path, options).and_then(|conn| {
        conn.pragma_update(None, "query_only", "ON")
            .map_err(|e| sql_error(shown, "making the reading connection read-only", e))?;
        Ok(conn)
    });
    match opened {
        Ok(conn) => Some(Db {
            conn,
            path: shown.clone(),
            checkpointer: None,
        }),
        Err(e) => {
            tracing::warn!("{e}; reads of {shown} share the writer's connection");
            None
        }
    }
}

/// The settings that keep the store's statements prepared and their plans fixed, on every
/// connection it opens (the file's, its reading one and a private in-memory one).
///
/// The cache holds every statement of the loop's passes and of a fire's path (the default of
/// 16 would evict some of them each pass). The query planner's stability guarantee
/// (`SQLITE_DBCONFIG_ENABLE_QPSG`) keeps SQLite from planning with the values bound to a
/// statement: without it, a `LIMIT ?` (the due jobs' walk, the pending runs, the pages) marks
/// the statement to be parsed and planned again whenever a new limit is bound — on every claim
/// and every pass, on the one writing connection (a profile of B3 on SQLite: a tenth of a
/// claim's samples in `sqlite3Reprepare`). Nothing here gains from value-driven plans: no
/// statement matches a bound `LIKE` pattern, the partial indexes are named by literal
/// conditions, and there are no `ANALYZE` statistics to consult.
pub(super) fn keep_plans(conn: &Connection, shown: &str) -> StoreResult<()> {
    conn.set_prepared_statement_cache_capacity(64);
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(|e| sql_error(shown, "fixing the query plans", e))?;
    Ok(())
}

/// Opens a connection to `path` with the store's settings, refusing corrupt, foreign and
/// read-only files before anything is written.
pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> StoreResult<Connection> {
    let shown = path.display().to_string();
    if let Ok(meta) = std::fs::metadata(path)
        && meta.is_file()
        && meta.permissions().readonly()
    {
        return Err(read_only(&shown));
    }
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if options.migrate {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn =
        Connection::open_with_flags(path, flags).map_err(|e| sql_error(&shown, "opening", e))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(|e| sql_error(&shown, "setting the busy timeout", e))?;
    keep_plans(&conn, &shown)?;
    // Read the header first: a file that is not a database fails here, before any write.
    conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_err(|e| sql_error(&shown, "reading the schema", e))?;
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| sql_error(&shown, "opening", e))?
    {
        return Err(read_only(&shown));
    }
    if !options.migrate {
        // Before anything below writes (switching to WAL rewrites the header of a file that
        // is not in WAL mode yet): a file that is not this takt's database stays as it is.
        let current = migrate::current_version(&conn, &shown)?;
        crate::store::migrate::require_current(&shown, current, migrate::latest_version())?;
    }
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| sql_error(&shown, "enabling foreign keys", e))?;
    // Switching to WAL needs the file to itself for a moment, and SQLite answers SQLITE_BUSY
    // at once (without the busy handler) while another connection is in the middle of its
    // own open or migration: several hosts started together on a new file must wait their
    // turn, up to the busy timeout, not fail.
    let deadline = std::time::Instant::now() + options.busy_timeout;
    let mode: String = loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)) {
            Ok(mode) => break mode,
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.code == ErrorCode::DatabaseBusy && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(sql_error(&shown, "switching to WAL", e)),
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::other(format!(
            "the database {shown} refused WAL journaling (it stays in {mode} mode); put it on a \
             local file system that supports shared memory (not a network share)"
        )));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(|e| sql_error(&shown, "setting synchronous", e))?;
    // Statement journals and temporary tables in memory, not in a temporary file opened,
    // written and deleted for each (a batch of finishes opened one each: half of all the
    // page writes of B3 on SQLite, 12 000 against 18 000 runs/s). They hold a statement's
    // changed pages, a few hundred kilobytes at most here.
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(|e| sql_error(&shown, "setting temp_store", e))?;
    Ok(conn)
}

fn read_only(path: &str) -> StoreError {
    StoreError::other(format!(
        "the database file {path} is read-only; give the host's account write access to it and \
         to its directory (SQLite writes -wal and -shm files beside it)"
    ))
}

/// Maps a driver error to a [`StoreError`] whose kind the host can act on; `what` says what
/// the store was doing.
pub(crate) fn sql_error(path: &str, what: &str, e: rusqlite::Error) -> StoreError {
    let code = e.sqlite_error_code();
    let message = match code {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            return StoreError::transient(format!(
                "the database {path} is busy ({what}): another connection held its write lock \
                 longer than the busy timeout; retry"
            ))
            .with_source(e);
        }
        Some(ErrorCode::ConstraintViolation) => {
            return StoreError::conflict(format!(
                "{what} in {path} violates a constraint ({e}); another node may have written \
                 the same row first: reload and decide again"
            ))
            .with_source(e);
        }
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => format!(
            "the file {path} is not a takt SQLite database or is corrupt ({e}); restore it from \
             a backup or point the store to another file (takt left this one untouched)"
        ),
        Some(ErrorCode::ReadOnly) => return read_only(path).with_source(e),
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => format!(
            "cannot open the database file {path} ({e}); check that its directory exists and \
             that the host's account may read and write there"
        ),
        Some(ErrorCode::DiskFull) => {
            format!("the disk holding the database {path} is full ({what}); free space, then retry")
        }
        Some(ErrorCode::SystemIoFailure) => format!(
            "i/o error on the database {path} while {what} ({e}); check the disk and the file \
             system"
        ),
        _ => format!("sqlite error on {path} while {what}: {e}"),
    };
    StoreError::other(message).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use takt_core::store::StoreErrorKind;

    #[test]
    fn error_kinds_follow_the_sqlite_code() {
        let failure =
            |code: i32| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        let kind = |code| sql_error("/x/takt.db", "testing", failure(code)).kind();
        assert_eq!(kind(rusqlite::ffi::SQLITE_BUSY), StoreErrorKind::Transient);
        assert_eq!(
            kind(rusqlite::ffi::SQLITE_LOCKED),
            StoreErrorKind::Transient
        );
        assert_eq!(
            kind(rusqlite::ffi::SQLITE_CONSTRAINT),
            StoreErrorKind::Conflict
        );
        assert_eq!(kind(rusqlite::ffi::SQLITE_CORRUPT), StoreErrorKind::Other);
        let e = sql_error(
            "/x/takt.db",
            "testing",
            failure(rusqlite::ffi::SQLITE_READONLY),
        );
        assert!(e.to_string().contains("/x/takt.db is read-only"), "{e}");
        let e = sql_error(
            "/x/takt.db",
            "testing",
            failure(rusqlite::ffi::SQLITE_NOTADB),
        );
        assert!(e.to_string().contains("restore it from a backup"), "{e}");
    }

    /// How many times one statement of the due jobs' walk is parsed and planned again when it
    /// runs with five different limits, on `conn` (the store's schema).
    fn replans(conn: &mut Connection) -> i32 {
        migrate::apply(conn, ":memory:", None).expect("the schema");
        let sql = "SELECT id FROM jobs INDEXED BY jobs_claim WHERE enabled = 1 \
                   AND priority = ?1 AND next_fire IS NOT NULL AND next_fire <= ?2 \
                   ORDER BY next_fire, id LIMIT ?3";
        for limit in 1..=5_i64 {
            let mut stmt = conn.prepare_cached(sql).expect("prepare");
            let mut rows = stmt.query([500, 1_000, limit]).expect("query");
            while rows.next().expect("step").is_some() {}
        }
        let stmt = conn.prepare_cached(sql).expect("the cached statement");
        stmt.get_status(rusqlite::StatementStatus::RePrepare)
    }

    #[test]
    fn a_new_limit_does_not_replan_a_statement() {
        let mut plain = Connection::open_in_memory().expect("open");
        plain.set_prepared_statement_cache_capacity(64);
        assert!(
            replans(&mut plain) >= 4,
            "without the stability guarantee SQLite replans at each new LIMIT value; if this \
             fails, SQLite changed and keep_plans may no longer be needed"
        );
        let mut kept = Connection::open_in_memory().expect("open");
        keep_plans(&kept, ":memory:").expect("settings");
        assert_eq!(replans(&mut kept), 0);
    }
}
