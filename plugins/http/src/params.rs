//! The job params of `http::request` and their validation: everything a job supplies is
//! checked here, before any connection is opened, so a bad job fails with a message that names
//! the key and says what to write instead, and without touching the network.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde::Deserialize;
use serde_json::Value as Json;

use crate::status::StatusSet;

/// Bytes of the response body kept in the result unless the job says otherwise.
pub const DEFAULT_RESPONSE_LIMIT: usize = 64 << 10;
/// The most bytes a job may ask to keep: the result goes into the run record.
pub const MAX_RESPONSE_LIMIT: usize = 16 << 20;
/// The request's own time limit when neither the job nor its params set one: 100 s, the
/// default of .NET's `HttpClient`, which the seeds' WebAPI callers used.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(100);
/// The longest `timeoutMs` accepted (a day).
pub(crate) const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Redirects followed unless the job says otherwise.
pub const DEFAULT_MAX_REDIRECTS: u32 = 5;
/// The most redirects a job may allow.
pub const MAX_REDIRECTS: u32 = 20;

/// The methods a job may use. `CONNECT` and `TRACE` are not requests a job makes.
pub const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Headers the client itself writes: a job setting them would contradict the request.
const MANAGED_HEADERS: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
];

/// Credentials: refused in job params (they would be stored with the job and shown with it);
/// they belong in a named connection's headers.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

/// `http::request` params as the job writes them (camelCase; unknown keys are refused with
/// the list of accepted ones).
///
/// ```json
/// { "method": "POST", "connection": "mes", "path": "shifts/close",
///   "query": { "line": 3 }, "json": { "shift": "A" },
///   "timeoutMs": 30000, "successStatuses": ["2xx"], "retryStatuses": [429, "5xx"] }
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpParams {
    /// `GET` (default), `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE` or `OPTIONS`, any case.
    #[serde(default)]
    pub method: Option<String>,
    /// A full `http://` or `https://` address. Either this or `connection`.
    #[serde(default)]
    pub url: Option<String>,
    /// A connection *name* from the host's `[http_client.connections]`: its base URL and
    /// headers (tokens) are the host's, never the job's. Either this or `url`.
    #[serde(default)]
    pub connection: Option<String>,
    /// With `connection`: appended to its base URL after a `/` (a leading `/` is the same
    /// thing); may carry a `?query`. `..` segments are refused.
    #[serde(default)]
    pub path: Option<String>,
    /// Query parameters added to the URL (percent-encoded here): strings, numbers, booleans,
    /// or arrays of them for a repeated key.
    #[serde(default)]
    pub query: BTreeMap<String, Json>,
    /// Request headers. `Authorization`, `Proxy-Authorization` and `Cookie` are refused (put
    /// them in a connection), and so are the ones the client writes (`Host`,
    /// `Content-Length`, …).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A JSON body, sent as `application/json` unless `headers` says otherwise.
    #[serde(default)]
    pub json: Option<Json>,
    /// A text body, sent as UTF-8 `text/plain` unless `headers` says otherwise.
    #[serde(default)]
    pub body: Option<String>,
    /// The request's own limit, connect to last body byte, in ms (default: the job's timeout,
    /// else 100 000). The job's timeout stops the request too.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Statuses that mean success (default `["2xx"]`): codes, `"4xx"`-style classes or
    /// `"200-299"`-style ranges.
    #[serde(default)]
    pub success_statuses: Option<Vec<Json>>,
    /// Statuses that fail the run as retryable, so the job's retry policy applies (default
    /// `[408, 429, "5xx"]`); any other status outside `successStatuses` fails it for good.
    #[serde(default)]
    pub retry_statuses: Option<Vec<Json>>,
    /// Bytes of the response body kept in the result (default 64 KiB, at most 16 MiB); the
    /// rest is not downloaded.
    #[serde(default)]
    pub response_limit: Option<usize>,
    /// Redirects followed (default 5, at most 20; 0 makes a 3xx the final answer).
    #[serde(default)]
    pub max_redirects: Option<u32>,
    /// Whether a retry is safe when the request may have reached the server but no answer
    /// came (a timeout or a broken connection after sending). Default: `true` for `GET`,
    /// `HEAD`, `PUT`, `DELETE` and `OPTIONS`, `false` for `POST` and `PATCH`.
    #[serde(default)]
    pub idempotent: Option<bool>,
}

/// Where the request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A full URL given by the job.
    Url(Url),
    /// A named connection and the path (with its own query, if any) below its base URL.
    Connection {
        /// The connection's name as the job wrote it.
        name: String,
        /// The path below the base URL, without a leading `/`.
        path: String,
    },
}

/// The body to send.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Body {
    /// None.
    None,
    /// JSON, serialised once here.
    Json(Vec<u8>),
    /// Text, as UTF-8.
    Text(String),
}

/// A validated request.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The method.
    pub(crate) method: Method,
    /// Where to.
    pub(crate) target: Target,
    /// Query parameters in order, each `(name, value)` already rendered as text.
    pub(crate) query: Vec<(String, String)>,
    /// The job's headers (checked).
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// The body.
    pub(crate) body: Body,
    /// `timeoutMs`, if given.
    pub(crate) timeout: Option<Duration>,
    /// What success means.
    pub(crate) success: StatusSet,
    /// Which failures are retryable.
    pub(crate) retry: StatusSet,
    /// Body bytes kept.
    pub(crate) response_limit: usize,
    /// Redirects followed.
    pub(crate) max_redirects: u32,
    /// Whether a retry is safe after the request may have been received.
    pub(crate) idempotent: bool,
}

/// Validates `p` into a plan; the error names the key and what to write instead.
pub(crate) fn validate(p: HttpParams) -> Result<Plan, String> {
    let method = parse_method(p.method.as_deref().unwrap_or("GET"))?;
    let target = match (&p.url, &p.connection) {
        (Some(_), Some(_)) => {
            return Err("url and connection: give one — url for a full address, or \
                 connection (with path) for one configured in [http_client.connections]"
                .into());
        }
        (None, None) => {
            return Err(
                "url or connection is required: a full http(s):// address in url, or \
                 the name of a connection from [http_client.connections] in connection"
                    .into(),
            );
        }
        (Some(url), None) => {
            if p.path.is_some() {
                return Err(
                    "path: only goes with connection; with url, write the whole \
                     address in url"
                        .into(),
                );
            }
            Target::Url(parse_job_url(url)?)
        }
        (None, Some(name)) => Target::Connection {
            name: connection_name(name)?,
            path: parse_path(p.path.as_deref().unwrap_or(""))?,
        },
    };
    let mut query = Vec::new();
    for (name, value) in &p.query {
        if name.is_empty() {
            return Err("query: a parameter has an empty name".into());
        }
        let mut push = |v: &Json| -> Result<(), String> {
            let text = match v {
                Json::String(s) => s.clone(),
                Json::Number(n) => n.to_string(),
                Json::Bool(b) => b.to_string(),
                other => {
                    return Err(format!(
                        "query.{name}: {} is not a string, number or boolean (an array of them \
                         repeats the key)",
                        kind_of(other)
                    ));
                }
            };
            query.push((name.clone(), text));
            Ok(())
        };
        match value {
            Json::Array(items) => items.iter().try_for_each(&mut push)?,
            v => push(v)?,
        }
    }
    let mut headers = Vec::with_capacity(p.headers.len());
    for (name, value) in &p.headers {
        let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            format!(
                "headers: \"{}\" is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)",
                name.escape_debug()
            )
        })?;
        let lower = header.as_str();
        if CREDENTIAL_HEADERS.contains(&lower) {
            return Err(format!(
                "headers: {name} carries credentials, which never go in job params (they would be \
                 stored with the job); put it in the headers of a connection in \
                 [http_client.connections] (its value can come from TAKT_HTTP_CONNECTION_<NAME>) \
                 and name that connection"
            ));
        }
        if MANAGED_HEADERS.contains(&lower) {
            return Err(format!(
                "headers: {name} is written by the client itself; remove it"
            ));
        }
        let value = HeaderValue::from_str(value).map_err(|_| {
            format!("headers.{name}: the value has a line break or another control character")
        })?;
        headers.push((header, value));
    }
    let body = match (p.json, p.body) {
        (Some(_), Some(_)) => {
            return Err(
                "json and body: give one — json (sent as application/json) or body \
                 (text)"
                    .into(),
            );
        }
        (Some(j), None) => Body::Json(serde_json::to_vec(&j).map_err(|e| format!("json: {e}"))?),
        (None, Some(t)) => Body::Text(t),
        (None, None) => Body::None,
    };
    if body != Body::None && (method == Method::GET || method == Method::HEAD) {
        return Err(format!(
            "{}: a {method} request carries no body; set method to POST, PUT or PATCH",
            if matches!(body, Body::Json(_)) {
                "json"
            } else {
                "body"
            }
        ));
    }
    let timeout = match p.timeout_ms {
        None => None,
        Some(0) => return Err("timeoutMs: 0 would fail every request; give e.g. 30000".into()),
        Some(ms) if ms > MAX_TIMEOUT_MS => {
            return Err(format!(
                "timeoutMs: {ms} is more than a day ({MAX_TIMEOUT_MS}); use the job's timeout \
                 for longer runs"
            ));
        }
        Some(ms) => Some(Duration::from_millis(ms)),
    };
    let success = match &p.success_statuses {
        None => StatusSet::default_success(),
        Some(specs) => StatusSet::parse(specs).map_err(|e| format!("successStatuses: {e}"))?,
    };
    if success.is_empty() {
        return Err(
            "successStatuses: is empty, so no request could succeed; write e.g. \
             [\"2xx\"]"
                .into(),
        );
    }
    let retry = match &p.retry_statuses {
        None => StatusSet::default_retry().without(&success),
        Some(specs) => {
            let retry = StatusSet::parse(specs).map_err(|e| format!("retryStatuses: {e}"))?;
            if let Some(code) = retry.first_shared_with(&success) {
                return Err(format!(
                    "retryStatuses: {code} is also in successStatuses; a status is either a \
                     success or a failure"
                ));
            }
            retry
        }
    };
    let response_limit = match p.response_limit {
        None => DEFAULT_RESPONSE_LIMIT,
        Some(n) if n <= MAX_RESPONSE_LIMIT => n,
        Some(n) => {
            return Err(format!(
                "responseLimit: {n} is more than the {MAX_RESPONSE_LIMIT} bytes allowed; the \
                 body goes into the run record"
            ));
        }
    };
    let max_redirects = match p.max_redirects {
        None => DEFAULT_MAX_REDIRECTS,
        Some(n) if n <= MAX_REDIRECTS => n,
        Some(n) => return Err(format!("maxRedirects: {n} is more than {MAX_REDIRECTS}")),
    };
    let idempotent = p
        .idempotent
        .unwrap_or(!matches!(method, Method::POST | Method::PATCH));
    Ok(Plan {
        method,
        target,
        query,
        headers,
        body,
        timeout,
        success,
        retry,
        response_limit,
        max_redirects,
        idempotent,
    })
}

fn parse_method(raw: &str) -> Result<Method, String> {
    let upper = raw.trim().to_ascii_uppercase();
    if METHODS.contains(&upper.as_str()) {
        Method::from_bytes(upper.as_bytes()).map_err(|e| format!("method: {e}"))
    } else {
        Err(format!(
            "method: \"{}\" is not supported; use one of {}",
            raw.escape_debug(),
            METHODS.join(", ")
        ))
    }
}

/// A URL given by a job: absolute http(s), with a host, and without credentials.
fn parse_job_url(raw: &str) -> Result<Url, String> {
    let url = parse_http_url(raw).map_err(|e| format!("url: {e}"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "url: carries a user name or password (user:password@…), which never go in \
             job params; configure a connection in [http_client.connections] with an \
             Authorization header and name it in connection"
                .into(),
        );
    }
    Ok(url)
}

/// An absolute `http://` or `https://` URL with a host; the error is shown after the key
/// (and, for a job's URL, never repeats a password it carried).
pub(crate) fn parse_http_url(raw: &str) -> Result<Url, String> {
    let shown = crate::redact::url_text(raw);
    let url = Url::parse(raw.trim()).map_err(|e| {
        format!("\"{shown}\" is not a URL ({e}); write a full address such as https://mes.local/api/orders")
    })?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(format!(
            "\"{shown}\" is a {}: URL; only http:// and https:// are supported",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("\"{shown}\" has no host"));
    }
    Ok(url)
}

fn connection_name(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(
            "connection: is empty; name a connection from [http_client.connections]".into(),
        );
    }
    if name.contains("://") || name.contains('/') {
        return Err(format!(
            "connection: \"{}\" looks like an address; name a connection from \
             [http_client.connections], or give the address in url instead",
            crate::redact::url_text(name)
        ));
    }
    Ok(name.to_string())
}

/// The path below a connection's base URL: leading `/`s dropped, no `..` segment, no
/// fragment, no scheme.
fn parse_path(raw: &str) -> Result<String, String> {
    let path = raw.trim().trim_start_matches('/');
    let before_query = path.split('?').next().unwrap_or("");
    if path.contains("://") {
        return Err(format!(
            "path: \"{}\" is an address; path is the part below the connection's base URL \
             (e.g. orders/42)",
            crate::redact::url_text(raw)
        ));
    }
    if path.contains('#') {
        return Err("path: has a #fragment, which is never sent to a server; remove it".into());
    }
    if before_query
        .split('/')
        .any(|s| s == ".." || s.eq_ignore_ascii_case("%2e%2e"))
    {
        return Err(format!(
            "path: \"{}\" leaves the connection's base URL with a .. segment; write the path \
             below it",
            raw.escape_debug()
        ));
    }
    if path.chars().any(char::is_control) {
        return Err("path: has a control character".into());
    }
    Ok(path.to_string())
}

fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(v: Json) -> Result<Plan, String> {
        let p: HttpParams = serde_json::from_value(v).map_err(|e| e.to_string())?;
        validate(p)
    }

    fn refused(v: Json) -> String {
        plan(v).expect_err("refused")
    }

    #[test]
    fn defaults() {
        let p = plan(json!({"url": "http://127.0.0.1:8080/x"})).unwrap();
        assert_eq!(p.method, Method::GET);
        assert_eq!(p.response_limit, DEFAULT_RESPONSE_LIMIT);
        assert_eq!(p.max_redirects, DEFAULT_MAX_REDIRECTS);
        assert!(p.idempotent);
        assert!(p.success.contains(204) && !p.success.contains(301));
        assert!(p.retry.contains(503) && p.retry.contains(429) && p.retry.contains(408));
        assert!(!p.retry.contains(404));
        let p = plan(
            json!({"connection": "mes", "path": "/a/b?x=1", "method": "post",
                            "json": {"k": 1}}),
        )
        .unwrap();
        assert_eq!(p.method, Method::POST);
        assert!(!p.idempotent, "POST is not idempotent by default");
        assert_eq!(
            p.target,
            Target::Connection {
                name: "mes".into(),
                path: "a/b?x=1".into()
            }
        );
        assert_eq!(p.body, Body::Json(br#"{"k":1}"#.to_vec()));
        let p = plan(
            json!({"url": "https://h/x", "successStatuses": [200, "3xx"],
                            "query": {"a": [1, "b"], "c": true}}),
        )
        .unwrap();
        assert!(p.success.contains(302));
        assert!(!p.retry.contains(302));
        assert_eq!(
            p.query,
            [("a", "1"), ("a", "b"), ("c", "true")].map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_the_accepted_ones() {
        let e = refused(json!({"url": "http://h/", "timeout": 5}));
        assert!(e.contains("unknown field `timeout`"), "{e}");
        assert!(
            e.contains("`timeoutMs`"),
            "the accepted keys are listed: {e}"
        );
    }

    #[test]
    fn bad_input_names_the_key() {
        let cases: Vec<(Json, &str)> = vec![
            (json!({}), "url or connection is required"),
            (
                json!({"url": "http://h/", "connection": "mes"}),
                "url and connection: give one",
            ),
            (
                json!({"url": "http://h/", "path": "x"}),
                "path: only goes with connection",
            ),
            (json!({"url": "h/x"}), "url: \"h/x\" is not a URL"),
            (json!({"url": "ftp://h/x"}), "only http:// and https://"),
            (
                json!({"url": "https://u:secret@h/x"}),
                "url: carries a user name or password",
            ),
            (
                json!({"connection": "https://h/api"}),
                "connection: \"https://h/api\" looks like an address",
            ),
            (json!({"connection": " "}), "connection: is empty"),
            (
                json!({"connection": "mes", "path": "../admin"}),
                "leaves the connection's base URL",
            ),
            (
                json!({"connection": "mes", "path": "a/%2E%2E/b"}),
                "leaves the connection's base URL",
            ),
            (
                json!({"connection": "mes", "path": "http://other/x"}),
                "path: \"http://other/x\" is an address",
            ),
            (json!({"connection": "mes", "path": "a#b"}), "#fragment"),
            (
                json!({"url": "http://h/", "method": "BREW"}),
                "method: \"BREW\" is not supported; use one of GET",
            ),
            (
                json!({"url": "http://h/", "method": "TRACE"}),
                "method: \"TRACE\" is not supported",
            ),
            (
                json!({"url": "http://h/", "method": "POST", "json": {}, "body": "x"}),
                "json and body: give one",
            ),
            (
                json!({"url": "http://h/", "json": {"a": 1}}),
                "json: a GET request carries no body",
            ),
            (
                json!({"url": "http://h/", "method": "HEAD", "body": "x"}),
                "body: a HEAD request carries no body",
            ),
            (
                json!({"url": "http://h/", "headers": {"Authorization": "Bearer x"}}),
                "headers: Authorization carries credentials",
            ),
            (
                json!({"url": "http://h/", "headers": {"cookie": "a=b"}}),
                "headers: cookie carries credentials",
            ),
            (
                json!({"url": "http://h/", "headers": {"Content-Length": "3"}}),
                "headers: Content-Length is written by the client",
            ),
            (
                json!({"url": "http://h/", "headers": {"bad name": "x"}}),
                "headers: \"bad name\" is not a header name",
            ),
            (
                json!({"url": "http://h/", "headers": {"X-A": "a\nb"}}),
                "headers.X-A: the value has a line break",
            ),
            (
                json!({"url": "http://h/", "query": {"a": {"b": 1}}}),
                "query.a: an object is not a string",
            ),
            (
                json!({"url": "http://h/", "query": {"a": null}}),
                "query.a: null is not",
            ),
            (json!({"url": "http://h/", "timeoutMs": 0}), "timeoutMs: 0"),
            (
                json!({"url": "http://h/", "timeoutMs": 86_400_001u64}),
                "timeoutMs: 86400001 is more than a day",
            ),
            (
                json!({"url": "http://h/", "responseLimit": 16_777_217}),
                "responseLimit: 16777217 is more than",
            ),
            (
                json!({"url": "http://h/", "maxRedirects": 21}),
                "maxRedirects: 21 is more than 20",
            ),
            (
                json!({"url": "http://h/", "successStatuses": []}),
                "successStatuses: is empty",
            ),
            (
                json!({"url": "http://h/", "successStatuses": ["2yy"]}),
                "successStatuses: \"2yy\" is not a status",
            ),
            (
                json!({"url": "http://h/", "successStatuses": [99]}),
                "successStatuses: 99 is not a status",
            ),
            (
                json!({"url": "http://h/", "retryStatuses": ["300-200"]}),
                "retryStatuses: \"300-200\"",
            ),
            (
                json!({"url": "http://h/", "retryStatuses": [200]}),
                "retryStatuses: 200 is also in successStatuses",
            ),
        ];
        for (params, want) in cases {
            let e = refused(params.clone());
            assert!(e.contains(want), "{params}: {e}\n  wanted: {want}");
        }
    }

    #[test]
    fn a_refused_url_never_repeats_its_password() {
        let e = refused(json!({"url": "htp//u:hunter2@h/x"}));
        assert!(!e.contains("hunter2"), "{e}");
        let e = refused(json!({"url": "https://u:hunter2@h/x"}));
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn success_statuses_take_the_retryable_ones_out_of_the_default() {
        let p = plan(json!({"url": "http://h/", "successStatuses": ["2xx", 503]})).unwrap();
        assert!(p.success.contains(503));
        assert!(!p.retry.contains(503));
        assert!(p.retry.contains(502));
        let p = plan(json!({"url": "http://h/", "retryStatuses": []})).unwrap();
        assert!(!p.retry.contains(503));
        let p = plan(json!({"url": "http://h/", "method": "POST", "idempotent": true})).unwrap();
        assert!(p.idempotent);
    }
}
