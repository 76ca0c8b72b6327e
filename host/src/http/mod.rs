//! The JSON HTTP API (`/api/v1/…`), health checks and Prometheus metrics of a host, served
//! by `takt run` (`[http]` in takt.toml) and by an embedded host
//! ([`crate::embed::HostBuilder::http`]).
//!
//! - [`backend`]: the host as the handlers see it — one object-safe trait whose every method
//!   is the same [`crate::scheduler::SchedulerHandle`] or store call the CLI makes, so the
//!   API never bypasses a store rule.
//! - [`auth`]: bearer tokens with roles, constant-time checks, lockouts after failures.
//! - [`problem`]: RFC 9457 errors naming the field at fault.
//! - [`mask`]: secret-looking values masked in every response.
//! - [`dashboard`]: the web dashboard under `/ui/` (`/` redirects there), reading and acting
//!   through the same functions as the JSON handlers.
//! - `jobs`, `runs`, `system`, `workflow` (why, audit, pause/resume): the handlers, each annotated for the OpenAPI document, which
//!   `utoipa-axum` collects from the very routes the router serves (so the document cannot
//!   list a route that is not served, or miss one).
//!
//! Access: a listen address that is not loopback is refused unless tokens exist (see
//! [`auth`]); TLS (rustls) is offered for it with `[http] tls_cert` / `tls_key`.

// utoipa's `#[utoipa::path]` expands the handlers' extractor types into qualified paths,
// which the workspace's `unused_qualifications` lint would report at every `Query<…>`.
#![allow(unused_qualifications)]

pub mod auth;
pub mod backend;
pub mod dashboard;
pub mod mask;
pub mod problem;

mod jobs;
mod runs;
mod system;
mod workflow;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use tower_http::limit::RequestBodyLimitLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use self::auth::{Caller, Gate};
use self::backend::Backend;
use self::problem::Problem;
use crate::metrics::Metrics;

/// The port `takt run` listens on unless `[http] listen` says otherwise: 7450, which no
/// common server or factory protocol (OPC UA 4840, Modbus 502, MQTT 1883) uses.
pub const DEFAULT_PORT: u16 = 7450;

/// The largest request body accepted (a job definition is a few KiB).
pub const MAX_BODY: usize = 1024 * 1024;

/// Where and how the API listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// The address (default `127.0.0.1:7450`; port 0 picks a free one, see
    /// [`HttpServer::local_addr`]).
    pub listen: SocketAddr,
    /// Serve HTTPS with this certificate chain and key (PEM files).
    pub tls: Option<TlsFiles>,
    /// Serve `/metrics` without a token (for a scraper on a trusted network).
    pub metrics_public: bool,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT),
            tls: None,
            metrics_public: false,
        }
    }
}

/// A TLS certificate chain and its private key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (server certificate first).
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why the API could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// A non-loopback address without tokens.
    #[error(
        "refusing to serve the http api on {0}: it is not a loopback address and no api token \
         exists, so anyone on the network could change jobs; make one first (`takt token \
         create --role admin`), or listen on 127.0.0.1"
    )]
    OpenToTheNetwork(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {0}: {1}; choose another [http] listen address or stop what uses it")]
    Bind(SocketAddr, std::io::Error),
    /// The TLS files could not be read or do not fit.
    #[error("cannot use the tls certificate {cert} with key {key}: {reason}")]
    Tls {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The store could not say whether tokens exist.
    #[error("cannot read the api tokens: {0}")]
    Store(#[from] takt_core::store::StoreError),
}

/// `Query<T>` answering a bad query string as problem+json naming the parameter.
pub(crate) struct Q<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Q<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Q<T>, Problem> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Q(v)),
            Err(e) => {
                // axum says "Failed to deserialize query string: <field>: <what>".
                let text = e.body_text();
                let rest = text
                    .split_once("query string: ")
                    .map_or(text.as_str(), |(_, r)| r);
                let (field, what) = rest.split_once(": ").unwrap_or(("", rest));
                Err(Problem::invalid(field, format!("the query string: {what}")))
            }
        }
    }
}

/// `Path<T>` answering a bad path parameter as problem+json.
pub(crate) struct P<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> FromRequestParts<S> for P<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<P<T>, Problem> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(P(v)),
            Err(e) => Err(Problem::invalid(
                "path",
                format!("the path: {}", e.body_text()),
            )),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) gate: Arc<Gate>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) metrics_public: bool,
    pub(crate) openapi: Arc<String>,
    pub(crate) dashboard: Arc<dashboard::Dashboard>,
}

/// Who may call is decided before every handler that names a [`Caller`].
impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, Problem> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
        let tokens = match state.gate.cached() {
            Some(t) => t,
            None => state.gate.remember(state.backend.token_list().await?),
        };
        state.gate.check(peer, &parts.headers, &tokens)
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "takt",
        description = "The HTTP API of a takt host: jobs, runs and their logs, nodes, plugins, \
                       schedules. Errors are RFC 9457 problem documents. Authenticate with \
                       `Authorization: Bearer <token>` (`takt token create`).",
        license(name = "MIT OR Apache-2.0")
    ),
    components(schemas(Problem)),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The router and the OpenAPI document of its routes, in one step.
fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(system::routes())
        .merge(jobs::routes())
        .merge(runs::routes())
        .merge(workflow::routes())
        .split_for_parts()
}

/// The OpenAPI 3.1 document of the API, as served at `/api/v1/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().1
}

/// Every (method, path) the router serves, from the document it was built with.
pub fn served_routes() -> Vec<(Method, String)> {
    let doc = openapi();
    let mut out = Vec::new();
    for (path, item) in &doc.paths.paths {
        for (method, op) in [
            (Method::GET, &item.get),
            (Method::PUT, &item.put),
            (Method::POST, &item.post),
            (Method::DELETE, &item.delete),
            (Method::PATCH, &item.patch),
        ] {
            if op.is_some() {
                out.push((method, path.clone()));
            }
        }
    }
    out
}

/// The application: routes, state, body limit, fallbacks that answer in problem+json.
pub(crate) fn app(state: AppState) -> Router {
    let (router, _) = routes();
    router
        .merge(dashboard::routes())
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(RequestBodyLimitLayer::new(MAX_BODY))
        .with_state(state)
}

async fn no_route(uri: axum::http::Uri) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no-route",
        "no such route",
        format!(
            "{} is not a route of this api; /api/v1/openapi.json lists them",
            uri.path()
        ),
    )
}

async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "method not allowed",
        format!(
            "{method} is not served on {}; /api/v1/openapi.json lists the methods",
            uri.path()
        ),
    )
}

/// A running API server.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    tls: bool,
    handle: axum_server::Handle<SocketAddr>,
    task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl HttpServer {
    /// Binds `config.listen` and serves `backend` on the current tokio runtime, with
    /// `metrics` at `/metrics`. Refuses a non-loopback address while the store holds no
    /// token ([`HttpError::OpenToTheNetwork`]).
    pub async fn start(
        backend: Arc<dyn Backend>,
        config: &HttpConfig,
        metrics: Arc<Metrics>,
    ) -> Result<HttpServer, HttpError> {
        if !config.listen.ip().is_loopback() && backend.token_list().await?.is_empty() {
            return Err(HttpError::OpenToTheNetwork(config.listen));
        }
        if !config.listen.ip().is_loopback() && config.tls.is_none() {
            tracing::warn!(
                "the http api on {} is plain http: tokens cross the network readable; set \
                 [http] tls_cert and tls_key",
                config.listen
            );
        }
        let (_, doc) = routes();
        let openapi = doc
            .to_json()
            .map_err(|e| HttpError::Bind(config.listen, std::io::Error::other(e)))?;
        let state = AppState {
            backend,
            gate: Arc::new(Gate::default()),
            metrics,
            metrics_public: config.metrics_public,
            openapi: Arc::new(openapi),
            dashboard: Arc::new(dashboard::Dashboard::new(config.tls.is_some())),
        };
        let app = app(state).into_make_service_with_connect_info::<SocketAddr>();
        let listener = std::net::TcpListener::bind(config.listen)
            .map_err(|e| HttpError::Bind(config.listen, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HttpError::Bind(config.listen, e))?;
        let handle = axum_server::Handle::new();
        let task = match &config.tls {
            None => {
                let server = axum_server::from_tcp(listener)
                    .map_err(|e| HttpError::Bind(addr, e))?
                    .handle(handle.clone());
                tokio::spawn(async move {
                    if let Err(e) = server.serve(app).await {
                        tracing::error!("the http api stopped: {e}");
                    }
                })
            }
            Some(files) => {
                let tls = tls_config(files)?;
                let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls)
                    .map_err(|e| HttpError::Bind(addr, e))?
                    .handle(handle.clone());
                tokio::spawn(async move {
                    if let Err(e) = server.serve(app).await {
                        tracing::error!("the http api stopped: {e}");
                    }
                })
            }
        };
        Ok(HttpServer {
            addr,
            tls: config.tls.is_some(),
            handle,
            task: tokio::sync::Mutex::new(Some(task)),
        })
    }

    /// The address it listens on (the port chosen when the config said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://addr` or `https://addr`.
    pub fn base_url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.addr
        )
    }

    /// Stops accepting, lets requests in progress finish for up to `grace` (a live log
    /// stream is cut then), and returns when the server has stopped.
    /// Idempotent.
    pub async fn shutdown(&self, grace: Duration) {
        self.handle.graceful_shutdown(Some(grace));
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
    }
}

fn tls_config(files: &TlsFiles) -> Result<axum_server::tls_rustls::RustlsConfig, HttpError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let fail = |reason: String| HttpError::Tls {
        cert: files.cert.display().to_string(),
        key: files.key.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| fail(format!("the certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(fail("the certificate file holds no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| fail(format!("the key file: {e}")))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| fail(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| fail(format!("the key does not fit the certificate: {e}")))?;
    Ok(axum_server::tls_rustls::RustlsConfig::from_config(
        Arc::new(config),
    ))
}
