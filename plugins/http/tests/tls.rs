//! HTTPS against a local server whose certificate comes from a CA made by the test, as a
//! factory's internal CA: trusted through a connection's `ca_file`, refused (for good, with
//! the fix in the message) without it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use takt_plugin_api::sdk::TestHost;
use takt_plugin_http::{ConnectionSpec, HttpOptions, HttpParams};

/// Starts a TLS server on 127.0.0.1 answering every request with `ok`; returns its port and
/// the CA's certificate in PEM.
fn tls_server() -> (u16, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "takt test ca");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(leaf.der().to_vec())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
    )
    .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = tls.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    (port, ca.pem())
}

fn params(v: serde_json::Value) -> HttpParams {
    serde_json::from_value(v).unwrap()
}

#[test]
fn an_internal_ca_is_trusted_through_ca_file_and_refused_without_it() {
    let (port, ca_pem) = tls_server();
    let dir = std::env::temp_dir().join(format!("takt-http-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("factory-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let url = format!("https://127.0.0.1:{port}/api/");
    let mut options = HttpOptions::default();
    let spec = ConnectionSpec {
        url: Some(url.clone()),
        ca_file: Some(ca_file),
        ..ConnectionSpec::default()
    };
    options.add("mes", &spec, "the test").unwrap();

    let host = TestHost::new();
    let r = host
        .run(|ctx| {
            takt_plugin_http::run(
                ctx,
                params(serde_json::json!({"connection": "mes", "path": "x"})),
                &options,
            )
        })
        .expect("trusted through ca_file");
    assert_eq!((r.status, r.body.as_str()), (200, Some("ok")));

    let e = host
        .run(|ctx| takt_plugin_http::run(ctx, params(serde_json::json!({"url": url})), &options))
        .expect_err("a job's own url trusts the system's roots only");
    assert!(!e.is_retryable(), "{e}");
    assert!(e.message().contains("the TLS handshake failed"), "{e}");
    assert!(e.message().contains("ca_file"), "{e}");

    std::fs::write(dir.join("empty.pem"), "not a certificate").unwrap();
    let bad = ConnectionSpec {
        url: Some(url),
        ca_file: Some(dir.join("empty.pem")),
        ..ConnectionSpec::default()
    };
    let e = options.add("bad", &bad, "the test").unwrap_err();
    assert!(e.contains("holds no certificate"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
