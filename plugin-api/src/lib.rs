//! takt's plugin interface: **the one API boundary** of the project.
//!
//! Business logic ships as a `cdylib` that depends on this crate and nothing else of takt. Two
//! halves:
//!
//! * [`abi`] — the stable ABI (abi_stable prefix types, an error struct, a host callback
//!   table) with the rules for evolving it without breaking built plugins.
//! * [`sdk`] — what a plugin author uses: register ordinary Rust functions with serde-typed
//!   params and results, and export them with [`export_plugin!`]. The SDK turns panics into
//!   failed runs, bad params into `invalid-params` errors that name the field, `tracing` events
//!   into run-log lines, and runs async handlers on a runtime it creates inside the call.
//!
//! A third, small part ([`host`]) is what the host uses to call a plugin safely: it builds the
//! callback table for one call from a Rust trait object.
//!
//! ```ignore
//! use serde::{Deserialize, Serialize};
//! use takt_plugin_api::sdk::{JobContext, JobError, Plugin};
//!
//! #[derive(Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct CleanParams { dir: String, keep_days: u32 }
//!
//! #[derive(Serialize)]
//! struct Summary { removed: u64 }
//!
//! fn clean(ctx: &JobContext, p: CleanParams) -> Result<Summary, JobError> {
//!     tracing::info!(dir = %p.dir, "cleaning");
//!     Ok(Summary { removed: 0 })
//! }
//!
//! fn plugin() -> Plugin {
//!     Plugin::new("examples").handler("clean", "deletes old files", clean)
//! }
//! takt_plugin_api::export_plugin!(plugin);
//! ```

pub mod abi;
pub mod host;
pub mod sdk;

pub use abi::API_VERSION;

/// Re-exported so that [`export_plugin!`] works without the plugin naming abi_stable itself.
#[doc(hidden)]
pub use abi_stable as __abi_stable;

/// Exports a plugin built by `$build` (a `fn() -> Plugin`) as this library's root module.
///
/// Use it once per `cdylib`. It emits the symbol the host looks up (the same one
/// `#[abi_stable::export_root_module]` would), so the plugin crate needs no direct abi_stable
/// dependency. The build function runs once, when the host first loads the library; an
/// invalid plugin (bad name, duplicate handler) makes the host refuse the file with the reason.
#[macro_export]
macro_rules! export_plugin {
    ($build:path) => {
        #[doc(hidden)]
        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static _1as_0lib_1header_0root_bmodule_bloader: $crate::__abi_stable::library::LibHeader = {
            static __TAKT_SLOT: $crate::sdk::__Slot = $crate::sdk::__Slot::new();
            $crate::__plugin_entries!(__TAKT_SLOT, __takt_handlers, __takt_run);
            extern "C" fn __takt_root_module() -> $crate::__abi_stable::library::RootModuleResult {
                fn build() -> $crate::abi::PluginRef {
                    $crate::sdk::__export(
                        &__TAKT_SLOT,
                        env!("CARGO_PKG_VERSION"),
                        $build,
                        __takt_handlers,
                        __takt_run,
                    )
                }
                $crate::__abi_stable::library::__call_root_module_loader(build)
            }
            // SAFETY: the constructor returns a `PluginRef`, the root module type named here.
            unsafe {
                $crate::__abi_stable::library::LibHeader::from_constructor::<$crate::abi::PluginRef>(
                    __takt_root_module,
                    $crate::__abi_stable::library::CheckTypeLayout::Yes,
                )
            }
        };
    };
}

/// A plugin compiled into the host itself (no `cdylib`, no file): evaluates to
/// `Result<PluginRef, String>` for the plugin `$build` builds (any `FnOnce() -> Plugin`,
/// so a closure may capture what the handlers need, e.g. a connection pool).
///
/// The host registers the module like a loaded file (`PluginSet::add_static` in takt-host), and
/// calls go through exactly the same ABI entries, guards and context as a `cdylib`'s — one
/// call path to test, and a static plugin can later move into its own file unchanged.
///
/// Each use of the macro is one plugin with its own registration: evaluating the same use
/// again returns the same module (the build runs once per process), so build static plugins
/// once at start-up. An invalid plugin (bad name, duplicate handler) is an `Err` with the
/// reason.
///
/// ```ignore
/// let module = takt_plugin_api::static_plugin!(|| {
///     Plugin::new("mes").handler("post_counts", "posts shift counts", post_counts)
/// })?;
/// ```
#[macro_export]
macro_rules! static_plugin {
    ($build:expr) => {{
        static __TAKT_SLOT: $crate::sdk::__Slot = $crate::sdk::__Slot::new();
        $crate::__plugin_entries!(__TAKT_SLOT, __takt_handlers, __takt_run);
        $crate::sdk::__static(
            &__TAKT_SLOT,
            env!("CARGO_PKG_VERSION"),
            $build,
            __takt_handlers,
            __takt_run,
        )
    }};
}

/// The two `extern "C"` entries of a root module, bound to one registration slot.
#[doc(hidden)]
#[macro_export]
macro_rules! __plugin_entries {
    ($slot:ident, $handlers:ident, $run:ident) => {
        extern "C" fn $handlers()
        -> $crate::__abi_stable::std_types::RVec<$crate::abi::HandlerInfoRef> {
            $crate::sdk::__handlers(&$slot)
        }
        extern "C" fn $run(
            handler: $crate::__abi_stable::std_types::RStr<'_>,
            params_json: $crate::__abi_stable::std_types::RStr<'_>,
            ctx: $crate::abi::HostCtxRef,
        ) -> $crate::__abi_stable::std_types::RResult<
            $crate::__abi_stable::std_types::RString,
            $crate::abi::PluginError,
        > {
            $crate::sdk::__run(&$slot, handler, params_json, ctx)
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_exported_symbol_is_the_one_abi_stable_looks_up() {
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }
}
