//! Cancel anywhere (issue 15 item 6), once for every backend: a cancel goes through the
//! database, so any node or command can cancel any run.
//!
//! A pending run (queued behind a running one, waiting for its retry, or waiting for its
//! dependencies: `Run::is_waiting`) is made `cancelled`
//! in the same transaction, through the run state machine. A running run belongs to the node
//! that claimed it, which alone can stop its plugin call: the engine records a
//! [`CancelRequest`] (who, when) and wakes the nodes (`NOTIFY` on PostgreSQL); the node's loop
//! reads the requests of its running runs about every second ([`Store::cancel_requests`]),
//! cancels the call, and records the run `cancelled` (reason requested) through the ordinary
//! finish. The request row stays as the record of who asked, removed with its run.
//!
//! [`Store::cancel_requests`]: crate::store::Store::cancel_requests

use jiff::Timestamp;

use super::{Conn, Dialect, Engine, Session, retrying};
use crate::run::{CancelReason, RunEvent, RunId, RunState};
use crate::store::backend::{job_missing, run_changed, run_missing};
use crate::store::{CancelOutcome, CancelRequest, StoreError, StoreResult};

impl<D: Dialect> Engine<D> {
    pub(super) async fn run_cancel(
        &self,
        id: RunId,
        by: &str,
        now: Timestamp,
    ) -> StoreResult<CancelOutcome> {
        if by.trim().is_empty() {
            return Err(StoreError::invalid(
                "a cancel names who asks for it; give a name (the command line uses user@host)",
            ));
        }
        let d = &self.dialect;
        let what = "cancelling a run";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let mut run = tx.run_get(id).await?.ok_or_else(|| run_missing(id))?;
            let request = CancelRequest {
                run: id,
                by: by.to_string(),
                at: now,
            };
            let out = match run.state {
                RunState::Pending => {
                    let job = tx
                        .job_get(run.job_id)
                        .await?
                        .ok_or_else(|| job_missing(run.job_id))?;
                    let before = (run.state, run.attempt);
                    run.apply(
                        RunEvent::Cancelled {
                            reason: CancelReason::Requested,
                        },
                        now,
                        &job.retry,
                    )
                    .map_err(StoreError::from)?;
                    run.error = Some(format!("cancelled (requested by {by} at {now})"));
                    let stored = tx
                        .run_update_if(&run, before, 0)
                        .await?
                        .ok_or_else(|| run_changed(id, "cancelling it"))?;
                    tx.cancel_insert(&request).await?;
                    CancelOutcome::Cancelled(Box::new(stored))
                }
                RunState::Running => {
                    let request = if tx.cancel_insert(&request).await? {
                        // The node running it is woken where the backend can (NOTIFY).
                        tx.notify_due_sooner().await?;
                        request
                    } else {
                        tx.cancel_get(id).await?.unwrap_or(request)
                    };
                    CancelOutcome::Requested {
                        node: run.node_id.clone(),
                        request,
                    }
                }
                state => {
                    return Err(StoreError::conflict(format!(
                        "run {id} is already {state}; only a pending or running run can be \
                         cancelled"
                    ))
                    .into());
                }
            };
            tx.commit().await?;
            Ok(out)
        })
        .await
    }

    pub(super) async fn cancel_requests(
        &self,
        node: &crate::run::NodeId,
    ) -> StoreResult<Vec<CancelRequest>> {
        let d = &self.dialect;
        let what = "reading cancel requests";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            s.conn().cancels_of_node(node).await
        })
        .await
    }

    pub(super) async fn cancel_request_of(&self, id: RunId) -> StoreResult<Option<CancelRequest>> {
        let d = &self.dialect;
        let what = "reading a cancel request";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            s.conn().cancel_get(id).await
        })
        .await
    }
}
