//! [`PgStore`]: the core's [`Store`] contract on PostgreSQL, for several host nodes on one
//! database.
//!
//! The schema is `sql/postgres/` ([`mod@migrate`]); the row forms and their parsing are shared
//! with the SQLite store (`rows.rs`), and the semantics mirror the reference store method by
//! method (the core's conformance suite checks that they agree).
//!
//! **Claiming** is one transaction: due jobs are read in claim order and locked with
//! `FOR NO KEY UPDATE SKIP LOCKED` (a job another node is claiming is passed over, not waited
//! for; `NO KEY` so that inserting a run, which takes a key-share lock on its job, is never
//! blocked by it), their next fires advance in one `UPDATE … FROM unnest(…)`, and their runs
//! are inserted in one `INSERT … SELECT FROM unnest(…) ON CONFLICT (job_id, fire_time) DO
//! NOTHING RETURNING …`. The unique key, not the lock, is what makes a fire run once: a node
//! whose lock was lost (or a hand-made row) can never add a second run of one fire.
//!
//! **Transient errors** (a lost connection, a serialization failure, a deadlock victim, a
//! server shutting down, a full pool) are retried with backoff inside the store when nothing
//! was committed. An error *during* a commit leaves the outcome unknown; the claim resolves it
//! with the claim token it wrote into its runs (it looks up what it claimed, so a claimed run
//! is neither lost nor claimed again), a finish by reading the run back.
//!
//! **Connections** come from a pool (deadpool); each is opened with the configured schema as
//! its `search_path`, so one database can hold several takt installations (and the tests a
//! schema each). TLS is not offered yet: run PostgreSQL on a trusted network or through a
//! local tunnel.

pub mod migrate;

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime,
};
use jiff::Timestamp;
use takt_core::job::{JobDef, JobId, JobName};
use takt_core::node::{InstanceId, NodeStatus, Registered, Registration, registration};
use takt_core::policy::{MisfirePolicy, OverlapPolicy};
use takt_core::run::{NodeId, Progress, Run, RunId, RunState};
use takt_core::store::backend::{
    add, apply_finish, check_skipped, fire_taken, job_missing, name_taken, next_firing,
    not_registered, recovery_event, run_missing, show,
};
use takt_core::store::{
    Capabilities, ClaimParams, ClaimedRun, DueJob, LogLevel, LogLine, PurgeCounts, RunFilter,
    RunFinish, Store, StoreError, StoreErrorKind, StoreResult,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use super::migrate::{AppliedMigration, MigrationObserver};
use super::retry::{self, Fail, RETRY_PAUSES_MS, Retry};
use super::rows::{
    JOB_COLUMNS, JobRow, NODE_COLUMNS, NodeRow, RUN_COLUMNS, RunRow, corrupt, to_i64,
};
pub use migrate::{PG_MIGRATIONS, pg_latest_version};

/// How a [`PgStore`] connects.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PgOptions {
    /// A libpq connection string or URL (`postgres://user:password@host:5432/db`,
    /// `host=… user=… dbname=…`).
    pub url: String,
    /// The schema holding takt's tables (created if missing); `None`: the server's default
    /// `search_path` (normally `public`).
    pub schema: Option<String>,
    /// The most connections the pool opens. Default 8: the loop uses one at a time, finishing
    /// runs and log forwarders the rest.
    pub pool_size: usize,
    /// How long opening a connection, or waiting for a free one, may take before the call fails
    /// as transient. Default 5 s.
    pub connect_timeout: Duration,
    /// Told what the migrations applied at connect are doing (none by default).
    pub on_migration: Option<MigrationObserver>,
    /// Create the schema and apply the migrations it lacks (the default: a host and `takt db
    /// migrate`). `false` connects only to an existing takt schema at this binary's version
    /// and refuses anything else, creating and changing nothing: what read-only commands use
    /// (a `takt job list` must never create tables in a shared database's `public` schema).
    pub migrate: bool,
}

impl PgOptions {
    /// Options for `url` with the defaults.
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            schema: None,
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            on_migration: None,
            migrate: true,
        }
    }

    /// The same options with takt's tables in `schema`.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The same options with another pool size (at least 1).
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// The same options reporting migration progress to `observer`.
    pub fn with_migration_observer(mut self, observer: MigrationObserver) -> Self {
        self.on_migration = Some(observer);
        self
    }
}

/// A [`Store`] on a PostgreSQL database; cheap to clone (clones share one pool). Two
/// [`PgStore::connect`] calls are two pools, like two nodes.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    shown: Arc<str>,
    schema: Option<Arc<str>>,
    /// The connection settings (for the listener's own connection).
    config: Arc<tokio_postgres::Config>,
    /// The LISTEN/NOTIFY channel of this installation (one per schema).
    channel: Arc<str>,
    /// Claims whose COMMIT lost its answer, resolved by their claim token (diagnostics).
    unknown_commits: Arc<AtomicU64>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("database", &self.shown)
            .finish_non_exhaustive()
    }
}

/// Maps a driver error to a [`Fail`] whose kind the host can act on; `what` says what the
/// store was doing.
pub(crate) fn pg(shown: &str, what: &str, err: tokio_postgres::Error) -> Fail {
    let e = detail(&err);
    let transient = Fail::transient;
    if let Some(code) = err.code() {
        let c = code.code();
        if *code == SqlState::UNIQUE_VIOLATION {
            return StoreError::conflict(format!(
                "{what} in {shown} violates a unique key ({e}); another node may have written \
                 the same row first: reload and decide again"
            ))
            .into();
        }
        if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::LOCK_NOT_AVAILABLE
        {
            return transient(format!(
                "{what} in {shown} lost a race with another transaction ({e}); retry"
            ));
        }
        if *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::TOO_MANY_CONNECTIONS
            || c.starts_with("08")
        {
            return transient(format!(
                "the database {shown} is unavailable ({what}: {e}); check that the server is up and accepting connections"
            ));
        }
        if *code == SqlState::UNDEFINED_TABLE || *code == SqlState::UNDEFINED_COLUMN {
            return StoreError::other(format!(
                "the database {shown} lacks takt's tables ({what}: {e}); run `takt db migrate` \
                 or check the configured schema"
            ))
            .into();
        }
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            return StoreError::other(format!(
                "the database {shown} refused the login ({e}); check the user and password in \
                 the connection string"
            ))
            .into();
        }
        if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            return StoreError::other(format!(
                "the database {shown} refused {what} ({e}); grant the host's login the \
                 privileges listed in sql/README.md"
            ))
            .into();
        }
        return StoreError::other(format!("postgres error on {shown} while {what}: {e}")).into();
    }
    // No SQLSTATE: the connection itself failed (closed, refused, reset, timed out).
    transient(format!(
        "the database {shown} is unreachable ({what}: {e}); check that the server runs and that this machine can reach it"
    ))
}

/// What the server said (SQLSTATE, message, detail), or the driver's error and its cause:
/// `tokio_postgres::Error`'s own text is only "db error" for everything the server reports.
fn detail(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} {}", db.code().code(), db.message());
        if let Some(d) = db.detail() {
            s.push_str(&format!(" ({d})"));
        }
        return s;
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

fn pool_error(shown: &str, what: &str, e: PoolError) -> Fail {
    match e {
        PoolError::Backend(e) => pg(shown, what, e),
        PoolError::Timeout(_) => Fail::transient(format!(
            "no connection to {shown} within the connect timeout ({what}); the database is \
             down, unreachable or out of connections"
        )),
        other => StoreError::other(format!(
            "cannot get a connection to {shown} ({what}): {other}"
        ))
        .into(),
    }
}

// ---- conversions -------------------------------------------------------------------------

/// Unix milliseconds as the driver's timestamp.
fn st(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

fn st_opt(ms: Option<i64>) -> Option<SystemTime> {
    ms.map(st)
}

fn ts(t: Timestamp) -> SystemTime {
    st(t.as_millisecond())
}

/// A stored timestamp as Unix milliseconds (truncated: takt writes whole milliseconds).
fn ms_of(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            -i64::try_from(d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0))
                .unwrap_or(i64::MAX)
        }
    }
}

fn i32_of(v: i64, what: &str) -> StoreResult<i32> {
    i32::try_from(v).map_err(|_| {
        StoreError::invalid(format!(
            "{what} {v} is too large for the database (at most {}); use a smaller value",
            i32::MAX
        ))
    })
}

fn read_err(shown: &str, what: &str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| {
        StoreError::other(format!(
            "{what} in {shown} has an unexpected column type ({e}); the schema was changed by \
             hand: compare it with sql/postgres/"
        ))
    }
}

fn job_row(r: &Row, shown: &str) -> StoreResult<JobRow> {
    let bad = read_err(shown, "a job row");
    let t = |i: usize| -> StoreResult<Option<i64>> {
        Ok(r.try_get::<_, Option<SystemTime>>(i)
            .map_err(&bad)?
            .map(ms_of))
    };
    Ok(JobRow {
        id: r.try_get(0).map_err(&bad)?,
        name: r.try_get(1).map_err(&bad)?,
        group: r.try_get(2).map_err(&bad)?,
        handler_type: r.try_get(3).map_err(&bad)?,
        params_json: r.try_get(4).map_err(&bad)?,
        schedule_json: r.try_get(5).map_err(&bad)?,
        enabled: r.try_get(6).map_err(&bad)?,
        effective_from: t(7)?,
        expires_at: t(8)?,
        timeout_ms: r.try_get(9).map_err(&bad)?,
        retry_max: i64::from(r.try_get::<_, i32>(10).map_err(&bad)?),
        retry_backoff: r.try_get(11).map_err(&bad)?,
        retry_timeouts: r.try_get(12).map_err(&bad)?,
        misfire: r.try_get(13).map_err(&bad)?,
        overlap: r.try_get(14).map_err(&bad)?,
        priority: i64::from(r.try_get::<_, i32>(15).map_err(&bad)?),
        dependencies: r.try_get(16).map_err(&bad)?,
        node_tag: r.try_get(17).map_err(&bad)?,
        application: r.try_get(18).map_err(&bad)?,
        owner: r.try_get(19).map_err(&bad)?,
        description: r.try_get(20).map_err(&bad)?,
        isolation: r.try_get(21).map_err(&bad)?,
        next_fire: t(22)?,
        version: r.try_get(23).map_err(&bad)?,
        updated_at: t(24)?.unwrap_or_default(),
    })
}

fn job_of(r: &Row, shown: &str) -> StoreResult<JobDef> {
    job_row(r, shown)?.into_job(shown)
}

fn run_of(r: &Row, shown: &str) -> StoreResult<Run> {
    let bad = read_err(shown, "a run row");
    let t = |i: usize| -> StoreResult<Option<i64>> {
        Ok(r.try_get::<_, Option<SystemTime>>(i)
            .map_err(&bad)?
            .map(ms_of))
    };
    RunRow {
        id: r.try_get(0).map_err(&bad)?,
        job_id: r.try_get(1).map_err(&bad)?,
        fire_time: t(2)?.unwrap_or_default(),
        state: r.try_get(3).map_err(&bad)?,
        attempt: i64::from(r.try_get::<_, i32>(4).map_err(&bad)?),
        created_at: t(5)?.unwrap_or_default(),
        started_at: t(6)?,
        finished_at: t(7)?,
        node_id: r.try_get(8).map_err(&bad)?,
        lease_expires_at: t(9)?,
        error: r.try_get(10).map_err(&bad)?,
        result_json: r.try_get(11).map_err(&bad)?,
        elapsed_ms: r.try_get(12).map_err(&bad)?,
        progress_done: r.try_get(13).map_err(&bad)?,
        progress_total: r.try_get(14).map_err(&bad)?,
        progress_message: r.try_get(15).map_err(&bad)?,
        skip_reason: r.try_get(16).map_err(&bad)?,
        next_attempt_at: t(17)?,
        node_instance: r.try_get(18).map_err(&bad)?,
        plugin: r.try_get(19).map_err(&bad)?,
        plugin_version: r.try_get(20).map_err(&bad)?,
        plugin_sha256: r.try_get(21).map_err(&bad)?,
    }
    .into_run(shown)
}

type Param = Box<dyn ToSql + Sync + Send>;

fn refs(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect()
}

/// The parameters of a job's columns after `id`, in `JOB_COLUMNS` order.
fn job_params(r: JobRow) -> StoreResult<Vec<Param>> {
    Ok(vec![
        Box::new(r.name),
        Box::new(r.group),
        Box::new(r.handler_type),
        Box::new(r.params_json),
        Box::new(r.schedule_json),
        Box::new(r.enabled),
        Box::new(st_opt(r.effective_from)),
        Box::new(st_opt(r.expires_at)),
        Box::new(r.timeout_ms),
        Box::new(i32_of(r.retry_max, "retry count")?),
        Box::new(r.retry_backoff),
        Box::new(r.retry_timeouts),
        Box::new(r.misfire),
        Box::new(r.overlap),
        Box::new(i32_of(r.priority, "priority")?),
        Box::new(r.dependencies),
        Box::new(r.node_tag),
        Box::new(r.application),
        Box::new(r.owner),
        Box::new(r.description),
        Box::new(r.isolation),
        Box::new(st_opt(r.next_fire)),
        Box::new(r.version),
        Box::new(st(r.updated_at)),
    ])
}

/// The parameters of a run's mutable columns (from `state`), in `RUN_COLUMNS` order.
fn run_params(r: RunRow) -> StoreResult<Vec<Param>> {
    Ok(vec![
        Box::new(r.state),
        Box::new(i32_of(r.attempt, "attempt")?),
        Box::new(st(r.created_at)),
        Box::new(st_opt(r.started_at)),
        Box::new(st_opt(r.finished_at)),
        Box::new(r.node_id),
        Box::new(st_opt(r.lease_expires_at)),
        Box::new(r.error),
        Box::new(r.result_json),
        Box::new(r.elapsed_ms),
        Box::new(r.progress_done),
        Box::new(r.progress_total),
        Box::new(r.progress_message),
        Box::new(r.skip_reason),
        Box::new(st_opt(r.next_attempt_at)),
        Box::new(r.node_instance),
    ])
}

/// Runs to insert in one statement, column by column (`unnest` turns the arrays back into
/// rows), each with the claim token of the claim that writes it (0 outside claims).
#[derive(Default)]
struct RunBatch {
    job_id: Vec<i64>,
    fire_time: Vec<SystemTime>,
    state: Vec<String>,
    attempt: Vec<i32>,
    created_at: Vec<SystemTime>,
    started_at: Vec<Option<SystemTime>>,
    finished_at: Vec<Option<SystemTime>>,
    node_id: Vec<Option<String>>,
    lease_expires_at: Vec<Option<SystemTime>>,
    error: Vec<Option<String>>,
    result_json: Vec<Option<String>>,
    elapsed_ms: Vec<Option<i64>>,
    progress_done: Vec<Option<i64>>,
    progress_total: Vec<Option<i64>>,
    progress_message: Vec<Option<String>>,
    skip_reason: Vec<Option<String>>,
    next_attempt_at: Vec<Option<SystemTime>>,
    node_instance: Vec<Option<String>>,
    claim_token: Vec<i64>,
}

const INSERT_RUNS: &str = "INSERT INTO runs (job_id, fire_time, state, attempt, created_at, \
     started_at, finished_at, node_id, lease_expires_at, error, result_json, elapsed_ms, \
     progress_done, progress_total, progress_message, skip_reason, next_attempt_at, \
     node_instance, claim_token) \
     SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::integer[], \
     $5::timestamptz[], $6::timestamptz[], $7::timestamptz[], $8::text[], $9::timestamptz[], \
     $10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::bigint[], $15::text[], \
     $16::text[], $17::timestamptz[], $18::text[], $19::bigint[]) \
     ON CONFLICT (job_id, fire_time) DO NOTHING";

impl RunBatch {
    fn push(&mut self, run: &Run, token: i64) -> StoreResult<()> {
        let r = RunRow::of(run)?;
        self.job_id.push(r.job_id);
        self.fire_time.push(st(r.fire_time));
        self.state.push(r.state);
        self.attempt.push(i32_of(r.attempt, "attempt")?);
        self.created_at.push(st(r.created_at));
        self.started_at.push(st_opt(r.started_at));
        self.finished_at.push(st_opt(r.finished_at));
        self.node_id.push(r.node_id);
        self.lease_expires_at.push(st_opt(r.lease_expires_at));
        self.error.push(r.error);
        self.result_json.push(r.result_json);
        self.elapsed_ms.push(r.elapsed_ms);
        self.progress_done.push(r.progress_done);
        self.progress_total.push(r.progress_total);
        self.progress_message.push(r.progress_message);
        self.skip_reason.push(r.skip_reason);
        self.next_attempt_at.push(st_opt(r.next_attempt_at));
        self.node_instance.push(r.node_instance);
        self.claim_token.push(token);
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.job_id.is_empty()
    }

    /// Inserts the batch; returns the runs inserted (a taken (job, fire time) key inserts
    /// nothing for that run).
    async fn insert(&self, c: &impl GenericClient, shown: &str) -> Result<Vec<Run>, Fail> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!("{INSERT_RUNS} RETURNING {RUN_COLUMNS}");
        let stmt = c
            .prepare_cached(&sql)
            .await
            .map_err(|e| pg(shown, "inserting runs", e))?;
        let rows = c
            .query(
                &stmt,
                &[
                    &self.job_id,
                    &self.fire_time,
                    &self.state,
                    &self.attempt,
                    &self.created_at,
                    &self.started_at,
                    &self.finished_at,
                    &self.node_id,
                    &self.lease_expires_at,
                    &self.error,
                    &self.result_json,
                    &self.elapsed_ms,
                    &self.progress_done,
                    &self.progress_total,
                    &self.progress_message,
                    &self.skip_reason,
                    &self.next_attempt_at,
                    &self.node_instance,
                    &self.claim_token,
                ],
            )
            .await
            .map_err(|e| pg(shown, "inserting runs", e))?;
        Ok(rows
            .iter()
            .map(|r| run_of(r, shown))
            .collect::<StoreResult<_>>()?)
    }
}

static CLAIM_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How long finding out whether a claim committed waits for the claim's transaction to end.
const CLAIM_LOCK_WAIT: Duration = Duration::from_secs(10);

/// A token no other claim uses: random per process, distinct per call.
fn claim_token() -> i64 {
    let n = CLAIM_COUNTER.fetch_add(1, Ordering::Relaxed);
    let h = RandomState::new().hash_one((n, std::process::id(), SystemTime::now()));
    // Positive and never 0 (0 marks rows written outside claims).
    i64::try_from(h >> 1).unwrap_or(1).max(1)
}

// ---- the store ---------------------------------------------------------------------------

impl PgStore {
    /// Connects (creating the schema when one is configured and missing), and applies the
    /// migrations the database lacks. Fails when the server is unreachable, refuses the login,
    /// or was migrated by a newer takt (left untouched).
    pub async fn connect(options: &PgOptions) -> StoreResult<PgStore> {
        let mut config = tokio_postgres::Config::from_str(&options.url).map_err(|e| {
            StoreError::invalid(format!(
                "the postgres connection string is not valid ({e}); write it as \
                 postgres://user:password@host:5432/database or host=… user=… dbname=…"
            ))
        })?;
        let shown: Arc<str> = describe(&config).into();
        if let Some(schema) = &options.schema {
            check_identifier(schema)?;
            config.options(format!("-c search_path={schema}"));
        }
        config.connect_timeout(options.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name("takt");
        }
        let channel: Arc<str> = format!(
            "takt_wake_{}",
            options.schema.as_deref().unwrap_or("public")
        )
        .into();
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| StoreError::other(format!("cannot build a pool for {shown}: {e}")))?;
        let store = PgStore {
            pool,
            shown,
            schema: options.schema.as_deref().map(Arc::from),
            config: Arc::new(config),
            channel,
            unknown_commits: Arc::default(),
        };
        store
            .retrying("connecting", || async {
                let mut client = store.client("connecting").await?;
                if !options.migrate {
                    let current =
                        migrate::current_version(&**client, &store.shown, store.schema.as_deref())
                            .await?;
                    super::migrate::require_current(
                        &store.shown,
                        current,
                        pg_latest_version(),
                        super::migrate::newer_server_schema,
                    )?;
                    return Ok(Vec::new());
                }
                if let Some(schema) = &options.schema {
                    let created = client
                        .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                        .await
                        .map_err(|e| pg(&store.shown, "creating the schema", e));
                    match created {
                        // Two nodes creating it at once: one wins the catalog's unique key.
                        Err(f) if f.error.kind() == StoreErrorKind::Conflict => {}
                        other => other?,
                    }
                }
                migrate::apply(
                    &mut client,
                    &store.shown,
                    store.schema.as_deref(),
                    options.on_migration.as_ref(),
                )
                .await
            })
            .await?;
        Ok(store)
    }

    /// How many claims of this store (and its clones) had their COMMIT's answer lost to a
    /// broken connection and were resolved by their claim token: found committed (returned as
    /// claimed) or found not committed (claimed again). Diagnostics for operators and tests.
    pub fn unknown_commits(&self) -> u64 {
        self.unknown_commits.load(Ordering::Relaxed)
    }

    /// The database, as shown in messages (`postgres://user@host:port/db`, no password).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The schema version of the database (the last migration applied).
    pub async fn schema_version(&self) -> StoreResult<u32> {
        self.retrying("reading the schema version", || async {
            let client = self.client("reading the schema version").await?;
            migrate::current_version(&**client, &self.shown, self.schema.as_deref()).await
        })
        .await
    }

    /// Applies migrations this binary knows and the database lacks.
    pub async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        self.retrying("migrating", || async {
            let mut client = self.client("migrating").await?;
            migrate::apply(&mut client, &self.shown, self.schema.as_deref(), None).await
        })
        .await
    }

    /// The database server's clock. Nodes correct their own clocks by it, so that what is due
    /// is decided by one clock for every node (see `scheduler::clock::DbClock`).
    pub async fn database_now(&self) -> StoreResult<Timestamp> {
        self.retrying("reading the database clock", || async {
            let client = self.client("reading the database clock").await?;
            let t: SystemTime = client
                .query_one("SELECT clock_timestamp()", &[])
                .await
                .map_err(|e| pg(&self.shown, "reading the database clock", e))?
                .get(0);
            Timestamp::try_from(t).map_err(|e| {
                StoreError::other(format!("the database clock is out of range: {e}")).into()
            })
        })
        .await
    }

    /// Wakes the nodes listening on this database ([`PgStore::listen`]): something may be due
    /// sooner than they planned (a job added, changed, enabled or triggered; a retry or a
    /// queued run). Best effort: a lost notification costs at most a safety poll.
    async fn wake_others(&self, client: &deadpool_postgres::Object) {
        if let Err(e) = client
            .execute("SELECT pg_notify($1, '')", &[&&*self.channel])
            .await
        {
            tracing::debug!("cannot notify other nodes: {e}");
        }
    }

    /// Listens for other nodes' and commands' changes (PostgreSQL `LISTEN` on a connection
    /// of its own, outside the pool) and calls `wake` for each: the scheduler then passes at
    /// once instead of at its next safety poll. The task reconnects with backoff when the
    /// connection is lost (and wakes once after reconnecting, for what it missed); it ends when
    /// aborted.
    pub fn listen(&self, wake: impl Fn() + Send + Sync + 'static) -> tokio::task::JoinHandle<()> {
        let (config, channel, shown) = (
            self.config.clone(),
            self.channel.clone(),
            self.shown.clone(),
        );
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(250);
            loop {
                match config.connect(NoTls).await {
                    Ok((client, mut conn)) => {
                        let sql = format!("LISTEN {channel}");
                        let mut listen = Box::pin(client.batch_execute(&sql));
                        // The connection must be polled for the LISTEN to complete.
                        let ok = loop {
                            tokio::select! {
                                r = &mut listen => break r.is_ok(),
                                m = std::future::poll_fn(|cx| conn.poll_message(cx)) => {
                                    if !matches!(m, Some(Ok(_))) {
                                        break false;
                                    }
                                }
                            }
                        };
                        drop(listen);
                        if ok {
                            pause = Duration::from_millis(250);
                            wake();
                            while let Some(msg) =
                                std::future::poll_fn(|cx| conn.poll_message(cx)).await
                            {
                                match msg {
                                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => wake(),
                                    Ok(_) => {}
                                    Err(_) => break,
                                }
                            }
                            drop(client);
                        }
                        tracing::debug!("listener connection to {shown} ended; reconnecting");
                    }
                    Err(e) => tracing::debug!("listener cannot connect to {shown}: {e}"),
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(8));
            }
        })
    }

    async fn client(&self, what: &str) -> Result<deadpool_postgres::Object, Fail> {
        self.pool
            .get()
            .await
            .map_err(|e| pool_error(&self.shown, what, e))
    }

    /// [`retry::retrying`] for this store's calls.
    async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> StoreResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        retry::retrying(what, op).await
    }
}

/// The connection target without the password, for messages.
fn describe(c: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match c.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let user = c.get_user().unwrap_or("");
    let db = c.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{host}:{port}/{db}")
}

/// A schema name must be a plain lowercase identifier: it is written into `search_path` and
/// `CREATE SCHEMA`, where a parameter cannot go.
fn check_identifier(name: &str) -> StoreResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::invalid(format!(
            "postgres schema {name:?} is not a plain identifier; use lowercase letters, digits \
             and _ (at most 63, not starting with a digit)"
        )))
    }
}

// The statements of the per-run path, built once (`prepare_cached` is keyed by the text, so
// building it per call was an allocation per run for nothing).
static GET_JOB: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"));
static GET_RUN: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"));
static CLAIM_JOBS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {JOB_COLUMNS} FROM jobs \
         WHERE enabled AND next_fire IS NOT NULL AND next_fire <= $1 AND id <> ALL($2) \
           AND (node_tag IS NULL OR node_tag = ANY($4)) \
         ORDER BY priority, next_fire, id LIMIT $3 FOR NO KEY UPDATE SKIP LOCKED"
    )
});
static FINISH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE runs SET state = $1, error = $2, result_json = $3, elapsed_ms = $4, \
           lease_expires_at = NULL, \
           attempt = attempt + CASE WHEN $5 THEN 1 ELSE 0 END, \
           next_attempt_at = $6, \
           finished_at = CASE WHEN $5 THEN finished_at ELSE $7 END, \
           plugin = $10, plugin_version = $11, plugin_sha256 = $12 \
         WHERE id = $8 AND state = 'running' AND attempt = $9 \
         RETURNING {RUN_COLUMNS}"
    )
});

/// A node row with its running runs (of any of its lives).
static NODE_SELECT: LazyLock<String> = LazyLock::new(|| {
    let columns = NODE_COLUMNS
        .split(", ")
        .map(|c| format!("n.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT {columns}, (SELECT count(*) FROM runs r WHERE r.node_id = n.id \
         AND r.state = 'running') FROM nodes n"
    )
});

fn node_of(r: &Row, shown: &str) -> StoreResult<NodeStatus> {
    let bad = read_err(shown, "a node row");
    let t = |i: usize| -> StoreResult<Option<i64>> {
        Ok(r.try_get::<_, Option<SystemTime>>(i)
            .map_err(&bad)?
            .map(ms_of))
    };
    NodeRow {
        id: r.try_get(0).map_err(&bad)?,
        instance: r.try_get(1).map_err(&bad)?,
        host_name: r.try_get(2).map_err(&bad)?,
        pid: r.try_get(3).map_err(&bad)?,
        version: r.try_get(4).map_err(&bad)?,
        capacity: i64::from(r.try_get::<_, i32>(5).map_err(&bad)?),
        tags: r.try_get(6).map_err(&bad)?,
        started_at: t(7)?,
        heartbeat_at: t(8)?,
        stopped_at: t(9)?,
    }
    .into_status(shown, r.try_get(10).map_err(&bad)?)
}

async fn node_row(
    c: &impl GenericClient,
    shown: &str,
    node: &NodeId,
) -> Result<Option<NodeStatus>, Fail> {
    let row = c
        .query_opt(&format!("{} WHERE n.id = $1", &*NODE_SELECT), &[&node.0])
        .await
        .map_err(|e| pg(shown, "reading a node", e))?;
    Ok(row.map(|r| node_of(&r, shown)).transpose()?)
}

async fn get_job(c: &impl GenericClient, shown: &str, id: JobId) -> Result<Option<JobDef>, Fail> {
    let stmt = c
        .prepare_cached(&GET_JOB)
        .await
        .map_err(|e| pg(shown, "reading a job", e))?;
    let row = c
        .query_opt(&stmt, &[&id.0])
        .await
        .map_err(|e| pg(shown, "reading a job", e))?;
    Ok(row.map(|r| job_of(&r, shown)).transpose()?)
}

async fn need_job(c: &impl GenericClient, shown: &str, id: JobId) -> Result<JobDef, Fail> {
    Ok(get_job(c, shown, id)
        .await?
        .ok_or_else(|| job_missing(id))?)
}

async fn get_run(c: &impl GenericClient, shown: &str, id: RunId) -> Result<Option<Run>, Fail> {
    let stmt = c
        .prepare_cached(&GET_RUN)
        .await
        .map_err(|e| pg(shown, "reading a run", e))?;
    let row = c
        .query_opt(&stmt, &[&id.0])
        .await
        .map_err(|e| pg(shown, "reading a run", e))?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

async fn need_run(c: &impl GenericClient, shown: &str, id: RunId) -> Result<Run, Fail> {
    Ok(get_run(c, shown, id)
        .await?
        .ok_or_else(|| run_missing(id))?)
}

/// Writes every mutable column of `run` if the stored run is still in `state` with `attempt`
/// (and sets its claim token); the stored run, or `None` when it is not.
async fn update_run_if(
    c: &impl GenericClient,
    shown: &str,
    run: &Run,
    id: RunId,
    (state, attempt): (RunState, u32),
    token: i64,
) -> Result<Option<Run>, Fail> {
    let sql = format!(
        "UPDATE runs SET state = $1, attempt = $2, created_at = $3, started_at = $4, \
         finished_at = $5, node_id = $6, lease_expires_at = $7, error = $8, result_json = $9, \
         elapsed_ms = $10, progress_done = $11, progress_total = $12, progress_message = $13, \
         skip_reason = $14, next_attempt_at = $15, node_instance = $16, claim_token = $17 \
         WHERE id = $18 AND state = $19 AND attempt = $20 RETURNING {RUN_COLUMNS}"
    );
    let mut params = run_params(RunRow::of(run)?)?;
    params.push(Box::new(token));
    params.push(Box::new(id.0));
    params.push(Box::new(state.name().to_string()));
    params.push(Box::new(i64::from(attempt) as i32));
    let stmt = c
        .prepare_cached(&sql)
        .await
        .map_err(|e| pg(shown, "updating a run", e))?;
    let row = c
        .query_opt(&stmt, &refs(&params))
        .await
        .map_err(|e| pg(shown, "updating a run", e))?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

async fn commit(tx: deadpool_postgres::Transaction<'_>, shown: &str) -> Result<(), Fail> {
    tx.commit().await.map_err(|e| {
        let mut f = pg(shown, "committing", e);
        if f.retry == Retry::Safe {
            // The COMMIT was sent: it may have been applied.
            f.retry = Retry::Unknown;
            f.error = StoreError::transient(format!(
                "the connection to {shown} failed while committing; the outcome is unknown \
                 ({})",
                f.error
            ));
        }
        f
    })
}

/// What one claim round picked, in claim order.
enum Pick {
    Fire(Box<JobDef>),
    Retry(RunId),
}

impl PgStore {
    async fn claim_once(
        &self,
        p: &ClaimParams,
        lease_until: Timestamp,
        token: i64,
    ) -> Result<Vec<ClaimedRun>, Fail> {
        let shown = &*self.shown;
        let mut client = self.client("claiming due runs").await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg(shown, "starting a claim", e))?;
        // The claim's token as a transaction lock: whoever must find out whether this claim
        // committed (its answer lost) waits for this lock first, so it looks only after the
        // transaction has ended, one way or the other (see `claimed_by`).
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&token])
            .await
            .map_err(|e| pg(shown, "starting a claim", e))?;
        let now = ts(p.now);
        let retries_sql = "SELECT r.id, j.priority, COALESCE(r.next_attempt_at, r.created_at) \
             FROM runs r JOIN jobs j ON j.id = r.job_id \
             WHERE r.state = 'pending' AND COALESCE(r.next_attempt_at, r.created_at) <= $1 \
               AND j.enabled AND (j.node_tag IS NULL OR j.node_tag = ANY($3)) \
               AND (r.next_attempt_at IS NOT NULL OR NOT EXISTS \
                    (SELECT 1 FROM runs x WHERE x.job_id = r.job_id AND x.state = 'running')) \
             ORDER BY j.priority, COALESCE(r.next_attempt_at, r.created_at), r.id LIMIT $2 \
             FOR NO KEY UPDATE OF r SKIP LOCKED";
        let jobs_stmt = tx
            .prepare_cached(&CLAIM_JOBS)
            .await
            .map_err(|e| pg(shown, "finding due jobs", e))?;
        let retries_stmt = tx
            .prepare_cached(retries_sql)
            .await
            .map_err(|e| pg(shown, "finding due retries", e))?;
        let mut claimed = Vec::new();
        let mut handled: Vec<i64> = Vec::new();
        while claimed.len() < p.limit {
            let need = p.limit - claimed.len();
            let limit = i64::try_from(need).unwrap_or(i64::MAX);
            let job_rows = tx
                .query(&jobs_stmt, &[&now, &handled, &limit, &p.tags])
                .await
                .map_err(|e| pg(shown, "finding due jobs", e))?;
            let retry_rows = tx
                .query(&retries_stmt, &[&now, &limit, &p.tags])
                .await
                .map_err(|e| pg(shown, "finding due retries", e))?;
            // Merge both in claim order: (priority, due time, id, fires before retries).
            let mut picks: Vec<((i64, i64, i64, bool), Pick)> = Vec::new();
            for r in &job_rows {
                let job = job_of(r, shown)?;
                let id = job.id.map_or(0, |i| i.0);
                let key = (
                    i64::from(job.priority.get()),
                    job.next_fire.map_or(0, Timestamp::as_millisecond),
                    id,
                    false,
                );
                picks.push((key, Pick::Fire(Box::new(job))));
            }
            for r in &retry_rows {
                let bad = read_err(shown, "a due retry");
                let id: i64 = r.try_get(0).map_err(&bad)?;
                let priority: i32 = r.try_get(1).map_err(&bad)?;
                let at: SystemTime = r.try_get(2).map_err(&bad)?;
                picks.push((
                    (i64::from(priority), ms_of(at), id, true),
                    Pick::Retry(RunId(id)),
                ));
            }
            if picks.is_empty() {
                break;
            }
            picks.sort_by_key(|(k, _)| *k);
            // Fewer candidates than room: this round saw everything due, so no second round
            // (two more statements per claim) is needed after it.
            let exhausted = picks.len() < need;
            picks.truncate(need);
            let mut fires = Vec::new();
            let mut retries = Vec::new();
            let mut batch = RunBatch::default();
            let (mut ids, mut olds, mut news) = (Vec::new(), Vec::new(), Vec::new());
            for (key, pick) in picks {
                match pick {
                    Pick::Retry(id) => retries.push((key, id)),
                    Pick::Fire(mut job) => {
                        let (Some(id), Some(fire)) = (job.id, job.next_fire) else {
                            continue;
                        };
                        handled.push(id.0);
                        let (next, skips) = match &job.schedule {
                            Some(s) => next_firing(s, fire),
                            None => (None, Vec::new()),
                        };
                        ids.push(id.0);
                        olds.push(ts(fire));
                        news.push(next.map(ts));
                        for (at, reason) in skips {
                            batch.push(&Run::skipped(id, at, reason, None, p.now), 0)?;
                        }
                        let run = p
                            .new_run(id, fire, lease_until, &job.retry)
                            .map_err(StoreError::from)?;
                        batch.push(&run, token)?;
                        job.next_fire = next;
                        fires.push((key, *job));
                    }
                }
            }
            if !ids.is_empty() {
                // The rows are locked by this transaction, so the condition on the old next
                // fire cannot fail; it stays as the statement of what must hold.
                let stmt = tx
                    .prepare_cached(
                        "UPDATE jobs SET next_fire = v.new FROM unnest($1::bigint[], \
                         $2::timestamptz[], $3::timestamptz[]) AS v(id, old, new) \
                         WHERE jobs.id = v.id AND jobs.next_fire = v.old",
                    )
                    .await
                    .map_err(|e| pg(shown, "advancing next fires", e))?;
                let n = tx
                    .execute(&stmt, &[&ids, &olds, &news])
                    .await
                    .map_err(|e| pg(shown, "advancing next fires", e))?;
                if n != ids.len() as u64 {
                    return Err(StoreError::conflict(
                        "a job's next fire moved while claiming it; claim again",
                    )
                    .into());
                }
            }
            let inserted = batch.insert(&tx, shown).await?;
            let mut round = Vec::new();
            for (key, job) in fires {
                let id = job.id.expect("claimed jobs have ids");
                if let Some(run) = inserted
                    .iter()
                    .find(|r| r.job_id == id && r.state == RunState::Running)
                {
                    round.push((
                        key,
                        ClaimedRun {
                            run: run.clone(),
                            job,
                        },
                    ));
                }
            }
            // Retries after the fires: a queued run must see the runs this round started.
            for (key, id) in retries {
                if let Some(c) = claim_retry(&tx, shown, id, p, lease_until, token).await? {
                    round.push((key, c));
                }
            }
            round.sort_by_key(|(k, _)| *k);
            claimed.extend(round.into_iter().map(|(_, c)| c));
            if exhausted {
                break;
            }
        }
        commit(tx, shown).await?;
        Ok(claimed)
    }

    /// After a claim's COMMIT failed with the outcome unknown: the runs it claimed if it
    /// committed (found by its token), none if it did not.
    async fn claimed_by(&self, p: &ClaimParams, token: i64) -> Result<Vec<ClaimedRun>, Fail> {
        let shown = &*self.shown;
        let client = self.client("checking a claim").await?;
        // The claim's transaction may still be running on the server (its COMMIT not yet
        // processed, or its backend not yet aware that the client is gone): wait until it has
        // ended, by taking its token's lock (each try is a statement of its own that releases
        // it again), at most `CLAIM_LOCK_WAIT`; then its outcome is final. Reading before that
        // could find nothing and claim again while the first claim then commits.
        let started = std::time::Instant::now();
        loop {
            let free: bool = client
                .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&token])
                .await
                .map_err(|e| pg(shown, "waiting for a claim to end", e))?
                .get(0);
            if free {
                break;
            }
            if started.elapsed() >= CLAIM_LOCK_WAIT {
                return Err(Fail {
                    error: StoreError::transient(format!(
                        "a claim on {shown} lost its connection while committing and its \
                         transaction has not ended after {}s; the outcome is unknown (a run it \
                         claimed is failed and retried by this node's lease renewal)",
                        CLAIM_LOCK_WAIT.as_secs()
                    )),
                    retry: Retry::No,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs \
                 WHERE node_id = $1 AND state = 'running' AND claim_token = $2 ORDER BY id"
            ))
            .await
            .map_err(|e| pg(shown, "checking a claim", e))?;
        let rows = client
            .query(&stmt, &[&p.node.0, &token])
            .await
            .map_err(|e| pg(shown, "checking a claim", e))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let run = run_of(r, shown)?;
            let job = need_job(&client, shown, run.job_id).await?;
            out.push(ClaimedRun { run, job });
        }
        Ok(out)
    }
}

/// Claims the due retry or queued run `id` inside the claim's transaction (its row is
/// locked by the claim's query).
async fn claim_retry(
    tx: &deadpool_postgres::Transaction<'_>,
    shown: &str,
    id: RunId,
    p: &ClaimParams,
    lease_until: Timestamp,
    token: i64,
) -> Result<Option<ClaimedRun>, Fail> {
    let mut run = need_run(tx, shown, id).await?;
    if run.state != RunState::Pending {
        return Ok(None);
    }
    if run.next_attempt_at.is_none() {
        // A queued run starts only once its job is idle. Its job's row lock serialises this
        // with another node claiming the job's fire (skip if that node holds it), and the
        // check sees a run this claim started earlier.
        let locked = tx
            .query_opt(
                "SELECT 1 FROM jobs WHERE id = $1 FOR NO KEY UPDATE SKIP LOCKED",
                &[&run.job_id.0],
            )
            .await
            .map_err(|e| pg(shown, "locking a queued run's job", e))?;
        let busy = tx
            .query_opt(
                "SELECT 1 FROM runs WHERE job_id = $1 AND state = 'running' LIMIT 1",
                &[&run.job_id.0],
            )
            .await
            .map_err(|e| pg(shown, "checking a queued run's job", e))?;
        if locked.is_none() || busy.is_some() {
            return Ok(None);
        }
    }
    let job = need_job(tx, shown, run.job_id).await?;
    let before = (run.state, run.attempt);
    p.claim(&mut run, lease_until, &job.retry)
        .map_err(StoreError::from)?;
    let Some(stored) = update_run_if(tx, shown, &run, id, before, token).await? else {
        return Err(StoreError::conflict(format!(
            "run {id} changed while claiming its retry; claim again"
        ))
        .into());
    };
    Ok(Some(ClaimedRun { run: stored, job }))
}

impl PgStore {
    async fn job_insert_once(&self, job: &JobDef, now: Timestamp) -> Result<JobDef, Fail> {
        let shown = &*self.shown;
        let client = self.client("inserting a job").await?;
        let mut row = JobRow::of(job, now)?;
        row.version = 1;
        let params = job_params(row)?;
        let columns = JOB_COLUMNS.trim_start_matches("id, ");
        let marks = (1..=params.len())
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let r = client
            .query_opt(
                &format!(
                    "INSERT INTO jobs ({columns}) VALUES ({marks}) \
                     ON CONFLICT (name) DO NOTHING RETURNING {JOB_COLUMNS}"
                ),
                &refs(&params),
            )
            .await
            .map_err(|e| pg(shown, &format!("inserting job {}", job.name), e))?;
        match r {
            Some(r) => {
                self.wake_others(&client).await;
                Ok(job_of(&r, shown)?)
            }
            None => Err(name_taken(&job.name).into()),
        }
    }

    async fn job_update_once(
        &self,
        job: &JobDef,
        id: JobId,
        now: Timestamp,
    ) -> Result<JobDef, Fail> {
        let shown = &*self.shown;
        let client = self.client("updating a job").await?;
        let expected = to_i64(job.version, "job version")?;
        let mut row = JobRow::of(job, now)?;
        row.version = expected + 1;
        let mut params = job_params(row)?;
        let n = params.len();
        let sets = JOB_COLUMNS
            .split(", ")
            .skip(1)
            .enumerate()
            .map(|(i, c)| format!("{c} = ${}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        params.push(Box::new(id.0));
        params.push(Box::new(expected));
        let r = client
            .query_opt(
                &format!(
                    "UPDATE jobs SET {sets} WHERE id = ${} AND version = ${} \
                     RETURNING {JOB_COLUMNS}",
                    n + 1,
                    n + 2
                ),
                &refs(&params),
            )
            .await
            .map_err(|e| {
                let f = pg(shown, &format!("updating job {}", job.name), e);
                if f.error.kind() == StoreErrorKind::Conflict {
                    name_taken(&job.name).into()
                } else {
                    f
                }
            })?;
        if let Some(r) = r {
            self.wake_others(&client).await;
            return Ok(job_of(&r, shown)?);
        }
        let current = client
            .query_opt("SELECT name, version FROM jobs WHERE id = $1", &[&id.0])
            .await
            .map_err(|e| pg(shown, "reading a job", e))?;
        Err(match current {
            None => job_missing(id),
            Some(r) => {
                let name: String = r.get(0);
                let version: i64 = r.get(1);
                StoreError::conflict(format!(
                    "job {name} was changed by someone else (stored version {version}, yours \
                     {}); reload it and apply your change again",
                    job.version
                ))
            }
        }
        .into())
    }

    async fn finish_once(
        &self,
        id: RunId,
        expected_attempt: u32,
        finish: &RunFinish,
        resolving: bool,
    ) -> Result<Run, Fail> {
        let shown = &*self.shown;
        let client = self.client("finishing a run").await?;
        if resolving {
            // The earlier try may have committed before its connection failed.
            let run = need_run(&client, shown, id).await?;
            if finished_as(&run, expected_attempt, finish) {
                return Ok(run);
            }
        }
        // One statement, committed on its own, that writes what `apply_finish` computes
        // (the shared rule: a finish in `pending` is a retry, attempt + 1) without reading
        // the run first; its condition is the compare-and-set. Only a refusal reads the run,
        // to say why.
        let retry = finish.state == RunState::Pending;
        let stmt = client
            .prepare_cached(&FINISH)
            .await
            .map_err(|e| pg(shown, "finishing a run", e))?;
        let elapsed = finish
            .elapsed
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let attempt = i32::try_from(expected_attempt).unwrap_or(i32::MAX);
        let plugin = finish.plugin.as_ref();
        let row = client
            .query_opt(
                &stmt,
                &[
                    &finish.state.name(),
                    &finish.error,
                    &finish.result_json,
                    &elapsed,
                    &retry,
                    &finish.retry_at.filter(|_| retry).map(ts),
                    &ts(finish.finished_at),
                    &id.0,
                    &attempt,
                    &plugin.map(|p| p.name.as_str()),
                    &plugin.map(|p| p.version.as_str()),
                    &plugin.and_then(|p| p.sha256.as_deref()),
                ],
            )
            .await
            .map_err(|e| {
                let mut f = pg(shown, "finishing a run", e);
                if f.retry == Retry::Safe {
                    // The statement may have been applied before the connection failed.
                    f.retry = Retry::Unknown;
                }
                f
            })?;
        match row {
            Some(r) => {
                let stored = run_of(&r, shown)?;
                if retry {
                    // A retry is waiting: a node with free capacity may take it.
                    self.wake_others(&client).await;
                }
                Ok(stored)
            }
            None => {
                // Refused: say why, as the reference store does.
                let mut run = need_run(&client, shown, id).await?;
                apply_finish(&mut run, id, expected_attempt, finish)?;
                Err(
                    StoreError::conflict(format!("run {id} changed while finishing it; reload it"))
                        .into(),
                )
            }
        }
    }
}

/// Whether `run` already holds `finish` of attempt `expected` (a finish whose commit was
/// reported lost).
fn finished_as(run: &Run, expected: u32, finish: &RunFinish) -> bool {
    let attempt = if finish.state == RunState::Pending {
        expected + 1
    } else {
        expected
    };
    run.state == finish.state
        && run.attempt == attempt
        && run.error == finish.error
        && run.result_json == finish.result_json
}

fn unsigned(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Store for PgStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        job.validate()?;
        self.retrying("inserting a job", || self.job_insert_once(job, now))
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
        self.retrying("updating a job", || self.job_update_once(job, id, now))
            .await
    }

    async fn job_get(&self, id: JobId) -> StoreResult<Option<JobDef>> {
        self.retrying("reading a job", || async {
            let client = self.client("reading a job").await?;
            get_job(&client, &self.shown, id).await
        })
        .await
    }

    async fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>> {
        self.retrying("reading a job", || async {
            let client = self.client("reading a job").await?;
            let stmt = client
                .prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE name = $1"))
                .await
                .map_err(|e| pg(&self.shown, "reading a job", e))?;
            let row = client
                .query_opt(&stmt, &[&name.as_str()])
                .await
                .map_err(|e| pg(&self.shown, "reading a job", e))?;
            Ok(row.map(|r| job_of(&r, &self.shown)).transpose()?)
        })
        .await
    }

    async fn job_list(&self) -> StoreResult<Vec<JobDef>> {
        self.retrying("listing jobs", || async {
            let client = self.client("listing jobs").await?;
            let rows = client
                .query(&format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY id"), &[])
                .await
                .map_err(|e| pg(&self.shown, "listing jobs", e))?;
            Ok(rows
                .iter()
                .map(|r| job_of(r, &self.shown))
                .collect::<StoreResult<_>>()?)
        })
        .await
    }

    async fn job_delete(&self, id: JobId) -> StoreResult<()> {
        self.retrying("deleting a job", || async {
            let client = self.client("deleting a job").await?;
            let n = client
                .execute("DELETE FROM jobs WHERE id = $1", &[&id.0])
                .await
                .map_err(|e| pg(&self.shown, "deleting a job", e))?;
            if n == 0 {
                return Err(job_missing(id).into());
            }
            Ok(())
        })
        .await
    }

    async fn job_set_enabled(
        &self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> StoreResult<JobDef> {
        self.retrying("enabling or disabling a job", || async {
            let client = self.client("enabling or disabling a job").await?;
            let row = client
                .query_opt(
                    &format!(
                        "UPDATE jobs SET enabled = $1, version = version + 1, updated_at = $2 \
                         WHERE id = $3 RETURNING {JOB_COLUMNS}"
                    ),
                    &[&enabled, &ts(now), &id.0],
                )
                .await
                .map_err(|e| pg(&self.shown, "enabling or disabling a job", e))?;
            match row {
                Some(r) => {
                    if enabled {
                        self.wake_others(&client).await;
                    }
                    Ok(job_of(&r, &self.shown)?)
                }
                None => Err(job_missing(id).into()),
            }
        })
        .await
    }

    async fn job_set_next_fire(
        &self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> StoreResult<()> {
        self.retrying("setting a job's next fire", || async {
            let shown = &*self.shown;
            let client = self.client("setting a job's next fire").await?;
            let n = client
                .execute(
                    "UPDATE jobs SET next_fire = $1 WHERE id = $2 \
                     AND next_fire IS NOT DISTINCT FROM $3",
                    &[&new.map(ts), &id.0, &expected.map(ts)],
                )
                .await
                .map_err(|e| pg(shown, "setting a job's next fire", e))?;
            if n == 0 {
                let job = need_job(&client, shown, id).await?;
                return Err(StoreError::conflict(format!(
                    "job {} next fire is {}, not {}; another node moved it first: reload the job",
                    job.name,
                    show(job.next_fire),
                    show(expected)
                ))
                .into());
            }
            self.wake_others(&client).await;
            Ok(())
        })
        .await
    }

    async fn job_due(
        &self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> StoreResult<Vec<DueJob>> {
        self.retrying("finding due jobs", || async {
            let shown = &*self.shown;
            let client = self.client("finding due jobs").await?;
            let stmt = client
                .prepare_cached(
                    "SELECT id, name, next_fire, misfire, overlap, \
                       (SELECT COUNT(*) FROM runs r WHERE r.job_id = jobs.id AND r.state = 'running'), \
                       (SELECT COUNT(*) FROM runs r WHERE r.job_id = jobs.id AND r.state = 'pending') \
                     FROM jobs WHERE enabled AND next_fire IS NOT NULL AND next_fire <= $1 \
                       AND (node_tag IS NULL OR node_tag = ANY($3)) \
                     ORDER BY priority, next_fire, id LIMIT $2",
                )
                .await
                .map_err(|e| pg(shown, "finding due jobs", e))?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = client
                .query(&stmt, &[&ts(now), &limit, &tags])
                .await
                .map_err(|e| pg(shown, "finding due jobs", e))?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let read = read_err(shown, "a due job");
                let id: i64 = r.try_get(0).map_err(&read)?;
                let row = format!("job {id}");
                let bad = |column: &str, detail: &dyn std::fmt::Display| {
                    corrupt(shown, &row, column, detail)
                };
                let name: String = r.try_get(1).map_err(&read)?;
                let next_fire: SystemTime = r.try_get(2).map_err(&read)?;
                let misfire: String = r.try_get(3).map_err(&read)?;
                let overlap: String = r.try_get(4).map_err(&read)?;
                out.push(DueJob {
                    id: JobId(id),
                    name: JobName::new(&name).map_err(|e| bad("name", &e))?,
                    next_fire: Timestamp::try_from(next_fire)
                        .map_err(|e| bad("next_fire", &e))?,
                    misfire: misfire
                        .parse::<MisfirePolicy>()
                        .map_err(|e| bad("misfire", &e))?,
                    overlap: overlap
                        .parse::<OverlapPolicy>()
                        .map_err(|e| bad("overlap", &e))?,
                    running: unsigned(r.try_get(5).map_err(&read)?),
                    pending: unsigned(r.try_get(6).map_err(&read)?),
                });
            }
            Ok(out)
        })
        .await
    }

    async fn next_due(&self, tags: &[String]) -> StoreResult<Option<Timestamp>> {
        self.retrying("finding the next due time", || async {
            let shown = &*self.shown;
            let client = self.client("finding the next due time").await?;
            let stmt = client
                .prepare_cached(
                    "SELECT LEAST( \
                       (SELECT MIN(next_fire) FROM jobs WHERE enabled AND next_fire IS NOT NULL \
                          AND (node_tag IS NULL OR node_tag = ANY($1))), \
                       (SELECT MIN(r.next_attempt_at) FROM runs r JOIN jobs j ON j.id = r.job_id \
                        WHERE r.state = 'pending' AND r.next_attempt_at IS NOT NULL AND j.enabled \
                          AND (j.node_tag IS NULL OR j.node_tag = ANY($1))), \
                       (SELECT MIN(r.created_at) FROM runs r JOIN jobs j ON j.id = r.job_id \
                        WHERE r.state = 'pending' AND r.next_attempt_at IS NULL AND j.enabled \
                          AND (j.node_tag IS NULL OR j.node_tag = ANY($1)) \
                          AND NOT EXISTS (SELECT 1 FROM runs x \
                                          WHERE x.job_id = r.job_id AND x.state = 'running')))",
                )
                .await
                .map_err(|e| pg(shown, "finding the next due time", e))?;
            let at: Option<SystemTime> = client
                .query_one(&stmt, &[&tags])
                .await
                .map_err(|e| pg(shown, "finding the next due time", e))?
                .try_get(0)
                .map_err(read_err(shown, "the next due time"))?;
            Ok(at
                .map(|t| {
                    Timestamp::try_from(t)
                        .map_err(|e| corrupt(shown, "the next due time", "next_fire", e))
                })
                .transpose()?)
        })
        .await
    }

    async fn run_claim_due(&self, p: &ClaimParams) -> StoreResult<Vec<ClaimedRun>> {
        let lease_until = add(p.now, p.lease, "run lease")?;
        let mut pauses = RETRY_PAUSES_MS.iter();
        loop {
            let token = claim_token();
            let f = match self.claim_once(p, lease_until, token).await {
                Ok(claimed) => return Ok(claimed),
                Err(f) => f,
            };
            match f.retry {
                Retry::No => return Err(f.error),
                Retry::Safe => {}
                Retry::Unknown => {
                    self.unknown_commits.fetch_add(1, Ordering::Relaxed);
                    // Whatever this claim committed is found by its token; if nothing was,
                    // claiming again is safe.
                    let found = self
                        .retrying("checking a claim", || self.claimed_by(p, token))
                        .await
                        .map_err(|e| {
                            StoreError::transient(format!(
                                "claiming due runs on {}: the outcome of a claim is unknown \
                                 ({e}); a run it may have claimed is failed and retried by \
                                 this node's next lease renewal",
                                self.shown
                            ))
                        })?;
                    if !found.is_empty() {
                        return Ok(found);
                    }
                }
            }
            let Some(ms) = pauses.next() else {
                return Err(f.error);
            };
            tracing::debug!("claiming due runs: {}; retrying in {ms} ms", f.error);
            tokio::time::sleep(Duration::from_millis(*ms)).await;
        }
    }

    async fn run_insert_skipped(&self, run: &Run) -> StoreResult<Run> {
        check_skipped(run)?;
        self.retrying("recording a skipped run", || self.insert_keyed(run))
            .await
    }

    async fn run_enqueue(&self, job: JobId, fire: Timestamp, now: Timestamp) -> StoreResult<Run> {
        let run = Run::pending(job, fire, now);
        self.retrying("queueing a run", || self.insert_keyed(&run))
            .await
    }

    async fn run_set_state_if_running(
        &self,
        id: RunId,
        expected_attempt: u32,
        finish: &RunFinish,
    ) -> StoreResult<Run> {
        finish.validate()?;
        retry::retrying_resolving(|resolving| {
            self.finish_once(id, expected_attempt, finish, resolving)
        })
        .await
    }

    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        self.retrying("reading a run", || async {
            let client = self.client("reading a run").await?;
            get_run(&client, &self.shown, id).await
        })
        .await
    }

    async fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        self.retrying("listing runs", || async {
            let shown = &*self.shown;
            let client = self.client("listing runs").await?;
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM runs \
                     WHERE ($1::bigint IS NULL OR job_id = $1) AND ($2::text IS NULL OR state = $2) \
                     ORDER BY fire_time DESC, id DESC LIMIT $3"
                ))
                .await
                .map_err(|e| pg(shown, "listing runs", e))?;
            let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
            let rows = client
                .query(
                    &stmt,
                    &[&filter.job.map(|j| j.0), &filter.state.map(|s| s.name()), &limit],
                )
                .await
                .map_err(|e| pg(shown, "listing runs", e))?;
            Ok(rows
                .iter()
                .map(|r| run_of(r, shown))
                .collect::<StoreResult<_>>()?)
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
        // One statement, so one round trip and atomic: the heartbeat, and the leases only if
        // the heartbeat found this life registered. Idempotent: renewing twice extends to the
        // same instant.
        let (beat, renewed) = self
            .retrying("renewing leases", || async {
                let client = self.client("renewing leases").await?;
                let row = client
                    .query_one(
                        "WITH beat AS (UPDATE nodes SET heartbeat_at = $3 \
                           WHERE id = $1 AND instance = $2 RETURNING 1), \
                         renewed AS (UPDATE runs SET lease_expires_at = $4 \
                           WHERE node_id = $1 AND node_instance = $2 AND state = 'running' \
                           AND lease_expires_at > $3 AND EXISTS (SELECT 1 FROM beat) \
                           RETURNING id) \
                         SELECT (SELECT count(*) FROM beat), \
                                ARRAY(SELECT id FROM renewed ORDER BY id)",
                        &[&node.0, &instance.0, &ts(now), &ts(until)],
                    )
                    .await
                    .map_err(|e| pg(&self.shown, "renewing leases", e))?;
                let beat: i64 = row.get(0);
                let ids: Vec<i64> = row.get(1);
                Ok((beat, ids))
            })
            .await?;
        if beat == 0 {
            let holder = self
                .retrying("reading a node", || async {
                    let client = self.client("reading a node").await?;
                    node_row(&client, &self.shown, node).await
                })
                .await?;
            return Err(not_registered(node, instance, holder.as_ref()));
        }
        Ok(renewed.into_iter().map(RunId).collect())
    }

    async fn run_recover_expired(
        &self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> StoreResult<Vec<Run>> {
        self.retrying("recovering expired leases", || {
            self.recover_once(now, restart)
        })
        .await
    }

    async fn node_register(&self, reg: &Registration) -> StoreResult<Registered> {
        // Registering one life again is idempotent (the rule lets an instance follow
        // itself), so a COMMIT whose answer was lost is simply tried again.
        self.retrying("registering the node", || async {
            self.register_once(reg).await.map_err(retry::idempotent)
        })
        .await
    }

    async fn node_stopped(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        now: Timestamp,
    ) -> StoreResult<()> {
        self.retrying("recording a node stop", || async {
            let client = self.client("recording a node stop").await?;
            client
                .execute(
                    "UPDATE nodes SET stopped_at = $3 WHERE id = $1 AND instance = $2",
                    &[&node.0, &instance.0, &ts(now)],
                )
                .await
                .map_err(|e| pg(&self.shown, "recording a node stop", e))?;
            Ok(())
        })
        .await
    }

    async fn node_list(&self) -> StoreResult<Vec<NodeStatus>> {
        self.retrying("listing nodes", || async {
            let shown = &*self.shown;
            let client = self.client("listing nodes").await?;
            let rows = client
                .query(&format!("{} ORDER BY n.id", &*NODE_SELECT), &[])
                .await
                .map_err(|e| pg(shown, "listing nodes", e))?;
            Ok(rows
                .iter()
                .map(|r| node_of(r, shown))
                .collect::<StoreResult<Vec<_>>>()?)
        })
        .await
    }

    async fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()> {
        let done = to_i64(progress.done, "progress done")?;
        let total = to_i64(progress.total, "progress total")?;
        self.retrying("recording progress", || async {
            let shown = &*self.shown;
            let client = self.client("recording progress").await?;
            let n = client
                .execute(
                    "UPDATE runs SET progress_done = $1, progress_total = $2, \
                     progress_message = $3 WHERE id = $4 AND state = 'running'",
                    &[&done, &total, &progress.message, &id.0],
                )
                .await
                .map_err(|e| pg(shown, "recording progress", e))?;
            if n == 0 {
                let run = need_run(&client, shown, id).await?;
                return Err(StoreError::conflict(format!(
                    "run {id} is {}, not running; progress is recorded only while it runs",
                    run.state
                ))
                .into());
            }
            Ok(())
        })
        .await
    }

    async fn log_append(&self, run: RunId, lines: &[LogLine]) -> StoreResult<()> {
        let at: Vec<SystemTime> = lines.iter().map(|l| ts(l.at)).collect();
        let level: Vec<&str> = lines.iter().map(|l| l.level.name()).collect();
        let message: Vec<&str> = lines.iter().map(|l| l.message.as_str()).collect();
        // Not retried after an unknown commit: a line written twice is better than a line
        // lost, but neither should be silent, so the error reaches the forwarder.
        self.retrying("appending log lines", || async {
            let shown = &*self.shown;
            let client = self.client("appending log lines").await?;
            // One statement: the lines go in together or not at all, in order (seq follows
            // the array order); a missing run inserts nothing and is reported.
            let stmt = client
                .prepare_cached(
                    "WITH r AS (SELECT id FROM runs WHERE id = $1) \
                     INSERT INTO run_logs (run_id, at, level, message) \
                     SELECT r.id, l.at, l.level, l.message FROM r, \
                       unnest($2::timestamptz[], $3::text[], $4::text[]) \
                       WITH ORDINALITY AS l(at, level, message, n) ORDER BY l.n",
                )
                .await
                .map_err(|e| pg(shown, "appending log lines", e))?;
            let n = client
                .execute(&stmt, &[&run.0, &at, &level, &message])
                .await
                .map_err(|e| pg(shown, "appending log lines", e))?;
            if n == 0 && get_run(&client, shown, run).await?.is_none() {
                return Err(run_missing(run).into());
            }
            Ok(())
        })
        .await
    }

    async fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<(u64, LogLine)>> {
        self.retrying("reading a run log", || async {
            let shown = &*self.shown;
            let client = self.client("reading a run log").await?;
            let after = i64::try_from(after.unwrap_or(0)).unwrap_or(i64::MAX);
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = client
                .query(
                    "SELECT seq, at, level, message FROM run_logs \
                     WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                    &[&run.0, &after, &limit],
                )
                .await
                .map_err(|e| pg(shown, "reading a run log", e))?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let read = read_err(shown, "a log line");
                let seq: i64 = r.try_get(0).map_err(&read)?;
                let at: SystemTime = r.try_get(1).map_err(&read)?;
                let level: String = r.try_get(2).map_err(&read)?;
                let row = format!("log line {seq}");
                out.push((
                    u64::try_from(seq).map_err(|_| corrupt(shown, &row, "seq", seq))?,
                    LogLine {
                        at: Timestamp::from_millisecond(ms_of(at))
                            .map_err(|e| corrupt(shown, &row, "at", e))?,
                        level: LogLevel::from_name(&level)
                            .ok_or_else(|| corrupt(shown, &row, "level", &level))?,
                        message: r.try_get(3).map_err(&read)?,
                    },
                ));
            }
            Ok(out)
        })
        .await
    }

    async fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
        self.retrying("purging old runs", || async {
            let shown = &*self.shown;
            let mut client = self.client("purging old runs").await?;
            let tx = client
                .transaction()
                .await
                .map_err(|e| pg(shown, "starting a purge", e))?;
            const OLD: &str = "SELECT id FROM runs WHERE state NOT IN ('pending', 'running') \
                               AND finished_at IS NOT NULL AND finished_at < $1";
            let cut = ts(older_than);
            let log_lines: i64 = tx
                .query_one(
                    &format!("SELECT COUNT(*) FROM run_logs WHERE run_id IN ({OLD})"),
                    &[&cut],
                )
                .await
                .map_err(|e| pg(shown, "counting old log lines", e))?
                .get(0);
            let runs = tx
                .execute(&format!("DELETE FROM runs WHERE id IN ({OLD})"), &[&cut])
                .await
                .map_err(|e| pg(shown, "purging old runs", e))?;
            commit(tx, shown).await?;
            Ok(PurgeCounts {
                runs,
                log_lines: u64::try_from(log_lines).unwrap_or(0),
            })
        })
        .await
    }
}

impl PgStore {
    /// One try of [`Store::node_register`]: the node's row locked, the rule applied, the row
    /// replaced. A first registration of an id that races another inserts with `ON CONFLICT
    /// DO NOTHING` and, losing, tries again (it then finds the winner's row to judge).
    async fn register_once(&self, reg: &Registration) -> Result<Registered, Fail> {
        let shown = &*self.shown;
        let mut client = self.client("registering the node").await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg(shown, "starting a registration", e))?;
        let current = match tx
            .query_opt(
                &format!("{} WHERE n.id = $1 FOR UPDATE OF n", &*NODE_SELECT),
                &[&reg.node.id.0],
            )
            .await
            .map_err(|e| pg(shown, "reading the node", e))?
        {
            Some(r) => Some(node_of(&r, shown)?),
            None => None,
        };
        let verdict = registration(current.as_ref(), reg);
        if let Registered::Yes { .. } = verdict {
            let r = NodeRow::of(&reg.node, reg.now);
            let capacity = i32::try_from(r.capacity).unwrap_or(i32::MAX);
            let values: [&(dyn ToSql + Sync); 8] = [
                &r.id,
                &r.instance,
                &r.host_name,
                &r.pid,
                &r.version,
                &capacity,
                &r.tags,
                &ts(reg.now),
            ];
            let n = if current.is_some() {
                tx.execute(
                    "UPDATE nodes SET instance = $2, host_name = $3, pid = $4, version = $5, \
                     capacity = $6, tags = $7, started_at = $8, heartbeat_at = $8, \
                     stopped_at = NULL WHERE id = $1",
                    &values,
                )
                .await
            } else {
                tx.execute(
                    "INSERT INTO nodes (id, instance, host_name, pid, version, capacity, tags, \
                     started_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) \
                     ON CONFLICT (id) DO NOTHING",
                    &values,
                )
                .await
            }
            .map_err(|e| pg(shown, "registering the node", e))?;
            if n == 0 {
                return Err(Fail::transient(format!(
                    "node {} was registered by another process at the same moment; \
                     registering again",
                    reg.node.id
                )));
            }
        }
        commit(tx, shown).await?;
        Ok(verdict)
    }

    /// Inserts a run under its (job, fire time) key on its own: a taken key is a Conflict
    /// naming the run that holds it.
    async fn insert_keyed(&self, run: &Run) -> Result<Run, Fail> {
        let shown = &*self.shown;
        let client = self.client("inserting a run").await?;
        need_job(&client, shown, run.job_id).await?;
        let mut batch = RunBatch::default();
        batch.push(run, 0)?;
        if let Some(stored) = batch.insert(&client, shown).await?.pop() {
            if stored.state == RunState::Pending {
                self.wake_others(&client).await;
            }
            return Ok(stored);
        }
        let other: Option<i64> = client
            .query_opt(
                "SELECT id FROM runs WHERE job_id = $1 AND fire_time = $2",
                &[&run.job_id.0, &ts(run.fire_time)],
            )
            .await
            .map_err(|e| pg(shown, "reading a run", e))?
            .map(|r| r.get(0));
        Err(match other {
            Some(other) => fire_taken(run.job_id, run.fire_time, RunId(other)),
            // The job was deleted between the check and the insert.
            None => job_missing(run.job_id),
        }
        .into())
    }

    async fn recover_once(
        &self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> Result<Vec<Run>, Fail> {
        let shown = &*self.shown;
        let mut client = self.client("recovering expired leases").await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg(shown, "starting a recovery", e))?;
        // Locked and skipped like claims: two nodes recovering at once split the runs.
        let rows = tx
            .query(
                "SELECT id FROM runs WHERE state = 'running' \
                 AND (($1::text IS NOT NULL AND node_id = $1 \
                       AND node_instance IS DISTINCT FROM $2::text) \
                      OR lease_expires_at IS NULL OR lease_expires_at <= $3) \
                 ORDER BY id FOR NO KEY UPDATE SKIP LOCKED",
                &[
                    &restart.map(|(n, _)| n.0.as_str()),
                    &restart.map(|(_, i)| i.0.as_str()),
                    &ts(now),
                ],
            )
            .await
            .map_err(|e| pg(shown, "finding expired leases", e))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let id = RunId(r.get(0));
            let mut run = need_run(&tx, shown, id).await?;
            let Some(event) = recovery_event(&run, now, restart) else {
                continue;
            };
            let retry = need_job(&tx, shown, run.job_id).await?.retry;
            let attempt = run.attempt;
            run.apply(event, now, &retry).map_err(StoreError::from)?;
            let Some(stored) =
                update_run_if(&tx, shown, &run, id, (RunState::Running, attempt), 0).await?
            else {
                return Err(StoreError::conflict(format!(
                    "run {id} changed while recovering it; recover again"
                ))
                .into());
            };
            out.push(stored);
        }
        commit(tx, shown).await?;
        if !out.is_empty() {
            // Recovered runs may be retried at once, by any node.
            self.wake_others(&client).await;
        }
        Ok(out)
    }
}
