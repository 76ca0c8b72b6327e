//! The host's plugins over time: the set serving now, hot swaps, draining versions, and where
//! each call runs (in process or in a worker).
//!
//! # Hot swap
//!
//! [`Plugins::reload`] rescans the plugin directory and checks every changed file like at
//! start (permissions, pin, image, ABI, api version, names). A file whose bytes did not
//! change keeps its loaded version; a good new file is loaded *beside* the old version and
//! the new [`PluginSet`] replaces the current one in one step, so new runs resolve to the new
//! version; a refused file leaves the old version serving, with the refusal reported. A
//! version no longer in the set is *retired*: it is `draining` while runs that resolved it
//! before the swap still run, then `drained` — and a version served by workers then ends
//! them, so its library leaves memory with them.
//!
//! A run resolves its handler and takes a [`RunLease`] on the version under the same read
//! lock the swap takes for writing: no run can slip onto a version after it was retired, and
//! a version is drained exactly when its last lease ends.
//!
//! In-process versions stay mapped after they drain: abi_stable never unloads a library, and
//! unloading a Rust cdylib is not sound in general. Each reload that maps a new in-process
//! version adds to the process; after [`MAPPED_WARNING`] versions of one plugin the report
//! warns. Isolate a plugin that is swapped often (`[plugins] isolate`): its old versions
//! leave with their workers.
//!
//! # Isolation
//!
//! [`Plugins::target`] decides where a call runs: in a worker when the job asks for it
//! (`isolation = "process"`), or the host isolates the plugin (`isolate`), in process
//! otherwise. Plugins the host isolates are never mapped into the host at all: when the
//! isolate list is not empty, every new file is first opened in a worker (a *probe*, which
//! stays as the version's first idle worker), and only files whose plugin is not listed are
//! then mapped into the host — so a listed plugin whose initialisation crashes cannot take
//! the host down even while loading.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::SystemTime;

use takt_core::job::Isolation;
use takt_core::run::PluginBuild;
use takt_plugin_api::abi::PluginRef;

use super::loader::{
    LoadOptions, LoadedPlugin, PluginSet, Refusal, ResolveError, ResolvedHandler, STATIC_ORIGIN,
    is_library, prepare, refuse,
};
use crate::executor::Target;
use crate::worker::{PoolKey, WorkerStats, Workers};

/// After this many in-process versions of one plugin, a reload warns (see the module docs).
pub const MAPPED_WARNING: usize = 8;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A version's runs and its place in a hot swap.
#[derive(Debug, Default)]
pub(crate) struct Life {
    runs: AtomicUsize,
    retired: AtomicBool,
    drained: AtomicBool,
}

impl Life {
    fn begin(&self) {
        self.runs.fetch_add(1, Ordering::SeqCst);
    }

    /// A run ended; `true` when that drained a retired version.
    fn end(&self) -> bool {
        let left = self.runs.fetch_sub(1, Ordering::SeqCst) - 1;
        left == 0
            && self.retired.load(Ordering::SeqCst)
            && !self.drained.swap(true, Ordering::SeqCst)
    }

    /// The version left the set; `true` when it has no run (drained at once).
    fn retire(&self) -> bool {
        self.retired.store(true, Ordering::SeqCst);
        self.runs.load(Ordering::SeqCst) == 0 && !self.drained.swap(true, Ordering::SeqCst)
    }

    fn state(&self) -> VersionState {
        if self.drained.load(Ordering::SeqCst) {
            VersionState::Drained
        } else if self.retired.load(Ordering::SeqCst) {
            VersionState::Draining
        } else {
            VersionState::Serving
        }
    }
}

/// Where a plugin version is in a hot swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VersionState {
    /// In the current set: new runs resolve to it.
    Serving,
    /// Replaced or removed; runs that started on it are still running.
    Draining,
    /// Replaced or removed, and its last run ended (its workers, if any, exit).
    Drained,
}

impl VersionState {
    /// `serving`, `draining` or `drained`.
    pub fn name(self) -> &'static str {
        match self {
            VersionState::Serving => "serving",
            VersionState::Draining => "draining",
            VersionState::Drained => "drained",
        }
    }
}

impl std::fmt::Display for VersionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One version of one plugin, as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginVersion {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// SHA-256 of its file; `None` for a plugin compiled into the host.
    pub sha256: Option<String>,
    /// The file it was loaded from (`<static>` for a compiled-in plugin).
    pub file: PathBuf,
    /// Whether every call of it runs in a worker process (the host isolates it).
    pub isolated: bool,
    /// Serving, draining or drained.
    pub state: VersionState,
    /// Its runs in flight.
    pub runs: usize,
    /// Its worker processes alive.
    pub workers: usize,
}

impl PluginVersion {
    fn of(p: &LoadedPlugin) -> PluginVersion {
        PluginVersion {
            name: p.name.clone(),
            version: p.version.clone(),
            sha256: (!p.sha256.is_empty()).then(|| p.sha256.clone()),
            file: p.file.clone(),
            isolated: p.is_isolated(),
            state: p.life.state(),
            runs: p.life.runs.load(Ordering::SeqCst),
            workers: p.worker_pool().map_or(0, |w| w.live()),
        }
    }

    /// `acme 1.2.0 (sha256 3f2a…)`, for messages.
    pub fn label(&self) -> String {
        match &self.sha256 {
            Some(sha) => format!(
                "{} {} (sha256 {}…)",
                self.name,
                self.version,
                &sha[..12.min(sha.len())]
            ),
            None => format!("{} {} (compiled in)", self.name, self.version),
        }
    }
}

/// A file a reload refused, and the version that keeps serving in its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadRefusal {
    /// Which file, why, and what to do.
    pub refusal: Refusal,
    /// The version loaded from this file before, still serving; `None` when the file was new.
    pub kept: Option<PluginVersion>,
}

/// What a [`Plugins::reload`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// New versions, serving from now on.
    pub loaded: Vec<PluginVersion>,
    /// Versions whose files did not change.
    pub unchanged: Vec<PluginVersion>,
    /// Versions replaced or removed: draining while their runs last, or drained.
    pub retired: Vec<PluginVersion>,
    /// Files refused by this reload.
    pub refused: Vec<ReloadRefusal>,
    /// Anything else the operator should know (versions piling up in memory).
    pub warnings: Vec<String>,
}

impl ReloadReport {
    /// Whether the reload changed what serves.
    pub fn changed(&self) -> bool {
        !self.loaded.is_empty() || !self.retired.is_empty()
    }
}

/// Why a reload could not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The host was built without a plugin directory.
    #[error(
        "this host loads no plugin directory, so there is nothing to reload; give it one \
         (plugin_dir in takt.toml, HostBuilder::plugin_dir)"
    )]
    NoPluginDirectory,
}

/// A run's hold on the plugin version it resolved; ending it may drain a retired version.
#[must_use = "end the lease when the run's plugin call is over"]
pub struct RunLease {
    plugin: Option<Arc<LoadedPlugin>>,
}

impl RunLease {
    fn new(plugin: Arc<LoadedPlugin>) -> RunLease {
        plugin.life.begin();
        RunLease {
            plugin: Some(plugin),
        }
    }

    /// Ends the hold. When it was the last run of a retired version, the version is drained:
    /// its workers are ended, and it is returned (for an event).
    pub fn end(mut self) -> Option<PluginVersion> {
        let plugin = self.plugin.take()?;
        if plugin.life.end() {
            return Some(drained(&plugin));
        }
        None
    }
}

impl Drop for RunLease {
    fn drop(&mut self) {
        if let Some(p) = self.plugin.take()
            && p.life.end()
        {
            let v = drained(&p);
            tracing::info!("plugin {} drained", v.label());
        }
    }
}

/// A version just drained: its workers go.
fn drained(plugin: &LoadedPlugin) -> PluginVersion {
    if let Some(pool) = plugin.worker_pool() {
        pool.retire();
    }
    PluginVersion::of(plugin)
}

/// The size and modification time of every plugin file of a directory: what the watch
/// compares between polls.
pub type DirStamp = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

/// How the host's plugins are set up; see [`Plugins::builder`].
pub struct PluginsBuilder {
    dir: Option<PathBuf>,
    options: LoadOptions,
    statics: Vec<(PluginRef, Option<String>)>,
    isolate: BTreeSet<String>,
    workers: Option<Arc<Workers>>,
    require_all: bool,
}

impl PluginsBuilder {
    /// The directory whose plugin files are loaded (and reloaded).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Pins, aliases, the shadow directory and the permission check.
    pub fn options(mut self, options: LoadOptions) -> Self {
        self.options = options;
        self
    }

    /// A plugin compiled into the program; a file of the same name at start refuses the
    /// start (as [`PluginSet::add_static`]), one that appears later is refused itself.
    pub fn static_plugin(mut self, module: PluginRef) -> Self {
        self.statics.push((module, None));
        self
    }

    /// A plugin that is part of the host program (`takt run`'s `exe`, `sql`): a file of the
    /// same name is refused with `fix` (as [`PluginSet::add_builtin`]).
    pub fn builtin(mut self, module: PluginRef, fix: impl Into<String>) -> Self {
        self.statics.push((module, Some(fix.into())));
        self
    }

    /// Plugins (by name) whose every call runs in a worker process; they are never mapped
    /// into the host. Needs [`workers`](Self::workers).
    pub fn isolate(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.isolate = names.into_iter().map(Into::into).collect();
        self
    }

    /// The worker processes that serve isolated calls. Without them, a job that asks for
    /// process isolation fails with the reason.
    pub fn workers(mut self, workers: Arc<Workers>) -> Self {
        self.workers = Some(workers);
        self
    }

    /// Refuse to build when any plugin file is refused at start.
    pub fn require_all(mut self, yes: bool) -> Self {
        self.require_all = yes;
        self
    }

    /// Loads the directory and registers the compiled-in plugins. A refused compiled-in
    /// plugin is an error (it is part of the program); refused files are only listed —
    /// unless [`require_all`](Self::require_all).
    pub fn build(self) -> Result<Plugins, Refusal> {
        let origin = Path::new(STATIC_ORIGIN);
        if !self.isolate.is_empty() && self.workers.is_none() {
            return Err(refuse(
                origin,
                format!(
                    "[plugins] isolate names {} but this host has no worker program to run them in",
                    self.isolate.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
                "give the host a worker program (HostBuilder::worker_program; takt run uses \
                 itself), or empty the isolate list",
            ));
        }
        let plugins = Plugins {
            dir: self.dir,
            options: self.options,
            isolate: self.isolate,
            workers: self.workers,
            statics: Vec::new(),
            current: RwLock::new(Arc::new(PluginSet::with_aliases(BTreeMap::new()))),
            reload: Mutex::new(Reloading::default()),
        };
        let mut set = match &plugins.dir {
            Some(dir) => plugins.scan(dir, None).0,
            None => PluginSet::with_aliases(plugins.options.aliases.clone()),
        };
        if self.require_all
            && let Some(r) = set.refusals().first()
        {
            return Err(r.clone());
        }
        for (module, fix) in &self.statics {
            match fix {
                None => set.add_static(*module)?,
                Some(fix) => {
                    set.add_builtin(*module, fix)?;
                }
            }
        }
        let statics: Vec<(Arc<LoadedPlugin>, Option<String>)> = set
            .plugins()
            .iter()
            .filter(|p| p.is_static())
            .map(|p| {
                let fix = self
                    .statics
                    .iter()
                    .find(|(m, _)| m.name().as_str() == p.name)
                    .and_then(|(_, f)| f.clone());
                (p.clone(), fix)
            })
            .collect();
        for name in &plugins.isolate {
            if statics.iter().any(|(p, _)| &p.name == name) {
                return Err(refuse(
                    origin,
                    format!(
                        "[plugins] isolate names plugin \"{name}\", which is compiled into this \
                         host and cannot run in a worker process"
                    ),
                    format!("remove \"{name}\" from the isolate list"),
                ));
            }
        }
        {
            let mut reload = lock(&plugins.reload);
            for p in set.plugins().iter().filter(|p| p.module().is_some()) {
                *reload.mapped.entry(p.name.clone()).or_default() += 1;
            }
            reload.stamp = plugins.dir.as_deref().map(stamp);
        }
        Ok(Plugins {
            statics,
            current: RwLock::new(Arc::new(set)),
            ..plugins
        })
    }
}

#[derive(Default)]
struct Reloading {
    /// Retired versions not drained yet.
    draining: Vec<Arc<LoadedPlugin>>,
    /// In-process versions mapped per plugin name (never unmapped).
    mapped: BTreeMap<String, usize>,
    /// The directory as the last reload (or the start) saw it.
    stamp: Option<DirStamp>,
}

/// The host's plugins; see the module docs.
pub struct Plugins {
    dir: Option<PathBuf>,
    options: LoadOptions,
    isolate: BTreeSet<String>,
    workers: Option<Arc<Workers>>,
    /// Compiled-in plugins, kept across reloads (with the fix for a file that takes the name
    /// of a built-in one).
    statics: Vec<(Arc<LoadedPlugin>, Option<String>)>,
    current: RwLock<Arc<PluginSet>>,
    /// Serialises reloads; what they remember.
    reload: Mutex<Reloading>,
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugins")
            .field("dir", &self.dir)
            .field("isolate", &self.isolate)
            .field("current", &self.current())
            .finish_non_exhaustive()
    }
}

impl Plugins {
    /// A builder: no directory, default options, nothing compiled in, no workers.
    pub fn builder() -> PluginsBuilder {
        PluginsBuilder {
            dir: None,
            options: LoadOptions::default(),
            statics: Vec::new(),
            isolate: BTreeSet::new(),
            workers: None,
            require_all: false,
        }
    }

    /// A fixed set (no directory to reload, no workers): what [`crate::scheduler::Scheduler::new`]
    /// makes of a [`PluginSet`] it is given.
    pub fn fixed(set: Arc<PluginSet>) -> Plugins {
        Plugins {
            dir: None,
            options: LoadOptions::default(),
            isolate: BTreeSet::new(),
            workers: None,
            statics: Vec::new(),
            current: RwLock::new(set),
            reload: Mutex::new(Reloading::default()),
        }
    }

    /// The set serving now.
    pub fn current(&self) -> Arc<PluginSet> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The worker processes, if the host has any.
    pub fn workers(&self) -> Option<&Arc<Workers>> {
        self.workers.as_ref()
    }

    /// The worker counters, if the host has workers.
    pub fn worker_stats(&self) -> Option<WorkerStats> {
        self.workers.as_ref().map(|w| w.stats())
    }

    /// The plugin directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Resolves a HandlerType in the current set and takes a lease on the version for the
    /// run (see the module docs).
    pub fn resolve(&self, handler_type: &str) -> Result<(ResolvedHandler, RunLease), ResolveError> {
        let set = self.current.read().unwrap_or_else(PoisonError::into_inner);
        let resolved = set.resolve(handler_type)?;
        let lease = RunLease::new(resolved.plugin.clone());
        Ok((resolved, lease))
    }

    /// Every version serving or draining, serving first.
    pub fn versions(&self) -> Vec<PluginVersion> {
        let mut out: Vec<PluginVersion> = self
            .current()
            .plugins()
            .iter()
            .map(|p| PluginVersion::of(p))
            .collect();
        let mut reload = lock(&self.reload);
        reload
            .draining
            .retain(|p| p.life.state() == VersionState::Draining);
        out.extend(reload.draining.iter().map(|p| PluginVersion::of(p)));
        out
    }

    /// Where a call of `plugin` for a job with `isolation` runs: in a worker when the job
    /// asks for it or the host isolates the plugin, else in process. An error says why the
    /// call cannot run as asked (the run fails with it).
    pub fn target(&self, plugin: &LoadedPlugin, isolation: Isolation) -> Result<Target, String> {
        if isolation == Isolation::InProcess
            && let Some(module) = plugin.module()
        {
            return Ok(Target::InProcess(module));
        }
        if plugin.is_static() {
            return Err(format!(
                "the job asks for process isolation, but plugin \"{}\" is compiled into this host \
                 (not a file), so it cannot run in a worker process; set the job's isolation to \
                 in-process",
                plugin.name
            ));
        }
        let Some(workers) = &self.workers else {
            return Err(format!(
                "the job asks for process isolation of plugin \"{}\", but this host has no worker \
                 program (an embedding program sets one with HostBuilder::worker_program); set \
                 the job's isolation to in-process, or give the host a worker program",
                plugin.name
            ));
        };
        let pool = plugin.worker_pool_or(|| {
            workers.pool(
                PoolKey {
                    sha256: plugin.sha256.clone(),
                    shadow: plugin.shadow.clone(),
                },
                Some(plugin.meta()),
            )
        });
        Ok(Target::Worker(pool.clone()))
    }

    /// The size and modification time of every plugin file now (for the watch).
    pub fn stamp(&self) -> Option<DirStamp> {
        self.dir.as_deref().map(stamp)
    }

    /// Whether the directory looks different from what the last reload (or the start) saw.
    pub fn looks_changed(&self, now: &DirStamp) -> bool {
        lock(&self.reload).stamp.as_ref() != Some(now)
    }

    /// Rescans the plugin directory and swaps in what changed (see the module docs).
    /// Blocking: hashing, copying and loading files, and starting worker probes.
    pub fn reload(&self) -> Result<ReloadReport, ReloadError> {
        let Some(dir) = self.dir.as_deref() else {
            return Err(ReloadError::NoPluginDirectory);
        };
        let mut reloading = lock(&self.reload);
        let before = self.current();
        let seen = stamp(dir);
        let (mut set, refused) = self.scan(dir, Some(&before));
        // A directory that cannot be read (an unmounted share) changes nothing; it is
        // reported once, not at every poll of the watch.
        if set.plugins().is_empty() && set.refusals().first().is_some_and(|r| r.file == dir) {
            reloading.stamp = Some(seen);
            return Ok(ReloadReport {
                refused: set
                    .refusals()
                    .iter()
                    .map(|r| ReloadRefusal {
                        refusal: r.clone(),
                        kept: None,
                    })
                    .collect(),
                ..ReloadReport::default()
            });
        }
        for (p, fix) in &self.statics {
            if let Some(i) = set
                .plugins
                .iter()
                .position(|f| f.name == p.name && !f.is_static())
            {
                let file = set.plugins.remove(i);
                set.refusals.push(refuse(
                    &file.file,
                    format!(
                        "plugin \"{}\" is built into this host, which uses its own copy",
                        p.name
                    ),
                    fix.clone()
                        .unwrap_or_else(|| "rename one of the two plugins".to_string()),
                ));
            }
            set.plugins.push(p.clone());
        }
        set.aliases.clone_from(&before.aliases);
        let set = Arc::new(set);
        let old_ids: Vec<*const LoadedPlugin> = before.plugins().iter().map(Arc::as_ptr).collect();
        let new_ids: Vec<*const LoadedPlugin> = set.plugins().iter().map(Arc::as_ptr).collect();
        let mut report = ReloadReport::default();
        for p in set.plugins() {
            if old_ids.contains(&Arc::as_ptr(p)) {
                if !p.is_static() {
                    report.unchanged.push(PluginVersion::of(p));
                }
            } else {
                report.loaded.push(PluginVersion::of(p));
                if p.module().is_some() {
                    let n = reloading.mapped.entry(p.name.clone()).or_default();
                    *n += 1;
                    if *n > MAPPED_WARNING {
                        report.warnings.push(format!(
                            "plugin {} has {n} versions mapped into this host (libraries are \
                             never unloaded); restart the host in a service window to free \
                             them, or isolate the plugin ([plugins] isolate) so that old \
                             versions leave with their workers",
                            p.name
                        ));
                    }
                }
            }
        }
        let refused_files: BTreeSet<PathBuf> =
            refused.iter().map(|r| r.refusal.file.clone()).collect();
        report.refused = refused;
        for r in set.refusals() {
            if !refused_files.contains(&r.file) && !before.refusals().contains(r) {
                report.refused.push(ReloadRefusal {
                    refusal: r.clone(),
                    kept: None,
                });
            }
        }
        // The swap: from here on new runs resolve in the new set.
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = set;
        for p in before.plugins() {
            if new_ids.contains(&Arc::as_ptr(p)) {
                continue;
            }
            if p.life.retire() {
                report.retired.push(drained(p));
            } else {
                report.retired.push(PluginVersion::of(p));
                reloading.draining.push(p.clone());
            }
        }
        reloading
            .draining
            .retain(|p| p.life.state() == VersionState::Draining);
        reloading.stamp = Some(seen);
        Ok(report)
    }

    /// Ends every worker process (at shutdown, after the executor stopped its calls).
    pub fn shutdown_workers(&self, wait: std::time::Duration) {
        if let Some(w) = &self.workers {
            w.shutdown(wait);
        }
    }

    /// Loads every plugin file of `dir` in name order into a new set, reusing the versions of
    /// `previous` whose files did not change and keeping them for files now refused. Returns
    /// the set and the refusals of files whose old version was kept.
    fn scan(&self, dir: &Path, previous: Option<&PluginSet>) -> (PluginSet, Vec<ReloadRefusal>) {
        let mut set = PluginSet::with_aliases(self.options.aliases.clone());
        let mut kept = Vec::new();
        if self.options.check_permissions
            && let Err(r) = super::perms::check_dir(dir, "the plugin directory")
        {
            set.refusals.push(r);
            return (set, kept);
        }
        let files = match library_files(dir) {
            Ok(files) => files,
            Err(e) => {
                set.refusals.push(refuse(
                    dir,
                    format!("cannot read the plugin directory: {e}"),
                    "create it or point the plugin directory setting at the folder that holds \
                     the plugin files",
                ));
                return (set, kept);
            }
        };
        let old_of = |file: &Path| {
            previous.and_then(|s| {
                s.plugins()
                    .iter()
                    .find(|p| p.file == file && !p.is_static())
                    .cloned()
            })
        };
        for file in files {
            let loaded = match prepare(&file, &self.options) {
                Err(r) => Err(r),
                Ok(prepared) => match old_of(&file) {
                    Some(old) if old.sha256 == prepared.sha256 => Ok(old),
                    _ => self.open(&file, prepared).map(Arc::new),
                },
            };
            match loaded {
                Ok(plugin) => set.push_file(plugin),
                Err(r) => match old_of(&file) {
                    Some(old) => {
                        kept.push(ReloadRefusal {
                            refusal: r.clone(),
                            kept: Some(PluginVersion::of(&old)),
                        });
                        set.refusals.push(r);
                        set.push_file(old);
                    }
                    None => set.refusals.push(r),
                },
            }
        }
        (set, kept)
    }

    /// Maps a prepared file in process, or — when the host isolates plugins — opens it in a
    /// worker first and maps it only when its plugin is not isolated.
    fn open(
        &self,
        file: &Path,
        prepared: super::loader::Prepared,
    ) -> Result<LoadedPlugin, Refusal> {
        if let (false, Some(workers)) = (self.isolate.is_empty(), &self.workers) {
            let key = PoolKey {
                sha256: prepared.sha256.clone(),
                shadow: prepared.shadow.clone(),
            };
            let (pool, meta) = workers
                .probe(key)
                .map_err(|r| refuse(file, r.reason, r.fix))?;
            if self.isolate.contains(&meta.name) {
                return Ok(LoadedPlugin::isolated(
                    meta,
                    file,
                    prepared.shadow,
                    prepared.sha256,
                    pool,
                ));
            }
            pool.retire();
        }
        super::loader::map_prepared(file, prepared)
    }
}

/// The plugin files of `dir`, in name order.
fn library_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && is_library(p))
        .collect();
    files.sort();
    Ok(files)
}

fn stamp(dir: &Path) -> DirStamp {
    library_files(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|f| {
            let m = std::fs::metadata(&f).ok();
            let len = m.as_ref().map_or(0, std::fs::Metadata::len);
            let modified = m.and_then(|m| m.modified().ok());
            (f, (len, modified))
        })
        .collect()
}

/// What a run records about the plugin build that served it.
pub fn build_of(plugin: &LoadedPlugin) -> PluginBuild {
    PluginBuild {
        name: plugin.name.clone(),
        version: plugin.version.clone(),
        sha256: (!plugin.sha256.is_empty()).then(|| plugin.sha256.clone()),
    }
}
