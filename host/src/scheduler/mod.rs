//! The scheduling loop: claims due runs from a [`Store`], runs them on the [`Executor`] and
//! records how they ended, deciding nothing itself (functional core, imperative shell).
//!
//! # The loop
//!
//! [`Scheduler::start`] first registers this life of the node ([`Store::node_register`]: a
//! start is refused while another live process holds the node id, see [`takt_core::node`]),
//! then recovers the runs its previous life left running ([`Store::run_recover_expired`] with
//! the node id and the new life: each is failed with [`takt_core::run::NODE_RESTARTED`] and
//! retried per its job's policy by the store), then spawns the loop: one task (`shell`) that
//! owns the loop's state (`machine::Machine`). Every input — the timer, a wake (a job changed
//! through the handle, another node's change), a run's end, the lease tick, a command from
//! the handle (pause, resume, cancel, shutdown) — is one variant of `machine::Event`; the
//! synchronous `Machine::handle(event, now)` decides and answers with `machine::Step`s, which
//! the shell carries out (a store call's answer comes back as the next event). A pass:
//!
//! 1. Every [`SchedulerConfig::renew_every`]: **renew** the leases of this life's runs, which
//!    is also the node's heartbeat (a run whose lease was not renewed was recovered by another
//!    node and is stopped here; a renewal refused because another process took the node id
//!    over stops the node: [`SchedulerEvent::TakenOver`]), and **recover** any node's runs
//!    whose lease expired ([`Store::run_recover_expired`]).
//! 2. **Prepare** the due jobs ([`Store::job_due`]: the first [`SchedulerConfig::claim_batch`]
//!    in claim order, with their running and pending counts): the misfire and overlap
//!    decisions (`machine::prepare`). A pass that changed anything here prepares again.
//! 3. **Claim** with [`Store::run_claim_due`], limit = free slots (at most
//!    [`SchedulerConfig::claim_batch`]), in growing chunks (8, 16, 32, …), starting each
//!    chunk's runs before claiming the next, so the first runs of a crowded instant start
//!    without waiting for the whole batch; a backlog (the last claim was full) is claimed
//!    whole, one transaction per pass, and its next pass waits for its room to free (at
//!    most as long as the last pass took, 1–20 ms). The free part of the
//!    [`SchedulerConfig::recurring_reserve`] goes to the claim as
//!    [`takt_core::store::ClaimParams::recurring_only`], so only recurring fires take it. During a
//!    backlog of short runs the claim may also take up to [`SchedulerConfig::claim_ahead`]
//!    runs beyond the free slots, about as many as the slots finish while a pass takes; they
//!    wait in the executor's queue for a slot (their timeouts start when called). A pass that
//!    claims ahead of an instant to come may take up to [`SchedulerConfig::lookahead_batch`]
//!    (off by default) of its recurring fires beyond the free slots; they wait for the
//!    instant without a slot. A paused node ([`SchedulerHandle::pause`]) skips steps 2 and 3.
//! 4. **Sleep** until the earliest of: [`Store::next_due`] (one indexed query; of recurring
//!    fires only when the reserve is all that is free; not read after a full claim, which
//!    says that more is due now: the loop passes again at once if a slot is free), an input, the
//!    next lease renewal, or the safety poll. The due instant and renewal are waited for on
//!    the [`Clock`]; the safety poll is real time (it exists for changes other nodes make in
//!    the store). While the database is away a pass that failed waits with backoff instead.
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
//! [`Outcome`](crate::executor::Outcome) becomes a core [`RunEvent`](takt_core::run::RunEvent), [`Run::apply`](takt_core::run::Run::apply) decides the new state (and any
//! retry) at the clock's "now", and [`Store::run_set_state_if_running`] records it.
//!
//! The [`Clock`] drives scheduling only (due times, retry times, leases, recorded instants);
//! the executor measures timeouts and grace periods in real time, since it waits for real
//! threads.
//!
//! # Policies
//!
//! * Misfire: all three actions go through [`misfire::plan`](takt_core::policy::misfire::plan). Several fires kept by
//!   `fire-all` are claimed one per pass (the claim advances a job's next fire once per call);
//!   the loop passes again at once while anything is due. Catch-up is not overlap: a kept fire
//!   whose time came *before* the job's run in progress started waits its turn as a queued
//!   run ([`OverlapDecision::Wait`](takt_core::policy::OverlapDecision::Wait)), so under `skip`, `queue-one` and `cancel-running` the
//!   kept fires run one after another in fire-time order; under `allow` side by side.
//! * Overlap (counts from `job_due`, so they include other nodes' runs): only a fire whose
//!   time comes while a run of the job is in flight (running, or pending since before the
//!   fire: [`Busy::since`](takt_core::policy::Busy::since)) is an overlap. `skip` records it as skipped (reason `overlap`); a
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
mod machine;
pub mod observe;
mod run;
mod shell;
mod sink;

pub use clock::{Clock, OffsetClock, Sleep, SystemClock, TestClock};
pub use identity::new_instance;
pub use run::ORPHANED;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use takt_core::job::{JobDef, JobError, JobId, JobName};
use takt_core::node::{InstanceId, NodeInfo};
use takt_core::run::{NodeId, RunId, RunState};
use takt_core::store::{Store, StoreError, StoreErrorKind};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::executor::Executor;
use crate::plugins::{PluginSet, PluginVersion, Plugins, ReloadError, ReloadReport, VersionState};
use crate::worker::WorkerStats;
use machine::{Command, Event, Machine};
use observe::{NoObserver, Observer};

/// The shortest accepted safety poll.
pub const MIN_SAFETY_POLL: Duration = Duration::from_millis(50);
/// The longest accepted safety poll.
pub const MAX_SAFETY_POLL: Duration = Duration::from_secs(60);
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
    /// The most runs this node runs at once (0 is read as 1), besides its
    /// `recurring_reserve`.
    pub capacity: usize,
    /// Slots beyond `capacity` that only fires of recurring jobs take
    /// ([`takt_core::store::ClaimedRun::recurring_fire`]: cron, calendar and interval
    /// schedules and triggers of such jobs; not retries, queued, backfilled or one-off runs).
    /// A backlog of long one-offs or retries that fills the capacity thus never delays a
    /// schedule: the claim's fairness share decides among what is due, the reserve keeps
    /// room to start it. Recurring fires use the reserve first, then the capacity, so at
    /// most `capacity + recurring_reserve` runs run at once and at most `capacity` that are
    /// not recurring fires. Default 1; 0 makes `capacity` the one limit for every run. The
    /// executor given to the scheduler needs room for both ([`SchedulerConfig::slots`]).
    pub recurring_reserve: usize,
    /// How long a claim holds a run before another node may recover it (seed 000 §7: 60 s).
    pub lease: Duration,
    /// How often this node renews its leases (seed 000 §7: every 30 s) and recovers other
    /// nodes' expired ones. Clamped below `lease / 2`, so that one late renewal never loses a
    /// lease.
    pub renew_every: Duration,
    /// Real-time upper bound on a sleep, for changes made by other nodes; clamped to
    /// [`MIN_SAFETY_POLL`]..=[`MAX_SAFETY_POLL`].
    pub safety_poll: Duration,
    /// The most runs one claim takes (0 is read as 1), and how many due jobs a pass
    /// prepares (misfire and overlap). Default 64, [`DEFAULT_CLAIM_BATCH`].
    pub claim_batch: usize,
    /// The most runs claimed beyond the slots while a backlog of short runs drains (default
    /// 64, [`DEFAULT_CLAIM_AHEAD`]; 0: never more than the slots). Such a run waits in the executor's queue for a
    /// slot, and its timeout starts when its plugin is called, not at its claim.
    ///
    /// Why: a drain's passes cost the same whatever they claim (`job_due` and a claim
    /// transaction), so with claims bounded by the capacity a node of 10 slots running short
    /// runs spends most of its time claiming ten at a time (B5 on PostgreSQL, capacity 10:
    /// 2 400 runs/s, against 4 000 when a claim may take 32).
    ///
    /// How much is claimed ahead is not this bound alone: only during a backlog (the last
    /// claim was full), and only as many runs as the slots are expected to finish while one
    /// pass takes (`capacity × last pass ÷ mean run time`, the mean over the runs that
    /// ended lately). So a claimed run waits for a slot about one pass (milliseconds), and
    /// long runs are never claimed ahead: they would wait a whole run for a slot here while
    /// another node may have one free, and a stop would cancel them unstarted. The price:
    /// a run claimed ahead is `running` in the store and its attempt's start recorded at its
    /// claim, up to that wait before its plugin is called, and a node whose recent runs were
    /// short may claim a long run ahead behind them.
    pub claim_ahead: usize,
    /// How long before a fire is due the loop decides it (misfire and overlap) and claims
    /// it; the claimed run is handed to the executor at once, takes its slot and a thread
    /// just before the fire time (`executor::PERMIT_AHEAD`), and the thread, ready, starts
    /// the plugin at the fire time. The claim's transaction and the hand-over are thus off
    /// the fire's critical path: on SQLite a second's 100 fires otherwise start only as
    /// their claims commit, one after another (B4). The price: the overlap decision and a
    /// disable or schedule change made within this window before a fire see the state of
    /// the window's start. Default 25 ms; at most [`MAX_LOOKAHEAD`]; zero claims at the
    /// instant.
    pub lookahead: Duration,
    /// The most recurring fires claimed ahead of their fire time beyond the free slots
    /// (default [`DEFAULT_LOOKAHEAD_BATCH`], 0: off — a fire claimed ahead takes a slot, as
    /// any run; config `lookahead_batch`, `TAKT_LOOKAHEAD_BATCH`).
    ///
    /// Why: an instant at which more fires are due than the node has slots (B6: 1 000
    /// every-second crons on 64 slots) was claimed after it came, one claim of at most
    /// `claim_batch` after another, each waiting for the slots the last one filled; its
    /// last fires started a whole chain of claims late (~100–200 ms on PostgreSQL). Now such
    /// an instant's fires are claimed before it, up to this many beyond the slots: they wait
    /// on this node without a slot or a thread until shortly before their time
    /// (`executor::PERMIT_AHEAD`), then queue for a slot, and start as the slots free.
    /// Quartz has the same window (`batchTriggerAcquisitionFireAheadTimeWindow`) but claims
    /// within its free threads; this goes beyond the slots, which is why it is bounded by
    /// short runs: no more are claimed ahead than the slots finish within the window at the
    /// node's mean run time (as [`SchedulerConfig::claim_ahead`]), so a long run is never
    /// claimed ahead of a slot.
    ///
    /// The window widens with the crowd: a crowded instant's claims begin `lookahead` plus
    /// as long as the last crowded instant's claims took (at most [`MAX_LOOKAHEAD`]) before
    /// it, so that they end about `lookahead` before it. The price is `lookahead`'s, over
    /// that wider window: the overlap decision, a disable or a schedule change made within
    /// it see the state of its start, and a run claimed in it that was due already (a late
    /// fire, a one-off) records the instant as its start, up to the window after it began.
    /// An instant claimed in one claim widens it by that claim's time only (milliseconds).
    pub lookahead_batch: usize,
    /// Watch the plugin directory: poll it this often (the files' size and modification
    /// time) and reload the plugins once a change has held still for one poll (a copy in
    /// progress is not loaded half-written). `None` (the default): reload only when asked
    /// ([`SchedulerHandle::reload_plugins`]). At least [`MIN_PLUGIN_WATCH`].
    pub plugin_watch: Option<Duration>,
}

/// The default [`SchedulerConfig::claim_ahead`]: room for a whole default claim batch
/// beyond the slots, so that a pass starts while the runs of the last claim still wait for
/// their slots and its claim overlaps them (B5 on PostgreSQL, capacity 10, claim batch 32:
/// 4 400–5 500 runs/s with 32, 6 400–7 000 with 64, no more with 128).
pub const DEFAULT_CLAIM_AHEAD: usize = 64;

/// The default [`SchedulerConfig::claim_batch`]: as many as [`DEFAULT_CLAIM_AHEAD`], so that
/// during a backlog one claim can fill what the runs claimed ahead leave free. Each claim is
/// a transaction whose fixed cost (its round trips, its COMMIT, the pass's `job_due`) is
/// paid per batch: B5 on PostgreSQL, capacity 10, 6 400–6 800 runs/s with 32 and
/// 7 200–7 300 with 64 (no more with 128). A crowded instant outside a backlog is still
/// claimed in growing chunks from 8, so the first runs do not wait for the whole batch.
pub const DEFAULT_CLAIM_BATCH: usize = 64;

/// The default [`SchedulerConfig::lookahead_batch`]: off. With several nodes, the node that
/// claims an instant first would take all of its fires (beyond its slots) while the others
/// wait for the next, and a crash of that node would delay them all by a lease; with it off,
/// each node claims within its slots and the nodes share a crowded instant. A single node
/// with crowded instants of short runs (B6: 1 000 every-second crons) turns it on (1024).
pub const DEFAULT_LOOKAHEAD_BATCH: usize = 0;

/// The shortest accepted [`SchedulerConfig::plugin_watch`].
pub const MIN_PLUGIN_WATCH: Duration = Duration::from_millis(100);

/// The largest [`SchedulerConfig::lookahead`] accepted (larger values are clamped).
pub const MAX_LOOKAHEAD: Duration = Duration::from_millis(500);

impl SchedulerConfig {
    /// Defaults for `node`: capacity 8 and 1 slot reserved for recurring fires, 60 s lease
    /// renewed every 30 s (seed 000 §7; clamped to just under half the lease), 1 s safety
    /// poll, batches of 32, up to 64 short runs claimed ahead of a slot during a backlog,
    /// fires claimed 25 ms ahead.
    pub fn new(node: NodeId) -> SchedulerConfig {
        SchedulerConfig {
            node,
            instance: new_instance(),
            takeover: false,
            host_name: crate::config::host_name(),
            tags: Vec::new(),
            capacity: 8,
            recurring_reserve: 1,
            lease: Duration::from_secs(60),
            renew_every: Duration::from_secs(30),
            safety_poll: Duration::from_secs(1),
            claim_batch: DEFAULT_CLAIM_BATCH,
            claim_ahead: DEFAULT_CLAIM_AHEAD,
            lookahead: Duration::from_millis(25),
            lookahead_batch: DEFAULT_LOOKAHEAD_BATCH,
            plugin_watch: None,
        }
    }
}

impl SchedulerConfig {
    /// The most runs at once: `capacity` (0 read as 1) + `recurring_reserve` — what the
    /// executor must have room for.
    pub fn slots(&self) -> usize {
        self.capacity.max(1).saturating_add(self.recurring_reserve)
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

/// The scheduling loop, before it starts.
pub struct Scheduler<S> {
    config: SchedulerConfig,
    store: S,
    plugins: Arc<Plugins>,
    executor: Executor,
    clock: Arc<dyn Clock>,
    events: broadcast::Sender<SchedulerEvent>,
    observer: Arc<dyn Observer>,
}

impl<S: Store + Clone + 'static> Scheduler<S> {
    /// Tells `observer` what the loop does as it happens (attempt ends, skips, claims, store
    /// failures, outages): what `/metrics` counts ([`crate::metrics::Metrics`]). None by
    /// default.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Scheduler<S> {
        self.observer = observer;
        self
    }

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
            observer: Arc::new(NoObserver),
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
        let ctx = Arc::new(Ctx {
            config: self.config,
            store: self.store,
            plugins: self.plugins,
            executor: self.executor,
            clock: self.clock,
            events: self.events,
            observer: self.observer,
        });
        let (stop, stopping) = watch::channel(None);
        let stop_seen = stopping.clone();
        let watch = ctx
            .config
            .plugin_watch
            .map(|every| tokio::spawn(watch_plugins(ctx.clone(), every, stopping)));
        let (inputs, inputs_rx) = mpsc::unbounded_channel();
        let running = Arc::new(AtomicUsize::new(0));
        let passes = Arc::new(AtomicU64::new(0));
        let shell = shell::Shell {
            ctx: ctx.clone(),
            machine: Machine::new(ctx.config.clone(), now),
            inputs: inputs_rx,
            running: running.clone(),
            passes: passes.clone(),
            stop,
            watch,
            _live: identity::LiveHere::new(ctx.config.instance.clone()),
        };
        let controls = tokio::spawn(obey_store_controls(
            ctx.clone(),
            inputs.clone(),
            stop_seen.clone(),
        ));
        let task = tokio::spawn(async move {
            shell.run().await;
            controls.abort();
        });
        Ok(SchedulerHandle {
            ctx,
            inputs,
            running,
            passes,
            paused: Arc::new(AtomicBool::new(false)),
            task: Arc::new(tokio::sync::Mutex::new(Some(task))),
        })
    }
}

/// What the loop's tasks and the handle share: the services, none of the loop's state (that
/// is the machine's, in the loop's one task).
struct Ctx<S> {
    config: SchedulerConfig,
    store: S,
    plugins: Arc<Plugins>,
    executor: Executor,
    clock: Arc<dyn Clock>,
    events: broadcast::Sender<SchedulerEvent>,
    observer: Arc<dyn Observer>,
}

/// Controls a started [`Scheduler`]. Cheap to clone. Dropping every handle does not stop the
/// loop (it ends with its tokio runtime); call [`shutdown`](SchedulerHandle::shutdown).
pub struct SchedulerHandle<S> {
    ctx: Arc<Ctx<S>>,
    /// The loop's inputs: wakes and commands.
    inputs: mpsc::UnboundedSender<shell::Input>,
    /// How many runs the loop has in flight, as it last published.
    running: Arc<AtomicUsize>,
    /// Events the loop has handled ([`SchedulerHandle::loop_passes`]).
    passes: Arc<AtomicU64>,
    /// The pause as this handle last asked it (the loop obeys the command it was sent).
    paused: Arc<AtomicBool>,
    task: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl<S> Clone for SchedulerHandle<S> {
    fn clone(&self) -> Self {
        SchedulerHandle {
            ctx: self.ctx.clone(),
            inputs: self.inputs.clone(),
            running: self.running.clone(),
            passes: self.passes.clone(),
            paused: self.paused.clone(),
            task: self.task.clone(),
        }
    }
}

impl<S: Store + Clone + 'static> SchedulerHandle<S> {
    /// Validates and stores a new job with its first fire (the first firing occurrence after
    /// now; `None` for a manual job) and wakes the loop. Returns the stored job.
    pub async fn add_job(&self, mut job: JobDef) -> Result<JobDef, SchedulerError> {
        job.validate()?;
        crate::dynparams::check_job(&job).map_err(StoreError::invalid)?;
        let now = self.ctx.clock.now();
        job.next_fire = job.first_fire_after(now);
        let stored = self.ctx.store.job_insert(&job, now).await?;
        self.wake();
        Ok(stored)
    }

    /// Replaces a job (compare-and-set on `job.version`: a stale version is a
    /// [`StoreErrorKind::Conflict`]) and wakes the loop. When the schedule changed, the next
    /// fire is recomputed from now; otherwise the stored one is kept. Takes effect at once.
    pub async fn update_job(&self, mut job: JobDef) -> Result<JobDef, SchedulerError> {
        job.validate()?;
        crate::dynparams::check_job(&job).map_err(StoreError::invalid)?;
        let id = job
            .id
            .ok_or_else(|| SchedulerError::NoId(job.name.clone()))?;
        let now = self.ctx.clock.now();
        let old = self
            .ctx
            .store
            .job_get(id)
            .await?
            .ok_or(SchedulerError::JobNotFound(id))?;
        // A new schedule or validity window starts from now (inside the window).
        job.next_fire = if old.schedule == job.schedule
            && old.effective_from == job.effective_from
            && old.expires_at == job.expires_at
        {
            old.next_fire
        } else {
            job.first_fire_after(now)
        };
        let stored = self.ctx.store.job_update(&job, now).await?;
        self.wake();
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
        let store = &self.ctx.store;
        let now = self.ctx.clock.now();
        if enabled {
            let job = store
                .job_get(id)
                .await?
                .ok_or(SchedulerError::JobNotFound(id))?;
            // A paused job keeps its next fire aside: its resume decides.
            if !job.enabled && job.schedule.is_some() && store.job_paused(id).await?.is_none() {
                let next = job.first_fire_after(now);
                if next != job.next_fire {
                    store.job_set_next_fire(id, job.next_fire, next).await?;
                }
            }
        }
        let job = store.job_set_enabled(id, enabled, now).await?;
        self.wake();
        Ok(job)
    }

    /// Runs a job now, by hand. The run is keyed like a scheduled fire, with the fire time
    /// **now truncated to the second**: the job's next fire is set to that instant (a
    /// compare-and-set) and the loop claims it, after which the claim moves the next fire back
    /// onto the schedule. So a job runs at most once per second by hand, and a trigger in the
    /// same second as a scheduled fire is that fire. A disabled job is not run. Returns the
    /// fire time.
    pub async fn trigger(&self, id: JobId) -> Result<Timestamp, SchedulerError> {
        let store = &self.ctx.store;
        let now = self.ctx.clock.now();
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
        self.wake();
        Ok(fire)
    }

    /// Removes a job with its runs and their logs. A run of it that this node is executing is
    /// cancelled first (its end can no longer be recorded); a run on another node finds the
    /// job gone when it ends.
    pub async fn remove_job(&self, id: JobId) -> Result<(), SchedulerError> {
        self.ask(Command::CancelJob { job: id }).await;
        match self.ctx.store.job_delete(id).await {
            Ok(()) => {}
            Err(e) if e.kind() == StoreErrorKind::NotFound => {
                return Err(SchedulerError::JobNotFound(id));
            }
            Err(e) => return Err(e.into()),
        }
        self.wake();
        Ok(())
    }

    /// Asks a run this node is executing to stop: it ends `cancelled` (reason requested) once
    /// the plugin returns or the grace period passes, and `why` goes into its log. Returns
    /// whether this node was running it (a run on another node is not reachable from here).
    pub async fn cancel_run(&self, id: RunId, why: &str) -> bool {
        self.ask(Command::CancelRun {
            run: id,
            why: why.to_string(),
        })
        .await
    }

    /// Sends a command and waits for the loop's answer (false when the loop has ended).
    async fn ask(&self, command: Command) -> bool {
        let (reply, answer) = oneshot::channel();
        if self
            .inputs
            .send((Event::Command(command), Some(reply)))
            .is_err()
        {
            return false;
        }
        answer.await.unwrap_or(false)
    }

    /// Sends an input that needs no answer (dropped when the loop has ended).
    fn send(&self, event: Event) {
        let _ = self.inputs.send((event, None));
    }

    /// Stops this node from claiming (scheduled fires, retries, triggers) until
    /// [`resume`](Self::resume); runs in flight go on. For a maintenance window (a plugin
    /// swap needs none: see [`reload_plugins`](Self::reload_plugins)). Jobs keep
    /// their schedules, so fires due while paused are misfires when the pause outlasts their
    /// lateness window, handled per each job's misfire policy (other nodes keep claiming).
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        self.send(Event::Command(Command::Pause));
    }

    /// Makes the loop pass at once: something changed elsewhere that may be due sooner than
    /// it planned (another node's or a command's change, as PostgreSQL's `LISTEN` reports it:
    /// see `PgStore::listen`). Cheap, and harmless when nothing changed.
    pub fn wake(&self) {
        self.send(Event::Wake);
    }

    /// Undoes [`pause`](Self::pause).
    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
        self.send(Event::Command(Command::Resume));
    }

    /// Whether this node is paused.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// A receiver of run events from now on (a slow receiver loses the oldest: see
    /// [`broadcast`]).
    pub fn subscribe(&self) -> broadcast::Receiver<SchedulerEvent> {
        self.ctx.events.subscribe()
    }

    /// This node's id and the life of it this scheduler registered ([`takt_core::node`]):
    /// what its runs record.
    pub fn node(&self) -> (&NodeId, &InstanceId) {
        (&self.ctx.config.node, &self.ctx.config.instance)
    }

    /// How many events the scheduling loop has handled (its own timers, wakes, run ends,
    /// store answers; through the drain too): a liveness signal for a watchdog. A live loop
    /// advances at least every [`SchedulerConfig::safety_poll`] and soon after every
    /// [`wake`](Self::wake); a loop stuck in a call that never returns does not, and neither
    /// does one that has ended.
    pub fn loop_passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Runs of this node in flight: claimed and not ended. During a backlog of short runs
    /// up to [`SchedulerConfig::claim_ahead`] of them wait for a slot, and up to
    /// [`SchedulerConfig::lookahead_batch`] fires of an instant to come wait for it, so this
    /// may exceed [`SchedulerConfig::slots`].
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Reloads the plugin directory (see [`Plugins::reload`]): changed files are checked like
    /// at start and loaded beside the old versions, new runs go to the new versions, running
    /// runs finish on the old ones, which drain. Also published as
    /// [`SchedulerEvent::PluginsReloaded`] (and [`SchedulerEvent::PluginDrained`] for versions
    /// that had no run left).
    pub async fn reload_plugins(&self) -> Result<ReloadReport, ReloadError> {
        reload(&self.ctx).await
    }

    /// Every plugin version serving or draining, with its runs in flight and workers.
    pub fn plugin_versions(&self) -> Vec<PluginVersion> {
        self.ctx.plugins.versions()
    }

    /// The plugins serving now, and the files refused.
    pub fn plugins(&self) -> Arc<PluginSet> {
        self.ctx.plugins.current()
    }

    /// The store this scheduler records in (the HTTP API reads and writes through it, with
    /// the same rules as the loop).
    pub fn store(&self) -> &S {
        &self.ctx.store
    }

    /// This node's capacity (the most runs at once besides its recurring reserve).
    pub fn capacity(&self) -> usize {
        self.ctx.config.capacity
    }

    /// The slots beyond the capacity that only recurring fires take
    /// ([`SchedulerConfig::recurring_reserve`]).
    pub fn recurring_reserve(&self) -> usize {
        self.ctx.config.recurring_reserve
    }

    /// The executor's counters (abandoned and killed calls).
    pub fn executor_stats(&self) -> crate::executor::ExecutorStats {
        self.ctx.executor.stats()
    }

    /// The worker processes' counters, when the host has workers.
    pub fn worker_stats(&self) -> Option<WorkerStats> {
        self.ctx.plugins.worker_stats()
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
        self.send(Event::Command(Command::Shutdown { grace }));
        let task = self.task.lock().await.take();
        if let Some(task) = task
            && let Err(e) = task.await
        {
            tracing::error!("scheduling loop ended abnormally: {e}");
        }
    }
}

fn floor_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// Reloads the plugins off the runtime's threads (it hashes, copies and maps files) and
/// publishes the report, and each version drained at once.
async fn reload<S>(shared: &Ctx<S>) -> Result<ReloadReport, ReloadError> {
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
/// How often a node reads its own pause and its runs' cancel requests from the store.
const CONTROLS_EVERY: Duration = Duration::from_secs(1);

/// What other processes ask of this node through the store, obeyed about every second: its
/// pause (`Store::pause` of the node, e.g. `takt node pause`; the claim of a paused node
/// returns nothing anyway — the rule is the engine's —, this also stops its decisions) and
/// the cancel requests of its running runs (`Store::run_cancel` from any node or command;
/// each such run ends `cancelled`, its log naming who asked). Fed to the loop as the same
/// commands the handle sends. A store pause ends only what a store pause began, so a pause
/// through the handle stays.
async fn obey_store_controls<S: Store + 'static>(
    ctx: Arc<Ctx<S>>,
    inputs: mpsc::UnboundedSender<shell::Input>,
    stopping: watch::Receiver<Option<Duration>>,
) {
    let mut paused_by_store = false;
    let mut asked = std::collections::HashSet::new();
    loop {
        tokio::time::sleep(CONTROLS_EVERY).await;
        if stopping.borrow().is_some() {
            return;
        }
        match ctx.store.node_paused(&ctx.config.node).await {
            Ok(p) if p.is_some() != paused_by_store => {
                paused_by_store = p.is_some();
                let command = if paused_by_store {
                    tracing::info!("node {} paused in the store", ctx.config.node);
                    Command::Pause
                } else {
                    tracing::info!("node {} resumed in the store", ctx.config.node);
                    Command::Resume
                };
                if inputs.send((Event::Command(command), None)).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("cannot read this node's pause: {e}"),
        }
        let requests = match ctx.store.cancel_requests(&ctx.config.node).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("cannot read cancel requests: {e}");
                continue;
            }
        };
        asked.retain(|id| requests.iter().any(|r| r.run == *id));
        for r in requests {
            if asked.insert(r.run) {
                let why = format!("{} asked at {}", r.by, r.at);
                let command = Command::CancelRun { run: r.run, why };
                if inputs.send((Event::Command(command), None)).is_err() {
                    return;
                }
            }
        }
    }
}

async fn watch_plugins<S: Send + Sync + 'static>(
    shared: Arc<Ctx<S>>,
    every: Duration,
    stopping: watch::Receiver<Option<Duration>>,
) {
    let mut last_seen = None;
    loop {
        tokio::time::sleep(every).await;
        if stopping.borrow().is_some() {
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
