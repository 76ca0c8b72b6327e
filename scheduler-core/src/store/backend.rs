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
use crate::job::{JobDef, JobId, JobName, Validity};
use crate::node::{InstanceId, NodeStatus, taken_over_message};
use crate::run::{NodeId, Run, RunEvent, RunId, RunState, SkipReason, Trigger};
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

/// How the claim's fire of `job` at `fire`, claimed at `now`, came to be ([`Trigger`]): a
/// fire that is not a firing occurrence of the schedule (or of a job without one) was set by
/// a trigger (`manual`); one later than the misfire lateness window was released by the
/// misfire policy (`catch_up`); else `schedule`.
pub fn trigger_of(job: &JobDef, fire: Timestamp, now: Timestamp) -> Trigger {
    let scheduled = job.schedule.as_ref().is_some_and(|s| {
        // `next_after` is exclusive: ask from one second before, so `fire` itself is found.
        let before = fire
            .checked_sub(jiff::SignedDuration::from_secs(1))
            .unwrap_or(fire);
        let mut next = s.next_after(before);
        while let Some(o) = next {
            if o.at > fire {
                return false;
            }
            if o.at == fire && o.fires() {
                return true;
            }
            next = s.next_following(&o);
        }
        false
    });
    if !scheduled {
        return Trigger::Manual;
    }
    let window =
        jiff::SignedDuration::try_from(job.misfire.lateness).unwrap_or(jiff::SignedDuration::MAX);
    if now.duration_since(fire) > window {
        Trigger::CatchUp
    } else {
        Trigger::Schedule
    }
}

/// The claim's advance of `job`'s next fire past `fire`: [`next_firing`] kept inside the
/// job's validity window ([`JobDef::first_fire_after`] when the schedule's next fire lies
/// before the window opens; `None` once it has closed). DST-gap skips outside the window are
/// not recorded: nothing was due there.
pub fn advance(job: &JobDef, fire: Timestamp) -> (Option<Timestamp>, Vec<(Timestamp, SkipReason)>) {
    let Some(schedule) = &job.schedule else {
        return (None, Vec::new());
    };
    let (next, mut skips) = next_firing(schedule, fire);
    skips.retain(|(at, _)| job.validity_at(*at) == Validity::Inside);
    let next = match next.map(|n| (n, job.validity_at(n))) {
        Some((n, Validity::Inside)) => Some(n),
        Some((_, Validity::NotYet)) => job.first_fire_after(fire),
        Some((_, Validity::Expired)) | None => None,
    };
    (next, skips)
}

/// The skipped run of a fire of `job` at `fire` that lies outside its validity window (its
/// next fire was stored before the window was moved), with the window in its text.
pub fn outside_validity(job: &JobDef, fire: Timestamp, now: Timestamp) -> Option<Run> {
    let detail = match job.validity_at(fire) {
        Validity::Inside => return None,
        Validity::NotYet => format!(
            "job {} is effective from {}",
            job.name,
            show(job.effective_from)
        ),
        Validity::Expired => format!("job {} expired at {}", job.name, show(job.expires_at)),
    };
    let id = job.id?;
    Some(Run::skipped(
        id,
        fire,
        SkipReason::OutsideValidity,
        Some(detail),
        now,
    ))
}

/// Applies a finish to a run read from the store: the run must still be running the expected
/// attempt (else a conflict), and a finish in `Pending` is a retry (attempt + 1). The columns
/// written are [`FinishWrite::of`](super::engine::FinishWrite::of) — the same rule a backend
/// writes in one statement.
pub fn apply_finish(
    run: &mut Run,
    id: RunId,
    expected_attempt: u32,
    finish: &RunFinish,
) -> StoreResult<()> {
    if run.state != RunState::Running || run.attempt != expected_attempt {
        return Err(unfinishable(run, id, expected_attempt));
    }
    super::engine::FinishWrite::of(finish).apply(run);
    Ok(())
}

/// The refusal of a finish of attempt `expected_attempt` of `run`, which is not running it.
pub fn unfinishable(run: &Run, id: RunId, expected_attempt: u32) -> StoreError {
    StoreError::conflict(format!(
        "run {id} is not running attempt {expected_attempt} (it is {}, attempt {}); another \
         node or request changed it first: reload it",
        run.state, run.attempt
    ))
}

/// Whether `run` already holds `finish` of attempt `expected` (a finish whose commit was
/// reported lost, read back).
pub fn finished_as(run: &Run, expected: u32, finish: &RunFinish) -> bool {
    let attempt = if finish.state == RunState::Pending {
        expected + 1
    } else {
        expected
    };
    run.state == finish.state
        && run.attempt == attempt
        && run.error == finish.error
        && run.result_json == finish.result_json
}

/// A run changed under a write that expected it unchanged while `doing` it.
pub fn run_changed(id: RunId, doing: &str) -> StoreError {
    StoreError::conflict(format!("run {id} changed while {doing}; try again"))
}

/// An edit of `name` from version `yours` while the store holds `stored`.
pub fn stale_version(name: &JobName, stored: u64, yours: u64) -> StoreError {
    StoreError::conflict(format!(
        "job {name} was changed by someone else (stored version {stored}, yours {yours}); \
         reload it and apply your change again"
    ))
}

/// A compare-and-set of `job`'s next fire from `expected` that found another value.
pub fn next_fire_moved(job: &JobDef, expected: Option<Timestamp>) -> StoreError {
    StoreError::conflict(format!(
        "job {} next fire is {}, not {}; another node moved it first: reload the job",
        job.name,
        show(job.next_fire),
        show(expected)
    ))
}

/// Whether a running run is a leftover of an earlier life of the node that is `restart`ing
/// (its id and its new instance): on that node, claimed by any other instance (or by none
/// recorded: a run from before instances were recorded).
pub fn is_leftover(run: &Run, restart: Option<(&NodeId, &InstanceId)>) -> bool {
    restart.is_some_and(|(node, instance)| {
        run.node_id.as_ref() == Some(node) && run.node_instance.as_ref() != Some(instance)
    })
}

/// The recovery event for a running run at `now`, if it needs one: a leftover of the
/// restarting node's earlier life is a restart (even with a live lease), any run whose lease
/// expired is a lost lease, anything else is left alone.
pub fn recovery_event(
    run: &Run,
    now: Timestamp,
    restart: Option<(&NodeId, &InstanceId)>,
) -> Option<RunEvent> {
    if is_leftover(run, restart) {
        Some(RunEvent::NodeRestarted)
    } else if run.lease_expires_at.is_none_or(|l| l <= now) {
        Some(RunEvent::LeaseExpired)
    } else {
        None
    }
}

/// The error of a lease renewal by a node life that is not (or no longer) the node's
/// registered one: `holder` is the row's instance, if there is a row.
pub fn not_registered(
    node: &NodeId,
    instance: &InstanceId,
    holder: Option<&NodeStatus>,
) -> StoreError {
    match holder {
        Some(h) => StoreError::conflict(taken_over_message(
            node,
            instance,
            &format!(
                "instance {} on {}{}",
                h.info.instance,
                h.info.host_name,
                if h.info.pid == 0 {
                    String::new()
                } else {
                    format!(", pid {}", h.info.pid)
                }
            ),
        )),
        None => StoreError::conflict(format!(
            "node {node} (instance {instance}) is not registered; register it \
             (Store::node_register) before renewing its leases"
        )),
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
