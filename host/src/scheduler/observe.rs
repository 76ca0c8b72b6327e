//! What the loop tells an observer as it happens: the facts `/metrics` is made of
//! ([`crate::metrics::Metrics`] is the observer `takt run` and the HTTP API install).
//!
//! A trait called at a handful of points of the loop's shell rather than a subscription to
//! [`super::SchedulerEvent`]s: a broadcast receiver that falls behind loses events, and a
//! counter that loses events lies. Each call is a few atomic increments, made on the task
//! that knows the fact, and never awaits.

use std::time::Duration;

use takt_core::job::JobId;
use takt_core::run::{RunState, SkipReason};

/// The end of one attempt, as recorded.
#[derive(Clone, Debug)]
pub struct AttemptEnd<'a> {
    /// The job.
    pub job: JobId,
    /// Its name.
    pub job_name: &'a str,
    /// The attempt that ended (1 for the first).
    pub attempt: u32,
    /// The state recorded: final, or pending when a retry is scheduled.
    pub state: RunState,
    /// How long the plugin ran (`None` when it was never called).
    pub elapsed: Option<Duration>,
    /// How late after its fire time the first attempt's plugin started (`None` for retries
    /// and for runs whose plugin was never called).
    pub lateness: Option<Duration>,
}

/// Receives the loop's facts. Every method has an empty default, so an observer implements
/// what it counts.
pub trait Observer: Send + Sync {
    /// An attempt ended and its end is recorded.
    fn attempt_ended(&self, _end: &AttemptEnd<'_>) {}

    /// The loop recorded a fire as skipped (misfire, overlap, …).
    fn skipped(&self, _job: JobId, _reason: SkipReason) {}

    /// A claim call returned `claimed` runs after `took`.
    fn claimed(&self, _took: Duration, _claimed: usize) {}

    /// A store call of the loop failed (renew, recover, prepare, claim, next due).
    fn store_failed(&self) {}

    /// The database stopped answering the loop (`true`), or answers again (`false`).
    fn outage(&self, _down: bool) {}
}

/// The observer of a scheduler nobody observes.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}
