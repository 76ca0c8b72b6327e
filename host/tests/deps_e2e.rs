//! Job dependencies end to end (issue 15 item 1): two real `takt run` processes on one
//! PostgreSQL database run a dependent chain of three every-10-seconds jobs, `extract ->
//! load -> report` (load depends on extract, report on load), for about two minutes; `load`
//! fails once, about 40 s in (the `failOnce` marker of `testing::record`, whose directory the
//! test creates then).
//!
//! Checked afterwards, for every fire up to shortly before the nodes stopped: each fire of a
//! dependent either ran after its upstream's run of the same fire time succeeded (the
//! attempt's start at or after the upstream run's finish) or was recorded skipped with reason
//! `dependency`; the fire of `report` after `load`'s failure is skipped naming `load`, its
//! fire time and `failed`; no (job, fire time) executed twice (the record file) or has more
//! than one attempt; both nodes ran dependents (the database decided, not one node).
//!
//! Needs `TAKT_TEST_PG_URL` (else SKIPPED, unless `TAKT_TEST_REQUIRE` names postgres). Unix
//! only (like the other multi-process tests).
#![cfg(unix)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the nodes run together.
const RUN_S: u64 = 120;
/// Fires this close to the end are not judged (the stop cancels what is in flight).
const TAIL_MS: i64 = 25_000;

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

fn config(dir: &Path, url: &str, schema: &str, record: &Path, marker: &Path) -> PathBuf {
    let mut text = format!(
        "database = \"{url}\"\nplugin_dir = \"{}\"\ncapacity = 4\ngrace = \"5s\"\n\
         lease = \"4s\"\nrenew_every = \"1s\"\n\n[postgres]\nschema = \"{schema}\"\n",
        plugins().display()
    );
    // Listed dependents first: the file is synced in dependency order whatever its order.
    for (name, deps, extra) in [
        ("report", "[\"load\"]", String::new()),
        (
            "load",
            "[\"extract\"]",
            format!(", failOnce = \"{}\"", marker.display()),
        ),
        ("extract", "[]", String::new()),
    ] {
        text.push_str(&format!(
            "\n[[jobs]]\nname = \"{name}\"\nhandler = \"testing::record\"\n\
             cron = \"*/10 * * * * *\"\ndepends_on = {deps}\n\
             params = {{ path = \"{}\", sleepMs = 1500{extra} }}\n",
            record.display()
        ));
    }
    let file = dir.join("takt.toml");
    std::fs::write(&file, text).expect("write config");
    file
}

fn node(dir: &Path, file: &Path, id: &str, for_s: u64, log: &str) -> Child {
    let out = std::fs::File::create(dir.join(log)).expect("log file");
    Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["run", "--config"])
        .arg(file)
        .args(["--for", &format!("{for_s}s")])
        .env("TAKT_NODE_ID", id)
        .env_remove("TAKT_DB")
        .env_remove("TAKT_PG_SCHEMA")
        .current_dir(dir)
        .stdout(out.try_clone().expect("clone"))
        .stderr(out)
        .spawn()
        .expect("spawn takt run")
}

fn logs(dir: &Path) -> String {
    ["a.log", "b.log"]
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

/// One stored run: state, skip reason, error, finish (ms), first attempt's start (ms),
/// attempts, node.
#[derive(Debug, Clone)]
struct Row {
    state: String,
    skip_reason: Option<String>,
    error: Option<String>,
    finished_ms: Option<i64>,
    started_ms: Option<i64>,
    attempts: i64,
    node: Option<String>,
}

#[test]
fn two_nodes_run_a_dependent_chain_in_order_and_skip_after_a_failure() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let dir = Dir(std::env::temp_dir().join(format!("takt-deps-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).expect("dir");
    let schema = format!("takt_deps_{}", std::process::id());
    let db = common::pg::Pg::connect(&url);
    db.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let record = dir.0.join("executions.txt");
    // The marker's directory is made mid-run: until then `failOnce` cannot create the
    // marker, so load succeeds; the first load after it fails (a fire in the judged window).
    let arm = dir.0.join("arm");
    let marker = arm.join("load-failed-once");
    let file = config(&dir.0, &url, &schema, &record, &marker);

    let mut a = node(&dir.0, &file, "node-a", RUN_S, "a.log");
    let start = Instant::now();
    while !std::fs::read_to_string(dir.0.join("a.log")).is_ok_and(|t| t.contains("jobs from")) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "node a did not sync its jobs\n{}",
            logs(&dir.0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut b = node(&dir.0, &file, "node-b", RUN_S, "b.log");
    std::thread::sleep(Duration::from_secs(40));
    std::fs::create_dir(&arm).expect("arm the failure");
    for (name, child) in [("a", &mut a), ("b", &mut b)] {
        let status = child.wait().expect("wait");
        assert!(
            status.success(),
            "node {name} failed: {status}\n{}",
            logs(&dir.0)
        );
    }
    assert!(marker.exists(), "load failed once");

    // Executions: no (job, fire time) ran twice.
    let text = std::fs::read_to_string(&record).expect("executions");
    let mut executions: HashMap<(i64, i64), usize> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 5, "record line {line:?}");
        *executions
            .entry((f[0].parse().expect("job"), f[1].parse().expect("fire")))
            .or_default() += 1;
    }
    let twice: Vec<_> = executions.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "fires executed twice: {twice:?}");

    let ms = |col: &str| format!("(EXTRACT(EPOCH FROM {col}) * 1000)::bigint");
    let rows = db.rows(&format!(
        "SELECT j.name, {}, r.state, r.skip_reason, r.error, {}, \
           (SELECT {} FROM {schema}.run_attempts a WHERE a.run_id = r.id AND a.attempt = 1), \
           (SELECT COUNT(*) FROM {schema}.run_attempts a WHERE a.run_id = r.id), r.node_id \
         FROM {schema}.runs r JOIN {schema}.jobs j ON j.id = r.job_id",
        ms("r.fire_time"),
        ms("r.finished_at"),
        ms("a.started_at"),
    ));
    let mut runs: HashMap<(String, i64), Row> = HashMap::new();
    for r in &rows {
        runs.insert(
            (r.get(0), r.get(1)),
            Row {
                state: r.get(2),
                skip_reason: r.get(3),
                error: r.get(4),
                finished_ms: r.get(5),
                started_ms: r.get(6),
                attempts: r.get(7),
                node: r.get(8),
            },
        );
    }
    let last = runs
        .keys()
        .map(|(_, f)| *f)
        .max()
        .expect("runs were recorded");
    let judged = |fire: i64| fire <= last - TAIL_MS;
    let mut fires: Vec<i64> = runs
        .keys()
        .filter(|(j, f)| j == "extract" && judged(*f))
        .map(|(_, f)| *f)
        .collect();
    fires.sort_unstable();
    // The first fire is not judged: the jobs were added one after another, possibly across a
    // fire instant, so their first fires may differ.
    if !fires.is_empty() {
        fires.remove(0);
    }
    assert!(
        fires.len() >= 6,
        "extract fired over the window: {fires:?}\n{}",
        logs(&dir.0)
    );

    let (mut ran, mut skipped) = (0, 0);
    let mut nodes_running_dependents = std::collections::BTreeSet::new();
    let mut report_skip_after_failure = None;
    for &fire in &fires {
        for (job, upstream) in [("load", "extract"), ("report", "load")] {
            let up = runs
                .get(&(upstream.to_string(), fire))
                .unwrap_or_else(|| panic!("{upstream} has a run at {fire}"));
            let down = runs
                .get(&(job.to_string(), fire))
                .unwrap_or_else(|| panic!("{job} has a run at {fire}: {runs:?}"));
            assert!(
                down.attempts <= 1,
                "{job}@{fire} has {} attempts",
                down.attempts
            );
            match down.state.as_str() {
                "skipped" => {
                    assert_eq!(
                        down.skip_reason.as_deref(),
                        Some("dependency"),
                        "{job}@{fire}: {down:?}"
                    );
                    assert_ne!(
                        up.state, "succeeded",
                        "{job}@{fire} skipped though {upstream} succeeded: {down:?}"
                    );
                    skipped += 1;
                    if job == "report" && up.state == "failed" {
                        report_skip_after_failure = down.error.clone();
                    }
                }
                "pending" | "running" => panic!("{job}@{fire} is not final: {down:?}"),
                _ => {
                    assert_eq!(up.state, "succeeded", "{job}@{fire} ran after {up:?}");
                    let (Some(started), Some(finished)) = (down.started_ms, up.finished_ms) else {
                        panic!("{job}@{fire}: {down:?} after {up:?}");
                    };
                    assert!(
                        started >= finished,
                        "{job}@{fire} started at {started} before {upstream} finished at {finished}"
                    );
                    ran += 1;
                    nodes_running_dependents.extend(down.node.clone());
                }
            }
        }
    }
    // load failed once (at whichever fire ran it first, judged or not): report's fire of that
    // time is skipped naming it.
    let failed: Vec<i64> = runs
        .iter()
        .filter(|((j, _), r)| j == "load" && r.state == "failed")
        .map(|((_, f), _)| *f)
        .collect();
    assert_eq!(failed.len(), 1, "load failed once: {runs:?}");
    let message = report_skip_after_failure
        .or_else(|| {
            runs.get(&("report".to_string(), failed[0]))
                .filter(|r| r.skip_reason.as_deref() == Some("dependency"))
                .and_then(|r| r.error.clone())
        })
        .unwrap_or_else(|| {
            panic!("report's fire after load's failure is skipped with a reason: {runs:?}")
        });
    assert!(message.contains("dependency load"), "{message}");
    assert!(message.contains("failed"), "{message}");
    assert!(ran >= 10, "dependents ran ({ran} ran, {skipped} skipped)");
    assert!(
        skipped >= 1,
        "report's fire after the failure was judged skipped"
    );
    assert_eq!(
        nodes_running_dependents.len(),
        2,
        "both nodes ran dependents: {nodes_running_dependents:?}\n{}",
        logs(&dir.0)
    );
    eprintln!(
        "deps e2e: {} fires judged, {ran} dependent runs after their upstream, {skipped} \
         skipped (reason dependency); report after load's failure: {message}",
        fires.len()
    );
    db.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
}
