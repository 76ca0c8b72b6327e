//! The finishing thread: the end of every run committed in batches (group commit).
//!
//! With one write transaction per finished run, a burst of short runs spends most of its time
//! committing (and, synchronously, blocks the runtime's worker threads meanwhile; B3). The
//! thread takes the first queued finish and every one queued behind it (up to
//! [`MAX_FINISH_BATCH`]) and writes them in one `BEGIN IMMEDIATE` transaction, each still its
//! own compare-and-set with its own answer, sent only after the commit. A driver failure in a
//! batch rolls it back and writes each finish alone, so one bad finish never decides
//! another's answer.

use std::sync::{Weak, mpsc};

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use takt_core::run::{Run, RunId};
use takt_core::store::engine::{FinishWrite, Res, continue_after};
use takt_core::store::{StoreError, StoreResult};

use super::Shared;
use super::conn::{SqliteConn, finish_row};
use super::connect::{Db, sql_error};

/// The finish `write` of run `id` in the caller's transaction and, when its compare-and-set
/// matched with a final state, the run's continuations (the engine's rule,
/// [`continue_after`], over this connection's primitives): the rule every finish applies in
/// the transaction of the compare-and-set.
pub(super) fn finish_and_continue(
    db: &mut Db,
    id: RunId,
    attempt: u32,
    write: &FinishWrite,
) -> StoreResult<Option<Run>> {
    let Some(run) = finish_row(&db.conn, &db.path, id, attempt, write)? else {
        return Ok(None);
    };
    if !write.retry {
        // Not a transaction of its own (`tx: false`): the caller's is open around it.
        let mut c = SqliteConn { db, tx: false };
        ready(continue_after(&mut c, &run)).map_err(|f| f.error)?;
    }
    Ok(Some(run))
}

/// One finish in a transaction of its own (outside a batch).
pub(super) fn finish_alone(
    db: &mut Db,
    id: RunId,
    attempt: u32,
    write: &FinishWrite,
) -> StoreResult<Option<Run>> {
    if write.retry {
        // A retry continues with nothing: the statement's own savepoint is enough.
        return finish_row(&db.conn, &db.path, id, attempt, write);
    }
    let path = db.path.clone();
    db.conn
        .execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| sql_error(&path, "starting a finish", e))?;
    let written = finish_and_continue(db, id, attempt, write).and_then(|run| {
        db.conn
            .execute_batch("COMMIT")
            .map(|()| run)
            .map_err(|e| sql_error(&path, "committing a finish", e))
    });
    if written.is_err() && !db.conn.is_autocommit() {
        let _ = db.conn.execute_batch("ROLLBACK");
    }
    written
}

/// The output of `f`, a future over the SQLite primitives, which never wait (rusqlite is
/// synchronous): polled once on this thread. A future that did wait is a bug reported as
/// an error, never a hang.
fn ready<T>(f: impl Future<Output = Res<T>>) -> Res<T> {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => Err(StoreError::other(
            "a sqlite store primitive waited inside the finishing thread; report this as a bug",
        )
        .into()),
    }
}

/// The most finishes the finishing thread commits in one transaction.
const MAX_FINISH_BATCH: usize = 256;

/// One finish waiting for the finishing thread.
#[derive(Debug)]
pub(super) struct FinishReq {
    pub(super) id: RunId,
    pub(super) attempt: u32,
    pub(super) write: FinishWrite,
    pub(super) reply: tokio::sync::oneshot::Sender<Res<Option<Run>>>,
}

/// The thread's loop; ends when every store clone is gone.
pub(super) fn finish_loop(shared: &Weak<Shared>, rx: &mpsc::Receiver<FinishReq>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_FINISH_BATCH {
            match rx.try_recv() {
                Ok(req) => batch.push(req),
                Err(_) => break,
            }
        }
        // Every clone gone (the queue outlives them only by this batch): nobody waits.
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let mut db = shared.slot.check_out();
        finish_batch(&mut db, batch);
    }
}

/// A copy of `e` (kind and message) for each caller of a failed batch.
fn same_error(e: &StoreError) -> StoreError {
    StoreError::new(e.kind(), e.to_string())
}

fn finish_batch(db: &mut Db, batch: Vec<FinishReq>) {
    let path = db.path.clone();
    if let Err(e) = db.conn.execute_batch("BEGIN IMMEDIATE") {
        // Nothing was done: the lock is held elsewhere past the busy timeout (or the file is
        // gone); every caller gets that answer, none waits again.
        let e = sql_error(&path, "starting a batch of finishes", e);
        for req in batch {
            let _ = req.reply.send(Err(same_error(&e).into()));
        }
        return;
    }
    let answers = batch
        .iter()
        .map(|r| finish_and_continue(db, r.id, r.attempt, &r.write))
        .collect::<StoreResult<Vec<_>>>()
        .and_then(|answers| {
            db.conn
                .execute_batch("COMMIT")
                .map(|()| answers)
                .map_err(|e| sql_error(&path, "committing a batch of finishes", e))
        });
    match answers {
        Ok(answers) => {
            for (req, answer) in batch.into_iter().zip(answers) {
                let _ = req.reply.send(Ok(answer));
            }
        }
        Err(e) => {
            if !db.conn.is_autocommit() {
                let _ = db.conn.execute_batch("ROLLBACK");
            }
            if batch.len() > 1 {
                tracing::warn!(
                    "a batch of {} run finishes failed ({e}); recording each alone",
                    batch.len()
                );
            }
            for req in batch {
                let answer = finish_alone(db, req.id, req.attempt, &req.write);
                let _ = req.reply.send(answer.map_err(Into::into));
            }
        }
    }
}
