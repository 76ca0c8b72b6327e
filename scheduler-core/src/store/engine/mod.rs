//! The store engine: the scheduling rules of a store written once, over the primitives each
//! backend implements in its own dialect ([`Dialect`], [`Session`], [`Conn`]).
//!
//! [`Engine`] implements every method of the [`Store`] contract: what is due and in which
//! order, what a claim writes ([`claim`]), what a finish may change and how a lost commit is
//! resolved, what recovery does, the one-process-per-node rule, which calls are retried after
//! a transient failure and what every shared error says. A backend is a [`Dialect`] — its SQL,
//! its transactions, its error mapping and its real special cases (PostgreSQL's one-statement
//! finish, its finishes committed together through [`FinishQueue`], and `NOTIFY`, SQLite's finishing thread and file lock, SQL Server's lock hints) —
//! and a store type that holds an `Engine` of it and says so through [`DialectStore`], which
//! gives it the [`Store`] implementation. The memory store is the first dialect, so the
//! reference and the databases share the rules instead of imitating each other, and the
//! conformance suite checks the primitives of each.
//!
//! Where a new scheduling rule goes: here (or in [`super::backend`], the pure decisions it
//! uses), once; a backend grows a primitive only when the rule needs to read or write
//! something no primitive reaches.
//!
//! The engine performs no I/O of its own and reads no clock: it awaits the dialect's
//! futures, and the pauses between retries are the dialect's ([`Dialect::pause`]).

pub mod backfill;
mod cancel;
mod claim;
pub mod continuation;
mod depend;
mod dialect;
mod fail;
mod finish;
mod group;
mod pause;
mod slot;

pub use continuation::{continue_after, continue_after_job};
pub use dialect::{
    Conn, Dialect, DueSet, FinishWrite, NextFireMove, PendingDue, Res, Session,
    recurring_page_needed,
};
pub use fail::{Fail, RETRY_PAUSES_MS, Retry, retrying, retrying_resolving};
pub use finish::{FinishQueue, FinishStats, MAX_FINISH_BATCH, finish_alone};
pub use slot::{Checkout, Slot};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::Timestamp;

use super::access::{ApiToken, NewToken, OperatorAction};
use super::backend::{
    check_skipped, finished_as, job_missing, name_taken, next_fire_moved, not_registered,
    recovery_event, run_changed, run_missing, stale_version, unfinishable,
};
use super::{
    Backfilled, CancelOutcome, CancelRequest, Capabilities, ClaimParams, ClaimedRun, DueJob,
    JobPage, JobQuery, LogLine, PurgeCounts, RunFilter, RunFinish, Store, StoreError, StoreResult,
};
use crate::alert::{AlertDelivery, AlertKey, clip, limits};
use crate::attempt::{Attempt, AttemptEnd, AttemptOutcome};
use crate::group::{GroupDef, GroupStatus};
use crate::job::{JobDef, JobId, JobName};
use crate::node::{InstanceId, NodeSession, NodeStatus, Registered, Registration, registration};
use crate::pause::{Pause, PauseTarget, Resumed};
use crate::run::{NodeId, Progress, Run, RunId, RunState};

/// The rules of a store over dialect `D`. Cheap to clone when `D` is (clones share the
/// dialect's connections or data, like two nodes on one database).
#[derive(Debug)]
pub struct Engine<D> {
    dialect: D,
    unknown_commits: Arc<AtomicU64>,
}

impl<D: Clone> Clone for Engine<D> {
    fn clone(&self) -> Self {
        Engine {
            dialect: self.dialect.clone(),
            unknown_commits: self.unknown_commits.clone(),
        }
    }
}

/// A store type made of an [`Engine`]: implementing this gives it the [`Store`] contract.
pub trait DialectStore: Send + Sync {
    /// Its dialect.
    type Dialect: Dialect;

    /// Its engine.
    fn engine(&self) -> &Engine<Self::Dialect>;
}

impl<D: Dialect> Engine<D> {
    /// The rules over `dialect`.
    pub fn new(dialect: D) -> Engine<D> {
        Engine {
            dialect,
            unknown_commits: Arc::default(),
        }
    }

    /// The dialect (for what a backend offers beyond the contract).
    pub fn dialect(&self) -> &D {
        &self.dialect
    }

    /// How many claims of this store (and its clones) had their COMMIT's answer lost and were
    /// resolved by their claim token: found committed (returned as claimed) or found not
    /// committed (claimed again). Diagnostics for operators and tests.
    pub fn unknown_commits(&self) -> u64 {
        self.unknown_commits.load(Ordering::Relaxed)
    }

    // ---- jobs ------------------------------------------------------------------------

    async fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        job.validate()?;
        let d = &self.dialect;
        let what = "inserting a job";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            continuation::check_job(&mut tx, job).await?;
            depend::check_job_graph(&mut tx, job).await?;
            let mut stored = tx
                .job_insert(job, now)
                .await?
                .ok_or_else(|| name_taken(&job.name))?;
            // A job added to a paused group is held from the start.
            pause::keep_held(&mut tx, &mut stored, now).await?;
            if stored.next_fire.is_some() {
                tx.notify_due_sooner().await?;
            }
            tx.commit().await?;
            Ok(stored)
        })
        .await
    }

    async fn job_update(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        job.validate()?;
        let id = job.id.ok_or_else(|| {
            StoreError::invalid(format!(
                "job {} has no id; insert it first, or load it to update it",
                job.name
            ))
        })?;
        let d = &self.dialect;
        let what = "updating a job";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let current = tx.job_get(id).await?.ok_or_else(|| job_missing(id))?;
            if current.version != job.version {
                return Err(stale_version(&current.name, current.version, job.version).into());
            }
            if let Some(other) = tx.job_get_by_name(&job.name).await?
                && other.id != Some(id)
            {
                return Err(name_taken(&job.name).into());
            }
            continuation::check_job(&mut tx, job).await?;
            depend::check_job_graph(&mut tx, job).await?;
            if current.name != job.name {
                continuation::check_unreferenced(&mut tx, &current, Some(&job.name)).await?;
                depend::check_not_depended_on(&mut tx, &current.name, "renamed").await?;
            }
            let mut stored = tx.job_update_if_version(job, now).await?.ok_or_else(|| {
                StoreError::conflict(format!(
                    "job {} changed while updating it; reload it and apply your change again",
                    job.name
                ))
            })?;
            // A held job keeps its next fire aside; one moved out of a paused group resumes.
            pause::keep_held(&mut tx, &mut stored, now).await?;
            tx.notify_due_sooner().await?;
            tx.commit().await?;
            Ok(stored)
        })
        .await
    }

    async fn job_delete(&self, id: JobId) -> StoreResult<()> {
        let d = &self.dialect;
        let what = "deleting a job";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            // A job others continue with or depend on stays until they no longer name it.
            if let Some(current) = tx.job_get(id).await? {
                continuation::check_unreferenced(&mut tx, &current, None).await?;
                depend::check_not_depended_on(&mut tx, &current.name, "removed").await?;
            }
            if !tx.job_delete(id).await? {
                return Err(job_missing(id).into());
            }
            tx.commit().await
        })
        .await
    }

    async fn job_set_enabled(
        &self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> StoreResult<JobDef> {
        let d = &self.dialect;
        let what = "enabling or disabling a job";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            let stored = c
                .job_set_enabled(id, enabled, now)
                .await?
                .ok_or_else(|| job_missing(id))?;
            if enabled {
                c.notify_due_sooner().await?;
            }
            Ok(stored)
        })
        .await
    }

    async fn job_set_next_fire(
        &self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> StoreResult<()> {
        let d = &self.dialect;
        let what = "setting a job's next fire";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            if new.is_some()
                && let Some(hold) = c.hold_get(id).await?
            {
                let job = c.job_get(id).await?.ok_or_else(|| job_missing(id))?;
                return Err(pause::held_refusal(&job, hold.pause.as_ref()).into());
            }
            if c.job_set_next_fire_if(id, expected, new).await? {
                if new.is_some() {
                    c.notify_due_sooner().await?;
                }
                return Ok(());
            }
            let job = c.job_get(id).await?.ok_or_else(|| job_missing(id))?;
            Err(next_fire_moved(&job, expected).into())
        })
        .await
    }

    // ---- runs ------------------------------------------------------------------------

    /// Inserts `run` under its (job, fire time) key on its own: a taken key is a Conflict
    /// naming the run that holds it, a missing job NotFound.
    async fn insert_keyed(&self, run: &Run) -> StoreResult<Run> {
        let d = &self.dialect;
        let what = "recording a run";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            if c.job_get(run.job_id).await?.is_none() {
                return Err(job_missing(run.job_id).into());
            }
            if let Some(stored) = c.insert_runs(std::slice::from_ref(run), 0).await?.pop() {
                if stored.state == RunState::Pending {
                    c.notify_due_sooner().await?;
                }
                return Ok(stored);
            }
            Err(match c.run_id_at(run.job_id, run.fire_time).await? {
                Some(other) => super::backend::fire_taken(run.job_id, run.fire_time, other),
                // The job was deleted between the check and the insert.
                None => job_missing(run.job_id),
            }
            .into())
        })
        .await
    }

    async fn run_set_state_if_running(
        &self,
        id: RunId,
        expected_attempt: u32,
        finish: &RunFinish,
    ) -> StoreResult<Run> {
        finish.validate()?;
        let write = FinishWrite::of(finish);
        let d = &self.dialect;
        let what = "finishing a run";
        retrying_resolving(d, what, |resolving| {
            let write = &write;
            async move {
                if resolving {
                    // The earlier try may have committed before its connection failed.
                    let mut s = d.session(what).await?;
                    let run = s.conn().run_get(id).await?.ok_or_else(|| run_missing(id))?;
                    if finished_as(&run, expected_attempt, finish) {
                        return Ok(run);
                    }
                }
                let written = d.finish(id, expected_attempt, write).await.map_err(|f| {
                    // A write on its own that failed transiently may have been applied
                    // before the connection failed: resolve it by reading back.
                    match f.retry {
                        Retry::Safe => Fail {
                            retry: Retry::Unknown,
                            ..f
                        },
                        _ => f,
                    }
                })?;
                match written {
                    Some(run) => {
                        if write.retry {
                            // A retry is waiting: a node with free capacity may take it.
                            let mut s = d.session(what).await?;
                            s.conn().notify_due_sooner().await?;
                        }
                        Ok(run)
                    }
                    // Refused: say why, as the compare-and-set saw it. Boxed: a rare path
                    // that would otherwise grow every finish's future (deep stacks in
                    // debug builds of the server stores).
                    None => Err(Box::pin(refused(d, id, expected_attempt, finish)).await),
                }
            }
        })
        .await
    }

    async fn lease_renew(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<Vec<RunId>> {
        let d = &self.dialect;
        let what = "renewing leases";
        // Idempotent: renewing twice extends to the same instant.
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await.map_err(Fail::idempotent)?;
            match tx
                .renew(node, instance, until, now)
                .await
                .map_err(Fail::idempotent)?
            {
                Some(ids) => {
                    tx.commit().await.map_err(Fail::idempotent)?;
                    Ok(ids)
                }
                None => {
                    let holder = tx.node_get(node).await?;
                    Err(not_registered(node, instance, holder.as_ref()).into())
                }
            }
        })
        .await
    }

    async fn run_recover_expired(
        &self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> StoreResult<Vec<Run>> {
        let d = &self.dialect;
        let what = "recovering expired leases";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let mut out = Vec::new();
            for id in tx.runs_to_recover(now, restart).await? {
                let mut run = tx.run_get(id).await?.ok_or_else(|| run_missing(id))?;
                if run.state != RunState::Running {
                    continue;
                }
                let Some(event) = recovery_event(&run, now, restart) else {
                    continue;
                };
                let job = tx
                    .job_get(run.job_id)
                    .await?
                    .ok_or_else(|| job_missing(run.job_id))?;
                let attempt = run.attempt;
                let outcome = AttemptOutcome::of_recovery(&event);
                run.apply(event, now, &job.retry)
                    .map_err(StoreError::from)?;
                let stored = tx
                    .run_update_if(&run, (RunState::Running, attempt), 0)
                    .await?
                    .ok_or_else(|| run_changed(id, "recovering it"))?;
                if let Some(outcome) = outcome {
                    let end = AttemptEnd {
                        at: now,
                        outcome,
                        error: stored.error.clone(),
                    };
                    tx.attempt_end(id, attempt, &end).await?;
                }
                // A run recovery failed for good (its node died, no retry left) is as final
                // as one its node finished: its on_failure continuations start, in this
                // transaction, once (the (parent, job) key).
                if stored.state.is_final() {
                    continue_after(&mut tx, &stored).await?;
                }
                out.push(stored);
            }
            if !out.is_empty() {
                // Recovered runs may be retried at once, by any node.
                tx.notify_due_sooner().await?;
            }
            tx.commit().await?;
            Ok(out)
        })
        .await
    }

    async fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()> {
        let d = &self.dialect;
        let what = "recording progress";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            if c.run_set_progress_if_running(id, progress).await? {
                return Ok(());
            }
            let run = c.run_get(id).await?.ok_or_else(|| run_missing(id))?;
            Err(StoreError::conflict(format!(
                "run {id} is {}, not running; progress is recorded only while it runs",
                run.state
            ))
            .into())
        })
        .await
    }

    async fn log_append(&self, run: RunId, lines: &[LogLine]) -> StoreResult<()> {
        let d = &self.dialect;
        let what = "appending log lines";
        // Not retried after an unknown commit: a line written twice is better than a line
        // lost, but neither should be silent, so the error reaches the forwarder.
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            if s.conn().log_append(run, lines).await? {
                Ok(())
            } else {
                Err(run_missing(run).into())
            }
        })
        .await
    }

    async fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
        let d = &self.dialect;
        let what = "purging old runs";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let counts = tx.retention_purge(older_than).await?;
            tx.commit().await?;
            Ok(counts)
        })
        .await
    }

    // ---- nodes -----------------------------------------------------------------------

    async fn node_register(&self, reg: &Registration) -> StoreResult<Registered> {
        let d = &self.dialect;
        let proven_dead = d.before_register(reg).map_err(|f| f.error)?;
        let what = "registering the node";
        // Registering one life again is idempotent (the rule lets an instance follow
        // itself), so a COMMIT whose answer was lost is simply tried again.
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await.map_err(Fail::idempotent)?;
            let current = tx.node_get(&reg.node.id).await?;
            let verdict = if proven_dead {
                Registered::Yes {
                    previous: current.clone(),
                }
            } else {
                registration(current.as_ref(), reg)
            };
            if let Registered::Yes { .. } = verdict
                && !tx.node_put(&reg.node, reg.now, current.is_some()).await?
            {
                return Err(Fail::transient(format!(
                    "node {} was registered by another process at the same moment; \
                     registering again",
                    reg.node.id
                )));
            }
            tx.commit().await.map_err(Fail::idempotent)?;
            Ok(verdict)
        })
        .await
    }

    async fn node_stopped(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        now: Timestamp,
    ) -> StoreResult<()> {
        let d = &self.dialect;
        let what = "recording a node stop";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            s.conn()
                .node_stop(node, instance, now)
                .await
                .map_err(Fail::idempotent)
        })
        .await
    }
}

/// Why a finish was refused, read back; on the way, the real end of an attempt recovered
/// while its node went on executing it goes on its row, so a retry that ran meanwhile shows
/// as a second execution of the fire.
async fn refused<D: Dialect>(d: &D, id: RunId, expected_attempt: u32, finish: &RunFinish) -> Fail {
    let what = "finishing a run";
    let read = async {
        let mut s = d.session(what).await?;
        let mut c = s.conn();
        let run = c.run_get(id).await?.ok_or_else(|| run_missing(id))?;
        if let Some(a) = c
            .attempts_of_run(id)
            .await?
            .into_iter()
            .find(|a| a.attempt == expected_attempt)
            && matches!(
                a.outcome,
                Some(AttemptOutcome::LeaseExpired | AttemptOutcome::NodeRestarted)
            )
            && a.finished_at.is_some_and(|f| f < finish.finished_at)
        {
            let text = outlived_text(&a, finish);
            c.attempt_outlived(id, expected_attempt, finish.finished_at, &text)
                .await?;
        }
        Ok::<_, Fail>(run)
    };
    match read.await {
        Ok(run) => unfinishable(&run, id, expected_attempt).into(),
        Err(f) => f,
    }
}

/// The error of an attempt whose node finished it after its recovery.
fn outlived_text(a: &Attempt, finish: &RunFinish) -> String {
    let outcome = AttemptOutcome::of_state(finish.state).map_or("ended", AttemptOutcome::name);
    let mut text = format!(
        "{}; its node went on executing it and finished it at {} ({outcome}",
        a.error.as_deref().unwrap_or("recovered"),
        finish.finished_at
    );
    if let Some(e) = &finish.error {
        text.push_str(": ");
        text.push_str(e);
    }
    text.push_str("), after the recovery");
    text
}

impl<D: Dialect> Engine<D> {
    // ---- alerts ----------------------------------------------------------------------

    /// The rule of [`Store::alert_open`]: reopen the key's closed row, else insert it; both
    /// are conditional on the row's state, so exactly one concurrent caller wins.
    async fn alert_open(&self, key: &AlertKey, episode: &str, now: Timestamp) -> StoreResult<bool> {
        let key = clipped(key);
        let episode = clip(episode, limits::DETAIL);
        let d = &self.dialect;
        let what = "opening an alert episode";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut tx = s.begin(what).await?;
            let opened = tx.alert_reopen(&key, &episode, now).await?
                || tx.alert_insert(&key, &episode, now).await?;
            tx.commit().await.map_err(Fail::idempotent)?;
            Ok(opened)
        })
        .await
    }

    async fn alert_close(&self, key: &AlertKey, now: Timestamp) -> StoreResult<bool> {
        let key = clipped(key);
        let d = &self.dialect;
        let what = "closing an alert episode";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            s.conn()
                .alert_close(&key, now)
                .await
                .map_err(Fail::idempotent)
        })
        .await
    }

    async fn alert_delivery_add(&self, delivery: &AlertDelivery) -> StoreResult<i64> {
        let mut row = delivery.clone();
        row.key = clipped(&delivery.key);
        row.node = clip(&delivery.node, limits::NAME);
        row.channel = clip(&delivery.channel, limits::NAME);
        row.kind = clip(&delivery.kind, limits::CONDITION);
        row.detail = clip(&delivery.detail, limits::DETAIL);
        let d = &self.dialect;
        let what = "recording an alert delivery";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            s.conn().alert_delivery_insert(&row).await
        })
        .await
    }
}

/// `key` with its fields cut to the columns' widths.
fn clipped(key: &AlertKey) -> AlertKey {
    AlertKey {
        subject: clip(&key.subject, limits::SUBJECT),
        condition: clip(&key.condition, limits::CONDITION),
    }
}

/// A read on an auto-commit connection of a fresh read session ([`Dialect::read_session`]),
/// retried while it fails transiently: `read!(engine, "what", |c| c.primitive(args))`.
macro_rules! read {
    ($engine:expr, $what:literal, |$c:ident| $call:expr) => {{
        let d = &$engine.dialect;
        retrying(d, $what, || async {
            let mut s = d.read_session($what).await?;
            let mut $c = s.conn();
            $call.await
        })
        .await
    }};
}

/// [`Store::job_due`]: the first `limit` due jobs in claim order and, when those are not
/// all that is due, the first `limit` due recurring jobs not among them — every fire a claim
/// of `limit` may take under the fairness rule (`claim.rs`), so the loop's misfire and
/// overlap decisions see each fire before it is claimed. The second read happens only when
/// the first was full.
async fn due_jobs<C: Conn>(
    c: &mut C,
    now: Timestamp,
    limit: usize,
    tags: &[String],
) -> Res<Vec<DueJob>> {
    let (mut due, recurring) = c.jobs_due_prepare(now, limit, tags).await?;
    for job in recurring {
        if !due.iter().any(|d| d.id == job.id) {
            due.push(job);
        }
    }
    Ok(due)
}

impl<T: DialectStore> Store for T {
    fn capabilities(&self) -> Capabilities {
        self.engine().dialect.capabilities()
    }

    async fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        self.engine().job_insert(job, now).await
    }

    async fn job_update(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        self.engine().job_update(job, now).await
    }

    async fn job_get(&self, id: JobId) -> StoreResult<Option<JobDef>> {
        read!(self.engine(), "reading a job", |c| c.job_get(id))
    }

    async fn jobs_get(&self, ids: &[JobId]) -> StoreResult<Vec<JobDef>> {
        read!(self.engine(), "reading jobs", |c| c.jobs_get(ids))
    }

    async fn job_count(&self) -> StoreResult<u64> {
        read!(self.engine(), "counting jobs", |c| c.job_count())
    }

    async fn jobs_late(&self, before: Timestamp, limit: usize) -> StoreResult<Vec<JobDef>> {
        read!(self.engine(), "finding late jobs", |c| c
            .jobs_late(before, limit))
    }

    async fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>> {
        read!(self.engine(), "reading a job", |c| c.job_get_by_name(name))
    }

    async fn job_list(&self) -> StoreResult<Vec<JobDef>> {
        read!(self.engine(), "listing jobs", |c| c.job_list())
    }

    async fn job_page(&self, query: &JobQuery) -> StoreResult<JobPage> {
        query.validate()?;
        // An empty text filter passes every job; dropping it spares each dialect the case
        // (SQL Server's CHARINDEX finds no empty text).
        let nonempty = |f: &Option<String>| f.clone().filter(|t| !t.is_empty());
        let query = JobQuery {
            handler_prefix: nonempty(&query.handler_prefix),
            name_contains: nonempty(&query.name_contains),
            ..query.clone()
        };
        let rows = read!(self.engine(), "listing a page of jobs", |c| c
            .job_page(&query))?;
        Ok(JobPage::of(&query, rows))
    }

    async fn job_delete(&self, id: JobId) -> StoreResult<()> {
        self.engine().job_delete(id).await
    }

    async fn job_set_enabled(
        &self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> StoreResult<JobDef> {
        self.engine().job_set_enabled(id, enabled, now).await
    }

    async fn job_set_next_fire(
        &self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> StoreResult<()> {
        self.engine().job_set_next_fire(id, expected, new).await
    }

    async fn job_due(
        &self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> StoreResult<Vec<DueJob>> {
        read!(self.engine(), "finding due jobs", |c| due_jobs(
            &mut c, now, limit, tags
        ))
    }

    async fn next_due(&self, tags: &[String], set: DueSet) -> StoreResult<Option<Timestamp>> {
        read!(self.engine(), "finding the next due time", |c| c
            .next_due(tags, set))
    }

    async fn run_claim_due(&self, params: &ClaimParams) -> StoreResult<Vec<ClaimedRun>> {
        claim::run_claim_due(self.engine(), params).await
    }

    async fn run_insert_skipped(&self, run: &Run) -> StoreResult<Run> {
        check_skipped(run)?;
        self.engine().insert_keyed(run).await
    }

    async fn run_enqueue(&self, job: JobId, fire: Timestamp, now: Timestamp) -> StoreResult<Run> {
        self.engine()
            .insert_keyed(&Run::pending(job, fire, now))
            .await
    }

    async fn run_backfill(
        &self,
        id: JobId,
        from: Timestamp,
        to: Timestamp,
        max: usize,
        now: Timestamp,
    ) -> StoreResult<Backfilled> {
        self.engine().run_backfill(id, from, to, max, now).await
    }

    async fn run_set_state_if_running(
        &self,
        id: RunId,
        expected_attempt: u32,
        finish: &RunFinish,
    ) -> StoreResult<Run> {
        self.engine()
            .run_set_state_if_running(id, expected_attempt, finish)
            .await
    }

    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        read!(self.engine(), "reading a run", |c| c.run_get(id))
    }

    async fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        read!(self.engine(), "listing runs", |c| c.run_list(filter))
    }

    async fn lease_renew(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<Vec<RunId>> {
        self.engine().lease_renew(node, instance, until, now).await
    }

    async fn run_recover_expired(
        &self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> StoreResult<Vec<Run>> {
        self.engine().run_recover_expired(now, restart).await
    }

    async fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()> {
        self.engine().run_progress(id, progress).await
    }

    async fn node_register(&self, reg: &Registration) -> StoreResult<Registered> {
        self.engine().node_register(reg).await
    }

    async fn node_stopped(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        now: Timestamp,
    ) -> StoreResult<()> {
        self.engine().node_stopped(node, instance, now).await
    }

    async fn node_list(&self) -> StoreResult<Vec<NodeStatus>> {
        read!(self.engine(), "listing nodes", |c| c.node_list())
    }

    async fn node_sessions(&self, from: Timestamp, to: Timestamp) -> StoreResult<Vec<NodeSession>> {
        read!(self.engine(), "listing node lives", |c| c
            .node_sessions(from, to))
    }

    async fn runs_between(
        &self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> StoreResult<Vec<Run>> {
        read!(self.engine(), "listing runs by fire time", |c| c
            .runs_between(job, from, to))
    }

    async fn run_attempts(&self, run: RunId) -> StoreResult<Vec<Attempt>> {
        read!(self.engine(), "reading a run's attempts", |c| c
            .attempts_of_run(run))
    }

    async fn attempts_between(
        &self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> StoreResult<Vec<Attempt>> {
        read!(self.engine(), "listing attempts by fire time", |c| c
            .attempts_between(job, from, to))
    }

    async fn log_append(&self, run: RunId, lines: &[LogLine]) -> StoreResult<()> {
        self.engine().log_append(run, lines).await
    }

    async fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<(u64, LogLine)>> {
        read!(self.engine(), "reading a run log", |c| c
            .log_list(run, after, limit))
    }

    async fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
        self.engine().retention_purge(older_than).await
    }

    async fn pause(&self, target: &PauseTarget, pause: &Pause) -> StoreResult<Vec<JobId>> {
        self.engine().pause(target, pause).await
    }

    async fn resume(&self, target: &PauseTarget, now: Timestamp) -> StoreResult<Resumed> {
        self.engine().resume(target, now).await
    }

    async fn job_paused(&self, id: JobId) -> StoreResult<Option<(PauseTarget, Pause)>> {
        self.engine().job_paused(id).await
    }

    async fn node_paused(&self, node: &NodeId) -> StoreResult<Option<Pause>> {
        self.engine().node_paused(node).await
    }

    async fn pause_list(&self) -> StoreResult<Vec<(PauseTarget, Pause)>> {
        self.engine().pause_list().await
    }

    async fn group_list(&self, now: Timestamp) -> StoreResult<Vec<GroupStatus>> {
        self.engine().group_list(now).await
    }

    async fn group_status(&self, name: &str, now: Timestamp) -> StoreResult<GroupStatus> {
        self.engine().group_status(name, now).await
    }

    async fn group_set(&self, name: &str, max_running: Option<u32>) -> StoreResult<GroupDef> {
        self.engine().group_set(name, max_running).await
    }

    async fn run_cancel(&self, id: RunId, by: &str, now: Timestamp) -> StoreResult<CancelOutcome> {
        self.engine().run_cancel(id, by, now).await
    }

    async fn cancel_requests(&self, node: &NodeId) -> StoreResult<Vec<CancelRequest>> {
        self.engine().cancel_requests(node).await
    }

    async fn cancel_request_of(&self, id: RunId) -> StoreResult<Option<CancelRequest>> {
        self.engine().cancel_request_of(id).await
    }

    async fn token_insert(&self, token: &NewToken) -> StoreResult<ApiToken> {
        if token.name.trim().is_empty() || token.name.chars().any(char::is_control) {
            return Err(StoreError::invalid(format!(
                "token name {:?} is empty or has control characters; give a printable name",
                token.name
            )));
        }
        if token.sha256.len() != 64 || !token.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::invalid(
                "a token is stored as the 64 hex digits of its SHA-256, never as itself",
            ));
        }
        let d = &self.engine().dialect;
        let what = "storing a token";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            c.token_insert(token).await?.ok_or_else(|| {
                Fail::from(StoreError::conflict(format!(
                    "a token named \"{}\" exists; choose another --name, or revoke it first \
                     (a revoked token's name stays taken, since recorded actions name it)",
                    token.name
                )))
            })
        })
        .await
    }

    async fn token_list(&self) -> StoreResult<Vec<ApiToken>> {
        read!(self.engine(), "listing tokens", |c| c.token_list())
    }

    async fn token_revoke(&self, name: &str, now: Timestamp) -> StoreResult<ApiToken> {
        let d = &self.engine().dialect;
        let what = "revoking a token";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            c.token_revoke(name, now).await?.ok_or_else(|| {
                Fail::from(StoreError::not_found(format!(
                    "no token named \"{name}\"; `takt token list` shows them"
                )))
            })
        })
        .await
    }

    async fn action_insert(&self, action: &OperatorAction) -> StoreResult<()> {
        let d = &self.engine().dialect;
        let what = "recording an operator action";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            s.conn().action_insert(action).await
        })
        .await
    }

    async fn action_list(
        &self,
        job: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<OperatorAction>> {
        read!(self.engine(), "listing operator actions", |c| c
            .action_list(job, limit))
    }

    async fn alert_open(&self, key: &AlertKey, episode: &str, now: Timestamp) -> StoreResult<bool> {
        self.engine().alert_open(key, episode, now).await
    }

    async fn alert_close(&self, key: &AlertKey, now: Timestamp) -> StoreResult<bool> {
        self.engine().alert_close(key, now).await
    }

    async fn alert_delivery_add(&self, delivery: &AlertDelivery) -> StoreResult<i64> {
        self.engine().alert_delivery_add(delivery).await
    }

    async fn alert_delivery_list(&self, limit: usize) -> StoreResult<Vec<AlertDelivery>> {
        read!(self.engine(), "listing alert deliveries", |c| c
            .alert_delivery_list(limit))
    }

    async fn run_children(&self, parent: RunId) -> StoreResult<Vec<Run>> {
        read!(self.engine(), "listing a run's continuations", |c| c
            .runs_of_parent(parent))
    }

    async fn run_last_success_fire(
        &self,
        job: JobId,
        before: Timestamp,
    ) -> StoreResult<Option<Timestamp>> {
        read!(self.engine(), "finding a job's last success", |c| c
            .last_success_fire(job, before))
    }

    async fn run_set_params(&self, id: RunId, attempt: u32, params_json: &str) -> StoreResult<()> {
        let d = &self.engine().dialect;
        let what = "recording a run's resolved params";
        retrying(d, what, || async {
            let mut s = d.session(what).await?;
            let mut c = s.conn();
            // Idempotent: writing the same text twice leaves the same row.
            if c.run_set_params_if_running(id, attempt, params_json)
                .await
                .map_err(Fail::idempotent)?
            {
                return Ok(());
            }
            let run = c.run_get(id).await?.ok_or_else(|| run_missing(id))?;
            Err(unfinishable(&run, id, attempt).into())
        })
        .await
    }
}
