//! Overlap policy: what a fire does while the job's previous run is still going (seed 000 §6.3:
//! a 15-minute archive job on a 10-minute schedule wrote the same table twice at once).

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;

use super::PolicyError;
use crate::run::SkipReason;

/// What a new fire does while an earlier run of the same job is pending or running.
///
/// The default is [`OverlapPolicy::Skip`]: never two copies of a job at once, and the skipped
/// fire is recorded (a `skipped` run with reason `overlap`), so nothing is lost silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OverlapPolicy {
    /// Record the new fire as skipped (reason `overlap`).
    #[default]
    Skip,
    /// Keep at most one waiting run; it starts when the running one ends. Further fires while
    /// one is already queued are skipped.
    QueueOne,
    /// Start the new run alongside the running one.
    Allow,
    /// Cancel the running run(s), then start the new one.
    CancelRunning,
}

impl OverlapPolicy {
    /// The text form: `skip`, `queue-one`, `allow`, `cancel-running`.
    pub fn name(self) -> &'static str {
        match self {
            OverlapPolicy::Skip => "skip",
            OverlapPolicy::QueueOne => "queue-one",
            OverlapPolicy::Allow => "allow",
            OverlapPolicy::CancelRunning => "cancel-running",
        }
    }
}

impl fmt::Display for OverlapPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OverlapPolicy {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, PolicyError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "skip" => Ok(OverlapPolicy::Skip),
            "queue-one" | "queue_one" | "queue" => Ok(OverlapPolicy::QueueOne),
            "allow" => Ok(OverlapPolicy::Allow),
            "cancel-running" | "cancel_running" | "cancel" => Ok(OverlapPolicy::CancelRunning),
            _ => Err(PolicyError::Overlap {
                text: text.to_string(),
            }),
        }
    }
}

/// What to do with a fire that has just come due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverlapDecision {
    /// Start a run now.
    Start,
    /// Record a `skipped` run with this reason.
    Skip(SkipReason),
    /// Record a `pending` run that waits until the running one ends.
    Queue,
    /// Cancel the running run(s) (reason: requested), then start a run.
    CancelRunningThenStart,
    /// A catch-up fire: its time came *before* the job's run in progress started (fires
    /// released by `fire-all` after a stop or an outage), so it is no overlap — it waits its
    /// turn and starts, in fire-time order, once the job is idle. Recorded as a `pending`
    /// run, like [`OverlapDecision::Queue`], but without the one-waiting limit.
    Wait,
}

/// What of a job is in flight when one of its fires comes due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Busy {
    /// Its runs in state running.
    pub running: usize,
    /// Its runs pending behind them: queued fires and retries waiting for their time (not
    /// counting the new fire).
    pub queued: usize,
    /// When the earliest of those runs was created (claimed, queued or first attempted):
    /// a fire before it came while nothing of the job was in flight.
    pub since: Option<Timestamp>,
}

/// Decides the fire at `fire` of a job with `busy` in flight.
///
/// Only a fire whose time comes while a run of the job is in flight is an overlap: a fire
/// whose time came before the run in progress started is a backlog fire ([`Wait`]) under
/// every policy but `allow` (which starts it side by side, as it would any overlap), so a
/// `fire-all` catch-up runs one fire after another under the default `skip`.
///
/// [`Wait`]: OverlapDecision::Wait
pub fn decide(policy: OverlapPolicy, busy: Busy, fire: Timestamp) -> OverlapDecision {
    if busy.running == 0 && busy.queued == 0 {
        return OverlapDecision::Start;
    }
    if policy != OverlapPolicy::Allow && busy.since.is_some_and(|since| fire < since) {
        return OverlapDecision::Wait;
    }
    match policy {
        OverlapPolicy::Allow => OverlapDecision::Start,
        OverlapPolicy::Skip => OverlapDecision::Skip(SkipReason::Overlap),
        OverlapPolicy::QueueOne if busy.queued == 0 => OverlapDecision::Queue,
        OverlapPolicy::QueueOne => OverlapDecision::Skip(SkipReason::Overlap),
        OverlapPolicy::CancelRunning => OverlapDecision::CancelRunningThenStart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OverlapDecision::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// `running` and `queued` runs, in flight since 10:00.
    fn busy(running: usize, queued: usize) -> Busy {
        Busy {
            running,
            queued,
            since: Some(t("2026-06-01T10:00:00Z")),
        }
    }

    const LATER: &str = "2026-06-01T10:00:10Z";
    const EARLIER: &str = "2026-06-01T09:59:50Z";

    const ALL: [OverlapPolicy; 4] = [
        OverlapPolicy::Skip,
        OverlapPolicy::QueueOne,
        OverlapPolicy::Allow,
        OverlapPolicy::CancelRunning,
    ];

    #[test]
    fn nothing_running_always_starts() {
        for p in ALL {
            assert_eq!(decide(p, Busy::default(), t(LATER)), Start, "{p}");
        }
    }

    #[test]
    fn each_policy_with_a_run_in_progress() {
        let skip = Skip(SkipReason::Overlap);
        let later = t(LATER);
        assert_eq!(decide(OverlapPolicy::Skip, busy(1, 0), later), skip);
        assert_eq!(decide(OverlapPolicy::QueueOne, busy(1, 0), later), Queue);
        assert_eq!(decide(OverlapPolicy::QueueOne, busy(1, 1), later), skip);
        assert_eq!(decide(OverlapPolicy::Allow, busy(3, 0), later), Start);
        assert_eq!(
            decide(OverlapPolicy::CancelRunning, busy(1, 0), later),
            CancelRunningThenStart
        );
        // A queued run whose predecessor just finished still blocks a second queue entry.
        assert_eq!(decide(OverlapPolicy::QueueOne, busy(0, 1), later), skip);
    }

    #[test]
    fn a_fire_due_before_the_run_in_progress_began_waits_its_turn() {
        // fire-all after a stop: the first catch-up run is running, the next missed fires
        // are older than it and wait — under every policy but allow.
        let earlier = t(EARLIER);
        for p in [
            OverlapPolicy::Skip,
            OverlapPolicy::QueueOne,
            OverlapPolicy::CancelRunning,
        ] {
            assert_eq!(decide(p, busy(1, 0), earlier), Wait, "{p}");
            assert_eq!(
                decide(p, busy(0, 2), earlier),
                Wait,
                "{p}: behind waiting ones"
            );
        }
        assert_eq!(decide(OverlapPolicy::Allow, busy(1, 0), earlier), Start);
        // Exactly at the start counts as coming while it runs.
        assert_eq!(
            decide(OverlapPolicy::Skip, busy(1, 0), t("2026-06-01T10:00:00Z")),
            Skip(SkipReason::Overlap)
        );
        // Unknown start: an overlap, as before.
        let unknown = Busy {
            since: None,
            ..busy(1, 0)
        };
        assert_eq!(
            decide(OverlapPolicy::Skip, unknown, earlier),
            Skip(SkipReason::Overlap)
        );
    }

    #[test]
    fn seed_000_archive_job_does_not_run_twice_by_default() {
        // 15-minute job, 10-minute schedule: at minute 10 the first run is still going.
        assert_eq!(
            decide(OverlapPolicy::default(), busy(1, 0), t(LATER)),
            Skip(SkipReason::Overlap)
        );
    }

    #[test]
    fn text_forms() {
        for p in [
            OverlapPolicy::Skip,
            OverlapPolicy::QueueOne,
            OverlapPolicy::Allow,
            OverlapPolicy::CancelRunning,
        ] {
            assert_eq!(p.name().parse::<OverlapPolicy>(), Ok(p));
        }
        assert_eq!(" Queue_One ".parse(), Ok(OverlapPolicy::QueueOne));
        let e = "parallel".parse::<OverlapPolicy>().unwrap_err().to_string();
        assert_eq!(
            e,
            "overlap policy \"parallel\" is not valid; use skip, queue-one, allow or cancel-running"
        );
    }
}
