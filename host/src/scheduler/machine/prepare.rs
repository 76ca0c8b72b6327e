//! The misfire and overlap decisions of a pass, as plain functions from what the store said
//! to the writes it must make ([`Write`]); the shell reads, calls these, and writes.
//!
//! * Misfire: all three actions go through [`misfire::plan`], only when the oldest due fire
//!   is beyond the job's lateness window (fires are ascending, so otherwise every due fire is
//!   on time). Several fires kept by `fire-all` are claimed one per pass (the claim advances a
//!   job's next fire once per call).
//! * Overlap (counts from `job_due`, so they include other nodes' runs): only a fire whose
//!   time comes while a run of the job is in flight (running, or pending since before the
//!   fire: [`Busy::since`]) is an overlap, decided by [`overlap::decide`].

use jiff::Timestamp;
use takt_core::job::{JobDef, JobId};
use takt_core::policy::{Busy, OverlapDecision, OverlapPolicy, misfire, overlap};
use takt_core::run::SkipReason;
use takt_core::store::DueJob;

use crate::scheduler::first_fire_after;

/// What a preparation did, for the machine.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// It recorded or moved fires: the claim order changed, so prepare again before claiming.
    pub changed: bool,
    /// Jobs whose overlap policy `cancel-running` asks their running runs to stop, with the
    /// fire that starts instead.
    pub cancel_running: Vec<(JobId, Timestamp)>,
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
    if let Some(schedule) = &job.schedule
        && late
    {
        let plan = misfire::plan(schedule, nf, now, job.misfire);
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
    let next = || {
        job.schedule
            .as_ref()
            .and_then(|s| first_fire_after(s, fire))
    };
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
