//! Read-only means read-only: only `takt init`, `takt db migrate` and `takt run` create a
//! database or apply migrations. Every other command on a missing SQLite file, a file without
//! takt's schema, an older schema, or a server database without takt's tables exits 1 with
//! what to run, and creates or changes nothing. A URL of an unknown scheme is refused with the
//! supported forms.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("takt-readonly-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        Dir(dir)
    }

    fn takt(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_takt"))
            .args(args)
            .current_dir(&self.0)
            .env_remove("TAKT_DB")
            .env_remove("TAKT_PG_SCHEMA")
            .output()
            .expect("takt runs")
    }

    /// Runs `args`, which must fail with exit 1; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.takt(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "takt {args:?}: {err}");
        err
    }

    /// Every entry of the directory (to show nothing was created).
    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Every command that opens a database but must not create one, with `DB` for its `--db`.
const COMMANDS: &[&[&str]] = &[
    &["job", "list", "--db", "DB"],
    &["job", "show", "x", "--db", "DB"],
    &[
        "job",
        "add",
        "--name",
        "x",
        "--handler",
        "a::b",
        "--manual",
        "--db",
        "DB",
    ],
    &["job", "update", "x", "--priority", "1", "--db", "DB"],
    &["job", "enable", "x", "--db", "DB"],
    &["job", "disable", "x", "--db", "DB"],
    &["job", "trigger", "x", "--db", "DB"],
    &["job", "remove", "x", "--yes", "--db", "DB"],
    &["runs", "--db", "DB"],
    &["logs", "1", "--db", "DB"],
    &["nodes", "--db", "DB"],
    &["why", "x", "--db", "DB"],
    &[
        "audit",
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-02",
        "--db",
        "DB",
    ],
];

fn with_db<'a>(args: &[&'a str], db: &'a str) -> Vec<&'a str> {
    args.iter()
        .map(|a| if *a == "DB" { db } else { a })
        .collect()
}

#[test]
fn commands_on_a_missing_file_create_nothing() {
    let d = Dir::new("missing");
    for db in ["typo.db", "/nonexistent/takt-dir/x.db"] {
        for cmd in COMMANDS {
            let err = d.fails(&with_db(cmd, db));
            assert!(err.contains("no takt database at"), "{cmd:?}: {err}");
            assert!(err.contains(db.trim_start_matches('/')), "names it: {err}");
            assert!(
                err.contains("takt init") && err.contains("takt db migrate"),
                "says what to run: {err}"
            );
        }
    }
    assert!(d.entries().is_empty(), "created {:?}", d.entries());
    assert!(!Path::new("/nonexistent/takt-dir").exists());
}

#[test]
fn an_unknown_url_scheme_is_refused_with_the_supported_forms() {
    let d = Dir::new("scheme");
    for db in ["mysql://x@y/z", "sqlite://takt.db"] {
        for cmd in COMMANDS
            .iter()
            .chain([&["db", "migrate", "--db", "DB"][..]].iter())
        {
            let err = d.fails(&with_db(cmd, db));
            assert!(err.contains("is not a database takt supports"), "{err}");
            assert!(err.contains("postgres://"), "{err}");
            assert!(err.contains("Server=host,1433"), "{err}");
        }
    }
    assert!(d.entries().is_empty(), "created {:?}", d.entries());
}

#[test]
fn a_file_without_takt_or_with_an_older_schema_is_left_as_it_is() {
    let d = Dir::new("schema");
    // An empty file, and an SQLite database of another application.
    std::fs::write(d.0.join("empty.db"), b"").expect("write");
    {
        let conn = rusqlite::Connection::open(d.0.join("other.db")).expect("open");
        conn.execute_batch("CREATE TABLE t (x INTEGER)")
            .expect("create");
    }
    for name in ["empty.db", "other.db"] {
        let path = d.0.join(name);
        let before = std::fs::read(&path).expect("read");
        let err = d.fails(&["job", "list", "--db", path.to_str().expect("utf-8")]);
        assert!(err.contains("no takt database at"), "{name}: {err}");
        let after = std::fs::read(&path).expect("read");
        assert!(
            after == before,
            "{name} was changed ({} bytes before, {} after)",
            before.len(),
            after.len()
        );
    }
    // A takt database of schema version 1 only.
    let old = d.0.join("old.db");
    {
        let conn = rusqlite::Connection::open(&old).expect("open");
        conn.execute_batch(takt_host::store::MIGRATIONS[0].sql)
            .expect("0001");
    }
    let err = d.fails(&["runs", "--db", old.to_str().expect("utf-8")]);
    assert!(err.contains("has schema version 1, older than"), "{err}");
    assert!(err.contains("takt db migrate"), "{err}");
    assert!(err.contains("changed nothing"), "{err}");
    let version: i64 = rusqlite::Connection::open(&old)
        .expect("open")
        .query_row("SELECT MAX(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .expect("version");
    assert_eq!(version, 1, "not migrated");
    // `db migrate` is the way on, and then the command works.
    let out = d.takt(&["db", "migrate", "--db", old.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{out:?}");
    let out = d.takt(&["runs", "--db", old.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_postgres_database_without_takt_is_not_migrated_by_a_listing() {
    let Some(url) = common::backend_url("postgres", "TAKT_TEST_PG_URL") else {
        return;
    };
    let d = Dir::new("pg");
    let schema = format!("takt_readonly_{}", std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_takt"))
        .args(["job", "list", "--db", &url])
        .env("TAKT_PG_SCHEMA", &schema)
        .current_dir(&d.0)
        .output()
        .expect("takt runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no takt database at"), "{err}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let exists: bool = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                &[&schema],
            )
            .await
            .expect("query")
            .get(0)
    });
    assert!(!exists, "the listing created schema {schema}");
}
