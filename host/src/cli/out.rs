//! Everything the `takt` command writes to stdout and stderr goes through here, so that a
//! closed or failing stream is handled in one place instead of at every print.
//!
//! `std`'s `println!` panics when stdout is gone (`takt job list | head -1` closes it after
//! one line: "failed printing to stdout: Broken pipe", exit 101). Rust ignores `SIGPIPE`, so
//! the write returns `EPIPE` instead, and this module turns it into what a Unix tool does:
//!
//! * **One-shot commands** ([`Mode::OneShot`], the default): [`outln!`] returns
//!   [`StdoutClosed`], the command unwinds through its `?`s (dropping stores, which closes
//!   them cleanly) and [`crate::cli::main`] exits 0 without a message, as `ls | head` does.
//!   Any other write error (a full disk behind `> file`) is a failure, exit 1.
//! * **`takt run`** ([`Mode::KeepRunning`]): a host must never stop scheduling, or skip its
//!   drain, because nobody reads its run lines any more. The first failed write logs one
//!   warning (to stderr, through `tracing`), later lines are dropped, and [`outln!`] never
//!   returns an error.
//!
//! stderr is written with [`errln!`], which ignores failures: there is nowhere left to report
//! them, and a diagnostic must never turn into a panic.

use std::fmt;
use std::io::{self, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// How a failed write to stdout is handled (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The command stops quietly on a closed stdout (exit 0) and fails on another error.
    OneShot,
    /// Writes never fail: the first error is logged once and later output is dropped.
    KeepRunning,
}

static MODE: AtomicU8 = AtomicU8::new(0);
/// Set by a command printing JSON lines (`takt run --json`): its human lines ([`outln!`]) go to
/// stderr, so that stdout holds nothing but one JSON document per line ([`json_line`]).
static TEXT_TO_STDERR: AtomicBool = AtomicBool::new(false);
/// Set once a write failed in [`Mode::KeepRunning`]: nothing more is written.
static GONE: AtomicBool = AtomicBool::new(false);

/// Sets how failed writes are handled, for the rest of the process.
pub(crate) fn set_mode(mode: Mode) {
    MODE.store(
        match mode {
            Mode::OneShot => 0,
            Mode::KeepRunning => 1,
        },
        Ordering::SeqCst,
    );
}

fn mode() -> Mode {
    match MODE.load(Ordering::SeqCst) {
        0 => Mode::OneShot,
        _ => Mode::KeepRunning,
    }
}

/// stdout was closed by its reader: the command ends quietly with exit code 0.
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub(crate) struct StdoutClosed;

/// Sends the human lines to stderr for the rest of the process (see [`TEXT_TO_STDERR`]).
pub(crate) fn text_to_stderr() {
    TEXT_TO_STDERR.store(true, Ordering::SeqCst);
}

/// Writes `value` as one line of JSON to stdout, whatever [`text_to_stderr`] says.
pub(crate) fn json_line(value: &serde_json::Value) -> anyhow::Result<()> {
    stdout_write(format_args!("{value}\n"))
}

/// Writes `args` to stdout (locked, so a line is never interleaved with another thread's) and
/// flushes it, so that a closed pipe is noticed now rather than at exit.
pub(crate) fn write(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    if TEXT_TO_STDERR.load(Ordering::Relaxed) {
        write_err(args);
        return Ok(());
    }
    stdout_write(args)
}

fn stdout_write(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    if GONE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut stdout = io::stdout().lock();
    let result = stdout.write_fmt(args).and_then(|()| stdout.flush());
    drop(stdout);
    match result {
        Ok(()) => Ok(()),
        Err(e) => match mode() {
            Mode::OneShot if e.kind() == io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
            Mode::OneShot => Err(anyhow::anyhow!("cannot write to stdout: {e}")),
            Mode::KeepRunning => {
                if !GONE.swap(true, Ordering::SeqCst) {
                    tracing::warn!(
                        "cannot write to stdout ({e}): run lines are no longer printed; the host \
                         keeps running and records every run in the database (see takt runs)"
                    );
                }
                Ok(())
            }
        },
    }
}

/// Writes `args` to stderr, ignoring failures (see the module documentation).
pub(crate) fn write_err(args: fmt::Arguments<'_>) {
    let mut stderr = io::stderr().lock();
    let _ = stderr.write_fmt(args).and_then(|()| stderr.flush());
}

/// Whether `e` is (or wraps) [`StdoutClosed`].
pub(crate) fn is_closed(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<StdoutClosed>().is_some())
}

/// `println!` for the CLI (in scope in every `cli` module through `#[macro_use]`): evaluates to `anyhow::Result<()>` (see the module documentation),
/// so call sites end in `?`.
macro_rules! outln {
    () => {
        $crate::cli::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for the CLI, like [`outln!`] without the newline.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!($($arg)*))
    };
}

/// `eprintln!` for the CLI: never panics, ignores a closed stderr.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::out::write_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}
