//! The exe executor (`exe::run`, see `takt-plugin-exe`) as a plugin file, for hosts that load
//! it from their plugin directory instead of compiling it in. `takt run` has it built in: a
//! copy of this file in its plugin directory (where `cargo build` puts it, next to `takt`) is
//! refused and listed with the fix, and the built-in one is used; a `HostBuilder` given both
//! refuses to start, naming the file.
//!
//! Its allowlist comes from the environment of the host process, read once when the host
//! loads the file: `TAKT_EXE_ALLOWLIST`, entries separated like `PATH` (`:` on Unix, `;` on
//! Windows), e.g. `TAKT_EXE_ALLOWLIST=/usr/bin:/opt/mes/tools/report.sh`. Unset, every program
//! may be started; set but empty, none.
//!
//! A crate of its own (rather than a feature of `takt-plugin-exe`) so that the exported
//! symbol can never be linked into a host that compiles the executor in, whatever features
//! cargo unifies across the workspace.

use takt_plugin_api::sdk::Plugin;

fn plugin() -> Plugin {
    takt_plugin_exe::plugin(takt_plugin_exe::ExeOptions::from_env())
}

takt_plugin_api::export_plugin!(plugin);
