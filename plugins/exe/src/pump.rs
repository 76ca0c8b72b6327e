//! Waiting for the program while draining its output: [`Pump`].
//!
//! On Unix one loop on the handler's thread `poll`s both output pipes and, on Linux, a pidfd
//! of the program (which becomes readable when it exits, without reaping it): no extra
//! threads, no hand-offs between threads, and an exit is seen the moment it happens. That is
//! what keeps the cost of a short program close to a bare `Command::status()` (benchmark B9).
//! Where there is no pidfd (other Unixes, Linux before 5.3), a waiter thread blocks in
//! `waitid(WNOWAIT)` and the loop polls with a 5 ms timeout to notice it.
//!
//! On Windows pipes cannot be waited for together with a process, so each pipe gets a reader
//! thread and a waiter thread blocks on the process handle.

use std::time::{Duration, Instant};

use takt_plugin_api::sdk::JobContext;

use crate::output::{Sink, StreamReport};
use crate::sys::Group;

/// How often the cancel flag is read while the program runs. The flag is an atomic read in
/// the host; 20 ms keeps a timeout prompt at no measurable cost, and an exit (or output)
/// wakes the loop at once, not at the next poll.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// What ended a [`Pump::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The program (the group leader) exited; it is not reaped yet.
    Exited,
    /// The host raised the cancel flag.
    Cancelled,
    /// `until` passed.
    Deadline,
}

#[cfg(unix)]
pub(crate) use unix::Pump;
#[cfg(windows)]
pub(crate) use windows::Pump;

fn left(until: Option<Instant>, now: Instant, cap: Duration) -> Duration {
    match until {
        Some(u) => cap.min(u.saturating_duration_since(now)),
        None => cap,
    }
}

#[cfg(unix)]
mod unix {
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::process::Child;
    use std::sync::mpsc::{self, TryRecvError};

    use super::*;

    /// Without a pidfd the loop wakes this often to look at the waiter thread.
    const NO_PIDFD_POLL: Duration = Duration::from_millis(5);

    /// The program's output pipes and exit, watched from the handler's thread.
    pub(crate) struct Pump {
        pipes: [Option<File>; 2],
        sinks: [Sink; 2],
        pidfd: Option<OwnedFd>,
        /// Without a pidfd: the waiter thread's signal.
        waiter: Option<mpsc::Receiver<()>>,
        exited: bool,
        buf: Vec<u8>,
    }

    impl Pump {
        /// Takes the child's stdout and stderr; `out` and `err` consume them.
        pub(crate) fn start(
            child: &mut Child,
            group: &Group,
            out: Sink,
            err: Sink,
            _ctx: &JobContext,
        ) -> std::io::Result<Pump> {
            let pipes = [
                child.stdout.take().map(|p| File::from(OwnedFd::from(p))),
                child.stderr.take().map(|p| File::from(OwnedFd::from(p))),
            ];
            let pidfd = pidfd_open(child.id());
            let waiter = match pidfd {
                Some(_) => None,
                None => {
                    let (tx, rx) = mpsc::channel();
                    let wait = group.exit_waiter();
                    std::thread::Builder::new()
                        .name("takt-exe-wait".into())
                        .spawn(move || {
                            wait();
                            let _ = tx.send(());
                        })?;
                    Some(rx)
                }
            };
            Ok(Pump {
                pipes,
                sinks: [out, err],
                pidfd,
                waiter,
                exited: false,
                buf: vec![0; 64 << 10],
            })
        }

        /// Drains output until the program exits, `until` passes or (when `cancellable`)
        /// the host raises the cancel flag.
        pub(crate) fn wait(
            &mut self,
            ctx: &JobContext,
            until: Option<Instant>,
            cancellable: bool,
        ) -> Wait {
            loop {
                if self.exited {
                    return Wait::Exited;
                }
                let now = Instant::now();
                if until.is_some_and(|u| now >= u) {
                    return Wait::Deadline;
                }
                if cancellable && ctx.is_cancelled() {
                    return Wait::Cancelled;
                }
                let cap = if self.pidfd.is_some() {
                    POLL
                } else {
                    NO_PIDFD_POLL
                };
                self.poll_once(ctx, left(until, now, cap));
            }
        }

        /// Drains output for `d`.
        pub(crate) fn idle(&mut self, ctx: &JobContext, d: Duration) {
            let until = Instant::now() + d;
            loop {
                let now = Instant::now();
                if now >= until {
                    return;
                }
                self.poll_once(ctx, until - now);
            }
        }

        /// Drains output until both pipes reached end-of-file (`true`) or `until` passed.
        pub(crate) fn drain(&mut self, ctx: &JobContext, until: Instant) -> bool {
            loop {
                if self.pipes.iter().all(Option::is_none) {
                    return true;
                }
                let now = Instant::now();
                if now >= until {
                    return false;
                }
                self.poll_once(ctx, left(Some(until), now, POLL));
            }
        }

        /// What each stream produced (a pipe still open is ended here).
        pub(crate) fn reports(&mut self, ctx: &JobContext) -> [StreamReport; 2] {
            for s in &mut self.sinks {
                s.end(ctx);
            }
            [self.sinks[0].report(), self.sinks[1].report()]
        }

        fn poll_once(&mut self, ctx: &JobContext, timeout: Duration) {
            let mut fds = [libc::pollfd {
                fd: -1,
                events: libc::POLLIN,
                revents: 0,
            }; 3];
            let mut which = [0usize; 3];
            let mut n = 0;
            for (i, p) in self.pipes.iter().enumerate() {
                if let Some(f) = p {
                    fds[n].fd = f.as_raw_fd();
                    which[n] = i;
                    n += 1;
                }
            }
            if let Some(pidfd) = &self.pidfd
                && !self.exited
            {
                fds[n].fd = pidfd.as_raw_fd();
                which[n] = 2;
                n += 1;
            }
            if n == 0 {
                std::thread::sleep(timeout);
            } else {
                // Round up: a 0 ms poll for a 300 µs wait would spin.
                let ms = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
                // SAFETY: `fds[..n]` are initialised pollfds of descriptors we own.
                let r = unsafe { libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, ms) };
                if r > 0 {
                    for k in 0..n {
                        if fds[k].revents == 0 {
                            continue;
                        }
                        match which[k] {
                            2 => self.exited = true,
                            i => self.read_pipe(ctx, i),
                        }
                    }
                }
            }
            if let Some(rx) = &self.waiter
                && !matches!(rx.try_recv(), Err(TryRecvError::Empty))
            {
                self.exited = true;
            }
        }

        /// One read from pipe `i` (poll said it would not block).
        fn read_pipe(&mut self, ctx: &JobContext, i: usize) {
            let Some(f) = self.pipes[i].as_mut() else {
                return;
            };
            match f.read(&mut self.buf) {
                Ok(0) => {
                    self.sinks[i].end(ctx);
                    self.pipes[i] = None;
                }
                Ok(n) => self.sinks[i].feed(ctx, &self.buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.sinks[i].end(ctx);
                    self.pipes[i] = None;
                }
            }
        }
    }

    /// A pidfd of `pid` (Linux 5.3+): readable once the process exited, never reaped by it.
    #[cfg(target_os = "linux")]
    fn pidfd_open(pid: u32) -> Option<OwnedFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscall; on success it returns a new descriptor that we own.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    #[cfg(not(target_os = "linux"))]
    fn pidfd_open(_pid: u32) -> Option<OwnedFd> {
        None
    }
}

#[cfg(windows)]
mod windows {
    use std::process::Child;
    use std::sync::mpsc::{self, RecvTimeoutError};

    use super::*;
    use crate::output::{self, Reader};

    /// Reader threads for the pipes and a waiter thread for the exit.
    pub(crate) struct Pump {
        readers: [Option<Reader>; 2],
        sinks_left: [Option<Sink>; 2],
        exited: mpsc::Receiver<()>,
        is_exited: bool,
    }

    impl Pump {
        /// Starts the reader and waiter threads.
        pub(crate) fn start(
            child: &mut Child,
            group: &Group,
            out: Sink,
            err: Sink,
            ctx: &JobContext,
        ) -> std::io::Result<Pump> {
            let mut readers = [None, None];
            let mut sinks_left = [None, None];
            match child.stdout.take() {
                Some(p) => readers[0] = Some(output::spawn(p, out, ctx.clone())?),
                None => sinks_left[0] = Some(out),
            }
            match child.stderr.take() {
                Some(p) => readers[1] = Some(output::spawn(p, err, ctx.clone())?),
                None => sinks_left[1] = Some(err),
            }
            let (tx, rx) = mpsc::channel();
            let wait = group.exit_waiter();
            std::thread::Builder::new()
                .name("takt-exe-wait".into())
                .spawn(move || {
                    wait();
                    let _ = tx.send(());
                })?;
            Ok(Pump {
                readers,
                sinks_left,
                exited: rx,
                is_exited: false,
            })
        }

        /// Waits until the program exits, `until` passes or (when `cancellable`) the host
        /// raises the cancel flag; the reader threads drain the pipes meanwhile.
        pub(crate) fn wait(
            &mut self,
            ctx: &JobContext,
            until: Option<Instant>,
            cancellable: bool,
        ) -> Wait {
            loop {
                if self.is_exited {
                    return Wait::Exited;
                }
                let now = Instant::now();
                if until.is_some_and(|u| now >= u) {
                    return Wait::Deadline;
                }
                if cancellable && ctx.is_cancelled() {
                    return Wait::Cancelled;
                }
                match self.exited.recv_timeout(left(until, now, POLL)) {
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => self.is_exited = true,
                    Err(RecvTimeoutError::Timeout) => {}
                }
            }
        }

        /// Lets the reader threads work for `d`.
        pub(crate) fn idle(&mut self, _ctx: &JobContext, d: Duration) {
            std::thread::sleep(d);
        }

        /// Waits until both readers reached end-of-file (`true`) or `until` passed.
        pub(crate) fn drain(&mut self, _ctx: &JobContext, until: Instant) -> bool {
            self.readers.iter().flatten().all(|r| r.wait_eof(until))
        }

        /// What each stream produced so far.
        pub(crate) fn reports(&mut self, _ctx: &JobContext) -> [StreamReport; 2] {
            let report = |i: usize| match (&self.readers[i], &self.sinks_left[i]) {
                (Some(r), _) => r.report(),
                (None, Some(s)) => s.report(),
                (None, None) => Sink::new(output::Stream::Stdout, 0, 0).report(),
            };
            [report(0), report(1)]
        }
    }
}
