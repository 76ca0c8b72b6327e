//! [`MssqlStore`]: the core's [`Store`](takt_core::store::Store) contract on SQL Server (2017
//! or newer, Azure SQL), for several host nodes on one database — where the seeds' `T_Task_*`
//! tables already live: the [engine](takt_core::store::engine) over the SQL Server dialect
//! (`session.rs`: sessions and primitives; `rows.rs`: row forms; `conn.rs`: the connection
//! pool, parameters and cells; `dialect.rs`: the emulator's fallbacks; `migrate.rs`).
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
//! **Finishing** is group commit, as on PostgreSQL: the finishes that end while a batch is
//! being written wait in the engine's `FinishQueue` and go together in one transaction — one
//! `UPDATE runs … FROM (VALUES …)` per 128 finishes (SQL Server has no arrays, and a request
//! holds at most 2 100 parameters), one for their attempts, the continuations, one COMMIT. Each
//! finish is still its own compare-and-set (running, with its attempt), answered by id after
//! the COMMIT.
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
//! proven there ([`Capabilities::concurrent_claims`](takt_core::store::Capabilities::concurrent_claims) false), since the emulator enforces no
//! composite unique index and its READPAST skips nothing.

mod conn;
mod dialect;
pub mod migrate;
mod rows;
mod session;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use takt_core::run::{Run, RunId};
use takt_core::store::engine::{
    Dialect, DialectStore, Engine, Fail, FinishQueue, FinishStats, FinishWrite, Res, retrying,
};
use takt_core::store::{Capabilities, StoreError, StoreResult};
use tiberius::Config;

use self::conn::{Cells, Params, Pool, Pooled};
use super::migrate::{AppliedMigration, PoolOptions, server_pause};
pub use migrate::{MSSQL_MIGRATIONS, mssql_latest_version};
pub use session::{MssqlConn, MssqlSession};

/// How a [`MssqlStore`] connects.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MssqlOptions {
    /// An ADO.NET connection string: `Server=host,1433;Database=mes;User Id=takt;
    /// Password=…;TrustServerCertificate=True` (`Encrypt=False` for a server without TLS).
    pub connection_string: String,
    /// Use this database instead of the string's `Database=` (tests use a fresh one each).
    pub database: Option<String>,
    /// The pool, its timeouts, and whether connecting migrates.
    pub pool: PoolOptions,
}

impl MssqlOptions {
    /// Options for `connection_string` with the defaults.
    pub fn new(connection_string: impl Into<String>) -> MssqlOptions {
        MssqlOptions {
            connection_string: connection_string.into(),
            database: None,
            pool: PoolOptions::default(),
        }
    }

    /// The same options on another database of the same server.
    pub fn with_database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// The same options with another pool size (at least 1).
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool.pool_size = size.max(1);
        self
    }
}

/// A [`Store`](takt_core::store::Store) on a SQL Server database; cheap to clone (clones share
/// one pool). Two [`MssqlStore::connect`] calls are two pools, like two nodes.
#[derive(Clone, Debug)]
pub struct MssqlStore {
    engine: Engine<MssqlDialect>,
}

/// The SQL Server dialect: the pool, and whether the peer is the emulator.
#[derive(Clone)]
pub struct MssqlDialect {
    pool: Pool,
    shown: Arc<str>,
    /// The peer is the iridium emulator (see the module docs).
    emulator: bool,
    /// The finishes waiting to be committed together (one queue per pool, shared by clones).
    finishes: Arc<FinishQueue>,
}

impl std::fmt::Debug for MssqlDialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MssqlDialect")
            .field("database", &self.shown)
            .field("emulator", &self.emulator)
            .finish_non_exhaustive()
    }
}

impl DialectStore for MssqlStore {
    type Dialect = MssqlDialect;

    fn engine(&self) -> &Engine<MssqlDialect> {
        &self.engine
    }
}

impl Dialect for MssqlDialect {
    type Session = MssqlSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // The emulator enforces no composite unique index and its READPAST skips nothing,
            // so exactly-once under concurrent claimers cannot be shown there.
            concurrent_claims: !self.emulator,
            ..Capabilities::ALL
        }
    }

    async fn session(&self, what: &'static str) -> Res<MssqlSession> {
        Ok(MssqlSession {
            pooled: self.client(what).await?,
            shown: self.shown.clone(),
            emulator: self.emulator,
        })
    }

    async fn pause(&self, what: &str, error: &StoreError, pause: Duration) {
        server_pause(what, error, pause).await;
    }

    /// Group commit, as on PostgreSQL: the finishes that end while one batch is being written
    /// are written together in the next, in one `UPDATE … FROM (VALUES …)` and one COMMIT.
    async fn finish(&self, id: RunId, attempt: u32, write: &FinishWrite) -> Res<Option<Run>> {
        self.finishes.finish(self, id, attempt, write).await
    }
}

impl MssqlDialect {
    async fn client(&self, what: &str) -> Result<Pooled, Fail> {
        self.pool.get(what).await
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
            options.pool.connect_timeout,
            Vec::new(),
            false,
        );
        let probing = MssqlDialect {
            pool: probe.clone(),
            shown: shown.clone(),
            emulator: false,
            finishes: Arc::default(),
        };
        let emulator = retrying(&probing, "connecting", || async {
            let mut c = probe.get("connecting").await?;
            dialect::is_emulator(&mut c, &shown).await
        })
        .await?;
        drop(probing);
        drop(probe);
        let setup = if emulator { Vec::new() } else { vec![SESSION] };
        let pool = Pool::new(
            config,
            shown.clone(),
            options.pool.pool_size,
            options.pool.connect_timeout,
            setup,
            emulator,
        );
        let store = MssqlDialect {
            pool,
            shown,
            emulator,
            finishes: Arc::default(),
        };
        retrying(&store, "migrating", || async {
            let mut c = store.client("migrating").await?;
            if !options.pool.migrate {
                let current = migrate::current_version(&mut c, &store.shown).await?;
                super::migrate::require_current(&store.shown, current, mssql_latest_version())?;
                return Ok(Vec::new());
            }
            migrate::apply(
                &mut c,
                &store.shown,
                store.emulator,
                options.pool.on_migration.as_ref(),
            )
            .await
        })
        .await?;
        Ok(MssqlStore {
            engine: Engine::new(store),
        })
    }

    /// The database, as shown in messages (`mssql://user@host:port/db`, no password).
    pub fn shown(&self) -> &str {
        &self.engine.dialect().shown
    }

    /// Whether the peer is the iridium emulator, where the checks that need a real server's
    /// locking and unique indexes are declared missing (`Store::capabilities`).
    pub fn is_emulator(&self) -> bool {
        self.engine.dialect().emulator
    }

    /// How many claims had their COMMIT's answer lost and were resolved by their claim token
    /// (diagnostics).
    pub fn unknown_commits(&self) -> u64 {
        self.engine.unknown_commits()
    }

    /// How this store's (and its clones') finishes were committed: batches and the
    /// finishes they held (group commit). Diagnostics for operators, tests and benchmarks.
    pub fn finish_stats(&self) -> FinishStats {
        self.engine.dialect().finishes.stats()
    }

    /// The schema version of the database (the last migration applied).
    pub async fn schema_version(&self) -> StoreResult<u32> {
        let d = self.engine.dialect();
        retrying(d, "reading the schema version", || async {
            let mut c = d.client("reading the schema version").await?;
            migrate::current_version(&mut c, &d.shown).await
        })
        .await
    }

    /// Applies migrations this binary knows and the database lacks.
    pub async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        let d = self.engine.dialect();
        retrying(d, "migrating", || async {
            let mut c = d.client("migrating").await?;
            migrate::apply(&mut c, &d.shown, d.emulator, None).await
        })
        .await
    }

    /// The database server's clock (`SYSUTCDATETIME()`). Nodes correct their own clocks by it,
    /// so that what is due is decided by one clock for every node.
    pub async fn database_now(&self) -> StoreResult<Timestamp> {
        let what = "reading the database clock";
        let d = self.engine.dialect();
        retrying(d, what, || async {
            let mut c = d.client(what).await?;
            let sql = format!("SELECT {}", dialect::clock(d.emulator));
            let row = c.row(what, &sql, &Params::default()).await?;
            let ms = match &row {
                Some(r) => Cells {
                    row: r,
                    shown: &d.shown,
                    what: "the database clock",
                }
                .instant_req(0)?,
                None => return Err(StoreError::other("the database returned no clock").into()),
            };
            let ms = dialect::clock_ms(d.emulator, ms);
            Timestamp::from_millisecond(ms).map_err(|e| {
                StoreError::other(format!("the database clock is out of range: {e}")).into()
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
            rows::inserted("id, name"),
            "INSERTED.id, INSERTED.name",
            "output columns"
        );
    }
}
