//! `takt run` with the built-in `http::request` executor and `[http_client.connections]` from
//! takt.toml, the token given by `TAKT_HTTP_CONNECTION_<NAME>` only: it reaches the server,
//! and appears nowhere in what takt prints or stores.

mod common;

use takt_core::job::JobName;
use takt_core::run::RunState;
use takt_core::store::conformance::block_on;
use takt_core::store::{RunFilter, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

use common::http::{Reply, Request, Server};

#[test]
fn takt_run_calls_named_connections_with_the_token_from_the_environment() {
    let server = Server::start(|r: &Request| match r.path() {
        "/api/counts" => Reply::with(200, "application/json", r#"{"pieces":120}"#),
        _ => Reply::with(404, "text/plain", "no"),
    });
    let dir = std::env::temp_dir().join(format!("takt-cli-http-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            r#"
plugin_dir = "plugins"

[http_client.connections.mes]
url = "{}"
headers = {{ Accept = "application/json" }}

[[jobs]]
name = "counts"
handler = "http::request"
params = {{ connection = "mes", path = "counts", query = {{ line = 3 }} }}
every = "1s"

[[jobs]]
name = "missing"
handler = "http::request"
params = {{ connection = "line2", path = "counts" }}
every = "1s"
"#,
            server.url("/api/")
        ),
    )
    .unwrap();
    let out = common::takt_command(&dir)
        .args(["run", "--for", "3s"])
        .env(
            "TAKT_HTTP_CONNECTION_MES",
            r#"{"headers": {"Authorization": "Bearer tok-cli-SECRET"}}"#,
        )
        .env("TAKT_HTTP_CONNECTION_LINE2", server.url("/line2/"))
        .output()
        .expect("takt runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("plugin http"), "{stdout}");
    assert!(
        stdout.contains("http::request connections: line2, mes"),
        "{stdout}"
    );

    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let runs_of = |name: &str| {
        let job = block_on(store.job_get_by_name(&JobName::new(name).unwrap()))
            .unwrap()
            .expect("synced");
        let runs = block_on(store.run_list(&RunFilter {
            job: job.id,
            state: None,
            limit: 100,
            ..RunFilter::default()
        }))
        .unwrap();
        (job, runs)
    };
    let (job, runs) = runs_of("counts");
    let ok: Vec<_> = runs
        .iter()
        .filter(|r| r.state == RunState::Succeeded)
        .collect();
    assert!(!ok.is_empty(), "{stdout}\n{runs:?}");
    let result: serde_json::Value =
        serde_json::from_str(ok[0].result_json.as_deref().unwrap()).unwrap();
    assert_eq!(result["body"]["pieces"], 120);
    assert_eq!(result["connection"], "mes");
    let sent = server
        .requests()
        .into_iter()
        .find(|r| r.path() == "/api/counts")
        .expect("the request arrived");
    assert_eq!(sent.target, "/api/counts?line=3");
    assert_eq!(sent.header("authorization"), Some("Bearer tok-cli-SECRET"));
    assert_eq!(sent.header("accept"), Some("application/json"));

    // The connection only the environment defines (a plain URL).
    let (_, missing) = runs_of("missing");
    assert!(
        missing.iter().any(|r| r.state == RunState::Failed),
        "{missing:?}"
    );
    assert!(
        missing[0].error.as_deref().unwrap().contains("404"),
        "{:?}",
        missing[0].error
    );

    let mut stored = job.params_json.clone();
    for run in &runs {
        stored.push_str(run.error.as_deref().unwrap_or(""));
        stored.push_str(run.result_json.as_deref().unwrap_or(""));
        for (_, line) in block_on(store.log_list(run.id.unwrap(), None, 100)).unwrap() {
            stored.push_str(&line.message);
        }
    }
    assert!(stored.contains("GET "), "the log was read: {stored}");
    for text in [&stored, &stdout.to_string(), &stderr.to_string()] {
        assert!(!text.contains("tok-cli-SECRET"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
