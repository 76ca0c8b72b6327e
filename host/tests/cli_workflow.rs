//! Seed 004's workflow across processes: `takt cancel` from another process stops a run that
//! a running `takt run` executes, through the database.

#![cfg(unix)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use takt_core::job::JobName;
use takt_core::run::RunState;
use takt_core::store::conformance::block_on;
use takt_core::store::{RunFilter, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-cli-workflow-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Opens the host's database without migrating it (the host does that).
fn read_only() -> SqliteOptions {
    let mut o = SqliteOptions::default();
    o.migrate = false;
    o
}

fn takt(dir: &PathBuf, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(args)
        .current_dir(dir)
        .env_remove("TAKT_DB")
        .env_remove("TAKT_PLUGIN_DIR")
        .env_remove("TAKT_EXE_ALLOWLIST")
        .output()
        .expect("takt runs")
}

#[test]
fn takt_cancel_stops_a_run_of_another_process_within_seconds() {
    let dir = temp_dir("cancel");
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    std::fs::write(
        dir.join("takt.toml"),
        r#"
plugin_dir = "plugins"

[[jobs]]
name = "sleeper"
handler = "exe::run"
params = { program = "sleep", args = ["60"] }
every = "2s"
"#,
    )
    .unwrap();
    let mut host = Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["run", "--for", "30s"])
        .current_dir(&dir)
        .env_remove("TAKT_DB")
        .env_remove("TAKT_PLUGIN_DIR")
        .env_remove("TAKT_EXE_ALLOWLIST")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("takt run starts");
    let db = dir.join("takt.db");
    let deadline = Instant::now() + Duration::from_secs(20);
    let running = loop {
        assert!(Instant::now() < deadline, "no run started");
        std::thread::sleep(Duration::from_millis(200));
        let Ok(store) = SqliteStore::open(&db, &read_only()) else {
            continue;
        };
        let Some(job) = block_on(store.job_get_by_name(&JobName::new("sleeper").unwrap()))
            .ok()
            .flatten()
        else {
            continue;
        };
        let runs = block_on(store.run_list(&RunFilter {
            job: job.id,
            state: Some(RunState::Running),
            limit: 10,
            ..RunFilter::default()
        }))
        .unwrap();
        if let Some(r) = runs.first() {
            break r.id.unwrap();
        }
    };
    let id = running.0.to_string();
    let out = takt(&dir, &["cancel", &id, "--by", "tester", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cancel"], "requested");
    assert_eq!(v["requested_by"], "tester");

    // The node polls its runs' cancel requests about every second; the plugin's grace is 5 s.
    let asked = Instant::now();
    let store = SqliteStore::open(&db, &read_only()).unwrap();
    let run = loop {
        let r = block_on(store.run_get(running)).unwrap().unwrap();
        if r.state.is_final() {
            break r;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(8),
            "still {} after 8 s",
            r.state
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(run.state, RunState::Cancelled, "{run:?}");
    let lines = block_on(store.log_list(running, None, 100)).unwrap();
    assert!(
        lines
            .iter()
            .any(|(_, l)| l.message.contains("cancelled by request: tester asked")),
        "{lines:?}"
    );
    // A final run cannot be cancelled again; an unknown one is named.
    let out = takt(&dir, &["cancel", &id]);
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("is already cancelled"), "{e}");
    let out = takt(&dir, &["cancel", "987654"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("run 987654 does not exist"), "{e}");
    let out = takt(&dir, &["cancel", "x"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("RUN_ID"), "{e}");

    let _ = Command::new("kill")
        .args(["-TERM", &host.id().to_string()])
        .status();
    let _ = host.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
