//! The PostgreSQL store against the core's conformance suite, plus what only a server store
//! has: many claimers on separate pools racing for one set of fires, migrations applied by
//! nodes starting together, a newer schema refused, bad connection strings and unreachable
//! servers reported precisely.
//!
//! Needs `TAKT_TEST_PG_URL` (`.ci/run` sets it); without it every test here prints SKIPPED
//! and passes, unless `TAKT_TEST_REQUIRE` names `postgres`. Each test works in schemas of its
//! own (`takt_t_<pid>_<n>`), dropped afterwards, so tests run in parallel on one database.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use takt_core::Timestamp;
use takt_core::job::JobDef;
use takt_core::job::JobId;
use takt_core::run::NodeId;
use takt_core::run::RunState;
use takt_core::store::conformance::{self, seed_every_minute_jobs};
use takt_core::store::{ClaimParams, Store, StoreError, StoreErrorKind};
use takt_host::embed::HostBuilder;
use takt_host::scheduler::{SchedulerConfig, SchedulerEvent};
use takt_host::store::conformance::{MigrationTarget, run_migration_checks};
use takt_host::store::{
    AppliedMigration, Migration, MigrationObserver, PG_MIGRATIONS, PgOptions, PgStore,
    pg_latest_version,
};
use takt_plugin_api::sdk::{JobContext, Plugin};
use takt_plugin_api::static_plugin;

fn url() -> Option<String> {
    common::backend_url("postgres", "TAKT_TEST_PG_URL")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Fresh schema names, dropped (with everything in them) when the guard goes.
struct Schemas {
    url: String,
    names: std::sync::Mutex<Vec<String>>,
}

impl Schemas {
    fn new(url: &str) -> Schemas {
        Schemas {
            url: url.to_string(),
            names: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn fresh(&self) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "takt_t_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.names.lock().expect("names").push(name.clone());
        name
    }

    async fn open(&self, schema: &str) -> PgStore {
        PgStore::connect(&PgOptions::new(&self.url).with_schema(schema))
            .await
            .expect("connect to the test database")
    }

    async fn drop_all(&self) {
        let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect for cleanup");
        tokio::spawn(conn);
        let names = self.names.lock().expect("names").clone();
        for n in names {
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {n} CASCADE"))
                .await
                .expect("drop test schema");
        }
    }
}

#[test]
fn conformance_on_postgres() {
    let Some(url) = url() else { return };
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let report = conformance::run_all(|| async {
            let schema = schemas.fresh();
            schemas.open(&schema).await
        })
        .await;
        eprintln!("postgres: {report}");
        schemas.drop_all().await;
        report.expect_skipped(&[]);
        assert_eq!(report.passed.len(), conformance::CHECKS, "every check ran");
    });
}

/// Four nodes (four pools, so four sessions at least) claim every fire of 40 jobs at once,
/// each on its own task; every fire is claimed exactly once.
#[test]
fn four_pools_racing_claim_each_fire_once() {
    let Some(url) = url() else { return };
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let schema = schemas.fresh();
        let seed = schemas.open(&schema).await;
        let jobs = 40;
        let fires = seed_every_minute_jobs(&seed, jobs).await;
        let mut tasks = Vec::new();
        for i in 0..4 {
            let store = schemas.open(&schema).await;
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let claimed = store
                        .run_claim_due(&ClaimParams {
                            claimed_at: None,
                            node: NodeId(format!("node-{i}")),
                            instance: takt_core::node::InstanceId("test-life".into()),
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
        let mut per_node = Vec::new();
        for t in tasks {
            let got = t.await.expect("claimer");
            per_node.push(got.len());
            all.extend(got);
        }
        conformance::assert_each_fire_once(&all, jobs, fires);
        let distinct: HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "no fire twice");
        eprintln!("claims per node: {per_node:?}");
        schemas.drop_all().await;
    });
}

/// The migration checks every backend runs, each in a fresh schema.
struct PgTarget {
    url: String,
    schema: String,
}

impl PgTarget {
    async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        client
    }
}

impl MigrationTarget for PgTarget {
    type Store = PgStore;

    fn shown(&self) -> String {
        format!("(schema {})", self.schema)
    }

    fn migrations(&self) -> &'static [Migration] {
        PG_MIGRATIONS
    }

    async fn open(
        &self,
        migrate: bool,
        observer: Option<MigrationObserver>,
    ) -> Result<PgStore, StoreError> {
        let mut options = PgOptions::new(&self.url).with_schema(&self.schema);
        options.pool.migrate = migrate;
        options.pool.on_migration = observer;
        PgStore::connect(&options).await
    }

    async fn migrate(&self, store: &PgStore) -> Result<Vec<AppliedMigration>, StoreError> {
        store.migrate().await
    }

    async fn recorded(&self) -> Option<Vec<u32>> {
        let client = self.client().await;
        let table = format!("{}.schema_migrations", self.schema);
        let exists = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .expect("look for the table");
        if !exists.get::<_, bool>(0) {
            return None;
        }
        let rows = client
            .query(
                &format!("SELECT version FROM {table} ORDER BY version"),
                &[],
            )
            .await
            .expect("read the versions");
        Some(
            rows.iter()
                .map(|r| u32::try_from(r.get::<_, i32>(0)).expect("a version"))
                .collect(),
        )
    }

    async fn record_newer(&self, version: u32) {
        self.client()
            .await
            .batch_execute(&format!(
                "INSERT INTO {}.schema_migrations (version, name) VALUES ({version}, 'future')",
                self.schema
            ))
            .await
            .expect("pretend a newer takt migrated");
    }
}

/// The migration checks (nodes starting together migrate an empty schema once, a second
/// migrate is a no-op, a schema from a newer takt is refused and left alone, …); a read-only
/// open of a missing schema does not create it either.
#[test]
fn migration_checks_on_postgres() {
    let Some(url) = url() else { return };
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let report = run_migration_checks(|| async {
            PgTarget {
                url: url.clone(),
                schema: schemas.fresh(),
            }
        })
        .await;
        eprintln!("postgres: {report}");
        report.expect_skipped(&[]);
        assert_eq!(report.passed.len(), 5, "every check ran");

        let target = PgTarget {
            url: url.clone(),
            schema: schemas.fresh(),
        };
        assert!(target.open(false, None).await.is_err());
        let created = target
            .client()
            .await
            .query_one(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
                &[&target.schema],
            )
            .await
            .expect("look for the schema")
            .get::<_, i64>(0);
        assert_eq!(created, 0, "a read-only open created the schema");
        let store = target.open(true, None).await.expect("migrate");
        assert_eq!(
            store.schema_version().await.expect("version"),
            pg_latest_version()
        );
        schemas.drop_all().await;
    });
}

#[test]
fn bad_connection_strings_and_unreachable_servers_are_reported() {
    let rt = runtime();
    rt.block_on(async {
        let err = PgStore::connect(&PgOptions::new("postgres://x@host:notaport/db"))
            .await
            .expect_err("bad url");
        assert_eq!(err.kind(), StoreErrorKind::Invalid);
        assert!(
            err.to_string().contains("connection string is not valid"),
            "{err}"
        );

        let err = PgStore::connect(
            &PgOptions::new("postgres://u@127.0.0.1:1/db").with_schema("Bad-Name"),
        )
        .await
        .expect_err("bad schema");
        assert!(err.to_string().contains("not a plain identifier"), "{err}");

        // Nothing listens on port 1: refused at once, retried, then reported as transient.
        let mut opts = PgOptions::new("postgres://u@127.0.0.1:1/db");
        opts.pool.connect_timeout = Duration::from_millis(300);
        let err = PgStore::connect(&opts).await.expect_err("unreachable");
        assert_eq!(err.kind(), StoreErrorKind::Transient, "{err}");
        assert!(
            err.to_string().contains("postgres://u@127.0.0.1:1/db"),
            "{err}"
        );
        assert!(!err.to_string().contains("password"), "{err}");
    });
}

/// A node sleeping towards its safety poll (60 s here) starts a job another process adds at
/// once: the adding store notifies, the node's listener wakes its loop.
#[test]
fn notify_wakes_a_sleeping_node_for_another_process_s_job() {
    let Some(url) = url() else { return };
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let schema = schemas.fresh();
        let node_store = schemas.open(&schema).await;
        let plugin = static_plugin!(|| Plugin::new("wake").handler(
            "noop",
            "does nothing",
            |_: &JobContext, (): ()| Ok(())
        ))
        .expect("plugin");
        let mut config = SchedulerConfig::new(NodeId("listener".into()));
        config.safety_poll = Duration::from_secs(60);
        let host = HostBuilder::new(node_store.clone())
            .static_plugin(plugin)
            .scheduler_config(config)
            .start()
            .await
            .expect("host");
        let mut events = host.subscribe();
        let listener = {
            let handle = host.handle().clone();
            node_store.listen(move || handle.wake())
        };
        // Let the loop go to sleep, with nothing scheduled.
        tokio::time::sleep(Duration::from_millis(1500)).await;

        // "Another process": its own pool, a job due now.
        let other = schemas.open(&schema).await;
        let mut job = JobDef::new("from-elsewhere", "wake::noop").expect("job");
        let now = Timestamp::now();
        job.next_fire = Some(now);
        let added = std::time::Instant::now();
        other.job_insert(&job, now).await.expect("insert");
        let state = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Ok(SchedulerEvent::Finished { state, .. }) = events.recv().await {
                    return state;
                }
            }
        })
        .await
        .expect("the sleeping node ran the job well before its 60 s safety poll");
        assert_eq!(state, RunState::Succeeded);
        eprintln!("woken and ran after {:?}", added.elapsed());
        listener.abort();
        host.shutdown(Duration::from_secs(1)).await;
        schemas.drop_all().await;
    });
}

/// A proxy in front of the server of `url` (to break connections or lose answers) and the
/// URL that goes through it; `None` (the test skips, saying so) when `url` is not TCP.
fn proxied(url: &str) -> Option<(common::proxy::Proxy, String)> {
    let config: tokio_postgres::Config = url.parse().expect("url");
    let (host, port) = match (config.get_hosts().first(), config.get_ports().first()) {
        (Some(tokio_postgres::config::Host::Tcp(h)), p) => (h.clone(), p.copied().unwrap_or(5432)),
        _ => {
            eprintln!("SKIPPED: needs a TCP TAKT_TEST_PG_URL");
            return None;
        }
    };
    let proxy = common::proxy::Proxy::start(format!("{host}:{port}"));
    let user = config.get_user().unwrap_or("postgres");
    let db = config.get_dbname().unwrap_or(user);
    let via = format!("postgres://{user}@127.0.0.1:{}/{db}", proxy.port);
    Some((proxy, via))
}

/// Claims through a connection that breaks. First the answers of three COMMITs are lost after
/// the server applied them: each claim finds out by its token what it claimed, so every run is
/// handed out once. Then every connection is reset every few ms for 3 s, at any point of a
/// claim: nothing is claimed twice, and a run the database holds as running that the claimer
/// never got exists only for a call that failed saying its outcome was unknown (the host's
/// lease renewal fails and retries such a run; see `scheduler::renew`).
#[test]
fn claims_through_a_breaking_connection_lose_and_double_nothing() {
    let Some(url) = url() else { return };
    let Some((proxy, via)) = proxied(&url) else {
        return;
    };
    let proxy = std::sync::Arc::new(proxy);
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let schema = schemas.fresh();
        let direct = schemas.open(&schema).await;
        let jobs = 80;
        let fires = seed_every_minute_jobs(&direct, jobs).await;
        let mut opts = PgOptions::new(&via).with_schema(&schema).with_pool_size(2);
        opts.pool.connect_timeout = Duration::from_secs(2);
        let flaky = PgStore::connect(&opts)
            .await
            .expect("connect through the proxy");
        let params = ClaimParams {
            claimed_at: None,
            node: NodeId("flaky".into()),
            instance: takt_core::node::InstanceId("test-life".into()),
            tags: Vec::new(),
            now: conformance::claims_now(),
            limit: 2,
            recurring_only: 0,
            lease: Duration::from_secs(60),
        };
        let mut got: Vec<(JobId, Timestamp)> = Vec::new();

        // Phase 1: lost COMMIT answers, nothing else.
        proxy.lose_commit_answers(3);
        for _ in 0..10 {
            let claimed = flaky.run_claim_due(&params).await.expect("claim");
            got.extend(claimed.into_iter().map(|c| (c.run.job_id, c.run.fire_time)));
        }
        assert_eq!(
            flaky.unknown_commits(),
            3,
            "the lost COMMIT answers were resolved by claim token"
        );
        assert_eq!(got.len(), 20, "each claim got its two runs");

        // Phase 2: connections reset all the time.
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let breaker = {
            let (proxy, stop) = (proxy.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    std::thread::sleep(Duration::from_millis(3 + n * 7 % 11));
                    proxy.reset();
                }
                n
            })
        };
        let started = std::time::Instant::now();
        let (mut gave_up, mut unknown) = (0, 0);
        loop {
            if started.elapsed() > Duration::from_secs(3) {
                stop.store(true, Ordering::SeqCst);
            }
            match flaky.run_claim_due(&params).await {
                Ok(claimed) if claimed.is_empty() && stop.load(Ordering::SeqCst) => {
                    // Empty can also mean "locked": a backend whose client vanished holds its
                    // rows until the server notices. Done only when nothing is due at all.
                    let due = direct
                        .job_due(conformance::claims_now(), 1, &[])
                        .await
                        .expect("job_due");
                    if due.is_empty() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(claimed) => {
                    got.extend(claimed.into_iter().map(|c| (c.run.job_id, c.run.fire_time)));
                }
                Err(e) => {
                    assert_eq!(e.kind(), StoreErrorKind::Transient, "{e}");
                    gave_up += 1;
                    unknown += usize::from(e.to_string().contains("outcome of a claim is unknown"));
                }
            }
            assert!(started.elapsed() < Duration::from_secs(60), "claims finish");
        }
        let resets = breaker.join().expect("breaker");
        let handed: HashSet<(JobId, Timestamp)> = got.iter().copied().collect();
        assert_eq!(handed.len(), got.len(), "no run handed out twice");
        let running = direct
            .run_list(&takt_core::store::RunFilter {
                state: Some(RunState::Running),
                limit: 10_000,
                ..Default::default()
            })
            .await
            .expect("list");
        let stored: HashSet<(JobId, Timestamp)> =
            running.iter().map(|r| (r.job_id, r.fire_time)).collect();
        assert!(
            handed.is_subset(&stored),
            "every handed run is stored running"
        );
        let orphans = stored.len() - handed.len();
        assert!(
            orphans <= unknown * 2,
            "{orphans} runs claimed but never handed out, with only {unknown} calls reporting an \
             unknown outcome"
        );
        assert_eq!(stored.len(), jobs * fires as usize, "every fire claimed");
        eprintln!(
            "{} claims through {resets} connection resets ({gave_up} calls gave up, {unknown} \
             with an unknown outcome; {orphans} runs left for the host's orphan recovery; {} \
             lost COMMIT answers resolved by claim token)",
            got.len(),
            flaky.unknown_commits()
        );
        schemas.drop_all().await;
    });
}

/// A parent's finish whose COMMIT answer is lost is resolved by reading the run back: the
/// continuation created in the same transaction exists once, never twice (issue 15 item 2).
#[test]
fn a_finish_whose_commit_answer_is_lost_continues_once() {
    let Some(url) = url() else { return };
    let Some((proxy, via)) = proxied(&url) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let schema = schemas.fresh();
        let direct = schemas.open(&schema).await;
        let t0 = conformance::claims_now();
        let child = JobDef::new("child", "conformance::noop").expect("job");
        direct.job_insert(&child, t0).await.expect("insert child");
        let mut parent = JobDef::new("parent", "conformance::noop").expect("job");
        parent.next_fire = Some(t0);
        parent.on_success = vec![takt_core::job::JobName::new("child").expect("name")];
        let parent = direct.job_insert(&parent, t0).await.expect("insert parent");
        let params = ClaimParams {
            claimed_at: None,
            node: NodeId("flaky".into()),
            instance: takt_core::node::InstanceId("test-life".into()),
            tags: Vec::new(),
            now: t0,
            limit: 1,
            recurring_only: 0,
            lease: Duration::from_secs(60),
        };
        let claimed = direct.run_claim_due(&params).await.expect("claim");
        assert_eq!(claimed.len(), 1);
        let mut run = claimed[0].run.clone();
        let id = run.id.expect("id");
        let attempt = run.attempt;
        run.apply(
            takt_core::run::RunEvent::Succeeded { result_json: None },
            t0,
            &parent.retry,
        )
        .expect("legal");
        let mut opts = PgOptions::new(&via).with_schema(&schema).with_pool_size(2);
        opts.pool.connect_timeout = Duration::from_secs(2);
        let flaky = PgStore::connect(&opts)
            .await
            .expect("connect through the proxy");
        proxy.lose_commit_answers(1);
        let done = flaky
            .run_set_state_if_running(
                id,
                attempt,
                &takt_core::store::RunFinish::from_run(&run, t0),
            )
            .await
            .expect("a lost COMMIT answer is resolved by reading the run back");
        assert_eq!(done.state, RunState::Succeeded);
        assert_eq!(
            proxy.commit_answers_to_lose(),
            0,
            "the finish's COMMIT answer was lost (the test proves the resolution)"
        );
        let children = direct.run_children(id).await.expect("children");
        assert_eq!(children.len(), 1, "one continuation, not two: {children:?}");
        schemas.drop_all().await;
    });
}

/// Finishes that end while another is being written are committed together (group commit),
/// each caller answered with its own run (`common::finishes`).
#[test]
fn finishes_that_meet_are_committed_together() {
    let Some(url) = url() else { return };
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let schema = schemas.fresh();
        let store = schemas.open(&schema).await;
        common::finishes::finishes_that_meet_are_committed_together(&store, 300, || {
            store.finish_stats()
        })
        .await;
        schemas.drop_all().await;
    });
}

/// A caller that gives up while it is writing a batch of finishes (its future dropped, here by
/// a timeout) hands the queue on: every other caller is still answered with its own run, and
/// the dropped one's run is either finished or still running, never half-written.
#[test]
fn a_finish_dropped_while_writing_hands_the_queue_on() {
    let Some(url) = url() else { return };
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let schema = schemas.fresh();
        let store = schemas.open(&schema).await;
        let t0 = conformance::claims_now();
        let runs = 8;
        for i in 0..runs {
            let mut job = JobDef::new(&format!("dropper-{i}"), "conformance::noop").expect("job");
            job.next_fire = Some(t0);
            store.job_insert(&job, t0).await.expect("insert");
        }
        let params = ClaimParams {
            claimed_at: None,
            node: NodeId("n".into()),
            instance: takt_core::node::InstanceId("n-life".into()),
            tags: Vec::new(),
            now: t0,
            limit: runs,
            recurring_only: 0,
            lease: Duration::from_secs(60),
        };
        let claimed = store.run_claim_due(&params).await.expect("claim");
        assert_eq!(claimed.len(), runs);
        let calls: Vec<_> = claimed
            .iter()
            .map(|c| {
                let mut run = c.run.clone();
                run.apply(
                    takt_core::run::RunEvent::Succeeded { result_json: None },
                    t0,
                    &takt_core::policy::RetryPolicy::default(),
                )
                .expect("legal");
                (
                    c.run.clone(),
                    takt_core::store::RunFinish::from_run(&run, t0),
                )
            })
            .collect();
        // A queue nobody drains would leave the others waiting for ever: fail instead.
        let answers = tokio::time::timeout(
            Duration::from_secs(60),
            conformance::join_all(
                calls
                    .iter()
                    .enumerate()
                    .map(|(k, (run, fin))| {
                        let store = &store;
                        async move {
                            let call = store.run_set_state_if_running(
                                run.id.expect("id"),
                                run.attempt,
                                fin,
                            );
                            if k > 0 {
                                return Some(call.await);
                            }
                            // The first caller drains the queue; it gives up when polled again
                            // (mid-batch: the others queued behind it on the first round).
                            let mut call = Box::pin(call);
                            let mut polled_once = false;
                            std::future::poll_fn(move |cx| {
                                if std::mem::replace(&mut polled_once, true) {
                                    // Returning drops `call` with the future, mid-batch.
                                    return std::task::Poll::Ready(None);
                                }
                                let polled = call.as_mut().poll(cx).map(Some);
                                if polled.is_pending() {
                                    cx.waker().wake_by_ref();
                                }
                                polled
                            })
                            .await
                        }
                    })
                    .collect(),
            ),
        )
        .await
        .expect("the queue was handed on: every other caller was answered");
        assert!(answers[0].is_none(), "the first caller gave up mid-batch");
        for (k, ((run, _), answer)) in calls.iter().zip(answers).enumerate() {
            let id = run.id.expect("id");
            let stored = store.run_get(id).await.expect("get").expect("run");
            match answer {
                Some(answer) => {
                    let done = answer.expect("finish");
                    assert_eq!(done.id, Some(id), "finish {k}: its own run");
                    assert_eq!(done.state, RunState::Succeeded, "finish {k}");
                    assert_eq!(stored, done, "finish {k}: answered as stored");
                }
                None => assert!(
                    matches!(stored.state, RunState::Running | RunState::Succeeded),
                    "the dropped finish is written whole or not at all: {stored:?}"
                ),
            }
        }
        schemas.drop_all().await;
    });
}

/// Finishes that meet in one batch (group commit) and lose their COMMIT answer: every caller
/// gets its own run as finished, none lost or written twice (`common::finishes`).
#[test]
fn a_batch_of_finishes_whose_commit_answer_is_lost_is_resolved_for_each() {
    let Some(url) = url() else { return };
    let Some((proxy, via)) = proxied(&url) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let schemas = Schemas::new(&url);
        let schema = schemas.fresh();
        let direct = schemas.open(&schema).await;
        let mut opts = PgOptions::new(&via).with_schema(&schema).with_pool_size(2);
        opts.pool.connect_timeout = Duration::from_secs(2);
        let flaky = PgStore::connect(&opts)
            .await
            .expect("connect through the proxy");
        common::finishes::a_batch_whose_commit_answer_is_lost_is_resolved(
            &direct,
            &flaky,
            || flaky.finish_stats(),
            &proxy,
        )
        .await;
        schemas.drop_all().await;
    });
}
