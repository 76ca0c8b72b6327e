//! Reusable call threads.
//!
//! Each plugin call still gets a thread of its own for its whole duration (the executor's
//! contract: an abandoned call keeps its thread, and never holds a capacity slot hostage), but
//! a thread whose call returned waits a while for the next call instead of exiting. Creating a
//! thread cost ~46 µs per run on the reference machine (B3), more than everything else a
//! no-op run costs; reuse takes that off every run while the host is busy.
//!
//! * A call is queued only when a thread that is not inside a call is bound to take it: one
//!   *spinning* (it just returned from a call and looks at the queue for [`SPIN`] before it
//!   sleeps), or a sleeping one woken for it. Otherwise a new thread takes it. So a call never
//!   waits for another call to return, whatever the others do (an abandoned call included).
//! * At most [`max_spinning`] threads spin, none on a machine with one CPU. Handing a call to a
//!   spinning thread costs no system call on either side, where waking a sleeping one costs a
//!   futex wake and a context switch on each: in a burst of short runs (B3) one spinning
//!   thread takes call after call as the runtime hands them over. A spin is bounded and
//!   yields the CPU at every turn, so an idle host pays at most [`SPIN`] of CPU per call.
//! * At most `max_idle` threads spin or sleep; more exit when their call returns.
//! * A sleeping thread exits after [`IDLE_TIMEOUT`], so a quiet host holds no threads.
//! * Threads are named `takt-run` (the run id is in every log line the call writes).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a thread without a call waits for one before it exits.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a thread whose call returned looks for the next one before it sleeps. A burst's
/// runtime hands calls over a few microseconds apart; longer would only burn CPU on a quiet
/// host.
pub(crate) const SPIN: Duration = Duration::from_micros(50);

type Task = Box<dyn FnOnce() + Send + 'static>;

/// The call threads not inside a call, and the calls handed to them.
pub(crate) struct Pool {
    state: Mutex<State>,
    /// Wakes sleeping threads; each wake is paid for by a token in [`State::tokens`].
    wake: Condvar,
    /// The queue's length, read without the lock by spinning threads.
    queued: AtomicUsize,
    max_idle: usize,
    max_spinning: usize,
}

/// Invariant (under the lock): `queue.len() <= spinning + tokens`, i.e. every queued call has
/// a thread outside any call bound to look at the queue.
#[derive(Default)]
struct State {
    queue: VecDeque<Task>,
    /// Threads looking at the queue for [`SPIN`] after their call returned.
    spinning: usize,
    /// Threads waiting on the condition variable (woken or not).
    sleeping: usize,
    /// Wakes sent to sleeping threads and not yet taken by one of them.
    tokens: usize,
}

/// How many threads may spin at once: one where there is a second CPU for it, none where
/// spinning could only delay the thread that would hand it a call.
fn max_spinning() -> usize {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() > 1 => 1,
        _ => 0,
    }
}

impl Pool {
    pub(crate) fn new(max_idle: usize) -> Arc<Pool> {
        Pool::with_spinning(max_idle, max_spinning())
    }

    fn with_spinning(max_idle: usize, max_spinning: usize) -> Arc<Pool> {
        Arc::new(Pool {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            queued: AtomicUsize::new(0),
            max_idle,
            max_spinning: max_spinning.min(max_idle),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `task` on a thread outside any call: a spinning one, a sleeping one woken for it,
    /// or a new one.
    pub(crate) fn execute(self: &Arc<Pool>, task: Task) -> std::io::Result<()> {
        let mut state = self.lock();
        if state.queue.len() < state.spinning + state.tokens {
            self.push(&mut state, task);
            return Ok(());
        }
        if state.sleeping > state.tokens {
            state.tokens += 1;
            self.push(&mut state, task);
            drop(state);
            self.wake.notify_one();
            return Ok(());
        }
        drop(state);
        self.spawn(task)
    }

    fn push(&self, state: &mut State, task: Task) {
        state.queue.push_back(task);
        self.queued.store(state.queue.len(), Ordering::Release);
    }

    fn pop(&self, state: &mut State) -> Option<Task> {
        let task = state.queue.pop_front();
        self.queued.store(state.queue.len(), Ordering::Release);
        task
    }

    fn spawn(self: &Arc<Pool>, task: Task) -> std::io::Result<()> {
        let pool = self.clone();
        std::thread::Builder::new()
            .name("takt-run".to_string())
            .spawn(move || pool.work(task))?;
        Ok(())
    }

    fn work(&self, mut task: Task) {
        loop {
            task();
            match self.next() {
                Some(next) => task = next,
                None => return,
            }
        }
    }

    /// The next task for a thread whose call returned, or `None` when it should exit.
    fn next(&self) -> Option<Task> {
        let mut state = self.lock();
        // One spin per returned call; after it, or when another thread spins, sleep.
        let mut spun = false;
        loop {
            // A call queued for another thread may be taken by this one: the queue shrinks
            // with it, so the invariant holds.
            if let Some(task) = self.pop(&mut state) {
                return Some(task);
            }
            if state.spinning + state.sleeping >= self.max_idle {
                return None;
            }
            if !spun && state.spinning < self.max_spinning {
                spun = true;
                state.spinning += 1;
                drop(state);
                let (found, locked) = self.spin();
                if found.is_some() {
                    return found;
                }
                state = locked;
                continue;
            }
            state = self.sleep(state)?;
        }
    }

    /// Looks at the queue for [`SPIN`]. The caller is counted in `spinning` until the lock
    /// under which it takes a call or gives up: a call queued for it while it spins is never
    /// left in the queue behind the call it took.
    fn spin(&self) -> (Option<Task>, MutexGuard<'_, State>) {
        let until = Instant::now() + SPIN;
        loop {
            let over = Instant::now() >= until;
            if over || self.queued.load(Ordering::Acquire) > 0 {
                let mut state = self.lock();
                let task = self.pop(&mut state);
                if task.is_some() || over {
                    state.spinning -= 1;
                    return (task, state);
                }
            }
            std::thread::yield_now();
        }
    }

    /// Sleeps until woken with a token (then returns the lock, to look at the queue again:
    /// its call may have been taken by a spinning thread meanwhile) or until
    /// [`IDLE_TIMEOUT`] passed without one (`None`: exit).
    fn sleep<'a>(&'a self, mut state: MutexGuard<'a, State>) -> Option<MutexGuard<'a, State>> {
        state.sleeping += 1;
        let deadline = Instant::now() + IDLE_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            state = self
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            // Any sleeper may take a token, the one notified or not: the token is what binds a
            // thread to the queue, and a notified thread that finds none sleeps on.
            if state.tokens > 0 {
                state.tokens -= 1;
                state.sleeping -= 1;
                return Some(state);
            }
            if Instant::now() >= deadline {
                state.sleeping -= 1;
                return None;
            }
        }
    }

    /// Threads not inside a call (spinning or sleeping).
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        let state = self.lock();
        state.spinning + state.sleeping
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::channel;

    #[test]
    fn threads_are_reused_and_bounded() {
        let pool = Pool::new(2);
        let (tx, rx) = channel();
        // One after another: the same thread serves all of them.
        for _ in 0..5 {
            let tx = tx.clone();
            pool.execute(Box::new(move || {
                tx.send(std::thread::current().id()).unwrap();
            }))
            .unwrap();
            let id = rx.recv().unwrap();
            // Wait until the thread is back on the idle list.
            while pool.idle() == 0 {
                std::thread::yield_now();
            }
            let _ = id;
        }
        // Handed to the thread while it spins (at once) and once it sleeps (after a pause
        // longer than the spin).
        let ids: std::collections::HashSet<_> = (0..6)
            .map(|i| {
                let tx = tx.clone();
                pool.execute(Box::new(move || {
                    tx.send(std::thread::current().id()).unwrap()
                }))
                .unwrap();
                let id = rx.recv().unwrap();
                while pool.idle() == 0 {
                    std::thread::yield_now();
                }
                if i % 2 == 1 {
                    std::thread::sleep(SPIN * 20);
                }
                id
            })
            .collect();
        assert_eq!(ids.len(), 1, "sequential calls reuse one thread");

        // Four at once (each blocks until released): four threads; then at most 2 stay idle.
        let started = Arc::new(AtomicUsize::new(0));
        let (release_tx, release_rx) = channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        for _ in 0..4 {
            let started = started.clone();
            let release_rx = release_rx.clone();
            pool.execute(Box::new(move || {
                started.fetch_add(1, Ordering::SeqCst);
                let _ = release_rx.lock().unwrap().recv();
            }))
            .unwrap();
        }
        while started.load(Ordering::SeqCst) < 4 {
            std::thread::yield_now();
        }
        for _ in 0..4 {
            release_tx.send(()).unwrap();
        }
        let begun = Instant::now();
        while pool.idle() < 2 {
            assert!(begun.elapsed() < Duration::from_secs(10));
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(pool.idle(), 2, "the others exited");
    }

    /// The pool's promise: a call never waits for another call to return. Each round starts
    /// `k` calls that can only finish once all `k` run at once; a call queued behind another
    /// would hang its round. The rounds follow each other without a pause, so the next
    /// round's calls race the threads coming back from the last one (a wrong hand-over there
    /// shows as a hung round).
    #[test]
    fn a_call_never_waits_behind_another() {
        // Without a spinning thread, with the one a machine with two CPUs has, and with more.
        for spinning in [0, 1, 3] {
            never_waits_behind_another(spinning);
        }
    }

    fn never_waits_behind_another(spinning: usize) {
        let pool = Pool::with_spinning(4, spinning);
        let k = 8;
        for round in 0..300 {
            let gate = Arc::new((Mutex::new(0usize), Condvar::new()));
            let (done_tx, done_rx) = channel();
            for _ in 0..k {
                let gate = gate.clone();
                let done_tx = done_tx.clone();
                pool.execute(Box::new(move || {
                    let (started, all) = &*gate;
                    let mut n = started.lock().unwrap();
                    *n += 1;
                    all.notify_all();
                    let (n, timeout) = all
                        .wait_timeout_while(n, Duration::from_secs(10), |n| *n < k)
                        .unwrap();
                    drop(n);
                    done_tx.send(!timeout.timed_out()).unwrap();
                }))
                .unwrap();
            }
            for _ in 0..k {
                let together = done_rx.recv_timeout(Duration::from_secs(20)).unwrap();
                assert!(
                    together,
                    "round {round}, {spinning} spinning: a call waited behind another"
                );
            }
        }
        // Between rounds at most `max_idle` threads wait.
        assert!(pool.idle() <= 4, "{} idle threads", pool.idle());
    }
}
