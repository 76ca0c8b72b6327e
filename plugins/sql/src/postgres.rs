//! `sql::proc` on PostgreSQL (tokio-postgres), with the params shape of SQL Server.
//!
//! The catalog says what the name is: a procedure is run with `CALL`, its `OUT`/`INOUT`
//! parameters coming back as the one row `CALL` returns; a function with
//! `SELECT * FROM f(…)`, its rows being the first result set (and a scalar function's value
//! the return value). Arguments use named notation (`name => $1`), each placeholder typed as
//! the argument's **declared** type (from `pg_proc`) and each value sent as text, which the
//! server reads with that type's input function: a plain `3` reaches an `integer` argument,
//! although the job's own vocabulary would call it `bigint`. The text of the statement holds
//! only quoted identifiers and placeholders.
//!
//! An overloaded name is resolved here, not by the server: the version whose argument names
//! take exactly the given parameters (every argument without a default given, none unknown);
//! among several, a parameter's explicit `type` decides; otherwise the error lists them.
//!
//! Unquoted names are folded to lower case, as PostgreSQL itself does, so `public.CloseShift`
//! finds `closeshift`; `"CloseShift"` keeps its case.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use tokio_postgres::types::{Format, IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::cells::PgCell;
use crate::params::{NamePart, ProcCall};
use crate::value::SqlType;
use crate::{CANCEL_ACK_WAIT, CallCtx, CallError, ProcResult, ResultSet, Stop};

/// SQLSTATEs a retry can fix: the transaction was rolled back before anything was kept.
const RETRYABLE: &[&str] = &["40P01", "40001"];
/// SQLSTATE of a statement stopped by a cancel request.
const QUERY_CANCELED: &str = "57014";

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
    let mut types = Vec::new();
    let mut values = Vec::new();
    for (p, (arg, ty)) in call.params.iter().zip(&routine.args) {
        if p.output && !routine.procedure {
            return Err(CallError::new(
                format!(
                    "parameter {}: {} is a function, which returns its OUT parameters as \
                     columns of its result; remove \"output\" and read them from the result set",
                    p.name, routine.signature
                ),
                false,
            ));
        }
        values.push(AsText(p.value.postgres_text()));
        types.push(ty.clone());
        args.push(format!("{} => ${}", ident(arg), values.len()));
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
        // Each placeholder typed as its argument's declared type: the overload is the one
        // chosen above, and no value is converted on our side.
        let statement = client.prepare_typed(&sql, &types).await?;
        let stream = client.query_raw(&statement, values.iter()).await?;
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

/// What the catalog says about the routine chosen for the call.
struct Routine {
    procedure: bool,
    returns_set: bool,
    schema: String,
    name: String,
    /// `schema.name(arguments)`, for messages.
    signature: String,
    /// Per given parameter (in [`ProcCall::params`] order): the argument's declared name and
    /// type.
    args: Vec<(String, Type)>,
}

/// One routine of the name, as `pg_proc` describes it.
struct Candidate {
    kind: String,
    returns_set: bool,
    schema: String,
    /// The schema's place in the search path (0 when the schema was named).
    rank: i32,
    signature: String,
    /// Every argument, in order: name ("" when unnamed), mode (`i`, `o`, `b`, `v`, `t`),
    /// type OID and type name, and whether it has a default.
    args: Vec<Arg>,
}

struct Arg {
    name: String,
    mode: String,
    oid: u32,
    type_name: String,
    has_default: bool,
}

impl Arg {
    /// Whether a call passes it: inputs, and for a procedure its OUT arguments too (CALL
    /// takes them, usually as NULL); a function's OUT and TABLE columns are its result.
    fn passed(&self, procedure: bool) -> bool {
        matches!(self.mode.as_str(), "i" | "b" | "v") || (procedure && self.mode == "o")
    }
}

impl Candidate {
    fn procedure(&self) -> bool {
        self.kind == "p"
    }

    /// The declared argument of each given parameter, or why this routine cannot take them.
    fn bind(&self, call: &ProcCall) -> Result<Vec<&Arg>, String> {
        let procedure = self.procedure();
        let mut bound = Vec::with_capacity(call.params.len());
        for p in &call.params {
            let arg = self
                .args
                .iter()
                .find(|a| a.name.eq_ignore_ascii_case(&p.name))
                .ok_or_else(|| format!("has no parameter {}", p.name))?;
            if !arg.passed(procedure) {
                return Err(format!(
                    "returns {} as a column of its result: remove it from the params and read it \
                     from the result set",
                    arg.name
                ));
            }
            if arg.mode == "v" {
                return Err(format!(
                    "takes {} as VARIADIC, which sql::proc cannot pass (it binds single values)",
                    arg.name
                ));
            }
            bound.push(arg);
        }
        for a in &self.args {
            if a.passed(procedure) && !a.has_default && !bound.iter().any(|b| std::ptr::eq(*b, a)) {
                return Err(if a.name.is_empty() {
                    "has an argument without a name, which named parameters cannot reach".into()
                } else if a.mode == "o" {
                    format!(
                        "needs parameter {} (OUT): add it with {{\"type\": \"{}\", \"output\": \
                         true}}",
                        a.name, a.type_name
                    )
                } else {
                    format!("needs parameter {} ({})", a.name, a.type_name)
                });
            }
        }
        Ok(bound)
    }

    /// Whether every parameter given with a `type` has that type declared (an overload's
    /// tie-break).
    fn matches_types(&self, call: &ProcCall, bound: &[&Arg]) -> bool {
        call.params
            .iter()
            .zip(bound)
            .all(|(p, a)| !p.typed || declared_as(p.ty).iter().any(|t| t.oid() == a.oid))
    }
}

/// The PostgreSQL types a job's type names: what an explicit `type` must meet to choose an
/// overload.
fn declared_as(ty: SqlType) -> &'static [Type] {
    match ty {
        SqlType::TinyInt | SqlType::SmallInt => &[Type::INT2],
        SqlType::Int => &[Type::INT4],
        SqlType::BigInt => &[Type::INT8],
        SqlType::Bit => &[Type::BOOL],
        SqlType::Decimal { .. } => &[Type::NUMERIC],
        SqlType::Float => &[Type::FLOAT8],
        SqlType::Real => &[Type::FLOAT4],
        SqlType::NVarChar(_) | SqlType::VarChar(_) => &[Type::TEXT, Type::VARCHAR, Type::BPCHAR],
        SqlType::Date => &[Type::DATE],
        SqlType::DateTime | SqlType::DateTime2 => &[Type::TIMESTAMP],
        SqlType::Uuid => &[Type::UUID],
        SqlType::VarBinary(_) => &[Type::BYTEA],
    }
}

/// Finds the routine in the catalog — in the named schema, or the schemas of the search path
/// — and, when the name is overloaded, the one version whose argument names take the given
/// parameters (a parameter's `type` breaks a tie between versions that differ only in types).
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
            "SELECT p.prokind::text, p.proretset, n.nspname::text, \
                    coalesce(array_position(current_schemas(false), n.nspname::name), 0), \
                    n.nspname::text || '.' || p.proname::text || '(' || \
                      pg_get_function_identity_arguments(p.oid) || ')', \
                    coalesce(p.proargnames, '{}'::text[]), \
                    coalesce(p.proargmodes::text[], \
                             array_fill('i'::text, ARRAY[p.pronargs::int])), \
                    coalesce(p.proallargtypes, p.proargtypes::oid[]), \
                    ARRAY(SELECT format_type(t, NULL) \
                          FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) \
                               WITH ORDINALITY AS u(t, i) ORDER BY i), \
                    p.pronargdefaults::int \
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE p.proname = $1 \
               AND (($2::text IS NULL AND n.nspname = ANY (current_schemas(false))) \
                    OR n.nspname = $2::text) \
             ORDER BY 4, p.oid",
            &[&name, &schema],
        )
        .await
        .map_err(lookup_failed)?;
    let candidates: Vec<Candidate> = rows.iter().map(candidate).collect();
    if candidates.is_empty() {
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
    }
    let refuse = |message: String| Err(CallError::new(message, false));
    let mut fitting = Vec::new();
    let mut reasons = Vec::new();
    for c in &candidates {
        if c.kind != "p" && c.kind != "f" {
            reasons.push(format!(
                "{} is an aggregate or window function, which cannot be called on its own",
                c.signature
            ));
            continue;
        }
        match c.bind(call) {
            Ok(bound) => fitting.push((c, bound)),
            Err(why) => reasons.push(format!("{} {why}", c.signature)),
        }
    }
    // A schema earlier in the search path wins, as in PostgreSQL.
    if let Some(first) = fitting.iter().map(|(c, _)| c.rank).min() {
        fitting.retain(|(c, _)| c.rank == first);
    }
    if fitting.len() > 1 {
        let typed: Vec<_> = fitting
            .iter()
            .filter(|(c, bound)| c.matches_types(call, bound))
            .collect();
        if typed.len() == 1 {
            let chosen = (typed[0].0, typed[0].1.clone());
            fitting = vec![chosen];
        }
    }
    let given: Vec<&str> = call.params.iter().map(|p| p.name.as_str()).collect();
    let given = if given.is_empty() {
        "no parameters".to_string()
    } else {
        format!("the parameters {}", given.join(", "))
    };
    match fitting.as_slice() {
        [] if candidates.len() == 1 => refuse(reasons.remove(0)),
        [] => refuse(format!(
            "no version of {} takes {given}: {}",
            call.procedure.shown(),
            reasons.join("; ")
        )),
        [(c, bound)] => Ok(Routine {
            procedure: c.procedure(),
            returns_set: c.returns_set,
            schema: c.schema.clone(),
            name,
            signature: c.signature.clone(),
            args: bound.iter().map(|a| (a.name.clone(), pg_type(a))).collect(),
        }),
        several => refuse(format!(
            "{} is overloaded and {} versions take {given}: {}; give each parameter its \
             \"type\" (as declared) to choose one",
            call.procedure.shown(),
            several.len(),
            several
                .iter()
                .map(|(c, _)| c.signature.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn candidate(row: &tokio_postgres::Row) -> Candidate {
    let names: Vec<String> = row.get(5);
    let modes: Vec<String> = row.get(6);
    let oids: Vec<u32> = row.get(7);
    let type_names: Vec<String> = row.get(8);
    let defaults = usize::try_from(row.get::<_, i32>(9)).unwrap_or(0);
    // Defaults belong to the last `pronargdefaults` input arguments.
    let inputs = modes
        .iter()
        .filter(|m| matches!(m.as_str(), "i" | "b" | "v"))
        .count();
    let mut input = 0;
    let args = oids
        .iter()
        .enumerate()
        .map(|(i, oid)| {
            let mode = modes.get(i).cloned().unwrap_or_else(|| "i".into());
            let is_input = matches!(mode.as_str(), "i" | "b" | "v");
            let has_default = is_input && input >= inputs.saturating_sub(defaults);
            if is_input {
                input += 1;
            }
            Arg {
                name: names.get(i).cloned().unwrap_or_default(),
                mode,
                oid: *oid,
                type_name: type_names.get(i).cloned().unwrap_or_default(),
                has_default,
            }
        })
        .collect();
    Candidate {
        kind: row.get(0),
        returns_set: row.get(1),
        schema: row.get(2),
        rank: row.get(3),
        signature: row.get(4),
        args,
    }
}

/// The driver's type for an argument's declared type: a built-in by its OID, anything else
/// (a domain, an enum) by name and OID — the bind only sends the OID.
fn pg_type(a: &Arg) -> Type {
    Type::from_oid(a.oid).unwrap_or_else(|| {
        Type::new(
            a.type_name.clone(),
            a.oid,
            tokio_postgres::types::Kind::Pseudo,
            String::new(),
        )
    })
}

/// A value bound as its text form, in the text format of the wire protocol, so the server
/// parses it with the input function of the declared type (as a cast from text would). The
/// driver's own `String` binding accepts only text types.
#[derive(Debug)]
struct AsText(Option<String>);

impl ToSql for AsText {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            None => Ok(IsNull::Yes),
            Some(text) => {
                out.extend_from_slice(text.as_bytes());
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
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
