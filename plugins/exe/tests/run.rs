//! `exe::run` through the SDK's `TestHost`: the same context (logs, cancel flag) the host
//! gives a plugin, with real programs.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use takt_plugin_api::abi::LogLevel;
use takt_plugin_api::sdk::{JobError, TestHost};
use takt_plugin_exe::{Allowlist, ExeOptions, ExeParams, ExeResult};

fn run(host: &TestHost, p: ExeParams) -> Result<ExeResult, JobError> {
    host.run(|ctx| takt_plugin_exe::run(ctx, p, &ExeOptions::default()))
}

fn sh(script: &str) -> ExeParams {
    let mut p = ExeParams::new("/bin/sh");
    p.args = vec!["-c".into(), script.into()];
    p
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("takt-exe-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Live (not zombie) processes whose environment holds `marker`.
fn live_with_marker(marker: &str) -> Vec<String> {
    let needle = format!("TAKT_EXE_TEST_MARK={marker}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The state is the field after the parenthesised command name.
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .chars()
            .next();
        if state.is_some_and(|s| s != 'Z' && s != 'X') {
            out.push(format!("{pid}: {}", stat.trim()));
        }
    }
    out
}

fn marker(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), line_nanos())
}

fn line_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn success_records_exit_code_output_and_elapsed_time() {
    let host = TestHost::new();
    let r = run(&host, sh("echo out; echo err >&2")).unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.signal, None);
    assert!(r.success);
    assert_eq!(r.stdout.tail, "out\n");
    assert_eq!(r.stderr.tail, "err\n");
    assert_eq!((r.stdout.bytes, r.stdout.lines), (4, 1));
    assert!(r.elapsed_ms < 30_000);
    assert!(r.program.ends_with("sh"), "{}", r.program);
    let json = serde_json::to_value(&r).unwrap();
    for key in ["exitCode", "signal", "elapsedMs", "stdout", "stderr", "pid"] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    assert_eq!(json["stdout"]["tail"], "out\n");
}

#[test]
fn a_non_zero_exit_fails_retryably_unless_it_is_a_success_code() {
    let host = TestHost::new();
    let e = run(&host, sh("echo 'disk full' >&2; exit 3")).unwrap_err();
    assert!(e.is_retryable(), "the retry policy decides: {e}");
    assert!(e.message().contains("exited with code 3"), "{e}");
    assert!(e.message().contains("stderr ends: disk full"), "{e}");
    let mut p = sh("exit 3");
    p.success_codes = vec![0, 3];
    let r = run(&host, p).unwrap();
    assert_eq!(r.exit_code, Some(3));
    let mut p = sh("exit 0");
    p.success_codes = vec![1];
    let e = run(&host, p).unwrap_err();
    assert!(e.message().contains("not a success code ([1])"), "{e}");
    // Killed by a signal it was not sent by us.
    let e = run(&host, sh("kill -9 $$")).unwrap_err();
    assert!(e.message().contains("killed by SIGKILL (9)"), "{e}");
    assert!(e.is_retryable());
}

#[test]
fn interleaved_stdout_and_stderr_reach_the_log_in_order_per_stream() {
    let host = TestHost::new();
    let r = run(
        &host,
        sh("i=1; while [ $i -le 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done"),
    )
    .unwrap();
    assert_eq!((r.stdout.lines, r.stderr.lines), (300, 300));
    let logs = host.logs();
    let of = |level: LogLevel| -> Vec<String> {
        logs.iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, m)| m.clone())
            .collect()
    };
    let want_out: Vec<String> = (1..=300).map(|i| format!("out{i}")).collect();
    let want_err: Vec<String> = (1..=300).map(|i| format!("err{i}")).collect();
    assert_eq!(
        of(LogLevel::INFO),
        want_out,
        "stdout lines are info, in order"
    );
    assert_eq!(
        of(LogLevel::WARN),
        want_err,
        "stderr lines are warnings, in order"
    );
}

#[test]
fn stdin_reaches_the_program_and_a_large_input_does_not_deadlock() {
    let host = TestHost::new();
    let mut p = ExeParams::new("cat");
    p.stdin = Some("hello\nworld\n".into());
    let r = run(&host, p).unwrap();
    assert_eq!(r.stdout.tail, "hello\nworld\n");
    // 4 MiB in, 4 MiB out: both pipes fill up unless they are written and read concurrently.
    let big = "z".repeat(1023) + "\n";
    let mut p = ExeParams::new("cat");
    p.stdin = Some(big.repeat(4096));
    let r = run(&host, p).unwrap();
    assert_eq!(r.stdout.bytes, 4 << 20);
    // A program that never reads its input still ends.
    let mut p = sh("exit 0");
    p.stdin = Some(big.repeat(1024));
    run(&host, p).unwrap();
    // No stdin: end-of-file at once, never the host's terminal.
    let r = run(&host, ExeParams::new("cat")).unwrap();
    assert_eq!(r.stdout.bytes, 0);
}

#[test]
fn env_is_added_removed_and_cleared_and_cwd_is_applied() {
    let host = TestHost::new();
    let dir = temp_dir("cwd");
    // cargo sets CARGO_MANIFEST_DIR for the test process; removing it must show.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let mut p = sh("echo \"$TAKT_A|${CARGO_MANIFEST_DIR-unset}|$(pwd)\"");
    p.env.insert("TAKT_A".into(), "added".into());
    p.env_remove = vec!["CARGO_MANIFEST_DIR".into()];
    p.cwd = Some(dir.clone());
    let r = run(&host, p).unwrap();
    let canonical = std::fs::canonicalize(&dir).unwrap();
    assert_eq!(
        r.stdout.tail.trim_end(),
        format!("added|unset|{}", canonical.display())
    );
    let mut p = ExeParams::new("env");
    p.env_clear = true;
    p.env.insert("ONLY".into(), "this".into());
    let r = run(&host, p).unwrap();
    assert_eq!(r.stdout.tail, "ONLY=this\n");
    // A relative program path is read from cwd.
    std::fs::write(dir.join("hello.sh"), "#!/bin/sh\necho hi from $0\n").unwrap();
    set_mode(&dir.join("hello.sh"), 0o755);
    let mut p = ExeParams::new("./hello.sh");
    p.cwd = Some(dir.clone());
    assert!(run(&host, p).unwrap().stdout.tail.starts_with("hi from"));
    // Also when cwd itself is relative (to the host's working directory).
    let here = std::env::current_dir().unwrap();
    let ups = "../".repeat(here.components().count() - 1);
    let relative = PathBuf::from(format!("{ups}{}", dir.strip_prefix("/").unwrap().display()));
    let mut p = ExeParams::new("./hello.sh");
    p.cwd = Some(relative);
    let r = run(&host, p);
    assert!(
        r.as_ref()
            .is_ok_and(|r| r.stdout.tail.starts_with("hi from")),
        "{r:?}"
    );
    let mut p = ExeParams::new("true");
    p.cwd = Some(dir.join("missing"));
    let e = run(&host, p).unwrap_err();
    assert!(e.message().contains("working directory"), "{e}");
}

#[test]
fn a_command_line_runs_through_the_shell_only_when_asked() {
    let host = TestHost::new();
    let mut p = ExeParams::new("echo \"$1-$2\" | tr a-z A-Z");
    p.shell = true;
    p.args = vec!["ab".into(), "cd".into()];
    assert_eq!(run(&host, p).unwrap().stdout.tail, "AB-CD\n");
    // Without shell the same text is a program name, and there is no such program.
    let e = run(&host, ExeParams::new("echo hi | cat")).unwrap_err();
    assert!(e.message().contains("not found on PATH"), "{e}");
    // Arguments are passed as they are: no globbing, no word splitting.
    let mut p = ExeParams::new("printf");
    p.args = vec!["[%s]".into(), "* $HOME 'a b'".into()];
    assert_eq!(run(&host, p).unwrap().stdout.tail, "[* $HOME 'a b']");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn programs_that_cannot_start_fail_with_which_and_why() {
    let host = TestHost::new();
    let dir = temp_dir("nostart");
    let e = run(&host, ExeParams::new("takt-no-such-program")).unwrap_err();
    assert!(!e.is_retryable());
    assert!(
        e.message()
            .contains("\"takt-no-such-program\": not found on PATH (searched: "),
        "{e}"
    );
    let missing = dir.join("missing");
    let e = run(&host, ExeParams::new(missing.to_str().unwrap())).unwrap_err();
    assert!(e.message().contains("does not exist"), "{e}");
    let script = dir.join("report.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    set_mode(&script, 0o644);
    let e = run(&host, ExeParams::new(script.to_str().unwrap())).unwrap_err();
    assert!(!e.is_retryable());
    assert!(
        e.message().contains("not executable") && e.message().contains("mode 0644"),
        "{e}"
    );
    assert!(e.message().contains("chmod +x"), "{e}");
    let e = run(&host, ExeParams::new(dir.to_str().unwrap())).unwrap_err();
    assert!(e.message().contains("is a directory"), "{e}");
    // Executable but not a program: no #! line and not a binary.
    let junk = dir.join("junk");
    std::fs::write(&junk, [0x7f, 0x00, 0x01, 0x02, 0x03]).unwrap();
    set_mode(&junk, 0o755);
    let e = run(&host, ExeParams::new(junk.to_str().unwrap())).unwrap_err();
    assert!(e.message().contains("not an executable format"), "{e}");
    // A #! line naming an interpreter that does not exist.
    let bad = dir.join("bad-interp.sh");
    std::fs::write(&bad, "#!/nonexistent/interp\n").unwrap();
    set_mode(&bad, 0o755);
    let e = run(&host, ExeParams::new(bad.to_str().unwrap())).unwrap_err();
    assert!(e.message().contains("#! interpreter"), "{e}");
}

#[test]
fn the_allowlist_refuses_everything_else() {
    let host = TestHost::new();
    let dir = temp_dir("allow");
    let tool = dir.join("tool.sh");
    std::fs::write(&tool, "#!/bin/sh\necho tool\n").unwrap();
    set_mode(&tool, 0o755);
    let options = ExeOptions {
        allowlist: Allowlist::only(vec![tool.clone()], "[exe] allowlist in test.toml"),
        ..ExeOptions::default()
    };
    let call = |p: ExeParams| host.run(|ctx| takt_plugin_exe::run(ctx, p, &options));
    assert_eq!(
        call(ExeParams::new(tool.to_str().unwrap()))
            .unwrap()
            .stdout
            .tail,
        "tool\n"
    );
    let e = call(ExeParams::new("/bin/sh")).unwrap_err();
    assert!(!e.is_retryable());
    assert!(e.message().contains("refused by the allowlist"), "{e}");
    assert!(e.message().contains("[exe] allowlist in test.toml"), "{e}");
    assert!(e.message().contains(tool.to_str().unwrap()), "{e}");
    // The shell is what a command line runs, so the shell is what is checked.
    let mut p = ExeParams::new(tool.to_str().unwrap());
    p.shell = true;
    assert!(
        call(p)
            .unwrap_err()
            .message()
            .contains("refused by the allowlist")
    );
    // A directory entry allows what is inside it.
    let options = ExeOptions {
        allowlist: Allowlist::only(vec![dir.clone()], "test"),
        ..ExeOptions::default()
    };
    let r =
        host.run(|ctx| takt_plugin_exe::run(ctx, ExeParams::new(tool.to_str().unwrap()), &options));
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn cancel_stops_the_whole_tree_and_reports_the_output_so_far() {
    let host = TestHost::new();
    let mark = marker("cancel");
    let mut p = sh("echo started; sleep 300 & sleep 300; wait");
    p.env.insert("TAKT_EXE_TEST_MARK".into(), mark.clone());
    let started = Instant::now();
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            // Cancel once the tree is up (both sleeps running), however slow the machine.
            let until = Instant::now() + Duration::from_secs(30);
            while live_with_marker(&mark).len() < 3 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            host.cancel();
        });
        run(&host, p)
    });
    let e = result.unwrap_err();
    assert!(e.message().contains("was cancelled"), "{e}");
    assert!(e.message().contains("SIGTERM"), "{e}");
    assert!(e.message().contains("stdout ends: started"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let left = live_with_marker(&mark);
    assert!(left.is_empty(), "processes of the tree survived: {left:?}");
}

#[test]
fn a_tree_that_ignores_sigterm_is_killed_after_the_grace() {
    let host = TestHost::new();
    let mark = marker("stubborn");
    // `trap '' TERM` is inherited by the sleeps: nothing in this tree dies of SIGTERM.
    let mut p = sh("trap '' TERM; sleep 300 & sleep 300; wait");
    p.env.insert("TAKT_EXE_TEST_MARK".into(), mark.clone());
    p.kill_grace_ms = Some(300);
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            let until = Instant::now() + Duration::from_secs(30);
            while live_with_marker(&mark).len() < 3 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            host.cancel();
        });
        run(&host, p)
    })
    .unwrap_err();
    assert!(e.message().contains("then SIGKILL"), "{e}");
    assert!(e.message().contains("SIGKILL (9)"), "{e}");
    let left = live_with_marker(&mark);
    assert!(left.is_empty(), "processes of the tree survived: {left:?}");
}

#[test]
fn background_processes_left_by_a_program_that_exited_are_stopped() {
    let host = TestHost::new();
    let mark = marker("leftover");
    // The background sleep keeps stdout open: without the sweep the run would never end.
    let mut p = sh("sleep 300 & echo done");
    p.env.insert("TAKT_EXE_TEST_MARK".into(), mark.clone());
    let started = Instant::now();
    let r = run(&host, p).unwrap();
    assert!(r.leftover_processes);
    assert!(!r.output_pipe_left_open);
    assert_eq!(r.stdout.tail, "done\n");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(live_with_marker(&mark).is_empty());
    assert!(
        host.logs()
            .iter()
            .any(|(l, m)| *l == LogLevel::WARN && m.contains("left processes")),
        "{:?}",
        host.logs()
    );
}
