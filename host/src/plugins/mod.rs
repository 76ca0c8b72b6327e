//! Plugins: loading `cdylib` files safely and resolving HandlerTypes to handlers.
//!
//! A plugin directory is scanned in name order; each file is hashed, checked against its
//! optional SHA-256 pin, copied to a content-addressed shadow path and loaded from there, then
//! checked (ABI layout in both directions, takt-plugin-api major version, `panic = "unwind"`,
//! valid and unique names). A refused file never stops the others: [`PluginSet`] keeps the
//! loaded plugins and the refusals side by side, each refusal naming the file, the reason and
//! the fix. Files and directories that users other than the host's own (and root) may write
//! are refused (`perms`). [`Plugins`] holds the set over time: hot swaps with draining old
//! versions, and where each call runs (in process, or in a worker process).

mod handler_type;
mod loader;
mod perms;
mod registry;

pub use handler_type::{HandlerTypeName, parse_handler_type};
pub use loader::{
    HandlerMeta, LoadOptions, LoadedPlugin, PluginSet, Refusal, ResolveError, ResolvedHandler,
    STATIC_ORIGIN, is_library, load_file,
};
pub use registry::{
    DirStamp, MAPPED_WARNING, PluginVersion, Plugins, PluginsBuilder, ReloadError, ReloadRefusal,
    ReloadReport, RunLease, VersionState, build_of,
};

pub(crate) use loader::open_shadow;
