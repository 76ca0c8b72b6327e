//! The misfire and overlap decisions of a pass, as plain functions from what the store said
//! to the writes it must make ([`Write`]); the shell reads, calls these, and writes.
//!
//! * Misfire: all three actions go through [`takt_core::policy::misfire::plan`] (kept inside
//!   the job's validity window by [`JobDef::misfire_plan`]), only when the oldest due fire
//!   is beyond the job's lateness window (fires are ascending, so otherwise every due fire is
//!   on time). Several fires kept by `fire-all` are claimed one per pass (the claim advances a
//!   job's next fire once per call).
//! * Overlap (counts from `job_due`, so they include other nodes' runs): only a fire whose
//!   time comes while a run of the job is in flight (running, or pending since before the
//!   fire: [`Busy::since`]) is an overlap, decided by [`overlap::decide`].

use jiff::Timestamp;
use takt_core::job::{JobDef, JobId};
use takt_core::policy::{Busy, OverlapDecision, OverlapPolicy, overlap};
use takt_core::run::SkipReason;
use takt_core::store::DueJob;

/// What a preparation did, for the machine.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// It recorded or moved fires: the claim order changed, so prepare again before claiming.
    pub changed: bool,
    /// Jobs whose overlap policy `cancel-running` asks their running runs to stop, with the
    /// fire that starts instead.
    pub cancel_running: Vec<(JobId, Timestamp)>,
    /// The earliest fire still to come (a pass deciding ahead of an instant) of a job with a
    /// run in flight: not decided now, since that run may end before the fire and an
    /// overlap is a fire whose time comes while a run is in flight. The machine claims
    /// nothing ahead of it; it is decided and claimed at its time ([`fire_to_come_waits`]).
    pub held: Option<Timestamp>,
}

/// Whether `due`'s fire must wait for its time to be decided: it is still to come at `now`
/// (a pass claiming ahead of an instant) and its job has a run in flight that the overlap
/// policy would weigh. Deciding it ahead would skip (or queue) a fire whose run before it
/// ends in time: with claims up to 500 ms ahead (`lookahead_batch`), an every-second cron
/// whose last run's end was still being recorded during a backlog was skipped (B6).
pub(crate) fn fire_to_come_waits(due: &DueJob, now: Timestamp) -> bool {
    due.next_fire > now && is_busy(due) && due.overlap != OverlapPolicy::Allow
}

/// A write one decision asks for, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// Record a skipped fire (a fire already recorded is fine).
    Skip {
        /// The fire.
        fire: Timestamp,
        /// Why.
        reason: SkipReason,
        /// A note (the summary of omitted misfires).
        detail: Option<String>,
    },
    /// Move the job's next fire, compare-and-set on `expected` (a lost one is fine).
    NextFire {
        /// What it must still be.
        expected: Timestamp,
        /// What it becomes.
        new: Option<Timestamp>,
    },
    /// Record the fire as a queued run (one already there is fine).
    Enqueue {
        /// The fire.
        fire: Timestamp,
    },
    /// Cancel this node's running runs of the job so that `fire` starts.
    CancelRunning {
        /// The fire.
        fire: Timestamp,
    },
}

/// Whether a due row needs a decision at all (the common case, an on-time fire of an idle job
/// or one that allows overlap, is decided from the row alone, without loading the job).
pub(crate) fn needs_decision(due: &DueJob, now: Timestamp) -> bool {
    let late = lateness(now, due.next_fire) > due.misfire.lateness;
    let busy = due.running > 0 || due.pending > 0;
    late || (busy && due.overlap != OverlapPolicy::Allow)
}

/// Whether the row's job has anything in flight (then [`overlap_writes`] decides after the
/// shell read [`Busy::since`]).
pub(crate) fn is_busy(due: &DueJob) -> bool {
    due.running > 0 || due.pending > 0
}

/// The misfire decision for `job` (loaded for `due`): its writes, and the fire the overlap
/// decision is about (`None`: nothing more to decide for this job now). A job gone
/// disabled or whose next fire moved since the row was read is left to the next pass.
pub(crate) fn misfire_writes(
    job: &JobDef,
    due: &DueJob,
    now: Timestamp,
) -> (Vec<Write>, Option<Timestamp>) {
    let nf = due.next_fire;
    if !job.enabled || job.next_fire != Some(nf) {
        return (Vec::new(), None);
    }
    let mut writes = Vec::new();
    let late = lateness(now, nf) > due.misfire.lateness;
    let mut fire = nf;
    // The misfire plan kept inside the job's validity window.
    if late && let Some(plan) = job.misfire_plan(nf, now) {
        for s in &plan.skips {
            writes.push(Write::Skip {
                fire: s.fire_time,
                reason: s.reason,
                detail: None,
            });
        }
        if let Some(o) = &plan.omitted {
            let detail = match o.count {
                Some(n) => format!("and {n} further misfires up to {}", o.last),
                None => format!("and further misfires up to {}", o.last),
            };
            writes.push(Write::Skip {
                fire: o.first,
                reason: SkipReason::Misfire,
                detail: Some(detail),
            });
        }
        let next = plan.fires.first().map(|f| f.fire_time).or(plan.next_fire);
        writes.push(Write::NextFire {
            expected: nf,
            new: next,
        });
        match next {
            Some(n) if n <= now => fire = n,
            _ => return (writes, None),
        }
    }
    (writes, is_busy(due).then_some(fire))
}

/// The overlap decision for `job`'s fire at `fire` while `busy`.
pub(crate) fn overlap_writes(
    job: &JobDef,
    policy: OverlapPolicy,
    busy: Busy,
    fire: Timestamp,
) -> Vec<Write> {
    let next = || job.first_fire_after(fire);
    match overlap::decide(policy, busy, fire) {
        OverlapDecision::Start => Vec::new(),
        OverlapDecision::Skip(reason) => vec![
            Write::Skip {
                fire,
                reason,
                detail: None,
            },
            Write::NextFire {
                expected: fire,
                new: next(),
            },
        ],
        // The fire waits as a queued run, claimed when the job is idle (queued runs one at a
        // time, oldest first); the job's schedule moves on. Queue: the next fire that comes
        // while both exist is skipped as an overlap (one queued at most). Wait: a catch-up
        // fire older than the run in progress, any number.
        OverlapDecision::Queue | OverlapDecision::Wait => vec![
            Write::Enqueue { fire },
            Write::NextFire {
                expected: fire,
                new: next(),
            },
        ],
        OverlapDecision::CancelRunningThenStart => vec![Write::CancelRunning { fire }],
    }
}

fn lateness(now: Timestamp, fire: Timestamp) -> std::time::Duration {
    std::time::Duration::try_from(now.duration_since(fire)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(fire: &str, overlap: OverlapPolicy, running: u32, pending: u32) -> DueJob {
        let mut job = JobDef::new("cron", "testing::echo").unwrap();
        job.id = Some(JobId(1));
        job.next_fire = Some(fire.parse().unwrap());
        job.overlap = overlap;
        DueJob::of(&job, running, pending).unwrap()
    }

    #[test]
    fn only_a_fire_to_come_of_a_busy_job_waits_for_its_time() {
        let now: Timestamp = "2026-03-01T00:00:09.500Z".parse().unwrap();
        let ahead = "2026-03-01T00:00:10Z";
        // A run (or a queued one) in flight, the fire still to come: decided at its time.
        assert!(fire_to_come_waits(
            &due(ahead, OverlapPolicy::Skip, 1, 0),
            now
        ));
        assert!(fire_to_come_waits(
            &due(ahead, OverlapPolicy::QueueOne, 0, 1),
            now
        ));
        // Idle, or overlap allowed: nothing to weigh, decided now.
        assert!(!fire_to_come_waits(
            &due(ahead, OverlapPolicy::Skip, 0, 0),
            now
        ));
        assert!(!fire_to_come_waits(
            &due(ahead, OverlapPolicy::Allow, 1, 0),
            now
        ));
        // A fire whose time has come is decided now, busy or not.
        let come = "2026-03-01T00:00:09.500Z";
        assert!(!fire_to_come_waits(
            &due(come, OverlapPolicy::Skip, 1, 0),
            now
        ));
    }
}
