//! B12 — the HTTP API's run listing: p50 / p99 of `GET /api/v1/runs?job=…&limit=100` (the
//! newest page of one job, and a page deep in its history by cursor) and of the newest page
//! of all runs, with many runs in SQLite or PostgreSQL.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin b12 -- [--runs N] [--jobs J]
//!     [--requests R] [--dir DIR] [--backend sqlite|postgres]
//! ```
//!
//! Setup (not timed): a fresh database with `J` jobs (default 100) and `N` finished
//! runs (default 1 000 000) spread round-robin over them, one a minute per job, written in
//! one transaction into takt's own tables (SQLite: rusqlite; PostgreSQL: one `INSERT …
//! SELECT generate_series` into the schema `takt_b12` of `TAKT_BENCH_PG_URL`, else
//! `TAKT_TEST_PG_URL`, then `ANALYZE`); then an embedded host serving the API
//! on 127.0.0.1 (`HostBuilder::http`). Each measured request is one HTTP/1.1 GET on a kept-
//! alive connection, timed from the request's first byte to the body's last, sequentially
//! (`R` per case, default 2 000).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use takt_bench::{quantile, sorted};
use takt_core::job::JobDef;
use takt_core::store::Store;
use takt_host::embed::HostBuilder;
use takt_host::http::HttpConfig;
use takt_host::store::{PgOptions, PgStore, SqliteOptions, SqliteStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    runs: u64,
    jobs: u64,
    requests: usize,
    dir: PathBuf,
    postgres: bool,
}

/// The PostgreSQL schema b12 drops and fills.
const SCHEMA: &str = "takt_b12";

fn args() -> Args {
    let mut a = Args {
        runs: 1_000_000,
        jobs: 100,
        requests: 2_000,
        dir: std::env::temp_dir(),
        postgres: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--runs" => a.runs = value().parse().expect("--runs N"),
            "--jobs" => a.jobs = value().parse().expect("--jobs J"),
            "--requests" => a.requests = value().parse().expect("--requests R"),
            "--dir" => a.dir = PathBuf::from(value()),
            "--backend" => {
                a.postgres = match value().as_str() {
                    "sqlite" => false,
                    "postgres" => true,
                    other => panic!("--backend {other}: use sqlite or postgres"),
                }
            }
            "--help" | "-h" => {
                println!(
                    "b12 [--runs N] [--jobs J] [--requests R] [--dir DIR] [--backend sqlite|postgres]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown option {other}; see --help"),
        }
    }
    a
}

/// One kept-alive HTTP/1.1 connection.
struct Conn {
    tcp: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Sends `req` and reads one response: its head (lower-cased) and body.
    async fn send(&mut self, req: &str) -> (String, Vec<u8>) {
        self.tcp.write_all(req.as_bytes()).await.expect("send");
        self.buf.clear();
        let mut chunk = [0u8; 64 * 1024];
        let (head_end, length) = loop {
            let n = self.tcp.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .map_or(0, |v| v.trim().parse().expect("a length"));
                break (end + 4, length);
            }
        };
        while self.buf.len() < head_end + length {
            let n = self.tcp.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        (head, self.buf[head_end..head_end + length].to_vec())
    }

    /// A GET that must answer 200, with `cookie` sent when not empty.
    async fn get_with(&mut self, path: &str, cookie: &str) -> Vec<u8> {
        let cookie = if cookie.is_empty() {
            String::new()
        } else {
            format!("Cookie: {cookie}\r\n")
        };
        let (head, body) = self
            .send(&format!(
                "GET {path} HTTP/1.1\r\nHost: bench\r\n{cookie}\r\n"
            ))
            .await;
        assert!(
            head.to_ascii_lowercase().starts_with("http/1.1 200"),
            "{path}: {head}"
        );
        body
    }

    async fn get(&mut self, path: &str) -> Vec<u8> {
        self.get_with(path, "").await
    }

    /// Signs in to the dashboard as a loopback user of a host without tokens (the sign-in
    /// form's nonce cookie and field, then the session cookie) and returns the cookies.
    async fn sign_in(&mut self) -> String {
        let (head, body) = self
            .send("GET /ui/signin HTTP/1.1\r\nHost: bench\r\n\r\n")
            .await;
        let mut cookies = set_cookies(&head);
        let body = String::from_utf8_lossy(&body);
        let nonce = body
            .split("name=\"nonce\" value=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("the sign-in form has its nonce");
        let form = format!("nonce={nonce}&next=%2Fui%2F&token=");
        let (head, _) = self
            .send(&format!(
                "POST /ui/signin HTTP/1.1\r\nHost: bench\r\nCookie: {}\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
                cookies.join("; "),
                form.len()
            ))
            .await;
        assert!(head.starts_with("HTTP/1.1 303"), "sign-in: {head}");
        cookies.extend(set_cookies(&head));
        cookies.join("; ")
    }
}

/// The `name=value` of every `Set-Cookie` of a response head.
fn set_cookies(head: &str) -> Vec<String> {
    head.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("set-cookie")
                .then(|| v.trim().split(';').next().unwrap_or("").to_string())
        })
        .filter(|c| !c.ends_with('='))
        .collect()
}

fn fill(db: &std::path::Path, runs: u64, jobs: u64) {
    let mut c = Connection::open(db).expect("open");
    let tx = c.transaction().expect("begin");
    {
        let mut ids: Vec<i64> = Vec::new();
        let mut q = tx
            .prepare("SELECT id FROM jobs ORDER BY id")
            .expect("prepare");
        let rows = q.query_map([], |r| r.get(0)).expect("jobs");
        for r in rows {
            ids.push(r.expect("id"));
        }
        assert_eq!(ids.len() as u64, jobs);
        let mut ins = tx
            .prepare(
                "INSERT INTO runs (job_id, fire_time, state, attempt, created_at, started_at, \
                 finished_at, node_id, elapsed_ms) VALUES (?1, ?2, 'succeeded', 1, ?2, ?2, ?3, 'n1', 5)",
            )
            .expect("prepare");
        let t0: i64 = 1_700_000_000_000;
        for i in 0..runs {
            let job = ids[(i % jobs) as usize];
            let fire = t0 + (i / jobs) as i64 * 60_000;
            ins.execute(params![job, fire, fire + 5]).expect("insert");
        }
    }
    tx.commit().expect("commit");
    c.execute_batch("ANALYZE").expect("analyze");
}

fn report(name: &str, mut samples: Vec<f64>) {
    samples = sorted(&samples);
    println!(
        "{name:<44} p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>7.3} ms",
        quantile(&samples, 0.5),
        quantile(&samples, 0.99),
        samples.last().copied().unwrap_or(f64::NAN)
    );
}

/// The PostgreSQL url: `TAKT_BENCH_PG_URL`, else `TAKT_TEST_PG_URL`.
fn pg_url() -> String {
    std::env::var("TAKT_BENCH_PG_URL")
        .or_else(|_| std::env::var("TAKT_TEST_PG_URL"))
        .expect("--backend postgres needs TAKT_BENCH_PG_URL or TAKT_TEST_PG_URL")
}

/// [`fill`] for PostgreSQL: the same rows, generated by the server in one statement.
async fn fill_pg(runs: u64, jobs: u64) {
    let c = takt_bench::pg::connect(&pg_url()).await;
    let n = c
        .execute(
            &format!(
                "WITH j AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM {SCHEMA}.jobs) \
                 INSERT INTO {SCHEMA}.runs (job_id, fire_time, state, attempt, created_at, \
                   started_at, finished_at, node_id, elapsed_ms) \
                 SELECT j.id, t.fire, 'succeeded', 1, t.fire, t.fire, \
                   t.fire + interval '5 milliseconds', 'n1', 5 \
                 FROM generate_series(0, $1::bigint - 1) g \
                 JOIN j ON j.k = g % $2::bigint \
                 CROSS JOIN LATERAL (SELECT to_timestamp(1700000000) \
                   + (g / $2::bigint) * interval '1 minute' AS fire) t"
            ),
            &[&(runs as i64), &(jobs as i64)],
        )
        .await
        .expect("runs inserted");
    assert_eq!(n, runs);
    c.batch_execute(&format!("ANALYZE {SCHEMA}.runs"))
        .await
        .expect("analyze");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    if a.postgres {
        let setup = takt_bench::pg::connect(&pg_url()).await;
        setup
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
            .await
            .expect("old schema dropped");
        let store = PgStore::connect(&PgOptions::new(pg_url()).with_schema(SCHEMA))
            .await
            .expect("the store connects");
        add_jobs(&store, a.jobs).await;
        let began = Instant::now();
        fill_pg(a.runs, a.jobs).await;
        println!(
            "b12 postgres: {} runs over {} jobs written in {:.1} s (schema {SCHEMA})",
            a.runs,
            a.jobs,
            began.elapsed().as_secs_f64()
        );
        measure(store, &a).await;
        setup
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
            .await
            .expect("schema dropped");
        return;
    }
    let dir = a.dir.join(format!("takt-b12-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = dir.join("takt.db");
    let store = SqliteStore::open(&db, &SqliteOptions::default()).expect("store");
    add_jobs(&store, a.jobs).await;
    let began = Instant::now();
    fill(&db, a.runs, a.jobs);
    println!(
        "b12 sqlite: {} runs over {} jobs written in {:.1} s ({})",
        a.runs,
        a.jobs,
        began.elapsed().as_secs_f64(),
        db.display()
    );
    measure(store, &a).await;
    let _ = std::fs::remove_dir_all(&dir);
}

async fn add_jobs<S: Store>(store: &S, jobs: u64) {
    for j in 0..jobs {
        let job = JobDef::new(&format!("job-{j:03}"), "none::none").expect("job");
        store
            .job_insert(&job, jiff::Timestamp::now())
            .await
            .expect("insert job");
    }
}

/// Serves the API on `store` and times the cases.
async fn measure<S: Store + Clone + 'static>(store: S, a: &Args) {
    let host = HostBuilder::new(store)
        .node("b12")
        .http(HttpConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            ..HttpConfig::default()
        })
        .start()
        .await
        .expect("host");
    let addr = host.http_addr().expect("api");
    let mut conn = Conn {
        tcp: TcpStream::connect(addr).await.expect("connect"),
        buf: Vec::new(),
    };
    conn.tcp.set_nodelay(true).expect("nodelay");
    // A cursor half-way into job-050's history.
    let mut cursor = String::new();
    let pages = (a.runs / a.jobs / 100 / 2).max(1);
    for _ in 0..pages {
        let path = if cursor.is_empty() {
            "/api/v1/runs?job=job-050&limit=100".to_string()
        } else {
            format!("/api/v1/runs?job=job-050&limit=100&cursor={cursor}")
        };
        let body: serde_json::Value = serde_json::from_slice(&conn.get(&path).await).expect("json");
        match body["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    let cases = [
        (
            "newest page of one job",
            "/api/v1/runs?job=job-050&limit=100".to_string(),
        ),
        (
            "a page half-way into one job's history",
            format!("/api/v1/runs?job=job-050&limit=100&cursor={cursor}"),
        ),
        (
            "newest page of all runs",
            "/api/v1/runs?limit=100".to_string(),
        ),
        (
            "newest page of one job, state=succeeded",
            "/api/v1/runs?job=job-050&state=succeeded&limit=100".to_string(),
        ),
    ];
    for (name, path) in &cases {
        for _ in 0..50 {
            conn.get(path).await;
        }
        let mut samples = Vec::with_capacity(a.requests);
        for _ in 0..a.requests {
            let t = Instant::now();
            let body = conn.get(path).await;
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
            assert!(body.len() > 1000, "a page of runs");
        }
        report(name, samples);
    }
    // The dashboard's pages, signed in; the page weight is the HTML alone (its stylesheet
    // and script are compiled in and cached by the browser for a day).
    let cookie = conn.sign_in().await;
    for (name, path) in [
        ("dashboard overview (/ui/)", "/ui/"),
        ("dashboard jobs (/ui/jobs)", "/ui/jobs"),
        ("dashboard runs of one job", "/ui/runs?job=job-050"),
    ] {
        for _ in 0..20 {
            conn.get_with(path, &cookie).await;
        }
        let mut samples = Vec::with_capacity(a.requests);
        let mut bytes = 0;
        for _ in 0..a.requests {
            let t = Instant::now();
            bytes = conn.get_with(path, &cookie).await.len();
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        report(&format!("{name}, {bytes} B"), samples);
    }
    for asset in ["/ui/assets/app.css", "/ui/assets/app.js"] {
        let n = conn.get_with(asset, &cookie).await.len();
        println!("{asset:<44} {n} B");
    }
    host.shutdown(Duration::from_secs(1)).await;
}
