//! The stable ABI: every type that crosses between the host and a plugin `cdylib`.
//!
//! # Evolution rules (read before changing anything here)
//!
//! A plugin built today must keep loading into tomorrow's host, and the other way round, so:
//!
//! 1. **Append only.** New fields go at the end of a prefix type ([`PluginMod`], [`HandlerInfo`],
//!    [`HostCtx`]), after the field marked `#[sabi(last_prefix_field)]`, which never moves. Their
//!    accessors return `Option`: a value built by an older peer reads as `None`, and the caller
//!    must cope (fall back, or refuse with a message that names the version).
//! 2. **Never change a field's type, order or meaning**, never remove one. Deprecate instead.
//! 3. **No exhaustive enums.** Codes that may grow ([`ErrorKind`], [`LogLevel`]) are
//!    `#[repr(transparent)]` newtypes over `u8` with associated constants; an unknown code is
//!    read as the most general one (`failed`, `info`).
//! 4. **Plain structs are frozen.** [`PluginError`] is `repr(C)` and not a prefix type; it
//!    carries an optional JSON `data` field for anything a later version wants to add.
//! 5. **The package version is part of the ABI.** abi_stable compares the Cargo version of this
//!    crate for every type: it must stay `1.x` (a change of major, or of minor while on 0.x,
//!    makes every built plugin incompatible). Additive changes bump the minor.
//! 6. The host accepts plugins built against an older *or* newer `1.x` interface: it checks the
//!    layouts in both directions (abi_stable alone only accepts newer plugins) and then relies on
//!    rule 1. See `takt-host`'s loader.
//!
//! Everything here is `extern "C"`-safe; nothing here may panic across the boundary (the SDK
//! wraps every exported function in `catch_unwind`, the host wraps its callbacks).

use std::ffi::c_void;

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{ROption, RResult, RStr, RString, RVec};
use abi_stable::{StableAbi, package_version_strings};

/// The version of this interface crate that a plugin or host was compiled against.
///
/// Plugins report it in [`PluginMod::api_version`]; the host refuses a different major version
/// with a message naming both.
pub const API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What went wrong in a handler. An open set: unknown codes mean [`ErrorKind::FAILED`].
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorKind(pub u8);

impl ErrorKind {
    /// The handler ran and failed.
    pub const FAILED: ErrorKind = ErrorKind(0);
    /// The params JSON did not fit the handler's parameter type.
    pub const INVALID_PARAMS: ErrorKind = ErrorKind(1);
    /// The handler stopped because the host asked it to.
    pub const CANCELLED: ErrorKind = ErrorKind(2);
    /// The handler panicked; the SDK caught it.
    pub const PANICKED: ErrorKind = ErrorKind(3);
    /// The plugin has no handler of that name.
    pub const UNKNOWN_HANDLER: ErrorKind = ErrorKind(4);

    /// The lowercase name used in run records and logs.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::INVALID_PARAMS => "invalid-params",
            ErrorKind::CANCELLED => "cancelled",
            ErrorKind::PANICKED => "panicked",
            ErrorKind::UNKNOWN_HANDLER => "unknown-handler",
            _ => "failed",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Severity of a run-log line. An open set: unknown codes mean [`LogLevel::INFO`].
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogLevel(pub u8);

impl LogLevel {
    /// Very detailed tracing.
    pub const TRACE: LogLevel = LogLevel(0);
    /// Debugging detail.
    pub const DEBUG: LogLevel = LogLevel(1);
    /// Normal progress.
    pub const INFO: LogLevel = LogLevel(2);
    /// Something unexpected that did not stop the run.
    pub const WARN: LogLevel = LogLevel(3);
    /// A failure.
    pub const ERROR: LogLevel = LogLevel(4);

    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::TRACE => "trace",
            LogLevel::DEBUG => "debug",
            LogLevel::WARN => "warn",
            LogLevel::ERROR => "error",
            _ => "info",
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A handler's failure as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// A lowercase, human-readable message.
    pub message: RString,
    /// Whether trying again may succeed (the host's retry policy decides whether it does).
    pub retryable: bool,
    /// Optional JSON with details (for example the output tails of a failed program).
    pub data: ROption<RString>,
}

/// One handler a plugin offers.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HandlerInfoRef)))]
pub struct HandlerInfo {
    /// The handler's name inside the plugin (`clean_expired_tokens`); the host addresses it as
    /// `plugin::handler`.
    pub name: RStr<'static>,
    /// One line for operators.
    pub description: RStr<'static>,
    /// A JSON schema of the params, if the plugin ships one.
    pub params_schema: ROption<RStr<'static>>,
    /// The timeout to use when the job does not set one, in milliseconds.
    #[sabi(last_prefix_field)]
    pub default_timeout_ms: ROption<u64>,
}

/// The host's callback table and the facts of one call, valid for the duration of that call.
///
/// The host builds it on its stack for each call; `host` points at host state that only the
/// callbacks interpret. Strings are borrowed from the host and must not be kept after the call
/// returns (the SDK copies what it exposes).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostCtxRef)))]
pub struct HostCtx {
    /// Opaque host state, passed back to every callback.
    pub host: *const c_void,
    /// The job's id.
    pub job_id: RStr<'static>,
    /// The job's name.
    pub job_name: RStr<'static>,
    /// The run's id.
    pub run_id: RStr<'static>,
    /// 1 for the first attempt, 2 for the first retry, …
    pub attempt: u32,
    /// The scheduled fire time, milliseconds since the Unix epoch.
    pub fire_time_unix_ms: i64,
    /// When the host will stop waiting, milliseconds since the Unix epoch; 0 when unbounded.
    pub deadline_unix_ms: i64,
    /// Whether the host asked the run to stop (timeout or cancel); cheap, poll it often.
    pub is_cancelled: extern "C" fn(host: *const c_void) -> bool,
    /// Sleeps up to `ms` milliseconds; returns `true` (early) when the run is cancelled.
    pub sleep_ms: extern "C" fn(host: *const c_void, ms: u64) -> bool,
    /// Appends a line to the run's log.
    pub log: extern "C" fn(host: *const c_void, level: LogLevel, message: RStr<'_>),
    /// Reports progress: `done` of `total` units (total 0 = unknown), with a note.
    #[sabi(last_prefix_field)]
    pub progress: extern "C" fn(host: *const c_void, done: u64, total: u64, note: RStr<'_>),
}

/// A plugin's root module: what `#[export_root_module]` hands the host.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginRef)))]
pub struct PluginMod {
    /// The plugin's name: lowercase letters, digits, `_` and `-`; the first half of every
    /// HandlerType it serves (`name::handler`).
    pub name: RStr<'static>,
    /// The plugin's own version (its Cargo package version).
    pub version: RStr<'static>,
    /// The [`API_VERSION`] the plugin was compiled against.
    pub api_version: RStr<'static>,
    /// `cfg!(panic = "unwind")` of the plugin build. A plugin built with `panic = "abort"`
    /// would take the whole host down on its first panic, so the host refuses it.
    pub panic_unwind: bool,
    /// The handlers this plugin serves.
    pub handlers: extern "C" fn() -> RVec<HandlerInfoRef>,
    /// Runs one handler; blocking; returns the result JSON or an error.
    #[sabi(last_prefix_field)]
    pub run: extern "C" fn(
        handler: RStr<'_>,
        params_json: RStr<'_>,
        ctx: HostCtxRef,
    ) -> RResult<RString, PluginError>,
}

impl RootModule for PluginRef {
    abi_stable::declare_root_module_statics! {PluginRef}
    const BASE_NAME: &'static str = "takt_plugin";
    const NAME: &'static str = "takt_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}
