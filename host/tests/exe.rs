//! The built-in `exe::run` executor inside a real host (HostBuilder, MemoryStore, the real
//! executor with its timeout and grace): what the run record and the run log end up with.

#![cfg(unix)]

mod common;

use std::time::{Duration, Instant};

use takt_core::job::JobDef;
use takt_core::policy::{Backoff, RetryPolicy};
use takt_core::run::{RunId, RunState};
use takt_core::store::Store;
use takt_core::store::memory::MemoryStore;
use takt_host::embed::{Host, HostBuilder, HostError};
use takt_host::plugins::{LoadOptions, PluginSet, STATIC_ORIGIN};
use takt_host::scheduler::SchedulerEvent;
use takt_plugin_api::abi::PluginRef;
use takt_plugin_api::static_plugin;
use takt_plugin_exe::{Allowlist, ExeOptions};

const WAIT: Duration = Duration::from_secs(60);

async fn start(exe: PluginRef) -> (Host<MemoryStore>, MemoryStore) {
    let store = MemoryStore::default();
    let host = HostBuilder::new(store.clone())
        .static_plugin(exe)
        .node("exe-test")
        .capacity(2)
        .start()
        .await
        .expect("the host starts");
    (host, store)
}

/// Waits for the next run to reach a final state (retries are `Pending` on the way).
async fn final_state(
    events: &mut tokio::sync::broadcast::Receiver<SchedulerEvent>,
) -> (RunState, RunId, u32) {
    loop {
        let e = tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("a run finishes in time")
            .expect("events open");
        if let SchedulerEvent::Finished {
            state,
            run,
            attempt,
            ..
        } = e
            && state != RunState::Pending
        {
            return (state, run, attempt);
        }
    }
}

fn exe_job(name: &str, params: serde_json::Value) -> JobDef {
    let mut job = JobDef::new(name, "exe::run").unwrap();
    job.params_json = params.to_string();
    job
}

/// Live (not zombie) processes whose environment holds `TAKT_EXE_TEST_MARK=marker`.
fn live_with_marker(marker: &str) -> Vec<String> {
    let needle = format!("TAKT_EXE_TEST_MARK={marker}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .chars()
            .next();
        if state.is_some_and(|s| s != 'Z' && s != 'X') {
            out.push(stat.trim().to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_run_leaves_no_process_of_its_tree_behind() {
    let exe = static_plugin!(|| takt_plugin_exe::plugin(ExeOptions::default())).unwrap();
    let (host, store) = start(exe).await;
    let mut events = host.subscribe();
    let mark = format!("timeout-{}", std::process::id());
    let mut job = exe_job(
        "sleepers",
        serde_json::json!({
            "program": "sh",
            "args": ["-c", "echo tree up; sleep 300 & sleep 300; wait"],
            "env": { "TAKT_EXE_TEST_MARK": mark },
        }),
    );
    job.timeout = Some(Duration::from_secs(1));
    let id = host.add_job(job).await.unwrap().id.unwrap();
    let t0 = Instant::now();
    host.trigger(id).await.unwrap();
    let (state, run, _) = final_state(&mut events).await;
    assert_eq!(state, RunState::TimedOut);
    // Checked right after the run is reported: the plugin returns only once the group is
    // empty, and the host waits for it (2 s kill grace < 5 s host grace).
    let left = live_with_marker(&mark);
    assert!(left.is_empty(), "processes of the tree survived: {left:?}");
    assert!(t0.elapsed() < Duration::from_secs(30));
    let record = store.run_get(run).await.unwrap().unwrap();
    let error = record.error.unwrap();
    assert!(error.contains("exe::run timed out after 1s"), "{error}");
    assert!(
        error.contains("the handler returned within the"),
        "the plugin stopped in time: {error}"
    );
    assert!(
        error.contains("SIGTERM sent to its process group"),
        "{error}"
    );
    assert!(error.contains("stdout ends: tree up"), "{error}");
    let log = store.log_list(run, None, 100).await.unwrap();
    assert!(
        log.iter().any(|(_, l)| l.message == "tree up"),
        "what it printed is in the log: {log:?}"
    );
    host.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_program_is_retried_per_policy_and_output_is_logged_in_order() {
    let exe = static_plugin!(|| takt_plugin_exe::plugin(ExeOptions::default())).unwrap();
    let (host, store) = start(exe).await;
    let mut events = host.subscribe();
    let dir = std::env::temp_dir().join(format!("takt-exe-host-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let counter = dir.join("attempts");

    let mut job = exe_job(
        "flaky",
        serde_json::json!({
            "program": "/bin/sh",
            "args": ["-c", "echo attempt >> \"$1\"; echo 'locked' >&2; exit 4", "sh",
                     counter.to_str().unwrap()],
        }),
    );
    job.retry = RetryPolicy::new(2, Backoff::None);
    let id = host.add_job(job).await.unwrap().id.unwrap();
    host.trigger(id).await.unwrap();
    let (state, run, attempt) = final_state(&mut events).await;
    assert_eq!(
        (state, attempt),
        (RunState::Failed, 3),
        "1 attempt + 2 retries"
    );
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap().lines().count(),
        3
    );
    let error = store.run_get(run).await.unwrap().unwrap().error.unwrap();
    assert!(error.contains("exited with code 4"), "{error}");
    assert!(error.contains("stderr ends: locked"), "{error}");

    // Success codes, the result JSON, and interleaved output in the log in order per stream.
    let job = exe_job(
        "counting",
        serde_json::json!({
            "program": "/bin/sh",
            "args": ["-c", "for i in 1 2 3 4 5 6 7 8 9 10; do echo o$i; echo e$i >&2; done; exit 2"],
            "successCodes": [2],
        }),
    );
    let id = host.add_job(job).await.unwrap().id.unwrap();
    host.trigger(id).await.unwrap();
    let (state, run, _) = final_state(&mut events).await;
    assert_eq!(state, RunState::Succeeded);
    let record = store.run_get(run).await.unwrap().unwrap();
    let result: serde_json::Value =
        serde_json::from_str(record.result_json.as_deref().unwrap()).unwrap();
    assert_eq!(result["exitCode"], 2);
    assert_eq!(result["signal"], serde_json::Value::Null);
    assert_eq!(result["stdout"]["lines"], 10);
    assert!(result["elapsedMs"].is_u64());
    let log = store.log_list(run, None, 100).await.unwrap();
    let of = |level: &str| -> Vec<String> {
        log.iter()
            .filter(|(_, l)| l.level.name() == level)
            .map(|(_, l)| l.message.clone())
            .collect()
    };
    let outs: Vec<String> = (1..=10).map(|i| format!("o{i}")).collect();
    let errs: Vec<String> = (1..=10).map(|i| format!("e{i}")).collect();
    assert_eq!(of("info"), outs, "{log:?}");
    assert_eq!(of("warn"), errs, "{log:?}");
    host.shutdown(Duration::from_secs(1)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allowlist_refuses_other_programs_without_retrying() {
    let exe = static_plugin!(|| takt_plugin_exe::plugin(ExeOptions {
        allowlist: Allowlist::only(vec!["/nonexistent/tools".into()], "the test's options"),
        ..ExeOptions::default()
    }))
    .unwrap();
    let (host, store) = start(exe).await;
    let mut events = host.subscribe();
    let mut job = exe_job("refused", serde_json::json!({ "program": "true" }));
    job.retry = RetryPolicy::new(3, Backoff::None);
    let id = host.add_job(job).await.unwrap().id.unwrap();
    host.trigger(id).await.unwrap();
    let (state, run, attempt) = final_state(&mut events).await;
    assert_eq!(
        (state, attempt),
        (RunState::Failed, 1),
        "a refusal is not retried"
    );
    let error = store.run_get(run).await.unwrap().unwrap().error.unwrap();
    assert!(error.contains("refused by the allowlist"), "{error}");
    assert!(error.contains("\"/nonexistent/tools\""), "{error}");
    host.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_file_named_exe_clashes_with_the_built_in_one() {
    let dir = common::build(&["takt-plugin-exe-cdylib"]);
    let plugin_dir = std::env::temp_dir().join(format!("takt-exe-clash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&plugin_dir);
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let file = common::cdylib(&dir, "takt-plugin-exe-cdylib");
    std::fs::copy(&file, plugin_dir.join(file.file_name().unwrap())).unwrap();

    let exe = static_plugin!(|| takt_plugin_exe::plugin(ExeOptions::default())).unwrap();
    let result = HostBuilder::new(MemoryStore::default())
        .plugin_dir(&plugin_dir)
        .load_options(LoadOptions {
            shadow_dir: plugin_dir.join(".shadow"),
            ..LoadOptions::default()
        })
        .static_plugin(exe)
        .start()
        .await;
    let err = match result {
        Err(e) => e,
        Ok(_) => panic!("two plugins named exe must not start"),
    };
    assert!(matches!(err, HostError::Plugin(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("static plugin \"exe\" has the name of the plugin loaded from")
            && text.contains("libtakt_plugin_exe_cdylib"),
        "{text}"
    );

    // `takt run`'s way: the built-in one wins, the file is refused with the fix, the start
    // goes on.
    let mut set = PluginSet::load_dir(
        &plugin_dir,
        &LoadOptions {
            shadow_dir: plugin_dir.join(".shadow"),
            ..LoadOptions::default()
        },
    );
    let exe = static_plugin!(|| takt_plugin_exe::plugin(ExeOptions::default())).unwrap();
    let refusal = set
        .add_builtin(exe, "remove the file")
        .expect("the built-in plugin is added")
        .expect("the file is refused");
    assert!(
        refusal
            .file
            .to_string_lossy()
            .contains("libtakt_plugin_exe_cdylib"),
        "{refusal}"
    );
    assert!(refusal.reason.contains("built into this host"), "{refusal}");
    assert_eq!(refusal.fix, "remove the file");
    assert_eq!(set.refusals().len(), 1);
    let names: Vec<String> = set
        .plugins()
        .iter()
        .map(|p| p.file.display().to_string())
        .collect();
    assert_eq!(names, [STATIC_ORIGIN], "only the built-in exe remains");
    assert!(set.resolve("exe::run").is_ok());

    // The file alone loads and runs like the built-in one.
    let store = MemoryStore::default();
    let host = HostBuilder::new(store.clone())
        .plugin_dir(&plugin_dir)
        .load_options(LoadOptions {
            shadow_dir: plugin_dir.join(".shadow"),
            ..LoadOptions::default()
        })
        .require_all_plugins(true)
        .start()
        .await
        .expect("the exe plugin file loads");
    let mut events = host.subscribe();
    let id = host
        .add_job(exe_job(
            "from-file",
            serde_json::json!({ "program": "echo", "args": ["from the file"] }),
        ))
        .await
        .unwrap()
        .id
        .unwrap();
    host.trigger(id).await.unwrap();
    let (state, run, _) = final_state(&mut events).await;
    assert_eq!(state, RunState::Succeeded);
    let result = store
        .run_get(run)
        .await
        .unwrap()
        .unwrap()
        .result_json
        .unwrap();
    assert!(result.contains("from the file"), "{result}");
    host.shutdown(Duration::from_secs(1)).await;
    let _ = std::fs::remove_dir_all(&plugin_dir);
}
