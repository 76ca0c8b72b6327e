//! `http`: takt's built-in WebAPI executor (seed 004 "运行WebAPI"), HandlerType
//! `http::request`: one HTTP request per run, its answer judged and kept (bounded) as the
//! run's result.
//!
//! ```json
//! { "method": "POST", "connection": "mes", "path": "shifts/close",
//!   "query": { "line": 3 }, "json": { "shift": "A" }, "timeoutMs": 30000,
//!   "successStatuses": ["2xx"], "retryStatuses": [408, 429, "5xx"], "responseLimit": 65536 }
//! ```
//! (see [`HttpParams`]; `url` or `connection` is required).
//!
//! What it promises:
//!
//! * **Tokens never travel in params.** A job names a connection of the host's
//!   `[http_client.connections]` (base URL, headers, extra CA roots), whose header values can
//!   come from `TAKT_HTTP_CONNECTION_<NAME>`; `Authorization`, `Cookie` and URLs with
//!   credentials are refused in job params. Connection headers are sent only to the
//!   connection's origin, never to another one a redirect points to. No log line, message or
//!   result shows a header value of a connection; URLs are shown without user info and with
//!   secret-looking query values (`access_token`, `apiKey`, …) masked.
//! * **Status decides, and says whether to retry.** A status in `successStatuses` (default
//!   2xx) succeeds; one in `retryStatuses` (default 408, 429, 5xx) fails the run as
//!   *retryable*, so the job's retry policy applies; any other fails it for good. A connect
//!   failure (nothing was sent) is retryable; a failure after sending is retryable only for an
//!   idempotent request (`GET`, `HEAD`, `PUT`, `DELETE`, `OPTIONS`, or `"idempotent": true`).
//!   A TLS certificate problem is not retryable and says how to trust an internal CA.
//! * **Stops when asked.** The request runs on a current-thread runtime inside the call; the
//!   host's cancel flag (timeout, cancel, shutdown) is read every 20 ms and drops the request,
//!   which closes its connection at once. `timeoutMs` (default: the job's timeout, else
//!   100 s) bounds connect to last body byte.
//! * **Bounded.** At most `responseLimit` bytes of the body are downloaded and kept (default
//!   64 KiB): as JSON when it parses as JSON, else as text decoded from its charset, else only
//!   counted; `truncated` says the rest was not read.
//! * **rustls** with the ring provider and the system's trust store (no OpenSSL); HTTP/1.1;
//!   no proxy (the `HTTP_PROXY` variables are ignored, so a machine-wide proxy meant for
//!   browsers does not capture calls on the factory network).
//!
//! # Using it
//!
//! `takt run` registers it compiled in, with the connections of takt.toml. A program
//! embedding the host adds it like any static plugin:
//!
//! ```ignore
//! use takt_plugin_http::{ConnectionSpec, HttpOptions};
//! let mut options = HttpOptions::default();
//! let spec = ConnectionSpec { url: Some("https://mes.local/api/".into()), ..Default::default() };
//! options.add("mes", &spec, "our config")?;
//! let http = takt_plugin_api::static_plugin!(move || takt_plugin_http::plugin(options))?;
//! ```

mod body;
mod connection;
mod params;
mod redact;
mod request;
mod status;

use takt_plugin_api::sdk::{JobContext, JobError, Plugin};

pub use body::BodyKind;
pub use connection::{CONNECTION_ENV_PREFIX, ConnectionSpec, HttpOptions, default_tls};
pub use params::{
    DEFAULT_MAX_REDIRECTS, DEFAULT_RESPONSE_LIMIT, DEFAULT_TIMEOUT, HttpParams, MAX_REDIRECTS,
    MAX_RESPONSE_LIMIT, METHODS,
};
pub use request::{CONNECT_TIMEOUT, HttpResult};
pub use status::StatusSet;

/// The plugin's name: HandlerTypes are `http::…`.
pub const PLUGIN_NAME: &str = "http";
/// The HandlerType of the executor.
pub const HANDLER_TYPE: &str = "http::request";

/// The `http` plugin with `options`: register it with `static_plugin!` (see the crate docs).
pub fn plugin(options: HttpOptions) -> Plugin {
    Plugin::new(PLUGIN_NAME)
        .handler(
            "request",
            "sends an HTTP request to a URL or a named connection and keeps the answer \
             (bounded); the status decides success and whether a retry may help",
            move |ctx: &JobContext, p: HttpParams| request::run(ctx, p, &options),
        )
        .schema(PARAMS_SCHEMA)
}

/// JSON schema of [`HttpParams`], shown by `takt plugin list`.
const PARAMS_SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "method": {"enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]},
    "url": {"type": "string"},
    "connection": {"type": "string"},
    "path": {"type": "string"},
    "query": {"type": "object"},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    "json": {},
    "body": {"type": "string"},
    "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 86400000},
    "successStatuses": {"type": "array", "items": {"type": ["integer", "string"]}, "minItems": 1},
    "retryStatuses": {"type": "array", "items": {"type": ["integer", "string"]}},
    "responseLimit": {"type": "integer", "minimum": 0, "maximum": 16777216},
    "maxRedirects": {"type": "integer", "minimum": 0, "maximum": 20},
    "idempotent": {"type": "boolean"}
  },
  "oneOf": [{"required": ["url"]}, {"required": ["connection"]}]
}"#;

/// Runs one `http::request` call directly (what the handler does), for tests with
/// [`takt_plugin_api::sdk::TestHost`].
pub fn run(
    ctx: &JobContext,
    params: HttpParams,
    options: &HttpOptions,
) -> Result<HttpResult, JobError> {
    request::run(ctx, params, options)
}
