//! What every backend must decide the same way, in one place.
//!
//! The memory store is the reference and each database store must behave exactly like it
//! (the conformance suite checks that); the parts of that behaviour that are not storage —
//! how a claim advances a job's next fire past DST-gap skips, how a finish changes a run,
//! which recovery event a stranded run gets, and the wording of the common errors — live here
//! so that the backends call them instead of keeping copies in step.

use std::time::Duration;

use jiff::Timestamp;

use super::{RunFinish, StoreError, StoreResult};
use crate::job::{JobId, JobName};
use crate::run::{NodeId, Run, RunEvent, RunId, RunState, SkipReason};
use crate::schedule::{OccurrenceKind, Schedule};

/// The most DST-gap skips one advance of a job's next fire records; past that the job has no
/// next fire (a rule whose every occurrence falls into gaps would otherwise spin).
pub const MAX_SKIPS_PER_ADVANCE: usize = 64;

/// The schedule's next firing occurrence after `fire`, and the DST-gap skips passed on the
/// way (to be recorded as skipped runs).
pub fn next_firing(
    schedule: &Schedule,
    fire: Timestamp,
) -> (Option<Timestamp>, Vec<(Timestamp, SkipReason)>) {
    let mut skips = Vec::new();
    let mut next = schedule.next_after(fire);
    while let Some(o) = next {
        match o.kind {
            OccurrenceKind::Skipped(reason) if skips.len() < MAX_SKIPS_PER_ADVANCE => {
                skips.push((o.at, reason.into()));
                next = schedule.next_following(&o);
            }
            OccurrenceKind::Skipped(_) => return (None, skips),
            OccurrenceKind::Fire | OccurrenceKind::FireShifted => return (Some(o.at), skips),
        }
    }
    (None, skips)
}

/// Applies a finish to a run read from the store: the run must still be running the expected
/// attempt (else a conflict), and a finish in `Pending` is a retry (attempt + 1).
pub fn apply_finish(
    run: &mut Run,
    id: RunId,
    expected_attempt: u32,
    finish: &RunFinish,
) -> StoreResult<()> {
    if run.state != RunState::Running || run.attempt != expected_attempt {
        return Err(StoreError::conflict(format!(
            "run {id} is not running attempt {expected_attempt} (it is {}, attempt {}); \
             another node or request changed it first: reload it",
            run.state, run.attempt
        )));
    }
    run.error.clone_from(&finish.error);
    run.result_json.clone_from(&finish.result_json);
    run.elapsed = finish.elapsed;
    run.plugin.clone_from(&finish.plugin);
    run.lease_expires_at = None;
    run.state = finish.state;
    if finish.state == RunState::Pending {
        run.attempt += 1;
        run.next_attempt_at = finish.retry_at;
    } else {
        run.next_attempt_at = None;
        run.finished_at = Some(finish.finished_at);
    }
    Ok(())
}

/// The recovery event for a running run: the restarting node's own runs are restarts (even
/// with a live lease), everybody else's are lost leases.
pub fn recovery_event(run: &Run, node: Option<&NodeId>) -> RunEvent {
    if node.is_some() && run.node_id.as_ref() == node {
        RunEvent::NodeRestarted
    } else {
        RunEvent::LeaseExpired
    }
}

/// `t + d`, or an `invalid` error naming `what`.
pub fn add(t: Timestamp, d: Duration, what: &str) -> StoreResult<Timestamp> {
    t.checked_add(d).map_err(|e| {
        StoreError::invalid(format!("{what} is out of range; use a shorter duration"))
            .with_source(e)
    })
}

/// An optional instant for messages.
pub fn show(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "none".to_string(), |t| t.to_string())
}

/// The error for a job id that does not exist.
pub fn job_missing(id: JobId) -> StoreError {
    StoreError::not_found(format!(
        "job {id} does not exist; it may have been deleted: reload the job list"
    ))
}

/// The error for a run id that does not exist.
pub fn run_missing(id: RunId) -> StoreError {
    StoreError::not_found(format!(
        "run {id} does not exist; it may have been purged or its job deleted"
    ))
}

/// The error for a job name that another job has.
pub fn name_taken(name: &JobName) -> StoreError {
    StoreError::conflict(format!(
        "job name {name} is already taken; choose another name or update the existing job"
    ))
}

/// The (job, fire time) key is taken by run `other`.
pub fn fire_taken(job: JobId, fire: Timestamp, other: RunId) -> StoreError {
    StoreError::conflict(format!(
        "job {job} already has run {other} for fire time {fire}; a fire is recorded once"
    ))
}

/// Refuses a run for [`super::Store::run_insert_skipped`] that is not skipped with a reason.
pub fn check_skipped(run: &Run) -> StoreResult<()> {
    if run.state != RunState::Skipped || run.skip_reason.is_none() {
        return Err(StoreError::invalid(format!(
            "run of job {} at {} is not a skipped run with a reason; build it with Run::skipped",
            run.job_id, run.fire_time
        )));
    }
    Ok(())
}
