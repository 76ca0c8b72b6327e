//! Pause and resume of jobs, groups and nodes, once for every backend (the rules are in
//! [`crate::pause`]; this is how they are read and written).
//!
//! A held job's next fire lives in its hold and its own next fire is `NULL`, so the due
//! queries, the claim and `next_due` need no clause for pauses. What keeps that true:
//! every write of a job's next fire in the engine goes through [`keep_held`] (job insert and
//! update: a next fire given for a held job goes into the hold; a job added to or moved into a
//! paused group is held, one moved out of it released) or refuses a held job
//! (`job_set_next_fire`, which a trigger uses).

use jiff::Timestamp;

use super::{Conn, Dialect, Engine, Fail, Session, retrying};
use crate::job::{JobDef, JobId};
use crate::pause::{Hold, Pause, PauseKind, PauseTarget, Resumed, resume_plan};
use crate::store::backend::job_missing;
use crate::store::{StoreError, StoreResult};

/// A job held by a pause refuses a direct move of its next fire (a trigger).
pub(super) fn held_refusal(job: &JobDef, pause: Option<&Pause>) -> StoreError {
    let by = pause.map_or_else(|| "by its group's pause".to_string(), ToString::to_string);
    StoreError::conflict(format!(
        "job {} is paused ({by}); resume it first (takt job resume {}, or takt group resume \
         for its group)",
        job.name, job.name
    ))
}

fn next_fire_moved(job: &JobDef, doing: &str) -> Fail {
    StoreError::conflict(format!(
        "job {}'s next fire moved while {doing} (a node claimed it); try again",
        job.name
    ))
    .into()
}

/// The pause of `job`'s group, if it has a group and it is paused.
async fn group_pause<C: Conn>(c: &mut C, job: &JobDef) -> Result<Option<Pause>, Fail> {
    match &job.group {
        Some(g) => c.pause_get(PauseKind::Group, g).await,
        None => Ok(None),
    }
}

/// Holds `job` (whose next fire column is `current`) with its own pause `pause`: a job held
/// already keeps its kept-aside next fire.
async fn hold<C: Conn>(
    c: &mut C,
    job: &JobDef,
    current: Option<Timestamp>,
    pause: Option<Pause>,
) -> Result<(), Fail> {
    let id = job.id.ok_or_else(|| job_without_id(job))?;
    let next_fire = match c.hold_get(id).await? {
        Some(h) => {
            c.hold_delete(id).await?;
            h.next_fire.or(current)
        }
        None => current,
    };
    if current.is_some() && !c.job_set_next_fire_if(id, current, None).await? {
        return Err(next_fire_moved(job, "pausing it"));
    }
    c.hold_insert(id, &Hold { next_fire, pause }).await
}

/// Releases held `job` (next fire column `current`, normally `NULL`) at `now`: the paused
/// interval goes through [`resume_plan`], its skips are recorded, the next fire restored.
/// Returns how many skips were recorded.
async fn release<C: Conn>(
    c: &mut C,
    job: &JobDef,
    held: &Hold,
    current: Option<Timestamp>,
    why: &str,
    now: Timestamp,
) -> Result<u64, Fail> {
    let id = job.id.ok_or_else(|| job_without_id(job))?;
    c.hold_delete(id).await?;
    let (runs, next) = resume_plan(job, current.or(held.next_fire), now, why);
    let recorded = c.insert_runs(&runs, 0).await?.len() as u64;
    if current != next && !c.job_set_next_fire_if(id, current, next).await? {
        return Err(next_fire_moved(job, "resuming it"));
    }
    if next.is_some() {
        c.notify_due_sooner().await?;
    }
    Ok(recorded)
}

fn job_without_id(job: &JobDef) -> Fail {
    StoreError::invalid(format!("job {} has no id; store it first", job.name)).into()
}

/// After `stored` (a job just inserted or updated, inside the transaction) was written with
/// its next fire: holds it when its own or its group's pause says so (a next fire given for a
/// held job goes into the hold), releases it when neither does any more. `stored.next_fire`
/// ends as the column holds it.
pub(super) async fn keep_held<C: Conn>(
    c: &mut C,
    stored: &mut JobDef,
    now: Timestamp,
) -> Result<(), Fail> {
    let id = stored.id.ok_or_else(|| job_without_id(stored))?;
    let held = c.hold_get(id).await?;
    let group = group_pause(c, stored).await?;
    let own = held.as_ref().and_then(|h| h.pause.clone());
    match held {
        Some(h) if own.is_some() || group.is_some() => {
            // A next fire recomputed by the writer replaces the kept one; none given keeps it
            // (unless the job no longer has a schedule).
            let kept = match (stored.next_fire, &stored.schedule) {
                (Some(n), _) => Some(n),
                (None, None) => None,
                (None, Some(_)) => h.next_fire,
            };
            if stored.next_fire.is_some()
                && !c.job_set_next_fire_if(id, stored.next_fire, None).await?
            {
                return Err(next_fire_moved(stored, "holding it"));
            }
            c.hold_delete(id).await?;
            c.hold_insert(
                id,
                &Hold {
                    next_fire: kept,
                    pause: h.pause,
                },
            )
            .await?;
            stored.next_fire = None;
        }
        Some(h) => {
            let why = "held while its group was paused";
            release(c, stored, &h, stored.next_fire, why, now).await?;
            stored.next_fire = c.job_get(id).await?.and_then(|j| j.next_fire);
        }
        None if group.is_some() => {
            hold(c, stored, stored.next_fire, None).await?;
            stored.next_fire = None;
        }
        None => {}
    }
    Ok(())
}

impl<D: Dialect> Engine<D> {
    pub(super) async fn pause(
        &self,
        target: &PauseTarget,
        pause: &Pause,
    ) -> StoreResult<Vec<JobId>> {
        let d = &self.dialect;
        let what = "pausing";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let held = match target {
                PauseTarget::Job(id) => {
                    let job = tx.job_get(*id).await?.ok_or_else(|| job_missing(*id))?;
                    if let Some(p) = tx.hold_get(*id).await?.and_then(|h| h.pause) {
                        return Err(StoreError::conflict(format!(
                            "job {} is already {p}; resume it first to pause it again",
                            job.name
                        ))
                        .into());
                    }
                    hold(&mut tx, &job, job.next_fire, Some(pause.clone())).await?;
                    vec![*id]
                }
                PauseTarget::Group(g) => {
                    let members: Vec<JobDef> = tx
                        .job_list()
                        .await?
                        .into_iter()
                        .filter(|j| j.group.as_deref() == Some(g.as_str()))
                        .collect();
                    if members.is_empty() {
                        return Err(StoreError::not_found(format!(
                            "no job is in group {g}; check the name (takt job list shows each \
                             job's group)"
                        ))
                        .into());
                    }
                    if let Some(p) = tx.pause_get(PauseKind::Group, g).await? {
                        return Err(StoreError::conflict(format!(
                            "group {g} is already {p}; resume it first to pause it again"
                        ))
                        .into());
                    }
                    tx.pause_insert(PauseKind::Group, g, pause).await?;
                    let mut ids = Vec::new();
                    for job in members {
                        let own = tx.hold_get(job.id.unwrap_or(JobId(0))).await?;
                        hold(&mut tx, &job, job.next_fire, own.and_then(|h| h.pause)).await?;
                        ids.extend(job.id);
                    }
                    ids
                }
                PauseTarget::Node(n) => {
                    if tx.node_get(n).await?.is_none() {
                        return Err(StoreError::not_found(format!(
                            "node {n} has never registered with this database; takt nodes \
                             lists the nodes"
                        ))
                        .into());
                    }
                    if !tx.pause_insert(PauseKind::Node, &n.0, pause).await? {
                        let p = tx.pause_get(PauseKind::Node, &n.0).await?;
                        let p = p.map_or_else(|| "paused".to_string(), |p| p.to_string());
                        return Err(StoreError::conflict(format!(
                            "node {n} is already {p}; resume it first to pause it again"
                        ))
                        .into());
                    }
                    Vec::new()
                }
            };
            tx.commit().await?;
            Ok(held)
        })
        .await
    }

    pub(super) async fn resume(
        &self,
        target: &PauseTarget,
        now: Timestamp,
    ) -> StoreResult<Resumed> {
        let d = &self.dialect;
        let what = "resuming";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let mut out = Resumed::default();
            match target {
                PauseTarget::Job(id) => {
                    let job = tx.job_get(*id).await?.ok_or_else(|| job_missing(*id))?;
                    let held = tx.hold_get(*id).await?;
                    let group = group_pause(&mut tx, &job).await?;
                    let Some((h, own)) = held.and_then(|h| h.pause.clone().map(|p| (h, p))) else {
                        let why = match (&job.group, group) {
                            (Some(g), Some(p)) => format!(
                                "; it is held by its group {g} ({p}): takt group resume {g}"
                            ),
                            _ => String::new(),
                        };
                        return Err(StoreError::conflict(format!(
                            "job {} is not paused{why}",
                            job.name
                        ))
                        .into());
                    };
                    if group.is_some() {
                        // Still held by the group: only the job's own pause ends.
                        tx.hold_delete(*id).await?;
                        let kept = Hold {
                            next_fire: h.next_fire,
                            pause: None,
                        };
                        tx.hold_insert(*id, &kept).await?;
                    } else {
                        out.skipped +=
                            release(&mut tx, &job, &h, job.next_fire, &own.to_string(), now)
                                .await?;
                        out.jobs.push(*id);
                    }
                }
                PauseTarget::Group(g) => {
                    // A resume ends both holds of a group: the operator's pause and a
                    // member's failure (the group's next time point runs again).
                    out.released = super::group::release_hold(&mut tx, g, now).await?;
                    let Some(p) = tx.pause_get(PauseKind::Group, g).await? else {
                        if out.released.is_some() {
                            tx.commit().await?;
                            return Ok(out);
                        }
                        return Err(StoreError::not_found(format!(
                            "group {g} is neither paused nor held by a failed member; takt \
                             group list shows each group's state"
                        ))
                        .into());
                    };
                    tx.pause_delete(PauseKind::Group, g).await?;
                    let why = format!("group {g} {p}");
                    for job in tx.job_list().await? {
                        let Some(id) = job.id.filter(|_| job.group.as_deref() == Some(g)) else {
                            continue;
                        };
                        match tx.hold_get(id).await? {
                            // Its own pause goes on.
                            Some(h) if h.pause.is_some() => {}
                            Some(h) => {
                                out.skipped +=
                                    release(&mut tx, &job, &h, job.next_fire, &why, now).await?;
                                out.jobs.push(id);
                            }
                            None => {}
                        }
                    }
                }
                PauseTarget::Node(n) => {
                    if !tx.pause_delete(PauseKind::Node, &n.0).await? {
                        return Err(StoreError::not_found(format!("node {n} is not paused")).into());
                    }
                    tx.notify_due_sooner().await?;
                }
            }
            tx.commit().await?;
            Ok(out)
        })
        .await
    }

    /// The pause that holds job `id` (its own, else its group's), if any.
    pub(super) async fn job_paused(&self, id: JobId) -> StoreResult<Option<(PauseTarget, Pause)>> {
        let d = &self.dialect;
        let what = "reading a job's pause";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            let job = c.job_get(id).await?.ok_or_else(|| job_missing(id))?;
            if let Some(p) = c.hold_get(id).await?.and_then(|h| h.pause) {
                return Ok(Some((PauseTarget::Job(id), p)));
            }
            Ok(group_pause(&mut c, &job)
                .await?
                .zip(job.group.clone())
                .map(|(p, g)| (PauseTarget::Group(g), p)))
        })
        .await
    }

    pub(super) async fn node_paused(
        &self,
        node: &crate::run::NodeId,
    ) -> StoreResult<Option<Pause>> {
        let d = &self.dialect;
        let what = "reading a node's pause";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            s.conn().pause_get(PauseKind::Node, &node.0).await
        })
        .await
    }

    pub(super) async fn pause_list(&self) -> StoreResult<Vec<(PauseTarget, Pause)>> {
        let d = &self.dialect;
        let what = "listing pauses";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            let mut out: Vec<(PauseTarget, Pause)> = c
                .holds_list()
                .await?
                .into_iter()
                .filter_map(|(id, h)| h.pause.map(|p| (PauseTarget::Job(id), p)))
                .collect();
            for (kind, name, p) in c.pauses_list().await? {
                out.push((
                    match kind {
                        PauseKind::Group => PauseTarget::Group(name),
                        PauseKind::Node => PauseTarget::Node(crate::run::NodeId(name)),
                    },
                    p,
                ));
            }
            Ok(out)
        })
        .await
    }
}
