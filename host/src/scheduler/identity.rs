//! Taking a node identity at start: one live process per node id (see
//! [`takt_core::node`] for the rule and why).
//!
//! The store refuses a registration while another life of the id has a live heartbeat. That is
//! right for a process elsewhere, but after a crash on *this* machine the dead predecessor's
//! heartbeat stays young for up to a lease, and a service manager restarts at once. So before
//! giving up, [`register`] asks whether the live-looking life is provably gone: it ran on this
//! machine and its process no longer exists (or is this process's own pid after a container
//! restart, with no such life running in this process). Proven gone, it is taken over and its
//! leftover runs are recovered at once ("node restarted"); a life on another machine is
//! refused with a message naming it, unless the operator asks for `--takeover` — then its runs
//! are left to expire with their leases, since that process may still be running them.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use takt_core::node::{
    InstanceId, NodeInfo, NodeStatus, Registered, Registration, refusal_message,
};
use takt_core::store::Store;

use super::SchedulerError;

/// Lives of nodes running in this process: a live one's pid is ours, so the pid check alone
/// cannot tell it from a dead predecessor.
static LIVE_HERE: Mutex<Option<HashSet<InstanceId>>> = Mutex::new(None);

/// Marks `instance` as running in this process until dropped (the loop task holds it, so a
/// dropped or finished loop lets a later start in this process follow it).
pub(super) struct LiveHere(InstanceId);

impl LiveHere {
    pub(super) fn new(instance: InstanceId) -> LiveHere {
        LIVE_HERE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(HashSet::new)
            .insert(instance.clone());
        LiveHere(instance)
    }
}

impl Drop for LiveHere {
    fn drop(&mut self) {
        if let Some(set) = LIVE_HERE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            set.remove(&self.0);
        }
    }
}

fn live_here(instance: &InstanceId) -> bool {
    LIVE_HERE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .is_some_and(|s| s.contains(instance))
}

/// How the node identity was taken.
#[derive(Debug)]
pub(super) struct Taken {
    /// Whether the previous life is known to be gone, so its runs are leftovers to recover
    /// at once.
    pub(super) recover_previous: bool,
}

/// Whether `other` is provably gone: a life on this machine whose process is gone.
fn provably_gone(me: &NodeInfo, other: &NodeStatus) -> Option<String> {
    if other.info.host_name != me.host_name || other.info.pid == 0 {
        return None;
    }
    if other.info.pid == me.pid {
        // Our own pid: a previous container (pid 1 again) or process image, unless a life of
        // it runs in this process right now.
        return (!live_here(&other.info.instance)).then(|| {
            format!(
                "its pid {} is this process's and no such life runs here",
                other.info.pid
            )
        });
    }
    match process_alive(other.info.pid) {
        Some(false) => Some(format!("process {} no longer exists", other.info.pid)),
        _ => None,
    }
}

/// Registers `me` in `store` at `now`, following the rules above; `takeover` takes a live
/// life of another machine over.
pub(super) async fn register<S: Store>(
    store: &S,
    me: &NodeInfo,
    now: Timestamp,
    lease: Duration,
    takeover: bool,
) -> Result<Taken, SchedulerError> {
    let mut replace: Option<InstanceId> = None;
    let mut recover_previous = true;
    // At most twice: a refusal names the live life; a second refusal means the row changed
    // meanwhile (a third process), which is reported as it is.
    for _ in 0..2 {
        let reg = Registration {
            node: me.clone(),
            now,
            live_for: lease,
            replace: replace.clone(),
        };
        match store.node_register(&reg).await? {
            Registered::Yes { previous } => {
                if let Some(p) = previous.filter(|p| p.info.instance != me.instance) {
                    tracing::info!(
                        "node {} starts as instance {} after instance {} on {} (pid {})",
                        me.id,
                        me.instance,
                        p.info.instance,
                        p.info.host_name,
                        p.info.pid
                    );
                }
                return Ok(Taken { recover_previous });
            }
            Registered::Refused { live } if replace.is_none() => {
                if let Some(why) = provably_gone(me, &live) {
                    tracing::info!(
                        "node {}: the previous instance {} on this machine is gone ({why}); \
                         taking over and recovering its runs",
                        me.id,
                        live.info.instance
                    );
                } else if takeover {
                    tracing::warn!(
                        "node {}: taking over from instance {} on {} (pid {}), whose heartbeat \
                         is {}s old (--takeover); its running runs are recovered when their \
                         leases expire",
                        me.id,
                        live.info.instance,
                        live.info.host_name,
                        live.info.pid,
                        live.heartbeat_age(now).as_secs()
                    );
                    recover_previous = false;
                } else {
                    return Err(SchedulerError::NodeInUse(refusal_message(
                        &live, now, lease,
                    )));
                }
                replace = Some(live.info.instance.clone());
            }
            Registered::Refused { live } => {
                return Err(SchedulerError::NodeInUse(refusal_message(
                    &live, now, lease,
                )));
            }
        }
    }
    unreachable!("the loop returns on its second registration at the latest")
}

/// Whether process `pid` exists on this machine (`None`: cannot tell).
pub(super) fn process_alive(pid: u32) -> Option<bool> {
    #[cfg(unix)]
    {
        let pid = libc::pid_t::try_from(pid).ok()?;
        // Signal 0 checks for existence and permission without sending anything.
        // SAFETY: kill(2) with signal 0 has no effect on the target; it only reports.
        let r = unsafe { libc::kill(pid, 0) };
        if r == 0 {
            return Some(true);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Some(false),
            // EPERM: it exists, owned by someone else.
            Some(libc::EPERM) => Some(true),
            _ => None,
        }
    }
    #[cfg(windows)]
    {
        use windows_sys::Win32::Foundation::{CloseHandle, STILL_ACTIVE};
        use windows_sys::Win32::System::Threading::{
            GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
        };
        // SAFETY: plain Win32 calls on a handle we own and close.
        unsafe {
            let h = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
            if h.is_null() {
                // Access denied means it exists; anything else (invalid parameter) that it
                // does not.
                let e = std::io::Error::last_os_error().raw_os_error();
                return Some(e == Some(5));
            }
            let mut code = 0u32;
            let ok = GetExitCodeProcess(h, &mut code);
            CloseHandle(h);
            if ok == 0 {
                return None;
            }
            Some(code == STILL_ACTIVE as u32)
        }
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = pid;
        None
    }
}

/// A fresh instance token: random per process (the standard library's per-process hash keys),
/// distinct per call, with the time so that tokens read in order in the nodes table.
pub fn new_instance() -> InstanceId {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let salt = RandomState::new().hash_one((std::process::id(), n));
    let t = Timestamp::now().as_second();
    InstanceId(format!("{t:x}-{:016x}", salt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_and_dead_processes_are_known() {
        assert_eq!(process_alive(std::process::id()), Some(true));
        // A pid far above any kernel's pid_max.
        #[cfg(unix)]
        assert_eq!(process_alive(2_000_000_000), Some(false));
        assert_ne!(new_instance(), new_instance());
    }
}
