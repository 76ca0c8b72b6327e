//! Shared by the integration tests that need the real plugin cdylibs.
//!
//! `cargo test` does not produce cdylib artifacts, so each test binary builds the plugin
//! packages it needs itself, with the same cargo, target directory and profile as the test run
//! — never from a build script, where the nested cargo would wait forever on the outer one's
//! lock. Callers wrap [`build`] in a `OnceLock` so it runs once per test binary.

#![allow(dead_code)] // each test binary uses its own subset

pub(crate) mod finishes;
pub(crate) mod http;
pub(crate) mod jobs;
pub(crate) mod mssql;
pub(crate) mod pg;
pub(crate) mod process;
pub(crate) mod proxy;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `takt` to run in `dir`, deaf to the developer's own settings: every `TAKT_*` variable
/// (but the `TAKT_TEST_*` ones the tests read themselves) and `RUST_LOG` are removed.
pub(crate) fn takt_command(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_takt"));
    cmd.current_dir(dir);
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if (name.starts_with("TAKT_") && !name.starts_with("TAKT_TEST_")) || name == "RUST_LOG" {
            cmd.env_remove(&var);
        }
    }
    // Tests run many hosts at once: an API asked for by a config (`takt init` writes
    // `[http]`) takes a free port instead of the fixed default.
    cmd.env("TAKT_HTTP_LISTEN", "127.0.0.1:0");
    cmd
}

/// `target/<profile>` of the running test binary (`target/<profile>/deps/<test>`): where
/// `takt` and the plugins land.
pub(crate) fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// Builds `packages` into [`profile_dir`] and returns it.
pub(crate) fn build(packages: &[&str]) -> PathBuf {
    let dir = profile_dir();
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("build")
        .arg("--target-dir")
        .arg(dir.parent().expect("target/"));
    for p in packages {
        cmd.args(["-p", p]);
    }
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let status = cmd.status().expect("cargo runs");
    assert!(status.success(), "building {packages:?} failed: {status}");
    dir
}

/// The cdylib file of `package` in `dir` (`libtakt_plugin_x.so` on Linux).
pub(crate) fn cdylib(dir: &Path, package: &str) -> PathBuf {
    use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
    dir.join(format!(
        "{DLL_PREFIX}{}{DLL_SUFFIX}",
        package.replace('-', "_")
    ))
}

/// The connection string of a test database for `backend` from the environment variable `var`,
/// or `None` (the caller skips, printing so) when it is unset. A backend named in
/// `TAKT_TEST_REQUIRE` (comma-separated, as `.ci/run` sets it) must be configured: its absence
/// fails the test instead of skipping it, so CI can never pass by skipping.
pub(crate) fn backend_url(backend: &str, var: &str) -> Option<String> {
    let required = std::env::var("TAKT_TEST_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .any(|b| b.trim() == backend);
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if required => panic!(
            "{backend} is required (TAKT_TEST_REQUIRE) but {var} is not set; point it at a test \
             database"
        ),
        _ => {
            eprintln!("SKIPPED: {backend} tests ({var} is not set)");
            None
        }
    }
}

/// Whether `what` (a backend or a tool such as `dashboard`) is named in `TAKT_TEST_REQUIRE`
/// (comma-separated, as `.ci/run` sets it): then a test that would skip for want of it fails.
pub(crate) fn required(what: &str) -> bool {
    std::env::var("TAKT_TEST_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .any(|b| b.trim() == what)
}

/// The `testing` plugin (built by [`build`]) loaded into a set of its own, from shadow copies
/// under `shadow` in the temp dir: what the scheduler tests run their jobs on.
pub(crate) fn testing_plugins(shadow: &str) -> std::sync::Arc<takt_host::plugins::PluginSet> {
    use takt_host::plugins::{LoadOptions, PluginSet};
    let dir = build(&["takt-plugin-testing"]);
    let file = cdylib(&dir, "takt-plugin-testing");
    let options = LoadOptions {
        shadow_dir: std::env::temp_dir().join(shadow),
        ..LoadOptions::default()
    };
    let mut set = PluginSet::default();
    set.add_file(&file, &options);
    assert!(set.refusals().is_empty(), "{:?}", set.refusals());
    std::sync::Arc::new(set)
}
