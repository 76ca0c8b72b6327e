//! Benchmark B10: the cost of calling a handler through the plugin ABI.
//!
//! Three ways to run the same trivial handler (no params, result `null`):
//!
//! * `direct` — a Rust function that does the handler's work (decode empty params, encode the
//!   result), called statically;
//! * `dyn` — the same function behind `Box<dyn Fn>` (what an in-process registry would do);
//! * `abi` — `takt_plugin_api::host::call` into the real `testing` cdylib (`testing::noop`):
//!   callback table, `extern "C"` hop, the SDK's panic guard, context, per-call tracing
//!   subscriber, params decoding and result encoding.
//!
//! The difference `abi - direct` is the overhead a run pays for the plugin boundary.
//! Run: `cargo bench -p takt-host --bench plugin_call`.

use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use takt_plugin_api::abi::{LogLevel, PluginRef};
use takt_plugin_api::host::{CallInfo, HostServices, call};

struct Quiet;

impl HostServices for Quiet {
    fn is_cancelled(&self) -> bool {
        false
    }
    fn sleep(&self, _: Duration) -> bool {
        false
    }
    fn log(&self, _: LogLevel, _: &str) {}
    fn progress(&self, _: u64, _: u64, _: &str) {}
}

/// Builds the `testing` cdylib with the bench's profile and loads it.
fn load_testing_plugin() -> PluginRef {
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
    let lib = profile_dir.join(format!(
        "{}takt_plugin_testing{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    abi_stable::library::lib_header_from_path(&lib)
        .and_then(|h| h.init_root_module::<PluginRef>())
        .expect("the testing plugin loads")
}

/// An in-process handler behind dynamic dispatch.
type Handler = dyn Fn(&str) -> Result<String, String>;

/// What `testing::noop` does, minus the boundary.
fn noop_direct(params: &str) -> Result<String, String> {
    let text = if params.trim().is_empty() {
        "null"
    } else {
        params
    };
    let (): () = serde_json::from_str(text).map_err(|e| e.to_string())?;
    serde_json::to_string(&()).map_err(|e| e.to_string())
}

fn b10(c: &mut Criterion) {
    let plugin = load_testing_plugin();
    let info = CallInfo {
        job_id: "1",
        job_name: "bench",
        run_id: "1",
        attempt: 1,
        fire_time_unix_ms: 1_700_000_000_000,
        deadline_unix_ms: 0,
    };
    let dynamic: Box<Handler> = Box::new(noop_direct);
    let mut g = c.benchmark_group("b10");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.bench_function("direct", |b| b.iter(|| noop_direct(black_box(""))));
    g.bench_function("dyn", |b| b.iter(|| dynamic(black_box(""))));
    g.bench_function("abi", |b| {
        b.iter(|| call(plugin, "noop", black_box(""), &info, &Quiet))
    });
    g.finish();
}

criterion_group!(benches, b10);
criterion_main!(benches);
