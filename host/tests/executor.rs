//! The executor against real plugin libraries: `takt-plugin-testing` (misbehaving handlers)
//! and `takt-plugin-examples` (an async handler), built once per test binary.
//!
//! Timing assertions use generous margins (a second or more) because other builds share the
//! machine; what they check is the order of magnitude: "within the grace period" versus "after
//! the plugin's full sleep".

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use takt_host::executor::{
    CancelReason, CancelToken, Executor, ExecutorConfig, LogLimits, Outcome, RunReport, RunRequest,
    RunSink,
};
use takt_plugin_api::abi::{ErrorKind, LogLevel, PluginRef};

// ---------------------------------------------------------------------------------------------
// Building and loading the plugins

struct Plugins {
    testing: PluginRef,
    examples: PluginRef,
}

/// Builds both plugin crates once per test binary (see `common`), then loads them.
fn plugins() -> &'static Plugins {
    static PLUGINS: OnceLock<Plugins> = OnceLock::new();
    PLUGINS.get_or_init(|| {
        let dir = common::build(&["takt-plugin-testing", "takt-plugin-examples"]);
        Plugins {
            testing: load(&dir, "takt-plugin-testing"),
            examples: load(&dir, "takt-plugin-examples"),
        }
    })
}

fn load(dir: &Path, package: &str) -> PluginRef {
    let path = common::cdylib(dir, package);
    let path = path.canonicalize().unwrap_or(path);
    abi_stable::library::lib_header_from_path(&path)
        .and_then(|h| h.init_root_module::<PluginRef>())
        .unwrap_or_else(|e| panic!("cannot load {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// A sink that keeps everything, with the instant of arrival.
#[derive(Default)]
struct Recorder {
    logs: Mutex<Vec<(LogLevel, String)>>,
    progress: Mutex<Vec<(u64, u64, String)>>,
}

impl RunSink for Recorder {
    fn log(&self, level: LogLevel, message: &str) {
        self.logs.lock().unwrap().push((level, message.to_string()));
    }
    fn progress(&self, done: u64, total: u64, note: &str) {
        self.progress
            .lock()
            .unwrap()
            .push((done, total, note.to_string()));
    }
}

impl Recorder {
    fn lines(&self) -> Vec<(LogLevel, String)> {
        self.logs.lock().unwrap().clone()
    }
}

fn executor(capacity: usize, grace_ms: u64) -> Executor {
    Executor::new(ExecutorConfig {
        capacity,
        grace: Duration::from_millis(grace_ms),
        ..ExecutorConfig::default()
    })
}

fn request(plugin: PluginRef, handler_type: &str, params: Value) -> RunRequest {
    let handler = handler_type
        .split_once("::")
        .map_or(handler_type, |(_, h)| h);
    RunRequest {
        target: plugin.into(),
        handler: handler.to_string(),
        handler_type: handler_type.to_string(),
        params_json: params.to_string(),
        job_id: "job-1".into(),
        job_name: "nightly".into(),
        run_id: "run-1".into(),
        attempt: 1,
        fire_time: "2024-03-10T02:30:00Z".parse().unwrap(),
        timeout: None,
        not_before: None,
    }
}

fn testing(handler: &str, params: Value) -> RunRequest {
    request(plugins().testing, &format!("testing::{handler}"), params)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits up to `limit` for `f` to hold.
async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if f() {
            return true;
        }
        tokio::time::sleep(ms(20)).await;
    }
    f()
}

// ---------------------------------------------------------------------------------------------
// Results, logs, progress

#[tokio::test]
async fn results_logs_and_progress_reach_the_sink() {
    let exec = executor(4, 500);
    let sink = Arc::new(Recorder::default());
    let report = exec
        .run(
            request(
                plugins().examples,
                "examples::hello",
                json!({"name": "takt"}),
            ),
            sink.clone(),
        )
        .await;
    let Outcome::Succeeded { result_json } = &report.outcome else {
        panic!("{report:?}");
    };
    assert_eq!(
        serde_json::from_str::<Value>(result_json).unwrap(),
        json!({"greeting": "hello, takt"})
    );
    assert!(report.started.is_some());
    assert_eq!(report.outcome.state_name(), "succeeded");
    assert_eq!(report.outcome.error_text(), None);
    let lines = sink.lines();
    assert!(
        lines
            .iter()
            .any(|(l, m)| *l == LogLevel::INFO && m.contains("greeting someone")),
        "the tracing event is missing: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|(_, m)| m == "job nightly says hello, takt"),
        "the ctx.info line is missing: {lines:?}"
    );
    assert_eq!(
        *sink.progress.lock().unwrap(),
        [(1, 1, "greeted".to_string())]
    );

    // Many lines of both kinds, in order, with progress every 100.
    let sink = Arc::new(Recorder::default());
    let report = exec
        .run(
            testing("chatty", json!({"lines": 250, "bytes": 20})),
            sink.clone(),
        )
        .await;
    assert_eq!(report.outcome.result_json(), Some(r#"{"lines":250}"#));
    assert_eq!(report.log_lines_dropped, 0);
    let lines = sink.lines();
    assert_eq!(lines.len(), 250);
    assert_eq!(lines[0].0, LogLevel::INFO, "odd lines come through tracing");
    assert!(lines[0].1.starts_with("line 1 of 250"), "{:?}", lines[0]);
    assert!(
        lines[0].1.ends_with("n=1"),
        "tracing fields: {:?}",
        lines[0]
    );
    assert_eq!(
        lines[1].0,
        LogLevel::WARN,
        "even lines come through ctx.log"
    );
    assert!(lines[249].1.starts_with("line 250 of 250"));
    let progress: Vec<u64> = sink.progress.lock().unwrap().iter().map(|p| p.0).collect();
    assert_eq!(progress, [100, 200, 250]);
}

#[tokio::test]
async fn echo_sees_the_facts_of_the_run() {
    let exec = executor(1, 500);
    let fire_time: jiff::Timestamp = "2031-12-24T18:00:00.250Z".parse().unwrap();
    let req = RunRequest {
        job_id: "job-42".into(),
        job_name: "reconcile payments".into(),
        run_id: "run-7".into(),
        attempt: 3,
        fire_time,
        timeout: Some(Duration::from_secs(20)),
        ..testing("echo", json!({"bizDate": "2031-12-24", "n": [1, 2]}))
    };
    let report = exec.run(req, Arc::new(Recorder::default())).await;
    let echoed: Value = serde_json::from_str(report.outcome.result_json().expect("success"))
        .unwrap_or_else(|e| panic!("{e}: {report:?}"));
    assert_eq!(
        echoed,
        json!({
            "params": {"bizDate": "2031-12-24", "n": [1, 2]},
            "job_id": "job-42",
            "job_name": "reconcile payments",
            "run_id": "run-7",
            "attempt": 3,
            "fire_time_unix_ms": fire_time.as_millisecond(),
        })
    );
}

// ---------------------------------------------------------------------------------------------
// Failures

#[tokio::test]
async fn a_panic_fails_the_run_and_the_executor_carries_on() {
    let exec = executor(1, 500);
    let report = exec
        .run(
            testing("panic", json!({"message": "boom in the handler"})),
            Arc::new(Recorder::default()),
        )
        .await;
    match &report.outcome {
        Outcome::Failed {
            kind,
            message,
            retryable,
            ..
        } => {
            assert_eq!(*kind, ErrorKind::PANICKED);
            assert!(message.contains("boom in the handler"), "{message}");
            assert!(!retryable);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        report
            .outcome
            .error_text()
            .unwrap()
            .starts_with("panicked: ")
    );

    // Same executor, same library, same capacity slot: still works.
    let report = exec
        .run(testing("echo", json!({})), Arc::new(Recorder::default()))
        .await;
    assert_eq!(report.outcome.state_name(), "succeeded", "{report:?}");
    assert_eq!(exec.stats().abandoned_total, 0);
}

#[tokio::test]
async fn a_failure_keeps_its_kind_retryability_and_data() {
    let exec = executor(2, 500);
    let report = exec
        .run(
            testing(
                "fail",
                json!({"message": "disk on fire", "retryable": true}),
            ),
            Arc::new(Recorder::default()),
        )
        .await;
    assert_eq!(
        report.outcome,
        Outcome::Failed {
            kind: ErrorKind::FAILED,
            message: "disk on fire".into(),
            retryable: true,
            data: Some(r#"{"hint":"test"}"#.into()),
        }
    );
    assert!(report.outcome.is_retryable_failure());
    assert_eq!(
        report.outcome.error_text().as_deref(),
        Some("failed: disk on fire")
    );

    // Deterministic failures are never retryable.
    let report = exec
        .run(
            testing("polite", json!({"seconds": "x"})),
            Arc::new(Recorder::default()),
        )
        .await;
    assert!(
        matches!(
            &report.outcome,
            Outcome::Failed { kind: ErrorKind::INVALID_PARAMS, retryable: false, message, .. }
                if message.contains("seconds")
        ),
        "{report:?}"
    );
    let report = exec
        .run(testing("nope", json!({})), Arc::new(Recorder::default()))
        .await;
    assert!(
        matches!(
            &report.outcome,
            Outcome::Failed { kind: ErrorKind::UNKNOWN_HANDLER, retryable: false, message, .. }
                if message.contains("\"nope\"")
        ),
        "{report:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Timeouts, cancels, shutdown

#[tokio::test]
async fn a_stubborn_plugin_is_abandoned_after_the_grace_period() {
    let exec = executor(1, 200);
    let req = RunRequest {
        timeout: Some(ms(300)),
        ..testing("stubborn", json!({"seconds": 1.5}))
    };
    let t = Instant::now();
    let report = exec.run(req, Arc::new(Recorder::default())).await;
    let took = t.elapsed();
    eprintln!("stubborn: reported after {took:?}");
    match &report.outcome {
        Outcome::TimedOut {
            after,
            stopped,
            message,
        } => {
            assert_eq!(*after, ms(300));
            assert!(!stopped, "stubborn cannot have stopped: {message}");
            assert!(message.contains("abandoned"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(report.outcome.state_name(), "timed_out");
    assert!(took >= ms(500), "gave up before timeout + grace: {took:?}");
    assert!(took < ms(300 + 200 + 1000), "too slow to give up: {took:?}");
    assert_eq!(exec.abandoned_threads(), 1);
    assert_eq!(exec.abandoned_threads_alive(), 1);

    // The slot was released with the abandon: capacity 1, and another call runs at once while
    // the stubborn thread is still sleeping.
    assert_eq!(exec.running(), 0);
    let t = Instant::now();
    let report = exec
        .run(testing("echo", json!({})), Arc::new(Recorder::default()))
        .await;
    assert_eq!(report.outcome.state_name(), "succeeded");
    assert!(t.elapsed() < ms(500), "{:?}", t.elapsed());
    assert_eq!(exec.abandoned_threads_alive(), 1, "still sleeping");

    // When the plugin finally returns, the gauge goes back down; the counter stays.
    assert!(
        eventually(Duration::from_secs(5), || exec.abandoned_threads_alive()
            == 0)
        .await,
        "the abandoned thread never reported back"
    );
    assert_eq!(exec.abandoned_threads(), 1);
}

#[tokio::test]
async fn a_polite_plugin_stops_within_the_grace_period() {
    let exec = executor(1, 2000);
    let req = RunRequest {
        timeout: Some(ms(300)),
        ..testing("polite", json!({"seconds": 10}))
    };
    let t = Instant::now();
    let report = exec.run(req, Arc::new(Recorder::default())).await;
    let took = t.elapsed();
    eprintln!("polite timeout: reported after {took:?}");
    match &report.outcome {
        Outcome::TimedOut {
            after,
            stopped,
            message,
        } => {
            assert_eq!(*after, ms(300));
            assert!(stopped, "{message}");
            assert!(message.contains("cancelled"), "what it returned: {message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(took >= ms(300), "{took:?}");
    assert!(took < ms(300 + 1000), "not prompt: {took:?}");
    assert!(report.elapsed < ms(1300), "{:?}", report.elapsed);
    assert_eq!(exec.abandoned_threads(), 0);
}

#[tokio::test]
async fn an_async_handler_is_cancelled_promptly() {
    let exec = executor(1, 2000);
    let req = RunRequest {
        timeout: Some(ms(300)),
        ..request(plugins().examples, "examples::wait", json!({"seconds": 10}))
    };
    let t = Instant::now();
    let report = exec.run(req, Arc::new(Recorder::default())).await;
    let took = t.elapsed();
    eprintln!("async wait timeout: reported after {took:?}");
    assert!(
        matches!(report.outcome, Outcome::TimedOut { stopped: true, .. }),
        "{report:?}"
    );
    assert!(took < ms(300 + 1000), "not prompt: {took:?}");
    assert_eq!(exec.abandoned_threads(), 0);
}

#[tokio::test]
async fn shutdown_cancels_running_calls_and_is_not_a_timeout() {
    let exec = executor(2, 2000);
    let req = RunRequest {
        // A timeout is set, and the shutdown happens first: the record must say shutdown.
        timeout: Some(Duration::from_secs(5)),
        ..testing("polite", json!({"seconds": 10}))
    };
    let run = tokio::spawn({
        let exec = exec.clone();
        async move { exec.run(req, Arc::new(Recorder::default())).await }
    });
    assert!(eventually(Duration::from_secs(5), || exec.running() == 1).await);
    let t = Instant::now();
    let stats = exec.shutdown(Duration::from_secs(1)).await;
    let took = t.elapsed();
    eprintln!("shutdown with a polite call running: {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(stats.running, 0);
    assert_eq!(stats.abandoned_total, 0);
    let report = run.await.unwrap();
    match &report.outcome {
        Outcome::Cancelled {
            reason,
            stopped,
            message,
        } => {
            assert_eq!(*reason, CancelReason::Shutdown);
            assert!(stopped);
            assert!(message.contains("shutting down"), "{message}");
            assert!(!message.contains("timed out"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(report.outcome.state_name(), "cancelled");

    // After a shutdown nothing starts; the plugin is not called.
    assert!(exec.is_shutting_down());
    let sink = Arc::new(Recorder::default());
    let report = exec
        .run(testing("chatty", json!({"lines": 5})), sink.clone())
        .await;
    assert!(
        matches!(
            report.outcome,
            Outcome::Cancelled {
                reason: CancelReason::Shutdown,
                stopped: true,
                ..
            }
        ),
        "{report:?}"
    );
    assert_eq!(report.started, None);
    assert!(sink.lines().is_empty(), "the plugin was called");
}

#[tokio::test]
async fn an_operator_cancel_is_recorded_as_requested() {
    let exec = executor(2, 2000);
    let token = CancelToken::new();
    let req = RunRequest {
        timeout: Some(Duration::from_secs(5)),
        ..testing("polite", json!({"seconds": 10}))
    };
    let run = tokio::spawn({
        let (exec, token) = (exec.clone(), token.clone());
        async move {
            exec.run_with_cancel(req, Arc::new(Recorder::default()), token)
                .await
        }
    });
    assert!(eventually(Duration::from_secs(5), || exec.running() == 1).await);
    let t = Instant::now();
    token.cancel();
    let report = run.await.unwrap();
    let took = t.elapsed();
    eprintln!("operator cancel of a polite call: {took:?}");
    assert!(
        matches!(
            report.outcome,
            Outcome::Cancelled {
                reason: CancelReason::Requested,
                stopped: true,
                ..
            }
        ),
        "{report:?}"
    );
    assert!(took < Duration::from_secs(1), "{took:?}");

    // A token cancelled before the run starts: the plugin is never called.
    let report = exec
        .run_with_cancel(
            testing("echo", json!({})),
            Arc::new(Recorder::default()),
            token,
        )
        .await;
    assert!(
        matches!(
            report.outcome,
            Outcome::Cancelled {
                reason: CancelReason::Requested,
                stopped: true,
                ..
            }
        ),
        "{report:?}"
    );
    assert_eq!(report.started, None);
    assert!(!exec.is_shutting_down(), "a cancel is not a shutdown");
}

#[tokio::test]
async fn dropping_the_run_future_cancels_and_abandons_the_call() {
    let exec = executor(1, 2000);
    let req = testing("polite", json!({"seconds": 10}));
    let gave_up = tokio::time::timeout(ms(300), exec.run(req, Arc::new(Recorder::default()))).await;
    assert!(gave_up.is_err());
    assert_eq!(exec.abandoned_threads(), 1);
    assert_eq!(exec.running(), 0);
    // The drop raised the cancel flag, so the polite plugin returns promptly.
    assert!(
        eventually(Duration::from_secs(2), || exec.abandoned_threads_alive()
            == 0)
        .await,
        "the plugin never saw the cancel flag"
    );
}

// ---------------------------------------------------------------------------------------------
// Handed over ahead of the start (`RunRequest::not_before`)

/// A sink that notes when the plugin first reported anything (here: its progress).
#[derive(Default)]
struct FirstWord(Mutex<Option<Instant>>);

impl RunSink for FirstWord {
    fn log(&self, _: LogLevel, _: &str) {
        self.note();
    }
    fn progress(&self, _: u64, _: u64, _: &str) {
        self.note();
    }
}

impl FirstWord {
    fn note(&self) {
        self.0.lock().unwrap().get_or_insert_with(Instant::now);
    }
    fn at(&self) -> Option<Instant> {
        *self.0.lock().unwrap()
    }
}

#[tokio::test]
async fn a_call_handed_over_ahead_starts_at_its_instant_and_its_timeout_counts_from_there() {
    let exec = executor(1, 500);
    let sink = Arc::new(FirstWord::default());
    let at = Instant::now() + ms(400);
    let req = RunRequest {
        // Shorter than the wait: the wait must not count against it.
        timeout: Some(ms(250)),
        not_before: Some(at),
        ..testing("chatty", json!({"lines": 1}))
    };
    let report = exec.run(req, sink.clone()).await;
    assert!(
        matches!(report.outcome, Outcome::Succeeded { .. }),
        "{report:?}"
    );
    let called = sink.at().expect("the plugin reported its progress");
    assert!(
        called >= at,
        "the plugin was called {:?} early",
        at - called
    );
    assert!(report.elapsed < ms(250), "the wait was counted: {report:?}");
    assert!(report.started.is_some());

    // A start instant already passed: at once, as without one.
    let sink = Arc::new(FirstWord::default());
    let req = RunRequest {
        not_before: Some(Instant::now()),
        ..testing("chatty", json!({"lines": 1}))
    };
    let report = exec.run(req, sink.clone()).await;
    assert!(
        matches!(report.outcome, Outcome::Succeeded { .. }),
        "{report:?}"
    );
    assert!(sink.at().is_some());
}

#[tokio::test]
async fn a_cancel_or_shutdown_before_the_start_instant_never_calls_the_plugin() {
    for shutdown in [false, true] {
        let exec = executor(2, 2000);
        let token = CancelToken::new();
        let sink = Arc::new(FirstWord::default());
        let req = RunRequest {
            not_before: Some(Instant::now() + Duration::from_secs(30)),
            ..testing("chatty", json!({"lines": 1}))
        };
        let run = tokio::spawn({
            let (exec, token, sink) = (exec.clone(), token.clone(), sink.clone());
            async move { exec.run_with_cancel(req, sink, token).await }
        });
        // Far from its start, it waits without a slot (`PERMIT_AHEAD`).
        tokio::time::sleep(ms(100)).await;
        assert_eq!(exec.running(), 0, "a run 30 s ahead holds a slot");
        let t = Instant::now();
        if shutdown {
            exec.begin_shutdown(Duration::from_secs(1));
        } else {
            token.cancel();
        }
        let report = run.await.unwrap();
        let took = t.elapsed();
        let (reason, words) = if shutdown {
            (CancelReason::Shutdown, "was not called")
        } else {
            (CancelReason::Requested, "before testing::chatty started")
        };
        match &report.outcome {
            Outcome::Cancelled {
                reason: r,
                stopped: true,
                message,
            } => {
                assert_eq!(*r, reason);
                assert!(message.contains(words), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(report.started, None);
        assert!(took < Duration::from_secs(2), "not prompt: {took:?}");
        assert_eq!(exec.running(), 0);
        assert_eq!(exec.abandoned_threads(), 0);
        // The waiting thread was woken and went away without calling the plugin.
        tokio::time::sleep(ms(200)).await;
        assert_eq!(sink.at(), None, "the plugin was called");
    }
}

/// A run handed over far ahead of its start takes its slot only `PERMIT_AHEAD` before it: a
/// run due now gets the only slot meanwhile, and the one ahead still starts at its instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_handed_over_far_ahead_leaves_its_slot_to_runs_due_now() {
    let exec = executor(1, 500);
    let ahead = Arc::new(FirstWord::default());
    let at = Instant::now() + ms(1500);
    let later = tokio::spawn({
        let (exec, sink) = (exec.clone(), ahead.clone());
        let req = RunRequest {
            not_before: Some(at),
            ..testing("chatty", json!({"lines": 1}))
        };
        async move { exec.run(req, sink).await }
    });
    tokio::time::sleep(ms(50)).await;
    let now = Arc::new(FirstWord::default());
    let report = exec
        .run(testing("chatty", json!({"lines": 1})), now.clone())
        .await;
    assert!(
        matches!(report.outcome, Outcome::Succeeded { .. }),
        "{report:?}"
    );
    let called = now.at().expect("the run due now was called");
    // Had it waited for the slot, it would have been called after the run ahead ended.
    assert!(
        called < at,
        "the run due now waited for the one ahead: called {:?} after its instant",
        called - at
    );
    let report = later.await.unwrap();
    assert!(
        matches!(report.outcome, Outcome::Succeeded { .. }),
        "{report:?}"
    );
    let called = ahead.at().expect("the run ahead was called");
    assert!(
        called >= at,
        "the run ahead was called {:?} early",
        at - called
    );
    assert!(
        called < at + ms(100),
        "the run ahead was called {:?} late",
        called - at
    );
    // Its wait for the instant is not a wait for a slot.
    assert!(report.queued < ms(100), "{report:?}");
}

#[tokio::test]
async fn dropping_the_run_future_before_the_start_instant_never_calls_the_plugin() {
    let exec = executor(1, 2000);
    let sink = Arc::new(FirstWord::default());
    let req = RunRequest {
        not_before: Some(Instant::now() + ms(500)),
        ..testing("chatty", json!({"lines": 1}))
    };
    let gave_up = tokio::time::timeout(ms(100), exec.run(req, sink.clone())).await;
    assert!(gave_up.is_err());
    assert_eq!(exec.running(), 0);
    // Nothing was inside the plugin, so nothing is abandoned.
    assert_eq!(exec.abandoned_threads(), 0);
    tokio::time::sleep(ms(800)).await;
    assert_eq!(
        sink.at(),
        None,
        "the plugin was called after its run was dropped"
    );
}

// ---------------------------------------------------------------------------------------------
// Capacity and limits

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_bounds_concurrent_calls() {
    let exec = executor(2, 500);
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = tokio::spawn({
        let (exec, peak) = (exec.clone(), peak.clone());
        async move {
            loop {
                peak.fetch_max(exec.running(), Ordering::Relaxed);
                tokio::time::sleep(ms(5)).await;
            }
        }
    });
    let t = Instant::now();
    let runs: Vec<_> = (0..4)
        .map(|i| {
            let exec = exec.clone();
            let req = RunRequest {
                run_id: format!("run-{i}"),
                timeout: Some(Duration::from_secs(10)),
                ..testing("polite", json!({"seconds": 0.3}))
            };
            tokio::spawn(async move { exec.run(req, Arc::new(Recorder::default())).await })
        })
        .collect();
    let mut reports: Vec<RunReport> = Vec::new();
    for run in runs {
        reports.push(run.await.unwrap());
    }
    let took = t.elapsed();
    sampler.abort();
    eprintln!("4 calls of 0.3 s at capacity 2: {took:?}");
    for r in &reports {
        assert_eq!(r.outcome.state_name(), "succeeded", "{r:?}");
    }
    // From the reports: no start instant lies inside more than one other call.
    let spans: Vec<(jiff::Timestamp, jiff::Timestamp)> = reports
        .iter()
        .map(|r| {
            let s = r.started.unwrap();
            (s, s + jiff::SignedDuration::try_from(r.elapsed).unwrap())
        })
        .collect();
    for (i, (start, _)) in spans.iter().enumerate() {
        let overlapping = spans
            .iter()
            .enumerate()
            .filter(|(j, (s, e))| *j != i && s <= start && start < e)
            .count();
        assert!(
            overlapping <= 1,
            "{} calls at once: {spans:?}",
            overlapping + 1
        );
    }
    assert_eq!(
        peak.load(Ordering::Relaxed),
        2,
        "sampled peak of running calls"
    );
    assert!(took >= ms(600), "two waves of 0.3 s: {took:?}");
    let waited = reports.iter().filter(|r| r.queued >= ms(200)).count();
    assert_eq!(waited, 2, "two calls waited for a slot: {reports:?}");
}

#[tokio::test]
async fn a_chatty_plugin_is_capped() {
    let exec = Executor::new(ExecutorConfig {
        capacity: 1,
        grace: ms(500),
        log_limits: LogLimits {
            max_lines: 10_000,
            ..LogLimits::default()
        },
    });
    let sink = Arc::new(Recorder::default());
    let t = Instant::now();
    let report = exec
        .run(
            testing("chatty", json!({"lines": 100_000, "bytes": 40})),
            sink.clone(),
        )
        .await;
    eprintln!("chatty 100 000 lines: {:?}", t.elapsed());
    assert_eq!(report.outcome.result_json(), Some(r#"{"lines":100000}"#));
    assert_eq!(report.log_lines_dropped, 90_000);
    let lines = sink.lines();
    assert_eq!(lines.len(), 10_001, "the cap plus one notice");
    assert!(lines[9_999].1.starts_with("line 10000 of 100000"));
    let (level, notice) = &lines[10_000];
    assert_eq!(*level, LogLevel::WARN);
    assert!(
        notice.contains("90000 further log lines dropped"),
        "{notice}"
    );

    // One huge line is cut, not refused.
    let sink = Arc::new(Recorder::default());
    let report = exec
        .run(
            testing("chatty", json!({"lines": 1, "bytes": 1_000_000})),
            sink.clone(),
        )
        .await;
    assert_eq!(report.outcome.state_name(), "succeeded");
    let lines = sink.lines();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].1.len() < (64 << 10) + 100, "{}", lines[0].1.len());
    assert!(lines[0].1.contains("more bytes cut"));
}

/// A handler that leaves a thread behind (holding the context and the tracing dispatcher):
/// once the call has returned — normally or by panicking — nothing that thread does may reach
/// the host, and the host must not crash when it tries.
#[tokio::test]
async fn a_thread_left_behind_cannot_reach_the_host_after_the_call() {
    let exec = executor(1, 500);
    for panic in [false, true] {
        let rec = Arc::new(Recorder::default());
        let report = exec
            .run(testing("straggler", json!({ "panic": panic })), rec.clone())
            .await;
        let expected = if panic { "failed" } else { "succeeded" };
        assert_eq!(report.outcome.state_name(), expected, "{report:?}");
        // The straggler logs for 300 ms after the call; give it all that time and more.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let lines = rec.lines();
        assert!(
            lines.iter().any(|(_, l)| l == "straggler returns"),
            "{lines:?}"
        );
        assert!(
            lines.iter().all(|(_, l)| !l.contains("late")),
            "a late line reached the host: {lines:?}"
        );
        assert!(rec.progress.lock().unwrap().is_empty());
    }
}
