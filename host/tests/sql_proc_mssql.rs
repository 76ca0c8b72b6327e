//! The built-in `sql::proc` executor inside a real host against SQL Server: typed parameters
//! of each common type, an output parameter, the return value, the first result set, `PRINT`
//! messages, a procedure that throws, injection attempts in a value and in the name, and a
//! timeout that cancels the running procedure on the server (a TDS attention).
//!
//! Needs `TAKT_TEST_MSSQL_URL` (else SKIPPED, unless `TAKT_TEST_REQUIRE` names mssql).
//! `.ci/run` points it at the iridium emulator, which lacks some of T-SQL; each check the
//! emulator cannot run is skipped *loudly* (printed with the reason) and runs against a real
//! server.

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use takt_core::run::{Run, RunState};
use takt_core::store::memory::MemoryStore;
use takt_host::embed::{Host, HostBuilder};
use takt_plugin_api::static_plugin;
use takt_plugin_sql::SqlOptions;

use common::jobs::result;
use common::mssql::{admin, exec, on_emulator, rows};

/// The first cell as a number, whichever integer type the peer sends (the emulator answers
/// `COUNT(*)` as bigint).
fn count(rows: &[tiberius::Row]) -> i64 {
    match rows[0].cells().next().map(|(_, c)| c) {
        Some(tiberius::ColumnData::I32(Some(n))) => i64::from(*n),
        Some(tiberius::ColumnData::I64(Some(n))) => *n,
        other => panic!("not a count: {other:?}"),
    }
}

fn skipped_on_emulator(check: &str, why: &str) {
    eprintln!(
        "SKIPPED on the iridium emulator: {check}: {why}; it runs against a real SQL Server (TAKT_TEST_MSSQL_URL)"
    );
}

struct Fixture {
    host: Host<MemoryStore>,
    store: MemoryStore,
}

impl Fixture {
    async fn start(url: &str) -> Fixture {
        let mut options = SqlOptions::default();
        options.add("mes", url, "the test").unwrap();
        let sql = static_plugin!(move || takt_plugin_sql::plugin(options)).unwrap();
        let store = MemoryStore::default();
        let host = HostBuilder::new(store.clone())
            .static_plugin(sql)
            .node("sql-test")
            .capacity(2)
            .start()
            .await
            .expect("the host starts");
        Fixture { host, store }
    }

    async fn run(&self, params: Json, timeout: Option<Duration>) -> (Run, Vec<String>) {
        common::jobs::run_once(&self.host, &self.store, "sql::proc", &params, timeout).await
    }
}

/// One test (the emulator keeps one database for everyone): the checks run in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_server_procedures_run_typed_with_outputs_errors_and_cancel() {
    let Some(url) = common::backend_url("mssql", "TAKT_TEST_MSSQL_URL") else {
        return;
    };
    let mut c = admin(&url).await;
    let emulator = on_emulator(&mut c).await;
    let p = std::process::id();
    let landed = format!("takt_landed_{p}");
    let close = format!("usp_takt_close_{p}");
    let fail = format!("usp_takt_fail_{p}");
    // The parameters are declared in the order the executor sends them (by name), because the
    // emulator binds named arguments by position; a real server binds them by name.
    // The emulator does not parse an OUTPUT parameter with a default; it gets a plain one.
    let closed_param = if emulator {
        "@closed INT = NULL"
    } else {
        "@closed INT = NULL OUTPUT"
    };
    exec(
        &mut c,
        &format!(
            "CREATE TABLE {landed} (line_id INT, shift NVARCHAR(10), total DECIMAL(18,2), \
             id UNIQUEIDENTIFIER, flag BIT, note NVARCHAR(200), big BIGINT, tiny TINYINT, \
             day DATETIME2)"
        ),
    )
    .await;
    exec(
        &mut c,
        &format!(
            "CREATE PROCEDURE dbo.{close} @line_id INT, @big BIGINT, @flag BIT, \
             @id UNIQUEIDENTIFIER, @note NVARCHAR(200), @shift NVARCHAR(10), @tiny TINYINT, \
             @day DATETIME2 = NULL, @total DECIMAL(18,2) = NULL, {closed_param} AS \
             BEGIN \
               INSERT INTO {landed} (line_id, shift, total, id, flag, note, big, tiny, day) \
                 VALUES (@line_id, @shift, @total, @id, @flag, @note, @big, @tiny, @day); \
               SET @closed = @line_id + 1; \
               SELECT line_id, shift, total FROM {landed}; \
               PRINT 'closed the shift'; \
               RETURN 5; \
             END"
        ),
    )
    .await;
    exec(
        &mut c,
        &format!(
            "CREATE PROCEDURE dbo.{fail} @code INT AS \
             BEGIN \
               THROW 50001, 'the line is not open', 3; \
             END"
        ),
    )
    .await;

    let f = Fixture::start(&url).await;
    let injection = "x'); DROP TABLE t; --";
    // The emulator cannot convert a uniqueidentifier parameter ("cannot convert integer to
    // UNIQUEIDENTIFIER"): there the column gets a NULL of that type.
    let guid = if emulator {
        skipped_on_emulator(
            "a uniqueidentifier value",
            "the emulator cannot convert a uniqueidentifier parameter",
        );
        json!({"type": "uniqueidentifier", "value": null})
    } else {
        json!({"type": "uniqueidentifier", "value": "6F9619FF-8B86-D011-B42D-00C04FC964FF"})
    };

    // Typed parameters, an output, the return value, the first result set, the messages.
    // The emulator passes a bigint through a double: it gets one a double holds exactly.
    let big: i64 = if emulator {
        skipped_on_emulator(
            "a bigint beyond 2^53",
            "the emulator converts bigint parameters through a double",
        );
        1_234_567_890_123
    } else {
        9_007_199_254_740_993
    };
    let mut params = json!({
        "@line_id": {"type": "int", "value": 7},
        "shift": {"type": "nvarchar(10)", "value": "Früh"},
        "total": {"type": "decimal", "value": "1250.75", "precision": 18, "scale": 2},
        "id": guid,
        "flag": true,
        "note": injection,
        "big": {"type": "bigint", "value": big},
        "tiny": {"type": "tinyint", "value": 255},
        "day": {"type": "datetime2", "value": "2026-06-01T06:00:00.125"},
    });
    if emulator {
        skipped_on_emulator(
            "a decimal value",
            "the emulator cannot parse the numeric(p,s) declaration of a decimal parameter",
        );
        params.as_object_mut().expect("params").remove("total");
        skipped_on_emulator(
            "a datetime2 value",
            "the emulator ends the batch without an answer when a datetime2 parameter is bound",
        );
        params.as_object_mut().expect("params").remove("day");
        skipped_on_emulator(
            "an OUTPUT parameter and the procedure's result set",
            "the emulator fails on `@p = @v OUTPUT` (\"identifier too long\") and does not \
             return a procedure's SELECT to the caller",
        );
    } else {
        params["closed"] = json!({"type": "int", "output": true});
    }
    let (run, log) = f
        .run(
            json!({
                "connection": "mes",
                "procedure": format!("dbo.{close}"),
                "params": params,
                "maxRows": 10
            }),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}\n{log:?}", run.error);
    let r = result(&run);
    assert_eq!(r["database"], "sqlserver");
    assert_eq!(r["returnValue"], 5, "{r}");
    if !emulator {
        assert_eq!(r["output"]["closed"], 8, "{r}");
        assert_eq!(r["resultSets"], 1, "{r}");
        assert_eq!(
            r["resultSet"]["columns"],
            json!(["line_id", "shift", "total"]),
            "{r}"
        );
        assert_eq!(
            r["resultSet"]["rows"][0],
            json!({"line_id": 7, "shift": "Früh", "total": "1250.75"}),
            "{r}"
        );
    }
    let landed_row = rows(
        &mut c,
        // (The emulator cannot send a datetime2 cell: the day comes back as text.)
        &format!(
            "SELECT line_id, shift, total, id, flag, note, big, tiny, \
             CONVERT(NVARCHAR(30), day, 126) FROM {landed}"
        ),
    )
    .await;
    let row = &landed_row[0];
    assert_eq!(row.get::<i32, _>(0), Some(7));
    assert_eq!(row.get::<&str, _>(1), Some("Früh"));
    if !emulator {
        assert_eq!(
            row.get::<tiberius::numeric::Numeric, _>(2)
                .map(|n| n.value()),
            Some(125_075)
        );
        assert_eq!(
            row.get::<tiberius::Uuid, _>(3).map(|u| u.to_string()),
            Some("6f9619ff-8b86-d011-b42d-00c04fc964ff".to_string())
        );
    }
    assert_eq!(row.get::<bool, _>(4), Some(true));
    assert_eq!(
        row.get::<&str, _>(5),
        Some(injection),
        "the injection is stored as data"
    );
    assert_eq!(row.get::<i64, _>(6), Some(big));
    assert_eq!(row.get::<u8, _>(7), Some(255));
    if !emulator {
        // (A real server writes the scale's seven digits: …00.1250000.)
        let day = row.get::<&str, _>(8).unwrap_or_default();
        assert!(day.starts_with("2026-06-01T06:00:00.125"), "{day}");
    }
    if emulator {
        skipped_on_emulator(
            "PRINT messages and rows affected",
            "the emulator reports no row counts",
        );
    } else {
        assert_eq!(r["rowsAffected"], 1, "{r}");
        assert_eq!(r["messages"], json!(["closed the shift"]), "{r}");
        assert!(
            log.iter().any(|l| l == "server: closed the shift"),
            "{log:?}"
        );
    }

    // A procedure that throws: number, state and message in the run's error.
    let (run, _) = f
        .run(
            json!({"connection": "mes", "procedure": format!("dbo.{fail}"),
                   "params": {"code": {"type": "int", "value": 4}}}),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Failed);
    let error = run.error.unwrap();
    assert!(error.contains("sql server error 50001 ("), "{error}");
    assert!(error.contains("the line is not open"), "{error}");
    if emulator {
        skipped_on_emulator(
            "the error's state, procedure and line",
            "the emulator reports state 1 and no procedure or line for THROW",
        );
    } else {
        assert!(error.contains("(state 3, severity 16)"), "{error}");
        assert!(error.contains(&format!("in {fail} at line 1")), "{error}");
    }

    // An injection attempt in the name: refused before anything runs.
    let (run, _) = f
        .run(
            json!({"connection": "mes", "procedure": format!("dbo.{close}; DROP TABLE {landed}")}),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Failed);
    assert!(run.error.unwrap().contains("is refused"));
    assert_eq!(
        count(&rows(&mut c, &format!("SELECT COUNT(*) FROM {landed}")).await),
        1,
        "the table is still there, with its row"
    );

    // A timeout cancels the running procedure on the server.
    if emulator {
        // The emulator has no WAITFOR and never interrupts a batch, but it runs a loop for
        // seconds: the attention is sent at the timeout, goes unacknowledged, and the call
        // still returns within the acknowledgement wait, recorded timed out.
        skipped_on_emulator(
            "the server stopping the procedure on the attention",
            "the emulator runs a batch to its end whatever the client sends",
        );
        let spin = format!("usp_takt_spin_{p}");
        exec(
            &mut c,
            &format!(
                "CREATE PROCEDURE dbo.{spin} AS BEGIN DECLARE @i INT; SET @i = 0; \
                 WHILE @i < 20000000 SET @i = @i + 1; END"
            ),
        )
        .await;
        let t0 = Instant::now();
        let (run, log) = f
            .run(
                json!({"connection": "mes", "procedure": format!("dbo.{spin}")}),
                Some(Duration::from_secs(1)),
            )
            .await;
        assert_eq!(run.state, RunState::TimedOut, "{:?}", run.error);
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let error = run.error.unwrap();
        assert!(
            error.contains("the server was told to stop the procedure but did not acknowledge it"),
            "{error}\n{log:?}"
        );
        exec(&mut c, &format!("DROP PROCEDURE dbo.{spin}")).await;
    } else {
        let slow = format!("usp_takt_slow_{p}");
        exec(
            &mut c,
            &format!("CREATE PROCEDURE dbo.{slow} AS BEGIN WAITFOR DELAY '00:01:00'; END"),
        )
        .await;
        let t0 = Instant::now();
        let (run, log) = f
            .run(
                json!({"connection": "mes", "procedure": format!("dbo.{slow}")}),
                Some(Duration::from_secs(1)),
            )
            .await;
        assert_eq!(run.state, RunState::TimedOut, "{:?}", run.error);
        assert!(t0.elapsed() < Duration::from_secs(10));
        let error = run.error.unwrap();
        assert!(
            error.contains("the server was told to stop the procedure and acknowledged it"),
            "{error}\n{log:?}"
        );
        let running = rows(
            &mut c,
            "SELECT COUNT(*) FROM sys.dm_exec_requests WHERE command = 'WAITFOR'",
        )
        .await;
        assert_eq!(count(&running), 0, "the procedure still runs");
        exec(&mut c, &format!("DROP PROCEDURE dbo.{slow}")).await;
    }

    f.host.shutdown(Duration::from_secs(1)).await;
    exec(&mut c, &format!("DROP PROCEDURE dbo.{close}")).await;
    exec(&mut c, &format!("DROP PROCEDURE dbo.{fail}")).await;
    exec(&mut c, &format!("DROP TABLE {landed}")).await;
}
