//! Schema migrations for the SQLite store: the numbered files of `sql/sqlite/`, embedded in the
//! binary, applied in order, each in its own transaction, and recorded in `schema_migrations`.
//!
//! Each file ends by recording itself (`INSERT INTO schema_migrations …`), so a DBA can also
//! apply it by hand with `sqlite3`; the migrator checks that it did. Applying twice is a no-op.
//! A database migrated by a newer takt (a version this binary does not know) is refused, never
//! touched: an older binary must not write rows a newer schema may interpret differently.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
use takt_core::store::{StoreError, StoreResult};

use super::SqliteOptions;
use super::connect::{connect, sql_error};
use crate::store::migrate::{
    AppliedMigration, Migration, MigrationEvent, MigrationObserver, PROGRESS_EVERY, newer_schema,
};

/// A file of `sql/sqlite/`, compiled in.
macro_rules! sql {
    ($file:literal) => {
        include_str!(concat!("../../../../sql/sqlite/", $file))
    };
}

/// Every migration this binary knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration::new(1, "init", sql!("0001_init.sql")),
    Migration::new(2, "claim_indexes", sql!("0002_claim_indexes.sql")),
    Migration::new(3, "node_identity", sql!("0003_node_identity.sql")),
    Migration::new(
        4,
        "isolation_plugin_builds",
        sql!("0004_isolation_plugin_builds.sql"),
    ),
    Migration::new(
        5,
        "attempts_node_sessions",
        sql!("0005_attempts_node_sessions.sql"),
    ),
    Migration::new(6, "pauses", sql!("0006_pauses.sql")),
    Migration::new(7, "cancel_requests", sql!("0007_cancel_requests.sql")),
    Migration::new(8, "api_access", sql!("0008_api_access.sql")),
    Migration::new(9, "alerts", sql!("0009_alerts.sql")),
    Migration::new(10, "run_triggers", sql!("0010_run_triggers.sql")),
    Migration::new(11, "continuations", sql!("0011_continuations.sql")),
    Migration::new(12, "job_groups", sql!("0012_job_groups.sql")),
    Migration::new(13, "recurring_jobs", sql!("0013_recurring_jobs.sql")),
    Migration::new(
        14,
        "recurring_next_due",
        sql!("0014_recurring_next_due.sql"),
    ),
    Migration::new(
        15,
        "redundant_run_index",
        sql!("0015_redundant_run_index.sql"),
    ),
    Migration::new(
        16,
        "partial_run_state_indexes",
        sql!("0016_partial_run_state_indexes.sql"),
    ),
    Migration::new(
        17,
        "checks_without_in_lists",
        sql!("0017_checks_without_in_lists.sql"),
    ),
];

/// The schema version this binary writes (the last migration's number).
pub fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The bookkeeping table; the same statement opens `0001_init.sql`.
const BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL
)";

/// Opens (creating) the database at `path` and applies the migrations it lacks: what
/// `takt db migrate` runs. Returns the migrations applied now (empty when the schema was
/// already current). A database from a newer takt is refused with an error naming both
/// versions.
pub fn migrate(
    path: impl AsRef<Path>,
    options: &SqliteOptions,
) -> StoreResult<Vec<AppliedMigration>> {
    let path = path.as_ref();
    let mut conn = connect(path, options)?;
    apply(
        &mut conn,
        &path.display().to_string(),
        options.on_migration.as_ref(),
    )
}

/// The highest version recorded in `schema_migrations` (0 for a new database).
pub(crate) fn current_version(conn: &Connection, path: &str) -> StoreResult<u32> {
    let exists: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| sql_error(path, "reading the schema version", e))?;
    if exists.is_none() {
        return Ok(0);
    }
    let v: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .map_err(|e| sql_error(path, "reading the schema version", e))?;
    u32::try_from(v.unwrap_or(0)).map_err(|_| {
        StoreError::other(format!(
            "the database {path} records schema version {} in schema_migrations, which is not \
             a takt version; restore the database from a backup",
            v.unwrap_or(0)
        ))
    })
}

/// Applies the missing migrations on `conn` (the database at `path`, for messages).
pub(crate) fn apply(
    conn: &mut Connection,
    path: &str,
    observer: Option<&MigrationObserver>,
) -> StoreResult<Vec<AppliedMigration>> {
    // The migration running now, when it started and when it last reported.
    let current: Arc<Mutex<Option<(Migration, Instant, Instant)>>> = Arc::default();
    if let Some(o) = observer {
        // SQLite calls this every N virtual-machine steps of the running statement: the only
        // way to hear from inside one long CREATE INDEX.
        let o = o.clone();
        let current = current.clone();
        conn.progress_handler(
            100_000,
            Some(move || {
                let mut current = current.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some((m, begun, last)) = current.as_mut()
                    && last.elapsed() >= PROGRESS_EVERY
                {
                    *last = Instant::now();
                    o.emit(MigrationEvent::Working(*m, begun.elapsed()));
                }
                false // never interrupt
            }),
        )
        .map_err(|e| sql_error(path, "watching the migrations' progress", e))?;
    }
    let result = apply_all(conn, path, observer, &current);
    if observer.is_some() {
        // Removing the handler can only fail on a closed connection, which the next
        // statement reports anyway.
        let _ = conn.progress_handler(0, None::<fn() -> bool>);
    }
    result
}

fn apply_all(
    conn: &mut Connection,
    path: &str,
    observer: Option<&MigrationObserver>,
    running: &Mutex<Option<(Migration, Instant, Instant)>>,
) -> StoreResult<Vec<AppliedMigration>> {
    let latest = latest_version();
    let current = current_version(conn, path)?;
    if current > latest {
        return Err(newer_schema(path, current, latest));
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        let what = format!("applying migration {:04}_{}", m.version, m.name);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_error(path, &what, e))?;
        // Another process may have migrated while we waited for the write lock.
        let now_current = current_version(&tx, path)?;
        if now_current > latest {
            return Err(newer_schema(path, now_current, latest));
        }
        if now_current >= m.version {
            continue;
        }
        let begun = Instant::now();
        if let Some(o) = observer {
            o.emit(MigrationEvent::Started(*m));
        }
        *running.lock().unwrap_or_else(PoisonError::into_inner) = Some((*m, begun, begun));
        let result = tx
            .execute_batch(BOOKKEEPING)
            .and_then(|()| tx.execute_batch(m.sql));
        result.map_err(|e| sql_error(path, &what, e))?;
        let recorded: Option<String> = tx
            .query_row(
                "SELECT name FROM schema_migrations WHERE version = ?1",
                [m.version],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| sql_error(path, &what, e))?;
        if recorded.as_deref() != Some(m.name) {
            return Err(StoreError::other(format!(
                "migration {:04}_{}.sql did not record itself in schema_migrations (version {}, \
                 name {}); the file is broken: end it with the INSERT INTO schema_migrations \
                 statement",
                m.version, m.name, m.version, m.name
            )));
        }
        tx.commit().map_err(|e| sql_error(path, &what, e))?;
        *running.lock().unwrap_or_else(PoisonError::into_inner) = None;
        if let Some(o) = observer {
            o.emit(MigrationEvent::Finished(*m, begun.elapsed()));
        }
        applied.push(AppliedMigration {
            version: m.version,
            name: m.name,
        });
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_record_themselves() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "migrations are numbered 1, 2, …");
            assert!(
                m.sql.contains(&format!(
                    "INSERT INTO schema_migrations (version, name, applied_at)\nVALUES ({}, '{}'",
                    m.version, m.name
                )),
                "migration {} records itself",
                m.version
            );
        }
        assert_eq!(latest_version(), MIGRATIONS.len() as u32);
    }
}
