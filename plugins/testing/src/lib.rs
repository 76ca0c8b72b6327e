//! `testing`: a plugin of deliberately awkward handlers for takt's host tests.
//!
//! Not an example to copy: these handlers panic, ignore cancellation, flood the run log and
//! fail on request, so that the host's isolation, timeout, log-capping and error-recording
//! paths can be exercised against a real `cdylib`. Build with
//! `cargo build -p takt-plugin-testing`; the library is
//! `target/<profile>/libtakt_plugin_testing.so`.
//!
//! | handler    | params                                   | result / behaviour                          |
//! |------------|------------------------------------------|---------------------------------------------|
//! | `panic`    | `{ "message" }`                          | panics with the message                     |
//! | `stubborn` | `{ "seconds" }`                          | sleeps, never looks at cancellation         |
//! | `polite`   | `{ "seconds" }`                          | sleeps, stops at once when cancelled        |
//! | `chatty`   | `{ "lines", "bytes" = 80 }`              | emits `lines` log lines, `{ "lines" }`      |
//! | `fail`     | `{ "message", "retryable" = false }`     | fails with data `{ "hint": "test" }`        |
//! | `echo`     | any JSON                                 | the params and the run's facts              |
//! | `noop`     | none                                     | `null`: the cheapest call, for benchmark B10 |
//! | `straggler`| `{ "panic" = false }`                    | leaves a thread that logs after the call    |
//! | `crash`    | `{ "kind": "segv" \| "abort" \| "stack" \| "oom" }` | ends its process: null write, abort, stack overflow, unbounded allocation (isolated calls only!) |
//! | `orphan`   | `{ "seconds" }`                          | starts a child process, logs its pid, then sleeps ignoring cancellation |

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use takt_plugin_api::abi::LogLevel;
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};

/// The step of the sleeping handlers.
const STEP: Duration = Duration::from_millis(50);

fn plugin() -> Plugin {
    Plugin::new("testing")
        .handler("panic", "panics with the given message", panic)
        .handler(
            "stubborn",
            "sleeps for a while and ignores cancellation",
            stubborn,
        )
        .handler(
            "polite",
            "sleeps for a while and stops promptly when cancelled",
            polite,
        )
        .handler("chatty", "writes many run-log lines", chatty)
        .handler("fail", "fails with the given message", fail)
        .handler("echo", "returns its params and the facts of the run", echo)
        .handler("noop", "does nothing (measures the cost of a call)", noop)
        .handler(
            "record",
            "appends the run's job and fire time to a file, then sleeps a while",
            record,
        )
        .handler(
            "straggler",
            "leaves a thread behind that keeps using the context after the call",
            straggler,
        )
        .handler(
            "crash",
            "ends the process that runs it (segv, abort, stack, oom): for process isolation",
            crash,
        )
        .handler(
            "orphan",
            "starts a child process and then ignores cancellation",
            orphan,
        )
}

/// Params of `crash`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CrashParams {
    kind: CrashKind,
}

/// How `crash` ends its process.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum CrashKind {
    /// A write through a null pointer: SIGSEGV (an access violation on Windows).
    Segv,
    /// `std::process::abort`: SIGABRT.
    Abort,
    /// Unbounded recursion: Rust's guard page reports a stack overflow and aborts.
    Stack,
    /// Allocates (and touches) 64 MiB after 64 MiB until the allocator fails: Rust reports
    /// "memory allocation of N bytes failed" and aborts. Without a memory cap this eats the
    /// machine's memory until the kernel kills the process: run it under a limit.
    Oom,
}

/// `testing::crash`: params `{ "kind": "segv" | "abort" | "stack" | "oom" }`; never returns.
///
/// What process isolation must survive. Called in process it takes the host down with it, so
/// only the isolation tests call it, in a worker.
fn crash(ctx: &JobContext, p: CrashParams) -> Result<(), JobError> {
    ctx.info(&format!("crashing on purpose: {:?}", p.kind));
    match p.kind {
        CrashKind::Segv => {
            // The address comes through black_box so the compiler cannot see the null and
            // turn the write into something else.
            let at = std::hint::black_box(0usize) as *mut u8;
            // SAFETY: none — this is the crash the handler exists to cause.
            unsafe { at.write_volatile(1) };
            Ok(())
        }
        CrashKind::Abort => std::process::abort(),
        CrashKind::Stack => {
            let depth = recurse(std::hint::black_box(1));
            Err(JobError::failed(format!("the stack held {depth} frames")))
        }
        CrashKind::Oom => {
            let mut held: Vec<Vec<u8>> = Vec::new();
            loop {
                held.push(vec![1u8; 64 << 20]);
                std::hint::black_box(&held);
            }
        }
    }
}

/// Recurses with 16 KiB of stack per frame until the stack runs out.
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth as u8; 16 << 10]);
    if std::hint::black_box(depth) == u64::MAX {
        return u64::from(frame[0]);
    }
    recurse(depth + 1) + u64::from(std::hint::black_box(frame[1]))
}

/// `testing::orphan`: params `{ "seconds": 5.0 }`, result `{ "slept": 5.0 }`.
///
/// Starts a child process that lives ten times as long (`sleep` on Unix, `ping` on Windows),
/// logs `child pid N`, then sleeps like `stubborn`, ignoring cancellation: after a timeout the
/// host must stop both, which only killing the worker's process tree does.
fn orphan(ctx: &JobContext, p: SleepParams) -> Result<Slept, JobError> {
    let total = duration(p.seconds)?;
    let child_secs = (total.as_secs_f64() * 10.0).ceil().max(1.0) as u64;
    #[cfg(unix)]
    let child = std::process::Command::new("sleep")
        .arg(child_secs.to_string())
        .spawn();
    #[cfg(windows)]
    let child = std::process::Command::new("ping")
        .args(["-n", &child_secs.to_string(), "127.0.0.1"])
        .stdout(std::process::Stdio::null())
        .spawn();
    let child = child.map_err(|e| JobError::failed(format!("cannot start the child: {e}")))?;
    ctx.info(&format!("child pid {}", child.id()));
    stubborn(ctx, p)
}

/// Params of `straggler`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StragglerParams {
    /// Panic after spawning the thread instead of returning.
    #[serde(default)]
    panic: bool,
}

/// `testing::straggler`: spawns a thread holding a clone of the context (and the tracing
/// dispatcher) that logs, reports progress and polls cancellation for 300 ms after the call
/// has returned (or panicked). The SDK must have closed the context by then, so none of it may
/// reach the host.
fn straggler(ctx: &JobContext, p: StragglerParams) -> Result<(), JobError> {
    let late = ctx.clone();
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    std::thread::spawn(move || {
        tracing::dispatcher::with_default(&dispatch, || {
            for i in 0..30 {
                std::thread::sleep(Duration::from_millis(10));
                late.info(&format!("late line {i}"));
                tracing::info!("late tracing line {i}");
                late.progress(i, 30, "late");
                let _ = late.is_cancelled();
            }
        });
    });
    ctx.info("straggler returns");
    if p.panic {
        panic!("straggler panics after spawning");
    }
    Ok(())
}

/// `testing::noop`: no params, returns `null`. Benchmark B10 measures the host-to-plugin call
/// overhead with it.
fn noop(_ctx: &JobContext, (): ()) -> Result<(), JobError> {
    Ok(())
}

takt_plugin_api::export_plugin!(plugin);

/// Params of `panic`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PanicParams {
    #[serde(default = "default_panic_message")]
    message: String,
}

fn default_panic_message() -> String {
    "panic requested by the test".to_string()
}

/// `testing::panic`: params `{ "message": "..." }` (default "panic requested by the test").
///
/// Panics with that message; the SDK must turn it into a `panicked` error.
fn panic(_ctx: &JobContext, p: PanicParams) -> Result<(), JobError> {
    panic!("{}", p.message)
}

/// Params of `stubborn` and `polite`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SleepParams {
    /// How long to sleep, in seconds.
    seconds: f64,
}

/// Result of `stubborn` and `polite`.
#[derive(Debug, Serialize)]
struct Slept {
    slept: f64,
}

/// `seconds` as a duration, or an `invalid-params` error.
fn duration(seconds: f64) -> Result<Duration, JobError> {
    Duration::try_from_secs_f64(seconds).map_err(|e| {
        JobError::invalid_params(format!(
            "invalid params: seconds: {seconds} is not a usable duration: {e}"
        ))
    })
}

/// `testing::stubborn`: params `{ "seconds": 2.0 }`, result `{ "slept": 2.0 }`.
///
/// Sleeps in 50 ms steps with `std::thread::sleep` and never looks at the context: a host
/// that cancels it can only stop waiting for it (and must then account for the thread it
/// leaves behind).
fn stubborn(_ctx: &JobContext, p: SleepParams) -> Result<Slept, JobError> {
    let total = duration(p.seconds)?;
    let start = Instant::now();
    loop {
        let left = total.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(STEP));
    }
    Ok(Slept { slept: p.seconds })
}

/// `testing::polite`: params `{ "seconds": 2.0 }`, result `{ "slept": 2.0 }`.
///
/// Sleeps in 50 ms steps with `ctx.sleep`, so a cancel ends it promptly with
/// `Err(JobError::cancelled())`.
fn polite(ctx: &JobContext, p: SleepParams) -> Result<Slept, JobError> {
    let total = duration(p.seconds)?;
    let start = Instant::now();
    loop {
        let left = total.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        ctx.sleep(left.min(STEP))?;
    }
    Ok(Slept { slept: p.seconds })
}

/// Params of `chatty`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChattyParams {
    /// How many lines to write.
    lines: u32,
    /// About how long each line is.
    #[serde(default = "default_bytes")]
    bytes: u32,
}

fn default_bytes() -> u32 {
    80
}

/// Result of `chatty`.
#[derive(Debug, Serialize)]
struct Chatted {
    lines: u32,
}

/// `testing::chatty`: params `{ "lines": 1000, "bytes": 80 }` (`bytes` defaults to 80), result
/// `{ "lines": 1000 }`.
///
/// Writes `lines` run-log lines of about `bytes` characters each, alternating an info line
/// through `tracing` (odd numbers) and a warn line through the context (even numbers); reports
/// progress every 100 lines and at the end.
fn chatty(ctx: &JobContext, p: ChattyParams) -> Result<Chatted, JobError> {
    let width = usize::try_from(p.bytes).unwrap_or(usize::MAX);
    let total = u64::from(p.lines);
    for i in 1..=p.lines {
        let line = padded(format!("line {i} of {}", p.lines), width);
        if i % 2 == 1 {
            tracing::info!(n = i, "{line}");
        } else {
            ctx.log(LogLevel::WARN, &line);
        }
        if i % 100 == 0 {
            ctx.progress(u64::from(i), total, "lines");
        }
    }
    if !p.lines.is_multiple_of(100) || p.lines == 0 {
        ctx.progress(total, total, "lines");
    }
    Ok(Chatted { lines: p.lines })
}

/// `text` followed by a space and dots up to `width` characters (never cut short).
fn padded(mut text: String, width: usize) -> String {
    if text.len() < width {
        text.push(' ');
        while text.len() < width {
            text.push('.');
        }
    }
    text
}

/// Params of `fail`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailParams {
    #[serde(default = "default_fail_message")]
    message: String,
    /// Whether the failure is marked retryable.
    #[serde(default)]
    retryable: bool,
}

fn default_fail_message() -> String {
    "failure requested by the test".to_string()
}

/// `testing::fail`: params `{ "message": "...", "retryable": false }`.
///
/// Returns `Err(JobError::failed(message))`, or `JobError::retryable` when `retryable`, with
/// the data `{ "hint": "test" }`.
fn fail(_ctx: &JobContext, p: FailParams) -> Result<(), JobError> {
    let e = if p.retryable {
        JobError::retryable(p.message)
    } else {
        JobError::failed(p.message)
    };
    Err(e.with_data(json!({ "hint": "test" })))
}

/// Result of `echo`.
#[derive(Debug, Serialize)]
struct Echo {
    params: Value,
    job_id: String,
    job_name: String,
    run_id: String,
    attempt: u32,
    fire_time_unix_ms: i64,
}

/// `testing::echo`: params any JSON (none reads as `{}`), result `{ "params", "job_id",
/// "job_name", "run_id", "attempt", "fire_time_unix_ms" }`.
///
/// Shows what the handler received: the params as decoded and the run's facts from the
/// context.
fn echo(ctx: &JobContext, params: Value) -> Result<Echo, JobError> {
    Ok(Echo {
        params,
        job_id: ctx.job_id().to_string(),
        job_name: ctx.job_name().to_string(),
        run_id: ctx.run_id().to_string(),
        attempt: ctx.attempt(),
        fire_time_unix_ms: unix_ms(ctx.fire_time()),
    })
}

/// Params of `record`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RecordParams {
    /// The file to append to (created if missing).
    path: String,
    /// How long to sleep after recording (interruptibly).
    #[serde(default)]
    sleep_ms: u64,
    /// A marker file: the first call that creates it (atomically, so once across processes)
    /// fails after recording and sleeping; every later call succeeds, and so does every call
    /// while the marker cannot be created (its directory missing: a test arms the failure by
    /// creating the directory).
    #[serde(default)]
    fail_once: Option<String>,
}

/// `testing::record`: params `{ "path": "...", "sleepMs": 0, "failOnce": "marker" }`.
/// Appends one line
/// `<job id> <fire time ms> <run id> <attempt> <pid>` to `path`, then sleeps `sleepMs`.
///
/// The multi-node tests count body executions with it, independently of what the store
/// recorded: the file is opened in append mode and each line is one `write`, so lines of
/// concurrent processes never interleave.
fn record(ctx: &JobContext, p: RecordParams) -> Result<(), JobError> {
    use std::io::Write;
    let line = format!(
        "{} {} {} {} {}\n",
        ctx.job_id(),
        unix_ms(ctx.fire_time()),
        ctx.run_id(),
        ctx.attempt(),
        std::process::id()
    );
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p.path)
        .map_err(|e| JobError::failed(format!("cannot open {}: {e}", p.path)))?;
    f.write_all(line.as_bytes())
        .map_err(|e| JobError::failed(format!("cannot append to {}: {e}", p.path)))?;
    if p.sleep_ms > 0 {
        ctx.sleep(Duration::from_millis(p.sleep_ms))?;
    }
    if let Some(marker) = &p.fail_once
        && std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(marker)
            .is_ok()
    {
        return Err(JobError::failed(format!("failing once (created {marker})")));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch (negative before it), saturating.
fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_padded_to_about_the_width() {
        assert_eq!(padded("line 1".into(), 10), "line 1 ...");
        assert_eq!(padded("line 1".into(), 3), "line 1");
        assert_eq!(padded("line 1".into(), 7), "line 1 ");
        assert_eq!(padded("line 12 of 12".into(), 80).len(), 80);
    }

    #[test]
    fn fire_times_convert_both_sides_of_the_epoch() {
        assert_eq!(unix_ms(UNIX_EPOCH), 0);
        assert_eq!(
            unix_ms(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
            1_700_000_000_123
        );
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_millis(1500)), -1500);
    }

    #[test]
    fn bad_durations_are_invalid_params() {
        assert_eq!(duration(0.25).unwrap(), Duration::from_millis(250));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = duration(bad).unwrap_err();
            assert_eq!(e.kind(), takt_plugin_api::abi::ErrorKind::INVALID_PARAMS);
            assert!(e.message().starts_with("invalid params: seconds: "), "{e}");
        }
    }
}
