//! The built-in `http::request` executor inside a real host (HostBuilder, MemoryStore, the
//! real executor with its timeouts, retries and cancel) against HTTP servers on 127.0.0.1
//! started by the test: success (JSON, text in a legacy charset, a JSON body posted through a
//! connection), a 500 retried per the job's policy, a 404 not retried, timeouts, a cancel
//! mid-request, bodies capped, redirects, and a connection's token never in the job's
//! params, the run's error or result, or its log.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use takt_core::job::JobDef;
use takt_core::policy::{Backoff, RetryPolicy};
use takt_core::run::{Run, RunState};
use takt_core::store::Store;
use takt_core::store::memory::MemoryStore;
use takt_host::embed::{Host, HostBuilder};
use takt_host::scheduler::SchedulerEvent;
use takt_plugin_http::{ConnectionSpec, HttpOptions};

use common::http::{Reply, Request, Server};
use common::jobs::result;

const TOKEN: &str = "Bearer tok-SECRET-api";
const API_KEY: &str = "key-SECRET-api";

/// The servers every test shares (a static plugin is built once per process, with the
/// connections that point at them): `api`, and `other`, a second origin for redirects.
struct Servers {
    api: Server,
    other: Server,
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let other = Server::start(|r: &Request| {
            Reply::with(200, "application/json", json!({"at": r.path()}).to_string())
        });
        let other_url = other.url("/landed");
        let flaky = std::sync::Mutex::new(std::collections::HashSet::new());
        let api = Server::start(move |r: &Request| route(r, &other_url, &flaky));
        Servers { api, other }
    })
}

fn route(
    r: &Request,
    other: &str,
    flaky: &std::sync::Mutex<std::collections::HashSet<String>>,
) -> Reply {
    let path = r.path();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["json"] => Reply::with(200, "application/json", r#"{"ok":true,"n":3}"#),
        // "产量 12" in GBK, as an old service on a Chinese Windows answers.
        ["gbk"] => Reply::with(
            200,
            "text/plain; charset=GBK",
            [0xb2, 0xfa, 0xc1, 0xbf, b' ', b'1', b'2'],
        ),
        ["echo", ..] => Reply::with(
            201,
            "application/json",
            json!({
                "method": r.method,
                "target": r.target,
                "contentType": r.header("content-type"),
                "body": String::from_utf8_lossy(&r.body),
            })
            .to_string(),
        ),
        ["status", code, ..] => Reply::with(
            code.parse().unwrap(),
            "text/plain",
            format!("status {code} here"),
        ),
        ["flaky", ..] => {
            if flaky.lock().unwrap().insert(path.to_string()) {
                Reply::with(503, "text/plain", "warming up")
            } else {
                Reply::with(200, "application/json", r#"{"warm":true}"#)
            }
        }
        ["big", ..] => Reply::with(200, "text/plain", vec![b'x'; 1 << 20]),
        ["hang", ..] => Reply::Hang,
        ["redirect", "same"] => Reply::redirect(302, "/json"),
        ["redirect", "other"] => Reply::redirect(302, other),
        ["redirect", "loop"] => Reply::redirect(302, "/redirect/loop"),
        ["redirect", "see-other"] => Reply::redirect(303, "/echo/after-303"),
        _ => Reply::with(404, "text/plain", "no such route"),
    }
}

fn http_plugin() -> takt_plugin_api::abi::PluginRef {
    static PLUGIN: OnceLock<takt_plugin_api::abi::PluginRef> = OnceLock::new();
    *PLUGIN.get_or_init(|| {
        let s = servers();
        let mut options = HttpOptions::default();
        let spec = ConnectionSpec {
            url: Some(s.api.url("/")),
            headers: [("Authorization", TOKEN), ("X-Api-Key", API_KEY)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ca_file: None,
        };
        options.add("api", &spec, "the test").unwrap();
        takt_plugin_api::static_plugin!(move || takt_plugin_http::plugin(options)).unwrap()
    })
}

struct Fixture {
    host: Host<MemoryStore>,
    store: MemoryStore,
}

impl Fixture {
    async fn start() -> Fixture {
        let store = MemoryStore::default();
        let host = HostBuilder::new(store.clone())
            .static_plugin(http_plugin())
            .node("http-test")
            .capacity(2)
            .start()
            .await
            .expect("the host starts");
        Fixture { host, store }
    }

    async fn run(&self, params: Json) -> (Run, Vec<String>) {
        self.run_with(params, |_| {}).await
    }

    /// Runs a one-off `http::request` job with `params`, shaped by `shape` (timeout, retries).
    async fn run_with(&self, params: Json, shape: impl FnOnce(&mut JobDef)) -> (Run, Vec<String>) {
        let n = self.store.job_list().await.unwrap().len();
        let mut job = JobDef::new(&format!("http-{n}"), "http::request").unwrap();
        job.params_json = params.to_string();
        shape(&mut job);
        common::jobs::run_job(&self.host, &self.store, job).await
    }

    /// Everything takt stored about its jobs and runs, as text: params, errors, results, logs.
    async fn everything_stored(&self) -> String {
        let mut out = String::new();
        for job in self.store.job_list().await.unwrap() {
            out.push_str(&job.params_json);
            let runs = self
                .store
                .run_list(&takt_core::store::RunFilter {
                    job: job.id,
                    state: None,
                    limit: 100,
                    ..takt_core::store::RunFilter::default()
                })
                .await
                .unwrap();
            for run in runs {
                out.push_str(run.error.as_deref().unwrap_or(""));
                out.push_str(run.result_json.as_deref().unwrap_or(""));
                for (_, line) in self
                    .store
                    .log_list(run.id.unwrap(), None, 1000)
                    .await
                    .unwrap()
                {
                    out.push_str(&line.message);
                    out.push('\n');
                }
            }
        }
        out
    }

    async fn stop(self) {
        self.host.shutdown(Duration::from_secs(1)).await;
    }
}

fn retries(n: u32) -> impl FnOnce(&mut JobDef) {
    move |job| job.retry = RetryPolicy::new(n, Backoff::None)
}

fn error(run: &Run) -> &str {
    run.error.as_deref().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_text_answers_become_the_result() {
    let s = servers();
    let f = Fixture::start().await;
    let (run, log) = f.run(json!({"url": s.api.url("/json")})).await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    let r = result(&run);
    assert_eq!(r["status"], 200);
    assert_eq!(r["bodyKind"], "json");
    assert_eq!(r["body"], json!({"ok": true, "n": 3}));
    assert_eq!(r["truncated"], false);
    assert_eq!(r["contentType"], "application/json");
    assert_eq!(log[0], format!("GET {}", s.api.url("/json")), "{log:?}");
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[1].starts_with("200 OK in "), "{log:?}");
    assert!(log[1].ends_with("17 bytes of application/json"), "{log:?}");

    let (run, _) = f.run(json!({"url": s.api.url("/gbk")})).await;
    let r = result(&run);
    assert_eq!(
        (r["bodyKind"].as_str(), r["body"].as_str()),
        (Some("text"), Some("产量 12"))
    );

    // Through the connection: the path below its base URL, a query, a JSON body.
    let (run, log) = f
        .run(
            json!({"method": "post", "connection": "api", "path": "/echo/posted",
                    "query": {"line": 3, "shift": ["A", "B"]}, "json": {"count": 12}}),
        )
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    let r = result(&run);
    assert_eq!(r["status"], 201);
    assert_eq!(r["connection"], "api");
    assert_eq!(r["body"]["method"], "POST");
    assert_eq!(r["body"]["target"], "/echo/posted?line=3&shift=A&shift=B");
    assert_eq!(r["body"]["contentType"], "application/json");
    assert_eq!(r["body"]["body"], r#"{"count":12}"#);
    assert_eq!(
        log[0],
        format!(
            "POST {}?line=3&shift=A&shift=B (connection api)",
            s.api.url("/echo/posted")
        ),
        "{log:?}"
    );
    let sent = s
        .api
        .requests()
        .into_iter()
        .find(|r| r.path() == "/echo/posted")
        .unwrap();
    assert_eq!(sent.header("authorization"), Some(TOKEN));
    assert_eq!(sent.header("x-api-key"), Some(API_KEY));
    assert!(sent.header("user-agent").unwrap().starts_with("takt/"));
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_is_retried_per_the_job_policy_and_a_404_is_not() {
    let s = servers();
    let f = Fixture::start().await;
    let (run, log) = f
        .run_with(
            json!({"connection": "api", "path": "status/500/retried"}),
            retries(2),
        )
        .await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.attempt, 3, "two retries after the first attempt");
    assert_eq!(s.api.hits("/status/500/retried"), 3);
    let e = error(&run);
    assert!(e.contains("answered 500 Internal Server Error"), "{e}");
    assert!(
        e.contains("retryable (retryStatuses: 408, 429, 5xx)"),
        "{e}"
    );
    assert!(e.contains("body: status 500 here"), "{e}");
    assert!(
        log.iter()
            .any(|l| l.starts_with("500 Internal Server Error in ")),
        "{log:?}"
    );

    let (run, _) = f
        .run_with(json!({"url": s.api.url("/flaky/once")}), retries(2))
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    assert_eq!(run.attempt, 2, "the 503 was retried once");
    assert_eq!(result(&run)["body"], json!({"warm": true}));

    let (run, _) = f
        .run_with(
            json!({"connection": "api", "path": "status/404/once"}),
            retries(2),
        )
        .await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.attempt, 1, "a 404 is not retried");
    assert_eq!(s.api.hits("/status/404/once"), 1);
    assert!(
        error(&run).contains("not retried (retryStatuses: 408, 429, 5xx)"),
        "{}",
        error(&run)
    );

    // The job decides: a 404 can be a success, a 503 not worth a retry.
    let (run, _) = f
        .run(json!({"url": s.api.url("/status/404/fine"), "successStatuses": ["2xx", 404]}))
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    let (run, _) = f
        .run_with(
            json!({"url": s.api.url("/status/503/final"), "retryStatuses": []}),
            retries(2),
        )
        .await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 1));

    // Nothing listens here: a connect failure sent nothing, so it is retried.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (run, _) = f
        .run_with(
            json!({"method": "POST", "url": format!("http://127.0.0.1:{port}/x"), "body": "a"}),
            retries(1),
        )
        .await;
    assert_eq!(
        (run.state, run.attempt),
        (RunState::Failed, 2),
        "{:?}",
        run.error
    );
    assert!(error(&run).contains("cannot connect"), "{}", error(&run));
    assert!(error(&run).contains("nothing was sent"), "{}", error(&run));
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_cancel_close_the_connection() {
    let s = servers();
    let f = Fixture::start().await;
    // The request's own limit: a retryable failure for a GET, not for a POST.
    let started = Instant::now();
    let (run, _) = f
        .run(json!({"url": s.api.url("/hang/own"), "timeoutMs": 300}))
        .await;
    assert_eq!(run.state, RunState::Failed);
    assert!(
        error(&run).contains("no answer within timeoutMs 300"),
        "{}",
        error(&run)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let (run, _) = f
        .run_with(
            json!({"method": "POST", "url": s.api.url("/hang/post"), "timeoutMs": 300, "body": "x"}),
            retries(2),
        )
        .await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 1));
    assert!(
        error(&run).contains("not idempotent, so it is not retried"),
        "{}",
        error(&run)
    );
    assert_eq!(
        s.api.hangups(2, Duration::from_secs(5)).len(),
        2,
        "both connections closed"
    );

    // The job's timeout: the host stops the run and records it timed out.
    let (run, _) = f
        .run_with(json!({"url": s.api.url("/hang/job")}), |job| {
            job.timeout = Some(Duration::from_secs(1));
        })
        .await;
    assert_eq!(run.state, RunState::TimedOut, "{:?}", run.error);
    assert_eq!(s.api.hangups(3, Duration::from_secs(5)).len(), 3);

    // A cancel mid-request: the run ends cancelled and the server sees the hang-up at once.
    let mut events = f.host.subscribe();
    let mut job = JobDef::new("cancelled", "http::request").unwrap();
    job.params_json = json!({"url": s.api.url("/hang/cancel")}).to_string();
    let id = f.host.add_job(job).await.unwrap().id.unwrap();
    f.host.trigger(id).await.unwrap();
    let run_id = loop {
        if let Ok(SchedulerEvent::Started { run, .. }) = events.recv().await {
            break run;
        }
    };
    let until = Instant::now() + Duration::from_secs(30);
    while s.api.hits("/hang/cancel") == 0 {
        assert!(Instant::now() < until, "the request never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cancelled_at = Instant::now();
    assert!(f.host.cancel_run(run_id, "test").await);
    let hangups = s.api.hangups(4, Duration::from_secs(5));
    assert_eq!(hangups.len(), 4, "the connection was closed");
    let closed_after = hangups.iter().max().unwrap().duration_since(cancelled_at);
    assert!(
        closed_after < Duration::from_secs(2),
        "closed {closed_after:?} after the cancel"
    );
    let run = loop {
        if let Ok(SchedulerEvent::Finished { run, state, .. }) = events.recv().await
            && run == run_id
        {
            assert_eq!(state, RunState::Cancelled);
            break f.store.run_get(run).await.unwrap().unwrap();
        }
    };
    assert_eq!(run.state, RunState::Cancelled);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_are_capped() {
    let s = servers();
    let f = Fixture::start().await;
    let (run, log) = f
        .run(json!({"url": s.api.url("/big/small-limit"), "responseLimit": 1000}))
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    let r = result(&run);
    assert_eq!(r["bodyBytes"], 1000);
    assert_eq!(r["truncated"], true);
    assert_eq!(r["contentLength"], 1 << 20);
    assert_eq!(r["body"].as_str().unwrap().len(), 1000);
    assert!(
        log.iter()
            .any(|l| l.contains("1000 bytes kept (cut at responseLimit)")),
        "{log:?}"
    );
    let (run, _) = f.run(json!({"url": s.api.url("/big/default")})).await;
    let r = result(&run);
    assert_eq!(
        (r["bodyBytes"].as_u64(), r["truncated"].as_bool()),
        (Some(65536), Some(true))
    );
    assert!(run.result_json.as_deref().unwrap().len() < 70_000);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_within_bounds_and_headers_stay_on_their_origin() {
    let s = servers();
    let f = Fixture::start().await;
    let (run, log) = f
        .run(json!({"connection": "api", "path": "redirect/same"}))
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    let r = result(&run);
    assert_eq!(r["url"], s.api.url("/json"));
    assert_eq!(r["redirects"], json!([s.api.url("/json")]));
    assert!(
        log.iter()
            .any(|l| l == &format!("302 Found: redirected to {}", s.api.url("/json"))),
        "{log:?}"
    );

    // To another origin: the connection's headers are not sent there.
    let (run, log) = f
        .run(json!({"connection": "api", "path": "redirect/other"}))
        .await;
    assert_eq!(run.state, RunState::Succeeded, "{:?}", run.error);
    assert_eq!(result(&run)["body"], json!({"at": "/landed"}));
    let landed = s
        .other
        .requests()
        .into_iter()
        .find(|r| r.path() == "/landed")
        .unwrap();
    assert_eq!(landed.header("authorization"), None);
    assert_eq!(landed.header("x-api-key"), None);
    assert!(
        log.iter()
            .any(|l| l
                .contains("another origin than connection api's: its headers are not sent there")),
        "{log:?}"
    );

    let (run, _) = f
        .run_with(json!({"url": s.api.url("/redirect/loop")}), retries(2))
        .await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 1));
    assert!(
        error(&run).contains("more than maxRedirects (5) redirects"),
        "{}",
        error(&run)
    );
    assert_eq!(s.api.hits("/redirect/loop"), 6);

    let (run, _) = f
        .run(json!({"url": s.api.url("/redirect/same"), "maxRedirects": 0}))
        .await;
    assert_eq!(run.state, RunState::Failed);
    assert!(
        error(&run).contains("answered 302 Found, which is not in successStatuses (2xx)"),
        "{}",
        error(&run)
    );

    // 303 after a POST: the next request is a GET without the body.
    let (run, _) = f
        .run(json!({"method": "POST", "url": s.api.url("/redirect/see-other"), "body": "x"}))
        .await;
    let r = result(&run);
    assert_eq!(
        (r["method"].as_str(), r["body"]["method"].as_str()),
        (Some("GET"), Some("GET"))
    );
    assert_eq!(r["body"]["body"], "");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_token_is_never_stored() {
    let s = servers();
    let f = Fixture::start().await;
    let (ok, _) = f.run(json!({"connection": "api", "path": "json"})).await;
    assert_eq!(ok.state, RunState::Succeeded);
    let (failed, _) = f
        .run_with(
            json!({"connection": "api", "path": "status/500/token"}),
            retries(1),
        )
        .await;
    assert_eq!(failed.state, RunState::Failed);
    let (moved, _) = f
        .run(json!({"connection": "api", "path": "redirect/other"}))
        .await;
    assert_eq!(moved.state, RunState::Succeeded);
    // A secret-looking query value of the job is masked in what is shown.
    let (masked, log) = f
        .run(json!({"url": s.api.url("/json"), "query": {"access_token": "qs-SECRET"}}))
        .await;
    assert_eq!(result(&masked)["url"], s.api.url("/json?access_token=***"));
    assert_eq!(
        log[0],
        format!("GET {}?access_token=***", s.api.url("/json"))
    );
    assert!(
        s.api
            .requests()
            .iter()
            .any(|r| r.header("authorization") == Some(TOKEN))
    );
    let stored = f.everything_stored().await;
    let shown: Vec<&str> = stored.lines().filter(|l| l.contains("SECRET")).collect();
    // The job's own query value is in its params (the job wrote it), nowhere else.
    assert!(
        shown
            .iter()
            .all(|l| l.contains(r#""access_token":"qs-SECRET""#)),
        "{shown:#?}"
    );
    assert!(
        !stored.contains("tok-SECRET") && !stored.contains("key-SECRET"),
        "{stored}"
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_params_fail_at_once_naming_the_key() {
    let f = Fixture::start().await;
    for (params, want) in [
        (
            json!({"connection": "nope"}),
            "connection \"nope\" is not configured; this host has: api",
        ),
        (
            json!({"connection": "api", "path": "x", "headers": {"X-Api-Key": "mine"}}),
            "headers: x-api-key is set by connection api (the test)",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "timout": 5}),
            "unknown field `timout`, expected one of",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "headers": {"Authorization": "Bearer x"}}),
            "Authorization carries credentials",
        ),
    ] {
        let (run, _) = f.run_with(params.clone(), retries(2)).await;
        assert_eq!((run.state, run.attempt), (RunState::Failed, 1), "{params}");
        let e = error(&run);
        assert!(e.starts_with("invalid-params: "), "{e}");
        assert!(e.contains(want), "{params}: {e}\n  wanted: {want}");
    }
    f.stop().await;
}
