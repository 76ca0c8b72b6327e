//! The plugin-call executor: runs one handler call on a host-owned thread, under a deadline,
//! with bounded concurrency, and turns whatever happens into an [`Outcome`].
//!
//! # Why a thread per call, and what "timeout" can and cannot mean
//!
//! A plugin is native code in our process. Nothing can safely stop a thread that is inside it,
//! so a timeout is a *request*: the host raises the run's cancel flag (which also wakes a
//! `ctx.sleep` at once, and makes the SDK drop an async handler's future), waits a grace period,
//! and then **stops waiting**. The run is recorded `timed_out` either way; `stopped` says
//! whether the plugin honoured the request. A plugin that ignores it keeps its thread until it
//! returns on its own; the executor counts such *abandoned* threads
//! ([`Executor::abandoned_threads`] ever, [`Executor::abandoned_threads_alive`] now) so an
//! operator can see a misbehaving plugin, and the isolated (child-process) mode is the cure.
//!
//! Each call has a `std::thread` of its own for as long as it runs, never a slot of a bounded
//! pool or tokio's `spawn_blocking`: an abandoned thread must not hold a slot hostage (tokio's
//! blocking pool would also delay runtime shutdown on it). Threads are *reused* between calls
//! (`pool`: an idle `takt-run` thread takes the next call, a new one is started when none is
//! idle, idle ones exit after a while), because creating one cost more than a whole no-op run
//! (46 µs, B3).
//!
//! # Concurrency
//!
//! [`ExecutorConfig::capacity`] bounds the calls the host is *waiting for*. A call waits for a
//! slot before it starts; that wait does not count against its timeout (the deadline starts
//! when the plugin is called, and [`RunReport::queued`] says how long it waited). When the
//! host abandons a call, its slot is released at once — otherwise one stuck plugin would eat
//! capacity until the process restarts. The price is that the number of *threads* inside
//! plugins can exceed the capacity by the number of abandoned threads still alive; that gauge
//! is exported for exactly this reason.
//!
//! # Shutdown is not a timeout
//!
//! [`Executor::shutdown`] raises every running call's cancel flag with reason
//! [`CancelReason::Shutdown`] and refuses new calls; those runs end as
//! `Cancelled { reason: Shutdown }`, never `TimedOut` (seed 003 §3.3: one cancellation
//! exception for both made every service stop look like a wave of timeouts).

mod cancel;
mod outcome;
mod pool;
mod services;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use takt_plugin_api::abi::{ErrorKind, PluginError, PluginRef};

use crate::worker::WorkerPool;
use takt_plugin_api::host::{self, CallInfo};
use tokio::sync::{Semaphore, oneshot, watch};

pub use cancel::CancelToken;
pub use outcome::{CancelReason, Outcome, RunReport};
pub use services::{LogLimits, RunSink};

use services::StopReason;
pub(crate) use services::{CallState, WorkerControl, interruptible_sleep, truncate_within};

/// How an [`Executor`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// The most plugin calls the host waits for at once; more wait for a slot. 0 is read as 1
    /// (an executor that can never run anything is a configuration mistake, not a policy).
    pub capacity: usize,
    /// How long the host keeps waiting after raising a run's cancel flag (timeout or cancel)
    /// before it gives up on the thread. A shutdown may choose its own grace.
    pub grace: Duration,
    /// Bounds on each run's log.
    pub log_limits: LogLimits,
}

impl Default for ExecutorConfig {
    /// Capacity 8, a 5 s grace, default log limits.
    fn default() -> ExecutorConfig {
        ExecutorConfig {
            capacity: 8,
            grace: Duration::from_secs(5),
            log_limits: LogLimits::default(),
        }
    }
}

/// Where a call runs.
#[derive(Clone)]
pub enum Target {
    /// In this process, through the loaded module.
    InProcess(PluginRef),
    /// In a worker process of this plugin version's pool ([`crate::worker`]): a crash fails
    /// only this run, and a call that ignores its cancel is killed with its worker.
    Worker(Arc<WorkerPool>),
}

impl From<PluginRef> for Target {
    fn from(module: PluginRef) -> Target {
        Target::InProcess(module)
    }
}

/// One plugin call to make.
///
/// The executor does not resolve anything: the caller (the scheduling loop) has already
/// resolved the HandlerType to a loaded plugin and decided the timeout (the job's, else the
/// handler's default, else none).
#[derive(Clone)]
pub struct RunRequest {
    /// Where the plugin runs.
    pub target: Target,
    /// The handler's name inside the plugin (`clean_expired_tokens`).
    pub handler: String,
    /// The full HandlerType (`examples::clean_expired_tokens`), for messages and thread names.
    pub handler_type: String,
    /// The job's parameters; empty means `{}` to the SDK.
    pub params_json: String,
    /// The job's id.
    pub job_id: String,
    /// The job's name.
    pub job_name: String,
    /// The run's id.
    pub run_id: String,
    /// 1 for the first attempt, 2 for the first retry, …
    pub attempt: u32,
    /// The scheduled fire time the run is for (not the moment it starts).
    pub fire_time: jiff::Timestamp,
    /// How long the plugin may run, from the moment it is called; `None` for no limit.
    pub timeout: Option<Duration>,
    /// The earliest instant the plugin may be called; `None` (or a past instant) for at once.
    ///
    /// The scheduler claims a due instant's fires a little ahead
    /// ([`SchedulerConfig::lookahead`](crate::scheduler::SchedulerConfig::lookahead)) and hands
    /// each run over at once with its start instant: the slot, the thread and the log path are
    /// ready before the fire time, and the thread's precise OS sleep ends at it, so a hundred
    /// fires of one second start together instead of one after another (B4). The wait is not
    /// part of the timeout, and a cancel or a shutdown during it ends the run without calling
    /// the plugin.
    pub not_before: Option<Instant>,
}

impl std::fmt::Debug for RunRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `PluginRef` has no `Debug`; the HandlerType names the plugin anyway.
        f.debug_struct("RunRequest")
            .field("handler_type", &self.handler_type)
            .field("isolated", &matches!(self.target, Target::Worker(_)))
            .field("params_json", &self.params_json)
            .field("job_id", &self.job_id)
            .field("job_name", &self.job_name)
            .field("run_id", &self.run_id)
            .field("attempt", &self.attempt)
            .field("fire_time", &self.fire_time)
            .field("timeout", &self.timeout)
            .field("not_before", &self.not_before)
            .finish_non_exhaustive()
    }
}

/// A point-in-time view of the executor's gauges and counters, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecutorStats {
    /// Calls the host is currently waiting for (at most the capacity).
    pub running: usize,
    /// Calls abandoned since the executor was created (the plugin ignored a cancel for longer
    /// than the grace period).
    pub abandoned_total: usize,
    /// Abandoned threads that are still inside their plugin.
    pub abandoned_alive: usize,
    /// Isolated calls whose worker process was killed because the call ignored its cancel
    /// for the grace period (nothing of them runs on, so nothing is abandoned).
    pub killed_total: usize,
}

/// Runs plugin calls. Cheap to clone: clones share capacity, counters and shutdown state.
#[derive(Clone)]
pub struct Executor {
    shared: Arc<Shared>,
}

struct Shared {
    permits: Semaphore,
    capacity: u32,
    grace: Duration,
    limits: LogLimits,
    /// `Some(grace)` once a shutdown began; a `watch` so that every waiting run sees it, even
    /// one that subscribes after it was sent.
    shutdown: watch::Sender<Option<Duration>>,
    running: AtomicUsize,
    abandoned_total: AtomicUsize,
    killed_total: AtomicUsize,
    /// Shared with the call threads, which decrement it when an abandoned call finally returns.
    abandoned_alive: Arc<AtomicUsize>,
    /// The call threads, reused between calls (see `pool`).
    threads: Arc<pool::Pool>,
}

/// How long before its start ([`RunRequest::not_before`]) a run handed over ahead takes its
/// slot and its thread, which then sleeps precisely until the start (an OS sleep, not the
/// runtime's millisecond timer): long enough that a slot is ready when the instant comes
/// (B4: a second's fires start within a few milliseconds of it), short enough that fires
/// claimed far ahead do not hold slots that runs due now could use.
pub const PERMIT_AHEAD: Duration = Duration::from_millis(10);

/// What the call's thread hands back.
type CallResult = Result<String, PluginError>;

impl Executor {
    /// An executor with `config`.
    pub fn new(config: ExecutorConfig) -> Executor {
        // `acquire_many` counts in u32, and the semaphore has its own ceiling (lower on 32-bit).
        let ceiling = Semaphore::MAX_PERMITS.min(u32::MAX as usize);
        let capacity = config.capacity.clamp(1, ceiling) as u32;
        Executor {
            shared: Arc::new(Shared {
                permits: Semaphore::new(capacity as usize),
                capacity,
                grace: config.grace,
                limits: config.log_limits,
                shutdown: watch::Sender::new(None),
                running: AtomicUsize::new(0),
                abandoned_total: AtomicUsize::new(0),
                killed_total: AtomicUsize::new(0),
                abandoned_alive: Arc::new(AtomicUsize::new(0)),
                threads: pool::Pool::new(capacity as usize),
            }),
        }
    }

    /// Runs `req` and returns when the plugin returned or the host stopped waiting for it.
    ///
    /// The same as [`run_with_cancel`](Self::run_with_cancel) with a token nobody else holds.
    pub async fn run(&self, req: RunRequest, sink: Arc<dyn RunSink>) -> RunReport {
        self.run_with_cancel(req, sink, CancelToken::new()).await
    }

    /// Runs `req`; cancelling `cancel` stops it with [`CancelReason::Requested`].
    ///
    /// Waits for a slot first (cancel and shutdown end that wait too, without calling the
    /// plugin), then calls the plugin on a new thread. Whichever comes first of the plugin's
    /// answer, the deadline, the cancel and a shutdown decides the outcome; the host then waits
    /// the grace period for the plugin to notice the cancel flag.
    ///
    /// Dropping the returned future while the plugin runs raises the cancel flag and abandons
    /// the call (it is counted as abandoned), so a caller that gives up cannot leak a run
    /// nobody will ever cancel.
    pub async fn run_with_cancel(
        &self,
        mut req: RunRequest,
        sink: Arc<dyn RunSink>,
        cancel: CancelToken,
    ) -> RunReport {
        let shared = &*self.shared;
        let mut queued_at = Instant::now();
        let mut shutdown = shared.shutdown.subscribe();

        let refused = |outcome: Outcome, queued_at: Instant| RunReport {
            outcome,
            started: None,
            elapsed: Duration::ZERO,
            queued: queued_at.elapsed(),
            log_lines_dropped: 0,
        };

        // Handed over well ahead of its start: wait for it here, holding no slot, until
        // `PERMIT_AHEAD` before it (a crowded instant's fires, claimed ahead beyond the
        // slots, must not keep the slots from runs due now while they wait).
        if let Some(at) = req
            .not_before
            .and_then(|at| at.checked_sub(PERMIT_AHEAD))
            .filter(|at| *at > queued_at)
        {
            tokio::select! {
                biased;
                grace = shutdown_grace(&mut shutdown) => {
                    return refused(not_called(Stop::Shutdown(grace), &req), queued_at);
                }
                () = cancel.cancelled() => {
                    return refused(not_called(Stop::Requested, &req), queued_at);
                }
                () = tokio::time::sleep_until(at.into()) => {}
            }
            queued_at = Instant::now();
        }

        // Biased towards refusing: a run that is already cancelled must not start just because
        // a slot happened to be free.
        let _permit = tokio::select! {
            biased;
            grace = shutdown_grace(&mut shutdown) => {
                return refused(not_called(Stop::Shutdown(grace), &req), queued_at);
            }
            () = cancel.cancelled() => {
                return refused(not_called(Stop::Requested, &req), queued_at);
            }
            permit = shared.permits.acquire() => match permit {
                Ok(permit) => permit,
                Err(_closed) => {
                    return refused(not_called(Stop::Shutdown(shared.grace), &req), queued_at);
                }
            },
        };
        let queued = queued_at.elapsed();

        // The call starts now, or at `not_before` when the run was handed over ahead.
        let now = Instant::now();
        let wait_until = req.not_before.filter(|at| *at > now);
        let t0 = wait_until.unwrap_or(now);
        let started = jiff::Timestamp::now()
            .checked_add(t0 - now)
            .unwrap_or_else(|_| jiff::Timestamp::now());
        let mut state = CallState::new(sink, shared.limits, wait_until.is_some());
        if matches!(req.target, Target::Worker(_)) {
            state = state.isolated();
        }
        let state = Arc::new(state);
        let deadline = req.timeout.and_then(|t| t0.checked_add(t));
        let deadline_unix_ms = match req.timeout {
            Some(t) => started
                .as_millisecond()
                .saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            None => 0,
        };

        let (tx, mut rx) = oneshot::channel::<CallResult>();
        if let Err(e) = spawn_call(
            &mut req,
            wait_until,
            deadline_unix_ms,
            state.clone(),
            shared,
            tx,
        ) {
            // Out of threads or memory: the host's problem, not the plugin's; worth a retry.
            let dropped = state.close_log();
            return RunReport {
                outcome: Outcome::Failed {
                    kind: ErrorKind::FAILED,
                    message: format!("cannot start a thread for {}: {e}", req.handler_type),
                    retryable: true,
                    data: None,
                },
                started: None,
                elapsed: Duration::ZERO,
                queued,
                log_lines_dropped: dropped,
            };
        }
        let in_flight = InFlight::new(shared, state.clone(), &req);

        let stop = tokio::select! {
            // The answer first: a plugin that returns in the same instant as the deadline
            // has made it.
            biased;
            answer = &mut rx => {
                let outcome = finished_outcome(answer, &req.handler_type);
                return in_flight.finish(outcome, started, t0, queued);
            }
            () = until(deadline) => Stop::Timeout,
            () = cancel.cancelled() => Stop::Requested,
            grace = shutdown_grace(&mut shutdown) => Stop::Shutdown(grace),
        };

        if state.try_refuse() {
            // Stopped while its thread waited for the start instant: the plugin is never
            // called; the cancel wakes the thread, which then returns to the pool.
            state.cancel(stop.reason());
            return in_flight.refused(refused(not_called(stop, &req), queued_at));
        }
        state.cancel(stop.reason());
        let grace = match stop {
            Stop::Shutdown(grace) => grace,
            _ => shared.grace,
        };
        let answer = match tokio::time::timeout(grace, &mut rx).await {
            Ok(answer) => Answer::Returned(answer),
            // In a worker: kill it, and with it everything the call was doing; its thread
            // answers once the worker is gone.
            Err(_elapsed) if state.is_isolated() => {
                state.kill_worker();
                shared.killed_total.fetch_add(1, Ordering::AcqRel);
                match tokio::time::timeout(KILL_WAIT, &mut rx).await {
                    Ok(_) => Answer::Killed,
                    Err(_) if in_flight.abandon() => Answer::Abandoned,
                    Err(_) => {
                        let _ = rx.await;
                        Answer::Killed
                    }
                }
            }
            Err(_elapsed) if in_flight.abandon() => Answer::Abandoned,
            // The thread finished in the instant between the grace running out and the
            // abandon: its answer is being sent right now.
            Err(_elapsed) => Answer::Returned(rx.await),
        };
        let outcome = stopped_outcome(stop, answer, &req.handler_type, req.timeout, grace);
        in_flight.finish(outcome, started, t0, queued)
    }

    /// Starts a shutdown: refuses new calls and raises the cancel flag of every running call
    /// with reason [`CancelReason::Shutdown`]; each is given `grace` to return before the host
    /// stops waiting for it. Does not wait; see [`shutdown`](Self::shutdown). Only the first
    /// call has an effect; there is no way back.
    pub fn begin_shutdown(&self, grace: Duration) {
        self.shared.shutdown.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(grace);
            true
        });
    }

    /// [`begin_shutdown`](Self::begin_shutdown), then waits until the host waits for no call
    /// any more (each has returned or been abandoned, so this takes about `grace` at most), and
    /// returns the final stats. `abandoned_alive` then counts the threads the process exit will
    /// cut off.
    pub async fn shutdown(&self, grace: Duration) -> ExecutorStats {
        self.begin_shutdown(grace);
        // Every running call holds a permit until the host stops waiting for it; queued calls
        // see the shutdown and leave without one. Holding all permits therefore means idle.
        // (`acquire_many` only fails if the semaphore is closed, which we never do.)
        let _all = self.shared.permits.acquire_many(self.shared.capacity).await;
        self.stats()
    }

    /// How long a stopped call is given to return before the host abandons it
    /// ([`ExecutorConfig::grace`]).
    pub fn grace(&self) -> Duration {
        self.shared.grace
    }

    /// Whether a shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.shutdown.borrow().is_some()
    }

    /// Calls abandoned since the executor was created: the plugin was asked to stop and did not
    /// return within the grace period.
    pub fn abandoned_threads(&self) -> usize {
        self.shared.abandoned_total.load(Ordering::Acquire)
    }

    /// Abandoned threads still inside their plugin (each decrements this when it finally
    /// returns). These threads are beyond the capacity: see the module documentation.
    pub fn abandoned_threads_alive(&self) -> usize {
        self.shared.abandoned_alive.load(Ordering::Acquire)
    }

    /// Calls the host is waiting for right now.
    pub fn running(&self) -> usize {
        self.shared.running.load(Ordering::Acquire)
    }

    /// All gauges and counters at once.
    pub fn stats(&self) -> ExecutorStats {
        ExecutorStats {
            running: self.running(),
            abandoned_total: self.abandoned_threads(),
            abandoned_alive: self.abandoned_threads_alive(),
            killed_total: self.shared.killed_total.load(Ordering::Acquire),
        }
    }
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("capacity", &self.shared.capacity)
            .field("grace", &self.shared.grace)
            .field("stats", &self.stats())
            .field("shutting_down", &self.is_shutting_down())
            .finish()
    }
}

/// How long the host waits for an isolated call's thread after killing its worker (the
/// thread sees the end of the worker's output at once; this only bounds a surprise).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// What the host got after raising the cancel flag.
enum Answer {
    /// The call returned within the grace period.
    Returned(Result<CallResult, oneshot::error::RecvError>),
    /// The call ignored the cancel; its worker process was killed.
    Killed,
    /// The call ignored the cancel; its thread is abandoned.
    Abandoned,
}

/// What made the host stop waiting for the plain answer.
#[derive(Clone, Copy)]
enum Stop {
    Timeout,
    Requested,
    Shutdown(Duration),
}

impl Stop {
    fn reason(self) -> StopReason {
        match self {
            Stop::Timeout => StopReason::Timeout,
            Stop::Requested => StopReason::Requested,
            Stop::Shutdown(_) => StopReason::Shutdown,
        }
    }
}

/// Completes at `deadline`, or never.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// Completes with the shutdown grace once a shutdown has begun.
async fn shutdown_grace(rx: &mut watch::Receiver<Option<Duration>>) -> Duration {
    // Copy the value out in one statement: the `Ref` holds a lock guard, which is not `Send`
    // and must not live in the future's state (the run future has to be `Send`).
    let grace = rx
        .wait_for(Option::is_some)
        .await
        .map(|g| g.unwrap_or_default());
    match grace {
        Ok(grace) => grace,
        // The sender lives in `Shared`, which outlives every run; never reached.
        Err(_) => std::future::pending().await,
    }
}

/// Starts the call on a thread of its own (a reused one when one is idle: `pool`), which
/// first waits for `wait_until` if given. Takes from `req` what only the call reads (its
/// handler, params and the names it is told), so that they are moved, not copied, per run;
/// the rest stays for the host's side of the call.
fn spawn_call(
    req: &mut RunRequest,
    wait_until: Option<Instant>,
    deadline_unix_ms: i64,
    state: Arc<CallState>,
    shared: &Shared,
    tx: oneshot::Sender<CallResult>,
) -> std::io::Result<()> {
    let target = req.target.clone();
    let handler = std::mem::take(&mut req.handler);
    let handler_type = req.handler_type.clone();
    let params = std::mem::take(&mut req.params_json);
    let job_id = std::mem::take(&mut req.job_id);
    let job_name = std::mem::take(&mut req.job_name);
    let run_id = req.run_id.clone();
    let attempt = req.attempt;
    let fire_time_unix_ms = req.fire_time.as_millisecond();
    let alive = shared.abandoned_alive.clone();
    shared.threads.execute(Box::new(move || {
        if let Some(at) = wait_until
            && !state.wait_to_start(at)
        {
            // The host stopped the run before its start and reported it; nobody waits.
            return;
        }
        let t0 = Instant::now();
        let info = CallInfo {
            job_id: &job_id,
            job_name: &job_name,
            run_id: &run_id,
            attempt,
            fire_time_unix_ms,
            deadline_unix_ms,
        };
        // `host::call` and the SDK already keep panics inside their FFI edges; this is the
        // last line, so that nothing on this thread can end without an answer.
        let result = catch_unwind(AssertUnwindSafe(|| match &target {
            Target::InProcess(plugin) => host::call(*plugin, &handler, &params, &info, &*state),
            Target::Worker(pool) => pool.call(&handler, &params, &info, &state),
        }))
        .unwrap_or_else(|payload| {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".to_string());
            Err(PluginError {
                kind: ErrorKind::PANICKED,
                message: format!("the host's call into the plugin panicked: {what}").into(),
                retryable: false,
                data: None.into(),
            })
        });
        let was_abandoned = state.mark_finished();
        let _ = tx.send(result);
        if was_abandoned {
            alive.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                run_id = %run_id,
                handler = %handler_type,
                after = ?t0.elapsed(),
                "abandoned plugin call finally returned"
            );
        }
    }))
}

/// The host's bookkeeping for a call it is waiting for; if the `run` future is dropped
/// mid-call, the drop cancels and abandons the call instead of leaving it unattended.
struct InFlight<'a> {
    shared: &'a Shared,
    state: Arc<CallState>,
    run_id: &'a str,
    handler_type: &'a str,
    armed: bool,
}

impl<'a> InFlight<'a> {
    fn new(shared: &'a Shared, state: Arc<CallState>, req: &'a RunRequest) -> InFlight<'a> {
        shared.running.fetch_add(1, Ordering::AcqRel);
        InFlight {
            shared,
            state,
            run_id: &req.run_id,
            handler_type: &req.handler_type,
            armed: true,
        }
    }

    /// Gives up on the thread; `false` if it finished first.
    fn abandon(&self) -> bool {
        // Raise the gauge before the thread can see ABANDONED and lower it, so it never wraps.
        self.shared.abandoned_alive.fetch_add(1, Ordering::AcqRel);
        if self.state.try_abandon() {
            self.shared.abandoned_total.fetch_add(1, Ordering::AcqRel);
            tracing::warn!(
                run_id = %self.run_id,
                handler = %self.handler_type,
                "plugin ignored the cancel flag for the grace period; its thread is abandoned"
            );
            true
        } else {
            self.shared.abandoned_alive.fetch_sub(1, Ordering::AcqRel);
            false
        }
    }

    /// Ends a call that was stopped before its thread started it (see
    /// [`CallState::try_refuse`]): nothing was called, nothing is abandoned.
    fn refused(mut self, report: RunReport) -> RunReport {
        self.armed = false;
        self.state.close_log();
        report
    }

    fn finish(
        mut self,
        outcome: Outcome,
        started: jiff::Timestamp,
        t0: Instant,
        queued: Duration,
    ) -> RunReport {
        self.armed = false;
        let elapsed = t0.elapsed();
        let log_lines_dropped = self.state.close_log();
        RunReport {
            outcome,
            started: Some(started),
            elapsed,
            queued,
            log_lines_dropped,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Abandon before raising the flag: the host stops waiting now, whatever the
            // plugin does next; the other order would let a prompt plugin finish in between
            // and go uncounted. A call still waiting for its start is refused instead: its
            // plugin is never called, so there is no thread inside it to abandon. A call in
            // a worker is killed: nobody waits for it any more, so nothing of it may run on.
            if !self.state.try_refuse() {
                if self.state.is_isolated() {
                    self.state.kill_worker();
                    self.shared.killed_total.fetch_add(1, Ordering::AcqRel);
                } else {
                    self.abandon();
                }
            }
            self.state.cancel(StopReason::Requested);
            self.state.close_log();
        }
        self.shared.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The outcome of a run stopped before its plugin was called (while it waited for a slot or
/// for its start instant).
fn not_called(stop: Stop, req: &RunRequest) -> Outcome {
    let handler = &req.handler_type;
    match stop {
        Stop::Requested => Outcome::Cancelled {
            reason: CancelReason::Requested,
            stopped: true,
            message: format!("cancelled on request before {handler} started"),
        },
        Stop::Shutdown(_) => Outcome::Cancelled {
            reason: CancelReason::Shutdown,
            stopped: true,
            message: format!("not started: the host is shutting down ({handler} was not called)"),
        },
        // Its thread did not get to run between the start instant and the deadline (an
        // overloaded machine): a timeout, as for a plugin that took that long.
        Stop::Timeout => {
            let after = req.timeout.unwrap_or_default();
            Outcome::TimedOut {
                after,
                stopped: true,
                message: format!(
                    "{handler} timed out after {after:?} before its thread could call it"
                ),
            }
        }
    }
}

/// The outcome when the plugin answered before the host asked it to stop.
fn finished_outcome(
    answer: Result<CallResult, oneshot::error::RecvError>,
    handler_type: &str,
) -> Outcome {
    let e = match answer {
        Ok(Ok(result_json)) => return Outcome::Succeeded { result_json },
        Ok(Err(e)) => e,
        Err(_) => return lost_answer(handler_type),
    };
    let message = e.message.into_string();
    let data = e.data.into_option().map(|d| d.into_string());
    let (message, retryable) = match e.kind {
        // Deterministic failures: another attempt runs the same code on the same params.
        ErrorKind::PANICKED | ErrorKind::INVALID_PARAMS | ErrorKind::UNKNOWN_HANDLER => {
            (message, false)
        }
        ErrorKind::CANCELLED => (
            format!(
                "the handler reported cancelled although the host did not cancel it: {message}"
            ),
            e.retryable,
        ),
        _ => (message, e.retryable),
    };
    Outcome::Failed {
        kind: e.kind,
        message,
        retryable,
        data,
    }
}

/// The outcome after the host raised the cancel flag: decided by why, not by the answer.
fn stopped_outcome(
    stop: Stop,
    answer: Answer,
    handler: &str,
    timeout: Option<Duration>,
    grace: Duration,
) -> Outcome {
    let stopped = !matches!(answer, Answer::Abandoned);
    let tail = match answer {
        Answer::Returned(Ok(Ok(json))) => format!(
            "the handler returned within the {grace:?} grace period with a result, which is discarded: {}",
            clip(&json, 512)
        ),
        Answer::Returned(Ok(Err(e))) => format!(
            "the handler returned within the {grace:?} grace period: {}: {}",
            e.kind,
            clip(e.message.as_str(), 2048)
        ),
        Answer::Returned(Err(_)) => lost_answer(handler).error_text().unwrap_or_default(),
        Answer::Killed => format!(
            "the handler ignored the cancel flag for the {grace:?} grace period; its worker \
             process was killed with everything it started, so nothing of the run goes on"
        ),
        Answer::Abandoned => format!(
            "the handler ignored the cancel flag for the {grace:?} grace period; its thread is \
             abandoned and keeps running until the plugin returns"
        ),
    };
    match stop {
        Stop::Timeout => {
            let after = timeout.unwrap_or_default();
            Outcome::TimedOut {
                after,
                stopped,
                message: format!("{handler} timed out after {after:?}; {tail}"),
            }
        }
        Stop::Requested => Outcome::Cancelled {
            reason: CancelReason::Requested,
            stopped,
            message: format!("{handler} was cancelled on request; {tail}"),
        },
        Stop::Shutdown(_) => Outcome::Cancelled {
            reason: CancelReason::Shutdown,
            stopped,
            message: format!("{handler} was cancelled because the host is shutting down; {tail}"),
        },
    }
}

/// The thread ended without sending an answer. Cannot happen (the send is unconditional after
/// a `catch_unwind`), but if it does the run must still end in a recorded state.
fn lost_answer(handler_type: &str) -> Outcome {
    Outcome::Failed {
        kind: ErrorKind::FAILED,
        message: format!("the thread running {handler_type} ended without an answer"),
        retryable: true,
        data: None,
    }
}

/// At most `max` bytes of `s`, at a character boundary, marked when cut.
pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} …", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::std_types::RSome;

    fn error(kind: ErrorKind, retryable: bool) -> CallResult {
        Err(PluginError {
            kind,
            message: "it went wrong".into(),
            retryable,
            data: RSome(r#"{"k":1}"#.into()),
        })
    }

    #[test]
    fn deterministic_failures_are_never_retryable() {
        for kind in [
            ErrorKind::PANICKED,
            ErrorKind::INVALID_PARAMS,
            ErrorKind::UNKNOWN_HANDLER,
        ] {
            let o = finished_outcome(Ok(error(kind, true)), "p::h");
            assert!(
                matches!(o, Outcome::Failed { kind: k, retryable: false, .. } if k == kind),
                "{o:?}"
            );
        }
        let o = finished_outcome(Ok(error(ErrorKind::FAILED, true)), "p::h");
        assert!(o.is_retryable_failure());
        assert_eq!(o.error_text().as_deref(), Some("failed: it went wrong"));
        // A code from a newer plugin keeps its number and reads as `failed`.
        let o = finished_outcome(Ok(error(ErrorKind(77), false)), "p::h");
        assert_eq!(o.error_text().as_deref(), Some("failed: it went wrong"));
    }

    #[test]
    fn a_cancel_the_host_did_not_ask_for_is_a_failure() {
        let o = finished_outcome(Ok(error(ErrorKind::CANCELLED, false)), "p::h");
        match o {
            Outcome::Failed {
                kind,
                message,
                data,
                ..
            } => {
                assert_eq!(kind, ErrorKind::CANCELLED);
                assert!(message.contains("host did not cancel"), "{message}");
                assert_eq!(data.as_deref(), Some(r#"{"k":1}"#));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn once_the_host_stops_a_run_the_reason_decides_the_outcome() {
        let ok: CallResult = Ok("{}".into());
        let grace = Duration::from_millis(200);
        let timeout = Some(Duration::from_secs(1));
        let o = stopped_outcome(
            Stop::Timeout,
            Answer::Returned(Ok(ok.clone())),
            "p::h",
            timeout,
            grace,
        );
        assert!(
            matches!(&o, Outcome::TimedOut { stopped: true, after, message }
                if *after == Duration::from_secs(1) && message.contains("discarded: {}")),
            "{o:?}"
        );
        let o = stopped_outcome(
            Stop::Shutdown(grace),
            Answer::Abandoned,
            "p::h",
            timeout,
            grace,
        );
        assert!(
            matches!(&o, Outcome::Cancelled { reason: CancelReason::Shutdown, stopped: false, message }
                if message.contains("abandoned")),
            "{o:?}"
        );
        let o = stopped_outcome(Stop::Timeout, Answer::Killed, "p::h", timeout, grace);
        assert!(
            matches!(&o, Outcome::TimedOut { stopped: true, message, .. }
                if message.contains("worker process was killed")),
            "{o:?}"
        );
        let o = stopped_outcome(
            Stop::Requested,
            Answer::Returned(Ok(error(ErrorKind::CANCELLED, false))),
            "p::h",
            None,
            grace,
        );
        assert!(
            matches!(&o, Outcome::Cancelled { reason: CancelReason::Requested, stopped: true, message }
                if message.contains("cancelled: it went wrong")),
            "{o:?}"
        );
        assert_eq!(o.state_name(), "cancelled");
    }

    #[test]
    fn the_run_future_is_send() {
        // A compile-time check: callers `tokio::spawn` runs on a multi-threaded runtime.
        fn assert_send<T: Send>(_: &T) {}
        fn check(e: &Executor, r: RunRequest, s: Arc<dyn RunSink>, c: CancelToken) {
            assert_send(&e.run_with_cancel(r, s, c));
        }
        let _ = check;
    }

    #[test]
    fn a_capacity_of_zero_still_runs_one_call() {
        let exec = Executor::new(ExecutorConfig {
            capacity: 0,
            ..ExecutorConfig::default()
        });
        assert_eq!(exec.shared.capacity, 1);
        assert_eq!(exec.shared.permits.available_permits(), 1);
    }

    // -----------------------------------------------------------------------------------------
    // Thread reuse, with a plugin compiled into the test (no library to build).

    use std::sync::atomic::AtomicBool;
    use std::sync::{Condvar, Mutex};
    use takt_plugin_api::sdk::{JobContext, Plugin};

    /// Released by [`release_stubborn`]; the `stubborn` handler ignores its cancel flag until then.
    static GATE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());
    static STUBBORN_IN: AtomicBool = AtomicBool::new(false);

    fn release_stubborn() {
        *GATE.0.lock().unwrap() = true;
        GATE.1.notify_all();
    }

    fn thread_name() -> String {
        format!("{:?}", std::thread::current().id())
    }

    /// `where` answers the id of the OS thread it ran on; `stubborn` blocks until the test
    /// releases it, whatever the host asks, then answers its thread id too.
    fn plugin() -> PluginRef {
        takt_plugin_api::static_plugin!(|| Plugin::new("pool")
            .handler("where", "the thread it ran on", |_: &JobContext, (): ()| {
                Ok(thread_name())
            })
            .handler(
                "stubborn",
                "ignores cancel until released",
                |_: &JobContext, (): ()| {
                    STUBBORN_IN.store(true, Ordering::SeqCst);
                    let mut open = GATE.0.lock().unwrap();
                    while !*open {
                        open = GATE.1.wait(open).unwrap();
                    }
                    Ok(thread_name())
                }
            ))
        .expect("a valid static plugin")
    }

    struct Quiet;
    impl RunSink for Quiet {
        fn log(&self, _: takt_plugin_api::abi::LogLevel, _: &str) {}
        fn progress(&self, _: u64, _: u64, _: &str) {}
    }

    fn call(handler: &str, timeout: Option<Duration>) -> RunRequest {
        RunRequest {
            target: plugin().into(),
            handler: handler.to_string(),
            handler_type: format!("pool::{handler}"),
            params_json: String::new(),
            job_id: "1".into(),
            job_name: "j".into(),
            run_id: "1".into(),
            attempt: 1,
            fire_time: jiff::Timestamp::UNIX_EPOCH,
            timeout,
            not_before: None,
        }
    }

    fn thread_of(report: &RunReport) -> String {
        match &report.outcome {
            Outcome::Succeeded { result_json } => serde_json::from_str(result_json).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// Waits up to 10 s for `f`.
    fn eventually(mut f: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        f()
    }

    #[tokio::test]
    async fn consecutive_runs_are_served_by_the_same_os_thread() {
        let exec = Executor::new(ExecutorConfig {
            capacity: 4,
            ..ExecutorConfig::default()
        });
        let mut threads = std::collections::HashSet::new();
        for _ in 0..20 {
            let report = exec.run(call("where", None), Arc::new(Quiet)).await;
            threads.insert(thread_of(&report));
            // The answer is sent before the thread is back on the idle list; a run that
            // comes in between would (rightly) get a new thread, so wait for it.
            assert!(eventually(|| exec.shared.threads.idle() == 1));
        }
        assert_eq!(threads.len(), 1, "one thread served every run: {threads:?}");
        assert_ne!(
            threads.iter().next().unwrap(),
            &thread_name(),
            "not the caller's thread"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_idle_threads_kept_follow_the_capacity() {
        let exec = Executor::new(ExecutorConfig {
            capacity: 3,
            ..ExecutorConfig::default()
        });
        // Twelve at once, three at a time (the capacity): never more than three threads wait
        // for work afterwards, and the next runs reuse them.
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..12 {
            let exec = exec.clone();
            calls.spawn(async move { exec.run(call("where", None), Arc::new(Quiet)).await });
        }
        let mut threads = std::collections::HashSet::new();
        while let Some(report) = calls.join_next().await {
            threads.insert(thread_of(&report.unwrap()));
        }
        assert!(eventually(|| exec.shared.threads.idle() >= 1));
        std::thread::sleep(Duration::from_millis(50));
        let idle = exec.shared.threads.idle();
        assert!(
            (1..=3).contains(&idle),
            "{idle} idle threads for capacity 3"
        );
        let next = thread_of(&exec.run(call("where", None), Arc::new(Quiet)).await);
        assert!(
            threads.contains(&next),
            "the next run reuses a pooled thread"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abandoned_thread_is_counted_and_replaced_without_losing_capacity() {
        let exec = Executor::new(ExecutorConfig {
            capacity: 1,
            grace: Duration::from_millis(50),
            ..ExecutorConfig::default()
        });
        // Warm the pool: the one thread that will be abandoned.
        let first = thread_of(&exec.run(call("where", None), Arc::new(Quiet)).await);
        assert!(eventually(|| exec.shared.threads.idle() == 1));

        let report = exec
            .run(
                call("stubborn", Some(Duration::from_millis(50))),
                Arc::new(Quiet),
            )
            .await;
        assert!(STUBBORN_IN.load(Ordering::SeqCst));
        assert!(
            matches!(report.outcome, Outcome::TimedOut { stopped: false, .. }),
            "{:?}",
            report.outcome
        );
        let stats = exec.stats();
        assert_eq!((stats.abandoned_total, stats.abandoned_alive), (1, 1));
        assert_eq!(stats.running, 0, "the slot is free again");

        // Capacity 1, its thread stuck inside the plugin: the next run still runs at once, on
        // a new thread.
        let began = Instant::now();
        let replacement = thread_of(&exec.run(call("where", None), Arc::new(Quiet)).await);
        assert!(began.elapsed() < Duration::from_secs(5));
        assert_ne!(replacement, first, "not the abandoned thread");

        // When the plugin finally returns, the gauge falls and the pool still keeps no more
        // threads than the capacity.
        release_stubborn();
        assert!(eventually(|| exec.stats().abandoned_alive == 0));
        assert_eq!(exec.stats().abandoned_total, 1);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            exec.shared.threads.idle(),
            1,
            "capacity 1 keeps one idle thread"
        );
        let after = thread_of(&exec.run(call("where", None), Arc::new(Quiet)).await);
        assert!(
            after == first || after == replacement,
            "{after} is a pooled thread"
        );
    }

    #[test]
    fn clipping_respects_char_boundaries() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("aé", 2), "a …");
    }
}
