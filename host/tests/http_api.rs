//! The HTTP API of an embedded host (`HostBuilder::http`, port 0) on SQLite — and, where it
//! is the store that matters (pagination, tokens), PostgreSQL when `TAKT_TEST_PG_URL` is
//! set: every endpoint with good and bad input, the 401 / 403 / 404 / 409 / 412 / 428 / 429
//! answers as problem+json naming the field, the job version's ETag, masked secrets, live
//! logs over Server-Sent Events, cursor pages stable under concurrent inserts, cancelling a
//! running run, metrics, the OpenAPI document against the routes served, and the refusal of
//! a non-loopback address without tokens.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use takt_core::job::JobName;
use takt_core::run::{Run, SkipReason};
use takt_core::store::Store;
use takt_core::store::access::{NewToken, Role};
use takt_host::embed::{Host, HostBuilder, HostError};
use takt_host::http::auth::new_token;
use takt_host::http::{HttpConfig, HttpError};
use takt_host::store::{SqliteOptions, SqliteStore};
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};
use takt_plugin_api::static_plugin;

const WAIT: Duration = Duration::from_secs(20);

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("takt-http-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The handlers the tests run: `t::ok`, `t::chatty` (five log lines, 100 ms apart) and
/// `t::polite` (waits for its cancel).
fn plugin() -> Plugin {
    Plugin::new("t")
        .handler("ok", "succeeds", |_: &JobContext, v: Value| {
            Ok(json!({"got": v, "password": "hidden"}))
        })
        .handler(
            "chatty",
            "logs five lines",
            |ctx: &JobContext, _: Value| -> Result<(), JobError> {
                for i in 0..5 {
                    ctx.info(&format!("line {i}"));
                    ctx.sleep(Duration::from_millis(100))?;
                }
                Ok(())
            },
        )
        .handler(
            "polite",
            "waits to be cancelled",
            |ctx: &JobContext, _: Value| -> Result<(), JobError> {
                loop {
                    ctx.check_cancelled()?;
                    std::thread::sleep(Duration::from_millis(10));
                }
            },
        )
}

async fn host_on(store: SqliteStore, http: HttpConfig) -> Result<Host<SqliteStore>, HostError> {
    let t = static_plugin!(plugin).expect("a valid static plugin");
    HostBuilder::new(store)
        .static_plugin(t)
        .node(format!("api-{}", std::process::id()))
        .capacity(4)
        .grace(Duration::from_secs(2))
        .http(http)
        .start()
        .await
}

fn local() -> HttpConfig {
    HttpConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..HttpConfig::default()
    }
}

/// A plain-http client (reqwest is built without a default TLS provider here).
fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

struct Api {
    base: String,
    client: reqwest::Client,
    token: Option<String>,
}

impl Api {
    fn of(host: &Host<SqliteStore>) -> Api {
        Api {
            base: format!("http://{}", host.http_addr().expect("http on")),
            client: client(),
            token: None,
        }
    }

    fn with(&self, token: &str) -> Api {
        Api {
            base: self.base.clone(),
            client: self.client.clone(),
            token: Some(token.to_string()),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.expect("the api answers");
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        if !status.is_success() {
            assert_eq!(
                headers.get("content-type").and_then(|v| v.to_str().ok()),
                Some("application/problem+json"),
                "errors are problem+json: {v}"
            );
            assert_eq!(v["status"], json!(status.as_u16()), "{v}");
            assert!(
                v["type"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("urn:takt:problem:"),
                "{v}"
            );
        }
        (status, headers, v)
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let (s, _, v) = self.call(Method::GET, path, None, &[]).await;
        (s, v)
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let (s, _, v) = self.call(Method::POST, path, Some(body), &[]).await;
        (s, v)
    }

    async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let (s, _, v) = self.call(Method::PUT, path, Some(body), &[]).await;
        (s, v)
    }
}

async fn wait_for<F: Fn(&Value) -> bool>(api: &Api, path: &str, ok: F) -> Value {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let (s, v) = api.get(path).await;
        if s == StatusCode::OK && ok(&v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{path} never matched; last: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn job(name: &str, handler: &str) -> Value {
    json!({"name": name, "handler": handler, "params": {"url": "https://mes/api", "password": "s3cret"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_created_read_edited_with_versions_triggered_and_deleted() {
    let d = dir("jobs");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let host = host_on(store.clone(), local()).await.unwrap();
    let api = Api::of(&host);

    // Create: 201 with the version as ETag; secrets masked in the answer, kept in the store.
    let (s, h, v) = api
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(job("nightly", "t::ok")),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(h.get("etag").unwrap(), "\"1\"");
    assert_eq!(v["params"]["password"], "********");
    assert_eq!(v["params"]["url"], "https://mes/api");
    let stored = store
        .job_get_by_name(&JobName::new("nightly").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(stored.params_json.contains("s3cret"));

    // Bad input names the field.
    let (s, v) = api.post("/api/v1/jobs", job("nightly", "t::ok")).await;
    assert_eq!(
        (s, v["type"].as_str()),
        (StatusCode::CONFLICT, Some("urn:takt:problem:conflict")),
        "{v}"
    );
    let mut bad = job("b", "t::ok");
    bad["schedule"] = json!({"cron": "61 * * * *"});
    let (s, v) = api.post("/api/v1/jobs", bad).await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("schedule")),
        "{v}"
    );
    let mut bad = job("b", "t::ok");
    bad["retries"] = json!("three");
    let (s, v) = api.post("/api/v1/jobs", bad).await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("retries")),
        "{v}"
    );
    let mut bad = job("b", "t::ok");
    bad["colour"] = json!("red");
    let (s, v) = api.post("/api/v1/jobs", bad).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("colour"), "{v}");
    let (s, v) = api.post("/api/v1/jobs", json!({"handler": "t::ok"})).await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("name")),
        "{v}"
    );
    let (s, v) = api
        .post("/api/v1/jobs", json!({"name": "", "handler": "t::ok"}))
        .await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("name")),
        "{v}"
    );
    let mut every = job("every", "t::ok");
    every["schedule"] = json!({"every": "1h"});
    every["group"] = json!("g1");
    assert_eq!(api.post("/api/v1/jobs", every).await.0, StatusCode::CREATED);

    // List with filters.
    let (_, all) = api.get("/api/v1/jobs").await;
    assert_eq!(all.as_array().unwrap().len(), 2);
    let (_, g) = api.get("/api/v1/jobs?group=g1").await;
    assert_eq!(g[0]["name"], "every");
    assert_eq!(g.as_array().unwrap().len(), 1);
    let (_, q) = api.get("/api/v1/jobs?q=NIGHT&enabled=true").await;
    assert_eq!(q.as_array().unwrap().len(), 1);
    let (s, v) = api.get("/api/v1/jobs?enabled=perhaps").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");

    // Get: 404 for a missing one; the ETag.
    let (s, v) = api.get("/api/v1/jobs/nope").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, h, got) = api
        .call(Method::GET, "/api/v1/jobs/nightly", None, &[])
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h.get("etag").unwrap(), "\"1\"");

    // Replace: If-Match required (428), a stale one refused (412), the right one applied;
    // the masked password sent back keeps the stored one.
    let mut edit = got.clone();
    edit["description"] = json!("nightly export");
    let (s, _, v) = api
        .call(Method::PUT, "/api/v1/jobs/nightly", Some(edit.clone()), &[])
        .await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::PRECONDITION_REQUIRED, Some("If-Match")),
        "{v}"
    );
    let (s, _, v) = api
        .call(
            Method::PUT,
            "/api/v1/jobs/nightly",
            Some(edit.clone()),
            &[("if-match", "\"7\"")],
        )
        .await;
    assert_eq!(s, StatusCode::PRECONDITION_FAILED, "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("version 1, not 7"),
        "{v}"
    );
    let (s, h, v) = api
        .call(
            Method::PUT,
            "/api/v1/jobs/nightly",
            Some(edit.clone()),
            &[("if-match", "\"1\"")],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(h.get("etag").unwrap(), "\"2\"");
    assert_eq!(v["description"], "nightly export");
    let stored = store
        .job_get_by_name(&JobName::new("nightly").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        stored.params_json.contains("s3cret"),
        "the mask did not overwrite: {}",
        stored.params_json
    );

    // Validity windows are fields the store obeys: set through the API, refused precisely.
    let mut windowed = job("windowed", "t::ok");
    windowed["effective_from"] = json!("2030-01-01T00:00:00Z");
    windowed["expires_at"] = json!("2031-01-01T00:00:00Z");
    let (s, _, v) = api
        .call(Method::POST, "/api/v1/jobs", Some(windowed.clone()), &[])
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["effective_from"], "2030-01-01T00:00:00Z", "{v}");
    assert_eq!(v["state"], "not yet effective", "{v}");
    let mut bad = job("badwindow", "t::ok");
    bad["expires_at"] = json!("next tuesday");
    let (s, _, v) = api.call(Method::POST, "/api/v1/jobs", Some(bad), &[]).await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("expires_at")),
        "{v}"
    );
    // Dependencies are a real field: set, shown, and refused when unknown, cyclic or with a
    // bad wait.
    let mut dependent = job("dependent", "t::ok");
    dependent["dependencies"] = json!(["windowed"]);
    dependent["dependency_wait"] = json!("30m");
    let (s, _, v) = api
        .call(Method::POST, "/api/v1/jobs", Some(dependent), &[])
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["dependencies"], json!(["windowed"]), "{v}");
    assert_eq!(v["dependency_wait"], "30m", "{v}");
    let mut unknown = job("orphan", "t::ok");
    unknown["depends_on"] = json!(["nowhere"]);
    let (s, _, v) = api
        .call(Method::POST, "/api/v1/jobs", Some(unknown), &[])
        .await;
    assert!(s.is_client_error(), "{s} {v}");
    assert!(
        v.to_string()
            .contains("depends on nowhere, which does not exist"),
        "{v}"
    );
    let mut bad_wait = job("badwait", "t::ok");
    bad_wait["dependencies"] = json!(["windowed"]);
    bad_wait["dependency_wait"] = json!("soon");
    let (s, _, v) = api
        .call(Method::POST, "/api/v1/jobs", Some(bad_wait), &[])
        .await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("dependency_wait")),
        "{v}"
    );
    let mut reversed = job("reversed", "t::ok");
    reversed["effective_from"] = json!("2031-01-01T00:00:00Z");
    reversed["expires_at"] = json!("2030-01-01T00:00:00Z");
    let (s, _, v) = api
        .call(Method::POST, "/api/v1/jobs", Some(reversed), &[])
        .await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("effective_from")),
        "{v}"
    );
    let (s, _, v) = api
        .call(
            Method::PUT,
            "/api/v1/jobs/nightly",
            Some(edit.clone()),
            &[("if-match", "\"1\"")],
        )
        .await;
    assert_eq!(
        s,
        StatusCode::PRECONDITION_FAILED,
        "the same edit again is stale: {v}"
    );
    let mut renamed = edit.clone();
    renamed["name"] = json!("other");
    let (s, _, v) = api
        .call(
            Method::PUT,
            "/api/v1/jobs/nightly",
            Some(renamed),
            &[("if-match", "\"2\"")],
        )
        .await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("name")),
        "{v}"
    );

    // Disable, refuse a trigger, enable, trigger: the run is recorded and succeeds.
    let (s, v) = api.post("/api/v1/jobs/nightly/disable", json!({})).await;
    assert_eq!(
        (s, v["enabled"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{v}"
    );
    let (s, v) = api.post("/api/v1/jobs/nightly/trigger", json!({})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(
        api.post("/api/v1/jobs/nightly/enable", json!({})).await.0,
        StatusCode::OK
    );
    let (s, v) = api.post("/api/v1/jobs/nightly/trigger", json!({})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let runs = wait_for(&api, "/api/v1/runs?job=nightly&state=succeeded", |v| {
        !v["items"].as_array().unwrap().is_empty()
    })
    .await;
    let run = &runs["items"][0];
    assert_eq!(run["job"], "nightly");
    assert_eq!(
        run["result"]["password"], "********",
        "results are masked too: {run}"
    );
    let id = run["id"].as_i64().unwrap();
    let (s, one) = api.get(&format!("/api/v1/runs/{id}")).await;
    assert_eq!(
        (s, one["state"].as_str()),
        (StatusCode::OK, Some("succeeded"))
    );
    assert_eq!(one["plugin"], "t");
    let (s, v) = api.get("/api/v1/runs/999999").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = api.get("/api/v1/runs/abc").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = api
        .post(&format!("/api/v1/runs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a finished run cannot be cancelled: {v}"
    );

    // Every operator action is recorded with who did it, shown on the job.
    let (_, got) = api.get("/api/v1/jobs/nightly").await;
    let actions: Vec<&str> = got["recent_actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["trigger", "enable", "disable", "update", "create"],
        "{got}"
    );
    assert_eq!(got["recent_actions"][0]["actor"], "local");

    // Delete: If-Match honoured when sent; the actions outlive the job.
    let (s, _, v) = api
        .call(
            Method::DELETE,
            "/api/v1/jobs/nightly",
            None,
            &[("if-match", "\"1\"")],
        )
        .await;
    assert_eq!(s, StatusCode::PRECONDITION_FAILED, "{v}");
    let (s, _, _) = api
        .call(Method::DELETE, "/api/v1/jobs/nightly", None, &[])
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(
        api.get("/api/v1/jobs/nightly").await.0,
        StatusCode::NOT_FOUND
    );
    let (s, acts) = api.get("/api/v1/jobs/nightly/actions?limit=2").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(acts[0]["action"], "delete");
    assert_eq!(acts.as_array().unwrap().len(), 2);
    let (s, v) = api.get("/api/v1/jobs/nightly/actions?limit=0").await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("limit")),
        "{v}"
    );
    host.shutdown(Duration::from_secs(2)).await;
}

/// Pages of runs by cursor over runs of two jobs, with runs inserted (newer and older) while
/// paging: every run that existed is seen once, in order, none twice.
async fn paging_is_stable<S: Store + Clone + 'static>(store: S, api: &Api) {
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let j = takt_core::job::JobDef::new(name, "t::ok").unwrap();
        ids.push(
            store
                .job_insert(&j, Timestamp::now())
                .await
                .unwrap()
                .id
                .unwrap(),
        );
    }
    let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let at = move |m: i64| t0 + jiff::SignedDuration::from_secs(m * 60);
    for m in 0..60 {
        for job in &ids {
            let r = Run::skipped(*job, at(m), SkipReason::Paused, None, at(m));
            store.run_insert_skipped(&r).await.unwrap();
        }
    }
    let (_, first) = api.get("/api/v1/runs?limit=1000").await;
    let original: Vec<i64> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(original.len(), 120);
    // A writer inserts while the reader pages.
    let writer = {
        let store = store.clone();
        let ids = ids.clone();
        tokio::spawn(async move {
            for m in 0..40 {
                for (i, job) in ids.iter().enumerate() {
                    // Newer than everything, and between the existing ones (seconds apart).
                    let fire = if i == 0 {
                        at(1000 + m)
                    } else {
                        at(m) + jiff::SignedDuration::from_secs(30)
                    };
                    let r = Run::skipped(*job, fire, SkipReason::Overlap, None, fire);
                    store.run_insert_skipped(&r).await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/runs?limit=7&cursor={c}"),
            None => "/api/v1/runs?limit=7&to=2026-01-01T01:00:00Z".to_string(),
        };
        let path = if cursor.is_some() {
            format!("{path}&to=2026-01-01T01:00:00Z")
        } else {
            path
        };
        let (s, page) = api.get(&path).await;
        assert_eq!(s, StatusCode::OK, "{page}");
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_i64().unwrap()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    writer.await.unwrap();
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no run twice");
    let seen_original: Vec<i64> = seen
        .iter()
        .copied()
        .filter(|i| original.contains(i))
        .collect();
    assert_eq!(
        seen_original, original,
        "every run that existed, once, in order"
    );
    // Filters and their errors.
    let (_, a) = api.get("/api/v1/runs?job=a&from=2026-01-01T00:10:00Z&to=2026-01-01T00:20:00Z&state=skipped&limit=1000").await;
    let items = a["items"].as_array().unwrap();
    assert!(
        items
            .iter()
            .all(|r| r["job"] == "a" && r["fire_time"].as_str().unwrap() >= "2026-01-01T00:10:00Z")
    );
    assert_eq!(items.len(), 10, "{a}");
    for (q, field) in [
        ("cursor=xyz", "cursor"),
        ("state=exploded", "state"),
        ("from=yesterday", "from"),
        ("limit=5000", "limit"),
        ("job=nope", "job"),
    ] {
        let (s, v) = api.get(&format!("/api/v1/runs?{q}")).await;
        assert!(
            s == StatusCode::BAD_REQUEST || s == StatusCode::NOT_FOUND,
            "{q}: {v}"
        );
        assert_eq!(v["field"].as_str(), Some(field), "{q}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pages_are_stable_under_concurrent_inserts_on_sqlite() {
    let d = dir("pages");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let host = host_on(store.clone(), local()).await.unwrap();
    paging_is_stable(store, &Api::of(&host)).await;
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pages_are_stable_under_concurrent_inserts_on_postgres() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let schema = format!("takt_http_{}", std::process::id());
    let options = takt_host::store::PgOptions::new(&url).with_schema(&schema);
    let store = takt_host::store::PgStore::connect(&options).await.unwrap();
    let t = static_plugin!(plugin).expect("valid");
    let host = HostBuilder::new(store.clone())
        .static_plugin(t)
        .node("pg-api")
        .http(local())
        .start()
        .await
        .unwrap();
    let api = Api {
        base: format!("http://{}", host.http_addr().unwrap()),
        client: client(),
        token: None,
    };
    paging_is_stable(store, &api).await;
    host.shutdown(Duration::from_secs(2)).await;
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}

/// `GET /api/v1/jobs` pages by name: the body stays a JSON array, `X-Next-Cursor` and
/// `Link: rel="next"` lead to the next page with the same filters until the last page (which
/// has neither), a name with `&`, `=` and a space survives the round trip, the default page
/// is 100, and bad limits and cursors are 400s naming the field.
async fn job_pages_follow_their_cursor<S: Store>(store: S, api: &Api) {
    let names = [
        "page-05",
        "page-01",
        "page-03 a&b=c",
        "page-06",
        "page-03",
        "page-02",
        "page-04",
    ];
    for n in names {
        let mut j = takt_core::job::JobDef::new(n, "t::ok").unwrap();
        j.enabled = n != "page-02";
        store.job_insert(&j, Timestamp::now()).await.unwrap();
    }
    let get = |path: String| async move {
        let (s, h, v) = api.call(Method::GET, &path, None, &[]).await;
        assert_eq!(s, StatusCode::OK, "{path}: {v}");
        let listed: Vec<String> = v
            .as_array()
            .unwrap_or_else(|| panic!("{path}: a JSON array: {v}"))
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_string())
            .collect();
        let header = |k: &str| h.get(k).map(|v| v.to_str().unwrap().to_string());
        (listed, header("x-next-cursor"), header("link"))
    };
    // Page by page through the Link header.
    let (page, cursor, link) = get("/api/v1/jobs?limit=3".into()).await;
    assert_eq!(page, ["page-01", "page-02", "page-03"]);
    assert_eq!(cursor.as_deref(), Some("page-03"));
    assert_eq!(
        link.as_deref(),
        Some("</api/v1/jobs?after=page-03&limit=3>; rel=\"next\"")
    );
    let next = link.unwrap();
    let next = next.strip_prefix('<').unwrap().split_once('>').unwrap().0;
    let (page, cursor, link) = get(next.to_string()).await;
    assert_eq!(page, ["page-03 a&b=c", "page-04", "page-05"]);
    assert_eq!(cursor.as_deref(), Some("page-05"));
    assert!(link.is_some());
    let (page, cursor, link) = get(format!("/api/v1/jobs?limit=3&after={}", cursor.unwrap())).await;
    assert_eq!(page, ["page-06"], "the last page");
    assert_eq!((cursor, link), (None, None), "the last page has no next");
    // A page that ends at the last job is the last page: no empty page after it.
    let (page, cursor, _) = get("/api/v1/jobs?limit=7".into()).await;
    assert_eq!(page.len(), 7);
    assert_eq!(cursor, None);
    // A cursor that needs encoding, passed back as the header gave it.
    let (page, cursor, link) = get("/api/v1/jobs?limit=1&after=page-03".into()).await;
    assert_eq!(page, ["page-03 a&b=c"]);
    assert_eq!(cursor.as_deref(), Some("page-03%20a%26b%3Dc"));
    assert_eq!(
        link.as_deref(),
        Some("</api/v1/jobs?after=page-03%20a%26b%3Dc&limit=1>; rel=\"next\"")
    );
    let (page, ..) = get(format!("/api/v1/jobs?limit=1&after={}", cursor.unwrap())).await;
    assert_eq!(page, ["page-04"]);
    // Filters page too, and the Link keeps them.
    let (page, _, link) =
        get("/api/v1/jobs?limit=2&enabled=true&q=PAGE-0&handler=t::".into()).await;
    assert_eq!(page, ["page-01", "page-03"], "page-02 is disabled");
    assert_eq!(
        link.as_deref(),
        Some(
            "</api/v1/jobs?after=page-03&limit=2&enabled=true&handler=t%3A%3A&q=PAGE-0>; \
             rel=\"next\""
        )
    );
    let next = link.unwrap();
    let next = next.strip_prefix('<').unwrap().split_once('>').unwrap().0;
    let (page, ..) = get(next.to_string()).await;
    assert_eq!(page, ["page-03 a&b=c", "page-04"]);
    // The default page is 100.
    for i in 0..100 {
        let j = takt_core::job::JobDef::new(&format!("zz-{i:03}"), "t::ok").unwrap();
        store.job_insert(&j, Timestamp::now()).await.unwrap();
    }
    let (page, cursor, _) = get("/api/v1/jobs".into()).await;
    assert_eq!(page.len(), 100);
    assert_eq!(cursor.as_deref(), Some("zz-092"));
    // Bad limits and cursors.
    for (q, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=many", "limit"),
        ("after=", "after"),
        ("after=%20padded", "after"),
    ] {
        let (s, v) = api.get(&format!("/api/v1/jobs?{q}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert_eq!(v["field"].as_str(), Some(field), "{q}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_pages_follow_their_cursor_on_sqlite() {
    let d = dir("job-pages");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let host = host_on(store.clone(), local()).await.unwrap();
    job_pages_follow_their_cursor(store, &Api::of(&host)).await;
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_pages_follow_their_cursor_on_postgres() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let schema = format!("takt_http_jobs_{}", std::process::id());
    let options = takt_host::store::PgOptions::new(&url).with_schema(&schema);
    let store = takt_host::store::PgStore::connect(&options).await.unwrap();
    let t = static_plugin!(plugin).expect("valid");
    let host = HostBuilder::new(store.clone())
        .static_plugin(t)
        .node("pg-api-jobs")
        .http(local())
        .start()
        .await
        .unwrap();
    let api = Api {
        base: format!("http://{}", host.http_addr().unwrap()),
        client: client(),
        token: None,
    };
    job_pages_follow_their_cursor(store, &api).await;
    host.shutdown(Duration::from_secs(2)).await;
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}

async fn token(store: &SqliteStore, name: &str, role: Role) -> String {
    let (t, sha256) = new_token().unwrap();
    store
        .token_insert(&NewToken {
            name: name.into(),
            role,
            sha256,
            created_at: Timestamp::now(),
        })
        .await
        .unwrap();
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_roles_decide_who_may_do_what() {
    let d = dir("roles");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let viewer = token(&store, "wall-screen", Role::Viewer).await;
    let operator = token(&store, "shift-lead", Role::Operator).await;
    let admin = token(&store, "it", Role::Admin).await;
    let host = host_on(store.clone(), local()).await.unwrap();
    let anon = Api::of(&host);

    // Tokens exist: even loopback callers need one; health stays open.
    let (s, h, v) = anon.call(Method::GET, "/api/v1/jobs", None, &[]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    assert!(h.get("www-authenticate").is_some());
    assert_eq!(anon.get("/healthz").await.0, StatusCode::OK);
    assert_eq!(anon.get("/readyz").await.0, StatusCode::OK);
    assert_eq!(anon.get("/metrics").await.0, StatusCode::UNAUTHORIZED);
    let (s, v) = anon.with("Basic abc").get("/api/v1/jobs").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");

    let (v, o, a) = (anon.with(&viewer), anon.with(&operator), anon.with(&admin));
    assert_eq!(
        a.post("/api/v1/jobs", job("j", "t::ok")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(v.get("/api/v1/jobs/j").await.0, StatusCode::OK);
    let (s, p) = v.post("/api/v1/jobs/j/trigger", json!({})).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("operator"), "{p}");
    assert_eq!(
        o.post("/api/v1/jobs/j/disable", json!({})).await.0,
        StatusCode::OK
    );
    assert_eq!(
        o.post("/api/v1/jobs", job("k", "t::ok")).await.0,
        StatusCode::FORBIDDEN,
        "operators do not edit jobs"
    );
    let (s, _, _) = o.call(Method::DELETE, "/api/v1/jobs/j", None, &[]).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(o.get("/api/v1/tokens").await.0, StatusCode::FORBIDDEN);
    assert_eq!(v.get("/metrics").await.0, StatusCode::OK);
    let (_, acts) = v.get("/api/v1/jobs/j/actions").await;
    let who: Vec<(&str, &str)> = acts
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["action"].as_str().unwrap(), x["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(who, [("disable", "shift-lead"), ("create", "it")]);

    // Tokens through the API: made (shown once), listed without the secret, revoked.
    let (s, made) = a
        .post("/api/v1/tokens", json!({"name": "temp", "role": "viewer"}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{made}");
    let temp = anon.with(made["token"].as_str().unwrap());
    assert_eq!(temp.get("/api/v1/nodes").await.0, StatusCode::OK);
    let (s, p) = a
        .post("/api/v1/tokens", json!({"name": "temp", "role": "viewer"}))
        .await;
    assert_eq!(
        (s, p["field"].as_str()),
        (StatusCode::CONFLICT, Some("name")),
        "{p}"
    );
    let (s, p) = a
        .post("/api/v1/tokens", json!({"name": "x", "role": "god"}))
        .await;
    assert_eq!(
        (s, p["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("role")),
        "{p}"
    );
    let (_, list) = a.get("/api/v1/tokens").await;
    assert!(!list.to_string().contains(made["token"].as_str().unwrap()));
    assert_eq!(list.as_array().unwrap().len(), 4);
    let (s, _, _) = a
        .call(Method::DELETE, "/api/v1/tokens/temp", None, &[])
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, p) = temp.get("/api/v1/nodes").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(p["detail"].as_str().unwrap().contains("revoked"), "{p}");
    let (s, _, _) = a
        .call(Method::DELETE, "/api/v1/tokens/ghost", None, &[])
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Repeated failures lock the address out.
    let bad = anon.with("takt_wrong");
    let mut last = StatusCode::OK;
    for _ in 0..6 {
        last = bad.get("/api/v1/jobs").await.0;
    }
    assert_eq!(last, StatusCode::TOO_MANY_REQUESTS);
    let (s, h, _) = v.call(Method::GET, "/api/v1/jobs", None, &[]).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "the whole address waits");
    assert!(h.get("retry-after").is_some());
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_audit_and_pauses_of_jobs_groups_and_nodes() {
    let d = dir("workflow");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let viewer = token(&store, "wall-screen", Role::Viewer).await;
    let operator = token(&store, "shift-lead", Role::Operator).await;
    let admin = token(&store, "it", Role::Admin).await;
    let host = host_on(store.clone(), local()).await.unwrap();
    let anon = Api::of(&host);
    let (v, o, a) = (anon.with(&viewer), anon.with(&operator), anon.with(&admin));
    let mut body = job("w", "t::ok");
    body["group"] = json!("line1");
    body["schedule"] = json!({"cron": "0 3 1 1 *"});
    assert_eq!(a.post("/api/v1/jobs", body).await.0, StatusCode::CREATED);

    // why: the report of `takt why --json`.
    assert_eq!(
        anon.get("/api/v1/jobs/w/why").await.0,
        StatusCode::UNAUTHORIZED
    );
    let (s, r) = v.get("/api/v1/jobs/w/why").await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["job"], "w");
    assert!(
        r["conclusion"].as_str().is_some_and(|c| !c.is_empty()),
        "{r}"
    );
    assert!(r["reasons"].is_array(), "{r}");
    let (s, r) = v.get("/api/v1/jobs/w/why?at=2026-03-29T01:30:00Z").await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert!(r["at"].is_object(), "{r}");
    let (s, p) = v.get("/api/v1/jobs/w/why?at=yesterday").await;
    assert_eq!(
        (s, p["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("at")),
        "{p}"
    );
    assert_eq!(
        v.get("/api/v1/jobs/ghost/why").await.0,
        StatusCode::NOT_FOUND
    );

    // audit: 200 with the report, gaps or not; bad ranges name their parameter.
    let (s, r) = v
        .get("/api/v1/audit?from=2026-01-01&to=2026-01-02&job=w")
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert!(r["gaps"].is_u64() && r["duplicates"].is_u64(), "{r}");
    assert_eq!(r["jobs"][0]["job"], "w", "{r}");
    let (s, p) = v.get("/api/v1/audit?from=2026-01-02&to=2026-01-01").await;
    assert_eq!(
        (s, p["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("to")),
        "{p}"
    );
    let (s, p) = v.get("/api/v1/audit?from=soon&to=2026-01-01").await;
    assert_eq!(
        (s, p["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("from")),
        "{p}"
    );
    let (s, p) = v.get("/api/v1/audit?from=2026-01-01").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{p}");
    let (s, p) = v
        .get("/api/v1/audit?from=2026-01-01&to=2026-01-02&job=ghost")
        .await;
    assert_eq!(
        (s, p["field"].as_str()),
        (StatusCode::NOT_FOUND, Some("job")),
        "{p}"
    );

    // A job's pause: operator only, by the token's name, twice is a conflict.
    let (s, p) = v.post("/api/v1/jobs/w/pause", json!({})).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{p}");
    let (s, p) = o.post("/api/v1/jobs/w/pause", json!({"why": "x"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{p}");
    let (s, j) = o
        .post(
            "/api/v1/jobs/w/pause",
            json!({"reason": "line maintenance"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{j}");
    assert_eq!(j["state"], "paused", "{j}");
    assert_eq!(j["pause"]["paused_by"], "shift-lead", "{j}");
    assert_eq!(j["pause"]["reason"], "line maintenance", "{j}");
    assert_eq!(
        o.post("/api/v1/jobs/w/pause", json!({})).await.0,
        StatusCode::CONFLICT
    );
    assert_eq!(
        o.post("/api/v1/jobs/ghost/pause", json!({})).await.0,
        StatusCode::NOT_FOUND
    );
    // why names the pause (who, why, how to end it), not an ended schedule.
    let (s, r) = v.get("/api/v1/jobs/w/why").await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let text = r.to_string();
    assert!(text.contains("\"paused\""), "a paused reason: {r}");
    assert!(
        text.contains("shift-lead") && text.contains("line maintenance"),
        "{r}"
    );
    assert!(!text.contains("schedule_ended"), "{r}");
    assert!(
        r["conclusion"].as_str().unwrap().contains("will not fire"),
        "{r}"
    );
    let (s, list) = v.get("/api/v1/pauses").await;
    assert_eq!(s, StatusCode::OK, "{list}");
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(
        (list[0]["target"].as_str(), list[0]["name"].as_str()),
        (Some("job"), Some("w"))
    );
    let (s, j) = o.post("/api/v1/jobs/w/resume", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    assert!(j["pause"].is_null(), "{j}");
    assert_eq!(
        o.post("/api/v1/jobs/w/resume", json!({})).await.0,
        StatusCode::CONFLICT
    );

    // A group's pause.
    let (s, g) = o.post("/api/v1/groups/line1/pause", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{g}");
    assert_eq!(
        (g["group"].as_str(), g["jobs"].as_array().map(Vec::len)),
        (Some("line1"), Some(1))
    );
    assert_eq!(
        o.post("/api/v1/groups/line1/pause", json!({})).await.0,
        StatusCode::CONFLICT
    );
    assert_eq!(
        o.post("/api/v1/groups/empty/pause", json!({})).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        v.post("/api/v1/groups/line1/resume", json!({})).await.0,
        StatusCode::FORBIDDEN
    );
    let (s, g) = o.post("/api/v1/groups/line1/resume", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{g}");
    assert_eq!(g["resumed"], "line1");
    assert_eq!(
        o.post("/api/v1/groups/line1/resume", json!({})).await.0,
        StatusCode::NOT_FOUND
    );

    // A group's definition: max_running, checked; the list shows it.
    let (s, g) = o
        .put("/api/v1/groups/line1", json!({"max_running": 2}))
        .await;
    assert_eq!(s, StatusCode::OK, "{g}");
    assert_eq!(
        (g["max_running"].as_u64(), g["running"].as_u64()),
        (Some(2), Some(0))
    );
    let (s, e) = o
        .put("/api/v1/groups/line1", json!({"max_running": 0}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    assert_eq!(
        o.put("/api/v1/groups/empty", json!({"max_running": 1}))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        v.put("/api/v1/groups/line1", json!({"max_running": 1}))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    let (s, list) = v.get("/api/v1/groups").await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let line1 = list
        .as_array()
        .and_then(|l| l.iter().find(|g| g["group"] == "line1"))
        .expect("line1 listed");
    assert_eq!(line1["max_running"], 2, "{list}");
    assert!(
        line1["hold"].is_null() && line1["pause"].is_null(),
        "{list}"
    );

    // A node's pause reaches its loop through the store: a trigger waits until the resume.
    let node = format!("api-{}", std::process::id());
    assert_eq!(
        o.post("/api/v1/nodes/ghost/pause", json!({})).await.0,
        StatusCode::NOT_FOUND
    );
    let (s, n) = o
        .post(
            &format!("/api/v1/nodes/{node}/pause"),
            json!({"reason": "swap"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{n}");
    assert_eq!(
        (n["node"].as_str(), n["paused_by"].as_str()),
        (Some(node.as_str()), Some("shift-lead"))
    );
    assert_eq!(
        o.post(&format!("/api/v1/nodes/{node}/pause"), json!({}))
            .await
            .0,
        StatusCode::CONFLICT
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        o.post("/api/v1/jobs/w/trigger", json!({})).await.0,
        StatusCode::ACCEPTED
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, runs) = v.get("/api/v1/runs?job=w&state=succeeded").await;
    assert!(
        runs["items"].as_array().unwrap().is_empty(),
        "a paused node ran it: {runs}"
    );
    let (s, n) = o
        .post(&format!("/api/v1/nodes/{node}/resume"), json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{n}");
    wait_for(&v, "/api/v1/runs?job=w&state=succeeded", |r| {
        !r["items"].as_array().unwrap().is_empty()
    })
    .await;
    assert_eq!(
        o.post(&format!("/api/v1/nodes/{node}/resume"), json!({}))
            .await
            .0,
        StatusCode::NOT_FOUND
    );

    // Every pause and resume is an operator action by the token's name.
    let (_, acts) = v.get("/api/v1/actions").await;
    let done: Vec<(&str, &str)> = acts
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["action"].as_str().unwrap(), x["actor"].as_str().unwrap()))
        .collect();
    for want in [
        "pause",
        "resume",
        "group-pause",
        "group-resume",
        "node-pause",
        "node-resume",
    ] {
        assert!(
            done.contains(&(want, "shift-lead")),
            "{want} recorded: {done:?}"
        );
    }
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_page_and_stream_live_and_a_running_run_is_cancelled() {
    let d = dir("logs");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let host = host_on(store.clone(), local()).await.unwrap();
    let api = Api::of(&host);
    assert_eq!(
        api.post("/api/v1/jobs", job("chat", "t::chatty")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        api.post("/api/v1/jobs/chat/trigger", json!({})).await.0,
        StatusCode::ACCEPTED
    );
    let runs = wait_for(&api, "/api/v1/runs?job=chat", |v| {
        !v["items"].as_array().unwrap().is_empty()
    })
    .await;
    let id = runs["items"][0]["id"].as_i64().unwrap();

    // Live: every line as a `log` event with its seq as id, then `end`.
    let resp = api
        .client
        .get(format!("{}/api/v1/runs/{id}/logs/stream", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let mut resp = resp;
    let mut text = String::new();
    let end = tokio::time::Instant::now() + WAIT;
    while !text.contains("event: end") {
        let chunk = tokio::time::timeout_at(end, resp.chunk())
            .await
            .expect("the stream ends")
            .unwrap();
        match chunk {
            Some(c) => text.push_str(&String::from_utf8_lossy(&c)),
            None => break,
        }
    }
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("data: {\"seq\""))
        .collect();
    let (_, after_run) = api.get(&format!("/api/v1/runs/{id}")).await;
    assert_eq!(lines.len(), 5, "{text} {after_run}");
    assert!(lines[4].contains("line 4"), "{text}");
    assert!(
        text.contains("event: end\ndata: {\"state\":\"succeeded\"}"),
        "{text}"
    );

    // Paged, and resumed after a seq.
    let (s, page) = api.get(&format!("/api/v1/runs/{id}/logs?limit=2")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(page["lines"].as_array().unwrap().len(), 2);
    assert_eq!(page["done"], true);
    let after = page["next_after"].as_u64().unwrap();
    let (_, rest) = api
        .get(&format!("/api/v1/runs/{id}/logs?after={after}"))
        .await;
    assert_eq!(rest["lines"].as_array().unwrap().len(), 3);
    let resp = api
        .client
        .get(format!("{}/api/v1/runs/{id}/logs/stream", api.base))
        .header("last-event-id", after.to_string())
        .send()
        .await
        .unwrap();
    let body = tokio::time::timeout(WAIT, resp.text())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("data: {\"seq\""))
            .count(),
        3,
        "{body}"
    );
    assert_eq!(
        api.get("/api/v1/runs/424242/logs").await.0,
        StatusCode::NOT_FOUND
    );

    // Cancel a running run: accepted, recorded cancelled with who asked in its log.
    assert_eq!(
        api.post("/api/v1/jobs", job("stuck", "t::polite")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        api.post("/api/v1/jobs/stuck/trigger", json!({})).await.0,
        StatusCode::ACCEPTED
    );
    let running = wait_for(&api, "/api/v1/runs?job=stuck&state=running", |v| {
        !v["items"].as_array().unwrap().is_empty()
    })
    .await;
    let rid = running["items"][0]["id"].as_i64().unwrap();
    let (s, v) = api
        .post(
            &format!("/api/v1/runs/{rid}/cancel"),
            json!({"reason": "line stop"}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    wait_for(&api, &format!("/api/v1/runs/{rid}"), |v| {
        v["state"] == "cancelled"
    })
    .await;
    let (_, log) = api.get(&format!("/api/v1/runs/{rid}/logs")).await;
    assert!(log.to_string().contains("by local: line stop"), "{log}");
    let (s, v) = api
        .post(&format!("/api/v1/runs/{rid}/cancel"), json!({"why": 1}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_exactly_the_routes_served() {
    let d = dir("openapi");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let host = host_on(store, local()).await.unwrap();
    let api = Api::of(&host);
    let (s, doc) = api.get("/api/v1/openapi.json").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["title"], "takt");
    let page = &doc["paths"]["/api/v1/jobs"]["get"]["responses"]["200"]["headers"];
    for h in ["X-Next-Cursor", "Link"] {
        assert!(
            page[h].is_object(),
            "GET /api/v1/jobs documents {h}: {page}"
        );
    }
    let mut listed = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if ["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                assert!(
                    op["responses"].is_object(),
                    "{method} {path} documents its responses"
                );
                listed.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = [
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
        ("GET", "/api/v1/openapi.json"),
        ("GET", "/api/v1/nodes"),
        ("GET", "/api/v1/plugins"),
        ("POST", "/api/v1/plugins/reload"),
        ("POST", "/api/v1/schedule/preview"),
        ("GET", "/api/v1/actions"),
        ("GET", "/api/v1/alerts"),
        ("GET", "/api/v1/tokens"),
        ("POST", "/api/v1/tokens"),
        ("DELETE", "/api/v1/tokens/{name}"),
        ("GET", "/api/v1/jobs"),
        ("POST", "/api/v1/jobs"),
        ("GET", "/api/v1/jobs/{name}"),
        ("PUT", "/api/v1/jobs/{name}"),
        ("DELETE", "/api/v1/jobs/{name}"),
        ("POST", "/api/v1/jobs/{name}/trigger"),
        ("POST", "/api/v1/jobs/{name}/enable"),
        ("POST", "/api/v1/jobs/{name}/disable"),
        ("GET", "/api/v1/jobs/{name}/actions"),
        ("GET", "/api/v1/runs"),
        ("GET", "/api/v1/runs/{id}"),
        ("POST", "/api/v1/runs/{id}/cancel"),
        ("GET", "/api/v1/runs/{id}/logs"),
        ("GET", "/api/v1/runs/{id}/logs/stream"),
        ("GET", "/api/v1/jobs/{name}/why"),
        ("GET", "/api/v1/audit"),
        ("GET", "/api/v1/pauses"),
        ("POST", "/api/v1/jobs/{name}/pause"),
        ("POST", "/api/v1/jobs/{name}/resume"),
        ("POST", "/api/v1/groups/{group}/pause"),
        ("POST", "/api/v1/groups/{group}/resume"),
        ("GET", "/api/v1/groups"),
        ("PUT", "/api/v1/groups/{group}"),
        ("POST", "/api/v1/nodes/{id}/pause"),
        ("POST", "/api/v1/nodes/{id}/resume"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    assert_eq!(listed, expected);
    let served: BTreeSet<(String, String)> = takt_host::http::served_routes()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p))
        .collect();
    assert_eq!(served, listed, "the served document is the router's");
    // Every documented route is served: none answers "no such route" or "method not allowed".
    for (method, path) in &listed {
        let concrete = path
            .replace("{name}", "nope")
            .replace("{id}", "1")
            .replace("{group}", "nope");
        let m = Method::from_bytes(method.as_bytes()).unwrap();
        let body = if m == Method::POST || m == Method::PUT {
            Some(json!({}))
        } else {
            None
        };
        let (_, _, v) = api.call(m, &concrete, body, &[]).await;
        let kind = v["type"].as_str().unwrap_or("");
        assert!(
            kind != "urn:takt:problem:no-route" && kind != "urn:takt:problem:method-not-allowed",
            "{method} {path}: {v}"
        );
    }
    let (s, v) = api.get("/api/v1/nothing").await;
    assert_eq!(
        (s, v["type"].as_str()),
        (StatusCode::NOT_FOUND, Some("urn:takt:problem:no-route"))
    );
    let (s, _, v) = api.call(Method::PATCH, "/api/v1/jobs", None, &[]).await;
    assert_eq!(
        (s, v["type"].as_str()),
        (
            StatusCode::METHOD_NOT_ALLOWED,
            Some("urn:takt:problem:method-not-allowed")
        )
    );
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_nodes_plugins_previews_and_metrics() {
    let d = dir("system");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let host = host_on(
        store,
        HttpConfig {
            metrics_public: true,
            ..local()
        },
    )
    .await
    .unwrap();
    let api = Api::of(&host);
    let (_, h) = api.get("/healthz").await;
    assert_eq!(h["status"], "alive");
    let (s, r) = api.get("/readyz").await;
    assert_eq!(
        (s, r["ready"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{r}"
    );
    assert_eq!(r["plugins"]["loaded"], 1);
    let (_, nodes) = api.get("/api/v1/nodes").await;
    assert_eq!(nodes[0]["id"], format!("api-{}", std::process::id()));
    assert!(nodes[0]["heartbeat_age_secs"].as_f64().unwrap() < 60.0);
    let (_, p) = api.get("/api/v1/plugins").await;
    assert_eq!(p["versions"][0]["name"], "t");
    assert_eq!(p["versions"][0]["state"], "serving");
    assert!(
        p["handlers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["handler_type"] == "t::polite")
    );
    let (s, v) = api.post("/api/v1/plugins/reload", json!({})).await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "no plugin directory to reload: {v}"
    );

    // Schedule preview with DST notes: 02:30 on the spring-forward day in Berlin is shifted.
    let (s, prev) = api
        .post("/api/v1/schedule/preview", json!({"schedule": {"cron": "30 2 * * *", "tz": "Europe/Berlin"}, "count": 3, "after": "2026-03-28T12:00:00Z"}))
        .await;
    assert_eq!(s, StatusCode::OK, "{prev}");
    assert_eq!(prev["occurrences"].as_array().unwrap().len(), 3);
    assert_eq!(prev["occurrences"][0]["reason"], "dst_gap", "{prev}");
    for (body, field) in [
        (json!({"schedule": {"cron": "x"}}), "schedule"),
        (
            json!({"schedule": {"cron": "* * * * *"}, "count": 0}),
            "count",
        ),
        (
            json!({"schedule": {"cron": "* * * * *"}, "after": "soon"}),
            "after",
        ),
        (json!({"schedule": {"cron": "* * * * *"}, "n": 1}), ""),
    ] {
        let (s, v) = api.post("/api/v1/schedule/preview", body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        if !field.is_empty() {
            assert_eq!(v["field"].as_str(), Some(field), "{v}");
        }
    }

    // A run, then the scrape shows it (metrics_public: no token needed).
    assert_eq!(
        api.post("/api/v1/jobs", job("m", "t::ok")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        api.post("/api/v1/jobs/m/trigger", json!({})).await.0,
        StatusCode::ACCEPTED
    );
    wait_for(&api, "/api/v1/runs?job=m&state=succeeded", |v| {
        !v["items"].as_array().unwrap().is_empty()
    })
    .await;
    let resp = api
        .client
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap();
    assert!(
        resp.headers()
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = resp.text().await.unwrap();
    for needle in [
        "takt_runs_finished_total{job=\"m\",state=\"succeeded\"} 1",
        "takt_capacity 5", // capacity 4 + the recurring reserve (1)
        "takt_runs_running 0",
        "# TYPE takt_run_lateness_seconds histogram",
        "takt_run_duration_seconds_count 1",
        "# TYPE takt_claim_seconds histogram",
        "takt_store_outage 0",
        "takt_plugin_threads_abandoned 0",
        "takt_node_heartbeat_age_seconds{node=\"api-",
        "# EOF",
    ] {
        assert!(text.contains(needle), "{needle} missing in:\n{text}");
    }
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_address_is_refused_until_tokens_exist() {
    let d = dir("open");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let wide = HttpConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..HttpConfig::default()
    };
    match host_on(store.clone(), wide.clone()).await {
        Err(HostError::Http(HttpError::OpenToTheNetwork(addr))) => assert_eq!(addr, wide.listen),
        Err(e) => panic!("wrong refusal: {e}"),
        Ok(_) => panic!("an open api on the network was started"),
    }
    let t = token(&store, "ops", Role::Operator).await;
    let host = host_on(store, wide).await.expect("with a token it starts");
    let port = host.http_addr().unwrap().port();
    let api = Api {
        base: format!("http://127.0.0.1:{port}"),
        client: client(),
        token: Some(t),
    };
    assert_eq!(api.get("/api/v1/jobs").await.0, StatusCode::OK);
    host.shutdown(Duration::from_secs(2)).await;
}

/// HTTPS with `[http] tls_cert` / `tls_key` (a certificate from a CA made here): served over
/// TLS, trusted with the CA, refused without it; bad files are refused at start, naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_https_with_the_configured_certificate() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let d = dir("tls");
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    std::fs::write(d.join("api.crt"), leaf.pem()).unwrap();
    std::fs::write(d.join("api.key"), leaf_key.serialize_pem()).unwrap();
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let broken = HttpConfig {
        tls: Some(takt_host::http::TlsFiles {
            cert: d.join("missing.crt"),
            key: d.join("api.key"),
        }),
        ..local()
    };
    match host_on(store.clone(), broken).await {
        Err(HostError::Http(e @ HttpError::Tls { .. })) => {
            assert!(e.to_string().contains("missing.crt"), "{e}")
        }
        Err(e) => panic!("wrong refusal: {e}"),
        Ok(_) => panic!("started without its certificate"),
    }
    let config = HttpConfig {
        tls: Some(takt_host::http::TlsFiles {
            cert: d.join("api.crt"),
            key: d.join("api.key"),
        }),
        ..local()
    };
    let host = host_on(store, config).await.unwrap();
    let port = host.http_addr().unwrap().port();
    assert!(host.http().unwrap().base_url().starts_with("https://"));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let trusting = reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap()])
        .build()
        .unwrap();
    let r = trusting
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let plain = client()
        .get(format!("http://localhost:{port}/healthz"))
        .send()
        .await;
    assert!(
        plain.is_err() || plain.unwrap().status() != StatusCode::OK,
        "no plain http on the tls port"
    );
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_deliveries_are_listed_newest_first_and_a_bad_limit_is_refused() {
    use takt_core::alert::{AlertDelivery, AlertKey, DeliveryOutcome};
    let d = dir("alerts");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let host = host_on(store.clone(), local()).await.unwrap();
    let api = Api::of(&host);

    let (s, v) = api.get("/api/v1/alerts").await;
    assert_eq!(
        (s, v.as_array().map(Vec::len)),
        (StatusCode::OK, Some(0)),
        "{v}"
    );
    for (n, outcome) in [(1, DeliveryOutcome::Sent), (2, DeliveryOutcome::Failed)] {
        store
            .alert_delivery_add(&AlertDelivery {
                id: None,
                at: Timestamp::from_second(1_800_000_000 + n).unwrap(),
                node: "n1".into(),
                channel: "ops-mail".into(),
                key: AlertKey {
                    subject: "job:nightly".into(),
                    condition: "failed".into(),
                },
                kind: "firing".into(),
                run: Some(n),
                outcome,
                detail: format!("delivery {n}"),
            })
            .await
            .unwrap();
    }
    let (s, v) = api.get("/api/v1/alerts?limit=10").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 2, "{v}");
    assert_eq!(list[0]["detail"], "delivery 2", "newest first: {v}");
    assert_eq!(list[0]["outcome"], "failed", "{v}");
    assert_eq!(list[1]["channel"], "ops-mail", "{v}");
    assert_eq!(list[1]["subject"], "job:nightly", "{v}");
    let (s, v) = api.get("/api/v1/alerts?limit=0").await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("limit")),
        "{v}"
    );
}
