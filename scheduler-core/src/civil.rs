//! Wall-clock ("civil") date and time arithmetic at one-second resolution.
//!
//! The schedule engines search in civil time because that is what cron fields and calendar rules
//! describe; the zone layer ([`crate::schedule::Schedule`]) maps civil times to instants. These
//! helpers are deliberately tiny and allocation-free: they sit on the hot path of every
//! next-fire computation, where going through `jiff::civil::DateTime` would cost more than the
//! whole search.

use jiff::Timestamp;

/// Smallest year a [`Civil`] may hold (the same bound as `jiff`).
pub const MIN_YEAR: i16 = -9999;
/// Largest year a [`Civil`] may hold (the same bound as `jiff`).
pub const MAX_YEAR: i16 = 9999;

/// A date and time of day without a zone, to the second.
///
/// The field order makes the derived `Ord` chronological. Values are always valid (the day
/// exists in its month); constructors check that, the engines preserve it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Civil {
    /// Proleptic Gregorian year, [`MIN_YEAR`]..=[`MAX_YEAR`].
    pub year: i16,
    /// Month of the year, 1..=12.
    pub month: u8,
    /// Day of the month, 1..=31 (and within the month's length).
    pub day: u8,
    /// Hour of the day, 0..=23.
    pub hour: u8,
    /// Minute of the hour, 0..=59.
    pub minute: u8,
    /// Second of the minute, 0..=59 (leap seconds do not exist here, as in POSIX time).
    pub second: u8,
}

impl Civil {
    /// Builds a civil date-time, or `None` when a field is out of range or the day does not
    /// exist in that month.
    pub fn new(year: i16, month: u8, day: u8, hour: u8, minute: u8, second: u8) -> Option<Self> {
        let ok = (MIN_YEAR..=MAX_YEAR).contains(&year)
            && (1..=12).contains(&month)
            && day >= 1
            && day <= days_in_month(year, month)
            && hour < 24
            && minute < 60
            && second < 60;
        ok.then_some(Civil {
            year,
            month,
            day,
            hour,
            minute,
            second,
        })
    }

    /// Midnight at the start of the given date (which must be valid).
    pub(crate) const fn midnight(year: i16, month: u8, day: u8) -> Self {
        Civil {
            year,
            month,
            day,
            hour: 0,
            minute: 0,
            second: 0,
        }
    }

    /// The civil time `secs` seconds after the Unix epoch at a UTC offset of zero.
    pub fn from_epoch_seconds(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: (rem / 3600) as u8,
            minute: (rem / 60 % 60) as u8,
            second: (rem % 60) as u8,
        }
    }

    /// Seconds since the Unix epoch of this civil time read at a UTC offset of zero.
    pub fn to_epoch_seconds(self) -> i64 {
        days_from_civil(self.year, self.month, self.day) * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }

    /// Days since 1970-01-01 of this civil date.
    pub fn epoch_day(self) -> i64 {
        days_from_civil(self.year, self.month, self.day)
    }

    /// Seconds since midnight.
    pub fn second_of_day(self) -> u32 {
        u32::from(self.hour) * 3600 + u32::from(self.minute) * 60 + u32::from(self.second)
    }

    /// Day of the week, 0 = Sunday … 6 = Saturday (the cron numbering).
    pub fn weekday(self) -> u8 {
        weekday_from_days(self.epoch_day())
    }

    /// This civil time plus `secs` seconds of wall-clock time (no zone involved).
    pub fn add_seconds(self, secs: i64) -> Self {
        Civil::from_epoch_seconds(self.to_epoch_seconds() + secs)
    }

    /// The same wall-clock time as a `jiff` value.
    pub fn to_jiff(self) -> jiff::civil::DateTime {
        jiff::civil::date(self.year, self.month as i8, self.day as i8).at(
            self.hour as i8,
            self.minute as i8,
            self.second as i8,
            0,
        )
    }

    /// The wall-clock time of a `jiff` value, truncated to the second.
    pub fn from_jiff(dt: jiff::civil::DateTime) -> Self {
        Civil {
            year: dt.year(),
            month: dt.month() as u8,
            day: dt.day() as u8,
            hour: dt.hour() as u8,
            minute: dt.minute() as u8,
            second: dt.second() as u8,
        }
    }

    /// The civil time of `ts` at a UTC offset of `offset_seconds`, truncated to the second.
    pub fn from_timestamp(ts: Timestamp, offset_seconds: i32) -> Self {
        Civil::from_epoch_seconds(ts.as_second() + i64::from(offset_seconds))
    }
}

impl std::fmt::Display for Civil {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Whether `year` is a Gregorian leap year.
pub const fn is_leap(year: i16) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Number of days in a month (1..=12) of a year.
pub const fn days_in_month(year: i16, month: u8) -> u8 {
    match month {
        2 => {
            if is_leap(year) {
                29
            } else {
                28
            }
        }
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
///
/// Howard Hinnant's `days_from_civil`: branch-light and exact over the whole `i16` year range.
pub const fn days_from_civil(year: i16, month: u8, day: u8) -> i64 {
    let y = year as i64 - if month <= 2 { 1 } else { 0 };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (inverse of
/// [`days_from_civil`]).
pub const fn civil_from_days(days: i64) -> (i16, u8, u8) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if m <= 2 { y + 1 } else { y };
    (year as i16, m as u8, d as u8)
}

/// Day of the week of a day count since 1970-01-01 (a Thursday), 0 = Sunday.
pub const fn weekday_from_days(days: i64) -> u8 {
    (days + 4).rem_euclid(7) as u8
}

/// Day of the week (0 = Sunday) of a date.
pub const fn weekday(year: i16, month: u8, day: u8) -> u8 {
    weekday_from_days(days_from_civil(year, month, day))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_counts_round_trip_over_many_centuries() {
        for days in (-2_900_000i64..2_900_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
            let j = jiff::civil::date(y, m as i8, d as i8);
            let jd = j.since(jiff::civil::date(1970, 1, 1)).unwrap().get_days();
            assert_eq!(i64::from(jd), days);
        }
    }

    #[test]
    fn weekdays_agree_with_jiff() {
        for days in (-500_000i64..500_000).step_by(31) {
            let (y, m, d) = civil_from_days(days);
            let wd = jiff::civil::date(y, m as i8, d as i8)
                .weekday()
                .to_sunday_zero_offset();
            assert_eq!(weekday(y, m, d) as i8, wd);
        }
    }

    #[test]
    fn month_lengths_include_leap_rules() {
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(days_in_month(2023, 4), 30);
        assert_eq!(days_in_month(2023, 12), 31);
        assert!(Civil::new(2023, 2, 29, 0, 0, 0).is_none());
        assert!(Civil::new(2024, 2, 29, 23, 59, 59).is_some());
        assert!(Civil::new(2024, 1, 1, 24, 0, 0).is_none());
    }

    #[test]
    fn epoch_seconds_round_trip() {
        for s in (-100_000_000_000i64..100_000_000_000).step_by(7_777_777) {
            assert_eq!(Civil::from_epoch_seconds(s).to_epoch_seconds(), s);
        }
        let c = Civil::new(2026, 11, 30, 15, 42, 7).unwrap();
        assert_eq!(c.to_string(), "2026-11-30T15:42:07");
        assert_eq!(Civil::from_jiff(c.to_jiff()), c);
    }
}
