//! What every backend's migrator shares: the form of an embedded migration file, what was
//! applied, progress reports for operators, and the refusals of a schema that is not this
//! binary's. Each backend applies its own numbered files (`sql/<backend>/`) in its own way
//! (`sqlite/migrate.rs`, `postgres/migrate.rs`, `mssql/migrate.rs`).
//!
//! Also here: [`PoolOptions`], how a server store's pool connects, and the pause of its
//! retries — the same for PostgreSQL and SQL Server.

use std::sync::Arc;
use std::time::Duration;

use takt_core::store::{StoreError, StoreResult};

/// One embedded migration file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// Its number (`1` for `0001_init.sql`).
    pub version: u32,
    /// The rest of its file name (`init`).
    pub name: &'static str,
    /// Its SQL.
    pub sql: &'static str,
}

impl Migration {
    /// Migration `version` named `name` with `sql` (the file's text, `include_str!`).
    pub const fn new(version: u32, name: &'static str, sql: &'static str) -> Migration {
        Migration { version, name, sql }
    }
}

/// The server backends' migrations, one list for both: PostgreSQL and SQL Server share
/// their numbering and names (every schema change lands in `sql/postgres/` and `sql/mssql/`
/// under the same number, each in its own dialect), so the list is written once and each
/// backend embeds the files of its own directory (`server_migrations!("postgres")`). SQLite
/// has its own numbering (its claim-index migration has no server counterpart).
macro_rules! server_migrations {
    ($dir:literal) => {
        &[
            $crate::store::migrate::Migration::new(1, "init", $crate::store::migrate::server_migrations!(@file $dir, "0001_init.sql")),
            $crate::store::migrate::Migration::new(2, "node_identity", $crate::store::migrate::server_migrations!(@file $dir, "0002_node_identity.sql")),
            $crate::store::migrate::Migration::new(3, "isolation_plugin_builds", $crate::store::migrate::server_migrations!(@file $dir, "0003_isolation_plugin_builds.sql")),
            $crate::store::migrate::Migration::new(4, "attempts_node_sessions", $crate::store::migrate::server_migrations!(@file $dir, "0004_attempts_node_sessions.sql")),
            $crate::store::migrate::Migration::new(5, "pauses", $crate::store::migrate::server_migrations!(@file $dir, "0005_pauses.sql")),
            $crate::store::migrate::Migration::new(6, "cancel_requests", $crate::store::migrate::server_migrations!(@file $dir, "0006_cancel_requests.sql")),
            $crate::store::migrate::Migration::new(7, "api_access", $crate::store::migrate::server_migrations!(@file $dir, "0007_api_access.sql")),
            $crate::store::migrate::Migration::new(8, "alerts", $crate::store::migrate::server_migrations!(@file $dir, "0008_alerts.sql")),
            $crate::store::migrate::Migration::new(9, "run_triggers", $crate::store::migrate::server_migrations!(@file $dir, "0009_run_triggers.sql")),
            $crate::store::migrate::Migration::new(10, "continuations", $crate::store::migrate::server_migrations!(@file $dir, "0010_continuations.sql")),
            $crate::store::migrate::Migration::new(11, "job_groups", $crate::store::migrate::server_migrations!(@file $dir, "0011_job_groups.sql")),
            $crate::store::migrate::Migration::new(12, "recurring_jobs", $crate::store::migrate::server_migrations!(@file $dir, "0012_recurring_jobs.sql")),
            $crate::store::migrate::Migration::new(13, "recurring_next_due", $crate::store::migrate::server_migrations!(@file $dir, "0013_recurring_next_due.sql")),
            $crate::store::migrate::Migration::new(14, "redundant_run_index", $crate::store::migrate::server_migrations!(@file $dir, "0014_redundant_run_index.sql")),
        ]
    };
    (@file $dir:literal, $file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../sql/", $dir, "/", $file))
    };
}
pub(crate) use server_migrations;

/// A migration applied at open or by `takt db migrate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppliedMigration {
    /// Its number.
    pub version: u32,
    /// Its name.
    pub name: &'static str,
}

/// What a migration is doing, for [`MigrationObserver`]s: a migration that builds an index on a
/// table of millions of runs takes minutes, and an operator must see that the host is working
/// rather than hung.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationEvent {
    /// The migration starts (inside its transaction).
    Started(Migration),
    /// It is still running, this long after its start (reported at most every
    /// [`PROGRESS_EVERY`]).
    Working(Migration, Duration),
    /// It is committed, after this long.
    Finished(Migration, Duration),
}

/// How often at most a running migration reports [`MigrationEvent::Working`].
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Receives [`MigrationEvent`]s (the CLI prints them; a service may log them). Cheap to clone.
#[derive(Clone)]
pub struct MigrationObserver(Arc<dyn Fn(MigrationEvent) + Send + Sync>);

impl MigrationObserver {
    /// An observer calling `f` for each event (from the migrating thread).
    pub fn new(f: impl Fn(MigrationEvent) + Send + Sync + 'static) -> MigrationObserver {
        MigrationObserver(Arc::new(f))
    }

    pub(crate) fn emit(&self, event: MigrationEvent) {
        (self.0)(event);
    }
}

impl std::fmt::Debug for MigrationObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MigrationObserver")
    }
}

impl PartialEq for MigrationObserver {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for MigrationObserver {}

/// For a command that must not change the schema (everything but `takt init`, `takt db
/// migrate` and `takt run`): refuses a database whose schema is not this binary's, saying how
/// to bring it there. `current` 0 means no takt tables at all.
pub(crate) fn require_current(shown: &str, current: u32, latest: u32) -> StoreResult<()> {
    match current {
        0 => Err(no_database(shown)),
        v if v < latest => Err(StoreError::invalid(format!(
            "the takt database at {shown} has schema version {v}, older than this takt's \
             {latest}; run `takt db migrate` on it (or start `takt run`, which migrates); this \
             command changed nothing"
        ))),
        v if v > latest => Err(newer_schema(shown, v, latest)),
        _ => Ok(()),
    }
}

/// The refusal of a command that must not create a database, on a place without one.
pub(crate) fn no_database(shown: &str) -> StoreError {
    StoreError::not_found(format!(
        "no takt database at {shown}; run `takt init` (a new setup) or `takt db migrate` (an \
         existing one) to create it, or check --db / TAKT_DB / the config's `database`"
    ))
}

/// The refusal of a database migrated by a newer takt, the same words for every backend: a
/// binary must never write to a schema it does not know, and the operator must learn both ways
/// out (a newer binary, or the backup taken before the upgrade).
pub(crate) fn newer_schema(shown: &str, found: u32, latest: u32) -> StoreError {
    StoreError::other(format!(
        "the database {shown} has schema version {found}, but this takt knows versions 1 to \
         {latest} only (the database was migrated by a newer takt); run that takt version or a \
         newer one, or restore a backup taken before the upgrade; takt left it untouched"
    ))
}

/// How a server store's (PostgreSQL's, SQL Server's) connection pool behaves, and whether
/// connecting migrates.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolOptions {
    /// The most connections the pool opens. Default 8: the loop uses one at a time,
    /// finishing runs and log forwarders the rest.
    pub pool_size: usize,
    /// How long opening a connection, or waiting for a free one, may take before the call
    /// fails as transient. Default 5 s.
    pub connect_timeout: Duration,
    /// Told what the migrations applied at connect are doing (none by default).
    pub on_migration: Option<MigrationObserver>,
    /// Create what is missing and apply the migrations the database lacks (the default: a
    /// host and `takt db migrate`). `false` connects only to an existing takt database at
    /// this binary's version and refuses anything else, creating and changing nothing: what
    /// read-only commands use (a `takt job list` must never create tables in a shared
    /// database).
    pub migrate: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            on_migration: None,
            migrate: true,
        }
    }
}

/// The pause of a server store between tries of a call that failed transiently.
pub(crate) async fn server_pause(what: &str, error: &StoreError, pause: Duration) {
    tracing::debug!("{what}: {error}; retrying in {} ms", pause.as_millis());
    tokio::time::sleep(pause).await;
}
