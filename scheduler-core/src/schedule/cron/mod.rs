//! Cron expressions: parsed once into bit sets, searched field by field.
//!
//! # Syntax
//!
//! | fields | layout |
//! |---|---|
//! | 5 | `minute hour day-of-month month day-of-week` (seconds are `0`) |
//! | 6 | `second minute hour day-of-month month day-of-week` |
//! | 7 | `second minute hour day-of-month month day-of-week year` |
//!
//! Each field is a comma-separated list of items: `*`, `a`, `a-b`, `*/n`, `a-b/n`, `a/n`
//! (from `a` to the field's maximum in steps of `n`). Months accept `JAN`–`DEC`, weekdays
//! `SUN`–`SAT` (case-insensitive); weekday `0` and `7` are both Sunday. `?` standing alone is
//! `*` in any field (as in Cronos); it cannot be a list item or carry a step.
//!
//! A range whose start is after its end wraps around, as in Cronos and Quartz: hours `22-2` are
//! 22, 23, 0, 1 and 2, weekdays `FRI-MON` Friday to Monday, months `NOV-FEB` November to
//! February, days `28-3` the 28th to the month's end and the 1st to the 3rd. A step counts on
//! across the wrap (`22-2/2` is 22, 0, 2). The week runs Sunday (0) to Saturday (6), so a weekday
//! range starting at 7 starts on that Sunday (`7-2` is `0-2`). Years do not wrap: a year range
//! written backwards is refused. A wrapped range is only a set of values: `0 22-2 * * MON` fires
//! on Monday from 00:00 to 02:00 and from 22:00 to 23:00, not into Tuesday morning.
//!
//! Day-of-month also accepts `L` (last day), `L-n` (n days before the last day), `nW` (the
//! weekday, Monday–Friday, nearest to day n without leaving the month), `LW` (the last weekday
//! of the month) and `L-nW` (the weekday nearest the n-th day before the last, by the `nW` rule;
//! `L-0W` is `LW`). Day-of-week also accepts `n#k` (the k-th weekday n of the month, k = 1..5)
//! and `nL` (the last weekday n of the month). Years run 1970–2199. Macros: `@yearly`/
//! `@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`, `@every_minute`,
//! `@every_second`.
//!
//! # Day-of-month and day-of-week
//!
//! When both are restricted (neither is `*` nor `?`) a day matches if **either** matches, as in
//! Vixie cron and POSIX ([`DayMatch::Or`], the default); [`DayMatch::And`] requires both, as the
//! `cron` crate and Quartz-style tools do. Unlike Vixie cron, a field written `*/2` counts as
//! restricted: only a bare `*` or `?` means "no restriction".
//!
//! # Days that do not exist
//!
//! A day-of-month that a month lacks (31 in April, 30 in February) simply does not match in that
//! month; `nW` for such a day does not fire either. An expression that can never fire in any
//! year (`0 0 30 2 *`) is refused at parse time; one restricted by a year field returns no next
//! fire once its years run out, after bounded work.

mod describe;
mod parse;

use crate::civil::{Civil, MAX_YEAR, MIN_YEAR, days_in_month, weekday};
use crate::schedule::bits::{next_bit, prev_bit};

pub use parse::{CronError, CronField};

/// Smallest year a year field may name.
pub const MIN_CRON_YEAR: u32 = 1970;
/// Largest year a year field may name.
pub const MAX_CRON_YEAR: u32 = 2199;

/// How day-of-month and day-of-week combine when both are restricted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DayMatch {
    /// A day matches when either field matches (Vixie cron, POSIX). The default.
    #[default]
    Or,
    /// A day matches only when both fields match.
    And,
}

/// Parse options for [`CronExpr::parse_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CronOptions {
    /// How day-of-month and day-of-week combine when both are restricted.
    pub day_match: DayMatch,
}

/// The day part of an expression, precomputed so that the days of any month are a handful of
/// bit operations.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct DaySpec {
    /// Day-of-month is `*` or `?`.
    dom_any: bool,
    /// Day-of-week is `*` or `?`.
    dow_any: bool,
    day_match: DayMatch,
    /// Explicit days of the month, bits 1..=31.
    dom: u32,
    /// `L-k` items: bit k set means "k days before the last day" (bit 0 is plain `L`).
    dom_last_offsets: u32,
    /// `nW` items, bits 1..=31.
    dom_nearest_weekday: u32,
    /// `L-kW` items: bit k set means "the weekday nearest k days before the last day" (bit 0 is
    /// `LW`, the last weekday).
    dom_last_nearest: u32,
    /// Plain weekdays and `n#k` items as day bits, indexed by the weekday of the month's 1st.
    dow_by_first: [u32; 7],
    /// `nL` items: bit n set means "the last weekday n of the month".
    dow_last: u8,
}

/// A parsed cron expression.
///
/// Only [`CronExpr::parse`] and [`CronExpr::parse_with`] make one, so a value is always valid.
/// Searching ([`CronExpr::next_civil`]) neither allocates nor walks minute by minute: it jumps
/// to the next allowed value of each field in turn, coarsest first.
///
/// Equality compares what the expression means, not how it was spelled: `0 0 * * MON-FRI`
/// equals `0 0 * * 1-5` and `@daily` equals `0 0 * * *`.
#[derive(Clone, Debug)]
pub struct CronExpr {
    seconds: u64,
    minutes: u64,
    hours: u64,
    /// Months, bits 1..=12.
    months: u64,
    /// Years as offsets from [`MIN_CRON_YEAR`]; `None` when there is no year field or it is `*`.
    years: Option<[u64; 4]>,
    days: DaySpec,
    interval_like: bool,
    source: Box<str>,
}

impl CronExpr {
    /// Parses an expression with the default options (day fields combine with OR).
    pub fn parse(expr: &str) -> Result<Self, CronError> {
        Self::parse_with(expr, CronOptions::default())
    }

    /// Parses an expression with explicit options.
    pub fn parse_with(expr: &str, options: CronOptions) -> Result<Self, CronError> {
        parse::parse(expr, options)
    }

    /// The expression as written (trimmed, whitespace collapsed).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// How the day fields combine.
    pub fn day_match(&self) -> DayMatch {
        self.days.day_match
    }

    /// Whether the expression reads as "every so often" rather than "at a fixed time of day":
    /// an item of its second, minute or hour field is `*`, `?`, a range (`1-9`, `22-2`) or a
    /// step (`*/n`, `a/n`, `a-b/n`, whatever `n`). A value or a list of values (`30`, `8,17`)
    /// is fixed-time; the day, month and year fields never count. This is Cronos's rule, decided
    /// by how the fields are written: `1-1` counts as a range. Interval-like schedules follow
    /// elapsed time through a daylight-saving fold (they fire in both passes by default);
    /// fixed-time ones fire once.
    pub fn is_interval_like(&self) -> bool {
        self.interval_like
    }

    /// Whether a civil time matches every field.
    pub fn matches(&self, c: Civil) -> bool {
        self.year_ok(c.year)
            && self.months & (1 << c.month) != 0
            && self.day_mask(c.year, c.month) & (1 << c.day) != 0
            && self.hours & (1 << c.hour) != 0
            && self.minutes & (1 << c.minute) != 0
            && self.seconds & (1 << c.second) != 0
    }

    /// A human description such as `at 02:00 on the last day of every month`.
    pub fn describe(&self) -> String {
        describe::describe(self)
    }

    /// The first matching civil time at or after `from`, or `None` when there is none before
    /// the year 9999 (or the year field's last year). Bounded: at most ~400 years of months are
    /// visited, and only when no earlier year can match.
    pub fn next_civil(&self, from: Civil) -> Option<Civil> {
        let (mut y, mut mo, mut d) = (from.year, u32::from(from.month), u32::from(from.day));
        let (mut h, mut mi, mut s) = (
            u32::from(from.hour),
            u32::from(from.minute),
            u32::from(from.second),
        );
        let year_limit = from.year.saturating_add(401).min(MAX_YEAR);
        loop {
            if y > year_limit {
                return None;
            }
            if !self.year_ok(y) {
                y = self.next_year(y)?;
                (mo, d, h, mi, s) = (1, 1, 0, 0, 0);
                continue;
            }
            match next_bit(self.months, mo) {
                Some(m) if m <= 12 => {
                    if m != mo {
                        (mo, d, h, mi, s) = (m, 1, 0, 0, 0);
                    }
                }
                _ => {
                    y += 1;
                    (mo, d, h, mi, s) = (1, 1, 0, 0, 0);
                    continue;
                }
            }
            let days = self.day_mask(y, mo as u8);
            match next_bit(u64::from(days), d) {
                Some(nd) => {
                    if nd != d {
                        (d, h, mi, s) = (nd, 0, 0, 0);
                    }
                }
                None => {
                    (mo, d, h, mi, s) = (mo + 1, 1, 0, 0, 0);
                    continue;
                }
            }
            match next_bit(self.hours, h) {
                Some(nh) if nh < 24 => {
                    if nh != h {
                        (h, mi, s) = (nh, 0, 0);
                    }
                }
                _ => {
                    (d, h, mi, s) = (d + 1, 0, 0, 0);
                    continue;
                }
            }
            match next_bit(self.minutes, mi) {
                Some(nm) if nm < 60 => {
                    if nm != mi {
                        (mi, s) = (nm, 0);
                    }
                }
                _ => {
                    (h, mi, s) = (h + 1, 0, 0);
                    continue;
                }
            }
            match next_bit(self.seconds, s) {
                Some(ns) if ns < 60 => {
                    return Some(Civil {
                        year: y,
                        month: mo as u8,
                        day: d as u8,
                        hour: h as u8,
                        minute: mi as u8,
                        second: ns as u8,
                    });
                }
                _ => {
                    (mi, s) = (mi + 1, 0);
                    continue;
                }
            }
        }
    }

    /// The last matching civil time at or before `from`, or `None` when there is none after
    /// the year -9999 (or before the year field's first year). Bounded like
    /// [`CronExpr::next_civil`].
    pub fn prev_civil(&self, from: Civil) -> Option<Civil> {
        let (mut y, mut mo, mut d) = (from.year, i32::from(from.month), i32::from(from.day));
        let (mut h, mut mi, mut s) = (
            i32::from(from.hour),
            i32::from(from.minute),
            i32::from(from.second),
        );
        let year_limit = from.year.saturating_sub(401).max(MIN_YEAR);
        loop {
            if y < year_limit {
                return None;
            }
            if !self.year_ok(y) {
                y = self.prev_year(y)?;
                (mo, d, h, mi, s) = (12, 31, 23, 59, 59);
                continue;
            }
            match prev_bit(self.months, mo) {
                Some(m) if m >= 1 => {
                    let m = m as i32;
                    if m != mo {
                        (mo, d, h, mi, s) = (m, 31, 23, 59, 59);
                    }
                }
                _ => {
                    y -= 1;
                    (mo, d, h, mi, s) = (12, 31, 23, 59, 59);
                    continue;
                }
            }
            let dim = i32::from(days_in_month(y, mo as u8));
            if d > dim {
                (d, h, mi, s) = (dim, 23, 59, 59);
            }
            let days = self.day_mask(y, mo as u8);
            match prev_bit(u64::from(days), d) {
                Some(nd) if nd >= 1 => {
                    let nd = nd as i32;
                    if nd != d {
                        (d, h, mi, s) = (nd, 23, 59, 59);
                    }
                }
                _ => {
                    (mo, d, h, mi, s) = (mo - 1, 31, 23, 59, 59);
                    continue;
                }
            }
            match prev_bit(self.hours, h) {
                Some(nh) => {
                    let nh = nh as i32;
                    if nh != h {
                        (h, mi, s) = (nh, 59, 59);
                    }
                }
                None => {
                    (d, h, mi, s) = (d - 1, 23, 59, 59);
                    continue;
                }
            }
            match prev_bit(self.minutes, mi) {
                Some(nm) => {
                    let nm = nm as i32;
                    if nm != mi {
                        (mi, s) = (nm, 59);
                    }
                }
                None => {
                    (h, mi, s) = (h - 1, 59, 59);
                    continue;
                }
            }
            match prev_bit(self.seconds, s) {
                Some(ns) => {
                    return Some(Civil {
                        year: y,
                        month: mo as u8,
                        day: d as u8,
                        hour: h as u8,
                        minute: mi as u8,
                        second: ns as u8,
                    });
                }
                None => {
                    (mi, s) = (mi - 1, 59);
                    continue;
                }
            }
        }
    }

    #[inline]
    fn year_ok(&self, y: i16) -> bool {
        match &self.years {
            None => true,
            Some(bits) => {
                let i = i32::from(y) - MIN_CRON_YEAR as i32;
                (0..256).contains(&i) && bits[(i / 64) as usize] & (1 << (i % 64)) != 0
            }
        }
    }

    fn next_year(&self, y: i16) -> Option<i16> {
        let bits = self.years.as_ref()?;
        let start = (i32::from(y) - MIN_CRON_YEAR as i32).max(0);
        (start..256)
            .find(|i| bits[(*i / 64) as usize] & (1 << (i % 64)) != 0)
            .map(|i| (i + MIN_CRON_YEAR as i32) as i16)
    }

    fn prev_year(&self, y: i16) -> Option<i16> {
        let bits = self.years.as_ref()?;
        let start = (i32::from(y) - MIN_CRON_YEAR as i32).min(255);
        (0..=start)
            .rev()
            .find(|i| bits[(*i / 64) as usize] & (1 << (i % 64)) != 0)
            .map(|i| (i + MIN_CRON_YEAR as i32) as i16)
    }

    /// The matching days of a month as bits 1..=31.
    #[inline]
    fn day_mask(&self, year: i16, month: u8) -> u32 {
        let dim = days_in_month(year, month);
        let valid = (u32::MAX >> (31 - u32::from(dim))) & !1;
        let ds = &self.days;
        if ds.dom_any && ds.dow_any {
            return valid;
        }
        let first = weekday(year, month, 1);
        let dom = || dom_days(ds, dim, first) & valid;
        let dow = || dow_days(ds, dim, first) & valid;
        match (ds.dom_any, ds.dow_any) {
            (true, _) => dow(),
            (_, true) => dom(),
            _ => match ds.day_match {
                DayMatch::Or => dom() | dow(),
                DayMatch::And => dom() & dow(),
            },
        }
    }
}

impl CronExpr {
    fn key(&self) -> impl PartialEq + std::hash::Hash + '_ {
        (
            self.seconds,
            self.minutes,
            self.hours,
            self.months,
            self.years,
            &self.days,
            self.interval_like,
        )
    }
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for CronExpr {}

impl std::hash::Hash for CronExpr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl std::fmt::Display for CronExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for CronExpr {
    type Err = CronError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Day-of-month matches of one month, before masking with the month's valid days.
#[inline]
fn dom_days(ds: &DaySpec, dim: u8, first: u8) -> u32 {
    let mut days = ds.dom;
    if ds.dom_last_offsets != 0 {
        let mut offs = ds.dom_last_offsets;
        while offs != 0 {
            let k = offs.trailing_zeros();
            offs &= offs - 1;
            if k < u32::from(dim) {
                days |= 1 << (u32::from(dim) - k);
            }
        }
    }
    if ds.dom_nearest_weekday != 0 {
        let mut targets = ds.dom_nearest_weekday;
        while targets != 0 {
            let t = targets.trailing_zeros() as u8;
            targets &= targets - 1;
            if let Some(d) = nearest_weekday(t, dim, first) {
                days |= 1 << d;
            }
        }
    }
    if ds.dom_last_nearest != 0 {
        let mut offs = ds.dom_last_nearest;
        while offs != 0 {
            let k = offs.trailing_zeros() as u8;
            offs &= offs - 1;
            // Like `L-k`, a month shorter than k + 1 days has no such day.
            if k < dim
                && let Some(d) = nearest_weekday(dim - k, dim, first)
            {
                days |= 1 << d;
            }
        }
    }
    days
}

/// Day-of-week matches of one month, before masking with the month's valid days.
#[inline]
fn dow_days(ds: &DaySpec, dim: u8, first: u8) -> u32 {
    let mut days = ds.dow_by_first[first as usize];
    if ds.dow_last != 0 {
        let mut wds = ds.dow_last;
        while wds != 0 {
            let wd = wds.trailing_zeros() as u8;
            wds &= wds - 1;
            let first_of = 1 + (wd + 7 - first) % 7;
            let last = first_of + 7 * ((dim - first_of) / 7);
            days |= 1 << last;
        }
    }
    days
}

/// The weekday (Mon–Fri) nearest to day `target` within the month (Quartz's `W`): Saturday
/// moves back to Friday unless that leaves the month (then forward to Monday the 3rd), Sunday
/// moves forward to Monday unless that leaves the month (then back to Friday). `None` when the
/// month has no such day.
fn nearest_weekday(target: u8, dim: u8, first: u8) -> Option<u8> {
    if target > dim {
        return None;
    }
    let wd = (first + target - 1) % 7;
    Some(match wd {
        6 if target == 1 => 3,
        6 => target - 1,
        0 if target == dim => target - 2,
        0 => target + 1,
        _ => target,
    })
}

#[cfg(test)]
mod tests;
