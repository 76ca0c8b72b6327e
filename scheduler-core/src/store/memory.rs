//! The reference store: everything in memory behind one `std::sync::Mutex`.
//!
//! It is the executable form of the [`Store`] contract (the conformance suite is checked
//! against it first) and the store of the host's unit tests, of embedded hosts that need no
//! persistence and of the in-memory benchmarks. Every method takes the lock once, does all its
//! work, and releases it before returning: nothing awaits while holding it, so each method is
//! atomic, like one SQL transaction. Clones share the data, like two nodes on one database.
//!
//! # Indexes
//!
//! The scheduling loop calls `job_due`, `run_claim_due` and `next_due` on every pass, so their
//! cost must depend on what is due, not on how many jobs and runs exist (a million job
//! definitions must not slow a tick down). [`Inner`] therefore keeps, beside the rows, the same
//! indexes a database would: enabled jobs with a next fire by (priority, next fire, id), job
//! names, pending retries by due time, queued runs per job, running runs, and each job's
//! running / pending counts. Every change to a job or a run goes through
//! [`Inner::put_job`] / [`Inner::put_run`] / [`Inner::remove_run`], which keep them in step;
//! the conformance suite and the consistency check in the tests hold them to the rows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;

use super::backend::{
    add, apply_finish, check_skipped, fire_taken, job_missing, name_taken, next_firing,
    not_registered, recovery_event, run_missing, show,
};
use super::{
    Capabilities, ClaimParams, ClaimedRun, DueJob, LogLine, PurgeCounts, RunFilter, RunFinish,
    Store, StoreError, StoreResult, serves,
};
use crate::job::{JobDef, JobId, JobName, Priority};
use crate::node::{InstanceId, NodeStatus, Registered, Registration, registration};
use crate::run::{NodeId, Progress, Run, RunId, RunState};

/// An in-memory [`Store`]; cheap to clone (clones share the data).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    jobs: BTreeMap<JobId, JobDef>,
    runs: BTreeMap<RunId, Run>,
    /// The unique (job, fire time) key.
    run_keys: BTreeMap<(JobId, Timestamp), RunId>,
    logs: BTreeMap<RunId, Vec<(u64, LogLine)>>,
    last_job: i64,
    last_run: i64,
    last_seq: u64,
    // ---- indexes (see the module docs) ----
    /// Enabled jobs with a next fire: priority → (next fire, id).
    fires: BTreeMap<Priority, BTreeSet<(Timestamp, JobId)>>,
    names: BTreeMap<JobName, JobId>,
    /// Pending runs with a retry time: (next attempt, id).
    retries: BTreeSet<(Timestamp, RunId)>,
    /// Pending runs without a retry time (queued behind a running run), per job.
    queued: BTreeMap<JobId, BTreeSet<RunId>>,
    /// Runs in state running.
    running: BTreeSet<RunId>,
    /// Per job: (running, pending) run counts; absent when both are 0.
    active: HashMap<JobId, (u32, u32)>,
    /// Registered nodes (their running counts are computed when listed).
    nodes: BTreeMap<NodeId, NodeStatus>,
}

/// A claimable item in claim order: (priority, due, id, what).
type Candidate = (Priority, Timestamp, i64, Due);

#[derive(Clone, Copy, Debug)]
enum Due {
    Fire(JobId),
    Retry(RunId),
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| {
            StoreError::other(
                "memory store is poisoned: a thread panicked while changing it; create a new \
                 store",
            )
        })
    }
}

impl Inner {
    fn job(&self, id: JobId) -> StoreResult<&JobDef> {
        self.jobs.get(&id).ok_or_else(|| job_missing(id))
    }

    // ---- index maintenance -----------------------------------------------------------------

    fn index_job(&mut self, job: &JobDef, add: bool) {
        let (Some(id), Some(fire)) = (job.id, job.next_fire) else {
            return;
        };
        if !job.enabled {
            return;
        }
        if add {
            self.fires
                .entry(job.priority)
                .or_default()
                .insert((fire, id));
        } else if let Some(set) = self.fires.get_mut(&job.priority) {
            set.remove(&(fire, id));
            if set.is_empty() {
                self.fires.remove(&job.priority);
            }
        }
    }

    /// Stores `job` (its id set) in place of the old row, keeping the indexes in step.
    fn put_job(&mut self, job: JobDef) {
        let Some(id) = job.id else { return };
        if let Some(old) = self.jobs.remove(&id) {
            self.index_job(&old, false);
            self.names.remove(&old.name);
        }
        self.index_job(&job, true);
        self.names.insert(job.name.clone(), id);
        self.jobs.insert(id, job);
    }

    /// Changes job `id` through `f`, keeping the indexes in step.
    fn update_job<R>(
        &mut self,
        id: JobId,
        f: impl FnOnce(&mut JobDef) -> StoreResult<R>,
    ) -> StoreResult<R> {
        let mut job = self.job(id)?.clone();
        let out = f(&mut job)?;
        self.put_job(job);
        Ok(out)
    }

    fn index_run(&mut self, id: RunId, run: &Run, add: bool) {
        let counts = self.active.entry(run.job_id).or_default();
        let delta = |n: &mut u32| {
            if add {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
            }
        };
        match run.state {
            RunState::Running => delta(&mut counts.0),
            RunState::Pending => delta(&mut counts.1),
            _ => {}
        }
        if *counts == (0, 0) {
            self.active.remove(&run.job_id);
        }
        match (run.state, run.next_attempt_at) {
            (RunState::Running, _) => {
                if add {
                    self.running.insert(id);
                } else {
                    self.running.remove(&id);
                }
            }
            (RunState::Pending, Some(at)) => {
                if add {
                    self.retries.insert((at, id));
                } else {
                    self.retries.remove(&(at, id));
                }
            }
            (RunState::Pending, None) => {
                if add {
                    self.queued.entry(run.job_id).or_default().insert(id);
                } else if let Some(set) = self.queued.get_mut(&run.job_id) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.queued.remove(&run.job_id);
                    }
                }
            }
            _ => {}
        }
    }

    /// Stores `run` (its id set) in place of the old row, keeping the indexes in step.
    fn put_run(&mut self, run: Run) {
        let Some(id) = run.id else { return };
        if let Some(old) = self.runs.remove(&id) {
            self.index_run(id, &old, false);
        }
        self.index_run(id, &run, true);
        self.runs.insert(id, run);
    }

    /// Changes run `id` through `f`, keeping the indexes in step.
    fn update_run<R>(
        &mut self,
        id: RunId,
        f: impl FnOnce(&mut Run) -> StoreResult<R>,
    ) -> StoreResult<(R, Run)> {
        let mut run = self.runs.get(&id).ok_or_else(|| run_missing(id))?.clone();
        let out = f(&mut run)?;
        self.put_run(run.clone());
        Ok((out, run))
    }

    fn insert_run(&mut self, mut run: Run) -> Run {
        self.last_run += 1;
        let id = RunId(self.last_run);
        run.id = Some(id);
        self.run_keys.insert((run.job_id, run.fire_time), id);
        self.put_run(run.clone());
        run
    }

    fn remove_run(&mut self, id: RunId) -> u64 {
        if let Some(run) = self.runs.remove(&id) {
            self.index_run(id, &run, false);
            self.run_keys.remove(&(run.job_id, run.fire_time));
        }
        self.logs.remove(&id).map_or(0, |l| l.len() as u64)
    }

    // ---- reads through the indexes ----------------------------------------------------------

    fn counts(&self, job: JobId) -> (u32, u32) {
        self.active.get(&job).copied().unwrap_or_default()
    }

    /// The first `limit` due fires of enabled jobs in claim order, passing over the jobs in
    /// `skip`: per priority bucket, the prefix of fires at or before `now`.
    fn due_fires(
        &self,
        now: Timestamp,
        limit: usize,
        skip: &BTreeSet<JobId>,
        tags: &[String],
    ) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (priority, set) in &self.fires {
            for &(fire, id) in set.iter().take_while(|(fire, _)| *fire <= now) {
                if skip.contains(&id) || !self.serves(id, tags) {
                    continue;
                }
                if out.len() >= limit {
                    return out;
                }
                out.push((*priority, fire, id.0, Due::Fire(id)));
            }
        }
        out
    }

    /// Claimable pending runs of enabled jobs at `now`: retries whose time has come, and queued
    /// runs of jobs with nothing running (due from their creation).
    fn due_pending(&self, now: Timestamp, tags: &[String]) -> Vec<Candidate> {
        let mut out = Vec::new();
        let enabled = |job: JobId| {
            self.jobs
                .get(&job)
                .filter(|j| j.enabled && serves(tags, j.node_tag.as_deref()))
        };
        for &(at, id) in self.retries.iter().take_while(|(at, _)| *at <= now) {
            if let Some(job) = self.runs.get(&id).and_then(|r| enabled(r.job_id)) {
                out.push((job.priority, at, id.0, Due::Retry(id)));
            }
        }
        for (job_id, runs) in &self.queued {
            let Some(job) = enabled(*job_id) else {
                continue;
            };
            if self.counts(*job_id).0 > 0 {
                continue;
            }
            for id in runs {
                if let Some(run) = self.runs.get(id).filter(|r| r.created_at <= now) {
                    out.push((job.priority, run.created_at, id.0, Due::Retry(*id)));
                }
            }
        }
        out
    }

    /// Whether a node serving `tags` may run job `id`.
    fn serves(&self, id: JobId, tags: &[String]) -> bool {
        self.jobs
            .get(&id)
            .is_some_and(|j| serves(tags, j.node_tag.as_deref()))
    }

    /// Claims the fire of job `id` at `fire` (its current next fire); see
    /// [`Store::run_claim_due`].
    fn claim_fire(
        &mut self,
        id: JobId,
        fire: Timestamp,
        p: &ClaimParams,
        lease_until: Timestamp,
    ) -> StoreResult<Option<ClaimedRun>> {
        let job = self.job(id)?.clone();
        let (next, skips) = match &job.schedule {
            Some(s) => next_firing(s, fire),
            None => (None, Vec::new()),
        };
        // The conditional advance: under the lock the old value is necessarily `fire`.
        self.update_job(id, |stored| {
            if stored.next_fire != Some(fire) {
                return Err(StoreError::conflict(format!(
                    "job {} next fire moved while claiming; claim again",
                    stored.name
                )));
            }
            stored.next_fire = next;
            Ok(())
        })?;
        for (at, reason) in skips {
            if !self.run_keys.contains_key(&(id, at)) {
                self.insert_run(Run::skipped(id, at, reason, None, p.now));
            }
        }
        if self.run_keys.contains_key(&(id, fire)) {
            return Ok(None);
        }
        let run = p.new_run(id, fire, lease_until, &job.retry)?;
        let run = self.insert_run(run);
        let job = self.job(id)?.clone();
        Ok(Some(ClaimedRun { run, job }))
    }

    fn claim_retry(
        &mut self,
        id: RunId,
        p: &ClaimParams,
        lease_until: Timestamp,
    ) -> StoreResult<ClaimedRun> {
        let job_id = self.runs.get(&id).ok_or_else(|| run_missing(id))?.job_id;
        let job = self.job(job_id)?.clone();
        let ((), run) = self.update_run(id, |run| {
            p.claim(run, lease_until, &job.retry)?;
            Ok(())
        })?;
        Ok(ClaimedRun { run, job })
    }
}

impl Store for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        job.validate()?;
        let mut inner = self.lock()?;
        if inner.names.contains_key(&job.name) {
            return Err(name_taken(&job.name));
        }
        inner.last_job += 1;
        let id = JobId(inner.last_job);
        let mut stored = job.clone();
        stored.id = Some(id);
        stored.version = 1;
        stored.updated_at = Some(now);
        inner.put_job(stored.clone());
        Ok(stored)
    }

    async fn job_update(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        job.validate()?;
        let id = job.id.ok_or_else(|| {
            StoreError::invalid(format!(
                "job {} has no id; insert it first, or load it to update it",
                job.name
            ))
        })?;
        let mut inner = self.lock()?;
        let current = inner.job(id)?;
        if current.version != job.version {
            return Err(StoreError::conflict(format!(
                "job {} was changed by someone else (stored version {}, yours {}); reload it \
                 and apply your change again",
                current.name, current.version, job.version
            )));
        }
        if inner.names.get(&job.name).is_some_and(|other| *other != id) {
            return Err(name_taken(&job.name));
        }
        let mut stored = job.clone();
        stored.version += 1;
        stored.updated_at = Some(now);
        inner.put_job(stored.clone());
        Ok(stored)
    }

    async fn job_get(&self, id: JobId) -> StoreResult<Option<JobDef>> {
        Ok(self.lock()?.jobs.get(&id).cloned())
    }

    async fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>> {
        let inner = self.lock()?;
        Ok(inner
            .names
            .get(name)
            .and_then(|id| inner.jobs.get(id))
            .cloned())
    }

    async fn job_list(&self) -> StoreResult<Vec<JobDef>> {
        Ok(self.lock()?.jobs.values().cloned().collect())
    }

    async fn job_delete(&self, id: JobId) -> StoreResult<()> {
        let mut inner = self.lock()?;
        let job = inner
            .jobs
            .get(&id)
            .cloned()
            .ok_or_else(|| job_missing(id))?;
        let runs: Vec<RunId> = inner
            .run_keys
            .range((id, Timestamp::MIN)..=(id, Timestamp::MAX))
            .map(|(_, r)| *r)
            .collect();
        for r in runs {
            inner.remove_run(r);
        }
        inner.index_job(&job, false);
        inner.names.remove(&job.name);
        inner.jobs.remove(&id);
        Ok(())
    }

    async fn job_set_enabled(
        &self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> StoreResult<JobDef> {
        let mut inner = self.lock()?;
        inner.update_job(id, |job| {
            job.enabled = enabled;
            job.version += 1;
            job.updated_at = Some(now);
            Ok(())
        })?;
        Ok(inner.job(id)?.clone())
    }

    async fn job_set_next_fire(
        &self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> StoreResult<()> {
        let mut inner = self.lock()?;
        inner.update_job(id, |job| {
            if job.next_fire != expected {
                return Err(StoreError::conflict(format!(
                    "job {} next fire is {}, not {}; another node moved it first: reload the job",
                    job.name,
                    show(job.next_fire),
                    show(expected)
                )));
            }
            job.next_fire = new;
            Ok(())
        })
    }

    async fn job_due(
        &self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> StoreResult<Vec<DueJob>> {
        let inner = self.lock()?;
        Ok(inner
            .due_fires(now, limit, &BTreeSet::new(), tags)
            .into_iter()
            .filter_map(|(_, _, _, due)| match due {
                Due::Fire(id) => inner.jobs.get(&id),
                Due::Retry(_) => None,
            })
            .filter_map(|job| {
                let (running, pending) = job.id.map(|id| inner.counts(id)).unwrap_or_default();
                DueJob::of(job, running, pending)
            })
            .collect())
    }

    async fn next_due(&self, tags: &[String]) -> StoreResult<Option<Timestamp>> {
        let inner = self.lock()?;
        // The first served job of each priority (jobs this node does not serve are passed
        // over: a node with no tags walks past the tagged ones).
        let fires = inner.fires.values().filter_map(|set| {
            set.iter()
                .find(|(_, id)| inner.serves(*id, tags))
                .map(|(fire, _)| *fire)
        });
        let enabled = |job: JobId| {
            inner
                .jobs
                .get(&job)
                .is_some_and(|j| j.enabled && serves(tags, j.node_tag.as_deref()))
        };
        let retries = inner
            .retries
            .iter()
            .find(|(_, id)| inner.runs.get(id).is_some_and(|r| enabled(r.job_id)))
            .map(|(at, _)| *at);
        let queued = inner
            .queued
            .iter()
            .filter(|(job, _)| enabled(**job) && inner.counts(**job).0 == 0)
            .flat_map(|(_, runs)| runs.iter().filter_map(|id| inner.runs.get(id)))
            .map(|r| r.created_at);
        Ok(fires.chain(retries).chain(queued).min())
    }

    async fn run_claim_due(&self, p: &ClaimParams) -> StoreResult<Vec<ClaimedRun>> {
        let lease_until = add(p.now, p.lease, "run lease")?;
        let mut inner = self.lock()?;
        let mut claimed = Vec::new();
        // Jobs whose fire this call handled (claimed, or found already recorded): a call
        // advances a job's next fire once. Queued runs passed over because their job runs.
        let mut handled: BTreeSet<JobId> = BTreeSet::new();
        let mut waiting: BTreeSet<RunId> = BTreeSet::new();
        // Rounds, like the SQL stores: a fire whose key is taken yields no run, so the next
        // candidates are read after it.
        while claimed.len() < p.limit {
            let need = p.limit - claimed.len();
            // The top `need` of the union lies within the top `need` fires plus every due
            // pending run (few: retries and queued fires).
            let mut due = inner.due_fires(p.now, need, &handled, &p.tags);
            due.extend(
                inner
                    .due_pending(p.now, &p.tags)
                    .into_iter()
                    .filter(|(_, _, id, _)| !waiting.contains(&RunId(*id))),
            );
            if due.is_empty() {
                break;
            }
            due.sort_by_key(|(prio, at, id, _)| (*prio, *at, *id));
            due.truncate(need);
            for (_, at, _, what) in due {
                match what {
                    Due::Fire(id) => {
                        handled.insert(id);
                        claimed.extend(inner.claim_fire(id, at, p, lease_until)?);
                    }
                    Due::Retry(id) => {
                        // A queued run of a job that started running in this call waits.
                        let run = &inner.runs[&id];
                        if run.next_attempt_at.is_none() && inner.counts(run.job_id).0 > 0 {
                            waiting.insert(id);
                            continue;
                        }
                        claimed.push(inner.claim_retry(id, p, lease_until)?);
                    }
                }
            }
        }
        Ok(claimed)
    }

    async fn run_insert_skipped(&self, run: &Run) -> StoreResult<Run> {
        check_skipped(run)?;
        let mut inner = self.lock()?;
        inner.job(run.job_id)?;
        if let Some(other) = inner.run_keys.get(&(run.job_id, run.fire_time)) {
            return Err(fire_taken(run.job_id, run.fire_time, *other));
        }
        Ok(inner.insert_run(run.clone()))
    }

    async fn run_enqueue(&self, job: JobId, fire: Timestamp, now: Timestamp) -> StoreResult<Run> {
        let mut inner = self.lock()?;
        inner.job(job)?;
        if let Some(other) = inner.run_keys.get(&(job, fire)) {
            return Err(fire_taken(job, fire, *other));
        }
        Ok(inner.insert_run(Run::pending(job, fire, now)))
    }

    async fn run_set_state_if_running(
        &self,
        id: RunId,
        expected_attempt: u32,
        finish: &RunFinish,
    ) -> StoreResult<Run> {
        finish.validate()?;
        let mut inner = self.lock()?;
        let ((), run) =
            inner.update_run(id, |run| apply_finish(run, id, expected_attempt, finish))?;
        Ok(run)
    }

    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        Ok(self.lock()?.runs.get(&id).cloned())
    }

    async fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        let inner = self.lock()?;
        let mut runs: Vec<Run> = match filter.job {
            Some(job) => inner
                .run_keys
                .range((job, Timestamp::MIN)..=(job, Timestamp::MAX))
                .filter_map(|(_, id)| inner.runs.get(id))
                .filter(|r| filter.state.is_none_or(|s| r.state == s))
                .cloned()
                .collect(),
            None => inner
                .runs
                .values()
                .filter(|r| filter.state.is_none_or(|s| r.state == s))
                .cloned()
                .collect(),
        };
        runs.sort_by_key(|r| std::cmp::Reverse((r.fire_time, r.id)));
        runs.truncate(filter.limit);
        Ok(runs)
    }

    async fn lease_renew(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<Vec<RunId>> {
        let mut inner = self.lock()?;
        let Inner {
            running,
            runs,
            nodes,
            ..
        } = &mut *inner;
        match nodes.get_mut(node) {
            Some(n) if n.info.instance == *instance => n.heartbeat_at = Some(now),
            other => return Err(not_registered(node, instance, other.as_deref())),
        }
        let mut renewed = Vec::new();
        for id in running.iter() {
            if let Some(run) = runs.get_mut(id)
                && run.node_id.as_ref() == Some(node)
                && run.node_instance.as_ref() == Some(instance)
                && run.lease_expires_at.is_some_and(|l| l > now)
            {
                // The lease is in no index: changed in place.
                run.lease_expires_at = Some(until);
                renewed.push(*id);
            }
        }
        Ok(renewed)
    }

    async fn run_recover_expired(
        &self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> StoreResult<Vec<Run>> {
        let mut inner = self.lock()?;
        let picked: Vec<_> = inner
            .running
            .iter()
            .filter_map(|id| recovery_event(&inner.runs[id], now, restart).map(|e| (*id, e)))
            .collect();
        let mut out = Vec::with_capacity(picked.len());
        for (id, event) in picked {
            let retry = inner.job(inner.runs[&id].job_id)?.retry.clone();
            let ((), run) = inner.update_run(id, |run| {
                run.apply(event, now, &retry)?;
                Ok(())
            })?;
            out.push(run);
        }
        Ok(out)
    }

    async fn node_register(&self, reg: &Registration) -> StoreResult<Registered> {
        let mut inner = self.lock()?;
        let verdict = registration(inner.nodes.get(&reg.node.id), reg);
        if let Registered::Yes { .. } = verdict {
            inner.nodes.insert(
                reg.node.id.clone(),
                NodeStatus {
                    info: reg.node.clone(),
                    started_at: Some(reg.now),
                    heartbeat_at: Some(reg.now),
                    stopped_at: None,
                    running: 0,
                },
            );
        }
        Ok(verdict)
    }

    async fn node_stopped(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        now: Timestamp,
    ) -> StoreResult<()> {
        let mut inner = self.lock()?;
        if let Some(n) = inner.nodes.get_mut(node)
            && n.info.instance == *instance
        {
            n.stopped_at = Some(now);
        }
        Ok(())
    }

    async fn node_list(&self) -> StoreResult<Vec<NodeStatus>> {
        let inner = self.lock()?;
        Ok(inner
            .nodes
            .values()
            .map(|n| NodeStatus {
                running: inner
                    .running
                    .iter()
                    .filter(|id| inner.runs[id].node_id.as_ref() == Some(&n.info.id))
                    .count() as u64,
                ..n.clone()
            })
            .collect())
    }

    async fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()> {
        let mut inner = self.lock()?;
        let run = inner.runs.get_mut(&id).ok_or_else(|| run_missing(id))?;
        if run.state != RunState::Running {
            return Err(StoreError::conflict(format!(
                "run {id} is {}, not running; progress is recorded only while it runs",
                run.state
            )));
        }
        // Progress is in no index: changed in place.
        run.progress = Some(progress.clone());
        Ok(())
    }

    async fn log_append(&self, run: RunId, lines: &[LogLine]) -> StoreResult<()> {
        let mut inner = self.lock()?;
        if !inner.runs.contains_key(&run) {
            return Err(run_missing(run));
        }
        let first = inner.last_seq;
        inner.last_seq += lines.len() as u64;
        let log = inner.logs.entry(run).or_default();
        log.extend((first + 1..).zip(lines.iter().cloned()));
        Ok(())
    }

    async fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<(u64, LogLine)>> {
        let inner = self.lock()?;
        let Some(log) = inner.logs.get(&run) else {
            return Ok(Vec::new());
        };
        let start = after.map_or(0, |a| log.partition_point(|(s, _)| *s <= a));
        Ok(log[start..].iter().take(limit).cloned().collect())
    }

    async fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
        let mut inner = self.lock()?;
        let old: Vec<RunId> = inner
            .runs
            .iter()
            .filter(|(_, r)| r.state.is_final() && r.finished_at.is_some_and(|f| f < older_than))
            .map(|(id, _)| *id)
            .collect();
        let mut counts = PurgeCounts::default();
        for id in old {
            counts.log_lines += inner.remove_run(id);
            counts.runs += 1;
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::{self, block_on};

    impl Inner {
        /// Rebuilds every index from the rows and compares: the indexes are a cache of the
        /// rows and must never drift from them.
        fn assert_consistent(&self) {
            let mut fresh = Inner::default();
            for job in self.jobs.values() {
                fresh.put_job(job.clone());
            }
            for run in self.runs.values() {
                fresh.put_run(run.clone());
            }
            assert_eq!(self.fires, fresh.fires, "fires index");
            assert_eq!(self.names, fresh.names, "names index");
            assert_eq!(self.retries, fresh.retries, "retries index");
            assert_eq!(self.queued, fresh.queued, "queued index");
            assert_eq!(self.running, fresh.running, "running index");
            assert_eq!(self.active, fresh.active, "active counts");
            let keys: BTreeMap<(JobId, Timestamp), RunId> = self
                .runs
                .iter()
                .map(|(id, r)| ((r.job_id, r.fire_time), *id))
                .collect();
            assert_eq!(self.run_keys, keys, "run keys");
        }
    }

    /// The whole suite, then every store it used is checked for index drift.
    #[test]
    fn conformance() {
        let stores = Mutex::new(Vec::new());
        let report = block_on(conformance::run_all(|| {
            let store = MemoryStore::new();
            stores.lock().unwrap().push(store.clone());
            async { store }
        }));
        eprintln!("{report}");
        report.expect_skipped(&[]);
        let stores = stores.into_inner().unwrap();
        assert!(stores.len() >= 23);
        for store in stores {
            store.lock().unwrap().assert_consistent();
        }
    }

    /// Real threads on one store: each fire is claimed exactly once.
    #[test]
    fn claimers_on_threads_share_nothing() {
        let store = MemoryStore::new();
        let fires = block_on(conformance::seed_every_minute_jobs(&store, 8));
        let claimed = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let store = store.clone();
                    s.spawn(move || block_on(conformance::claim_until_empty(&store, i)))
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        conformance::assert_each_fire_once(&claimed, 8, fires);
        store.lock().unwrap().assert_consistent();
    }
}
