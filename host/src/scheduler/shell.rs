//! The async shell of the scheduling loop: the one task that owns the [`Machine`], turns every
//! input into an [`Event`], hands it to [`Machine::handle`] and carries out the [`Step`]s.
//!
//! What the shell may do: perform a step exactly as asked (a store call, a task spawn, a
//! publication, a cancel, a wait), hold the resources the steps name (the run tasks, their
//! cancel tokens, the armed timers), and report every result back as an event. What it must
//! not do: decide. It never skips, reorders or adds a step, never reads a store answer other
//! than to pass it back, and keeps no scheduling state besides those resources (what the
//! handle shows, `running` and the stop's grace, is published from the machine after each
//! event).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use takt_core::job::JobId;
use takt_core::run::{RunId, RunState};
use takt_core::store::{
    ClaimParams, LogLevel, LogLine, RunFilter, Store, StoreError, StoreErrorKind,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::identity::LiveHere;
use super::machine::prepare::{self, Prepared, Write};
use super::machine::{Event, Machine, Step};
use super::observe::{AttemptEnd, Observer};
use super::run;
use super::{Ctx, SchedulerEvent};
use crate::executor::CancelToken;
use takt_core::policy::Busy;
use takt_core::run::Run;

/// An input from the handle: a wake or a command, with where to answer a command's reply.
pub(super) type Input = (Event, Option<oneshot::Sender<bool>>);

/// The shell's resources and the machine.
pub(super) struct Shell<S> {
    pub ctx: Arc<Ctx<S>>,
    pub machine: Machine,
    pub inputs: mpsc::UnboundedReceiver<Input>,
    /// Mirror of [`Machine::running`], for the handle.
    pub running: Arc<AtomicUsize>,
    /// Events handled, for the handle's liveness signal (`loop_passes`).
    pub passes: Arc<AtomicU64>,
    /// Mirror of [`Machine::stop_grace`], for the record tasks and the plugin watch.
    pub stop: watch::Sender<Option<Duration>>,
    /// The plugin directory watch, ended with the loop.
    pub watch: Option<JoinHandle<()>>,
    /// This life's registration, held while the loop runs and released when it ends.
    pub _live: LiveHere,
}

/// The shell's run tasks and timers.
struct Resources {
    runs: JoinSet<Event>,
    run_of_task: HashMap<tokio::task::Id, RunId>,
    tokens: HashMap<RunId, CancelToken>,
    records: JoinSet<(RunId, Option<RunState>)>,
    record_of_task: HashMap<tokio::task::Id, RunId>,
    /// The armed wait: on the clock, and a real-time bound.
    until: Option<Timestamp>,
    at_most: Option<tokio::time::Instant>,
    drain_started: Option<tokio::time::Instant>,
    drain_deadline: Option<tokio::time::Instant>,
    inputs_open: bool,
    abandoned_alive: usize,
    /// Per run in flight, what the observer is told at its end: job, job name, fire time.
    observed: HashMap<RunId, (JobId, String, Timestamp)>,
    /// Runs of this node that ended for good (no retry) and whose end is being recorded, by
    /// job: [`Ending`].
    ending: Ending,
}

/// The runs whose end is being recorded, by job: still running in the store until their
/// record commits, though they ran their course here. A preparation does not count them as
/// in flight ([`prepare`]): during a backlog the records of thousands of ends queue for the
/// database, and an every-second cron whose last run had ended but was not yet recorded was
/// taken for an overlap and its fire skipped (B6).
#[derive(Debug, Default)]
struct Ending {
    runs: HashMap<RunId, JobId>,
    jobs: HashMap<JobId, u32>,
}

impl Ending {
    fn insert(&mut self, run: RunId, job: JobId) {
        if self.runs.insert(run, job).is_none() {
            *self.jobs.entry(job).or_default() += 1;
        }
    }

    fn remove(&mut self, run: RunId) {
        let Some(job) = self.runs.remove(&run) else {
            return;
        };
        if let Some(n) = self.jobs.get_mut(&job) {
            *n -= 1;
            if *n == 0 {
                self.jobs.remove(&job);
            }
        }
    }

    /// How many of `job`'s runs ended here and are being recorded.
    fn of(&self, job: JobId) -> u32 {
        self.jobs.get(&job).copied().unwrap_or(0)
    }
}

impl<S: Store + Clone + 'static> Shell<S> {
    /// Runs the loop until the machine exits.
    pub(super) async fn run(mut self) {
        let mut res = Resources {
            runs: JoinSet::new(),
            run_of_task: HashMap::new(),
            tokens: HashMap::new(),
            records: JoinSet::new(),
            record_of_task: HashMap::new(),
            until: None,
            at_most: None,
            drain_started: None,
            drain_deadline: None,
            inputs_open: true,
            abandoned_alive: 0,
            observed: HashMap::new(),
            ending: Ending::default(),
        };
        // The answer to the outstanding call, fed before anything else.
        let mut answer: Option<Event> = Some(Event::Wake);
        loop {
            let (event, mut reply) = match answer.take() {
                Some(event) => (event, None),
                None => self.next_input(&mut res).await,
            };
            let steps = self.machine.handle(event, self.ctx.clock.now());
            self.publish_view();
            let mut call = None;
            for step in steps {
                if step.is_call() {
                    debug_assert!(call.is_none(), "the machine asked two calls at once");
                    call = Some(step);
                    continue;
                }
                if self.perform(step, &mut res, &mut reply).await {
                    return;
                }
            }
            if let Some(call) = call {
                // Inputs that are ready get their turn before the call (a cancel, a stop, a
                // run's end): the machine waits for the call's answer and asks nothing else.
                while let Some((event, mut reply)) = ready(&mut self.inputs, &mut res) {
                    let steps = self.machine.handle(event, self.ctx.clock.now());
                    self.publish_view();
                    for step in steps {
                        debug_assert!(!step.is_call(), "a call while another is outstanding");
                        if self.perform(step, &mut res, &mut reply).await {
                            return;
                        }
                    }
                }
                answer = Some(self.call(call, &mut res).await);
            }
        }
    }

    fn publish_view(&self) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.running.store(self.machine.running(), Ordering::SeqCst);
        let grace = self.machine.stop_grace();
        self.stop.send_if_modified(|g| {
            let changed = *g != grace;
            *g = grace;
            changed
        });
    }

    /// Waits for the next input: the handle, a run task, a record task, a timer.
    async fn next_input(&mut self, res: &mut Resources) -> Input {
        let clock = self.ctx.clock.clone();
        let until = res.until;
        let at_most = res.at_most;
        let deadline = res.drain_deadline;
        tokio::select! {
            input = self.inputs.recv(), if res.inputs_open => match input {
                Some(input) => input,
                None => {
                    // Every handle is gone: the loop goes on (it ends with its runtime).
                    res.inputs_open = false;
                    (Event::Wake, None)
                }
            },
            Some(joined) = res.runs.join_next_with_id(), if !res.runs.is_empty() => {
                (run_joined(joined, res), None)
            }
            Some(joined) = res.records.join_next_with_id(), if !res.records.is_empty() => {
                (record_joined(joined, res), None)
            }
            () = async { clock.sleep_until(until.unwrap_or(Timestamp::MAX)).await }, if until.is_some() => {
                res.until = None;
                res.at_most = None;
                (Event::Timer, None)
            }
            () = tokio::time::sleep_until(at_most.unwrap_or_else(tokio::time::Instant::now)), if at_most.is_some() => {
                res.until = None;
                res.at_most = None;
                (Event::Timer, None)
            }
            () = tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)), if deadline.is_some() => {
                res.drain_deadline = None;
                (Event::DrainDeadline, None)
            }
            else => {
                // Nothing armed and nothing running: the machine always arms a wait when
                // idle, so this is a defect; poll rather than hang.
                tracing::error!("scheduling loop: waiting with nothing armed; polling");
                tokio::time::sleep(self.ctx.config.safety_poll).await;
                (Event::Timer, None)
            }
        }
    }

    /// Carries out a step that is not a call; true once the loop is over.
    async fn perform(
        &mut self,
        step: Step,
        res: &mut Resources,
        reply: &mut Option<oneshot::Sender<bool>>,
    ) -> bool {
        match step {
            Step::Publish(event) => {
                match &event {
                    SchedulerEvent::StoreUnavailable { .. } => self.ctx.observer.outage(true),
                    SchedulerEvent::StoreRecovered { .. } => self.ctx.observer.outage(false),
                    _ => {}
                }
                let _ = self.ctx.events.send(event);
            }
            Step::Start(claimed) => {
                let claimed = *claimed;
                let Some(id) = claimed.run.id else {
                    return false;
                };
                let cancel = CancelToken::new();
                res.tokens.insert(id, cancel.clone());
                res.observed.insert(
                    id,
                    (
                        claimed.run.job_id,
                        claimed.job.name.to_string(),
                        claimed.run.fire_time,
                    ),
                );
                let ctx = self.ctx.clone();
                // Boxed: a run's future is kilobytes, and tokio copies a future it is given
                // by value through its spawn layers and again into the task's cell when it
                // completes; a box is copied as a pointer.
                let task = res.runs.spawn(Box::pin(async move {
                    Event::RunEnded(Box::new(run::execute(&ctx, id, claimed, cancel).await))
                }));
                res.run_of_task.insert(task.id(), id);
            }
            Step::Cancel { run, why } => {
                if let Some(token) = res.tokens.get(&run).cloned() {
                    // The line first, so the record says who stopped it.
                    let line = LogLine {
                        at: self.ctx.clock.now(),
                        level: LogLevel::Warn,
                        message: why,
                    };
                    if let Err(e) = self.ctx.store.log_append(run, &[line]).await {
                        tracing::warn!("cannot write why run {run} is cancelled into its log: {e}");
                    }
                    token.cancel();
                }
            }
            Step::FailOrphan { run, now } => run::fail_orphan(&self.ctx, run, now).await,
            Step::Record {
                run,
                attempt,
                finish,
            } => {
                let ctx = self.ctx.clone();
                let stop = self.stop.subscribe();
                let observed = res.observed.remove(&run);
                // Ended for good: not in flight for the overlap decisions, though the store
                // says running until the record commits. A retry stays in flight (pending).
                if finish.retry_at.is_none()
                    && let Some((job, _, _)) = &observed
                {
                    res.ending.insert(run, *job);
                }
                // Boxed, as a run's future is.
                let task = res.records.spawn(Box::pin(async move {
                    let state = run::record(&ctx.store, run, attempt, &finish, stop).await;
                    if let (Some(state), Some((job, name, fire))) = (state, observed) {
                        observe_end(&*ctx.observer, job, &name, fire, attempt, state, &finish);
                    }
                    (run, state)
                }));
                res.record_of_task.insert(task.id(), run);
            }
            Step::Reply(answer) => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(answer);
                }
            }
            Step::Sleep { until, at_most } => {
                res.until = until;
                res.at_most = at_most.map(|d| tokio::time::Instant::now() + d);
            }
            Step::DrainFor(grace) => {
                let started = *res
                    .drain_started
                    .get_or_insert_with(tokio::time::Instant::now);
                res.drain_deadline = Some(started + grace);
            }
            Step::Exit => {
                self.exit(res).await;
                return true;
            }
            Step::Renew { .. }
            | Step::RecoverExpired { .. }
            | Step::Prepare { .. }
            | Step::Claim { .. }
            | Step::ReadNextDue { .. }
            | Step::StopExecutor => unreachable!("calls are made by `call`"),
        }
        false
    }

    /// Makes a call and returns its answer.
    async fn call(&mut self, step: Step, res: &mut Resources) -> Event {
        let event = self.call_store(step, res).await;
        let failed = match &event {
            Event::Renewed(r) => r.is_err(),
            Event::Recovered(r) => r.is_err(),
            Event::Prepared(r) => r.is_err(),
            Event::Claimed(r) => r.is_err(),
            Event::NextDue(r) => r.is_err(),
            _ => false,
        };
        if failed {
            self.ctx.observer.store_failed();
        }
        event
    }

    async fn call_store(&mut self, step: Step, res: &mut Resources) -> Event {
        let ctx = &self.ctx;
        let config = &ctx.config;
        match step {
            Step::Renew { now, until } => Event::Renewed(
                ctx.store
                    .lease_renew(&config.node, &config.instance, until, now)
                    .await,
            ),
            Step::RecoverExpired { now } => Event::Recovered(
                ctx.store
                    .run_recover_expired(now, None)
                    .await
                    .map(|runs| runs.len()),
            ),
            Step::Prepare { now, horizon } => {
                Event::Prepared(prepare(ctx, now, horizon, &res.ending).await)
            }
            Step::Claim {
                horizon,
                limit,
                recurring_only,
            } => {
                let params = ClaimParams {
                    // A claim ahead of its horizon: what was due already records its
                    // real start, not the horizon.
                    claimed_at: Some(ctx.clock.now().min(horizon)),
                    node: config.node.clone(),
                    instance: config.instance.clone(),
                    tags: config.tags.clone(),
                    now: horizon,
                    limit,
                    recurring_only,
                    lease: config.lease,
                };
                let begun = std::time::Instant::now();
                let claimed = ctx.store.run_claim_due(&params).await;
                if let Ok(c) = &claimed {
                    ctx.observer.claimed(begun.elapsed(), c.len());
                }
                Event::Claimed(claimed)
            }
            Step::ReadNextDue { set } => {
                Event::NextDue(ctx.store.next_due(&config.tags, set).await)
            }
            Step::StopExecutor => {
                // What still runs is cancelled as shutdown and given the executor's grace to
                // return; a run still queued for a slot ends without being called.
                let stats = ctx.executor.shutdown(ctx.executor.grace()).await;
                res.abandoned_alive = stats.abandoned_alive;
                Event::ExecutorStopped
            }
            other => unreachable!("{other:?} is not a call"),
        }
    }

    async fn exit(&mut self, res: &mut Resources) {
        if let Some(w) = self.watch.take() {
            w.abort();
        }
        // Every call has ended or been killed: the worker processes go now.
        let plugins = self.ctx.plugins.clone();
        let _ = tokio::task::spawn_blocking(move || {
            plugins.shutdown_workers(Duration::from_secs(5));
        })
        .await;
        if res.abandoned_alive > 0 {
            tracing::warn!(
                "{} plugin threads ignored the shutdown and were abandoned",
                res.abandoned_alive
            );
        }
        // A clean stop frees the node id at once for the next start (a taken-over life's stop
        // changes nothing: the row is the new life's).
        let config = &self.ctx.config;
        if let Err(e) = self
            .ctx
            .store
            .node_stopped(&config.node, &config.instance, self.ctx.clock.now())
            .await
        {
            tracing::warn!("cannot record the stop of node {}: {e}", config.node);
        }
        self.running.store(0, Ordering::SeqCst);
    }
}

/// Tells the observer of a recorded attempt end; the plugin's start as the wall clock saw it
/// is its end less its run time, so lateness is measured for first attempts that ran.
fn observe_end(
    observer: &dyn Observer,
    job: JobId,
    name: &str,
    fire: Timestamp,
    attempt: u32,
    state: RunState,
    finish: &takt_core::store::RunFinish,
) {
    let lateness = finish.elapsed.filter(|_| attempt == 1).map(|e| {
        let began = finish
            .finished_at
            .checked_sub(jiff::SignedDuration::try_from(e).unwrap_or_default())
            .unwrap_or(finish.finished_at);
        Duration::try_from(began.duration_since(fire)).unwrap_or(Duration::ZERO)
    });
    observer.attempt_ended(&AttemptEnd {
        job,
        job_name: name,
        attempt,
        state,
        elapsed: finish.elapsed,
        lateness,
    });
}

/// An input that is ready now, without waiting (a timer is not: it is only armed while idle).
fn ready(inputs: &mut mpsc::UnboundedReceiver<Input>, res: &mut Resources) -> Option<Input> {
    if let Some(joined) = res.runs.try_join_next_with_id() {
        return Some((run_joined(joined, res), None));
    }
    if let Some(joined) = res.records.try_join_next_with_id() {
        return Some((record_joined(joined, res), None));
    }
    inputs.try_recv().ok()
}

fn run_joined(
    joined: Result<(tokio::task::Id, Event), tokio::task::JoinError>,
    res: &mut Resources,
) -> Event {
    let (task, event) = match joined {
        Ok((task, event)) => (task, Some(event)),
        Err(e) => (e.id(), None),
    };
    let Some(run) = res.run_of_task.remove(&task) else {
        return event.unwrap_or(Event::Wake);
    };
    res.tokens.remove(&run);
    event.unwrap_or(Event::RunAbandoned(run))
}

fn record_joined(
    joined: Result<(tokio::task::Id, (RunId, Option<RunState>)), tokio::task::JoinError>,
    res: &mut Resources,
) -> Event {
    match joined {
        Ok((task, (run, state))) => {
            res.record_of_task.remove(&task);
            res.ending.remove(run);
            Event::RunRecorded { run, state }
        }
        Err(e) => match res.record_of_task.remove(&e.id()) {
            Some(run) => {
                res.ending.remove(run);
                tracing::error!("recording the end of run {run} panicked: {e}");
                Event::RunRecorded { run, state: None }
            }
            None => Event::Wake,
        },
    }
}

/// The preparation of a pass ([`Step::Prepare`]): reads the first `claim_batch` due jobs in
/// claim order, lets [`prepare`]'s decisions say what to write, and writes it. The runs of
/// `ending` ran their course here: not in flight, though still running in the store.
async fn prepare<S: Store>(
    ctx: &Ctx<S>,
    now: Timestamp,
    horizon: Timestamp,
    ending: &Ending,
) -> Result<Prepared, StoreError> {
    let store = &ctx.store;
    let mut out = Prepared::default();
    // Due by the horizon (decided ahead, with the claim); late by the real clock.
    for mut due in store
        .job_due(horizon, ctx.config.claim_batch, &ctx.config.tags)
        .await?
    {
        due.running = due.running.saturating_sub(ending.of(due.id));
        if prepare::fire_to_come_waits(&due, now) {
            out.held = Some(out.held.map_or(due.next_fire, |h| h.min(due.next_fire)));
            continue;
        }
        if !prepare::needs_decision(&due, now) {
            continue;
        }
        // A decision needs the schedule: load the whole job (it may be gone or changed since
        // the row was read; then the next pass decides again).
        let Some(job) = store.job_get(due.id).await? else {
            continue;
        };
        let (mut writes, overlap_fire) = prepare::misfire_writes(&job, &due, now);
        write(ctx, due.id, &writes, now, &mut out).await?;
        if let Some(fire) = overlap_fire {
            let busy = Busy {
                running: due.running as usize,
                queued: due.pending as usize,
                since: busy_since(store, due.id).await?,
            };
            writes = prepare::overlap_writes(&job, due.overlap, busy, fire);
            write(ctx, due.id, &writes, now, &mut out).await?;
        }
    }
    Ok(out)
}

/// Makes one decision's writes; a lost race (a fire recorded or moved by another node) is
/// fine: the next pass decides again from the stored value.
async fn write<S: Store>(
    ctx: &Ctx<S>,
    job: JobId,
    writes: &[Write],
    now: Timestamp,
    out: &mut Prepared,
) -> Result<(), StoreError> {
    let store = &ctx.store;
    let lost = |e: &StoreError| e.kind() == StoreErrorKind::Conflict;
    for w in writes {
        match w {
            Write::Skip {
                fire,
                reason,
                detail,
            } => {
                let run = Run::skipped(job, *fire, *reason, detail.clone(), now);
                match store.run_insert_skipped(&run).await {
                    Ok(_) => {
                        ctx.observer.skipped(job, *reason);
                        out.changed = true;
                    }
                    Err(e) if lost(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            Write::NextFire { expected, new } => {
                if *new == Some(*expected) {
                    continue;
                }
                match store.job_set_next_fire(job, Some(*expected), *new).await {
                    Ok(()) => out.changed = true,
                    Err(e) if lost(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            Write::Enqueue { fire } => match store.run_enqueue(job, *fire, now).await {
                Ok(_) => out.changed = true,
                Err(e) if lost(&e) => {}
                Err(e) => return Err(e),
            },
            Write::CancelRunning { fire } => out.cancel_running.push((job, *fire)),
        }
    }
    Ok(())
}

/// When the runs of `job` now in flight began: the earliest creation of its running and
/// pending runs (see [`Busy::since`]). A handful of rows: what one job has in flight.
async fn busy_since<S: Store>(store: &S, job: JobId) -> Result<Option<Timestamp>, StoreError> {
    let mut since: Option<Timestamp> = None;
    for state in [RunState::Running, RunState::Pending] {
        let runs = store
            .run_list(&RunFilter {
                job: Some(job),
                state: Some(state),
                limit: 10_000,
                ..RunFilter::default()
            })
            .await?;
        // A run waiting for its dependencies is not in flight (as `job_due` counts).
        for r in runs.into_iter().filter(|r| !r.is_waiting()) {
            since = Some(since.map_or(r.created_at, |s| s.min(r.created_at)));
        }
    }
    Ok(since)
}

#[cfg(test)]
mod ending_tests {
    use super::*;

    #[test]
    fn ending_counts_each_run_once_per_job_until_recorded() {
        let mut e = Ending::default();
        e.insert(RunId(1), JobId(7));
        e.insert(RunId(1), JobId(7));
        e.insert(RunId(2), JobId(7));
        e.insert(RunId(3), JobId(8));
        assert_eq!((e.of(JobId(7)), e.of(JobId(8)), e.of(JobId(9))), (2, 1, 0));
        e.remove(RunId(1));
        e.remove(RunId(1));
        e.remove(RunId(3));
        assert_eq!((e.of(JobId(7)), e.of(JobId(8))), (1, 0));
        e.remove(RunId(2));
        assert!(e.jobs.is_empty() && e.runs.is_empty());
    }
}
