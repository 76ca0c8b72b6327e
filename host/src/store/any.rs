//! [`Database`] — where a host's data lives, as configured — and [`AnyStore`], the store it
//! opens: one type for the CLI and `takt run`, whichever backend the configuration names.
//!
//! An enum rather than `Box<dyn Store>`: the core's `Store` returns `impl Future`, so it is not
//! object-safe, and an enum keeps every call statically dispatched.

use std::fmt;
use std::path::{Path, PathBuf};
use takt_core::alert::{AlertDelivery, AlertKey};

use jiff::Timestamp;
use takt_core::attempt::Attempt;
use takt_core::group::{GroupDef, GroupStatus};
use takt_core::job::{JobDef, JobId, JobName};
use takt_core::node::{InstanceId, NodeSession, NodeStatus, Registered, Registration};
use takt_core::pause::{Pause, PauseTarget, Resumed};
use takt_core::run::{NodeId, Progress, Run, RunId};
use takt_core::store::access::{ApiToken, NewToken, OperatorAction};
use takt_core::store::{
    Backfilled, CancelOutcome, CancelRequest, Capabilities, ClaimParams, ClaimedRun, DueJob,
    DueSet, JobPage, JobQuery, LogLine, PurgeCounts, RunFilter, RunFinish, Store, StoreResult,
};

use super::migrate::{AppliedMigration, MigrationObserver};
use super::{MssqlOptions, MssqlStore, PgOptions, PgStore, SqliteOptions, SqliteStore};

/// Where the data lives: a SQLite file, a PostgreSQL database (a connection string starting
/// with `postgres://` or `postgresql://`), or a SQL Server database (an ADO.NET connection
/// string, `Server=host,1433;Database=…;User Id=…;Password=…`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file (created with its directory when missing).
    Sqlite(PathBuf),
    /// A PostgreSQL database.
    Postgres {
        /// The connection string (may hold a password: never print it; see [`Database`]'s
        /// `Display`).
        url: String,
        /// The schema for takt's tables (`None`: the login's default).
        schema: Option<String>,
        /// The connection pool's size.
        pool_size: usize,
    },
    /// A SQL Server database.
    Mssql {
        /// The ADO.NET connection string (may hold a password: never print it; see
        /// [`Database`]'s `Display`).
        connection_string: String,
    },
}

impl Database {
    /// `text` as a database: a SQL Server ADO.NET string, a PostgreSQL URL, else a SQLite
    /// path (relative to `base`). A URL of any other scheme (`mysql://…`, `sqlite://…`) is
    /// refused with the supported forms rather than taken for a file name.
    pub fn parse(text: &str, base: &Path) -> Result<Database, String> {
        if is_mssql_connection_string(text) {
            Ok(Database::Mssql {
                connection_string: text.trim().to_string(),
            })
        } else if is_postgres_url(text) {
            Ok(Database::Postgres {
                url: text.to_string(),
                schema: None,
                pool_size: PgOptions::new("").pool.pool_size,
            })
        } else if let Some(scheme) = url_scheme(text) {
            Err(format!(
                "\"{scheme}://\" is not a database takt supports; give a SQLite file path \
                 (takt.db, /var/lib/takt/takt.db), a PostgreSQL URL \
                 (postgres://user:password@host:5432/db) or a SQL Server connection string \
                 (Server=host,1433;Database=…;User Id=…;Password=…)"
            ))
        } else if text.trim().is_empty() {
            Err(
                "the database is empty; give a SQLite file path, a postgres:// URL or a SQL \
                 Server connection string"
                    .to_string(),
            )
        } else {
            let p = PathBuf::from(text);
            Ok(Database::Sqlite(if p.is_absolute() {
                p
            } else {
                base.join(p)
            }))
        }
    }

    /// The SQLite file, if this is one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Database::Sqlite(p) => Some(p),
            Database::Postgres { .. } | Database::Mssql { .. } => None,
        }
    }

    /// Opens the store for a host or for `takt init` / `takt db migrate`: creates a SQLite
    /// file (and its directory) or connects to a server, and applies missing migrations,
    /// reporting them to `observer`. Must run inside a tokio runtime with I/O and time
    /// enabled (server connections are tasks of it).
    pub async fn open(&self, observer: Option<MigrationObserver>) -> StoreResult<AnyStore> {
        self.open_as(true, observer).await
    }

    /// Opens an existing takt database at this binary's schema, creating and migrating
    /// nothing: what every command but `init`, `db migrate` and `run` uses. A missing file, a
    /// server database without takt's tables and an older or newer schema are refused with
    /// what to run.
    pub async fn open_existing(&self) -> StoreResult<AnyStore> {
        self.open_as(false, None).await
    }

    async fn open_as(
        &self,
        migrate: bool,
        observer: Option<MigrationObserver>,
    ) -> StoreResult<AnyStore> {
        match self {
            Database::Sqlite(path) => {
                if migrate && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    // Best effort: opening reports a missing directory precisely.
                    let _ = std::fs::create_dir_all(dir);
                }
                let options = SqliteOptions {
                    on_migration: observer,
                    migrate,
                    ..SqliteOptions::default()
                };
                Ok(AnyStore::Sqlite(SqliteStore::open(path, &options)?))
            }
            Database::Postgres {
                url,
                schema,
                pool_size,
            } => {
                let mut options = PgOptions::new(url.clone()).with_pool_size(*pool_size);
                options.schema.clone_from(schema);
                options.pool.on_migration = observer;
                options.pool.migrate = migrate;
                Ok(AnyStore::Postgres(PgStore::connect(&options).await?))
            }
            Database::Mssql { connection_string } => {
                let mut options = MssqlOptions::new(connection_string.clone());
                options.pool.on_migration = observer;
                options.pool.migrate = migrate;
                Ok(AnyStore::Mssql(MssqlStore::connect(&options).await?))
            }
        }
    }
}

/// The scheme of `text` if it reads as a URL (`scheme://…`); a Windows path (`C:\\x`) or a
/// plain file name has none.
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.trim().split_once("://")?;
    let mut chars = scheme.chars();
    (chars.next()?.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// Whether `text` is a PostgreSQL connection URL.
pub fn is_postgres_url(text: &str) -> bool {
    let t = text.trim_start().to_ascii_lowercase();
    t.starts_with("postgres://") || t.starts_with("postgresql://")
}

/// Whether `text` is a SQL Server connection string: ADO.NET key=value pairs naming a server
/// (`Server=` or `Data Source=`, any case), which no file path a user means contains.
pub fn is_mssql_connection_string(text: &str) -> bool {
    text.contains(';')
        && text.split(';').any(|part| {
            part.split_once('=').is_some_and(|(k, _)| {
                matches!(
                    k.trim().to_ascii_lowercase().replace(' ', "").as_str(),
                    "server" | "datasource"
                )
            })
        })
}

/// The URL without its password (`postgres://user:***@host/db`).
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

impl fmt::Display for Database {
    /// The file, or the URL with its password replaced by `***` (and the schema, if any).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Sqlite(p) => write!(f, "{}", p.display()),
            Database::Postgres { url, schema, .. } => {
                write!(f, "{}", redact(url))?;
                match schema {
                    Some(s) => write!(f, " (schema {s})"),
                    None => Ok(()),
                }
            }
            Database::Mssql { connection_string } => {
                write!(f, "{}", super::mssql::describe(connection_string, None))
            }
        }
    }
}

/// The store of a configured [`Database`].
#[derive(Clone, Debug)]
pub enum AnyStore {
    /// A SQLite file.
    Sqlite(SqliteStore),
    /// A PostgreSQL database.
    Postgres(PgStore),
    /// A SQL Server database.
    Mssql(MssqlStore),
}

impl AnyStore {
    /// The database's schema version.
    pub async fn schema_version(&self) -> StoreResult<u32> {
        match self {
            AnyStore::Sqlite(s) => s.schema_version(),
            AnyStore::Postgres(s) => s.schema_version().await,
            AnyStore::Mssql(s) => s.schema_version().await,
        }
    }

    /// Applies the migrations the database lacks.
    pub async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        match self {
            AnyStore::Sqlite(s) => s.migrate(),
            AnyStore::Postgres(s) => s.migrate().await,
            AnyStore::Mssql(s) => s.migrate().await,
        }
    }

    /// The newest schema version this binary knows for this backend.
    pub fn latest_version(&self) -> u32 {
        match self {
            AnyStore::Sqlite(_) => super::latest_version(),
            AnyStore::Postgres(_) => super::pg_latest_version(),
            AnyStore::Mssql(_) => super::mssql_latest_version(),
        }
    }

    /// Calls `wake` when another node or a command changes something on a shared database
    /// (PostgreSQL `LISTEN`; see [`PgStore::listen`]); `None` for an embedded file, which only
    /// this process writes while it runs, and for SQL Server, which has no such channel (its
    /// nodes see others' changes at their next pass or safety poll).
    pub fn listen(
        &self,
        wake: impl Fn() + Send + Sync + 'static,
    ) -> Option<tokio::task::JoinHandle<()>> {
        match self {
            AnyStore::Sqlite(_) | AnyStore::Mssql(_) => None,
            AnyStore::Postgres(s) => Some(s.listen(wake)),
        }
    }

    /// The database's own clock where it has one that several nodes share (server databases);
    /// `None` for an embedded file, whose clock is this machine's.
    pub async fn database_now(&self) -> StoreResult<Option<Timestamp>> {
        match self {
            AnyStore::Sqlite(_) => Ok(None),
            AnyStore::Postgres(s) => s.database_now().await.map(Some),
            AnyStore::Mssql(s) => s.database_now().await.map(Some),
        }
    }
}

/// Forwards each `Store` method to the backend.
macro_rules! forward {
    ($( fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty; )*) => {
        $(
            async fn $name(&self $(, $arg: $ty)*) -> $ret {
                match self {
                    AnyStore::Sqlite(s) => s.$name($($arg),*).await,
                    AnyStore::Postgres(s) => s.$name($($arg),*).await,
                    AnyStore::Mssql(s) => s.$name($($arg),*).await,
                }
            }
        )*
    };
}

impl Store for AnyStore {
    fn capabilities(&self) -> Capabilities {
        match self {
            AnyStore::Sqlite(s) => s.capabilities(),
            AnyStore::Postgres(s) => s.capabilities(),
            AnyStore::Mssql(s) => s.capabilities(),
        }
    }

    forward! {
        fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef>;
        fn job_update(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef>;
        fn job_get(&self, id: JobId) -> StoreResult<Option<JobDef>>;
        fn jobs_get(&self, ids: &[JobId]) -> StoreResult<Vec<JobDef>>;
        fn job_count(&self) -> StoreResult<u64>;
        fn jobs_late(&self, before: Timestamp, limit: usize) -> StoreResult<Vec<JobDef>>;
        fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>>;
        fn job_list(&self) -> StoreResult<Vec<JobDef>>;
        fn job_page(&self, query: &JobQuery) -> StoreResult<JobPage>;
        fn job_delete(&self, id: JobId) -> StoreResult<()>;
        fn job_set_enabled(&self, id: JobId, enabled: bool, now: Timestamp) -> StoreResult<JobDef>;
        fn job_set_next_fire(
            &self,
            id: JobId,
            expected: Option<Timestamp>,
            new: Option<Timestamp>
        ) -> StoreResult<()>;
        fn job_due(&self, now: Timestamp, limit: usize, tags: &[String]) -> StoreResult<Vec<DueJob>>;
        fn next_due(&self, tags: &[String], set: DueSet) -> StoreResult<Option<Timestamp>>;
        fn run_claim_due(&self, params: &ClaimParams) -> StoreResult<Vec<ClaimedRun>>;
        fn run_insert_skipped(&self, run: &Run) -> StoreResult<Run>;
        fn run_enqueue(&self, job: JobId, fire: Timestamp, now: Timestamp) -> StoreResult<Run>;
        fn run_set_state_if_running(
            &self,
            id: RunId,
            expected_attempt: u32,
            finish: &RunFinish
        ) -> StoreResult<Run>;
        fn run_get(&self, id: RunId) -> StoreResult<Option<Run>>;
        fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>>;
        fn lease_renew(
            &self,
            node: &NodeId,
            instance: &InstanceId,
            until: Timestamp,
            now: Timestamp
        ) -> StoreResult<Vec<RunId>>;
        fn run_recover_expired(
            &self,
            now: Timestamp,
            restart: Option<(&NodeId, &InstanceId)>
        ) -> StoreResult<Vec<Run>>;
        fn node_register(&self, reg: &Registration) -> StoreResult<Registered>;
        fn node_stopped(&self, node: &NodeId, instance: &InstanceId, now: Timestamp) -> StoreResult<()>;
        fn node_list(&self) -> StoreResult<Vec<NodeStatus>>;
        fn node_sessions(&self, from: Timestamp, to: Timestamp) -> StoreResult<Vec<NodeSession>>;
        fn runs_between(&self, job: Option<JobId>, from: Timestamp, to: Timestamp) -> StoreResult<Vec<Run>>;
        fn run_attempts(&self, run: RunId) -> StoreResult<Vec<Attempt>>;
        fn attempts_between(&self, job: Option<JobId>, from: Timestamp, to: Timestamp) -> StoreResult<Vec<Attempt>>;
        fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()>;
        fn log_append(&self, run: RunId, lines: &[LogLine]) -> StoreResult<()>;
        fn log_list(&self, run: RunId, after: Option<u64>, limit: usize) -> StoreResult<Vec<(u64, LogLine)>>;
        fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts>;
        fn pause(&self, target: &PauseTarget, pause: &Pause) -> StoreResult<Vec<JobId>>;
        fn resume(&self, target: &PauseTarget, now: Timestamp) -> StoreResult<Resumed>;
        fn job_paused(&self, id: JobId) -> StoreResult<Option<(PauseTarget, Pause)>>;
        fn node_paused(&self, node: &NodeId) -> StoreResult<Option<Pause>>;
        fn pause_list(&self) -> StoreResult<Vec<(PauseTarget, Pause)>>;
        fn group_list(&self, now: Timestamp) -> StoreResult<Vec<GroupStatus>>;
        fn group_status(&self, name: &str, now: Timestamp) -> StoreResult<GroupStatus>;
        fn group_set(&self, name: &str, max_running: Option<u32>) -> StoreResult<GroupDef>;
        fn run_cancel(&self, id: RunId, by: &str, now: Timestamp) -> StoreResult<CancelOutcome>;
        fn cancel_requests(&self, node: &NodeId) -> StoreResult<Vec<CancelRequest>>;
        fn cancel_request_of(&self, id: RunId) -> StoreResult<Option<CancelRequest>>;
        fn run_backfill(&self, id: JobId, from: Timestamp, to: Timestamp, max: usize, now: Timestamp) -> StoreResult<Backfilled>;
        fn token_insert(&self, token: &NewToken) -> StoreResult<ApiToken>;
        fn token_list(&self) -> StoreResult<Vec<ApiToken>>;
        fn token_revoke(&self, name: &str, now: Timestamp) -> StoreResult<ApiToken>;
        fn action_insert(&self, action: &OperatorAction) -> StoreResult<()>;
        fn action_list(&self, job: Option<&str>, limit: usize) -> StoreResult<Vec<OperatorAction>>;
        fn alert_open(&self, key: &AlertKey, episode: &str, now: Timestamp) -> StoreResult<bool>;
        fn alert_close(&self, key: &AlertKey, now: Timestamp) -> StoreResult<bool>;
        fn alert_delivery_add(&self, delivery: &AlertDelivery) -> StoreResult<i64>;
        fn alert_delivery_list(&self, limit: usize) -> StoreResult<Vec<AlertDelivery>>;
        fn run_children(&self, parent: RunId) -> StoreResult<Vec<Run>>;
        fn run_last_success_fire(&self, job: JobId, before: Timestamp) -> StoreResult<Option<Timestamp>>;
        fn run_set_params(&self, id: RunId, attempt: u32, params_json: &str) -> StoreResult<()>;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        let base = Path::new("/etc/takt");
        let parse = |t: &str, b: &Path| Database::parse(t, b).unwrap();
        assert_eq!(
            parse("takt.db", base),
            Database::Sqlite(PathBuf::from("/etc/takt/takt.db"))
        );
        assert_eq!(
            parse("/var/lib/t.db", base),
            Database::Sqlite(PathBuf::from("/var/lib/t.db"))
        );
        let pg = parse("postgresql://takt:s3cret@db:5432/mes?sslmode=disable", base);
        assert!(matches!(pg, Database::Postgres { .. }));
        let shown = pg.to_string();
        assert_eq!(shown, "postgresql://takt:***@db:5432/mes?sslmode=disable");
        assert!(!shown.contains("s3cret"));
        let ms = parse(
            "Server=db.plant,1433;Database=mes;User Id=takt;Password=s3cret;Encrypt=False",
            base,
        );
        assert!(matches!(ms, Database::Mssql { .. }), "{ms:?}");
        assert_eq!(ms.to_string(), "mssql://takt@db.plant:1433/mes");
        assert!(matches!(
            parse("data source=db;database=mes;uid=t;pwd=x", base),
            Database::Mssql { .. }
        ));
        assert!(matches!(parse("server.db", base), Database::Sqlite(_)));
        for bad in ["mysql://x@y/z", "sqlite://takt.db", " file:///tmp/x.db"] {
            let e = Database::parse(bad, base).unwrap_err();
            assert!(e.contains("is not a database takt supports"), "{e}");
            assert!(e.contains("postgres://user:password@host:5432/db"), "{e}");
        }
        assert!(Database::parse("  ", base).is_err());
        assert!(matches!(
            parse("C:\\takt\\takt.db", base),
            Database::Sqlite(_)
        ));
        assert_eq!(
            redact("postgres://takt@db/mes"),
            "postgres://takt@db/mes",
            "no password, nothing to hide"
        );
    }
}
