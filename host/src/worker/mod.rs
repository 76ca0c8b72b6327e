//! Process isolation: plugins served by worker child processes the host can kill.
//!
//! A worker is the same program as the host (`takt`, or an embedding program that calls
//! [`serve_if_worker`] first thing in `main`) started with [`WORKER_FLAG`]: it loads *one*
//! plugin file with the host's own loader checks and serves calls over its standard input
//! and output ([`protocol`]: length-prefixed JSON frames — call, cancel, log, progress, done).
//! It is just another host of the same plugin file: the calls go through
//! `takt_plugin_api::host::call` exactly as in-process calls do, so neither the ABI nor the
//! SDK knows about isolation.
//!
//! What isolation buys, and how:
//!
//! * **A crash fails one run.** A segfault, an abort, a stack overflow or an allocation
//!   failure kills the worker, not the host; the run fails with the signal or exit code, a
//!   recognised cause (stack overflow, out of memory) and the worker's last lines, and the
//!   next call gets a fresh worker. One call at a time per worker, so one crash is one run.
//! * **A timeout stops everything.** After the cancel and the grace period the executor
//!   kills the worker's whole tree (its process group on Unix, its kill-on-close Job Object
//!   on Windows) instead of abandoning a thread; the run is timed out *and* nothing of it
//!   runs on.
//! * **Memory can be capped** ([`WorkerSettings::memory_limit`]; Unix `setrlimit`, Windows
//!   the Job Object limit).
//! * **Old versions really leave.** A pool per plugin version: when a hot swap retires a
//!   version and its last run ends, its workers exit and the library is unmapped with them
//!   (in-process libraries are never unloaded).
//!
//! The host's end: [`pool`] (processes pooled and reused per version, bounded in number,
//! started lazily, ended when idle). Parent death: a worker exits when its input pipe ends,
//! which the kernel closes when the host dies however it dies; on Windows the Job Object
//! dies with the host's handle to it as well.

mod pool;
mod protocol;
mod serve;
mod sys;

use std::path::PathBuf;

pub use pool::{WorkerPool, WorkerSettings, WorkerStats, Workers};
pub use protocol::PROTOCOL;

pub(crate) use pool::{PoolKey, bytes_text};
pub(crate) use protocol::{HandlerFrame, PluginMeta};

/// The first argument that makes a program a worker. Chosen so that it cannot be an argument
/// an embedding program already understands.
pub const WORKER_FLAG: &str = "--takt-worker";

/// Serves as a worker and never returns when this process was started as one (its first
/// argument is [`WORKER_FLAG`]); returns at once otherwise.
///
/// The `takt` binary calls it before parsing its command line. An embedding program that
/// isolates plugins with [`WorkerProgram::CurrentExe`] must call it first thing in `main`,
/// before it opens databases or starts services: otherwise each worker would start a second
/// copy of the program (the host notices only by the missing hello, after
/// [`WorkerSettings::start_timeout`]).
pub fn serve_if_worker() {
    let mut args = std::env::args_os();
    let _program = args.next();
    if args.next().is_some_and(|a| a == WORKER_FLAG) {
        let rest: Vec<_> = args.collect();
        serve::serve(&rest);
    }
}

/// Which program the host starts as its workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerProgram {
    /// This program itself: right for `takt`, and for an embedding program whose `main`
    /// calls [`serve_if_worker`] first.
    CurrentExe,
    /// Another program that serves worker mode: an installed `takt` of the host's version, or
    /// a small program of one's own that only calls [`serve_if_worker`].
    Path(PathBuf),
}

impl WorkerProgram {
    /// The default of a host: this program when it is `takt` (its file is named `takt`),
    /// else none — an embedding program opts in, so that it is never started as a worker
    /// unprepared.
    pub fn default_for_this_program() -> Option<WorkerProgram> {
        let exe = std::env::current_exe().ok()?;
        (exe.file_stem().and_then(|s| s.to_str()) == Some("takt"))
            .then_some(WorkerProgram::CurrentExe)
    }

    /// The program's path.
    pub fn resolve(&self) -> std::io::Result<PathBuf> {
        match self {
            WorkerProgram::CurrentExe => std::env::current_exe(),
            WorkerProgram::Path(p) => Ok(p.clone()),
        }
    }
}
