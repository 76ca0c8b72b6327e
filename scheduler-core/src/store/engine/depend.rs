//! Job dependencies in the store engine, once for every backend (the rule itself is pure:
//! [`crate::store::dependency`]).
//!
//! The claim evaluates a fire of a job with dependencies inside its own transaction, reading
//! the dependencies' job rows and then their runs for the period, so the database decides,
//! not one node's memory: a run another node committed is seen, one it is still claiming is
//! a fire still due (wait). The outcome is the fire's run: running (start), skipped (reason
//! `dependency`) or waiting — a pending first attempt with a re-check time, which the claim's
//! due pending runs bring back at that time ([`claim_gate`]) without holding an executor
//! slot. Queued and backfilled first attempts pass the same gate when they are claimed;
//! retries do not (their first attempt passed it).
//!
//! Job writes keep the graph sound: an insert or update is refused when it names an unknown
//! job or closes a cycle ([`check_job_graph`]), a delete or rename while others depend on
//! the job ([`check_not_depended_on`]).

use jiff::Timestamp;

use super::{Conn, Fail};
use crate::job::{JobDef, JobName};
use crate::policy::OverlapPolicy;
use crate::run::{Run, RunEvent, RunState, SkipReason};
use crate::store::dependency::{
    Decision, Dependency, RECHECK, Upstream, check_graph, decide, depended_on, dependents_of,
    period_fire, wait_deadline,
};
use crate::store::{ClaimParams, RunFilter, StoreError};

/// The rule for `job`'s fire at `fire` at `now`, from the dependencies' runs as the
/// transaction `tx` sees them.
pub(super) async fn evaluate<C: Conn>(
    tx: &mut C,
    job: &JobDef,
    fire: Timestamp,
    now: Timestamp,
) -> Result<Decision, Fail> {
    let mut deps = Vec::with_capacity(job.dependencies.len());
    for name in &job.dependencies {
        let upstream = match tx.job_get_by_name(name).await? {
            None => Upstream::Missing {
                why: "does not exist (it was removed or renamed)".to_string(),
            },
            Some(dep) => upstream_of(tx, &dep, fire).await?,
        };
        deps.push(Dependency {
            name: name.clone(),
            upstream,
        });
    }
    Ok(decide(fire, &deps, wait_deadline(job, fire), now))
}

/// What `dep`'s run for the period of `t` is. Its job row was read first: a claim that
/// advanced its next fire past the period committed the period's run with it, so the run is
/// seen by this later read.
async fn upstream_of<C: Conn>(tx: &mut C, dep: &JobDef, t: Timestamp) -> Result<Upstream, Fail> {
    let Some(id) = dep.id else {
        return Ok(Upstream::Missing {
            why: "is not stored".to_string(),
        });
    };
    let period = period_fire(dep, t);
    let filter = RunFilter {
        job: Some(id),
        fire_from: period,
        // `fire_to` is exclusive; fire times are whole seconds or finer.
        fire_to: Some(
            t.checked_add(jiff::SignedDuration::from_millis(1))
                .unwrap_or(t),
        ),
        limit: 1,
        ..RunFilter::default()
    };
    if let Some(r) = tx.run_list(&filter).await?.into_iter().next() {
        return Ok(Upstream::Run {
            fire: r.fire_time,
            state: r.state,
        });
    }
    Ok(match (period, dep.next_fire) {
        (Some(p), Some(next)) if next > p => Upstream::Missing {
            why: format!("has no run for its fire of {p} (its next fire is already {next})"),
        },
        // Still due (maybe being claimed on another node), or held by a pause: wait.
        (Some(p), _) => Upstream::Due { fire: p },
        (None, _) => Upstream::Missing {
            why: format!("has no fire and no run at or before {t}"),
        },
    })
}

/// The run the claim records for `job`'s fire at `fire` when the job has dependencies:
/// running, waiting or skipped.
pub(super) async fn fire_run<C: Conn>(
    tx: &mut C,
    p: &ClaimParams,
    job: &JobDef,
    fire: Timestamp,
    lease_until: Timestamp,
) -> Result<Run, Fail> {
    let id = job
        .id
        .ok_or_else(|| StoreError::invalid(format!("job {} has no id", job.name)))?;
    Ok(match evaluate(tx, job, fire, p.now).await? {
        Decision::Start => p
            .new_run(id, fire, lease_until, &job.retry)
            .map_err(StoreError::from)?,
        Decision::Wait {
            recheck,
            waiting_for,
        } => Run {
            next_attempt_at: Some(recheck),
            error: Some(waiting_for),
            ..Run::pending(id, fire, p.now)
        },
        Decision::Skip { message } => {
            Run::skipped(id, fire, SkipReason::Dependency, Some(message), p.now)
        }
    })
}

/// What the claim does with a pending first attempt of a job with dependencies.
pub(super) enum Gate {
    /// Claim it (its dependencies succeeded).
    Start,
    /// Leave it: it was written back waiting, or skipped, or changed meanwhile.
    Leave,
}

/// Applies the rule to the pending first attempt `run` of `job` (its dependencies not
/// empty): a start clears what it waited for; a wait or skip is written back here,
/// compare-and-set on its state and attempt. A run that waited starts only while its job has
/// nothing running (unless the job allows overlap): several fires that waited side by side
/// run one after another, as queued runs do.
pub(super) async fn claim_gate<C: Conn>(
    tx: &mut C,
    p: &ClaimParams,
    job: &JobDef,
    run: &mut Run,
) -> Result<Gate, Fail> {
    let before = (run.state, run.attempt);
    let decision = match evaluate(tx, job, run.fire_time, p.now).await? {
        Decision::Start
            if run.is_waiting()
                && job.overlap != OverlapPolicy::Allow
                && !tx.queued_may_start(run.job_id).await? =>
        {
            let deadline = wait_deadline(job, run.fire_time);
            match p.now.checked_add(RECHECK) {
                _ if p.now >= deadline => Decision::Skip {
                    message: format!(
                        "still waiting for the running run of {} to end at the end of the \
                         dependency wait ({deadline}); its dependencies had succeeded",
                        job.name
                    ),
                },
                Ok(r) => Decision::Wait {
                    recheck: r.min(deadline),
                    waiting_for: format!(
                        "waiting for the running run of {} to end (its dependencies \
                         succeeded); gives up at {deadline}",
                        job.name
                    ),
                },
                Err(_) => Decision::Start,
            }
        }
        d => d,
    };
    match decision {
        Decision::Start => {
            // What it waited for is over; the claim sets it running.
            run.error = None;
            Ok(Gate::Start)
        }
        Decision::Wait {
            recheck,
            waiting_for,
        } => {
            run.next_attempt_at = Some(recheck);
            run.error = Some(waiting_for);
            tx.run_update_if(run, before, 0).await?;
            Ok(Gate::Leave)
        }
        Decision::Skip { message } => {
            run.apply(
                RunEvent::Skip {
                    reason: SkipReason::Dependency,
                },
                p.now,
                &job.retry,
            )
            .map_err(StoreError::from)?;
            run.error = Some(message);
            debug_assert_eq!(run.state, RunState::Skipped);
            tx.run_update_if(run, before, 0).await?;
            Ok(Gate::Leave)
        }
    }
}

/// Refuses `job` (about to be inserted, or to replace the stored job of its id) when it
/// names a job that does not exist or closes a dependency cycle; the graph is read in the
/// writing transaction.
pub(super) async fn check_job_graph<C: Conn>(tx: &mut C, job: &JobDef) -> Result<(), Fail> {
    if job.dependencies.is_empty() {
        return Ok(());
    }
    let mut jobs = tx.job_list().await?;
    jobs.retain(|j| j.id.is_none() || j.id != job.id);
    let graph = jobs
        .iter()
        .chain(std::iter::once(job))
        .map(|j| (&j.name, j.dependencies.as_slice()));
    check_graph(graph, &job.name)?;
    Ok(())
}

/// Refuses to delete (or rename away) `name` while other jobs depend on it, naming them.
pub(super) async fn check_not_depended_on<C: Conn>(
    tx: &mut C,
    name: &JobName,
    doing: &str,
) -> Result<(), Fail> {
    let jobs = tx.job_list().await?;
    let dependents = dependents_of(&jobs, name);
    if dependents.is_empty() {
        Ok(())
    } else {
        Err(depended_on(name, &dependents, doing).into())
    }
}
