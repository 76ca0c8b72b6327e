//! The params of `exe::run`, their defaults and their checks.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use takt_plugin_api::sdk::JobError;

/// Default bytes of each stream's tail kept in the result.
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 << 10;
/// The largest tail accepted: the result JSON goes into the run record.
pub const MAX_OUTPUT_LIMIT: usize = 16 << 20;
/// Default run-log lines forwarded per stream.
pub const DEFAULT_LOG_LINES: u64 = 10_000;
/// Longest run-log line; the rest of a longer line is cut (and counted), never buffered.
pub(crate) const MAX_LINE_BYTES: usize = 16 << 10;
/// Longest `killGraceMs` accepted.
pub(crate) const MAX_KILL_GRACE_MS: u64 = 600_000;

/// What `exe::run` starts and how (the job's params JSON, camelCase).
///
/// ```json
/// { "program": "/opt/mes/tools/report", "args": ["--day", "2026-06-01"],
///   "env": { "LANG": "C" }, "cwd": "/var/lib/mes", "stdin": "…",
///   "successCodes": [0, 3], "outputLimit": 65536 }
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExeParams {
    /// The program: a path (absolute, or relative to `cwd`) or a bare name looked up on `PATH`
    /// (the child's `PATH` when `env` sets one, else the host's). With `shell: true`, the
    /// command line instead.
    pub program: String,
    /// Arguments, passed as they are: no shell, no globbing, no quoting rules. With
    /// `shell: true` they become `$1`, `$2`, … of the command line.
    #[serde(default)]
    pub args: Vec<String>,
    /// Run `program` as a command line through `/bin/sh -c` (Windows: `cmd.exe /C`). The
    /// allowlist then checks the shell, so allowing the shell allows every command.
    #[serde(default)]
    pub shell: bool,
    /// Variables added to (or replacing those of) the environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Start from an empty environment instead of the host's (then only `env` is set).
    #[serde(default)]
    pub env_clear: bool,
    /// Variables removed from the inherited environment.
    #[serde(default)]
    pub env_remove: Vec<String>,
    /// The working directory (default: the host's).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Text written to the program's standard input, which is then closed. Without it the
    /// program reads end-of-file at once (never the host's terminal).
    #[serde(default)]
    pub stdin: Option<String>,
    /// Exit codes that mean success (default `[0]`).
    #[serde(default = "default_success_codes")]
    pub success_codes: Vec<i32>,
    /// Bytes of each stream's tail kept in the result (default 64 KiB, at most 16 MiB).
    #[serde(default = "default_output_limit")]
    pub output_limit: usize,
    /// Lines of each stream forwarded to the run log (default 10 000); later lines are only
    /// counted — the tail still has the end.
    #[serde(default = "default_log_lines")]
    pub log_lines: u64,
    /// How long a program asked to stop (SIGTERM) gets before SIGKILL, in ms (default: the
    /// plugin's, 2 000). Keep it below the host's grace (5 s by default), or the host stops
    /// waiting first and records the run before the tree is reaped.
    #[serde(default)]
    pub kill_grace_ms: Option<u64>,
}

fn default_success_codes() -> Vec<i32> {
    vec![0]
}

fn default_output_limit() -> usize {
    DEFAULT_OUTPUT_LIMIT
}

fn default_log_lines() -> u64 {
    DEFAULT_LOG_LINES
}

impl ExeParams {
    /// Params for `program` with every default.
    pub fn new(program: impl Into<String>) -> ExeParams {
        ExeParams {
            program: program.into(),
            args: Vec::new(),
            shell: false,
            env: BTreeMap::new(),
            env_clear: false,
            env_remove: Vec::new(),
            cwd: None,
            stdin: None,
            success_codes: default_success_codes(),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            log_lines: DEFAULT_LOG_LINES,
            kill_grace_ms: None,
        }
    }

    /// What serde cannot check; each message names the param and what to write instead.
    pub(crate) fn validate(&self) -> Result<(), JobError> {
        let bad = |m: String| Err(JobError::invalid_params(format!("invalid params: {m}")));
        if self.program.trim().is_empty() {
            return bad("program: is empty; name the program to run".into());
        }
        if self.program.contains('\0') || self.args.iter().any(|a| a.contains('\0')) {
            return bad("program/args: contain a NUL character, which no OS can pass".into());
        }
        if cfg!(windows) && self.shell && !self.args.is_empty() {
            return bad(
                "args: cmd.exe has no positional parameters; with shell: true on Windows put \
                 everything into program"
                    .into(),
            );
        }
        for key in self.env.keys().chain(&self.env_remove) {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return bad(format!(
                    "env: \"{key}\" is not a variable name (empty, or contains '=' or NUL)"
                ));
            }
        }
        if self.env.values().any(|v| v.contains('\0')) {
            return bad("env: a value contains a NUL character".into());
        }
        if self.success_codes.is_empty() {
            return bad("successCodes: is empty, so no run could succeed; write e.g. [0]".into());
        }
        if self.output_limit > MAX_OUTPUT_LIMIT {
            return bad(format!(
                "outputLimit: {} is more than the {MAX_OUTPUT_LIMIT} bytes allowed; the tail \
                 goes into the run record — write the full output to a file instead",
                self.output_limit
            ));
        }
        if let Some(ms) = self.kill_grace_ms
            && ms > MAX_KILL_GRACE_MS
        {
            return bad(format!(
                "killGraceMs: {ms} is more than {MAX_KILL_GRACE_MS} (10 minutes)"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_checks() {
        let p: ExeParams = serde_json::from_str(r#"{"program": "true"}"#).unwrap();
        assert_eq!(p.success_codes, [0]);
        assert_eq!(p.output_limit, DEFAULT_OUTPUT_LIMIT);
        assert!(p.validate().is_ok());
        let e = serde_json::from_str::<ExeParams>(r#"{"program": "x", "argv": []}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `argv`"), "{e}");
        let mut p = ExeParams::new(" ");
        assert!(p.validate().unwrap_err().message().contains("program"));
        p.program = "x".into();
        p.success_codes.clear();
        assert!(p.validate().unwrap_err().message().contains("successCodes"));
        p.success_codes = vec![0];
        p.env.insert("A=B".into(), "c".into());
        assert!(p.validate().unwrap_err().message().contains("env"));
        p.env.clear();
        p.output_limit = MAX_OUTPUT_LIMIT + 1;
        assert!(p.validate().unwrap_err().message().contains("outputLimit"));
    }
}
