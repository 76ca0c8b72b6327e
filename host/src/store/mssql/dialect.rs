//! Where the store's SQL depends on the peer: real SQL Server (2017+, Azure SQL) or the
//! `iridium-server` emulator that development machines and CI run instead.
//!
//! The store's statements and `sql/mssql/` are written for the real server. Only where a
//! statement cannot run on the emulator at all is there a fallback here, chosen once per store
//! by [`is_emulator`]; each says what it gives up. Nothing here changes what the real server
//! runs. What the emulator lacks (iridium-server 0.1.13, found by probing):
//!
//! * `DATETIME2(3)` does not parse, and a `DATETIME2` column or `SYSUTCDATETIME()` cannot be
//!   sent to a client (tiberius: "protocol error: invalid token type"); `DATETIME` values
//!   arrive with their days counted from 2000-01-01 instead of 1900-01-01. So on the emulator
//!   instants are stored as `BIGINT` Unix milliseconds and sent as such.
//! * Filtered indexes (`CREATE INDEX … WHERE …`), column-level `CONSTRAINT name UNIQUE` /
//!   `REFERENCES … ON DELETE CASCADE` do not parse: the emulator gets the index without its
//!   filter, and the real schema uses table-level constraints (the same to SQL Server).
//! * An `UPDATE` of a row referenced by a `FOREIGN KEY … ON DELETE CASCADE` deletes the
//!   referencing rows (enabling a job deleted its runs): the emulator gets no foreign keys.
//! * `JOIN … ON` returns no rows: the store writes its joins as `FROM a, b WHERE …`.
//! * Affected-row counts are always 0: the store counts `OUTPUT` rows instead.
//! * `@@ROWCOUNT`, `@@TRANCOUNT` and `DROP TABLE IF EXISTS` do not parse; NULLs in `OUTPUT`
//!   come as text-typed NULLs (the readers accept a NULL of any type).
//! * `sp_getapplock` does not exist: the emulator migrates without the lock (one test process
//!   at a time uses it).
//! * A composite UNIQUE index is not enforced and READPAST skips no locked row: concurrent
//!   claims are not exactly-once there, and under load a finish committed beside
//!   concurrent ones was seen lost (the run still running), which the store declares
//!   (`Capabilities::concurrent_claims` false).
//! * An `UPDATE … FROM t, (VALUES (@P1, …), …)` whose rows are parameters updates only the
//!   first matching row (the same statement with literals updates them all): a batch of
//!   finishes is written there one statement pair per finish, in the batch's one transaction
//!   ([`joined_updates`]), so group commit still holds but the real server's one statement
//!   per batch is checked only on a real server.
//! * `CREATE DATABASE` does not parse and `Database=` does not separate data: the tests empty
//!   the tables instead of using a database each.

use takt_core::store::StoreErrorKind;

use super::conn::{Cells, Fail, Params, Pooled};

/// Whether the peer is the emulator: its `@@VERSION` names it (it claims to be SQL Server
/// 2022 otherwise), or it cannot answer `@@VERSION` at all (every real SQL Server can).
pub(super) async fn is_emulator(c: &mut Pooled, shown: &str) -> Result<bool, Fail> {
    let what = "reading the server version";
    let row = match c.row(what, "SELECT @@VERSION", &Params::default()).await {
        Ok(r) => r,
        Err(f) if f.error.kind() == StoreErrorKind::Other => return Ok(true),
        Err(f) => return Err(f),
    };
    let version = match &row {
        Some(r) => Cells {
            row: r,
            shown,
            what: "the server version",
        }
        .text(0)
        .ok()
        .flatten()
        .unwrap_or_default(),
        None => String::new(),
    };
    let emulator = version.to_ascii_lowercase().contains("iridium")
        || !(version.contains("Microsoft SQL") || version.contains("Azure SQL"));
    if emulator {
        tracing::warn!(
            "{shown} is an emulator, not microsoft sql server ({}); using its fallbacks: \
             concurrent claims are not guaranteed there",
            version.lines().next().unwrap_or("no version")
        );
    }
    Ok(emulator)
}

/// The server's UTC clock as SQL: `SYSUTCDATETIME()`; on the emulator (whose `DATETIME2`
/// cannot be sent) `GETUTCDATE()`, corrected by [`clock_ms`].
pub(super) fn clock(emulator: bool) -> &'static str {
    if emulator {
        "GETUTCDATE()"
    } else {
        "SYSUTCDATETIME()"
    }
}

/// Unix milliseconds of what [`clock`] returned. The emulator counts `DATETIME` days from
/// 2000-01-01, so its clock reads 30 years early; an instant before 2000 from it is moved by
/// the difference (a fixed emulator, reading after 2000, is left alone).
pub(super) fn clock_ms(emulator: bool, ms: i64) -> i64 {
    const Y2000_MS: i64 = 946_684_800_000;
    const FROM_1900_TO_2000_MS: i64 = 36_524 * 86_400_000;
    if emulator && ms < Y2000_MS {
        ms + FROM_1900_TO_2000_MS
    } else {
        ms
    }
}

/// The table hint of a claim's read: lock what is read for update, pass over rows another
/// transaction holds, row locks only. The emulator accepts the hint (but skips nothing).
pub(super) fn claim_hint(_emulator: bool) -> &'static str {
    "WITH (UPDLOCK, READPAST, ROWLOCK)"
}

/// One statement appending log lines `rows` (`(at, level, message, n)` tuples) to run `run`,
/// in the order of `n`: `INSERT … SELECT … ORDER BY` assigns identity values in that order.
pub(super) fn insert_logs(run: &str, rows: &[String]) -> String {
    format!(
        "INSERT INTO run_logs (run_id, at, level, message) \
         SELECT {run}, v.at, v.level, v.message FROM (VALUES {}) AS v(at, level, message, n) \
         ORDER BY v.n",
        rows.join(", ")
    )
}

/// A migration batch as the emulator can run it: comments dropped, `DATETIME2(3)` as
/// `BIGINT` (milliseconds), defaults of `SYSUTCDATETIME()` dropped (takt always writes its
/// instants), filters of indexes dropped.
pub(super) fn for_emulator(batch: &str) -> String {
    let code: String = batch
        .lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut code = code
        .replace(
            "DATETIME2(3)   NOT NULL DEFAULT SYSUTCDATETIME()",
            "BIGINT NULL",
        )
        .replace("DATETIME2(3)", "BIGINT");
    // Foreign keys out: the emulator runs an UPDATE of a parent row as a delete, cascading
    // it to the children (every run of a job vanished when the job was enabled). The store
    // deletes children explicitly, so nothing depends on the cascade.
    while let Some(fk) = code.find(" FOREIGN KEY ") {
        let line_start = code[..fk].rfind('\n').map_or(0, |i| i + 1);
        let line_end = code[fk..].find('\n').map_or(code.len(), |i| fk + i);
        let comma = code[..line_start].rfind(',').unwrap_or(line_start);
        code.replace_range(comma..line_end, "");
    }
    code.split(';')
        .map(|stmt| {
            let t = stmt.trim_start().to_ascii_uppercase();
            if t.starts_with("CREATE") && t.contains(" INDEX ") {
                match stmt.to_ascii_uppercase().find("WHERE") {
                    Some(i) => stmt[..i].to_string(),
                    None => stmt.to_string(),
                }
            } else {
                stmt.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Whether a multi-row `UPDATE … FROM (VALUES …)` over parameters updates every matching row:
/// on SQL Server it does; the emulator updates only the first (see the module docs).
pub(super) fn joined_updates(emulator: bool) -> bool {
    !emulator
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulator_batches_and_clock() {
        let b = for_emulator(
            "-- c; x\nCREATE INDEX a ON t (x)\n    WHERE s = N'p';\nCREATE TABLE u (at DATETIME2(3) NULL);",
        );
        assert_eq!(
            b,
            "\nCREATE INDEX a ON t (x)\n    ;\nCREATE TABLE u (at BIGINT NULL);"
        );
        let b = for_emulator(
            "CREATE TABLE r (\n  j BIGINT, -- x\n  CONSTRAINT r_j FOREIGN KEY (j) REFERENCES t (id) ON DELETE CASCADE\n);",
        );
        assert_eq!(b, "CREATE TABLE r (\n  j BIGINT\n);");
        // 2026-12-01 as the emulator's DATETIME reads (days from 2000 taken as from 1900).
        assert_eq!(clock_ms(true, -1_359_590_400_000), 1_796_083_200_000);
        assert_eq!(clock_ms(false, 5), 5);
    }
}
