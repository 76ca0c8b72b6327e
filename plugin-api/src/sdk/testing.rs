//! Unit-testing handlers without a host.
//!
//! A handler is an ordinary function of a [`JobContext`] and its params; [`TestHost`] supplies
//! a real context (the same callback table the host builds) that records what the handler
//! logs and reports, and can cancel it:
//!
//! ```ignore
//! let host = TestHost::new();
//! let summary = host.run(|ctx| clean(ctx, CleanParams { dir: tmp, keep_days: 30 })).unwrap();
//! assert!(host.logs().iter().any(|(_, line)| line.contains("removed")));
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{JobContext, log_layer};
use crate::abi::LogLevel;
use crate::host::{CallInfo, HostServices, with_table};

/// A stand-in host for unit tests of handlers.
#[derive(Debug, Default)]
pub struct TestHost {
    logs: Mutex<Vec<(LogLevel, String)>>,
    progress: Mutex<Vec<(u64, u64, String)>>,
    cancelled: AtomicBool,
    wake: Condvar,
    lock: Mutex<()>,
}

impl TestHost {
    /// A host that has not cancelled anything.
    pub fn new() -> TestHost {
        TestHost::default()
    }

    /// Runs `f` with a context for job `test` / run `1`, attempt 1, as the SDK would run a
    /// handler: `tracing` events inside `f` are recorded as log lines too.
    pub fn run<R>(&self, f: impl FnOnce(&JobContext) -> R) -> R {
        let info = CallInfo {
            job_id: "1",
            job_name: "test",
            run_id: "1",
            attempt: 1,
            fire_time_unix_ms: 0,
            deadline_unix_ms: 0,
        };
        with_table(&info, self, |raw| {
            let ctx = JobContext::open(raw);
            let result = log_layer::with_run_log(&ctx, || f(&ctx));
            ctx.close();
            result
        })
    }

    /// Asks the running handler to stop (also from another thread).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let _guard = self.lock.lock();
        self.wake.notify_all();
    }

    /// The log lines recorded so far.
    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The progress reports recorded so far.
    pub fn progress(&self) -> Vec<(u64, u64, String)> {
        self.progress.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

impl HostServices for TestHost {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    fn sleep(&self, duration: Duration) -> bool {
        let until = Instant::now() + duration;
        let Ok(mut guard) = self.lock.lock() else {
            return self.is_cancelled();
        };
        while !self.is_cancelled() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            match self.wake.wait_timeout(guard, until - now) {
                Ok((g, _)) => guard = g,
                Err(_) => break,
            }
        }
        self.is_cancelled()
    }

    fn log(&self, level: LogLevel, message: &str) {
        if let Ok(mut l) = self.logs.lock() {
            l.push((level, message.to_string()));
        }
    }

    fn progress(&self, done: u64, total: u64, note: &str) {
        if let Ok(mut p) = self.progress.lock() {
            p.push((done, total, note.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::JobError;

    fn handler(ctx: &JobContext, n: u32) -> Result<u32, JobError> {
        tracing::info!(n, "starting");
        ctx.progress(1, 2, "half");
        ctx.sleep(Duration::from_secs(30))?;
        Ok(n * 2)
    }

    #[test]
    fn records_logs_progress_and_honours_cancel() {
        let host = TestHost::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                host.cancel();
            });
            let started = Instant::now();
            let r = host.run(|ctx| handler(ctx, 21));
            assert_eq!(r.unwrap_err(), JobError::cancelled());
            assert!(started.elapsed() < Duration::from_secs(5));
        });
        let logs = host.logs();
        assert_eq!(logs.len(), 1, "{logs:?}");
        assert_eq!(logs[0].0, LogLevel::INFO);
        assert!(logs[0].1.starts_with("starting n=21"), "{logs:?}");
        assert_eq!(host.progress(), [(1, 2, "half".to_string())]);
        let fresh = TestHost::new();
        let ok = fresh.run(|ctx| {
            assert_eq!(ctx.job_name(), "test");
            assert_eq!(ctx.run_id(), "1");
            ctx.info("direct");
            Ok::<_, JobError>(ctx.attempt())
        });
        assert_eq!(ok, Ok(1));
        assert_eq!(fresh.logs(), [(LogLevel::INFO, "direct".to_string())]);
    }
}
