//! The host's logs: `takt run`'s warnings reach stderr (as text, or JSON with
//! `--log-format json` / `log_format`), at the level `TAKT_LOG` / `RUST_LOG` set; a plugin's
//! `tracing` lands in its run log and never on stderr; a bad filter or format is refused with
//! the variable or key named.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

use takt_core::run::RunState;
use takt_core::store::conformance::block_on;
use takt_core::store::memory::MemoryStore;
use takt_core::store::{RunFilter, Store};
use takt_host::cli::logging::{self, LogFormat};
use takt_host::embed::HostBuilder;
use takt_host::store::{SqliteOptions, SqliteStore};
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};

fn build_plugins() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        common::build(&["takt-plugin-examples", "takt-plugin-testing"]);
    });
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-cli-logging-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn takt(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = common::takt_command(dir);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("takt runs")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A takt.toml on the built plugins with `jobs` (TOML text) and `extra` top-level keys.
fn config(dir: &Path, extra: &str, jobs: &str) {
    let cfg = format!(
        "plugin_dir = {:?}\n{extra}\n{jobs}",
        common::profile_dir().display().to_string()
    );
    std::fs::write(dir.join("takt.toml"), cfg).unwrap();
}

/// A `testing::stubborn` run that ignores its 1 s timeout: after the executor's grace the
/// host abandons its thread and warns (a warning that was silently dropped before the host
/// had a log subscriber).
fn stubborn_job() -> String {
    let at = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(2))
        .unwrap()
        .round(jiff::Unit::Second)
        .unwrap();
    format!(
        "[[jobs]]\nname = \"stubborn\"\nhandler = \"testing::stubborn\"\n\
         params = {{ seconds = 30.0 }}\nat = \"{at}\"\ntimeout = \"1s\"\n"
    )
}

const ABANDONED: &str =
    "plugin ignored the cancel flag for the grace period; its thread is abandoned";

#[test]
fn host_warnings_reach_stderr_as_text() {
    build_plugins();
    let dir = temp_dir("text");
    config(&dir, "", &stubborn_job());
    let out = takt(&dir, &["run", "--for", "10s"], &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains(ABANDONED))
        .unwrap_or_else(|| panic!("no warning on stderr:\n{stderr}\n--- stdout\n{stdout}"));
    let (time, rest) = line.split_once(' ').unwrap();
    assert!(time.parse::<jiff::Timestamp>().is_ok(), "{line}");
    assert!(rest.trim_start().starts_with("WARN"), "{line}");
    assert!(line.contains("handler=testing::stubborn"), "{line}");
    assert!(
        !line.contains('\u{1b}'),
        "no colours off a terminal: {line:?}"
    );
    // Logs are stderr's; stdout has the run lines.
    assert!(!stdout.contains(ABANDONED), "{stdout}");
    assert!(stdout.contains("timed_out"), "{stdout}");

    // TAKT_LOG=error hides the warning.
    config(&dir, "", &stubborn_job());
    let out = takt(&dir, &["run", "--for", "9s"], &[("TAKT_LOG", "error")]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("timed_out"), "{stdout}");
    assert!(!stderr.contains(ABANDONED), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn host_warnings_reach_stderr_as_json() {
    build_plugins();
    let dir = temp_dir("json");
    // The config asks for json; so does the flag (which would win over a "text" there).
    config(&dir, "log_format = \"json\"", &stubborn_job());
    let out = takt(&dir, &["run", "--for", "10s"], &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{stderr}")))
        .collect();
    let warning = lines
        .iter()
        .find(|l| l["message"] == ABANDONED)
        .unwrap_or_else(|| panic!("no warning in {stderr}"));
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["handler"], "testing::stubborn");
    assert!(warning["target"].as_str().unwrap().starts_with("takt_host"));

    config(&dir, "log_format = \"text\"", &stubborn_job());
    let out = takt(&dir, &["run", "--for", "9s", "--log-format", "json"], &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with('{') && l.contains(ABANDONED)),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_plugins_tracing_lands_in_its_run_log_not_on_stderr() {
    build_plugins();
    let dir = temp_dir("plugin-tracing");
    config(
        &dir,
        "",
        "[[jobs]]\nname = \"hello\"\nhandler = \"examples::hello\"\nparams = { name = \"logs\" }\nevery = \"1s\"\n",
    );
    // The most permissive filter there is: still nothing of the plugin's on stderr.
    let out = takt(&dir, &["run", "--for", "3s"], &[("TAKT_LOG", "trace")]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("greeting someone"), "{stderr}");
    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let runs = block_on(store.run_list(&RunFilter {
        job: None,
        state: Some(RunState::Succeeded),
        limit: 10,
        ..RunFilter::default()
    }))
    .unwrap();
    assert!(!runs.is_empty(), "{stdout}");
    let lines = block_on(store.log_list(runs[0].id.unwrap(), None, 100)).unwrap();
    let greeting: Vec<_> = lines
        .iter()
        .filter(|(_, l)| l.message.contains("greeting someone"))
        .collect();
    assert_eq!(greeting.len(), 1, "once in the run log: {lines:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_filters_and_formats_are_refused_by_name() {
    let dir = temp_dir("bad");
    std::fs::write(dir.join("takt.toml"), "").unwrap();
    let out = takt(
        &dir,
        &["run", "--for", "1s"],
        &[("TAKT_LOG", "takt_host=loud")],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.starts_with("error: TAKT_LOG=\"takt_host=loud\" is not a log filter"),
        "{stderr}"
    );
    let out = takt(&dir, &["job", "list"], &[("RUST_LOG", "=")]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: RUST_LOG=\"=\""), "{stderr}");

    let out = takt(&dir, &["run", "--for", "1s", "--log-format", "yaml"], &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--log-format: \"yaml\" is not a log format; use \"text\""),
        "{stderr}"
    );
    std::fs::write(dir.join("takt.toml"), "log_format = \"xml\"\n").unwrap();
    let out = takt(&dir, &["run", "--for", "1s"], &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("takt.toml: log_format: \"xml\" is not a log format"),
        "{stderr}"
    );
    std::fs::write(dir.join("takt.toml"), "").unwrap();
    let out = takt(&dir, &["run", "--for", "1s"], &[("TAKT_LOG_FORMAT", "xml")]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("environment: TAKT_LOG_FORMAT: \"xml\" is not a log format"),
        "{stderr}"
    );
    assert!(!dir.join("takt.db").exists(), "nothing started");
    let _ = std::fs::remove_dir_all(&dir);
}

fn traced(ctx: &JobContext, _p: serde_json::Value) -> Result<serde_json::Value, JobError> {
    tracing::info!(line = 3, "a compiled-in plugin traces");
    ctx.info("and logs");
    Ok(serde_json::json!({}))
}

/// A plugin compiled into the host shares the host's `tracing`: its events still go to the
/// run log (the SDK's per-call dispatcher wins over the global subscriber), once, and not to
/// the host's log, while the host's own events do reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiled_in_plugins_tracing_stays_out_of_the_host_log() {
    // Stands in for stderr.
    let buffer = logging::MemoryLog::default();
    let filter = logging::filter(|_| Some("trace".to_string()), logging::RUN_FILTER).unwrap();
    tracing::dispatcher::set_global_default(logging::dispatch(
        filter,
        LogFormat::Text,
        false,
        buffer.clone(),
    ))
    .unwrap();
    let plugin = takt_plugin_api::static_plugin!(|| {
        Plugin::new("traced").handler("run", "traces one line", traced)
    })
    .unwrap();
    let store = MemoryStore::default();
    let host = HostBuilder::new(store.clone())
        .static_plugin(plugin)
        .node("logging-test")
        .start()
        .await
        .unwrap();
    let (run, log) =
        common::jobs::run_once(&host, &store, "traced::run", &serde_json::json!({}), None).await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("a compiled-in plugin traces"))
            .count(),
        1,
        "{log:?}"
    );
    tracing::warn!(target: "takt_host::test", "a host warning");
    host.shutdown(Duration::from_secs(1)).await;
    let logged = buffer.text();
    assert!(!logged.contains("a compiled-in plugin traces"), "{logged}");
    assert!(logged.contains("a host warning"), "{logged}");
}
