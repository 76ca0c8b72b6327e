//! Handlers the host runs itself, because they work on the host's own store: the HandlerType
//! namespace `takt::` is reserved for them (a plugin named `takt` is never consulted).
//!
//! They are jobs like any other — scheduled, claimed under the (job, fire time) key, recorded
//! with their result and log, visible in `takt runs` — so housekeeping has the same history
//! and alerting as business jobs instead of running silently at start-up.
//!
//! * `takt::retention` — params `{"days": N}` (1 ..= 36 500): removes runs that reached a final
//!   state more than N days before the run's start, with their logs
//!   ([`Store::retention_purge`]); pending and running runs are never removed. Result:
//!   `{"olderThan": "<instant>", "runs": <removed>, "logLines": <removed>}`.

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use takt_core::job::{Isolation, JobDef};
use takt_core::run::{PluginBuild, RunId};
use takt_core::store::{LogLevel, LogLine, Store};

/// The HandlerType of the retention job.
pub const RETENTION: &str = "takt::retention";
/// The name of the retention job `takt run` declares from the `retention_days` setting.
pub const RETENTION_JOB: &str = "takt-retention";
/// When the declared retention job runs: daily at 03:00 in the configured zone.
pub const RETENTION_CRON: &str = "0 3 * * *";

/// The longest retention accepted (a hundred years).
const MAX_DAYS: u32 = 36_500;

/// Whether `handler_type` names a built-in handler (`takt::…`), known or not: the namespace is
/// the host's, so an unknown `takt::x` fails as such rather than going to the plugins.
pub fn is_builtin(handler_type: &str) -> bool {
    handler_type.trim().starts_with("takt::")
}

/// Checks that `handler_type` is a known built-in and `params_json` suits it; the error says
/// what is wrong and what to write instead. Used when a job is declared, so a typo fails at
/// start-up rather than at 03:00.
pub fn validate(handler_type: &str, params_json: &str) -> Result<(), String> {
    match handler_type.trim() {
        RETENTION => retention_params(params_json).map(|_| ()),
        other => Err(unknown(other)),
    }
}

/// The job `takt run` keeps in the store for `retention_days = days`.
pub fn retention_job(days: u32) -> Result<JobDef, String> {
    let mut job = JobDef::new(RETENTION_JOB, RETENTION).map_err(|e| e.to_string())?;
    job.params_json = format!("{{\"days\":{days}}}");
    job.description = Some(format!(
        "removes runs that finished more than {days} days ago, with their logs"
    ));
    validate(RETENTION, &job.params_json)?;
    Ok(job)
}

/// What a built-in run records as the plugin build that ran it: `takt` at the host's
/// version (no file).
pub fn build() -> PluginBuild {
    PluginBuild {
        name: "takt".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        sha256: None,
    }
}

/// Why a built-in handler cannot run for a job with `isolation`: they work on the host's own
/// store, inside the host.
pub fn isolation_refusal(handler_type: &str, isolation: Isolation) -> Option<String> {
    (isolation == Isolation::Process).then(|| {
        format!(
            "the built-in handler {} runs inside the host on its own store and cannot run in a \
             worker process; set the job's isolation to in-process",
            handler_type.trim()
        )
    })
}

/// What a built-in run produced: the result JSON, or an error and whether a retry may help.
pub(crate) type BuiltinResult = Result<String, (String, bool)>;

/// Runs the built-in `handler_type` for run `run` at `now`.
pub(crate) async fn run<S: Store>(
    store: &S,
    handler_type: &str,
    params_json: &str,
    run: RunId,
    now: Timestamp,
) -> BuiltinResult {
    match handler_type.trim() {
        RETENTION => retention(store, params_json, run, now).await,
        other => Err((unknown(other), false)),
    }
}

fn unknown(handler_type: &str) -> String {
    format!(
        "\"{handler_type}\" is not a built-in handler; the takt:: namespace is reserved for the \
         host, and its handlers are: {RETENTION}"
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionParams {
    days: u32,
}

fn retention_params(params_json: &str) -> Result<u32, String> {
    let p: RetentionParams = serde_json::from_str(params_json).map_err(|e| {
        format!(
            "invalid params for {RETENTION}: {e}; write {{\"days\": N}} with N the days of \
             history to keep"
        )
    })?;
    if p.days == 0 || p.days > MAX_DAYS {
        return Err(format!(
            "invalid params for {RETENTION}: days is {}, allowed is 1 to {MAX_DAYS}",
            p.days
        ));
    }
    Ok(p.days)
}

async fn retention<S: Store>(
    store: &S,
    params_json: &str,
    run: RunId,
    now: Timestamp,
) -> BuiltinResult {
    let days = retention_params(params_json).map_err(|e| (e, false))?;
    let cutoff = now
        .checked_sub(SignedDuration::from_hours(i64::from(days) * 24))
        .unwrap_or(Timestamp::MIN);
    let purged = store
        .retention_purge(cutoff)
        .await
        .map_err(|e| (format!("retention purge failed: {e}"), e.is_retryable()))?;
    let line = LogLine {
        at: now,
        level: LogLevel::Info,
        message: format!(
            "removed {} runs and {} log lines that finished before {cutoff} ({days} days)",
            purged.runs, purged.log_lines
        ),
    };
    // The purge is done; a log line that cannot be written must not turn it into a failure.
    if let Err(e) = store.log_append(run, &[line]).await {
        tracing::warn!("retention run {run}: cannot write its log line: {e}");
    }
    Ok(serde_json::json!({
        "olderThan": cutoff.to_string(),
        "runs": purged.runs,
        "logLines": purged.log_lines,
    })
    .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_checked_with_precise_errors() {
        assert_eq!(retention_params(r#"{"days": 30}"#), Ok(30));
        let e = retention_params("{}").unwrap_err();
        assert!(e.contains("missing field `days`"), "{e}");
        assert!(e.contains("write {\"days\": N}"), "{e}");
        let e = retention_params(r#"{"days": 0}"#).unwrap_err();
        assert!(e.contains("days is 0, allowed is 1 to 36500"), "{e}");
        let e = retention_params(r#"{"days": 7, "keep": 1}"#).unwrap_err();
        assert!(e.contains("unknown field `keep`"), "{e}");
        let e = validate("takt::vacuum", "{}").unwrap_err();
        assert!(
            e.contains("\"takt::vacuum\" is not a built-in handler"),
            "{e}"
        );
        assert!(is_builtin(" takt::retention"));
        assert!(!is_builtin("examples::hello"));
    }

    #[test]
    fn the_declared_job_is_valid() {
        let job = retention_job(14).unwrap();
        assert_eq!(job.name.as_str(), RETENTION_JOB);
        assert_eq!(job.params_json, r#"{"days":14}"#);
        job.validate().unwrap();
        assert!(retention_job(0).is_err());
    }
}
