//! The claim: [`crate::store::Store::run_claim_due`], once for every backend.
//!
//! One transaction, in rounds of at most the room left: read the due fires and the due
//! pending runs (locked: two nodes claiming at once split them), merge them in claim order
//! (priority, due time, id, fires before pending runs at a tie), advance each fire's job past
//! it (conditionally on the old next fire) recording the DST-gap skips passed on the way,
//! insert the runs under the unique (job, fire time) key, then claim the pending runs (a
//! queued one only once its job is idle, which sees the runs this claim started). A round that
//! saw fewer candidates than room saw everything due, so no further round is read.
//!
//! **Fairness.** A round that is full (more is due than its room) gives at least half its
//! room to recurring fires (cron, calendar, interval) when that many are due
//! ([`recurring_share`]), so a backlog of one-off fires and retries never holds an
//! every-second schedule back. Jobs handled
//! in a round are left out of later ones: one claim advances a job's next fire at most once.
//!
//! Every run it starts carries the claim's random token. A COMMIT whose answer was lost is
//! resolved by that token ([`Conn::runs_claimed_by`]): found, the runs are returned as
//! claimed; not found, claiming again is safe. So a claimed run is neither lost nor claimed
//! twice.
//!
//! A job with dependencies passes their gate here (`depend.rs`): its fire becomes a running,
//! waiting or skipped run, and a waiting run comes back with the due pending runs at its
//! re-check time, holding no slot while it waits.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::group::{Groups, Verdict, held_run};
use super::{
    Conn, Dialect, DueSet, Engine, Fail, NextFireMove, PendingDue, RETRY_PAUSES_MS, Retry,
};
use super::{Session, depend, retrying};
use crate::attempt::Attempt;
use crate::job::{JobDef, JobId};
use crate::run::{Run, RunId, RunState, Trigger};
use crate::store::backend::{
    add, advance, job_missing, outside_validity, run_changed, run_missing, trigger_of,
};
use crate::store::{ClaimParams, ClaimedRun, StoreError, StoreResult};

static CLAIM_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A token no other claim uses: random per process (the standard library's per-process hash
/// keys), distinct per call.
fn claim_token() -> i64 {
    let n = CLAIM_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mixed = RandomState::new().hash_one(n);
    // Positive and never 0, which marks runs no claim wrote.
    i64::try_from(mixed >> 1).unwrap_or(i64::MAX).max(1)
}

/// The claim order of a candidate: (priority, due time in ms, id, pending after fires).
type Key = (u16, i64, i64, bool);

enum Pick {
    Fire(Box<JobDef>),
    Pending(RunId),
}

impl Pick {
    fn is_recurring(&self) -> bool {
        matches!(self, Pick::Fire(job) if job.is_recurring())
    }
}

/// The fairness rule: when more is due than a round has room for (`need`), at least half
/// the room (rounded up) goes to recurring fires ([`JobDef::is_recurring`]) if that many are
/// due — in claim order among themselves —, the rest to everything in claim order. Without
/// it an every-second cron waits behind a whole backlog of one-off fires or retries (B6: the
/// crons were 2.5–6 s late behind a 10 000-run drain), because their older due times sort
/// first. Priorities are honoured within each part; the share is a floor for the recurring
/// fires, never a cap (they also compete for the rest). `picks` (sorted, at most `need`,
/// read as the top of the claim order) gets the recurring fires after them in place of its
/// last other picks; the fires displaced stay due (not `handled`) for the next claim.
///
/// Read only when the first read was full: a claim that saw everything due has nothing to
/// share out, so an unsaturated claim costs no extra query.
///
/// `others_room` is how many runs that are not recurring fires the round may still take
/// ([`ClaimParams::recurring_only`]); the floor rises to what that leaves.
async fn recurring_share<C: Conn>(
    tx: &mut C,
    p: &ClaimParams,
    need: usize,
    others_room: usize,
    handled: &[JobId],
    picks: &mut Vec<(Key, Pick)>,
) -> Result<(), Fail> {
    let share = need.div_ceil(2).max(need.saturating_sub(others_room));
    let have = picks.iter().filter(|(_, pick)| pick.is_recurring()).count();
    if have >= share {
        return Ok(());
    }
    let mut skip = handled.to_vec();
    skip.extend(picks.iter().filter_map(|(_, pick)| match pick {
        Pick::Fire(job) => job.id,
        Pick::Pending(_) => None,
    }));
    let extra = tx
        .claim_fires(p.now, share - have, &skip, &p.tags, DueSet::Recurring)
        .await?;
    for job in extra {
        let (Some(id), Some(fire)) = (job.id, job.next_fire) else {
            continue;
        };
        // The last pick that is not a recurring fire makes room (there is one: fewer than
        // `share` of the `need` picks are recurring).
        let Some(at) = picks.iter().rposition(|(_, pick)| !pick.is_recurring()) else {
            break;
        };
        picks.remove(at);
        let key = (job.priority.get(), fire.as_millisecond(), id.0, false);
        picks.push((key, Pick::Fire(Box::new(job))));
    }
    picks.sort_by_key(|(k, _)| *k);
    Ok(())
}

pub(super) async fn run_claim_due<D: Dialect>(
    engine: &Engine<D>,
    p: &ClaimParams,
) -> StoreResult<Vec<ClaimedRun>> {
    let lease_until = add(p.now, p.lease, "run lease")?;
    let d = &engine.dialect;
    let what = "claiming due runs";
    let mut pauses = RETRY_PAUSES_MS.iter();
    loop {
        let token = claim_token();
        let f = match claim_once(d, p, lease_until, token).await {
            Ok(claimed) => return Ok(claimed),
            Err(f) => f,
        };
        match f.retry {
            Retry::No => return Err(f.error),
            Retry::Safe => {}
            Retry::Unknown => {
                engine.unknown_commits.fetch_add(1, Ordering::Relaxed);
                // Whatever this claim committed is found by its token; if nothing was,
                // claiming again is safe.
                let found = retrying(d, "checking a claim", || claimed_by(d, p, token))
                    .await
                    .map_err(|e| {
                        StoreError::transient(format!(
                            "claiming due runs: the outcome of a claim is unknown ({e}); a run \
                             it may have claimed is failed and retried by this node's next \
                             lease renewal"
                        ))
                    })?;
                if !found.is_empty() {
                    return Ok(found);
                }
            }
        }
        let Some(ms) = pauses.next() else {
            return Err(f.error);
        };
        d.pause(what, &f.error, Duration::from_millis(*ms)).await;
    }
}

async fn claim_once<D: Dialect>(
    d: &D,
    p: &ClaimParams,
    lease_until: jiff::Timestamp,
    token: i64,
) -> Result<Vec<ClaimedRun>, Fail> {
    let what = "claiming due runs";
    let mut s = d.session(what).await?;
    let mut tx = s.begin(what).await?;
    // A paused node claims nothing (its pause is in the database: any command may set it).
    if tx.claim_start(&p.node.0, token).await? {
        return Ok(Vec::new());
    }
    let mut claimed = Vec::new();
    let mut handled: Vec<JobId> = Vec::new();
    // Pending runs this claim looked at and left (a group at its limit, a queued run whose
    // job got busy): asked for again, they would fill every round, so later rounds read
    // past them.
    let mut passed: Vec<RunId> = Vec::new();
    let mut groups = Groups::default();
    // Runs that are not recurring fires this claim took (picked: a fire whose group queued it
    // still counts), against `limit - recurring_only`.
    let mut others = 0;
    let others_limit = p.limit.saturating_sub(p.recurring_only);
    while claimed.len() < p.limit {
        let need = p.limit - claimed.len();
        let others_room = others_limit.saturating_sub(others);
        let want = need.saturating_add(passed.len());
        let (fires, pending) = tx.claim_due(p.now, need, &handled, want, &p.tags).await?;
        let more_pending = pending.len() >= want;
        let pending: Vec<PendingDue> = pending
            .into_iter()
            .filter(|d| !passed.contains(&d.id))
            .collect();
        let mut picks: Vec<(Key, Pick)> = Vec::with_capacity(fires.len() + pending.len());
        for job in fires {
            let (Some(id), Some(fire)) = (job.id, job.next_fire) else {
                continue;
            };
            let key = (job.priority.get(), fire.as_millisecond(), id.0, false);
            picks.push((key, Pick::Fire(Box::new(job))));
        }
        for PendingDue {
            id,
            priority,
            due_at,
        } in pending
        {
            picks.push((
                (priority, due_at.as_millisecond(), id.0, true),
                Pick::Pending(id),
            ));
        }
        if picks.is_empty() {
            break;
        }
        picks.sort_by_key(|(k, _)| *k);
        let exhausted = picks.len() < need && !more_pending;
        picks.truncate(need);
        if !exhausted {
            recurring_share(&mut tx, p, need, others_room, &handled, &mut picks).await?;
        }
        // The reserve: other runs beyond their room are left (still due, and read by no
        // later round of this claim, which would only find more of them).
        let capped = cap_others(&mut picks, others_room);
        others += picks
            .iter()
            .filter(|(_, pick)| !pick.is_recurring())
            .count();

        let mut moves = Vec::new();
        let mut runs: Vec<Run> = Vec::new();
        let mut fired: Vec<(Key, JobDef)> = Vec::new();
        let mut pendings: Vec<(Key, RunId)> = Vec::new();
        for (key, pick) in picks {
            match pick {
                Pick::Pending(id) => pendings.push((key, id)),
                Pick::Fire(mut job) => {
                    let (Some(id), Some(fire)) = (job.id, job.next_fire) else {
                        continue;
                    };
                    handled.push(id);
                    let (next, skips) = advance(&job, fire);
                    moves.push(NextFireMove {
                        job: id,
                        old: fire,
                        new: next,
                    });
                    // A fire outside the validity window (the window moved after the next
                    // fire was stored) is recorded, never run.
                    for (at, reason) in skips {
                        runs.push(Run::skipped(id, at, reason, None, p.now));
                    }
                    let trigger = Some(trigger_of(&job, fire, p.now));
                    let manual = trigger == Some(Trigger::Manual);
                    match outside_validity(&job, fire, p.now) {
                        Some(skipped) => runs.push(Run { trigger, ..skipped }),
                        // A group held by a member's failure records the fire; one at its
                        // limit stores it queued, for a claim after a slot frees.
                        None => match groups.verdict(&mut tx, &job, fire, manual).await? {
                            Verdict::Skip(h) => runs.extend(
                                held_run(&job, fire, &h, p.now).map(|r| Run { trigger, ..r }),
                            ),
                            Verdict::Queue => runs.push(Run {
                                trigger,
                                ..Run::pending(id, fire, p.now)
                            }),
                            // A job with dependencies: running, waiting or skipped
                            // (`depend.rs`).
                            Verdict::Start if !job.dependencies.is_empty() => runs.push(Run {
                                trigger,
                                ..depend::fire_run(&mut tx, p, &job, fire, lease_until).await?
                            }),
                            Verdict::Start => runs.push(Run {
                                trigger,
                                ..p.new_run(id, fire, lease_until, &job.retry)
                                    .map_err(StoreError::from)?
                            }),
                        },
                    }
                    job.next_fire = next;
                    fired.push((key, *job));
                }
            }
        }
        let (moved, inserted) = tx.claim_write(&moves, &runs, token).await?;
        if moved != moves.len() {
            // Whatever was inserted goes with the transaction, never committed.
            return Err(StoreError::conflict(
                "a job's next fire moved while claiming it; claim again",
            )
            .into());
        }
        let mut round: Vec<(Key, ClaimedRun)> = Vec::new();
        for (key, job) in fired {
            let id = job.id;
            // A fire whose key was taken (a skipped or triggered run) runs nothing; its
            // job's next fire still advanced.
            if let Some(run) = inserted
                .iter()
                .find(|r| Some(r.job_id) == id && r.state == RunState::Running)
            {
                let recurring_fire = job.is_recurring();
                round.push((
                    key,
                    ClaimedRun {
                        run: run.clone(),
                        job,
                        recurring_fire,
                    },
                ));
            }
        }
        // Pending runs after the fires: a queued run must see the runs this round started.
        for (key, id) in pendings {
            match claim_pending_run(&mut tx, p, id, lease_until, token, &mut groups).await? {
                Some(c) => round.push((key, c)),
                None => passed.push(id),
            }
        }
        round.sort_by_key(|(k, _)| *k);
        claimed.extend(round.into_iter().map(|(_, c)| c));
        // A capped round read every recurring fire it had room for (the share asked for
        // them): a further round would find only other runs.
        if exhausted || capped {
            break;
        }
    }
    tx.commit().await?;
    Ok(claimed)
}

/// Leaves the last picks that are not recurring fires beyond `room` out of the round;
/// whether any was left.
fn cap_others(picks: &mut Vec<(Key, Pick)>, room: usize) -> bool {
    let mut seen = 0;
    let before = picks.len();
    picks.retain(|(_, pick)| {
        if pick.is_recurring() {
            return true;
        }
        seen += 1;
        seen <= room
    });
    picks.len() < before
}

/// Claims the due retry or queued run `id` inside the claim's transaction.
async fn claim_pending_run<C: Conn>(
    tx: &mut C,
    p: &ClaimParams,
    id: RunId,
    lease_until: jiff::Timestamp,
    token: i64,
    groups: &mut Groups,
) -> Result<Option<ClaimedRun>, Fail> {
    let mut run = tx.run_get(id).await?.ok_or_else(|| run_missing(id))?;
    if run.state != RunState::Pending {
        return Ok(None);
    }
    // A queued run starts only once its job is idle (one at a time, oldest first).
    if run.next_attempt_at.is_none() && !tx.queued_may_start(run.job_id).await? {
        return Ok(None);
    }
    let job = tx
        .job_get(run.job_id)
        .await?
        .ok_or_else(|| job_missing(run.job_id))?;
    // A first attempt (waiting, queued or backfilled) passes its dependencies' gate.
    if run.attempt == 1
        && !job.dependencies.is_empty()
        && matches!(
            depend::claim_gate(tx, p, &job, &mut run).await?,
            depend::Gate::Leave
        )
    {
        return Ok(None);
    }
    // Its group's limit counts every node's running runs (stays pending when full).
    if !groups.may_start(tx, &job).await? {
        return Ok(None);
    }
    let before = (run.state, run.attempt);
    p.claim(&mut run, lease_until, &job.retry)
        .map_err(StoreError::from)?;
    let stored = tx
        .run_update_if(&run, before, token)
        .await?
        .ok_or_else(|| run_changed(id, "claiming its retry"))?;
    if let Some(a) = attempt_of(&stored) {
        tx.attempts_begin(std::slice::from_ref(&a)).await?;
    }
    Ok(Some(ClaimedRun {
        run: stored,
        job,
        recurring_fire: false,
    }))
}

/// The attempt a claim begins for `run`, which it has just set running.
pub(super) fn attempt_of(run: &Run) -> Option<Attempt> {
    Some(Attempt::begun(
        run.id?,
        run.job_id,
        run.fire_time,
        run.attempt,
        run.node_id.clone()?,
        run.node_instance.clone(),
        run.started_at?,
    ))
}

/// After a claim's COMMIT failed with the outcome unknown: the runs it claimed if it
/// committed (found by its token), none if it did not.
async fn claimed_by<D: Dialect>(
    d: &D,
    p: &ClaimParams,
    token: i64,
) -> Result<Vec<ClaimedRun>, Fail> {
    let what = "checking a claim";
    let mut s = d.session(what).await?;
    let mut c = s.conn();
    let runs = c.runs_claimed_by(&p.node, token).await?;
    let mut out = Vec::with_capacity(runs.len());
    for run in runs {
        let job = c
            .job_get(run.job_id)
            .await?
            .ok_or_else(|| job_missing(run.job_id))?;
        // The claim's picks are gone with its answer: a first attempt of a recurring job
        // that no backfill or continuation made was a fire (or, rarely, a queued one:
        // counted as a fire, which errs towards the reserve).
        let recurring_fire = job.is_recurring()
            && run.attempt == 1
            && !matches!(run.trigger, Some(Trigger::Backfill | Trigger::Continuation));
        out.push(ClaimedRun {
            run,
            job,
            recurring_fire,
        });
    }
    Ok(out)
}
