//! Scale — many job definitions and a long run history, in MemoryStore, SQLite and PostgreSQL:
//!
//! * memory per job definition in `MemoryStore` (heap bytes counted by this binary's global
//!   allocator, and the process's resident set), at each size;
//! * the cost of one scheduling pass's store calls when 10 jobs are due (`job_due`,
//!   `run_claim_due`, `next_due`: what the loop calls per pass), at each size, to show
//!   whether it grows with the number of jobs;
//! * `Store::job_list` (every job: what the engine's own rules still read), `Store::job_page`'s
//!   first page of 100 (what `takt job list` and `GET /api/v1/jobs` read, page by page),
//!   `takt job list` itself when `--takt PATH` names a built `takt` binary, and the API's
//!   first pages of jobs (`GET /api/v1/jobs`, 100 by default) and of runs
//!   (`GET /api/v1/runs?limit=100`) with a run history added by bulk SQL.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin scale -- [--sizes 10000,100000,1000000]
//!     [--backends memory,memory-once,memory-window,sqlite,pg] [--reps 30] [--runs 10000000] [--sqlite-runs N]
//!     [--takt target/release/takt] [--pg-url URL] [--api-reps 5]
//! ```
//!
//! The sizes grow one store (jobs are added, never rebuilt). Jobs are inserted with
//! `Store::job_insert` into `MemoryStore`; in SQLite and PostgreSQL one is inserted so and
//! copied in SQL (only the name differs; in `MemoryStore` each job also has its own small
//! parameters, `{"line":"L12","batch":417}`, so the bytes per job count them). Every job has a daily cron (`0 3 * * *`, UTC) and
//! its next fire set, so none is due — except in `memory-once` (a `MemoryStore` too, not run
//! by default), where every job is a one-off a day ahead at its own instant with its own
//! description, the definition no two jobs share, and `memory-window` (not run by default
//! either), where every job has the daily cron and a validity window of its own (from its own
//! second from now on, for a year); the 10 due jobs are one-offs re-armed before each pass
//! (`job_set_next_fire`, untimed) and their claimed runs finished after it (untimed).
//! PostgreSQL uses the schema `bench_scale` (dropped first), at `--pg-url`, else
//! `TAKT_TEST_PG_URL`, else `postgres://postgres@127.0.0.1:5432/test`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use takt_bench::http::Conn;
use takt_bench::{Args, median_min_max, pg, quantile, remove_db, sorted, temp_db};
use takt_core::job::{JobDef, JobId};
use takt_core::node::InstanceId;
use takt_core::run::{NodeId, RunState};
use takt_core::schedule::{Rule, Schedule, Zone};
use takt_core::store::memory::MemoryStore;
use takt_core::store::{ClaimParams, DueSet, JobQuery, RunFinish, Store};
use takt_host::embed::HostBuilder;
use takt_host::http::HttpConfig;
use takt_host::store::{PgOptions, PgStore, SqliteOptions, SqliteStore};

/// Counts the bytes currently allocated on the heap (requested sizes, not the allocator's
/// rounding or its free lists: the resident set is reported next to it for those).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The resident set of this process, in bytes (Linux; 0 elsewhere).
fn rss() -> i64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<i64>().ok())
        .map_or(0, |pages| pages * 4096)
}

const SCHEMA: &str = "bench_scale";
const DUE: usize = 10;

/// What the jobs of a `MemoryStore` are like.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    /// Every job has the same daily cron.
    Alike,
    /// Every job is a one-off at its own instant with its own description (what one-off jobs
    /// per order look like), so no two jobs have the same definition apart from the name and
    /// parameters.
    Once,
    /// Every job has the daily cron and its own validity window (jobs valid for one order's
    /// span).
    Window,
}

/// Where the jobs live, and how to add many of them quickly.
enum Backend {
    Memory(MemoryStore, Workload),
    Sqlite(SqliteStore, std::path::PathBuf),
    Pg(PgStore, tokio_postgres::Client, String),
}

fn template(name: &str, now: Timestamp) -> JobDef {
    let mut job = JobDef::new(name, "bench::noop")
        .expect("a valid job")
        .with_schedule(Schedule::new(
            Rule::Cron("0 3 * * *".parse().expect("a valid cron")),
            Zone::utc(),
        ));
    job.next_fire = job.next_fires(now, 1).first().copied();
    job
}

impl Backend {
    fn label(&self) -> &'static str {
        match self {
            Backend::Memory(_, Workload::Alike) => "MemoryStore",
            Backend::Memory(_, Workload::Once) => "MemoryStore (one-offs)",
            Backend::Memory(_, Workload::Window) => "MemoryStore (own windows)",
            Backend::Sqlite(..) => "SqliteStore",
            Backend::Pg(..) => "PgStore",
        }
    }

    /// Adds jobs `scale-{from}` … `scale-{to - 1}`.
    async fn add_jobs(&self, from: usize, to: usize) {
        let now = Timestamp::now();
        match self {
            Backend::Memory(store, workload) => {
                let job = template("scale-0", now);
                for i in from..to {
                    let mut j = job.clone();
                    j.name = format!("scale-{i}").parse().expect("a valid name");
                    // Each job its own small parameters, as real jobs have: a shared text
                    // would flatter a store that keeps one copy per distinct value.
                    j.params_json = format!(r#"{{"line":"L{}","batch":{i}}}"#, i % 64);
                    if *workload == Workload::Window {
                        let from = now
                            .checked_add(jiff::SignedDuration::from_secs(i as i64))
                            .expect("an instant in range");
                        j.effective_from = Some(from);
                        j.expires_at = Some(
                            from.checked_add(jiff::SignedDuration::from_hours(24 * 365))
                                .expect("an instant in range"),
                        );
                    }
                    if *workload == Workload::Once {
                        // A day ahead (none due), each a second after the one before.
                        let at = now
                            .checked_add(jiff::SignedDuration::from_secs(86_400 + i as i64))
                            .expect("an instant in range");
                        j.schedule = Some(Schedule::new(Rule::Once(at), Zone::utc()));
                        j.description = Some(format!("order {i} for customer C{}", i % 977));
                        j.next_fire = Some(at);
                    }
                    store.job_insert(&j, now).await.expect("job inserted");
                }
            }
            Backend::Sqlite(store, path) => {
                let mut first = from;
                if from == 0 {
                    store
                        .job_insert(&template("scale-0", now), now)
                        .await
                        .expect("job inserted");
                    first = 1;
                }
                let c = rusqlite::Connection::open(path).expect("open");
                c.busy_timeout(Duration::from_secs(30))
                    .expect("busy timeout");
                let cols = sqlite_columns(&c, "jobs", &["id", "name"]);
                c.execute(
                    &format!(
                        "WITH RECURSIVE g(x) AS (SELECT ?1 UNION ALL SELECT x + 1 FROM g WHERE x < ?2) \
                         INSERT INTO jobs ({cols}, name) SELECT {cols}, 'scale-' || x \
                         FROM g, (SELECT * FROM jobs WHERE name = 'scale-0')"
                    ),
                    [first as i64, to as i64 - 1],
                )
                .expect("jobs copied");
                c.execute_batch("ANALYZE").expect("analyzed");
            }
            Backend::Pg(store, client, _) => {
                let mut first = from;
                if from == 0 {
                    store
                        .job_insert(&template("scale-0", now), now)
                        .await
                        .expect("job inserted");
                    first = 1;
                }
                let cols = pg_columns(client, "jobs", &["id", "name"]).await;
                client
                    .execute(
                        &format!(
                            "INSERT INTO {SCHEMA}.jobs ({cols}, name) \
                             SELECT {cols}, 'scale-' || g FROM {SCHEMA}.jobs, generate_series($1::bigint, $2::bigint) g \
                             WHERE name = 'scale-0'"
                        ),
                        &[&(first as i64), &(to as i64 - 1)],
                    )
                    .await
                    .expect("jobs copied");
                client
                    .batch_execute(&format!("ANALYZE {SCHEMA}.jobs"))
                    .await
                    .expect("analyzed");
            }
        }
    }

    /// Adds `n` finished runs over the first 10 000 `scale-` jobs, one a minute per job,
    /// going back from yesterday.
    async fn add_runs(&self, n: u64) {
        let spread: i64 = 10_000;
        let newest = Timestamp::now().as_millisecond() - 86_400_000;
        match self {
            Backend::Memory(..) => unreachable!("no bulk runs in memory"),
            Backend::Sqlite(_, path) => {
                let c = rusqlite::Connection::open(path).expect("open");
                c.busy_timeout(Duration::from_secs(30))
                    .expect("busy timeout");
                let base: i64 = c
                    .query_row("SELECT id FROM jobs WHERE name = 'scale-0'", [], |r| {
                        r.get(0)
                    })
                    .expect("scale-0");
                c.execute(
                    "WITH RECURSIVE g(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM g WHERE x < ?1 - 1) \
                     INSERT INTO runs (job_id, fire_time, state, attempt, created_at, started_at, \
                       finished_at, node_id, elapsed_ms) \
                     SELECT ?2 + x % ?3, ?4 - (x / ?3) * 60000, 'succeeded', 1, \
                       ?4 - (x / ?3) * 60000, ?4 - (x / ?3) * 60000, ?4 - (x / ?3) * 60000 + 5, 'n1', 5 \
                     FROM g",
                    rusqlite::params![n as i64, base, spread, newest],
                )
                .expect("runs inserted");
                c.execute_batch("ANALYZE").expect("analyzed");
            }
            Backend::Pg(_, client, _) => {
                let base: i64 = client
                    .query_one(
                        &format!("SELECT id FROM {SCHEMA}.jobs WHERE name = 'scale-0'"),
                        &[],
                    )
                    .await
                    .expect("scale-0")
                    .get(0);
                client
                    .execute(
                        &format!(
                            "INSERT INTO {SCHEMA}.runs (job_id, fire_time, state, attempt, created_at, \
                               started_at, finished_at, node_id, elapsed_ms) \
                             SELECT $1 + g % $2, t, 'succeeded', 1, t, t, t + interval '5 ms', 'n1', 5 \
                             FROM generate_series(0::bigint, $3::bigint - 1) g, \
                               LATERAL (SELECT to_timestamp(($4::bigint - (g / $2) * 60000) / 1000.0) AS t) f"
                        ),
                        &[&base, &spread, &(n as i64), &newest],
                    )
                    .await
                    .expect("runs inserted");
                client
                    .batch_execute(&format!("ANALYZE {SCHEMA}.runs"))
                    .await
                    .expect("analyzed");
            }
        }
    }

    /// `--db` and the environment for `takt job list` on this store.
    fn cli_db(&self) -> Option<(String, Vec<(&'static str, String)>)> {
        match self {
            Backend::Memory(..) => None,
            Backend::Sqlite(_, path) => Some((path.display().to_string(), vec![])),
            Backend::Pg(_, _, url) => Some((url.clone(), vec![("TAKT_PG_SCHEMA", SCHEMA.into())])),
        }
    }
}

fn sqlite_columns(c: &rusqlite::Connection, table: &str, except: &[&str]) -> String {
    let mut q = c
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .expect("table info");
    let cols: Vec<String> = q
        .query_map([], |r| r.get::<_, String>(0))
        .expect("columns")
        .map(|r| r.expect("a column"))
        .filter(|c| !except.contains(&c.as_str()))
        .collect();
    cols.join(", ")
}

async fn pg_columns(client: &tokio_postgres::Client, table: &str, except: &[&str]) -> String {
    let cols: Vec<String> = client
        .query(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
            &[&SCHEMA, &table],
        )
        .await
        .expect("columns listed")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|c| !except.contains(&c.as_str()))
        .collect();
    cols.join(", ")
}

/// Per-pass timings, ms.
#[derive(Default)]
struct Pass {
    job_due: Vec<f64>,
    claim: Vec<f64>,
    next_due: Vec<f64>,
    total: Vec<f64>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `reps` passes with exactly [`DUE`] jobs due among everything in `store`.
async fn passes<S: Store>(store: &S, due: &[JobId], reps: usize, rep0: usize) -> Pass {
    let node = NodeId("scale".into());
    let mut out = Pass::default();
    let base = Timestamp::now().as_millisecond() - 3_600_000;
    for r in 0..reps {
        // Arm: every due job's next fire is a new instant in the past (a new run key).
        let fire = Timestamp::from_millisecond(base + ((rep0 + r) as i64) * 1000).expect("ts");
        for id in due {
            store
                .job_set_next_fire(*id, None, Some(fire))
                .await
                .expect("armed");
        }
        let now = Timestamp::now();
        let params = ClaimParams {
            claimed_at: None,
            node: node.clone(),
            instance: InstanceId("scale-1".into()),
            tags: vec![],
            now,
            limit: 64,
            recurring_only: 0,
            lease: Duration::from_secs(60),
        };
        let t0 = Instant::now();
        let found = store.job_due(now, 64, &[]).await.expect("job_due");
        let t1 = Instant::now();
        let claimed = store.run_claim_due(&params).await.expect("claim");
        let t2 = Instant::now();
        let next = store.next_due(&[], DueSet::All).await.expect("next_due");
        let t3 = Instant::now();
        assert_eq!(found.len(), DUE, "exactly the due jobs are due");
        assert_eq!(claimed.len(), DUE, "exactly the due jobs are claimed");
        assert!(next.is_some());
        out.job_due.push(ms(t1 - t0));
        out.claim.push(ms(t2 - t1));
        out.next_due.push(ms(t3 - t2));
        out.total.push(ms(t3 - t0));
        for c in claimed {
            let id = c.run.id.expect("a stored run has an id");
            let finish = RunFinish {
                state: RunState::Succeeded,
                error: None,
                result_json: None,
                finished_at: Timestamp::now(),
                elapsed: Some(Duration::from_millis(1)),
                retry_at: None,
                plugin: None,
            };
            store
                .run_set_state_if_running(id, c.run.attempt, &finish)
                .await
                .expect("finished");
        }
    }
    out
}

fn fmt_q(v: &[f64]) -> String {
    let s = sorted(v);
    format!("{:.3} / {:.3}", quantile(&s, 0.5), quantile(&s, 0.9))
}

/// Times `GET path` `reps` times (after one untimed request); (median ms, min, max, bytes).
async fn api<S: Store + Clone + 'static>(
    store: &S,
    paths: &[&str],
    reps: usize,
) -> Vec<(f64, f64, f64, usize)> {
    let host = HostBuilder::new(store.clone())
        .node("scale-api")
        .http(HttpConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            ..HttpConfig::default()
        })
        .start()
        .await
        .expect("host");
    let addr = host.http_addr().expect("api");
    let mut conn = Conn::connect(addr).await;
    let mut out = Vec::new();
    for path in paths {
        let bytes = conn.get(path).await.len();
        let mut samples = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            conn.get(path).await;
            samples.push(ms(t.elapsed()));
        }
        let (med, lo, hi) = median_min_max(&samples);
        out.push((med, lo, hi, bytes));
    }
    host.shutdown(Duration::from_secs(2)).await;
    out
}

/// `takt job list` against the store's database: seconds to the first line and to the end,
/// and the lines printed.
fn cli_list(takt: &str, db: &str, env: &[(&'static str, String)]) -> (f64, f64, usize) {
    use std::io::BufRead;
    let t = Instant::now();
    let mut child = std::process::Command::new(takt)
        .args(["job", "list", "--db", db])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {takt}: {e}"));
    let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = None;
    let mut lines = 0;
    for line in out.lines() {
        line.expect("a line");
        if first.is_none() {
            first = Some(t.elapsed().as_secs_f64());
        }
        lines += 1;
    }
    let status = child.wait().expect("takt ends");
    assert!(status.success(), "takt job list failed: {status}");
    (first.unwrap_or(f64::NAN), t.elapsed().as_secs_f64(), lines)
}

async fn scenario<S: Store + Clone + 'static>(
    backend: &Backend,
    store: &S,
    args: &Args,
    sizes: &[usize],
) {
    let label = backend.label();
    let reps = args.num("reps", 30) as usize;
    let api_reps = args.num("api-reps", 5) as usize;
    let now = Timestamp::now();
    // The due jobs: one-offs (at an instant long past, so that a claim leaves them with no
    // next fire) with no next fire until a pass arms them.
    let long_ago = Timestamp::from_second(946_684_800).expect("2000-01-01");
    let mut due = Vec::new();
    for i in 0..DUE {
        let mut job = JobDef::new(&format!("due-{i}"), "bench::noop")
            .expect("a valid job")
            .with_schedule(Schedule::new(Rule::Once(long_ago), Zone::utc()));
        job.next_fire = None;
        due.push(
            store
                .job_insert(&job, now)
                .await
                .expect("due job")
                .id
                .expect("an id"),
        );
    }
    let mut have = 0;
    let mut rep0 = 0;
    for &size in sizes {
        let heap0 = LIVE.load(Ordering::Relaxed);
        let rss0 = rss();
        let t = Instant::now();
        backend.add_jobs(have, size).await;
        let took = t.elapsed().as_secs_f64();
        let heap = LIVE.load(Ordering::Relaxed) - heap0;
        let rss1 = rss() - rss0;
        let added = (size - have) as f64;
        have = size;
        if let Backend::Memory(..) = backend {
            println!(
                "{label} {size:>9} jobs: +{:.0} heap bytes / job, +{:.0} RSS bytes / job \
                 (inserting {added:.0} took {took:.1} s)",
                heap as f64 / added,
                rss1 as f64 / added,
            );
        } else {
            println!("{label} {size:>9} jobs (adding {added:.0} took {took:.1} s)");
        }
        // Warm-up, then the measured passes.
        passes(store, &due, 3, rep0).await;
        rep0 += 3;
        let p = passes(store, &due, reps, rep0).await;
        rep0 += reps;
        println!(
            "  pass with {DUE} due, {reps} reps, ms p50 / p90: job_due {}  run_claim_due {}  next_due {}  total {}",
            fmt_q(&p.job_due),
            fmt_q(&p.claim),
            fmt_q(&p.next_due),
            fmt_q(&p.total),
        );
        let t = Instant::now();
        let all = store.job_list().await.expect("job_list");
        println!(
            "  Store::job_list: {} jobs in {:.1} ms",
            all.len(),
            ms(t.elapsed())
        );
        drop(all);
        let t = Instant::now();
        let page = store
            .job_page(&JobQuery::first(100))
            .await
            .expect("job_page");
        println!(
            "  Store::job_page (first {}): {:.2} ms",
            page.jobs.len(),
            ms(t.elapsed())
        );
    }
    if let Some(takt) = args.text("takt")
        && let Some((db, env)) = backend.cli_db()
    {
        let (first, total, lines) = cli_list(takt, &db, &env);
        println!(
            "  takt job list ({have} jobs): first line after {first:.2} s, all {lines} lines after {total:.2} s"
        );
    }
    let runs = match backend {
        Backend::Memory(..) => 0,
        Backend::Sqlite(..) => args.num("sqlite-runs", args.num("runs", 10_000_000)),
        Backend::Pg(..) => args.num("runs", 10_000_000),
    };
    if runs > 0 {
        let t = Instant::now();
        backend.add_runs(runs).await;
        println!("  {runs} runs added in {:.1} s", t.elapsed().as_secs_f64());
        // Again with the history in place (issue 19 asks for both together).
        if let Some(takt) = args.text("takt")
            && let Some((db, env)) = backend.cli_db()
        {
            let (first, total, lines) = cli_list(takt, &db, &env);
            println!(
                "  takt job list ({have} jobs, {runs} runs): first line after {first:.2} s, all {lines} lines after {total:.2} s"
            );
        }
    }
    let paths = ["/api/v1/runs?limit=100", "/api/v1/jobs"];
    let r = api(store, &paths, api_reps).await;
    for (path, (med, lo, hi, bytes)) in paths.iter().zip(r) {
        println!(
            "  GET {path} ({have} jobs, {runs} bulk runs): median {med:.1} ms (min {lo:.1}, max {hi:.1}, {api_reps} reps), {bytes} bytes"
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let sizes: Vec<usize> = args
        .text("sizes")
        .unwrap_or("10000,100000,1000000")
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("--sizes takes numbers separated by commas")
        })
        .collect();
    assert!(
        sizes.windows(2).all(|w| w[0] < w[1]),
        "--sizes must grow: the same store is grown from one size to the next"
    );
    let backends = args
        .text("backends")
        .unwrap_or("memory,sqlite,pg")
        .to_string();
    println!(
        "scale: sizes {sizes:?}, {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    for b in backends.split(',') {
        match b.trim() {
            kind @ ("memory" | "memory-once" | "memory-window") => {
                let store = MemoryStore::new();
                let workload = match kind {
                    "memory-once" => Workload::Once,
                    "memory-window" => Workload::Window,
                    _ => Workload::Alike,
                };
                let backend = Backend::Memory(store.clone(), workload);
                scenario(&backend, &store, &args, &sizes).await;
            }
            "sqlite" => {
                let path = temp_db("scale");
                let store = SqliteStore::open(&path, &SqliteOptions::default()).expect("sqlite");
                let backend = Backend::Sqlite(store.clone(), path.clone());
                scenario(&backend, &store, &args, &sizes).await;
                drop(backend);
                drop(store);
                remove_db(&path);
            }
            "pg" => {
                let url = args
                    .text("pg-url")
                    .map(str::to_string)
                    .or_else(|| std::env::var("TAKT_TEST_PG_URL").ok())
                    .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
                let client = pg::connect(&url).await;
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
                    .await
                    .expect("old schema dropped");
                let store = PgStore::connect(&PgOptions::new(url.clone()).with_schema(SCHEMA))
                    .await
                    .expect("postgres");
                let backend = Backend::Pg(store.clone(), client, url);
                scenario(&backend, &store, &args, &sizes).await;
                if let Backend::Pg(_, client, _) = &backend {
                    client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
                        .await
                        .expect("schema dropped");
                }
            }
            other => panic!(
                "unknown backend {other:?}: memory, memory-once, memory-window, sqlite or pg"
            ),
        }
    }
}
