//! The host's storage backends for the core's [`takt_core::store::Store`] contract.
//!
//! * [`sqlite`] — [`SqliteStore`]: one file, WAL, the schema and numbered migrations of
//!   `sql/sqlite/` ([`mod@migrate`]). For a single node or a few nodes on one machine.
//! * [`postgres`] — [`PgStore`]: a pool of connections to PostgreSQL, the schema and
//!   migrations of `sql/postgres/`. For several nodes on one database.
//! * [`mssql`] — [`MssqlStore`]: a pool of connections to SQL Server, the schema and
//!   migrations of `sql/mssql/`. For several nodes on the database the seeds already use.
//!
//! The in-memory reference store lives in the core ([`takt_core::store::memory`]); every
//! backend here passes the core's conformance suite ([`takt_core::store::conformance`]) and
//! the migration checks of [`mod@conformance`].

pub mod any;
pub mod conformance;
mod host_lock;
pub mod migrate;
pub mod mssql;
pub mod postgres;
mod rows;
pub mod sqlite;

pub use any::{AnyStore, Database, is_mssql_connection_string, is_postgres_url};
pub use migrate::{AppliedMigration, Migration, MigrationEvent, MigrationObserver, PoolOptions};
pub use mssql::{MSSQL_MIGRATIONS, MssqlOptions, MssqlStore, mssql_latest_version};
pub use postgres::{PG_MIGRATIONS, PgOptions, PgStore, pg_latest_version};
pub use sqlite::migrate::migrate;
pub use sqlite::{MIGRATIONS, SqliteOptions, SqliteStore, latest_version};
