//! `exe`: takt's built-in executor for external programs (seed 000 §5.2), HandlerType
//! `exe::run`.
//!
//! ```json
//! { "program": "/opt/mes/tools/report", "args": ["--day", "2026-06-01"],
//!   "env": { "LANG": "C" }, "envClear": false, "envRemove": ["HTTP_PROXY"],
//!   "cwd": "/var/lib/mes", "stdin": "text for the program",
//!   "successCodes": [0, 3], "outputLimit": 65536, "logLines": 10000, "killGraceMs": 2000 }
//! ```
//! (see [`ExeParams`]; only `program` is required; `"shell": true` runs `program` as a
//! command line through `/bin/sh -c`).
//!
//! What it promises:
//!
//! * **No shell by default**: `args` reach the program as they are.
//! * **The whole tree stops.** The program leads a process group of its own (Unix) or runs in
//!   a Job Object (Windows). When the host raises the run's cancel flag (timeout, cancel,
//!   shutdown — polled every 20 ms), the group gets SIGTERM, then after `killGraceMs`
//!   (default 2 s, below the host's 5 s grace so the tree is reaped before the host stops
//!   waiting) SIGKILL; the leader is reaped and the handler returns only once the group is
//!   empty. A program that *exits* but leaves background processes in its group gets the same
//!   treatment (they would otherwise hold its output pipes open and outlive the run, which is
//!   the failure the seed describes); `leftoverProcesses` in the result says it happened.
//!   A process that deliberately leaves the group (`setsid`, a daemon) escapes on Unix.
//! * **Output streams, bounded.** The handler's own thread polls both pipes (and, on Linux, a
//!   pidfd for the exit; Windows uses a reader thread per pipe): lines go to the run log as
//!   they arrive (stdout as info, stderr as warn, in order per stream), the last
//!   `outputLimit` bytes of each are kept for the result, lines over 16 KiB are cut, after
//!   `logLines` lines only a count is kept. Memory per run is fixed whatever is printed, and
//!   the pipes are always drained, so a chatty program never blocks.
//! * **Precise start errors**, never retried: not found (on PATH, or at a path), not
//!   executable (mode shown), a directory, refused by the allowlist (the list and where it is
//!   configured), a bad `#!` line.
//! * **Result JSON** ([`ExeResult`]): program, pid, exit code, signal, elapsed ms, whether it
//!   succeeded, and per stream bytes, lines and the tail. An exit code outside `successCodes`
//!   is a *retryable* failure (the job's retry policy decides), with the last stderr lines in
//!   the message and the result as the error's data.
//!
//! # Using it
//!
//! `takt run` registers it compiled in, with the allowlist of `[exe] allowlist` in takt.toml.
//! A program embedding the host adds it itself:
//!
//! ```ignore
//! use takt_plugin_exe::{Allowlist, ExeOptions};
//! let options = ExeOptions {
//!     allowlist: Allowlist::only(vec!["/opt/mes/tools".into()], "our service config"),
//!     ..ExeOptions::default()
//! };
//! let exe = takt_plugin_api::static_plugin!(move || takt_plugin_exe::plugin(options))?;
//! let host = HostBuilder::new(store).static_plugin(exe).start().await?;
//! ```
//!
//! The same plugin as a file is the crate `takt-plugin-exe-cdylib` (allowlist from
//! `TAKT_EXE_ALLOWLIST`).

mod output;
mod params;
mod pump;
mod resolve;
mod run;
pub mod sys;

use std::path::PathBuf;
use std::time::Duration;

use takt_plugin_api::sdk::{JobContext, Plugin};

pub use output::StreamReport;
pub use params::{DEFAULT_LOG_LINES, DEFAULT_OUTPUT_LIMIT, ExeParams, MAX_OUTPUT_LIMIT};
pub use resolve::Allowlist;
pub use run::ExeResult;

/// The plugin's name: HandlerTypes are `exe::…`.
pub const PLUGIN_NAME: &str = "exe";
/// The HandlerType of the executor.
pub const HANDLER_TYPE: &str = "exe::run";
/// The environment variable a plugin *file* reads its allowlist from.
pub const ALLOWLIST_ENV: &str = "TAKT_EXE_ALLOWLIST";
/// The default time between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

/// What the host decides for every run of the plugin (the job decides the rest).
#[derive(Debug, Clone)]
pub struct ExeOptions {
    /// Which programs may be started (everything by default).
    pub allowlist: Allowlist,
    /// Time between SIGTERM and SIGKILL when a job does not set `killGraceMs`. Keep it below
    /// the host's grace ([`DEFAULT_KILL_GRACE`] is 2 s against the host's 5 s).
    pub kill_grace: Duration,
}

impl Default for ExeOptions {
    /// Every program allowed, a 2 s kill grace.
    fn default() -> ExeOptions {
        ExeOptions {
            allowlist: Allowlist::allow_all(),
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }
}

impl ExeOptions {
    /// The defaults, with the allowlist of [`ALLOWLIST_ENV`] when it is set (entries
    /// separated like `PATH`; set but empty allows nothing).
    pub fn from_env() -> ExeOptions {
        let mut options = ExeOptions::default();
        if let Some(v) = std::env::var_os(ALLOWLIST_ENV) {
            let entries: Vec<PathBuf> = std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
            options.allowlist =
                Allowlist::only(entries, format!("{ALLOWLIST_ENV} in the environment"));
        }
        options
    }
}

/// The `exe` plugin with `options`: register it with `static_plugin!` (see the crate docs).
pub fn plugin(options: ExeOptions) -> Plugin {
    Plugin::new(PLUGIN_NAME)
        .handler(
            "run",
            "runs an external program (no shell unless asked); its whole process tree is \
             stopped on timeout or cancel",
            move |ctx: &JobContext, p: ExeParams| run::run(ctx, p, &options),
        )
        .schema(PARAMS_SCHEMA)
}

/// JSON schema of [`ExeParams`], shown by `takt plugin list`.
const PARAMS_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["program"],
  "additionalProperties": false,
  "properties": {
    "program": {"type": "string"},
    "args": {"type": "array", "items": {"type": "string"}},
    "shell": {"type": "boolean"},
    "env": {"type": "object", "additionalProperties": {"type": "string"}},
    "envClear": {"type": "boolean"},
    "envRemove": {"type": "array", "items": {"type": "string"}},
    "cwd": {"type": "string"},
    "stdin": {"type": "string"},
    "successCodes": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
    "outputLimit": {"type": "integer", "minimum": 0, "maximum": 16777216},
    "logLines": {"type": "integer", "minimum": 0},
    "killGraceMs": {"type": "integer", "minimum": 0, "maximum": 600000}
  }
}"#;

/// Runs one `exe::run` call directly (what the handler does), for tests and benchmarks with
/// [`takt_plugin_api::sdk::TestHost`].
pub fn run(
    ctx: &JobContext,
    params: ExeParams,
    options: &ExeOptions,
) -> Result<ExeResult, takt_plugin_api::sdk::JobError> {
    run::run(ctx, params, options)
}
