//! Policies: pure decisions about retries, missed fires and overlapping runs.
//!
//! * [`retry`] — how many times a failed run is tried again and how long each retry waits
//!   ([`RetryPolicy`], [`Backoff`]).
//! * [`misfire`] — what happens to fires that were due while nobody was scheduling (the host
//!   was down, the database was unreachable): [`MisfirePolicy`] and [`misfire::plan`].
//! * [`overlap`] — what happens when a fire comes due while the job's previous run is still
//!   going: [`OverlapPolicy`] and [`overlap::decide`].
//!
//! Every function here takes "now" (when it needs it) as an argument and returns a decision;
//! carrying it out (inserting runs, sleeping, cancelling) is the host's business. All text forms
//! share one error type, [`PolicyError`], so the CLI and config loader report them alike.

pub mod misfire;
pub mod overlap;
pub mod retry;

pub use misfire::{MisfireAction, MisfirePlan, MisfirePolicy};
pub use overlap::{Busy, OverlapDecision, OverlapPolicy};
pub use retry::{Backoff, Exponential, RetryPolicy};

use crate::schedule::DurationError;

/// Why a policy or its text form was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A retry-delay text is not one of the accepted forms.
    #[error(
        "retry delays \"{text}\" are not valid; write \"none\", a list such as \"10s,30s,60s\" \
         (the last delay repeats) or \"exp:1s..5m\" with optional \" x2\" (factor) and \
         \" jitter 0.2\""
    )]
    BackoffSyntax {
        /// The text as given.
        text: String,
    },
    /// A duration inside a policy text is not valid.
    #[error("in {field}: {source}")]
    Duration {
        /// Which part of the policy held the duration.
        field: &'static str,
        /// The duration error.
        #[source]
        source: DurationError,
    },
    /// An exponential backoff factor below 1 or not finite.
    #[error("exponential backoff factor {factor} is not valid; use a number from 1 to 100, e.g. 2")]
    Factor {
        /// The factor as given.
        factor: String,
    },
    /// A jitter outside 0..=1.
    #[error("backoff jitter {jitter} is not valid; use a fraction from 0 to 1, e.g. 0.2")]
    Jitter {
        /// The jitter as given.
        jitter: String,
    },
    /// An exponential backoff whose cap is below its base.
    #[error(
        "exponential backoff cap {cap} is below its base {base}; make the cap at least the base"
    )]
    CapBelowBase {
        /// The base, formatted.
        base: String,
        /// The cap, formatted.
        cap: String,
    },
    /// An unknown misfire policy.
    #[error(
        "misfire policy \"{text}\" is not valid; use skip, fire-once or fire-all:N (N from 1 to \
         {max}), optionally followed by @DURATION for the lateness window, e.g. fire-all:10@5m"
    )]
    Misfire {
        /// The text as given.
        text: String,
        /// The largest accepted N.
        max: u32,
    },
    /// An unknown overlap policy.
    #[error("overlap policy \"{text}\" is not valid; use skip, queue-one, allow or cancel-running")]
    Overlap {
        /// The text as given.
        text: String,
    },
}
