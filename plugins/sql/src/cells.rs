//! Result cells as JSON, for both dialects, without a date-time or decimal crate of the
//! drivers': exact types (decimal, numeric) become strings so that no digit is lost to a
//! JSON double; instants become ISO 8601 text; binary becomes `0x` hex.

use std::error::Error;

use jiff::Timestamp;
use jiff::tz::Offset;
use serde_json::Value as Json;
use tiberius::ColumnData;
use tokio_postgres::types::{FromSql, Type};

/// Days from 0001-01-01 (day 0 of `date`/`datetime2`) to 1970-01-01.
const DAYS_0001_TO_1970: i64 = 719_162;
/// Days from 1900-01-01 (day 0 of `datetime`) to 1970-01-01.
const DAYS_1900_TO_1970: i64 = 25_567;
/// Days from 2000-01-01 (PostgreSQL's epoch) to 1970-01-01.
const DAYS_2000_TO_1970: i64 = 10_957;

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + bytes.len() * 2);
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn float(f: f64) -> Json {
    serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)
}

/// A `real` as the decimal it was written as (`0.1`, not `0.10000000149011612`).
fn real(f: f32) -> Json {
    float(f.to_string().parse::<f64>().unwrap_or(f64::from(f)))
}

/// `+02:00` / `-05:30` / `+00:00` (RFC 3339; jiff's own form drops zero minutes).
fn offset_text(minutes: i16) -> String {
    let sign = if minutes < 0 { '-' } else { '+' };
    let m = minutes.unsigned_abs();
    format!("{sign}{:02}:{:02}", m / 60, m % 60)
}

/// Unix nanoseconds as a wall time (`2026-06-01T06:00:00.5`), or the raw figure when out of
/// range (never an error: a result must not fail on an odd cell).
fn wall(nanos: i128) -> Json {
    match Timestamp::from_nanosecond(nanos) {
        Ok(t) => Json::String(Offset::UTC.to_datetime(t).to_string()),
        Err(_) => Json::String(format!("{nanos} ns since 1970-01-01")),
    }
}

fn date_from_days(days_since_1970: i64) -> Json {
    match Timestamp::from_second(days_since_1970 * 86_400) {
        Ok(t) => Json::String(Offset::UTC.to_datetime(t).date().to_string()),
        Err(_) => Json::String(format!("day {days_since_1970} since 1970-01-01")),
    }
}

/// Exact decimal text of `value / 10^scale`.
fn decimal_text(value: i128, scale: u8) -> String {
    let neg = value < 0;
    let digits = value.unsigned_abs().to_string();
    let scale = usize::from(scale);
    let s = if scale == 0 {
        digits
    } else if digits.len() > scale {
        format!(
            "{}.{}",
            &digits[..digits.len() - scale],
            &digits[digits.len() - scale..]
        )
    } else {
        format!("0.{}{}", "0".repeat(scale - digits.len()), digits)
    };
    if neg { format!("-{s}") } else { s }
}

/// A SQL Server cell.
pub(crate) fn mssql(c: &ColumnData<'_>) -> Json {
    use tiberius::time::{Date, DateTime2, Time};
    let time_nanos = |t: &Time| -> i128 {
        i128::from(t.increments()) * 10_i128.pow(9 - u32::from(t.scale().min(9)))
    };
    let date_days = |d: &Date| i64::from(d.days()) - DAYS_0001_TO_1970;
    let dt2_nanos = |dt: &DateTime2| {
        i128::from(date_days(&dt.date())) * 86_400_000_000_000 + time_nanos(&dt.time())
    };
    match c {
        ColumnData::U8(v) => v.map_or(Json::Null, Json::from),
        ColumnData::I16(v) => v.map_or(Json::Null, Json::from),
        ColumnData::I32(v) => v.map_or(Json::Null, Json::from),
        ColumnData::I64(v) => v.map_or(Json::Null, Json::from),
        ColumnData::F32(v) => v.map_or(Json::Null, real),
        ColumnData::F64(v) => v.map_or(Json::Null, float),
        ColumnData::Bit(v) => v.map_or(Json::Null, Json::Bool),
        ColumnData::String(v) => v
            .as_ref()
            .map_or(Json::Null, |s| Json::String(s.to_string())),
        ColumnData::Guid(v) => v.map_or(Json::Null, |g| Json::String(g.to_string())),
        ColumnData::Binary(v) => v.as_ref().map_or(Json::Null, |b| Json::String(hex(b))),
        ColumnData::Numeric(v) => v.map_or(Json::Null, |n| {
            Json::String(decimal_text(n.value(), n.scale()))
        }),
        ColumnData::Xml(v) => v
            .as_ref()
            .map_or(Json::Null, |x| Json::String(x.to_string())),
        ColumnData::DateTime(v) => v.map_or(Json::Null, |dt| {
            // 1/300 s ticks since midnight, rounded to the nearest nanosecond.
            let days = i64::from(dt.days()) - DAYS_1900_TO_1970;
            let nanos = i128::from(dt.seconds_fragments()) * 1_000_000_000 / 300;
            wall(i128::from(days) * 86_400_000_000_000 + nanos)
        }),
        ColumnData::SmallDateTime(v) => v.map_or(Json::Null, |dt| {
            let days = i64::from(dt.days()) - DAYS_1900_TO_1970;
            wall((i128::from(days) * 1_440 + i128::from(dt.seconds_fragments())) * 60_000_000_000)
        }),
        ColumnData::Time(v) => v.map_or(Json::Null, |t| {
            let n = time_nanos(&t);
            let secs = n / 1_000_000_000;
            let frac = n % 1_000_000_000;
            let mut s = format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
            if frac != 0 {
                s.push_str(format!(".{frac:09}").trim_end_matches('0'));
            }
            Json::String(s)
        }),
        ColumnData::Date(v) => v.map_or(Json::Null, |d| date_from_days(date_days(&d))),
        ColumnData::DateTime2(v) => v.map_or(Json::Null, |dt| wall(dt2_nanos(&dt))),
        ColumnData::DateTimeOffset(v) => v.map_or(Json::Null, |dto| {
            // Stored as UTC plus the offset it was written with: shown as that instant.
            match Timestamp::from_nanosecond(dt2_nanos(&dto.datetime2())) {
                Ok(t) => {
                    let offset =
                        Offset::from_seconds(i32::from(dto.offset()) * 60).unwrap_or(Offset::UTC);
                    Json::String(format!(
                        "{}{}",
                        offset.to_datetime(t),
                        offset_text(dto.offset())
                    ))
                }
                Err(_) => Json::Null,
            }
        }),
    }
}

/// A PostgreSQL cell of any type. tokio-postgres asks for binary results, so each type is
/// decoded from its binary form: the common ones here, text-like ones as text; any other
/// type becomes a note saying to cast it (never its raw bytes read as text).
pub(crate) struct PgCell(pub(crate) Json);

impl<'a> FromSql<'a> for PgCell {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<PgCell, Box<dyn Error + Sync + Send>> {
        let be = |n: usize| -> Result<&[u8], Box<dyn Error + Sync + Send>> {
            raw.get(..n)
                .filter(|_| raw.len() == n)
                .ok_or_else(|| format!("a {ty} cell of {} bytes", raw.len()).into())
        };
        Ok(PgCell(match *ty {
            Type::BOOL => Json::Bool(be(1)?[0] != 0),
            Type::INT2 => Json::from(i16::from_be_bytes(be(2)?.try_into()?)),
            Type::INT4 => Json::from(i32::from_be_bytes(be(4)?.try_into()?)),
            Type::INT8 => Json::from(i64::from_be_bytes(be(8)?.try_into()?)),
            Type::OID => Json::from(u32::from_be_bytes(be(4)?.try_into()?)),
            Type::FLOAT4 => real(f32::from_be_bytes(be(4)?.try_into()?)),
            Type::FLOAT8 => float(f64::from_be_bytes(be(8)?.try_into()?)),
            Type::NUMERIC => Json::String(pg_numeric(raw)?),
            Type::UUID => {
                let b = be(16)?;
                let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
                Json::String(format!(
                    "{}-{}-{}-{}-{}",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                ))
            }
            Type::DATE => {
                let d = i32::from_be_bytes(be(4)?.try_into()?);
                date_from_days(i64::from(d) + DAYS_2000_TO_1970)
            }
            Type::TIMESTAMP => {
                let us = i64::from_be_bytes(be(8)?.try_into()?);
                wall((i128::from(us) + i128::from(DAYS_2000_TO_1970) * 86_400_000_000) * 1_000)
            }
            Type::TIMESTAMPTZ => {
                let us = i64::from_be_bytes(be(8)?.try_into()?);
                let nanos =
                    (i128::from(us) + i128::from(DAYS_2000_TO_1970) * 86_400_000_000) * 1_000;
                match Timestamp::from_nanosecond(nanos) {
                    Ok(t) => Json::String(t.to_string()),
                    Err(_) => Json::Null,
                }
            }
            Type::TIME => {
                let us = i64::from_be_bytes(be(8)?.try_into()?);
                let (secs, frac) = (us / 1_000_000, us % 1_000_000);
                let mut s = format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
                if frac != 0 {
                    s.push_str(format!(".{frac:06}").trim_end_matches('0'));
                }
                Json::String(s)
            }
            Type::BYTEA => Json::String(hex(raw)),
            Type::JSONB => serde_json::from_slice(raw.get(1..).unwrap_or_default())?,
            Type::JSON => serde_json::from_slice(raw)?,
            Type::VOID => Json::Null,
            // Their binary form is their text.
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::XML => {
                Json::String(String::from_utf8_lossy(raw).into_owned())
            }
            _ if ty.name() == "citext" => Json::String(String::from_utf8_lossy(raw).into_owned()),
            _ => Json::String(format!(
                "(a {ty} value: cast it to text in the routine to see it here)"
            )),
        }))
    }

    fn from_sql_null(_: &Type) -> Result<PgCell, Box<dyn Error + Sync + Send>> {
        Ok(PgCell(Json::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// PostgreSQL's binary `numeric`: ndigits, weight, sign, dscale, then base-10000 digits.
fn pg_numeric(raw: &[u8]) -> Result<String, Box<dyn Error + Sync + Send>> {
    let word = |i: usize| -> Result<u16, Box<dyn Error + Sync + Send>> {
        raw.get(i * 2..i * 2 + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "a truncated numeric cell".into())
    };
    let ndigits = usize::from(word(0)?);
    let weight = i32::from(word(1)? as i16);
    let sign = word(2)?;
    let dscale = usize::from(word(3)?);
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        _ => {}
    }
    let digits: Vec<u16> = (0..ndigits)
        .map(|i| word(4 + i))
        .collect::<Result<_, _>>()?;
    // Integer part: digit groups 0 ..= weight.
    let mut int = String::new();
    for i in 0..=weight.max(-1) {
        let d = usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i))
            .copied()
            .unwrap_or(0);
        if int.is_empty() {
            if d != 0 || i == weight {
                int.push_str(&d.to_string());
            }
        } else {
            int.push_str(&format!("{d:04}"));
        }
    }
    if int.is_empty() {
        int.push('0');
    }
    let mut frac = String::new();
    let mut group = weight + 1;
    while frac.len() < dscale {
        let d = if group < 0 {
            0
        } else {
            usize::try_from(group)
                .ok()
                .and_then(|g| digits.get(g))
                .copied()
                .unwrap_or(0)
        };
        frac.push_str(&format!("{d:04}"));
        group += 1;
    }
    frac.truncate(dscale);
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    s.push_str(&int);
    if dscale > 0 {
        s.push('.');
        s.push_str(&frac);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reals_and_offsets_read_as_written() {
        assert_eq!(real(0.1), serde_json::json!(0.1));
        assert_eq!(offset_text(120), "+02:00");
        assert_eq!(offset_text(-330), "-05:30");
        assert_eq!(offset_text(0), "+00:00");
    }

    #[test]
    fn decimals_keep_every_digit() {
        assert_eq!(decimal_text(125_075, 2), "1250.75");
        assert_eq!(decimal_text(-5, 3), "-0.005");
        assert_eq!(decimal_text(42, 0), "42");
    }

    fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [ndigits, weight as u16, sign, dscale].iter().chain(digits) {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v
    }

    #[test]
    fn postgres_numerics_decode_exactly() {
        // 1250.75 = 1250 | 7500, weight 0, dscale 2
        assert_eq!(
            pg_numeric(&numeric(2, 0, 0, 2, &[1250, 7500])).unwrap(),
            "1250.75"
        );
        // -0.005 = 0050 at weight -1, dscale 3
        assert_eq!(
            pg_numeric(&numeric(1, -1, 0x4000, 3, &[50])).unwrap(),
            "-0.005"
        );
        // 10000 = 1 | 0000 at weight 1
        assert_eq!(pg_numeric(&numeric(1, 1, 0, 0, &[1])).unwrap(), "10000");
        assert_eq!(pg_numeric(&numeric(0, 0, 0, 2, &[])).unwrap(), "0.00");
        assert_eq!(pg_numeric(&numeric(0, 0, 0xC000, 0, &[])).unwrap(), "NaN");
    }

    #[test]
    fn sql_server_instants_are_iso_wall_times() {
        use tiberius::time::{Date, DateTime2, Time};
        let d = Date::new(739_767); // 2026-06-01 in days since 0001-01-01
        let t = Time::new(6 * 3600 * 10_000_000 + 5_000_000, 7);
        assert_eq!(
            mssql(&ColumnData::DateTime2(Some(DateTime2::new(d, t)))),
            Json::String("2026-06-01T06:00:00.5".into())
        );
        assert_eq!(
            mssql(&ColumnData::Date(Some(d))),
            Json::String("2026-06-01".into())
        );
        assert_eq!(
            mssql(&ColumnData::Binary(Some(vec![1u8, 255].into()))),
            Json::String("0x01ff".into())
        );
    }
}
