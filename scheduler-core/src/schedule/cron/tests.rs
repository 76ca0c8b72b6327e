use super::*;

fn c(s: &str) -> Civil {
    Civil::from_jiff(s.parse().unwrap())
}

fn cron(expr: &str) -> CronExpr {
    CronExpr::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

fn and(expr: &str) -> CronExpr {
    CronExpr::parse_with(
        expr,
        CronOptions {
            day_match: DayMatch::And,
        },
    )
    .unwrap()
}

/// The next `n` matches strictly after `from`.
fn next_n(e: &CronExpr, from: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = c(from).add_seconds(1);
    for _ in 0..n {
        match e.next_civil(cur) {
            Some(m) => {
                out.push(m.to_string());
                cur = m.add_seconds(1);
            }
            None => break,
        }
    }
    out
}

/// The previous `n` matches strictly before `from`.
fn prev_n(e: &CronExpr, from: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = c(from).add_seconds(-1);
    for _ in 0..n {
        match e.prev_civil(cur) {
            Some(m) => {
                out.push(m.to_string());
                cur = m.add_seconds(-1);
            }
            None => break,
        }
    }
    out
}

#[test]
fn five_fields_fire_on_the_minute() {
    let e = cron("*/5 * * * *");
    assert_eq!(
        next_n(&e, "2026-11-30T23:57:13", 3),
        [
            "2026-12-01T00:00:00",
            "2026-12-01T00:05:00",
            "2026-12-01T00:10:00"
        ]
    );
    assert!(e.is_interval_like());
    assert!(!cron("30 2 * * *").is_interval_like());
    assert!(cron("0 * * * *").is_interval_like());
    assert!(
        cron("0 0-23 * * *")
            .next_civil(c("2026-01-01T00:00:01"))
            .is_some()
    );
}

#[test]
fn six_fields_have_seconds() {
    let e = cron("15,45 * * * * *");
    assert_eq!(
        next_n(&e, "2026-01-01T00:00:50", 3),
        [
            "2026-01-01T00:01:15",
            "2026-01-01T00:01:45",
            "2026-01-01T00:02:15"
        ]
    );
    assert_eq!(
        prev_n(&e, "2026-01-01T00:00:10", 2),
        ["2025-12-31T23:59:45", "2025-12-31T23:59:15"]
    );
}

#[test]
fn seven_fields_have_years() {
    let e = cron("0 0 12 1 1 * 2030,2032");
    assert_eq!(
        next_n(&e, "2026-06-01T00:00:00", 3),
        ["2030-01-01T12:00:00", "2032-01-01T12:00:00"]
    );
    assert_eq!(
        prev_n(&e, "2031-01-01T00:00:00", 5),
        ["2030-01-01T12:00:00"]
    );
    let stepped = cron("0 0 0 1 1 ? 2030-2040/5");
    assert_eq!(
        next_n(&stepped, "2000-01-01T00:00:00", 5),
        [
            "2030-01-01T00:00:00",
            "2035-01-01T00:00:00",
            "2040-01-01T00:00:00"
        ]
    );
    let star = cron("0 0 0 1 1 ? *");
    assert_eq!(
        next_n(&star, "2300-06-01T00:00:00", 1),
        ["2301-01-01T00:00:00"]
    );
}

#[test]
fn lists_ranges_and_steps() {
    assert_eq!(
        next_n(&cron("0 8-10,17 * * *"), "2026-01-01T09:30:00", 4),
        [
            "2026-01-01T10:00:00",
            "2026-01-01T17:00:00",
            "2026-01-02T08:00:00",
            "2026-01-02T09:00:00"
        ]
    );
    assert_eq!(
        next_n(&cron("0 1-10/4 * * *"), "2026-01-01T00:00:00", 4),
        [
            "2026-01-01T01:00:00",
            "2026-01-01T05:00:00",
            "2026-01-01T09:00:00",
            "2026-01-02T01:00:00"
        ]
    );
    // a/n runs from a to the field's maximum.
    assert_eq!(
        next_n(&cron("50/5 * * * *"), "2026-01-01T00:00:00", 3),
        [
            "2026-01-01T00:50:00",
            "2026-01-01T00:55:00",
            "2026-01-01T01:50:00"
        ]
    );
}

#[test]
fn month_and_weekday_names() {
    let e = cron("0 0 * JAN,jul Sun");
    assert_eq!(
        next_n(&e, "2026-06-01T00:00:00", 2),
        ["2026-07-05T00:00:00", "2026-07-12T00:00:00"]
    );
    assert_eq!(cron("0 0 * * MON-FRI"), cron("0 0 * * 1-5"));
    // 0 and 7 are both Sunday.
    assert_eq!(cron("0 0 * * 7"), cron("0 0 * * 0"));
    assert_eq!(cron("0 0 * * 5-7"), cron("0 0 * * 0,5,6"));
}

#[test]
fn question_mark_means_no_restriction() {
    assert_eq!(
        next_n(&cron("0 0 0 ? * MON"), "2026-11-30T00:00:00", 1),
        ["2026-12-07T00:00:00"]
    );
    assert_eq!(
        next_n(&cron("0 0 0 15 * ?"), "2026-11-30T00:00:00", 1),
        ["2026-12-15T00:00:00"]
    );
}

#[test]
fn last_day_and_offsets() {
    let e = cron("0 2 L * *");
    assert_eq!(
        next_n(&e, "2024-01-31T03:00:00", 4),
        [
            "2024-02-29T02:00:00",
            "2024-03-31T02:00:00",
            "2024-04-30T02:00:00",
            "2024-05-31T02:00:00"
        ]
    );
    assert_eq!(
        prev_n(&e, "2024-03-01T00:00:00", 2),
        ["2024-02-29T02:00:00", "2024-01-31T02:00:00"]
    );
    assert_eq!(
        next_n(&cron("0 0 L-2 * *"), "2023-02-01T00:00:00", 2),
        ["2023-02-26T00:00:00", "2023-03-29T00:00:00"]
    );
    // L-30 only exists in 31-day months.
    assert_eq!(
        next_n(&cron("0 0 L-30 * *"), "2023-02-01T00:00:00", 2),
        ["2023-03-01T00:00:00", "2023-05-01T00:00:00"]
    );
}

#[test]
fn nearest_weekday() {
    // 2026-11-15 is a Sunday -> Monday 16th; 2026-08-15 is a Saturday -> Friday 14th.
    let e = cron("0 9 15W * *");
    assert_eq!(
        next_n(&e, "2026-11-01T00:00:00", 1),
        ["2026-11-16T09:00:00"]
    );
    assert_eq!(
        next_n(&e, "2026-08-01T00:00:00", 1),
        ["2026-08-14T09:00:00"]
    );
    // 1W on a Saturday (2026-08-01) moves forward to Monday the 3rd, never into July.
    assert_eq!(
        next_n(&cron("0 9 1W * *"), "2026-07-31T00:00:00", 1),
        ["2026-08-03T09:00:00"]
    );
    // 31W on a Sunday (2026-05-31) moves back to Friday the 29th, never into June.
    assert_eq!(
        next_n(&cron("0 9 31W * *"), "2026-05-01T00:00:00", 1),
        ["2026-05-29T09:00:00"]
    );
    // 31W does not fire in 30-day months.
    assert_eq!(
        next_n(&cron("0 9 31W * *"), "2026-06-01T00:00:00", 1),
        ["2026-07-31T09:00:00"]
    );
}

#[test]
fn last_weekday_of_month() {
    // 2026-05-31 is a Sunday -> Friday 29th; 2026-10-31 is a Saturday -> Friday 30th.
    let e = cron("0 18 LW * *");
    assert_eq!(
        next_n(&e, "2026-05-01T00:00:00", 1),
        ["2026-05-29T18:00:00"]
    );
    assert_eq!(
        next_n(&e, "2026-10-01T00:00:00", 2),
        ["2026-10-30T18:00:00", "2026-11-30T18:00:00"]
    );
}

#[test]
fn nth_weekday() {
    let e = cron("0 0 12 ? * FRI#3");
    assert_eq!(
        next_n(&e, "2026-11-01T00:00:00", 3),
        [
            "2026-11-20T12:00:00",
            "2026-12-18T12:00:00",
            "2027-01-15T12:00:00"
        ]
    );
    // The fifth Monday exists only in some months.
    assert_eq!(
        next_n(&cron("0 0 0 ? * 1#5"), "2026-01-01T00:00:00", 3),
        [
            "2026-03-30T00:00:00",
            "2026-06-29T00:00:00",
            "2026-08-31T00:00:00"
        ]
    );
    // The fifth Monday in February needs a leap year whose February starts on a Monday.
    assert_eq!(
        next_n(&cron("0 0 0 ? 2 1#5"), "2026-01-01T00:00:00", 1),
        ["2044-02-29T00:00:00"]
    );
}

#[test]
fn last_given_weekday() {
    let e = cron("0 0 20 ? * 5L");
    assert_eq!(
        next_n(&e, "2026-11-01T00:00:00", 2),
        ["2026-11-27T20:00:00", "2026-12-25T20:00:00"]
    );
    assert_eq!(cron("0 0 20 ? * FRIL"), e);
    assert_eq!(
        prev_n(&e, "2026-12-01T00:00:00", 1),
        ["2026-11-27T20:00:00"]
    );
}

#[test]
fn macros() {
    for (m, plain) in [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ] {
        assert_eq!(cron(m).as_str(), m);
        assert_eq!(
            next_n(&cron(m), "2026-11-30T12:34:56", 5),
            next_n(&cron(plain), "2026-11-30T12:34:56", 5),
            "{m}"
        );
    }
    assert_eq!(
        next_n(&cron("@weekly"), "2026-11-30T00:00:00", 1),
        ["2026-12-06T00:00:00"]
    );
}

#[test]
fn day_fields_combine_with_or_by_default() {
    // Vixie: the 1st and 15th of the month, and every Monday.
    let e = cron("0 0 1,15 * MON");
    assert_eq!(
        next_n(&e, "2026-11-30T00:00:00", 4),
        [
            "2026-12-01T00:00:00",
            "2026-12-07T00:00:00",
            "2026-12-14T00:00:00",
            "2026-12-15T00:00:00"
        ]
    );
    // AND: only a Monday that is the 1st or the 15th.
    assert_eq!(
        next_n(&and("0 0 1,15 * MON"), "2026-11-30T00:00:00", 2),
        ["2027-02-01T00:00:00", "2027-02-15T00:00:00"]
    );
    // `*/2` counts as restricted (unlike Vixie's "starts with *" rule).
    assert_eq!(
        next_n(&cron("0 0 */10 * MON"), "2026-11-30T00:00:00", 2),
        ["2026-12-01T00:00:00", "2026-12-07T00:00:00"]
    );
    // With one side unrestricted the other decides, in both modes.
    assert!(cron("0 0 * * MON").matches(c("2026-11-30T00:00:00")));
    assert!(!and("0 0 * * MON").matches(c("2026-12-01T00:00:00")));
}

#[test]
fn impossible_dates_are_skipped_or_refused() {
    // 31 fires only in months that have it.
    assert_eq!(
        next_n(&cron("0 0 31 * *"), "2026-03-31T00:00:00", 3),
        [
            "2026-05-31T00:00:00",
            "2026-07-31T00:00:00",
            "2026-08-31T00:00:00"
        ]
    );
    // 29 February waits for a leap year.
    assert_eq!(
        next_n(&cron("0 0 29 2 *"), "2025-01-01T00:00:00", 2),
        ["2028-02-29T00:00:00", "2032-02-29T00:00:00"]
    );
    // Never: refused at parse time.
    assert!(matches!(
        CronExpr::parse("0 0 30 2 *"),
        Err(CronError::NeverFires { .. })
    ));
    // Never, because of the year field: no next fire, after bounded work.
    let e = cron("0 0 0 29 2 ? 2025-2027");
    assert_eq!(e.next_civil(c("2020-01-01T00:00:00")), None);
    assert_eq!(e.prev_civil(c("2030-01-01T00:00:00")), None);
    // A year field that is over.
    assert_eq!(
        cron("0 0 0 1 1 ? 1999").next_civil(c("2026-01-01T00:00:00")),
        None
    );
}

#[test]
fn searches_are_bounded_at_the_ends_of_time() {
    let e = cron("0 0 29 2 *");
    assert_eq!(e.next_civil(c("9999-03-01T00:00:00")), None);
    assert_eq!(
        e.prev_civil(Civil::new(-9999, 1, 1, 0, 0, 0).unwrap()),
        None
    );
    assert_eq!(
        cron("* * * * * *").next_civil(c("9999-12-31T23:59:59")),
        Some(c("9999-12-31T23:59:59"))
    );
    assert_eq!(cron("* * * * *").next_civil(c("9999-12-31T23:59:01")), None);
}

#[test]
fn next_is_inclusive_and_prev_mirrors_next() {
    let exprs = [
        "*/7 * * * * *",
        "0 0 L * *",
        "0 30 9 ? * MON-FRI",
        "0 0 12 ? * 5#3",
        "0 0 LW * *",
        "0 0 15W * *",
        "0 0 1,15 * MON",
    ];
    for expr in exprs {
        let e = cron(expr);
        let mut cur = c("2026-01-01T00:00:00");
        for _ in 0..50 {
            let m = e.next_civil(cur).unwrap();
            assert!(e.matches(m), "{expr}: {m}");
            assert_eq!(e.next_civil(m), Some(m), "{expr}: next is inclusive");
            assert_eq!(e.prev_civil(m), Some(m), "{expr}: prev is inclusive");
            if cur < m {
                assert_eq!(
                    e.prev_civil(m.add_seconds(-1)).map(|p| p < cur),
                    Some(true),
                    "{expr}"
                );
            }
            cur = m.add_seconds(1);
        }
    }
}

/// The allowed values of every field, ignoring whether the expression is interval-like (which
/// depends on how a field was written, not only on the values it allows).
fn same_values(a: &CronExpr, b: &CronExpr) -> bool {
    (a.seconds, a.minutes, a.hours, a.months, a.years, &a.days)
        == (b.seconds, b.minutes, b.hours, b.months, b.years, &b.days)
}

#[track_caller]
fn assert_same_values(wrapped: &str, written_out: &str) {
    assert!(
        same_values(&cron(wrapped), &cron(written_out)),
        "{wrapped} should allow exactly what {written_out} allows"
    );
}

#[test]
fn ranges_wrap_around_in_every_field_but_the_year() {
    // A night shift: 22:00 through 02:00.
    assert_eq!(
        next_n(&cron("0 22-2 * * *"), "2026-01-01T21:00:00", 6),
        [
            "2026-01-01T22:00:00",
            "2026-01-01T23:00:00",
            "2026-01-02T00:00:00",
            "2026-01-02T01:00:00",
            "2026-01-02T02:00:00",
            "2026-01-02T22:00:00"
        ]
    );
    assert_eq!(
        prev_n(&cron("0 22-2 * * *"), "2026-01-02T12:00:00", 2),
        ["2026-01-02T02:00:00", "2026-01-02T01:00:00"]
    );
    assert_same_values("0 22-2 * * *", "0 22,23,0,1,2 * * *");
    assert_same_values("50-10 * * * * *", "0-10,50-59 * * * * *");
    assert_same_values("50-10 * * * *", "0-10,50-59 * * * *");
    // Everything from one value round to the one before it.
    assert_same_values("59-58 * * * * *", "* * * * * *");
    assert_same_values("0 0 28-3 * *", "0 0 1-3,28-31 * *");
    assert_same_values("0 0 1 NOV-FEB *", "0 0 1 1,2,11,12 *");
    assert_same_values("0 0 1 12-1 *", "0 0 1 1,12 *");
    // Weekdays wrap from Saturday to Sunday; 7 is Sunday at either end.
    assert_same_values("0 0 * * FRI-MON", "0 0 * * 5,6,0,1");
    assert_same_values("0 0 * * fri-mon", "0 0 * * 0,1,5,6");
    assert_same_values("0 0 * * SAT-SUN", "0 0 * * 0,6");
    assert_same_values("0 0 * * 6-0", "0 0 * * 0,6");
    assert_same_values("0 0 * * FRI-SUN", "0 0 * * 5-7");
    assert_same_values("0 0 * * 7-2", "0 0 * * 0-2");
    assert_same_values("0 0 * * 7-7", "0 0 * * 0");
    assert_same_values("0 0 * * 1-0", "0 0 * * 0-6");
    // A wrapped range is one item: it combines with others in a list.
    assert_same_values("0 0 * * FRI-MON,WED", "0 0 * * 0,1,3,5,6");
    // NOV-FEB happens in January of the following year.
    assert_eq!(
        next_n(&cron("0 0 1 NOV-FEB *"), "2026-10-15T00:00:00", 5),
        [
            "2026-11-01T00:00:00",
            "2026-12-01T00:00:00",
            "2027-01-01T00:00:00",
            "2027-02-01T00:00:00",
            "2027-11-01T00:00:00"
        ]
    );
    // 28-3 is the 28th to the end of the month and the 1st to the 3rd.
    assert_eq!(
        next_n(&cron("0 0 28-3 * *"), "2026-02-02T12:00:00", 6),
        [
            "2026-02-03T00:00:00",
            "2026-02-28T00:00:00",
            "2026-03-01T00:00:00",
            "2026-03-02T00:00:00",
            "2026-03-03T00:00:00",
            "2026-03-28T00:00:00"
        ]
    );
}

#[test]
fn steps_count_across_the_wrap() {
    // 22, 0, 2: the step goes on from 23 to 0 as if the hours continued (as Cronos and Quartz
    // do), rather than restarting at 0.
    assert_same_values("0 0 22-2/2 * * *", "0 0 0,2,22 * * *");
    assert_same_values("0 0 23-2/2 * * *", "0 0 1,23 * * *");
    assert_same_values("57-5/3 * * * * *", "0,3,57 * * * * *");
    assert_same_values("0 56-4/4 * * * *", "0 0,4,56 * * * *");
    assert_same_values("0 0 28-3/2 * *", "0 0 1,3,28,30 * *");
    assert_same_values("0 0 1 OCT-MAR/2 *", "0 0 1 2,10,12 *");
    assert_same_values("0 0 * * SAT-MON/2", "0 0 * * 1,6");
    assert_same_values("0 0 * * 5-0/2", "0 0 * * 0,5");
    assert_same_values("0 0 * * 7-3/2", "0 0 * * 0,2");
    assert_eq!(
        next_n(&cron("0 0 22-2/2 * * *"), "2026-01-01T12:00:00", 4),
        [
            "2026-01-01T22:00:00",
            "2026-01-02T00:00:00",
            "2026-01-02T02:00:00",
            "2026-01-02T22:00:00"
        ]
    );
}

#[test]
fn nearest_weekday_before_the_last_day() {
    // L-nW: the weekday nearest the n-th day before the last, by the same rule as nW.
    // 2026-03-29 is a Sunday -> Monday the 30th; 2026-11-28 a Saturday -> Friday the 27th.
    let e = cron("0 0 L-2W * ?");
    assert_eq!(
        next_n(&e, "2026-03-01T00:00:00", 3),
        [
            "2026-03-30T00:00:00",
            "2026-04-28T00:00:00",
            "2026-05-29T00:00:00"
        ]
    );
    assert_eq!(
        next_n(&e, "2026-11-01T00:00:00", 1),
        ["2026-11-27T00:00:00"]
    );
    assert_eq!(
        prev_n(&e, "2026-04-01T00:00:00", 1),
        ["2026-03-30T00:00:00"]
    );
    // A Sunday target moves forward when the month has room: 2026-08-30 -> Monday the 31st.
    assert_eq!(
        next_n(&cron("0 0 L-1W 8 ?"), "2026-01-01T00:00:00", 1),
        ["2026-08-31T00:00:00"]
    );
    // L-30W is the weekday nearest the 1st of a 31-day month, never leaving it: 2026-08-01 is
    // a Saturday -> Monday the 3rd; other months have no such day.
    assert_eq!(
        next_n(&cron("0 0 L-30W * ?"), "2026-07-02T00:00:00", 2),
        ["2026-08-03T00:00:00", "2026-10-01T00:00:00"]
    );
    // L-0W is LW.
    assert_eq!(cron("0 0 L-0W * ?"), cron("0 0 LW * ?"));
    // The calendar facts Cronos's own tests check (2016 and 2017).
    for (expr, from, want) in [
        ("0 0 L-1W * ?", "2017-01-01T00:00:00", "2017-01-30T00:00:00"),
        ("0 0 L-2W * ?", "2017-01-01T00:00:00", "2017-01-30T00:00:00"),
        ("0 0 L-3W * ?", "2017-01-01T00:00:00", "2017-01-27T00:00:00"),
        ("0 0 L-4W * ?", "2017-01-01T00:00:00", "2017-01-27T00:00:00"),
        ("0 0 L-0W * ?", "2016-02-01T00:00:00", "2016-02-29T00:00:00"),
        ("0 0 L-1W * ?", "2016-02-01T00:00:00", "2016-02-29T00:00:00"),
        ("0 0 L-1W * ?", "2017-02-01T00:00:00", "2017-02-27T00:00:00"),
        ("0 0 L-2W * ?", "2016-02-01T00:00:00", "2016-02-26T00:00:00"),
        ("0 0 L-2W * ?", "2017-02-01T00:00:00", "2017-02-27T00:00:00"),
        ("0 0 L-3W * ?", "2017-02-01T00:00:00", "2017-02-24T00:00:00"),
    ] {
        assert_eq!(
            cron(expr).next_civil(c(from)),
            Some(c(want)),
            "{expr} from {from}"
        );
    }
    // In a list with other day items.
    assert_eq!(
        next_n(&cron("0 0 1,L-2W * ?"), "2026-02-02T00:00:00", 2),
        ["2026-02-26T00:00:00", "2026-03-01T00:00:00"]
    );
}

#[test]
fn question_mark_stands_for_star_in_every_field() {
    assert!(same_values(&cron("? ? ? ? ? ?"), &cron("* * * * * *")));
    assert!(same_values(&cron("0 ? 9 ? * MON"), &cron("0 * 9 ? * MON")));
    assert!(same_values(&cron("0 0 12 1 ? ?"), &cron("0 0 12 1 * ?")));
    assert_eq!(cron("0 0 12 * * ? ?"), cron("0 0 12 * * ? *"));
    assert!(cron("? * * * * *").is_interval_like());
}

#[test]
fn every_second_and_every_minute_macros() {
    for (m, plain) in [
        ("@every_second", "* * * * * *"),
        ("@every_minute", "* * * * *"),
    ] {
        assert_eq!(cron(m).as_str(), m);
        assert_eq!(cron(m), cron(plain), "{m}");
        assert!(cron(m).is_interval_like(), "{m}");
    }
    assert_eq!(cron("@EVERY_Minute").as_str(), "@every_minute");
    assert_eq!(
        next_n(&cron("@every_second"), "2026-12-31T23:59:58", 3),
        [
            "2026-12-31T23:59:59",
            "2027-01-01T00:00:00",
            "2027-01-01T00:00:01"
        ]
    );
}

/// Interval-like (both passes of a fold) is decided by how the second, minute and hour fields
/// are written, as in Cronos: `*`, `?`, a range or a step makes an expression interval-like; a
/// value or a list of values keeps it fixed-time. The day fields never count.
#[test]
fn interval_like_is_a_star_range_or_step_in_the_time_fields() {
    for (expr, interval) in [
        ("30 2 * * *", false),
        ("0 30 9 * * *", false),
        ("0,30 9 * * *", false),
        ("0 30 1,9 * * *", false),
        ("0 0 9 * * MON-FRI", false),
        ("0 0 9 1-5 * *", false),
        ("0 0 9 */2 * *", false),
        ("0 0 9 * JAN-MAR/2 * 2030-2040", false),
        ("@daily", false),
        ("@weekly", false),
        ("*/5 * * * *", true),
        ("0 * * * *", true),
        ("0 30 */1 * * *", true),
        ("0 30 0/1 * * *", true),
        ("0 30 9/1 * * *", true),
        ("0 30 0-23/1 * * *", true),
        ("0 30 1-9 * * *", true),
        ("0 30 22-2 * * *", true),
        ("0 0-30 1 * * *", true),
        ("10-20 0 1 * * *", true),
        ("0 5,10-12 1 * * *", true),
        ("0 5 1,*/6 * * *", true),
        ("? 0 1 * * *", true),
        ("@hourly", true),
        ("@every_minute", true),
    ] {
        assert_eq!(cron(expr).is_interval_like(), interval, "{expr}");
    }
}
