//! One process per node identity, with real `takt run` processes (issue "keep the
//! promises", item 1): a second host on one SQLite file is refused while the first keeps its
//! runs; on PostgreSQL a second process with a live node's id is refused, `--takeover` from
//! another machine replaces it (and the replaced process stops), and a `kill -9` followed by
//! an immediate restart on the same machine recovers the dead process's runs at once, well
//! within the lease.
//!
//! Unix only (SIGKILL, pids). The PostgreSQL tests need `TAKT_TEST_PG_URL` (else SKIPPED,
//! unless `TAKT_TEST_REQUIRE` names postgres).
#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn plugins() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| common::build(&["takt-plugin-testing"]))
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("takt-identity-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A config with one slow job (`testing::record` sleeping `sleep_ms`) every 2 s, overlap
/// skip, and a short lease so that the tests run in seconds.
fn config(dir: &Path, database: &str, extra: &str, sleep_ms: u64) -> PathBuf {
    let record = dir.join("executions.txt");
    let text = format!(
        "database = \"{database}\"\nplugin_dir = \"{}\"\nnode_id = \"press-1\"\ngrace = \"2s\"\n\
         {extra}\n\
         [[jobs]]\nname = \"slow\"\nhandler = \"testing::record\"\ncron = \"*/2 * * * * *\"\n\
         params = {{ path = \"{}\", sleepMs = {sleep_ms} }}\n",
        plugins().display(),
        record.display()
    );
    let file = dir.join("takt.toml");
    std::fs::write(&file, text).expect("write config");
    file
}

fn takt(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_takt"));
    cmd.current_dir(dir)
        .env_remove("TAKT_DB")
        .env_remove("TAKT_NODE_ID")
        .env_remove("TAKT_PG_SCHEMA")
        .env_remove("TAKT_PLUGIN_DIR");
    cmd
}

fn start(dir: &Path, file: &Path, args: &[&str], log: &str, host: Option<&str>) -> Child {
    let out = std::fs::File::create(dir.join(log)).expect("log file");
    let mut cmd = takt(dir);
    cmd.args(["run", "--config"])
        .arg(file)
        .args(args)
        .stdout(out.try_clone().expect("clone"))
        .stderr(out);
    if let Some(h) = host {
        cmd.env("HOSTNAME", h);
    }
    cmd.spawn().expect("spawn takt run")
}

fn run_to_end(dir: &Path, file: &Path, args: &[&str], host: Option<&str>) -> Output {
    let mut cmd = takt(dir);
    cmd.args(["run", "--config"]).arg(file).args(args);
    if let Some(h) = host {
        cmd.env("HOSTNAME", h);
    }
    cmd.stdin(Stdio::null()).output().expect("takt run")
}

fn read(dir: &Path, log: &str) -> String {
    std::fs::read_to_string(dir.join(log)).unwrap_or_default()
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Executions of the job as `testing::record` wrote them: (fire time ms, pid) per line.
fn executions(dir: &Path) -> Vec<(i64, u32)> {
    std::fs::read_to_string(dir.join("executions.txt"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[1].parse().expect("fire ms"), f[4].parse().expect("pid"))
        })
        .collect()
}

fn assert_each_fire_once(dir: &Path) {
    let mut fires: Vec<i64> = executions(dir).iter().map(|(f, _)| *f).collect();
    let n = fires.len();
    fires.sort_unstable();
    fires.dedup();
    assert_eq!(fires.len(), n, "a fire ran twice: {:?}", executions(dir));
}

#[test]
fn a_second_host_on_one_sqlite_file_is_refused_and_the_first_keeps_its_runs() {
    let dir = Dir::new("sqlite");
    let db = dir.0.join("takt.db");
    let file = config(&dir.0, &db.display().to_string(), "", 1500);
    let mut first = start(&dir.0, &file, &["--for", "8s"], "first.log", None);
    wait_for(
        "the first host's first run",
        Duration::from_secs(60),
        || !executions(&dir.0).is_empty(),
    );

    let second = run_to_end(&dir.0, &file, &["--for", "5s"], None);
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "refused: {err}");
    assert!(err.contains("in use by another running takt host"), "{err}");
    assert!(
        err.contains(&db.display().to_string()),
        "names the file: {err}"
    );
    assert!(
        err.contains(&format!("pid {} on host", first.id())),
        "names the holder: {err}"
    );
    // Commands that read or add jobs work beside the running host.
    let list = takt(&dir.0)
        .args(["job", "list", "--db"])
        .arg(&db)
        .output()
        .expect("job list");
    assert!(list.status.success(), "{list:?}");
    assert!(String::from_utf8_lossy(&list.stdout).contains("slow"));

    assert!(
        first.wait().expect("first host").success(),
        "{}",
        read(&dir.0, "first.log")
    );
    let log = read(&dir.0, "first.log");
    assert!(
        !log.contains("node restarted"),
        "a live run was failed: {log}"
    );
    assert!(!log.contains("failed"), "{log}");
    assert!(
        executions(&dir.0).iter().all(|(_, pid)| *pid == first.id()),
        "only the first host ran anything"
    );
    assert_each_fire_once(&dir.0);
    // Once the first host is gone, the file is free (the OS released the lock).
    let again = run_to_end(&dir.0, &file, &["--for", "1s"], None);
    assert!(again.status.success(), "{again:?}");
}

fn pg_setup(name: &str) -> Option<(Dir, common::pg::Pg, String, String)> {
    let url = common::backend_url("postgres", "TAKT_TEST_PG_URL")?;
    let dir = Dir::new(name);
    let schema = format!("takt_identity_{name}_{}", std::process::id());
    let pg = common::pg::Pg::connect(&url);
    pg.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    Some((dir, pg, url, schema))
}

#[test]
fn a_second_process_with_a_live_node_id_is_refused_and_takeover_replaces_it() {
    let Some((dir, pg, url, schema)) = pg_setup("takeover") else {
        return;
    };
    let extra =
        format!("lease = \"6s\"\nrenew_every = \"1s\"\n[postgres]\nschema = \"{schema}\"\n");
    let file = config(&dir.0, &url, &extra, 300);
    let mut first = start(&dir.0, &file, &["--for", "60s"], "first.log", Some("box-a"));
    wait_for(
        "the first node's first run",
        Duration::from_secs(60),
        || !executions(&dir.0).is_empty(),
    );

    // Same node id, same machine, the first process alive: refused.
    let second = run_to_end(&dir.0, &file, &["--for", "5s"], Some("box-a"));
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(err.contains("node id press-1 is in use"), "{err}");
    assert!(
        err.contains(&format!("box-a (pid {})", first.id())),
        "{err}"
    );
    assert!(err.contains("--takeover"), "says what to do: {err}");
    // Another machine: refused too while the heartbeat is live.
    let third = run_to_end(&dir.0, &file, &["--for", "5s"], Some("box-b"));
    assert_eq!(third.status.code(), Some(1), "{third:?}");

    // --takeover from another machine: the new process runs, the old one stops by itself.
    let mut new = start(
        &dir.0,
        &file,
        &["--for", "10s", "--takeover"],
        "new.log",
        Some("box-b"),
    );
    let status = {
        let start = Instant::now();
        loop {
            if let Some(s) = first.try_wait().expect("poll the first node") {
                break s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the taken-over node did not stop: {}",
                read(&dir.0, "first.log")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let log = read(&dir.0, "first.log");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("was taken over by another process"), "{log}");
    assert!(
        new.wait().expect("new node").success(),
        "{}",
        read(&dir.0, "new.log")
    );
    let holder = pg.strings(&format!(
        "SELECT host_name FROM {schema}.nodes WHERE id = 'press-1'"
    ));
    assert_eq!(holder, ["box-b"]);
    assert_each_fire_once(&dir.0);
    pg.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
}

#[test]
fn kill_9_then_an_immediate_restart_recovers_the_dead_process_runs_at_once() {
    let Some((dir, pg, url, schema)) = pg_setup("restart") else {
        return;
    };
    // A long lease: a recovery seen within a few seconds cannot be the lease expiring.
    let extra =
        format!("lease = \"120s\"\nrenew_every = \"5s\"\n[postgres]\nschema = \"{schema}\"\n");
    let file = config(&dir.0, &url, &extra, 60_000);
    let mut first = start(&dir.0, &file, &["--for", "120s"], "first.log", None);
    wait_for("the first node's run", Duration::from_secs(60), || {
        !executions(&dir.0).is_empty()
    });
    first.kill().expect("SIGKILL");
    first.wait().expect("reap");
    let killed = Instant::now();

    let mut second = start(&dir.0, &file, &["--for", "6s"], "second.log", None);
    wait_for(
        "the zombie run to be failed",
        Duration::from_secs(30),
        || {
            pg.strings(&format!(
                "SELECT error FROM {schema}.runs WHERE error IS NOT NULL"
            ))
            .iter()
            .any(|e| e == "node restarted")
        },
    );
    assert!(
        killed.elapsed() < Duration::from_secs(60),
        "recovered at start, not after the 120 s lease"
    );
    let status = second.wait().expect("second");
    assert!(status.success(), "{}", read(&dir.0, "second.log"));
    pg.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
}
