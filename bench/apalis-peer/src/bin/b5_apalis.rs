//! B5/B6 peer: apalis 1.0 with its PostgreSQL backend (apalis-postgres), driven by takt-bench's
//! `b5` and `b6`.
//!
//! Two phases, one invocation each, so that the caller can read the server's statistics
//! between them (pushing is not part of the measured drain):
//!
//! * `push --url URL --runs N`: runs apalis' migrations (`PostgresStorage::setup`) and pushes
//!   `N` `u64` tasks, all due now, into the queue `b5`; prints `{"pushed": N}`.
//! * `drain --url URL --runs N [--batch B] [--concurrency C] [--worker NAME]`: one worker with
//!   a no-op handler drains the queue until this process has run `N` bodies (the caller passes
//!   `N` = all tasks for B5; for B6 each node process passes the total and is stopped by the
//!   caller). Prints one JSON line: `runs`, `body_secs` (from building the worker to the `N`-th
//!   body), `drain_secs` (until the stopped worker flushed its acks), and the settings.
//!
//! For B6 several drain processes share one queue: `--ids 1` prints `ran <payload> <unix ms>`
//! on stderr for every body, `--start-at <unix ms>` makes them start together, and
//! `--until-empty 1` stops the worker once no task is left `Pending` (plus 500 ms for the bodies
//! in hand), at the latest after `--seconds`.
//!
//! The pool is sqlx's default (`PgPoolOptions`, 10 connections) unless `--pool` is given.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use apalis::prelude::WorkerBuilderExt;
use apalis::prelude::*;
use apalis_postgres::{Config, PostgresStorage};
use sqlx::postgres::PgPoolOptions;

/// Bodies to run before this process stops its worker.
static TARGET: OnceLock<u64> = OnceLock::new();
/// Bodies run so far.
static DONE: AtomicU64 = AtomicU64::new(0);
/// When the last expected body ran.
static LAST_BODY: OnceLock<Instant> = OnceLock::new();
/// `--ids`: print every executed payload on stderr (B6 counts duplicates from them).
static PRINT_IDS: OnceLock<bool> = OnceLock::new();

async fn noop(job: u64, worker: WorkerContext) -> Result<(), BoxDynError> {
    if PRINT_IDS.get() == Some(&true) {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        eprintln!("ran {job} {ms}");
    }
    let n = DONE.fetch_add(1, Ordering::Relaxed) + 1;
    if Some(&n) == TARGET.get() {
        let _ = LAST_BODY.set(Instant::now());
        worker.stop()?;
    }
    Ok(())
}

struct Args {
    phase: String,
    url: String,
    runs: u64,
    batch: usize,
    concurrency: usize,
    pool: u32,
    worker: String,
    ids: bool,
    start_at: u64,
    seconds: u64,
    until_empty: bool,
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let phase = it.next().unwrap_or_else(|| usage("a phase is required"));
    let mut args = Args {
        phase,
        url: String::new(),
        runs: 20_000,
        batch: 10,
        concurrency: 10,
        pool: 10,
        worker: "b5-worker".into(),
        ids: false,
        start_at: 0,
        seconds: 0,
        until_empty: false,
    };
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let num = |v: String| -> u64 { v.parse().unwrap_or_else(|_| usage("a count")) };
        match flag.as_str() {
            "--url" => args.url = value(),
            "--runs" => args.runs = num(value()),
            "--batch" => args.batch = num(value()) as usize,
            "--concurrency" => args.concurrency = num(value()) as usize,
            "--pool" => args.pool = num(value()) as u32,
            "--worker" => args.worker = value(),
            "--ids" => args.ids = num(value()) != 0,
            "--start-at" => args.start_at = num(value()),
            "--seconds" => args.seconds = num(value()),
            "--until-empty" => args.until_empty = num(value()) != 0,
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if args.url.is_empty() || !matches!(args.phase.as_str(), "push" | "drain") {
        usage("the phase is push or drain, and --url is required");
    }
    args
}

fn usage(why: &str) -> ! {
    eprintln!(
        "b5-apalis: {why}\nusage: b5-apalis push|drain --url URL [--runs N] [--batch B] \
         [--concurrency C] [--pool P] [--worker NAME] [--ids 0|1] [--start-at UNIX_MS] \
         [--seconds S] [--until-empty 0|1]"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> Result<(), BoxDynError> {
    let args = parse_args();
    let pool = PgPoolOptions::new()
        .max_connections(args.pool)
        .connect(&args.url)
        .await?;
    let config = Config::default().queue("b5").batch_size(args.batch);
    if args.phase == "push" {
        PostgresStorage::<()>::setup(&pool).await?;
        let mut backend = PostgresStorage::<u64>::new(&pool).with_config(config);
        let mut jobs = futures::stream::iter(1..=args.runs);
        backend.push_stream(&mut jobs).await?;
        pool.close().await;
        println!("{}", serde_json::json!({ "pushed": args.runs }));
        return Ok(());
    }
    TARGET.set(args.runs).expect("set once");
    PRINT_IDS.set(args.ids).expect("set once");
    let backend = PostgresStorage::<u64>::new(&pool).with_config(config);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if args.start_at > now_ms {
        tokio::time::sleep(Duration::from_millis(args.start_at - now_ms)).await;
    }
    let start = Instant::now();
    let worker = WorkerBuilder::new(args.worker.as_str())
        .backend(backend)
        .concurrency(args.concurrency)
        .build(noop);
    if args.seconds > 0 || args.until_empty {
        let limit = Duration::from_secs(if args.seconds > 0 {
            args.seconds
        } else {
            3_600
        });
        let watch = watch_queue(&pool, args.until_empty, start + limit);
        tokio::select! {
            r = worker.run() => r?,
            () = watch => {}
        }
    } else {
        worker.run().await?;
    }
    let drain = start.elapsed();
    let body = LAST_BODY.get().map(|t| t.duration_since(start));
    pool.close().await;
    // Give the server a moment to see the connections go (the caller reads its statistics).
    tokio::time::sleep(Duration::from_millis(50)).await;
    let out = serde_json::json!({
        "runs": DONE.load(Ordering::Relaxed),
        "body_secs": body.map(|d| d.as_secs_f64()),
        "drain_secs": drain.as_secs_f64(),
        "batch_size": args.batch,
        "concurrency": args.concurrency,
        "pool": args.pool,
    });
    println!("{out}");
    Ok(())
}

/// Returns at `until`, or (with `until_empty`) once no task of the queue is `Pending` any more
/// and the fetched ones have had 500 ms to run.
async fn watch_queue(pool: &sqlx::PgPool, until_empty: bool, until: Instant) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if Instant::now() >= until {
            return;
        }
        if until_empty {
            let left: Result<i64, _> = sqlx::query_scalar(
                "SELECT count(*) FROM apalis.jobs WHERE job_type = 'b5' AND status = 'Pending'",
            )
            .fetch_one(pool)
            .await;
            if left.is_ok_and(|n| n == 0) {
                tokio::time::sleep(Duration::from_millis(500)).await;
                return;
            }
        }
    }
}
