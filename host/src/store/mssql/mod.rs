//! [`MssqlStore`]: the core's [`Store`] contract on SQL Server (2017 or newer, Azure SQL), for
//! several host nodes on one database — where the seeds' `T_Task_*` tables already live.
//!
//! The schema is `sql/mssql/` ([`mod@migrate`]); the row forms and their parsing are shared
//! with the other SQL stores (`rows.rs`), and the semantics mirror the PostgreSQL store method
//! by method (the core's conformance suite checks that they agree).
//!
//! **Claiming** is one transaction: due jobs are read in claim order with
//! `WITH (UPDLOCK, READPAST, ROWLOCK)` (a job another node is claiming is passed over, not
//! waited for), each job's next fire advances conditionally on the old one, and its run is
//! inserted under the unique (job_id, fire_time) index with `OUTPUT INSERTED.*`, guarded by
//! `NOT EXISTS … WITH (UPDLOCK, HOLDLOCK)` so that a taken key inserts nothing instead of
//! failing. The unique index, not the lock, is what makes a fire run once: a duplicate that got
//! past the guard fails with error 2601 and the whole claim is rolled back and retried.
//!
//! Joins are written `FROM runs r, jobs j WHERE j.id = r.job_id`: the same inner join to SQL
//! Server, and the only form the emulator answers (its `JOIN … ON` returns no rows).
//!
//! **Transient errors** (a lost connection, a deadlock victim (1205), a lock timeout, Azure's
//! "database moving" errors) are retried with backoff inside the store when nothing was
//! committed. A COMMIT whose answer was lost leaves the outcome unknown; the claim resolves it
//! with the random claim token it wrote into its runs (found: returned as claimed; not found:
//! claimed again), a finish by reading the run back.
//!
//! **Connections** are tiberius clients in a small pool of our own (`conn.rs`), configured by
//! an ADO.NET connection string (`Server=host,1433;Database=…;User Id=…;Password=…;
//! TrustServerCertificate=True`), TLS through rustls as the string asks: `Encrypt=True` requires
//! TLS for everything, `Encrypt=False` (and the driver's default) encrypts only the login when
//! the server offers TLS. Every
//! connection sets `XACT_ABORT ON` (an error anywhere rolls the whole transaction back) and the
//! ANSI options that writes to tables with filtered indexes require.
//!
//! **The emulator.** Development machines without SQL Server test against `iridium-server`, a
//! TDS server with a subset of T-SQL. The store recognises it by `@@VERSION` and then (and only
//! then) uses the fallbacks in `dialect.rs`; it declares that concurrent claims cannot be
//! proven there ([`Capabilities::concurrent_claims`] false), since the emulator enforces no
//! composite unique index and its READPAST skips nothing.

mod conn;
mod dialect;
pub mod migrate;

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

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
use tiberius::{Config, Row};

use self::conn::{Cells, Fail, Params, Pool, Pooled, Retry, text};
use super::migrate::{AppliedMigration, MigrationObserver};
use super::retry::{self, RETRY_PAUSES_MS};
use super::rows::{
    JOB_COLUMNS, JobRow, NODE_COLUMNS, NodeRow, RUN_COLUMNS, RunRow, corrupt, to_i64,
};
pub use migrate::{MSSQL_MIGRATIONS, mssql_latest_version};

/// How a [`MssqlStore`] connects.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MssqlOptions {
    /// An ADO.NET connection string: `Server=host,1433;Database=mes;User Id=takt;
    /// Password=…;TrustServerCertificate=True` (`Encrypt=False` for a server without TLS).
    pub connection_string: String,
    /// Use this database instead of the string's `Database=` (tests use a fresh one each).
    pub database: Option<String>,
    /// The most connections the pool opens. Default 8.
    pub pool_size: usize,
    /// How long opening a connection, or waiting for a free one, may take before the call fails
    /// as transient. Default 5 s.
    pub connect_timeout: Duration,
    /// Told what the migrations applied at connect are doing (none by default).
    pub on_migration: Option<MigrationObserver>,
    /// Apply the migrations the database lacks (the default: a host and `takt db migrate`).
    /// `false` connects only to an existing takt database at this binary's version and
    /// refuses anything else, changing nothing: what read-only commands use.
    pub migrate: bool,
}

impl MssqlOptions {
    /// Options for `connection_string` with the defaults.
    pub fn new(connection_string: impl Into<String>) -> MssqlOptions {
        MssqlOptions {
            connection_string: connection_string.into(),
            database: None,
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            on_migration: None,
            migrate: true,
        }
    }

    /// The same options on another database of the same server.
    pub fn with_database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
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

/// A [`Store`] on a SQL Server database; cheap to clone (clones share one pool). Two
/// [`MssqlStore::connect`] calls are two pools, like two nodes.
#[derive(Clone)]
pub struct MssqlStore {
    pool: Pool,
    shown: Arc<str>,
    /// The peer is the iridium emulator (see the module docs).
    emulator: bool,
    unknown_commits: Arc<AtomicU64>,
}

impl std::fmt::Debug for MssqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MssqlStore")
            .field("database", &self.shown)
            .field("emulator", &self.emulator)
            .finish_non_exhaustive()
    }
}

/// Parses an ADO.NET connection string (what tiberius accepts, with a precise error).
pub fn parse_connection_string(s: &str) -> StoreResult<Config> {
    Config::from_ado_string(s).map_err(|e| {
        let e = e.to_string().replace(s, "…");
        StoreError::invalid(format!(
            "the sql server connection string is not valid ({e}); write it as \
             Server=host,1433;Database=mes;User Id=takt;Password=…;TrustServerCertificate=True"
        ))
    })
}

/// The connection target without the password, for messages:
/// `mssql://user@host:port/database`.
pub fn describe(s: &str, database: Option<&str>) -> String {
    let mut host = String::from("localhost");
    let mut user = String::new();
    let mut db = String::new();
    for part in s.split(';') {
        let Some((k, v)) = part.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
        match k.trim().to_ascii_lowercase().replace(' ', "").as_str() {
            "server" | "datasource" | "address" | "addr" | "networkaddress" => {
                host = v.trim_start_matches("tcp:").replace(',', ":");
            }
            "userid" | "uid" | "user" => user = v,
            "database" | "initialcatalog" => db = v,
            _ => {}
        }
    }
    if let Some(d) = database {
        db = d.to_string();
    }
    let at = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    format!("mssql://{at}{host}/{db}")
}

/// Session settings of every connection: an error rolls the whole transaction back, and the
/// ANSI options that DML on tables with filtered indexes requires (error 1934 otherwise).
const SESSION: &str = "SET XACT_ABORT ON; SET ANSI_NULLS ON; SET ANSI_PADDING ON; \
     SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON; \
     SET QUOTED_IDENTIFIER ON; SET NUMERIC_ROUNDABORT OFF";

/// `cols` prefixed for an `OUTPUT` clause (`INSERTED.id, INSERTED.name, …`).
fn inserted(cols: &str) -> String {
    cols.split(", ")
        .map(|c| format!("INSERTED.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The node-tag filter on a job column (`node_tag IS NULL OR node_tag IN (…)`).
fn tag_filter(p: &mut Params, column: &str, tags: &[String]) -> String {
    if tags.is_empty() {
        format!("{column} IS NULL")
    } else {
        format!("({column} IS NULL OR {column} IN ({}))", p.list(tags))
    }
}

fn job_of(r: &Row, shown: &str) -> StoreResult<JobDef> {
    let c = Cells {
        row: r,
        shown,
        what: "a job row",
    };
    JobRow {
        id: c.int_req(0)?,
        name: c.text_req(1)?,
        group: c.text(2)?,
        handler_type: c.text_req(3)?,
        params_json: c.text_req(4)?,
        schedule_json: c.text(5)?,
        enabled: c.bool(6)?,
        effective_from: c.instant(7)?,
        expires_at: c.instant(8)?,
        timeout_ms: c.int(9)?,
        retry_max: c.int_req(10)?,
        retry_backoff: c.text_req(11)?,
        retry_timeouts: c.bool(12)?,
        misfire: c.text_req(13)?,
        overlap: c.text_req(14)?,
        priority: c.int_req(15)?,
        dependencies: c.text_req(16)?,
        node_tag: c.text(17)?,
        application: c.text(18)?,
        owner: c.text(19)?,
        description: c.text(20)?,
        isolation: c.text_req(21)?,
        next_fire: c.instant(22)?,
        version: c.int_req(23)?,
        updated_at: c.instant_req(24)?,
    }
    .into_job(shown)
}

fn run_of(r: &Row, shown: &str) -> StoreResult<Run> {
    let c = Cells {
        row: r,
        shown,
        what: "a run row",
    };
    RunRow {
        id: c.int_req(0)?,
        job_id: c.int_req(1)?,
        fire_time: c.instant_req(2)?,
        state: c.text_req(3)?,
        attempt: c.int_req(4)?,
        created_at: c.instant_req(5)?,
        started_at: c.instant(6)?,
        finished_at: c.instant(7)?,
        node_id: c.text(8)?,
        lease_expires_at: c.instant(9)?,
        error: c.text(10)?,
        result_json: c.text(11)?,
        elapsed_ms: c.int(12)?,
        progress_done: c.int(13)?,
        progress_total: c.int(14)?,
        progress_message: c.text(15)?,
        skip_reason: c.text(16)?,
        next_attempt_at: c.instant(17)?,
        node_instance: c.text(18)?,
        plugin: c.text(19)?,
        plugin_version: c.text(20)?,
        plugin_sha256: c.text(21)?,
    }
    .into_run(shown)
}

fn i32_of(v: i64, what: &str) -> StoreResult<i32> {
    i32::try_from(v).map_err(|_| {
        StoreError::invalid(format!(
            "{what} {v} is too large for the database (at most {}); use a smaller value",
            i32::MAX
        ))
    })
}

/// Adds a job's columns after `id` (in `JOB_COLUMNS` order) to `p`; their placeholders.
fn job_params(p: &mut Params, r: JobRow) -> StoreResult<Vec<String>> {
    Ok(vec![
        p.add(r.name),
        p.add(text(r.group)),
        p.add(r.handler_type),
        p.add(r.params_json),
        p.add(text(r.schedule_json)),
        p.add(r.enabled),
        p.at(r.effective_from),
        p.at(r.expires_at),
        p.add(r.timeout_ms),
        p.add(i32_of(r.retry_max, "retry count")?),
        p.add(r.retry_backoff),
        p.add(r.retry_timeouts),
        p.add(r.misfire),
        p.add(r.overlap),
        p.add(i32_of(r.priority, "priority")?),
        p.add(r.dependencies),
        p.add(text(r.node_tag)),
        p.add(text(r.application)),
        p.add(text(r.owner)),
        p.add(text(r.description)),
        p.add(r.isolation),
        p.at(r.next_fire),
        p.add(r.version),
        p.at(Some(r.updated_at)),
    ])
}

/// Adds a run's mutable columns (from `state`, in `RUN_COLUMNS` order) to `p`.
fn run_params(p: &mut Params, r: RunRow) -> StoreResult<Vec<String>> {
    Ok(vec![
        p.add(r.state),
        p.add(i32_of(r.attempt, "attempt")?),
        p.at(Some(r.created_at)),
        p.at(r.started_at),
        p.at(r.finished_at),
        p.add(text(r.node_id)),
        p.at(r.lease_expires_at),
        p.add(text(r.error)),
        p.add(text(r.result_json)),
        p.add(r.elapsed_ms),
        p.add(r.progress_done),
        p.add(r.progress_total),
        p.add(text(r.progress_message)),
        p.add(text(r.skip_reason)),
        p.at(r.next_attempt_at),
        p.add(text(r.node_instance)),
        p.add(text(r.plugin)),
        p.add(text(r.plugin_version)),
        p.add(text(r.plugin_sha256)),
    ])
}

static CLAIM_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A token no other claim uses: random per process, distinct per call.
fn claim_token() -> i64 {
    let n = CLAIM_COUNTER.fetch_add(1, Ordering::Relaxed);
    let h = RandomState::new().hash_one((n, std::process::id(), SystemTime::now()));
    // Positive and never 0 (0 marks rows written outside claims).
    i64::try_from(h >> 1).unwrap_or(1).max(1)
}

/// Inserts `run` (with `token`) unless its (job, fire time) key is taken; the stored run, or
/// `None` when the key was taken.
async fn insert_run(
    c: &mut Pooled,
    shown: &str,
    run: &Run,
    token: i64,
) -> Result<Option<Run>, Fail> {
    let r = RunRow::of(run)?;
    let mut p = c.params();
    let job = p.add(r.job_id);
    let fire = p.at(Some(r.fire_time));
    let mut values = vec![job.clone(), fire.clone()];
    values.extend(run_params(&mut p, r)?);
    values.push(p.add(token));
    let cols = RUN_COLUMNS.trim_start_matches("id, ");
    let sql = format!(
        "INSERT INTO runs ({cols}, claim_token) OUTPUT {} SELECT {} \
         WHERE NOT EXISTS (SELECT 1 FROM runs WITH (UPDLOCK, HOLDLOCK) \
                           WHERE job_id = {job} AND fire_time = {fire})",
        inserted(RUN_COLUMNS),
        values.join(", ")
    );
    let row = c.row("inserting a run", &sql, &p).await?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

async fn get_job(c: &mut Pooled, shown: &str, id: JobId) -> Result<Option<JobDef>, Fail> {
    let mut p = c.params();
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = {}", p.add(id.0));
    let row = c.row("reading a job", &sql, &p).await?;
    Ok(row.map(|r| job_of(&r, shown)).transpose()?)
}

async fn need_job(c: &mut Pooled, shown: &str, id: JobId) -> Result<JobDef, Fail> {
    Ok(get_job(c, shown, id)
        .await?
        .ok_or_else(|| job_missing(id))?)
}

async fn get_run(c: &mut Pooled, shown: &str, id: RunId) -> Result<Option<Run>, Fail> {
    let mut p = c.params();
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = {}", p.add(id.0));
    let row = c.row("reading a run", &sql, &p).await?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

async fn need_run(c: &mut Pooled, shown: &str, id: RunId) -> Result<Run, Fail> {
    Ok(get_run(c, shown, id)
        .await?
        .ok_or_else(|| run_missing(id))?)
}

/// Writes every mutable column of `run` if the stored run is still in `state` with `attempt`
/// (and sets its claim token); the stored run, or `None` when it is not.
async fn update_run_if(
    c: &mut Pooled,
    shown: &str,
    run: &Run,
    id: RunId,
    (state, attempt): (RunState, u32),
    token: i64,
) -> Result<Option<Run>, Fail> {
    let mut p = c.params();
    let values = run_params(&mut p, RunRow::of(run)?)?;
    let sets = RUN_COLUMNS
        .split(", ")
        .skip(3)
        .zip(values)
        .map(|(col, v)| format!("{col} = {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "UPDATE runs SET {sets}, claim_token = {} OUTPUT {} \
         WHERE id = {} AND state = {} AND attempt = {}",
        p.add(token),
        inserted(RUN_COLUMNS),
        p.add(id.0),
        p.add(state.name()),
        p.add(i64::from(attempt)),
    );
    let row = c.row("updating a run", &sql, &p).await?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

/// What one claim round picked, in claim order.
enum Pick {
    Fire(Box<JobDef>),
    Retry(RunId),
}

impl MssqlStore {
    /// Connects, and applies the migrations the database lacks. Fails when the string is not
    /// valid, the server is unreachable or refuses the login, or the database was migrated by a
    /// newer takt (left untouched).
    pub async fn connect(options: &MssqlOptions) -> StoreResult<MssqlStore> {
        let mut config = parse_connection_string(&options.connection_string)?;
        if let Some(db) = &options.database {
            config.database(db);
        }
        if options
            .connection_string
            .to_ascii_lowercase()
            .replace(' ', "")
            .contains("integratedsecurity=")
            && !options
                .connection_string
                .to_ascii_lowercase()
                .contains("user")
        {
            return Err(StoreError::invalid(
                "the sql server connection string asks for integrated (windows) security, which \
                 takt does not offer yet; use a sql login: User Id=…;Password=…",
            ));
        }
        let shown: Arc<str> =
            describe(&options.connection_string, options.database.as_deref()).into();
        config.application_name("takt");
        // Probe the peer once to choose the session settings.
        let probe = Pool::new(
            config.clone(),
            shown.clone(),
            1,
            options.connect_timeout,
            Vec::new(),
            false,
        );
        let emulator = retry::retrying("connecting", || async {
            let mut c = probe.get("connecting").await?;
            dialect::is_emulator(&mut c, &shown).await
        })
        .await?;
        drop(probe);
        let setup = if emulator { Vec::new() } else { vec![SESSION] };
        let pool = Pool::new(
            config,
            shown.clone(),
            options.pool_size,
            options.connect_timeout,
            setup,
            emulator,
        );
        let store = MssqlStore {
            pool,
            shown,
            emulator,
            unknown_commits: Arc::default(),
        };
        store
            .retrying("migrating", || async {
                let mut c = store.client("migrating").await?;
                if !options.migrate {
                    let current = migrate::current_version(&mut c, &store.shown).await?;
                    super::migrate::require_current(
                        &store.shown,
                        current,
                        mssql_latest_version(),
                        super::migrate::newer_server_schema,
                    )?;
                    return Ok(Vec::new());
                }
                migrate::apply(
                    &mut c,
                    &store.shown,
                    store.emulator,
                    options.on_migration.as_ref(),
                )
                .await
            })
            .await?;
        Ok(store)
    }

    /// The database, as shown in messages (`mssql://user@host:port/db`, no password).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Whether the peer is the iridium emulator, where the checks that need a real server's
    /// locking and unique indexes are declared missing ([`Store::capabilities`]).
    pub fn is_emulator(&self) -> bool {
        self.emulator
    }

    /// How many claims had their COMMIT's answer lost and were resolved by their claim token
    /// (diagnostics).
    pub fn unknown_commits(&self) -> u64 {
        self.unknown_commits.load(Ordering::Relaxed)
    }

    /// The schema version of the database (the last migration applied).
    pub async fn schema_version(&self) -> StoreResult<u32> {
        self.retrying("reading the schema version", || async {
            let mut c = self.client("reading the schema version").await?;
            migrate::current_version(&mut c, &self.shown).await
        })
        .await
    }

    /// Applies migrations this binary knows and the database lacks.
    pub async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        self.retrying("migrating", || async {
            let mut c = self.client("migrating").await?;
            migrate::apply(&mut c, &self.shown, self.emulator, None).await
        })
        .await
    }

    /// The database server's clock (`SYSUTCDATETIME()`). Nodes correct their own clocks by it,
    /// so that what is due is decided by one clock for every node.
    pub async fn database_now(&self) -> StoreResult<Timestamp> {
        let what = "reading the database clock";
        self.retrying(what, || async {
            let mut c = self.client(what).await?;
            let sql = format!("SELECT {}", dialect::clock(self.emulator));
            let row = c.row(what, &sql, &Params::default()).await?;
            let ms = match &row {
                Some(r) => Cells {
                    row: r,
                    shown: &self.shown,
                    what: "the database clock",
                }
                .instant_req(0)?,
                None => return Err(StoreError::other("the database returned no clock").into()),
            };
            let ms = dialect::clock_ms(self.emulator, ms);
            Timestamp::from_millisecond(ms).map_err(|e| {
                StoreError::other(format!("the database clock is out of range: {e}")).into()
            })
        })
        .await
    }

    async fn client(&self, what: &str) -> Result<Pooled, Fail> {
        self.pool.get(what).await
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

impl MssqlStore {
    async fn claim_once(
        &self,
        p: &ClaimParams,
        lease_until: Timestamp,
        token: i64,
    ) -> Result<Vec<ClaimedRun>, Fail> {
        let shown = &*self.shown;
        let mut c = self.client("claiming due runs").await?;
        c.begin("starting a claim").await?;
        let now = p.now.as_millisecond();
        let mut claimed = Vec::new();
        let mut handled: Vec<i64> = Vec::new();
        while claimed.len() < p.limit {
            let need = p.limit - claimed.len();
            // Due jobs in claim order, locked; rows other claimers hold are passed over.
            let mut q = c.params();
            let at = q.at(Some(now));
            let tags = tag_filter(&mut q, "node_tag", &p.tags);
            let not_handled = if handled.is_empty() {
                String::new()
            } else {
                format!(
                    " AND id NOT IN ({})",
                    handled
                        .iter()
                        .map(|h| h.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let jobs_sql = format!(
                "SELECT TOP ({}) {JOB_COLUMNS} FROM jobs {} \
                 WHERE enabled = 1 AND next_fire IS NOT NULL AND next_fire <= {at} \
                   AND {tags}{not_handled} \
                 ORDER BY priority, next_fire, id",
                top(need),
                dialect::claim_hint(self.emulator)
            );
            let job_rows = c.rows("finding due jobs", &jobs_sql, &q).await?;
            let mut q = c.params();
            let at = q.at(Some(now));
            let tags = tag_filter(&mut q, "j.node_tag", &p.tags);
            let retries_sql = format!(
                "SELECT TOP ({}) r.id, j.priority, \
                   COALESCE(r.next_attempt_at, r.created_at) \
                 FROM runs r {}, jobs j \
                 WHERE j.id = r.job_id AND r.state = N'pending' AND COALESCE(r.next_attempt_at, r.created_at) <= {at} \
                   AND j.enabled = 1 AND {tags} \
                   AND (r.next_attempt_at IS NOT NULL OR NOT EXISTS \
                        (SELECT 1 FROM runs x WHERE x.job_id = r.job_id AND x.state = N'running')) \
                 ORDER BY j.priority, COALESCE(r.next_attempt_at, r.created_at), r.id",
                top(need),
                dialect::claim_hint(self.emulator)
            );
            let retry_rows = c.rows("finding due retries", &retries_sql, &q).await?;
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
                let cells = Cells {
                    row: r,
                    shown,
                    what: "a due retry",
                };
                let id = cells.int_req(0)?;
                picks.push((
                    (cells.int_req(1)?, cells.instant_req(2)?, id, true),
                    Pick::Retry(RunId(id)),
                ));
            }
            if picks.is_empty() {
                break;
            }
            picks.sort_by_key(|(k, _)| *k);
            picks.truncate(need);
            let mut round = Vec::new();
            let mut retries = Vec::new();
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
                        // The row is locked by this transaction, so the condition on the old
                        // next fire cannot fail; it stays as the statement of what must hold.
                        let mut q = c.params();
                        let sql = format!(
                            "UPDATE jobs SET next_fire = {} OUTPUT INSERTED.id \
                             WHERE id = {} AND next_fire = {}",
                            q.at(next.map(Timestamp::as_millisecond)),
                            q.add(id.0),
                            q.at(Some(fire.as_millisecond())),
                        );
                        if c.rows("advancing next fires", &sql, &q).await?.len() != 1 {
                            return Err(StoreError::conflict(
                                "a job's next fire moved while claiming it; claim again",
                            )
                            .into());
                        }
                        for (at, reason) in skips {
                            insert_run(
                                &mut c,
                                shown,
                                &Run::skipped(id, at, reason, None, p.now),
                                0,
                            )
                            .await?;
                        }
                        let run = p
                            .new_run(id, fire, lease_until, &job.retry)
                            .map_err(StoreError::from)?;
                        // A taken key (a skipped or triggered run): next fire still advanced.
                        if let Some(run) = insert_run(&mut c, shown, &run, token).await? {
                            job.next_fire = next;
                            round.push((key, ClaimedRun { run, job: *job }));
                        }
                    }
                }
            }
            // Retries after the fires: a queued run must see the runs this round started.
            for (key, id) in retries {
                if let Some(cl) = self.claim_retry(&mut c, id, p, lease_until, token).await? {
                    round.push((key, cl));
                }
            }
            round.sort_by_key(|(k, _)| *k);
            claimed.extend(round.into_iter().map(|(_, c)| c));
        }
        c.commit().await?;
        Ok(claimed)
    }

    /// Claims the due retry or queued run `id` inside the claim's transaction (its row is
    /// locked by the claim's query).
    async fn claim_retry(
        &self,
        c: &mut Pooled,
        id: RunId,
        p: &ClaimParams,
        lease_until: Timestamp,
        token: i64,
    ) -> Result<Option<ClaimedRun>, Fail> {
        let shown = &*self.shown;
        let mut run = need_run(c, shown, id).await?;
        if run.state != RunState::Pending {
            return Ok(None);
        }
        if run.next_attempt_at.is_none() {
            // A queued run starts only once its job is idle. Its job's row lock serialises
            // this with another node claiming the job's fire (skip if that node holds it),
            // and the check sees a run this claim started earlier.
            let mut q = c.params();
            let sql = format!(
                "SELECT id FROM jobs {} WHERE id = {}",
                dialect::claim_hint(self.emulator),
                q.add(run.job_id.0)
            );
            let locked = c.row("locking a queued run's job", &sql, &q).await?;
            let mut q = c.params();
            let sql = format!(
                "SELECT TOP (1) 1 FROM runs WHERE job_id = {} AND state = N'running'",
                q.add(run.job_id.0)
            );
            let busy = c.row("checking a queued run's job", &sql, &q).await?;
            if locked.is_none() || busy.is_some() {
                return Ok(None);
            }
        }
        let job = need_job(c, shown, run.job_id).await?;
        let before = (run.state, run.attempt);
        p.claim(&mut run, lease_until, &job.retry)
            .map_err(StoreError::from)?;
        let Some(stored) = update_run_if(c, shown, &run, id, before, token).await? else {
            return Err(StoreError::conflict(format!(
                "run {id} changed while claiming its retry; claim again"
            ))
            .into());
        };
        Ok(Some(ClaimedRun { run: stored, job }))
    }

    /// After a claim's COMMIT failed with the outcome unknown: the runs it claimed if it
    /// committed (found by its token), none if it did not.
    async fn claimed_by(&self, p: &ClaimParams, token: i64) -> Result<Vec<ClaimedRun>, Fail> {
        let shown = &*self.shown;
        let mut c = self.client("checking a claim").await?;
        let mut q = c.params();
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs \
             WHERE node_id = {} AND state = N'running' AND claim_token = {} ORDER BY id",
            q.add(p.node.0.clone()),
            q.add(token)
        );
        let rows = c.rows("checking a claim", &sql, &q).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let run = run_of(r, shown)?;
            let job = need_job(&mut c, shown, run.job_id).await?;
            out.push(ClaimedRun { run, job });
        }
        Ok(out)
    }

    async fn job_insert_once(&self, job: &JobDef, now: Timestamp) -> Result<JobDef, Fail> {
        let shown = &*self.shown;
        let what = format!("inserting job {}", job.name);
        let mut c = self.client(&what).await?;
        let mut row = JobRow::of(job, now)?;
        row.version = 1;
        let mut p = c.params();
        let values = job_params(&mut p, row)?;
        let columns = JOB_COLUMNS.trim_start_matches("id, ");
        let sql = format!(
            "INSERT INTO jobs ({columns}) OUTPUT {} SELECT {} \
             WHERE NOT EXISTS (SELECT 1 FROM jobs WITH (UPDLOCK, HOLDLOCK) WHERE name = {})",
            inserted(JOB_COLUMNS),
            values.join(", "),
            values[0]
        );
        match c.row(&what, &sql, &p).await {
            Ok(Some(r)) => Ok(job_of(&r, shown)?),
            Ok(None) => Err(name_taken(&job.name).into()),
            Err(f) if f.error.kind() == StoreErrorKind::Conflict => {
                Err(name_taken(&job.name).into())
            }
            Err(f) => Err(f),
        }
    }

    async fn job_update_once(
        &self,
        job: &JobDef,
        id: JobId,
        now: Timestamp,
    ) -> Result<JobDef, Fail> {
        let shown = &*self.shown;
        let what = format!("updating job {}", job.name);
        let mut c = self.client(&what).await?;
        let expected = to_i64(job.version, "job version")?;
        let mut row = JobRow::of(job, now)?;
        row.version = expected + 1;
        let mut p = c.params();
        let values = job_params(&mut p, row)?;
        let sets = JOB_COLUMNS
            .split(", ")
            .skip(1)
            .zip(&values)
            .map(|(col, v)| format!("{col} = {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        // A renamed job taking another's name: the unique constraint says so (a guard first,
        // so that the usual case is an answer, not an error).
        let sql = format!(
            "UPDATE jobs SET {sets} OUTPUT {} WHERE id = {} AND version = {} \
             AND NOT EXISTS (SELECT 1 FROM jobs o WHERE o.name = {} AND o.id <> {})",
            inserted(JOB_COLUMNS),
            p.add(id.0),
            p.add(expected),
            values[0],
            p.add(id.0),
        );
        let r = c.row(&what, &sql, &p).await.map_err(|f| {
            if f.error.kind() == StoreErrorKind::Conflict {
                name_taken(&job.name).into()
            } else {
                f
            }
        })?;
        if let Some(r) = r {
            return Ok(job_of(&r, shown)?);
        }
        let mut q = c.params();
        let sql = format!(
            "SELECT name, version, (SELECT COUNT(*) FROM jobs o WHERE o.name = {} \
             AND o.id <> {}) FROM jobs WHERE id = {}",
            q.add(job.name.as_str().to_string()),
            q.add(id.0),
            q.add(id.0)
        );
        let current = c.row("reading a job", &sql, &q).await?;
        Err(match current {
            None => job_missing(id),
            Some(r) => {
                let cells = Cells {
                    row: &r,
                    shown,
                    what: "a job row",
                };
                let version = cells.int_req(1)?;
                if version == expected && cells.int_req(2)? > 0 {
                    name_taken(&job.name)
                } else {
                    StoreError::conflict(format!(
                        "job {} was changed by someone else (stored version {version}, yours \
                         {}); reload it and apply your change again",
                        cells.text_req(0)?,
                        job.version
                    ))
                }
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
        let mut c = self.client("finishing a run").await?;
        let mut run = need_run(&mut c, shown, id).await?;
        if resolving && finished_as(&run, expected_attempt, finish) {
            // The earlier try committed before its connection failed.
            return Ok(run);
        }
        apply_finish(&mut run, id, expected_attempt, finish)?;
        // One statement, committed on its own: the condition is the compare-and-set.
        match update_run_if(
            &mut c,
            shown,
            &run,
            id,
            (RunState::Running, expected_attempt),
            0,
        )
        .await
        {
            Ok(Some(stored)) => Ok(stored),
            Ok(None) => Err(StoreError::conflict(format!(
                "run {id} changed while finishing it; reload it"
            ))
            .into()),
            Err(mut f) => {
                if f.retry == Retry::Safe {
                    // The statement may have been applied before the answer was lost.
                    f.retry = Retry::Unknown;
                }
                Err(f)
            }
        }
    }

    /// Inserts a run under its (job, fire time) key on its own: a taken key is a Conflict
    /// naming the run that holds it.
    async fn insert_keyed(&self, run: &Run) -> Result<Run, Fail> {
        let shown = &*self.shown;
        let mut c = self.client("inserting a run").await?;
        need_job(&mut c, shown, run.job_id).await?;
        if let Some(stored) = insert_run(&mut c, shown, run, 0).await? {
            return Ok(stored);
        }
        let mut q = c.params();
        let sql = format!(
            "SELECT id FROM runs WHERE job_id = {} AND fire_time = {}",
            q.add(run.job_id.0),
            q.at(Some(run.fire_time.as_millisecond()))
        );
        let other = c.row("reading a run", &sql, &q).await?;
        Err(match other {
            Some(r) => {
                let other = Cells {
                    row: &r,
                    shown,
                    what: "a run row",
                }
                .int_req(0)?;
                fire_taken(run.job_id, run.fire_time, RunId(other))
            }
            // The job was deleted between the check and the insert.
            None => job_missing(run.job_id),
        }
        .into())
    }

    /// The nodes (all, or the one named) with their running runs.
    ///
    /// Two plain statements rather than one with a join or a correlated count: the emulator
    /// returns no rows for `JOIN … ON`, and the node table is small.
    async fn node_rows(
        &self,
        c: &mut Pooled,
        only: Option<&NodeId>,
    ) -> Result<Vec<NodeStatus>, Fail> {
        let shown = &*self.shown;
        let what = "listing nodes";
        let mut p = c.params();
        let filter = match only {
            Some(n) => format!(" WHERE id = {}", p.add(n.0.clone())),
            None => String::new(),
        };
        let rows = c
            .rows(
                what,
                &format!("SELECT {NODE_COLUMNS} FROM nodes{filter} ORDER BY id"),
                &p,
            )
            .await?;
        let running = c
            .rows(
                what,
                "SELECT node_id FROM runs WHERE state = 'running' AND node_id IS NOT NULL",
                &Params::default(),
            )
            .await?;
        let mut per_node: std::collections::HashMap<String, i64> = Default::default();
        for r in &running {
            let cells = Cells {
                row: r,
                shown,
                what: "a running run's node",
            };
            if let Some(id) = cells.text(0)? {
                *per_node.entry(id).or_default() += 1;
            }
        }
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown,
                what: "a node row",
            };
            let row = NodeRow {
                id: c.text_req(0)?,
                instance: c.text(1)?,
                host_name: c.text(2)?.unwrap_or_default(),
                pid: c.int(3)?,
                version: c.text(4)?.unwrap_or_default(),
                capacity: c.int(5)?.unwrap_or(0),
                tags: c.text(6)?.unwrap_or_else(|| "[]".to_string()),
                started_at: c.instant(7)?,
                heartbeat_at: c.instant(8)?,
                stopped_at: c.instant(9)?,
            };
            let running = per_node.get(&row.id).copied().unwrap_or(0);
            out.push(row.into_status(shown, running)?);
        }
        Ok(out)
    }

    /// One try of [`Store::lease_renew`]: the heartbeat and the renewal in one transaction;
    /// `None` (nothing renewed) when the node's row does not hold `instance`.
    async fn renew_once(
        &self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<Option<Vec<RunId>>, Fail> {
        let what = "renewing leases";
        let mut c = self.client(what).await?;
        let mut p = c.params();
        let (id, life, at) = (
            p.add(node.0.clone()),
            p.add(instance.0.clone()),
            p.at(Some(now.as_millisecond())),
        );
        let until = p.at(Some(until.as_millisecond()));
        c.begin(what).await?;
        let beat = c
            .rows(
                what,
                &format!(
                    "UPDATE nodes SET heartbeat_at = {at} OUTPUT INSERTED.id \
                     WHERE id = {id} AND instance = {life}"
                ),
                &p,
            )
            .await?;
        if beat.is_empty() {
            c.rollback().await?;
            return Ok(None);
        }
        let rows = c
            .rows(
                what,
                &format!(
                    "UPDATE runs SET lease_expires_at = {until} OUTPUT INSERTED.id \
                     WHERE node_id = {id} AND node_instance = {life} AND state = N'running' \
                     AND lease_expires_at > {at}"
                ),
                &p,
            )
            .await?;
        let mut ids = rows
            .iter()
            .map(|r| {
                Cells {
                    row: r,
                    shown: &self.shown,
                    what: "a renewed run",
                }
                .int_req(0)
                .map(RunId)
            })
            .collect::<StoreResult<Vec<_>>>()?;
        c.commit().await?;
        ids.sort_by_key(|r| r.0);
        Ok(Some(ids))
    }

    /// One try of [`Store::node_register`]: the row read under an update lock held to the
    /// end (`HOLDLOCK` also locks the key's range while the row is missing, so two first
    /// registrations of an id serialise), the rule applied, the row replaced.
    async fn register_once(&self, reg: &Registration) -> Result<Registered, Fail> {
        let what = "registering the node";
        let mut c = self.client(what).await?;
        c.begin(what).await?;
        let mut q = c.params();
        let sql = format!(
            "SELECT id FROM nodes WITH (UPDLOCK, HOLDLOCK) WHERE id = {}",
            q.add(reg.node.id.0.clone())
        );
        let exists = c.row(what, &sql, &q).await?.is_some();
        let current = if exists {
            self.node_rows(&mut c, Some(&reg.node.id)).await?.pop()
        } else {
            None
        };
        let verdict = registration(current.as_ref(), reg);
        if let Registered::Yes { .. } = verdict {
            let r = NodeRow::of(&reg.node, reg.now);
            let mut p = c.params();
            let (id, inst, host, pid, version, cap, tags, now) = (
                p.add(r.id),
                p.add(text(r.instance)),
                p.add(r.host_name),
                p.add(r.pid),
                p.add(r.version),
                p.add(i32::try_from(r.capacity).unwrap_or(i32::MAX)),
                p.add(r.tags),
                p.at(Some(reg.now.as_millisecond())),
            );
            let sql = if exists {
                format!(
                    "UPDATE nodes SET instance = {inst}, host_name = {host}, pid = {pid}, \
                     version = {version}, capacity = {cap}, tags = {tags}, started_at = {now}, \
                     heartbeat_at = {now}, stopped_at = NULL WHERE id = {id}"
                )
            } else {
                format!(
                    "INSERT INTO nodes (id, instance, host_name, pid, version, capacity, tags, \
                     started_at, heartbeat_at) VALUES ({id}, {inst}, {host}, {pid}, {version}, \
                     {cap}, {tags}, {now}, {now})"
                )
            };
            c.exec(what, &sql, &p).await?;
        }
        c.commit().await?;
        Ok(verdict)
    }

    async fn recover_once(
        &self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> Result<Vec<Run>, Fail> {
        let shown = &*self.shown;
        let mut c = self.client("recovering expired leases").await?;
        c.begin("starting a recovery").await?;
        // Locked and skipped like claims: two nodes recovering at once split the runs.
        let mut q = c.params();
        let mine = match restart {
            Some((n, i)) => format!(
                "(node_id = {} AND (node_instance IS NULL OR node_instance <> {})) OR ",
                q.add(n.0.clone()),
                q.add(i.0.clone())
            ),
            None => String::new(),
        };
        let sql = format!(
            "SELECT id FROM runs {} WHERE state = N'running' \
             AND ({mine}lease_expires_at IS NULL OR lease_expires_at <= {}) ORDER BY id",
            dialect::claim_hint(self.emulator),
            q.at(Some(now.as_millisecond()))
        );
        let rows = c.rows("finding expired leases", &sql, &q).await?;
        let mut ids = Vec::with_capacity(rows.len());
        for r in &rows {
            ids.push(
                Cells {
                    row: r,
                    shown,
                    what: "an expired run",
                }
                .int_req(0)?,
            );
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let id = RunId(id);
            let mut run = need_run(&mut c, shown, id).await?;
            let Some(event) = recovery_event(&run, now, restart) else {
                continue;
            };
            let retry = need_job(&mut c, shown, run.job_id).await?.retry;
            let attempt = run.attempt;
            run.apply(event, now, &retry).map_err(StoreError::from)?;
            let Some(stored) =
                update_run_if(&mut c, shown, &run, id, (RunState::Running, attempt), 0).await?
            else {
                return Err(StoreError::conflict(format!(
                    "run {id} changed while recovering it; recover again"
                ))
                .into());
            };
            out.push(stored);
        }
        c.commit().await?;
        Ok(out)
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

/// A row limit as `TOP` takes it (a BIGINT: `usize::MAX` would be refused).
fn top(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn unsigned(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Log lines per statement: 3 parameters each, well under SQL Server's 2100 per call.
const LOG_CHUNK: usize = 500;

impl Store for MssqlStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // The emulator enforces no composite unique index and its READPAST skips nothing:
            // exactly-once under concurrent claimers cannot be shown there (see module docs).
            concurrent_claims: !self.emulator,
            ..Capabilities::ALL
        }
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
            let mut c = self.client("reading a job").await?;
            get_job(&mut c, &self.shown, id).await
        })
        .await
    }

    async fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>> {
        self.retrying("reading a job", || async {
            let mut c = self.client("reading a job").await?;
            let mut p = c.params();
            let sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE name = {}",
                p.add(name.as_str().to_string())
            );
            let row = c.row("reading a job", &sql, &p).await?;
            Ok(row.map(|r| job_of(&r, &self.shown)).transpose()?)
        })
        .await
    }

    async fn job_list(&self) -> StoreResult<Vec<JobDef>> {
        self.retrying("listing jobs", || async {
            let mut c = self.client("listing jobs").await?;
            let rows = c
                .rows(
                    "listing jobs",
                    &format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY id"),
                    &Params::default(),
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| job_of(r, &self.shown))
                .collect::<StoreResult<_>>()?)
        })
        .await
    }

    async fn job_delete(&self, id: JobId) -> StoreResult<()> {
        let what = "deleting a job";
        self.retrying(what, || async {
            let mut c = self.client(what).await?;
            c.begin(what).await?;
            // Explicit rather than relying on ON DELETE CASCADE alone: the same statements
            // work on a database whose foreign keys a DBA created without cascades.
            let mut p = c.params();
            let j = p.add(id.0);
            c.exec(
                what,
                &format!(
                    "DELETE FROM run_logs WHERE run_id IN (SELECT id FROM runs WHERE job_id = {j}); \
                     DELETE FROM runs WHERE job_id = {j}"
                ),
                &p,
            )
            .await?;
            let n = c
                .rows(
                    what,
                    &format!("DELETE FROM jobs OUTPUT DELETED.id WHERE id = {j}"),
                    &p,
                )
                .await?
                .len();
            if n == 0 {
                c.rollback().await?;
                return Err(job_missing(id).into());
            }
            c.commit().await
        })
        .await
    }

    async fn job_set_enabled(
        &self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> StoreResult<JobDef> {
        let what = "enabling or disabling a job";
        self.retrying(what, || async {
            let mut c = self.client(what).await?;
            let mut p = c.params();
            let sql = format!(
                "UPDATE jobs SET enabled = {}, version = version + 1, updated_at = {} \
                 OUTPUT {} WHERE id = {}",
                p.add(enabled),
                p.at(Some(now.as_millisecond())),
                inserted(JOB_COLUMNS),
                p.add(id.0)
            );
            match c.row(what, &sql, &p).await? {
                Some(r) => Ok(job_of(&r, &self.shown)?),
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
        let what = "setting a job's next fire";
        self.retrying(what, || async {
            let shown = &*self.shown;
            let mut c = self.client(what).await?;
            let mut p = c.params();
            let new = p.at(new.map(Timestamp::as_millisecond));
            let cond = match expected {
                Some(e) => format!("next_fire = {}", p.at(Some(e.as_millisecond()))),
                None => "next_fire IS NULL".to_string(),
            };
            let sql = format!(
                "UPDATE jobs SET next_fire = {new} OUTPUT INSERTED.id WHERE id = {} AND {cond}",
                p.add(id.0)
            );
            if c.rows(what, &sql, &p).await?.is_empty() {
                let job = need_job(&mut c, shown, id).await?;
                return Err(StoreError::conflict(format!(
                    "job {} next fire is {}, not {}; another node moved it first: reload the job",
                    job.name,
                    show(job.next_fire),
                    show(expected)
                ))
                .into());
            }
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
        let what = "finding due jobs";
        self.retrying(what, || async {
            let shown = &*self.shown;
            let mut c = self.client(what).await?;
            let mut p = c.params();
            let at = p.at(Some(now.as_millisecond()));
            let tags = tag_filter(&mut p, "node_tag", tags);
            let sql = format!(
                "SELECT TOP ({}) id, name, next_fire, misfire, overlap, \
                   (SELECT COUNT(*) FROM runs r WHERE r.job_id = jobs.id AND r.state = N'running'), \
                   (SELECT COUNT(*) FROM runs r WHERE r.job_id = jobs.id AND r.state = N'pending') \
                 FROM jobs WHERE enabled = 1 AND next_fire IS NOT NULL AND next_fire <= {at} \
                   AND {tags} \
                 ORDER BY priority, next_fire, id",
                top(limit)
            );
            let rows = c.rows(what, &sql, &p).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let cells = Cells {
                    row: r,
                    shown,
                    what: "a due job",
                };
                let id = cells.int_req(0)?;
                let row = format!("job {id}");
                let bad = |column: &str, detail: &dyn std::fmt::Display| {
                    corrupt(shown, &row, column, detail)
                };
                let name = cells.text_req(1)?;
                let next_fire = cells.instant_req(2)?;
                let misfire = cells.text_req(3)?;
                let overlap = cells.text_req(4)?;
                out.push(DueJob {
                    id: JobId(id),
                    name: JobName::new(&name).map_err(|e| bad("name", &e))?,
                    next_fire: Timestamp::from_millisecond(next_fire)
                        .map_err(|e| bad("next_fire", &e))?,
                    misfire: misfire
                        .parse::<MisfirePolicy>()
                        .map_err(|e| bad("misfire", &e))?,
                    overlap: overlap
                        .parse::<OverlapPolicy>()
                        .map_err(|e| bad("overlap", &e))?,
                    running: unsigned(cells.int_req(5)?),
                    pending: unsigned(cells.int_req(6)?),
                });
            }
            Ok(out)
        })
        .await
    }

    async fn next_due(&self, tags: &[String]) -> StoreResult<Option<Timestamp>> {
        let what = "finding the next due time";
        self.retrying(what, || async {
            let shown = &*self.shown;
            let mut c = self.client(what).await?;
            let mut p = c.params();
            let jt = tag_filter(&mut p, "node_tag", tags);
            let rt = tag_filter(&mut p, "j.node_tag", tags);
            // Three minima, combined here: LEAST() exists only from SQL Server 2022.
            let sql = format!(
                "SELECT \
                   (SELECT MIN(next_fire) FROM jobs WHERE enabled = 1 AND next_fire IS NOT NULL \
                      AND {jt}), \
                   (SELECT MIN(r.next_attempt_at) FROM runs r, jobs j \
                    WHERE j.id = r.job_id AND r.state = N'pending' AND r.next_attempt_at IS NOT NULL \
                      AND j.enabled = 1 AND {rt}), \
                   (SELECT MIN(r.created_at) FROM runs r, jobs j \
                    WHERE j.id = r.job_id AND r.state = N'pending' AND r.next_attempt_at IS NULL AND j.enabled = 1 \
                      AND {rt} AND NOT EXISTS (SELECT 1 FROM runs x \
                                     WHERE x.job_id = r.job_id AND x.state = N'running'))"
            );
            let row = c.row(what, &sql, &p).await?;
            let Some(r) = row else { return Ok(None) };
            let cells = Cells {
                row: &r,
                shown,
                what: "the next due time",
            };
            let mut min: Option<i64> = None;
            for i in 0..3 {
                if let Some(t) = cells.instant(i)? {
                    min = Some(min.map_or(t, |m| m.min(t)));
                }
            }
            Ok(min
                .map(|t| {
                    Timestamp::from_millisecond(t)
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
            // A unique-key violation inside a claim means another node inserted the same
            // fire between our guard and our insert: the transaction was rolled back whole
            // (XACT_ABORT), so claiming again is safe and will see that node's run.
            let retry = if f.error.kind() == StoreErrorKind::Conflict {
                Retry::Safe
            } else {
                f.retry
            };
            match retry {
                Retry::No => return Err(f.error),
                Retry::Safe => {}
                Retry::Unknown => {
                    self.unknown_commits.fetch_add(1, Ordering::Relaxed);
                    // Whatever this claim committed is found by its token; if nothing was,
                    // claiming again is safe.
                    let found = self
                        .retrying("checking a claim", || self.claimed_by(p, token))
                        .await?;
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
            let mut c = self.client("reading a run").await?;
            get_run(&mut c, &self.shown, id).await
        })
        .await
    }

    async fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        let what = "listing runs";
        self.retrying(what, || async {
            let shown = &*self.shown;
            let mut c = self.client(what).await?;
            let mut p = c.params();
            let mut cond = vec!["1 = 1".to_string()];
            if let Some(j) = filter.job {
                cond.push(format!("job_id = {}", p.add(j.0)));
            }
            if let Some(s) = filter.state {
                cond.push(format!("state = {}", p.add(s.name())));
            }
            let sql = format!(
                "SELECT TOP ({}) {RUN_COLUMNS} FROM runs WHERE {} \
                 ORDER BY fire_time DESC, id DESC",
                top(filter.limit),
                cond.join(" AND ")
            );
            let rows = c.rows(what, &sql, &p).await?;
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
        let what = "renewing leases";
        // Idempotent (renewing twice extends to the same instant), so a lost COMMIT answer
        // is tried again like any transient failure.
        let renewed = self
            .retrying(what, || async {
                self.renew_once(node, instance, until, now)
                    .await
                    .map_err(retry::idempotent)
            })
            .await?;
        match renewed {
            Some(ids) => Ok(ids),
            None => {
                let holder = self
                    .retrying("reading a node", || async {
                        let mut c = self.client("reading a node").await?;
                        self.node_rows(&mut c, Some(node)).await
                    })
                    .await?;
                Err(not_registered(node, instance, holder.first()))
            }
        }
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
        // Registering one life again is idempotent (the rule lets an instance follow itself).
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
        let what = "recording a node stop";
        self.retrying(what, || async {
            let mut c = self.client(what).await?;
            let mut p = c.params();
            let sql = format!(
                "UPDATE nodes SET stopped_at = {} WHERE id = {} AND instance = {}",
                p.at(Some(now.as_millisecond())),
                p.add(node.0.clone()),
                p.add(instance.0.clone())
            );
            c.exec(what, &sql, &p).await?;
            Ok(())
        })
        .await
    }

    async fn node_list(&self) -> StoreResult<Vec<NodeStatus>> {
        self.retrying("listing nodes", || async {
            let mut c = self.client("listing nodes").await?;
            self.node_rows(&mut c, None).await
        })
        .await
    }

    async fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()> {
        let done = to_i64(progress.done, "progress done")?;
        let total = to_i64(progress.total, "progress total")?;
        let what = "recording progress";
        self.retrying(what, || async {
            let shown = &*self.shown;
            let mut c = self.client(what).await?;
            let mut p = c.params();
            let sql = format!(
                "UPDATE runs SET progress_done = {}, progress_total = {}, \
                 progress_message = {} OUTPUT INSERTED.id WHERE id = {} AND state = N'running'",
                p.add(done),
                p.add(total),
                p.add(progress.message.clone()),
                p.add(id.0)
            );
            if c.rows(what, &sql, &p).await?.is_empty() {
                let run = need_run(&mut c, shown, id).await?;
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
        let what = "appending log lines";
        // Not retried after an unknown commit: a line written twice is better than a line
        // lost, but neither should be silent, so the error reaches the forwarder.
        self.retrying(what, || async {
            let shown = &*self.shown;
            let mut c = self.client(what).await?;
            // One transaction: the lines go in together or not at all, in order.
            c.begin(what).await?;
            if get_run(&mut c, shown, run).await?.is_none() {
                c.rollback().await?;
                return Err(run_missing(run).into());
            }
            for chunk in lines.chunks(LOG_CHUNK) {
                let mut p = c.params();
                let r = p.add(run.0);
                let mut rows = Vec::with_capacity(chunk.len());
                for (n, l) in chunk.iter().enumerate() {
                    rows.push(format!(
                        "({}, {}, {}, {n})",
                        p.at(Some(l.at.as_millisecond())),
                        p.add(l.level.name()),
                        p.add(l.message.clone())
                    ));
                }
                c.exec(what, &dialect::insert_logs(&r, &rows), &p).await?;
            }
            c.commit().await
        })
        .await
    }

    async fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<(u64, LogLine)>> {
        let what = "reading a run log";
        self.retrying(what, || async {
            let shown = &*self.shown;
            let mut c = self.client(what).await?;
            let after = i64::try_from(after.unwrap_or(0)).unwrap_or(i64::MAX);
            let mut p = c.params();
            let sql = format!(
                "SELECT TOP ({}) seq, at, level, message FROM run_logs \
                 WHERE run_id = {} AND seq > {} ORDER BY seq",
                top(limit),
                p.add(run.0),
                p.add(after)
            );
            let rows = c.rows(what, &sql, &p).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let cells = Cells {
                    row: r,
                    shown,
                    what: "a log line",
                };
                let seq = cells.int_req(0)?;
                let row = format!("log line {seq}");
                let level = cells.text_req(2)?;
                out.push((
                    u64::try_from(seq).map_err(|_| corrupt(shown, &row, "seq", seq))?,
                    LogLine {
                        at: Timestamp::from_millisecond(cells.instant_req(1)?)
                            .map_err(|e| corrupt(shown, &row, "at", e))?,
                        level: LogLevel::from_name(&level)
                            .ok_or_else(|| corrupt(shown, &row, "level", &level))?,
                        message: cells.text_req(3)?,
                    },
                ));
            }
            Ok(out)
        })
        .await
    }

    async fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
        let what = "purging old runs";
        self.retrying(what, || async {
            let mut c = self.client(what).await?;
            c.begin("starting a purge").await?;
            let mut p = c.params();
            let cut = p.at(Some(older_than.as_millisecond()));
            let old = format!(
                "SELECT id FROM runs WHERE state NOT IN (N'pending', N'running') \
                 AND finished_at IS NOT NULL AND finished_at < {cut}"
            );
            // Counted first, in the same transaction: affected-row counts are not reliable
            // on every peer, and OUTPUT would send every deleted id back.
            let counts = c
                .row(
                    "counting old runs",
                    &format!(
                        "SELECT (SELECT COUNT(*) FROM runs WHERE id IN ({old})), \
                         (SELECT COUNT(*) FROM run_logs WHERE run_id IN ({old}))"
                    ),
                    &p,
                )
                .await?;
            let (runs, log_lines) = match &counts {
                Some(r) => {
                    let cells = Cells {
                        row: r,
                        shown: &self.shown,
                        what: "old run counts",
                    };
                    (cells.int(0)?.unwrap_or(0), cells.int(1)?.unwrap_or(0))
                }
                None => (0, 0),
            };
            c.exec(
                "purging old log lines",
                &format!("DELETE FROM run_logs WHERE run_id IN ({old})"),
                &p,
            )
            .await?;
            c.exec(what, &format!("DELETE FROM runs WHERE id IN ({old})"), &p)
                .await?;
            c.commit().await?;
            Ok(PurgeCounts {
                runs: u64::try_from(runs).unwrap_or(0),
                log_lines: u64::try_from(log_lines).unwrap_or(0),
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_hides_the_password() {
        let s = "Server=db.plant,1433;Database=mes;User Id=takt;Password=s3cret;\
                 TrustServerCertificate=True";
        let d = describe(s, None);
        assert_eq!(d, "mssql://takt@db.plant:1433/mes");
        assert_eq!(describe(s, Some("t1")), "mssql://takt@db.plant:1433/t1");
        let e = parse_connection_string("Server=;Password=x;;=").map(|_| ());
        if let Err(e) = e {
            assert!(!e.to_string().contains("Password=x"), "{e}");
        }
        assert_eq!(
            inserted("id, name"),
            "INSERTED.id, INSERTED.name",
            "output columns"
        );
    }
}
