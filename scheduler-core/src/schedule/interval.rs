//! Fixed intervals ("every 90 seconds") and the duration syntax shared by the text forms.

use jiff::Timestamp;

/// Why a duration or interval was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// The text is not a duration.
    #[error(
        "duration \"{text}\" is not valid; write a whole number with a unit: 90s, 5m, 1h30m, 2d (units d, h, m, s)"
    )]
    Syntax {
        /// The text as given.
        text: String,
    },
    /// The duration is zero.
    #[error("duration \"{text}\" is zero; an interval must be at least 1s")]
    Zero {
        /// The text as given.
        text: String,
    },
    /// The duration does not fit.
    #[error("duration \"{text}\" is too long; the maximum is 36500d")]
    TooLong {
        /// The text as given.
        text: String,
    },
}

/// Parses `90s`, `5m`, `1h30m`, `2d`, `1h 30m` or a bare number of seconds into seconds.
///
/// Units are `d`, `h`, `m`, `s` (also `day(s)`, `hour(s)`, `min(s)`/`minute(s)`,
/// `sec(s)`/`second(s)`). Months and years are refused on purpose: they are not fixed lengths,
/// so a calendar or cron schedule is the right tool.
pub fn parse_duration(text: &str) -> Result<u64, DurationError> {
    let syntax = || DurationError::Syntax {
        text: text.to_string(),
    };
    let s: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if s.is_empty() {
        return Err(syntax());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = s.parse().map_err(|_| DurationError::TooLong {
            text: text.to_string(),
        })?;
        return check(n, text);
    }
    let mut total: u64 = 0;
    let mut rest = s.as_str();
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(syntax());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| DurationError::TooLong {
            text: text.to_string(),
        })?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let unit = rest[..unit_len].to_ascii_lowercase();
        rest = &rest[unit_len..];
        let mult = match unit.as_str() {
            "d" | "day" | "days" => 86_400,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            _ => return Err(syntax()),
        };
        total = n
            .checked_mul(mult)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| DurationError::TooLong {
                text: text.to_string(),
            })?;
    }
    check(total, text)
}

fn check(n: u64, text: &str) -> Result<u64, DurationError> {
    if n == 0 {
        Err(DurationError::Zero {
            text: text.to_string(),
        })
    } else if n > 36_500 * 86_400 {
        Err(DurationError::TooLong {
            text: text.to_string(),
        })
    } else {
        Ok(n)
    }
}

/// Formats seconds the way [`parse_duration`] reads them (`1h30m`, `90s` → `1m30s`).
pub fn format_duration(secs: u64) -> String {
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, len) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if rest >= len {
            out.push_str(&format!("{}{unit}", rest / len));
            rest %= len;
        }
    }
    out
}

/// Every `period` seconds of elapsed time, counted from an anchor instant.
///
/// Intervals ignore wall clocks entirely, so daylight-saving changes neither add nor drop a
/// fire: "every 15 minutes" is 15 minutes of real time across a fold or a gap. The default
/// anchor is the Unix epoch, so `every 5m` fires at :00, :05, … UTC; give an explicit anchor to
/// shift the phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Interval {
    period: u64,
    anchor: i64,
}

impl Interval {
    /// An interval of `period_seconds` (at least 1) anchored at `anchor` (or the Unix epoch).
    pub fn new(period_seconds: u64, anchor: Option<Timestamp>) -> Result<Self, DurationError> {
        let text = format!("{period_seconds}s");
        let period = check(period_seconds, &text)?;
        Ok(Interval {
            period,
            anchor: anchor.map_or(0, |a| a.as_second()),
        })
    }

    /// The period in seconds.
    pub fn period_seconds(&self) -> u64 {
        self.period
    }

    /// The anchor instant.
    pub fn anchor(&self) -> Timestamp {
        Timestamp::from_second(self.anchor).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// The first fire strictly after second `t`.
    pub(crate) fn next_after(&self, t: i64) -> Option<i64> {
        let p = self.period as i64;
        if t < self.anchor {
            return Some(self.anchor);
        }
        let k = (t - self.anchor) / p + 1;
        k.checked_mul(p)?.checked_add(self.anchor)
    }

    /// The last fire strictly before second `t`.
    pub(crate) fn prev_before(&self, t: i64) -> Option<i64> {
        let p = self.period as i64;
        if t <= self.anchor {
            return None;
        }
        let k = (t - 1 - self.anchor) / p;
        Some(self.anchor + k * p)
    }

    /// `every 5m` or `every 5m from 2026-01-01T00:00:00Z`.
    pub fn describe(&self) -> String {
        if self.anchor == 0 {
            format!("every {}", format_duration(self.period))
        } else {
            format!(
                "every {} from {}",
                format_duration(self.period),
                self.anchor()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_format() {
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("5m"), Ok(300));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("1h 30m"), Ok(5400));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        assert_eq!(parse_duration("45"), Ok(45));
        assert_eq!(parse_duration("10 minutes"), Ok(600));
        assert_eq!(format_duration(5400), "1h30m");
        assert_eq!(format_duration(90), "1m30s");
        assert_eq!(format_duration(86_400), "1d");
        for bad in ["", "m", "5x", "1.5h", "-5m", "5m3"] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains("is not valid"), "{bad}: {e}");
        }
        assert!(
            parse_duration("0s")
                .unwrap_err()
                .to_string()
                .contains("zero")
        );
        assert!(
            parse_duration("99999999999999999999d")
                .unwrap_err()
                .to_string()
                .contains("too long")
        );
    }

    #[test]
    fn intervals_step_from_the_anchor() {
        let i = Interval::new(300, None).unwrap();
        assert_eq!(i.next_after(0), Some(300));
        assert_eq!(i.next_after(299), Some(300));
        assert_eq!(i.next_after(300), Some(600));
        assert_eq!(i.prev_before(300), Some(0));
        assert_eq!(i.prev_before(301), Some(300));
        let a = Interval::new(7, Some(Timestamp::from_second(1000).unwrap())).unwrap();
        assert_eq!(a.next_after(0), Some(1000));
        assert_eq!(a.next_after(1000), Some(1007));
        assert_eq!(a.prev_before(1000), None);
        assert_eq!(a.prev_before(1008), Some(1007));
        assert!(Interval::new(0, None).is_err());
    }
}
