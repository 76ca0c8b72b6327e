//! Brute-force oracle for calendar rules.
//!
//! [`Desc`] mirrors the calendar options as plain data and [`oracle_matches`] decides straight
//! from the definitions whether a civil time fires: dates, weekdays and month lengths come from
//! `jiff`, "the k-th X" is found by listing the month's days, every-N counts days, Monday-started
//! weeks or months between the anchor and the date. Nothing here calls the engine's matching
//! code. Random rules from a fixed-seed PRNG are built through the public constructor and their
//! `next_civil`/`prev_civil` sequences are compared with the oracle in two ways:
//!
//! * second by second over windows of 2–3 days: every second of the window is asked (a day the
//!   oracle rejects by date is rejected for all of its seconds, so it is skipped as a whole);
//! * day by day over ranges of about three years: the first and last fire of each day, taken
//!   from the definition's list of fire times, against `next_civil` from each midnight and
//!   `prev_civil` from each day's last second. Fire times within a day do not depend on the
//!   date, and the second-by-second walk already checks them, so the long ranges only need day
//!   resolution to exercise anchoring and month shapes that short windows rarely reach.

use jiff::civil::Date;
use takt_core::civil::Civil;
use takt_core::schedule::CivilPattern;
use takt_core::schedule::calendar::{
    CalendarError, CalendarRule, DayKind, Frequency, MonthDays, Ordinal, TimeOfDay, TimesOfDay,
    Weekday, WeekdaySet,
};

// ---- the description and the oracle -------------------------------------------------------

/// What kind of day "the k-th …" counts.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// One weekday, 0 = Sunday.
    Named(u8),
    Any,
    MonToFri,
    SatSun,
}

impl Kind {
    fn accepts(self, weekday: u8) -> bool {
        match self {
            Kind::Named(w) => w == weekday,
            Kind::Any => true,
            Kind::MonToFri => (1..=5).contains(&weekday),
            Kind::SatSun => weekday == 0 || weekday == 6,
        }
    }
}

#[derive(Clone, Debug)]
enum Days {
    Daily,
    /// Allowed weekdays, index 0 = Sunday.
    Weekly([bool; 7]),
    Monthly {
        /// Explicit days of the month.
        explicit: Vec<u8>,
        /// "Last day of the month".
        last: bool,
        /// (k, kind): k = 1..=4 for first..fourth, 5 for last.
        relative: Vec<(u8, Kind)>,
    },
}

#[derive(Clone, Debug)]
enum Time {
    At(Vec<u32>),
    Every { step: u32, start: u32, end: u32 },
}

#[derive(Clone, Debug)]
struct Desc {
    days: Days,
    every: u32,
    time: Time,
    from: Option<Civil>,
    until: Option<Civil>,
}

fn date(c: Civil) -> Date {
    jiff::civil::date(c.year, c.month as i8, c.day as i8)
}

fn weekday_of(d: Date) -> u8 {
    d.weekday().to_sunday_zero_offset() as u8
}

/// Whole days from `a` to `b`.
fn days_between(a: Date, b: Date) -> i64 {
    i64::from(a.until(b).unwrap().get_days())
}

/// The Monday starting the week that holds `d`.
fn monday_of(d: Date) -> Date {
    let back = (i64::from(weekday_of(d)) + 6) % 7;
    d.checked_sub(jiff::Span::new().days(back)).unwrap()
}

/// The k-th (5 = last) day of `kind` in the month of `d`, if there is one.
fn relative_day(d: Date, k: u8, kind: Kind) -> Option<i8> {
    let first = d.first_of_month();
    let w1 = weekday_of(first);
    let days: Vec<i8> = (1..=d.days_in_month())
        .filter(|day| kind.accepts(((i64::from(w1) + i64::from(*day) - 1) % 7) as u8))
        .collect();
    if k == 5 {
        days.last().copied()
    } else {
        days.get(usize::from(k) - 1).copied()
    }
}

/// Whether the date is eligible (frequency, every-N and the day choice; not the bounds).
fn oracle_date(desc: &Desc, d: Date) -> bool {
    let anchor = desc.from.map_or(jiff::civil::date(1970, 1, 1), date);
    let n = i64::from(desc.every);
    match &desc.days {
        Days::Daily => days_between(anchor, d).rem_euclid(n) == 0,
        Days::Weekly(set) => {
            let weeks = days_between(monday_of(anchor), monday_of(d));
            assert_eq!(weeks % 7, 0);
            (weeks / 7).rem_euclid(n) == 0 && set[usize::from(weekday_of(d))]
        }
        Days::Monthly {
            explicit,
            last,
            relative,
        } => {
            let months = (i64::from(d.year()) * 12 + i64::from(d.month()))
                - (i64::from(anchor.year()) * 12 + i64::from(anchor.month()));
            if months.rem_euclid(n) != 0 {
                return false;
            }
            explicit.iter().any(|x| i64::from(*x) == i64::from(d.day()))
                || (*last && d.day() == d.days_in_month())
                || relative
                    .iter()
                    .any(|(k, kind)| relative_day(d, *k, *kind) == Some(d.day()))
        }
    }
}

fn oracle_time(desc: &Desc, sod: u32) -> bool {
    match &desc.time {
        Time::At(v) => v.contains(&sod),
        Time::Every { step, start, end } => {
            sod >= *start && sod <= *end && (sod - *start).is_multiple_of(*step)
        }
    }
}

fn in_bounds(desc: &Desc, c: Civil) -> bool {
    desc.from.is_none_or(|f| c >= f) && desc.until.is_none_or(|u| c < u)
}

/// Whether the rule described by `desc` fires at `c`, from the definitions alone.
fn oracle_matches(desc: &Desc, c: Civil) -> bool {
    in_bounds(desc, c) && oracle_date(desc, date(c)) && oracle_time(desc, sod_of(c))
}

fn sod_of(c: Civil) -> u32 {
    u32::from(c.hour) * 3600 + u32::from(c.minute) * 60 + u32::from(c.second)
}

/// Every fire time of an eligible day, ascending, from the definition.
fn day_times(desc: &Desc) -> Vec<u32> {
    match &desc.time {
        Time::At(v) => {
            let mut v = v.clone();
            v.sort_unstable();
            v.dedup();
            v
        }
        Time::Every { step, start, end } => (*start..=*end).step_by(*step as usize).collect(),
    }
}

// ---- building the rule through the public API ---------------------------------------------

fn build(desc: &Desc) -> Result<CalendarRule, CalendarError> {
    let frequency = match &desc.days {
        Days::Daily => Frequency::Daily { every: desc.every },
        Days::Weekly(set) => Frequency::Weekly {
            every: desc.every,
            weekdays: (0..7u8)
                .filter(|w| set[usize::from(*w)])
                .map(|w| Weekday::from_number(w).unwrap())
                .collect::<WeekdaySet>(),
        },
        Days::Monthly {
            explicit,
            last,
            relative,
        } => {
            let mut days = MonthDays::EMPTY;
            for d in explicit {
                days = days.with_day(*d)?;
            }
            if *last {
                days = days.with_last_day();
            }
            for (k, kind) in relative {
                let ord = [
                    Ordinal::First,
                    Ordinal::Second,
                    Ordinal::Third,
                    Ordinal::Fourth,
                    Ordinal::Last,
                ][usize::from(*k) - 1];
                let kind = match *kind {
                    Kind::Named(w) => DayKind::Named(Weekday::from_number(w).unwrap()),
                    Kind::Any => DayKind::Day,
                    Kind::MonToFri => DayKind::Weekday,
                    Kind::SatSun => DayKind::WeekendDay,
                };
                days = days.with_relative(ord, kind);
            }
            Frequency::Monthly {
                every: desc.every,
                days,
            }
        }
    };
    let time = match &desc.time {
        Time::At(v) => TimeOfDay::At(TimesOfDay::new(v.iter().copied())?),
        Time::Every { step, start, end } => TimeOfDay::Every {
            step_seconds: *step,
            start: *start,
            end: *end,
        },
    };
    CalendarRule::new(frequency, time, desc.from, desc.until)
}

// ---- random descriptions ------------------------------------------------------------------

/// SplitMix64: tiny, deterministic, good enough to spread test cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.next() as usize % items.len()]
    }
}

fn random_kind(rng: &mut Rng) -> Kind {
    match rng.range(0, 9) {
        0..=6 => Kind::Named(rng.range(0, 6) as u8),
        7 => Kind::Any,
        8 => Kind::MonToFri,
        _ => Kind::SatSun,
    }
}

/// A time of day, on a whole minute half of the time so that coincidences with steps happen.
fn random_sod(rng: &mut Rng) -> u32 {
    let s = rng.range(0, 86_399) as u32;
    if rng.chance(50) { s / 60 * 60 } else { s }
}

fn random_civil(rng: &mut Rng, year_lo: i64, year_hi: i64) -> Civil {
    let y = rng.range(year_lo, year_hi) as i16;
    let m = rng.range(1, 12) as u8;
    let dim = date(Civil::new(y, m, 1, 0, 0, 0).unwrap()).days_in_month() as u8;
    // Month ends half of the time: that is where months, weeks and years turn over.
    let d = if rng.chance(50) {
        dim - rng.range(0, 3) as u8
    } else {
        rng.range(1, i64::from(dim)) as u8
    };
    let sod = if rng.chance(30) { 0 } else { random_sod(rng) };
    Civil::new(
        y,
        m,
        d,
        (sod / 3600) as u8,
        (sod / 60 % 60) as u8,
        (sod % 60) as u8,
    )
    .unwrap()
}

fn random_desc(rng: &mut Rng, around: Civil) -> Desc {
    let days = match rng.range(0, 2) {
        0 => Days::Daily,
        1 => {
            let mut set = [false; 7];
            let bits = rng.range(1, 127);
            for (i, s) in set.iter_mut().enumerate() {
                *s = bits & (1 << i) != 0;
            }
            Days::Weekly(set)
        }
        _ => {
            let mut explicit = Vec::new();
            let mut last = false;
            let mut relative = Vec::new();
            for _ in 0..rng.range(1, 3) {
                match rng.range(0, 5) {
                    0 => explicit.push(rng.range(1, 31) as u8),
                    1 => explicit.push(rng.range(27, 31) as u8),
                    2 => last = true,
                    _ => relative.push((rng.range(1, 5) as u8, random_kind(rng))),
                }
            }
            Days::Monthly {
                explicit,
                last,
                relative,
            }
        }
    };
    let every = match rng.range(0, 9) {
        0..=4 => 1,
        5..=7 => rng.range(2, 5) as u32,
        8 => rng.range(6, 13) as u32,
        _ => rng.pick(&[12, 24, 48, 100]),
    };
    let time = if rng.chance(45) {
        Time::At((0..rng.range(1, 4)).map(|_| random_sod(rng)).collect())
    } else {
        let step = rng.pick(&[1, 7, 45, 60, 61, 300, 900, 3600, 5400, 7200, 25_200, 43_200]);
        let (start, end) = if step >= 300 && rng.chance(40) {
            (0, 86_399)
        } else {
            // Small steps get short windows so a window holds at most a few thousand fires.
            let start = random_sod(rng);
            let max_len = if step < 60 { 7200 } else { 86_399 };
            let end = (start + rng.range(0, max_len) as u32).min(86_399);
            let end = if rng.chance(30) { end / 60 * 60 } else { end };
            (start, end.max(start))
        };
        Time::Every { step, start, end }
    };
    let mut desc = Desc {
        days,
        every,
        time,
        from: None,
        until: None,
    };
    // Bounds land exactly on a fire time of the day half of the time, so that "from is
    // inclusive" and "until is exclusive" are actually exercised.
    let times = day_times(&desc);
    let snap = |c: Civil, rng: &mut Rng| {
        if rng.chance(50) {
            let t = i64::from(rng.pick(&times));
            c.add_seconds(t - i64::from(sod_of(c)))
        } else {
            c
        }
    };
    desc.from = rng
        .chance(40)
        .then(|| around.add_seconds(rng.range(-40 * 86_400, 10 * 86_400)))
        .map(|c| snap(c, rng));
    if rng.chance(30) {
        let base = desc.from.unwrap_or(around);
        let len = if rng.chance(30) {
            rng.range(1, 3 * 86_400)
        } else {
            rng.range(3600, 400 * 86_400)
        };
        let until = snap(base.add_seconds(len), rng);
        desc.until = Some(until);
    }
    desc
}

// ---- the comparisons ----------------------------------------------------------------------

fn midnight_seconds(d: Date) -> i64 {
    Civil::new(d.year(), d.month() as u8, d.day() as u8, 0, 0, 0)
        .unwrap()
        .to_epoch_seconds()
}

/// Every fire in `[lo, hi]` by asking the oracle about every second.
fn oracle_fires(desc: &Desc, lo: Civil, hi: Civil) -> Vec<Civil> {
    let (lo_s, hi_s) = (lo.to_epoch_seconds(), hi.to_epoch_seconds());
    let mut out = Vec::new();
    let mut day = date(lo);
    loop {
        let base = midnight_seconds(day);
        if base > hi_s {
            break;
        }
        if oracle_date(desc, day) {
            for sod in 0..86_400u32 {
                let s = base + i64::from(sod);
                if s < lo_s || s > hi_s {
                    continue;
                }
                if oracle_time(desc, sod) {
                    let c = Civil::from_epoch_seconds(s);
                    if in_bounds(desc, c) {
                        out.push(c);
                    }
                }
            }
        }
        day = day.tomorrow().unwrap();
    }
    out
}

fn engine_forward(rule: &CalendarRule, lo: Civil, hi: Civil) -> Vec<Civil> {
    let mut out = Vec::new();
    let mut cur = lo;
    while let Some(c) = rule.next_civil(cur) {
        assert!(c >= cur, "{rule}: next_civil({cur}) went back to {c}");
        if c > hi {
            break;
        }
        out.push(c);
        cur = c.add_seconds(1);
    }
    out
}

fn engine_backward(rule: &CalendarRule, lo: Civil, hi: Civil) -> Vec<Civil> {
    let mut out = Vec::new();
    let mut cur = hi;
    while let Some(c) = rule.prev_civil(cur) {
        assert!(c <= cur, "{rule}: prev_civil({cur}) went forward to {c}");
        if c < lo {
            break;
        }
        out.push(c);
        cur = c.add_seconds(-1);
    }
    out.reverse();
    out
}

fn first_difference(a: &[Civil], b: &[Civil]) -> String {
    let i = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    format!(
        "first difference at #{i}: engine {:?} vs oracle {:?} (lengths {} and {})",
        a.get(i).map(Civil::to_string),
        b.get(i).map(Civil::to_string),
        a.len(),
        b.len()
    )
}

/// Compares the engine with the oracle second by second over `[lo, hi]`.
fn check_window(desc: &Desc, rule: &CalendarRule, lo: Civil, hi: Civil, rng: &mut Rng) {
    let want = oracle_fires(desc, lo, hi);
    let fwd = engine_forward(rule, lo, hi);
    assert!(
        fwd == want,
        "{rule} ({desc:?}) forward over {lo}..={hi}: {}",
        first_difference(&fwd, &want)
    );
    let back = engine_backward(rule, lo, hi);
    assert!(
        back == want,
        "{rule} ({desc:?}) backward over {lo}..={hi}: {}",
        first_difference(&back, &want)
    );
    // `matches` against the oracle at the fires, their neighbours and random seconds.
    let span = hi.to_epoch_seconds() - lo.to_epoch_seconds();
    let probes = want
        .iter()
        .take(300)
        .flat_map(|c| [c.add_seconds(-1), *c, c.add_seconds(1)])
        .chain((0..200).map(|_| lo.add_seconds(rng.range(0, span))))
        .collect::<Vec<_>>();
    for c in probes {
        assert_eq!(
            rule.matches(c),
            oracle_matches(desc, c),
            "{rule} ({desc:?}) matches({c})"
        );
    }
}

/// The first and last fire of day `d` by the oracle (bounds applied), if any.
fn oracle_day_fires(desc: &Desc, times: &[u32], d: Date) -> Option<(Civil, Civil)> {
    if !oracle_date(desc, d) {
        return None;
    }
    let base = midnight_seconds(d);
    let at = |t: &u32| Civil::from_epoch_seconds(base + i64::from(*t));
    let first = times.iter().map(at).find(|c| in_bounds(desc, *c))?;
    let last = times.iter().rev().map(at).find(|c| in_bounds(desc, *c))?;
    Some((first, last))
}

/// Compares the engine with the oracle day by day over `days` days from `start`.
fn check_days(desc: &Desc, rule: &CalendarRule, start: Date, days: usize) {
    let times = day_times(desc);
    let dates: Vec<Date> = std::iter::successors(Some(start), |d| d.tomorrow().ok())
        .take(days)
        .collect();
    let fires: Vec<Option<(Civil, Civil)>> = dates
        .iter()
        .map(|d| oracle_day_fires(desc, &times, *d))
        .collect();
    for (i, d) in dates.iter().enumerate() {
        let base = midnight_seconds(*d);
        let midnight = Civil::from_epoch_seconds(base);
        let last_second = Civil::from_epoch_seconds(base + 86_399);
        let next_want = fires[i..].iter().flatten().next().map(|f| f.0);
        let got = rule.next_civil(midnight);
        match next_want {
            Some(w) => assert_eq!(got, Some(w), "{rule} ({desc:?}) next_civil({midnight})"),
            None => assert!(
                got.is_none_or(|g| date(g) > *dates.last().unwrap()),
                "{rule} ({desc:?}) next_civil({midnight}) = {got:?}, oracle has none in range"
            ),
        }
        let prev_want = fires[..=i].iter().rev().flatten().next().map(|f| f.1);
        let got = rule.prev_civil(last_second);
        match prev_want {
            Some(w) => assert_eq!(got, Some(w), "{rule} ({desc:?}) prev_civil({last_second})"),
            None => assert!(
                got.is_none_or(|g| date(g) < start),
                "{rule} ({desc:?}) prev_civil({last_second}) = {got:?}, oracle has none in range"
            ),
        }
    }
}

/// For a refused rule, confirms the oracle finds no fire either (over the bounded range, or
/// over decades of months for an unbounded monthly rule).
fn check_never_fires(desc: &Desc, e: &CalendarError) {
    assert!(
        matches!(e, CalendarError::NeverFires { .. }),
        "{desc:?} refused: {e}"
    );
    let times = day_times(desc);
    let (start, days) = match (desc.from, desc.until) {
        (Some(f), Some(u)) => (date(f), days_between(date(f), date(u)) + 1),
        (None, Some(u)) => (
            date(u).checked_sub(jiff::Span::new().days(800)).unwrap(),
            801,
        ),
        (f, None) => {
            assert!(matches!(desc.days, Days::Monthly { .. }), "{desc:?}: {e}");
            (f.map_or(jiff::civil::date(1970, 1, 1), date), 366 * 30)
        }
    };
    let mut d = start;
    for _ in 0..days {
        assert!(
            oracle_day_fires(desc, &times, d).is_none(),
            "{desc:?} was refused ({e}) but fires on {d}"
        );
        d = d.tomorrow().unwrap();
    }
}

#[test]
fn calendar_engine_agrees_with_the_oracle() {
    let mut rng = Rng(0x7a6b_7420_6361_6c31);
    let (mut built, mut refused) = (0, 0);
    while built < 320 {
        let far = rng.chance(8);
        let around = if far {
            random_civil(&mut rng, -9000, 9000)
        } else {
            random_civil(&mut rng, 1890, 2110)
        };
        let desc = random_desc(&mut rng, around);
        let rule = match build(&desc) {
            Ok(r) => r,
            Err(e) => {
                check_never_fires(&desc, &e);
                refused += 1;
                continue;
            }
        };
        built += 1;
        let text = rule.to_string();
        assert_eq!(
            CalendarRule::parse(&text).as_ref(),
            Ok(&rule),
            "round trip of {text}"
        );
        assert!(!rule.describe().is_empty());
        assert_eq!(
            rule.is_interval_like(),
            matches!(desc.time, Time::Every { .. })
        );

        // Second by second over 2-3 days: around the start, the bounds, or a known fire.
        let len = rng.range(2 * 86_400, 3 * 86_400);
        let lo = match rng.range(0, 3) {
            0 => desc
                .from
                .map_or(around, |f| f.add_seconds(-rng.range(0, 86_400))),
            1 => desc
                .until
                .map_or(around, |u| u.add_seconds(-rng.range(0, 2 * 86_400))),
            2 => {
                // A day the oracle says fires (found by the oracle alone), minus a little.
                let times = day_times(&desc);
                let mut d = date(around);
                let mut hit = None;
                for _ in 0..800 {
                    if let Some((f, _)) = oracle_day_fires(&desc, &times, d) {
                        hit = Some(f);
                        break;
                    }
                    d = d.tomorrow().unwrap();
                }
                hit.map_or(around, |f| f.add_seconds(-rng.range(0, 86_400)))
            }
            _ => around,
        };
        let hi = lo.add_seconds(len);
        check_window(&desc, &rule, lo, hi, &mut rng);

        // Day by day over about three years.
        let start = date(around.add_seconds(-rng.range(0, 400 * 86_400)));
        check_days(&desc, &rule, start, 1100);
    }
    eprintln!("calendar oracle: {built} rules compared, {refused} refused as never firing");
    assert!(refused < built, "the generator refuses too often");
}

/// Rules whose every-N phase and month shapes need many months to show: compared day by day over
/// 40 years, at a few hand-picked anchors.
#[test]
fn calendar_long_cycles_agree_with_the_oracle() {
    let cases = [
        (
            "monthly every 7 months on 31,last weekend-day at 12:00 from 2001-03-31T13:00",
            40,
        ),
        ("monthly every 12 months on 29 at 00:00 from 2023-02-01", 40),
        (
            "weekly every 5 weeks on sun,mon at 23:59:59 from 1999-12-31",
            40,
        ),
        (
            "daily every 11 days at 00:00,12:00 from 2000-02-29T12:00",
            40,
        ),
        (
            "monthly every 5 months on fourth sat,first weekday every 6h",
            40,
        ),
    ];
    for (text, years) in cases {
        let rule = CalendarRule::parse(text).unwrap();
        let desc = from_rule(&rule);
        let start = desc.from.map_or(jiff::civil::date(1995, 1, 1), |f| {
            date(f).checked_sub(jiff::Span::new().days(40)).unwrap()
        });
        check_days(&desc, &rule, start, years * 366);
    }
}

/// Reads a built rule back into a [`Desc`] through its public getters (for hand-written rules).
fn from_rule(rule: &CalendarRule) -> Desc {
    let days = match *rule.frequency() {
        Frequency::Daily { .. } => Days::Daily,
        Frequency::Weekly { weekdays, .. } => {
            let mut set = [false; 7];
            for w in weekdays.iter() {
                set[usize::from(w.number())] = true;
            }
            Days::Weekly(set)
        }
        Frequency::Monthly { days, .. } => {
            let mut last = false;
            let mut relative = Vec::new();
            for (ord, kind) in days.relatives() {
                let k = match ord {
                    Ordinal::First => 1,
                    Ordinal::Second => 2,
                    Ordinal::Third => 3,
                    Ordinal::Fourth => 4,
                    Ordinal::Last => 5,
                };
                let kind = match kind {
                    DayKind::Named(w) => Kind::Named(w.number()),
                    DayKind::Day => Kind::Any,
                    DayKind::Weekday => Kind::MonToFri,
                    DayKind::WeekendDay => Kind::SatSun,
                };
                if (k, matches!(kind, Kind::Any)) == (5, true) {
                    last = true;
                } else {
                    relative.push((k, kind));
                }
            }
            Days::Monthly {
                explicit: days.days().collect(),
                last,
                relative,
            }
        }
    };
    let time = match rule.time() {
        TimeOfDay::At(t) => Time::At(t.as_slice().to_vec()),
        TimeOfDay::Every {
            step_seconds,
            start,
            end,
        } => Time::Every {
            step: *step_seconds,
            start: *start,
            end: *end,
        },
    };
    Desc {
        days,
        every: rule.frequency().every(),
        time,
        from: rule.effective_from(),
        until: rule.expires_at(),
    }
}

#[test]
fn calendar_works_through_the_civil_pattern_trait() {
    let rule = CalendarRule::parse("weekly on mon-fri every 1h between 06:00-22:30").unwrap();
    let p: &dyn CivilPattern = &rule;
    let fri = Civil::new(2026, 3, 6, 22, 0, 1).unwrap();
    assert_eq!(p.next_civil(fri), Civil::new(2026, 3, 9, 6, 0, 0));
    assert_eq!(p.prev_civil(fri), Civil::new(2026, 3, 6, 22, 0, 0));
    assert!(p.is_interval_like());
}
