//! The reference store: everything in memory behind one `std::sync::Mutex`.
//!
//! It is the executable form of the [`Store`] contract (the conformance suite is checked
//! against it first) and the store of the host's unit tests and of `takt` runs that need no
//! persistence. Every method takes the lock once, does all its work, and releases it before
//! returning: nothing awaits while holding it, so each method is atomic, like one SQL
//! transaction. Clones share the data, like two nodes on one database.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;

use super::backend::{
    add, apply_finish, fire_taken, job_missing, name_taken, next_firing, recovery_event,
    run_missing, show,
};
use super::{
    Capabilities, ClaimParams, ClaimedRun, DueJob, LogLine, PurgeCounts, RunFilter, RunFinish,
    Store, StoreError, StoreResult,
};
use crate::job::{JobDef, JobId, JobName, Priority};
use crate::run::{NodeId, Progress, Run, RunEvent, RunId, RunState};

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

    fn job_mut(&mut self, id: JobId) -> StoreResult<&mut JobDef> {
        self.jobs.get_mut(&id).ok_or_else(|| job_missing(id))
    }

    fn insert_run(&mut self, mut run: Run) -> Run {
        self.last_run += 1;
        let id = RunId(self.last_run);
        run.id = Some(id);
        self.run_keys.insert((run.job_id, run.fire_time), id);
        self.runs.insert(id, run.clone());
        run
    }

    /// Whether job `id` has a run in state running.
    fn has_running(&self, id: JobId) -> bool {
        self.runs
            .values()
            .any(|r| r.job_id == id && r.state == RunState::Running)
    }

    /// When a pending run may be claimed: a retry at its `next_attempt_at`; a queued run (no
    /// `next_attempt_at`) at its creation, but only while nothing of its job runs.
    fn pending_due(&self, run: &Run) -> Option<Timestamp> {
        match run.next_attempt_at {
            Some(at) => Some(at),
            None if self.has_running(run.job_id) => None,
            None => Some(run.created_at),
        }
    }

    fn remove_run(&mut self, id: RunId) -> u64 {
        if let Some(run) = self.runs.remove(&id) {
            self.run_keys.remove(&(run.job_id, run.fire_time));
        }
        self.logs.remove(&id).map_or(0, |l| l.len() as u64)
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
        let stored = self.job_mut(id)?;
        if stored.next_fire != Some(fire) {
            return Err(StoreError::conflict(format!(
                "job {} next fire moved while claiming; claim again",
                job.name
            )));
        }
        stored.next_fire = next;
        for (at, reason) in skips {
            if !self.run_keys.contains_key(&(id, at)) {
                self.insert_run(Run::skipped(id, at, reason, None, p.now));
            }
        }
        if self.run_keys.contains_key(&(id, fire)) {
            return Ok(None);
        }
        let mut run = Run::pending(id, fire, p.now);
        run.apply(
            RunEvent::Claimed {
                node: p.node.clone(),
                lease_until,
            },
            p.now,
            &job.retry,
        )?;
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
        let run = self.runs.get(&id).ok_or_else(|| run_missing(id))?;
        let job = self.job(run.job_id)?.clone();
        let mut run = run.clone();
        run.apply(
            RunEvent::Claimed {
                node: p.node.clone(),
                lease_until,
            },
            p.now,
            &job.retry,
        )?;
        self.runs.insert(id, run.clone());
        Ok(ClaimedRun { run, job })
    }
}

enum Due {
    Fire(JobId),
    Retry(RunId),
}

impl Store for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        job.validate()?;
        let mut inner = self.lock()?;
        if inner.jobs.values().any(|j| j.name == job.name) {
            return Err(name_taken(&job.name));
        }
        inner.last_job += 1;
        let id = JobId(inner.last_job);
        let mut stored = job.clone();
        stored.id = Some(id);
        stored.version = 1;
        stored.updated_at = Some(now);
        inner.jobs.insert(id, stored.clone());
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
        if inner
            .jobs
            .values()
            .any(|j| j.name == job.name && j.id != Some(id))
        {
            return Err(name_taken(&job.name));
        }
        let mut stored = job.clone();
        stored.version += 1;
        stored.updated_at = Some(now);
        inner.jobs.insert(id, stored.clone());
        Ok(stored)
    }

    async fn job_get(&self, id: JobId) -> StoreResult<Option<JobDef>> {
        Ok(self.lock()?.jobs.get(&id).cloned())
    }

    async fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>> {
        Ok(self
            .lock()?
            .jobs
            .values()
            .find(|j| &j.name == name)
            .cloned())
    }

    async fn job_list(&self) -> StoreResult<Vec<JobDef>> {
        Ok(self.lock()?.jobs.values().cloned().collect())
    }

    async fn job_delete(&self, id: JobId) -> StoreResult<()> {
        let mut inner = self.lock()?;
        inner.jobs.remove(&id).ok_or_else(|| job_missing(id))?;
        let runs: Vec<RunId> = inner
            .runs
            .values()
            .filter(|r| r.job_id == id)
            .filter_map(|r| r.id)
            .collect();
        for r in runs {
            inner.remove_run(r);
        }
        Ok(())
    }

    async fn job_set_enabled(
        &self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> StoreResult<JobDef> {
        let mut inner = self.lock()?;
        let job = inner.job_mut(id)?;
        job.enabled = enabled;
        job.version += 1;
        job.updated_at = Some(now);
        Ok(job.clone())
    }

    async fn job_set_next_fire(
        &self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> StoreResult<()> {
        let mut inner = self.lock()?;
        let job = inner.job_mut(id)?;
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
    }

    async fn job_due(&self, now: Timestamp, limit: usize) -> StoreResult<Vec<DueJob>> {
        let inner = self.lock()?;
        let mut due: Vec<&JobDef> = inner
            .jobs
            .values()
            .filter(|j| j.enabled && j.next_fire.is_some_and(|f| f <= now))
            .collect();
        due.sort_by_key(|j| (j.priority, j.next_fire, j.id));
        due.truncate(limit);
        let mut out: Vec<DueJob> = due
            .into_iter()
            .map(|job| DueJob {
                job: job.clone(),
                running: 0,
                pending: 0,
            })
            .collect();
        let index: BTreeMap<JobId, usize> = out
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.job.id.map(|id| (id, i)))
            .collect();
        for run in inner.runs.values() {
            if let Some(&i) = index.get(&run.job_id) {
                match run.state {
                    RunState::Running => out[i].running += 1,
                    RunState::Pending => out[i].pending += 1,
                    _ => {}
                }
            }
        }
        Ok(out)
    }

    async fn next_due(&self) -> StoreResult<Option<Timestamp>> {
        let inner = self.lock()?;
        let fires = inner
            .jobs
            .values()
            .filter(|j| j.enabled)
            .filter_map(|j| j.next_fire);
        let pending = inner
            .runs
            .values()
            .filter(|r| r.state == RunState::Pending)
            .filter(|r| inner.jobs.get(&r.job_id).is_some_and(|j| j.enabled))
            .filter_map(|r| inner.pending_due(r));
        Ok(fires.chain(pending).min())
    }

    async fn run_claim_due(&self, p: &ClaimParams) -> StoreResult<Vec<ClaimedRun>> {
        let lease_until = add(p.now, p.lease, "run lease")?;
        let mut inner = self.lock()?;
        let mut due: Vec<(Priority, Timestamp, i64, Due)> = Vec::new();
        for (id, job) in &inner.jobs {
            if let Some(fire) = job.next_fire
                && job.enabled
                && fire <= p.now
            {
                due.push((job.priority, fire, id.0, Due::Fire(*id)));
            }
        }
        for (id, run) in &inner.runs {
            if run.state != RunState::Pending {
                continue;
            }
            let Some(at) = inner.pending_due(run).filter(|at| *at <= p.now) else {
                continue;
            };
            if let Some(job) = inner.jobs.get(&run.job_id)
                && job.enabled
            {
                due.push((job.priority, at, id.0, Due::Retry(*id)));
            }
        }
        due.sort_by_key(|(prio, at, id, _)| (*prio, *at, *id));
        let mut claimed = Vec::new();
        for (_, at, _, what) in due {
            if claimed.len() >= p.limit {
                break;
            }
            match what {
                Due::Fire(id) => claimed.extend(inner.claim_fire(id, at, p, lease_until)?),
                Due::Retry(id) => claimed.push(inner.claim_retry(id, p, lease_until)?),
            }
        }
        Ok(claimed)
    }

    async fn run_insert_skipped(&self, run: &Run) -> StoreResult<Run> {
        if run.state != RunState::Skipped || run.skip_reason.is_none() {
            return Err(StoreError::invalid(format!(
                "run of job {} at {} is not a skipped run with a reason; build it with \
                 Run::skipped",
                run.job_id, run.fire_time
            )));
        }
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
        let run = inner.runs.get_mut(&id).ok_or_else(|| run_missing(id))?;
        apply_finish(run, id, expected_attempt, finish)?;
        Ok(run.clone())
    }

    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        Ok(self.lock()?.runs.get(&id).cloned())
    }

    async fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        let inner = self.lock()?;
        let mut runs: Vec<Run> = inner
            .runs
            .values()
            .filter(|r| filter.job.is_none_or(|j| r.job_id == j))
            .filter(|r| filter.state.is_none_or(|s| r.state == s))
            .cloned()
            .collect();
        runs.sort_by_key(|r| std::cmp::Reverse((r.fire_time, r.id)));
        runs.truncate(filter.limit);
        Ok(runs)
    }

    async fn lease_renew(
        &self,
        node: &NodeId,
        until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<Vec<RunId>> {
        let mut inner = self.lock()?;
        let mut renewed = Vec::new();
        for (id, run) in &mut inner.runs {
            if run.state == RunState::Running
                && run.node_id.as_ref() == Some(node)
                && run.lease_expires_at.is_some_and(|l| l > now)
            {
                run.lease_expires_at = Some(until);
                renewed.push(*id);
            }
        }
        Ok(renewed)
    }

    async fn run_recover_expired(
        &self,
        now: Timestamp,
        node: Option<&NodeId>,
    ) -> StoreResult<Vec<Run>> {
        let mut inner = self.lock()?;
        let mut picked = Vec::new();
        for (id, run) in &inner.runs {
            if run.state != RunState::Running {
                continue;
            }
            let mine = node.is_some() && run.node_id.as_ref() == node;
            if mine || run.lease_expires_at.is_none_or(|l| l <= now) {
                picked.push((*id, recovery_event(run, node)));
            }
        }
        let mut out = Vec::with_capacity(picked.len());
        for (id, event) in picked {
            let retry = inner.job(inner.runs[&id].job_id)?.retry.clone();
            let run = inner.runs.get_mut(&id).ok_or_else(|| run_missing(id))?;
            run.apply(event, now, &retry)?;
            out.push(run.clone());
        }
        Ok(out)
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

    #[test]
    fn conformance() {
        let report = block_on(conformance::run_all(|| async { MemoryStore::new() }));
        eprintln!("{report}");
        report.expect_skipped(&[]);
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
    }
}
