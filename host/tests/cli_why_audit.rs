//! `takt why` and `takt audit` on SQLite through the real binary: a fire lost to a DST gap, to
//! downtime under misfire skip, a gap made by deleting a run row by hand, a duplicate made by
//! inserting a second executed attempt by hand, `takt runs --json` with attempts, and bad
//! input with its precise errors. The history is written through the store with fixed
//! instants (a node's lives, claims, finishes, the loop's misfire skips), then read by the CLI.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use takt_core::Timestamp;
use takt_core::job::{JobDef, JobId};
use takt_core::node::{InstanceId, NodeInfo, Registration};
use takt_core::policy::misfire;
use takt_core::run::{NodeId, Run, RunEvent};
use takt_core::schedule::cron::CronExpr;
use takt_core::schedule::{DstPolicy, FoldPolicy, GapPolicy, Interval, Rule, Schedule, Zone};
use takt_core::store::conformance::block_on;
use takt_core::store::{ClaimParams, RunFinish, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("takt-why-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let d = Dir(dir);
        let out = d.takt(&["db", "migrate"]);
        assert!(out.status.success(), "migrate: {out:?}");
        d
    }

    fn db(&self) -> PathBuf {
        self.0.join("takt.db")
    }

    fn takt(&self, args: &[&str]) -> Output {
        common::takt_command(&self.0)
            .args(args)
            .output()
            .expect("takt runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.takt(args);
        assert!(
            out.status.success(),
            "takt {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// A command that must exit 1: (stdout, stderr).
    fn fails(&self, args: &[&str]) -> (String, String) {
        let out = self.takt(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "takt {args:?} should exit 1: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).expect("utf-8"),
            String::from_utf8(out.stderr).expect("utf-8"),
        )
    }

    fn sql(&self, sql: &str) {
        rusqlite::Connection::open(self.db())
            .expect("raw open")
            .execute_batch(sql)
            .expect("sql by hand");
    }
}

impl Drop for Dir {
    /// Removed, unless `TAKT_TEST_KEEP` is set (to look at the databases afterwards).
    fn drop(&mut self) {
        if std::env::var_os("TAKT_TEST_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn t(s: &str) -> Timestamp {
    s.parse().expect("instant")
}

fn store(path: &Path) -> SqliteStore {
    SqliteStore::open(path, &SqliteOptions::default()).expect("open store")
}

/// A node life, as `takt run` registers it.
fn register(s: &SqliteStore, node: &str, life: &str, now: Timestamp) -> InstanceId {
    let instance = InstanceId(life.to_string());
    block_on(s.node_register(&Registration {
        node: NodeInfo {
            id: NodeId(node.into()),
            instance: instance.clone(),
            host_name: "plant-pc".into(),
            pid: 0,
            version: "test".into(),
            capacity: 4,
            tags: Vec::new(),
        },
        now,
        live_for: Duration::from_secs(60),
        replace: None,
    }))
    .expect("register");
    instance
}

/// Claims what is due at `now` on `node` and finishes each run with success a second later.
fn claim_and_succeed(s: &SqliteStore, node: &str, life: &InstanceId, now: Timestamp) -> Vec<Run> {
    block_on(s.lease_renew(&NodeId(node.into()), life, now, now)).expect("heartbeat");
    let claimed = block_on(s.run_claim_due(&ClaimParams {
        claimed_at: None,
        node: NodeId(node.into()),
        instance: life.clone(),
        tags: Vec::new(),
        now,
        limit: 10,
        recurring_only: 0,
        lease: Duration::from_secs(60),
    }))
    .expect("claim");
    let end = now
        .checked_add(jiff::SignedDuration::from_secs(1))
        .expect("end");
    claimed
        .into_iter()
        .map(|c| {
            let mut done = c.run.clone();
            done.apply(RunEvent::Succeeded { result_json: None }, end, &c.job.retry)
                .expect("succeed");
            block_on(s.run_set_state_if_running(
                c.run.id.expect("id"),
                c.run.attempt,
                &RunFinish::from_run(&done, end),
            ))
            .expect("finish")
        })
        .collect()
}

fn insert(s: &SqliteStore, mut job: JobDef, first: Timestamp, created: Timestamp) -> JobId {
    job.next_fire = Some(first);
    block_on(s.job_insert(&job, created))
        .expect("insert")
        .id
        .expect("id")
}

/// A daily 02:30 job in Berlin that skips DST gaps: the night of 2026-03-29 has no 02:30.
fn dst_history(d: &Dir) {
    let s = store(&d.db());
    let cron = CronExpr::parse("0 30 2 * * *").expect("cron");
    let schedule = Schedule::new(Rule::Cron(cron), Zone::get("Europe/Berlin").expect("zone"))
        .with_dst(DstPolicy {
            gap: GapPolicy::Skip,
            fold: FoldPolicy::Auto,
        });
    let job = JobDef::new("nightly", "x::y")
        .expect("job")
        .with_schedule(schedule);
    insert(
        &s,
        job,
        t("2026-03-28T01:30:00Z"),
        t("2026-03-28T00:00:00Z"),
    );
    let life = register(&s, "node-a", "a-1", t("2026-03-28T00:00:00Z"));
    assert_eq!(
        claim_and_succeed(&s, "node-a", &life, t("2026-03-28T01:30:00Z")).len(),
        1
    );
    assert_eq!(
        claim_and_succeed(&s, "node-a", &life, t("2026-03-30T00:30:00Z")).len(),
        1
    );
    block_on(s.node_stopped(&NodeId("node-a".into()), &life, t("2026-03-30T01:00:00Z")))
        .expect("stop");
}

/// A group held by a member's failed run: `why` of another member names the member, its run
/// and how to release it; a resume releases it.
#[test]
fn why_names_a_group_hold_and_resume_releases_it() {
    let d = Dir::new("group");
    let s = store(&d.db());
    let start = t("2026-06-01T10:00:00Z");
    let every = Interval::new(60, Some(start)).expect("interval");
    let member = |name: &str| {
        let mut j = JobDef::new(name, "x::y")
            .expect("job")
            .with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()));
        j.group = Some("etl".into());
        j
    };
    insert(&s, member("extract"), start, start);
    insert(&s, member("load"), start, start);
    let life = register(&s, "node-a", "a-1", start);
    block_on(s.lease_renew(&NodeId("node-a".into()), &life, start, start)).expect("heartbeat");
    let claimed = block_on(s.run_claim_due(&ClaimParams {
        claimed_at: None,
        node: NodeId("node-a".into()),
        instance: life.clone(),
        tags: Vec::new(),
        now: start,
        limit: 10,
        recurring_only: 0,
        lease: Duration::from_secs(60),
    }))
    .expect("claim");
    assert_eq!(claimed.len(), 2);
    let end = t("2026-06-01T10:00:05Z");
    let mut failed_run = 0;
    for c in claimed {
        let mut done = c.run.clone();
        let event = if c.job.name.as_str() == "extract" {
            failed_run = c.run.id.expect("id").0;
            RunEvent::Failed {
                error: "source offline".into(),
                retryable: false,
            }
        } else {
            RunEvent::Succeeded { result_json: None }
        };
        done.apply(event, end, &c.job.retry).expect("finish");
        block_on(s.run_set_state_if_running(
            c.run.id.expect("id"),
            c.run.attempt,
            &RunFinish::from_run(&done, end),
        ))
        .expect("finish");
    }
    let db = d.db();
    let db = db.to_str().expect("utf-8");
    let why: Value =
        serde_json::from_str(&d.ok(&["why", "load", "--json", "--db", db])).expect("json");
    let held = why["reasons"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["code"] == "group_held"))
        .unwrap_or_else(|| panic!("a group_held reason: {why}"));
    let text = held["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("member extract") && text.contains(&format!("run {failed_run}")),
        "{text}"
    );
    assert!(text.contains("takt group resume etl"), "{text}");
    let list = d.ok(&["group", "list", "--db", db]);
    assert!(list.contains("held: extract"), "{list}");
    let out = d.ok(&["group", "resume", "etl", "--db", db]);
    assert!(out.contains("released the failure hold"), "{out}");
    let why: Value =
        serde_json::from_str(&d.ok(&["why", "load", "--json", "--db", db])).expect("json");
    assert!(
        !why["reasons"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["code"] == "group_held")),
        "{why}"
    );
}

#[test]
fn a_fire_lost_to_a_dst_gap_is_explained_and_audited() {
    let d = Dir::new("dst");
    dst_history(&d);
    let db = d.db();
    let db = db.to_str().expect("utf-8");
    let out = d.ok(&["why", "nightly", "--at", "2026-03-29T02:30", "--db", db]);
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.contains("was skipped: dst_gap"),
        "conclusion first: {out}"
    );
    assert!(
        out.contains("2026-03-29 02:30:00 does not exist in Europe/Berlin"),
        "{out}"
    );
    let v: Value = serde_json::from_str(&d.ok(&[
        "why",
        "nightly",
        "--at",
        "2026-03-29T02:30",
        "--json",
        "--db",
        db,
    ]))
    .expect("json");
    assert_eq!(
        v["at"]["instant"], "2026-03-29T01:00:00Z",
        "the gap's end: {v}"
    );
    assert_eq!(v["at"]["fires"], false);
    assert_eq!(v["at"]["run"]["skip_reason"], "dst_gap");

    let range = ["--from", "2026-03-28", "--to", "2026-03-31", "--db", db];
    let out = d.ok(&[&["audit", "--job", "nightly"][..], &range[..]].concat());
    assert!(
        out.starts_with(
            "clean in 2026-03-28T00:00:00Z .. 2026-03-31T00:00:00Z: 0 gaps, 0 duplicates"
        ),
        "{out}"
    );
    let v: Value = serde_json::from_str(&d.ok(&[&["audit", "--json"][..], &range[..]].concat()))
        .expect("json");
    assert_eq!(v["jobs"][0]["expected"], 3, "{v}");
    assert_eq!(v["jobs"][0]["ran"], 2);
    assert_eq!(v["jobs"][0]["skipped"], 1);

    // The skip record deleted by hand: now a gap.
    d.sql("DELETE FROM runs WHERE skip_reason = 'dst_gap'");
    let (out, err) = d.fails(&[&["audit"][..], &range[..]].concat());
    assert!(out.starts_with("NOT CLEAN"), "{out}");
    assert!(
        out.contains("gap: nightly at 2026-03-29T01:00:00Z (2026-03-29 03:00:00 +02:00)"),
        "{out}"
    );
    assert!(
        err.contains(
            "audit found 1 gap and 0 duplicates in 2026-03-28T00:00:00Z .. 2026-03-31T00:00:00Z"
        ),
        "{err}"
    );
    let out = d.ok(&["why", "nightly", "--at", "2026-03-29T02:30", "--db", db]);
    assert!(
        out.starts_with("no record of the fire at 2026-03-29T01:00:00Z although a node was up"),
        "{out}"
    );
}

/// An hourly job, the host down from 01:10 to 04:20 with misfire skip: the loop recorded the
/// missed fires as skipped when it came back.
fn downtime_history(d: &Dir) -> JobId {
    let s = store(&d.db());
    let every = Interval::new(3600, Some(t("2026-06-01T00:00:00Z"))).expect("interval");
    let job = JobDef::new("hourly", "x::y")
        .expect("job")
        .with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()));
    let id = insert(
        &s,
        job,
        t("2026-06-01T00:00:00Z"),
        t("2026-05-31T23:00:00Z"),
    );
    let one = register(&s, "node-a", "a-1", t("2026-05-31T23:50:00Z"));
    claim_and_succeed(&s, "node-a", &one, t("2026-06-01T00:00:00Z"));
    claim_and_succeed(&s, "node-a", &one, t("2026-06-01T01:00:00Z"));
    block_on(s.node_stopped(&NodeId("node-a".into()), &one, t("2026-06-01T01:10:00Z")))
        .expect("stop");
    let back = t("2026-06-01T04:20:00Z");
    let two = register(&s, "node-a", "a-2", back);
    // What the loop does at start: plan the misfires, record the skips, move the next fire.
    let job = block_on(s.job_get(id)).expect("get").expect("job");
    let schedule = job.schedule.clone().expect("schedule");
    let nf = job.next_fire.expect("next fire");
    let plan = misfire::plan(&schedule, nf, back, job.misfire);
    assert_eq!(plan.skips.len(), 3, "02:00, 03:00, 04:00 missed: {plan:?}");
    for skip in &plan.skips {
        block_on(s.run_insert_skipped(&Run::skipped(id, skip.fire_time, skip.reason, None, back)))
            .expect("skip");
    }
    block_on(s.job_set_next_fire(id, Some(nf), plan.next_fire)).expect("next fire");
    claim_and_succeed(&s, "node-a", &two, t("2026-06-01T05:00:00Z"));
    block_on(s.node_stopped(&NodeId("node-a".into()), &two, t("2026-06-01T05:10:00Z")))
        .expect("stop");
    id
}

#[test]
fn a_fire_lost_to_downtime_with_misfire_skip_names_the_downtime() {
    let d = Dir::new("down");
    downtime_history(&d);
    let db = d.db();
    let db = db.to_str().expect("utf-8");
    let out = d.ok(&["why", "hourly", "--at", "2026-06-01T03:00:00Z", "--db", db]);
    assert!(
        out.starts_with(
            "the fire at 2026-06-01T03:00:00Z was skipped: misfire; the host was down from \
             2026-06-01T01:10:00Z to 2026-06-01T04:20:00Z, misfire policy skip"
        ),
        "{out}"
    );
    let range = [
        "--from",
        "2026-06-01T00:00:00Z",
        "--to",
        "2026-06-01T06:00:00Z",
        "--db",
        db,
    ];
    let v: Value = serde_json::from_str(&d.ok(&[&["audit", "--json"][..], &range[..]].concat()))
        .expect("json");
    assert_eq!(
        (v["gaps"].as_u64(), v["duplicates"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(v["jobs"][0]["expected"], 6, "{v}");
    assert_eq!(v["jobs"][0]["ran"], 3);
    assert_eq!(v["jobs"][0]["skipped"], 3);

    // The 03:00 skip deleted by hand: a gap, and the downtime is its evidence.
    d.sql("DELETE FROM runs WHERE fire_time = 1780282800000");
    let (out, _) = d.fails(&[&["audit"][..], &range[..]].concat());
    assert!(
        out.contains(
            "gap: hourly at 2026-06-01T03:00:00Z (2026-06-01 03:00:00 +00:00): the host was down \
             from 2026-06-01T01:10:00Z to 2026-06-01T04:20:00Z"
        ),
        "{out}"
    );
    let out = d.ok(&["why", "hourly", "--at", "2026-06-01T03:00:00Z", "--db", db]);
    assert!(
        out.starts_with(
            "no record of the fire at 2026-06-01T03:00:00Z: the host was down from \
             2026-06-01T01:10:00Z to 2026-06-01T04:20:00Z; misfire policy skip"
        ),
        "{out}"
    );
    // A time the schedule does not fire at.
    let out = d.ok(&["why", "hourly", "--at", "2026-06-01T03:30:00Z", "--db", db]);
    assert!(out.starts_with("no fire at 2026-06-01T03:30:00Z"), "{out}");
    assert!(
        out.contains("previous fire: 2026-06-01 03:00:00 +00:00"),
        "{out}"
    );
    assert!(
        out.contains("next fire:     2026-06-01 04:00:00 +00:00"),
        "{out}"
    );
}

#[test]
fn a_second_executed_attempt_inserted_by_hand_is_a_duplicate() {
    let d = Dir::new("dup");
    downtime_history(&d);
    let db = d.db();
    let db = db.to_str().expect("utf-8");
    let range = [
        "--from",
        "2026-06-01T00:00:00Z",
        "--to",
        "2026-06-01T06:00:00Z",
        "--db",
        db,
    ];
    d.ok(&[&["audit"][..], &range[..]].concat());
    // The 00:00 fire executed again by another node while the first attempt ran.
    d.sql(
        "INSERT INTO run_attempts (run_id, attempt, node_id, node_instance, started_at, \
         finished_at, outcome) SELECT id, 2, 'node-b', 'b-1', fire_time, fire_time + 1000, \
         'succeeded' FROM runs WHERE fire_time = 1780272000000",
    );
    let (out, err) = d.fails(&[&["audit"][..], &range[..]].concat());
    assert!(out.contains("duplicate: hourly run 1 at 2026-06-01T00:00:00Z: attempts 1 (2026-06-01T00:00:00Z on node-a) and 2 (2026-06-01T00:00:00Z on node-b) were executing at the same time"), "{out}");
    assert!(err.contains("audit found 0 gaps and 1 duplicate"), "{err}");
    let (json, _) = d.fails(&[&["audit", "--json"][..], &range[..]].concat());
    let v: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["duplicates"], 1, "{v}");
    assert_eq!(
        v["jobs"][0]["duplicates"][0]["attempts"][1]["node"],
        "node-b"
    );
    // `takt runs --json` shows both attempts; `why --at` says so too.
    let runs: Value =
        serde_json::from_str(&d.ok(&["runs", "--job", "hourly", "--json", "--db", db]))
            .expect("json");
    let first = runs
        .as_array()
        .expect("array")
        .iter()
        .find(|r| r["fire_time"] == "2026-06-01T00:00:00Z")
        .expect("the 00:00 run");
    assert_eq!(
        first["attempts"].as_array().map(Vec::len),
        Some(2),
        "{first}"
    );
    assert_eq!(first["attempts"][0]["outcome"], "succeeded");
    let out = d.ok(&["why", "hourly", "--at", "2026-06-01T00:00:00Z", "--db", db]);
    assert!(out.contains("executed more than once"), "{out}");
    assert!(out.contains("node-b"), "the attempts table: {out}");
}

#[test]
fn why_without_at_names_what_stands_in_the_way() {
    let d = Dir::new("next");
    downtime_history(&d);
    let db = d.db();
    let db = db.to_str().expect("utf-8");
    let out = d.ok(&["why", "hourly", "--db", db]);
    assert!(
        out.starts_with("hourly will not fire: no node is running: the last sign of life was node node-a at 2026-06-01T05:10:00Z (a clean stop)"),
        "{out}"
    );
    assert!(out.contains("[overdue_misfire]"), "{out}");
    d.ok(&["job", "disable", "hourly", "--db", db]);
    let v: Value =
        serde_json::from_str(&d.ok(&["why", "hourly", "--json", "--db", db])).expect("json");
    assert_eq!(v["reasons"][0]["code"], "disabled", "{v}");
    assert!(
        v["conclusion"]
            .as_str()
            .is_some_and(|c| c.starts_with("hourly will not fire: it is disabled")),
        "{v}"
    );
}

#[test]
fn bad_input_gets_precise_errors() {
    let d = Dir::new("bad");
    downtime_history(&d);
    let db = d.db();
    let db = db.to_str().expect("utf-8");
    let (_, err) = d.fails(&["why", "nosuch", "--db", db]);
    assert!(
        err.contains("no job named \"nosuch\"; see takt job list"),
        "{err}"
    );
    let (_, err) = d.fails(&["why", "hourly", "--at", "yesterday", "--db", db]);
    assert!(
        err.contains("--at \"yesterday\" is not a time; give an RFC 3339 instant"),
        "{err}"
    );
    let (_, err) = d.fails(&[
        "audit",
        "--from",
        "2026-06-02",
        "--to",
        "2026-06-01",
        "--db",
        db,
    ]);
    assert!(
        err.contains("--from 2026-06-02T00:00:00Z is not before --to 2026-06-01T00:00:00Z"),
        "{err}"
    );
    let (_, err) = d.fails(&["audit", "--from", "soon", "--to", "2026-06-01", "--db", db]);
    assert!(err.contains("--from \"soon\" is not a time"), "{err}");
    let (_, err) = d.fails(&[
        "audit",
        "--job",
        "nosuch",
        "--from",
        "2026-06-01",
        "--to",
        "2026-06-02",
        "--db",
        db,
    ]);
    assert!(err.contains("--job: no job named \"nosuch\""), "{err}");
}

/// No hand edits: node-a loses its lease mid-run (a long GC pause, a cut network), node-b
/// recovers the run and retries it, and node-a — which never stopped — finishes its attempt
/// late. The store refuses that finish but records the attempt's real end, so the audit sees
/// the fire executed twice at once.
#[test]
fn a_zombie_attempt_beside_its_retry_is_a_duplicate() {
    let d = Dir::new("zombie");
    {
        let s = store(&d.db());
        let mut job = JobDef::new("report", "x::y").expect("job");
        job.retry = takt_core::policy::RetryPolicy::new(
            1,
            takt_core::policy::Backoff::Fixed(vec![Duration::from_secs(10)]),
        );
        let every = Interval::new(3600, Some(t("2026-06-01T00:00:00Z"))).expect("interval");
        let job = job.with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()));
        insert(
            &s,
            job,
            t("2026-06-01T00:00:00Z"),
            t("2026-05-31T23:00:00Z"),
        );
        let a = register(&s, "node-a", "a-1", t("2026-05-31T23:59:00Z"));
        let b = register(&s, "node-b", "b-1", t("2026-05-31T23:59:00Z"));
        let claim = |node: &str, life: &InstanceId, now: &str| {
            block_on(s.run_claim_due(&ClaimParams {
                claimed_at: None,
                node: NodeId(node.into()),
                instance: life.clone(),
                tags: Vec::new(),
                now: t(now),
                limit: 10,
                recurring_only: 0,
                lease: Duration::from_secs(60),
            }))
            .expect("claim")
        };
        let first = claim("node-a", &a, "2026-06-01T00:00:00Z").remove(0);
        // node-a goes silent; at 00:01:30 node-b recovers the expired lease.
        let rec =
            block_on(s.run_recover_expired(t("2026-06-01T00:01:30Z"), None)).expect("recover");
        assert_eq!(rec.len(), 1);
        let retry = claim("node-b", &b, "2026-06-01T00:01:40Z").remove(0);
        assert_eq!(retry.run.attempt, 2);
        let mut done = retry.run.clone();
        done.apply(
            RunEvent::Succeeded { result_json: None },
            t("2026-06-01T00:02:00Z"),
            &retry.job.retry,
        )
        .expect("succeed");
        block_on(s.run_set_state_if_running(
            retry.run.id.expect("id"),
            2,
            &RunFinish::from_run(&done, t("2026-06-01T00:02:00Z")),
        ))
        .expect("finish");
        // node-a wakes up and reports its own success at 00:03:00: refused.
        let mut late = first.run.clone();
        late.apply(
            RunEvent::Succeeded { result_json: None },
            t("2026-06-01T00:03:00Z"),
            &first.job.retry,
        )
        .expect("succeed");
        let e = block_on(s.run_set_state_if_running(
            first.run.id.expect("id"),
            1,
            &RunFinish::from_run(&late, t("2026-06-01T00:03:00Z")),
        ))
        .unwrap_err();
        assert!(e.to_string().contains("is not running attempt 1"), "{e}");
    }
    let db = d.db();
    let db = db.to_str().expect("utf-8");
    let (out, err) = d.fails(&[
        "audit",
        "--from",
        "2026-06-01T00:00:00Z",
        "--to",
        "2026-06-01T00:30:00Z",
        "--db",
        db,
    ]);
    assert!(
        out.contains(
            "duplicate: report run 1 at 2026-06-01T00:00:00Z: attempts 1 (2026-06-01T00:00:00Z \
             on node-a) and 2 (2026-06-01T00:01:40Z on node-b) were executing at the same time"
        ),
        "{out}"
    );
    assert!(err.contains("0 gaps and 1 duplicate"), "{err}");
    let v: Value = serde_json::from_str(&d.ok(&["runs", "--json", "--db", db])).expect("json");
    let attempts = &v[0]["attempts"];
    assert_eq!(attempts[0]["outcome"], "lease_expired", "{v}");
    assert_eq!(
        attempts[0]["finished_at"], "2026-06-01T00:03:00Z",
        "its real end: {v}"
    );
    assert!(
        attempts[0]["error"].as_str().is_some_and(|e| e.contains(
            "its node went on executing it and finished it at 2026-06-01T00:03:00Z (succeeded)"
        )),
        "{v}"
    );
}

/// A run waiting for its dependency is shown as waiting by `takt runs` (text and JSON) and
/// named by `takt why`; after the dependency failed, the skip names it.
#[test]
fn a_run_waiting_for_a_dependency_is_shown_and_explained() {
    let d = Dir::new("deps");
    let db = d.db();
    let s = store(&db);
    let hourly = || {
        let every = Interval::new(3600, Some(t("2026-06-01T00:00:00Z"))).expect("interval");
        JobDef::new("x", "examples::hello")
            .expect("job")
            .with_schedule(Schedule::new(Rule::Interval(every), Zone::utc()))
    };
    let fire = t("2026-06-01T10:00:00Z");
    let mut extract = hourly();
    extract.name = takt_core::job::JobName::new("extract").expect("name");
    insert(&s, extract, fire, fire);
    let mut load = hourly();
    load.name = takt_core::job::JobName::new("load").expect("name");
    load.dependencies = vec![takt_core::job::JobName::new("extract").expect("name")];
    insert(&s, load, fire, fire);
    let life = register(&s, "node-a", "life-1", fire);
    // extract is claimed (and left running); load's fire waits for it.
    block_on(s.run_claim_due(&ClaimParams {
        claimed_at: None,
        node: NodeId("node-a".into()),
        instance: life,
        tags: Vec::new(),
        now: fire,
        limit: 10,
        recurring_only: 0,
        lease: Duration::from_secs(600),
    }))
    .expect("claim");
    drop(s);
    let db = db.to_str().expect("utf-8");
    let runs = d.ok(&["runs", "--job", "load", "--db", db]);
    assert!(runs.contains("waiting"), "{runs}");
    assert!(runs.contains("waiting for extract"), "{runs}");
    let v: Value = serde_json::from_str(&d.ok(&["runs", "--job", "load", "--json", "--db", db]))
        .expect("json");
    assert_eq!(v[0]["state"], "pending", "{v}");
    assert_eq!(v[0]["waiting"], true, "{v}");
    assert!(
        v[0]["waiting_for"]
            .as_str()
            .is_some_and(|w| w.starts_with("waiting for extract")),
        "{v}"
    );
    assert_eq!(v[0]["error"], Value::Null, "{v}");
    let why: Value =
        serde_json::from_str(&d.ok(&["why", "load", "--json", "--db", db])).expect("json");
    let reasons = why["reasons"].as_array().expect("reasons");
    let waiting = reasons
        .iter()
        .find(|r| r["code"] == "waiting_for_dependency")
        .unwrap_or_else(|| panic!("{why}"));
    assert!(
        waiting["text"]
            .as_str()
            .is_some_and(|t| t.contains("waiting for extract") && t.contains("takt cancel")),
        "{waiting}"
    );
    let text = d.ok(&["why", "extract", "--db", db]);
    assert!(!text.contains("waiting_for_dependency"), "{text}");
}
