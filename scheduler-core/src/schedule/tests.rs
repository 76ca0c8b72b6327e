//! Zone and daylight-saving behaviour of schedules. Expected instants were worked out from the
//! tz rules by hand and are cross-checked by the invariants at the bottom.

use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn zone(name: &str) -> Zone {
    Zone::get(name).unwrap()
}

fn cron_in(expr: &str, tz: &str) -> Schedule {
    Schedule::new(Rule::Cron(CronExpr::parse(expr).unwrap()), zone(tz))
}

fn policy(gap: GapPolicy, fold: FoldPolicy) -> DstPolicy {
    DstPolicy { gap, fold }
}

/// `2026-03-08T03:00:00-04:00`, with ` shifted from …` or ` skipped …` for those kinds.
fn show(o: &Occurrence) -> String {
    let base = format!("{}{}", o.local(), format_offset(o.offset_seconds));
    match o.kind {
        OccurrenceKind::Fire => base,
        OccurrenceKind::FireShifted => format!("{base} shifted from {}", o.nominal),
        OccurrenceKind::Skipped(r) => format!("{base} skipped {} ({r})", o.nominal),
    }
}

fn take(s: &Schedule, from: &str, n: usize) -> Vec<String> {
    s.iter_after(ts(from)).take(n).map(|o| show(&o)).collect()
}

#[test]
fn new_york_fixed_time_in_the_spring_gap_shifts_or_skips() {
    let s = cron_in("30 2 * * *", "America/New_York");
    assert_eq!(
        take(&s, "2026-03-07T05:00:00Z", 3),
        [
            "2026-03-07T02:30:00-05:00",
            "2026-03-08T03:00:00-04:00 shifted from 2026-03-08T02:30:00",
            "2026-03-09T02:30:00-04:00"
        ]
    );
    let skip = s.with_dst(policy(GapPolicy::Skip, FoldPolicy::Auto));
    assert_eq!(
        take(&skip, "2026-03-07T05:00:00Z", 3),
        [
            "2026-03-07T02:30:00-05:00",
            "2026-03-08T03:00:00-04:00 skipped 2026-03-08T02:30:00 (dst gap: the wall-clock time does not exist)",
            "2026-03-09T02:30:00-04:00"
        ]
    );
}

#[test]
fn new_york_fixed_time_in_the_autumn_fold_fires_once_unless_told_otherwise() {
    let s = cron_in("30 1 * * *", "America/New_York");
    let once = [
        "2026-10-31T01:30:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ];
    assert_eq!(take(&s, "2026-10-31T00:00:00-04:00", 3), once);
    // Asking from inside the second pass does not fire the repeated 01:30 again.
    assert_eq!(
        take(&s, "2026-11-01T01:10:00-05:00", 1),
        ["2026-11-02T01:30:00-05:00"]
    );
    let both = s.with_dst(policy(GapPolicy::Shift, FoldPolicy::Both));
    assert_eq!(
        take(&both, "2026-10-31T00:00:00-04:00", 4),
        [
            "2026-10-31T01:30:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-02T01:30:00-05:00"
        ]
    );
}

#[test]
fn new_york_interval_like_follows_elapsed_time_both_ways() {
    let s = cron_in("*/30 * * * *", "America/New_York");
    assert_eq!(
        take(&s, "2026-11-01T00:45:00-04:00", 5),
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-01T02:00:00-05:00"
        ]
    );
    // From inside the first pass the second pass comes next.
    assert_eq!(
        take(&s, "2026-11-01T01:40:00-04:00", 1),
        ["2026-11-01T01:00:00-05:00"]
    );
    assert_eq!(
        take(&s, "2026-03-08T01:15:00-05:00", 3),
        [
            "2026-03-08T01:30:00-05:00",
            "2026-03-08T03:00:00-04:00",
            "2026-03-08T03:30:00-04:00"
        ]
    );
    let once = s
        .clone()
        .with_dst(policy(GapPolicy::Shift, FoldPolicy::Once));
    assert_eq!(
        take(&once, "2026-11-01T00:45:00-04:00", 3),
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T02:00:00-05:00"
        ]
    );
    let skip = s.with_dst(policy(GapPolicy::Skip, FoldPolicy::Auto));
    assert_eq!(
        take(&skip, "2026-03-08T01:15:00-05:00", 4),
        [
            "2026-03-08T01:30:00-05:00",
            "2026-03-08T03:00:00-04:00 skipped 2026-03-08T02:00:00 (dst gap: the wall-clock time does not exist)",
            "2026-03-08T03:00:00-04:00 skipped 2026-03-08T02:30:00 (dst gap: the wall-clock time does not exist)",
            "2026-03-08T03:00:00-04:00"
        ]
    );
}

/// Cronos's rule, which the README promises: a range or a step in the second, minute or hour
/// field makes a rule interval-like, so it fires in both passes of a fold; `a/n` is a step like
/// `*/n`. A value or a list of values stays fixed-time and fires once.
#[test]
fn new_york_ranges_and_every_step_spelling_fire_in_both_passes() {
    let twice = [
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-01T02:30:00-05:00",
    ];
    for expr in [
        "0 30 1-9 * * *",
        "0 30 0/1 * * *",
        "0 30 */1 * * *",
        "0 30 0-23/1 * * *",
        "0 30 22-9 * * *",
    ] {
        let s = cron_in(expr, "America/New_York");
        assert_eq!(take(&s, "2026-11-01T00:45:00-04:00", 3), twice, "{expr}");
        // Backwards too: from the second pass, its own 01:30 comes before the first pass's.
        assert_eq!(
            s.prev_before(ts("2026-11-01T02:00:00-05:00"))
                .map(|o| show(&o)),
            Some("2026-11-01T01:30:00-05:00".to_string()),
            "{expr}"
        );
    }
    assert_eq!(
        take(
            &cron_in("0 30 1 * * *", "America/New_York"),
            "2026-11-01T00:45:00-04:00",
            2
        ),
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]
    );
    assert_eq!(
        take(
            &cron_in("0 30 1,9 * * *", "America/New_York"),
            "2026-11-01T00:45:00-04:00",
            2
        ),
        ["2026-11-01T01:30:00-04:00", "2026-11-01T09:30:00-05:00"]
    );
    // A minute range inside the repeated hour follows both passes minute by minute.
    let s = cron_in("0 0-1 1 * * *", "America/New_York");
    assert_eq!(
        take(&s, "2026-11-01T00:45:00-04:00", 4),
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:01:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:01:00-05:00"
        ]
    );
}

#[test]
fn berlin_both_directions() {
    let s = cron_in("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        take(&s, "2026-03-28T00:00:00+01:00", 3),
        [
            "2026-03-28T02:30:00+01:00",
            "2026-03-29T03:00:00+02:00 shifted from 2026-03-29T02:30:00",
            "2026-03-30T02:30:00+02:00"
        ]
    );
    assert_eq!(
        take(&s, "2026-10-24T00:00:00+02:00", 3),
        [
            "2026-10-24T02:30:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-26T02:30:00+01:00"
        ]
    );
    let hourly = cron_in("0 * * * *", "Europe/Berlin");
    assert_eq!(
        take(&hourly, "2026-10-25T01:30:00+02:00", 4),
        [
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T03:00:00+01:00",
            "2026-10-25T04:00:00+01:00"
        ]
    );
    assert_eq!(
        cron_in("0 2 L * *", "Europe/Berlin").describe(),
        "at 02:00 on the last day of every month, Europe/Berlin"
    );
}

#[test]
fn lord_howe_half_hour_shifts() {
    // DST starts 2026-10-04 02:00 (+10:30 -> +11:00), ends 2026-04-05 02:00 (+11:00 -> +10:30).
    let s = cron_in("15 2 * * *", "Australia/Lord_Howe");
    assert_eq!(
        take(&s, "2026-10-03T00:00:00+10:30", 3),
        [
            "2026-10-03T02:15:00+10:30",
            "2026-10-04T02:30:00+11:00 shifted from 2026-10-04T02:15:00",
            "2026-10-05T02:15:00+11:00"
        ]
    );
    let f = cron_in("45 1 * * *", "Australia/Lord_Howe");
    assert_eq!(
        take(&f, "2026-04-04T00:00:00+11:00", 3),
        [
            "2026-04-04T01:45:00+11:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-06T01:45:00+10:30"
        ]
    );
    let q = cron_in("*/15 * * * *", "Australia/Lord_Howe");
    assert_eq!(
        take(&q, "2026-04-05T01:20:00+11:00", 5),
        [
            "2026-04-05T01:30:00+11:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:30:00+10:30",
            "2026-04-05T01:45:00+10:30",
            "2026-04-05T02:00:00+10:30"
        ]
    );
}

#[test]
fn cairo_midnight_transitions() {
    // DST starts Friday 2026-04-24 00:00 -> 01:00 and ends Thursday 2026-10-29 24:00 -> 23:00.
    let s = cron_in("0 0 * * *", "Africa/Cairo");
    assert_eq!(
        take(&s, "2026-04-22T12:00:00+02:00", 3),
        [
            "2026-04-23T00:00:00+02:00",
            "2026-04-24T01:00:00+03:00 shifted from 2026-04-24T00:00:00",
            "2026-04-25T00:00:00+03:00"
        ]
    );
    let late = cron_in("30 23 * * *", "Africa/Cairo");
    assert_eq!(
        take(&late, "2026-10-28T12:00:00+03:00", 3),
        [
            "2026-10-28T23:30:00+03:00",
            "2026-10-29T23:30:00+03:00",
            "2026-10-30T23:30:00+02:00"
        ]
    );
    let both = late.with_dst(policy(GapPolicy::Shift, FoldPolicy::Both));
    assert_eq!(
        take(&both, "2026-10-29T12:00:00+03:00", 2),
        ["2026-10-29T23:30:00+03:00", "2026-10-29T23:30:00+02:00"]
    );
}

#[test]
fn santiago_midnight_transitions() {
    // DST ends Saturday 2026-04-04 24:00 -> 23:00 and starts Sunday 2026-09-06 00:00 -> 01:00.
    let s = cron_in("0 0 * * *", "America/Santiago");
    assert_eq!(
        take(&s, "2026-09-04T12:00:00-04:00", 3),
        [
            "2026-09-05T00:00:00-04:00",
            "2026-09-06T01:00:00-03:00 shifted from 2026-09-06T00:00:00",
            "2026-09-07T00:00:00-03:00"
        ]
    );
    let late = cron_in("15 23 * * *", "America/Santiago");
    assert_eq!(
        take(&late, "2026-04-03T12:00:00-03:00", 3),
        [
            "2026-04-03T23:15:00-03:00",
            "2026-04-04T23:15:00-03:00",
            "2026-04-05T23:15:00-04:00"
        ]
    );
}

#[test]
fn tehran_past_transitions_and_no_dst_since_2022() {
    // 2021: DST started 03-22 00:00 (+03:30 -> +04:30), ended 09-22 00:00 -> 09-21 23:00.
    let s = cron_in("30 0 * * *", "Asia/Tehran");
    assert_eq!(
        take(&s, "2021-03-20T12:00:00+03:30", 3),
        [
            "2021-03-21T00:30:00+03:30",
            "2021-03-22T01:00:00+04:30 shifted from 2021-03-22T00:30:00",
            "2021-03-23T00:30:00+04:30"
        ]
    );
    let late = cron_in("30 23 * * *", "Asia/Tehran");
    assert_eq!(
        take(&late, "2021-09-20T12:00:00+04:30", 3),
        [
            "2021-09-20T23:30:00+04:30",
            "2021-09-21T23:30:00+04:30",
            "2021-09-22T23:30:00+03:30"
        ]
    );
    assert_eq!(
        take(&s, "2025-03-20T12:00:00+03:30", 3),
        [
            "2025-03-21T00:30:00+03:30",
            "2025-03-22T00:30:00+03:30",
            "2025-03-23T00:30:00+03:30"
        ]
    );
}

const DST_ZONES: [&str; 6] = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Africa/Cairo",
    "America/Santiago",
    "Asia/Tehran",
];

/// Interval-like rules measure elapsed time: across every transition of 2021 and 2026 in every
/// test zone, consecutive fires of "every 15 minutes" are exactly 900 s apart, and `prev_before`
/// walks the same sequence backwards.
#[test]
fn interval_like_rules_keep_elapsed_spacing_through_every_transition() {
    for name in DST_ZONES {
        let s = cron_in("*/15 * * * *", name);
        for year in ["2021", "2026"] {
            let start = ts(&format!("{year}-01-01T00:00:00Z"));
            let end = ts(&format!(
                "{}-01-01T00:00:00Z",
                year.parse::<i32>().unwrap() + 1
            ));
            let mut prev: Option<Occurrence> = None;
            for o in s.iter_after(start) {
                if o.at >= end {
                    break;
                }
                assert!(o.fires(), "{name}: {}", show(&o));
                if let Some(p) = prev {
                    assert_eq!(
                        o.at.as_second() - p.at.as_second(),
                        900,
                        "{name}: {} -> {}",
                        show(&p),
                        show(&o)
                    );
                    assert_eq!(s.prev_before(o.at), Some(p), "{name}: prev of {}", show(&o));
                }
                prev = Some(o);
            }
        }
    }
}

/// Fixed-time rules fire exactly once per local calendar day, also on transition days, and
/// never twice at one instant; with `Skip` the gap day has a skip instead of a fire.
#[test]
fn fixed_time_rules_fire_once_per_local_day_through_every_transition() {
    let times = [
        ("30 0 * * *", 0),
        ("30 1 * * *", 1),
        ("30 2 * * *", 2),
        ("30 23 * * *", 23),
    ];
    for name in DST_ZONES {
        for (expr, _) in times {
            for gap in [GapPolicy::Shift, GapPolicy::Skip] {
                let s = cron_in(expr, name).with_dst(policy(gap, FoldPolicy::Auto));
                let start = ts("2021-01-01T00:00:00Z");
                let mut last_day = None;
                let mut last_at = None;
                for o in s.iter_after(start).take(365 * 2) {
                    let day = (o.nominal.year, o.nominal.month, o.nominal.day);
                    assert_ne!(Some(day), last_day, "{name} {expr}: twice on {day:?}");
                    if let Some(prev_day) = last_day {
                        let d0 = Civil::midnight(prev_day.0, prev_day.1, prev_day.2).epoch_day();
                        assert_eq!(o.nominal.epoch_day(), d0 + 1, "{name} {expr}: day missing");
                    }
                    if o.fires() {
                        assert_ne!(Some(o.at), last_at, "{name} {expr}");
                        last_at = Some(o.at);
                    } else {
                        assert_eq!(gap, GapPolicy::Skip);
                    }
                    last_day = Some(day);
                }
            }
        }
    }
}

/// `prev_before` is the exact mirror of the forward sequence, skips included, around every
/// transition of the test zones, for fixed and interval-like rules under every policy.
#[test]
fn prev_before_mirrors_the_forward_sequence() {
    let exprs = [
        "*/20 * * * *",
        "30 1 * * *",
        "15 2 * * *",
        "0 0 * * *",
        "45 23 * * *",
        "0 * * * *",
        "30 22-3 * * *",
        "0/40 1/1 * * *",
    ];
    let policies = [
        policy(GapPolicy::Shift, FoldPolicy::Auto),
        policy(GapPolicy::Skip, FoldPolicy::Once),
        policy(GapPolicy::Shift, FoldPolicy::Both),
    ];
    for name in DST_ZONES {
        let z = zone(name);
        let mut t = ts("2021-01-01T00:00:00Z").as_second();
        let end = ts("2022-01-01T00:00:00Z").as_second();
        while let Some(tr) = z.next_transition(t) {
            if tr > end {
                break;
            }
            for expr in exprs {
                for p in policies {
                    let s = cron_in(expr, name).with_dst(p);
                    let from = Timestamp::from_second(tr - 2 * 86_400).unwrap();
                    let seq: Vec<Occurrence> = s
                        .iter_after(from)
                        .take_while(|o| o.at.as_second() < tr + 2 * 86_400)
                        .collect();
                    for w in seq.windows(2) {
                        assert!(
                            (w[0].at, w[0].nominal) < (w[1].at, w[1].nominal),
                            "{name} {expr} {p:?}: order"
                        );
                        if w[1].at > w[0].at {
                            // The last occurrence before w[1] is w[0] (or, for several skips at
                            // one instant, the latest of them, which is w[0] itself).
                            assert_eq!(
                                s.prev_before(w[1].at),
                                Some(w[0]),
                                "{name} {expr} {p:?}: prev of {}",
                                show(&w[1])
                            );
                        }
                    }
                }
            }
            t = tr;
        }
    }
}

#[test]
fn intervals_ignore_wall_clocks_and_once_fires_once() {
    let every = Schedule::new(
        Rule::Interval(Interval::new(3600, None).unwrap()),
        zone("America/New_York"),
    );
    let got = take(&every, "2026-11-01T04:30:00Z", 3);
    assert_eq!(
        got,
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T02:00:00-05:00"
        ]
    );
    assert_eq!(every.describe(), "every 1h");
    let once = Schedule::new(
        Rule::Once(ts("2026-12-01T10:00:00Z")),
        zone("Europe/Berlin"),
    );
    assert_eq!(
        take(&once, "2026-11-30T00:00:00Z", 5),
        ["2026-12-01T11:00:00+01:00"]
    );
    assert_eq!(once.next_after(ts("2026-12-01T10:00:00Z")), None);
    assert_eq!(
        once.prev_before(ts("2026-12-01T10:00:00.5Z")).map(|o| o.at),
        Some(ts("2026-12-01T10:00:00Z"))
    );
    assert_eq!(
        once.describe(),
        "once at 2026-12-01 11:00:00 +01:00, Europe/Berlin"
    );
}

#[test]
fn sub_second_instants_round_the_right_way() {
    let s = cron_in("* * * * * *", "UTC");
    assert_eq!(
        s.next_after(ts("2026-01-01T00:00:00.5Z")).unwrap().at,
        ts("2026-01-01T00:00:01Z")
    );
    assert_eq!(
        s.prev_before(ts("2026-01-01T00:00:00.5Z")).unwrap().at,
        ts("2026-01-01T00:00:00Z")
    );
    assert_eq!(
        s.prev_before(ts("2026-01-01T00:00:00Z")).unwrap().at,
        ts("2025-12-31T23:59:59Z")
    );
    let before_epoch = ts("1969-12-31T23:59:59.5Z");
    assert_eq!(
        s.next_after(before_epoch).unwrap().at,
        ts("1970-01-01T00:00:00Z")
    );
}

#[test]
fn utc_fast_path_matches_the_civil_engine() {
    let e = CronExpr::parse("0 30 9 ? * MON-FRI").unwrap();
    let s = Schedule::new(Rule::Cron(e.clone()), Zone::utc());
    let mut t = ts("2026-01-01T00:00:00Z");
    for _ in 0..200 {
        let o = s.next_after(t).unwrap();
        let c = e
            .next_civil(Civil::from_timestamp(t, 0).add_seconds(1))
            .unwrap();
        assert_eq!(o.nominal, c);
        assert_eq!(o.at.as_second(), c.to_epoch_seconds());
        t = o.at;
    }
}
