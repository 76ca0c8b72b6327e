//! `sql::proc` on SQL Server (tiberius).
//!
//! tiberius has no RPC call with output parameters, so a call is one parameterised batch
//! (`sp_executesql` underneath):
//!
//! ```sql
//! DECLARE @takt_rc int;
//! DECLARE @takt_o1 decimal(18,2); SET @takt_o1 = @P3;
//! EXEC @takt_rc = [dbo].[usp_X] @LineId = @P1, @Shift = @P2, @Total = @takt_o1 OUTPUT;
//! SELECT @takt_rc AS [takt_return_value], @takt_o1 AS [Total];
//! ```
//!
//! Only identifiers (re-quoted) and type names built from [`SqlType`] reach the text; every
//! value is a typed `@Pn`. `SET NOCOUNT` is left alone, since it would leak into the
//! procedure. The last result set, recognised by its first column's name, is ours; the first
//! one before it is the procedure's.
//!
//! tiberius also hides the row counts and `PRINT` messages of a response and cannot send an
//! attention; both come from [`watch`], a transport under tiberius that scans the server's
//! token stream and can inject an attention packet. It works where the traffic after login
//! is plain TDS (`Encrypt=false`, which encrypts the login only, or no encryption); under
//! full TLS it cannot see inside, so `rowsAffected` is `null` and a cancel closes the
//! connection instead — the server then rolls the procedure back when it notices.

mod watch;

use std::borrow::Cow;
use std::future::Future;

use futures_util::TryStreamExt;
use serde_json::Value as Json;
use tiberius::{ColumnData, Config, QueryItem, ToSql};
use tokio::net::TcpStream;
use tokio_util::compat::TokioAsyncWriteCompatExt;

use crate::params::{ProcCall, ProcName};
use crate::value::{SqlType, Value};
use crate::{CANCEL_ACK_WAIT, CallCtx, CallError, ProcResult, ResultSet, Stop, cells};

type Client = tiberius::Client<watch::Watched<tokio_util::compat::Compat<TcpStream>>>;

/// The first column of the batch's own last result set.
const RETURN_COLUMN: &str = "takt_return_value";

/// SQL Server error numbers a retry can fix: the victim's transaction was rolled back (1205:
/// chosen as deadlock victim). Work a procedure committed before it is kept, so a procedure
/// that commits inside must be safe to run again for its job to use retries.
const RETRYABLE: &[u32] = &[1205];

/// Login errors that waiting will not fix: login failed (18456), cannot open the database
/// (4060), account locked (18486), untrusted domain (18452).
const LOGIN_REFUSED: &[u32] = &[18456, 4060, 18486, 18452];

/// Runs `call` on the SQL Server of `ado`.
pub(crate) async fn call(
    cx: &CallCtx<'_>,
    ado: &str,
    call: &ProcCall,
) -> Result<ProcResult, CallError> {
    let (mut client, watch) = cx.unless_stopped(connect(cx, ado)).await?;
    let (sql, binds) = batch(call);
    let refs: Vec<&dyn ToSql> = binds.iter().map(|b| b as &dyn ToSql).collect();
    watch.begin_request();

    let max_rows = call.max_rows;
    let work = async {
        let mut stream = client.query(sql.as_str(), &refs).await?;
        let mut sets: Vec<ResultSet> = Vec::new();
        let mut ours: Option<Vec<Json>> = None;
        let mut ours_columns: Vec<String> = Vec::new();
        let mut in_ours = false;
        while let Some(item) = stream.try_next().await? {
            match item {
                QueryItem::Metadata(meta) => {
                    let names: Vec<String> = meta
                        .columns()
                        .iter()
                        .map(|c| c.name().to_string())
                        .collect();
                    in_ours = names.first().is_some_and(|n| n == RETURN_COLUMN);
                    if in_ours {
                        ours_columns = names;
                    } else {
                        sets.push(ResultSet::new(names));
                    }
                }
                QueryItem::Row(row) => {
                    if in_ours {
                        ours = Some(row.cells().map(|(_, c)| cells::mssql(c)).collect());
                    } else {
                        // Only the first set is kept; later ones are counted.
                        let keep = if sets.len() == 1 { max_rows } else { 0 };
                        let Some(set) = sets.last_mut() else { continue };
                        set.push(keep, || row.cells().map(|(_, c)| cells::mssql(c)).collect());
                    }
                }
            }
        }
        Ok::<_, tiberius::error::Error>((sets, ours_columns, ours))
    };
    tokio::pin!(work);
    let outcome = tokio::select! {
        biased;
        r = &mut work => r,
        stop = cx.stopped() => {
            return Err(stopped(cx, &watch, stop, work).await);
        }
    };
    let summary = watch.summary();
    for m in &summary.messages {
        cx.ctx.info(&format!("server: {}", m.text));
    }
    let (sets, ours_columns, ours) = match outcome {
        Ok(v) => v,
        Err(e) => return Err(failed(call, e, &summary)),
    };
    let mut result = ProcResult {
        connection: String::new(),
        database: "sqlserver",
        procedure: quoted(&call.procedure),
        return_value: None,
        output: Default::default(),
        rows_affected: summary.rows_affected,
        result_sets: sets.len(),
        result_set: sets.into_iter().next(),
        messages: summary.messages.iter().map(|m| m.text.clone()).collect(),
        elapsed_ms: 0,
    };
    if let Some(values) = ours {
        let mut values = values.into_iter();
        result.return_value = values.next();
        for (name, v) in ours_columns.into_iter().skip(1).zip(values) {
            result.output.insert(name, v);
        }
    } else {
        return Err(CallError::new(
            format!(
                "{} ended without its return value: the batch was aborted (see the server's \
                 messages in the run log)",
                quoted(&call.procedure)
            ),
            false,
        ));
    }
    if summary.gave_up.is_some() {
        result.rows_affected = None;
    }
    Ok(result)
}

/// Stops a running call: an attention on the request, then up to [`CANCEL_ACK_WAIT`] for the
/// server to acknowledge it while the response drains; the connection is closed either way
/// (dropped with the call).
async fn stopped<F: Future>(
    cx: &CallCtx<'_>,
    watch: &watch::Watch,
    stop: Stop,
    work: std::pin::Pin<&mut F>,
) -> CallError {
    let why = stop.shown(cx.timeout);
    let message = if watch.attention() {
        let _ = tokio::time::timeout(CANCEL_ACK_WAIT, work).await;
        let seen = watch.summary();
        if seen.attention_acknowledged && !seen.out_of_step() {
            format!("{why}: the server was told to stop the procedure and acknowledged it")
        } else if seen.out_of_step() || seen.response_complete {
            format!(
                "{why}: the procedure had already finished when the cancel reached the server \
                 (its work is done; its result was not read); the connection is closed"
            )
        } else {
            format!(
                "{why}: the server was told to stop the procedure but did not acknowledge it \
                 within {} s; the connection is closed, and the server rolls back when it \
                 notices",
                CANCEL_ACK_WAIT.as_secs()
            )
        }
    } else {
        format!(
            "{why}: no attention can be sent on this connection (it is encrypted end to end, \
             or its answer had already ended); it is closed instead, and the server stops and \
             rolls back the procedure when it notices"
        )
    };
    cx.ctx.warn(&message);
    CallError::stopped(message)
}

/// Opens a connection for one call (following one gateway redirect), and arms the watcher
/// when the traffic after login is plain TDS.
async fn connect(cx: &CallCtx<'_>, ado: &str) -> Result<(Client, watch::Watch), CallError> {
    let mut config = Config::from_ado_string(ado).map_err(|e| {
        CallError::new(
            format!("the sql server connection string is invalid: {e}"),
            false,
        )
    })?;
    let plain_after_login = plain_after_login(ado);
    let limit = cx.connect_timeout();
    let open = async {
        let mut redirected = false;
        loop {
            let tcp = TcpStream::connect(config.get_addr()).await?;
            tcp.set_nodelay(true)?;
            let (stream, watch) = watch::watch(tcp.compat_write());
            match tiberius::Client::connect(config.clone(), stream).await {
                Ok(client) => return Ok((client, watch)),
                Err(tiberius::error::Error::Routing { host, port }) if !redirected => {
                    redirected = true;
                    config.host(host);
                    config.port(port);
                }
                Err(e) => return Err(e),
            }
        }
    };
    let (client, watch) = match tokio::time::timeout(limit, open).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            let retryable = !matches!(
                &e,
                tiberius::error::Error::Server(s) if LOGIN_REFUSED.contains(&s.code())
            ) && !matches!(&e, tiberius::error::Error::Routing { .. });
            return Err(CallError::new(
                format!("cannot connect to sql server at {}: {e}", config.get_addr()),
                retryable,
            ));
        }
        Err(_) => {
            return Err(CallError::new(
                format!(
                    "cannot connect to sql server at {} within {} s",
                    config.get_addr(),
                    limit.as_secs()
                ),
                true,
            ));
        }
    };
    if plain_after_login {
        watch.arm();
    }
    Ok((client, watch))
}

/// Whether the connection string asks for no encryption after the login (`Encrypt=false`
/// encrypts the login only; `DANGER_PLAINTEXT` nothing).
fn plain_after_login(ado: &str) -> bool {
    ado.split(';').any(|kv| match kv.split_once('=') {
        Some((k, v)) => {
            k.trim().eq_ignore_ascii_case("encrypt")
                && matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "false" | "no" | "danger_plaintext"
                )
        }
        None => false,
    })
}

/// `[a].[b].[c]`: each part bracket-quoted (a `]` cannot occur: the name was validated).
fn quoted(name: &ProcName) -> String {
    name.parts
        .iter()
        .map(|p| format!("[{}]", p.text))
        .collect::<Vec<_>>()
        .join(".")
}

/// A bound value, typed like its parameter (NULL included).
struct Bind(ColumnData<'static>);

impl ToSql for Bind {
    fn to_sql(&self) -> ColumnData<'_> {
        self.0.clone()
    }
}

/// The batch and its `@Pn` values, in order.
fn batch(call: &ProcCall) -> (String, Vec<Bind>) {
    let mut binds = Vec::new();
    let mut bind = |ty: SqlType, v: &Value| {
        binds.push(Bind(column(ty, v)));
        format!("@P{}", binds.len())
    };
    let mut sql = String::from("DECLARE @takt_rc int;\n");
    let mut args = Vec::new();
    let mut outputs = Vec::new();
    for (i, p) in call.params.iter().enumerate() {
        if p.output {
            let var = format!("@takt_o{i}");
            sql.push_str(&format!("DECLARE {var} {};\n", p.ty.mssql()));
            if p.value != Value::Null {
                let placeholder = bind(p.ty, &p.value);
                sql.push_str(&format!("SET {var} = {placeholder};\n"));
            }
            args.push(format!("@{} = {var} OUTPUT", p.name));
            outputs.push(format!("{var} AS [{}]", p.name));
        } else {
            let placeholder = bind(p.ty, &p.value);
            args.push(format!("@{} = {placeholder}", p.name));
        }
    }
    sql.push_str(&format!("EXEC @takt_rc = {}", quoted(&call.procedure)));
    if !args.is_empty() {
        sql.push(' ');
        sql.push_str(&args.join(", "));
    }
    sql.push_str(";\n");
    sql.push_str(&format!("SELECT @takt_rc AS [{RETURN_COLUMN}]"));
    for o in outputs {
        sql.push_str(", ");
        sql.push_str(&o);
    }
    sql.push(';');
    (sql, binds)
}

/// The tiberius value of `v` as `ty` (a typed NULL for `Value::Null`).
fn column(ty: SqlType, v: &Value) -> ColumnData<'static> {
    use tiberius::time::{Date, DateTime2, Time};
    let int = match v {
        Value::Int(i) => Some(*i),
        _ => None,
    };
    let text = match v {
        Value::Text(s) | Value::Decimal(s) | Value::Uuid(s) => Some(s.clone()),
        _ => None,
    };
    match ty {
        SqlType::TinyInt => ColumnData::U8(int.map(|i| i as u8)),
        SqlType::SmallInt => ColumnData::I16(int.map(|i| i as i16)),
        SqlType::Int => ColumnData::I32(int.map(|i| i as i32)),
        SqlType::BigInt => ColumnData::I64(int),
        SqlType::Bit => ColumnData::Bit(match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        }),
        SqlType::Decimal { scale, .. } => ColumnData::Numeric(text.map(|s| {
            // Validated digits: the scaled integer of the text, padded to the scale.
            let (whole, frac) = s.split_once('.').unwrap_or((&s, ""));
            let padded = format!("{whole}{frac:0<width$}", width = usize::from(scale));
            tiberius::numeric::Numeric::new_with_scale(padded.parse().unwrap_or(0), scale)
        })),
        SqlType::Float => ColumnData::F64(match v {
            Value::Float(f) => Some(*f),
            _ => None,
        }),
        SqlType::Real => ColumnData::F32(match v {
            Value::Float(f) => Some(*f as f32),
            _ => None,
        }),
        SqlType::NVarChar(_) | SqlType::VarChar(_) => ColumnData::String(text.map(Cow::Owned)),
        SqlType::Date => ColumnData::Date(match v {
            Value::Date(d) => Some(Date::new(days_since_0001(*d))),
            _ => None,
        }),
        SqlType::DateTime | SqlType::DateTime2 => ColumnData::DateTime2(match v {
            Value::DateTime(dt) => {
                let t = dt.time();
                let increments = (u64::from(t.hour() as u8) * 3600
                    + u64::from(t.minute() as u8) * 60
                    + u64::from(t.second() as u8))
                    * 10_000_000
                    + u64::from(t.subsec_nanosecond() as u32) / 100;
                Some(DateTime2::new(
                    Date::new(days_since_0001(dt.date())),
                    Time::new(increments, 7),
                ))
            }
            _ => None,
        }),
        SqlType::Uuid => ColumnData::Guid(text.and_then(|s| tiberius::Uuid::parse_str(&s).ok())),
        SqlType::VarBinary(_) => ColumnData::Binary(match v {
            Value::Bytes(b) => Some(Cow::Owned(b.clone())),
            _ => None,
        }),
    }
}

fn days_since_0001(d: jiff::civil::Date) -> u32 {
    // A validated date lies in 0001-01-01 ..= 9999-12-31, so the difference always exists.
    let epoch = jiff::civil::date(1, 1, 1);
    epoch
        .until(d)
        .map_or(0, |span| u32::try_from(span.get_days()).unwrap_or(0))
}

/// The run's error for a failed call: the server's number, state, class, message, procedure
/// and line (in the message and as JSON data), retryable for a deadlock victim.
fn failed(call: &ProcCall, e: tiberius::error::Error, summary: &watch::Summary) -> CallError {
    let procedure = quoted(&call.procedure);
    match e {
        tiberius::error::Error::Server(t) => {
            let retryable = RETRYABLE.contains(&t.code());
            let at = match (t.procedure(), t.line()) {
                ("", 0) => String::new(),
                ("", line) => format!(" at line {line}"),
                (p, line) => format!(" in {p} at line {line}"),
            };
            let message = format!(
                "sql server error {} (state {}, severity {}){at}: {}",
                t.code(),
                t.state(),
                t.class(),
                t.message()
            );
            CallError::server(
                message,
                retryable,
                serde_json::json!({
                    "procedure": procedure,
                    "number": t.code(),
                    "state": t.state(),
                    "severity": t.class(),
                    "message": t.message(),
                    "serverProcedure": t.procedure(),
                    "line": t.line(),
                    "server": t.server(),
                    "messages": summary.messages.iter().map(|m| m.text.clone()).collect::<Vec<_>>(),
                }),
            )
        }
        other => {
            let lost = matches!(other, tiberius::error::Error::Io { .. });
            CallError::outcome_unknown(&procedure, &other, lost)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{self, ProcParams};

    fn call(v: Json) -> ProcCall {
        let p: ProcParams = serde_json::from_value(v).unwrap();
        params::validate(p).unwrap()
    }

    #[test]
    fn the_batch_holds_placeholders_identifiers_and_types_only() {
        let c = call(serde_json::json!({
            "connection": "mes",
            "procedure": "dbo.usp_X",
            "params": {
                "LineId": 3,
                "Note": "x'; DROP TABLE t; --",
                "Total": {"type": "decimal(18,2)", "value": "1.50", "output": true},
                "Count": {"type": "int", "output": true}
            }
        }));
        let (sql, binds) = batch(&c);
        assert!(!sql.contains("DROP"), "{sql}");
        assert_eq!(binds.len(), 3, "{sql}");
        assert!(sql.contains("DECLARE @takt_o3 decimal(18,2);"), "{sql}");
        assert!(
            sql.contains("EXEC @takt_rc = [dbo].[usp_X] @Count = @takt_o0 OUTPUT"),
            "{sql}"
        );
        assert!(
            sql.ends_with(
                "SELECT @takt_rc AS [takt_return_value], @takt_o0 AS [Count], @takt_o3 AS [Total];"
            ),
            "{sql}"
        );
    }

    #[test]
    fn decimals_bind_exactly() {
        let ty = SqlType::Decimal {
            precision: 18,
            scale: 2,
        };
        match column(ty, &Value::Decimal("-12.5".into())) {
            ColumnData::Numeric(Some(n)) => {
                assert_eq!((n.value(), n.scale()), (-1250, 2));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            column(ty, &Value::Null),
            ColumnData::Numeric(None)
        ));
    }

    #[test]
    fn encryption_settings_decide_whether_the_watcher_can_see() {
        assert!(plain_after_login("Server=a;Encrypt=false"));
        assert!(plain_after_login("Server=a; encrypt = DANGER_PLAINTEXT"));
        assert!(!plain_after_login("Server=a;Encrypt=true"));
        assert!(!plain_after_login("Server=a"));
    }
}
