//! The SQL Server store against the core's conformance suite, plus what only a server store
//! has: claimers on separate pools racing for one set of fires, claims through connections
//! reset every few ms and COMMIT answers lost after the server applied them (the test proxy
//! of `common/proxy.rs`), migrations applied by nodes starting together (and twice), a newer
//! schema refused, bad connection strings, unreachable servers and refused logins reported
//! precisely.
//!
//! Needs `TAKT_TEST_MSSQL_URL`, an ADO.NET connection string to a login that may create
//! databases (`.ci/run` starts the iridium emulator and sets it); without it every test here
//! prints SKIPPED and passes, unless `TAKT_TEST_REQUIRE` names `mssql`. Each check works in a
//! database of its own (`takt_t_<pid>_<n>`), dropped afterwards.
//!
//! On the emulator the checks that need a real server's locking are skipped *loudly*: the
//! emulator enforces no composite unique index and its READPAST skips no locked row, so
//! "exactly once under concurrent claimers" cannot be shown there, nor concurrent finishes
//! (a committed finish was seen lost beside concurrent ones under load); the store declares
//! `concurrent_claims: false` for that peer. Pointed at a real SQL Server they run.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::mssql::{Client, admin, exec as run_sql, rows};
use takt_core::Timestamp;
use takt_core::job::JobId;
use takt_core::node::{InstanceId, NodeInfo, Registered, Registration};
use takt_core::run::NodeId;
use takt_core::store::conformance::{self, seed_every_minute_jobs};
use takt_core::store::{ClaimParams, Store, StoreError, StoreErrorKind};
use takt_host::store::conformance::{MigrationTarget, run_migration_checks};
use takt_host::store::mssql::parse_connection_string;
use takt_host::store::{AnyStore, Database, MssqlOptions, MssqlStore};
use takt_host::store::{
    AppliedMigration, MSSQL_MIGRATIONS, Migration, MigrationObserver, mssql_latest_version,
};

/// The check skipped on the emulator, and why (see the module docs).
const NEEDS_A_REAL_SERVER: &str = "concurrent_claimers_never_share_a_fire";
/// Two opens of one alert episode at once: the emulator has no composite primary key and no
/// range locks to decide between them (a real server's UPDLOCK, HOLDLOCK and the primary key
/// do), so the check runs on a real server only.
const ALSO_NEEDS_A_REAL_SERVER: &str = "concurrent_alert_opens_have_one_winner";
/// Finishes of several runs at once: under load the emulator was seen to answer a finish as
/// committed and then hold the run still running (one of two concurrent transactions'
/// writes lost), so the check runs on a real server only.
const REAL_SERVER_TOO: &str = "concurrent_finishes_each_get_their_own_answer";

fn url() -> Option<String> {
    common::backend_url("mssql", "TAKT_TEST_MSSQL_URL")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The tests of this file one at a time: on the emulator they share one set of tables.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether the peer is the iridium emulator.
async fn on_emulator(url: &str) -> bool {
    common::mssql::on_emulator(&mut admin(url).await).await
}

/// Fresh databases, dropped when [`Dbs::drop_all`] runs. On the emulator, which has no
/// `CREATE DATABASE` and does not separate databases, "fresh" is the one database emptied of
/// takt's tables (the tests run one at a time, [`serial`]).
struct Dbs {
    url: String,
    names: std::sync::Mutex<Vec<String>>,
}

impl Dbs {
    fn new(url: &str) -> Dbs {
        Dbs {
            url: url.to_string(),
            names: std::sync::Mutex::new(Vec::new()),
        }
    }

    async fn fresh(&self) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "takt_t_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut c = admin(&self.url).await;
        if on_emulator(&self.url).await {
            empty(&mut c).await;
            return name;
        }
        run_sql(&mut c, &format!("CREATE DATABASE {name}")).await;
        self.names.lock().expect("names").push(name.clone());
        name
    }

    /// `table` of database `db` as a statement outside it names it.
    async fn table(&self, db: &str, table: &str) -> String {
        if on_emulator(&self.url).await {
            table.to_string()
        } else {
            format!("{db}.dbo.{table}")
        }
    }

    fn options(&self, db: &str) -> MssqlOptions {
        MssqlOptions::new(&self.url).with_database(db)
    }

    async fn open(&self, db: &str) -> MssqlStore {
        MssqlStore::connect(&self.options(db))
            .await
            .expect("connect to the test database")
    }

    async fn drop_all(&self) {
        let mut c = admin(&self.url).await;
        if on_emulator(&self.url).await {
            empty(&mut c).await;
            return;
        }
        let names = self.names.lock().expect("names").clone();
        for n in names {
            // Other sessions (the stores' pools) are cut first.
            let sql = format!(
                "IF DB_ID(N'{n}') IS NOT NULL BEGIN \
                 ALTER DATABASE {n} SET SINGLE_USER WITH ROLLBACK IMMEDIATE; \
                 DROP DATABASE {n}; END"
            );
            run_sql(&mut c, &sql).await;
        }
    }
}

/// Drops takt's tables (the emulator's stand-in for a fresh database).
async fn empty(c: &mut Client) {
    for t in [
        "job_groups",
        "operator_actions",
        "api_tokens",
        "alert_deliveries",
        "alert_episodes",
        "run_logs",
        "run_attempts",
        "cancel_requests",
        "runs",
        "node_sessions",
        "job_holds",
        "pauses",
        "nodes",
        "jobs",
        "schema_migrations",
    ] {
        run_sql(
            c,
            &format!("IF OBJECT_ID(N'{t}', N'U') IS NOT NULL DROP TABLE {t}"),
        )
        .await;
    }
}

#[test]
fn conformance_on_mssql() {
    let Some(url) = url() else { return };
    let _serial = serial();
    // tiberius's futures are deep: the whole suite over them outgrows a test thread's 2 MiB
    // stack in a debug build, so it runs on a thread of its own with room (and on the heap).
    std::thread::Builder::new()
        .name("conformance_on_mssql".into())
        .stack_size(64 << 20)
        .spawn(move || conformance_suite(&url))
        .expect("a thread for the suite")
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
}

fn conformance_suite(url: &str) {
    let url = url.to_string();
    let rt = runtime();
    rt.block_on(Box::pin(async {
        let dbs = Dbs::new(&url);
        let emulator = std::sync::atomic::AtomicBool::new(false);
        let report = conformance::run_all(|| async {
            let db = dbs.fresh().await;
            let store = dbs.open(&db).await;
            emulator.store(store.is_emulator(), Ordering::Relaxed);
            store
        })
        .await;
        eprintln!("mssql: {report}");
        dbs.drop_all().await;
        if emulator.load(Ordering::Relaxed) {
            // The emulator cannot show exactly-once under concurrent claimers (no composite
            // unique index, READPAST skips nothing): skipped loudly, run on a real server.
            eprintln!(
                "SKIPPED on the emulator: {NEEDS_A_REAL_SERVER}, {ALSO_NEEDS_A_REAL_SERVER}, \
                 {REAL_SERVER_TOO} (point TAKT_TEST_MSSQL_URL at a real sql server to run them)"
            );
            report.expect_skipped(&[
                NEEDS_A_REAL_SERVER,
                ALSO_NEEDS_A_REAL_SERVER,
                REAL_SERVER_TOO,
            ]);
            assert_eq!(
                report.passed.len(),
                conformance::CHECKS - 3,
                "every other check ran"
            );
        } else {
            report.expect_skipped(&[]);
            assert_eq!(report.passed.len(), conformance::CHECKS, "every check ran");
        }
    }));
}

/// Four nodes (four pools) claim every fire of 40 jobs at once; every fire is claimed exactly
/// once. Needs a real server (see the module docs): skipped loudly on the emulator.
#[test]
fn four_pools_racing_claim_each_fire_once() {
    let Some(url) = url() else { return };
    let _serial = serial();
    let rt = runtime();
    rt.block_on(async {
        let dbs = Dbs::new(&url);
        let db = dbs.fresh().await;
        let seed = dbs.open(&db).await;
        if seed.is_emulator() {
            eprintln!(
                "SKIPPED on the emulator: four_pools_racing_claim_each_fire_once (no composite \
                 unique index, READPAST skips nothing; needs a real sql server)"
            );
            dbs.drop_all().await;
            return;
        }
        let jobs = 40;
        let fires = seed_every_minute_jobs(&seed, jobs).await;
        let mut tasks = Vec::new();
        for i in 0..4 {
            let store = dbs.open(&db).await;
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let claimed = store
                        .run_claim_due(&ClaimParams {
                            claimed_at: None,
                            node: NodeId(format!("node-{i}")),
                            instance: InstanceId("test-life".into()),
                            tags: Vec::new(),
                            now: conformance::claims_now(),
                            limit: 7,
                            recurring_only: 0,
                            lease: Duration::from_secs(60),
                        })
                        .await
                        .expect("claim");
                    if claimed.is_empty() {
                        break;
                    }
                    got.extend(claimed.into_iter().map(|c| (c.run.job_id, c.run.fire_time)));
                }
                got
            }));
        }
        let mut all: Vec<(JobId, Timestamp)> = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("claimer"));
        }
        conformance::assert_each_fire_once(&all, jobs, fires);
        let distinct: HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "no fire twice");
        dbs.drop_all().await;
    });
}

/// The migration checks every backend runs, each in a fresh database (on the emulator, the
/// one database emptied).
struct MssqlTarget<'a> {
    dbs: &'a Dbs,
    db: String,
}

impl MigrationTarget for MssqlTarget<'_> {
    type Store = MssqlStore;

    fn shown(&self) -> String {
        self.db.clone()
    }

    fn migrations(&self) -> &'static [Migration] {
        MSSQL_MIGRATIONS
    }

    async fn open(
        &self,
        migrate: bool,
        observer: Option<MigrationObserver>,
    ) -> Result<MssqlStore, StoreError> {
        let mut options = self.dbs.options(&self.db);
        options.pool.migrate = migrate;
        options.pool.on_migration = observer;
        MssqlStore::connect(&options).await
    }

    async fn migrate(&self, store: &MssqlStore) -> Result<Vec<AppliedMigration>, StoreError> {
        store.migrate().await
    }

    async fn recorded(&self) -> Option<Vec<u32>> {
        let table = self.dbs.table(&self.db, "schema_migrations").await;
        let mut c = admin(&self.dbs.url).await;
        let found = rows(
            &mut c,
            &format!("SELECT CASE WHEN OBJECT_ID(N'{table}', N'U') IS NULL THEN 0 ELSE 1 END"),
        )
        .await;
        if found.first()?.get::<i32, _>(0)? == 0 {
            return None;
        }
        let versions = rows(
            &mut c,
            &format!("SELECT version FROM {table} ORDER BY version"),
        )
        .await;
        Some(
            versions
                .iter()
                .map(|r| {
                    let v: i32 = r.get(0).expect("a version");
                    u32::try_from(v).expect("a version")
                })
                .collect(),
        )
    }

    async fn record_newer(&self, version: u32) {
        let table = self.dbs.table(&self.db, "schema_migrations").await;
        run_sql(
            &mut admin(&self.dbs.url).await,
            &format!("INSERT INTO {table} (version, name) VALUES ({version}, N'future')"),
        )
        .await;
    }
}

/// The migration checks: nodes starting together migrate an empty database once, migrating
/// again is a no-op, a schema from a newer takt is refused and left alone, a read-only open
/// creates nothing.
#[test]
fn migration_checks_on_mssql() {
    let Some(url) = url() else { return };
    let _serial = serial();
    let rt = runtime();
    rt.block_on(async {
        let dbs = Dbs::new(&url);
        let report = run_migration_checks(|| async {
            MssqlTarget {
                dbs: &dbs,
                db: dbs.fresh().await,
            }
        })
        .await;
        eprintln!("mssql: {report}");
        report.expect_skipped(&[]);
        assert_eq!(report.passed.len(), 5, "every check ran");
        let db = dbs.fresh().await;
        let store = dbs.open(&db).await;
        assert_eq!(
            store.schema_version().await.expect("version"),
            mssql_latest_version()
        );
        dbs.drop_all().await;
    });
}

/// The store as the CLI opens it: `database = "Server=…"` parses to SQL Server; the server's
/// clock and the node table work.
#[test]
fn any_store_opens_an_ado_net_string() {
    let Some(url) = url() else { return };
    let _serial = serial();
    let rt = runtime();
    rt.block_on(async {
        let dbs = Dbs::new(&url);
        let db = dbs.fresh().await;
        let with_db = format!("{};Database={db}", url.trim_end_matches(';'));
        let database =
            Database::parse(&with_db, std::path::Path::new("")).expect("a connection string");
        assert!(matches!(database, Database::Mssql { .. }), "{database:?}");
        assert!(!database.to_string().contains("Password"), "{database}");
        let store = database.open(None).await.expect("open");
        assert!(matches!(store, AnyStore::Mssql(_)));
        let now = store.database_now().await.expect("clock").expect("a clock");
        let diff = (now.as_millisecond() - Timestamp::now().as_millisecond()).abs();
        assert!(diff < 60_000, "the server's clock is near ours: {now}");
        // Node registration and listing through AnyStore (the rules themselves are in the
        // conformance suite): instants round-trip through the server as written.
        let node = NodeInfo {
            id: NodeId("n1".into()),
            instance: InstanceId("life-1".into()),
            host_name: "h".into(),
            pid: 7,
            version: "0.1.0".into(),
            capacity: 4,
            tags: vec!["press".into()],
        };
        let reg = Registration {
            node: node.clone(),
            now,
            live_for: Duration::from_secs(60),
            replace: None,
        };
        assert!(matches!(
            store.node_register(&reg).await.expect("register"),
            Registered::Yes { previous: None }
        ));
        let nodes = store.node_list().await.expect("list");
        assert_eq!(nodes.len(), 1, "{nodes:?}");
        assert_eq!(nodes[0].info, node);
        assert_eq!(nodes[0].heartbeat_at, Some(now));
        store
            .node_stopped(&node.id, &node.instance, now)
            .await
            .expect("stopped");
        let nodes = store.node_list().await.expect("list");
        assert_eq!(nodes[0].stopped_at, Some(now), "{nodes:?}");
        assert_eq!(
            store.schema_version().await.expect("version"),
            mssql_latest_version()
        );
        drop(store);
        dbs.drop_all().await;
    });
}

#[test]
fn bad_connection_strings_and_unreachable_servers_are_reported() {
    let rt = runtime();
    rt.block_on(async {
        let err = MssqlStore::connect(&MssqlOptions::new(
            "Server=db,1433;User Id=takt;Password=s3cret;Encrypt=maybe",
        ))
        .await
        .expect_err("bad string");
        assert_eq!(err.kind(), StoreErrorKind::Invalid, "{err}");
        let msg = err.to_string();
        assert!(msg.contains("connection string is not valid"), "{msg}");
        assert!(msg.contains("Server=host,1433"), "says the form: {msg}");
        assert!(!msg.contains("s3cret"), "{msg}");

        // Nothing listens on port 1: refused at once, retried, then reported as transient.
        let mut opts = MssqlOptions::new(
            "Server=127.0.0.1,1;Database=mes;User Id=takt;Password=s3cret;\
             TrustServerCertificate=True",
        );
        opts.pool.connect_timeout = Duration::from_millis(300);
        let err = MssqlStore::connect(&opts).await.expect_err("unreachable");
        assert_eq!(err.kind(), StoreErrorKind::Transient, "{err}");
        let msg = err.to_string();
        assert!(msg.contains("mssql://takt@127.0.0.1:1/mes"), "{msg}");
        assert!(msg.contains("cannot reach"), "{msg}");
        assert!(!msg.contains("s3cret"), "{msg}");
    });
}

/// A wrong password is refused with a message that says what to check and hides the password.
#[test]
fn a_refused_login_is_reported() {
    let Some(url) = url() else { return };
    let _serial = serial();
    let rt = runtime();
    rt.block_on(async {
        // The test string with its password replaced.
        let bad = with_part(&url, &["password", "pwd"], "Password=not-the-password-42");
        let mut opts = MssqlOptions::new(&bad);
        opts.pool.connect_timeout = Duration::from_secs(2);
        match MssqlStore::connect(&opts).await {
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.contains("not-the-password-42"), "{msg}");
                assert!(msg.contains("refused the login"), "{msg}");
                assert!(msg.contains("check User Id, Password"), "{msg}");
                eprintln!("refused login: {msg}");
            }
            // An emulator that accepts any password has nothing to refuse.
            Ok(s) => eprintln!("SKIPPED: the server accepted a wrong password ({s:?})"),
        }
    });
}

/// Claims through a proxy that resets every connection every few milliseconds, and whose
/// first COMMITs reach the server but lose their answer: every fire is claimed exactly once,
/// and every run the database holds as running was handed to the claimer (none orphaned by a
/// lost COMMIT answer: the claim token finds it).
#[test]
fn claims_through_a_breaking_connection_lose_and_double_nothing() {
    let Some(url) = url() else { return };
    let _serial = serial();
    let (proxy, via) = proxied(&url);
    let proxy = std::sync::Arc::new(proxy);
    let rt = runtime();
    rt.block_on(async {
        let dbs = Dbs::new(&url);
        let db = dbs.fresh().await;
        let direct = dbs.open(&db).await;
        let jobs = 10;
        let fires = seed_every_minute_jobs(&direct, jobs).await;
        let mut opts = MssqlOptions::new(&via).with_database(&db).with_pool_size(2);
        opts.pool.connect_timeout = Duration::from_secs(2);
        let flaky = MssqlStore::connect(&opts)
            .await
            .expect("connect through the proxy");
        // The first claims commit but never hear so.
        proxy.lose_commit_answers(3);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let breaker = {
            let (proxy, stop) = (proxy.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    // Long enough between resets for a claim (a dozen round trips) to finish
                    // now and then, short enough to cut many in the middle.
                    std::thread::sleep(Duration::from_millis(30 + n * 37 % 120));
                    proxy.reset();
                }
                n
            })
        };
        let started = std::time::Instant::now();
        let mut got: Vec<(JobId, Timestamp)> = Vec::new();
        let mut errors = 0;
        loop {
            if started.elapsed() > Duration::from_secs(3) {
                stop.store(true, Ordering::SeqCst);
            }
            match flaky
                .run_claim_due(&ClaimParams {
                    claimed_at: None,
                    node: NodeId("flaky".into()),
                    instance: InstanceId("test-life".into()),
                    tags: Vec::new(),
                    now: conformance::claims_now(),
                    limit: 5,
                    recurring_only: 0,
                    lease: Duration::from_secs(60),
                })
                .await
            {
                Ok(claimed) if claimed.is_empty() && stop.load(Ordering::SeqCst) => break,
                Ok(claimed) => {
                    got.extend(claimed.into_iter().map(|c| (c.run.job_id, c.run.fire_time)))
                }
                Err(e) => {
                    assert_eq!(e.kind(), StoreErrorKind::Transient, "{e}");
                    errors += 1;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "claims finish (got {})",
                got.len()
            );
        }
        let resets = breaker.join().expect("breaker");
        let emulator = on_emulator(&url).await;
        if emulator {
            // The emulator takes no locks: the token check after a cut can run before the
            // cut transaction's COMMIT lands (a real server makes the check wait on that
            // transaction's row locks), so a claim may end up committed but unheard of —
            // what lease renewal fails and retries as an orphan in production. Never twice
            // still holds.
            eprintln!(
                "SKIPPED on the iridium emulator: every fire handed to the claimer after lost \
                 commits (needs a real server's locks); checking only that none was claimed \
                 twice"
            );
            let unique: HashSet<_> = got.iter().collect();
            assert_eq!(
                unique.len(),
                got.len(),
                "a (job, fire time) was claimed twice"
            );
        } else {
            conformance::assert_each_fire_once(&got, jobs, fires);
        }
        let running = direct
            .run_list(&takt_core::store::RunFilter {
                state: Some(takt_core::run::RunState::Running),
                limit: 10_000,
                ..Default::default()
            })
            .await
            .expect("list");
        let stored: HashSet<(JobId, Timestamp)> =
            running.iter().map(|r| (r.job_id, r.fire_time)).collect();
        let handed: HashSet<(JobId, Timestamp)> = got.iter().copied().collect();
        if emulator {
            assert!(
                handed.is_subset(&stored),
                "every run handed to the claimer is running"
            );
        } else {
            assert_eq!(
                stored, handed,
                "every running run was handed to the claimer"
            );
        }
        eprintln!(
            "{resets} resets, {errors} transient errors surfaced, {} unknown commits resolved",
            flaky.unknown_commits()
        );
        dbs.drop_all().await;
    });
}

/// `url` with its parts named by one of `keys` (lowercase) replaced by `part`.
fn with_part(url: &str, keys: &[&str], part: &str) -> String {
    url.split(';')
        .map(|p| {
            let key = p
                .split('=')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if keys.contains(&key.as_str()) {
                part.to_string()
            } else {
                p.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// A proxy in front of the server of `url`, and `url` pointed at it.
fn proxied(url: &str) -> (common::proxy::Proxy, String) {
    let config = parse_connection_string(url).expect("valid");
    let proxy = common::proxy::Proxy::start(config.get_addr());
    let via = with_part(
        url,
        &["server", "data source"],
        &format!("Server=127.0.0.1,{}", proxy.port),
    );
    (proxy, via)
}

/// Finishes that end while another is being written are committed together (group commit:
/// `UPDATE … FROM (VALUES …)` in chunks of 128), each caller answered with its own run
/// (`common::finishes`). The finishes of one store are written one batch at a time, so this
/// runs on the emulator too (it is concurrent *transactions* that it was seen to lose); there
/// the batch is written one statement pair per finish in its one transaction, because the
/// emulator's `UPDATE … FROM (VALUES …)` over parameters updates only the first row
/// (`store/mssql/dialect.rs`): the batch statement itself is checked on a real server only.
#[test]
fn finishes_that_meet_are_committed_together() {
    let Some(url) = url() else { return };
    let _serial = serial();
    let rt = runtime();
    rt.block_on(async {
        let dbs = Dbs::new(&url);
        let db = dbs.fresh().await;
        let store = dbs.open(&db).await;
        let runs = if store.is_emulator() {
            eprintln!(
                "SKIPPED on the iridium emulator: the batch statement UPDATE … FROM (VALUES …) \
                 (the emulator updates only its first row); checking group commit with one \
                 statement pair per finish instead (point TAKT_TEST_MSSQL_URL at a real sql \
                 server to run it)"
            );
            // No statement chunks to cross there: fewer runs, as the emulator is slow.
            60
        } else {
            300
        };
        common::finishes::finishes_that_meet_are_committed_together(&store, runs, || {
            store.finish_stats()
        })
        .await;
        dbs.drop_all().await;
    });
}

/// Finishes that meet in one batch and lose their COMMIT answer (the test proxy): every
/// caller gets its own run as finished, none lost or written twice (`common::finishes`).
#[test]
fn a_batch_of_finishes_whose_commit_answer_is_lost_is_resolved_for_each() {
    let Some(url) = url() else { return };
    let _serial = serial();
    let (proxy, via) = proxied(&url);
    let rt = runtime();
    rt.block_on(async {
        let dbs = Dbs::new(&url);
        let db = dbs.fresh().await;
        let direct = dbs.open(&db).await;
        let mut opts = MssqlOptions::new(&via).with_database(&db).with_pool_size(2);
        opts.pool.connect_timeout = Duration::from_secs(2);
        let flaky = MssqlStore::connect(&opts)
            .await
            .expect("connect through the proxy");
        common::finishes::a_batch_whose_commit_answer_is_lost_is_resolved(
            &direct,
            &flaky,
            || flaky.finish_stats(),
            &proxy,
        )
        .await;
        dbs.drop_all().await;
    });
}
