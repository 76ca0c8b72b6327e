//! Differential tests of takt's cron engine.
//!
//! Three references check [`CronExpr::next_civil`] / [`CronExpr::prev_civil`] (and, for the `cron`
//! crate, the full [`Schedule::next_after`] in UTC):
//!
//! * the `cron` crate 0.17, on the subset of syntax whose meaning it shares with ours;
//! * `croner` 4, on a larger subset that includes `L`, `W`, `LW`, `n#k`, `nL` and OR-combined day
//!   fields;
//! * a brute-force oracle written here from the documented definitions. It evaluates the
//!   generator's structured description of an expression (never the engine's own bit sets or
//!   day logic), using `chrono` for weekdays and month lengths. It alone covers the syntax
//!   neither peer has: ranges that wrap around (`22-2/2`, `FRI-MON`), `L-n`, `L-nW` and `?` in
//!   the time, month and year fields. Where a peer has an equivalent written out
//!   (`22-23,0-2` for `22-2`), [`agrees_with_croner_on_the_written_out_form`] compares with it.
//!
//! Every case comes from a splitmix64 generator with a fixed seed, so a failure reproduces; the
//! message names the seed, the case number, the expression and the start. Set `TAKT_CRON_SEED`
//! (decimal or `0x` hex) to explore other seeds.

use std::str::FromStr as _;
use std::time::Instant;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeZone as _, Timelike, Utc};
use takt_core::Timestamp;
use takt_core::civil::Civil;
use takt_core::schedule::cron::{CronError, CronExpr, CronOptions, DayMatch};
use takt_core::schedule::{OccurrenceKind, Rule, Schedule, Zone};

const DEFAULT_SEED: u64 = 0x7a6b_7420_c0de_2026;

/// First and last year of the random start instants.
const START_YEARS: (i32, i32) = (1990, 2060);

fn seed() -> u64 {
    match std::env::var("TAKT_CRON_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("TAKT_CRON_SEED={s:?} is not a number: {e}"))
        }
        Err(_) => DEFAULT_SEED,
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic randomness.

/// splitmix64: tiny, fast and good enough to drive a generator.
struct Rng(u64);

impl Rng {
    /// The generator of one case: cases are independent, so one can be replayed alone. The
    /// state is a hash of (seed, stream, case); adding the case number to the state instead
    /// would make neighbouring cases shifted copies of one sequence.
    fn for_case(seed: u64, stream: u64, case: u64) -> Rng {
        Rng(mix(seed ^ mix(stream ^ mix(case ^ 0x5851_F42D_4C95_7F2D))))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (the modulo bias is irrelevant at these sizes).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below(u64::from(hi - lo) + 1) as u32
    }

    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// The splitmix64 output function (a strong 64-bit mixer).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------------------------
// Structured expressions: generated as data, rendered to text for the parsers, evaluated
// directly by the oracle.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    /// `*` as one item of a list (`*,5`).
    Star,
    Val(u32),
    Range(u32, u32),
    StarStep(u32),
    RangeStep(u32, u32, u32),
    /// `a/n`: from `a` to the field's maximum.
    FromStep(u32, u32),
}

#[derive(Clone, Debug)]
enum Field {
    /// A bare `*`.
    Star,
    /// A bare `?`, which means `*` in every field.
    Question,
    List(Vec<Item>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DomItem {
    Plain(Item),
    Last,
    LastMinus(u32),
    NearestWeekday(u32),
    LastWeekday,
    /// `L-nW`.
    LastNearest(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DowItem {
    Plain(Item),
    Nth(u32, u32),
    LastOf(u32),
}

#[derive(Clone, Debug)]
enum Day<T> {
    Star,
    Question,
    List(Vec<T>),
}

impl<T> Day<T> {
    fn restricted(&self) -> bool {
        matches!(self, Day::List(_))
    }
}

#[derive(Clone, Debug)]
struct Spec {
    /// `None`: the 5-field form (seconds are 0).
    seconds: Option<Field>,
    minutes: Field,
    hours: Field,
    dom: Day<DomItem>,
    months: Field,
    dow: Day<DowItem>,
    /// `Some` only together with `seconds`.
    years: Option<Field>,
    and: bool,
    dow_names: bool,
    month_names: bool,
    lowercase: bool,
}

const DOW_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Names {
    Numbers,
    Weekdays,
    Months,
}

fn render_value(v: u32, names: Names) -> String {
    match names {
        Names::Weekdays if v <= 6 => DOW_NAMES[v as usize].to_string(),
        Names::Months => MONTH_NAMES[v as usize - 1].to_string(),
        _ => v.to_string(),
    }
}

fn render_item(item: Item, names: Names) -> String {
    match item {
        Item::Star => "*".to_string(),
        Item::Val(v) => render_value(v, names),
        Item::Range(a, b) => format!("{}-{}", render_value(a, names), render_value(b, names)),
        Item::StarStep(n) => format!("*/{n}"),
        Item::RangeStep(a, b, n) => {
            format!("{}-{}/{n}", render_value(a, names), render_value(b, names))
        }
        // Neither peer accepts a name before a step, and the point of `a/n` is the number.
        Item::FromStep(a, n) => format!("{a}/{n}"),
    }
}

fn render_field(field: &Field, names: Names) -> String {
    match field {
        Field::Star => "*".to_string(),
        Field::Question => "?".to_string(),
        Field::List(items) => items
            .iter()
            .map(|i| render_item(*i, names))
            .collect::<Vec<_>>()
            .join(","),
    }
}

fn render_day<T: Copy>(day: &Day<T>, item: impl Fn(T) -> String) -> String {
    match day {
        Day::Star => "*".to_string(),
        Day::Question => "?".to_string(),
        Day::List(items) => items.iter().map(|i| item(*i)).collect::<Vec<_>>().join(","),
    }
}

impl Spec {
    fn render(&self) -> String {
        let dow_names = if self.dow_names {
            Names::Weekdays
        } else {
            Names::Numbers
        };
        let month_names = if self.month_names {
            Names::Months
        } else {
            Names::Numbers
        };
        let mut parts = Vec::new();
        if let Some(s) = &self.seconds {
            parts.push(render_field(s, Names::Numbers));
        }
        parts.push(render_field(&self.minutes, Names::Numbers));
        parts.push(render_field(&self.hours, Names::Numbers));
        parts.push(render_day(&self.dom, |i| match i {
            DomItem::Plain(p) => render_item(p, Names::Numbers),
            DomItem::Last => "L".to_string(),
            DomItem::LastMinus(n) => format!("L-{n}"),
            DomItem::NearestWeekday(n) => format!("{n}W"),
            DomItem::LastWeekday => "LW".to_string(),
            DomItem::LastNearest(n) => format!("L-{n}W"),
        }));
        parts.push(render_field(&self.months, month_names));
        parts.push(render_day(&self.dow, |i| match i {
            DowItem::Plain(p) => render_item(p, dow_names),
            DowItem::Nth(wd, k) => format!("{}#{k}", render_value(wd, dow_names)),
            DowItem::LastOf(wd) => format!("{}L", render_value(wd, dow_names)),
        }));
        if let Some(y) = &self.years {
            parts.push(render_field(y, Names::Numbers));
        }
        let text = parts.join(" ");
        if self.lowercase {
            text.to_lowercase()
        } else {
            text
        }
    }

    fn parse_takt(&self, text: &str) -> Result<CronExpr, CronError> {
        let day_match = if self.and {
            DayMatch::And
        } else {
            DayMatch::Or
        };
        CronExpr::parse_with(text, CronOptions { day_match })
    }

    /// Lowest and highest year the year field names.
    fn year_span(&self) -> Option<(u32, u32)> {
        let Some(Field::List(items)) = &self.years else {
            return None;
        };
        let set = expand_field(&Field::List(items.clone()), YEAR);
        let lo = set.iter().position(|b| *b)? as u32;
        let hi = set.iter().rposition(|b| *b)? as u32;
        Some((lo, hi))
    }
}

// ---------------------------------------------------------------------------------------------
// Generation.

#[derive(Clone, Copy)]
struct Def {
    min: u32,
    max: u32,
    /// How many values a wrapped range goes round (the week has 7: 7 is Sunday again); 0 for
    /// the year, which does not wrap.
    cycle: u32,
}

const SECOND: Def = Def {
    min: 0,
    max: 59,
    cycle: 60,
};
const MINUTE: Def = SECOND;
const HOUR: Def = Def {
    min: 0,
    max: 23,
    cycle: 24,
};
const DOM: Def = Def {
    min: 1,
    max: 31,
    cycle: 31,
};
const MONTH: Def = Def {
    min: 1,
    max: 12,
    cycle: 12,
};
const DOW: Def = Def {
    min: 0,
    max: 7,
    cycle: 7,
};
const YEAR: Def = Def {
    min: 1970,
    max: 2199,
    cycle: 0,
};

/// What a field's items may contain for one reference.
#[derive(Clone, Copy)]
struct Allow {
    /// Values are drawn from `lo..=hi` (a sub-range of the field where useful).
    lo: u32,
    hi: u32,
    /// Largest step; ours refuses steps above the field's span.
    max_step: u32,
    star_step: bool,
    from_step: bool,
    star_in_list: bool,
    /// Smallest allowed end of a range (keeps `X-SUN` out of croner's weekday ranges).
    min_range_end: u32,
    /// Ranges may be written backwards, wrapping around (ours only).
    wrap: bool,
    /// A bare field may be `?` instead of `*` (ours only outside the day fields).
    question: bool,
}

impl Allow {
    fn new(def: Def, max_step: u32) -> Allow {
        Allow {
            lo: def.min,
            hi: def.max,
            max_step,
            star_step: true,
            from_step: true,
            star_in_list: true,
            min_range_end: def.min,
            wrap: false,
            question: false,
        }
    }
}

fn gen_step(rng: &mut Rng, max: u32) -> u32 {
    if rng.chance(1, 5) {
        rng.range(1, max)
    } else {
        rng.range(1, max.min(10))
    }
}

/// The ends of a range: in order, or (about a quarter of the time where allowed) backwards,
/// which wraps around.
fn gen_bounds(rng: &mut Rng, a: &Allow) -> (u32, u32) {
    let x = rng.range(a.lo, a.hi);
    let y = rng.range(a.lo, a.hi);
    if a.wrap && rng.chance(1, 2) {
        (x, y)
    } else {
        (x.min(y), x.max(y))
    }
}

fn gen_item(rng: &mut Rng, a: &Allow) -> Item {
    loop {
        let item = match rng.below(20) {
            0..=7 => Item::Val(rng.range(a.lo, a.hi)),
            8..=11 => {
                let (x, y) = gen_bounds(rng, a);
                Item::Range(x, y)
            }
            12..=14 if a.star_step => Item::StarStep(gen_step(rng, a.max_step)),
            15..=17 => {
                let (x, y) = gen_bounds(rng, a);
                Item::RangeStep(x, y, gen_step(rng, a.max_step))
            }
            18 if a.from_step => Item::FromStep(rng.range(a.lo, a.hi), gen_step(rng, a.max_step)),
            19 if a.star_in_list && rng.chance(1, 3) => Item::Star,
            _ => continue,
        };
        match item {
            Item::Range(_, b) | Item::RangeStep(_, b, _) if b < a.min_range_end => continue,
            _ => return item,
        }
    }
}

/// A day number for `nW` / `L-n`, often at the edges where the rules turn (a weekend 1st, a
/// day some months lack).
fn edge_day(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    const EDGES: [u32; 8] = [0, 1, 2, 3, 28, 29, 30, 31];
    if rng.chance(2, 5) {
        EDGES[rng.below(8) as usize].clamp(lo, hi)
    } else {
        rng.range(lo, hi)
    }
}

fn gen_list(rng: &mut Rng, a: &Allow) -> Vec<Item> {
    let n = match rng.below(10) {
        0..=5 => 1,
        6..=8 => 2,
        _ => 3,
    };
    loop {
        let list: Vec<Item> = (0..n).map(|_| gen_item(rng, a)).collect();
        // A lone `*` item renders as a bare `*`, which means "no restriction" rather than "every
        // value" (they differ in the day fields and for years outside 1970-2199).
        if list != [Item::Star] {
            return list;
        }
    }
}

fn gen_field(rng: &mut Rng, a: &Allow, star_percent: u64) -> Field {
    if rng.chance(star_percent, 100) {
        if a.question && rng.chance(1, 4) {
            Field::Question
        } else {
            Field::Star
        }
    } else {
        Field::List(gen_list(rng, a))
    }
}

/// Seconds: often exactly `0`, so that expressions read like real schedules and the oracle can
/// walk minute by minute.
fn gen_seconds(rng: &mut Rng, a: &Allow) -> Field {
    if rng.chance(45, 100) {
        Field::List(vec![Item::Val(0)])
    } else {
        gen_field(rng, a, 15)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Profile {
    /// The `cron` crate: 6/7 fields, no `L`/`W`/`#`, weekdays by name, dom AND dow.
    Cron,
    /// `croner`: everything but `L-n`, `L-nW`, wrapped ranges, `?` outside the day fields, `*`
    /// inside lists and `*/n` in years; `L` and `LW` not in one field.
    Croner,
    /// The oracle: the full syntax.
    Oracle,
}

fn gen_spec(rng: &mut Rng, p: Profile) -> Spec {
    let cron = p == Profile::Cron;
    let croner = p == Profile::Croner;

    // The `cron` crate caps a step at the field's maximum value (59, 23, 31, 12, 7); ours at the
    // field's span (60, 24, 31, 12, 8). Stay within both.
    let mut sec = Allow::new(SECOND, if cron { 59 } else { 60 });
    let mut min = Allow::new(MINUTE, if cron { 59 } else { 60 });
    let mut hour = Allow::new(HOUR, if cron { 23 } else { 24 });
    let mut dom = Allow::new(DOM, 31);
    let mut month = Allow::new(MONTH, 12);
    let mut dow = Allow::new(DOW, if cron { 7 } else { 8 });
    // Years near the start instants, so that year-restricted expressions fire in the window.
    let mut year = Allow::new(YEAR, 40);
    (year.lo, year.hi) = match p {
        Profile::Cron => (1985, 2090),
        Profile::Croner => (1985, 2120),
        // The oracle also probes the first and last year a year field may name.
        Profile::Oracle => (1970, 2199),
    };
    year.max_step = 15;
    // Ours counts `*/n` years from 1970, croner from year 1.
    year.star_step = !croner;

    if croner {
        // Croner refuses `*` inside a list.
        for a in [
            &mut sec, &mut min, &mut hour, &mut dom, &mut month, &mut dow, &mut year,
        ] {
            a.star_in_list = false;
        }
    }
    if cron {
        // The `cron` crate numbers weekdays 1-7 from Sunday, so weekdays go by name (SUN-SAT)
        // and values stay in 0..=6. `*/n` (n <= 7) and `A-B/n` select the same days in both
        // numberings (both count from Sunday), but `A/n` would need a name before the step,
        // which the `cron` crate cannot parse.
        dow.hi = 6;
        dow.from_step = false;
    }
    if p == Profile::Oracle {
        // Neither peer has these: wrapped ranges in every field but the year (which refuses
        // them; see the parser's tests), and `?` for a bare `*` outside the day fields.
        for a in [
            &mut sec, &mut min, &mut hour, &mut dom, &mut month, &mut dow,
        ] {
            a.wrap = true;
        }
        for a in [&mut sec, &mut min, &mut hour, &mut month, &mut year] {
            a.question = true;
        }
    }
    if croner {
        // Croner rewrites a name range ending in `-SUN` to `-7`, so `SUN-SUN` there means the
        // whole week; ours reads it as Sunday. Its weekday ranges therefore never end on Sunday
        // (0); a numeric range may still end on 7.
        dow.min_range_end = 1;
    }

    let five_fields = !cron && rng.chance(1, 3);
    let seconds = (!five_fields).then(|| gen_seconds(rng, &sec));
    let minutes = gen_field(rng, &min, 25);
    let hours = gen_field(rng, &hour, 30);
    let months = gen_field(rng, &month, 55);
    let years = (!five_fields && rng.chance(1, 4)).then(|| gen_field(rng, &year, 15));

    let dom_spec = match rng.below(100) {
        0..=29 => Day::Star,
        30..=39 => Day::Question,
        _ => {
            let n = 1 + rng.below(3) as usize;
            let mut items: Vec<DomItem> = Vec::new();
            while items.len() < n {
                let item = match rng.below(12) {
                    0..=6 => DomItem::Plain(gen_item(rng, &dom)),
                    7 if !cron => DomItem::Last,
                    8 if !cron => DomItem::NearestWeekday(edge_day(rng, 1, 31)),
                    9 if !cron => DomItem::LastWeekday,
                    10 if p == Profile::Oracle => DomItem::LastMinus(edge_day(rng, 0, 30)),
                    11 if p == Profile::Oracle => DomItem::LastNearest(edge_day(rng, 0, 30)),
                    _ => DomItem::Plain(gen_item(rng, &dom)),
                };
                // Croner reads `L` and `LW` through one shared flag: with both in one field, `L`
                // is lost. Ours honours both.
                if croner
                    && ((item == DomItem::Last && items.contains(&DomItem::LastWeekday))
                        || (item == DomItem::LastWeekday && items.contains(&DomItem::Last)))
                {
                    continue;
                }
                items.push(item);
            }
            if items == [DomItem::Plain(Item::Star)] {
                Day::Star
            } else {
                Day::List(items)
            }
        }
    };
    let dow_spec = match rng.below(100) {
        0..=29 => Day::Star,
        30..=39 => Day::Question,
        _ => {
            let n = 1 + rng.below(3) as usize;
            let items = (0..n)
                .map(|_| match rng.below(10) {
                    0..=5 => DowItem::Plain(gen_item(rng, &dow)),
                    6 | 7 if !cron => DowItem::Nth(rng.range(0, 7), rng.range(1, 5)),
                    8 if !cron => DowItem::LastOf(rng.range(0, 7)),
                    _ => DowItem::Plain(gen_item(rng, &dow)),
                })
                .collect::<Vec<_>>();
            if items == [DowItem::Plain(Item::Star)] {
                Day::Star
            } else {
                Day::List(items)
            }
        }
    };
    let and = match p {
        // The `cron` crate always ANDs the day fields.
        Profile::Cron => true,
        _ => rng.chance(1, 3),
    };
    Spec {
        seconds,
        minutes,
        hours,
        dom: dom_spec,
        months,
        dow: dow_spec,
        years,
        and,
        dow_names: cron || rng.chance(1, 2),
        month_names: rng.chance(1, 4),
        lowercase: rng.chance(1, 6),
    }
}

// ---------------------------------------------------------------------------------------------
// The oracle: plain loops over the structured description, from the definitions in
// `schedule/cron/mod.rs`; weekdays and month lengths come from `chrono`.

fn expand_item(item: Item, def: Def) -> Vec<u32> {
    let (lo, hi, step) = match item {
        Item::Star => (def.min, def.max, 1),
        Item::Val(v) => (v, v, 1),
        Item::Range(a, b) => (a, b, 1),
        Item::StarStep(n) => (def.min, def.max, n),
        Item::RangeStep(a, b, n) => (a, b, n),
        Item::FromStep(a, n) => (a, def.max, n),
    };
    if lo > hi {
        return expand_wrapped(lo, hi, step, def);
    }
    (lo..=hi).step_by(step as usize).collect()
}

/// A range written backwards, as documented: from `a`, every `n`-th value going round the
/// field's cycle (Saturday is followed by Sunday, December by January), up to `b`. Positions
/// are taken modulo the cycle, so weekday 7 is Sunday.
fn expand_wrapped(a: u32, b: u32, n: u32, def: Def) -> Vec<u32> {
    assert!(def.cycle > 0, "the generator never wraps a year range");
    let (from, to) = ((a - def.min) % def.cycle, (b - def.min) % def.cycle);
    let distance = (to + def.cycle - from) % def.cycle;
    (0..=distance)
        .step_by(n as usize)
        .map(|k| def.min + (from + k) % def.cycle)
        .collect()
}

/// Allowed values as flags indexed by `value - min`.
fn expand_field(field: &Field, def: Def) -> Vec<bool> {
    let mut set = vec![false; (def.max - def.min + 1) as usize];
    match field {
        Field::Star | Field::Question => set.iter_mut().for_each(|b| *b = true),
        Field::List(items) => {
            for item in items {
                for v in expand_item(*item, def) {
                    set[(v - def.min) as usize] = true;
                }
            }
        }
    }
    set
}

struct DomRule {
    days: Vec<bool>,
    last: bool,
    last_minus: Vec<u32>,
    nearest: Vec<u32>,
    last_weekday: bool,
    last_nearest: Vec<u32>,
}

struct DowRule {
    weekdays: [bool; 7],
    nth: Vec<(u32, u32)>,
    last_of: Vec<u32>,
}

struct Oracle {
    seconds: Vec<bool>,
    minutes: Vec<bool>,
    hours: Vec<bool>,
    months: Vec<bool>,
    years: Option<Vec<bool>>,
    dom: Option<DomRule>,
    dow: Option<DowRule>,
    and: bool,
}

fn days_in_month(y: i32, m: u32) -> u32 {
    (28..=31)
        .rev()
        .find(|d| NaiveDate::from_ymd_opt(y, m, *d).is_some())
        .expect("every month has 28 days")
}

fn weekday_of(y: i32, m: u32, d: u32) -> u32 {
    NaiveDate::from_ymd_opt(y, m, d)
        .expect("valid date")
        .weekday()
        .num_days_from_sunday()
}

impl Oracle {
    fn new(spec: &Spec) -> Oracle {
        let seconds = match &spec.seconds {
            Some(f) => expand_field(f, SECOND),
            None => {
                let mut s = vec![false; 60];
                s[0] = true;
                s
            }
        };
        let years = match &spec.years {
            Some(Field::List(_)) => spec.years.as_ref().map(|f| expand_field(f, YEAR)),
            _ => None,
        };
        let dom = match &spec.dom {
            Day::List(items) => {
                let mut r = DomRule {
                    days: vec![false; 32],
                    last: false,
                    last_minus: Vec::new(),
                    nearest: Vec::new(),
                    last_weekday: false,
                    last_nearest: Vec::new(),
                };
                for item in items {
                    match *item {
                        DomItem::Plain(p) => {
                            for d in expand_item(p, DOM) {
                                r.days[d as usize] = true;
                            }
                        }
                        DomItem::Last => r.last = true,
                        DomItem::LastMinus(n) => r.last_minus.push(n),
                        DomItem::NearestWeekday(n) => r.nearest.push(n),
                        DomItem::LastWeekday => r.last_weekday = true,
                        DomItem::LastNearest(n) => r.last_nearest.push(n),
                    }
                }
                Some(r)
            }
            _ => None,
        };
        let dow = match &spec.dow {
            Day::List(items) => {
                let mut r = DowRule {
                    weekdays: [false; 7],
                    nth: Vec::new(),
                    last_of: Vec::new(),
                };
                for item in items {
                    match *item {
                        DowItem::Plain(p) => {
                            for wd in expand_item(p, DOW) {
                                r.weekdays[(wd % 7) as usize] = true;
                            }
                        }
                        DowItem::Nth(wd, k) => r.nth.push((wd % 7, k)),
                        DowItem::LastOf(wd) => r.last_of.push(wd % 7),
                    }
                }
                Some(r)
            }
            _ => None,
        };
        Oracle {
            seconds,
            minutes: expand_field(&spec.minutes, MINUTE),
            hours: expand_field(&spec.hours, HOUR),
            months: expand_field(&spec.months, MONTH),
            years,
            dom,
            dow,
            and: spec.and,
        }
    }

    fn second_ok(&self, s: u32) -> bool {
        self.seconds[s as usize]
    }

    fn minute_ok(&self, m: u32) -> bool {
        self.minutes[m as usize]
    }

    fn hour_ok(&self, h: u32) -> bool {
        self.hours[h as usize]
    }

    fn seconds_are_zero(&self) -> bool {
        self.seconds.iter().enumerate().all(|(s, b)| *b == (s == 0))
    }

    fn date_ok(&self, date: NaiveDate) -> bool {
        let (y, m, d) = (date.year(), date.month(), date.day());
        if let Some(years) = &self.years {
            let ok = (1970..=2199).contains(&y) && years[(y - 1970) as usize];
            if !ok {
                return false;
            }
        }
        if !self.months[(m - 1) as usize] {
            return false;
        }
        let dim = days_in_month(y, m);
        let wd = date.weekday().num_days_from_sunday();
        let dom = self.dom.as_ref().map(|r| {
            r.days[d as usize]
                || (r.last && d == dim)
                || r.last_minus.iter().any(|&n| n < dim && d == dim - n)
                || r.nearest
                    .iter()
                    .any(|&t| nearest_weekday(y, m, t, dim) == Some(d))
                || (r.last_weekday && d == last_weekday(y, m, dim))
                || r.last_nearest
                    .iter()
                    .any(|&n| n < dim && nearest_weekday(y, m, dim - n, dim) == Some(d))
        });
        let dow = self.dow.as_ref().map(|r| {
            r.weekdays[wd as usize]
                || r.nth.iter().any(|&(w, k)| w == wd && (d - 1) / 7 + 1 == k)
                || r.last_of.iter().any(|&w| w == wd && d + 7 > dim)
        });
        match (dom, dow) {
            (None, None) => true,
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) if self.and => a && b,
            (Some(a), Some(b)) => a || b,
        }
    }

    fn matches(&self, t: NaiveDateTime) -> bool {
        self.date_ok(t.date())
            && self.hour_ok(t.hour())
            && self.minute_ok(t.minute())
            && self.second_ok(t.second())
    }
}

/// Quartz's `nW`: the Monday–Friday day nearest to `t`, never leaving the month. A Saturday
/// moves to the Friday before (to Monday the 3rd when `t` is the 1st), a Sunday to the Monday
/// after (to the Friday before when `t` is the last day).
fn nearest_weekday(y: i32, m: u32, t: u32, dim: u32) -> Option<u32> {
    if t > dim {
        return None;
    }
    Some(match weekday_of(y, m, t) {
        6 if t == 1 => 3,
        6 => t - 1,
        0 if t == dim => t - 2,
        0 => t + 1,
        _ => t,
    })
}

/// `LW`: the last Monday–Friday day of the month.
fn last_weekday(y: i32, m: u32, dim: u32) -> u32 {
    match weekday_of(y, m, dim) {
        6 => dim - 1,
        0 => dim - 2,
        _ => dim,
    }
}

// ---------------------------------------------------------------------------------------------
// Conversions and chains.

fn civil_of_naive(t: NaiveDateTime) -> Civil {
    Civil::new(
        t.year() as i16,
        t.month() as u8,
        t.day() as u8,
        t.hour() as u8,
        t.minute() as u8,
        t.second() as u8,
    )
    .expect("chrono values are valid")
}

fn civil_of<Tz: chrono::TimeZone>(t: &DateTime<Tz>) -> Civil {
    civil_of_naive(t.naive_utc())
}

fn naive_of(c: Civil) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(i32::from(c.year), u32::from(c.month), u32::from(c.day))
        .and_then(|d| d.and_hms_opt(u32::from(c.hour), u32::from(c.minute), u32::from(c.second)))
        .expect("civil values are valid")
}

fn utc_of(c: Civil) -> DateTime<Utc> {
    naive_of(c).and_utc()
}

/// Up to `n` matches strictly after `start`, by repeated `next_civil`.
fn takt_after(e: &CronExpr, start: Civil, n: usize) -> Vec<Civil> {
    let mut out = Vec::with_capacity(n);
    let mut cur = start.add_seconds(1);
    while out.len() < n {
        match e.next_civil(cur) {
            Some(c) => {
                out.push(c);
                cur = c.add_seconds(1);
            }
            None => break,
        }
    }
    out
}

/// Up to `n` matches strictly before `start`, by repeated `prev_civil`.
fn takt_before(e: &CronExpr, start: Civil, n: usize) -> Vec<Civil> {
    let mut out = Vec::with_capacity(n);
    let mut cur = start.add_seconds(-1);
    while out.len() < n {
        match e.prev_civil(cur) {
            Some(c) => {
                out.push(c);
                cur = c.add_seconds(-1);
            }
            None => break,
        }
    }
    out
}

/// Up to `n` fires strictly after `start` through the full schedule in UTC.
fn takt_schedule_after(s: &Schedule, start: Civil, n: usize) -> Result<Vec<Civil>, String> {
    let mut out = Vec::with_capacity(n);
    let mut cur = Timestamp::from_second(utc_of(start).timestamp()).expect("in range");
    while out.len() < n {
        let Some(occ) = s.next_after(cur) else {
            break;
        };
        let at = Utc
            .timestamp_opt(occ.at.as_second(), 0)
            .single()
            .expect("in range");
        let c = civil_of(&at);
        if occ.kind != OccurrenceKind::Fire || occ.nominal != c || occ.offset_seconds != 0 {
            return Err(format!("unexpected utc occurrence {occ:?}"));
        }
        out.push(c);
        cur = occ.at;
    }
    Ok(out)
}

fn truncate_after_year(v: &[Civil], last_year: i16) -> Vec<Civil> {
    v.iter()
        .copied()
        .take_while(|c| c.year <= last_year)
        .collect()
}

fn show(v: &[Civil]) -> String {
    let s: Vec<String> = v.iter().map(ToString::to_string).collect();
    format!("[{}]", s.join(", "))
}

/// A random start instant: uniform over [`START_YEARS`], or within the years an expression names;
/// sometimes on a minute, hour or day boundary, where strictly-after matters most.
fn gen_start(rng: &mut Rng, spec: &Spec) -> Civil {
    let (lo, hi) = match spec.year_span() {
        Some((lo, hi)) if rng.chance(4, 5) => {
            let lo = (lo + YEAR.min) as i32 - 1;
            let hi = ((hi + YEAR.min) as i32).min(lo + 60);
            (lo.max(1960), hi.max(lo))
        }
        _ => START_YEARS,
    };
    let year = rng.range(lo as u32, hi as u32) as i32;
    let month = rng.range(1, 12);
    let dim = days_in_month(year, month);
    let day = if rng.chance(1, 3) {
        rng.range(dim - 2, dim)
    } else {
        rng.range(1, dim)
    };
    let (mut h, mut m, mut s) = (rng.range(0, 23), rng.range(0, 59), rng.range(0, 59));
    match rng.below(8) {
        0 | 1 => s = 0,
        2 => (m, s) = (0, 0),
        3 => (h, m, s) = (0, 0, 0),
        4 => (h, m, s) = (23, 59, 59),
        _ => {}
    }
    Civil::new(
        year as i16,
        month as u8,
        day as u8,
        h as u8,
        m as u8,
        s as u8,
    )
    .expect("valid")
}

/// Collects failures so that one run shows many of them, then panics with the first few.
struct Failures {
    name: &'static str,
    seed: u64,
    list: Vec<String>,
}

impl Failures {
    fn new(name: &'static str, seed: u64) -> Failures {
        Failures {
            name,
            seed,
            list: Vec::new(),
        }
    }

    fn push(&mut self, case: u64, text: &str, msg: String) {
        self.list.push(format!(
            "seed={:#x} case={case} expr=\"{text}\": {msg}",
            self.seed
        ));
    }

    fn finish(self) {
        if !self.list.is_empty() {
            let shown: Vec<&str> = self.list.iter().take(25).map(String::as_str).collect();
            panic!(
                "{}: {} failure(s); first {}:\n{}",
                self.name,
                self.list.len(),
                shown.len(),
                shown.join("\n")
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The `cron` crate 0.17.
//
// What it accepts and means, read from its source (`parsing.rs`, `schedule.rs`,
// `time_unit/*.rs`):
// * 6 or 7 fields (seconds first, optional year); no 5-field form, no `L`, `W`, `#`.
// * Items `*`, `a`, `a-b`, `*/n`, `a-b/n`, `a/n` (= `a` to the field's maximum), names in `a-b`
//   and alone, `?` in both day fields. A step must be 1..=the field's maximum value.
// * Weekdays are 1-7 = SUN-SAT, so we write them by name only. `*/n` and `NAME-NAME/n` select
//   the same weekdays in both numberings; `NAME/n` does not parse there.
// * Day fields always combine with AND (a day-of-week set of all seven days is no filter), which
//   is ours with `DayMatch::And`; with one day field bare `*`/`?` our default OR agrees too.
// * Years run 1970-2100 (ours: 2199), also for a bare `*` (ours: any year); results are compared
//   from 1970 to 2100.
// * `after(t)` is strictly after `t` (it starts at `t + 1s`).

const CRON_CASES: u64 = 3500;
const CRON_STARTS: usize = 3;

#[test]
fn agrees_with_the_cron_crate() {
    let seed = seed();
    let began = Instant::now();
    let mut fails = Failures::new("cron crate", seed);
    let (mut exprs, mut starts, mut fires, mut refused) = (0u64, 0u64, 0u64, 0u64);
    for case in 0..CRON_CASES {
        let mut rng = Rng::for_case(seed, 1, case);
        let spec = gen_spec(&mut rng, Profile::Cron);
        let text = spec.render();
        let peer = match ::cron::Schedule::from_str(&text) {
            Ok(p) => p,
            Err(e) => {
                fails.push(case, &text, format!("the cron crate refuses it: {e}"));
                continue;
            }
        };
        let ours = match spec.parse_takt(&text) {
            Ok(e) => e,
            Err(CronError::NeverFires { .. }) => {
                // Refused as impossible in every year: the peer must agree over its years.
                refused += 1;
                let any = peer
                    .after(&Utc.with_ymd_and_hms(1970, 1, 1, 0, 0, 0).unwrap())
                    .next();
                if let Some(t) = any {
                    fails.push(
                        case,
                        &text,
                        format!("ours says never fires; cron fires {t}"),
                    );
                }
                continue;
            }
            Err(e) => {
                fails.push(case, &text, format!("ours refuses it: {e}"));
                continue;
            }
        };
        let one_day_field_free = !spec.dom.restricted() || !spec.dow.restricted();
        let ours_or = one_day_field_free.then(|| CronExpr::parse(&text).expect("parses"));
        let schedule = Schedule::new(Rule::Cron(ours.clone()), Zone::utc());
        exprs += 1;
        let before_1970 = Civil::new(1969, 12, 31, 23, 59, 59).expect("valid");
        for _ in 0..CRON_STARTS {
            let start = gen_start(&mut rng, &spec).max(before_1970);
            let n = rng.range(5, 20) as usize;
            let want: Vec<Civil> = peer
                .after(&utc_of(start))
                .take(n)
                .map(|t| civil_of(&t))
                .collect();
            let want = truncate_after_year(&want, 2100);
            let got = truncate_after_year(&takt_after(&ours, start, n), 2100);
            starts += 1;
            fires += want.len() as u64;
            if got != want {
                fails.push(
                    case,
                    &text,
                    format!("after {start}: ours {} cron {}", show(&got), show(&want)),
                );
                continue;
            }
            match takt_schedule_after(&schedule, start, n) {
                Ok(s) if truncate_after_year(&s, 2100) == want => {}
                Ok(s) => fails.push(
                    case,
                    &text,
                    format!("after {start}: schedule {} cron {}", show(&s), show(&want)),
                ),
                Err(e) => fails.push(case, &text, format!("after {start}: {e}")),
            }
            if let Some(e) = &ours_or {
                let or = truncate_after_year(&takt_after(e, start, n), 2100);
                if or != want {
                    fails.push(
                        case,
                        &text,
                        format!(
                            "after {start}: ours (OR) {} cron {}",
                            show(&or),
                            show(&want)
                        ),
                    );
                }
            }
        }
    }
    eprintln!(
        "cron crate: {exprs} expressions ({refused} more refused as never firing), {starts} starts, {fires} fire times compared in {:.1?}",
        began.elapsed()
    );
    fails.finish();
}

// ---------------------------------------------------------------------------------------------
// croner 4.
//
// Read from its source (`parser.rs`, `component.rs`, `pattern.rs`, `lib.rs`), with the parser
// built as `seconds(Optional)`, `year(Optional)`, `sloppy_ranges(true)` and `dom_and_dow` for
// AND (sometimes the `+` prefix instead):
// * 5, 6 or 7 fields as ours; weekday 0 and 7 are Sunday; names are replaced by numbers.
// * `?` becomes `*`; the day fields combine with OR unless one is exactly `*` — the same rule
//   as ours (a `*/1` counts as restricted in both).
// * `L` (last day), `nW` (same nearest-weekday rule, never leaving the month, and an `nW` for a
//   day the month lacks never fires), `LW`, `n#k` (k = 1..5), `nL` (last weekday n): same
//   meaning as ours.
// * `sloppy_ranges` makes `a/n` run from `a` to the field's maximum, as ours.
// Excluded, and why:
// * `L-n`: croner has no such item (it fails to parse).
// * `L` together with `LW` in one field: croner keeps them as one flag pair and `L` is lost.
// * `*` inside a list (`*,5`): croner refuses it.
// * `*/n` in the year field: croner counts from year 1, ours from 1970.
// * `n#L`, `MON-FRI#2`, `L` alone in day-of-week: croner-only syntax that ours refuses.
// * A weekday name range ending in SUN: croner rewrites `-SUN` to `-7`, so `SUN-SUN` is the whole
//   week there (ours: Sunday). Weekday ranges are generated to end on 1..=7.
// * Steps larger than the field's span: ours refuses them.
// * Years after 2199 (our last year): compared up to 2199.
// Both searches are strictly after the start (`find_next_occurrence(t, false)`) or strictly
// before it (`find_previous_occurrence(t, false)`).

const CRONER_CASES: u64 = 3500;
const CRONER_STARTS: usize = 3;

fn croner_parser(and: bool) -> croner::parser::CronParser {
    use croner::parser::{CronParser, Seconds, Year};
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Optional)
        .sloppy_ranges(true)
        .dom_and_dow(and)
        .build()
}

fn croner_after(c: &croner::Cron, start: Civil, n: usize) -> Vec<Civil> {
    let mut out = Vec::with_capacity(n);
    let mut cur = utc_of(start);
    while out.len() < n {
        match c.find_next_occurrence(&cur, false) {
            Ok(t) => {
                out.push(civil_of(&t));
                cur = t;
            }
            Err(_) => break,
        }
    }
    out
}

fn croner_before(c: &croner::Cron, start: Civil, n: usize) -> Vec<Civil> {
    let mut out = Vec::with_capacity(n);
    let mut cur = utc_of(start);
    while out.len() < n {
        match c.find_previous_occurrence(&cur, false) {
            Ok(t) => {
                out.push(civil_of(&t));
                cur = t;
            }
            Err(_) => break,
        }
    }
    out
}

/// One expression as ours and as croner.
struct CronerPair<'a> {
    case: u64,
    text: &'a str,
    ours: &'a CronExpr,
    peer: &'a croner::Cron,
}

/// Compares the next `n_next` and previous `n_prev` fires from `start`; returns how many fire
/// times were compared.
fn check_croner(
    fails: &mut Failures,
    p: &CronerPair<'_>,
    start: Civil,
    n_next: usize,
    n_prev: usize,
) -> u64 {
    let CronerPair {
        case,
        text,
        ours,
        peer,
    } = *p;
    let want = truncate_after_year(&croner_after(peer, start, n_next), 2199);
    let got = truncate_after_year(&takt_after(ours, start, n_next), 2199);
    if got != want {
        fails.push(
            case,
            text,
            format!("after {start}: ours {} croner {}", show(&got), show(&want)),
        );
    }
    let want_prev = croner_before(peer, start, n_prev);
    let got_prev = takt_before(ours, start, n_prev);
    if got_prev != want_prev {
        fails.push(
            case,
            text,
            format!(
                "before {start}: ours {} croner {}",
                show(&got_prev),
                show(&want_prev)
            ),
        );
    }
    (want.len() + want_prev.len()) as u64
}

/// [`check_croner`] from 20 random starts, for the hand-picked expressions.
fn check_croner_from_random_starts(fails: &mut Failures, rng: &mut Rng, pair: &CronerPair<'_>) {
    for _ in 0..20 {
        let start = gen_start(rng, &spec_for_starts());
        check_croner(fails, pair, start, 12, 6);
    }
}

#[test]
fn agrees_with_croner() {
    let seed = seed();
    let began = Instant::now();
    let mut fails = Failures::new("croner", seed);
    let (mut exprs, mut starts, mut fires, mut refused, mut or_both) = (0u64, 0u64, 0u64, 0u64, 0);
    for case in 0..CRONER_CASES {
        let mut rng = Rng::for_case(seed, 2, case);
        let spec = gen_spec(&mut rng, Profile::Croner);
        let text = spec.render();
        let ours = match spec.parse_takt(&text) {
            Ok(e) => e,
            Err(CronError::NeverFires { .. }) => {
                // Croner would search day by day up to the year 5000; the oracle test checks
                // these refusals instead.
                refused += 1;
                continue;
            }
            Err(e) => {
                fails.push(case, &text, format!("ours refuses it: {e}"));
                continue;
            }
        };
        // Croner's own AND switch is a `+` before the day-of-week field.
        let plus = spec.and && rng.chance(1, 2);
        let peer_text = if plus {
            let mut fields: Vec<&str> = text.split(' ').collect();
            let dow_at = fields.len() - if spec.years.is_some() { 2 } else { 1 };
            let with_plus = format!("+{}", fields[dow_at]);
            fields[dow_at] = &with_plus;
            fields.join(" ")
        } else {
            text.clone()
        };
        let peer = match croner_parser(spec.and && !plus).parse(&peer_text) {
            Ok(p) => p,
            Err(e) => {
                fails.push(case, &peer_text, format!("croner refuses it: {e}"));
                continue;
            }
        };
        if spec.dom.restricted() && spec.dow.restricted() && !spec.and {
            or_both += 1;
        }
        exprs += 1;
        let pair = CronerPair {
            case,
            text: &text,
            ours: &ours,
            peer: &peer,
        };
        // AND of two restricted day fields can be rare (Friday the 29th of February); croner
        // walks day by day, so ask it for fewer fires there.
        let rare = spec.and && spec.dom.restricted() && spec.dow.restricted();
        for _ in 0..CRONER_STARTS {
            let start = gen_start(&mut rng, &spec);
            let n = if rare {
                rng.range(3, 6)
            } else {
                rng.range(5, 20)
            } as usize;
            starts += 1;
            fires += check_croner(&mut fails, &pair, start, n, 3);
        }
    }
    eprintln!(
        "croner: {exprs} expressions ({or_both} with both day fields OR-ed; {refused} more refused as never firing), {starts} starts, {fires} fire times compared in {:.1?}",
        began.elapsed()
    );
    fails.finish();
}

/// Hand-picked expressions for every construct croner shares with us, so that each is covered
/// whatever the random generator draws.
#[test]
fn agrees_with_croner_on_each_construct() {
    let cases: &[(&str, bool)] = &[
        ("0 0 12 ? * FRI#3", false),
        ("0 0 12 ? * 5#5", false),
        ("0 0 12 ? * 7#1,1#5", false),
        ("0 0 0 L * ?", false),
        ("0 0 0 L 2 ?", false),
        ("0 30 8 LW * ?", false),
        ("0 0 9 1W * ?", false),
        ("0 0 9 31W * ?", false),
        ("0 0 9 15W,L * ?", false),
        ("0 0 9 30W 1-12/2 ?", false),
        ("0 0 18 ? * FRIL", false),
        ("0 0 18 ? * 0L,7L,3L", false),
        ("0 0 0 13 * FRI", false),
        ("0 0 0 13 * FRI", true),
        ("0 0 0 1,15 * MON-WED", false),
        ("0 0 0 L * 5L", false),
        ("0 0 0 LW * 1#1", false),
        ("0 0 0 29 2 *", false),
        ("0 0 0 29 2 MON", true),
        ("0 0 0 */2 * */3", false),
        ("0 0 0 */1 * 1", false),
        ("*/15 */20 9-17 * * 1-5", false),
        ("5/20 * * * *", false),
        ("0 0 6 1 * ? 2030-2040", false),
        ("0 0 6 1 * ? 2030-2060/7", false),
        ("0 0 0 1 JAN,jul SUN-SAT", false),
        ("0 0 0 1 * 6-7", false),
        ("@daily", false),
        ("@weekly", false),
        ("@monthly", false),
        ("@yearly", false),
        ("@hourly", false),
    ];
    let mut fails = Failures::new("croner constructs", 0);
    let mut rng = Rng::for_case(seed(), 3, 0);
    for (case, (text, and)) in cases.iter().enumerate() {
        let day_match = if *and { DayMatch::And } else { DayMatch::Or };
        let ours = CronExpr::parse_with(text, CronOptions { day_match })
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let peer = croner_parser(*and)
            .parse(text)
            .unwrap_or_else(|e| panic!("croner: {text}: {e}"));
        let pair = CronerPair {
            case: case as u64,
            text,
            ours: &ours,
            peer: &peer,
        };
        check_croner_from_random_starts(&mut fails, &mut rng, &pair);
    }
    fails.finish();
}

/// Syntax croner lacks, against the same schedule written the way croner can read it: wrapped
/// ranges and their steps split at the wrap, `?` outside the day fields as `*`, `L-0W` as `LW`,
/// the `@every_…` macros spelled out. The written-out forms are what the README says these mean.
#[test]
fn agrees_with_croner_on_the_written_out_form() {
    let cases: &[(&str, &str)] = &[
        ("0 0 22-2 * * *", "0 0 22-23,0-2 * * *"),
        ("0 30 22-2/2 * * *", "0 30 22,0,2 * * *"),
        ("0 0 23-2/2 * * *", "0 0 23,1 * * *"),
        ("0 50-10 * * * *", "0 50-59,0-10 * * * *"),
        ("57-5/3 * * * * *", "57,0,3 * * * * *"),
        ("59-58 0 12 * * *", "* 0 12 * * *"),
        ("0 0 9 ? * FRI-MON", "0 0 9 ? * 5-6,0-1"),
        ("0 0 9 ? * fri-mon", "0 0 9 ? * 5,6,0,1"),
        ("0 0 9 ? * SAT-SUN", "0 0 9 ? * 6,0"),
        ("0 0 9 ? * 6-0", "0 0 9 ? * 6,7"),
        ("0 0 9 ? * 7-2", "0 0 9 ? * 0-2"),
        ("0 0 9 ? * 7-3/2", "0 0 9 ? * 0,2"),
        ("0 0 9 ? * SAT-MON/2", "0 0 9 ? * 6,1"),
        ("0 0 9 ? * 5-0/2", "0 0 9 ? * 5,0"),
        ("0 0 9 ? * 1-0", "0 0 9 ? * 0-6"),
        ("0 0 0 1 NOV-FEB ?", "0 0 0 1 11-12,1-2 ?"),
        ("0 0 0 1 OCT-MAR/2 ?", "0 0 0 1 10,12,2 ?"),
        ("0 0 0 28-3 * ?", "0 0 0 28-31,1-3 * ?"),
        ("0 0 0 28-3/2 * ?", "0 0 0 28,30,1,3 * ?"),
        ("0 0 0 30-2 2 ?", "0 0 0 30-31,1-2 2 ?"),
        ("0 0 22-2 13 * FRI-MON", "0 0 22-23,0-2 13 * 5-6,0-1"),
        ("? ? 9 * * ?", "* * 9 * * ?"),
        ("0 0 12 1 ? ?", "0 0 12 1 * ?"),
        ("0 0 12 1 1 ? ?", "0 0 12 1 1 ? *"),
        ("0 0 18 L-0W * ?", "0 0 18 LW * ?"),
        ("@every_minute", "* * * * *"),
        ("@every_second", "* * * * * *"),
    ];
    let mut fails = Failures::new("croner written out", 0);
    let mut rng = Rng::for_case(seed(), 6, 0);
    for (case, (text, written_out)) in cases.iter().enumerate() {
        let ours = CronExpr::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let peer = croner_parser(false)
            .parse(written_out)
            .unwrap_or_else(|e| panic!("croner: {written_out}: {e}"));
        let pair = CronerPair {
            case: case as u64,
            text,
            ours: &ours,
            peer: &peer,
        };
        check_croner_from_random_starts(&mut fails, &mut rng, &pair);
    }
    fails.finish();
}

/// A spec without a year field, only to draw start instants.
fn spec_for_starts() -> Spec {
    Spec {
        seconds: None,
        minutes: Field::Star,
        hours: Field::Star,
        dom: Day::Star,
        months: Field::Star,
        dow: Day::Star,
        years: None,
        and: false,
        dow_names: false,
        month_names: false,
        lowercase: false,
    }
}

// ---------------------------------------------------------------------------------------------
// The oracle.

/// Every oracle match in `[from, to)`, walking in steps of `step` seconds (60 only when the
/// seconds field is exactly 0 and `from` is on a minute).
fn oracle_walk(o: &Oracle, from: NaiveDateTime, to: NaiveDateTime, step: i64) -> Vec<Civil> {
    let mut out = Vec::new();
    let mut t = from;
    let mut day: Option<(NaiveDate, bool)> = None;
    while t < to {
        let date = t.date();
        let date_ok = match day {
            Some((d, ok)) if d == date => ok,
            _ => {
                let ok = o.date_ok(date);
                day = Some((date, ok));
                ok
            }
        };
        if date_ok && o.hour_ok(t.hour()) && o.minute_ok(t.minute()) && o.second_ok(t.second()) {
            out.push(civil_of_naive(t));
        }
        t += chrono::Duration::seconds(step);
    }
    out
}

/// The first `n` oracle matches at or after `from`, visiting at most `days` days. Also returns
/// the first instant not examined.
fn oracle_forward(o: &Oracle, from: NaiveDateTime, n: usize, days: u32) -> (Vec<Civil>, Civil) {
    let mut out = Vec::new();
    let mut date = from.date();
    let first_tod = from.time();
    for i in 0..days {
        if o.date_ok(date) {
            for h in (0..24).filter(|h| o.hour_ok(*h)) {
                for m in (0..60).filter(|m| o.minute_ok(*m)) {
                    for s in (0..60).filter(|s| o.second_ok(*s)) {
                        let t = date.and_hms_opt(h, m, s).expect("valid");
                        if i == 0 && t.time() < first_tod {
                            continue;
                        }
                        out.push(civil_of_naive(t));
                        if out.len() == n {
                            return (out, civil_of_naive(t));
                        }
                    }
                }
            }
        }
        date = date.succ_opt().expect("in range");
    }
    (
        out,
        civil_of_naive(date.and_hms_opt(0, 0, 0).expect("valid")),
    )
}

/// The first `n` oracle matches at or before `from`, going back at most `days` days. Also returns
/// the last instant not examined.
fn oracle_backward(o: &Oracle, from: NaiveDateTime, n: usize, days: u32) -> (Vec<Civil>, Civil) {
    let mut out = Vec::new();
    let mut date = from.date();
    let first_tod = from.time();
    for i in 0..days {
        if o.date_ok(date) {
            for h in (0..24).rev().filter(|h| o.hour_ok(*h)) {
                for m in (0..60).rev().filter(|m| o.minute_ok(*m)) {
                    for s in (0..60).rev().filter(|s| o.second_ok(*s)) {
                        let t = date.and_hms_opt(h, m, s).expect("valid");
                        if i == 0 && t.time() > first_tod {
                            continue;
                        }
                        out.push(civil_of_naive(t));
                        if out.len() == n {
                            return (out, civil_of_naive(t));
                        }
                    }
                }
            }
        }
        date = date.pred_opt().expect("in range");
    }
    (
        out,
        civil_of_naive(date.and_hms_opt(23, 59, 59).expect("valid")),
    )
}

/// Repeated `next_civil` from `from` (inclusive) while below `to`.
fn takt_walk_forward(e: &CronExpr, from: Civil, to: Civil) -> Vec<Civil> {
    let mut out = Vec::new();
    let mut cur = from;
    while let Some(c) = e.next_civil(cur) {
        if c >= to {
            break;
        }
        out.push(c);
        cur = c.add_seconds(1);
    }
    out
}

/// Repeated `prev_civil` from `to - 1s` while at or above `from`, in ascending order.
fn takt_walk_backward(e: &CronExpr, from: Civil, to: Civil) -> Vec<Civil> {
    let mut out = Vec::new();
    let mut cur = to.add_seconds(-1);
    while let Some(c) = e.prev_civil(cur) {
        if c < from {
            break;
        }
        out.push(c);
        cur = c.add_seconds(-1);
    }
    out.reverse();
    out
}

const WALK_CASES: u64 = 400;

/// Walks minute by minute (second by second when the seconds field is not exactly 0) over a
/// window and compares the oracle's matches with repeated `next_civil` and `prev_civil`.
#[test]
fn agrees_with_a_brute_force_walk() {
    let seed = seed();
    let began = Instant::now();
    let mut fails = Failures::new("brute-force walk", seed);
    let (mut exprs, mut matched, mut steps) = (0u64, 0u64, 0u64);
    for case in 0..WALK_CASES {
        let mut rng = Rng::for_case(seed, 4, case);
        let spec = gen_spec(&mut rng, Profile::Oracle);
        let text = spec.render();
        let oracle = Oracle::new(&spec);
        let ours = match spec.parse_takt(&text) {
            Ok(e) => e,
            Err(CronError::NeverFires { .. }) => continue,
            Err(e) => {
                fails.push(case, &text, format!("ours refuses it: {e}"));
                continue;
            }
        };
        exprs += 1;
        let by_minute = oracle.seconds_are_zero();
        let mut start = gen_start(&mut rng, &spec);
        let (step, span) = if by_minute {
            start.second = 0;
            (60, 4 * 86_400)
        } else {
            (1, 6 * 3_600)
        };
        let end = start.add_seconds(span);
        let want = oracle_walk(&oracle, naive_of(start), naive_of(end), step);
        steps += (span / step) as u64;
        matched += want.len() as u64;
        let got = takt_walk_forward(&ours, start, end);
        if got != want {
            fails.push(
                case,
                &text,
                format!(
                    "next over [{start}, {end}): ours {} oracle {}",
                    show(&got),
                    show(&want)
                ),
            );
        }
        let got = takt_walk_backward(&ours, start, end);
        if got != want {
            fails.push(
                case,
                &text,
                format!(
                    "prev over [{start}, {end}): ours {} oracle {}",
                    show(&got),
                    show(&want)
                ),
            );
        }
        for c in &want {
            if !ours.matches(*c) {
                fails.push(case, &text, format!("matches({c}) is false"));
            }
        }
    }
    eprintln!(
        "walk: {exprs} expressions, {steps} instants visited, {matched} matches compared in {:.1?}",
        began.elapsed()
    );
    fails.finish();
}

const HORIZON_CASES: u64 = 500;
const HORIZON_DAYS: u32 = 800;

/// Walks day by day over about two years each way (enough for `L`, `W`, `#`, `nL`, leap days
/// and year fields to come round), compares the next and previous 25 matches and checks
/// `matches` against the oracle at random instants.
#[test]
fn agrees_with_the_oracle_over_long_horizons() {
    let seed = seed();
    let began = Instant::now();
    let mut fails = Failures::new("oracle horizon", seed);
    let (mut exprs, mut refused, mut compared, mut probes) = (0u64, 0u64, 0u64, 0u64);
    for case in 0..HORIZON_CASES {
        let mut rng = Rng::for_case(seed, 5, case);
        let spec = gen_spec(&mut rng, Profile::Oracle);
        let text = spec.render();
        let oracle = Oracle::new(&spec);
        let ours = match spec.parse_takt(&text) {
            Ok(e) => e,
            Err(CronError::NeverFires { .. }) => {
                // The refusal claims no day matches in any year; check 28 years (a full
                // weekday/leap cycle) day by day, ignoring the year field.
                refused += 1;
                let mut unyeared = spec.clone();
                unyeared.years = None;
                let o = Oracle::new(&unyeared);
                let mut d = NaiveDate::from_ymd_opt(2000, 1, 1).expect("valid");
                while d.year() < 2028 {
                    if o.date_ok(d) {
                        fails.push(
                            case,
                            &text,
                            format!("refused as never firing but {d} matches"),
                        );
                        break;
                    }
                    d = d.succ_opt().expect("in range");
                }
                continue;
            }
            Err(e) => {
                fails.push(case, &text, format!("ours refuses it: {e}"));
                continue;
            }
        };
        exprs += 1;
        for _ in 0..2 {
            let start = gen_start(&mut rng, &spec);
            let n = 25;
            let (want, horizon) = oracle_forward(&oracle, naive_of(start), n, HORIZON_DAYS);
            let got = takt_after(&ours, start.add_seconds(-1), n);
            compared += want.len() as u64;
            let ok = got.len() >= want.len()
                && got[..want.len()] == want[..]
                && (want.len() == n || got.get(want.len()).is_none_or(|c| *c >= horizon));
            if !ok {
                fails.push(
                    case,
                    &text,
                    format!(
                        "from {start} (horizon {horizon}): ours {} oracle {}",
                        show(&got),
                        show(&want)
                    ),
                );
            }
            let (want, horizon) = oracle_backward(&oracle, naive_of(start), n, HORIZON_DAYS);
            let got = takt_before(&ours, start.add_seconds(1), n);
            compared += want.len() as u64;
            let ok = got.len() >= want.len()
                && got[..want.len()] == want[..]
                && (want.len() == n || got.get(want.len()).is_none_or(|c| *c <= horizon));
            if !ok {
                fails.push(
                    case,
                    &text,
                    format!(
                        "back from {start} (horizon {horizon}): ours {} oracle {}",
                        show(&got),
                        show(&want)
                    ),
                );
            }
        }
        // `matches` at random instants near the start and at the oracle's own matches.
        for _ in 0..20 {
            let start = gen_start(&mut rng, &spec);
            probes += 1;
            if ours.matches(start) != oracle.matches(naive_of(start)) {
                fails.push(
                    case,
                    &text,
                    format!("matches({start}): ours {}", ours.matches(start)),
                );
            }
        }
    }
    eprintln!(
        "horizon: {exprs} expressions ({refused} more refused as never firing), {compared} matches compared, {probes} matches() probes in {:.1?}",
        began.elapsed()
    );
    fails.finish();
}

/// Every single day rule (`L`, `L-n`, `nW`, `LW`, `L-nW`, `n#k`, `nL`) alone, fired daily at midnight over
/// every month of 2000–2027 (all combinations of month length and weekday of the 1st) and of
/// 2090–2110 (across the non-leap 2100): ours against the oracle both ways, and against croner
/// where it has the rule.
#[test]
fn every_day_rule_over_whole_calendars() {
    let mut items: Vec<(Day<DomItem>, Day<DowItem>)> = Vec::new();
    items.push((Day::List(vec![DomItem::Last]), Day::Question));
    items.push((Day::List(vec![DomItem::LastWeekday]), Day::Question));
    for n in 0..=30 {
        items.push((Day::List(vec![DomItem::LastMinus(n)]), Day::Question));
    }
    for n in 1..=31 {
        items.push((Day::List(vec![DomItem::NearestWeekday(n)]), Day::Question));
    }
    for n in 0..=30 {
        items.push((Day::List(vec![DomItem::LastNearest(n)]), Day::Question));
    }
    for wd in 0..=7 {
        items.push((Day::Question, Day::List(vec![DowItem::LastOf(wd)])));
        for k in 1..=5 {
            items.push((Day::Question, Day::List(vec![DowItem::Nth(wd, k)])));
        }
    }
    let mut fails = Failures::new("day rules", 0);
    let mut fires = 0u64;
    for (case, (dom, dow)) in items.into_iter().enumerate() {
        let case = case as u64;
        let spec = Spec {
            seconds: Some(Field::List(vec![Item::Val(0)])),
            minutes: Field::List(vec![Item::Val(0)]),
            hours: Field::List(vec![Item::Val(0)]),
            dom,
            dow,
            ..spec_for_starts()
        };
        let text = spec.render();
        let oracle = Oracle::new(&spec);
        let ours = match spec.parse_takt(&text) {
            Ok(e) => e,
            // `L-30`, `L-30W` and `31W` need a 31-day month: it exists, so nothing is refused.
            Err(e) => {
                fails.push(case, &text, format!("ours refuses it: {e}"));
                continue;
            }
        };
        let croner = !matches!(
            spec.dom,
            Day::List(ref v) if matches!(v[0], DomItem::LastMinus(_) | DomItem::LastNearest(_))
        );
        let peer = croner.then(|| croner_parser(false).parse(&text).expect("croner parses"));
        for (from, to) in [(2000, 2028), (2090, 2111)] {
            let start = Civil::new(from, 1, 1, 0, 0, 0).expect("valid");
            let end = Civil::new(to, 1, 1, 0, 0, 0).expect("valid");
            let days = (naive_of(end) - naive_of(start)).num_days() as u32;
            let (want, _) = oracle_forward(&oracle, naive_of(start), usize::MAX, days);
            fires += want.len() as u64;
            let got = takt_walk_forward(&ours, start, end);
            if got != want {
                fails.push(
                    case,
                    &text,
                    format!("next: ours {} oracle {}", show(&got), show(&want)),
                );
            }
            let got = takt_walk_backward(&ours, start, end);
            if got != want {
                fails.push(
                    case,
                    &text,
                    format!("prev: ours {} oracle {}", show(&got), show(&want)),
                );
            }
            if let Some(peer) = &peer {
                let all = croner_after(peer, start.add_seconds(-1), want.len() + 1);
                let got: Vec<Civil> = all.into_iter().take_while(|c| *c < end).collect();
                if got != want {
                    fails.push(
                        case,
                        &text,
                        format!("croner {} oracle {}", show(&got), show(&want)),
                    );
                }
            }
        }
    }
    eprintln!("day rules: {fires} fires compared");
    fails.finish();
}
