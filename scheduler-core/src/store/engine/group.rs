//! Groups, once for every backend (the rules are in [`crate::group`]; this is how the claim
//! reads them and how definitions are written).
//!
//! The claim asks [`Groups::verdict`] for each fire of a member and [`Groups::may_start`]
//! before it starts a queued run of one. Both read inside the claim's transaction: the hold
//! from the members' runs (four indexed reads along (job, state, fire time) per member, once
//! per group and fire time per claim), the running count after locking the group's row
//! (PostgreSQL `FOR UPDATE`, SQL Server `UPDLOCK, HOLDLOCK`; SQLite and the memory store
//! serialise their transactions), so two nodes claiming at once cannot both take the last
//! slot: the second waits for the first to commit and then counts its runs.

use std::collections::HashMap;

use jiff::Timestamp;

use super::{Conn, Dialect, Engine, Fail, Session, retrying};
use crate::group::{GroupDef, GroupHold, GroupStatus, HOLDING_STATES, MemberRuns, hold_of};
use crate::job::JobDef;
use crate::pause::PauseKind;
use crate::run::{Run, RunState, SkipReason};
use crate::store::{RunFilter, StoreError, StoreResult};

/// What the claim does with a member's fire.
pub(super) enum Verdict {
    /// Start it (a slot was taken for it).
    Start,
    /// Record it skipped, reason `group` (the group is held).
    Skip(Box<GroupHold>),
    /// Store it as a queued pending run: the group has `max_running` runs running.
    Queue,
}

/// One claim's view of the groups it touched: each group's members, definition (its row
/// locked) and running count, read once and kept up to date with the runs it starts.
#[derive(Default)]
pub(super) struct Groups {
    members: HashMap<String, Vec<JobDef>>,
    defs: HashMap<String, GroupDef>,
    running: HashMap<String, u32>,
    holds: HashMap<(String, Timestamp), Option<GroupHold>>,
}

/// The members of group `g`, by name.
async fn members_of<C: Conn>(c: &mut C, g: &str) -> Result<Vec<JobDef>, Fail> {
    let mut out: Vec<JobDef> = c
        .job_list()
        .await?
        .into_iter()
        .filter(|j| j.group.as_deref() == Some(g))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The hold on a fire at `fire` of a member of `g` (see [`crate::group`]).
async fn hold_at<C: Conn>(
    c: &mut C,
    g: &str,
    members: &[JobDef],
    def: &GroupDef,
    fire: Timestamp,
) -> Result<Option<GroupHold>, Fail> {
    let mut read = Vec::with_capacity(members.len());
    for m in members {
        let Some(id) = m.id else { continue };
        let mut last_bad: Option<Run> = None;
        for state in HOLDING_STATES {
            let filter = RunFilter {
                job: Some(id),
                state: Some(state),
                fire_to: Some(fire),
                limit: 1,
                ..RunFilter::default()
            };
            if let Some(r) = c.run_list(&filter).await?.into_iter().next()
                && last_bad.as_ref().is_none_or(|b| r.fire_time > b.fire_time)
            {
                last_bad = Some(r);
            }
        }
        // A success matters only after a failure.
        let last_success = match &last_bad {
            None => None,
            Some(_) => {
                let filter = RunFilter {
                    job: Some(id),
                    state: Some(RunState::Succeeded),
                    limit: 1,
                    ..RunFilter::default()
                };
                c.run_list(&filter).await?.first().map(|r| r.fire_time)
            }
        };
        read.push(MemberRuns {
            job: m.name.clone(),
            last_bad,
            last_success,
        });
    }
    Ok(hold_of(g, &read, def.released_at))
}

/// How many runs of `members` are running (at most `cap`: more makes no difference).
async fn running_of<C: Conn>(c: &mut C, members: &[JobDef], cap: u32) -> Result<u32, Fail> {
    let mut n = 0u32;
    for m in members {
        let Some(id) = m.id else { continue };
        if n >= cap {
            break;
        }
        let filter = RunFilter {
            job: Some(id),
            state: Some(RunState::Running),
            limit: usize::try_from(cap - n).unwrap_or(usize::MAX),
            ..RunFilter::default()
        };
        n += u32::try_from(c.run_list(&filter).await?.len()).unwrap_or(u32::MAX);
    }
    Ok(n)
}

impl Groups {
    /// Reads group `g` once per claim: its definition (row locked) and members.
    async fn load<C: Conn>(&mut self, c: &mut C, g: &str) -> Result<(), Fail> {
        if self.defs.contains_key(g) {
            return Ok(());
        }
        let def = c.group_get(g, true).await?.unwrap_or_default();
        let members = members_of(c, g).await?;
        if let Some(cap) = def.max_running {
            let n = running_of(c, &members, cap).await?;
            self.running.insert(g.to_string(), n);
        }
        self.members.insert(g.to_string(), members);
        self.defs.insert(g.to_string(), def);
        Ok(())
    }

    /// Whether a slot of `g` is free (taking it if so).
    fn take_slot(&mut self, g: &str) -> bool {
        let Some(cap) = self.defs.get(g).and_then(|d| d.max_running) else {
            return true;
        };
        let n = self.running.entry(g.to_string()).or_insert(0);
        if *n >= cap {
            return false;
        }
        *n += 1;
        true
    }

    /// What to do with `job`'s fire at `fire` (a job in no group always starts). A
    /// `manual` fire (`takt job trigger`) is never held — it is how an operator reruns the
    /// failed member to end the hold — but it does wait for a slot.
    pub(super) async fn verdict<C: Conn>(
        &mut self,
        c: &mut C,
        job: &JobDef,
        fire: Timestamp,
        manual: bool,
    ) -> Result<Verdict, Fail> {
        let Some(g) = job.group.as_deref() else {
            return Ok(Verdict::Start);
        };
        self.load(c, g).await?;
        let key = (g.to_string(), fire);
        if !manual && !self.holds.contains_key(&key) {
            let members = self.members.get(g).map_or(&[][..], Vec::as_slice);
            let def = self.defs.get(g).cloned().unwrap_or_default();
            let h = hold_at(c, g, members, &def, fire).await?;
            self.holds.insert(key.clone(), h);
        }
        if let Some(Some(h)) = self.holds.get(&key).filter(|_| !manual) {
            return Ok(Verdict::Skip(Box::new(h.clone())));
        }
        Ok(if self.take_slot(g) {
            Verdict::Start
        } else {
            Verdict::Queue
        })
    }

    /// Whether a pending run of `job` (a retry, a queued fire) may start: its group has a
    /// free slot (taken if so). Holds do not apply: the run exists already (a retry is the
    /// same time point; a queued fire passed the hold when it was stored).
    pub(super) async fn may_start<C: Conn>(
        &mut self,
        c: &mut C,
        job: &JobDef,
    ) -> Result<bool, Fail> {
        let Some(g) = job.group.as_deref() else {
            return Ok(true);
        };
        self.load(c, g).await?;
        Ok(self.take_slot(g))
    }
}

/// The skipped run of a held fire.
pub(super) fn held_run(
    job: &JobDef,
    fire: Timestamp,
    hold: &GroupHold,
    now: Timestamp,
) -> Option<Run> {
    let detail = format!("{hold}; {}", hold.release_hint());
    Some(Run::skipped(
        job.id?,
        fire,
        SkipReason::Group,
        Some(detail),
        now,
    ))
}

/// The error for a group no job is in and no definition names.
fn unknown_group(g: &str) -> Fail {
    StoreError::not_found(format!(
        "no job is in group {g}; check the name (takt group list shows the groups, takt job list \
         each job's group)"
    ))
    .into()
}

/// The status of group `g` at `now` (its hold as a fire at `now` would see it).
async fn status_of<C: Conn>(
    c: &mut C,
    g: &str,
    def: GroupDef,
    now: Timestamp,
) -> Result<GroupStatus, Fail> {
    let members = members_of(c, g).await?;
    let hold = hold_at(c, g, &members, &def, now).await?;
    let running = running_of(c, &members, u32::MAX).await?;
    Ok(GroupStatus {
        name: g.to_string(),
        members: members.iter().map(|m| m.name.clone()).collect(),
        def,
        running,
        pause: c.pause_get(PauseKind::Group, g).await?,
        hold,
    })
}

/// Releases group `g`'s failure hold at `now` (inside a resume's transaction): failures
/// finished by then hold nothing. Returns the hold released, if there was one.
pub(super) async fn release_hold<C: Conn>(
    c: &mut C,
    g: &str,
    now: Timestamp,
) -> Result<Option<GroupHold>, Fail> {
    let mut def = c.group_get(g, true).await?.unwrap_or_default();
    let members = members_of(c, g).await?;
    let hold = hold_at(c, g, &members, &def, now).await?;
    if hold.is_some() {
        def.released_at = Some(now);
        c.group_put(g, &def).await?;
        c.notify_due_sooner().await?;
    }
    Ok(hold)
}

impl<D: Dialect> Engine<D> {
    pub(super) async fn group_list(&self, now: Timestamp) -> StoreResult<Vec<GroupStatus>> {
        let d = &self.dialect;
        let what = "listing groups";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            let mut defs: HashMap<String, GroupDef> = c.group_defs().await?.into_iter().collect();
            let mut names: Vec<String> = c
                .job_list()
                .await?
                .into_iter()
                .filter_map(|j| j.group)
                .collect();
            names.extend(defs.keys().cloned());
            names.sort();
            names.dedup();
            let mut out = Vec::with_capacity(names.len());
            for g in names {
                let def = defs.remove(&g).unwrap_or_default();
                out.push(status_of(&mut c, &g, def, now).await?);
            }
            Ok(out)
        })
        .await
    }

    pub(super) async fn group_status(&self, g: &str, now: Timestamp) -> StoreResult<GroupStatus> {
        let d = &self.dialect;
        let what = "reading a group";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            let def = c.group_get(g, false).await?;
            let status = status_of(&mut c, g, def.clone().unwrap_or_default(), now).await?;
            if def.is_none() && status.members.is_empty() {
                return Err(unknown_group(g));
            }
            Ok(status)
        })
        .await
    }

    pub(super) async fn group_set(
        &self,
        g: &str,
        max_running: Option<u32>,
    ) -> StoreResult<GroupDef> {
        if max_running == Some(0) {
            return Err(StoreError::invalid(format!(
                "group {g}: max_running must be at least 1; leave it out for no limit"
            )));
        }
        if g.trim().is_empty() || g.trim() != g {
            return Err(StoreError::invalid(format!(
                "group name {g:?} is empty or has surrounding spaces"
            )));
        }
        let d = &self.dialect;
        let what = "defining a group";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let old = tx.group_get(g, true).await?;
            if old.is_none() && members_of(&mut tx, g).await?.is_empty() {
                return Err(unknown_group(g));
            }
            let def = GroupDef {
                max_running,
                ..old.unwrap_or_default()
            };
            tx.group_put(g, &def).await?;
            // A raised limit may free slots at once.
            tx.notify_due_sooner().await?;
            tx.commit().await?;
            Ok(def)
        })
        .await
    }
}
