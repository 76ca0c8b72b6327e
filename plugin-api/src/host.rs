//! The host's side of a call: build the callback table from a Rust trait object, call the
//! plugin, turn the answer back into Rust types.
//!
//! This is the only place that builds a [`HostCtx`]; the `unsafe` needed to hand a stack
//! value across the boundary lives here, next to the reasoning that makes it sound.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use abi_stable::prefix_type::WithMetadata;
use abi_stable::std_types::RStr;

use crate::abi::{HostCtx, HostCtxRef, LogLevel, PluginError, PluginRef};

/// What the host provides to a running handler. Implementations must be thread-safe (a
/// handler may call from threads it spawns) and must not block for long except in `sleep`.
pub trait HostServices: Sync {
    /// Whether the run was asked to stop.
    fn is_cancelled(&self) -> bool;
    /// Sleeps up to `duration`; returns `true` (early) if the run is cancelled meanwhile.
    fn sleep(&self, duration: Duration) -> bool;
    /// Records a run-log line.
    fn log(&self, level: LogLevel, message: &str);
    /// Records progress.
    fn progress(&self, done: u64, total: u64, note: &str);
}

/// The facts of one call that the handler can read.
#[derive(Clone, Copy, Debug)]
pub struct CallInfo<'a> {
    /// The job's id.
    pub job_id: &'a str,
    /// The job's name.
    pub job_name: &'a str,
    /// The run's id.
    pub run_id: &'a str,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// Scheduled fire time, ms since the Unix epoch.
    pub fire_time_unix_ms: i64,
    /// When the host stops waiting, ms since the Unix epoch; 0 for none.
    pub deadline_unix_ms: i64,
}

/// Runs `handler` of `plugin` with `params_json`, blocking the calling thread until the
/// plugin returns. The plugin sees `services` through the callback table.
pub fn call(
    plugin: PluginRef,
    handler: &str,
    params_json: &str,
    info: &CallInfo<'_>,
    services: &dyn HostServices,
) -> Result<String, PluginError> {
    with_table(info, services, |ctx| {
        (plugin.run())(RStr::from_str(handler), RStr::from_str(params_json), ctx)
            .into_result()
            .map(|s| s.into_string())
    })
}

/// Builds the callback table for one call on this stack frame and hands it to `f`.
///
/// The table (and the `services` it points to) is valid exactly while `f` runs; `f` must not
/// let the reference escape (the SDK's context is closed before its entry points return).
pub(crate) fn with_table<R>(
    info: &CallInfo<'_>,
    services: &dyn HostServices,
    f: impl FnOnce(HostCtxRef) -> R,
) -> R {
    // A thin pointer to the fat `&dyn` on our stack: the callbacks cast it back.
    let services_ref: &dyn HostServices = services;
    let host = &services_ref as *const &dyn HostServices as *const c_void;
    let table = WithMetadata::new(HostCtx {
        host,
        job_id: erase(info.job_id),
        job_name: erase(info.job_name),
        run_id: erase(info.run_id),
        attempt: info.attempt,
        fire_time_unix_ms: info.fire_time_unix_ms,
        deadline_unix_ms: info.deadline_unix_ms,
        is_cancelled: cb_is_cancelled,
        sleep_ms: cb_sleep_ms,
        log: cb_log,
        progress: cb_progress,
    });
    // SAFETY: the prefix reference points into `table`, which lives on this stack frame until
    // `f` has returned; the SDK closes its context before returning and the ABI contract
    // forbids plugins to keep the table past the call.
    f(HostCtxRef(unsafe { table.as_prefix() }))
}

/// The table's strings are borrowed for the call only; the `'static` is the ABI's contract,
/// not a fact, which is why the SDK copies them before handing them to handler code.
fn erase(s: &str) -> RStr<'static> {
    // SAFETY: see above; the reference is valid for the whole call, and the SDK never exposes
    // it beyond the call.
    unsafe { std::mem::transmute::<RStr<'_>, RStr<'static>>(RStr::from_str(s)) }
}

/// Recovers the services from the opaque pointer.
///
/// # Safety
/// `host` must be the pointer built in [`call`], during that call.
unsafe fn services<'a>(host: *const c_void) -> &'a dyn HostServices {
    // SAFETY: guaranteed by the caller.
    unsafe { *(host as *const &dyn HostServices) }
}

// The callbacks run host code on behalf of the plugin: a panic here would unwind across
// `extern "C"` and abort the host, so each is wrapped; a panicking callback degrades to a
// conservative answer (cancelled, dropped line).

extern "C" fn cb_is_cancelled(host: *const c_void) -> bool {
    // SAFETY: the plugin only calls us with the pointer from our table, during the call.
    catch_unwind(AssertUnwindSafe(|| {
        unsafe { services(host) }.is_cancelled()
    }))
    .unwrap_or(true)
}

extern "C" fn cb_sleep_ms(host: *const c_void, ms: u64) -> bool {
    // SAFETY: as above.
    catch_unwind(AssertUnwindSafe(|| {
        unsafe { services(host) }.sleep(Duration::from_millis(ms))
    }))
    .unwrap_or(true)
}

extern "C" fn cb_log(host: *const c_void, level: LogLevel, message: RStr<'_>) {
    // SAFETY: as above.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        unsafe { services(host) }.log(level, message.as_str());
    }));
}

extern "C" fn cb_progress(host: *const c_void, done: u64, total: u64, note: RStr<'_>) {
    // SAFETY: as above.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        unsafe { services(host) }.progress(done, total, note.as_str());
    }));
}
