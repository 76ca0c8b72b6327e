//! Loading real plugin cdylibs: every check of the loader, the shadow copy, HandlerType
//! resolution, and `takt plugin list|verify`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use takt_host::plugins::{LoadOptions, PluginSet, ResolveError, load_file};
use takt_plugin_api::abi::LogLevel;
use takt_plugin_api::host::{CallInfo, HostServices, call};

const PACKAGES: [&str; 5] = [
    "takt-plugin-examples",
    "takt-plugin-testing",
    "takt-plugin-old-api",
    "takt-plugin-abort",
    "takt-plugin-bad-layout",
];

/// Builds the plugin cdylibs once per test binary (see `common`).
fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| common::build(&PACKAGES))
}

fn lib(package: &str) -> PathBuf {
    common::cdylib(built(), package)
}

/// A shared library that is certainly not a takt plugin: the toolchain's `libstd-*.so`.
fn rust_std_dylib() -> PathBuf {
    let out = Command::new("rustc")
        .args(["--print", "target-libdir"])
        .output()
        .unwrap();
    let lib_dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    std::fs::read_dir(&lib_dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(&format!("{}std-", std::env::consts::DLL_PREFIX))
                && n.ends_with(std::env::consts::DLL_SUFFIX)
        })
        .unwrap_or_else(|| panic!("no std dylib in {}", lib_dir.display()))
}

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("takt-plugins-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn options(dir: &Path) -> LoadOptions {
    LoadOptions {
        shadow_dir: dir.join(".shadow"),
        ..LoadOptions::default()
    }
}

fn copy_in(dir: &Path, package: &str, as_name: &str) -> PathBuf {
    let dest = dir.join(format!("{as_name}{}", std::env::consts::DLL_SUFFIX));
    std::fs::copy(lib(package), &dest).unwrap();
    dest
}

#[derive(Default)]
struct Recorder {
    lines: std::sync::Mutex<Vec<String>>,
}

impl HostServices for Recorder {
    fn is_cancelled(&self) -> bool {
        false
    }
    fn sleep(&self, duration: Duration) -> bool {
        std::thread::sleep(duration);
        false
    }
    fn log(&self, level: LogLevel, message: &str) {
        self.lines
            .lock()
            .unwrap()
            .push(format!("{level} {message}"));
    }
    fn progress(&self, done: u64, total: u64, note: &str) {
        self.lines
            .lock()
            .unwrap()
            .push(format!("progress {done}/{total} {note}"));
    }
}

fn info() -> CallInfo<'static> {
    CallInfo {
        job_id: "7",
        job_name: "greet",
        run_id: "42",
        attempt: 1,
        fire_time_unix_ms: 1_700_000_000_000,
        deadline_unix_ms: 0,
    }
}

#[test]
fn a_directory_loads_good_plugins_and_refuses_bad_ones_with_reasons() {
    let dir = scratch("mixed");
    copy_in(&dir, "takt-plugin-examples", "a-examples");
    copy_in(&dir, "takt-plugin-testing", "b-testing");
    copy_in(&dir, "takt-plugin-old-api", "c-old-api");
    copy_in(&dir, "takt-plugin-abort", "d-abort");
    copy_in(&dir, "takt-plugin-bad-layout", "e-bad-layout");
    // Same plugin twice under another name: its handler types would be ambiguous.
    copy_in(&dir, "takt-plugin-testing", "f-testing-again");
    std::fs::write(
        dir.join(format!("g-garbage{}", std::env::consts::DLL_SUFFIX)),
        b"garbage",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), b"ignored: not a library").unwrap();
    // A real plugin cut short (an interrupted copy). Cutting off only debug info would still
    // load, so keep just the first page: the ELF headers point past the end of the file.
    let bytes = std::fs::read(lib("takt-plugin-examples")).unwrap();
    std::fs::write(
        dir.join(format!("h-truncated{}", std::env::consts::DLL_SUFFIX)),
        &bytes[..4096],
    )
    .unwrap();
    // A valid shared library that is not a plugin: Rust's own std from the toolchain.
    let non_plugin = rust_std_dylib();
    std::fs::copy(
        &non_plugin,
        dir.join(format!("i-libstd{}", std::env::consts::DLL_SUFFIX)),
    )
    .unwrap();
    // A good plugin whose pin does not match: refused before it is loaded.
    let pinned = copy_in(&dir, "takt-plugin-examples", "j-pinned");

    let mut o = options(&dir);
    o.pins.insert(
        pinned.file_name().unwrap().to_string_lossy().into_owned(),
        "0".repeat(64),
    );
    let set = PluginSet::load_dir(&dir, &o);
    let names: Vec<&str> = set.plugins().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["examples", "testing"]);
    let refused: Vec<(String, String)> = set
        .refusals()
        .iter()
        .map(|r| {
            (
                r.file.file_name().unwrap().to_string_lossy().into_owned(),
                r.to_string(),
            )
        })
        .collect();
    assert_eq!(refused.len(), 8, "{refused:#?}");
    let find = |prefix: &str| {
        refused
            .iter()
            .find(|(f, _)| f.starts_with(prefix))
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("no refusal for {prefix}: {refused:#?}"))
    };
    let old = find("c-old-api");
    assert!(old.contains("built against takt-plugin-api 0.9.0"), "{old}");
    assert!(
        old.contains("fix: rebuild the plugin against takt-plugin-api 1.x"),
        "{old}"
    );
    let abort = find("d-abort");
    assert!(abort.contains("panic = \"abort\""), "{abort}");
    let layout = find("e-bad-layout");
    assert!(
        layout.contains("its plugin ABI does not match this host's"),
        "{layout}"
    );
    assert!(
        layout.contains("fix: rebuild the plugin against takt-plugin-api"),
        "{layout}"
    );
    let dup = find("f-testing-again");
    assert!(
        dup.contains("plugin \"testing\" is already loaded from"),
        "{dup}"
    );
    assert!(dup.contains("(an identical file)"), "{dup}");
    let garbage = find("g-garbage");
    assert!(
        garbage.contains("it is not a loadable shared library"),
        "{garbage}"
    );
    let truncated = find("h-truncated");
    assert!(
        truncated.contains("it is not a loadable shared library"),
        "{truncated}"
    );
    let not_plugin = find("i-libstd");
    assert!(
        not_plugin.contains("it is not a takt plugin: it exports no takt root module"),
        "{not_plugin}"
    );
    let pin = find("j-pinned");
    assert!(pin.contains("but the configuration pins 0000"), "{pin}");
    // Every message is one line: abi_stable's multi-hundred-line dumps are summarised.
    for (_, m) in &refused {
        assert!(!m.contains('\n'), "{m}");
    }

    // The good ones work.
    let hello = set.resolve("examples::hello").unwrap();
    assert_eq!(hello.handler.handler_type, "examples::hello");
    let rec = Recorder::default();
    let out = call(
        hello.plugin.module().expect("mapped in process"),
        &hello.handler.name,
        r#"{"name": "takt"}"#,
        &info(),
        &rec,
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["greeting"], "hello, takt");
    assert!(!rec.lines.lock().unwrap().is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn handler_types_resolve_in_both_forms_with_precise_errors() {
    let dir = scratch("resolve");
    copy_in(&dir, "takt-plugin-examples", "examples");
    copy_in(&dir, "takt-plugin-testing", "testing");
    let mut o = options(&dir);
    o.aliases.insert(
        "JobCenter.Jobs.CleanExpiredTokenJob, JobCenter.Jobs".to_string(),
        "examples::clean_expired_tokens".to_string(),
    );
    let set = PluginSet::load_dir(&dir, &o);
    assert_eq!(set.refusals(), []);
    // The seed's .NET form through the documented mapping: assembly "Takt.Testing" ->
    // plugin "testing", class "EchoJob" -> handler "echo".
    assert_eq!(
        set.resolve("Takt.Testing.EchoJob, Takt.Testing")
            .unwrap()
            .handler
            .handler_type,
        "testing::echo"
    );
    assert_eq!(
        set.resolve("Acme.PanicJob, testing")
            .unwrap()
            .handler
            .handler_type,
        "testing::panic"
    );
    // An alias from the config wins.
    assert_eq!(
        set.resolve("JobCenter.Jobs.CleanExpiredTokenJob, JobCenter.Jobs")
            .unwrap()
            .handler
            .handler_type,
        "examples::clean_expired_tokens"
    );
    let e = set.resolve("nope::hello").unwrap_err();
    assert_eq!(
        e.to_string(),
        "no plugin named \"nope\" is loaded (handler type \"nope::hello\"); loaded plugins: examples, testing"
    );
    let e = set.resolve("examples::nope").unwrap_err();
    assert!(matches!(e, ResolveError::UnknownHandler { .. }), "{e}");
    assert!(e.to_string().contains("it has: "), "{e}");
    assert!(e.to_string().contains("hello"), "{e}");
    let e = set.resolve("Acme.MissingJob, Testing").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("plugin \"testing\" has no handler \"MissingJob\""),
        "{e}"
    );
    let e = set.resolve("hello").unwrap_err();
    assert!(e.to_string().contains("write plugin::handler"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_original_file_can_be_replaced_while_the_plugin_runs() {
    let dir = scratch("replace");
    let file = copy_in(&dir, "takt-plugin-examples", "examples");
    let o = options(&dir);
    let first = load_file(&file, &o).unwrap();
    assert_ne!(first.shadow, file, "loaded from a shadow copy");
    assert!(
        first
            .shadow
            .starts_with(std::fs::canonicalize(dir.join(".shadow")).unwrap())
    );
    assert!(
        first
            .shadow
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&first.sha256)
    );
    // Overwrite the original in place (what an operator's `cp` does) with another plugin.
    std::fs::copy(lib("takt-plugin-testing"), &file).unwrap();
    let rec = Recorder::default();
    let out = call(
        first.module().expect("mapped"),
        "hello",
        "{}",
        &info(),
        &rec,
    )
    .unwrap();
    assert!(out.contains("hello, world"), "{out}");
    // Loading the file again now yields the new content, side by side with the old one.
    let second = load_file(&file, &o).unwrap();
    assert_eq!(second.name, "testing");
    assert_ne!(second.sha256, first.sha256);
    let out = call(
        first.module().expect("mapped"),
        "hello",
        "{}",
        &info(),
        &rec,
    )
    .unwrap();
    assert!(out.contains("hello, world"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sha256_pins_are_enforced() {
    let dir = scratch("pins");
    let file = copy_in(&dir, "takt-plugin-examples", "examples");
    let good = load_file(&file, &options(&dir)).unwrap().sha256;
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let mut o = options(&dir);
    o.pins.insert(name.clone(), good.clone());
    assert!(load_file(&file, &o).is_ok());
    o.pins.insert(name, "ab".repeat(32));
    let r = load_file(&file, &o).unwrap_err();
    assert_eq!(
        r.reason,
        format!(
            "its SHA-256 is {good} but the configuration pins {}",
            "ab".repeat(32)
        )
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn takt(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plugin_list_and_verify_commands() {
    let dir = scratch("cli");
    copy_in(&dir, "takt-plugin-examples", "examples");
    copy_in(&dir, "takt-plugin-old-api", "old");
    let shadow = dir.join(".shadow");
    let d = dir.to_str().unwrap();
    let s = shadow.to_str().unwrap();
    let out = takt(&["plugin", "list", "--dir", d, "--shadow-dir", s]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("examples 0.1.0  (takt-plugin-api 1.0.0"),
        "{text}"
    );
    assert!(
        text.contains("examples::clean_expired_tokens  10m"),
        "{text}"
    );
    assert!(text.contains("refused 1 file(s):"), "{text}");
    assert!(
        text.contains("reason: it was built against takt-plugin-api 0.9.0"),
        "{text}"
    );

    let out = takt(&["plugin", "list", "--dir", d, "--shadow-dir", s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["plugins"][0]["name"], "examples");
    assert_eq!(v["refused"].as_array().unwrap().len(), 1);

    let good = dir.join(format!("examples{}", std::env::consts::DLL_SUFFIX));
    let out = takt(&[
        "plugin",
        "verify",
        good.to_str().unwrap(),
        "--shadow-dir",
        s,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8(out.stdout).unwrap().starts_with("ok: "));

    let bad = dir.join(format!("old{}", std::env::consts::DLL_SUFFIX));
    let out = takt(&["plugin", "verify", bad.to_str().unwrap(), "--shadow-dir", s]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: refused plugin "), "{err}");
    assert!(
        err.contains("fix: rebuild the plugin against takt-plugin-api 1.x"),
        "{err}"
    );

    let out = takt(&[
        "plugin",
        "verify",
        good.to_str().unwrap(),
        "--shadow-dir",
        s,
        "--pin",
        "x=12",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("must be 64 hexadecimal digits")
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A plugin file or directory that users other than the host's own may write is refused with
/// the file, its mode and the fix (like ssh with a key file); the operator can opt out.
#[cfg(unix)]
#[test]
fn files_and_directories_others_may_write_are_refused_unless_opted_out() {
    use std::os::unix::fs::PermissionsExt;
    let chmod = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let dir = scratch("perms");
    chmod(&dir, 0o755);
    let file = copy_in(&dir, "takt-plugin-examples", "a-examples");
    chmod(&file, 0o644);
    let o = options(&dir);
    assert!(o.check_permissions, "on by default");
    let set = PluginSet::load_dir(&dir, &o);
    assert_eq!(
        set.plugins().len(),
        1,
        "umask 022 files load: {:?}",
        set.refusals()
    );

    for (mode, who) in [(0o664, "its group"), (0o646, "every user")] {
        chmod(&file, mode);
        let set = PluginSet::load_dir(&dir, &o);
        assert!(set.plugins().is_empty());
        let r = &set.refusals()[0];
        assert_eq!(r.file, file);
        assert!(
            r.reason.contains(&format!(
                "the plugin file is writable by {who} (mode 0{mode:o})"
            )),
            "{r}"
        );
        assert!(
            r.fix.contains(&format!("chmod go-w {}", file.display())),
            "{r}"
        );
        let r = load_file(&file, &o).unwrap_err();
        assert!(
            r.reason.contains("writable by"),
            "verify says the same: {r}"
        );
    }
    chmod(&file, 0o644);
    for mode in [0o775, 0o777] {
        chmod(&dir, mode);
        let set = PluginSet::load_dir(&dir, &o);
        assert!(
            set.plugins().is_empty(),
            "nothing loads from a writable directory"
        );
        assert_eq!(set.refusals().len(), 1);
        let r = &set.refusals()[0];
        assert_eq!(r.file, dir);
        assert!(
            r.reason.starts_with("the plugin directory is writable by")
                && r.reason.contains(&format!("(mode 0{mode:o})")),
            "{r}"
        );
        assert!(r.fix.contains("check_permissions = false"), "{r}");
    }
    // The opt-out: the operator accepts the writable directory and file.
    chmod(&file, 0o666);
    let opted = LoadOptions {
        check_permissions: false,
        ..options(&dir)
    };
    let set = PluginSet::load_dir(&dir, &opted);
    assert_eq!(set.plugins().len(), 1, "{:?}", set.refusals());
    chmod(&dir, 0o755);
    std::fs::remove_dir_all(&dir).ok();
}
