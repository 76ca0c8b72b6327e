use super::*;
use crate::schedule::CivilPattern;

/// A civil time from `YYYY-MM-DDTHH:MM[:SS]` (or a bare date, meaning midnight).
fn t(s: &str) -> Civil {
    let (date, time) = s.split_once('T').unwrap_or((s, "00:00"));
    let (neg, date) = match date.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, date),
    };
    let d: Vec<i32> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let mut h: Vec<u8> = time.split(':').map(|x| x.parse().unwrap()).collect();
    h.resize(3, 0);
    let year = if neg { -d[0] } else { d[0] };
    Civil::new(year as i16, d[1] as u8, d[2] as u8, h[0], h[1], h[2]).unwrap()
}

fn rule(s: &str) -> CalendarRule {
    CalendarRule::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn err(s: &str) -> CalendarError {
    match CalendarRule::parse(s) {
        Ok(r) => panic!("{s} parsed as {r}"),
        Err(e) => e,
    }
}

/// The first `n` fires at or after `from`, as strings.
fn nexts(r: &CalendarRule, from: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = t(from);
    while out.len() < n {
        let Some(c) = r.next_civil(cur) else { break };
        assert!(r.matches(c), "{r}: next {c} does not match");
        out.push(c.to_string());
        cur = c.add_seconds(1);
    }
    out
}

/// The last `n` fires at or before `from`, newest first, as strings.
fn prevs(r: &CalendarRule, from: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = t(from);
    while out.len() < n {
        let Some(c) = r.prev_civil(cur) else { break };
        assert!(r.matches(c), "{r}: prev {c} does not match");
        out.push(c.to_string());
        cur = c.add_seconds(-1);
    }
    out
}

fn first(r: &CalendarRule, from: &str) -> Option<String> {
    r.next_civil(t(from)).map(|c| c.to_string())
}

// ---- the seeds' examples -------------------------------------------------------------------

#[test]
fn seed_hourly_on_weekdays_within_window() {
    let r = rule("weekly on mon-fri every 1h between 06:00-22:30");
    assert_eq!(r, rule("weekly mon-fri every 1h between 06:00-22:30"));
    assert_eq!(
        r,
        rule("WEEKLY On Weekdays EVERY 1 hour BETWEEN 06:00 - 22:30")
    );
    // 2026-03-06 is a Friday.
    assert_eq!(
        nexts(&r, "2026-03-06T21:30", 4),
        [
            "2026-03-06T22:00:00",
            "2026-03-09T06:00:00",
            "2026-03-09T07:00:00",
            "2026-03-09T08:00:00"
        ]
    );
    assert_eq!(
        prevs(&r, "2026-03-09T05:59:59", 2),
        ["2026-03-06T22:00:00", "2026-03-06T21:00:00"]
    );
    assert!(!r.matches(t("2026-03-06T22:30")));
    assert!(!r.matches(t("2026-03-07T10:00")));
    assert!(r.is_interval_like());
    assert_eq!(
        r.describe(),
        "every hour from 06:00 to 22:00 on Monday through Friday"
    );
}

#[test]
fn seed_wednesdays_and_saturdays() {
    let r = rule("weekly on wed,sat at 09:00");
    assert_eq!(
        nexts(&r, "2026-03-04T09:00", 3),
        [
            "2026-03-04T09:00:00",
            "2026-03-07T09:00:00",
            "2026-03-11T09:00:00"
        ]
    );
    assert_eq!(
        prevs(&r, "2026-03-04T08:59:59", 2),
        ["2026-02-28T09:00:00", "2026-02-25T09:00:00"]
    );
    assert!(!r.is_interval_like());
    assert_eq!(r.describe(), "at 09:00 on Wednesday and Saturday");
}

#[test]
fn seed_last_day_of_month_at_20() {
    let r = rule("monthly on last at 20:00");
    assert_eq!(
        nexts(&r, "2024-01-31T20:00:01", 4),
        [
            "2024-02-29T20:00:00",
            "2024-03-31T20:00:00",
            "2024-04-30T20:00:00",
            "2024-05-31T20:00:00"
        ]
    );
    assert_eq!(
        prevs(&r, "2023-03-30T00:00", 2),
        ["2023-02-28T20:00:00", "2023-01-31T20:00:00"]
    );
    assert_eq!(r.describe(), "at 20:00 on the last day of every month");
}

#[test]
fn seed_every_five_minutes() {
    let r = rule("daily every 5m");
    assert_eq!(
        nexts(&r, "2026-12-31T23:51:00", 3),
        [
            "2026-12-31T23:55:00",
            "2027-01-01T00:00:00",
            "2027-01-01T00:05:00"
        ]
    );
    assert_eq!(
        prevs(&r, "2027-01-01T00:04:59", 2),
        ["2027-01-01T00:00:00", "2026-12-31T23:55:00"]
    );
    assert_eq!(r.describe(), "every 5 minutes every day");
}

// ---- daily ---------------------------------------------------------------------------------

#[test]
fn daily_every_n_days_counts_from_the_effective_date() {
    let r = rule("daily every 2 days at 02:00 from 2026-01-01 until 2027-01-01");
    assert_eq!(
        nexts(&r, "2000-01-01", 3),
        [
            "2026-01-01T02:00:00",
            "2026-01-03T02:00:00",
            "2026-01-05T02:00:00"
        ]
    );
    // 2026 has 365 days: day 364 (Dec 31) is even, so it fires; then the rule expires.
    assert_eq!(
        prevs(&r, "2030-01-01", 2),
        ["2026-12-31T02:00:00", "2026-12-29T02:00:00"]
    );
    assert_eq!(first(&r, "2026-12-31T02:00:01"), None);
    assert_eq!(r.prev_civil(t("2026-01-01T01:59:59")), None);
    assert!(!r.matches(t("2026-01-02T02:00")));
    assert_eq!(r.anchor_date(), t("2026-01-01"));
}

#[test]
fn daily_every_n_days_without_start_counts_from_1970() {
    let r = rule("daily every 3 days at 00:00");
    assert_eq!(r.anchor_date(), t("1970-01-01"));
    assert_eq!(
        nexts(&r, "1970-01-01", 2),
        ["1970-01-01T00:00:00", "1970-01-04T00:00:00"]
    );
    // Before the anchor too: 1969-12-29 is day -3.
    assert_eq!(
        first(&r, "1969-12-28T00:00:01").unwrap(),
        "1969-12-29T00:00:00"
    );
    let c = r.next_civil(t("2026-06-01")).unwrap();
    assert_eq!(c.epoch_day().rem_euclid(3), 0);
    assert_eq!(
        r.describe(),
        "at 00:00 every 3 days counting from 1970-01-01"
    );
}

#[test]
fn effective_from_with_a_time_anchors_the_date_but_bounds_the_time() {
    let r = rule("daily every 2 days at 09:00 from 2026-01-01T10:00");
    assert_eq!(first(&r, "2025-01-01").unwrap(), "2026-01-03T09:00:00");
    assert_eq!(r.effective_from(), Some(t("2026-01-01T10:00")));
    assert_eq!(r.anchor_date(), t("2026-01-01"));
    assert_eq!(
        format!("{r:?}"),
        "CalendarRule { frequency: Daily { every: 2 }, time: At(TimesOfDay([32400])), effective_from: Some(Civil { year: 2026, month: 1, day: 1, hour: 10, minute: 0, second: 0 }), expires_at: None }"
    );
    assert_eq!(r.prev_civil(t("2026-01-03T08:00")), None);
}

// ---- weekly --------------------------------------------------------------------------------

#[test]
fn weekly_every_n_weeks_counts_weeks_from_the_anchor_week() {
    // 2026-01-07 is a Wednesday; its week starts on Monday 2026-01-05.
    let r = rule("weekly every 2 weeks on mon,fri at 08:00 from 2026-01-07");
    assert_eq!(
        nexts(&r, "2026-01-01", 5),
        [
            "2026-01-09T08:00:00",
            "2026-01-19T08:00:00",
            "2026-01-23T08:00:00",
            "2026-02-02T08:00:00",
            "2026-02-06T08:00:00"
        ]
    );
    assert_eq!(
        prevs(&r, "2026-02-01T00:00", 3),
        [
            "2026-01-23T08:00:00",
            "2026-01-19T08:00:00",
            "2026-01-09T08:00:00"
        ]
    );
    assert!(!r.matches(t("2026-01-12T08:00")));
    assert!(
        !r.matches(t("2026-01-05T08:00")),
        "before the effective date"
    );
    assert_eq!(
        r.describe(),
        "at 08:00 on Monday and Friday of every 2nd week, starting 2026-01-07"
    );
}

#[test]
fn weekly_every_n_weeks_without_start_uses_the_week_of_1970_01_01() {
    // 1970-01-01 is a Thursday; its week starts on Monday 1969-12-29.
    let r = rule("weekly every 2 weeks on mon at 00:00");
    assert_eq!(
        nexts(&r, "1969-12-01", 3),
        [
            "1969-12-01T00:00:00",
            "1969-12-15T00:00:00",
            "1969-12-29T00:00:00"
        ]
    );
    assert_eq!(
        first(&r, "1969-12-29T00:00:01").unwrap(),
        "1970-01-12T00:00:00"
    );
    // Sunday belongs to the week that started the Monday before.
    let s = rule("weekly every 2 weeks on sun at 00:00");
    assert_eq!(first(&s, "1970-01-01").unwrap(), "1970-01-04T00:00:00");
    assert_eq!(first(&s, "1970-01-05").unwrap(), "1970-01-18T00:00:00");
}

#[test]
fn weekday_sets_and_spellings() {
    let all = rule("weekly on mon,tue,wed,thu,fri,sat,sun at 12:00");
    assert_eq!(all, rule("weekly on mon-sun at 12:00"));
    assert_eq!(all, rule("weekly on weekdays,weekends at 12:00"));
    assert_eq!(all.describe(), "at 12:00 every day");
    assert_eq!(all.to_string(), "weekly on mon-sun at 12:00");
    let we = rule("weekly on Saturday,SUNDAY at 12:00");
    assert_eq!(we, rule("weekly on sat-sun at 12:00"));
    assert_eq!(we, rule("weekly weekends at 12:00"));
    assert_eq!(we.to_string(), "weekly on sat,sun at 12:00");
    let mixed = rule("weekly on tues, thurs , sun, mon-wed at 07:00");
    assert_eq!(mixed.to_string(), "weekly on mon-thu,sun at 07:00");
    assert_eq!(
        mixed.describe(),
        "at 07:00 on Monday through Thursday and Sunday"
    );
    // 2026-03-08 is a Sunday.
    assert_eq!(
        nexts(&mixed, "2026-03-06", 3),
        [
            "2026-03-08T07:00:00",
            "2026-03-09T07:00:00",
            "2026-03-10T07:00:00"
        ]
    );
}

#[test]
fn weekday_set_api() {
    let s = WeekdaySet::MONDAY_TO_FRIDAY;
    assert_eq!(s.len(), 5);
    assert!(s.contains(Weekday::Monday) && !s.contains(Weekday::Sunday));
    assert!(s.contains_number(5) && !s.contains_number(6) && !s.contains_number(9));
    assert_eq!(WeekdaySet::from_bits(0x80), None);
    assert_eq!(WeekdaySet::from_bits(0x41), Some(WeekdaySet::WEEKEND));
    assert_eq!(
        WeekdaySet::range(Weekday::Monday, Weekday::Friday),
        Some(WeekdaySet::MONDAY_TO_FRIDAY)
    );
    assert_eq!(
        WeekdaySet::range(Weekday::Saturday, Weekday::Sunday),
        Some(WeekdaySet::WEEKEND)
    );
    assert_eq!(WeekdaySet::range(Weekday::Sunday, Weekday::Monday), None);
    let v: Vec<Weekday> = WeekdaySet::WEEKEND.iter().collect();
    assert_eq!(v, [Weekday::Saturday, Weekday::Sunday]);
    let built: WeekdaySet = [Weekday::Wednesday, Weekday::Saturday]
        .into_iter()
        .collect();
    assert_eq!(built.bits(), 0b100_1000);
    assert_eq!(built.monday_first_bits(), 0b010_0100);
    assert_eq!(WeekdaySet::ALL.monday_first_bits(), 0x7f);
    for n in 0..7 {
        assert_eq!(Weekday::from_number(n).unwrap().number(), n);
    }
    assert_eq!(Weekday::from_number(7), None);
    assert_eq!(format!("{:?}", WeekdaySet::WEEKEND), "{Saturday, Sunday}");
}

// ---- monthly -------------------------------------------------------------------------------

#[test]
fn monthly_day_31_skips_short_months() {
    let r = rule("monthly on 31 at 12:00");
    assert_eq!(
        nexts(&r, "2026-01-31T12:00:01", 4),
        [
            "2026-03-31T12:00:00",
            "2026-05-31T12:00:00",
            "2026-07-31T12:00:00",
            "2026-08-31T12:00:00"
        ]
    );
    assert_eq!(
        prevs(&r, "2026-07-30", 2),
        ["2026-05-31T12:00:00", "2026-03-31T12:00:00"]
    );
    assert!(!r.matches(t("2026-04-30T12:00")));
}

#[test]
fn monthly_29_30_31_in_february() {
    let r = rule("monthly on 29-31 at 00:00");
    assert_eq!(r, rule("monthly on 29,30,31 at 00:00"));
    assert_eq!(
        nexts(&r, "2024-02-01", 2),
        ["2024-02-29T00:00:00", "2024-03-29T00:00:00"]
    );
    assert_eq!(first(&r, "2023-02-01").unwrap(), "2023-03-29T00:00:00");
    assert_eq!(first(&r, "2100-02-01").unwrap(), "2100-03-29T00:00:00");
    assert_eq!(first(&r, "2000-02-01").unwrap(), "2000-02-29T00:00:00");
    assert_eq!(prevs(&r, "2023-03-28", 1), ["2023-01-31T00:00:00"]);
    let feb30 = rule("monthly on 30 at 00:00");
    assert_eq!(first(&feb30, "2024-02-01").unwrap(), "2024-03-30T00:00:00");
    assert_eq!(
        rule("monthly on 1-3,5,6,10-12 at 00:00").to_string(),
        "monthly on 1-3,5,6,10-12 at 00:00"
    );
}

#[test]
fn monthly_last_weekday() {
    let r = rule("monthly on last weekday at 18:00");
    // Jan 2026 ends on Saturday the 31st, Feb on Saturday the 28th, May on Sunday the 31st,
    // March on Tuesday the 31st.
    assert_eq!(
        nexts(&r, "2026-01-01", 5),
        [
            "2026-01-30T18:00:00",
            "2026-02-27T18:00:00",
            "2026-03-31T18:00:00",
            "2026-04-30T18:00:00",
            "2026-05-29T18:00:00"
        ]
    );
    assert_eq!(
        r.frequency(),
        &Frequency::Monthly {
            every: 1,
            days: MonthDays::EMPTY.with_last_weekday()
        }
    );
    assert_eq!(r.describe(), "at 18:00 on the last weekday of every month");
}

/// Every relative kind in March 2026, which starts on a Sunday and ends on Tuesday the 31st.
#[test]
fn monthly_relative_days() {
    let cases = [
        ("first mon", 2),
        ("2nd tue", 10),
        ("third wed", 18),
        ("4th thu", 26),
        ("last fri", 27),
        ("last sat", 28),
        ("last sun", 29),
        ("first sun", 1),
        ("first day", 1),
        ("second day", 2),
        ("4th day", 4),
        ("last day", 31),
        ("last", 31),
        ("first weekday", 2),
        ("second weekday", 3),
        ("third weekday", 4),
        ("fourth weekday", 5),
        ("last weekday", 31),
        ("first weekend-day", 1),
        ("second weekend-day", 7),
        ("third weekendday", 8),
        ("fourth weekend-day", 14),
        ("last weekend-day", 29),
    ];
    for (item, day) in cases {
        let r = rule(&format!("monthly on {item} at 10:00"));
        let want = format!("2026-03-{day:02}T10:00:00");
        assert_eq!(first(&r, "2026-03-01").unwrap(), want, "{item}");
        assert_eq!(
            prevs(&r, "2026-03-31T23:59:59", 1),
            [want.as_str()],
            "{item}"
        );
        assert_eq!(rule(&r.to_string()), r, "{item}");
    }
    // A month starting on Saturday: August 2026. First weekday is Monday the 3rd, first
    // weekend day Saturday the 1st, last weekend day Sunday the 30th, last day Monday the 31st.
    for (item, day) in [
        ("first weekday", 3),
        ("first weekend-day", 1),
        ("second weekend-day", 2),
        ("last weekend-day", 30),
        ("last weekday", 31),
        ("first sat", 1),
        ("fourth sat", 22),
        ("last sat", 29),
    ] {
        let r = rule(&format!("monthly on {item} at 10:00"));
        assert_eq!(
            first(&r, "2026-08-01").unwrap(),
            format!("2026-08-{day:02}T10:00:00"),
            "{item}"
        );
    }
}

#[test]
fn month_days_api_is_canonical() {
    let a = MonthDays::EMPTY.with_relative(Ordinal::Second, DayKind::Day);
    assert_eq!(a, MonthDays::EMPTY.with_day(2).unwrap());
    assert_eq!(
        MonthDays::EMPTY.with_last_day(),
        MonthDays::EMPTY.with_relative(Ordinal::Last, DayKind::Day)
    );
    let m = MonthDays::EMPTY
        .with_day(1)
        .unwrap()
        .with_last_weekday()
        .union(MonthDays::EMPTY.with_relative(Ordinal::First, DayKind::Named(Weekday::Monday)));
    assert!(m.contains_day(1) && !m.contains_day(2) && !m.contains_day(0));
    assert!(m.has_last_weekday() && !m.has_last_day());
    assert_eq!(m.days().collect::<Vec<_>>(), [1]);
    assert_eq!(
        m.relatives().collect::<Vec<_>>(),
        [
            (Ordinal::First, DayKind::Named(Weekday::Monday)),
            (Ordinal::Last, DayKind::Weekday)
        ]
    );
    assert!(matches!(
        MonthDays::EMPTY.with_day(32),
        Err(CalendarError::BadMonthDay { .. })
    ));
    assert!(MonthDays::EMPTY.is_empty() && !m.is_empty());
}

#[test]
fn monthly_every_n_months_counts_from_the_anchor_month() {
    let r = rule("monthly every 3 months on 2nd tue at 08:30 from 2026-02-15");
    // February's second Tuesday (the 10th) is before the start; May 12th, August 11th follow.
    assert_eq!(
        nexts(&r, "2026-01-01", 3),
        [
            "2026-05-12T08:30:00",
            "2026-08-11T08:30:00",
            "2026-11-10T08:30:00"
        ]
    );
    assert_eq!(
        prevs(&r, "2026-11-09", 2),
        ["2026-08-11T08:30:00", "2026-05-12T08:30:00"]
    );
    assert_eq!(r.prev_civil(t("2026-05-12T08:29")), None);
    assert_eq!(
        r.describe(),
        "at 08:30 on the second Tuesday of every 3rd month, starting 2026-02-15"
    );
    let unanchored = rule("monthly every 3 months on 2nd tue at 08:30");
    assert_eq!(
        unanchored.describe(),
        "at 08:30 on the second Tuesday of every 3rd month counting from January 1970"
    );
    // From January 1970: January, April, July, October.
    let months: Vec<u8> = (0..8)
        .scan(t("2026-01-01"), |cur, _| {
            let c = unanchored.next_civil(*cur)?;
            *cur = c.add_seconds(1);
            Some(c.month)
        })
        .collect();
    assert_eq!(months, [1, 4, 7, 10, 1, 4, 7, 10]);
}

#[test]
fn rules_whose_months_never_hold_the_days_are_refused() {
    for s in [
        "monthly every 12 months on 31 at 00:00 from 2026-04-01",
        "monthly every 12 months on 30,31 at 00:00 from 2026-02-10",
        "monthly every 24 months on 31 at 00:00 from 2026-06-01",
        // February every 4 years from 2025: never a leap year.
        "monthly every 48 months on 29 at 00:00 from 2025-02-01",
    ] {
        let e = err(s);
        assert!(matches!(e, CalendarError::NeverFires { .. }), "{s}: {e}");
    }
    assert_eq!(
        err("monthly every 12 months on 31 at 00:00 from 2026-04-01").to_string(),
        "calendar: the rule never fires: every 12 months counting from 2026-04 it only visits months without day 31; pick days every month has, such as \"last\", or another interval or \"from\" date"
    );
    // February every 4 years from a leap year is fine.
    let ok = rule("monthly every 48 months on 29 at 00:00 from 2024-02-01");
    assert_eq!(first(&ok, "2024-03-01").unwrap(), "2028-02-29T00:00:00");
    let ok = rule("monthly every 12 months on 31 at 00:00 from 2026-01-01");
    assert_eq!(first(&ok, "2026-02-01").unwrap(), "2027-01-31T00:00:00");
}

// ---- times of day --------------------------------------------------------------------------

#[test]
fn at_single_and_multiple_times() {
    let r = rule("daily at 18:00,06:00, 12:00 ,06:00");
    assert_eq!(r.to_string(), "daily at 06:00,12:00,18:00");
    assert_eq!(
        nexts(&r, "2026-01-01T12:00", 3),
        [
            "2026-01-01T12:00:00",
            "2026-01-01T18:00:00",
            "2026-01-02T06:00:00"
        ]
    );
    assert_eq!(
        prevs(&r, "2026-01-02T05:59:59", 2),
        ["2026-01-01T18:00:00", "2026-01-01T12:00:00"]
    );
    assert_eq!(r.describe(), "at 06:00, 12:00 and 18:00 every day");
    let one = rule("daily at 9:05:07");
    assert_eq!(one.to_string(), "daily at 09:05:07");
    assert_eq!(
        first(&one, "2026-01-01T09:05:08").unwrap(),
        "2026-01-02T09:05:07"
    );
    match one.time() {
        TimeOfDay::At(times) => assert_eq!(times.as_slice(), [9 * 3600 + 5 * 60 + 7]),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        TimesOfDay::hms(9, 5, 7).unwrap(),
        TimesOfDay::new([32707]).unwrap()
    );
}

#[test]
fn every_seconds_minutes_hours_with_windows() {
    let s = rule("daily every 45s between 00:00:10-00:02");
    assert_eq!(
        nexts(&s, "2026-01-01", 4),
        [
            "2026-01-01T00:00:10",
            "2026-01-01T00:00:55",
            "2026-01-01T00:01:40",
            "2026-01-02T00:00:10"
        ]
    );
    assert_eq!(prevs(&s, "2026-01-02T00:00:09", 1), ["2026-01-01T00:01:40"]);
    assert_eq!(
        s.describe(),
        "every 45 seconds from 00:00:10 to 00:01:40 every day"
    );
    let m = rule("daily every 90 minutes between 08:15-12:00");
    assert_eq!(m.to_string(), "daily every 90m between 08:15-12:00");
    assert_eq!(
        nexts(&m, "2026-01-01T08:16", 3),
        [
            "2026-01-01T09:45:00",
            "2026-01-01T11:15:00",
            "2026-01-02T08:15:00"
        ]
    );
    let h = rule("daily every 1h30m between 01:00 to 23:00");
    assert_eq!(h, rule("daily every 90m between 01:00-23:00"));
    let two_h = rule("daily every 2h");
    assert_eq!(two_h.describe(), "every 2 hours every day");
    let odd = rule("daily every 7h");
    assert_eq!(
        odd.describe(),
        "every 7 hours from 00:00 to 21:00 every day"
    );
    assert_eq!(
        prevs(&odd, "2026-01-02T06:59:59", 2),
        ["2026-01-02T00:00:00", "2026-01-01T21:00:00"]
    );
    let once = rule("daily every 2h between 06:00-07:00");
    assert_eq!(once.describe(), "at 06:00 every day");
    assert!(once.is_interval_like());
    let sec = rule("daily every second between 12:00-12:00:02");
    assert_eq!(sec.to_string(), "daily every 1s between 12:00-12:00:02");
    assert_eq!(nexts(&sec, "2026-01-01", 4).len(), 4);
    assert_eq!(
        nexts(&sec, "2026-01-01", 4)[3],
        "2026-01-02T12:00:00".to_string()
    );
}

// ---- bounds --------------------------------------------------------------------------------

#[test]
fn effective_from_is_inclusive_and_expiry_exclusive() {
    let r = rule("daily at 09:00 from 2026-01-01T09:00 until 2026-01-03T09:00");
    assert_eq!(
        nexts(&r, "2020-01-01", 5),
        ["2026-01-01T09:00:00", "2026-01-02T09:00:00"]
    );
    assert_eq!(
        prevs(&r, "2030-01-01", 5),
        ["2026-01-02T09:00:00", "2026-01-01T09:00:00"]
    );
    assert!(r.matches(t("2026-01-01T09:00")));
    assert!(!r.matches(t("2026-01-03T09:00")));
    assert!(!r.matches(t("2025-12-31T09:00")));
    assert_eq!(r.expires_at(), Some(t("2026-01-03T09:00")));
    // A date-only "until" stops before that day starts.
    let d = rule("daily at 00:00 until 2099-01-01");
    assert_eq!(prevs(&d, "2100-01-01", 1), ["2098-12-31T00:00:00"]);
    assert_eq!(first(&d, "2098-12-31T00:00:01"), None);
    assert_eq!(d.describe(), "at 00:00 every day, ending before 2099-01-01");
    assert_eq!(
        r.describe(),
        "at 09:00 every day, starting 2026-01-01 09:00 and ending before 2026-01-03 09:00"
    );
}

#[test]
fn structured_constructor_validates() {
    let at9 = || TimeOfDay::At(TimesOfDay::hms(9, 0, 0).unwrap());
    let ok = CalendarRule::new(
        Frequency::Weekly {
            every: 1,
            weekdays: WeekdaySet::single(Weekday::Monday),
        },
        at9(),
        None,
        None,
    )
    .unwrap();
    assert_eq!(ok, rule("weekly on mon at 09:00"));
    assert_eq!(ok.frequency().every(), 1);
    assert_eq!((ok.effective_from(), ok.expires_at()), (None, None));
    let e = |f, time| CalendarRule::new(f, time, None, None).unwrap_err();
    assert_eq!(
        e(Frequency::Daily { every: 0 }, at9()),
        CalendarError::Interval {
            found: "0".into(),
            unit: "days"
        }
    );
    assert_eq!(
        e(
            Frequency::Weekly {
                every: 1,
                weekdays: WeekdaySet::EMPTY
            },
            at9()
        ),
        CalendarError::NoWeekdays
    );
    assert_eq!(
        e(
            Frequency::Monthly {
                every: 1,
                days: MonthDays::EMPTY
            },
            at9()
        ),
        CalendarError::NoMonthDays
    );
    assert_eq!(
        e(Frequency::Daily { every: 1 }, TimeOfDay::every(0)),
        CalendarError::StepOutOfRange { seconds: 0 }
    );
    assert_eq!(
        e(
            Frequency::Daily { every: 1 },
            TimeOfDay::Every {
                step_seconds: 60,
                start: 0,
                end: 86_400
            }
        ),
        CalendarError::BadTime {
            found: "24:00".into()
        }
    );
    assert!(matches!(
        e(
            Frequency::Daily { every: 1 },
            TimeOfDay::Every {
                step_seconds: 60,
                start: 3600,
                end: 60
            }
        ),
        CalendarError::ReversedWindow { .. }
    ));
    assert_eq!(TimesOfDay::new(Vec::new()), Err(CalendarError::NoTimes));
    assert_eq!(
        TimesOfDay::new([86_400]),
        Err(CalendarError::BadTime {
            found: "24:00".into()
        })
    );
    let bounds = |from: &str, until: &str| {
        CalendarRule::new(
            Frequency::Daily { every: 1 },
            at9(),
            Some(t(from)),
            Some(t(until)),
        )
    };
    assert!(matches!(
        bounds("2026-01-02", "2026-01-01"),
        Err(CalendarError::NeverFires { .. })
    ));
    assert!(matches!(
        bounds("2026-01-01", "2026-01-01"),
        Err(CalendarError::NeverFires { .. })
    ));
    // Bounded, but no 09:00 inside.
    assert_eq!(
        bounds("2026-01-01T10:00", "2026-01-02T08:00")
            .unwrap_err()
            .to_string(),
        "calendar: the rule never fires: no time between 2026-01-01 10:00 and 2026-01-02 08:00 (exclusive) matches; widen the range or change the days or times"
    );
    assert!(bounds("2026-01-01T10:00", "2026-01-02T09:00:01").is_ok());
}

// ---- limits --------------------------------------------------------------------------------

#[test]
fn extreme_years_never_panic() {
    let rules = [
        rule("daily every 5m"),
        rule("daily every 7 days at 23:59:59"),
        rule("weekly every 3 weeks on sun at 00:00"),
        rule("weekly on mon-sun every 1s"),
        rule("monthly every 7 months on last,first weekend-day at 23:59:59"),
        rule("monthly on 31,last weekday at 00:00"),
        rule("daily at 12:00 from -9999-01-01 until 9999-12-31T23:59:59"),
    ];
    let edges = [
        t("-9999-01-01T00:00:00"),
        t("-9999-01-01T23:59:59"),
        t("-9999-12-31T23:59:59"),
        t("9999-12-31T23:59:59"),
        t("9999-12-31T00:00:00"),
        t("9999-01-01T00:00:00"),
        t("9998-12-31T23:59:59"),
    ];
    for r in &rules {
        for &e in &edges {
            if let Some(c) = r.next_civil(e) {
                assert!(c >= e && r.matches(c), "{r} next {e} = {c}");
            }
            if let Some(c) = r.prev_civil(e) {
                assert!(c <= e && r.matches(c), "{r} prev {e} = {c}");
            }
        }
    }
    let last = rule("daily at 23:59:59");
    assert_eq!(
        last.next_civil(t("9999-12-31T23:59:59")),
        Some(t("9999-12-31T23:59:59"))
    );
    let midnight = rule("daily at 00:00");
    assert_eq!(midnight.next_civil(t("9999-12-31T00:00:01")), None);
    assert_eq!(
        midnight.prev_civil(t("-9999-01-01T00:00:00")),
        Some(t("-9999-01-01"))
    );
    let noon = rule("daily at 12:00");
    assert_eq!(noon.prev_civil(t("-9999-01-01T11:59:59")), None);
}

#[test]
fn searches_give_up_after_about_400_years() {
    // Fires once every 800 years (January 1970, 2770, …).
    let r = rule("monthly every 9600 months on 1 at 00:00");
    assert_eq!(first(&r, "1970-01-01").unwrap(), "1970-01-01T00:00:00");
    assert_eq!(first(&r, "1970-01-01T00:00:01"), None);
    assert_eq!(first(&r, "2500-01-01").unwrap(), "2770-01-01T00:00:00");
    assert_eq!(r.prev_civil(t("2769-12-31")), None);
    assert_eq!(r.prev_civil(t("2300-01-01")), Some(t("1970-01-01")));
    let d = rule("daily every 4000000000 days at 00:00");
    assert_eq!(first(&d, "1970-01-01T00:00:01"), None);
    assert_eq!(d.prev_civil(t("2000-01-01")), Some(t("1970-01-01")));
}

// ---- text ----------------------------------------------------------------------------------

#[test]
fn display_round_trips() {
    for s in [
        "weekly on mon-fri every 1h between 06:00-22:30",
        "weekly on wed,sat at 09:00",
        "monthly on last at 20:00",
        "daily every 5m",
        "monthly every 3 months on second tue at 08:30",
        "monthly on 1,15,last weekday at 06:00:30",
        "daily every 2 days at 02:00 from 2026-01-01 until 2027-01-01",
        "daily at 00:00:01 from -0044-03-15T12:00 until 2026-01-01T00:00:30",
        "monthly on 1-5,31,first mon,fourth weekend-day,last,last weekday at 01:00,02:00",
        "weekly every 2 weeks on mon,wed,fri-sun every 15s between 00:00:05-23:59:59",
        "monthly every 7 months on first sun,third weekday every 7h",
    ] {
        let r = rule(s);
        assert_eq!(r.to_string(), s);
        assert_eq!(rule(&r.to_string()), r);
        assert_eq!(s.parse::<CalendarRule>().unwrap(), r);
    }
    for s in [
        "weekly mon-fri every 1h between 06:00-22:30",
        "MONTHLY EVERY 3 MONTHS ON 2nd Tue AT 8:30",
        "monthly on 1, 15, last weekday at 06:00:30",
        "daily every 2 day at 2:00 until 2027-01-01 from 2026-01-01",
        "daily at 02:00 from 2026-01-01 08:00:05",
        "weekly every 1 week on thursday every 90 sec between 1:00 and 2:00",
        "monthly on 4th day,1st day,last day at 00:00",
    ] {
        let r = rule(s);
        assert_eq!(rule(&r.to_string()), r, "{s} -> {r}");
    }
    assert_eq!(
        rule("monthly on 4th day,1st day,last day at 00:00").to_string(),
        "monthly on 1,4,last at 00:00"
    );
    assert_eq!(
        rule("daily at 02:00 from 2026-01-01 08:00:05").to_string(),
        "daily at 02:00 from 2026-01-01T08:00:05"
    );
}

#[test]
fn descriptions() {
    let d = |s: &str| rule(s).describe();
    assert_eq!(
        d("monthly on 1,15,last weekday at 06:00:30"),
        "at 06:00:30 on the 1st, 15th and last weekday of every month"
    );
    assert_eq!(
        d("monthly on 1-5,21,22,23 at 06:00"),
        "at 06:00 on the 1st through 5th and 21st through 23rd of every month"
    );
    assert_eq!(
        d("monthly on first weekend-day,last sun at 06:00"),
        "at 06:00 on the first weekend day and last Sunday of every month"
    );
    assert_eq!(
        d("weekly every 2 weeks on mon at 06:00"),
        "at 06:00 on Monday of every 2nd week counting from the week of 1970-01-01"
    );
    assert_eq!(
        d("daily every 2 days at 02:00 from 2026-01-01 until 2027-01-01"),
        "at 02:00 every 2 days, starting 2026-01-01 and ending before 2027-01-01"
    );
    assert_eq!(
        d("monthly every 11 months on 2 every 30m between 09:00-10:00"),
        "every 30 minutes from 09:00 to 10:00 on the 2nd of every 11th month counting from January 1970"
    );
    assert_eq!(d("weekly on sat every 1m"), "every minute on Saturday");
}

#[test]
fn error_messages() {
    let cases: &[(&str, &str)] = &[
        (
            "",
            "calendar: the rule is empty; write e.g. \"daily at 09:00\", \"weekly on mon-fri every 1h between 06:00-22:30\" or \"monthly on last at 20:00\"",
        ),
        (
            "hourly at 09:00",
            "calendar: a rule starts with \"daily\", \"weekly\" or \"monthly\", found \"hourly\"",
        ),
        (
            "weekly on mon-fri 09:00",
            "calendar: expected \"at\" or \"every\" after the days, found \"09:00\"",
        ),
        (
            "daily on mon at 09:00",
            "calendar: expected \"at\" or \"every\" after \"daily\", found \"on\"",
        ),
        (
            "weekly on mon",
            "calendar: expected \"at\" or \"every\" after the days, found the end of the rule",
        ),
        (
            "weekly at 09:00",
            "calendar: expected the weekdays, such as mon-fri or wed,sat after \"weekly\", found \"at\"",
        ),
        (
            "monthly every 2 weeks on 1 at 09:00",
            "calendar: expected \"months\" after \"every 2\", found \"weeks\"",
        ),
        (
            "weekly every 0 weeks on mon at 09:00",
            "calendar: \"0\" is not a valid interval; write a whole number of weeks from 1 up, e.g. \"every 2 weeks\"",
        ),
        (
            "daily at 25:00",
            "calendar: \"25:00\" is not a time of day; expected HH:MM or HH:MM:SS (00:00-23:59:59)",
        ),
        (
            "daily every 5x",
            "calendar: \"5x\" is not an interval; expected a number followed by s, m or h, e.g. \"every 15m\" or \"every 1h30m\"",
        ),
        (
            "daily every 24h",
            "calendar: an interval of 86400 seconds is out of range; expected 1s up to 23h59m59s (for a day or more, use \"daily every N days at HH:MM\")",
        ),
        (
            "daily every 1h between 22:00-06:00",
            "calendar: the window 22:00-06:00 ends before it starts; a window cannot cross midnight, so use two schedules (one between 22:00-23:59:59 and one between 00:00-06:00)",
        ),
        (
            "weekly on mun at 09:00",
            "calendar: unknown weekday \"mun\"; expected mon, tue, wed, thu, fri, sat or sun (or a range such as mon-fri, \"weekdays\" or \"weekends\")",
        ),
        (
            "monthly on 32 at 09:00",
            "calendar: \"32\" is not a day of the month; expected 1-31, a range such as 1-5, \"last\", \"last weekday\" or \"<first|second|third|fourth|last> <mon..sun|day|weekday|weekend-day>\"",
        ),
        (
            "monthly on fifth fri at 09:00",
            "calendar: \"fifth\" is not a day of the month; not every month has a fifth one, so it is not offered; use \"last\" (e.g. \"last fri\")",
        ),
        (
            "weekly on fri-mon at 09:00",
            "calendar: the range \"fri-mon\" runs backwards and ranges do not wrap around; write \"fri-sun,mon\"",
        ),
        (
            "monthly on 25-5 at 09:00",
            "calendar: the range \"25-5\" runs backwards and ranges do not wrap around; write \"25-31,1-5\"",
        ),
        (
            "daily at 09:00 from 2026-13-01",
            "calendar: \"2026-13-01\" is not a date; expected YYYY-MM-DD, optionally followed by THH:MM or THH:MM:SS",
        ),
        (
            "daily at 09:00 from 2026-01-01 from 2026-02-01",
            "calendar: \"from\" is given twice; give it at most once",
        ),
        (
            "daily at 09:00 tomorrow",
            "calendar: expected \"from\", \"until\" or nothing more after the time of day, found \"tomorrow\"",
        ),
        (
            "monthly on 2nd at 09:00",
            "calendar: expected a weekday, \"day\", \"weekday\" or \"weekend-day\" after \"2nd\", found \"at\"",
        ),
        (
            "daily at",
            "calendar: expected a time of day such as 09:00 after \"at\", found the end of the rule",
        ),
        (
            "daily at 09:00 until 2026-01-01 from 2026-01-01",
            "calendar: the rule never fires: it expires at 2026-01-01 (exclusive), which is not after it takes effect at 2026-01-01; move \"until\" later or \"from\" earlier",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(err(text).to_string(), *want, "{text}");
    }
    // The remaining variants come from the structured API.
    assert_eq!(
        CalendarError::NoWeekdays.to_string(),
        "calendar: a weekly rule needs at least one weekday; use e.g. mon-fri, or a daily rule for every day"
    );
    assert_eq!(
        CalendarError::NoMonthDays.to_string(),
        "calendar: a monthly rule needs at least one day of the month; use e.g. 1, last or first mon"
    );
    assert_eq!(
        CalendarError::NoTimes.to_string(),
        "calendar: \"at\" needs at least one time of day, e.g. \"at 09:00\""
    );
    // More malformed input, checked only for the variant.
    for text in [
        "weekly on mon-xyz at 09:00",
        "weekly on mon, at 09:00",
        "monthly on 1,",
        "monthly on 0 at 09:00",
        "monthly on 1-x at 09:00",
        "daily at 09:00,",
        "daily at 9",
        "daily every",
        "daily every 5",
        "daily every 0m",
        "daily every 99999999999999999999h",
        "daily every 1h between",
        "daily every 1h between 06:00",
        "daily every 1h between 06:00 -",
        "daily every 1h between 06:00-25:00",
        "daily every 1h between 06:00-",
        "daily at 09:00 from",
        "daily at 09:00 from 26-01-01",
        "daily at 09:00 from 2026-02-30",
        "daily at 09:00 from 2026-01-01T24:00",
        "daily every 2 days",
        "weekly every",
        "weekly every x weeks on mon at 09:00",
        "weekly every 2",
        "monthly",
        "monthly on at 09:00",
        "daily at 09:00 until 1970-01-01T09:00 from 1970-01-01T09:00:01",
        "daily at 09:00 until -9999-01-01",
        "weekly on mon-fri, every 1h",
        "weekly on é-mon at 09:00",
        "monthly on 1 at 09:00 from 2026-01-01tx",
    ] {
        let e = err(text);
        assert!(e.to_string().starts_with("calendar: "), "{text}: {e}");
        let body = e.to_string()["calendar: ".len()..].to_string();
        assert!(
            body.starts_with(|c: char| !c.is_uppercase()),
            "{text}: messages start lowercase: {e}"
        );
    }
}

#[test]
fn implements_the_civil_pattern_contract() {
    fn as_pattern(p: &dyn CivilPattern, from: Civil) -> (Option<Civil>, Option<Civil>, bool) {
        (p.next_civil(from), p.prev_civil(from), p.is_interval_like())
    }
    let r = rule("weekly on wed,sat at 09:00");
    assert_eq!(
        as_pattern(&r, t("2026-03-05")),
        (
            Some(t("2026-03-07T09:00")),
            Some(t("2026-03-04T09:00")),
            false
        )
    );
    let e = rule("daily every 5m");
    assert!(as_pattern(&e, t("2026-03-05")).2);
}
