//! B3 — in-memory burst: N (default 20 000) one-off no-op runs due at the same instant.
//!
//! A run counts when its body executes. Each contender is timed from its start (takt: the
//! host's `start()`; tokio-cron-scheduler: `start()`; apalis: building and running the worker)
//! to the body execution of the N-th run. Rounds are interleaved (round 1 of every contender,
//! then round 2, …) so that load drifting on a shared machine hits every contender alike.
//!
//! `cargo run --release --manifest-path bench/Cargo.toml --bin b3 [-- --n 20000 --rounds 3
//! --json]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use apalis::prelude::WorkerBuilderExt;
use apalis::prelude::{Data, MemoryStorage, TaskSink, WorkerBuilder, WorkerContext};
use jiff::Timestamp;
use takt_bench::probe::Probe;
use takt_bench::{Args, Counter, median_min_max, print_table, remove_db, temp_db};
use takt_core::job::JobDef;
use takt_core::policy::MisfirePolicy;
use takt_core::run::NodeId;
use takt_core::schedule::{Rule, Schedule, Zone};
use takt_core::store::Store;
use takt_core::store::memory::MemoryStore;
use takt_host::embed::HostBuilder;
use takt_host::scheduler::SchedulerConfig;
use takt_host::store::{SqliteOptions, SqliteStore};
use takt_plugin_api::abi::PluginRef;
use takt_plugin_api::sdk::{JobContext, Plugin};
use takt_plugin_api::static_plugin;
use tokio_cron_scheduler::{Job, JobScheduler};

/// How long one round may take before it is reported as incomplete.
const ROUND_LIMIT: Duration = Duration::from_secs(120);
/// apalis: in-flight tasks of the one worker (its `concurrency` layer).
const APALIS_CONCURRENCY: usize = 64;

#[derive(Clone, Copy, Debug)]
enum Contender {
    Takt {
        sqlite: bool,
        capacity: usize,
        batch: usize,
    },
    TokioCron,
    Apalis,
}

impl Contender {
    fn label(self) -> String {
        match self {
            Contender::Takt {
                sqlite,
                capacity,
                batch,
            } => format!(
                "takt + {} (capacity {capacity}, claim_batch {batch})",
                if sqlite { "SqliteStore" } else { "MemoryStore" }
            ),
            Contender::TokioCron => "tokio-cron-scheduler 0.15.1 (one-shot jobs)".to_string(),
            Contender::Apalis => {
                format!("apalis 1.0.0 MemoryStorage (concurrency {APALIS_CONCURRENCY})")
            }
        }
    }
}

/// One round's result: seconds to the N-th body, or how many ran before the limit.
enum Outcome {
    Done(f64),
    Incomplete(usize),
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let n = args.num("n", 20_000) as usize;
    let rounds = args.num("rounds", 3) as usize;
    let with_sqlite = args.num("sqlite", 1) != 0;

    // One static plugin for the whole process (a `static_plugin!` use builds once); every
    // takt round registers the same module in its new host and shares the counter.
    let counter = Arc::new(Counter::default());
    let c = counter.clone();
    let plugin = static_plugin!(move || Plugin::new("bench").handler(
        "noop",
        "counts its run and does nothing else",
        move |_: &JobContext, (): ()| {
            c.hit();
            Ok(())
        }
    ))
    .expect("a valid static plugin");

    match args.num("probe", 0) {
        0 => {}
        1 => {
            probe(Probe::new(MemoryStore::new()), plugin, &counter, n).await;
            return;
        }
        _ => {
            let path = temp_db("b3probe");
            let store = SqliteStore::open(&path, &SqliteOptions::default())
                .expect("the SQLite store opens");
            probe(Probe::new(store), plugin, &counter, n).await;
            remove_db(&path);
            return;
        }
    }

    let mut contenders = vec![
        Contender::Takt {
            sqlite: false,
            capacity: 64,
            batch: 64,
        },
        Contender::Takt {
            sqlite: false,
            capacity: 8,
            batch: 32,
        },
        Contender::TokioCron,
        Contender::Apalis,
    ];
    if with_sqlite {
        contenders.push(Contender::Takt {
            sqlite: true,
            capacity: 64,
            batch: 64,
        });
    }

    let mut results: Vec<Vec<Outcome>> = contenders.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, c) in contenders.iter().enumerate() {
            let outcome = match *c {
                Contender::Takt {
                    sqlite,
                    capacity,
                    batch,
                } => {
                    if sqlite {
                        let path = temp_db("b3");
                        let store = SqliteStore::open(&path, &SqliteOptions::default())
                            .expect("the SQLite store opens");
                        let o = takt_round(store, plugin, &counter, n, capacity, batch).await;
                        remove_db(&path);
                        o
                    } else {
                        takt_round(MemoryStore::new(), plugin, &counter, n, capacity, batch).await
                    }
                }
                Contender::TokioCron => tokio_cron_round(&counter, n).await,
                Contender::Apalis => apalis_round(&counter, n).await,
            };
            if !args.json {
                match &outcome {
                    Outcome::Done(s) => eprintln!(
                        "round {}: {} — {:.3} s, {:.0} runs/s",
                        round + 1,
                        c.label(),
                        s,
                        n as f64 / s
                    ),
                    Outcome::Incomplete(k) => eprintln!(
                        "round {}: {} — INCOMPLETE: {k} of {n} runs in {} s",
                        round + 1,
                        c.label(),
                        ROUND_LIMIT.as_secs()
                    ),
                }
            }
            results[i].push(outcome);
        }
    }

    report(&args, n, rounds, &contenders, &results);
}

fn report(
    args: &Args,
    n: usize,
    rounds: usize,
    contenders: &[Contender],
    results: &[Vec<Outcome>],
) {
    // Runs per second of every complete round; a contender with an incomplete round has no
    // rate (it did not execute the burst).
    let rates: Vec<Option<Vec<f64>>> = results
        .iter()
        .map(|rs| {
            rs.iter()
                .map(|o| match o {
                    Outcome::Done(s) => Some(n as f64 / s),
                    Outcome::Incomplete(_) => None,
                })
                .collect()
        })
        .collect();
    let takt_median = rates[0].as_ref().map(|r| median_min_max(r).0);
    if args.json {
        let items: Vec<serde_json::Value> = contenders
            .iter()
            .zip(results)
            .zip(&rates)
            .map(|((c, rs), rate)| {
                let secs: Vec<serde_json::Value> = rs
                    .iter()
                    .map(|o| match o {
                        Outcome::Done(s) => serde_json::json!(s),
                        Outcome::Incomplete(k) => serde_json::json!({ "incomplete_runs": k }),
                    })
                    .collect();
                let stats = rate.as_ref().map(|r| {
                    let (med, min, max) = median_min_max(r);
                    serde_json::json!({ "median": med, "min": min, "max": max })
                });
                serde_json::json!({
                    "contender": c.label(),
                    "seconds_per_round": secs,
                    "runs_per_second": stats,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "bench": "B3",
            "runs": n,
            "rounds": rounds,
            "goal_runs_per_second": 200_000,
            "results": items,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return;
    }
    println!("\nB3: {n} one-off no-op runs due at once, {rounds} rounds (runs/s)\n");
    let rows: Vec<Vec<String>> = contenders
        .iter()
        .zip(results)
        .zip(&rates)
        .map(|((c, rs), rate)| match rate {
            Some(r) => {
                let (med, min, max) = median_min_max(r);
                let ratio = takt_median.map_or("—".to_string(), |t| format!("{:.2}×", t / med));
                vec![
                    c.label(),
                    format!("{med:.0}"),
                    format!("{min:.0}"),
                    format!("{max:.0}"),
                    format!("{:.3}", n as f64 / med),
                    ratio,
                ]
            }
            None => {
                let done: Vec<String> = rs
                    .iter()
                    .map(|o| match o {
                        Outcome::Done(_) => n.to_string(),
                        Outcome::Incomplete(k) => k.to_string(),
                    })
                    .collect();
                vec![
                    c.label(),
                    format!("incomplete ({} of {n} ran per round)", done.join(" / ")),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                ]
            }
        })
        .collect();
    print_table(
        &[
            "contender",
            "median runs/s",
            "min",
            "max",
            "median s",
            "first takt row / this",
        ],
        &rows,
    );
}

/// `--probe 1` (MemoryStore) / `--probe 2` (SqliteStore): one takt round (capacity 64, batch
/// 64) with every store call counted and timed, to see how much of the burst is spent in the
/// store.
async fn probe<S: Store + Clone + 'static>(
    store: Probe<S>,
    plugin: PluginRef,
    counter: &Counter,
    n: usize,
) {
    let outcome =
        takt_round_with(store.clone(), plugin, counter, n, 64, 64, || store.clear()).await;
    match outcome {
        Outcome::Done(s) => println!("probe: {n} runs in {s:.3} s ({:.0} runs/s)", n as f64 / s),
        Outcome::Incomplete(k) => println!("probe: incomplete, {k} of {n}"),
    }
    println!("store calls during the drain (and shutdown), most time first:");
    for (name, calls, took) in store.report() {
        println!(
            "  {name:<26} {calls:>7} calls  {:>9.1} ms  {:>8.1} µs/call",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e6 / calls as f64
        );
    }
}

/// Inserts `n` one-off jobs all due at one instant straight into the store (not timed), then
/// starts a host on it and times the drain.
async fn takt_round<S: Store + Clone + 'static>(
    store: S,
    plugin: PluginRef,
    counter: &Counter,
    n: usize,
    capacity: usize,
    batch: usize,
) -> Outcome {
    takt_round_with(store, plugin, counter, n, capacity, batch, || {}).await
}

/// [`takt_round`], calling `before_start` between the inserts and the start.
async fn takt_round_with<S: Store + Clone + 'static>(
    store: S,
    plugin: PluginRef,
    counter: &Counter,
    n: usize,
    capacity: usize,
    batch: usize,
    before_start: impl FnOnce(),
) -> Outcome {
    let due = Timestamp::now();
    let setup = Instant::now();
    for i in 0..n {
        let mut job = JobDef::new(&format!("b3-{i}"), "bench::noop")
            .expect("a valid job")
            .with_schedule(Schedule::new(Rule::Once(due), Zone::utc()));
        job.next_fire = Some(due);
        // Inserting 20 000 jobs into SQLite takes seconds, all counted as lateness of the
        // burst: with the default 60 s misfire window a slow drain's tail would be skipped as
        // misfires (never executed), so the window is an hour here.
        job.misfire = MisfirePolicy::default().with_lateness(Duration::from_secs(3_600));
        store.job_insert(&job, due).await.expect("job inserted");
    }
    if std::env::var_os("B3_VERBOSE").is_some() {
        eprintln!(
            "  (inserting {n} jobs took {:.1} s)",
            setup.elapsed().as_secs_f64()
        );
    }
    counter.reset(n);
    let mut config = SchedulerConfig::new(NodeId("bench".into()));
    config.capacity = capacity;
    config.claim_batch = batch;
    takt_bench::apply_claim_ahead(&mut config);
    before_start();
    let start = Instant::now();
    let host = HostBuilder::new(store)
        .static_plugin(plugin)
        .scheduler_config(config)
        .start()
        .await
        .expect("the host starts");
    let outcome = match counter.wait(ROUND_LIMIT).await {
        Some(at) => Outcome::Done((at - start).as_secs_f64()),
        None => Outcome::Incomplete(counter.count()),
    };
    host.shutdown(Duration::from_secs(5)).await;
    outcome
}

/// tokio-cron-scheduler: `n` one-shot jobs with a zero delay, added before `start()`. Its
/// internal broadcast channels get room for every activation (with the default 200 the
/// activations of a burst overflow them and runs are lost).
async fn tokio_cron_round(counter: &Arc<Counter>, n: usize) -> Outcome {
    let sched = JobScheduler::new_with_channel_size(n + 1_000)
        .await
        .expect("scheduler");
    counter.reset(n);
    for _ in 0..n {
        let c = counter.clone();
        let job = Job::new_one_shot(Duration::ZERO, move |_, _| {
            c.hit();
        })
        .expect("job");
        sched.add(job).await.expect("job added");
    }
    let start = Instant::now();
    sched.start().await.expect("scheduler starts");
    let outcome = match counter.wait(ROUND_LIMIT).await {
        Some(at) => Outcome::Done((at - start).as_secs_f64()),
        None => Outcome::Incomplete(counter.count()),
    };
    let mut sched = sched;
    let _ = sched.shutdown().await;
    outcome
}

async fn apalis_noop(_: u32, counter: Data<Arc<Counter>>, worker: WorkerContext) {
    if counter.hit() {
        let _ = worker.stop();
    }
}

/// apalis: `n` tasks pushed into a `MemoryStorage` (a channel), then one worker with a
/// concurrency limit drains it; the worker stops itself after the n-th task.
async fn apalis_round(counter: &Arc<Counter>, n: usize) -> Outcome {
    let mut storage = MemoryStorage::<u32>::new();
    for i in 0..n {
        storage.push(i as u32).await.expect("task pushed");
    }
    counter.reset(n);
    let start = Instant::now();
    let worker = WorkerBuilder::new("b3")
        .backend(storage)
        .data(counter.clone())
        .concurrency(APALIS_CONCURRENCY)
        .build(apalis_noop);
    let run = tokio::spawn(worker.run());
    let outcome = match counter.wait(ROUND_LIMIT).await {
        Some(at) => Outcome::Done((at - start).as_secs_f64()),
        None => Outcome::Incomplete(counter.count()),
    };
    run.abort();
    outcome
}
