//! `takt init` and `takt run` end to end: a config written by `init` runs the example jobs
//! through the real `examples` cdylib and records every run and its log in SQLite; bad
//! configs are refused with the file and the key.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use takt_core::job::JobName;
use takt_core::run::RunState;
use takt_core::store::conformance::block_on;
use takt_core::store::{RunFilter, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

/// Builds the examples cdylib once per test binary (see `common`).
fn build_examples() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        common::build(&["takt-plugin-examples"]);
    });
}

/// A fresh, empty directory for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-cli-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn takt(dir: &Path, args: &[&str]) -> Output {
    common::takt_command(dir)
        .args(args)
        .output()
        .expect("takt runs")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `takt` expecting exit code 1 and returns stderr.
fn fails(dir: &Path, args: &[&str]) -> String {
    let out = takt(dir, args);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    stderr
}

#[test]
fn init_then_run_records_runs_and_logs() {
    build_examples();
    let dir = temp_dir("main");
    let out = takt(&dir, &["init", "--dir", "."]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("wrote"), "{stdout}");
    assert!(stdout.contains("next: takt run"), "{stdout}");
    assert!(dir.join("takt.db").is_file());
    assert!(dir.join("tokens").is_dir());

    // init refuses to overwrite without --force
    let original = std::fs::read_to_string(dir.join("takt.toml")).unwrap();
    std::fs::write(dir.join("takt.toml"), "# mine\n").unwrap();
    let stderr = fails(&dir, &["init", "--dir", "."]);
    assert!(stderr.contains("already exists"), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.join("takt.toml")).unwrap(),
        "# mine\n"
    );
    let out = takt(&dir, &["init", "--dir", ".", "--force"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("takt.toml")).unwrap(),
        original
    );

    let out = takt(&dir, &["run", "--for", "12s"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("plugin examples") && stdout.contains("loaded"),
        "{stdout}"
    );
    assert!(
        stdout.contains("3 added, 0 updated, 0 unchanged"),
        "{stdout}"
    );
    assert!(stdout.contains("job hello says hello, takt"), "{stdout}");
    assert!(stdout.contains("summary:"), "{stdout}");

    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let hello = block_on(store.job_get_by_name(&JobName::new("hello").unwrap()))
        .unwrap()
        .expect("the hello job was synced");
    assert_eq!(hello.application.as_deref(), Some("takt.toml"));
    let runs = block_on(store.run_list(&RunFilter {
        job: hello.id,
        state: Some(RunState::Succeeded),
        limit: 100,
        ..RunFilter::default()
    }))
    .unwrap();
    assert!(!runs.is_empty(), "no succeeded hello run: {stdout}");
    let lines = block_on(store.log_list(runs[0].id.unwrap(), None, 100)).unwrap();
    assert!(
        lines.iter().any(|(_, l)| l.message.contains("hello, takt")),
        "{lines:?}"
    );
    assert_eq!(
        block_on(store.job_list()).unwrap().len(),
        3,
        "exactly the three declared jobs"
    );
    drop(store);

    // a second start finds the jobs unchanged; a changed job is updated, a removed one disabled
    let cfg = std::fs::read_to_string(dir.join("takt.toml")).unwrap();
    let cut = cfg.find("[[jobs]]\nname = \"weekday-hourly\"").unwrap();
    let cfg = cfg[..cut].replace("every = \"10s\"", "every = \"20s\"");
    std::fs::write(dir.join("takt.toml"), cfg).unwrap();
    let out = takt(&dir, &["run", "--for", "1s"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("0 added, 1 updated, 1 unchanged, 1 disabled"),
        "{stdout}"
    );
    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let weekday = block_on(store.job_get_by_name(&JobName::new("weekday-hourly").unwrap()))
        .unwrap()
        .unwrap();
    assert!(!weekday.enabled);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_handler_is_synced_and_its_runs_fail_with_the_resolve_error() {
    build_examples();
    let dir = temp_dir("unknown-handler");
    let plugins = common::profile_dir();
    let cfg = format!(
        "plugin_dir = {}\n[[jobs]]\nname = \"ghost\"\nhandler = \"examples::nope\"\nevery = \"1s\"\n",
        toml_string(&plugins)
    );
    std::fs::write(dir.join("takt.toml"), cfg).unwrap();
    let out = takt(&dir, &["run", "--for", "3s"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("warning: job ghost: handler \"examples::nope\" does not resolve"),
        "{stdout}"
    );
    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let runs = block_on(store.run_list(&RunFilter {
        job: None,
        state: Some(RunState::Failed),
        limit: 100,
        ..RunFilter::default()
    }))
    .unwrap();
    assert!(!runs.is_empty(), "{stdout}");
    let error = runs[0].error.as_deref().unwrap_or_default();
    assert!(error.contains("nope"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn toml_string(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

#[test]
fn bad_configs_name_the_file_and_the_key() {
    let dir = temp_dir("bad");
    let file = dir.join("takt.toml");
    let cases: [(&str, &[&str]); 5] = [
        ("capacity = 2\ncolour = \"red\"\n", &["line 2", "colour"]),
        (
            "[[jobs]]\nname = \"a\"\nhandler = \"examples::hello\"\ncron = \"0 25 * * *\"\n",
            &["jobs[0].cron", "25"],
        ),
        (
            "timezone = \"Mars/Olympus\"\n",
            &["timezone", "Mars/Olympus"],
        ),
        (
            "[[jobs]]\nname = \"a\"\nhandler = \"examples::hello\"\nevery = \"1m\"\ntz = \"Nowhere/City\"\n",
            &["jobs[0].every", "Nowhere/City"],
        ),
        (
            "[[jobs]]\nname = \"a\"\nhandler = \"examples::hello\"\nevery = \"1m\"\nretries = \"three\"\n",
            &["line 5", "retries"],
        ),
    ];
    for (cfg, wanted) in cases {
        std::fs::write(&file, cfg).unwrap();
        let stderr = fails(
            &dir,
            &["run", "--config", file.to_str().unwrap(), "--for", "1s"],
        );
        assert!(stderr.contains(file.to_str().unwrap()), "{cfg}: {stderr}");
        for w in wanted {
            assert!(stderr.contains(w), "{cfg}: wanted {w:?} in {stderr}");
        }
    }
    assert!(
        !dir.join("takt.db").exists(),
        "nothing is created for a bad config"
    );
    let stderr = fails(&dir, &["run", "--config", "missing.toml"]);
    assert!(
        stderr.contains("missing.toml") && stderr.contains("takt init"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_job_never_takes_over_a_job_added_by_the_cli_or_api() {
    let dir = temp_dir("takeover");
    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let job = takt_core::job::JobDef::new("hello", "examples::hello").unwrap();
    block_on(store.job_insert(&job, jiff::Timestamp::now())).unwrap();
    drop(store);
    std::fs::write(
        dir.join("takt.toml"),
        "[[jobs]]\nname = \"hello\"\nhandler = \"examples::hello\"\nevery = \"1m\"\n",
    )
    .unwrap();
    let stderr = fails(&dir, &["run", "--for", "1s"]);
    assert!(
        stderr.contains("takt.toml") && stderr.contains("job \"hello\" already exists"),
        "{stderr}"
    );
    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let stored = block_on(store.job_get_by_name(&JobName::new("hello").unwrap()))
        .unwrap()
        .unwrap();
    assert!(stored.schedule.is_none(), "the stored job was left alone");
    assert_eq!(stored.application, None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plugin list` and `plugin verify` check files as `takt run` would: the config's
/// `plugin_dir` and pins apply (flags win), and a directory that cannot be read is an error.
#[test]
fn plugin_list_and_verify_follow_the_config() {
    build_examples();
    let dir = temp_dir("plugin-config");
    let out = takt(&dir, &["init", "--dir", "."]);
    assert!(out.status.success(), "{:?}", text(&out));
    let plugins = common::profile_dir();

    let out = takt(&dir, &["plugin", "list"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let first = stdout.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "plugin directory {} (plugin_dir of takt.toml)",
            plugins.display()
        ),
        "{stdout}"
    );
    assert!(stdout.contains("examples 0.1.0"), "{stdout}");
    let out = takt(&dir, &["plugin", "list", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["dir"], plugins.display().to_string());
    assert_eq!(doc["config"], "takt.toml");

    // Pins of the config: the examples file is refused before it is loaded.
    let examples = common::cdylib(&plugins, "takt-plugin-examples");
    let name = examples.file_name().unwrap().to_str().unwrap().to_string();
    let other = dir.join("other.toml");
    std::fs::write(
        &other,
        format!(
            "plugin_dir = {}\n[plugins]\npins = {{ {name:?} = \"{}\" }}\n",
            toml_string(&plugins),
            "0".repeat(64)
        ),
    )
    .unwrap();
    let out = takt(
        &dir,
        &["plugin", "list", "--config", "other.toml", "--json"],
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let refused = doc["refused"].as_array().unwrap();
    assert!(
        refused
            .iter()
            .any(|r| r["file"].as_str().unwrap().ends_with(&name)
                && r["reason"]
                    .as_str()
                    .unwrap()
                    .contains("but the configuration pins 0000")),
        "{doc:#}"
    );
    let file = examples.to_str().unwrap();
    let stderr = fails(&dir, &["plugin", "verify", file, "--config", "other.toml"]);
    assert!(
        stderr.contains("but the configuration pins 0000"),
        "{stderr}"
    );
    // A --pin flag wins over the file's pin.
    let sha = {
        use sha2::Digest;
        let bytes = std::fs::read(&examples).unwrap();
        sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let pin = format!("{name}={sha}");
    let out = takt(
        &dir,
        &[
            "plugin",
            "verify",
            file,
            "--config",
            "other.toml",
            "--pin",
            &pin,
        ],
    );
    assert!(out.status.success(), "{:?}", text(&out));

    // A plugin directory that is not there: exit 1, saying where the name came from.
    std::fs::write(dir.join("takt.toml"), "plugin_dir = \"nowhere\"\n").unwrap();
    let stderr = fails(&dir, &["plugin", "list"]);
    assert!(
        stderr.contains("cannot read the plugin directory")
            && stderr.contains("nowhere (plugin_dir of takt.toml)"),
        "{stderr}"
    );
    let empty = temp_dir("plugin-config-empty");
    let stderr = fails(&empty, &["plugin", "list"]);
    assert!(
        stderr.contains("plugins (the default: there is no takt.toml here)"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
}

/// `job add --at PAST --allow-past`: the fire is due at once and `takt run` handles it as a
/// late fire per the job's misfire policy — recorded skipped (misfire) under `skip`, run now
/// under `fire-once` — never dropped silently.
#[test]
fn an_allowed_past_at_is_handled_as_a_misfire() {
    build_examples();
    let dir = temp_dir("past-at");
    std::fs::write(
        dir.join("takt.toml"),
        format!("plugin_dir = {}\n", toml_string(&common::profile_dir())),
    )
    .unwrap();
    let past = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(1))
        .unwrap()
        .round(jiff::Unit::Second)
        .unwrap();
    let at = past.to_string();
    let out = takt(&dir, &["db", "migrate", "--db", "takt.db"]);
    assert!(out.status.success(), "{:?}", text(&out));
    for (name, misfire) in [("late-skip", "skip"), ("late-once", "fire-once")] {
        let out = takt(
            &dir,
            &[
                "job",
                "add",
                "--name",
                name,
                "--handler",
                "examples::hello",
                "--params",
                r#"{"name": "late"}"#,
                "--at",
                &at,
                "--allow-past",
                "--misfire",
                misfire,
                "--db",
                "takt.db",
            ],
        );
        assert!(out.status.success(), "{:?}", text(&out));
    }
    let out = takt(&dir, &["run", "--for", "3s"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");

    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let runs_of = |name: &str| {
        let job = block_on(store.job_get_by_name(&JobName::new(name).unwrap()))
            .unwrap()
            .unwrap();
        let runs = block_on(store.run_list(&RunFilter {
            job: job.id,
            state: None,
            limit: 10,
            ..RunFilter::default()
        }))
        .unwrap();
        (job, runs)
    };
    let (job, runs) = runs_of("late-skip");
    assert_eq!(runs.len(), 1, "{runs:#?}\n{stdout}");
    assert_eq!(runs[0].state, RunState::Skipped, "{runs:#?}");
    assert_eq!(
        runs[0].skip_reason.map(|r| r.name()),
        Some("misfire"),
        "{runs:#?}"
    );
    assert_eq!(runs[0].fire_time, past);
    assert_eq!(job.next_fire, None, "a one-shot job is done");
    let (job, runs) = runs_of("late-once");
    assert_eq!(runs.len(), 1, "{runs:#?}\n{stdout}");
    assert_eq!(runs[0].state, RunState::Succeeded, "{runs:#?}");
    assert_eq!(runs[0].fire_time, past);
    assert_eq!(job.next_fire, None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn init_migrate_and_run_speak_json() {
    build_examples();
    let dir = temp_dir("json");
    let out = takt(&dir, &["init", "--dir", ".", "--json"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let init: serde_json::Value = serde_json::from_str(&stdout).expect("init prints one json");
    assert!(
        init["config"].as_str().unwrap().ends_with("takt.toml"),
        "{init}"
    );
    assert_eq!(init["next"], "takt run", "{init}");
    assert!(init["schema_version"].as_u64().unwrap() >= 1, "{init}");
    assert_eq!(init["examples_plugin_found"], true, "{init}");

    let out = takt(&dir, &["db", "migrate", "--db", "takt.db", "--json"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let m: serde_json::Value = serde_json::from_str(&stdout).expect("migrate prints one json");
    assert_eq!(
        m["applied"],
        serde_json::json!([]),
        "init migrated already: {m}"
    );
    assert_eq!(m["version"], init["schema_version"], "{m}");

    // Every stdout line of `takt run --json` is one event; the banner went to stderr. The
    // hello job fires every 10 s: 12 s hold at least one of its runs.
    let out = takt(&dir, &["run", "--for", "12s", "--json"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("summary:"),
        "the human lines are on stderr: {stderr}"
    );
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not json ({e}): {l}")))
        .collect();
    let hello = events
        .iter()
        .find(|e| e["event"] == "run_finished" && e["job"] == "hello")
        .unwrap_or_else(|| panic!("no finished hello run: {stdout}"));
    assert_eq!(hello["state"], "succeeded", "{hello}");
    assert!(hello["run"].as_i64().is_some(), "{hello}");
    assert!(
        hello["logs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["message"].as_str().unwrap().contains("hello, takt")),
        "{hello}"
    );
    let started = events
        .iter()
        .filter(|e| e["event"] == "run_started")
        .count();
    assert!(started >= 1, "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The worked example of seed 004 (`examples/seed-004/takt.toml`, issue 15 item 10) loads,
/// syncs its six jobs and its group, schedules each as the seed describes, and runs: a
/// triggered sync resolves its incremental window from its params templates.
#[test]
fn the_seed_004_example_runs() {
    build_examples();
    let dir = temp_dir("seed004");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/seed-004/takt.toml");
    let db = dir.join("takt.db");
    let takt_env = |args: &[&str]| {
        let out = common::takt_command(&dir)
            .env("TAKT_DB", &db)
            .env("TAKT_PLUGIN_DIR", common::profile_dir())
            .args(args)
            .output()
            .expect("takt runs");
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?}\n{stdout}\n{stderr}");
        stdout
    };
    let config = config.to_str().unwrap();
    let started = takt_env(&["run", "--config", config, "--for", "1s"]);
    assert!(
        started.contains("6 added, 0 updated, 0 unchanged, 0 disabled"),
        "{started}"
    );

    let jobs: serde_json::Value =
        serde_json::from_str(&takt_env(&["job", "list", "--json"])).unwrap();
    let job = |name: &str| {
        jobs.as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .unwrap_or_else(|| panic!("no job {name}: {jobs}"))
            .clone()
    };
    let beijing = jiff::tz::TimeZone::get("Asia/Shanghai").unwrap();
    let next = |name: &str| {
        let t: jiff::Timestamp = job(name)["next_fire"].as_str().unwrap().parse().unwrap();
        t.to_zoned_datetime(beijing.clone())
    };
    use jiff::civil::Weekday::{Saturday, Sunday, Wednesday};
    let sync = next("sync-orders");
    assert!(
        !matches!(sync.weekday(), Saturday | Sunday)
            && (6..=22).contains(&sync.hour())
            && sync.minute() == 0,
        "hourly on weekdays in 06:00-22:30: {sync}"
    );
    let weekly = next("weekly-report");
    assert!(
        matches!(weekly.weekday(), Wednesday | Saturday) && weekly.hour() == 9,
        "Wednesday and Saturday at 09:00: {weekly}"
    );
    let credit = next("credit-score");
    assert_eq!(
        (credit.day(), credit.hour()),
        (credit.days_in_month(), 20),
        "the last day of the month at 20:00: {credit}"
    );
    assert_eq!(job("load")["dependencies"], serde_json::json!(["extract"]));
    assert_eq!(job("load")["group"], "nightly-etl");
    let groups: serde_json::Value =
        serde_json::from_str(&takt_env(&["group", "list", "--json"])).unwrap();
    assert!(
        groups.to_string().contains("\"max_running\":1"),
        "the group's limit is stored: {groups}"
    );

    // A triggered sync runs, its window resolved from the templates (no success yet: the
    // default, the hour before its fire).
    takt_env(&["job", "trigger", "sync-orders"]);
    takt_env(&["run", "--config", config, "--for", "4s"]);
    let runs: serde_json::Value =
        serde_json::from_str(&takt_env(&["runs", "--job", "sync-orders", "--json"])).unwrap();
    let run = &runs[0];
    assert_eq!(run["state"], "succeeded", "{runs}");
    let name = run["params_resolved"]["name"].as_str().unwrap_or_default();
    assert!(
        name.starts_with("sync 20") && name.contains(" .. ") && !name.contains("{{"),
        "the resolved window: {run}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `takt job backfill --wait` follows the backfilled runs until they have all ended (the
/// progress bar is hidden off a terminal) while a `takt run` beside it runs them, then says
/// how they ended.
#[test]
fn backfill_waits_for_its_runs_to_end() {
    build_examples();
    let dir = temp_dir("backfill-wait");
    let out = takt(&dir, &["init", "--dir", "."]);
    assert!(out.status.success(), "{:?}", text(&out));
    let out = takt(
        &dir,
        &[
            "job",
            "add",
            "--name",
            "bf",
            "--handler",
            "examples::hello",
            "--every",
            "1h",
        ],
    );
    assert!(out.status.success(), "{:?}", text(&out));
    let mut host = common::takt_command(&dir)
        .args(["run", "--for", "40s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("takt run starts");
    let now = jiff::Timestamp::now();
    let from = (now - jiff::SignedDuration::from_hours(3)).to_string();
    let to = now.to_string();
    let mut backfill = common::takt_command(&dir)
        .args([
            "job", "backfill", "bf", "--from", &from, "--to", &to, "--wait", "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("takt job backfill starts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(35);
    while backfill.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = backfill.kill();
            let _ = host.kill();
            panic!("takt job backfill --wait did not return once its runs ended");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let out = backfill.wait_with_output().expect("output");
    let _ = host.kill();
    let _ = host.wait();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("one json document");
    assert_eq!(v["created"], 3, "three hourly fires in three hours: {v}");
    assert_eq!(
        v["ended"],
        serde_json::json!({"succeeded": 3}),
        "every backfilled run ended, and how: {v}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
