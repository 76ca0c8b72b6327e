//! `takt run` with the built-in `exe::run` executor and `[exe] allowlist` from takt.toml.

#![cfg(unix)]

use std::path::PathBuf;
use std::process::Command;

use takt_core::job::JobName;
use takt_core::run::RunState;
use takt_core::store::conformance::block_on;
use takt_core::store::{RunFilter, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-cli-exe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn takt_run_runs_exe_jobs_within_the_allowlist_of_the_config() {
    let dir = temp_dir("main");
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    let script = dir.join("outside.sh");
    std::fs::write(&script, "#!/bin/sh\necho should not run\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let echo = std::fs::canonicalize("/bin/echo")
        .or_else(|_| std::fs::canonicalize("/usr/bin/echo"))
        .unwrap();
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            r#"
plugin_dir = "plugins"

[exe]
allowlist = ["{}"]

[[jobs]]
name = "greet"
handler = "exe::run"
params = {{ program = "echo", args = ["hello from exe"] }}
every = "1s"

[[jobs]]
name = "outside"
handler = "exe::run"
params = {{ program = "./outside.sh", cwd = "{}" }}
every = "1s"
"#,
            echo.parent().unwrap().display(),
            dir.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["run", "--for", "4s"])
        .current_dir(&dir)
        .env_remove("TAKT_DB")
        .env_remove("TAKT_PLUGIN_DIR")
        .env_remove("TAKT_EXE_ALLOWLIST")
        .output()
        .expect("takt runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("plugin exe"),
        "the built-in plugin is listed: {stdout}"
    );
    assert!(stdout.contains("exe::run may start only:"), "{stdout}");

    let store = SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).unwrap();
    let runs_of = |name: &str, state: RunState| {
        let job = block_on(store.job_get_by_name(&JobName::new(name).unwrap()))
            .unwrap()
            .expect("synced");
        block_on(store.run_list(&RunFilter {
            job: job.id,
            state: Some(state),
            limit: 100,
            ..RunFilter::default()
        }))
        .unwrap()
    };
    let ok = runs_of("greet", RunState::Succeeded);
    assert!(!ok.is_empty(), "{stdout}");
    let result = ok[0].result_json.as_deref().unwrap();
    assert!(result.contains("hello from exe"), "{result}");
    let lines = block_on(store.log_list(ok[0].id.unwrap(), None, 10)).unwrap();
    assert!(
        lines.iter().any(|(_, l)| l.message == "hello from exe"),
        "{lines:?}"
    );

    let refused = runs_of("outside", RunState::Failed);
    assert!(!refused.is_empty(), "{stdout}");
    let error = refused[0].error.as_deref().unwrap();
    assert!(error.contains("refused by the allowlist"), "{error}");
    assert!(error.contains("[exe] allowlist in"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}
