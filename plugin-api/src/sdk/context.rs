//! [`JobContext`]: the handler's view of the run and of the host.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use abi_stable::std_types::RStr;

use super::JobError;
use crate::abi::{HostCtxRef, LogLevel};

/// The run a handler is executing, and the host's services for it.
///
/// Cheap to clone, and safe to keep: when the call returns, the SDK closes the context, after
/// which every callback becomes a no-op (logs are dropped, `is_cancelled` reports `true`). So a
/// thread or task that outlives its run can never reach into freed host state.
#[derive(Clone)]
pub struct JobContext {
    inner: Arc<Inner>,
}

struct Inner {
    /// `Some` while the call is running. The read lock is held for the duration of every
    /// callback so that closing waits for callbacks in flight.
    raw: RwLock<Option<HostCtxRef>>,
    /// `job_id`, `job_name` and `run_id` back to back: one allocation per call, not three.
    ids: Box<str>,
    /// Where `job_id` ends and `job_name` ends in `ids`.
    ends: [usize; 2],
    attempt: u32,
    fire_time_unix_ms: i64,
    deadline_unix_ms: i64,
}

// SAFETY: `HostCtxRef` holds a raw pointer to host state. The host's contract (see
// `crate::host`) is that its callbacks are thread-safe and that the state outlives the call;
// `close` (run before the call returns) ends every use of the pointer, guarded by the lock.
unsafe impl Send for Inner {}
// SAFETY: as above; all access to the pointer goes through the `RwLock`.
unsafe impl Sync for Inner {}

impl JobContext {
    /// Copies what it exposes out of the host's table: the strings there are only borrowed.
    pub(crate) fn open(raw: HostCtxRef) -> JobContext {
        let (job_id, job_name, run_id) = (
            raw.job_id().as_str(),
            raw.job_name().as_str(),
            raw.run_id().as_str(),
        );
        let mut ids = String::with_capacity(job_id.len() + job_name.len() + run_id.len());
        ids.push_str(job_id);
        ids.push_str(job_name);
        ids.push_str(run_id);
        JobContext {
            inner: Arc::new(Inner {
                ids: ids.into_boxed_str(),
                ends: [job_id.len(), job_id.len() + job_name.len()],
                attempt: raw.attempt(),
                fire_time_unix_ms: raw.fire_time_unix_ms(),
                deadline_unix_ms: raw.deadline_unix_ms(),
                raw: RwLock::new(Some(raw)),
            }),
        }
    }

    /// Ends all use of the host's table; waits for callbacks in flight.
    pub(crate) fn close(&self) {
        if let Ok(mut raw) = self.inner.raw.write() {
            *raw = None;
        }
    }

    fn with_raw<R>(&self, f: impl FnOnce(HostCtxRef) -> R) -> Option<R> {
        let guard = self.inner.raw.read().ok()?;
        guard.map(f)
    }

    /// The job's id.
    pub fn job_id(&self) -> &str {
        &self.inner.ids[..self.inner.ends[0]]
    }

    /// The job's name.
    pub fn job_name(&self) -> &str {
        &self.inner.ids[self.inner.ends[0]..self.inner.ends[1]]
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.inner.ids[self.inner.ends[1]..]
    }

    /// 1 for the first attempt, 2 for the first retry, …
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// The scheduled fire time (not the moment the run started).
    pub fn fire_time(&self) -> SystemTime {
        from_unix_ms(self.inner.fire_time_unix_ms)
    }

    /// When the host stops waiting for this run, if it has a timeout.
    pub fn deadline(&self) -> Option<SystemTime> {
        (self.inner.deadline_unix_ms != 0).then(|| from_unix_ms(self.inner.deadline_unix_ms))
    }

    /// Whether the host asked the run to stop (timeout, cancel, shutdown). Poll it in loops;
    /// after the call has returned it is always `true`.
    pub fn is_cancelled(&self) -> bool {
        self.with_raw(|raw| (raw.is_cancelled())(raw.host()))
            .unwrap_or(true)
    }

    /// `Err(JobError::cancelled())` when the run was asked to stop, for use with `?`.
    pub fn check_cancelled(&self) -> Result<(), JobError> {
        if self.is_cancelled() {
            Err(JobError::cancelled())
        } else {
            Ok(())
        }
    }

    /// Sleeps for `d`, waking early when the run is cancelled (then `Err(cancelled)`).
    ///
    /// The host does the waiting, so a cancel interrupts the sleep at once.
    pub fn sleep(&self, d: Duration) -> Result<(), JobError> {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let cancelled = self
            .with_raw(|raw| (raw.sleep_ms())(raw.host(), ms))
            .unwrap_or(true);
        if cancelled {
            Err(JobError::cancelled())
        } else {
            Ok(())
        }
    }

    /// Appends a line to the run's log. (`tracing` events inside the handler arrive here too.)
    pub fn log(&self, level: LogLevel, message: &str) {
        self.with_raw(|raw| (raw.log())(raw.host(), level, RStr::from_str(message)));
    }

    /// `log(LogLevel::INFO, message)`.
    pub fn info(&self, message: &str) {
        self.log(LogLevel::INFO, message);
    }

    /// `log(LogLevel::WARN, message)`.
    pub fn warn(&self, message: &str) {
        self.log(LogLevel::WARN, message);
    }

    /// `log(LogLevel::ERROR, message)`.
    pub fn error(&self, message: &str) {
        self.log(LogLevel::ERROR, message);
    }

    /// Reports progress: `done` of `total` units (`total` 0 when unknown), with a short note.
    pub fn progress(&self, done: u64, total: u64, note: &str) {
        self.with_raw(|raw| (raw.progress())(raw.host(), done, total, RStr::from_str(note)));
    }
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("job_id", &self.job_id())
            .field("job_name", &self.job_name())
            .field("run_id", &self.run_id())
            .field("attempt", &self.inner.attempt)
            .finish_non_exhaustive()
    }
}

fn from_unix_ms(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}
