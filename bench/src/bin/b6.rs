//! B6 — 1, 2 and 4 nodes on one PostgreSQL: N (default 10 000) one-off runs due at once plus
//! C (default 1 000) every-second cron jobs (`* * * * * *`, UTC), for a fixed window.
//!
//! Every node is a separate process (this binary re-executed with `--node`), with its own
//! `PgStore` pool and `Host` (capacity 64, claim batch 64, lookahead batch 1 024 — takt's
//! default is 0, off —, node id `b6-node-<i>`). The parent
//! prepares a fresh schema, starts the nodes at one agreed instant `T0` and lets them run for
//! `--seconds` (default 30); each node records every body it executes (job name, fire time,
//! the instant the body ran) and writes them to a file when it has shut down.
//!
//! Figures per round, from the bodies of all nodes together:
//!
//! * duplicates: body executions of one (job, fire time) beyond the first;
//! * missed: every-second fires due in `[T0 + 2 s, T0 + seconds − 5 s)` (C per second) with no
//!   body by the end of the window; the lateness of the cron bodies; and the fires recorded
//!   as skipped (misfire) in the `runs` table;
//! * drain: N divided by the time from `T0` to the N-th one-off body;
//! * during the drain: the lateness of the cron bodies whose fire is after `T0` and not after
//!   the N-th one-off body — the seconds a burst is being drained. `T0`'s own fires are left
//!   out: they are due as the nodes start, so no scheduler could have claimed them ahead.
//!
//! Peer: apalis-postgres (apalis-peer/, bin `b5-apalis`) drains N tasks with 1, 2 and 4 worker
//! processes (concurrency 64, batch 64 each); apalis-postgres has no durable cron (apalis-cron
//! runs schedules in one process), so the every-second part is takt only.
//!
//! `B6_KEEP=1` keeps each node's file of bodies (`$TMPDIR/takt-b6-<pid>-node<i>.tsv`: job,
//! fire time, body instant in Unix ms) for a look at single seconds.
//!
//! `cargo run --release --manifest-path bench/Cargo.toml --bin b6 [-- --n 10000 --crons 1000
//! --seconds 30 --rounds 3 --nodes 1,2,4 --apalis 1 --json]`

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;
use serde_json::json;
use takt_bench::pg;
use takt_bench::{Args, median_min_max, print_table, quantile, sorted};
use takt_core::job::JobDef;
use takt_core::policy::MisfirePolicy;
use takt_core::run::NodeId;
use takt_core::schedule::cron::CronExpr;
use takt_core::schedule::{Rule, Schedule, Zone};
use takt_core::store::Store;
use takt_host::embed::HostBuilder;
use takt_host::scheduler::SchedulerConfig;
use takt_host::store::{PgOptions, PgStore};
use takt_plugin_api::sdk::{JobContext, Plugin};
use takt_plugin_api::static_plugin;

/// takt's schema in the bench database.
const SCHEMA: &str = "bench_b6_takt";
/// Every node's capacity and claim batch.
const CAPACITY: usize = 64;
/// Every node's `SchedulerConfig::lookahead_batch`: the 1 000 fires of a second and room.
const LOOKAHEAD_BATCH: usize = 1024;
/// Time from the start of a round's set-up to `T0` (the set-up and the nodes' connecting fit in it).
const START_DELAY: Duration = Duration::from_secs(3);

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

/// A body: job name, fire time and execution instant (Unix ms).
type Body = (String, i64, i64);

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let base =
        std::env::var("B6_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    let db = std::env::var("B6_DB").unwrap_or_else(|_| "bench_b6".into());
    if let Some(node) = args.text("node") {
        node_main(&args, &format!("{base}/{db}"), node).await;
        return;
    }
    parent_main(&args, &base, &db).await;
}

/// One node process: connects, waits for `T0`, runs the host for the window, writes its
/// bodies to `--out`.
async fn node_main(args: &Args, url: &str, node: &str) {
    let start_at = args.num("start-at", 0) as i64;
    let seconds = args.num("seconds", 30);
    let out = args.text("out").expect("--out").to_string();
    let bodies: Arc<Mutex<Vec<Body>>> = Arc::default();
    let b = bodies.clone();
    let plugin = static_plugin!(move || Plugin::new("bench").handler(
        "record",
        "notes its job, fire time and start instant",
        move |ctx: &JobContext, (): ()| {
            let at = now_ms();
            let fire = unix_ms(ctx.fire_time());
            b.lock().unwrap_or_else(|e| e.into_inner()).push((
                ctx.job_name().to_string(),
                fire,
                at,
            ));
            Ok(())
        }
    ))
    .expect("a valid static plugin");
    let store = PgStore::connect(&PgOptions::new(url).with_schema(SCHEMA))
        .await
        .expect("the node's store connects");
    let wait = start_at - now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    let mut config = SchedulerConfig::new(NodeId(format!("b6-node-{node}")));
    config.capacity = CAPACITY;
    config.claim_batch = CAPACITY;
    takt_bench::apply_claim_ahead(&mut config);
    // Not takt's default (off): every node claims an instant's 1 000 fires ahead of it,
    // beyond its 64 slots (`TAKT_BENCH_LOOKAHEAD_BATCH=0` for the default).
    takt_bench::apply_lookahead_batch(&mut config, LOOKAHEAD_BATCH);
    let host = HostBuilder::new(store)
        .static_plugin(plugin)
        .scheduler_config(config)
        .start()
        .await
        .expect("the node starts");
    let end = start_at + seconds as i64 * 1_000;
    let left = end - now_ms();
    if left > 0 {
        tokio::time::sleep(Duration::from_millis(left as u64)).await;
    }
    host.shutdown(Duration::from_secs(5)).await;
    drop(host);
    let bodies = std::mem::take(&mut *bodies.lock().unwrap_or_else(|e| e.into_inner()));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&out).expect("the node's file"));
    for (name, fire, at) in bodies {
        writeln!(f, "{name}\t{fire}\t{at}").expect("written");
    }
    f.flush().expect("flushed");
}

/// One round's figures.
#[derive(Clone, Debug, Default)]
struct Figures {
    /// N / seconds from T0 to the N-th one-off body; `None`: the drain did not finish.
    drain_rate: Option<f64>,
    /// One-off bodies seen.
    drained: usize,
    /// Executions of a (job, fire) beyond the first, one-off and cron together.
    duplicates: usize,
    /// Every-second fires expected in the counted window.
    expected: usize,
    /// Of those, fires with no body.
    missed: usize,
    /// Of the missed, fires the store recorded as skipped.
    skipped: i64,
    /// Lateness of cron bodies in the counted window, ms (p50, p99, max).
    late: (f64, f64, f64),
    /// Lateness of cron bodies fired after T0 while the one-offs drained, ms (p50, p99), and
    /// how many there were (0: the drain ended before T0's next second).
    burst_late: (f64, f64, usize),
    /// Bodies per node (takt) or worker process (apalis).
    per_node: Vec<usize>,
}

fn temp_file(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!("takt-b6-{}-{label}", std::process::id()))
}

async fn parent_main(args: &Args, base: &str, db: &str) {
    let n = args.num("n", 10_000) as usize;
    let crons = args.num("crons", 1_000) as usize;
    let seconds = args.num("seconds", 30);
    let rounds = args.num("rounds", 3) as usize;
    let nodes: Vec<usize> = args
        .text("nodes")
        .unwrap_or("1,2,4")
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("--nodes: counts separated by commas")
        })
        .collect();
    let with_peer = args.num("apalis", 1) != 0 && build_peer();

    let admin = pg::connect(&format!("{base}/postgres")).await;
    let existed = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&db])
        .await
        .expect("pg_database readable")
        .is_some();
    if !existed {
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .expect("bench database created");
    }
    let url = format!("{base}/{db}");

    let mut takt: Vec<Vec<Figures>> = nodes.iter().map(|_| Vec::new()).collect();
    let mut peer: Vec<Vec<Figures>> = nodes.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, &k) in nodes.iter().enumerate() {
            let f = takt_round(&url, k, n, crons, seconds).await;
            eprintln!(
                "round {}: takt, {k} node(s) — drain {}; duplicates {}; missed {} of {} \
                 (skipped rows {}); cron lateness p50 {:.0} / p99 {:.0} / max {:.0} ms; during \
                 the drain p50 {:.0} / p99 {:.0} ms of {} fires; bodies per node {:?}",
                round + 1,
                f.drain_rate
                    .map_or(format!("INCOMPLETE ({} of {n})", f.drained), |r| {
                        format!("{r:.0} runs/s")
                    }),
                f.duplicates,
                f.missed,
                f.expected,
                f.skipped,
                f.late.0,
                f.late.1,
                f.late.2,
                f.burst_late.0,
                f.burst_late.1,
                f.burst_late.2,
                f.per_node,
            );
            takt[i].push(f);
            if with_peer {
                let f = apalis_round(&url, k, n, seconds).await;
                eprintln!(
                    "round {}: apalis-postgres, {k} worker process(es) — drain {}; duplicates \
                     {}; bodies per process {:?}",
                    round + 1,
                    f.drain_rate
                        .map_or(format!("INCOMPLETE ({} of {n})", f.drained), |r| format!(
                            "{r:.0} runs/s"
                        )),
                    f.duplicates,
                    f.per_node,
                );
                peer[i].push(f);
            }
        }
    }
    let cleanup = pg::connect(&url).await;
    let _ = cleanup
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; DROP SCHEMA IF EXISTS apalis CASCADE; \
             DROP TABLE IF EXISTS public._sqlx_migrations"
        ))
        .await;
    drop(cleanup);
    if !existed && pg::wait_idle(&admin, db, Duration::from_secs(10)).await {
        let _ = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))
            .await;
    }
    report(args, n, crons, seconds, rounds, &nodes, &takt, &peer);
}

/// Inserts one job with `Store::job_insert` and copies it `count − 1` times in SQL (only the
/// name differs).
async fn insert_copies(store: &PgStore, setup: &tokio_postgres::Client, job: JobDef, count: usize) {
    let name = job.name.to_string();
    let now = Timestamp::now();
    store.job_insert(&job, now).await.expect("job inserted");
    let cols: Vec<String> = setup
        .query(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = 'jobs' \
               AND column_name NOT IN ('id', 'name') ORDER BY ordinal_position",
            &[&SCHEMA],
        )
        .await
        .expect("columns listed")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let cols = cols.join(", ");
    let prefix = name.trim_end_matches('0');
    setup
        .execute(
            &format!(
                "INSERT INTO {SCHEMA}.jobs ({cols}, name) \
                 SELECT {cols}, '{prefix}' || g FROM {SCHEMA}.jobs, generate_series(1, $1) g \
                 WHERE name = '{name}'"
            ),
            &[&(count as i32 - 1)],
        )
        .await
        .expect("jobs copied");
}

async fn takt_round(url: &str, k: usize, n: usize, crons: usize, seconds: u64) -> Figures {
    let setup = pg::connect(url).await;
    setup
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .await
        .expect("old schema dropped");
    // T0: the set-up below takes well under a second.
    let start_at = now_ms() + START_DELAY.as_millis() as i64;
    let store = PgStore::connect(&PgOptions::new(url).with_schema(SCHEMA))
        .await
        .expect("the store connects");
    let due = Timestamp::now();
    let mut once = JobDef::new("b6-once-0", "bench::record")
        .expect("a valid job")
        .with_schedule(Schedule::new(Rule::Once(due), Zone::utc()));
    once.next_fire = Some(due);
    once.misfire = MisfirePolicy::default().with_lateness(Duration::from_secs(3_600));
    insert_copies(&store, &setup, once, n).await;
    let schedule = Schedule::new(
        Rule::Cron(CronExpr::parse("* * * * * *").expect("a valid cron expression")),
        Zone::utc(),
    );
    // The first fire is the first whole second at or after T0, so that no fire is already
    // late when the nodes start.
    let t0 = Timestamp::from_millisecond(start_at - 1).expect("a valid instant");
    let mut every = JobDef::new("b6-cron-0", "bench::record")
        .expect("a valid job")
        .with_schedule(schedule.clone());
    every.next_fire = schedule.next_after(t0).map(|o| o.at);
    insert_copies(&store, &setup, every, crons).await;
    setup
        .batch_execute(&format!("ANALYZE {SCHEMA}.jobs"))
        .await
        .expect("analyzed");
    drop(store);

    let exe = std::env::current_exe().expect("this binary");
    let mut children = Vec::new();
    for i in 0..k {
        let out = temp_file(&format!("node{i}.tsv"));
        let child = Command::new(&exe)
            .args([
                "--node",
                &i.to_string(),
                "--start-at",
                &start_at.to_string(),
            ])
            .args(["--seconds", &seconds.to_string(), "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .spawn()
            .expect("a node process starts");
        children.push((child, out));
    }
    let mut per_node = Vec::new();
    let mut bodies: Vec<Body> = Vec::new();
    for (mut child, out) in children {
        let status = child.wait().expect("the node process ends");
        assert!(status.success(), "a node process failed: {status}");
        let text = std::fs::read_to_string(&out).expect("the node's file");
        if std::env::var_os("B6_KEEP").is_none() {
            let _ = std::fs::remove_file(&out);
        }
        let before = bodies.len();
        for line in text.lines() {
            let mut p = line.split('\t');
            let (Some(name), Some(fire), Some(at)) = (p.next(), p.next(), p.next()) else {
                continue;
            };
            bodies.push((
                name.to_string(),
                fire.parse().expect("fire ms"),
                at.parse().expect("body ms"),
            ));
        }
        per_node.push(bodies.len() - before);
    }
    // Fires the store gave up on (misfire, overlap) in the counted window.
    let from = start_at + 2_000;
    let to = start_at + seconds as i64 * 1_000 - 5_000;
    let skipped: i64 = setup
        .query_one(
            &format!(
                "SELECT count(*) FROM {SCHEMA}.runs r JOIN {SCHEMA}.jobs j ON j.id = r.job_id \
                 WHERE r.state = 'skipped' AND j.name LIKE 'b6-cron-%' \
                   AND r.fire_time >= to_timestamp($1::float8 / 1000) \
                   AND r.fire_time < to_timestamp($2::float8 / 1000)"
            ),
            &[&(from as f64), &(to as f64)],
        )
        .await
        .expect("skipped runs counted")
        .get(0);
    drop(setup);
    let mut f = figures(&bodies, n, crons, start_at, from, to);
    f.skipped = skipped;
    f.per_node = per_node;
    f
}

/// Duplicates, drain rate and (when `crons` > 0) missed fires and lateness from all bodies.
fn figures(bodies: &[Body], n: usize, crons: usize, start_at: i64, from: i64, to: i64) -> Figures {
    let mut seen: HashMap<(&str, i64), usize> = HashMap::new();
    for (name, fire, _) in bodies {
        *seen.entry((name.as_str(), *fire)).or_default() += 1;
    }
    let duplicates = seen.values().map(|c| c - 1).sum();
    let mut once: Vec<i64> = bodies
        .iter()
        .filter(|(name, _, _)| !name.starts_with("b6-cron-"))
        .map(|(_, _, at)| *at)
        .collect();
    once.sort_unstable();
    let drained = once.len();
    let drain_rate = (drained >= n && n > 0)
        .then(|| n as f64 / ((once[n - 1] - start_at) as f64 / 1_000.0).max(1e-3));
    let mut expected = 0;
    let mut missed = 0;
    let mut late = Vec::new();
    let mut burst = Vec::new();
    if crons > 0 {
        // Whole seconds in [from, to).
        let first = (from + 999) / 1_000 * 1_000;
        let mut at = first;
        while at < to {
            expected += crons;
            at += 1_000;
        }
        let mut pairs = 0;
        for (name, fire) in seen.keys() {
            if name.starts_with("b6-cron-") && *fire >= first && *fire < to {
                pairs += 1;
            }
        }
        missed = expected.saturating_sub(pairs);
        for (name, fire, at) in bodies {
            if name.starts_with("b6-cron-") && *fire >= first && *fire < to {
                late.push((at - fire) as f64);
            }
        }
        // T0 is the first whole second at or after the start; the drain ends at the N-th
        // one-off body.
        let t0 = (start_at + 999) / 1_000 * 1_000;
        if let Some(&end) = once.get(n.wrapping_sub(1)) {
            for (name, fire, at) in bodies {
                if name.starts_with("b6-cron-") && *fire > t0 && *fire <= end {
                    burst.push((at - fire) as f64);
                }
            }
        }
    }
    let late = sorted(&late);
    let burst = sorted(&burst);
    Figures {
        drain_rate,
        drained,
        duplicates,
        expected,
        missed,
        skipped: 0,
        late: (
            quantile(&late, 0.5),
            quantile(&late, 0.99),
            late.last().copied().unwrap_or(f64::NAN),
        ),
        burst_late: (quantile(&burst, 0.5), quantile(&burst, 0.99), burst.len()),
        per_node: Vec::new(),
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn peer_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("apalis-peer/Cargo.toml")
}

/// Builds the apalis-postgres peer once and returns whether it built.
fn build_peer() -> bool {
    eprintln!("b6: building the apalis-postgres peer (apalis-peer/, release)…");
    let ok = Command::new(cargo())
        .args(["build", "--release", "--quiet", "--bin", "b5-apalis"])
        .arg("--manifest-path")
        .arg(peer_manifest())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("b6: the apalis-postgres peer did not build; measuring without it");
    }
    ok
}

/// The built peer binary (next to cargo's other release binaries of the peer crate).
fn peer_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("apalis-peer/target"));
    target.join("release/b5-apalis")
}

/// apalis-postgres: N tasks pushed (not timed), then `k` worker processes started at one
/// instant; each prints every payload it runs with the instant, and stops when the queue has
/// nothing left to run (or after the window).
async fn apalis_round(url: &str, k: usize, n: usize, seconds: u64) -> Figures {
    let setup = pg::connect(url).await;
    setup
        .batch_execute(
            "DROP SCHEMA IF EXISTS apalis CASCADE; DROP TABLE IF EXISTS public._sqlx_migrations",
        )
        .await
        .expect("old apalis schema dropped");
    drop(setup);
    let url = format!("{url}?sslmode=disable");
    let bin = peer_binary();
    let pushed = Command::new(&bin)
        .args(["push", "--url", &url, "--runs", &n.to_string()])
        .output()
        .expect("the peer pushes");
    assert!(
        pushed.status.success(),
        "the apalis push failed: {}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let start_at = now_ms() + START_DELAY.as_millis() as i64;
    let mut children = Vec::new();
    for i in 0..k {
        let out = temp_file(&format!("apalis{i}.txt"));
        let file = std::fs::File::create(&out).expect("the worker's file");
        let child = Command::new(&bin)
            .args(["drain", "--url", &url, "--runs", &n.to_string()])
            .args(["--batch", "64", "--concurrency", "64", "--ids", "1"])
            .args(["--worker", &format!("b6-worker-{i}")])
            .args(["--start-at", &start_at.to_string()])
            .args(["--seconds", &seconds.to_string(), "--until-empty", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .expect("an apalis worker process starts");
        children.push((child, out));
    }
    let mut bodies: Vec<Body> = Vec::new();
    let mut per_node = Vec::new();
    for (mut child, out) in children {
        let status = child.wait().expect("the worker process ends");
        let text = std::fs::read_to_string(&out).expect("the worker's file");
        let _ = std::fs::remove_file(&out);
        assert!(
            status.success(),
            "an apalis worker failed: {status}: {text}"
        );
        let before = bodies.len();
        for line in text.lines() {
            let mut p = line.split(' ');
            if p.next() != Some("ran") {
                continue;
            }
            let (Some(id), Some(at)) = (p.next(), p.next()) else {
                continue;
            };
            bodies.push((id.to_string(), 0, at.parse().expect("body ms")));
        }
        per_node.push(bodies.len() - before);
    }
    let mut f = figures(&bodies, n, 0, start_at, 0, 0);
    f.per_node = per_node;
    f
}

#[allow(clippy::too_many_arguments)]
fn report(
    args: &Args,
    n: usize,
    crons: usize,
    seconds: u64,
    rounds: usize,
    nodes: &[usize],
    takt: &[Vec<Figures>],
    peer: &[Vec<Figures>],
) {
    let mm = |v: Vec<f64>| {
        let (m, lo, hi) = median_min_max(&v);
        (m, lo, hi)
    };
    let mut rows = Vec::new();
    let mut items = Vec::new();
    for (contender, results) in [("takt", takt), ("apalis-postgres", peer)] {
        for (&k, fs) in nodes.iter().zip(results) {
            if fs.is_empty() {
                continue;
            }
            let rates: Vec<f64> = fs.iter().filter_map(|f| f.drain_rate).collect();
            let complete = rates.len() == fs.len();
            let (rm, rlo, rhi) = mm(rates.clone());
            let dups: Vec<usize> = fs.iter().map(|f| f.duplicates).collect();
            let missed: Vec<usize> = fs.iter().map(|f| f.missed).collect();
            let skipped: Vec<i64> = fs.iter().map(|f| f.skipped).collect();
            let (p50, _, _) = mm(fs.iter().map(|f| f.late.0).collect());
            let (p99, p99lo, p99hi) = mm(fs.iter().map(|f| f.late.1).collect());
            let burst: Vec<f64> = fs.iter().map(|f| f.burst_late.1).collect();
            let is_takt = contender == "takt";
            rows.push(vec![
                format!("{contender}, {k} node(s)"),
                if complete {
                    format!("{rm:.0} ({rlo:.0}–{rhi:.0})")
                } else {
                    format!(
                        "incomplete in {} of {} rounds (drained {:?})",
                        fs.len() - rates.len(),
                        fs.len(),
                        fs.iter().map(|f| f.drained).collect::<Vec<_>>()
                    )
                },
                format!("{dups:?}"),
                if is_takt {
                    format!("{missed:?} of {}", fs[0].expected)
                } else {
                    "—".into()
                },
                if is_takt {
                    format!("{skipped:?}")
                } else {
                    "—".into()
                },
                if is_takt {
                    format!("{p50:.0} / {p99:.0} ({p99lo:.0}–{p99hi:.0})")
                } else {
                    "—".into()
                },
                if is_takt {
                    format!("{:?}", burst.iter().map(|v| v.round()).collect::<Vec<_>>())
                } else {
                    "—".into()
                },
            ]);
            items.push(json!({
                "contender": contender,
                "nodes": k,
                "drain_runs_per_second": rates,
                "drain_complete": complete,
                "duplicates": dups,
                "missed": missed,
                "expected": fs[0].expected,
                "skipped_rows": skipped,
                "cron_lateness_ms_p50": fs.iter().map(|f| f.late.0).collect::<Vec<_>>(),
                "cron_lateness_ms_p99": fs.iter().map(|f| f.late.1).collect::<Vec<_>>(),
                "cron_lateness_ms_max": fs.iter().map(|f| f.late.2).collect::<Vec<_>>(),
                "drain_cron_lateness_ms_p50": fs.iter().map(|f| f.burst_late.0).collect::<Vec<_>>(),
                "drain_cron_lateness_ms_p99": fs.iter().map(|f| f.burst_late.1).collect::<Vec<_>>(),
                "drain_cron_fires": fs.iter().map(|f| f.burst_late.2).collect::<Vec<_>>(),
                "bodies_per_node": fs.iter().map(|f| f.per_node.clone()).collect::<Vec<_>>(),
            }));
        }
    }
    if args.json {
        let doc = json!({
            "bench": "B6",
            "runs": n,
            "crons": crons,
            "seconds": seconds,
            "rounds": rounds,
            "results": items,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return;
    }
    println!(
        "\nB6: {n} one-off runs due at once + {crons} every-second crons, {seconds} s window, \
         {rounds} rounds (drain: median, min–max; the rest per round)\n"
    );
    print_table(
        &[
            "contender",
            "drain runs/s",
            "duplicates",
            "missed every-second fires",
            "skipped rows",
            "cron lateness p50 / p99 ms",
            "during the drain: cron p99 ms, per round",
        ],
        &rows,
    );
}
