//! [`CancelToken`]: how something outside the executor stops one run.

use std::sync::Arc;

use tokio::sync::watch;

/// A request to stop a run, made from outside the executor (an operator's "cancel" in the
/// dashboard, the API, a dependency rule).
///
/// Create one per run, keep a clone wherever a cancel may come from (for example in a map from
/// run id to token), and pass it to [`Executor::run_with_cancel`](super::Executor::run_with_cancel).
/// Cancelling is sticky and idempotent: a token, once cancelled, stays cancelled, so a run
/// given an already-cancelled token ends as `Cancelled { reason: Requested }` without calling
/// the plugin. Sharing one token between several runs cancels them together.
///
/// A `watch` channel rather than a bare flag: the executor awaits it next to the deadline and
/// the plugin's answer, and a late subscriber still sees a cancel made before it looked.
#[derive(Clone, Debug)]
pub struct CancelToken {
    flag: Arc<watch::Sender<bool>>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken {
            flag: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Asks the run to stop: the executor raises the plugin's cancel flag (waking a
    /// `ctx.sleep` at once), waits the grace period, and records `Cancelled { Requested }`.
    pub fn cancel(&self) {
        self.flag.send_replace(true);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        *self.flag.borrow()
    }

    /// Completes once the token is cancelled (at once if it already is).
    pub(crate) async fn cancelled(&self) {
        let mut rx = self.flag.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|cancelled| *cancelled).await;
    }
}

impl Default for CancelToken {
    fn default() -> CancelToken {
        CancelToken::new()
    }
}
