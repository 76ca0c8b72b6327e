//! The JSON / TOML form of a schedule, and its translation to [`takt_core::schedule::Schedule`].
//!
//! Core types are deliberately not `Serialize`: this DTO is the one place that decides how a
//! schedule looks in a config file, a job definition or the API, so the wire format can evolve
//! (with aliases) without touching the engine. Exactly one rule key is required:
//!
//! ```toml
//! cron = "0 2 L * *"             # or: calendar = "weekly mon-fri every 1h between 06:00-22:30"
//! tz = "Europe/Berlin"           # IANA name; default UTC
//! day_match = "or"               # cron only: "or" (default, Vixie) or "and"
//! dst_gap = "shift"              # "shift" (default) or "skip"
//! dst_fold = "auto"              # "auto" (default), "once" or "both"
//! ```
//!
//! ```toml
//! every = "5m"                   # a fixed interval of elapsed time
//! anchor = "2026-01-01T00:00:00Z"  # optional phase; default the Unix epoch
//! ```
//!
//! ```toml
//! at = "2026-12-01T06:00:00"     # once; an instant with offset, or wall-clock time in `tz`
//! tz = "Asia/Shanghai"
//! ```
//!
//! A calendar may also be a table, field by field in the SQL Server Agent style of the seeds:
//!
//! ```toml
//! [calendar]
//! frequency = "weekly"           # daily | weekly | monthly
//! every = 1                      # every N days / weeks / months
//! weekdays = ["mon", "tue", "wed", "thu", "fri"]   # weekly
//! # days = [1, 15, "last", "last weekday", "2nd tue"]  # monthly
//! repeat = "1h"                  # or: at = ["06:00"]  (once or more a day)
//! between = "06:00:00-22:30:00"  # window for `repeat`
//! from = "2000-01-01"            # effective from (inclusive)
//! until = "2099-01-01"           # expires at (exclusive)
//! ```

use serde::{Deserialize, Serialize};
use takt_core::Timestamp;
use takt_core::civil::Civil;
use takt_core::schedule::calendar::CalendarRule;
use takt_core::schedule::cron::{CronExpr, CronOptions, DayMatch};
use takt_core::schedule::{
    DstPolicy, FoldPolicy, GapPolicy, Interval, Rule, Schedule, Zone, format_duration,
    parse_duration,
};

/// Why a schedule spec was refused. Messages name the field and what to write instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// None or several of `cron`, `calendar`, `every`, `at`.
    #[error("a schedule needs exactly one of cron, calendar, every or at; found {found}")]
    RuleCount {
        /// What was found, e.g. "none" or "cron and every".
        found: String,
    },
    /// A key that only applies to another rule kind.
    #[error("{key} applies only to {applies_to} schedules")]
    Misplaced {
        /// The key.
        key: &'static str,
        /// The schedule kind it belongs to.
        applies_to: &'static str,
    },
    /// A field's value is invalid.
    #[error("{field}: {message}")]
    Invalid {
        /// The field, e.g. `cron` or `calendar.days[2]`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The text is not valid JSON or TOML.
    #[error("schedule spec is neither valid JSON ({json}) nor valid TOML ({toml})")]
    Syntax {
        /// The JSON parser's complaint.
        json: String,
        /// The TOML parser's complaint.
        toml: String,
    },
}

fn invalid(field: impl Into<String>, message: impl std::fmt::Display) -> SpecError {
    SpecError::Invalid {
        field: field.into(),
        message: message.to_string(),
    }
}

/// The serialised form of a schedule. See the module docs for the fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// A cron expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// A calendar schedule, as the one-line text form or as a table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<CalendarSpec>,
    /// A fixed interval such as `90s`, `5m` or `1h30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// The interval's anchor instant (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
    /// A one-shot instant: RFC 3339 with an offset, or a wall-clock time read in `tz`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The IANA time zone; UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// `or` (default) or `and`: how cron's day-of-month and day-of-week combine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day_match: Option<String>,
    /// `shift` (default) or `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_gap: Option<String>,
    /// `auto` (default), `once` or `both`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_fold: Option<String>,
}

/// A calendar schedule: the one-line text form, or a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CalendarSpec {
    /// `weekly mon-fri every 1h between 06:00-22:30`.
    Text(String),
    /// Field by field.
    Table(CalendarTable),
}

/// The table form of a calendar schedule (the seeds' SQL Server Agent fields).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalendarTable {
    /// `daily`, `weekly` or `monthly`.
    pub frequency: String,
    /// Every N days / weeks / months (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u32>,
    /// Weekly: weekday names or ranges (`mon`, `mon-fri`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weekdays: Vec<String>,
    /// Monthly: day numbers, `last`, `last weekday`, `2nd tue`, `last fri` …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<DayItem>,
    /// Once or more a day at these times (`HH:MM[:SS]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<OneOrMany>,
    /// Repeat every N hours / minutes / seconds (`1h`, `15m`, `30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<String>,
    /// The daily window for `repeat`, `HH:MM[:SS]-HH:MM[:SS]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between: Option<String>,
    /// Effective from (inclusive), `YYYY-MM-DD[THH:MM[:SS]]` in the schedule's zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Expires at (exclusive), `YYYY-MM-DD[THH:MM[:SS]]` in the schedule's zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// A monthly day: a number or a phrase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DayItem {
    /// A day of the month, 1–31.
    Number(u32),
    /// `last`, `last weekday`, `2nd tue`, `last fri`, `1-5` …
    Text(String),
}

/// One string or a list of strings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One value.
    One(String),
    /// Several values.
    Many(Vec<String>),
}

impl CalendarTable {
    /// The one-line text form this table stands for; the calendar parser then validates it,
    /// so the table and the text form can never disagree about what a field means.
    fn to_text(&self) -> Result<String, SpecError> {
        let freq = self.frequency.trim().to_ascii_lowercase();
        let unit = match freq.as_str() {
            "daily" => "days",
            "weekly" => "weeks",
            "monthly" => "months",
            other => {
                return Err(invalid(
                    "calendar.frequency",
                    format!("\"{other}\" is not a frequency; use daily, weekly or monthly"),
                ));
            }
        };
        let mut out = freq.clone();
        if let Some(n) = self.every {
            out.push_str(&format!(" every {n} {unit}"));
        }
        match freq.as_str() {
            "weekly" => {
                if self.weekdays.is_empty() {
                    return Err(invalid(
                        "calendar.weekdays",
                        "a weekly calendar needs weekdays, e.g. [\"mon\", \"thu\"] or [\"mon-fri\"]",
                    ));
                }
                out.push_str(&format!(" on {}", self.weekdays.join(",")));
            }
            "monthly" => {
                if self.days.is_empty() {
                    return Err(invalid(
                        "calendar.days",
                        "a monthly calendar needs days, e.g. [1, 15, \"last\"] or [\"2nd tue\"]",
                    ));
                }
                let days: Vec<String> = self
                    .days
                    .iter()
                    .map(|d| match d {
                        DayItem::Number(n) => n.to_string(),
                        DayItem::Text(t) => t.clone(),
                    })
                    .collect();
                out.push_str(&format!(" on {}", days.join(",")));
            }
            _ => {
                if !self.weekdays.is_empty() {
                    return Err(invalid(
                        "calendar.weekdays",
                        "weekdays apply only to weekly calendars",
                    ));
                }
            }
        }
        if freq != "monthly" && !self.days.is_empty() {
            return Err(invalid(
                "calendar.days",
                "days apply only to monthly calendars",
            ));
        }
        match (&self.at, &self.repeat) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "calendar",
                    "give either at (fixed times) or repeat (every N h/m/s), not both",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "calendar",
                    "give at (fixed times, e.g. at = \"02:00\") or repeat (e.g. repeat = \"1h\")",
                ));
            }
            (Some(at), None) => {
                if self.between.is_some() {
                    return Err(invalid(
                        "calendar.between",
                        "a window applies only with repeat",
                    ));
                }
                let times = match at {
                    OneOrMany::One(t) => vec![t.clone()],
                    OneOrMany::Many(v) => v.clone(),
                };
                out.push_str(&format!(" at {}", times.join(",")));
            }
            (None, Some(r)) => {
                out.push_str(&format!(" every {r}"));
                if let Some(b) = &self.between {
                    out.push_str(&format!(" between {b}"));
                }
            }
        }
        if let Some(f) = &self.from {
            out.push_str(&format!(" from {f}"));
        }
        if let Some(u) = &self.until {
            out.push_str(&format!(" until {u}"));
        }
        Ok(out)
    }
}

impl ScheduleSpec {
    /// Reads a spec from JSON or TOML text (JSON is tried first).
    pub fn parse(text: &str) -> Result<ScheduleSpec, SpecError> {
        match serde_json::from_str(text) {
            Ok(s) => Ok(s),
            Err(json) => toml::from_str(text).map_err(|toml| SpecError::Syntax {
                json: json.to_string(),
                toml: toml.message().to_string(),
            }),
        }
    }

    /// Builds the schedule, validating every field.
    pub fn to_schedule(&self) -> Result<Schedule, SpecError> {
        let zone = match &self.tz {
            Some(tz) => Zone::get(tz).map_err(|e| invalid("tz", e))?,
            None => Zone::utc(),
        };
        let mut kinds = Vec::new();
        for (set, name) in [
            (self.cron.is_some(), "cron"),
            (self.calendar.is_some(), "calendar"),
            (self.every.is_some(), "every"),
            (self.at.is_some(), "at"),
        ] {
            if set {
                kinds.push(name);
            }
        }
        if kinds.len() != 1 {
            return Err(SpecError::RuleCount {
                found: if kinds.is_empty() {
                    "none".to_string()
                } else {
                    kinds.join(" and ")
                },
            });
        }
        if self.day_match.is_some() && self.cron.is_none() {
            return Err(SpecError::Misplaced {
                key: "day_match",
                applies_to: "cron",
            });
        }
        if self.anchor.is_some() && self.every.is_none() {
            return Err(SpecError::Misplaced {
                key: "anchor",
                applies_to: "every",
            });
        }
        let rule = if let Some(expr) = &self.cron {
            let day_match = match self.day_match.as_deref().map(str::to_ascii_lowercase) {
                None => DayMatch::Or,
                Some(s) if s == "or" => DayMatch::Or,
                Some(s) if s == "and" => DayMatch::And,
                Some(s) => {
                    return Err(invalid(
                        "day_match",
                        format!("\"{s}\" is not valid; use \"or\" (Vixie cron) or \"and\""),
                    ));
                }
            };
            Rule::Cron(
                CronExpr::parse_with(expr, CronOptions { day_match })
                    .map_err(|e| invalid("cron", e))?,
            )
        } else if let Some(cal) = &self.calendar {
            let text = match cal {
                CalendarSpec::Text(t) => t.clone(),
                CalendarSpec::Table(t) => t.to_text()?,
            };
            Rule::Calendar(CalendarRule::parse(&text).map_err(|e| invalid("calendar", e))?)
        } else if let Some(every) = &self.every {
            let period = parse_duration(every).map_err(|e| invalid("every", e))?;
            let anchor = self
                .anchor
                .as_deref()
                .map(|a| parse_instant(a, &zone).map_err(|e| invalid("anchor", e)))
                .transpose()?;
            Rule::Interval(Interval::new(period, anchor).map_err(|e| invalid("every", e))?)
        } else {
            let at = self.at.as_deref().unwrap_or_default();
            Rule::Once(parse_instant(at, &zone).map_err(|e| invalid("at", e))?)
        };
        let gap = match self
            .dst_gap
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("shift") => GapPolicy::Shift,
            Some("skip") => GapPolicy::Skip,
            Some(s) => {
                return Err(invalid(
                    "dst_gap",
                    format!("\"{s}\" is not valid; use \"shift\" or \"skip\""),
                ));
            }
        };
        let fold = match self
            .dst_fold
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("auto") => FoldPolicy::Auto,
            Some("once") => FoldPolicy::Once,
            Some("both") => FoldPolicy::Both,
            Some(s) => {
                return Err(invalid(
                    "dst_fold",
                    format!("\"{s}\" is not valid; use \"auto\", \"once\" or \"both\""),
                ));
            }
        };
        Ok(Schedule::new(rule, zone).with_dst(DstPolicy { gap, fold }))
    }
}

impl ScheduleSpec {
    /// The spec of `schedule`: the inverse of [`ScheduleSpec::to_schedule`], so that
    /// `ScheduleSpec::from_schedule(&s).to_schedule()` gives back a schedule equal to `s`. This
    /// is how stores keep schedules (as this spec's JSON). Every field is written out (the zone,
    /// both DST policies, cron's day matching, an interval's anchor) so that a stored schedule
    /// never depends on a default that could change: cron as written plus `day_match`, a
    /// calendar in its canonical one-line text form, an interval as its period and RFC 3339
    /// anchor, a one-shot as its RFC 3339 instant.
    pub fn from_schedule(schedule: &Schedule) -> ScheduleSpec {
        let mut spec = ScheduleSpec {
            tz: Some(schedule.zone().name().to_string()),
            dst_gap: Some(
                match schedule.dst().gap {
                    GapPolicy::Shift => "shift",
                    GapPolicy::Skip => "skip",
                }
                .to_string(),
            ),
            dst_fold: Some(
                match schedule.dst().fold {
                    FoldPolicy::Auto => "auto",
                    FoldPolicy::Once => "once",
                    FoldPolicy::Both => "both",
                }
                .to_string(),
            ),
            ..ScheduleSpec::default()
        };
        match schedule.rule() {
            Rule::Cron(c) => {
                spec.cron = Some(c.as_str().to_string());
                spec.day_match = Some(
                    match c.day_match() {
                        DayMatch::Or => "or",
                        DayMatch::And => "and",
                    }
                    .to_string(),
                );
            }
            Rule::Calendar(c) => spec.calendar = Some(CalendarSpec::Text(c.to_string())),
            Rule::Interval(i) => {
                spec.every = Some(format_duration(i.period_seconds()));
                spec.anchor = Some(i.anchor().to_string());
            }
            Rule::Once(at) => spec.at = Some(at.to_string()),
            // A rule kind added to the core after this function: no rule key, so
            // `to_schedule` refuses the spec ("found none") instead of guessing.
            _ => {}
        }
        spec
    }
}

/// Reads an instant: RFC 3339 with `Z` or an offset (`2026-12-01T06:00:00+08:00`), or a
/// wall-clock date-time (`2026-12-01T06:00[:00]`, `2026-12-01 06:00`, or a bare date meaning
/// midnight) read in `zone`. A wall-clock time inside a DST gap is refused (it names no
/// instant); one inside a fold means its first occurrence.
pub fn parse_instant(text: &str, zone: &Zone) -> Result<Timestamp, String> {
    let t = text.trim();
    if let Ok(ts) = t.parse::<Timestamp>() {
        return Ok(ts);
    }
    let civil: jiff::civil::DateTime = match t.parse::<jiff::civil::DateTime>() {
        Ok(dt) => dt,
        Err(_) => match t.parse::<jiff::civil::Date>() {
            Ok(d) => d.to_datetime(jiff::civil::Time::midnight()),
            Err(_) => {
                return Err(format!(
                    "\"{t}\" is not an instant; write 2026-12-01T06:00:00Z, 2026-12-01T06:00:00+08:00, or a local 2026-12-01T06:00 read in the schedule's zone"
                ));
            }
        },
    };
    let amb = zone.time_zone().to_ambiguous_timestamp(civil);
    if let jiff::tz::AmbiguousOffset::Gap { .. } = amb.offset() {
        return Err(format!(
            "local time {t} does not exist in {zone} (a daylight-saving gap); pick a time outside the gap or give an offset"
        ));
    }
    amb.earlier().map_err(|e| format!("\"{t}\": {e}"))
}

/// Reads a wall-clock time `YYYY-MM-DD[THH:MM[:SS]]`.
pub fn parse_civil(text: &str) -> Option<Civil> {
    let t = text.trim();
    if let Ok(dt) = t.parse::<jiff::civil::DateTime>() {
        return Some(Civil::from_jiff(dt));
    }
    t.parse::<jiff::civil::Date>()
        .ok()
        .map(|d| Civil::from_jiff(d.to_datetime(jiff::civil::Time::midnight())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        ScheduleSpec::parse(text)
            .and_then(|s| s.to_schedule())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn json_and_toml_forms_build_schedules() {
        let j = ScheduleSpec::parse(r#"{"cron": "0 2 L * *", "tz": "Europe/Berlin"}"#)
            .unwrap()
            .to_schedule()
            .unwrap();
        assert_eq!(
            j.describe(),
            "at 02:00 on the last day of every month, Europe/Berlin"
        );
        let t = ScheduleSpec::parse("cron = \"0 2 L * *\"\ntz = \"Europe/Berlin\"\n")
            .unwrap()
            .to_schedule()
            .unwrap();
        assert_eq!(j, t);
        let every = ScheduleSpec::parse(r#"{"every": "5m"}"#)
            .unwrap()
            .to_schedule()
            .unwrap();
        assert_eq!(every.describe(), "every 5m");
        let once = ScheduleSpec::parse(r#"{"at": "2026-12-01T06:00", "tz": "Asia/Shanghai"}"#)
            .unwrap()
            .to_schedule()
            .unwrap();
        assert_eq!(
            once.next_after("2026-11-30T00:00:00Z".parse().unwrap())
                .unwrap()
                .at
                .to_string(),
            "2026-11-30T22:00:00Z"
        );
    }

    #[test]
    fn policies_and_day_match_are_read() {
        let s = ScheduleSpec::parse(
            r#"{"cron": "0 0 1 * MON", "day_match": "and", "dst_gap": "skip", "dst_fold": "both", "tz": "America/New_York"}"#,
        )
        .unwrap()
        .to_schedule()
        .unwrap();
        assert_eq!(
            s.dst(),
            DstPolicy {
                gap: GapPolicy::Skip,
                fold: FoldPolicy::Both
            }
        );
        match s.rule() {
            Rule::Cron(c) => assert_eq!(c.day_match(), DayMatch::And),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn from_schedule_round_trips_every_rule_kind() {
        let specs = [
            r#"{"cron": "0 0 1 * MON", "day_match": "and", "tz": "America/New_York", "dst_gap": "skip", "dst_fold": "both"}"#,
            r#"{"cron": "*/10 * * * *"}"#,
            r#"{"calendar": "weekly mon-fri every 1h between 06:00-22:30", "tz": "Europe/Berlin"}"#,
            r#"{"calendar": {"frequency": "monthly", "days": [1, "last"], "at": "02:00"}}"#,
            r#"{"every": "1h30m", "anchor": "2026-01-01T00:00:15Z", "dst_fold": "once"}"#,
            r#"{"every": "5m"}"#,
            r#"{"at": "2026-12-01T06:00", "tz": "Asia/Shanghai"}"#,
        ];
        for text in specs {
            let schedule = ScheduleSpec::parse(text).unwrap().to_schedule().unwrap();
            let spec = ScheduleSpec::from_schedule(&schedule);
            assert_eq!(spec.to_schedule().unwrap(), schedule, "{text} via {spec:?}");
            let json = serde_json::to_string(&spec).unwrap();
            let again = ScheduleSpec::parse(&json).unwrap();
            assert_eq!(again, spec, "the JSON form round-trips: {json}");
            assert_eq!(again.to_schedule().unwrap(), schedule);
        }
        let cron = ScheduleSpec::parse(r#"{"cron": "0 0 1 * MON", "day_match": "and"}"#)
            .unwrap()
            .to_schedule()
            .unwrap();
        let spec = ScheduleSpec::from_schedule(&cron);
        assert_eq!(spec.cron.as_deref(), Some("0 0 1 * MON"));
        assert_eq!(spec.day_match.as_deref(), Some("and"));
        assert_eq!(spec.tz.as_deref(), Some("UTC"));
        let every = ScheduleSpec::parse(r#"{"every": "90s", "anchor": "2026-01-01T00:00:15Z"}"#)
            .unwrap()
            .to_schedule()
            .unwrap();
        let spec = ScheduleSpec::from_schedule(&every);
        assert_eq!(spec.every.as_deref(), Some("1m30s"));
        assert_eq!(spec.anchor.as_deref(), Some("2026-01-01T00:00:15Z"));
        let once = ScheduleSpec::parse(r#"{"at": "2026-12-01T06:00", "tz": "Asia/Shanghai"}"#)
            .unwrap()
            .to_schedule()
            .unwrap();
        assert_eq!(
            ScheduleSpec::from_schedule(&once).at.as_deref(),
            Some("2026-11-30T22:00:00Z")
        );
    }

    #[test]
    fn bad_specs_say_which_field_and_what_to_do() {
        assert_eq!(
            err(r#"{"cron": "0 0 * * 8"}"#),
            "cron: day-of-week: \"8\" is out of range 0-7"
        );
        assert_eq!(
            err(r#"{"tz": "UTC"}"#),
            "a schedule needs exactly one of cron, calendar, every or at; found none"
        );
        assert_eq!(
            err(r#"{"cron": "* * * * *", "every": "5m"}"#),
            "a schedule needs exactly one of cron, calendar, every or at; found cron and every"
        );
        assert!(
            err(r#"{"cron": "* * * * *", "tz": "Mars/Olympus"}"#)
                .starts_with("tz: unknown time zone")
        );
        assert_eq!(
            err(r#"{"every": "5m", "day_match": "and"}"#),
            "day_match applies only to cron schedules"
        );
        assert!(err(r#"{"every": "0s"}"#).starts_with("every: duration \"0s\" is zero"));
        assert!(
            err(r#"{"cron": "* * * * *", "dst_gap": "later"}"#)
                .contains("use \"shift\" or \"skip\"")
        );
        assert!(
            err(r#"{"cron": "* * * * *", "dst_fold": "twice"}"#)
                .contains("\"auto\", \"once\" or \"both\"")
        );
        assert!(err(r#"{"cron": "* * * * *", "day_match": "xor"}"#).contains("use \"or\""));
        assert!(err(r#"{"at": "tomorrow"}"#).starts_with("at: \"tomorrow\" is not an instant"));
        assert!(
            err(r#"{"at": "2026-03-08T02:30", "tz": "America/New_York"}"#)
                .contains("does not exist in America/New_York")
        );
        assert!(err(r#"{"cron": "* * * * *", "bogus": 1}"#).contains("unknown field `bogus`"));
        assert!(err("{{{").starts_with("schedule spec is neither valid JSON"));
    }
}
