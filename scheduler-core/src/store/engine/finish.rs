//! Finishes in batches (group commit) for a server store: a run's end is queued and
//! committed with the others that ended meanwhile, in one transaction, each still its own
//! compare-and-set answered only after the commit that holds it.
//!
//! With one transaction per finished run, a burst of short runs on a database server spends
//! its time on commits (B5: 1.40 commits per run). [`FinishQueue`] needs no task of its own
//! and no runtime: the first caller to find the queue idle becomes its *drainer* (leader and
//! followers). The drainer takes everything queued (up to [`MAX_FINISH_BATCH`], one finish
//! per run), writes it in one transaction ([`Conn::run_finish_many`], then each matched
//! run's continuations), commits, answers every caller, and hands the queue on to the first
//! caller still waiting, who drains the next batch; a caller drains only until its own finish
//! is answered, so nobody's latency grows with the load behind it. Nothing waits for more
//! finishes to arrive: alone, a finish is a batch of one, written exactly as the unbatched
//! path ([`finish_alone`]) writes it.
//!
//! Failures, so that one finish never decides another's answer:
//!
//! * No session (the pool is exhausted or the server down): every finish of the batch gets
//!   that failure (its retry loop tries again); none of them was written.
//! * A failure that is the batch's and not one finish's — transient before the COMMIT
//!   ([`Retry::Safe`]: nothing was committed) or a lost COMMIT answer ([`Retry::Unknown`]) —
//!   goes to every caller: the engine's finish resolves it as it resolves its own, by reading
//!   the run back (ended with this finish: answered as written; still running with this
//!   attempt: written again), so a lost COMMIT never becomes a loss or a second run.
//! * Any other failure (a bad row, a continuation refused) rolls the batch back and writes
//!   each finish alone, each getting its own answer.
//! * A drainer whose call is dropped mid-batch (its caller gave up) leaves that batch's
//!   outcome unknown: its callers are answered [`Retry::Unknown`] and resolve it by reading
//!   back, and the queue passes to the next caller still waiting.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

use super::continuation::continue_after_job;
use super::{Conn, Dialect, Fail, FinishWrite, Res, Retry, Session};
use crate::job::{JobDef, JobId};
use crate::run::{Run, RunId, RunState};
use crate::store::StoreError;

/// The most finishes one batch (one transaction) holds.
pub const MAX_FINISH_BATCH: usize = 256;

const WHAT: &str = "finishing a run";

/// One finish in a transaction of its own (a final state: with its continuations) or, for a
/// retry, one statement on its own: the unbatched path, and the default
/// [`Dialect::finish`].
pub async fn finish_alone<D: Dialect + ?Sized>(
    d: &D,
    id: RunId,
    attempt: u32,
    write: &FinishWrite,
) -> Res<Option<Run>> {
    let mut s = d.session(WHAT).await?;
    finish_on(&mut s, id, attempt, write).await
}

/// [`finish_alone`] on a session already held.
async fn finish_on<S: Session>(
    s: &mut S,
    id: RunId,
    attempt: u32,
    write: &FinishWrite,
) -> Res<Option<Run>> {
    if write.retry {
        // A retry continues with nothing: one statement on its own.
        return s.conn().run_finish_if_running(id, attempt, write).await;
    }
    let mut tx = s.begin(WHAT).await?;
    let Some(run) = tx.run_finish_if_running(id, attempt, write).await? else {
        return Ok(None);
    };
    super::continuation::continue_after(&mut tx, &run).await?;
    tx.commit().await?;
    Ok(Some(run))
}

/// The finishes of one store waiting to be written together (see the module docs). Shared by
/// the store's clones (one queue per pool); a dialect that batches holds one and sends its
/// [`Dialect::finish`] through [`FinishQueue::finish`].
#[derive(Debug, Default)]
pub struct FinishQueue {
    queue: Mutex<Queue>,
    batches: AtomicU64,
    batched: AtomicU64,
    lost: AtomicU64,
}

/// How a [`FinishQueue`] has written: diagnostics for operators, tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FinishStats {
    /// Batches written (a batch of one included): at most one commit each, unless a batch
    /// fell back to writing its finishes alone.
    pub batches: u64,
    /// Finishes those batches held.
    pub finishes: u64,
    /// Batches of several finishes whose COMMIT answer was lost: each of their finishes was
    /// resolved by reading its run back.
    pub lost_commits: u64,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<Entry>,
    /// Whether a caller is draining (or has been handed the queue and is about to).
    draining: bool,
}

#[derive(Debug)]
struct Entry {
    id: RunId,
    attempt: u32,
    write: FinishWrite,
    reply: Arc<Reply>,
}

/// Where a queued finish's caller waits: for its answer, or for its turn to drain.
#[derive(Debug, Default)]
struct Reply(Mutex<ReplyState>);

#[derive(Debug, Default)]
struct ReplyState {
    answer: Option<Res<Option<Run>>>,
    /// Handed the queue: this caller drains next.
    lead: bool,
    /// The caller gave up (its future was dropped): nobody reads an answer or takes a turn.
    gone: bool,
    waker: Option<Waker>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state stays consistent under every lock (no code between two writes can panic).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Reply {
    /// Delivers `answer` unless the caller gave up.
    fn answer(&self, answer: Res<Option<Run>>) {
        let mut r = lock(&self.0);
        if r.gone {
            return;
        }
        r.answer = Some(answer);
        if let Some(w) = r.waker.take() {
            w.wake();
        }
    }

    fn take_answer(&self) -> Option<Res<Option<Run>>> {
        lock(&self.0).answer.take()
    }
}

/// A copy of `f` for each caller of a batch that failed as a whole.
fn same_fail(f: &Fail) -> Fail {
    Fail {
        error: StoreError::new(f.error.kind(), f.error.to_string()),
        retry: f.retry,
    }
}

impl Queue {
    /// Hands the queue to the first caller still waiting, or marks it idle.
    fn hand_on(&mut self) {
        for e in &self.waiting {
            let mut r = lock(&e.reply.0);
            if !r.gone {
                r.lead = true;
                if let Some(w) = r.waker.take() {
                    w.wake();
                }
                return;
            }
        }
        // Only finishes whose callers gave up (if any) are left: the next caller to queue
        // drains them with its own.
        self.draining = false;
    }

    /// The next batch: the oldest finishes, at most one per run (a second finish of a run
    /// waits for the next batch, where its compare-and-set sees the first one's effect).
    fn take(&mut self) -> Vec<Entry> {
        let mut batch = Vec::new();
        let mut ids = HashSet::new();
        let mut rest = VecDeque::new();
        while let Some(e) = self.waiting.pop_front() {
            if ids.insert(e.id) {
                batch.push(e);
                if batch.len() == MAX_FINISH_BATCH {
                    break;
                }
            } else {
                rest.push_back(e);
            }
        }
        rest.append(&mut self.waiting);
        self.waiting = rest;
        batch
    }
}

/// A caller's place in the queue: on drop before its answer (its future dropped), it gives
/// up its place and, if the queue is its to drain, hands it on.
struct Turn<'a> {
    queue: &'a FinishQueue,
    reply: Arc<Reply>,
    draining: bool,
    done: bool,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut q = lock(&self.queue.queue);
        let lead = {
            let mut r = lock(&self.reply.0);
            r.gone = true;
            std::mem::take(&mut r.lead)
        };
        if self.draining || lead {
            q.hand_on();
        }
    }
}

/// The finishes of a batch being written: any not answered when it is dropped (the drainer's
/// call was dropped mid-batch) are answered as unknown, to be resolved by reading back.
struct Batch(Vec<Entry>);

impl Drop for Batch {
    fn drop(&mut self) {
        for e in self.0.drain(..) {
            e.reply.answer(Err(Fail {
                error: StoreError::transient(
                    "the call writing this finish in a batch was cancelled; its outcome is \
                     unknown and is resolved by reading the run back",
                ),
                retry: Retry::Unknown,
            }));
        }
    }
}

impl Batch {
    fn answer_all(&mut self, f: &Fail) {
        for e in self.0.drain(..) {
            e.reply.answer(Err(same_fail(f)));
        }
    }
}

impl FinishQueue {
    /// A queue with nothing waiting.
    pub fn new() -> FinishQueue {
        FinishQueue::default()
    }

    /// How this queue has written so far.
    pub fn stats(&self) -> FinishStats {
        FinishStats {
            batches: self.batches.load(Ordering::Relaxed),
            finishes: self.batched.load(Ordering::Relaxed),
            lost_commits: self.lost.load(Ordering::Relaxed),
        }
    }

    /// Writes the finish `write` of run `id` at `attempt` with the others queued meanwhile, on
    /// sessions of `d`; the run as written, or `None` when its compare-and-set did not match
    /// (the answer [`Dialect::finish`] gives).
    pub async fn finish<D: Dialect>(
        &self,
        d: &D,
        id: RunId,
        attempt: u32,
        write: &FinishWrite,
    ) -> Res<Option<Run>> {
        let reply = Arc::new(Reply::default());
        let lead = {
            let mut q = lock(&self.queue);
            q.waiting.push_back(Entry {
                id,
                attempt,
                write: write.clone(),
                reply: reply.clone(),
            });
            !std::mem::replace(&mut q.draining, true)
        };
        let mut turn = Turn {
            queue: self,
            reply,
            draining: lead,
            done: false,
        };
        if !lead {
            if let Some(answer) = wait(&turn.reply).await {
                turn.done = true;
                return answer;
            }
            // Handed the queue. No await between taking the turn and recording it: a drop
            // in between cannot lose the queue.
            turn.draining = true;
        }
        let answer = loop {
            let wrote = self.drain(d).await;
            if let Some(answer) = turn.reply.take_answer() {
                break answer;
            }
            if !wrote {
                // The drainer's own finish waits in the queue until it drains it; an empty
                // queue here is a bug, reported rather than spun on.
                break Err(StoreError::other(
                    "a finish left the batch queue unanswered; report this as a bug",
                )
                .into());
            }
        };
        turn.done = true;
        lock(&self.queue).hand_on();
        answer
    }

    /// Writes one batch and answers its callers; `false` when nothing was queued.
    async fn drain<D: Dialect>(&self, d: &D) -> bool {
        let session = d.session(WHAT).await;
        // Taken once the session is at hand: the finishes queued while it was being found
        // join this batch.
        let mut batch = Batch(lock(&self.queue).take());
        if batch.0.is_empty() {
            return false;
        }
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batched
            .fetch_add(batch.0.len() as u64, Ordering::Relaxed);
        let mut s = match session {
            Ok(s) => s,
            Err(f) => {
                batch.answer_all(&f);
                return true;
            }
        };
        if let [e] = batch.0.as_slice() {
            // Alone: exactly the unbatched path (a retry stays one statement on its own).
            let answer = finish_on(&mut s, e.id, e.attempt, &e.write).await;
            if let Some(e) = batch.0.pop() {
                e.reply.answer(answer);
            }
            return true;
        }
        let written = match s.begin(WHAT).await {
            Ok(tx) => write_batch(tx, &batch.0).await,
            Err(f) => Err(f),
        };
        match written {
            Ok(runs) => {
                for (e, run) in batch.0.drain(..).zip(runs) {
                    e.reply.answer(Ok(run));
                }
            }
            Err(f) if f.retry != Retry::No => {
                if f.retry == Retry::Unknown {
                    self.lost.fetch_add(1, Ordering::Relaxed);
                }
                batch.answer_all(&f);
            }
            Err(_) => {
                // Rolled back (the transaction was dropped): each alone, with its own answer.
                // Each stays in the batch while it is written, so a drop meanwhile answers
                // it and those after it (as unknown) instead of leaving them waiting.
                batch.0.reverse();
                while let Some(e) = batch.0.last() {
                    let answer = finish_on(&mut s, e.id, e.attempt, &e.write).await;
                    if let Some(e) = batch.0.pop() {
                        e.reply.answer(answer);
                    }
                }
            }
        }
        true
    }
}

/// Waits for `reply`'s answer (`Some`) or for the queue to be handed over (`None`).
async fn wait(reply: &Reply) -> Option<Res<Option<Run>>> {
    std::future::poll_fn(|cx| {
        let mut r = lock(&reply.0);
        if let Some(answer) = r.answer.take() {
            return Poll::Ready(Some(answer));
        }
        if std::mem::take(&mut r.lead) {
            return Poll::Ready(None);
        }
        match &mut r.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    })
    .await
}

/// The batch in transaction `tx`: every compare-and-set in one primitive, then the
/// continuations of each run it ended (each job read once), then the COMMIT.
async fn write_batch<C: Conn>(mut tx: C, batch: &[Entry]) -> Res<Vec<Option<Run>>> {
    let finishes: Vec<(RunId, u32, &FinishWrite)> =
        batch.iter().map(|e| (e.id, e.attempt, &e.write)).collect();
    let runs = tx.run_finish_many(&finishes).await?;
    if runs.len() != batch.len() {
        return Err(StoreError::other(format!(
            "the store answered {} of {} finishes of a batch; report this as a bug",
            runs.len(),
            batch.len()
        ))
        .into());
    }
    // The jobs of the runs that ended for good, read in one call: their continuations.
    let mut ids: Vec<JobId> = runs
        .iter()
        .flatten()
        .filter(|run| run.state != RunState::Pending)
        .map(|run| run.job_id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let jobs: HashMap<JobId, JobDef> = if ids.is_empty() {
        HashMap::new()
    } else {
        tx.jobs_get(&ids)
            .await?
            .into_iter()
            .filter_map(|job| Some((job.id?, job)))
            .collect()
    };
    for run in runs.iter().flatten() {
        if run.state == RunState::Pending {
            continue;
        }
        // A job removed behind takt's back has no continuations to start.
        if let Some(job) = jobs.get(&run.job_id) {
            continue_after_job(&mut tx, run, job).await?;
        }
    }
    tx.commit().await?;
    Ok(runs)
}
