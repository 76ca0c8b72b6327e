//! The dashboard in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`, which `.ci/run` installs), against `takt run` with
//! `[http]` and tokens made by `takt token create`.
//!
//! A viewer signs in, sees no action button, watches a job's runs appear live (the page
//! refreshes its sections itself), and a forged POST from its session (no CSRF token, a wrong
//! one) is refused with 403; an operator triggers a job and sees its run, watches its log
//! live, cancels it, pauses and resumes a job, cannot edit one; the language switch turns
//! the pages into Simplified Chinese. Screenshots of each page (1366×768) are saved under
//! `target/dashboard-screenshots/` (the path is printed).
//!
//! Without `/usr/bin/chromium` and `/usr/bin/chromedriver` (or `TAKT_TEST_CHROMIUM` /
//! `TAKT_TEST_CHROMEDRIVER`) the test prints SKIPPED — unless `dashboard` is in
//! `TAKT_TEST_REQUIRE` (as `.ci/run` sets it), where it fails instead.

#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(60);

fn tool(var: &str, default: &str) -> Option<PathBuf> {
    let p = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    p.exists().then_some(p)
}

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_driver(exe: &Path) -> Driver {
    let port = free_port();
    let child = Command::new(exe)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < PATIENCE, "chromedriver never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver { child, port }
}

async fn browser(driver: &Driver, chromium: &Path, lang: &str) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1366,768",
                     format!("--lang={lang}")],
            "prefs": {"intl.accept_languages": lang},
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a chromium session")
}

/// Where the screenshots go: `target/dashboard-screenshots/`.
fn shots() -> PathBuf {
    let d = common::profile_dir()
        .parent()
        .expect("target/")
        .join("dashboard-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("a screenshot");
    let path = shots().join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap();
}

async fn text_of(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Waits until the page's HTML satisfies `ok`, without navigating (the page's own refresh
/// must bring it).
async fn wait_source(c: &Client, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let html = c.source().await.unwrap();
        if ok(&html) {
            return html;
        }
        assert!(start.elapsed() < PATIENCE, "never {what}:\n{html}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn sign_in(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/ui/")).await.unwrap();
    let field = c
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#token"))
        .await
        .unwrap();
    field.send_keys(token).await.unwrap();
    c.find(Locator::Css("#signin"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#me"))
        .await
        .expect("signed in");
}

async fn click(c: &Client, css: &str) {
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .click()
        .await
        .unwrap();
}

/// A POST made by script from the signed-in page (same origin, the session's cookie): its
/// status.
async fn post_status(c: &Client, path: &str, body: &str) -> u64 {
    let v: Value = c
        .execute_async(
            "const [path, body, done] = arguments; \
             fetch(path, {method: 'POST', body: body, credentials: 'same-origin', redirect: 'manual', \
                          headers: {'Content-Type': 'application/x-www-form-urlencoded'}}) \
               .then(r => done(r.status), e => done(String(e)));",
            vec![json!(path), json!(body)],
        )
        .await
        .unwrap();
    v.as_u64().unwrap_or_else(|| panic!("no status: {v}"))
}

fn takt_token(dir: &Path, db: &Path, role: &str, name: &str) -> String {
    let out = common::takt_command(dir)
        .args([
            "token", "create", "--role", role, "--name", name, "--json", "--db",
        ])
        .arg(db)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["token"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_headless_chromium() {
    let (Some(chromium), Some(chromedriver)) = (
        tool("TAKT_TEST_CHROMIUM", "/usr/bin/chromium"),
        tool("TAKT_TEST_CHROMEDRIVER", "/usr/bin/chromedriver"),
    ) else {
        assert!(
            !common::required("dashboard"),
            "dashboard is required (TAKT_TEST_REQUIRE) but chromium or chromedriver is \
             missing; apt-get install chromium chromium-driver"
        );
        eprintln!(
            "SKIPPED: the dashboard browser test (no /usr/bin/chromium or /usr/bin/chromedriver; \
             apt-get install chromium chromium-driver)"
        );
        return;
    };

    let dir = std::env::temp_dir().join(format!("takt-dash-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    let db = dir.join("takt.db");
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let echo = std::fs::canonicalize("/bin/echo")
        .or_else(|_| std::fs::canonicalize("/usr/bin/echo"))
        .unwrap();
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            r#"
database = "{db}"
plugin_dir = "plugins"

[http]
listen = "127.0.0.1:0"

[exe]
allowlist = ["{sh_dir}", "{echo_dir}"]

[[jobs]]
name = "ticker"
handler = "exe::run"
params = {{ program = "echo", args = ["tick"] }}
every = "2s"

[[jobs]]
name = "long-report"
handler = "exe::run"
params = {{ program = "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.3; done", shell = true, killGraceMs = 500 }}
cron = "0 0 1 1 *"
"#,
            db = db.display(),
            sh_dir = sh.parent().unwrap().display(),
            echo_dir = echo.parent().unwrap().display(),
        ),
    )
    .unwrap();
    let mut host = common::process::Host::spawn(
        common::takt_command(&dir)
            .args(["run", "--for", "300s", "--config"])
            .arg(dir.join("takt.toml")),
        &dir,
        "run",
    );
    let base = host.wait_for("the http api", || {
        std::fs::read_to_string(dir.join("run.stdout"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("http api on "))
            .map(|rest| rest.split("/api/v1").next().unwrap().to_string())
    });
    let viewer = takt_token(&dir, &db, "viewer", "wall-screen");
    let operator = takt_token(&dir, &db, "operator", "shift-lead");
    tokio::time::sleep(Duration::from_millis(2200)).await; // the host's token cache

    let driver = start_driver(&chromedriver);
    println!("dashboard screenshots: {}", shots().display());

    // The viewer: no buttons; the runs of `ticker` appear by themselves.
    let c = browser(&driver, &chromium, "en-US").await;
    sign_in(&c, &base, &viewer).await;
    assert!(text_of(&c, "#me").await.contains("wall-screen"));
    shot(&c, "overview-viewer").await;
    c.goto(&format!("{base}/ui/jobs/ticker")).await.unwrap();
    let first = wait_source(&c, "a run of ticker", |h| h.contains("/ui/runs/")).await;
    let count = |h: &str| h.matches("href=\"/ui/runs/").count();
    let seen = count(&first);
    assert!(
        c.find(Locator::Css("#actions")).await.is_err(),
        "a viewer sees no action"
    );
    wait_source(&c, "more runs of ticker, live", |h| count(h) > seen).await;
    shot(&c, "job-viewer").await;
    // Forged POSTs from the viewer's own session: refused, whatever the role.
    assert_eq!(post_status(&c, "/ui/jobs/ticker/do/trigger", "").await, 403);
    assert_eq!(
        post_status(&c, "/ui/jobs/ticker/do/trigger", "csrf=0123").await,
        403
    );
    for (page, name) in [
        ("/ui/jobs", "jobs"),
        ("/ui/runs", "runs"),
        ("/ui/nodes", "nodes"),
        ("/ui/plugins", "plugins"),
        ("/ui/audit", "audit"),
    ] {
        c.goto(&format!("{base}{page}")).await.unwrap();
        c.wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css("main h1"))
            .await
            .unwrap();
        shot(&c, name).await;
    }
    click(&c, "#signout").await;
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#token"))
        .await
        .expect("signed out");
    c.close().await.unwrap();

    // The operator: trigger, watch the log live, cancel; pause and resume; no edit.
    let c = browser(&driver, &chromium, "en-US").await;
    sign_in(&c, &base, &operator).await;
    c.goto(&format!("{base}/ui/jobs/long-report"))
        .await
        .unwrap();
    assert!(c.find(Locator::Css("#do-edit")).await.is_err(), "no edit");
    click(&c, "#do-trigger").await;
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#notice"))
        .await
        .unwrap();
    wait_source(&c, "the triggered run, running", |h| {
        h.contains("id=\"job-runs\"") && h.contains("st-running")
    })
    .await;
    click(&c, "#job-runs a[href^='/ui/runs/']").await;
    wait_source(&c, "log lines arriving live", |h| {
        h.contains("line 3") && h.contains("do-cancel")
    })
    .await;
    shot(&c, "run-live-log").await;
    click(&c, "#do-cancel").await;
    wait_source(&c, "the run cancelled", |h| {
        h.contains("st-cancelled") && !h.contains("do-cancel")
    })
    .await;
    shot(&c, "run-cancelled").await;

    c.goto(&format!("{base}/ui/jobs/ticker")).await.unwrap();
    let reason = c.find(Locator::Css("#pause-reason")).await.unwrap();
    reason.send_keys("die change").await.unwrap();
    click(&c, "#do-pause").await;
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#do-resume"))
        .await
        .expect("paused");
    assert!(c.source().await.unwrap().contains("die change"));
    shot(&c, "job-paused").await;
    click(&c, "#do-resume").await;
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#do-pause"))
        .await
        .expect("resumed");
    c.goto(&format!("{base}/ui/jobs/ticker/edit"))
        .await
        .unwrap();
    assert!(
        text_of(&c, "#error-status").await.starts_with("403"),
        "an operator cannot edit"
    );

    // The language switch.
    c.goto(&format!("{base}/ui/")).await.unwrap();
    click(&c, "#lang-zh-CN").await;
    wait_source(&c, "the overview in chinese", |h| {
        h.contains("lang=\"zh-CN\"") && h.contains("概览")
    })
    .await;
    shot(&c, "overview-zh-CN").await;
    click(&c, "#lang-en").await;
    wait_source(&c, "the overview in english", |h| h.contains("lang=\"en\"")).await;
    c.close().await.unwrap();
    drop(driver);

    unsafe { libc::kill(host.child.id() as libc::pid_t, libc::SIGINT) };
    host.wait_exit();
    let names: Vec<String> = std::fs::read_dir(shots())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    for n in [
        "overview-viewer.png",
        "job-viewer.png",
        "run-live-log.png",
        "overview-zh-CN.png",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
}
