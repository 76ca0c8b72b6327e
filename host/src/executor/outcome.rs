//! What a run came to: [`Outcome`], [`CancelReason`] and the [`RunReport`] around them.

use std::time::Duration;

use takt_plugin_api::abi::ErrorKind;

/// Why the host stopped a run before the plugin finished on its own: the core's run-model
/// type, so the executor and the state machine cannot disagree.
///
/// Seed 003 §3.3 marks every run cancelled by a platform shutdown as "timeout" because both
/// arrive as the same `OperationCanceledException`; alerting then floods with false timeouts.
/// Here the reason travels with the cancel flag, so a shutdown can never be recorded as one.
pub use takt_core::run::CancelReason;

/// How one plugin call ended, as the run record will store it.
///
/// `TimedOut` and `Cancelled` are decided by the host, not by what the plugin returned: once
/// the host has raised the cancel flag, the run is timed out (or cancelled) even if the plugin
/// then returns a result during the grace period — the deadline has passed, and a retry policy
/// must see the timeout. What the plugin returned is kept in the message for the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned a result before any deadline or cancel.
    Succeeded {
        /// The handler's result JSON, exactly as the plugin produced it.
        result_json: String,
    },
    /// The handler returned an error (or panicked) without the host having asked it to stop.
    Failed {
        /// The plugin's error kind. `panicked`, `invalid-params` and `unknown-handler` are
        /// never retryable, whatever the plugin said; `cancelled` here means the plugin gave
        /// up on its own — the host did not cancel it.
        kind: ErrorKind,
        /// The plugin's message (for `cancelled`, prefixed with an explanation).
        message: String,
        /// Whether another attempt may succeed; the retry policy decides whether one happens.
        retryable: bool,
        /// The plugin's JSON details, if any.
        data: Option<String>,
    },
    /// The deadline passed; the host raised the cancel flag.
    TimedOut {
        /// The timeout that applied (measured from the start of the call, not of the queueing).
        after: Duration,
        /// `true` when the handler returned within the grace period; `false` when the host
        /// stopped waiting and abandoned its thread (see
        /// [`Executor::abandoned_threads`](super::Executor::abandoned_threads)).
        stopped: bool,
        /// A lowercase sentence for the run record, including what the handler returned.
        message: String,
    },
    /// The run was cancelled on request or by a shutdown — never a timeout.
    Cancelled {
        /// Why.
        reason: CancelReason,
        /// `true` when the handler returned within the grace period, or was never called;
        /// `false` when its thread was abandoned.
        stopped: bool,
        /// A lowercase sentence for the run record.
        message: String,
    },
}

impl Outcome {
    /// The run state this outcome leads to: `succeeded`, `failed`, `timed_out` or
    /// `cancelled` (the names of the requirements' run states).
    pub fn state_name(&self) -> &'static str {
        match self {
            Outcome::Succeeded { .. } => "succeeded",
            Outcome::Failed { .. } => "failed",
            Outcome::TimedOut { .. } => "timed_out",
            Outcome::Cancelled { .. } => "cancelled",
        }
    }

    /// The run record's error text: `None` on success, `kind: message` for a failure, the
    /// message otherwise.
    pub fn error_text(&self) -> Option<String> {
        match self {
            Outcome::Succeeded { .. } => None,
            Outcome::Failed { kind, message, .. } => Some(format!("{kind}: {message}")),
            Outcome::TimedOut { message, .. } | Outcome::Cancelled { message, .. } => {
                Some(message.clone())
            }
        }
    }

    /// The result JSON of a successful run.
    pub fn result_json(&self) -> Option<&str> {
        match self {
            Outcome::Succeeded { result_json } => Some(result_json),
            _ => None,
        }
    }

    /// Whether the retry policy may try again: only failures the plugin called retryable.
    /// Timeouts are left to the policy's own setting (many jobs should not be retried after
    /// one), so this says `false` for them; cancellations are never retried.
    pub fn is_retryable_failure(&self) -> bool {
        matches!(
            self,
            Outcome::Failed {
                retryable: true,
                ..
            }
        )
    }
}

/// An [`Outcome`] with the measurements the run record needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// How the run ended.
    pub outcome: Outcome,
    /// When the plugin call started (after any wait for capacity); `None` when the plugin was
    /// never called (cancelled or shut down while queued, or no thread could be started).
    pub started: Option<jiff::Timestamp>,
    /// From the start of the call until the plugin returned or the host stopped waiting.
    /// Zero when the plugin was never called.
    pub elapsed: Duration,
    /// How long the run waited for a free slot (the executor's capacity) before it started.
    /// Not part of the timeout.
    pub queued: Duration,
    /// Log lines that did not reach the sink because the run exceeded its
    /// [`LogLimits`](super::LogLimits), counted when the host stopped waiting. (An abandoned
    /// thread may log more later; that goes nowhere, since the run's record is final.)
    pub log_lines_dropped: u64,
}
