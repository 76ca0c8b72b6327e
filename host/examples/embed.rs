//! Embedding takt in your own program (MES middleware, a service of yours): the same store,
//! plugins, executor and scheduling loop that `takt run` uses, assembled by
//! [`HostBuilder`] and driven from Rust.
//!
//! ```sh
//! cargo build                                   # builds the example plugins into target/debug
//! cargo run -p takt-host --example embed        # or: … --example embed -- <plugin dir> <database>
//! ```
//!
//! Two jobs: one greets every 2 seconds through the real `examples` cdylib plugin — isolated,
//! in a worker process that is this very program started in worker mode (hence
//! [`serve_if_worker`] first thing in `main`) —, the other counts shift output every 3
//! seconds through a plugin compiled into this program ([`static_plugin!`]) whose handler
//! updates the program's own state. It prints the runs as they start and finish, reloads the
//! plugin directory once (a changed file would be swapped in while the runs go on), and shuts
//! down gracefully after four runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use takt_core::job::Isolation;
use takt_core::job::JobDef;
use takt_core::schedule::{Interval, Rule, Schedule, Zone};
use takt_core::store::Store;
use takt_host::embed::HostBuilder;
use takt_host::scheduler::SchedulerEvent;
use takt_host::store::{SqliteOptions, SqliteStore};
use takt_host::worker::{WorkerProgram, serve_if_worker};
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};
use takt_plugin_api::static_plugin;

/// Params of `line::count`.
#[derive(Deserialize)]
struct CountParams {
    line: String,
    pieces: u64,
}

/// Its result.
#[derive(Serialize)]
struct Counted {
    line: String,
    total: u64,
}

fn every(seconds: u64) -> anyhow::Result<Schedule> {
    Ok(Schedule::new(
        Rule::Interval(Interval::new(seconds, None)?),
        Zone::utc(),
    ))
}

/// Adds `job` unless a job of that name is already stored (a second start reuses it).
async fn ensure<S: Store + Clone + 'static>(
    host: &takt_host::embed::Host<S>,
    store: &S,
    job: JobDef,
) -> anyhow::Result<()> {
    if store.job_get_by_name(&job.name).await?.is_none() {
        host.add_job(job).await?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // Started as a worker of the host below, this program serves its plugin and never
    // returns from here; before anything else (no runtime, no database).
    serve_if_worker();
    tokio::runtime::Runtime::new()?.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let plugin_dir = PathBuf::from(args.next().unwrap_or_else(|| "target/debug".to_string()));
    let database = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("takt-embed.db"));

    // A plugin compiled into this program: its handler shares state with the program.
    let total = Arc::new(AtomicU64::new(0));
    let counter = total.clone();
    let line_plugin = static_plugin!(move || {
        Plugin::new("line").handler(
            "count",
            "adds a shift's pieces to the line total",
            move |_ctx: &JobContext, p: CountParams| -> Result<Counted, JobError> {
                tracing::info!("line {} reports {} pieces", p.line, p.pieces);
                let total = counter.fetch_add(p.pieces, Ordering::SeqCst) + p.pieces;
                Ok(Counted {
                    line: p.line,
                    total,
                })
            },
        )
    })
    .map_err(anyhow::Error::msg)?;

    let store = SqliteStore::open(&database, &SqliteOptions::default())?;
    let host = HostBuilder::new(store.clone())
        .plugin_dir(&plugin_dir) // every file checked; a refused one never stops the rest
        .static_plugin(line_plugin)
        .worker_program(WorkerProgram::CurrentExe) // isolated jobs run in copies of this program
        .node("embedded")
        .capacity(4)
        .start()
        .await?;
    for refusal in host.plugins().refusals() {
        eprintln!("{refusal}");
    }
    let mut events = host.subscribe();

    let mut greeting =
        JobDef::new("embedded-greeting", "examples::hello")?.with_schedule(every(2)?);
    greeting.params_json = r#"{"name": "embedder"}"#.to_string();
    greeting.isolation = Isolation::Process; // a crash of the plugin fails only its run
    ensure(&host, &store, greeting).await?;
    let mut count = JobDef::new("line-3-count", "line::count")?.with_schedule(every(3)?);
    count.params_json = r#"{"line": "L3", "pieces": 120}"#.to_string();
    ensure(&host, &store, count).await?;
    println!(
        "scheduling into {}; waiting for four runs",
        database.display()
    );

    // What a deployment would trigger after copying a new plugin build into the directory:
    // changed files are checked and loaded beside the old versions, which drain.
    let report = host.reload_plugins().await?;
    println!(
        "reloaded the plugins: {} new, {} unchanged, {} refused",
        report.loaded.len(),
        report.unchanged.len(),
        report.refused.len()
    );

    let mut finished = 0;
    while finished < 4 {
        match events.recv().await? {
            SchedulerEvent::Started { run, fire_time, .. } => {
                println!("run {run} started (fire time {fire_time})");
            }
            SchedulerEvent::Finished { run, state, .. } => {
                let result = store.run_get(run).await?.and_then(|r| r.result_json);
                println!(
                    "run {run} finished: {} {}",
                    state.name(),
                    result.unwrap_or_default()
                );
                finished += 1;
            }
            // The database went away or came back (and kinds added later).
            other => println!("{other:?}"),
        }
    }
    host.shutdown(Duration::from_secs(5)).await;
    println!(
        "shut down; line total in this process: {}; the runs and their logs are in {}",
        total.load(Ordering::SeqCst),
        database.display()
    );
    Ok(())
}
