//! How `takt run` stops: SIGTERM (what `systemctl stop`, `docker stop` and Kubernetes send) and
//! SIGINT start the graceful stop — claim nothing more, let running runs finish within
//! `grace`, cancel the rest as shutdown — and the process exits 0 with every run recorded; a
//! second signal cancels at once (exit 1, still recorded). A closed stdout neither stops the
//! host nor skips its drain.

#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::process::Host;
use takt_core::job::{JobId, JobName};
use takt_core::run::{Run, RunState};
use takt_core::store::conformance::block_on;
use takt_core::store::{RunFilter, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

fn build_examples() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        common::build(&["takt-plugin-examples"]);
    });
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-cli-signals-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the temp dir can be created");
    dir
}

use common::takt_command;

/// A takt.toml with `grace` and one manual job `wait` (examples::wait, `seconds`): exactly one
/// run exists, the one the test triggers.
fn write_config(dir: &Path, grace: &str, seconds: f64) {
    let cfg = format!(
        "plugin_dir = {:?}\nnode_id = \"n1\"\ngrace = \"{grace}\"\n\n[[jobs]]\nname = \"wait\"\n\
         handler = \"examples::wait\"\nparams = {{ seconds = {seconds:?} }}\n",
        common::profile_dir().display().to_string()
    );
    std::fs::write(dir.join("takt.toml"), cfg).expect("takt.toml can be written");
}

fn store(dir: &Path) -> SqliteStore {
    SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).expect("the database opens")
}

fn job_id(store: &SqliteStore, name: &str) -> JobId {
    block_on(store.job_get_by_name(&JobName::new(name).unwrap()))
        .unwrap()
        .expect("the job was synced")
        .id
        .unwrap()
}

fn runs(store: &SqliteStore) -> Vec<Run> {
    block_on(store.run_list(&RunFilter {
        job: None,
        state: None,
        limit: 100,
        ..RunFilter::default()
    }))
    .unwrap()
}

/// Starts `takt run`, triggers `wait` and returns once its run is running.
fn running_host(dir: &Path, tag: &str) -> (Host, SqliteStore) {
    let mut host = Host::spawn(takt_command(dir).args(["run", "--for", "5m"]), dir, tag);
    host.wait_for_line("jobs from");
    let out = takt_command(dir)
        .args(["job", "trigger", "wait", "--db", "takt.db"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let store = store(dir);
    let job = job_id(&store, "wait");
    host.wait_for("the run running", || {
        runs(&store)
            .iter()
            .any(|r| r.job_id == job && r.state == RunState::Running)
            .then_some(())
    });
    (host, store)
}

/// Cancelled by the stop: recorded `cancelled`, reason shutdown (never `timed_out`).
fn assert_cancelled_by_shutdown(run: &Run) {
    assert_eq!(run.state, RunState::Cancelled, "{run:?}");
    assert_eq!(
        run.error.as_deref(),
        Some("cancelled (shutdown)"),
        "{run:?}"
    );
}

/// Nothing is left `running` (or `pending`) in the database.
fn assert_all_final(store: &SqliteStore, host: &Host) -> Run {
    let all = runs(store);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(all[0].state.is_final(), "{:?}\n{}", all[0], host.output());
    all[0].clone()
}

#[test]
fn sigterm_lets_the_running_run_finish_and_exits_0() {
    build_examples();
    let dir = temp_dir("drain");
    write_config(&dir, "30s", 3.0);
    let (mut host, store) = running_host(&dir, "drain");
    host.signal("TERM");
    let status = host.wait_exit();
    assert_eq!(status.code(), Some(0), "{status}\n{}", host.output());
    let stdout = host.stdout();
    assert!(
        stdout.contains("stopping: SIGTERM received; waiting up to 30s for 1 running runs"),
        "{stdout}"
    );
    let run = assert_all_final(&store, &host);
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    assert!(stdout.contains("every run is recorded in"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_past_the_grace_cancels_as_shutdown_and_exits_0() {
    build_examples();
    let dir = temp_dir("grace");
    write_config(&dir, "1s", 120.0);
    let (mut host, store) = running_host(&dir, "grace");
    let t0 = Instant::now();
    host.signal("TERM");
    let status = host.wait_exit();
    assert_eq!(status.code(), Some(0), "{status}\n{}", host.output());
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert_cancelled_by_shutdown(&assert_all_final(&store, &host));
    let stdout = host.stdout();
    assert!(stdout.contains("1 cancelled"), "{stdout}");
    assert!(stdout.contains("every run is recorded in"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_signal_cancels_at_once_and_still_records() {
    build_examples();
    let dir = temp_dir("second");
    write_config(&dir, "10m", 600.0);
    let (mut host, store) = running_host(&dir, "second");
    host.signal("TERM");
    host.wait_for_line("stopping: SIGTERM received; waiting up to 10m");
    let t0 = Instant::now();
    host.signal("INT");
    let status = host.wait_exit();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the second signal did not cut the 10m grace short: {:?}",
        t0.elapsed()
    );
    assert_eq!(
        status.code(),
        Some(1),
        "a forced stop: {status}\n{}",
        host.output()
    );
    let stdout = host.stdout();
    assert!(
        stdout.contains(
            "stopping: SIGINT (Ctrl-C) received: second stop request, cancelling 1 running runs now"
        ),
        "{stdout}"
    );
    let stderr = host.stderr();
    assert!(
        stderr.contains("error: the stop was forced by a second stop request: 1 running runs"),
        "{stderr}"
    );
    assert_cancelled_by_shutdown(&assert_all_final(&store, &host));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_with_nothing_running_exits_0_at_once() {
    build_examples();
    let dir = temp_dir("idle");
    write_config(&dir, "10s", 1.0);
    let mut host = Host::spawn(takt_command(&dir).args(["run"]), &dir, "idle");
    host.wait_for_line("running; Ctrl-C or SIGTERM stops");
    host.signal("TERM");
    let status = host.wait_exit();
    assert_eq!(status.code(), Some(0), "{status}\n{}", host.output());
    assert!(
        host.stdout()
            .contains("stopping: SIGTERM received; no run is running"),
        "{}",
        host.output()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_closed_stdout_does_not_stop_the_host() {
    build_examples();
    let dir = temp_dir("closed-stdout");
    let cfg = format!(
        "plugin_dir = {:?}\n[[jobs]]\nname = \"hello\"\nhandler = \"examples::hello\"\n\
         params = {{ name = \"nobody\" }}\nevery = \"1s\"\n",
        common::profile_dir().display().to_string()
    );
    std::fs::write(dir.join("takt.toml"), cfg).unwrap();
    let mut child = takt_command(&dir)
        .args(["run", "--for", "4s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // As `takt run | head -1` after its first line: nobody reads the run lines.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("cannot write to stdout").count(),
        1,
        "one warning: {stderr}"
    );
    let store = store(&dir);
    let all = runs(&store);
    assert!(
        all.iter()
            .filter(|r| r.state == RunState::Succeeded)
            .count()
            >= 2,
        "the host kept running its jobs: {all:#?}"
    );
    assert!(all.iter().all(|r| r.state.is_final()), "{all:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
