//! A test fixture for takt's plugin loader: a plugin that claims an old major API version.
//!
//! Its root module has takt's layout and is otherwise valid (one handler, `noop`), but its
//! `api_version` is `"0.9.0"`, as if it had been built against an incompatible major version
//! of `takt-plugin-api`. The host must refuse it with a message naming both versions.
//!
//! The SDK's `export_plugin!` always reports the real `API_VERSION`, so the root module is
//! built here by hand (in `plugins/fixture-root.rs`, shared with `testing-abort`).

/// The plugin's name.
const NAME: &str = "old-api";
/// The API version this fixture pretends to have been built against.
const API: &str = "0.9.0";
/// Built (and reporting) the workspace's `panic = "unwind"`.
const PANIC_UNWIND: bool = cfg!(panic = "unwind");

include!("../../fixture-root.rs");
