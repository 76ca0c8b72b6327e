//! Hot swaps: a plugin file replaced by new versions while every-second jobs run on it, in
//! process and isolated; refused files; removed files; the directory watch; SIGHUP to
//! `takt run`.
//!
//! The versions are four real builds of one plugin (`plugins/testing-swap`: one source, four
//! packages versioned 1.0.0 … 4.0.0), built once per test binary; each swap puts the next one
//! at the same path in the plugin directory, as an operator deploying a new build does.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use takt_core::job::{JobDef, JobId};
use takt_core::run::{Run, RunState};
use takt_core::schedule::{Interval, Rule, Schedule, Zone};
use takt_core::store::memory::MemoryStore;
use takt_core::store::{RunFilter, Store};
use takt_host::embed::{Host, HostBuilder};
use takt_host::plugins::{LoadOptions, PluginVersion, ReloadReport, VersionState};
use takt_host::scheduler::SchedulerEvent;
use takt_host::worker::WorkerProgram;
use tokio::sync::broadcast::Receiver;

const VERSIONS: [&str; 4] = ["1.0.0", "2.0.0", "3.0.0", "4.0.0"];

/// The four builds: (version, file) in the build directory.
fn builds() -> &'static [(String, PathBuf)] {
    static BUILDS: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let packages: Vec<String> = (1..=4).map(|v| format!("takt-plugin-swap-v{v}")).collect();
        let refs: Vec<&str> = packages.iter().map(String::as_str).collect();
        let dir = common::build(&refs);
        packages
            .iter()
            .zip(VERSIONS)
            .map(|(p, v)| (v.to_string(), common::cdylib(&dir, p)))
            .collect()
    })
}

fn sha256(file: &Path) -> String {
    Sha256::digest(std::fs::read(file).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A plugin directory of its own with version 1 deployed as `libswap.so`.
struct Deploy {
    dir: PathBuf,
    file: PathBuf,
}

impl Deploy {
    fn new(name: &str) -> Deploy {
        let dir = std::env::temp_dir().join(format!("takt-swap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("plugins")).unwrap();
        let file = dir.join("plugins").join(format!(
            "{}swap{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
        let d = Deploy { dir, file };
        d.put(0, true);
        d
    }

    fn plugins(&self) -> PathBuf {
        self.dir.join("plugins")
    }

    fn options(&self) -> LoadOptions {
        LoadOptions {
            shadow_dir: self.dir.join("shadow"),
            ..LoadOptions::default()
        }
    }

    /// Deploys build `i`: written beside and renamed over the old file (what a careful
    /// deployment does), or copied over it in place.
    fn put(&self, i: usize, rename: bool) {
        let src = &builds()[i].1;
        if rename {
            let tmp = self.dir.join("incoming.tmp");
            std::fs::copy(src, &tmp).unwrap();
            std::fs::rename(&tmp, &self.file).unwrap();
        } else {
            std::fs::copy(src, &self.file).unwrap();
        }
    }
}

impl Drop for Deploy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn every_second(name: &str, ms: u64) -> JobDef {
    let mut job = JobDef::new(name, "swap::work").unwrap();
    job.params_json = format!("{{\"ms\":{ms}}}");
    job.schedule = Some(Schedule::new(
        Rule::Interval(Interval::new(1, None).unwrap()),
        Zone::utc(),
    ));
    job
}

async fn start(deploy: &Deploy, isolated: bool) -> (Host<MemoryStore>, MemoryStore) {
    let store = MemoryStore::default();
    let mut b = HostBuilder::new(store.clone())
        .plugin_dir(deploy.plugins())
        .load_options(deploy.options())
        .worker_program(WorkerProgram::Path(env!("CARGO_BIN_EXE_takt").into()))
        .require_all_plugins(true)
        .capacity(8);
    if isolated {
        b = b.isolate(["swap"]);
    }
    (b.start().await.expect("the host starts"), store)
}

/// Waits for a `Started` event (a run is in flight right after it).
async fn a_run_starts(events: &mut Receiver<SchedulerEvent>) {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Ok(SchedulerEvent::Started { .. })) => return,
            Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            other => panic!("no run started: {other:?}"),
        }
    }
}

fn version_of(v: &PluginVersion) -> &str {
    &v.version
}

async fn runs_of(store: &MemoryStore, jobs: &[JobId]) -> Vec<Run> {
    let mut all = Vec::new();
    for j in jobs {
        all.extend(
            store
                .run_list(&RunFilter {
                    job: Some(*j),
                    state: None,
                    limit: 10_000,
                    ..RunFilter::default()
                })
                .await
                .unwrap(),
        );
    }
    all
}

/// Child processes of this test whose command line names `needle` (a shadow copy).
#[cfg(target_os = "linux")]
fn workers_on(needle: &str) -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let p = e.path();
            let status = std::fs::read_to_string(p.join("status")).unwrap_or_default();
            let parent = status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))
                .map(str::trim)
                .unwrap_or_default()
                .to_string();
            let state = status
                .lines()
                .find_map(|l| l.strip_prefix("State:"))
                .map(str::trim)
                .unwrap_or_default()
                .to_string();
            let cmd = std::fs::read(p.join("cmdline")).unwrap_or_default();
            parent == me
                && !state.starts_with('Z')
                && String::from_utf8_lossy(&cmd).contains(needle)
        })
        .count()
}

/// Every-second jobs on `swap`, whose file is replaced by a new version three times within
/// about fifteen seconds (the issue asks for three in a minute): each run records the version
/// that ran it (and its result says the same), no run fails because of a swap, runs in flight
/// at a swap finish on the old version, which is draining, then drained; isolated, the old
/// versions' workers exit.
async fn swap_under_load(isolated: bool) {
    let deploy = Deploy::new(if isolated { "load-isolated" } else { "load" });
    let (host, store) = start(&deploy, isolated).await;
    let mut events = host.subscribe();
    let mut jobs = Vec::new();
    for i in 0..3 {
        let job = host
            .add_job(every_second(&format!("tick-{i}"), 600))
            .await
            .unwrap();
        jobs.push(job.id.unwrap());
    }
    let shas: Vec<String> = builds().iter().map(|(_, f)| sha256(f)).collect();
    let mut reports: Vec<ReloadReport> = Vec::new();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (i, rename) in [(1, true), (2, false), (3, true)] {
        // Right after a fire: runs of the old version are in flight during the swap.
        a_run_starts(&mut events).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        deploy.put(i, rename);
        let report = host.reload_plugins().await.expect("reload");
        assert_eq!(
            report.loaded.iter().map(version_of).collect::<Vec<_>>(),
            [VERSIONS[i]],
            "swap {i}: {report:?}"
        );
        assert_eq!(report.loaded[0].sha256.as_deref(), Some(shas[i].as_str()));
        assert_eq!(report.loaded[0].isolated, isolated);
        assert_eq!(report.retired.len(), 1, "{report:?}");
        let old = &report.retired[0];
        assert_eq!(old.version, VERSIONS[i - 1]);
        assert!(report.refused.is_empty(), "{report:?}");
        reports.push(report);
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    // At least one swap caught runs in flight: that version was draining, not drained.
    assert!(
        reports
            .iter()
            .any(|r| r.retired[0].state == VersionState::Draining && r.retired[0].runs > 0),
        "no swap found a run in flight: {reports:?}"
    );
    // Every old version drains (its last run ends).
    let mut drained: BTreeSet<String> = reports
        .iter()
        .filter(|r| r.retired[0].state == VersionState::Drained)
        .map(|r| r.retired[0].version.clone())
        .collect();
    let until = Instant::now() + Duration::from_secs(10);
    while drained.len() < 3 && Instant::now() < until {
        if let Ok(Ok(SchedulerEvent::PluginDrained { version })) =
            tokio::time::timeout(Duration::from_secs(1), events.recv()).await
        {
            assert_eq!(version.state, VersionState::Drained);
            assert_eq!(version.runs, 0);
            drained.insert(version.version);
        }
    }
    assert_eq!(
        drained,
        VERSIONS[..3].iter().map(|v| v.to_string()).collect(),
        "old versions reach drained"
    );
    let versions = host.plugin_versions();
    assert_eq!(versions.len(), 1, "only the newest serves: {versions:?}");
    assert_eq!(versions[0].version, VERSIONS[3]);
    assert_eq!(versions[0].state, VersionState::Serving);
    #[cfg(target_os = "linux")]
    if isolated {
        for sha in &shas[..3] {
            let mut left = usize::MAX;
            for _ in 0..100 {
                left = workers_on(sha);
                if left == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(left, 0, "the workers of the drained version {sha} exited");
        }
        assert!(
            workers_on(&shas[3]) >= 1,
            "the new version is served by workers"
        );
    }
    host.shutdown(Duration::from_secs(5)).await;

    let runs = runs_of(&store, &jobs).await;
    let by_state: BTreeMap<&str, usize> = runs.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.state.name()).or_default() += 1;
        m
    });
    // A shutdown cancels what runs at that moment; nothing else ends but succeeded.
    assert!(
        runs.iter().all(|r| matches!(
            r.state,
            RunState::Succeeded | RunState::Cancelled | RunState::Skipped
        )),
        "{by_state:?}: {:?}",
        runs.iter()
            .filter(|r| r.state == RunState::Failed)
            .collect::<Vec<_>>()
    );
    let mut served: BTreeMap<String, usize> = BTreeMap::new();
    for job in &jobs {
        let mut mine: Vec<&Run> = runs
            .iter()
            .filter(|r| r.job_id == *job && r.state == RunState::Succeeded)
            .collect();
        mine.sort_by_key(|r| r.fire_time);
        let mut last = 0;
        for r in mine {
            let build = r.plugin.as_ref().expect("a run records its plugin build");
            assert_eq!(build.name, "swap");
            let i = VERSIONS
                .iter()
                .position(|v| *v == build.version)
                .expect("a known version");
            assert_eq!(build.sha256.as_deref(), Some(shas[i].as_str()), "{r:?}");
            let result: Value = serde_json::from_str(r.result_json.as_deref().unwrap()).unwrap();
            assert_eq!(
                result["version"], build.version,
                "the record names the build that ran"
            );
            assert!(i >= last, "versions never go back along fire time: {r:?}");
            last = i;
            *served.entry(build.version.clone()).or_default() += 1;
        }
    }
    assert_eq!(served.len(), 4, "every version served runs: {served:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_under_load_drains_old_versions_in_process() {
    swap_under_load(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_under_load_drains_old_versions_isolated() {
    swap_under_load(true).await;
}

/// A refused file (damaged, or failing its pin) leaves the old version serving, with the
/// refusal and the version kept in the report; the next good file loads. A removed file
/// retires its plugin: its jobs' runs then fail saying no such plugin is loaded. An unchanged
/// directory reloads to nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_removed_files_while_serving() {
    let deploy = Deploy::new("refused");
    let (host, store) = start(&deploy, false).await;
    let report = host.reload_plugins().await.unwrap();
    assert!(!report.changed() && report.refused.is_empty(), "{report:?}");
    assert_eq!(report.unchanged.len(), 1);

    // An interrupted copy: the first 4 KiB of version 2.
    let bytes = std::fs::read(&builds()[1].1).unwrap();
    std::fs::write(&deploy.file, &bytes[..4096]).unwrap();
    let report = host.reload_plugins().await.unwrap();
    assert!(
        report.loaded.is_empty() && report.retired.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.refused.len(), 1);
    let r = &report.refused[0];
    assert_eq!(r.refusal.file, deploy.file);
    assert!(r.refusal.reason.contains("truncated"), "{r:?}");
    assert_eq!(r.kept.as_ref().map(|k| k.version.as_str()), Some("1.0.0"));
    let (run, _) =
        common::jobs::run_once(&host, &store, "swap::work", &serde_json::json!({}), None).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    assert_eq!(
        run.plugin.unwrap().version,
        "1.0.0",
        "the old version keeps serving"
    );

    deploy.put(1, true);
    let report = host.reload_plugins().await.unwrap();
    assert_eq!(report.loaded[0].version, "2.0.0", "{report:?}");
    assert_eq!(
        report.retired[0].state,
        VersionState::Drained,
        "no run was on it"
    );

    std::fs::remove_file(&deploy.file).unwrap();
    let report = host.reload_plugins().await.unwrap();
    assert!(report.loaded.is_empty());
    assert_eq!(report.retired[0].version, "2.0.0");
    let (run, _) =
        common::jobs::run_once(&host, &store, "swap::work", &serde_json::json!({}), None).await;
    assert_eq!(run.state, RunState::Failed);
    assert!(
        run.error
            .as_deref()
            .unwrap_or_default()
            .contains("no plugin named \"swap\""),
        "{run:?}"
    );
    assert_eq!(run.plugin, None, "no plugin ran it");
    host.shutdown(Duration::from_secs(5)).await;
}

/// With the directory watched, a new file is loaded without anyone asking (once it has held
/// still for one poll); the reload is published as an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_loads_a_changed_file_by_itself() {
    let deploy = Deploy::new("watch");
    let store = MemoryStore::default();
    let host = HostBuilder::new(store.clone())
        .plugin_dir(deploy.plugins())
        .load_options(deploy.options())
        .watch_plugins(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let mut events = host.subscribe();
    tokio::time::sleep(Duration::from_millis(500)).await;
    deploy.put(1, true);
    let report = loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Ok(SchedulerEvent::PluginsReloaded { report })) if report.changed() => break report,
            Ok(Ok(_)) => {}
            other => panic!("the watch did not reload: {other:?}"),
        }
    };
    assert_eq!(report.loaded[0].version, "2.0.0", "{report:?}");
    let (run, _) =
        common::jobs::run_once(&host, &store, "swap::work", &serde_json::json!({}), None).await;
    assert_eq!(run.plugin.unwrap().version, "2.0.0");
    host.shutdown(Duration::from_secs(5)).await;
}

/// `takt run` reloads on SIGHUP and says what it did: the new version loaded, the old one
/// draining or drained.
#[cfg(unix)]
#[test]
fn takt_run_reloads_on_sighup() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let deploy = Deploy::new("sighup");
    std::fs::write(
        deploy.dir.join("takt.toml"),
        format!(
            "database = \"{}\"\nplugin_dir = \"{}\"\n\n[[jobs]]\nname = \"tick\"\nhandler = \
             \"swap::work\"\nparams = {{ ms = 300 }}\nevery = \"1s\"\n",
            deploy.dir.join("takt.db").display(),
            deploy.plugins().display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["run", "--for", "20s", "--config"])
        .arg(deploy.dir.join("takt.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut wait_for = |needle: &str, seen: &mut Vec<String>| {
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push(line.clone());
            if line.contains(needle) {
                return;
            }
        }
        panic!("takt run never printed {needle:?}:\n{}", seen.join("\n"));
    };
    wait_for("plugins reload on SIGHUP", &mut seen);
    wait_for("succeeded", &mut seen);
    deploy.put(1, true);
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) };
    wait_for("plugin swap 2.0.0", &mut seen);
    assert!(seen.last().unwrap().ends_with("loaded"), "{seen:?}");
    wait_for("plugin swap 1.0.0", &mut seen);
    let line = seen.last().unwrap();
    assert!(
        line.contains("draining") || line.contains("drained"),
        "{line}"
    );
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    for line in lines {
        seen.push(line.unwrap());
    }
    assert!(child.wait().unwrap().success(), "{}", seen.join("\n"));
}

/// `takt plugin reload` asks a running `takt run` through its HTTP API (found from the
/// config's `[http]`, or `--url`): the new version loaded, the old one retired, a refused file
/// reported with exit 1; tokens made with `takt token create` decide who may (a viewer may
/// not, an operator may), and the reload is recorded with the token's name.
#[cfg(unix)]
#[test]
fn takt_plugin_reload_goes_through_the_api_of_takt_run() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let deploy = Deploy::new("api-reload");
    let db = deploy.dir.join("takt.db");
    std::fs::write(
        deploy.dir.join("takt.toml"),
        format!(
            "database = \"{}\"\nplugin_dir = \"{}\"\n\n[http]\nlisten = \"127.0.0.1:0\"\n",
            db.display(),
            deploy.plugins().display()
        ),
    )
    .unwrap();
    let takt = |args: &[&str]| {
        let out = common::takt_command(&deploy.dir)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["run", "--for", "60s", "--config"])
        .arg(deploy.dir.join("takt.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let url = loop {
        let Some(line) = lines.next() else {
            panic!(
                "takt run ended before serving its api:\n{}",
                seen.join("\n")
            );
        };
        let line = line.unwrap();
        seen.push(line.clone());
        if let Some(rest) = line.strip_prefix("http api on ") {
            assert!(
                rest.contains("no tokens: loopback callers are admin"),
                "{line}"
            );
            break rest.split("/api/v1").next().unwrap().to_string();
        }
    };
    // Nothing changed yet; no tokens: the loopback caller is the local admin.
    let (code, out, err) = takt(&["plugin", "reload", "--url", &url]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("nothing changed"), "{out}");

    // Tokens: a viewer is refused, an operator reloads.
    let (code, out, err) = takt(
        &[
            "token", "create", "--role", "viewer", "--name", "screen", "--json", "--db",
        ]
        .iter()
        .copied()
        .chain([db.to_str().unwrap()])
        .collect::<Vec<_>>(),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let viewer: Value = serde_json::from_str(&out).unwrap();
    let (code, out, _) = takt(&[
        "token",
        "create",
        "--role",
        "operator",
        "--name",
        "ops",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("token ops (operator):") && out.contains("shown once"),
        "{out}"
    );
    let operator = out.lines().nth(1).unwrap().trim().to_string();
    assert!(operator.starts_with("takt_"), "{out}");
    let (code, out, _) = takt(&["token", "list", "--db", db.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("screen") && out.contains("viewer") && !out.contains("takt_"),
        "{out}"
    );
    std::thread::sleep(Duration::from_millis(2100)); // the host's token cache
    let (code, _, err) = takt(&["plugin", "reload", "--url", &url]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("401") && err.contains("no token given"),
        "{err}"
    );
    let (code, _, err) = takt(&[
        "plugin",
        "reload",
        "--url",
        &url,
        "--token",
        viewer["token"].as_str().unwrap(),
    ]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("403") && err.contains("operator role"),
        "{err}"
    );

    deploy.put(1, true);
    let (code, out, err) = common::takt_command(&deploy.dir)
        .args(["plugin", "reload", "--config"])
        .arg(deploy.dir.join("takt.toml"))
        .args(["--url", &url])
        .env("TAKT_TOKEN", &operator)
        .output()
        .map(|o| {
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).to_string(),
                String::from_utf8_lossy(&o.stderr).to_string(),
            )
        })
        .unwrap();
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("loaded swap 2.0.0"), "{out}");
    assert!(out.contains("retired swap 1.0.0"), "{out}");

    // A file that is no plugin is refused; the version before keeps serving; exit 1.
    std::fs::write(
        deploy.plugins().join(format!(
            "{}junk{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        )),
        b"not a library",
    )
    .unwrap();
    let (code, out, err) = takt(&[
        "plugin", "reload", "--url", &url, "--token", &operator, "--json",
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(
        report["refused"][0]["file"]
            .as_str()
            .unwrap()
            .contains("junk"),
        "{report}"
    );
    assert!(err.contains("1 plugin files were refused"), "{err}");

    // Revoked: refused again (within the cache time).
    let (code, _, _) = takt(&["token", "revoke", "ops", "--db", db.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let (code, _, err) = takt(&["token", "revoke", "nobody", "--db", db.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no token named \"nobody\""), "{err}");
    std::thread::sleep(Duration::from_millis(2100));
    let (code, _, err) = takt(&["plugin", "reload", "--url", &url, "--token", &operator]);
    assert_eq!(code, Some(1));
    assert!(err.contains("revoked"), "{err}");
    let (code, _, err) = takt(&[
        "token",
        "create",
        "--role",
        "boss",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--role: unknown role \"boss\""), "{err}");

    // The plugins endpoint shows the old version retired; the reload is on record as ops's.
    let mut options = takt_host::store::SqliteOptions::default();
    options.migrate = false;
    let store = takt_host::store::SqliteStore::open(&db, &options).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let actions = rt.block_on(store.action_list(None, 10)).unwrap();
    assert!(
        actions
            .iter()
            .any(|a| a.action == "plugin-reload" && a.actor == "ops"),
        "{actions:?}"
    );
    assert!(
        actions
            .iter()
            .any(|a| a.action == "plugin-reload" && a.actor == "local"),
        "{actions:?}"
    );
    drop(store);
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    for line in lines {
        seen.push(line.unwrap());
    }
    assert!(child.wait().unwrap().success(), "{}", seen.join("\n"));
}
