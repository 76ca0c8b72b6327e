//! What every backend's migrator shares: the form of an embedded migration file, what was
//! applied, progress reports for operators, and the refusals of a schema that is not this
//! binary's. Each backend applies its own numbered files (`sql/<backend>/`) in its own way
//! (`sqlite/migrate.rs`, `postgres/migrate.rs`, `mssql/migrate.rs`).

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
pub(crate) fn require_current(
    shown: &str,
    current: u32,
    latest: u32,
    newer: fn(&str, u32, u32) -> StoreError,
) -> StoreResult<()> {
    match current {
        0 => Err(no_database(shown)),
        v if v < latest => Err(StoreError::invalid(format!(
            "the takt database at {shown} has schema version {v}, older than this takt's \
             {latest}; run `takt db migrate` on it (or start `takt run`, which migrates); this \
             command changed nothing"
        ))),
        v if v > latest => Err(newer(shown, v, latest)),
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

/// The refusal of a server database (PostgreSQL, SQL Server) migrated by a newer takt.
pub(crate) fn newer_server_schema(shown: &str, version: u32, latest: u32) -> StoreError {
    StoreError::other(format!(
        "the database {shown} has schema version {version}, newer than this takt knows \
         ({latest}); run a takt at least as new as the one that migrated it (takt left it \
         untouched)"
    ))
}
