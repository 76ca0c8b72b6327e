//! The built-in `sql::proc` executor inside a real host (HostBuilder, MemoryStore, the real
//! executor with its timeout and grace) against real databases: PostgreSQL procedures and
//! functions here; SQL Server in `sql_proc_mssql.rs`.
//!
//! Needs `TAKT_TEST_PG_URL` (else SKIPPED, unless `TAKT_TEST_REQUIRE` names postgres).

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use takt_core::run::{Run, RunState};
use takt_core::store::memory::MemoryStore;
use takt_host::embed::{Host, HostBuilder};
use takt_plugin_api::static_plugin;
use takt_plugin_sql::SqlOptions;

use common::jobs::result;
use tokio_postgres::NoTls;

/// The tests' connections: one per test, named after it, each with its own schema first on
/// the search path and an application name to find it by in pg_stat_activity. A static
/// plugin is built once per process, so it holds all of them.
const TAGS: [&str; 5] = ["typed", "funcs", "errors", "timeout", "declared"];

fn schema_of(tag: &str) -> String {
    format!("takt_sqlproc_{tag}_{}", std::process::id())
}

fn app_of(tag: &str) -> String {
    format!("takt-sqlproc-{tag}-{}", std::process::id())
}

fn sql_plugin(url: &str) -> takt_plugin_api::abi::PluginRef {
    static PLUGIN: std::sync::OnceLock<takt_plugin_api::abi::PluginRef> =
        std::sync::OnceLock::new();
    *PLUGIN.get_or_init(|| {
        let sep = if url.contains('?') { '&' } else { '?' };
        let mut options = SqlOptions::default();
        for tag in TAGS {
            let conn_url = format!(
                "{url}{sep}application_name={}&options=-csearch_path%3D{}",
                app_of(tag),
                schema_of(tag)
            );
            options.add(tag, &conn_url, "the test").unwrap();
        }
        static_plugin!(move || takt_plugin_sql::plugin(options)).unwrap()
    })
}

struct Fixture {
    host: Host<MemoryStore>,
    store: MemoryStore,
    db: tokio_postgres::Client,
    schema: String,
    app: String,
}

impl Fixture {
    async fn start(url: &str, tag: &str) -> Fixture {
        let schema = schema_of(tag);
        let app = app_of(tag);
        let (db, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect");
        tokio::spawn(conn);
        db.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path = {schema};
             CREATE TABLE landed (line_id int, shift text, total numeric(18,2), day timestamp,
               id uuid, flag boolean, note text, big bigint, tiny smallint, raw bytea);
             CREATE PROCEDURE close_shift(line_id int, shift text, total numeric(18,2),
                 day timestamp, id uuid, flag boolean, note text, big bigint, tiny smallint,
                 raw bytea, INOUT closed int DEFAULT NULL)
               LANGUAGE plpgsql AS $$
               BEGIN
                 INSERT INTO landed VALUES (line_id, shift, total, day, id, flag, note, big, tiny, raw);
                 RAISE NOTICE 'closed line % shift %', line_id, shift;
                 closed := line_id + 1;
               END $$;
             CREATE FUNCTION shift_rows(n int) RETURNS TABLE(i int, label text, amount numeric)
               LANGUAGE sql AS $$ SELECT g, 'row ' || g, g * 1.25 FROM generate_series(1, n) g $$;
             CREATE FUNCTION add_up(a int, b int) RETURNS int LANGUAGE sql AS $$ SELECT a + b $$;
             CREATE FUNCTION ÜberZahl() RETURNS int LANGUAGE sql AS $$ SELECT 7 $$;
             CREATE FUNCTION odd_types() RETURNS TABLE(t time, iv interval, r real, a int, a_2 int)
               LANGUAGE sql AS $$ SELECT '06:30:00.25'::time, '1 day'::interval, 0.1::real, 1, 2 $$;
             CREATE PROCEDURE fail_loudly(code int)
               LANGUAGE plpgsql AS $$
               BEGIN
                 RAISE EXCEPTION 'line % is not open', code USING HINT = 'open it first';
               END $$;
             CREATE PROCEDURE sleep_long(seconds int)
               LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(seconds); END $$;"
        ))
        .await
        .expect("schema");
        let sql = sql_plugin(url);
        let store = MemoryStore::default();
        let host = HostBuilder::new(store.clone())
            .static_plugin(sql)
            .node("sql-test")
            .capacity(2)
            .start()
            .await
            .expect("the host starts");
        Fixture {
            host,
            store,
            db,
            schema,
            app,
        }
    }

    /// Runs a one-off `sql::proc` job with `params` and returns its final run and log.
    async fn run(&self, params: Json, timeout: Option<Duration>) -> (Run, Vec<String>) {
        common::jobs::run_once(&self.host, &self.store, "sql::proc", &params, timeout).await
    }

    async fn stop(self) {
        self.host.shutdown(Duration::from_secs(1)).await;
        self.db
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .await
            .expect("drop schema");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_procedure_gets_typed_parameters_and_returns_its_output() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let f = Fixture::start(&url, "typed").await;
    let injection = "x'); DROP TABLE landed; --";
    let (run, log) = f
        .run(
            json!({
                "connection": "typed",
                "procedure": "close_shift",
                "params": {
                    "@line_id": {"type": "int", "value": 7},
                    "shift": "A",
                    "total": {"type": "decimal", "value": "1250.75", "precision": 18, "scale": 2},
                    "day": {"type": "datetime2", "value": "2026-06-01T06:00:00.125"},
                    "id": {"type": "uniqueidentifier", "value": "6F9619FF-8B86-D011-B42D-00C04FC964FF"},
                    "flag": true,
                    "note": injection,
                    "big": {"type": "bigint", "value": "9007199254740993"},
                    "tiny": {"type": "tinyint", "value": 255},
                    "raw": {"type": "varbinary", "value": "0x00ff10"},
                    "closed": {"type": "int", "output": true}
                }
            }),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    let r = result(&run);
    assert_eq!(r["database"], "postgres");
    assert_eq!(r["output"]["closed"], 8, "{r}");
    assert_eq!(r["messages"], json!(["closed line 7 shift A"]), "{r}");
    assert!(
        log.iter().any(|l| l == "server: closed line 7 shift A"),
        "{log:?}"
    );
    // Each value arrived as data of its type, the injection attempt included.
    let row =
        f.db.query_one(
            &format!(
                "SELECT line_id, shift, total::text, day::text, id::text, flag, note, big, tiny, \
                 encode(raw, 'hex') FROM {}.landed",
                f.schema
            ),
            &[],
        )
        .await
        .expect("the procedure inserted one row");
    assert_eq!(row.get::<_, i32>(0), 7);
    assert_eq!(row.get::<_, String>(1), "A");
    assert_eq!(row.get::<_, String>(2), "1250.75");
    assert_eq!(row.get::<_, String>(3), "2026-06-01 06:00:00.125");
    assert_eq!(
        row.get::<_, String>(4),
        "6f9619ff-8b86-d011-b42d-00c04fc964ff"
    );
    assert!(row.get::<_, bool>(5));
    assert_eq!(row.get::<_, String>(6), injection);
    assert_eq!(row.get::<_, i64>(7), 9_007_199_254_740_993);
    assert_eq!(row.get::<_, i16>(8), 255);
    assert_eq!(row.get::<_, String>(9), "00ff10");

    // NULLs of each type.
    let (run, _) = f
        .run(
            json!({
                "connection": "typed",
                "procedure": "close_shift",
                "params": {
                    "line_id": {"type": "int", "value": null},
                    "shift": null,
                    "total": {"type": "decimal(18,2)", "value": null},
                    "day": {"type": "datetime2", "value": null},
                    "id": {"type": "uuid", "value": null},
                    "flag": {"type": "bit", "value": null},
                    "note": null,
                    "big": {"type": "bigint", "value": null},
                    "tiny": {"type": "tinyint", "value": null},
                    "raw": {"type": "varbinary", "value": null},
                    "closed": {"type": "int", "output": true}
                }
            }),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    assert_eq!(result(&run)["output"]["closed"], Json::Null);
    let nulls: i64 =
        f.db.query_one(
            &format!(
                "SELECT count(*) FROM {}.landed WHERE line_id IS NULL AND shift IS NULL AND \
                 total IS NULL AND day IS NULL AND id IS NULL AND flag IS NULL AND note IS NULL \
                 AND big IS NULL AND tiny IS NULL AND raw IS NULL",
                f.schema
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(nulls, 1);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_functions_return_a_bounded_result_set_or_a_value() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let f = Fixture::start(&url, "funcs").await;
    let (run, _) = f
        .run(
            json!({"connection": "funcs", "procedure": "shift_rows",
                   "params": {"n": {"type": "int", "value": 10}}, "maxRows": 3}),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    let r = result(&run);
    let set = &r["resultSet"];
    assert_eq!(set["columns"], json!(["i", "label", "amount"]), "{r}");
    assert_eq!(set["rowCount"], 10);
    assert_eq!(set["truncated"], true);
    assert_eq!(
        set["rows"],
        json!([
            {"i": 1, "label": "row 1", "amount": "1.25"},
            {"i": 2, "label": "row 2", "amount": "2.50"},
            {"i": 3, "label": "row 3", "amount": "3.75"}
        ])
    );
    assert_eq!(
        r.get("returnValue"),
        Some(&Json::Null),
        "a set-returning function has no value"
    );

    let (run, _) = f
        .run(
            json!({"connection": "funcs", "procedure": format!("{}.add_up", f.schema),
                   "params": {"a": {"type": "int", "value": 2}, "b": {"type": "int", "value": 40}}}),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    assert_eq!(result(&run)["returnValue"], 42);

    // maxRows 0 keeps no row but still counts it and says so.
    let (run, _) = f
        .run(
            json!({"connection": "funcs", "procedure": "add_up", "maxRows": 0,
                   "params": {"a": {"type": "int", "value": 1}, "b": {"type": "int", "value": 1}}}),
            None,
        )
        .await;
    let r = result(&run);
    assert_eq!(r["resultSet"]["rows"], json!([]), "{r}");
    assert_eq!(r["resultSet"]["rowCount"], 1, "{r}");
    assert_eq!(r["resultSet"]["truncated"], true, "{r}");

    // Unquoted names fold only A-Z, as PostgreSQL does.
    let (run, _) = f
        .run(
            json!({"connection": "funcs", "procedure": "ÜberZahl"}),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    assert_eq!(result(&run)["returnValue"], 7);

    // Types without a decoder say so instead of showing their bytes; reals stay as written.
    let (run, _) = f
        .run(
            json!({"connection": "funcs", "procedure": "odd_types"}),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    let r = result(&run);
    assert_eq!(
        r["resultSet"]["rows"][0],
        json!({"t": "06:30:00.25",
               "iv": "(a interval value: cast it to text in the routine to see it here)",
               "r": 0.1, "a": 1, "a_2": 2}),
        "{r}"
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_errors_and_refusals_are_precise() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let f = Fixture::start(&url, "errors").await;
    // A procedure that raises: the state, message, hint and PL/pgSQL line are in the error.
    let (run, _) = f
        .run(
            json!({"connection": "errors", "procedure": "fail_loudly",
                   "params": {"code": {"type": "int", "value": 4}}}),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Failed);
    let error = run.error.unwrap();
    assert!(error.contains("postgresql error P0001"), "{error}");
    assert!(error.contains("line 4 is not open"), "{error}");
    assert!(error.contains("hint: open it first"), "{error}");
    assert!(error.contains("PL/pgSQL function fail_loudly"), "{error}");

    // An injection attempt in the name is refused before anything runs.
    let (run, _) = f
        .run(
            json!({"connection": "errors", "procedure": "close_shift(1); DROP TABLE landed; --"}),
            None,
        )
        .await;
    assert_eq!(run.state, RunState::Failed);
    let error = run.error.unwrap();
    assert!(error.contains("is refused"), "{error}");
    let still: i64 =
        f.db.query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND \
             table_name = 'landed'",
            &[&f.schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(still, 1, "the table is still there");

    // Unknown procedure, unknown connection, a connection string in the params.
    let (run, _) = f
        .run(
            json!({"connection": "errors", "procedure": "no_such_proc"}),
            None,
        )
        .await;
    let error = run.error.unwrap();
    assert!(
        error.contains("no procedure or function no_such_proc exists"),
        "{error}"
    );
    let (run, _) = f
        .run(
            json!({"connection": "mes", "procedure": "close_shift"}),
            None,
        )
        .await;
    let error = run.error.unwrap();
    assert!(
        error.contains(
            "connection \"mes\" is not configured; this host has: declared, errors, funcs, timeout, typed"
        ),
        "{error}"
    );
    let (run, _) = f
        .run(
            json!({"connection": "postgres://postgres:secret@db/x", "procedure": "close_shift"}),
            None,
        )
        .await;
    let error = run.error.unwrap();
    assert!(error.contains("[sql.connections]"), "{error}");
    assert!(!error.contains("secret"), "{error}");
    // A value that does not fit its type fails before the call.
    let (run, _) = f
        .run(
            json!({"connection": "errors", "procedure": "close_shift",
                   "params": {"total": {"type": "decimal(18,2)", "value": "1.005"}}}),
            None,
        )
        .await;
    let error = run.error.unwrap();
    assert!(
        error.contains("parameter total: 1.005 has 3 decimals"),
        "{error}"
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_call_past_its_timeout_is_cancelled_on_the_server() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let f = Fixture::start(&url, "timeout").await;
    let t0 = Instant::now();
    let (run, log) = f
        .run(
            json!({"connection": "timeout", "procedure": "sleep_long",
                   "params": {"seconds": {"type": "int", "value": 60}}}),
            Some(Duration::from_secs(1)),
        )
        .await;
    assert_eq!(run.state, RunState::TimedOut, "{:?}", run.error);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let error = run.error.unwrap();
    assert!(
        error.contains("the server cancelled the statement"),
        "{error}\n{log:?}"
    );
    // Nothing of the call is left running on the server: the 60 s sleep would stay active for
    // a minute, while the closing connection's last messages (its statement's Close) may keep
    // the backend busy for a moment on a loaded server.
    let deadline = Instant::now() + Duration::from_secs(5);
    let active = loop {
        let active: i64 = f
            .db
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'",
                &[&f.app],
            )
            .await
            .unwrap()
            .get(0);
        if active == 0 || Instant::now() > deadline {
            break active;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(active, 0, "the sleep still runs on the server");
    f.stop().await;
}

/// Values are bound as the routine's declared types (a plain `3` reaches an `integer`, an
/// enum or a domain); an overloaded name is resolved by the argument names given, then by the
/// explicit types; every mismatch says which version wants what.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_binds_the_declared_types_and_resolves_overloads() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let f = Fixture::start(&url, "declared").await;
    f.db.batch_execute(&format!(
        "SET search_path = {};
         CREATE TABLE lines (line integer, shift smallint);
         CREATE PROCEDURE open_line(line integer, shift smallint, INOUT opened integer DEFAULT NULL)
           LANGUAGE plpgsql AS $$ BEGIN INSERT INTO lines VALUES (line, shift); opened := line * 10; END $$;
         CREATE PROCEDURE out_only(a integer, OUT b integer)
           LANGUAGE plpgsql AS $$ BEGIN b := a + 1; END $$;
         CREATE TYPE shift_kind AS ENUM ('early', 'late');
         CREATE DOMAIN line_no AS integer CHECK (VALUE > 0);
         CREATE FUNCTION describe_shift(kind shift_kind, line line_no) RETURNS text
           LANGUAGE sql AS $$ SELECT kind::text || ' on ' || line::text $$;
         CREATE FUNCTION pick(a integer) RETURNS text LANGUAGE sql AS $$ SELECT 'integer' $$;
         CREATE FUNCTION pick(a text) RETURNS text LANGUAGE sql AS $$ SELECT 'text' $$;
         CREATE FUNCTION pick(a integer, b integer) RETURNS text LANGUAGE sql AS $$ SELECT 'two' $$;
         CREATE FUNCTION with_default(a integer, b integer DEFAULT 5) RETURNS integer
           LANGUAGE sql AS $$ SELECT a + b $$;",
        f.schema
    ))
    .await
    .expect("routines");
    let call = |procedure: &str, params: Json| json!({"connection": "declared", "procedure": procedure, "params": params});
    let ok = |run: &Run| {
        assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
        result(run)
    };
    let err = |run: &Run| {
        assert_eq!(run.state, RunState::Failed, "{run:?}");
        run.error.clone().unwrap()
    };

    // Plain JSON integers (bigint in the job's vocabulary) into integer and smallint.
    let (run, _) = f
        .run(call("open_line", json!({"line": 3, "shift": 2})), None)
        .await;
    assert_eq!(ok(&run)["output"]["opened"], 30);
    let row =
        f.db.query_one(&format!("SELECT line, shift FROM {}.lines", f.schema), &[])
            .await
            .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i16>(1)), (3, 2));
    let (run, _) = f.run(call("add_up", json!({"a": 2, "b": 40})), None).await;
    assert_eq!(ok(&run)["returnValue"], 42);
    // An enum and a domain take the text of the value.
    let (run, _) = f
        .run(
            call("describe_shift", json!({"kind": "late", "line": 4})),
            None,
        )
        .await;
    assert_eq!(ok(&run)["returnValue"], "late on 4");
    let (run, _) = f
        .run(
            call("describe_shift", json!({"kind": "night", "line": 4})),
            None,
        )
        .await;
    let e = err(&run);
    assert!(e.contains("22P02") && e.contains("shift_kind"), "{e}");
    // A default may be left out; a required argument may not.
    let (run, _) = f.run(call("with_default", json!({"a": 1})), None).await;
    assert_eq!(ok(&run)["returnValue"], 6);
    let (run, _) = f.run(call("add_up", json!({"a": 1})), None).await;
    let e = err(&run);
    assert!(
        e.contains(&format!(
            "{}.add_up(a integer, b integer) needs parameter b (integer)",
            f.schema
        )),
        "{e}"
    );
    // A procedure's OUT argument must be passed (CALL takes it); the message says how.
    let (run, _) = f.run(call("out_only", json!({"a": 1})), None).await;
    let e = err(&run);
    assert!(
        e.contains(
            "needs parameter b (OUT): add it with {\"type\": \"integer\", \"output\": true}"
        ),
        "{e}"
    );
    let (run, _) = f
        .run(
            call(
                "out_only",
                json!({"a": 1, "b": {"type": "int", "output": true}}),
            ),
            None,
        )
        .await;
    assert_eq!(ok(&run)["output"]["b"], 2);
    // A function's result column is not a parameter.
    let (run, _) = f
        .run(call("shift_rows", json!({"n": 1, "label": "x"})), None)
        .await;
    let e = err(&run);
    assert!(e.contains("returns label as a column of its result"), "{e}");

    // Overloads: the names decide; then an explicit type; else the versions are listed.
    let (run, _) = f.run(call("pick", json!({"a": 1, "b": 2})), None).await;
    assert_eq!(ok(&run)["returnValue"], "two");
    let (run, _) = f.run(call("pick", json!({"a": 1})), None).await;
    let e = err(&run);
    assert!(
        e.contains("pick is overloaded and 2 versions take the parameters a: ")
            && e.contains(&format!("{}.pick(a integer)", f.schema))
            && e.contains(&format!("{}.pick(a text)", f.schema))
            && e.contains("give each parameter its \"type\""),
        "{e}"
    );
    let (run, _) = f
        .run(
            call("pick", json!({"a": {"type": "int", "value": 1}})),
            None,
        )
        .await;
    assert_eq!(ok(&run)["returnValue"], "integer");
    let (run, _) = f
        .run(
            call("pick", json!({"a": {"type": "nvarchar", "value": "1"}})),
            None,
        )
        .await;
    assert_eq!(ok(&run)["returnValue"], "text");
    let (run, _) = f.run(call("pick", json!({"c": 1})), None).await;
    let e = err(&run);
    assert!(
        e.contains("no version of pick takes the parameters c: ")
            && e.contains(&format!("{}.pick(a integer) has no parameter c", f.schema)),
        "{e}"
    );
    f.stop().await;
}
