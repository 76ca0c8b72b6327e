//! SQL types and values of `sql::proc` parameters, with the one vocabulary a job uses for both
//! databases (SQL Server names first, since that is where our users' procedures live; the
//! PostgreSQL names are accepted too).
//!
//! A value is checked against its type here, in the plugin, so that the run's error names the
//! parameter and the problem ("12.345 has 3 decimals, decimal(18,2) keeps 2") instead of a
//! conversion error from the server — and so that nothing is silently rounded or cut.

use jiff::civil;
use serde_json::Value as Json;

/// A parameter's SQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlType {
    /// `tinyint` (0 ..= 255).
    TinyInt,
    /// `smallint`.
    SmallInt,
    /// `int`.
    Int,
    /// `bigint`; a plain JSON integer is bound as this.
    BigInt,
    /// `bit` / `boolean`; a plain JSON `true`/`false`.
    Bit,
    /// `decimal(p, s)` / `numeric(p, s)`: exact; pass values as strings to keep every digit.
    Decimal {
        /// Total digits, 1 ..= 38.
        precision: u8,
        /// Digits after the point, 0 ..= precision.
        scale: u8,
    },
    /// `float` (8 bytes); a plain JSON number with a fraction.
    Float,
    /// `real` (4 bytes).
    Real,
    /// `nvarchar(n)`, `None` = `max`; a plain JSON string (and `null`).
    NVarChar(Option<u16>),
    /// `varchar(n)`, `None` = `max`.
    VarChar(Option<u16>),
    /// `date`.
    Date,
    /// `datetime` (SQL Server's legacy type, 1/300 s).
    DateTime,
    /// `datetime2` / `timestamp`: a wall time without a zone.
    DateTime2,
    /// `uniqueidentifier` / `uuid`.
    Uuid,
    /// `varbinary(n)` / `bytea`, `None` = `max`; values are `0x`-prefixed hex.
    VarBinary(Option<u16>),
}

/// A parameter value, checked against its [`SqlType`].
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL (of the parameter's type).
    Null,
    /// `bit`.
    Bool(bool),
    /// The integer types, range-checked.
    Int(i64),
    /// `float` / `real`.
    Float(f64),
    /// `decimal`: the canonical text (`-12.50`), digits checked against precision and scale.
    Decimal(String),
    /// The text types.
    Text(String),
    /// `date`.
    Date(civil::Date),
    /// `datetime`, `datetime2`.
    DateTime(civil::DateTime),
    /// `uniqueidentifier`, canonical lower-case form.
    Uuid(String),
    /// `varbinary`.
    Bytes(Vec<u8>),
}

const TYPES: &str = "int, bigint, smallint, tinyint, bit, decimal, numeric, float, real, \
                     nvarchar, varchar, date, datetime, datetime2, uniqueidentifier, varbinary \
                     (or the PostgreSQL names integer, boolean, double precision, text, \
                     timestamp, uuid, bytea)";

impl SqlType {
    /// The type of a plain JSON value: integer → `bigint`, other number → `float`, string
    /// (and `null`) → `nvarchar(max)`, boolean → `bit`.
    pub fn infer(v: &Json) -> SqlType {
        match v {
            Json::Bool(_) => SqlType::Bit,
            Json::Number(n) if n.is_i64() || n.is_u64() => SqlType::BigInt,
            Json::Number(_) => SqlType::Float,
            _ => SqlType::NVarChar(None),
        }
    }

    /// Parses a type name (`"decimal"` with `precision`/`scale`, or written `"decimal(18,2)"`;
    /// `"nvarchar"` with `length` or `"nvarchar(50)"`, `"max"` allowed).
    pub fn parse(
        name: &str,
        precision: Option<u8>,
        scale: Option<u8>,
        length: Option<&Json>,
    ) -> Result<SqlType, String> {
        let lower = name.trim().to_ascii_lowercase();
        let (base, args) = match lower.split_once('(') {
            Some((b, rest)) => match rest.strip_suffix(')') {
                Some(args) => (b.trim().to_string(), Some(args.to_string())),
                None => return Err(format!("type \"{name}\": a ( is not closed")),
            },
            None => (lower.clone(), None),
        };
        let args: Vec<String> = args
            .map(|a| a.split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default();
        let number = |s: &str, what: &str| -> Result<u32, String> {
            s.parse::<u32>()
                .map_err(|_| format!("type \"{name}\": {what} \"{s}\" is not a whole number"))
        };
        let length = || -> Result<Option<u16>, String> {
            let given: Option<String> = match (args.first(), length) {
                (Some(a), _) => Some(a.clone()),
                (None, Some(Json::String(s))) => Some(s.to_ascii_lowercase()),
                (None, Some(Json::Number(n))) => Some(n.to_string()),
                (None, Some(other)) => {
                    return Err(format!(
                        "type \"{name}\": length {other} is not a number or \"max\""
                    ));
                }
                (None, None) => None,
            };
            match given.as_deref() {
                None | Some("max") => Ok(None),
                Some(n) => match number(n, "length")? {
                    0 => Err(format!("type \"{name}\": a length of 0 holds nothing")),
                    n @ 1..=8000 => Ok(Some(n as u16)),
                    n => Err(format!(
                        "type \"{name}\": length {n} is more than 8000; use \"max\""
                    )),
                },
            }
        };
        let no_args = |ty: SqlType| {
            if args.is_empty() {
                Ok(ty)
            } else {
                Err(format!("type \"{name}\" takes no arguments"))
            }
        };
        match base.as_str() {
            "tinyint" => no_args(SqlType::TinyInt),
            "smallint" | "int2" => no_args(SqlType::SmallInt),
            "int" | "integer" | "int4" => no_args(SqlType::Int),
            "bigint" | "int8" => no_args(SqlType::BigInt),
            "bit" | "boolean" | "bool" => no_args(SqlType::Bit),
            "float" | "double precision" | "float8" => no_args(SqlType::Float),
            "real" | "float4" => no_args(SqlType::Real),
            "date" => no_args(SqlType::Date),
            "datetime" => no_args(SqlType::DateTime),
            "datetime2" | "timestamp" => Ok(SqlType::DateTime2),
            "uniqueidentifier" | "uuid" => no_args(SqlType::Uuid),
            "text" => no_args(SqlType::NVarChar(None)),
            "nvarchar" | "nchar" => Ok(SqlType::NVarChar(length()?.map(|n| n.min(4000)))),
            "varchar" | "char" | "character varying" => Ok(SqlType::VarChar(length()?)),
            "varbinary" | "binary" => Ok(SqlType::VarBinary(length()?)),
            "bytea" => no_args(SqlType::VarBinary(None)),
            "decimal" | "numeric" => {
                let p = match (args.first(), precision) {
                    (Some(a), _) => number(a, "precision")?,
                    (None, Some(p)) => u32::from(p),
                    (None, None) => 18,
                };
                let s = match (args.get(1), scale) {
                    (Some(a), _) => number(a, "scale")?,
                    (None, Some(s)) => u32::from(s),
                    (None, None) => 0,
                };
                if args.len() > 2 {
                    return Err(format!("type \"{name}\" takes precision and scale only"));
                }
                if !(1..=38).contains(&p) || s > p || s > 37 {
                    return Err(format!(
                        "type \"{name}\": precision {p} and scale {s} are out of range \
                         (precision 1 ..= 38, scale 0 ..= precision and at most 37)"
                    ));
                }
                Ok(SqlType::Decimal {
                    precision: p as u8,
                    scale: s as u8,
                })
            }
            _ => Err(format!("unknown type \"{name}\"; the types are: {TYPES}")),
        }
    }

    /// The T-SQL name, as used in a `DECLARE` (built from the enum, never from job text).
    pub fn mssql(self) -> String {
        let len = |n: Option<u16>| n.map_or_else(|| "max".to_string(), |n| n.to_string());
        match self {
            SqlType::TinyInt => "tinyint".into(),
            SqlType::SmallInt => "smallint".into(),
            SqlType::Int => "int".into(),
            SqlType::BigInt => "bigint".into(),
            SqlType::Bit => "bit".into(),
            SqlType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            SqlType::Float => "float".into(),
            SqlType::Real => "real".into(),
            SqlType::NVarChar(n) => format!("nvarchar({})", len(n)),
            SqlType::VarChar(n) => format!("varchar({})", len(n)),
            SqlType::Date => "date".into(),
            SqlType::DateTime => "datetime".into(),
            SqlType::DateTime2 => "datetime2(7)".into(),
            SqlType::Uuid => "uniqueidentifier".into(),
            SqlType::VarBinary(n) => format!("varbinary({})", len(n)),
        }
    }
}

impl Value {
    /// Checks `v` against `ty`; `null` is NULL of any type.
    pub fn from_json(ty: &SqlType, v: &Json) -> Result<Value, String> {
        if v.is_null() {
            return Ok(Value::Null);
        }
        let shown = ty.mssql();
        match *ty {
            SqlType::TinyInt => int(v, &shown, 0, 255),
            SqlType::SmallInt => int(v, &shown, i16::MIN.into(), i16::MAX.into()),
            SqlType::Int => int(v, &shown, i32::MIN.into(), i32::MAX.into()),
            SqlType::BigInt => int(v, &shown, i64::MIN, i64::MAX),
            SqlType::Bit => match v {
                Json::Bool(b) => Ok(Value::Bool(*b)),
                Json::Number(n) if n.as_u64() == Some(0) => Ok(Value::Bool(false)),
                Json::Number(n) if n.as_u64() == Some(1) => Ok(Value::Bool(true)),
                _ => Err(format!("{v} is not a bit; write true, false, 1 or 0")),
            },
            SqlType::Decimal { precision, scale } => decimal(v, precision, scale),
            SqlType::Float | SqlType::Real => match v.as_f64() {
                Some(f) if ty == &SqlType::Real && f.is_finite() && (f as f32).is_infinite() => {
                    Err(format!("{v} is out of the range of real"))
                }
                Some(f) => Ok(Value::Float(f)),
                None => Err(format!("{v} is not a number ({shown} expects one)")),
            },
            SqlType::NVarChar(n) | SqlType::VarChar(n) => match v {
                Json::String(s) => {
                    let count = s.chars().count();
                    match n {
                        Some(n) if count > usize::from(n) => Err(format!(
                            "the text is {count} characters long and {shown} holds {n}; nothing \
                             is cut silently: shorten it or widen the type"
                        )),
                        _ => Ok(Value::Text(s.clone())),
                    }
                }
                _ => Err(format!(
                    "{v} is not a string ({shown} expects one; quote numbers meant as text)"
                )),
            },
            SqlType::Date => {
                let s = string(v, &shown)?;
                let d = s
                    .parse::<civil::Date>()
                    .map_err(|e| format!("\"{s}\" is not a date like 2026-06-01 ({e})"))?;
                in_sql_range(s, d.year())?;
                Ok(Value::Date(d))
            }
            SqlType::DateTime | SqlType::DateTime2 => {
                let s = string(v, &shown)?;
                if s.ends_with(['Z', 'z']) || has_offset(s) {
                    return Err(format!(
                        "\"{s}\" carries a time zone, and {shown} holds a wall time without one; \
                         write the time as the procedure expects it, e.g. 2026-06-01T06:00:00"
                    ));
                }
                let dt = s.parse::<civil::DateTime>().map_err(|e| {
                    format!("\"{s}\" is not a date and time like 2026-06-01T06:00:00.123 ({e})")
                })?;
                in_sql_range(s, dt.year())?;
                if *ty == SqlType::DateTime && dt.year() < 1753 {
                    return Err(format!(
                        "\"{s}\" is before 1753-01-01, the first day datetime holds; use \
                         datetime2"
                    ));
                }
                Ok(Value::DateTime(dt))
            }
            SqlType::Uuid => {
                let s = string(v, &shown)?;
                let bare = s.trim_start_matches('{').trim_end_matches('}');
                let hex: String = bare.chars().filter(|c| *c != '-').collect();
                let dashes_ok =
                    bare.len() == 36 && [8, 13, 18, 23].iter().all(|i| bare.as_bytes()[*i] == b'-');
                if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) || !dashes_ok {
                    return Err(format!(
                        "\"{s}\" is not a uniqueidentifier like \
                         6f9619ff-8b86-d011-b42d-00c04fc964ff"
                    ));
                }
                Ok(Value::Uuid(bare.to_ascii_lowercase()))
            }
            SqlType::VarBinary(n) => {
                let s = string(v, &shown)?;
                let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) else {
                    return Err(format!("\"{s}\" is not binary; write it as hex: 0x0a1b"));
                };
                if hex.len() % 2 != 0 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(format!(
                        "\"{s}\" is not an even number of hex digits after 0x"
                    ));
                }
                let bytes: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
                    .collect();
                match n {
                    Some(n) if bytes.len() > usize::from(n) => {
                        Err(format!("{} bytes do not fit {shown}", bytes.len()))
                    }
                    _ => Ok(Value::Bytes(bytes)),
                }
            }
        }
    }

    /// The value as PostgreSQL text input, read by the server with the input function of the
    /// argument's declared type (`None` = NULL).
    pub fn postgres_text(&self) -> Option<String> {
        Some(match self {
            Value::Null => return None,
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Decimal(s) | Value::Text(s) | Value::Uuid(s) => s.clone(),
            Value::Date(d) => d.to_string(),
            Value::DateTime(dt) => dt.to_string(),
            Value::Bytes(b) => {
                let mut s = String::with_capacity(2 + b.len() * 2);
                s.push_str("\\x");
                for byte in b {
                    s.push_str(&format!("{byte:02x}"));
                }
                s
            }
        })
    }
}

/// SQL Server's `date` and `datetime2` hold the years 1 ..= 9999 (jiff also parses year 0 and
/// negative years, which must not be clamped silently).
fn in_sql_range(s: &str, year: i16) -> Result<(), String> {
    if (1..=9999).contains(&year) {
        Ok(())
    } else {
        Err(format!(
            "\"{s}\" is outside the years 1 to 9999 that a sql date holds"
        ))
    }
}

fn string<'a>(v: &'a Json, shown: &str) -> Result<&'a str, String> {
    v.as_str()
        .ok_or_else(|| format!("{v} is not a string ({shown} expects one)"))
}

/// An explicit offset after the time part (`+02:00`, `-0500`).
fn has_offset(s: &str) -> bool {
    match s.find(['T', 't', ' ']) {
        Some(t) => s[t..].contains(['+', '-']),
        None => false,
    }
}

fn int(v: &Json, shown: &str, min: i64, max: i64) -> Result<Value, String> {
    let n: Option<i128> = match v {
        Json::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        Json::String(s) => s.trim().parse::<i128>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n >= i128::from(min) && n <= i128::from(max) => Ok(Value::Int(n as i64)),
        Some(n) => Err(format!(
            "{n} does not fit {shown} ({min} ..= {max}); use a wider type"
        )),
        None => Err(format!("{v} is not a whole number ({shown} expects one)")),
    }
}

fn decimal(v: &Json, precision: u8, scale: u8) -> Result<Value, String> {
    let shown = format!("decimal({precision},{scale})");
    let text = match v {
        Json::String(s) => s.trim().to_string(),
        Json::Number(n) => n.to_string(),
        _ => {
            return Err(format!(
                "{v} is not a decimal ({shown} expects \"12.50\" or 12.5)"
            ));
        }
    };
    let (neg, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text.strip_prefix('+').unwrap_or(&text)),
    };
    let (whole, frac) = body.split_once('.').unwrap_or((body, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole.chars().all(|c| c.is_ascii_digit())
        || !frac.chars().all(|c| c.is_ascii_digit())
    {
        return Err(format!(
            "\"{text}\" is not a decimal like -12.50 (no exponent, no thousands separator)"
        ));
    }
    let whole = whole.trim_start_matches('0');
    if frac.len() > usize::from(scale) {
        return Err(format!(
            "{text} has {} decimals and {shown} keeps {scale}; nothing is rounded silently",
            frac.len()
        ));
    }
    if whole.len() > usize::from(precision - scale) {
        return Err(format!(
            "{text} has {} digits before the point and {shown} holds {}",
            whole.len(),
            precision - scale
        ));
    }
    let mut canonical = String::new();
    if neg && (whole.chars().chain(frac.chars()).any(|c| c != '0')) {
        canonical.push('-');
    }
    canonical.push_str(if whole.is_empty() { "0" } else { whole });
    if !frac.is_empty() {
        canonical.push('.');
        canonical.push_str(frac);
    }
    Ok(Value::Decimal(canonical))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ty(s: &str) -> SqlType {
        SqlType::parse(s, None, None, None).unwrap()
    }

    #[test]
    fn type_names_parse_in_both_vocabularies() {
        assert_eq!(ty("INT"), SqlType::Int);
        assert_eq!(ty("integer"), SqlType::Int);
        assert_eq!(
            ty("decimal(18, 2)"),
            SqlType::Decimal {
                precision: 18,
                scale: 2
            }
        );
        assert_eq!(
            SqlType::parse("numeric", Some(10), Some(4), None).unwrap(),
            SqlType::Decimal {
                precision: 10,
                scale: 4
            }
        );
        assert_eq!(ty("nvarchar(50)"), SqlType::NVarChar(Some(50)));
        assert_eq!(ty("nvarchar(max)"), SqlType::NVarChar(None));
        assert_eq!(
            SqlType::parse("varchar", None, None, Some(&json!(20))).unwrap(),
            SqlType::VarChar(Some(20))
        );
        assert_eq!(ty("uuid"), SqlType::Uuid);
        assert_eq!(ty("bytea"), SqlType::VarBinary(None));
        assert_eq!(ty("decimal(18,2)").mssql(), "decimal(18,2)");
        for bad in [
            "money",
            "int(4)",
            "decimal(40,2)",
            "decimal(5,6)",
            "decimal(38,38)",
            "nvarchar(0)",
            "nvarchar(x",
            "varchar(9000)",
        ] {
            assert!(SqlType::parse(bad, None, None, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_are_checked_against_their_types() {
        let ok = |t: &str, v: Json| Value::from_json(&ty(t), &v).unwrap();
        let bad = |t: &str, v: Json| Value::from_json(&ty(t), &v).unwrap_err();
        assert_eq!(ok("int", json!(-5)), Value::Int(-5));
        assert_eq!(
            ok("bigint", json!("9007199254740993")),
            Value::Int(9_007_199_254_740_993)
        );
        assert!(bad("int", json!(2_147_483_648u64)).contains("does not fit int"));
        assert!(bad("tinyint", json!(-1)).contains("does not fit"));
        assert!(bad("int", json!(1.5)).contains("not a whole number"));
        assert_eq!(ok("bit", json!(1)), Value::Bool(true));
        assert_eq!(
            ok("decimal(18,2)", json!("-012.50")),
            Value::Decimal("-12.50".into())
        );
        assert_eq!(ok("decimal(18,2)", json!(3)), Value::Decimal("3".into()));
        assert_eq!(
            ok("decimal(4,2)", json!("-0.00")),
            Value::Decimal("0.00".into())
        );
        assert!(bad("decimal(18,2)", json!("12.345")).contains("3 decimals"));
        assert!(bad("decimal(4,2)", json!("123.4")).contains("before the point"));
        assert!(bad("decimal(18,2)", json!("1e5")).contains("not a decimal"));
        assert!(bad("decimal(18,2)", json!("1,000.00")).contains("not a decimal"));
        assert!(bad("nvarchar(3)", json!("abcd")).contains("holds 3"));
        assert_eq!(ok("nvarchar(3)", json!("äöü")), Value::Text("äöü".into()));
        assert!(bad("nvarchar", json!(5)).contains("not a string"));
        assert_eq!(
            ok("datetime2", json!("2026-06-01T06:00:00.1234567")),
            Value::DateTime("2026-06-01T06:00:00.1234567".parse().unwrap())
        );
        assert!(bad("datetime2", json!("2026-06-01T06:00:00Z")).contains("time zone"));
        assert!(bad("datetime2", json!("2026-06-01T06:00:00+02:00")).contains("time zone"));
        assert!(bad("datetime", json!("1700-01-01T00:00:00")).contains("1753"));
        assert!(bad("date", json!("01.06.2026")).contains("not a date"));
        assert!(bad("date", json!("0000-12-31")).contains("years 1 to 9999"));
        assert!(bad("datetime2", json!("0000-06-01T00:00:00")).contains("years 1 to 9999"));
        assert_eq!(
            ok(
                "uniqueidentifier",
                json!("{6F9619FF-8B86-D011-B42D-00C04FC964FF}")
            ),
            Value::Uuid("6f9619ff-8b86-d011-b42d-00c04fc964ff".into())
        );
        assert!(
            bad("uuid", json!("6f9619ff8b86d011b42d00c04fc964ff00"))
                .contains("not a uniqueidentifier")
        );
        assert_eq!(
            ok("varbinary(4)", json!("0x0A1b")),
            Value::Bytes(vec![10, 27])
        );
        assert!(bad("varbinary(1)", json!("0x0a1b")).contains("do not fit"));
        assert!(bad("varbinary", json!("0a1b")).contains("hex"));
        assert_eq!(ok("int", Json::Null), Value::Null);
    }

    #[test]
    fn postgres_text_round_trips_the_checked_value() {
        assert_eq!(
            Value::Bytes(vec![0, 255]).postgres_text().unwrap(),
            "\\x00ff"
        );
        assert_eq!(
            Value::DateTime("2026-06-01T06:00:00.5".parse().unwrap())
                .postgres_text()
                .unwrap(),
            "2026-06-01T06:00:00.5"
        );
        assert_eq!(Value::Null.postgres_text(), None);
    }
}
