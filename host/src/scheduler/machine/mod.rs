//! The loop's decisions: one synchronous state machine, [`Machine::handle`], fed every input of
//! the scheduling loop as an [`Event`] and answering with the [`Step`]s the shell
//! (`super::shell`) carries out. It does no I/O and reads no clock: "now" comes with each
//! event, a store call is a step whose answer comes back as an event, so a test feeds events
//! and asserts the exact steps, without sleeping.
//!
//! # Invariants
//!
//! * At most one store call ([`Step::is_call`]) is outstanding: the machine asks for one only
//!   when it moves into a phase that waits for its answer, and asks for nothing else meanwhile.
//!   Every other event (a command, a run's end, a wake) is handled in any phase and answers
//!   with immediate steps only.
//! * A claimed run is in `in_flight` from its claim until its execution ends, then in
//!   `finishing` until its end is recorded (or given up). It moves to `finishing` before the
//!   [`Step::Record`] that writes its end, and leaves `finishing` only once that write is
//!   over. So when a lease renewal answers, a run this node executes that the store did not
//!   renew was recovered elsewhere (lost: stop it), and a renewed run in neither set was never
//!   started by this process (an orphan: fail it).
//! * The claim order and the decisions of a pass: renew and recover (every `renew_every`),
//!   prepare the due jobs (misfire and overlap), pass again at once while preparing changed
//!   anything (so every fire claimed went through those decisions), claim in growing chunks up
//!   to the free capacity, read the next due instant, sleep. A stop is obeyed at each of these
//!   boundaries: the pass ends, runs already claimed still start.
//! * At most `capacity + recurring_reserve` runs execute at once (the executor's slots), and
//!   at most `capacity` that are not recurring fires: each claim chunk tells the store how
//!   much of it only recurring fires may take, from the runs in flight at that moment
//!   ([`Machine::free`]). When only reserved slots are free, the next due instant read is
//!   that of recurring fires. During a backlog of short runs, up to
//!   [`SchedulerConfig::claim_ahead`] more are in flight, claimed ahead and waiting in the
//!   executor's queue for a slot ([`Machine::ahead`]); never outside a backlog, never long
//!   runs. A pass that claims ahead of an instant to come may also take up to
//!   [`SchedulerConfig::lookahead_batch`] recurring fires beyond the slots: until their
//!   instant they hold no slot (the executor takes it just before), so they are counted
//!   against that bound instead ([`Machine::free`]).
//! * A wake that comes during a pass is kept and starts the next pass as soon as this one
//!   ends, so no change is missed between a pass's read and its sleep.
//! * The stop: the drain lets `in_flight` and `finishing` empty for up to the grace (renewing
//!   leases meanwhile), then the executor cancels what is left, and the loop exits once both
//!   sets are empty.

pub(crate) mod prepare;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use takt_core::job::JobId;
use takt_core::policy::RetryPolicy;
use takt_core::run::{PluginBuild, Run, RunEvent, RunId, RunState};
use takt_core::store::{ClaimedRun, DueSet, RunFinish, StoreError, StoreErrorKind};

use super::{SchedulerConfig, SchedulerEvent};
use crate::plugins::PluginVersion;

/// The first claim of a pass takes at most this many runs; each further claim of the pass
/// takes twice the one before, up to the pass's limit, and a chunk takes all that is left
/// when that is at most twice its size (no short tail claim of a few runs).
///
/// The chunks together take exactly what one claim of the limit would (the top of the claim
/// order), and each chunk's runs are started before the next is claimed: when many fires are
/// due at one instant the first bodies start after a small claim instead of after the whole
/// batch (B4 on SQLite: a claim of 100 fires took 2–4 ms). A claim advances a job's next fire
/// once per call, so a chunk whose job is due again (a catch-up) ends the pass's claiming and
/// that fire goes through the next pass's misfire and overlap decisions.
///
/// **A backlog is claimed whole.** When the last claim of the previous pass was full (more
/// was due than it had room for), the next pass claims its whole room in one claim: runs are
/// already flowing, so a small first chunk starts nothing sooner that matters, and every
/// claim is a transaction whose fixed cost (its statements and its COMMIT) bounds a drain
/// (B5 on PostgreSQL, capacity 10: a pass claimed 8 and then 2, two transactions for ten
/// runs, and the claims were two thirds of the pass).
pub(crate) const FIRST_CLAIM: usize = 8;

/// While a backlog drains, a pass that would start with part of its room free waits for the
/// rest: until every slot open to any run is free (so also once nothing runs), or until as
/// long as the last full pass took (at least [`GATHER_MIN`], at most [`GATHER_MAX`]) has
/// passed since the first end that could have started it. A pass with no slot free is not
/// held back (it only renews and prepares).
///
/// Why: a drain's passes cost the same whatever they claim (`job_due`, a claim transaction),
/// so a pass started for each end as it comes claims one or two runs and the drain is
/// bounded by the passes, not the slots (B5 on PostgreSQL, capacity 10: passes started at
/// the first recorded end claimed 5 runs each, 1 400 runs/s; B3 in memory: 13 500 passes
/// for 20 000 runs). Waiting at most one pass's duration costs a free slot at most the
/// time one more pass would have taken anyway. Outside a backlog (the last claim was not
/// full: everything due was claimed) an end starts the next pass at once, so a schedule's
/// fires are never held back by this.
pub(crate) const GATHER_MIN: Duration = Duration::from_millis(1);
/// The longest a pass waits for its room to free during a backlog ([`GATHER_MIN`]).
pub(crate) const GATHER_MAX: Duration = Duration::from_millis(20);

/// The longest pause between passes while the database is away.
pub(crate) const OUTAGE_BACKOFF_MAX: Duration = Duration::from_secs(8);

/// Every input of the scheduling loop. Closed: a new input is a new variant here, handled in
/// [`Machine::handle`], and produced by one place in the shell.
#[derive(Debug)]
pub(crate) enum Event {
    /// Something may be due sooner than planned: the loop's start, a job added or changed
    /// through the handle, a change another node made (PostgreSQL `LISTEN`).
    Wake,
    /// The armed wait ([`Step::Sleep`]) ended.
    Timer,
    /// The drain's grace ([`Step::DrainFor`]) ran out.
    DrainDeadline,
    /// A command from the handle.
    Command(Command),
    /// A run's execution ended (the shell's run task returned).
    RunEnded(Box<Ended>),
    /// A run's task ended without an outcome (it panicked): nothing can be recorded; the run
    /// stays running in the store and the next renewal fails it as an orphan.
    RunAbandoned(RunId),
    /// A [`Step::Record`] is over: `state` is what was recorded, `None` when it could not be.
    RunRecorded {
        /// The run.
        run: RunId,
        /// The recorded state.
        state: Option<RunState>,
    },
    /// The answer to [`Step::Renew`]: the runs whose lease was renewed.
    Renewed(Result<Vec<RunId>, StoreError>),
    /// The answer to [`Step::RecoverExpired`]: how many runs were recovered.
    Recovered(Result<usize, StoreError>),
    /// The answer to [`Step::Prepare`].
    Prepared(Result<prepare::Prepared, StoreError>),
    /// The answer to [`Step::Claim`].
    Claimed(Result<Vec<ClaimedRun>, StoreError>),
    /// The answer to [`Step::ReadNextDue`].
    NextDue(Result<Option<Timestamp>, StoreError>),
    /// The answer to [`Step::StopExecutor`].
    ExecutorStopped,
}

/// A command from [`super::SchedulerHandle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// Claim nothing until resumed.
    Pause,
    /// Undo [`Command::Pause`].
    Resume,
    /// Stop gracefully within `grace`; a second one shortens the drain, never lengthens it.
    Shutdown {
        /// How long running runs may go on.
        grace: Duration,
    },
    /// Cancel this node's run (answers [`Step::Reply`] with whether it runs here).
    CancelRun {
        /// The run.
        run: RunId,
        /// Why, written into its log.
        why: String,
    },
    /// Cancel this node's runs of a job being removed (answers [`Step::Reply`]).
    CancelJob {
        /// The job.
        job: JobId,
    },
}

/// How a run's execution ended, before the core decided the run's new state.
#[derive(Debug)]
pub(crate) struct Ended {
    /// The run's id.
    pub id: RunId,
    /// The run as claimed.
    pub run: Run,
    /// Its job's retry policy.
    pub retry: RetryPolicy,
    /// What the execution reported.
    pub event: RunEvent,
    /// How long the plugin ran (`None`: never called).
    pub elapsed: Option<Duration>,
    /// The build that ran it.
    pub plugin: Option<PluginBuild>,
    /// A retired plugin version whose last run this was.
    pub drained: Option<PluginVersion>,
}

/// What the shell must do. Store calls ([`Step::is_call`]) answer with an event; the others
/// are carried out in order and answer nothing (except [`Step::Reply`], which answers the
/// command being handled).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// Renew this life's leases until `until` (also the node's heartbeat). Answers
    /// [`Event::Renewed`].
    Renew {
        /// The renewal's instant.
        now: Timestamp,
        /// The new expiry.
        until: Timestamp,
    },
    /// Recover any node's expired leases. Answers [`Event::Recovered`].
    RecoverExpired {
        /// The instant.
        now: Timestamp,
    },
    /// The misfire and overlap decisions for the first `claim_batch` due jobs (due by
    /// `horizon`, late by `now`). Answers [`Event::Prepared`].
    Prepare {
        /// Now.
        now: Timestamp,
        /// Due by.
        horizon: Timestamp,
    },
    /// Claim up to `limit` runs due by `horizon`, `recurring_only` of them for recurring fires
    /// only (the free part of the recurring reserve). Answers [`Event::Claimed`].
    Claim {
        /// Due by.
        horizon: Timestamp,
        /// The most runs.
        limit: usize,
        /// How many of `limit` only recurring fires may take.
        recurring_only: usize,
    },
    /// Read the next due instant of `set`: every due thing, or only recurring fires when the
    /// reserve is all that is free. Answers [`Event::NextDue`].
    ReadNextDue {
        /// What may still be claimed.
        set: DueSet,
    },
    /// Cancel everything the executor still runs and wait for its threads' grace. Answers
    /// [`Event::ExecutorStopped`].
    StopExecutor,
    /// Start executing a claimed run (a task that answers [`Event::RunEnded`]).
    Start(Box<ClaimedRun>),
    /// Write `why` into a run's log, then cancel it.
    Cancel {
        /// The run.
        run: RunId,
        /// The log line.
        why: String,
    },
    /// Fail a run the store holds for this node that it never started, to be retried per
    /// policy (see [`super::run::ORPHANED`]).
    FailOrphan {
        /// The run.
        run: RunId,
        /// The instant.
        now: Timestamp,
    },
    /// Record the end of an attempt, retrying while the database is away (a task that
    /// answers [`Event::RunRecorded`]).
    Record {
        /// The run.
        run: RunId,
        /// The attempt that ended.
        attempt: u32,
        /// What to record.
        finish: Box<RunFinish>,
    },
    /// Tell the subscribers.
    Publish(SchedulerEvent),
    /// Answer the command being handled.
    Reply(bool),
    /// Wait for the next event, at most until the clock reads `until` and at most `at_most`
    /// of real time; either ending is [`Event::Timer`]. Replaces the wait armed before.
    Sleep {
        /// On the scheduler's clock.
        until: Option<Timestamp>,
        /// Real time (the safety poll, the outage backoff).
        at_most: Option<Duration>,
    },
    /// The drain ends `grace` after it began (real time): [`Event::DrainDeadline`].
    DrainFor(Duration),
    /// The loop is over: free the node id and end.
    Exit,
}

impl Step {
    /// Whether this step is a call whose answer the machine waits for.
    pub(crate) fn is_call(&self) -> bool {
        matches!(
            self,
            Step::Renew { .. }
                | Step::RecoverExpired { .. }
                | Step::Prepare { .. }
                | Step::Claim { .. }
                | Step::ReadNextDue { .. }
                | Step::StopExecutor
        )
    }
}

/// Why a pass failed: the first store error of the pass, named by the call that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PassError {
    /// [`Step::Renew`] failed.
    #[error("renewing leases: {0}")]
    Renew(StoreError),
    /// [`Step::RecoverExpired`] failed.
    #[error("recovering expired leases: {0}")]
    Recover(StoreError),
    /// [`Step::Prepare`] failed.
    #[error("preparing due jobs: {0}")]
    Prepare(StoreError),
    /// The first chunk of [`Step::Claim`] failed.
    #[error("claiming due runs: {0}")]
    Claim(StoreError),
    /// [`Step::ReadNextDue`] failed.
    #[error("reading the next due time: {0}")]
    NextDue(StoreError),
}

/// Free slots ([`Machine::free`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Free {
    /// For any run.
    any: usize,
    /// For runs that are not recurring fires (at most `any`).
    others: usize,
    /// For recurring fires claimed ahead of their fire time beyond the slots
    /// ([`SchedulerConfig::lookahead_batch`]), open only to a pass whose horizon is ahead.
    ahead_of_time: usize,
}

/// What the machine knows of a run of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Flight {
    job: JobId,
    fire_time: Timestamp,
    attempt: u32,
    /// A cancel was asked already (the overlap policy `cancel-running` asks once).
    cancel_asked: bool,
    /// A recurring fire ([`ClaimedRun::recurring_fire`]): it may hold a reserved slot.
    recurring: bool,
    /// Its end may start the next pass of a backlog before the end is recorded: its job
    /// neither recurs nor belongs to a group ([`Machine::run_ended`]).
    ends_early: bool,
    /// When it may start (its fire time, or its retry's): until then it was claimed ahead
    /// and holds no slot ([`SchedulerConfig::lookahead_batch`]).
    start: Timestamp,
}

/// A pass in progress.
#[derive(Debug)]
struct Pass {
    /// The pass's instant.
    now: Timestamp,
    /// Due by (the lookahead).
    horizon: Timestamp,
    /// The first store error.
    error: Option<PassError>,
    /// Whether the claim took anything.
    progressed: bool,
}

/// The claim chunks of a pass.
#[derive(Debug)]
struct Chunks {
    taken: usize,
    chunk: usize,
    limit: usize,
    asked: usize,
    /// Of `asked`, what only recurring fires may take (the free recurring reserve).
    reserved: usize,
}

/// Where the machine is.
#[derive(Debug)]
enum Phase {
    /// Waiting for an event (a sleep, or the outage backoff).
    Idle,
    Renewing(Pass),
    Recovering(Pass, Option<PassError>),
    Preparing(Pass),
    Claiming(Pass, Chunks),
    ReadingDue(Pass),
    /// Stopping: waiting for this node's runs, for up to the grace.
    Draining {
        /// A renewal is outstanding.
        renewing: bool,
    },
    /// The executor was told to stop; waiting for the last ends to be recorded.
    Stopping {
        /// Its threads' grace is over.
        executor_stopped: bool,
    },
    /// [`Step::Exit`] was given.
    Stopped,
}

/// The database's health as the passes see it.
#[derive(Debug, Default)]
struct Outage {
    since: Option<Timestamp>,
    failed_passes: u32,
}

/// The scheduling loop's state, owned by the shell's one task.
#[derive(Debug)]
pub(crate) struct Machine {
    config: SchedulerConfig,
    phase: Phase,
    in_flight: BTreeMap<RunId, Flight>,
    finishing: BTreeMap<RunId, Flight>,
    paused: bool,
    /// The stop's grace, once a stop was asked (or the node was taken over).
    stop: Option<Duration>,
    taken_over: bool,
    /// A wake came during a pass: pass again when it ends.
    wake_pending: bool,
    next_renew: Timestamp,
    /// The next due instant as the last pass read it.
    planned: Option<Timestamp>,
    /// The last claim was full: more was due than its room (see [`FIRST_CLAIM`]).
    backlog: bool,
    /// Until when a pass of a backlog waits for its room to free ([`GATHER_MIN`]).
    gather_until: Option<Timestamp>,
    /// How long the last pass that ended with a full claim took, on the scheduler's clock.
    last_pass: Duration,
    /// The mean run time of the runs that ended lately (a moving average of their plugin
    /// time), `None` before the first: how many runs the slots finish during a pass
    /// ([`Machine::ahead`]).
    mean_run: Option<Duration>,
    /// The crowded instant being claimed (ahead of it: a pass's horizon ahead of its start;
    /// or behind it: a claim full of its recurring fires) and when its first pass began:
    /// [`Machine::window`].
    crowd: Option<(Timestamp, Timestamp)>,
    /// How long a crowded instant's claims take, from its first pass to the claim that took
    /// the last recurring fire due by it: the last one's, or three quarters of the one before
    /// when that is more.
    crowd_span: Duration,
    /// The earliest next fire, after the horizon they were claimed by, of the recurring fires
    /// this node claimed lately: during a backlog, where no next due instant is read
    /// ([`Machine::after_full_claim`]), the instant the passes claim ahead of once it is
    /// within the window. It may be later than the store's next recurring fire (another
    /// job's, which this node did not claim), and that costs nothing: a claim up to an
    /// instant takes everything due by it, and a fire due before it is claimed by the
    /// backlog's passes as before.
    recurring_next: Option<Timestamp>,
    /// A fire to come that a preparation left to its time ([`prepare::Prepared::held`]):
    /// no pass claims ahead of it, so its instant is decided and claimed when it comes.
    held: Option<Timestamp>,
    outage: Outage,
}

impl Machine {
    /// A machine for `config` (already normalised by `Scheduler::with_plugins`) that renews on
    /// its first pass.
    pub(crate) fn new(config: SchedulerConfig, now: Timestamp) -> Machine {
        Machine {
            config,
            phase: Phase::Idle,
            in_flight: BTreeMap::new(),
            finishing: BTreeMap::new(),
            paused: false,
            stop: None,
            taken_over: false,
            wake_pending: false,
            next_renew: now,
            planned: None,
            backlog: false,
            gather_until: None,
            last_pass: Duration::ZERO,
            mean_run: None,
            crowd: None,
            crowd_span: Duration::ZERO,
            recurring_next: None,
            held: None,
            outage: Outage::default(),
        }
    }

    /// This node's runs in flight (what [`super::SchedulerHandle::running`] reports).
    pub(crate) fn running(&self) -> usize {
        self.in_flight.len()
    }

    /// The free slots at `now`: for any run, and for runs that are not recurring fires.
    /// Recurring fires fill the reserve first, then the capacity
    /// ([`SchedulerConfig::recurring_reserve`]). The runs claimed ahead of a slot
    /// ([`Machine::ahead`]) count as capacity that is not a slot. A run whose start is still
    /// to come holds no slot: it counts against [`SchedulerConfig::lookahead_batch`], as does
    /// every run in flight beyond the slots (a late fire claimed ahead with the fires of an
    /// instant to come), so that no more than that bound ever waits beyond them.
    fn free(&self, now: Timestamp) -> Free {
        let reserve = self.config.recurring_reserve;
        let capacity = self.config.capacity + self.ahead();
        // At most slots + claim_ahead + lookahead_batch runs are in flight: counting costs
        // little next to the pass it decides.
        let (mut all, mut recurring, mut waiting, mut waiting_others) =
            (0usize, 0usize, 0usize, 0usize);
        for f in self.in_flight.values() {
            if f.start > now {
                waiting += 1;
                waiting_others += usize::from(!f.recurring);
            } else {
                all += 1;
                recurring += usize::from(f.recurring);
            }
        }
        // Runs waiting beyond the bound hold slots (with a bound of 0, every run claimed
        // ahead does); counted as the other runs first, which frees the least for them.
        let over = waiting.saturating_sub(self.config.lookahead_batch);
        all += over;
        recurring += over.saturating_sub(waiting_others);
        let general = (all - recurring) + recurring.saturating_sub(reserve);
        let any = (capacity + reserve).saturating_sub(all);
        let beyond = (waiting - over) + all.saturating_sub(capacity + reserve);
        Free {
            any,
            others: capacity.saturating_sub(general).min(any),
            ahead_of_time: self
                .config
                .lookahead_batch
                .saturating_sub(beyond)
                .min(self.finished_within(self.window())),
        }
    }

    /// How many runs the slots are expected to finish within `span` at the mean run time of
    /// the runs that ended lately (unbounded before the first end): what may wait for a slot
    /// beyond them without waiting much longer than `span`, so a long run is never claimed
    /// ahead of a slot while another node may have one free.
    fn finished_within(&self, span: Duration) -> usize {
        let Some(mean) = self.mean_run else {
            return usize::MAX;
        };
        let slots_time = span.as_nanos() * self.config.capacity as u128;
        usize::try_from(slots_time / mean.as_nanos().max(1)).unwrap_or(usize::MAX)
    }

    /// How long before a due instant its fires are decided and claimed: the configured
    /// `lookahead`, widened by one and a half times how long crowded instants' claims take
    /// ([`Machine::crowd_span`]) when fires are claimed ahead beyond the slots
    /// ([`SchedulerConfig::lookahead_batch`]), so that an instant with more fires than one
    /// claim takes is claimed before it comes, with room for a slower database moment (B6:
    /// with the span alone, one second in five still began its claims too late).
    fn window(&self) -> Duration {
        if self.config.lookahead_batch == 0 {
            return self.config.lookahead;
        }
        (self.config.lookahead + self.crowd_span * 3 / 2).min(super::MAX_LOOKAHEAD)
    }

    /// How many runs may be claimed beyond the slots now: during a backlog, as many as the
    /// slots are expected to finish while one pass takes (`capacity × last pass ÷ mean run
    /// time`), at most [`SchedulerConfig::claim_ahead`]; else none. So a run claimed ahead
    /// waits for a slot about as long as a pass, which it would have waited anyway for the
    /// pass that claims it, and a long run (longer than a pass) is never claimed ahead.
    fn ahead(&self) -> usize {
        let limit = self.config.claim_ahead;
        if self.mean_run.is_none() || !self.backlog || limit == 0 {
            return 0;
        }
        self.finished_within(self.last_pass).min(limit)
    }

    /// The stop's grace, once stopping (a run's end that cannot be recorded is given up after
    /// it).
    pub(crate) fn stop_grace(&self) -> Option<Duration> {
        self.stop
    }

    /// Decides what `event`, arriving at `now` on the scheduler's clock, makes the loop do.
    pub(crate) fn handle(&mut self, event: Event, now: Timestamp) -> Vec<Step> {
        let mut out = Vec::new();
        match event {
            Event::Wake => self.poke(now, &mut out),
            Event::Timer => match self.phase {
                Phase::Idle | Phase::Draining { renewing: false } => self.poke(now, &mut out),
                _ => {}
            },
            Event::DrainDeadline => {
                if matches!(self.phase, Phase::Draining { .. }) {
                    self.stop_executor(&mut out);
                }
            }
            Event::Command(command) => self.command(command, now, &mut out),
            Event::RunEnded(ended) => self.run_ended(*ended, now, &mut out),
            Event::RunAbandoned(run) => {
                tracing::error!("the task of run {run} ended without an outcome");
                self.in_flight.remove(&run);
                self.finishing.remove(&run);
                self.poke(now, &mut out);
            }
            Event::RunRecorded { run, state } => {
                if let Some(f) = self.finishing.remove(&run)
                    && let Some(state) = state
                {
                    out.push(Step::Publish(SchedulerEvent::Finished {
                        run,
                        job: f.job,
                        fire_time: f.fire_time,
                        attempt: f.attempt,
                        state,
                    }));
                }
                self.poke(now, &mut out);
            }
            Event::Renewed(result) => self.renewed(result, now, &mut out),
            Event::Recovered(result) => self.recovered(result, now, &mut out),
            Event::Prepared(result) => self.prepared(result, now, &mut out),
            Event::Claimed(result) => self.claimed(result, now, &mut out),
            Event::NextDue(result) => self.next_due(result, now, &mut out),
            Event::ExecutorStopped => {
                if let Phase::Stopping { executor_stopped } = &mut self.phase {
                    *executor_stopped = true;
                }
                self.settle(now, &mut out);
            }
        }
        out
    }

    /// Something may be due: pass now when idle, after this pass when passing.
    fn poke(&mut self, now: Timestamp, out: &mut Vec<Step>) {
        match self.phase {
            Phase::Idle => {
                if !self.gathering(now, out) {
                    self.start_pass(now, out);
                }
            }
            Phase::Renewing(_)
            | Phase::Recovering(..)
            | Phase::Preparing(_)
            | Phase::Claiming(..)
            | Phase::ReadingDue(_) => self.wake_pending = true,
            Phase::Draining { .. } | Phase::Stopping { .. } | Phase::Stopped => {
                self.settle(now, out);
            }
        }
    }

    /// Whether the next pass waits for more of its room to free ([`GATHER_MIN`]); arms the
    /// wait when it begins.
    fn gathering(&mut self, now: Timestamp, out: &mut Vec<Step>) -> bool {
        let room = self.config.capacity.min(self.config.claim_batch);
        let free = self.free(now).others;
        // No slot free: the pass claims nothing and only renews or prepares; not held back.
        // Nor is a pass that claims an instant to come: its room is not the slots.
        let waits = self.backlog
            && !self.paused
            && self.stop.is_none()
            && free > 0
            && free < room
            && self.horizon(now) == now;
        if !waits {
            self.gather_until = None;
            return false;
        }
        if let Some(at) = self.gather_until {
            // Armed already: wait until its end, then pass.
            if now >= at {
                self.gather_until = None;
            }
            return now < at;
        }
        let wait = self.last_pass.clamp(GATHER_MIN, GATHER_MAX);
        let at = now
            .checked_add(jiff::SignedDuration::try_from(wait).unwrap_or_default())
            .unwrap_or(now);
        self.gather_until = Some(at);
        out.push(Step::Sleep {
            until: Some(at),
            at_most: Some(wait),
        });
        true
    }

    fn command(&mut self, command: Command, now: Timestamp, out: &mut Vec<Step>) {
        match command {
            Command::Pause => {
                self.paused = true;
                self.poke(now, out);
            }
            Command::Resume => {
                self.paused = false;
                self.poke(now, out);
            }
            Command::Shutdown { grace } => {
                let grace = self.stop.map_or(grace, |g| g.min(grace));
                self.stop = Some(grace);
                match self.phase {
                    Phase::Idle => self.begin_drain(now, out),
                    Phase::Draining { .. } => out.push(Step::DrainFor(grace)),
                    // A pass ends at its next boundary; the drain comes then.
                    _ => {}
                }
            }
            Command::CancelRun { run, why } => {
                let here = self.cancel(run, format!("cancelled by request: {why}"), out);
                out.push(Step::Reply(here));
            }
            Command::CancelJob { job } => {
                let mine: Vec<RunId> = self.runs_of(job);
                for run in &mine {
                    self.cancel(*run, format!("cancelled: job {job} is being removed"), out);
                }
                out.push(Step::Reply(!mine.is_empty()));
            }
        }
    }

    fn runs_of(&self, job: JobId) -> Vec<RunId> {
        self.in_flight
            .iter()
            .filter(|(_, f)| f.job == job)
            .map(|(r, _)| *r)
            .collect()
    }

    /// Asks this node's run to stop, `why` written into its log first. Whether it runs here.
    fn cancel(&mut self, run: RunId, why: String, out: &mut Vec<Step>) -> bool {
        let Some(flight) = self.in_flight.get_mut(&run) else {
            return false;
        };
        flight.cancel_asked = true;
        out.push(Step::Cancel { run, why });
        true
    }

    // -----------------------------------------------------------------------------------------
    // A pass

    fn start_pass(&mut self, now: Timestamp, out: &mut Vec<Step>) {
        self.wake_pending = false;
        self.gather_until = None;
        if self.held.is_some_and(|h| h <= now) {
            self.held = None;
        }
        if self.stop.is_some() {
            return self.begin_drain(now, out);
        }
        let horizon = self.horizon(now);
        if horizon > now && self.crowd.is_none_or(|(h, _)| h != horizon) {
            self.crowd = Some((horizon, now));
        }
        let pass = Pass {
            now,
            horizon,
            error: None,
            progressed: false,
        };
        if now >= self.next_renew {
            let until = now.checked_add(self.config.lease).unwrap_or(Timestamp::MAX);
            self.phase = Phase::Renewing(pass);
            out.push(Step::Renew { now, until });
        } else {
            self.after_renew(pass, now, out);
        }
    }

    /// When the next due instant the last pass saw is at most the window away
    /// ([`Machine::window`]), a pass at `now` decides and claims up to it, and its runs start
    /// at their fire times (see `SchedulerConfig::lookahead`). Otherwise (a late or a stale
    /// plan) up to now: the claim's instant is also the runs' recorded start.
    ///
    /// Never up to or past a fire a preparation left to its time ([`Machine::held`]).
    fn horizon(&self, now: Timestamp) -> Timestamp {
        let window = jiff::SignedDuration::try_from(self.window()).unwrap_or_default();
        match self.planned {
            Some(d)
                if d > now
                    && now.checked_add(window).is_ok_and(|a| d <= a)
                    && self.held.is_none_or(|h| h <= now || d < h) =>
            {
                d
            }
            _ => now,
        }
    }

    /// When to wake for the due instant `due`: the window before it, or the instant itself
    /// when it is held to its time ([`Machine::held`]).
    fn wake_for(&self, due: Timestamp) -> Timestamp {
        if self.held.is_some_and(|h| due >= h) {
            return due;
        }
        let window = jiff::SignedDuration::try_from(self.window()).unwrap_or_default();
        due.checked_sub(window).unwrap_or(due)
    }

    fn renewed(
        &mut self,
        result: Result<Vec<RunId>, StoreError>,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Renewing(pass) => {
                let error = match result {
                    Ok(renewed) => {
                        self.check_renewal(&renewed, pass.now, out);
                        None
                    }
                    Err(e) if e.kind() == StoreErrorKind::Conflict => {
                        self.taken_over(e.to_string(), out);
                        None
                    }
                    Err(e) => Some(PassError::Renew(e)),
                };
                out.push(Step::RecoverExpired { now: pass.now });
                self.phase = Phase::Recovering(pass, error);
            }
            Phase::Draining { renewing: true } => {
                match result {
                    Ok(renewed) => self.check_renewal(&renewed, now, out),
                    Err(e) if e.kind() == StoreErrorKind::Conflict => {
                        self.taken_over(e.to_string(), out);
                    }
                    Err(e) => tracing::warn!("{} while stopping", PassError::Renew(e)),
                }
                self.next_renew = now
                    .checked_add(self.config.renew_every)
                    .unwrap_or(Timestamp::MAX);
                self.phase = Phase::Draining { renewing: false };
                self.settle(now, out);
            }
            other => self.unexpected(other, "a renewal"),
        }
    }

    /// The renewal's verdict on this node's runs (see the module's invariants).
    fn check_renewal(&mut self, renewed: &[RunId], now: Timestamp, out: &mut Vec<Step>) {
        let renewed: BTreeSet<RunId> = renewed.iter().copied().collect();
        for run in &renewed {
            if !self.in_flight.contains_key(run) && !self.finishing.contains_key(run) {
                out.push(Step::FailOrphan { run: *run, now });
            }
        }
        let lost: Vec<RunId> = self
            .in_flight
            .keys()
            .filter(|r| !renewed.contains(r))
            .copied()
            .collect();
        let node = self.config.node.clone();
        for run in lost {
            tracing::warn!(
                "node {node} lost the lease of run {run} (another node recovered it); stopping it"
            );
            self.cancel(
                run,
                format!(
                    "cancelled: node {node} lost this run's lease (it was recovered after the \
                     lease expired); its outcome is not recorded"
                ),
                out,
            );
        }
    }

    /// Another process took this node id over: claim nothing more and stop, draining what
    /// runs while the leases last. Reported once.
    fn taken_over(&mut self, message: String, out: &mut Vec<Step>) {
        if self.taken_over {
            return;
        }
        self.taken_over = true;
        tracing::error!("{message}");
        out.push(Step::Publish(SchedulerEvent::TakenOver { message }));
        let grace = self.config.lease / 2;
        self.stop = Some(grace);
        if matches!(self.phase, Phase::Draining { .. }) {
            out.push(Step::DrainFor(grace));
        }
    }

    fn recovered(
        &mut self,
        result: Result<usize, StoreError>,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) {
        let (mut pass, renew_error) = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Recovering(pass, renew_error) => (pass, renew_error),
            other => return self.unexpected(other, "a recovery"),
        };
        let error = match result {
            Ok(0) => None,
            Ok(n) => {
                tracing::warn!(
                    "node {} recovered {n} runs whose lease expired",
                    self.config.node
                );
                // Their retries may be due now.
                self.wake_pending = true;
                None
            }
            Err(e) => Some(PassError::Recover(e)),
        };
        pass.error = renew_error.or(error);
        if pass.error.is_none() {
            self.next_renew = pass
                .now
                .checked_add(self.config.renew_every)
                .unwrap_or(Timestamp::MAX);
        }
        self.after_renew(pass, now, out);
    }

    fn after_renew(&mut self, pass: Pass, now: Timestamp, out: &mut Vec<Step>) {
        if self.stop.is_some() {
            return self.begin_drain(now, out);
        }
        if !self.paused && pass.error.is_none() {
            out.push(Step::Prepare {
                now: pass.now,
                horizon: pass.horizon,
            });
            self.phase = Phase::Preparing(pass);
        } else {
            self.after_prepare(pass, false, now, out);
        }
    }

    fn prepared(
        &mut self,
        result: Result<prepare::Prepared, StoreError>,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) {
        let mut pass = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Preparing(pass) => pass,
            other => return self.unexpected(other, "a preparation"),
        };
        let mut changed = false;
        match result {
            Ok(prepared) => {
                changed = prepared.changed;
                if let Some(fire) = prepared.held {
                    // Prepare again up to now: the fires to come are claimed at their time.
                    self.held = Some(self.held.map_or(fire, |h| h.min(fire)));
                    changed = true;
                }
                for (job, fire) in prepared.cancel_running {
                    changed |= self.cancel_running_of(job, fire, out);
                }
            }
            Err(e) => pass.error = Some(PassError::Prepare(e)),
        }
        self.after_prepare(pass, changed, now, out);
    }

    /// Overlap `cancel-running`: cancels this node's running runs of `job` so that its fire at
    /// `fire` starts (the claim that follows starts it). A run on another node cannot be
    /// stopped from here: the fire starts beside it, with a warning. Whether it asked a cancel.
    fn cancel_running_of(&mut self, job: JobId, fire: Timestamp, out: &mut Vec<Step>) -> bool {
        let mine = self.runs_of(job);
        if mine.is_empty() {
            tracing::warn!(
                "job {job}: overlap policy cancel-running cannot stop a run on another node; \
                 the fire at {fire} starts beside it"
            );
            return false;
        }
        let mut asked = false;
        for run in mine {
            // Asked in an earlier pass already (the claim waited for capacity): once only.
            if self.in_flight.get(&run).is_some_and(|f| !f.cancel_asked) {
                asked |= self.cancel(
                    run,
                    format!(
                        "cancelled: overlap policy cancel-running starts the job's fire at {fire}"
                    ),
                    out,
                );
            }
        }
        asked
    }

    fn after_prepare(
        &mut self,
        mut pass: Pass,
        changed: bool,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) {
        if self.outage_pass(pass.error.take(), now, out) {
            return;
        }
        if changed {
            // Prepare moved or recorded fires: the jobs now at the top of the claim order were
            // not prepared in this pass. Prepare again before claiming, so that every fire the
            // claim takes went through the misfire and overlap decisions.
            return self.start_pass(now, out);
        }
        if self.stop.is_some() {
            return self.begin_drain(now, out);
        }
        let free = self.room(pass.horizon, now);
        if free > 0 && !self.paused {
            let limit = free.min(self.config.claim_batch);
            let chunks = Chunks {
                taken: 0,
                chunk: if self.backlog { limit } else { FIRST_CLAIM },
                limit,
                asked: 0,
                reserved: 0,
            };
            self.claim_chunk(pass, chunks, now, out);
        } else {
            self.after_claim(pass, now, out);
        }
    }

    /// What a pass up to `horizon` may claim at `now`: the free slots, and when the horizon
    /// is still to come the room for fires claimed ahead of their time
    /// ([`SchedulerConfig::lookahead_batch`]).
    /// That room is beyond what is free for other runs, so the claim leaves it to recurring
    /// fires ([`Machine::claim_chunk`]'s `recurring_only`).
    fn room(&self, horizon: Timestamp, now: Timestamp) -> usize {
        let free = self.free(now);
        if horizon > now {
            free.any + free.ahead_of_time
        } else {
            free.any
        }
    }

    fn claim_chunk(&mut self, pass: Pass, mut chunks: Chunks, now: Timestamp, out: &mut Vec<Step>) {
        let left = chunks.limit - chunks.taken;
        chunks.asked = if left <= chunks.chunk.saturating_mul(2) {
            left
        } else {
            chunks.chunk
        };
        // The runs of earlier chunks are in flight already: what is free for others now.
        let others = self.free(now).others;
        chunks.reserved = chunks.asked.saturating_sub(others);
        out.push(Step::Claim {
            horizon: pass.horizon,
            limit: chunks.asked,
            recurring_only: chunks.reserved,
        });
        self.phase = Phase::Claiming(pass, chunks);
    }

    fn claimed(
        &mut self,
        result: Result<Vec<ClaimedRun>, StoreError>,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) {
        let (mut pass, mut chunks) = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Claiming(pass, chunks) => (pass, chunks),
            other => return self.unexpected(other, "a claim"),
        };
        let claimed = match result {
            Ok(claimed) => claimed,
            Err(e) if chunks.taken == 0 => {
                self.backlog = false;
                pass.error = Some(PassError::Claim(e));
                return self.after_claim(pass, now, out);
            }
            Err(e) => {
                // What was claimed runs; the pass's claiming ends.
                tracing::warn!("claiming due runs failed: {e}");
                return self.after_claim(pass, now, out);
            }
        };
        let got = claimed.len();
        let due_again = claimed
            .iter()
            .any(|c| c.job.next_fire.is_some_and(|nf| nf <= pass.horizon));
        self.learn_recurring_next(&claimed, pass.horizon);
        let recurring = claimed.iter().filter(|c| c.recurring_fire);
        let recurring_got = recurring.clone().count();
        let latest_recurring = recurring.map(|c| c.run.fire_time).max();
        // The claim's fairness share gives recurring fires at least half of a claim when more
        // is due than it takes (`Store::run_claim_due`): fewer than that, or a claim that
        // came back short, and every recurring fire due by the horizon is claimed.
        let all_recurring_claimed = got < chunks.asked || recurring_got < chunks.asked.div_ceil(2);
        // Every recurring fire due by the instant to come is claimed: a full claim then means
        // only other runs are left, due now.
        let instant_claimed = pass.horizon > pass.now && all_recurring_claimed;
        // A crowded instant claimed behind it (a backlog, a start) is timed too, from the
        // pass of its first claim: the window of the next one is learned before it comes.
        if pass.horizon == pass.now
            && self.crowd.is_none()
            && !all_recurring_claimed
            && let Some(instant) = latest_recurring
        {
            self.crowd = Some((instant, pass.now));
        }
        for c in claimed {
            self.start(c, out);
        }
        chunks.taken += got;
        pass.progressed |= chunks.taken > 0;
        // Everything due by the crowded instant is claimed: how long its claims took widens
        // the next one's window.
        if all_recurring_claimed
            && self
                .crowd
                .is_some_and(|(instant, _)| pass.horizon >= instant)
        {
            self.crowd_claimed(now);
        }
        // Full: the part of the claim open to any run was filled, so more may be due than the
        // room (the reserved part stays empty when no recurring fire is due).
        self.backlog = got >= chunks.asked - chunks.reserved;
        if pass.horizon > now && got < chunks.asked {
            // Everything due by the instant to come is claimed (its room held more).
            return self.after_claim(pass, now, out);
        }
        if self.backlog
            && self.stop.is_none()
            && (got < chunks.asked || chunks.taken >= chunks.limit)
        {
            return self.after_full_claim(pass, instant_claimed, now, out);
        }
        if got < chunks.asked || due_again || self.stop.is_some() || chunks.taken >= chunks.limit {
            return self.after_claim(pass, now, out);
        }
        chunks.chunk = chunks.chunk.saturating_mul(2);
        self.claim_chunk(pass, chunks, now, out);
    }

    /// Keeps [`Machine::recurring_next`] from a claim up to `horizon`: an instant reached by
    /// the claim is over (its fires claimed here have moved on), and the recurring fires
    /// claimed tell, by their jobs' next fires, when the next ones are due.
    fn learn_recurring_next(&mut self, claimed: &[ClaimedRun], horizon: Timestamp) {
        if self.recurring_next.is_some_and(|r| r <= horizon) {
            self.recurring_next = None;
        }
        let next = claimed
            .iter()
            .filter(|c| c.recurring_fire)
            .filter_map(|c| c.job.next_fire)
            .filter(|nf| *nf > horizon)
            .min();
        if let Some(next) = next {
            self.recurring_next = Some(self.recurring_next.map_or(next, |r| r.min(next)));
        }
    }

    /// The crowded instant's fires are all claimed at `now`: how long that took from its
    /// first pass widens the next one's window ([`Machine::window`]).
    fn crowd_claimed(&mut self, now: Timestamp) {
        let Some((instant, since)) = self.crowd.take() else {
            return;
        };
        let took = Duration::try_from(now.duration_since(since)).unwrap_or_default();
        // Quick to rise, slow to fall: one quicker instant does not leave the next, as
        // crowded, to be claimed behind it.
        self.crowd_span = took.max(self.crowd_span * 3 / 4);
        tracing::debug!(
            "the fires due at {instant} were claimed in {took:?} (window now {:?})",
            self.window()
        );
    }

    /// The pass's room is claimed and its last claim was full: more is due now than there was
    /// room for, so the next due instant is known without reading it (`next_due` would answer
    /// an instant not after now) — one store call less per pass of a drain. What follows is
    /// what [`Machine::next_due`] decides for a due instant that has come: pass again at once
    /// when a slot open to any run has freed meanwhile, else wait for an end (or the renewal,
    /// or the safety poll). Should nothing be due after all, that next pass claims nothing and
    /// reads the next due instant as usual. When only the recurring reserve is free, the next
    /// recurring fire is not known and is read as usual (`after_claim`).
    ///
    /// A pass that claimed ahead of an instant to come (its horizon) and filled its room
    /// keeps that instant planned: more of its fires may be due, and the next pass claims
    /// them ahead too, at once while there is room for them.
    ///
    /// During a backlog the instant to come is that of the next recurring fires as the claims
    /// saw it ([`Machine::recurring_next`]): once it is within the window, the backlog's
    /// passes claim up to it, so a schedule's fires are claimed ahead of their instant while
    /// the backlog drains, as they are without one (B6: 1 000 every-second crons behind
    /// 10 000 one-offs were claimed only after their instant, at half of each claim, and ran
    /// 100–300 ms late). A node whose slots are all taken wakes when that window opens, as
    /// the fires may wait beyond its slots ([`SchedulerConfig::lookahead_batch`]).
    fn after_full_claim(
        &mut self,
        pass: Pass,
        instant_claimed: bool,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) {
        self.last_pass = Duration::try_from(now.duration_since(pass.now)).unwrap_or_default();
        let free = self.free(now);
        if pass.horizon > now && !instant_claimed {
            self.planned = Some(pass.horizon);
            if !self.paused && self.room(pass.horizon, now) > 0 {
                return self.poke(now, out);
            }
            return self.sleep(Some(self.next_renew), self.config.safety_poll, now, out);
        }
        if !self.paused && free.others == 0 && free.any > 0 {
            return self.after_claim(pass, now, out);
        }
        self.planned = self.recurring_next.filter(|r| *r > now);
        let horizon = self.horizon(now);
        let ahead = horizon > now && self.room(horizon, now) > 0;
        if !self.paused && (free.others > 0 || ahead) {
            // `claimed` left the phase Idle: the poke passes again, or gathers first.
            return self.poke(now, out);
        }
        // Only fires that may wait beyond the slots can be claimed with every slot taken.
        let wake = self
            .planned
            .filter(|_| self.config.lookahead_batch > 0)
            .map(|p| self.wake_for(p))
            .filter(|w| *w > now)
            .map_or(self.next_renew, |w| w.min(self.next_renew));
        self.sleep(Some(wake), self.config.safety_poll, now, out);
    }

    /// Hands a claimed run to the shell. A run claimed ahead of its fire time (the lookahead)
    /// is handed over at once and waits for its time in its task.
    fn start(&mut self, claimed: ClaimedRun, out: &mut Vec<Step>) {
        let Some(id) = claimed.run.id else {
            tracing::error!(
                "the store returned a claimed run of job {} without an id; it cannot be recorded",
                claimed.job.name
            );
            return;
        };
        self.in_flight.insert(
            id,
            Flight {
                job: claimed.run.job_id,
                fire_time: claimed.run.fire_time,
                attempt: claimed.run.attempt,
                cancel_asked: false,
                recurring: claimed.recurring_fire,
                ends_early: !claimed.job.is_recurring() && claimed.job.group.is_none(),
                start: claimed.run.start_at(),
            },
        );
        out.push(Step::Publish(SchedulerEvent::Started {
            run: id,
            job: claimed.run.job_id,
            fire_time: claimed.run.fire_time,
            attempt: claimed.run.attempt,
        }));
        out.push(Step::Start(Box::new(claimed)));
    }

    fn after_claim(&mut self, pass: Pass, now: Timestamp, out: &mut Vec<Step>) {
        if self.stop.is_some() {
            return self.begin_drain(now, out);
        }
        // Only the reserve free: only a recurring fire can be claimed, and every due one-off
        // would otherwise be the next due instant (past, so the loop would sleep to the
        // safety poll through the next schedule).
        let free = self.free(now);
        let set = if free.others == 0 && free.any > 0 {
            DueSet::Recurring
        } else {
            DueSet::All
        };
        out.push(Step::ReadNextDue { set });
        self.phase = Phase::ReadingDue(pass);
    }

    fn next_due(
        &mut self,
        result: Result<Option<Timestamp>, StoreError>,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) {
        let mut pass = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::ReadingDue(pass) => pass,
            other => return self.unexpected(other, "a next due time"),
        };
        let due = match result {
            Ok(due) => due,
            Err(e) => {
                pass.error.get_or_insert(PassError::NextDue(e));
                None
            }
        };
        self.planned = due;
        if self.outage_pass(pass.error.take(), now, out) {
            return;
        }
        let has_free = !self.paused && self.free(now).any > 0;
        if pass.progressed && has_free && due.is_some_and(|d| d <= now) {
            // More is due right now (a backlog, a second fire of a catch-up): pass again.
            return self.start_pass(now, out);
        }
        // At capacity, only a recorded end makes room; a due instant that has passed without
        // a claim waits for a wake or the safety poll.
        let wake = due
            .filter(|d| has_free && *d > pass.horizon)
            .map(|d| self.wake_for(d))
            .map_or(self.next_renew, |d| d.min(self.next_renew));
        self.sleep(Some(wake), self.config.safety_poll, now, out);
    }

    /// Ends the pass with a wait; a wake kept from the pass starts the next one at once.
    fn sleep(
        &mut self,
        until: Option<Timestamp>,
        at_most: Duration,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) {
        self.phase = Phase::Idle;
        if self.wake_pending {
            return self.start_pass(now, out);
        }
        out.push(Step::Sleep {
            until,
            at_most: Some(at_most),
        });
    }

    /// Records the end of a pass with `error`; when it failed, waits with backoff (true).
    fn outage_pass(
        &mut self,
        error: Option<PassError>,
        now: Timestamp,
        out: &mut Vec<Step>,
    ) -> bool {
        match error {
            Some(error) => {
                if self.outage.since.is_none() {
                    self.outage.since = Some(now);
                    tracing::warn!("the database is unavailable: {error}; retrying with backoff");
                    out.push(Step::Publish(SchedulerEvent::StoreUnavailable {
                        error: error.to_string(),
                    }));
                }
                self.outage.failed_passes = self.outage.failed_passes.saturating_add(1);
                let exp = self.outage.failed_passes.min(5) - 1;
                let pause = (Duration::from_millis(500) * (1 << exp)).min(OUTAGE_BACKOFF_MAX);
                self.phase = Phase::Idle;
                if self.stop.is_some() {
                    self.begin_drain(now, out);
                } else {
                    self.sleep(None, pause, now, out);
                }
                true
            }
            None => {
                if let Some(at) = self.outage.since.take() {
                    let down_for = Duration::try_from(now.duration_since(at)).unwrap_or_default();
                    tracing::warn!("the database is back after {down_for:?}");
                    out.push(Step::Publish(SchedulerEvent::StoreRecovered { down_for }));
                }
                self.outage.failed_passes = 0;
                false
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // A run's end

    fn run_ended(&mut self, ended: Ended, now: Timestamp, out: &mut Vec<Step>) {
        let Ended {
            id,
            mut run,
            retry,
            event,
            elapsed,
            plugin,
            drained,
        } = ended;
        let flight = self.in_flight.remove(&id).unwrap_or(Flight {
            job: run.job_id,
            fire_time: run.fire_time,
            attempt: run.attempt,
            cancel_asked: false,
            recurring: false,
            ends_early: false,
            start: run.fire_time,
        });
        if let Some(version) = drained {
            out.push(Step::Publish(SchedulerEvent::PluginDrained { version }));
        }
        let attempt = run.attempt;
        if let Err(e) = run.apply(event, now, &retry) {
            tracing::error!("run {id} cannot end its attempt {attempt}: {e}");
            // Left running in the store: the next renewal fails it as an orphan.
            return self.poke(now, out);
        }
        let mut finish = RunFinish::from_run(&run, now);
        if elapsed.is_some() {
            finish.elapsed = elapsed;
        }
        finish.plugin = plugin;
        if let Some(took) = elapsed {
            // A moving average over the last few ends (weight 1/4): it follows a change of
            // workload within a few runs, and one odd run moves it a quarter of the way.
            self.mean_run = Some(match self.mean_run {
                Some(mean) => (mean * 3 + took) / 4,
                None => took,
            });
        }
        let ends_early = flight.ends_early;
        self.finishing.insert(id, flight);
        out.push(Step::Record {
            run: id,
            attempt,
            finish: Box::new(finish),
        });
        // A backlog's next pass is due as soon as slots free, and the record (a group commit
        // on a server store: milliseconds) changes nothing that pass decides from the store
        // when the run's job does not recur (no fire of it is due for an overlap decision)
        // and has no group (no member limit or hold counts it). So such an end starts that
        // pass now instead of at its record (B5 on PostgreSQL, capacity 10: a cycle of ten
        // runs was a pass plus a finish's commit). What it may still see as running: a manual
        // trigger of the same job racing its end, decided by the overlap policy as a trigger
        // a moment earlier would be, and a dependent's fire due in those milliseconds, which
        // waits and is re-checked within `RECHECK` (1 s). Every other end starts the pass at
        // its record, as before.
        if ends_early && self.backlog {
            self.poke(now, out);
        }
    }

    // -----------------------------------------------------------------------------------------
    // The stop

    fn begin_drain(&mut self, now: Timestamp, out: &mut Vec<Step>) {
        self.phase = Phase::Draining { renewing: false };
        out.push(Step::DrainFor(self.stop.unwrap_or_default()));
        self.settle(now, out);
    }

    /// The next move of a stop: renew while draining, stop the executor once nothing runs,
    /// exit once every end is recorded.
    fn settle(&mut self, now: Timestamp, out: &mut Vec<Step>) {
        let idle = self.in_flight.is_empty() && self.finishing.is_empty();
        match self.phase {
            Phase::Draining { renewing: false } => {
                if idle {
                    self.stop_executor(out);
                } else if now >= self.next_renew {
                    let until = now.checked_add(self.config.lease).unwrap_or(Timestamp::MAX);
                    self.phase = Phase::Draining { renewing: true };
                    out.push(Step::Renew { now, until });
                } else {
                    out.push(Step::Sleep {
                        until: Some(self.next_renew),
                        at_most: None,
                    });
                }
            }
            Phase::Stopping {
                executor_stopped: true,
            } if idle => {
                self.phase = Phase::Stopped;
                out.push(Step::Exit);
            }
            _ => {}
        }
    }

    fn stop_executor(&mut self, out: &mut Vec<Step>) {
        self.phase = Phase::Stopping {
            executor_stopped: false,
        };
        out.push(Step::StopExecutor);
    }

    fn unexpected(&mut self, phase: Phase, what: &str) {
        tracing::error!("scheduling loop: {what} answered in phase {phase:?}; ignored");
        self.phase = phase;
    }
}
