//! The row forms shared by the SQL stores: a job or run as its columns hold it (instants as
//! Unix milliseconds, policies and schedules in their text forms), and the conversions to and
//! from the core's types. Each backend only moves these between its driver and its tables, so
//! the parsing of stored forms — and its error messages — is the same for every database.

use std::time::Duration;

use jiff::Timestamp;
use takt_core::attempt::{Attempt, AttemptOutcome};
use takt_core::job::{Isolation, JobDef, JobId, JobName, Priority};
use takt_core::node::{InstanceId, NodeInfo, NodeSession, NodeStatus};
use takt_core::pause::{Hold, Pause, PauseKind};
use takt_core::policy::{Backoff, MisfirePolicy, OverlapPolicy, RetryPolicy};
use takt_core::run::{NodeId, PluginBuild, Progress, Run, RunId, RunState, SkipReason, Trigger};
use takt_core::store::access::{ApiToken, OperatorAction, Role};
use takt_core::store::{DueJob, StoreError, StoreResult};

use crate::spec::ScheduleSpec;

/// The columns of `jobs`, in the order [`JobRow`] reads them (every SQL store's schema has
/// them under these names).
pub(crate) const JOB_COLUMNS: &str = "id, name, group_name, handler_type, params_json, schedule_json, \
     enabled, effective_from, expires_at, timeout_ms, retry_max, retry_backoff, retry_timeouts, \
     misfire, overlap, priority, dependencies, node_tag, application, owner, description, \
     isolation, next_fire, version, updated_at, on_success, on_failure";

/// The columns a job's insert and update write: [`JOB_COLUMNS`], then `recurring` — whether
/// the schedule recurs ([`JobDef::is_recurring`]), derived from the definition at every write
/// and never read back: it exists so the claim's fairness rule can read the due recurring
/// jobs alone from an index (`jobs_claim_recurring`). The values are [`JobRow`]'s fields in
/// this order.
pub(crate) static JOB_WRITE_COLUMNS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{JOB_COLUMNS}, recurring"));

/// The columns of `runs`, in the order [`RunRow`] reads them.
pub(crate) const RUN_COLUMNS: &str = "id, job_id, fire_time, state, attempt, created_at, started_at, \
     finished_at, node_id, lease_expires_at, error, result_json, elapsed_ms, progress_done, \
     progress_total, progress_message, skip_reason, next_attempt_at, node_instance, plugin, \
     plugin_version, plugin_sha256, triggered_by, parent_run_id, params_resolved";

/// A stored value the store cannot read back: someone edited the row by hand, or a newer
/// takt wrote a form this one does not know.
pub(crate) fn corrupt(
    path: &str,
    row: &str,
    column: &str,
    detail: impl std::fmt::Display,
) -> StoreError {
    StoreError::other(format!(
        "{row} in {path} has an unreadable {column} ({detail}); fix the row (see \
         the schema files in sql/ for the forms) or restore a backup"
    ))
}

/// The `dependencies` column: a JSON array of job names, or — when the job has a
/// `dependency_wait` — an object `{"on": [names], "wait_ms": n}`. The wait lives with the
/// list it belongs to, so the column that existed since the first schema holds both (an
/// older takt reading the object form refuses the row with the column named, never guesses).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum StoredDependencies {
    List(Vec<String>),
    Waiting { on: Vec<String>, wait_ms: u64 },
}

/// A continuation column of job `id` (`on_success` / `on_failure`: a JSON array of job names)
/// parsed, as a job read parses it. Most jobs list none: `[]` is answered without parsing.
pub(crate) fn continuation_names(
    path: &str,
    id: i64,
    column: &str,
    text: &str,
) -> StoreResult<Vec<JobName>> {
    if text == "[]" {
        return Ok(Vec::new());
    }
    let bad = |detail: &dyn std::fmt::Display| corrupt(path, &format!("job {id}"), column, detail);
    let names: Vec<String> = serde_json::from_str(text).map_err(|e| bad(&e))?;
    names
        .iter()
        .map(|n| JobName::new(n).map_err(|e| bad(&e)))
        .collect()
}

/// A `jobs` row as stored, before its texts are parsed.
pub(crate) struct JobRow {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) group: Option<String>,
    pub(crate) handler_type: String,
    pub(crate) params_json: String,
    pub(crate) schedule_json: Option<String>,
    pub(crate) enabled: bool,
    pub(crate) effective_from: Option<i64>,
    pub(crate) expires_at: Option<i64>,
    pub(crate) timeout_ms: Option<i64>,
    pub(crate) retry_max: i64,
    pub(crate) retry_backoff: String,
    pub(crate) retry_timeouts: bool,
    pub(crate) misfire: String,
    pub(crate) overlap: String,
    pub(crate) priority: i64,
    pub(crate) dependencies: String,
    pub(crate) node_tag: Option<String>,
    pub(crate) application: Option<String>,
    pub(crate) owner: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) isolation: String,
    pub(crate) next_fire: Option<i64>,
    pub(crate) version: i64,
    pub(crate) updated_at: i64,
    /// JSON arrays of job names.
    pub(crate) on_success: String,
    pub(crate) on_failure: String,
    /// Written only ([`JOB_WRITE_COLUMNS`]); `false` in a row read back.
    pub(crate) recurring: bool,
}

impl JobRow {
    pub(crate) fn into_job(self, path: &str) -> StoreResult<JobDef> {
        let row = format!("job {}", self.id);
        let bad =
            |column: &str, detail: &dyn std::fmt::Display| corrupt(path, &row, column, detail);
        let ts = |column: &str, v: i64| Timestamp::from_millisecond(v).map_err(|e| bad(column, &e));
        let opt_ts = |column: &str, v: Option<i64>| v.map(|v| ts(column, v)).transpose();
        let schedule = match &self.schedule_json {
            None => None,
            Some(json) => {
                let spec: ScheduleSpec =
                    serde_json::from_str(json).map_err(|e| bad("schedule_json", &e))?;
                Some(spec.to_schedule().map_err(|e| bad("schedule_json", &e))?)
            }
        };
        let stored: StoredDependencies =
            serde_json::from_str(&self.dependencies).map_err(|e| bad("dependencies", &e))?;
        let (deps, dependency_wait) = match stored {
            StoredDependencies::List(on) => (on, None),
            StoredDependencies::Waiting { on, wait_ms } => {
                (on, Some(Duration::from_millis(wait_ms)))
            }
        };
        let dependencies = deps
            .iter()
            .map(|d| JobName::new(d).map_err(|e| bad("dependencies", &e)))
            .collect::<StoreResult<Vec<_>>>()?;
        let names = |column: &str, text: &str| continuation_names(path, self.id, column, text);
        let on_success = names("on_success", &self.on_success)?;
        let on_failure = names("on_failure", &self.on_failure)?;
        let backoff: Backoff = self
            .retry_backoff
            .parse()
            .map_err(|e| bad("retry_backoff", &e))?;
        let retry = RetryPolicy {
            max_retries: u32::try_from(self.retry_max)
                .map_err(|_| bad("retry_max", &self.retry_max))?,
            backoff,
            retry_timeouts: self.retry_timeouts,
        };
        let priority = u16::try_from(self.priority)
            .ok()
            .and_then(|p| Priority::new(p).ok())
            .ok_or_else(|| bad("priority", &self.priority))?;
        let timeout = self
            .timeout_ms
            .map(|t| {
                u64::try_from(t)
                    .map(Duration::from_millis)
                    .map_err(|_| bad("timeout_ms", &t))
            })
            .transpose()?;
        Ok(JobDef {
            id: Some(JobId(self.id)),
            name: JobName::new(&self.name).map_err(|e| bad("name", &e))?,
            group: self.group,
            handler_type: self.handler_type,
            params_json: self.params_json,
            schedule,
            enabled: self.enabled,
            effective_from: opt_ts("effective_from", self.effective_from)?,
            expires_at: opt_ts("expires_at", self.expires_at)?,
            timeout,
            retry,
            misfire: self
                .misfire
                .parse::<MisfirePolicy>()
                .map_err(|e| bad("misfire", &e))?,
            overlap: self
                .overlap
                .parse::<OverlapPolicy>()
                .map_err(|e| bad("overlap", &e))?,
            priority,
            dependencies,
            dependency_wait,
            node_tag: self.node_tag,
            application: self.application,
            owner: self.owner,
            description: self.description,
            isolation: self
                .isolation
                .parse::<Isolation>()
                .map_err(|e| bad("isolation", &e))?,
            on_success,
            on_failure,
            next_fire: opt_ts("next_fire", self.next_fire)?,
            version: u64::try_from(self.version).map_err(|_| bad("version", &self.version))?,
            updated_at: Some(ts("updated_at", self.updated_at)?),
        })
    }
}

/// A `runs` row as stored.
pub(crate) struct RunRow {
    pub(crate) id: i64,
    pub(crate) job_id: i64,
    pub(crate) fire_time: i64,
    pub(crate) state: String,
    pub(crate) attempt: i64,
    pub(crate) created_at: i64,
    pub(crate) started_at: Option<i64>,
    pub(crate) finished_at: Option<i64>,
    pub(crate) node_id: Option<String>,
    pub(crate) lease_expires_at: Option<i64>,
    pub(crate) error: Option<String>,
    pub(crate) result_json: Option<String>,
    pub(crate) elapsed_ms: Option<i64>,
    pub(crate) progress_done: Option<i64>,
    pub(crate) progress_total: Option<i64>,
    pub(crate) progress_message: Option<String>,
    pub(crate) skip_reason: Option<String>,
    pub(crate) next_attempt_at: Option<i64>,
    pub(crate) node_instance: Option<String>,
    pub(crate) plugin: Option<String>,
    pub(crate) plugin_version: Option<String>,
    pub(crate) plugin_sha256: Option<String>,
    /// NULL for runs recorded before the column existed (unknown).
    pub(crate) trigger: Option<String>,
    pub(crate) parent_run_id: Option<i64>,
    pub(crate) params_resolved: Option<String>,
}

impl RunRow {
    pub(crate) fn into_run(self, path: &str) -> StoreResult<Run> {
        let row = format!("run {}", self.id);
        let bad =
            |column: &str, detail: &dyn std::fmt::Display| corrupt(path, &row, column, detail);
        let ts = |column: &str, v: i64| Timestamp::from_millisecond(v).map_err(|e| bad(column, &e));
        let opt_ts = |column: &str, v: Option<i64>| v.map(|v| ts(column, v)).transpose();
        let unsigned = |column: &str, v: i64| u64::try_from(v).map_err(|_| bad(column, &v));
        let progress = match (self.progress_done, self.progress_total) {
            (Some(done), Some(total)) => Some(Progress {
                done: unsigned("progress_done", done)?,
                total: unsigned("progress_total", total)?,
                message: self.progress_message.unwrap_or_default(),
            }),
            _ => None,
        };
        Ok(Run {
            id: Some(RunId(self.id)),
            job_id: JobId(self.job_id),
            fire_time: ts("fire_time", self.fire_time)?,
            state: RunState::from_name(&self.state).ok_or_else(|| bad("state", &self.state))?,
            attempt: u32::try_from(self.attempt).map_err(|_| bad("attempt", &self.attempt))?,
            created_at: ts("created_at", self.created_at)?,
            started_at: opt_ts("started_at", self.started_at)?,
            finished_at: opt_ts("finished_at", self.finished_at)?,
            node_id: self.node_id.map(NodeId),
            lease_expires_at: opt_ts("lease_expires_at", self.lease_expires_at)?,
            error: self.error,
            result_json: self.result_json,
            elapsed: self
                .elapsed_ms
                .map(|e| unsigned("elapsed_ms", e).map(Duration::from_millis))
                .transpose()?,
            progress,
            skip_reason: self
                .skip_reason
                .map(|s| SkipReason::from_name(&s).ok_or_else(|| bad("skip_reason", &s)))
                .transpose()?,
            next_attempt_at: opt_ts("next_attempt_at", self.next_attempt_at)?,
            node_instance: self.node_instance.map(InstanceId),
            // A name without a version is a row edited by hand; read what is there.
            plugin: self.plugin.map(|name| PluginBuild {
                name,
                version: self.plugin_version.unwrap_or_default(),
                sha256: self.plugin_sha256,
            }),
            trigger: self
                .trigger
                .map(|t| Trigger::from_name(&t).ok_or_else(|| bad("triggered_by", &t)))
                .transpose()?,
            parent_run_id: self.parent_run_id.map(RunId),
            params_resolved: self.params_resolved,
        })
    }
}

fn ms(t: Timestamp) -> i64 {
    t.as_millisecond()
}

fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `v` as a database integer, or an `invalid` error naming `what`.
pub(crate) fn to_i64(v: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| {
        StoreError::invalid(format!(
            "{what} {v} is too large for the database (at most {}); use a smaller value",
            i64::MAX
        ))
    })
}

impl JobRow {
    /// The row of `job` as a store writes it (id 0 and version 0 when the job has none yet;
    /// `updated_at` is `now`).
    pub(crate) fn of(job: &JobDef, now: Timestamp) -> StoreResult<JobRow> {
        let schedule_json = job
            .schedule
            .as_ref()
            .map(|s| {
                serde_json::to_string(&ScheduleSpec::from_schedule(s)).map_err(|e| {
                    StoreError::invalid(format!(
                        "the schedule of job {} cannot be written as JSON ({e})",
                        job.name
                    ))
                })
            })
            .transpose()?;
        let on: Vec<String> = job.dependencies.iter().map(|d| d.to_string()).collect();
        let stored = match job.dependency_wait {
            None => StoredDependencies::List(on),
            Some(w) => StoredDependencies::Waiting {
                on,
                wait_ms: u64::try_from(w.as_millis()).unwrap_or(u64::MAX),
            },
        };
        let dependencies = serde_json::to_string(&stored).map_err(|e| {
            StoreError::invalid(format!(
                "the dependencies of job {} cannot be written as JSON ({e})",
                job.name
            ))
        })?;
        let names = |field: &str, list: &[JobName]| {
            let names: Vec<&str> = list.iter().map(JobName::as_str).collect();
            serde_json::to_string(&names).map_err(|e| {
                StoreError::invalid(format!(
                    "the {field} of job {} cannot be written as JSON ({e})",
                    job.name
                ))
            })
        };
        Ok(JobRow {
            recurring: job.is_recurring(),
            on_success: names("on_success", &job.on_success)?,
            on_failure: names("on_failure", &job.on_failure)?,
            id: job.id.map_or(0, |id| id.0),
            name: job.name.as_str().to_string(),
            group: job.group.clone(),
            handler_type: job.handler_type.clone(),
            params_json: job.params_json.clone(),
            schedule_json,
            enabled: job.enabled,
            effective_from: job.effective_from.map(ms),
            expires_at: job.expires_at.map(ms),
            timeout_ms: job.timeout.map(dur_ms),
            retry_max: i64::from(job.retry.max_retries),
            retry_backoff: job.retry.backoff.to_string(),
            retry_timeouts: job.retry.retry_timeouts,
            misfire: job.misfire.to_string(),
            overlap: job.overlap.to_string(),
            priority: i64::from(job.priority.get()),
            dependencies,
            node_tag: job.node_tag.clone(),
            application: job.application.clone(),
            owner: job.owner.clone(),
            description: job.description.clone(),
            isolation: job.isolation.name().to_string(),
            next_fire: job.next_fire.map(ms),
            version: to_i64(job.version, "job version")?,
            updated_at: ms(now),
        })
    }
}

impl RunRow {
    /// The row of `run` as a store writes it (id 0 when the run has none yet).
    pub(crate) fn of(run: &Run) -> StoreResult<RunRow> {
        let (done, total, message) = match &run.progress {
            Some(p) => (
                Some(to_i64(p.done, "progress done")?),
                Some(to_i64(p.total, "progress total")?),
                Some(p.message.clone()),
            ),
            None => (None, None, None),
        };
        Ok(RunRow {
            id: run.id.map_or(0, |id| id.0),
            job_id: run.job_id.0,
            fire_time: ms(run.fire_time),
            state: run.state.name().to_string(),
            attempt: i64::from(run.attempt),
            created_at: ms(run.created_at),
            started_at: run.started_at.map(ms),
            finished_at: run.finished_at.map(ms),
            node_id: run.node_id.as_ref().map(|n| n.0.clone()),
            lease_expires_at: run.lease_expires_at.map(ms),
            error: run.error.clone(),
            result_json: run.result_json.clone(),
            elapsed_ms: run.elapsed.map(dur_ms),
            progress_done: done,
            progress_total: total,
            progress_message: message,
            skip_reason: run.skip_reason.map(|s| s.name().to_string()),
            next_attempt_at: run.next_attempt_at.map(ms),
            plugin: run.plugin.as_ref().map(|p| p.name.clone()),
            plugin_version: run.plugin.as_ref().map(|p| p.version.clone()),
            plugin_sha256: run.plugin.as_ref().and_then(|p| p.sha256.clone()),
            node_instance: run.node_instance.as_ref().map(|i| i.0.clone()),
            trigger: run.trigger.map(|t| t.name().to_string()),
            parent_run_id: run.parent_run_id.map(|p| p.0),
            params_resolved: run.params_resolved.clone(),
        })
    }
}

/// The columns of `nodes`, in the order [`NodeRow`] reads them, followed (in a node listing)
/// by the count of the node's running runs.
pub(crate) const NODE_COLUMNS: &str = "id, instance, host_name, pid, version, capacity, tags, \
     started_at, heartbeat_at, stopped_at";

/// A `nodes` row as stored.
pub(crate) struct NodeRow {
    pub(crate) id: String,
    pub(crate) instance: Option<String>,
    pub(crate) host_name: String,
    pub(crate) pid: Option<i64>,
    pub(crate) version: String,
    pub(crate) capacity: i64,
    pub(crate) tags: String,
    pub(crate) started_at: Option<i64>,
    pub(crate) heartbeat_at: Option<i64>,
    pub(crate) stopped_at: Option<i64>,
}

impl NodeRow {
    /// The row of `node` as registered at `now`.
    pub(crate) fn of(node: &NodeInfo, now: Timestamp) -> NodeRow {
        NodeRow {
            id: node.id.0.clone(),
            instance: Some(node.instance.0.clone()),
            host_name: node.host_name.clone(),
            pid: Some(i64::from(node.pid)),
            version: node.version.clone(),
            capacity: i64::try_from(node.capacity).unwrap_or(i64::MAX),
            tags: serde_json::to_string(&node.tags).unwrap_or_else(|_| "[]".into()),
            started_at: Some(ms(now)),
            heartbeat_at: Some(ms(now)),
            stopped_at: None,
        }
    }

    /// The node as listed, with `running` runs. A row from before instances were recorded
    /// reads with an empty instance (no life of today's takt has it).
    pub(crate) fn into_status(self, path: &str, running: i64) -> StoreResult<NodeStatus> {
        let row = format!("node {}", self.id);
        let bad =
            |column: &str, detail: &dyn std::fmt::Display| corrupt(path, &row, column, detail);
        let opt_ts = |column: &str, v: Option<i64>| {
            v.map(|v| Timestamp::from_millisecond(v).map_err(|e| bad(column, &e)))
                .transpose()
        };
        Ok(NodeStatus {
            info: NodeInfo {
                id: NodeId(self.id.clone()),
                instance: InstanceId(self.instance.unwrap_or_default()),
                host_name: self.host_name,
                pid: self
                    .pid
                    .map_or(Ok(0), |p| u32::try_from(p).map_err(|_| bad("pid", &p)))?,
                version: self.version,
                capacity: usize::try_from(self.capacity)
                    .map_err(|_| bad("capacity", &self.capacity))?,
                tags: serde_json::from_str(&self.tags).map_err(|e| bad("tags", &e))?,
            },
            started_at: opt_ts("started_at", self.started_at)?,
            heartbeat_at: opt_ts("heartbeat_at", self.heartbeat_at)?,
            stopped_at: opt_ts("stopped_at", self.stopped_at)?,
            running: u64::try_from(running).unwrap_or(0),
        })
    }
}

/// A due job as the due queries read it: the claim-order columns the loop decides on, and
/// the job's running and pending run counts.
pub(crate) struct DueRow {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) next_fire: i64,
    pub(crate) misfire: String,
    pub(crate) overlap: String,
    pub(crate) running: i64,
    pub(crate) pending: i64,
}

impl DueRow {
    pub(crate) fn into_due(self, path: &str) -> StoreResult<DueJob> {
        let row = format!("job {}", self.id);
        let bad =
            |column: &str, detail: &dyn std::fmt::Display| corrupt(path, &row, column, detail);
        let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(DueJob {
            id: JobId(self.id),
            name: JobName::new(&self.name).map_err(|e| bad("name", &e))?,
            next_fire: Timestamp::from_millisecond(self.next_fire)
                .map_err(|e| bad("next_fire", &e))?,
            misfire: self
                .misfire
                .parse::<MisfirePolicy>()
                .map_err(|e| bad("misfire", &e))?,
            overlap: self
                .overlap
                .parse::<OverlapPolicy>()
                .map_err(|e| bad("overlap", &e))?,
            running: count(self.running),
            pending: count(self.pending),
        })
    }
}

/// The columns of `job_holds` after `job_id`, in the order [`HoldRow`] reads them.
pub(crate) const HOLD_COLUMNS: &str = "next_fire, paused_at, paused_by, pause_reason";

/// The columns of `pauses` after `kind, name`, in the order [`PauseRow`] reads them.
pub(crate) const PAUSE_COLUMNS: &str = "paused_at, paused_by, pause_reason";

/// A `job_holds` row: a held job's kept-aside next fire and its own pause (all three pause
/// columns NULL when only its group's pause holds it).
pub(crate) struct HoldRow {
    pub(crate) next_fire: Option<i64>,
    pub(crate) paused_at: Option<i64>,
    pub(crate) paused_by: Option<String>,
    pub(crate) reason: Option<String>,
}

impl HoldRow {
    pub(crate) fn of(hold: &Hold) -> HoldRow {
        HoldRow {
            next_fire: hold.next_fire.map(ms),
            paused_at: hold.pause.as_ref().map(|p| ms(p.at)),
            paused_by: hold.pause.as_ref().map(|p| p.by.clone()),
            reason: hold.pause.as_ref().and_then(|p| p.reason.clone()),
        }
    }

    pub(crate) fn into_hold(self, path: &str, job: i64) -> StoreResult<Hold> {
        let row = format!("the hold of job {job}");
        let at =
            |c: &str, v: i64| Timestamp::from_millisecond(v).map_err(|e| corrupt(path, &row, c, e));
        let next_fire = self.next_fire.map(|v| at("next_fire", v)).transpose()?;
        let pause = match (self.paused_at, self.paused_by) {
            (Some(t), Some(by)) => Some(Pause {
                at: at("paused_at", t)?,
                by,
                reason: self.reason,
            }),
            (None, None) => None,
            _ => return Err(corrupt(path, &row, "paused_by", "half of a pause")),
        };
        Ok(Hold { next_fire, pause })
    }
}

/// A `pauses` row (a group's or a node's pause).
pub(crate) struct PauseRow {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) paused_at: i64,
    pub(crate) paused_by: String,
    pub(crate) reason: Option<String>,
}

impl PauseRow {
    pub(crate) fn into_pause(self, path: &str) -> StoreResult<(PauseKind, String, Pause)> {
        let row = format!("the pause of {} {}", self.kind, self.name);
        let kind = PauseKind::from_name(&self.kind)
            .ok_or_else(|| corrupt(path, &row, "kind", "not group or node"))?;
        let at = Timestamp::from_millisecond(self.paused_at)
            .map_err(|e| corrupt(path, &row, "paused_at", e))?;
        Ok((
            kind,
            self.name,
            Pause {
                at,
                by: self.paused_by,
                reason: self.reason,
            },
        ))
    }
}

/// The columns of an attempt joined with its run (`a`: run_attempts, `r`: runs), in the order
/// [`AttemptRow`] reads them.
pub(crate) const ATTEMPT_COLUMNS: &str = "a.run_id, r.job_id, r.fire_time, a.attempt, a.node_id, \
     a.node_instance, a.started_at, a.finished_at, a.outcome, a.error";

/// A `run_attempts` row with its run's job and fire time.
pub(crate) struct AttemptRow {
    pub(crate) run_id: i64,
    pub(crate) job_id: i64,
    pub(crate) fire_time: i64,
    pub(crate) attempt: i64,
    pub(crate) node_id: String,
    pub(crate) node_instance: Option<String>,
    pub(crate) started_at: i64,
    pub(crate) finished_at: Option<i64>,
    pub(crate) outcome: Option<String>,
    pub(crate) error: Option<String>,
}

impl AttemptRow {
    pub(crate) fn into_attempt(self, path: &str) -> StoreResult<Attempt> {
        let row = format!("attempt {} of run {}", self.attempt, self.run_id);
        let bad =
            |column: &str, detail: &dyn std::fmt::Display| corrupt(path, &row, column, detail);
        let ts = |column: &str, v: i64| Timestamp::from_millisecond(v).map_err(|e| bad(column, &e));
        Ok(Attempt {
            run_id: RunId(self.run_id),
            job_id: JobId(self.job_id),
            fire_time: ts("fire_time", self.fire_time)?,
            attempt: u32::try_from(self.attempt).map_err(|_| bad("attempt", &self.attempt))?,
            node_id: NodeId(self.node_id),
            node_instance: self.node_instance.map(InstanceId),
            started_at: ts("started_at", self.started_at)?,
            finished_at: self.finished_at.map(|v| ts("finished_at", v)).transpose()?,
            outcome: self
                .outcome
                .as_deref()
                .map(|o| AttemptOutcome::from_name(o).ok_or_else(|| bad("outcome", &o)))
                .transpose()?,
            error: self.error,
        })
    }
}

/// The columns of `node_sessions`, in the order [`SessionRow`] reads them.
pub(crate) const SESSION_COLUMNS: &str =
    "node_id, instance, host_name, started_at, heartbeat_at, stopped_at";

/// A `node_sessions` row as stored.
pub(crate) struct SessionRow {
    pub(crate) node_id: String,
    pub(crate) instance: String,
    pub(crate) host_name: String,
    pub(crate) started_at: i64,
    pub(crate) heartbeat_at: i64,
    pub(crate) stopped_at: Option<i64>,
}

impl SessionRow {
    pub(crate) fn into_session(self, path: &str) -> StoreResult<NodeSession> {
        let row = format!("node life {}", self.instance);
        let bad =
            |column: &str, detail: &dyn std::fmt::Display| corrupt(path, &row, column, detail);
        let ts = |column: &str, v: i64| Timestamp::from_millisecond(v).map_err(|e| bad(column, &e));
        Ok(NodeSession {
            node_id: NodeId(self.node_id),
            instance: InstanceId(self.instance),
            host_name: self.host_name,
            started_at: ts("started_at", self.started_at)?,
            heartbeat_at: ts("heartbeat_at", self.heartbeat_at)?,
            stopped_at: self.stopped_at.map(|v| ts("stopped_at", v)).transpose()?,
        })
    }
}

/// The columns of `api_tokens`, in [`TokenRow`]'s order.
pub(crate) const TOKEN_COLUMNS: &str = "id, name, role, sha256, created_at, revoked_at";

/// The columns of `operator_actions`, in [`ActionRow`]'s order.
pub(crate) const ACTION_COLUMNS: &str = "id, at, actor, action, job_name, run_id, detail";

/// An `api_tokens` row as stored (instants as Unix ms).
pub(crate) struct TokenRow {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) role: String,
    pub(crate) sha256: String,
    pub(crate) created_at: i64,
    pub(crate) revoked_at: Option<i64>,
}

impl TokenRow {
    /// The token, or a `corrupt` error naming the row.
    pub(crate) fn into_token(self, path: &str) -> StoreResult<ApiToken> {
        let row = format!("token \"{}\"", self.name);
        let at = |v: i64, column: &str| {
            Timestamp::from_millisecond(v).map_err(|e| corrupt(path, &row, column, e))
        };
        Ok(ApiToken {
            id: self.id,
            role: self
                .role
                .parse::<Role>()
                .map_err(|e| corrupt(path, &row, "role", e))?,
            created_at: at(self.created_at, "created_at")?,
            revoked_at: self.revoked_at.map(|v| at(v, "revoked_at")).transpose()?,
            name: self.name,
            sha256: self.sha256,
        })
    }
}

/// An `operator_actions` row as stored (instants as Unix ms).
pub(crate) struct ActionRow {
    pub(crate) id: i64,
    pub(crate) at: i64,
    pub(crate) actor: String,
    pub(crate) action: String,
    pub(crate) job: Option<String>,
    pub(crate) run: Option<i64>,
    pub(crate) detail: Option<String>,
}

impl ActionRow {
    /// The action, or a `corrupt` error naming the row.
    pub(crate) fn into_action(self, path: &str) -> StoreResult<OperatorAction> {
        let row = format!("operator action {}", self.id);
        Ok(OperatorAction {
            id: self.id,
            at: Timestamp::from_millisecond(self.at).map_err(|e| corrupt(path, &row, "at", e))?,
            actor: self.actor,
            action: self.action,
            job: self.job,
            run: self.run.map(RunId),
            detail: self.detail,
        })
    }
}

/// The columns of `alert_deliveries`, in the order [`DeliveryRow`] holds them.
pub(crate) const DELIVERY_COLUMNS: &str =
    "id, at, node, channel, subject, condition, kind, run_id, outcome, detail";

/// An `alert_deliveries` row as its columns hold it (`at` in Unix milliseconds).
pub(crate) struct DeliveryRow {
    pub(crate) id: i64,
    pub(crate) at_ms: i64,
    pub(crate) node: String,
    pub(crate) channel: String,
    pub(crate) subject: String,
    pub(crate) condition: String,
    pub(crate) kind: String,
    pub(crate) run: Option<i64>,
    pub(crate) outcome: String,
    pub(crate) detail: String,
}

impl DeliveryRow {
    /// The delivery, or what is unreadable about the row (in `path`).
    pub(crate) fn into_delivery(self, path: &str) -> StoreResult<takt_core::alert::AlertDelivery> {
        let row = format!("alert delivery {}", self.id);
        let at =
            Timestamp::from_millisecond(self.at_ms).map_err(|e| corrupt(path, &row, "at", e))?;
        let outcome = takt_core::alert::DeliveryOutcome::from_name(&self.outcome)
            .ok_or_else(|| corrupt(path, &row, "outcome", &self.outcome))?;
        Ok(takt_core::alert::AlertDelivery {
            id: Some(self.id),
            at,
            node: self.node,
            channel: self.channel,
            key: takt_core::alert::AlertKey {
                subject: self.subject,
                condition: self.condition,
            },
            kind: self.kind,
            run: self.run,
            outcome,
            detail: self.detail,
        })
    }
}

/// A `job_groups` row as a [`GroupDef`] (every backend reads the same columns); a
/// `max_running` below 1 or out of range is a corrupt row, not a limit.
pub(crate) fn group_def(
    path: &str,
    name: &str,
    max_running: Option<i64>,
    released_at: Option<Timestamp>,
) -> StoreResult<takt_core::group::GroupDef> {
    let max_running = max_running
        .map(|n| {
            u32::try_from(n)
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| corrupt(path, &format!("group {name}"), "max_running", n))
        })
        .transpose()?;
    Ok(takt_core::group::GroupDef {
        max_running,
        released_at,
    })
}
