//! The embedding API: [`HostBuilder`] with plugins compiled into the program
//! ([`static_plugin!`]) next to plugin files, on the reference store and a test clock.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use takt_core::job::JobDef;
use takt_core::run::RunState;
use takt_core::store::Store;
use takt_core::store::memory::MemoryStore;
use takt_host::embed::{HostBuilder, HostError};
use takt_host::plugins::{LoadOptions, STATIC_ORIGIN};
use takt_host::scheduler::{Clock, SchedulerEvent, TestClock};
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};
use takt_plugin_api::static_plugin;

const WAIT: Duration = Duration::from_secs(20);

fn t0() -> Timestamp {
    "2026-06-01T00:00:00Z".parse().unwrap()
}

#[derive(Deserialize)]
struct Count {
    by: usize,
}

#[derive(Serialize)]
struct Counted {
    total: usize,
}

/// A static plugin whose handler reaches state of the embedding program (captured by the
/// build closure): the reason to compile a plugin in rather than ship a file.
fn counter_plugin(counter: Arc<AtomicUsize>) -> Plugin {
    Plugin::new("mes")
        .handler(
            "count",
            "adds to the program's counter",
            move |ctx: &JobContext, p: Count| {
                tracing::info!("counting by {}", p.by);
                let total = counter.fetch_add(p.by, Ordering::SeqCst) + p.by;
                let _ = ctx;
                Ok(Counted { total })
            },
        )
        .handler(
            "explode",
            "panics",
            |_: &JobContext, (): ()| -> Result<(), JobError> { panic!("static boom") },
        )
}

async fn finished(
    events: &mut tokio::sync::broadcast::Receiver<SchedulerEvent>,
) -> (RunState, takt_core::run::RunId) {
    loop {
        let e = tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("a run finishes in time")
            .expect("events open");
        if let SchedulerEvent::Finished { state, run, .. } = e {
            return (state, run);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_plugins_run_beside_plugin_files_through_the_same_abi() {
    let counter = Arc::new(AtomicUsize::new(0));
    let captured = counter.clone();
    let mes = static_plugin!(move || counter_plugin(captured)).expect("a valid static plugin");
    // A second static plugin in the same binary dispatches to its own handlers.
    let other = static_plugin!(|| Plugin::new("other").handler(
        "echo",
        "returns its params",
        |_: &JobContext, v: serde_json::Value| Ok(v)
    ))
    .expect("valid");

    let dir = common::build(&["takt-plugin-testing"]);
    let plugin_dir = std::env::temp_dir().join(format!("takt-embed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&plugin_dir);
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let file = common::cdylib(&dir, "takt-plugin-testing");
    std::fs::copy(&file, plugin_dir.join(file.file_name().unwrap())).unwrap();

    let store = MemoryStore::default();
    let clock = Arc::new(TestClock::new(t0()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let host = HostBuilder::new(store.clone())
        .plugin_dir(&plugin_dir)
        .load_options(LoadOptions {
            shadow_dir: std::env::temp_dir().join("takt-embed-test-shadow"),
            ..LoadOptions::default()
        })
        .static_plugin(mes)
        .static_plugin(other)
        .node("embedded-1")
        .capacity(2)
        .clock(dyn_clock)
        .require_all_plugins(true)
        .start()
        .await
        .expect("the host starts");
    let set = host.plugins();
    let names: Vec<(&str, String)> = set
        .plugins()
        .iter()
        .map(|p| (p.name.as_str(), p.file.display().to_string()))
        .collect();
    assert!(
        names.contains(&("mes", STATIC_ORIGIN.to_string())),
        "{names:?}"
    );
    assert!(names.iter().any(|(n, _)| *n == "testing"), "{names:?}");
    let mut events = host.subscribe();

    let mut job = JobDef::new("count", "mes::count").unwrap();
    job.params_json = r#"{"by": 5}"#.to_string();
    let id = host.add_job(job).await.unwrap().id.unwrap();
    host.trigger(id).await.unwrap();
    let (state, run) = finished(&mut events).await;
    assert_eq!(state, RunState::Succeeded);
    assert_eq!(
        counter.load(Ordering::SeqCst),
        5,
        "the handler reached program state"
    );
    let record = store.run_get(run).await.unwrap().unwrap();
    assert_eq!(record.result_json.as_deref(), Some(r#"{"total":5}"#));
    assert_eq!(
        record.node_id.as_ref().map(|n| n.0.as_str()),
        Some("embedded-1")
    );
    let log = store.log_list(run, None, 10).await.unwrap();
    assert!(
        log.iter().any(|(_, l)| l.message.contains("counting by 5")),
        "tracing in a static handler reaches the run log: {log:?}"
    );

    // The file plugin and the second static plugin, side by side.
    let mut echo = JobDef::new("file-echo", "testing::echo").unwrap();
    echo.params_json = r#"{"x": 1}"#.to_string();
    let echo_id = host.add_job(echo).await.unwrap().id.unwrap();
    let mut other_job = JobDef::new("static-echo", "other::echo").unwrap();
    other_job.params_json = r#"{"y": 2}"#.to_string();
    let other_id = host.add_job(other_job).await.unwrap().id.unwrap();
    clock.advance(Duration::from_secs(1));
    host.trigger(echo_id).await.unwrap();
    host.trigger(other_id).await.unwrap();
    let mut results = Vec::new();
    for _ in 0..2 {
        let (state, run) = finished(&mut events).await;
        assert_eq!(state, RunState::Succeeded);
        results.push(
            store
                .run_get(run)
                .await
                .unwrap()
                .unwrap()
                .result_json
                .unwrap(),
        );
    }
    assert!(results.iter().any(|r| r == r#"{"y":2}"#), "{results:?}");
    assert!(results.iter().any(|r| r.contains("\"x\":1")), "{results:?}");

    // A panic in a static handler fails the run and leaves the host running.
    let boom = host
        .add_job(JobDef::new("boom", "mes::explode").unwrap())
        .await
        .unwrap()
        .id
        .unwrap();
    clock.advance(Duration::from_secs(1));
    host.trigger(boom).await.unwrap();
    let (state, run) = finished(&mut events).await;
    assert_eq!(state, RunState::Failed);
    let error = store.run_get(run).await.unwrap().unwrap().error.unwrap();
    assert!(error.contains("handler panicked: static boom"), "{error}");

    host.shutdown(Duration::from_secs(1)).await;
    let _ = std::fs::remove_dir_all(&plugin_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_or_clashing_static_plugins_are_refused_with_the_reason() {
    let Err(e) = static_plugin!(|| Plugin::new("Bad Name")) else {
        panic!("an invalid name must be refused");
    };
    assert!(
        e.starts_with("invalid static plugin: plugin name \"Bad Name\" is invalid"),
        "{e}"
    );
    let Err(dup) = static_plugin!(|| Plugin::new("dup")
        .handler("x", "", |_: &JobContext, (): ()| Ok(()))
        .handler("x", "", |_: &JobContext, (): ()| Ok(())))
    else {
        panic!("a duplicate handler must be refused");
    };
    assert!(dup.contains("handler \"x\" is registered twice"), "{dup}");

    // Two static plugins of one name: the second is refused and the host does not start.
    let a = static_plugin!(|| Plugin::new("twin")).expect("valid");
    let b = static_plugin!(|| Plugin::new("twin")).expect("valid");
    let err = match HostBuilder::new(MemoryStore::default())
        .static_plugin(a)
        .static_plugin(b)
        .start()
        .await
    {
        Err(e) => e,
        Ok(_) => panic!("two plugins named twin must not start"),
    };
    assert!(matches!(err, HostError::Plugin(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("static plugin \"twin\" has the name of the plugin loaded from <static>"),
        "{text}"
    );
    assert!(text.contains("rename one of the two plugins"), "{text}");

    // A missing plugin directory with require_all_plugins: refused, naming the directory.
    let missing = std::env::temp_dir().join("takt-embed-no-such-dir");
    let err = match HostBuilder::new(MemoryStore::default())
        .plugin_dir(&missing)
        .require_all_plugins(true)
        .start()
        .await
    {
        Err(e) => e,
        Ok(_) => panic!("a missing plugin directory must refuse the start"),
    };
    assert!(
        err.to_string().contains("cannot read the plugin directory"),
        "{err}"
    );
}

/// On the system clock, fires are claimed ahead ([`SchedulerConfig::lookahead`], here its
/// largest value, 500 ms) and handed to the executor at once, yet every body starts at its
/// fire time, never before: the executor's thread waits for it. A body that ignored the wait
/// would start up to half a second early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_claimed_ahead_start_at_their_fire_time_never_before() {
    use std::sync::Mutex;
    use std::time::SystemTime;
    use takt_core::run::NodeId;
    use takt_core::schedule::{Interval, Rule, Schedule, Zone};
    use takt_host::scheduler::{MAX_LOOKAHEAD, SchedulerConfig};

    type Starts = Arc<Mutex<Vec<(Timestamp, Timestamp)>>>;
    let starts: Starts = Arc::default();
    let seen = starts.clone();
    let plugin = static_plugin!(move || Plugin::new("punctual").handler(
        "note",
        "notes its fire time and when its body started",
        move |ctx: &JobContext, (): ()| {
            let now = Timestamp::try_from(SystemTime::now()).expect("a representable now");
            seen.lock()
                .unwrap()
                .push((ctx.fire_time().try_into().unwrap(), now));
            Ok(())
        }
    ))
    .expect("a valid static plugin");

    let mut config = SchedulerConfig::new(NodeId("punctual".into()));
    config.lookahead = MAX_LOOKAHEAD;
    let store = MemoryStore::default();
    let host = HostBuilder::new(store.clone())
        .static_plugin(plugin)
        .scheduler_config(config)
        .start()
        .await
        .expect("the host starts");
    let mut job = JobDef::new("every-second", "punctual::note").unwrap();
    job.schedule = Some(Schedule::new(
        Rule::Interval(Interval::new(1, None).unwrap()),
        Zone::utc(),
    ));
    host.add_job(job).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3_600)).await;
    host.shutdown(Duration::from_secs(5)).await;

    let starts = starts.lock().unwrap().clone();
    assert!(starts.len() >= 2, "fires seen: {starts:?}");
    for (fire, started) in &starts {
        let early = fire.duration_since(*started);
        // The clock readings of the loop and of the body may differ by microseconds.
        assert!(
            early <= jiff::SignedDuration::from_millis(1),
            "the body of the fire at {fire} started {early:?} before it"
        );
        let late = started.duration_since(*fire);
        assert!(
            late < jiff::SignedDuration::from_secs(1),
            "the body of the fire at {fire} started {late:?} after it"
        );
    }
}

/// An operator's second Ctrl-C: `shutdown(Duration::ZERO)` while a long drain is under way
/// cancels the running run at once — recorded cancelled, reason shutdown — and the first
/// call returns as soon as the stop is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_shutdown_cuts_the_drain_short() {
    let plugin = static_plugin!(|| Plugin::new("sleepy").handler(
        "nap",
        "sleeps politely for two minutes",
        |ctx: &JobContext, (): ()| -> Result<(), JobError> { ctx.sleep(Duration::from_secs(120)) },
    ))
    .expect("a valid static plugin");
    let store = MemoryStore::default();
    let host = HostBuilder::new(store.clone())
        .static_plugin(plugin)
        .node("n")
        .start()
        .await
        .expect("the host starts");
    let mut events = host.subscribe();
    let job = host
        .add_job(JobDef::new("nap", "sleepy::nap").unwrap())
        .await
        .unwrap();
    host.trigger(job.id.unwrap()).await.unwrap();
    let run = loop {
        let e = tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("the run starts in time")
            .expect("events open");
        if let SchedulerEvent::Started { run, .. } = e {
            break run;
        }
    };
    let first = {
        let handle = (*host).clone();
        tokio::spawn(async move { handle.shutdown(Duration::from_secs(600)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!first.is_finished(), "the first shutdown drains");
    let t0 = std::time::Instant::now();
    host.shutdown(Duration::ZERO).await;
    tokio::time::timeout(WAIT, first)
        .await
        .expect("the drain was cut short")
        .expect("the first shutdown returns");
    assert!(t0.elapsed() < WAIT);
    let r = store.run_get(run).await.unwrap().unwrap();
    assert_eq!(r.state, RunState::Cancelled, "{r:?}");
    assert_eq!(r.error.as_deref(), Some("cancelled (shutdown)"));
}
