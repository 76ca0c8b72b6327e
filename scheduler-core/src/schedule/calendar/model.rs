//! The parts a calendar rule is built from: weekdays, days of the month, times of day and
//! frequencies. All of them are plain values (bit sets or a sorted slice) so that evaluating a
//! rule never allocates.

use super::CalendarError;
use crate::schedule::describe::WEEKDAYS;

/// Seconds in a day.
pub(crate) const DAY_SECONDS: u32 = 86_400;
/// The last second of a day, the default end of an [`TimeOfDay::Every`] window.
pub(crate) const LAST_SECOND: u32 = DAY_SECONDS - 1;

/// A day of the week, numbered as [`crate::civil::Civil::weekday`] numbers them (0 = Sunday), so
/// a weekday and a civil date compare without translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Weekday {
    /// Sunday (0).
    Sunday = 0,
    /// Monday (1).
    Monday = 1,
    /// Tuesday (2).
    Tuesday = 2,
    /// Wednesday (3).
    Wednesday = 3,
    /// Thursday (4).
    Thursday = 4,
    /// Friday (5).
    Friday = 5,
    /// Saturday (6).
    Saturday = 6,
}

impl Weekday {
    /// The seven days in the order a calendar week runs here: Monday first, Sunday last. Weekday
    /// ranges (`mon-fri`, `sat-sun`) and "every N weeks" both use this order, as ISO 8601 and
    /// SQL Server Agent do.
    pub const MONDAY_FIRST: [Weekday; 7] = [
        Weekday::Monday,
        Weekday::Tuesday,
        Weekday::Wednesday,
        Weekday::Thursday,
        Weekday::Friday,
        Weekday::Saturday,
        Weekday::Sunday,
    ];

    /// The weekday with cron/[`crate::civil::Civil::weekday`] number `n` (0 = Sunday … 6 =
    /// Saturday), or `None` for 7 and above (unlike cron, 7 is not a second Sunday: a structured
    /// rule should not have two spellings for one day).
    pub const fn from_number(n: u8) -> Option<Weekday> {
        Some(match n {
            0 => Weekday::Sunday,
            1 => Weekday::Monday,
            2 => Weekday::Tuesday,
            3 => Weekday::Wednesday,
            4 => Weekday::Thursday,
            5 => Weekday::Friday,
            6 => Weekday::Saturday,
            _ => return None,
        })
    }

    /// The number of this weekday, 0 = Sunday … 6 = Saturday.
    pub const fn number(self) -> u8 {
        self as u8
    }

    /// The English name, e.g. `Monday`, as used in descriptions.
    pub fn name(self) -> &'static str {
        WEEKDAYS[self as usize]
    }

    /// The three-letter lowercase abbreviation used by the text form, e.g. `mon`.
    pub const fn abbreviation(self) -> &'static str {
        match self {
            Weekday::Sunday => "sun",
            Weekday::Monday => "mon",
            Weekday::Tuesday => "tue",
            Weekday::Wednesday => "wed",
            Weekday::Thursday => "thu",
            Weekday::Friday => "fri",
            Weekday::Saturday => "sat",
        }
    }

    /// Position in a Monday-first week, Monday = 0 … Sunday = 6.
    pub(crate) const fn monday_index(self) -> u8 {
        (self as u8 + 6) % 7
    }
}

/// A set of weekdays as a 7-bit mask, bit `n` for weekday number `n` (0 = Sunday), matching
/// [`crate::civil::Civil::weekday`] so membership is a single shift.
///
/// Iteration runs Monday first (the week the rule counts in), whatever the bit order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WeekdaySet(u8);

impl WeekdaySet {
    /// No day; a weekly rule refuses it.
    pub const EMPTY: WeekdaySet = WeekdaySet(0);
    /// All seven days.
    pub const ALL: WeekdaySet = WeekdaySet(0x7f);
    /// Monday through Friday (the text form's `weekdays`).
    pub const MONDAY_TO_FRIDAY: WeekdaySet = WeekdaySet(0b0011_1110);
    /// Saturday and Sunday (the text form's `weekends`).
    pub const WEEKEND: WeekdaySet = WeekdaySet(0b0100_0001);

    /// The set with bit `n` for weekday number `n` (0 = Sunday); `None` when bit 7 is set, so a
    /// stored mask with a stray bit is refused rather than silently truncated.
    pub const fn from_bits(bits: u8) -> Option<WeekdaySet> {
        if bits & 0x80 == 0 {
            Some(WeekdaySet(bits))
        } else {
            None
        }
    }

    /// The raw mask, bit `n` for weekday number `n` (0 = Sunday). Stable: suitable for storage.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The set holding one day.
    pub const fn single(day: Weekday) -> WeekdaySet {
        WeekdaySet(1 << day as u8)
    }

    /// This set plus `day`.
    #[must_use]
    pub const fn with(self, day: Weekday) -> WeekdaySet {
        WeekdaySet(self.0 | 1 << day as u8)
    }

    /// The union of two sets.
    #[must_use]
    pub const fn union(self, other: WeekdaySet) -> WeekdaySet {
        WeekdaySet(self.0 | other.0)
    }

    /// The days from `first` to `last` inclusive in Monday-first order, or `None` when `last`
    /// comes before `first` in that order (ranges do not wrap around: `fri-mon` is refused;
    /// write `fri-sun` plus `mon`).
    pub const fn range(first: Weekday, last: Weekday) -> Option<WeekdaySet> {
        let (a, b) = (first.monday_index(), last.monday_index());
        if a > b {
            return None;
        }
        let mut bits = 0u8;
        let mut i = a;
        while i <= b {
            bits |= 1 << ((i + 1) % 7);
            i += 1;
        }
        Some(WeekdaySet(bits))
    }

    /// Whether `day` is in the set.
    pub const fn contains(self, day: Weekday) -> bool {
        self.0 & (1 << day as u8) != 0
    }

    /// Whether weekday number `n` (0 = Sunday, as [`crate::civil::Civil::weekday`] returns) is
    /// in the set; false for 7 and above.
    pub const fn contains_number(self, n: u8) -> bool {
        n < 7 && self.0 & (1 << n) != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many days the set holds.
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }

    /// The days in the set, Monday first.
    pub fn iter(self) -> impl Iterator<Item = Weekday> {
        Weekday::MONDAY_FIRST
            .into_iter()
            .filter(move |d| self.contains(*d))
    }

    /// The set as bits in Monday-first order (bit 0 = Monday … bit 6 = Sunday), the order the
    /// week search walks in.
    pub(crate) const fn monday_first_bits(self) -> u8 {
        ((self.0 >> 1) | (self.0 << 6)) & 0x7f
    }
}

impl FromIterator<Weekday> for WeekdaySet {
    fn from_iter<I: IntoIterator<Item = Weekday>>(iter: I) -> Self {
        iter.into_iter().fold(WeekdaySet::EMPTY, WeekdaySet::with)
    }
}

impl std::fmt::Debug for WeekdaySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Which occurrence in the month a relative day picks (SQL Server Agent's relative-monthly
/// "first … fourth, last"). There is deliberately no "fifth": most months lack one, and `Last`
/// says what users usually mean by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ordinal {
    /// The first occurrence.
    First,
    /// The second occurrence.
    Second,
    /// The third occurrence.
    Third,
    /// The fourth occurrence.
    Fourth,
    /// The last occurrence.
    Last,
}

impl Ordinal {
    /// All ordinals, first to last.
    pub const ALL: [Ordinal; 5] = [
        Ordinal::First,
        Ordinal::Second,
        Ordinal::Third,
        Ordinal::Fourth,
        Ordinal::Last,
    ];

    /// The word used by the text form and descriptions: `first` … `fourth`, `last`.
    pub const fn word(self) -> &'static str {
        match self {
            Ordinal::First => "first",
            Ordinal::Second => "second",
            Ordinal::Third => "third",
            Ordinal::Fourth => "fourth",
            Ordinal::Last => "last",
        }
    }

    const fn index(self) -> u32 {
        self as u32
    }
}

/// What kind of day a relative day-of-month counts (SQL Server Agent's relative-monthly
/// choices).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DayKind {
    /// One named day of the week: "the second Tuesday".
    Named(Weekday),
    /// Any day: "the last day" (the k-th day for k = 1..4 is just day k).
    Day,
    /// Monday through Friday: "the last weekday". No holiday calendar is involved.
    Weekday,
    /// Saturday or Sunday: "the first weekend day".
    WeekendDay,
}

impl DayKind {
    /// All kinds in a fixed order (named days Sunday first, then day, weekday, weekend day).
    pub const ALL: [DayKind; 10] = [
        DayKind::Named(Weekday::Sunday),
        DayKind::Named(Weekday::Monday),
        DayKind::Named(Weekday::Tuesday),
        DayKind::Named(Weekday::Wednesday),
        DayKind::Named(Weekday::Thursday),
        DayKind::Named(Weekday::Friday),
        DayKind::Named(Weekday::Saturday),
        DayKind::Day,
        DayKind::Weekday,
        DayKind::WeekendDay,
    ];

    const fn index(self) -> u32 {
        match self {
            DayKind::Named(w) => w as u32,
            DayKind::Day => 7,
            DayKind::Weekday => 8,
            DayKind::WeekendDay => 9,
        }
    }

    /// The weekdays this kind counts.
    pub const fn weekdays(self) -> WeekdaySet {
        match self {
            DayKind::Named(w) => WeekdaySet::single(w),
            DayKind::Day => WeekdaySet::ALL,
            DayKind::Weekday => WeekdaySet::MONDAY_TO_FRIDAY,
            DayKind::WeekendDay => WeekdaySet::WEEKEND,
        }
    }

    /// The word used by the text form: `mon` … `sun`, `day`, `weekday`, `weekend-day`.
    pub const fn word(self) -> &'static str {
        match self {
            DayKind::Named(w) => w.abbreviation(),
            DayKind::Day => "day",
            DayKind::Weekday => "weekday",
            DayKind::WeekendDay => "weekend-day",
        }
    }
}

/// The days of a month a monthly rule fires on: any union of explicit days 1–31 and relative
/// days ("the last day", "the last weekday", "the second Tuesday", "the first weekend day").
///
/// Stored as two bit sets (explicit days; one bit per ordinal × kind), so a value is `Copy`,
/// hashable and evaluates without allocating. The representation is canonical: "the k-th day"
/// for k = 1..4 is stored as explicit day k, so two spellings of the same days compare equal.
/// An explicit day a month lacks (31 in April, 30 in February) is skipped in that month, never
/// moved to another day; use [`MonthDays::with_last_day`] for "the end of every month".
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MonthDays {
    /// Explicit days, bits 1..=31.
    days: u32,
    /// Relative days, bit `ordinal * 10 + kind`.
    relative: u64,
}

/// Bits at days 1, 8, 15, 22 and 29: the days a weekday falls on in a month whose 1st is that
/// weekday.
const EVERY_SEVENTH: u64 = (1 << 1) | (1 << 8) | (1 << 15) | (1 << 22) | (1 << 29);

impl MonthDays {
    /// No day; a monthly rule refuses it.
    pub const EMPTY: MonthDays = MonthDays {
        days: 0,
        relative: 0,
    };

    /// This set plus explicit day `day` (1..=31).
    pub fn with_day(self, day: u8) -> Result<MonthDays, CalendarError> {
        if !(1..=31).contains(&day) {
            return Err(CalendarError::BadMonthDay {
                found: day.to_string(),
                hint: DAY_HINT,
            });
        }
        Ok(MonthDays {
            days: self.days | 1 << day,
            ..self
        })
    }

    /// This set plus the last day of the month (28, 29, 30 or 31 as the month has it).
    #[must_use]
    pub const fn with_last_day(self) -> MonthDays {
        self.with_relative(Ordinal::Last, DayKind::Day)
    }

    /// This set plus the last weekday (Monday–Friday) of the month.
    #[must_use]
    pub const fn with_last_weekday(self) -> MonthDays {
        self.with_relative(Ordinal::Last, DayKind::Weekday)
    }

    /// This set plus "the `ordinal` `kind` of the month". "The k-th day" for k = 1..4 is stored
    /// as explicit day k (see the type's docs).
    #[must_use]
    pub const fn with_relative(self, ordinal: Ordinal, kind: DayKind) -> MonthDays {
        if let (DayKind::Day, false) = (kind, matches!(ordinal, Ordinal::Last)) {
            return MonthDays {
                days: self.days | 1 << (ordinal.index() + 1),
                relative: self.relative,
            };
        }
        MonthDays {
            days: self.days,
            relative: self.relative | 1 << (ordinal.index() * 10 + kind.index()),
        }
    }

    /// The union of two sets.
    #[must_use]
    pub const fn union(self, other: MonthDays) -> MonthDays {
        MonthDays {
            days: self.days | other.days,
            relative: self.relative | other.relative,
        }
    }

    /// Whether no day is named.
    pub const fn is_empty(self) -> bool {
        self.days == 0 && self.relative == 0
    }

    /// The explicit days, ascending.
    pub fn days(self) -> impl Iterator<Item = u8> {
        (1..=31u8).filter(move |d| self.days & (1 << d) != 0)
    }

    /// Whether explicit day `day` is named.
    pub const fn contains_day(self, day: u8) -> bool {
        day >= 1 && day <= 31 && self.days & (1 << day) != 0
    }

    /// Whether "the `ordinal` `kind`" is named (as stored: "the second day" is explicit day 2,
    /// see [`MonthDays::contains_day`]).
    pub const fn contains_relative(self, ordinal: Ordinal, kind: DayKind) -> bool {
        self.relative & (1 << (ordinal.index() * 10 + kind.index())) != 0
    }

    /// Whether the last day of the month is named.
    pub const fn has_last_day(self) -> bool {
        self.contains_relative(Ordinal::Last, DayKind::Day)
    }

    /// Whether the last weekday (Monday–Friday) of the month is named.
    pub const fn has_last_weekday(self) -> bool {
        self.contains_relative(Ordinal::Last, DayKind::Weekday)
    }

    /// The relative days, by ordinal then kind (in [`DayKind::ALL`] order).
    pub fn relatives(self) -> impl Iterator<Item = (Ordinal, DayKind)> {
        Ordinal::ALL.into_iter().flat_map(move |o| {
            DayKind::ALL
                .into_iter()
                .filter(move |k| self.contains_relative(o, *k))
                .map(move |k| (o, k))
        })
    }

    /// The matching days (bits 1..=31) of a month with `dim` days whose 1st is weekday `first`
    /// (0 = Sunday). Only these two numbers matter, which is what lets a rule precompute all 28
    /// cases.
    pub(crate) fn mask(self, first: u8, dim: u8) -> u32 {
        let valid = (u32::MAX >> (31 - u32::from(dim))) & !1;
        let mut out = self.days & valid;
        let mut rel = self.relative;
        while rel != 0 {
            let bit = rel.trailing_zeros();
            rel &= rel - 1;
            let (ord, kind) = (bit / 10, bit % 10);
            let set = DayKind::ALL[kind as usize].weekdays();
            let mut candidates = 0u64;
            for w in 0..7u8 {
                if set.contains_number(w) {
                    let first_of = (w + 7 - first) % 7;
                    candidates |= EVERY_SEVENTH << first_of;
                }
            }
            let mut candidates = candidates as u32 & valid;
            if ord == 4 {
                if candidates != 0 {
                    out |= 1 << (31 - candidates.leading_zeros());
                }
            } else {
                for _ in 0..ord {
                    candidates &= candidates.wrapping_sub(1);
                }
                if candidates != 0 {
                    out |= 1 << candidates.trailing_zeros();
                }
            }
        }
        out
    }
}

impl std::fmt::Debug for MonthDays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonthDays")
            .field("days", &self.days().collect::<Vec<_>>())
            .field("relative", &self.relatives().collect::<Vec<_>>())
            .finish()
    }
}

/// The hint for a day-of-month item that is not one.
pub(crate) const DAY_HINT: &str = "expected 1-31, a range such as 1-5, \"last\", \"last weekday\" or \"<first|second|third|fourth|last> <mon..sun|day|weekday|weekend-day>\"";

/// One or more times of day (seconds since midnight), sorted ascending without duplicates.
///
/// The only constructor sorts and deduplicates, so the engine finds the next time with one
/// binary search and two spellings of the same list compare equal.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TimesOfDay(Box<[u32]>);

impl TimesOfDay {
    /// The given times (seconds since midnight, each below 86 400), sorted and deduplicated.
    /// Refuses an empty list and a time of 24:00:00 or later.
    pub fn new(times: impl IntoIterator<Item = u32>) -> Result<TimesOfDay, CalendarError> {
        let mut v: Vec<u32> = times.into_iter().collect();
        if let Some(bad) = v.iter().find(|t| **t >= DAY_SECONDS) {
            return Err(CalendarError::BadTime {
                found: format_clock(*bad),
            });
        }
        if v.is_empty() {
            return Err(CalendarError::NoTimes);
        }
        v.sort_unstable();
        v.dedup();
        Ok(TimesOfDay(v.into_boxed_slice()))
    }

    /// One time of day: `hour:minute:second`.
    pub fn hms(hour: u8, minute: u8, second: u8) -> Result<TimesOfDay, CalendarError> {
        if hour > 23 || minute > 59 || second > 59 {
            return Err(CalendarError::BadTime {
                found: format!("{hour:02}:{minute:02}:{second:02}"),
            });
        }
        TimesOfDay::new([u32::from(hour) * 3600 + u32::from(minute) * 60 + u32::from(second)])
    }

    /// The times, ascending, in seconds since midnight.
    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }
}

/// When in an eligible day a rule fires.
///
/// `Every` is SQL Server Agent's "occurs every N hours/minutes/seconds" with a daily window: it
/// restarts at `start` every day instead of running on across midnight, so the fire times of a
/// day do not depend on the previous day. A step that does not divide the window simply stops at
/// the last multiple at or before `end` (every 1h between 06:00-22:30 fires 06:00 … 22:00).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum TimeOfDay {
    /// At fixed times of day.
    At(TimesOfDay),
    /// At `start`, `start + step_seconds`, … while `<= end` (seconds since midnight; `end`
    /// inclusive; `start <= end`: a window never crosses midnight).
    Every {
        /// The step, 1..=86 399 seconds.
        step_seconds: u32,
        /// First fire of each day, seconds since midnight.
        start: u32,
        /// Last possible fire of each day (inclusive), seconds since midnight.
        end: u32,
    },
}

impl TimeOfDay {
    /// Every `step_seconds` over the whole day (00:00:00–23:59:59), the default window.
    pub const fn every(step_seconds: u32) -> TimeOfDay {
        TimeOfDay::Every {
            step_seconds,
            start: 0,
            end: LAST_SECOND,
        }
    }

    /// Checks the invariants [`TimeOfDay::Every`] cannot enforce by its type.
    pub(crate) fn validate(&self) -> Result<(), CalendarError> {
        if let TimeOfDay::Every {
            step_seconds,
            start,
            end,
        } = *self
        {
            if step_seconds == 0 || step_seconds >= DAY_SECONDS {
                return Err(CalendarError::StepOutOfRange {
                    seconds: u64::from(step_seconds),
                });
            }
            for t in [start, end] {
                if t >= DAY_SECONDS {
                    return Err(CalendarError::BadTime {
                        found: format_clock(t),
                    });
                }
            }
            if end < start {
                return Err(CalendarError::ReversedWindow {
                    start: format_clock(start),
                    end: format_clock(end),
                });
            }
        }
        Ok(())
    }

    /// The first fire at or after second-of-day `sod`.
    #[inline]
    pub(crate) fn next(&self, sod: u32) -> Option<u32> {
        match self {
            TimeOfDay::At(t) => {
                let t = t.as_slice();
                t.get(t.partition_point(|x| *x < sod)).copied()
            }
            &TimeOfDay::Every {
                step_seconds,
                start,
                end,
            } => {
                let t = if sod <= start {
                    start
                } else {
                    start + (sod - start).div_ceil(step_seconds) * step_seconds
                };
                (t <= end).then_some(t)
            }
        }
    }

    /// The last fire at or before second-of-day `sod`.
    #[inline]
    pub(crate) fn prev(&self, sod: u32) -> Option<u32> {
        match self {
            TimeOfDay::At(t) => {
                let t = t.as_slice();
                t.partition_point(|x| *x <= sod)
                    .checked_sub(1)
                    .map(|i| t[i])
            }
            &TimeOfDay::Every {
                step_seconds,
                start,
                end,
            } => {
                if sod < start {
                    return None;
                }
                let s = sod.min(end);
                Some(start + (s - start) / step_seconds * step_seconds)
            }
        }
    }

    /// Whether second-of-day `sod` is a fire.
    #[inline]
    pub(crate) fn contains(&self, sod: u32) -> bool {
        match self {
            TimeOfDay::At(t) => t.as_slice().binary_search(&sod).is_ok(),
            &TimeOfDay::Every {
                step_seconds,
                start,
                end,
            } => sod >= start && sod <= end && (sod - start).is_multiple_of(step_seconds),
        }
    }

    /// The last fire of a day (an `Every` window's end rounded down to a step).
    pub(crate) fn last(&self) -> u32 {
        match self {
            TimeOfDay::At(t) => *t.as_slice().last().unwrap_or(&0),
            &TimeOfDay::Every {
                step_seconds,
                start,
                end,
            } => start + (end - start) / step_seconds.max(1) * step_seconds.max(1),
        }
    }
}

/// How often a rule's days come round: every N days, every N weeks on some weekdays, or every N
/// months on some days of the month (SQL Server Agent's daily/weekly/monthly frequency types).
///
/// `every` is at least 1; [`super::CalendarRule::new`] refuses 0. For N > 1 the count starts at
/// the rule's anchor (see [`super::CalendarRule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frequency {
    /// Every `every` days.
    Daily {
        /// N: fire on every N-th day counting from the anchor date.
        every: u32,
    },
    /// On `weekdays` of every `every`-th week (weeks start on Monday).
    Weekly {
        /// N: fire in every N-th week counting from the anchor date's week.
        every: u32,
        /// The days of those weeks.
        weekdays: WeekdaySet,
    },
    /// On `days` of every `every`-th month.
    Monthly {
        /// N: fire in every N-th month counting from the anchor date's month.
        every: u32,
        /// The days of those months.
        days: MonthDays,
    },
}

impl Frequency {
    /// N of "every N days/weeks/months".
    pub const fn every(&self) -> u32 {
        match *self {
            Frequency::Daily { every }
            | Frequency::Weekly { every, .. }
            | Frequency::Monthly { every, .. } => every,
        }
    }

    /// The unit word of the interval, plural: `days`, `weeks` or `months`.
    pub(crate) const fn unit(&self) -> &'static str {
        match self {
            Frequency::Daily { .. } => "days",
            Frequency::Weekly { .. } => "weeks",
            Frequency::Monthly { .. } => "months",
        }
    }
}

/// `HH:MM` or `HH:MM:SS` (seconds only when non-zero) for a second of the day; larger values
/// (only in error messages) print hours past 23.
pub(crate) fn format_clock(sod: u32) -> String {
    let (h, m, s) = (sod / 3600, sod / 60 % 60, sod % 60);
    if s == 0 {
        format!("{h:02}:{m:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}
