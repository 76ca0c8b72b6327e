//! Plain-English descriptions of cron expressions, built from the parsed bit sets (so the text
//! always says what the engine does, whatever spelling the user chose).

use super::{CronExpr, DayMatch};
use crate::schedule::describe::{WEEKDAYS, join_and, month_name, ordinal};

/// The shape of one field's allowed values.
enum Shape {
    All,
    Single(u32),
    /// `start, start+step, …` up to the field's maximum.
    Step {
        start: u32,
        step: u32,
    },
    Range(u32, u32),
    List(Vec<u32>),
}

fn shape(bits: u64, min: u32, max: u32) -> Shape {
    let values: Vec<u32> = (min..=max).filter(|v| bits & (1 << v) != 0).collect();
    let n = values.len();
    if n == 0 {
        return Shape::List(values);
    }
    if n as u32 == max - min + 1 {
        return Shape::All;
    }
    if n == 1 {
        return Shape::Single(values[0]);
    }
    let step = values[1] - values[0];
    let arithmetic = values.windows(2).all(|w| w[1] - w[0] == step);
    if arithmetic && step == 1 {
        return Shape::Range(values[0], values[n - 1]);
    }
    if arithmetic && n > 2 && values[n - 1] + step > max && values[0] < step + min {
        return Shape::Step {
            start: values[0],
            step,
        };
    }
    Shape::List(values)
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

fn list(values: &[u32]) -> String {
    join_and(&values.iter().map(u32::to_string).collect::<Vec<_>>())
}

fn time_part(c: &CronExpr) -> String {
    let s = shape(c.seconds, 0, 59);
    let m = shape(c.minutes, 0, 59);
    let h = shape(c.hours, 0, 23);
    if let (Shape::Single(sec), Shape::Single(min)) = (&s, &m) {
        let sec = Some(*sec);
        return match &h {
            Shape::Single(hr) => format!("at {}", hm(*hr, *min, sec)),
            Shape::All => match sec {
                Some(x) if x != 0 => format!("every hour at {min:02}:{x:02} past the hour"),
                _ => format!("every hour at minute {min}"),
            },
            Shape::Range(lo, hi) => format!(
                "every hour from {} to {}",
                hm(*lo, *min, sec),
                hm(*hi, *min, sec)
            ),
            Shape::Step { start, step } => {
                format!("{} from {}", plural(*step, "hour"), hm(*start, *min, sec))
            }
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
        Shape::List(v) => format!(
            " during hours {}",
            join_and(&v.iter().map(|x| format!("{x:02}")).collect::<Vec<_>>())
        ),
    };
    let seconds_zero = matches!(s, Shape::Single(0));
    let minute_phrase = match &m {
        Shape::All => "every minute".to_string(),
        Shape::Single(x) => format!("at minute {x}"),
        Shape::Range(lo, hi) => format!("every minute from minute {lo} to {hi}"),
        Shape::Step { start: 0, step } => plural(*step, "minute"),
        Shape::Step { start, step } => format!("{} from minute {start}", plural(*step, "minute")),
        Shape::List(v) => format!("at minutes {}", list(v)),
    };
    if seconds_zero {
        return format!("{minute_phrase}{hours}");
    }
    let second_phrase = match &s {
        Shape::All => "every second".to_string(),
        Shape::Single(x) => format!("at second {x}"),
        Shape::Range(lo, hi) => format!("every second from second {lo} to {hi}"),
        Shape::Step { start: 0, step } => plural(*step, "second"),
        Shape::Step { start, step } => format!("{} from second {start}", plural(*step, "second")),
        Shape::List(v) => format!("at seconds {}", list(v)),
    };
    match m {
        Shape::All => format!("{second_phrase}{hours}"),
        _ => format!("{second_phrase}, {minute_phrase}{hours}"),
    }
}

fn dom_phrase(c: &CronExpr) -> Vec<String> {
    let d = &c.days;
    let mut parts = Vec::new();
    match shape(u64::from(d.dom), 1, 31) {
        Shape::All => parts.push("every day".to_string()),
        Shape::Single(x) => parts.push(format!("day {x}")),
        Shape::Range(lo, hi) => parts.push(format!("days {lo} to {hi}")),
        Shape::Step { start, step } => parts.push(format!("every {step} days from day {start}")),
        Shape::List(v) if v.is_empty() => {}
        Shape::List(v) => parts.push(format!("days {}", list(&v))),
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
    if d.dom_last_weekday {
        parts.push("the last weekday (Monday to Friday)".to_string());
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
    match shape(plain_bits, 0, 6) {
        Shape::All => parts.push("every day".to_string()),
        Shape::Range(lo, hi) => parts.push(format!(
            "{} through {}",
            WEEKDAYS[lo as usize], WEEKDAYS[hi as usize]
        )),
        Shape::Single(x) => parts.push(WEEKDAYS[x as usize].to_string()),
        Shape::List(v) if v.is_empty() => {}
        Shape::List(v) => parts.push(join_and(
            &v.iter()
                .map(|x| WEEKDAYS[*x as usize].to_string())
                .collect::<Vec<_>>(),
        )),
        Shape::Step { .. } => parts.push(join_and(
            &plain
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

fn month_part(c: &CronExpr) -> String {
    match shape(c.months, 1, 12) {
        Shape::All => "every month".to_string(),
        Shape::Single(m) => month_name(m).to_string(),
        Shape::Range(lo, hi) => format!("{} through {}", month_name(lo), month_name(hi)),
        Shape::Step { .. } | Shape::List(_) => join_and(
            &(1..=12)
                .filter(|m| c.months & (1 << m) != 0)
                .map(|m| month_name(m).to_string())
                .collect::<Vec<_>>(),
        ),
    }
}

pub(super) fn describe(c: &CronExpr) -> String {
    let time = time_part(c);
    let d = &c.days;
    let months_all = c.months & 0x1ffe == 0x1ffe;
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
            "every hour from 06:00 to 22:00 on Monday through Friday"
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
}
