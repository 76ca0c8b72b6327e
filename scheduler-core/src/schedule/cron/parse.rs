//! The cron parser: text to bit sets, with errors that name the field, the token and the fix.

use super::{CronExpr, CronOptions, DaySpec, MAX_CRON_YEAR, MIN_CRON_YEAR};

/// One field of a cron expression, as named in error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CronField {
    /// Seconds (6- and 7-field forms).
    Second,
    /// Minutes.
    Minute,
    /// Hours.
    Hour,
    /// Day of the month.
    DayOfMonth,
    /// Month.
    Month,
    /// Day of the week.
    DayOfWeek,
    /// Year (7-field form).
    Year,
}

impl std::fmt::Display for CronField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CronField::Second => "second",
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
            CronField::Year => "year",
        })
    }
}

/// Why a cron expression was refused.
///
/// Every message says what was wrong, where, and what is allowed instead, e.g.
/// `day-of-week: "8" is out of range 0-7`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// Nothing but whitespace.
    #[error(
        "cron expression is empty; write 5 fields (minute hour day-of-month month day-of-week), 6 (seconds first) or 7 (year last), or a macro such as @daily"
    )]
    Empty,
    /// Not 5, 6 or 7 fields.
    #[error(
        "cron expression \"{expr}\" has {found} field(s); expected 5 (minute hour day-of-month month day-of-week), 6 (seconds first) or 7 (seconds first, year last)"
    )]
    FieldCount {
        /// The expression.
        expr: String,
        /// How many fields it has.
        found: usize,
    },
    /// An `@word` that is not one of the supported macros.
    #[error(
        "unknown cron macro \"{found}\"; expected one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, @every_minute, @every_second"
    )]
    UnknownMacro {
        /// The macro as written.
        found: String,
    },
    /// A token inside one field is invalid.
    #[error("{field}: \"{token}\" {reason}")]
    Field {
        /// The field.
        field: CronField,
        /// The offending token (a value or item, as written).
        token: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// The expression is valid but can never match any date.
    #[error("cron expression \"{expr}\" never fires: {reason}")]
    NeverFires {
        /// The expression.
        expr: String,
        /// Why no date can match.
        reason: String,
    },
}

struct FieldDef {
    field: CronField,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    names_start: u32,
    allowed: &'static str,
}

const SECOND: FieldDef = FieldDef {
    field: CronField::Second,
    min: 0,
    max: 59,
    names: &[],
    names_start: 0,
    allowed: "0-59",
};
const MINUTE: FieldDef = FieldDef {
    field: CronField::Minute,
    min: 0,
    max: 59,
    names: &[],
    names_start: 0,
    allowed: "0-59",
};
const HOUR: FieldDef = FieldDef {
    field: CronField::Hour,
    min: 0,
    max: 23,
    names: &[],
    names_start: 0,
    allowed: "0-23",
};
const DOM: FieldDef = FieldDef {
    field: CronField::DayOfMonth,
    min: 1,
    max: 31,
    names: &[],
    names_start: 0,
    allowed: "1-31, L, L-n, nW, LW, L-nW or ?",
};
const MONTH: FieldDef = FieldDef {
    field: CronField::Month,
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    names_start: 1,
    allowed: "1-12 or JAN-DEC",
};
const DOW: FieldDef = FieldDef {
    field: CronField::DayOfWeek,
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    names_start: 0,
    allowed: "0-7 (0 and 7 are Sunday), SUN-SAT, n#k, nL or ?",
};
const YEAR: FieldDef = FieldDef {
    field: CronField::Year,
    min: MIN_CRON_YEAR,
    max: MAX_CRON_YEAR,
    names: &[],
    names_start: 0,
    allowed: "1970-2199",
};

impl FieldDef {
    /// The value stored as bit 0.
    fn base(&self) -> u32 {
        if self.field == CronField::Year {
            MIN_CRON_YEAR
        } else {
            0
        }
    }

    /// The last value of the field's cycle, where a wrapping range goes on from the first: the
    /// maximum, except that the week ends on Saturday (6) because 7 is Sunday again.
    fn cycle_max(&self) -> u32 {
        if self.field == CronField::DayOfWeek {
            6
        } else {
            self.max
        }
    }
}

fn set_bit(bits: &mut [u64; 4], i: u32) {
    bits[(i / 64) as usize] |= 1 << (i % 64);
}

fn err(def: &FieldDef, token: &str, reason: impl Into<String>) -> CronError {
    CronError::Field {
        field: def.field,
        token: token.to_string(),
        reason: reason.into(),
    }
}

/// What a parsed field contributes.
#[derive(Default)]
struct Parsed {
    /// Allowed values, as bit `value - base` where base is 1970 for years and 0 elsewhere.
    bits: [u64; 4],
    /// The field was a bare `*` or `?`.
    any: bool,
    /// Some item is `*`, a range or a step: what makes a time field interval-like.
    interval: bool,
}

pub(super) fn parse(expr: &str, options: CronOptions) -> Result<CronExpr, CronError> {
    let trimmed = expr.trim();
    if trimmed.is_empty() {
        return Err(CronError::Empty);
    }
    let expanded = if let Some(word) = trimmed.strip_prefix('@') {
        match word.to_ascii_lowercase().as_str() {
            "yearly" | "annually" => "0 0 1 1 *",
            "monthly" => "0 0 1 * *",
            "weekly" => "0 0 * * 0",
            "daily" | "midnight" => "0 0 * * *",
            "hourly" => "0 * * * *",
            "every_minute" => "* * * * *",
            "every_second" => "* * * * * *",
            _ => {
                return Err(CronError::UnknownMacro {
                    found: trimmed.to_string(),
                });
            }
        }
    } else {
        trimmed
    };
    let parts: Vec<&str> = expanded.split_whitespace().collect();
    let (sec, rest) = match parts.len() {
        5 => (None, &parts[..]),
        6 | 7 => (Some(parts[0]), &parts[1..]),
        n => {
            return Err(CronError::FieldCount {
                expr: trimmed.to_string(),
                found: n,
            });
        }
    };
    let seconds = match sec {
        Some(s) => parse_plain(&SECOND, s)?,
        None => Parsed {
            bits: [1, 0, 0, 0],
            ..Parsed::default()
        },
    };
    let minutes = parse_plain(&MINUTE, rest[0])?;
    let hours = parse_plain(&HOUR, rest[1])?;
    let (dom, dom_special) = parse_dom(rest[2])?;
    let months = parse_plain(&MONTH, rest[3])?;
    let (dow, dow_special) = parse_dow(rest[4])?;
    let years = match rest.get(5) {
        Some(y) => {
            let p = parse_plain(&YEAR, y)?;
            if p.any { None } else { Some(p.bits) }
        }
        None => None,
    };

    let mut dow_by_first = [0u32; 7];
    for (first, slot) in dow_by_first.iter_mut().enumerate() {
        let first = first as u8;
        let mut days = 0u32;
        for wd in 0..7u8 {
            let first_of = 1 + (wd + 7 - first) % 7;
            if dow.bits[0] & (1 << wd) != 0 {
                for week in 0..5 {
                    let d = first_of + 7 * week;
                    if d <= 31 {
                        days |= 1 << d;
                    }
                }
            }
            for k in 1..=5u8 {
                if dow_special.nth[wd as usize] & (1 << k) != 0 {
                    let d = first_of + 7 * (k - 1);
                    if d <= 31 {
                        days |= 1 << d;
                    }
                }
            }
        }
        *slot = days;
    }

    let days = DaySpec {
        dom_any: dom.any,
        dow_any: dow.any,
        day_match: options.day_match,
        dom: dom.bits[0] as u32,
        dom_last_offsets: dom_special.last_offsets,
        dom_nearest_weekday: dom_special.nearest_weekday,
        dom_last_nearest: dom_special.last_nearest,
        dow_by_first,
        dow_last: dow_special.last,
    };
    // Keep a macro as written; otherwise normalise the spacing.
    let source = if trimmed.starts_with('@') {
        trimmed.to_ascii_lowercase()
    } else {
        parts.join(" ")
    };
    let cron = CronExpr {
        seconds: seconds.bits[0],
        minutes: minutes.bits[0],
        hours: hours.bits[0],
        months: months.bits[0],
        years,
        days,
        interval_like: seconds.interval || minutes.interval || hours.interval,
        source: source.into_boxed_str(),
    };
    check_can_fire(&cron)?;
    Ok(cron)
}

/// Refuses expressions whose day rules match no day of any allowed month in any year.
///
/// A month's matching days depend only on its length and the weekday of its 1st. The 28 years
/// 2000–2027 realise every (month, length, first weekday) combination (the Julian-like 28-year
/// cycle holds between 1901 and 2099), so checking them is exact for the day rules; the year
/// field, if any, is left to the bounded search.
fn check_can_fire(cron: &CronExpr) -> Result<(), CronError> {
    for year in 2000..2028i16 {
        for month in 1..=12u8 {
            if cron.months & (1 << month) != 0 && cron.day_mask(year, month) != 0 {
                return Ok(());
            }
        }
    }
    Err(CronError::NeverFires {
        expr: cron.source.to_string(),
        reason: "its day-of-month never occurs in the months it allows (for example 30 or 31 in February); pick days that exist, or use L for the last day".to_string(),
    })
}

fn parse_value(def: &FieldDef, tok: &str) -> Result<u32, CronError> {
    if tok.is_empty() {
        return Err(err(
            def,
            tok,
            format!("is empty; expected a value in {}", def.allowed),
        ));
    }
    let v = if tok.bytes().all(|b| b.is_ascii_digit()) {
        tok.parse::<u32>()
            .map_err(|_| err(def, tok, format!("is out of range {}-{}", def.min, def.max)))?
    } else if let Some(i) = def.names.iter().position(|n| n.eq_ignore_ascii_case(tok)) {
        i as u32 + def.names_start
    } else {
        let what = if def.names.is_empty() {
            format!("is not a number; allowed: {}", def.allowed)
        } else {
            format!("is not a number or a name; allowed: {}", def.allowed)
        };
        return Err(err(def, tok, what));
    };
    if v < def.min || v > def.max {
        return Err(err(
            def,
            tok,
            format!("is out of range {}-{}", def.min, def.max),
        ));
    }
    Ok(v)
}

/// Parses one `*`, `a`, `a-b`, `*/n`, `a-b/n` or `a/n` item into bits, and says whether it is
/// a `*`, a range or a step (what makes a time field interval-like; a plain value is not).
///
/// A range whose start is after its end wraps around the field's cycle (`22-2` is 22, 23, 0, 1,
/// 2), as in Cronos and Quartz; a step counts on across the wrap as if the values continued
/// (`22-2/2` is 22, 0, 2). In day-of-week the cycle is Sunday (0) to Saturday (6) and a range
/// starting at 7 starts on that Sunday (`7-2` is `0-2`). Years do not wrap.
fn parse_range_item(def: &FieldDef, item: &str) -> Result<([u64; 4], bool), CronError> {
    let (base, step) = match item.split_once('/') {
        Some((b, s)) => {
            if s.contains('/') {
                return Err(err(
                    def,
                    item,
                    "has more than one '/'; write a step as a/n, a-b/n or */n",
                ));
            }
            let step = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                s.parse::<u32>().unwrap_or(u32::MAX)
            } else {
                return Err(err(
                    def,
                    s,
                    "is not a valid step; a step is a whole number such as */5",
                ));
            };
            if b == "?" {
                return Err(err(
                    def,
                    item,
                    format!("puts ? before a step; ? stands alone for every value, write */{s}"),
                ));
            }
            if step == 0 {
                return Err(err(def, item, "has a step of 0; a step must be at least 1"));
            }
            let span = def.max - def.min + 1;
            if step > span {
                return Err(err(
                    def,
                    item,
                    format!(
                        "has a step of {step}, larger than the field's span {}-{}",
                        def.min, def.max
                    ),
                ));
            }
            (b, Some(step))
        }
        None => (item, None),
    };
    let mut range = false;
    let (lo, hi) = if base == "*" {
        (def.min, def.max)
    } else if let Some((a, b)) = base.split_once('-') {
        range = true;
        let mut lo = parse_value(def, a)?;
        let hi = parse_value(def, b)?;
        if lo > hi {
            if def.field == CronField::Year {
                return Err(err(
                    def,
                    base,
                    format!(
                        "is a range whose start {lo} is after its end {hi}; years do not wrap around, write the earlier year first ({hi}-{lo})"
                    ),
                ));
            }
            if def.field == CronField::DayOfWeek && lo == 7 {
                lo = 0;
            }
        }
        (lo, hi)
    } else {
        let v = parse_value(def, base)?;
        if step.is_some() { (v, def.max) } else { (v, v) }
    };
    let interval = base == "*" || range || step.is_some();
    let step = step.unwrap_or(1);
    let mut bits = [0u64; 4];
    // Past the end of the cycle, values continue from its start: `end` is `hi` seen from `lo`.
    let top = def.cycle_max();
    let span = top - def.min + 1;
    let end = if lo <= hi { hi } else { hi + span };
    let mut v = lo;
    while v <= end {
        let value = if v > top { v - span } else { v };
        set_bit(&mut bits, value - def.base());
        v += step;
    }
    Ok((bits, interval))
}

/// Parses a whole field: a bare `*` or `?` (every value, "no restriction" in the day fields), or
/// a comma list whose items `special` may claim before the common syntax applies.
fn parse_list<F>(def: &FieldDef, text: &str, mut special: F) -> Result<Parsed, CronError>
where
    F: FnMut(&str) -> Result<bool, CronError>,
{
    if text == "*" || text == "?" {
        let mut bits = [0u64; 4];
        for v in def.min..=def.max {
            set_bit(&mut bits, v - def.base());
        }
        return Ok(Parsed {
            bits,
            any: true,
            interval: true,
        });
    }
    let mut out = Parsed::default();
    for item in text.split(',') {
        if item.is_empty() {
            return Err(err(
                def,
                text,
                "has an empty list item; separate values with single commas",
            ));
        }
        if item == "?" {
            return Err(err(
                def,
                item,
                "must stand alone, not inside a list; write * for every value",
            ));
        }
        if special(item)? {
            continue;
        }
        let (bits, interval) = parse_range_item(def, item)?;
        for (o, b) in out.bits.iter_mut().zip(bits) {
            *o |= b;
        }
        out.interval |= interval;
    }
    Ok(out)
}

fn parse_plain(def: &FieldDef, text: &str) -> Result<Parsed, CronError> {
    parse_list(def, text, |_| Ok(false))
}

#[derive(Default)]
struct DomSpecial {
    last_offsets: u32,
    /// Bit k for `L-kW` (bit 0 is `LW`).
    last_nearest: u32,
    nearest_weekday: u32,
}

/// `n` of an `L-n` or `L-nW` item: days before the last day, 0-30.
fn last_offset(digits: &str) -> Option<u32> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u32>().ok().filter(|n| *n <= 30)
}

fn parse_dom(text: &str) -> Result<(Parsed, DomSpecial), CronError> {
    let def = &DOM;
    let mut sp = DomSpecial::default();
    let parsed = parse_list(def, text, |item| {
        let upper = item.to_ascii_uppercase();
        if upper == "L" {
            sp.last_offsets |= 1;
            return Ok(true);
        }
        if upper == "LW" {
            sp.last_nearest |= 1;
            return Ok(true);
        }
        if let Some(off) = upper.strip_prefix("L-") {
            if let Some(digits) = off.strip_suffix('W') {
                let n = last_offset(digits).ok_or_else(|| {
                    err(
                        def,
                        item,
                        "is not a valid L-nW; n is the number of days before the last day, 0-30 (for example L-2W)",
                    )
                })?;
                sp.last_nearest |= 1 << n;
                return Ok(true);
            }
            let n = last_offset(off).ok_or_else(|| {
                err(
                    def,
                    item,
                    "is not a valid L-n; n is the number of days before the last day, 0-30",
                )
            })?;
            sp.last_offsets |= 1 << n;
            return Ok(true);
        }
        if let Some(day) = upper.strip_suffix('W') {
            let d = parse_value(def, day).map_err(|_| {
                err(
                    def,
                    item,
                    "is not a valid nW; n is a day of the month 1-31 (for example 15W)",
                )
            })?;
            sp.nearest_weekday |= 1 << d;
            return Ok(true);
        }
        if upper.contains('L') || upper.contains('W') || upper.contains('#') {
            return Err(err(
                def,
                item,
                "is not valid in day-of-month; allowed: 1-31, L, L-n, nW, LW, L-nW, ?, lists, ranges and steps",
            ));
        }
        Ok(false)
    })?;
    Ok((parsed, sp))
}

#[derive(Default)]
struct DowSpecial {
    /// Per weekday, bits k = 1..5 for `wd#k`.
    nth: [u8; 7],
    /// Bits per weekday for `wdL`.
    last: u8,
}

fn parse_dow(text: &str) -> Result<(Parsed, DowSpecial), CronError> {
    let def = &DOW;
    let mut sp = DowSpecial::default();
    let mut parsed = parse_list(def, text, |item| {
        if let Some((wd, k)) = item.split_once('#') {
            let wd = parse_value(def, wd)? % 7;
            let k = k.parse::<u8>().ok().filter(|k| (1..=5).contains(k)).ok_or_else(|| {
                err(
                    def,
                    item,
                    "is not a valid n#k; k is the week of the month 1-5 (for example FRI#3 is the third Friday)",
                )
            })?;
            sp.nth[wd as usize] |= 1 << k;
            return Ok(true);
        }
        if item.eq_ignore_ascii_case("L") {
            return Err(err(
                def,
                item,
                "alone is ambiguous in day-of-week; write nL for the last weekday n of the month (for example 5L or FRIL is the last Friday)",
            ));
        }
        if item.len() > 1 && (item.ends_with('L') || item.ends_with('l')) {
            let wd = parse_value(def, &item[..item.len() - 1])? % 7;
            sp.last |= 1 << wd;
            return Ok(true);
        }
        Ok(false)
    })?;
    // Sunday may be written 7.
    if parsed.bits[0] & (1 << 7) != 0 {
        parsed.bits[0] = (parsed.bits[0] & !(1 << 7)) | 1;
    }
    Ok((parsed, sp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(expr: &str) -> String {
        CronExpr::parse(expr).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_field_token_and_what_is_allowed() {
        assert_eq!(msg("0 0 * * 8"), "day-of-week: \"8\" is out of range 0-7");
        assert_eq!(msg("60 * * * *"), "minute: \"60\" is out of range 0-59");
        assert_eq!(msg("* 24 * * *"), "hour: \"24\" is out of range 0-23");
        assert_eq!(msg("* * 0 * *"), "day-of-month: \"0\" is out of range 1-31");
        assert_eq!(msg("* * * 13 *"), "month: \"13\" is out of range 1-12");
        assert_eq!(
            msg("* * * FOO *"),
            "month: \"FOO\" is not a number or a name; allowed: 1-12 or JAN-DEC"
        );
        assert_eq!(
            msg("0 0 0 * * * 1969"),
            "year: \"1969\" is out of range 1970-2199"
        );
        assert_eq!(
            msg("*/0 * * * *"),
            "minute: \"*/0\" has a step of 0; a step must be at least 1"
        );
        assert!(msg("* * * * * * * *").contains("has 8 field(s)"));
        assert!(msg("* * * *").contains("has 4 field(s)"));
        assert!(msg("@reboot").contains("unknown cron macro \"@reboot\""));
        assert!(msg("   ").contains("is empty"));
        assert!(msg("0 0 * * L").contains("write nL"));
        assert!(msg("0 0 * * 5#6").contains("k is the week of the month 1-5"));
        assert!(msg("0 0 L-31 * *").contains("0-30"));
        assert!(msg("0 0 32W * *").contains("nW"));
        assert!(msg("0 0 1,,2 * *").contains("empty list item"));
        assert!(msg("*/a * * * *").contains("not a valid step"));
        assert!(msg("*/61 * * * *").contains("larger than the field's span"));
        assert!(msg("0 0 5#2 * *").contains("not valid in day-of-month"));
        assert_eq!(
            msg("0 0 30 2 *"),
            "cron expression \"0 0 30 2 *\" never fires: its day-of-month never occurs in the months it allows (for example 30 or 31 in February); pick days that exist, or use L for the last day"
        );
        assert!(msg("0 0 31 4,6,9,11 *").contains("never fires"));
    }

    #[test]
    fn refuses_what_cannot_mean_anything_with_the_new_syntax() {
        assert_eq!(
            msg("0 0 0 1 1 ? 2030-2025"),
            "year: \"2030-2025\" is a range whose start 2030 is after its end 2025; years do not wrap around, write the earlier year first (2025-2030)"
        );
        assert_eq!(
            msg("0 0 0 1 1 ? 2030-2025/2"),
            "year: \"2030-2025\" is a range whose start 2030 is after its end 2025; years do not wrap around, write the earlier year first (2025-2030)"
        );
        assert_eq!(
            msg("0 22-2/0 * * *"),
            "hour: \"22-2/0\" has a step of 0; a step must be at least 1"
        );
        assert_eq!(
            msg("0 22-2/25 * * *"),
            "hour: \"22-2/25\" has a step of 25, larger than the field's span 0-23"
        );
        assert_eq!(
            msg("0 0 L-40W * ?"),
            "day-of-month: \"L-40W\" is not a valid L-nW; n is the number of days before the last day, 0-30 (for example L-2W)"
        );
        assert_eq!(
            msg("0 0 L-31W * ?"),
            "day-of-month: \"L-31W\" is not a valid L-nW; n is the number of days before the last day, 0-30 (for example L-2W)"
        );
        assert!(msg("0 0 L-W * ?").contains("not a valid L-nW"));
        assert!(msg("0 0 L-xW * ?").contains("not a valid L-nW"));
        assert!(msg("0 0 L-2WW * ?").contains("not a valid L-nW"));
        assert_eq!(
            msg("?/5 * * * *"),
            "minute: \"?/5\" puts ? before a step; ? stands alone for every value, write */5"
        );
        assert_eq!(
            msg("0 1,? * * *"),
            "hour: \"?\" must stand alone, not inside a list; write * for every value"
        );
        assert!(msg("0 0 1,? * *").contains("must stand alone"));
        assert!(msg("0 0 * * MON,?").contains("must stand alone"));
        assert!(msg("0 0 ?/2 * *").contains("puts ? before a step"));
        assert!(msg("0 ?-3 * * *").contains("is not a number"));
        assert!(msg("@every_hour").contains("@every_minute, @every_second"));
        // A wrapped day-of-month still has to exist: 31-1/5 is only the 31st.
        assert!(msg("0 0 31-1/5 2 *").contains("never fires"));
        assert!(msg("0 0 30-2/4 FEB *").contains("never fires"));
        assert!(msg("0 0 0 L-29W 2 ?").contains("never fires"));
    }

    #[test]
    fn accepts_every_syntax_element() {
        for ok in [
            "* * * * *",
            "*/5 * * * *",
            "0 6-22 * * MON-FRI",
            "0 0 1,15,L * *",
            "0 0 L-3 * *",
            "0 0 15W * *",
            "0 0 LW * *",
            "0 0 ? * FRI#3",
            "0 0 ? * 5L",
            "0 0 ? * friL",
            "0 0 * jan,jul sun",
            "0 0 * * 7",
            "0 0 * * 0-7",
            "*/10 * * * * *",
            "0 0 12 * * ? 2030-2040/2",
            "0 0 12 * * ? *",
            "10/15 * * * *",
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@HOURLY",
            "0 0 29 2 *",
            "0 0 30 2 1",
            "0 22-2 * * *",
            "0 0 22-2/2 * * *",
            "50-10 * * * * *",
            "0 0 28-3 * *",
            "0 0 1 NOV-FEB *",
            "0 0 * * FRI-MON",
            "0 0 * * 7-3/2",
            "0 0 L-2W * ?",
            "0 0 l-0w * ?",
            "0 0 L-30W,15 * ?",
            "? ? ? ? ? ?",
            "0 0 12 ? ? ? ?",
            "@every_second",
            "@every_minute",
        ] {
            CronExpr::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }
}
