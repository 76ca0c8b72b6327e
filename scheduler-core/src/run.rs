//! Runs and their state machine.
//!
//! A [`Run`] is one scheduled fire of a job: unique per `(job, fire time)` (the seeds'
//! duplicate-execution lesson), re-used by its retries (attempt += 1, same fire time; seed 003
//! §3.4). Its life is a pure function, [`transition`]: (state, event, now) → new state, attempt
//! and retry time; what the host does about it (record, retry, notify) is the scheduling
//! loop's decision (`takt_host::scheduler`'s machine), not listed here. An event that makes no sense in a state (a success of a
//! run that never started, anything after a final state) is a [`TransitionError`], never a
//! silent no-op: it usually means two nodes raced for one run, and the store's compare-and-set
//! should lose loudly.
//!
//! ```text
//!             Claimed             Succeeded
//!  pending ───────────► running ────────────► succeeded
//!   │  ▲                  │ Failed / TimedOut / LeaseExpired / NodeRestarted
//!   │  └── retry left ────┤ (retryable, attempts left: attempt += 1, next_attempt_at)
//!   │                     ├──────────────────► failed | timed_out
//!   │ Skip                │ Cancelled
//!   ├──► skipped          └──────────────────► cancelled
//!   └── Cancelled ───────────────────────────► cancelled
//! ```
//!
//! Decisions:
//! * Claiming a run is starting it: seed 000 §6.3's overlap bug came from a run that sat in
//!   "pending" after a worker took it, so there is no separate "started" event.
//! * A retry becomes claimable when `next_attempt_at` has passed; claiming earlier is an error
//!   ([`TransitionError::NotDue`]), so no "retry due" event is needed.
//! * A failure is retried only if the handler marked it retryable and attempts remain; a
//!   non-retryable plugin error (bad parameters, a missing file) fails the run at once.
//! * A timeout is retried only if [`RetryPolicy::retry_timeouts`] is set (off by default).
//! * A cancel is never retried, and a shutdown is a cancel, not a timeout (seed 003 §3.3).
//! * A lost lease or a node restart fails the attempt with a fixed message and retries it per
//!   policy, as a retryable failure.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

use crate::job::JobId;
use crate::node::InstanceId;
use crate::policy::RetryPolicy;
use crate::policy::retry::jitter_seed;
use crate::schedule;

/// A run's id in its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunId(pub i64);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The id of a host node (seed 003's `NodeId`, seed 000's `ExecMachine`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub String);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a run is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunState {
    /// Waiting to be claimed (first attempt, or a retry waiting for `next_attempt_at`).
    Pending,
    /// Claimed by a node and executing.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished with an error and no retry left.
    Failed,
    /// Stopped at its timeout and not retried.
    TimedOut,
    /// Cancelled on request or by a shutdown.
    Cancelled,
    /// Never ran; see [`SkipReason`].
    Skipped,
}

impl RunState {
    /// Whether no event can change this state any more.
    pub fn is_final(self) -> bool {
        !matches!(self, RunState::Pending | RunState::Running)
    }

    /// The lowercase name used in storage, the CLI and the API (`timed_out`).
    pub fn name(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::TimedOut => "timed_out",
            RunState::Cancelled => "cancelled",
            RunState::Skipped => "skipped",
        }
    }

    /// Every state, in life order.
    pub const ALL: [RunState; 7] = [
        RunState::Pending,
        RunState::Running,
        RunState::Succeeded,
        RunState::Failed,
        RunState::TimedOut,
        RunState::Cancelled,
        RunState::Skipped,
    ];

    /// The state named `name` (as [`RunState::name`] writes it).
    pub fn from_name(name: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a run came to be (issue 15 item 9), recorded once when the run is created and never
/// changed: a retry is another attempt of the same run (see [`crate::attempt`]), not a new
/// run, so it keeps its run's trigger and shows as attempt 2, 3 ….
///
/// Decided by the store engine: a backfill (engine/backfill.rs) records `backfill`; the claim
/// (engine/claim.rs), where every other run of a fire is created, decides the rest: a fire that is not an occurrence of the job's schedule
/// (or of a job without one) was put there by a trigger ([`Trigger::Manual`]); a fire later
/// than the job's misfire lateness window was released by its misfire policy
/// ([`Trigger::CatchUp`]); anything else is [`Trigger::Schedule`]. A trigger in the same
/// second as a scheduled fire *is* that fire, so it records `schedule`.
///
/// Runs recorded before the trigger column existed read as `None` (unknown): a manual run
/// cannot be told from a scheduled one after the fact, so no value is guessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trigger {
    /// A fire of the job's schedule, on time (within the misfire lateness window), and the
    /// skipped or queued records of such fires.
    Schedule,
    /// A missed fire the misfire policy (`fire-once`, `fire-all`) released late.
    CatchUp,
    /// Run by hand: `takt job trigger`, `SchedulerHandle::trigger`, the API.
    Manual,
    /// A past fire filled in by `takt job backfill` ([`crate::store::Store::run_backfill`]).
    Backfill,
    /// Started by the final state of another run (a job's `on_success` / `on_failure`,
    /// [`crate::job::JobDef::on_success`]); the run records that parent
    /// ([`Run::parent_run_id`]). Created by the store engine in the transaction of the
    /// parent's finish (engine/continuation.rs).
    Continuation,
}

impl Trigger {
    /// The lowercase name used in storage, the CLI and the API.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::CatchUp => "catch_up",
            Trigger::Manual => "manual",
            Trigger::Backfill => "backfill",
            Trigger::Continuation => "continuation",
        }
    }

    /// Every trigger.
    pub const ALL: [Trigger; 5] = [
        Trigger::Schedule,
        Trigger::CatchUp,
        Trigger::Manual,
        Trigger::Backfill,
        Trigger::Continuation,
    ];

    /// The trigger named `name` (as [`Trigger::name`] writes it).
    pub fn from_name(name: &str) -> Option<Trigger> {
        Trigger::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a run was recorded as skipped instead of running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SkipReason {
    /// Later than the misfire lateness window, and the misfire policy did not run it.
    Misfire,
    /// The job's previous run was still going (overlap policy).
    Overlap,
    /// The job or its group was paused.
    Paused,
    /// A dependency's run for the same period did not succeed.
    Dependency,
    /// The wall-clock time fell into a daylight-saving gap and the schedule skips gaps.
    DstGap,
    /// The job was disabled after the run was created.
    Disabled,
    /// The job's expiry passed (or its effective date had not come) before the run started.
    OutsideValidity,
    /// A member of the job's group did not succeed, so the group's time point was not run.
    Group,
}

impl SkipReason {
    /// The lowercase name used in storage, the CLI and the API.
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::Misfire => "misfire",
            SkipReason::Overlap => "overlap",
            SkipReason::Paused => "paused",
            SkipReason::Dependency => "dependency",
            SkipReason::DstGap => "dst_gap",
            SkipReason::Disabled => "disabled",
            SkipReason::OutsideValidity => "outside_validity",
            SkipReason::Group => "group",
        }
    }

    /// Every reason.
    pub const ALL: [SkipReason; 8] = [
        SkipReason::Misfire,
        SkipReason::Overlap,
        SkipReason::Paused,
        SkipReason::Dependency,
        SkipReason::DstGap,
        SkipReason::Disabled,
        SkipReason::OutsideValidity,
        SkipReason::Group,
    ];

    /// The reason named `name` (as [`SkipReason::name`] writes it).
    pub fn from_name(name: &str) -> Option<SkipReason> {
        SkipReason::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<schedule::SkipReason> for SkipReason {
    fn from(r: schedule::SkipReason) -> Self {
        match r {
            schedule::SkipReason::DstGap => SkipReason::DstGap,
        }
    }
}

/// Why a run was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// An operator or the overlap policy asked for it.
    Requested,
    /// The host shut down before the run finished (never recorded as a timeout).
    Shutdown,
}

impl CancelReason {
    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            CancelReason::Requested => "requested",
            CancelReason::Shutdown => "shutdown",
        }
    }
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A handler's progress report: `done` of `total`, with a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Units done.
    pub done: u64,
    /// Units in all (0 when unknown).
    pub total: u64,
    /// What is happening.
    pub message: String,
}

/// Which build of which plugin ran an attempt: what an operator needs to tell, after a hot
/// swap, whether a run was served by the old or the new version of a plugin file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PluginBuild {
    /// The plugin's name (the first half of its HandlerTypes).
    pub name: String,
    /// The version the plugin reports.
    pub version: String,
    /// The SHA-256 (lowercase hex) of the plugin file; `None` for a plugin compiled into the
    /// host, which has no file.
    pub sha256: Option<String>,
}

/// One scheduled fire of a job, with everything storage records about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// The id (`None` until stored).
    pub id: Option<RunId>,
    /// The job.
    pub job_id: JobId,
    /// The scheduled fire time; unique together with `job_id`, unchanged by retries.
    pub fire_time: Timestamp,
    /// The state.
    pub state: RunState,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// When the run was recorded.
    pub created_at: Timestamp,
    /// When the latest attempt was claimed.
    pub started_at: Option<Timestamp>,
    /// When the run reached a final state.
    pub finished_at: Option<Timestamp>,
    /// The node running (or that last ran) it.
    pub node_id: Option<NodeId>,
    /// The life of that node that claimed the latest attempt ([`crate::node::InstanceId`]):
    /// lease renewal and restart recovery act on instances, so a restart never fails a run
    /// another live process of the same node id holds.
    pub node_instance: Option<InstanceId>,
    /// Until when the node holds the run; after that another node may recover it.
    pub lease_expires_at: Option<Timestamp>,
    /// The latest error (kept on a retry so an operator sees why it was retried).
    pub error: Option<String>,
    /// The handler's result JSON.
    pub result_json: Option<String>,
    /// How long the latest attempt ran.
    pub elapsed: Option<Duration>,
    /// The latest progress report.
    pub progress: Option<Progress>,
    /// Why it was skipped (state `skipped` only).
    pub skip_reason: Option<SkipReason>,
    /// When a retry may be claimed (state `pending` after a failed attempt).
    pub next_attempt_at: Option<Timestamp>,
    /// The plugin build that ran the latest attempt that ended (recorded with its end;
    /// `None` before one ended, and for attempts that never reached a plugin).
    pub plugin: Option<PluginBuild>,
    /// How the run came to be ([`Trigger`]); `None` for runs recorded before takt kept it.
    pub trigger: Option<Trigger>,
    /// The run whose final state created this one (trigger [`Trigger::Continuation`]);
    /// unique together with `job_id`, so a parent starts each of its continuations once.
    pub parent_run_id: Option<RunId>,
    /// The job's params as the host resolved their templates for the latest attempt
    /// (recorded when the attempt starts; `None` before, and for runs whose params hold no
    /// template: they ran with the job's params as written).
    pub params_resolved: Option<String>,
}

impl Run {
    /// A new pending first attempt, triggered by the schedule (the claim records another
    /// [`Trigger`] when it knows one).
    pub fn pending(job_id: JobId, fire_time: Timestamp, now: Timestamp) -> Run {
        Run {
            id: None,
            job_id,
            fire_time,
            state: RunState::Pending,
            attempt: 1,
            created_at: now,
            started_at: None,
            finished_at: None,
            node_id: None,
            node_instance: None,
            lease_expires_at: None,
            error: None,
            result_json: None,
            elapsed: None,
            progress: None,
            skip_reason: None,
            next_attempt_at: None,
            plugin: None,
            trigger: Some(Trigger::Schedule),
            parent_run_id: None,
            params_resolved: None,
        }
    }

    /// A run recorded directly as skipped (a misfire, an overlap, a DST gap …); `detail` goes
    /// into the error text (e.g. "and 52 399 further misses up to …").
    pub fn skipped(
        job_id: JobId,
        fire_time: Timestamp,
        reason: SkipReason,
        detail: Option<String>,
        now: Timestamp,
    ) -> Run {
        Run {
            state: RunState::Skipped,
            finished_at: Some(now),
            skip_reason: Some(reason),
            error: detail,
            ..Run::pending(job_id, fire_time, now)
        }
    }

    /// When this run may start: its fire time, or for a retry the time its delay ends (never
    /// before the fire time). What a claim ahead records as a run's start and what the
    /// scheduler waits for before calling its plugin.
    pub fn start_at(&self) -> Timestamp {
        self.next_attempt_at
            .map_or(self.fire_time, |at| at.max(self.fire_time))
    }

    /// Whether the run waits for its job's dependencies ([`crate::store::dependency`]): a
    /// first attempt, pending with a re-check time. A retry is never waiting (its attempt is
    /// above 1: its first attempt passed the dependency rule), a queued run has no re-check
    /// time. The store keeps no separate column: this shape is the mark, and `error` holds
    /// what the run waits for ([`Run::waiting_for`]).
    pub fn is_waiting(&self) -> bool {
        self.state == RunState::Pending && self.attempt == 1 && self.next_attempt_at.is_some()
    }

    /// What a waiting run waits for ("waiting for extract: its run of … is running"), `None`
    /// for any other run.
    pub fn waiting_for(&self) -> Option<&str> {
        self.is_waiting().then_some(self.error.as_deref()).flatten()
    }

    /// What [`transition`] needs to know.
    pub fn snapshot(&self) -> RunSnapshot {
        RunSnapshot {
            id: self.id.unwrap_or(RunId(0)),
            state: self.state,
            attempt: self.attempt,
            next_attempt_at: self.next_attempt_at,
        }
    }

    /// Applies `event` at `now`: runs [`transition`] and, if it is legal, updates every field
    /// the event touches. The run is unchanged on error.
    pub fn apply(
        &mut self,
        event: RunEvent,
        now: Timestamp,
        retry: &RetryPolicy,
    ) -> Result<Transition, TransitionError> {
        let t = transition(&self.snapshot(), &event, now, retry)?;
        let was_running = self.state == RunState::Running;
        self.state = t.state;
        self.attempt = t.attempt;
        self.next_attempt_at = t.next_attempt_at;
        if was_running && t.state != RunState::Running {
            self.elapsed = self
                .started_at
                .and_then(|s| Duration::try_from(now.duration_since(s)).ok());
            self.lease_expires_at = None;
        }
        if t.state.is_final() {
            self.finished_at = Some(now);
        }
        match event {
            RunEvent::Claimed {
                node,
                instance,
                lease_until,
            } => {
                self.node_id = Some(node);
                self.node_instance = Some(instance);
                self.lease_expires_at = Some(lease_until);
                self.started_at = Some(now);
                self.progress = None;
            }
            RunEvent::Heartbeat { lease_until } => self.lease_expires_at = Some(lease_until),
            RunEvent::Progress(p) => self.progress = Some(p),
            RunEvent::Succeeded { result_json } => {
                self.result_json = result_json;
                self.error = None;
            }
            RunEvent::Failed { error, .. } | RunEvent::TimedOut { error } => {
                self.error = Some(error);
            }
            RunEvent::Cancelled { reason } => {
                self.error = Some(format!("cancelled ({})", reason.name()));
            }
            RunEvent::LeaseExpired => self.error = Some(LEASE_EXPIRED.to_string()),
            RunEvent::NodeRestarted => self.error = Some(NODE_RESTARTED.to_string()),
            RunEvent::Skip { reason } => self.skip_reason = Some(reason),
        }
        Ok(t)
    }
}

/// The error text of an attempt whose node stopped renewing its lease.
pub const LEASE_EXPIRED: &str = "lease expired: the node stopped renewing it";
/// The error text of an attempt left running by a node that restarted.
pub const NODE_RESTARTED: &str = "node restarted";

/// The part of a run the state machine reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunSnapshot {
    /// The id (seeds the retry jitter).
    pub id: RunId,
    /// The current state.
    pub state: RunState,
    /// The current attempt, from 1.
    pub attempt: u32,
    /// When a pending retry may be claimed.
    pub next_attempt_at: Option<Timestamp>,
}

/// Something that happened to a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEvent {
    /// A node took the run and starts it (pending → running).
    Claimed {
        /// The node.
        node: NodeId,
        /// The node's life that claims it.
        instance: InstanceId,
        /// Until when it holds the run.
        lease_until: Timestamp,
    },
    /// The node renewed its lease (running → running).
    Heartbeat {
        /// The new lease expiry.
        lease_until: Timestamp,
    },
    /// The handler reported progress (running → running).
    Progress(Progress),
    /// The handler returned a result.
    Succeeded {
        /// Its result JSON.
        result_json: Option<String>,
    },
    /// The handler returned an error (or panicked).
    Failed {
        /// The error text.
        error: String,
        /// Whether trying again may help (a plugin's `retryable` flag).
        retryable: bool,
    },
    /// The attempt ran past the job's timeout.
    TimedOut {
        /// The error text (e.g. "timed out after 300s").
        error: String,
    },
    /// The run was cancelled (pending or running).
    Cancelled {
        /// Why.
        reason: CancelReason,
    },
    /// Another node found the lease expired (recovery of a dead node's run).
    LeaseExpired,
    /// The node found this run left running by its previous life.
    NodeRestarted,
    /// The run will not run (pending → skipped).
    Skip {
        /// Why.
        reason: SkipReason,
    },
}

impl RunEvent {
    /// A short lowercase name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            RunEvent::Claimed { .. } => "claimed",
            RunEvent::Heartbeat { .. } => "heartbeat",
            RunEvent::Progress(_) => "progress",
            RunEvent::Succeeded { .. } => "succeeded",
            RunEvent::Failed { .. } => "failed",
            RunEvent::TimedOut { .. } => "timed_out",
            RunEvent::Cancelled { .. } => "cancelled",
            RunEvent::LeaseExpired => "lease_expired",
            RunEvent::NodeRestarted => "node_restarted",
            RunEvent::Skip { .. } => "skip",
        }
    }
}

/// The outcome of a legal event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The new state.
    pub state: RunState,
    /// The attempt number after the event (one more after a retry is scheduled).
    pub attempt: u32,
    /// When the retry may be claimed (set only when a retry was scheduled).
    pub next_attempt_at: Option<Timestamp>,
}

/// An event that does not apply to the run's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The event is not allowed in this state.
    #[error(
        "run event \"{event}\" is not allowed in state {from}; reload the run: another node or \
         request probably changed it first"
    )]
    Illegal {
        /// The state the run was in.
        from: RunState,
        /// The event's name.
        event: &'static str,
    },
    /// A claim of a retry before its time.
    #[error("run retry is not due until {at}; claim it at or after that time")]
    NotDue {
        /// When it becomes due.
        at: Timestamp,
    },
}

/// The run state machine: what `event` at `now` does to `run` under `retry`.
pub fn transition(
    run: &RunSnapshot,
    event: &RunEvent,
    now: Timestamp,
    retry: &RetryPolicy,
) -> Result<Transition, TransitionError> {
    use RunState::*;
    let to = |state| Transition {
        state,
        attempt: run.attempt,
        next_attempt_at: None,
    };
    let finished = to;
    // A failed attempt: retried when allowed and attempts remain, else final in `state`.
    let fail = |state, retry_allowed: bool| {
        let delay = retry
            .delay(run.attempt, jitter_seed(run.id, run.attempt))
            .filter(|_| retry_allowed);
        match delay.and_then(|d| now.checked_add(d).ok()) {
            Some(at) => Transition {
                state: Pending,
                attempt: run.attempt + 1,
                next_attempt_at: Some(at),
            },
            None => finished(state),
        }
    };
    Ok(match (run.state, event) {
        (Pending, RunEvent::Claimed { .. }) => {
            if let Some(at) = run.next_attempt_at
                && at > now
            {
                return Err(TransitionError::NotDue { at });
            }
            to(Running)
        }
        (Pending, RunEvent::Skip { .. }) => to(Skipped),
        (Pending, RunEvent::Cancelled { .. }) => to(Cancelled),
        (Running, RunEvent::Heartbeat { .. }) => to(Running),
        (Running, RunEvent::Progress(_)) => to(Running),
        (Running, RunEvent::Succeeded { .. }) => finished(Succeeded),
        (Running, RunEvent::Failed { retryable, .. }) => fail(Failed, *retryable),
        (Running, RunEvent::TimedOut { .. }) => fail(TimedOut, retry.retry_timeouts),
        (Running, RunEvent::Cancelled { .. }) => finished(Cancelled),
        (Running, RunEvent::LeaseExpired | RunEvent::NodeRestarted) => fail(Failed, true),
        (from, e) => {
            return Err(TransitionError::Illegal {
                from,
                event: e.name(),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Backoff;
    use RunState::*;
    use jiff::SignedDuration;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const NOW: &str = "2026-06-01T10:00:00Z";

    fn snap(state: RunState, attempt: u32) -> RunSnapshot {
        RunSnapshot {
            id: RunId(7),
            state,
            attempt,
            next_attempt_at: None,
        }
    }

    fn node() -> NodeId {
        NodeId("node-a".into())
    }

    fn claimed() -> RunEvent {
        RunEvent::Claimed {
            node: node(),
            instance: InstanceId("life-1".into()),
            lease_until: ts("2026-06-01T10:01:00Z"),
        }
    }

    fn failed(retryable: bool) -> RunEvent {
        RunEvent::Failed {
            error: "boom".into(),
            retryable,
        }
    }

    fn timed_out() -> RunEvent {
        RunEvent::TimedOut {
            error: "timed out after 300s".into(),
        }
    }

    fn cancelled(reason: CancelReason) -> RunEvent {
        RunEvent::Cancelled { reason }
    }

    fn all_events() -> Vec<RunEvent> {
        vec![
            claimed(),
            RunEvent::Heartbeat {
                lease_until: ts("2026-06-01T10:02:00Z"),
            },
            RunEvent::Progress(Progress {
                done: 1,
                total: 2,
                message: "half".into(),
            }),
            RunEvent::Succeeded { result_json: None },
            failed(true),
            timed_out(),
            cancelled(CancelReason::Requested),
            RunEvent::LeaseExpired,
            RunEvent::NodeRestarted,
            RunEvent::Skip {
                reason: SkipReason::Paused,
            },
        ]
    }

    fn seed_retries(n: u32) -> RetryPolicy {
        RetryPolicy::new(n, Backoff::seed_default())
    }

    fn go(state: RunState, attempt: u32, e: &RunEvent, p: &RetryPolicy) -> Transition {
        transition(&snap(state, attempt), e, ts(NOW), p).unwrap()
    }

    /// (from, attempt, event, policy, to, attempt after, retry at)
    type Row<'a> = (
        RunState,
        u32,
        RunEvent,
        &'a RetryPolicy,
        RunState,
        u32,
        Option<Timestamp>,
    );

    #[test]
    fn every_legal_transition() {
        let none = RetryPolicy::default();
        let three = seed_retries(3);
        let retry_at = |secs| {
            ts(NOW)
                .checked_add(SignedDuration::from_secs(secs))
                .unwrap()
        };
        let lease = ts("2026-06-01T10:02:00Z");
        let table: Vec<Row<'_>> = vec![
            (Pending, 1, claimed(), &none, Running, 1, None),
            (
                Pending,
                1,
                RunEvent::Skip {
                    reason: SkipReason::Overlap,
                },
                &none,
                Skipped,
                1,
                None,
            ),
            (
                Pending,
                2,
                cancelled(CancelReason::Requested),
                &three,
                Cancelled,
                2,
                None,
            ),
            (
                Running,
                1,
                RunEvent::Heartbeat { lease_until: lease },
                &none,
                Running,
                1,
                None,
            ),
            (Running, 1, all_events()[2].clone(), &none, Running, 1, None),
            (
                Running,
                1,
                RunEvent::Succeeded {
                    result_json: Some("{}".into()),
                },
                &three,
                Succeeded,
                1,
                None,
            ),
            (
                Running,
                1,
                failed(true),
                &three,
                Pending,
                2,
                Some(retry_at(10)),
            ),
            (
                Running,
                2,
                failed(true),
                &three,
                Pending,
                3,
                Some(retry_at(30)),
            ),
            (
                Running,
                3,
                failed(true),
                &three,
                Pending,
                4,
                Some(retry_at(60)),
            ),
            (Running, 4, failed(true), &three, Failed, 4, None),
            (Running, 1, failed(false), &three, Failed, 1, None),
            (Running, 1, failed(true), &none, Failed, 1, None),
            (Running, 1, timed_out(), &three, TimedOut, 1, None),
            (
                Running,
                1,
                cancelled(CancelReason::Requested),
                &three,
                Cancelled,
                1,
                None,
            ),
            (
                Running,
                1,
                cancelled(CancelReason::Shutdown),
                &three,
                Cancelled,
                1,
                None,
            ),
            (
                Running,
                1,
                RunEvent::LeaseExpired,
                &three,
                Pending,
                2,
                Some(retry_at(10)),
            ),
            (
                Running,
                1,
                RunEvent::NodeRestarted,
                &three,
                Pending,
                2,
                Some(retry_at(10)),
            ),
            (Running, 1, RunEvent::NodeRestarted, &none, Failed, 1, None),
        ];
        for (from, attempt, event, policy, to, after, retry_at) in table {
            let t = go(from, attempt, &event, policy);
            let what = format!("{from} #{attempt} + {}", event.name());
            assert_eq!(t.state, to, "{what}");
            assert_eq!(t.attempt, after, "{what}");
            assert_eq!(t.next_attempt_at, retry_at, "{what}");
            assert_eq!(
                t.next_attempt_at.is_some(),
                to == Pending && from == Running,
                "{what}"
            );
        }
    }

    #[test]
    fn timeouts_retry_only_when_the_policy_says_so() {
        let mut p = seed_retries(2);
        assert_eq!(go(Running, 1, &timed_out(), &p).state, TimedOut);
        p.retry_timeouts = true;
        let t = go(Running, 1, &timed_out(), &p);
        assert_eq!((t.state, t.attempt), (Pending, 2));
        assert_eq!(
            go(Running, 3, &timed_out(), &p).state,
            TimedOut,
            "no attempts left"
        );
    }

    #[test]
    fn illegal_transitions_are_typed_errors() {
        let legal = |s: RunState, e: &RunEvent| match s {
            Pending => matches!(
                e,
                RunEvent::Claimed { .. } | RunEvent::Skip { .. } | RunEvent::Cancelled { .. }
            ),
            Running => !matches!(e, RunEvent::Claimed { .. } | RunEvent::Skip { .. }),
            _ => false,
        };
        let p = seed_retries(3);
        let mut illegal = 0;
        for s in RunState::ALL {
            for e in all_events() {
                let r = transition(&snap(s, 1), &e, ts(NOW), &p);
                if legal(s, &e) {
                    assert!(r.is_ok(), "{s} + {}", e.name());
                } else {
                    assert_eq!(
                        r,
                        Err(TransitionError::Illegal {
                            from: s,
                            event: e.name()
                        })
                    );
                    illegal += 1;
                }
            }
        }
        assert_eq!(illegal, 7 * 10 - 3 - 8);
        let e = transition(&snap(Succeeded, 1), &claimed(), ts(NOW), &p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "run event \"claimed\" is not allowed in state succeeded; reload the run: another \
             node or request probably changed it first"
        );
        // Pending → succeeded without running.
        let e = transition(
            &snap(Pending, 1),
            &RunEvent::Succeeded { result_json: None },
            ts(NOW),
            &p,
        );
        assert!(matches!(
            e,
            Err(TransitionError::Illegal {
                from: Pending,
                event: "succeeded"
            })
        ));
    }

    #[test]
    fn a_retry_is_claimable_only_when_due() {
        let p = seed_retries(3);
        let mut s = snap(Pending, 2);
        s.next_attempt_at = Some(ts("2026-06-01T10:00:10Z"));
        let early = transition(&s, &claimed(), ts("2026-06-01T10:00:09Z"), &p);
        assert_eq!(
            early,
            Err(TransitionError::NotDue {
                at: ts("2026-06-01T10:00:10Z")
            })
        );
        assert!(
            early
                .unwrap_err()
                .to_string()
                .contains("not due until 2026-06-01T10:00:10Z")
        );
        let t = transition(&s, &claimed(), ts("2026-06-01T10:00:10Z"), &p).unwrap();
        assert_eq!(t.state, Running);
    }

    #[test]
    fn retries_reuse_the_run_seed_000_delays() {
        let p = seed_retries(3);
        let fire = ts("2026-06-01T09:59:59Z");
        let mut run = Run::pending(JobId(1), fire, ts(NOW));
        run.id = Some(RunId(9));
        let mut now = ts(NOW);
        let mut waits = Vec::new();
        for attempt in 1..=4 {
            assert_eq!(run.attempt, attempt);
            run.apply(claimed(), now, &p).unwrap();
            assert_eq!(run.node_id, Some(node()));
            now = now.checked_add(SignedDuration::from_secs(5)).unwrap();
            run.apply(failed(true), now, &p).unwrap();
            assert_eq!(run.elapsed, Some(Duration::from_secs(5)));
            assert_eq!(run.error.as_deref(), Some("boom"));
            assert_eq!(run.lease_expires_at, None);
            if let Some(at) = run.next_attempt_at {
                waits.push(at.duration_since(now).as_secs());
                now = at;
            }
        }
        assert_eq!(waits, [10, 30, 60]);
        assert_eq!(run.state, Failed);
        assert_eq!(run.attempt, 4);
        assert_eq!(run.fire_time, fire, "same fire time throughout");
        assert_eq!(run.finished_at, Some(now));
    }

    #[test]
    fn shutdown_is_a_cancel_not_a_timeout_and_never_retried() {
        let mut p = seed_retries(3);
        p.retry_timeouts = true;
        let mut run = Run::pending(JobId(1), ts(NOW), ts(NOW));
        run.apply(claimed(), ts(NOW), &p).unwrap();
        let t = run
            .apply(
                cancelled(CancelReason::Shutdown),
                ts("2026-06-01T10:00:03Z"),
                &p,
            )
            .unwrap();
        assert_eq!(t.state, Cancelled);
        assert_eq!(run.state, Cancelled);
        assert_eq!(run.error.as_deref(), Some("cancelled (shutdown)"));
        assert_eq!(run.elapsed, Some(Duration::from_secs(3)));
    }

    #[test]
    fn recovery_after_a_restart_fails_then_retries() {
        let p = seed_retries(1);
        let mut run = Run::pending(JobId(1), ts(NOW), ts(NOW));
        run.apply(claimed(), ts(NOW), &p).unwrap();
        run.apply(RunEvent::NodeRestarted, ts(NOW), &p).unwrap();
        assert_eq!((run.state, run.attempt), (Pending, 2));
        assert_eq!(run.error.as_deref(), Some(NODE_RESTARTED));
        let due = run.next_attempt_at.unwrap();
        run.apply(claimed(), due, &p).unwrap();
        run.apply(RunEvent::LeaseExpired, due, &p).unwrap();
        assert_eq!((run.state, run.attempt), (Failed, 2));
        assert_eq!(run.error.as_deref(), Some(LEASE_EXPIRED));
    }

    #[test]
    fn success_records_the_result_and_clears_the_retry_error() {
        let p = seed_retries(1);
        let mut run = Run::pending(JobId(1), ts(NOW), ts(NOW));
        run.apply(claimed(), ts(NOW), &p).unwrap();
        run.apply(failed(true), ts(NOW), &p).unwrap();
        let due = run.next_attempt_at.unwrap();
        run.apply(claimed(), due, &p).unwrap();
        run.apply(
            RunEvent::Progress(Progress {
                done: 5,
                total: 10,
                message: "rows".into(),
            }),
            due,
            &p,
        )
        .unwrap();
        assert_eq!(run.progress.as_ref().map(|p| p.done), Some(5));
        let t = run
            .apply(
                RunEvent::Succeeded {
                    result_json: Some("{\"rows\":10}".into()),
                },
                due,
                &p,
            )
            .unwrap();
        assert_eq!((t.state, t.next_attempt_at), (Succeeded, None));
        assert_eq!(run.state, Succeeded);
        assert_eq!(run.error, None);
        assert_eq!(run.result_json.as_deref(), Some("{\"rows\":10}"));
        assert_eq!(run.next_attempt_at, None);
        // Failed events leave the run untouched.
        let before = run.clone();
        assert!(run.apply(claimed(), due, &p).is_err());
        assert_eq!(run, before);
    }

    #[test]
    fn skipped_runs_carry_their_reason() {
        let r = Run::skipped(
            JobId(3),
            ts(NOW),
            SkipReason::Misfire,
            Some("late".into()),
            ts(NOW),
        );
        assert_eq!(r.state, Skipped);
        assert_eq!(r.skip_reason, Some(SkipReason::Misfire));
        assert!(r.state.is_final());
        let mut run = Run::pending(JobId(1), ts(NOW), ts(NOW));
        run.apply(
            RunEvent::Skip {
                reason: SkipReason::Dependency,
            },
            ts(NOW),
            &RetryPolicy::default(),
        )
        .unwrap();
        assert_eq!(run.skip_reason, Some(SkipReason::Dependency));
        assert_eq!(run.finished_at, Some(ts(NOW)));
    }

    #[test]
    fn names_round_trip() {
        let names: Vec<_> = RunState::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "pending",
                "running",
                "succeeded",
                "failed",
                "timed_out",
                "cancelled",
                "skipped"
            ]
        );
        for s in RunState::ALL {
            assert_eq!(RunState::from_name(s.name()), Some(s));
            assert_eq!(s.is_final(), !matches!(s, Pending | Running));
        }
        for r in SkipReason::ALL {
            assert_eq!(SkipReason::from_name(&r.to_string()), Some(r));
        }
        assert_eq!(SkipReason::DstGap.name(), "dst_gap");
        assert_eq!(
            SkipReason::from(schedule::SkipReason::DstGap),
            SkipReason::DstGap
        );
        assert_eq!(RunState::from_name("Timed Out"), None);
    }
}
