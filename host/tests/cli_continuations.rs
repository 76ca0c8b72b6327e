//! Continuations and dynamic parameters end to end (issue 15 items 2 and 7): a `takt run`
//! process where each successful run of a parent job starts its `on_success` job once, whose
//! params see `{{ parent.run_id }}`, and a job whose template names an undefined value fails
//! with the key path; `takt job add` refuses a template syntax error and an unknown
//! continuation.

#![cfg(unix)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use takt_core::job::JobName;
use takt_core::run::{RunState, Trigger};
use takt_core::store::conformance::block_on;
use takt_core::store::{RunFilter, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-cli-cont-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    dir
}

fn takt(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(args)
        .current_dir(dir)
        .env_remove("TAKT_DB")
        .env_remove("TAKT_PLUGIN_DIR")
        .env_remove("TAKT_EXE_ALLOWLIST")
        .output()
        .expect("takt runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_parent_starts_its_continuation_once_per_success_with_its_run_id_in_the_params() {
    let dir = temp_dir("chain");
    std::fs::write(
        dir.join("takt.toml"),
        r#"
plugin_dir = "plugins"

[[jobs]]
name = "extract"
handler = "exe::run"
params = { program = "true" }
every = "2s"
on_success = ["report"]

[[jobs]]
name = "report"
handler = "exe::run"
params = { program = "echo", args = ["parent={{ parent.run_id }}", "state={{ parent.state }}", "{{ fire_time | utc | fmt('%Y') }}"] }

[[jobs]]
name = "broken"
handler = "exe::run"
params = { program = "echo", window = { from = "{{ prev_fire_time2 }}" } }
every = "3s"
"#,
    )
    .unwrap();
    let out = takt(&dir, &["run", "--for", "9s"]);
    assert!(out.status.success(), "takt run: {}", text(&out));

    let mut o = SqliteOptions::default();
    o.migrate = false;
    let store = SqliteStore::open(dir.join("takt.db"), &o).expect("open");
    let id_of = |name: &str| {
        block_on(store.job_get_by_name(&JobName::new(name).unwrap()))
            .unwrap()
            .unwrap()
            .id
    };
    let runs_of = |name: &str| {
        block_on(store.run_list(&RunFilter {
            job: id_of(name),
            limit: 1000,
            ..RunFilter::default()
        }))
        .unwrap()
    };
    let parents: Vec<_> = runs_of("extract")
        .into_iter()
        .filter(|r| r.state == RunState::Succeeded)
        .collect();
    assert!(parents.len() >= 2, "the parent ran: {parents:?}");
    let children = runs_of("report");
    let mut by_parent = BTreeMap::new();
    for c in &children {
        assert_eq!(c.trigger, Some(Trigger::Continuation), "{c:?}");
        let parent = c.parent_run_id.expect("a continuation names its parent");
        assert!(
            by_parent.insert(parent, c.clone()).is_none(),
            "two continuations of one parent run: {children:?}"
        );
    }
    for p in &parents {
        let id = p.id.unwrap();
        let kids = block_on(store.run_children(id)).unwrap();
        assert!(
            kids.len() <= 1,
            "parent {id} continued more than once: {kids:?}"
        );
    }
    // Every parent but possibly the last (its child may not have started before the stop)
    // was continued, and the child ran with the parent's id resolved into its params.
    let finished: Vec<_> = by_parent
        .values()
        .filter(|c| c.state == RunState::Succeeded)
        .collect();
    assert!(
        finished.len() + 1 >= parents.len(),
        "each success continued: {} parents, children {children:?}",
        parents.len()
    );
    for c in finished {
        let parent = c.parent_run_id.unwrap();
        let params = c
            .params_resolved
            .as_deref()
            .expect("resolved params recorded");
        assert!(
            params.contains(&format!("parent={parent}")) && params.contains("state=succeeded"),
            "the parent's id and state in the child's params: {params}"
        );
        assert!(!params.contains("{{"), "no template left: {params}");
    }

    let broken = runs_of("broken");
    assert!(!broken.is_empty(), "the broken job fired");
    for r in &broken {
        assert_eq!(r.state, RunState::Failed, "{r:?}");
        let e = r.error.as_deref().unwrap_or_default();
        assert!(
            e.starts_with("params.window.from: undefined value prev_fire_time2"),
            "the error names the key path and the value: {e}"
        );
        assert_eq!(r.attempt, 1, "a template error is not retried");
    }

    let out = takt(&dir, &["runs", "--job", "report", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &shown[0];
    assert_eq!(first["trigger"], "continuation", "{first}");
    assert!(first["parent_run_id"].is_i64(), "{first}");
    let out = takt(&dir, &["runs", "--job", "extract", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        shown
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["continuations"].as_array().is_some_and(|c| c.len() == 1)),
        "a parent lists its continuation: {shown}"
    );
    // One run in full: the child names its parent, the parent its continuation.
    let (parent, child) = by_parent.iter().next().expect("a continuation");
    let out = takt(&dir, &["runs", "--id", &child.id.unwrap().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    assert!(shown.contains("continuation of"), "{shown}");
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("parent run") && l.contains(&parent.to_string())),
        "{shown}"
    );
    let out = takt(&dir, &["runs", "--id", &parent.to_string(), "--json"]);
    let one: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(one["continuations"][0]["id"], child.id.unwrap().0, "{one}");
    let out = takt(&dir, &["runs", "--id", "999999"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("run 999999 does not exist"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn job_add_refuses_template_syntax_errors_unknown_continuations_and_cycles() {
    let dir = temp_dir("refusals");
    let out = takt(&dir, &["db", "migrate"]);
    assert!(out.status.success(), "{}", text(&out));
    let add = |args: &[&str]| {
        let mut all = vec!["job", "add", "--handler", "exe::run", "--manual"];
        all.extend_from_slice(args);
        takt(&dir, &all)
    };
    let out = add(&[
        "--name",
        "bad",
        "--params",
        r#"{"program":"echo","args":["{{ fire_time "]}"#,
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("job bad: params.args[0]: template syntax error"),
        "{}",
        text(&out)
    );
    let out = add(&["--name", "a", "--on-success", "nowhere"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("on_success names job \"nowhere\", which does not exist"),
        "{}",
        text(&out)
    );
    let out = add(&["--name", "b", "--params", r#"{"program":"true"}"#]);
    assert!(out.status.success(), "{}", text(&out));
    let out = add(&[
        "--name",
        "a",
        "--on-success",
        "b",
        "--params",
        r#"{"program":"true"}"#,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = takt(&dir, &["job", "update", "b", "--on-failure", "a"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("b → a → b"), "{}", text(&out));
    let out = takt(&dir, &["job", "remove", "b"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("job a continues with it"),
        "{}",
        text(&out)
    );
    let out = takt(&dir, &["job", "show", "a", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["on_success"], serde_json::json!(["b"]));
    let _ = std::fs::remove_dir_all(&dir);
}
