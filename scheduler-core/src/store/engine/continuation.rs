//! Continuations (issue 15 item 2; xxl-job child jobs, Hangfire continuations, seed 003 §6),
//! once for every backend: when a run reaches its final state, each job its job lists for
//! that state ([`JobDef::continuations_for`]: `on_success` for succeeded, `on_failure` for
//! failed and timed out, none for cancelled or skipped) gets exactly one run.
//!
//! * **Same transaction.** [`continue_after`] runs inside the transaction of the parent's
//!   final compare-and-set, after it matched: the children exist exactly when the parent's
//!   final state does. Every dialect's finish calls it ([`super::Dialect::finish`]'s
//!   contract; SQLite's finishing thread for each finish of its batch).
//! * **Once.** The compare-and-set matches once per run (a duplicated finish is refused, a
//!   lost COMMIT is resolved by reading the run back, which finds the children committed
//!   with it); beneath it, the unique (parent run, job) key of `runs` refuses a second child
//!   of one parent for one job, and a child already present is not written again.
//! * **What the child is.** A queued run (state pending, no retry time) of the child job,
//!   trigger `continuation`, `parent_run_id` the parent's id, fire time the parent's finish
//!   time (the next free millisecond of the child job's (job, fire time) key if another run
//!   holds that instant — two parents finishing in the same millisecond), created at the
//!   parent's finish time. The claim's queued-run rule starts it when its job is enabled,
//!   served by a node and has nothing running — the overlap rule every queued run obeys.
//! * **Which jobs may be named.** Checked when a job is stored, in its transaction
//!   ([`check_job`]): each name must be a stored job, and the continuation graph must have
//!   no cycle (a → b → a would run forever); a job another job continues with cannot be
//!   deleted or renamed ([`check_unreferenced`]). A child job removed behind takt's back
//!   (by hand in SQL) is passed over at the parent's finish.

use jiff::SignedDuration;

use super::{Conn, Fail, Res};
use crate::job::{JobDef, JobName};
use crate::run::{Run, RunState, Trigger};
use crate::store::StoreError;

/// How many milliseconds past the parent's finish a child's fire time may move to find a
/// free (job, fire time) key.
const FREE_FIRE_SEARCH_MS: i64 = 1_000;

/// Creates the continuation runs of `parent`, which has just reached its final state in the
/// transaction of `c` (see the module docs); the runs created.
pub async fn continue_after<C: Conn>(c: &mut C, parent: &Run) -> Res<Vec<Run>> {
    if parent.id.is_none() || !continues(parent.state) {
        return Ok(Vec::new());
    }
    // Only the names: every finished run asks, and most jobs list none.
    let Some(names) = c.job_continuations(parent.job_id, parent.state).await? else {
        return Ok(Vec::new());
    };
    continue_with(c, parent, &names).await
}

/// Whether a run in `state` may have continuations (a final state that lists them).
fn continues(state: RunState) -> bool {
    matches!(
        state,
        RunState::Succeeded | RunState::Failed | RunState::TimedOut
    )
}

/// [`continue_after`] with the parent's job already read (`job` is the job of `parent`, as
/// stored in this transaction): a batch of finishes reads each job once, not once per run.
pub async fn continue_after_job<C: Conn>(c: &mut C, parent: &Run, job: &JobDef) -> Res<Vec<Run>> {
    debug_assert_eq!(
        job.id,
        Some(parent.job_id),
        "continue_after_job: not the run's job"
    );
    continue_with(c, parent, job.continuations_for(parent.state)).await
}

/// Records the runs of `names` (the continuations the parent's job lists for its final
/// state) that the parent has not started yet.
async fn continue_with<C: Conn>(c: &mut C, parent: &Run, names: &[JobName]) -> Res<Vec<Run>> {
    let Some(parent_id) = parent.id else {
        return Ok(Vec::new());
    };
    if !continues(parent.state) || names.is_empty() {
        return Ok(Vec::new());
    }
    let at = parent.finished_at.unwrap_or(parent.fire_time);
    let existing = c.runs_of_parent(parent_id).await?;
    let mut children = Vec::with_capacity(names.len());
    for name in names {
        let Some(child) = c.job_get_by_name(name).await? else {
            continue;
        };
        let Some(child_id) = child.id else { continue };
        if existing.iter().any(|r| r.job_id == child_id) {
            continue;
        }
        let mut fire = at;
        let mut moved = 0;
        while c.run_id_at(child_id, fire).await?.is_some() {
            moved += 1;
            if moved > FREE_FIRE_SEARCH_MS {
                return Err(StoreError::conflict(format!(
                    "job {} has a run at every millisecond from {at} for {FREE_FIRE_SEARCH_MS} ms; \
                     the continuation of run {parent_id} cannot be recorded: try the finish again",
                    child.name
                ))
                .into());
            }
            fire = at
                .checked_add(SignedDuration::from_millis(moved))
                .map_err(|e| Fail::from(StoreError::invalid(e.to_string())))?;
        }
        let mut run = Run::pending(child_id, fire, at);
        run.trigger = Some(Trigger::Continuation);
        run.parent_run_id = Some(parent_id);
        children.push(run);
    }
    if children.is_empty() {
        return Ok(Vec::new());
    }
    let inserted = c.insert_runs(&children, 0).await?;
    if inserted.len() != children.len() {
        // The keys were free when read inside this transaction; a backend that let another
        // writer in between is retried rather than losing a continuation.
        return Err(StoreError::conflict(format!(
            "the continuations of run {parent_id} met runs written at the same time; try the \
             finish again"
        ))
        .into());
    }
    c.notify_due_sooner().await?;
    Ok(inserted)
}

/// The rules for a job's `on_success` / `on_failure` when it is inserted or updated, read in
/// the transaction that writes it: every name is a stored job, and no cycle goes through the
/// job. `job` is the new definition; the other jobs are read as stored.
pub async fn check_job<C: Conn>(c: &mut C, job: &JobDef) -> Res<()> {
    if job.continuation_targets().next().is_none() {
        return Ok(());
    }
    let jobs = c.job_list().await?;
    let others: Vec<&JobDef> = jobs
        .iter()
        .filter(|j| j.name != job.name && (job.id.is_none() || j.id != job.id))
        .collect();
    for (field, list) in [
        ("on_success", &job.on_success),
        ("on_failure", &job.on_failure),
    ] {
        for name in list {
            if !others.iter().any(|j| j.name == *name) {
                return Err(StoreError::invalid(format!(
                    "job {}: {field} names job \"{name}\", which does not exist; add that job \
                     first, or remove it from {field}",
                    job.name
                ))
                .into());
            }
        }
    }
    // A path from one of the job's targets back to the job is a cycle through it.
    let targets_of = |name: &JobName| -> Vec<JobName> {
        if *name == job.name {
            job.continuation_targets().cloned().collect()
        } else {
            others
                .iter()
                .find(|j| j.name == *name)
                .map(|j| j.continuation_targets().cloned().collect())
                .unwrap_or_default()
        }
    };
    let mut path = vec![job.name.clone()];
    let mut seen = Vec::new();
    if let Some(cycle) = find_cycle(&job.name, &mut path, &mut seen, &targets_of) {
        let shown: Vec<&str> = cycle.iter().map(JobName::as_str).collect();
        return Err(StoreError::invalid(format!(
            "job {}: its continuations form a cycle ({}); each run would start the next \
             forever: remove one of these on_success / on_failure entries",
            job.name,
            shown.join(" → ")
        ))
        .into());
    }
    Ok(())
}

/// Depth-first search from the last job of `path` for a way back to `start`; the cycle
/// (start … start) if there is one. `seen` holds the jobs already searched (each is searched
/// once, so the work is bounded by the number of jobs and edges).
fn find_cycle(
    start: &JobName,
    path: &mut Vec<JobName>,
    seen: &mut Vec<JobName>,
    targets_of: &dyn Fn(&JobName) -> Vec<JobName>,
) -> Option<Vec<JobName>> {
    let last = path.last()?.clone();
    for next in targets_of(&last) {
        if next == *start {
            let mut cycle = path.clone();
            cycle.push(next);
            return Some(cycle);
        }
        if seen.contains(&next) {
            continue;
        }
        seen.push(next.clone());
        path.push(next);
        if let Some(cycle) = find_cycle(start, path, seen, targets_of) {
            return Some(cycle);
        }
        path.pop();
    }
    None
}

/// Refuses to delete (`renamed_to: None`) or rename the stored job `old` while another job
/// lists it in its `on_success` / `on_failure` (its continuations would silently stop).
pub async fn check_unreferenced<C: Conn>(
    c: &mut C,
    old: &JobDef,
    renamed_to: Option<&JobName>,
) -> Res<()> {
    let jobs = c.job_list().await?;
    let Some(parent) = jobs
        .iter()
        .find(|j| j.id != old.id && j.continuation_targets().any(|n| *n == old.name))
    else {
        return Ok(());
    };
    let doing = match renamed_to {
        Some(new) => format!("renamed to {new}"),
        None => "removed".to_string(),
    };
    Err(StoreError::conflict(format!(
        "job {} cannot be {doing}: job {} continues with it (on_success / on_failure); remove \
         it from that job's lists first",
        old.name, parent.name
    ))
    .into())
}
