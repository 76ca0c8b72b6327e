//! Plain-English descriptions of cron expressions, built from the parsed bit sets (so the text
//! always says what the engine does, whatever spelling the user chose).

use super::{CronExpr, DayMatch};
use crate::schedule::describe::{WEEKDAYS, join_and, month_name, ordinal};

/// The shape of one field's allowed values.
enum Shape {
    All,
    Single(u32),
    /// `start, start+step, …` up to the field's maximum, from within the first step.
    Step {
        start: u32,
        step: u32,
    },
    /// Three or more consecutive values from `from` through `to`; `from > to` when they run on
    /// past the field's maximum (a wrapped range such as hours 22-2).
    Range(u32, u32),
    /// Three or more values `step` (at least 2) apart from `from` through `to`, wrapped like
    /// [`Shape::Range`] when `from > to`.
    Progression {
        from: u32,
        to: u32,
        step: u32,
    },
    /// Anything else, in ascending order.
    List(Vec<u32>),
}

/// The values of `bits` between `min` and `max`, ascending.
fn values(bits: u64, min: u32, max: u32) -> Vec<u32> {
    (min..=max).filter(|v| bits & (1 << v) != 0).collect()
}

/// `values` (ascending) in the order they run when the field may wrap: starting after the widest
/// gap, so that 22, 23, 0, 1 (hours) or Saturday, Sunday come out in that order. Without `wrap`,
/// or when the widest gap is the one from the maximum back to the minimum, unchanged.
fn cyclic_order(values: &[u32], span: u32, wrap: bool) -> Vec<u32> {
    let n = values.len();
    if !wrap || n < 2 {
        return values.to_vec();
    }
    let gap = |i: usize| {
        if i + 1 < n {
            values[i + 1] - values[i]
        } else {
            values[0] + span - values[n - 1]
        }
    };
    let widest = (0..n).map(gap).max().unwrap_or(0);
    let start = if gap(n - 1) == widest {
        0
    } else {
        (0..n).position(|i| gap(i) == widest).map_or(0, |i| i + 1)
    };
    values[start..]
        .iter()
        .chain(&values[..start])
        .copied()
        .collect()
}

/// The shape of a field's values. `wrap` says whether a run may continue from the field's
/// maximum to its minimum: only when the coarser fields let it (hours 22-2 run on into the next
/// day only when every day matches), so that the description never promises a stretch of time
/// the coarser fields cut.
fn shape(bits: u64, min: u32, max: u32, wrap: bool) -> Shape {
    let asc = values(bits, min, max);
    let n = asc.len();
    let span = max - min + 1;
    if n == 0 {
        return Shape::List(asc);
    }
    if n as u32 == span {
        return Shape::All;
    }
    if n == 1 {
        return Shape::Single(asc[0]);
    }
    let step = asc[1] - asc[0];
    let arithmetic = asc.windows(2).all(|w| w[1] - w[0] == step);
    if arithmetic && n > 2 && asc[n - 1] + step > max && asc[0] < step + min {
        return Shape::Step {
            start: asc[0],
            step,
        };
    }
    if n >= 3 {
        let run = cyclic_order(&asc, span, wrap);
        let diff = |w: &[u32]| (w[1] + span - w[0]) % span;
        let step = diff(&run[..2]);
        if run.windows(2).all(|w| diff(w) == step) {
            let (from, to) = (run[0], run[n - 1]);
            return if step == 1 {
                Shape::Range(from, to)
            } else {
                Shape::Progression { from, to, step }
            };
        }
    }
    Shape::List(asc)
}

fn plural(n: u32, unit: &str) -> String {
    if n == 1 {
        format!("every {unit}")
    } else {
        format!("every {n} {unit}s")
    }
}

fn hm(h: u32, m: u32, s: Option<u32>) -> String {
    match s {
        Some(s) if s != 0 => format!("{h:02}:{m:02}:{s:02}"),
        _ => format!("{h:02}:{m:02}"),
    }
}

/// Numbers in English, runs of three or more joined by `to` ("0 through 10 and 50 through 59").
fn runs(values: &[u32], to: &str) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}{to}{}", values[i], values[j]));
        } else {
            parts.extend(values[i..=j].iter().map(u32::to_string));
        }
        i = j + 1;
    }
    join_and(&parts)
}

const ALL_HOURS: u64 = (1 << 24) - 1;
const ALL_MINUTES: u64 = (1 << 60) - 1;

/// The phrase for seconds or minutes (`unit`), other than a single value in the simple cases.
fn sub_hour_phrase(shape: &Shape, unit: &str) -> String {
    match shape {
        Shape::All => format!("every {unit}"),
        Shape::Single(x) => format!("at {unit} {x}"),
        Shape::Range(lo, hi) => format!("every {unit} from {unit} {lo} through {hi}"),
        Shape::Step { start: 0, step } => plural(*step, unit),
        Shape::Step { start, step } => format!("{} from {unit} {start}", plural(*step, unit)),
        Shape::Progression { from, to, step } => {
            format!("{} from {unit} {from} through {to}", plural(*step, unit))
        }
        Shape::List(v) => format!("at {unit}s {}", runs(v, " through ")),
    }
}

/// The time of day. `every_day`: every day matches (no day, month or year restriction), so an
/// hour range may run on past midnight.
fn time_part(c: &CronExpr, every_day: bool) -> String {
    let hours_all = c.hours & ALL_HOURS == ALL_HOURS;
    let minutes_all = c.minutes & ALL_MINUTES == ALL_MINUTES;
    let s = shape(c.seconds, 0, 59, every_day && hours_all && minutes_all);
    let m = shape(c.minutes, 0, 59, every_day && hours_all);
    let h = shape(c.hours, 0, 23, every_day);
    if let (Shape::Single(sec), Shape::Single(min)) = (&s, &m) {
        let sec = Some(*sec);
        return match &h {
            Shape::Single(hr) => format!("at {}", hm(*hr, *min, sec)),
            Shape::All => match sec {
                Some(x) if x != 0 => format!("every hour at {min:02}:{x:02} past the hour"),
                _ => format!("every hour at minute {min}"),
            },
            Shape::Range(lo, hi) => format!(
                "every hour from {} through {}",
                hm(*lo, *min, sec),
                hm(*hi, *min, sec)
            ),
            Shape::Step { start, step } => {
                format!("{} from {}", plural(*step, "hour"), hm(*start, *min, sec))
            }
            Shape::Progression { from, to, step } => format!(
                "{} from {} through {}",
                plural(*step, "hour"),
                hm(*from, *min, sec),
                hm(*to, *min, sec)
            ),
            Shape::List(hours) => format!(
                "at {}",
                join_and(
                    &hours
                        .iter()
                        .map(|hr| hm(*hr, *min, sec))
                        .collect::<Vec<_>>()
                )
            ),
        };
    }
    let hours = match &h {
        Shape::All => String::new(),
        Shape::Single(hr) => format!(" during the {hr:02}:00 hour"),
        Shape::Range(lo, hi) => format!(" between {lo:02}:00 and {hi:02}:59"),
        Shape::Step { start, step } => {
            format!(" during {} from {start:02}:00", plural(*step, "hour"))
        }
        Shape::Progression { from, to, step } => format!(
            " during {} from {from:02}:00 through {to:02}:00",
            plural(*step, "hour")
        ),
        Shape::List(v) => format!(
            " during hours {}",
            join_and(&v.iter().map(|x| format!("{x:02}")).collect::<Vec<_>>())
        ),
    };
    let minute_phrase = sub_hour_phrase(&m, "minute");
    if matches!(s, Shape::Single(0)) {
        return format!("{minute_phrase}{hours}");
    }
    let second_phrase = sub_hour_phrase(&s, "second");
    match m {
        Shape::All => format!("{second_phrase}{hours}"),
        _ => format!("{second_phrase}, {minute_phrase}{hours}"),
    }
}

fn dom_phrase(c: &CronExpr) -> Vec<String> {
    let d = &c.days;
    let mut parts = Vec::new();
    let dom = u64::from(d.dom);
    // Days of one month: they never wrap into the next.
    match shape(dom, 1, 31, false) {
        Shape::All => parts.push("every day".to_string()),
        Shape::Single(x) => parts.push(format!("day {x}")),
        Shape::Range(lo, hi) => parts.push(format!("days {lo} to {hi}")),
        Shape::Step { start, step } => parts.push(format!("every {step} days from day {start}")),
        Shape::List(v) if v.is_empty() => {}
        Shape::Progression { .. } | Shape::List(_) => {
            parts.push(format!("days {}", runs(&values(dom, 1, 31), " to ")));
        }
    }
    for k in 0..31 {
        if d.dom_last_offsets & (1 << k) != 0 {
            parts.push(match k {
                0 => "the last day".to_string(),
                1 => "the day before the last day".to_string(),
                k => format!("{k} days before the last day"),
            });
        }
    }
    for t in 1..=31 {
        if d.dom_nearest_weekday & (1 << t) != 0 {
            parts.push(format!("the weekday nearest day {t}"));
        }
    }
    for k in 0..31 {
        if d.dom_last_nearest & (1 << k) != 0 {
            parts.push(match k {
                0 => "the last weekday (Monday to Friday)".to_string(),
                1 => "the weekday nearest the day before the last day".to_string(),
                k => format!("the weekday nearest {k} days before the last day"),
            });
        }
    }
    parts
}

fn dow_phrase(c: &CronExpr) -> Vec<String> {
    let d = &c.days;
    let mut parts = Vec::new();
    // Plain weekdays are the bits common to every week; recover them from the table for a
    // month starting on Sunday, where weekday w first falls on day w + 1.
    let plain: Vec<u32> = (0..7)
        .filter(|w| {
            let t = d.dow_by_first[0];
            // Plain weekdays fill every week; an n#k item only one.
            (0..4).all(|week| t & (1 << (w + 1 + 7 * week)) != 0)
        })
        .collect();
    let plain_bits = plain.iter().fold(0u64, |b, w| b | 1 << w);
    // A set of weekdays reads the same in any week, so it may always wrap (Friday through
    // Monday, Saturday and Sunday).
    match shape(plain_bits, 0, 6, true) {
        Shape::All => parts.push("every day".to_string()),
        Shape::Range(lo, hi) => parts.push(format!(
            "{} through {}",
            WEEKDAYS[lo as usize], WEEKDAYS[hi as usize]
        )),
        Shape::Single(x) => parts.push(WEEKDAYS[x as usize].to_string()),
        Shape::List(v) if v.is_empty() => {}
        Shape::Step { .. } | Shape::Progression { .. } | Shape::List(_) => parts.push(join_and(
            &cyclic_order(&plain, 7, true)
                .iter()
                .map(|x| WEEKDAYS[*x as usize].to_string())
                .collect::<Vec<_>>(),
        )),
    }
    // n#k: in a month starting on Sunday, the k-th weekday w is day w + 1 + 7(k-1); it is an
    // n#k item (not a plain weekday) when the weekday is not plain.
    for w in 0..7u32 {
        if plain.contains(&w) {
            continue;
        }
        for k in 1..=5u32 {
            let day = w + 1 + 7 * (k - 1);
            if day <= 31 && d.dow_by_first[0] & (1 << day) != 0 {
                parts.push(format!("the {} {}", ordinal(k), WEEKDAYS[w as usize]));
            }
        }
    }
    for w in 0..7 {
        if d.dow_last & (1 << w) != 0 {
            parts.push(format!("the last {}", WEEKDAYS[w as usize]));
        }
    }
    parts
}

/// The months. They may wrap (November through February) unless a year field makes "the
/// following January" a different question.
fn month_part(c: &CronExpr) -> String {
    let wrap = c.years.is_none();
    match shape(c.months, 1, 12, wrap) {
        Shape::All => "every month".to_string(),
        Shape::Single(m) => month_name(m).to_string(),
        Shape::Range(lo, hi) => format!("{} through {}", month_name(lo), month_name(hi)),
        Shape::Step { .. } | Shape::Progression { .. } | Shape::List(_) => join_and(
            &cyclic_order(&values(c.months, 1, 12), 12, wrap)
                .iter()
                .map(|m| month_name(*m).to_string())
                .collect::<Vec<_>>(),
        ),
    }
}

pub(super) fn describe(c: &CronExpr) -> String {
    let d = &c.days;
    let months_all = c.months & 0x1ffe == 0x1ffe;
    let every_day = d.dom_any && d.dow_any && months_all && c.years.is_none();
    let time = time_part(c, every_day);
    let month = month_part(c);
    let days = match (d.dom_any, d.dow_any) {
        (true, true) if months_all => "every day".to_string(),
        (true, true) => format!("every day in {month}"),
        (true, false) => {
            let w = join_and(&dow_phrase(c));
            if months_all {
                format!("on {w}")
            } else {
                format!("on {w} in {month}")
            }
        }
        (false, dow_any) => {
            let dom = format!("on {} of {month}", join_and(&dom_phrase(c)));
            if dow_any {
                dom
            } else {
                let joiner = match d.day_match {
                    DayMatch::Or => "or",
                    DayMatch::And => "if it is also",
                };
                format!("{dom} {joiner} on {}", join_and(&dow_phrase(c)))
            }
        }
    };
    let years = match &c.years {
        None => String::new(),
        Some(bits) => {
            let ys: Vec<String> = (0..256u32)
                .filter(|i| bits[(i / 64) as usize] & (1 << (i % 64)) != 0)
                .map(|i| (i + super::MIN_CRON_YEAR).to_string())
                .collect();
            if ys.len() > 6 {
                format!(
                    ", in {} years from {} to {}",
                    ys.len(),
                    ys[0],
                    ys[ys.len() - 1]
                )
            } else {
                format!(", in {}", join_and(&ys))
            }
        }
    };
    format!("{time} {days}{years}")
}

#[cfg(test)]
mod tests {
    use crate::schedule::cron::{CronExpr, CronOptions, DayMatch};

    fn d(expr: &str) -> String {
        CronExpr::parse(expr).unwrap().describe()
    }

    #[test]
    fn describes_common_expressions() {
        assert_eq!(d("0 2 L * *"), "at 02:00 on the last day of every month");
        assert_eq!(d("*/5 * * * *"), "every 5 minutes every day");
        assert_eq!(d("* * * * *"), "every minute every day");
        assert_eq!(d("*/10 * * * * *"), "every 10 seconds every day");
        assert_eq!(d("0 30 9 * * MON-FRI"), "at 09:30 on Monday through Friday");
        assert_eq!(
            d("0 6-22 * * 1-5"),
            "every hour from 06:00 through 22:00 on Monday through Friday"
        );
        assert_eq!(d("0 9 * * WED,SAT"), "at 09:00 on Wednesday and Saturday");
        assert_eq!(d("0 12 ? * 5#3"), "at 12:00 on the third Friday");
        assert_eq!(d("0 12 ? * 5L"), "at 12:00 on the last Friday");
        assert_eq!(d("@yearly"), "at 00:00 on day 1 of January");
        assert_eq!(d("@hourly"), "every hour at minute 0 every day");
        assert_eq!(
            d("0 0 1,15 * MON"),
            "at 00:00 on days 1 and 15 of every month or on Monday"
        );
        let and = CronExpr::parse_with(
            "0 0 1-7 * MON",
            CronOptions {
                day_match: DayMatch::And,
            },
        )
        .unwrap();
        assert_eq!(
            and.describe(),
            "at 00:00 on days 1 to 7 of every month if it is also on Monday"
        );
        assert_eq!(
            d("0 0 LW * *"),
            "at 00:00 on the last weekday (Monday to Friday) of every month"
        );
        assert_eq!(
            d("0 0 15W * *"),
            "at 00:00 on the weekday nearest day 15 of every month"
        );
        assert_eq!(
            d("0 0 L-2 * *"),
            "at 00:00 on 2 days before the last day of every month"
        );
        assert_eq!(d("0 8,17 * * *"), "at 08:00 and 17:00 every day");
        assert_eq!(d("0 0 12 * * ? 2030"), "at 12:00 every day, in 2030");
        assert_eq!(
            d("30 0 12 1 1-3 *"),
            "at 12:00:30 on day 1 of January through March"
        );
    }

    #[test]
    fn describes_wrapped_ranges_in_the_order_they_run() {
        assert_eq!(
            d("0 22-2 * * *"),
            "every hour from 22:00 through 02:00 every day"
        );
        assert_eq!(
            d("0 0 22-2/2 * * *"),
            "every 2 hours from 22:00 through 02:00 every day"
        );
        assert_eq!(
            d("0 15 22-2 * * *"),
            "every hour from 22:15 through 02:15 every day"
        );
        assert_eq!(
            d("*/10 22-2 * * *"),
            "every 10 minutes between 22:00 and 02:59 every day"
        );
        assert_eq!(
            d("50-10 * * * *"),
            "every minute from minute 50 through 10 every day"
        );
        assert_eq!(
            d("50-10/5 * * * * *"),
            "every 5 seconds from second 50 through 10 every day"
        );
        assert_eq!(d("0 9 * * FRI-MON"), "at 09:00 on Friday through Monday");
        assert_eq!(d("0 9 * * SAT-SUN"), "at 09:00 on Saturday and Sunday");
        assert_eq!(d("0 9 * * 0,6"), "at 09:00 on Saturday and Sunday");
        assert_eq!(d("0 9 * * SAT-MON/2"), "at 09:00 on Saturday and Monday");
        assert_eq!(
            d("0 0 1 NOV-FEB *"),
            "at 00:00 on day 1 of November through February"
        );
        assert_eq!(
            d("0 0 * DEC-JAN *"),
            "at 00:00 every day in December and January"
        );
        assert_eq!(
            d("0 0 28-3 * *"),
            "at 00:00 on days 1 to 3 and 28 to 31 of every month"
        );
    }

    /// A wrapped range reads as one stretch of time only when the coarser fields let it run on
    /// (every day for hours, every hour for minutes): `22-2` on Mondays is Monday 00:00-02:00
    /// and Monday 22:00-23:00, not Monday night into Tuesday.
    #[test]
    fn does_not_claim_a_wrap_the_coarser_fields_interrupt() {
        assert_eq!(
            d("0 22-2 * * MON"),
            "at 00:00, 01:00, 02:00, 22:00 and 23:00 on Monday"
        );
        assert_eq!(
            d("50-10 9 * * *"),
            "at minutes 0 through 10 and 50 through 59 during the 09:00 hour every day"
        );
        assert_eq!(
            d("0 0 0 1 NOV-FEB ? 2030"),
            "at 00:00 on day 1 of January, February, November and December, in 2030"
        );
    }

    #[test]
    fn describes_the_new_items_and_macros() {
        assert_eq!(
            d("0 0 L-2W * ?"),
            "at 00:00 on the weekday nearest 2 days before the last day of every month"
        );
        assert_eq!(
            d("0 0 L-1W * ?"),
            "at 00:00 on the weekday nearest the day before the last day of every month"
        );
        assert_eq!(
            d("0 0 L-0W * ?"),
            "at 00:00 on the last weekday (Monday to Friday) of every month"
        );
        assert_eq!(d("@every_second"), "every second every day");
        assert_eq!(d("@every_minute"), "every minute every day");
        assert_eq!(
            d("0 ? 9 ? ? ?"),
            "every minute during the 09:00 hour every day"
        );
        assert_eq!(d("0 9 * * MON-TUE"), "at 09:00 on Monday and Tuesday");
        assert_eq!(d("0 22,23 * * *"), "at 22:00 and 23:00 every day");
        assert_eq!(
            d("0 9,12,15 * * *"),
            "every 3 hours from 09:00 through 15:00 every day"
        );
    }
}
