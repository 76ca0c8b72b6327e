//! Plugins: loading `cdylib` files safely and resolving HandlerTypes to handlers.
//!
//! A plugin directory is scanned in name order; each file is hashed, checked against its
//! optional SHA-256 pin, copied to a content-addressed shadow path and loaded from there, then
//! checked (ABI layout in both directions, takt-plugin-api major version, `panic = "unwind"`,
//! valid and unique names). A refused file never stops the others: [`PluginSet`] keeps the
//! loaded plugins and the refusals side by side, each refusal naming the file, the reason and
//! the fix.

mod handler_type;
mod loader;

pub use handler_type::{HandlerTypeName, parse_handler_type};
pub use loader::{
    HandlerMeta, LoadOptions, LoadedPlugin, PluginSet, Refusal, ResolveError, ResolvedHandler,
    STATIC_ORIGIN, is_library, load_file,
};
