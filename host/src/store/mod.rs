//! The host's storage backends for the core's [`takt_core::store::Store`] contract.
//!
//! * [`sqlite`] — [`SqliteStore`]: one file, WAL, the schema and numbered migrations of
//!   `sql/sqlite/` ([`mod@migrate`]). For a single node or a few nodes on one machine.
//!
//! The in-memory reference store lives in the core ([`takt_core::store::memory`]); every
//! backend here passes the core's conformance suite ([`takt_core::store::conformance`]).

pub mod migrate;
pub mod sqlite;

pub use migrate::{
    AppliedMigration, MIGRATIONS, Migration, MigrationEvent, MigrationObserver, latest_version,
    migrate,
};
pub use sqlite::{SqliteOptions, SqliteStore};
