//! The conformance suite every [`Store`] backend runs (River's `riverdrivertest`, apalis'
//! `generic_storage_test!`).
//!
//! A backend's test calls [`run_all`] with a factory of fresh, empty stores and checks the
//! [`Report`]:
//!
//! ```ignore
//! let report = conformance::run_all(|| async { SqliteStore::open_temp().await.unwrap() }).await;
//! eprintln!("{report}");
//! report.expect_skipped(&["concurrent_claimers_never_share_a_fire"]);
//! ```
//!
//! A failing check panics with a message naming the check and what went wrong. A check that
//! needs a capability the backend lacks ([`Store::capabilities`]) is not run and is listed as
//! skipped with the reason: never silently, since [`Report::expect_skipped`] fails the test
//! when the skips differ from the ones the backend declared.
//!
//! Clones of the store must share data (two handles on one database): the concurrency check
//! runs two claimers on two clones, interleaving their futures on one task (with an async
//! driver that is two connections racing in the database). The memory store's own tests add a
//! check with real threads. Everything here is pure: no clock (every instant is fixed), no
//! threads, no I/O; [`block_on`] drives futures that need no reactor.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::{
    Backfilled, CancelOutcome, ClaimParams, ClaimedRun, DueJob, DueSet, JobPage, JobQuery,
    LogLevel, LogLine, RunCursor, RunFilter, RunFinish, Store, StoreError, StoreErrorKind,
};
use crate::attempt::{Attempt, AttemptOutcome};
use crate::job::{Isolation, JobDef, JobId, JobName, Priority};
use crate::node::{InstanceId, NodeInfo, Registered, Registration};
use crate::pause::{Pause, PauseTarget};
use crate::policy::{Backoff, RetryPolicy};
use crate::run::{
    CancelReason, LEASE_EXPIRED, NODE_RESTARTED, NodeId, PluginBuild, Progress, Run, RunEvent,
    RunId, RunState, SkipReason, Trigger,
};
use crate::schedule::cron::CronExpr;
use crate::schedule::{DstPolicy, GapPolicy, Interval, Rule, Schedule, Zone};
use crate::store::access::{NewToken, OperatorAction, Role};

/// The outcome of [`run_all`]: the checks that passed and those skipped for a missing
/// capability, with the reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "a report lists skipped checks; print it and call expect_skipped"]
pub struct Report {
    /// Checks that ran and passed.
    pub passed: Vec<&'static str>,
    /// Checks not run, with the missing capability.
    pub skipped: Vec<(&'static str, &'static str)>,
}

impl Report {
    /// Panics unless exactly the checks named in `expected` were skipped: a backend declares
    /// what it cannot do, and a new skip (or a capability gained) fails its test.
    pub fn expect_skipped(&self, expected: &[&str]) {
        let got: BTreeSet<&str> = self.skipped.iter().map(|(n, _)| *n).collect();
        let want: BTreeSet<&str> = expected.iter().copied().collect();
        assert_eq!(
            got, want,
            "store conformance: the skipped checks differ from the declared ones; declare \
             them in expect_skipped or implement the capability\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store conformance: {} passed, {} skipped",
            self.passed.len(),
            self.skipped.len()
        )?;
        for (name, why) in &self.skipped {
            write!(f, "\n  SKIPPED {name}: the backend lacks {why}")?;
        }
        Ok(())
    }
}

/// Runs every check, each on a fresh store from `make`, and reports which passed and which
/// were skipped. A failing check panics.
pub async fn run_all<S, F, Fut>(make: F) -> Report
where
    S: Store + Clone,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let mut report = Report::default();
    macro_rules! check {
        // Each check's future on the heap: their states together would make `run_all`'s
        // future (and the stack of the thread that blocks on it) as large as the largest
        // check over a real driver, which overflows a test thread's stack in debug builds.
        ($name:ident) => {
            Box::pin($name(make().await)).await;
            report.passed.push(stringify!($name));
        };
        ($name:ident if $cap:ident) => {
            let store = make().await;
            if store.capabilities().$cap {
                Box::pin($name(store)).await;
                report.passed.push(stringify!($name));
            } else {
                report
                    .skipped
                    .push((stringify!($name), concat!("capability ", stringify!($cap))));
            }
        };
    }
    check!(jobs_round_trip);
    check!(late_jobs_and_the_job_count);
    check!(duplicate_name_is_a_conflict);
    check!(stale_version_update_is_a_conflict);
    check!(claim_advances_next_fire_exactly_once);
    check!(concurrent_claimers_never_share_a_fire if concurrent_claims);
    check!(disabled_jobs_are_not_claimed);
    check!(claim_orders_by_priority_then_due_time);
    check!(recurring_fires_get_half_of_a_full_claim);
    check!(recurring_only_room_is_left_to_recurring_fires);
    check!(a_claim_ahead_records_each_runs_real_start);
    check!(finish_is_conditional);
    check!(retry_requeues_and_is_claimable_only_when_due);
    check!(lease_expiry_recovery_fails_then_retries_per_policy);
    check!(restart_recovery_takes_only_this_nodes_runs);
    check!(node_identity_is_held_by_one_live_instance);
    check!(node_list_reports_heartbeats_and_running_runs);
    check!(skipped_runs_keep_reason_and_unique_key);
    check!(claim_records_dst_gap_skips);
    check!(claims_keep_inside_the_validity_window);
    check!(runs_record_how_they_came_to_be);
    check!(backfill_fills_missing_fires_once_and_in_order);
    check!(dependents_wait_for_their_upstream_and_run_after_it_succeeds);
    check!(a_failed_dependency_skips_the_dependent_naming_it);
    check!(a_dependency_wait_that_ends_skips_still_waiting);
    check!(unknown_dependencies_cycles_and_depended_on_deletes_are_refused);
    check!(paused_jobs_are_held_and_resume_per_their_misfire_policy);
    check!(group_and_node_pauses_hold_members_and_claims);
    check!(a_paused_jobs_pending_runs_wait_for_its_resume);
    check!(a_failed_group_member_holds_the_group_until_it_succeeds_again);
    check!(a_group_resume_releases_a_failure_hold);
    check!(group_max_running_holds_under_concurrent_claimers);
    check!(cancel_requests_reach_the_node_running_the_run);
    check!(run_list_filters_newest_first);
    check!(run_list_pages_by_cursor_and_fire_time_range);
    check!(job_pages_cover_every_job_once_by_name);
    check!(tokens_are_unique_by_name_and_revocable);
    check!(operator_actions_are_listed_newest_first_per_job);
    check!(job_due_lists_due_jobs_in_claim_order_with_counts);
    check!(next_due_is_the_earliest_claimable_instant);
    check!(queued_run_waits_for_the_running_one);
    check!(queued_runs_of_a_job_run_one_at_a_time_oldest_first);
    check!(node_tags_route_jobs_to_the_nodes_that_serve_them);
    check!(isolation_and_plugin_builds_are_recorded);
    check!(attempts_are_begun_by_claims_and_ended_by_finishes_and_recovery);
    check!(node_sessions_record_every_life);
    check!(runs_between_reads_a_fire_range_in_order);
    check!(alert_episodes_open_once_until_closed);
    check!(concurrent_alert_opens_have_one_winner if concurrent_claims);
    check!(alert_deliveries_round_trip_newest_first);
    check!(continuations_run_once_per_final_state);
    check!(concurrent_finishes_each_get_their_own_answer if concurrent_claims);
    check!(logs_are_ordered_and_batched if logs);
    check!(retention_purges_only_old_final_runs_and_their_logs if retention);
    assert_eq!(
        report.passed.len() + report.skipped.len(),
        CHECKS,
        "store conformance: CHECKS is out of date"
    );
    report
}

/// How many checks [`run_all`] runs (passed plus skipped), so a backend's test can assert
/// that every check ran.
pub const CHECKS: usize = 54;

// ---- helpers (public so a backend's own tests can reuse them) ----------------------------

/// Drives `fut` to completion on the current thread (parking it while the future waits). For
/// stores whose futures need no reactor, like the memory store.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// Polls both futures in turn until both are done (two claimers on one task).
pub async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none()
            && let Poll::Ready(v) = a.as_mut().poll(cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let Poll::Ready(v) = b.as_mut().poll(cx)
        {
            rb = Some(v);
        }
        if ra.is_some() && rb.is_some() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    match (ra, rb) {
        (Some(a), Some(b)) => (a, b),
        _ => unreachable!("poll_fn returned before both futures finished"),
    }
}

/// Polls every future in turn until all are done (many callers on one task, racing in the
/// store as their awaits interleave); their outputs in order.
pub async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (f, out) in futures.iter_mut().zip(outs.iter_mut()) {
            if out.is_none()
                && let Poll::Ready(v) = f.as_mut().poll(cx)
            {
                *out = Some(v);
            }
        }
        if outs.iter().all(Option::is_some) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outs.into_iter().flatten().collect()
}

/// Returns `Pending` once (after waking itself), so interleaved claimers take turns.
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await;
}

/// The instant every check starts from.
pub fn t0() -> Timestamp {
    "2026-06-01T10:00:00Z".parse().expect("a valid instant")
}

/// `t0` plus `secs` seconds.
pub fn at(secs: i64) -> Timestamp {
    t0().checked_add(SignedDuration::from_secs(secs))
        .expect("test instants are in range")
}

fn node(name: &str) -> NodeId {
    NodeId(name.to_string())
}

/// The first life of node `name` (the instance every claim of the suite uses, unless a check
/// registers another).
fn life(name: &str) -> InstanceId {
    InstanceId(format!("{name}-life-1"))
}

/// Node `name` with life `instance`, as it registers.
fn node_info(name: &str, instance: &InstanceId) -> NodeInfo {
    NodeInfo {
        id: node(name),
        instance: instance.clone(),
        host_name: format!("{name}.plant.local"),
        pid: 4242,
        version: "0.0.0-conformance".to_string(),
        capacity: 8,
        tags: vec!["line-1".to_string()],
    }
}

/// Registers life `instance` of node `name` at `now` (a lease of 60 s keeps it live),
/// taking over `replace` if given.
async fn register<S: Store>(
    store: &S,
    name: &str,
    instance: &InstanceId,
    now: Timestamp,
    replace: Option<&InstanceId>,
) -> Registered {
    store
        .node_register(&Registration {
            node: node_info(name, instance),
            now,
            live_for: Duration::from_secs(60),
            replace: replace.cloned(),
        })
        .await
        .expect("node_register")
}

fn claim(node_name: &str, now: Timestamp, limit: usize) -> ClaimParams {
    ClaimParams {
        claimed_at: None,
        node: node(node_name),
        instance: life(node_name),
        tags: Vec::new(),
        now,
        limit,
        recurring_only: 0,
        lease: Duration::from_secs(60),
    }
}

/// Jobs with a node tag are claimed, listed as due and waited for only by nodes serving the
/// tag; untagged jobs by every node; a retry keeps its job's routing.
pub async fn node_tags_route_jobs_to_the_nodes_that_serve_them<S: Store>(store: S) {
    let mut tagged = every_minute("line-1-only");
    tagged.node_tag = Some("line-1".to_string());
    tagged.retry = seed_retries(1);
    tagged.next_fire = Some(at(-60));
    let tagged = insert(&store, tagged).await;
    let free = insert(&store, every_minute("anywhere")).await;
    let line1 = vec!["line-1".to_string()];
    let other = vec!["line-2".to_string()];

    let due = |tags: Vec<String>| {
        let store = &store;
        async move {
            let rows = store.job_due(at(0), 10, &tags).await.expect("job_due");
            rows.into_iter()
                .map(|d| d.name.to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(due(Vec::new()).await, ["anywhere"], "an untagged node");
    assert_eq!(
        due(other.clone()).await,
        ["anywhere"],
        "a node with another tag"
    );
    assert_eq!(due(line1.clone()).await, ["line-1-only", "anywhere"]);
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        Some(t0())
    );
    assert_eq!(
        store.next_due(&line1, DueSet::All).await.expect("next_due"),
        Some(at(-60))
    );

    let mut p = claim("node-x", at(0), 10);
    p.tags = other;
    let got = store.run_claim_due(&p).await.expect("claim");
    assert_eq!(
        got.iter().map(|c| c.run.job_id).collect::<Vec<_>>(),
        [free.id.expect("id")],
        "a node without the tag claims only the untagged job"
    );
    let mut p = claim("node-1", at(0), 10);
    p.tags = line1.clone();
    let got = store.run_claim_due(&p).await.expect("claim");
    assert_eq!(got.len(), 1, "the tagged job's fire");
    assert_eq!(got[0].run.job_id, tagged.id.expect("id"));

    // Its retry is routed like its fires.
    finish(&store, &got[0].run, failed(), at(1)).await;
    let later = at(3600);
    let mut p = claim("node-x", later, 100);
    p.tags = Vec::new();
    let untagged: Vec<_> = store
        .run_claim_due(&p)
        .await
        .expect("claim")
        .into_iter()
        .map(|c| (c.run.job_id, c.run.attempt))
        .collect();
    assert!(
        untagged.iter().all(|(j, _)| *j == free.id.expect("id")),
        "no run of the tagged job on an untagged node: {untagged:?}"
    );
    let mut p = claim("node-1", later, 100);
    p.tags = line1;
    let retried = store.run_claim_due(&p).await.expect("claim");
    assert!(
        retried
            .iter()
            .any(|c| c.run.job_id == tagged.id.expect("id") && c.run.attempt == 2),
        "the retry runs on a node with the tag"
    );
}

/// Every run the claim creates records its trigger, read back the same way by `run_get` and
/// `run_list`: an on-time fire `schedule`, a fire set off the schedule by a trigger `manual`
/// (and every run of a job without a schedule), a fire later than the misfire lateness
/// window `catch_up`; a retry is another attempt of the same run and keeps its trigger.
async fn runs_record_how_they_came_to_be<S: Store>(store: S) {
    let mut job = every_minute("triggers");
    job.retry = RetryPolicy::new(1, Backoff::Fixed(vec![Duration::from_secs(1)]));
    let job = insert(&store, job).await;
    let id = job.id.expect("id");
    let stored = |run: &Run| {
        let store = &store;
        let rid = run.id.expect("stored");
        async move { store.run_get(rid).await.expect("get").expect("exists") }
    };

    // On time: the schedule.
    let on_time = claim_one(&store, "node-a", at(1)).await.run;
    assert_eq!(on_time.trigger, Some(Trigger::Schedule), "{on_time:?}");
    assert_eq!(stored(&on_time).await.trigger, Some(Trigger::Schedule));

    // A trigger moves the next fire to an instant off the schedule: manual.
    store
        .job_set_next_fire(id, Some(at(60)), Some(at(30)))
        .await
        .expect("move the next fire");
    let by_hand = claim_one(&store, "node-a", at(30)).await.run;
    assert_eq!(by_hand.fire_time, at(30));
    assert_eq!(stored(&by_hand).await.trigger, Some(Trigger::Manual));

    // The next scheduled fire (t0 + 60s) claimed an hour late: released by the misfire
    // policy, a catch-up.
    let late = claim_one(&store, "node-a", at(3600)).await.run;
    assert_eq!(late.fire_time, at(60));
    assert_eq!(stored(&late).await.trigger, Some(Trigger::CatchUp));

    // A retry is attempt 2 of the same run, with the run's trigger.
    finish(&store, &on_time, failed(), at(2)).await;
    let retried = claim_all(&store, at(3700))
        .await
        .into_iter()
        .find(|c| c.run.id == on_time.id)
        .expect("the retry is claimed")
        .run;
    assert_eq!(retried.attempt, 2);
    assert_eq!(retried.trigger, Some(Trigger::Schedule));

    // A job without a schedule runs only by hand.
    let only_manual = insert(&store, manual("by-hand")).await;
    let run = claim_all(&store, at(3800))
        .await
        .into_iter()
        .find(|c| c.run.job_id == only_manual.id.expect("id"))
        .expect("the manual job is claimed")
        .run;
    assert_eq!(run.trigger, Some(Trigger::Manual));

    let listed = store.run_list(&RunFilter::default()).await.expect("list");
    let of = |rid| listed.iter().find(|r| r.id == rid).map(|r| r.trigger);
    assert_eq!(of(on_time.id), Some(Some(Trigger::Schedule)));
    assert_eq!(of(by_hand.id), Some(Some(Trigger::Manual)));
    assert_eq!(of(late.id), Some(Some(Trigger::CatchUp)));
}

/// A backfill records the fires of the range that have no run as queued runs (trigger
/// `backfill`), leaves the others alone, creates nothing the second time, and its runs are
/// claimed one at a time in fire-time order; bad input is refused with what to do.
async fn backfill_fills_missing_fires_once_and_in_order<S: Store>(store: S) {
    let job = insert(&store, every_minute("fill")).await;
    let id = job.id.expect("id");
    // The fire at t0 ran; the range [t0, t0 + 5 min) has five fires.
    let first = claim_one(&store, "node-a", at(1)).await.run;
    finish(
        &store,
        &first,
        RunEvent::Succeeded { result_json: None },
        at(2),
    )
    .await;
    let now = at(7200);
    let got = store
        .run_backfill(id, t0(), at(300), 10_000, now)
        .await
        .expect("backfill");
    assert_eq!(
        got,
        Backfilled {
            fires: 5,
            created: 4,
            present: 1
        }
    );
    let again = store
        .run_backfill(id, t0(), at(300), 10_000, now)
        .await
        .expect("backfill again");
    assert_eq!((again.created, again.present), (0, 5), "{again:?}");
    let runs = store
        .runs_between(Some(id), t0(), at(300))
        .await
        .expect("runs");
    assert_eq!(runs.len(), 5);
    assert!(
        runs[1..]
            .iter()
            .all(|r| r.trigger == Some(Trigger::Backfill) && r.state == RunState::Pending),
        "{runs:?}"
    );

    // One at a time, in fire-time order: a claim takes the oldest only.
    let mut order = Vec::new();
    for step in 0..4 {
        let claimed: Vec<_> = claim_all(&store, at(7300 + step))
            .await
            .into_iter()
            .filter(|c| c.run.trigger == Some(Trigger::Backfill))
            .collect();
        assert_eq!(
            claimed.len(),
            1,
            "one backfilled run at a time: {claimed:?}"
        );
        order.push(claimed[0].run.fire_time);
        finish(
            &store,
            &claimed[0].run,
            RunEvent::Succeeded { result_json: None },
            at(7300 + step),
        )
        .await;
    }
    assert_eq!(order, [at(60), at(120), at(180), at(240)]);

    // Bad input.
    let bad = |e: StoreError, kind: StoreErrorKind, text: &str| {
        assert_eq!(e.kind(), kind, "{e}");
        assert!(e.message().contains(text), "{e}");
    };
    let e = store
        .run_backfill(id, at(300), t0(), 10, now)
        .await
        .unwrap_err();
    bad(e, StoreErrorKind::Invalid, "reversed");
    let e = store
        .run_backfill(id, t0(), at(3600), 10, now)
        .await
        .unwrap_err();
    bad(
        e,
        StoreErrorKind::Invalid,
        "holds 60 fires, more than --max 10",
    );
    let no_schedule = insert(&store, manual("no-schedule")).await;
    let e = store
        .run_backfill(no_schedule.id.expect("id"), t0(), at(300), 10, now)
        .await
        .unwrap_err();
    bad(e, StoreErrorKind::Invalid, "no recurring schedule");
    let e = store
        .run_backfill(JobId(999_999), t0(), at(300), 10, now)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
}

/// A job every minute from `t0` that depends on `deps`.
fn dependent(name: &str, deps: &[&str]) -> JobDef {
    let mut job = every_minute(name);
    job.dependencies = deps
        .iter()
        .map(|d| JobName::new(d).expect("valid name"))
        .collect();
    job
}

/// The stored run of job `job` at `fire`.
async fn run_at<S: Store>(store: &S, job: &JobDef, fire: Timestamp) -> Run {
    store
        .run_list(&RunFilter {
            job: job.id,
            fire_from: Some(fire),
            fire_to: Some(
                fire.checked_add(SignedDuration::from_millis(1))
                    .expect("in range"),
            ),
            ..RunFilter::default()
        })
        .await
        .expect("list")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("job {} has a run at {fire}", job.name))
}

/// A fire of a job with a dependency waits (a pending first attempt with a re-check time and
/// what it waits for, holding no slot, not counted as in flight by `job_due`, waking
/// `next_due`), whether the dependency's fire has no run yet or its run is running; it starts
/// once that run succeeded, after its finish. A waiting run can be cancelled.
async fn dependents_wait_for_their_upstream_and_run_after_it_succeeds<S: Store>(store: S) {
    let a = insert(&store, every_minute("extract")).await;
    let b = insert(&store, dependent("load", &["extract"])).await;
    let claimed = claim_all(&store, t0()).await;
    assert_eq!(claimed.len(), 1, "only the upstream runs: {claimed:?}");
    let a_run = claimed[0].run.clone();
    assert_eq!(a_run.job_id, a.id.expect("id"));
    let waiting = run_at(&store, &b, t0()).await;
    assert!(waiting.is_waiting(), "{waiting:?}");
    assert!(
        waiting
            .waiting_for()
            .is_some_and(|w| w.contains("waiting for extract")),
        "{waiting:?}"
    );
    let due = store.job_due(at(60), 10, &[]).await.expect("job due");
    let b_due = due
        .iter()
        .find(|d| Some(d.id) == b.id)
        .expect("b is due at its next fire");
    assert_eq!(
        b_due.pending, 0,
        "a waiting run is not in flight for the overlap policy"
    );
    let next = store
        .next_due(&[], DueSet::All)
        .await
        .expect("next due")
        .expect("something is due");
    assert!(
        next <= at(1),
        "the waiting run's re-check wakes the loop: {next}"
    );

    // Re-checked while the upstream runs: still waiting, now for its running run.
    assert!(claim_all(&store, at(1)).await.is_empty());
    let waiting = run_at(&store, &b, t0()).await;
    assert!(
        waiting
            .waiting_for()
            .is_some_and(|w| w.contains("extract (its run of") && w.contains("running")),
        "{waiting:?}"
    );
    // The upstream succeeds; the next round starts the dependent.
    finish(
        &store,
        &a_run,
        RunEvent::Succeeded { result_json: None },
        at(5),
    )
    .await;
    let claimed = claim_all(&store, at(6)).await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let started = &claimed[0].run;
    assert_eq!(
        (started.job_id, started.fire_time),
        (b.id.expect("id"), t0())
    );
    assert_eq!(started.state, RunState::Running);
    assert_eq!(started.error, None, "what it waited for is over");
    assert!(started.started_at.expect("started") >= at(5));
    finish(
        &store,
        started,
        RunEvent::Succeeded { result_json: None },
        at(7),
    )
    .await;

    // The next period: the dependent's fire waits again, and a cancel ends the wait.
    let claimed = claim_all(&store, at(60)).await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let waiting = run_at(&store, &b, at(60)).await;
    assert!(waiting.is_waiting(), "{waiting:?}");
    let out = store
        .run_cancel(waiting.id.expect("id"), "op@host", at(61))
        .await
        .expect("cancel a waiting run");
    assert!(matches!(out, CancelOutcome::Cancelled(_)), "{out:?}");
    assert_eq!(run_at(&store, &b, at(60)).await.state, RunState::Cancelled);
}

/// A dependency's run for the period that did not succeed (failed here) makes the
/// dependent's fire skipped, reason `dependency`, naming the dependency, its fire time and
/// its state; the dependent's next period is judged afresh.
async fn a_failed_dependency_skips_the_dependent_naming_it<S: Store>(store: S) {
    let a = insert(&store, every_minute("extract")).await;
    let b = insert(&store, dependent("load", &["extract"])).await;
    let a_run = claim_one(&store, "node-a", t0()).await.run;
    let failure = RunEvent::Failed {
        error: "boom".into(),
        retryable: false,
    };
    finish(&store, &a_run, failure, at(2)).await;
    assert!(
        claim_all(&store, at(3)).await.is_empty(),
        "the dependent does not run"
    );
    let skipped = run_at(&store, &b, t0()).await;
    assert_eq!(skipped.state, RunState::Skipped);
    assert_eq!(skipped.skip_reason, Some(SkipReason::Dependency));
    let message = skipped.error.clone().unwrap_or_default();
    assert!(message.contains("dependency extract"), "{message}");
    assert!(message.contains(&t0().to_string()), "{message}");
    assert!(message.contains("failed"), "{message}");

    // Next period: the upstream succeeds first, so the dependent starts at once.
    let a_next = claim_one(&store, "node-a", at(60)).await.run;
    assert_eq!(a_next.job_id, a.id.expect("id"));
    finish(
        &store,
        &a_next,
        RunEvent::Succeeded { result_json: None },
        at(61),
    )
    .await;
    let started = claim_one(&store, "node-a", at(62)).await.run;
    assert_eq!(
        (started.job_id, started.fire_time),
        (b.id.expect("id"), at(60))
    );
}

/// A fire whose dependency is not final when its `dependency_wait` ends is skipped, reason
/// `dependency`, "still waiting for …"; without a wait it gives up at its next fire.
async fn a_dependency_wait_that_ends_skips_still_waiting<S: Store>(store: S) {
    let _a = insert(&store, every_minute("extract")).await;
    let mut b = dependent("load", &["extract"]);
    b.dependency_wait = Some(Duration::from_secs(30));
    let b = insert(&store, b).await;
    let c = insert(&store, dependent("report", &["extract"])).await;
    let claimed = claim_all(&store, t0()).await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert!(claim_all(&store, at(29)).await.is_empty());
    assert!(run_at(&store, &b, t0()).await.is_waiting());
    assert!(claim_all(&store, at(30)).await.is_empty());
    let gave_up = run_at(&store, &b, t0()).await;
    assert_eq!(gave_up.state, RunState::Skipped, "{gave_up:?}");
    assert_eq!(gave_up.skip_reason, Some(SkipReason::Dependency));
    let message = gave_up.error.clone().unwrap_or_default();
    assert!(
        message.starts_with("still waiting for extract"),
        "{message}"
    );
    // The job without a wait still waits, until its next fire.
    assert!(run_at(&store, &c, t0()).await.is_waiting());
    claim_all(&store, at(60)).await;
    let c_first = run_at(&store, &c, t0()).await;
    assert_eq!(
        c_first.skip_reason,
        Some(SkipReason::Dependency),
        "{c_first:?}"
    );
    assert!(
        c_first
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("still waiting for extract")),
        "{c_first:?}"
    );
}

/// A job naming a job that does not exist, or closing a cycle, is refused on insert and
/// update with the cycle listed; a job others depend on cannot be removed or renamed.
async fn unknown_dependencies_cycles_and_depended_on_deletes_are_refused<S: Store>(store: S) {
    let e = store
        .job_insert(&dependent("load", &["nowhere"]), t0())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Invalid, "{e}");
    assert!(
        e.to_string()
            .contains("job load depends on nowhere, which does not exist"),
        "{e}"
    );
    let a = insert(&store, every_minute("a")).await;
    let b = insert(&store, dependent("b", &["a"])).await;
    let _c = insert(&store, dependent("c", &["b"])).await;
    let mut cyclic = a.clone();
    cyclic.dependencies = vec![JobName::new("c").expect("name")];
    let e = store.job_update(&cyclic, at(1)).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Invalid, "{e}");
    assert_eq!(
        e.message(),
        "dependency cycle: a -> c -> b -> a; remove one of these dependencies"
    );
    assert!(
        store
            .job_get(a.id.expect("id"))
            .await
            .expect("get")
            .expect("kept")
            .dependencies
            .is_empty()
    );
    let e = store.job_delete(a.id.expect("id")).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
    assert!(
        e.to_string()
            .contains("job a cannot be removed: b depends on it"),
        "{e}"
    );
    let mut renamed = b.clone();
    renamed.name = JobName::new("b2").expect("name");
    let e = store.job_update(&renamed, at(1)).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("job b cannot be renamed: c depends on it"),
        "{e}"
    );
    // Without its dependents, it goes.
    store
        .job_delete(_c.id.expect("id"))
        .await
        .expect("delete c");
    store.job_delete(b.id.expect("id")).await.expect("delete b");
    store.job_delete(a.id.expect("id")).await.expect("delete a");
}

/// A manual-only job (no schedule) due at `t0`.
fn manual(name: &str) -> JobDef {
    let mut job = JobDef::new(name, "conformance::noop").expect("valid job");
    job.next_fire = Some(t0());
    job
}

/// A job firing every minute from `t0`, due at `t0`.
fn every_minute(name: &str) -> JobDef {
    let every = Interval::new(60, Some(t0())).expect("valid interval");
    let mut job = manual(name).with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()));
    job.next_fire = Some(t0());
    job
}

async fn insert<S: Store>(store: &S, job: JobDef) -> JobDef {
    store.job_insert(&job, t0()).await.expect("job insert")
}

async fn claim_one<S: Store>(store: &S, node_name: &str, now: Timestamp) -> ClaimedRun {
    let mut got = store
        .run_claim_due(&claim(node_name, now, 1))
        .await
        .expect("claim");
    assert_eq!(got.len(), 1, "expected one claimed run at {now}");
    got.remove(0)
}

async fn claim_all<S: Store>(store: &S, now: Timestamp) -> Vec<ClaimedRun> {
    store
        .run_claim_due(&claim("node-a", now, 100))
        .await
        .expect("claim")
}

async fn finish<S: Store>(store: &S, run: &Run, event: RunEvent, now: Timestamp) -> Run {
    let job = store
        .job_get(run.job_id)
        .await
        .expect("job get")
        .expect("job exists");
    let mut after = run.clone();
    after.apply(event, now, &job.retry).expect("legal event");
    store
        .run_set_state_if_running(
            run.id.expect("stored"),
            run.attempt,
            &RunFinish::from_run(&after, now),
        )
        .await
        .expect("finish")
}

fn seed_retries(n: u32) -> RetryPolicy {
    RetryPolicy::new(n, Backoff::seed_default())
}

fn failed() -> RunEvent {
    RunEvent::Failed {
        error: "boom".into(),
        retryable: true,
    }
}

/// Inserts `jobs` jobs firing every minute from `t0` and returns how many fires each has due
/// at [`claims_now`] (5).
pub async fn seed_every_minute_jobs<S: Store>(store: &S, jobs: usize) -> u32 {
    for i in 0..jobs {
        insert(store, every_minute(&format!("job-{i}"))).await;
    }
    5
}

/// The instant claimers use after [`seed_every_minute_jobs`]: the fifth fire is due.
pub fn claims_now() -> Timestamp {
    at(4 * 60)
}

/// Claims (a few at a time, yielding between calls) at [`claims_now`] until nothing is due,
/// as node `node-{index}`, and returns the (job, fire time) of every run claimed.
pub async fn claim_until_empty<S: Store>(store: &S, index: usize) -> Vec<(JobId, Timestamp)> {
    let name = format!("node-{index}");
    let mut out = Vec::new();
    loop {
        let got = store
            .run_claim_due(&claim(&name, claims_now(), 3))
            .await
            .expect("claim");
        if got.is_empty() {
            return out;
        }
        out.extend(got.iter().map(|c| (c.run.job_id, c.run.fire_time)));
        yield_now().await;
    }
}

/// Panics unless `claimed` holds each of `jobs × fires` (job, fire time) pairs exactly once.
pub fn assert_each_fire_once(claimed: &[(JobId, Timestamp)], jobs: usize, fires: u32) {
    let unique: BTreeSet<_> = claimed.iter().collect();
    assert_eq!(
        unique.len(),
        claimed.len(),
        "concurrent claimers: a (job, fire time) was claimed twice"
    );
    assert_eq!(
        claimed.len(),
        jobs * fires as usize,
        "concurrent claimers: a due fire was not claimed"
    );
}

// ---- the checks --------------------------------------------------------------------------

/// Continuations (issue 15 item 2): a parent's final state creates one queued run of each job
/// listed for it (trigger continuation, the parent recorded, fire time = the parent's finish)
/// in the finish's transaction; a duplicated finish creates nothing more; unknown names,
/// cycles and removing a job another continues with are refused; cancelled continues with
/// nothing. Also the two reads of dynamic parameters: the last success's fire time and the
/// resolved params recorded on a running run.
pub async fn continuations_run_once_per_final_state<S: Store>(store: S) {
    let idle = |name: &str| {
        let mut j = manual(name);
        j.next_fire = None;
        j
    };
    let notify = insert(&store, idle("notify")).await;
    let alert = insert(&store, idle("alert")).await;
    let name = |n: &str| JobName::new(n).expect("valid name");
    let mut unknown = idle("stray");
    unknown.on_success = vec![name("missing")];
    let e = store.job_insert(&unknown, t0()).await.unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Invalid,
        "unknown continuation: {e}"
    );
    assert!(
        e.to_string()
            .contains("on_success names job \"missing\", which does not exist"),
        "the error names the field and the job: {e}"
    );
    let mut parent = manual("parent");
    parent.on_success = vec![name("notify")];
    parent.on_failure = vec![name("alert")];
    let parent = insert(&store, parent).await;
    let parent_id = parent.id.expect("id");
    assert_eq!(parent.on_success, [name("notify")], "on_success stored");
    assert_eq!(parent.on_failure, [name("alert")], "on_failure stored");

    let mut looped = notify.clone();
    looped.on_failure = vec![name("parent")];
    let e = store.job_update(&looped, t0()).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Invalid, "cycle: {e}");
    assert!(
        e.to_string().contains("notify → parent → notify"),
        "the error lists the cycle: {e}"
    );
    let e = store.job_delete(notify.id.expect("id")).await.unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Conflict,
        "removing a continuation: {e}"
    );
    assert!(
        e.to_string().contains("job parent continues with it"),
        "{e}"
    );

    // Success: one run of notify, queued, in the finish's transaction.
    let run = claim_one(&store, "node-a", at(1)).await.run;
    assert_eq!(run.job_id, parent_id);
    let done = finish(
        &store,
        &run,
        RunEvent::Succeeded { result_json: None },
        at(5),
    )
    .await;
    let children = store
        .run_children(done.id.expect("id"))
        .await
        .expect("children");
    assert_eq!(
        children.len(),
        1,
        "one continuation on success: {children:?}"
    );
    let child = &children[0];
    assert_eq!(child.job_id, notify.id.expect("id"), "on_success's job");
    assert_eq!(child.trigger, Some(Trigger::Continuation));
    assert_eq!(child.parent_run_id, done.id, "the parent recorded");
    assert_eq!(child.state, RunState::Pending, "queued");
    assert_eq!(child.fire_time, at(5), "fires at the parent's finish");

    // A duplicated finish is refused and creates nothing more.
    let mut again = run.clone();
    again
        .apply(
            RunEvent::Succeeded { result_json: None },
            at(6),
            &RetryPolicy::default(),
        )
        .expect("legal");
    let e = store
        .run_set_state_if_running(
            run.id.expect("id"),
            run.attempt,
            &RunFinish::from_run(&again, at(6)),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "a second finish: {e}");
    assert_eq!(
        store
            .run_children(done.id.expect("id"))
            .await
            .expect("children")
            .len(),
        1,
        "a duplicated finish creates no second continuation"
    );

    // The child is claimed like any queued run; its resolved params go on it while running.
    let c = claim_one(&store, "node-a", at(6)).await.run;
    assert_eq!(c.id, child.id, "the continuation run is claimed");
    store
        .run_set_params(c.id.expect("id"), c.attempt, "{\"from\":\"x\"}")
        .await
        .expect("params recorded");
    let stored = store
        .run_get(c.id.expect("id"))
        .await
        .expect("get")
        .expect("run");
    assert_eq!(stored.params_resolved.as_deref(), Some("{\"from\":\"x\"}"));
    assert_eq!(stored.parent_run_id, done.id, "the parent read back");
    let ended = finish(&store, &c, RunEvent::Succeeded { result_json: None }, at(7)).await;
    assert!(
        store
            .run_children(ended.id.expect("id"))
            .await
            .expect("children")
            .is_empty(),
        "a job without continuations continues with nothing"
    );
    let e = store
        .run_set_params(c.id.expect("id"), c.attempt, "{}")
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Conflict,
        "params of a finished run: {e}"
    );

    // Failure: alert.
    store
        .run_enqueue(parent_id, at(100), at(100))
        .await
        .expect("enqueue");
    let run = claim_one(&store, "node-a", at(100)).await.run;
    let failed_run = finish(
        &store,
        &run,
        RunEvent::Failed {
            error: "boom".into(),
            retryable: false,
        },
        at(101),
    )
    .await;
    assert_eq!(failed_run.state, RunState::Failed);
    let children = store
        .run_children(failed_run.id.expect("id"))
        .await
        .expect("children");
    assert_eq!(
        children.len(),
        1,
        "one continuation on failure: {children:?}"
    );
    assert_eq!(
        children[0].job_id,
        alert.id.expect("id"),
        "on_failure's job"
    );

    // Cancelled: nothing.
    store
        .run_enqueue(parent_id, at(200), at(200))
        .await
        .expect("enqueue");
    let run = claim_one(&store, "node-a", at(200)).await.run;
    let cancelled = finish(
        &store,
        &run,
        RunEvent::Cancelled {
            reason: CancelReason::Requested,
        },
        at(201),
    )
    .await;
    assert!(
        store
            .run_children(cancelled.id.expect("id"))
            .await
            .expect("children")
            .is_empty(),
        "a cancelled run continues with nothing"
    );

    // Failed by recovery (its node died, no retry left): as final as a finish, so on_failure
    // starts, once.
    store
        .run_enqueue(parent_id, at(300), at(300))
        .await
        .expect("enqueue");
    let run = claim_one(&store, "node-a", at(300)).await.run;
    let recovered = store
        .run_recover_expired(at(100_000), None)
        .await
        .expect("recover");
    let lost = recovered
        .iter()
        .find(|r| r.id == run.id)
        .expect("the expired lease is recovered");
    assert_eq!(lost.state, RunState::Failed, "no retry left: {lost:?}");
    let children = store
        .run_children(run.id.expect("id"))
        .await
        .expect("children");
    assert_eq!(
        children.iter().map(|c| c.job_id).collect::<Vec<_>>(),
        [alert.id.expect("id")],
        "a run recovery failed continues with on_failure: {children:?}"
    );

    assert_eq!(
        store
            .run_last_success_fire(parent_id, at(1000))
            .await
            .expect("last success"),
        Some(t0()),
        "the fire time of the parent's one success"
    );
    assert_eq!(
        store
            .run_last_success_fire(parent_id, t0())
            .await
            .expect("last success"),
        None,
        "strictly before"
    );
}

/// `job_due`: only enabled jobs with `next_fire <= now`, in claim order (priority, next fire,
/// id), at most `limit`, with their running and pending counts.
pub async fn job_due_lists_due_jobs_in_claim_order_with_counts<S: Store>(store: S) {
    let mut late = every_minute("late");
    late.next_fire = Some(at(30));
    let late = insert(&store, late).await;
    let mut urgent = every_minute("urgent");
    urgent.priority = Priority::new(10).expect("valid priority");
    urgent.next_fire = Some(at(50));
    let urgent = insert(&store, urgent).await;
    let early = insert(&store, every_minute("early")).await;
    let mut off = every_minute("off");
    off.enabled = false;
    insert(&store, off).await;
    let mut future = every_minute("future");
    future.next_fire = Some(at(3600));
    insert(&store, future).await;

    let names =
        |due: &[DueJob]| -> Vec<String> { due.iter().map(|d| d.name.to_string()).collect() };
    let due = store.job_due(at(60), 10, &[]).await.expect("job_due");
    assert_eq!(
        names(&due),
        ["urgent", "early", "late"],
        "job_due: enabled due jobs, by priority then next fire"
    );
    assert!(
        due.iter().all(|d| d.running == 0 && d.pending == 0),
        "job_due: nothing in flight yet: {due:?}"
    );
    assert_eq!(
        due[0],
        DueJob::of(&urgent, 0, 0).expect("a due job"),
        "job_due: id, name, next fire and policies as stored"
    );
    assert_eq!(
        names(&store.job_due(at(60), 2, &[]).await.expect("job_due")),
        ["urgent", "early"],
        "job_due: at most limit"
    );
    assert_eq!(
        names(&store.job_due(at(40), 10, &[]).await.expect("job_due")),
        ["early", "late"],
        "job_due: next fire after now is not due"
    );

    // One running run of `early` (claimed), one pending retry and one queued run of `late`.
    let c = claim_one(&store, "node-a", at(0)).await;
    assert_eq!(c.run.job_id, early.id.expect("id"));
    let mut late_job = late.clone();
    late_job.retry = seed_retries(1);
    late_job = store.job_update(&late_job, t0()).await.expect("update");
    let lc = claim_one(&store, "node-a", at(30)).await;
    assert_eq!(lc.run.job_id, late.id.expect("id"));
    finish(&store, &lc.run, failed(), at(31)).await;
    store
        .run_enqueue(late.id.expect("id"), at(90), at(31))
        .await
        .expect("enqueue");
    let due = store.job_due(at(200), 10, &[]).await.expect("job_due");
    let counts: Vec<(String, u32, u32)> = due
        .iter()
        .map(|d| (d.name.to_string(), d.running, d.pending))
        .collect();
    assert_eq!(
        counts,
        [
            ("urgent".to_string(), 0, 0),
            ("late".to_string(), 0, 2),
            ("early".to_string(), 1, 0),
        ],
        "job_due: running and pending counts per job (late and early both fire next at 60: \
         by id)"
    );
    assert_eq!(late_job.version, 2);
}

/// `next_due`: the earliest of enabled jobs' next fires, pending retries' times and queued
/// runs whose job has nothing running; `None` when nothing is scheduled.
pub async fn next_due_is_the_earliest_claimable_instant<S: Store>(store: S) {
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        None,
        "empty store"
    );
    let mut off = every_minute("off");
    off.enabled = false;
    off.next_fire = Some(at(-600));
    insert(&store, off).await;
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        None,
        "a disabled job is never due"
    );
    let mut job = every_minute("retrying");
    job.retry = RetryPolicy::new(1, Backoff::Fixed(vec![Duration::from_secs(30)]));
    let job = insert(&store, job).await;
    let id = job.id.expect("id");
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        Some(t0())
    );
    let c = claim_one(&store, "node-a", t0()).await;
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        Some(at(60)),
        "after the claim: the next fire"
    );
    let retry = finish(&store, &c.run, failed(), at(5)).await;
    assert_eq!(retry.next_attempt_at, Some(at(35)));
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        Some(at(35)),
        "a pending retry before the next fire"
    );
    let c = claim_one(&store, "node-b", at(35)).await;
    assert_eq!(c.run.attempt, 2);
    store
        .run_enqueue(id, at(60), at(36))
        .await
        .expect("enqueue");
    store
        .job_set_next_fire(id, Some(at(60)), Some(at(120)))
        .await
        .expect("move next fire");
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        Some(at(120)),
        "a queued run behind a running one is not due"
    );
    finish(
        &store,
        &c.run,
        RunEvent::Succeeded { result_json: None },
        at(40),
    )
    .await;
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        Some(at(36)),
        "a queued run is due from its creation once nothing of its job runs"
    );
}

/// Several queued runs of one job (a `fire-all` catch-up waiting behind the run in progress)
/// are claimed one at a time, oldest fire first, each once the job is idle again.
pub async fn queued_runs_of_a_job_run_one_at_a_time_oldest_first<S: Store>(store: S) {
    let mut job = manual("catch-up");
    job.next_fire = Some(at(-60));
    let job = insert(&store, job).await;
    let id = job.id.expect("id");
    let running = claim_one(&store, "node-a", t0()).await;
    assert_eq!(running.run.fire_time, at(-60));
    // Enqueued in fire order by successive passes.
    for (k, fire) in [at(-50), at(-40), at(-30)].into_iter().enumerate() {
        store
            .run_enqueue(id, fire, at(1 + k as i64))
            .await
            .expect("enqueue");
    }
    let mut run = running.run;
    for (k, want) in [at(-50), at(-40), at(-30)].into_iter().enumerate() {
        let now = at(10 * (k as i64 + 1));
        assert!(
            claim_all(&store, now).await.is_empty(),
            "nothing is claimed while the job runs (before {want})"
        );
        finish(&store, &run, RunEvent::Succeeded { result_json: None }, now).await;
        let got = claim_all(&store, now).await;
        assert_eq!(got.len(), 1, "one queued run per claim: {got:?}");
        assert_eq!(got[0].run.fire_time, want, "oldest fire first");
        run = got[0].run.clone();
    }
    finish(
        &store,
        &run,
        RunEvent::Succeeded { result_json: None },
        at(40),
    )
    .await;
    assert!(claim_all(&store, at(41)).await.is_empty(), "all ran");
}

/// `run_enqueue` (overlap `queue-one`): the queued run keeps the unique key, is not claimed
/// while a run of its job is running, and is claimed (attempt 1, its own fire time) at once
/// after that run ends.
pub async fn queued_run_waits_for_the_running_one<S: Store>(store: S) {
    let job = insert(&store, every_minute("queued")).await;
    let id = job.id.expect("id");
    let first = claim_one(&store, "node-a", t0()).await;
    let queued = store
        .run_enqueue(id, at(60), at(61))
        .await
        .expect("enqueue");
    assert_eq!(queued.state, RunState::Pending);
    assert_eq!(
        queued.next_attempt_at, None,
        "a queued run has no retry time"
    );
    assert_eq!(queued.fire_time, at(60));
    let e = store
        .run_enqueue(id, at(60), at(62))
        .await
        .expect_err("a fire is queued once");
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
    let e = store
        .run_enqueue(JobId(9_999), at(60), at(62))
        .await
        .expect_err("unknown job");
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    // The job's own next fire (at 60) is the queued fire's key: move it on as the loop does.
    store
        .job_set_next_fire(id, Some(at(60)), Some(at(120)))
        .await
        .expect("move next fire");
    assert!(
        claim_all(&store, at(100)).await.is_empty(),
        "a queued run is not claimed while its job runs"
    );
    finish(
        &store,
        &first.run,
        RunEvent::Succeeded { result_json: None },
        at(101),
    )
    .await;
    let got = claim_all(&store, at(101)).await;
    assert_eq!(
        got.len(),
        1,
        "the queued run is claimed once the job is idle"
    );
    assert_eq!(got[0].run.id, queued.id);
    assert_eq!(got[0].run.fire_time, at(60), "it keeps its fire time");
    assert_eq!(got[0].run.attempt, 1);
    assert_eq!(got[0].run.state, RunState::Running);

    // One claim that starts a fire of an idle job leaves that job's queued run waiting, even
    // though the job was idle when the claim began.
    let other = insert(&store, every_minute("queued-2")).await;
    let oid = other.id.expect("id");
    let first = claim_one(&store, "node-a", t0()).await;
    assert_eq!(first.run.job_id, oid);
    finish(
        &store,
        &first.run,
        RunEvent::Succeeded { result_json: None },
        at(1),
    )
    .await;
    store
        .run_enqueue(oid, at(90), at(150))
        .await
        .expect("enqueue");
    let got = store
        .run_claim_due(&claim("node-a", at(200), 10))
        .await
        .expect("claim");
    let mine: Vec<(Timestamp, u32)> = got
        .iter()
        .filter(|c| c.run.job_id == oid)
        .map(|c| (c.run.fire_time, c.run.attempt))
        .collect();
    assert_eq!(
        mine,
        [(at(60), 1)],
        "the due fire (at 60) starts; the queued run (created at 150) waits for it"
    );
}

/// `jobs_late`: enabled jobs whose next fire is at or before the instant, earliest first then
/// by id, across priorities and node tags (a tag no node serves included), at most `limit`;
/// `job_count` counts every job, disabled and unscheduled ones too.
pub async fn late_jobs_and_the_job_count<S: Store>(store: S) {
    assert_eq!(store.job_count().await.expect("count"), 0);
    let with = |name: &str, fire: Option<i64>| {
        let mut j = manual(name);
        j.next_fire = fire.map(at);
        j
    };
    let a = insert(&store, with("a", Some(10))).await;
    let mut b = with("b", Some(5));
    b.node_tag = Some("kiln-7".into());
    let b = insert(&store, b).await;
    let mut f = with("f", Some(5));
    f.priority = Priority::new(900).expect("priority");
    let f = insert(&store, f).await;
    insert(&store, with("later", Some(100))).await;
    let mut off = with("off", Some(1));
    off.enabled = false;
    insert(&store, off).await;
    insert(&store, with("unscheduled", None)).await;
    assert_eq!(store.job_count().await.expect("count"), 6);
    let names = |jobs: Vec<JobDef>| {
        jobs.into_iter()
            .map(|j| j.name.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(store.jobs_late(at(50), 10).await.expect("late")),
        ["b", "f", "a"],
        "by next fire, then id; any priority and node tag; not disabled, not later"
    );
    assert_eq!(
        names(store.jobs_late(at(5), 10).await.expect("late")),
        ["b", "f"],
        "at the instant counts"
    );
    assert_eq!(
        names(store.jobs_late(at(50), 2).await.expect("late")),
        ["b", "f"]
    );
    assert_eq!(store.jobs_late(at(4), 10).await.expect("late"), vec![]);
    let late = store.jobs_late(at(50), 10).await.expect("late");
    assert_eq!(late, vec![b, f, a], "whole jobs, as stored");
}

/// Insert, get (by id and name), list, enable/disable, delete; missing ids are NotFound.
pub async fn jobs_round_trip<S: Store>(store: S) {
    let a = insert(&store, manual("alpha")).await;
    assert!(a.id.is_some(), "job_insert: assigns an id");
    assert_eq!(a.version, 1, "job_insert: version 1");
    assert_eq!(a.updated_at, Some(t0()), "job_insert: updated_at = now");
    let id = a.id.expect("id");
    assert_eq!(store.job_get(id).await.expect("get"), Some(a.clone()));
    let name = JobName::new("alpha").expect("name");
    assert_eq!(
        store.job_get_by_name(&name).await.expect("get by name"),
        Some(a.clone())
    );
    let b = insert(&store, manual("beta")).await;
    assert_eq!(
        store.job_list().await.expect("list"),
        vec![a.clone(), b.clone()]
    );
    // Several at once: a missing id is left out.
    let missing = JobId(i64::MAX);
    let mut many = store
        .jobs_get(&[b.id.expect("id"), missing, id])
        .await
        .expect("jobs_get");
    many.sort_by_key(|j| j.id);
    assert_eq!(
        many,
        vec![a.clone(), b.clone()],
        "jobs_get: the ones that exist"
    );
    assert_eq!(store.jobs_get(&[]).await.expect("jobs_get"), vec![]);
    let off = store.job_set_enabled(id, false, at(5)).await.expect("set");
    assert!(!off.enabled, "job_set_enabled: disabled");
    assert_eq!(off.version, 2, "job_set_enabled: bumps the version");
    assert_eq!(off.updated_at, Some(at(5)));
    store.job_delete(id).await.expect("delete");
    assert_eq!(store.job_get(id).await.expect("get"), None);
    assert_eq!(
        store.job_delete(id).await.unwrap_err().kind(),
        StoreErrorKind::NotFound
    );
    assert_eq!(
        store
            .job_set_enabled(id, true, t0())
            .await
            .unwrap_err()
            .kind(),
        StoreErrorKind::NotFound
    );
    assert_eq!(
        store.job_update(&off, t0()).await.unwrap_err().kind(),
        StoreErrorKind::NotFound
    );
    let mut invalid = manual("gamma");
    invalid.timeout = Some(Duration::ZERO);
    assert_eq!(
        store.job_insert(&invalid, t0()).await.unwrap_err().kind(),
        StoreErrorKind::Invalid,
        "job_insert validates"
    );
}

/// A job's isolation is stored and updated like every other field; a finish records the
/// plugin build that ran the attempt (name, version, file hash — none for a plugin compiled
/// into the host), read back by `run_get` and `run_list`, and a later attempt's finish
/// replaces it (after a hot swap the retry may run on the new version).
pub async fn isolation_and_plugin_builds_are_recorded<S: Store>(store: S) {
    let mut job = manual("isolated");
    job.isolation = Isolation::Process;
    job.retry = seed_retries(1);
    let stored = insert(&store, job).await;
    assert_eq!(stored.isolation, Isolation::Process, "job_insert keeps it");
    let id = stored.id.expect("id");
    assert_eq!(
        store.job_get(id).await.expect("get").map(|j| j.isolation),
        Some(Isolation::Process)
    );
    let mut back = stored.clone();
    back.isolation = Isolation::InProcess;
    let updated = store.job_update(&back, at(1)).await.expect("update");
    assert_eq!(
        updated.isolation,
        Isolation::InProcess,
        "job_update changes it"
    );
    let mut again = updated.clone();
    again.isolation = Isolation::Process;
    store.job_update(&again, at(1)).await.expect("update");

    let run = claim_one(&store, "node-a", at(2)).await.run;
    assert_eq!(run.plugin, None, "a claimed run has no plugin build yet");
    let run_id = run.id.expect("id");
    let old = PluginBuild {
        name: "acme".into(),
        version: "1.0.0".into(),
        sha256: Some("ab".repeat(32)),
    };
    let mut after = run.clone();
    after
        .apply(failed(), at(3), &seed_retries(1))
        .expect("legal");
    let mut fin = RunFinish::from_run(&after, at(3));
    fin.plugin = Some(old.clone());
    let retried = store
        .run_set_state_if_running(run_id, 1, &fin)
        .await
        .expect("finish");
    assert_eq!(retried.state, RunState::Pending);
    assert_eq!(
        retried.plugin.as_ref(),
        Some(&old),
        "recorded with the retry"
    );
    let due = retried.next_attempt_at.expect("retry at");
    let second = claim_one(&store, "node-a", due).await.run;
    assert_eq!(second.plugin.as_ref(), Some(&old), "a claim keeps it");
    let new = PluginBuild {
        name: "acme".into(),
        version: "2.0.0".into(),
        sha256: None,
    };
    let mut done = second.clone();
    done.apply(
        RunEvent::Succeeded { result_json: None },
        due,
        &seed_retries(1),
    )
    .expect("legal");
    let mut fin = RunFinish::from_run(&done, due);
    fin.plugin = Some(new.clone());
    let ended = store
        .run_set_state_if_running(run_id, 2, &fin)
        .await
        .expect("finish");
    assert_eq!(
        ended.plugin.as_ref(),
        Some(&new),
        "the last attempt's build wins"
    );
    assert_eq!(
        store
            .run_get(run_id)
            .await
            .expect("get")
            .and_then(|r| r.plugin),
        Some(new.clone())
    );
    let listed = store
        .run_list(&RunFilter {
            job: Some(id),
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].plugin.as_ref(),
        Some(&new),
        "run_list reads it too"
    );
}

/// A second job with a taken name (inserted or renamed) is a Conflict naming it.
pub async fn duplicate_name_is_a_conflict<S: Store>(store: S) {
    insert(&store, manual("nightly report")).await;
    let e = store
        .job_insert(&manual("nightly report"), t0())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "duplicate name: {e}");
    assert!(
        e.to_string().contains("nightly report"),
        "duplicate name: the error names the job: {e}"
    );
    let mut other = insert(&store, manual("other")).await;
    other.name = JobName::new("nightly report").expect("name");
    let e = store.job_update(&other, t0()).await.unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Conflict,
        "rename onto a taken name: {e}"
    );
}

/// An update from a stale version is a Conflict and changes nothing.
pub async fn stale_version_update_is_a_conflict<S: Store>(store: S) {
    let v1 = insert(&store, manual("alpha")).await;
    let mut edit = v1.clone();
    edit.description = Some("first edit".into());
    let v2 = store.job_update(&edit, at(1)).await.expect("update");
    assert_eq!(v2.version, 2, "job_update: version + 1");
    assert_eq!(v2.updated_at, Some(at(1)));
    let mut stale = v1.clone();
    stale.description = Some("lost edit".into());
    let e = store.job_update(&stale, at(2)).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "stale version: {e}");
    let stored = store.job_get(v2.id.expect("id")).await.expect("get");
    assert_eq!(stored, Some(v2), "a stale update changes nothing");
}

/// A claim inserts a running run and advances next fire once per claim, never twice; next
/// fire is a compare-and-set for the loop.
pub async fn claim_advances_next_fire_exactly_once<S: Store>(store: S) {
    let job = insert(&store, every_minute("minutely")).await;
    let id = job.id.expect("id");
    let c = claim_one(&store, "node-a", at(30)).await;
    let r = &c.run;
    assert!(r.id.is_some(), "claim: the run is stored");
    assert_eq!(
        (r.job_id, r.fire_time),
        (id, t0()),
        "claim: job and fire time"
    );
    assert_eq!(
        (r.state, r.attempt),
        (RunState::Running, 1),
        "claim: running #1"
    );
    assert_eq!(r.node_id, Some(node("node-a")), "claim: node");
    assert_eq!(r.started_at, Some(at(30)), "claim: started now");
    assert_eq!(
        r.lease_expires_at,
        Some(at(90)),
        "claim: lease = now + lease"
    );
    assert_eq!(
        c.job.next_fire,
        Some(at(60)),
        "claim: returns the advanced job"
    );
    assert_eq!(
        store
            .run_get(r.id.expect("id"))
            .await
            .expect("get")
            .as_ref(),
        Some(r),
        "claim: returns the run as stored"
    );
    assert!(claim_all(&store, at(30)).await.is_empty(), "claimed twice");
    assert!(claim_all(&store, at(59)).await.is_empty(), "claimed early");
    let stored = store.job_get(id).await.expect("get").expect("job");
    assert_eq!(stored.next_fire, Some(at(60)), "next fire advanced once");
    assert_eq!(
        stored.version, job.version,
        "the claim does not bump the version"
    );
    // Far behind: one fire per claim, the next fire is not jumped past now (misfire policy is
    // the loop's).
    let late = claim_all(&store, at(200)).await;
    assert_eq!(late.len(), 1, "one run per job per claim");
    assert_eq!(late[0].run.fire_time, at(60));
    assert_eq!(late[0].job.next_fire, Some(at(120)));
    // The loop's compare-and-set on next fire.
    let e = store
        .job_set_next_fire(id, Some(t0()), Some(at(600)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "stale next fire: {e}");
    store
        .job_set_next_fire(id, Some(at(120)), Some(at(180)))
        .await
        .expect("set next fire");
    let fires: Vec<_> = claim_all(&store, at(200))
        .await
        .iter()
        .map(|c| c.run.fire_time)
        .collect();
    assert_eq!(fires, [at(180)], "skipped past 120 by the loop");
    // A manual job fires once; its next fire becomes none.
    let m = insert(&store, manual("manual")).await;
    let got = claim_all(&store, at(200)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].job.id, m.id);
    assert_eq!(got[0].job.next_fire, None, "no schedule: no next fire");
}

/// Two claimers on two clones of one store, interleaved, never claim one (job, fire time)
/// twice and miss none.
pub async fn concurrent_claimers_never_share_a_fire<S: Store + Clone>(store: S) {
    let jobs = 6;
    let fires = seed_every_minute_jobs(&store, jobs).await;
    let (a, b) = (store.clone(), store.clone());
    let (ra, rb) = join(claim_until_empty(&a, 1), claim_until_empty(&b, 2)).await;
    let all: Vec<_> = ra.into_iter().chain(rb).collect();
    assert_each_fire_once(&all, jobs, fires);
    let listed = store
        .run_list(&RunFilter {
            limit: 1000,
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(listed.len(), all.len(), "one stored run per claimed fire");
}

/// Disabled jobs are not claimed and keep their next fire; enabling them makes them due.
pub async fn disabled_jobs_are_not_claimed<S: Store>(store: S) {
    let on = insert(&store, every_minute("on")).await;
    let off = insert(&store, every_minute("off")).await;
    let off_id = off.id.expect("id");
    store
        .job_set_enabled(off_id, false, t0())
        .await
        .expect("disable");
    let got = claim_all(&store, at(10)).await;
    assert_eq!(got.len(), 1, "only the enabled job");
    assert_eq!(got[0].job.id, on.id);
    let stored = store.job_get(off_id).await.expect("get").expect("job");
    assert_eq!(
        stored.next_fire,
        Some(t0()),
        "a disabled job keeps its next fire"
    );
    store
        .job_set_enabled(off_id, true, at(11))
        .await
        .expect("enable");
    let got = claim_all(&store, at(12)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].job.id, Some(off_id), "enabled again: claimed");
}

/// Due runs come in priority order, then by due time; `limit` cuts the batch.
pub async fn claim_orders_by_priority_then_due_time<S: Store>(store: S) {
    let add = |name: &str, prio: u16, due: i64| {
        let mut j = manual(name);
        j.priority = Priority::new(prio).expect("priority");
        j.next_fire = Some(at(due));
        j
    };
    for j in [
        add("low", 900, 0),
        add("mid-late", 500, 10),
        add("high", 10, 20),
        add("mid-early", 500, 5),
    ] {
        insert(&store, j).await;
    }
    let names = |c: Vec<ClaimedRun>| -> Vec<String> {
        c.into_iter().map(|c| c.job.name.to_string()).collect()
    };
    let first = store
        .run_claim_due(&claim("node-a", at(30), 2))
        .await
        .expect("claim");
    assert_eq!(
        names(first),
        ["high", "mid-early"],
        "priority, then due time"
    );
    let rest = claim_all(&store, at(30)).await;
    assert_eq!(names(rest), ["mid-late", "low"]);
}

/// `ClaimParams::claimed_at`: a claim made ahead of its `now` (a scheduler claiming an
/// instant's fires before it) records, for a fire of that instant, the instant as its start;
/// for a run due already (here a one-off fire late by five seconds), the claim's real
/// instant — never the instant ahead, which would put its start after its end. Its attempt
/// says the same.
pub async fn a_claim_ahead_records_each_runs_real_start<S: Store>(store: S) {
    let mut late = manual("late").with_schedule(Schedule::new(Rule::Once(at(5)), Zone::utc()));
    late.next_fire = Some(at(5));
    insert(&store, late).await;
    let rule = Rule::Cron(CronExpr::parse("* * * * * *").expect("cron"));
    let mut ahead = manual("ahead").with_schedule(Schedule::new(rule, Zone::utc()));
    ahead.next_fire = Some(at(10));
    insert(&store, ahead).await;
    let claimed = store
        .run_claim_due(&ClaimParams {
            claimed_at: Some(at(9)),
            ..claim("node-a", at(10), 10)
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 2, "both are due by the claim's now");
    for c in claimed {
        let (want, fire) = match c.job.name.as_str() {
            "late" => (at(9), at(5)),
            _ => (at(10), at(10)),
        };
        assert_eq!(c.run.fire_time, fire);
        assert_eq!(c.run.started_at, Some(want), "{} as claimed", c.job.name);
        let id = c.run.id.expect("an id");
        let stored = store.run_get(id).await.expect("run_get").expect("the run");
        assert_eq!(stored.started_at, Some(want), "{} as stored", c.job.name);
        let attempts = store.run_attempts(id).await.expect("run_attempts");
        assert_eq!(attempts.len(), 1, "{}", c.job.name);
        assert_eq!(
            attempts[0].started_at, want,
            "{}'s attempt as stored",
            c.job.name
        );
    }
}

/// The fairness rule: a claim with more due than its room gives at least half the room to
/// fires of recurring jobs (in claim order among themselves), the rest in claim order; a
/// backlog of older one-off fires does not hold an every-second cron back. What an edit
/// makes of a job's schedule decides which it is; a claim that sees everything due takes it
/// in plain claim order; `job_due` lists every fire such a claim may take.
pub async fn recurring_fires_get_half_of_a_full_claim<S: Store>(store: S) {
    let once = |name: &str, due: i64| {
        let mut j = manual(name).with_schedule(Schedule::new(Rule::Once(at(due)), Zone::utc()));
        j.next_fire = Some(at(due));
        j
    };
    let every_second = |name: &str| {
        let rule = Rule::Cron(CronExpr::parse("* * * * * *").expect("cron"));
        let mut j = manual(name).with_schedule(Schedule::new(rule, Zone::utc()));
        j.next_fire = Some(at(10));
        j
    };
    // Edited from one kind to the other before anything is claimed: the edit decides.
    let shifty = insert(&store, every_second("shifty")).await;
    let turned = insert(&store, once("turned", 50)).await;
    let mut edit = once("shifty", 9);
    edit.id = shifty.id;
    edit.version = shifty.version;
    store
        .job_update(&edit, t0())
        .await
        .expect("cron to one-off");
    let mut edit = every_second("turned");
    edit.id = turned.id;
    edit.version = turned.version;
    store
        .job_update(&edit, t0())
        .await
        .expect("one-off to cron");
    for i in 0..6 {
        insert(&store, once(&format!("once-{i}"), i)).await;
    }
    for name in ["cron-a", "cron-b", "cron-c"] {
        insert(&store, every_second(name)).await;
    }
    let mut urgent = once("urgent", 8);
    urgent.priority = Priority::new(10).expect("priority");
    insert(&store, urgent).await;
    let names = |c: Vec<ClaimedRun>| -> Vec<String> {
        c.into_iter().map(|c| c.job.name.to_string()).collect()
    };

    let due: Vec<String> = store
        .job_due(at(10), 4, &[])
        .await
        .expect("due")
        .into_iter()
        .map(|d| d.name.to_string())
        .collect();
    assert_eq!(
        due,
        [
            "urgent", "once-0", "once-1", "once-2", "turned", "cron-a", "cron-b", "cron-c"
        ],
        "the first four in claim order, then the recurring ones a full claim may take"
    );
    let first = store
        .run_claim_due(&claim("node-a", at(10), 4))
        .await
        .expect("claim");
    assert_eq!(
        names(first),
        ["urgent", "once-0", "turned", "cron-a"],
        "half the room to recurring fires, priority first within each part"
    );
    let second = store
        .run_claim_due(&claim("node-a", at(10), 4))
        .await
        .expect("claim");
    assert_eq!(
        names(second),
        ["once-1", "once-2", "cron-b", "cron-c"],
        "the displaced one-offs stay due"
    );
    let third = store
        .run_claim_due(&claim("node-a", at(10), 4))
        .await
        .expect("claim");
    assert_eq!(
        names(third),
        ["once-3", "once-4", "once-5", "shifty"],
        "no recurring fire is due: the room goes to the rest in claim order"
    );
    let rest = claim_all(&store, at(10)).await;
    assert!(
        rest.is_empty(),
        "everything due was claimed once: {:?}",
        names(rest)
    );
}

/// `ClaimParams::recurring_only` (a node's free recurring reserve): of a claim's `limit`,
/// that many go only to fires of recurring jobs — the claim takes at most
/// `limit - recurring_only` other runs (one-offs, queued runs of a recurring job), and what it
/// leaves stays due; `ClaimedRun::recurring_fire` says which is which; and
/// `next_due(DueSet::Recurring)` is the next recurring fire, past every due one-off.
pub async fn recurring_only_room_is_left_to_recurring_fires<S: Store>(store: S) {
    let once = |name: &str, due: i64| {
        let mut j = manual(name).with_schedule(Schedule::new(Rule::Once(at(due)), Zone::utc()));
        j.next_fire = Some(at(due));
        j
    };
    let every_second = |name: &str, next: i64| {
        let rule = Rule::Cron(CronExpr::parse("* * * * * *").expect("cron"));
        let mut j = manual(name).with_schedule(Schedule::new(rule, Zone::utc()));
        j.next_fire = Some(at(next));
        j
    };
    for i in 0..5 {
        insert(&store, once(&format!("once-{i}"), i)).await;
    }
    insert(&store, every_second("cron-a", 10)).await;
    insert(&store, every_second("cron-b", 10)).await;
    // A queued run of a recurring job is not a fire of its schedule: it is one of the others.
    let queued = insert(&store, every_second("cron-q", 1000)).await;
    let queued_id = queued.id.expect("id");
    store
        .run_enqueue(queued_id, at(5), t0())
        .await
        .expect("enqueue");
    let with_reserve = |limit: usize, recurring_only: usize| ClaimParams {
        claimed_at: None,
        recurring_only,
        ..claim("node-a", at(10), limit)
    };
    let kinds = |c: &[ClaimedRun]| -> Vec<(String, bool)> {
        c.iter()
            .map(|c| (c.job.name.to_string(), c.recurring_fire))
            .collect()
    };

    let first = store
        .run_claim_due(&with_reserve(3, 2))
        .await
        .expect("claim");
    assert_eq!(
        kinds(&first),
        [
            ("once-0".to_string(), false),
            ("cron-a".to_string(), true),
            ("cron-b".to_string(), true)
        ],
        "one other run, the reserved room to the recurring fires"
    );
    let none = store
        .run_claim_due(&with_reserve(2, 2))
        .await
        .expect("claim");
    assert!(
        none.is_empty(),
        "only reserved room and no recurring fire due: nothing, not a one-off or a queued \
         run: {:?}",
        kinds(&none)
    );
    assert_eq!(
        store
            .next_due(&[], DueSet::Recurring)
            .await
            .expect("next due"),
        Some(at(11)),
        "the next recurring fire, past the due one-offs"
    );
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next due"),
        Some(t0()),
        "the queued run is claimable at once"
    );
    let rest = claim_all(&store, at(10)).await;
    let mut names: Vec<String> = rest.iter().map(|c| c.job.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        ["cron-q", "once-1", "once-2", "once-3", "once-4"],
        "what the reserve left stayed due"
    );
    let queued_run = rest
        .iter()
        .find(|c| c.job.name.as_str() == "cron-q")
        .expect("queued run");
    assert!(!queued_run.recurring_fire, "a queued run is no fire");
}

/// Many finishes at once (a server store writes those that meet in one batch, group
/// commit): each gets its own answer — its own columns, or a refusal for a stale attempt or
/// a second finish of one run — each attempt ends once, and each final state starts its
/// continuations once, even when every parent's child wants the same instant.
pub async fn concurrent_finishes_each_get_their_own_answer<S: Store>(store: S) {
    let mut notify = manual("notify");
    notify.next_fire = None;
    let notify = insert(&store, notify).await;
    let name = JobName::new("notify").expect("valid name");
    let parents = 6;
    for i in 0..parents {
        let mut job = manual(&format!("finisher-{i}"));
        job.on_success = vec![name.clone()];
        job.on_failure = vec![name.clone()];
        if i == parents - 1 {
            job.retry = seed_retries(2);
        }
        insert(&store, job).await;
    }
    let mut runs: Vec<Run> = claim_all(&store, at(1))
        .await
        .into_iter()
        .map(|c| c.run)
        .collect();
    runs.sort_by_key(|r| r.id);
    assert_eq!(runs.len(), parents, "every finisher claimed");
    // Runs 0..=3 succeed (each with its own result), 4 fails for good, 5 fails into a retry.
    let mut wanted = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let job = store
            .job_get(run.job_id)
            .await
            .expect("job get")
            .expect("job");
        let event = if i < 4 {
            RunEvent::Succeeded {
                result_json: Some(format!("{{\"run\":{i}}}")),
            }
        } else {
            RunEvent::Failed {
                error: format!("boom {i}"),
                retryable: true,
            }
        };
        let mut after = run.clone();
        after.apply(event, at(5), &job.retry).expect("legal event");
        wanted.push((i, run.attempt, RunFinish::from_run(&after, at(5))));
    }
    // A stale attempt of run 0, and a second finish of run 1 racing its first.
    let stale = (0, runs[0].attempt + 1, wanted[0].2.clone());
    let second = (
        1,
        runs[1].attempt,
        RunFinish {
            result_json: Some("{\"run\":\"second\"}".into()),
            ..wanted[1].2.clone()
        },
    );
    let calls: Vec<_> = wanted.iter().cloned().chain([stale, second]).collect();
    let answers = join_all(
        calls
            .iter()
            .map(|(i, attempt, fin)| {
                store.run_set_state_if_running(runs[*i].id.expect("id"), *attempt, fin)
            })
            .collect(),
    )
    .await;
    let (stale_answer, second_answer) = (&answers[parents], &answers[parents + 1]);
    match stale_answer {
        Err(e) => assert_eq!(e.kind(), StoreErrorKind::Conflict, "stale attempt: {e}"),
        Ok(run) => panic!("a finish of a stale attempt was written: {run:?}"),
    }
    match (&answers[1], second_answer) {
        (Ok(_), Err(e)) | (Err(e), Ok(_)) => {
            assert_eq!(e.kind(), StoreErrorKind::Conflict, "second finish: {e}");
        }
        other => panic!("two finishes of one run: exactly one is written, got {other:?}"),
    }
    for (k, (i, _, fin)) in calls.iter().enumerate().take(parents + 2) {
        let Ok(answer) = &answers[k] else { continue };
        let id = runs[*i].id.expect("id");
        assert_eq!(answer.id, Some(id), "finish {k} answered with another run");
        assert_eq!(answer.state, fin.state, "finish {k}: its own state");
        assert_eq!(
            answer.result_json, fin.result_json,
            "finish {k}: its own result"
        );
        assert_eq!(answer.error, fin.error, "finish {k}: its own error");
        let stored = store.run_get(id).await.expect("get").expect("run");
        assert_eq!(&stored, answer, "finish {k}: the answer is what was stored");
    }
    for (i, run) in runs.iter().enumerate() {
        let id = run.id.expect("id");
        let stored = store.run_get(id).await.expect("get").expect("run");
        let attempts = store.run_attempts(id).await.expect("attempts");
        let first = attempts
            .iter()
            .find(|a| a.attempt == run.attempt)
            .expect("the claimed attempt");
        let outcome = if i < 4 {
            AttemptOutcome::Succeeded
        } else {
            AttemptOutcome::Failed
        };
        assert_eq!(
            first.outcome,
            Some(outcome),
            "run {i}: its attempt ended once"
        );
        assert_eq!(first.finished_at, Some(at(5)), "run {i}: its attempt's end");
        let children = store.run_children(id).await.expect("children");
        if i == parents - 1 {
            assert_eq!(
                stored.state,
                RunState::Pending,
                "run {i} waits for its retry"
            );
            assert_eq!(stored.attempt, run.attempt + 1, "run {i}: the next attempt");
            assert!(
                children.is_empty(),
                "a retry continues with nothing: {children:?}"
            );
        } else {
            assert!(stored.state.is_final(), "run {i} ended: {stored:?}");
            assert_eq!(children.len(), 1, "run {i}: one continuation: {children:?}");
            assert_eq!(children[0].job_id, notify.id.expect("id"));
        }
    }
    let mut fires: Vec<Timestamp> = store
        .runs_between(notify.id, at(0), at(60))
        .await
        .expect("runs")
        .iter()
        .map(|r| r.fire_time)
        .collect();
    fires.dedup();
    assert_eq!(
        fires.len(),
        parents - 1,
        "each continuation at its own instant"
    );
}

/// A finish applies only to the running attempt; a second finish, a wrong attempt or a
/// progress report after the end is a Conflict.
pub async fn finish_is_conditional<S: Store>(store: S) {
    insert(&store, manual("alpha")).await;
    let run = claim_one(&store, "node-a", at(1)).await.run;
    let id = run.id.expect("id");
    let progress = Progress {
        done: 1,
        total: 4,
        message: "rows".into(),
    };
    store.run_progress(id, &progress).await.expect("progress");
    let stored = store.run_get(id).await.expect("get").expect("run");
    assert_eq!(stored.progress, Some(progress.clone()), "progress recorded");
    let mut done = run.clone();
    done.apply(
        RunEvent::Succeeded {
            result_json: Some("{\"rows\":4}".into()),
        },
        at(4),
        &RetryPolicy::default(),
    )
    .expect("legal");
    let fin = RunFinish::from_run(&done, at(4));
    let e = store
        .run_set_state_if_running(id, 2, &fin)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "wrong attempt: {e}");
    let bad = RunFinish {
        state: RunState::Running,
        ..fin.clone()
    };
    let e = store
        .run_set_state_if_running(id, 1, &bad)
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Invalid,
        "finish in state running: {e}"
    );
    let ended = store
        .run_set_state_if_running(id, 1, &fin)
        .await
        .expect("finish");
    assert_eq!(ended.state, RunState::Succeeded);
    assert_eq!(ended.finished_at, Some(at(4)));
    assert_eq!(ended.elapsed, Some(Duration::from_secs(3)));
    assert_eq!(ended.result_json.as_deref(), Some("{\"rows\":4}"));
    assert_eq!(ended.lease_expires_at, None, "lease released");
    assert_eq!(store.run_get(id).await.expect("get"), Some(ended.clone()));
    let e = store
        .run_set_state_if_running(id, 1, &fin)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "second finish: {e}");
    let e = store.run_progress(id, &progress).await.unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Conflict,
        "progress after the end: {e}"
    );
    let missing = RunId(id.0 + 1000);
    let e = store
        .run_set_state_if_running(missing, 1, &fin)
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::NotFound,
        "finish of a missing run: {e}"
    );
}

/// A retryable failure re-queues the same run with attempt + 1 at `retry_at`; it is claimable
/// only when due and only while its job is enabled.
pub async fn retry_requeues_and_is_claimable_only_when_due<S: Store>(store: S) {
    let mut job = manual("flaky");
    job.retry = seed_retries(2);
    let job = insert(&store, job).await;
    let run = claim_one(&store, "node-a", t0()).await.run;
    let id = run.id.expect("id");
    let queued = finish(&store, &run, failed(), at(5)).await;
    assert_eq!(
        (queued.state, queued.attempt),
        (RunState::Pending, 2),
        "retry: pending #2"
    );
    assert_eq!(
        queued.next_attempt_at,
        Some(at(15)),
        "retry: seed delay 10s"
    );
    assert_eq!(
        queued.error.as_deref(),
        Some("boom"),
        "retry keeps the error"
    );
    assert_eq!(queued.finished_at, None, "a retry is not final");
    assert!(
        claim_all(&store, at(14)).await.is_empty(),
        "retry claimed early"
    );
    let job_id = job.id.expect("id");
    store
        .job_set_enabled(job_id, false, at(15))
        .await
        .expect("disable");
    assert!(
        claim_all(&store, at(15)).await.is_empty(),
        "retry of a disabled job claimed"
    );
    store
        .job_set_enabled(job_id, true, at(15))
        .await
        .expect("enable");
    let again = claim_one(&store, "node-b", at(15)).await.run;
    assert_eq!(again.id, Some(id), "a retry re-uses the run");
    assert_eq!(again.fire_time, t0(), "same fire time");
    assert_eq!((again.state, again.attempt), (RunState::Running, 2));
    assert_eq!(again.node_id, Some(node("node-b")));
    assert_eq!(again.started_at, Some(at(15)));
    assert_eq!(again.next_attempt_at, None);
    let e = store
        .run_set_state_if_running(id, 1, &RunFinish::from_run(&queued, at(16)))
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Conflict,
        "finish of an old attempt: {e}"
    );
}

/// A running run whose lease expired fails with the core's message and is retried or made
/// final per its job's policy; renewed leases are left alone.
pub async fn lease_expiry_recovery_fails_then_retries_per_policy<S: Store>(store: S) {
    let mut retried = manual("retried");
    retried.retry = seed_retries(1);
    insert(&store, retried).await;
    register(&store, "node-a", &life("node-a"), t0(), None).await;
    register(&store, "node-b", &life("node-b"), t0(), None).await;
    let run = claim_one(&store, "node-a", t0()).await.run;
    let id = run.id.expect("id");
    assert_eq!(run.lease_expires_at, Some(at(60)));
    assert_eq!(run.node_instance, Some(life("node-a")), "claim: instance");
    let renewed = store
        .lease_renew(&node("node-a"), &life("node-a"), at(90), at(30))
        .await
        .expect("renew");
    assert_eq!(
        renewed,
        vec![id],
        "lease_renew returns the node's live runs"
    );
    assert_eq!(
        store
            .lease_renew(&node("node-b"), &life("node-b"), at(90), at(30))
            .await
            .expect("renew"),
        Vec::new(),
        "another node renews nothing"
    );
    let none = store
        .run_recover_expired(at(89), None)
        .await
        .expect("recover");
    assert!(none.is_empty(), "a live lease is not recovered");
    let got = store
        .run_recover_expired(at(90), None)
        .await
        .expect("recover");
    assert_eq!(got.len(), 1, "the expired lease is recovered");
    let r = &got[0];
    assert_eq!((r.id, r.state, r.attempt), (Some(id), RunState::Pending, 2));
    assert_eq!(r.error.as_deref(), Some(LEASE_EXPIRED));
    assert_eq!(r.next_attempt_at, Some(at(100)));
    assert_eq!(r.lease_expires_at, None);
    assert_eq!(store.run_get(id).await.expect("get").as_ref(), Some(r));
    assert_eq!(
        store
            .lease_renew(&node("node-a"), &life("node-a"), at(200), at(95))
            .await
            .expect("renew"),
        Vec::new(),
        "the old node's lease is gone"
    );
    let e = store
        .run_set_state_if_running(id, 1, &RunFinish::from_run(r, at(95)))
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Conflict,
        "the old node's finish: {e}"
    );
    let again = claim_one(&store, "node-b", at(100)).await.run;
    assert_eq!((again.id, again.attempt), (Some(id), 2));
    let got = store
        .run_recover_expired(at(160), None)
        .await
        .expect("recover");
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(
        (r.state, r.attempt),
        (RunState::Failed, 2),
        "no retry left: failed"
    );
    assert_eq!(r.error.as_deref(), Some(LEASE_EXPIRED));
    assert_eq!(r.finished_at, Some(at(160)));
    assert!(
        store
            .run_recover_expired(at(1000), None)
            .await
            .expect("recover")
            .is_empty(),
        "a final run is not recovered again"
    );
}

/// A restarting node recovers the runs its earlier lives left running (whatever their lease)
/// and nothing else: not another node's, and not its new life's own.
pub async fn restart_recovery_takes_only_this_nodes_runs<S: Store>(store: S) {
    insert(&store, manual("mine")).await;
    insert(&store, manual("theirs")).await;
    insert(&store, manual("new-life")).await;
    let mine = claim_one(&store, "node-a", t0()).await.run;
    let theirs = claim_one(&store, "node-b", t0()).await.run;
    let second = InstanceId("node-a-life-2".to_string());
    let mut p = claim("node-a", t0(), 1);
    p.instance = second.clone();
    let fresh = store.run_claim_due(&p).await.expect("claim").remove(0).run;
    assert_eq!(fresh.node_instance, Some(second.clone()));
    let got = store
        .run_recover_expired(at(1), Some((&node("node-a"), &second)))
        .await
        .expect("recover");
    assert_eq!(got.len(), 1, "only the earlier life's run");
    assert_eq!(got[0].id, mine.id);
    assert_eq!(got[0].state, RunState::Failed, "no retries: failed");
    assert_eq!(got[0].error.as_deref(), Some(NODE_RESTARTED));
    for untouched in [theirs, fresh] {
        let now = store
            .run_get(untouched.id.expect("id"))
            .await
            .expect("get")
            .expect("run");
        assert_eq!(
            now, untouched,
            "a live run of another node or life is untouched"
        );
    }
}

/// One process per node identity: a start is refused while another life of the node id has a
/// live heartbeat (nothing written), unless it names that life to take over; the taken-over
/// life can renew nothing and stops; a stopped or stale life is followed without asking.
pub async fn node_identity_is_held_by_one_live_instance<S: Store>(store: S) {
    let (one, two, three) = (
        life("n"),
        InstanceId("n-life-2".to_string()),
        InstanceId("n-life-3".to_string()),
    );
    assert_eq!(
        register(&store, "n", &one, t0(), None).await,
        Registered::Yes { previous: None },
        "first start"
    );
    match register(&store, "n", &two, at(30), None).await {
        Registered::Refused { live } => {
            assert_eq!(
                live.info,
                node_info("n", &one),
                "refused: names the live life"
            );
            assert_eq!(live.heartbeat_at, Some(t0()));
        }
        other => panic!("a second live instance was not refused: {other:?}"),
    }
    assert!(
        matches!(
            register(&store, "n", &two, at(30), Some(&three)).await,
            Registered::Refused { .. }
        ),
        "takeover of a life that is not the live one"
    );
    let listed = store.node_list().await.expect("node_list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].info.instance, one, "a refusal writes nothing");
    // A heartbeat keeps it live past the first lease.
    store
        .lease_renew(&node("n"), &one, at(120), at(59))
        .await
        .expect("heartbeat");
    assert!(
        matches!(
            register(&store, "n", &two, at(100), None).await,
            Registered::Refused { .. }
        ),
        "a renewed heartbeat is live"
    );
    // Taken over by name.
    match register(&store, "n", &two, at(100), Some(&one)).await {
        Registered::Yes { previous: Some(p) } => assert_eq!(p.info.instance, one),
        other => panic!("takeover refused: {other:?}"),
    }
    let e = store
        .lease_renew(&node("n"), &one, at(160), at(101))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "taken-over life: {e}");
    assert!(e.message().contains("taken over"), "{e}");
    let e = store
        .lease_renew(&node("nobody"), &one, at(160), at(101))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "unregistered node: {e}");
    store
        .lease_renew(&node("n"), &two, at(160), at(101))
        .await
        .expect("the new life renews");
    // The old life's stop changes nothing; the new life's stop frees the id at once.
    store
        .node_stopped(&node("n"), &one, at(102))
        .await
        .expect("stop");
    assert_eq!(store.node_list().await.expect("list")[0].stopped_at, None);
    store
        .node_stopped(&node("n"), &two, at(103))
        .await
        .expect("stop");
    assert_eq!(
        store.node_list().await.expect("list")[0].stopped_at,
        Some(at(103))
    );
    assert!(
        matches!(
            register(&store, "n", &three, at(104), None).await,
            Registered::Yes { previous: Some(_) }
        ),
        "a cleanly stopped life is followed"
    );
    // A life that stopped heartbeating a lease ago is followed (a crash elsewhere).
    assert!(
        matches!(
            register(&store, "n", &one, at(104 + 60), None).await,
            Registered::Yes { previous: Some(_) }
        ),
        "a stale heartbeat is followed"
    );
}

/// The nodes table: every registered node by id with what it registered, its last heartbeat
/// (each lease renewal) and its running runs.
pub async fn node_list_reports_heartbeats_and_running_runs<S: Store>(store: S) {
    assert!(store.node_list().await.expect("list").is_empty());
    register(&store, "node-b", &life("node-b"), t0(), None).await;
    register(&store, "node-a", &life("node-a"), at(1), None).await;
    insert(&store, manual("one")).await;
    insert(&store, manual("two")).await;
    claim_one(&store, "node-a", at(2)).await;
    claim_one(&store, "node-a", at(2)).await;
    store
        .lease_renew(&node("node-a"), &life("node-a"), at(70), at(10))
        .await
        .expect("renew");
    let listed = store.node_list().await.expect("list");
    let ids: Vec<&str> = listed.iter().map(|n| n.info.id.0.as_str()).collect();
    assert_eq!(ids, ["node-a", "node-b"], "by id");
    let a = &listed[0];
    assert_eq!(
        a.info,
        node_info("node-a", &life("node-a")),
        "what it registered"
    );
    assert_eq!(a.started_at, Some(at(1)));
    assert_eq!(a.heartbeat_at, Some(at(10)), "the renewal is a heartbeat");
    assert_eq!(a.heartbeat_age(at(25)), Duration::from_secs(15));
    assert_eq!(a.running, 2);
    assert_eq!((listed[1].running, listed[1].heartbeat_at), (0, Some(t0())));
}

fn alert_key(subject: &str, condition: &str) -> crate::alert::AlertKey {
    crate::alert::AlertKey {
        subject: subject.into(),
        condition: condition.into(),
    }
}

/// One open episode per (subject, condition): a second open is refused until the episode
/// closes, a close succeeds once, a closed episode reopens; other keys are independent.
pub async fn alert_episodes_open_once_until_closed<S: Store>(store: S) {
    let failed = alert_key("job:nightly", "failed");
    let timed_out = alert_key("job:nightly", "timed_out");
    let other = alert_key("job:hourly", "failed");
    assert!(store.alert_open(&failed, "run 1", at(1)).await.unwrap());
    assert!(
        !store.alert_open(&failed, "run 2", at(2)).await.unwrap(),
        "open already"
    );
    assert!(
        store.alert_open(&timed_out, "run 2", at(2)).await.unwrap(),
        "another condition"
    );
    assert!(
        store.alert_open(&other, "run 3", at(2)).await.unwrap(),
        "another subject"
    );
    assert!(
        store.alert_close(&failed, at(3)).await.unwrap(),
        "closed by this call"
    );
    assert!(
        !store.alert_close(&failed, at(4)).await.unwrap(),
        "nothing open any more"
    );
    assert!(
        !store
            .alert_close(&alert_key("job:none", "failed"), at(4))
            .await
            .unwrap()
    );
    assert!(
        store.alert_open(&failed, "run 5", at(5)).await.unwrap(),
        "a new episode"
    );
    assert!(!store.alert_open(&failed, "run 6", at(6)).await.unwrap());
    assert!(!store.alert_open(&timed_out, "run 6", at(6)).await.unwrap());
    // Over-long fields are clipped, not refused: an alert is never lost to a column width.
    let long = alert_key(&"s".repeat(500), &"c".repeat(100));
    assert!(
        store
            .alert_open(&long, &"e".repeat(5000), at(7))
            .await
            .unwrap()
    );
    assert!(!store.alert_open(&long, "again", at(8)).await.unwrap());
}

/// Several nodes opening the same episode at once: exactly one is told to send.
pub async fn concurrent_alert_opens_have_one_winner<S: Store + Clone>(store: S) {
    let key = alert_key("job:shared", "failed");
    for round in 0..5 {
        let (a, b) = join(
            store.alert_open(&key, "node a", at(round * 10)),
            store.alert_open(&key, "node b", at(round * 10)),
        )
        .await;
        let won = [a.unwrap(), b.unwrap()];
        assert_eq!(
            won.iter().filter(|w| **w).count(),
            1,
            "round {round}: {won:?}"
        );
        let (a, b) = join(
            store.alert_close(&key, at(round * 10 + 1)),
            store.alert_close(&key, at(round * 10 + 1)),
        )
        .await;
        let closed = [a.unwrap(), b.unwrap()];
        assert_eq!(
            closed.iter().filter(|c| **c).count(),
            1,
            "round {round}: {closed:?}"
        );
    }
}

/// Deliveries come back as recorded, newest first, limited; long fields clipped.
pub async fn alert_deliveries_round_trip_newest_first<S: Store>(store: S) {
    use crate::alert::{AlertDelivery, DeliveryOutcome};
    assert!(store.alert_delivery_list(10).await.unwrap().is_empty());
    let d = |n: i64, outcome| AlertDelivery {
        id: None,
        at: at(n),
        node: "node-a".into(),
        channel: "ops-mail".into(),
        key: alert_key("job:nightly", "failed"),
        kind: "firing".into(),
        run: Some(n),
        outcome,
        detail: format!("delivery {n} 作业"),
    };
    let first = store
        .alert_delivery_add(&d(1, DeliveryOutcome::Sent))
        .await
        .unwrap();
    let second = store
        .alert_delivery_add(&d(2, DeliveryOutcome::Failed))
        .await
        .unwrap();
    assert!(second > first, "{first} {second}");
    let mut long = d(3, DeliveryOutcome::Suppressed);
    long.run = None;
    long.detail = "x".repeat(3000);
    long.channel = "c".repeat(300);
    store.alert_delivery_add(&long).await.unwrap();
    let listed = store.alert_delivery_list(10).await.unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(
        listed[0].detail.chars().count(),
        crate::alert::limits::DETAIL
    );
    assert_eq!(
        listed[0].channel.chars().count(),
        crate::alert::limits::NAME
    );
    assert_eq!(listed[0].run, None);
    assert_eq!(listed[0].outcome, DeliveryOutcome::Suppressed);
    let mut want = d(2, DeliveryOutcome::Failed);
    want.id = Some(second);
    assert_eq!(listed[1], want);
    assert_eq!(listed[2].id, Some(first));
    assert_eq!(store.alert_delivery_list(1).await.unwrap().len(), 1);
}

/// A skipped run keeps its reason and detail, takes the (job, fire time) key, and a claim of
/// that fire runs nothing but still advances next fire.
pub async fn skipped_runs_keep_reason_and_unique_key<S: Store>(store: S) {
    let job = insert(&store, every_minute("minutely")).await;
    let id = job.id.expect("id");
    let skip = Run::skipped(
        id,
        t0(),
        SkipReason::Misfire,
        Some("late by 2h".into()),
        at(1),
    );
    let stored = store
        .run_insert_skipped(&skip)
        .await
        .expect("insert skipped");
    assert!(stored.id.is_some());
    assert_eq!(stored.state, RunState::Skipped);
    assert_eq!(stored.skip_reason, Some(SkipReason::Misfire));
    assert_eq!(stored.error.as_deref(), Some("late by 2h"));
    assert_eq!(stored.finished_at, Some(at(1)));
    assert_eq!(
        store.run_get(stored.id.expect("id")).await.expect("get"),
        Some(stored.clone())
    );
    let e = store.run_insert_skipped(&skip).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "the key is taken: {e}");
    let e = store
        .run_insert_skipped(&Run::pending(id, at(60), at(1)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Invalid, "not a skipped run: {e}");
    let ghost = Run::skipped(JobId(id.0 + 1000), t0(), SkipReason::Overlap, None, at(1));
    let e = store.run_insert_skipped(&ghost).await.unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::NotFound,
        "skipped run of a missing job: {e}"
    );
    assert!(
        claim_all(&store, at(2)).await.is_empty(),
        "a skipped fire is not claimed"
    );
    let after = store.job_get(id).await.expect("get").expect("job");
    assert_eq!(after.next_fire, Some(at(60)), "next fire still advances");
    let runs = store
        .run_list(&RunFilter {
            job: Some(id),
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(runs, vec![stored], "one run for the fire");
}

/// A claim that advances next fire past a DST-gap skip (gap policy `skip`) records the skip as
/// a skipped run with reason `dst_gap`, so nothing is skipped silently.
pub async fn claim_records_dst_gap_skips<S: Store>(store: S) {
    let ts = |s: &str| -> Timestamp { s.parse().expect("a valid instant") };
    let rule = Rule::Cron(CronExpr::parse("30 2 * * *").expect("cron"));
    let zone = Zone::get("Europe/Berlin").expect("zone");
    let schedule = Schedule::new(rule, zone).with_dst(DstPolicy {
        gap: GapPolicy::Skip,
        ..DstPolicy::default()
    });
    let mut job = manual("berlin 02:30").with_schedule(schedule);
    // 2026-03-28 02:30 CET; the next night's 02:30 does not exist in Berlin.
    job.next_fire = Some(ts("2026-03-28T01:30:00Z"));
    let id = insert(&store, job).await.id.expect("id");
    let got = claim_all(&store, ts("2026-03-28T01:30:00Z")).await;
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].job.next_fire,
        Some(ts("2026-03-30T00:30:00Z")),
        "next fire skips the gap night"
    );
    let runs = store
        .run_list(&RunFilter {
            job: Some(id),
            state: Some(RunState::Skipped),
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(runs.len(), 1, "the gap night is recorded");
    assert_eq!(runs[0].skip_reason, Some(SkipReason::DstGap));
    assert_eq!(
        runs[0].fire_time,
        ts("2026-03-29T01:00:00Z"),
        "at the gap's end"
    );
}

/// A job fires only inside its validity window: the claim's advance stops at `expires_at`
/// (the job has no next fire, and is expired), a next fire before `effective_from` (the window
/// moved after it was stored) is recorded skipped `outside_validity` and the job jumps to the
/// window's first fire, and a fire at or after the expiry is recorded, never run.
pub async fn claims_keep_inside_the_validity_window<S: Store>(store: S) {
    let skipped = |job| {
        let store = &store;
        async move {
            store
                .run_list(&RunFilter {
                    job: Some(job),
                    state: Some(RunState::Skipped),
                    ..RunFilter::default()
                })
                .await
                .expect("list")
        }
    };
    // Expires at +90 s: fires at 0 and 60 run, 120 is never due.
    let mut ending = every_minute("ending");
    ending.expires_at = Some(at(90));
    let ending = insert(&store, ending).await;
    let first = claim_all(&store, t0()).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].job.next_fire, Some(at(60)));
    let second = claim_all(&store, at(60)).await;
    assert_eq!(second.len(), 1, "the last fire inside the window runs");
    assert_eq!(
        second[0].job.next_fire, None,
        "no fire at or after the expiry"
    );
    let stored = store
        .job_get(ending.id.expect("id"))
        .await
        .expect("get")
        .expect("job");
    assert_eq!(stored.next_fire, None);
    assert!(stored.is_expired(at(90)) && !stored.is_expired(at(89)));
    assert!(claim_all(&store, at(600)).await.is_empty());

    // Effective from +150 s while the stored next fire is t0: recorded, then the window's
    // first fire (180) is the next one.
    let mut later = every_minute("later");
    later.effective_from = Some(at(150));
    let later = insert(&store, later).await;
    let id = later.id.expect("id");
    assert!(
        claim_all(&store, at(0)).await.is_empty(),
        "a fire before the window does not run"
    );
    let runs = skipped(id).await;
    assert_eq!(runs.len(), 1, "and is recorded");
    assert_eq!(runs[0].skip_reason, Some(SkipReason::OutsideValidity));
    assert_eq!(runs[0].fire_time, t0());
    assert!(
        runs[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("effective from")),
        "the record says why: {:?}",
        runs[0].error
    );
    let job = store.job_get(id).await.expect("get").expect("job");
    assert_eq!(job.next_fire, Some(at(180)), "the window's first fire");
    assert_eq!(job.first_fire_after(at(0)), Some(at(180)));
    let got = claim_all(&store, at(180)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].run.fire_time, at(180));

    // A fire stored at or after the expiry (the expiry moved earlier) is recorded only.
    let mut expired = every_minute("expired");
    expired.expires_at = Some(at(-60));
    expired.effective_from = Some(at(-120));
    let expired = insert(&store, expired).await;
    let id = expired.id.expect("id");
    assert!(claim_all(&store, at(0)).await.is_empty());
    let runs = skipped(id).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].skip_reason, Some(SkipReason::OutsideValidity));
    assert!(
        runs[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("expired at"))
    );
    let job = store.job_get(id).await.expect("get").expect("job");
    assert_eq!(job.next_fire, None, "an expired job has no next fire");
    assert_eq!(job.first_fire_after(at(0)), None);
}

fn pause_by(by: &str, now: Timestamp) -> Pause {
    Pause {
        at: now,
        by: by.to_string(),
        reason: Some("line maintenance".to_string()),
    }
}

/// A paused job is not due, not claimed and not waited for; a second pause and a trigger are
/// refused; on resume its misfire policy decides: the on-time fire runs, the missed ones are
/// recorded skipped with reason `paused` naming who paused and why.
pub async fn paused_jobs_are_held_and_resume_per_their_misfire_policy<S: Store>(store: S) {
    let job = insert(&store, every_minute("sync")).await;
    let id = job.id.expect("id");
    let held = store
        .pause(&PauseTarget::Job(id), &pause_by("ops", at(-10)))
        .await
        .expect("pause");
    assert_eq!(held, [id]);
    let stored = store.job_get(id).await.expect("get").expect("job");
    assert_eq!(stored.next_fire, None, "its next fire is kept aside");
    assert!(
        store
            .job_due(at(600), 10, &[])
            .await
            .expect("due")
            .is_empty()
    );
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        None
    );
    assert!(
        claim_all(&store, at(600)).await.is_empty(),
        "nothing claimed"
    );
    let (target, p) = store
        .job_paused(id)
        .await
        .expect("paused?")
        .expect("paused");
    assert_eq!(target, PauseTarget::Job(id));
    assert_eq!((p.by.as_str(), p.at), ("ops", at(-10)));
    let again = store
        .pause(&PauseTarget::Job(id), &pause_by("ops", at(0)))
        .await
        .expect_err("paused twice");
    assert_eq!(again.kind(), StoreErrorKind::Conflict);
    assert!(again.message().contains("already paused by ops"), "{again}");
    let trigger = store
        .job_set_next_fire(id, None, Some(at(5)))
        .await
        .expect_err("a trigger of a paused job");
    assert_eq!(trigger.kind(), StoreErrorKind::Conflict);
    assert!(trigger.message().contains("is paused"), "{trigger}");
    // An edit while paused keeps it held, with the recomputed next fire aside.
    let mut edited = stored.clone();
    edited.description = Some("edited while paused".into());
    edited.next_fire = Some(t0());
    let edited = store.job_update(&edited, at(1)).await.expect("update");
    assert_eq!(edited.next_fire, None);
    assert_eq!(
        store.pause_list().await.expect("list").len(),
        1,
        "the job's own pause"
    );

    let resumed = store
        .resume(&PauseTarget::Job(id), at(330))
        .await
        .expect("resume");
    assert_eq!(resumed.jobs, [id]);
    assert_eq!(resumed.skipped, 5, "0 … 240 missed; 300 is on time");
    let skipped = store
        .run_list(&RunFilter {
            job: Some(id),
            state: Some(RunState::Skipped),
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(skipped.len(), 5);
    for r in &skipped {
        assert_eq!(r.skip_reason, Some(SkipReason::Paused));
        let e = r.error.as_deref().unwrap_or_default();
        assert!(
            e.contains("paused by ops") && e.contains("line maintenance"),
            "{e}"
        );
    }
    let got = claim_all(&store, at(330)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].run.fire_time, at(300), "the on-time fire runs");
    assert!(store.job_paused(id).await.expect("paused?").is_none());
    let twice = store
        .resume(&PauseTarget::Job(id), at(331))
        .await
        .expect_err("resumed twice");
    assert_eq!(twice.kind(), StoreErrorKind::Conflict);
    assert!(twice.message().contains("is not paused"), "{twice}");
    let missing = store
        .pause(&PauseTarget::Job(JobId(987_654)), &pause_by("ops", at(0)))
        .await
        .expect_err("no such job");
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
}

/// A paused job's pending runs — a queued fire, a backfilled one, a continuation, a retry —
/// wait for its resume like its fires: nothing of a paused job starts, and the loop is not
/// woken for them (`next_due`).
pub async fn a_paused_jobs_pending_runs_wait_for_its_resume<S: Store>(store: S) {
    let mut job = manual("held-queue");
    job.next_fire = None;
    let id = insert(&store, job).await.id.expect("id");
    let queued = store
        .run_enqueue(id, at(10), at(10))
        .await
        .expect("enqueue");
    store
        .pause(&PauseTarget::Job(id), &pause_by("ops", at(11)))
        .await
        .expect("pause");
    assert!(
        claim_all(&store, at(600)).await.is_empty(),
        "a paused job's queued run is not claimed"
    );
    assert_eq!(
        store.next_due(&[], DueSet::All).await.expect("next_due"),
        None,
        "nothing due while the job is paused"
    );
    store
        .resume(&PauseTarget::Job(id), at(700))
        .await
        .expect("resume");
    let got = claim_all(&store, at(700)).await;
    assert_eq!(
        got.iter().map(|c| c.run.id).collect::<Vec<_>>(),
        [queued.id],
        "the queued run starts once the job is resumed"
    );
}

/// A group pause holds every member, present and future (a job added to the group, or moved
/// into it), and releases a job moved out; its resume keeps a member's own pause. A paused
/// node claims nothing while other nodes do. Unknown groups and nodes are NotFound.
pub async fn group_and_node_pauses_hold_members_and_claims<S: Store>(store: S) {
    let member = |name: &str| {
        let mut j = every_minute(name);
        j.group = Some("nightly".to_string());
        j
    };
    let a = insert(&store, member("a")).await.id.expect("id");
    let b = insert(&store, member("b")).await.id.expect("id");
    let free = insert(&store, every_minute("free")).await.id.expect("id");
    let unknown = store
        .pause(
            &PauseTarget::Group("nobody".into()),
            &pause_by("ops", at(0)),
        )
        .await
        .expect_err("a group without jobs");
    assert_eq!(unknown.kind(), StoreErrorKind::NotFound);
    let mut held = store
        .pause(
            &PauseTarget::Group("nightly".into()),
            &pause_by("ops", at(-5)),
        )
        .await
        .expect("pause the group");
    held.sort();
    assert_eq!(held, [a, b]);
    // b is also paused on its own: the group's resume leaves it held.
    store
        .pause(&PauseTarget::Job(b), &pause_by("lead", at(-4)))
        .await
        .expect("pause b");
    let later = insert(&store, member("later")).await;
    assert_eq!(
        later.next_fire, None,
        "a job added to a paused group is held"
    );
    let later = later.id.expect("id");
    let (target, _) = store.job_paused(later).await.expect("?").expect("held");
    assert_eq!(target, PauseTarget::Group("nightly".into()));
    let got = claim_all(&store, t0()).await;
    assert_eq!(
        got.iter().map(|c| c.run.job_id).collect::<Vec<_>>(),
        [free],
        "only the job outside the group"
    );
    // Moved out of the group: released, its fire due again.
    let mut moved = store.job_get(a).await.expect("get").expect("job");
    moved.group = None;
    let moved = store.job_update(&moved, at(1)).await.expect("update");
    assert_eq!(
        moved.next_fire,
        Some(t0()),
        "released with its kept next fire"
    );
    let got = claim_all(&store, at(1)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].run.job_id, a);

    let resumed = store
        .resume(&PauseTarget::Group("nightly".into()), at(10))
        .await
        .expect("resume the group");
    assert_eq!(resumed.jobs, [later], "b keeps its own pause");
    assert!(store.job_paused(b).await.expect("?").is_some());
    let not_paused = store
        .resume(&PauseTarget::Group("nightly".into()), at(11))
        .await
        .expect_err("not paused");
    assert_eq!(not_paused.kind(), StoreErrorKind::NotFound);

    // Nodes.
    register(&store, "node-a", &life("node-a"), at(0), None).await;
    register(&store, "node-b", &life("node-b"), at(0), None).await;
    let ghost = store
        .pause(&PauseTarget::Node(node("node-z")), &pause_by("ops", at(0)))
        .await
        .expect_err("a node never registered");
    assert_eq!(ghost.kind(), StoreErrorKind::NotFound);
    store
        .pause(&PauseTarget::Node(node("node-a")), &pause_by("ops", at(20)))
        .await
        .expect("pause node-a");
    let p = store
        .node_paused(&node("node-a"))
        .await
        .expect("?")
        .expect("paused");
    assert_eq!(p.by, "ops");
    assert!(
        store
            .run_claim_due(&claim("node-a", at(60), 10))
            .await
            .expect("claim")
            .is_empty(),
        "a paused node claims nothing"
    );
    let other = store
        .run_claim_due(&claim("node-b", at(60), 10))
        .await
        .expect("claim");
    assert!(!other.is_empty(), "another node claims the fires");
    store
        .resume(&PauseTarget::Node(node("node-a")), at(70))
        .await
        .expect("resume node-a");
    assert!(
        store
            .node_paused(&node("node-a"))
            .await
            .expect("?")
            .is_none()
    );
    assert!(
        !store
            .run_claim_due(&claim("node-a", at(120), 10))
            .await
            .expect("claim")
            .is_empty(),
        "claims again"
    );
}

fn grouped(name: &str, group: &str) -> JobDef {
    let mut j = every_minute(name);
    j.group = Some(group.to_string());
    j
}

/// Every run of `job`, oldest fire first.
async fn runs_of<S: Store>(store: &S, job: JobId) -> Vec<Run> {
    let mut runs = store
        .run_list(&RunFilter {
            job: Some(job),
            limit: 1000,
            ..RunFilter::default()
        })
        .await
        .expect("list");
    runs.reverse();
    runs
}

/// A member whose run failed holds the group's next time point: every member's fire is
/// recorded skipped, reason `group`, naming the member and its run, until that member runs
/// again successfully (a trigger, which the hold does not stop); then the group runs again.
pub async fn a_failed_group_member_holds_the_group_until_it_succeeds_again<S: Store>(store: S) {
    let a = insert(&store, grouped("extract", "etl"))
        .await
        .id
        .expect("id");
    let b = insert(&store, grouped("load", "etl")).await.id.expect("id");
    let free = insert(&store, every_minute("free")).await.id.expect("id");
    let first = claim_all(&store, t0()).await;
    assert_eq!(first.len(), 3);
    let run_of = |job| {
        first
            .iter()
            .find(|c| c.run.job_id == job)
            .expect("claimed")
            .run
            .clone()
    };
    let failed_run = finish(&store, &run_of(a), failed(), at(10)).await;
    assert_eq!(failed_run.state, RunState::Failed);
    let ok = RunEvent::Succeeded { result_json: None };
    finish(&store, &run_of(b), ok.clone(), at(10)).await;
    finish(&store, &run_of(free), ok.clone(), at(10)).await;

    let second = claim_all(&store, at(60)).await;
    assert_eq!(
        second.iter().map(|c| c.run.job_id).collect::<Vec<_>>(),
        [free],
        "only the job outside the held group runs"
    );
    let failed_id = failed_run.id.expect("id");
    for job in [a, b] {
        let runs = runs_of(&store, job).await;
        let held = runs.last().expect("a run at 60");
        assert_eq!(held.fire_time, at(60));
        assert_eq!(held.state, RunState::Skipped);
        assert_eq!(held.skip_reason, Some(SkipReason::Group));
        let text = held.error.clone().unwrap_or_default();
        assert!(
            text.contains("member extract") && text.contains(&format!("run {failed_id}")),
            "the skip names the member and its run: {text}"
        );
    }
    let status = store.group_status("etl", at(61)).await.expect("status");
    let hold = status.hold.expect("held");
    assert_eq!((hold.member.as_str(), hold.run), ("extract", failed_id));
    assert_eq!(status.members.len(), 2);
    // The skips of the hold do not prolong it, and a failure still holds at the next point.
    claim_all(&store, at(120)).await;
    assert_eq!(
        runs_of(&store, b).await.last().expect("run").skip_reason,
        Some(SkipReason::Group)
    );

    // A trigger of the failed member runs (it is how the hold ends) and succeeds.
    store
        .job_set_next_fire(a, Some(at(180)), Some(at(150)))
        .await
        .expect("trigger");
    let rerun = claim_all(&store, at(150)).await;
    assert_eq!(rerun.len(), 1, "the trigger runs despite the hold");
    assert_eq!(rerun[0].run.job_id, a);
    finish(&store, &rerun[0].run, ok, at(155)).await;
    assert!(
        store
            .group_status("etl", at(156))
            .await
            .expect("status")
            .hold
            .is_none()
    );
    let released = claim_all(&store, at(180)).await;
    let mut jobs: Vec<JobId> = released.iter().map(|c| c.run.job_id).collect();
    jobs.sort();
    assert_eq!(jobs, [a, b, free], "the group runs again");
}

/// `takt group resume` releases a failure hold (failures finished by then hold nothing), with
/// or without a pause of the group; a group neither paused nor held is NotFound. Group
/// definitions refuse unknown groups and a zero limit.
pub async fn a_group_resume_releases_a_failure_hold<S: Store>(store: S) {
    let a = insert(&store, grouped("a", "line")).await.id.expect("id");
    let b = insert(&store, grouped("b", "line")).await.id.expect("id");
    let unknown = store
        .group_set("nobody", Some(2))
        .await
        .expect_err("unknown group");
    assert_eq!(unknown.kind(), StoreErrorKind::NotFound, "{unknown}");
    let zero = store.group_set("line", Some(0)).await.expect_err("zero");
    assert_eq!(zero.kind(), StoreErrorKind::Invalid, "{zero}");
    let missing = store
        .group_status("nobody", at(0))
        .await
        .expect_err("unknown");
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
    let neither = store
        .resume(&PauseTarget::Group("line".into()), at(1))
        .await
        .expect_err("neither paused nor held");
    assert_eq!(neither.kind(), StoreErrorKind::NotFound, "{neither}");

    let first = claim_all(&store, t0()).await;
    for c in &first {
        let event = if c.run.job_id == a {
            RunEvent::TimedOut {
                error: "slow".into(),
            }
        } else {
            RunEvent::Succeeded { result_json: None }
        };
        finish(&store, &c.run, event, at(10)).await;
    }
    assert!(claim_all(&store, at(60)).await.is_empty(), "held");
    // Paused as well: the resume ends both.
    store
        .pause(&PauseTarget::Group("line".into()), &pause_by("ops", at(70)))
        .await
        .expect("pause");
    let listed = store.group_list(at(71)).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert!(listed[0].pause.is_some() && listed[0].hold.is_some());
    let resumed = store
        .resume(&PauseTarget::Group("line".into()), at(100))
        .await
        .expect("resume");
    let released = resumed.released.expect("the failure hold was released");
    assert_eq!(released.member.as_str(), "a");
    assert_eq!(released.state, RunState::TimedOut);
    let status = store.group_status("line", at(101)).await.expect("status");
    assert!(status.hold.is_none() && status.pause.is_none());
    let mut jobs: Vec<JobId> = claim_all(&store, at(120))
        .await
        .iter()
        .map(|c| c.run.job_id)
        .collect();
    jobs.sort();
    assert_eq!(jobs, [a, b], "the group runs again after the resume");
}

/// A group's `max_running` counts its members' running runs on every node: two claimers at
/// once start at most that many; the fires over it are stored pending (never skipped) and
/// start, in claim order, as slots free.
pub async fn group_max_running_holds_under_concurrent_claimers<S: Store + Clone>(store: S) {
    let mut ids = Vec::new();
    for name in ["m1", "m2", "m3", "m4", "m5"] {
        ids.push(insert(&store, grouped(name, "press")).await.id.expect("id"));
    }
    let def = store.group_set("press", Some(2)).await.expect("set");
    assert_eq!(def.max_running, Some(2));
    let (x, y) = (store.clone(), store.clone());
    let (cx, cy) = join(
        x.run_claim_due(&claim("node-a", t0(), 10)),
        y.run_claim_due(&claim("node-b", t0(), 10)),
    )
    .await;
    let started: Vec<ClaimedRun> = cx
        .expect("claim")
        .into_iter()
        .chain(cy.expect("claim"))
        .collect();
    assert_eq!(started.len(), 2, "at most max_running start");
    let status = store.group_status("press", at(1)).await.expect("status");
    assert_eq!((status.running, status.def.max_running), (2, Some(2)));
    let mut waiting = Vec::new();
    for id in &ids {
        for r in runs_of(&store, *id).await {
            assert_ne!(r.state, RunState::Skipped, "a full group never skips");
            if r.state == RunState::Pending {
                waiting.push(r.job_id);
            }
        }
    }
    assert_eq!(waiting.len(), 3, "the fires over the limit wait");
    assert!(claim_all(&store, at(2)).await.is_empty(), "no slot yet");
    let ok = RunEvent::Succeeded { result_json: None };
    finish(&store, &started[0].run, ok.clone(), at(5)).await;
    let next = claim_all(&store, at(6)).await;
    assert_eq!(next.len(), 1, "one slot freed");
    assert_eq!(
        next[0].run.job_id, waiting[0],
        "the first waiting run, in claim order"
    );
    assert_eq!(next[0].run.fire_time, t0());
    // No limit: the rest start.
    store.group_set("press", None).await.expect("unset");
    assert_eq!(claim_all(&store, at(7)).await.len(), 2);
}

/// A cancel of a pending run cancels it at once and records who asked; a cancel of a running
/// run is a request that only the node running it sees (asked twice, the first request
/// stands); a final run, an unknown run and an anonymous cancel are refused.
pub async fn cancel_requests_reach_the_node_running_the_run<S: Store>(store: S) {
    let job = insert(&store, every_minute("a")).await.id.expect("id");
    let running = claim_one(&store, "node-a", t0()).await.run;
    let rid = running.id.expect("id");
    let queued = store
        .run_enqueue(job, at(30), at(30))
        .await
        .expect("enqueue");
    let qid = queued.id.expect("id");

    match store.run_cancel(qid, "ops", at(31)).await.expect("cancel") {
        CancelOutcome::Cancelled(run) => {
            assert_eq!(run.state, RunState::Cancelled);
            let e = run.error.unwrap_or_default();
            assert!(e.contains("requested by ops"), "{e}");
        }
        other => panic!("a pending run is cancelled at once, got {other:?}"),
    }
    let stored = store.run_get(qid).await.expect("get").expect("run");
    assert_eq!(stored.state, RunState::Cancelled);
    assert_eq!(
        store
            .cancel_request_of(qid)
            .await
            .expect("request")
            .map(|r| r.by),
        Some("ops".to_string())
    );

    match store.run_cancel(rid, "ops", at(32)).await.expect("cancel") {
        CancelOutcome::Requested { node: n, request } => {
            assert_eq!(n, Some(node("node-a")));
            assert_eq!((request.by.as_str(), request.at), ("ops", at(32)));
        }
        other => panic!("a running run gets a request, got {other:?}"),
    }
    let for_a = store.cancel_requests(&node("node-a")).await.expect("list");
    assert_eq!(for_a.iter().map(|r| r.run).collect::<Vec<_>>(), [rid]);
    assert!(
        store
            .cancel_requests(&node("node-b"))
            .await
            .expect("list")
            .is_empty(),
        "another node's runs are not its business"
    );
    assert_eq!(
        store.run_get(rid).await.expect("get").expect("run").state,
        RunState::Running,
        "only the node running it stops it"
    );
    match store.run_cancel(rid, "lead", at(33)).await.expect("again") {
        CancelOutcome::Requested { request, .. } => assert_eq!(request.by, "ops"),
        other => panic!("{other:?}"),
    }
    finish(
        &store,
        &running,
        RunEvent::Cancelled {
            reason: CancelReason::Requested,
        },
        at(34),
    )
    .await;
    assert!(
        store
            .cancel_requests(&node("node-a"))
            .await
            .expect("list")
            .is_empty(),
        "a finished run is no longer asked about"
    );
    let done = store
        .run_cancel(rid, "ops", at(35))
        .await
        .expect_err("final");
    assert_eq!(done.kind(), StoreErrorKind::Conflict);
    assert!(done.message().contains("already cancelled"), "{done}");
    let missing = store
        .run_cancel(RunId(987_654), "ops", at(35))
        .await
        .expect_err("unknown");
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
    let anonymous = store
        .run_cancel(rid, " ", at(35))
        .await
        .expect_err("anonymous");
    assert_eq!(anonymous.kind(), StoreErrorKind::Invalid);
}

/// `run_list` filters by job and state and returns the newest fire first, up to `limit`.
pub async fn run_list_filters_newest_first<S: Store>(store: S) {
    let a = insert(&store, manual("a")).await.id.expect("id");
    let b = insert(&store, manual("b")).await.id.expect("id");
    for (job, secs) in [(a, 0), (a, 120), (b, 60), (a, 60)] {
        let r = Run::skipped(job, at(secs), SkipReason::Paused, None, at(secs));
        store.run_insert_skipped(&r).await.expect("insert");
    }
    let list = |job, state, limit| {
        let filter = RunFilter {
            job,
            state,
            limit,
            ..RunFilter::default()
        };
        let store = &store;
        async move {
            store
                .run_list(&filter)
                .await
                .expect("list")
                .iter()
                .map(|r| (r.job_id, r.fire_time))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        list(Some(a), None, 10).await,
        [(a, at(120)), (a, at(60)), (a, t0())],
        "newest first, one job"
    );
    assert_eq!(
        list(None, None, 2).await,
        [(a, at(120)), (a, at(60))],
        "limit; equal fire times: newest id first"
    );
    assert_eq!(list(None, None, 2).await.len(), 2, "limit");
    assert_eq!(
        list(None, Some(RunState::Running), 10).await,
        [],
        "state filter"
    );
    assert_eq!(
        list(Some(b), Some(RunState::Skipped), 10).await,
        [(b, at(60))]
    );
}

/// Job pages: by name ascending whatever the insertion order, each job exactly once, `next`
/// only while more follow (also after a page that ends exactly at the last job), a cursor that
/// names no job (or a deleted one), every filter alone and with paging, an empty store, and a
/// limit outside 1..=MAX_LIMIT refused as Invalid.
pub async fn job_pages_cover_every_job_once_by_name<S: Store>(store: S) {
    let page = |q: JobQuery| {
        let store = &store;
        async move { store.job_page(&q).await.expect("job page") }
    };
    let names = |p: &JobPage| -> Vec<String> {
        p.jobs.iter().map(|j| j.name.as_str().to_string()).collect()
    };
    let name = |n: &str| JobName::new(n).expect("name");
    assert_eq!(
        page(JobQuery::first(10)).await,
        JobPage {
            jobs: vec![],
            next: None
        },
        "job_page: an empty store has one empty last page"
    );
    for limit in [0, JobQuery::MAX_LIMIT + 1] {
        let e = store
            .job_page(&JobQuery::first(limit))
            .await
            .expect_err("job_page: a limit out of range is refused");
        assert_eq!(e.kind(), StoreErrorKind::Invalid, "{e}");
        assert!(
            e.to_string()
                .contains(&format!("job page limit {limit} is out of range")),
            "{e}"
        );
    }
    // Inserted out of name order, so that id order is not name order. Names whose order is
    // the same in every collation (no case or punctuation differences at the deciding place).
    let shape = [
        ("job07", true, Some("g1"), None, "conformance::noop"),
        (
            "job02",
            false,
            Some("g1"),
            Some("east"),
            "conformance::noop",
        ),
        ("job10", true, None, None, "other::work"),
        ("job01", true, Some("g2"), Some("east"), "conformance::noop"),
        ("job05", true, Some("g1"), None, "other::work"),
        ("job03", true, None, None, "conformance::noop"),
        ("job09", false, None, Some("west"), "conformance::noop"),
        ("job04Nightly", true, Some("g1"), None, "conformance::noop"),
        ("job08", true, Some("g2"), None, "other::work"),
        ("job06", true, None, Some("east"), "conformance::noop"),
    ];
    for (n, enabled, group, tag, handler) in shape {
        let mut job = manual(n);
        job.handler_type = handler.to_string();
        job.enabled = enabled;
        job.group = group.map(str::to_string);
        job.node_tag = tag.map(str::to_string);
        insert(&store, job).await;
    }
    let mut sorted: Vec<&str> = shape.iter().map(|s| s.0).collect();
    sorted.sort_unstable();
    // Every page size: pages in order, each job once, `next` the last name until the end.
    for limit in [1, 3, 5, 9, 10, 11, JobQuery::MAX_LIMIT] {
        let mut seen = Vec::new();
        let mut q = JobQuery::first(limit);
        let mut pages = 0;
        loop {
            let p = page(q.clone()).await;
            pages += 1;
            assert!(
                p.jobs.len() <= limit,
                "job_page: at most the limit ({limit})"
            );
            for job in &p.jobs {
                let stored = store
                    .job_get_by_name(&job.name)
                    .await
                    .expect("get")
                    .expect("listed job exists");
                assert_eq!(job, &stored, "job_page: whole stored jobs");
            }
            seen.extend(names(&p));
            match q.next_of(&p) {
                Some(next) => {
                    assert_eq!(p.jobs.len(), limit, "job_page: only a full page has a next");
                    assert_eq!(
                        p.next.as_ref(),
                        p.jobs.last().map(|j| &j.name),
                        "job_page: next is the last name of the page"
                    );
                    q = next;
                }
                None => break,
            }
            assert!(pages <= sorted.len(), "job_page: paging must end");
        }
        assert_eq!(
            seen, sorted,
            "job_page: pages of {limit} list every job once by name"
        );
        assert_eq!(
            pages,
            sorted.len().div_ceil(limit),
            "job_page: pages of {limit} over {} jobs, no empty last page",
            sorted.len()
        );
    }
    // A cursor is a position, not a row: a name no job has, and a job deleted since.
    let q = JobQuery {
        after: Some(name("job055")),
        ..JobQuery::first(2)
    };
    let p = page(q).await;
    assert_eq!(
        names(&p),
        ["job06", "job07"],
        "job_page: after a name no job has"
    );
    assert_eq!(p.next, Some(name("job07")));
    let gone = store
        .job_get_by_name(&name("job07"))
        .await
        .expect("get")
        .expect("job07");
    store
        .job_delete(gone.id.expect("id"))
        .await
        .expect("delete");
    let p = page(JobQuery {
        after: p.next,
        ..JobQuery::first(2)
    })
    .await;
    assert_eq!(
        names(&p),
        ["job08", "job09"],
        "job_page: after a deleted job"
    );
    sorted.retain(|n| *n != "job07");
    // Filters, each alone (one page of everything that matches).
    let only = |f: fn(&mut JobQuery)| {
        let mut q = JobQuery::first(JobQuery::MAX_LIMIT);
        f(&mut q);
        q
    };
    let cases: [(&str, JobQuery, &[&str]); 9] = [
        (
            "enabled",
            only(|q| q.enabled = Some(false)),
            &["job02", "job09"],
        ),
        (
            "group",
            only(|q| q.group = Some("g1".into())),
            &["job02", "job04Nightly", "job05"],
        ),
        (
            "node_tag",
            only(|q| q.node_tag = Some("east".into())),
            &["job01", "job02", "job06"],
        ),
        (
            "handler_prefix",
            only(|q| q.handler_prefix = Some("other::".into())),
            &["job05", "job08", "job10"],
        ),
        (
            "handler_prefix is a prefix",
            only(|q| q.handler_prefix = Some("::work".into())),
            &[],
        ),
        (
            "name_contains ignores case",
            only(|q| q.name_contains = Some("NIGHT".into())),
            &["job04Nightly"],
        ),
        (
            "name_contains matches inside",
            only(|q| q.name_contains = Some("b1".into())),
            &["job10"],
        ),
        (
            "empty text filters pass everything",
            only(|q| {
                q.name_contains = Some(String::new());
                q.handler_prefix = Some(String::new());
            }),
            &sorted,
        ),
        (
            "filters together",
            only(|q| {
                q.enabled = Some(true);
                q.group = Some("g1".into());
                q.handler_prefix = Some("conformance::".into());
            }),
            &["job04Nightly"],
        ),
    ];
    for (what, q, want) in cases {
        let p = page(q).await;
        assert_eq!(names(&p), want, "job_page filter: {what}");
        assert_eq!(p.next, None, "job_page filter: {what}: one page");
    }
    // A filter with paging: the cursor moves over jobs that do not match.
    let mut q = JobQuery {
        enabled: Some(true),
        ..JobQuery::first(2)
    };
    let mut seen = Vec::new();
    loop {
        let p = page(q.clone()).await;
        seen.extend(names(&p));
        match q.next_of(&p) {
            Some(next) => q = next,
            None => break,
        }
    }
    let enabled: Vec<&str> = sorted
        .iter()
        .copied()
        .filter(|n| !["job02", "job09"].contains(n))
        .collect();
    assert_eq!(seen, enabled, "job_page: enabled jobs page by page");
}

/// `run_list` pages by cursor (the last run of a page) within a fire-time range, and a run
/// inserted between two pages — newer or older than the cursor — neither repeats nor hides
/// a run that existed when paging began.
pub async fn run_list_pages_by_cursor_and_fire_time_range<S: Store>(store: S) {
    let a = insert(&store, manual("a")).await.id.expect("id");
    let b = insert(&store, manual("b")).await.id.expect("id");
    // Ten runs over five fire times, two jobs sharing each: ties broken by id.
    for secs in [0, 60, 120, 180, 240] {
        for job in [a, b] {
            let r = Run::skipped(job, at(secs), SkipReason::Paused, None, at(secs));
            store.run_insert_skipped(&r).await.expect("insert");
        }
    }
    let all = store
        .run_list(&RunFilter {
            limit: 100,
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(all.len(), 10);
    let mut seen = Vec::new();
    let mut before = None;
    let mut page_no = 0;
    loop {
        let page = store
            .run_list(&RunFilter {
                before,
                limit: 3,
                ..RunFilter::default()
            })
            .await
            .expect("page");
        if page_no == 1 {
            // Between pages: a fire newer than everything, and one older than the cursor.
            for (job, secs) in [(a, 600), (b, 30)] {
                let r = Run::skipped(job, at(secs), SkipReason::Paused, None, at(secs));
                store
                    .run_insert_skipped(&r)
                    .await
                    .expect("insert meanwhile");
            }
        }
        page_no += 1;
        let Some(last) = page.last() else { break };
        before = RunCursor::of(last);
        seen.extend(page.iter().map(|r| r.id.expect("id")));
        if page.len() < 3 {
            break;
        }
    }
    let original: Vec<_> = all.iter().map(|r| r.id.expect("id")).collect();
    let seen_original: Vec<_> = seen
        .iter()
        .copied()
        .filter(|id| original.contains(id))
        .collect();
    assert_eq!(seen_original, original, "every original run once, in order");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no run twice across pages");
    let fires: Vec<_> = seen
        .iter()
        .filter(|id| !original.contains(id))
        .map(|id| id.0)
        .collect();
    assert_eq!(
        fires.len(),
        1,
        "the older run inserted meanwhile shows in its place; the newer one sorts before the \
         pages already read: {fires:?}"
    );
    let range = store
        .run_list(&RunFilter {
            job: Some(a),
            fire_from: Some(at(60)),
            fire_to: Some(at(180)),
            limit: 100,
            ..RunFilter::default()
        })
        .await
        .expect("range")
        .iter()
        .map(|r| r.fire_time)
        .collect::<Vec<_>>();
    assert_eq!(
        range,
        [at(120), at(60)],
        "from inclusive, to exclusive, one job"
    );
}

/// Tokens: unique names (a revoked token's name stays taken), listed by name, revocation
/// keeps the first time, an unknown name is NotFound; invalid hashes are refused.
pub async fn tokens_are_unique_by_name_and_revocable<S: Store>(store: S) {
    let hash = |c: char| std::iter::repeat_n(c, 64).collect::<String>();
    let new = |name: &str, role, c| NewToken {
        name: name.into(),
        role,
        sha256: hash(c),
        created_at: t0(),
    };
    let ops = store
        .token_insert(&new("ops", Role::Operator, 'a'))
        .await
        .expect("insert");
    assert_eq!(
        (ops.name.as_str(), ops.role, ops.revoked_at),
        ("ops", Role::Operator, None)
    );
    store
        .token_insert(&new("admin", Role::Admin, 'b'))
        .await
        .expect("insert");
    let taken = store
        .token_insert(&new("ops", Role::Viewer, 'c'))
        .await
        .expect_err("taken name");
    assert_eq!(taken.kind(), StoreErrorKind::Conflict);
    assert!(taken.message().contains("\"ops\""), "{taken}");
    let bad = store
        .token_insert(&NewToken {
            sha256: "plain-token".into(),
            ..new("x", Role::Viewer, 'd')
        })
        .await
        .expect_err("not a hash");
    assert_eq!(bad.kind(), StoreErrorKind::Invalid);
    let revoked = store.token_revoke("ops", at(60)).await.expect("revoke");
    assert_eq!(revoked.revoked_at, Some(at(60)));
    let again = store.token_revoke("ops", at(120)).await.expect("again");
    assert_eq!(again.revoked_at, Some(at(60)), "the first revocation stays");
    let missing = store
        .token_revoke("nobody", at(60))
        .await
        .expect_err("missing");
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
    let list = store.token_list().await.expect("list");
    let names: Vec<_> = list
        .iter()
        .map(|t| (t.name.as_str(), t.role, t.sha256.clone()))
        .collect();
    assert_eq!(
        names,
        [
            ("admin", Role::Admin, hash('b')),
            ("ops", Role::Operator, hash('a'))
        ]
    );
    assert_eq!(
        store
            .token_insert(&new("ops", Role::Viewer, 'e'))
            .await
            .expect_err("revoked name")
            .kind(),
        StoreErrorKind::Conflict
    );
}

/// Operator actions: every field kept, newest first, filtered by job name, limited; kept
/// when the job is deleted.
pub async fn operator_actions_are_listed_newest_first_per_job<S: Store>(store: S) {
    let job = insert(&store, manual("a")).await;
    let action = |i: i64, what: &str, job: Option<&str>| OperatorAction {
        id: 0,
        at: at(i),
        actor: "ops".into(),
        action: what.into(),
        job: job.map(Into::into),
        run: (i == 2).then_some(RunId(7)),
        detail: (i == 1).then(|| "fire 2026-01-01T00:00:00Z".into()),
    };
    for (i, what, job) in [
        (1, "trigger", Some("a")),
        (2, "cancel", Some("a")),
        (3, "plugin-reload", None),
        (4, "disable", Some("b")),
    ] {
        store
            .action_insert(&action(i, what, job))
            .await
            .expect("insert");
    }
    store.job_delete(job.id.expect("id")).await.expect("delete");
    let of_a = store.action_list(Some("a"), 10).await.expect("list");
    let strip = |v: &[OperatorAction]| {
        v.iter()
            .map(|a| OperatorAction { id: 0, ..a.clone() })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip(&of_a),
        [
            action(2, "cancel", Some("a")),
            action(1, "trigger", Some("a"))
        ]
    );
    assert!(of_a[0].id > of_a[1].id, "ids increase");
    let all = store.action_list(None, 3).await.expect("list");
    assert_eq!(
        all.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
        ["disable", "plugin-reload", "cancel"]
    );
}

/// Log lines come back in the order written, batch after batch, per run, paged by sequence
/// number.
pub async fn logs_are_ordered_and_batched<S: Store>(store: S) {
    insert(&store, manual("one")).await;
    insert(&store, manual("two")).await;
    let one = claim_one(&store, "node-a", t0()).await.run.id.expect("id");
    let two = claim_one(&store, "node-a", t0()).await.run.id.expect("id");
    let line = |i: i64, level| LogLine {
        at: at(i),
        level,
        message: format!("line {i}"),
    };
    store
        .log_append(
            one,
            &[
                line(1, LogLevel::Info),
                line(2, LogLevel::Debug),
                line(3, LogLevel::Warn),
            ],
        )
        .await
        .expect("append");
    store
        .log_append(two, &[line(100, LogLevel::Error)])
        .await
        .expect("append");
    store
        .log_append(one, &[])
        .await
        .expect("an empty batch is fine");
    store
        .log_append(one, &[line(4, LogLevel::Info), line(5, LogLevel::Trace)])
        .await
        .expect("append");
    let all = store.log_list(one, None, 100).await.expect("list");
    let messages: Vec<_> = all.iter().map(|(_, l)| l.message.as_str()).collect();
    assert_eq!(
        messages,
        ["line 1", "line 2", "line 3", "line 4", "line 5"],
        "in order"
    );
    assert_eq!(all[2].1, line(3, LogLevel::Warn), "lines round-trip");
    assert!(
        all.windows(2).all(|w| w[0].0 < w[1].0),
        "sequence numbers increase"
    );
    let page = store.log_list(one, Some(all[1].0), 2).await.expect("list");
    assert_eq!(page, all[2..4].to_vec(), "paged after a sequence number");
    let other = store.log_list(two, None, 100).await.expect("list");
    assert_eq!(other.len(), 1, "logs are per run");
    let missing = RunId(one.0 + 1000);
    let e = store
        .log_append(missing, &[line(1, LogLevel::Info)])
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::NotFound,
        "log of a missing run: {e}"
    );
}

/// Retention removes final runs finished before the cut-off and their logs, and nothing else
/// (pending and running runs stay however old).
pub async fn retention_purges_only_old_final_runs_and_their_logs<S: Store>(store: S) {
    let mut flaky = manual("flaky");
    flaky.retry = seed_retries(1);
    for j in [manual("old"), manual("new"), manual("running"), flaky] {
        insert(&store, j).await;
    }
    let old = claim_one(&store, "node-a", t0()).await.run;
    let new = claim_one(&store, "node-a", t0()).await.run;
    let running = claim_one(&store, "node-a", t0()).await.run;
    let pending = claim_one(&store, "node-a", t0()).await.run;
    let line = LogLine {
        at: t0(),
        level: LogLevel::Info,
        message: "hello".into(),
    };
    for r in [&old, &new, &running] {
        let id = r.id.expect("id");
        store
            .log_append(id, &[line.clone(), line.clone()])
            .await
            .expect("append");
    }
    finish(
        &store,
        &old,
        RunEvent::Succeeded { result_json: None },
        at(10),
    )
    .await;
    finish(&store, &new, failed(), at(100)).await;
    let pending = finish(&store, &pending, failed(), at(10)).await;
    assert_eq!(pending.state, RunState::Pending);
    let skipped_job = store
        .job_get(old.job_id)
        .await
        .expect("get")
        .expect("job")
        .id
        .expect("id");
    let skip = Run::skipped(skipped_job, at(-60), SkipReason::Misfire, None, at(5));
    store.run_insert_skipped(&skip).await.expect("insert");
    let counts = store.retention_purge(at(50)).await.expect("purge");
    assert_eq!(counts.runs, 2, "the old success and the old skip");
    assert_eq!(counts.log_lines, 2, "the old success's log");
    let gone = old.id.expect("id");
    assert_eq!(store.run_get(gone).await.expect("get"), None);
    assert!(
        store.run_attempts(gone).await.expect("attempts").is_empty(),
        "a purged run's attempts go with it"
    );
    assert_eq!(
        store
            .run_attempts(new.id.expect("id"))
            .await
            .expect("attempts")
            .len(),
        1,
        "a recent run keeps its attempts"
    );
    assert!(
        store
            .log_list(gone, None, 10)
            .await
            .expect("list")
            .is_empty()
    );
    for r in [&new, &running, &pending] {
        let id = r.id.expect("id");
        assert!(
            store.run_get(id).await.expect("get").is_some(),
            "run {id} ({}) must survive retention",
            r.state
        );
    }
    assert_eq!(
        store
            .log_list(new.id.expect("id"), None, 10)
            .await
            .expect("list")
            .len(),
        2,
        "a recent run keeps its log"
    );
    assert_eq!(
        store.retention_purge(at(50)).await.expect("purge"),
        super::PurgeCounts::default(),
        "purging again removes nothing"
    );
}

/// The attempt rows of run `id`, as (attempt, node, outcome, error, started, finished).
async fn attempt_rows<S: Store>(
    store: &S,
    id: RunId,
) -> Vec<(
    u32,
    String,
    Option<AttemptOutcome>,
    Option<String>,
    Timestamp,
    Option<Timestamp>,
)> {
    store
        .run_attempts(id)
        .await
        .expect("run_attempts")
        .into_iter()
        .map(|a: Attempt| {
            (
                a.attempt,
                a.node_id.0,
                a.outcome,
                a.error,
                a.started_at,
                a.finished_at,
            )
        })
        .collect()
}

/// Every attempt is a row: the claim begins it (node, life, start), the finish ends it with
/// its outcome and error (a retried attempt is failed), recovery ends it with the recovery's
/// reason (lease expired, node restarted), a retry is attempt 2 on whichever node claims it, a
/// refused stale finish leaves the rows alone — except that the late finish of a recovered
/// attempt records its real end, making a second execution visible — and deleting the job
/// removes them.
pub async fn attempts_are_begun_by_claims_and_ended_by_finishes_and_recovery<S: Store>(store: S) {
    let mut flaky = manual("flaky");
    flaky.retry = seed_retries(2);
    insert(&store, flaky).await;
    let first = claim_one(&store, "node-a", t0()).await.run;
    let id = first.id.expect("id");
    let got = store.run_attempts(id).await.expect("run_attempts");
    assert_eq!(got.len(), 1, "the claim begins attempt 1");
    assert_eq!(
        (
            got[0].run_id,
            got[0].job_id,
            got[0].fire_time,
            got[0].node_instance.clone()
        ),
        (id, first.job_id, first.fire_time, Some(life("node-a"))),
        "the attempt names its run, fire and node life"
    );
    assert_eq!(
        attempt_rows(&store, id).await,
        [(1, "node-a".into(), None, None, t0(), None)],
        "open while it runs"
    );
    let retry = finish(&store, &first, failed(), at(5)).await;
    assert_eq!((retry.state, retry.attempt), (RunState::Pending, 2));
    assert_eq!(
        attempt_rows(&store, id).await,
        [(
            1,
            "node-a".into(),
            Some(AttemptOutcome::Failed),
            Some("boom".into()),
            t0(),
            Some(at(5))
        )],
        "the finish ends it; a retried attempt is failed with its error"
    );
    // A finish of attempt 1 again is refused and changes no attempt.
    let stale = store
        .run_set_state_if_running(id, 1, &RunFinish::from_run(&retry, at(6)))
        .await;
    assert!(stale.is_err(), "a stale finish is refused");
    assert_eq!(attempt_rows(&store, id).await.len(), 1);

    let second = claim_one(&store, "node-b", at(20)).await.run;
    assert_eq!(second.attempt, 2);
    let lost = store
        .run_recover_expired(at(80), None)
        .await
        .expect("recover");
    assert_eq!(lost.len(), 1, "attempt 2's lease expired");
    let third = claim_one(&store, "node-a", at(200)).await.run;
    assert_eq!(third.attempt, 3);
    finish(
        &store,
        &third,
        RunEvent::Succeeded { result_json: None },
        at(201),
    )
    .await;
    assert_eq!(
        attempt_rows(&store, id).await,
        [
            (
                1,
                "node-a".into(),
                Some(AttemptOutcome::Failed),
                Some("boom".into()),
                t0(),
                Some(at(5))
            ),
            (
                2,
                "node-b".into(),
                Some(AttemptOutcome::LeaseExpired),
                Some(LEASE_EXPIRED.into()),
                at(20),
                Some(at(80))
            ),
            (
                3,
                "node-a".into(),
                Some(AttemptOutcome::Succeeded),
                None,
                at(200),
                Some(at(201))
            ),
        ],
        "three attempts: failed, lost lease (ended by the recovery), succeeded"
    );
    // Node-b never knew: it finishes attempt 2 at 210 s, after attempt 3 ran. Refused — and
    // the attempt's real end is recorded, so the fire shows as executed twice at once.
    let mut late = second.clone();
    late.apply(
        RunEvent::Succeeded { result_json: None },
        at(210),
        &seed_retries(2),
    )
    .expect("legal event");
    let refused = store
        .run_set_state_if_running(id, 2, &RunFinish::from_run(&late, at(210)))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::Conflict, "{refused}");
    let rows = store.run_attempts(id).await.expect("run_attempts");
    assert_eq!(
        (rows[1].outcome, rows[1].finished_at),
        (Some(AttemptOutcome::LeaseExpired), Some(at(210))),
        "the recovered attempt's real end"
    );
    assert!(
        rows[1]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("finished it at") && e.contains("succeeded")),
        "{:?}",
        rows[1].error
    );
    assert!(
        rows[1].overlaps(&rows[2], at(1000)),
        "two executions at once"
    );
    assert_eq!(
        rows[2].finished_at,
        Some(at(201)),
        "the run's own attempt is untouched"
    );
    let listed = store
        .attempts_between(None, t0(), at(1))
        .await
        .expect("attempts_between");
    assert_eq!(
        listed
            .iter()
            .map(|a| (a.run_id, a.attempt))
            .collect::<Vec<_>>(),
        [(id, 1), (id, 2), (id, 3)],
        "attempts by fire range, in order"
    );
    assert!(
        store
            .attempts_between(None, at(1), at(2))
            .await
            .expect("attempts_between")
            .is_empty(),
        "the range is by fire time, [from, to)"
    );

    // A restart ends the earlier life's attempt as node_restarted.
    insert(&store, manual("restarted")).await;
    let before = claim_one(&store, "node-c", at(300)).await.run;
    let rid = before.id.expect("id");
    let new_life = InstanceId("node-c-life-2".to_string());
    store
        .run_recover_expired(at(301), Some((&node("node-c"), &new_life)))
        .await
        .expect("recover");
    assert_eq!(
        attempt_rows(&store, rid).await,
        [(
            1,
            "node-c".into(),
            Some(AttemptOutcome::NodeRestarted),
            Some(NODE_RESTARTED.into()),
            at(300),
            Some(at(301))
        )],
        "a restart ends the attempt with its reason"
    );

    store.job_delete(first.job_id).await.expect("delete");
    assert!(
        store.run_attempts(id).await.expect("attempts").is_empty(),
        "a deleted job's attempts go with its runs"
    );
}

/// Every life of a node is kept as a session (start, last heartbeat, clean stop) after the
/// node's row moved on to a later life, and listed by the range in which it was up.
pub async fn node_sessions_record_every_life<S: Store>(store: S) {
    let (one, two) = (life("n"), InstanceId("n-life-2".to_string()));
    register(&store, "n", &one, t0(), None).await;
    store
        .lease_renew(&node("n"), &one, at(90), at(30))
        .await
        .expect("renew");
    store
        .node_stopped(&node("n"), &one, at(40))
        .await
        .expect("stop");
    register(&store, "n", &two, at(100), None).await;
    store
        .lease_renew(&node("n"), &two, at(190), at(130))
        .await
        .expect("renew");
    let all = store
        .node_sessions(t0(), at(1000))
        .await
        .expect("node_sessions");
    let rows: Vec<_> = all
        .iter()
        .map(|s| {
            (
                s.node_id.0.clone(),
                s.instance.clone(),
                s.started_at,
                s.heartbeat_at,
                s.stopped_at,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("n".into(), one.clone(), t0(), at(30), Some(at(40))),
            ("n".into(), two.clone(), at(100), at(130), None),
        ],
        "both lives, by start"
    );
    assert_eq!(all[0].host_name, "n.plant.local");
    assert!(
        store
            .node_sessions(at(50), at(90))
            .await
            .expect("node_sessions")
            .is_empty(),
        "no life was up from 50 s to 90 s"
    );
    let around = store
        .node_sessions(at(35), at(101))
        .await
        .expect("node_sessions");
    assert_eq!(around.len(), 2, "a range touching both lives");
}

/// `runs_between` reads one job's (or every job's) runs whose fire time is in `[from, to)`,
/// oldest fire first, skipped runs included.
pub async fn runs_between_reads_a_fire_range_in_order<S: Store>(store: S) {
    let a = insert(&store, manual("a")).await.id.expect("id");
    let b = insert(&store, manual("b")).await.id.expect("id");
    for (job, secs) in [(a, 120), (a, 0), (b, 60), (a, 60), (b, 180)] {
        let run = Run::skipped(job, at(secs), SkipReason::Misfire, None, at(500));
        store.run_insert_skipped(&run).await.expect("insert");
    }
    let fires = |runs: Vec<Run>| {
        runs.iter()
            .map(|r| (r.job_id, r.fire_time))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        fires(
            store
                .runs_between(Some(a), t0(), at(120))
                .await
                .expect("runs_between")
        ),
        [(a, t0()), (a, at(60))],
        "one job, [from, to)"
    );
    assert_eq!(
        fires(
            store
                .runs_between(None, at(60), at(181))
                .await
                .expect("runs_between")
        ),
        [(b, at(60)), (a, at(60)), (a, at(120)), (b, at(180))],
        "every job, by fire time then run id (b's was recorded first)"
    );
    assert!(
        store
            .runs_between(Some(b), at(200), at(100))
            .await
            .expect("runs_between")
            .is_empty(),
        "an empty range"
    );
}
