//! Overlap policy: what a fire does while the job's previous run is still going (seed 000 §6.3:
//! a 15-minute archive job on a 10-minute schedule wrote the same table twice at once).

use std::fmt;
use std::str::FromStr;

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
}

/// Decides a due fire given how many runs of the job are `running` and how many are `queued`
/// (pending behind them, not counting the new fire).
pub fn decide(policy: OverlapPolicy, running: usize, queued: usize) -> OverlapDecision {
    if running == 0 && queued == 0 {
        return OverlapDecision::Start;
    }
    match policy {
        OverlapPolicy::Allow => OverlapDecision::Start,
        OverlapPolicy::Skip => OverlapDecision::Skip(SkipReason::Overlap),
        OverlapPolicy::QueueOne if queued == 0 => OverlapDecision::Queue,
        OverlapPolicy::QueueOne => OverlapDecision::Skip(SkipReason::Overlap),
        OverlapPolicy::CancelRunning => OverlapDecision::CancelRunningThenStart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OverlapDecision::*;

    #[test]
    fn nothing_running_always_starts() {
        for p in [
            OverlapPolicy::Skip,
            OverlapPolicy::QueueOne,
            OverlapPolicy::Allow,
            OverlapPolicy::CancelRunning,
        ] {
            assert_eq!(decide(p, 0, 0), Start, "{p}");
        }
    }

    #[test]
    fn each_policy_with_a_run_in_progress() {
        let skip = Skip(SkipReason::Overlap);
        assert_eq!(decide(OverlapPolicy::Skip, 1, 0), skip);
        assert_eq!(decide(OverlapPolicy::QueueOne, 1, 0), Queue);
        assert_eq!(decide(OverlapPolicy::QueueOne, 1, 1), skip);
        assert_eq!(decide(OverlapPolicy::Allow, 3, 0), Start);
        assert_eq!(
            decide(OverlapPolicy::CancelRunning, 1, 0),
            CancelRunningThenStart
        );
        // A queued run whose predecessor just finished still blocks a second queue entry.
        assert_eq!(decide(OverlapPolicy::QueueOne, 0, 1), skip);
    }

    #[test]
    fn seed_000_archive_job_does_not_run_twice_by_default() {
        // 15-minute job, 10-minute schedule: at minute 10 the first run is still going.
        assert_eq!(
            decide(OverlapPolicy::default(), 1, 0),
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
