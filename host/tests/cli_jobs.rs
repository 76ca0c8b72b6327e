//! End-to-end tests of `takt db migrate`, `takt job …`, `takt runs` and `takt logs`: they run
//! the real binary against a SQLite file in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use takt_core::Timestamp;
use takt_core::job::{JobDef, JobName};
use takt_core::policy::RetryPolicy;
use takt_core::run::{NodeId, PluginBuild, RunEvent};
use takt_core::store::conformance::block_on;
use takt_core::store::{ClaimParams, LogLevel, LogLine, RunFinish, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "takt-cli-jobs-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    /// A directory with a migrated `takt.db` in it (commands other than `init`, `db
    /// migrate` and `run` never create one).
    fn migrated(name: &str) -> TempDir {
        let d = TempDir::new(name);
        d.ok(&["db", "migrate"]);
        d
    }

    fn db(&self) -> PathBuf {
        self.0.join("takt.db")
    }

    /// Runs takt in this directory (so the default `takt.db` lands here), without TAKT_DB.
    fn takt(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_takt"))
            .args(args)
            .current_dir(&self.0)
            .env_remove("TAKT_DB")
            .output()
            .expect("the takt binary runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.takt(args);
        assert!(
            out.status.success(),
            "takt {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// Runs a command that must fail with exit code 1; returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.takt(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "takt {args:?} should fail with 1: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).expect("utf-8")
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(&self.ok(&all)).expect("JSON output")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ts(v: &Value) -> Timestamp {
    v.as_str()
        .expect("a timestamp string")
        .parse()
        .expect("timestamp")
}

#[test]
fn migrate_twice_then_up_to_date() {
    let d = TempDir::new("migrate");
    let out = d.takt(&["db", "migrate"]);
    assert!(out.status.success());
    let first = String::from_utf8(out.stdout).expect("utf-8");
    assert!(first.contains("applied migration 0001"), "{first}");
    assert!(first.contains("applied migration 0002"), "{first}");
    assert!(first.contains("applied migration 0003"), "{first}");
    // Progress on stderr (not a terminal here: whole lines): each migration's start and end.
    let progress = String::from_utf8(out.stderr).expect("utf-8");
    assert!(
        progress.contains("applying migration 0002_claim_indexes …"),
        "{progress}"
    );
    assert!(
        progress.contains("applied migration 0002_claim_indexes in "),
        "{progress}"
    );
    assert!(d.db().exists(), "default takt.db in the working directory");
    let second = d.ok(&["db", "migrate"]);
    let latest = format!(
        "up to date (version {})",
        takt_host::store::latest_version()
    );
    assert!(second.contains(&latest), "{second}");
    // --db wins over the default, TAKT_DB over takt.db.
    let other = d.0.join("other.db");
    d.ok(&["db", "migrate", "--db", other.to_str().unwrap()]);
    assert!(other.exists());
    let env_db = d.0.join("env.db");
    let out = Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["db", "migrate"])
        .current_dir(&d.0)
        .env("TAKT_DB", &env_db)
        .output()
        .expect("runs");
    assert!(out.status.success());
    assert!(env_db.exists());
}

/// `takt job list` reads page by page (500 jobs a store call) and prints as it goes: across
/// page boundaries the table stays one table (one header, aligned) and `--json` one valid
/// array, every job once by name; `--limit` stops early, also inside a page, and a bad
/// `--limit` names the flag.
#[test]
fn job_list_prints_page_by_page_every_job_once() {
    let d = TempDir::migrated("pages");
    let store = SqliteStore::open(d.db(), &SqliteOptions::default()).expect("open");
    let now = Timestamp::now();
    // Inserted in reverse, so that name order is not id order.
    let n = 1203;
    for i in (0..n).rev() {
        let job = JobDef::new(&format!("job-{i:04}"), "examples::hello").expect("job");
        block_on(store.job_insert(&job, now)).expect("insert");
    }
    drop(store);
    let want: Vec<String> = (0..n).map(|i| format!("job-{i:04}")).collect();

    let all = d.json(&["job", "list"]);
    let names: Vec<&str> = all
        .as_array()
        .expect("one JSON array")
        .iter()
        .map(|j| j["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, want);

    let text = d.ok(&["job", "list"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), n + 1, "one header, one line per job");
    assert_eq!(lines.iter().filter(|l| l.starts_with("name ")).count(), 1);
    let col = lines[0].find("handler").expect("column");
    for (l, name) in lines[1..].iter().zip(&want) {
        assert!(l.starts_with(name.as_str()), "{l}");
        assert_eq!(
            &l[col..],
            "examples::hello  500",
            "aligned across pages: {l}"
        );
    }

    for limit in [1, 3, 500, 501, 2000] {
        let arg = limit.to_string();
        let got = d.json(&["job", "list", "--limit", &arg]);
        let got: Vec<&str> = got
            .as_array()
            .expect("one JSON array")
            .iter()
            .map(|j| j["name"].as_str().expect("name"))
            .collect();
        assert_eq!(got, want[..limit.min(n)], "--limit {limit}");
        let text = d.ok(&["job", "list", "--limit", &arg]);
        assert_eq!(text.lines().count(), limit.min(n) + 1, "--limit {limit}");
    }
    for bad in ["0", "-1", "many"] {
        let err = d.fails(&["job", "list", "--limit", bad]);
        assert!(err.contains(&format!("--limit \"{bad}\"")), "{err}");
    }
}

#[test]
fn add_list_show_in_text_and_json() {
    let d = TempDir::migrated("add");
    let added = d.ok(&[
        "job",
        "add",
        "--name",
        "report",
        "--handler",
        "examples::hello",
        "--cron",
        "0 6 * * *",
        "--tz",
        "Europe/Berlin",
        "--params",
        r#"{"to": "ops"}"#,
        "--retries",
        "3",
        "--retry-delays",
        "10s,30s,60s",
        "--misfire",
        "fire-once",
        "--overlap",
        "queue-one",
        "--priority",
        "10",
        "--group",
        "reports",
        "--timeout",
        "5m",
    ]);
    assert!(added.contains("added job report"), "{added}");
    assert!(added.contains("next 3 fire times"), "{added}");
    d.ok(&[
        "job",
        "add",
        "--name",
        "office",
        "--handler",
        "examples::hello",
        "--calendar",
        "weekly mon-fri every 1h between 06:00-22:30",
    ]);
    d.ok(&[
        "job",
        "add",
        "--name",
        "tick",
        "--handler",
        "examples::hello",
        "--every",
        "90s",
    ]);
    d.ok(&[
        "job",
        "add",
        "--name",
        "by-hand",
        "--handler",
        "examples::hello",
        "--manual",
    ]);

    let list = d.ok(&["job", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 5, "{list}");
    assert!(lines[0].starts_with("name"), "{list}");
    let col = lines[0].find("next fire (UTC)").expect("column");
    for l in &lines[1..] {
        // Aligned: every row's next-fire cell starts in the header's column.
        let cell = &l[col..];
        assert!(cell.starts_with("20") || cell.starts_with('-'), "{list}");
    }
    assert!(list.contains("cron 0 6 * * * (Europe/Berlin)"), "{list}");
    assert!(list.contains("every 1m30s"), "{list}");
    assert!(list.contains("manual"), "{list}");

    let all = d.json(&["job", "list"]);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["by-hand", "office", "report", "tick"],
        "by name (the listing pages by name)"
    );

    let show = d.ok(&["job", "show", "report"]);
    assert!(show.contains("Europe/Berlin"), "{show}");
    assert!(show.contains("next 5 fire times (UTC)"), "{show}");
    assert!(show.contains("reports"), "{show}");
    let j = d.json(&["job", "show", "report"]);
    assert_eq!(j["handler"], "examples::hello");
    assert_eq!(j["params"]["to"], "ops");
    assert_eq!(j["retries"], 3);
    assert_eq!(j["retry_delays"], "10s,30s,1m");
    assert_eq!(j["misfire"], "fire-once");
    assert_eq!(j["overlap"], "queue-one");
    assert_eq!(j["priority"], 10);
    assert_eq!(j["group"], "reports");
    assert_eq!(j["timeout_secs"], 300);
    assert_eq!(j["enabled"], true);
    assert_eq!(j["version"], 1);
    let fires = j["next_fires"].as_array().unwrap();
    assert_eq!(fires.len(), 5);
    assert_eq!(ts(&j["next_fire"]), ts(&fires[0]));
    for f in fires {
        // 06:00 in Berlin is 05:00 UTC in winter, 04:00 UTC in summer.
        let s = f.as_str().unwrap();
        assert!(
            s.ends_with("T05:00:00Z") || s.ends_with("T04:00:00Z"),
            "{s}"
        );
    }
    assert!(ts(&fires[0]) > Timestamp::now());
    let manual = d.json(&["job", "show", "by-hand"]);
    assert_eq!(manual["schedule"], Value::Null);
    assert_eq!(manual["next_fire"], Value::Null);

    let missing = d.fails(&["job", "show", "nope"]);
    assert!(missing.contains("no job named \"nope\""), "{missing}");
}

#[test]
fn bad_input_is_refused_with_precise_messages() {
    let d = TempDir::migrated("bad");
    let base = ["job", "add", "--name", "x", "--handler", "examples::hello"];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        d.fails(&a)
    };
    let e = with(&["--cron", "nope"]);
    assert!(e.contains("--cron") && e.contains("\"nope\""), "{e}");
    let e = with(&["--cron", "* * * * *", "--tz", "Mars/Base"]);
    assert!(
        e.contains("--tz") && e.contains("unknown time zone \"Mars/Base\""),
        "{e}"
    );
    let e = with(&["--manual", "--params", r#"{"a": "#]);
    assert!(
        e.contains("--params is not valid JSON") && e.contains("line 1 column"),
        "{e}"
    );
    let e = with(&["--manual", "--params", "42"]);
    assert!(e.contains("--params must be a JSON object or array"), "{e}");
    let e = with(&["--manual", "--misfire", "sometimes"]);
    assert!(
        e.contains("--misfire") && e.contains("\"sometimes\""),
        "{e}"
    );
    let e = with(&["--manual", "--overlap", "maybe"]);
    assert!(e.contains("--overlap"), "{e}");
    let e = with(&["--manual", "--retry-delays", "10x"]);
    assert!(e.contains("--retry-delays"), "{e}");
    let e = with(&["--manual", "--priority", "1000"]);
    assert!(e.contains("--priority"), "{e}");
    let e = d.fails(&[
        "job",
        "add",
        "--name",
        "x",
        "--handler",
        "no handler",
        "--manual",
    ]);
    assert!(
        e.contains("--handler") && e.contains("\"no handler\""),
        "{e}"
    );
    // Nothing was recorded by the refused commands.
    assert_eq!(d.json(&["job", "list"]), serde_json::json!([]));

    // A missing or doubled schedule is a usage error (exit 2).
    assert_eq!(d.takt(&base).status.code(), Some(2));
    let mut two = base.to_vec();
    two.extend_from_slice(&["--every", "1m", "--manual"]);
    assert_eq!(d.takt(&two).status.code(), Some(2));

    d.ok(&[
        "job",
        "add",
        "--name",
        "dup",
        "--handler",
        "examples::hello",
        "--every",
        "1m",
    ]);
    let e = d.fails(&[
        "job",
        "add",
        "--name",
        "dup",
        "--handler",
        "examples::hello",
        "--manual",
    ]);
    assert!(e.contains("job name dup is already taken"), "{e}");
    let j = d.json(&["job", "show", "dup"]);
    assert_eq!(
        j["schedule_short"], "every 1m",
        "the first job is unchanged"
    );
}

#[test]
fn update_enable_disable_trigger() {
    let d = TempDir::migrated("update");
    d.ok(&[
        "job",
        "add",
        "--name",
        "j",
        "--handler",
        "examples::hello",
        "--cron",
        "0 0 1 1 *",
    ]);
    let before = d.json(&["job", "show", "j"]);
    let out = d.ok(&["job", "update", "j", "--every", "10s", "--priority", "7"]);
    assert!(out.contains("updated job j (version 2)"), "{out}");
    let after = d.json(&["job", "show", "j"]);
    assert_eq!(after["schedule_short"], "every 10s");
    assert_eq!(after["priority"], 7);
    assert_eq!(after["version"], 2);
    assert_ne!(after["next_fire"], before["next_fire"]);
    let next = ts(&after["next_fire"]);
    let now = Timestamp::now();
    assert!(
        next > now.checked_sub(Duration::from_secs(1)).unwrap()
            && next <= now.checked_add(Duration::from_secs(11)).unwrap()
    );
    assert_eq!(next.as_second() % 10, 0);

    // A policy-only update keeps the next fire.
    d.ok(&["job", "update", "j", "--overlap", "allow"]);
    let kept = d.json(&["job", "show", "j"]);
    assert_eq!(kept["overlap"], "allow");
    assert_eq!(kept["next_fire"], after["next_fire"]);
    let e = d.fails(&["job", "update", "j", "--tz", "Nowhere/Zone"]);
    assert!(e.contains("unknown time zone \"Nowhere/Zone\""), "{e}");

    // Isolation: in-process by default, stored and shown; a bad value names the flag.
    assert_eq!(kept["isolation"], "in-process");
    d.ok(&["job", "update", "j", "--isolation", "process"]);
    assert_eq!(d.json(&["job", "show", "j"])["isolation"], "process");
    assert!(d.ok(&["job", "show", "j"]).contains("process"));
    let e = d.fails(&["job", "update", "j", "--isolation", "sandbox"]);
    assert!(
        e.contains("--isolation") && e.contains("use in-process or process"),
        "{e}"
    );

    d.ok(&["job", "disable", "j"]);
    assert_eq!(d.json(&["job", "show", "j"])["enabled"], false);
    let e = d.fails(&["job", "trigger", "j"]);
    assert!(e.contains("disabled"), "{e}");
    d.ok(&["job", "enable", "j"]);
    assert_eq!(d.json(&["job", "show", "j"])["enabled"], true);

    d.ok(&[
        "job",
        "add",
        "--name",
        "m",
        "--handler",
        "examples::hello",
        "--manual",
    ]);
    assert_eq!(d.json(&["job", "show", "m"])["next_fire"], Value::Null);
    let t0 = Timestamp::now().as_second();
    d.ok(&["job", "trigger", "m"]);
    let t1 = Timestamp::now().as_second();
    let due = ts(&d.json(&["job", "show", "m"])["next_fire"]).as_second();
    assert!(due >= t0 && due <= t1, "{t0} <= {due} <= {t1}");
}

/// Adds `name` (manual), triggers it through the CLI, then claims and finishes its run
/// through the store directly, with three log lines. Returns the run id.
fn seed_run(d: &TempDir, name: &str, fail: bool) -> i64 {
    d.ok(&[
        "job",
        "add",
        "--name",
        name,
        "--handler",
        "examples::hello",
        "--manual",
    ]);
    d.ok(&["job", "trigger", name]);
    let store = SqliteStore::open(d.db(), &SqliteOptions::default()).expect("open");
    let now = Timestamp::now()
        .checked_add(Duration::from_secs(1))
        .unwrap();
    let claimed = block_on(store.run_claim_due(&ClaimParams {
        claimed_at: None,
        node: NodeId("node-t".into()),
        instance: takt_core::node::InstanceId("test-life".into()),
        tags: Vec::new(),
        now,
        limit: 10,
        recurring_only: 0,
        lease: Duration::from_secs(60),
    }))
    .expect("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].job.name, JobName::new(name).unwrap());
    let run = claimed[0].run.clone();
    let id = run.id.expect("id");
    let lines: Vec<LogLine> = ["starting", "working", "done"]
        .iter()
        .enumerate()
        .map(|(i, m)| LogLine {
            at: now,
            level: LogLevel::ALL[i + 1],
            message: format!("{name} {m}"),
        })
        .collect();
    block_on(store.log_append(id, &lines)).expect("log");
    let mut done = run.clone();
    let build = PluginBuild {
        name: "examples".into(),
        version: "1.2.3".into(),
        sha256: Some("cd".repeat(32)),
    };
    let event = if fail {
        RunEvent::Failed {
            error: "connection refused by upstream".into(),
            retryable: false,
        }
    } else {
        RunEvent::Succeeded { result_json: None }
    };
    done.apply(event, now, &RetryPolicy::default())
        .expect("legal");
    let mut finish = RunFinish::from_run(&done, now);
    finish.plugin = (!fail).then_some(build);
    block_on(store.run_set_state_if_running(id, 1, &finish)).expect("finish");
    id.0
}

#[test]
fn runs_and_logs_show_seeded_rows() {
    let d = TempDir::migrated("runs");
    let ok_id = seed_run(&d, "good", false);
    let bad_id = seed_run(&d, "bad", true);

    let text = d.ok(&["runs"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for h in [
        "id",
        "job",
        "fire time",
        "state",
        "trigger",
        "attempt",
        "node",
        "started",
        "elapsed",
        "error",
    ] {
        assert!(lines[0].contains(h), "{text}");
    }
    // Both were run by `takt job trigger`: the trigger column says so.
    assert!(lines[1..].iter().all(|l| l.contains("manual")), "{text}");
    assert!(
        text.contains("succeeded") && text.contains("failed"),
        "{text}"
    );
    assert!(text.contains("connection refused by upstream"), "{text}");
    assert!(text.contains("node-t"), "{text}");

    let all = d.json(&["runs"]);
    assert_eq!(all.as_array().unwrap().len(), 2);
    for r in all.as_array().unwrap() {
        assert_eq!(r["trigger"], "manual", "{r}");
    }
    let only_bad = d.json(&["runs", "--job", "bad"]);
    assert_eq!(only_bad.as_array().unwrap().len(), 1);
    assert_eq!(only_bad[0]["id"], bad_id);
    assert_eq!(only_bad[0]["state"], "failed");
    assert_eq!(only_bad[0]["job"], "bad");
    assert_eq!(only_bad[0]["plugin"], Value::Null, "no build recorded");
    assert_eq!(only_bad[0]["plugin_sha256"], Value::Null);
    let succeeded = d.json(&["runs", "--state", "succeeded"]);
    assert_eq!(succeeded.as_array().unwrap().len(), 1);
    assert_eq!(succeeded[0]["id"], ok_id);
    assert_eq!(succeeded[0]["plugin"], "examples");
    assert_eq!(succeeded[0]["plugin_version"], "1.2.3");
    assert_eq!(succeeded[0]["plugin_sha256"], "cd".repeat(32));
    assert_eq!(
        d.json(&["runs", "--limit", "1"]).as_array().unwrap().len(),
        1
    );
    let e = d.fails(&["runs", "--state", "happy"]);
    assert!(e.contains("--state") && e.contains("\"happy\""), "{e}");
    let e = d.fails(&["runs", "--job", "ghost"]);
    assert!(e.contains("no job named \"ghost\""), "{e}");

    // Paging by cursor: a full page says how to go on, and the next page holds the other run.
    let page = d.ok(&["runs", "--limit", "1"]);
    let hint = page
        .lines()
        .find_map(|l| l.strip_prefix("more runs: add --before "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("a full page names its cursor: {page}"));
    let first = d.json(&["runs", "--limit", "1"]);
    assert_eq!(
        first[0]["cursor"], hint,
        "the table and json name one cursor"
    );
    let second = d.json(&["runs", "--limit", "1", "--before", hint]);
    assert_eq!(second.as_array().unwrap().len(), 1);
    assert_ne!(second[0]["id"], first[0]["id"], "the next page moves on");
    let rest = d.json(&[
        "runs",
        "--limit",
        "1",
        "--before",
        second[0]["cursor"].as_str().unwrap(),
    ]);
    assert!(
        rest.as_array().unwrap().is_empty(),
        "two runs, two pages: {rest}"
    );
    assert!(
        !d.ok(&["runs"]).contains("more runs"),
        "a short page is the last"
    );
    // A fire-time range: both runs fired at seeding time, so a range in the future holds none.
    assert!(
        d.json(&["runs", "--from", "2100-01-01"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        d.json(&["runs", "--to", "2100-01-01"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let e = d.fails(&["runs", "--from", "2100-01-02", "--to", "2100-01-01"]);
    assert!(e.contains("is not before --to"), "{e}");
    let e = d.fails(&["runs", "--from", "yesterday"]);
    assert!(e.contains("--from \"yesterday\" is not a time"), "{e}");
    let e = d.fails(&["runs", "--before", "page-2"]);
    assert!(e.contains("--before \"page-2\" is not a run cursor"), "{e}");

    let log = d.ok(&["logs", &ok_id.to_string()]);
    let got: Vec<&str> = log.lines().collect();
    assert_eq!(got.len(), 3, "{log}");
    assert!(
        got[0].ends_with("good starting") && got[2].ends_with("good done"),
        "{log}"
    );
    let lj = d.json(&["logs", &bad_id.to_string()]);
    assert_eq!(lj[1]["message"], "bad working");
    assert_eq!(lj[1]["level"], LogLevel::ALL[2].name());
    // The run is final, so --follow prints what there is and exits.
    let followed = d.ok(&["logs", &ok_id.to_string(), "--follow"]);
    assert_eq!(followed, log);
    let e = d.fails(&["logs", "999"]);
    assert!(e.contains("no run with id 999"), "{e}");
}

#[test]
fn remove_needs_yes_only_when_runs_exist() {
    let d = TempDir::migrated("remove");
    d.ok(&[
        "job",
        "add",
        "--name",
        "empty",
        "--handler",
        "examples::hello",
        "--every",
        "1h",
    ]);
    d.ok(&["job", "remove", "empty"]);
    d.fails(&["job", "show", "empty"]);

    let id = seed_run(&d, "busy", false);
    let e = d.fails(&["job", "remove", "busy"]);
    assert!(
        e.contains("has recorded runs") && e.contains("--yes"),
        "{e}"
    );
    assert_eq!(d.json(&["job", "show", "busy"])["name"], "busy");
    d.ok(&["job", "remove", "busy", "--yes"]);
    d.fails(&["job", "show", "busy"]);
    assert_eq!(d.json(&["runs"]), serde_json::json!([]));
    let e = d.fails(&["logs", &id.to_string()]);
    assert!(e.contains("no run with id"), "{e}");
}

fn db_arg(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn corrupt_and_read_only_files_give_the_store_error() {
    let d = TempDir::new("corrupt");
    let bad = d.0.join("garbage.db");
    let junk = "this is not a database, just text ".repeat(200);
    std::fs::write(&bad, &junk).unwrap();
    let expected = SqliteStore::open(&bad, &SqliteOptions::default())
        .expect_err("the store refuses it")
        .to_string();
    for args in [
        vec!["db", "migrate", "--db", db_arg(&bad)],
        vec!["job", "list", "--db", db_arg(&bad)],
        vec!["runs", "--db", db_arg(&bad)],
    ] {
        let e = d.fails(&args);
        assert!(e.contains(&expected), "{args:?}: {e} / {expected}");
        assert!(e.starts_with("error: "), "{e}");
    }
    assert_eq!(
        std::fs::read_to_string(&bad).unwrap(),
        junk,
        "left untouched"
    );

    // A read-only database file: the store refuses it (whoever runs the test, root
    // included: it checks the file's permissions) and the CLI prints the store's message.
    let ro = d.0.join("ro.db");
    d.ok(&["db", "migrate", "--db", db_arg(&ro)]);
    d.ok(&[
        "job",
        "add",
        "--name",
        "kept",
        "--handler",
        "examples::hello",
        "--manual",
        "--db",
        db_arg(&ro),
    ]);
    let mut perm = std::fs::metadata(&ro).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&ro, perm).unwrap();
    let expected = SqliteStore::open(&ro, &SqliteOptions::default())
        .expect_err("a read-only file is refused")
        .to_string();
    assert!(expected.contains("read-only"), "{expected}");
    for args in [
        vec![
            "job",
            "add",
            "--name",
            "x",
            "--handler",
            "examples::hello",
            "--manual",
            "--db",
            db_arg(&ro),
        ],
        vec!["job", "disable", "kept", "--db", db_arg(&ro)],
        vec!["db", "migrate", "--db", db_arg(&ro)],
    ] {
        let e = d.fails(&args);
        assert!(e.contains(&expected), "{args:?}: {e} / {expected}");
    }
    let mut perm = std::fs::metadata(&ro).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    std::fs::set_permissions(&ro, perm).unwrap();
    let kept = d.json(&["job", "show", "kept", "--db", db_arg(&ro)]);
    assert_eq!(
        kept["enabled"], true,
        "nothing recorded was lost or changed"
    );
}

#[test]
fn logs_follow_waits_for_the_run_to_end() {
    let d = TempDir::migrated("follow");
    d.ok(&[
        "job",
        "add",
        "--name",
        "slow",
        "--handler",
        "examples::hello",
        "--manual",
    ]);
    d.ok(&["job", "trigger", "slow"]);
    let store = SqliteStore::open(d.db(), &SqliteOptions::default()).expect("open");
    let now = Timestamp::now()
        .checked_add(Duration::from_secs(1))
        .unwrap();
    let claimed = block_on(store.run_claim_due(&ClaimParams {
        claimed_at: None,
        node: NodeId("node-f".into()),
        instance: takt_core::node::InstanceId("test-life".into()),
        tags: Vec::new(),
        now,
        limit: 10,
        recurring_only: 0,
        lease: Duration::from_secs(60),
    }))
    .expect("claim");
    let run = claimed[0].run.clone();
    let id = run.id.expect("id");
    let line = |m: &str| LogLine {
        at: now,
        level: LogLevel::Info,
        message: m.to_string(),
    };
    block_on(store.log_append(id, &[line("first")])).expect("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["logs", &id.0.to_string(), "--follow"])
        .current_dir(&d.0)
        .env_remove("TAKT_DB")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(1200));
    block_on(store.log_append(id, &[line("second")])).expect("log");
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "--follow keeps polling while the run is running"
    );
    let mut done = run.clone();
    done.apply(
        RunEvent::Succeeded { result_json: None },
        now,
        &RetryPolicy::default(),
    )
    .expect("legal");
    block_on(store.run_set_state_if_running(id, 1, &RunFinish::from_run(&done, now)))
        .expect("finish");
    let started = std::time::Instant::now();
    let out = child.wait_with_output().expect("wait");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "--follow exits once the run is final"
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].ends_with("first") && lines[1].ends_with("second"),
        "{text}"
    );
}

#[test]
fn negative_numbers_and_durations_name_the_option_and_the_form() {
    let d = TempDir::migrated("negative");
    let add = |extra: &[&str]| {
        let mut a = vec!["job", "add", "--name", "x", "--handler", "examples::hello"];
        a.extend_from_slice(extra);
        d.fails(&a)
    };
    let e = add(&["--every", "5m", "--timeout", "-5s"]);
    assert!(
        e.contains(
            "--timeout \"-5s\": a duration cannot be negative; give a positive duration such as \
             30s, 10m or 1h30m"
        ),
        "{e}"
    );
    let e = add(&["--every", "-5m"]);
    assert!(
        e.contains("--every \"-5m\": a duration cannot be negative"),
        "{e}"
    );
    let e = add(&["--manual", "--retries", "-1"]);
    assert!(
        e.contains(
            "--retries \"-1\": a count cannot be negative; give a whole number of 0 or more"
        ),
        "{e}"
    );
    let e = add(&["--manual", "--retries", "three"]);
    assert!(e.contains("--retries \"three\" is not a count"), "{e}");
    let e = add(&["--manual", "--priority", "-1"]);
    assert!(
        e.contains("--priority \"-1\": a priority cannot be negative"),
        "{e}"
    );
    let e = add(&["--manual", "--timeout", "0s"]);
    assert!(
        e.contains("--timeout \"0s\": duration \"0s\" is zero"),
        "{e}"
    );
    d.ok(&[
        "job",
        "add",
        "--name",
        "j",
        "--handler",
        "examples::hello",
        "--manual",
    ]);
    let cases: [(&[&str], &str); 9] = [
        (
            &["job", "update", "j", "--timeout", "-1m"],
            "--timeout \"-1m\": a duration cannot be negative",
        ),
        (
            &["job", "update", "j", "--retries", "-2"],
            "--retries \"-2\": a count cannot be negative",
        ),
        (
            &["runs", "--limit", "-1"],
            "--limit \"-1\": a count cannot be negative",
        ),
        (
            &["runs", "--limit", "0"],
            "--limit \"0\": a count must be at least 1",
        ),
        (
            &["logs", "-5"],
            "RUN_ID \"-5\": a run id cannot be negative",
        ),
        (
            &["schedule", "next", "--every", "5m", "-n", "-3"],
            "-n \"-3\": a count cannot be negative",
        ),
        (
            &["schedule", "next", "--every", "-5m"],
            "--every \"-5m\": a duration cannot be negative",
        ),
        (
            &["run", "--for", "-3s"],
            "--for \"-3s\": a duration cannot be negative",
        ),
        (
            &["cron", "explain", "* * * * *", "-n", "-1"],
            "-n \"-1\": a count cannot be negative",
        ),
    ];
    for (args, wanted) in cases {
        let e = d.fails(args);
        assert!(e.contains(wanted), "takt {args:?}: {e}");
    }
    // Nothing was changed by the refused commands.
    assert_eq!(d.json(&["job", "list"]).as_array().unwrap().len(), 1);
}

#[test]
fn a_past_at_is_refused_unless_allowed() {
    let d = TempDir::migrated("past-at");
    let base = [
        "job",
        "add",
        "--name",
        "once",
        "--handler",
        "examples::hello",
    ];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        a
    }
    let before = Timestamp::now();
    let e = d.fails(&with(&base, &["--at", "2026-01-01T00:00:00Z"]));
    assert!(
        e.contains("--at 2026-01-01T00:00:00Z is in the past (it is now 20")
            && e.contains(
                "give a future time, or --allow-past to record it as missed per the job's \
                 misfire policy (skip)"
            ),
        "{e}"
    );
    // The current time is shown, to the second.
    let now_shown: Timestamp = e
        .split("(it is now ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .expect("the time")
        .parse()
        .expect("an instant");
    assert!(
        (now_shown.as_second() - before.as_second()).abs() <= 5,
        "{e}"
    );
    // A wall-clock time in --tz shows the instant it means.
    let e = d.fails(&with(
        &base,
        &[
            "--at",
            "2026-01-01T08:00",
            "--tz",
            "Asia/Shanghai",
            "--misfire",
            "fire-once",
        ],
    ));
    assert!(
        e.contains("--at 2026-01-01T08:00 (2026-01-01T00:00:00Z) is in the past")
            && e.contains("misfire policy (fire-once)"),
        "{e}"
    );
    assert_eq!(d.json(&["job", "list"]), serde_json::json!([]));
    let e = d.fails(&with(&base, &["--every", "5m", "--allow-past"]));
    assert!(e.contains("--allow-past applies to --at only"), "{e}");

    // Allowed: due at once, at the past instant, for the loop's misfire handling.
    let out = d.ok(&with(
        &base,
        &["--at", "2026-01-01T00:00:00Z", "--allow-past"],
    ));
    assert!(
        out.contains("due now, late since 2026-01-01T00:00:00Z") && out.contains("(skip)"),
        "{out}"
    );
    let j = d.json(&["job", "show", "once"]);
    assert_eq!(j["next_fire"], "2026-01-01T00:00:00Z");

    // job update --at: the same rule.
    let e = d.fails(&["job", "update", "once", "--at", "2025-06-01T00:00:00Z"]);
    assert!(
        e.contains("--at 2025-06-01T00:00:00Z is in the past"),
        "{e}"
    );
    let future = Timestamp::now()
        .checked_add(Duration::from_secs(3600))
        .unwrap()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    d.ok(&["job", "update", "once", "--at", &future]);
    assert_eq!(d.json(&["job", "show", "once"])["next_fire"], future);
    d.ok(&[
        "job",
        "update",
        "once",
        "--at",
        "2025-06-01T00:00:00Z",
        "--allow-past",
    ]);
    assert_eq!(
        d.json(&["job", "show", "once"])["next_fire"],
        "2025-06-01T00:00:00Z"
    );
}

#[test]
fn show_has_each_field_once_and_update_help_has_no_add_defaults() {
    let d = TempDir::migrated("show-once");
    d.ok(&[
        "job",
        "add",
        "--name",
        "tagged",
        "--handler",
        "examples::hello",
        "--manual",
        "--node-tag",
        "line-1",
    ]);
    let show = d.ok(&["job", "show", "tagged"]);
    let fields: Vec<&str> = show
        .lines()
        .skip(1)
        .filter_map(|l| l.split("  ").next())
        .collect();
    let mut unique = fields.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), fields.len(), "a field shown twice:\n{show}");
    assert_eq!(show.matches("node tag").count(), 1, "{show}");

    let update = d.ok(&["job", "update", "--help"]);
    let add = d.ok(&["job", "add", "--help"]);
    for flag in [
        "--params",
        "--tz",
        "--timeout",
        "--retries",
        "--priority",
        "--misfire",
    ] {
        let line = |help: &str| {
            help.split("\n      --")
                .find(|o| o.starts_with(&flag[2..]))
                .unwrap_or_else(|| panic!("{flag} in {help}"))
                .to_string()
        };
        assert!(!line(&update).contains("[default:"), "{flag}: {update}");
        assert!(line(&add).contains("[default:"), "{flag}: {add}");
    }
    assert!(update.contains("only the options given change"), "{update}");
}

#[test]
fn every_job_subcommand_prints_json() {
    let d = TempDir::migrated("json-everywhere");
    let added = d.json(&[
        "job",
        "add",
        "--name",
        "j",
        "--handler",
        "examples::hello",
        "--every",
        "1h",
    ]);
    assert_eq!(added["name"], "j");
    assert_eq!(added["version"], 1);
    assert_eq!(added["schedule_short"], "every 1h");
    assert_eq!(added["next_fires"].as_array().unwrap().len(), 3);
    let updated = d.json(&["job", "update", "j", "--priority", "7"]);
    assert_eq!(updated["priority"], 7);
    assert_eq!(updated["version"], 2);
    let disabled = d.json(&["job", "disable", "j"]);
    assert_eq!(disabled["enabled"], false);
    let enabled = d.json(&["job", "enable", "j"]);
    assert_eq!(enabled["enabled"], true);
    let t0 = Timestamp::now().as_second();
    let triggered = d.json(&["job", "trigger", "j"]);
    let due = ts(&triggered["next_fire"]).as_second();
    assert!(
        due >= t0 && due <= Timestamp::now().as_second(),
        "{triggered}"
    );
    let listed = d.json(&["job", "list"]);
    assert_eq!(listed[0]["name"], "j");
    let shown = d.json(&["job", "show", "j"]);
    assert_eq!(shown["id"], added["id"]);
    let removed = d.json(&["job", "remove", "j"]);
    assert_eq!(removed["name"], "j");
    assert_eq!(removed["id"], added["id"]);
    assert_eq!(d.json(&["job", "list"]), serde_json::json!([]));
    // An error is still an error message, not a JSON document, and exit 1.
    let e = d.fails(&["job", "show", "j", "--json"]);
    assert!(e.starts_with("error: no job named \"j\""), "{e}");
}

#[test]
fn validity_windows_bound_fires_and_expired_jobs_say_so() {
    let d = TempDir::migrated("validity");
    let add = |name: &str, extra: &[&str]| {
        let mut args = vec![
            "job",
            "add",
            "--name",
            name,
            "--handler",
            "examples::hello",
            "--every",
            "1h",
        ];
        args.extend_from_slice(extra);
        d.json(&args)
    };
    // Effective in the future: the first fire is the window's first, local dates read in the
    // schedule's zone.
    let future = add(
        "later",
        &[
            "--tz",
            "Asia/Shanghai",
            "--effective-from",
            "2099-01-01",
            "--expires-at",
            "2099-01-02T00:00:00Z",
        ],
    );
    assert_eq!(future["effective_from"], "2098-12-31T16:00:00Z");
    assert_eq!(future["state"], "not yet effective");
    let fires: Vec<Timestamp> = future["next_fires"]
        .as_array()
        .expect("fires")
        .iter()
        .map(ts)
        .collect();
    assert!(
        fires
            .iter()
            .all(|f| f.to_string().as_str() >= "2098-12-31T16:00:00Z"),
        "{fires:?}"
    );
    assert_eq!(ts(&future["next_fire"]), fires[0]);

    // Expired: no next fire, and list and show say expired.
    let gone = add(
        "gone",
        &[
            "--effective-from",
            "2020-01-01T00:00:00Z",
            "--expires-at",
            "2020-06-01T00:00:00Z",
        ],
    );
    assert_eq!(gone["next_fire"], Value::Null);
    assert_eq!(gone["expired"], true);
    assert_eq!(gone["next_fires"], serde_json::json!([]));
    let list = d.ok(&["job", "list"]);
    let line = list
        .lines()
        .find(|l| l.starts_with("gone"))
        .expect("listed");
    assert!(line.contains("expired"), "{list}");
    assert!(d.ok(&["job", "show", "gone"]).contains("expired"));

    // Moving the expiry out revives it; clearing it too.
    let revived = d.json(&[
        "job",
        "update",
        "gone",
        "--expires-at",
        "2099-01-01T00:00:00Z",
    ]);
    assert_eq!(revived["state"], "enabled");
    assert!(revived["next_fire"].is_string());
    let cleared = d.json(&["job", "update", "gone", "--expires-at", ""]);
    assert_eq!(cleared["expires_at"], Value::Null);

    // Bad input names the flag, or both ends of the window.
    let e = d.fails(&[
        "job",
        "add",
        "--name",
        "x",
        "--handler",
        "examples::hello",
        "--manual",
        "--expires-at",
        "soon",
    ]);
    assert!(
        e.contains("--expires-at: \"soon\" is not an instant"),
        "{e}"
    );
    let e = d.fails(&[
        "job",
        "update",
        "later",
        "--expires-at",
        "2098-01-01T00:00:00Z",
    ]);
    assert!(e.contains("is not before expires_at"), "{e}");
}

#[test]
fn pause_and_resume_jobs_groups_and_nodes_with_who_and_why() {
    let d = TempDir::migrated("pause");
    for (name, group) in [("extract", "etl"), ("load", "etl"), ("report", "")] {
        let mut args = vec![
            "job",
            "add",
            "--name",
            name,
            "--handler",
            "examples::hello",
            "--every",
            "1m",
        ];
        if !group.is_empty() {
            args.extend_from_slice(&["--group", group]);
        }
        d.ok(&args);
    }
    let paused = d.json(&[
        "job",
        "pause",
        "report",
        "--reason",
        "line maintenance",
        "--by",
        "alice",
    ]);
    assert_eq!(paused["state"], "paused");
    assert_eq!(paused["pause"]["paused_by"], "alice");
    assert_eq!(paused["pause"]["reason"], "line maintenance");
    assert_eq!(paused["next_fire"], Value::Null, "kept aside while paused");
    let show = d.ok(&["job", "show", "report"]);
    assert!(show.contains("paused by alice at"), "{show}");
    assert!(show.contains("line maintenance"), "{show}");
    let list = d.ok(&["job", "list"]);
    let line = list
        .lines()
        .find(|l| l.starts_with("report"))
        .expect("listed");
    assert!(line.contains("paused"), "{list}");

    let e = d.fails(&["job", "pause", "report"]);
    assert!(e.contains("already paused by alice"), "{e}");
    let e = d.fails(&["job", "trigger", "report"]);
    assert!(e.contains("is paused"), "{e}");
    let resumed = d.json(&["job", "resume", "report"]);
    assert_eq!(resumed["state"], "enabled");
    assert!(resumed["next_fire"].is_string(), "{resumed}");
    let e = d.fails(&["job", "resume", "report"]);
    assert!(e.contains("is not paused"), "{e}");
    let e = d.fails(&["job", "pause", "nope"]);
    assert!(e.contains("no job named \"nope\""), "{e}");
    let e = d.fails(&["job", "pause", "report", "--by", " "]);
    assert!(e.contains("--by is empty"), "{e}");

    // Groups: every member held; list shows who paused it.
    let g = d.json(&["group", "pause", "etl", "--reason", "upstream down"]);
    assert_eq!(g["jobs"].as_array().map(Vec::len), Some(2));
    assert_eq!(d.json(&["job", "show", "load"])["state"], "paused");
    assert_eq!(d.json(&["job", "show", "load"])["pause"]["group"], "etl");
    let groups = d.ok(&["group", "list"]);
    assert!(
        groups.contains("extract, load") && groups.contains("upstream down"),
        "{groups}"
    );
    let e = d.fails(&["job", "resume", "load"]);
    assert!(e.contains("held by its group etl"), "{e}");
    let e = d.fails(&["group", "pause", "nightly"]);
    assert!(e.contains("no job is in group nightly"), "{e}");
    let r = d.json(&["group", "resume", "etl"]);
    assert_eq!(r["jobs"].as_array().map(Vec::len), Some(2));
    assert_eq!(d.json(&["job", "show", "load"])["state"], "enabled");
    let e = d.fails(&["group", "resume", "etl"]);
    assert!(e.contains("group etl is neither paused nor held"), "{e}");

    // A group's limit: set, listed, refused when bad.
    let g = d.json(&["group", "set", "etl", "--max-running", "2"]);
    assert_eq!(
        (g["max_running"].as_u64(), g["running"].as_u64()),
        (Some(2), Some(0))
    );
    assert!(d.ok(&["group", "list"]).contains("0 of 2"));
    let e = d.fails(&["group", "set", "etl", "--max-running", "0"]);
    assert!(e.contains("max_running must be at least 1"), "{e}");
    let e = d.fails(&["group", "set", "etl", "--max-running", "-3"]);
    assert!(e.contains("max_running must be at least 1"), "{e}");
    let e = d.fails(&["group", "set", "nightly", "--max-running", "2"]);
    assert!(e.contains("no job is in group nightly"), "{e}");
    let e = d.fails(&["group", "set", "etl"]);
    assert!(e.contains("--max-running N"), "{e}");
    assert!(d.json(&["group", "set", "etl", "--no-limit"])["max_running"].is_null());

    // Nodes: only registered ones.
    let e = d.fails(&["node", "pause", "line-7"]);
    assert!(e.contains("node line-7 has never registered"), "{e}");
    let e = d.fails(&["node", "resume", "line-7"]);
    assert!(e.contains("node line-7 is not paused"), "{e}");
}

/// `takt job backfill` creates the missing fires of a range once (a second run creates
/// nothing), they show in `takt runs` with trigger backfill, and bad input is refused.
#[test]
fn backfill_creates_missing_fires_once_and_refuses_bad_ranges() {
    let d = TempDir::migrated("backfill");
    d.ok(&[
        "job",
        "add",
        "--name",
        "hourly",
        "--handler",
        "examples::hello",
        "--cron",
        "0 * * * *",
    ]);
    let range = [
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T05:00:00Z",
    ];
    let mut first = vec!["job", "backfill", "hourly"];
    first.extend_from_slice(&range);
    let b = d.json(&first);
    assert_eq!(
        (b["fires"].as_u64(), b["created"].as_u64()),
        (Some(5), Some(5)),
        "{b}"
    );
    let text = d.ok(&first[..first.len()]);
    assert!(text.contains("created 0, already present 5"), "{text}");
    let runs = d.json(&["runs", "--job", "hourly"]);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 5);
    assert!(
        runs.iter()
            .all(|r| r["trigger"] == "backfill" && r["state"] == "pending"),
        "{runs:?}"
    );

    let e = d.fails(&[
        "job",
        "backfill",
        "hourly",
        "--from",
        "2026-01-02",
        "--to",
        "2026-01-01",
    ]);
    assert!(e.contains("reversed"), "{e}");
    let e = d.fails(&[
        "job",
        "backfill",
        "hourly",
        "--from",
        "2026-01-01",
        "--to",
        "2026-02-01",
        "--max",
        "100",
    ]);
    assert!(e.contains("holds 744 fires, more than --max 100"), "{e}");
    let e = d.fails(&[
        "job",
        "backfill",
        "nope",
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-02",
    ]);
    assert!(e.contains("nope"), "{e}");
    d.ok(&[
        "job",
        "add",
        "--name",
        "by-hand",
        "--handler",
        "examples::hello",
        "--manual",
    ]);
    let e = d.fails(&[
        "job",
        "backfill",
        "by-hand",
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-02",
    ]);
    assert!(e.contains("no recurring schedule"), "{e}");
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn dependencies_are_set_shown_and_refused_when_unknown_cyclic_or_malformed() {
    let d = TempDir::migrated("deps");
    let add = |name: &str, extra: &[&str]| {
        let mut a = vec!["job", "add", "--name", name, "--handler", "examples::hello"];
        a.extend_from_slice(&["--every", "10m"]);
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };

    // Unknown: refused, nothing stored.
    let e = d.fails(&refs(&add("load", &["--depends-on", "extract"])));
    assert!(
        e.contains("job load depends on extract, which does not exist; add job extract first"),
        "{e}"
    );
    d.ok(&refs(&add("extract", &[])));
    d.ok(&refs(&add("clean", &[])));
    d.ok(&refs(&add(
        "load",
        &["--depends-on", "extract, clean", "--dependency-wait", "30m"],
    )));
    let shown = d.json(&["job", "show", "load"]);
    assert_eq!(
        shown["dependencies"],
        serde_json::json!(["extract", "clean"])
    );
    assert_eq!(shown["dependency_wait"], "30m");
    let text = d.ok(&["job", "show", "load"]);
    assert!(text.contains("extract, clean"), "{text}");

    // A cycle: refused with the cycle listed.
    let e = d.fails(&["job", "update", "extract", "--depends-on", "load"]);
    assert!(
        e.contains(
            "dependency cycle: extract -> load -> extract; remove one of these dependencies"
        ),
        "{e}"
    );
    // Bad waits.
    for (wait, want) in [("0s", "is zero"), ("soon", "--dependency-wait \"soon\"")] {
        let e = d.fails(&refs(&add(
            "report",
            &["--depends-on", "load", "--dependency-wait", wait],
        )));
        assert!(e.contains(want), "{wait}: {e}");
    }
    // A job others depend on is not removed.
    let e = d.fails(&["job", "remove", "extract"]);
    assert!(
        e.contains("job extract cannot be removed: load depends on it"),
        "{e}"
    );
    // Cleared, it goes.
    d.ok(&[
        "job",
        "update",
        "load",
        "--depends-on",
        "",
        "--dependency-wait",
        "",
    ]);
    assert_eq!(
        d.json(&["job", "show", "load"])["dependencies"],
        serde_json::json!([])
    );
    d.ok(&["job", "remove", "extract"]);
}
