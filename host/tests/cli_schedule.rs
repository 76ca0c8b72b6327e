//! End-to-end tests of `takt schedule next` and `takt cron explain`: they run the real binary.

use std::process::{Command, Output};

fn takt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(args)
        .output()
        .expect("the takt binary runs")
}

fn ok(args: &[&str]) -> String {
    let out = takt(args);
    assert!(
        out.status.success(),
        "takt {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = takt(args);
    assert!(!out.status.success(), "takt {args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&ok(&all)).unwrap()
}

#[test]
fn cron_next_prints_utc_local_and_the_description() {
    let out = ok(&[
        "schedule",
        "next",
        "--cron",
        "0 2 L * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2026-01-15T00:00:00Z",
        "-n",
        "3",
    ]);
    assert!(
        out.contains("meaning    at 02:00 on the last day of every month, Europe/Berlin"),
        "{out}"
    );
    assert!(
        out.contains("1  2026-01-31T01:00:00Z  2026-01-31 02:00:00 +01:00"),
        "{out}"
    );
    assert!(
        out.contains("2  2026-02-28T01:00:00Z  2026-02-28 02:00:00 +01:00"),
        "{out}"
    );
    assert!(
        out.contains("3  2026-03-31T00:00:00Z  2026-03-31 02:00:00 +02:00"),
        "{out}"
    );
    assert!(out.contains("dst folds  fire once (first pass)"), "{out}");
}

#[test]
fn json_output_lists_occurrences_with_kinds() {
    let v = json(&[
        "schedule",
        "next",
        "--cron",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2026-03-07T12:00:00Z",
        "-n",
        "2",
        "--dst-gap",
        "skip",
    ]);
    assert_eq!(v["rule"], "cron");
    assert_eq!(v["tz"], "America/New_York");
    assert_eq!(v["dst"]["gap"], "skip");
    let occ = v["occurrences"].as_array().unwrap();
    assert_eq!(occ.len(), 2);
    assert_eq!(occ[0]["utc"], "2026-03-08T07:00:00Z");
    assert_eq!(occ[0]["kind"], "skipped");
    assert_eq!(occ[0]["fires"], false);
    assert_eq!(occ[0]["reason"], "dst_gap");
    assert_eq!(occ[0]["nominal"], "2026-03-08T02:30:00");
    assert_eq!(occ[1]["local"], "2026-03-09T02:30:00-04:00");
    assert_eq!(occ[1]["kind"], "fire");
}

#[test]
fn every_and_at_and_wall_clock_from() {
    let v = json(&[
        "schedule",
        "next",
        "--every",
        "5m",
        "--from",
        "2026-01-01T00:02:00Z",
        "-n",
        "2",
    ]);
    assert_eq!(v["occurrences"][0]["utc"], "2026-01-01T00:05:00Z");
    assert_eq!(v["occurrences"][1]["utc"], "2026-01-01T00:10:00Z");
    // --from without an offset is wall-clock time in --tz.
    let v = json(&[
        "schedule",
        "next",
        "--at",
        "2026-12-01T06:00",
        "--tz",
        "Asia/Shanghai",
        "--from",
        "2026-11-30T00:00",
        "-n",
        "5",
    ]);
    let occ = v["occurrences"].as_array().unwrap();
    assert_eq!(occ.len(), 1);
    assert_eq!(occ[0]["utc"], "2026-11-30T22:00:00Z");
    let done = ok(&[
        "schedule",
        "next",
        "--at",
        "2020-01-01T00:00:00Z",
        "--from",
        "2026-01-01T00:00:00Z",
    ]);
    assert!(done.contains("no further fire times"), "{done}");
}

#[test]
fn spec_documents_in_json_and_toml() {
    let v = json(&[
        "schedule",
        "next",
        "--spec",
        r#"{"cron": "0 9 * * WED,SAT", "tz": "Asia/Shanghai"}"#,
        "--from",
        "2026-11-30T00:00:00Z",
        "-n",
        "2",
    ]);
    assert_eq!(
        v["description"],
        "at 09:00 on Wednesday and Saturday, Asia/Shanghai"
    );
    assert_eq!(v["occurrences"][0]["utc"], "2026-12-02T01:00:00Z");
    let dir = std::env::temp_dir().join(format!("takt-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.toml");
    std::fs::write(&file, "every = \"90s\"\n").unwrap();
    let arg = format!("@{}", file.display());
    let v = json(&[
        "schedule",
        "next",
        "--spec",
        &arg,
        "--from",
        "2026-01-01T00:00:00Z",
        "-n",
        "1",
    ]);
    assert_eq!(v["occurrences"][0]["utc"], "2026-01-01T00:01:30Z");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn cron_explain_is_a_shorthand() {
    let out = ok(&[
        "cron",
        "explain",
        "*/15 * * * *",
        "--from",
        "2026-01-01T00:00:00Z",
        "-n",
        "2",
    ]);
    assert!(out.contains("every 15 minutes every day, UTC"), "{out}");
    assert!(out.contains("1  2026-01-01T00:15:00Z"), "{out}");
}

#[test]
fn bad_input_gets_a_precise_error_and_exit_code() {
    let e = fails(&["schedule", "next", "--cron", "0 0 * * 8"]);
    assert_eq!(
        e.trim(),
        "error: invalid schedule: cron: day-of-week: \"8\" is out of range 0-7"
    );
    let e = fails(&[
        "schedule",
        "next",
        "--cron",
        "* * * * *",
        "--tz",
        "Europe/Berln",
    ]);
    assert!(e.contains("did you mean Europe/Berlin?"), "{e}");
    let e = fails(&["schedule", "next", "--every", "5 parsecs"]);
    assert!(
        e.contains("every: duration \"5 parsecs\" is not valid"),
        "{e}"
    );
    let e = fails(&[
        "schedule",
        "next",
        "--cron",
        "* * * * *",
        "--from",
        "yesterday",
    ]);
    assert!(e.contains("--from: \"yesterday\" is not an instant"), "{e}");
    let e = fails(&["schedule", "next", "--cron", "* * * * *", "-n", "0"]);
    assert!(e.contains("-n must be between 1 and 10000"), "{e}");
    let e = fails(&["schedule", "next", "--spec", "@/nonexistent/takt.toml"]);
    assert!(
        e.contains("cannot read schedule spec file /nonexistent/takt.toml"),
        "{e}"
    );
    // Two rules at once is a usage error reported by the argument parser.
    let out = takt(&["schedule", "next", "--cron", "* * * * *", "--every", "5m"]);
    assert_eq!(out.status.code(), Some(2));
    let out = takt(&["schedule", "next"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn version_names_the_bundled_tzdb() {
    let v = ok(&["--version"]);
    assert!(v.starts_with("takt "), "{v}");
    assert!(v.contains("(tzdb 20"), "{v}");
}

#[test]
fn an_interval_is_named_once() {
    let out = ok(&["schedule", "next", "--every", "5m", "-n", "1"]);
    let head = out.lines().next().unwrap();
    assert_eq!(
        head.split_whitespace().collect::<Vec<_>>(),
        ["schedule", "every", "5m"],
        "{out}"
    );
    assert!(!out.contains("every every"), "{out}");
    let out = ok(&[
        "schedule",
        "next",
        "--every",
        "90s",
        "--anchor",
        "2026-01-01T00:00:10Z",
        "-n",
        "1",
    ]);
    assert!(
        out.lines()
            .next()
            .unwrap()
            .ends_with("every 1m30s from 2026-01-01T00:00:10Z"),
        "{out}"
    );
    assert!(!out.contains("every every"), "{out}");
    let v = json(&["schedule", "next", "--every", "5m", "-n", "1"]);
    assert_eq!(v["rule"], "every");
    assert_eq!(v["spec"], "5m");
}
