//! The host's side: worker processes per plugin version, pooled, bounded, supervised.
//!
//! * [`Workers`] — one per host: the settings (program, limits), the count of live worker
//!   processes against [`WorkerSettings::max_workers`], and the *keeper* thread, which kills
//!   workers that do not say hello within [`WorkerSettings::start_timeout`], ends workers
//!   idle longer than [`WorkerSettings::idle_timeout`] and reaps the ones being closed.
//! * [`WorkerPool`] — the workers of one plugin *version* (name, version, file SHA-256: the
//!   same key as Bazel's worker key, so a changed file never reaches an old worker). Idle
//!   workers wait in it for the next call; a retired pool (its version was replaced and has
//!   drained) closes them, so the old library leaves memory with its last process.
//! * A worker serves one call at a time (a crash then fails exactly one run). The call's
//!   `takt-run` thread writes the call and reads the worker's frames itself; a thread per
//!   worker reads its standard error (lines into the running call's log and a short tail for
//!   crash reports).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use takt_plugin_api::abi::{ErrorKind, LogLevel, PluginError};
use takt_plugin_api::host::{CallInfo, HostServices};
use takt_plugin_exe::sys::Group;

use super::protocol::{
    CallFrame, CallOutcome, EXIT_PROTOCOL, FromWorker, Hello, PROTOCOL, PluginMeta, RefusalFrame,
    ToWorker, read_frame, write_frame,
};
use super::{WORKER_FLAG, sys};
use crate::executor::{CallState, WorkerControl, clip};

/// How the host runs worker processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSettings {
    /// The program started as a worker (`takt` itself, or an embedding program that calls
    /// [`super::serve_if_worker`] first thing in `main`).
    pub program: PathBuf,
    /// The most worker processes alive at once, over all plugins and versions (0 is read as
    /// 1). A call that needs one beyond it first ends an idle worker of another pool, else
    /// waits for one — inside its call, so the wait counts against its timeout (keep it at
    /// least the capacity, the default of `takt run` and `HostBuilder`, and it never waits).
    pub max_workers: usize,
    /// A cap on each worker's memory in bytes (Unix: `setrlimit`, see the module docs of
    /// [`crate::worker`]; Windows: the Job Object's process memory limit). `None`: no cap.
    pub memory_limit: Option<u64>,
    /// How long an idle worker waits for a call before it is ended.
    pub idle_timeout: Duration,
    /// How long a new worker may take to load its plugin and say hello.
    pub start_timeout: Duration,
}

impl WorkerSettings {
    /// `program` with at most 8 workers, no memory cap, 60 s idle timeout, 10 s start timeout.
    pub fn new(program: impl Into<PathBuf>) -> WorkerSettings {
        WorkerSettings {
            program: program.into(),
            max_workers: 8,
            memory_limit: None,
            idle_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(10),
        }
    }
}

/// How long a closed worker may take to exit before it is killed.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// How long the host waits for a dead worker's last standard-error lines.
const STDERR_DRAIN: Duration = Duration::from_secs(1);
/// The standard-error lines kept for a crash report, and their length.
const TAIL_LINES: usize = 8;
const TAIL_LINE_BYTES: usize = 1024;
/// The run-log lines of the call kept for a crash report.
const CALL_TAIL: usize = 3;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counters of a [`Workers`], for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Worker processes alive now (idle, busy, starting or being closed).
    pub live: usize,
    /// Worker processes started.
    pub spawned: u64,
    /// Workers that died during a call (the run failed with the reason).
    pub crashed: u64,
    /// Workers the host killed (a call that ignored its cancel for the grace period).
    pub killed: u64,
}

/// The host's worker processes; see the module docs.
pub struct Workers {
    settings: WorkerSettings,
    state: Mutex<State>,
    /// A worker slot freed or an idle worker returned; also wakes the keeper.
    changed: Condvar,
    spawned: AtomicU64,
    crashed: AtomicU64,
    killed: AtomicU64,
    stopping: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Worker processes counted against the maximum.
    live: usize,
    pools: Vec<Weak<WorkerPool>>,
    /// Workers whose input was closed, waiting to exit.
    closing: Vec<(Worker, Instant)>,
    /// Workers that have not said hello yet, with their deadline.
    starting: Vec<(Instant, Weak<WorkerShared>)>,
    keeper: bool,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("settings", &self.settings)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Workers {
    /// A manager of worker processes with `settings`; no process starts before a call (or a
    /// probe) needs one.
    pub fn new(settings: WorkerSettings) -> Arc<Workers> {
        Arc::new(Workers {
            settings: WorkerSettings {
                max_workers: settings.max_workers.max(1),
                ..settings
            },
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            spawned: AtomicU64::new(0),
            crashed: AtomicU64::new(0),
            killed: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &WorkerSettings {
        &self.settings
    }

    /// The counters now.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            live: lock(&self.state).live,
            spawned: self.spawned.load(Ordering::Relaxed),
            crashed: self.crashed.load(Ordering::Relaxed),
            killed: self.killed.load(Ordering::Relaxed),
        }
    }

    /// A pool for one plugin version, loading the file at `shadow`. `expect` is what the file
    /// must turn out to be (for a plugin the host has loaded itself); `None` takes what the
    /// first worker reports (see [`probe`](Self::probe)).
    pub(crate) fn pool(
        self: &Arc<Self>,
        key: PoolKey,
        expect: Option<PluginMeta>,
    ) -> Arc<WorkerPool> {
        let pool = Arc::new(WorkerPool {
            workers: self.clone(),
            key,
            meta: OnceLock::new(),
            idle: Mutex::new(Vec::new()),
            retired: AtomicBool::new(false),
            live: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
        });
        if let Some(meta) = expect {
            let _ = pool.meta.set(meta);
        }
        let mut state = lock(&self.state);
        state.pools.retain(|p| p.strong_count() > 0);
        state.pools.push(Arc::downgrade(&pool));
        pool
    }

    /// Loads the file at `key.shadow` in a new worker: what it is, or the loader's refusal.
    /// The worker stays in the returned pool, idle, for the first call. A worker that
    /// cannot start is a refusal too (the plugin cannot be served isolated).
    pub(crate) fn probe(
        self: &Arc<Self>,
        key: PoolKey,
    ) -> Result<(Arc<WorkerPool>, PluginMeta), RefusalFrame> {
        let pool = self.pool(key, None);
        // A probe does not wait for a slot: loading must not block on busy workers. The
        // count may exceed the maximum briefly; the idle worker is the first to go.
        lock(&self.state).live += 1;
        let (worker, hello) = match pool.spawn() {
            Ok(started) => started,
            Err(e) => {
                self.release();
                return Err(RefusalFrame {
                    reason: format!("it could not be opened in a worker process: {e}"),
                    fix: "check the worker program and the messages above; or remove the plugin \
                          from [plugins] isolate"
                        .to_string(),
                });
            }
        };
        match hello.plugin {
            Ok(meta) => {
                let _ = pool.meta.set(meta.clone());
                pool.put_back(worker);
                Ok((pool, meta))
            }
            Err(refusal) => {
                pool.close(worker);
                Err(refusal)
            }
        }
    }

    /// Ends every worker: idle ones are closed, busy ones killed (their calls have been
    /// stopped by the executor's shutdown before this), and waits up to `wait` for them to
    /// exit. Afterwards no process is started any more.
    pub fn shutdown(&self, wait: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        let pools: Vec<Arc<WorkerPool>> = lock(&self.state)
            .pools
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for p in pools {
            p.close_idle(Duration::ZERO);
        }
        let deadline = Instant::now() + wait;
        loop {
            self.reap(Instant::now());
            let state = lock(&self.state);
            if state.closing.is_empty() || Instant::now() >= deadline {
                break;
            }
            let _ = self
                .changed
                .wait_timeout(state, Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner);
        }
        self.changed.notify_all();
    }

    fn release(&self) {
        let mut state = lock(&self.state);
        state.live = state.live.saturating_sub(1);
        drop(state);
        self.changed.notify_all();
    }

    /// Counts a new worker if there is room; else ends an idle worker of another pool to
    /// make room. `false` when every slot holds a busy worker.
    fn reserve(&self, for_pool: &WorkerPool) -> bool {
        let mut state = lock(&self.state);
        if state.live < self.settings.max_workers {
            state.live += 1;
            return true;
        }
        let others: Vec<Arc<WorkerPool>> = state
            .pools
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|p| !std::ptr::eq(&**p, for_pool))
            .collect();
        drop(state);
        for p in others {
            if let Some(w) = p.take_oldest_idle() {
                // Its slot passes to the new worker.
                p.close_counted(w, false);
                return true;
            }
        }
        false
    }

    /// Hands a worker whose input was closed to the keeper, which reaps it.
    fn closing(self: &Arc<Self>, worker: Worker) {
        let mut state = lock(&self.state);
        state.closing.push((worker, Instant::now()));
        drop(state);
        self.ensure_keeper();
        self.changed.notify_all();
    }

    fn ensure_keeper(self: &Arc<Self>) {
        let mut state = lock(&self.state);
        if state.keeper {
            return;
        }
        state.keeper = true;
        drop(state);
        let weak = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name("takt-workers".into())
            .spawn(move || keeper(weak));
        if started.is_err() {
            lock(&self.state).keeper = false;
            tracing::warn!("cannot start the worker keeper thread; idle workers stay until used");
        }
    }

    /// Reaps closed workers that exited, and kills those past [`CLOSE_GRACE`].
    fn reap(&self, now: Instant) {
        let done: Vec<Worker> = {
            let mut state = lock(&self.state);
            let (gone, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut state.closing)
                .into_iter()
                .partition(|(w, since)| {
                    w.shared.has_exited() || now.duration_since(*since) >= CLOSE_GRACE
                });
            state.closing = wait;
            gone.into_iter().map(|(w, _)| w).collect()
        };
        for w in done {
            w.shared.end();
        }
    }

    /// One pass of the keeper; returns whether it has anything left to watch.
    fn keep(&self, now: Instant) -> bool {
        // Workers past their start deadline are killed; the starting call then reads the
        // end of their output and reports the timeout.
        let overdue: Vec<Arc<WorkerShared>> = {
            let mut state = lock(&self.state);
            state.starting.retain(|(_, w)| {
                w.upgrade()
                    .is_some_and(|w| !w.started.load(Ordering::Acquire))
            });
            state
                .starting
                .iter()
                .filter(|(deadline, _)| *deadline <= now)
                .filter_map(|(_, w)| w.upgrade())
                .collect()
        };
        for w in overdue {
            w.start_timed_out.store(true, Ordering::Release);
            w.kill();
        }
        let pools: Vec<Arc<WorkerPool>> = lock(&self.state)
            .pools
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut idle = false;
        for p in &pools {
            p.close_idle(self.settings.idle_timeout);
            idle |= !lock(&p.idle).is_empty();
        }
        self.reap(now);
        let state = lock(&self.state);
        idle || !state.closing.is_empty() || !state.starting.is_empty()
    }
}

/// The keeper thread: every 100 ms while something starts or closes, else every second (or
/// a quarter of the idle timeout); it ends with its [`Workers`], or once shut down with
/// nothing left to watch.
fn keeper(workers: Weak<Workers>) {
    loop {
        let Some(w) = workers.upgrade() else {
            return;
        };
        let busy = w.keep(Instant::now());
        let stopping = w.stopping.load(Ordering::SeqCst);
        let mut state = lock(&w.state);
        if stopping && state.closing.is_empty() && state.starting.is_empty() {
            state.keeper = false;
            return;
        }
        let pause = if !state.closing.is_empty() || !state.starting.is_empty() {
            Duration::from_millis(100)
        } else if busy {
            (w.settings.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
        } else {
            Duration::from_secs(1)
        };
        state = w
            .changed
            .wait_timeout(state, pause)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        drop(state);
    }
}

/// What identifies a pool: one plugin file's content, loaded from its shadow copy (the
/// plugin's name and version come with the file: see [`WorkerPool::label`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PoolKey {
    pub(crate) sha256: String,
    pub(crate) shadow: PathBuf,
}

/// The workers of one plugin version; see the module docs.
pub struct WorkerPool {
    workers: Arc<Workers>,
    key: PoolKey,
    /// What the file is (from the host's own load, or the first worker's hello).
    meta: OnceLock<PluginMeta>,
    idle: Mutex<Vec<(Worker, Instant)>>,
    retired: AtomicBool,
    /// This pool's worker processes (idle and busy).
    live: AtomicUsize,
    calls: AtomicU64,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("plugin", &self.label())
            .field("sha256", &self.key.sha256)
            .field("live", &self.live())
            .field("retired", &self.retired.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl WorkerPool {
    /// `plugin version`, once known (from the host's load or the first worker), else the
    /// shadow file.
    pub fn label(&self) -> String {
        match self.meta.get() {
            Some(m) => format!("{} {}", m.name, m.version),
            None => self.key.shadow.display().to_string(),
        }
    }

    /// Worker processes of this pool alive now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Calls made through this pool.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Takes no more calls and ends its idle workers (a busy one ends after its call): the
    /// version was replaced and has no run left.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.close_idle(Duration::ZERO);
    }

    /// Runs one call in a worker (an idle one, else a new one) and returns what the plugin
    /// returned, or — the worker died — a failure saying how, with its last lines.
    pub(crate) fn call(
        &self,
        handler: &str,
        params: &str,
        info: &CallInfo<'_>,
        state: &Arc<CallState>,
    ) -> Result<String, PluginError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut worker = self.checkout(state)?;
        worker.next_id += 1;
        let id = worker.next_id;
        *lock(&worker.shared.call) = Some((id, state.clone()));
        state.attach_worker(Arc::new(Control {
            shared: worker.shared.clone(),
            id,
        }));
        let frame = ToWorker::Call(CallFrame {
            id,
            handler: handler.to_string(),
            params: params.to_string(),
            job_id: info.job_id.to_string(),
            job_name: info.job_name.to_string(),
            run_id: info.run_id.to_string(),
            attempt: info.attempt,
            fire_time_unix_ms: info.fire_time_unix_ms,
            deadline_unix_ms: info.deadline_unix_ms,
            max_line_bytes: state.limits().max_line_bytes,
        });
        let sent = match lock(&worker.shared.stdin).as_mut() {
            Some(stdin) => write_frame(stdin, &frame).map_err(|e| e.to_string()),
            None => Err("its input is closed".to_string()),
        };
        let mut tail: VecDeque<String> = VecDeque::new();
        let ended = match sent {
            Err(e) => Err(format!("the call could not be sent ({e})")),
            Ok(()) => loop {
                match read_frame::<FromWorker>(&mut worker.stdout) {
                    Ok(Some(FromWorker::Done { id: got, result })) if got == id => {
                        break Ok(result);
                    }
                    Ok(Some(FromWorker::Log {
                        id: got,
                        level,
                        message,
                    })) if got == id => {
                        if tail.len() == CALL_TAIL {
                            tail.pop_front();
                        }
                        tail.push_back(clip(&message, 200));
                        state.log(LogLevel(level), &message);
                    }
                    Ok(Some(FromWorker::Progress {
                        id: got,
                        done,
                        total,
                        note,
                    })) if got == id => state.progress(done, total, &note),
                    Ok(Some(other)) => {
                        break Err(format!("protocol error: an unexpected frame {other:?}"));
                    }
                    Ok(None) => break Err(String::new()),
                    Err(e) => break Err(format!("its output broke off ({e})")),
                }
            },
        };
        state.detach_worker();
        *lock(&worker.shared.call) = None;
        match ended {
            Ok(outcome) => {
                self.put_back(worker);
                match outcome {
                    CallOutcome::Ok(json) => Ok(json),
                    CallOutcome::Err {
                        kind,
                        message,
                        retryable,
                        data,
                    } => Err(PluginError {
                        kind: ErrorKind(kind),
                        message: message.into(),
                        retryable,
                        data: data.map(Into::into).into(),
                    }),
                }
            }
            Err(detail) => Err(self.died(worker, &detail, &tail)),
        }
    }

    /// An idle worker that still lives, or a new one (waiting for a slot when every one is
    /// busy; a cancel ends that wait).
    fn checkout(&self, state: &CallState) -> Result<Worker, PluginError> {
        loop {
            if self.retired.load(Ordering::SeqCst) || self.workers.stopping.load(Ordering::SeqCst) {
                return Err(failure(
                    format!(
                        "the worker pool of plugin {} no longer takes calls (the version was \
                         replaced, or the host is stopping)",
                        self.label()
                    ),
                    true,
                ));
            }
            let idle = lock(&self.idle).pop();
            if let Some((w, _)) = idle {
                if !w.shared.has_exited() {
                    return Ok(w);
                }
                // It died while idle (an operator, the OOM killer): replace it.
                w.shared.end();
                self.forget();
                continue;
            }
            if self.workers.reserve(self) {
                return match self.spawn() {
                    Ok((w, hello)) => match self.check_hello(hello) {
                        Ok(()) => Ok(w),
                        Err(e) => {
                            self.close(w);
                            Err(failure(e, false))
                        }
                    },
                    Err(e) => {
                        self.workers.release();
                        Err(failure(
                            format!(
                                "cannot start a worker process for plugin {}: {e}",
                                self.label()
                            ),
                            true,
                        ))
                    }
                };
            }
            if state.is_cancelled() {
                return Err(failure(
                    "stopped while waiting for a free worker process".into(),
                    false,
                ));
            }
            let guard = lock(&self.workers.state);
            let _ = self
                .workers
                .changed
                .wait_timeout(guard, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The file must be what the pool was made for.
    fn check_hello(&self, hello: Hello) -> Result<(), String> {
        let meta = hello.plugin.map_err(|r| {
            format!(
                "the worker refused the plugin file: {}; fix: {}",
                r.reason, r.fix
            )
        })?;
        match self.meta.get() {
            Some(expected) if *expected != meta => Err(format!(
                "the worker loaded plugin {} {} from {}, but the host has {} {} from it",
                meta.name,
                meta.version,
                self.key.shadow.display(),
                expected.name,
                expected.version
            )),
            Some(_) => Ok(()),
            None => {
                let _ = self.meta.set(meta);
                Ok(())
            }
        }
    }

    /// Starts a worker (its slot already counted) and reads its hello.
    fn spawn(&self) -> Result<(Worker, Hello), String> {
        let settings = &self.workers.settings;
        let mut cmd = Command::new(&settings.program);
        cmd.arg(WORKER_FLAG)
            .arg(PROTOCOL.to_string())
            .arg(&self.key.shadow)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(limit) = settings.memory_limit {
            cmd.arg("--memory-limit").arg(limit.to_string());
        }
        takt_plugin_exe::sys::prepare(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", settings.program.display()))?;
        #[cfg(windows)]
        let group = Group::attach_with_memory_limit(&mut child, settings.memory_limit);
        #[cfg(not(windows))]
        let group = Group::attach(&mut child);
        let group = group.map_err(|e| {
            let _ = child.kill();
            let _ = child.wait();
            format!("cannot hold the worker's process tree: {e}")
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the worker's pipes were not created".to_string());
        };
        self.workers.spawned.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(WorkerShared {
            pid: child.id(),
            stdin: Mutex::new(Some(stdin)),
            process: Mutex::new(Process {
                child,
                group,
                status: None,
            }),
            call: Mutex::new(None),
            killed: AtomicBool::new(false),
            started: AtomicBool::new(false),
            start_timed_out: AtomicBool::new(false),
            stderr: Mutex::new(Tail::default()),
            stderr_closed: Condvar::new(),
        });
        let reader = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("takt-worker-err".into())
                .spawn(move || read_stderr(&shared, stderr))
        };
        if let Err(e) = reader {
            shared.kill();
            shared.end();
            return Err(format!("cannot start the worker's reader thread: {e}"));
        }
        lock(&self.workers.state).starting.push((
            Instant::now() + settings.start_timeout,
            Arc::downgrade(&shared),
        ));
        self.workers.ensure_keeper();
        self.workers.changed.notify_all();
        let mut worker = Worker {
            shared,
            stdout: BufReader::new(stdout),
            next_id: 0,
        };
        let failed = match read_frame::<FromWorker>(&mut worker.stdout) {
            Ok(Some(FromWorker::Hello(hello))) if hello.protocol == PROTOCOL => {
                worker.shared.started.store(true, Ordering::Release);
                self.live.fetch_add(1, Ordering::AcqRel);
                return Ok((worker, hello));
            }
            Ok(Some(FromWorker::Hello(hello))) => format!(
                "it speaks worker protocol {}, this host {PROTOCOL}: use the takt of the \
                 host's version as the worker program",
                hello.protocol
            ),
            Ok(Some(f)) => format!("it sent {f:?} instead of its hello"),
            Ok(None) => String::new(),
            Err(e) => format!("its output broke off ({e})"),
        };
        // Whatever it is doing, it will not serve. One that ended its output is exiting
        // (or timed out and was killed); one that talks nonsense is killed now.
        if !failed.is_empty() {
            worker.shared.kill();
        }
        let report = worker.shared.end();
        Err(start_failure(settings, &report, &failed))
    }

    /// Returns a worker after a call: idle in the pool, or closed when the pool is retired
    /// or the host stops.
    fn put_back(&self, worker: Worker) {
        if self.retired.load(Ordering::SeqCst) || self.workers.stopping.load(Ordering::SeqCst) {
            self.close(worker);
            return;
        }
        lock(&self.idle).push((worker, Instant::now()));
        self.workers.changed.notify_all();
    }

    fn take_oldest_idle(&self) -> Option<Worker> {
        let mut idle = lock(&self.idle);
        if idle.is_empty() {
            return None;
        }
        Some(idle.remove(0).0)
    }

    /// Closes idle workers that waited `at_least` (all of them for zero).
    fn close_idle(&self, at_least: Duration) {
        let now = Instant::now();
        let expired: Vec<Worker> = {
            let mut idle = lock(&self.idle);
            let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|(_, since)| now.duration_since(*since) >= at_least);
            *idle = keep;
            old.into_iter().map(|(w, _)| w).collect()
        };
        for w in expired {
            self.close(w);
        }
    }

    /// Closes a worker's input (it exits on its own) and hands it to the keeper.
    fn close(&self, worker: Worker) {
        self.close_counted(worker, true);
    }

    fn close_counted(&self, worker: Worker, release: bool) {
        lock(&worker.shared.stdin).take();
        self.live.fetch_sub(1, Ordering::AcqRel);
        if release {
            self.workers.release();
        }
        self.workers.closing(worker);
    }

    /// A worker of this pool died (and was reaped by [`WorkerShared::end`]).
    fn forget(&self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
        self.workers.release();
    }

    /// The failure of a call whose worker died: how it ended, and its last lines.
    fn died(&self, worker: Worker, detail: &str, call_tail: &VecDeque<String>) -> PluginError {
        let report = worker.shared.end();
        self.forget();
        let killed = worker.shared.killed.load(Ordering::Acquire);
        if killed {
            self.workers.killed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.workers.crashed.fetch_add(1, Ordering::Relaxed);
        }
        let what = match (killed, report.cause()) {
            (true, _) => "the host killed the worker process".to_string(),
            (false, Some(oom)) if oom.contains("memory") => {
                match self.workers.settings.memory_limit {
                    Some(limit) => {
                        format!("{oom} (the worker's limit is {})", bytes_text(limit))
                    }
                    None => oom.to_string(),
                }
            }
            (false, Some(cause)) => cause.to_string(),
            (false, None) => "the plugin crashed its worker process".to_string(),
        };
        let mut message = format!(
            "{what}: worker process {} of plugin {} ended during the call: {}",
            report.pid,
            self.label(),
            report.words
        );
        if !detail.is_empty() {
            message.push_str(&format!("; {detail}"));
        }
        if !report.tail.is_empty() {
            message.push_str(&format!("; its last lines: {}", report.lines()));
        }
        if !call_tail.is_empty() {
            message.push_str(&format!(
                "; the run's last log lines: {}",
                call_tail.iter().cloned().collect::<Vec<_>>().join(" | ")
            ));
        }
        let data = serde_json::json!({
            "pid": report.pid,
            "exit_code": report.code,
            "signal": report.signal,
            "stderr": report.tail,
        });
        PluginError {
            kind: ErrorKind::FAILED,
            message: message.into(),
            // A crash is the plugin's code on these params: like a panic, not retried.
            retryable: false,
            data: Some(data.to_string().into()).into(),
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // A version dropped without draining (a file refused as a duplicate after its
        // probe): its idle workers still go through the keeper, releasing their slots.
        self.close_idle(Duration::ZERO);
    }
}

fn failure(message: String, retryable: bool) -> PluginError {
    PluginError {
        kind: ErrorKind::FAILED,
        message: message.into(),
        retryable,
        data: None.into(),
    }
}

/// Why a worker did not say hello, in words.
fn start_failure(settings: &WorkerSettings, report: &EndReport, what: &str) -> String {
    let program = settings.program.display();
    let mut message = if report.start_timed_out {
        format!(
            "the worker program {program} did not answer within {:?} (an embedding program must \
             call takt_host::worker::serve_if_worker() first thing in main)",
            settings.start_timeout
        )
    } else if !what.is_empty() {
        format!("the worker program {program} did not start properly: {what}")
    } else if report.code == Some(EXIT_PROTOCOL) {
        format!("the worker program {program} speaks another worker protocol than this host")
    } else {
        format!(
            "the worker program {program} ended before its hello: {}",
            report.words
        )
    };
    if !report.tail.is_empty() {
        message.push_str(&format!("; its last lines: {}", report.lines()));
    }
    message
}

/// `256 MiB`, `1.5 GiB`, `900 KiB`.
pub(crate) fn bytes_text(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    let (unit, name) = if bytes >= GIB && bytes.is_multiple_of(GIB / 2) {
        (GIB, "GiB")
    } else if bytes >= MIB {
        (MIB, "MiB")
    } else if bytes >= KIB {
        (KIB, "KiB")
    } else {
        return format!("{bytes} bytes");
    };
    let v = bytes as f64 / unit as f64;
    if v.fract() == 0.0 {
        format!("{v:.0} {name}")
    } else {
        format!("{v:.1} {name}")
    }
}

/// A worker process checked out of, or idle in, a pool.
struct Worker {
    shared: Arc<WorkerShared>,
    stdout: BufReader<ChildStdout>,
    /// The last call id used on this worker.
    next_id: u64,
}

/// What the call's thread, the executor's stop path, the stderr reader and the keeper share
/// about one worker.
struct WorkerShared {
    pid: u32,
    /// Frames to the worker; `None` once closed (the worker then exits).
    stdin: Mutex<Option<ChildStdin>>,
    /// Killing and reaping happen under this lock, so a kill can never reach a reaped (and
    /// possibly recycled) process id.
    process: Mutex<Process>,
    /// The call running now, for kills (which must not reach the next call) and stderr lines.
    call: Mutex<Option<(u64, Arc<CallState>)>>,
    killed: AtomicBool,
    started: AtomicBool,
    start_timed_out: AtomicBool,
    stderr: Mutex<Tail>,
    stderr_closed: Condvar,
}

struct Process {
    child: Child,
    group: Group,
    status: Option<ExitStatus>,
}

#[derive(Default)]
struct Tail {
    lines: VecDeque<String>,
    /// The first line that names a cause the host recognises (a stack overflow, a failed
    /// allocation): a backtrace printed after it would push it out of `lines`.
    cause: Option<String>,
    closed: bool,
}

/// Lines of a dying Rust program that say why, and what they mean.
const CAUSES: [(&str, &str); 2] = [
    (
        "has overflowed its stack",
        "the plugin overflowed its stack",
    ),
    ("memory allocation of", "the plugin ran out of memory"),
];

/// How a worker ended.
struct EndReport {
    pid: u32,
    words: String,
    code: Option<i32>,
    signal: Option<i32>,
    tail: Vec<String>,
    cause: Option<String>,
    start_timed_out: bool,
}

impl EndReport {
    /// What the cause line says, in the host's words.
    fn cause(&self) -> Option<&'static str> {
        let line = self.cause.as_deref()?;
        CAUSES
            .iter()
            .find(|(text, _)| line.contains(text))
            .map(|(_, what)| *what)
    }

    /// The cause line (if any) and the last lines, for a message.
    fn lines(&self) -> String {
        let mut lines: Vec<&str> = Vec::new();
        if let Some(c) = &self.cause
            && !self.tail.iter().rev().take(4).any(|l| l == c)
        {
            lines.push(c);
            lines.push("…");
        }
        let skip = self.tail.len().saturating_sub(4);
        lines.extend(self.tail.iter().skip(skip).map(String::as_str));
        lines.join(" | ")
    }
}

impl WorkerShared {
    fn has_exited(&self) -> bool {
        let p = lock(&self.process);
        p.status.is_some() || sys::has_exited(&p.child)
    }

    /// Kills the worker's whole tree (unless it was reaped already).
    fn kill(&self) {
        let p = lock(&self.process);
        if p.status.is_none() {
            self.killed.store(true, Ordering::Release);
            p.group.kill();
        }
    }

    /// Waits for the worker to exit (it is dying or closed: killed after a short wait), kills
    /// whatever it left in its tree, reaps it, and collects its last standard-error lines.
    fn end(&self) -> EndReport {
        let deadline = Instant::now() + CLOSE_GRACE;
        while !self.has_exited() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let status = {
            let mut p = lock(&self.process);
            match p.status {
                Some(s) => s,
                None => {
                    // Before reaping: the leader's pid keeps the group id reserved.
                    p.group.kill();
                    p.group.disarm();
                    let s = match p.child.wait() {
                        Ok(s) => s,
                        Err(_) => {
                            // Reaped elsewhere (cannot happen: only here); report as unknown.
                            return self.report(None);
                        }
                    };
                    p.status = Some(s);
                    s
                }
            }
        };
        self.report(Some(status))
    }

    fn report(&self, status: Option<ExitStatus>) -> EndReport {
        // The stderr pipe ends when the last process holding it is gone.
        let deadline = Instant::now() + STDERR_DRAIN;
        let mut tail = lock(&self.stderr);
        while !tail.closed {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tail = self
                .stderr_closed
                .wait_timeout(tail, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let lines: Vec<String> = tail.lines.iter().cloned().collect();
        let cause = tail.cause.clone();
        drop(tail);
        let (words, code, signal) = match status {
            Some(s) if self.killed.load(Ordering::Acquire) => {
                let (_, code, signal) = sys::exit_words(s);
                ("killed by the host".to_string(), code, signal)
            }
            Some(s) => sys::exit_words(s),
            None => ("it ended in an unknown way".to_string(), None, None),
        };
        EndReport {
            pid: self.pid,
            words,
            code,
            signal,
            tail: lines,
            cause,
            start_timed_out: self.start_timed_out.load(Ordering::Acquire),
        }
    }
}

impl Drop for WorkerShared {
    fn drop(&mut self) {
        // A worker forgotten without `end` (a panic on the way) must not outlive the host's
        // interest in it; `Group`'s own drop kills the tree while it has members.
        let p = self
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if p.status.is_none() {
            p.group.kill();
            let _ = p.child.wait();
        }
    }
}

/// Reads a worker's standard error: each line into the running call's log (warn) and into
/// the tail a crash report quotes, and to the host's own log when no call runs.
fn read_stderr(shared: &WorkerShared, stderr: impl Read) {
    let mut r = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match read_line_capped(&mut r, &mut buf, TAIL_LINE_BYTES * 16) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        {
            let mut tail = lock(&shared.stderr);
            if tail.lines.len() == TAIL_LINES {
                tail.lines.pop_front();
            }
            let kept = clip(line, TAIL_LINE_BYTES);
            if tail.cause.is_none() && CAUSES.iter().any(|(text, _)| line.contains(text)) {
                tail.cause = Some(kept.clone());
            }
            tail.lines.push_back(kept);
        }
        let call = lock(&shared.call).as_ref().map(|(_, s)| s.clone());
        match call {
            Some(state) => state.log(LogLevel::WARN, line),
            None => tracing::warn!(pid = shared.pid, "worker: {line}"),
        }
    }
    lock(&shared.stderr).closed = true;
    shared.stderr_closed.notify_all();
}

/// Reads up to and including the next newline, keeping at most `max` bytes of it (the rest
/// of a longer line is read and dropped, so a line without end never grows the buffer).
fn read_line_capped(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let (done, used) = {
            let available = match r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok(total);
            }
            match available.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    let room = max.saturating_sub(buf.len());
                    buf.extend_from_slice(&available[..(i + 1).min(room)]);
                    (true, i + 1)
                }
                None => {
                    let room = max.saturating_sub(buf.len());
                    buf.extend_from_slice(&available[..available.len().min(room)]);
                    (false, available.len())
                }
            }
        };
        r.consume(used);
        total += used;
        if done {
            return Ok(total);
        }
    }
}

/// The executor's handle on one call in one worker.
struct Control {
    shared: Arc<WorkerShared>,
    id: u64,
}

impl Control {
    fn still_mine(&self) -> bool {
        lock(&self.shared.call)
            .as_ref()
            .is_some_and(|(id, _)| *id == self.id)
    }
}

impl WorkerControl for Control {
    fn cancel(&self) {
        if !self.still_mine() {
            return;
        }
        // One small frame: the worker's reading thread takes it at once, so this never waits
        // on a full pipe.
        if let Some(stdin) = lock(&self.shared.stdin).as_mut() {
            let _ = write_frame(stdin, &ToWorker::Cancel { id: self.id });
        }
    }

    fn kill(&self) {
        // Under the call lock: the call cannot end (and the worker go back to the pool for
        // another run) between the check and the kill.
        let call = lock(&self.shared.call);
        if call.as_ref().is_some_and(|(id, _)| *id == self.id) {
            self.shared.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_read_like_an_operator_writes_them() {
        assert_eq!(bytes_text(256 << 20), "256 MiB");
        assert_eq!(bytes_text(3 << 29), "1.5 GiB");
        assert_eq!(bytes_text(2 << 30), "2 GiB");
        assert_eq!(bytes_text(900 << 10), "900 KiB");
        assert_eq!(bytes_text(12), "12 bytes");
    }

    #[test]
    fn stderr_lines_are_capped_but_read_to_their_end() {
        let text = format!("{}\nsecond\nlast without newline", "x".repeat(100));
        let mut r = BufReader::with_capacity(16, text.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(read_line_capped(&mut r, &mut buf, 10).unwrap(), 101);
        assert_eq!(buf, b"xxxxxxxxxx");
        buf.clear();
        read_line_capped(&mut r, &mut buf, 10).unwrap();
        assert_eq!(buf, b"second\n");
        buf.clear();
        read_line_capped(&mut r, &mut buf, 100).unwrap();
        assert_eq!(buf, b"last without newline");
        buf.clear();
        assert_eq!(read_line_capped(&mut r, &mut buf, 100).unwrap(), 0);
    }
}
