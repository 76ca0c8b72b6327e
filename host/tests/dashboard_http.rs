//! The dashboard (`/ui/…`) over plain HTTP, on an embedded host: sign-in with a token into
//! an HttpOnly, SameSite=Strict session cookie, wrong tokens refused, sign-out and a revoked
//! token ending the session; CSRF (a POST without or with a wrong token refused 403, nothing
//! done); each role's buttons present or absent in the HTML, and the role enforced on the
//! POST regardless; the actions done through the API's functions (recorded with the token's
//! name); the edit form's version (a stale edit refused 412, its text kept); every page
//! rendering in English and in Simplified Chinese; the live log tail; the overview's page
//! weight; and the outage banner (503, not 500) with PostgreSQL cut behind a proxy.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use reqwest::StatusCode;
use serde_json::{Value, json};
use takt_core::store::Store;
use takt_core::store::access::{NewToken, Role};
use takt_host::embed::{Host, HostBuilder};
use takt_host::http::HttpConfig;
use takt_host::http::auth::new_token;
use takt_host::store::{SqliteOptions, SqliteStore};
use takt_plugin_api::sdk::{JobContext, JobError, Plugin};
use takt_plugin_api::static_plugin;

const WAIT: Duration = Duration::from_secs(20);

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("takt-dash-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn plugin() -> Plugin {
    Plugin::new("t")
        .handler("ok", "succeeds", |_: &JobContext, v: Value| {
            Ok(json!({"got": v}))
        })
        .handler(
            "chatty",
            "logs lines until cancelled",
            |ctx: &JobContext, _: Value| -> Result<(), JobError> {
                for i in 0..600 {
                    ctx.info(&format!("line {i}"));
                    ctx.sleep(Duration::from_millis(100))?;
                }
                Ok(())
            },
        )
}

async fn host_on<S: Store + Clone + 'static>(store: S) -> Host<S> {
    let t = static_plugin!(plugin).expect("a valid static plugin");
    HostBuilder::new(store)
        .static_plugin(t)
        .node(format!("dash-{}", std::process::id()))
        .capacity(4)
        .grace(Duration::from_secs(2))
        .http(HttpConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..HttpConfig::default()
        })
        .start()
        .await
        .unwrap()
}

async fn token<S: Store>(store: &S, name: &str, role: Role) -> String {
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

fn form_encode(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A browser without JavaScript: cookies kept by hand, redirects not followed.
struct Browser {
    base: String,
    client: reqwest::Client,
    cookies: HashMap<String, String>,
    lang: Option<&'static str>,
}

struct Page {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Page {
    fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    /// The value of the first `name="…" value="…"` hidden input.
    fn hidden(&self, name: &str) -> String {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self
            .body
            .find(&marker)
            .unwrap_or_else(|| panic!("no hidden {name} in:\n{}", self.body))
            + marker.len();
        self.body[start..].split('"').next().unwrap().to_string()
    }
}

impl Browser {
    fn new(host_addr: std::net::SocketAddr) -> Browser {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Browser {
            base: format!("http://{host_addr}"),
            client: reqwest::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: HashMap::new(),
            lang: None,
        }
    }

    async fn send(&mut self, method: reqwest::Method, path: &str, body: Option<String>) -> Page {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if !self.cookies.is_empty() {
            let c: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.header("cookie", c.join("; "));
        }
        if let Some(l) = self.lang {
            req = req.header("accept-language", l);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/x-www-form-urlencoded")
                .body(b);
        }
        let resp = req.send().await.expect("the dashboard answers");
        let page = Page {
            status: resp.status(),
            headers: resp.headers().clone(),
            body: String::new(),
        };
        let body = resp.text().await.unwrap();
        let page = Page { body, ..page };
        for c in page.set_cookies() {
            let (kv, attrs) = c.split_once(';').unwrap_or((&c, ""));
            let (k, v) = kv.split_once('=').unwrap();
            if attrs.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_string(), v.to_string());
            }
        }
        page
    }

    async fn get(&mut self, path: &str) -> Page {
        self.send(reqwest::Method::GET, path, None).await
    }

    async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        self.send(reqwest::Method::POST, path, Some(form_encode(fields)))
            .await
    }

    async fn sign_in(&mut self, token: &str) -> Page {
        let form = self.get("/ui/signin?next=/ui/jobs").await;
        assert_eq!(form.status, StatusCode::OK, "{}", form.body);
        let nonce = form.hidden("nonce");
        self.post(
            "/ui/signin",
            &[("nonce", &nonce), ("next", "/ui/jobs"), ("token", token)],
        )
        .await
    }

    /// The session's CSRF token, from the sign-out form every page has.
    async fn csrf(&mut self) -> String {
        let p = self.get("/ui/jobs").await;
        assert_eq!(p.status, StatusCode::OK, "{}", p.body);
        p.hidden("csrf")
    }
}

async fn add_job<S: Store + Clone + 'static>(host: &Host<S>, name: &str, handler: &str) {
    let mut job = takt_core::job::JobDef::new(name, handler).unwrap();
    job.params_json = json!({"line": 3, "password": "s3cret"}).to_string();
    job.schedule = Some(
        takt_host::spec::ScheduleSpec {
            cron: Some("0 0 6 * * *".into()),
            tz: Some("Asia/Shanghai".into()),
            ..Default::default()
        }
        .to_schedule()
        .unwrap(),
    );
    host.handle().add_job(job).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_sessions_csrf_and_roles() {
    let d = dir("roles");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let viewer = token(&store, "wall-screen", Role::Viewer).await;
    let operator = token(&store, "shift-lead", Role::Operator).await;
    let admin = token(&store, "it", Role::Admin).await;
    let host = host_on(store.clone()).await;
    add_job(&host, "press-report", "t::ok").await;
    let addr = host.http_addr().unwrap();

    // `/` and `/ui/` without a session: to the sign-in page, coming back afterwards.
    let mut anon = Browser::new(addr);
    let p = anon.get("/").await;
    assert_eq!((p.status, p.location()), (StatusCode::SEE_OTHER, "/ui/"));
    let p = anon.get("/ui/runs?state=failed").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(
        p.location(),
        "/ui/signin?next=%2Fui%2Fruns%3Fstate%3Dfailed"
    );

    // A wrong token: 401 on the form, no session; the sign-in form's own CSRF check.
    let p = anon.sign_in("takt_nope").await;
    assert_eq!(p.status, StatusCode::UNAUTHORIZED, "{}", p.body);
    assert!(p.body.contains("not valid"), "{}", p.body);
    assert!(!anon.cookies.contains_key("takt_session"));
    let p = anon
        .post("/ui/signin", &[("nonce", "forged"), ("token", &viewer)])
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(!anon.cookies.contains_key("takt_session"));

    // The viewer: a session cookie with the right flags; no action button anywhere.
    let mut v = Browser::new(addr);
    let p = v.sign_in(&viewer).await;
    assert_eq!(
        (p.status, p.location()),
        (StatusCode::SEE_OTHER, "/ui/jobs")
    );
    let session = p
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("takt_session="))
        .expect("a session cookie");
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(session.contains(flag), "{session}");
    }
    assert!(!session.contains("Secure"), "plain http: {session}");
    let page = v.get("/ui/jobs/press-report").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("wall-screen"), "who is signed in");
    for button in ["do-trigger", "do-pause", "do-disable", "do-edit"] {
        assert!(!page.body.contains(button), "a viewer sees no {button}");
    }
    assert!(
        page.body
            .contains("&quot;password&quot;: &quot;********&quot;"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("s3cret"));
    // The server refuses the viewer's hand-made POST with a good CSRF token: the role is
    // checked on the server, whatever the page showed.
    let csrf = page.hidden("csrf");
    let p = v
        .post("/ui/jobs/press-report/do/trigger", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(p.body.contains("needs the operator role"), "{}", p.body);

    // The operator: trigger, pause, resume, enable, disable; no edit.
    let mut o = Browser::new(addr);
    assert_eq!(o.sign_in(&operator).await.status, StatusCode::SEE_OTHER);
    let page = o.get("/ui/jobs/press-report").await;
    for button in ["do-trigger", "do-pause", "do-disable"] {
        assert!(page.body.contains(button), "an operator sees {button}");
    }
    assert!(!page.body.contains("do-edit"), "an operator cannot edit");
    let p = o.get("/ui/jobs/press-report/edit").await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    let csrf = o.csrf().await;
    let p = o
        .post(
            "/ui/jobs/press-report/edit",
            &[("csrf", &csrf), ("version", "1"), ("definition", "{}")],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(p.body.contains("needs the admin role"), "{}", p.body);

    // Forged POSTs: no CSRF token, a wrong one, no session at all — refused, nothing done.
    let runs_before = store
        .run_list(&takt_core::store::RunFilter::default())
        .await
        .unwrap()
        .len();
    let p = o.post("/ui/jobs/press-report/do/trigger", &[]).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    let p = o
        .post(
            "/ui/jobs/press-report/do/trigger",
            &[(
                "csrf",
                "0000000000000000000000000000000000000000000000000000000000000000",
            )],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(p.body.contains("not sent by this dashboard"), "{}", p.body);
    let p = anon
        .post("/ui/jobs/press-report/do/trigger", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "no session: {}", p.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        store
            .run_list(&takt_core::store::RunFilter::default())
            .await
            .unwrap()
            .len(),
        runs_before,
        "no forged POST made a run"
    );

    // A real trigger: back to the job with a notice; the run appears; the action is recorded
    // with the token's name.
    let p = o
        .post("/ui/jobs/press-report/do/trigger", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert!(
        p.location()
            .starts_with("/ui/jobs/press-report?done=trigger"),
        "{}",
        p.location()
    );
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let page = o.get("/ui/runs?job=press-report").await;
        if page.body.contains("st-succeeded") {
            break;
        }
        assert!(tokio::time::Instant::now() < end, "{}", page.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = o.get(p.location()).await;
    assert!(page.body.contains("id=\"notice\""), "{}", page.body);
    assert!(
        page.body.contains("shift-lead"),
        "the history names the token"
    );
    let actions = store.action_list(Some("press-report"), 10).await.unwrap();
    assert_eq!(actions[0].action, "trigger");
    assert_eq!(actions[0].actor, "shift-lead");

    // Pause (with a reason) and resume; disable and enable.
    let p = o
        .post(
            "/ui/jobs/press-report/do/pause",
            &[("csrf", &csrf), ("reason", "die change")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let page = o.get("/ui/jobs/press-report").await;
    assert!(page.body.contains("do-resume") && !page.body.contains("do-pause"));
    assert!(page.body.contains("die change"));
    let p = o
        .post("/ui/jobs/press-report/do/pause", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::CONFLICT, "already paused: {}", p.body);
    let p = o
        .post("/ui/jobs/press-report/do/resume", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let p = o
        .post("/ui/jobs/press-report/do/disable", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let page = o.get("/ui/jobs/press-report").await;
    assert!(page.body.contains("do-enable") && !page.body.contains("do-trigger"));
    let p = o
        .post("/ui/jobs/press-report/do/enable", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let p = o
        .post("/ui/jobs/press-report/do/explode", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    let p = o
        .post("/ui/jobs/no-such-job/do/trigger", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND, "{}", p.body);
    let names: Vec<String> = store
        .action_list(Some("press-report"), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action)
        .collect();
    assert_eq!(
        names,
        ["enable", "disable", "resume", "pause", "trigger"],
        "newest first"
    );

    // The admin edits, with the version read; a stale version is refused and the text kept.
    let mut a = Browser::new(addr);
    assert_eq!(a.sign_in(&admin).await.status, StatusCode::SEE_OTHER);
    let page = a.get("/ui/jobs/press-report").await;
    assert!(page.body.contains("do-edit"));
    let form = a.get("/ui/jobs/press-report/edit").await;
    assert_eq!(form.status, StatusCode::OK, "{}", form.body);
    let version = form.hidden("version");
    let csrf = form.hidden("csrf");
    let job = store
        .job_get_by_name(&takt_core::job::JobName::new("press-report").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(version, job.version.to_string());
    let edited = json!({
        "handler": "t::ok",
        "params": {"line": 4, "password": "********"},
        "schedule": {"cron": "0 30 6 * * *", "tz": "Asia/Shanghai"},
        "description": "nightly press report",
    })
    .to_string();
    let stale = (job.version - 1).to_string();
    let p = a
        .post(
            "/ui/jobs/press-report/edit",
            &[
                ("csrf", &csrf),
                ("version", &stale),
                ("definition", &edited),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::PRECONDITION_FAILED, "{}", p.body);
    assert!(p.body.contains("nightly press report"), "the text is kept");
    let p = a
        .post(
            "/ui/jobs/press-report/edit",
            &[
                ("csrf", &csrf),
                ("version", &version),
                ("definition", "{not json"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(p.body.contains("id=\"edit-error\""), "{}", p.body);
    let p = a
        .post(
            "/ui/jobs/press-report/edit",
            &[
                ("csrf", &csrf),
                ("version", &version),
                ("definition", &edited),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let job = store.job_get(job.id.unwrap()).await.unwrap().unwrap();
    assert_eq!(job.description.as_deref(), Some("nightly press report"));
    let params: Value = serde_json::from_str(&job.params_json).unwrap();
    assert_eq!(
        params,
        json!({"line": 4, "password": "s3cret"}),
        "mask kept"
    );
    assert_eq!(
        store.action_list(Some("press-report"), 1).await.unwrap()[0].actor,
        "it"
    );

    // Sign out: the cookie is cleared and the session is gone on the server too.
    let session = v.cookies.get("takt_session").cloned().unwrap();
    let csrf = v.csrf().await;
    let p = v.post("/ui/signout", &[("csrf", &csrf)]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert!(!v.cookies.contains_key("takt_session"));
    v.cookies.insert("takt_session".into(), session);
    assert_eq!(v.get("/ui/").await.status, StatusCode::SEE_OTHER, "closed");

    // A revoked token ends its sessions (within the token cache's 2 s).
    assert_eq!(o.get("/ui/").await.status, StatusCode::OK);
    store
        .token_revoke("shift-lead", Timestamp::now())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(o.get("/ui/").await.status, StatusCode::SEE_OTHER);
    host.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_renders_in_both_languages_and_the_log_streams() {
    let d = dir("pages");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let host = host_on(store.clone()).await;
    add_job(&host, "press-report", "t::ok").await;
    add_job(&host, "line 3 / 日报", "t::chatty").await;
    let addr = host.http_addr().unwrap();

    // No token exists: from loopback, an empty token signs in as the local administrator.
    let mut b = Browser::new(addr);
    let form = b.get("/ui/signin").await;
    assert!(form.body.contains("local administrator"), "{}", form.body);
    let p = b.sign_in("").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let csrf = b.csrf().await;
    let p = b
        .post(
            &format!("/ui/jobs/{}/do/trigger", enc("line 3 / 日报")),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let p = b
        .post("/ui/jobs/press-report/do/trigger", &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let end = tokio::time::Instant::now() + WAIT;
    let running = loop {
        let runs = store
            .run_list(&takt_core::store::RunFilter::default())
            .await
            .unwrap();
        if let Some(r) = runs
            .iter()
            .find(|r| r.state == takt_core::run::RunState::Running)
            && runs
                .iter()
                .any(|r| r.state == takt_core::run::RunState::Succeeded)
        {
            break r.id.unwrap().0;
        }
        assert!(tokio::time::Instant::now() < end, "{runs:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let pages = [
        "/ui/".to_string(),
        "/ui/jobs".into(),
        "/ui/jobs/press-report".into(),
        format!("/ui/jobs/{}", enc("line 3 / 日报")),
        "/ui/jobs/press-report/edit".into(),
        "/ui/runs".into(),
        "/ui/runs?state=running".into(),
        format!("/ui/runs/{running}"),
        "/ui/nodes".into(),
        "/ui/plugins".into(),
        "/ui/audit".into(),
    ];
    let mut weight = 0;
    for lang in ["en-US,en;q=0.9", "zh-CN,zh;q=0.9"] {
        b.lang = Some(lang);
        for path in &pages {
            let p = b.get(path).await;
            assert_eq!(p.status, StatusCode::OK, "{lang} {path}: {}", p.body);
            let ct = p.headers.get("content-type").unwrap().to_str().unwrap();
            assert_eq!(ct, "text/html; charset=utf-8");
            let csp = p.headers.get("content-security-policy").unwrap();
            assert!(csp.to_str().unwrap().contains("script-src 'self'"));
            if lang.starts_with("zh") {
                assert!(p.body.contains("<html lang=\"zh-CN\">"), "{path}");
                assert!(p.body.contains("概览"), "{path}: {}", p.body);
                assert!(!p.body.contains(">Overview<"), "{path}");
            } else {
                assert!(p.body.contains("<html lang=\"en\">"), "{path}");
                assert!(p.body.contains(">Overview<"), "{path}");
            }
            if path == "/ui/" {
                weight = weight.max(p.body.len());
            }
        }
    }
    println!("overview page weight: {weight} bytes (html; css and js cached)");
    assert!(weight < 30_000, "the overview stays small: {weight} bytes");

    // The job page explains the schedule in its zone with the next 10 fires.
    b.lang = Some("en");
    let p = b.get("/ui/jobs/press-report").await;
    assert!(p.body.contains("Asia&#x2f;Shanghai"), "{}", p.body);
    assert!(p.body.matches("+08:00").count() >= 10, "{}", p.body);
    assert!(p.body.contains("id=\"grid\""));

    // The language switch overrides the browser's language.
    let p = b.get("/ui/lang/zh-CN?back=/ui/nodes").await;
    assert_eq!(
        (p.status, p.location()),
        (StatusCode::SEE_OTHER, "/ui/nodes")
    );
    assert!(p.set_cookies()[0].starts_with("takt_lang=zh-CN"));
    let p = b.get("/ui/nodes").await;
    assert!(p.body.contains("<html lang=\"zh-CN\">"));
    let p = b.get("/ui/lang/en?back=https://evil.example/").await;
    assert_eq!(p.location(), "/ui/", "never back to another site");
    let p = b.get("/ui/lang/tlh").await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);

    // Bad filters are shown on the page, not as a crash.
    let p = b.get("/ui/runs?from=yesterday").await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("id=\"runs-error\""), "{}", p.body);
    let p = b.get("/ui/runs?job=nobody").await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    assert!(p.body.contains("no job named"), "{}", p.body);
    let p = b.get("/ui/audit?from=2026-12-02&to=2026-12-01").await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert_eq!(b.get("/ui/runs/999999").await.status, StatusCode::NOT_FOUND);
    assert_eq!(b.get("/ui/nowhere").await.status, StatusCode::NOT_FOUND);
    assert_eq!(b.get("/ui/assets/app.css").await.status, StatusCode::OK);
    assert_eq!(b.get("/ui/assets/app.js").await.status, StatusCode::OK);
    assert_eq!(b.get("/ui/assets/x.js").await.status, StatusCode::NOT_FOUND);

    // The live log tail: the API's stream with the session's cookie.
    let mut resp = b
        .client
        .get(format!("{}/ui/runs/{running}/log", b.base))
        .header(
            "cookie",
            format!("takt_session={}", b.cookies["takt_session"]),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut text = String::new();
    let end = tokio::time::Instant::now() + WAIT;
    while !text.contains("event: log") {
        let chunk = tokio::time::timeout_at(end, resp.chunk())
            .await
            .expect("a log event in time")
            .unwrap()
            .expect("the stream goes on");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("line 0"), "{text}");
    drop(resp);
    // Without a session the stream is not served.
    let p = Browser::new(addr)
        .get(&format!("/ui/runs/{running}/log"))
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);

    // Cancel the running run from its page.
    let csrf = b.csrf().await;
    let page = b.get(&format!("/ui/runs/{running}")).await;
    assert!(page.body.contains("do-cancel"), "{}", page.body);
    assert!(page.body.contains("data-stream="), "live log");
    let p = b
        .post(&format!("/ui/runs/{running}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let r = store
            .run_get(takt_core::run::RunId(running))
            .await
            .unwrap()
            .unwrap();
        if r.state == takt_core::run::RunState::Cancelled {
            break;
        }
        assert!(tokio::time::Instant::now() < end, "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let page = b.get(&format!("/ui/runs/{running}")).await;
    assert!(
        !page.body.contains("do-cancel"),
        "a final run has no cancel"
    );
    assert!(page.body.contains("st-cancelled"));
    host.shutdown(Duration::from_secs(2)).await;
}

/// The database cut behind a proxy: pages answer 503 with the outage banner, not 500; the
/// session survives, and the pages come back when the database does.
/// The jobs page shows 100 jobs at a time by name, with a link to the next hundred and a
/// name filter: a page reads each of its jobs' runs, so a store whose one-off jobs pile up
/// must not be read whole (nor by the runs and audit pages' job fields, nor by the
/// overview's late jobs and count). A bad cursor is a 400 page that says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_page_is_paged_and_no_page_reads_every_job() {
    let d = dir("jobs-paged");
    let store = SqliteStore::open(d.join("takt.db"), &SqliteOptions::default()).unwrap();
    let now = Timestamp::now();
    for i in 0..230 {
        let kind = if i % 10 == 0 { "press" } else { "order" };
        let job = takt_core::job::JobDef::new(&format!("{kind}-{i:03}"), "t::ok").unwrap();
        store.job_insert(&job, now).await.unwrap();
    }
    // Late and never claimed: a tag no node serves. The overview finds it without reading
    // every job, and counts every job.
    let mut kiln = takt_core::job::JobDef::new("kiln-late", "t::ok").unwrap();
    kiln.node_tag = Some("kiln-7".into());
    kiln.next_fire = Some(now - jiff::SignedDuration::from_mins(5));
    store.job_insert(&kiln, now).await.unwrap();
    let host = host_on(store.clone()).await;
    let mut b = Browser::new(host.http_addr().unwrap());
    assert_eq!(b.sign_in("").await.status, StatusCode::SEE_OTHER);
    let overview = b.get("/ui/").await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    let late = overview
        .body
        .split("id=\"late\"")
        .nth(1)
        .unwrap_or_default();
    let late = late.split("</section>").next().unwrap_or_default();
    assert!(late.contains("kiln-late"), "{late}");
    assert!(!late.contains("order-001"), "{late}");
    assert!(overview.body.contains("231 jobs"), "{}", overview.body);

    let rows = |p: &Page| -> Vec<String> {
        p.body
            .split("<tr data-job=\"")
            .skip(1)
            .map(|r| r.split('"').next().unwrap().to_string())
            .collect()
    };
    let next = |p: &Page| -> Option<String> {
        let at = p.body.find("id=\"next-page\" href=\"")?;
        let rest = &p.body[at + "id=\"next-page\" href=\"".len()..];
        Some(rest.split('"').next().unwrap().replace("&amp;", "&"))
    };
    let mut seen = Vec::new();
    let mut path = Some("/ui/jobs".to_string());
    let mut pages = 0;
    while let Some(p) = path {
        let page = b.get(&p).await;
        assert_eq!(page.status, StatusCode::OK, "{p}: {}", page.body);
        let names = rows(&page);
        assert!(names.len() <= 100, "{p}: {} rows", names.len());
        // Only the first page refreshes itself (a later one would lose its place).
        assert_eq!(page.body.contains("data-refresh"), pages == 0, "{p}");
        seen.extend(names);
        path = next(&page);
        pages += 1;
    }
    assert_eq!(pages, 3, "231 jobs are three pages");
    let mut all: Vec<String> = (0..230)
        .map(|i| format!("{}-{i:03}", if i % 10 == 0 { "press" } else { "order" }))
        .chain(["kiln-late".to_string()])
        .collect();
    all.sort();
    assert_eq!(seen, all, "every job once, by name");

    // The filter keeps its text on the page and in the next page's link.
    let page = b.get("/ui/jobs?q=PRESS").await;
    assert_eq!(rows(&page).len(), 23, "{}", page.body);
    assert!(rows(&page).iter().all(|n| n.starts_with("press-")));
    assert!(page.body.contains("value=\"PRESS\""), "{}", page.body);
    assert_eq!(next(&page), None);
    let page = b.get("/ui/jobs?q=no-such-job").await;
    assert!(page.body.contains("No job matches."), "{}", page.body);

    // The runs and audit pages suggest job names from one page of them (a datalist, not a
    // select of every job) and keep the name typed.
    let page = b.get("/ui/runs?job=order-001").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("<option value=\"press-220\">"),
        "{}",
        page.body
    );
    assert!(page.body.contains("value=\"order-001\""), "{}", page.body);
    let page = b.get("/ui/audit?job=press-010").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("<option value=\"order-229\">"),
        "{}",
        page.body
    );
    assert!(page.body.contains("value=\"press-010\""), "{}", page.body);

    let page = b.get("/ui/jobs?after=bad%01name").await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(page.body.contains("is not a job name"), "{}", page.body);
    host.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_shows_a_banner_not_a_500() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let config: tokio_postgres::Config = url.parse().expect("TAKT_TEST_PG_URL parses");
    let Some(tokio_postgres::config::Host::Tcp(pg_host)) = config.get_hosts().first().cloned()
    else {
        eprintln!("SKIPPED: the outage test needs a TCP TAKT_TEST_PG_URL");
        return;
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let proxy = common::proxy::Proxy::start(format!("{pg_host}:{port}"));
    let user = config.get_user().unwrap_or("postgres");
    let dbname = config.get_dbname().unwrap_or(user);
    let mut via = format!("postgres://{user}");
    if let Some(pw) = config.get_password() {
        via.push(':');
        via.push_str(&String::from_utf8_lossy(pw));
    }
    via.push_str(&format!("@127.0.0.1:{}/{dbname}", proxy.port));
    let schema = format!("takt_dash_{}", std::process::id());
    let options = takt_host::store::PgOptions::new(&via).with_schema(&schema);
    let store = takt_host::store::PgStore::connect(&options).await.unwrap();
    let host = host_on(store.clone()).await;
    add_job(&host, "press-report", "t::ok").await;
    let mut b = Browser::new(host.http_addr().unwrap());
    assert_eq!(b.sign_in("").await.status, StatusCode::SEE_OTHER);
    assert_eq!(b.get("/ui/").await.status, StatusCode::OK);

    proxy.cut();
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    let p = loop {
        let p = b.get("/ui/").await;
        if p.status != StatusCode::OK {
            break p;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "never noticed the outage"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE, "{}", p.body);
    assert!(p.body.contains("id=\"outage\""), "{}", p.body);
    assert!(p.body.contains("Database unreachable"), "{}", p.body);
    let p = b.get("/ui/jobs/press-report").await;
    assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE, "{}", p.body);

    proxy.restore();
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let p = b.get("/ui/").await;
        if p.status == StatusCode::OK {
            assert!(!p.body.contains("id=\"outage\""));
            break;
        }
        assert!(tokio::time::Instant::now() < end, "{}", p.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
