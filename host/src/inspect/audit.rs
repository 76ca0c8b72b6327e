//! `takt audit`: seed 003's release gate ("count duplicate (JobId, FireTime) — it must be 0")
//! as a report. For each job, the fire times its schedule expects in a range (DST policy
//! applied: a gap's skip is expected as a skip record) against what the store recorded:
//!
//! * a **gap** is an expected fire with neither a run nor a skip record (nor a misfire record
//!   standing for a range of them);
//! * a **duplicate** is a fire executed more than once, counted from its attempts
//!   ([`super::duplicate_execution`]).
//!
//! Expectations start where the job's current definition is known to start: its creation, or
//! its last change (an edit, an enable or a disable bumps the version and `updated_at`; takt
//! keeps no history of earlier definitions, nor of enable/disable, so fires before that are
//! not checked for gaps — said in the report). They end at `now` less [`SETTLE`] (a fire
//! that is due right now may not be claimed yet). Disabled jobs expect nothing after they
//! were disabled. Duplicates are counted over the whole range, whatever the definition.

use std::collections::HashMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use takt_core::attempt::Attempt;
use takt_core::job::{JobDef, JobName};
use takt_core::run::RunId;
use takt_core::store::Store;

use super::{AttemptView, InspectError, covered_until, defined_since, downtime_at, local, utc};

/// How long after a fire's time the audit still waits for its record before calling it a
/// gap: the loop claims within a second, the misfire planning on its next pass.
pub const SETTLE: Duration = Duration::from_secs(60);

/// The most expected fires one job's check walks; past it the job's check stops and says so.
pub const MAX_EXPECTED: usize = 1_000_000;

/// What to audit.
#[derive(Clone, Debug)]
pub struct AuditRequest {
    /// One job, or every job.
    pub job: Option<JobName>,
    /// Fire times from (inclusive).
    pub from: Timestamp,
    /// Fire times to (exclusive).
    pub to: Timestamp,
    /// The present (the database's clock where it has one).
    pub now: Timestamp,
}

/// The audit of a range.
#[derive(Clone, Debug, Serialize)]
pub struct AuditReport {
    /// The range (UTC), `[from, to)`.
    pub from: String,
    /// The end of the range (exclusive).
    pub to: String,
    /// The present the audit was made at.
    pub now: String,
    /// Gaps over every job.
    pub gaps: usize,
    /// Duplicates over every job.
    pub duplicates: usize,
    /// Per job, by name.
    pub jobs: Vec<JobAudit>,
    /// What the audit cannot see (stated, not guessed).
    pub limits: Vec<&'static str>,
}

impl AuditReport {
    /// Whether the range is clean: no gap, no duplicate.
    pub fn clean(&self) -> bool {
        self.gaps == 0 && self.duplicates == 0
    }
}

/// One job's audit.
#[derive(Clone, Debug, Serialize)]
pub struct JobAudit {
    /// The job.
    pub job: String,
    /// Its schedule in words (`None`: runs only when triggered).
    pub schedule: Option<String>,
    /// The part of the range checked for gaps (UTC), if any.
    pub checked_from: Option<String>,
    /// Its end.
    pub checked_to: Option<String>,
    /// Why a part of the range was not checked for gaps.
    pub notes: Vec<String>,
    /// Fires (and DST-gap skips) the schedule expects in the checked part.
    pub expected: usize,
    /// Expected fires recorded as run.
    pub ran: usize,
    /// Expected fires recorded as skipped (with a reason), or covered by a misfire record.
    pub skipped: usize,
    /// Recorded runs in the range at no expected time (triggers, an earlier definition).
    pub other_runs: usize,
    /// Expected fires with no record.
    pub gaps: Vec<Gap>,
    /// Fires executed more than once.
    pub duplicates: Vec<Duplicate>,
}

/// An expected fire with no record.
#[derive(Clone, Debug, Serialize)]
pub struct Gap {
    /// The fire time (UTC).
    pub fire_time: String,
    /// The same in the job's zone.
    pub local: String,
    /// What the store says about that time: downtime, if no node was up.
    pub evidence: Option<String>,
}

/// A fire executed more than once.
#[derive(Clone, Debug, Serialize)]
pub struct Duplicate {
    /// The run.
    pub run_id: i64,
    /// Its fire time (UTC).
    pub fire_time: String,
    /// Why it counts (overlapping attempts, several successes).
    pub why: String,
    /// Its attempts.
    pub attempts: Vec<AttemptView>,
}

const LIMITS: &[&str] = &[
    "enable/disable history is not recorded: a job's fires are checked from its last change \
     (creation, edit, enable or disable) on",
    "earlier definitions of an edited job are not recorded: runs before its last change are \
     counted as other runs, not matched to a schedule",
];

/// Audits `req` on `store`.
pub async fn audit<S: Store>(store: &S, req: &AuditRequest) -> Result<AuditReport, InspectError> {
    if req.from >= req.to {
        return Err(InspectError::Invalid(format!(
            "--from {} is not before --to {}; give a range whose start comes first",
            req.from, req.to
        )));
    }
    let jobs: Vec<JobDef> = match &req.job {
        Some(name) => vec![store.job_get_by_name(name).await?.ok_or_else(|| {
            InspectError::Invalid(format!("--job: no job named \"{name}\"; see takt job list"))
        })?],
        None => store.job_list().await?,
    };
    let sessions = store
        .node_sessions(
            req.from
                .checked_sub(SignedDuration::from_hours(24 * 7))
                .unwrap_or(req.from),
            req.to,
        )
        .await?;
    let mut out = AuditReport {
        from: utc(req.from),
        to: utc(req.to),
        now: utc(req.now),
        gaps: 0,
        duplicates: 0,
        jobs: Vec::with_capacity(jobs.len()),
        limits: LIMITS.to_vec(),
    };
    for job in &jobs {
        let a = audit_job(store, job, req, &sessions).await?;
        out.gaps += a.gaps.len();
        out.duplicates += a.duplicates.len();
        out.jobs.push(a);
    }
    out.jobs.sort_by(|a, b| a.job.cmp(&b.job));
    Ok(out)
}

async fn audit_job<S: Store>(
    store: &S,
    job: &JobDef,
    req: &AuditRequest,
    sessions: &[takt_core::node::NodeSession],
) -> Result<JobAudit, InspectError> {
    let id = job
        .id
        .ok_or_else(|| InspectError::Invalid(format!("job {} has no id", job.name)))?;
    let zone = super::zone_of(job);
    let mut a = JobAudit {
        job: job.name.to_string(),
        schedule: job.schedule.as_ref().map(|s| s.describe()),
        checked_from: None,
        checked_to: None,
        notes: Vec::new(),
        expected: 0,
        ran: 0,
        skipped: 0,
        other_runs: 0,
        gaps: Vec::new(),
        duplicates: Vec::new(),
    };
    let runs = store.runs_between(Some(id), req.from, req.to).await?;
    let attempts = store.attempts_between(Some(id), req.from, req.to).await?;

    // Duplicates, from attempts, over the whole range.
    let mut by_run: HashMap<RunId, Vec<Attempt>> = HashMap::new();
    for at in attempts {
        by_run.entry(at.run_id).or_default().push(at);
    }
    for run in &runs {
        let Some(rid) = run.id else { continue };
        if let Some(list) = by_run.get(&rid)
            && let Some(why) = super::duplicate_execution(list, req.now)
        {
            a.duplicates.push(Duplicate {
                run_id: rid.0,
                fire_time: utc(run.fire_time),
                why,
                attempts: list.iter().map(AttemptView::from).collect(),
            });
        }
    }

    // Gaps, where the definition is known.
    let settle = SignedDuration::try_from(SETTLE).unwrap_or_default();
    let horizon = req.now.checked_sub(settle).unwrap_or(req.now).min(req.to);
    let since = defined_since(job);
    let start = since.map_or(req.from, |s| s.max(req.from));
    if let Some(s) = since
        && s > req.from
    {
        a.notes.push(if job.version <= 1 {
            format!("not expected before {s}: the job was created then")
        } else {
            format!(
                "not checked before {s}: the job was last changed then (version {}), and \
                 earlier definitions are not recorded",
                job.version
            )
        });
    }
    if req.to > horizon {
        a.notes.push(format!(
            "not checked after {horizon}: fires later than now less {}s may not be recorded yet",
            SETTLE.as_secs()
        ));
    }
    let Some(schedule) = &job.schedule else {
        a.notes
            .push("no schedule: it runs only when triggered, so no fire is expected".into());
        a.other_runs = runs.len();
        return Ok(a);
    };
    if !job.enabled {
        a.notes.push(match since {
            Some(s) => format!("disabled since {s}: no fire expected after"),
            None => "disabled: no fire expected".to_string(),
        });
    }
    let end = if job.enabled {
        horizon
    } else {
        since.map_or(req.from, |s| s.min(horizon))
    };
    let mut matched = vec![false; runs.len()];
    if start < end {
        a.checked_from = Some(utc(start));
        a.checked_to = Some(utc(end));
        let index: HashMap<Timestamp, usize> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.fire_time, i))
            .collect();
        // Misfire records standing for a range of occurrences.
        let ranges: Vec<(Timestamp, Timestamp)> = runs
            .iter()
            .map(|r| (r.fire_time, covered_until(r)))
            .filter(|(f, u)| u > f)
            .collect();
        let from = start
            .checked_sub(SignedDuration::from_secs(1))
            .unwrap_or(start);
        for o in schedule.iter_after(from) {
            if o.at >= end {
                break;
            }
            if super::outside_validity(job, o.at) {
                continue;
            }
            if a.expected == MAX_EXPECTED {
                a.notes.push(format!(
                    "stopped after {MAX_EXPECTED} expected fires, at {}; audit a shorter range",
                    o.at
                ));
                break;
            }
            a.expected += 1;
            if let Some(&i) = index.get(&o.at) {
                matched[i] = true;
                if runs[i].skip_reason.is_some() {
                    a.skipped += 1;
                } else {
                    a.ran += 1;
                }
            } else if ranges.iter().any(|(f, u)| *f <= o.at && o.at <= *u) {
                a.skipped += 1;
            } else {
                a.gaps.push(Gap {
                    fire_time: utc(o.at),
                    local: local(o.at, &zone),
                    evidence: downtime_at(sessions, o.at).map(|d| d.text),
                });
            }
        }
    }
    a.other_runs = matched.iter().filter(|m| !**m).count();
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use takt_core::run::{Run, SkipReason};
    use takt_core::schedule::{Interval, Rule, Schedule, Zone};
    use takt_core::store::conformance::block_on;
    use takt_core::store::memory::MemoryStore;

    fn t(s: &str) -> Timestamp {
        s.parse().expect("instant")
    }

    fn hourly(store: &MemoryStore, name: &str, created: Timestamp, enabled: bool) -> JobDef {
        let every = Interval::new(3600, Some(t("2026-06-01T00:00:00Z"))).expect("interval");
        let mut job = JobDef::new(name, "x::y")
            .expect("job")
            .with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()));
        job.enabled = enabled;
        job.next_fire = Some(created);
        block_on(store.job_insert(&job, created)).expect("insert")
    }

    fn req(job: &str) -> AuditRequest {
        AuditRequest {
            job: Some(JobName::new(job).expect("name")),
            from: t("2026-06-01T00:00:00Z"),
            to: t("2026-06-01T05:00:00Z"),
            now: t("2026-06-02T00:00:00Z"),
        }
    }

    #[test]
    fn a_misfire_record_for_a_range_covers_it() {
        let store = MemoryStore::new();
        let job = hourly(&store, "h", t("2026-06-01T00:00:00Z"), true);
        let id = job.id.expect("id");
        let mut skip = Run::skipped(
            id,
            t("2026-06-01T00:00:00Z"),
            SkipReason::Misfire,
            Some("and further misfires up to 2026-06-01T03:00:00Z".into()),
            t("2026-06-01T04:30:00Z"),
        );
        skip = block_on(store.run_insert_skipped(&skip)).expect("skip");
        assert_eq!(covered_until(&skip), t("2026-06-01T03:00:00Z"));
        let r = block_on(audit(&store, &req("h"))).expect("audit");
        let a = &r.jobs[0];
        assert_eq!((a.expected, a.ran, a.skipped), (5, 0, 4), "{a:?}");
        assert_eq!(a.gaps.len(), 1, "04:00 has no record: {a:?}");
        assert_eq!(a.gaps[0].fire_time, "2026-06-01T04:00:00Z");
        assert_eq!(
            a.gaps[0].evidence, None,
            "no node life recorded: nothing said"
        );
        assert!(!r.clean());
    }

    #[test]
    fn nothing_is_expected_before_creation_or_after_a_disable() {
        let store = MemoryStore::new();
        hourly(&store, "late", t("2026-06-01T02:30:00Z"), true);
        let r = block_on(audit(&store, &req("late"))).expect("audit");
        let a = &r.jobs[0];
        assert_eq!(a.expected, 2, "03:00 and 04:00 only: {a:?}");
        assert_eq!(a.checked_from.as_deref(), Some("2026-06-01T02:30:00Z"));
        assert!(a.notes[0].contains("the job was created then"), "{a:?}");

        hourly(&store, "off", t("2026-06-01T00:00:00Z"), false);
        let r = block_on(audit(&store, &req("off"))).expect("audit");
        let a = &r.jobs[0];
        assert_eq!((a.expected, a.gaps.len()), (0, 0), "{a:?}");
        assert!(
            a.notes.iter().any(|n| n.starts_with("disabled since")),
            "{a:?}"
        );
        assert!(r.clean());
    }

    #[test]
    fn a_range_that_does_not_start_first_is_refused() {
        let store = MemoryStore::new();
        let mut q = req("x");
        q.to = q.from;
        let e = block_on(audit(&store, &q)).unwrap_err();
        assert!(e.to_string().contains("is not before --to"), "{e}");
    }
}
