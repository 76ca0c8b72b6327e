//! Unix: descriptors, `setrlimit`, the process group, `waitid`.

use std::fs::File;
use std::os::fd::FromRawFd;
use std::process::{Child, ExitStatus};

/// Moves the protocol to private, close-on-exec descriptors and points fds 0 and 1 elsewhere:
/// stdin at `/dev/null` (a child the plugin starts cannot read the host's frames), stdout at
/// stderr (a plugin's `println!` lands in the worker's log, not in the frame stream).
/// Returns (frames in, frames out).
pub(crate) fn take_protocol_pipes() -> std::io::Result<(File, File)> {
    let cvt = |r: libc::c_int| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    // SAFETY: plain descriptor syscalls on the descriptors this process was started with;
    // each new descriptor is owned by exactly one `File` below.
    unsafe {
        let input = cvt(libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3))?;
        let output = cvt(libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3))?;
        let null = cvt(libc::open(
            c"/dev/null".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        ))?;
        cvt(libc::dup2(null, 0))?;
        libc::close(null);
        cvt(libc::dup2(2, 1))?;
        Ok((File::from_raw_fd(input), File::from_raw_fd(output)))
    }
}

/// Caps the worker's memory at `bytes`: an allocation beyond it fails, which Rust turns into
/// "memory allocation of N bytes failed" and an abort.
///
/// Linux: `RLIMIT_DATA`, which since Linux 4.7 counts the heap and every private writable
/// mapping — what a plugin allocates — but not address space merely reserved (glibc reserves
/// 64 MiB per thread arena, PROT_NONE), which `RLIMIT_AS` counts and which makes a cap aborts
/// healthy multi-threaded programs. Elsewhere `RLIMIT_AS`, the limit those systems enforce.
pub(crate) fn limit_memory(bytes: u64) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    let resource = libc::RLIMIT_DATA;
    #[cfg(not(target_os = "linux"))]
    let resource = libc::RLIMIT_AS;
    let limit = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: `limit` is a plain struct passed by pointer.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Ends the worker at once, with whatever the plugin started: `SIGKILL` to its own process
/// group when it leads one (the host starts every worker so), else a plain exit.
pub(crate) fn end_worker() -> ! {
    // SAFETY: plain syscalls; kill(0, …) addresses our own group, which we lead.
    unsafe {
        if libc::getpgrp() == libc::getpid() {
            libc::kill(0, libc::SIGKILL);
        }
        libc::_exit(0)
    }
}

/// Whether `child` has exited, without reaping it: its pid — the group's id — stays
/// reserved until [`Child::wait`], so the group can still be killed safely afterwards.
pub(crate) fn has_exited(child: &Child) -> bool {
    // SAFETY: `info` is a plain out-parameter; WNOWAIT leaves the child waitable.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            child.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        // With WNOHANG a child still running leaves si_pid 0; an error (ECHILD: reaped
        // already) counts as exited.
        r != 0 || info.si_pid() != 0
    }
}

/// The exit in words, and (exit code, signal).
pub(crate) fn exit_words(status: ExitStatus) -> (String, Option<i32>, Option<i32>) {
    let (code, signal) = takt_plugin_exe::sys::exit_parts(status);
    let words = match (code, signal) {
        (Some(c), _) => format!("it exited with code {c}"),
        (None, Some(s)) => {
            let what = match s {
                libc::SIGSEGV => ": invalid memory access",
                libc::SIGBUS => ": bus error (bad memory access)",
                libc::SIGABRT => ": the process aborted",
                libc::SIGILL => ": illegal instruction",
                libc::SIGFPE => ": arithmetic fault",
                libc::SIGKILL => {
                    ": killed from outside takt (the kernel's out-of-memory killer, or an \
                     operator)"
                }
                _ => "",
            };
            format!(
                "it was killed by signal {}{what}",
                takt_plugin_exe::sys::signal_name(s)
            )
        }
        (None, None) => "it ended in an unknown way".to_string(),
    };
    (words, code, signal)
}
