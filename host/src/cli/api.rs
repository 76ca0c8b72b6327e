//! A client of a running host's HTTP API, for commands that act on a live `takt run`
//! (`takt plugin reload`): where it listens (from the config's `[http]`, else `--url`), the
//! token (`--token`, else `TAKT_TOKEN`), and problem+json errors turned into one line.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::Value;

use crate::config::{Config, DEFAULT_FILE};

/// How to reach the API.
#[derive(Debug, Args)]
pub(super) struct ApiArgs {
    /// The host's API, e.g. http://127.0.0.1:7450 [default: [http] listen of the config].
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// The config whose [http] says where the host listens [default: takt.toml here].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// A token with the needed role [default: $TAKT_TOKEN; none for a host without tokens].
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// A PEM CA certificate to trust for an https API (besides the system's).
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
}

impl ApiArgs {
    fn base(&self) -> Result<String> {
        if let Some(u) = &self.url {
            return Ok(u.trim_end_matches('/').to_string());
        }
        let file = self
            .config
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_FILE));
        let config = Config::load(&file)?;
        let Some(http) = config.api else {
            bail!(
                "the http api is off in {} ([http] listen = \"off\"); turn it on, or give --url",
                file.display()
            );
        };
        let mut addr = http.listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let scheme = if http.tls.is_some() { "https" } else { "http" };
        Ok(format!("{scheme}://{addr}"))
    }

    fn client(&self) -> Result<reqwest::Client> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = Vec::new();
        if let Some(f) = &self.ca_file {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            roots = CertificateDer::pem_file_iter(f)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .with_context(|| format!("--ca-file {}", f.display()))?;
        }
        let verifier =
            rustls_platform_verifier::Verifier::new_with_extra_roots(roots, provider.clone())
                .context("cannot load the trusted certificates")?;
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("cannot set up tls")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .no_proxy()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .context("cannot build the http client")
    }

    /// POSTs to `path` and returns the JSON answer, or the problem's detail as the error.
    pub(super) fn post(&self, path: &str) -> Result<Value> {
        let base = self.base()?;
        let url = format!("{base}{path}");
        let token = self
            .token
            .clone()
            .or_else(|| std::env::var("TAKT_TOKEN").ok().filter(|t| !t.is_empty()));
        let client = self.client()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        runtime.block_on(async {
            let mut req = client.post(&url);
            if let Some(t) = &token {
                req = req.bearer_auth(t);
            }
            let resp = req.send().await.map_err(|e| {
                anyhow::anyhow!(
                    "cannot reach the takt host at {base}: {}; is `takt run` running with its \
                     http api there?",
                    innermost(&e)
                )
            })?;
            let status = resp.status();
            let bytes = resp.bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if !status.is_success() {
                let detail = body
                    .get("detail")
                    .and_then(Value::as_str)
                    .unwrap_or("no detail");
                bail!("{url}: {status}: {detail}");
            }
            Ok(body)
        })
    }
}

fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}
