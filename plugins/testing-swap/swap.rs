//! `swap`: the hot-swap fixture of takt's host tests, one source built as four packages
//! (`v1`…`v4`, versions 1.0.0 … 4.0.0) so that the tests have four real builds of one plugin
//! whose reported version — the package version, as for any plugin — differs, at the cost of
//! one small crate build each (the dependencies are shared in the workspace's target dir).
//!
//! | handler | params         | result                                                   |
//! |---------|----------------|----------------------------------------------------------|
//! | `work`  | `{ "ms": 200 }` | sleeps (a cancel wakes it), then `{ "version": "2.0.0" }` |

use std::time::Duration;

use serde::{Deserialize, Serialize};
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};

fn plugin() -> Plugin {
    Plugin::new("swap").handler(
        "work",
        "sleeps a while and reports the version that ran it",
        work,
    )
}

takt_plugin_api::export_plugin!(plugin);

/// Params of `work`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkParams {
    /// How long to work, in milliseconds.
    #[serde(default)]
    ms: u64,
}

/// Result of `work`.
#[derive(Debug, Serialize)]
struct Worked {
    version: &'static str,
}

/// `swap::work`: sleeps `ms` with `ctx.sleep`, then says which version ran it.
fn work(ctx: &JobContext, p: WorkParams) -> Result<Worked, JobError> {
    ctx.info(&format!("version {} works", env!("CARGO_PKG_VERSION")));
    ctx.sleep(Duration::from_millis(p.ms))?;
    Ok(Worked {
        version: env!("CARGO_PKG_VERSION"),
    })
}
