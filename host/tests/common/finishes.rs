//! Group commit of finishes, checked the same way on every server store (PostgreSQL, SQL
//! Server): the engine's `FinishQueue` is shared, but each dialect writes a batch with its own
//! statements, so each is proven against its own server.

use std::time::Duration;

use takt_core::job::{JobDef, JobName};
use takt_core::node::InstanceId;
use takt_core::policy::{Backoff, RetryPolicy};
use takt_core::run::{NodeId, Run, RunEvent, RunState};
use takt_core::store::conformance;
use takt_core::store::engine::FinishStats;
use takt_core::store::{ClaimParams, RunFinish, Store, StoreErrorKind};

use super::proxy::Proxy;

/// Inserts `n` jobs named `{prefix}-{i}`, due at `t0`, each continued by `child` on success
/// (with `retries` retries), and claims them all: their running runs.
async fn claimed_parents<S: Store>(
    store: &S,
    prefix: &str,
    n: usize,
    retries: u32,
    t0: takt_core::Timestamp,
) -> Vec<Run> {
    let child = JobDef::new("child", "conformance::noop").expect("job");
    store.job_insert(&child, t0).await.expect("insert child");
    for i in 0..n {
        let mut job = JobDef::new(&format!("{prefix}-{i}"), "conformance::noop").expect("job");
        job.next_fire = Some(t0);
        job.on_success = vec![JobName::new("child").expect("name")];
        job.retry = RetryPolicy::new(retries, Backoff::seed_default());
        store.job_insert(&job, t0).await.expect("insert");
    }
    let params = ClaimParams {
        claimed_at: None,
        node: NodeId("n".into()),
        instance: InstanceId("n-life".into()),
        tags: Vec::new(),
        now: t0,
        limit: n,
        recurring_only: 0,
        lease: Duration::from_secs(60),
    };
    let claimed = store.run_claim_due(&params).await.expect("claim");
    assert_eq!(claimed.len(), n, "every parent claimed");
    claimed.into_iter().map(|c| c.run).collect()
}

/// Finishes that end while another is being written are committed together: far fewer
/// batches than finishes (read by `stats`), and every caller answered with its own run — a
/// retry, a final state with its continuation, a stale attempt refused — as stored, its
/// attempt ended. `runs` finishes: 300 make a batch more than one statement's chunk on SQL
/// Server (128).
pub(crate) async fn finishes_that_meet_are_committed_together<S: Store>(
    store: &S,
    runs: usize,
    stats: impl Fn() -> FinishStats,
) {
    let t0 = conformance::claims_now();
    let claimed = claimed_parents(store, "finisher", runs, 1, t0).await;
    // Even runs succeed, odd ones fail into their retry; one stale attempt on top.
    let mut calls: Vec<_> = claimed
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let mut after = run.clone();
            let event = if i % 2 == 0 {
                RunEvent::Succeeded {
                    result_json: Some(format!("{{\"i\":{i}}}")),
                }
            } else {
                RunEvent::Failed {
                    error: format!("boom {i}"),
                    retryable: true,
                }
            };
            let retry = RetryPolicy::new(1, Backoff::seed_default());
            after.apply(event, t0, &retry).expect("legal");
            (run.clone(), run.attempt, RunFinish::from_run(&after, t0))
        })
        .collect();
    let stale = calls[0].clone();
    calls.push((stale.0, stale.1 + 1, stale.2));
    let before = stats();
    let answers = conformance::join_all(
        calls
            .iter()
            .map(|(run, attempt, fin)| {
                store.run_set_state_if_running(run.id.expect("id"), *attempt, fin)
            })
            .collect(),
    )
    .await;
    let after = stats();
    let batches = after.batches - before.batches;
    assert!(
        batches < calls.len() as u64 / 2,
        "{} finishes at once are committed in a few batches, not {batches}",
        calls.len()
    );
    assert!(
        after.finishes - before.finishes >= runs as u64,
        "every finish went through the queue: {before:?} → {after:?}"
    );
    for (k, ((run, _, fin), answer)) in calls.iter().zip(&answers).enumerate() {
        let id = run.id.expect("id");
        if k == runs {
            let e = answer.as_ref().expect_err("a stale attempt is refused");
            assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
            continue;
        }
        let done = answer.as_ref().expect("finish");
        assert_eq!(done.id, Some(id), "finish {k}: its own run");
        assert_eq!(done.state, fin.state, "finish {k}: its own state");
        assert_eq!(
            done.result_json, fin.result_json,
            "finish {k}: its own result"
        );
        assert_eq!(done.error, fin.error, "finish {k}: its own error");
        let want_attempt = run.attempt + u32::from(k % 2 == 1);
        assert_eq!(
            done.attempt, want_attempt,
            "finish {k}: a retry's next attempt"
        );
        assert_eq!(
            done.finished_at,
            (k % 2 == 0).then_some(t0),
            "finish {k}: a final state's end, a retry's none"
        );
        let stored = store.run_get(id).await.expect("get").expect("run");
        assert_eq!(&stored, done, "finish {k}: answered as stored");
        let children = store.run_children(id).await.expect("children");
        assert_eq!(
            children.len(),
            usize::from(k % 2 == 0),
            "finish {k}: its continuations: {children:?}"
        );
        let attempts = store.run_attempts(id).await.expect("attempts");
        assert_eq!(attempts.len(), 1, "finish {k}: one attempt: {attempts:?}");
        assert_eq!(
            attempts[0].finished_at,
            Some(t0),
            "finish {k}: its attempt ended"
        );
    }
}

/// Finishes that meet in one batch and lose their COMMIT answer (through `proxy`, which
/// `flaky` connects through; `direct` does not): every caller gets its own run as finished —
/// none turned into a loss or written twice — each attempt ends once and each parent's
/// continuation exists once.
pub(crate) async fn a_batch_whose_commit_answer_is_lost_is_resolved<S: Store, F: Store>(
    direct: &S,
    flaky: &F,
    flaky_stats: impl Fn() -> FinishStats,
    proxy: &Proxy,
) {
    let t0 = conformance::claims_now();
    let claimed = claimed_parents(direct, "parent", 8, 0, t0).await;
    let finishes: Vec<_> = claimed
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let mut after = run.clone();
            after
                .apply(
                    RunEvent::Succeeded {
                        result_json: Some(format!("{{\"parent\":{i}}}")),
                    },
                    t0,
                    &RetryPolicy::default(),
                )
                .expect("legal");
            (run.clone(), RunFinish::from_run(&after, t0))
        })
        .collect();
    // Several: the first caller may find the pool's connection at once and commit alone, and
    // under load (a CI run's parallel tests) a resolution or a retry may spend another; the
    // finishes queued behind them meet in a batch that loses one of the rest.
    proxy.lose_commit_answers(4);
    let answers = conformance::join_all(
        finishes
            .iter()
            .map(|(run, fin)| flaky.run_set_state_if_running(run.id.expect("id"), run.attempt, fin))
            .collect(),
    )
    .await;
    let stats = flaky_stats();
    assert!(
        stats.lost_commits >= 1,
        "a batch of several finishes lost its COMMIT answer (the test proves the \
         resolution): {stats:?}"
    );
    proxy.lose_commit_answers(0);
    for ((run, fin), answer) in finishes.iter().zip(answers) {
        let id = run.id.expect("id");
        let done = answer.expect("a lost COMMIT answer is resolved by reading the run back");
        assert_eq!(done.id, Some(id), "each caller gets its own run");
        assert_eq!(done.state, RunState::Succeeded);
        assert_eq!(done.result_json, fin.result_json, "each its own result");
        assert_eq!(done.attempt, run.attempt, "finished, not run again");
        let attempts = direct.run_attempts(id).await.expect("attempts");
        assert_eq!(attempts.len(), 1, "one attempt: {attempts:?}");
        assert_eq!(attempts[0].finished_at, Some(t0), "the attempt ended");
        let children = direct.run_children(id).await.expect("children");
        assert_eq!(children.len(), 1, "one continuation, not two: {children:?}");
    }
}
