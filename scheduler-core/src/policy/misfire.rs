//! Misfire policy: what becomes of fires that came due while nobody was scheduling.
//!
//! Seed 000 §4.3 (MissPolicy): after a power cut or a patch reboot, report generation should
//! *skip* what it missed (a late report is a wrong report) while data collection should *catch
//! up* (or the data chain breaks). Either way nothing is dropped silently: every missed fire
//! that does not run is recorded as a `skipped` run with reason `misfire`.
//!
//! [`plan`] is the one function the loop calls for a job that is due, after an outage or on an
//! ordinary tick alike: an on-time fire is simply one whose lateness is within the window.
//!
//! # Bounded work
//!
//! A host down for a year with an every-second schedule has 31 million missed fires. [`plan`]
//! materialises at most [`MAX_HEAD`] of the oldest and a tail of the newest (enough to choose
//! the fires the policy keeps), and reports what lies between as one [`Omitted`] range, which
//! the host records as a single `skipped` run. Its work is bounded by about
//! `MAX_HEAD + MAX_TAIL + max` schedule steps whatever the outage.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::PolicyError;
use crate::run::SkipReason;
use crate::schedule::{
    Occurrence, OccurrenceKind, Rule, Schedule, format_duration, parse_duration,
};

/// The most missed occurrences [`plan`] lists one by one from the start of an outage.
pub const MAX_HEAD: usize = 1000;
/// The most occurrences [`plan`] walks back from `now` (beyond a `fire-all` bound).
pub const MAX_TAIL: usize = 1000;
/// The largest `fire-all` bound: a catch-up of more runs than this is a backfill, not a
/// misfire.
pub const MAX_FIRE_ALL: u32 = 10_000;
/// The default lateness window. Generous enough for a loop that wakes a little late or a
/// claim that waits on a busy database, short enough that a restart after minutes counts as
/// a misfire.
pub const DEFAULT_LATENESS: Duration = Duration::from_secs(60);

/// What to do with fires that are later than the lateness window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MisfireAction {
    /// Record every misfire as skipped (seed 000's report generation). The default: running
    /// late work unasked is the riskier mistake, and the skipped records make a backfill easy.
    #[default]
    Skip,
    /// Run once now for the whole outage, carrying the fire time of the latest missed fire;
    /// the others are recorded as skipped. When a fire inside the window is due as well, that
    /// fire is the one run and all misfires are skipped.
    FireOnceNow,
    /// Run the latest `max` missed fires now, oldest first (seed 000's data collection); older
    /// ones are recorded as skipped.
    FireAll {
        /// The most missed fires to run (1..=[`MAX_FIRE_ALL`]).
        max: u32,
    },
}

/// A misfire action plus the lateness window that defines a misfire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MisfirePolicy {
    /// What to do with misfires.
    pub action: MisfireAction,
    /// A fire whose lateness (now − fire time) is more than this is a misfire; exactly this
    /// late still runs normally.
    pub lateness: Duration,
}

impl Default for MisfirePolicy {
    fn default() -> Self {
        MisfirePolicy {
            action: MisfireAction::Skip,
            lateness: DEFAULT_LATENESS,
        }
    }
}

impl MisfirePolicy {
    /// `action` with the default lateness window.
    pub fn new(action: MisfireAction) -> Self {
        MisfirePolicy {
            action,
            ..MisfirePolicy::default()
        }
    }

    /// The same policy with another lateness window.
    pub fn with_lateness(self, lateness: Duration) -> Self {
        MisfirePolicy { lateness, ..self }
    }
}

impl fmt::Display for MisfirePolicy {
    /// The form [`MisfirePolicy::from_str`] reads; the lateness is shown when not the default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.action {
            MisfireAction::Skip => f.write_str("skip")?,
            MisfireAction::FireOnceNow => f.write_str("fire-once")?,
            MisfireAction::FireAll { max } => write!(f, "fire-all:{max}")?,
        }
        if self.lateness != DEFAULT_LATENESS {
            if self.lateness.is_zero() {
                f.write_str("@0s")?;
            } else {
                write!(f, "@{}", format_duration(self.lateness.as_secs()))?;
            }
        }
        Ok(())
    }
}

impl FromStr for MisfirePolicy {
    type Err = PolicyError;

    /// Reads `skip`, `fire-once` or `fire-all:N`, each optionally followed by `@DURATION`
    /// (the lateness window, e.g. `fire-all:10@5m`; `@0s` means "any lateness is a misfire").
    fn from_str(text: &str) -> Result<Self, PolicyError> {
        let bad = || PolicyError::Misfire {
            text: text.to_string(),
            max: MAX_FIRE_ALL,
        };
        let t = text.trim().to_ascii_lowercase();
        let (action, lateness) = match t.split_once('@') {
            Some((a, l)) => (a.trim(), Some(l.trim())),
            None => (t.as_str(), None),
        };
        let action = match action {
            "skip" => MisfireAction::Skip,
            "fire-once" | "fire_once" | "fire-once-now" => MisfireAction::FireOnceNow,
            a => {
                let n = a
                    .strip_prefix("fire-all:")
                    .or_else(|| a.strip_prefix("fire_all:"))
                    .ok_or_else(bad)?;
                let max: u32 = n.trim().parse().map_err(|_| bad())?;
                if max == 0 || max > MAX_FIRE_ALL {
                    return Err(bad());
                }
                MisfireAction::FireAll { max }
            }
        };
        let lateness = match lateness {
            None => DEFAULT_LATENESS,
            Some("0" | "0s") => Duration::ZERO,
            Some(l) => {
                Duration::from_secs(parse_duration(l).map_err(|source| PolicyError::Duration {
                    field: "the misfire lateness window",
                    source,
                })?)
            }
        };
        Ok(MisfirePolicy { action, lateness })
    }
}

/// A fire the host should run now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlannedFire {
    /// The scheduled fire time (the run's key together with the job id).
    pub fire_time: Timestamp,
    /// Whether it is a misfire being caught up (lateness beyond the window).
    pub late: bool,
}

/// A fire the host should record as a `skipped` run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlannedSkip {
    /// The scheduled fire time.
    pub fire_time: Timestamp,
    /// Why it does not run: [`SkipReason::Misfire`] or [`SkipReason::DstGap`].
    pub reason: SkipReason,
}

/// Missed occurrences [`plan`] did not walk, all of them misfires to record as skipped.
///
/// The host records one `skipped` run (reason `misfire`) at `first` whose error text names the
/// range and the count, instead of one row per occurrence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Omitted {
    /// The earliest occurrence in the range.
    pub first: Timestamp,
    /// The latest occurrence in the range.
    pub last: Timestamp,
    /// How many occurrences the range holds, when it is cheap to know (interval rules);
    /// `None` for wall-clock rules, whose count would take the walk this range avoids.
    pub count: Option<u64>,
}

/// What [`plan`] decided for one job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MisfirePlan {
    /// Fires to run now, oldest first.
    pub fires: Vec<PlannedFire>,
    /// Occurrences to record as skipped, oldest first.
    pub skips: Vec<PlannedSkip>,
    /// A range of misfires too long to list, to record as one skipped run.
    pub omitted: Option<Omitted>,
    /// The first occurrence after `now`: the job's new next-fire time (`None`: the schedule has
    /// ended).
    pub next_fire: Option<Timestamp>,
}

/// Decides what becomes of every occurrence of `schedule` from `next_fire` (the job's stored
/// next-fire time, inclusive) up to `now` (inclusive).
///
/// Fires no later than `policy.lateness` run; later ones follow `policy.action`; occurrences
/// the schedule itself skips (a DST gap under [`crate::schedule::GapPolicy::Skip`]) are
/// recorded as skipped with reason `dst_gap` whatever the policy.
pub fn plan(
    schedule: &Schedule,
    next_fire: Timestamp,
    now: Timestamp,
    policy: MisfirePolicy,
) -> MisfirePlan {
    let window = SignedDuration::try_from(policy.lateness).unwrap_or(SignedDuration::MAX);
    let is_late = |o: &Occurrence| now.duration_since(o.at) > window;

    // Head: the oldest due occurrences, walked forward. `iter_after` is exclusive and floors
    // to the second, so start one second before to include `next_fire` itself.
    let start = next_fire
        .checked_sub(SignedDuration::from_secs(1))
        .unwrap_or(next_fire);
    let mut due: Vec<Occurrence> = Vec::new();
    let mut iter = schedule.iter_after(start);
    let mut after_head = None;
    for o in iter.by_ref() {
        if o.at > now || due.len() == MAX_HEAD {
            after_head = Some(o);
            break;
        }
        due.push(o);
    }

    let mut omitted = None;
    if let (Some(first_unwalked), Some(head_last)) = (after_head, due.last().copied())
        && first_unwalked.at <= now
    {
        // Tail: walk back from now until the policy has the misfires it may run (and at least
        // one misfire, so everything after the omitted range is listed), or the head is met.
        let needed = match policy.action {
            MisfireAction::Skip => 1,
            MisfireAction::FireOnceNow => 1,
            MisfireAction::FireAll { max } => max as usize,
        };
        let mut cursor = now.checked_add(SignedDuration::from_secs(1)).unwrap_or(now);
        let mut tail_start = None;
        let (mut late_fires, mut steps) = (0usize, 0usize);
        while let Some(o) = schedule.prev_before(cursor) {
            if o.at <= head_last.at {
                break;
            }
            tail_start = Some(o.at);
            steps += 1;
            if o.fires() && is_late(&o) {
                late_fires += 1;
                if late_fires >= needed {
                    break;
                }
            }
            if steps >= MAX_TAIL + needed {
                break;
            }
            cursor = o.at;
        }
        let tail_start = tail_start.unwrap_or(first_unwalked.at);
        if first_unwalked.at < tail_start {
            let last = schedule
                .prev_before(tail_start)
                .map_or(first_unwalked.at, |o| o.at);
            let count = match schedule.rule() {
                Rule::Interval(i) => Some(
                    (last.as_second() - first_unwalked.at.as_second()) as u64 / i.period_seconds()
                        + 1,
                ),
                _ => None,
            };
            omitted = Some(Omitted {
                first: first_unwalked.at,
                last,
                count,
            });
            let from = tail_start
                .checked_sub(SignedDuration::from_secs(1))
                .unwrap_or(tail_start);
            iter = schedule.iter_after(from);
        } else {
            due.push(first_unwalked);
        }
        for o in iter.by_ref() {
            if o.at > now {
                after_head = Some(o);
                break;
            }
            due.push(o);
            after_head = None;
        }
    }
    let next = match after_head {
        Some(o) if o.at > now => Some(o.at),
        _ => schedule.next_after(now).map(|o| o.at),
    };

    classify(&due, is_late, policy.action, omitted, next)
}

fn classify(
    due: &[Occurrence],
    is_late: impl Fn(&Occurrence) -> bool,
    action: MisfireAction,
    omitted: Option<Omitted>,
    next_fire: Option<Timestamp>,
) -> MisfirePlan {
    let late_fires = due.iter().filter(|o| o.fires() && is_late(o)).count();
    let on_time = due.iter().any(|o| o.fires() && !is_late(o));
    // How many of the latest misfires run.
    let keep = match action {
        MisfireAction::Skip => 0,
        MisfireAction::FireOnceNow if on_time => 0,
        MisfireAction::FireOnceNow => 1,
        MisfireAction::FireAll { max } => (max as usize).min(late_fires),
    };
    let mut plan = MisfirePlan {
        omitted,
        next_fire,
        ..MisfirePlan::default()
    };
    let mut late_seen = 0;
    for o in due {
        match o.kind {
            OccurrenceKind::Skipped(r) => plan.skips.push(PlannedSkip {
                fire_time: o.at,
                reason: r.into(),
            }),
            _ if !is_late(o) => plan.fires.push(PlannedFire {
                fire_time: o.at,
                late: false,
            }),
            _ => {
                late_seen += 1;
                if late_seen > late_fires - keep {
                    plan.fires.push(PlannedFire {
                        fire_time: o.at,
                        late: true,
                    });
                } else {
                    plan.skips.push(PlannedSkip {
                        fire_time: o.at,
                        reason: SkipReason::Misfire,
                    });
                }
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::cron::CronExpr;
    use crate::schedule::{DstPolicy, FoldPolicy, GapPolicy, Interval, Zone};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn cron(expr: &str, tz: &str) -> Schedule {
        Schedule::new(
            Rule::Cron(CronExpr::parse(expr).unwrap()),
            Zone::get(tz).unwrap(),
        )
    }

    fn every_minute() -> Schedule {
        cron("* * * * *", "UTC")
    }

    fn policy(text: &str) -> MisfirePolicy {
        text.parse().unwrap()
    }

    fn times(fires: &[PlannedFire]) -> Vec<String> {
        fires.iter().map(|f| f.fire_time.to_string()).collect()
    }

    /// Host down from 10:00:30 to 11:00:30: 60 minutes (10:01 … 11:00) were due.
    fn hour_down(p: &str) -> MisfirePlan {
        plan(
            &every_minute(),
            ts("2026-06-01T10:01:00Z"),
            ts("2026-06-01T11:00:30Z"),
            policy(p),
        )
    }

    #[test]
    fn an_hour_down_under_skip() {
        let p = hour_down("skip");
        // 11:00 is 30 s late: inside the 60 s window, so it runs as an ordinary fire.
        assert_eq!(times(&p.fires), ["2026-06-01T11:00:00Z"]);
        assert!(!p.fires[0].late);
        assert_eq!(p.skips.len(), 59);
        assert!(p.skips.iter().all(|s| s.reason == SkipReason::Misfire));
        assert_eq!(p.skips[0].fire_time, ts("2026-06-01T10:01:00Z"));
        assert_eq!(p.skips[58].fire_time, ts("2026-06-01T10:59:00Z"));
        assert_eq!(p.omitted, None);
        assert_eq!(p.next_fire, Some(ts("2026-06-01T11:01:00Z")));
    }

    #[test]
    fn an_hour_down_under_fire_once() {
        // The on-time 11:00 fire is the one run for the outage.
        let p = hour_down("fire-once");
        assert_eq!(times(&p.fires), ["2026-06-01T11:00:00Z"]);
        assert_eq!(p.skips.len(), 59);
        // With a zero window every fire is late; the latest one runs, late.
        let p = hour_down("fire-once@0s");
        assert_eq!(p.fires.len(), 1);
        assert_eq!(p.fires[0].fire_time, ts("2026-06-01T11:00:00Z"));
        assert!(p.fires[0].late);
        assert_eq!(p.skips.len(), 59);
    }

    #[test]
    fn an_hour_down_under_fire_all() {
        let p = hour_down("fire-all:10");
        assert_eq!(p.fires.len(), 11, "10 late + the on-time one");
        assert_eq!(p.fires[0].fire_time, ts("2026-06-01T10:50:00Z"));
        assert!(p.fires[..10].iter().all(|f| f.late));
        assert!(!p.fires[10].late);
        assert_eq!(p.skips.len(), 49);
        assert_eq!(p.skips[48].fire_time, ts("2026-06-01T10:49:00Z"));
        // A bound above the number missed runs them all.
        let p = hour_down("fire-all:1000");
        assert_eq!(p.fires.len(), 60);
        assert!(p.skips.is_empty());
        // Every due occurrence is accounted for exactly once.
        for text in [
            "skip",
            "fire-once",
            "fire-all:7",
            "skip@0s",
            "fire-all:3@10m",
        ] {
            let p = hour_down(text);
            let mut all: Vec<_> = p.fires.iter().map(|f| f.fire_time).collect();
            all.extend(p.skips.iter().map(|s| s.fire_time));
            all.sort();
            all.dedup();
            assert_eq!(all.len(), 60, "{text}");
        }
    }

    #[test]
    fn the_lateness_window_boundary() {
        let s = every_minute();
        let at = ts("2026-06-01T10:00:00Z");
        let p = plan(&s, at, ts("2026-06-01T10:01:00Z"), policy("skip@1m"));
        assert_eq!(
            times(&p.fires),
            ["2026-06-01T10:00:00Z", "2026-06-01T10:01:00Z"]
        );
        let late = "2026-06-01T10:01:00.000000001Z".parse().unwrap();
        let p = plan(&s, at, late, policy("skip@1m"));
        assert_eq!(times(&p.fires), ["2026-06-01T10:01:00Z"]);
        assert_eq!(p.skips.len(), 1);
        assert_eq!(p.skips[0].fire_time, at);
    }

    #[test]
    fn nothing_due_changes_nothing() {
        let s = every_minute();
        let p = plan(
            &s,
            ts("2026-06-01T10:01:00Z"),
            ts("2026-06-01T10:00:59Z"),
            policy("skip"),
        );
        assert!(p.fires.is_empty() && p.skips.is_empty() && p.omitted.is_none());
        assert_eq!(p.next_fire, Some(ts("2026-06-01T10:01:00Z")));
    }

    #[test]
    fn dst_gap_skips_are_recorded_whatever_the_policy() {
        // 02:30 daily in New York with gap=skip; the host was down over 2026-03-08.
        let s = cron("30 2 * * *", "America/New_York").with_dst(DstPolicy {
            gap: GapPolicy::Skip,
            fold: FoldPolicy::Auto,
        });
        let from = ts("2026-03-07T07:30:00Z"); // 2026-03-07 02:30 EST
        let now = ts("2026-03-09T12:00:00Z");
        for text in ["skip", "fire-once", "fire-all:5"] {
            let p = plan(&s, from, now, policy(text));
            let gap: Vec<_> = p
                .skips
                .iter()
                .filter(|k| k.reason == SkipReason::DstGap)
                .collect();
            assert_eq!(gap.len(), 1, "{text}");
            assert_eq!(
                gap[0].fire_time,
                ts("2026-03-08T07:00:00Z"),
                "end of the gap"
            );
            assert_eq!(p.fires.len() + p.skips.len(), 3, "{text}");
        }
        let p = plan(&s, from, now, policy("fire-all:5"));
        assert_eq!(
            times(&p.fires),
            ["2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"]
        );
    }

    #[test]
    fn a_year_down_every_second_is_bounded() {
        let s = Schedule::new(Rule::Interval(Interval::new(1, None).unwrap()), Zone::utc());
        let from = ts("2025-06-01T00:00:00Z");
        let now = ts("2026-06-01T00:00:00Z");
        let p = plan(&s, from, now, policy("fire-all:5"));
        assert_eq!(p.fires.len(), 5 + 61, "5 late + 61 in the 60 s window");
        assert_eq!(p.fires[0].fire_time, ts("2026-05-31T23:58:55Z"));
        assert_eq!(p.fires.last().unwrap().fire_time, now);
        assert_eq!(p.skips.len(), MAX_HEAD);
        let o = p.omitted.unwrap();
        assert_eq!(
            o.first,
            from.checked_add(SignedDuration::from_secs(1000)).unwrap()
        );
        assert_eq!(o.last, ts("2026-05-31T23:58:54Z"));
        let total = 365 * 86_400 + 1;
        assert_eq!(
            p.skips.len() as u64 + o.count.unwrap() + p.fires.len() as u64,
            total
        );
        assert_eq!(p.next_fire, Some(ts("2026-06-01T00:00:01Z")));

        // A cron rule: same shape, no cheap count.
        let p = plan(&cron("* * * * *", "UTC"), from, now, policy("skip"));
        assert_eq!(p.skips.len(), MAX_HEAD + 1);
        // 23:59 is exactly 60 s late: inside the window, so it runs too.
        assert_eq!(
            times(&p.fires),
            ["2026-05-31T23:59:00Z", "2026-06-01T00:00:00Z"]
        );
        assert_eq!(
            p.skips.last().unwrap().fire_time,
            ts("2026-05-31T23:58:00Z")
        );
        let o = p.omitted.unwrap();
        assert_eq!(o.count, None);
        assert_eq!(o.first, ts("2025-06-01T16:40:00Z"));
        assert_eq!(o.last, ts("2026-05-31T23:57:00Z"));
    }

    #[test]
    fn a_once_rule_in_the_past_and_an_ended_schedule() {
        let at = ts("2026-06-01T10:00:00Z");
        let s = Schedule::new(Rule::Once(at), Zone::utc());
        let p = plan(&s, at, ts("2026-06-01T12:00:00Z"), policy("fire-once"));
        assert_eq!(times(&p.fires), ["2026-06-01T10:00:00Z"]);
        assert!(p.fires[0].late);
        assert_eq!(p.next_fire, None);
    }

    #[test]
    fn text_forms() {
        for text in [
            "skip",
            "fire-once",
            "fire-all:10",
            "fire-all:10@5m",
            "skip@0s",
        ] {
            assert_eq!(policy(text).to_string(), text);
        }
        assert_eq!(policy("skip@60s"), MisfirePolicy::default());
        assert_eq!(
            policy("FIRE-ALL:3 @ 1h"),
            MisfirePolicy::new(MisfireAction::FireAll { max: 3 })
                .with_lateness(Duration::from_secs(3600))
        );
        for bad in [
            "",
            "catch-up",
            "fire-all",
            "fire-all:0",
            "fire-all:10001",
            "fire-all:x",
        ] {
            let e = bad.parse::<MisfirePolicy>().unwrap_err().to_string();
            assert!(
                e.contains("use skip, fire-once or fire-all:N"),
                "{bad}: {e}"
            );
        }
        let e = "skip@soon"
            .parse::<MisfirePolicy>()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("in the misfire lateness window: duration"),
            "{e}"
        );
    }
}
