//! `takt run`: the host on the embedded SQLite store, with the jobs of `takt.toml`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use jiff::Timestamp;
use takt_core::job::{JobDef, JobId};
use takt_core::run::{NODE_RESTARTED, NodeId, RunId, RunState};
use takt_core::schedule::format_duration;
use takt_core::store::{RunFilter, Store};
use tokio::sync::broadcast::{self, error::RecvError};

use super::notify::Notifier;
use super::signals::StopRequests;
use crate::config::{CONFIG_APPLICATION, Config, DEFAULT_FILE, LogFormat, same_definition};
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
    /// Stop by itself after this long (e.g. 30s, 5m), as SIGTERM or Ctrl-C would.
    #[arg(long = "for", value_name = "DURATION", allow_hyphen_values = true)]
    run_for: Option<String>,
    /// Take this node id over from a process on another machine whose heartbeat still looks
    /// live (one that is gone for good); its running runs are recovered when their leases
    /// expire. Without it such a start is refused.
    #[arg(long)]
    takeover: bool,
    /// How logs are written to stderr: text (human-readable lines) or json (one object per
    /// line) [default: log_format of the config, else text]. The level is TAKT_LOG's.
    #[arg(long, value_name = "text|json")]
    log_format: Option<String>,
    /// Serve the HTTP API on this address (host:port), or `off` [default: [http] listen of
    /// the config; no API when the config has no [http] section].
    #[arg(long, value_name = "ADDR|off")]
    http_listen: Option<String>,
    /// Print one JSON object per line on stdout for every event (a run started or ended with
    /// its state, error and new log lines; the database lost and back; plugin reloads); the
    /// human lines then go to stderr.
    #[arg(long)]
    json: bool,
}

impl RunArgs {
    /// `takt run --config file` as a Windows service runs it.
    #[cfg_attr(not(windows), allow(dead_code))]
    pub(super) fn service(file: PathBuf) -> RunArgs {
        RunArgs {
            config: Some(file),
            run_for: None,
            takeover: false,
            log_format: None,
            http_listen: None,
            json: false,
        }
    }
}

pub(super) fn run(args: RunArgs) -> Result<()> {
    run_as(args, Notifier::from_env(), None)
}

/// `takt run` told by `notifier` what to report to its service manager. `stop`: the end of
/// a stop channel a service manager feeds (the Windows service's control handler); without
/// it the process's signals are the stoppers.
pub(super) fn run_as(args: RunArgs, notifier: Notifier, stop: Option<StopRequests>) -> Result<()> {
    // Nobody reading the run lines any more is no reason to stop scheduling.
    super::out::set_mode(super::out::Mode::KeepRunning);
    if args.json {
        super::out::text_to_stderr();
    }
    let run_for = match &args.run_for {
        Some(text) => Some(Duration::from_secs(super::args::duration("--for", text)?)),
        None => None,
    };
    let file = args.config.unwrap_or_else(|| PathBuf::from(DEFAULT_FILE));
    let mut config = Config::load(&file)?;
    match args.http_listen.as_deref() {
        None => {}
        Some("off") => config.api = None,
        Some(addr) => {
            let listen = addr.parse().map_err(|_| {
                anyhow::anyhow!(
                    "--http-listen: \"{addr}\" is not host:port; write e.g. 127.0.0.1:{}, or off",
                    crate::http::DEFAULT_PORT
                )
            })?;
            config.api.get_or_insert_with(Default::default).listen = listen;
        }
    }
    let log_format = match &args.log_format {
        Some(text) => text
            .parse::<LogFormat>()
            .map_err(|e| anyhow::anyhow!("--log-format: {e}"))?,
        None => config.log_format.unwrap_or_default(),
    };
    super::logging::install(log_format, super::logging::RUN_FILTER)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // From here on SIGTERM and Ctrl-C ask for the graceful stop instead of ending the
        // process, also while the host is still starting.
        let requests = match stop {
            Some(requests) => requests,
            None => {
                let (stopper, requests) = super::signals::channel();
                super::signals::listen(stopper).context("cannot listen for stop signals")?;
                requests
            }
        };
        host(
            config,
            run_for,
            args.takeover,
            args.json,
            requests,
            notifier,
        )
        .await
    })
}

/// The host until it has stopped: start, print runs, and stop gracefully on the first of
/// `stop` (see [`super::signals`]), the end of `run_for`, or a takeover of its node id.
async fn host(
    config: Config,
    run_for: Option<Duration>,
    takeover: bool,
    json: bool,
    mut stop: StopRequests,
    notifier: Notifier,
) -> Result<()> {
    if let Some(dir) = config
        .database
        .sqlite_path()
        .and_then(Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the database directory {}", dir.display()))?;
    }
    // Opening may wait on an unreachable database: a stop request ends the wait.
    let store = tokio::select! {
        store = config.database.open(Some(super::db::progress_log())) => store?,
        request = stop.next() => {
            outln!("stopping: {} while opening {}; nothing was started", request.why, config.database)?;
            return Ok(());
        }
    };
    outln!(
        "takt {} on {} (node {}, capacity {} + {} for recurring schedules, config {})",
        env!("CARGO_PKG_VERSION"),
        config.database,
        config.node_id,
        config.capacity,
        config.recurring_reserve,
        config.file.display()
    )?;

    let sql = sql_options(&config)?;
    let sql_names = sql.names();
    let http = http_options(&config)?;
    let http_names = http.names();
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
        .builtin(
            http_plugin(http)?,
            "remove the file from the plugin directory: takt run has the WebAPI executor \
             (http::request) built in, configured by [http_client.connections] in takt.toml",
        )
        .build()
        .map_err(|r| anyhow::anyhow!("{}; fix: {}", r.reason, r.fix))?;
    let registry = Arc::new(registry);
    let plugins = registry.current();
    for p in plugins.plugins() {
        let handlers: Vec<&str> = p.handlers.iter().map(|h| h.handler_type.as_str()).collect();
        outln!(
            "plugin {} {} loaded{}: {}",
            p.name,
            p.version,
            if p.is_isolated() { " (isolated)" } else { "" },
            handlers.join(", ")
        )?;
    }
    for r in plugins.refusals() {
        outln!(
            "plugin file {} refused: {}; fix: {}",
            r.file.display(),
            r.reason,
            r.fix
        )?;
    }
    match &config.exe_allowlist {
        None => outln!("exe::run may start any program: set [exe] allowlist to restrict it")?,
        Some(list) => outln!(
            "exe::run may start only: {}",
            if list.is_empty() {
                "nothing (the allowlist is empty)".to_string()
            } else {
                list.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )?,
    }
    if sql_names.is_empty() {
        outln!("sql::proc has no connections: add them to [sql.connections]")?;
    } else {
        outln!("sql::proc connections: {}", sql_names.join(", "))?;
    }
    if http_names.is_empty() {
        outln!(
            "http::request has no connections (jobs give a url): add them to [http_client.connections]"
        )?;
    } else {
        outln!("http::request connections: {}", http_names.join(", "))?;
    }
    if plugins
        .plugins()
        .iter()
        .all(|p| p.file == Path::new(STATIC_ORIGIN))
    {
        outln!(
            "no plugin loaded from {}: every run will fail; build the plugins (`cargo build`) or \
             set plugin_dir in {}",
            config.plugin_dir.display(),
            config.file.display()
        )?;
    }

    let mut sched_config = SchedulerConfig::new(NodeId(config.node_id.clone()));
    sched_config.capacity = config.capacity;
    sched_config.recurring_reserve = config.recurring_reserve;
    sched_config.claim_ahead = config.claim_ahead;
    sched_config.lookahead_batch = config.lookahead_batch;
    // The executor has a slot for every run the loop may start, the reserved ones too.
    let executor = Executor::new(ExecutorConfig {
        capacity: sched_config.slots(),
        ..ExecutorConfig::default()
    });
    sched_config.tags = config.tags.clone();
    sched_config.lease = config.lease;
    sched_config.renew_every = config.renew_every;
    sched_config.plugin_watch = config.plugin_watch;
    sched_config.takeover = takeover;
    // The runs this process claims carry it: what is still `running` under it after the stop
    // was not recorded (see `unrecorded`).
    let instance = sched_config.instance.clone();
    let clock = Arc::new(OffsetClock::new(test_clock_skew()?));
    if let Some(offset) = sync_clock(&store, &clock).await? {
        outln!(
            "scheduling by the database clock: it is {} ms {} this node's",
            offset.as_millis().abs(),
            if offset.is_negative() {
                "behind"
            } else {
                "ahead of"
            }
        )?;
    }
    if let Some(request) = stop.try_next() {
        outln!(
            "stopping: {} during the start; nothing was started",
            request.why
        )?;
        return Ok(());
    }
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let scheduler = Scheduler::with_plugins(
        sched_config,
        store.clone(),
        registry.clone(),
        executor,
        clock.clone(),
    )
    .observer(metrics.clone());
    let handle = scheduler.start().await?;
    let http = match &config.api {
        None => None,
        Some(http) => {
            match crate::http::HttpServer::start(Arc::new(handle.clone()), http, metrics.clone())
                .await
            {
                Ok(server) => {
                    let tokens = store.token_list().await.map(|t| t.len()).unwrap_or(0);
                    outln!(
                        "http api on {}/api/v1 ({})",
                        server.base_url(),
                        if tokens == 0 {
                            "no tokens: loopback callers are admin; `takt token create` to require them"
                        } else {
                            "tokens required"
                        }
                    )?;
                    Some(server)
                }
                Err(e) => {
                    handle.shutdown(Duration::ZERO).await;
                    return Err(e.into());
                }
            }
        }
    };
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
    // Alerts read this node's run ends and the store; they never hold the loop.
    let alerter = if config.alerts.is_empty() {
        None
    } else {
        outln!(
            "alerts: {} rules on channels {}",
            config.alerts.rules_len(),
            config.alerts.channel_names().join(", ")
        )?;
        Some(crate::alerts::start(
            store.clone(),
            config.alerts.clone(),
            config.node_id.clone(),
            config.lease,
            handle.subscribe(),
        ))
    };
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
        outln!("job {name}: next fire {}", short_time(*next))?;
    }
    match run_for {
        Some(d) => outln!(
            "running for {}; Ctrl-C or SIGTERM stops earlier",
            format_duration(d.as_secs())
        )?,
        None => outln!("running; Ctrl-C or SIGTERM stops")?,
    }
    outln!()?;
    outln!(
        "{:<8}  {:<24}  {:<8}  {:>7}  {:<9}  {:>8}",
        "UTC",
        "JOB",
        "FIRE",
        "ATTEMPT",
        "STATE",
        "ELAPSED"
    )?;

    let mut printer = Printer {
        store: store.clone(),
        log_seen: HashMap::new(),
        counts: BTreeMap::new(),
        started: 0,
        outage: None,
        json,
    };
    // The store is open, the plugins loaded, the jobs synced and the loop started.
    notifier.ready(&printer.status(handle.running()));
    let watchdog = notifier.watchdog(handle.clone());
    // systemctl status shows the summary; refreshed at most this often, and only if changed.
    let mut status_tick = tokio::time::interval(Duration::from_secs(2));
    status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shown_status = String::new();
    let deadline = run_for.map(|d| tokio::time::Instant::now() + d);
    // Set when another process takes this node id over: the node stops, and so does takt run.
    let mut taken_over: Option<String> = None;
    let mut hangup = super::plugin::Hangup::new()?;
    let why = loop {
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
                    break format!("node {} was taken over by another process", config.node_id);
                }
                Ok(ev) => printer.print(&ev, &mut names).await?,
                Err(RecvError::Lagged(n)) => outln!("({n} run events not shown: the terminal is slower than the runs)")?,
                Err(RecvError::Closed) => break "the scheduler ended".to_string(),
            },
            request = stop.next() => break request.why,
            () = hangup.recv() => super::plugin::reload_on_hangup(&handle).await?,
            _ = status_tick.tick(), if notifier.enabled() => {
                let status = printer.status(handle.running());
                if status != shown_status {
                    notifier.status(&status);
                    shown_status = status;
                }
            }
            () = sleep => break format!(
                "--for {} has passed",
                format_duration(run_for.unwrap_or_default().as_secs())
            ),
        }
    };

    // The grace, then the executor's grace for cancelled runs and time to record them.
    notifier.stopping(
        &format!(
            "stopping ({why}): draining {} running runs for up to {}",
            handle.running(),
            format_duration(config.grace.as_secs())
        ),
        config.grace + Duration::from_secs(15),
    );
    let forced = stop_gracefully(
        &handle,
        config.grace,
        &why,
        &mut stop,
        &mut events,
        &mut printer,
        &mut names,
    )
    .await?;
    keeper.abort();
    if let Some(a) = alerter {
        a.stop();
    }
    if let Some(w) = watchdog {
        w.abort();
    }
    if let Some(l) = listener {
        l.abort();
    }
    if let Some(server) = &http {
        server.shutdown(Duration::from_secs(2)).await;
    }
    while let Ok(ev) = events.try_recv() {
        printer.print(&ev, &mut names).await?;
    }

    let ended: Vec<String> = printer
        .counts
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let started = format!(
        "summary: {} attempts started{}{}",
        printer.started,
        if ended.is_empty() { "" } else { ", " },
        ended.join(", ")
    );
    if let Some(message) = taken_over {
        // The node id is another process's now: runs this one could not finish are recovered
        // by it when their leases expire, and the takeover is the error to report.
        outln!("{started}")?;
        bail!(message);
    }
    match unrecorded(&store, &instance).await {
        Ok(0) => outln!("{started}; every run is recorded in {}", config.database)?,
        Ok(n) => {
            outln!("{started}")?;
            bail!(
                "{n} runs of node {} are still recorded as running in {}: their ends could not \
                 be stored; the node's next start fails them as \"{NODE_RESTARTED}\" and \
                 retries them per their jobs' policies",
                config.node_id,
                config.database
            );
        }
        Err(e) => {
            outln!("{started}")?;
            bail!(
                "cannot check that every run of node {} is recorded in {}: {e}; runs left \
                 running are failed as \"{NODE_RESTARTED}\" at the node's next start",
                config.node_id,
                config.database
            );
        }
    }
    if forced > 0 {
        bail!(
            "the stop was forced by a second stop request: {forced} running runs were cancelled \
             without their grace (each is recorded cancelled, reason shutdown)"
        );
    }
    Ok(())
}

/// The graceful stop after the first stop request (`why`): the scheduler claims nothing
/// more, running runs may finish within `grace`, the rest are cancelled as shutdown, and
/// their ends are printed as they come. A second request cuts the drain short (the runs are
/// cancelled at once, and still recorded); a third ends the process without waiting (exit
/// 1). Returns how many runs the second request cancelled (0: the stop was not forced).
///
/// A service wrapper (systemd, a Windows service) reaches this through the [`StopRequests`]
/// given to [`host`].
async fn stop_gracefully(
    handle: &SchedulerHandle<AnyStore>,
    grace: Duration,
    why: &str,
    stop: &mut StopRequests,
    events: &mut broadcast::Receiver<SchedulerEvent>,
    printer: &mut Printer,
    names: &mut HashMap<JobId, String>,
) -> Result<usize> {
    match handle.running() {
        0 => outln!("stopping: {why}; no run is running")?,
        running => outln!(
            "stopping: {why}; waiting up to {} for {running} running runs (a second Ctrl-C or \
             SIGTERM cancels them now)",
            format_duration(grace.as_secs())
        )?,
    }
    let stopped = handle.shutdown(grace);
    tokio::pin!(stopped);
    let mut forced = None;
    loop {
        tokio::select! {
            () = &mut stopped => break,
            ev = events.recv() => match ev {
                Ok(ev) => printer.print(&ev, names).await?,
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => {
                    (&mut stopped).await;
                    break;
                }
            },
            request = stop.next() => {
                if forced.is_some() {
                    outln!(
                        "stopping: {} again: exiting now; runs still running are failed as \
                         \"{NODE_RESTARTED}\" at this node's next start",
                        request.why
                    )?;
                    std::process::exit(1);
                }
                let running = handle.running();
                outln!(
                    "stopping: {}: second stop request, cancelling {running} running runs now \
                     (a third one exits without waiting for them)",
                    request.why
                )?;
                forced = Some(running);
                // Shortens the drain the first call is in; returns at once.
                handle.shutdown(Duration::ZERO).await;
            }
        }
    }
    Ok(forced.unwrap_or(0))
}

/// How many runs this process (its node `instance`) claimed are still recorded `running`:
/// after a complete stop, those whose ends could not be stored. Runs an earlier process of
/// the same node id left behind (recovered when their leases expire) are not this one's.
async fn unrecorded(
    store: &AnyStore,
    instance: &takt_core::node::InstanceId,
) -> Result<usize, takt_core::store::StoreError> {
    let filter = RunFilter {
        job: None,
        state: Some(RunState::Running),
        limit: 10_000,
        ..RunFilter::default()
    };
    Ok(store
        .run_list(&filter)
        .await?
        .iter()
        .filter(|r| r.node_instance.as_ref() == Some(instance))
        .count())
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

/// The named connections of `[http_client.connections]` (with their environment overrides),
/// plus those only set in the environment (`TAKT_HTTP_CONNECTION_<NAME>`).
fn http_options(config: &Config) -> Result<takt_plugin_http::HttpOptions> {
    let mut options = config.http.clone();
    options.add_from_env().map_err(|e| anyhow::anyhow!(e))?;
    Ok(options)
}

/// The built-in WebAPI executor (`http::request`), compiled in, with `options`.
fn http_plugin(options: takt_plugin_http::HttpOptions) -> Result<takt_plugin_api::abi::PluginRef> {
    takt_plugin_api::static_plugin!(move || takt_plugin_http::plugin(options))
        .map_err(|e| anyhow::anyhow!("the built-in http executor is invalid: {e}"))
}

/// The file's jobs, each after the jobs of the file it names — those it continues with
/// (`on_success` / `on_failure`) and those it depends on (`depends_on`): both must name stored
/// jobs, so those are stored first; otherwise in file order. A cycle is left to the store,
/// which refuses it naming the cycle.
fn reference_order(jobs: &[JobDef]) -> Vec<&JobDef> {
    fn visit<'a>(i: usize, jobs: &'a [JobDef], seen: &mut [bool], out: &mut Vec<&'a JobDef>) {
        if seen[i] {
            return;
        }
        seen[i] = true;
        for target in jobs[i]
            .continuation_targets()
            .chain(jobs[i].dependencies.iter())
        {
            if let Some(t) = jobs.iter().position(|j| j.name == *target) {
                visit(t, jobs, seen, out);
            }
        }
        out.push(&jobs[i]);
    }
    let mut seen = vec![false; jobs.len()];
    let mut out = Vec::with_capacity(jobs.len());
    for i in 0..jobs.len() {
        visit(i, jobs, &mut seen, &mut out);
    }
    out
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
    for job in reference_order(&config.jobs) {
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
            outln!(
                "warning: job {}: handler \"{}\" does not resolve ({e}); its runs will be \
                 recorded as failed until a plugin provides it",
                job.name,
                job.handler_type
            )?;
        }
    }
    for old in &stored {
        if old.application.as_deref() == Some(CONFIG_APPLICATION)
            && old.enabled
            && !config.jobs.iter().any(|j| j.name == old.name)
            && let Some(id) = old.id
        {
            handle.set_enabled(id, false).await?;
            outln!(
                "job {} is no longer in {}: disabled (its history is kept)",
                old.name,
                config.file.display()
            )?;
            disabled += 1;
        }
    }
    outln!(
        "jobs from {}: {added} added, {updated} updated, {unchanged} unchanged, {disabled} disabled",
        config.file.display()
    )?;
    // After the jobs: a group is known by its members.
    for (name, max) in &config.groups {
        store.group_set(name, *max).await.map_err(|e| {
            anyhow::anyhow!(
                "{}: [groups.{name}]: {e}; give a job group = \"{name}\" or remove the section",
                config.file.display()
            )
        })?;
    }
    Ok(())
}

struct Printer {
    store: AnyStore,
    /// The last log sequence number printed per run.
    log_seen: HashMap<RunId, u64>,
    /// Attempts ended, by recorded state.
    counts: BTreeMap<String, usize>,
    started: usize,
    /// Since when the database is unavailable, and its first error.
    outage: Option<(Timestamp, String)>,
    /// `--json`: events as JSON lines on stdout instead of the table.
    json: bool,
}

impl Printer {
    /// The one-line summary systemd shows (`STATUS=`): `running` runs, the attempts since
    /// the start and how they ended, a database outage.
    fn status(&self, running: usize) -> String {
        let mut s = format!(
            "scheduling: {running} running; {} attempts since start",
            self.started
        );
        if !self.counts.is_empty() {
            let ended: Vec<String> = self
                .counts
                .iter()
                .map(|(state, n)| format!("{n} {state}"))
                .collect();
            s.push_str(&format!(" ({})", ended.join(", ")));
        }
        if let Some((since, error)) = &self.outage {
            s.push_str(&format!(
                "; database unavailable since {} UTC: {error}",
                short_time(*since)
            ));
        }
        s
    }

    /// Prints one event's line (and, for an end, the run's error and new log lines). Never
    /// fails in practice: `takt run` writes stdout in [`out::Mode::KeepRunning`].
    async fn print(
        &mut self,
        ev: &SchedulerEvent,
        names: &mut HashMap<JobId, String>,
    ) -> Result<()> {
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
                self.outage = Some((Timestamp::now(), error.clone()));
                if self.json {
                    return super::out::json_line(&serde_json::json!({
                        "event": "store_unavailable",
                        "at": Timestamp::now().to_string(),
                        "error": error,
                    }));
                }
                outln!(
                    "{}  database unavailable: {error}; runs that end meanwhile are kept and \
                     recorded when it is back; retrying",
                    short_time(Timestamp::now())
                )?;
                return Ok(());
            }
            SchedulerEvent::StoreRecovered { down_for } => {
                self.outage = None;
                if self.json {
                    return super::out::json_line(&serde_json::json!({
                        "event": "store_recovered",
                        "at": Timestamp::now().to_string(),
                        "down_for_ms": u64::try_from(down_for.as_millis()).unwrap_or(u64::MAX),
                    }));
                }
                outln!(
                    "{}  database back after {:.1}s; fires that fell due meanwhile follow \
                     their misfire policy",
                    short_time(Timestamp::now()),
                    down_for.as_secs_f64()
                )?;
                return Ok(());
            }
            SchedulerEvent::TakenOver { message } => {
                if self.json {
                    return super::out::json_line(&serde_json::json!({
                        "event": "taken_over",
                        "at": Timestamp::now().to_string(),
                        "message": message,
                    }));
                }
                outln!("{}  {message}", short_time(Timestamp::now()))?;
                return Ok(());
            }
            other if self.json => return super::plugin::event_json(other),
            other => return super::plugin::print_event(other, &short_time(Timestamp::now())),
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
        if self.json {
            return self
                .print_json(run, &name, fire, attempt, state, stored.as_ref())
                .await;
        }
        outln!(
            "{:<8}  {:<24}  {:<8}  {:>7}  {:<9}  {:>8}",
            short_time(Timestamp::now()),
            name,
            short_time(fire),
            attempt,
            shown_state,
            elapsed
        )?;
        if state.is_none() {
            return Ok(());
        }
        *self.counts.entry(shown_state).or_default() += 1;
        if let Some(error) = stored.as_ref().and_then(|r| r.error.as_deref()) {
            outln!("          error: {error}")?;
        }
        let after = self.log_seen.get(&run).copied();
        if let Ok(lines) = self.store.log_list(run, after, 1000).await {
            for (seq, line) in lines {
                outln!("          {:<5} {}", line.level.name(), line.message)?;
                self.log_seen.insert(run, seq);
            }
        }
        Ok(())
    }

    /// [`Printer::print`] of a run's start or end as one JSON line: `run_started`, or
    /// `run_finished` with the recorded state (`retrying` when a retry is pending), error and
    /// the log lines new since the last one printed.
    async fn print_json(
        &mut self,
        run: RunId,
        name: &str,
        fire: Timestamp,
        attempt: u32,
        state: Option<RunState>,
        stored: Option<&takt_core::run::Run>,
    ) -> Result<()> {
        let at = Timestamp::now().to_string();
        let Some(state) = state else {
            return super::out::json_line(&serde_json::json!({
                "event": "run_started", "at": at, "run": run.0, "job": name,
                "fire_time": fire.to_string(), "attempt": attempt,
            }));
        };
        let shown = match state {
            RunState::Pending => "retrying",
            s => s.name(),
        };
        *self.counts.entry(shown.to_string()).or_default() += 1;
        let after = self.log_seen.get(&run).copied();
        let mut logs = Vec::new();
        if let Ok(lines) = self.store.log_list(run, after, 1000).await {
            for (seq, line) in lines {
                logs.push(serde_json::json!({
                    "seq": seq, "at": line.at.to_string(), "level": line.level.name(),
                    "message": line.message,
                }));
                self.log_seen.insert(run, seq);
            }
        }
        super::out::json_line(&serde_json::json!({
            "event": "run_finished", "at": at, "run": run.0, "job": name,
            "fire_time": fire.to_string(), "attempt": attempt, "state": shown,
            "elapsed_ms": stored.and_then(|r| r.elapsed)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            "error": stored.and_then(|r| r.error.as_deref()),
            "logs": logs,
        }))
    }
}

/// `HH:MM:SS` in UTC.
fn short_time(t: Timestamp) -> String {
    t.strftime("%H:%M:%S").to_string()
}
