//! Alerts from `takt run` against real servers the tests start: an SMTP sink (a small SMTP
//! server written here: greeting, EHLO, MAIL, RCPT, DATA, QUIT) and an HTTP receiver. A job
//! failing ten times in a row gives one alert, then one "recovered"; a hung SMTP server (it
//! accepts and never answers) delays no run; a long-running run is reported once.

#![cfg(unix)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http::{Reply, Server};
use common::process::Host;
use common::takt_command;
use takt_core::run::{Run, RunState};
use takt_core::store::conformance::block_on;
use takt_core::store::{RunFilter, Store};
use takt_host::store::{SqliteOptions, SqliteStore};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("takt-alerts-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the temp dir can be created");
    dir
}

/// A mail as the sink received it.
#[derive(Clone, Debug)]
struct Mail {
    rcpt: Vec<String>,
    data: String,
}

/// An SMTP server on 127.0.0.1 that accepts every mail (or, `hung`, accepts connections and
/// never says a word).
struct SmtpSink {
    port: u16,
    mails: Arc<Mutex<Vec<Mail>>>,
    connections: Arc<Mutex<usize>>,
}

impl SmtpSink {
    fn start(hung: bool) -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mails: Arc<Mutex<Vec<Mail>>> = Arc::default();
        let connections: Arc<Mutex<usize>> = Arc::default();
        let (m, c) = (mails.clone(), connections.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                *c.lock().unwrap() += 1;
                let m = m.clone();
                std::thread::spawn(move || {
                    if hung {
                        // Holds the connection open, silent, until the client gives up.
                        let mut buf = [0u8; 1024];
                        let mut s = stream;
                        while std::io::Read::read(&mut s, &mut buf).is_ok_and(|n| n > 0) {}
                        return;
                    }
                    let _ = serve_smtp(stream, &m);
                });
            }
        });
        SmtpSink {
            port,
            mails,
            connections,
        }
    }

    fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap().clone()
    }
}

fn serve_smtp(stream: TcpStream, mails: &Mutex<Vec<Mail>>) -> std::io::Result<()> {
    let mut w = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    w.write_all(b"220 sink.test ESMTP\r\n")?;
    let mut rcpt = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let cmd = line.trim_end().to_ascii_uppercase();
        if cmd.starts_with("EHLO") || cmd.starts_with("HELO") {
            w.write_all(b"250-sink.test\r\n250 8BITMIME\r\n")?;
        } else if cmd.starts_with("MAIL FROM") {
            rcpt.clear();
            w.write_all(b"250 ok\r\n")?;
        } else if cmd.starts_with("RCPT TO") {
            rcpt.push(line.trim_end()[8..].trim().to_string());
            w.write_all(b"250 ok\r\n")?;
        } else if cmd == "DATA" {
            w.write_all(b"354 go on\r\n")?;
            let mut data = String::new();
            loop {
                line.clear();
                if r.read_line(&mut line)? == 0 {
                    return Ok(());
                }
                if line == ".\r\n" {
                    break;
                }
                data.push_str(&line);
            }
            mails.lock().unwrap().push(Mail {
                rcpt: rcpt.clone(),
                data,
            });
            w.write_all(b"250 queued\r\n")?;
        } else if cmd == "QUIT" {
            w.write_all(b"221 bye\r\n")?;
            return Ok(());
        } else {
            w.write_all(b"250 ok\r\n")?;
        }
    }
}

fn store(dir: &Path) -> SqliteStore {
    SqliteStore::open(dir.join("takt.db"), &SqliteOptions::default()).expect("the database opens")
}

fn runs(store: &SqliteStore, state: Option<RunState>) -> Vec<Run> {
    block_on(store.run_list(&RunFilter {
        job: None,
        state,
        limit: 1000,
        ..RunFilter::default()
    }))
    .unwrap()
}

/// The webhook bodies received, as JSON.
fn hooks(server: &Server) -> Vec<serde_json::Value> {
    server
        .requests()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).expect("the webhook body is JSON"))
        .collect()
}

fn deliveries(dir: &Path) -> Vec<serde_json::Value> {
    let out = takt_command(dir)
        .args(["alerts", "--json", "--limit", "1000", "--db", "takt.db"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("takt alerts --json")
}

fn count(list: &[serde_json::Value], f: impl Fn(&serde_json::Value) -> bool) -> usize {
    list.iter().filter(|v| f(v)).count()
}

#[test]
fn ten_failures_give_one_alert_then_one_recovered() {
    let dir = temp_dir("flaky");
    let smtp = SmtpSink::start(false);
    let hook = Server::start(|_| Reply::with(204, "text/plain", ""));
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            r#"plugin_dir = {plugins:?}
node_id = "n1"

[[jobs]]
name = "flaky"
handler = "exe::run"
every = "1s"
params = {{ program = "/bin/sh", args = ["-c", "test -f ok"], cwd = {dir:?} }}

[alerts]
check_interval = "1s"
timeout = "5s"

[[alerts.channels]]
name = "ops-mail"
smtp = "smtp://127.0.0.1:{port}"
from = "takt@factory.test"
to = ["mes-ops@factory.test", "shift@factory.test"]

[[alerts.channels]]
name = "hook"
webhook = "{hook}"

[[alerts.rules]]
on = ["failed", "timed_out", "recovered"]
jobs = ["fl*"]
channels = ["ops-mail", "hook"]
"#,
            plugins = common::profile_dir().display().to_string(),
            dir = dir.display().to_string(),
            port = smtp.port,
            hook = hook.url("/hooks/takt"),
        ),
    )
    .unwrap();
    let mut host = Host::spawn(
        takt_command(&dir)
            .args(["run", "--for", "5m"])
            .env("TAKT_ALERT_HOOK_SECRET", "hook-secret"),
        &dir,
        "flaky",
    );
    host.wait_for_line("alerts: 1 rules on channels ops-mail, hook");
    let db = store(&dir);
    host.wait_for("ten failed runs", || {
        (runs(&db, Some(RunState::Failed)).len() >= 10).then_some(())
    });
    std::fs::write(dir.join("ok"), "").unwrap();
    host.wait_for("a success, the recovered notice on both channels", || {
        (!runs(&db, Some(RunState::Succeeded)).is_empty()
            && hooks(&hook).len() >= 2
            && smtp.mails().len() >= 2)
            .then_some(())
    });
    // Successes go on; nothing more is sent.
    std::thread::sleep(Duration::from_secs(3));
    host.signal("TERM");
    assert_eq!(host.wait_exit().code(), Some(0), "{}", host.output());

    let bodies = hooks(&hook);
    assert_eq!(bodies.len(), 2, "{bodies:#?}");
    assert_eq!(bodies[0]["kind"], "firing");
    assert_eq!(bodies[0]["condition"], "failed");
    assert_eq!(bodies[0]["job"], "flaky");
    assert_eq!(bodies[1]["kind"], "recovered");
    assert!(
        bodies[1]["summary"]
            .as_str()
            .unwrap()
            .starts_with("job flaky recovered"),
        "{bodies:#?}"
    );
    for r in hook.requests() {
        assert_eq!(
            r.header(takt_host::alerts::SIGNATURE_HEADER),
            Some(takt_host::alerts::signature("hook-secret", &r.body).as_str()),
            "signed"
        );
        assert_eq!(r.path(), "/hooks/takt");
    }
    let mails = smtp.mails();
    assert_eq!(mails.len(), 2, "{mails:#?}");
    for m in &mails {
        assert_eq!(
            m.rcpt,
            ["<mes-ops@factory.test>", "<shift@factory.test>"],
            "{m:?}"
        );
    }
    assert!(
        mails[0]
            .data
            .contains("Subject: [takt] job flaky failed after its last retry"),
        "{}",
        mails[0].data
    );
    assert!(
        mails[1]
            .data
            .contains("Subject: [takt] job flaky recovered"),
        "{}",
        mails[1].data
    );

    // Recorded: two sent per channel, the other failures suppressed as duplicates.
    let d = deliveries(&dir);
    for channel in ["ops-mail", "hook"] {
        let sent = count(&d, |v| v["channel"] == channel && v["outcome"] == "sent");
        assert_eq!(sent, 2, "{channel}: {d:#?}");
        let dup = count(&d, |v| {
            v["channel"] == channel
                && v["outcome"] == "suppressed"
                && v["detail"].as_str().unwrap().contains("duplicate")
        });
        assert!(dup >= 9, "{channel}: {dup} duplicates\n{d:#?}");
    }
    let table = takt_command(&dir)
        .args(["alerts", "--db", "takt.db"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.lines().next().unwrap().starts_with("at"),
        "a table with a header: {text}"
    );
    assert!(text.contains("job:flaky"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hung_smtp_server_delays_no_run() {
    let dir = temp_dir("hung");
    let smtp = SmtpSink::start(true);
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            r#"plugin_dir = {plugins:?}
node_id = "n1"

[[jobs]]
name = "broken"
handler = "exe::run"
every = "1s"
params = {{ program = "/bin/sh", args = ["-c", "exit 3"] }}

[alerts]
timeout = "2s"

[[alerts.channels]]
name = "mail"
smtp = "smtp://127.0.0.1:{port}"
from = "takt@factory.test"
to = ["ops@factory.test"]

[[alerts.rules]]
on = ["failed"]
jobs = ["*"]
channels = ["mail"]
"#,
            plugins = common::profile_dir().display().to_string(),
            port = smtp.port,
        ),
    )
    .unwrap();
    let mut host = Host::spawn(
        takt_command(&dir).args(["run", "--for", "5m"]),
        &dir,
        "hung",
    );
    host.wait_for_line("alerts: 1 rules");
    let db = store(&dir);
    host.wait_for("the failed delivery recorded", || {
        let d = deliveries(&dir);
        (count(&d, |v| v["outcome"] == "failed") >= 1).then_some(())
    });
    // Runs went on meanwhile, each at its fire time.
    let t0 = Instant::now();
    let before = runs(&db, Some(RunState::Failed)).len();
    host.wait_for("four more runs", || {
        (runs(&db, Some(RunState::Failed)).len() >= before + 4).then_some(())
    });
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "every-second runs kept their pace: {:?}",
        t0.elapsed()
    );
    host.signal("TERM");
    assert_eq!(host.wait_exit().code(), Some(0), "{}", host.output());
    let all = runs(&db, None);
    let late: Vec<_> = all
        .iter()
        .filter_map(|r| r.started_at.map(|s| s.duration_since(r.fire_time)))
        .filter(|d| d.as_millis() > 1500)
        .collect();
    assert!(late.is_empty(), "runs started late: {late:?}");
    let d = deliveries(&dir);
    let failed: Vec<_> = d.iter().filter(|v| v["outcome"] == "failed").collect();
    assert_eq!(failed.len(), 1, "one alert, one failed delivery: {d:#?}");
    assert!(
        failed[0]["detail"]
            .as_str()
            .unwrap()
            .contains("not delivered: no answer within 2s"),
        "{failed:#?}"
    );
    assert!(*smtp.connections.lock().unwrap() >= 1);
    assert!(smtp.mails().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_long_running_run_is_reported_once_while_it_runs() {
    let dir = temp_dir("slow");
    let hook = Server::start(|_| Reply::with(200, "application/json", "{}"));
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            r#"plugin_dir = {plugins:?}
node_id = "n1"

[[jobs]]
name = "slow"
handler = "exe::run"
group = "etl"
params = {{ program = "/bin/sh", args = ["-c", "sleep 5"] }}

[alerts]
check_interval = "1s"

[[alerts.channels]]
name = "chat"
webhook = "{hook}"
template = '{{"text": "{{{{ summary }}}}", "job": "{{{{ job }}}}"}}'

[[alerts.rules]]
on = ["long_running"]
groups = ["et*"]
long_running = "1s"
channels = ["chat"]
"#,
            plugins = common::profile_dir().display().to_string(),
            hook = hook.url("/chat"),
        ),
    )
    .unwrap();
    let mut host = Host::spawn(
        takt_command(&dir).args(["run", "--for", "5m"]),
        &dir,
        "slow",
    );
    host.wait_for_line("alerts: 1 rules");
    let out = takt_command(&dir)
        .args(["job", "trigger", "slow", "--db", "takt.db"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let db = store(&dir);
    host.wait_for("the run to end", || {
        (!runs(&db, Some(RunState::Succeeded)).is_empty()).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    host.signal("TERM");
    assert_eq!(host.wait_exit().code(), Some(0), "{}", host.output());
    let bodies = hooks(&hook);
    assert_eq!(bodies.len(), 1, "once, not once per check: {bodies:#?}");
    assert_eq!(bodies[0]["job"], "slow", "the template's shape");
    let text = bodies[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("job slow run ") && text.contains("longer than 1s"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two nodes on one PostgreSQL database run three failing jobs between them: each job's
/// alert and its "recovered" are sent once in all, whichever node ran which run; then one
/// node is killed and the other reports it down, once.
#[test]
fn two_nodes_send_each_alert_once() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let dir = temp_dir("two-nodes");
    let schema = format!("takt_alerts_{}", std::process::id());
    let pg = common::pg::Pg::connect(&url);
    pg.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let hook = Server::start(|_| Reply::with(204, "text/plain", ""));
    let mut text = format!(
        "database = \"{url}\"\nplugin_dir = {:?}\nlease = \"3s\"\nrenew_every = \"1s\"\n\
         grace = \"2s\"\n\n[postgres]\nschema = \"{schema}\"\n\n[alerts]\ncheck_interval = \"1s\"\n\n\
         [[alerts.channels]]\nname = \"hook\"\nwebhook = \"{}\"\n\n[[alerts.rules]]\n\
         on = [\"failed\", \"recovered\", \"node_down\"]\njobs = [\"*\"]\nchannels = [\"hook\"]\n",
        common::profile_dir().display().to_string(),
        hook.url("/hook")
    );
    for i in 0..3 {
        text.push_str(&format!(
            "\n[[jobs]]\nname = \"flaky-{i}\"\nhandler = \"exe::run\"\nevery = \"1s\"\n\
             params = {{ program = \"/bin/sh\", args = [\"-c\", \"test -f ok\"], cwd = {:?} }}\n",
            dir.display().to_string()
        ));
    }
    std::fs::write(dir.join("takt.toml"), text).unwrap();
    let spawn = |id: &str| {
        Host::spawn(
            takt_command(&dir)
                .args(["run", "--for", "5m"])
                .env("TAKT_NODE_ID", id),
            &dir,
            id,
        )
    };
    let mut a = spawn("node-a");
    a.wait_for_line("alerts: 1 rules");
    let mut b = spawn("node-b");
    b.wait_for_line("alerts: 1 rules");
    let failed_on = |node: &str| {
        pg.count(&format!(
            "SELECT COUNT(*) FROM {schema}.runs WHERE state = 'failed' AND node_id = '{node}'"
        ))
    };
    a.wait_for("failures on both nodes", || {
        (failed_on("node-a") >= 3 && failed_on("node-b") >= 3).then_some(())
    });
    std::fs::write(dir.join("ok"), "").unwrap();
    a.wait_for("a success of every job", || {
        (pg.count(&format!(
            "SELECT COUNT(DISTINCT job_id) FROM {schema}.runs WHERE state = 'succeeded'"
        )) == 3)
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let bodies = hooks(&hook);
    for i in 0..3 {
        let job = format!("flaky-{i}");
        for kind in ["firing", "recovered"] {
            assert_eq!(
                count(&bodies, |v| v["job"] == job.as_str() && v["kind"] == kind),
                1,
                "{job} {kind}: {bodies:#?}"
            );
        }
    }
    // Node b dies without a word; node a reports it once.
    b.child.kill().unwrap();
    let _ = b.child.wait();
    a.wait_for("node-b reported down", || {
        (count(&hooks(&hook), |v| v["condition"] == "node_down") > 0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let down = count(&hooks(&hook), |v| {
        v["condition"] == "node_down" && v["subject"] == "node:node-b"
    });
    assert_eq!(down, 1, "{:#?}", hooks(&hook));
    a.signal("TERM");
    assert_eq!(a.wait_exit().code(), Some(0), "{}", a.output());
    pg.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Past a channel's rate limit alerts are held back (recorded as suppressed) and sent as one
/// digest when the window allows again; skipped fires alert by reason.
#[test]
fn the_rate_limit_holds_alerts_for_one_digest_and_skips_alert_by_reason() {
    let dir = temp_dir("digest");
    let hook = Server::start(|_| Reply::with(200, "text/plain", "ok"));
    let mut text = format!(
        "plugin_dir = {:?}\nnode_id = \"n1\"\n\n[alerts]\nrate_limit = 2\nrate_window = \"6s\"\n\
         check_interval = \"1s\"\n\n[[alerts.channels]]\nname = \"hook\"\nwebhook = \"{}\"\n\n\
         [[alerts.rules]]\non = [\"failed\"]\njobs = [\"broken-*\"]\nchannels = [\"hook\"]\n\n\
         [[alerts.rules]]\non = [\"skipped\"]\njobs = [\"busy\"]\nskip_reasons = [\"overlap\"]\n\
         channels = [\"hook\"]\n",
        common::profile_dir().display().to_string(),
        hook.url("/hook")
    );
    for i in 0..5 {
        text.push_str(&format!(
            "\n[[jobs]]\nname = \"broken-{i}\"\nhandler = \"exe::run\"\n\
             params = {{ program = \"/bin/sh\", args = [\"-c\", \"exit 1\"] }}\n"
        ));
    }
    text.push_str(
        "\n[[jobs]]\nname = \"busy\"\nhandler = \"exe::run\"\nevery = \"1s\"\noverlap = \"skip\"\n\
         params = { program = \"/bin/sh\", args = [\"-c\", \"sleep 3; exit 1\"] }\n",
    );
    std::fs::write(dir.join("takt.toml"), text).unwrap();
    let mut host = Host::spawn(
        takt_command(&dir).args(["run", "--for", "5m"]),
        &dir,
        "digest",
    );
    host.wait_for_line("alerts: 2 rules");
    for i in 0..5 {
        let out = takt_command(&dir)
            .args(["job", "trigger", &format!("broken-{i}"), "--db", "takt.db"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    host.wait_for("the digest", || {
        hooks(&hook)
            .iter()
            .any(|v| v["kind"] == "digest")
            .then_some(())
    });
    host.signal("TERM");
    assert_eq!(host.wait_exit().code(), Some(0), "{}", host.output());
    let bodies = hooks(&hook);
    let firing = count(&bodies, |v| v["kind"] == "firing");
    let digest: Vec<_> = bodies.iter().filter(|v| v["kind"] == "digest").collect();
    assert_eq!(digest.len(), 1, "{bodies:#?}");
    let held = digest[0]["summary"]
        .as_str()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse::<usize>()
        .unwrap();
    // Five failures and at least one overlap skip: two go out, the rest wait for the digest.
    assert_eq!(
        count(&bodies, |v| v["kind"] == "firing"
            && v["condition"] == "failed")
            + count(&bodies, |v| v["kind"] == "firing"
                && v["condition"] == "skipped"),
        2,
        "{bodies:#?}"
    );
    assert!(
        firing + held >= 6,
        "{firing} sent, {held} held\n{bodies:#?}"
    );
    let detail = digest[0]["detail"].as_str().unwrap();
    assert_eq!(detail.lines().count(), held, "{detail}");
    let d = deliveries(&dir);
    let limited = count(&d, |v| {
        v["outcome"] == "suppressed"
            && v["detail"]
                .as_str()
                .unwrap()
                .contains("rate limit (2 per 6s)")
    });
    assert_eq!(limited, held, "{d:#?}");
    // The skipped fires of busy (which never succeeds, so its episode stays open) alerted
    // once, by their reason.
    let skipped: Vec<_> = d
        .iter()
        .filter(|v| v["condition"] == "skipped" && v["kind"] == "firing")
        .filter(|v| {
            v["outcome"] != "suppressed" || v["detail"].as_str().unwrap().contains("rate limit")
        })
        .collect();
    assert_eq!(skipped.len(), 1, "{d:#?}");
    assert!(
        skipped[0]["detail"]
            .as_str()
            .unwrap()
            .contains("was skipped (overlap)"),
        "{skipped:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node that cannot reach its PostgreSQL database for longer than `outage_after` says so
/// (the store cannot decide for it: each node alerts its own outage), and says when it is
/// back.
#[test]
fn a_database_outage_is_reported_by_the_node_and_its_end_too() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let config: tokio_postgres::Config = url.parse().expect("TAKT_TEST_PG_URL parses");
    let Some(tokio_postgres::config::Host::Tcp(pg_host)) = config.get_hosts().first().cloned()
    else {
        eprintln!("SKIPPED: the outage alert test needs a TCP TAKT_TEST_PG_URL");
        return;
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let proxy = common::proxy::Proxy::start(format!("{pg_host}:{port}"));
    let user = config.get_user().unwrap_or("postgres");
    let dbname = config.get_dbname().unwrap_or(user);
    let mut via = format!("postgres://{user}");
    if let Some(pw) = config.get_password() {
        via.push(':');
        via.push_str(&String::from_utf8_lossy(pw));
    }
    via.push_str(&format!("@127.0.0.1:{}/{dbname}", proxy.port));
    let dir = temp_dir("outage");
    let schema = format!("takt_outage_alerts_{}", std::process::id());
    let pg = common::pg::Pg::connect(&url);
    pg.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let hook = Server::start(|_| Reply::with(204, "text/plain", ""));
    std::fs::write(
        dir.join("takt.toml"),
        format!(
            "database = \"{via}\"\nplugin_dir = {:?}\nnode_id = \"n1\"\nrenew_every = \"1s\"\n\n\
             [postgres]\nschema = \"{schema}\"\n\n[[alerts.channels]]\nname = \"hook\"\n\
             webhook = \"{}\"\n\n[[alerts.rules]]\non = [\"db_outage\", \"recovered\"]\n\
             outage_after = \"2s\"\nchannels = [\"hook\"]\n\n[[jobs]]\nname = \"tick\"\n\
             handler = \"exe::run\"\nevery = \"1s\"\nparams = {{ program = \"/bin/true\" }}\n",
            common::profile_dir().display().to_string(),
            hook.url("/hook")
        ),
    )
    .unwrap();
    let mut host = Host::spawn(
        takt_command(&dir).args(["run", "--for", "5m"]),
        &dir,
        "outage",
    );
    host.wait_for_line("alerts: 1 rules");
    std::thread::sleep(Duration::from_secs(2));
    proxy.cut();
    host.wait_for("the outage alert", || {
        (count(&hooks(&hook), |v| {
            v["condition"] == "db_outage" && v["kind"] == "firing"
        }) > 0)
            .then_some(())
    });
    proxy.restore();
    host.wait_for("the end of the outage", || {
        (count(&hooks(&hook), |v| v["kind"] == "recovered") > 0).then_some(())
    });
    host.signal("TERM");
    assert_eq!(host.wait_exit().code(), Some(0), "{}", host.output());
    let bodies = hooks(&hook);
    assert_eq!(bodies.len(), 2, "{bodies:#?}");
    assert_eq!(bodies[0]["subject"], "node:n1");
    assert!(
        bodies[0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("node n1 cannot reach the database since"),
        "{bodies:#?}"
    );
    assert!(
        bodies[1]["summary"]
            .as_str()
            .unwrap()
            .starts_with("node n1 reaches the database again after"),
        "{bodies:#?}"
    );
    pg.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let _ = std::fs::remove_dir_all(&dir);
}
