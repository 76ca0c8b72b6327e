//! Calendar schedules: the SQL Server Agent model of "daily / weekly / monthly, at these times or
//! every so often within a window, between these dates".
//!
//! Cron answers "which minutes match"; people planning batch jobs think in "every weekday, hourly
//! from 06:00 to 22:30", "Wednesdays and Saturdays at 09:00", "the last day of every month at
//! 20:00", "every 2 weeks on Monday". A [`CalendarRule`] says that directly, including what cron
//! cannot: intervals counted from a start date (every 2 weeks, every 3 months), relative days
//! (the second Tuesday, the last weekday, the first weekend day) and an effective/expiry range.
//!
//! # Text form
//!
//! One line, case-insensitive, words separated by whitespace (commas may touch their
//! neighbours). [`CalendarRule::parse`] reads it; [`std::fmt::Display`] prints a canonical form
//! that parses back to an equal rule.
//!
//! ```text
//! rule      := daily | weekly | monthly, then [bounds]
//! daily     := "daily"   ["every" N ("day"|"days")]     time
//! weekly    := "weekly"  ["every" N ("week"|"weeks")]   ["on"] weekdays  time
//! monthly   := "monthly" ["every" N ("month"|"months")] ["on"] monthdays time
//! time      := "at" CLOCK ("," CLOCK)*
//!            | "every" STEP ["between" CLOCK "-" CLOCK]
//! bounds    := ["from" DATE] ["until" DATE]            (either order, each at most once)
//! weekdays  := witem ("," witem)*
//! witem     := DAY | DAY "-" DAY | "weekdays" | "weekends"
//! monthdays := mitem ("," mitem)*
//! mitem     := 1..31 | A "-" B | "last" [KIND] | ORD KIND
//! ORD       := "first"|"1st" | "second"|"2nd" | "third"|"3rd" | "fourth"|"4th" | "last"
//! KIND      := DAY | "day" | "weekday" | "weekend-day"
//! DAY       := mon|tue|wed|thu|fri|sat|sun  (full names and tues/thur/thurs also accepted)
//! STEP      := N UNIT [N UNIT ...]  (e.g. 15m, 1h30m, "90 seconds"; a bare unit means 1)
//! UNIT      := s|sec|second(s) | m|min|minute(s) | h|hr|hour(s)
//! CLOCK     := HH:MM | HH:MM:SS  (00:00 - 23:59:59; one-digit hours accepted)
//! DATE      := YYYY-MM-DD ["T" CLOCK | " " CLOCK]   (negative years: -0044-03-15)
//! ```
//!
//! Examples:
//!
//! | text | meaning |
//! |---|---|
//! | `weekly on mon-fri every 1h between 06:00-22:30` | hourly 06:00 … 22:00 on weekdays |
//! | `weekly wed,sat at 09:00` | 09:00 on Wednesdays and Saturdays |
//! | `monthly on last at 20:00` | 20:00 on the last day of every month |
//! | `daily every 5m` | every 5 minutes, all day, every day |
//! | `monthly every 3 months on 2nd tue at 08:30` | second Tuesday of every 3rd month |
//! | `monthly on 1,15,last weekday at 06:00:30` | the 1st, the 15th and the last weekday |
//! | `daily every 2 days at 02:00 from 2026-01-01 until 2027-01-01` | every other day in 2026 |
//!
//! Ranges run forward and do not wrap: weekday ranges in Monday-first order (`sat-sun` is fine,
//! `fri-mon` is refused with a suggestion), day ranges ascending (`25-5` is refused).
//!
//! # Semantics
//!
//! * **Times of day.** `at` fires at each listed time. `every STEP between A-B` fires at A,
//!   A+STEP, … while ≤ B, every eligible day afresh (B is inclusive; `every 1h between
//!   06:00-22:30` fires 06:00 … 22:00). The default window is the whole day, 00:00:00–23:59:59.
//!   A window never crosses midnight: `between 22:00-06:00` is refused (use two schedules).
//! * **Anchor.** "every N days" counts days from the anchor date, "every N weeks" counts
//!   Monday-to-Sunday weeks from the week containing the anchor date, "every N months" counts
//!   calendar months from the anchor's month. The anchor is the date of `from` (effective-from),
//!   or 1970-01-01 when there is none. With N = 1 the anchor does not matter.
//! * **Bounds.** `from` is inclusive and `until` is exclusive; both are wall-clock times in the
//!   schedule's zone. A date alone means midnight at its start: `until 2099-01-01` stops before
//!   2099-01-01 begins, so the last fire is on 2098-12-31.
//! * **Days that do not exist** are skipped, never moved: day 31 does not fire in April, 29 in
//!   February of a common year. "The last day" is the way to say "end of the month".
//! * **Never-firing rules** are refused by [`CalendarRule::new`] where that is cheap to know:
//!   `from` not before `until`, a bounded rule with no fire inside its bounds, or months that
//!   never contain the named days (every 12 months on day 31 counting from April). Otherwise a
//!   search gives up after about 400 years, or at year 9999, or at the expiry, and returns `None`.
//!
//! # Search
//!
//! [`CalendarRule::next_civil`] and [`CalendarRule::prev_civil`] never walk minute by minute: the
//! time of day comes from one binary search (`at`) or one division (`every`), and the date jumps
//! straight to the next eligible day (every N days), week (every N weeks, then a bit scan over
//! its weekdays) or month (every N months, then a precomputed day mask for the month's shape).
//! Nothing allocates.

mod describe;
mod error;
mod model;
mod parse;

use crate::civil::{Civil, MAX_YEAR, MIN_YEAR, civil_from_days, days_from_civil, days_in_month};
use crate::schedule::bits::{next_bit, prev_bit};

pub use error::CalendarError;
pub use model::{
    DayKind, Frequency, MonthDays, Ordinal, TimeOfDay, TimesOfDay, Weekday, WeekdaySet,
};

use model::{DAY_SECONDS, LAST_SECOND};

/// How far a search looks before giving up, in years. A little over one Gregorian cycle, so a
/// rule that fires at least once per 400-year cycle is always found.
const HORIZON_YEARS: i16 = 401;
/// The earliest civil time there is.
const MIN_CIVIL: Civil = Civil::midnight(MIN_YEAR, 1, 1);
/// Epoch day of 9999-12-31.
const MAX_DAY: i64 = days_from_civil(MAX_YEAR, 12, 31);
/// Epoch day of -9999-01-01.
const MIN_DAY: i64 = days_from_civil(MIN_YEAR, 1, 1);
/// Epoch day of 1970-01-05, the first Monday after the epoch; weeks are numbered from it.
const MONDAY_EPOCH_DAY: i64 = 4;
/// Months in a Gregorian cycle (400 years), after which weekdays and leap years repeat.
const CYCLE_MONTHS: i64 = 4800;

/// A calendar schedule: a [`Frequency`] (which days), a [`TimeOfDay`] (when in those days) and an
/// optional effective range, all in wall-clock time.
///
/// Only [`CalendarRule::new`] and the parser build one, so every value is valid and, where that
/// is cheap to decide, can fire (see the module docs for what "cheap" covers). The zone layer
/// turns the civil times it matches into instants.
///
/// "Every N" counts from an anchor: the date of `effective_from`, or 1970-01-01 when there is
/// none. Days are counted from that date, weeks (Monday to Sunday) from the week containing it,
/// months from its month. Without `effective_from`, "every 2 weeks" therefore fires in the weeks
/// of 1970-01-05, 1970-01-19, …, which is stable across restarts and nodes but arbitrary; give
/// `effective_from` to choose the phase.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CalendarRule {
    frequency: Frequency,
    time: TimeOfDay,
    effective_from: Option<Civil>,
    expires_at: Option<Civil>,
    /// N of every N, widened once so the search does no conversions.
    every: i64,
    /// Epoch day of the anchor date.
    anchor_day: i64,
    /// Week number (from [`MONDAY_EPOCH_DAY`]) of the anchor date.
    anchor_week: i64,
    /// Month number (`year * 12 + month - 1`) of the anchor date.
    anchor_month: i64,
    /// Weekly: the weekdays in Monday-first bit order.
    week_bits: u8,
    /// Monthly: the matching days for each (weekday of the 1st, month length - 28).
    month_masks: [[u32; 4]; 7],
}

impl CalendarRule {
    /// Builds and checks a rule.
    ///
    /// `effective_from` is inclusive and also anchors "every N" (see the type's docs);
    /// `expires_at` is exclusive. Refuses an interval of 0, an empty weekday or day set, an
    /// invalid [`TimeOfDay::Every`] (step outside 1 s..24 h, a time past 23:59:59, a window
    /// ending before it starts), `effective_from >= expires_at`, and rules that provably never
    /// fire: months that never hold the named days, or no fire between the bounds.
    pub fn new(
        frequency: Frequency,
        time: TimeOfDay,
        effective_from: Option<Civil>,
        expires_at: Option<Civil>,
    ) -> Result<CalendarRule, CalendarError> {
        let every = frequency.every();
        if every == 0 {
            return Err(CalendarError::Interval {
                found: "0".to_string(),
                unit: frequency.unit(),
            });
        }
        match frequency {
            Frequency::Weekly { weekdays, .. } if weekdays.is_empty() => {
                return Err(CalendarError::NoWeekdays);
            }
            Frequency::Monthly { days, .. } if days.is_empty() => {
                return Err(CalendarError::NoMonthDays);
            }
            _ => {}
        }
        time.validate()?;
        if let (Some(from), Some(until)) = (effective_from, expires_at)
            && from >= until
        {
            return Err(CalendarError::NeverFires {
                reason: format!(
                    "it expires at {} (exclusive), which is not after it takes effect at {}; move \"until\" later or \"from\" earlier",
                    describe::format_civil(until),
                    describe::format_civil(from)
                ),
            });
        }
        let anchor = effective_from.map_or(0, Civil::epoch_day);
        let (ay, am, _) = civil_from_days(anchor);
        let mut month_masks = [[0u32; 4]; 7];
        let mut week_bits = 0;
        match frequency {
            Frequency::Monthly { days, .. } => {
                for (first, row) in month_masks.iter_mut().enumerate() {
                    for (extra, mask) in row.iter_mut().enumerate() {
                        *mask = days.mask(first as u8, 28 + extra as u8);
                    }
                }
            }
            Frequency::Weekly { weekdays, .. } => week_bits = weekdays.monday_first_bits(),
            Frequency::Daily { .. } => {}
        }
        let rule = CalendarRule {
            frequency,
            time,
            effective_from,
            expires_at,
            every: i64::from(every),
            anchor_day: anchor,
            anchor_week: (anchor - MONDAY_EPOCH_DAY).div_euclid(7),
            anchor_month: i64::from(ay) * 12 + i64::from(am) - 1,
            week_bits,
            month_masks,
        };
        rule.check_months_fire()?;
        rule.check_fires_within_bounds()?;
        Ok(rule)
    }

    /// Parses the text form (see the module docs for the grammar).
    pub fn parse(text: &str) -> Result<CalendarRule, CalendarError> {
        parse::parse(text)
    }

    /// Which days the rule fires on.
    pub fn frequency(&self) -> &Frequency {
        &self.frequency
    }

    /// When in those days it fires.
    pub fn time(&self) -> &TimeOfDay {
        &self.time
    }

    /// The first moment (wall clock, inclusive) the rule may fire; also the anchor of "every N".
    pub fn effective_from(&self) -> Option<Civil> {
        self.effective_from
    }

    /// The moment (wall clock, exclusive) from which the rule no longer fires.
    pub fn expires_at(&self) -> Option<Civil> {
        self.expires_at
    }

    /// Midnight of the date "every N" counts from: the date of
    /// [`CalendarRule::effective_from`] (its time of day only bounds the first fire), or
    /// 1970-01-01 without one.
    pub fn anchor_date(&self) -> Civil {
        let (y, m, d) = civil_from_days(self.anchor_day);
        Civil::midnight(y, m, d)
    }

    /// Whether the rule reads as "every so often" ([`TimeOfDay::Every`]) rather than "at fixed
    /// times of day". The zone layer lets interval-like rules follow elapsed time through a DST
    /// fold (firing in both passes) and fires fixed-time rules once.
    pub fn is_interval_like(&self) -> bool {
        matches!(self.time, TimeOfDay::Every { .. })
    }

    /// Whether the rule fires at civil time `c` (within its bounds, on an eligible day, at one of
    /// its times). Allocation-free, constant time but for a binary search over `at` times.
    pub fn matches(&self, c: Civil) -> bool {
        if self.effective_from.is_some_and(|f| c < f) || self.expires_at.is_some_and(|u| c >= u) {
            return false;
        }
        self.day_matches(c.epoch_day()) && self.time.contains(c.second_of_day())
    }

    /// A plain-English description without the zone, e.g. `every hour from 06:00 to 22:00 on
    /// Monday through Friday` or `at 20:00 on the last day of every month`, mentioning the
    /// effective range when set.
    pub fn describe(&self) -> String {
        describe::describe(self)
    }

    /// The first fire at or after `from`, or `None` when there is none before the expiry, year
    /// 9999 ends, or ~400 years after `from` (the search gives up there: its work is bounded).
    pub fn next_civil(&self, from: Civil) -> Option<Civil> {
        let start = match self.effective_from {
            Some(f) if f > from => f,
            _ => from,
        };
        let horizon = start.year.saturating_add(HORIZON_YEARS).min(MAX_YEAR);
        let mut last_day = days_from_civil(horizon, 12, 31);
        if let Some(until) = self.expires_at {
            if start >= until {
                return None;
            }
            last_day = last_day.min(until.epoch_day());
        }
        let c = self.search_next(start, last_day)?;
        match self.expires_at {
            Some(until) if c >= until => None,
            _ => Some(c),
        }
    }

    /// The last fire at or before `from`, or `None` when there is none after the effective-from
    /// time, year -9999 starts, or ~400 years before `from` (bounded like
    /// [`CalendarRule::next_civil`]).
    pub fn prev_civil(&self, from: Civil) -> Option<Civil> {
        let mut end = from;
        if let Some(until) = self.expires_at
            && until <= from
        {
            if until == MIN_CIVIL {
                return None;
            }
            end = until.add_seconds(-1);
        }
        let horizon = end.year.saturating_sub(HORIZON_YEARS).max(MIN_YEAR);
        let mut first_day = days_from_civil(horizon, 1, 1);
        if let Some(f) = self.effective_from {
            if end < f {
                return None;
            }
            first_day = first_day.max(f.epoch_day());
        }
        let c = self.search_prev(end, first_day)?;
        match self.effective_from {
            Some(f) if c < f => None,
            _ => Some(c),
        }
    }

    /// The first fire at or after `from` on a day up to `last_day`, ignoring the bounds.
    fn search_next(&self, from: Civil, last_day: i64) -> Option<Civil> {
        let mut day = from.epoch_day();
        let mut sod = from.second_of_day();
        loop {
            let d = self.next_day(day, last_day)?;
            if d != day {
                day = d;
                sod = 0;
            }
            if let Some(t) = self.time.next(sod) {
                return Some(civil_at(day, t));
            }
            day += 1;
            sod = 0;
        }
    }

    /// The last fire at or before `from` on a day from `first_day`, ignoring the bounds.
    fn search_prev(&self, from: Civil, first_day: i64) -> Option<Civil> {
        let mut day = from.epoch_day();
        let mut sod = from.second_of_day();
        loop {
            let d = self.prev_day(day, first_day)?;
            if d != day {
                day = d;
                sod = LAST_SECOND;
            }
            if let Some(t) = self.time.prev(sod) {
                return Some(civil_at(day, t));
            }
            day -= 1;
            sod = LAST_SECOND;
        }
    }

    /// Whether the date of epoch day `day` is eligible.
    fn day_matches(&self, day: i64) -> bool {
        match self.frequency {
            Frequency::Daily { .. } => (day - self.anchor_day).rem_euclid(self.every) == 0,
            Frequency::Weekly { .. } => {
                let rel = day - MONDAY_EPOCH_DAY;
                (rel.div_euclid(7) - self.anchor_week).rem_euclid(self.every) == 0
                    && self.week_bits & (1 << rel.rem_euclid(7)) != 0
            }
            Frequency::Monthly { .. } => {
                let (y, m, d) = civil_from_days(day);
                let month = i64::from(y) * 12 + i64::from(m) - 1;
                (month - self.anchor_month).rem_euclid(self.every) == 0
                    && self.month_mask(y, m) & (1 << d) != 0
            }
        }
    }

    /// The first eligible day at or after `day`, if it is at most `last_day`. Every eligible day
    /// has at least one fire (a time list is never empty, a window always holds its start), so
    /// the caller moves on at most once per eligible day.
    fn next_day(&self, day: i64, last_day: i64) -> Option<i64> {
        if day > last_day {
            return None;
        }
        let n = self.every;
        let found = match self.frequency {
            Frequency::Daily { .. } => {
                let r = (day - self.anchor_day).rem_euclid(n);
                if r == 0 { day } else { day + (n - r) }
            }
            Frequency::Weekly { .. } => {
                let rel = day - MONDAY_EPOCH_DAY;
                let mut week = rel.div_euclid(7);
                let mut pos = rel.rem_euclid(7) as u32;
                loop {
                    let r = (week - self.anchor_week).rem_euclid(n);
                    if r != 0 {
                        week += n - r;
                        pos = 0;
                    }
                    let monday = MONDAY_EPOCH_DAY + week * 7;
                    if monday > last_day {
                        return None;
                    }
                    match next_bit(u64::from(self.week_bits), pos) {
                        Some(p) => break monday + i64::from(p),
                        None => {
                            week += 1;
                            pos = 0;
                        }
                    }
                }
            }
            Frequency::Monthly { .. } => {
                let (y, m, d) = civil_from_days(day);
                let (ly, lm, _) = civil_from_days(last_day);
                let last_month = i64::from(ly) * 12 + i64::from(lm) - 1;
                let mut month = i64::from(y) * 12 + i64::from(m) - 1;
                let mut d = u32::from(d);
                loop {
                    let r = (month - self.anchor_month).rem_euclid(n);
                    if r != 0 {
                        month += n - r;
                        d = 1;
                    }
                    if month > last_month {
                        return None;
                    }
                    let (y, m) = split_month(month);
                    match next_bit(u64::from(self.month_mask(y, m)), d) {
                        Some(nd) => break days_from_civil(y, m, nd as u8),
                        None => {
                            month += 1;
                            d = 1;
                        }
                    }
                }
            }
        };
        (found <= last_day).then_some(found)
    }

    /// The last eligible day at or before `day`, if it is at least `first_day`.
    fn prev_day(&self, day: i64, first_day: i64) -> Option<i64> {
        if day < first_day {
            return None;
        }
        let n = self.every;
        let found = match self.frequency {
            Frequency::Daily { .. } => day - (day - self.anchor_day).rem_euclid(n),
            Frequency::Weekly { .. } => {
                let rel = day - MONDAY_EPOCH_DAY;
                let mut week = rel.div_euclid(7);
                let mut pos = rel.rem_euclid(7) as i32;
                loop {
                    let r = (week - self.anchor_week).rem_euclid(n);
                    if r != 0 {
                        week -= r;
                        pos = 6;
                    }
                    let monday = MONDAY_EPOCH_DAY + week * 7;
                    if monday + 6 < first_day {
                        return None;
                    }
                    match prev_bit(u64::from(self.week_bits), pos) {
                        Some(p) => break monday + i64::from(p),
                        None => {
                            week -= 1;
                            pos = 6;
                        }
                    }
                }
            }
            Frequency::Monthly { .. } => {
                let (y, m, d) = civil_from_days(day);
                let (fy, fm, _) = civil_from_days(first_day);
                let first_month = i64::from(fy) * 12 + i64::from(fm) - 1;
                let mut month = i64::from(y) * 12 + i64::from(m) - 1;
                let mut d = i32::from(d);
                loop {
                    let r = (month - self.anchor_month).rem_euclid(n);
                    if r != 0 {
                        month -= r;
                        d = 31;
                    }
                    if month < first_month {
                        return None;
                    }
                    let (y, m) = split_month(month);
                    match prev_bit(u64::from(self.month_mask(y, m)), d) {
                        Some(pd) if pd >= 1 => break days_from_civil(y, m, pd as u8),
                        _ => {
                            month -= 1;
                            d = 31;
                        }
                    }
                }
            }
        };
        (found >= first_day).then_some(found)
    }

    /// The matching days (bits 1..=31) of a month.
    #[inline]
    fn month_mask(&self, year: i16, month: u8) -> u32 {
        let first = crate::civil::weekday(year, month, 1);
        let dim = days_in_month(year, month);
        self.month_masks[usize::from(first)][usize::from(dim - 28)]
    }

    /// Refuses a monthly rule whose visited months can never hold any named day. The calendar
    /// repeats every 400 years (4 800 months, a whole number of weeks), and the months visited
    /// are those congruent to the anchor modulo gcd(N, 4 800), so checking one cycle decides it.
    fn check_months_fire(&self) -> Result<(), CalendarError> {
        let Frequency::Monthly { every, days } = self.frequency else {
            return Ok(());
        };
        let g = gcd(i64::from(every), CYCLE_MONTHS);
        let start = self.anchor_month.rem_euclid(g);
        // Month numbers from year 2000; any cycle would do.
        let base = 2000 * 12;
        let fires = (start..CYCLE_MONTHS).step_by(g as usize).any(|i| {
            let (y, m) = split_month(base + i);
            self.month_mask(y, m) != 0
        });
        if fires {
            return Ok(());
        }
        let anchor = self.anchor_date();
        let (ay, am) = (anchor.year, anchor.month);
        let listed: Vec<String> = days.days().map(|d| d.to_string()).collect();
        Err(CalendarError::NeverFires {
            reason: format!(
                "every {every} months counting from {}-{am:02} it only visits months without day {}; pick days every month has, such as \"last\", or another interval or \"from\" date",
                describe::format_year(ay),
                crate::schedule::describe::join_and(&listed)
            ),
        })
    }

    /// Refuses a rule with an expiry that has no fire between its bounds. Cheap: the search
    /// moves at most once per eligible day, week or month, and every eligible day fires.
    fn check_fires_within_bounds(&self) -> Result<(), CalendarError> {
        let Some(until) = self.expires_at else {
            return Ok(());
        };
        let start = self.effective_from.unwrap_or(MIN_CIVIL);
        let last_day = until.epoch_day().min(MAX_DAY);
        match self.search_next(start, last_day) {
            Some(c) if c < until => Ok(()),
            _ => Err(CalendarError::NeverFires {
                reason: format!(
                    "no time between {} and {} (exclusive) matches; widen the range or change the days or times",
                    self.effective_from
                        .map_or_else(|| "the start of time".to_string(), describe::format_civil),
                    describe::format_civil(until)
                ),
            }),
        }
    }
}

impl std::fmt::Debug for CalendarRule {
    /// The defining parts only; the precomputed search tables follow from them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CalendarRule")
            .field("frequency", &self.frequency)
            .field("time", &self.time)
            .field("effective_from", &self.effective_from)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl crate::schedule::CivilPattern for CalendarRule {
    fn next_civil(&self, from: Civil) -> Option<Civil> {
        CalendarRule::next_civil(self, from)
    }
    fn prev_civil(&self, from: Civil) -> Option<Civil> {
        CalendarRule::prev_civil(self, from)
    }
    fn is_interval_like(&self) -> bool {
        CalendarRule::is_interval_like(self)
    }
}

impl std::str::FromStr for CalendarRule {
    type Err = CalendarError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CalendarRule::parse(s)
    }
}

/// The civil time at second `sod` of epoch day `day` (which the search keeps within the
/// representable years).
#[inline]
fn civil_at(day: i64, sod: u32) -> Civil {
    debug_assert!((MIN_DAY..=MAX_DAY).contains(&day) && sod < DAY_SECONDS);
    let (year, month, day) = civil_from_days(day);
    Civil {
        year,
        month,
        day,
        hour: (sod / 3600) as u8,
        minute: (sod / 60 % 60) as u8,
        second: (sod % 60) as u8,
    }
}

/// Year and month (1..=12) of a month number `year * 12 + month - 1`.
#[inline]
fn split_month(month: i64) -> (i16, u8) {
    (
        month.div_euclid(12) as i16,
        (month.rem_euclid(12) + 1) as u8,
    )
}

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests;
