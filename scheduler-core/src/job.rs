//! Job definitions: what runs, when, and under which policies.
//!
//! A [`JobDef`] holds every field of requirements.md "Jobs and runs", including those whose
//! behaviour comes later (group, application, owner): the model holds them now so storage and
//! the API need no migration when the behaviour lands. Dependencies are obeyed by the store
//! engine's claim ([`crate::store::dependency`]).
//!
//! The validity window is obeyed here, through the one next-fire function
//! ([`JobDef::first_fire_after`]): every writer of a job's next fire asks it, so no job
//! becomes due before `effective_from` or at or after `expires_at`.
//!
//! Invariants of single values live in their types ([`JobName`], [`Priority`], the policies,
//! [`Schedule`]); rules that span fields or free-text limits are checked by
//! [`JobDef::validate`], which [`JobDef::new`] and every store write run. Fields are public so
//! the host can fill a definition from storage or a DTO without a builder per field; whoever
//! changes them calls `validate` again before saving.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;

use crate::policy::{MisfirePolicy, OverlapPolicy, RetryPolicy, misfire};
use crate::schedule::Schedule;

/// The longest job name, label (group, node tag, application, owner) or handler type.
pub const MAX_NAME_CHARS: usize = 200;
/// The longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 4000;

/// A job's id in its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a job definition was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A required text field is empty.
    #[error("job {field} is empty; give it a value")]
    Empty {
        /// The field (`name`, `handler_type`, …).
        field: &'static str,
    },
    /// A text field is too long.
    #[error("job {field} has {chars} characters; the maximum is {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length in characters.
        chars: usize,
        /// The maximum.
        max: usize,
    },
    /// A text field holds a control character (a newline, a tab, NUL …).
    #[error(
        "job {field} contains a control character at position {position}; use printable text \
         on one line"
    )]
    ControlChar {
        /// The field.
        field: &'static str,
        /// The character index (from 0).
        position: usize,
    },
    /// A text field starts or ends with whitespace, which makes names that look equal differ.
    #[error("job {field} starts or ends with whitespace; trim it")]
    Untrimmed {
        /// The field.
        field: &'static str,
    },
    /// A priority outside 0..=999.
    #[error("job priority {value} is out of range; use 0 (runs first) to 999 (runs last)")]
    Priority {
        /// The value as given.
        value: String,
    },
    /// A zero timeout.
    #[error("job timeout is zero; give at least 1s, or no timeout")]
    ZeroTimeout,
    /// An effective date at or after the expiry.
    #[error(
        "job effective_from {from} is not before expires_at {until}; move one of them or drop it"
    )]
    Validity {
        /// The effective date.
        from: Timestamp,
        /// The expiry.
        until: Timestamp,
    },
    /// A job that depends on itself.
    #[error("job {name} lists itself in its dependencies; remove it")]
    SelfDependency {
        /// The job's name.
        name: String,
    },
    /// A dependency wait of zero.
    #[error(
        "job dependency_wait must be longer than 0s; leave it out to wait until the job's \
         next fire"
    )]
    ZeroDependencyWait,
    /// A dependency wait on a job without dependencies (nothing would obey it).
    #[error(
        "job {name} has a dependency_wait but no dependencies; add depends_on, or remove \
         dependency_wait"
    )]
    WaitWithoutDependencies {
        /// The job's name.
        name: String,
    },
    /// A dependency listed twice.
    #[error("job dependency {name} is listed twice; list each dependency once")]
    DuplicateDependency {
        /// The repeated name.
        name: String,
    },
    /// An isolation that is neither `in-process` nor `process`.
    #[error("job isolation \"{value}\" is unknown; use in-process or process")]
    Isolation {
        /// The value as given.
        value: String,
    },
    /// Parameters that are not a JSON object or array.
    #[error(
        "job params_json does not look like JSON (it must start with {{ or [); write e.g. {{}} \
         for no parameters"
    )]
    Params,
    /// A job that lists itself in its `on_success` / `on_failure`: every run of it would
    /// start the next, forever.
    #[error(
        "job {name} lists itself in its {field}; a job that continues with itself would run          forever; remove it (use a schedule or retries instead)"
    )]
    SelfContinuation {
        /// The job's name.
        name: String,
        /// `on_success` or `on_failure`.
        field: &'static str,
    },
    /// A continuation listed twice in one list.
    #[error("job {name} is listed twice in {field}; list each job once")]
    DuplicateContinuation {
        /// The repeated name.
        name: String,
        /// `on_success` or `on_failure`.
        field: &'static str,
    },
}

/// A job's unique name: 1 to 200 characters, no control characters, no surrounding spaces.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobName(String);

impl JobName {
    /// Checks the rules above; the error names the rule broken.
    pub fn new(name: &str) -> Result<JobName, JobError> {
        check_label("name", name)?;
        Ok(JobName(name.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A name that was checked when it was stored, given back by a store that keeps it as
    /// plain text (the memory store's compact rows): checking it again on every read would
    /// cost a scan of a million names in a job listing for nothing.
    pub(crate) fn stored(name: &str) -> JobName {
        JobName(name.to_string())
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for JobName {
    type Err = JobError;

    fn from_str(s: &str) -> Result<Self, JobError> {
        JobName::new(s)
    }
}

/// The order of runs due together: 0 runs first, 999 last (seed 004); default 500.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(u16);

impl Priority {
    /// The highest priority (runs first).
    pub const FIRST: Priority = Priority(0);
    /// The lowest priority (runs last).
    pub const LAST: Priority = Priority(999);

    /// Checks `0..=999`.
    pub fn new(value: u16) -> Result<Priority, JobError> {
        if value > 999 {
            return Err(JobError::Priority {
                value: value.to_string(),
            });
        }
        Ok(Priority(value))
    }

    /// The value.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl Default for Priority {
    fn default() -> Self {
        Priority(500)
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Priority {
    type Err = JobError;

    fn from_str(s: &str) -> Result<Self, JobError> {
        let bad = || JobError::Priority {
            value: s.to_string(),
        };
        let v: u16 = s.trim().parse().map_err(|_| bad())?;
        Priority::new(v).map_err(|_| bad())
    }
}

/// Where a job's plugin calls run: in the host's own process (the default) or in a worker
/// process the host can kill.
///
/// A host may also isolate every job of some plugins (its configuration); `InProcess` is then
/// the job's *request*, not a promise: the stricter of the two applies. `Process` is always
/// honoured (or the run fails saying why: a plugin compiled into the host cannot leave it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// In the host's process, unless the host isolates the job's plugin.
    #[default]
    InProcess,
    /// In a worker child process: a crash fails only this run, a timeout kills the worker.
    Process,
}

impl Isolation {
    /// Both values.
    pub const ALL: [Isolation; 2] = [Isolation::InProcess, Isolation::Process];

    /// `in-process` or `process`: the form of config files, the CLI and storage.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::InProcess => "in-process",
            Isolation::Process => "process",
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isolation {
    type Err = JobError;

    fn from_str(s: &str) -> Result<Self, JobError> {
        Isolation::ALL
            .into_iter()
            .find(|i| i.name() == s.trim())
            .ok_or_else(|| JobError::Isolation {
                value: s.to_string(),
            })
    }
}

/// A job definition.
#[derive(Clone, Debug, PartialEq)]
pub struct JobDef {
    /// The id (`None` until stored).
    pub id: Option<JobId>,
    /// The unique name.
    pub name: JobName,
    /// The group (seed 004 WorkerGroupID); behaviour arrives with groups.
    pub group: Option<String>,
    /// What runs: `plugin::handler`, or a seed-style `Namespace.Class, Assembly`.
    pub handler_type: String,
    /// The handler's parameters as JSON text; parsed and checked by the host, which owns serde.
    pub params_json: String,
    /// When it fires, in its zone; `None` for a job that runs only when triggered.
    pub schedule: Option<Schedule>,
    /// Whether it fires at all.
    pub enabled: bool,
    /// No fires before this instant (seed 004 EffectivityTime).
    pub effective_from: Option<Timestamp>,
    /// No fires at or after this instant (seed 004 ExpirationTime); past it the job is
    /// expired.
    pub expires_at: Option<Timestamp>,
    /// How long an attempt may run (`None`: no limit).
    pub timeout: Option<Duration>,
    /// Retries.
    pub retry: RetryPolicy,
    /// Missed fires.
    pub misfire: MisfirePolicy,
    /// Fires while a run is going.
    pub overlap: OverlapPolicy,
    /// Order among runs due together.
    pub priority: Priority,
    /// Jobs whose run for the same period must succeed first (seed 004 WorkerDependency;
    /// config `depends_on`). The rule is [`crate::store::dependency`]; the store refuses
    /// unknown names and cycles when the job is added or updated.
    pub dependencies: Vec<JobName>,
    /// How long a fire waits for its dependencies' runs to be final before it is recorded
    /// skipped (reason `dependency`, "still waiting for …"); `None`: until the job's next
    /// fire ([`crate::store::dependency::wait_deadline`]).
    pub dependency_wait: Option<Duration>,
    /// Only nodes with this tag run the job (seed 004 DispatcherID).
    pub node_tag: Option<String>,
    /// The business application it belongs to (seed 004 ApplicationName).
    pub application: Option<String>,
    /// Who to ask when it fails (seed 004 Owner).
    pub owner: Option<String>,
    /// Free text.
    pub description: Option<String>,
    /// Where its plugin calls run.
    pub isolation: Isolation,
    /// Jobs that each get one run (trigger `continuation`) when a run of this job
    /// succeeds (xxl-job child jobs, Hangfire continuations; seed 003 §6). The store engine
    /// creates them in the transaction of the parent's final compare-and-set; names must
    /// exist and the continuation graph must have no cycle (checked when the job is stored).
    pub on_success: Vec<JobName>,
    /// Jobs that each get one run when a run of this job fails or times out (after its
    /// retries). A cancelled or skipped run continues with nothing.
    pub on_failure: Vec<JobName>,
    /// The next fire time the loop will act on (kept by the store).
    pub next_fire: Option<Timestamp>,
    /// Bumped by every update; stores compare-and-set on it.
    pub version: u64,
    /// When it was last changed (set by the store from its clock).
    pub updated_at: Option<Timestamp>,
}

impl JobDef {
    /// A manual-only, enabled job with default policies and parameters `{}`; set the other
    /// fields, then [`JobDef::validate`].
    pub fn new(name: &str, handler_type: &str) -> Result<JobDef, JobError> {
        let job = JobDef {
            id: None,
            name: JobName::new(name)?,
            group: None,
            handler_type: handler_type.to_string(),
            params_json: "{}".to_string(),
            schedule: None,
            enabled: true,
            effective_from: None,
            expires_at: None,
            timeout: None,
            retry: RetryPolicy::default(),
            misfire: MisfirePolicy::default(),
            overlap: OverlapPolicy::default(),
            priority: Priority::default(),
            dependencies: Vec::new(),
            dependency_wait: None,
            node_tag: None,
            application: None,
            owner: None,
            description: None,
            isolation: Isolation::InProcess,
            on_success: Vec::new(),
            on_failure: Vec::new(),
            next_fire: None,
            version: 0,
            updated_at: None,
        };
        job.validate()?;
        Ok(job)
    }

    /// The same job on `schedule`.
    pub fn with_schedule(mut self, schedule: Schedule) -> JobDef {
        self.schedule = Some(schedule);
        self
    }

    /// Checks every rule that a field's type cannot: label lengths and characters, the
    /// validity window, the timeout, the dependency list, the shape of the parameters.
    pub fn validate(&self) -> Result<(), JobError> {
        check_label("handler_type", &self.handler_type)?;
        for (field, value) in [
            ("group", &self.group),
            ("node_tag", &self.node_tag),
            ("application", &self.application),
            ("owner", &self.owner),
        ] {
            if let Some(v) = value {
                check_label(field, v)?;
            }
        }
        if let Some(d) = &self.description {
            check_len("description", d, MAX_DESCRIPTION_CHARS)?;
        }
        let p = self.params_json.trim_start();
        if !(p.starts_with('{') || p.starts_with('[')) {
            return Err(JobError::Params);
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(JobError::ZeroTimeout);
        }
        if self.dependency_wait == Some(Duration::ZERO) {
            return Err(JobError::ZeroDependencyWait);
        }
        if self.dependency_wait.is_some() && self.dependencies.is_empty() {
            return Err(JobError::WaitWithoutDependencies {
                name: self.name.to_string(),
            });
        }
        if let (Some(from), Some(until)) = (self.effective_from, self.expires_at)
            && from >= until
        {
            return Err(JobError::Validity { from, until });
        }
        for (i, d) in self.dependencies.iter().enumerate() {
            if *d == self.name {
                return Err(JobError::SelfDependency {
                    name: self.name.to_string(),
                });
            }
            if self.dependencies[..i].contains(d) {
                return Err(JobError::DuplicateDependency {
                    name: d.to_string(),
                });
            }
        }
        for (field, list) in [
            ("on_success", &self.on_success),
            ("on_failure", &self.on_failure),
        ] {
            for (i, c) in list.iter().enumerate() {
                if *c == self.name {
                    return Err(JobError::SelfContinuation {
                        name: self.name.to_string(),
                        field,
                    });
                }
                if list[..i].contains(c) {
                    return Err(JobError::DuplicateContinuation {
                        name: c.to_string(),
                        field,
                    });
                }
            }
        }
        Ok(())
    }

    /// The jobs a run of this job continues with when it ends in `state`: `on_success` for
    /// succeeded, `on_failure` for failed and timed out, none for anything else (a cancel is
    /// an operator stopping the chain; a skipped run never ran). See [`crate::run::Trigger`].
    pub fn continuations_for(&self, state: crate::run::RunState) -> &[JobName] {
        continuations_in(state, &self.on_success, &self.on_failure)
    }

    /// Every job this one continues with, on success or failure (the edges of the
    /// continuation graph, whose cycles the store refuses).
    pub fn continuation_targets(&self) -> impl Iterator<Item = &JobName> {
        self.on_success.iter().chain(&self.on_failure)
    }

    /// Whether the job may fire at `at`: enabled and inside its validity window.
    pub fn may_fire_at(&self, at: Timestamp) -> bool {
        self.enabled && self.validity_at(at) == Validity::Inside
    }

    /// Where `at` lies relative to the job's validity window (seed 004 EffectivityTime /
    /// ExpirationTime): `effective_from` is the first instant that may fire, `expires_at` the
    /// first that may not.
    pub fn validity_at(&self, at: Timestamp) -> Validity {
        if self.effective_from.is_some_and(|f| at < f) {
            Validity::NotYet
        } else if self.expires_at.is_some_and(|u| at >= u) {
            Validity::Expired
        } else {
            Validity::Inside
        }
    }

    /// Whether the job's validity window has ended at `now`: it fires no more, and `job
    /// list` / `job show` say so.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.validity_at(now) == Validity::Expired
    }

    /// Whether the job's fires come from a recurring schedule (cron, calendar, interval) —
    /// what the claim's fairness rule favours ([`crate::store::ClaimParams`]): a recurring
    /// job fires at most once per claim and again on its schedule, so giving its fires the
    /// first places cannot starve anything for long, while a backlog of one-off fires
    /// (`at`, a job with no schedule that was triggered) can be any size. Stored beside the
    /// job (the SQL stores' `recurring` column) so the due queries can read the recurring
    /// fires alone from an index.
    pub fn is_recurring(&self) -> bool {
        self.schedule.as_ref().is_some_and(Schedule::recurs)
    }

    /// **The one next-fire function**: the first firing occurrence of the job's schedule
    /// strictly after `after` that lies inside its validity window (DST-gap skips passed
    /// over, bounded), or `None` (no schedule, the schedule ended, or the window closed).
    /// Every writer of a job's next fire — adding, updating, enabling, the claim's advance,
    /// the misfire plan — goes through it (or [`JobDef::next_fires`]), so a job never becomes
    /// due outside its window.
    pub fn first_fire_after(&self, after: Timestamp) -> Option<Timestamp> {
        self.next_fires(after, 1).into_iter().next()
    }

    /// Up to `n` firing occurrences after `after` inside the validity window, in order (what
    /// `job show` lists).
    pub fn next_fires(&self, after: Timestamp, n: usize) -> Vec<Timestamp> {
        let Some(schedule) = &self.schedule else {
            return Vec::new();
        };
        // Before the window opens, search from its start: `iter_after` is exclusive and
        // floors to the second, so one second earlier includes the opening instant itself.
        let from = match self.effective_from {
            Some(f) if f > after => f
                .checked_sub(jiff::SignedDuration::from_secs(1))
                .unwrap_or(f),
            _ => after,
        };
        schedule
            .iter_after(from)
            .take(MAX_SKIPS_WALKED.saturating_mul(n.max(1)))
            .filter(|o| o.fires() && o.at > after)
            .take_while(|o| self.expires_at.is_none_or(|u| o.at < u))
            .filter(|o| self.effective_from.is_none_or(|f| o.at >= f))
            .take(n)
            .map(|o| o.at)
            .collect()
    }

    /// The misfire plan of the job's schedule from its stored next fire `next_fire` up to
    /// `now` ([`misfire::plan`]), kept inside the validity window: fires and skips outside it
    /// are dropped (a fire the window excludes is not a misfire: it was never due), a range
    /// of omitted misfires ends at the last occurrence before the expiry, and the new next
    /// fire comes from [`JobDef::first_fire_after`]. `None` for a job without a schedule.
    pub fn misfire_plan(
        &self,
        next_fire: Timestamp,
        now: Timestamp,
    ) -> Option<misfire::MisfirePlan> {
        let schedule = self.schedule.as_ref()?;
        let mut plan = misfire::plan(schedule, next_fire, now, self.misfire);
        let inside = |t: Timestamp| self.validity_at(t) == Validity::Inside;
        plan.fires.retain(|f| inside(f.fire_time));
        plan.skips.retain(|s| inside(s.fire_time));
        if let Some(o) = plan.omitted.as_mut() {
            if !inside(o.first) {
                plan.omitted = None;
            } else if !inside(o.last) {
                let end = self.expires_at.and_then(|u| schedule.prev_before(u));
                match end {
                    Some(e) if e.at >= o.first => {
                        o.last = e.at;
                        o.count = None;
                    }
                    _ => plan.omitted = None,
                }
            }
        }
        plan.next_fire = match plan.next_fire {
            Some(n) if inside(n) => Some(n),
            // Past the expiry (or, for a window moved later, before its opening).
            _ => self.first_fire_after(now),
        };
        Some(plan)
    }
}

/// The most occurrences walked past (DST-gap skips) looking for a firing one, per fire asked
/// for: a rule whose occurrences all fall into gaps ends instead of spinning.
pub const MAX_SKIPS_WALKED: usize = 64;

/// Where an instant lies relative to a job's validity window ([`JobDef::validity_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Validity {
    /// Before `effective_from`: the job is not effective yet.
    NotYet,
    /// Inside the window: the job may fire.
    Inside,
    /// At or after `expires_at`: the job has expired.
    Expired,
}

fn check_len(field: &'static str, value: &str, max: usize) -> Result<(), JobError> {
    let chars = value.chars().count();
    if chars > max {
        return Err(JobError::TooLong { field, chars, max });
    }
    Ok(())
}

/// Non-empty, at most [`MAX_NAME_CHARS`], no control characters, no surrounding whitespace.
fn check_label(field: &'static str, value: &str) -> Result<(), JobError> {
    if value.is_empty() {
        return Err(JobError::Empty { field });
    }
    check_len(field, value, MAX_NAME_CHARS)?;
    if let Some(position) = value.chars().position(char::is_control) {
        return Err(JobError::ControlChar { field, position });
    }
    if value.trim() != value {
        return Err(JobError::Untrimmed { field });
    }
    Ok(())
}

/// Which of a job's lists a run ending in `state` continues with: `on_success` after a
/// success, `on_failure` after a failure or a timeout, none otherwise (a cancel, a skip).
/// Generic so that a store can pick the stored column before it parses it.
pub fn continuations_in<'a, T>(
    state: crate::run::RunState,
    on_success: &'a [T],
    on_failure: &'a [T],
) -> &'a [T] {
    use crate::run::RunState;
    match state {
        RunState::Succeeded => on_success,
        RunState::Failed | RunState::TimedOut => on_failure,
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MisfireAction;
    use crate::schedule::cron::CronExpr;
    use crate::schedule::{Rule, Zone};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn job() -> JobDef {
        JobDef::new("archive", "examples::archive").unwrap()
    }

    #[test]
    fn defaults() {
        let j = job();
        assert_eq!(j.priority.get(), 500);
        assert!(j.enabled);
        assert_eq!(j.schedule, None);
        assert_eq!(j.params_json, "{}");
        assert_eq!(j.overlap, OverlapPolicy::Skip);
        assert_eq!(j.misfire.action, MisfireAction::Skip);
        assert_eq!(j.retry.max_retries, 0);
        assert_eq!(j.version, 0);
        assert_eq!(j.isolation, Isolation::InProcess);
    }

    #[test]
    fn isolation_reads_its_two_names_and_refuses_others() {
        for i in Isolation::ALL {
            assert_eq!(i.name().parse::<Isolation>().unwrap(), i);
        }
        assert_eq!(
            " process ".parse::<Isolation>().unwrap(),
            Isolation::Process
        );
        assert_eq!(
            "sandbox".parse::<Isolation>().unwrap_err().to_string(),
            "job isolation \"sandbox\" is unknown; use in-process or process"
        );
    }

    #[test]
    fn names_say_which_rule_they_break() {
        let e = |n: &str| JobName::new(n).unwrap_err().to_string();
        assert_eq!(e(""), "job name is empty; give it a value");
        assert_eq!(
            e(&"x".repeat(201)),
            "job name has 201 characters; the maximum is 200"
        );
        assert!(
            JobName::new(&"é".repeat(200)).is_ok(),
            "characters, not bytes"
        );
        assert_eq!(
            e("a\nb"),
            "job name contains a control character at position 1; use printable text on one line"
        );
        assert_eq!(e(" a"), "job name starts or ends with whitespace; trim it");
        assert_eq!(
            "nightly report".parse::<JobName>().unwrap().as_str(),
            "nightly report"
        );
    }

    #[test]
    fn priorities() {
        assert_eq!(Priority::new(0), Ok(Priority::FIRST));
        assert_eq!(Priority::new(999), Ok(Priority::LAST));
        assert!(Priority::FIRST < Priority::default());
        assert_eq!(
            Priority::new(1000).unwrap_err().to_string(),
            "job priority 1000 is out of range; use 0 (runs first) to 999 (runs last)"
        );
        assert_eq!("42".parse::<Priority>().unwrap().get(), 42);
        assert!(
            "-1".parse::<Priority>()
                .unwrap_err()
                .to_string()
                .contains("priority -1")
        );
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |f: &dyn Fn(&mut JobDef)| {
            let mut j = job();
            f(&mut j);
            j.validate().unwrap_err().to_string()
        };
        assert_eq!(
            bad(&|j| j.handler_type.clear()),
            "job handler_type is empty; give it a value"
        );
        assert!(bad(&|j| j.group = Some("a\tb".into())).starts_with("job group contains"));
        assert!(bad(&|j| j.node_tag = Some(String::new())).starts_with("job node_tag is empty"));
        assert!(bad(&|j| j.owner = Some("x".repeat(300))).starts_with("job owner has 300"));
        assert!(
            bad(&|j| j.description = Some("x".repeat(4001))).starts_with("job description has")
        );
        assert!(bad(&|j| j.params_json = "42".into()).contains("params_json"));
        assert!(bad(&|j| j.timeout = Some(Duration::ZERO)).contains("timeout is zero"));
        assert!(
            bad(&|j| {
                j.effective_from = Some(ts("2026-01-01T00:00:00Z"));
                j.expires_at = Some(ts("2026-01-01T00:00:00Z"));
            })
            .contains("is not before expires_at")
        );
        assert_eq!(
            bad(&|j| j.dependencies = vec![JobName::new("archive").unwrap()]),
            "job archive lists itself in its dependencies; remove it"
        );
        let a = JobName::new("a").unwrap();
        assert!(
            bad(&|j| j.dependencies = vec![a.clone(), a.clone()])
                .contains("dependency a is listed twice")
        );
        assert!(
            bad(&|j| j.on_success = vec![JobName::new("archive").unwrap()])
                .starts_with("job archive lists itself in its on_success")
        );
        assert_eq!(
            bad(&|j| j.on_failure = vec![a.clone(), a.clone()]),
            "job a is listed twice in on_failure; list each job once"
        );
        assert!(JobDef::new("ok", "").is_err());
    }

    #[test]
    fn next_fires_and_misfire_plans_stay_inside_the_validity_window() {
        use crate::schedule::Interval;
        let every = Interval::new(60, Some(ts("2026-06-01T10:00:00Z"))).unwrap();
        let mut j = job().with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()));
        j.effective_from = Some(ts("2026-06-01T10:02:30Z"));
        j.expires_at = Some(ts("2026-06-01T10:05:00Z"));
        assert_eq!(
            j.next_fires(ts("2026-06-01T10:00:00Z"), 10),
            [ts("2026-06-01T10:03:00Z"), ts("2026-06-01T10:04:00Z")],
            "from the window's opening to before its end"
        );
        assert_eq!(
            j.first_fire_after(ts("2026-06-01T10:04:00Z")),
            None,
            "10:05 is the expiry itself"
        );
        assert_eq!(j.validity_at(ts("2026-06-01T10:02:29Z")), Validity::NotYet);
        assert_eq!(j.validity_at(ts("2026-06-01T10:02:30Z")), Validity::Inside);
        assert!(j.is_expired(ts("2026-06-01T10:05:00Z")));
        // Down from 10:03 to 10:30 with fire-all: only 10:03 and 10:04 were ever due.
        j.misfire = "fire-all:100".parse().unwrap();
        let plan = j
            .misfire_plan(ts("2026-06-01T10:03:00Z"), ts("2026-06-01T10:30:00Z"))
            .unwrap();
        let fires: Vec<Timestamp> = plan.fires.iter().map(|f| f.fire_time).collect();
        assert_eq!(
            fires,
            [ts("2026-06-01T10:03:00Z"), ts("2026-06-01T10:04:00Z")]
        );
        assert!(plan.skips.is_empty() && plan.omitted.is_none());
        assert_eq!(plan.next_fire, None, "expired");
        // An every-second job down for a day past its expiry: the omitted range ends at the
        // last occurrence before the expiry.
        let every = Interval::new(1, Some(ts("2026-06-01T00:00:00Z"))).unwrap();
        let mut s = job().with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()));
        s.expires_at = Some(ts("2026-06-01T12:00:00Z"));
        let plan = s
            .misfire_plan(ts("2026-06-01T00:00:00Z"), ts("2026-06-02T00:00:00Z"))
            .unwrap();
        assert!(plan.fires.is_empty(), "skip policy");
        assert!(
            plan.skips
                .iter()
                .all(|k| k.fire_time < ts("2026-06-01T12:00:00Z"))
        );
        let o = plan.omitted.expect("a long range");
        assert_eq!(o.last, ts("2026-06-01T11:59:59Z"));
        assert_eq!(plan.next_fire, None);
    }

    #[test]
    fn the_model_holds_every_field() {
        let mut j = job().with_schedule(Schedule::new(
            Rule::Cron(CronExpr::parse("*/10 * * * *").unwrap()),
            Zone::get("Europe/Berlin").unwrap(),
        ));
        j.group = Some("nightly".into());
        j.dependencies = vec![JobName::new("collect").unwrap()];
        j.node_tag = Some("strong-box".into());
        j.application = Some("mes".into());
        j.owner = Some("Zhang San".into());
        j.description = Some("archive line data".into());
        j.priority = Priority::new(10).unwrap();
        j.timeout = Some(Duration::from_secs(900));
        j.effective_from = Some(ts("2026-01-01T00:00:00Z"));
        j.expires_at = Some(ts("2099-01-01T00:00:00Z"));
        j.misfire = "fire-all:10@5m".parse().unwrap();
        j.overlap = "queue-one".parse().unwrap();
        j.retry = RetryPolicy::new(3, "10s,30s,60s".parse().unwrap());
        assert_eq!(j.validate(), Ok(()));
        assert!(j.may_fire_at(ts("2026-06-01T00:00:00Z")));
        assert!(!j.may_fire_at(ts("2025-12-31T23:59:59Z")));
        assert!(!j.may_fire_at(ts("2099-01-01T00:00:00Z")));
        j.enabled = false;
        assert!(!j.may_fire_at(ts("2026-06-01T00:00:00Z")));
    }
}
