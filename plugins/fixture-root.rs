// Shared body of the loader fixtures `testing-old-api` and `testing-abort`: a root module with
// takt's layout and one handler (`noop`), built by hand because the SDK's `export_plugin!`
// always reports the real API version and build setting. The including crate defines `NAME`,
// `API` and `PANIC_UNWIND`: what the fixture claims about itself.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use abi_stable::library::{
    __call_root_module_loader, CheckTypeLayout, LibHeader, RootModuleResult,
};
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RStr, RString, RVec};
use takt_plugin_api::abi::{
    ErrorKind, HandlerInfo, HandlerInfoRef, HostCtxRef, PluginError, PluginMod, PluginRef,
};

/// The root-module symbol the host looks up; what `takt_plugin_api::export_plugin!` emits.
#[doc(hidden)]
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static _1as_0lib_1header_0root_bmodule_bloader: LibHeader = {
    extern "C" fn root_module() -> RootModuleResult {
        __call_root_module_loader(build)
    }
    // SAFETY: the constructor returns a `PluginRef`, the root module type named here.
    unsafe { LibHeader::from_constructor::<PluginRef>(root_module, CheckTypeLayout::Yes) }
};

fn build() -> PluginRef {
    PluginMod {
        name: RStr::from_str(NAME),
        version: RStr::from_str(env!("CARGO_PKG_VERSION")),
        api_version: RStr::from_str(API),
        panic_unwind: PANIC_UNWIND,
        handlers,
        run,
    }
    .leak_into_prefix()
}

/// The one handler: `noop`.
extern "C" fn handlers() -> RVec<HandlerInfoRef> {
    static NOOP: OnceLock<HandlerInfoRef> = OnceLock::new();
    catch_unwind(|| {
        let noop = *NOOP.get_or_init(|| {
            HandlerInfo {
                name: RStr::from_str("noop"),
                description: RStr::from_str("does nothing"),
                params_schema: ROption::RNone,
                default_timeout_ms: ROption::RNone,
            }
            .leak_into_prefix()
        });
        RVec::from(vec![noop])
    })
    .unwrap_or_default()
}

/// Runs `noop` (result `{}`); any other name is an `unknown-handler` error. Panic-safe.
extern "C" fn run(
    handler: RStr<'_>,
    _params_json: RStr<'_>,
    _ctx: HostCtxRef,
) -> RResult<RString, PluginError> {
    catch_unwind(AssertUnwindSafe(|| match handler.as_str() {
        "noop" => ROk(RString::from("{}")),
        other => RErr(error(
            ErrorKind::UNKNOWN_HANDLER,
            format!("plugin {NAME} has no handler \"{other}\"; it has: noop"),
        )),
    }))
    .unwrap_or_else(|_| RErr(error(ErrorKind::PANICKED, "handler panicked".to_string())))
}

fn error(kind: ErrorKind, message: String) -> PluginError {
    PluginError {
        kind,
        message: message.into(),
        retryable: false,
        data: ROption::RNone,
    }
}
