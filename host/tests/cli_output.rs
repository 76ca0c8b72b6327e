//! `takt … | head -1`: a closed stdout ends a command quietly with exit code 0 and nothing on
//! stderr, as `ls | head -1` does, instead of a panic ("failed printing to stdout: Broken
//! pipe", exit 101).
//!
//! Each listing command runs twice: as `| head -1` (one line read, then the read end closed
//! while takt still writes: the data is made large enough that its output cannot fit in the
//! pipe's buffer) and as `| true` (the read end closed before takt writes anything, which
//! reaches even the commands that print a few lines).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use takt_core::Timestamp;
use takt_core::job::{JobDef, JobName};
use takt_core::store::conformance::block_on;
use takt_core::store::{LogLevel, LogLine, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

/// Well above a pipe's buffer (64 KiB on Linux) for every command of the `| head -1` runs.
const JOBS: usize = 1200;
const RUNS: usize = 1500;
const LOG_LINES: usize = 4000;

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "takt-cli-output-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_takt"));
        cmd.args(args)
            .current_dir(&self.0)
            .env_remove("TAKT_DB")
            .env_remove("TAKT_PLUGIN_DIR")
            .env_remove("TAKT_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `takt ARGS | head -1`: the first line, and how takt ended.
fn head_1(d: &TempDir, args: &[&str]) -> (String, Output) {
    let mut child = d.command(args).spawn().expect("takt starts");
    let mut first = String::new();
    {
        let stdout = child.stdout.take().expect("a piped stdout");
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("the first line can be read");
        // The reader goes away here, with most of the output still to come.
    }
    (
        first,
        child.wait_with_output().expect("takt can be waited for"),
    )
}

/// `takt ARGS | true`: stdout is closed before takt writes its first byte.
fn closed_at_once(d: &TempDir, args: &[&str]) -> Output {
    let mut child = d.command(args).spawn().expect("takt starts");
    drop(child.stdout.take());
    child.wait_with_output().expect("takt can be waited for")
}

fn assert_quiet(args: &[&str], how: &str, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "takt {args:?} {how}: exit {:?}, stderr: {stderr}",
        out.status
    );
    assert!(
        stderr.is_empty(),
        "takt {args:?} {how}: stderr must stay empty: {stderr}"
    );
}

/// A database with [`JOBS`] jobs, one of which has [`RUNS`] runs, one of those with
/// [`LOG_LINES`] log lines. Returns that run's id.
fn seed(d: &TempDir) -> i64 {
    let store = SqliteStore::open(d.0.join("takt.db"), &SqliteOptions::default()).expect("open");
    let now = Timestamp::now();
    let mut first = None;
    for i in 0..JOBS {
        let mut job = JobDef::new(&format!("job-{i:05}"), "examples::hello").expect("a job");
        job.description = Some("a job with a description long enough to fill a line".into());
        let stored = block_on(store.job_insert(&job, now)).expect("insert");
        first.get_or_insert(stored.id.expect("an id"));
    }
    let job = first.expect("a job");
    let mut run = None;
    for i in 0..RUNS {
        let fire = Timestamp::from_second(1_700_000_000 + i as i64 * 60).expect("an instant");
        let r = block_on(store.run_enqueue(job, fire, now)).expect("enqueue");
        run.get_or_insert(r.id.expect("an id"));
    }
    let run = run.expect("a run");
    let lines: Vec<LogLine> = (0..LOG_LINES)
        .map(|i| LogLine {
            at: now,
            level: LogLevel::Info,
            message: format!("log line {i} of a run that talks a lot"),
        })
        .collect();
    block_on(store.log_append(run, &lines)).expect("log");
    run.0
}

#[test]
fn listings_piped_into_head_end_quietly() {
    let d = TempDir::new("head");
    let run = seed(&d).to_string();
    let limit = RUNS.to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["job", "list"],
        vec!["job", "list", "--json"],
        vec!["runs", "--limit", &limit],
        vec!["runs", "--limit", &limit, "--json"],
        vec!["logs", &run],
        vec!["logs", &run, "--json"],
        vec!["logs", &run, "--follow"],
        vec!["schedule", "next", "--every", "1m", "-n", "10000"],
        vec!["schedule", "next", "--every", "1m", "-n", "10000", "--json"],
        vec!["cron", "explain", "*/5 * * * *", "-n", "10000"],
    ];
    for args in &cases {
        let (first, out) = head_1(&d, args);
        assert!(!first.is_empty(), "takt {args:?} printed nothing");
        assert_quiet(args, "| head -1", &out);
    }
}

#[test]
fn every_command_ends_quietly_on_a_stdout_closed_before_it_writes() {
    let d = TempDir::new("closed");
    let run = seed(&d).to_string();
    let plugins = d.0.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let plugins = plugins.to_str().unwrap().to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["job", "list"],
        vec!["job", "show", "job-00000"],
        vec!["job", "show", "job-00000", "--json"],
        vec!["runs"],
        vec!["logs", &run],
        vec!["nodes"],
        vec!["nodes", "--json"],
        vec!["plugin", "list", "--dir", &plugins],
        vec!["plugin", "list", "--dir", &plugins, "--json"],
        vec!["schedule", "next", "--cron", "0 3 * * *"],
        vec!["cron", "explain", "0 3 * * *"],
        vec!["db", "migrate"],
        vec!["job", "disable", "job-00001"],
        vec!["--version"],
        vec!["job", "--help"],
    ];
    for args in &cases {
        let out = closed_at_once(&d, args);
        assert_quiet(args, "| true", &out);
    }
    // The command did its work before it found nobody listening.
    let store = SqliteStore::open(d.0.join("takt.db"), &SqliteOptions::default()).expect("open");
    let job = block_on(store.job_get_by_name(&JobName::new("job-00001").expect("a name")))
        .expect("read")
        .expect("the job");
    assert!(
        !job.enabled,
        "job disable ran although its stdout was closed"
    );
}

#[test]
fn a_failing_command_still_says_why_and_exits_1_with_stdout_closed() {
    let d = TempDir::new("failing");
    let out = d.command(&["db", "migrate"]).output().expect("takt runs");
    assert!(out.status.success(), "{out:?}");
    let out = closed_at_once(&d, &["job", "show", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no job named \"nope\""), "{stderr}");
    // Usage errors keep exit code 2.
    let out = closed_at_once(&d, &["job", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}
