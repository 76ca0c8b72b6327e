//! Reusable call threads.
//!
//! Each plugin call still gets a thread of its own for its whole duration (the executor's
//! contract: an abandoned call keeps its thread, and never holds a capacity slot hostage), but
//! a thread whose call returned waits a while for the next call instead of exiting. Creating a
//! thread cost ~46 µs per run on the reference machine (B3), more than everything else a
//! no-op run costs; reuse takes that off every run while the host is busy.
//!
//! * A call goes to an idle thread if there is one, else to a new thread (so a burst, or
//!   threads held by abandoned calls, never queue behind each other).
//! * At most `max_idle` threads wait; more exit when their call returns.
//! * An idle thread exits after [`IDLE_TIMEOUT`], so a quiet host holds no threads.
//! * Threads are named `takt-run` (the run id is in every log line the call writes).

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How long a thread without a call waits for one before it exits.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

type Task = Box<dyn FnOnce() + Send + 'static>;

/// The idle threads: each waits on its own one-slot channel, known by a number so that a
/// thread giving up can take itself off the list.
pub(crate) struct Pool {
    idle: Mutex<Idle>,
    max_idle: usize,
}

#[derive(Default)]
struct Idle {
    waiting: Vec<(u64, SyncSender<Task>)>,
    next_id: u64,
}

impl Pool {
    pub(crate) fn new(max_idle: usize) -> Arc<Pool> {
        Arc::new(Pool {
            idle: Mutex::new(Idle::default()),
            max_idle,
        })
    }

    /// Runs `task` on an idle thread, or on a new one.
    pub(crate) fn execute(self: &Arc<Pool>, task: Task) -> std::io::Result<()> {
        let waiting = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .waiting
            .pop();
        if let Some((_, tx)) = waiting {
            // Taken off the list under the lock, so the thread will not give up: it blocks
            // until this send arrives. A send can only fail if the thread died (a panic outside
            // the task's own guard); then a new thread takes the task.
            match tx.send(task) {
                Ok(()) => return Ok(()),
                Err(returned) => return self.spawn(returned.0),
            }
        }
        self.spawn(task)
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
            let (tx, rx) = sync_channel::<Task>(1);
            let id = {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                if idle.waiting.len() >= self.max_idle {
                    return;
                }
                idle.next_id += 1;
                let id = idle.next_id;
                idle.waiting.push((id, tx));
                id
            };
            match self.wait(&rx, id) {
                Some(next) => task = next,
                None => return,
            }
        }
    }

    /// The next task, or `None` when this thread gave up waiting.
    fn wait(&self, rx: &Receiver<Task>, id: u64) -> Option<Task> {
        match rx.recv_timeout(IDLE_TIMEOUT) {
            Ok(task) => Some(task),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(at) = idle.waiting.iter().position(|(i, _)| *i == id) {
                    idle.waiting.swap_remove(at);
                    return None;
                }
                drop(idle);
                // A caller took this thread off the list just now and is sending its task.
                rx.recv().ok()
            }
        }
    }

    /// Threads waiting for a call.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .waiting
            .len()
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
        let ids: std::collections::HashSet<_> = (0..5)
            .map(|_| {
                let tx = tx.clone();
                pool.execute(Box::new(move || {
                    tx.send(std::thread::current().id()).unwrap()
                }))
                .unwrap();
                let id = rx.recv().unwrap();
                while pool.idle() == 0 {
                    std::thread::yield_now();
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
        let begun = std::time::Instant::now();
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
        let pool = Pool::new(4);
        let k = 8;
        for round in 0..300 {
            let gate = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
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
                assert!(together, "round {round}: a call waited behind another");
            }
        }
        // Between rounds at most `max_idle` threads wait.
        assert!(pool.idle() <= 4, "{} idle threads", pool.idle());
    }
}
