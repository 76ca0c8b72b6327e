//! The text form's parser (grammar in the module docs of [`super`]): words to a
//! [`CalendarRule`], with errors that quote the word as written and say what belongs there.

use super::model::{DAY_HINT, DAY_SECONDS, format_clock};
use super::{
    CalendarError, CalendarRule, DayKind, Frequency, MonthDays, Ordinal, TimeOfDay, TimesOfDay,
    Weekday, WeekdaySet,
};
use crate::civil::Civil;

/// One word or comma, as written and lowercased.
struct Token<'a> {
    text: &'a str,
    lower: String,
}

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    pos: usize,
}

/// Splits on whitespace, then splits commas out as tokens of their own, so `1,15` and `1, 15`
/// read the same.
fn tokenize(text: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let mut rest = word;
        while !rest.is_empty() {
            let (piece, tail) = match rest.find(',') {
                Some(0) => rest.split_at(1),
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            out.push(Token {
                text: piece,
                lower: piece.to_ascii_lowercase(),
            });
            rest = tail;
        }
    }
    out
}

pub(super) fn parse(text: &str) -> Result<CalendarRule, CalendarError> {
    let mut p = Parser {
        tokens: tokenize(text),
        pos: 0,
    };
    let Some(first) = p.next_lower() else {
        return Err(CalendarError::Empty);
    };
    let frequency = match first.as_str() {
        "daily" => {
            let every = p.interval("days", "\"daily\"", false)?;
            Frequency::Daily { every }
        }
        "weekly" => {
            let every = p.interval("weeks", "\"weekly\"", true)?;
            p.skip("on");
            let weekdays = p.weekdays()?;
            Frequency::Weekly { every, weekdays }
        }
        "monthly" => {
            let every = p.interval("months", "\"monthly\"", true)?;
            p.skip("on");
            let days = p.month_days()?;
            Frequency::Monthly { every, days }
        }
        _ => {
            return Err(CalendarError::UnknownFrequency {
                found: p.tokens[0].text.to_string(),
            });
        }
    };
    let after = match frequency {
        Frequency::Daily { every: 1 } => "\"daily\"".to_string(),
        Frequency::Daily { every } => format!("\"every {every} days\""),
        _ => "the days".to_string(),
    };
    let time = p.time(&after)?;
    let (mut from, mut until) = (None, None);
    while let Some(word) = p.next_lower() {
        let (slot, keyword) = match word.as_str() {
            "from" => (&mut from, "from"),
            "until" => (&mut until, "until"),
            _ => {
                return Err(CalendarError::Expected {
                    expected: "\"from\", \"until\" or nothing more".to_string(),
                    after: "the time of day".to_string(),
                    found: Some(p.tokens[p.pos - 1].text.to_string()),
                });
            }
        };
        if slot.is_some() {
            return Err(CalendarError::Duplicate { keyword });
        }
        *slot = Some(p.date(keyword)?);
    }
    CalendarRule::new(frequency, time, from, until)
}

impl Parser<'_> {
    fn peek(&self, ahead: usize) -> Option<&str> {
        self.tokens.get(self.pos + ahead).map(|t| t.lower.as_str())
    }

    fn next_lower(&mut self) -> Option<String> {
        let t = self.tokens.get(self.pos)?;
        self.pos += 1;
        Some(t.lower.clone())
    }

    /// The current token as written, for error messages.
    fn found(&self) -> Option<String> {
        self.tokens.get(self.pos).map(|t| t.text.to_string())
    }

    fn skip(&mut self, word: &str) -> bool {
        if self.peek(0) == Some(word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// `every N <unit>` after the frequency word; 1 when absent. For `daily` the words may
    /// instead start the time of day (`daily every 5m`), so they are only taken when the unit
    /// is days; for the others `every` here must be the interval.
    fn interval(
        &mut self,
        unit: &'static str,
        after: &str,
        required_unit: bool,
    ) -> Result<u32, CalendarError> {
        if self.peek(0) != Some("every") {
            return Ok(1);
        }
        let singular = &unit[..unit.len() - 1];
        let unit_ok = |w: Option<&str>| w == Some(unit) || w == Some(singular);
        if !required_unit && !unit_ok(self.peek(2)) {
            return Ok(1);
        }
        self.pos += 1;
        let Some(count) = self.tokens.get(self.pos) else {
            return Err(CalendarError::Expected {
                expected: format!("a number of {unit}"),
                after: format!("{after} every"),
                found: None,
            });
        };
        let n = match count.lower.parse::<u32>() {
            Ok(n) if n >= 1 && count.lower.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => {
                return Err(CalendarError::Interval {
                    found: count.text.to_string(),
                    unit,
                });
            }
        };
        self.pos += 1;
        if !unit_ok(self.peek(0)) {
            return Err(CalendarError::Expected {
                expected: format!("\"{unit}\""),
                after: format!("\"every {n}\""),
                found: self.found(),
            });
        }
        self.pos += 1;
        Ok(n)
    }

    fn weekdays(&mut self) -> Result<WeekdaySet, CalendarError> {
        if matches!(self.peek(0), None | Some("at" | "every")) {
            return Err(CalendarError::Expected {
                expected: "the weekdays, such as mon-fri or wed,sat".to_string(),
                after: "\"weekly\"".to_string(),
                found: self.found(),
            });
        }
        let mut set = WeekdaySet::EMPTY;
        loop {
            let Some(tok) = self.tokens.get(self.pos) else {
                return Err(CalendarError::Expected {
                    expected: "a weekday".to_string(),
                    after: "\",\"".to_string(),
                    found: None,
                });
            };
            let (text, lower) = (tok.text, tok.lower.as_str());
            let item = match lower {
                "weekdays" => WeekdaySet::MONDAY_TO_FRIDAY,
                "weekend" | "weekends" => WeekdaySet::WEEKEND,
                _ => match lower.split_once('-') {
                    Some((a, b)) => {
                        let unknown = |w: &str, orig: &str| CalendarError::UnknownWeekday {
                            found: orig.get(..w.len()).unwrap_or(w).to_string(),
                        };
                        let wa = weekday_name(a).ok_or_else(|| unknown(a, text))?;
                        let wb = weekday_name(b)
                            .ok_or_else(|| unknown(b, &text[text.len() - b.len()..]))?;
                        WeekdaySet::range(wa, wb).ok_or_else(|| CalendarError::WrappingRange {
                            found: text.to_string(),
                            suggestion: format!(
                                "{}-sun,mon-{}",
                                wa.abbreviation(),
                                wb.abbreviation()
                            )
                            .replace("sun-sun", "sun")
                            .replace("mon-mon", "mon"),
                        })?
                    }
                    None => WeekdaySet::single(weekday_name(lower).ok_or_else(|| {
                        CalendarError::UnknownWeekday {
                            found: text.to_string(),
                        }
                    })?),
                },
            };
            set = set.union(item);
            self.pos += 1;
            if !self.skip(",") {
                return Ok(set);
            }
        }
    }

    fn month_days(&mut self) -> Result<MonthDays, CalendarError> {
        if matches!(self.peek(0), None | Some("at" | "every")) {
            return Err(CalendarError::Expected {
                expected: "the days of the month, such as 1,15 or last".to_string(),
                after: "\"monthly\"".to_string(),
                found: self.found(),
            });
        }
        let mut days = MonthDays::EMPTY;
        loop {
            let Some(tok) = self.tokens.get(self.pos) else {
                return Err(CalendarError::Expected {
                    expected: "a day of the month".to_string(),
                    after: "\",\"".to_string(),
                    found: None,
                });
            };
            let (text, lower) = (tok.text, tok.lower.clone());
            self.pos += 1;
            let bad = |hint| CalendarError::BadMonthDay {
                found: text.to_string(),
                hint,
            };
            if let Some(ord) = ordinal_word(&lower) {
                let kind = match self.peek(0).and_then(kind_word) {
                    Some(kind) => {
                        self.pos += 1;
                        kind
                    }
                    None if ord == Ordinal::Last => DayKind::Day,
                    None => {
                        return Err(CalendarError::Expected {
                            expected: "a weekday, \"day\", \"weekday\" or \"weekend-day\""
                                .to_string(),
                            after: format!("\"{text}\""),
                            found: self.found(),
                        });
                    }
                };
                days = days.with_relative(ord, kind);
            } else if matches!(lower.as_str(), "fifth" | "5th") {
                return Err(bad(
                    "not every month has a fifth one, so it is not offered; use \"last\" (e.g. \"last fri\")",
                ));
            } else if let Some((a, b)) = lower.split_once('-') {
                let (a, b) = match (day_number(a), day_number(b)) {
                    (Some(a), Some(b)) => (a, b),
                    _ => return Err(bad(DAY_HINT)),
                };
                if a > b {
                    return Err(CalendarError::WrappingRange {
                        found: text.to_string(),
                        suggestion: format!("{a}-31,1-{b}"),
                    });
                }
                for d in a..=b {
                    days = days.with_day(d)?;
                }
            } else {
                let d = day_number(&lower).ok_or_else(|| bad(DAY_HINT))?;
                days = days.with_day(d)?;
            }
            if !self.skip(",") {
                return Ok(days);
            }
        }
    }

    fn time(&mut self, after: &str) -> Result<TimeOfDay, CalendarError> {
        match self.peek(0) {
            Some("at") => {
                self.pos += 1;
                let mut times = Vec::new();
                loop {
                    let Some(tok) = self.tokens.get(self.pos) else {
                        return Err(CalendarError::Expected {
                            expected: "a time of day such as 09:00".to_string(),
                            after: if times.is_empty() { "\"at\"" } else { "\",\"" }.to_string(),
                            found: None,
                        });
                    };
                    let t = clock(&tok.lower).ok_or_else(|| CalendarError::BadTime {
                        found: tok.text.to_string(),
                    })?;
                    times.push(t);
                    self.pos += 1;
                    if !self.skip(",") {
                        break;
                    }
                }
                Ok(TimeOfDay::At(TimesOfDay::new(times)?))
            }
            Some("every") => {
                self.pos += 1;
                let step = self.step()?;
                let (mut start, mut end) = (0, DAY_SECONDS - 1);
                if self.skip("between") {
                    (start, end) = self.window()?;
                }
                let time = TimeOfDay::Every {
                    step_seconds: step,
                    start,
                    end,
                };
                time.validate()?;
                Ok(time)
            }
            _ => Err(CalendarError::Expected {
                expected: "\"at\" or \"every\"".to_string(),
                after: after.to_string(),
                found: self.found(),
            }),
        }
    }

    /// `15m`, `1h30m`, `90 seconds`, `hour`.
    fn step(&mut self) -> Result<u32, CalendarError> {
        let Some(tok) = self.tokens.get(self.pos) else {
            return Err(CalendarError::Expected {
                expected: "an interval such as 15m".to_string(),
                after: "\"every\"".to_string(),
                found: None,
            });
        };
        let (text, lower) = (tok.text, tok.lower.clone());
        self.pos += 1;
        let bad = || CalendarError::BadStep {
            found: text.to_string(),
        };
        let seconds: u64 = if let Some(unit) = unit_seconds(&lower) {
            unit
        } else if lower.bytes().all(|b| b.is_ascii_digit()) {
            let n: u64 = lower.parse().map_err(|_| bad())?;
            let unit_tok = self.tokens.get(self.pos);
            let unit = unit_tok.and_then(|u| unit_seconds(&u.lower));
            match unit {
                Some(u) => {
                    self.pos += 1;
                    n.saturating_mul(u)
                }
                None => {
                    return Err(CalendarError::BadStep {
                        found: match unit_tok {
                            Some(u) => format!("{text} {}", u.text),
                            None => text.to_string(),
                        },
                    });
                }
            }
        } else {
            // Compound: digits then letters, repeated (1h30m).
            let mut total = 0u64;
            let mut rest = lower.as_str();
            while !rest.is_empty() {
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                let letters = rest[digits..]
                    .bytes()
                    .take_while(u8::is_ascii_alphabetic)
                    .count();
                if digits == 0 || letters == 0 {
                    return Err(bad());
                }
                let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
                let unit = unit_seconds(&rest[digits..digits + letters]).ok_or_else(bad)?;
                total = total.saturating_add(n.saturating_mul(unit));
                rest = &rest[digits + letters..];
            }
            total
        };
        if seconds == 0 || seconds >= u64::from(DAY_SECONDS) {
            return Err(CalendarError::StepOutOfRange { seconds });
        }
        Ok(seconds as u32)
    }

    /// `06:00-22:30`, `06:00 - 22:30`, `06:00 to 22:30`, `06:00 and 22:30`.
    fn window(&mut self) -> Result<(u32, u32), CalendarError> {
        let Some(tok) = self.tokens.get(self.pos) else {
            return Err(CalendarError::Expected {
                expected: "a window such as 06:00-22:30".to_string(),
                after: "\"between\"".to_string(),
                found: None,
            });
        };
        let (text, lower) = (tok.text, tok.lower.clone());
        self.pos += 1;
        let bad = |s: &str| CalendarError::BadTime {
            found: s.to_string(),
        };
        let (start, end) = match lower.split_once('-') {
            Some((a, b)) if !b.is_empty() => {
                let sa = clock(a).ok_or_else(|| bad(&text[..a.len()]))?;
                let sb = clock(b).ok_or_else(|| bad(&text[a.len() + 1..]))?;
                (sa, sb)
            }
            _ => {
                let a = lower.strip_suffix('-').unwrap_or(&lower);
                let sa = clock(a).ok_or_else(|| bad(text))?;
                if a.len() == lower.len() && !matches!(self.peek(0), Some("-" | "to" | "and")) {
                    return Err(CalendarError::Expected {
                        expected: "\"-\" and the end of the window, as in 06:00-22:30".to_string(),
                        after: format!("\"between {text}\""),
                        found: self.found(),
                    });
                }
                if a.len() == lower.len() {
                    self.pos += 1;
                }
                let Some(end) = self.tokens.get(self.pos) else {
                    return Err(CalendarError::Expected {
                        expected: "the end of the window, as in 06:00-22:30".to_string(),
                        after: format!("\"between {text}\""),
                        found: None,
                    });
                };
                let sb = clock(&end.lower).ok_or_else(|| bad(end.text))?;
                self.pos += 1;
                (sa, sb)
            }
        };
        if end < start {
            return Err(CalendarError::ReversedWindow {
                start: format_clock(start),
                end: format_clock(end),
            });
        }
        Ok((start, end))
    }

    /// `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]` or `YYYY-MM-DD HH:MM[:SS]`.
    fn date(&mut self, keyword: &str) -> Result<Civil, CalendarError> {
        let Some(tok) = self.tokens.get(self.pos) else {
            return Err(CalendarError::Expected {
                expected: "a date such as 2026-01-01".to_string(),
                after: format!("\"{keyword}\""),
                found: None,
            });
        };
        let (text, lower) = (tok.text, tok.lower.clone());
        self.pos += 1;
        let bad = || CalendarError::BadDate {
            found: text.to_string(),
        };
        let (date, time) = match lower.split_once('t') {
            Some((d, t)) => (d, Some(t)),
            None => (lower.as_str(), None),
        };
        let (negative, digits) = match date.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, date),
        };
        let mut parts = digits.split('-');
        let (Some(y), Some(m), Some(d), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let all_digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
        if !(all_digits(y, 4) && all_digits(m, 2) && all_digits(d, 2)) {
            return Err(bad());
        }
        let year: i16 = y.parse().map_err(|_| bad())?;
        let year = if negative { -year } else { year };
        let (m, d): (u8, u8) = (m.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
        let sod = match time {
            Some(t) => clock(t).ok_or_else(bad)?,
            None => match self.peek(0).and_then(clock) {
                Some(sod) => {
                    self.pos += 1;
                    sod
                }
                None => 0,
            },
        };
        Civil::new(
            year,
            m,
            d,
            (sod / 3600) as u8,
            (sod / 60 % 60) as u8,
            (sod % 60) as u8,
        )
        .ok_or_else(bad)
    }
}

/// `HH:MM` or `HH:MM:SS` (one- or two-digit hours) as seconds since midnight.
fn clock(s: &str) -> Option<u32> {
    let mut parts = s.split(':');
    let h = parts.next()?;
    let m = parts.next()?;
    let sec = parts.next();
    if parts.next().is_some() {
        return None;
    }
    let num = |p: &str, lens: &[usize], max: u32| -> Option<u32> {
        if !lens.contains(&p.len()) || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok().filter(|v| *v <= max)
    };
    let h = num(h, &[1, 2], 23)?;
    let m = num(m, &[2], 59)?;
    let sec = match sec {
        Some(x) => num(x, &[2], 59)?,
        None => 0,
    };
    Some(h * 3600 + m * 60 + sec)
}

fn weekday_name(s: &str) -> Option<Weekday> {
    Some(match s {
        "mon" | "monday" => Weekday::Monday,
        "tue" | "tues" | "tuesday" => Weekday::Tuesday,
        "wed" | "weds" | "wednesday" => Weekday::Wednesday,
        "thu" | "thur" | "thurs" | "thursday" => Weekday::Thursday,
        "fri" | "friday" => Weekday::Friday,
        "sat" | "saturday" => Weekday::Saturday,
        "sun" | "sunday" => Weekday::Sunday,
        _ => return None,
    })
}

fn ordinal_word(s: &str) -> Option<Ordinal> {
    Some(match s {
        "first" | "1st" => Ordinal::First,
        "second" | "2nd" => Ordinal::Second,
        "third" | "3rd" => Ordinal::Third,
        "fourth" | "4th" => Ordinal::Fourth,
        "last" => Ordinal::Last,
        _ => return None,
    })
}

fn kind_word(s: &str) -> Option<DayKind> {
    Some(match s {
        "day" => DayKind::Day,
        "weekday" | "workday" => DayKind::Weekday,
        "weekend-day" | "weekendday" | "weekend" => DayKind::WeekendDay,
        _ => DayKind::Named(weekday_name(s)?),
    })
}

fn day_number(s: &str) -> Option<u8> {
    if s.is_empty() || s.len() > 2 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|d| (1..=31).contains(d))
}

fn unit_seconds(s: &str) -> Option<u64> {
    Some(match s {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
        _ => return None,
    })
}
