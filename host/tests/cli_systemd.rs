//! `takt run` under systemd (`Type=notify`): the sd_notify datagrams it sends to
//! `NOTIFY_SOCKET` — READY=1 once it schedules, STATUS with a live summary, WATCHDOG=1 at half
//! of `WATCHDOG_USEC` while the loop turns, STOPPING=1 when SIGTERM starts the drain — and
//! the unit file `packaging/systemd/takt.service`, checked by `systemd-analyze verify`.

#![cfg(target_os = "linux")]

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::process::Host;
use common::takt_command;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-systemd-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the temp dir can be created");
    dir
}

/// The datagrams received so far, in order, with when each arrived.
type Received = Arc<Mutex<Vec<(Instant, String)>>>;

/// Binds a datagram socket at `path`, as systemd's notify socket, and collects what arrives.
fn listen(path: &Path) -> Received {
    let socket = UnixDatagram::bind(path).expect("the notify socket binds");
    let received: Received = Arc::default();
    let sink = received.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            sink.lock().unwrap().push((Instant::now(), text));
        }
    });
    received
}

fn messages(received: &Received) -> Vec<String> {
    received
        .lock()
        .unwrap()
        .iter()
        .map(|(_, m)| m.clone())
        .collect()
}

/// The index of the first datagram with the line `line` (exactly, as sd_notify fields are).
fn position(all: &[String], line: &str) -> Option<usize> {
    all.iter().position(|m| m.lines().any(|l| l == line))
}

#[test]
fn takt_run_notifies_ready_status_watchdog_and_stopping() {
    common::build(&["takt-plugin-examples"]);
    let dir = temp_dir("notify");
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            "plugin_dir = {:?}\nnode_id = \"n1\"\ngrace = \"30s\"\n\n[[jobs]]\nname = \"wait\"\n\
             handler = \"examples::wait\"\nparams = {{ seconds = 0.2 }}\n",
            common::profile_dir().display().to_string()
        ),
    )
    .unwrap();
    let socket = dir.join("notify.sock");
    let received = listen(&socket);
    let mut host = Host::spawn(
        takt_command(&dir)
            .args(["run", "--for", "5m"])
            .env("NOTIFY_SOCKET", &socket)
            // 400 ms: a ping every 200 ms.
            .env("WATCHDOG_USEC", "400000")
            .env_remove("WATCHDOG_PID"),
        &dir,
        "notify",
    );

    // READY comes with the first STATUS, once the jobs are synced and the loop runs.
    let ready = host.wait_for("READY=1", || {
        let all = messages(&received);
        position(&all, "READY=1").map(|i| all[i].clone())
    });
    assert!(
        ready
            .lines()
            .any(|l| l == "STATUS=scheduling: 0 running; 0 attempts since start"),
        "{ready:?}"
    );
    assert!(
        host.stdout().contains("jobs from"),
        "READY only after the jobs are synced\n{}",
        host.output()
    );

    // Watchdog pings follow at about half of WATCHDOG_USEC.
    let t0 = Instant::now();
    host.wait_for("three WATCHDOG=1 after READY=1", || {
        let all = messages(&received);
        let from = position(&all, "READY=1")?;
        (all[from..]
            .iter()
            .filter(|m| m.lines().any(|l| l == "WATCHDOG=1"))
            .count()
            >= 3)
            .then_some(())
    });
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "pings every 200 ms, not {:?}",
        t0.elapsed()
    );
    let stamps: Vec<Instant> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, m)| m.lines().any(|l| l == "WATCHDOG=1"))
        .map(|(t, _)| *t)
        .collect();
    let gaps: Vec<Duration> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(100)),
        "a ping per half period, not a flood: {gaps:?}"
    );

    // A run changes the summary.
    let out = takt_command(&dir)
        .args(["job", "trigger", "wait", "--db", "takt.db"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    host.wait_for("a STATUS counting the run", || {
        messages(&received)
            .iter()
            .any(|m| {
                m.lines().any(|l| {
                    l == "STATUS=scheduling: 0 running; 1 attempts since start (1 succeeded)"
                })
            })
            .then_some(())
    });

    // SIGTERM: STOPPING=1 when the drain starts, then a clean exit.
    host.signal("TERM");
    let status = host.wait_exit();
    assert_eq!(status.code(), Some(0), "{status}\n{}", host.output());
    let all = messages(&received);
    let stopping = position(&all, "STOPPING=1").unwrap_or_else(|| {
        panic!("no STOPPING=1 in {all:#?}\n{}", host.output());
    });
    assert!(
        all[stopping]
            .lines()
            .any(|l| l
                == "STATUS=stopping (SIGTERM received): draining 0 running runs for up to 30s"),
        "{:?}",
        all[stopping]
    );
    assert!(position(&all, "READY=1").unwrap() < stopping, "{all:#?}");
    assert_eq!(
        all.iter()
            .filter(|m| m.lines().any(|l| l == "READY=1"))
            .count(),
        1,
        "{all:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `WATCHDOG_USEC` meant for another process (`WATCHDOG_PID` not ours, as a child of a
/// notify service inherits it) asks this one for nothing.
#[test]
fn a_watchdog_meant_for_another_process_gets_no_pings() {
    common::build(&["takt-plugin-examples"]);
    let dir = temp_dir("other-pid");
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            "plugin_dir = {:?}\nnode_id = \"n1\"\n",
            common::profile_dir().display().to_string()
        ),
    )
    .unwrap();
    let socket = dir.join("notify.sock");
    let received = listen(&socket);
    let mut host = Host::spawn(
        takt_command(&dir)
            .args(["run", "--for", "5m"])
            .env("NOTIFY_SOCKET", &socket)
            .env("WATCHDOG_USEC", "200000")
            .env("WATCHDOG_PID", "1"),
        &dir,
        "other-pid",
    );
    host.wait_for("READY=1", || {
        position(&messages(&received), "READY=1").map(|_| ())
    });
    std::thread::sleep(Duration::from_millis(1000));
    host.signal("TERM");
    assert_eq!(host.wait_exit().code(), Some(0), "{}", host.output());
    let all = messages(&received);
    assert_eq!(position(&all, "WATCHDOG=1"), None, "{all:#?}");
    assert!(position(&all, "STOPPING=1").is_some(), "{all:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn unit_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/systemd/takt.service")
}

/// `systemd-analyze verify` accepts the unit without a single complaint (an unknown or
/// misspelt key is only a warning to it, so its output must be empty, not just its exit
/// code 0). The unit's ExecStart names /usr/local/bin/takt, which verify requires to exist:
/// the check runs on a copy that starts the takt this test built.
#[test]
fn the_unit_file_verifies() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!(
            "SKIPPED: systemd-analyze is not installed (apt-get install systemd); the unit \
             file was not verified"
        );
        return;
    };
    assert!(version.status.success(), "{version:?}");
    let text = std::fs::read_to_string(unit_file()).expect("the unit file is there");
    assert!(text.contains("ExecStart=/usr/local/bin/takt run"), "{text}");
    let dir = temp_dir("verify");
    let copy = dir.join("takt.service");
    std::fs::write(
        &copy,
        text.replace("/usr/local/bin/takt", env!("CARGO_BIN_EXE_takt")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .current_dir(&dir)
        .output()
        .expect("systemd-analyze runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {}\n{said}",
        out.status
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The promises the unit makes to the drain and the watchdog: notify type, SIGTERM to takt
/// only, a stop timeout above the default grace (10 s) with room to record the cancelled
/// runs, a watchdog, the database directory the only writable path.
#[test]
fn the_unit_file_leaves_room_for_the_drain() {
    let text = std::fs::read_to_string(unit_file()).expect("the unit file is there");
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key}= is missing"))
            .trim()
            .to_string()
    };
    assert_eq!(value("Type"), "notify");
    assert_eq!(value("NotifyAccess"), "main");
    assert_eq!(value("KillMode"), "mixed");
    assert_eq!(value("ProtectSystem"), "strict");
    assert_eq!(value("ReadWritePaths"), "/var/lib/takt");
    assert_eq!(value("NoNewPrivileges"), "true");
    assert_eq!(value("PrivateTmp"), "true");
    assert_eq!(value("Restart"), "on-failure");
    let secs = |v: String| -> u64 {
        v.strip_suffix('s')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{v} is not a number of seconds"))
    };
    assert!(secs(value("TimeoutStopSec")) >= 10 + 15);
    assert!(secs(value("WatchdogSec")) >= 10);
}

/// `takt service` is the Windows service manager's command: elsewhere it says so, names the
/// Linux way, and changes nothing.
#[test]
fn takt_service_says_it_is_windows_only() {
    let dir = temp_dir("service");
    for sub in ["install", "uninstall", "start", "stop"] {
        let out = takt_command(&dir).args(["service", sub]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(&format!("error: takt service {sub}: Windows only")),
            "{err}"
        );
        assert!(err.contains("packaging/systemd/takt.service"), "{err}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing was written"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
