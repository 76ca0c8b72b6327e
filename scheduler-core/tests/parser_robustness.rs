//! Robustness of the cron parser, the cron search and the zone lookup against hostile input.
//!
//! * Any string (arbitrary Unicode, or built from the cron alphabet) parses or is refused
//!   without a panic, in both day-match modes; an accepted expression re-parses from its own
//!   text to an equal value.
//! * For every expression that parses and any start in the years -9999..=9999, `next_civil` and
//!   `prev_civil` return quickly, and what they return matches, lies on the right side of the
//!   start, and has no other match between it and the start.
//! * Expressions that can never fire are refused at parse time; one that only runs out of
//!   years returns `None`.
//! * `Zone::get` never panics, whatever the name.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::Config;
use takt_core::Timestamp;
use takt_core::civil::Civil;
use takt_core::schedule::cron::{CronError, CronExpr, CronOptions, DayMatch};
use takt_core::schedule::{Rule, Schedule, Zone};

/// A search visits at most ~400 years of months; in a debug build that is well under a
/// millisecond. The bound only has to tell "bounded" from "walks second by second" (which would
/// take hours), with room for a loaded machine.
const SEARCH_BUDGET: Duration = Duration::from_millis(250);

fn config(cases: u32) -> Config {
    Config {
        cases,
        // A failure prints its shrunk input; no regression files are written into the tree.
        failure_persistence: None,
        ..Config::default()
    }
}

fn and() -> CronOptions {
    CronOptions {
        day_match: DayMatch::And,
    }
}

/// Parses in both modes; an accepted expression must survive formatting and re-parse to an
/// equal value from its own normalised text.
fn parse_both(text: &str) -> Result<(), TestCaseError> {
    for options in [CronOptions::default(), and()] {
        match CronExpr::parse_with(text, options) {
            Ok(e) => {
                let again = CronExpr::parse_with(e.as_str(), options);
                prop_assert_eq!(again.as_ref(), Ok(&e), "re-parsing {:?}", e.as_str());
                let _ = e.describe();
                let _ = e.to_string();
            }
            Err(err) => {
                let msg = err.to_string();
                prop_assert!(!msg.is_empty());
            }
        }
    }
    Ok(())
}

/// Fields made of the characters cron syntax uses, in any order.
fn cronish_field() -> impl Strategy<Value = String> {
    "[0-9*/,?LW#@A-Za-z-]{1,8}"
}

/// Whitespace between fields, including runs, tabs and newlines.
fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![" ", " ", " ", "  ", "\t", " \n "])
}

fn joined(fields: Vec<String>, seps: Vec<&'static str>) -> String {
    let mut out = String::new();
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(seps[i % seps.len()]);
        }
        out.push_str(f);
    }
    out
}

fn cronish_expr() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(cronish_field(), 1..=7),
        prop::collection::vec(separator(), 1..=6),
    )
        .prop_map(|(f, s)| joined(f, s))
}

/// An item of any field, often invalid for the field it lands in: values a little past each
/// field's range and every item kind of the syntax.
fn wild_item() -> BoxedStrategy<String> {
    let n = || 0u32..=64;
    prop_oneof![
        3 => n().prop_map(|v| v.to_string()),
        1 => Just("?".to_string()),
        1 => (n(), n()).prop_map(|(a, b)| format!("{a}-{b}")),
        1 => (0u32..=70).prop_map(|s| format!("*/{s}")),
        1 => (n(), 0u32..=40).prop_map(|(a, s)| format!("{a}/{s}")),
        1 => (0u32..=32).prop_map(|v| format!("L-{v}")),
        1 => (0u32..=33).prop_map(|v| format!("{v}W")),
        1 => (0u32..=8, 0u32..=6).prop_map(|(w, k)| format!("{w}#{k}")),
        1 => prop::sample::select(vec![
            "L", "LW", "W", "#", "L-", "5L", "FRI-MON", "mon-sun", "JAN/2", "*,*", "1,,2",
            "1-", "-1", "*/", "/5", "1/2/3", "1--2", "99999999999", "-", ",", "@daily",
            "22-2/2", "59-0/7", "L-2W", "L-40W", "L-W", "LW-2", "?/5", "?,1", "2030-2025",
            "7-0", "SAT-SUN/2",
        ])
        .prop_map(str::to_string),
    ]
    .boxed()
}

/// A list of 1-3 items for a field whose values run `lo..=hi`, mostly valid: values, ranges
/// (some backwards, which wrap around except in the year), steps up to a little past the span,
/// plus `extra` (names and the special items of the field), and now and then a wild item; or
/// now and then a bare `?`.
fn field(lo: u32, hi: u32, extra: Vec<&'static str>) -> BoxedStrategy<String> {
    let v = move || lo..=hi;
    let span = hi - lo + 1;
    let mut items = vec![
        (6, v().prop_map(|x| x.to_string()).boxed()),
        (1, Just("*".to_string()).boxed()),
        (
            2,
            (v(), v())
                .prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b)))
                .boxed(),
        ),
        (
            1,
            (v(), v(), 1..=span)
                .prop_map(|(a, b, st)| format!("{}-{}/{st}", a.max(b), a.min(b)))
                .boxed(),
        ),
        (
            1,
            (v(), v())
                .prop_map(|(a, b)| format!("{}-{}", a.max(b), a.min(b)))
                .boxed(),
        ),
        (2, (1..=span + 1).prop_map(|st| format!("*/{st}")).boxed()),
        (
            2,
            (v(), v(), 1..=span)
                .prop_map(|(a, b, st)| format!("{}-{}/{st}", a.min(b), a.max(b)))
                .boxed(),
        ),
        (
            1,
            (v(), 1..=span)
                .prop_map(|(a, st)| format!("{a}/{st}"))
                .boxed(),
        ),
        (1, wild_item()),
    ];
    if !extra.is_empty() {
        items.push((
            3,
            prop::sample::select(extra).prop_map(str::to_string).boxed(),
        ));
    }
    let item = prop::strategy::Union::new_weighted(items);
    let list = prop::collection::vec(item, 1..=3).prop_map(|v| v.join(","));
    prop_oneof![12 => list, 1 => Just("?".to_string())].boxed()
}

fn dom_field() -> BoxedStrategy<String> {
    let special = prop_oneof![
        (0u32..=30).prop_map(|v| format!("L-{v}")),
        (1u32..=31).prop_map(|v| format!("{v}W")),
        (0u32..=31).prop_map(|v| format!("L-{v}W")),
    ];
    prop_oneof![
        6 => field(1, 31, vec!["L", "LW", "lw", "L-0", "L-30", "1W", "31W", "15w", "L-0W", "l-30w", "28-3"]),
        2 => (field(1, 31, vec!["L", "LW"]), special).prop_map(|(f, s)| format!("{f},{s}")),
        1 => Just("?".to_string()),
    ]
    .boxed()
}

fn dow_field() -> BoxedStrategy<String> {
    let special = prop_oneof![
        (0u32..=7, 1u32..=5).prop_map(|(w, k)| format!("{w}#{k}")),
        (0u32..=7).prop_map(|w| format!("{w}L")),
    ];
    let names = vec![
        "SUN",
        "MON",
        "TUE",
        "WED",
        "THU",
        "FRI",
        "SAT",
        "MON-FRI",
        "sat-sat",
        "SUN-SAT",
        "FRIL",
        "fri#3",
        "SUN#5",
        "7L",
        "0#1",
        "MON-FRI/2",
        "FRI-MON",
        "sat-sun",
        "7-3/2",
        "6-0",
    ];
    prop_oneof![
        6 => field(0, 7, names),
        2 => (field(0, 7, vec!["MON", "SUN"]), special).prop_map(|(f, s)| format!("{f},{s}")),
        1 => Just("?".to_string()),
    ]
    .boxed()
}

fn month_field() -> BoxedStrategy<String> {
    field(
        1,
        12,
        vec![
            "JAN",
            "feb",
            "DEC",
            "JAN-JUN",
            "MAR-SEP/2",
            "APR,JUN,SEP,NOV",
            "NOV-FEB",
            "DEC-JAN/2",
        ],
    )
}

/// Years, mostly inside 1970-2199 and sometimes just outside it.
fn year_field() -> BoxedStrategy<String> {
    prop_oneof![
        1 => Just("*".to_string()),
        5 => field(1970, 2199, vec!["1969", "2200", "2025-2027", "2199", "1970"]),
    ]
    .boxed()
}

/// An expression of 5, 6 or 7 mostly valid fields, or a macro. Also says whether a year field
/// restricts it (a 7th field other than `*`).
fn plausible_expr() -> impl Strategy<Value = (String, bool)> {
    let hms = || {
        (
            field(0, 59, vec![]),
            field(0, 59, vec![]),
            field(0, 23, vec![]),
        )
    };
    let days = || (dom_field(), month_field(), dow_field());
    prop_oneof![
        4 => (hms(), days()).prop_map(|((_, m, h), (d, mo, w))| {
            (format!("{m} {h} {d} {mo} {w}"), false)
        }),
        4 => (hms(), days()).prop_map(|((s, m, h), (d, mo, w))| {
            (format!("{s} {m} {h} {d} {mo} {w}"), false)
        }),
        3 => (hms(), days(), year_field()).prop_map(|((s, m, h), (d, mo, w), y)| {
            let restricted = y != "*" && y != "?";
            (format!("{s} {m} {h} {d} {mo} {w} {y}"), restricted)
        }),
        1 => prop::sample::select(vec![
            "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
            "@every_minute", "@every_second", "@EVERY_SECOND", "@every", "@every_hour",
            "@reboot", "@", "@DAILY",
        ])
        .prop_map(|m| (m.to_string(), false)),
    ]
}

/// Any civil time in -9999..=9999, with the extremes and the years around the epoch and the
/// cron year range drawn more often.
fn civil() -> impl Strategy<Value = Civil> {
    let year = prop_oneof![
        4 => 1i16..=9999,
        1 => -9999i16..=9999,
        1 => prop::sample::select(vec![-9999i16, -9998, 0, 1, 1969, 1970, 2199, 2200, 9998, 9999]),
        2 => 1960i16..=2210,
    ];
    (year, 1u8..=12, 1u8..=31, 0u8..=23, 0u8..=59, 0u8..=59)
        .prop_filter_map("the day exists", |(y, mo, d, h, mi, s)| {
            Civil::new(y, mo, d, h, mi, s)
        })
}

/// One search, timed.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let began = Instant::now();
    let out = f();
    (out, began.elapsed())
}

/// Inside these years, a neighbour one second away is still a valid `Civil`, and a search of
/// ~400 years from it stays inside the supported range.
fn well_inside(c: Civil) -> bool {
    (-9998..=9998).contains(&c.year)
}

fn check_search(e: &CronExpr, from: Civil, year_restricted: bool) -> Result<(), TestCaseError> {
    let text = e.as_str();
    let (next, took) = timed(|| e.next_civil(from));
    prop_assert!(
        took < SEARCH_BUDGET,
        "next_civil({from}) of {text:?} took {took:?}"
    );
    match next {
        Some(c) => {
            prop_assert!(
                e.matches(c),
                "next_civil({from}) of {text:?} = {c} does not match"
            );
            prop_assert!(c >= from, "next_civil({from}) of {text:?} = {c} is earlier");
            prop_assert_eq!(e.next_civil(c), Some(c));
            if well_inside(from) && well_inside(c) && c > from {
                // Nothing matches in [from, c).
                let before = e.prev_civil(c.add_seconds(-1));
                prop_assert!(
                    before.is_none_or(|b| b < from),
                    "{text:?}: next_civil({from}) = {c} skips {before:?}"
                );
            }
        }
        None => {
            prop_assert!(
                !e.matches(from),
                "{text:?} matches {from} but next_civil is None"
            );
            // Without a year field every valid expression fires within a 400-year Gregorian
            // cycle, so only the end of the calendar can end the search.
            prop_assert!(
                year_restricted || from.year > 9999 - 402,
                "{text:?}: next_civil({from}) is None"
            );
        }
    }
    let (prev, took) = timed(|| e.prev_civil(from));
    prop_assert!(
        took < SEARCH_BUDGET,
        "prev_civil({from}) of {text:?} took {took:?}"
    );
    match prev {
        Some(c) => {
            prop_assert!(
                e.matches(c),
                "prev_civil({from}) of {text:?} = {c} does not match"
            );
            prop_assert!(c <= from, "prev_civil({from}) of {text:?} = {c} is later");
            prop_assert_eq!(e.prev_civil(c), Some(c));
            if well_inside(from) && well_inside(c) && c < from {
                // Nothing matches in (c, from].
                let after = e.next_civil(c.add_seconds(1));
                prop_assert!(
                    after.is_none_or(|a| a > from),
                    "{text:?}: prev_civil({from}) = {c} skips {after:?}"
                );
            }
        }
        None => {
            prop_assert!(
                !e.matches(from),
                "{text:?} matches {from} but prev_civil is None"
            );
            prop_assert!(
                year_restricted || from.year < -9999 + 402,
                "{text:?}: prev_civil({from}) is None"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(5000))]

    #[test]
    fn arbitrary_unicode_never_panics(s in any::<String>()) {
        parse_both(&s)?;
    }

    #[test]
    fn cron_alphabet_never_panics(s in cronish_expr()) {
        parse_both(&s)?;
    }
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn plausible_expressions_never_panic((s, _) in plausible_expr()) {
        parse_both(&s)?;
    }
}

proptest! {
    // An unknown name costs a "did you mean" search over every zone name (about 10 ms in a
    // debug build), so fewer cases here.
    #![proptest_config(config(300))]

    #[test]
    fn zone_lookup_never_panics(
        name in prop_oneof![
            "\\PC{0,40}",
            "[A-Za-z_/+0-9-]{0,40}",
            "(Europe|America|Etc|posix|right|\\.\\.)/[A-Za-z_+0-9-]{0,20}",
        ]
    ) {
        if let Ok(zone) = Zone::get(&name) {
            // A zone that resolves must also work in a schedule.
            let e = CronExpr::parse("0 0 2 * * *").expect("valid");
            let t = Timestamp::from_second(1_800_000_000).expect("in range");
            let _ = Schedule::new(Rule::Cron(e), zone).next_after(t);
        }
    }
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn searches_are_bounded_and_consistent(
        (text, year_restricted) in plausible_expr(),
        from in civil(),
        use_and in any::<bool>(),
    ) {
        let options = if use_and { and() } else { CronOptions::default() };
        if let Ok(e) = CronExpr::parse_with(&text, options) {
            check_search(&e, from, year_restricted)?;
        }
    }

}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn searches_from_the_calendar_edges((text, year_restricted) in plausible_expr()) {
        if let Ok(e) = CronExpr::parse(&text) {
            for from in [
                Civil::new(-9999, 1, 1, 0, 0, 0),
                Civil::new(-9999, 12, 31, 23, 59, 59),
                Civil::new(9999, 1, 1, 0, 0, 0),
                Civil::new(9999, 12, 31, 23, 59, 59),
                Civil::new(1969, 12, 31, 23, 59, 59),
                Civil::new(2199, 12, 31, 23, 59, 59),
                Civil::new(2200, 1, 1, 0, 0, 0),
            ] {
                check_search(&e, from.expect("valid"), year_restricted)?;
            }
        }
    }
}

#[test]
fn impossible_days_are_refused_at_parse_time() {
    for text in [
        "0 0 30 2 *",
        "0 0 31 2 *",
        "0 0 30,31 2 *",
        "0 0 31 4,6,9,11 *",
        "0 0 0 31 APR ?",
        "0 0 0 30W 2 ?",
        "0 0 0 L-29 2 ?",
        "0 0 0 L-29W 2 ?",
        "0 0 0 L-30W FEB,APR ?",
        "0 0 31-1/5 2 *",
        "0 0 30-2/4 FEB *",
        "0 0 0 31 2 * 2024-2030",
    ] {
        for options in [CronOptions::default(), and()] {
            match CronExpr::parse_with(text, options) {
                Err(e @ CronError::NeverFires { .. }) => {
                    assert!(e.to_string().contains("never fires"), "{text}: {e}");
                }
                other => panic!("{text}: expected a never-fires error, got {other:?}"),
            }
        }
    }
    // Both day fields restricted: OR fires on the weekday, AND never does.
    assert!(CronExpr::parse("0 0 30 2 MON").is_ok());
    let e = CronExpr::parse_with("0 0 30 2 MON", and()).unwrap_err();
    assert!(e.to_string().contains("never fires"), "{e}");
    // The fifth Monday of February exists only in a leap year that starts on a Monday.
    assert!(CronExpr::parse("0 0 ? 2 MON#5").is_ok());
}

#[test]
fn a_year_field_that_runs_out_returns_none() {
    // No 29 February in 2025-2027: the day rule can fire (so parsing accepts it) but not in
    // these years.
    let e = CronExpr::parse("0 0 0 29 2 ? 2025-2027").expect("accepted");
    for from in [
        Civil::new(1900, 1, 1, 0, 0, 0),
        Civil::new(2020, 6, 1, 12, 0, 0),
        Civil::new(2024, 2, 29, 0, 0, 1),
        Civil::new(2025, 1, 1, 0, 0, 0),
        Civil::new(9999, 12, 31, 23, 59, 59),
    ] {
        let from = from.expect("valid");
        let (next, took) = timed(|| e.next_civil(from));
        assert_eq!(next, None, "next from {from}");
        assert!(took < SEARCH_BUDGET, "next from {from} took {took:?}");
    }
    for from in [
        Civil::new(2030, 1, 1, 0, 0, 0),
        Civil::new(9999, 12, 31, 23, 59, 59),
        Civil::new(-9999, 1, 1, 0, 0, 0),
    ] {
        let from = from.expect("valid");
        assert_eq!(e.prev_civil(from), None, "prev from {from}");
    }
    for zone in [Zone::utc(), Zone::get("Europe/Berlin").expect("bundled")] {
        let s = Schedule::new(Rule::Cron(e.clone()), zone);
        let t = Timestamp::from_second(1_700_000_000).expect("in range");
        assert_eq!(s.next_after(t), None);
        assert_eq!(s.prev_before(t), None);
    }
    // One more year and it fires.
    let e = CronExpr::parse("0 0 0 29 2 ? 2025-2028").expect("accepted");
    let from = Civil::new(2020, 6, 1, 12, 0, 0).expect("valid");
    assert_eq!(e.next_civil(from), Civil::new(2028, 2, 29, 0, 0, 0));
}
