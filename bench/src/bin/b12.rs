//! B12 — the HTTP API's run listing: p50 / p99 of `GET /api/v1/runs?job=…&limit=100` (the
//! newest page of one job, and a page deep in its history by cursor) and of the newest page
//! of all runs, with many runs in SQLite.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin b12 -- [--runs N] [--jobs J]
//!     [--requests R] [--dir DIR]
//! ```
//!
//! Setup (not timed): a fresh SQLite database with `J` jobs (default 100) and `N` finished
//! runs (default 1 000 000) spread round-robin over them, one a minute per job, written with
//! rusqlite in one transaction into takt's own tables; then an embedded host serving the API
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
use takt_host::store::{SqliteOptions, SqliteStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    runs: u64,
    jobs: u64,
    requests: usize,
    dir: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        runs: 1_000_000,
        jobs: 100,
        requests: 2_000,
        dir: std::env::temp_dir(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--runs" => a.runs = value().parse().expect("--runs N"),
            "--jobs" => a.jobs = value().parse().expect("--jobs J"),
            "--requests" => a.requests = value().parse().expect("--requests R"),
            "--dir" => a.dir = PathBuf::from(value()),
            "--help" | "-h" => {
                println!("b12 [--runs N] [--jobs J] [--requests R] [--dir DIR]");
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
    async fn get(&mut self, path: &str) -> Vec<u8> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n");
        self.tcp.write_all(req.as_bytes()).await.expect("send");
        self.buf.clear();
        let mut chunk = [0u8; 64 * 1024];
        let (head_end, length) = loop {
            let n = self.tcp.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                assert!(head.starts_with("http/1.1 200"), "{head}");
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .expect("content-length")
                    .trim()
                    .parse()
                    .expect("a length");
                break (end + 4, length);
            }
        };
        while self.buf.len() < head_end + length {
            let n = self.tcp.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        self.buf[head_end..head_end + length].to_vec()
    }
}

fn fill(db: &std::path::Path, runs: u64, jobs: u64) {
    let mut c = Connection::open(db).expect("open");
    let tx = c.transaction().expect("begin");
    {
        let mut ids: Vec<i64> = Vec::new();
        let mut q = tx.prepare("SELECT id FROM jobs ORDER BY id").expect("prepare");
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let dir = a.dir.join(format!("takt-b12-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = dir.join("takt.db");
    let store = SqliteStore::open(&db, &SqliteOptions::default()).expect("store");
    for j in 0..a.jobs {
        let job = JobDef::new(&format!("job-{j:03}"), "none::none").expect("job");
        store.job_insert(&job, jiff::Timestamp::now()).await.expect("insert job");
    }
    let began = Instant::now();
    fill(&db, a.runs, a.jobs);
    println!(
        "b12: {} runs over {} jobs written in {:.1} s ({})",
        a.runs,
        a.jobs,
        began.elapsed().as_secs_f64(),
        db.display()
    );
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
        ("newest page of one job", "/api/v1/runs?job=job-050&limit=100".to_string()),
        ("a page half-way into one job's history", format!("/api/v1/runs?job=job-050&limit=100&cursor={cursor}")),
        ("newest page of all runs", "/api/v1/runs?limit=100".to_string()),
        ("newest page of one job, state=succeeded", "/api/v1/runs?job=job-050&state=succeeded&limit=100".to_string()),
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
    host.shutdown(Duration::from_secs(1)).await;
    let _ = std::fs::remove_dir_all(&dir);
}
