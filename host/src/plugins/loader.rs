//! Loading plugin files: hash, pin, shadow-copy, check, register.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use abi_stable::StableAbi;
use abi_stable::abi_stability::abi_checking::{AbiInstabilityErrors, check_layout_compatibility};
use abi_stable::library::{LibraryError, RootModuleError, lib_header_from_path};
use sha2::{Digest, Sha256};
use takt_plugin_api::API_VERSION;
use takt_plugin_api::abi::PluginRef;
use takt_plugin_api::sdk::valid_name;

use super::handler_type::{HandlerTypeName, assembly_keys, class_keys, fold, parse_handler_type};
use crate::worker::{HandlerFrame, PluginMeta, WorkerPool};

/// Where and how plugins are loaded.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Where content-addressed copies are loaded from (created if missing). Must be on a file
    /// system that allows executable mappings (not `noexec`).
    pub shadow_dir: PathBuf,
    /// Expected SHA-256 (lowercase hex) per plugin file name; a file whose bytes differ is
    /// refused *before* it is loaded (loading runs the library's initialisers).
    pub pins: BTreeMap<String, String>,
    /// Refuse files that have no pin.
    pub require_pins: bool,
    /// Explicit HandlerType aliases (`"Ns.Class, Asm"` → `"plugin::handler"`), checked first.
    pub aliases: BTreeMap<String, String>,
    /// Refuse plugin files and directories (the plugin directory, the shadow directory and
    /// the directories above them) that users other than the host's own and root may write
    /// (Unix; see `perms`). On by default: a plugin directory others can write to is code
    /// execution for them. Off only by the operator's explicit choice.
    pub check_permissions: bool,
}

impl Default for LoadOptions {
    /// No shadow directory set, no pins, no aliases, permissions checked.
    fn default() -> LoadOptions {
        LoadOptions {
            shadow_dir: PathBuf::new(),
            pins: BTreeMap::new(),
            require_pins: false,
            aliases: BTreeMap::new(),
            check_permissions: true,
        }
    }
}

impl LoadOptions {
    /// Options with a shadow directory under the system temp dir and nothing else.
    pub fn with_temp_shadow() -> LoadOptions {
        LoadOptions {
            shadow_dir: std::env::temp_dir().join("takt-shadow"),
            ..LoadOptions::default()
        }
    }
}

/// One handler of a loaded plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerMeta {
    /// The handler's name inside its plugin.
    pub name: String,
    /// `plugin::handler`.
    pub handler_type: String,
    /// One line for operators.
    pub description: String,
    /// JSON schema of the params, if shipped.
    pub params_schema: Option<String>,
    /// The plugin's suggested timeout.
    pub default_timeout: Option<Duration>,
}

/// A plugin that passed every check and is callable.
pub struct LoadedPlugin {
    /// The plugin's name.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The takt-plugin-api version it was built against.
    pub api_version: String,
    /// The file it was loaded from, as given.
    pub file: PathBuf,
    /// The content-addressed copy actually mapped into the process.
    pub shadow: PathBuf,
    /// SHA-256 of the file's bytes, lowercase hex.
    pub sha256: String,
    /// Its handlers.
    pub handlers: Vec<HandlerMeta>,
    /// `None` when the plugin was opened only in worker processes (a plugin the host
    /// isolates is never mapped into the host itself).
    module: Option<PluginRef>,
    /// The worker pool that serves this version isolated, made when first needed.
    pool: OnceLock<Arc<WorkerPool>>,
    /// Runs of this version in flight, and its place in a hot swap (see `registry`).
    pub(super) life: super::registry::Life,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("api_version", &self.api_version)
            .field("file", &self.file)
            .field("sha256", &self.sha256)
            .field("handlers", &self.handlers)
            .finish_non_exhaustive()
    }
}

impl LoadedPlugin {
    /// The root module, for calls through `takt_plugin_api::host::call`; `None` for a plugin
    /// the host opened only in worker processes.
    pub fn module(&self) -> Option<PluginRef> {
        self.module
    }

    /// Whether the plugin is compiled into the host (no file).
    pub fn is_static(&self) -> bool {
        self.file == Path::new(STATIC_ORIGIN)
    }

    /// Whether every call of this plugin runs in a worker process (the host isolates it, so
    /// it never mapped the library itself).
    pub fn is_isolated(&self) -> bool {
        self.module.is_none()
    }

    /// The worker pool serving this version, if one was made.
    pub fn worker_pool(&self) -> Option<&Arc<WorkerPool>> {
        self.pool.get()
    }

    /// The worker pool serving this version, made by `make` on first need.
    pub(crate) fn worker_pool_or(
        &self,
        make: impl FnOnce() -> Arc<WorkerPool>,
    ) -> &Arc<WorkerPool> {
        self.pool.get_or_init(make)
    }

    /// What the worker protocol says about this plugin (a worker must load the same).
    pub(crate) fn meta(&self) -> PluginMeta {
        PluginMeta {
            name: self.name.clone(),
            version: self.version.clone(),
            api_version: self.api_version.clone(),
            handlers: self
                .handlers
                .iter()
                .map(|h| HandlerFrame {
                    name: h.name.clone(),
                    description: h.description.clone(),
                    params_schema: h.params_schema.clone(),
                    default_timeout_ms: h
                        .default_timeout
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                })
                .collect(),
        }
    }

    /// A plugin opened only in a worker, described by the worker's hello; the pool holds
    /// that worker for the first call.
    pub(crate) fn isolated(
        meta: PluginMeta,
        file: &Path,
        shadow: PathBuf,
        sha256: String,
        pool: Arc<WorkerPool>,
    ) -> LoadedPlugin {
        let handlers = meta
            .handlers
            .into_iter()
            .map(|h| HandlerMeta {
                handler_type: format!("{}::{}", meta.name, h.name),
                name: h.name,
                description: h.description,
                params_schema: h.params_schema,
                default_timeout: h.default_timeout_ms.map(Duration::from_millis),
            })
            .collect();
        LoadedPlugin {
            name: meta.name,
            version: meta.version,
            api_version: meta.api_version,
            file: file.to_path_buf(),
            shadow,
            sha256,
            handlers,
            module: None,
            pool: OnceLock::from(pool),
            life: super::registry::Life::default(),
        }
    }
}

/// Why a file was not loaded. Every refusal says which file, why, and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("refused plugin {}: {reason}; fix: {fix}", file.display())]
pub struct Refusal {
    /// The file.
    pub file: PathBuf,
    /// What is wrong.
    pub reason: String,
    /// What to do about it.
    pub fix: String,
}

pub(super) fn refuse(file: &Path, reason: impl Into<String>, fix: impl Into<String>) -> Refusal {
    Refusal {
        file: file.to_path_buf(),
        reason: reason.into(),
        fix: fix.into(),
    }
}

/// A resolved HandlerType: which plugin and handler run a job.
#[derive(Clone, Debug)]
pub struct ResolvedHandler {
    /// The plugin.
    pub plugin: Arc<LoadedPlugin>,
    /// The handler's metadata.
    pub handler: HandlerMeta,
}

/// Why a HandlerType did not resolve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// Not a HandlerType at all.
    #[error("{0}")]
    Malformed(String),
    /// No loaded plugin has that name.
    #[error(
        "no plugin named \"{plugin}\" is loaded (handler type \"{handler_type}\"); loaded plugins: {available}"
    )]
    UnknownPlugin {
        /// The HandlerType as given.
        handler_type: String,
        /// The plugin name looked for.
        plugin: String,
        /// What is loaded.
        available: String,
    },
    /// The plugin has no such handler.
    #[error(
        "plugin \"{plugin}\" has no handler \"{handler}\" (handler type \"{handler_type}\"); it has: {available}"
    )]
    UnknownHandler {
        /// The HandlerType as given.
        handler_type: String,
        /// The plugin.
        plugin: String,
        /// The handler looked for.
        handler: String,
        /// What it has.
        available: String,
    },
    /// A .NET-style name matched more than one candidate.
    #[error(
        "handler type \"{handler_type}\" is ambiguous: it matches {candidates}; add an alias in the config to pick one"
    )]
    Ambiguous {
        /// The HandlerType as given.
        handler_type: String,
        /// The matches.
        candidates: String,
    },
}

/// What [`LoadedPlugin::file`] says for a plugin compiled into the host.
pub const STATIC_ORIGIN: &str = "<static>";

/// The plugins of one directory, and the files that were refused.
#[derive(Debug, Default)]
pub struct PluginSet {
    pub(super) plugins: Vec<Arc<LoadedPlugin>>,
    pub(super) refusals: Vec<Refusal>,
    pub(super) aliases: BTreeMap<String, String>,
}

impl PluginSet {
    /// Loads every plugin file (by the platform's library extension) of `dir`, in name order.
    ///
    /// Never fails as a whole: each refused file is recorded with its reason and the others
    /// still load. A missing directory is itself one refusal.
    pub fn load_dir(dir: &Path, options: &LoadOptions) -> PluginSet {
        let mut set = PluginSet {
            aliases: options.aliases.clone(),
            ..PluginSet::default()
        };
        if options.check_permissions
            && let Err(r) = super::perms::check_dir(dir, "the plugin directory")
        {
            set.refusals.push(r);
            return set;
        }
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file() && is_library(p))
                .collect(),
            Err(e) => {
                set.refusals.push(refuse(
                    dir,
                    format!("cannot read the plugin directory: {e}"),
                    "create it or point the plugin directory setting at the folder that holds the plugin files",
                ));
                return set;
            }
        };
        files.sort();
        for file in files {
            set.add_file(&file, options);
        }
        set
    }

    /// An empty set (plugins added with [`add_file`](Self::add_file) or
    /// [`add_static`](Self::add_static)) resolving `aliases` first.
    pub fn with_aliases(aliases: BTreeMap<String, String>) -> PluginSet {
        PluginSet {
            aliases,
            ..PluginSet::default()
        }
    }

    /// Loads one file into the set (refusing it if a plugin of the same name is present).
    pub fn add_file(&mut self, file: &Path, options: &LoadOptions) {
        match load_file(file, options) {
            Ok(plugin) => self.push_file(Arc::new(plugin)),
            Err(r) => self.refusals.push(r),
        }
    }

    /// Adds a loaded file's plugin, or refuses it when a plugin of the same name is present
    /// (the first file in name order wins).
    pub(super) fn push_file(&mut self, plugin: Arc<LoadedPlugin>) {
        let Some(other) = self.plugins.iter().find(|p| p.name == plugin.name) else {
            self.plugins.push(plugin);
            return;
        };
        let same = other.sha256 == plugin.sha256;
        self.refusals.push(refuse(
            &plugin.file,
            format!(
                "plugin \"{}\" is already loaded from {}{}, so its handler types would be ambiguous",
                plugin.name,
                other.file.display(),
                if same { " (an identical file)" } else { "" }
            ),
            "remove one of the two files, or rename one plugin",
        ));
    }

    /// Adds a plugin compiled into the host ([`takt_plugin_api::static_plugin!`]). It passes
    /// the same checks as a file (names, api version) and resolves the same way; its `file`
    /// reads `<static>` and it has no hash. A name already taken, by a file or another static
    /// plugin, is refused, as two files of one name are.
    pub fn add_static(&mut self, module: PluginRef) -> Result<(), Refusal> {
        let origin = Path::new(STATIC_ORIGIN);
        let plugin = describe(module, origin, PathBuf::new(), String::new())?;
        if let Some(other) = self.plugins.iter().find(|p| p.name == plugin.name) {
            return Err(refuse(
                origin,
                format!(
                    "static plugin \"{}\" has the name of the plugin loaded from {}",
                    plugin.name,
                    other.file.display()
                ),
                "rename one of the two plugins",
            ));
        }
        self.plugins.push(Arc::new(plugin));
        Ok(())
    }

    /// Adds a plugin that is part of the host program itself (`takt run`'s `exe` executor),
    /// which a plugin *file* must not shadow: a file already loaded under the same name is
    /// moved to the refusals — the built-in one is what the host's documentation and
    /// configuration describe, and a refused file never stops the others — with `fix` as
    /// what to do. A clash with another static plugin is refused as by
    /// [`add_static`](Self::add_static). Returns the file's refusal, if there was one.
    pub fn add_builtin(
        &mut self,
        module: PluginRef,
        fix: &str,
    ) -> Result<Option<Refusal>, Refusal> {
        let origin = Path::new(STATIC_ORIGIN);
        let plugin = describe(module, origin, PathBuf::new(), String::new())?;
        let mut refused = None;
        if let Some(i) = self
            .plugins
            .iter()
            .position(|p| p.name == plugin.name && p.file != origin)
        {
            let file = self.plugins.remove(i);
            let r = refuse(
                &file.file,
                format!(
                    "plugin \"{}\" is built into this host, which uses its own copy",
                    plugin.name
                ),
                fix,
            );
            self.refusals.push(r.clone());
            refused = Some(r);
        }
        self.add_static(module)?;
        Ok(refused)
    }

    /// The loaded plugins, in load order.
    pub fn plugins(&self) -> &[Arc<LoadedPlugin>] {
        &self.plugins
    }

    /// The refused files.
    pub fn refusals(&self) -> &[Refusal] {
        &self.refusals
    }

    /// Finds the handler for a HandlerType (see the module docs for the accepted forms).
    pub fn resolve(&self, handler_type: &str) -> Result<ResolvedHandler, ResolveError> {
        let text = handler_type.trim();
        if let Some(target) = self.aliases.get(text) {
            return self.resolve_native_text(target, text);
        }
        match parse_handler_type(text).map_err(ResolveError::Malformed)? {
            HandlerTypeName::Native { plugin, handler } => {
                self.resolve_native(&plugin, &handler, text)
            }
            HandlerTypeName::Dotnet {
                type_name,
                assembly,
            } => self.resolve_dotnet(&type_name, &assembly, text),
        }
    }

    fn resolve_native_text(
        &self,
        target: &str,
        original: &str,
    ) -> Result<ResolvedHandler, ResolveError> {
        match parse_handler_type(target).map_err(ResolveError::Malformed)? {
            HandlerTypeName::Native { plugin, handler } => {
                self.resolve_native(&plugin, &handler, original)
            }
            HandlerTypeName::Dotnet { .. } => Err(ResolveError::Malformed(format!(
                "the alias for \"{original}\" must name a plugin::handler, not \"{target}\""
            ))),
        }
    }

    fn available(&self) -> String {
        if self.plugins.is_empty() {
            "none".to_string()
        } else {
            self.plugins
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    }

    fn resolve_native(
        &self,
        plugin: &str,
        handler: &str,
        original: &str,
    ) -> Result<ResolvedHandler, ResolveError> {
        let p = self
            .plugins
            .iter()
            .find(|p| p.name == plugin)
            .ok_or_else(|| ResolveError::UnknownPlugin {
                handler_type: original.to_string(),
                plugin: plugin.to_string(),
                available: self.available(),
            })?;
        let h = p
            .handlers
            .iter()
            .find(|h| h.name == handler)
            .ok_or_else(|| ResolveError::UnknownHandler {
                handler_type: original.to_string(),
                plugin: plugin.to_string(),
                handler: handler.to_string(),
                available: p
                    .handlers
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        Ok(ResolvedHandler {
            plugin: p.clone(),
            handler: h.clone(),
        })
    }

    fn resolve_dotnet(
        &self,
        type_name: &str,
        assembly: &str,
        original: &str,
    ) -> Result<ResolvedHandler, ResolveError> {
        let plugin_keys = assembly_keys(assembly);
        let handler_keys = class_keys(type_name);
        let plugins: Vec<&Arc<LoadedPlugin>> = self
            .plugins
            .iter()
            .filter(|p| plugin_keys.contains(&fold(&p.name)))
            .collect();
        let plugin = match plugins.as_slice() {
            [] => {
                return Err(ResolveError::UnknownPlugin {
                    handler_type: original.to_string(),
                    plugin: assembly.to_string(),
                    available: self.available(),
                });
            }
            [one] => *one,
            many => {
                return Err(ResolveError::Ambiguous {
                    handler_type: original.to_string(),
                    candidates: many
                        .iter()
                        .map(|p| format!("plugin {}", p.name))
                        .collect::<Vec<_>>()
                        .join(" and "),
                });
            }
        };
        let handlers: Vec<&HandlerMeta> = plugin
            .handlers
            .iter()
            .filter(|h| handler_keys.contains(&fold(&h.name)))
            .collect();
        match handlers.as_slice() {
            [one] => Ok(ResolvedHandler {
                plugin: plugin.clone(),
                handler: (*one).clone(),
            }),
            [] => Err(ResolveError::UnknownHandler {
                handler_type: original.to_string(),
                plugin: plugin.name.clone(),
                handler: type_name
                    .rsplit('.')
                    .next()
                    .unwrap_or(type_name)
                    .to_string(),
                available: plugin
                    .handlers
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
            many => Err(ResolveError::Ambiguous {
                handler_type: original.to_string(),
                candidates: many
                    .iter()
                    .map(|h| h.handler_type.clone())
                    .collect::<Vec<_>>()
                    .join(" and "),
            }),
        }
    }
}

/// Whether a path has this platform's shared-library extension.
pub fn is_library(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(std::env::consts::DLL_EXTENSION))
}

/// Runs every check on one file and loads it.
///
/// The order matters: the file's permissions and bytes are checked (hash against the pin)
/// before anything is mapped (mapping a library runs its initialisers); the library is then
/// mapped from a content-addressed shadow copy, so the original file can be replaced (or
/// copied over) while the host runs. Libraries are never unloaded; a refused file may stay
/// mapped.
pub fn load_file(file: &Path, options: &LoadOptions) -> Result<LoadedPlugin, Refusal> {
    map_prepared(file, prepare(file, options)?)
}

/// A file that passed every check that needs no mapping, copied to its shadow path.
pub(crate) struct Prepared {
    /// The content-addressed copy to map (in this process or a worker).
    pub(crate) shadow: PathBuf,
    /// SHA-256 of the bytes, lowercase hex.
    pub(crate) sha256: String,
}

/// The checks before mapping — permissions, readable, pin, a well-formed image — and the
/// shadow copy.
pub(crate) fn prepare(file: &Path, options: &LoadOptions) -> Result<Prepared, Refusal> {
    if options.check_permissions {
        super::perms::check_file(file)?;
    }
    let bytes = std::fs::read(file).map_err(|e| {
        refuse(
            file,
            format!("cannot read the file: {e}"),
            "check that the file exists and the host's account may read it",
        )
    })?;
    let sha256 = hex(&Sha256::digest(&bytes));
    let file_name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match options.pins.get(&file_name) {
        Some(pin) if !pin.eq_ignore_ascii_case(&sha256) => {
            return Err(refuse(
                file,
                format!("its SHA-256 is {sha256} but the configuration pins {pin}"),
                "deploy the file that was pinned, or update the pin after checking the new file",
            ));
        }
        None if options.require_pins => {
            return Err(refuse(
                file,
                format!("it has no SHA-256 pin and pins are required (its SHA-256 is {sha256})"),
                format!(
                    "add \"{file_name}\" = \"{sha256}\" to the plugin pins after checking the file"
                ),
            ));
        }
        _ => {}
    }
    if let Err(why) = check_image(&bytes) {
        return Err(refuse(
            file,
            format!("it is not a loadable shared library ({why})"),
            "the file is damaged or not a plugin: deploy it again from the build output",
        ));
    }
    let shadow = shadow_copy(&bytes, &sha256, file, options)?;
    Ok(Prepared { shadow, sha256 })
}

/// Maps a prepared file into this process and checks it.
pub(crate) fn map_prepared(file: &Path, prepared: Prepared) -> Result<LoadedPlugin, Refusal> {
    let module = open_module(file, &prepared.shadow)?;
    describe(module, file, prepared.shadow, prepared.sha256)
}

/// Maps a shadow copy and checks it, as a worker process does for the host (the host made
/// the copy and ran the checks before mapping). Refusals name the shadow copy.
pub(crate) fn open_shadow(shadow: &Path) -> Result<LoadedPlugin, Refusal> {
    let module = open_module(shadow, shadow)?;
    describe(module, shadow, shadow.to_path_buf(), String::new())
}

/// The checks every module passes once it is in memory (loaded from a file or compiled in):
/// api major version, unwinding panics, valid and distinct names; and its metadata.
fn describe(
    module: PluginRef,
    file: &Path,
    shadow: PathBuf,
    sha256: String,
) -> Result<LoadedPlugin, Refusal> {
    let name = module.name().as_str().to_string();
    let api_version = module.api_version().as_str().to_string();
    check_api_version(file, &api_version)?;
    if !module.panic_unwind() {
        return Err(refuse(
            file,
            "it was built with panic = \"abort\", so any panic in it would abort the whole host",
            "build the plugin with panic = \"unwind\" (the default); remove panic = \"abort\" from its profile",
        ));
    }
    if !valid_name(&name) {
        return Err(refuse(
            file,
            format!("its plugin name \"{name}\" is invalid"),
            "name the plugin with lowercase letters, digits, '_' and '-', starting with a letter",
        ));
    }
    let mut handlers: Vec<HandlerMeta> = Vec::new();
    for info in (module.handlers())().iter() {
        let h = info.name().as_str().to_string();
        if !valid_name(&h) {
            return Err(refuse(
                file,
                format!("handler name \"{h}\" is invalid"),
                "name handlers with lowercase letters, digits, '_' and '-', starting with a letter",
            ));
        }
        if handlers.iter().any(|o| o.name == h) {
            return Err(refuse(
                file,
                format!("it declares handler \"{h}\" twice"),
                "give each handler a distinct name",
            ));
        }
        handlers.push(HandlerMeta {
            handler_type: format!("{name}::{h}"),
            name: h,
            description: info.description().as_str().to_string(),
            params_schema: info
                .params_schema()
                .into_option()
                .map(|s| s.as_str().to_string()),
            default_timeout: info
                .default_timeout_ms()
                .into_option()
                .map(Duration::from_millis),
        });
    }
    Ok(LoadedPlugin {
        name,
        version: module.version().as_str().to_string(),
        api_version,
        file: file.to_path_buf(),
        shadow,
        sha256,
        handlers,
        module: Some(module),
        pool: OnceLock::new(),
        life: super::registry::Life::default(),
    })
}

/// Structural check of an ELF image before it is mapped.
///
/// The dynamic loader maps the file's segments as they are declared; a truncated file (an
/// interrupted copy) declares segments past its end, and touching them kills the process with
/// SIGBUS inside `dlopen` — no error is returned. So every loadable segment and the program
/// header table must lie inside the file. Non-ELF platforms (PE, Mach-O) are left to their
/// loaders, which report such damage as errors.
fn check_image(bytes: &[u8]) -> Result<(), String> {
    if std::env::consts::DLL_EXTENSION != "so" {
        return Ok(());
    }
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF file".to_string());
    }
    let wide = match bytes[4] {
        1 => false,
        2 => true,
        _ => return Err("unknown ELF class".to_string()),
    };
    let little = match bytes[5] {
        1 => true,
        2 => false,
        _ => return Err("unknown ELF byte order".to_string()),
    };
    let read = |at: usize, len: usize| -> Result<u64, String> {
        let b = bytes
            .get(at..at + len)
            .ok_or_else(|| "truncated ELF header".to_string())?;
        let mut v = 0u64;
        for i in 0..len {
            let byte = if little { b[len - 1 - i] } else { b[i] };
            v = (v << 8) | u64::from(byte);
        }
        Ok(v)
    };
    let (phoff, phentsize, phnum) = if wide {
        (read(0x20, 8)?, read(0x36, 2)?, read(0x38, 2)?)
    } else {
        (read(0x1c, 4)?, read(0x2a, 2)?, read(0x2c, 2)?)
    };
    let len = bytes.len() as u64;
    let table_end = phentsize
        .checked_mul(phnum)
        .and_then(|n| n.checked_add(phoff))
        .ok_or("corrupt program header table")?;
    if table_end > len {
        return Err(format!(
            "truncated: its program headers end at byte {table_end} but the file has {len}"
        ));
    }
    for i in 0..phnum {
        let h = (phoff + i * phentsize) as usize;
        let p_type = read(h, 4)?;
        let (offset, filesz) = if wide {
            (read(h + 8, 8)?, read(h + 32, 8)?)
        } else {
            (read(h + 4, 4)?, read(h + 16, 4)?)
        };
        // Only segments the loader maps or reads matter: LOAD, DYNAMIC, INTERP.
        if matches!(p_type, 1..=3) {
            let end = offset.checked_add(filesz).ok_or("corrupt segment size")?;
            if end > len {
                return Err(format!(
                    "truncated: a segment ends at byte {end} but the file has {len} bytes"
                ));
            }
        }
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the bytes to `<shadow_dir>/<sha256>.<ext>` unless that file exists already.
///
/// An existing shadow file is never rewritten: it may be mapped by this or another host
/// process. It is written under a temporary name and renamed, so no process ever maps a
/// half-written file.
fn shadow_copy(
    bytes: &[u8],
    sha256: &str,
    file: &Path,
    options: &LoadOptions,
) -> Result<PathBuf, Refusal> {
    let dir = &options.shadow_dir;
    let io = |what: &str, e: std::io::Error| {
        refuse(
            file,
            format!(
                "cannot {what} in the shadow directory {}: {e}",
                dir.display()
            ),
            "make the shadow directory writable by the host (it must not be mounted noexec)",
        )
    };
    std::fs::create_dir_all(dir).map_err(|e| io("create the directory", e))?;
    if options.check_permissions {
        // What is mapped is the copy: a directory others may write to would let them swap
        // it between the hash check and the mapping.
        super::perms::check_dir(dir, "the shadow directory").map_err(|r| Refusal {
            file: file.to_path_buf(),
            ..r
        })?;
    }
    let dest = dir.join(format!("{sha256}.{}", std::env::consts::DLL_EXTENSION));
    if dest.exists() {
        let existing = std::fs::read(&dest).map_err(|e| io("read the existing copy", e))?;
        if hex(&Sha256::digest(&existing)) == sha256 {
            return canonical(&dest, file);
        }
        return Err(refuse(
            file,
            format!(
                "the shadow copy {} exists but its content does not match its name",
                dest.display()
            ),
            "stop the hosts using that directory and delete the damaged file",
        ));
    }
    let tmp = dir.join(format!(".{sha256}.{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(|e| io("create a file", e))?;
    f.write_all(bytes).map_err(|e| io("write a file", e))?;
    f.sync_all().map_err(|e| io("sync a file", e))?;
    drop(f);
    std::fs::rename(&tmp, &dest).map_err(|e| io("rename a file", e))?;
    canonical(&dest, file)
}

/// dlopen searches the library path for bare names: always pass an absolute path.
fn canonical(p: &Path, file: &Path) -> Result<PathBuf, Refusal> {
    std::fs::canonicalize(p).map_err(|e| {
        refuse(
            file,
            format!("cannot resolve the shadow copy {}: {e}", p.display()),
            "check the shadow directory",
        )
    })
}

/// Maps the library and checks its root module's layout in both directions.
///
/// abi_stable alone accepts only plugins built against the same or a newer interface; a host
/// that has grown a field would refuse every older plugin. The ABI's evolution rules (append
/// only, `Option` accessors) make both directions safe, so we accept a plugin whose layout is
/// compatible either way, and refuse with a one-line summary otherwise.
fn open_module(file: &Path, shadow: &Path) -> Result<PluginRef, Refusal> {
    let header = lib_header_from_path(shadow).map_err(|e| library_refusal(file, &e))?;
    let plugin_layout = header.layout().ok_or_else(|| {
        refuse(
            file,
            "it exports a root module without a layout description",
            "build the plugin with takt_plugin_api::export_plugin!",
        )
    })?;
    let host_layout = <PluginRef as StableAbi>::LAYOUT;
    if let Err(newer) = check_layout_compatibility(host_layout, plugin_layout)
        && let Err(older) = check_layout_compatibility(plugin_layout, host_layout)
    {
        return Err(refuse(
            file,
            format!(
                "its plugin ABI does not match this host's (plugin built against interface {}, host has {}): {}",
                header.version_strings(),
                API_VERSION,
                summarize(&newer)
                    .or_else(|| summarize(&older))
                    .unwrap_or_default()
            ),
            format!("rebuild the plugin against takt-plugin-api {API_VERSION}"),
        ));
    }
    // SAFETY: the layout was checked above (in one direction or the other), which is exactly
    // what `init_root_module` checks, minus its one-directional field-count rule.
    unsafe { header.unchecked_layout::<PluginRef>() }.map_err(|e| match e {
        RootModuleError::Unwound => refuse(
            file,
            "its initialisation panicked (the plugin's panic message is on the host's standard error)",
            "fix the plugin's build function (invalid plugin or handler names, duplicate handlers)",
        ),
        other => refuse(
            file,
            format!("its initialisation failed: {}", first_line(&other.to_string())),
            "fix the plugin's build function",
        ),
    })
}

/// One line out of abi_stable's structured layout errors (its Display runs to hundreds of
/// lines).
fn summarize(e: &AbiInstabilityErrors) -> Option<String> {
    use abi_stable::type_layout::TLFieldOrFunction;
    let mut out = Vec::new();
    for err in e.errors.iter() {
        let path: Vec<String> = err
            .stack_trace
            .iter()
            .map(|ef| match &ef.expected {
                TLFieldOrFunction::Field(f) => f.name().to_string(),
                TLFieldOrFunction::Function(f) => format!("fn {}", f.name),
            })
            .collect();
        for ai in err.errs.iter() {
            out.push(format!("{}: {ai:?}", path.join(".")));
            if out.len() >= 3 {
                return Some(out.join("; "));
            }
        }
    }
    (!out.is_empty()).then(|| out.join("; "))
}

fn library_refusal(file: &Path, e: &LibraryError) -> Refusal {
    match e {
        LibraryError::OpenError { err, .. } => refuse(
            file,
            format!(
                "it is not a loadable shared library ({})",
                err.to_string().trim()
            ),
            "check that the file is a plugin built for this platform and architecture",
        ),
        LibraryError::GetSymbolError { .. } => refuse(
            file,
            "it is not a takt plugin: it exports no takt root module",
            "export the plugin with takt_plugin_api::export_plugin!, or move the file out of the plugin directory",
        ),
        LibraryError::RootModule {
            err: RootModuleError::Unwound,
            ..
        } => refuse(
            file,
            "its initialisation panicked (the plugin's panic message is on the host's standard error)",
            "fix the plugin's build function (invalid plugin or handler names, duplicate handlers)",
        ),
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => refuse(
            file,
            format!(
                "it was built against takt-plugin-api {actual_version}, this host needs {expected_version}"
            ),
            format!("rebuild the plugin against takt-plugin-api {API_VERSION}"),
        ),
        other => refuse(
            file,
            format!("it cannot be loaded: {}", first_line(&other.to_string())),
            format!(
                "rebuild the plugin against takt-plugin-api {API_VERSION} with the same abi_stable version as the host"
            ),
        ),
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("unknown error")
        .to_string()
}

/// The compatibility rule: same major version of takt-plugin-api (any minor or patch, older or
/// newer: the ABI only ever grows within a major, and both sides cope with missing fields).
fn check_api_version(file: &Path, plugin_api: &str) -> Result<(), Refusal> {
    let host = semver::Version::parse(API_VERSION).ok();
    let plugin = semver::Version::parse(plugin_api).map_err(|e| {
        refuse(
            file,
            format!("it reports an unreadable takt-plugin-api version \"{plugin_api}\" ({e})"),
            format!("rebuild the plugin against takt-plugin-api {API_VERSION}"),
        )
    })?;
    match host {
        Some(h) if h.major == plugin.major => Ok(()),
        _ => Err(refuse(
            file,
            format!(
                "it was built against takt-plugin-api {plugin_api}, but this host speaks {API_VERSION} (major versions differ)"
            ),
            format!(
                "rebuild the plugin against takt-plugin-api {}.x",
                host.map(|h| h.major).unwrap_or(1)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn truncated_or_foreign_images_are_caught_before_mapping() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(check_image(&me), Ok(()));
        let e = check_image(&me[..4096]).unwrap_err();
        assert!(e.starts_with("truncated: "), "{e}");
        assert_eq!(check_image(b"MZ\x90\x00").unwrap_err(), "not an ELF file");
        let mut odd = me[..64].to_vec();
        odd[4] = 9;
        assert_eq!(check_image(&odd).unwrap_err(), "unknown ELF class");
    }

    #[test]
    fn api_versions_must_share_the_major() {
        let f = Path::new("p.so");
        assert!(check_api_version(f, API_VERSION).is_ok());
        assert!(check_api_version(f, "1.99.3").is_ok());
        let e = check_api_version(f, "0.9.0").unwrap_err();
        assert!(
            e.reason.contains("built against takt-plugin-api 0.9.0"),
            "{e}"
        );
        assert!(
            e.fix
                .contains("rebuild the plugin against takt-plugin-api 1.x"),
            "{e}"
        );
        let e = check_api_version(f, "one").unwrap_err();
        assert!(
            e.reason.contains("unreadable takt-plugin-api version"),
            "{e}"
        );
    }

    #[test]
    fn missing_directories_and_unreadable_files_are_refusals() {
        let set = PluginSet::load_dir(
            Path::new("/nonexistent/takt/plugins"),
            &LoadOptions::with_temp_shadow(),
        );
        assert_eq!(set.refusals().len(), 1);
        assert!(set.refusals()[0].to_string().starts_with(
            "refused plugin /nonexistent/takt/plugins: cannot read the plugin directory"
        ));
        let r = load_file(
            Path::new("/nonexistent/x.so"),
            &LoadOptions::with_temp_shadow(),
        )
        .unwrap_err();
        assert!(r.reason.starts_with("cannot read the file"), "{r}");
    }

    #[test]
    fn pins_are_checked_before_loading() {
        let dir = std::env::temp_dir().join(format!("takt-pin-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("fake.{}", std::env::consts::DLL_EXTENSION));
        std::fs::write(&file, b"not a library").unwrap();
        let sha = hex(&Sha256::digest(b"not a library"));
        let mut o = LoadOptions {
            shadow_dir: dir.join("shadow"),
            ..LoadOptions::default()
        };
        o.pins.insert(
            "fake.so".replace("so", std::env::consts::DLL_EXTENSION),
            "00".repeat(32),
        );
        let r = load_file(&file, &o).unwrap_err();
        assert!(r.reason.contains("but the configuration pins 0000"), "{r}");
        assert!(
            !dir.join("shadow").exists(),
            "nothing may be copied or loaded before the pin check"
        );
        o.pins.clear();
        o.require_pins = true;
        let r = load_file(&file, &o).unwrap_err();
        assert!(r.fix.contains(&sha), "{r}");
        o.require_pins = false;
        let r = load_file(&file, &o).unwrap_err();
        assert!(
            r.reason.starts_with("it is not a loadable shared library"),
            "{r}"
        );
        // A damaged image is refused before it is copied, let alone mapped.
        assert!(
            !dir.join("shadow")
                .join(format!("{sha}.{}", std::env::consts::DLL_EXTENSION))
                .exists()
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
