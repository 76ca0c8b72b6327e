//! Unix: the program leads a process group of its own, and the group is what gets signalled.
//!
//! `process_group(0)` makes the child a group leader (pgid = its pid) before `exec`, and
//! everything it starts inherits the group unless it deliberately leaves it (`setsid`,
//! `setpgid` — daemons do; such a process escapes, and only a cgroup could hold it, which an
//! unprivileged host cannot rely on). Signalling `-pgid` reaches the whole tree in one call,
//! including grandchildren whose parent already died.
//!
//! pid reuse: a group id stays reserved while any member, zombies included, exists. The leader
//! is only reaped after the waiter thread saw it exit, and the group is signalled only while
//! `kill(-pgid, 0)` says it still has members, so a signal can only reach a recycled group in
//! the instant between that check and the signal after the last member died — and pids cycle
//! through `pid_max` (4 194 304 on current Linux) before one comes back.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};

/// The program's process group.
#[derive(Debug)]
pub struct Group {
    pgid: libc::pid_t,
    /// Cleared once the group is known empty; until then, dropping the group kills it (a panic
    /// between spawn and reap must not leave a tree running).
    armed: bool,
}

/// The polite stop request, for messages.
pub const SOFT_STOP: &str = "SIGTERM";
/// The forced stop, for messages.
pub const HARD_STOP: &str = "SIGKILL";

/// Sets up `cmd` so that the child leads a new process group.
pub fn prepare(cmd: &mut Command) {
    cmd.process_group(0);
}

impl Group {
    /// The group of a child started from a [`prepare`]d command.
    pub fn attach(child: &mut Child) -> std::io::Result<Group> {
        let pgid = libc::pid_t::try_from(child.id())
            .map_err(|_| std::io::Error::other("the child's pid does not fit a pid_t"))?;
        Ok(Group { pgid, armed: true })
    }

    /// "process group 1234", for messages.
    pub fn describe(&self) -> String {
        format!("process group {}", self.pgid)
    }

    /// SIGTERM to every member.
    pub fn ask_to_stop(&self) {
        // SAFETY: plain syscall; a negative pid addresses the group.
        unsafe { libc::kill(-self.pgid, libc::SIGTERM) };
    }

    /// SIGKILL to every member.
    pub fn kill(&self) {
        // SAFETY: as above.
        unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
    }

    /// Whether any process (zombies included) is still in the group.
    pub fn has_members(&self) -> bool {
        // SAFETY: signal 0 only checks for existence and permission.
        let r = unsafe { libc::kill(-self.pgid, 0) };
        // EPERM: members exist that we may not signal (they changed user); still members.
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }

    /// The group is empty: nothing to kill on drop.
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// A function that blocks until the leader has exited, without reaping it (so its pid, the
    /// group id, stays reserved until [`Child::wait`]). Runs on a waiter thread.
    pub fn exit_waiter(&self) -> impl FnOnce() + Send + 'static {
        let pid = self.pgid;
        move || {
            loop {
                // SAFETY: `info` is a plain out-parameter; WNOWAIT leaves the child waitable.
                let r = unsafe {
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    libc::waitid(
                        libc::P_PID,
                        pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOWAIT,
                    )
                };
                if r == 0
                    || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                {
                    return;
                }
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.armed && self.has_members() {
            self.kill();
        }
    }
}

/// `(exit code, signal)` of a reaped leader.
pub fn exit_parts(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    (status.code(), status.signal())
}

/// "SIGTERM" for 15, and so on; the number for the uncommon ones.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    format!("{name} ({signal})")
}

/// Errors of `spawn` that the resolution could not foresee, in words.
pub fn spawn_problem(e: &std::io::Error) -> Option<&'static str> {
    match e.raw_os_error()? {
        libc::ENOEXEC => Some(
            "not an executable format: a script needs a #! line (e.g. #!/bin/sh), a binary must \
             be built for this machine",
        ),
        libc::ENOENT => Some(
            "the file exists, so what is missing is its #! interpreter or its dynamic loader; \
             check the first line of the script, or the binary's architecture",
        ),
        libc::EACCES => Some(
            "permission denied by the system although the file is executable: a noexec mount, \
             a directory on the way without search permission, or a security policy",
        ),
        libc::ETXTBSY => Some("the file is being written right now; retry when it is complete"),
        libc::E2BIG => Some("the arguments and environment are too large for the system"),
        _ => None,
    }
}
