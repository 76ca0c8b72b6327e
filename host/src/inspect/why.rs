//! `takt why JOB [--at T]`: the decision trail of one job. A conclusion line first, then the
//! evidence.
//!
//! Without an instant: the next fire (in the job's zone and UTC), then every reason it might
//! not run that the store can show today — each a [`Check`] in [`CHECKS`], a pure function
//! over the [`Facts`] read once. A new rule that can stop a fire (the workflow rules: pause,
//! group hold, dependencies) adds its data to `Facts` and its check to the list; a reason
//! whose data the store does not record is not shown (never guessed).
//!
//! With an instant: what the schedule says about it (a fire or not, the nearest fires, a DST
//! gap, shift or fold, outside validity, before the job existed) and what became of that
//! fire (its run and attempts, its skip and reason, a misfire record covering it, or no
//! record — with the downtime the node lives show).

use jiff::civil::DateTime;
use jiff::tz::AmbiguousOffset;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use takt_core::group::GroupStatus;
use takt_core::job::{JobDef, JobName, Validity};
use takt_core::node::{NodeSession, NodeStatus};
use takt_core::pause::{Pause, PauseTarget};
use takt_core::policy::MisfireAction;
use takt_core::run::{Run, RunState};
use takt_core::schedule::{GapPolicy, Occurrence, OccurrenceKind};
use takt_core::store::{RunFilter, Store, serves};

use super::{
    AttemptView, HEARTBEAT_SLACK, InspectError, covered_until, defined_since, downtime_at, local,
    utc, zone_of,
};

/// How far ahead the DST check looks.
const DST_LOOKAHEAD_DAYS: i64 = 400;
/// The most occurrences the DST check walks.
const DST_LOOKAHEAD_FIRES: usize = 5_000;
/// The pending runs counted for the capacity check.
const PENDING_COUNTED: usize = 10_000;

/// The instant asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// An instant (RFC 3339 with `Z` or an offset).
    Instant(Timestamp),
    /// A wall-clock time in the job's zone (it may not exist, or occur twice).
    Local(DateTime),
}

/// A fire time in the job's zone and in UTC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FireView {
    /// UTC.
    pub utc: String,
    /// The job's zone, with its offset.
    pub local: String,
}

/// A reason the next fire might not run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// A stable code: `disabled`, `paused`, `not_yet_effective`, `expired`, `no_schedule`,
    /// `schedule_ended`, `no_live_node`, `node_paused`,
    /// `no_node_for_tag`, `capacity_full`, `handler_unresolved`, `waiting_for_dependency`,
    /// `dependency_skipped`, `dependencies`, `overdue_misfire`,
    /// `dst_gap_ahead`, `dst_fold_ahead`, `group_held`, `group_full`.
    pub code: &'static str,
    /// Whether it stops the fire (else it may delay, skip or change it).
    pub blocks: bool,
    /// The sentence, with its evidence.
    pub text: String,
}

/// What `why` reads once; the checks are pure functions over it.
#[derive(Debug)]
pub struct Facts<'a> {
    /// The job.
    pub job: &'a JobDef,
    /// The present.
    pub now: Timestamp,
    /// Every registered node.
    pub nodes: &'a [NodeStatus],
    /// Pending runs of any job (queued and waiting retries), counted up to a bound.
    pub pending: usize,
    /// The job's latest runs, newest first.
    pub recent: &'a [Run],
    /// The pause holding the job (its own, else its group's), if any.
    pub paused: Option<&'a (PauseTarget, Pause)>,
    /// Paused nodes, by id (they claim nothing).
    pub paused_nodes: &'a [String],
    /// The job's group as the store shows it now, if it has one.
    pub group: Option<&'a GroupStatus>,
}

/// A check: the reasons it finds in the facts.
pub type Check = fn(&Facts<'_>) -> Vec<Reason>;

/// Every check, in the order reasons are shown. Where the workflow rules plug in.
pub const CHECKS: &[Check] = &[
    disabled,
    paused,
    group,
    validity,
    no_schedule,
    nodes,
    handler,
    dependencies,
    overdue,
    dst_ahead,
];

/// The answer.
#[derive(Clone, Debug, Serialize)]
pub struct WhyReport {
    /// The job.
    pub job: String,
    /// The conclusion, one line.
    pub conclusion: String,
    /// The schedule in words (`None`: triggered only).
    pub schedule: Option<String>,
    /// The job's zone.
    pub zone: String,
    /// The next fire as the store has it.
    pub next_fire: Option<FireView>,
    /// Reasons it might not run (without an instant).
    pub reasons: Vec<Reason>,
    /// About the instant asked (with one).
    pub at: Option<AtReport>,
    /// Further evidence, one sentence each.
    pub evidence: Vec<String>,
}

/// What the schedule and the store say about one instant.
#[derive(Clone, Debug, Serialize)]
pub struct AtReport {
    /// The instant examined (UTC; for a wall-clock time in a gap, where the schedule put it).
    pub instant: String,
    /// The same in the job's zone.
    pub local: String,
    /// Whether the schedule fires then.
    pub fires: bool,
    /// What the schedule says, one sentence each.
    pub schedule: Vec<String>,
    /// The nearest fire before.
    pub previous_fire: Option<FireView>,
    /// The nearest fire after.
    pub next_fire: Option<FireView>,
    /// The run recorded for that fire time.
    pub run: Option<RunView>,
    /// Its attempts.
    pub attempts: Vec<AttemptView>,
    /// What the store says happened, one sentence.
    pub record: String,
}

/// A run as `why` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct RunView {
    /// The run's id.
    pub id: i64,
    /// Its fire time (UTC).
    pub fire_time: String,
    /// Its state.
    pub state: &'static str,
    /// Its latest attempt.
    pub attempt: u32,
    /// Why it was skipped.
    pub skip_reason: Option<&'static str>,
    /// Its latest error (or a skip's detail).
    pub error: Option<String>,
}

fn view(t: Timestamp, job: &JobDef) -> FireView {
    FireView {
        utc: utc(t),
        local: local(t, &zone_of(job)),
    }
}

/// Answers `why` for `name` at `now`, about the next fire or about `at`.
pub async fn why<S: Store>(
    store: &S,
    name: &JobName,
    at: Option<At>,
    now: Timestamp,
) -> Result<WhyReport, InspectError> {
    let job = store.job_get_by_name(name).await?.ok_or_else(|| {
        InspectError::Invalid(format!("no job named \"{name}\"; see takt job list"))
    })?;
    let id = job
        .id
        .ok_or_else(|| InspectError::Invalid(format!("job {name} has no id")))?;
    let zone = zone_of(&job);
    let mut report = WhyReport {
        job: job.name.to_string(),
        conclusion: String::new(),
        schedule: job.schedule.as_ref().map(|s| s.describe()),
        zone: zone.name().to_string(),
        next_fire: job.next_fire.map(|t| view(t, &job)),
        reasons: Vec::new(),
        at: None,
        evidence: Vec::new(),
    };
    if let Some(at) = at {
        let a = at_report(store, &job, at, now).await?;
        report.conclusion = a.record.clone();
        report.at = Some(a);
        return Ok(report);
    }
    let nodes = store.node_list().await?;
    let pending = store
        .run_list(&RunFilter {
            job: None,
            state: Some(RunState::Pending),
            limit: PENDING_COUNTED,
            ..RunFilter::default()
        })
        .await?
        .len();
    let recent = store
        .run_list(&RunFilter {
            job: Some(id),
            state: None,
            limit: 20,
            ..RunFilter::default()
        })
        .await?;
    let paused = store.job_paused(id).await?;
    let paused_nodes: Vec<String> = store
        .pause_list()
        .await?
        .into_iter()
        .filter_map(|(t, _)| match t {
            PauseTarget::Node(n) => Some(n.0),
            _ => None,
        })
        .collect();
    let group = match &job.group {
        Some(g) => Some(store.group_status(g, now).await?),
        None => None,
    };
    let facts = Facts {
        job: &job,
        now,
        nodes: &nodes,
        pending,
        recent: &recent,
        paused: paused.as_ref(),
        paused_nodes: &paused_nodes,
        group: group.as_ref(),
    };
    for check in CHECKS {
        report.reasons.extend(check(&facts));
    }
    if let Some(r) = recent.first() {
        report.evidence.push(format!(
            "latest run: {} at {} — {}{}",
            r.id.map_or(0, |i| i.0),
            r.fire_time,
            r.state.name(),
            r.skip_reason
                .map(|s| format!(" ({})", s.name()))
                .unwrap_or_default()
        ));
    } else {
        report.evidence.push("no run recorded yet".to_string());
    }
    report.evidence.push(
        "not recorded by this takt, so not shown: the enable/disable history and the plugins \
         each node has loaded (a node reports its plugin only through the builds its runs \
         record)"
            .to_string(),
    );
    report.conclusion = match report.reasons.iter().find(|r| r.blocks) {
        Some(r) => format!("{} will not fire: {}", job.name, r.text),
        None => match job.next_fire {
            Some(t) => {
                let v = view(t, &job);
                let rest = match report.reasons.len() {
                    0 => String::new(),
                    1 => "; 1 thing may change that, below".to_string(),
                    n => format!("; {n} things may change that, below"),
                };
                if t <= now {
                    format!(
                        "{} was due at {} ({} UTC) and has not been claimed{rest}",
                        job.name, v.local, v.utc
                    )
                } else {
                    format!(
                        "{} fires next at {} ({} UTC){rest}",
                        job.name, v.local, v.utc
                    )
                }
            }
            None => format!("{} has no next fire", job.name),
        },
    };
    Ok(report)
}

// ---- the checks -----------------------------------------------------------------------------

/// A job with dependencies: a run waiting for them now (it delays), the latest fire skipped
/// because one did not succeed, else the rule itself (each fire waits for them).
fn dependencies(f: &Facts<'_>) -> Vec<Reason> {
    if f.job.dependencies.is_empty() {
        return Vec::new();
    }
    let names: Vec<&str> = f.job.dependencies.iter().map(JobName::as_str).collect();
    let mut out: Vec<Reason> = f
        .recent
        .iter()
        .filter_map(|r| {
            Some(Reason {
                code: "waiting_for_dependency",
                blocks: false,
                text: format!(
                    "run {} (fire {}) is {}; takt cancel {0} ends the wait",
                    r.id?,
                    r.fire_time,
                    r.waiting_for()?
                ),
            })
        })
        .collect();
    if out.is_empty() {
        let wait = f
            .job
            .dependency_wait
            .map_or("until its next fire".to_string(), |d| {
                format!(
                    "for up to {}",
                    takt_core::schedule::format_duration(d.as_secs())
                )
            });
        match f.recent.first() {
            Some(r) if r.skip_reason == Some(takt_core::run::SkipReason::Dependency) => {
                out.push(Reason {
                    code: "dependency_skipped",
                    blocks: false,
                    text: format!(
                        "its latest fire ({}) was skipped: {}; the next fire waits again for \
                         {}",
                        r.fire_time,
                        r.error.as_deref().unwrap_or("a dependency did not succeed"),
                        names.join(", ")
                    ),
                });
            }
            _ => out.push(Reason {
                code: "dependencies",
                blocks: false,
                text: format!(
                    "each fire waits {wait} for the runs of {} for the same period to succeed, \
                     and is skipped if one does not",
                    names.join(", ")
                ),
            }),
        }
    }
    out
}

fn disabled(f: &Facts<'_>) -> Vec<Reason> {
    if f.job.enabled {
        return Vec::new();
    }
    vec![Reason {
        code: "disabled",
        blocks: true,
        text: match f.job.updated_at {
            Some(t) => format!(
                "it is disabled (last changed {t}); takt job enable {}",
                f.job.name
            ),
            None => format!("it is disabled; takt job enable {}", f.job.name),
        },
    }]
}

fn paused(f: &Facts<'_>) -> Vec<Reason> {
    let Some((target, p)) = f.paused else {
        return Vec::new();
    };
    let text = match target {
        PauseTarget::Group(g) => format!(
            "its group {g} is {p}; takt group resume {g} (its misfire policy decides what the \
             paused time runs, the rest is recorded skipped, reason paused)"
        ),
        _ => format!(
            "it is {p}; takt job resume {} (its misfire policy decides what the paused time \
             runs, the rest is recorded skipped, reason paused)",
            f.job.name
        ),
    };
    vec![Reason {
        code: "paused",
        blocks: true,
        text,
    }]
}

/// A group held by a member's failure skips the job's next fire; a full group delays it.
fn group(f: &Facts<'_>) -> Vec<Reason> {
    let Some(g) = f.group else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(h) = &g.hold {
        out.push(Reason {
            code: "group_held",
            blocks: true,
            text: format!(
                "{h}, so its next fires are recorded skipped, reason group; {}",
                h.release_hint()
            ),
        });
    }
    if let Some(max) = g.def.max_running
        && g.running >= max
    {
        out.push(Reason {
            code: "group_full",
            blocks: false,
            text: format!(
                "its group {} has {} of {max} runs running (max_running), so a fire waits as a \
                 pending run until one ends; takt group set {} --max-running N raises it",
                g.name, g.running, g.name
            ),
        });
    }
    out
}

fn validity(f: &Facts<'_>) -> Vec<Reason> {
    match f.job.validity_at(f.now) {
        Validity::NotYet => vec![Reason {
            code: "not_yet_effective",
            blocks: false,
            text: format!(
                "it is not effective before {} (effective_from): nothing fires before then",
                f.job
                    .effective_from
                    .map_or_else(String::new, |t| t.to_string())
            ),
        }],
        Validity::Expired => vec![Reason {
            code: "expired",
            blocks: true,
            text: format!(
                "it expired at {} (expires_at); takt job update {} --expires-at \"\" lifts it",
                f.job.expires_at.map_or_else(String::new, |t| t.to_string()),
                f.job.name
            ),
        }],
        Validity::Inside => Vec::new(),
    }
}

fn no_schedule(f: &Facts<'_>) -> Vec<Reason> {
    if f.paused.is_some() || f.job.validity_at(f.now) == Validity::Expired {
        // A pause holds the next fire aside, and an expiry ends it: said by their checks.
        return Vec::new();
    }
    match (&f.job.schedule, f.job.next_fire) {
        (None, None) => vec![Reason {
            code: "no_schedule",
            blocks: true,
            text: format!(
                "it has no schedule and runs only when triggered (takt job trigger {})",
                f.job.name
            ),
        }],
        (Some(_), None) => vec![Reason {
            code: "schedule_ended",
            blocks: true,
            text: "its schedule has no further fire".to_string(),
        }],
        _ => Vec::new(),
    }
}

fn nodes(f: &Facts<'_>) -> Vec<Reason> {
    let live: Vec<&NodeStatus> = f
        .nodes
        .iter()
        .filter(|n| n.is_live(f.now, HEARTBEAT_SLACK))
        .collect();
    if live.is_empty() {
        let last = f
            .nodes
            .iter()
            .filter_map(|n| n.stopped_at.or(n.heartbeat_at).map(|t| (t, n)))
            .max_by_key(|(t, _)| *t);
        return vec![Reason {
            code: "no_live_node",
            blocks: true,
            text: match last {
                Some((t, n)) => format!(
                    "no node is running: the last sign of life was node {} at {t} ({}); start \
                     takt run",
                    n.info.id,
                    if n.stopped_at.is_some() {
                        "a clean stop"
                    } else {
                        "its last heartbeat"
                    }
                ),
                None => "no node has ever registered on this database; start takt run".into(),
            },
        }];
    }
    let paused: Vec<&str> = live
        .iter()
        .map(|n| n.info.id.0.as_str())
        .filter(|id| f.paused_nodes.iter().any(|p| p == id))
        .collect();
    if !paused.is_empty() && paused.len() == live.len() {
        return vec![Reason {
            code: "node_paused",
            blocks: true,
            text: format!(
                "every live node is paused ({}), so none claims; takt node resume ID",
                paused.join(", ")
            ),
        }];
    }
    let live: Vec<&NodeStatus> = live
        .into_iter()
        .filter(|n| !paused.contains(&n.info.id.0.as_str()))
        .collect();
    let serving: Vec<&NodeStatus> = live
        .iter()
        .copied()
        .filter(|n| serves(&n.info.tags, f.job.node_tag.as_deref()))
        .collect();
    if serving.is_empty() {
        let tag = f.job.node_tag.as_deref().unwrap_or_default();
        let have: Vec<String> = live
            .iter()
            .map(|n| format!("{} [{}]", n.info.id, n.info.tags.join(",")))
            .collect();
        return vec![Reason {
            code: "no_node_for_tag",
            blocks: true,
            text: format!(
                "no live node serves its node tag \"{tag}\" (live nodes: {}); add the tag to a \
                 node's tags in takt.toml",
                have.join(", ")
            ),
        }];
    }
    let capacity: usize = serving.iter().map(|n| n.info.capacity).sum();
    let running: u64 = serving.iter().map(|n| n.running).sum();
    if running >= capacity as u64 {
        return vec![Reason {
            code: "capacity_full",
            blocks: false,
            text: format!(
                "capacity is full: {running} runs on {capacity} slots of the nodes serving it, \
                 {} runs pending; the fire waits for a free slot",
                f.pending
            ),
        }];
    }
    Vec::new()
}

fn handler(f: &Facts<'_>) -> Vec<Reason> {
    let unresolved = f.recent.iter().find(|r| {
        r.plugin.is_none()
            && r.error.as_deref().is_some_and(|e| {
                e.contains("is loaded (handler type") || e.contains("has no handler")
            })
    });
    match unresolved {
        // Only when nothing served it since.
        Some(r)
            if f.recent
                .iter()
                .take_while(|x| x.id != r.id)
                .all(|x| x.plugin.is_none()) =>
        {
            vec![Reason {
                code: "handler_unresolved",
                blocks: false,
                text: format!(
                    "handler {} was not provided by any loaded plugin when run {} ran on {}: {}",
                    f.job.handler_type,
                    r.id.map_or(0, |i| i.0),
                    r.node_id.as_ref().map_or("?", |n| n.0.as_str()),
                    r.error.as_deref().unwrap_or_default()
                ),
            }]
        }
        _ => Vec::new(),
    }
}

fn overdue(f: &Facts<'_>) -> Vec<Reason> {
    let Some(next) = f.job.next_fire else {
        return Vec::new();
    };
    let late = SignedDuration::try_from(f.job.misfire.lateness).unwrap_or(SignedDuration::MAX);
    if !f.job.enabled || f.now.duration_since(next) <= late {
        return Vec::new();
    }
    let what = match f.job.misfire.action {
        MisfireAction::Skip => "every missed fire is recorded as skipped (misfire) and none runs",
        MisfireAction::FireOnceNow => "it runs once for the outage and records the rest as skipped",
        MisfireAction::FireAll { .. } => "it runs the missed fires up to its limit, oldest first",
    };
    vec![Reason {
        code: "overdue_misfire",
        blocks: false,
        text: format!(
            "it has been due since {next} and no node claimed it; when a node serves it again \
             its misfire policy {} applies: {what}",
            f.job.misfire
        ),
    }]
}

fn dst_ahead(f: &Facts<'_>) -> Vec<Reason> {
    let Some(s) = &f.job.schedule else {
        return Vec::new();
    };
    let Some(start) = f.job.next_fire.or(Some(f.now)) else {
        return Vec::new();
    };
    let until = start
        .checked_add(SignedDuration::from_hours(24 * DST_LOOKAHEAD_DAYS))
        .unwrap_or(start);
    let tz = s.zone().time_zone().clone();
    let from = start
        .checked_sub(SignedDuration::from_secs(1))
        .unwrap_or(start);
    let mut out = Vec::new();
    let (mut gap, mut fold) = (false, false);
    for o in s.iter_after(from).take(DST_LOOKAHEAD_FIRES) {
        if o.at > until || (gap && fold) {
            break;
        }
        match o.kind {
            OccurrenceKind::Skipped(_) if !gap => {
                gap = true;
                out.push(Reason {
                    code: "dst_gap_ahead",
                    blocks: false,
                    text: format!(
                        "{} does not exist in {} (a DST gap): that fire is skipped (dst-gap \
                         skip) and recorded as skipped with reason dst_gap",
                        o.nominal.to_string().replace('T', " "),
                        s.zone()
                    ),
                });
            }
            OccurrenceKind::FireShifted if !gap => {
                gap = true;
                out.push(Reason {
                    code: "dst_gap_ahead",
                    blocks: false,
                    text: format!(
                        "{} does not exist in {} (a DST gap): that fire is shifted to {}",
                        o.nominal.to_string().replace('T', " "),
                        s.zone(),
                        local(o.at, s.zone())
                    ),
                });
            }
            OccurrenceKind::Fire if !fold => {
                if let AmbiguousOffset::Fold { .. } =
                    tz.to_ambiguous_timestamp(o.nominal.to_jiff()).offset()
                {
                    fold = true;
                    out.push(Reason {
                        code: "dst_fold_ahead",
                        blocks: false,
                        text: format!(
                            "{} occurs twice in {} (a DST fold): the schedule's fold policy \
                             decides whether it fires once or twice (takt schedule next shows it)",
                            o.nominal.to_string().replace('T', " "),
                            s.zone()
                        ),
                    });
                }
            }
            _ => {}
        }
    }
    out
}

// ---- one instant ----------------------------------------------------------------------------

async fn at_report<S: Store>(
    store: &S,
    job: &JobDef,
    at: At,
    now: Timestamp,
) -> Result<AtReport, InspectError> {
    let zone = zone_of(job);
    let tz = zone.time_zone().clone();
    let mut said = Vec::new();
    // The instant, and for a wall-clock time what the zone makes of it.
    // `earliest`: where the schedule's occurrence for the time can start (before a gap's end).
    let (t, nominal, earliest) = match at {
        At::Instant(t) => (t, None, t),
        At::Local(dt) => {
            let amb = tz.to_ambiguous_timestamp(dt);
            let mut earliest = None;
            match amb.offset() {
                AmbiguousOffset::Unambiguous { .. } => {}
                AmbiguousOffset::Gap { before, after } => {
                    earliest = after.to_timestamp(dt).ok();
                    said.push(format!(
                        "{} does not exist in {zone}: the clocks jump from {} to {} (a DST gap)",
                        dt.to_string().replace('T', " "),
                        before,
                        after
                    ));
                }
                AmbiguousOffset::Fold { before, after } => said.push(format!(
                    "{} occurs twice in {zone} (a DST fold, at {before} and then at {after}); \
                     the first is examined",
                    dt.to_string().replace('T', " ")
                )),
            }
            let t = amb
                .compatible()
                .map_err(|e| InspectError::Invalid(format!("--at {dt} in {zone}: {e}")))?;
            (t, Some(dt), earliest.unwrap_or(t))
        }
    };
    let schedule = job.schedule.as_ref();
    let mut occ: Option<Occurrence> = None;
    if let Some(s) = schedule {
        let from = t.checked_sub(SignedDuration::from_secs(1)).unwrap_or(t);
        let near: Vec<Occurrence> = s
            .iter_after(from)
            .take_while(|o| o.at == t)
            .take(8)
            .collect();
        occ = match nominal {
            Some(n) => near
                .iter()
                .find(|o| o.nominal.to_jiff() == n)
                .or(near.first())
                .copied(),
            None => near.iter().find(|o| o.fires()).or(near.first()).copied(),
        };
        // A wall-clock time in a gap: the schedule's occurrence for it sits at the gap's end.
        if occ.is_none()
            && let Some(n) = nominal
        {
            let from = earliest
                .checked_sub(SignedDuration::from_secs(1))
                .unwrap_or(earliest);
            occ = s
                .iter_after(from)
                .take(8)
                .find(|o| o.nominal.to_jiff() == n && o.kind != OccurrenceKind::Fire);
        }
    }
    let t = occ.map_or(t, |o| o.at);
    let fires = occ.is_some_and(|o| o.fires());
    match (schedule, occ) {
        (None, _) => said.push("the job has no schedule: it fires only when triggered".into()),
        (Some(s), None) => said.push(format!(
            "not a fire time of the schedule ({})",
            s.describe()
        )),
        (Some(s), Some(o)) => said.push(match o.kind {
            OccurrenceKind::Fire => format!("a fire time of the schedule ({})", s.describe()),
            OccurrenceKind::FireShifted => format!(
                "a fire time shifted by DST: {} does not exist in {}, so it fires at {} \
                 (dst-gap shift)",
                o.nominal.to_string().replace('T', " "),
                s.zone(),
                local(o.at, s.zone())
            ),
            OccurrenceKind::Skipped(_) => format!(
                "a fire time lost to DST: {} does not exist in {} and the schedule skips gaps \
                 (dst-gap {}): no fire, a skipped record with reason dst_gap",
                o.nominal.to_string().replace('T', " "),
                s.zone(),
                match s.dst().gap {
                    GapPolicy::Skip => "skip",
                    GapPolicy::Shift => "shift",
                }
            ),
        }),
    }
    let (prev, next) = match schedule {
        // The nearest firing occurrences on either side (skips passed over, a few at most).
        Some(s) => (
            std::iter::successors(s.prev_before(t), |o| s.prev_before(o.at))
                .take(8)
                .find(Occurrence::fires)
                .map(|o| view(o.at, job)),
            s.iter_after(t)
                .take(8)
                .find(Occurrence::fires)
                .map(|o| view(o.at, job)),
        ),
        None => (None, None),
    };
    if super::outside_validity(job, t) {
        said.push(format!(
            "outside the job's validity ({} to {})",
            job.effective_from.map_or("always".to_string(), utc),
            job.expires_at.map_or("never".to_string(), utc)
        ));
    }
    let since = defined_since(job);
    if let Some(s) = since
        && t < s
    {
        said.push(if job.version <= 1 {
            format!("before the job existed: it was created at {s}")
        } else {
            format!(
                "before the job's last change at {s} (version {}): earlier definitions are \
                 not recorded, so the schedule shown may not be the one in force then",
                job.version
            )
        });
    }

    // What happened.
    let id = job
        .id
        .ok_or_else(|| InspectError::Invalid(format!("job {} has no id", job.name)))?;
    let end = t.checked_add(SignedDuration::from_secs(1)).unwrap_or(t);
    let run = store
        .runs_between(Some(id), t, end)
        .await?
        .into_iter()
        .next();
    let sessions: Vec<NodeSession> = store
        .node_sessions(
            t.checked_sub(SignedDuration::from_hours(24 * 30))
                .unwrap_or(t),
            t.checked_add(SignedDuration::from_hours(24 * 30))
                .unwrap_or(t),
        )
        .await?;
    let down = downtime_at(&sessions, t);
    let mut attempts = Vec::new();
    let record = if let Some(r) = &run {
        let rid =
            r.id.ok_or_else(|| InspectError::Invalid("a run without an id".into()))?;
        attempts = store.run_attempts(rid).await?;
        match (r.state, r.skip_reason) {
            (RunState::Skipped, Some(reason)) => {
                let mut s = format!("the fire at {t} was skipped: {}", reason.name());
                if let Some(e) = &r.error {
                    s.push_str(&format!(" ({e})"));
                }
                if reason == takt_core::run::SkipReason::Misfire
                    && let Some(d) = &down
                {
                    s.push_str(&format!("; {}, misfire policy {}", d.text, job.misfire));
                }
                s
            }
            (state, _) => {
                let last = attempts.last();
                let dup = super::duplicate_execution(&attempts, now);
                let mut s = format!(
                    "the fire at {t} ran: run {} is {}{}",
                    rid.0,
                    state.name(),
                    match last {
                        Some(a) => format!(
                            " after {} attempt{} (last on node {})",
                            attempts.len(),
                            if attempts.len() == 1 { "" } else { "s" },
                            a.node_id
                        ),
                        None => String::new(),
                    }
                );
                if let Some(d) = dup {
                    s.push_str(&format!("; executed more than once: {d}"));
                }
                s
            }
        }
    } else if t > now {
        format!("the fire at {t} is in the future: nothing has happened yet")
    } else if !fires && occ.is_none_or(|o| o.fires()) {
        format!("no fire at {t}: the schedule does not fire then, so no record is expected")
    } else {
        // A misfire record standing for a range of occurrences?
        let back = down
            .as_ref()
            .and_then(|d| d.from.as_deref())
            .and_then(|f| f.parse::<Timestamp>().ok())
            .unwrap_or_else(|| t.checked_sub(SignedDuration::from_hours(24)).unwrap_or(t));
        let cover = store
            .runs_between(Some(id), back.min(t), t)
            .await?
            .into_iter()
            .rev()
            .find(|r| covered_until(r) >= t);
        match (cover, &down) {
            (Some(c), d) => format!(
                "the fire at {t} was skipped: misfire, recorded once for a range by run {} ({}){}",
                c.id.map_or(0, |i| i.0),
                c.error.as_deref().unwrap_or_default(),
                d.as_ref()
                    .map(|d| format!("; {}, misfire policy {}", d.text, job.misfire))
                    .unwrap_or_default()
            ),
            (None, Some(d)) => format!(
                "no record of the fire at {t}: {}; misfire policy {}",
                d.text, job.misfire
            ),
            (None, None) if sessions.is_empty() => {
                format!("no record of the fire at {t}, and no node life is recorded around it")
            }
            (None, None) => format!(
                "no record of the fire at {t} although a node was up: a gap (takt audit lists them)"
            ),
        }
    };
    Ok(AtReport {
        instant: utc(t),
        local: local(t, &zone),
        fires,
        schedule: said,
        previous_fire: prev,
        next_fire: next,
        run: run.map(|r| RunView {
            id: r.id.map_or(0, |i| i.0),
            fire_time: utc(r.fire_time),
            state: r.state.name(),
            attempt: r.attempt,
            skip_reason: r.skip_reason.map(|s| s.name()),
            error: r.error,
        }),
        attempts: attempts.iter().map(AttemptView::from).collect(),
        record,
    })
}
