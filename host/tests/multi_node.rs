//! Three real `takt run` processes on one PostgreSQL database (seed 003: "run two processes
//! for an hour and count duplicates" — here three, one killed with SIGKILL and restarted, one
//! with its clock an hour wrong).
//!
//! 50 jobs fire every second (half with misfire `fire-all`, the catch-up jobs), plus slow jobs
//! so that the killed node has runs in flight. Every body execution appends a line to a file
//! (`testing::record`), so executions are counted independently of what the store recorded.
//! After at least 60 s the test checks: no (job, fire time) executed twice, no fire time
//! missing in the window (catch-up jobs: a run for every second; the others: a run or a
//! recorded skip), every run final, no fire before its time, and the killed node's runs
//! recovered by the other nodes within the lease timeout.
//!
//! Needs `TAKT_TEST_PG_URL` (else SKIPPED, unless `TAKT_TEST_REQUIRE` names postgres). Unix
//! only (SIGKILL).
#![cfg(unix)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Lease and renewal of the test nodes: short, so that recovery happens within the test.
const LEASE_S: u64 = 4;
const RENEW_S: u64 = 1;
const JOBS: usize = 50;
const SLOW_JOBS: usize = 6;

fn plugins() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| common::build(&["takt-plugin-testing"]))
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn config(dir: &Path, url: &str, schema: &str, record: &Path) -> PathBuf {
    let mut text = format!(
        "database = \"{url}\"\nplugin_dir = \"{}\"\ncapacity = 32\ngrace = \"5s\"\n\
         lease = \"{LEASE_S}s\"\nrenew_every = \"{RENEW_S}s\"\n\n[postgres]\nschema = \"{schema}\"\n",
        plugins().display()
    );
    for i in 0..JOBS {
        let misfire = if i % 2 == 0 { "fire-all:100" } else { "skip" };
        text.push_str(&format!(
            "\n[[jobs]]\nname = \"tick-{i:02}\"\nhandler = \"testing::record\"\ncron = \"* * * * * *\"\n\
             misfire = \"{misfire}\"\noverlap = \"allow\"\n\
             params = {{ path = \"{}\" }}\n",
            record.display()
        ));
    }
    for i in 0..SLOW_JOBS {
        text.push_str(&format!(
            "\n[[jobs]]\nname = \"slow-{i}\"\nhandler = \"testing::record\"\ncron = \"*/3 * * * * *\"\n\
             overlap = \"skip\"\nparams = {{ path = \"{}\", sleepMs = 2500 }}\n",
            record.display()
        ));
    }
    let file = dir.join("takt.toml");
    std::fs::write(&file, text).expect("write config");
    file
}

fn node(dir: &Path, file: &Path, id: &str, for_s: u64, skew: Option<i64>, log: &str) -> Child {
    let out = std::fs::File::create(dir.join(log)).expect("log file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_takt"));
    cmd.args(["run", "--config"])
        .arg(file)
        .args(["--for", &format!("{for_s}s")])
        .env("TAKT_NODE_ID", id)
        .env_remove("TAKT_DB")
        .env_remove("TAKT_PG_SCHEMA")
        .current_dir(dir)
        .stdout(out.try_clone().expect("clone"))
        .stderr(out);
    if let Some(s) = skew {
        cmd.env("TAKT_TEST_CLOCK_SKEW", s.to_string());
    }
    cmd.spawn().expect("spawn takt run")
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn logs(dir: &Path) -> String {
    ["a.log", "b1.log", "b2.log", "c.log"]
        .iter()
        .map(|f| {
            format!(
                "--- {f}\n{}",
                std::fs::read_to_string(dir.join(f)).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn three_nodes_one_killed_one_skewed_never_run_a_fire_twice() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let dir = Dir(std::env::temp_dir().join(format!("takt-multi-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).expect("dir");
    let schema = format!("takt_multi_{}", std::process::id());
    let db = common::pg::Pg::connect(&url);
    db.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let record = dir.0.join("executions.txt");
    let file = config(&dir.0, &url, &schema, &record);

    // Node a first (it creates the schema and the jobs), then b and c; c's clock is an hour
    // ahead of everybody's.
    let total = 75;
    let mut a = node(&dir.0, &file, "node-a", total, None, "a.log");
    let jobs_ready =
        || std::fs::read_to_string(dir.0.join("a.log")).is_ok_and(|t| t.contains("jobs from"));
    wait_for(
        "node a to sync its jobs",
        Duration::from_secs(60),
        jobs_ready,
    );
    let mut b = node(&dir.0, &file, "node-b", 300, None, "b1.log");
    let mut c = node(&dir.0, &file, "node-c", total, Some(3600), "c.log");
    let started = Instant::now();

    // Kill b with SIGKILL while it holds runs.
    std::thread::sleep(Duration::from_secs(15));
    // The ids are read by the same query that finds them running: a run seen by a count may
    // have ended before a second query lists it.
    let mut held: Vec<i64> = Vec::new();
    wait_for(
        "node b to hold a running run",
        Duration::from_secs(20),
        || {
            held = db
                .rows(&format!(
                    "SELECT id FROM {schema}.runs WHERE node_id = 'node-b' AND state = 'running'"
                ))
                .iter()
                .map(|r| r.get(0))
                .collect();
            !held.is_empty()
        },
    );
    b.kill().expect("SIGKILL node b");
    let killed_at = Instant::now();
    b.wait().expect("reap b");

    // The others recover b's runs once its leases expire (lease + a renewal period).
    let ids = held
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    wait_for(
        "the other nodes to recover node b's runs",
        Duration::from_secs(LEASE_S + 3 * RENEW_S + 5),
        || {
            db.count(&format!(
                "SELECT COUNT(*) FROM {schema}.runs WHERE id IN ({ids}) AND \
                 (state = 'running' AND node_id = 'node-b')"
            )) == 0
        },
    );
    let recovered_after = killed_at.elapsed();

    // Restart b for the rest of the window.
    let left = total.saturating_sub(started.elapsed().as_secs()).max(20);
    let mut b2 = node(&dir.0, &file, "node-b", left, None, "b2.log");
    for (name, child) in [("a", &mut a), ("c", &mut c), ("b", &mut b2)] {
        let status = child.wait().expect("wait");
        assert!(
            status.success(),
            "node {name} failed: {status}\n{}",
            logs(&dir.0)
        );
    }
    assert!(
        started.elapsed() >= Duration::from_secs(60),
        "the nodes ran together for at least 60 s"
    );

    // 1. Executions: no (job, fire time) ran twice.
    let text = std::fs::read_to_string(&record).expect("executions");
    let mut executions: HashMap<(i64, i64), Vec<String>> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 5, "record line {line:?}");
        let key = (f[0].parse().expect("job"), f[1].parse().expect("fire"));
        executions.entry(key).or_default().push(line.to_string());
    }
    let twice: Vec<_> = executions.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(twice.is_empty(), "fires executed twice: {twice:?}");
    assert!(
        executions.len() > JOBS * 50,
        "the nodes executed fires ({} distinct)",
        executions.len()
    );

    // 2. The store agrees: one run per (job, fire time), every run final.
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM (SELECT job_id, fire_time FROM {schema}.runs \
             GROUP BY 1, 2 HAVING COUNT(*) > 1) d"
        )),
        0
    );
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM {schema}.runs WHERE state IN ('pending', 'running')"
        )),
        0,
        "every run is final after the nodes stopped"
    );
    // Every execution is a stored run of that job and fire time.
    let stored: BTreeSet<(i64, i64)> = db
        .rows(&format!(
            "SELECT job_id, (EXTRACT(EPOCH FROM fire_time) * 1000)::bigint FROM {schema}.runs"
        ))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for key in executions.keys() {
        assert!(stored.contains(key), "execution {key:?} has no run");
    }

    // 3. Nothing fired early, though node c's clock is an hour ahead.
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM {schema}.runs WHERE started_at < fire_time - interval '1 second'"
        )),
        0,
        "a run started before its fire time"
    );
    assert!(
        db.count(&format!(
            "SELECT COUNT(*) FROM {schema}.runs WHERE node_id = 'node-c' AND state = 'succeeded'"
        )) > 0,
        "the skewed node ran fires too\n{}",
        logs(&dir.0)
    );

    // 4. No fire time missing for the every-second jobs, from the first fire to the last
    //    (catch-up jobs: a run each second; the others: a run or a recorded skip).
    let rows = db.rows(&format!(
        "SELECT j.name, (EXTRACT(EPOCH FROM r.fire_time))::bigint, r.state \
         FROM {schema}.runs r JOIN {schema}.jobs j ON j.id = r.job_id \
         WHERE j.name LIKE 'tick-%'"
    ));
    let mut per_job: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for r in &rows {
        per_job.entry(r.get(0)).or_default().insert(r.get(1));
    }
    assert_eq!(per_job.len(), JOBS, "every tick job ran");
    for (name, fires) in &per_job {
        let (first, last) = (*fires.first().unwrap(), *fires.last().unwrap());
        let missing: Vec<i64> = (first..=last).filter(|s| !fires.contains(s)).collect();
        assert!(
            missing.is_empty(),
            "{name}: fire seconds missing: {missing:?}"
        );
        assert!(
            last - first >= 55,
            "{name} fired over the window ({first}..{last})"
        );
    }

    // 5. b's runs were recovered by the others, as lost leases, within the lease timeout.
    let recovered = db.count(&format!(
        "SELECT COUNT(*) FROM {schema}.runs WHERE id IN ({ids}) \
         AND error LIKE 'lease expired%'"
    ));
    let done_by_b = db.count(&format!(
        "SELECT COUNT(*) FROM {schema}.runs WHERE id IN ({ids}) AND state = 'succeeded'"
    ));
    assert_eq!(
        recovered + done_by_b,
        held.len() as i64,
        "each run b held was either finished by b before the kill or recovered as a lost lease"
    );
    assert!(
        recovered_after <= Duration::from_secs(LEASE_S + 3 * RENEW_S + 2),
        "recovered after {recovered_after:?}"
    );
    // 6. The node table: all three registered, stopped cleanly, tags and capacity as given.
    let out = Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["nodes", "--json", "--db", &url])
        .env("TAKT_PG_SCHEMA", &schema)
        .output()
        .expect("takt nodes");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nodes: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let ids: Vec<&str> = nodes
        .as_array()
        .expect("array")
        .iter()
        .map(|n| n["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["node-a", "node-b", "node-c"]);
    for n in nodes.as_array().expect("array") {
        assert!(n["stopped_at"].is_string(), "stopped cleanly: {n}");
        assert_eq!(n["capacity"], 32);
        assert_eq!(n["running"], 0);
    }

    eprintln!(
        "multi-node: {} executions of {} distinct fires, b held {} runs at the kill, {} \
         recovered as lost leases after {:?}",
        text.lines().count(),
        executions.len(),
        held.len(),
        recovered,
        recovered_after
    );
    db.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
}
