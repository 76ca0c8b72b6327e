//! The scheduling loop: claims due runs from a [`Store`], runs them on the [`Executor`] and
//! records how they ended, deciding nothing itself (functional core, imperative shell).
//!
//! # The loop
//!
//! [`Scheduler::start`] first registers this life of the node ([`Store::node_register`]: a
//! start is refused while another live process holds the node id, see [`takt_core::node`]),
//! then recovers the runs its previous life left running ([`Store::run_recover_expired`] with
//! the node id and the new life: each is failed with [`takt_core::run::NODE_RESTARTED`] and
//! retried per its job's policy by the store), then spawns one tokio task that repeats:
//!
//! 1. **Prepare** the due jobs ([`Store::job_due`]: the first [`SchedulerConfig::claim_batch`] in claim order,
//!    with their running and pending counts): a job whose next fire is later than its misfire
//!    lateness window goes through [`misfire::plan`] (skips recorded with
//!    [`Store::run_insert_skipped`], next fire moved with the compare-and-set
//!    [`Store::job_set_next_fire`]); a due fire of a job that already has a running or pending
//!    run goes through [`overlap::decide`].
//! 2. **Claim** with [`Store::run_claim_due`], limit = free capacity (at most
//!    [`SchedulerConfig::claim_batch`]), in growing chunks (8, 16, 32, …), spawning each
//!    chunk's runs (see below) before claiming the next, so the first runs of a crowded
//!    instant start without waiting for the whole batch. A paused node
//!    ([`SchedulerHandle::pause`]) skips steps 1 and 2.
//! 3. Every [`SchedulerConfig::renew_every`]: **renew** the leases of this life's runs, which
//!    is also the node's heartbeat (a run whose lease was not renewed was recovered by another
//!    node and is stopped here; a renewal refused because another process took the node id
//!    over stops the node: [`SchedulerEvent::TakenOver`]), and **recover** any node's runs
//!    whose lease expired ([`Store::run_recover_expired`]).
//! 4. **Sleep** until the earliest of: [`Store::next_due`] (one indexed query), a notification
//!    (a job added or changed through the handle, a run finished, a shutdown), the next lease
//!    renewal, or the safety poll. The due instant and renewal are waited for on the
//!    [`Clock`]; the safety poll is real time (it exists for changes other nodes make in the
//!    store).
//!
//! The cost of a pass depends on what is due, not on how many jobs exist: `job_due`, the
//! claim and `next_due` are indexed queries in SQL.
//!
//! # One run
//!
//! A `takt::` HandlerType runs in the host itself ([`crate::builtin`]: housekeeping on the
//! store, such as retention). Any other is resolved in the [`PluginSet`]; an unresolvable one fails the run
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
//! # Policies
//!
//! * Misfire: all three actions go through [`misfire::plan`]. Several fires kept by
//!   `fire-all` are claimed one per pass (the claim advances a job's next fire once per call);
//!   the loop passes again at once while anything is due. Catch-up is not overlap: a kept fire
//!   whose time came *before* the job's run in progress started waits its turn as a queued
//!   run ([`OverlapDecision::Wait`]), so under `skip`, `queue-one` and `cancel-running` the
//!   kept fires run one after another in fire-time order; under `allow` side by side.
//! * Overlap (counts from `job_due`, so they include other nodes' runs): only a fire whose
//!   time comes while a run of the job is in flight (running, or pending since before the
//!   fire: [`Busy::since`]) is an overlap. `skip` records it as skipped (reason `overlap`); a
//!   pending retry counts as a queued run. `allow`
//!   starts it. `queue-one` records the fire as a queued run ([`Store::run_enqueue`]), which
//!   the claim takes once nothing of the job is running (it keeps its own fire time); a fire
//!   that comes while one is queued is skipped. `cancel-running` cancels this node's running
//!   runs of the job (they end `cancelled`, with the reason in their log) and the claim starts
//!   the new fire, so the two overlap for at most the cancelled run's grace period; a run on
//!   another node cannot be reached from here, so the fire starts beside it, with a warning.
//!   The decision reads the store before the claim, so two nodes may both start a fire's
//!   neighbour in the window between them (the (job, fire time) key still prevents any fire
//!   running twice).

mod clock;
mod identity;
mod sink;

pub use clock::{Clock, OffsetClock, Sleep, SystemClock, TestClock};
pub use identity::new_instance;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use takt_core::job::{JobDef, JobError, JobId, JobName};
use takt_core::node::{InstanceId, NodeInfo};
use takt_core::policy::{Busy, OverlapDecision, OverlapPolicy, misfire, overlap};
use takt_core::run::{NodeId, PluginBuild, Run, RunEvent, RunId, RunState, SkipReason};
use takt_core::schedule::Schedule;
use takt_core::store::{
    ClaimParams, ClaimedRun, DueJob, LogLevel, LogLine, RunFilter, RunFinish, Store, StoreError,
    StoreErrorKind,
};
use tokio::sync::{Notify, broadcast};
use tokio::task::{JoinHandle, JoinSet};

use crate::executor::{CancelToken, Executor, Outcome, RunRequest};
use crate::plugins::{
    PluginSet, PluginVersion, Plugins, ReloadError, ReloadReport, VersionState, build_of,
};
use crate::worker::WorkerStats;
use sink::LogForwarder;

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
    /// This life of the node ([`takt_core::node`]): registered at start, recorded on every
    /// run it claims. Fresh by default ([`new_instance`]); a start refused while another
    /// live process holds the node id.
    pub instance: InstanceId,
    /// Take the node id over from a live-looking instance on another machine (`--takeover`):
    /// for an operator who knows that process is gone. Its runs are recovered when their
    /// leases expire, not at once.
    pub takeover: bool,
    /// This machine's name, registered with the node (a restart on the same machine can
    /// tell a crashed predecessor by its pid).
    pub host_name: String,
    /// The node tags this node serves (seed 004 DispatcherID): it runs untagged jobs and jobs
    /// whose `node_tag` is one of these. Empty by default: untagged jobs only.
    pub tags: Vec<String>,
    /// The most runs this node runs at once (0 is read as 1).
    pub capacity: usize,
    /// How long a claim holds a run before another node may recover it (seed 000 §7: 60 s).
    pub lease: Duration,
    /// How often this node renews its leases (seed 000 §7: every 30 s) and recovers other
    /// nodes' expired ones. Clamped below `lease / 2`, so that one late renewal never loses a
    /// lease.
    pub renew_every: Duration,
    /// Real-time upper bound on a sleep, for changes made by other nodes; clamped to
    /// [`MIN_SAFETY_POLL`]..=[`MAX_SAFETY_POLL`].
    pub safety_poll: Duration,
    /// The most runs one claim takes (0 is read as 1).
    pub claim_batch: usize,
    /// How long before a fire is due the loop decides it (misfire and overlap) and claims
    /// it; the claimed run is handed to the executor at once, and its thread, ready, starts
    /// the plugin at the fire time. The claim's transaction and the hand-over are thus off
    /// the fire's critical path: on SQLite a second's 100 fires otherwise start only as
    /// their claims commit, one after another (B4). The price: the overlap decision and a
    /// disable or schedule change made within this window before a fire see the state of
    /// the window's start. Default 25 ms; at most [`MAX_LOOKAHEAD`]; zero claims at the
    /// instant.
    pub lookahead: Duration,
    /// Watch the plugin directory: poll it this often (the files' size and modification
    /// time) and reload the plugins once a change has held still for one poll (a copy in
    /// progress is not loaded half-written). `None` (the default): reload only when asked
    /// ([`SchedulerHandle::reload_plugins`]). At least [`MIN_PLUGIN_WATCH`].
    pub plugin_watch: Option<Duration>,
}

/// The shortest accepted [`SchedulerConfig::plugin_watch`].
pub const MIN_PLUGIN_WATCH: Duration = Duration::from_millis(100);

/// The largest [`SchedulerConfig::lookahead`] accepted (larger values are clamped).
pub const MAX_LOOKAHEAD: Duration = Duration::from_millis(500);

impl SchedulerConfig {
    /// Defaults for `node`: capacity 8, 60 s lease renewed every 30 s (seed 000 §7; clamped
    /// to just under half the lease), 1 s safety poll, batches of 32, fires claimed 25 ms
    /// ahead.
    pub fn new(node: NodeId) -> SchedulerConfig {
        SchedulerConfig {
            node,
            instance: new_instance(),
            takeover: false,
            host_name: crate::config::host_name(),
            tags: Vec::new(),
            capacity: 8,
            lease: Duration::from_secs(60),
            renew_every: Duration::from_secs(30),
            safety_poll: Duration::from_secs(1),
            claim_batch: 32,
            lookahead: Duration::from_millis(25),
            plugin_watch: None,
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
    /// Another live process holds this node id ([`takt_core::node::refusal_message`]).
    #[error("{0}")]
    NodeInUse(String),
}

/// What happened to a run, or to the node's database, for subscribers
/// ([`SchedulerHandle::subscribe`]). More kinds may come: match with a wildcard arm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchedulerEvent {
    /// This node claimed the run and handed it to its executor. A run claimed ahead of its
    /// fire time ([`SchedulerConfig::lookahead`]) is handed over up to that long before its
    /// plugin is called at the fire time.
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
    /// The database stopped answering (seed 000 §6.4): the loop keeps running, retries with
    /// backoff, keeps the outcomes of runs that end meanwhile until they can be recorded, and
    /// handles what fell due per each job's misfire policy once the database is back.
    StoreUnavailable {
        /// The first error.
        error: String,
    },
    /// The database answers again after [`SchedulerEvent::StoreUnavailable`].
    StoreRecovered {
        /// How long it was away (from the first failed call to the first good pass).
        down_for: Duration,
    },
    /// The plugins were reloaded ([`SchedulerHandle::reload_plugins`] or the directory
    /// watch): what was loaded, refused, retired.
    PluginsReloaded {
        /// The reload's report.
        report: ReloadReport,
    },
    /// A retired plugin version's last run ended; a version served by workers has ended
    /// them.
    PluginDrained {
        /// The version, now drained.
        version: PluginVersion,
    },
    /// Another process took this node id over (`--takeover`): this node claims nothing
    /// more, drains what it runs while its leases last, and stops. The embedding program
    /// should end (`takt run` exits 1).
    TakenOver {
        /// What happened ([`takt_core::node::taken_over_message`]).
        message: String,
    },
}

/// Waits `pause` before the next pass while the database is away (nothing else in the pass
/// would work either); a shutdown, like any notification, ends the wait early.
async fn outage_pause<S>(shared: &Shared<S>, pause: Duration) {
    tokio::select! {
        () = tokio::time::sleep(pause) => {}
        () = shared.notify.notified() => {}
    }
}

/// The longest pause between passes while the database is away.
const OUTAGE_BACKOFF_MAX: Duration = Duration::from_secs(8);

/// The loop's view of the database's health: consecutive failed passes and since when.
#[derive(Default)]
struct Outage {
    since: Option<(Timestamp, std::time::Instant)>,
    failed_passes: u32,
}

impl Outage {
    /// Records the end of a pass with `error` (the first store error of the pass, if any);
    /// returns how long to pause before the next pass when the pass failed.
    fn pass<S>(
        &mut self,
        shared: &Shared<S>,
        now: Timestamp,
        error: Option<String>,
    ) -> Option<Duration> {
        match error {
            Some(error) => {
                if self.since.is_none() {
                    self.since = Some((now, std::time::Instant::now()));
                    tracing::warn!("the database is unavailable: {error}; retrying with backoff");
                    let _ = shared
                        .events
                        .send(SchedulerEvent::StoreUnavailable { error });
                }
                self.failed_passes = self.failed_passes.saturating_add(1);
                let exp = self.failed_passes.min(5) - 1;
                Some((Duration::from_millis(500) * (1 << exp)).min(OUTAGE_BACKOFF_MAX))
            }
            None => {
                if let Some((_, at)) = self.since.take() {
                    let down_for = at.elapsed();
                    tracing::warn!("the database is back after {down_for:?}");
                    let _ = shared
                        .events
                        .send(SchedulerEvent::StoreRecovered { down_for });
                }
                self.failed_passes = 0;
                None
            }
        }
    }
}

/// The scheduling loop, before it starts.
pub struct Scheduler<S> {
    config: SchedulerConfig,
    store: S,
    plugins: Arc<Plugins>,
    executor: Executor,
    clock: Arc<dyn Clock>,
    events: broadcast::Sender<SchedulerEvent>,
}

impl<S: Store + Clone + 'static> Scheduler<S> {
    /// A scheduler of `store`'s jobs on this node, with a fixed set of plugins (nothing to
    /// reload, no worker processes).
    pub fn new(
        config: SchedulerConfig,
        store: S,
        plugins: Arc<PluginSet>,
        executor: Executor,
        clock: Arc<dyn Clock>,
    ) -> Scheduler<S> {
        Scheduler::with_plugins(
            config,
            store,
            Arc::new(Plugins::fixed(plugins)),
            executor,
            clock,
        )
    }

    /// A scheduler of `store`'s jobs on this node with `plugins` (a directory to reload, and
    /// the worker processes of isolated plugins).
    pub fn with_plugins(
        config: SchedulerConfig,
        store: S,
        plugins: Arc<Plugins>,
        executor: Executor,
        clock: Arc<dyn Clock>,
    ) -> Scheduler<S> {
        let config = SchedulerConfig {
            capacity: config.capacity.max(1),
            claim_batch: config.claim_batch.max(1),
            safety_poll: config.safety_poll.clamp(MIN_SAFETY_POLL, MAX_SAFETY_POLL),
            lookahead: config.lookahead.min(MAX_LOOKAHEAD),
            plugin_watch: config.plugin_watch.map(|w| w.max(MIN_PLUGIN_WATCH)),
            renew_every: config
                .renew_every
                .min(config.lease.mul_f64(0.45))
                .max(Duration::from_millis(100)),
            ..config
        };
        Scheduler {
            config,
            store,
            plugins,
            executor,
            clock,
            events: broadcast::channel(1024).0,
        }
    }

    /// A receiver of the scheduler's events from its very first pass on (the handle's
    /// [`SchedulerHandle::subscribe`] sees them only from the moment it is called, after the
    /// loop started).
    pub fn subscribe(&self) -> broadcast::Receiver<SchedulerEvent> {
        self.events.subscribe()
    }

    /// This node as it registers.
    fn node_info(&self) -> NodeInfo {
        NodeInfo {
            id: self.config.node.clone(),
            instance: self.config.instance.clone(),
            host_name: self.config.host_name.clone(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            capacity: self.config.capacity,
            tags: self.config.tags.clone(),
        }
    }

    /// Registers this life of the node ([`takt_core::node`]: refused with
    /// [`SchedulerError::NodeInUse`] while another live process holds the node id), recovers
    /// the runs its previous life left running (failed "node restarted", retried per policy),
    /// then spawns the loop on the current tokio runtime.
    pub async fn start(self) -> Result<SchedulerHandle<S>, SchedulerError> {
        let now = self.clock.now();
        let me = self.node_info();
        let taken = identity::register(
            &self.store,
            &me,
            now,
            self.config.lease,
            self.config.takeover,
        )
        .await?;
        if taken.recover_previous {
            let recovered = self
                .store
                .run_recover_expired(now, Some((&self.config.node, &self.config.instance)))
                .await?;
            if !recovered.is_empty() {
                tracing::info!(
                    "node {} recovered {} runs left running by its previous life",
                    self.config.node,
                    recovered.len()
                );
            }
        }
        let events = self.events;
        let shared = Arc::new(Shared {
            config: self.config,
            store: self.store,
            plugins: self.plugins,
            executor: self.executor,
            clock: self.clock,
            notify: Notify::new(),
            events,
            stopping: AtomicBool::new(false),
            taken_over: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            passes: AtomicU64::new(0),
            shutdown_grace: Mutex::new(Duration::ZERO),
            running: Mutex::new(HashMap::new()),
            finishing: Mutex::new(std::collections::HashSet::new()),
            watch: Mutex::new(None),
        });
        if let Some(every) = shared.config.plugin_watch {
            let watch = tokio::spawn(watch_plugins(shared.clone(), every));
            *shared.watch.lock().unwrap_or_else(PoisonError::into_inner) = Some(watch);
        }
        let live = identity::LiveHere::new(shared.config.instance.clone());
        let task = tokio::spawn(run_loop(shared.clone(), live));
        Ok(SchedulerHandle {
            shared,
            task: Arc::new(tokio::sync::Mutex::new(Some(task))),
        })
    }
}

struct Shared<S> {
    config: SchedulerConfig,
    store: S,
    plugins: Arc<Plugins>,
    executor: Executor,
    clock: Arc<dyn Clock>,
    notify: Notify,
    events: broadcast::Sender<SchedulerEvent>,
    stopping: AtomicBool,
    /// Another process took the node id over ([`SchedulerEvent::TakenOver`]).
    taken_over: AtomicBool,
    /// Set by [`SchedulerHandle::pause`]: claim nothing until resumed.
    paused: AtomicBool,
    /// Turns of the loop and of its drain ([`SchedulerHandle::loop_passes`]).
    passes: AtomicU64,
    shutdown_grace: Mutex<Duration>,
    /// This node's runs in flight.
    running: Mutex<HashMap<RunId, InFlight>>,
    /// Runs that ended on this node whose outcome is not recorded yet (the database is away):
    /// their leases are still renewed, so that no other node recovers and re-runs them.
    finishing: Mutex<std::collections::HashSet<RunId>>,
    /// The plugin directory watch, ended with the loop.
    watch: Mutex<Option<JoinHandle<()>>>,
}

/// A run this node is executing.
struct InFlight {
    job: JobId,
    cancel: CancelToken,
}

impl<S> Shared<S> {
    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, InFlight>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn running_count(&self) -> usize {
        self.in_flight().len()
    }

    fn finishing(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<RunId>> {
        self.finishing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<S: Store> Shared<S> {
    /// Asks this node's run `id` to stop (it ends `cancelled`, reason requested) and writes
    /// `why` into its log first, so the record says who stopped it. Returns whether this node
    /// was running it.
    async fn cancel_local(&self, id: RunId, why: String) -> bool {
        let token = self.in_flight().get(&id).map(|f| f.cancel.clone());
        let Some(token) = token else {
            return false;
        };
        let line = LogLine {
            at: self.clock.now(),
            level: LogLevel::Warn,
            message: why,
        };
        if let Err(e) = self.store.log_append(id, &[line]).await {
            tracing::warn!("cannot write why run {id} is cancelled into its log: {e}");
        }
        token.cancel();
        true
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

    /// Removes a job with its runs and their logs. A run of it that this node is executing is
    /// cancelled first (its end can no longer be recorded); a run on another node finds the
    /// job gone when it ends.
    pub async fn remove_job(&self, id: JobId) -> Result<(), SchedulerError> {
        let mine: Vec<RunId> = self
            .shared
            .in_flight()
            .iter()
            .filter(|(_, f)| f.job == id)
            .map(|(r, _)| *r)
            .collect();
        for run in mine {
            self.shared
                .cancel_local(run, format!("cancelled: job {id} is being removed"))
                .await;
        }
        match self.shared.store.job_delete(id).await {
            Ok(()) => {}
            Err(e) if e.kind() == StoreErrorKind::NotFound => {
                return Err(SchedulerError::JobNotFound(id));
            }
            Err(e) => return Err(e.into()),
        }
        self.shared.notify.notify_one();
        Ok(())
    }

    /// Asks a run this node is executing to stop: it ends `cancelled` (reason requested) once
    /// the plugin returns or the grace period passes, and `why` goes into its log. Returns
    /// whether this node was running it (a run on another node is not reachable from here).
    pub async fn cancel_run(&self, id: RunId, why: &str) -> bool {
        self.shared
            .cancel_local(id, format!("cancelled by request: {why}"))
            .await
    }

    /// Stops this node from claiming (scheduled fires, retries, triggers) until
    /// [`resume`](Self::resume); runs in flight go on. For a maintenance window (a plugin
    /// swap needs none: see [`reload_plugins`](Self::reload_plugins)). Jobs keep
    /// their schedules, so fires due while paused are misfires when the pause outlasts their
    /// lateness window, handled per each job's misfire policy (other nodes keep claiming).
    pub fn pause(&self) {
        self.shared.paused.store(true, Ordering::SeqCst);
        self.shared.notify.notify_one();
    }

    /// Makes the loop pass at once: something changed elsewhere that may be due sooner than
    /// it planned (another node's or a command's change, as PostgreSQL's `LISTEN` reports it:
    /// see `PgStore::listen`). Cheap, and harmless when nothing changed.
    pub fn wake(&self) {
        self.shared.notify.notify_one();
    }

    /// Undoes [`pause`](Self::pause).
    pub fn resume(&self) {
        self.shared.paused.store(false, Ordering::SeqCst);
        self.shared.notify.notify_one();
    }

    /// Whether this node is paused.
    pub fn is_paused(&self) -> bool {
        self.shared.paused.load(Ordering::SeqCst)
    }

    /// A receiver of run events from now on (a slow receiver loses the oldest: see
    /// [`broadcast`]).
    pub fn subscribe(&self) -> broadcast::Receiver<SchedulerEvent> {
        self.shared.events.subscribe()
    }

    /// This node's id and the life of it this scheduler registered ([`takt_core::node`]):
    /// what its runs record.
    pub fn node(&self) -> (&NodeId, &InstanceId) {
        (&self.shared.config.node, &self.shared.config.instance)
    }

    /// How many turns the scheduling loop (and, once stopping, its drain) has begun: a
    /// liveness signal for a watchdog. A live loop turns at least every
    /// [`SchedulerConfig::safety_poll`] and soon after every [`wake`](Self::wake); a loop
    /// stuck in a call that never returns does not, and neither does one that has ended.
    pub fn loop_passes(&self) -> u64 {
        self.shared.passes.load(Ordering::Relaxed)
    }

    /// Runs of this node in flight.
    pub fn running(&self) -> usize {
        self.shared.running_count()
    }

    /// Reloads the plugin directory (see [`Plugins::reload`]): changed files are checked like
    /// at start and loaded beside the old versions, new runs go to the new versions, running
    /// runs finish on the old ones, which drain. Also published as
    /// [`SchedulerEvent::PluginsReloaded`] (and [`SchedulerEvent::PluginDrained`] for versions
    /// that had no run left).
    pub async fn reload_plugins(&self) -> Result<ReloadReport, ReloadError> {
        reload(&self.shared).await
    }

    /// Every plugin version serving or draining, with its runs in flight and workers.
    pub fn plugin_versions(&self) -> Vec<PluginVersion> {
        self.shared.plugins.versions()
    }

    /// The plugins serving now, and the files refused.
    pub fn plugins(&self) -> Arc<PluginSet> {
        self.shared.plugins.current()
    }

    /// The worker processes' counters, when the host has workers.
    pub fn worker_stats(&self) -> Option<WorkerStats> {
        self.shared.plugins.worker_stats()
    }

    /// Stops this node gracefully and returns once every run's outcome is recorded and its log
    /// flushed. Idempotent.
    ///
    /// 1. Claiming stops at once: the pass in progress ends, and the runs it claimed still
    ///    start (they are this node's, leased in the store; refusing them would record fires
    ///    that were due and claimed as cancelled).
    /// 2. The drain: running runs may finish for up to `grace`, their leases renewed.
    /// 3. What still runs is cancelled with reason shutdown — recorded `cancelled`, never
    ///    timed out — and given the executor's grace ([`ExecutorConfig::grace`]) to return;
    ///    a run that ignores it is abandoned. A run still waiting for a slot ends without its
    ///    plugin being called.
    ///
    /// `Duration::ZERO` skips the drain: cancel at once.
    ///
    /// A call while another one drains shortens that drain to its own grace (never lengthens
    /// it) and returns at once: `shutdown(Duration::ZERO)` during a drain cancels the running
    /// runs now, still recording each (an operator's second Ctrl-C); the first call returns
    /// when the stop is complete.
    ///
    /// [`ExecutorConfig::grace`]: crate::executor::ExecutorConfig::grace
    pub async fn shutdown(&self, grace: Duration) {
        {
            let mut g = self
                .shared
                .shutdown_grace
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            *g = if self.shared.stopping.load(Ordering::SeqCst) {
                (*g).min(grace)
            } else {
                grace
            };
        }
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

async fn run_loop<S: Store + Clone + 'static>(shared: Arc<Shared<S>>, live: identity::LiveHere) {
    let mut runs = JoinSet::new();
    let mut next_renew = shared.clock.now();
    let mut outage = Outage::default();
    // The next due instant as the last pass read it.
    let mut planned: Option<Timestamp> = None;
    while !shared.stopping.load(Ordering::SeqCst) {
        shared.passes.fetch_add(1, Ordering::Relaxed);
        while runs.try_join_next().is_some() {}
        let now = shared.clock.now();
        // When the next due instant the last pass saw is at most `lookahead` away, this pass
        // decides and claims up to it, and its runs start at their fire times (see
        // `SchedulerConfig::lookahead`). Otherwise (a late or a stale plan) up to now: the
        // claim's instant is also the runs' recorded start.
        let horizon = match planned {
            Some(d)
                if d > now
                    && now
                        .checked_add(shared.config.lookahead)
                        .is_ok_and(|a| d <= a) =>
            {
                d
            }
            _ => now,
        };
        // The first store error of this pass (the outage report names it).
        let mut error: Option<String> = None;
        if now >= next_renew {
            let renewed = renew(&shared, now).await;
            let recovered = recover_expired(&shared, now).await;
            error = renewed.err().or(recovered.err());
            if error.is_none() {
                next_renew = now
                    .checked_add(shared.config.renew_every)
                    .unwrap_or(Timestamp::MAX);
            }
        }
        let paused = shared.paused.load(Ordering::SeqCst);
        let mut progressed = false;
        if !paused && error.is_none() {
            progressed = match prepare(&shared, now, horizon).await {
                Ok(changed) => changed,
                Err(e) => {
                    error = Some(format!("preparing due jobs: {e}"));
                    false
                }
            };
        }
        if let Some(pause) = outage.pass(&shared, now, error.take()) {
            outage_pause(&shared, pause).await;
            continue;
        }
        if progressed {
            // Prepare moved or recorded fires: the jobs now at the top of the claim order
            // were not prepared in this pass. Prepare again before claiming, so that every
            // fire the claim takes (the top `claim_batch` at most) went through the misfire
            // and overlap decisions.
            continue;
        }
        let free = shared
            .config
            .capacity
            .saturating_sub(shared.running_count());
        if free > 0 && !paused {
            match claim(
                &shared,
                &mut runs,
                horizon,
                free.min(shared.config.claim_batch),
            )
            .await
            {
                Ok(any) => progressed |= any,
                Err(e) => error = Some(format!("claiming due runs: {e}")),
            }
        }
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let due = match shared.store.next_due(&shared.config.tags).await {
            Ok(due) => due,
            Err(e) => {
                error.get_or_insert(format!("reading the next due time: {e}"));
                None
            }
        };
        planned = due;
        if let Some(pause) = outage.pass(&shared, now, error.take()) {
            outage_pause(&shared, pause).await;
            continue;
        }
        let has_free = !paused && shared.running_count() < shared.config.capacity;
        if progressed && has_free && due.is_some_and(|d| d <= shared.clock.now()) {
            // More is due right now (a backlog, a second fire of a catch-up): pass again.
            continue;
        }
        // At capacity, only a finished run (a notification) can make room; a due instant that
        // has passed without a claim waits for a notification or the safety poll.
        let wake = due
            .filter(|d| has_free && *d > horizon)
            .map(|d| d.checked_sub(shared.config.lookahead).unwrap_or(d))
            .map_or(next_renew, |d| d.min(next_renew));
        tokio::select! {
            () = shared.clock.sleep_until(wake) => {}
            () = shared.notify.notified() => {}
            () = tokio::time::sleep(shared.config.safety_poll) => {}
        }
    }
    drain(&shared, &mut runs, next_renew).await;
    // What is still running after the drain is cancelled as shutdown and given the
    // executor's grace to return; a run still queued for a slot ends without being called.
    let stats = shared.executor.shutdown(shared.executor.grace()).await;
    while runs.join_next().await.is_some() {}
    if let Some(w) = shared
        .watch
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        w.abort();
    }
    // Every call has ended or been killed: the worker processes go now.
    let plugins = shared.plugins.clone();
    let _ = tokio::task::spawn_blocking(move || {
        plugins.shutdown_workers(Duration::from_secs(5));
    })
    .await;
    if stats.abandoned_alive > 0 {
        tracing::warn!(
            "{} plugin threads ignored the shutdown and were abandoned",
            stats.abandoned_alive
        );
    }
    // A clean stop frees the node id at once for the next start (a taken-over life's stop
    // changes nothing: the row is the new life's).
    let config = &shared.config;
    if let Err(e) = shared
        .store
        .node_stopped(&config.node, &config.instance, shared.clock.now())
        .await
    {
        tracing::warn!("cannot record the stop of node {}: {e}", config.node);
    }
    drop(live);
}

/// The drain of a shutdown: claims nothing more and lets this node's runs — including those
/// the last pass claimed, which still start — finish for up to the shutdown's grace, renewing
/// their leases meanwhile (a grace longer than the lease must not let another node recover
/// runs that are about to end here).
async fn drain<S: Store>(shared: &Shared<S>, runs: &mut JoinSet<()>, mut next_renew: Timestamp) {
    let started = tokio::time::Instant::now();
    loop {
        shared.passes.fetch_add(1, Ordering::Relaxed);
        // Read on every turn: a second `shutdown` may have shortened it (and notified).
        let grace = *shared
            .shutdown_grace
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let deadline = started + grace;
        while runs.try_join_next().is_some() {}
        if runs.is_empty() {
            return;
        }
        let now = shared.clock.now();
        if now >= next_renew {
            if let Err(e) = renew(shared, now).await {
                tracing::warn!("{e} while stopping");
            }
            next_renew = now
                .checked_add(shared.config.renew_every)
                .unwrap_or(Timestamp::MAX);
        }
        tokio::select! {
            _ = runs.join_next() => {}
            () = tokio::time::sleep_until(deadline) => return,
            () = shared.clock.sleep_until(next_renew) => {}
            () = shared.notify.notified() => {}
        }
    }
}

/// The first claim of a pass takes at most this many runs; each further claim of the pass
/// takes twice the one before, up to the pass's limit.
const FIRST_CLAIM: usize = 8;

/// Claims up to `limit` due runs and spawns each claimed one; returns whether it claimed any,
/// or the store's error when the first chunk failed (a later chunk's failure only ends the
/// pass's claiming: what was claimed runs).
///
/// The limit is taken in growing chunks ([`FIRST_CLAIM`], then doubling), each chunk
/// spawned before the next is claimed: the runs of a chunk start while the store commits the
/// next, so when many fires are due at one instant the first bodies start after a small
/// claim instead of after the whole batch (B4 on SQLite: a claim of 100 fires took 2–4 ms).
/// The chunks together take exactly what one claim of `limit` would (the top of the claim
/// order), except that a claim advances a job's next fire once per call: a chunk whose job
/// is due again (a catch-up) ends the pass's claiming, so that fire goes through the next
/// pass's misfire and overlap decisions, as it would after a single claim. (A store that
/// returns the job as it was before the advance makes every chunk look due again: the pass
/// then claims one chunk, which is still correct.)
async fn claim<S: Store + Clone + 'static>(
    shared: &Arc<Shared<S>>,
    runs: &mut JoinSet<()>,
    now: Timestamp,
    limit: usize,
) -> Result<bool, String> {
    let mut taken = 0;
    let mut chunk = FIRST_CLAIM;
    while taken < limit {
        let ask = chunk.min(limit - taken);
        let params = ClaimParams {
            node: shared.config.node.clone(),
            instance: shared.config.instance.clone(),
            tags: shared.config.tags.clone(),
            now,
            limit: ask,
            lease: shared.config.lease,
        };
        let claimed = match shared.store.run_claim_due(&params).await {
            Ok(claimed) => claimed,
            Err(e) if taken == 0 => return Err(e.to_string()),
            Err(e) => {
                tracing::warn!("claiming due runs failed: {e}");
                break;
            }
        };
        let got = claimed.len();
        let due_again = claimed
            .iter()
            .any(|c| c.job.next_fire.is_some_and(|nf| nf <= now));
        // A run claimed ahead of its fire time (the lookahead) is handed over at once and
        // waits for its time in the executor (see `execute`), so no later claim delays it.
        for c in claimed {
            spawn_run(shared, runs, c);
        }
        taken += got;
        if got < ask || due_again || shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        chunk = chunk.saturating_mul(2);
    }
    Ok(taken > 0)
}

/// When a claimed run may start: its fire time, or for a retry the time its delay ends.
fn start_at(run: &Run) -> Timestamp {
    run.next_attempt_at
        .map_or(run.fire_time, |at| at.max(run.fire_time))
}

/// Renews this node's leases: of its runs in flight, of those whose outcome waits to be
/// recorded, and — found by the renewal itself — of runs the store holds for this node that it
/// never heard of (a claim whose COMMIT succeeded while its answer was lost and could not be
/// resolved), which are then failed and retried per policy rather than kept alive unrun.
async fn renew<S: Store>(shared: &Shared<S>, now: Timestamp) -> Result<(), String> {
    let Ok(until) = now.checked_add(shared.config.lease) else {
        return Ok(());
    };
    let renewed = match shared
        .store
        .lease_renew(&shared.config.node, &shared.config.instance, until, now)
        .await
    {
        Ok(renewed) => renewed,
        Err(e) if e.kind() == StoreErrorKind::Conflict => {
            taken_over(shared, e.to_string());
            return Ok(());
        }
        Err(e) => return Err(format!("renewing leases: {e}")),
    };
    // A run we execute whose lease was not renewed has been recovered by another node (or
    // by our own recovery after the loop stalled past the lease): its record is already
    // failed and possibly retried elsewhere, so this copy must stop. The map is read after
    // the renewal, and a run leaves it before its end is recorded (see `execute`), so every
    // run in it was still running in the store when the renewal ran: missing means lost.
    let lost: Vec<RunId> = shared
        .in_flight()
        .iter()
        .filter(|(id, _)| !renewed.contains(id))
        .map(|(id, _)| *id)
        .collect();
    // Renewed but unknown here: a run moves from the in-flight map to `finishing` (inserted
    // first) and leaves that only once its end is recorded, so a renewed run in neither set
    // was never started by this process.
    let orphans: Vec<RunId> = {
        let in_flight = shared.in_flight();
        let finishing = shared.finishing();
        renewed
            .iter()
            .filter(|id| !in_flight.contains_key(id) && !finishing.contains(id))
            .copied()
            .collect()
    };
    for id in orphans {
        fail_orphan(shared, id, now).await;
    }
    for id in lost {
        tracing::warn!(
            "node {} lost the lease of run {id} (another node recovered it); stopping it",
            shared.config.node
        );
        shared
            .cancel_local(
                id,
                format!(
                    "cancelled: node {} lost this run's lease (it was recovered after the \
                     lease expired); its outcome is not recorded",
                    shared.config.node
                ),
            )
            .await;
    }
    Ok(())
}

/// Another process took this node id over: claim nothing more and stop, draining what runs
/// while the leases last (they can no longer be renewed; once they expire, the runs are
/// recovered like any lost run). Reported once.
fn taken_over<S>(shared: &Shared<S>, message: String) {
    if shared.taken_over.swap(true, Ordering::SeqCst) {
        return;
    }
    tracing::error!("{message}");
    let _ = shared.events.send(SchedulerEvent::TakenOver { message });
    *shared
        .shutdown_grace
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = shared.config.lease / 2;
    shared.stopping.store(true, Ordering::SeqCst);
    shared.notify.notify_one();
}

/// The error of a run this node's store held as running but this node never started.
pub const ORPHANED: &str = "the claim of this run lost its connection before the node heard of \
     it, so it was never started; failed to be retried per policy";

/// Fails run `id`, held by this node in the store but never started here (see `renew`).
async fn fail_orphan<S: Store>(shared: &Shared<S>, id: RunId, now: Timestamp) {
    let store = &shared.store;
    let Ok(Some(mut run)) = store.run_get(id).await else {
        return;
    };
    if run.state != RunState::Running || run.node_id.as_ref() != Some(&shared.config.node) {
        return;
    }
    let Ok(Some(job)) = store.job_get(run.job_id).await else {
        return;
    };
    let attempt = run.attempt;
    let event = RunEvent::Failed {
        error: ORPHANED.to_string(),
        retryable: true,
    };
    if run.apply(event, now, &job.retry).is_err() {
        return;
    }
    match store
        .run_set_state_if_running(id, attempt, &RunFinish::from_run(&run, now))
        .await
    {
        Ok(_) => tracing::warn!("run {id} was claimed for this node but never started: {ORPHANED}"),
        Err(e) => tracing::warn!("cannot fail the orphaned run {id}: {e}"),
    }
}

/// Recovers runs of any node whose lease expired (a node that died or lost the database):
/// each fails with [`takt_core::run::LEASE_EXPIRED`] and is retried per its job's policy.
async fn recover_expired<S: Store>(shared: &Shared<S>, now: Timestamp) -> Result<(), String> {
    match shared.store.run_recover_expired(now, None).await {
        Ok(runs) if !runs.is_empty() => {
            tracing::warn!(
                "node {} recovered {} runs whose lease expired",
                shared.config.node,
                runs.len()
            );
            shared.notify.notify_one();
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(format!("recovering expired leases: {e}")),
    }
}

/// The misfire and overlap decisions for the first `claim_batch` due jobs in claim order (a
/// claim takes at most that many fires, and only after a pass that changed nothing here).
/// Returns whether it changed anything.
async fn prepare<S: Store>(
    shared: &Shared<S>,
    now: Timestamp,
    horizon: Timestamp,
) -> Result<bool, StoreError> {
    let store = &shared.store;
    let mut changed = false;
    // Due by the horizon (decided ahead, with the claim); late by the real clock.
    for due in store
        .job_due(horizon, shared.config.claim_batch, &shared.config.tags)
        .await?
    {
        let DueJob {
            id,
            next_fire: nf,
            misfire: misfire_policy,
            overlap: overlap_policy,
            running,
            pending,
            ..
        } = due;
        let late = lateness(now, nf) > misfire_policy.lateness;
        let busy = running > 0 || pending > 0;
        if !late && (!busy || overlap_policy == OverlapPolicy::Allow) {
            // The common case, decided from the row alone.
            continue;
        }
        // A decision needs the schedule: load the whole job (it may be gone or changed since
        // the row was read; then the next pass decides again).
        let Some(job) = store.job_get(id).await? else {
            continue;
        };
        if !job.enabled || job.next_fire != Some(nf) {
            continue;
        }
        let mut fire = nf;
        // Misfires: only when the oldest due fire is beyond the lateness window (fires are
        // ascending, so otherwise every due fire is on time).
        if let Some(schedule) = &job.schedule
            && late
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
        if !busy {
            continue;
        }
        let busy = Busy {
            running: running as usize,
            queued: pending as usize,
            since: busy_since(store, id).await?,
        };
        let next = || {
            job.schedule
                .as_ref()
                .and_then(|s| first_fire_after(s, fire))
        };
        match overlap::decide(overlap_policy, busy, fire) {
            OverlapDecision::Start => {}
            OverlapDecision::Skip(reason) => {
                changed |= insert_skipped(store, id, fire, reason, None, now).await?;
                changed |= set_next_fire(store, id, fire, next()).await?;
            }
            OverlapDecision::Queue | OverlapDecision::Wait => {
                // The fire waits as a queued run, claimed when the job is idle (queued runs
                // one at a time, oldest first); the job's schedule moves on. Queue: the next
                // fire that comes while both exist is skipped as an overlap (one queued at
                // most). Wait: a catch-up fire older than the run in progress, any number.
                match store.run_enqueue(id, fire, now).await {
                    Ok(_) => changed = true,
                    Err(e) if e.kind() == StoreErrorKind::Conflict => {}
                    Err(e) => return Err(e),
                }
                changed |= set_next_fire(store, id, fire, next()).await?;
            }
            OverlapDecision::CancelRunningThenStart => {
                changed |= cancel_running_of(shared, id, fire).await;
            }
        }
    }
    Ok(changed)
}

/// When the runs of `job` now in flight began: the earliest creation of its running and
/// pending runs (see [`Busy::since`]). A handful of rows: what one job has in flight.
async fn busy_since<S: Store>(store: &S, job: JobId) -> Result<Option<Timestamp>, StoreError> {
    let mut since: Option<Timestamp> = None;
    for state in [RunState::Running, RunState::Pending] {
        let runs = store
            .run_list(&RunFilter {
                job: Some(job),
                state: Some(state),
                limit: 10_000,
            })
            .await?;
        for r in runs {
            since = Some(since.map_or(r.created_at, |s| s.min(r.created_at)));
        }
    }
    Ok(since)
}

/// Overlap `cancel-running`: cancels this node's running runs of job `job` so that its fire
/// at `fire` starts (the claim that follows starts it; the cancelled run ends within its
/// grace period). A run of the job on another node cannot be stopped from here: the new fire
/// starts beside it, and a warning says so.
async fn cancel_running_of<S: Store>(shared: &Shared<S>, job: JobId, fire: Timestamp) -> bool {
    let mine: Vec<(RunId, bool)> = shared
        .in_flight()
        .iter()
        .filter(|(_, f)| f.job == job)
        .map(|(id, f)| (*id, f.cancel.is_cancelled()))
        .collect();
    if mine.is_empty() {
        tracing::warn!(
            "job {job}: overlap policy cancel-running cannot stop a run on another node; the \
             fire at {fire} starts beside it"
        );
        return false;
    }
    // Already asked in an earlier pass (the claim waited for capacity): ask once only.
    for (id, _) in mine.iter().filter(|(_, asked)| !asked) {
        shared
            .cancel_local(
                *id,
                format!("cancelled: overlap policy cancel-running starts the job's fire at {fire}"),
            )
            .await;
    }
    mine.iter().any(|(_, asked)| !asked)
}

fn lateness(now: Timestamp, fire: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(fire)).unwrap_or(Duration::ZERO)
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
    let cancel = CancelToken::new();
    shared.in_flight().insert(
        id,
        InFlight {
            job: claimed.run.job_id,
            cancel: cancel.clone(),
        },
    );
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
        let state = execute(&shared, id, claimed, cancel).await;
        // `execute` removed the run from the in-flight map before recording its end.
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
    cancel: CancelToken,
) -> Option<RunState> {
    let ClaimedRun { mut run, job } = claimed;
    let builtin = crate::builtin::is_builtin(&job.handler_type);
    let start = start_at(&run);
    // Claimed ahead (the lookahead): a plugin run is handed to the executor now, with its
    // start instant, so that its thread is ready and wakes at the fire time; a built-in
    // run, or one on a clock that does not move with real time, waits here.
    let mut not_before = None;
    if start > shared.clock.now() {
        not_before = shared.clock.instant_of(start).filter(|_| !builtin);
        if not_before.is_none() {
            shared.clock.sleep_until(start).await;
        }
    }
    // The plugin build that ran the attempt, recorded with its end.
    let mut ran_on: Option<PluginBuild> = None;
    let (event, elapsed) = if builtin {
        let begun = std::time::Instant::now();
        let result = match crate::builtin::isolation_refusal(&job.handler_type, job.isolation) {
            Some(refusal) => Err((refusal, false)),
            None => {
                crate::builtin::run(
                    &shared.store,
                    &job.handler_type,
                    &job.params_json,
                    id,
                    shared.clock.now(),
                )
                .await
            }
        };
        let event = match result {
            Ok(json) => RunEvent::Succeeded {
                result_json: Some(json),
            },
            Err((error, retryable)) => RunEvent::Failed { error, retryable },
        };
        ran_on = Some(crate::builtin::build());
        (event, Some(begun.elapsed()))
    } else {
        let target = shared
            .plugins
            .resolve(&job.handler_type)
            .and_then_target(|resolved| shared.plugins.target(&resolved.plugin, job.isolation));
        match target {
            Err(error) => {
                if not_before.is_some() {
                    // Recorded at its fire time, not before it: a run never ends early.
                    shared.clock.sleep_until(start).await;
                }
                (
                    RunEvent::Failed {
                        error,
                        retryable: false,
                    },
                    None,
                )
            }
            Ok((resolved, lease, target)) => {
                let req = RunRequest {
                    target,
                    handler: resolved.handler.name.clone(),
                    handler_type: job.handler_type.clone(),
                    params_json: job.params_json.clone(),
                    job_id: job.id.map_or_else(String::new, |j| j.to_string()),
                    job_name: job.name.to_string(),
                    run_id: id.to_string(),
                    attempt: run.attempt,
                    fire_time: run.fire_time,
                    timeout: job.timeout.or(resolved.handler.default_timeout),
                    not_before,
                };
                let logs = LogForwarder::start(shared.store.clone(), id, shared.clock.clone());
                let report = shared
                    .executor
                    .run_with_cancel(req, logs.sink(), cancel)
                    .await;
                logs.finish().await;
                if let Some(version) = lease.end() {
                    let _ = shared
                        .events
                        .send(SchedulerEvent::PluginDrained { version });
                }
                if report.started.is_some() {
                    ran_on = Some(build_of(&resolved.plugin));
                }
                let elapsed = report.started.map(|_| report.elapsed);
                (event_of(&report.outcome), elapsed)
            }
        }
    };
    // Out of the in-flight map *before* the end is recorded: a lease renewal that still sees
    // the run in the map then knows the store had it running (see `renew`). Into `finishing`
    // first, so that the renewal never sees it in neither (it would take it for an orphan).
    shared.finishing().insert(id);
    shared.in_flight().remove(&id);
    let now = shared.clock.now();
    let attempt = run.attempt;
    if let Err(e) = run.apply(event, now, &job.retry) {
        tracing::error!("run {id} cannot end its attempt {attempt}: {e}");
        // Left running in the store: the next renewal fails it as an orphan.
        shared.finishing().remove(&id);
        return None;
    }
    let mut finish = RunFinish::from_run(&run, now);
    if elapsed.is_some() {
        finish.elapsed = elapsed;
    }
    finish.plugin = ran_on;
    record_finish(shared, id, attempt, &finish).await
}

/// Records the end of an attempt. While the database is away (a transient error) the outcome
/// is kept and retried with backoff, and the run's lease is still renewed (it counts in
/// `finishing`), so no other node takes it for lost and runs it again; once recorded it is
/// final. A shutdown stops waiting after its grace period: the run then stays `running` until
/// its lease expires and it is recovered like any lost run.
async fn record_finish<S: Store>(
    shared: &Shared<S>,
    id: RunId,
    attempt: u32,
    finish: &RunFinish,
) -> Option<RunState> {
    let mut pause = Duration::from_millis(200);
    let mut waiting_since: Option<std::time::Instant> = None;
    let guard = FinishingGuard(shared, id);
    let result = loop {
        match shared
            .store
            .run_set_state_if_running(id, attempt, finish)
            .await
        {
            Ok(stored) => break Some(stored.state),
            Err(e) if e.is_retryable() => {
                let since = *waiting_since.get_or_insert_with(std::time::Instant::now);
                let grace = *shared
                    .shutdown_grace
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if shared.stopping.load(Ordering::SeqCst) && since.elapsed() >= grace {
                    tracing::warn!(
                        "gave up recording the end of run {id} attempt {attempt} at shutdown \
                         ({e}); its lease expires and it is recovered like a lost run"
                    );
                    break None;
                }
                if pause == Duration::from_millis(200) {
                    tracing::warn!(
                        "cannot record the end of run {id} attempt {attempt} yet ({e}); \
                         keeping it and retrying"
                    );
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(OUTAGE_BACKOFF_MAX);
            }
            Err(e) => {
                tracing::warn!("cannot record the end of run {id} attempt {attempt}: {e}");
                break None;
            }
        }
    };
    drop(guard);
    result
}

/// Takes a run out of `finishing` once its outcome is recorded (or given up), however
/// `record_finish` ends.
struct FinishingGuard<'a, S>(&'a Shared<S>, RunId);

impl<S> Drop for FinishingGuard<'_, S> {
    fn drop(&mut self) {
        self.0.finishing().remove(&self.1);
    }
}

/// A resolved handler with its version lease and where its call runs, or the error text
/// the run fails with.
type Resolved = (
    crate::plugins::ResolvedHandler,
    crate::plugins::RunLease,
    crate::executor::Target,
);

trait AndThenTarget {
    fn and_then_target(
        self,
        target: impl FnOnce(&crate::plugins::ResolvedHandler) -> Result<crate::executor::Target, String>,
    ) -> Result<Resolved, String>;
}

impl AndThenTarget
    for Result<
        (crate::plugins::ResolvedHandler, crate::plugins::RunLease),
        crate::plugins::ResolveError,
    >
{
    fn and_then_target(
        self,
        target: impl FnOnce(&crate::plugins::ResolvedHandler) -> Result<crate::executor::Target, String>,
    ) -> Result<Resolved, String> {
        let (resolved, lease) = self.map_err(|e| e.to_string())?;
        // A run that cannot start where it must holds no lease: `lease` ends here.
        let t = target(&resolved)?;
        Ok((resolved, lease, t))
    }
}

/// Reloads the plugins off the runtime's threads (it hashes, copies and maps files) and
/// publishes the report, and each version drained at once.
async fn reload<S>(shared: &Shared<S>) -> Result<ReloadReport, ReloadError> {
    let plugins = shared.plugins.clone();
    let report = match tokio::task::spawn_blocking(move || plugins.reload()).await {
        Ok(result) => result?,
        Err(e) => {
            tracing::error!("the plugin reload panicked: {e}");
            return Ok(ReloadReport::default());
        }
    };
    for w in &report.warnings {
        tracing::warn!("{w}");
    }
    let _ = shared.events.send(SchedulerEvent::PluginsReloaded {
        report: report.clone(),
    });
    for v in report
        .retired
        .iter()
        .filter(|v| v.state == VersionState::Drained)
    {
        let _ = shared
            .events
            .send(SchedulerEvent::PluginDrained { version: v.clone() });
    }
    Ok(report)
}

/// The plugin directory watch (see [`SchedulerConfig::plugin_watch`]): a change is acted on
/// once two polls in a row saw the same directory, so a file still being copied is not
/// loaded half-written (a truncated library would be refused anyway, and the old version
/// kept serving).
async fn watch_plugins<S: Send + Sync + 'static>(shared: Arc<Shared<S>>, every: Duration) {
    let mut last_seen = None;
    loop {
        tokio::time::sleep(every).await;
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let plugins = shared.plugins.clone();
        let Ok(Some(now)) = tokio::task::spawn_blocking(move || plugins.stamp()).await else {
            return;
        };
        let stable = last_seen.as_ref() == Some(&now);
        if stable && shared.plugins.looks_changed(&now) {
            match reload(&shared).await {
                Ok(report) if report.changed() || !report.refused.is_empty() => {
                    tracing::info!(
                        "plugin directory changed: {} loaded, {} retired, {} refused",
                        report.loaded.len(),
                        report.retired.len(),
                        report.refused.len()
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("{e}");
                    return;
                }
            }
        }
        last_seen = Some(now);
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
