//! Storage: one [`Store`] trait, many backends, one conformance suite.
//!
//! The trait lives in the core because it is a *contract*, not an implementation: what every
//! backend (memory, SQLite, PostgreSQL, SQL Server) must guarantee so that several host nodes
//! on one database never run a fire twice and never lose one. The core performs no I/O, so the
//! trait returns futures and the drivers live in the host; [`memory::MemoryStore`] is the
//! reference implementation (and the store of the host's unit tests), and
//! [`conformance::run_all`] is the suite every backend runs.
//!
//! Rules every method follows:
//!
//! * **No clock reads.** Every method that needs "now" takes it. A SQL backend may later offer
//!   to use the database's clock instead (requirements: "the database's clock decides what is
//!   due across nodes"); the suite always passes explicit instants.
//! * **Every state change is conditional** (a compare-and-set on a version, a fire time, a
//!   state and attempt, or a unique key). A lost race is a [`StoreErrorKind::Conflict`], never
//!   a silent overwrite: it usually means another node got there first.
//! * **Few round-trips.** [`Store::run_claim_due`] picks due jobs, inserts their runs and
//!   advances their next fire in one atomic step (one transaction in SQL).
//! * **Decisions stay in the core.** The store records what the caller decided: the caller runs
//!   [`crate::run::Run::apply`] and passes the outcome ([`RunFinish::from_run`]); only recovery
//!   ([`Store::run_recover_expired`]) applies [`crate::run::transition`] itself, because it
//!   must act on many runs atomically.
//!
//! Where the host loop's policies plug in: the claim is deliberately simple (one run per due
//! job per call, no misfire or overlap decisions). The loop reads due jobs, asks
//! [`crate::policy::misfire::plan`] and [`crate::policy::overlap::decide`], records what it
//! will not run with [`Store::run_insert_skipped`] (same unique key, so a skipped fire is never
//! claimed later) and moves a job's next fire past the skipped fires with
//! [`Store::job_set_next_fire`] (a compare-and-set on the old value), then claims.

pub mod access;
pub mod backend;
pub mod conformance;
pub mod dependency;
pub mod engine;
pub mod memory;

use std::fmt;
use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;

use crate::alert::{AlertDelivery, AlertKey};
use crate::attempt::Attempt;
use crate::group::{GroupDef, GroupStatus};
use crate::job::{JobDef, JobError, JobId, JobName};
use crate::node::{InstanceId, NodeSession, NodeStatus, Registered, Registration};
use crate::pause::{Pause, PauseTarget, Resumed};
use crate::policy::{MisfirePolicy, OverlapPolicy, RetryPolicy};
use crate::run::{NodeId, PluginBuild, Progress, Run, RunEvent, RunId, RunState, TransitionError};
use access::{ApiToken, NewToken, OperatorAction};
pub use engine::DueSet;

/// A store result.
pub type StoreResult<T> = Result<T, StoreError>;

/// What kind of failure a [`StoreError`] is, so the host decides retries without knowing the
/// driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// A conditional change lost: a stale version, a taken name or (job, fire time), a run no
    /// longer running with that attempt. Reload and decide again; do not blindly retry.
    Conflict,
    /// The job or run does not exist (any more).
    NotFound,
    /// The backend is unreachable or busy (a network blip, a lock timeout, a failover). Retry
    /// the same call with backoff.
    Transient,
    /// The caller passed something the store refuses (an invalid job, a run in the wrong
    /// shape). Retrying will not help; fix the input.
    Invalid,
    /// Anything else (a corrupt row, a driver bug). Not retried automatically.
    Other,
}

impl StoreErrorKind {
    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            StoreErrorKind::Conflict => "conflict",
            StoreErrorKind::NotFound => "not_found",
            StoreErrorKind::Transient => "transient",
            StoreErrorKind::Invalid => "invalid",
            StoreErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A storage failure: a [`StoreErrorKind`], a lowercase message saying what, where and what
/// to do, and the driver's error as the source when there is one.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl StoreError {
    /// An error of `kind` with `message`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> StoreError {
        StoreError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A [`StoreErrorKind::Conflict`].
    pub fn conflict(message: impl Into<String>) -> StoreError {
        StoreError::new(StoreErrorKind::Conflict, message)
    }

    /// A [`StoreErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> StoreError {
        StoreError::new(StoreErrorKind::NotFound, message)
    }

    /// A [`StoreErrorKind::Transient`].
    pub fn transient(message: impl Into<String>) -> StoreError {
        StoreError::new(StoreErrorKind::Transient, message)
    }

    /// A [`StoreErrorKind::Invalid`].
    pub fn invalid(message: impl Into<String>) -> StoreError {
        StoreError::new(StoreErrorKind::Invalid, message)
    }

    /// A [`StoreErrorKind::Other`].
    pub fn other(message: impl Into<String>) -> StoreError {
        StoreError::new(StoreErrorKind::Other, message)
    }

    /// The same error caused by `source` (a driver error), kept for `Error::source`.
    pub fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        self.source = Some(Box::new(source));
        self
    }

    /// The kind.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The message (without the source).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the same call may succeed if retried unchanged (only [`StoreErrorKind::Transient`]).
    pub fn is_retryable(&self) -> bool {
        self.kind == StoreErrorKind::Transient
    }
}

impl From<JobError> for StoreError {
    fn from(e: JobError) -> StoreError {
        StoreError::invalid(format!("job refused by the store: {e}")).with_source(e)
    }
}

impl From<TransitionError> for StoreError {
    fn from(e: TransitionError) -> StoreError {
        StoreError::conflict(e.to_string()).with_source(e)
    }
}

/// What a backend can do. A backend without a capability makes the conformance suite skip the
/// checks that need it *loudly*: they are listed in the [`conformance::Report`], and the
/// backend's test must name them in [`conformance::Report::expect_skipped`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Several claimers on clones of one store (several nodes on one database) never get the
    /// same (job, fire time), and concurrent writers (finishes of different runs at once)
    /// never lose each other's committed writes.
    pub concurrent_claims: bool,
    /// Run logs ([`Store::log_append`], [`Store::log_list`]).
    pub logs: bool,
    /// [`Store::retention_purge`].
    pub retention: bool,
}

impl Capabilities {
    /// Everything (what the memory store offers).
    pub const ALL: Capabilities = Capabilities {
        concurrent_claims: true,
        logs: true,
        retention: true,
    };
}

/// Whether a node serving `tags` may run a job with `node_tag` (seed 004 DispatcherID): an
/// untagged job runs on any node, a tagged one only on nodes that serve its tag.
pub fn serves(tags: &[String], node_tag: Option<&str>) -> bool {
    node_tag.is_none_or(|t| tags.iter().any(|s| s == t))
}

/// What [`Store::run_claim_due`] needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimParams {
    /// The claiming node.
    pub node: NodeId,
    /// The claiming life of that node, recorded on every run it claims (see
    /// [`crate::node`]).
    pub instance: InstanceId,
    /// The node tags it serves: it claims untagged jobs and jobs with one of these tags
    /// ([`serves`]).
    pub tags: Vec<String>,
    /// The instant that decides what is due, and the claim's instant for everything it
    /// records unless `claimed_at` says otherwise.
    pub now: Timestamp,
    /// The real instant of a claim made ahead of `now` (a scheduler claims an instant's
    /// fires a little before it, `SchedulerConfig::lookahead`): a run it starts records as
    /// its start (and its attempt's) its own start time — its fire time, or its retry's —
    /// once that is after this instant, else this instant, never later than `now`. So a
    /// fire of the instant to come records that instant, and a run due already (a late
    /// fire, a one-off, a retry) the moment it was actually claimed and began, not the
    /// instant ahead: its recorded start is never after its end. `None`: `now`, for all.
    pub claimed_at: Option<Timestamp>,
    /// The most runs to claim (the node's free capacity).
    pub limit: usize,
    /// How many of `limit` only fires of recurring jobs may take ([`ClaimedRun::recurring_fire`]):
    /// at most `limit - recurring_only` other runs (one-off fires, manual triggers of
    /// one-off jobs, retries, queued and backfilled runs) are claimed. The loop passes the
    /// free part of its recurring reserve here, so that runs of other jobs never hold the
    /// slots kept for schedules. 0: every slot is open to every run.
    pub recurring_only: usize,
    /// How long the node holds each claimed run before it must renew ([`Store::lease_renew`]).
    pub lease: Duration,
}

impl ClaimParams {
    /// Claims `run` (pending → running on this node until `lease_until`) by the state
    /// machine, as every store does inside its claim.
    pub fn claim(
        &self,
        run: &mut Run,
        lease_until: Timestamp,
        retry: &RetryPolicy,
    ) -> Result<(), TransitionError> {
        let starts = run.start_at();
        run.apply(
            RunEvent::Claimed {
                node: self.node.clone(),
                instance: self.instance.clone(),
                lease_until,
            },
            self.started(starts),
            retry,
        )
        .map(|_| ())
    }

    /// The start a run that may start at `starts` records ([`ClaimParams::claimed_at`]).
    pub fn started(&self, starts: Timestamp) -> Timestamp {
        match self.claimed_at {
            Some(at) if at < self.now => starts.clamp(at, self.now),
            _ => self.now,
        }
    }

    /// A new run of `job` for its fire at `fire`, claimed by this node.
    pub fn new_run(
        &self,
        job: JobId,
        fire: Timestamp,
        lease_until: Timestamp,
        retry: &RetryPolicy,
    ) -> Result<Run, TransitionError> {
        let mut run = Run::pending(job, fire, self.claimed_at.unwrap_or(self.now).min(self.now));
        self.claim(&mut run, lease_until, retry)?;
        Ok(run)
    }
}

/// A run a node claimed, with its job as it was at the claim.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimedRun {
    /// The run, now running on the claiming node.
    pub run: Run,
    /// Its job (handler, parameters, timeout, retry policy).
    pub job: JobDef,
    /// The run is a fire of a recurring job ([`JobDef::is_recurring`]: its schedule's next
    /// fire, or a trigger of it), not a pending run (retry, queued, backfilled,
    /// continuation) and not a one-off's: what the claim's fairness share and
    /// [`ClaimParams::recurring_only`] count, and what may hold a node's recurring reserve.
    /// A claim whose COMMIT answer was lost and that was found by its token tells it from
    /// the run (a first attempt of a recurring job that no backfill or continuation made),
    /// which counts a queued first attempt of such a job as a fire.
    pub recurring_fire: bool,
}

/// The end of an attempt, as [`crate::run::Run::apply`] computed it: a final state, or
/// [`RunState::Pending`] with `retry_at` for a retry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFinish {
    /// The state after the attempt: final, or `Pending` when a retry is scheduled.
    pub state: RunState,
    /// The error text (kept on a retry so an operator sees why it was retried).
    pub error: Option<String>,
    /// The handler's result JSON.
    pub result_json: Option<String>,
    /// When the attempt ended (recorded as `finished_at` only for a final state).
    pub finished_at: Timestamp,
    /// How long the attempt ran.
    pub elapsed: Option<Duration>,
    /// When the retry may be claimed; `Some` exactly when `state` is `Pending`.
    pub retry_at: Option<Timestamp>,
    /// The plugin build that ran the attempt (`None` when no plugin was called: an
    /// unresolvable handler). Stored on the run, replacing an earlier attempt's.
    pub plugin: Option<PluginBuild>,
}

impl RunFinish {
    /// The finish of `run` after [`crate::run::Run::apply`] moved it out of running at `now`.
    pub fn from_run(run: &Run, now: Timestamp) -> RunFinish {
        RunFinish {
            state: run.state,
            error: run.error.clone(),
            result_json: run.result_json.clone(),
            finished_at: run.finished_at.unwrap_or(now),
            elapsed: run.elapsed,
            retry_at: run.next_attempt_at,
            plugin: run.plugin.clone(),
        }
    }

    /// Checks the shape: not `Running`; `Pending` exactly when `retry_at` is set.
    pub fn validate(&self) -> StoreResult<()> {
        match (self.state, self.retry_at) {
            (RunState::Running, _) => Err(StoreError::invalid(
                "run finish has state running; pass the state after the attempt (final, or \
                 pending with retry_at)",
            )),
            (RunState::Pending, None) => Err(StoreError::invalid(
                "run finish has state pending but no retry_at; set when the retry is due",
            )),
            (s, Some(_)) if s != RunState::Pending => Err(StoreError::invalid(format!(
                "run finish has state {s} and a retry_at; a retry must be pending"
            ))),
            _ => Ok(()),
        }
    }
}

/// Which runs [`Store::run_list`] returns: newest fire time first, then newest id.
///
/// Paging is by key, not offset: the next page passes the last run of this one as `before`
/// ([`RunCursor::of`]). Runs inserted meanwhile never shift a page — a new fire sorts before
/// the first page, a late-recorded older one (a skip) lands in its own place — so paging
/// through history never repeats or misses a run that existed when it began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFilter {
    /// Only this job's runs.
    pub job: Option<JobId>,
    /// Only runs in this state.
    pub state: Option<RunState>,
    /// Only runs whose fire time is at or after this instant.
    pub fire_from: Option<Timestamp>,
    /// Only runs whose fire time is before this instant.
    pub fire_to: Option<Timestamp>,
    /// Only runs that sort after this one (older fire time, or the same and a smaller id).
    pub before: Option<RunCursor>,
    /// The most runs to return.
    pub limit: usize,
}

impl Default for RunFilter {
    /// Every run, at most 100.
    fn default() -> Self {
        RunFilter {
            job: None,
            state: None,
            fire_from: None,
            fire_to: None,
            before: None,
            limit: 100,
        }
    }
}

impl RunFilter {
    /// Whether `run` passes every condition but the limit (what the memory store and the
    /// tests apply; SQL backends write the same conditions in their dialect).
    pub fn matches(&self, run: &Run) -> bool {
        self.job.is_none_or(|j| run.job_id == j)
            && self.state.is_none_or(|s| run.state == s)
            && self.fire_from.is_none_or(|t| run.fire_time >= t)
            && self.fire_to.is_none_or(|t| run.fire_time < t)
            && self.before.is_none_or(|c| {
                let id = run.id.map_or(0, |i| i.0);
                (run.fire_time, id) < (c.fire_time, c.id.0)
            })
    }
}

/// Where a page of [`Store::run_list`] ended: the fire time and id of its last run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunCursor {
    /// The last run's fire time.
    pub fire_time: Timestamp,
    /// The last run's id.
    pub id: RunId,
}

impl RunCursor {
    /// The cursor after `run` (`None` for a run without an id).
    pub fn of(run: &Run) -> Option<RunCursor> {
        run.id.map(|id| RunCursor {
            fire_time: run.fire_time,
            id,
        })
    }

    /// Reads the text [`RunCursor`]'s `Display` writes (`<fire time in Unix ms>.<run id>`);
    /// `None` for anything else. One form for the API's `cursor` and `takt runs --before`, so
    /// a page boundary found in one can be continued in the other.
    pub fn parse(text: &str) -> Option<RunCursor> {
        let (ms, id) = text.split_once('.')?;
        Some(RunCursor {
            fire_time: Timestamp::from_millisecond(ms.parse().ok()?).ok()?,
            id: RunId(id.parse().ok()?),
        })
    }
}

/// Millisecond precision is enough: fire times are whole seconds, and the id breaks ties.
impl fmt::Display for RunCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.fire_time.as_millisecond(), self.id.0)
    }
}

/// Which jobs [`Store::job_page`] returns: one page of jobs by name ascending, after a cursor,
/// with optional filters.
///
/// Paging is by key, not offset: names are unique, so the cursor is the last name of the
/// previous page ([`JobPage::next`]) and a page reads only the rows after it in the name
/// index. A job added or removed meanwhile never shifts a later page: paging from the start to
/// the end returns every job that existed throughout exactly once.
///
/// Name order is the backend's order for the name column: Unicode code point order (the bytes
/// of UTF-8) in the memory store, SQLite and a PostgreSQL database with the `C` collation, the
/// database's collation otherwise (SQL Server's default ignores case). The cursor is compared
/// in that same order, so paging is complete whatever the collation.
///
/// Cost: `after`, `enabled` and `group` are conditions on an ordered scan of the name index
/// that stops after `limit + 1` matches, so a page costs about its size when most jobs match.
/// Every filter narrows the same scan, so a filter few jobs pass reads further to fill a page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobQuery {
    /// Only jobs named after this one (the previous page's [`JobPage::next`]); `None`: from the
    /// first name.
    pub after: Option<JobName>,
    /// The most jobs to return: 1 to [`JobQuery::MAX_LIMIT`] (anything else is
    /// [`StoreErrorKind::Invalid`]).
    pub limit: usize,
    /// Only enabled (`true`) or disabled (`false`) jobs.
    pub enabled: Option<bool>,
    /// Only jobs of this group (equal as the backend compares text).
    pub group: Option<String>,
    /// Only jobs with this node tag (equal as the backend compares text).
    pub node_tag: Option<String>,
    /// Only jobs whose handler type starts with this text; empty: every job.
    pub handler_prefix: Option<String>,
    /// Only jobs whose name contains this text, ignoring the case of ASCII letters in every
    /// backend (other letters as the backend's `lower()` folds them: not at all in the memory
    /// store and SQLite); empty: every job.
    pub name_contains: Option<String>,
}

impl JobQuery {
    /// The largest [`JobQuery::limit`]: a page is one response, and a larger one is a
    /// response nobody pages through anyway.
    pub const MAX_LIMIT: usize = 1000;

    /// The first page of every job, at most `limit` of them.
    pub fn first(limit: usize) -> JobQuery {
        JobQuery {
            after: None,
            limit,
            enabled: None,
            group: None,
            node_tag: None,
            handler_prefix: None,
            name_contains: None,
        }
    }

    /// The same query for the page after `page` (`None` when `page` was the last).
    pub fn next_of(&self, page: &JobPage) -> Option<JobQuery> {
        page.next.as_ref().map(|after| JobQuery {
            after: Some(after.clone()),
            ..self.clone()
        })
    }

    /// Refuses a limit outside 1..=[`JobQuery::MAX_LIMIT`].
    pub fn validate(&self) -> StoreResult<()> {
        if (1..=JobQuery::MAX_LIMIT).contains(&self.limit) {
            Ok(())
        } else {
            Err(StoreError::invalid(format!(
                "job page limit {} is out of range; ask for 1 to {} jobs and follow the \
                 page's next cursor for more",
                self.limit,
                JobQuery::MAX_LIMIT
            )))
        }
    }

    /// Whether `job` passes every filter but `after` and the limit (what the memory store
    /// applies; SQL backends write the same conditions in their dialect).
    pub fn matches(&self, job: &JobDef) -> bool {
        self.enabled.is_none_or(|e| job.enabled == e)
            && self
                .group
                .as_ref()
                .is_none_or(|g| job.group.as_ref() == Some(g))
            && self
                .node_tag
                .as_ref()
                .is_none_or(|t| job.node_tag.as_ref() == Some(t))
            && self
                .handler_prefix
                .as_ref()
                .is_none_or(|p| job.handler_type.starts_with(p.as_str()))
            && self.name_contains.as_ref().is_none_or(|n| {
                job.name
                    .as_str()
                    .to_ascii_lowercase()
                    .contains(&n.to_ascii_lowercase())
            })
    }
}

/// One page of [`Store::job_page`].
#[derive(Clone, Debug, PartialEq)]
pub struct JobPage {
    /// The jobs, by name ascending, at most the query's limit.
    pub jobs: Vec<JobDef>,
    /// The cursor of the next page (the last job's name) when more jobs matched when this
    /// page was read; `None` on the last page. The store reads one job more than the limit to
    /// know, so a full last page says `None` rather than leading to an empty page.
    pub next: Option<JobName>,
}

impl JobPage {
    /// The page of `query` out of `rows`: the first matching jobs after the cursor, by name,
    /// at most `query.limit + 1` of them (one more than the page, to know whether more
    /// follow).
    pub fn of(query: &JobQuery, mut rows: Vec<JobDef>) -> JobPage {
        let more = rows.len() > query.limit;
        rows.truncate(query.limit);
        JobPage {
            next: if more {
                rows.last().map(|j| j.name.clone())
            } else {
                None
            },
            jobs: rows,
        }
    }
}

/// An enabled job whose next fire has come, with what of it is in flight: what the loop needs
/// for the misfire and overlap decisions before it claims ([`Store::job_due`]).
///
/// Deliberately not the whole [`JobDef`]: the loop reads these on every pass and needs the
/// rest (the schedule, to move a fire on) only for the few jobs that need a decision, which it
/// then loads with [`Store::job_get`]. Compiling every due job's schedule per pass was the
/// largest cost of a pass on SQLite.
#[derive(Clone, Debug, PartialEq)]
pub struct DueJob {
    /// The job.
    pub id: JobId,
    /// Its name (for messages).
    pub name: JobName,
    /// Its next fire, at or before the `now` asked about.
    pub next_fire: Timestamp,
    /// Its misfire policy.
    pub misfire: MisfirePolicy,
    /// Its overlap policy.
    pub overlap: OverlapPolicy,
    /// Its runs in state running (on any node).
    pub running: u32,
    /// Its runs in state pending: retries waiting for their time and queued fires (not runs
    /// waiting for their dependencies, which start only once the job is idle).
    pub pending: u32,
}

impl DueJob {
    /// The row of `job` (which must have an id and a next fire) with the given counts.
    pub fn of(job: &JobDef, running: u32, pending: u32) -> Option<DueJob> {
        Some(DueJob {
            id: job.id?,
            name: job.name.clone(),
            next_fire: job.next_fire?,
            misfire: job.misfire,
            overlap: job.overlap,
            running,
            pending,
        })
    }
}

/// What [`Store::run_backfill`] did: of the `fires` of the range, `created` got a queued run
/// and `present` already had a run (their (job, fire time) key was taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backfilled {
    /// The fires of the job's schedule in the range (inside its validity window).
    pub fires: usize,
    /// Runs created (queued, trigger `backfill`).
    pub created: usize,
    /// Fires that already had a run.
    pub present: usize,
}

/// A request to cancel a run, written to the database by whoever asked (any node, the CLI,
/// the API) and obeyed by the node running the run ([`Store::cancel_requests`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelRequest {
    /// The run.
    pub run: RunId,
    /// Who asked.
    pub by: String,
    /// When.
    pub at: Timestamp,
}

/// What [`Store::run_cancel`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The run was pending (queued, or waiting for a retry) and is now `cancelled`.
    Cancelled(Box<Run>),
    /// The run is running on `node`: the request is recorded and that node stops it (within
    /// about a second), recording it `cancelled`.
    Requested {
        /// The node running it.
        node: Option<NodeId>,
        /// The request (an earlier one, if it had been asked already).
        request: CancelRequest,
    },
}

/// The level of a run log line (the plugin API's levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something unexpected that the run survived.
    Warn,
    /// A failure.
    Error,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 5] = [
        LogLevel::Trace,
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
    ];

    /// The lowercase name used in storage and the API.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }

    /// The level named `name` (as [`LogLevel::name`] writes it).
    pub fn from_name(name: &str) -> Option<LogLevel> {
        LogLevel::ALL.into_iter().find(|l| l.name() == name)
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One line of a run's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// When it was written.
    pub at: Timestamp,
    /// Its level.
    pub level: LogLevel,
    /// The text.
    pub message: String,
}

/// What [`Store::retention_purge`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeCounts {
    /// Runs removed.
    pub runs: u64,
    /// Log lines removed (those of the removed runs).
    pub log_lines: u64,
}

/// The storage contract. See the module docs for the rules every method follows.
///
/// Clones of a store (where a backend is `Clone`) are handles on the same data, like two nodes
/// on one database. Methods return `Send` futures so the host can drive them from any runtime;
/// the core itself never awaits them.
pub trait Store: Send + Sync {
    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    // ---- jobs ----------------------------------------------------------------------------

    /// Stores a new job (after [`JobDef::validate`]) and returns it with its id, version 1 and
    /// `updated_at = now`. A job already named so is a [`StoreErrorKind::Conflict`] naming it.
    /// `next_fire` is stored as given: the caller computes it.
    fn job_insert(
        &self,
        job: &JobDef,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<JobDef>> + Send;

    /// Replaces the job with `job.id` if its stored version is still `job.version` (a stale
    /// version is a Conflict; a missing job is NotFound) and returns it with version + 1 and
    /// `updated_at = now`. Recomputes nothing: the caller sets `next_fire`.
    fn job_update(
        &self,
        job: &JobDef,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<JobDef>> + Send;

    /// The job with `id`, if any.
    fn job_get(&self, id: JobId) -> impl Future<Output = StoreResult<Option<JobDef>>> + Send;

    /// The jobs of `ids` that exist, in no promised order: a page of runs names its jobs in
    /// one read (one statement on a server store, not one round trip per job).
    fn jobs_get(&self, ids: &[JobId]) -> impl Future<Output = StoreResult<Vec<JobDef>>> + Send;

    /// How many jobs are stored.
    fn job_count(&self) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Up to `limit` enabled jobs whose next fire is at or before `before`, earliest first
    /// (then by id), whatever their node tag (a job no node serves is late too). The
    /// dashboard's overview reads its late jobs with it instead of every job; its cost
    /// depends on how many are late.
    fn jobs_late(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<JobDef>>> + Send;

    /// The job named `name`, if any.
    fn job_get_by_name(
        &self,
        name: &JobName,
    ) -> impl Future<Output = StoreResult<Option<JobDef>>> + Send;

    /// Every job, by id.
    fn job_list(&self) -> impl Future<Output = StoreResult<Vec<JobDef>>> + Send;

    /// One page of jobs by name ascending: up to `query.limit` jobs named after
    /// `query.after` that pass its filters, and the cursor of the next page when more follow
    /// (see [`JobQuery`] for the order and the cost). A limit outside
    /// 1..=[`JobQuery::MAX_LIMIT`] is [`StoreErrorKind::Invalid`]. What a listing of many jobs
    /// uses (`GET /api/v1/jobs`, `takt job list`) instead of [`Store::job_list`], whose cost
    /// grows with every job.
    fn job_page(&self, query: &JobQuery) -> impl Future<Output = StoreResult<JobPage>> + Send;

    /// Removes the job with its runs and their logs (NotFound if missing). A node still
    /// running one of them gets NotFound when it finishes it.
    fn job_delete(&self, id: JobId) -> impl Future<Output = StoreResult<()>> + Send;

    /// Enables or disables the job (version + 1, `updated_at = now`) and returns it.
    fn job_set_enabled(
        &self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<JobDef>> + Send;

    /// Sets the job's next fire to `new` if it is still `expected` (else Conflict). The loop
    /// uses it to move past fires its misfire policy skipped. Does not bump the version: next
    /// fire is the store's bookkeeping, and an operator's edit must not conflict with the loop.
    fn job_set_next_fire(
        &self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Up to `limit` enabled jobs a node serving `tags` may run ([`serves`]) whose next fire
    /// is at or before `now`, in claim order (priority, then next fire, then id), each with its
    /// running and pending run counts; when more are due than `limit`, followed by up to
    /// `limit` further due jobs with a recurring schedule ([`JobDef::is_recurring`]), in claim
    /// order: every fire a claim of `limit` may take under its fairness rule
    /// ([`Store::run_claim_due`]), so that each goes through the loop's misfire and overlap
    /// decisions first. Indexed queries in SQL: the loop's cost per pass depends on what is
    /// due, not on how many jobs exist.
    fn job_due(
        &self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> impl Future<Output = StoreResult<Vec<DueJob>>> + Send;

    /// The earliest instant at which [`Store::run_claim_due`] would claim something: the
    /// earliest next fire of an enabled job, the earliest `next_attempt_at` of a pending retry
    /// of an enabled job, or the creation time of a queued run whose job has nothing running
    /// (claimable at once) — of jobs a node serving `tags` may run. `None` when nothing is
    /// scheduled. The loop sleeps until then.
    ///
    /// With [`DueSet::Recurring`], only the earliest next fire of an enabled recurring job
    /// ([`ClaimedRun::recurring_fire`]): what a node whose capacity is full except for its
    /// recurring reserve can still claim, so that it sleeps until the next schedule instead
    /// of past it.
    fn next_due(
        &self,
        tags: &[String],
        set: DueSet,
    ) -> impl Future<Output = StoreResult<Option<Timestamp>>> + Send;

    // ---- claiming ------------------------------------------------------------------------

    /// In one atomic step, claims up to `limit` due runs for `node`, of jobs it serves
    /// (`tags`, see [`serves`]), ordered by job priority then due time:
    ///
    /// * enabled jobs whose `next_fire <= now`: a run is inserted under the unique
    ///   (job, fire time) key — running, attempt 1, on `node`, leased until `now + lease`,
    ///   started now — and the job's next fire advances to the schedule's next firing
    ///   occurrence after the fire time (or `None`), conditionally on the old next fire; a
    ///   DST-gap skip passed on the way is recorded as a skipped run. If the key is already
    ///   taken (a skipped or triggered run), the fire is not run again, but next fire still
    ///   advances;
    /// * pending retries of enabled jobs whose `next_attempt_at <= now`;
    /// * queued runs ([`Store::run_enqueue`]) of enabled jobs that have no running run.
    ///
    /// Two concurrent claimers never get the same (job, fire time), and one call advances a
    /// job's next fire at most once.
    ///
    /// Fairness: candidates are taken in claim order (priority, due time, id), except that
    /// when more is due than `limit`, at least half of it (rounded up) goes to fires of
    /// recurring jobs ([`JobDef::is_recurring`]) if that many are due. A backlog of one-off
    /// fires, triggered runs or retries therefore never holds a recurring schedule back.
    /// And at most `limit - recurring_only` of the runs claimed are not such fires
    /// ([`ClaimParams::recurring_only`]: the room of the node's recurring reserve); the
    /// others left stay due.
    fn run_claim_due(
        &self,
        params: &ClaimParams,
    ) -> impl Future<Output = StoreResult<Vec<ClaimedRun>>> + Send;

    /// Records `run` — made by [`Run::skipped`] — under its (job, fire time) key and returns
    /// it with its id. A taken key is a Conflict; a missing job is NotFound; a run that is not
    /// skipped with a reason is Invalid.
    fn run_insert_skipped(&self, run: &Run) -> impl Future<Output = StoreResult<Run>> + Send;

    /// Records the fire of job `job` at `fire` as **queued** behind the job's running run
    /// (overlap policy `queue-one`): a pending run with no `next_attempt_at`, created at `now`,
    /// which [`Store::run_claim_due`] claims only once no run of the job is running. Same key
    /// rules as [`Store::run_insert_skipped`]: a taken (job, fire time) is a Conflict, a
    /// missing job NotFound.
    fn run_enqueue(
        &self,
        job: JobId,
        fire: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Run>> + Send;

    /// Backfills job `id` over `[from, to)` at `now` (engine: `store/engine/backfill.rs`):
    /// every fire of its schedule in the range, inside its validity window, that has no run
    /// yet is recorded as a queued run with trigger `backfill`, in one transaction; the claim
    /// then runs them one at a time in fire-time order, never beside another run of the job.
    /// Invalid for a reversed or empty range, `max` 0, more than `max` fires (the message
    /// gives the count), a job without a recurring schedule; NotFound for a missing job;
    /// Conflict for a paused job.
    fn run_backfill(
        &self,
        id: JobId,
        from: Timestamp,
        to: Timestamp,
        max: usize,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Backfilled>> + Send;

    // ---- runs ----------------------------------------------------------------------------

    /// Ends attempt `expected_attempt` of the run: only if the run is running with that
    /// attempt (else Conflict). A final state records `finished_at`; a retry puts the run back
    /// to pending with attempt + 1 and `next_attempt_at = retry_at`. Returns the stored run.
    fn run_set_state_if_running(
        &self,
        id: RunId,
        expected_attempt: u32,
        finish: &RunFinish,
    ) -> impl Future<Output = StoreResult<Run>> + Send;

    /// The run with `id`, if any.
    fn run_get(&self, id: RunId) -> impl Future<Output = StoreResult<Option<Run>>> + Send;

    /// Runs matching `filter`, newest fire time first (then newest id).
    fn run_list(&self, filter: &RunFilter) -> impl Future<Output = StoreResult<Vec<Run>>> + Send;

    /// The heartbeat of `node`'s life `instance`, and the lease renewal of its runs, in one
    /// step: records `now` as the node's heartbeat and extends to `until` the lease of every
    /// run this life holds that has not expired at `now`, and returns their ids. A run the
    /// life is executing but that is not in the list was recovered by another node (its lease
    /// expired): the host must stop it, since its end can no longer be recorded.
    ///
    /// A Conflict ([`crate::node::taken_over_message`]) when the node's row no longer holds
    /// `instance` — another process took the node id over (`--takeover`) — or the node was
    /// never registered ([`Store::node_register`]): nothing is renewed, and the caller must
    /// stop claiming.
    fn lease_renew(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<RunId>>> + Send;

    /// Fails, through [`crate::run::transition`] and the job's retry policy, every running
    /// run whose lease expired at `now` ([`crate::run::LEASE_EXPIRED`]) and, when `restart`
    /// names a node starting up (its id and its new life), every run still running on that
    /// node under any *other* life ([`crate::run::NODE_RESTARTED`]) — the caller passes it
    /// only once it knows the previous life is gone ([`crate::node`]). Each is re-queued or
    /// made final. Returns the runs as stored.
    fn run_recover_expired(
        &self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> impl Future<Output = StoreResult<Vec<Run>>> + Send;

    /// Records the latest progress of a running run (Conflict if it is not running).
    fn run_progress(
        &self,
        id: RunId,
        progress: &Progress,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    // ---- nodes ---------------------------------------------------------------------------

    /// Registers a new life of a node, under the rule of [`crate::node::registration`] read
    /// and written in one atomic step: refused (nothing written) while another instance of
    /// the node id has a live heartbeat, unless `reg.replace` names it; otherwise the row is
    /// replaced by `reg.node` with `reg.now` as start and heartbeat. A store that can prove
    /// the previous life dead (the SQLite store's file lock) may follow it regardless.
    fn node_register(
        &self,
        reg: &Registration,
    ) -> impl Future<Output = StoreResult<Registered>> + Send;

    /// Records the clean stop of `node`'s life `instance` at `now` (nothing when another life
    /// holds the row by then).
    fn node_stopped(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Every registered node, by id, with its running runs.
    fn node_list(&self) -> impl Future<Output = StoreResult<Vec<NodeStatus>>> + Send;

    /// The lives of every node ([`NodeSession`]) that started before `to` and were last seen
    /// at or after `from`, by start: when some node was up, the evidence for downtime.
    fn node_sessions(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<NodeSession>>> + Send;

    // ---- history -------------------------------------------------------------------------

    /// The runs of `job` (every job with `None`) whose fire time is in `[from, to)`, oldest
    /// fire first (then id). Read along the (job, fire time) key; the caller bounds the range.
    fn runs_between(
        &self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<Run>>> + Send;

    /// Every attempt of run `run` ([`Attempt`]: begun by the claim, ended by the finish or
    /// by recovery), by attempt number.
    fn run_attempts(&self, run: RunId) -> impl Future<Output = StoreResult<Vec<Attempt>>> + Send;

    /// The attempts of the runs [`Store::runs_between`] returns, by fire time, run and
    /// attempt number.
    fn attempts_between(
        &self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<Attempt>>> + Send;

    // ---- logs ----------------------------------------------------------------------------

    /// Appends `lines` to the run's log in one batch (NotFound if the run is missing). Each
    /// line gets a sequence number that increases within the run (not necessarily by one).
    fn log_append(
        &self,
        run: RunId,
        lines: &[LogLine],
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Up to `limit` lines of the run's log after sequence number `after` (from the start when
    /// `None`), in order, with their sequence numbers.
    fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<(u64, LogLine)>>> + Send;

    // ---- alerts --------------------------------------------------------------------------

    /// Opens an episode of `key` ([`crate::alert`]) keyed `episode` (the run that opened
    /// it, …) at `now` when none is open, in one atomic step: of any number of callers on
    /// any number of nodes, exactly one gets `true` (it sends the alert) until the episode is
    /// closed. A closed episode of the key is reopened with the new `episode`.
    ///
    /// At most once: a call whose COMMIT answer is lost and is tried again finds its own
    /// episode open and returns `false` (that alert is not sent, rather than sent twice).
    fn alert_open(
        &self,
        key: &AlertKey,
        episode: &str,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Closes the open episode of `key` at `now`: `true` for the one caller that closed it
    /// (it sends the "recovered" notice), `false` when none was open.
    fn alert_close(
        &self,
        key: &AlertKey,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Records a delivery (fields longer than [`crate::alert::limits`] are clipped) and
    /// returns its id.
    fn alert_delivery_add(
        &self,
        delivery: &AlertDelivery,
    ) -> impl Future<Output = StoreResult<i64>> + Send;

    /// Up to `limit` deliveries, newest first.
    fn alert_delivery_list(
        &self,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<AlertDelivery>>> + Send;

    // ---- retention -----------------------------------------------------------------------

    /// Removes runs in a final state that finished before `older_than`, with their logs and
    /// attempts.
    /// Pending and running runs are never removed, however old.
    fn retention_purge(
        &self,
        older_than: Timestamp,
    ) -> impl Future<Output = StoreResult<PurgeCounts>> + Send;

    // ---- pauses (see crate::pause) -------------------------------------------------------

    /// Pauses `target` with `pause` (who, when, why) and returns the jobs now held. A job or
    /// group: the jobs' next fires are kept aside, so nothing of them is due until resumed
    /// (a group's future members too); a node: it claims nothing. NotFound for a missing job,
    /// a group no job is in, a node never registered; Conflict when already paused.
    fn pause(
        &self,
        target: &PauseTarget,
        pause: &Pause,
    ) -> impl Future<Output = StoreResult<Vec<JobId>>> + Send;

    /// Ends the pause of `target` at `now`. Each job released gets its next fire back through
    /// its misfire policy ([`crate::pause::resume_plan`]): kept fires run, the others of the
    /// paused interval are recorded skipped with reason `paused` (bounded). A job still held
    /// by its group's pause stays held. Conflict (job) or NotFound (group, node) when not
    /// paused.
    fn resume(
        &self,
        target: &PauseTarget,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Resumed>> + Send;

    /// The pause that holds job `id` — its own, else its group's — if any (what `takt why`
    /// and `job show` report).
    fn job_paused(
        &self,
        id: JobId,
    ) -> impl Future<Output = StoreResult<Option<(PauseTarget, Pause)>>> + Send;

    /// The pause of node `node`, if it is paused (one key lookup: a loop may ask every pass).
    fn node_paused(&self, node: &NodeId)
    -> impl Future<Output = StoreResult<Option<Pause>>> + Send;

    /// Every pause: jobs' own (by id), then groups' and nodes' (by name).
    fn pause_list(&self) -> impl Future<Output = StoreResult<Vec<(PauseTarget, Pause)>>> + Send;

    // ---- groups (see crate::group) -------------------------------------------------------

    /// Every group — named by a job or defined — by name, with its members, definition,
    /// running count, pause and failure hold as a fire at `now` would see it.
    fn group_list(
        &self,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<GroupStatus>>> + Send;

    /// Group `name` as [`Store::group_list`] shows it; NotFound when no job is in it and no
    /// definition names it.
    fn group_status(
        &self,
        name: &str,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<GroupStatus>> + Send;

    /// Sets group `name`'s `max_running` (`None`: no limit), keeping the rest of its
    /// definition; the definition stored. NotFound when no job is in the group and it has no
    /// definition; Invalid for 0.
    fn group_set(
        &self,
        name: &str,
        max_running: Option<u32>,
    ) -> impl Future<Output = StoreResult<GroupDef>> + Send;

    // ---- cancel anywhere -----------------------------------------------------------------

    /// Cancels run `id` on behalf of `by` at `now`, whichever node holds it: a pending run
    /// (queued, or waiting for a retry) becomes `cancelled` at once; a running one gets a
    /// [`CancelRequest`] that the node running it obeys ([`Store::cancel_requests`]; on
    /// PostgreSQL a `NOTIFY` wakes it). Asking again for a running run returns the first
    /// request. NotFound for an unknown run; Conflict for a run already final.
    fn run_cancel(
        &self,
        id: RunId,
        by: &str,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<CancelOutcome>> + Send;

    /// The cancel requests of the runs running on `node` (what its loop polls, about every
    /// second).
    fn cancel_requests(
        &self,
        node: &NodeId,
    ) -> impl Future<Output = StoreResult<Vec<CancelRequest>>> + Send;

    /// Who asked to cancel run `id`, and when, if anyone did.
    fn cancel_request_of(
        &self,
        id: RunId,
    ) -> impl Future<Output = StoreResult<Option<CancelRequest>>> + Send;

    // ---- API access ([`access`]) -----------------------------------------------------------

    /// Stores a token's hash under its unique name (a taken name is a Conflict naming it).
    fn token_insert(&self, token: &NewToken) -> impl Future<Output = StoreResult<ApiToken>> + Send;

    /// Every token, revoked ones included, by name.
    fn token_list(&self) -> impl Future<Output = StoreResult<Vec<ApiToken>>> + Send;

    /// Revokes the token named `name` at `now` (NotFound when there is none); revoking a
    /// revoked token keeps its first revocation time.
    fn token_revoke(
        &self,
        name: &str,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<ApiToken>> + Send;

    /// Records an operator action.
    fn action_insert(
        &self,
        action: &OperatorAction,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Up to `limit` recorded actions, newest first; only those done to the job named `job`
    /// when given.
    fn action_list(
        &self,
        job: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<OperatorAction>>> + Send;

    /// The runs that run `parent`'s final state created (its continuations, trigger
    /// `continuation`), by id. Along the (parent run, job) key.
    fn run_children(&self, parent: RunId) -> impl Future<Output = StoreResult<Vec<Run>>> + Send;

    /// The fire time of the latest succeeded run of `job` whose fire time is before `before`
    /// (the `last_success_fire_time` of dynamic parameters: the start of an incremental
    /// data-sync window). Along the (job, state, fire time) index.
    fn run_last_success_fire(
        &self,
        job: JobId,
        before: Timestamp,
    ) -> impl Future<Output = StoreResult<Option<Timestamp>>> + Send;

    /// Records `params_json`, the job's params with their templates resolved, on run `id`
    /// while it is running attempt `attempt` (a Conflict otherwise: the run moved on, and
    /// the attempt's record belongs to whoever moved it).
    fn run_set_params(
        &self,
        id: RunId,
        attempt: u32,
        params_json: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_kind_message_and_source() {
        let e = StoreError::from(JobError::ZeroTimeout);
        assert_eq!(e.kind(), StoreErrorKind::Invalid);
        assert_eq!(
            e.to_string(),
            "job refused by the store: job timeout is zero; give at least 1s, or no timeout"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert!(!e.is_retryable());
        assert!(StoreError::transient("database busy; retry").is_retryable());
        assert_eq!(StoreErrorKind::NotFound.to_string(), "not_found");
    }

    #[test]
    fn finish_shapes() {
        let t: Timestamp = "2026-06-01T10:00:00Z".parse().unwrap();
        let f = |state, retry_at| RunFinish {
            state,
            error: None,
            result_json: None,
            finished_at: t,
            elapsed: None,
            retry_at,
            plugin: None,
        };
        assert!(f(RunState::Succeeded, None).validate().is_ok());
        assert!(f(RunState::Pending, Some(t)).validate().is_ok());
        for bad in [
            f(RunState::Running, None),
            f(RunState::Pending, None),
            f(RunState::Failed, Some(t)),
        ] {
            assert_eq!(bad.validate().unwrap_err().kind(), StoreErrorKind::Invalid);
        }
        for l in LogLevel::ALL {
            assert_eq!(LogLevel::from_name(l.name()), Some(l));
        }
    }
}
