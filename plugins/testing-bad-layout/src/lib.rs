//! A test fixture for takt's plugin loader: a library whose root module is not takt's.
//!
//! It exports the root-module symbol under takt's module name (`takt_plugin`) and version
//! (`1.0.0`), so it gets past the name and version checks, but the module is [`BadMod`], whose
//! layout has nothing to do with takt's `PluginMod`. The host must refuse it as an ABI layout
//! mismatch instead of calling into it.
//!
//! It deliberately does not depend on `takt-plugin-api`: it stands for a library built
//! against some other interface.

use abi_stable::StableAbi;
use abi_stable::library::{
    __call_root_module_loader, CheckTypeLayout, LibHeader, RootModule, RootModuleResult,
};
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::RStr;

/// A root module with the wrong layout.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = BadRef)))]
pub struct BadMod {
    /// A name, where takt expects its plugin name (the only field that lines up).
    pub name: RStr<'static>,
    /// A number, where takt expects a string.
    #[sabi(last_prefix_field)]
    pub value: u64,
}

impl RootModule for BadRef {
    abi_stable::declare_root_module_statics! {BadRef}
    const BASE_NAME: &'static str = "takt_plugin";
    const NAME: &'static str = "takt_plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("1.0.0");
}

/// The root-module symbol the host looks up, typed with the wrong module.
#[doc(hidden)]
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static _1as_0lib_1header_0root_bmodule_bloader: LibHeader = {
    extern "C" fn root_module() -> RootModuleResult {
        __call_root_module_loader(build)
    }
    // SAFETY: the constructor returns a `BadRef`, the root module type named here.
    unsafe { LibHeader::from_constructor::<BadRef>(root_module, CheckTypeLayout::Yes) }
};

fn build() -> BadRef {
    BadMod {
        name: RStr::from_str("bad-layout"),
        value: 42,
    }
    .leak_into_prefix()
}
