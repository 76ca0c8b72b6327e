//! [`PgStore`]: the core's [`Store`](takt_core::store::Store) contract on PostgreSQL, for
//! several host nodes on one database — the [engine](takt_core::store::engine) over the
//! PostgreSQL dialect (`conn.rs`: sessions and primitives; `rows.rs`: row forms; `error.rs`:
//! error mapping; `migrate.rs`).
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
//! **Finishing** is group commit: the finishes that end while one is being written queue in
//! the engine's `FinishQueue` and go together in one transaction — one `UPDATE … FROM
//! unnest(…)` over their compare-and-sets and attempt ends, their continuations, one COMMIT
//! — each answered after it; alone, a finish is the one-statement finish as before.
//!
//! **Transient errors** (a lost connection, a serialization failure, a deadlock victim, a
//! server shutting down, a full pool) are retried with backoff inside the store when nothing
//! was committed. An error *during* a commit leaves the outcome unknown; the claim resolves it
//! with the claim token it wrote into its runs (it looks up what it claimed, so a claimed run
//! is neither lost nor claimed again), a finish by reading the run back.
//!
//! **Connections** come from a pool (deadpool); each is opened with the configured schema as
//! its `search_path`, so one database can hold several takt installations (and the tests a

mod conn;
mod error;
pub mod migrate;
mod rows;

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use jiff::Timestamp;
use takt_core::run::{Run, RunId};
use takt_core::store::engine::{
    Dialect, DialectStore, Engine, Fail, FinishQueue, FinishStats, FinishWrite, Res, retrying,
};
use takt_core::store::{Capabilities, StoreError, StoreErrorKind, StoreResult};
use tokio_postgres::NoTls;

pub use conn::{PgConn, PgSession};
use error::{pg, pool_error};
pub use migrate::{PG_MIGRATIONS, pg_latest_version};

use super::migrate::{AppliedMigration, PoolOptions, server_pause};

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
    /// The pool, its timeouts, and whether connecting migrates.
    pub pool: PoolOptions,
}

impl PgOptions {
    /// Options for `url` with the defaults.
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            schema: None,
            pool: PoolOptions::default(),
        }
    }

    /// The same options with takt's tables in `schema`.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The same options with another pool size (at least 1).
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool.pool_size = size.max(1);
        self
    }
}

/// A [`Store`](takt_core::store::Store) on a PostgreSQL database; cheap to clone (clones share
/// one pool). Two [`PgStore::connect`] calls are two pools, like two nodes.
#[derive(Clone, Debug)]
pub struct PgStore {
    engine: Engine<PgDialect>,
}

/// The PostgreSQL dialect: the pool and what messages and notifications need.
#[derive(Clone)]
pub struct PgDialect {
    pool: Pool,
    shown: Arc<str>,
    schema: Option<Arc<str>>,
    /// The connection settings (for the listener's own connection).
    config: Arc<tokio_postgres::Config>,
    /// The LISTEN/NOTIFY channel of this installation (one per schema).
    channel: Arc<str>,
    /// The finishes waiting to be committed together (one queue per pool, shared by clones).
    finishes: Arc<FinishQueue>,
}

impl std::fmt::Debug for PgDialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDialect")
            .field("database", &self.shown)
            .finish_non_exhaustive()
    }
}

impl DialectStore for PgStore {
    type Dialect = PgDialect;

    fn engine(&self) -> &Engine<PgDialect> {
        &self.engine
    }
}

impl Dialect for PgDialect {
    type Session = PgSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn session(&self, what: &'static str) -> Res<PgSession> {
        Ok(PgSession {
            client: self.client(what).await?,
            shown: self.shown.clone(),
            channel: self.channel.clone(),
        })
    }

    async fn pause(&self, what: &str, error: &StoreError, pause: Duration) {
        server_pause(what, error, pause).await;
    }

    /// Group commit: the finishes that end while one batch is being written are written
    /// together in the next, in one statement over arrays and one COMMIT.
    async fn finish(&self, id: RunId, attempt: u32, write: &FinishWrite) -> Res<Option<Run>> {
        self.finishes.finish(self, id, attempt, write).await
    }
}

impl PgDialect {
    async fn client(&self, what: &str) -> Result<deadpool_postgres::Object, Fail> {
        self.pool
            .get()
            .await
            .map_err(|e| pool_error(&self.shown, what, e))
    }
}

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
        let shown: Arc<str> = match &options.schema {
            // The schema is part of where: two takt setups may share one database.
            Some(schema) => format!("{} (schema {schema})", describe(&config)).into(),
            None => describe(&config).into(),
        };
        if let Some(schema) = &options.schema {
            check_identifier(schema)?;
            config.options(format!("-c search_path={schema}"));
        }
        config.connect_timeout(options.pool.connect_timeout);
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
            .max_size(options.pool.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.pool.connect_timeout))
            .create_timeout(Some(options.pool.connect_timeout))
            .recycle_timeout(Some(options.pool.connect_timeout))
            .build()
            .map_err(|e| StoreError::other(format!("cannot build a pool for {shown}: {e}")))?;
        let store = PgDialect {
            pool,
            shown,
            schema: options.schema.as_deref().map(Arc::from),
            config: Arc::new(config),
            channel,
            finishes: Arc::default(),
        };
        retrying(&store, "connecting", || async {
            let mut client = store.client("connecting").await?;
            if !options.pool.migrate {
                let current =
                    migrate::current_version(&**client, &store.shown, store.schema.as_deref())
                        .await?;
                super::migrate::require_current(&store.shown, current, pg_latest_version())?;
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
                options.pool.on_migration.as_ref(),
            )
            .await
        })
        .await?;
        Ok(PgStore {
            engine: Engine::new(store),
        })
    }

    /// How many claims of this store (and its clones) had their COMMIT's answer lost to a
    /// broken connection and were resolved by their claim token: found committed (returned as
    /// claimed) or found not committed (claimed again). Diagnostics for operators and tests.
    pub fn unknown_commits(&self) -> u64 {
        self.engine.unknown_commits()
    }

    /// How this store's (and its clones') finishes were committed: batches and the
    /// finishes they held (group commit). Diagnostics for operators, tests and benchmarks.
    pub fn finish_stats(&self) -> FinishStats {
        self.engine.dialect().finishes.stats()
    }

    /// The database, as shown in messages (`postgres://user@host:port/db`, no password).
    pub fn shown(&self) -> &str {
        &self.engine.dialect().shown
    }

    /// The schema version of the database (the last migration applied).
    pub async fn schema_version(&self) -> StoreResult<u32> {
        let d = self.engine.dialect();
        retrying(d, "reading the schema version", || async {
            let client = d.client("reading the schema version").await?;
            migrate::current_version(&**client, &d.shown, d.schema.as_deref()).await
        })
        .await
    }

    /// Applies migrations this binary knows and the database lacks.
    pub async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        let d = self.engine.dialect();
        retrying(d, "migrating", || async {
            let mut client = d.client("migrating").await?;
            migrate::apply(&mut client, &d.shown, d.schema.as_deref(), None).await
        })
        .await
    }

    /// The database server's clock. Nodes correct their own clocks by it, so that what is due
    /// is decided by one clock for every node (see `scheduler::clock::DbClock`).
    pub async fn database_now(&self) -> StoreResult<Timestamp> {
        let d = self.engine.dialect();
        retrying(d, "reading the database clock", || async {
            let client = d.client("reading the database clock").await?;
            let t: SystemTime = client
                .query_one("SELECT clock_timestamp()", &[])
                .await
                .map_err(|e| pg(&d.shown, "reading the database clock", e))?
                .get(0);
            Timestamp::try_from(t).map_err(|e| {
                StoreError::other(format!("the database clock is out of range: {e}")).into()
            })
        })
        .await
    }

    /// Listens for other nodes' and commands' changes (PostgreSQL `LISTEN` on a connection
    /// of its own, outside the pool) and calls `wake` for each: the scheduler then passes at
    /// once instead of at its next safety poll. The task reconnects with backoff when the
    /// connection is lost (and wakes once after reconnecting, for what it missed); it ends when
    /// aborted.
    pub fn listen(&self, wake: impl Fn() + Send + Sync + 'static) -> tokio::task::JoinHandle<()> {
        let d = self.engine.dialect();
        let (config, channel, shown) = (d.config.clone(), d.channel.clone(), d.shown.clone());
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
