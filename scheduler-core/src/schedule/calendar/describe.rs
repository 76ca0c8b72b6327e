//! The canonical text form ([`std::fmt::Display`]) and plain-English descriptions of calendar
//! rules, both built from the validated rule so they say what the engine does.

use super::model::{LAST_SECOND, format_clock};
use super::{CalendarRule, DayKind, Frequency, MonthDays, Ordinal, TimeOfDay, Weekday, WeekdaySet};
use crate::civil::Civil;
use crate::schedule::describe::{join_and, month_name};

/// A civil time as the text form writes it: `YYYY-MM-DD` at midnight, else
/// `YYYY-MM-DDTHH:MM[:SS]`. Years before 1 get a leading `-` and four digits.
pub(super) fn format_date(c: Civil) -> String {
    let date = format!("{}-{:02}-{:02}", format_year(c.year), c.month, c.day);
    match c.second_of_day() {
        0 => date,
        sod => format!("{date}T{}", format_clock(sod)),
    }
}

/// A year as the text form writes it: four digits, with a leading `-` before year 0.
pub(super) fn format_year(year: i16) -> String {
    if year < 0 {
        format!("-{:04}", -i32::from(year))
    } else {
        format!("{year:04}")
    }
}

/// A civil time for messages and descriptions: like [`format_date`] but with a space before the
/// time.
pub(super) fn format_civil(c: Civil) -> String {
    format_date(c).replacen('T', " ", 1)
}

/// Maximal runs of consecutive set positions `0..n`, as `(first, last)`.
fn runs(n: u32, contains: impl Fn(u32) -> bool) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for i in 0..n {
        if !contains(i) {
            continue;
        }
        match out.last_mut() {
            Some((_, last)) if *last + 1 == i => *last = i,
            _ => out.push((i, i)),
        }
    }
    out
}

fn weekdays_text(set: WeekdaySet) -> String {
    let bits = set.monday_first_bits();
    let mut items = Vec::new();
    for (a, b) in runs(7, |i| bits & (1 << i) != 0) {
        let (wa, wb) = (
            Weekday::MONDAY_FIRST[a as usize],
            Weekday::MONDAY_FIRST[b as usize],
        );
        if b >= a + 2 {
            items.push(format!("{}-{}", wa.abbreviation(), wb.abbreviation()));
        } else {
            items.extend(
                Weekday::MONDAY_FIRST[a as usize..=b as usize]
                    .iter()
                    .map(|w| w.abbreviation().to_string()),
            );
        }
    }
    items.join(",")
}

fn month_days_text(days: MonthDays) -> String {
    let mut items = Vec::new();
    for (a, b) in runs(32, |d| days.contains_day(d as u8)) {
        if b >= a + 2 {
            items.push(format!("{a}-{b}"));
        } else {
            items.extend((a..=b).map(|d| d.to_string()));
        }
    }
    for (ord, kind) in days.relatives() {
        items.push(match (ord, kind) {
            (Ordinal::Last, DayKind::Day) => "last".to_string(),
            _ => format!("{} {}", ord.word(), kind.word()),
        });
    }
    items.join(",")
}

/// The step in the largest unit that divides it: `1h`, `90m`, `45s`.
fn step_text(step: u32) -> String {
    if step.is_multiple_of(3600) {
        format!("{}h", step / 3600)
    } else if step.is_multiple_of(60) {
        format!("{}m", step / 60)
    } else {
        format!("{step}s")
    }
}

impl std::fmt::Display for CalendarRule {
    /// The canonical text form: it parses back to an equal rule.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let every = self.frequency.every();
        match self.frequency {
            Frequency::Daily { .. } => f.write_str("daily")?,
            Frequency::Weekly { .. } => f.write_str("weekly")?,
            Frequency::Monthly { .. } => f.write_str("monthly")?,
        }
        if every > 1 {
            write!(f, " every {every} {}", self.frequency.unit())?;
        }
        match self.frequency {
            Frequency::Daily { .. } => {}
            Frequency::Weekly { weekdays, .. } => write!(f, " on {}", weekdays_text(weekdays))?,
            Frequency::Monthly { days, .. } => write!(f, " on {}", month_days_text(days))?,
        }
        match &self.time {
            TimeOfDay::At(times) => {
                let t: Vec<String> = times.as_slice().iter().map(|t| format_clock(*t)).collect();
                write!(f, " at {}", t.join(","))?;
            }
            &TimeOfDay::Every {
                step_seconds,
                start,
                end,
            } => {
                write!(f, " every {}", step_text(step_seconds))?;
                if (start, end) != (0, LAST_SECOND) {
                    write!(f, " between {}-{}", format_clock(start), format_clock(end))?;
                }
            }
        }
        if let Some(from) = self.effective_from {
            write!(f, " from {}", format_date(from))?;
        }
        if let Some(until) = self.expires_at {
            write!(f, " until {}", format_date(until))?;
        }
        Ok(())
    }
}

/// "1st", "2nd", "3rd", "11th", "21st", …
fn nth(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn unit_phrase(n: u32, unit: &str) -> String {
    if n == 1 {
        format!("every {unit}")
    } else {
        format!("every {n} {unit}s")
    }
}

fn time_phrase(time: &TimeOfDay) -> String {
    match time {
        TimeOfDay::At(times) => format!(
            "at {}",
            join_and(
                &times
                    .as_slice()
                    .iter()
                    .map(|t| format_clock(*t))
                    .collect::<Vec<_>>()
            )
        ),
        &TimeOfDay::Every {
            step_seconds,
            start,
            end,
        } => {
            let last = time.last();
            if last == start {
                return format!("at {}", format_clock(start));
            }
            let step = if step_seconds % 3600 == 0 {
                unit_phrase(step_seconds / 3600, "hour")
            } else if step_seconds % 60 == 0 {
                unit_phrase(step_seconds / 60, "minute")
            } else {
                unit_phrase(step_seconds, "second")
            };
            let whole_day = (start, end) == (0, LAST_SECOND) && 86_400 % step_seconds == 0;
            if whole_day {
                step
            } else {
                format!(
                    "{step} from {} to {}",
                    format_clock(start),
                    format_clock(last)
                )
            }
        }
    }
}

fn weekday_phrase(set: WeekdaySet) -> String {
    let bits = set.monday_first_bits();
    let mut items = Vec::new();
    for (a, b) in runs(7, |i| bits & (1 << i) != 0) {
        let name = |i: u32| Weekday::MONDAY_FIRST[i as usize].name().to_string();
        if b >= a + 2 {
            items.push(format!("{} through {}", name(a), name(b)));
        } else {
            items.extend((a..=b).map(name));
        }
    }
    join_and(&items)
}

fn month_day_phrase(days: MonthDays) -> String {
    let mut items = Vec::new();
    for (a, b) in runs(32, |d| days.contains_day(d as u8)) {
        if b >= a + 2 {
            items.push(format!("{} through {}", nth(a), nth(b)));
        } else {
            items.extend((a..=b).map(nth));
        }
    }
    for (ord, kind) in days.relatives() {
        let kind = match kind {
            DayKind::Named(w) => w.name(),
            DayKind::Day => "day",
            DayKind::Weekday => "weekday",
            DayKind::WeekendDay => "weekend day",
        };
        items.push(format!("{} {kind}", ord.word()));
    }
    join_and(&items)
}

/// The English description (see [`CalendarRule::describe`]).
pub(super) fn describe(rule: &CalendarRule) -> String {
    let every = rule.frequency.every();
    let anchor = rule.anchor_date();
    let (ay, am) = (anchor.year, anchor.month);
    let anchored = every > 1 && rule.effective_from.is_none();
    let days = match rule.frequency {
        Frequency::Daily { .. } if every == 1 => "every day".to_string(),
        Frequency::Daily { .. } => {
            let mut s = format!("every {every} days");
            if anchored {
                s += &format!(" counting from {}", format_date(anchor));
            }
            s
        }
        Frequency::Weekly { weekdays, .. } if every == 1 && weekdays == WeekdaySet::ALL => {
            "every day".to_string()
        }
        Frequency::Weekly { weekdays, .. } => {
            let mut s = format!("on {}", weekday_phrase(weekdays));
            if every > 1 {
                s += &format!(" of every {} week", nth(every));
            }
            if anchored {
                s += &format!(" counting from the week of {}", format_date(anchor));
            }
            s
        }
        Frequency::Monthly { days, .. } => {
            let mut s = format!("on the {} of ", month_day_phrase(days));
            if every == 1 {
                s += "every month";
            } else {
                s += &format!("every {} month", nth(every));
            }
            if anchored {
                s += &format!(" counting from {} {ay}", month_name(u32::from(am)));
            }
            s
        }
    };
    let mut out = format!("{} {days}", time_phrase(&rule.time));
    match (rule.effective_from, rule.expires_at) {
        (Some(f), Some(u)) => {
            out += &format!(
                ", starting {} and ending before {}",
                format_civil(f),
                format_civil(u)
            );
        }
        (Some(f), None) => out += &format!(", starting {}", format_civil(f)),
        (None, Some(u)) => out += &format!(", ending before {}", format_civil(u)),
        (None, None) => {}
    }
    out
}
