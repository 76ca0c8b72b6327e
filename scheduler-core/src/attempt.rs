//! Attempts: what really executed. A run is one (job, fire time); each time a node starts it
//! — the first claim, every retry — is an [`Attempt`] with its own node, node life, start and
//! end. A run's row keeps only its latest attempt, so history (and the audit's duplicate
//! count) reads these.
//!
//! The store engine writes them: the claim that sets a run running begins one, the finish of
//! that attempt (or its recovery after a lost lease or a node restart) ends it, in the same
//! transaction or statement as the run's own change, so a run and its attempts never
//! disagree. They go with their run (deleted with it, purged with it).

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

use crate::job::JobId;
use crate::node::InstanceId;
use crate::run::{NodeId, RunEvent, RunId, RunState};

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptOutcome {
    /// The handler returned a result.
    Succeeded,
    /// The handler returned an error (also an attempt that is retried: its error says why).
    Failed,
    /// It ran past the job's timeout (a final timeout; a retried one is `Failed` with the
    /// timeout's error text).
    TimedOut,
    /// It was cancelled (an operator, an overlap policy, a shutdown).
    Cancelled,
    /// Another node found its lease expired and recovered the run: the attempt's own end was
    /// never recorded, so it may still have been executing.
    LeaseExpired,
    /// Its node restarted and recovered the run of its earlier life.
    NodeRestarted,
}

impl AttemptOutcome {
    /// Every outcome.
    pub const ALL: [AttemptOutcome; 6] = [
        AttemptOutcome::Succeeded,
        AttemptOutcome::Failed,
        AttemptOutcome::TimedOut,
        AttemptOutcome::Cancelled,
        AttemptOutcome::LeaseExpired,
        AttemptOutcome::NodeRestarted,
    ];

    /// The lowercase name used in storage, the CLI and the API.
    pub fn name(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::TimedOut => "timed_out",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::LeaseExpired => "lease_expired",
            AttemptOutcome::NodeRestarted => "node_restarted",
        }
    }

    /// The outcome named `name`.
    pub fn from_name(name: &str) -> Option<AttemptOutcome> {
        AttemptOutcome::ALL.into_iter().find(|o| o.name() == name)
    }

    /// The outcome of an attempt whose run went to `state` (a retry: `Pending`, which is a
    /// failed attempt). `None` for a state no attempt ends in (running, skipped).
    pub fn of_state(state: RunState) -> Option<AttemptOutcome> {
        match state {
            RunState::Succeeded => Some(AttemptOutcome::Succeeded),
            RunState::Failed | RunState::Pending => Some(AttemptOutcome::Failed),
            RunState::TimedOut => Some(AttemptOutcome::TimedOut),
            RunState::Cancelled => Some(AttemptOutcome::Cancelled),
            RunState::Running | RunState::Skipped => None,
        }
    }

    /// The outcome of a recovery by `event` (`None` for any other event).
    pub fn of_recovery(event: &RunEvent) -> Option<AttemptOutcome> {
        match event {
            RunEvent::LeaseExpired => Some(AttemptOutcome::LeaseExpired),
            RunEvent::NodeRestarted => Some(AttemptOutcome::NodeRestarted),
            _ => None,
        }
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The end of an attempt, as the engine computes it for the finish or the recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptEnd {
    /// When it ended.
    pub at: Timestamp,
    /// How.
    pub outcome: AttemptOutcome,
    /// Its error text (the recovery's reason for a recovered attempt).
    pub error: Option<String>,
}

/// One attempt of a run, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The run.
    pub run_id: RunId,
    /// Its job (read with the run).
    pub job_id: JobId,
    /// The run's fire time (read with the run).
    pub fire_time: Timestamp,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// The node that claimed it.
    pub node_id: NodeId,
    /// That node's life.
    pub node_instance: Option<InstanceId>,
    /// When it was claimed.
    pub started_at: Timestamp,
    /// When it ended (`None` while it runs, or if its end was never recorded).
    pub finished_at: Option<Timestamp>,
    /// How it ended.
    pub outcome: Option<AttemptOutcome>,
    /// Its error text.
    pub error: Option<String>,
}

impl Attempt {
    /// The attempt a claim begins for `run` (running, with its node and life set).
    pub fn begun(
        run_id: RunId,
        job_id: JobId,
        fire_time: Timestamp,
        attempt: u32,
        node_id: NodeId,
        node_instance: Option<InstanceId>,
        started_at: Timestamp,
    ) -> Attempt {
        Attempt {
            run_id,
            job_id,
            fire_time,
            attempt,
            node_id,
            node_instance,
            started_at,
            finished_at: None,
            outcome: None,
            error: None,
        }
    }

    /// Writes `end` into the attempt.
    pub fn end(&mut self, end: &AttemptEnd) {
        self.finished_at = Some(end.at);
        self.outcome = Some(end.outcome);
        self.error.clone_from(&end.error);
    }

    /// How long it ran (`None` while open).
    pub fn duration(&self) -> Option<Duration> {
        self.finished_at
            .and_then(|f| Duration::try_from(f.duration_since(self.started_at)).ok())
    }

    /// Whether it was (or may have been) executing at `at`: started at or before, and not
    /// ended before. An attempt ended by recovery counts only up to its recovery.
    pub fn executing_at(&self, at: Timestamp) -> bool {
        self.started_at <= at && self.finished_at.is_none_or(|f| f > at)
    }

    /// Whether this attempt and `other` were executing at the same time (their intervals
    /// overlap; an open attempt lasts until `now`).
    pub fn overlaps(&self, other: &Attempt, now: Timestamp) -> bool {
        let end = |a: &Attempt| a.finished_at.unwrap_or(now);
        self.started_at < end(other) && other.started_at < end(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_states_map() {
        for o in AttemptOutcome::ALL {
            assert_eq!(AttemptOutcome::from_name(o.name()), Some(o));
        }
        assert_eq!(AttemptOutcome::from_name("lost"), None);
        assert_eq!(
            AttemptOutcome::of_state(RunState::Pending),
            Some(AttemptOutcome::Failed)
        );
        assert_eq!(AttemptOutcome::of_state(RunState::Skipped), None);
        assert_eq!(
            AttemptOutcome::of_recovery(&RunEvent::LeaseExpired),
            Some(AttemptOutcome::LeaseExpired)
        );
    }

    #[test]
    fn overlap_is_strict() {
        let t = |s: i64| Timestamp::from_second(s).unwrap();
        let a = |start, end: Option<i64>| Attempt {
            finished_at: end.map(t),
            ..Attempt::begun(
                RunId(1),
                JobId(1),
                t(0),
                1,
                NodeId("n".into()),
                None,
                t(start),
            )
        };
        assert!(!a(0, Some(10)).overlaps(&a(10, Some(20)), t(100)));
        assert!(a(0, Some(11)).overlaps(&a(10, Some(20)), t(100)));
        assert!(a(0, None).overlaps(&a(50, Some(60)), t(100)));
        assert!(a(0, Some(10)).executing_at(t(5)));
        assert!(!a(0, Some(10)).executing_at(t(10)));
    }
}
