//! `takt job add|list|show|update|enable|disable|trigger|pause|resume|remove`: job definitions in the
//! store. Every subcommand takes `--json` and then prints one JSON document: the job (as
//! `job show --json` does) after the change, or the list.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use takt_core::Timestamp;
use takt_core::job::{Isolation, JobDef, JobId, JobName, Priority, Validity};
use takt_core::pause::{Pause, PauseTarget};
use takt_core::policy::{Backoff, MisfirePolicy, OverlapPolicy};
use takt_core::schedule::{Rule, Schedule, Zone, format_duration};
use takt_core::store::{JobQuery, RunFilter, Store};

use super::args;
use super::db::{DbArg, block_on};
use super::pause::{PauseOpts, pause_json};
use super::table::Table;
use crate::plugins::parse_handler_type;
use crate::spec::{CalendarSpec, ScheduleSpec, parse_instant};
use crate::store::AnyStore;

#[derive(Debug, Subcommand)]
pub(super) enum JobCmd {
    /// Add a job. The handler type is only checked for syntax here; whether a plugin provides
    /// it is checked when the job runs.
    Add(AddArgs),
    /// List the jobs, by name. Read and printed a page at a time, so a store of a million
    /// jobs starts printing at once and the command's memory stays flat.
    List {
        /// Print at most this many jobs (the first by name).
        #[arg(long, value_name = "N", allow_hyphen_values = true)]
        limit: Option<String>,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Show every field of a job, its schedule in words and its next 5 fire times.
    Show {
        /// The job's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Change a job: only the options given change, the others keep their values. A changed
    /// schedule recomputes the next fire.
    Update(UpdateArgs),
    /// Enable a job.
    Enable {
        /// The job's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Disable a job: it fires no more until enabled.
    Disable {
        /// The job's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Make a job due now: its next fire is set to the current second, so a running
    /// `takt run` on the same database claims it on its next poll.
    Trigger {
        /// The job's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Fill in the fires of a job's schedule in [--from, --to) that have no run yet: each
    /// becomes a queued run (trigger backfill) that a running `takt run` starts one at a
    /// time, in fire-time order, never beside another run of the job.
    Backfill {
        /// The job's name.
        name: String,
        /// The start of the range (included): an instant or a UTC wall-clock time.
        #[arg(long)]
        from: String,
        /// The end of the range (excluded).
        #[arg(long)]
        to: String,
        /// The most fires to create; a range with more is refused (not truncated).
        #[arg(long, default_value = "10000")]
        max: String,
        /// After creating them, wait until every backfilled run of the range has ended,
        /// showing a progress bar (the default when stderr is a terminal).
        #[arg(long, conflicts_with = "no_wait")]
        wait: bool,
        /// Return once the runs are created, even on a terminal.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Pause a job (distinct from disable): fires that fall due are recorded skipped
    /// (reason paused) when it is resumed, per its misfire policy.
    Pause {
        /// The job's name.
        name: String,
        #[command(flatten)]
        opts: PauseOpts,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        out: JsonArg,
    },
    /// End a job's pause: its misfire policy decides what of the paused time runs; the rest
    /// is recorded skipped with reason paused.
    Resume {
        /// The job's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Remove a job with its runs and their logs (a job with runs needs --yes).
    Remove {
        /// The job's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        /// Remove even when the job has recorded runs (they are deleted with it).
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        out: JsonArg,
    },
}

/// `--json`, the same on every job subcommand.
#[derive(Debug, Args)]
pub(super) struct JsonArg {
    /// Print one JSON document instead of text: the job as `job show --json` prints it (after
    /// the change; `remove`: as it was), or for `list` an array of them.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct AddArgs {
    /// The unique job name.
    #[arg(long)]
    name: String,
    /// What runs: `plugin::handler` (e.g. `examples::hello`) or `Namespace.Class, Assembly`.
    #[arg(long, value_name = "TYPE")]
    handler: String,
    #[command(flatten)]
    rule: AddRule,
    /// With --at: accept an instant in the past; the job is then due at once, and the loop
    /// treats the fire as late per the job's misfire policy (skip: recorded skipped as a
    /// misfire; fire-once: runs now).
    #[arg(long)]
    allow_past: bool,
    #[command(flatten)]
    opts: AddOpts,
    /// Add the job disabled.
    #[arg(long)]
    disabled: bool,
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    out: JsonArg,
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct AddRule {
    /// A cron expression: `*/5 * * * *`, `0 30 9 * * MON-FRI`, `@daily`.
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,
    /// A calendar schedule: `weekly mon-fri every 1h between 06:00-22:30`.
    #[arg(long, value_name = "SPEC")]
    calendar: Option<String>,
    /// A fixed interval of elapsed time: `90s`, `5m`, `1h30m`.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    every: Option<String>,
    /// Once, at a future instant (`2026-12-01T06:00:00Z`) or wall-clock time in --tz.
    #[arg(long, value_name = "INSTANT")]
    at: Option<String>,
    /// No schedule: the job runs only when triggered.
    #[arg(long)]
    manual: bool,
}

/// The options of `job add`; the help shows what a job gets when one is not given.
#[derive(Debug, Args)]
struct AddOpts {
    /// The handler's parameters as a JSON object or array [default: {}].
    #[arg(long, value_name = "JSON")]
    params: Option<String>,
    /// IANA time zone the schedule is read in [default: UTC].
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// How long an attempt may run: `30s`, `5m`, `1h` [default: the handler's, else no
    /// limit].
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    timeout: Option<String>,
    /// Retries after a failed attempt [default: 0].
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    retries: Option<String>,
    /// Waits before the retries: `10s,30s,60s`, or `exp:1s..5m x2 jitter 0.2` for exponential
    /// backoff [default: 10s,30s,60s].
    #[arg(long, value_name = "DELAYS", allow_hyphen_values = true)]
    retry_delays: Option<String>,
    /// Missed fires: skip, fire-once, or fire-all:N, each optionally @LATENESS [default:
    /// skip].
    #[arg(long, value_name = "POLICY")]
    misfire: Option<String>,
    /// Fires while a run is going: skip, queue-one, allow, cancel-running [default: skip].
    #[arg(long, value_name = "POLICY")]
    overlap: Option<String>,
    /// Order among runs due together, 0 (first) to 999 [default: 500].
    #[arg(long, value_name = "0-999", allow_hyphen_values = true)]
    priority: Option<String>,
    /// The job's group [default: none].
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Jobs whose run for the same period must succeed first, comma-separated (e.g.
    /// extract,load); each must exist [default: none].
    #[arg(long, value_name = "NAMES")]
    depends_on: Option<String>,
    /// How long a fire waits for its dependencies' runs to end, e.g. 30m [default: until the
    /// job's next fire].
    #[arg(long, value_name = "DURATION")]
    dependency_wait: Option<String>,
    /// No fires before this instant: `2026-01-01T00:00:00Z`, or a local `2026-01-01[T06:00]`
    /// read in the schedule's zone [default: none].
    #[arg(long, value_name = "INSTANT")]
    effective_from: Option<String>,
    /// No fires at or after this instant (the job then shows as expired) [default: none].
    #[arg(long, value_name = "INSTANT")]
    expires_at: Option<String>,
    /// Run only on nodes serving this tag (their `tags` in takt.toml) [default: any node].
    #[arg(long, value_name = "TAG")]
    node_tag: Option<String>,
    /// Free text [default: none].
    #[arg(long, value_name = "TEXT")]
    description: Option<String>,
    /// Where the plugin runs: in-process (the host's own process, unless the host isolates
    /// the plugin) or process (a worker child process the host can kill) [default:
    /// in-process].
    #[arg(long, value_name = "in-process|process")]
    isolation: Option<String>,
    /// Jobs that each get one run when a run of this job succeeds (comma-separated names of
    /// existing jobs; continuations, trigger `continuation`).
    #[arg(long, value_name = "JOB,...")]
    on_success: Option<String>,
    /// Jobs that each get one run when a run of this job fails or times out (after its
    /// retries).
    #[arg(long, value_name = "JOB,...")]
    on_failure: Option<String>,
    /// Cron only: how day-of-month and day-of-week combine when both are set [default: or].
    #[arg(long, value_name = "or|and")]
    day_match: Option<String>,
    /// Wall-clock times in a DST gap: shift to the end of the gap, or skip [default: shift].
    #[arg(long, value_name = "shift|skip")]
    dst_gap: Option<String>,
    /// Wall-clock times in a DST fold: auto, once, both [default: auto].
    #[arg(long, value_name = "auto|once|both")]
    dst_fold: Option<String>,
}

#[derive(Debug, Args)]
pub(super) struct UpdateArgs {
    /// The job's name.
    name: String,
    /// A new handler type.
    #[arg(long, value_name = "TYPE")]
    handler: Option<String>,
    #[command(flatten)]
    rule: UpdateRule,
    /// With --at: accept an instant in the past (see `job add --help`).
    #[arg(long)]
    allow_past: bool,
    #[command(flatten)]
    opts: UpdateOpts,
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    out: JsonArg,
}

#[derive(Debug, Args)]
#[group(required = false, multiple = false)]
struct UpdateRule {
    /// A new cron expression.
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,
    /// A new calendar schedule.
    #[arg(long, value_name = "SPEC")]
    calendar: Option<String>,
    /// A new fixed interval.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    every: Option<String>,
    /// A new single fire time (in the future).
    #[arg(long, value_name = "INSTANT")]
    at: Option<String>,
    /// Remove the schedule: the job runs only when triggered.
    #[arg(long)]
    manual: bool,
}

/// The options of `job update`: each replaces the job's value, and only when given, so none
/// has a default.
#[derive(Debug, Args)]
struct UpdateOpts {
    /// New parameters, a JSON object or array (replacing the old ones as a whole).
    #[arg(long, value_name = "JSON")]
    params: Option<String>,
    /// A new IANA time zone for the schedule.
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// A new limit for an attempt: `30s`, `5m`, `1h`.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    timeout: Option<String>,
    /// A new number of retries after a failed attempt.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    retries: Option<String>,
    /// New waits before the retries: `10s,30s,60s`, or `exp:…`.
    #[arg(long, value_name = "DELAYS", allow_hyphen_values = true)]
    retry_delays: Option<String>,
    /// A new misfire policy: skip, fire-once, or fire-all:N[@lateness].
    #[arg(long, value_name = "POLICY")]
    misfire: Option<String>,
    /// A new overlap policy: skip, queue-one, allow, cancel-running.
    #[arg(long, value_name = "POLICY")]
    overlap: Option<String>,
    /// A new priority, 0 (first) to 999.
    #[arg(long, value_name = "0-999", allow_hyphen_values = true)]
    priority: Option<String>,
    /// A new group; "" clears it.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// New dependencies, comma-separated (see `job add --help`); "" clears them.
    #[arg(long, value_name = "NAMES")]
    depends_on: Option<String>,
    /// A new dependency wait, e.g. 30m; "" waits until the job's next fire.
    #[arg(long, value_name = "DURATION")]
    dependency_wait: Option<String>,
    /// A new start of the validity window (see `job add --help`); "" clears it.
    #[arg(long, value_name = "INSTANT")]
    effective_from: Option<String>,
    /// A new end of the validity window; "" clears it.
    #[arg(long, value_name = "INSTANT")]
    expires_at: Option<String>,
    /// A new node tag; "" lets any node run the job.
    #[arg(long, value_name = "TAG")]
    node_tag: Option<String>,
    /// A new description; "" clears it.
    #[arg(long, value_name = "TEXT")]
    description: Option<String>,
    /// A new isolation: in-process or process (see `job add --help`).
    #[arg(long, value_name = "in-process|process")]
    isolation: Option<String>,
    /// New on_success jobs (comma-separated; an empty value clears the list).
    #[arg(long, value_name = "JOB,...")]
    on_success: Option<String>,
    /// New on_failure jobs (comma-separated; an empty value clears the list).
    #[arg(long, value_name = "JOB,...")]
    on_failure: Option<String>,
    /// Cron only: how day-of-month and day-of-week combine from now on (or, and).
    #[arg(long, value_name = "or|and")]
    day_match: Option<String>,
    /// A new DST gap policy: shift or skip.
    #[arg(long, value_name = "shift|skip")]
    dst_gap: Option<String>,
    /// A new DST fold policy: auto, once, both.
    #[arg(long, value_name = "auto|once|both")]
    dst_fold: Option<String>,
}

/// A comma-separated list of job names (empty: none).
fn job_names(flag: &str, text: &str) -> Result<Vec<JobName>> {
    text.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| JobName::new(n).map_err(|e| anyhow!("{flag} \"{n}\": {e}")))
        .collect()
}

/// What `job add` and `job update` were given, whichever the help said about it.
struct JobOpts {
    params: Option<String>,
    tz: Option<String>,
    timeout: Option<String>,
    retries: Option<String>,
    retry_delays: Option<String>,
    misfire: Option<String>,
    overlap: Option<String>,
    priority: Option<String>,
    group: Option<String>,
    depends_on: Option<String>,
    dependency_wait: Option<String>,
    effective_from: Option<String>,
    expires_at: Option<String>,
    node_tag: Option<String>,
    description: Option<String>,
    isolation: Option<String>,
    day_match: Option<String>,
    dst_gap: Option<String>,
    dst_fold: Option<String>,
    on_success: Option<String>,
    on_failure: Option<String>,
}

/// Both option structs carry the same fields; they differ only in their help.
macro_rules! into_job_opts {
    ($from:ty) => {
        impl From<$from> for JobOpts {
            fn from(o: $from) -> JobOpts {
                JobOpts {
                    params: o.params,
                    tz: o.tz,
                    timeout: o.timeout,
                    retries: o.retries,
                    retry_delays: o.retry_delays,
                    misfire: o.misfire,
                    overlap: o.overlap,
                    priority: o.priority,
                    group: o.group,
                    depends_on: o.depends_on,
                    dependency_wait: o.dependency_wait,
                    effective_from: o.effective_from,
                    expires_at: o.expires_at,
                    node_tag: o.node_tag,
                    description: o.description,
                    isolation: o.isolation,
                    day_match: o.day_match,
                    dst_gap: o.dst_gap,
                    dst_fold: o.dst_fold,
                    on_success: o.on_success,
                    on_failure: o.on_failure,
                }
            }
        }
    };
}
into_job_opts!(AddOpts);
into_job_opts!(UpdateOpts);

impl JobOpts {
    fn touches_schedule(&self) -> bool {
        self.tz.is_some()
            || self.day_match.is_some()
            || self.dst_gap.is_some()
            || self.dst_fold.is_some()
    }

    /// Sets the policy fields given on the command line.
    fn apply(&self, job: &mut JobDef) -> Result<()> {
        if let Some(p) = &self.params {
            job.params_json = parse_params(p)?;
        }
        if let Some(t) = &self.timeout {
            job.timeout = Some(Duration::from_secs(args::duration("--timeout", t)?));
        }
        if let Some(n) = &self.retries {
            job.retry.max_retries = args::number("--retries", n, "a count", 0)?;
        }
        if let Some(d) = &self.retry_delays {
            job.retry.backoff = d
                .parse::<Backoff>()
                .map_err(|e| anyhow!("--retry-delays: {e}"))?;
        }
        if let Some(m) = &self.misfire {
            job.misfire = m
                .parse::<MisfirePolicy>()
                .map_err(|e| anyhow!("--misfire: {e}"))?;
        }
        if let Some(o) = &self.overlap {
            job.overlap = o
                .parse::<OverlapPolicy>()
                .map_err(|e| anyhow!("--overlap: {e}"))?;
        }
        if let Some(p) = &self.priority {
            let n = args::number("--priority", p, "a priority", 0)?;
            job.priority = Priority::new(n).map_err(|e| anyhow!("--priority \"{p}\": {e}"))?;
        }
        if let Some(g) = &self.group {
            job.group = (!g.is_empty()).then(|| g.clone());
        }
        if let Some(list) = &self.depends_on {
            job.dependencies = list
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| JobName::new(n).map_err(|e| anyhow!("--depends-on \"{n}\": {e}")))
                .collect::<Result<_>>()?;
        }
        if let Some(w) = &self.dependency_wait {
            job.dependency_wait = if w.trim().is_empty() {
                None
            } else {
                let secs = args::duration("--dependency-wait", w)?;
                if secs == 0 {
                    bail!(
                        "--dependency-wait must be longer than 0s; give \"\" to wait until the \
                         job's next fire"
                    );
                }
                Some(Duration::from_secs(secs))
            };
        }
        // Local times are read in the schedule's zone (UTC for a manual job).
        let zone = job
            .schedule
            .as_ref()
            .map_or_else(Zone::utc, |s| s.zone().clone());
        for (flag, given, slot) in [
            (
                "--effective-from",
                &self.effective_from,
                &mut job.effective_from,
            ),
            ("--expires-at", &self.expires_at, &mut job.expires_at),
        ] {
            if let Some(text) = given {
                *slot = if text.trim().is_empty() {
                    None
                } else {
                    Some(parse_instant(text, &zone).map_err(|e| anyhow!("{flag}: {e}"))?)
                };
            }
        }
        if let Some(t) = &self.node_tag {
            job.node_tag = (!t.is_empty()).then(|| t.clone());
        }
        if let Some(d) = &self.description {
            job.description = (!d.is_empty()).then(|| d.clone());
        }
        if let Some(i) = &self.isolation {
            job.isolation = i
                .parse::<Isolation>()
                .map_err(|e| anyhow!("--isolation: {e}"))?;
        }
        for (flag, given, slot) in [
            ("--on-success", &self.on_success, &mut job.on_success),
            ("--on-failure", &self.on_failure, &mut job.on_failure),
        ] {
            if let Some(text) = given {
                *slot = job_names(flag, text)?;
            }
        }
        Ok(())
    }

    fn apply_schedule(&self, spec: &mut ScheduleSpec) {
        let set = |slot: &mut Option<String>, v: &Option<String>| {
            if v.is_some() {
                slot.clone_from(v);
            }
        };
        set(&mut spec.tz, &self.tz);
        set(&mut spec.day_match, &self.day_match);
        set(&mut spec.dst_gap, &self.dst_gap);
        set(&mut spec.dst_fold, &self.dst_fold);
    }
}

/// The parameters, checked to be JSON (an object or an array), as compact text.
fn parse_params(text: &str) -> Result<String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| anyhow!("--params is not valid JSON: {e}"))?;
    if !(v.is_object() || v.is_array()) {
        bail!("--params must be a JSON object or array, got {text}");
    }
    Ok(v.to_string())
}

/// The flags a schedule came from, for error messages.
fn spec_flags(spec: &ScheduleSpec) -> String {
    let mut flags = Vec::new();
    for (flag, v) in [
        ("--cron", spec.cron.is_some()),
        ("--calendar", spec.calendar.is_some()),
        ("--every", spec.every.is_some()),
        ("--at", spec.at.is_some()),
        ("--tz", spec.tz.is_some()),
        ("--day-match", spec.day_match.is_some()),
        ("--dst-gap", spec.dst_gap.is_some()),
        ("--dst-fold", spec.dst_fold.is_some()),
    ] {
        if v {
            flags.push(flag);
        }
    }
    flags.join(", ")
}

fn build_schedule(spec: &ScheduleSpec) -> Result<Schedule> {
    spec.to_schedule()
        .map_err(|e| anyhow!("invalid schedule ({}): {e}", spec_flags(spec)))
}

fn rule_spec(
    cron: &Option<String>,
    calendar: &Option<String>,
    every: &Option<String>,
    at: &Option<String>,
) -> Result<ScheduleSpec> {
    if let Some(e) = every {
        args::not_negative("--every", e)?;
    }
    Ok(ScheduleSpec {
        cron: cron.clone(),
        calendar: calendar.clone().map(CalendarSpec::Text),
        every: every.clone(),
        at: at.clone(),
        ..ScheduleSpec::default()
    })
}

fn floor_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// What a job is doing at `now`, in one word or two: `disabled`, `expired` (its validity
/// window has closed), `not yet effective`, or `enabled`.
fn job_state(job: &JobDef, now: Timestamp, paused: bool) -> &'static str {
    match (job.enabled, job.validity_at(now)) {
        (false, _) => "disabled",
        (true, Validity::Expired) => "expired",
        (true, _) if paused => "paused",
        (true, Validity::NotYet) => "not yet effective",
        (true, _) => "enabled",
    }
}

/// The pause that holds a job (its own or its group's).
pub(crate) type Paused = Option<(PauseTarget, Pause)>;

fn paused_of(store: &AnyStore, job: &JobDef) -> Result<Paused> {
    match job.id {
        Some(id) => Ok(block_on(store.job_paused(id))??),
        None => Ok(None),
    }
}

/// "by alice@mes-01 at …: why" (and "with group g" for a group's pause).
fn pause_text(p: &(PauseTarget, Pause)) -> String {
    match &p.0 {
        PauseTarget::Group(g) => format!("{} (with group {g})", p.1),
        _ => p.1.to_string(),
    }
}

/// A schedule in a few words, for the list.
fn short_schedule(s: Option<&Schedule>) -> String {
    let Some(s) = s else {
        return "manual".to_string();
    };
    let rule = match s.rule() {
        Rule::Cron(c) => format!("cron {c}"),
        Rule::Calendar(c) => format!("calendar {c}"),
        Rule::Interval(i) => return i.describe(),
        Rule::Once(t) => format!("at {t}"),
        _ => s.describe(),
    };
    let zone = s.zone().to_string();
    if zone == "UTC" {
        rule
    } else {
        format!("{rule} ({zone})")
    }
}

fn opt_ts(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".to_string(), |t| t.to_string())
}

fn load(store: &AnyStore, name: &str) -> Result<JobDef> {
    let key = JobName::new(name).map_err(|e| anyhow!("{e}"))?;
    block_on(store.job_get_by_name(&key))??.ok_or_else(|| anyhow!("no job named \"{name}\""))
}

/// How often `takt job backfill --wait` reads the backfilled runs.
const BACKFILL_POLL: Duration = Duration::from_millis(500);

/// Waits until every backfilled run of `job` in [`from`, `to`) is final, drawing a progress
/// bar on stderr (hidden when stderr is not a terminal), and returns how many ended in each
/// state. The runs are read from the database, so the bar shows whichever node runs them;
/// Ctrl-C ends the wait, never the backfill; a disabled or removed job ends it with an
/// error (its runs would never start).
fn follow_backfill(
    store: &AnyStore,
    job: JobId,
    name: &str,
    (from, to): (Timestamp, Timestamp),
    fires: usize,
) -> Result<std::collections::BTreeMap<&'static str, u64>> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:40}] {pos}/{len} ended, {msg} ({elapsed}, eta {eta})",
        )
        .map_err(|e| anyhow!("internal error: the progress template: {e}"))?
        .progress_chars("=> "),
    );
    bar.set_prefix(format!("backfill {name}"));
    loop {
        // A backfill of a disabled or removed job would wait forever: say so and stop.
        match block_on(store.job_get(job))?? {
            None => bail!("job \"{name}\" was removed while its backfill ran"),
            Some(j) if !j.enabled => bail!(
                "job \"{name}\" is disabled: its backfilled runs wait until it is enabled \
                 (takt job enable {name}); they are kept"
            ),
            Some(_) => {}
        }
        let paused = block_on(store.job_paused(job))??.is_some();
        // Every run of the range, page by page (other runs, such as continuations, may
        // share it).
        let mut ours = Vec::new();
        let mut filter = RunFilter {
            job: Some(job),
            fire_from: Some(from),
            fire_to: Some(to),
            limit: fires.clamp(1, 1000),
            ..RunFilter::default()
        };
        loop {
            let page = block_on(store.run_list(&filter))??;
            let full = page.len() == filter.limit;
            filter.before = page.last().and_then(takt_core::store::RunCursor::of);
            ours.extend(
                page.into_iter()
                    .filter(|r| r.trigger == Some(takt_core::run::Trigger::Backfill)),
            );
            if !full || filter.before.is_none() {
                break;
            }
        }
        let mut states = std::collections::BTreeMap::new();
        for r in ours.iter().filter(|r| r.state.is_final()) {
            *states.entry(r.state.name()).or_insert(0) += 1;
        }
        let done: u64 = states.values().sum();
        let running = ours
            .iter()
            .filter(|r| r.state == takt_core::run::RunState::Running)
            .count();
        bar.set_length(ours.len() as u64);
        bar.set_position(done);
        bar.set_message(if paused {
            "paused: the runs wait for takt job resume".to_string()
        } else {
            format!("{running} running")
        });
        if done == ours.len() as u64 {
            bar.finish_and_clear();
            return Ok(states);
        }
        std::thread::sleep(BACKFILL_POLL);
    }
}

pub(crate) fn job_json(job: &JobDef, fires: &[Timestamp], paused: &Paused) -> Value {
    let params: Value = serde_json::from_str(&job.params_json).unwrap_or(Value::Null);
    json!({
        "id": job.id.map(|i| i.0),
        "name": job.name.as_str(),
        "enabled": job.enabled,
        "state": job_state(job, Timestamp::now(), paused.is_some()),
        "pause": paused.as_ref().map(|(t, p)| {
            let mut v = pause_json(p);
            if let PauseTarget::Group(g) = t {
                v["group"] = json!(g);
            }
            v
        }),
        "expired": job.is_expired(Timestamp::now()),
        "handler": job.handler_type,
        "params": params,
        "schedule": job.schedule.as_ref().map(ScheduleSpec::from_schedule),
        "schedule_short": short_schedule(job.schedule.as_ref()),
        "schedule_description": job.schedule.as_ref().map(Schedule::describe),
        "timeout_secs": job.timeout.map(|d| d.as_secs()),
        "retries": job.retry.max_retries,
        "retry_delays": job.retry.backoff.to_string(),
        "retry_timeouts": job.retry.retry_timeouts,
        "misfire": job.misfire.to_string(),
        "overlap": job.overlap.to_string(),
        "priority": job.priority.get(),
        "group": job.group,
        "dependencies": job.dependencies.iter().map(JobName::as_str).collect::<Vec<_>>(),
        "on_success": job.on_success.iter().map(JobName::as_str).collect::<Vec<_>>(),
        "on_failure": job.on_failure.iter().map(JobName::as_str).collect::<Vec<_>>(),
        "dependency_wait": job.dependency_wait.map(|d| format_duration(d.as_secs())),
        "node_tag": job.node_tag,
        "application": job.application,
        "owner": job.owner,
        "description": job.description,
        "isolation": job.isolation.name(),
        "effective_from": job.effective_from.map(|t| t.to_string()),
        "expires_at": job.expires_at.map(|t| t.to_string()),
        "next_fire": job.next_fire.map(|t| t.to_string()),
        "version": job.version,
        "updated_at": job.updated_at.map(|t| t.to_string()),
        "next_fires": fires.iter().map(ToString::to_string).collect::<Vec<_>>(),
    })
}

fn job_text(job: &JobDef, fires: &[Timestamp], paused: &Paused) -> String {
    let mut t = Table::new(["field", "value"]);
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
    t.row(["name".to_string(), job.name.to_string()]);
    t.row([
        "id".to_string(),
        job.id.map_or("-".to_string(), |i| i.to_string()),
    ]);
    t.row(["enabled".to_string(), job.enabled.to_string()]);
    t.row([
        "state".to_string(),
        job_state(job, Timestamp::now(), paused.is_some()).to_string(),
    ]);
    if let Some(p) = paused {
        t.row(["paused".to_string(), pause_text(p)]);
    }
    t.row(["handler".to_string(), job.handler_type.clone()]);
    t.row(["params".to_string(), job.params_json.clone()]);
    t.row([
        "schedule".to_string(),
        short_schedule(job.schedule.as_ref()),
    ]);
    t.row([
        "described".to_string(),
        job.schedule
            .as_ref()
            .map_or("runs only when triggered".to_string(), Schedule::describe),
    ]);
    t.row([
        "timeout".to_string(),
        job.timeout
            .map_or("none".to_string(), |d| format_duration(d.as_secs())),
    ]);
    t.row(["retries".to_string(), job.retry.max_retries.to_string()]);
    t.row(["retry delays".to_string(), job.retry.backoff.to_string()]);
    t.row(["misfire".to_string(), job.misfire.to_string()]);
    t.row(["overlap".to_string(), job.overlap.to_string()]);
    t.row(["priority".to_string(), job.priority.get().to_string()]);
    t.row(["group".to_string(), opt(&job.group)]);
    t.row(["node tag".to_string(), opt(&job.node_tag)]);
    let deps: Vec<&str> = job.dependencies.iter().map(JobName::as_str).collect();
    t.row([
        "dependencies".to_string(),
        if deps.is_empty() {
            "-".to_string()
        } else {
            deps.join(", ")
        },
    ]);
    for (field, list) in [
        ("on success", &job.on_success),
        ("on failure", &job.on_failure),
    ] {
        let names: Vec<&str> = list.iter().map(JobName::as_str).collect();
        t.row([
            field.to_string(),
            if names.is_empty() {
                "-".to_string()
            } else {
                names.join(", ")
            },
        ]);
    }
    if !deps.is_empty() {
        t.row([
            "dependency wait".to_string(),
            job.dependency_wait
                .map_or("until the next fire".to_string(), |d| {
                    format_duration(d.as_secs())
                }),
        ]);
    }
    t.row(["application".to_string(), opt(&job.application)]);
    t.row(["owner".to_string(), opt(&job.owner)]);
    t.row(["description".to_string(), opt(&job.description)]);
    t.row(["isolation".to_string(), job.isolation.to_string()]);
    t.row(["effective from".to_string(), opt_ts(job.effective_from)]);
    t.row(["expires at".to_string(), opt_ts(job.expires_at)]);
    t.row(["next fire (UTC)".to_string(), opt_ts(job.next_fire)]);
    t.row(["version".to_string(), job.version.to_string()]);
    t.row(["updated at".to_string(), opt_ts(job.updated_at)]);
    let mut out = t.render();
    if job.schedule.is_some() {
        out.push_str(&format!("\nnext {} fire times (UTC):\n", fires.len()));
        for f in fires {
            out.push_str(&format!("  {f}\n"));
        }
    }
    out
}

pub(super) fn run(cmd: JobCmd) -> Result<()> {
    match cmd {
        JobCmd::Add(a) => add(a),
        JobCmd::List { limit, db, out } => {
            let limit = limit
                .map(|l| args::number("--limit", &l, "a count", 1))
                .transpose()?;
            list(&db, out.json, limit)
        }
        JobCmd::Show { name, db, out } => {
            let store = db.open()?;
            let job = load(&store, &name)?;
            let fires = job.next_fires(Timestamp::now(), 5);
            if out.json {
                let paused = paused_of(&store, &job)?;
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&job_json(&job, &fires, &paused))?
                )?;
            } else {
                let paused = paused_of(&store, &job)?;
                out!("{}", job_text(&job, &fires, &paused))?;
            }
            Ok(())
        }
        JobCmd::Update(u) => update(u),
        JobCmd::Enable { name, db, out } => set_enabled(&db, &name, true, out.json),
        JobCmd::Disable { name, db, out } => set_enabled(&db, &name, false, out.json),
        JobCmd::Trigger { name, db, out } => {
            let store = db.open()?;
            let job = load(&store, &name)?;
            let id = job.id.context("stored job without id")?;
            if !job.enabled {
                bail!("job \"{name}\" is disabled; enable it first (takt job enable {name})");
            }
            let now = floor_second(Timestamp::now());
            match job.validity_at(now) {
                Validity::Inside => {}
                Validity::NotYet => bail!(
                    "job \"{name}\" is not effective before {}; move its window (takt job \
                     update {name} --effective-from ...) to run it now",
                    opt_ts(job.effective_from)
                ),
                Validity::Expired => bail!(
                    "job \"{name}\" expired at {}; extend it (takt job update {name} \
                     --expires-at ...) to run it",
                    opt_ts(job.expires_at)
                ),
            }
            block_on(store.job_set_next_fire(id, job.next_fire, Some(now)))?
                .with_context(|| format!("cannot trigger job \"{name}\""))?;
            if out.json {
                return print_job(&store, &load(&store, &name)?);
            }
            outln!(
                "triggered {name}: due at {now}; a running `takt run` on this database starts it"
            )
        }
        JobCmd::Backfill {
            name,
            from,
            to,
            max,
            wait,
            no_wait,
            db,
            out,
        } => {
            let from = super::inspect::parse_bound("--from", &from)?;
            let to = super::inspect::parse_bound("--to", &to)?;
            let max = args::number("--max", &max, "a count of fires", 1)?;
            let store = db.open()?;
            let job = load(&store, &name)?;
            let id = job.id.context("stored job without id")?;
            let b = block_on(store.run_backfill(id, from, to, max, Timestamp::now()))?
                .with_context(|| format!("cannot backfill job \"{name}\""))?;
            let waits = wait || (!no_wait && !out.json && std::io::stderr().is_terminal());
            let ended = if waits && b.created > 0 {
                Some(follow_backfill(&store, id, &name, (from, to), b.fires)?)
            } else {
                None
            };
            if out.json {
                let mut v = json!({
                    "job": name,
                    "from": from.to_string(),
                    "to": to.to_string(),
                    "fires": b.fires,
                    "created": b.created,
                    "present": b.present,
                });
                if let Some(states) = &ended {
                    v["ended"] = json!(states);
                }
                return outln!("{}", serde_json::to_string_pretty(&v)?);
            }
            outln!(
                "backfilled {name} [{from}, {to}): created {}, already present {}; a running \
                 `takt run` on this database runs them one at a time, oldest first",
                b.created,
                b.present
            )?;
            if let Some(states) = ended {
                let parts: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
                outln!("backfill of {name} ended: {}", parts.join(", "))?;
            }
            Ok(())
        }
        JobCmd::Pause {
            name,
            opts,
            db,
            out,
        } => {
            let store = db.open()?;
            let job = load(&store, &name)?;
            let id = job.id.context("stored job without id")?;
            let p = opts.pause(Timestamp::now())?;
            block_on(store.pause(&PauseTarget::Job(id), &p))?
                .with_context(|| format!("cannot pause job \"{name}\""))?;
            if out.json {
                return print_job(&store, &load(&store, &name)?);
            }
            outln!("paused {name} ({p}); takt job resume {name} ends it")
        }
        JobCmd::Resume { name, db, out } => {
            let store = db.open()?;
            let job = load(&store, &name)?;
            let id = job.id.context("stored job without id")?;
            let r = block_on(store.resume(&PauseTarget::Job(id), Timestamp::now()))?
                .with_context(|| format!("cannot resume job \"{name}\""))?;
            let job = load(&store, &name)?;
            if out.json {
                return print_job(&store, &job);
            }
            outln!(
                "resumed {name}: {} paused fire(s) recorded skipped; next fire {}",
                r.skipped,
                opt_ts(job.next_fire)
            )
        }
        JobCmd::Remove { name, db, yes, out } => {
            let store = db.open()?;
            let job = load(&store, &name)?;
            let id = job.id.context("stored job without id")?;
            let filter = RunFilter {
                job: Some(id),
                state: None,
                limit: 1,
                ..RunFilter::default()
            };
            let has_runs = !block_on(store.run_list(&filter))??.is_empty();
            if has_runs && !yes {
                bail!(
                    "job \"{name}\" has recorded runs; pass --yes to remove it with its runs and logs"
                );
            }
            block_on(store.job_delete(id))??;
            if out.json {
                return print_job(&store, &job);
            }
            outln!("removed {name}")
        }
    }
}

/// The job as `job show --json` prints it, with its next 3 fire times.
fn print_job(store: &AnyStore, job: &JobDef) -> Result<()> {
    // A removed job has no pause any more.
    let paused = paused_of(store, job).unwrap_or(None);
    let fires = job.next_fires(Timestamp::now(), 3);
    outln!(
        "{}",
        serde_json::to_string_pretty(&job_json(job, &fires, &paused))?
    )
}

/// The first fire of a schedule that was given or changed: the first firing occurrence after
/// `now`, except that a one-shot `--at` must lie in the future — or be allowed into the past,
/// where it is due at once and the loop handles it as a late fire (misfire policy).
fn first_fire(
    job: &JobDef,
    now: Timestamp,
    at: Option<&str>,
    allow_past: bool,
) -> Result<Option<Timestamp>> {
    let misfire = job.misfire;
    if let Some(Rule::Once(t)) = job.schedule.as_ref().map(Schedule::rule)
        && *t <= now
    {
        if allow_past {
            return Ok(Some(*t));
        }
        let given = at.unwrap_or_default();
        let resolved = if given == t.to_string() {
            String::new()
        } else {
            format!(" ({t})")
        };
        bail!(
            "--at {given}{resolved} is in the past (it is now {}); give a future time, or \
             --allow-past to record it as missed per the job's misfire policy ({misfire})",
            floor_second(now)
        );
    }
    Ok(job.first_fire_after(now))
}

/// `--allow-past` means something only for a one-shot `--at`.
fn refuse_stray_allow_past(allow_past: bool, at: &Option<String>) -> Result<()> {
    if allow_past && at.is_none() {
        bail!("--allow-past applies to --at only (a one-shot time); remove it, or give --at");
    }
    Ok(())
}

fn add(a: AddArgs) -> Result<()> {
    parse_handler_type(&a.handler).map_err(|e| anyhow!("--handler: {e}"))?;
    let mut job = JobDef::new(&a.name, a.handler.trim()).map_err(|e| anyhow!("{e}"))?;
    let opts = JobOpts::from(a.opts);
    let r = &a.rule;
    refuse_stray_allow_past(a.allow_past, &r.at)?;
    if r.manual {
        if opts.touches_schedule() {
            bail!("--manual takes no --tz, --day-match, --dst-gap or --dst-fold");
        }
    } else {
        let mut spec = rule_spec(&r.cron, &r.calendar, &r.every, &r.at)?;
        opts.apply_schedule(&mut spec);
        job.schedule = Some(build_schedule(&spec)?);
    }
    opts.apply(&mut job)?;
    job.enabled = !a.disabled;
    job.validate().map_err(|e| anyhow!("{e}"))?;
    crate::dynparams::check_job(&job).map_err(|e| anyhow!("{e}"))?;
    let now = Timestamp::now();
    job.next_fire = first_fire(&job, now, r.at.as_deref(), a.allow_past)?;
    let store = a.db.open()?;
    let stored = block_on(store.job_insert(&job, now))??;
    if a.out.json {
        return print_job(&store, &stored);
    }
    let fires = upcoming(&stored, now);
    outln!(
        "added job {} (id {})",
        stored.name,
        stored.id.map_or(0, |i| i.0)
    )?;
    print_summary(&stored, &fires)
}

/// The next 3 fire times, led by the stored next fire (which `--allow-past` may have put in
/// the past).
pub(crate) fn upcoming(job: &JobDef, now: Timestamp) -> Vec<Timestamp> {
    let mut fires = job.next_fires(now, 3);
    if let Some(nf) = job.next_fire.filter(|nf| *nf <= now) {
        fires.insert(0, nf);
        fires.truncate(3);
    }
    fires
}

fn print_summary(job: &JobDef, fires: &[Timestamp]) -> Result<()> {
    outln!("  schedule: {}", short_schedule(job.schedule.as_ref()))?;
    outln!("  enabled:  {}", job.enabled)?;
    outln!("  handler:  {}", job.handler_type)?;
    if job.schedule.is_some() {
        outln!("  next {} fire times (UTC):", fires.len())?;
        for f in fires {
            outln!("    {f}")?;
        }
        if let Some(nf) = job.next_fire.filter(|nf| *nf <= Timestamp::now()) {
            outln!(
                "  due now, late since {nf}: the next `takt run` handles it per the misfire \
                 policy ({})",
                job.misfire
            )?;
        }
    } else {
        outln!("  runs only when triggered (takt job trigger {})", job.name)?;
    }
    Ok(())
}

fn update(u: UpdateArgs) -> Result<()> {
    let store = u.db.open()?;
    let mut job = load(&store, &u.name)?;
    if let Some(h) = &u.handler {
        parse_handler_type(h).map_err(|e| anyhow!("--handler: {e}"))?;
        job.handler_type = h.trim().to_string();
    }
    let opts = JobOpts::from(u.opts);
    let r = &u.rule;
    refuse_stray_allow_past(u.allow_past, &r.at)?;
    let new_rule = r.cron.is_some() || r.calendar.is_some() || r.every.is_some() || r.at.is_some();
    let mut schedule_changed = false;
    if r.manual {
        if opts.touches_schedule() {
            bail!("--manual takes no --tz, --day-match, --dst-gap or --dst-fold");
        }
        schedule_changed = job.schedule.is_some();
        job.schedule = None;
    } else if new_rule || opts.touches_schedule() {
        let old = job.schedule.as_ref().map(ScheduleSpec::from_schedule);
        let mut spec = if new_rule {
            let mut s = rule_spec(&r.cron, &r.calendar, &r.every, &r.at)?;
            // Keep the zone and DST choices unless they are given again.
            if let Some(o) = &old {
                s.tz.clone_from(&o.tz);
                s.dst_gap.clone_from(&o.dst_gap);
                s.dst_fold.clone_from(&o.dst_fold);
            }
            s
        } else {
            old.ok_or_else(|| {
                anyhow!("job \"{}\" has no schedule; give --cron, --calendar, --every or --at with --tz", u.name)
            })?
        };
        opts.apply_schedule(&mut spec);
        let schedule = build_schedule(&spec)?;
        schedule_changed = job.schedule.as_ref() != Some(&schedule);
        job.schedule = Some(schedule);
    }
    opts.apply(&mut job)?;
    job.validate().map_err(|e| anyhow!("{e}"))?;
    crate::dynparams::check_job(&job).map_err(|e| anyhow!("{e}"))?;
    let now = Timestamp::now();
    // A changed schedule or validity window starts from now, inside the window.
    if schedule_changed || opts.effective_from.is_some() || opts.expires_at.is_some() {
        job.next_fire = first_fire(&job, now, r.at.as_deref(), u.allow_past)?;
    }
    let stored = block_on(store.job_update(&job, now))?
        .with_context(|| format!("cannot update job \"{}\"", u.name))?;
    if u.out.json {
        return print_job(&store, &stored);
    }
    let fires = upcoming(&stored, now);
    outln!("updated job {} (version {})", stored.name, stored.version)?;
    print_summary(&stored, &fires)
}

fn set_enabled(db: &DbArg, name: &str, enabled: bool, json: bool) -> Result<()> {
    let store = db.open()?;
    let job = load(&store, name)?;
    let id = job.id.context("stored job without id")?;
    let stored = block_on(store.job_set_enabled(id, enabled, Timestamp::now()))??;
    if json {
        return print_job(&store, &stored);
    }
    outln!("{} {name}", if enabled { "enabled" } else { "disabled" })
}

/// The pause holding `job`, from every pause listed once.
pub(crate) fn pause_in(pauses: &[(PauseTarget, Pause)], job: &JobDef) -> Paused {
    pauses
        .iter()
        .find(|(t, _)| *t == PauseTarget::Job(job.id.unwrap_or(JobId(0))))
        .or_else(|| {
            pauses.iter().find(|(t, _)| match (t, &job.group) {
                (PauseTarget::Group(g), Some(jg)) => g == jg,
                _ => false,
            })
        })
        .cloned()
}

/// How many jobs `takt job list` reads per store call: few round trips for a large listing,
/// and a bounded amount held at once (a page of jobs and its rendered text).
const LIST_PAGE: usize = 500;

/// `takt job list`: jobs by name, a page of [`LIST_PAGE`] at a time
/// ([`Store::job_page`]), each printed before the next is read. `--json` prints the same
/// bytes `serde_json::to_string_pretty` would for the whole array, one element at a time;
/// the table is aligned as the first page's (see [`Table::render_continued`]).
fn list(db: &DbArg, json: bool, limit: Option<usize>) -> Result<()> {
    let store = db.open()?;
    let pauses = block_on(store.pause_list())??;
    let now = Timestamp::now();
    let header = [
        "name",
        "state",
        "schedule",
        "next fire (UTC)",
        "handler",
        "priority",
    ];
    let mut left = limit.unwrap_or(usize::MAX);
    let mut query = JobQuery::first(LIST_PAGE.min(left));
    let mut printed = 0usize;
    let mut widths = Vec::new();
    loop {
        let page = block_on(store.job_page(&query))??;
        if json {
            let mut text = String::new();
            for j in &page.jobs {
                let fires = j.next_fires(now, 3);
                let value = job_json(j, &fires, &pause_in(&pauses, j));
                text.push_str(if printed == 0 { "[\n" } else { ",\n" });
                // An element of a pretty array: its own pretty text, indented one level
                // (a newline inside a JSON string is escaped, so lines are the layout's).
                let element = serde_json::to_string_pretty(&value)?;
                for (i, line) in element.lines().enumerate() {
                    if i > 0 {
                        text.push('\n');
                    }
                    text.push_str("  ");
                    text.push_str(line);
                }
                printed += 1;
            }
            out!("{text}")?;
        } else if !page.jobs.is_empty() {
            let mut t = Table::new(header);
            for j in &page.jobs {
                t.row([
                    j.name.to_string(),
                    job_state(j, now, pause_in(&pauses, j).is_some()).to_string(),
                    short_schedule(j.schedule.as_ref()),
                    opt_ts(j.next_fire),
                    j.handler_type.clone(),
                    j.priority.get().to_string(),
                ]);
            }
            out!(
                "{}",
                t.render_continued(&mut widths, usize::from(printed > 0))
            )?;
            printed += page.jobs.len();
        }
        left -= page.jobs.len();
        match query.next_of(&page) {
            Some(next) if left > 0 => {
                query = JobQuery {
                    limit: LIST_PAGE.min(left),
                    ..next
                };
            }
            _ => break,
        }
    }
    match (json, printed) {
        (true, 0) => outln!("[]"),
        (true, _) => outln!("\n]"),
        (false, 0) => outln!("no jobs (add one with takt job add)"),
        (false, _) => Ok(()),
    }
}
