//! `takt run`: the host on the embedded SQLite store, with the jobs of `takt.toml`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use jiff::Timestamp;
use takt_core::job::{JobDef, JobId};
use takt_core::run::{NodeId, RunId, RunState};
use takt_core::schedule::{format_duration, parse_duration};
use takt_core::store::Store;
use tokio::sync::broadcast::error::RecvError;

use crate::config::{CONFIG_APPLICATION, Config, DEFAULT_FILE, same_definition};
use crate::executor::{Executor, ExecutorConfig};
use crate::plugins::{PluginSet, STATIC_ORIGIN};
use crate::scheduler::{
    OffsetClock, Scheduler, SchedulerConfig, SchedulerError, SchedulerEvent, SchedulerHandle,
};
use crate::store::AnyStore;
use takt_core::store::StoreErrorKind;

/// Options of `takt run`.
#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// The config file [default: takt.toml in the working directory].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Stop by itself after this long (e.g. 30s, 5m), as Ctrl-C would.
    #[arg(long = "for", value_name = "DURATION")]
    run_for: Option<String>,
    /// Take this node id over from a process on another machine whose heartbeat still looks
    /// live (one that is gone for good); its running runs are recovered when their leases
    /// expire. Without it such a start is refused.
    #[arg(long)]
    takeover: bool,
}

pub(super) fn run(args: RunArgs) -> Result<()> {
    let run_for = match &args.run_for {
        Some(text) => Some(Duration::from_secs(
            parse_duration(text).map_err(|e| anyhow::anyhow!("--for \"{text}\": {e}"))?,
        )),
        None => None,
    };
    let file = args.config.unwrap_or_else(|| PathBuf::from(DEFAULT_FILE));
    let config = Config::load(&file)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(host(config, run_for, args.takeover))
}

async fn host(config: Config, run_for: Option<Duration>, takeover: bool) -> Result<()> {
    if let Some(dir) = config
        .database
        .sqlite_path()
        .and_then(Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the database directory {}", dir.display()))?;
    }
    let store = config
        .database
        .open(Some(super::db::progress_observer()))
        .await?;
    println!(
        "takt {} on {} (node {}, capacity {}, config {})",
        env!("CARGO_PKG_VERSION"),
        config.database,
        config.node_id,
        config.capacity,
        config.file.display()
    );

    let sql = sql_options(&config)?;
    let sql_names = sql.names();
    // `cargo build` puts the exe plugin *file* (takt-plugin-exe-cdylib) next to the takt
    // binary, which `takt init` makes the plugin directory: the file is refused (and listed
    // below with the fix) rather than stopping the start.
    let registry = super::plugin::registry(&config)?
        .builtin(
            exe_plugin(&config)?,
            "remove the file from the plugin directory: takt run has the exe executor \
             (exe::run) built in, configured by [exe] in takt.toml",
        )
        .builtin(
            sql_plugin(sql)?,
            "remove the file from the plugin directory: takt run has the stored-procedure \
             executor (sql::proc) built in, configured by [sql.connections] in takt.toml",
        )
        .build()
        .map_err(|r| anyhow::anyhow!("{}; fix: {}", r.reason, r.fix))?;
    let registry = Arc::new(registry);
    let plugins = registry.current();
    for p in plugins.plugins() {
        let handlers: Vec<&str> = p.handlers.iter().map(|h| h.handler_type.as_str()).collect();
        println!(
            "plugin {} {} loaded{}: {}",
            p.name,
            p.version,
            if p.is_isolated() { " (isolated)" } else { "" },
            handlers.join(", ")
        );
    }
    for r in plugins.refusals() {
        println!(
            "plugin file {} refused: {}; fix: {}",
            r.file.display(),
            r.reason,
            r.fix
        );
    }
    match &config.exe_allowlist {
        None => println!("exe::run may start any program: set [exe] allowlist to restrict it"),
        Some(list) => println!(
            "exe::run may start only: {}",
            if list.is_empty() {
                "nothing (the allowlist is empty)".to_string()
            } else {
                list.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
    }
    if sql_names.is_empty() {
        println!("sql::proc has no connections: add them to [sql.connections]");
    } else {
        println!("sql::proc connections: {}", sql_names.join(", "));
    }
    if plugins
        .plugins()
        .iter()
        .all(|p| p.file == Path::new(STATIC_ORIGIN))
    {
        println!(
            "no plugin loaded from {}: every run will fail; build the plugins (`cargo build`) or \
             set plugin_dir in {}",
            config.plugin_dir.display(),
            config.file.display()
        );
    }

    let executor = Executor::new(ExecutorConfig {
        capacity: config.capacity,
        ..ExecutorConfig::default()
    });
    let mut sched_config = SchedulerConfig::new(NodeId(config.node_id.clone()));
    sched_config.capacity = config.capacity;
    sched_config.tags = config.tags.clone();
    sched_config.lease = config.lease;
    sched_config.renew_every = config.renew_every;
    sched_config.plugin_watch = config.plugin_watch;
    sched_config.takeover = takeover;
    let clock = Arc::new(OffsetClock::new(test_clock_skew()?));
    if let Some(offset) = sync_clock(&store, &clock).await? {
        println!(
            "scheduling by the database clock: it is {} ms {} this node's",
            offset.as_millis().abs(),
            if offset.is_negative() {
                "behind"
            } else {
                "ahead of"
            }
        );
    }
    let scheduler = Scheduler::with_plugins(
        sched_config,
        store.clone(),
        registry.clone(),
        executor,
        clock.clone(),
    );
    let handle = scheduler.start().await?;
    let listener = {
        let handle = handle.clone();
        store.listen(move || handle.wake())
    };
    // The clock offset, measured again as often as the leases are renewed (the loop's
    // renewals are the node's heartbeat); a failure is reported and tried again next time.
    let keeper = {
        let (store, clock) = (store.clone(), clock.clone());
        let every = config.renew_every;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = sync_clock(&store, &clock).await {
                    tracing::warn!("cannot read the database clock: {e}");
                }
            }
        })
    };
    let mut events = handle.subscribe();

    if let Err(e) = sync_jobs(&config, &store, &handle, &plugins).await {
        handle.shutdown(Duration::ZERO).await;
        return Err(e);
    }
    let mut names: HashMap<JobId, String> = store
        .job_list()
        .await?
        .into_iter()
        .filter_map(|j| j.id.map(|id| (id, j.name.to_string())))
        .collect();
    let mut scheduled: Vec<(String, Timestamp)> = store
        .job_list()
        .await?
        .into_iter()
        .filter(|j| j.enabled)
        .filter_map(|j| j.next_fire.map(|n| (j.name.to_string(), n)))
        .collect();
    scheduled.sort_by_key(|(_, n)| *n);
    for (name, next) in &scheduled {
        println!("job {name}: next fire {}", short_time(*next));
    }
    match run_for {
        Some(d) => println!(
            "running for {}; Ctrl-C stops earlier",
            format_duration(d.as_secs())
        ),
        None => println!("running; Ctrl-C stops"),
    }
    println!();
    println!(
        "{:<8}  {:<24}  {:<8}  {:>7}  {:<9}  {:>8}",
        "UTC", "JOB", "FIRE", "ATTEMPT", "STATE", "ELAPSED"
    );

    let mut printer = Printer {
        store: store.clone(),
        log_seen: HashMap::new(),
        counts: BTreeMap::new(),
        started: 0,
    };
    let deadline = run_for.map(|d| tokio::time::Instant::now() + d);
    // Set when another process takes this node id over: the node stops, and so does takt run.
    let mut taken_over: Option<String> = None;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut hangup = super::plugin::Hangup::new()?;
    loop {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ev = events.recv() => match ev {
                Ok(SchedulerEvent::TakenOver { message }) => {
                    taken_over = Some(message);
                    break;
                }
                Ok(ev) => printer.print(&ev, &mut names).await,
                Err(RecvError::Lagged(n)) => println!("({n} run events not shown: the terminal is slower than the runs)"),
                Err(RecvError::Closed) => break,
            },
            _ = &mut ctrl_c => { println!("interrupted"); break; }
            () = hangup.recv() => super::plugin::reload_on_hangup(&handle).await,
            () = sleep => break,
        }
    }

    // The scheduler stops claiming, lets running runs finish for up to `grace`, then cancels
    // the rest as shutdown; their ends are shown as they come.
    let running = handle.running();
    if running > 0 {
        println!(
            "stopping: waiting up to {} for {running} running runs",
            format_duration(config.grace.as_secs())
        );
    } else {
        println!("stopping");
    }
    let stopped = handle.shutdown(config.grace);
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            () = &mut stopped => break,
            ev = events.recv() => match ev {
                Ok(ev) => printer.print(&ev, &mut names).await,
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => {
                    (&mut stopped).await;
                    break;
                }
            },
        }
    }
    keeper.abort();
    if let Some(l) = listener {
        l.abort();
    }
    while let Ok(ev) = events.try_recv() {
        printer.print(&ev, &mut names).await;
    }

    let ended: Vec<String> = printer
        .counts
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    println!(
        "summary: {} attempts started{}{}; every run is recorded in {}",
        printer.started,
        if ended.is_empty() { "" } else { ", " },
        ended.join(", "),
        config.database
    );
    match taken_over {
        Some(message) => Err(anyhow::anyhow!(message)),
        None => Ok(()),
    }
}

/// `TAKT_TEST_CLOCK_SKEW` (seconds, may be negative): shifts this process's clock, so a test
/// can run a node whose clock is wrong and check that the database clock overrides it.
fn test_clock_skew() -> Result<jiff::SignedDuration> {
    match std::env::var("TAKT_TEST_CLOCK_SKEW") {
        Ok(v) if !v.trim().is_empty() => {
            let secs: i64 = v.trim().parse().map_err(|_| {
                anyhow::anyhow!("TAKT_TEST_CLOCK_SKEW=\"{v}\" is not a whole number of seconds")
            })?;
            Ok(jiff::SignedDuration::from_secs(secs))
        }
        _ => Ok(jiff::SignedDuration::ZERO),
    }
}

/// Measures the database clock against this node's and sets `clock`'s offset to it (halfway
/// through the round trip). `None` for an embedded database, whose clock is this machine's.
async fn sync_clock(
    store: &AnyStore,
    clock: &OffsetClock,
) -> Result<Option<jiff::SignedDuration>, takt_core::store::StoreError> {
    let before = clock.local_now();
    let Some(db) = store.database_now().await? else {
        return Ok(None);
    };
    let after = clock.local_now();
    let mid = before
        .checked_add(after.duration_since(before) / 2)
        .unwrap_or(after);
    let offset = db.duration_since(mid);
    clock.set_offset(offset);
    Ok(Some(offset))
}

/// The built-in external-program executor (`exe::run`), compiled in, with the allowlist of
/// `[exe] allowlist` / `TAKT_EXE_ALLOWLIST`.
fn exe_plugin(config: &Config) -> Result<takt_plugin_api::abi::PluginRef> {
    use takt_plugin_exe::{Allowlist, ExeOptions};
    let allowlist = match &config.exe_allowlist {
        Some(list) => Allowlist::only(list.clone(), config.exe_allowlist_source.clone()),
        None => Allowlist::allow_all(),
    };
    let options = ExeOptions {
        allowlist,
        ..ExeOptions::default()
    };
    takt_plugin_api::static_plugin!(move || takt_plugin_exe::plugin(options))
        .map_err(|e| anyhow::anyhow!("the built-in exe executor is invalid: {e}"))
}

/// The named connections of `[sql.connections]`, plus those only set in the environment
/// (`TAKT_SQL_CONNECTION_<NAME>`).
fn sql_options(config: &Config) -> Result<takt_plugin_sql::SqlOptions> {
    let mut options = config.sql.clone();
    options.add_from_env().map_err(|e| anyhow::anyhow!(e))?;
    Ok(options)
}

/// The built-in stored-procedure executor (`sql::proc`), compiled in, with `options`.
fn sql_plugin(options: takt_plugin_sql::SqlOptions) -> Result<takt_plugin_api::abi::PluginRef> {
    takt_plugin_api::static_plugin!(move || takt_plugin_sql::plugin(options))
        .map_err(|e| anyhow::anyhow!("the built-in sql executor is invalid: {e}"))
}

/// Inserts new file jobs, updates changed ones, disables file jobs the file no longer
/// declares; refuses a file job whose name a CLI/API job already has.
async fn sync_jobs(
    config: &Config,
    store: &AnyStore,
    handle: &SchedulerHandle<AnyStore>,
    plugins: &PluginSet,
) -> Result<()> {
    let stored = store.job_list().await?;
    let by_name: HashMap<&str, &JobDef> = stored.iter().map(|j| (j.name.as_str(), j)).collect();
    let (mut added, mut updated, mut unchanged, mut disabled) = (0, 0, 0, 0);
    for job in &config.jobs {
        match by_name.get(job.name.as_str()) {
            None => match handle.add_job(job.clone()).await {
                Ok(_) => added += 1,
                // Nodes starting together on one database sync the same file: the one that
                // inserts first wins the name, the others find the job there.
                Err(SchedulerError::Store(e)) if e.kind() == StoreErrorKind::Conflict => {
                    unchanged += 1;
                }
                Err(e) => return Err(e.into()),
            },
            Some(old) if old.application.as_deref() != Some(CONFIG_APPLICATION) => bail!(
                "{}: job \"{}\" already exists in {} and was not declared in a config file; \
                 rename the job in the file, or remove the stored one (`takt job remove`)",
                config.file.display(),
                job.name,
                config.database
            ),
            Some(old) if same_definition(old, job) => unchanged += 1,
            Some(old) => {
                let mut new = job.clone();
                new.id = old.id;
                new.version = old.version;
                match handle.update_job(new).await {
                    Ok(_) => updated += 1,
                    // Another node starting with the same file updated it first.
                    Err(SchedulerError::Store(e)) if e.kind() == StoreErrorKind::Conflict => {
                        unchanged += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if crate::builtin::is_builtin(&job.handler_type) {
            // Checked when the config was read.
        } else if let Err(e) = plugins.resolve(&job.handler_type) {
            println!(
                "warning: job {}: handler \"{}\" does not resolve ({e}); its runs will be \
                 recorded as failed until a plugin provides it",
                job.name, job.handler_type
            );
        }
    }
    for old in &stored {
        if old.application.as_deref() == Some(CONFIG_APPLICATION)
            && old.enabled
            && !config.jobs.iter().any(|j| j.name == old.name)
            && let Some(id) = old.id
        {
            handle.set_enabled(id, false).await?;
            println!(
                "job {} is no longer in {}: disabled (its history is kept)",
                old.name,
                config.file.display()
            );
            disabled += 1;
        }
    }
    println!(
        "jobs from {}: {added} added, {updated} updated, {unchanged} unchanged, {disabled} disabled",
        config.file.display()
    );
    Ok(())
}

struct Printer {
    store: AnyStore,
    /// The last log sequence number printed per run.
    log_seen: HashMap<RunId, u64>,
    /// Attempts ended, by recorded state.
    counts: BTreeMap<String, usize>,
    started: usize,
}

impl Printer {
    async fn print(&mut self, ev: &SchedulerEvent, names: &mut HashMap<JobId, String>) {
        let (run, job, fire, attempt, state) = match ev {
            SchedulerEvent::Started {
                run,
                job,
                fire_time,
                attempt,
            } => {
                self.started += 1;
                (*run, *job, *fire_time, *attempt, None)
            }
            SchedulerEvent::Finished {
                run,
                job,
                fire_time,
                attempt,
                state,
            } => (*run, *job, *fire_time, *attempt, Some(*state)),
            SchedulerEvent::StoreUnavailable { error } => {
                println!(
                    "{}  database unavailable: {error}; runs that end meanwhile are kept and \
                     recorded when it is back; retrying",
                    short_time(Timestamp::now())
                );
                return;
            }
            SchedulerEvent::StoreRecovered { down_for } => {
                println!(
                    "{}  database back after {:.1}s; fires that fell due meanwhile follow \
                     their misfire policy",
                    short_time(Timestamp::now()),
                    down_for.as_secs_f64()
                );
                return;
            }
            SchedulerEvent::TakenOver { message } => {
                println!("{}  {message}", short_time(Timestamp::now()));
                return;
            }
            other => {
                super::plugin::print_event(other, &short_time(Timestamp::now()));
                return;
            }
        };
        if !names.contains_key(&job)
            && let Ok(Some(j)) = self.store.job_get(job).await
        {
            names.insert(job, j.name.to_string());
        }
        let name = names.get(&job).cloned().unwrap_or_else(|| job.to_string());
        let stored = match state {
            Some(_) => self.store.run_get(run).await.ok().flatten(),
            None => None,
        };
        let elapsed = stored
            .as_ref()
            .and_then(|r| r.elapsed)
            .map(|d| format!("{:.3}s", d.as_secs_f64()))
            .unwrap_or_else(|| "-".into());
        let shown_state = match state {
            None => "running".to_string(),
            Some(RunState::Pending) => "retrying".to_string(),
            Some(s) => s.name().to_string(),
        };
        println!(
            "{:<8}  {:<24}  {:<8}  {:>7}  {:<9}  {:>8}",
            short_time(Timestamp::now()),
            name,
            short_time(fire),
            attempt,
            shown_state,
            elapsed
        );
        if state.is_none() {
            return;
        }
        *self.counts.entry(shown_state).or_default() += 1;
        if let Some(error) = stored.as_ref().and_then(|r| r.error.as_deref()) {
            println!("          error: {error}");
        }
        let after = self.log_seen.get(&run).copied();
        if let Ok(lines) = self.store.log_list(run, after, 1000).await {
            for (seq, line) in lines {
                println!("          {:<5} {}", line.level.name(), line.message);
                self.log_seen.insert(run, seq);
            }
        }
    }
}

/// `HH:MM:SS` in UTC.
fn short_time(t: Timestamp) -> String {
    t.strftime("%H:%M:%S").to_string()
}
