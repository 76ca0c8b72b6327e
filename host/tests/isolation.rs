//! Process isolation against the real `testing` plugin and the real `takt` binary as the
//! worker program: crashes (a null write, an abort, a stack overflow, an unbounded
//! allocation), a call that ignores cancellation (and leaves a child process), the host and
//! its other runs going on, and nothing left behind — counted by pid (`/proc`) and by thread
//! (`/proc/self/task`).
//!
//! The counts are of this test process: its children (worker processes and what they start)
//! and its threads by name (`takt-worker-err`: a worker's standard-error reader;
//! `takt-workers`: the keeper; `takt-run`: the executor's call threads, reused and idle up to
//! 30 s, never more than the capacity unless abandoned). Tests that count run one at a time
//! (`SERIAL`).

#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use takt_core::job::Isolation;
use takt_host::executor::{Executor, ExecutorConfig, Outcome, RunReport, RunRequest, RunSink};
use takt_host::plugins::{LoadOptions, LoadedPlugin, Plugins};
use takt_host::worker::{WorkerSettings, Workers};
use takt_plugin_api::abi::LogLevel;

/// Tests that count processes and threads must not overlap.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The testing plugin, built once, copied into a directory of this process's own (with its
/// shadow directory beside it).
///
/// One directory per process, not per test binary: nextest runs each test in a process of its
/// own, and a directory shared between them let one process's start (which cleared it) or
/// host (which prunes shadow copies it does not hold) delete a copy another process's worker
/// was about to load.
fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let built = common::build(&["takt-plugin-testing"]);
        // Under the target directory: a static has no teardown, so each process clears the
        // directories of processes that are gone instead of leaving its own to pile up.
        let root = built.join("isolation-tests");
        if let Ok(entries) = std::fs::read_dir(&root) {
            for entry in entries.flatten() {
                let gone = entry
                    .file_name()
                    .to_str()
                    .and_then(|name| name.parse::<u32>().ok())
                    .is_none_or(|pid| !alive(pid));
                if gone {
                    // An older layout kept files at the root: those go too.
                    let _ = std::fs::remove_dir_all(entry.path())
                        .or_else(|_| std::fs::remove_file(entry.path()));
                }
            }
        }
        let dir = root.join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = common::cdylib(&built, "takt-plugin-testing");
        std::fs::copy(&file, dir.join(file.file_name().unwrap())).unwrap();
        dir
    })
}

fn settings() -> WorkerSettings {
    WorkerSettings {
        max_workers: 4,
        memory_limit: Some(256 << 20),
        ..WorkerSettings::new(env!("CARGO_BIN_EXE_takt"))
    }
}

fn options() -> LoadOptions {
    LoadOptions {
        shadow_dir: plugin_dir().join("shadow"),
        ..LoadOptions::default()
    }
}

/// The testing plugin with workers, opened in process or isolated.
fn registry(isolate: bool) -> Plugins {
    let mut b = Plugins::builder()
        .dir(plugin_dir())
        .options(options())
        .workers(Workers::new(settings()));
    if isolate {
        b = b.isolate(["testing"]);
    }
    b.build().expect("the plugins load")
}

fn testing(plugins: &Plugins) -> Arc<LoadedPlugin> {
    plugins
        .current()
        .plugins()
        .iter()
        .find(|p| p.name == "testing")
        .cloned()
        .expect("the testing plugin loaded")
}

#[derive(Default)]
struct Recorder(Mutex<Vec<(LogLevel, String)>>);

impl RunSink for Recorder {
    fn log(&self, level: LogLevel, message: &str) {
        self.0.lock().unwrap().push((level, message.to_string()));
    }
    fn progress(&self, _: u64, _: u64, _: &str) {}
}

impl Recorder {
    fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, m)| m.clone())
            .collect()
    }
}

fn request(
    plugins: &Plugins,
    handler: &str,
    params: Value,
    timeout: Option<Duration>,
) -> RunRequest {
    let p = testing(plugins);
    RunRequest {
        target: plugins.target(&p, Isolation::Process).expect("isolated"),
        handler: handler.to_string(),
        handler_type: format!("testing::{handler}"),
        params_json: params.to_string(),
        job_id: "1".into(),
        job_name: "isolated".into(),
        run_id: "7".into(),
        attempt: 1,
        fire_time: "2026-06-01T10:00:00Z".parse().unwrap(),
        timeout,
        not_before: None,
    }
}

fn executor(grace: Duration) -> Executor {
    Executor::new(ExecutorConfig {
        capacity: 4,
        grace,
        ..ExecutorConfig::default()
    })
}

// ---- /proc ----------------------------------------------------------------------------------

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: the comm may hold spaces, so read after its ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            out.insert(pid);
        }
    }
    out
}

fn my_children() -> BTreeSet<u32> {
    children_of(std::process::id())
}

/// Whether `pid` is alive (a zombie waiting for an init that does not reap counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// This process's threads whose name starts with `prefix`.
fn threads(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim_end().starts_with(prefix))
        })
        .count()
}

/// Waits up to `limit` for `f`.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

fn failed_message(report: &RunReport) -> &str {
    match &report.outcome {
        Outcome::Failed { message, .. } => message,
        other => panic!("expected a failure, got {other:?}"),
    }
}

// ---- tests ----------------------------------------------------------------------------------

/// Each crash kind fails its own run with a precise reason while a run beside it, in another
/// worker, succeeds; the dead worker is replaced (the next call works); afterwards no worker
/// process, reader thread or call thread is left beyond what the pool keeps idle, and a
/// shutdown ends those too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_fail_only_their_run_and_leave_nothing_behind() {
    let _serial = SERIAL.lock().await;
    let plugins = registry(true);
    let p = testing(&plugins);
    assert!(
        p.is_isolated(),
        "a plugin the host isolates is never mapped into it"
    );
    assert!(p.module().is_none());
    let exec = executor(Duration::from_millis(500));
    let before_children = my_children();
    // Idle call threads of earlier tests' executors linger for their idle timeout.
    let run_threads_before = threads("takt-run");

    let cases = [
        ("segv", "SIGSEGV"),
        ("abort", "SIGABRT"),
        ("stack", "the plugin overflowed its stack"),
        (
            "oom",
            "the plugin ran out of memory (the worker's limit is 256 MiB)",
        ),
    ];
    for (kind, expected) in cases {
        let crash_sink = Arc::new(Recorder::default());
        let other_sink = Arc::new(Recorder::default());
        let crash = exec.run(
            request(&plugins, "crash", json!({ "kind": kind }), None),
            crash_sink.clone(),
        );
        let other = exec.run(
            request(&plugins, "polite", json!({ "seconds": 0.3 }), None),
            other_sink.clone(),
        );
        let (crash, other) = tokio::join!(crash, other);
        let message = failed_message(&crash);
        eprintln!("{kind}: {message}");
        assert!(message.contains(expected), "{kind}: {message}");
        assert!(
            message.contains("ended during the call") && message.contains("worker process"),
            "{kind}: {message}"
        );
        assert!(
            message.contains(&format!("crashing on purpose: {}", capitalised(kind))),
            "{kind}: the run's last log lines are quoted: {message}"
        );
        assert!(
            !crash.outcome.is_retryable_failure(),
            "{kind}: a crash is the plugin's own, like a panic"
        );
        assert!(
            matches!(other.outcome, Outcome::Succeeded { .. }),
            "{kind}: the run beside it goes on: {:?}",
            other.outcome
        );
    }
    // The dead workers were replaced: the pool serves the next call.
    let again = exec
        .run(
            request(&plugins, "echo", json!({ "after": "crashes" }), None),
            Arc::new(Recorder::default()),
        )
        .await;
    assert!(
        matches!(again.outcome, Outcome::Succeeded { .. }),
        "{again:?}"
    );
    let stats = plugins.worker_stats().unwrap();
    assert_eq!(stats.crashed, 4, "{stats:?}");
    assert_eq!(exec.stats().abandoned_total, 0);

    // What is left: the idle workers of the pool, each a child with one reader thread.
    let workers = p.worker_pool().unwrap().live();
    assert!((1..=2).contains(&workers), "{workers} idle workers");
    assert!(
        eventually(Duration::from_secs(5), || {
            my_children().difference(&before_children).count() == workers
        }),
        "children {:?} (before {before_children:?}), {workers} workers",
        my_children()
    );
    assert!(
        eventually(Duration::from_secs(5), || threads("takt-worker-err")
            == workers),
        "reader threads: {}",
        threads("takt-worker-err")
    );
    assert!(
        threads("takt-run") <= run_threads_before + 4,
        "call threads stay within the capacity: none is abandoned"
    );

    plugins.shutdown_workers(Duration::from_secs(5));
    assert!(
        eventually(Duration::from_secs(5), || my_children()
            .difference(&before_children)
            .next()
            .is_none()),
        "every worker ended: {:?}",
        my_children()
    );
    assert!(
        eventually(Duration::from_secs(5), || threads("takt-worker") == 0),
        "reader and keeper threads ended: {}",
        threads("takt-worker")
    );
}

fn capitalised(kind: &str) -> String {
    let mut c = kind.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// A call that ignores its cancel is timed out and *stopped*: its worker is killed with the
/// child process the plugin started, no thread is abandoned, and the next call gets a new
/// worker. In process, the same handler leaves an abandoned thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_ignores_cancellation_is_killed_with_its_tree() {
    let _serial = SERIAL.lock().await;
    let plugins = registry(false);
    let p = testing(&plugins);
    assert!(
        !p.is_isolated(),
        "not isolated by the host: mapped, isolated per job"
    );
    let exec = executor(Duration::from_millis(300));
    let sink = Arc::new(Recorder::default());
    let begun = Instant::now();
    let report = exec
        .run(
            request(
                &plugins,
                "orphan",
                json!({ "seconds": 30 }),
                Some(Duration::from_secs(1)),
            ),
            sink.clone(),
        )
        .await;
    let waited = begun.elapsed();
    let Outcome::TimedOut {
        stopped, message, ..
    } = &report.outcome
    else {
        panic!("{report:?}");
    };
    eprintln!("orphan: {message}");
    assert!(*stopped, "killed, not abandoned: {message}");
    assert!(message.contains("worker process was killed"), "{message}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    let child: u32 = sink
        .lines()
        .iter()
        .find_map(|l| l.strip_prefix("child pid ").and_then(|p| p.parse().ok()))
        .expect("the plugin logged its child's pid");
    assert!(
        eventually(Duration::from_secs(5), || !alive(child)),
        "the plugin's child {child} was killed with the worker"
    );
    let stats = exec.stats();
    assert_eq!(
        (stats.abandoned_total, stats.killed_total),
        (0, 1),
        "{stats:?}"
    );
    assert_eq!(plugins.worker_stats().unwrap().killed, 1);

    // The next call starts a fresh worker.
    let next = exec
        .run(
            request(&plugins, "polite", json!({ "seconds": 0.1 }), None),
            Arc::new(Recorder::default()),
        )
        .await;
    assert!(
        matches!(next.outcome, Outcome::Succeeded { .. }),
        "{next:?}"
    );

    // A cancel honoured within the grace stops the call normally, worker kept.
    let spawned = plugins.worker_stats().unwrap().spawned;
    let report = exec
        .run(
            request(
                &plugins,
                "polite",
                json!({ "seconds": 30 }),
                Some(Duration::from_millis(500)),
            ),
            Arc::new(Recorder::default()),
        )
        .await;
    assert!(
        matches!(&report.outcome, Outcome::TimedOut { stopped: true, message, .. }
            if message.contains("returned within")),
        "{report:?}"
    );
    assert_eq!(
        plugins.worker_stats().unwrap().spawned,
        spawned,
        "a worker whose call honoured the cancel is reused"
    );

    // In process, the stubborn handler keeps its thread.
    let in_process = exec
        .run(
            RunRequest {
                target: p.module().unwrap().into(),
                ..request(
                    &plugins,
                    "stubborn",
                    json!({ "seconds": 2 }),
                    Some(Duration::from_millis(200)),
                )
            },
            Arc::new(Recorder::default()),
        )
        .await;
    assert!(
        matches!(in_process.outcome, Outcome::TimedOut { stopped: false, .. }),
        "{in_process:?}"
    );
    assert_eq!(exec.stats().abandoned_total, 1);
    plugins.shutdown_workers(Duration::from_secs(5));
}

/// Logs, progress and results cross the pipe in order; params and the run's facts reach the
/// plugin; a plugin's own standard output cannot break the frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_results_and_facts_cross_the_pipe() {
    let _serial = SERIAL.lock().await;
    let plugins = registry(true);
    let exec = executor(Duration::from_millis(500));
    let sink = Arc::new(Recorder::default());
    let report = exec
        .run(
            request(
                &plugins,
                "chatty",
                json!({ "lines": 300, "bytes": 40 }),
                None,
            ),
            sink.clone(),
        )
        .await;
    assert_eq!(report.outcome.result_json(), Some(r#"{"lines":300}"#));
    let lines = sink.lines();
    assert_eq!(lines.len(), 300, "{:?}", &lines[..3.min(lines.len())]);
    assert!(lines[0].starts_with("line 1 of 300"), "{}", lines[0]);
    assert!(lines[299].starts_with("line 300 of 300"), "{}", lines[299]);

    let report = exec
        .run(
            request(&plugins, "echo", json!({ "x": [1, 2, 3] }), None),
            Arc::new(Recorder::default()),
        )
        .await;
    let v: Value = serde_json::from_str(report.outcome.result_json().unwrap()).unwrap();
    assert_eq!(v["params"], json!({ "x": [1, 2, 3] }));
    assert_eq!(v["run_id"], "7");
    assert_eq!(v["job_name"], "isolated");
    assert_eq!(v["attempt"], 1);

    let report = exec
        .run(
            request(
                &plugins,
                "fail",
                json!({ "message": "no disk", "retryable": true }),
                None,
            ),
            Arc::new(Recorder::default()),
        )
        .await;
    assert!(
        matches!(&report.outcome, Outcome::Failed { message, retryable: true, data: Some(d), .. }
            if message == "no disk" && d.contains("hint")),
        "{report:?}"
    );
    let report = exec
        .run(
            request(&plugins, "panic", json!({ "message": "boom" }), None),
            Arc::new(Recorder::default()),
        )
        .await;
    assert!(failed_message(&report).contains("boom"), "{report:?}");
    plugins.shutdown_workers(Duration::from_secs(5));
}

/// Through the embedding API: a job that asks for process isolation gets it (its crash fails
/// its run, recorded with the plugin build; the host goes on and runs the next job in
/// process), and a job whose isolation cannot be honoured fails saying why — a plugin
/// compiled into the program, a built-in handler, a host without a worker program.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_ask_for_isolation_and_the_host_goes_on() {
    use takt_core::run::RunState;
    use takt_core::store::Store;
    use takt_core::store::memory::MemoryStore;
    use takt_host::embed::HostBuilder;
    use takt_host::worker::WorkerProgram;
    use takt_plugin_api::sdk::{JobContext, Plugin};

    let _serial = SERIAL.lock().await;
    let compiled_in = takt_plugin_api::static_plugin!(|| Plugin::new("inside").handler(
        "noop",
        "does nothing",
        |_: &JobContext, (): ()| Ok(())
    ))
    .unwrap();
    let store = MemoryStore::default();
    let host = HostBuilder::new(store.clone())
        .plugin_dir(plugin_dir())
        .load_options(options())
        .static_plugin(compiled_in)
        .worker_program(WorkerProgram::Path(env!("CARGO_BIN_EXE_takt").into()))
        .start()
        .await
        .unwrap();
    let run = |handler: &'static str, params: Value, isolation: Isolation| {
        let host = &host;
        let store = &store;
        async move {
            let mut events = host.subscribe();
            let n = store.job_list().await.unwrap().len();
            let mut job = takt_core::job::JobDef::new(&format!("j{n}"), handler).unwrap();
            job.params_json = params.to_string();
            job.isolation = isolation;
            let id = host.add_job(job).await.unwrap().id.unwrap();
            host.trigger(id).await.unwrap();
            let run = loop {
                match events.recv().await.unwrap() {
                    takt_host::scheduler::SchedulerEvent::Finished { run, state, .. }
                        if state != RunState::Pending =>
                    {
                        break run;
                    }
                    _ => {}
                }
            };
            store.run_get(run).await.unwrap().unwrap()
        }
    };
    let crashed = run(
        "testing::crash",
        json!({ "kind": "segv" }),
        Isolation::Process,
    )
    .await;
    assert_eq!(crashed.state, RunState::Failed);
    let error = crashed.error.clone().unwrap_or_default();
    assert!(error.contains("SIGSEGV"), "{error}");
    let build = crashed.plugin.clone().expect("the build that ran it");
    assert_eq!(
        (build.name.as_str(), build.sha256.is_some()),
        ("testing", true)
    );

    let fine = run("testing::echo", json!({}), Isolation::InProcess).await;
    assert_eq!(
        fine.state,
        RunState::Succeeded,
        "the host goes on: {fine:?}"
    );
    let isolated = run("testing::echo", json!({}), Isolation::Process).await;
    assert_eq!(isolated.state, RunState::Succeeded, "{isolated:?}");

    let inside = run("inside::noop", json!({}), Isolation::Process).await;
    assert_eq!(inside.state, RunState::Failed);
    assert!(
        inside
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("compiled into this host"),
        "{inside:?}"
    );
    let builtin = run("takt::retention", json!({ "days": 30 }), Isolation::Process).await;
    assert!(
        builtin
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("runs inside the host"),
        "{builtin:?}"
    );
    host.shutdown(Duration::from_secs(5)).await;

    // An embedding program (this test binary is not `takt`) has no worker program unless it
    // names one: the job's isolation is refused with the way out.
    let store = MemoryStore::default();
    let host = HostBuilder::new(store.clone())
        .plugin_dir(plugin_dir())
        .load_options(options())
        .start()
        .await
        .unwrap();
    let mut events = host.subscribe();
    let mut job = takt_core::job::JobDef::new("needs-worker", "testing::echo").unwrap();
    job.isolation = Isolation::Process;
    let id = host.add_job(job).await.unwrap().id.unwrap();
    host.trigger(id).await.unwrap();
    let run = loop {
        if let takt_host::scheduler::SchedulerEvent::Finished { run, .. } =
            events.recv().await.unwrap()
        {
            break store.run_get(run).await.unwrap().unwrap();
        }
    };
    assert!(
        run.error
            .as_deref()
            .unwrap_or_default()
            .contains("no worker program"),
        "{run:?}"
    );
    host.shutdown(Duration::from_secs(5)).await;
    // And isolating plugins without one refuses the start.
    let Err(e) = HostBuilder::new(MemoryStore::default())
        .plugin_dir(plugin_dir())
        .load_options(options())
        .isolate(["testing"])
        .start()
        .await
    else {
        panic!("isolate without a worker program must not start");
    };
    assert!(e.to_string().contains("no worker program"), "{e}");
}

/// A worker program that does not serve worker mode is caught at its start: one that exits
/// (here `sh`, which does not know `--takt-worker`) fails the call with its exit and last
/// lines, one that hangs (an embedding program that forgot `serve_if_worker`) is killed after
/// the start timeout; either way nothing of it is left, and the call may be retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_program_that_does_not_serve_is_caught_at_its_start() {
    let _serial = SERIAL.lock().await;
    let before = my_children();
    let hanging = plugin_dir().join("hangs.sh");
    std::fs::write(
        &hanging,
        "#!/bin/sh\necho 'an unprepared program starts' >&2\nsleep 30\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hanging, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for (program, expected) in [
        (
            PathBuf::from("/bin/sh"),
            "ended before its hello: it exited with code",
        ),
        (hanging.clone(), "did not answer within 500ms"),
    ] {
        let plugins = Plugins::builder()
            .dir(plugin_dir())
            .options(options())
            .workers(Workers::new(WorkerSettings {
                start_timeout: Duration::from_millis(500),
                ..WorkerSettings::new(&program)
            }))
            .build()
            .unwrap();
        let report = executor(Duration::from_millis(200))
            .run(
                request(&plugins, "echo", json!({}), None),
                Arc::new(Recorder::default()),
            )
            .await;
        let Outcome::Failed {
            message, retryable, ..
        } = &report.outcome
        else {
            panic!("{report:?}");
        };
        eprintln!("{}: {message}", program.display());
        assert!(
            message.contains("cannot start a worker process"),
            "{message}"
        );
        assert!(message.contains(expected), "{message}");
        assert!(*retryable, "the worker program's trouble, not the plugin's");
        if program == hanging {
            assert!(
                message.contains("serve_if_worker") && message.contains("unprepared program"),
                "the fix and its last lines: {message}"
            );
        }
        plugins.shutdown_workers(Duration::from_secs(5));
    }
    assert!(
        eventually(Duration::from_secs(5), || my_children() == before),
        "nothing left: {:?} (before {before:?})",
        my_children()
    );
}

/// `max_workers` bounds the worker processes: with one, two calls at once take turns on the
/// same worker instead of starting a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_workers_bounds_the_processes() {
    let _serial = SERIAL.lock().await;
    let plugins = Plugins::builder()
        .dir(plugin_dir())
        .options(options())
        .workers(Workers::new(WorkerSettings {
            max_workers: 1,
            ..settings()
        }))
        .build()
        .unwrap();
    let exec = executor(Duration::from_millis(500));
    let begun = Instant::now();
    let (a, b) = tokio::join!(
        exec.run(
            request(&plugins, "polite", json!({ "seconds": 0.5 }), None),
            Arc::new(Recorder::default())
        ),
        exec.run(
            request(&plugins, "polite", json!({ "seconds": 0.5 }), None),
            Arc::new(Recorder::default())
        ),
    );
    assert!(matches!(a.outcome, Outcome::Succeeded { .. }), "{a:?}");
    assert!(matches!(b.outcome, Outcome::Succeeded { .. }), "{b:?}");
    assert!(
        begun.elapsed() >= Duration::from_millis(1000),
        "they took turns"
    );
    let stats = plugins.worker_stats().unwrap();
    assert_eq!((stats.spawned, stats.live), (1, 1), "{stats:?}");
    plugins.shutdown_workers(Duration::from_secs(5));
    assert_eq!(plugins.worker_stats().unwrap().live, 0);
}
