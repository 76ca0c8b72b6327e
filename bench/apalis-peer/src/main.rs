//! B7 peer: apalis 1.0 with its SQLite backend (apalis-sqlite), driven by takt-bench's `b7`.
//!
//! One invocation is one round: open a fresh database file, push `--runs` jobs (not timed),
//! then let one worker with a no-op handler drain them. Prints one JSON line:
//!
//! * `body_secs`: from starting the worker to the `--runs`-th handler call (runs counted inside
//!   the job body, as B7 asks);
//! * `drain_secs`: until the worker stopped, which flushes its pending acks;
//! * `statuses`: how many jobs the database holds in each status afterwards (checks that the
//!   acks landed).
//!
//! `--mode normal` gives every pool connection takt's durability settings (WAL,
//! `synchronous = NORMAL`, the same busy timeout) plus the other PRAGMAs of apalis' `setup()`,
//! and runs apalis' migrations. `--mode setup` does what apalis documents: a default sqlx pool
//! and `SqliteStorage::setup()`, which switches to WAL and sets `synchronous = OFF`, but only on
//! the one pool connection that ran it (the others keep SQLite's default, FULL).

use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_sqlite::SqliteStorage;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

/// Runs to drain in this round, set once before the worker starts.
static TARGET: OnceLock<u64> = OnceLock::new();
/// Handler calls so far.
static DONE: AtomicU64 = AtomicU64::new(0);
/// When the last handler call of the round happened.
static LAST_BODY: OnceLock<Instant> = OnceLock::new();

async fn noop(_job: u64, worker: WorkerContext) -> Result<(), BoxDynError> {
    let n = DONE.fetch_add(1, Ordering::Relaxed) + 1;
    if Some(&n) == TARGET.get() {
        let _ = LAST_BODY.set(Instant::now());
        worker.stop()?;
    }
    Ok(())
}

struct Args {
    runs: u64,
    db: String,
    mode: String,
}

fn parse_args() -> Args {
    let mut args = Args {
        runs: 10_000,
        db: String::new(),
        mode: "normal".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--runs" => args.runs = value().parse().unwrap_or_else(|_| usage("--runs: a count")),
            "--db" => args.db = value(),
            "--mode" => args.mode = value(),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if args.db.is_empty() || !matches!(args.mode.as_str(), "normal" | "setup") {
        usage("--db is required and --mode is normal or setup");
    }
    args
}

fn usage(why: &str) -> ! {
    eprintln!("b7-apalis: {why}\nusage: b7-apalis --db FILE [--runs N] [--mode normal|setup]");
    std::process::exit(2)
}

async fn open(args: &Args) -> Result<SqlitePool, BoxDynError> {
    let url = format!("sqlite://{}", args.db);
    if args.mode == "setup" {
        let pool = SqlitePool::connect(&format!("{url}?mode=rwc")).await?;
        SqliteStorage::setup(&pool).await?;
        return Ok(pool);
    }
    let options = SqliteConnectOptions::from_str(&url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true)
        // The rest of what apalis' setup() sets, on every connection.
        .pragma("temp_store", "MEMORY")
        .pragma("cache_size", "64000")
        .pragma("journal_size_limit", "67108864");
    let pool = SqlitePoolOptions::new().connect_with(options).await?;
    SqliteStorage::migrations().run(&pool).await?;
    Ok(pool)
}

#[tokio::main]
async fn main() -> Result<(), BoxDynError> {
    let args = parse_args();
    let pool = open(&args).await?;
    let mut backend = SqliteStorage::new(&pool);
    let mut jobs = job_payloads(args.runs);
    backend.push_stream(&mut jobs).await?;
    TARGET.set(args.runs).expect("set once");

    let worker = WorkerBuilder::new("b7-worker").backend(backend).build(noop);
    let start = Instant::now();
    worker.run().await?;
    let drain = start.elapsed();
    let body = LAST_BODY
        .get()
        .map(|t| t.duration_since(start))
        .ok_or("the worker stopped before the last job ran")?;

    let mut statuses = serde_json::Map::new();
    for row in sqlx::query("SELECT status, COUNT(*) FROM Jobs GROUP BY status")
        .fetch_all(&pool)
        .await?
    {
        statuses.insert(row.get::<String, _>(0), row.get::<i64, _>(1).into());
    }
    let version: String = sqlx::query("SELECT sqlite_version()")
        .fetch_one(&pool)
        .await?
        .get(0);
    let synchronous: i64 = sqlx::query("PRAGMA synchronous")
        .fetch_one(&pool)
        .await?
        .get(0);
    let out = serde_json::json!({
        "runs": DONE.load(Ordering::Relaxed),
        "body_secs": body.as_secs_f64(),
        "drain_secs": drain.as_secs_f64(),
        "statuses": statuses,
        "sqlite_version": version,
        "synchronous_sample": synchronous,
        "max_connections": pool.options().get_max_connections(),
    });
    println!("{out}");
    Ok(())
}

/// The job payloads 1..=n as a stream.
fn job_payloads(n: u64) -> impl futures::Stream<Item = u64> + Unpin {
    futures::stream::iter(1..=n)
}
