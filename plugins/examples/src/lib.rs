//! `examples`: takt's example plugin, and a template for writing your own.
//!
//! It shows the three shapes of a handler the SDK supports:
//!
//! * `examples::hello` — the smallest blocking handler: typed params with a default, a typed
//!   result, logging through `tracing` and through the context, progress;
//! * `examples::clean_expired_tokens` — a real maintenance job (the "clean expired tokens" job
//!   of the scheduler stories, done on files): validation, a JSON schema, a default timeout,
//!   progress per item, cooperative cancellation, partial failures that do not fail the run;
//! * `examples::wait` — an async handler: the SDK runs it on a runtime of its own and drops
//!   the future when the host cancels the run.
//!
//! Build with `cargo build -p takt-plugin-examples`; the library is
//! `target/<profile>/libtakt_plugin_examples.so` (`.dylib` on macOS, `takt_plugin_examples.dll`
//! on Windows).

mod clean;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};

fn plugin() -> Plugin {
    Plugin::new("examples")
        .handler("hello", "greets someone by name", hello)
        .timeout(Duration::from_secs(10))
        .handler(
            "clean_expired_tokens",
            "deletes files older than keepDays days from a directory",
            clean::clean_expired_tokens,
        )
        .timeout(Duration::from_secs(600))
        .schema(clean::PARAMS_SCHEMA)
        .async_handler(
            "wait",
            "waits for a number of seconds, asynchronously",
            wait,
        )
}

takt_plugin_api::export_plugin!(plugin);

/// Params of `hello`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HelloParams {
    /// Who to greet.
    #[serde(default = "default_name")]
    name: String,
}

fn default_name() -> String {
    "world".to_string()
}

/// Result of `hello`.
#[derive(Debug, Serialize)]
struct Greeting {
    greeting: String,
}

/// `examples::hello`: params `{ "name": "..." }` (default `"world"`), result
/// `{ "greeting": "hello, <name>" }`.
///
/// Logs one line through `tracing` and one through the context, and reports progress 1/1.
fn hello(ctx: &JobContext, p: HelloParams) -> Result<Greeting, JobError> {
    let greeting = format!("hello, {}", p.name);
    tracing::info!(name = %p.name, "greeting someone");
    ctx.info(&format!("job {} says {greeting}", ctx.job_name()));
    ctx.progress(1, 1, "greeted");
    Ok(Greeting { greeting })
}

/// Params of `wait`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitParams {
    /// How long to wait, in seconds.
    seconds: f64,
}

/// Result of `wait`.
#[derive(Debug, Serialize)]
struct Waited {
    waited: f64,
}

/// `examples::wait`: params `{ "seconds": 1.5 }`, result `{ "waited": 1.5 }`.
///
/// Awaits `tokio::time::sleep`. There is no cancellation code here on purpose: when the host
/// cancels the run, the SDK drops this future (ending the sleep) and the run ends as
/// `cancelled`.
async fn wait(_ctx: JobContext, p: WaitParams) -> Result<Waited, JobError> {
    let duration = Duration::try_from_secs_f64(p.seconds).map_err(|e| {
        JobError::invalid_params(format!(
            "invalid params: seconds: {} is not a usable duration: {e}",
            p.seconds
        ))
    })?;
    tracing::info!(seconds = p.seconds, "waiting");
    tokio::time::sleep(duration).await;
    tracing::debug!("done waiting");
    Ok(Waited { waited: p.seconds })
}
