//! `sql::proc` on PostgreSQL (tokio-postgres), with the params shape of SQL Server.
//!
//! The catalog says what the name is: a procedure is run with `CALL`, its `OUT`/`INOUT`
//! parameters coming back as the one row `CALL` returns; a function with
//! `SELECT * FROM f(…)`, its rows being the first result set (and a scalar function's value
//! the return value). Arguments use named notation (`name => …`), every value bound as text
//! and cast server-side to the parameter's declared [`SqlType`] — the text of the statement
//! holds only quoted identifiers, placeholders and type names built from the enum.
//!
//! Unquoted names are folded to lower case, as PostgreSQL itself does, so `public.CloseShift`
//! finds `closeshift`; `"CloseShift"` keeps its case.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::cells::PgCell;
use crate::params::{NamePart, ProcCall};
use crate::{CANCEL_ACK_WAIT, CallCtx, CallError, ProcResult, ResultSet, Stop};

/// SQLSTATEs a retry can fix: the transaction was rolled back before anything was kept.
const RETRYABLE: &[&str] = &["40P01", "40001"];
/// SQLSTATE of a statement stopped by a cancel request.
const QUERY_CANCELED: &str = "57014";

/// What the catalog says about the routine.
struct Routine {
    procedure: bool,
    returns_set: bool,
    schema: String,
    name: String,
}

/// Runs `call` on the PostgreSQL of `url`.
pub(crate) async fn call(
    cx: &CallCtx<'_>,
    url: &str,
    call: &ProcCall,
) -> Result<ProcResult, CallError> {
    let messages: Arc<Mutex<Vec<String>>> = Arc::default();
    let (client, routine) = cx
        .unless_stopped(async {
            let client = connect(cx, url, messages.clone()).await?;
            let routine = resolve(&client, call).await?;
            Ok((client, routine))
        })
        .await?;
    let quoted = format!("{}.{}", ident(&routine.schema), ident(&routine.name));
    let mut args = Vec::new();
    let mut values: Vec<Option<String>> = Vec::new();
    for p in &call.params {
        if p.output && !routine.procedure {
            return Err(CallError::new(
                format!(
                    "parameter {}: {quoted} is a function, which returns its OUT parameters as \
                     columns of its result; remove \"output\" and read them from the result set",
                    p.name
                ),
                false,
            ));
        }
        values.push(p.value.postgres_text());
        args.push(format!(
            "{} => CAST(${}::text AS {})",
            ident(&p.name.to_ascii_lowercase()),
            values.len(),
            p.ty.postgres()
        ));
    }
    let sql = if routine.procedure {
        format!("CALL {quoted}({})", args.join(", "))
    } else {
        format!("SELECT * FROM {quoted}({})", args.join(", "))
    };
    let mut result = ProcResult {
        connection: String::new(),
        database: "postgres",
        procedure: quoted.clone(),
        return_value: None,
        output: Default::default(),
        rows_affected: None,
        result_set: None,
        result_sets: 0,
        messages: Vec::new(),
        elapsed_ms: 0,
    };

    let max_rows = call.max_rows;
    let work = async {
        let stream = client.query_raw(sql.as_str(), values.iter()).await?;
        futures_util::pin_mut!(stream);
        let mut set: Option<ResultSet> = None;
        while let Some(row) = stream.try_next().await? {
            let set = set.get_or_insert_with(|| {
                ResultSet::new(row.columns().iter().map(|c| c.name().to_string()))
            });
            let mut cells = Vec::with_capacity(row.len());
            for i in 0..row.len() {
                cells.push(row.try_get::<_, PgCell>(i)?.0);
            }
            set.push(max_rows.max(1), || cells);
        }
        Ok::<_, tokio_postgres::Error>(set)
    };
    tokio::pin!(work);
    let outcome = tokio::select! {
        biased;
        r = &mut work => r,
        stop = cx.stopped() => {
            return Err(stopped(cx, &client, stop, work).await);
        }
    };
    result.messages = messages.lock().map(|m| m.clone()).unwrap_or_default();
    for m in &result.messages {
        cx.ctx.info(&format!("server: {m}"));
    }
    let set = outcome.map_err(|e| failed(&quoted, &e, &result.messages))?;
    if routine.procedure {
        // CALL answers one row of the OUT/INOUT values (none without such parameters).
        if let Some(set) = set
            && let Some(row) = set.rows.into_iter().next()
        {
            result.output = row.into_iter().collect();
        }
    } else if let Some(mut set) = set {
        if !routine.returns_set && set.columns.len() == 1 && set.row_count == 1 {
            result.return_value = set.rows.first().and_then(|r| r.values().next().cloned());
        }
        set.truncated |= set.rows.len() > max_rows;
        set.rows.truncate(max_rows);
        result.result_sets = 1;
        result.result_set = Some(set);
    }
    Ok(result)
}

/// Stops a running statement with a cancel request (a separate connection, like
/// `pg_cancel_backend`), then gives the server [`CANCEL_ACK_WAIT`] to end it.
async fn stopped<F>(
    cx: &CallCtx<'_>,
    client: &Client,
    stop: Stop,
    work: std::pin::Pin<&mut F>,
) -> CallError
where
    F: Future<Output = Result<Option<ResultSet>, tokio_postgres::Error>>,
{
    let why = stop.shown(cx.timeout);
    // The cancel request opens a connection of its own: bounded, since an unreachable server
    // is exactly when calls hang.
    let cancel = tokio::time::timeout(
        Duration::from_secs(1),
        client.cancel_token().cancel_query(NoTls),
    )
    .await;
    let message = match cancel {
        Ok(Ok(())) => match tokio::time::timeout(CANCEL_ACK_WAIT, work).await {
            Ok(Err(e)) if e.code().map(|c| c.code()) == Some(QUERY_CANCELED) => {
                format!("{why}: the server cancelled the statement")
            }
            Ok(_) => format!("{why}: the statement ended as the cancel arrived"),
            Err(_) => format!(
                "{why}: the server was asked to cancel the statement but did not end it within \
                 {} s; the connection is closed",
                CANCEL_ACK_WAIT.as_secs()
            ),
        },
        Ok(Err(e)) => format!(
            "{why}: the cancel request could not be sent ({e}); the connection is closed, and \
             the server ends the statement when it notices"
        ),
        Err(_) => format!(
            "{why}: the cancel request did not reach the server within 1 s; the connection is \
             closed, and the server ends the statement when it notices"
        ),
    };
    cx.ctx.warn(&message);
    CallError::stopped(message)
}

/// Opens a connection for one call; its notices (`RAISE NOTICE`) are collected into
/// `messages`.
async fn connect(
    cx: &CallCtx<'_>,
    url: &str,
    messages: Arc<Mutex<Vec<String>>>,
) -> Result<Client, CallError> {
    let config: tokio_postgres::Config = url.parse().map_err(|e| {
        CallError::new(
            format!("the postgresql connection string is invalid: {e}"),
            false,
        )
    })?;
    let limit = cx.connect_timeout();
    let (client, mut connection) = match tokio::time::timeout(limit, config.connect(NoTls)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            // A refused login (28P01, 28000) will not heal by itself; a network error may.
            let auth = e
                .code()
                .is_some_and(|c| c.code().starts_with("28") || c.code() == "3D000");
            return Err(CallError::new(
                format!("cannot connect to postgresql: {e}"),
                !auth,
            ));
        }
        Err(_) => {
            return Err(CallError::new(
                format!("cannot connect to postgresql within {} s", limit.as_secs()),
                true,
            ));
        }
    };
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |c| connection.poll_message(c));
        while let Some(Ok(message)) = stream.next().await {
            if let AsyncMessage::Notice(n) = message
                && let Ok(mut m) = messages.lock()
            {
                m.push(n.message().to_string());
            }
        }
    });
    Ok(client)
}

/// The part as PostgreSQL resolves it: unquoted parts fold to lower case.
fn folded(p: &NamePart) -> String {
    if p.quoted {
        p.text.clone()
    } else {
        // PostgreSQL folds only A-Z (an unquoted Überstunden stays Überstunden).
        p.text.to_ascii_lowercase()
    }
}

/// Finds the routine in the catalog: in the named schema, or the first schema of the search
/// path that has it.
async fn resolve(client: &Client, call: &ProcCall) -> Result<Routine, CallError> {
    let parts = &call.procedure.parts;
    let (database, schema, name) = match parts.as_slice() {
        [n] => (None, None, folded(n)),
        [s, n] => (None, Some(folded(s)), folded(n)),
        [d, s, n] => (Some(folded(d)), Some(folded(s)), folded(n)),
        _ => unreachable!("validated names have one to three parts"),
    };
    let lookup_failed = |e: tokio_postgres::Error| {
        CallError::new(
            format!("looking up {} failed: {e}", call.procedure.shown()),
            true,
        )
    };
    if let Some(db) = database {
        let current: String = client
            .query_one("SELECT current_database()", &[])
            .await
            .map_err(lookup_failed)?
            .get(0);
        if db != current {
            return Err(CallError::new(
                format!(
                    "{} names database {db}, but connection {} is to {current}; PostgreSQL \
                     cannot call across databases: configure a connection to {db}",
                    call.procedure.shown(),
                    call.connection
                ),
                false,
            ));
        }
    }
    let rows = client
        .query(
            "SELECT p.prokind::text, p.proretset, n.nspname::text \
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE p.proname = $1 \
               AND (($2::text IS NULL AND n.nspname = ANY (current_schemas(false))) \
                    OR n.nspname = $2::text) \
             ORDER BY array_position(current_schemas(false), n.nspname::name), p.prokind",
            &[&name, &schema],
        )
        .await
        .map_err(lookup_failed)?;
    let Some(row) = rows.first() else {
        return Err(CallError::new(
            format!(
                "no procedure or function {} exists{} (unquoted names are looked up in lower \
                 case; quote a mixed-case name: \"CloseShift\")",
                call.procedure.shown(),
                match &schema {
                    Some(s) => format!(" in schema {s}"),
                    None => " in the search path".to_string(),
                }
            ),
            false,
        ));
    };
    let kind: String = row.get(0);
    if kind != "p" && kind != "f" {
        return Err(CallError::new(
            format!(
                "{} is an aggregate or window function, which cannot be called on its own",
                call.procedure.shown()
            ),
            false,
        ));
    }
    Ok(Routine {
        procedure: kind == "p",
        returns_set: row.get(1),
        schema: row.get(2),
        name,
    })
}

/// `"x"`: a quoted identifier (`"` doubled; validated names hold none anyway).
fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The run's error: SQLSTATE, message, detail, hint and where (the PL/pgSQL line) in the
/// message and as JSON data; a deadlock or serialization failure is retryable.
fn failed(procedure: &str, e: &tokio_postgres::Error, messages: &[String]) -> CallError {
    match e.as_db_error() {
        Some(db) => {
            let retryable = RETRYABLE.contains(&db.code().code());
            let mut message = format!(
                "postgresql error {} ({}): {}",
                db.code().code(),
                db.severity(),
                db.message()
            );
            if let Some(d) = db.detail() {
                message.push_str(&format!("; detail: {d}"));
            }
            if let Some(h) = db.hint() {
                message.push_str(&format!("; hint: {h}"));
            }
            if let Some(w) = db.where_() {
                message.push_str(&format!("; where: {}", w.replace('\n', " / ")));
            }
            CallError::server(
                message,
                retryable,
                serde_json::json!({
                    "procedure": procedure,
                    "sqlstate": db.code().code(),
                    "severity": db.severity(),
                    "message": db.message(),
                    "detail": db.detail(),
                    "hint": db.hint(),
                    "where": db.where_(),
                    "routine": db.routine(),
                    "messages": messages,
                }),
            )
        }
        None => CallError::outcome_unknown(procedure, e, e.is_closed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_folded_like_postgresql() {
        assert_eq!(ident("CloseShift"), "\"CloseShift\"");
        let unquoted = NamePart {
            text: "CloseShift".into(),
            quoted: false,
        };
        assert_eq!(folded(&unquoted), "closeshift");
        let quoted = NamePart {
            text: "CloseShift".into(),
            quoted: true,
        };
        assert_eq!(folded(&quoted), "CloseShift");
    }
}
