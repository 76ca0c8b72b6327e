//! Pause and resume (issue 15 item 5), distinct from disable: a paused job, group or node
//! keeps its schedule, and what fell due while it was paused is *recorded*, never silent.
//!
//! * A **job** or a **group** pause holds the job (each member of the group): its next fire is
//!   kept aside in a [`Hold`] and the job's own next fire is cleared, so no due query, claim
//!   or `next_due` sees it — the rule costs the hot path nothing. A job is held while its own
//!   pause or its group's pause lasts; the engine keeps that true when a job is added to, or
//!   moved into or out of, a paused group.
//! * On **resume** the job's misfire policy decides what of the paused interval runs
//!   ([`resume_plan`], over [`crate::job::JobDef::misfire_plan`]): the fires it keeps run, the
//!   others are recorded `skipped` with reason `paused` naming who paused, when and why — with
//!   the same bounded recording misfire skips use (one row for a long omitted range), so a
//!   month-long pause of an every-second job writes about two thousand rows, not millions.
//! * A **node** pause stops that node from claiming (the claim of a paused node returns
//!   nothing, and its loop skips its decisions); the jobs are not paused, so other nodes keep
//!   running them.
//!
//! Pauses are written to the database, so any node or command may pause or resume anything,
//! and every node obeys within its next pass.

use std::fmt;

use jiff::Timestamp;

use crate::job::{JobDef, JobId};
use crate::run::{NodeId, Run, SkipReason};

/// Who paused something, when and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    /// When.
    pub at: Timestamp,
    /// Who (an operator's name, `user@host` by default on the command line).
    pub by: String,
    /// Why, if given.
    pub reason: Option<String>,
}

impl fmt::Display for Pause {
    /// `paused by alice@mes-01 at 2026-06-01T10:00:00Z: line maintenance`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "paused by {} at {}", self.by, self.at)?;
        if let Some(r) = &self.reason {
            write!(f, ": {r}")?;
        }
        Ok(())
    }
}

/// The two pauses kept by name (a job's own pause lives in its [`Hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PauseKind {
    /// A group of jobs (seed 004 WorkerGroupID).
    Group,
    /// A node.
    Node,
}

impl PauseKind {
    /// `group` or `node`: the form stored.
    pub fn name(self) -> &'static str {
        match self {
            PauseKind::Group => "group",
            PauseKind::Node => "node",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<PauseKind> {
        [PauseKind::Group, PauseKind::Node]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// What is paused or resumed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PauseTarget {
    /// One job.
    Job(JobId),
    /// Every job of a group, present and future.
    Group(String),
    /// One node's claiming.
    Node(NodeId),
}

impl fmt::Display for PauseTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PauseTarget::Job(id) => write!(f, "job {id}"),
            PauseTarget::Group(g) => write!(f, "group {g}"),
            PauseTarget::Node(n) => write!(f, "node {n}"),
        }
    }
}

/// A held job: its next fire kept aside while it is paused, and its own pause (`None` when it
/// is held only by its group's pause).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The next fire the job had when it was held (or was given while held).
    pub next_fire: Option<Timestamp>,
    /// The job's own pause.
    pub pause: Option<Pause>,
}

/// What a resume did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resumed {
    /// The jobs released (their next fire restored, per their misfire policy).
    pub jobs: Vec<JobId>,
    /// The fires recorded skipped with reason `paused` (a long omitted range counts once).
    pub skipped: u64,
    /// A group's failure hold that the resume released ([`crate::group`]), if it had one.
    pub released: Option<crate::group::GroupHold>,
}

/// What the release of a held `job` writes at `now`: the skipped runs of the paused interval
/// (reason `paused`, `pause` in their text; DST-gap skips keep their reason) and the job's
/// next fire — the first fire its misfire policy keeps, else the schedule's next inside the
/// validity window. A next fire still in the future is restored unchanged; a job without a
/// schedule (a triggered fire held) keeps its fire, which the loop then handles as late.
pub fn resume_plan(
    job: &JobDef,
    held: Option<Timestamp>,
    now: Timestamp,
    pause: &str,
) -> (Vec<Run>, Option<Timestamp>) {
    let Some(id) = job.id else {
        return (Vec::new(), held);
    };
    let nf = match held {
        Some(nf) if nf <= now => nf,
        other => return (Vec::new(), other),
    };
    let Some(plan) = job.misfire_plan(nf, now) else {
        return (Vec::new(), Some(nf));
    };
    let mut runs = Vec::new();
    for s in &plan.skips {
        let (reason, detail) = match s.reason {
            SkipReason::Misfire => (SkipReason::Paused, Some(pause.to_string())),
            other => (other, None),
        };
        runs.push(Run::skipped(id, s.fire_time, reason, detail, now));
    }
    if let Some(o) = &plan.omitted {
        let range = match o.count {
            Some(n) => format!("and {n} further fires up to {}", o.last),
            None => format!("and further fires up to {}", o.last),
        };
        runs.push(Run::skipped(
            id,
            o.first,
            SkipReason::Paused,
            Some(format!("{pause}; {range}")),
            now,
        ));
    }
    let next = plan.fires.first().map(|f| f.fire_time).or(plan.next_fire);
    (runs, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Interval, Rule, Schedule, Zone};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn every(secs: u64, misfire: &str) -> JobDef {
        let i = Interval::new(secs, Some(ts("2026-06-01T00:00:00Z"))).unwrap();
        let mut j = JobDef::new("sync", "x::y")
            .unwrap()
            .with_schedule(Schedule::new(Rule::Interval(i), Zone::utc()));
        j.id = Some(JobId(7));
        j.misfire = misfire.parse().unwrap();
        j
    }

    #[test]
    fn the_misfire_policy_decides_and_the_rest_is_recorded_paused() {
        let why = "paused by ops at 2026-06-01T10:00:00Z";
        // Paused from 10:00 to 10:05 with a one-minute job: skip records all five.
        let (runs, next) = resume_plan(
            &every(60, "skip"),
            Some(ts("2026-06-01T10:00:00Z")),
            ts("2026-06-01T10:05:30Z"),
            why,
        );
        assert_eq!(
            runs.len(),
            5,
            "10:00 … 10:04 (10:05 is within the lateness window)"
        );
        assert!(
            runs.iter()
                .all(|r| r.skip_reason == Some(SkipReason::Paused))
        );
        assert_eq!(runs[0].error.as_deref(), Some(why));
        assert_eq!(
            next,
            Some(ts("2026-06-01T10:05:00Z")),
            "the on-time fire runs"
        );
        // fire-all:2 keeps the latest two misfires.
        let (runs, next) = resume_plan(
            &every(60, "fire-all:2@0s"),
            Some(ts("2026-06-01T10:00:00Z")),
            ts("2026-06-01T10:05:30Z"),
            why,
        );
        assert_eq!(runs.len(), 4);
        assert_eq!(next, Some(ts("2026-06-01T10:04:00Z")));
        // A month of an every-second job: bounded, and the range says how many.
        let (runs, next) = resume_plan(
            &every(1, "skip"),
            Some(ts("2026-06-01T00:00:00Z")),
            ts("2026-07-01T00:00:00Z"),
            why,
        );
        assert!(runs.len() < 2100, "{} rows", runs.len());
        let range = runs.last().unwrap().error.clone().unwrap();
        assert!(
            range.starts_with(why) && range.contains("further fires"),
            "{range}"
        );
        assert_eq!(
            next,
            Some(ts("2026-06-30T23:59:00Z")),
            "the fires within the lateness window run"
        );
        // A fire still to come is restored as it was.
        let later = Some(ts("2026-06-01T11:00:00Z"));
        assert_eq!(
            resume_plan(&every(60, "skip"), later, ts("2026-06-01T10:30:00Z"), why),
            (Vec::new(), later)
        );
    }

    #[test]
    fn pauses_say_who_when_and_why() {
        let p = Pause {
            at: ts("2026-06-01T10:00:00Z"),
            by: "alice@mes-01".into(),
            reason: Some("line maintenance".into()),
        };
        assert_eq!(
            p.to_string(),
            "paused by alice@mes-01 at 2026-06-01T10:00:00Z: line maintenance"
        );
        assert_eq!(PauseKind::from_name("node"), Some(PauseKind::Node));
        assert_eq!(
            PauseTarget::Group("nightly".into()).to_string(),
            "group nightly"
        );
    }
}
