//! B5 — durable drain on PostgreSQL: N (default 20 000) one-off no-op runs due at once,
//! drained by 10 workers; runs per second, transactions (commits) per run and statements per
//! run.
//!
//! Contenders, interleaved round by round on one database (`--db`, default `bench_b5`, created
//! if missing and dropped at the end):
//!
//! * takt: `HostBuilder` on a `PgStore` (own schema `bench_b5_takt`, recreated per round),
//!   capacity 10 with the default claim batch (`DEFAULT_CLAIM_BATCH`, 64 since 2026-12-06,
//!   32 before: a claim takes the free slots and, during the drain, the runs claimed ahead),
//!   and capacity 64 with claim batch 64;
//! * apalis-postgres 1.0 (a child process, `apalis-peer/` bin `b5-apalis`): one worker with
//!   concurrency 10 and fetch batch 10 (apalis' default batch), and 64 / 64;
//! * graphile-worker 0.16.6 from npm (a Node.js child process, `graphile-peer/b5.mjs`; 0.16 is
//!   the newest release that runs on the installed Node.js 20): one runner with concurrency 10,
//!   and 64, defaults otherwise.
//!
//! A run counts when its body executes; a round is timed from the contender's start (takt:
//! `start()`, apalis: building the worker) to the N-th body. Setup is not timed and not counted.
//!
//! Commits per run: `pg_stat_database.xact_commit` of the database after the round minus
//! before, read once every client of the database has disconnected (a backend flushes its
//! counts when it exits), divided by N. It counts every transaction, read-only ones included.
//! Statements per run: one extra round per contender goes through [`takt_bench::pg::Wire`], a
//! proxy that counts the statements clients send (simple queries plus extended-protocol
//! executions); that round's time is reported apart, since the proxy adds a hop.
//!
//! `--probe 1` runs one takt round per configuration with every store call counted and timed
//! (`takt_bench::probe::Probe`), plus a probe of what a committed single-row `UPDATE` costs on
//! the server; the "why" in `BENCHMARKS.md` comes from it.
//!
//! `cargo run --release --manifest-path bench/Cargo.toml --bin b5 [-- --n 20000 --rounds 3
//! --apalis 1 --graphile 1 --count 1 --probe 0 --pool 0 --json]`; the server is `B5_URL` (default
//! `postgres://postgres@127.0.0.1:5432`) and the database `B5_DB` (default `bench_b5`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::{Value, json};
use takt_bench::pg::{self, DbStats, Wire, WireTally};
use takt_bench::probe::Probe;
use takt_bench::{Args, Counter, median_min_max, print_table};
use takt_core::job::JobDef;
use takt_core::policy::MisfirePolicy;
use takt_core::run::NodeId;
use takt_core::schedule::{Rule, Schedule, Zone};
use takt_core::store::Store;
use takt_host::embed::HostBuilder;
use takt_host::scheduler::{DEFAULT_CLAIM_BATCH, SchedulerConfig};
use takt_host::store::{PgOptions, PgStore};
use takt_plugin_api::abi::PluginRef;
use takt_plugin_api::sdk::{JobContext, Plugin};
use takt_plugin_api::static_plugin;

/// How long one round may take before it is reported as incomplete.
const ROUND_LIMIT: Duration = Duration::from_secs(180);
/// takt's schema in the bench database.
const SCHEMA: &str = "bench_b5_takt";

#[derive(Clone, Copy, Debug)]
enum Contender {
    /// `pool`: the `PgStore`'s pool size (`PgOptions` default 8).
    Takt {
        capacity: usize,
        batch: usize,
        pool: usize,
    },
    Apalis {
        concurrency: usize,
        batch: usize,
    },
    Graphile {
        concurrency: usize,
    },
}

impl Contender {
    fn label(self) -> String {
        match self {
            Contender::Takt {
                capacity,
                batch,
                pool,
            } => format!("takt PgStore (capacity {capacity}, claim_batch {batch}, pool {pool})"),
            Contender::Apalis { concurrency, batch } => format!(
                "apalis-postgres 1.0.0 (concurrency {concurrency}, batch_size {batch}, pool 10)"
            ),
            Contender::Graphile { concurrency } => {
                format!("graphile-worker 0.16.6 (concurrency {concurrency})")
            }
        }
    }
}

/// One round's measurements.
#[derive(Clone, Debug, Default)]
struct Sample {
    /// Seconds to the N-th body; `None`: incomplete.
    secs: Option<f64>,
    /// Bodies run.
    runs: usize,
    /// Server counters over the round.
    stats: DbStats,
    /// Statements, on the proxied round only.
    wire: Option<WireTally>,
}

struct Bench {
    base: String,
    db: String,
    admin: tokio_postgres::Client,
    n: usize,
    plugin: PluginRef,
    counter: Arc<Counter>,
    wire: Wire,
    verbose: bool,
    /// `--probe 1`: time every store call of the takt rounds (see [`Bench::commit_probe`]).
    probe: bool,
}

impl Bench {
    fn db_url(&self, proxied: bool) -> String {
        if proxied {
            format!(
                "postgres://postgres@127.0.0.1:{}/{}",
                self.wire.port, self.db
            )
        } else {
            format!("{}/{}", self.base, self.db)
        }
    }

    async fn settle(&self) -> DbStats {
        if !pg::wait_idle(&self.admin, &self.db, Duration::from_secs(20)).await {
            eprintln!("b5: clients still connected to {} after 20 s", self.db);
        }
        pg::db_stats(&self.admin, &self.db).await
    }

    async fn round(&self, c: Contender, proxied: bool) -> Sample {
        match c {
            Contender::Takt {
                capacity,
                batch,
                pool,
            } => self.takt(capacity, batch, pool, proxied).await,
            Contender::Apalis { concurrency, batch } => {
                self.apalis(concurrency, batch, proxied).await
            }
            Contender::Graphile { concurrency } => self.graphile(concurrency, proxied).await,
        }
    }

    /// Inserts one job with `Store::job_insert` and copies it N−1 times in SQL (only the name
    /// differs), then drains them with a fresh store and host.
    async fn takt(&self, capacity: usize, batch: usize, pool: usize, proxied: bool) -> Sample {
        let setup = pg::connect(&self.db_url(false)).await;
        setup
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
            .await
            .expect("old schema dropped");
        let options = PgOptions::new(self.db_url(false)).with_schema(SCHEMA);
        let store = PgStore::connect(&options)
            .await
            .expect("the store connects");
        let due = Timestamp::now();
        let mut job = JobDef::new("b5-0", "bench::noop")
            .expect("a valid job")
            .with_schedule(Schedule::new(Rule::Once(due), Zone::utc()));
        job.next_fire = Some(due);
        // The drain must not turn into misfires on a loaded box (see B3).
        job.misfire = MisfirePolicy::default().with_lateness(Duration::from_secs(3_600));
        store.job_insert(&job, due).await.expect("job inserted");
        drop(store);
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
        setup
            .execute(
                &format!(
                    "INSERT INTO {SCHEMA}.jobs ({cols}, name) \
                     SELECT {cols}, 'b5-' || g FROM {SCHEMA}.jobs, generate_series(1, $1) g \
                     WHERE name = 'b5-0'"
                ),
                &[&(self.n as i32 - 1)],
            )
            .await
            .expect("jobs copied");
        setup
            .batch_execute(&format!("ANALYZE {SCHEMA}.jobs"))
            .await
            .expect("analyzed");
        drop(setup);
        let before = self.settle().await;
        self.wire.take();

        let url = self.db_url(proxied);
        let store = PgStore::connect(&PgOptions::new(url).with_schema(SCHEMA).with_pool_size(pool))
            .await
            .expect("the store connects");
        let (secs, runs) = if self.probe {
            let probe = Probe::new(store);
            let r = self.drive(probe.clone(), capacity, batch).await;
            eprintln!("  store calls (capacity {capacity}), most time first:");
            for (name, calls, took) in probe.report() {
                eprintln!(
                    "    {name:<26} {calls:>7} calls  {:>9.1} ms  {:>8.1} µs/call",
                    took.as_secs_f64() * 1e3,
                    took.as_secs_f64() * 1e6 / calls as f64
                );
            }
            r
        } else {
            self.drive(store, capacity, batch).await
        };
        let after = self.settle().await;
        let wire = proxied.then(|| self.wire.take());
        if self.verbose {
            let check = pg::connect(&self.db_url(false)).await;
            let rows = check
                .query(
                    &format!("SELECT state, count(*) FROM {SCHEMA}.runs GROUP BY 1 ORDER BY 1"),
                    &[],
                )
                .await
                .expect("runs counted");
            let states: Vec<String> = rows
                .iter()
                .map(|r| format!("{} {}", r.get::<_, String>(0), r.get::<_, i64>(1)))
                .collect();
            eprintln!("  takt runs: {}", states.join(", "));
        }
        Sample {
            secs,
            runs,
            stats: after.since(before),
            wire,
        }
    }

    /// Starts a host on `store`, waits for the N-th body and shuts the host down: seconds to
    /// the N-th body (`None`: incomplete) and the bodies run.
    async fn drive<S: Store + Clone + 'static>(
        &self,
        store: S,
        capacity: usize,
        batch: usize,
    ) -> (Option<f64>, usize) {
        self.counter.reset(self.n);
        let mut config = SchedulerConfig::new(NodeId("b5".into()));
        config.capacity = capacity;
        config.claim_batch = batch;
        takt_bench::apply_claim_ahead(&mut config);
        let start = Instant::now();
        let host = HostBuilder::new(store)
            .static_plugin(self.plugin)
            .scheduler_config(config)
            .start()
            .await
            .expect("the host starts");
        let secs = self
            .counter
            .wait(ROUND_LIMIT)
            .await
            .map(|at| (at - start).as_secs_f64());
        let runs = self.counter.count();
        host.shutdown(Duration::from_secs(5)).await;
        (secs, runs)
    }

    /// `--probe 1`: what one committed single-row `UPDATE` costs on this server, from one
    /// connection and from 10 at once (each on its own row), against a `SELECT 1` round trip:
    /// the ceiling for a design with one write transaction per run.
    async fn commit_probe(&self) {
        let setup = pg::connect(&self.db_url(false)).await;
        setup
            .batch_execute(
                "DROP TABLE IF EXISTS public.b5_probe; \
                 CREATE TABLE public.b5_probe (id int PRIMARY KEY, n bigint NOT NULL); \
                 INSERT INTO public.b5_probe SELECT g, 0 FROM generate_series(0, 9) g",
            )
            .await
            .expect("probe table");
        let reps = 2_000;
        let select = setup.prepare("SELECT 1").await.expect("prepared");
        let t = Instant::now();
        for _ in 0..reps {
            setup.query_one(&select, &[]).await.expect("select");
        }
        let rtt = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
        let update = setup
            .prepare("UPDATE public.b5_probe SET n = n + 1 WHERE id = $1")
            .await
            .expect("prepared");
        let t = Instant::now();
        for _ in 0..reps {
            setup.execute(&update, &[&0i32]).await.expect("update");
        }
        let one = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
        let mut tasks = tokio::task::JoinSet::new();
        let t = Instant::now();
        for id in 0..10i32 {
            let url = self.db_url(false);
            tasks.spawn(async move {
                let c = pg::connect(&url).await;
                let u = c
                    .prepare("UPDATE public.b5_probe SET n = n + 1 WHERE id = $1")
                    .await
                    .expect("prepared");
                for _ in 0..reps / 10 {
                    c.execute(&u, &[&id]).await.expect("update");
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let ten = reps as f64 / t.elapsed().as_secs_f64();
        setup
            .batch_execute("DROP TABLE public.b5_probe")
            .await
            .expect("probe table dropped");
        eprintln!(
            "commit probe: SELECT 1 round trip {rtt:.0} µs; one connection, autocommit \
             single-row UPDATE {one:.0} µs ({:.0}/s); 10 connections at once: {ten:.0} \
             UPDATE commits/s",
            1e6 / one
        );
    }

    /// graphile-worker in a Node.js child process (`graphile-peer/b5.mjs`): push, then drain.
    async fn graphile(&self, concurrency: usize, proxied: bool) -> Sample {
        let setup = pg::connect(&self.db_url(false)).await;
        setup
            .batch_execute("DROP SCHEMA IF EXISTS graphile_worker CASCADE")
            .await
            .expect("old graphile schema dropped");
        drop(setup);
        let n = self.n.to_string();
        node(&["push", &self.db_url(false), &n]);
        let before = self.settle().await;
        self.wire.take();
        let out = node(&["drain", &self.db_url(proxied), &n, &concurrency.to_string()]);
        let after = self.settle().await;
        let wire = proxied.then(|| self.wire.take());
        Sample {
            secs: out["body_secs"].as_f64(),
            runs: out["runs"].as_u64().unwrap_or(0) as usize,
            stats: after.since(before),
            wire,
        }
    }

    async fn apalis(&self, concurrency: usize, batch: usize, proxied: bool) -> Sample {
        let setup = pg::connect(&self.db_url(false)).await;
        setup
            .batch_execute(
                "DROP SCHEMA IF EXISTS apalis CASCADE; DROP TABLE IF EXISTS public._sqlx_migrations",
            )
            .await
            .expect("old apalis schema dropped");
        drop(setup);
        let n = self.n.to_string();
        let direct = format!("{}?sslmode=disable", self.db_url(false));
        peer(&["push", "--url", &direct, "--runs", &n]);
        let before = self.settle().await;
        self.wire.take();
        let url = format!("{}?sslmode=disable", self.db_url(proxied));
        let out = peer(&[
            "drain",
            "--url",
            &url,
            "--runs",
            &n,
            "--batch",
            &batch.to_string(),
            "--concurrency",
            &concurrency.to_string(),
        ]);
        let after = self.settle().await;
        let wire = proxied.then(|| self.wire.take());
        Sample {
            secs: out["body_secs"].as_f64(),
            runs: out["runs"].as_u64().unwrap_or(0) as usize,
            stats: after.since(before),
            wire,
        }
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn peer_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("apalis-peer/Cargo.toml")
}

fn graphile_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("graphile-peer")
}

/// Installs the graphile-worker peer's packages from its lock file (`npm ci`) once, before
/// anything is timed; node_modules is not committed.
fn install_graphile() -> bool {
    eprintln!("b5: installing the graphile-worker peer (graphile-peer/, npm ci)…");
    let ok = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--silent"])
        .current_dir(graphile_dir())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("b5: the graphile-worker peer did not install; measuring without it");
    }
    ok
}

/// Runs the graphile-worker peer with `args`; its last stdout line is JSON.
fn node(args: &[&str]) -> Value {
    let out = Command::new("node")
        .arg(graphile_dir().join("b5.mjs"))
        .args(args)
        .output()
        .expect("start the graphile-worker peer");
    assert!(
        out.status.success(),
        "the graphile-worker peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().expect("one JSON line")).expect("the peer's JSON")
}

/// Builds the apalis-postgres peer once, before anything is timed.
fn build_peer() -> bool {
    eprintln!("b5: building the apalis-postgres peer (apalis-peer/, release)…");
    let ok = Command::new(cargo())
        .args(["build", "--release", "--quiet", "--bin", "b5-apalis"])
        .arg("--manifest-path")
        .arg(peer_manifest())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("b5: the apalis-postgres peer did not build; measuring without it");
    }
    ok
}

/// Runs the peer with `args`; its last stdout line is JSON.
fn peer(args: &[&str]) -> Value {
    let out = Command::new(cargo())
        .args(["run", "--release", "--quiet", "--bin", "b5-apalis"])
        .arg("--manifest-path")
        .arg(peer_manifest())
        .arg("--")
        .args(args)
        .output()
        .expect("start the apalis-postgres peer");
    assert!(
        out.status.success(),
        "the apalis-postgres peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().expect("one JSON line")).expect("the peer's JSON")
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let n = args.num("n", 20_000) as usize;
    let rounds = args.num("rounds", 3) as usize;
    let base =
        std::env::var("B5_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    let db = std::env::var("B5_DB").unwrap_or_else(|_| "bench_b5".into());
    let with_peer = args.num("apalis", 1) != 0 && build_peer();
    let with_graphile = args.num("graphile", 1) != 0 && install_graphile();
    let counted = args.num("count", 1) != 0;
    // `--pool P`: two more takt rows with the store's pool raised to P (an experiment: the
    // default pool of 8 connections is below the capacity of both rows).
    let extra_pool = args.num("pool", 0) as usize;

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

    let admin = pg::connect(&format!("{base}/postgres")).await;
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&db])
        .await
        .expect("pg_database readable")
        .is_some();
    if !exists {
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .expect("bench database created");
    }
    let upstream = base
        .rsplit('@')
        .next()
        .expect("host:port in the url")
        .to_string();
    let bench = Bench {
        base: base.clone(),
        db: db.clone(),
        admin,
        n,
        plugin,
        counter,
        wire: Wire::start(upstream).await,
        verbose: std::env::var_os("B5_VERBOSE").is_some(),
        probe: args.num("probe", 0) != 0,
    };
    if bench.probe {
        // One takt round per configuration with every store call timed, and the commit probe;
        // no peer, no table.
        bench.commit_probe().await;
        let mut pools = vec![8];
        if extra_pool > 0 {
            pools.push(extra_pool);
        }
        for (capacity, batch, pool) in pools
            .iter()
            .flat_map(|&p| [(10, DEFAULT_CLAIM_BATCH, p), (64, 64, p)])
        {
            let s = bench.takt(capacity, batch, pool, false).await;
            eprintln!(
                "probe round, capacity {capacity}, pool {pool}: {}",
                s.secs.map_or("incomplete".into(), |t| format!(
                    "{:.0} runs/s",
                    n as f64 / t
                ))
            );
        }
        bench.commit_probe().await;
        return;
    }
    let server: String = bench
        .admin
        .query_one("SHOW server_version", &[])
        .await
        .expect("version")
        .get(0);

    let mut contenders = vec![
        Contender::Takt {
            capacity: 10,
            batch: DEFAULT_CLAIM_BATCH,
            pool: 8,
        },
        Contender::Takt {
            capacity: 64,
            batch: 64,
            pool: 8,
        },
    ];
    if extra_pool > 0 {
        contenders.push(Contender::Takt {
            capacity: 10,
            batch: DEFAULT_CLAIM_BATCH,
            pool: extra_pool,
        });
        contenders.push(Contender::Takt {
            capacity: 64,
            batch: 64,
            pool: extra_pool,
        });
    }
    if with_peer {
        contenders.push(Contender::Apalis {
            concurrency: 10,
            batch: 10,
        });
        contenders.push(Contender::Apalis {
            concurrency: 64,
            batch: 64,
        });
    }
    if with_graphile {
        contenders.push(Contender::Graphile { concurrency: 10 });
        contenders.push(Contender::Graphile { concurrency: 64 });
    }

    let mut timed: Vec<Vec<Sample>> = contenders.iter().map(|_| Vec::new()).collect();
    let mut proxied: Vec<Option<Sample>> = contenders.iter().map(|_| None).collect();
    let total = rounds + usize::from(counted);
    for round in 0..total {
        let through_proxy = round == rounds;
        for (i, c) in contenders.iter().enumerate() {
            let s = bench.round(*c, through_proxy).await;
            eprintln!(
                "round {}{}: {} — {}; {:.2} commits/run{}",
                round + 1,
                if through_proxy { " (proxied)" } else { "" },
                c.label(),
                match s.secs {
                    Some(secs) => format!("{secs:.3} s, {:.0} runs/s", n as f64 / secs),
                    None => format!("INCOMPLETE: {} of {n}", s.runs),
                },
                s.stats.xact_commit as f64 / n as f64,
                s.wire.as_ref().map_or(String::new(), |w| format!(
                    ", {:.2} statements/run",
                    w.statements() as f64 / n as f64
                )),
            );
            if through_proxy {
                if let Some(w) = &s.wire
                    && bench.verbose
                {
                    for (text, count) in &w.by_text {
                        eprintln!("    {count:>8}  {text}");
                    }
                }
                proxied[i] = Some(s);
            } else {
                timed[i].push(s);
            }
        }
    }
    let cleanup = pg::connect(&bench.db_url(false)).await;
    let _ = cleanup
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .await;
    drop(cleanup);
    if pg::wait_idle(&bench.admin, &db, Duration::from_secs(10)).await && !exists {
        let _ = bench
            .admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))
            .await;
    }

    report(&args, n, rounds, &server, &contenders, &timed, &proxied);
}

fn per_run(v: i64, n: usize) -> f64 {
    v as f64 / n as f64
}

fn report(
    args: &Args,
    n: usize,
    rounds: usize,
    server: &str,
    contenders: &[Contender],
    timed: &[Vec<Sample>],
    proxied: &[Option<Sample>],
) {
    let mut rows = Vec::new();
    let mut items = Vec::new();
    for ((c, samples), p) in contenders.iter().zip(timed).zip(proxied) {
        let rates: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.secs.map(|t| n as f64 / t))
            .collect();
        let complete = rates.len() == samples.len();
        let commits: Vec<f64> = samples
            .iter()
            .map(|s| per_run(s.stats.xact_commit, n))
            .collect();
        let written: Vec<f64> = samples
            .iter()
            .map(|s| per_run(s.stats.tup_written, n))
            .collect();
        let rollbacks: i64 = samples.iter().map(|s| s.stats.xact_rollback).sum();
        let (rm, rmin, rmax) = median_min_max(&rates);
        let (cm, cmin, cmax) = median_min_max(&commits);
        let (wm, _, _) = median_min_max(&written);
        let wire = p.as_ref().and_then(|s| s.wire.clone());
        let stmts = wire.as_ref().map(|w| per_run(w.statements() as i64, n));
        let work = wire
            .as_ref()
            .map(|w| per_run(w.work_statements() as i64, n));
        let proxied_rate = p.as_ref().and_then(|s| s.secs.map(|t| n as f64 / t));
        let proxied_commits = p.as_ref().map(|s| per_run(s.stats.xact_commit, n));
        let fmt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.2}"));
        rows.push(vec![
            c.label(),
            if complete {
                format!("{rm:.0} ({rmin:.0}–{rmax:.0})")
            } else {
                format!("incomplete ({} complete rounds)", rates.len())
            },
            format!("{cm:.2} ({cmin:.2}–{cmax:.2})"),
            fmt(stmts),
            fmt(work),
            format!("{wm:.2}"),
            rollbacks.to_string(),
            format!(
                "{} / {}",
                proxied_rate.map_or("—".into(), |r| format!("{r:.0}")),
                fmt(proxied_commits)
            ),
        ]);
        items.push(json!({
            "contender": c.label(),
            "runs_per_second": { "median": rm, "min": rmin, "max": rmax, "all": rates },
            "complete": complete,
            "commits_per_run": { "median": cm, "min": cmin, "max": cmax, "all": commits },
            "rows_written_per_run": written,
            "rollbacks": rollbacks,
            "statements_per_run": stmts,
            "statements_per_run_without_begin_commit": work,
            "proxied_round": {
                "runs_per_second": proxied_rate,
                "commits_per_run": proxied_commits,
                "connections": wire.as_ref().map(|w| w.connections),
                "statements": wire.as_ref().map(|w| w.by_text.clone()),
            },
        }));
    }
    if args.json {
        let doc = json!({
            "bench": "B5",
            "runs": n,
            "rounds": rounds,
            "server_version": server,
            "goals": { "runs_per_second": 5000, "commits_per_run": 2, "statements_per_run": 5 },
            "results": items,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return;
    }
    println!(
        "\nB5: {n} one-off no-op runs due at once on PostgreSQL {server}, {rounds} timed rounds \
         (median, min–max) + 1 proxied round for statements\n"
    );
    print_table(
        &[
            "contender",
            "runs/s",
            "commits/run",
            "statements/run",
            "without BEGIN/COMMIT",
            "rows written/run",
            "rollbacks",
            "proxied round: runs/s / commits/run",
        ],
        &rows,
    );
}
