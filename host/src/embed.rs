//! One builder for embedding the host in a program of one's own (MES middleware, a Windows
//! service): store, plugins (a directory of files and plugins compiled in), node, capacity,
//! clock and timings in; a started [`Host`] out.
//!
//! ```ignore
//! let mes = takt_plugin_api::static_plugin!(|| Plugin::new("mes").handler("post", "…", post))?;
//! let host = HostBuilder::new(SqliteStore::open(&db, &SqliteOptions::default())?)
//!     .plugin_dir("plugins")
//!     .static_plugin(mes)
//!     .node("line-3")
//!     .capacity(4)
//!     .start()
//!     .await?;
//! host.add_job(job).await?;          // a Host derefs to its SchedulerHandle
//! let mut events = host.subscribe();
//! host.shutdown(Duration::from_secs(10)).await;
//! ```
//!
//! The external-program executor (`exe::run`) that `takt run` compiles in is not added
//! automatically: a program that wants it registers it like any static plugin, with its own
//! allowlist (see `takt_plugin_exe`):
//!
//! ```ignore
//! use takt_plugin_exe::{Allowlist, ExeOptions};
//! let options = ExeOptions {
//!     allowlist: Allowlist::only(vec!["/opt/mes/tools".into()], "the MES service config"),
//!     ..ExeOptions::default()
//! };
//! let exe = takt_plugin_api::static_plugin!(move || takt_plugin_exe::plugin(options))?;
//! let host = HostBuilder::new(store).static_plugin(exe).start().await?;
//! ```
//!
//! It only assembles what [`Scheduler::new`] takes (which stays public for anything the
//! builder does not cover). Refused plugin *files* do not stop the start — each is logged
//! and listed in [`Host::plugins`], as with `takt run` — unless
//! [`HostBuilder::require_all_plugins`] is set; a refused *static* plugin always does, since
//! it is part of the program being started.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use takt_core::run::NodeId;
use takt_core::store::Store;
use takt_plugin_api::abi::PluginRef;

use crate::executor::{Executor, ExecutorConfig};
use crate::http::{HttpConfig, HttpError, HttpServer};
use crate::metrics::Metrics;
use crate::plugins::{LoadOptions, PluginSet, Plugins, Refusal};
use crate::scheduler::{
    Clock, Scheduler, SchedulerConfig, SchedulerError, SchedulerHandle, SystemClock,
};
use crate::worker::{WorkerProgram, WorkerSettings, Workers};

/// Why a [`HostBuilder`] could not start a host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A static plugin, or (with [`HostBuilder::require_all_plugins`]) a plugin file, was
    /// refused.
    #[error(transparent)]
    Plugin(#[from] Refusal),
    /// The scheduler could not start (the store failed during recovery).
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    /// The HTTP API could not start (the scheduler was stopped again).
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The worker program could not be found.
    #[error("cannot find the worker program: {0}; name it with HostBuilder::worker_program")]
    WorkerProgram(std::io::Error),
}

/// Builds and starts an embedded host; see the module docs.
pub struct HostBuilder<S> {
    store: S,
    plugin_dir: Option<PathBuf>,
    load_options: LoadOptions,
    statics: Vec<PluginRef>,
    require_all: bool,
    scheduler: SchedulerConfig,
    executor: ExecutorConfig,
    clock: Arc<dyn Clock>,
    worker_program: Option<WorkerProgram>,
    isolate: Vec<String>,
    max_workers: Option<usize>,
    worker_memory: Option<u64>,
    http: Option<HttpConfig>,
}

impl<S: Store + Clone + 'static> HostBuilder<S> {
    /// A host on `store` with the defaults: no plugin directory, node id = this machine's host
    /// name, [`SchedulerConfig::new`] and [`ExecutorConfig::default`] (5 s grace; its slots
    /// are the capacity plus the recurring reserve), the system clock, shadow copies under
    /// the temp directory.
    pub fn new(store: S) -> HostBuilder<S> {
        HostBuilder {
            store,
            plugin_dir: None,
            load_options: LoadOptions::with_temp_shadow(),
            statics: Vec::new(),
            require_all: false,
            scheduler: SchedulerConfig::new(NodeId(crate::config::host_name())),
            executor: ExecutorConfig::default(),
            clock: Arc::new(SystemClock),
            worker_program: WorkerProgram::default_for_this_program(),
            isolate: Vec::new(),
            max_workers: None,
            worker_memory: None,
            http: None,
        }
    }

    /// Loads every plugin file of `dir` at start (in name order, each checked).
    pub fn plugin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.plugin_dir = Some(dir.into());
        self
    }

    /// Pins, aliases and the shadow directory for plugin files.
    pub fn load_options(mut self, options: LoadOptions) -> Self {
        self.load_options = options;
        self
    }

    /// Adds a plugin compiled into the program ([`takt_plugin_api::static_plugin!`]).
    pub fn static_plugin(mut self, module: PluginRef) -> Self {
        self.statics.push(module);
        self
    }

    /// Refuse to start when any plugin file is refused (by default the others still load and
    /// the refusals are logged).
    pub fn require_all_plugins(mut self, yes: bool) -> Self {
        self.require_all = yes;
        self
    }

    /// This node's id (recorded on its runs; its leftovers are recovered at start). Keep it
    /// stable across restarts of the same node, and unique among the processes on one
    /// database: a start is refused while another live process holds the id (on SQLite,
    /// while another host has the file open), see [`takt_core::node`].
    pub fn node(mut self, id: impl Into<String>) -> Self {
        self.scheduler.node = NodeId(id.into());
        self
    }

    /// Take the node id over from a live-looking process on another machine (one that is
    /// gone for good; `takt run --takeover`): its running runs are recovered when their leases
    /// expire. A crashed process on this machine is taken over without it.
    pub fn takeover(mut self, yes: bool) -> Self {
        self.scheduler.takeover = yes;
        self
    }

    /// The most runs at once on this node (the loop's claims and the executor's slots),
    /// besides the [`recurring_reserve`](Self::recurring_reserve).
    pub fn capacity(mut self, n: usize) -> Self {
        self.scheduler.capacity = n;
        self
    }

    /// Slots beyond the capacity that only fires of recurring schedules take (default 1; 0:
    /// the capacity limits every run): see [`SchedulerConfig::recurring_reserve`].
    pub fn recurring_reserve(mut self, n: usize) -> Self {
        self.scheduler.recurring_reserve = n;
        self
    }

    /// How long a run that was asked to stop (timeout, cancel) is waited for.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.executor.grace = grace;
        self
    }

    /// The scheduler's timings and batch sizes wholesale (its node, capacity and recurring
    /// reserve included).
    pub fn scheduler_config(mut self, config: SchedulerConfig) -> Self {
        self.scheduler = config;
        self
    }

    /// The clock that decides due times ([`crate::scheduler::TestClock`] in tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The program started as worker processes for isolated plugins
    /// ([`crate::worker`]). Default: this program when it is `takt`, else none — a job that
    /// asks for isolation then fails saying so. An embedding program either names an
    /// installed `takt` ([`WorkerProgram::Path`]), or calls
    /// [`crate::worker::serve_if_worker`] first thing in its `main` and passes
    /// [`WorkerProgram::CurrentExe`].
    pub fn worker_program(mut self, program: WorkerProgram) -> Self {
        self.worker_program = Some(program);
        self
    }

    /// Plugins (by name) whose every call runs in a worker process; they are never mapped
    /// into this program. Needs a [`worker_program`](Self::worker_program).
    pub fn isolate(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.isolate = names.into_iter().map(Into::into).collect();
        self
    }

    /// The most worker processes alive at once (default: the capacity plus the recurring
    /// reserve).
    pub fn max_workers(mut self, n: usize) -> Self {
        self.max_workers = Some(n);
        self
    }

    /// Caps each worker process's memory at `bytes` (see [`WorkerSettings::memory_limit`]).
    pub fn worker_memory_limit(mut self, bytes: u64) -> Self {
        self.worker_memory = Some(bytes);
        self
    }

    /// Polls the plugin directory every `every` and reloads changed files
    /// ([`SchedulerConfig::plugin_watch`]); without it, reload with
    /// [`SchedulerHandle::reload_plugins`].
    pub fn watch_plugins(mut self, every: Duration) -> Self {
        self.scheduler.plugin_watch = Some(every);
        self
    }

    /// Serves the HTTP API, health checks and `/metrics` ([`crate::http`]) on `config.listen`
    /// once the host started (port 0 picks a free port: [`Host::http_addr`]). A non-loopback
    /// address is refused unless the store holds API tokens.
    pub fn http(mut self, config: HttpConfig) -> Self {
        self.http = Some(config);
        self
    }

    /// Loads the plugins, recovers this node's leftover runs and starts the loop on the
    /// current tokio runtime (and the HTTP API, when asked for).
    pub async fn start(mut self) -> Result<Host<S>, HostError> {
        // The executor has a slot for every run the loop may start, the reserved ones too.
        self.executor.capacity = self.scheduler.slots();
        let mut plugins = Plugins::builder()
            .options(self.load_options)
            .isolate(self.isolate)
            .require_all(self.require_all);
        if let Some(dir) = self.plugin_dir {
            plugins = plugins.dir(dir);
        }
        if let Some(program) = &self.worker_program {
            let program = program.resolve().map_err(HostError::WorkerProgram)?;
            let mut settings = WorkerSettings::new(program);
            settings.max_workers = self.max_workers.unwrap_or(self.executor.capacity.max(1));
            settings.memory_limit = self.worker_memory;
            plugins = plugins.workers(Workers::new(settings));
        }
        for module in self.statics {
            plugins = plugins.static_plugin(module);
        }
        let plugins = Arc::new(plugins.build()?);
        for refusal in plugins.current().refusals() {
            tracing::warn!("{refusal}");
        }
        let metrics = Arc::new(Metrics::new());
        let handle = Scheduler::with_plugins(
            self.scheduler,
            self.store,
            plugins,
            Executor::new(self.executor),
            self.clock,
        )
        .observer(metrics.clone())
        .start()
        .await?;
        let http = match &self.http {
            Some(config) => {
                match HttpServer::start(Arc::new(handle.clone()), config, metrics.clone()).await {
                    Ok(server) => Some(server),
                    Err(e) => {
                        handle.shutdown(Duration::ZERO).await;
                        return Err(e.into());
                    }
                }
            }
            None => None,
        };
        Ok(Host {
            handle,
            http,
            metrics,
        })
    }
}

/// A started embedded host: its [`SchedulerHandle`] (which it derefs to: jobs, runs, pause,
/// events, plugin reloads, shutdown).
pub struct Host<S> {
    handle: SchedulerHandle<S>,
    http: Option<HttpServer>,
    metrics: Arc<Metrics>,
}

impl<S> Host<S> {
    /// The handle: jobs, runs, pause, events, shutdown. Clone it to share.
    pub fn handle(&self) -> &SchedulerHandle<S> {
        &self.handle
    }

    /// Where the HTTP API listens ([`HostBuilder::http`]), if it was asked for.
    pub fn http_addr(&self) -> Option<std::net::SocketAddr> {
        self.http.as_ref().map(HttpServer::local_addr)
    }

    /// The HTTP API server, to stop it ([`HttpServer::shutdown`]) before or after the
    /// scheduler's shutdown (it serves reads of the store either way).
    pub fn http(&self) -> Option<&HttpServer> {
        self.http.as_ref()
    }

    /// The host's metrics (what `/metrics` serves).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

impl<S: Store + Clone + 'static> Host<S> {
    /// The plugins serving now and the refused files (a reload replaces the set).
    pub fn plugins(&self) -> Arc<PluginSet> {
        self.handle.plugins()
    }
}

impl<S> std::ops::Deref for Host<S> {
    type Target = SchedulerHandle<S>;

    fn deref(&self) -> &SchedulerHandle<S> {
        &self.handle
    }
}
