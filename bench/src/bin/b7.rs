//! B7 — the SQLite durable path: one claim + run row + finish per fire.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin b7 -- [--runs N] [--rounds R]
//!     [--apalis-runs M] [--dir DIR] [--json] [--no-apalis] [--only NAME]
//! ```
//!
//! Contenders, each on a fresh database file in a temp directory, rounds interleaved so that
//! noise on the shared box hits all of them alike:
//!
//! * `ceiling`: raw rusqlite, one single-row `INSERT` into takt's own `runs` table per
//!   `BEGIN IMMEDIATE` transaction, with the connection settings of `SqliteStore`;
//! * `takt claim=1`: `N` due one-off jobs, then `run_claim_due` with limit 1 and
//!   `run_set_state_if_running` (succeeded) per fire, through the `Store` API;
//! * `takt claim=32`: the same with claims of up to 32 runs (still one finish per run);
//! * `takt claim=1 +index (exp.)`: an experiment, not takt as shipped: claim=1 after adding an
//!   index that matches the claim's sort order (the change BENCHMARKS.md suggests);
//! * `takt host`: the whole host as it ships (`HostBuilder`, the scheduling loop, the executor,
//!   a static no-op plugin; capacity 64, claim batch 64) draining `N` due one-off jobs: per
//!   fire one share of a claim transaction, the run row, and a finish that the store's
//!   finishing thread commits together with the finishes queued beside it (group commit).
//!   Timed from `start()` until `shutdown()` returned with every run recorded `succeeded`;
//! * `apalis …`: apalis 1.0 on SQLite, one worker with a no-op handler draining `M` pushed jobs.
//!   It runs in a child process (`apalis-peer/`), because its sqlx links another
//!   libsqlite3-sys than takt's rusqlite and Cargo allows one per build graph; it times itself.
//!
//! A run counts when the job body (or the finish, for takt and the ceiling) has happened;
//! setup (creating jobs, pushing jobs) is not timed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rusqlite::{Connection, TransactionBehavior, params};
use serde_json::{Value, json};
use takt_core::job::JobDef;
use takt_core::policy::MisfirePolicy;
use takt_core::run::{NodeId, RunEvent, RunState};
use takt_core::schedule::{Rule, Schedule, Zone};
use takt_core::store::conformance::block_on;
use takt_core::store::{ClaimParams, RunFilter, RunFinish, Store};
use takt_host::embed::HostBuilder;
use takt_host::scheduler::SchedulerConfig;
use takt_host::store::{SqliteOptions, SqliteStore};
use takt_plugin_api::abi::PluginRef;
use takt_plugin_api::sdk::{JobContext, Plugin};
use takt_plugin_api::static_plugin;

/// takt's schema, so the ceiling inserts into exactly the table takt writes.
const SCHEMA: &str = include_str!("../../../sql/sqlite/0001_init.sql");

struct Args {
    runs: u64,
    /// Runs per apalis round: its drain slows down as finished jobs pile up (its ack query
    /// scans every job the worker ever locked; see BENCHMARKS.md), so it gets its own count.
    apalis_runs: u64,
    rounds: usize,
    dir: PathBuf,
    json: bool,
    apalis: bool,
    /// Only the contenders whose name contains this (for profiling one of them).
    only: Option<String>,
}

fn parse_args() -> Args {
    let mut args = Args {
        runs: 20_000,
        apalis_runs: 2_000,
        rounds: 5,
        dir: std::env::temp_dir(),
        json: false,
        apalis: true,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--runs" => args.runs = value().parse().unwrap_or_else(|_| usage("--runs: a count")),
            "--apalis-runs" => {
                args.apalis_runs = value()
                    .parse()
                    .unwrap_or_else(|_| usage("--apalis-runs: a count"))
            }
            "--rounds" => {
                args.rounds = value()
                    .parse()
                    .unwrap_or_else(|_| usage("--rounds: a count"))
            }
            "--dir" => args.dir = value().into(),
            "--json" => args.json = true,
            "--no-apalis" => args.apalis = false,
            "--only" => args.only = Some(value()),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if args.runs == 0 || args.apalis_runs == 0 || args.rounds == 0 {
        usage("--runs, --apalis-runs and --rounds must be at least 1");
    }
    args
}

fn usage(why: &str) -> ! {
    if !why.is_empty() {
        eprintln!("b7: {why}");
    }
    eprintln!(
        "usage: b7 [--runs N] [--apalis-runs M] [--rounds R] [--dir DIR] [--json] [--no-apalis]\n          \
         [--only NAME]\n  \
         N runs per contender and round (default 20000; M for apalis, default 2000), R rounds \
         (default 5), databases under DIR (default the temp dir); --only keeps the contenders \
         whose name contains NAME (the ceiling always runs: it is the reference)"
    );
    std::process::exit(2)
}

/// A fresh directory for one contender's database, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(root: &Path, name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = root.join(format!("takt-b7-{}-{name}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        TempDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What one round of one contender measured.
struct Sample {
    /// Runs counted in the job body (for takt and the ceiling: finished and committed).
    runs: u64,
    /// Time to the last counted run.
    elapsed: Duration,
    /// apalis only: time until the worker stopped and its pending acks were written.
    drained: Option<Duration>,
    /// takt only: time inside `run_claim_due` and inside `run_set_state_if_running`.
    split: Option<(Duration, Duration)>,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.runs as f64 / self.elapsed.as_secs_f64()
    }
}

// ---- a. the ceiling ----------------------------------------------------------------------

/// The PRAGMAs `SqliteStore` sets (host/src/store/sqlite.rs, `connect`), on a plain connection.
fn store_like_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open the ceiling database");
    conn.busy_timeout(SqliteOptions::default().busy_timeout)
        .expect("busy timeout");
    conn.pragma_update(None, "foreign_keys", "ON")
        .expect("foreign keys");
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .expect("WAL");
    assert!(mode.eq_ignore_ascii_case("wal"), "journal mode {mode}");
    conn.pragma_update(None, "synchronous", "NORMAL")
        .expect("synchronous");
    conn
}

fn ceiling(dir: &TempDir, n: u64) -> Sample {
    let mut conn = store_like_connection(&dir.file("ceiling.db"));
    conn.execute_batch(SCHEMA).expect("takt schema");
    conn.execute(
        "INSERT INTO jobs (name, handler_type, updated_at) VALUES ('b7', 'b7::noop', 0)",
        [],
    )
    .expect("the job the runs belong to");
    let job_id = conn.last_insert_rowid();
    let now = Timestamp::now().as_millisecond();
    let start = Instant::now();
    for i in 0..n {
        // The columns a claim fills in: a running first attempt on a node, leased.
        let fire = i64::try_from(i).expect("fits") * 1000;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("begin");
        tx.prepare_cached(
            "INSERT INTO runs (job_id, fire_time, state, attempt, created_at, started_at, \
             node_id, lease_expires_at) VALUES (?1, ?2, 'running', 1, ?3, ?3, 'b7', ?4)",
        )
        .expect("prepare")
        .execute(params![job_id, fire, now, now + 60_000])
        .expect("insert");
        tx.commit().expect("commit");
    }
    Sample {
        runs: n,
        elapsed: start.elapsed(),
        drained: None,
        split: None,
    }
}

// ---- b. takt -----------------------------------------------------------------------------

/// `SqliteStore`'s `synchronous` and SQLite version, read back from a store-like connection.
fn sqlite_facts(root: &Path) -> (i64, String) {
    let dir = TempDir::new(root, "facts");
    let store =
        SqliteStore::open(dir.file("facts.db"), &SqliteOptions::default()).expect("open a store");
    drop(store);
    // The store keeps its connection private: open one the same way and read what it set.
    let conn = store_like_connection(&dir.file("facts.db"));
    let sync = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .expect("synchronous");
    let version = conn
        .query_row("SELECT sqlite_version()", [], |r| r.get(0))
        .expect("version");
    (sync, version)
}

/// An index whose order is the claim's `ORDER BY` (priority, next fire, id), so the due query
/// stops after `limit` rows instead of sorting every due job. Not in takt's schema: the
/// `claim=1 +index` line measures this suggested change without touching the store.
const CLAIM_INDEX: &str = "CREATE INDEX b7_jobs_claim ON jobs (enabled, priority, next_fire, id) \
     WHERE next_fire IS NOT NULL";

fn takt(dir: &TempDir, n: u64, limit: usize, claim_index: bool) -> Sample {
    let path = dir.file("takt.db");
    let mut store =
        SqliteStore::open(&path, &SqliteOptions::default()).expect("open the takt store");
    if claim_index {
        drop(store);
        Connection::open(&path)
            .and_then(|c| c.execute_batch(CLAIM_INDEX))
            .expect("add the experimental claim index");
        store = SqliteStore::open(&path, &SqliteOptions::default()).expect("reopen the store");
    }
    let due = Timestamp::now();
    for i in 0..n {
        // A one-off job: no schedule, due now (how conformance.rs makes a manual job due).
        let mut job = JobDef::new(&format!("b7-{i}"), "b7::noop").expect("a valid job");
        job.next_fire = Some(due);
        block_on(store.job_insert(&job, due)).expect("insert a job");
    }
    let node = NodeId("b7".into());
    let mut runs = 0;
    let (mut in_claim, mut in_finish) = (Duration::ZERO, Duration::ZERO);
    let start = Instant::now();
    loop {
        let now = Timestamp::now();
        let t = Instant::now();
        let claimed = block_on(store.run_claim_due(&ClaimParams {
            claimed_at: None,
            node: node.clone(),
            instance: takt_core::node::InstanceId("b7".into()),
            tags: Vec::new(),
            now,
            limit,
            recurring_only: 0,
            lease: Duration::from_secs(60),
        }))
        .expect("claim");
        in_claim += t.elapsed();
        if claimed.is_empty() {
            break;
        }
        for c in claimed {
            // What the host loop does after the handler returned: let the core decide, store it.
            let now = Timestamp::now();
            let mut run = c.run;
            let attempt = run.attempt;
            let id = run.id.expect("a stored run");
            run.apply(RunEvent::Succeeded { result_json: None }, now, &c.job.retry)
                .expect("running -> succeeded");
            let t = Instant::now();
            block_on(store.run_set_state_if_running(id, attempt, &RunFinish::from_run(&run, now)))
                .expect("finish");
            in_finish += t.elapsed();
            runs += 1;
        }
    }
    let elapsed = start.elapsed();
    assert_eq!(runs, n, "takt claimed and finished every due job once");
    Sample {
        runs,
        elapsed,
        drained: None,
        split: Some((in_claim, in_finish)),
    }
}

/// The `takt host` contender's capacity and claim batch (B3's setting).
const HOST_CAPACITY: usize = 64;

/// Bodies of the `takt host` contender's no-op handler, over the whole process.
static BODIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The no-op plugin of the `takt host` contender (`static_plugin!` builds once per process).
fn noop_plugin() -> PluginRef {
    static_plugin!(|| Plugin::new("b7").handler(
        "noop",
        "counts its body and does nothing else",
        |_: &JobContext, (): ()| {
            BODIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    ))
    .expect("a valid static plugin")
}

/// The whole host on a fresh SQLite file draining `n` due one-off jobs; timed from `start()`
/// to the end of `shutdown()` after the `n`-th body (the shutdown's drain waits for every
/// run's finish to be committed), and checked afterwards: every job ran once and is
/// recorded `succeeded`.
fn takt_host(dir: &TempDir, n: u64, plugin: PluginRef) -> Sample {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let store = SqliteStore::open(dir.file("host.db"), &SqliteOptions::default())
            .expect("open the takt store");
        let due = Timestamp::now();
        for i in 0..n {
            let mut job = JobDef::new(&format!("b7-{i}"), "b7::noop")
                .expect("a valid job")
                .with_schedule(Schedule::new(Rule::Once(due), Zone::utc()));
            job.next_fire = Some(due);
            // Inserting the jobs takes seconds; their fires must not be skipped as misfires.
            job.misfire = MisfirePolicy::default().with_lateness(Duration::from_secs(3_600));
            store.job_insert(&job, due).await.expect("insert a job");
        }
        let mut config = SchedulerConfig::new(NodeId("b7".into()));
        config.capacity = HOST_CAPACITY;
        config.claim_batch = HOST_CAPACITY;
        let before = BODIES.load(std::sync::atomic::Ordering::Relaxed);
        let start = Instant::now();
        let host = HostBuilder::new(store.clone())
            .static_plugin(plugin)
            .scheduler_config(config)
            .start()
            .await
            .expect("the host starts");
        let limit = Instant::now() + Duration::from_secs(300);
        while BODIES.load(std::sync::atomic::Ordering::Relaxed) - before < n {
            assert!(
                Instant::now() < limit,
                "the host did not drain {n} runs in 300 s"
            );
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        host.shutdown(Duration::from_secs(30)).await;
        let elapsed = start.elapsed();
        let succeeded = store
            .run_list(&RunFilter {
                job: None,
                state: Some(RunState::Succeeded),
                limit: usize::try_from(n + 1).expect("fits"),
                ..RunFilter::default()
            })
            .await
            .expect("list runs")
            .len() as u64;
        assert_eq!(succeeded, n, "every job ran once and is recorded succeeded");
        Sample {
            runs: n,
            elapsed,
            drained: None,
            split: None,
        }
    })
}

// ---- c. apalis ---------------------------------------------------------------------------

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn apalis_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("apalis-peer/Cargo.toml")
}

/// Builds the apalis peer once, before anything is timed.
fn build_apalis() -> bool {
    eprintln!("b7: building the apalis peer (apalis-peer/, release)…");
    let ok = Command::new(cargo())
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(apalis_manifest())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("b7: the apalis peer did not build; measuring without it");
    }
    ok
}

/// One apalis round in the child process; `mode` is `normal` or `setup` (see apalis-peer).
fn apalis(dir: &TempDir, n: u64, mode: &str) -> (Sample, Value) {
    let out = Command::new(cargo())
        .args([
            "run",
            "--release",
            "--quiet",
            "--bin",
            "b7-apalis",
            "--manifest-path",
        ])
        .arg(apalis_manifest())
        .args(["--", "--runs", &n.to_string(), "--mode", mode, "--db"])
        .arg(dir.file("apalis.db"))
        .output()
        .expect("start the apalis peer");
    assert!(
        out.status.success(),
        "the apalis peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .expect("the peer prints one JSON line");
    let v: Value = serde_json::from_str(line).expect("the peer's JSON");
    let secs = |k: &str| Duration::from_secs_f64(v[k].as_f64().expect("seconds"));
    let sample = Sample {
        runs: v["runs"].as_u64().expect("runs"),
        elapsed: secs("body_secs"),
        drained: Some(secs("drain_secs")),
        split: None,
    };
    (sample, v)
}

// ---- report ------------------------------------------------------------------------------

struct Contender {
    name: &'static str,
    settings: String,
    samples: Vec<Sample>,
    /// The apalis peer's last JSON line (its SQLite version, final job statuses).
    peer: Option<Value>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn stats(rates: &[f64]) -> (f64, f64, f64) {
    let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let max = rates.iter().copied().fold(0.0, f64::max);
    (median(rates.to_vec()), min, max)
}

fn main() {
    let args = parse_args();
    let (sync, version) = sqlite_facts(&args.dir);
    let apalis_ok = args.apalis && build_apalis();

    let store_settings = format!(
        "file db, WAL, synchronous={sync} (NORMAL), foreign_keys=ON, busy_timeout=5s, \
         SQLite {version} (rusqlite 0.43 bundled)"
    );
    let mut cs = vec![
        Contender {
            name: "ceiling (rusqlite, 1 INSERT/tx)",
            settings: format!("{store_settings}; takt's runs table with its indexes and FK"),
            samples: Vec::new(),
            peer: None,
        },
        Contender {
            name: "takt claim=1",
            settings: format!("SqliteStore::open defaults: {store_settings}; one-off jobs"),
            samples: Vec::new(),
            peer: None,
        },
        Contender {
            name: "takt claim=32",
            settings: "as takt claim=1, run_claim_due limit 32, one finish tx per run".into(),
            samples: Vec::new(),
            peer: None,
        },
        Contender {
            name: "takt host",
            settings: format!(
                "the host as it ships on SqliteStore::open defaults: scheduling loop, executor, \
                 static no-op plugin; capacity {HOST_CAPACITY}, claim_batch {HOST_CAPACITY}, \
                 default lookahead; finishes group-committed by the store's finishing thread; \
                 one-off jobs with a 1 h misfire window; timed from start() to the end of \
                 shutdown() after the last body; tokio multi-thread runtime, 2 workers"
            ),
            samples: Vec::new(),
            peer: None,
        },
        Contender {
            name: "takt claim=1 +index (exp.)",
            settings: format!(
                "EXPERIMENT, not takt's schema: as takt claim=1 plus `{CLAIM_INDEX}`"
            ),
            samples: Vec::new(),
            peer: None,
        },
    ];
    if apalis_ok {
        cs.push(Contender {
            name: "apalis (sync=NORMAL)",
            settings: "apalis 1.0.0 + apalis-sqlite 1.0.0 (sqlx 0.9.0): every pool connection \
                       WAL, synchronous=NORMAL, busy_timeout=5s + setup()'s other PRAGMAs; \
                       defaults otherwise (batch_size 10, no concurrency limit, 10 pool \
                       connections, lock_tasks and persist_results on); tokio multi-thread"
                .into(),
            samples: Vec::new(),
            peer: None,
        });
        cs.push(Contender {
            name: "apalis (setup() defaults)",
            settings: "as documented: default sqlx pool + SqliteStorage::setup() (WAL, \
                       synchronous=OFF on the one connection it ran on, FULL on the others)"
                .into(),
            samples: Vec::new(),
            peer: None,
        });
    }

    if let Some(only) = &args.only {
        let mut first = true;
        cs.retain(|c| std::mem::take(&mut first) || c.name.contains(only.as_str()));
    }

    let plugin = noop_plugin();
    for round in 0..args.rounds {
        eprintln!("b7: round {}/{}", round + 1, args.rounds);
        for c in &mut cs {
            let dir = TempDir::new(&args.dir, "round");
            let sample = match c.name {
                "ceiling (rusqlite, 1 INSERT/tx)" => ceiling(&dir, args.runs),
                "takt claim=1" => takt(&dir, args.runs, 1, false),
                "takt claim=32" => takt(&dir, args.runs, 32, false),
                "takt claim=1 +index (exp.)" => takt(&dir, args.runs, 1, true),
                "takt host" => takt_host(&dir, args.runs, plugin),
                name => {
                    let mode = if name.contains("NORMAL") {
                        "normal"
                    } else {
                        "setup"
                    };
                    let (sample, peer) = apalis(&dir, args.apalis_runs, mode);
                    c.peer = Some(peer);
                    sample
                }
            };
            let split = sample.split.map_or_else(String::new, |(claim, finish)| {
                let per_run = |d: Duration| d.as_secs_f64() * 1e6 / sample.runs as f64;
                format!(
                    "; per run: {:.0} µs claiming, {:.0} µs finishing",
                    per_run(claim),
                    per_run(finish)
                )
            });
            eprintln!(
                "b7:   {:<30} {:>9.0} runs/s ({} runs in {:.3} s{split})",
                c.name,
                sample.rate(),
                sample.runs,
                sample.elapsed.as_secs_f64()
            );
            c.samples.push(sample);
        }
    }

    let ceiling_median = median(cs[0].samples.iter().map(Sample::rate).collect());
    let rows: Vec<Value> = cs
        .iter()
        .map(|c| {
            let rates: Vec<f64> = c.samples.iter().map(Sample::rate).collect();
            let (med, min, max) = stats(&rates);
            let per_run_us = |pick: fn((Duration, Duration)) -> Duration| -> Option<f64> {
                let v: Vec<f64> = c
                    .samples
                    .iter()
                    .filter_map(|s| s.split.map(|p| pick(p).as_secs_f64() * 1e6 / s.runs as f64))
                    .collect();
                (!v.is_empty()).then(|| median(v))
            };
            let drained: Vec<f64> = c
                .samples
                .iter()
                .filter_map(|s| s.drained.map(|d| s.runs as f64 / d.as_secs_f64()))
                .collect();
            json!({
                "contender": c.name,
                "settings": c.settings,
                "runs_per_round": c.samples.first().map(|s| s.runs),
                "rounds": c.samples.len(),
                "runs_per_s": { "median": med, "min": min, "max": max, "all": rates },
                "drained_runs_per_s_median": (!drained.is_empty()).then(|| median(drained)),
                "ratio_to_ceiling": med / ceiling_median,
                "claim_us_per_run_median": per_run_us(|p| p.0),
                "finish_us_per_run_median": per_run_us(|p| p.1),
                "peer": c.peer,
            })
        })
        .collect();

    if args.json {
        let report = json!({
            "benchmark": "B7",
            "runs_per_round": args.runs,
            "apalis_runs_per_round": args.apalis_runs,
            "rounds": args.rounds,
            "dir": args.dir.display().to_string(),
            "contenders": rows,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialisable")
        );
        return;
    }
    println!(
        "B7 — SQLite durable path, {} runs per round (apalis {}), {} rounds, databases under {}",
        args.runs,
        args.apalis_runs,
        args.rounds,
        args.dir.display()
    );
    println!(
        "{:<30} {:>10} {:>10} {:>10} {:>8}  drained/s",
        "contender", "median/s", "min/s", "max/s", "ceiling"
    );
    for r in &rows {
        let f = |k: &str| r["runs_per_s"][k].as_f64().unwrap_or(0.0);
        let drained = r["drained_runs_per_s_median"]
            .as_f64()
            .map_or_else(|| "-".to_string(), |d| format!("{d:.0}"));
        println!(
            "{:<30} {:>10.0} {:>10.0} {:>10.0} {:>7.1}%  {drained}",
            r["contender"].as_str().unwrap_or_default(),
            f("median"),
            f("min"),
            f("max"),
            100.0 * r["ratio_to_ceiling"].as_f64().unwrap_or(0.0)
        );
    }
    println!();
    for c in &cs {
        println!("{}: {}", c.name, c.settings);
        if let Some(p) = &c.peer {
            println!("  last round as the peer saw it: {p}");
        }
    }
    // The goal is about takt's durable path as it ships: the host.
    if let Some(host) = rows.iter().find(|r| r["contender"] == "takt host") {
        let ratio = host["ratio_to_ceiling"].as_f64().unwrap_or(0.0);
        println!(
            "\ngoal: takt host >= 50 % of the ceiling: {} ({:.1} %)",
            if ratio >= 0.5 { "met" } else { "NOT met" },
            100.0 * ratio
        );
    }
}
