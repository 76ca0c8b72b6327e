//! Answers to "did it run, and why not?": `takt why` ([`why`]) and `takt audit` ([`audit`]).
//!
//! Library functions over any [`Store`](takt_core::store::Store), returning typed reports
//! (serialisable, for the CLI's `--json` and the HTTP API), so the CLI is a printer and the
//! API reads the same answers. Both are **read-only**: they read jobs, runs, attempts, nodes
//! and node lives through the store's queries (runs and attempts by (job, fire time), node
//! lives by start) and write nothing; "now" is a parameter (the database's clock where it
//! has one), as everywhere in takt.
//!
//! Evidence, not guesses: what the store does not record (the enable/disable history, earlier
//! definitions of an edited job, the plugins a node has loaded) is stated as a limit of the
//! answer rather than inferred. Where a new rule of the scheduler makes a fire not run (the
//! workflow rules: pause, groups, dependencies), its reason joins [`why::CHECKS`] and its
//! expectation [`audit`]'s window, once the rule records its data.

pub mod audit;
pub mod why;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use takt_core::attempt::Attempt;
use takt_core::job::JobDef;
use takt_core::node::NodeSession;
use takt_core::run::{Run, SkipReason};
use takt_core::schedule::Zone;

/// How long after its last heartbeat a crashed node life still counts as up: the default
/// lease (a node renews every 30 s; a lease lasts 60 s).
pub const HEARTBEAT_SLACK: Duration = Duration::from_secs(60);

/// A bad question (unknown job, bad range): the message says what and what to do.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The request is wrong.
    #[error("{0}")]
    Invalid(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] takt_core::store::StoreError),
}

/// The forms a time may be given in, for the error messages of [`parse_at`] and
/// [`parse_bound`].
pub const TIME_FORMS: &str = "give an RFC 3339 instant such as 2026-03-29T01:30:00Z or \
                              2026-03-29T09:30:00+08:00, or a date-time such as 2026-03-29T02:30";

/// The instant asked about by `takt why --at` and `GET …/why?at=`: an RFC 3339 instant, or a
/// wall-clock time (or date) for the job's zone. `name` is the flag or parameter, for the
/// message.
pub fn parse_at(name: &str, text: &str) -> Result<why::At, String> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(why::At::Instant(t));
    }
    let civil = text.replacen(' ', "T", 1);
    if let Ok(dt) = civil.parse::<jiff::civil::DateTime>() {
        return Ok(why::At::Local(dt));
    }
    if let Ok(d) = civil.parse::<jiff::civil::Date>() {
        return Ok(why::At::Local(d.to_datetime(jiff::civil::Time::midnight())));
    }
    Err(format!(
        "{name} \"{text}\" is not a time; {TIME_FORMS} (taken in the job's zone)"
    ))
}

/// An audit bound (`--from` / `--to`, `?from=` / `?to=`): an instant, or a date(-time) taken
/// as UTC.
pub fn parse_bound(name: &str, text: &str) -> Result<Timestamp, String> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    let civil = text.replacen(' ', "T", 1);
    let dt = civil
        .parse::<jiff::civil::DateTime>()
        .or_else(|_| {
            civil
                .parse::<jiff::civil::Date>()
                .map(|d| d.to_datetime(jiff::civil::Time::midnight()))
        })
        .map_err(|_| format!("{name} \"{text}\" is not a time; {TIME_FORMS} (taken as UTC)"))?;
    jiff::tz::TimeZone::UTC
        .to_timestamp(dt)
        .map_err(|e| format!("{name} \"{text}\": {e}"))
}

/// An instant in RFC 3339 UTC form (reports carry instants as text).
pub(crate) fn utc(t: Timestamp) -> String {
    t.to_string()
}

/// `t` as wall-clock time in `zone` with its offset, e.g. `2026-03-29 03:00:00 +02:00`.
pub(crate) fn local(t: Timestamp, zone: &Zone) -> String {
    let offset = zone.time_zone().to_offset(t);
    let dt = offset.to_datetime(t);
    format!(
        "{} {}",
        dt.strftime("%Y-%m-%d %H:%M:%S"),
        takt_core::schedule::format_offset(offset.seconds())
    )
}

/// The zone a job's times are shown in (UTC for a job without a schedule).
pub(crate) fn zone_of(job: &JobDef) -> Zone {
    job.schedule
        .as_ref()
        .map_or_else(Zone::utc, |s| s.zone().clone())
}

/// The instant a job's current definition dates from: `updated_at` (its creation while the
/// version is 1; its last edit, enable or disable after that).
pub(crate) fn defined_since(job: &JobDef) -> Option<Timestamp> {
    job.updated_at
}

/// Whether `t` is outside the job's validity (before `effective_from`, at or after
/// `expires_at`).
pub(crate) fn outside_validity(job: &JobDef, t: Timestamp) -> bool {
    job.effective_from.is_some_and(|f| t < f) || job.expires_at.is_some_and(|u| t >= u)
}

/// The last instant a misfire record covers: a skipped run of reason misfire that stands for
/// a range of occurrences too long to list (`and … further misfires up to T`, written by the
/// loop), else its own fire time.
pub(crate) fn covered_until(run: &Run) -> Timestamp {
    if run.skip_reason == Some(SkipReason::Misfire)
        && let Some(e) = &run.error
        && let Some(i) = e.find("misfires up to ")
        && let Ok(t) = e[i + "misfires up to ".len()..].trim().parse::<Timestamp>()
    {
        return t.max(run.fire_time);
    }
    run.fire_time
}

/// Whether some node life was up at `t`: started by then and seen (stop, else last heartbeat
/// plus [`HEARTBEAT_SLACK`]) after.
pub(crate) fn up_at(sessions: &[NodeSession], t: Timestamp) -> bool {
    sessions
        .iter()
        .any(|s| s.started_at <= t && t <= seen_until(s))
}

fn seen_until(s: &NodeSession) -> Timestamp {
    match s.stopped_at {
        Some(stop) => stop,
        None => s
            .heartbeat_at
            .checked_add(SignedDuration::try_from(HEARTBEAT_SLACK).unwrap_or_default())
            .unwrap_or(s.heartbeat_at),
    }
}

/// A stretch with no node up, around an instant: from the last sign of life before it (if
/// any is recorded) to the next start after it (if any).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Downtime {
    /// The last instant a node was seen before (`None`: no earlier life recorded).
    pub from: Option<String>,
    /// The next start after (`None`: none since).
    pub to: Option<String>,
    /// The sentence: `the host was down from … to …`.
    pub text: String,
}

/// The downtime around `t` if no node life was up then (`None` when one was, or when no life
/// is recorded at all: then nothing can be said).
pub(crate) fn downtime_at(sessions: &[NodeSession], t: Timestamp) -> Option<Downtime> {
    if sessions.is_empty() || up_at(sessions, t) {
        return None;
    }
    let from = sessions.iter().map(seen_until).filter(|&e| e < t).max();
    let to = sessions
        .iter()
        .map(|s| s.started_at)
        .filter(|&s| s > t)
        .min();
    let text = match (from, to) {
        (Some(f), Some(u)) => format!("the host was down from {f} to {u}"),
        (Some(f), None) => format!("the host was down from {f} (no node has started since)"),
        (None, Some(u)) => format!("no node was up before {u} (the first recorded start)"),
        (None, None) => "no node was up".to_string(),
    };
    Some(Downtime {
        from: from.map(utc),
        to: to.map(utc),
        text,
    })
}

/// An attempt as reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttemptView {
    /// The attempt number.
    pub attempt: u32,
    /// The node that claimed it.
    pub node: String,
    /// That node's life.
    pub instance: Option<String>,
    /// When it was claimed (UTC).
    pub started_at: String,
    /// When it ended (UTC), if recorded.
    pub finished_at: Option<String>,
    /// How it ended (`None`: running, or its end was never recorded).
    pub outcome: Option<&'static str>,
    /// Its error.
    pub error: Option<String>,
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> AttemptView {
        AttemptView {
            attempt: a.attempt,
            node: a.node_id.0.clone(),
            instance: a.node_instance.as_ref().map(|i| i.0.clone()),
            started_at: utc(a.started_at),
            finished_at: a.finished_at.map(utc),
            outcome: a.outcome.map(|o| o.name()),
            error: a.error.clone(),
        }
    }
}

/// Why a fire's attempts count as executed more than once (`None`: they do not): two that
/// overlap in time (both executing at once — a node that lost its lease kept running beside
/// the retry), or more than one that succeeded. Sequential retries after failures are not.
pub fn duplicate_execution(attempts: &[Attempt], now: Timestamp) -> Option<String> {
    for (i, a) in attempts.iter().enumerate() {
        for b in &attempts[i + 1..] {
            if a.overlaps(b, now) {
                return Some(format!(
                    "attempts {} ({} on {}) and {} ({} on {}) were executing at the same time",
                    a.attempt, a.started_at, a.node_id, b.attempt, b.started_at, b.node_id
                ));
            }
        }
    }
    let ok: Vec<u32> = attempts
        .iter()
        .filter(|a| a.outcome == Some(takt_core::attempt::AttemptOutcome::Succeeded))
        .map(|a| a.attempt)
        .collect();
    (ok.len() > 1).then(|| {
        format!(
            "attempts {} each succeeded: the fire ran to completion {} times",
            ok.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            ok.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use takt_core::attempt::AttemptOutcome;
    use takt_core::job::JobId;
    use takt_core::run::{NodeId, RunId};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_272_000 + s).expect("instant")
    }

    fn attempt(n: u32, start: i64, end: i64, outcome: AttemptOutcome) -> Attempt {
        let mut a = Attempt::begun(
            RunId(1),
            JobId(1),
            t(0),
            n,
            NodeId("a".into()),
            None,
            t(start),
        );
        a.end(&takt_core::attempt::AttemptEnd {
            at: t(end),
            outcome,
            error: None,
        });
        a
    }

    #[test]
    fn retries_are_not_duplicates_but_two_successes_and_overlaps_are() {
        let retried = [
            attempt(1, 0, 5, AttemptOutcome::Failed),
            attempt(2, 15, 20, AttemptOutcome::Succeeded),
        ];
        assert_eq!(duplicate_execution(&retried, t(100)), None);
        let twice = [
            attempt(1, 0, 5, AttemptOutcome::Succeeded),
            attempt(2, 15, 20, AttemptOutcome::Succeeded),
        ];
        assert!(
            duplicate_execution(&twice, t(100))
                .is_some_and(|w| w.contains("attempts 1, 2 each succeeded")),
        );
        let overlapping = [
            attempt(1, 0, 70, AttemptOutcome::LeaseExpired),
            attempt(2, 60, 80, AttemptOutcome::Succeeded),
        ];
        assert!(
            duplicate_execution(&overlapping, t(100))
                .is_some_and(|w| w.contains("were executing at the same time")),
        );
    }

    #[test]
    fn downtime_is_the_stretch_between_lives() {
        let life = |start: i64, beat: i64, stop: Option<i64>| NodeSession {
            node_id: NodeId("n".into()),
            instance: takt_core::node::InstanceId(format!("l{start}")),
            host_name: "h".into(),
            started_at: t(start),
            heartbeat_at: t(beat),
            stopped_at: stop.map(t),
        };
        // A clean stop at 100, a crash after the heartbeat at 400 (up to 460), a start at 1000.
        let lives = [
            life(0, 90, Some(100)),
            life(300, 400, None),
            life(1000, 1000, None),
        ];
        assert_eq!(downtime_at(&lives, t(50)), None, "up");
        assert_eq!(
            downtime_at(&lives, t(450)),
            None,
            "within the heartbeat slack"
        );
        let d = downtime_at(&lives, t(200)).expect("down");
        assert_eq!((d.from, d.to), (Some(utc(t(100))), Some(utc(t(300)))));
        let d = downtime_at(&lives, t(500)).expect("down");
        assert_eq!(
            d.from,
            Some(utc(t(460))),
            "the crash: last heartbeat plus the slack"
        );
        assert_eq!(
            downtime_at(&[], t(500)),
            None,
            "no lives recorded: nothing said"
        );
    }
}
