//! One run's task, outside the machine: wait for its start, resolve its handler, call the
//! executor (or a `takt::` built-in), forward its log; and the recording of its end, retried
//! while the database is away. Neither decides anything about the loop: the run's new state
//! is decided by the machine ([`takt_core::run::Run::apply`]) from the [`Ended`] returned here.

use std::time::Duration;

use takt_core::run::{PluginBuild, RunEvent, RunId, RunState};
use takt_core::store::{ClaimedRun, RunFinish, Store};
use tokio::sync::watch;

use super::Ctx;
use super::machine::{Ended, OUTAGE_BACKOFF_MAX};
use super::sink::LogForwarder;
use crate::executor::{CancelToken, Outcome, RunRequest};
use crate::plugins::build_of;

/// The error of a run this node's store held as running but this node never started.
pub const ORPHANED: &str = "the claim of this run lost its connection before the node heard of \
     it, so it was never started; failed to be retried per policy";

/// Executes one claimed run; returns how it ended, for the machine to decide its state.
pub(super) async fn execute<S: Store + Clone + 'static>(
    ctx: &Ctx<S>,
    id: RunId,
    claimed: ClaimedRun,
    cancel: CancelToken,
) -> Ended {
    let ClaimedRun { run, job, .. } = claimed;
    let builtin = crate::builtin::is_builtin(&job.handler_type);
    let start = run.start_at();
    // Claimed ahead (the lookahead): a plugin run is handed to the executor now, with its
    // start instant, so that its thread is ready and wakes at the fire time; a built-in
    // run, or one on a clock that does not move with real time, waits here.
    let mut not_before = None;
    if start > ctx.clock.now() {
        not_before = ctx.clock.instant_of(start).filter(|_| !builtin);
        if not_before.is_none() {
            ctx.clock.sleep_until(start).await;
        }
    }
    // Dynamic parameters: resolved before the handler is called, recorded on the run.
    let params_json = match crate::dynparams::resolve_for_run(&ctx.store, &job, &run, id).await {
        Ok(None) => job.params_json.clone(),
        Ok(Some(resolved)) => {
            if let Err(e) = ctx.store.run_set_params(id, run.attempt, &resolved).await {
                tracing::warn!("run {id}: its resolved params could not be recorded ({e})");
            }
            resolved
        }
        Err((error, retryable)) => {
            if not_before.is_some() {
                // Recorded at its fire time, not before it: a run never ends early.
                ctx.clock.sleep_until(start).await;
            }
            return Ended {
                id,
                run,
                retry: job.retry,
                event: RunEvent::Failed { error, retryable },
                elapsed: None,
                plugin: None,
                drained: None,
            };
        }
    };
    // The plugin build that ran the attempt, recorded with its end.
    let mut plugin: Option<PluginBuild> = None;
    let mut drained = None;
    let (event, elapsed) = if builtin {
        let begun = std::time::Instant::now();
        let result = match crate::builtin::isolation_refusal(&job.handler_type, job.isolation) {
            Some(refusal) => Err((refusal, false)),
            None => {
                crate::builtin::run(
                    &ctx.store,
                    &job.handler_type,
                    &params_json,
                    id,
                    ctx.clock.now(),
                )
                .await
            }
        };
        let event = match result {
            Ok(json) => RunEvent::Succeeded {
                result_json: Some(json),
            },
            Err((error, retryable)) => RunEvent::Failed { error, retryable },
        };
        plugin = Some(crate::builtin::build());
        (event, Some(begun.elapsed()))
    } else {
        let target = ctx
            .plugins
            .resolve(&job.handler_type)
            .map_err(|e| e.to_string())
            .and_then(|(resolved, lease)| {
                // A run that cannot start where it must holds no lease: `lease` ends here.
                let target = ctx.plugins.target(&resolved.plugin, job.isolation)?;
                Ok((resolved, lease, target))
            });
        match target {
            Err(error) => {
                if not_before.is_some() {
                    // Recorded at its fire time, not before it: a run never ends early.
                    ctx.clock.sleep_until(start).await;
                }
                (
                    RunEvent::Failed {
                        error,
                        retryable: false,
                    },
                    None,
                )
            }
            Ok((resolved, lease, target)) => {
                let req = RunRequest {
                    target,
                    handler: resolved.handler.name.clone(),
                    handler_type: job.handler_type.clone(),
                    params_json,
                    job_id: job.id.map_or_else(String::new, |j| j.to_string()),
                    job_name: job.name.to_string(),
                    run_id: id.to_string(),
                    attempt: run.attempt,
                    fire_time: run.fire_time,
                    timeout: job.timeout.or(resolved.handler.default_timeout),
                    not_before,
                };
                let logs = LogForwarder::start(ctx.store.clone(), id, ctx.clock.clone());
                let report = ctx.executor.run_with_cancel(req, logs.sink(), cancel).await;
                logs.finish().await;
                drained = lease.end();
                if report.started.is_some() {
                    plugin = Some(build_of(&resolved.plugin));
                }
                let elapsed = report.started.map(|_| report.elapsed);
                (event_of(&report.outcome), elapsed)
            }
        }
    };
    Ended {
        id,
        run,
        retry: job.retry,
        event,
        elapsed,
        plugin,
        drained,
    }
}

/// Records the end of an attempt. While the database is away (a transient error) the outcome
/// is kept and retried with backoff, and the run's lease is still renewed (the machine keeps
/// it in `finishing` until this returns), so no other node takes it for lost and runs it
/// again; once recorded it is final. A stop (`stop` holds its grace) stops waiting after its
/// grace: the run then stays `running` until its lease expires and it is recovered like any
/// lost run.
pub(super) async fn record<S: Store>(
    store: &S,
    id: RunId,
    attempt: u32,
    finish: &RunFinish,
    stop: watch::Receiver<Option<Duration>>,
) -> Option<RunState> {
    let first_pause = Duration::from_millis(200);
    let mut pause = first_pause;
    let mut waiting_since: Option<std::time::Instant> = None;
    loop {
        match store.run_set_state_if_running(id, attempt, finish).await {
            Ok(stored) => return Some(stored.state),
            Err(e) if e.is_retryable() => {
                let since = *waiting_since.get_or_insert_with(std::time::Instant::now);
                if let Some(grace) = *stop.borrow()
                    && since.elapsed() >= grace
                {
                    tracing::warn!(
                        "gave up recording the end of run {id} attempt {attempt} at shutdown \
                         ({e}); its lease expires and it is recovered like a lost run"
                    );
                    return None;
                }
                if pause == first_pause {
                    tracing::warn!(
                        "cannot record the end of run {id} attempt {attempt} yet ({e}); \
                         keeping it and retrying"
                    );
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(OUTAGE_BACKOFF_MAX);
            }
            Err(e) => {
                tracing::warn!("cannot record the end of run {id} attempt {attempt}: {e}");
                return None;
            }
        }
    }
}

/// Fails run `id`, held by this node in the store but never started here (the machine found
/// it renewed and unknown), to be retried per policy rather than kept alive unrun.
pub(super) async fn fail_orphan<S: Store>(ctx: &Ctx<S>, id: RunId, now: jiff::Timestamp) {
    let store = &ctx.store;
    let Ok(Some(mut run)) = store.run_get(id).await else {
        return;
    };
    if run.state != RunState::Running || run.node_id.as_ref() != Some(&ctx.config.node) {
        return;
    }
    let Ok(Some(job)) = store.job_get(run.job_id).await else {
        return;
    };
    let attempt = run.attempt;
    let event = RunEvent::Failed {
        error: ORPHANED.to_string(),
        retryable: true,
    };
    if run.apply(event, now, &job.retry).is_err() {
        return;
    }
    match store
        .run_set_state_if_running(id, attempt, &RunFinish::from_run(&run, now))
        .await
    {
        Ok(_) => tracing::warn!("run {id} was claimed for this node but never started: {ORPHANED}"),
        Err(e) => tracing::warn!("cannot fail the orphaned run {id}: {e}"),
    }
}

/// The core event for an executor outcome.
fn event_of(outcome: &Outcome) -> RunEvent {
    match outcome {
        Outcome::Succeeded { result_json } => RunEvent::Succeeded {
            result_json: Some(result_json.clone()),
        },
        Outcome::Failed { retryable, .. } => RunEvent::Failed {
            error: outcome.error_text().unwrap_or_default(),
            retryable: *retryable,
        },
        Outcome::TimedOut { message, .. } => RunEvent::TimedOut {
            error: message.clone(),
        },
        Outcome::Cancelled { reason, .. } => RunEvent::Cancelled { reason: *reason },
    }
}
