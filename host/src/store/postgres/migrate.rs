//! Schema migrations for the PostgreSQL store: the numbered files of `sql/postgres/`, embedded
//! in the binary, applied in order, each in its own transaction, and recorded in
//! `schema_migrations`.
//!
//! Several nodes often start together against one database, so every migration runs under a
//! transaction-scoped advisory lock and re-checks, once it holds the lock, whether another node
//! applied it meanwhile: a migration is applied once, whoever gets there first. As on SQLite, a
//! database migrated by a newer takt is refused and never touched.

use std::time::Instant;

use takt_core::store::StoreError;
use tokio_postgres::Client;

use super::{Fail, pg};
use crate::store::migrate::{
    AppliedMigration, Migration, MigrationEvent, MigrationObserver, PROGRESS_EVERY, newer_schema,
};

/// Every PostgreSQL migration this binary knows, in order.
pub const PG_MIGRATIONS: &[Migration] = crate::store::migrate::server_migrations!("postgres");

/// The advisory-lock key of takt's migrations (an arbitrary constant: "takt" in ASCII).
const LOCK_KEY: i64 = 0x7461_6b74;

/// The schema version this binary writes for PostgreSQL.
pub fn pg_latest_version() -> u32 {
    PG_MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The version recorded in `schema_migrations`, 0 when the table does not exist.
///
/// `schema` is the configured schema (`None`: the session's current schema). It is compared by
/// name because a session opened before another node created the schema may still resolve
/// its `search_path` (and so `current_schema()`) from its stale catalog cache.
pub(super) async fn current_version(
    client: &impl tokio_postgres::GenericClient,
    shown: &str,
    schema: Option<&str>,
) -> Result<u32, Fail> {
    // A query on the catalog tables, not `to_regclass`: that reads the session's catalog cache,
    // which may not yet show a table another node created while this one waited for the lock.
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
             WHERE schemaname = COALESCE($1, current_schema()) \
             AND tablename = 'schema_migrations')",
            &[&schema],
        )
        .await
        .map_err(|e| pg(shown, "reading the schema version", e))?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let v: Option<i32> = client
        .query_one("SELECT MAX(version) FROM schema_migrations", &[])
        .await
        .map_err(|e| pg(shown, "reading the schema version", e))?
        .get(0);
    Ok(v.map_or(0, |v| u32::try_from(v).unwrap_or(0)))
}

/// Applies what the database lacks, reporting progress to `observer`.
pub(super) async fn apply(
    client: &mut Client,
    shown: &str,
    schema: Option<&str>,
    observer: Option<&MigrationObserver>,
) -> Result<Vec<AppliedMigration>, Fail> {
    let current = current_version(client, shown, schema).await?;
    if current > pg_latest_version() {
        return Err(newer_schema(shown, current, pg_latest_version()).into());
    }
    let mut applied = Vec::new();
    for m in PG_MIGRATIONS.iter().filter(|m| m.version > current) {
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg(shown, "starting a migration", e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
            .await
            .map_err(|e| pg(shown, "waiting for the migration lock", e))?;
        // Another node may have applied it while this one waited for the lock.
        let now_at = current_version(&tx, shown, schema).await?;
        if now_at >= m.version {
            tx.rollback()
                .await
                .map_err(|e| pg(shown, "ending a migration", e))?;
            continue;
        }
        let started = Instant::now();
        if let Some(o) = observer {
            o.emit(MigrationEvent::Started(*m));
        }
        let result = {
            let run = tx.batch_execute(m.sql);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    r = &mut run => break r,
                    () = tokio::time::sleep(PROGRESS_EVERY) => {
                        if let Some(o) = observer {
                            o.emit(MigrationEvent::Working(*m, started.elapsed()));
                        }
                    }
                }
            }
        };
        result.map_err(|e| {
            pg(
                shown,
                &format!("applying migration {:04}_{}.sql", m.version, m.name),
                e,
            )
        })?;
        let recorded = current_version(&tx, shown, schema).await?;
        if recorded != m.version {
            return Err(StoreError::other(format!(
                "migration {:04}_{}.sql did not record itself in schema_migrations of {shown}; \
                 the file is damaged: rebuild takt",
                m.version, m.name
            ))
            .into());
        }
        tx.commit()
            .await
            .map_err(|e| pg(shown, "committing a migration", e))?;
        if let Some(o) = observer {
            o.emit(MigrationEvent::Finished(*m, started.elapsed()));
        }
        applied.push(AppliedMigration {
            version: m.version,
            name: m.name,
        });
    }
    Ok(applied)
}
