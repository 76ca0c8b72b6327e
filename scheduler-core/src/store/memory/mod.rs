//! The reference store: the [engine](super::engine) over a dialect that keeps everything in
//! memory.
//!
//! It is the first dialect of the engine, so the reference and the databases share the rules
//! instead of imitating each other; it is also the store of the host's unit tests, of embedded
//! hosts that need no persistence and of the in-memory benchmarks. A session checks the data
//! out of its slot for the length of one store call (other sessions wait), so every call is
//! atomic, like one SQL transaction; a transaction journals what it changes and undoes it when
//! dropped without a commit. Clones share the data, like two nodes on one database.
//!
//! # Indexes
//!
//! The scheduling loop calls `job_due`, `run_claim_due` and `next_due` on every pass, so their
//! cost must depend on what is due, not on how many jobs and runs exist (a million job
//! definitions must not slow a tick down). [`Inner`] therefore keeps, beside the rows, the same
//! indexes a database would: enabled jobs with a next fire by (priority, next fire, id) — recurring and one-off jobs in two disjoint sets, merged for the claim order —, job
//! names, pending retries by due time, queued runs per job, running runs, and each job's
//! running / pending counts. Every change to a job or a run goes through
//! [`Inner::put_job`] / [`Inner::put_run`] / [`Inner::remove_run`], which keep them in step;
//! the conformance suite and the consistency check in the tests hold them to the rows.
//!
//! # Job rows
//!
//! Jobs are kept as compact rows, not `JobDef`s ([`jobs`]: what many jobs share is interned,
//! the name and parameters are one text, no second copy of the name in its index), so that a
//! million job definitions stay within a couple of hundred bytes each; every read builds the
//! `JobDef` that was stored.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use self::jobs::Jobs;
use super::access::{ApiToken, NewToken, OperatorAction};
use super::backend::recovery_event;
use super::engine::{
    Checkout, Conn, Dialect, DialectStore, DueSet, Engine, FinishWrite, NextFireMove, PendingDue,
    Res, Session, Slot,
};
use super::{
    CancelRequest, Capabilities, DueJob, LogLine, PurgeCounts, RunFilter, StoreError, serves,
};
use crate::alert::{AlertDelivery, AlertKey};
use crate::attempt::{Attempt, AttemptEnd};
use crate::group::GroupDef;
use crate::job::{JobDef, JobId, JobName, Priority};

mod jobs;
use crate::node::{InstanceId, NodeInfo, NodeSession, NodeStatus};
use crate::pause::{Hold, Pause, PauseKind};
use crate::run::{NodeId, Progress, Run, RunId, RunState};

/// An in-memory [`super::Store`]; cheap to clone (clones share the data).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    engine: Engine<MemoryDialect>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }
}

impl DialectStore for MemoryStore {
    type Dialect = MemoryDialect;

    fn engine(&self) -> &Engine<MemoryDialect> {
        &self.engine
    }
}

impl Default for Engine<MemoryDialect> {
    fn default() -> Self {
        Engine::new(MemoryDialect::default())
    }
}

/// The memory store's dialect: the data in one [`Slot`] that a session checks out.
#[derive(Clone, Debug, Default)]
pub struct MemoryDialect {
    slot: Arc<Slot<Inner>>,
}

/// A job's place in the fires indexes: (priority, next fire, whether it recurs).
type FireEntry = (Priority, Timestamp, bool);

/// One priority level of a fires index: (next fire, id) in claim order.
type FireSet = BTreeSet<(FireAt, JobId)>;

/// A next fire as the fires indexes hold it: nanoseconds since the Unix epoch in an `i64`
/// (8 bytes where a `Timestamp` takes 16), saturated outside 1677-09-21 … 2262-04-11.
///
/// Why: an index entry is one per enabled job with a next fire, and a B-tree of entries
/// inserted in order keeps its nodes about half full, so each byte of a key costs about two
/// per job (the scale bench: 1 000 000 one-offs, 223 heap bytes a job with `Timestamp`
/// keys). Within the range the order and every comparison with an instant are exact; a fire
/// outside it compares as the range's end, so a fire after 2262 is due at no instant this
/// side of it and a fire before 1677 is due at every one, as it is exactly — only the claim
/// order among such fires falls back to their ids. Nothing reads a fire time back from a
/// key: the job's row holds it exactly (so the next due instant is exact too, except that
/// among several fires after 2262 it is the one of the lowest id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FireAt(i64);

impl FireAt {
    fn of(at: Timestamp) -> FireAt {
        let ns = at.as_nanosecond();
        FireAt(i64::try_from(ns).unwrap_or(if ns < 0 { i64::MIN } else { i64::MAX }))
    }
}

/// The data checked out for one store call; given back when dropped (also on a panic).
#[derive(Debug)]
pub struct MemorySession {
    data: Checkout<Inner>,
}

impl Dialect for MemoryDialect {
    type Session = MemorySession;

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn session(&self, _what: &'static str) -> Res<MemorySession> {
        Ok(MemorySession {
            data: self.slot.check_out(),
        })
    }

    async fn pause(&self, _what: &str, _error: &StoreError, _pause: Duration) {
        // Never asked: no memory-store error is transient.
    }
}

impl Session for MemorySession {
    type Conn<'a> = MemoryConn<'a>;

    fn conn(&mut self) -> MemoryConn<'_> {
        MemoryConn {
            inner: &mut self.data,
            tx: false,
        }
    }

    async fn begin(&mut self, _what: &'static str) -> Res<MemoryConn<'_>> {
        let inner = &mut *self.data;
        inner.journal = Some(Journal {
            counters: (inner.last_job, inner.last_run, inner.last_seq),
            undo: Vec::new(),
        });
        Ok(MemoryConn { inner, tx: true })
    }
}

/// The primitives on the checked-out data; in a transaction, what they change is journaled.
#[derive(Debug)]
pub struct MemoryConn<'a> {
    inner: &'a mut Inner,
    tx: bool,
}

impl Drop for MemoryConn<'_> {
    /// A transaction dropped without a commit is undone.
    fn drop(&mut self) {
        if self.tx
            && let Some(journal) = self.inner.journal.take()
        {
            self.inner.roll_back(journal);
        }
    }
}

/// What a transaction changed, to undo it.
#[derive(Debug)]
struct Journal {
    counters: (i64, i64, u64),
    undo: Vec<Undo>,
}

/// The state of one row before a transaction first changed it.
#[derive(Debug)]
enum Undo {
    Job(JobId, Option<Box<JobDef>>),
    /// A job's next fire before a [`Conn::job_set_next_fire_if`] moved it (the row is
    /// otherwise unchanged, so only the instant is kept).
    NextFire(JobId, Option<Timestamp>),
    Run(RunId, Option<Box<Run>>, Option<Vec<(u64, LogLine)>>),
    Logs(RunId, usize),
    Node(NodeId, Option<NodeStatus>),
    Hold(JobId, Option<Hold>),
    Cancel(RunId, Option<CancelRequest>),
    Pause((PauseKind, String), Option<Pause>),
    Group(String, Option<GroupDef>),
    Attempts(RunId, Option<Vec<Attempt>>),
    Session(InstanceId, Option<NodeSession>),
    Episode(AlertKey, Option<Episode>),
    Delivery(i64),
}

/// An alert episode row: its key, when it opened, when it closed.
#[derive(Clone, Debug)]
struct Episode {
    #[allow(dead_code)] // kept for the record, as the SQL stores keep it
    key: String,
    closed: bool,
}

#[derive(Debug, Default)]
struct Inner {
    /// The job rows with the names index (see [`jobs`]).
    jobs: Jobs,
    runs: BTreeMap<RunId, Run>,
    /// The unique (job, fire time) key.
    run_keys: BTreeMap<(JobId, Timestamp), RunId>,
    logs: BTreeMap<RunId, Vec<(u64, LogLine)>>,
    /// The claim token of each run's latest claim (for resolving a lost commit; a memory
    /// store never loses one, but it keeps the contract).
    tokens: HashMap<RunId, i64>,
    nodes: BTreeMap<NodeId, NodeStatus>,
    /// Held jobs (see [`crate::pause`]); removed with their job.
    holds: BTreeMap<JobId, Hold>,
    /// Group and node pauses.
    pauses: BTreeMap<(PauseKind, String), Pause>,
    /// Group definitions, by name.
    groups: BTreeMap<String, GroupDef>,
    /// Cancel requests, per run; removed with the run.
    cancels: BTreeMap<RunId, CancelRequest>,
    /// Each run's attempts, by attempt number.
    attempts: BTreeMap<RunId, Vec<Attempt>>,
    /// Every node life, by instance.
    sessions: BTreeMap<InstanceId, NodeSession>,
    /// Alert episodes by (subject, condition).
    episodes: HashMap<AlertKey, Episode>,
    deliveries: BTreeMap<i64, AlertDelivery>,
    last_delivery: i64,
    last_job: i64,
    last_run: i64,
    last_seq: u64,
    journal: Option<Journal>,
    /// API tokens by name, and operator actions in insertion order. Never journaled: the
    /// engine writes them outside transactions, one row per call.
    api_tokens: BTreeMap<String, ApiToken>,
    actions: Vec<OperatorAction>,
    // ---- indexes (see the module docs) ----
    /// Enabled jobs with a next fire whose schedule does not recur: priority → (next fire,
    /// id).
    fires: BTreeMap<Priority, FireSet>,
    /// The same for the jobs with a recurring schedule. Disjoint from `fires`, so a job has
    /// one entry whatever its kind: [`super::engine::DueSet::Recurring`] reads this one
    /// alone, [`super::engine::DueSet::All`] merges both per priority level.
    recurring: BTreeMap<Priority, FireSet>,
    /// Pending runs with a retry time: (next attempt, id).
    retries: BTreeSet<(Timestamp, RunId)>,
    /// Pending runs without a retry time (queued behind a running run), per job.
    queued: BTreeMap<JobId, BTreeSet<RunId>>,
    /// Runs in state running.
    running: BTreeSet<RunId>,
    /// Per job: (running, pending) run counts; absent when both are 0.
    active: HashMap<JobId, (u32, u32)>,
}

/// The entries of one priority level's fires set that are due at `now`, in claim order.
fn level_due(set: Option<&FireSet>, now: Timestamp) -> impl Iterator<Item = (FireAt, JobId)> + '_ {
    let now = FireAt::of(now);
    set.into_iter()
        .flatten()
        .take_while(move |(fire, _)| *fire <= now)
        .copied()
}

impl Inner {
    // ---- the journal -----------------------------------------------------------------

    fn journal(&mut self, undo: Undo) {
        if let Some(j) = &mut self.journal {
            j.undo.push(undo);
        }
    }

    fn roll_back(&mut self, journal: Journal) {
        for undo in journal.undo.into_iter().rev() {
            match undo {
                Undo::Job(id, old) => {
                    self.drop_job_row(id);
                    if let Some(job) = old {
                        self.index_job(&job, true);
                        self.jobs.insert(&job);
                    }
                }
                Undo::NextFire(id, old) => {
                    self.move_next_fire(id, old);
                }
                Undo::Run(id, old, logs) => {
                    self.drop_run_row(id);
                    if let Some(run) = old.map(|r| *r) {
                        self.run_keys.insert((run.job_id, run.fire_time), id);
                        self.index_run(id, &run, true);
                        self.runs.insert(id, run);
                    }
                    if let Some(logs) = logs {
                        self.logs.insert(id, logs);
                    }
                }
                Undo::Logs(run, len) => {
                    if let Some(log) = self.logs.get_mut(&run) {
                        log.truncate(len);
                    }
                }
                Undo::Node(id, old) => match old {
                    Some(n) => {
                        self.nodes.insert(id, n);
                    }
                    None => {
                        self.nodes.remove(&id);
                    }
                },
                Undo::Hold(id, old) => match old {
                    Some(h) => {
                        self.holds.insert(id, h);
                    }
                    None => {
                        self.holds.remove(&id);
                    }
                },
                Undo::Cancel(id, old) => match old {
                    Some(c) => {
                        self.cancels.insert(id, c);
                    }
                    None => {
                        self.cancels.remove(&id);
                    }
                },
                Undo::Pause(key, old) => match old {
                    Some(p) => {
                        self.pauses.insert(key, p);
                    }
                    None => {
                        self.pauses.remove(&key);
                    }
                },
                Undo::Group(name, old) => match old {
                    Some(d) => {
                        self.groups.insert(name, d);
                    }
                    None => {
                        self.groups.remove(&name);
                    }
                },
                Undo::Attempts(id, old) => match old {
                    Some(a) => {
                        self.attempts.insert(id, a);
                    }
                    None => {
                        self.attempts.remove(&id);
                    }
                },
                Undo::Session(id, old) => match old {
                    Some(n) => {
                        self.sessions.insert(id, n);
                    }
                    None => {
                        self.sessions.remove(&id);
                    }
                },
                Undo::Episode(key, old) => match old {
                    Some(e) => {
                        self.episodes.insert(key, e);
                    }
                    None => {
                        self.episodes.remove(&key);
                    }
                },
                Undo::Delivery(id) => {
                    self.deliveries.remove(&id);
                }
            }
        }
        (self.last_job, self.last_run, self.last_seq) = journal.counters;
    }

    // ---- index maintenance -----------------------------------------------------------

    fn index_job(&mut self, job: &JobDef, add: bool) {
        if let (Some(id), Some(fire), true) = (job.id, job.next_fire, job.enabled) {
            self.index_fire(id, (job.priority, fire, job.is_recurring()), add);
        }
    }

    fn index_fire(&mut self, id: JobId, entry: FireEntry, add: bool) {
        let (priority, fire, recurring) = entry;
        let index = |by: &mut BTreeMap<Priority, FireSet>| {
            if add {
                by.entry(priority)
                    .or_default()
                    .insert((FireAt::of(fire), id));
            } else if let Some(set) = by.get_mut(&priority) {
                set.remove(&(FireAt::of(fire), id));
                if set.is_empty() {
                    by.remove(&priority);
                }
            }
        };
        index(if recurring {
            &mut self.recurring
        } else {
            &mut self.fires
        });
    }

    /// Job `id`'s entry in the fires index: (priority, next fire) when it is enabled and has
    /// a next fire.
    fn fire_entry(&self, id: JobId) -> Option<FireEntry> {
        let job = self.jobs.view(id)?;
        Some((job.priority(), job.next_fire()?, job.recurring())).filter(|_| job.enabled())
    }

    /// Removes job `id`'s row and its index entries (nothing journaled).
    fn drop_job_row(&mut self, id: JobId) {
        if let Some(entry) = self.fire_entry(id) {
            self.index_fire(id, entry, false);
        }
        self.jobs.remove(id);
    }

    /// The old row of job `id` for the journal; only built in a transaction.
    fn journaled_job(&self, id: JobId) -> Option<Box<JobDef>> {
        self.journal.as_ref()?;
        self.jobs.get(id).map(Box::new)
    }

    /// Stores `job` (its id set) in place of the old row, keeping the indexes in step.
    fn put_job(&mut self, job: JobDef) {
        let Some(id) = job.id else { return };
        let old = self.journaled_job(id);
        self.journal(Undo::Job(id, old));
        self.drop_job_row(id);
        self.index_job(&job, true);
        self.jobs.insert(&job);
    }

    /// Moves job `id`'s next fire to `new` in its row and in the fires index (nothing
    /// journaled; the row is otherwise left as it is, so a pass that advances a thousand
    /// fires rebuilds no job).
    fn move_next_fire(&mut self, id: JobId, new: Option<Timestamp>) {
        if let Some(entry) = self.fire_entry(id) {
            self.index_fire(id, entry, false);
        }
        self.jobs.set_next_fire(id, new);
        if let Some(entry) = self.fire_entry(id) {
            self.index_fire(id, entry, true);
        }
    }

    fn index_run(&mut self, id: RunId, run: &Run, add: bool) {
        let counts = self.active.entry(run.job_id).or_default();
        let delta = |n: &mut u32| {
            if add {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
            }
        };
        match run.state {
            RunState::Running => delta(&mut counts.0),
            // A run waiting for its dependencies is not in flight for the overlap policy
            // (`Conn::jobs_due`): it starts only once its job is idle.
            RunState::Pending if !run.is_waiting() => delta(&mut counts.1),
            _ => {}
        }
        if *counts == (0, 0) {
            self.active.remove(&run.job_id);
        }
        match (run.state, run.next_attempt_at) {
            (RunState::Running, _) => {
                if add {
                    self.running.insert(id);
                } else {
                    self.running.remove(&id);
                }
            }
            (RunState::Pending, Some(at)) => {
                if add {
                    self.retries.insert((at, id));
                } else {
                    self.retries.remove(&(at, id));
                }
            }
            (RunState::Pending, None) => {
                if add {
                    self.queued.entry(run.job_id).or_default().insert(id);
                } else if let Some(set) = self.queued.get_mut(&run.job_id) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.queued.remove(&run.job_id);
                    }
                }
            }
            _ => {}
        }
    }

    /// Removes run `id`'s row, key and index entries (nothing journaled), and gives the row
    /// back: a caller that journals it moves it there instead of copying it first.
    fn drop_run_row(&mut self, id: RunId) -> Option<Run> {
        let old = self.runs.remove(&id)?;
        self.index_run(id, &old, false);
        self.run_keys.remove(&(old.job_id, old.fire_time));
        Some(old)
    }

    /// Stores `run` (its id set) in place of the old row, keeping the key and the indexes in
    /// step.
    fn put_run(&mut self, run: Run) {
        let Some(id) = run.id else { return };
        let old = self.drop_run_row(id).map(Box::new);
        self.journal(Undo::Run(id, old, None));
        self.run_keys.insert((run.job_id, run.fire_time), id);
        self.index_run(id, &run, true);
        self.runs.insert(id, run);
    }

    /// Inserts `run` with a new id unless its (job, fire time) key is taken.
    fn insert_run(&mut self, mut run: Run) -> Option<Run> {
        if self.run_keys.contains_key(&(run.job_id, run.fire_time)) {
            return None;
        }
        self.last_run += 1;
        run.id = Some(RunId(self.last_run));
        self.put_run(run.clone());
        Some(run)
    }

    /// Removes run `id` with its log and attempts; how many log lines went with it.
    fn remove_run(&mut self, id: RunId) -> u64 {
        if let Some(attempts) = self.attempts.remove(&id) {
            self.journal(Undo::Attempts(id, Some(attempts)));
        }
        let old = self.drop_run_row(id).map(Box::new);
        let logs = self.logs.remove(&id);
        let lines = logs.as_ref().map_or(0, |l| l.len() as u64);
        self.journal(Undo::Run(id, old, logs));
        self.tokens.remove(&id);
        if let Some(c) = self.cancels.remove(&id) {
            self.journal(Undo::Cancel(id, Some(c)));
        }
        lines
    }

    // ---- reads through the indexes ---------------------------------------------------

    fn counts(&self, job: JobId) -> (u32, u32) {
        self.active.get(&job).copied().unwrap_or_default()
    }

    /// Whether a node serving `tags` may run job `id`.
    fn serves(&self, id: JobId, tags: &[String]) -> bool {
        self.jobs
            .view(id)
            .is_some_and(|j| serves(tags, j.node_tag()))
    }

    /// The first `limit` due fires of enabled jobs in claim order, passing over the jobs in
    /// `skip`: per priority bucket, the prefix of fires at or before `now`.
    fn due_fires(
        &self,
        now: Timestamp,
        limit: usize,
        skip: &[JobId],
        tags: &[String],
        due: DueSet,
    ) -> Vec<JobId> {
        let mut out = Vec::new();
        // The priority levels of both sets in order, each once, without collecting them
        // (this runs on every claim and pass).
        let mut once_levels = match due {
            DueSet::All => Some(self.fires.keys().copied().peekable()),
            DueSet::Recurring => None,
        };
        let mut recurring_levels = self.recurring.keys().copied().peekable();
        let mut next_level = || {
            let a = once_levels.as_mut().and_then(|l| l.peek().copied());
            let b = recurring_levels.peek().copied();
            let p = match (a, b) {
                (Some(a), Some(b)) => a.min(b),
                (Some(p), None) | (None, Some(p)) => p,
                (None, None) => return None,
            };
            if a == Some(p) {
                once_levels.as_mut().and_then(Iterator::next);
            }
            if b == Some(p) {
                recurring_levels.next();
            }
            Some(p)
        };
        while let Some(p) = next_level() {
            // Each level's two sets merged in (next fire, id) order: the claim order.
            let once_set = match due {
                DueSet::All => self.fires.get(&p),
                DueSet::Recurring => None,
            };
            let mut once = level_due(once_set, now).peekable();
            let mut recurring = level_due(self.recurring.get(&p), now).peekable();
            loop {
                let next = match (once.peek(), recurring.peek()) {
                    (Some(a), Some(b)) if a <= b => once.next(),
                    (Some(_), Some(_)) | (None, Some(_)) => recurring.next(),
                    (Some(_), None) => once.next(),
                    (None, None) => break,
                };
                let Some((_, id)) = next else { break };
                if skip.contains(&id) || !self.serves(id, tags) {
                    continue;
                }
                if out.len() >= limit {
                    return out;
                }
                out.push(id);
            }
        }
        out
    }

    /// Changes run `id`'s attempts through `f`, journaled.
    fn change_attempts<T>(&mut self, id: RunId, f: impl FnOnce(&mut Vec<Attempt>) -> T) -> T {
        let old = self.attempts.get(&id).cloned();
        self.journal(Undo::Attempts(id, old));
        let list = self.attempts.entry(id).or_default();
        let out = f(list);
        if list.is_empty() {
            self.attempts.remove(&id);
        }
        out
    }

    /// Changes the session of life `id` through `f` (nothing when there is none), journaled.
    fn change_session(&mut self, id: &InstanceId, f: impl FnOnce(&mut NodeSession)) {
        if let Some(mut s) = self.sessions.get(id).cloned() {
            self.journal(Undo::Session(id.clone(), Some(s.clone())));
            f(&mut s);
            self.sessions.insert(id.clone(), s);
        }
    }

    /// Ends the open attempt `attempt` of run `id`; whether there was one.
    fn end_attempt(&mut self, id: RunId, attempt: u32, end: &AttemptEnd) -> bool {
        let open = self.attempts.get(&id).is_some_and(|l| {
            l.iter()
                .any(|a| a.attempt == attempt && a.finished_at.is_none())
        });
        if !open {
            return false;
        }
        self.change_attempts(id, |list| {
            for a in list.iter_mut().filter(|a| a.attempt == attempt) {
                a.end(end);
            }
        });
        true
    }

    fn node_status(&self, n: &NodeStatus) -> NodeStatus {
        NodeStatus {
            running: self
                .running
                .iter()
                .filter(|id| self.runs[id].node_id.as_ref() == Some(&n.info.id))
                .count() as u64,
            ..n.clone()
        }
    }
}

impl Conn for MemoryConn<'_> {
    async fn commit(mut self) -> Res<()> {
        self.inner.journal = None;
        self.tx = false;
        Ok(())
    }

    // ---- jobs ------------------------------------------------------------------------

    async fn job_get(&mut self, id: JobId) -> Res<Option<JobDef>> {
        Ok(self.inner.jobs.get(id))
    }

    async fn job_count(&mut self) -> Res<u64> {
        Ok(self.inner.jobs.views().count() as u64)
    }

    async fn jobs_late(&mut self, before: Timestamp, limit: usize) -> Res<Vec<JobDef>> {
        // The fires indexes hold every enabled job with a next fire, per priority level, in
        // fire order: each level's due entries, merged.
        let inner = &*self.inner;
        let mut late: Vec<(FireAt, JobId)> = inner
            .fires
            .values()
            .chain(inner.recurring.values())
            .flat_map(|level| level_due(Some(level), before).take(limit))
            .collect();
        late.sort_unstable();
        late.truncate(limit);
        Ok(late
            .into_iter()
            .filter_map(|(_, id)| inner.jobs.get(id))
            .collect())
    }

    async fn job_continuations(&mut self, id: JobId, state: RunState) -> Res<Option<Vec<JobName>>> {
        let view = self.inner.jobs.view(id);
        Ok(view.map(|j| j.continuations_for(state).to_vec()))
    }

    async fn job_get_by_name(&mut self, name: &JobName) -> Res<Option<JobDef>> {
        let inner = &*self.inner;
        Ok(inner
            .jobs
            .id_of(name.as_str())
            .and_then(|id| inner.jobs.get(id)))
    }

    async fn job_list(&mut self) -> Res<Vec<JobDef>> {
        Ok(self.inner.jobs.iter().collect())
    }

    async fn job_page(&mut self, query: &super::JobQuery) -> Res<Vec<JobDef>> {
        use std::collections::BinaryHeap;
        // The job table keeps no name order (its name index is hashed, `jobs.rs`), so a page
        // is one scan of the rows keeping the `limit + 1` smallest matching names after the
        // cursor: a `JobDef` is built only for a row that would enter that set, not for
        // every row (about `limit × ln(jobs / limit)` of them when names are in no order).
        let jobs = &self.inner.jobs;
        let want = query.limit + 1;
        let after = query.after.as_ref().map(JobName::as_str);
        let mut best: BinaryHeap<(&str, JobId)> = BinaryHeap::with_capacity(want + 1);
        let mut defs: HashMap<JobId, JobDef> = HashMap::with_capacity(want + 1);
        for (id, row) in jobs.views() {
            let name = row.name_str();
            if after.is_some_and(|a| name <= a)
                || (best.len() == want && best.peek().is_some_and(|(top, _)| name >= *top))
            {
                continue;
            }
            let Some(job) = jobs.get(id) else { continue };
            if !query.matches(&job) {
                continue;
            }
            best.push((name, id));
            defs.insert(id, job);
            if best.len() > want
                && let Some((_, out)) = best.pop()
            {
                defs.remove(&out);
            }
        }
        let mut page = best.into_vec();
        page.sort_unstable();
        Ok(page
            .into_iter()
            .filter_map(|(_, id)| defs.remove(&id))
            .collect())
    }

    async fn job_insert(&mut self, job: &JobDef, now: Timestamp) -> Res<Option<JobDef>> {
        let inner = &mut *self.inner;
        if inner.jobs.id_of(job.name.as_str()).is_some() {
            return Ok(None);
        }
        inner.last_job += 1;
        let mut stored = job.clone();
        stored.id = Some(JobId(inner.last_job));
        stored.version = 1;
        stored.updated_at = Some(now);
        inner.put_job(stored.clone());
        Ok(Some(stored))
    }

    async fn job_update_if_version(&mut self, job: &JobDef, now: Timestamp) -> Res<Option<JobDef>> {
        let inner = &mut *self.inner;
        let Some(id) = job.id else { return Ok(None) };
        if inner
            .jobs
            .view(id)
            .is_none_or(|j| j.version() != job.version)
        {
            return Ok(None);
        }
        let mut stored = job.clone();
        stored.version += 1;
        stored.updated_at = Some(now);
        inner.put_job(stored.clone());
        Ok(Some(stored))
    }

    async fn job_delete(&mut self, id: JobId) -> Res<bool> {
        let inner = &mut *self.inner;
        if !inner.jobs.contains(id) {
            return Ok(false);
        }
        let runs: Vec<RunId> = inner
            .run_keys
            .range((id, Timestamp::MIN)..=(id, Timestamp::MAX))
            .map(|(_, r)| *r)
            .collect();
        for r in runs {
            inner.remove_run(r);
        }
        let old = inner.journaled_job(id);
        inner.journal(Undo::Job(id, old));
        inner.drop_job_row(id);
        if let Some(h) = inner.holds.remove(&id) {
            inner.journal(Undo::Hold(id, Some(h)));
        }
        Ok(true)
    }

    async fn job_set_enabled(
        &mut self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> Res<Option<JobDef>> {
        let inner = &mut *self.inner;
        let Some(mut job) = inner.jobs.get(id) else {
            return Ok(None);
        };
        job.enabled = enabled;
        job.version += 1;
        job.updated_at = Some(now);
        inner.put_job(job.clone());
        Ok(Some(job))
    }

    async fn job_set_next_fire_if(
        &mut self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> Res<bool> {
        let inner = &mut *self.inner;
        match inner.jobs.view(id) {
            Some(job) if job.next_fire() == expected => {
                inner.journal(Undo::NextFire(id, expected));
                inner.move_next_fire(id, new);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn jobs_due(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
        set: DueSet,
    ) -> Res<Vec<DueJob>> {
        let inner = &*self.inner;
        Ok(inner
            .due_fires(now, limit, &[], tags, set)
            .into_iter()
            .filter_map(|id| {
                let (running, pending) = inner.counts(id);
                let job = inner.jobs.view(id)?;
                Some(DueJob {
                    id,
                    name: job.name(),
                    next_fire: job.next_fire()?,
                    misfire: job.misfire(),
                    overlap: job.overlap(),
                    running,
                    pending,
                })
            })
            .collect())
    }

    async fn next_due(&mut self, tags: &[String], set: DueSet) -> Res<Option<Timestamp>> {
        let inner = &*self.inner;
        // The first served job of each priority (jobs this node does not serve are passed
        // over: a node with no tags walks past the tagged ones).
        let first = |sets: &BTreeMap<Priority, FireSet>| {
            sets.values()
                .filter_map(|set| {
                    // The row's next fire, exact (the key is saturated outside its range).
                    set.iter()
                        .find(|(_, id)| inner.serves(*id, tags))
                        .and_then(|(_, id)| inner.jobs.view(*id)?.next_fire())
                })
                .min()
        };
        let recurring = first(&inner.recurring);
        if set == DueSet::Recurring {
            return Ok(recurring);
        }
        let fires = first(&inner.fires).into_iter().chain(recurring);
        // A held (paused) job's pending runs wait for its resume, like its fires.
        let enabled = |job: JobId| {
            inner
                .jobs
                .view(job)
                .is_some_and(|j| j.enabled() && serves(tags, j.node_tag()))
                && !inner.holds.contains_key(&job)
        };
        let retries = inner
            .retries
            .iter()
            .find(|(_, id)| inner.runs.get(id).is_some_and(|r| enabled(r.job_id)))
            .map(|(at, _)| *at);
        let queued = inner
            .queued
            .iter()
            .filter(|(job, _)| enabled(**job) && inner.counts(**job).0 == 0)
            .flat_map(|(_, runs)| runs.iter().filter_map(|id| inner.runs.get(id)))
            .map(|r| r.created_at);
        Ok(fires.chain(retries).chain(queued).min())
    }

    // ---- claiming --------------------------------------------------------------------

    async fn claim_fires(
        &mut self,
        now: Timestamp,
        limit: usize,
        exclude: &[JobId],
        tags: &[String],
        set: DueSet,
    ) -> Res<Vec<JobDef>> {
        let inner = &*self.inner;
        Ok(inner
            .due_fires(now, limit, exclude, tags, set)
            .into_iter()
            .filter_map(|id| inner.jobs.get(id))
            .collect())
    }

    async fn claim_pending(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> Res<Vec<PendingDue>> {
        let inner = &*self.inner;
        // A held (paused) job's pending runs wait for its resume, like its fires.
        let enabled = |job: JobId| {
            inner
                .jobs
                .view(job)
                .filter(|j| j.enabled() && serves(tags, j.node_tag()))
                .filter(|_| !inner.holds.contains_key(&job))
        };
        let mut out = Vec::new();
        for &(at, id) in inner.retries.iter().take_while(|(at, _)| *at <= now) {
            if let Some(job) = inner.runs.get(&id).and_then(|r| enabled(r.job_id)) {
                out.push(PendingDue {
                    id,
                    priority: job.priority().get(),
                    due_at: at,
                });
            }
        }
        for (job_id, runs) in &inner.queued {
            let Some(job) = enabled(*job_id) else {
                continue;
            };
            if inner.counts(*job_id).0 > 0 {
                continue;
            }
            for id in runs {
                if let Some(run) = inner.runs.get(id).filter(|r| r.created_at <= now) {
                    out.push(PendingDue {
                        id: *id,
                        priority: job.priority().get(),
                        due_at: run.created_at,
                    });
                }
            }
        }
        out.sort_by_key(|p| (p.priority, p.due_at, p.id));
        out.truncate(limit);
        Ok(out)
    }

    async fn advance_next_fires(&mut self, moves: &[NextFireMove]) -> Res<usize> {
        let mut n = 0;
        for m in moves {
            if self.job_set_next_fire_if(m.job, Some(m.old), m.new).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    async fn insert_runs(&mut self, runs: &[Run], token: i64) -> Res<Vec<Run>> {
        let inner = &mut *self.inner;
        let mut out = Vec::new();
        for run in runs {
            // The unique (parent run, job) key of the SQL schemas: a violation is an error
            // there (only the (job, fire time) key is passed over), so it is one here.
            if let Some(parent) = run.parent_run_id
                && inner
                    .runs
                    .values()
                    .any(|r| r.parent_run_id == Some(parent) && r.job_id == run.job_id)
            {
                return Err(StoreError::conflict(format!(
                    "run {parent} already has a continuation run of job {}",
                    run.job_id
                ))
                .into());
            }
            if let Some(stored) = inner.insert_run(run.clone()) {
                if stored.state == RunState::Running
                    && let Some(id) = stored.id
                {
                    inner.tokens.insert(id, token);
                }
                out.push(stored);
            }
        }
        Ok(out)
    }

    async fn queued_may_start(&mut self, job: JobId) -> Res<bool> {
        Ok(self.inner.counts(job).0 == 0)
    }

    async fn run_update_if(
        &mut self,
        run: &Run,
        expected: (RunState, u32),
        token: i64,
    ) -> Res<Option<Run>> {
        let inner = &mut *self.inner;
        let Some(id) = run.id else { return Ok(None) };
        match inner.runs.get(&id) {
            Some(stored) if (stored.state, stored.attempt) == expected => {
                inner.put_run(run.clone());
                inner.tokens.insert(id, token);
                Ok(Some(run.clone()))
            }
            _ => Ok(None),
        }
    }

    async fn runs_claimed_by(&mut self, node: &NodeId, token: i64) -> Res<Vec<Run>> {
        let inner = &*self.inner;
        Ok(inner
            .running
            .iter()
            .filter(|id| inner.tokens.get(id) == Some(&token))
            .filter_map(|id| inner.runs.get(id))
            .filter(|r| r.node_id.as_ref() == Some(node))
            .cloned()
            .collect())
    }

    // ---- runs ------------------------------------------------------------------------

    async fn run_get(&mut self, id: RunId) -> Res<Option<Run>> {
        Ok(self.inner.runs.get(&id).cloned())
    }

    async fn run_id_at(&mut self, job: JobId, fire: Timestamp) -> Res<Option<RunId>> {
        Ok(self.inner.run_keys.get(&(job, fire)).copied())
    }

    async fn run_list(&mut self, filter: &RunFilter) -> Res<Vec<Run>> {
        let inner = &*self.inner;
        let mut runs: Vec<Run> = match filter.job {
            Some(job) => inner
                .run_keys
                .range((job, Timestamp::MIN)..=(job, Timestamp::MAX))
                .filter_map(|(_, id)| inner.runs.get(id))
                .filter(|r| filter.matches(r))
                .cloned()
                .collect(),
            None => inner
                .runs
                .values()
                .filter(|r| filter.matches(r))
                .cloned()
                .collect(),
        };
        runs.sort_by_key(|r| std::cmp::Reverse((r.fire_time, r.id)));
        runs.truncate(filter.limit);
        Ok(runs)
    }

    async fn runs_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> Res<Vec<Run>> {
        let inner = &*self.inner;
        if from >= to {
            return Ok(Vec::new());
        }
        let mut runs: Vec<Run> = match job {
            Some(job) => inner
                .run_keys
                .range((job, from)..(job, to))
                .filter_map(|(_, id)| inner.runs.get(id))
                .cloned()
                .collect(),
            None => inner
                .runs
                .values()
                .filter(|r| r.fire_time >= from && r.fire_time < to)
                .cloned()
                .collect(),
        };
        runs.sort_by_key(|r| (r.fire_time, r.id));
        Ok(runs)
    }

    async fn attempts_begin(&mut self, attempts: &[Attempt]) -> Res<()> {
        let inner = &mut *self.inner;
        for a in attempts {
            let taken = inner
                .attempts
                .get(&a.run_id)
                .is_some_and(|l| l.iter().any(|b| b.attempt == a.attempt));
            if !taken {
                inner.change_attempts(a.run_id, |l| {
                    l.push(a.clone());
                    l.sort_by_key(|b| b.attempt);
                });
            }
        }
        Ok(())
    }

    async fn attempt_end(&mut self, run: RunId, attempt: u32, end: &AttemptEnd) -> Res<bool> {
        Ok(self.inner.end_attempt(run, attempt, end))
    }

    async fn attempt_outlived(
        &mut self,
        run: RunId,
        attempt: u32,
        at: Timestamp,
        error: &str,
    ) -> Res<bool> {
        use crate::attempt::AttemptOutcome::{LeaseExpired, NodeRestarted};
        let inner = &mut *self.inner;
        let hit = inner.attempts.get(&run).is_some_and(|l| {
            l.iter().any(|a| {
                a.attempt == attempt
                    && matches!(a.outcome, Some(LeaseExpired | NodeRestarted))
                    && a.finished_at.is_some_and(|f| f < at)
            })
        });
        if hit {
            inner.change_attempts(run, |l| {
                for a in l.iter_mut().filter(|a| a.attempt == attempt) {
                    a.finished_at = Some(at);
                    a.error = Some(error.to_string());
                }
            });
        }
        Ok(hit)
    }

    async fn attempts_of_run(&mut self, run: RunId) -> Res<Vec<Attempt>> {
        Ok(self.inner.attempts.get(&run).cloned().unwrap_or_default())
    }

    async fn attempts_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> Res<Vec<Attempt>> {
        let runs = self.runs_between(job, from, to).await?;
        let inner = &*self.inner;
        Ok(runs
            .iter()
            .filter_map(|r| r.id)
            .filter_map(|id| inner.attempts.get(&id))
            .flatten()
            .cloned()
            .collect())
    }

    async fn run_finish_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        write: &FinishWrite,
    ) -> Res<Option<Run>> {
        let inner = &mut *self.inner;
        match inner.runs.get(&id) {
            Some(run) if run.state == RunState::Running && run.attempt == attempt => {
                let mut run = run.clone();
                write.apply(&mut run);
                inner.put_run(run.clone());
                inner.end_attempt(id, attempt, &write.attempt_end);
                Ok(Some(run))
            }
            _ => Ok(None),
        }
    }

    async fn run_set_progress_if_running(&mut self, id: RunId, progress: &Progress) -> Res<bool> {
        let inner = &mut *self.inner;
        match inner.runs.get(&id).cloned() {
            Some(mut run) if run.state == RunState::Running => {
                run.progress = Some(progress.clone());
                inner.put_run(run);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn runs_to_recover(
        &mut self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> Res<Vec<RunId>> {
        let inner = &*self.inner;
        Ok(inner
            .running
            .iter()
            .filter(|id| recovery_event(&inner.runs[id], now, restart).is_some())
            .copied()
            .collect())
    }

    // ---- nodes and leases --------------------------------------------------------------

    async fn renew(
        &mut self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> Res<Option<Vec<RunId>>> {
        let inner = &mut *self.inner;
        let Some(mut status) = inner
            .nodes
            .get(node)
            .filter(|n| n.info.instance == *instance)
            .cloned()
        else {
            return Ok(None);
        };
        let old = inner.nodes.get(node).cloned();
        inner.journal(Undo::Node(node.clone(), old));
        status.heartbeat_at = Some(now);
        inner.nodes.insert(node.clone(), status);
        inner.change_session(instance, |s| s.heartbeat_at = now);
        let mine: Vec<Run> = inner
            .running
            .iter()
            .filter_map(|id| inner.runs.get(id))
            .filter(|r| {
                r.node_id.as_ref() == Some(node)
                    && r.node_instance.as_ref() == Some(instance)
                    && r.lease_expires_at.is_some_and(|l| l > now)
            })
            .cloned()
            .collect();
        let mut renewed = Vec::with_capacity(mine.len());
        for mut run in mine {
            run.lease_expires_at = Some(until);
            renewed.extend(run.id);
            inner.put_run(run);
        }
        Ok(Some(renewed))
    }

    async fn node_get(&mut self, id: &NodeId) -> Res<Option<NodeStatus>> {
        let inner = &*self.inner;
        Ok(inner.nodes.get(id).map(|n| inner.node_status(n)))
    }

    async fn node_put(&mut self, node: &NodeInfo, now: Timestamp, _exists: bool) -> Res<bool> {
        let inner = &mut *self.inner;
        let old = inner.nodes.get(&node.id).cloned();
        inner.journal(Undo::Node(node.id.clone(), old));
        inner.nodes.insert(
            node.id.clone(),
            NodeStatus {
                info: node.clone(),
                started_at: Some(now),
                heartbeat_at: Some(now),
                stopped_at: None,
                running: 0,
            },
        );
        let old = inner.sessions.get(&node.instance).cloned();
        inner.journal(Undo::Session(node.instance.clone(), old));
        inner.sessions.insert(
            node.instance.clone(),
            NodeSession {
                node_id: node.id.clone(),
                instance: node.instance.clone(),
                host_name: node.host_name.clone(),
                started_at: now,
                heartbeat_at: now,
                stopped_at: None,
            },
        );
        Ok(true)
    }

    async fn node_stop(&mut self, node: &NodeId, instance: &InstanceId, now: Timestamp) -> Res<()> {
        let inner = &mut *self.inner;
        if let Some(mut n) = inner
            .nodes
            .get(node)
            .filter(|n| n.info.instance == *instance)
            .cloned()
        {
            let old = inner.nodes.get(node).cloned();
            inner.journal(Undo::Node(node.clone(), old));
            n.stopped_at = Some(now);
            inner.nodes.insert(node.clone(), n);
        }
        inner.change_session(instance, |s| {
            if s.node_id == *node {
                s.stopped_at = Some(now);
            }
        });
        Ok(())
    }

    async fn node_list(&mut self) -> Res<Vec<NodeStatus>> {
        let inner = &*self.inner;
        Ok(inner.nodes.values().map(|n| inner.node_status(n)).collect())
    }

    async fn node_sessions(&mut self, from: Timestamp, to: Timestamp) -> Res<Vec<NodeSession>> {
        let mut out: Vec<NodeSession> = self
            .inner
            .sessions
            .values()
            .filter(|s| s.started_at < to && s.last_seen() >= from)
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.started_at, &a.instance.0).cmp(&(b.started_at, &b.instance.0)));
        Ok(out)
    }

    // ---- alerts ------------------------------------------------------------------------

    async fn alert_reopen(&mut self, key: &AlertKey, episode: &str, _now: Timestamp) -> Res<bool> {
        let inner = &mut *self.inner;
        match inner.episodes.get(key).cloned() {
            Some(old) if old.closed => {
                inner.journal(Undo::Episode(key.clone(), Some(old)));
                inner.episodes.insert(
                    key.clone(),
                    Episode {
                        key: episode.to_string(),
                        closed: false,
                    },
                );
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn alert_insert(&mut self, key: &AlertKey, episode: &str, _now: Timestamp) -> Res<bool> {
        let inner = &mut *self.inner;
        if inner.episodes.contains_key(key) {
            return Ok(false);
        }
        inner.journal(Undo::Episode(key.clone(), None));
        inner.episodes.insert(
            key.clone(),
            Episode {
                key: episode.to_string(),
                closed: false,
            },
        );
        Ok(true)
    }

    async fn alert_close(&mut self, key: &AlertKey, _now: Timestamp) -> Res<bool> {
        let inner = &mut *self.inner;
        match inner.episodes.get(key).cloned() {
            Some(old) if !old.closed => {
                inner.journal(Undo::Episode(key.clone(), Some(old.clone())));
                inner.episodes.insert(
                    key.clone(),
                    Episode {
                        closed: true,
                        ..old
                    },
                );
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn alert_delivery_insert(&mut self, delivery: &AlertDelivery) -> Res<i64> {
        let inner = &mut *self.inner;
        inner.last_delivery += 1;
        let id = inner.last_delivery;
        inner.journal(Undo::Delivery(id));
        let mut row = delivery.clone();
        row.id = Some(id);
        inner.deliveries.insert(id, row);
        Ok(id)
    }

    async fn runs_of_parent(&mut self, parent: RunId) -> Res<Vec<Run>> {
        Ok(self
            .inner
            .runs
            .values()
            .filter(|r| r.parent_run_id == Some(parent))
            .cloned()
            .collect())
    }

    async fn last_success_fire(&mut self, job: JobId, before: Timestamp) -> Res<Option<Timestamp>> {
        let inner = &*self.inner;
        Ok(inner
            .run_keys
            .range((job, Timestamp::MIN)..(job, before))
            .rev()
            .filter_map(|(_, id)| inner.runs.get(id))
            .find(|r| r.state == RunState::Succeeded)
            .map(|r| r.fire_time))
    }

    async fn run_set_params_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        params_json: &str,
    ) -> Res<bool> {
        let inner = &mut *self.inner;
        match inner.runs.get(&id).cloned() {
            Some(mut run) if run.state == RunState::Running && run.attempt == attempt => {
                run.params_resolved = Some(params_json.to_string());
                inner.put_run(run);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn alert_delivery_list(&mut self, limit: usize) -> Res<Vec<AlertDelivery>> {
        Ok(self
            .inner
            .deliveries
            .values()
            .rev()
            .take(limit)
            .cloned()
            .collect())
    }

    // ---- logs, retention ---------------------------------------------------------------

    async fn hold_get(&mut self, job: JobId) -> Res<Option<Hold>> {
        Ok(self.inner.holds.get(&job).cloned())
    }

    async fn hold_insert(&mut self, job: JobId, hold: &Hold) -> Res<()> {
        let inner = &mut *self.inner;
        if inner.jobs.contains(job) {
            let old = inner.holds.insert(job, hold.clone());
            inner.journal(Undo::Hold(job, old));
        }
        Ok(())
    }

    async fn hold_delete(&mut self, job: JobId) -> Res<bool> {
        let inner = &mut *self.inner;
        let old = inner.holds.remove(&job);
        let had = old.is_some();
        inner.journal(Undo::Hold(job, old));
        Ok(had)
    }

    async fn holds_list(&mut self) -> Res<Vec<(JobId, Hold)>> {
        Ok(self
            .inner
            .holds
            .iter()
            .map(|(id, h)| (*id, h.clone()))
            .collect())
    }

    async fn pause_get(&mut self, kind: PauseKind, name: &str) -> Res<Option<Pause>> {
        Ok(self.inner.pauses.get(&(kind, name.to_string())).cloned())
    }

    async fn pause_insert(&mut self, kind: PauseKind, name: &str, pause: &Pause) -> Res<bool> {
        let inner = &mut *self.inner;
        let key = (kind, name.to_string());
        if inner.pauses.contains_key(&key) {
            return Ok(false);
        }
        inner.pauses.insert(key.clone(), pause.clone());
        inner.journal(Undo::Pause(key, None));
        Ok(true)
    }

    async fn pause_delete(&mut self, kind: PauseKind, name: &str) -> Res<bool> {
        let inner = &mut *self.inner;
        let key = (kind, name.to_string());
        let old = inner.pauses.remove(&key);
        let had = old.is_some();
        inner.journal(Undo::Pause(key, old));
        Ok(had)
    }

    async fn pauses_list(&mut self) -> Res<Vec<(PauseKind, String, Pause)>> {
        Ok(self
            .inner
            .pauses
            .iter()
            .map(|((k, n), p)| (*k, n.clone(), p.clone()))
            .collect())
    }

    async fn group_get(&mut self, name: &str, _lock: bool) -> Res<Option<GroupDef>> {
        // Transactions are serialised: nothing to lock.
        Ok(self.inner.groups.get(name).cloned())
    }

    async fn group_put(&mut self, name: &str, def: &GroupDef) -> Res<()> {
        let inner = &mut *self.inner;
        let old = inner.groups.insert(name.to_string(), def.clone());
        inner.journal(Undo::Group(name.to_string(), old));
        Ok(())
    }

    async fn group_defs(&mut self) -> Res<Vec<(String, GroupDef)>> {
        Ok(self
            .inner
            .groups
            .iter()
            .map(|(n, d)| (n.clone(), d.clone()))
            .collect())
    }

    async fn cancel_insert(&mut self, request: &CancelRequest) -> Res<bool> {
        let inner = &mut *self.inner;
        if inner.cancels.contains_key(&request.run) || !inner.runs.contains_key(&request.run) {
            return Ok(false);
        }
        inner.cancels.insert(request.run, request.clone());
        inner.journal(Undo::Cancel(request.run, None));
        Ok(true)
    }

    async fn cancel_get(&mut self, run: RunId) -> Res<Option<CancelRequest>> {
        Ok(self.inner.cancels.get(&run).cloned())
    }

    async fn cancels_of_node(&mut self, node: &NodeId) -> Res<Vec<CancelRequest>> {
        let inner = &*self.inner;
        Ok(inner
            .cancels
            .values()
            .filter(|c| {
                inner.runs.get(&c.run).is_some_and(|r| {
                    r.state == RunState::Running && r.node_id.as_ref() == Some(node)
                })
            })
            .cloned()
            .collect())
    }

    async fn log_append(&mut self, run: RunId, lines: &[LogLine]) -> Res<bool> {
        let inner = &mut *self.inner;
        if !inner.runs.contains_key(&run) {
            return Ok(false);
        }
        let first = inner.last_seq;
        inner.last_seq += lines.len() as u64;
        let had = inner.logs.get(&run).map_or(0, Vec::len);
        inner.journal(Undo::Logs(run, had));
        let log = inner.logs.entry(run).or_default();
        log.extend((first + 1..).zip(lines.iter().cloned()));
        Ok(true)
    }

    async fn log_list(
        &mut self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> Res<Vec<(u64, LogLine)>> {
        let Some(log) = self.inner.logs.get(&run) else {
            return Ok(Vec::new());
        };
        let start = after.map_or(0, |a| log.partition_point(|(s, _)| *s <= a));
        Ok(log[start..].iter().take(limit).cloned().collect())
    }

    async fn retention_purge(&mut self, older_than: Timestamp) -> Res<PurgeCounts> {
        let inner = &mut *self.inner;
        let old: Vec<RunId> = inner
            .runs
            .iter()
            .filter(|(_, r)| r.state.is_final() && r.finished_at.is_some_and(|f| f < older_than))
            .map(|(id, _)| *id)
            .collect();
        let mut counts = PurgeCounts::default();
        for id in old {
            counts.log_lines += inner.remove_run(id);
            counts.runs += 1;
        }
        Ok(counts)
    }

    async fn token_insert(&mut self, token: &NewToken) -> Res<Option<ApiToken>> {
        let inner = &mut *self.inner;
        if inner.api_tokens.contains_key(&token.name) {
            return Ok(None);
        }
        let id = inner.api_tokens.values().map(|t| t.id).max().unwrap_or(0) + 1;
        let stored = ApiToken {
            id,
            name: token.name.clone(),
            role: token.role,
            sha256: token.sha256.clone(),
            created_at: token.created_at,
            revoked_at: None,
        };
        inner.api_tokens.insert(token.name.clone(), stored.clone());
        Ok(Some(stored))
    }

    async fn token_list(&mut self) -> Res<Vec<ApiToken>> {
        Ok(self.inner.api_tokens.values().cloned().collect())
    }

    async fn token_revoke(&mut self, name: &str, now: Timestamp) -> Res<Option<ApiToken>> {
        Ok(self.inner.api_tokens.get_mut(name).map(|t| {
            t.revoked_at.get_or_insert(now);
            t.clone()
        }))
    }

    async fn action_insert(&mut self, action: &OperatorAction) -> Res<()> {
        let inner = &mut *self.inner;
        let mut action = action.clone();
        action.id = inner.actions.last().map_or(0, |a| a.id) + 1;
        inner.actions.push(action);
        Ok(())
    }

    async fn action_list(&mut self, job: Option<&str>, limit: usize) -> Res<Vec<OperatorAction>> {
        Ok(self
            .inner
            .actions
            .iter()
            .rev()
            .filter(|a| job.is_none_or(|j| a.job.as_deref() == Some(j)))
            .take(limit)
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::{self, block_on};

    impl Inner {
        /// Rebuilds every index from the rows and compares: the indexes are a cache of the
        /// rows and must never drift from them.
        fn assert_consistent(&self) {
            let mut fresh = Inner {
                jobs: self.jobs.empty_like(),
                ..Inner::default()
            };
            for job in self.jobs.iter() {
                fresh.put_job(job);
            }
            for run in self.runs.values() {
                fresh.put_run(run.clone());
            }
            assert_eq!(self.fires, fresh.fires, "fires index");
            assert_eq!(self.recurring, fresh.recurring, "recurring fires index");
            self.jobs.assert_same_indexes(&fresh.jobs);
            assert_eq!(self.retries, fresh.retries, "retries index");
            assert_eq!(self.queued, fresh.queued, "queued index");
            assert_eq!(self.running, fresh.running, "running index");
            assert_eq!(self.active, fresh.active, "active counts");
            let keys: BTreeMap<(JobId, Timestamp), RunId> = self
                .runs
                .iter()
                .map(|(id, r)| ((r.job_id, r.fire_time), *id))
                .collect();
            assert_eq!(self.run_keys, keys, "run keys");
        }
    }

    /// The whole suite, then every store it used is checked for index drift.
    #[test]
    fn conformance() {
        let stores = std::sync::Mutex::new(Vec::new());
        let report = block_on(conformance::run_all(|| {
            let store = MemoryStore::new();
            stores.lock().unwrap().push(store.clone());
            async { store }
        }));
        eprintln!("{report}");
        report.expect_skipped(&[]);
        let stores = stores.into_inner().unwrap();
        assert!(stores.len() >= 23);
        for store in stores {
            store.engine.dialect().slot.check_out().assert_consistent();
        }
    }

    /// A transaction dropped without its commit leaves the data as it was, indexes included.
    #[test]
    fn a_transaction_dropped_without_commit_is_undone() {
        let store = MemoryStore::new();
        let mut job = JobDef::new("kept", "a::b").unwrap();
        job.next_fire = Some(conformance::t0());
        let kept = block_on(super::super::Store::job_insert(
            &store,
            &job,
            conformance::t0(),
        ))
        .unwrap();
        let mut s = MemorySession {
            data: store.engine.dialect().slot.check_out(),
        };
        let before = format!("{:?}", s.data.jobs);
        {
            let mut tx = block_on(s.begin("test")).unwrap();
            let mut other = JobDef::new("dropped", "a::b").unwrap();
            other.next_fire = Some(conformance::t0());
            block_on(tx.job_insert(&other, conformance::t0()))
                .unwrap()
                .unwrap();
            block_on(tx.job_set_next_fire_if(kept.id.unwrap(), kept.next_fire, None)).unwrap();
            let run = Run::pending(kept.id.unwrap(), conformance::t0(), conformance::t0());
            block_on(tx.insert_runs(&[run], 0)).unwrap();
            // dropped here, uncommitted
        }
        let inner = &*s.data;
        assert_eq!(format!("{:?}", inner.jobs), before);
        assert!(inner.runs.is_empty());
        assert_eq!((inner.last_job, inner.last_run), (1, 0));
        inner.assert_consistent();
    }

    /// The fires index keys instants as nanoseconds: a fire before 1677 is due, in order,
    /// before one of today; a fire after 2262 is not due today; and the next due instant is
    /// the row's, exact to the nanosecond, for the one fire after 2262 too.
    #[test]
    fn fires_outside_the_nanosecond_range_are_due_as_their_instants_say() {
        use super::super::Store;
        let store = MemoryStore::new();
        let t0 = conformance::t0();
        let early = Timestamp::new(-10_000_000_000, 7).unwrap();
        let late = Timestamp::new(10_000_000_000, 7).unwrap();
        for (name, at) in [("today", t0), ("early", early), ("late", late)] {
            let mut job = JobDef::new(name, "a::b").unwrap();
            job.next_fire = Some(at);
            block_on(store.job_insert(&job, t0)).unwrap();
        }
        let due = block_on(store.job_due(t0, 10, &[])).unwrap();
        let names: Vec<&str> = due.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["early", "today"]);
        assert_eq!(due[0].next_fire, early);
        assert_eq!(
            block_on(store.next_due(&[], DueSet::All)).unwrap(),
            Some(early)
        );
        for name in ["early", "today"] {
            let id = block_on(store.job_get_by_name(&JobName::new(name).unwrap()))
                .unwrap()
                .and_then(|j| j.id)
                .unwrap();
            block_on(store.job_delete(id)).unwrap();
        }
        assert_eq!(
            block_on(store.next_due(&[], DueSet::All)).unwrap(),
            Some(late)
        );
        assert!(block_on(store.job_due(t0, 10, &[])).unwrap().is_empty());
        store.engine.dialect().slot.check_out().assert_consistent();
    }

    /// Real threads on one store: each fire is claimed exactly once.
    #[test]
    fn claimers_on_threads_share_nothing() {
        let store = MemoryStore::new();
        let fires = block_on(conformance::seed_every_minute_jobs(&store, 8));
        let claimed = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let store = store.clone();
                    s.spawn(move || block_on(conformance::claim_until_empty(&store, i)))
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        conformance::assert_each_fire_once(&claimed, 8, fires);
        store.engine.dialect().slot.check_out().assert_consistent();
    }
}
