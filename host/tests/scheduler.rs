//! The scheduling loop against the in-memory reference store and the real `testing` plugin,
//! on a [`TestClock`]: an hour of scheduling runs in well under a second of clock reads.
//!
//! Each step moves the test clock and then waits (real time, generous bound) for the run
//! events the step must produce, so the loop and the test never race; absence is checked by
//! reading the store after a later step has been processed.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use jiff::Timestamp;
use takt_core::job::{JobDef, JobId};
use takt_core::policy::{Backoff, MisfireAction, MisfirePolicy, OverlapPolicy, RetryPolicy};
use takt_core::run::{NODE_RESTARTED, NodeId, RunState, SkipReason};
use takt_core::schedule::cron::CronExpr;
use takt_core::schedule::{Interval, Rule, Schedule, Zone};
use takt_core::store::memory::MemoryStore;
use takt_core::store::{ClaimParams, RunFilter, Store};
use takt_host::executor::{Executor, ExecutorConfig};
use takt_host::plugins::PluginSet;
use takt_host::scheduler::{
    Clock, Scheduler, SchedulerConfig, SchedulerEvent, SchedulerHandle, TestClock,
};
use tokio::sync::broadcast;

// ---------------------------------------------------------------------------------------------
// The plugin

/// Builds `takt-plugin-testing` into the test's own target directory and profile (never from
/// build.rs: the nested cargo would wait on the outer one's lock) and loads it into a set.
fn plugins() -> Arc<PluginSet> {
    static PLUGINS: OnceLock<Arc<PluginSet>> = OnceLock::new();
    PLUGINS
        .get_or_init(|| common::testing_plugins("takt-scheduler-test-shadow"))
        .clone()
}

// ---------------------------------------------------------------------------------------------
// Harness

const WAIT: Duration = Duration::from_secs(20);

fn t0() -> Timestamp {
    "2026-06-01T00:00:00Z".parse().unwrap()
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(t0().as_second() + secs).unwrap()
}

fn node() -> NodeId {
    NodeId("node-a".to_string())
}

struct Harness {
    clock: Arc<TestClock>,
    store: MemoryStore,
    handle: SchedulerHandle<MemoryStore>,
    events: broadcast::Receiver<SchedulerEvent>,
}

impl Harness {
    async fn start(store: MemoryStore, start: Timestamp) -> Harness {
        Harness::start_with(store, start, |_| {}).await
    }

    /// [`Harness::start`] with the loop's configuration changed by `tune`.
    async fn start_with(
        store: MemoryStore,
        start: Timestamp,
        tune: impl FnOnce(&mut SchedulerConfig),
    ) -> Harness {
        let clock = Arc::new(TestClock::new(start));
        let executor = Executor::new(ExecutorConfig {
            grace: Duration::from_secs(2),
            ..ExecutorConfig::default()
        });
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let handle = Scheduler::new(
            {
                // The tests below count in these: a 30 s lease renewed every 10 s of clock.
                let mut c = SchedulerConfig::new(node());
                c.lease = Duration::from_secs(30);
                c.renew_every = Duration::from_secs(10);
                tune(&mut c);
                c
            },
            store.clone(),
            plugins(),
            executor,
            dyn_clock,
        )
        .start()
        .await
        .expect("the scheduler starts");
        let events = handle.subscribe();
        Harness {
            clock,
            store,
            handle,
            events,
        }
    }

    fn advance(&self, secs: u64) {
        self.clock.advance(Duration::from_secs(secs));
    }

    /// The next `Finished` event (real-time bound).
    async fn finished(&mut self) -> (JobId, Timestamp, u32, RunState) {
        loop {
            let e = tokio::time::timeout(WAIT, self.events.recv())
                .await
                .expect("a run finishes in time")
                .expect("the event channel is open and not lagging");
            if let SchedulerEvent::Finished {
                job,
                fire_time,
                attempt,
                state,
                ..
            } = e
            {
                return (job, fire_time, attempt, state);
            }
        }
    }

    /// The next `Started` event (real-time bound).
    async fn started(&mut self) -> (JobId, Timestamp) {
        loop {
            let e = tokio::time::timeout(WAIT, self.events.recv())
                .await
                .expect("a run starts in time")
                .expect("the event channel is open");
            if let SchedulerEvent::Started { job, fire_time, .. } = e {
                return (job, fire_time);
            }
        }
    }

    /// `(fire time, state)` of every run of `job`, oldest first.
    async fn runs(&self, job: JobId) -> Vec<(Timestamp, RunState)> {
        let mut runs: Vec<_> = self
            .store
            .run_list(&RunFilter {
                job: Some(job),
                state: None,
                limit: 10_000,
                ..RunFilter::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.fire_time, r.state))
            .collect();
        runs.sort_by_key(|(fire, _)| *fire);
        runs
    }
}

fn schedule(rule: Rule) -> Schedule {
    Schedule::new(rule, Zone::utc())
}

fn every_minute() -> Schedule {
    schedule(Rule::Cron(CronExpr::parse("* * * * *").unwrap()))
}

fn every_seconds(n: u64) -> Schedule {
    schedule(Rule::Interval(Interval::new(n, None).unwrap()))
}

fn job(name: &str, handler: &str, params: &str) -> JobDef {
    let mut j = JobDef::new(name, handler).unwrap();
    j.params_json = params.to_string();
    j
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_of_minutes_fires_each_minute_exactly_once() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let j = h
        .handle
        .add_job(job("minutely", "testing::echo", "{}").with_schedule(every_minute()))
        .await
        .unwrap();
    let id = j.id.unwrap();
    assert_eq!(j.next_fire, Some(at(60)));
    for k in 1..=60 {
        h.advance(60);
        let (job, fire, attempt, state) = h.finished().await;
        assert_eq!(
            (job, fire, attempt, state),
            (id, at(60 * k), 1, RunState::Succeeded)
        );
    }
    let expected: Vec<_> = (1..=60)
        .map(|k| (at(60 * k), RunState::Succeeded))
        .collect();
    assert_eq!(h.runs(id).await, expected);
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_of_seconds_fires_each_second_exactly_once() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let j = h
        .handle
        .add_job(job("secondly", "testing::echo", "{}").with_schedule(every_seconds(1)))
        .await
        .unwrap();
    let id = j.id.unwrap();
    for k in 1..=3600 {
        h.advance(1);
        let (job, fire, _, state) = h.finished().await;
        assert_eq!((job, fire, state), (id, at(k), RunState::Succeeded));
    }
    let expected: Vec<_> = (1..=3600).map(|k| (at(k), RunState::Succeeded)).collect();
    assert_eq!(h.runs(id).await, expected);
    h.handle.shutdown(Duration::from_secs(1)).await;
}

/// A calendar schedule (seed 004's model) in a zone with an offset, for an hour in uneven
/// steps of the clock (some pass several fires at once; a lateness window of an hour and
/// overlap `allow` make them late runs rather than misfires): every occurrence runs once,
/// with its own fire time, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_of_a_calendar_schedule_fires_exactly_its_occurrences() {
    use takt_core::schedule::calendar::CalendarRule;
    let rule = CalendarRule::parse("daily every 7m between 08:03-08:59").unwrap();
    let schedule = Schedule::new(Rule::Calendar(rule), Zone::get("Asia/Shanghai").unwrap());
    // 08:00 in Shanghai is 00:00 UTC: the hour from t0 is the window.
    let expected: Vec<Timestamp> = schedule
        .iter_after(t0())
        .take_while(|o| o.at <= at(3600))
        .map(|o| o.at)
        .collect();
    assert_eq!(expected.len(), 9, "08:03, 08:10, … 08:59");
    assert_eq!(expected[0], at(180));
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j = job("calendar", "testing::echo", "{}").with_schedule(schedule);
    j.misfire = MisfirePolicy::default().with_lateness(Duration::from_secs(3600));
    j.overlap = OverlapPolicy::Allow;
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    let mut seen = Vec::new();
    let mut elapsed = 0;
    for step in [50u64, 130, 7, 413, 240, 1, 60, 999, 300, 600, 800] {
        h.advance(step);
        elapsed += step;
        let due = expected
            .iter()
            .filter(|f| **f <= at(elapsed as i64))
            .count();
        while seen.len() < due {
            let (job, fire, _, state) = h.finished().await;
            assert_eq!((job, state), (id, RunState::Succeeded));
            seen.push(fire);
        }
    }
    assert!(elapsed >= 3600);
    seen.sort();
    assert_eq!(seen, expected, "each occurrence once, with its fire time");
    let recorded: Vec<Timestamp> = h.runs(id).await.into_iter().map(|(f, _)| f).collect();
    assert_eq!(recorded, expected, "nothing else recorded");
    h.handle.shutdown(Duration::from_secs(1)).await;
}

/// The host was down for an hour: every-minute jobs with each misfire policy and a 30 s
/// lateness window. At 01:00:45 the fires 00:00 … 01:00 are all more than 30 s late, and the
/// next (01:01) is still ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_down_is_caught_up_per_misfire_policy() {
    let store = MemoryStore::default();
    let mut ids = Vec::new();
    for (name, action) in [
        ("skip", MisfireAction::Skip),
        ("once", MisfireAction::FireOnceNow),
        ("all", MisfireAction::FireAll { max: 5 }),
    ] {
        let mut j = job(name, "testing::echo", "{}").with_schedule(every_minute());
        j.misfire = MisfirePolicy::new(action).with_lateness(Duration::from_secs(30));
        j.overlap = OverlapPolicy::Allow;
        j.next_fire = Some(t0());
        ids.push(store.job_insert(&j, t0()).await.unwrap().id.unwrap());
    }
    let mut h = Harness::start(store, at(3645)).await;
    // 1 run for fire-once, 5 for fire-all; skip runs nothing.
    let mut ran: Vec<(JobId, Timestamp)> = Vec::new();
    for _ in 0..6 {
        let (job, fire, _, state) = h.finished().await;
        assert_eq!(state, RunState::Succeeded);
        ran.push((job, fire));
    }
    ran.sort();
    let mut want = vec![(ids[1], at(3600))];
    want.extend((56..=60).map(|k| (ids[2], at(60 * k))));
    want.sort();
    assert_eq!(ran, want);
    for (id, runs) in [(ids[0], 0), (ids[1], 1), (ids[2], 5)] {
        let all = h.runs(id).await;
        let fires: Vec<Timestamp> = all.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            fires,
            (0..=60).map(|k| at(60 * k)).collect::<Vec<_>>(),
            "job {id}: every missed fire is recorded, once"
        );
        let skipped = all.iter().filter(|(_, s)| *s == RunState::Skipped).count();
        assert_eq!(
            skipped,
            61 - runs,
            "job {id}: the rest are recorded as skipped"
        );
        let job = h.store.job_get(id).await.unwrap().unwrap();
        assert_eq!(job.next_fire, Some(at(3660)), "job {id}: back on schedule");
    }
    let skipped = h
        .store
        .run_list(&RunFilter {
            job: Some(ids[0]),
            state: Some(RunState::Skipped),
            limit: 100,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert!(
        skipped
            .iter()
            .all(|r| r.skip_reason == Some(SkipReason::Misfire))
    );
    // Back on time: the next minute runs normally for all three.
    h.advance(30);
    let mut next = Vec::new();
    for _ in 0..3 {
        let (job, fire, _, _) = h.finished().await;
        next.push((job, fire));
    }
    next.sort();
    assert_eq!(
        next,
        ids.iter().map(|id| (*id, at(3660))).collect::<Vec<_>>()
    );
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_failure_is_retried_after_each_backoff_delay() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j = job(
        "flaky",
        "testing::fail",
        r#"{"message": "disk busy", "retryable": true}"#,
    );
    j.retry = RetryPolicy::new(
        2,
        Backoff::Fixed(vec![Duration::from_secs(10), Duration::from_secs(30)]),
    );
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    let fire = h.handle.trigger(id).await.unwrap();
    assert_eq!(fire, t0());

    assert_eq!(h.finished().await, (id, t0(), 1, RunState::Pending));
    let run = h.store.run_list(&RunFilter::default()).await.unwrap();
    assert_eq!(run.len(), 1);
    assert_eq!(run[0].attempt, 2);
    assert_eq!(run[0].next_attempt_at, Some(at(10)));
    assert!(run[0].error.as_deref().unwrap().contains("disk busy"));

    // Not before its delay: the retry starts at 10 s, not at 9 s.
    h.advance(9);
    h.advance(1);
    assert_eq!(h.finished().await, (id, t0(), 2, RunState::Pending));
    let run = h.store.run_list(&RunFilter::default()).await.unwrap();
    assert_eq!(run[0].started_at, Some(at(10)));
    assert_eq!(run[0].next_attempt_at, Some(at(40)));

    h.advance(29);
    h.advance(1);
    assert_eq!(h.finished().await, (id, t0(), 3, RunState::Failed));
    let run = h.store.run_list(&RunFilter::default()).await.unwrap();
    assert_eq!(run.len(), 1, "retries re-use the run");
    assert_eq!(run[0].started_at, Some(at(40)));
    assert_eq!(run[0].finished_at, Some(at(40)));
    assert_eq!(run[0].attempt, 3);
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_timeout_is_recorded_timed_out() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j = job("slow", "testing::polite", r#"{"seconds": 30.0}"#);
    j.timeout = Some(Duration::from_millis(300));
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    h.handle.trigger(id).await.unwrap();
    assert_eq!(h.finished().await, (id, t0(), 1, RunState::TimedOut));
    let run = &h.store.run_list(&RunFilter::default()).await.unwrap()[0];
    assert_eq!(run.state, RunState::TimedOut);
    assert!(run.error.is_some());
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_handler_fails_the_run_without_retry() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j = job("lost", "nowhere::nothing", "{}");
    j.retry = RetryPolicy::new(3, Backoff::None);
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    h.handle.trigger(id).await.unwrap();
    assert_eq!(h.finished().await, (id, t0(), 1, RunState::Failed));
    let run = &h.store.run_list(&RunFilter::default()).await.unwrap()[0];
    assert!(run.error.as_deref().unwrap().contains("nowhere"), "{run:?}");
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_and_rescheduling_take_effect_at_once() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let add = |name: &str| job(name, "testing::echo", "{}").with_schedule(every_minute());
    let a = h.handle.add_job(add("a")).await.unwrap().id.unwrap();
    let w = h.handle.add_job(add("witness")).await.unwrap().id.unwrap();

    h.advance(60);
    let mut got = vec![h.finished().await.0, h.finished().await.0];
    got.sort();
    assert_eq!(got, vec![a, w]);

    h.handle.set_enabled(a, false).await.unwrap();
    for k in 2..=4 {
        h.advance(60);
        assert_eq!(h.finished().await, (w, at(60 * k), 1, RunState::Succeeded));
    }
    assert_eq!(h.runs(a).await, vec![(at(60), RunState::Succeeded)]);

    // Re-enabled: next fire from now, the minutes missed while disabled are not misfires.
    let enabled = h.handle.set_enabled(a, true).await.unwrap();
    assert_eq!(enabled.next_fire, Some(at(300)));

    // A new schedule: every 10 s from now (4 min), before the next minute.
    let mut changed = h.store.job_get(a).await.unwrap().unwrap();
    changed.schedule = Some(every_seconds(10));
    let changed = h.handle.update_job(changed).await.unwrap();
    assert_eq!(changed.next_fire, Some(at(250)));
    h.advance(10);
    assert_eq!(h.finished().await, (a, at(250), 1, RunState::Succeeded));
    assert_eq!(
        h.runs(a).await,
        vec![
            (at(60), RunState::Succeeded),
            (at(250), RunState::Succeeded)
        ]
    );
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_left_running_by_this_node_is_failed_and_retried_at_start() {
    let store = MemoryStore::default();
    let mut j = job("survivor", "testing::echo", "{}");
    j.retry = RetryPolicy::new(1, Backoff::Fixed(vec![Duration::from_secs(10)]));
    j.next_fire = Some(t0());
    let id = store.job_insert(&j, t0()).await.unwrap().id.unwrap();
    let claimed = store
        .run_claim_due(&ClaimParams {
            claimed_at: None,
            node: node(),
            instance: takt_core::node::InstanceId("test-life".into()),
            tags: Vec::new(),
            now: t0(),
            limit: 1,
            recurring_only: 0,
            lease: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let run_id = claimed[0].run.id.unwrap();

    // The node comes back 5 s later (its lease has not even expired).
    let mut h = Harness::start(store, at(5)).await;
    let run = h.store.run_get(run_id).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Pending);
    assert_eq!(run.error.as_deref(), Some(NODE_RESTARTED));
    assert_eq!(run.attempt, 2);
    assert_eq!(run.next_attempt_at, Some(at(15)));

    h.advance(10);
    assert_eq!(h.finished().await, (id, t0(), 2, RunState::Succeeded));
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_run_records_it_cancelled_not_timed_out() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j = job("long", "testing::polite", r#"{"seconds": 60.0}"#);
    j.timeout = Some(Duration::from_secs(120));
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    h.handle.trigger(id).await.unwrap();
    assert_eq!(h.started().await, (id, t0()));
    let begun = std::time::Instant::now();
    tokio::time::timeout(WAIT, h.handle.shutdown(Duration::from_secs(1)))
        .await
        .expect("shutdown returns within its grace");
    // The drain (1 s), then the cancel, which the polite handler notices at once.
    let took = begun.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(4),
        "{took:?}"
    );
    let run = &h.store.run_list(&RunFilter::default()).await.unwrap()[0];
    assert_eq!(run.state, RunState::Cancelled);
    assert_eq!(run.error.as_deref(), Some("cancelled (shutdown)"));
    assert_eq!(h.handle.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_lets_running_runs_finish_and_claims_nothing_more() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let short = h
        .handle
        .add_job(job("short", "testing::polite", r#"{"seconds": 1.0}"#))
        .await
        .unwrap()
        .id
        .unwrap();
    let ticker = h
        .handle
        .add_job(job("ticker", "testing::echo", "{}").with_schedule(every_seconds(1)))
        .await
        .unwrap()
        .id
        .unwrap();
    h.handle.trigger(short).await.unwrap();
    assert_eq!(h.started().await, (short, t0()));

    let handle = h.handle.clone();
    let stopping = tokio::spawn(async move { handle.shutdown(Duration::from_secs(10)).await });
    // While the node drains, the ticker falls due: a stopping node must not take it (another
    // node, or this one after its restart, handles it per misfire policy).
    tokio::time::sleep(Duration::from_millis(200)).await;
    h.advance(5);
    tokio::time::timeout(WAIT, stopping)
        .await
        .expect("the drain ends when the last run does")
        .unwrap();
    assert_eq!(h.runs(short).await, vec![(t0(), RunState::Succeeded)]);
    assert_eq!(h.runs(ticker).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_missed_beyond_the_lateness_window_are_recorded_as_skipped() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j = job("reports", "testing::echo", "{}").with_schedule(every_minute());
    j.misfire = MisfirePolicy::default(); // skip, 60 s lateness
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();

    // Ten and a half minutes at once (the host was asleep): 00:01..00:09 are more than 60 s
    // late and skipped; 00:10 is 30 s late, within the window, and runs.
    h.advance(630);
    assert_eq!(h.finished().await, (id, at(600), 1, RunState::Succeeded));
    let mut expected: Vec<_> = (1..=9).map(|k| (at(60 * k), RunState::Skipped)).collect();
    expected.push((at(600), RunState::Succeeded));
    assert_eq!(h.runs(id).await, expected);
    let skipped = h
        .store
        .run_list(&RunFilter {
            job: Some(id),
            state: Some(RunState::Skipped),
            limit: 100,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert!(
        skipped
            .iter()
            .all(|r| r.skip_reason == Some(SkipReason::Misfire))
    );

    // Back on time: the next minute runs normally.
    h.advance(30);
    assert_eq!(h.finished().await, (id, at(660), 1, RunState::Succeeded));
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_while_the_previous_run_still_runs_is_skipped_as_overlap() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let j =
        job("archive", "testing::polite", r#"{"seconds": 60.0}"#).with_schedule(every_seconds(10));
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    h.advance(10);
    assert_eq!(h.started().await, (id, at(10)));
    h.advance(10);
    // No event for a skip: wait (real time, bounded) until the store shows it.
    let begun = std::time::Instant::now();
    while h.runs(id).await.len() < 2 {
        assert!(
            begun.elapsed() < WAIT,
            "the overlapping fire was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let skipped = h
        .store
        .run_list(&RunFilter {
            job: Some(id),
            state: Some(RunState::Skipped),
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].fire_time, at(20));
    assert_eq!(skipped[0].skip_reason, Some(SkipReason::Overlap));
    let job = h.store.job_get(id).await.unwrap().unwrap();
    assert_eq!(job.next_fire, Some(at(30)));

    h.handle.shutdown(Duration::ZERO).await;
    assert_eq!(
        h.runs(id).await,
        vec![(at(10), RunState::Cancelled), (at(20), RunState::Skipped)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_and_progress_reach_the_store() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let j = job(
        "talker",
        "testing::chatty",
        r#"{"lines": 250, "bytes": 20}"#,
    );
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    h.handle.trigger(id).await.unwrap();
    assert_eq!(h.finished().await, (id, t0(), 1, RunState::Succeeded));
    let run = h.store.run_list(&RunFilter::default()).await.unwrap()[0].clone();
    let lines = h.store.log_list(run.id.unwrap(), None, 1000).await.unwrap();
    assert_eq!(lines.len(), 250);
    assert!(
        lines[0].1.message.starts_with("line 1 of 250"),
        "{:?}",
        lines[0]
    );
    assert!(lines[249].1.message.starts_with("line 250 of 250"));
    assert!(lines.windows(2).all(|w| w[0].0 < w[1].0), "in order");
    let progress = run.progress.expect("progress recorded");
    assert_eq!((progress.done, progress.total), (250, 250));
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_all_catches_up_the_latest_misfires_and_allow_runs_them_side_by_side() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j = job("collect", "testing::echo", "{}").with_schedule(every_minute());
    j.misfire = MisfirePolicy::new(MisfireAction::FireAll { max: 3 });
    j.overlap = OverlapPolicy::Allow;
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();

    // 00:01..00:09 are misfires: the latest three (00:07..00:09) run, older ones are skipped;
    // 00:10 is within the window and runs as usual.
    h.advance(630);
    let mut fires = Vec::new();
    for _ in 0..4 {
        let (job, fire, _, state) = h.finished().await;
        assert_eq!((job, state), (id, RunState::Succeeded));
        fires.push(fire);
    }
    fires.sort();
    assert_eq!(fires, vec![at(420), at(480), at(540), at(600)]);
    let mut expected: Vec<_> = (1..=6).map(|k| (at(60 * k), RunState::Skipped)).collect();
    expected.extend((7..=10).map(|k| (at(60 * k), RunState::Succeeded)));
    assert_eq!(h.runs(id).await, expected);
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_allow_starts_a_second_copy() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j =
        job("parallel", "testing::polite", r#"{"seconds": 60.0}"#).with_schedule(every_seconds(10));
    j.overlap = OverlapPolicy::Allow;
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    h.advance(10);
    assert_eq!(h.started().await, (id, at(10)));
    h.advance(10);
    assert_eq!(h.started().await, (id, at(20)));
    assert_eq!(h.handle.running(), 2);
    h.handle.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        h.runs(id).await,
        vec![(at(10), RunState::Cancelled), (at(20), RunState::Cancelled)]
    );
}

/// Waits (real time, bounded) until `check` holds for the store.
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let begun = std::time::Instant::now();
    while !check().await {
        assert!(begun.elapsed() < WAIT, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The log text of run `run`, one line per entry.
async fn log_text(store: &MemoryStore, run: takt_core::run::RunId) -> String {
    store
        .log_list(run, None, 1_000)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, l)| l.message)
        .collect::<Vec<_>>()
        .join("\n")
}

async fn run_at(store: &MemoryStore, job: JobId, fire: Timestamp) -> takt_core::run::Run {
    store
        .run_list(&RunFilter {
            job: Some(job),
            state: None,
            limit: 1_000,
            ..RunFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.fire_time == fire)
        .unwrap_or_else(|| panic!("no run of job {job} at {fire}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_queue_one_queues_one_fire_and_starts_it_when_the_run_ends() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j =
        job("queued", "testing::polite", r#"{"seconds": 60.0}"#).with_schedule(every_seconds(10));
    j.overlap = OverlapPolicy::QueueOne;
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    h.advance(10);
    assert_eq!(h.started().await, (id, at(10)));

    // 00:20 comes while 00:10 runs: queued (pending, no retry time), not started.
    h.advance(10);
    let store = h.store.clone();
    until("the fire at 00:20 is queued", || {
        let store = store.clone();
        async move {
            store
                .run_list(&RunFilter {
                    job: Some(id),
                    state: Some(RunState::Pending),
                    limit: 10,
                    ..RunFilter::default()
                })
                .await
                .unwrap()
                .iter()
                .any(|r| r.fire_time == at(20) && r.next_attempt_at.is_none())
        }
    })
    .await;
    assert_eq!(h.handle.running(), 1, "the queued fire waits");

    // 00:30 comes while one is queued: skipped as an overlap (one queued at most).
    h.advance(10);
    until("the fire at 00:30 is skipped", || {
        let store = store.clone();
        async move { h_runs(&store, id).await.len() == 3 }
    })
    .await;
    let skipped = run_at(&h.store, id, at(30)).await;
    assert_eq!(skipped.state, RunState::Skipped);
    assert_eq!(skipped.skip_reason, Some(SkipReason::Overlap));

    // The running one ends (cancelled by an operator): the queued one starts, with its own
    // fire time, at once.
    let first = run_at(&h.store, id, at(10)).await.id.unwrap();
    assert!(h.handle.cancel_run(first, "operator test").await);
    assert_eq!(h.finished().await, (id, at(10), 1, RunState::Cancelled));
    assert_eq!(h.started().await, (id, at(20)));
    assert!(
        log_text(&h.store, first)
            .await
            .contains("cancelled by request: operator test"),
        "the cancel says why in the run's log"
    );
    h.handle.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        h.runs(id).await,
        vec![
            (at(10), RunState::Cancelled),
            (at(20), RunState::Cancelled),
            (at(30), RunState::Skipped),
        ]
    );
}

async fn h_runs(store: &MemoryStore, job: JobId) -> Vec<takt_core::run::Run> {
    store
        .run_list(&RunFilter {
            job: Some(job),
            state: None,
            limit: 1_000,
            ..RunFilter::default()
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_cancel_running_stops_the_old_run_and_starts_the_new_fire() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let mut j =
        job("latest", "testing::polite", r#"{"seconds": 60.0}"#).with_schedule(every_seconds(10));
    j.overlap = OverlapPolicy::CancelRunning;
    let id = h.handle.add_job(j).await.unwrap().id.unwrap();
    h.advance(10);
    assert_eq!(h.started().await, (id, at(10)));
    h.advance(10);
    // Either order of the two events is right: the new fire may start before the old one has
    // finished stopping (they overlap for at most the grace period).
    let mut started = None;
    let mut finished = None;
    while started.is_none() || finished.is_none() {
        let e = tokio::time::timeout(WAIT, h.events.recv())
            .await
            .expect("events in time")
            .expect("channel open");
        match e {
            SchedulerEvent::Started { fire_time, .. } => started = Some(fire_time),
            SchedulerEvent::Finished {
                fire_time, state, ..
            } => finished = Some((fire_time, state)),
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(started, Some(at(20)));
    assert_eq!(finished, Some((at(10), RunState::Cancelled)));
    let old = run_at(&h.store, id, at(10)).await;
    assert_eq!(old.error.as_deref(), Some("cancelled (requested)"));
    assert!(
        log_text(&h.store, old.id.unwrap())
            .await
            .contains("overlap policy cancel-running starts the job's fire at"),
        "the old run's log says why it was cancelled"
    );
    h.handle.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        h.runs(id).await,
        vec![(at(10), RunState::Cancelled), (at(20), RunState::Cancelled)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_claims_nothing_until_resumed() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let id = h
        .handle
        .add_job(job("paused", "testing::echo", "{}").with_schedule(every_seconds(10)))
        .await
        .unwrap()
        .id
        .unwrap();
    h.handle.pause();
    assert!(h.handle.is_paused());
    h.advance(10);
    // A triggered fire is a claim like any other: it waits too.
    h.handle.trigger(id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(h.runs(id).await.is_empty(), "nothing ran while paused");
    h.handle.resume();
    assert_eq!(h.finished().await, (id, at(10), 1, RunState::Succeeded));
    h.advance(10);
    assert_eq!(h.finished().await, (id, at(20), 1, RunState::Succeeded));
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_job_cancels_its_run_here_and_deletes_its_records() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let id = h
        .handle
        .add_job(job("doomed", "testing::polite", r#"{"seconds": 60.0}"#))
        .await
        .unwrap()
        .id
        .unwrap();
    h.handle.trigger(id).await.unwrap();
    assert_eq!(h.started().await, (id, t0()));
    h.handle.remove_job(id).await.unwrap();
    assert_eq!(h.store.job_get(id).await.unwrap(), None);
    assert!(h.runs(id).await.is_empty());
    let handle = h.handle.clone();
    until("the removed job's run stops", || {
        let handle = handle.clone();
        async move { handle.running() == 0 }
    })
    .await;
    let e = h.handle.remove_job(id).await.unwrap_err();
    assert!(
        e.to_string().contains(&format!("job {id} does not exist")),
        "{e}"
    );
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_nodes_expired_run_is_recovered_and_retried_here() {
    let store = MemoryStore::default();
    let mut j = job("orphan", "testing::echo", "{}");
    j.retry = RetryPolicy::new(1, Backoff::Fixed(vec![Duration::from_secs(10)]));
    j.next_fire = Some(t0());
    let id = store.job_insert(&j, t0()).await.unwrap().id.unwrap();
    // node-b claims the fire (lease 30 s) and then dies.
    store
        .run_claim_due(&ClaimParams {
            claimed_at: None,
            node: NodeId("node-b".to_string()),
            instance: takt_core::node::InstanceId("test-life".into()),
            tags: Vec::new(),
            now: t0(),
            limit: 1,
            recurring_only: 0,
            lease: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let mut h = Harness::start(store, t0()).await;
    // Past node-b's lease: node-a's next renewal round recovers it (failed, retry at +10 s).
    h.advance(40);
    let store = h.store.clone();
    until("node-b's run is recovered", || {
        let store = store.clone();
        async move { run_at(&store, id, t0()).await.state == RunState::Pending }
    })
    .await;
    let run = run_at(&h.store, id, t0()).await;
    assert_eq!(run.error.as_deref(), Some(takt_core::run::LEASE_EXPIRED));
    assert_eq!(run.attempt, 2);
    assert_eq!(run.next_attempt_at, Some(at(50)));
    h.advance(10);
    assert_eq!(h.finished().await, (id, t0(), 2, RunState::Succeeded));
    assert_eq!(
        run_at(&h.store, id, t0()).await.node_id,
        Some(node()),
        "the retry ran here"
    );
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lease_was_taken_over_is_stopped_here() {
    let mut h = Harness::start(MemoryStore::default(), t0()).await;
    let id = h
        .handle
        .add_job(job("stalled", "testing::polite", r#"{"seconds": 60.0}"#))
        .await
        .unwrap()
        .id
        .unwrap();
    h.handle.trigger(id).await.unwrap();
    assert_eq!(h.started().await, (id, t0()));
    // Another node decides our lease (30 s) expired — as after a stall of this node.
    let recovered = h.store.run_recover_expired(at(31), None).await.unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].state, RunState::Failed, "no retries: final");
    // Our next renewal round (every 10 s of clock) finds the lease gone and stops the run.
    h.advance(10);
    let handle = h.handle.clone();
    until("the run without a lease stops", || {
        let handle = handle.clone();
        async move { handle.running() == 0 }
    })
    .await;
    let run = run_at(&h.store, id, t0()).await;
    assert_eq!(run.state, RunState::Failed, "the recovered outcome stands");
    assert_eq!(run.error.as_deref(), Some(takt_core::run::LEASE_EXPIRED));
    assert!(
        log_text(&h.store, run.id.unwrap())
            .await
            .contains("lost this run's lease"),
        "the log says why the run stopped"
    );
    h.handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_job_is_an_ordinary_run_that_purges_old_history() {
    let store = MemoryStore::default();
    // A run that finished at t0, and one still pending (never purged, however old).
    let mut old = job("old", "testing::echo", "{}");
    old.next_fire = Some(t0());
    let old_id = store.job_insert(&old, t0()).await.unwrap().id.unwrap();
    let claimed = store
        .run_claim_due(&ClaimParams {
            claimed_at: None,
            node: node(),
            instance: takt_core::node::InstanceId("test-life".into()),
            tags: Vec::new(),
            now: t0(),
            limit: 1,
            recurring_only: 0,
            lease: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let mut run = claimed[0].run.clone();
    run.apply(
        takt_core::run::RunEvent::Succeeded { result_json: None },
        t0(),
        &RetryPolicy::default(),
    )
    .unwrap();
    store
        .run_set_state_if_running(
            run.id.unwrap(),
            1,
            &takt_core::store::RunFinish::from_run(&run, t0()),
        )
        .await
        .unwrap();
    store.run_enqueue(old_id, at(60), at(60)).await.unwrap();
    store.job_set_enabled(old_id, false, t0()).await.unwrap();

    let two_days = 2 * 86_400;
    let mut h = Harness::start(store, at(two_days)).await;
    let retention = takt_host::builtin::retention_job(1).expect("a valid retention job");
    let rid = h.handle.add_job(retention).await.unwrap().id.unwrap();
    h.handle.trigger(rid).await.unwrap();
    assert_eq!(
        h.finished().await,
        (rid, at(two_days), 1, RunState::Succeeded)
    );
    assert_eq!(
        h.runs(old_id).await,
        vec![(at(60), RunState::Pending)],
        "the finished run is gone, the pending one stays"
    );
    let record = run_at(&h.store, rid, at(two_days)).await;
    let result: serde_json::Value =
        serde_json::from_str(record.result_json.as_deref().unwrap()).unwrap();
    assert_eq!(result["runs"], 1);
    assert_eq!(result["olderThan"], at(86_400).to_string());
    assert!(
        log_text(&h.store, record.id.unwrap())
            .await
            .contains("removed 1 runs and 0 log lines"),
        "the run's log says what it removed"
    );

    // Bad params fail the run with the reason, without a retry.
    let mut bad = takt_host::builtin::retention_job(1).unwrap();
    bad.name = takt_core::job::JobName::new("bad-retention").unwrap();
    bad.params_json = r#"{"days": 0}"#.to_string();
    let bid = h.handle.add_job(bad).await.unwrap().id.unwrap();
    h.handle.trigger(bid).await.unwrap();
    assert_eq!(h.finished().await, (bid, at(two_days), 1, RunState::Failed));
    let failed = run_at(&h.store, bid, at(two_days)).await;
    assert!(
        failed.error.as_deref().unwrap().contains("days is 0"),
        "{failed:?}"
    );
    h.handle.shutdown(Duration::from_secs(1)).await;
}

/// A run the store holds as running on this node that this node never started (a claim whose
/// COMMIT succeeded while its answer was lost) is found by the lease renewal and failed, to be
/// retried per policy — never kept alive unrun by renewals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_claimed_for_this_node_but_never_started_is_failed_and_retried() {
    let h = Harness::start(MemoryStore::default(), t0()).await;
    // Paused: the node claims nothing itself, but keeps renewing.
    h.handle.pause();
    let mut j = job("orphan", "testing::echo", "{}");
    j.retry = RetryPolicy::new(1, Backoff::Fixed(vec![Duration::from_secs(10)]));
    j.next_fire = Some(t0());
    let id = h.store.job_insert(&j, t0()).await.unwrap().id.unwrap();
    let claimed = h
        .store
        .run_claim_due(&ClaimParams {
            claimed_at: None,
            node: node(),
            instance: h.handle.node().1.clone(),
            tags: Vec::new(),
            now: t0(),
            limit: 1,
            recurring_only: 0,
            lease: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    h.advance(10);
    let store = h.store.clone();
    until("the orphan is failed", || {
        let store = store.clone();
        async move { run_at(&store, id, t0()).await.state == RunState::Pending }
    })
    .await;
    let run = run_at(&h.store, id, t0()).await;
    assert_eq!(run.error.as_deref(), Some(takt_host::scheduler::ORPHANED));
    assert_eq!(run.attempt, 2, "retried per policy");
    h.handle.shutdown(Duration::from_secs(1)).await;
}

/// The claim's fairness rule through the loop: a backlog of one-off runs that keeps every
/// slot busy does not hold back a cron that falls due meanwhile. Without the rule the cron's
/// fire, due after all of them, starts only after the last one-off (position 60 below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_due_behind_a_one_off_backlog_is_not_held_back() {
    let store = MemoryStore::default();
    let mut backlog = Vec::new();
    for i in 0..60 {
        let mut j = job(
            &format!("once-{i}"),
            "testing::polite",
            r#"{"seconds": 0.1}"#,
        )
        .with_schedule(schedule(Rule::Once(t0())));
        j.next_fire = Some(t0());
        backlog.push(store.job_insert(&j, t0()).await.unwrap().id.unwrap());
    }
    let cron = schedule(Rule::Cron(CronExpr::parse("* * * * * *").unwrap()));
    let mut cron = job("every-second", "testing::echo", "{}").with_schedule(cron);
    cron.next_fire = Some(at(1));
    let every_second = store.job_insert(&cron, t0()).await.unwrap().id.unwrap();
    let mut h = Harness::start_with(store, t0(), |c| c.capacity = 2).await;
    // Two one-offs run; the cron falls due while 58 wait (each takes 0.1 s of real time).
    let first = h.started().await.0;
    assert!(backlog.contains(&first), "the backlog starts first");
    h.advance(1);
    let mut position = None;
    for n in 1..=61 {
        let (job, _) = h.started().await;
        if job == every_second {
            position = Some(n);
            break;
        }
    }
    let position = position.expect("the cron's fire started");
    assert!(
        position < 20,
        "the cron's fire started as the {position}th run after it fell due, behind the backlog"
    );
    h.handle.shutdown(Duration::from_secs(10)).await;
}

/// The recurring reserve through the loop: one-offs that run for long fill the whole
/// capacity, and a cron that falls due meanwhile starts at once on the slot kept for
/// recurring fires, while the one-offs still waiting stay waiting. Without the reserve
/// (`recurring_reserve = 0`) the cron waits for a one-off to end (a minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_starts_on_the_reserve_while_long_one_offs_fill_the_capacity() {
    let store = MemoryStore::default();
    let mut backlog = Vec::new();
    for i in 0..4 {
        let mut j = job(
            &format!("long-{i}"),
            "testing::polite",
            r#"{"seconds": 60.0}"#,
        )
        .with_schedule(schedule(Rule::Once(t0())));
        j.next_fire = Some(t0());
        backlog.push(store.job_insert(&j, t0()).await.unwrap().id.unwrap());
    }
    let cron = schedule(Rule::Cron(CronExpr::parse("* * * * * *").unwrap()));
    let mut cron = job("every-second", "testing::echo", "{}").with_schedule(cron);
    cron.next_fire = Some(at(1));
    let every_second = store.job_insert(&cron, t0()).await.unwrap().id.unwrap();
    let mut h = Harness::start_with(store, t0(), |c| {
        c.capacity = 2;
        c.recurring_reserve = 1;
    })
    .await;
    // Their start events may come before the harness subscribed: wait on the loop's count.
    let deadline = std::time::Instant::now() + WAIT;
    while h.handle.running() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the one-offs fill the capacity"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.advance(1);
    // The one-offs' start events, when the harness saw them, come first.
    loop {
        let (job, fire) = h.started().await;
        if job == every_second {
            assert_eq!(fire, at(1), "the cron's fire at 1 s");
            break;
        }
        assert!(backlog.contains(&job), "only one-offs started before it");
    }
    let waiting = h
        .store
        .run_list(&RunFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|r| backlog.contains(&r.job_id))
        .count();
    assert_eq!(
        waiting, 2,
        "the reserve took no one-off: two ran, two are still due (no run yet)"
    );
    assert!(h.handle.running() <= 3, "capacity 2 + 1 reserved");
    h.handle.shutdown(Duration::from_secs(10)).await;
}
