//! The SQLite store against the core's conformance suite, on real files, plus what only a
//! file-backed store has: migrations, refusals of corrupt / read-only / newer databases,
//! exact round trips of every schedule kind, and data that survives reopening.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use takt_core::Timestamp;
use takt_core::attempt::AttemptOutcome;
use takt_core::job::{JobDef, JobName, Priority};
use takt_core::policy::{Backoff, RetryPolicy};
use takt_core::run::{NodeId, RunEvent, RunState};
use takt_core::schedule::calendar::CalendarRule;
use takt_core::schedule::cron::{CronExpr, CronOptions, DayMatch};
use takt_core::schedule::{DstPolicy, FoldPolicy, GapPolicy, Interval, Rule, Schedule, Zone};
use takt_core::store::conformance::{self, block_on};
use takt_core::store::{
    ClaimParams, LogLevel, LogLine, RunFilter, RunFinish, Store, StoreError, StoreErrorKind,
};
use takt_host::store::conformance::{MigrationTarget, run_migration_checks};
use takt_host::store::{
    AppliedMigration, MIGRATIONS, Migration, MigrationEvent, MigrationObserver, SqliteOptions,
    SqliteStore, latest_version, migrate,
};

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "takt-sqlite-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, &SqliteOptions::default()).expect("open the store")
}

/// A store whose writes wait at most `busy` for another connection's write lock.
fn open_waiting(path: &Path, busy: Duration) -> SqliteStore {
    SqliteStore::open(path, &SqliteOptions::default().with_busy_timeout(busy)).expect("open")
}

/// The first column of every row `sql` returns, read on a raw connection.
fn first_column<T: rusqlite::types::FromSql>(conn: &rusqlite::Connection, sql: &str) -> Vec<T> {
    column(conn, sql, 0)
}

/// Column `index` of every row `sql` returns, read on a raw connection.
fn column<T: rusqlite::types::FromSql>(
    conn: &rusqlite::Connection,
    sql: &str,
    index: usize,
) -> Vec<T> {
    conn.prepare(sql)
        .and_then(|mut s| s.query_map([], |r| r.get(index))?.collect())
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// SQLite finds nothing wrong in the file behind `conn`.
fn assert_sound(conn: &rusqlite::Connection) {
    assert_eq!(
        first_column::<String>(conn, "PRAGMA integrity_check"),
        ["ok"]
    );
}

fn open_err(path: &Path) -> StoreError {
    SqliteStore::open(path, &SqliteOptions::default()).expect_err("the open must fail")
}

fn ts(s: &str) -> Timestamp {
    s.parse().expect("a valid instant")
}

#[test]
fn conformance_on_a_temp_file() {
    let dir = TempDir::new("conformance");
    let n = AtomicUsize::new(0);
    let report = block_on(conformance::run_all(|| {
        let path = dir.file(&format!("check-{}.db", n.fetch_add(1, Ordering::Relaxed)));
        async move { open(&path) }
    }));
    eprintln!("sqlite (file): {report}");
    report.expect_skipped(&[]);
    assert_eq!(report.passed.len(), conformance::CHECKS, "every check ran");
}

#[test]
fn conformance_in_memory() {
    let report = block_on(conformance::run_all(|| async {
        SqliteStore::open_in_memory().expect("in-memory store")
    }));
    eprintln!("sqlite (memory): {report}");
    report.expect_skipped(&[]);
}

/// The migration checks every backend runs, on fresh files of one directory.
struct SqliteTarget {
    path: PathBuf,
}

impl MigrationTarget for SqliteTarget {
    type Store = SqliteStore;

    fn shown(&self) -> String {
        self.path.display().to_string()
    }

    fn migrations(&self) -> &'static [Migration] {
        MIGRATIONS
    }

    async fn open(
        &self,
        migrate: bool,
        observer: Option<MigrationObserver>,
    ) -> Result<SqliteStore, StoreError> {
        let mut options = SqliteOptions::default();
        options.migrate = migrate;
        options.on_migration = observer;
        SqliteStore::open(&self.path, &options)
    }

    async fn migrate(&self, store: &SqliteStore) -> Result<Vec<AppliedMigration>, StoreError> {
        store.migrate()
    }

    async fn recorded(&self) -> Option<Vec<u32>> {
        if !self.path.exists() {
            return None;
        }
        let conn = rusqlite::Connection::open_with_flags(
            &self.path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("raw open");
        let mut stmt = conn
            .prepare("SELECT version FROM schema_migrations ORDER BY version")
            .ok()?;
        let versions = stmt
            .query_map([], |r| r.get(0))
            .expect("read the versions")
            .collect::<Result<Vec<u32>, _>>()
            .expect("read the versions");
        Some(versions)
    }

    async fn record_newer(&self, version: u32) {
        rusqlite::Connection::open(&self.path)
            .expect("raw open")
            .execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, 'future', 0)",
                [version],
            )
            .expect("pretend a newer takt migrated");
    }
}

#[test]
fn migration_checks_on_files() {
    let dir = TempDir::new("migration-checks");
    let n = AtomicUsize::new(0);
    let report = block_on(run_migration_checks(|| {
        let path = dir.file(&format!("check-{}.db", n.fetch_add(1, Ordering::Relaxed)));
        async move { SqliteTarget { path } }
    }));
    eprintln!("sqlite: {report}");
    report.expect_skipped(&[]);
    assert_eq!(report.passed.len(), 5, "every check ran");
}

/// Four hosts starting at once on a new file, on real threads (the migration checks poll
/// SQLite's synchronous opens in turn): every open succeeds and each migration is recorded
/// once, because each migration re-reads the version once it holds the write lock.
#[test]
fn hosts_starting_together_on_threads_migrate_a_new_file_once() {
    let dir = TempDir::new("migrate-threads");
    let path = dir.file("takt.db");
    let start = Arc::new(std::sync::Barrier::new(4));
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (path, start) = (path.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                SqliteStore::open(&path, &SqliteOptions::default())
            })
        })
        .collect();
    for open in opens {
        open.join().expect("thread").expect("every host opens");
    }
    let target = SqliteTarget { path };
    assert_eq!(
        block_on(target.recorded()),
        Some(MIGRATIONS.iter().map(|m| m.version).collect())
    );
}

/// Two processes' worth of connections on one file, on real threads: `BEGIN IMMEDIATE` and
/// the unique (job, fire time) key keep every fire claimed exactly once.
#[test]
fn connections_on_threads_claim_each_fire_once() {
    let dir = TempDir::new("threads");
    let path = dir.file("takt.db");
    let store = open(&path);
    let fires = block_on(conformance::seed_every_minute_jobs(&store, 8));
    let claimed = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let path = path.clone();
                s.spawn(move || {
                    let own = open(&path);
                    block_on(conformance::claim_until_empty(&own, i))
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("claimer thread"))
            .collect::<Vec<_>>()
    });
    conformance::assert_each_fire_once(&claimed, 8, fires);
}

/// Inserts 4 000 jobs of ~3 pages each (an 8 KB parameter overflows into two) in rounds of
/// 100, pausing `pause` after each round; checks after reopening that every one is there.
/// Returns the WAL's largest size in pages (its file keeps its largest size).
fn wal_pages_after_inserts(name: &str, pause: Duration) -> u64 {
    let dir = TempDir::new(name);
    let path = dir.file("takt.db");
    let wal = dir.file("takt.db-wal");
    let store = open(&path);
    let now = ts("2026-06-01T00:00:00Z");
    let params = format!(r#"{{"blob": "{}"}}"#, "x".repeat(8_000));
    let mut largest = 0;
    for round in 0..40 {
        for i in 0..100 {
            let mut job = JobDef::new(&format!("job-{round}-{i}"), "examples::noop").unwrap();
            job.params_json = params.clone();
            block_on(store.job_insert(&job, now)).expect("insert a job");
        }
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    drop(store);
    let store = open(&path);
    let jobs = block_on(store.job_list()).expect("list jobs");
    assert_eq!(jobs.len(), 4_000);
    let pages = largest / 4_120;
    eprintln!("largest WAL: {largest} bytes, ~{pages} pages");
    pages
}

/// Checkpoints run on the store's own thread (the commits only ask for them), and they do
/// run: the WAL of a store written far past SQLite's 1 000-page threshold stays bounded, and
/// everything written is there after reopening. Without a checkpointer the WAL would hold
/// every page written (~29 000 here).
#[test]
fn the_wal_is_checkpointed_in_the_background_and_stays_bounded() {
    // The pauses let the checkpointer catch up as it would between a host's bursts.
    let pages = wal_pages_after_inserts("checkpoint", Duration::from_millis(20));
    // The thread is asked once per 1 000 pages, and checkpoints once more in each pause, so
    // the WAL mostly starts over at ~1 500 pages; SQLite does not always start it over after
    // such a checkpoint (5 000–7 300 pages seen at the worst), and at 8 000 the writer
    // checkpoints itself (the test below).
    assert!(
        pages < 10_000,
        "the WAL grew to ~{pages} pages: nothing checkpointed it"
    );
}

/// Writes that never pause (a burst of short runs, a bulk import) keep the WAL bounded too. A
/// checkpoint beside the writer copies only the frames written before it began, and SQLite
/// starts the WAL over only after a checkpoint that copied every frame, so with background
/// checkpoints alone this WAL grew to ~29 000 pages (every page written; B3's 20 000 job
/// inserts: 450 MB). At 8 000 pages the writer checkpoints between its own transactions.
#[test]
fn the_wal_stays_bounded_under_writes_that_never_pause() {
    let pages = wal_pages_after_inserts("checkpoint-busy", Duration::ZERO);
    // The limit (8 000) and what a commit or two add while the thread's checkpoint holds the
    // writer off (each commit here adds ~3 pages).
    assert!(
        pages < 10_000,
        "the WAL grew to ~{pages} pages under writes that never paused"
    );
}

#[test]
fn migrations_applied_twice_are_a_noop() {
    let dir = TempDir::new("migrate");
    let path = dir.file("takt.db");
    let first = migrate(&path, &SqliteOptions::default()).expect("migrate a new file");
    assert_eq!(
        first
            .iter()
            .map(|m| (m.version, m.name))
            .collect::<Vec<_>>(),
        [
            (1, "init"),
            (2, "claim_indexes"),
            (3, "node_identity"),
            (4, "isolation_plugin_builds"),
            (5, "attempts_node_sessions"),
            (6, "pauses"),
            (7, "cancel_requests"),
            (8, "api_access"),
            (9, "alerts"),
            (10, "run_triggers"),
            (11, "continuations"),
            (12, "job_groups"),
            (13, "recurring_jobs"),
            (14, "recurring_next_due"),
            (15, "redundant_run_index"),
            (16, "partial_run_state_indexes"),
            (17, "checks_without_in_lists")
        ]
    );
    assert_eq!(
        migrate(&path, &SqliteOptions::default()).expect("migrate again"),
        [],
        "a no-op"
    );
    let store = open(&path);
    assert_eq!(store.schema_version().expect("version"), latest_version());
    assert_eq!(store.migrate().expect("migrate an open store"), []);
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM schema_migrations", [], |r| r.get(0))
        .expect("count");
    assert_eq!(rows, i64::from(latest_version()), "each recorded once");
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal mode");
    assert_eq!(mode, "wal");
}

/// Migration 0013 classifies the jobs already stored as recurring or not from their schedule
/// JSON as takt writes it (taken here from a current store, so a change to that JSON that
/// breaks the migration's rule fails this test), and every write sets the column itself.
#[test]
fn the_recurring_column_is_written_and_backfilled_from_the_schedule() {
    let dir = TempDir::new("recurring");
    let utc = Zone::utc();
    let cron = Rule::Cron(CronExpr::parse("*/5 * * * *").expect("cron"));
    let every = Rule::Interval(Interval::new(90, None).expect("interval"));
    let calendar = Rule::Calendar(
        CalendarRule::parse("weekly mon-fri every 1h between 06:00-22:30").expect("calendar"),
    );
    let once = Rule::Once("2026-06-01T10:00:00Z".parse().expect("instant"));
    let jobs = [
        ("cron", Some(Schedule::new(cron, utc.clone()))),
        ("every", Some(Schedule::new(every, utc.clone()))),
        ("calendar", Some(Schedule::new(calendar, utc.clone()))),
        (
            "once",
            Some(Schedule::new(
                once,
                Zone::get("Europe/Berlin").expect("zone"),
            )),
        ),
        ("triggered", None),
    ];
    let expected = [
        ("calendar", 1),
        ("cron", 1),
        ("every", 1),
        ("once", 0),
        ("triggered", 0),
    ];
    let fresh_path = dir.file("fresh.db");
    let fresh = open(&fresh_path);
    for (name, schedule) in &jobs {
        let mut job = JobDef::new(name, "a::b").expect("job");
        job.schedule = schedule.clone();
        block_on(fresh.job_insert(&job, Timestamp::now())).expect("insert");
    }
    let read = |path: &Path| -> Vec<(String, Option<String>, i64)> {
        let conn = rusqlite::Connection::open(path).expect("raw open");
        let mut stmt = conn
            .prepare("SELECT name, schedule_json, recurring FROM jobs ORDER BY name")
            .expect("prepare");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    let written = read(&fresh_path);
    let classes = |rows: &[(String, Option<String>, i64)]| -> Vec<(String, i64)> {
        rows.iter().map(|(n, _, r)| (n.clone(), *r)).collect()
    };
    let want: Vec<(String, i64)> = expected.iter().map(|(n, r)| (n.to_string(), *r)).collect();
    assert_eq!(classes(&written), want, "as written: {written:?}");
    // An update that changes the kind changes the column.
    let mut cron = block_on(fresh.job_get_by_name(&JobName::new("cron").expect("name")))
        .expect("read")
        .expect("job");
    cron.schedule = Some(Schedule::new(
        Rule::Once("2026-06-01T10:00:00Z".parse().expect("instant")),
        utc,
    ));
    block_on(fresh.job_update(&cron, Timestamp::now())).expect("update");
    assert_eq!(
        read(&fresh_path)[1].2,
        0,
        "a cron made one-off is no longer recurring"
    );
    drop(fresh);

    let old_path = dir.file("old.db");
    {
        let conn = rusqlite::Connection::open(&old_path).expect("raw open");
        for m in &MIGRATIONS[..12] {
            conn.execute_batch(m.sql)
                .expect("the migrations before 0013");
        }
        for (name, schedule, _) in &written {
            conn.execute(
                "INSERT INTO jobs (name, handler_type, schedule_json, updated_at) \
                 VALUES (?1, 'a::b', ?2, 0)",
                rusqlite::params![name, schedule],
            )
            .expect("a row of the old version");
        }
    }
    drop(open(&old_path));
    assert_eq!(
        classes(&read(&old_path)),
        want,
        "as the migration classified them"
    );
}

/// A database made by a takt that knew only 0001 (with a job and a run in it) is brought to
/// the latest version at open, keeping its rows.
#[test]
fn an_older_schema_is_migrated_forward_keeping_its_rows() {
    let dir = TempDir::new("older");
    let path = dir.file("takt.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("raw open");
        conn.execute_batch(MIGRATIONS[0].sql)
            .expect("0001 by hand, as a DBA would");
        conn.execute_batch(
            "INSERT INTO jobs (name, handler_type, updated_at) VALUES ('old', 'a::b', 0); \
             INSERT INTO runs (job_id, fire_time, state, created_at) VALUES (1, 0, 'pending', 0); \
             INSERT INTO runs (job_id, fire_time, state, created_at, started_at, finished_at, \
               node_id, attempt, error) VALUES (1, 60000, 'failed', 0, 60000, 61000, 'n', 2, 'x');",
        )
        .expect("rows of the old version");
    }
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let options =
        SqliteOptions::default().with_migration_observer(MigrationObserver::new(move |e| {
            seen.lock().expect("events").push(e)
        }));
    let store = SqliteStore::open(&path, &options).expect("open and migrate");
    assert_eq!(store.schema_version().expect("version"), latest_version());
    let events = events.lock().expect("events").clone();
    // Every migration after 0001, in order: its start, perhaps progress, its end.
    let mut expected = MIGRATIONS[1..].iter();
    let mut current = None;
    for e in &events {
        match e {
            MigrationEvent::Started(m) => {
                assert_eq!(Some(m), expected.next(), "{events:?}");
                current = Some(*m);
            }
            MigrationEvent::Working(m, _) => assert_eq!(Some(*m), current, "{events:?}"),
            MigrationEvent::Finished(m, _) => {
                assert_eq!(Some(*m), current.take(), "{events:?}")
            }
        }
    }
    assert!(
        expected.next().is_none() && current.is_none(),
        "the observer hears the start and the end of every later migration: {events:?}"
    );
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            MigrationEvent::Started(m) => Some(m.version),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17],
        "{events:?}"
    );
    let job = block_on(store.job_get_by_name(&JobName::new("old").expect("name")))
        .expect("read")
        .expect("the old job is still there");
    let runs = block_on(store.run_list(&RunFilter {
        job: job.id,
        ..RunFilter::default()
    }))
    .expect("runs");
    assert_eq!(runs.len(), 2, "the old runs are still there");
    let done = runs
        .iter()
        .find(|r| r.state == RunState::Failed)
        .expect("the failed run");
    let attempts = block_on(store.run_attempts(done.id.expect("id"))).expect("attempts");
    assert_eq!(
        attempts
            .iter()
            .map(|a| (
                a.attempt,
                a.node_id.0.as_str(),
                a.outcome,
                a.error.as_deref()
            ))
            .collect::<Vec<_>>(),
        [(2, "n", Some(AttemptOutcome::Failed), Some("x"))],
        "0005 recorded an old run's latest attempt from its row"
    );
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    let indexes: Vec<String> = first_column(
        &conn,
        "SELECT name FROM sqlite_master WHERE type = 'index' \
         AND name IN ('runs_job_state', 'runs_job_state_recent')",
    );
    assert_eq!(
        indexes,
        ["runs_job_state_recent"],
        "0002's (job_id, state) index is gone (0015): 0008's longer one serves its lookups"
    );
    // 0016: the pending, running and finished indexes are partial, hold the old rows that
    // belong in them, and serve the queries that name their condition (`INDEXED BY` fails
    // the statement when an index cannot serve it).
    let ids = |sql: &str| -> Vec<i64> { first_column(&conn, sql) };
    let pending = runs.iter().find(|r| r.state == RunState::Pending);
    let pending = pending.and_then(|r| r.id).expect("the pending run").0;
    let failed = done.id.expect("id").0;
    assert_eq!(
        ids("SELECT id FROM runs INDEXED BY runs_pending WHERE state = 'pending'"),
        [pending]
    );
    assert_eq!(
        ids("SELECT id FROM runs INDEXED BY runs_finished \
             WHERE finished_at IS NOT NULL AND finished_at < 62000"),
        [failed]
    );
    assert_eq!(
        ids("SELECT id FROM runs INDEXED BY runs_node WHERE state = 'running' AND node_id = 'n'"),
        Vec::<i64>::new(),
        "an ended run is not in the running runs' index"
    );
    let partial: Vec<String> = first_column(
        &conn,
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' \
         AND sql LIKE '% WHERE %' ORDER BY name",
    );
    assert_eq!(
        partial,
        [
            "runs_finished",
            "runs_lease",
            "runs_node",
            "runs_parent_job",
            "runs_pending"
        ]
    );
    assert!(
        ids("SELECT 1 FROM sqlite_master WHERE name = 'runs_retry_due'").is_empty(),
        "0016 replaced runs_retry_due with runs_pending"
    );
    // 0017: the state, outcome and level CHECKs build no temporary B-tree any more, still
    // refuse what they refused, and the schema edit left a sound file.
    for sql in CHECKED_WRITES {
        assert_eq!(ephemeral_tables(&conn, sql), 0, "{sql}");
    }
    assert_checks_refuse_unknown_values(&conn);
    assert_sound(&conn);
}

/// A write of each table whose CHECK 0017 rewrote, as the store's statements make them.
const CHECKED_WRITES: [&str; 4] = [
    "INSERT INTO runs (job_id, fire_time, state, created_at) VALUES (1, 9, 'pending', 0)",
    "UPDATE runs SET state = 'succeeded' WHERE id = 1 AND state = 'running'",
    "UPDATE run_attempts SET outcome = 'failed' WHERE run_id = 1 AND attempt = 1",
    "INSERT INTO run_logs (run_id, at, level, message) VALUES (1, 0, 'info', 'm')",
];

/// How many temporary tables `sql` opens at each execution (SQLite's `OpenEphemeral`).
fn ephemeral_tables(conn: &rusqlite::Connection, sql: &str) -> usize {
    // EXPLAIN's second column is the opcode.
    let ops: Vec<String> = column(conn, &format!("EXPLAIN {sql}"), 1);
    ops.iter().filter(|op| *op == "OpenEphemeral").count()
}

/// The rewritten CHECKs still refuse a state, an outcome and a level outside their lists.
fn assert_checks_refuse_unknown_values(conn: &rusqlite::Connection) {
    for (sql, column) in [
        (
            "INSERT INTO runs (job_id, fire_time, state, created_at) VALUES (1, 7, 'done', 0)",
            "state",
        ),
        (
            "INSERT INTO run_attempts (run_id, attempt, node_id, started_at, outcome) \
             SELECT id, 99, 'n', 0, 'lost' FROM runs LIMIT 1",
            "outcome",
        ),
        (
            "INSERT INTO run_logs (run_id, at, level, message) \
             SELECT id, 0, 'fatal', 'm' FROM runs LIMIT 1",
            "level",
        ),
    ] {
        let e = conn.execute(sql, []).expect_err(sql).to_string();
        assert!(
            e.contains("CHECK constraint failed") && e.contains(column),
            "{sql}: {e}"
        );
    }
}

#[test]
fn a_hand_written_check_text_is_left_as_it_is_and_still_migrates() {
    let dir = TempDir::new("handcheck");
    let path = dir.file("takt.db");
    {
        // The same CHECK on one line: 0017's replace() does not find 0001's text.
        let init = MIGRATIONS[0].sql.replace(
            "CHECK (state IN\n                          (",
            "CHECK (state IN (",
        );
        assert_ne!(init, MIGRATIONS[0].sql, "the test's edit applies");
        let conn = rusqlite::Connection::open(&path).expect("raw open");
        conn.execute_batch(&init).expect("0001 as a DBA retyped it");
        conn.execute_batch(
            "INSERT INTO jobs (name, handler_type, updated_at) VALUES ('old', 'a::b', 0); \
             INSERT INTO runs (job_id, fire_time, state, created_at) VALUES (1, 0, 'pending', 0);",
        )
        .expect("a run for the CHECKs to be tried on");
    }
    let store = open(&path);
    assert_eq!(store.schema_version().expect("version"), latest_version());
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    assert!(
        ephemeral_tables(&conn, CHECKED_WRITES[0]) > 0,
        "the retyped runs CHECK keeps its IN list"
    );
    assert_eq!(
        ephemeral_tables(&conn, CHECKED_WRITES[2]),
        0,
        "the tables 0001 and 0005 wrote are still rewritten"
    );
    assert_checks_refuse_unknown_values(&conn);
    assert_sound(&conn);
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = TempDir::new("newer");
    let path = dir.file("takt.db");
    drop(open(&path));
    {
        let conn = rusqlite::Connection::open(&path).expect("raw open");
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)",
            [],
        )
        .expect("pretend a newer takt migrated");
    }
    let before = std::fs::read(&path).expect("read");
    let e = open_err(&path);
    assert_eq!(e.kind(), StoreErrorKind::Other);
    let msg = e.to_string();
    for part in [
        path.display().to_string().as_str(),
        "schema version 99",
        &format!("versions 1 to {}", latest_version()),
        "newer takt",
        "restore a backup",
    ] {
        assert!(msg.contains(part), "{part:?} missing in: {msg}");
    }
    assert_eq!(
        migrate(&path, &SqliteOptions::default())
            .unwrap_err()
            .to_string(),
        msg
    );
    assert_eq!(std::fs::read(&path).expect("read"), before, "untouched");
}

#[test]
fn a_corrupt_file_is_refused_and_left_untouched() {
    let dir = TempDir::new("corrupt");
    let path = dir.file("takt.db");
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &garbage).expect("write garbage");
    let e = open_err(&path);
    assert_eq!(e.kind(), StoreErrorKind::Other);
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "the file {} is not a takt SQLite database or is corrupt",
            path.display()
        )),
        "{msg}"
    );
    assert!(msg.contains("restore it from a backup"), "{msg}");
    assert_eq!(
        migrate(&path, &SqliteOptions::default())
            .unwrap_err()
            .kind(),
        StoreErrorKind::Other
    );
    assert_eq!(std::fs::read(&path).expect("read"), garbage, "untouched");
    let names: Vec<_> = std::fs::read_dir(&dir.0)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["takt.db"], "no -wal or -shm files were created");
}

#[test]
fn a_read_only_file_is_refused() {
    let dir = TempDir::new("readonly");
    let path = dir.file("takt.db");
    drop(open(&path));
    let mut perms = std::fs::metadata(&path).expect("meta").permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&path, perms.clone()).expect("chmod");
    let e = open_err(&path);
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).expect("chmod back");
    assert_eq!(e.kind(), StoreErrorKind::Other);
    assert_eq!(
        e.to_string(),
        format!(
            "the database file {} is read-only; give the host's account write access to it and \
             to its directory (SQLite writes -wal and -shm files beside it)",
            path.display()
        )
    );
}

#[test]
fn a_missing_directory_says_so() {
    let dir = TempDir::new("missing");
    let path = dir.file("no/such/dir/takt.db");
    let e = open_err(&path);
    assert_eq!(e.kind(), StoreErrorKind::Other);
    assert!(
        e.to_string()
            .starts_with(&format!("cannot open the database file {}", path.display())),
        "{e}"
    );
}

#[test]
fn a_held_write_lock_is_transient() {
    let dir = TempDir::new("busy");
    let path = dir.file("takt.db");
    let store = open_waiting(&path, Duration::from_millis(50));
    let other = rusqlite::Connection::open(&path).expect("raw open");
    other.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let job = JobDef::new("blocked", "t::noop").expect("job");
    let e = block_on(store.job_insert(&job, ts("2026-06-01T10:00:00Z"))).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transient, "{e}");
    assert!(e.is_retryable());
    assert!(e.to_string().contains("is busy"), "{e}");
    other.execute_batch("ROLLBACK").expect("unlock");
    block_on(store.job_insert(&job, ts("2026-06-01T10:00:00Z"))).expect("after the lock");
}

/// The names of the store's jobs, in name order.
fn job_names(store: &SqliteStore) -> Vec<String> {
    block_on(store.job_list())
        .expect("list")
        .into_iter()
        .map(|j| j.name.to_string())
        .collect()
}

/// Reads go through a connection of their own: a read does not wait while the store's
/// writing connection is busy (here a job insert, waiting for another process's write lock;
/// in a host a claim or a batch of finishes), and it sees what was committed, never what
/// another connection has written but not committed.
#[test]
fn reads_do_not_wait_for_the_writing_connection() {
    let dir = TempDir::new("reader");
    let path = dir.file("takt.db");
    let store = open_waiting(&path, Duration::from_secs(5));
    let now = ts("2026-06-01T10:00:00Z");
    let first = block_on(store.job_insert(&JobDef::new("first", "t::noop").expect("job"), now))
        .expect("insert");
    let other = rusqlite::Connection::open(&path).expect("raw open");
    other
        .execute_batch("BEGIN IMMEDIATE; DELETE FROM jobs")
        .expect("hold the write lock with a change not committed");
    let inserted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, inserted) = (store.clone(), inserted.clone());
        std::thread::spawn(move || {
            let job = JobDef::new("second", "t::noop").expect("job");
            let r = block_on(store.job_insert(&job, now));
            inserted.store(true, Ordering::SeqCst);
            r
        })
    };
    // The insert checks out the writing connection and waits in SQLite's busy handler, up to
    // the busy timeout, for the lock held above.
    std::thread::sleep(Duration::from_millis(300));
    let read = block_on(store.job_get(first.id.expect("an id"))).expect("read");
    let names = job_names(&store);
    assert!(
        !inserted.load(Ordering::SeqCst),
        "the reads waited for the writing connection (the insert ended first)"
    );
    assert_eq!(read.map(|j| j.name.to_string()), Some("first".to_string()));
    assert_eq!(names, ["first"], "the uncommitted delete is not seen");
    other.execute_batch("ROLLBACK").expect("unlock");
    writer
        .join()
        .expect("writer")
        .expect("the insert after the lock");
    let names = job_names(&store);
    assert_eq!(
        names,
        ["first", "second"],
        "a committed write is read at once"
    );
}

/// A closed store, its reading connection used, leaves a database file that is whole on its
/// own (the last connection to close checkpointed the WAL into it and removed it): a copy of
/// the file alone is a backup.
#[test]
fn a_closed_store_leaves_no_wal_beside_its_file() {
    let dir = TempDir::new("closed");
    let path = dir.file("takt.db");
    let store = open(&path);
    let now = ts("2026-06-01T10:00:00Z");
    block_on(store.job_insert(&JobDef::new("kept", "t::noop").expect("job"), now)).expect("insert");
    assert_eq!(block_on(store.job_list()).expect("a read").len(), 1);
    assert!(dir.file("takt.db-wal").exists(), "a WAL while open");
    drop(store);
    assert!(
        !dir.file("takt.db-wal").exists(),
        "the WAL was left beside the closed database"
    );
    assert_eq!(job_names(&open(&path)), ["kept"]);
}

/// One job per schedule kind, with every field of the model set.
fn jobs_of_every_kind() -> Vec<JobDef> {
    let berlin = Zone::get("Europe/Berlin").expect("zone");
    let cron_and = CronExpr::parse_with(
        "0 9 1-7 * MON",
        CronOptions {
            day_match: DayMatch::And,
        },
    )
    .expect("cron");
    let schedules = [
        (
            "cron",
            Some(
                Schedule::new(
                    Rule::Cron(cron_and),
                    Zone::get("America/New_York").expect("z"),
                )
                .with_dst(DstPolicy {
                    gap: GapPolicy::Skip,
                    fold: FoldPolicy::Both,
                }),
            ),
        ),
        (
            "calendar",
            Some(Schedule::new(
                Rule::Calendar(
                    CalendarRule::parse("weekly mon-fri every 1h between 06:00-22:30")
                        .expect("calendar"),
                ),
                berlin.clone(),
            )),
        ),
        (
            "every",
            Some(
                Schedule::new(
                    Rule::Interval(
                        Interval::new(5400, Some(ts("2026-01-01T00:00:15Z"))).expect("interval"),
                    ),
                    Zone::utc(),
                )
                .with_dst(DstPolicy {
                    gap: GapPolicy::Shift,
                    fold: FoldPolicy::Once,
                }),
            ),
        ),
        (
            "once",
            Some(Schedule::new(
                Rule::Once(ts("2026-11-30T22:00:00Z")),
                Zone::get("Asia/Shanghai").expect("zone"),
            )),
        ),
        ("manual", None),
    ];
    // The jobs the others depend on come first: a dependency must exist.
    let upstream = ["collect", "cleanup \"old\" files"]
        .map(|n| JobDef::new(n, "examples::hello").expect("job"));
    let kinds = schedules
        .into_iter()
        .enumerate()
        .map(|(i, (name, schedule))| {
            let mut j = JobDef::new(&format!("job {name}"), "examples::hello").expect("job");
            j.schedule = schedule;
            j.group = Some("nightly".into());
            j.params_json = r#"{"path": "/tmp", "n": 3}"#.into();
            j.enabled = i % 2 == 0;
            j.effective_from = Some(ts("2026-01-01T00:00:00Z"));
            j.expires_at = Some(ts("2099-01-01T00:00:00.250Z"));
            j.timeout = Some(Duration::from_secs(900));
            j.retry = RetryPolicy {
                max_retries: 3,
                backoff: if i % 2 == 0 {
                    "exp:1s..5m x2 jitter 0.2"
                        .parse::<Backoff>()
                        .expect("backoff")
                } else {
                    Backoff::seed_default()
                },
                retry_timeouts: i == 1,
            };
            j.misfire = "fire-all:10@5m".parse().expect("misfire");
            j.overlap = "queue-one".parse().expect("overlap");
            j.priority = Priority::new(10 + i as u16).expect("priority");
            j.dependencies = vec![
                JobName::new("collect").expect("name"),
                JobName::new("cleanup \"old\" files").expect("name"),
            ];
            // Both stored forms of the dependencies column: a list, and a list with a wait.
            j.dependency_wait = (i % 2 == 1).then(|| Duration::from_secs(1800));
            j.node_tag = Some("strong-box".into());
            j.application = Some("mes".into());
            j.owner = Some("Zhang San".into());
            j.description = Some("archive line data — ünïcode, 'quotes'".into());
            j.next_fire = j
                .schedule
                .as_ref()
                .and_then(|s| s.next_after(ts("2026-06-01T10:00:00Z")))
                .map(|o| o.at);
            j.validate().expect("valid");
            j
        });
    upstream.into_iter().chain(kinds).collect()
}

#[test]
fn every_schedule_kind_round_trips_exactly_and_survives_reopening() {
    let dir = TempDir::new("kinds");
    let path = dir.file("takt.db");
    let now = ts("2026-06-01T10:00:00Z");
    let mut stored = Vec::new();
    {
        let store = open(&path);
        for job in jobs_of_every_kind() {
            let got = block_on(store.job_insert(&job, now)).expect("insert");
            let mut want = job.clone();
            want.id = got.id;
            want.version = 1;
            want.updated_at = Some(now);
            assert_eq!(got, want, "{} round-trips through insert", job.name);
            assert_eq!(
                block_on(store.job_get_by_name(&job.name)).expect("get"),
                Some(got.clone())
            );
            stored.push(got);
        }
        assert_eq!(block_on(store.job_list()).expect("list"), stored);
    }
    let store = open(&path);
    assert_eq!(
        block_on(store.job_list()).expect("list after reopening"),
        stored,
        "every field survives reopening the file"
    );
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    let json: String = conn
        .query_row(
            "SELECT schedule_json FROM jobs WHERE name = 'job cron'",
            [],
            |r| r.get(0),
        )
        .expect("row");
    assert_eq!(
        json,
        r#"{"cron":"0 9 1-7 * MON","tz":"America/New_York","day_match":"and","dst_gap":"skip","dst_fold":"both"}"#
    );
    let manual: Option<String> = conn
        .query_row(
            "SELECT schedule_json FROM jobs WHERE name = 'job manual'",
            [],
            |r| r.get(0),
        )
        .expect("row");
    assert_eq!(manual, None, "manual only: no schedule");
}

/// Claims what is due at `now` for "node-a" and gives back the one run claimed.
fn claim_first(store: &SqliteStore, now: Timestamp) -> takt_core::store::ClaimedRun {
    let mut claimed = block_on(store.run_claim_due(&ClaimParams {
        claimed_at: None,
        node: NodeId("node-a".into()),
        instance: takt_core::node::InstanceId("test-life".into()),
        tags: Vec::new(),
        now,
        limit: 10,
        recurring_only: 0,
        lease: Duration::from_secs(60),
    }))
    .expect("claim");
    assert_eq!(claimed.len(), 1, "one run due");
    claimed.remove(0)
}

/// A finish reads only its job's continuation column (not the whole job): a bad value there
/// is a precise error naming the job and the column, and the run stays running, its end not
/// recorded, so nothing is lost and the finish can be tried again once the row is mended.
#[test]
fn a_corrupt_continuation_column_fails_the_finish_precisely_and_loses_nothing() {
    let dir = TempDir::new("bad-continuations");
    let path = dir.file("takt.db");
    let t0 = ts("2026-06-01T10:00:00Z");
    let at = |s: u64| t0.checked_add(Duration::from_secs(s)).expect("instant");
    let store = open(&path);
    let mut job = JobDef::new("press", "examples::press").expect("job");
    job.schedule = Some(Schedule::new(Rule::Once(t0), Zone::utc()));
    job.next_fire = Some(t0);
    let job = block_on(store.job_insert(&job, t0)).expect("insert");
    let run = claim_first(&store, at(1)).run;
    let id = run.id.expect("id");
    rusqlite::Connection::open(&path)
        .expect("raw open")
        .execute(
            "UPDATE jobs SET on_success = 'not json' WHERE id = ?1",
            [job.id.expect("id").0],
        )
        .expect("spoil the column");
    let mut done = run.clone();
    done.apply(
        RunEvent::Succeeded { result_json: None },
        at(2),
        &RetryPolicy::default(),
    )
    .expect("legal");
    let finish = RunFinish::from_run(&done, at(2));
    let err = block_on(store.run_set_state_if_running(id, 1, &finish)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("on_success") && text.contains(&format!("job {}", job.id.expect("id").0)),
        "{text}"
    );
    let stored = block_on(store.run_get(id)).expect("get").expect("run");
    assert_eq!(stored.state, RunState::Running, "the end was not recorded");

    rusqlite::Connection::open(&path)
        .expect("raw open")
        .execute("UPDATE jobs SET on_success = '[]'", [])
        .expect("mend the column");
    let ended = block_on(store.run_set_state_if_running(id, 1, &finish)).expect("finish");
    assert_eq!(ended.state, RunState::Succeeded);
}

#[test]
fn runs_and_logs_survive_reopening() {
    let dir = TempDir::new("reopen");
    let path = dir.file("takt.db");
    let t0 = ts("2026-06-01T10:00:00Z");
    let at = |s: i64| {
        t0.checked_add(Duration::from_secs(s as u64))
            .expect("instant")
    };
    let (run, job) = {
        let store = open(&path);
        let mut job = JobDef::new("archive", "examples::archive").expect("job");
        job.schedule = Some(Schedule::new(
            Rule::Interval(Interval::new(60, Some(t0)).expect("interval")),
            Zone::utc(),
        ));
        job.next_fire = Some(t0);
        block_on(store.job_insert(&job, t0)).expect("insert");
        let claimed = claim_first(&store, at(1));
        let run = claimed.run.clone();
        let id = run.id.expect("id");
        let lines: Vec<LogLine> = (0..3)
            .map(|i| LogLine {
                at: at(2 + i),
                level: LogLevel::ALL[i as usize],
                message: format!("step {i}"),
            })
            .collect();
        block_on(store.log_append(id, &lines)).expect("log");
        let mut done = run.clone();
        done.apply(
            RunEvent::Succeeded {
                result_json: Some(r#"{"rows":4}"#.into()),
            },
            at(5),
            &RetryPolicy::default(),
        )
        .expect("legal");
        let ended =
            block_on(store.run_set_state_if_running(id, 1, &RunFinish::from_run(&done, at(5))))
                .expect("finish");
        (ended, claimed.job)
    };
    let store = open(&path);
    let id = run.id.expect("id");
    assert_eq!(block_on(store.run_get(id)).expect("get"), Some(run.clone()));
    assert_eq!(run.state, RunState::Succeeded);
    assert_eq!(run.elapsed, Some(Duration::from_secs(4)));
    assert_eq!(
        block_on(store.job_get(job.id.expect("id"))).expect("get"),
        Some(job.clone())
    );
    assert_eq!(job.next_fire, Some(at(60)), "next fire advanced and kept");
    let log = block_on(store.log_list(id, None, 10)).expect("log");
    assert_eq!(
        log.iter()
            .map(|(_, l)| l.message.as_str())
            .collect::<Vec<_>>(),
        ["step 0", "step 1", "step 2"]
    );
    assert_eq!(log[1].1.level, LogLevel::Debug);
    // Deleting the job removes its runs and their logs (foreign keys are on).
    block_on(store.job_delete(job.id.expect("id"))).expect("delete");
    assert_eq!(block_on(store.run_get(id)).expect("get"), None);
    assert!(
        block_on(store.log_list(id, None, 10))
            .expect("log")
            .is_empty()
    );
}

/// The same script on the reference memory store and on SQLite gives the same claims, runs
/// and jobs: small claim limits with taken keys (a claim must read past them), retries due
/// alongside fires, and equal priorities.
#[test]
fn claims_match_the_memory_store() {
    use takt_core::run::{Run, SkipReason};
    use takt_core::store::RunFilter;
    use takt_core::store::memory::MemoryStore;

    async fn script<S: Store>(store: &S) -> (Vec<(String, Timestamp, u32)>, Vec<Run>, Vec<JobDef>) {
        let t0 = ts("2026-06-01T10:00:00Z");
        let at = |s: u64| t0.checked_add(Duration::from_secs(s)).expect("instant");
        let mut ids = Vec::new();
        for (name, prio, period) in [
            ("a", 500, 60),
            ("b", 500, 30),
            ("c", 10, 90),
            ("d", 500, 60),
        ] {
            let mut j = JobDef::new(name, "t::noop").expect("job");
            j.priority = Priority::new(prio).expect("priority");
            j.retry = RetryPolicy::new(2, Backoff::seed_default());
            j.schedule = Some(Schedule::new(
                Rule::Interval(Interval::new(period, Some(t0)).expect("interval")),
                Zone::utc(),
            ));
            j.next_fire = Some(t0);
            ids.push(
                store
                    .job_insert(&j, t0)
                    .await
                    .expect("insert")
                    .id
                    .expect("id"),
            );
        }
        // Fires already recorded: the claim must skip them and read further.
        for (job, secs) in [(0, 0), (1, 0), (1, 30), (2, 0)] {
            let r = Run::skipped(ids[job], at(secs), SkipReason::Overlap, None, t0);
            store.run_insert_skipped(&r).await.expect("skip");
        }
        let mut claims = Vec::new();
        for (step, now) in [5u64, 5, 40, 40, 70, 70, 70, 100, 130, 130, 200]
            .into_iter()
            .enumerate()
        {
            let got = store
                .run_claim_due(&ClaimParams {
                    claimed_at: None,
                    node: NodeId(format!("n{}", step % 2)),
                    instance: takt_core::node::InstanceId("test-life".into()),
                    tags: Vec::new(),
                    now: at(now),
                    limit: 1 + step % 2,
                    recurring_only: 0,
                    lease: Duration::from_secs(60),
                })
                .await
                .expect("claim");
            for c in got {
                claims.push((c.job.name.to_string(), c.run.fire_time, c.run.attempt));
                if c.run.attempt == 1 && c.job.name.as_str() != "c" {
                    let mut after = c.run.clone();
                    after
                        .apply(
                            RunEvent::Failed {
                                error: "boom".into(),
                                retryable: true,
                            },
                            at(now + 1),
                            &c.job.retry,
                        )
                        .expect("legal");
                    store
                        .run_set_state_if_running(
                            c.run.id.expect("id"),
                            1,
                            &RunFinish::from_run(&after, at(now + 1)),
                        )
                        .await
                        .expect("finish");
                }
            }
        }
        let runs = store
            .run_list(&RunFilter {
                limit: 1000,
                ..RunFilter::default()
            })
            .await
            .expect("runs");
        (claims, runs, store.job_list().await.expect("jobs"))
    }

    let dir = TempDir::new("differential");
    let sqlite = open(&dir.file("takt.db"));
    let want = block_on(script(&MemoryStore::new()));
    let got = block_on(script(&sqlite));
    assert!(want.0.len() >= 10, "the script claims enough: {:?}", want.0);
    assert_eq!(got.0, want.0, "claims in the same order");
    assert_eq!(got.1, want.1, "the same runs");
    assert_eq!(got.2, want.2, "the same jobs");
}

/// The claim's due-job query reads jobs in claim order from an index: no sort of every due
/// job per claim (B7 measured ~2 ms per claim with 20 000 due before `jobs_claim`).
#[test]
fn the_due_job_query_is_served_in_order_by_an_index() {
    let dir = TempDir::new("plan");
    let path = dir.file("takt.db");
    drop(open(&path));
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    let mut stmt = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT priority, next_fire, id FROM jobs \
             WHERE enabled = 1 AND next_fire IS NOT NULL AND next_fire <= ?1 \
             ORDER BY priority, next_fire, id LIMIT ?2",
        )
        .expect("plan");
    let plan: Vec<String> = stmt
        .query_map(rusqlite::params![0, 10], |r| r.get::<_, String>(3))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("plan rows");
    let plan = plan.join("\n");
    assert!(plan.contains("jobs_claim"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "no sort: {plan}");
}

/// A job page (`Store::job_page`) reads the name's unique index in order from its cursor and
/// stops at its limit, whatever filters it has: never a sort of every job. The statements are
/// the shapes `SqliteConn::job_page` writes; without the `+` before `enabled`, SQLite answers
/// `enabled = ?` from `jobs_due` and sorts every enabled job.
#[test]
fn job_pages_are_served_in_name_order_by_the_name_index() {
    let dir = TempDir::new("page-plan");
    let path = dir.file("takt.db");
    drop(open(&path));
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    let plan = |cond: &str| -> String {
        let sql = format!("EXPLAIN QUERY PLAN SELECT id FROM jobs {cond} ORDER BY name LIMIT 101");
        let mut stmt = conn.prepare(&sql).expect("plan");
        let n = stmt.parameter_count();
        let rows: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(std::iter::repeat_n(1, n)), |r| {
                r.get::<_, String>(3)
            })
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("plan rows");
        rows.join("\n")
    };
    for cond in [
        "",
        "WHERE name > ?1",
        "WHERE name > ?1 AND +enabled = ?2",
        "WHERE +enabled = ?1 AND +group_name = ?2",
        "WHERE name > ?1 AND +enabled = ?2 AND +group_name = ?3 AND +node_tag = ?4 \
         AND substr(handler_type, 1, length(?5)) = ?6 AND instr(lower(name), lower(?7)) > 0",
    ] {
        let p = plan(cond);
        assert!(
            p.contains("sqlite_autoindex_jobs_1"),
            "{cond}: the name index: {p}"
        );
        assert!(!p.contains("TEMP B-TREE"), "{cond}: no sort: {p}");
    }
    let p = plan("WHERE enabled = ?1");
    assert!(
        p.contains("TEMP B-TREE"),
        "the `+` is still needed (else drop it from job_page): {p}"
    );
}

/// The history queries (`takt runs --job`, `why`, `audit`) read along their keys: one job's
/// runs by (job_id, fire_time), a run's attempts by (run_id, attempt), node lives by start —
/// never a scan of every run.
#[test]
fn history_queries_are_served_by_their_keys() {
    let dir = TempDir::new("history-plan");
    let path = dir.file("takt.db");
    drop(open(&path));
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    let plan = |sql: &str| -> String {
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("plan");
        let n = stmt.parameter_count();
        let rows: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(std::iter::repeat_n(1, n)), |r| {
                r.get::<_, String>(3)
            })
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("plan rows");
        rows.join("\n")
    };
    for sql in [
        "SELECT id FROM runs WHERE job_id = ?1 AND (?2 IS NULL OR state = ?2) \
         ORDER BY fire_time DESC, id DESC LIMIT ?3",
        "SELECT id FROM runs WHERE job_id = ?1 AND fire_time >= ?2 AND fire_time < ?3 \
         ORDER BY fire_time, id",
        "SELECT a.run_id FROM runs r JOIN run_attempts a ON a.run_id = r.id \
         WHERE r.job_id = ?1 AND r.fire_time >= ?2 AND r.fire_time < ?3 \
         ORDER BY r.fire_time, r.id, a.attempt",
    ] {
        let p = plan(sql);
        assert!(p.contains("(job_id=?"), "along (job_id, fire_time): {p}");
        assert!(!p.contains("SCAN"), "no scan: {p}");
        assert!(!p.contains("TEMP B-TREE"), "no sort: {p}");
    }
    let p = plan(
        "SELECT a.run_id FROM run_attempts a JOIN runs r ON r.id = a.run_id \
         WHERE a.run_id = ?1 ORDER BY a.attempt",
    );
    assert!(p.contains("PRIMARY KEY (run_id=?)"), "attempts by run: {p}");
    let p = plan(
        "SELECT instance FROM node_sessions WHERE started_at < ?2 \
         AND COALESCE(stopped_at, heartbeat_at) >= ?1 ORDER BY started_at, instance",
    );
    assert!(p.contains("node_sessions_started"), "lives by start: {p}");
}

/// Finishes queued from many threads at once go through the store's finishing thread in
/// shared transactions; each is still its own compare-and-set with its own answer: every
/// run ends once, a second finish of the same attempt and a finish of the wrong attempt are
/// Conflicts, and nothing else is touched.
#[test]
fn concurrent_finishes_are_each_a_compare_and_set() {
    let dir = TempDir::new("finishes");
    let path = dir.file("takt.db");
    let store = open(&path);
    let t0 = ts("2026-06-01T10:00:00Z");
    let n = 40;
    for i in 0..n {
        let mut job = JobDef::new(&format!("burst-{i}"), "t::noop").expect("job");
        job.next_fire = Some(t0);
        block_on(store.job_insert(&job, t0)).expect("insert");
    }
    let claimed = block_on(store.run_claim_due(&ClaimParams {
        claimed_at: None,
        node: NodeId("node-a".into()),
        instance: takt_core::node::InstanceId("test-life".into()),
        tags: Vec::new(),
        now: t0,
        limit: n,
        recurring_only: 0,
        lease: Duration::from_secs(60),
    }))
    .expect("claim");
    assert_eq!(claimed.len(), n);
    let end = t0.checked_add(Duration::from_secs(1)).expect("instant");
    // Each run is finished twice with its attempt, and once with a wrong one, all at once.
    // On a tokio runtime, so that the finishes go through the finishing thread's batches.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let answers: Vec<(usize, u32, Result<RunState, StoreErrorKind>)> = rt.block_on(async {
        let handles: Vec<_> = claimed
            .iter()
            .enumerate()
            .flat_map(|(i, c)| [(i, c, 1), (i, c, 1), (i, c, 2)])
            .map(|(i, c, attempt)| {
                let store = store.clone();
                let c = c.clone();
                tokio::spawn(async move {
                    let mut done = c.run.clone();
                    done.apply(
                        RunEvent::Succeeded { result_json: None },
                        end,
                        &RetryPolicy::default(),
                    )
                    .expect("legal");
                    let id = c.run.id.expect("id");
                    let answer = store
                        .run_set_state_if_running(id, attempt, &RunFinish::from_run(&done, end))
                        .await;
                    (i, attempt, answer.map(|r| r.state).map_err(|e| e.kind()))
                })
            })
            .collect();
        let mut answers = Vec::new();
        for h in handles {
            answers.push(h.await.expect("no panic"));
        }
        answers
    });
    for (i, c) in claimed.iter().enumerate() {
        let mine: Vec<_> = answers.iter().filter(|a| a.0 == i).collect();
        let ok = mine.iter().filter(|a| a.2.is_ok()).count();
        assert_eq!(ok, 1, "run {i} ended exactly once: {mine:?}");
        assert!(
            mine.iter()
                .all(|a| a.2 == Ok(RunState::Succeeded) || a.2 == Err(StoreErrorKind::Conflict)),
            "{mine:?}"
        );
        assert!(mine.iter().any(|a| a.1 == 2 && a.2.is_err()), "{mine:?}");
        let id = c.run.id.expect("id");
        let stored = block_on(store.run_get(id)).expect("get").expect("run");
        assert_eq!(stored.state, RunState::Succeeded);
        assert_eq!(stored.attempt, 1);
    }
}

#[test]
fn a_schema_edit_sqlite_cannot_parse_is_rolled_back() {
    // 0017 edits table texts under `writable_schema`; its safety is that a text SQLite cannot
    // parse fails inside the migration's transaction. Prove it on the SQLite takt is built
    // with: 0017 with a parenthesis dropped, applied as the migrator applies a file.
    let dir = TempDir::new("badedit");
    let path = dir.file("takt.db");
    {
        let mut conn = rusqlite::Connection::open(&path).expect("raw open");
        for m in &MIGRATIONS[..16] {
            conn.execute_batch(m.sql).expect("0001 to 0016");
        }
        let broken = MIGRATIONS[16]
            .sql
            .replace("OR state = ''skipped'')'", "OR state = ''skipped'''");
        assert_ne!(broken, MIGRATIONS[16].sql, "the test's edit applies");
        let tx = conn.transaction().expect("begin");
        let e = tx
            .execute_batch(&broken)
            .expect_err("an unparsable schema fails");
        assert!(e.to_string().contains("malformed database schema"), "{e}");
        drop(tx); // rolls back
    }
    let store = open(&path);
    assert_eq!(
        store.schema_version().expect("version"),
        latest_version(),
        "the file is sound and the real 0017 applies"
    );
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    assert_sound(&conn);
    assert_eq!(ephemeral_tables(&conn, CHECKED_WRITES[0]), 0);
}
