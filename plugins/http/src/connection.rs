//! Named connections: a base URL and headers that the host configures and jobs only name, so
//! tokens never travel in job params, job records or run logs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;
use takt_plugin_api::sdk::JobError;

/// Environment variables `TAKT_HTTP_CONNECTION_<NAME>` add connections or override keys of
/// configured ones (the name upper-cased, `-` and `.` as `_`), so that a token can stay out
/// of the config file. See [`ConnectionSpec::merge_env`] for the forms of the value.
pub const CONNECTION_ENV_PREFIX: &str = "TAKT_HTTP_CONNECTION_";

/// One connection as configured: a table of `[http_client.connections]` in takt.toml, or the
/// JSON of a `TAKT_HTTP_CONNECTION_<NAME>` variable (same keys).
///
/// ```toml
/// [http_client.connections.mes]
/// url = "https://mes.factory.local/api/"
/// headers = { Accept = "application/json" }   # Authorization from TAKT_HTTP_CONNECTION_MES
/// ca_file = "certs/factory-ca.pem"             # extra trusted roots (PEM)
/// ```
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionSpec {
    /// The base URL; a job's `path` goes below it.
    pub url: Option<String>,
    /// Headers sent with every request to the base URL's origin (scheme, host and port) —
    /// never to another origin a redirect points to. Their values are never shown.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A PEM file of CA certificates trusted beside the system's (a factory's internal CA).
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for ConnectionSpec {
    /// Never shows header values: they hold tokens.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionSpec")
            .field("url", &self.url.as_deref().map(crate::redact::url_text))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl ConnectionSpec {
    /// Applies the value of a `TAKT_HTTP_CONNECTION_<NAME>` variable over this spec: either
    /// a JSON object with the keys of the file's table (`url`, `headers`, `ca_file`), whose
    /// keys replace the file's and whose headers are added to (or replace, by name, without
    /// case) the file's; or a plain URL, which replaces `url` alone. A relative `ca_file` in
    /// the variable is relative to the working directory. The error never repeats the value.
    pub fn merge_env(&mut self, value: &str) -> Result<(), String> {
        let text = value.trim();
        if !text.starts_with('{') {
            self.url = Some(text.to_string());
            return Ok(());
        }
        let over: ConnectionSpec = serde_json::from_str(text).map_err(|e| {
            // serde_json's message quotes a bad value only for type errors on strings, which
            // could be a token: keep the position and the kind of error only.
            let what = match e.classify() {
                serde_json::error::Category::Data => {
                    "a key is unknown or a value has the wrong type (keys: url, headers, ca_file)"
                }
                _ => "it is not valid JSON",
            };
            format!(
                "{what} at line {} column {}; write a URL, or a JSON object such as \
                 {{\"headers\": {{\"Authorization\": \"Bearer …\"}}}}",
                e.line(),
                e.column()
            )
        })?;
        if over.url.is_some() {
            self.url = over.url;
        }
        if over.ca_file.is_some() {
            self.ca_file = over.ca_file;
        }
        for (name, value) in over.headers {
            self.headers.retain(|k, _| !k.eq_ignore_ascii_case(&name));
            self.headers.insert(name, value);
        }
        Ok(())
    }

    /// The variable that overrides connection `name`.
    pub fn env_var(name: &str) -> String {
        format!(
            "{CONNECTION_ENV_PREFIX}{}",
            name.to_ascii_uppercase().replace(['-', '.'], "_")
        )
    }
}

/// A checked connection, ready for requests.
pub(crate) struct Connection {
    pub(crate) base: Url,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    extra_roots: Vec<CertificateDer<'static>>,
    /// Where it is configured, for messages.
    pub(crate) source: String,
    tls: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
}

impl std::fmt::Debug for Connection {
    /// Shows the base URL and header names, never header values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("base", &crate::redact::url(&self.base))
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("extra_roots", &self.extra_roots.len())
            .field("source", &self.source)
            .finish()
    }
}

impl Connection {
    fn new(spec: &ConnectionSpec, source: &str) -> Result<Connection, String> {
        let raw = spec
            .url
            .as_deref()
            .ok_or("url is missing; give the base URL, e.g. url = \"https://mes.local/api/\"")?;
        let base = crate::params::parse_http_url(raw).map_err(|e| format!("url: {e}"))?;
        let mut headers = Vec::with_capacity(spec.headers.len());
        for (name, value) in &spec.headers {
            let n = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                format!("headers: \"{}\" is not a header name", name.escape_debug())
            })?;
            let mut v = HeaderValue::from_str(value.trim()).map_err(|_| {
                format!("headers.{name}: the value has a line break or another control character")
            })?;
            v.set_sensitive(true);
            headers.push((n, v));
        }
        let extra_roots = match &spec.ca_file {
            None => Vec::new(),
            Some(path) => load_roots(path)?,
        };
        Ok(Connection {
            base,
            headers,
            extra_roots,
            source: source.to_string(),
            tls: OnceLock::new(),
        })
    }

    /// The TLS configuration of this connection's requests, built once.
    pub(crate) fn tls(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.tls
            .get_or_init(|| tls_config(self.extra_roots.clone()))
            .clone()
    }

    /// Whether `url` is on the base URL's origin (scheme, host, port): only there are the
    /// connection's headers sent.
    pub(crate) fn same_origin(&self, url: &Url) -> bool {
        url.origin() == self.base.origin()
    }

    /// The base URL with `path` (and its query) below it: `https://h/api/` or
    /// `https://h/api` with `orders/1` are both `https://h/api/orders/1`.
    pub(crate) fn join(&self, path: &str) -> Url {
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let mut url = self.base.clone();
        if !path.is_empty() {
            let base_path = self.base.path().trim_end_matches('/');
            url.set_path(&format!("{base_path}/{path}"));
        }
        if let Some(q) = query {
            let joined = match self.base.query() {
                Some(b) if !b.is_empty() => format!("{b}&{q}"),
                _ => q.to_string(),
            };
            url.set_query(Some(&joined));
        }
        url
    }
}

fn load_roots(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let text = std::fs::read(path).map_err(|e| format!("ca_file: cannot read {shown} ({e})"))?;
    let roots = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("ca_file: {shown} is not a PEM file of certificates ({e})"))?;
    if roots.is_empty() {
        return Err(format!(
            "ca_file: {shown} holds no certificate (-----BEGIN CERTIFICATE----- blocks)"
        ));
    }
    Ok(roots)
}

/// rustls with the ring provider, verifying against the system's trust store (the Windows
/// certificate store, the macOS keychain, the Linux CA bundle) plus `extra_roots`.
pub(crate) fn tls_config(
    extra_roots: Vec<CertificateDer<'static>>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider.clone())
            .map_err(|e| format!("cannot load the trusted certificates: {e}"))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The TLS configuration of requests to a job's own `url` (system roots only), built once
/// per process. Public so that the host's other HTTP clients (alert webhooks) trust exactly
/// what `http::request` trusts.
pub fn default_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static TLS: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    TLS.get_or_init(|| tls_config(Vec::new())).clone()
}

/// What the host decides for every run of the plugin: the named connections.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    connections: BTreeMap<String, Arc<Connection>>,
}

impl HttpOptions {
    /// Adds (or replaces) connection `name` from `spec`; `source` says where it is
    /// configured, for messages. The error names the key, never a header value.
    pub fn add(&mut self, name: &str, spec: &ConnectionSpec, source: &str) -> Result<(), String> {
        if !valid_name(name) {
            return Err(format!(
                "\"{}\" is not a connection name; use letters, digits, - and _",
                name.escape_debug()
            ));
        }
        let c = Connection::new(spec, source)
            .map_err(|e| format!("connection {name} in {source}: {e}"))?;
        self.connections.insert(name.to_string(), Arc::new(c));
        Ok(())
    }

    /// Adds the connections of the `TAKT_HTTP_CONNECTION_<NAME>` environment variables that
    /// are not configured yet (the name lower-cased); those already added were given their
    /// overrides by whoever added them (takt.toml's loader does).
    pub fn add_from_env(&mut self) -> Result<(), String> {
        for (key, value) in std::env::vars() {
            let Some(name) = key.strip_prefix(CONNECTION_ENV_PREFIX) else {
                continue;
            };
            let name = name.to_ascii_lowercase();
            if name.is_empty()
                || self
                    .connections
                    .keys()
                    .any(|k| ConnectionSpec::env_var(k) == key)
            {
                continue;
            }
            let source = format!("{key} in the environment");
            let mut spec = ConnectionSpec::default();
            spec.merge_env(&value)
                .map_err(|e| format!("connection {name} in {source}: {e}"))?;
            self.add(&name, &spec, &source)?;
        }
        Ok(())
    }

    /// The connection names, for messages and `takt run`'s banner.
    pub fn names(&self) -> Vec<String> {
        self.connections.keys().cloned().collect()
    }

    pub(crate) fn get(&self, name: &str) -> Result<&Arc<Connection>, JobError> {
        let found = self.connections.get(name).or_else(|| {
            self.connections
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        });
        match found {
            Some(c) => Ok(c),
            None if self.connections.is_empty() => Err(JobError::invalid_params(format!(
                "invalid params: connection \"{name}\" is not configured: this host has no \
                 [http_client.connections]; add [http_client.connections.{name}] with a url \
                 there (or set {})",
                ConnectionSpec::env_var(name)
            ))),
            None => Err(JobError::invalid_params(format!(
                "invalid params: connection \"{name}\" is not configured; this host has: {}",
                self.names().join(", ")
            ))),
        }
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str, headers: &[(&str, &str)]) -> ConnectionSpec {
        ConnectionSpec {
            url: Some(url.into()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ca_file: None,
        }
    }

    #[test]
    fn paths_go_below_the_base() {
        let mut o = HttpOptions::default();
        o.add("a", &spec("https://h/api/", &[]), "test").unwrap();
        o.add("b", &spec("https://h/api?k=1", &[]), "test").unwrap();
        o.add("root", &spec("http://h:8080", &[]), "test").unwrap();
        let a = o.get("a").unwrap();
        assert_eq!(a.join("orders/1").as_str(), "https://h/api/orders/1");
        assert_eq!(a.join("").as_str(), "https://h/api/");
        let b = o.get("B").unwrap();
        assert_eq!(b.join("x?y=2").as_str(), "https://h/api/x?k=1&y=2");
        let root = o.get("root").unwrap();
        assert_eq!(root.join("x").as_str(), "http://h:8080/x");
        assert!(a.same_origin(&Url::parse("https://h/other").unwrap()));
        assert!(!a.same_origin(&Url::parse("http://h/api/").unwrap()));
        assert!(!a.same_origin(&Url::parse("https://h:444/api/").unwrap()));
    }

    #[test]
    fn bad_connections_name_the_key_and_never_show_a_value() {
        let mut o = HttpOptions::default();
        let e = o
            .add("mes", &ConnectionSpec::default(), "takt.toml")
            .unwrap_err();
        assert!(
            e.starts_with("connection mes in takt.toml: url is missing"),
            "{e}"
        );
        let e = o
            .add("mes", &spec("mes.local/api", &[]), "takt.toml")
            .unwrap_err();
        assert!(e.contains("url: \"mes.local/api\" is not a URL"), "{e}");
        o.add(
            "mes",
            &spec("https://h/", &[("Authorization", "Bearer s3cret")]),
            "t",
        )
        .unwrap();
        let e = o
            .add(
                "mes",
                &spec("https://h/", &[("Authorization", "Bearer s3\u{7}cret")]),
                "t",
            )
            .unwrap_err();
        assert!(e.contains("headers.Authorization: the value has"), "{e}");
        assert!(!e.contains("s3"), "{e}");
        let e = o.add("a b", &spec("https://h/", &[]), "t").unwrap_err();
        assert!(e.contains("not a connection name"), "{e}");
        let mut with_ca = spec("https://h/", &[]);
        with_ca.ca_file = Some("/nonexistent/ca.pem".into());
        let e = o.add("ca", &with_ca, "t").unwrap_err();
        assert!(
            e.contains("ca_file: cannot read /nonexistent/ca.pem"),
            "{e}"
        );
        o.add(
            "tok",
            &spec("https://h/", &[("X-Api-Key", "k-very-secret")]),
            "t",
        )
        .unwrap();
        let shown = format!("{o:?}");
        assert!(
            !shown.contains("k-very-secret") && shown.contains("x-api-key"),
            "{shown}"
        );
        let e = o.get("nope").unwrap_err();
        assert!(e.message().contains("this host has: mes, tok"), "{e}");
        let e = HttpOptions::default().get("mes").unwrap_err();
        assert!(e.message().contains("TAKT_HTTP_CONNECTION_MES"), "{e}");
    }

    #[test]
    fn the_environment_merges_over_the_file() {
        let mut s = spec(
            "https://h/api/",
            &[("Accept", "application/json"), ("authorization", "old")],
        );
        s.merge_env(r#"{"headers": {"Authorization": "Bearer new"}}"#)
            .unwrap();
        assert_eq!(s.url.as_deref(), Some("https://h/api/"));
        assert_eq!(s.headers.len(), 2, "{:?}", s.headers);
        assert_eq!(s.headers["Authorization"], "Bearer new");
        s.merge_env("http://test-box:8080/api/").unwrap();
        assert_eq!(s.url.as_deref(), Some("http://test-box:8080/api/"));
        let e = s
            .merge_env(r#"{"header": {"Authorization": "Bearer leaked"}}"#)
            .unwrap_err();
        assert!(e.contains("a key is unknown"), "{e}");
        assert!(!e.contains("leaked"), "{e}");
        let e = s.merge_env(r#"{"headers": {"A": 5}}"#).unwrap_err();
        assert!(e.contains("wrong type"), "{e}");
        let e = s.merge_env("{nope").unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        assert_eq!(
            ConnectionSpec::env_var("line-a.b"),
            "TAKT_HTTP_CONNECTION_LINE_A_B"
        );
    }
}
