//! What a backend provides: sessions, transactions and a small set of primitives in its own
//! dialect (River's `riverdriver` interface is the model). Each primitive is one statement or
//! a few, with no scheduling decision in it: the engine ([`super::Engine`]) decides what is
//! claimed, what a finish changes, what recovery does and what every error says, and calls
//! these to read and write.
//!
//! Contract of every primitive:
//!
//! * It runs on the connection it is called on: inside the transaction after
//!   [`Session::begin`], on its own (committed as it goes) after [`Session::conn`].
//! * It returns what it read or wrote and decides nothing: "no row matched" is `None`,
//!   `false` or an empty list, never an error. Errors are the driver's, mapped to a [`Fail`]
//!   with a [`StoreErrorKind`](crate::store::StoreErrorKind) and a [`Retry`](super::Retry).
//! * Conditional writes are conditional in the statement itself (compare-and-set), so they
//!   hold against other nodes whether or not the caller holds locks.
//! * Reads marked *locked* take row locks (PostgreSQL `FOR NO KEY UPDATE SKIP LOCKED`, SQL
//!   Server `UPDLOCK, READPAST`) inside a transaction, passing over rows another transaction
//!   holds; an embedded backend whose transactions are serialised needs none.

use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;

use super::Fail;
use crate::alert::{AlertDelivery, AlertKey};
use crate::attempt::{Attempt, AttemptEnd, AttemptOutcome};
use crate::group::GroupDef;
use crate::job::{JobDef, JobId, JobName};
use crate::node::{InstanceId, NodeInfo, NodeSession, NodeStatus, Registration};
use crate::pause::{Hold, Pause, PauseKind};
use crate::run::{NodeId, PluginBuild, Progress, Run, RunId, RunState};
use crate::store::access::{ApiToken, NewToken, OperatorAction};
use crate::store::{
    CancelRequest, Capabilities, DueJob, JobQuery, LogLine, PurgeCounts, RunFilter, RunFinish,
    StoreError,
};

/// A primitive's result.
pub type Res<T> = Result<T, Fail>;

/// A backend: where sessions come from, and the few things that are not statements.
pub trait Dialect: Send + Sync + 'static {
    /// A connection checked out for the length of one store call.
    type Session: Session;

    /// What the backend can do (the conformance suite skips what it cannot, loudly).
    fn capabilities(&self) -> Capabilities;

    /// A session (a pooled connection, the embedded database's connection). `what` names the
    /// call for messages.
    fn session(&self, what: &'static str) -> impl Future<Output = Res<Self::Session>> + Send;

    /// A session for one auto-commit read (the engine's `read!` calls: listings, the loop's
    /// due reads), which writes nothing and needs no transaction. Default: [`Self::session`].
    /// A backend whose one writer connection would make a read wait behind a write (the
    /// SQLite store: claims and the finishing thread's batches) may answer it from a
    /// connection of its own; what it reads is what was committed when it ran, as on a
    /// server's pool.
    fn read_session(&self, what: &'static str) -> impl Future<Output = Res<Self::Session>> + Send {
        self.session(what)
    }

    /// Waits `pause` before the engine tries a call again after `error` (the core has no
    /// timer). A backend whose errors are never [`super::Retry::Safe`] is never asked.
    fn pause(
        &self,
        what: &str,
        error: &StoreError,
        pause: Duration,
    ) -> impl Future<Output = ()> + Send;

    /// Called before a node registers ([`crate::store::Store::node_register`]): `true` when
    /// the backend has just proven every earlier life recorded in the database dead (the
    /// SQLite store's file lock), so the registration follows whatever life the row names.
    /// An error refuses the registration (the lock is held by another process).
    fn before_register(&self, reg: &Registration) -> Res<bool> {
        let _ = reg;
        Ok(false)
    }

    /// Writes one finish (the engine has checked its shape and resolves lost commits).
    /// Default: [`Conn::run_finish_if_running`] on a session of its own — for a final state
    /// in a transaction that also creates the run's continuations
    /// ([`super::continue_after`], the rule every implementation must apply in the
    /// transaction of the compare-and-set, after it matched). A backend may batch
    /// finishes (the SQLite store's finishing thread commits those queued together in one
    /// transaction; a server store sends them through a [`super::FinishQueue`]) as long as
    /// each stays its own compare-and-set, answered only after the commit that holds it.
    fn finish(
        &self,
        id: RunId,
        attempt: u32,
        write: &FinishWrite,
    ) -> impl Future<Output = Res<Option<Run>>> + Send {
        super::finish::finish_alone(self, id, attempt, write)
    }
}

/// A connection for the length of one store call.
pub trait Session: Send {
    /// Its primitives, in a transaction or on their own.
    type Conn<'a>: Conn
    where
        Self: 'a;

    /// The primitives, each committed on its own (a read, or one conditional write).
    fn conn(&mut self) -> Self::Conn<'_>;

    /// A transaction (`BEGIN IMMEDIATE` on SQLite: the write lock first). Dropped without
    /// [`Conn::commit`], it rolls back.
    fn begin(&mut self, what: &'static str) -> impl Future<Output = Res<Self::Conn<'_>>> + Send;
}

/// A due pending run: a retry whose time has come, or a queued run (overlap `queue-one`, a
/// catch-up fire waiting its turn) claimable once its job is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingDue {
    /// The run.
    pub id: RunId,
    /// Its job's priority (claim order).
    pub priority: u16,
    /// When it became claimable: the retry time, or a queued run's creation.
    pub due_at: Timestamp,
}

/// A job's next fire moved by a claim, conditionally on the old value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextFireMove {
    /// The job.
    pub job: JobId,
    /// The next fire being claimed.
    pub old: Timestamp,
    /// The schedule's next firing occurrence after it (`None`: nothing more).
    pub new: Option<Timestamp>,
}

/// What a finish writes to a run, computed from the finish alone so that a backend can write
/// it in one conditional statement without reading the run first (the rule of
/// [`crate::store::backend::apply_finish`], as columns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishWrite {
    /// The new state: final, or `Pending` for a retry.
    pub state: RunState,
    /// Whether this is a retry: attempt + 1, `finished_at` unchanged.
    pub retry: bool,
    /// The error text.
    pub error: Option<String>,
    /// The result JSON.
    pub result_json: Option<String>,
    /// How long the attempt ran.
    pub elapsed: Option<Duration>,
    /// When the retry may be claimed (retries only).
    pub next_attempt_at: Option<Timestamp>,
    /// The end of a final state (`None` for a retry, which keeps the stored value).
    pub finished_at: Option<Timestamp>,
    /// The plugin build that ran the attempt (replaces an earlier attempt's, also with
    /// `None`: an attempt that reached no plugin).
    pub plugin: Option<PluginBuild>,
    /// The end of the attempt, written to its attempt row in the same statement or
    /// transaction as the run's columns (only when the run's compare-and-set matched).
    pub attempt_end: AttemptEnd,
}

impl FinishWrite {
    /// The columns `finish` writes.
    pub fn of(finish: &RunFinish) -> FinishWrite {
        let retry = finish.state == RunState::Pending;
        FinishWrite {
            state: finish.state,
            retry,
            error: finish.error.clone(),
            result_json: finish.result_json.clone(),
            elapsed: finish.elapsed,
            next_attempt_at: finish.retry_at.filter(|_| retry),
            finished_at: (!retry).then_some(finish.finished_at),
            plugin: finish.plugin.clone(),
            attempt_end: AttemptEnd {
                at: finish.finished_at,
                // `validate` refused running; skipped never reaches a finish.
                outcome: AttemptOutcome::of_state(finish.state).unwrap_or(AttemptOutcome::Failed),
                error: finish.error.clone(),
            },
        }
    }

    /// Writes the columns into `run` (a backend that holds runs as values): the lease ends.
    pub fn apply(&self, run: &mut Run) {
        run.state = self.state;
        run.error.clone_from(&self.error);
        run.result_json.clone_from(&self.result_json);
        run.elapsed = self.elapsed;
        run.plugin.clone_from(&self.plugin);
        run.lease_expires_at = None;
        run.next_attempt_at = self.next_attempt_at;
        if self.retry {
            run.attempt += 1;
        }
        if let Some(at) = self.finished_at {
            run.finished_at = Some(at);
        }
    }
}

/// Which due jobs a due query reads: all of them, or only those with a recurring schedule
/// ([`JobDef::is_recurring`]: the claim's fairness rule, and the next due instant of a node
/// whose only free slots are its recurring reserve). Both are read in claim order
/// from an index (the SQL stores' `jobs_claim` and `jobs_claim_recurring`), so either costs
/// what it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DueSet {
    /// Every due job.
    All,
    /// Only jobs whose schedule recurs.
    Recurring,
}

/// The primitives. See the module docs for the contract every one follows.
pub trait Conn: Send {
    /// Ends a transaction with COMMIT (a lost answer is a [`super::Retry::Unknown`]
    /// failure); nothing on a connection outside one.
    fn commit(self) -> impl Future<Output = Res<()>> + Send;

    // ---- jobs ------------------------------------------------------------------------

    /// The job with `id`.
    fn job_get(&mut self, id: JobId) -> impl Future<Output = Res<Option<JobDef>>> + Send;

    /// The jobs of `ids` that exist, in no promised order (a batch of finishes reads its
    /// runs' jobs at once: one round trip, not one per run). Default: one [`Conn::job_get`]
    /// each; a server reads them in one statement.
    fn jobs_get(&mut self, ids: &[JobId]) -> impl Future<Output = Res<Vec<JobDef>>> + Send {
        async move {
            let mut out = Vec::with_capacity(ids.len());
            for &id in ids {
                out.extend(self.job_get(id).await?);
            }
            Ok(out)
        }
    }

    /// What a run of job `id` that ended in `state` continues with
    /// ([`JobDef::continuations_for`]), `None` if the job is gone: every finished run asks.
    /// Default: reads the whole job; the memory store answers from the job's shared profile
    /// without building a `JobDef`, SQLite reads the two columns (B3). The server stores'
    /// batched finishes read their jobs once per batch instead (`continue_after_job`).
    fn job_continuations(
        &mut self,
        id: JobId,
        state: RunState,
    ) -> impl Future<Output = Res<Option<Vec<JobName>>>> + Send {
        async move {
            let job = self.job_get(id).await?;
            Ok(job.map(|j| j.continuations_for(state).to_vec()))
        }
    }

    /// How many jobs are stored (the dashboard's overview).
    fn job_count(&mut self) -> impl Future<Output = Res<u64>> + Send;

    /// Up to `limit` enabled jobs whose next fire is at or before `before`, earliest first
    /// (then by id), whatever their node tag: the dashboard's late jobs, where a job no node
    /// serves matters most. Read through the next-fire index: its cost depends on how many
    /// are late, not on how many jobs exist.
    fn jobs_late(
        &mut self,
        before: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<JobDef>>> + Send;

    /// The job named `name`.
    fn job_get_by_name(
        &mut self,
        name: &JobName,
    ) -> impl Future<Output = Res<Option<JobDef>>> + Send;

    /// Every job, by id.
    fn job_list(&mut self) -> impl Future<Output = Res<Vec<JobDef>>> + Send;

    /// Up to `query.limit + 1` jobs named after `query.after` that pass its filters
    /// ([`JobQuery::matches`]), by name ascending: the name column's order, which its unique
    /// index gives, so a page is an ordered index scan that stops at the limit. The engine
    /// has checked the limit and dropped an empty `handler_prefix` or `name_contains`, and
    /// makes the page ([`crate::store::JobPage::of`]).
    fn job_page(&mut self, query: &JobQuery) -> impl Future<Output = Res<Vec<JobDef>>> + Send;

    /// Inserts `job` with a new id, version 1 and `updated_at = now` unless its name is taken
    /// (then `None`, nothing written); the stored job.
    fn job_insert(
        &mut self,
        job: &JobDef,
        now: Timestamp,
    ) -> impl Future<Output = Res<Option<JobDef>>> + Send;

    /// Replaces every column of job `job.id` (version `job.version + 1`, `updated_at = now`)
    /// if its stored version is still `job.version`; the stored job, or `None`.
    fn job_update_if_version(
        &mut self,
        job: &JobDef,
        now: Timestamp,
    ) -> impl Future<Output = Res<Option<JobDef>>> + Send;

    /// Deletes the job with its runs, their logs and attempts; whether it existed.
    fn job_delete(&mut self, id: JobId) -> impl Future<Output = Res<bool>> + Send;

    /// Sets `enabled` (version + 1, `updated_at = now`); the stored job, or `None`.
    fn job_set_enabled(
        &mut self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> impl Future<Output = Res<Option<JobDef>>> + Send;

    /// Sets the job's next fire to `new` if it is still `expected` (version unchanged);
    /// whether it was.
    fn job_set_next_fire_if(
        &mut self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Up to `limit` enabled jobs served by `tags` whose next fire is at or before `now`, in
    /// claim order (priority, next fire, id), with their running and pending counts (a run
    /// waiting for its dependencies, [`Run::is_waiting`], is not counted: it is not in
    /// flight for the overlap policy), of the jobs `set` names. Its cost must depend on what is
    /// due, not on how many jobs exist.
    fn jobs_due(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
        set: DueSet,
    ) -> impl Future<Output = Res<Vec<DueJob>>> + Send;

    /// The preparation's read ([`crate::store::Store::job_due`]): [`Conn::jobs_due`] of
    /// [`DueSet::All`], and, only when that fills `limit`, of [`DueSet::Recurring`] too (a
    /// backlog of one-off fires would hide every recurring one behind it); the second is
    /// empty otherwise. The second read does not depend on the first's rows, so a dialect
    /// that can send both before reading either answer (PostgreSQL pipelines them) may send
    /// both every time and drop the second when the first is not full: a pass during a
    /// backlog then waits for one round trip instead of two.
    fn jobs_due_prepare(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> impl Future<Output = Res<(Vec<DueJob>, Vec<DueJob>)>> + Send {
        async move {
            let due = self.jobs_due(now, limit, tags, DueSet::All).await?;
            let recurring = if recurring_page_needed(&due, limit) {
                self.jobs_due(now, limit, tags, DueSet::Recurring).await?
            } else {
                Vec::new()
            };
            Ok((due, recurring))
        }
    }

    /// The earliest instant something served by `tags` becomes claimable, of what `set`
    /// names (see [`crate::store::Store::next_due`]).
    fn next_due(
        &mut self,
        tags: &[String],
        set: DueSet,
    ) -> impl Future<Output = Res<Option<Timestamp>>> + Send;

    // ---- claiming --------------------------------------------------------------------

    /// Called first in a claim's transaction with the claim's token (PostgreSQL takes it as
    /// a transaction lock, so that a resolution of this claim waits for it to end).
    fn claim_begun(&mut self, token: i64) -> impl Future<Output = Res<()>> + Send {
        let _ = token;
        async { Ok(()) }
    }

    /// Opens a claim: whether node `node` is paused (then the claim takes nothing), and
    /// [`Conn::claim_begun`] with the claim's token. Two statements whose answers nothing
    /// between them waits for, so a dialect that can send them together (PostgreSQL
    /// pipelines them: one round trip) overrides this; the lock may be taken for a paused
    /// node, which costs nothing (it ends with the transaction).
    fn claim_start(&mut self, node: &str, token: i64) -> impl Future<Output = Res<bool>> + Send {
        async move {
            if self.pause_get(PauseKind::Node, node).await?.is_some() {
                return Ok(true);
            }
            self.claim_begun(token).await?;
            Ok(false)
        }
    }

    /// *Locked*: a claim round's two reads, [`Conn::claim_fires`] (`fire_limit`, all due
    /// jobs) and [`Conn::claim_pending`] (`pending_limit`). Neither depends on the other's
    /// answer, so a dialect that can send both at once (PostgreSQL pipelines them) overrides
    /// this; a dialect must then still run them in this order, fires first.
    fn claim_due(
        &mut self,
        now: Timestamp,
        fire_limit: usize,
        exclude: &[JobId],
        pending_limit: usize,
        tags: &[String],
    ) -> impl Future<Output = Res<(Vec<JobDef>, Vec<PendingDue>)>> + Send {
        async move {
            let fires = self
                .claim_fires(now, fire_limit, exclude, tags, DueSet::All)
                .await?;
            let pending = self.claim_pending(now, pending_limit, tags).await?;
            Ok((fires, pending))
        }
    }

    /// A claim round's writes: [`Conn::advance_next_fires`] (none when `moves` is empty),
    /// then [`Conn::insert_runs`], then [`Conn::attempts_begin`] of every inserted run that
    /// is running; how many next fires moved and the runs inserted. The caller checks the
    /// count after all three and rolls the whole claim back on a mismatch, so a dialect may
    /// send them at once (PostgreSQL pipelines the move with one statement that inserts the
    /// runs and their attempts) as long as the server runs them in this order.
    fn claim_write(
        &mut self,
        moves: &[NextFireMove],
        runs: &[Run],
        token: i64,
    ) -> impl Future<Output = Res<(usize, Vec<Run>)>> + Send {
        async move {
            let moved = if moves.is_empty() {
                0
            } else {
                self.advance_next_fires(moves).await?
            };
            let inserted = self.insert_runs(runs, token).await?;
            let begun: Vec<Attempt> = inserted
                .iter()
                .filter(|r| r.state == RunState::Running)
                .filter_map(super::claim::attempt_of)
                .collect();
            if !begun.is_empty() {
                self.attempts_begin(&begun).await?;
            }
            Ok((moved, inserted))
        }
    }

    /// *Locked*: up to `limit` due jobs as [`Conn::jobs_due`] orders them, leaving out
    /// `exclude` (jobs this claim already handled), of the jobs `set` names, as whole
    /// definitions.
    fn claim_fires(
        &mut self,
        now: Timestamp,
        limit: usize,
        exclude: &[JobId],
        tags: &[String],
        set: DueSet,
    ) -> impl Future<Output = Res<Vec<JobDef>>> + Send;

    /// *Locked*: up to `limit` pending runs of enabled jobs served by `tags` that are
    /// claimable at `now` — retries whose time has come, and queued runs (no retry time)
    /// created by `now` whose job has nothing running — in claim order (priority, due time,
    /// id).
    fn claim_pending(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> impl Future<Output = Res<Vec<PendingDue>>> + Send;

    /// Moves each job's next fire from `old` to `new`, conditionally on `old`; how many moved.
    fn advance_next_fires(
        &mut self,
        moves: &[NextFireMove],
    ) -> impl Future<Output = Res<usize>> + Send;

    /// Inserts each run (with a new id) under the unique (job, fire time) key, skipping a
    /// run whose key is taken; the runs inserted. Runs in state running record `token` as
    /// their claim token (others 0).
    fn insert_runs(
        &mut self,
        runs: &[Run],
        token: i64,
    ) -> impl Future<Output = Res<Vec<Run>>> + Send;

    /// Whether the queued run of `job` may start now: the job has no running run (including
    /// runs this transaction started), and (a server) its row is not locked by another claim.
    fn queued_may_start(&mut self, job: JobId) -> impl Future<Output = Res<bool>> + Send;

    /// Writes every mutable column of `run` (and `token` as its claim token) if the stored
    /// run is still in `expected` (state, attempt); the stored run, or `None`.
    fn run_update_if(
        &mut self,
        run: &Run,
        expected: (RunState, u32),
        token: i64,
    ) -> impl Future<Output = Res<Option<Run>>> + Send;

    /// The running runs of `node` that claim `token` wrote: what a claim whose COMMIT answer
    /// was lost committed, if it did (a backend waits first for that claim's transaction to
    /// end, if it can tell).
    fn runs_claimed_by(
        &mut self,
        node: &NodeId,
        token: i64,
    ) -> impl Future<Output = Res<Vec<Run>>> + Send;

    // ---- runs ------------------------------------------------------------------------

    /// The run with `id`.
    fn run_get(&mut self, id: RunId) -> impl Future<Output = Res<Option<Run>>> + Send;

    /// The id of job `job`'s run at `fire`.
    fn run_id_at(
        &mut self,
        job: JobId,
        fire: Timestamp,
    ) -> impl Future<Output = Res<Option<RunId>>> + Send;

    /// Runs matching `filter`, newest fire time first (then newest id).
    fn run_list(&mut self, filter: &RunFilter) -> impl Future<Output = Res<Vec<Run>>> + Send;

    /// Writes `write` to the run if it is running with `attempt`, and ends that attempt's row
    /// with `write.attempt_end` (if it is open), atomically; the stored run, or `None`
    /// (nothing written).
    fn run_finish_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        write: &FinishWrite,
    ) -> impl Future<Output = Res<Option<Run>>> + Send;

    /// [`Conn::run_finish_if_running`] for each finish, in order, on this connection (a
    /// batch's transaction, [`super::FinishQueue`]): the stored runs, `None` where a
    /// compare-and-set did not match, one answer per finish. The runs are distinct. Default:
    /// one statement per finish; a server writes them in one statement over arrays.
    fn run_finish_many(
        &mut self,
        finishes: &[(RunId, u32, &FinishWrite)],
    ) -> impl Future<Output = Res<Vec<Option<Run>>>> + Send {
        async move {
            let mut out = Vec::with_capacity(finishes.len());
            for &(id, attempt, write) in finishes {
                out.push(self.run_finish_if_running(id, attempt, write).await?);
            }
            Ok(out)
        }
    }

    /// Records `progress` if the run is running; whether it was.
    fn run_set_progress_if_running(
        &mut self,
        id: RunId,
        progress: &Progress,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// *Locked*: the running runs whose lease expired at `now` and, with `restart`, the
    /// running runs of that node under any other instance (or none recorded), by id.
    fn runs_to_recover(
        &mut self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> impl Future<Output = Res<Vec<RunId>>> + Send;

    /// Runs of `job` (every job with `None`) whose fire time is in `[from, to)`, by fire
    /// time then id. Along the (job, fire time) key.
    fn runs_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = Res<Vec<Run>>> + Send;

    // ---- attempts --------------------------------------------------------------------

    /// Inserts each attempt's row under its (run, attempt) key, open (no end); a taken key is
    /// left as it is.
    fn attempts_begin(&mut self, attempts: &[Attempt]) -> impl Future<Output = Res<()>> + Send;

    /// Ends attempt `attempt` of `run` with `end` if its row is open; whether it was.
    fn attempt_end(
        &mut self,
        run: RunId,
        attempt: u32,
        end: &AttemptEnd,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Records that attempt `attempt` of `run`, ended by recovery (outcome `lease_expired` or
    /// `node_restarted`), was still executing until `at`: its node's finish came later and
    /// was refused. Sets `finished_at = at` and `error` if the row has such an outcome and an
    /// earlier end; whether it did.
    fn attempt_outlived(
        &mut self,
        run: RunId,
        attempt: u32,
        at: Timestamp,
        error: &str,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// The attempts of one run, by attempt number.
    fn attempts_of_run(&mut self, run: RunId) -> impl Future<Output = Res<Vec<Attempt>>> + Send;

    /// The attempts of the runs [`Conn::runs_between`] returns, by fire time, run id and
    /// attempt number.
    fn attempts_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = Res<Vec<Attempt>>> + Send;

    // ---- nodes and leases --------------------------------------------------------------

    /// The heartbeat of `node`'s life `instance` at `now` (on the node's row and on the life's
    /// session row) and the renewal to `until` of the leases of its running runs that have
    /// not expired at `now`, atomically: the renewed runs' ids, or `None` (nothing written)
    /// when the node's row does not hold `instance`.
    fn renew(
        &mut self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = Res<Option<Vec<RunId>>>> + Send;

    /// The node's row with its running runs; *locked* for an update inside a transaction
    /// (SQL Server also locks the key's range while the row is missing).
    fn node_get(&mut self, id: &NodeId) -> impl Future<Output = Res<Option<NodeStatus>>> + Send;

    /// Writes `node` as the node's life, started and heartbeating at `now`, not stopped:
    /// replacing the row when `exists`, inserting it otherwise (`false` when another process
    /// inserted it first: the engine tries again and judges that row); and records the life
    /// as a new session row ([`NodeSession`]).
    fn node_put(
        &mut self,
        node: &NodeInfo,
        now: Timestamp,
        exists: bool,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Records the stop of `node`'s life `instance` on its session row, and on the node's row
    /// unless that holds another life by now.
    fn node_stop(
        &mut self,
        node: &NodeId,
        instance: &InstanceId,
        now: Timestamp,
    ) -> impl Future<Output = Res<()>> + Send;

    /// Every node, by id, with its running runs.
    fn node_list(&mut self) -> impl Future<Output = Res<Vec<NodeStatus>>> + Send;

    // ---- pauses ----------------------------------------------------------------------

    /// The hold of job `job` (its next fire kept aside while paused), if it is held.
    fn hold_get(&mut self, job: JobId) -> impl Future<Output = Res<Option<Hold>>> + Send;

    /// Records the hold of job `job` (the engine deletes an old one first in the same
    /// transaction); removed with the job.
    fn hold_insert(&mut self, job: JobId, hold: &Hold) -> impl Future<Output = Res<()>> + Send;

    /// Removes the hold of job `job`; whether there was one.
    fn hold_delete(&mut self, job: JobId) -> impl Future<Output = Res<bool>> + Send;

    /// Every hold, by job id.
    fn holds_list(&mut self) -> impl Future<Output = Res<Vec<(JobId, Hold)>>> + Send;

    /// The pause of group or node `name`, if any.
    fn pause_get(
        &mut self,
        kind: PauseKind,
        name: &str,
    ) -> impl Future<Output = Res<Option<Pause>>> + Send;

    /// Records the pause of group or node `name` unless it is paused already (then `false`,
    /// nothing written).
    fn pause_insert(
        &mut self,
        kind: PauseKind,
        name: &str,
        pause: &Pause,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Removes the pause of group or node `name`; whether there was one.
    fn pause_delete(
        &mut self,
        kind: PauseKind,
        name: &str,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Every group and node pause, by kind then name.
    fn pauses_list(&mut self) -> impl Future<Output = Res<Vec<(PauseKind, String, Pause)>>> + Send;

    // ---- groups ----------------------------------------------------------------------

    /// The stored definition of group `name`, if any; with `lock`, *locked* for an update
    /// inside a transaction, waiting for (not passing over) a claim that holds it (PostgreSQL
    /// `FOR UPDATE`, SQL Server `UPDLOCK, HOLDLOCK`): the claim counts the group's running
    /// runs under this lock.
    fn group_get(
        &mut self,
        name: &str,
        lock: bool,
    ) -> impl Future<Output = Res<Option<GroupDef>>> + Send;

    /// Writes the definition of group `name` (inserting or replacing its row).
    fn group_put(&mut self, name: &str, def: &GroupDef) -> impl Future<Output = Res<()>> + Send;

    /// Every stored group definition, by name.
    fn group_defs(&mut self) -> impl Future<Output = Res<Vec<(String, GroupDef)>>> + Send;

    // ---- cancel requests -------------------------------------------------------------

    /// Records `request` unless the run has one already (then `false`, nothing written);
    /// removed with the run.
    fn cancel_insert(&mut self, request: &CancelRequest) -> impl Future<Output = Res<bool>> + Send;

    /// The cancel request of run `run`, if any.
    fn cancel_get(&mut self, run: RunId)
    -> impl Future<Output = Res<Option<CancelRequest>>> + Send;

    /// The cancel requests of runs in state running on `node`, by run id.
    fn cancels_of_node(
        &mut self,
        node: &NodeId,
    ) -> impl Future<Output = Res<Vec<CancelRequest>>> + Send;
    /// The node lives that started before `to` and were last seen (stop, else heartbeat) at or
    /// after `from`, by start.
    fn node_sessions(
        &mut self,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = Res<Vec<NodeSession>>> + Send;

    // ---- logs, retention, notifications ---------------------------------------------

    /// Appends `lines` to the run's log with increasing sequence numbers, all or none;
    /// `false` (nothing written) when the run does not exist.
    fn log_append(
        &mut self,
        run: RunId,
        lines: &[LogLine],
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Up to `limit` log lines of the run after `after`, in order.
    fn log_list(
        &mut self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<(u64, LogLine)>>> + Send;

    /// Removes the runs in a final state that finished before `older_than`, with their logs
    /// and attempts.
    fn retention_purge(
        &mut self,
        older_than: Timestamp,
    ) -> impl Future<Output = Res<PurgeCounts>> + Send;

    // ---- API access (tokens, operator actions) ---------------------------------------

    /// Inserts the token; `None` (nothing written) when its name is taken.
    fn token_insert(
        &mut self,
        token: &NewToken,
    ) -> impl Future<Output = Res<Option<ApiToken>>> + Send;

    /// Every token, by name.
    fn token_list(&mut self) -> impl Future<Output = Res<Vec<ApiToken>>> + Send;

    /// Sets the named token's revocation time to `now` unless it has one; the token after,
    /// or `None` when there is no such token.
    fn token_revoke(
        &mut self,
        name: &str,
        now: Timestamp,
    ) -> impl Future<Output = Res<Option<ApiToken>>> + Send;

    /// Inserts the action (a new id).
    fn action_insert(&mut self, action: &OperatorAction) -> impl Future<Output = Res<()>> + Send;

    /// Up to `limit` actions, newest (highest id) first, of the job named `job` when given.
    fn action_list(
        &mut self,
        job: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<OperatorAction>>> + Send;

    // ---- alerts

    /// Reopens the *closed* episode row of `key` with `episode` opened at `now` (`closed_at`
    /// cleared); `false` when there is no row or it is open.
    fn alert_reopen(
        &mut self,
        key: &AlertKey,
        episode: &str,
        now: Timestamp,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Inserts the open episode row of `key`; `false` when a row of `key` exists (the
    /// primary key (subject, condition) decides, also against a concurrent insert).
    fn alert_insert(
        &mut self,
        key: &AlertKey,
        episode: &str,
        now: Timestamp,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Sets `closed_at = now` on the open episode row of `key`; `false` when none is open.
    fn alert_close(
        &mut self,
        key: &AlertKey,
        now: Timestamp,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Inserts a delivery row (the fields already clipped) and returns its id.
    fn alert_delivery_insert(
        &mut self,
        delivery: &AlertDelivery,
    ) -> impl Future<Output = Res<i64>> + Send;

    /// Up to `limit` delivery rows, newest (highest id) first.
    fn alert_delivery_list(
        &mut self,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<AlertDelivery>>> + Send;

    // ---- continuations and dynamic parameters

    /// The runs whose `parent_run_id` is `parent`, by id.
    fn runs_of_parent(&mut self, parent: RunId) -> impl Future<Output = Res<Vec<Run>>> + Send;

    /// The greatest fire time of a run of `job` in state succeeded before `before`.
    fn last_success_fire(
        &mut self,
        job: JobId,
        before: Timestamp,
    ) -> impl Future<Output = Res<Option<Timestamp>>> + Send;

    /// Sets the run's `params_resolved` to `params_json` if it is running `attempt`; whether
    /// it was.
    fn run_set_params_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        params_json: &str,
    ) -> impl Future<Output = Res<bool>> + Send;

    /// Tells other nodes that something may be due sooner than they planned (PostgreSQL
    /// `NOTIFY`, delivered at commit); nothing where other nodes only poll.
    fn notify_due_sooner(&mut self) -> impl Future<Output = Res<()>> + Send {
        async { Ok(()) }
    }
}

/// Whether [`Conn::jobs_due_prepare`]'s recurring read belongs in its answer: only when the
/// first page filled `limit` (more may be due than it shows, and recurring fires may hide
/// behind it). One rule for the default and for a dialect that sends both reads at once.
pub fn recurring_page_needed(due: &[DueJob], limit: usize) -> bool {
    limit > 0 && due.len() >= limit
}
