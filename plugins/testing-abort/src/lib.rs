//! A test fixture for takt's plugin loader: a plugin that claims to be built with
//! `panic = "abort"`.
//!
//! Its root module has takt's layout, the real `API_VERSION` and one handler (`noop`), but it
//! reports `panic_unwind: false`. A plugin built that way would take the whole host down on its
//! first panic, so the host must refuse it. (It is actually built with unwinding, like the rest
//! of the workspace: only the reported flag matters to the loader.)
//!
//! The SDK's `export_plugin!` always reports the real build setting, so the root module is
//! built here by hand (in `plugins/fixture-root.rs`, shared with `testing-old-api`).

/// The plugin's name.
const NAME: &str = "abort";
/// The real API version: only the build setting is wrong.
const API: &str = takt_plugin_api::API_VERSION;
/// What a plugin built with `panic = "abort"` reports.
const PANIC_UNWIND: bool = false;

include!("../../fixture-root.rs");
