//! Catch-up is not overlap: every misfire policy under every overlap policy, after a host stop
//! and after a database outage, on a [`TestClock`].
//!
//! A job fires every 2 s with a lateness window of 2 s; the host is away for 27 s (stopped, or
//! its database unreachable). Whatever the overlap policy, the misfire policy alone decides
//! which missed fires run — `skip` none, `fire-once` the on-time one only, `fire-all:3` the
//! latest three and the on-time one — and they run one after another in fire-time order
//! (side by side only under `allow`). Only a fire whose time comes while a run of the job is
//! in flight is an overlap: none does here, so none is recorded `skipped overlap`. Every fire
//! time has exactly one record.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use takt_core::alert::{AlertDelivery, AlertKey};

use jiff::Timestamp;
use takt_core::job::{JobDef, JobId, JobName};
use takt_core::node::{InstanceId, NodeStatus, Registered, Registration};
use takt_core::pause::{Pause, PauseTarget, Resumed};
use takt_core::policy::{MisfireAction, MisfirePolicy, OverlapPolicy};
use takt_core::run::{NodeId, Progress, Run, RunId, RunState, SkipReason};
use takt_core::schedule::{Interval, Rule, Schedule, Zone};
use takt_core::store::access::{ApiToken, NewToken, OperatorAction};
use takt_core::store::memory::MemoryStore;
use takt_core::store::{
    Backfilled, CancelOutcome, CancelRequest, Capabilities, ClaimParams, ClaimedRun, DueJob,
    DueSet, JobPage, JobQuery, LogLine, PurgeCounts, RunFilter, RunFinish, Store, StoreError,
    StoreResult,
};
use takt_host::executor::{Executor, ExecutorConfig};
use takt_host::plugins::PluginSet;
use takt_host::scheduler::{Clock, Scheduler, SchedulerConfig, SchedulerEvent, TestClock};

fn plugins() -> Arc<PluginSet> {
    static PLUGINS: OnceLock<Arc<PluginSet>> = OnceLock::new();
    PLUGINS
        .get_or_init(|| common::testing_plugins("takt-catch-up-test-shadow"))
        .clone()
}

fn t0() -> Timestamp {
    "2026-06-01T00:00:00Z".parse().unwrap()
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(t0().as_second() + secs).unwrap()
}

/// The memory store behind a switch: while `down`, every call fails as transient, as a
/// database that went away does.
#[derive(Clone)]
struct Switch {
    inner: MemoryStore,
    down: Arc<AtomicBool>,
}

impl Switch {
    fn check(&self) -> StoreResult<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::transient("the test database is down"))
        } else {
            Ok(())
        }
    }
}

macro_rules! forward {
    ($( fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty; )*) => {
        $(
            async fn $name(&self $(, $arg: $ty)*) -> $ret {
                self.check()?;
                self.inner.$name($($arg),*).await
            }
        )*
    };
}

impl Store for Switch {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    forward! {
        fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef>;
        fn job_update(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef>;
        fn job_get(&self, id: JobId) -> StoreResult<Option<JobDef>>;
        fn jobs_get(&self, ids: &[JobId]) -> StoreResult<Vec<JobDef>>;
        fn job_count(&self) -> StoreResult<u64>;
        fn jobs_late(&self, before: Timestamp, limit: usize) -> StoreResult<Vec<JobDef>>;
        fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>>;
        fn job_list(&self) -> StoreResult<Vec<JobDef>>;
        fn job_page(&self, query: &JobQuery) -> StoreResult<JobPage>;
        fn job_delete(&self, id: JobId) -> StoreResult<()>;
        fn job_set_enabled(&self, id: JobId, enabled: bool, now: Timestamp) -> StoreResult<JobDef>;
        fn job_set_next_fire(&self, id: JobId, expected: Option<Timestamp>, new: Option<Timestamp>) -> StoreResult<()>;
        fn job_due(&self, now: Timestamp, limit: usize, tags: &[String]) -> StoreResult<Vec<DueJob>>;
        fn next_due(&self, tags: &[String], set: DueSet) -> StoreResult<Option<Timestamp>>;
        fn run_claim_due(&self, params: &ClaimParams) -> StoreResult<Vec<ClaimedRun>>;
        fn run_insert_skipped(&self, run: &Run) -> StoreResult<Run>;
        fn run_enqueue(&self, job: JobId, fire: Timestamp, now: Timestamp) -> StoreResult<Run>;
        fn run_set_state_if_running(&self, id: RunId, expected_attempt: u32, finish: &RunFinish) -> StoreResult<Run>;
        fn run_get(&self, id: RunId) -> StoreResult<Option<Run>>;
        fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>>;
        fn lease_renew(&self, node: &NodeId, instance: &InstanceId, until: Timestamp, now: Timestamp) -> StoreResult<Vec<RunId>>;
        fn run_recover_expired(&self, now: Timestamp, restart: Option<(&NodeId, &InstanceId)>) -> StoreResult<Vec<Run>>;
        fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()>;
        fn node_register(&self, reg: &Registration) -> StoreResult<Registered>;
        fn node_stopped(&self, node: &NodeId, instance: &InstanceId, now: Timestamp) -> StoreResult<()>;
        fn node_list(&self) -> StoreResult<Vec<NodeStatus>>;
        fn node_sessions(&self, from: Timestamp, to: Timestamp) -> StoreResult<Vec<takt_core::node::NodeSession>>;
        fn runs_between(&self, job: Option<JobId>, from: Timestamp, to: Timestamp) -> StoreResult<Vec<Run>>;
        fn run_attempts(&self, run: RunId) -> StoreResult<Vec<takt_core::attempt::Attempt>>;
        fn attempts_between(&self, job: Option<JobId>, from: Timestamp, to: Timestamp) -> StoreResult<Vec<takt_core::attempt::Attempt>>;
        fn log_append(&self, run: RunId, lines: &[LogLine]) -> StoreResult<()>;
        fn log_list(&self, run: RunId, after: Option<u64>, limit: usize) -> StoreResult<Vec<(u64, LogLine)>>;
        fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts>;
        fn pause(&self, target: &PauseTarget, pause: &Pause) -> StoreResult<Vec<JobId>>;
        fn resume(&self, target: &PauseTarget, now: Timestamp) -> StoreResult<Resumed>;
        fn job_paused(&self, id: JobId) -> StoreResult<Option<(PauseTarget, Pause)>>;
        fn node_paused(&self, node: &NodeId) -> StoreResult<Option<Pause>>;
        fn pause_list(&self) -> StoreResult<Vec<(PauseTarget, Pause)>>;
        fn group_list(&self, now: Timestamp) -> StoreResult<Vec<takt_core::group::GroupStatus>>;
        fn group_status(&self, name: &str, now: Timestamp) -> StoreResult<takt_core::group::GroupStatus>;
        fn group_set(&self, name: &str, max_running: Option<u32>) -> StoreResult<takt_core::group::GroupDef>;
        fn run_cancel(&self, id: RunId, by: &str, now: Timestamp) -> StoreResult<CancelOutcome>;
        fn cancel_requests(&self, node: &NodeId) -> StoreResult<Vec<CancelRequest>>;
        fn cancel_request_of(&self, id: RunId) -> StoreResult<Option<CancelRequest>>;
        fn run_backfill(&self, id: JobId, from: Timestamp, to: Timestamp, max: usize, now: Timestamp) -> StoreResult<Backfilled>;
        fn token_insert(&self, token: &NewToken) -> StoreResult<ApiToken>;
        fn token_list(&self) -> StoreResult<Vec<ApiToken>>;
        fn token_revoke(&self, name: &str, now: Timestamp) -> StoreResult<ApiToken>;
        fn action_insert(&self, action: &OperatorAction) -> StoreResult<()>;
        fn action_list(&self, job: Option<&str>, limit: usize) -> StoreResult<Vec<OperatorAction>>;
        fn alert_open(&self, key: &AlertKey, episode: &str, now: Timestamp) -> StoreResult<bool>;
        fn alert_close(&self, key: &AlertKey, now: Timestamp) -> StoreResult<bool>;
        fn alert_delivery_add(&self, delivery: &AlertDelivery) -> StoreResult<i64>;
        fn alert_delivery_list(&self, limit: usize) -> StoreResult<Vec<AlertDelivery>>;
        fn run_children(&self, parent: RunId) -> StoreResult<Vec<Run>>;
        fn run_last_success_fire(&self, job: JobId, before: Timestamp) -> StoreResult<Option<Timestamp>>;
        fn run_set_params(&self, id: RunId, attempt: u32, params_json: &str) -> StoreResult<()>;
    }
}

/// The next run event: its fire time, and its state once it finished (`None`: started).
async fn next(
    events: &mut tokio::sync::broadcast::Receiver<SchedulerEvent>,
    label: &str,
) -> (Timestamp, Option<RunState>) {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(20), events.recv())
            .await
            .unwrap_or_else(|_| panic!("{label}: no run event within 20 s"))
            .expect("events");
        match e {
            SchedulerEvent::Started { fire_time, .. } => return (fire_time, None),
            SchedulerEvent::Finished {
                fire_time, state, ..
            } => return (fire_time, Some(state)),
            _ => {}
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Away {
    /// The host was stopped: it starts 27 s after the job's first fire.
    Stopped,
    /// The host ran (the first fire ran), then its database was unreachable for 27 s.
    Outage,
}

const MISFIRES: [(&str, MisfireAction); 3] = [
    ("skip", MisfireAction::Skip),
    ("fire-once", MisfireAction::FireOnceNow),
    ("fire-all:3", MisfireAction::FireAll { max: 3 }),
];

const OVERLAPS: [OverlapPolicy; 4] = [
    OverlapPolicy::Skip,
    OverlapPolicy::QueueOne,
    OverlapPolicy::Allow,
    OverlapPolicy::CancelRunning,
];

/// The fires (seconds from t0) that run after the 27 s away, by misfire policy; fires are
/// every 2 s, so at 27 s the fire at 26 is on time (1 s late) and the older ones misfires.
fn ran_after(misfire: MisfireAction) -> Vec<i64> {
    match misfire {
        MisfireAction::Skip | MisfireAction::FireOnceNow => vec![26],
        MisfireAction::FireAll { .. } => vec![20, 22, 24, 26],
    }
}

async fn case(misfire: (&str, MisfireAction), overlap: OverlapPolicy, away: Away) {
    let label = format!("misfire {} / overlap {overlap} / {away:?}", misfire.0);
    let down = Arc::new(AtomicBool::new(false));
    let store = Switch {
        inner: MemoryStore::new(),
        down: down.clone(),
    };
    let every = Interval::new(2, Some(t0())).unwrap();
    let mut job = JobDef::new("collect", "testing::echo")
        .unwrap()
        .with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()));
    job.misfire = MisfirePolicy::new(misfire.1).with_lateness(Duration::from_secs(2));
    job.overlap = overlap;
    job.next_fire = Some(t0());
    let id = store.job_insert(&job, t0()).await.unwrap().id.unwrap();

    let start = match away {
        Away::Stopped => at(27),
        Away::Outage => t0(),
    };
    let clock = Arc::new(TestClock::new(start));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let mut config = SchedulerConfig::new(NodeId("node-a".into()));
    config.lease = Duration::from_secs(600);
    config.renew_every = Duration::from_secs(200);
    let scheduler = Scheduler::new(
        config,
        store.clone(),
        plugins(),
        Executor::new(ExecutorConfig::default()),
        dyn_clock,
    );
    let mut events = scheduler.subscribe();
    let handle = scheduler.start().await.expect("the scheduler starts");
    let mut expected = ran_after(misfire.1);
    if let Away::Outage = away {
        // The first fire runs, then the database goes away for 27 s.
        assert_eq!(next(&mut events, &label).await, (t0(), None), "{label}");
        assert_eq!(
            next(&mut events, &label).await,
            (t0(), Some(RunState::Succeeded)),
            "{label}"
        );
        down.store(true, Ordering::SeqCst);
        clock.advance(Duration::from_secs(27));
        handle.wake();
        tokio::time::sleep(Duration::from_millis(700)).await;
        down.store(false, Ordering::SeqCst);
        handle.wake();
    }
    let mut started = Vec::new();
    let mut finished = Vec::new();
    while finished.len() < expected.len() {
        match next(&mut events, &label).await {
            (fire, None) => started.push(fire),
            (fire, Some(state)) => {
                assert_eq!(state, RunState::Succeeded, "{label}: {fire}");
                finished.push(fire);
            }
        }
    }
    // Back on schedule: the next fire runs as usual.
    clock.advance(Duration::from_secs(1));
    loop {
        match next(&mut events, &label).await {
            (fire, None) => started.push(fire),
            (fire, Some(_)) if fire == at(28) => break,
            (fire, Some(state)) => panic!("{label}: unexpected end of {fire} ({state})"),
        }
    }
    handle.shutdown(Duration::from_secs(1)).await;

    expected.push(28);
    let expected: Vec<Timestamp> = expected.into_iter().map(at).collect();
    if overlap == OverlapPolicy::Allow {
        started.sort();
    }
    assert_eq!(
        started, expected,
        "{label}: the kept fires start in fire-time order"
    );
    let runs = store
        .run_list(&RunFilter {
            job: Some(id),
            state: None,
            limit: 1000,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    let first = match away {
        Away::Stopped => 0,
        Away::Outage => 2,
    };
    let mut records: Vec<(Timestamp, RunState, Option<SkipReason>)> = runs
        .iter()
        .map(|r| (r.fire_time, r.state, r.skip_reason))
        .collect();
    records.sort_by_key(|r| r.0);
    let want: Vec<(Timestamp, RunState, Option<SkipReason>)> = (0..=28)
        .step_by(2)
        .filter(|s| *s >= first || matches!(away, Away::Outage) && *s == 0)
        .map(|s| {
            let fire = at(s);
            if s == 0 && matches!(away, Away::Outage) || expected.contains(&fire) {
                (fire, RunState::Succeeded, None)
            } else {
                (fire, RunState::Skipped, Some(SkipReason::Misfire))
            }
        })
        .collect();
    assert_eq!(
        records, want,
        "{label}: one record per fire, misfires skipped as misfires, none as overlaps"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_host_stop_every_misfire_policy_under_every_overlap_policy() {
    for misfire in MISFIRES {
        for overlap in OVERLAPS {
            case(misfire, overlap, Away::Stopped).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_database_outage_every_misfire_policy_under_every_overlap_policy() {
    for misfire in MISFIRES {
        for overlap in OVERLAPS {
            case(misfire, overlap, Away::Outage).await;
        }
    }
}
