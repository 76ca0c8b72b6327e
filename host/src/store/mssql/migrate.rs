//! Schema migrations for the SQL Server store: the numbered files of `sql/mssql/`, embedded in
//! the binary, each applied in one transaction (its `GO`-separated batches in order) and
//! recorded in `schema_migrations`.
//!
//! Nodes starting together take the application lock `takt_migrate` (`sp_getapplock`, owned by
//! the transaction) and re-check the version once they hold it, so a migration is applied
//! once, whoever gets there first. A database migrated by a newer takt is refused, untouched.

use std::time::Instant;

use takt_core::store::StoreError;

use super::conn::{Cells, Fail, Params, Pooled};
use crate::store::migrate::{
    AppliedMigration, Migration, MigrationEvent, MigrationObserver, newer_schema,
};

/// Every SQL Server migration this binary knows, in order.
pub const MSSQL_MIGRATIONS: &[Migration] = crate::store::migrate::server_migrations!("mssql");

/// The schema version this binary writes for SQL Server.
pub fn mssql_latest_version() -> u32 {
    MSSQL_MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The batches of a migration file: the text between `GO` lines (as sqlcmd splits it), blank
/// and comment-only batches dropped.
pub(crate) fn batches(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in sql.lines() {
        if line.trim().eq_ignore_ascii_case("go") {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push_str(line);
            cur.push('\n');
        }
    }
    out.push(cur);
    out.into_iter()
        .filter(|b| {
            b.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
        })
        .collect()
}

/// The version recorded in `schema_migrations`, 0 when the table does not exist.
pub(super) async fn current_version(c: &mut Pooled, shown: &str) -> Result<u32, Fail> {
    let what = "reading the schema version";
    let exists = c
        .row(
            what,
            "SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES \
             WHERE TABLE_NAME = N'schema_migrations' AND TABLE_SCHEMA = SCHEMA_NAME()",
            &Params::default(),
        )
        .await?;
    let n = match &exists {
        Some(r) => Cells {
            row: r,
            shown,
            what,
        }
        .int(0)?
        .unwrap_or(0),
        None => 0,
    };
    if n == 0 {
        return Ok(0);
    }
    let v = c
        .row(
            what,
            "SELECT MAX(version) FROM schema_migrations",
            &Params::default(),
        )
        .await?;
    let v = match &v {
        Some(r) => Cells {
            row: r,
            shown,
            what,
        }
        .int(0)?,
        None => None,
    };
    Ok(v.map_or(0, |v| u32::try_from(v).unwrap_or(0)))
}

/// Applies what the database lacks, reporting progress to `observer`. `emulator`: the peer
/// cannot run `sp_getapplock` or some of the file's statements; see [`super::dialect`].
pub(super) async fn apply(
    c: &mut Pooled,
    shown: &str,
    emulator: bool,
    observer: Option<&MigrationObserver>,
) -> Result<Vec<AppliedMigration>, Fail> {
    let current = current_version(c, shown).await?;
    if current > mssql_latest_version() {
        return Err(newer_schema(shown, current, mssql_latest_version()).into());
    }
    let mut applied = Vec::new();
    for m in MSSQL_MIGRATIONS.iter().filter(|m| m.version > current) {
        c.begin("starting a migration").await?;
        if !emulator {
            // Owned by the transaction: released by COMMIT, ROLLBACK or a lost connection.
            c.batch(
                "waiting for the migration lock",
                "DECLARE @r INT; \
                 EXEC @r = sp_getapplock @Resource = N'takt_migrate', @LockMode = N'Exclusive', \
                      @LockOwner = N'Transaction', @LockTimeout = 120000; \
                 IF @r < 0 THROW 50001, N'takt: the migration lock was not granted within 120 s', 1;",
            )
            .await?;
        }
        // Another node may have applied it while this one waited for the lock.
        if current_version(c, shown).await? >= m.version {
            c.rollback().await?;
            continue;
        }
        let started = Instant::now();
        if let Some(o) = observer {
            o.emit(MigrationEvent::Started(*m));
        }
        let what = format!("applying migration {:04}_{}.sql", m.version, m.name);
        for b in batches(m.sql) {
            let b = if emulator {
                super::dialect::for_emulator(&b)
            } else {
                b
            };
            if b.trim().is_empty() {
                continue;
            }
            c.batch(&what, &b).await?;
            if let Some(o) = observer {
                o.emit(MigrationEvent::Working(*m, started.elapsed()));
            }
        }
        let recorded = current_version(c, shown).await?;
        if recorded != m.version {
            return Err(StoreError::other(format!(
                "migration {:04}_{}.sql did not record itself in schema_migrations of {shown}; \
                 the file is damaged: rebuild takt",
                m.version, m.name
            ))
            .into());
        }
        c.commit().await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_go_lines_like_sqlcmd() {
        let b = batches(
            "-- head\nSET X ON;\nGO\n\nCREATE TABLE t (a INT);\n  go  \n-- only a comment\nGO\n",
        );
        assert_eq!(b, ["-- head\nSET X ON;\n", "\nCREATE TABLE t (a INT);\n"]);
        assert!(batches(MSSQL_MIGRATIONS[0].sql).len() > 5);
    }
}
