//! What `takt run` tells the service manager it runs under: systemd's sd_notify(3) messages
//! (through the `sd-notify` crate), or, for the Windows service ([`super::service`]), the
//! same moments handed to a callback that reports them to the service control manager.
//!
//! Under systemd (`Type=notify`, see `packaging/systemd/takt.service`):
//!
//! * `READY=1` once the store is open, the plugins are loaded, the file's jobs are synced and
//!   the scheduling loop has started: `systemctl start` returns then, and units ordered after
//!   takt start on a scheduler that is really scheduling.
//! * `STATUS=…` a one-line live summary (`systemctl status` shows it): runs running, attempts
//!   started and how they ended since the start, a database outage, the drain.
//! * `WATCHDOG=1` every half of `WATCHDOG_USEC` (systemd's `WatchdogSec=`), but only while the
//!   scheduling loop keeps turning ([`SchedulerHandle::loop_passes`]): a loop stuck in a call
//!   that never returns stops the pings and systemd restarts the service, where a bare timer
//!   would keep a dead scheduler "healthy". Each ping also wakes the loop, so an idle loop
//!   proves itself on demand rather than by its safety poll alone.
//! * `STOPPING=1` when the graceful drain starts (SIGTERM from `systemctl stop`). systemd
//!   stops enforcing the watchdog once the service is stopping, so a long drain (up to
//!   `grace`) is not cut short by it; `TimeoutStopSec=` is what bounds it.
//!
//! Without `NOTIFY_SOCKET` (not started by systemd, or `Type=simple`) nothing is sent and no
//! task is spawned. A message that cannot be sent is logged once as a warning; the host goes
//! on (a service manager that went away is no reason to stop scheduling). The variables stay
//! in the environment: programs that `exe::run` starts inherit them, and systemd ignores
//! their messages under the unit's `NotifyAccess=main`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::scheduler::SchedulerHandle;
use crate::store::AnyStore;

/// A moment of `takt run`'s life, for a service manager other than systemd.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) enum Phase<'a> {
    /// Scheduling (systemd's `READY=1`), with the first summary.
    Ready(&'a str),
    /// The summary changed.
    Status(&'a str),
    /// The drain started; it may take `wait` (the grace plus time to record the cancelled
    /// runs).
    Stopping {
        /// What the drain is doing.
        status: &'a str,
        /// How long it may take.
        wait: Duration,
    },
}

/// Receives the [`Phase`]s (the Windows service's status reporter).
pub(crate) type PhaseFn = Arc<dyn Fn(Phase<'_>) + Send + Sync>;

/// The notifications of one `takt run`; inert when no service manager asked for them.
#[derive(Clone)]
pub(crate) struct Notifier {
    kind: Kind,
    /// A failed send was logged already (one warning, not one per ping).
    warned: Arc<AtomicBool>,
}

#[derive(Clone)]
enum Kind {
    Off,
    Systemd,
    Callback(PhaseFn),
}

impl Notifier {
    /// systemd's notifications when `NOTIFY_SOCKET` is set (empty counts as unset), else
    /// none.
    pub(crate) fn from_env() -> Notifier {
        let systemd =
            cfg!(unix) && std::env::var_os("NOTIFY_SOCKET").is_some_and(|v| !v.is_empty());
        Notifier {
            kind: if systemd { Kind::Systemd } else { Kind::Off },
            warned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The phases handed to `f` instead (a service manager with an API, not a socket).
    #[cfg_attr(not(windows), allow(dead_code))]
    pub(crate) fn callback(f: PhaseFn) -> Notifier {
        Notifier {
            kind: Kind::Callback(f),
            warned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether anyone listens.
    pub(crate) fn enabled(&self) -> bool {
        !matches!(self.kind, Kind::Off)
    }

    /// `READY=1` with a first `STATUS`.
    pub(crate) fn ready(&self, status: &str) {
        match &self.kind {
            Kind::Callback(f) => f(Phase::Ready(status)),
            _ => self.send(Message::Ready, status),
        }
    }

    /// `STATUS=status`.
    pub(crate) fn status(&self, status: &str) {
        match &self.kind {
            Kind::Callback(f) => f(Phase::Status(status)),
            _ => self.send(Message::Status, status),
        }
    }

    /// `STOPPING=1` with the drain's `STATUS`; the drain may take `wait`.
    pub(crate) fn stopping(&self, status: &str, wait: Duration) {
        match &self.kind {
            Kind::Callback(f) => f(Phase::Stopping { status, wait }),
            _ => self.send(Message::Stopping, status),
        }
    }

    /// Spawns the watchdog pings when systemd set `WATCHDOG_USEC` for this process (see the
    /// module documentation); `None` otherwise. Abort the task when the host has stopped.
    pub(crate) fn watchdog(&self, handle: SchedulerHandle<AnyStore>) -> Option<JoinHandle<()>> {
        if !matches!(self.kind, Kind::Systemd) {
            return None;
        }
        let every = watchdog_usec()? / 2;
        if every.is_zero() {
            return None;
        }
        tracing::info!(
            "systemd watchdog: pinging every {} ms while the scheduling loop turns",
            every.as_millis()
        );
        let wake = handle.clone();
        let me = self.clone();
        Some(tokio::spawn(watch_loop(
            every,
            move || handle.loop_passes(),
            move || wake.wake(),
            move || me.send(Message::Watchdog, ""),
        )))
    }

    fn send(&self, message: Message, status: &str) {
        if !matches!(self.kind, Kind::Systemd) {
            return;
        }
        if let Err(e) = imp::send(message, status)
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!("cannot notify systemd ({message:?}): {e}; takt keeps running");
        }
    }
}

/// What a datagram says besides its `STATUS`.
#[derive(Clone, Copy, Debug)]
enum Message {
    Ready,
    Status,
    Stopping,
    Watchdog,
}

/// `WATCHDOG_USEC`, when it is meant for this process (`WATCHDOG_PID` unset or ours).
fn watchdog_usec() -> Option<Duration> {
    imp::watchdog_enabled()
}

/// Every `every`: ping when the loop has turned since the last look (`passes` changed), then
/// wake it so that it turns before the next look. A stalled loop gets no ping and one
/// warning per stall.
async fn watch_loop(every: Duration, passes: impl Fn() -> u64, wake: impl Fn(), ping: impl Fn()) {
    let mut seen = passes();
    let mut stalled_since: Option<tokio::time::Instant> = None;
    wake();
    loop {
        tokio::time::sleep(every).await;
        let now = passes();
        if now != seen {
            seen = now;
            if stalled_since.take().is_some() {
                tracing::info!("the scheduling loop turns again: systemd watchdog pings resume");
            }
            ping();
        } else if stalled_since.is_none() {
            stalled_since = Some(tokio::time::Instant::now());
            tracing::warn!(
                "the scheduling loop has not turned for {} ms: the systemd watchdog ping is \
                 withheld (systemd restarts takt if this lasts WatchdogSec)",
                every.as_millis()
            );
        }
        wake();
    }
}

#[cfg(unix)]
mod imp {
    use std::time::Duration;

    use sd_notify::NotifyState;

    use super::Message;

    pub(super) fn send(message: Message, status: &str) -> std::io::Result<()> {
        // One line per field: a newline inside the status would start a bogus field.
        let status = status.replace(['\n', '\r'], " ");
        let mut states = Vec::with_capacity(2);
        match message {
            Message::Ready => states.push(NotifyState::Ready),
            Message::Stopping => states.push(NotifyState::Stopping),
            Message::Watchdog => states.push(NotifyState::Watchdog),
            Message::Status => {}
        }
        if !status.is_empty() {
            states.push(NotifyState::Status(&status));
        }
        sd_notify::notify(&states)
    }

    pub(super) fn watchdog_enabled() -> Option<Duration> {
        sd_notify::watchdog_enabled()
    }
}

#[cfg(not(unix))]
mod imp {
    use std::time::Duration;

    use super::Message;

    pub(super) fn send(_: Message, _: &str) -> std::io::Result<()> {
        Ok(())
    }

    pub(super) fn watchdog_enabled() -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    /// A loop that turns when woken gets a ping per look; once it stops turning the pings
    /// stop, and they resume when it turns again.
    #[tokio::test(start_paused = true)]
    async fn pings_follow_the_loop_not_the_clock() {
        let passes = Arc::new(AtomicU64::new(0));
        let alive = Arc::new(AtomicBool::new(true));
        let pings = Arc::new(AtomicU64::new(0));
        let task = {
            let (p, a, q) = (passes.clone(), alive.clone(), passes.clone());
            let pings = pings.clone();
            tokio::spawn(watch_loop(
                Duration::from_millis(100),
                move || p.load(Ordering::SeqCst),
                move || {
                    if a.load(Ordering::SeqCst) {
                        q.fetch_add(1, Ordering::SeqCst);
                    }
                },
                move || {
                    pings.fetch_add(1, Ordering::SeqCst);
                },
            ))
        };
        tokio::time::sleep(Duration::from_millis(550)).await;
        assert_eq!(pings.load(Ordering::SeqCst), 5, "one ping per look");
        alive.store(false, Ordering::SeqCst);
        // The look at 600 ms still sees the turn the wake at 500 ms caused.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(
            pings.load(Ordering::SeqCst),
            6,
            "a stalled loop gets no ping"
        );
        alive.store(true, Ordering::SeqCst);
        passes.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            pings.load(Ordering::SeqCst),
            9,
            "pings resume with the loop"
        );
        task.abort();
    }
}
