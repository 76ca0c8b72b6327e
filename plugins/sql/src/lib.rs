//! `sql`: takt's built-in stored-procedure executor (seed 000 §5.1), HandlerType `sql::proc`,
//! for SQL Server (tiberius) and PostgreSQL (tokio-postgres) with one params shape:
//!
//! ```json
//! { "connection": "mes",
//!   "procedure": "dbo.usp_CloseShift",
//!   "params": {
//!     "LineId": 3,
//!     "Shift": "A",
//!     "Total": {"type": "decimal", "value": "1250.75", "precision": 18, "scale": 2},
//!     "Day": {"type": "datetime2", "value": "2026-06-01T06:00:00"},
//!     "Closed": {"type": "int", "output": true} },
//!   "maxRows": 100 }
//! ```
//!
//! What it promises:
//!
//! * **Named connections only.** `connection` names an entry of the host's
//!   `[sql.connections]` (or `TAKT_SQL_CONNECTION_<NAME>`); a job never carries a connection
//!   string or a password, and one that tries is refused without echoing it.
//! * **No injection by construction** (see [`params`]): the procedure name is parsed as a
//!   one-to-three-part identifier and re-quoted; parameter names are identifiers; values are
//!   bound as typed parameters, never spliced into the statement.
//! * **Typed parameters** ([`value`]): int, bigint, smallint, tinyint, bit, decimal/numeric,
//!   float, real, nvarchar, varchar, date, datetime, datetime2, uniqueidentifier, varbinary and
//!   NULL; plain JSON values infer bigint / float / nvarchar / bit. A value that does not fit
//!   its type is refused before the call (nothing is rounded or cut silently).
//! * **The command timeout is the job's timeout**, with a real cancel: on SQL Server a TDS
//!   attention is sent on the running request (the server stops the procedure and rolls back
//!   its open transaction), on PostgreSQL a cancel request (`pg_cancel_backend`'s protocol
//!   twin). The same happens when the host cancels the run or shuts down.
//! * **Result JSON** ([`ProcResult`]): return value, output parameters, rows affected (SQL
//!   Server; counted like ADO.NET's `ExecuteNonQuery`), the first result set (at most
//!   `maxRows` rows, with the total count), and the server's messages (`PRINT`).
//! * **Errors** carry the server's number, state, severity, message, procedure and line, in
//!   the run's error and as its JSON data; a deadlock victim (1205) and a connection that
//!   could not be opened are retryable (nothing ran), anything else is not — a connection lost
//!   *during* a call leaves its outcome unknown, and re-running a procedure is the job's retry
//!   policy's decision only when the failure says it is safe.
//!
//! # Using it
//!
//! `takt run` registers it compiled in, with the connections of takt.toml. A program
//! embedding the host adds it like any static plugin:
//!
//! ```ignore
//! let mut options = takt_plugin_sql::SqlOptions::default();
//! options.add("mes", "Server=db01,1433;Database=MES;User Id=takt;Password=…", "our config")?;
//! let sql = takt_plugin_api::static_plugin!(move || takt_plugin_sql::plugin(options))?;
//! ```

pub mod params;
pub mod value;

mod cells;
mod mssql;
mod postgres;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde_json::Value as Json;
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};

pub use params::{ProcCall, ProcParams};

/// The plugin's name: HandlerTypes are `sql::…`.
pub const PLUGIN_NAME: &str = "sql";
/// The HandlerType of the stored-procedure executor.
pub const HANDLER_TYPE: &str = "sql::proc";
/// Environment variables `TAKT_SQL_CONNECTION_<NAME>` add or replace named connections (the
/// name upper-cased, `-` and `.` as `_`), so that a password can stay out of the config file.
pub const CONNECTION_ENV_PREFIX: &str = "TAKT_SQL_CONNECTION_";
/// Opening a connection gives up after this long (or the job's remaining time, if shorter).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// After a cancel, how long the server has to acknowledge it before the connection is simply
/// closed (kept below the host's 5 s grace, so the handler returns before it is abandoned).
pub const CANCEL_ACK_WAIT: Duration = Duration::from_secs(2);

/// How long after the job's deadline the call stops by itself if the host has not stopped it.
const DEADLINE_BACKSTOP: Duration = Duration::from_millis(500);

/// A named connection.
#[derive(Clone)]
pub enum Connection {
    /// SQL Server, an ADO.NET connection string (`Server=host,1433;Database=…;User Id=…;…`).
    SqlServer(String),
    /// PostgreSQL, a `postgres://` URL or key=value string.
    Postgres(String),
}

impl std::fmt::Debug for Connection {
    /// Never shows the string: it holds a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Connection::SqlServer(_) => f.write_str("SqlServer(…)"),
            Connection::Postgres(_) => f.write_str("Postgres(…)"),
        }
    }
}

impl Connection {
    /// Recognises the dialect: `postgres://` / `postgresql://` URLs are PostgreSQL; an
    /// ADO.NET string (with `Server=` or `Data Source=`) is SQL Server.
    pub fn parse(s: &str) -> Result<Connection, String> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            return Ok(Connection::Postgres(t.to_string()));
        }
        let keys: Vec<String> = lower
            .split(';')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
            .collect();
        if keys
            .iter()
            .any(|k| k == "server" || k == "data source" || k == "address" || k == "addr")
        {
            return Ok(Connection::SqlServer(t.to_string()));
        }
        if keys.iter().any(|k| k == "host" || k == "dbname") {
            return Ok(Connection::Postgres(t.to_string()));
        }
        Err("it is neither a postgres:// URL nor an ADO.NET string with Server=…".into())
    }
}

/// What the host decides for every run of the plugin: the named connections.
#[derive(Debug, Clone, Default)]
pub struct SqlOptions {
    connections: BTreeMap<String, (Connection, String)>,
}

impl SqlOptions {
    /// Adds (or replaces) connection `name`; `source` says where it is configured, for
    /// messages (never the string itself).
    pub fn add(&mut self, name: &str, connection: &str, source: &str) -> Result<(), String> {
        let c = Connection::parse(connection)
            .map_err(|e| format!("connection {name} in {source}: {e}"))?;
        self.connections
            .insert(name.to_string(), (c, source.to_string()));
        Ok(())
    }

    /// Adds the connections of the `TAKT_SQL_CONNECTION_<NAME>` environment variables (the
    /// name lower-cased).
    pub fn add_from_env(&mut self) -> Result<(), String> {
        for (key, value) in std::env::vars() {
            if let Some(name) = key.strip_prefix(CONNECTION_ENV_PREFIX)
                && !name.is_empty()
            {
                self.add(
                    &name.to_ascii_lowercase(),
                    &value,
                    &format!("{key} in the environment"),
                )?;
            }
        }
        Ok(())
    }

    /// The connection names, for messages and `takt run`'s banner.
    pub fn names(&self) -> Vec<String> {
        self.connections.keys().cloned().collect()
    }

    fn get(&self, name: &str) -> Result<&Connection, JobError> {
        let found = self.connections.get(name).or_else(|| {
            self.connections
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        });
        match found {
            Some((c, _)) => Ok(c),
            None if self.connections.is_empty() => Err(JobError::invalid_params(format!(
                "connection \"{name}\" is not configured: this host has no [sql.connections]; \
                 add {name} = \"…\" there (or set {CONNECTION_ENV_PREFIX}{})",
                name.to_ascii_uppercase()
            ))),
            None => Err(JobError::invalid_params(format!(
                "connection \"{name}\" is not configured; this host has: {}",
                self.names().join(", ")
            ))),
        }
    }
}

/// The `sql` plugin with `options`: register it with `static_plugin!` (see the crate docs).
pub fn plugin(options: SqlOptions) -> Plugin {
    Plugin::new(PLUGIN_NAME)
        .handler(
            "proc",
            "runs a stored procedure (SQL Server) or procedure/function (PostgreSQL) of a named \
             connection with typed parameters; the job's timeout cancels it on the server",
            move |ctx: &JobContext, p: ProcParams| run(ctx, p, &options),
        )
        .schema(PARAMS_SCHEMA)
}

/// JSON schema of [`ProcParams`], shown by `takt plugin list`.
const PARAMS_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["connection", "procedure"],
  "additionalProperties": false,
  "properties": {
    "connection": {"type": "string"},
    "procedure": {"type": "string"},
    "params": {"type": "object"},
    "maxRows": {"type": "integer", "minimum": 0, "maximum": 10000}
  }
}"#;

/// The result of a call, stored as the run's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProcResult {
    /// The connection name.
    pub connection: String,
    /// `sqlserver` or `postgres`.
    pub database: &'static str,
    /// The procedure as called (quoted).
    pub procedure: String,
    /// The `RETURN` value (SQL Server) or a scalar function's value (PostgreSQL).
    pub return_value: Option<Json>,
    /// Output parameters by name.
    pub output: BTreeMap<String, Json>,
    /// Rows inserted, updated, deleted or merged, as ADO.NET's `ExecuteNonQuery` counts them;
    /// `null` when the server reported none (`SET NOCOUNT ON`) or cannot report them.
    pub rows_affected: Option<u64>,
    /// The first result set the procedure returned, if any.
    pub result_set: Option<ResultSet>,
    /// How many result sets the procedure returned (only the first is kept).
    pub result_sets: usize,
    /// Messages from the server (`PRINT`, `RAISE NOTICE`), also written to the run log.
    pub messages: Vec<String>,
    /// Time of the call on the server, connection included.
    pub elapsed_ms: u64,
}

/// A result set, bounded.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResultSet {
    /// Column names, in order (an unnamed column is `column<N>`, a repeated one `name_<N>`).
    pub columns: Vec<String>,
    /// The first `maxRows` rows, each an object keyed by the column names.
    pub rows: Vec<serde_json::Map<String, Json>>,
    /// How many rows the result set had.
    pub row_count: u64,
    /// Whether rows were left out.
    pub truncated: bool,
}

impl ResultSet {
    /// A result set with `columns` (unnamed and repeated names made unique).
    pub(crate) fn new(names: impl IntoIterator<Item = String>) -> ResultSet {
        let mut columns: Vec<String> = Vec::new();
        for (i, name) in names.into_iter().enumerate() {
            let base = if name.is_empty() {
                format!("column{}", i + 1)
            } else {
                name
            };
            let mut n = base.clone();
            let mut k = i + 1;
            while columns.contains(&n) {
                n = format!("{base}_{k}");
                k += 1;
            }
            columns.push(n);
        }
        ResultSet {
            columns,
            ..ResultSet::default()
        }
    }

    /// Counts a row and keeps it while fewer than `max` are kept.
    pub(crate) fn push(&mut self, max: usize, cells: impl FnOnce() -> Vec<Json>) {
        self.row_count += 1;
        if self.rows.len() < max {
            let row = self.columns.iter().cloned().zip(cells()).collect();
            self.rows.push(row);
        } else {
            self.truncated = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_set_columns_are_unique_and_named() {
        let set = ResultSet::new(["a", "a", "a_2", ""].map(String::from));
        assert_eq!(set.columns, ["a", "a_2", "a_2_3", "column4"]);
    }

    #[test]
    fn connections_are_recognised_and_never_shown() {
        assert!(matches!(
            Connection::parse("Server=db,1433;User Id=u;Password=p"),
            Ok(Connection::SqlServer(_))
        ));
        assert!(matches!(
            Connection::parse("postgresql://u:p@h/db"),
            Ok(Connection::Postgres(_))
        ));
        assert!(matches!(
            Connection::parse("host=h dbname=d"),
            Ok(Connection::Postgres(_))
        ));
        assert!(Connection::parse("db01").is_err());
        let mut o = SqlOptions::default();
        o.add("mes", "Server=db;Password=hunter2", "test").unwrap();
        assert!(!format!("{o:?}").contains("hunter2"));
    }
}

/// Why a call did not succeed.
#[derive(Debug)]
pub(crate) struct CallError {
    pub(crate) message: String,
    pub(crate) retryable: bool,
    pub(crate) data: Option<Json>,
    pub(crate) cancelled: bool,
}

impl CallError {
    pub(crate) fn new(message: String, retryable: bool) -> CallError {
        CallError {
            message,
            retryable,
            data: None,
            cancelled: false,
        }
    }

    /// An error the server raised, with its details as `data`; a retryable one (a deadlock
    /// victim, a serialization failure) says that its transaction was rolled back.
    pub(crate) fn server(mut message: String, retryable: bool, data: Json) -> CallError {
        if retryable {
            message.push_str(
                "; the transaction was rolled back, so the job's retry policy may run it again",
            );
        }
        CallError {
            data: Some(data),
            ..CallError::new(message, retryable)
        }
    }

    /// A call the host stopped (timeout, cancel, shutdown); `message` says what happened on
    /// the server.
    pub(crate) fn stopped(message: String) -> CallError {
        CallError {
            message,
            retryable: false,
            data: Some(serde_json::json!({"stopped": true})),
            cancelled: true,
        }
    }

    /// A call that failed outside the server's own errors, after the procedure was sent: its
    /// outcome is unknown, so it is never retried automatically. `lost`: the connection
    /// broke; otherwise the driver could not read the answer (`detail` says which).
    pub(crate) fn outcome_unknown(
        procedure: &str,
        detail: &dyn std::fmt::Display,
        lost: bool,
    ) -> CallError {
        let message = if lost {
            format!(
                "calling {procedure} failed: {detail}; the connection was lost during the call, \
                 so whether it ran is unknown (not retried automatically)"
            )
        } else {
            format!(
                "calling {procedure} failed: the driver could not read the answer ({detail}), \
                 e.g. a column type it cannot read; how it ended is unknown (not retried \
                 automatically)"
            )
        };
        CallError::new(message, false)
    }
}

impl From<CallError> for JobError {
    fn from(e: CallError) -> JobError {
        // A stopped call's outcome is the host's (timed out, cancelled): it records its own
        // reason and keeps this message, which says what happened on the server.
        let base = if e.retryable && !e.cancelled {
            JobError::retryable(e.message)
        } else {
            JobError::failed(e.message)
        };
        match e.data {
            Some(d) => base.with_data(d),
            None => base,
        }
    }
}

/// Why a running call must stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The job's timeout (the command timeout) passed.
    Timeout,
    /// The host cancelled the run (request or shutdown).
    Cancelled,
}

impl Stop {
    pub(crate) fn shown(self, timeout: Option<Duration>) -> String {
        match (self, timeout) {
            (Stop::Timeout, Some(t)) => format!("the command timeout of {} passed", secs(t)),
            (Stop::Timeout, None) => "the command timeout passed".into(),
            (Stop::Cancelled, _) => {
                "the host stopped the run (its timeout, a cancel or a shutdown)".into()
            }
        }
    }
}

fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.3} s", d.as_secs_f64())
    }
}

/// What a dialect's call needs from the run.
pub(crate) struct CallCtx<'a> {
    pub(crate) ctx: &'a JobContext,
    /// When the job's timeout ends (the command timeout), if it has one.
    pub(crate) deadline: Option<Instant>,
    /// The job's whole timeout, for messages.
    pub(crate) timeout: Option<Duration>,
}

impl CallCtx<'_> {
    /// Resolves when the call must stop: the deadline passed or the host cancelled the run
    /// (polled: the SDK's cancel flag has no waker).
    pub(crate) async fn stopped(&self) -> Stop {
        loop {
            if self.ctx.is_cancelled() {
                return Stop::Cancelled;
            }
            let tick = Duration::from_millis(20);
            match self.deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Stop::Timeout;
                    }
                    tokio::time::sleep((d - now).min(tick)).await;
                }
                None => tokio::time::sleep(tick).await,
            }
        }
    }

    /// Runs `work` (opening a connection, reading the catalog) unless the run must stop
    /// first; nothing has reached the server's procedure yet, so stopping is just dropping it.
    pub(crate) async fn unless_stopped<T>(
        &self,
        work: impl Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        tokio::select! {
            biased;
            r = work => r,
            stop = self.stopped() => Err(CallError::stopped(format!(
                "{} before the procedure was called",
                stop.shown(self.timeout)
            ))),
        }
    }

    /// The time left for opening a connection.
    pub(crate) fn connect_timeout(&self) -> Duration {
        match self.deadline {
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .min(CONNECT_TIMEOUT),
            None => CONNECT_TIMEOUT,
        }
    }
}

/// Runs one `sql::proc` call (what the handler does).
pub fn run(
    ctx: &JobContext,
    params: ProcParams,
    options: &SqlOptions,
) -> Result<ProcResult, JobError> {
    let call = params::validate(params).map_err(JobError::invalid_params)?;
    let connection = options.get(&call.connection)?.clone();
    let timeout = ctx.deadline().map(|d| {
        d.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    });
    // The host stops the run at the job's deadline and raises the cancel flag, which the call
    // watches; its own deadline, a little later, is the backstop should that flag not come.
    let cx = CallCtx {
        ctx,
        deadline: timeout.map(|t| Instant::now() + t + DEADLINE_BACKSTOP),
        timeout,
    };
    // One runtime per call, on the plugin's call thread: connections live for one call (see
    // the crate docs on pooling), and the handler must not depend on the host's runtime.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| {
            JobError::retryable(format!("cannot start the sql executor's runtime: {e}"))
        })?;
    let begun = Instant::now();
    // The drivers' own `tracing` events (tiberius logs every login detail at info) would land
    // in the run log through the SDK's dispatcher; what matters is logged by the call itself.
    let result =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            rt.block_on(async {
                match &connection {
                    Connection::SqlServer(ado) => mssql::call(&cx, ado, &call).await,
                    Connection::Postgres(url) => postgres::call(&cx, url, &call).await,
                }
            })
        });
    // Dropping a runtime waits for its blocking threads without a bound (a DNS lookup stuck in
    // `getaddrinfo`): leave them behind instead of holding the handler past the host's grace.
    rt.shutdown_background();
    let mut result = result.map_err(JobError::from)?;
    result.connection = call.connection.clone();
    result.elapsed_ms = u64::try_from(begun.elapsed().as_millis()).unwrap_or(u64::MAX);
    ctx.info(&format!(
        "{} returned {} in {} ms{}{}",
        result.procedure,
        result
            .return_value
            .as_ref()
            .map_or_else(|| "no value".to_string(), Json::to_string),
        result.elapsed_ms,
        result
            .rows_affected
            .map_or_else(String::new, |n| format!(", {n} rows affected")),
        result
            .result_set
            .as_ref()
            .map_or_else(String::new, |r| format!(
                ", first result set {} rows{}",
                r.row_count,
                if r.truncated {
                    " (kept the first ones)"
                } else {
                    ""
                }
            )),
    ));
    Ok(result)
}
