//! How `takt run` is asked to stop: a channel of [`StopRequest`]s, fed by the process's
//! signals and by anything else that holds a [`Stopper`] (a Windows service's control
//! handler, a test).
//!
//! `systemctl stop`, `docker stop` and Kubernetes send `SIGTERM`; an operator presses Ctrl-C
//! (`SIGINT`); on Windows a console gets Ctrl-C, Ctrl-Break, its window closed, or the
//! system shutting down. All of them mean the same: the first request starts the graceful
//! stop (claim nothing more, let running runs finish within `grace`, then cancel them as
//! shutdown), the second cuts the drain short (cancel now, still recording every run), the
//! third ends the process at once (what is still running is failed as "node restarted" by
//! the node's next start). `takt run` counts them; this module only delivers them.
//!
//! `SIGHUP` is not taken here: it is kept for reloading plugins. Windows' logoff event is not
//! taken either: a service receives it whenever any user logs off, which must not stop it.
//! When a console window is closed or the system shuts down, Windows ends the process a few
//! seconds after the event (about 5 s for a closed window) whatever the drain has left.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A request to stop, saying where it came from (`SIGTERM received`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StopRequest {
    /// What asked, in words, for the host's output: "SIGTERM received".
    pub(crate) why: String,
}

/// Asks the host that holds the matching [`StopRequests`] to stop. Cheap to clone; every
/// call is one request.
#[derive(Clone, Debug)]
pub(crate) struct Stopper {
    tx: mpsc::UnboundedSender<StopRequest>,
}

impl Stopper {
    /// Sends a request (nothing happens when the host has already gone).
    pub(crate) fn request(&self, why: impl Into<String>) {
        let _ = self.tx.send(StopRequest { why: why.into() });
    }
}

/// The host's end of the channel.
#[derive(Debug)]
pub(crate) struct StopRequests {
    rx: mpsc::UnboundedReceiver<StopRequest>,
}

impl StopRequests {
    /// The next request; never resolves when no [`Stopper`] is left (nothing can ask).
    pub(crate) async fn next(&mut self) -> StopRequest {
        match self.rx.recv().await {
            Some(r) => r,
            None => std::future::pending().await,
        }
    }

    /// A request already made, without waiting.
    pub(crate) fn try_next(&mut self) -> Option<StopRequest> {
        self.rx.try_recv().ok()
    }
}

/// A new channel: give the [`Stopper`] to whatever may ask for a stop.
pub(crate) fn channel() -> (Stopper, StopRequests) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Stopper { tx }, StopRequests { rx })
}

/// Turns the process's stop signals into requests on `stopper`, from now until the runtime
/// ends. Must be called inside a tokio runtime. From this call on the signals no longer end
/// the process by themselves: whoever holds the [`StopRequests`] must act on them.
pub(crate) fn listen(stopper: Stopper) -> std::io::Result<JoinHandle<()>> {
    imp::listen(stopper)
}

#[cfg(unix)]
mod imp {
    use tokio::signal::unix::{SignalKind, signal};

    use super::Stopper;

    pub(super) fn listen(stopper: Stopper) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(tokio::spawn(async move {
            loop {
                let why = tokio::select! {
                    Some(()) = term.recv() => "SIGTERM received",
                    Some(()) = int.recv() => "SIGINT (Ctrl-C) received",
                    else => return,
                };
                stopper.request(why);
            }
        }))
    }
}

#[cfg(windows)]
mod imp {
    use tokio::signal::windows::{ctrl_break, ctrl_c, ctrl_close, ctrl_shutdown};

    use super::Stopper;

    pub(super) fn listen(stopper: Stopper) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let mut c = ctrl_c()?;
        let mut brk = ctrl_break()?;
        let mut close = ctrl_close()?;
        let mut shutdown = ctrl_shutdown()?;
        Ok(tokio::spawn(async move {
            loop {
                let why = tokio::select! {
                    Some(()) = c.recv() => "Ctrl-C received",
                    Some(()) = brk.recv() => "Ctrl-Break received",
                    Some(()) = close.recv() => "the console window is closing",
                    Some(()) = shutdown.recv() => "the system is shutting down",
                    else => return,
                };
                stopper.request(why);
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_arrive_in_order_and_a_dropped_channel_waits_forever() {
        let (stopper, mut requests) = channel();
        assert_eq!(requests.try_next(), None);
        stopper.request("first");
        stopper.clone().request("second");
        assert_eq!(requests.next().await.why, "first");
        assert_eq!(requests.try_next().map(|r| r.why), Some("second".into()));
        drop(stopper);
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(50), requests.next()).await;
        assert!(waited.is_err(), "no stopper left: nothing can ask");
    }
}
