//! The host's half of one call: the cancel flag, the interruptible sleep, and the bounded path
//! from the plugin's log lines to the [`RunSink`].

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use takt_plugin_api::abi::LogLevel;
use takt_plugin_api::host::HostServices;

/// Where a run's log lines and progress go (the run store, a live-log stream, a test).
///
/// Called on the plugin's thread, synchronously, while the run's log lock is held (that keeps
/// one run's lines in order, and the "dropped" notice last). Implementations must therefore be
/// quick and must not block on the plugin; buffer or hand off to a channel if the destination
/// is slow. A panic here is caught at the FFI edge and the line is lost, nothing more.
pub trait RunSink: Send + Sync {
    /// One run-log line, already truncated to [`LogLimits::max_line_bytes`].
    fn log(&self, level: LogLevel, message: &str);
    /// The latest progress: `done` of `total` units (`total` 0 when unknown), with a note.
    fn progress(&self, done: u64, total: u64, note: &str);
}

/// Bounds on what one run may write to its log.
///
/// A plugin that logs ten million lines must not exhaust the host's memory or the run store,
/// and a runaway loop should still leave a readable log: the first lines are kept, everything
/// after a limit is counted and dropped, and one closing line says how many were dropped. A
/// prefix (rather than, say, a ring of the last lines) is what can be streamed live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// Lines forwarded per run; later lines are dropped.
    pub max_lines: u64,
    /// Bytes (after truncation) forwarded per run; once a line would exceed it, that line and
    /// all later ones are dropped.
    pub max_bytes: u64,
    /// A longer line is cut at a character boundary and marked with how much was cut.
    pub max_line_bytes: usize,
}

impl Default for LogLimits {
    /// 10 000 lines, 8 MiB, 64 KiB per line: generous for a job's log, small for a host.
    fn default() -> LogLimits {
        LogLimits {
            max_lines: 10_000,
            max_bytes: 8 << 20,
            max_line_bytes: 64 << 10,
        }
    }
}

/// Why the host raised the cancel flag. The first reason wins: a run that timed out and is then
/// caught by a shutdown during its grace period stays timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    Timeout,
    Requested,
    Shutdown,
}

const RUNNING: u8 = 0;
const FINISHED: u8 = 1;
const ABANDONED: u8 = 2;
/// Handed over ahead of its start instant; the thread waits (see [`CallState::wait_to_start`]).
const WAITING: u8 = 3;
/// Stopped by the host before its start instant: the plugin is never called.
const REFUSED: u8 = 4;

/// How the host reaches a call running in a worker process (see [`crate::worker`]): the
/// cancel flag lives in the worker, so raising it is a message, and a call that ignores it is
/// stopped by killing the worker.
pub(crate) trait WorkerControl: Send + Sync {
    /// Sends the cancel to the worker (it raises the plugin's flag and wakes its sleeps).
    fn cancel(&self);
    /// Kills the worker process (and what it started) if it still runs this call.
    fn kill(&self);
}

/// Shared between the call's thread (as the plugin's [`HostServices`]) and the waiting host.
pub(crate) struct CallState {
    /// The cheap read the plugin polls; mirrors `stop.is_some()`.
    cancelled: AtomicBool,
    /// The reason, under the mutex the sleepers' condvar needs.
    stop: Mutex<Option<StopReason>>,
    wake: Condvar,
    /// RUNNING → FINISHED (the thread) or RUNNING → ABANDONED (the host); whoever moves first
    /// decides whether the thread counts as abandoned. A call handed over ahead of its start
    /// begins at WAITING: → RUNNING (the thread, at the start instant) or → REFUSED (the
    /// host, stopped before it); whoever moves first decides whether the plugin is called.
    phase: AtomicU8,
    sink: Arc<dyn RunSink>,
    limits: LogLimits,
    book: Mutex<LogBook>,
    /// The call runs in a worker process: a timeout kills it instead of abandoning a thread.
    isolated: bool,
    /// The worker serving the call (attached while it runs there), and whether the host asked
    /// for a kill — remembered, so a kill requested while the worker was still starting
    /// reaches it once it is attached.
    worker: Mutex<(Option<Arc<dyn WorkerControl>>, bool)>,
}

#[derive(Default)]
struct LogBook {
    lines: u64,
    bytes: u64,
    dropped: u64,
    /// A limit was hit: everything from here on is dropped, so the log stays a clean prefix.
    full: bool,
    /// The host stopped waiting; the run's record is final.
    closed: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A sink that panicked while we held the lock must not take the whole run down with it:
    // the counters are still consistent (they are updated before the sink is called).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CallState {
    /// The state of a call; `waits` when its thread must wait for a start instant first.
    pub(crate) fn new(sink: Arc<dyn RunSink>, limits: LogLimits, waits: bool) -> CallState {
        CallState {
            cancelled: AtomicBool::new(false),
            stop: Mutex::new(None),
            wake: Condvar::new(),
            phase: AtomicU8::new(if waits { WAITING } else { RUNNING }),
            sink,
            limits,
            book: Mutex::new(LogBook::default()),
            isolated: false,
            worker: Mutex::new((None, false)),
        }
    }

    /// The same state for a call made in a worker process.
    pub(crate) fn isolated(mut self) -> CallState {
        self.isolated = true;
        self
    }

    /// Whether the call runs in a worker process.
    pub(crate) fn is_isolated(&self) -> bool {
        self.isolated
    }

    /// The bounds on this call's log.
    pub(crate) fn limits(&self) -> LogLimits {
        self.limits
    }

    /// Raises the cancel flag (unless already raised) and wakes every `sleep`; a call in a
    /// worker gets the cancel sent.
    pub(crate) fn cancel(&self, reason: StopReason) {
        let mut stop = lock(&self.stop);
        if stop.is_none() {
            *stop = Some(reason);
            self.cancelled.store(true, Ordering::Release);
        }
        drop(stop);
        self.wake.notify_all();
        let worker = lock(&self.worker).0.clone();
        if let Some(w) = worker {
            w.cancel();
        }
    }

    /// The worker now serving the call. A cancel or kill the host asked for before is
    /// passed on at once.
    pub(crate) fn attach_worker(&self, control: Arc<dyn WorkerControl>) {
        let mut worker = lock(&self.worker);
        if worker.1 {
            control.kill();
        }
        worker.0 = Some(control.clone());
        drop(worker);
        if self.cancelled.load(Ordering::Acquire) {
            control.cancel();
        }
    }

    /// The call left its worker (it returned, or the worker died).
    pub(crate) fn detach_worker(&self) {
        lock(&self.worker).0 = None;
    }

    /// Kills the call's worker now, or as soon as one is attached.
    pub(crate) fn kill_worker(&self) {
        let mut worker = lock(&self.worker);
        worker.1 = true;
        if let Some(w) = worker.0.clone() {
            drop(worker);
            w.kill();
        }
    }

    /// Called by the call's thread of a call handed over ahead: sleeps until `at` (a precise
    /// OS sleep, which a cancel interrupts), then claims the start. `false` when the host
    /// refused the start meanwhile ([`try_refuse`](Self::try_refuse)): the plugin must not be
    /// called, and nobody waits for an answer.
    pub(crate) fn wait_to_start(&self, at: Instant) -> bool {
        let mut stop = lock(&self.stop);
        loop {
            let now = Instant::now();
            if stop.is_some() || now >= at {
                break;
            }
            stop = self
                .wake
                .wait_timeout(stop, at - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(stop);
        self.phase
            .compare_exchange(WAITING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Called by the host when it stops a call before the plugin was called; `true` if the
    /// thread had not started it (it never will), `false` if the call is already running.
    pub(crate) fn try_refuse(&self) -> bool {
        self.phase
            .compare_exchange(WAITING, REFUSED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Called by the call's thread when the plugin returned; `true` if the host had already
    /// abandoned it.
    pub(crate) fn mark_finished(&self) -> bool {
        self.phase
            .compare_exchange(RUNNING, FINISHED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    }

    /// Called by the host when it gives up; `false` if the thread finished first (its answer
    /// is then on its way and the host should take it).
    pub(crate) fn try_abandon(&self) -> bool {
        self.phase
            .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Ends forwarding to the sink and writes the "dropped" notice, if any, as the last line.
    /// Returns how many lines the limits dropped. Idempotent.
    pub(crate) fn close_log(&self) -> u64 {
        let mut book = lock(&self.book);
        if !book.closed {
            book.closed = true;
            if book.dropped > 0 {
                let notice = format!(
                    "… {} further log lines dropped (this run reached its limit of {} lines or {} bytes)",
                    book.dropped, self.limits.max_lines, self.limits.max_bytes
                );
                self.sink.log(LogLevel::WARN, &notice);
            }
        }
        book.dropped
    }
}

impl HostServices for CallState {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    fn sleep(&self, duration: Duration) -> bool {
        interruptible_sleep(&self.stop, &self.wake, duration, Option::is_some)
    }

    fn log(&self, level: LogLevel, message: &str) {
        let mut book = lock(&self.book);
        if book.closed {
            return;
        }
        let line = truncate(message, self.limits.max_line_bytes);
        let len = line.len() as u64;
        if book.full
            || book.lines >= self.limits.max_lines
            || book.bytes.saturating_add(len) > self.limits.max_bytes
        {
            book.full = true;
            book.dropped += 1;
            return;
        }
        book.lines += 1;
        book.bytes += len;
        self.sink.log(level, &line);
    }

    fn progress(&self, done: u64, total: u64, note: &str) {
        // Progress replaces rather than accumulates, so it needs no count limit; the note is
        // bounded like a log line. The lock keeps it ordered with the log and out after close.
        let book = lock(&self.book);
        if book.closed {
            return;
        }
        let note = truncate(note, self.limits.max_line_bytes);
        self.sink.progress(done, total, &note);
    }
}

/// Sleeps up to `duration` on `wake`, or until `stopped` holds for the value under `lock`
/// (checked first, and whenever `wake` is notified); `true` when stopped. The condvar (not a
/// poll loop) is what makes a cancel interrupt a plugin's sleep at once — in the host and in
/// a worker process alike.
pub(crate) fn interruptible_sleep<T>(
    lock_: &Mutex<T>,
    wake: &Condvar,
    duration: Duration,
    stopped: impl Fn(&T) -> bool,
) -> bool {
    let until = Instant::now().checked_add(duration);
    let mut value = lock(lock_);
    loop {
        if stopped(&value) {
            return true;
        }
        let now = Instant::now();
        value = match until {
            Some(until) if now >= until => return false,
            Some(until) => {
                wake.wait_timeout(value, until - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => wake.wait(value).unwrap_or_else(PoisonError::into_inner),
        };
    }
}

/// Cuts `s` to at most `max` bytes (plus a marker) at a character boundary.
fn truncate(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    cut_marked(s, max, 0)
}

/// Cuts `s` so that it *and* the marker fit in `max` bytes (a worker process cuts its lines
/// this way, so that the host, applying [`truncate`] with the same limit, keeps them as
/// they are). A `max` too small for any marker cuts without one.
pub(crate) fn truncate_within(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    // " … [N more bytes cut]": 22 bytes of text ('…' is three) plus the digits of N.
    let room = 22 + s.len().to_string().len();
    if max <= room {
        return cut_marked(s, max, usize::MAX);
    }
    cut_marked(s, max, room)
}

/// `s` cut at a character boundary to `max - reserve` bytes and marked, when it is longer than
/// `max`; `reserve == usize::MAX` cuts to `max` without a marker.
fn cut_marked(s: &str, max: usize, reserve: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let mut end = if reserve == usize::MAX {
        max
    } else {
        max - reserve
    };
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    if reserve == usize::MAX {
        return s[..end].to_string().into();
    }
    format!("{} … [{} more bytes cut]", &s[..end], s.len() - end).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    #[derive(Default)]
    struct Lines(StdMutex<Vec<String>>);

    impl RunSink for Lines {
        fn log(&self, _: LogLevel, message: &str) {
            self.0.lock().unwrap().push(message.to_string());
        }
        fn progress(&self, _: u64, _: u64, _: &str) {}
    }

    #[test]
    fn a_line_cut_within_the_limit_passes_the_hosts_truncation_unchanged() {
        let long = "x".repeat(10_000);
        for max in [10, 40, 64, 1000] {
            let cut = truncate_within(&long, max);
            assert!(cut.len() <= max, "{max}: {cut}");
            assert_eq!(truncate(&cut, max), cut, "{max}");
        }
        assert_eq!(
            truncate_within(&long, 64),
            format!("{} … [9963 more bytes cut]", "x".repeat(37))
        );
        assert_eq!(truncate_within("short", 64), "short");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "abc … [1 more bytes cut]");
        // 'é' is two bytes; cutting inside it backs off to before it.
        assert_eq!(truncate("aé", 2), "a … [2 more bytes cut]");
    }

    #[test]
    fn limits_keep_a_prefix_and_close_with_a_notice() {
        let sink = Arc::new(Lines::default());
        let limits = LogLimits {
            max_lines: 3,
            max_bytes: 1000,
            max_line_bytes: 10,
        };
        let state = CallState::new(sink.clone(), limits, false);
        for i in 0..10 {
            state.log(LogLevel::INFO, &format!("line {i}"));
        }
        assert_eq!(state.close_log(), 7);
        state.log(LogLevel::INFO, "after close");
        let lines = sink.0.lock().unwrap().clone();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(&lines[..3], ["line 0", "line 1", "line 2"]);
        assert!(
            lines[3].starts_with("… 7 further log lines dropped"),
            "{lines:?}"
        );
    }

    #[test]
    fn the_byte_limit_stops_the_log_for_good() {
        let sink = Arc::new(Lines::default());
        let limits = LogLimits {
            max_lines: 100,
            max_bytes: 10,
            max_line_bytes: 100,
        };
        let state = CallState::new(sink.clone(), limits, false);
        state.log(LogLevel::INFO, "123456");
        state.log(LogLevel::INFO, "123456"); // would exceed: dropped
        state.log(LogLevel::INFO, "1"); // would fit, but the log is full: dropped too
        assert_eq!(state.close_log(), 2);
        assert_eq!(sink.0.lock().unwrap().len(), 2);
    }

    #[test]
    fn cancel_wakes_a_sleeper_and_the_first_reason_wins() {
        let state = Arc::new(CallState::new(
            Arc::new(Lines::default()),
            LogLimits::default(),
            false,
        ));
        assert!(!state.sleep(Duration::from_millis(1)));
        let sleeper = {
            let state = state.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                (state.sleep(Duration::from_secs(30)), t.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        state.cancel(StopReason::Shutdown);
        state.cancel(StopReason::Timeout);
        let (cancelled, slept) = sleeper.join().unwrap();
        assert!(cancelled);
        assert!(slept < Duration::from_secs(5), "{slept:?}");
        assert!(state.is_cancelled());
        assert_eq!(*state.stop.lock().unwrap(), Some(StopReason::Shutdown));
    }

    #[test]
    fn finishing_and_abandoning_are_exclusive() {
        let state = CallState::new(Arc::new(Lines::default()), LogLimits::default(), false);
        assert!(state.try_abandon());
        assert!(state.mark_finished(), "the thread learns it was abandoned");
        let state = CallState::new(Arc::new(Lines::default()), LogLimits::default(), false);
        assert!(!state.mark_finished());
        assert!(!state.try_abandon());
    }

    #[test]
    fn a_waiting_call_starts_at_its_instant_unless_refused_first() {
        // Not refused: the thread starts at the instant (not before), and a refusal after
        // that is too late.
        let state = CallState::new(Arc::new(Lines::default()), LogLimits::default(), true);
        let at = Instant::now() + Duration::from_millis(30);
        assert!(state.wait_to_start(at));
        assert!(Instant::now() >= at);
        assert!(!state.try_refuse(), "already running");
        assert!(!state.mark_finished());

        // Refused while the thread waits: the cancel wakes it at once and it must not start.
        let state = Arc::new(CallState::new(
            Arc::new(Lines::default()),
            LogLimits::default(),
            true,
        ));
        let waiter = {
            let state = state.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                let started = state.wait_to_start(Instant::now() + Duration::from_secs(30));
                (started, t.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(state.try_refuse());
        state.cancel(StopReason::Requested);
        let (started, waited) = waiter.join().unwrap();
        assert!(!started, "a refused call is never started");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        // Nor can it be abandoned: there is no thread inside the plugin to give up on.
        assert!(!state.try_abandon());
    }
}
