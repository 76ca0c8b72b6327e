//! Embedding takt in your own program (MES middleware, a service of yours): the same store,
//! plugins, executor and scheduling loop that `takt run` uses, driven from Rust.
//!
//! ```sh
//! cargo build                                   # builds the example plugins into target/debug
//! cargo run -p takt-host --example embed        # or: … --example embed -- <plugin dir> <database>
//! ```
//!
//! It adds (or reuses) a job that greets every 2 seconds through the real `examples` plugin,
//! prints the runs as they start and finish, and shuts down gracefully after three of them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use takt_core::job::{JobDef, JobName};
use takt_core::run::NodeId;
use takt_core::schedule::{Interval, Rule, Schedule, Zone};
use takt_core::store::Store;
use takt_host::executor::{Executor, ExecutorConfig};
use takt_host::plugins::{LoadOptions, PluginSet};
use takt_host::scheduler::{Scheduler, SchedulerConfig, SchedulerEvent, SystemClock};
use takt_host::store::{SqliteOptions, SqliteStore};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let plugin_dir = PathBuf::from(args.next().unwrap_or_else(|| "target/debug".to_string()));
    let database = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("takt-embed.db"));

    // Plugins: every file of the directory, each checked; a refused file never stops the rest.
    let plugins = PluginSet::load_dir(&plugin_dir, &LoadOptions::with_temp_shadow());
    for refusal in plugins.refusals() {
        eprintln!("{refusal}");
    }
    let store = SqliteStore::open(&database, &SqliteOptions::default())?;
    let scheduler = Scheduler::new(
        SchedulerConfig::new(NodeId("embedded".to_string())),
        store.clone(),
        Arc::new(plugins),
        Executor::new(ExecutorConfig::default()),
        Arc::new(SystemClock),
    );
    let handle = scheduler.start().await?;
    let mut events = handle.subscribe();

    let name = JobName::new("embedded-greeting")?;
    if store.job_get_by_name(&name).await?.is_none() {
        let every_two_seconds = Schedule::new(Rule::Interval(Interval::new(2, None)?), Zone::utc());
        let mut job =
            JobDef::new(name.as_str(), "examples::hello")?.with_schedule(every_two_seconds);
        job.params_json = r#"{"name": "embedder"}"#.to_string();
        handle.add_job(job).await?;
    }
    println!(
        "scheduling into {}; waiting for three runs",
        database.display()
    );

    let mut finished = 0;
    while finished < 3 {
        match events.recv().await? {
            SchedulerEvent::Started { run, fire_time, .. } => {
                println!("run {run} started (fire time {fire_time})");
            }
            SchedulerEvent::Finished { run, state, .. } => {
                println!("run {run} finished: {}", state.name());
                finished += 1;
            }
        }
    }
    handle.shutdown(Duration::from_secs(5)).await;
    println!(
        "shut down; the runs and their logs are in {}",
        database.display()
    );
    Ok(())
}
