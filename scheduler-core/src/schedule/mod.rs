//! Schedules: what fires when.
//!
//! A [`Schedule`] is a [`Rule`] (cron, calendar, interval or once), an IANA [`Zone`] and a
//! [`DstPolicy`]. [`Schedule::next_after`] is a pure function of the schedule and an instant:
//! no clock is read, nothing is cached, nothing allocates.
//!
//! # Daylight saving time
//!
//! Cron and calendar rules name wall-clock times; the zone decides when those happen.
//!
//! * **Gaps** (clocks jump forward, 02:30 does not exist): [`GapPolicy::Shift`] (default) fires
//!   at the first valid instant after the gap (03:00 in New York), reported as
//!   [`OccurrenceKind::FireShifted`]; several nominal times inside one gap shift onto that one
//!   instant and fire once. [`GapPolicy::Skip`] does not fire and reports each nominal time as
//!   [`OccurrenceKind::Skipped`] with [`SkipReason::DstGap`], so the caller can record it.
//! * **Folds** (clocks fall back, 01:30 happens twice): [`FoldPolicy::Auto`] (default) fires a
//!   fixed-time rule once, at the first occurrence, and lets an interval-like rule (a `*`,
//!   `?`, range or step in its second/minute/hour fields, or a calendar "every N
//!   hours/minutes/seconds") follow elapsed time through both passes. [`FoldPolicy::Once`] and [`FoldPolicy::Both`]
//!   force either behaviour.
//!
//! Interval rules ([`Interval`]) measure elapsed time and are unaffected by either; a once rule
//! is an instant.
//!
//! # Ordering of occurrences
//!
//! Fires are strictly increasing in time. A skipped occurrence shares its instant (the end of
//! the gap) with any other skips of the same gap and possibly with a fire at that instant; they
//! are ordered by their nominal wall-clock time. To walk every occurrence, feed each one back
//! into [`Schedule::next_following`] (or use [`Schedule::iter_after`]).

pub(crate) mod bits;
pub mod calendar;
pub mod cron;
pub(crate) mod describe;
mod interval;
mod pattern;
mod zone;

pub use interval::{DurationError, Interval, format_duration, parse_duration};
pub use pattern::CivilPattern;
pub use zone::{Zone, ZoneError, tzdb_version};

use jiff::Timestamp;

use crate::civil::Civil;
use calendar::CalendarRule;
use cron::CronExpr;
use zone::Local;

/// What to do with a wall-clock time that a daylight-saving gap skips.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GapPolicy {
    /// Fire at the first valid instant after the gap (the default).
    #[default]
    Shift,
    /// Do not fire; report the time as skipped.
    Skip,
}

/// What to do with a wall-clock time that a daylight-saving fold repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FoldPolicy {
    /// Fixed-time rules fire once (first pass); interval-like rules fire in both passes.
    #[default]
    Auto,
    /// Fire at the first occurrence only.
    Once,
    /// Fire in both passes.
    Both,
}

/// The per-schedule daylight-saving policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DstPolicy {
    /// Gaps (spring forward).
    pub gap: GapPolicy,
    /// Folds (fall back).
    pub fold: FoldPolicy,
}

/// The rule part of a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rule {
    /// A cron expression, read in the schedule's zone.
    Cron(CronExpr),
    /// A calendar schedule (daily / weekly / monthly), read in the schedule's zone.
    Calendar(CalendarRule),
    /// Every N seconds of elapsed time.
    Interval(Interval),
    /// Once, at an instant.
    Once(Timestamp),
}

/// Why an occurrence does not fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SkipReason {
    /// The nominal time fell into a daylight-saving gap and the policy is [`GapPolicy::Skip`].
    DstGap,
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::DstGap => f.write_str("dst gap: the wall-clock time does not exist"),
        }
    }
}

/// What an occurrence is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OccurrenceKind {
    /// Fires at its nominal wall-clock time.
    Fire,
    /// Fires, moved to the end of a daylight-saving gap that swallowed the nominal time.
    FireShifted,
    /// Does not fire; the caller should record why.
    Skipped(SkipReason),
}

/// One point of a schedule's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Occurrence {
    /// The instant (whole seconds). For a shift or a skip, the end of the gap.
    pub at: Timestamp,
    /// The wall-clock time the rule named, in the schedule's zone.
    pub nominal: Civil,
    /// The zone's UTC offset at `at`, in seconds east of UTC.
    pub offset_seconds: i32,
    /// Fire, shifted fire, or skip.
    pub kind: OccurrenceKind,
}

impl Occurrence {
    /// Whether this occurrence runs the job.
    pub fn fires(&self) -> bool {
        !matches!(self.kind, OccurrenceKind::Skipped(_))
    }

    /// The wall-clock time at `at` in the schedule's zone (differs from `nominal` for shifts).
    pub fn local(&self) -> Civil {
        Civil::from_epoch_seconds(self.at.as_second() + i64::from(self.offset_seconds))
    }
}

/// A rule in a zone with a DST policy: the unit the scheduler asks "when next?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    rule: Rule,
    zone: Zone,
    dst: DstPolicy,
}

impl Schedule {
    /// A schedule with the default DST policy.
    pub fn new(rule: Rule, zone: Zone) -> Schedule {
        Schedule {
            rule,
            zone,
            dst: DstPolicy::default(),
        }
    }

    /// The same schedule with another DST policy.
    pub fn with_dst(mut self, dst: DstPolicy) -> Schedule {
        self.dst = dst;
        self
    }

    /// The rule.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// The zone.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The DST policy.
    pub fn dst(&self) -> DstPolicy {
        self.dst
    }

    /// Whether it fires again and again (cron, calendar, interval), not once.
    pub fn recurs(&self) -> bool {
        !matches!(self.rule, Rule::Once(_))
    }

    /// A plain-English description ending with the zone, e.g.
    /// `at 02:00 on the last day of every month, Europe/Berlin`.
    pub fn describe(&self) -> String {
        match &self.rule {
            Rule::Cron(c) => format!("{}, {}", c.describe(), self.zone),
            Rule::Calendar(c) => format!("{}, {}", c.describe(), self.zone),
            Rule::Interval(i) => i.describe(),
            Rule::Once(t) => {
                let off = self.zone.offset_at(t.as_second());
                let local = Civil::from_epoch_seconds(t.as_second() + i64::from(off));
                format!(
                    "once at {} {}, {}",
                    local.to_string().replace('T', " "),
                    format_offset(off),
                    self.zone
                )
            }
        }
    }

    /// The first occurrence strictly after `after`.
    pub fn next_after(&self, after: Timestamp) -> Option<Occurrence> {
        let t = floor_second(after);
        match &self.rule {
            Rule::Cron(c) => self.next_pattern(c, t, None),
            Rule::Calendar(c) => self.next_pattern(c, t, None),
            Rule::Interval(i) => self.instant(i.next_after(t)?),
            Rule::Once(at) => (at.as_second() > t)
                .then(|| self.instant(at.as_second()))
                .flatten(),
        }
    }

    /// The occurrence after `prev` (which this schedule produced). Unlike
    /// `next_after(prev.at)`, this also yields further skips and a fire that share `prev`'s
    /// instant.
    pub fn next_following(&self, prev: &Occurrence) -> Option<Occurrence> {
        match (&self.rule, prev.kind) {
            (Rule::Cron(c), OccurrenceKind::Skipped(_)) => {
                self.next_pattern(c, prev.at.as_second() - 1, Some(prev.nominal))
            }
            (Rule::Calendar(c), OccurrenceKind::Skipped(_)) => {
                self.next_pattern(c, prev.at.as_second() - 1, Some(prev.nominal))
            }
            _ => self.next_after(prev.at),
        }
    }

    /// The last occurrence strictly before `before`. Among skips that share one instant, the
    /// one with the latest nominal time.
    pub fn prev_before(&self, before: Timestamp) -> Option<Occurrence> {
        let t = ceil_second(before);
        match &self.rule {
            Rule::Cron(c) => self.prev_pattern(c, t),
            Rule::Calendar(c) => self.prev_pattern(c, t),
            Rule::Interval(i) => self.instant(i.prev_before(t)?),
            Rule::Once(at) => (at.as_second() < t)
                .then(|| self.instant(at.as_second()))
                .flatten(),
        }
    }

    /// Every occurrence strictly after `after`, in order (skips included).
    pub fn iter_after(&self, after: Timestamp) -> Occurrences<'_> {
        Occurrences {
            schedule: self,
            state: IterState::Start(after),
        }
    }

    fn instant(&self, t: i64) -> Option<Occurrence> {
        let at = Timestamp::from_second(t).ok()?;
        let offset = self.zone.offset_at(t);
        Some(Occurrence {
            at,
            nominal: Civil::from_epoch_seconds(t + i64::from(offset)),
            offset_seconds: offset,
            kind: OccurrenceKind::Fire,
        })
    }

    fn both_passes(&self, interval_like: bool) -> bool {
        match self.dst.fold {
            FoldPolicy::Auto => interval_like,
            FoldPolicy::Once => false,
            FoldPolicy::Both => true,
        }
    }

    fn occurrence(
        &self,
        at: i64,
        nominal: Civil,
        offset: i32,
        kind: OccurrenceKind,
    ) -> Option<Occurrence> {
        Some(Occurrence {
            at: Timestamp::from_second(at).ok()?,
            nominal,
            offset_seconds: offset,
            kind,
        })
    }

    /// The first occurrence of a wall-clock pattern with an instant greater than `t`; when
    /// `resume` is a skipped nominal time, the search continues after it in civil time and an
    /// instant equal to `t + 1` is allowed.
    fn next_pattern<P: CivilPattern>(
        &self,
        p: &P,
        t: i64,
        resume: Option<Civil>,
    ) -> Option<Occurrence> {
        let zone = &self.zone;
        let off_t = zone.offset_at(t);
        let mut from = match resume {
            Some(nominal) => nominal.add_seconds(1),
            None => Civil::from_epoch_seconds(t + i64::from(off_t) + 1),
        };
        let both = self.both_passes(p.is_interval_like());
        let found = loop {
            let c = p.next_civil(from)?;
            let secs = c.to_epoch_seconds();
            match zone.classify(c) {
                Local::Unique(o) => {
                    let at = secs - i64::from(o);
                    if at > t {
                        break self.occurrence(at, c, o, OccurrenceKind::Fire)?;
                    }
                    from = c.add_seconds(1);
                }
                Local::Fold { before, after } => {
                    let first = secs - i64::from(before);
                    let second = secs - i64::from(after);
                    if first > t {
                        break self.occurrence(first, c, before, OccurrenceKind::Fire)?;
                    }
                    if both && second > t {
                        break self.occurrence(second, c, after, OccurrenceKind::Fire)?;
                    }
                    from = c.add_seconds(1);
                    if !both {
                        // A second pass that may not fire: jump to the end of the fold rather
                        // than rejecting its matches one by one (an every-second rule would
                        // otherwise take 3600 steps).
                        let tr = zone.next_transition(first)?;
                        from = from.max(Civil::from_epoch_seconds(tr + i64::from(before)));
                    }
                }
                Local::Gap { before: _, after } => {
                    let tr = zone.next_transition(secs - i64::from(after) - 1)?;
                    if tr <= t {
                        from = c.add_seconds(1);
                        continue;
                    }
                    if self.dst.gap == GapPolicy::Skip {
                        let skip = OccurrenceKind::Skipped(SkipReason::DstGap);
                        break self.occurrence(tr, c, after, skip)?;
                    }
                    // When the rule also names the first time after the gap (03:00 for
                    // "every 30 minutes"), that is an ordinary fire the shifted ones merge into.
                    let gap_end = Civil::from_epoch_seconds(tr + i64::from(after));
                    if p.next_civil(gap_end) == Some(gap_end) {
                        break self.occurrence(tr, gap_end, after, OccurrenceKind::Fire)?;
                    }
                    break self.occurrence(tr, c, after, OccurrenceKind::FireShifted)?;
                }
            }
        };
        if both && resume.is_none() && !zone.is_fixed() {
            // Inside the first pass of a fold, the second pass's earlier wall-clock times come
            // next in elapsed time although they are behind us in civil time.
            let local_t = Civil::from_epoch_seconds(t + i64::from(off_t));
            if let Local::Fold { before, after } = zone.classify(local_t)
                && before == off_t
                && let Some(tr) = zone.next_transition(t)
            {
                let fold_start = Civil::from_epoch_seconds(tr + i64::from(after));
                let fold_end = Civil::from_epoch_seconds(tr + i64::from(before));
                if let Some(c2) = p.next_civil(fold_start)
                    && c2 < fold_end
                {
                    let at2 = c2.to_epoch_seconds() - i64::from(after);
                    if at2 < found.at.as_second() {
                        return self.occurrence(at2, c2, after, OccurrenceKind::Fire);
                    }
                }
            }
        }
        Some(found)
    }

    /// The last occurrence of a wall-clock pattern with an instant less than `t`.
    fn prev_pattern<P: CivilPattern>(&self, p: &P, t: i64) -> Option<Occurrence> {
        let zone = &self.zone;
        let last = t - 1;
        let off = zone.offset_at(last);
        let local = Civil::from_epoch_seconds(last + i64::from(off));
        let both = self.both_passes(p.is_interval_like());
        let mut from = local;
        if !zone.is_fixed()
            && let Local::Fold { before, after } = zone.classify(local)
            && after == off
            && let Some(tr) = zone.prev_transition(last)
        {
            // Inside the second pass of a fold: this pass's earlier times come first (if both
            // passes fire), then the whole first pass, which lies later in civil time.
            let fold_start = Civil::from_epoch_seconds(tr + i64::from(after));
            let fold_end = Civil::from_epoch_seconds(tr + i64::from(before));
            if both
                && let Some(c) = p.prev_civil(local)
                && c >= fold_start
            {
                return self.occurrence(
                    c.to_epoch_seconds() - i64::from(after),
                    c,
                    after,
                    OccurrenceKind::Fire,
                );
            }
            if let Some(c) = p.prev_civil(fold_end.add_seconds(-1))
                && c >= fold_start
            {
                return self.occurrence(
                    c.to_epoch_seconds() - i64::from(before),
                    c,
                    before,
                    OccurrenceKind::Fire,
                );
            }
            from = fold_start.add_seconds(-1);
        }
        loop {
            let c = p.prev_civil(from)?;
            let secs = c.to_epoch_seconds();
            match zone.classify(c) {
                Local::Unique(o) => {
                    let at = secs - i64::from(o);
                    if at < t {
                        return self.occurrence(at, c, o, OccurrenceKind::Fire);
                    }
                }
                Local::Fold { before, after } => {
                    let first = secs - i64::from(before);
                    let second = secs - i64::from(after);
                    if both && second < t {
                        return self.occurrence(second, c, after, OccurrenceKind::Fire);
                    }
                    if first < t {
                        return self.occurrence(first, c, before, OccurrenceKind::Fire);
                    }
                }
                Local::Gap { before: _, after } => {
                    let tr = zone.next_transition(secs - i64::from(after) - 1)?;
                    if tr < t {
                        let kind = match self.dst.gap {
                            GapPolicy::Shift => OccurrenceKind::FireShifted,
                            GapPolicy::Skip => OccurrenceKind::Skipped(SkipReason::DstGap),
                        };
                        if self.dst.gap == GapPolicy::Shift {
                            // Several nominal times shift onto one instant; report the first.
                            let mut first_nominal = c;
                            while let Some(e) = p.prev_civil(first_nominal.add_seconds(-1)) {
                                if matches!(zone.classify(e), Local::Gap { .. })
                                    && zone.next_transition(
                                        e.to_epoch_seconds() - i64::from(after) - 1,
                                    ) == Some(tr)
                                {
                                    first_nominal = e;
                                } else {
                                    break;
                                }
                            }
                            return self.occurrence(tr, first_nominal, after, kind);
                        }
                        return self.occurrence(tr, c, after, kind);
                    }
                }
            }
            from = c.add_seconds(-1);
        }
    }
}

/// Iterator over a schedule's occurrences; see [`Schedule::iter_after`].
#[derive(Debug)]
pub struct Occurrences<'s> {
    schedule: &'s Schedule,
    state: IterState,
}

#[derive(Debug)]
enum IterState {
    Start(Timestamp),
    After(Occurrence),
    Done,
}

impl Iterator for Occurrences<'_> {
    type Item = Occurrence;

    fn next(&mut self) -> Option<Occurrence> {
        let next = match &self.state {
            IterState::Start(t) => self.schedule.next_after(*t),
            IterState::After(prev) => self.schedule.next_following(prev),
            IterState::Done => None,
        };
        self.state = match next {
            Some(o) => IterState::After(o),
            None => IterState::Done,
        };
        next
    }
}

/// `+01:00`, `-03:30`, `+00:00`.
pub fn format_offset(seconds: i32) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let a = seconds.unsigned_abs();
    if !a.is_multiple_of(60) {
        format!("{sign}{:02}:{:02}:{:02}", a / 3600, a / 60 % 60, a % 60)
    } else {
        format!("{sign}{:02}:{:02}", a / 3600, a / 60 % 60)
    }
}

fn floor_second(t: Timestamp) -> i64 {
    let s = t.as_second();
    if t.subsec_nanosecond() < 0 { s - 1 } else { s }
}

fn ceil_second(t: Timestamp) -> i64 {
    let s = t.as_second();
    if t.subsec_nanosecond() > 0 { s + 1 } else { s }
}

#[cfg(test)]
mod tests;
