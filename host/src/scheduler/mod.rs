//! The scheduling loop: claims due runs from a [`Store`], runs them on the [`Executor`] and
//! records how they ended, deciding nothing itself (functional core, imperative shell).
//!
//! # The loop
//!
//! [`Scheduler::start`] first recovers the runs this node left running in a previous life
//! ([`Store::run_recover_expired`] with the node id: each is failed with
//! [`takt_core::run::NODE_RESTARTED`] and retried per its job's policy by the store), then
//! spawns one tokio task that repeats:
//!
//! 1. **Prepare** the due jobs: a job whose next fire is later than its misfire lateness window
//!    goes through [`misfire::plan`] (skips recorded with [`Store::run_insert_skipped`], next
//!    fire moved with the compare-and-set [`Store::job_set_next_fire`]); a due fire of a job
//!    that already has a running or pending run goes through [`overlap::decide`].
//! 2. **Claim** with [`Store::run_claim_due`], limit = free capacity (at most
//!    [`SchedulerConfig::claim_batch`]), and spawn each run (see below).
//! 3. **Renew** the leases of this node's runs every third of [`SchedulerConfig::lease`].
//! 4. **Sleep** until the earliest of: the next due instant (earliest next fire of an enabled
//!    job, earliest `next_attempt_at` of a pending retry), a notification (a job added or
//!    changed through the handle, a run finished, a shutdown), the next lease renewal, or the
//!    safety poll. The due instant and renewal are waited for on the [`Clock`]; the safety
//!    poll is real time (it exists for changes other nodes make in the store).
//!
//! Cost, and a note for the store trait: the trait has no "earliest due instant" method, so
//! each pass reads [`Store::job_list`] (all jobs) and [`Store::run_list`] of pending runs (at
//! most [`PENDING_SCAN`]), plus two `run_list` calls per due job for the overlap decision.
//! That is fine for hundreds of jobs; a `next_due(now)` store method (one indexed `MIN` query
//! in SQL) and a per-job "active runs" count should replace these scans.
//!
//! # One run
//!
//! The job's HandlerType is resolved in the [`PluginSet`]; an unresolvable one fails the run
//! with the resolve error, not retried. Otherwise the executor runs it with the job's timeout
//! (else the handler's default); log lines and progress go to the store in batches of at most
//! 100 lines, flushed as they arrive and at the end, before the outcome is recorded; the
//! [`Outcome`] becomes a core [`RunEvent`], [`Run::apply`] decides the new state (and any
//! retry) at the clock's "now", and [`Store::run_set_state_if_running`] records it.
//!
//! The [`Clock`] drives scheduling only (due times, retry times, leases, recorded instants);
//! the executor measures timeouts and grace periods in real time, since it waits for real
//! threads.
//!
//! # Policies not wired yet
//!
//! * Misfire: all three actions go through [`misfire::plan`]. Several fires kept by
//!   `fire-all` are claimed one per pass (the claim advances a job's next fire once per call);
//!   the loop passes again at once while anything is due. Under overlap `skip`, a kept fire
//!   whose predecessor is still running is then skipped as an overlap (the policies compose;
//!   use `allow` for a catch-up that runs side by side).
//! * Overlap: `skip` (the default) and `allow` are carried out. A pending retry of the job
//!   counts as a queued run, so under `skip` scheduled fires are skipped while a retry waits.
//!   `queue-one` and `cancel-running` are **not wired**: the loop records the fire as skipped
//!   (reason `overlap`, with a detail saying so) rather than start a second copy. The check
//!   reads the store before the claim, so two nodes may both start a fire's neighbour in the
//!   window between them (the (job, fire time) key still prevents any fire running twice).
//! * Lease recovery of *other* nodes' expired runs (`run_recover_expired(now, None)`) is not
//!   called periodically yet, and a renewal that counts fewer runs than this node holds is
//!   only logged (the runs are not cancelled).

mod clock;
mod sink;

pub use clock::{Clock, Sleep, SystemClock, TestClock};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use takt_core::job::{JobDef, JobError, JobId, JobName};
use takt_core::policy::{OverlapDecision, misfire, overlap};
use takt_core::run::{NodeId, Run, RunEvent, RunId, RunState, SkipReason};
use takt_core::schedule::Schedule;
use takt_core::store::{
    ClaimParams, ClaimedRun, RunFilter, RunFinish, Store, StoreError, StoreErrorKind,
};
use tokio::sync::{Notify, broadcast};
use tokio::task::{JoinHandle, JoinSet};

use crate::executor::{Executor, Outcome, RunRequest};
use crate::plugins::PluginSet;
use sink::LogForwarder;

/// The most pending runs one pass reads to find the earliest due retry.
pub const PENDING_SCAN: usize = 10_000;
/// The shortest accepted safety poll.
pub const MIN_SAFETY_POLL: Duration = Duration::from_millis(50);
/// The longest accepted safety poll.
pub const MAX_SAFETY_POLL: Duration = Duration::from_secs(60);
/// How many occurrences at most are walked to find a job's next *firing* occurrence (past
/// daylight-saving skips).
const MAX_SKIPS_WALKED: usize = 64;

/// How a [`Scheduler`] behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// This node's id (recorded on its runs; its leftovers are recovered at start).
    pub node: NodeId,
    /// The most runs this node runs at once (0 is read as 1).
    pub capacity: usize,
    /// How long a claim holds a run; renewed every third of it.
    pub lease: Duration,
    /// Real-time upper bound on a sleep, for changes made by other nodes; clamped to
    /// [`MIN_SAFETY_POLL`]..=[`MAX_SAFETY_POLL`].
    pub safety_poll: Duration,
    /// The most runs one claim takes (0 is read as 1).
    pub claim_batch: usize,
}

impl SchedulerConfig {
    /// Defaults for `node`: capacity 8, 30 s lease, 1 s safety poll, batches of 32.
    pub fn new(node: NodeId) -> SchedulerConfig {
        SchedulerConfig {
            node,
            capacity: 8,
            lease: Duration::from_secs(30),
            safety_poll: Duration::from_secs(1),
            claim_batch: 32,
        }
    }
}

/// Why a scheduler call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The job definition is invalid.
    #[error(transparent)]
    Job(#[from] JobError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The job does not exist.
    #[error("job {0} does not exist; list the jobs to find its id")]
    JobNotFound(JobId),
    /// A job must have an id for this call.
    #[error("job \"{0}\" has no id; add it first, or load it from the store")]
    NoId(JobName),
}

/// What happened to a run, for subscribers ([`SchedulerHandle::subscribe`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedulerEvent {
    /// This node claimed the run and starts executing it.
    Started {
        /// The run.
        run: RunId,
        /// Its job.
        job: JobId,
        /// Its fire time.
        fire_time: Timestamp,
        /// The attempt starting.
        attempt: u32,
    },
    /// An attempt ended and its outcome is recorded.
    Finished {
        /// The run.
        run: RunId,
        /// Its job.
        job: JobId,
        /// Its fire time.
        fire_time: Timestamp,
        /// The attempt that ended.
        attempt: u32,
        /// The recorded state: final, or `Pending` when a retry is scheduled.
        state: RunState,
    },
}

/// The scheduling loop, before it starts.
pub struct Scheduler<S> {
    config: SchedulerConfig,
    store: S,
    plugins: Arc<PluginSet>,
    executor: Executor,
    clock: Arc<dyn Clock>,
}

impl<S: Store + Clone + 'static> Scheduler<S> {
    /// A scheduler of `store`'s jobs on this node.
    pub fn new(
        config: SchedulerConfig,
        store: S,
        plugins: Arc<PluginSet>,
        executor: Executor,
        clock: Arc<dyn Clock>,
    ) -> Scheduler<S> {
        let config = SchedulerConfig {
            capacity: config.capacity.max(1),
            claim_batch: config.claim_batch.max(1),
            safety_poll: config.safety_poll.clamp(MIN_SAFETY_POLL, MAX_SAFETY_POLL),
            ..config
        };
        Scheduler {
            config,
            store,
            plugins,
            executor,
            clock,
        }
    }

    /// Recovers this node's leftover runs (failed "node restarted", retried per policy), then
    /// spawns the loop on the current tokio runtime.
    pub async fn start(self) -> Result<SchedulerHandle<S>, SchedulerError> {
        let now = self.clock.now();
        let recovered = self
            .store
            .run_recover_expired(now, Some(&self.config.node))
            .await?;
        if !recovered.is_empty() {
            tracing::info!(
                "node {} recovered {} runs left running by its previous life",
                self.config.node,
                recovered.len()
            );
        }
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            config: self.config,
            store: self.store,
            plugins: self.plugins,
            executor: self.executor,
            clock: self.clock,
            notify: Notify::new(),
            events,
            stopping: AtomicBool::new(false),
            shutdown_grace: Mutex::new(Duration::ZERO),
            running: Mutex::new(HashMap::new()),
        });
        let task = tokio::spawn(run_loop(shared.clone()));
        Ok(SchedulerHandle {
            shared,
            task: Arc::new(tokio::sync::Mutex::new(Some(task))),
        })
    }
}

struct Shared<S> {
    config: SchedulerConfig,
    store: S,
    plugins: Arc<PluginSet>,
    executor: Executor,
    clock: Arc<dyn Clock>,
    notify: Notify,
    events: broadcast::Sender<SchedulerEvent>,
    stopping: AtomicBool,
    shutdown_grace: Mutex<Duration>,
    /// This node's runs in flight: run id → job id.
    running: Mutex<HashMap<RunId, JobId>>,
}

impl<S> Shared<S> {
    fn running_count(&self) -> usize {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Controls a started [`Scheduler`]. Cheap to clone. Dropping every handle does not stop the
/// loop (it ends with its tokio runtime); call [`shutdown`](SchedulerHandle::shutdown).
pub struct SchedulerHandle<S> {
    shared: Arc<Shared<S>>,
    task: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl<S> Clone for SchedulerHandle<S> {
    fn clone(&self) -> Self {
        SchedulerHandle {
            shared: self.shared.clone(),
            task: self.task.clone(),
        }
    }
}

impl<S: Store + Clone + 'static> SchedulerHandle<S> {
    /// Validates and stores a new job with its first fire (the first firing occurrence after
    /// now; `None` for a manual job) and wakes the loop. Returns the stored job.
    pub async fn add_job(&self, mut job: JobDef) -> Result<JobDef, SchedulerError> {
        job.validate()?;
        let now = self.shared.clock.now();
        job.next_fire = job.schedule.as_ref().and_then(|s| first_fire_after(s, now));
        let stored = self.shared.store.job_insert(&job, now).await?;
        self.shared.notify.notify_one();
        Ok(stored)
    }

    /// Replaces a job (compare-and-set on `job.version`: a stale version is a
    /// [`StoreErrorKind::Conflict`]) and wakes the loop. When the schedule changed, the next
    /// fire is recomputed from now; otherwise the stored one is kept. Takes effect at once.
    pub async fn update_job(&self, mut job: JobDef) -> Result<JobDef, SchedulerError> {
        job.validate()?;
        let id = job
            .id
            .ok_or_else(|| SchedulerError::NoId(job.name.clone()))?;
        let now = self.shared.clock.now();
        let old = self
            .shared
            .store
            .job_get(id)
            .await?
            .ok_or(SchedulerError::JobNotFound(id))?;
        job.next_fire = if old.schedule == job.schedule {
            old.next_fire
        } else {
            job.schedule.as_ref().and_then(|s| first_fire_after(s, now))
        };
        let stored = self.shared.store.job_update(&job, now).await?;
        self.shared.notify.notify_one();
        Ok(stored)
    }

    /// Enables or disables a job. A disabled job is claimed no more (fires and retries) from
    /// the loop's next pass; enabling one recomputes its next fire from now, so the fires it
    /// missed while disabled are not run as misfires.
    ///
    /// The next fire is moved *before* the job is enabled: the loop leaves disabled jobs
    /// alone, so it cannot race the move (done after enabling, a pass running at that moment
    /// could treat the stale next fire as a misfire and move it first).
    pub async fn set_enabled(&self, id: JobId, enabled: bool) -> Result<JobDef, SchedulerError> {
        let store = &self.shared.store;
        let now = self.shared.clock.now();
        if enabled {
            let job = store
                .job_get(id)
                .await?
                .ok_or(SchedulerError::JobNotFound(id))?;
            if !job.enabled
                && let Some(schedule) = &job.schedule
            {
                let next = first_fire_after(schedule, now);
                if next != job.next_fire {
                    store.job_set_next_fire(id, job.next_fire, next).await?;
                }
            }
        }
        let job = store.job_set_enabled(id, enabled, now).await?;
        self.shared.notify.notify_one();
        Ok(job)
    }

    /// Runs a job now, by hand. The run is keyed like a scheduled fire, with the fire time
    /// **now truncated to the second**: the job's next fire is set to that instant (a
    /// compare-and-set) and the loop claims it, after which the claim moves the next fire back
    /// onto the schedule. So a job runs at most once per second by hand, and a trigger in the
    /// same second as a scheduled fire is that fire. A disabled job is not run. Returns the
    /// fire time.
    pub async fn trigger(&self, id: JobId) -> Result<Timestamp, SchedulerError> {
        let store = &self.shared.store;
        let now = self.shared.clock.now();
        let fire = floor_second(now);
        // The loop may advance the next fire between our read and our compare-and-set; read
        // again and retry (a few times: each loss means the loop made progress).
        let mut attempts = 0;
        loop {
            let job = store
                .job_get(id)
                .await?
                .ok_or(SchedulerError::JobNotFound(id))?;
            if job.next_fire.is_some_and(|nf| nf <= fire) {
                break;
            }
            match store.job_set_next_fire(id, job.next_fire, Some(fire)).await {
                Ok(()) => break,
                Err(e) if e.kind() == StoreErrorKind::Conflict && attempts < 5 => attempts += 1,
                Err(e) => return Err(e.into()),
            }
        }
        self.shared.notify.notify_one();
        Ok(fire)
    }

    /// A receiver of run events from now on (a slow receiver loses the oldest: see
    /// [`broadcast`]).
    pub fn subscribe(&self) -> broadcast::Receiver<SchedulerEvent> {
        self.shared.events.subscribe()
    }

    /// Runs of this node in flight.
    pub fn running(&self) -> usize {
        self.shared.running_count()
    }

    /// Stops claiming, shuts the executor down with `grace` (running runs are asked to stop
    /// and end as cancelled with reason shutdown; one that ignores it is abandoned after
    /// `grace`), records every run's outcome and flushes its log, then returns. Idempotent.
    pub async fn shutdown(&self, grace: Duration) {
        *self
            .shared
            .shutdown_grace
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = grace;
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.notify.notify_one();
        let task = self.task.lock().await.take();
        if let Some(task) = task
            && let Err(e) = task.await
        {
            tracing::error!("scheduling loop ended abnormally: {e}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The loop

async fn run_loop<S: Store + Clone + 'static>(shared: Arc<Shared<S>>) {
    let mut runs = JoinSet::new();
    let mut next_renew = shared.clock.now();
    while !shared.stopping.load(Ordering::SeqCst) {
        while runs.try_join_next().is_some() {}
        let now = shared.clock.now();
        if now >= next_renew {
            renew(&shared, now).await;
            next_renew = now
                .checked_add(shared.config.lease / 3)
                .unwrap_or(Timestamp::MAX);
        }
        let mut progressed = match prepare(&shared, now).await {
            Ok(changed) => changed,
            Err(e) => {
                tracing::warn!("scheduling pass could not prepare due jobs: {e}");
                false
            }
        };
        let free = shared
            .config
            .capacity
            .saturating_sub(shared.running_count());
        if free > 0 {
            let params = ClaimParams {
                node: shared.config.node.clone(),
                now,
                limit: free.min(shared.config.claim_batch),
                lease: shared.config.lease,
            };
            match shared.store.run_claim_due(&params).await {
                Ok(claimed) => {
                    progressed |= !claimed.is_empty();
                    for c in claimed {
                        spawn_run(&shared, &mut runs, c);
                    }
                }
                Err(e) => tracing::warn!("claiming due runs failed: {e}"),
            }
        }
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let due = match next_due(&shared).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!("cannot read the next due time: {e}");
                None
            }
        };
        let has_free = shared.running_count() < shared.config.capacity;
        if progressed && has_free && due.is_some_and(|d| d <= shared.clock.now()) {
            // More is due right now (a backlog, a second fire of a catch-up): pass again.
            continue;
        }
        // At capacity, only a finished run (a notification) can make room; a due instant that
        // has passed without a claim waits for a notification or the safety poll.
        let wake = due
            .filter(|d| has_free && *d > now)
            .map_or(next_renew, |d| d.min(next_renew));
        tokio::select! {
            () = shared.clock.sleep_until(wake) => {}
            () = shared.notify.notified() => {}
            () = tokio::time::sleep(shared.config.safety_poll) => {}
        }
    }
    let grace = *shared
        .shutdown_grace
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let stats = shared.executor.shutdown(grace).await;
    while runs.join_next().await.is_some() {}
    if stats.abandoned_alive > 0 {
        tracing::warn!(
            "{} plugin threads ignored the shutdown and were abandoned",
            stats.abandoned_alive
        );
    }
}

/// Renews this node's leases (when it holds any).
async fn renew<S: Store>(shared: &Shared<S>, now: Timestamp) {
    let held = shared.running_count();
    if held == 0 {
        return;
    }
    let Ok(until) = now.checked_add(shared.config.lease) else {
        return;
    };
    match shared
        .store
        .lease_renew(&shared.config.node, until, now)
        .await
    {
        Ok(n) if (n as usize) < held => tracing::warn!(
            "node {} renewed {n} leases but runs {held}; some were recovered by another node",
            shared.config.node
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("lease renewal failed: {e}"),
    }
}

/// The misfire and overlap decisions for every due job. Returns whether it changed anything.
async fn prepare<S: Store>(shared: &Shared<S>, now: Timestamp) -> Result<bool, StoreError> {
    let store = &shared.store;
    let mut changed = false;
    for job in store.job_list().await? {
        let (Some(id), Some(nf)) = (job.id, job.next_fire) else {
            continue;
        };
        if !job.enabled || nf > now {
            continue;
        }
        let mut fire = nf;
        // Misfires: only when the oldest due fire is beyond the lateness window (fires are
        // ascending, so otherwise every due fire is on time).
        if let Some(schedule) = &job.schedule
            && lateness(now, nf) > job.misfire.lateness
        {
            let plan = misfire::plan(schedule, nf, now, job.misfire);
            for s in &plan.skips {
                changed |= insert_skipped(store, id, s.fire_time, s.reason, None, now).await?;
            }
            if let Some(o) = &plan.omitted {
                let detail = match o.count {
                    Some(n) => format!("and {n} further misfires up to {}", o.last),
                    None => format!("and further misfires up to {}", o.last),
                };
                changed |=
                    insert_skipped(store, id, o.first, SkipReason::Misfire, Some(detail), now)
                        .await?;
            }
            let next = plan.fires.first().map(|f| f.fire_time).or(plan.next_fire);
            changed |= set_next_fire(store, id, nf, next).await?;
            match next {
                Some(n) if n <= now => fire = n,
                _ => continue,
            }
        }
        // Overlap: another run of this job still running or waiting.
        let running = count_runs(store, id, RunState::Running).await?;
        let queued = count_runs(store, id, RunState::Pending).await?;
        let detail = match overlap::decide(job.overlap, running, queued) {
            OverlapDecision::Start => continue,
            OverlapDecision::Skip(_) => None,
            OverlapDecision::Queue | OverlapDecision::CancelRunningThenStart => Some(format!(
                "overlap policy {} is not carried out by this host yet; the fire was skipped",
                job.overlap
            )),
        };
        changed |= insert_skipped(store, id, fire, SkipReason::Overlap, detail, now).await?;
        let next = job
            .schedule
            .as_ref()
            .and_then(|s| first_fire_after(s, fire));
        changed |= set_next_fire(store, id, fire, next).await?;
    }
    Ok(changed)
}

fn lateness(now: Timestamp, fire: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(fire)).unwrap_or(Duration::ZERO)
}

async fn count_runs<S: Store>(store: &S, job: JobId, state: RunState) -> Result<usize, StoreError> {
    let filter = RunFilter {
        job: Some(job),
        state: Some(state),
        limit: 2,
    };
    Ok(store.run_list(&filter).await?.len())
}

/// Records a skipped run; a fire already recorded (another node, an earlier pass) is fine.
/// Returns whether it recorded one.
async fn insert_skipped<S: Store>(
    store: &S,
    job: JobId,
    fire: Timestamp,
    reason: SkipReason,
    detail: Option<String>,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let run = Run::skipped(job, fire, reason, detail, now);
    match store.run_insert_skipped(&run).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == StoreErrorKind::Conflict => Ok(false),
        Err(e) => Err(e),
    }
}

/// Moves a job's next fire; a lost compare-and-set (another node, an operator) is fine: the
/// next pass decides again from the stored value. Returns whether it moved it.
async fn set_next_fire<S: Store>(
    store: &S,
    job: JobId,
    expected: Timestamp,
    new: Option<Timestamp>,
) -> Result<bool, StoreError> {
    if new == Some(expected) {
        return Ok(false);
    }
    match store.job_set_next_fire(job, Some(expected), new).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == StoreErrorKind::Conflict => Ok(false),
        Err(e) => Err(e),
    }
}

/// The earliest instant anything becomes claimable: an enabled job's next fire or a pending
/// run's `next_attempt_at` (see the module docs for the cost).
async fn next_due<S: Store>(shared: &Shared<S>) -> Result<Option<Timestamp>, StoreError> {
    let store = &shared.store;
    let jobs = store.job_list().await?;
    let enabled: HashMap<JobId, bool> = jobs
        .iter()
        .filter_map(|j| j.id.map(|id| (id, j.enabled)))
        .collect();
    let fires = jobs
        .iter()
        .filter(|j| j.enabled)
        .filter_map(|j| j.next_fire);
    let pending = store
        .run_list(&RunFilter {
            job: None,
            state: Some(RunState::Pending),
            limit: PENDING_SCAN,
        })
        .await?;
    let retries = pending
        .iter()
        .filter(|r| enabled.get(&r.job_id).copied().unwrap_or(false))
        .map(|r| r.next_attempt_at.unwrap_or(r.created_at));
    Ok(fires.chain(retries).min())
}

/// The first occurrence after `after` that fires (past DST-gap skips, bounded).
fn first_fire_after(schedule: &Schedule, after: Timestamp) -> Option<Timestamp> {
    schedule
        .iter_after(after)
        .take(MAX_SKIPS_WALKED)
        .find(|o| o.fires())
        .map(|o| o.at)
}

fn floor_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

// ---------------------------------------------------------------------------------------------
// One run

fn spawn_run<S: Store + Clone + 'static>(
    shared: &Arc<Shared<S>>,
    runs: &mut JoinSet<()>,
    claimed: ClaimedRun,
) {
    let Some(id) = claimed.run.id else {
        tracing::error!(
            "the store returned a claimed run of job {} without an id; it cannot be recorded",
            claimed.job.name
        );
        return;
    };
    shared
        .running
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(id, claimed.run.job_id);
    let _ = shared.events.send(SchedulerEvent::Started {
        run: id,
        job: claimed.run.job_id,
        fire_time: claimed.run.fire_time,
        attempt: claimed.run.attempt,
    });
    let shared = shared.clone();
    runs.spawn(async move {
        let job_id = claimed.run.job_id;
        let fire_time = claimed.run.fire_time;
        let attempt = claimed.run.attempt;
        let state = execute(&shared, id, claimed).await;
        shared
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if let Some(state) = state {
            let _ = shared.events.send(SchedulerEvent::Finished {
                run: id,
                job: job_id,
                fire_time,
                attempt,
                state,
            });
        }
        shared.notify.notify_one();
    });
}

/// Executes one claimed run and records its end. Returns the recorded state (`None` when it
/// could not be recorded).
async fn execute<S: Store + Clone + 'static>(
    shared: &Shared<S>,
    id: RunId,
    claimed: ClaimedRun,
) -> Option<RunState> {
    let ClaimedRun { mut run, job } = claimed;
    let (event, elapsed) = match shared.plugins.resolve(&job.handler_type) {
        Err(e) => (
            RunEvent::Failed {
                error: e.to_string(),
                retryable: false,
            },
            None,
        ),
        Ok(resolved) => {
            let req = RunRequest {
                plugin: resolved.plugin.module(),
                handler: resolved.handler.name.clone(),
                handler_type: job.handler_type.clone(),
                params_json: job.params_json.clone(),
                job_id: job.id.map_or_else(String::new, |j| j.to_string()),
                job_name: job.name.to_string(),
                run_id: id.to_string(),
                attempt: run.attempt,
                fire_time: run.fire_time,
                timeout: job.timeout.or(resolved.handler.default_timeout),
            };
            let logs = LogForwarder::start(shared.store.clone(), id, shared.clock.clone());
            let report = shared.executor.run(req, logs.sink()).await;
            logs.finish().await;
            let elapsed = report.started.map(|_| report.elapsed);
            (event_of(&report.outcome), elapsed)
        }
    };
    let now = shared.clock.now();
    let attempt = run.attempt;
    if let Err(e) = run.apply(event, now, &job.retry) {
        tracing::error!("run {id} cannot end its attempt {attempt}: {e}");
        return None;
    }
    let mut finish = RunFinish::from_run(&run, now);
    if elapsed.is_some() {
        finish.elapsed = elapsed;
    }
    match shared
        .store
        .run_set_state_if_running(id, attempt, &finish)
        .await
    {
        Ok(stored) => Some(stored.state),
        Err(e) => {
            tracing::warn!("cannot record the end of run {id} attempt {attempt}: {e}");
            None
        }
    }
}

/// The core event for an executor outcome.
fn event_of(outcome: &Outcome) -> RunEvent {
    match outcome {
        Outcome::Succeeded { result_json } => RunEvent::Succeeded {
            result_json: Some(result_json.clone()),
        },
        Outcome::Failed { retryable, .. } => RunEvent::Failed {
            error: outcome.error_text().unwrap_or_default(),
            retryable: *retryable,
        },
        Outcome::TimedOut { message, .. } => RunEvent::TimedOut {
            error: message.clone(),
        },
        Outcome::Cancelled { reason, .. } => RunEvent::Cancelled { reason: *reason },
    }
}
