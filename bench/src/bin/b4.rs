//! B4 — punctuality.
//!
//! (a) 100 every-second schedules (`* * * * * *`, UTC) for `--seconds` seconds (default 60):
//! lateness = wall time at body start − the fire's nominal time. takt hands the body its fire
//! time (`JobContext::fire_time`); tokio-cron-scheduler does not, so its nominal time is the
//! second boundary the body started in (its ticks are never early, and a lateness of a second
//! or more would show up as a missed fire). Only fires whose nominal time lies in the measured
//! window count; expected = 100 × seconds; missed = expected − distinct (job, fire) pairs seen;
//! duplicates = bodies − distinct pairs.
//!
//! (b) One job due "now" on an idle host: latency from the call that makes it due
//! (takt: `trigger(id)` of a manual job; tokio-cron-scheduler: `add` of a zero-delay one-shot
//! job on a running scheduler) to its body start, repeated `--reps` times (default 200; the
//! peer, which ticks every 500 ms, `--peer-reps`, default 60).
//!
//! `cargo run --release --manifest-path bench/Cargo.toml --bin b4 [-- --seconds 60 --json]`

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use takt_bench::probe::Probe;
use takt_bench::{Args, print_table, quantile, remove_db, sorted, temp_db};
use takt_core::job::{JobDef, JobId};
use takt_core::run::NodeId;
use takt_core::schedule::cron::CronExpr;
use takt_core::schedule::{Rule, Schedule, Zone};
use takt_core::store::Store;
use takt_core::store::memory::MemoryStore;
use takt_host::embed::HostBuilder;
use takt_host::scheduler::SchedulerConfig;
use takt_host::store::{SqliteOptions, SqliteStore};
use takt_plugin_api::abi::PluginRef;
use takt_plugin_api::sdk::{JobContext, Plugin};
use takt_plugin_api::static_plugin;
use tokio::sync::mpsc;
use tokio_cron_scheduler::{Job, JobScheduler};

const JOBS: usize = 100;
/// takt's capacity and claim batch for (a): room for all 100 fires of a second at once.
const CAPACITY: usize = 128;
const BATCH: usize = 128;

/// What the bodies record: (job, nominal fire time, body start), times as Unix ms.
type Samples = Arc<Mutex<Vec<(String, f64, f64)>>>;

fn unix_ms(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64() * 1e3,
        Err(e) => -e.duration().as_secs_f64() * 1e3,
    }
}

/// Figures of part (a) for one contender.
struct Punctuality {
    label: String,
    settings: String,
    lateness_ms: Vec<f64>,
    /// Per nominal second: the lateness of its first body, and last − first body start.
    first_ms: Vec<f64>,
    spread_ms: Vec<f64>,
    expected: usize,
    distinct: usize,
    bodies: usize,
}

/// Figures of part (b) for one contender.
struct Idle {
    label: String,
    latency_ms: Vec<f64>,
    lost: usize,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let seconds = args.num("seconds", 60) as usize;
    let reps = args.num("reps", 200) as usize;
    let peer_reps = args.num("peer-reps", 60) as usize;

    let samples: Samples = Arc::default();
    let (stamp_tx, mut stamps) = mpsc::unbounded_channel::<Instant>();
    let s = samples.clone();
    let plugin = static_plugin!(move || Plugin::new("bench")
        .handler(
            "tick",
            "records its fire time and start",
            move |ctx: &JobContext, (): ()| {
                // Read the clock first: this is the body start.
                let now = unix_ms(SystemTime::now());
                let fire = unix_ms(ctx.fire_time());
                s.lock().unwrap_or_else(|e| e.into_inner()).push((
                    ctx.job_name().to_string(),
                    fire,
                    now,
                ));
                Ok(())
            }
        )
        .handler(
            "stamp",
            "sends the instant its body started",
            move |_: &JobContext, (): ()| {
                let _ = stamp_tx.send(Instant::now());
                Ok(())
            }
        ))
    .expect("a valid static plugin");

    let probe_kind = args.num("probe", 0);
    if probe_kind != 0 {
        // `--probe 1` (MemoryStore) / `--probe 2` (SqliteStore): that takt contender of (a)
        // only, with every store call timed.
        if probe_kind == 2 {
            let path = temp_db("b4probe");
            let store = SqliteStore::open(&path, &SqliteOptions::default()).expect("sqlite");
            probe(Probe::new(store), "SqliteStore", plugin, &samples, seconds).await;
            remove_db(&path);
        } else {
            probe(
                Probe::new(MemoryStore::new()),
                "MemoryStore",
                plugin,
                &samples,
                seconds,
            )
            .await;
        }
        return;
    }

    let mut punct = Vec::new();
    if !args.json {
        eprintln!("B4a: takt + MemoryStore, {seconds} s …");
    }
    punct
        .push(takt_punctuality(MemoryStore::new(), "MemoryStore", plugin, &samples, seconds).await);
    let path = temp_db("b4a");
    if !args.json {
        eprintln!("B4a: takt + SqliteStore, {seconds} s …");
    }
    let store = SqliteStore::open(&path, &SqliteOptions::default()).expect("sqlite opens");
    punct.push(takt_punctuality(store, "SqliteStore", plugin, &samples, seconds).await);
    remove_db(&path);
    if !args.json {
        eprintln!("B4a: tokio-cron-scheduler, {seconds} s …");
    }
    punct.push(tokio_cron_punctuality(seconds).await);

    let mut idle = Vec::new();
    if !args.json {
        eprintln!("B4b: idle latency, {reps} triggers per takt store, {peer_reps} peer adds …");
    }
    idle.push(takt_idle(MemoryStore::new(), "MemoryStore", plugin, &mut stamps, reps).await);
    let path = temp_db("b4b");
    let store = SqliteStore::open(&path, &SqliteOptions::default()).expect("sqlite opens");
    idle.push(takt_idle(store, "SqliteStore", plugin, &mut stamps, reps).await);
    remove_db(&path);
    idle.push(tokio_cron_idle(peer_reps).await);

    report(&args, seconds, &punct, &idle);
}

/// Runs (a) for one takt store wrapped in the probe and prints where the store time went.
async fn probe<S: Store + Clone + 'static>(
    store: Probe<S>,
    name: &str,
    plugin: PluginRef,
    samples: &Samples,
    seconds: usize,
) {
    let p = takt_punctuality(store.clone(), name, plugin, samples, seconds).await;
    let s = sorted(&p.lateness_ms);
    println!(
        "probe: p50 {:.2} ms, p99 {:.2} ms; first body {:.2} ms, last − first {:.2} ms",
        quantile(&s, 0.5),
        quantile(&s, 0.99),
        quantile(&sorted(&p.first_ms), 0.5),
        quantile(&sorted(&p.spread_ms), 0.5)
    );
    for (name, calls, took) in store.report() {
        println!(
            "  {name:<26} {calls:>7} calls  {:>9.1} ms  {:>8.1} µs/call",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e6 / calls as f64
        );
    }
}

fn report(args: &Args, seconds: usize, punct: &[Punctuality], idle: &[Idle]) {
    if args.json {
        let a: Vec<serde_json::Value> = punct
            .iter()
            .map(|p| {
                let s = sorted(&p.lateness_ms);
                let within = s.iter().filter(|l| l.abs() <= 50.0).count();
                serde_json::json!({
                    "contender": p.label,
                    "settings": p.settings,
                    "lateness_ms": {
                        "p50": quantile(&s, 0.5),
                        "p99": quantile(&s, 0.99),
                        "max": s.last(),
                        "min": s.first(),
                    },
                    "first_body_of_second_ms_p50": quantile(&sorted(&p.first_ms), 0.5),
                    "last_minus_first_body_ms_p50": quantile(&sorted(&p.spread_ms), 0.5),
                    "within_50ms_percent": 100.0 * within as f64 / p.expected as f64,
                    "expected": p.expected,
                    "distinct_fires": p.distinct,
                    "bodies": p.bodies,
                    "missed": p.expected.saturating_sub(p.distinct),
                    "duplicates": p.bodies - p.distinct,
                })
            })
            .collect();
        let b: Vec<serde_json::Value> = idle
            .iter()
            .map(|i| {
                let s = sorted(&i.latency_ms);
                serde_json::json!({
                    "contender": i.label,
                    "reps": i.latency_ms.len(),
                    "lost": i.lost,
                    "latency_ms": {
                        "p50": quantile(&s, 0.5),
                        "p99": quantile(&s, 0.99),
                        "max": s.last(),
                    },
                })
            })
            .collect();
        let doc = serde_json::json!({
            "bench": "B4",
            "schedules": JOBS,
            "seconds": seconds,
            "goal": "p99 lateness <= 5 ms (memory/SQLite); 100 % within ±50 ms",
            "punctuality": a,
            "idle_latency": b,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return;
    }
    println!("\nB4a: {JOBS} every-second schedules for {seconds} s (lateness, ms)\n");
    let rows: Vec<Vec<String>> = punct
        .iter()
        .map(|p| {
            let s = sorted(&p.lateness_ms);
            // A fire counts as within ±50 ms once; a missed fire is never within.
            let within = s.iter().filter(|l| l.abs() <= 50.0).count();
            vec![
                format!("{} ({})", p.label, p.settings),
                format!("{:.2}", quantile(&s, 0.5)),
                format!("{:.2}", quantile(&s, 0.99)),
                format!("{:.2}", s.last().copied().unwrap_or(f64::NAN)),
                format!("{:.2} %", 100.0 * within as f64 / p.expected as f64),
                format!("{} / {}", p.distinct, p.expected),
                p.expected.saturating_sub(p.distinct).to_string(),
                (p.bodies - p.distinct).to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "contender",
            "p50",
            "p99",
            "max",
            "within ±50 ms",
            "fires seen",
            "missed",
            "duplicates",
        ],
        &rows,
    );
    println!("\nPer nominal second (median over the seconds): lateness of the first body, and");
    println!("the spread from the first to the last of the 100 bodies of that second (ms)\n");
    let rows: Vec<Vec<String>> = punct
        .iter()
        .map(|p| {
            vec![
                p.label.clone(),
                format!("{:.2}", quantile(&sorted(&p.first_ms), 0.5)),
                format!("{:.2}", quantile(&sorted(&p.spread_ms), 0.5)),
            ]
        })
        .collect();
    print_table(&["contender", "first body", "last − first"], &rows);
    println!("\nB4b: one job due now on an idle host (latency to body start, ms)\n");
    let rows: Vec<Vec<String>> = idle
        .iter()
        .map(|i| {
            let s = sorted(&i.latency_ms);
            vec![
                i.label.clone(),
                s.len().to_string(),
                format!("{:.3}", quantile(&s, 0.5)),
                format!("{:.3}", quantile(&s, 0.99)),
                format!("{:.3}", s.last().copied().unwrap_or(f64::NAN)),
                i.lost.to_string(),
            ]
        })
        .collect();
    print_table(&["contender", "reps", "p50", "p99", "max", "lost"], &rows);
}

/// The window of nominal fire times measured: from the second boundary 2 s after now (every
/// job has been added by then) for `seconds` seconds, as Unix ms.
fn window(seconds: usize) -> (f64, f64) {
    let now_s = unix_ms(SystemTime::now()) / 1e3;
    let begin = (now_s.floor() + 2.0) * 1e3;
    (begin, begin + seconds as f64 * 1e3)
}

/// Sleeps until `unix_ms` on the wall clock.
async fn sleep_until_unix(ms: f64) {
    let left = ms - unix_ms(SystemTime::now());
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left / 1e3)).await;
    }
}

/// Turns raw samples into the figures for the window `[begin, end)`.
fn summarise(
    label: &str,
    settings: String,
    raw: &[(String, f64, f64)],
    begin: f64,
    end: f64,
    seconds: usize,
) -> Punctuality {
    let inside: Vec<&(String, f64, f64)> = raw
        .iter()
        .filter(|(_, fire, _)| *fire >= begin && *fire < end)
        .collect();
    let distinct: HashSet<(&str, i64)> = inside
        .iter()
        .map(|(job, fire, _)| (job.as_str(), fire.round() as i64))
        .collect();
    let mut per_second: std::collections::BTreeMap<i64, (f64, f64)> = Default::default();
    for (_, fire, at) in &inside {
        let e = per_second
            .entry(fire.round() as i64)
            .or_insert((f64::INFINITY, f64::NEG_INFINITY));
        e.0 = e.0.min(at - fire);
        e.1 = e.1.max(at - fire);
    }
    Punctuality {
        label: label.to_string(),
        settings,
        lateness_ms: inside.iter().map(|(_, fire, at)| at - fire).collect(),
        first_ms: per_second.values().map(|(first, _)| *first).collect(),
        spread_ms: per_second.values().map(|(f, l)| l - f).collect(),
        expected: JOBS * seconds,
        distinct: distinct.len(),
        bodies: inside.len(),
    }
}

async fn takt_punctuality<S: Store + Clone + 'static>(
    store: S,
    store_name: &str,
    plugin: PluginRef,
    samples: &Samples,
    seconds: usize,
) -> Punctuality {
    let mut config = SchedulerConfig::new(NodeId("bench".into()));
    config.capacity = CAPACITY;
    config.claim_batch = BATCH;
    // `B4_LOOKAHEAD_MS=0` measures claiming at the instant (the behaviour before the
    // lookahead), beside the default in the same build.
    if let Some(ms) = std::env::var("B4_LOOKAHEAD_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        config.lookahead = Duration::from_millis(ms);
    }
    let settings = format!(
        "capacity {}, claim_batch {}, safety_poll {:?}, lease {:?}, lookahead {:?}",
        config.capacity, config.claim_batch, config.safety_poll, config.lease, config.lookahead
    );
    let host = HostBuilder::new(store)
        .static_plugin(plugin)
        .scheduler_config(config)
        .start()
        .await
        .expect("the host starts");
    let every_second = Schedule::new(
        Rule::Cron(CronExpr::parse("* * * * * *").expect("valid cron")),
        Zone::utc(),
    );
    for i in 0..JOBS {
        let job = JobDef::new(&format!("tick-{i}"), "bench::tick")
            .expect("valid job")
            .with_schedule(every_second.clone());
        host.add_job(job).await.expect("job added");
    }
    samples.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let (begin, end) = window(seconds);
    // Fires of the last second of the window are allowed 1.5 s to start.
    sleep_until_unix(end + 1_500.0).await;
    host.shutdown(Duration::from_secs(5)).await;
    let raw = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    summarise(
        &format!("takt + {store_name}"),
        settings,
        &raw,
        begin,
        end,
        seconds,
    )
}

async fn tokio_cron_punctuality(seconds: usize) -> Punctuality {
    let samples: Samples = Arc::default();
    let sched = JobScheduler::new().await.expect("scheduler");
    for i in 0..JOBS {
        let s = samples.clone();
        let name = format!("tick-{i}");
        let job = Job::new("* * * * * *", move |_, _| {
            let now = unix_ms(SystemTime::now());
            // The nominal fire: the second boundary this body started in.
            let fire = (now / 1e3).floor() * 1e3;
            s.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((name.clone(), fire, now));
        })
        .expect("valid cron job");
        sched.add(job).await.expect("job added");
    }
    sched.start().await.expect("scheduler starts");
    let (begin, end) = window(seconds);
    sleep_until_unix(end + 1_500.0).await;
    let mut sched = sched;
    let _ = sched.shutdown().await;
    let raw = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    summarise(
        "tokio-cron-scheduler 0.15.1",
        "JobScheduler::new() defaults: 500 ms tick, channel size 200".to_string(),
        &raw,
        begin,
        end,
        seconds,
    )
}

/// `reps` manual jobs; each is triggered once (a trigger's fire time is now truncated to the
/// second, so re-triggering one job within a second would be the same fire).
async fn takt_idle<S: Store + Clone + 'static>(
    store: S,
    store_name: &str,
    plugin: PluginRef,
    stamps: &mut mpsc::UnboundedReceiver<Instant>,
    reps: usize,
) -> Idle {
    let host = HostBuilder::new(store)
        .static_plugin(plugin)
        .start()
        .await
        .expect("the host starts");
    let mut ids: Vec<JobId> = Vec::with_capacity(reps);
    for i in 0..reps {
        let job = JobDef::new(&format!("idle-{i}"), "bench::stamp").expect("valid job");
        ids.push(host.add_job(job).await.expect("added").id.expect("an id"));
    }
    // Let the loop settle into its idle sleep.
    tokio::time::sleep(Duration::from_millis(200)).await;
    while stamps.try_recv().is_ok() {}
    let mut latency_ms = Vec::with_capacity(reps);
    let mut lost = 0;
    for id in ids {
        let t = Instant::now();
        host.trigger(id).await.expect("triggered");
        match tokio::time::timeout(Duration::from_secs(5), stamps.recv()).await {
            Ok(Some(at)) => latency_ms.push((at - t).as_secs_f64() * 1e3),
            _ => lost += 1,
        }
        // Idle again: the run's end is recorded and the loop back asleep.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.shutdown(Duration::from_secs(5)).await;
    Idle {
        label: format!("takt + {store_name} (trigger, default config: capacity 8)"),
        latency_ms,
        lost,
    }
}

async fn tokio_cron_idle(reps: usize) -> Idle {
    let sched = JobScheduler::new().await.expect("scheduler");
    sched.start().await.expect("scheduler starts");
    let (tx, mut rx) = mpsc::unbounded_channel::<Instant>();
    let mut latency_ms = Vec::with_capacity(reps);
    let mut lost = 0;
    for _ in 0..reps {
        let tx = tx.clone();
        let job = Job::new_one_shot(Duration::ZERO, move |_, _| {
            let _ = tx.send(Instant::now());
        })
        .expect("job");
        let t = Instant::now();
        sched.add(job).await.expect("added");
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(at)) => latency_ms.push((at - t).as_secs_f64() * 1e3),
            _ => lost += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut sched = sched;
    let _ = sched.shutdown().await;
    Idle {
        label: "tokio-cron-scheduler 0.15.1 (add one-shot, zero delay)".to_string(),
        latency_ms,
        lost,
    }
}
