//! Job dependencies (seed 004 WorkerDependency, issue 15 item 1): the pure rules the store
//! engine applies, so that every backend obeys them the same way.
//!
//! **The period.** A fire of B at `t` depends on each dependency A's run *for the same
//! period*: the latest run of A whose fire time lies in `[p, t]`, where `p` is A's latest
//! firing occurrence at or before `t` ([`period_fire`]; a manual re-run of A inside the period
//! counts, being later). A job without a schedule (or before its first fire) has no period
//! start: its latest run at or before `t` is taken.
//!
//! **The decision** ([`decide`]), given what each dependency's run is ([`Upstream`]):
//! * every one succeeded → start;
//! * any failed, timed out, cancelled or skipped → skip (reason `dependency`), naming it,
//!   its fire time and its state;
//! * any has no run and never will ([`Upstream::Missing`]: A's next fire is already past
//!   the period's fire, so that fire was passed without a run, or A does not exist, or A
//!   never fired at or before `t`) → skip, saying so;
//! * otherwise (a run pending or running, or a fire of A still due — it may be being claimed
//!   on another node) → wait, until the deadline ([`wait_deadline`]: the job's
//!   `dependency_wait` after the fire, else until B's next fire); past it → skip, "still
//!   waiting for A".
//!
//! A waiting run is a pending first attempt whose `next_attempt_at` is its next re-check
//! ([`Run::is_waiting`](crate::run::Run::is_waiting)), at most [`RECHECK`] ahead, so the
//! claim round that comes anyway (the loop's safety poll is also 1 s) re-evaluates it, and
//! `next_due` wakes the loop for it without any other polling.
//!
//! **The graph** ([`check_graph`]): unknown names and cycles are refused when a job is added
//! or updated; a job others depend on cannot be deleted ([`dependents_of`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::job::{JobDef, JobName, Validity};
use crate::run::RunState;
use crate::store::StoreError;

/// The longest a waiting run goes without being re-evaluated: the claim round's cadence under
/// the default safety poll, so re-checks add no database rounds of their own.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The wait of a job with dependencies but neither a `dependency_wait` nor a next fire (a
/// manual job): a day after the fire.
pub const WAIT_WITHOUT_NEXT_FIRE: Duration = Duration::from_secs(24 * 3600);

/// How far back [`period_fire`] steps over skipped occurrences (DST gaps) before giving up.
const MAX_STEPS_BACK: usize = 64;

/// The start of `dep`'s period that contains `t`: its latest firing occurrence at or before
/// `t` inside its validity window, or `None` (no schedule, or no such fire).
pub fn period_fire(dep: &JobDef, t: Timestamp) -> Option<Timestamp> {
    let schedule = dep.schedule.as_ref()?;
    // `prev_before` is exclusive and rounds up to the next whole second: one millisecond
    // later includes `t` itself and nothing after it, also for a `t` with milliseconds (a
    // continuation's fire time is its parent's finish), where one second later would round
    // up to a fire after `t`.
    let mut before = t.checked_add(jiff::SignedDuration::from_millis(1)).ok()?;
    // After the window closed, its last fire is the latest: search from the expiry.
    if let Some(until) = dep.expires_at {
        before = before.min(until);
    }
    for _ in 0..MAX_STEPS_BACK {
        let o = schedule.prev_before(before)?;
        if o.fires() {
            return match dep.validity_at(o.at) {
                Validity::Inside => Some(o.at),
                // Before the window opened nothing fired earlier either.
                Validity::NotYet | Validity::Expired => None,
            };
        }
        before = o.at;
    }
    None
}

/// Until when a fire of `job` at `fire` waits for its dependencies: `fire +
/// dependency_wait`, else the job's next fire after `fire`, else [`WAIT_WITHOUT_NEXT_FIRE`].
pub fn wait_deadline(job: &JobDef, fire: Timestamp) -> Timestamp {
    let far = |d: Duration| fire.checked_add(d).unwrap_or(Timestamp::MAX);
    match job.dependency_wait {
        Some(d) => far(d),
        None => job
            .first_fire_after(fire)
            .unwrap_or_else(|| far(WAIT_WITHOUT_NEXT_FIRE)),
    }
}

/// What one dependency's run for the period is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// Its run for the period, in this state.
    Run {
        /// The run's fire time.
        fire: Timestamp,
        /// Its state.
        state: RunState,
    },
    /// Its fire at `fire` is still due (it has no run yet; another node may be claiming it).
    Due {
        /// The fire.
        fire: Timestamp,
    },
    /// It has no run for the period and will not get one; `why` says why (a clause such as
    /// "has no run at or before …").
    Missing {
        /// The reason, as a clause after the job's name.
        why: String,
    },
}

/// One dependency and its run for the period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// The dependency's name.
    pub name: JobName,
    /// Its run.
    pub upstream: Upstream,
}

/// What a fire (or a waiting run) does about its dependencies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Every dependency succeeded: run.
    Start,
    /// Wait; evaluate again at `recheck`. `waiting_for` is shown on the run.
    Wait {
        /// The next evaluation (at most [`RECHECK`] ahead, never past the deadline).
        recheck: Timestamp,
        /// What it waits for.
        waiting_for: String,
    },
    /// Record the run skipped, reason `dependency`, with this message.
    Skip {
        /// Names the dependency, its fire time and state (or that it is still awaited).
        message: String,
    },
}

/// The rule (see the module docs) for a fire at `fire` of a job whose dependencies' runs are
/// `deps`, at `now`, waiting until `deadline`. Failures are reported before waits, in the
/// order the job lists its dependencies.
pub fn decide(
    fire: Timestamp,
    deps: &[Dependency],
    deadline: Timestamp,
    now: Timestamp,
) -> Decision {
    let mut awaited = Vec::new();
    for d in deps {
        match &d.upstream {
            Upstream::Run {
                state: RunState::Succeeded,
                ..
            } => {}
            Upstream::Run { fire: at, state } if state.is_final() => {
                return Decision::Skip {
                    message: format!(
                        "dependency {} did not succeed: its run of {at} is {state}, so this \
                         fire of {fire} does not run",
                        d.name
                    ),
                };
            }
            Upstream::Missing { why } => {
                return Decision::Skip {
                    message: format!(
                        "dependency {} {why}, so this fire of {fire} does not run",
                        d.name
                    ),
                };
            }
            Upstream::Run { fire: at, state } => {
                awaited.push(format!("{} (its run of {at} is {state})", d.name));
            }
            Upstream::Due { fire: at } => {
                awaited.push(format!("{} (its fire of {at} has no run yet)", d.name));
            }
        }
    }
    if awaited.is_empty() {
        return Decision::Start;
    }
    let list = awaited.join(", ");
    if now >= deadline {
        return Decision::Skip {
            message: format!(
                "still waiting for {list} at the end of the dependency wait ({deadline}); set \
                 dependency_wait to wait longer"
            ),
        };
    }
    let recheck = now
        .checked_add(RECHECK)
        .map_or(deadline, |r| r.min(deadline));
    Decision::Wait {
        recheck,
        waiting_for: format!("waiting for {list}; gives up at {deadline}"),
    }
}

/// Checks the dependency graph of `jobs` (each job's name and dependencies) after `changed`
/// was added or updated: every name `changed` lists exists, and no cycle passes through it.
/// The error names the unknown job, or lists the cycle.
pub fn check_graph<'a>(
    jobs: impl IntoIterator<Item = (&'a JobName, &'a [JobName])>,
    changed: &JobName,
) -> Result<(), StoreError> {
    let graph: BTreeMap<&JobName, &[JobName]> = jobs.into_iter().collect();
    let deps = graph.get(changed).copied().unwrap_or(&[]);
    for d in deps {
        if !graph.contains_key(d) {
            return Err(StoreError::invalid(format!(
                "job {changed} depends on {d}, which does not exist; add job {d} first, or \
                 remove it from depends_on"
            )));
        }
    }
    if let Some(cycle) = cycle_through(&graph, changed) {
        let path: Vec<&str> = cycle.iter().map(|n| n.as_str()).collect();
        return Err(StoreError::invalid(format!(
            "dependency cycle: {}; remove one of these dependencies",
            path.join(" -> ")
        )));
    }
    Ok(())
}

/// A path `start -> … -> start` along dependencies, if there is one (depth-first, in the
/// order jobs list their dependencies).
fn cycle_through<'a>(
    graph: &BTreeMap<&'a JobName, &'a [JobName]>,
    start: &'a JobName,
) -> Option<Vec<&'a JobName>> {
    let mut seen: BTreeSet<&JobName> = BTreeSet::new();
    // Each frame: a job on the path and the index of its next dependency to try.
    let mut path: Vec<(&JobName, usize)> = vec![(start, 0)];
    while let Some((node, i)) = path.last_mut() {
        let deps = graph.get(*node).copied().unwrap_or(&[]);
        let Some(next) = deps.get(*i) else {
            seen.insert(*node);
            path.pop();
            continue;
        };
        *i += 1;
        if next == start {
            let mut cycle: Vec<&JobName> = path.iter().map(|(n, _)| *n).collect();
            cycle.push(start);
            return Some(cycle);
        }
        if !seen.contains(next)
            && !path.iter().any(|(n, _)| *n == next)
            && let Some((k, _)) = graph.get_key_value(next)
        {
            path.push((k, 0));
        }
    }
    None
}

/// The jobs among `jobs` that list `name` as a dependency, by name.
pub fn dependents_of<'a>(
    jobs: impl IntoIterator<Item = &'a JobDef>,
    name: &JobName,
) -> Vec<JobName> {
    let mut out: Vec<JobName> = jobs
        .into_iter()
        .filter(|j| j.dependencies.contains(name))
        .map(|j| j.name.clone())
        .collect();
    out.sort();
    out
}

/// The refusal to remove or rename (`doing`) `name` while `dependents` depend on it.
pub fn depended_on(name: &JobName, dependents: &[JobName], doing: &str) -> StoreError {
    let list: Vec<&str> = dependents.iter().map(JobName::as_str).collect();
    StoreError::conflict(format!(
        "job {name} cannot be {doing}: {} depend{} on it; remove {name} from their depends_on \
         first",
        list.join(", "),
        if list.len() == 1 { "s" } else { "" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Interval, Rule, Schedule, Zone};

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn n(s: &str) -> JobName {
        JobName::new(s).unwrap()
    }

    fn every_10s(name: &str) -> JobDef {
        let every = Interval::new(10, Some(t("2026-01-01T00:00:00Z"))).unwrap();
        let rule = Rule::Interval(every);
        JobDef::new(name, "x::y")
            .unwrap()
            .with_schedule(Schedule::new(rule, Zone::utc()))
    }

    fn dep(name: &str, upstream: Upstream) -> Dependency {
        Dependency {
            name: n(name),
            upstream,
        }
    }

    const FIRE: &str = "2026-03-01T10:00:00Z";
    const DEADLINE: &str = "2026-03-01T10:00:10Z";

    fn run(state: RunState) -> Upstream {
        Upstream::Run {
            fire: t(FIRE),
            state,
        }
    }

    #[test]
    fn all_succeeded_starts() {
        let deps = [
            dep("a", run(RunState::Succeeded)),
            dep("b", run(RunState::Succeeded)),
        ];
        assert_eq!(
            decide(t(FIRE), &deps, t(DEADLINE), t(FIRE)),
            Decision::Start
        );
        assert_eq!(decide(t(FIRE), &[], t(DEADLINE), t(FIRE)), Decision::Start);
    }

    #[test]
    fn a_final_failure_skips_naming_the_dependency_its_fire_and_state() {
        for state in [
            RunState::Failed,
            RunState::TimedOut,
            RunState::Cancelled,
            RunState::Skipped,
        ] {
            let deps = [
                dep("ok", run(RunState::Running)),
                dep("extract", run(state)),
            ];
            let Decision::Skip { message } = decide(t(FIRE), &deps, t(DEADLINE), t(FIRE)) else {
                panic!("{state}: not a skip");
            };
            assert!(message.contains("dependency extract"), "{message}");
            assert!(message.contains(FIRE), "{message}");
            assert!(message.contains(state.name()), "{message}");
        }
    }

    #[test]
    fn an_unfinished_dependency_waits_then_gives_up() {
        let deps = [
            dep("extract", run(RunState::Running)),
            dep("load", Upstream::Due { fire: t(FIRE) }),
        ];
        match decide(t(FIRE), &deps, t(DEADLINE), t("2026-03-01T10:00:03Z")) {
            Decision::Wait {
                recheck,
                waiting_for,
            } => {
                assert_eq!(recheck, t("2026-03-01T10:00:04Z"));
                assert!(waiting_for.contains("extract (its run of"), "{waiting_for}");
                assert!(waiting_for.contains("load (its fire of"), "{waiting_for}");
            }
            d => panic!("{d:?}"),
        }
        // The re-check never passes the deadline.
        let Decision::Wait { recheck, .. } =
            decide(t(FIRE), &deps, t(DEADLINE), t("2026-03-01T10:00:09.500Z"))
        else {
            panic!("not a wait");
        };
        assert_eq!(recheck, t(DEADLINE));
        let Decision::Skip { message } = decide(t(FIRE), &deps, t(DEADLINE), t(DEADLINE)) else {
            panic!("not a skip");
        };
        assert!(
            message.starts_with("still waiting for extract"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_run_skips_with_its_reason() {
        let deps = [dep(
            "extract",
            Upstream::Missing {
                why: "has no run at or before x".into(),
            },
        )];
        let Decision::Skip { message } = decide(t(FIRE), &deps, t(DEADLINE), t(FIRE)) else {
            panic!("not a skip");
        };
        assert!(message.contains("dependency extract has no run at or before x"));
    }

    #[test]
    fn the_period_is_the_latest_fire_at_or_before() {
        let a = every_10s("a");
        assert_eq!(
            period_fire(&a, t("2026-03-01T10:00:00Z")),
            Some(t("2026-03-01T10:00:00Z"))
        );
        assert_eq!(
            period_fire(&a, t("2026-03-01T10:00:07Z")),
            Some(t("2026-03-01T10:00:00Z"))
        );
        // A fire time with milliseconds (a continuation's) is in the period that began before
        // it, never in the one that begins at its next whole second.
        assert_eq!(
            period_fire(&a, t("2026-03-01T10:00:09.500Z")),
            Some(t("2026-03-01T10:00:00Z"))
        );
        assert_eq!(
            period_fire(&a, t("2026-03-01T10:00:10.000Z")),
            Some(t("2026-03-01T10:00:10Z"))
        );
        let mut later = every_10s("b");
        later.effective_from = Some(t("2026-03-02T00:00:00Z"));
        assert_eq!(period_fire(&later, t("2026-03-01T10:00:07Z")), None);
        let mut expired = every_10s("c");
        expired.expires_at = Some(t("2026-03-01T09:00:05Z"));
        assert_eq!(
            period_fire(&expired, t("2026-03-01T10:00:07Z")),
            Some(t("2026-03-01T09:00:00Z"))
        );
        assert_eq!(
            period_fire(&JobDef::new("m", "x::y").unwrap(), t(FIRE)),
            None
        );
    }

    #[test]
    fn the_deadline_is_the_wait_else_the_next_fire() {
        let mut b = every_10s("b");
        assert_eq!(wait_deadline(&b, t(FIRE)), t(DEADLINE));
        b.dependency_wait = Some(Duration::from_secs(1800));
        assert_eq!(wait_deadline(&b, t(FIRE)), t("2026-03-01T10:30:00Z"));
        let manual = JobDef::new("m", "x::y").unwrap();
        assert_eq!(wait_deadline(&manual, t(FIRE)), t("2026-03-02T10:00:00Z"));
    }

    #[test]
    fn the_graph_refuses_unknown_names_and_lists_cycles() {
        let (a, b, c) = (n("a"), n("b"), n("c"));
        let (da, db, dc) = (vec![c.clone()], vec![a.clone()], vec![b.clone()]);
        let err = check_graph([(&a, &da[..]), (&b, &db[..]), (&c, &dc[..])], &a).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dependency cycle: a -> c -> b -> a; remove one of these dependencies"
        );
        let dx = [n("x")];
        let err = check_graph([(&a, &dx[..])], &a).unwrap_err();
        assert!(
            err.to_string()
                .contains("job a depends on x, which does not exist")
        );
        let none: Vec<JobName> = Vec::new();
        check_graph([(&a, &none[..]), (&b, &db[..]), (&c, &dc[..])], &c).unwrap();
        // A diamond is no cycle.
        let d = n("d");
        let dd = [b.clone(), c.clone()];
        let dc2 = [a.clone()];
        check_graph(
            [
                (&a, &none[..]),
                (&b, &db[..]),
                (&c, &dc2[..]),
                (&d, &dd[..]),
            ],
            &d,
        )
        .unwrap();
    }

    #[test]
    fn dependents_are_named_when_deleting() {
        let a = every_10s("a");
        let mut b = every_10s("b");
        b.dependencies = vec![n("a")];
        assert_eq!(dependents_of([&a, &b], &n("a")), vec![n("b")]);
        let e = depended_on(&n("a"), &[n("b")], "removed");
        assert!(
            e.to_string()
                .contains("job a cannot be removed: b depends on it")
        );
    }
}
