//! The contract between wall-clock rules and the zone layer.

use crate::civil::Civil;

/// A rule that matches wall-clock times (cron expressions, calendar schedules).
///
/// Implementations search in civil time only; the zone layer in [`super::Schedule`] turns the
/// civil matches into instants and applies the daylight-saving policy. Both searches must be
/// bounded (return `None` after a bounded amount of work when nothing matches) and must not
/// allocate.
pub trait CivilPattern {
    /// The first matching civil time at or after `from`.
    fn next_civil(&self, from: Civil) -> Option<Civil>;
    /// The last matching civil time at or before `from`.
    fn prev_civil(&self, from: Civil) -> Option<Civil>;
    /// Whether the rule reads as "every so often" (every N hours/minutes/seconds) rather than
    /// "at a fixed time of day". Interval-like rules follow elapsed time through a DST fold and
    /// fire in both passes under [`super::FoldPolicy::Auto`]; fixed-time rules fire once.
    fn is_interval_like(&self) -> bool;
}

impl CivilPattern for super::cron::CronExpr {
    fn next_civil(&self, from: Civil) -> Option<Civil> {
        super::cron::CronExpr::next_civil(self, from)
    }
    fn prev_civil(&self, from: Civil) -> Option<Civil> {
        super::cron::CronExpr::prev_civil(self, from)
    }
    fn is_interval_like(&self) -> bool {
        super::cron::CronExpr::is_interval_like(self)
    }
}
