//! Backfill (issue 15 item 8), once for every backend: the fires of a job's schedule in a
//! past range that have no run yet, recorded as **queued** runs with trigger `backfill`.
//!
//! Queued runs are what the claim already serializes ([`crate::store::Store::run_enqueue`]):
//! a queued run starts only while no run of its job is running, oldest first (created at,
//! then id). Backfilled runs are inserted in fire-time order in one transaction (one
//! `created_at`, ascending ids), so they run in fire-time order, one at a time, and never
//! beside another run of the job. The (job, fire time) key deduplicates: a fire that already
//! has a run (run, skipped, queued, or backfilled before) is left alone and counted as
//! present, so a second backfill of the same range creates nothing.

use jiff::Timestamp;

use super::{Conn, Dialect, Engine, Session, retrying};
use crate::job::{JobDef, JobId};
use crate::run::{Run, Trigger};
use crate::schedule::Rule;
use crate::store::backend::job_missing;
use crate::store::{Backfilled, StoreError, StoreResult};

/// How many fires past `max` a refused range is counted to, so the refusal can say how many
/// it holds without walking an unbounded range.
const COUNT_FACTOR: usize = 10;

/// The fires of `job` in `[from, to)` inside its validity window, at most `max`; a range with
/// more is refused (Invalid) with its count (or a lower bound) and what to do.
pub fn backfill_fires(
    job: &JobDef,
    from: Timestamp,
    to: Timestamp,
    max: usize,
) -> StoreResult<Vec<Timestamp>> {
    if from >= to {
        return Err(StoreError::invalid(format!(
            "backfill range [{from}, {to}) is empty or reversed; give --from before --to"
        )));
    }
    if max == 0 {
        return Err(StoreError::invalid(
            "backfill --max is 0; give at least 1 (the default is 10000)",
        ));
    }
    let recurring = job
        .schedule
        .as_ref()
        .is_some_and(|s| !matches!(s.rule(), Rule::Once(_)));
    if !recurring {
        return Err(StoreError::invalid(format!(
            "job {} has no recurring schedule (it runs once or only when triggered); backfill \
             fills the fires of a cron, calendar or interval schedule — use `takt job trigger` \
             to run it now",
            job.name
        )));
    }
    // `next_fires` is exclusive: one second earlier includes `from` itself (fires are whole
    // seconds), and the earlier ones are dropped.
    let after = from
        .checked_sub(jiff::SignedDuration::from_secs(1))
        .unwrap_or(from);
    let bound = max.saturating_mul(COUNT_FACTOR).max(max + 1);
    let fires: Vec<Timestamp> = job
        .next_fires(after, bound)
        .into_iter()
        .filter(|t| *t >= from)
        .take_while(|t| *t < to)
        .collect();
    if fires.len() > max {
        let count = if fires.len() >= bound - 1 {
            format!("at least {}", fires.len())
        } else {
            fires.len().to_string()
        };
        return Err(StoreError::invalid(format!(
            "backfill range [{from}, {to}) of job {} holds {count} fires, more than --max \
             {max}; backfill a shorter range, or raise --max",
            job.name
        )));
    }
    Ok(fires)
}

impl<D: Dialect> Engine<D> {
    pub(super) async fn run_backfill(
        &self,
        id: JobId,
        from: Timestamp,
        to: Timestamp,
        max: usize,
        now: Timestamp,
    ) -> StoreResult<Backfilled> {
        let d = &self.dialect;
        let what = "backfilling a job";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let job = tx.job_get(id).await?.ok_or_else(|| job_missing(id))?;
            // A queued run of a paused job would run while it is paused.
            if tx.hold_get(id).await?.is_some() {
                return Err(StoreError::conflict(format!(
                    "job {} is paused; resume it (takt job resume) before backfilling",
                    job.name
                ))
                .into());
            }
            let fires = backfill_fires(&job, from, to, max)?;
            let runs: Vec<Run> = fires
                .iter()
                .map(|at| Run {
                    trigger: Some(Trigger::Backfill),
                    ..Run::pending(id, *at, now)
                })
                .collect();
            let inserted = tx.insert_runs(&runs, 0).await?;
            if !inserted.is_empty() {
                tx.notify_due_sooner().await?;
            }
            tx.commit().await?;
            Ok(Backfilled {
                fires: fires.len(),
                created: inserted.len(),
                present: fires.len() - inserted.len(),
            })
        })
        .await
    }
}
