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
use crate::plugins::{LoadOptions, PluginSet, Refusal};
use crate::scheduler::{
    Clock, Scheduler, SchedulerConfig, SchedulerError, SchedulerHandle, SystemClock,
};

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
}

impl<S: Store + Clone + 'static> HostBuilder<S> {
    /// A host on `store` with the defaults: no plugin directory, node id = this machine's host
    /// name, [`SchedulerConfig::new`] and [`ExecutorConfig::default`] (capacity 8, 5 s grace),
    /// the system clock, shadow copies under the temp directory.
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

    /// The most runs at once on this node (the loop's claims and the executor's slots).
    pub fn capacity(mut self, n: usize) -> Self {
        self.scheduler.capacity = n;
        self.executor.capacity = n;
        self
    }

    /// How long a run that was asked to stop (timeout, cancel) is waited for.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.executor.grace = grace;
        self
    }

    /// The scheduler's timings and batch sizes wholesale (its node and capacity included).
    pub fn scheduler_config(mut self, config: SchedulerConfig) -> Self {
        self.executor.capacity = config.capacity;
        self.scheduler = config;
        self
    }

    /// The clock that decides due times ([`crate::scheduler::TestClock`] in tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Loads the plugins, recovers this node's leftover runs and starts the loop on the
    /// current tokio runtime.
    pub async fn start(self) -> Result<Host<S>, HostError> {
        let mut plugins = match &self.plugin_dir {
            Some(dir) => PluginSet::load_dir(dir, &self.load_options),
            None => PluginSet::with_aliases(self.load_options.aliases.clone()),
        };
        for refusal in plugins.refusals() {
            if self.require_all {
                return Err(refusal.clone().into());
            }
            tracing::warn!("{refusal}");
        }
        for module in self.statics {
            plugins.add_static(module)?;
        }
        let plugins = Arc::new(plugins);
        let handle = Scheduler::new(
            self.scheduler,
            self.store,
            plugins.clone(),
            Executor::new(self.executor),
            self.clock,
        )
        .start()
        .await?;
        Ok(Host { handle, plugins })
    }
}

/// A started embedded host: its [`SchedulerHandle`] (which it derefs to) and its plugins.
pub struct Host<S> {
    handle: SchedulerHandle<S>,
    plugins: Arc<PluginSet>,
}

impl<S> Host<S> {
    /// The handle: jobs, runs, pause, events, shutdown. Clone it to share.
    pub fn handle(&self) -> &SchedulerHandle<S> {
        &self.handle
    }

    /// The loaded plugins and the refused files.
    pub fn plugins(&self) -> &Arc<PluginSet> {
        &self.plugins
    }
}

impl<S> std::ops::Deref for Host<S> {
    type Target = SchedulerHandle<S>;

    fn deref(&self) -> &SchedulerHandle<S> {
        &self.handle
    }
}
