//! One `http::request` call: the client, the redirects, the bounded body, and what a failure
//! means for the job's retry policy.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, LOCATION};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde_json::Value as Json;
use takt_plugin_api::sdk::{JobContext, JobError};

use crate::body::{self, BodyKind};
use crate::connection::{Connection, HttpOptions, default_tls};
use crate::params::{self, Body, DEFAULT_TIMEOUT, HttpParams, Plan, Target};
use crate::redact;

/// Opening a connection (TCP and TLS) gives up after this long, or the request's own limit if
/// that is shorter; a connect that fails this way sent nothing, so it is always retryable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long after the job's deadline the request stops by itself if the host has not stopped
/// it (the host's cancel is what normally ends it, and records the run as timed out).
const DEADLINE_BACKSTOP: Duration = Duration::from_millis(500);
/// How often the host's cancel flag is read while a request is in flight (it has no waker).
const CANCEL_POLL: Duration = Duration::from_millis(20);
/// The most characters of a failed answer's body quoted in the run's error.
const ERROR_BODY_CHARS: usize = 500;
/// The most response headers kept in the result, and the longest value.
const MAX_HEADERS: usize = 100;
const MAX_HEADER_VALUE: usize = 2048;
/// Sent unless the job sets its own `User-Agent`.
const USER_AGENT: &str = concat!("takt/", env!("CARGO_PKG_VERSION"));

/// The result of a request, stored as the run's result (and, for a status that is not a
/// success, as the error's data).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpResult {
    /// The method of the last request (a 303 redirect turns a `POST` into a `GET`).
    pub method: String,
    /// The URL that answered, as shown: no user info, secret-looking query values masked.
    pub url: String,
    /// The connection name, when the job named one.
    pub connection: Option<String>,
    /// The final status.
    pub status: u16,
    /// Its reason phrase (`Not Found`), when the status is a known one.
    pub reason: Option<String>,
    /// Whether the status is in `successStatuses`.
    pub success: bool,
    /// The response headers (lowercase names; values of secret-looking ones masked; repeated
    /// ones joined with `, `).
    pub headers: BTreeMap<String, String>,
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// The `Content-Length` header: the body's full size, when the server said it.
    pub content_length: Option<u64>,
    /// What `body` is: `json`, `text`, `binary` (not kept) or `empty`.
    pub body_kind: BodyKind,
    /// The body: JSON when it is JSON, else text, else `null`.
    pub body: Json,
    /// Bytes of the body kept (at most `responseLimit`).
    pub body_bytes: usize,
    /// Whether the body was longer than `responseLimit` (the rest was not downloaded).
    pub truncated: bool,
    /// Why the body is not what its content type promised, if so.
    pub body_note: Option<String>,
    /// The URLs redirected to, in order, as shown.
    pub redirects: Vec<String>,
    /// From the first byte sent to the last one kept.
    pub elapsed_ms: u64,
}

/// How far a request got, for deciding whether a failure may be retried: once the request may
/// have reached the server, a retry is only safe for an idempotent request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Connecting or sending, no answer yet.
    Sending,
    /// The status arrived; reading the body.
    Reading(StatusCode),
}

/// Runs one `http::request` call (what the handler does).
pub(crate) fn run(
    ctx: &JobContext,
    params: HttpParams,
    options: &HttpOptions,
) -> Result<HttpResult, JobError> {
    let plan = params::validate(params)
        .map_err(|e| JobError::invalid_params(format!("invalid params: {e}")))?;
    let (mut url, connection) = match &plan.target {
        Target::Url(url) => (url.clone(), None),
        Target::Connection { name, path } => {
            let c = options.get(name)?;
            (c.join(path), Some((name.clone(), Arc::clone(c))))
        }
    };
    if !plan.query.is_empty() {
        url.query_pairs_mut()
            .extend_pairs(plan.query.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    if let Some((name, c)) = &connection
        && let Some((header, _)) = plan
            .headers
            .iter()
            .find(|(h, _)| c.headers.iter().any(|(ch, _)| ch == h))
    {
        return Err(JobError::invalid_params(format!(
            "invalid params: headers: {header} is set by connection {name} ({}); remove it from \
             the job's headers, or from the connection",
            c.source
        )));
    }
    let tls = match &connection {
        Some((_, c)) => c.tls(),
        None => default_tls(),
    }
    .map_err(JobError::failed)?;
    // The job's deadline normally ends the request through the host's cancel; the request's
    // own limit is `timeoutMs`, else that deadline (plus a backstop), else the default.
    let remaining = ctx.deadline().map(|d| {
        d.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    });
    let (limit, limit_shown) = match (plan.timeout, remaining) {
        (Some(t), Some(r)) if r + DEADLINE_BACKSTOP < t => (r + DEADLINE_BACKSTOP, None),
        (Some(t), _) => (t, Some(format!("timeoutMs {}", t.as_millis()))),
        (None, Some(r)) => (r + DEADLINE_BACKSTOP, None),
        (None, None) => (
            DEFAULT_TIMEOUT,
            Some(format!(
                "the default request timeout of {} s (set timeoutMs, or a timeout on the job)",
                DEFAULT_TIMEOUT.as_secs()
            )),
        ),
    };
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(limit.min(CONNECT_TIMEOUT))
        .user_agent(USER_AGENT)
        .tls_backend_preconfigured((*tls).clone())
        .build()
        .map_err(|e| JobError::failed(format!("cannot set up the http client: {}", chain(&e))))?;
    let via = connection
        .as_ref()
        .map_or_else(String::new, |(name, _)| format!(" (connection {name})"));
    ctx.info(&format!("{} {}{via}", plan.method, redact::url(&url)));

    // One runtime per call, on the plugin's call thread, as sql::proc does: the handler must
    // not depend on the host's runtime, and dropping the exchange (cancel, timeout) closes its
    // socket at once.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| {
            JobError::retryable(format!("cannot start the http executor's runtime: {e}"))
        })?;
    let phase = Cell::new(Phase::Sending);
    let begun = Instant::now();
    let exchange = Exchange {
        ctx,
        client: &client,
        plan: &plan,
        connection: connection.as_ref(),
        phase: &phase,
    };
    // hyper's own `tracing` events ("connecting to …") would land in the run log through the
    // SDK's dispatcher; what matters is logged by the exchange itself.
    let quiet = tracing::subscriber::NoSubscriber::default();
    let outcome = tracing::subscriber::with_default(quiet, || {
        rt.block_on(async {
            tokio::select! {
                biased;
                () = until_cancelled(ctx) => Stopped::Cancelled,
                r = tokio::time::timeout(limit, exchange.run(url)) => match r {
                    Ok(r) => Stopped::Done(Box::new(r)),
                    Err(_) => Stopped::TimedOut,
                },
            }
        })
    });
    // Dropping a runtime waits for its blocking threads without a bound (a DNS lookup stuck in
    // `getaddrinfo`): leave them behind instead of holding the handler past the host's grace.
    rt.shutdown_background();
    let elapsed = begun.elapsed();
    let what = format!(
        "{} {}",
        plan.method,
        exchange_target(&plan, connection.as_ref())
    );
    match outcome {
        Stopped::Cancelled => Err(JobError::cancelled()),
        Stopped::TimedOut => {
            let limit_text = limit_shown.unwrap_or_else(|| "the job's timeout".to_string());
            let (message, retryable) = match phase.get() {
                Phase::Sending => (
                    format!(
                        "{what}: no answer within {limit_text}{}",
                        may_retry_note(plan.idempotent, "the server may have received it")
                    ),
                    plan.idempotent,
                ),
                Phase::Reading(status) => (
                    format!(
                        "{what}: answered {status} but the body did not arrive within \
                         {limit_text}{}",
                        may_retry_note(plan.idempotent, "the server has processed it")
                    ),
                    plan.idempotent,
                ),
            };
            Err(if retryable {
                JobError::retryable(message)
            } else {
                JobError::failed(message)
            })
        }
        Stopped::Done(done) => match *done {
            Err(failure) => Err(failure.into_job_error(&what, plan.idempotent)),
            Ok(mut result) => {
                result.elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
                result.connection = connection.map(|(name, _)| name);
                judge(ctx, &plan, result)
            }
        },
    }
}

/// How a call ended (boxed: one per call, and the result is large).
enum Stopped {
    Done(Box<Result<HttpResult, Failure>>),
    Cancelled,
    TimedOut,
}

/// "GET https://h/x (connection mes)", for messages.
fn exchange_target(plan: &Plan, connection: Option<&(String, Arc<Connection>)>) -> String {
    match (&plan.target, connection) {
        (Target::Url(u), _) => redact::url(u),
        (Target::Connection { path, .. }, Some((name, c))) => {
            format!("{} (connection {name})", redact::url(&c.join(path)))
        }
        (Target::Connection { name, path }, None) => format!("{path} (connection {name})"),
    }
}

fn may_retry_note(idempotent: bool, what: &str) -> String {
    if idempotent {
        String::new()
    } else {
        format!(
            "; {what}, and the request is not idempotent, so it is not retried automatically \
             (set \"idempotent\": true if running it twice is safe)"
        )
    }
}

/// Resolves when the host asks the run to stop (timeout, cancel, shutdown).
async fn until_cancelled(ctx: &JobContext) {
    while !ctx.is_cancelled() {
        tokio::time::sleep(CANCEL_POLL).await;
    }
}

/// The request and its redirects.
struct Exchange<'a> {
    ctx: &'a JobContext,
    client: &'a reqwest::Client,
    plan: &'a Plan,
    connection: Option<&'a (String, Arc<Connection>)>,
    phase: &'a Cell<Phase>,
}

impl Exchange<'_> {
    async fn run(&self, first: Url) -> Result<HttpResult, Failure> {
        let plan = self.plan;
        let mut url = first;
        let mut method = plan.method.clone();
        let mut body = plan.body.clone();
        let mut redirects = Vec::new();
        let mut left_origin = false;
        loop {
            self.phase.set(Phase::Sending);
            let request = self.build(&method, &url, &body)?;
            let response = self
                .client
                .execute(request)
                .await
                .map_err(Failure::Transport)?;
            let status = response.status();
            let follow =
                plan.max_redirects > 0 && matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
            if !follow {
                self.phase.set(Phase::Reading(status));
                return self.read(response, method, url, redirects).await;
            }
            if redirects.len() as u32 >= plan.max_redirects {
                return Err(Failure::Permanent(format!(
                    "more than maxRedirects ({}) redirects; the last one, {status}, pointed to {}",
                    plan.max_redirects,
                    location_shown(&response)
                )));
            }
            let next = next_url(&url, &response)?;
            // 303 always, and 301/302 after a POST (as browsers and curl do), continue as a
            // GET without the body; 307 and 308 repeat the request as it was.
            if status == StatusCode::SEE_OTHER && method != Method::HEAD
                || matches!(status.as_u16(), 301 | 302) && method == Method::POST
            {
                method = Method::GET;
                body = Body::None;
            }
            let shown = redact::url(&next);
            if let Some((name, c)) = self.connection
                && !c.headers.is_empty()
                && !left_origin
                && !c.same_origin(&next)
            {
                left_origin = true;
                self.ctx.warn(&format!(
                    "{status}: redirected to {shown}, another origin than connection {name}'s: \
                     its headers are not sent there"
                ));
            } else {
                self.ctx.info(&format!("{status}: redirected to {shown}"));
            }
            redirects.push(shown);
            url = next;
        }
    }

    fn build(&self, method: &Method, url: &Url, body: &Body) -> Result<reqwest::Request, Failure> {
        let mut headers = HeaderMap::new();
        if let Some((_, c)) = self.connection
            && c.same_origin(url)
        {
            for (name, value) in &c.headers {
                headers.append(name.clone(), value.clone());
            }
        }
        for (name, value) in &self.plan.headers {
            headers.append(name.clone(), value.clone());
        }
        let mut builder = self.client.request(method.clone(), url.clone());
        match body {
            Body::None => {}
            Body::Json(bytes) => {
                if !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                }
                builder = builder.body(bytes.clone());
            }
            Body::Text(text) => {
                if !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(
                        CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; charset=utf-8"),
                    );
                }
                builder = builder.body(text.clone());
            }
        }
        builder
            .headers(headers)
            .build()
            .map_err(|e| Failure::Permanent(format!("cannot build the request: {}", chain(&e))))
    }

    async fn read(
        &self,
        mut response: reqwest::Response,
        method: Method,
        url: Url,
        redirects: Vec<String>,
    ) -> Result<HttpResult, Failure> {
        let status = response.status();
        let headers = shown_headers(response.headers());
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let content_length = response.content_length();
        let limit = self.plan.response_limit;
        let mut kept: Vec<u8> = Vec::new();
        let mut truncated = false;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = limit - kept.len();
                    if chunk.len() > room {
                        kept.extend_from_slice(&chunk[..room]);
                        truncated = true;
                        break;
                    }
                    kept.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(Failure::BodyCut(status, e)),
            }
        }
        drop(response);
        let decoded = body::decode(&kept, content_type.as_deref(), truncated);
        Ok(HttpResult {
            method: method.to_string(),
            url: redact::url(&url),
            connection: None,
            status: status.as_u16(),
            reason: status.canonical_reason().map(str::to_string),
            success: self.plan.success.contains(status.as_u16()),
            headers,
            content_type,
            content_length,
            body_kind: decoded.kind,
            body: decoded.value,
            body_bytes: kept.len(),
            truncated,
            body_note: decoded.note,
            redirects,
            elapsed_ms: 0,
        })
    }
}

fn location_shown(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| "nowhere (no Location header)".into(), redact::url_text)
}

/// The target of a redirect: its `Location`, relative to `url`, http(s) only.
fn next_url(url: &Url, response: &reqwest::Response) -> Result<Url, Failure> {
    let status = response.status();
    let location = response
        .headers()
        .get(LOCATION)
        .ok_or_else(|| Failure::Permanent(format!("{status} redirect without a Location header")))?
        .to_str()
        .map_err(|_| {
            Failure::Permanent(format!("{status} redirect to a Location that is not text"))
        })?;
    let next = url.join(location).map_err(|e| {
        Failure::Permanent(format!(
            "{status} redirect to \"{}\", which is not a URL ({e})",
            redact::url_text(location)
        ))
    })?;
    if next.scheme() != "http" && next.scheme() != "https" {
        return Err(Failure::Permanent(format!(
            "{status} redirect to a {}: URL; only http and https are followed",
            next.scheme()
        )));
    }
    Ok(next)
}

fn shown_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        if out.len() >= MAX_HEADERS && !out.contains_key(name.as_str()) {
            continue;
        }
        let text = if redact::is_secret_name(name.as_str()) {
            redact::MASK.to_string()
        } else {
            let v = String::from_utf8_lossy(value.as_bytes());
            v.chars().take(MAX_HEADER_VALUE).collect()
        };
        out.entry(name.as_str().to_string())
            .and_modify(|v| {
                if v != redact::MASK {
                    v.push_str(", ");
                    v.push_str(&text);
                }
            })
            .or_insert(text);
    }
    out
}

/// Judges the final status: success, a retryable failure or a permanent one; logs the end.
fn judge(ctx: &JobContext, plan: &Plan, result: HttpResult) -> Result<HttpResult, JobError> {
    let status = format!(
        "{}{}",
        result.status,
        result
            .reason
            .as_deref()
            .map_or_else(String::new, |r| format!(" {r}"))
    );
    let size = match result.body_kind {
        BodyKind::Empty => "no body".to_string(),
        _ => format!(
            "{} bytes{}{}",
            result.body_bytes,
            if result.truncated {
                " kept (cut at responseLimit)"
            } else {
                ""
            },
            result
                .content_type
                .as_deref()
                .map_or_else(String::new, |t| format!(" of {t}"))
        ),
    };
    let line = format!("{status} in {} ms, {size}", result.elapsed_ms);
    if let Some(note) = &result.body_note {
        ctx.warn(&format!("body: {note}"));
    }
    if result.success {
        ctx.info(&line);
        return Ok(result);
    }
    ctx.warn(&line);
    let retryable = plan.retry.contains(result.status);
    let excerpt = excerpt(&result.body);
    let message = format!(
        "{} {} answered {status}, which is not in successStatuses ({}); {}{}",
        result.method,
        result.url,
        plan.success,
        if retryable {
            format!(
                "retryable (retryStatuses: {}), so the job's retry policy applies",
                plan.retry
            )
        } else {
            format!("not retried (retryStatuses: {})", plan.retry)
        },
        if excerpt.is_empty() {
            String::new()
        } else {
            format!("; body: {excerpt}")
        }
    );
    let data = serde_json::to_value(&result).unwrap_or(Json::Null);
    let e = if retryable {
        JobError::retryable(message)
    } else {
        JobError::failed(message)
    };
    Err(e.with_data(data))
}

fn excerpt(body: &Json) -> String {
    let text = match body {
        Json::Null => return String::new(),
        Json::String(s) => s.clone(),
        other => other.to_string(),
    };
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() > ERROR_BODY_CHARS {
        let cut: String = flat.chars().take(ERROR_BODY_CHARS).collect();
        format!("{cut}…")
    } else {
        flat.to_string()
    }
}

/// Why an exchange failed before a final status was judged.
enum Failure {
    /// The client failed: connect, TLS, send, or receiving the status.
    Transport(reqwest::Error),
    /// The body broke off after the status arrived.
    BodyCut(StatusCode, reqwest::Error),
    /// Nothing another attempt would change (a bad redirect).
    Permanent(String),
}

impl Failure {
    fn into_job_error(self, what: &str, idempotent: bool) -> JobError {
        match self {
            Failure::Permanent(m) => JobError::failed(format!("{what}: {m}")),
            Failure::Transport(e) => {
                let detail = chain(&e);
                if let Some(tls) = tls_problem(&e) {
                    return JobError::failed(format!(
                        "{what}: the TLS handshake failed: {tls}; if the server's certificate \
                         comes from an internal CA, add that CA to the system's trust store or \
                         to the connection's ca_file"
                    ));
                }
                if e.is_connect() {
                    JobError::retryable(format!(
                        "{what}: cannot connect: {detail}; nothing was sent"
                    ))
                } else {
                    let message = format!(
                        "{what}: the connection failed after the request was sent: {detail}{}",
                        may_retry_note(idempotent, "the server may have received it")
                    );
                    if idempotent {
                        JobError::retryable(message)
                    } else {
                        JobError::failed(message)
                    }
                }
            }
            Failure::BodyCut(status, e) => {
                let message = format!(
                    "{what}: answered {status} but the body broke off: {}{}",
                    chain(&e),
                    may_retry_note(idempotent, "the server has processed it")
                );
                if idempotent {
                    JobError::retryable(message)
                } else {
                    JobError::failed(message)
                }
            }
        }
    }
}

/// The error and its causes in one line, without the URL (which may carry a secret query).
fn chain(e: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    // The innermost cause says what happened ("connection refused"); hyper's outer ones
    // ("client error (Connect)") only that it was hyper.
    parts.pop().unwrap_or_else(|| e.to_string())
}

/// The rustls error inside `e`, if the TLS handshake failed on a certificate or protocol
/// problem (never worth a retry: the server's configuration or ours must change).
fn tls_problem(e: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<rustls::Error>() {
            return Some(r.to_string());
        }
        // The TLS stream reports it as an io::Error wrapping an io::Error wrapping it, and
        // io::Error's `source` skips the wrapped error itself: unwrap by hand.
        let mut io = s.downcast_ref::<std::io::Error>();
        while let Some(inner) = io.and_then(std::io::Error::get_ref) {
            if let Some(r) = inner.downcast_ref::<rustls::Error>() {
                return Some(r.to_string());
            }
            io = inner.downcast_ref::<std::io::Error>();
        }
        source = s.source();
    }
    None
}
