//! The job params of `sql::proc` and their validation: everything a job supplies is checked
//! here, before any connection is opened, so a bad job fails with a precise message and
//! without touching the database.
//!
//! Three rules keep SQL injection out by construction:
//! * the procedure name is parsed as a (schema-qualified) identifier and re-quoted by the
//!   dialect; anything that is not an identifier is refused, never escaped;
//! * parameter *names* are identifiers too (they appear in the statement as `@Name` or
//!   `Name => …`);
//! * parameter *values* are only ever bound as parameters of the statement — the statement
//!   text holds placeholders, type names built from [`SqlType`] and quoted identifiers.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value as Json;

use crate::value::{SqlType, Value};

/// The first result set keeps at most this many rows unless the job says otherwise.
pub const DEFAULT_MAX_ROWS: usize = 100;
/// The most rows a job may ask to keep (the result is stored with the run).
pub const MAX_ROWS_LIMIT: usize = 10_000;
/// SQL Server's identifier length limit (`sysname`); PostgreSQL's is lower (63 bytes) and is
/// enforced by the server.
const MAX_IDENTIFIER: usize = 128;

/// `sql::proc` params as the job writes them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProcParams {
    /// A connection *name* from the host's `[sql.connections]`.
    pub connection: String,
    /// The procedure (SQL Server) or procedure/function (PostgreSQL), e.g. `dbo.usp_Close`.
    pub procedure: String,
    /// Named parameters: a plain JSON value, or `{"type": …, "value": …, "output": …}`.
    #[serde(default)]
    pub params: BTreeMap<String, Json>,
    /// How many rows of the first result set to keep in the result.
    #[serde(default)]
    pub max_rows: Option<usize>,
}

/// One part of a procedure name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePart {
    /// The identifier, without quotes.
    pub text: String,
    /// Written quoted (`[x]` or `"x"`): its case is kept on PostgreSQL, which folds unquoted
    /// names to lower case.
    pub quoted: bool,
}

/// A validated, possibly schema-qualified procedure name (one to three parts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcName {
    /// `[database.][schema.]name`, in order.
    pub parts: Vec<NamePart>,
}

impl ProcName {
    /// The name as the job wrote it, for messages.
    pub fn shown(&self) -> String {
        self.parts
            .iter()
            .map(|p| {
                if p.quoted {
                    format!("[{}]", p.text)
                } else {
                    p.text.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// One named parameter, typed and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// The name without `@`.
    pub name: String,
    /// The SQL type it is bound (and, for an output parameter, declared) as.
    pub ty: SqlType,
    /// Whether the job named the type (`{"type": …}`) rather than leaving it to be inferred
    /// from a plain value. PostgreSQL binds every value as the routine's declared type; a
    /// named type also chooses between overloads that take the same parameter names.
    pub typed: bool,
    /// The value bound (`Null` for an output parameter without a value).
    pub value: Value,
    /// Whether the procedure writes it back (`OUTPUT` / `INOUT`).
    pub output: bool,
}

/// A validated call.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcCall {
    /// The named connection.
    pub connection: String,
    /// The procedure.
    pub procedure: ProcName,
    /// Its parameters, in the order of their names.
    pub params: Vec<Param>,
    /// Rows of the first result set kept in the result.
    pub max_rows: usize,
}

/// Validates `params` into a call; the error says which field is wrong and how to fix it.
pub fn validate(params: ProcParams) -> Result<ProcCall, String> {
    let connection = params.connection.trim().to_string();
    if connection.contains(['=', ';', ':', '/', '@']) {
        return Err(format!(
            "connection \"{}\" looks like a connection string; name a connection from \
             [sql.connections] in the host configuration instead (connection strings and \
             passwords never go in job params)",
            redact(&connection)
        ));
    }
    if connection.is_empty() {
        return Err("connection is empty; name a connection from [sql.connections]".into());
    }
    let procedure = parse_proc_name(&params.procedure)?;
    let max_rows = match params.max_rows {
        None => DEFAULT_MAX_ROWS,
        Some(n) if n <= MAX_ROWS_LIMIT => n,
        Some(n) => {
            return Err(format!(
                "maxRows {n} is too large; at most {MAX_ROWS_LIMIT} rows of the first result \
                 set are kept with a run"
            ));
        }
    };
    let mut out = Vec::with_capacity(params.params.len());
    let mut seen = std::collections::BTreeSet::new();
    for (raw_name, spec) in &params.params {
        let name = param_name(raw_name)?;
        if !seen.insert(name.to_lowercase()) {
            return Err(format!(
                "parameter {name} is given twice (names are compared without case and without @)"
            ));
        }
        out.push(param(&name, spec).map_err(|e| format!("parameter {name}: {e}"))?);
    }
    Ok(ProcCall {
        connection,
        procedure,
        params: out,
        max_rows,
    })
}

/// Keeps a mistaken connection string out of messages and logs: only what comes before the
/// first `=`, `;`, `@`, `:` or `/` (`Server…`, `postgres…`).
fn redact(s: &str) -> String {
    let cut = s.find(['=', ';', '@', ':', '/']).unwrap_or(s.len());
    let shown: String = s[..cut].chars().take(24).collect();
    format!("{shown}…")
}

/// Parses `[db.][schema.]name`; each part a regular identifier (`usp_Close`) or a quoted one
/// (`[Close Shift]`, `"Close Shift"`) without the closing quote character or control
/// characters inside.
pub fn parse_proc_name(raw: &str) -> Result<ProcName, String> {
    let refuse = |why: &str| {
        Err(format!(
            "procedure \"{}\" is refused: {why}; write a procedure name like dbo.usp_CloseShift \
             or [dbo].[Close Shift] (one to three parts, nothing else)",
            raw.escape_debug()
        ))
    };
    let s = raw.trim();
    if s.is_empty() {
        return refuse("it is empty");
    }
    let mut parts = Vec::new();
    let mut rest = s;
    loop {
        let (part, after) = if let Some(inner) = rest.strip_prefix('[') {
            match inner.find(']') {
                Some(end) => (
                    NamePart {
                        text: inner[..end].to_string(),
                        quoted: true,
                    },
                    &inner[end + 1..],
                ),
                None => return refuse("a [ is not closed"),
            }
        } else if let Some(inner) = rest.strip_prefix('"') {
            match inner.find('"') {
                Some(end) => (
                    NamePart {
                        text: inner[..end].to_string(),
                        quoted: true,
                    },
                    &inner[end + 1..],
                ),
                None => return refuse("a \" is not closed"),
            }
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            let text = &rest[..end];
            if !is_regular_identifier(text) {
                return refuse(&format!(
                    "\"{}\" is not an identifier (letters, digits, _, @, #, $; not starting \
                     with a digit or $)",
                    text.escape_debug()
                ));
            }
            (
                NamePart {
                    text: text.to_string(),
                    quoted: false,
                },
                &rest[end..],
            )
        };
        if part.quoted {
            if part.text.is_empty() || part.text.trim().is_empty() {
                return refuse("a quoted part is empty");
            }
            if part
                .text
                .chars()
                .any(|c| c.is_control() || c == ']' || c == '"')
            {
                return refuse("a quoted part holds a control or quote character");
            }
        }
        if part.text.chars().count() > MAX_IDENTIFIER {
            return refuse(&format!(
                "a part is longer than {MAX_IDENTIFIER} characters"
            ));
        }
        parts.push(part);
        if after.is_empty() {
            break;
        }
        match after.strip_prefix('.') {
            Some(next) if !next.is_empty() => rest = next,
            _ => return refuse("only a . may separate the parts, and a part must follow it"),
        }
    }
    if parts.len() > 3 {
        return refuse("it has more than three parts");
    }
    Ok(ProcName { parts })
}

/// A T-SQL regular identifier (which PostgreSQL also accepts, `@`/`#` aside, and rejects by
/// itself): a letter, `_`, `@` or `#` first, then letters, digits, `_`, `@`, `#`, `$`.
fn is_regular_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_alphabetic() || c == '_' || c == '@' || c == '#' => {}
        _ => return false,
    }
    chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | '@' | '#' | '$'))
}

/// A parameter name: `@Name` or `Name`, a regular identifier.
fn param_name(raw: &str) -> Result<String, String> {
    let name = raw.strip_prefix('@').unwrap_or(raw);
    if !is_regular_identifier(name) || name.starts_with(['@', '#']) {
        return Err(format!(
            "parameter name \"{}\" is refused: a parameter name is an identifier such as \
             @LineId or LineId (letters, digits, _; not starting with a digit)",
            raw.escape_debug()
        ));
    }
    if name.chars().count() > MAX_IDENTIFIER {
        return Err(format!(
            "parameter name {name} is longer than {MAX_IDENTIFIER} characters"
        ));
    }
    Ok(name.to_string())
}

/// The typed form of a parameter.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Typed {
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    value: Json,
    #[serde(default)]
    output: bool,
    #[serde(default)]
    precision: Option<u8>,
    #[serde(default)]
    scale: Option<u8>,
    #[serde(default)]
    length: Option<Json>,
}

fn param(name: &str, spec: &Json) -> Result<Param, String> {
    let (ty, value, output, typed) = match spec {
        Json::Object(map) if map.contains_key("type") => {
            let typed: Typed = serde_json::from_value(spec.clone()).map_err(|e| {
                format!(
                    "{e}; a typed parameter is {{\"type\": \"decimal\", \"value\": \"12.50\", \
                     \"precision\": 18, \"scale\": 2, \"output\": false}}"
                )
            })?;
            let ty = SqlType::parse(
                &typed.ty,
                typed.precision,
                typed.scale,
                typed.length.as_ref(),
            )?;
            (ty, typed.value, typed.output, true)
        }
        Json::Object(_) => {
            return Err(
                "an object must name its \"type\" (e.g. {\"type\": \"int\", \"value\": 3}); \
                 to pass JSON text, use {\"type\": \"nvarchar\", \"value\": \"{…}\"}"
                    .into(),
            );
        }
        Json::Array(_) => {
            return Err("an array is not a SQL value; pass it as text with \
                        {\"type\": \"nvarchar\", \"value\": \"[…]\"}"
                .into());
        }
        plain => (SqlType::infer(plain), plain.clone(), false, false),
    };
    let value = Value::from_json(&ty, &value)?;
    Ok(Param {
        name: name.to_string(),
        ty,
        typed,
        value,
        output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(v: Json) -> Result<ProcCall, String> {
        let p: ProcParams = serde_json::from_value(v).map_err(|e| e.to_string())?;
        validate(p)
    }

    #[test]
    fn names_of_one_to_three_parts_are_accepted() {
        let n = parse_proc_name("dbo.usp_CloseShift").unwrap();
        assert_eq!(n.parts.len(), 2);
        assert!(!n.parts[0].quoted);
        let n = parse_proc_name("[mes].[dbo].[Close Shift]").unwrap();
        assert_eq!(n.parts[2].text, "Close Shift");
        assert!(n.parts[2].quoted);
        let n = parse_proc_name("\"Reports\".daily_rollup").unwrap();
        assert_eq!(n.parts[0].text, "Reports");
        assert_eq!(
            parse_proc_name("  Überstunden  ").unwrap().parts[0].text,
            "Überstunden"
        );
    }

    #[test]
    fn anything_but_a_name_is_refused() {
        for bad in [
            "",
            "dbo.usp_X; DROP TABLE jobs",
            "dbo.usp_X--",
            "usp_X @a = 1",
            "[dbo].[x]]; drop table t --]",
            "[unterminated",
            "a.b.c.d",
            "dbo..x",
            "dbo.",
            ".x",
            "1abc",
            "x'y",
            "exec('x')",
            "[a\nb]",
            "[]",
            "dbo.[x\"]",
        ] {
            let e = parse_proc_name(bad).expect_err(bad);
            assert!(e.contains("is refused"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_connection_string_in_the_params_is_refused_without_echoing_it() {
        let e = call(json!({
            "connection": "Server=db;User Id=sa;Password=secret",
            "procedure": "dbo.x"
        }))
        .unwrap_err();
        assert!(e.contains("[sql.connections]"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        let e = call(json!({"connection": "postgres://u:pw@h/db", "procedure": "x"})).unwrap_err();
        assert!(e.contains("\"postgres…\""), "{e}");
        assert!(!e.contains("pw"), "{e}");
    }

    #[test]
    fn parameters_are_typed_and_named_precisely() {
        let c = call(json!({
            "connection": "mes",
            "procedure": "dbo.usp_X",
            "params": {
                "@LineId": 3,
                "Shift": "A",
                "Flag": true,
                "Note": null,
                "Ratio": 0.5,
                "Total": {"type": "decimal", "value": "12.50", "precision": 18, "scale": 2},
                "Count": {"type": "int", "output": true}
            }
        }))
        .unwrap();
        let by: BTreeMap<_, _> = c.params.iter().map(|p| (p.name.as_str(), p)).collect();
        assert_eq!(by["LineId"].ty, SqlType::BigInt);
        assert_eq!(by["LineId"].value, Value::Int(3));
        assert_eq!(by["Shift"].ty, SqlType::NVarChar(None));
        assert_eq!(by["Flag"].value, Value::Bool(true));
        assert_eq!(by["Note"].value, Value::Null);
        assert_eq!(by["Ratio"].ty, SqlType::Float);
        assert_eq!(
            by["Total"].ty,
            SqlType::Decimal {
                precision: 18,
                scale: 2
            }
        );
        assert!(by["Count"].output);
        assert_eq!(by["Count"].value, Value::Null);
        assert_eq!(c.max_rows, DEFAULT_MAX_ROWS);
    }

    #[test]
    fn bad_parameters_say_which_and_why() {
        let cases = [
            (json!({"x; drop": 1}), "parameter name"),
            (json!({"@@x": 1}), "parameter name"),
            (json!({"a": 1, "@A": 2}), "given twice"),
            (json!({"a": [1, 2]}), "parameter a: an array"),
            (json!({"a": {"value": 1}}), "must name its \"type\""),
            (json!({"a": {"type": "int", "value": "x"}}), "parameter a:"),
            (
                json!({"a": {"type": "int", "value": 3_000_000_000u64}}),
                "does not fit",
            ),
            (
                json!({"a": {"type": "nvarchar(10)", "value": 1}}),
                "parameter a:",
            ),
            (json!({"a": {"type": "money", "value": 1}}), "unknown type"),
            (json!({"a": {"type": "int", "valu": 1}}), "unknown field"),
        ];
        for (params, want) in cases {
            let e =
                call(json!({"connection": "mes", "procedure": "p", "params": params})).unwrap_err();
            assert!(e.contains(want), "{params}: {e}");
        }
        let e =
            call(json!({"connection": "mes", "procedure": "p", "maxRows": 1_000_000})).unwrap_err();
        assert!(e.contains("maxRows"), "{e}");
    }
}
