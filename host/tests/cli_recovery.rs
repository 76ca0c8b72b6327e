//! `takt run` after a crash and on files it must not use: a real process is SIGKILLed in the
//! middle of a run and started again on the same SQLite file; read-only and corrupt database
//! files are refused and left byte for byte as they were.
//!
//! The crash tests wait on the database (polled, with a generous bound for a loaded machine)
//! rather than on fixed sleeps; the only fixed duration is the `--for` window in which a run
//! that must *not* be retried gets the chance to be retried wrongly.

#![cfg(unix)]

mod common;

use common::process::Host;

use std::collections::HashSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use jiff::Timestamp;
use takt_core::job::{JobId, JobName};
use takt_core::run::{NODE_RESTARTED, Run, RunId, RunState};
use takt_core::store::conformance::block_on;
use takt_core::store::{LogLine, RunFilter, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

/// How long one attempt of the job runs: long enough that the test sees it running (and
/// kills it) well before it could end, short enough that the retry keeps the test quick.
const ATTEMPT_SECONDS: f64 = 5.0;
const JOB: &str = "slow";
const NODE: &str = "n1";

/// Builds the examples cdylib once per test binary (see `common`).
fn build_examples() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        common::build(&["takt-plugin-examples"]);
    });
}

/// A fresh, empty directory for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-cli-recovery-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the temp dir can be created");
    dir
}

/// `takt` in `dir`, deaf to the developer's own `TAKT_*` settings.
use common::takt_command;

fn takt(dir: &Path, args: &[&str]) -> Output {
    takt_command(dir)
        .args(args)
        .output()
        .expect("the takt binary runs")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn succeeds(dir: &Path, args: &[&str]) -> String {
    let out = takt(dir, args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "takt {args:?}: {stdout}\n{stderr}");
    stdout
}

/// `takt run ARGS` in `dir` in the background, its output in `dir/<tag>.stdout|stderr`.
fn start_host(dir: &Path, tag: &str, args: &[&str]) -> Host {
    Host::spawn(takt_command(dir).arg("run").args(args), dir, tag)
}

// ---------------------------------------------------------------------------------------------
// Kill -9 in the middle of a run

/// A manual job, so that exactly one run exists (the test triggers it): anything a schedule
/// would add (further fires, overlap skips) would only blur what recovery did.
fn write_config(dir: &Path, retries: u32) {
    let plugins = common::profile_dir();
    let cfg = format!(
        "plugin_dir = {plugins:?}\n\
         node_id = \"{NODE}\"\n\
         \n\
         [[jobs]]\n\
         name = \"{JOB}\"\n\
         handler = \"examples::wait\"\n\
         params = {{ seconds = {ATTEMPT_SECONDS:?} }}\n\
         retries = {retries}\n\
         retry_delays = \"1s\"\n",
        plugins = plugins.display().to_string(),
    );
    std::fs::write(dir.join("takt.toml"), cfg).expect("takt.toml can be written");
}

/// What survived the kill.
struct Killed {
    store: SqliteStore,
    job: JobId,
    run: Run,
    logs: Vec<(u64, LogLine)>,
}

/// Starts `takt run` on `dir`, triggers the job, SIGKILLs the host while its run is running
/// and has logged, and checks that nothing cleaned up after it.
fn kill_during_the_run(dir: &Path) -> Killed {
    let mut host = start_host(dir, "first", &["--for", "5m"]);
    // The job exists once the host has synced the file's jobs (and so created the database).
    host.wait_for("the job synced from takt.toml", || {
        let stdout = std::fs::read_to_string(dir.join("first.stdout")).unwrap_or_default();
        stdout.contains("jobs from").then_some(())
    });
    let out = succeeds(dir, &["job", "trigger", JOB, "--db", "takt.db"]);
    assert!(out.contains(&format!("triggered {JOB}")), "{out}");

    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default())
        .expect("the database opens beside the running host");
    let job = block_on(store.job_get_by_name(&JobName::new(JOB).expect("a valid name")))
        .expect("the job can be read")
        .expect("the job was synced")
        .id
        .expect("a stored job has an id");
    let run_id = host.wait_for("a running run that has logged", || {
        let runs = job_runs(&store, job);
        let run = runs.iter().find(|r| r.state == RunState::Running)?;
        let id = run.id.expect("a stored run has an id");
        (!logs_of(&store, id).is_empty()).then_some(id)
    });

    host.child.kill().expect("SIGKILL can be sent");
    let status = host.child.wait().expect("the killed host can be reaped");
    assert_eq!(
        status.signal(),
        Some(9),
        "the host died of SIGKILL, not of its own accord: {status}\n{}",
        host.output()
    );

    // A real crash: the run is left exactly as a live host would have it.
    let run = block_on(store.run_get(run_id))
        .expect("the run can be read")
        .expect("the run is still stored");
    assert_eq!(
        run.state,
        RunState::Running,
        "nothing may finish a run when its host is SIGKILLed; if it succeeded, this machine \
         needed more than {ATTEMPT_SECONDS}s to notice it running: {run:?}\n{}",
        host.output()
    );
    assert_eq!(run.attempt, 1, "{run:?}");
    assert_eq!(run.node_id.as_ref().map(|n| n.0.as_str()), Some(NODE));
    assert_eq!(run.error, None, "{run:?}");
    assert_eq!(run.finished_at, None, "{run:?}");
    let logs = logs_of(&store, run_id);
    assert!(
        logs.iter().any(|(_, l)| l.message.starts_with("waiting")),
        "the handler's first line reached the store before the kill: {logs:?}"
    );
    Killed {
        store,
        job,
        run,
        logs,
    }
}

fn job_runs(store: &SqliteStore, job: JobId) -> Vec<Run> {
    block_on(store.run_list(&RunFilter {
        job: Some(job),
        state: None,
        limit: 100,
        ..RunFilter::default()
    }))
    .expect("the runs can be listed")
}

fn logs_of(store: &SqliteStore, run: RunId) -> Vec<(u64, LogLine)> {
    block_on(store.log_list(run, None, 1000)).expect("the run log can be read")
}

/// One look at a run: attempt, state, error, and whether a retry time is set.
type View = (u32, RunState, Option<String>, bool);

/// Polls the run until it is final and returns it with every distinct [`View`] of it seen on
/// the way, in order.
fn observe_until_final(host: &mut Host, store: &SqliteStore, run: &Run) -> (Run, Vec<View>) {
    let id = run.id.expect("a stored run has an id");
    let mut seen: Vec<View> = Vec::new();
    let last = host.wait_for("the run's final state", || {
        let now = block_on(store.run_get(id))
            .expect("the run can be read")
            .expect("the run is still stored");
        let view = (
            now.attempt,
            now.state,
            now.error.clone(),
            now.next_attempt_at.is_some(),
        );
        if seen.last() != Some(&view) {
            seen.push(view);
        }
        now.state.is_final().then_some(now)
    });
    (last, seen)
}

/// The run table lines (`UTC JOB FIRE ATTEMPT STATE ELAPSED`) a host printed for `job`.
fn run_lines<'a>(stdout: &'a str, job: &str) -> Vec<(&'a str, &'a str)> {
    stdout
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            match cols.as_slice() {
                [_, name, _, attempt, state, _] if *name == job => Some((*attempt, *state)),
                _ => None,
            }
        })
        .collect()
}

/// No (job, fire time) is recorded twice, and the job has exactly the one run that was killed:
/// the retry re-used its row instead of firing again.
fn assert_one_run(store: &SqliteStore, killed: &Killed) {
    let all = block_on(store.run_list(&RunFilter {
        job: None,
        state: None,
        limit: 1000,
        ..RunFilter::default()
    }))
    .expect("the runs can be listed");
    let keys: HashSet<_> = all.iter().map(|r| (r.job_id, r.fire_time)).collect();
    assert_eq!(keys.len(), all.len(), "a fire recorded twice: {all:#?}");
    let mine = job_runs(store, killed.job);
    assert_eq!(mine.len(), 1, "{mine:#?}");
    assert_eq!(mine[0].id, killed.run.id);
    assert_eq!(mine[0].fire_time, killed.run.fire_time);
}

#[test]
fn kill_9_during_a_run_is_recovered_on_restart() {
    build_examples();
    let dir = temp_dir("kill-retry");
    write_config(&dir, 1);
    let killed = kill_during_the_run(&dir);
    let store = &killed.store;

    let restarted_at = Timestamp::now();
    let mut host = start_host(&dir, "second", &["--for", "5m"]);
    let (last, seen) = observe_until_final(&mut host, store, &killed.run);
    // The loop is long past its start (it ran a whole attempt), so Ctrl-C is handled.
    host.signal("INT");
    let status = host.wait_exit();
    let stdout = host.stdout();
    assert!(status.success(), "{status}\n{}", host.output());

    // Recovery failed attempt 1 as "node restarted" and scheduled attempt 2 (the error is
    // kept while the retry waits and runs; a success clears it, so it is seen on the way).
    assert!(
        seen.iter().any(|(attempt, state, error, _)| *attempt == 2
            && !state.is_final()
            && error.as_deref() == Some(NODE_RESTARTED)),
        "attempt 2 was never seen pending or running after a {NODE_RESTARTED:?} failure: \
         {seen:?}\n{}",
        host.output()
    );
    assert!(
        !seen
            .iter()
            .any(|(attempt, state, ..)| *attempt == 1 && *state != RunState::Running),
        "attempt 1 must go from running straight to a pending attempt 2: {seen:?}"
    );
    assert_eq!(
        last.state,
        RunState::Succeeded,
        "{last:?}\n{}",
        host.output()
    );
    assert_eq!(last.attempt, 2, "one retry, as the policy allows: {last:?}");
    assert_eq!(last.error, None, "{last:?}");
    assert_eq!(last.node_id.as_ref().map(|n| n.0.as_str()), Some(NODE));
    assert!(
        last.result_json
            .as_deref()
            .is_some_and(|r| r.contains("\"waited\"")),
        "{last:?}"
    );
    // The retry waited its 1s delay, counted from the recovery (which is after the restart).
    let started = last.started_at.expect("attempt 2 has a start time");
    assert!(
        started.as_millisecond() >= restarted_at.as_millisecond() + 1000,
        "attempt 2 started at {started}, less than 1s after the restart at {restarted_at}"
    );

    assert_one_run(store, &killed);
    // The lines attempt 1 wrote before the kill are kept, in order, ahead of attempt 2's.
    let logs = logs_of(store, last.id.expect("a stored run has an id"));
    assert!(
        logs.len() > killed.logs.len() && logs[..killed.logs.len()] == killed.logs[..],
        "before the restart: {:?}\nafter: {logs:?}",
        killed.logs
    );
    assert!(
        logs[killed.logs.len()..]
            .iter()
            .any(|(_, l)| l.message.starts_with("waiting")),
        "attempt 2 logged too: {logs:?}"
    );

    // The restarted host ran attempt 2 only (attempt 1 is not run again), and said so.
    assert_eq!(
        run_lines(&stdout, JOB),
        [("2", "running"), ("2", "succeeded")],
        "{stdout}"
    );
    assert!(
        stdout.contains("summary: 1 attempts started, 1 succeeded;"),
        "{stdout}"
    );
    drop(killed);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kill_9_during_a_run_without_retries_fails_it_on_restart() {
    build_examples();
    let dir = temp_dir("kill-no-retry");
    write_config(&dir, 0);
    let killed = kill_during_the_run(&dir);
    let store = &killed.store;

    // A few seconds of the restarted host: time enough for a wrongly scheduled retry (1s
    // delay) to be claimed and show up in the summary.
    let restarted_at = Timestamp::now();
    let mut host = start_host(&dir, "second", &["--for", "3s"]);
    let status = host.wait_exit();
    let stdout = host.stdout();
    assert!(status.success(), "{status}\n{}", host.output());

    let run = block_on(store.run_get(killed.run.id.expect("a stored run has an id")))
        .expect("the run can be read")
        .expect("the run is still stored");
    assert_eq!(run.state, RunState::Failed, "{run:?}\n{}", host.output());
    assert_eq!(run.error.as_deref(), Some(NODE_RESTARTED), "{run:?}");
    assert_eq!(run.attempt, 1, "no retry is allowed: {run:?}");
    assert_eq!(run.next_attempt_at, None, "{run:?}");
    let finished = run.finished_at.expect("a failed run has a finish time");
    assert!(
        finished
            >= Timestamp::from_millisecond(restarted_at.as_millisecond()).expect("a valid instant"),
        "failed at {finished}, before the restart at {restarted_at}: the kill did it, not \
         recovery"
    );

    assert_one_run(store, &killed);
    assert_eq!(
        logs_of(store, killed.run.id.expect("a stored run has an id")),
        killed.logs,
        "the log is kept as it was at the kill, and nothing ran again"
    );
    assert!(run_lines(&stdout, JOB).is_empty(), "{stdout}");
    assert!(stdout.contains("summary: 0 attempts started;"), "{stdout}");
    drop(killed);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// Database files takt must not use

/// The names in `dir`, sorted: nothing may appear beside a refused database (no -wal, -shm or
/// journal, no fresh file in its place).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the temp dir can be listed")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// `takt init` plus one job added by the CLI; returns the database path.
fn database_with_a_job(dir: &Path) -> PathBuf {
    succeeds(dir, &["init", "--dir", "."]);
    succeeds(
        dir,
        &[
            "job",
            "add",
            "--name",
            "nightly",
            "--handler",
            "examples::hello",
            "--cron",
            "0 3 * * *",
            "--db",
            "takt.db",
        ],
    );
    dir.join("takt.db")
}

/// `takt run` on `dir`'s config, expected to fail at once: returns stderr.
fn run_refused(dir: &Path) -> String {
    let config = dir.join("takt.toml");
    let out = takt(
        dir,
        &[
            "run",
            "--config",
            config.to_str().expect("a UTF-8 temp path"),
            "--for",
            "2s",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    // The banner is printed once the store is open: it never was.
    assert_eq!(stdout, "", "{stderr}");
    assert!(
        stderr
            .strip_prefix("error: ")
            .and_then(|m| m.chars().next())
            .is_some_and(char::is_lowercase),
        "one lowercase error line: {stderr}"
    );
    stderr
}

fn job_names(dir: &Path) -> Vec<String> {
    let out = succeeds(dir, &["job", "list", "--json", "--db", "takt.db"]);
    let jobs: serde_json::Value = serde_json::from_str(&out).expect("job list --json is JSON");
    jobs.as_array()
        .expect("a JSON array of jobs")
        .iter()
        .map(|j| j["name"].as_str().expect("a job has a name").to_string())
        .collect()
}

#[test]
fn takt_run_refuses_a_read_only_database_and_leaves_it_intact() {
    let dir = temp_dir("read-only");
    let db = database_with_a_job(&dir);
    let bytes = std::fs::read(&db).expect("the database can be read");
    let names = listing(&dir);
    let writable = std::fs::metadata(&db)
        .expect("the database exists")
        .permissions();
    let mut read_only = writable.clone();
    read_only.set_readonly(true);
    std::fs::set_permissions(&db, read_only).expect("the database can be made read-only");

    let stderr = run_refused(&dir);
    assert!(
        stderr.contains(&format!("the database file {} is read-only", db.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("give the host's account write access to it and to its directory"),
        "says what to do: {stderr}"
    );
    assert_eq!(
        std::fs::read(&db).expect("the database can be read"),
        bytes,
        "the read-only file was changed"
    );
    assert_eq!(listing(&dir), names, "files appeared beside the database");

    std::fs::set_permissions(&db, writable).expect("write access can be given back");
    // The refused run synced nothing: the jobs `init` declared in takt.toml are not there.
    assert_eq!(job_names(&dir), ["nightly"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn takt_run_refuses_a_corrupt_database_and_does_not_replace_it() {
    let dir = temp_dir("corrupt");
    let db = database_with_a_job(&dir);
    let mut bytes = std::fs::read(&db).expect("the database can be read");
    // The 100-byte header, starting with "SQLite format 3\0", is what identifies the file.
    for (i, b) in bytes.iter_mut().take(100).enumerate() {
        *b = b"not a database! "[i % 16];
    }
    std::fs::write(&db, &bytes).expect("the database can be overwritten");
    let names = listing(&dir);

    let stderr = run_refused(&dir);
    assert!(
        stderr.contains(&format!(
            "the file {} is not a takt SQLite database or is corrupt",
            db.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("restore it from a backup or point the store to another file"),
        "says what to do: {stderr}"
    );
    assert!(stderr.contains("takt left this one untouched"), "{stderr}");
    assert_eq!(
        std::fs::read(&db).expect("the database can be read"),
        bytes,
        "the corrupt file was changed or replaced"
    );
    assert_eq!(listing(&dir), names, "files appeared beside the database");
    let _ = std::fs::remove_dir_all(&dir);
}
