//! Benchmark B11: the cost of an isolated plugin call on a warm worker process against the
//! same call in process, both through the executor (the path every run takes).
//!
//! * `in_process` — `Executor::run` of `testing::noop` through the loaded module (a `takt-run`
//!   thread, the ABI call, the answer back to the async caller);
//! * `isolated` — the same request with `Target::Worker`: the call frame over the worker's
//!   stdin, the worker's serving thread calling the same plugin through the same ABI, the
//!   `done` frame back over its stdout; the worker is started before measuring (warm);
//! * `pipe_floor` — what the operating system alone charges for one round trip of a small
//!   message through two pipes to a child process (`cat` echoing 64 bytes), the part of the
//!   overhead no protocol can avoid.
//!
//! The difference `isolated - in_process` is the overhead of isolation per call (goal:
//! ≤ 50 µs). `b11_start/isolated_load` is the one-off cost of opening a plugin in a fresh
//! worker (hash, checks, process start, load, hello, and ending it again).
//! Run: `cargo bench -p takt-host --bench isolated_call`.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use takt_core::job::Isolation;
use takt_host::executor::{Executor, ExecutorConfig, Outcome, RunRequest, RunSink};
use takt_host::plugins::{LoadOptions, Plugins};
use takt_host::worker::{WorkerSettings, Workers};
use takt_plugin_api::abi::LogLevel;

struct Quiet;

impl RunSink for Quiet {
    fn log(&self, _: LogLevel, _: &str) {}
    fn progress(&self, _: u64, _: u64, _: &str) {}
}

/// Builds the `testing` cdylib with the bench's profile into a directory of its own.
fn plugin_dir() -> PathBuf {
    let profile_dir: PathBuf = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "takt-plugin-testing", "--target-dir"])
        .arg(profile_dir.parent().unwrap());
    if profile_dir.file_name().unwrap() == "release" {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().unwrap().success(),
        "cannot build the testing plugin"
    );
    let name = format!(
        "{}takt_plugin_testing{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let dir = std::env::temp_dir().join(format!("takt-b11-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(profile_dir.join(&name), dir.join(&name)).unwrap();
    dir
}

fn b11(c: &mut Criterion) {
    let dir = plugin_dir();
    let plugins = Plugins::builder()
        .dir(&dir)
        .options(LoadOptions {
            shadow_dir: dir.join("shadow"),
            ..LoadOptions::default()
        })
        .workers(Workers::new(WorkerSettings::new(env!(
            "CARGO_BIN_EXE_takt"
        ))))
        .build()
        .expect("the testing plugin loads");
    let testing = plugins.current().plugins()[0].clone();
    let request = |isolation| RunRequest {
        target: plugins.target(&testing, isolation).expect("a target"),
        handler: "noop".into(),
        handler_type: "testing::noop".into(),
        params_json: String::new(),
        job_id: "1".into(),
        job_name: "bench".into(),
        run_id: "1".into(),
        attempt: 1,
        fire_time: "2026-06-01T00:00:00Z".parse().unwrap(),
        timeout: None,
        not_before: None,
    };
    let in_process = request(Isolation::InProcess);
    let isolated = request(Isolation::Process);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let exec = Executor::new(ExecutorConfig::default());
    let sink: Arc<dyn RunSink> = Arc::new(Quiet);
    let run = |req: &RunRequest| {
        let report = rt.block_on(exec.run(req.clone(), sink.clone()));
        assert!(
            matches!(report.outcome, Outcome::Succeeded { .. }),
            "{report:?}"
        );
    };
    // Warm: the worker is started (and its plugin loaded) before anything is measured.
    run(&isolated);
    run(&in_process);

    let mut echo = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cat runs");
    let mut to = echo.stdin.take().unwrap();
    let mut from = echo.stdout.take().unwrap();
    let message = [7u8; 64];
    let mut back = [0u8; 64];

    let mut g = c.benchmark_group("b11");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1));
    g.bench_function("in_process", |b| b.iter(|| run(&in_process)));
    g.bench_function("isolated", |b| b.iter(|| run(&isolated)));
    g.bench_function("pipe_floor", |b| {
        b.iter(|| {
            to.write_all(&message).unwrap();
            from.read_exact(&mut back).unwrap();
        })
    });
    g.finish();

    // Opening the plugin in a fresh worker: hash and check the file, start the worker, load
    // the plugin there, hello; then end it.
    let mut g = c.benchmark_group("b11_start");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1));
    g.bench_function("isolated_load", |b| {
        b.iter(|| {
            let p = Plugins::builder()
                .dir(&dir)
                .options(LoadOptions {
                    shadow_dir: dir.join("shadow"),
                    ..LoadOptions::default()
                })
                .isolate(["testing"])
                .workers(Workers::new(WorkerSettings::new(env!(
                    "CARGO_BIN_EXE_takt"
                ))))
                .build()
                .expect("loads in a worker");
            assert!(p.current().plugins()[0].is_isolated());
            p.shutdown_workers(Duration::from_secs(5));
        })
    });
    g.finish();
    drop(to);
    let _ = echo.wait();
    plugins.shutdown_workers(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, b11);
criterion_main!(benches);
