//! The worker's side: load one plugin file, say hello, serve calls until the host goes.
//!
//! Two threads share the work by passing a *reader role*: the thread holding it reads frames
//! from the host; when it reads a call it hands the role to the other thread (one condvar
//! notify) and runs the call itself, so a call starts on the thread that read it, without a
//! wake-up in between (B11), while the other thread is already reading — the host's `cancel`
//! for the running call arrives there. When the call returns its thread writes `done` and
//! waits for the role again. So a worker has two serving threads (made alike, with std's
//! default stack like the host's own call threads, so a plugin meets the same stack in and
//! out of process) and an idle `main`, besides what the plugin starts; an idle worker blocks
//! in `read`.
//!
//! The host's end of the input pipe closing (the host stopped it, or died: the kernel closes
//! a dead process's pipes) ends the worker at once, whatever the plugin is doing: on Unix by
//! `SIGKILL` to its own process group (which takes anything the plugin started along), on
//! Windows by exiting (the host's kill-on-close Job Object holds the rest).

use std::ffi::OsString;
use std::fs::File;
use std::io::BufReader;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use takt_plugin_api::abi::{LogLevel, PluginRef};
use takt_plugin_api::host::{self, CallInfo, HostServices};

use super::protocol::{
    CallFrame, CallOutcome, EXIT_PROTOCOL, FromWorker, Hello, PROTOCOL, RefusalFrame, ToWorker,
    read_frame, write_frame,
};
use super::sys;

/// What the host passes on the command line after [`super::WORKER_FLAG`].
#[derive(Debug, PartialEq, Eq)]
struct Args {
    protocol: u32,
    plugin: PathBuf,
    memory_limit: Option<u64>,
}

/// `PROTOCOL PLUGIN [--memory-limit BYTES]`.
fn parse(args: &[OsString]) -> Result<Args, String> {
    let mut it = args.iter();
    let protocol = it
        .next()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse::<u32>().ok())
        .ok_or("the first argument must be the protocol version")?;
    let plugin = PathBuf::from(
        it.next()
            .ok_or("the second argument must be the plugin file")?,
    );
    let mut memory_limit = None;
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--memory-limit") => {
                let v = it
                    .next()
                    .and_then(|v| v.to_str())
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or("--memory-limit needs a number of bytes")?;
                memory_limit = Some(v);
            }
            _ => return Err(format!("unknown argument {}", a.to_string_lossy())),
        }
    }
    Ok(Args {
        protocol,
        plugin,
        memory_limit,
    })
}

/// The worker's `main`: never returns.
pub(crate) fn serve(args: &[OsString]) -> ! {
    let args = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("takt worker: {e}; this mode is started by a takt host, not by hand");
            std::process::exit(2);
        }
    };
    if args.protocol != PROTOCOL {
        eprintln!(
            "takt worker: the host speaks worker protocol {}, this program {PROTOCOL}; use a \
             worker program of the same takt version as the host",
            args.protocol
        );
        std::process::exit(EXIT_PROTOCOL);
    }
    // Before anything can print: the protocol moves to private descriptors, so a plugin's
    // `println!` (or a child it starts, reading its stdin) cannot corrupt the frames.
    let (input, output) = match sys::take_protocol_pipes() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("takt worker: cannot set up the protocol pipes: {e}");
            std::process::exit(2);
        }
    };
    if let Some(limit) = args.memory_limit
        && let Err(e) = sys::limit_memory(limit)
    {
        eprintln!("takt worker: cannot limit its memory to {limit} bytes: {e}");
        std::process::exit(2);
    }
    let loaded = crate::plugins::open_shadow(&args.plugin);
    let plugin = match &loaded {
        Ok(p) => Ok(p.meta()),
        Err(r) => Err(RefusalFrame {
            reason: r.reason.clone(),
            fix: r.fix.clone(),
        }),
    };
    let hello = FromWorker::Hello(Hello {
        protocol: PROTOCOL,
        pid: std::process::id(),
        takt: env!("CARGO_PKG_VERSION").to_string(),
        plugin,
    });
    let output = Mutex::new(output);
    if write_frame(&mut *lock(&output), &hello).is_err() {
        host_gone();
    }
    let module = match loaded.ok().and_then(|p| p.module()) {
        Some(m) => m,
        // Refused: the host has the reason and closes our input.
        None => wait_for_host_to_go(input),
    };
    let server = Arc::new(Server {
        module,
        input: Mutex::new(BufReader::new(input)),
        output,
        reader_taken: Mutex::new(false),
        turn: Condvar::new(),
        current: Mutex::new(None),
        busy: AtomicBool::new(false),
    });
    // Both serving threads are made alike (std's default stack, like the host's own call
    // threads), so a call meets the same stack whichever thread reads it; `main` only waits.
    for _ in 0..2 {
        let server = server.clone();
        if std::thread::Builder::new()
            .name("takt-worker".into())
            .spawn(move || server.work())
            .is_err()
        {
            eprintln!("takt worker: cannot start its serving threads");
            std::process::exit(2);
        }
    }
    loop {
        std::thread::park();
    }
}

/// A refused worker has nothing to serve; it ends with its input.
fn wait_for_host_to_go(mut input: File) -> ! {
    let _ = std::io::copy(&mut input, &mut std::io::sink());
    host_gone()
}

/// The host closed our input (it retired this worker, or it died).
fn host_gone() -> ! {
    sys::end_worker()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Server {
    module: PluginRef,
    /// Read only by the thread holding the reader role.
    input: Mutex<BufReader<File>>,
    /// Frames out; a plugin may log from several threads at once.
    output: Mutex<File>,
    reader_taken: Mutex<bool>,
    turn: Condvar,
    /// The running call, for the cancels the reading thread receives.
    current: Mutex<Option<Arc<CallControl>>>,
    /// A call is running: the host sends the next one only after its `done`.
    busy: AtomicBool,
}

impl Server {
    fn work(&self) -> ! {
        loop {
            {
                let mut taken = lock(&self.reader_taken);
                while *taken {
                    taken = self
                        .turn
                        .wait(taken)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                *taken = true;
            }
            let call = self.read_until_call();
            *lock(&self.reader_taken) = false;
            self.turn.notify_one();
            self.run(call);
        }
    }

    /// Reads frames (applying cancels) until a call arrives; the end of the input ends the
    /// process.
    fn read_until_call(&self) -> (CallFrame, Arc<CallControl>) {
        let mut input = lock(&self.input);
        loop {
            match read_frame::<ToWorker>(&mut *input) {
                Ok(Some(ToWorker::Call(frame))) => {
                    if self.busy.swap(true, Ordering::AcqRel) {
                        eprintln!(
                            "takt worker: protocol error: a call arrived while call {} runs",
                            lock(&self.current).as_ref().map_or(0, |c| c.id)
                        );
                        host_gone();
                    }
                    let control = Arc::new(CallControl::new(frame.id));
                    *lock(&self.current) = Some(control.clone());
                    return (frame, control);
                }
                Ok(Some(ToWorker::Cancel { id })) => {
                    let current = lock(&self.current).clone();
                    if let Some(c) = current.filter(|c| c.id == id) {
                        c.cancel();
                    }
                }
                Ok(None) => host_gone(),
                Err(e) => {
                    eprintln!("takt worker: cannot read from the host: {e}");
                    host_gone();
                }
            }
        }
    }

    fn run(&self, (frame, control): (CallFrame, Arc<CallControl>)) {
        let info = CallInfo {
            job_id: &frame.job_id,
            job_name: &frame.job_name,
            run_id: &frame.run_id,
            attempt: frame.attempt,
            fire_time_unix_ms: frame.fire_time_unix_ms,
            deadline_unix_ms: frame.deadline_unix_ms,
        };
        let services = Services {
            control: &control,
            output: &self.output,
            max_line: frame.max_line_bytes.max(64),
        };
        let result = catch_unwind(AssertUnwindSafe(|| {
            host::call(self.module, &frame.handler, &frame.params, &info, &services)
        }));
        let result = match result {
            Ok(Ok(json)) => CallOutcome::Ok(json),
            Ok(Err(e)) => CallOutcome::Err {
                kind: e.kind.0,
                message: e.message.into_string(),
                retryable: e.retryable,
                data: e.data.into_option().map(|d| d.into_string()),
            },
            Err(_) => CallOutcome::Err {
                kind: takt_plugin_api::abi::ErrorKind::PANICKED.0,
                message: "the worker's call into the plugin panicked".into(),
                retryable: false,
                data: None,
            },
        };
        self.busy.store(false, Ordering::Release);
        let done = FromWorker::Done {
            id: frame.id,
            result,
        };
        if write_frame(&mut *lock(&self.output), &done).is_err() {
            host_gone();
        }
    }
}

/// One call's cancel flag (a cheap read for `is_cancelled`, mirrored under the lock its
/// sleeps wait on).
struct CallControl {
    id: u64,
    cancelled: AtomicBool,
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl CallControl {
    fn new(id: u64) -> CallControl {
        CallControl {
            id,
            cancelled: AtomicBool::new(false),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    fn cancel(&self) {
        *lock(&self.stopped) = true;
        self.cancelled.store(true, Ordering::Release);
        self.wake.notify_all();
    }
}

/// The plugin's view of the host, inside the worker.
struct Services<'a> {
    control: &'a CallControl,
    output: &'a Mutex<File>,
    max_line: usize,
}

impl Services<'_> {
    fn send(&self, frame: &FromWorker) {
        // A host that stopped reading is gone; the next read of our input ends the process.
        let _ = write_frame(&mut *lock(self.output), frame);
    }
}

impl HostServices for Services<'_> {
    fn is_cancelled(&self) -> bool {
        self.control.cancelled.load(Ordering::Acquire)
    }

    fn sleep(&self, duration: Duration) -> bool {
        crate::executor::interruptible_sleep(
            &self.control.stopped,
            &self.control.wake,
            duration,
            |stopped| *stopped,
        )
    }

    fn log(&self, level: LogLevel, message: &str) {
        self.send(&FromWorker::Log {
            id: self.control.id,
            level: level.0,
            message: cut(message, self.max_line),
        });
    }

    fn progress(&self, done: u64, total: u64, note: &str) {
        self.send(&FromWorker::Progress {
            id: self.control.id,
            done,
            total,
            note: cut(note, self.max_line),
        });
    }
}

/// The line as the host keeps it: at most `max` bytes, marked with how much was cut, so
/// that no frame carries more than the host would keep.
fn cut(s: &str, max: usize) -> String {
    crate::executor::truncate_within(s, max).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_read_strictly() {
        let a = |v: &[&str]| parse(&v.iter().map(OsString::from).collect::<Vec<_>>());
        assert_eq!(
            a(&["1", "/s/x.so", "--memory-limit", "1024"]).unwrap(),
            Args {
                protocol: 1,
                plugin: "/s/x.so".into(),
                memory_limit: Some(1024)
            }
        );
        assert_eq!(a(&["1", "/s/x.so"]).unwrap().memory_limit, None);
        assert!(a(&[]).is_err());
        assert!(a(&["one", "/x"]).is_err());
        assert!(a(&["1", "/x", "--memory-limit"]).is_err());
        assert!(a(&["1", "/x", "--other"]).is_err());
    }

    #[test]
    fn lines_are_cut_within_the_hosts_limit() {
        assert_eq!(cut("abc", 64), "abc");
        let long = "é".repeat(100);
        let c = cut(&long, 64);
        assert!(c.len() <= 64, "{c}");
        assert!(c.ends_with("more bytes cut]"), "{c}");
    }
}
