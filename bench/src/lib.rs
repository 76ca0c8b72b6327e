//! What the takt-bench binaries share: a tiny argument reader, a run counter that notes the
//! instant the last expected run executed, percentile helpers and table printing.
//!
//! Each benchmark is a binary in `src/bin/` (`b3`, `b4`, …), run in release mode:
//! `cargo run --release --manifest-path bench/Cargo.toml --bin b3`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Command-line options common to the binaries: `--json`, and `--name value` pairs.
#[derive(Debug, Default)]
pub struct Args {
    /// Print one JSON document instead of tables.
    pub json: bool,
    pairs: Vec<(String, String)>,
}

impl Args {
    /// Reads `std::env::args`; exits with a message on an unknown shape.
    pub fn parse() -> Args {
        let mut args = Args::default();
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            if a == "--json" {
                args.json = true;
            } else if let Some(name) = a.strip_prefix("--") {
                let Some(value) = it.next() else {
                    eprintln!("option --{name} needs a value");
                    std::process::exit(2);
                };
                args.pairs.push((name.to_string(), value));
            } else {
                eprintln!("unexpected argument {a:?}; options are --json and --name value");
                std::process::exit(2);
            }
        }
        args
    }

    /// The text value of `--name`, if given.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The numeric value of `--name`, else `default`.
    pub fn num(&self, name: &str, default: u64) -> u64 {
        match self.pairs.iter().rev().find(|(n, _)| n == name) {
            None => default,
            Some((_, v)) => v.parse().unwrap_or_else(|_| {
                eprintln!("--{name} takes a whole number, not {v:?}");
                std::process::exit(2);
            }),
        }
    }
}

/// Counts runs executed inside job bodies and remembers when the `target`-th one ran, so the
/// waiting side can poll cheaply without adding its poll interval to the measured time.
#[derive(Debug, Default)]
pub struct Counter {
    count: AtomicUsize,
    target: AtomicUsize,
    done_at: Mutex<Option<Instant>>,
}

impl Counter {
    /// Starts a new measurement expecting `target` runs.
    pub fn reset(&self, target: usize) {
        *self.done_at.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.target.store(target, Ordering::SeqCst);
        self.count.store(0, Ordering::SeqCst);
    }

    /// One run executed; returns whether it was the `target`-th.
    pub fn hit(&self) -> bool {
        let n = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        let last = n == self.target.load(Ordering::Acquire);
        if last {
            *self.done_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
        last
    }

    /// Runs counted so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Waits (polling every 2 ms) until the target is reached or `limit` passes; returns the
    /// instant the target-th run executed, `None` on time-out.
    pub async fn wait(&self, limit: Duration) -> Option<Instant> {
        let until = Instant::now() + limit;
        loop {
            if let Some(at) = *self.done_at.lock().unwrap_or_else(|e| e.into_inner()) {
                return Some(at);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// The value at quantile `q` (0.0–1.0) of `sorted` (nearest rank); `NaN` when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Sorts a copy of `values` (NaN-free) ascending.
pub fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Median, min and max of `values`.
pub fn median_min_max(values: &[f64]) -> (f64, f64, f64) {
    let s = sorted(values);
    (
        quantile(&s, 0.5),
        *s.first().unwrap_or(&f64::NAN),
        *s.last().unwrap_or(&f64::NAN),
    )
}

/// Prints a Markdown table (so the output can be pasted into `BENCHMARKS.md`).
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    println!("| {} |", header.join(" | "));
    let align: Vec<&str> = header
        .iter()
        .enumerate()
        .map(|(i, _)| if i == 0 { "---" } else { "---:" })
        .collect();
    println!("| {} |", align.join(" | "));
    for r in rows {
        println!("| {} |", r.join(" | "));
    }
}

/// `TAKT_BENCH_CLAIM_AHEAD=N`: the takt rows of B3, B5 and B6 run with
/// `SchedulerConfig::claim_ahead = N` instead of its default, for an A/B of claiming ahead in
/// the same binary (0: the claim bounded by the free slots, as before it existed).
pub fn apply_claim_ahead(config: &mut takt_host::scheduler::SchedulerConfig) {
    if let Some(n) = std::env::var("TAKT_BENCH_CLAIM_AHEAD")
        .ok()
        .and_then(|v| v.trim().parse().ok())
    {
        config.claim_ahead = n;
    }
}

/// Sets `SchedulerConfig::lookahead_batch` to `n`, or to `TAKT_BENCH_LOOKAHEAD_BATCH` when
/// that is set (an A/B in the same binary; 0: off, the default of takt itself).
pub fn apply_lookahead_batch(config: &mut takt_host::scheduler::SchedulerConfig, n: usize) {
    config.lookahead_batch = std::env::var("TAKT_BENCH_LOOKAHEAD_BATCH")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(n);
}

/// A temporary SQLite file path unique to this process and `label` (removed with its WAL
/// files by [`remove_db`]).
pub fn temp_db(label: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("takt-bench-{}-{label}.db", std::process::id()));
    remove_db(&p);
    p
}

/// Removes a SQLite file and its `-wal` / `-shm` companions, ignoring missing ones.
pub fn remove_db(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let s = sorted(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(quantile(&s, 0.5), 3.0);
        assert_eq!(quantile(&s, 0.99), 5.0);
        assert_eq!(quantile(&s, 0.0), 1.0);
        assert_eq!(median_min_max(&[2.0, 9.0, 4.0]), (4.0, 2.0, 9.0));
    }

    #[test]
    fn the_counter_notes_the_target_run() {
        let c = Counter::default();
        c.reset(2);
        assert!(!c.hit());
        assert!(c.hit());
        assert!(!c.hit());
        assert_eq!(c.count(), 3);
    }
}

/// A timing probe around a [`Store`]: counts the calls of every method and the wall time
/// spent in the ones a scheduling pass makes, to tell where a slow burst goes (the store or
/// the rest of the loop and executor). It adds two clock reads per call.
pub mod probe {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use jiff::Timestamp;
    use takt_core::job::{JobDef, JobId, JobName};
    use takt_core::node::{InstanceId, NodeStatus, Registered, Registration};
    use takt_core::pause::{Pause, PauseTarget, Resumed};
    use takt_core::run::{NodeId, Progress, Run, RunId};
    use takt_core::store::{
        Backfilled, CancelOutcome, CancelRequest, Capabilities, ClaimParams, ClaimedRun, DueJob,
        DueSet, JobPage, JobQuery, LogLine, PurgeCounts, RunFilter, RunFinish, Store, StoreResult,
    };

    /// Calls and time per method name.
    #[derive(Debug, Default)]
    struct Tally(Mutex<Vec<(&'static str, u64, Duration)>>);

    impl Tally {
        fn add(&self, name: &'static str, took: Duration) {
            let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
            match v.iter_mut().find(|(n, _, _)| *n == name) {
                Some(e) => {
                    e.1 += 1;
                    e.2 += took;
                }
                None => v.push((name, 1, took)),
            }
        }
    }

    /// `S` with every call counted and timed; clones share the tally.
    #[derive(Clone, Debug)]
    pub struct Probe<S> {
        inner: S,
        tally: std::sync::Arc<Tally>,
    }

    impl<S> Probe<S> {
        /// Wraps `inner`.
        pub fn new(inner: S) -> Probe<S> {
            Probe {
                inner,
                tally: std::sync::Arc::default(),
            }
        }

        /// (method, calls, total time) for every method called, most time first.
        pub fn report(&self) -> Vec<(&'static str, u64, Duration)> {
            let mut v = self
                .tally
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            v.sort_by_key(|e| std::cmp::Reverse(e.2));
            v
        }

        /// Forgets the calls so far (e.g. the inserts before the measured part).
        pub fn clear(&self) {
            self.tally
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        }
    }

    macro_rules! timed {
        ($self:ident, $name:literal, $call:expr) => {{
            let t = Instant::now();
            let r = $call.await;
            $self.tally.add($name, t.elapsed());
            r
        }};
    }

    impl<S: Store> Store for Probe<S> {
        fn capabilities(&self) -> Capabilities {
            self.inner.capabilities()
        }
        async fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
            timed!(self, "job_insert", self.inner.job_insert(job, now))
        }
        async fn job_update(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
            timed!(self, "job_update", self.inner.job_update(job, now))
        }
        async fn job_get(&self, id: JobId) -> StoreResult<Option<JobDef>> {
            timed!(self, "job_get", self.inner.job_get(id))
        }
        async fn jobs_get(&self, ids: &[JobId]) -> StoreResult<Vec<JobDef>> {
            timed!(self, "jobs_get", self.inner.jobs_get(ids))
        }
        async fn job_count(&self) -> StoreResult<u64> {
            timed!(self, "job_count", self.inner.job_count())
        }
        async fn jobs_late(&self, before: Timestamp, limit: usize) -> StoreResult<Vec<JobDef>> {
            timed!(self, "jobs_late", self.inner.jobs_late(before, limit))
        }
        async fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>> {
            timed!(self, "job_get_by_name", self.inner.job_get_by_name(name))
        }
        async fn job_list(&self) -> StoreResult<Vec<JobDef>> {
            timed!(self, "job_list", self.inner.job_list())
        }
        async fn job_page(&self, query: &JobQuery) -> StoreResult<JobPage> {
            timed!(self, "job_page", self.inner.job_page(query))
        }
        async fn job_delete(&self, id: JobId) -> StoreResult<()> {
            timed!(self, "job_delete", self.inner.job_delete(id))
        }
        async fn job_set_enabled(
            &self,
            id: JobId,
            enabled: bool,
            now: Timestamp,
        ) -> StoreResult<JobDef> {
            timed!(
                self,
                "job_set_enabled",
                self.inner.job_set_enabled(id, enabled, now)
            )
        }
        async fn job_set_next_fire(
            &self,
            id: JobId,
            expected: Option<Timestamp>,
            new: Option<Timestamp>,
        ) -> StoreResult<()> {
            timed!(
                self,
                "job_set_next_fire",
                self.inner.job_set_next_fire(id, expected, new)
            )
        }
        async fn job_due(
            &self,
            now: Timestamp,
            limit: usize,
            tags: &[String],
        ) -> StoreResult<Vec<DueJob>> {
            timed!(self, "job_due", self.inner.job_due(now, limit, tags))
        }
        async fn next_due(&self, tags: &[String], set: DueSet) -> StoreResult<Option<Timestamp>> {
            timed!(self, "next_due", self.inner.next_due(tags, set))
        }
        async fn run_claim_due(&self, params: &ClaimParams) -> StoreResult<Vec<ClaimedRun>> {
            timed!(self, "run_claim_due", self.inner.run_claim_due(params))
        }
        async fn run_insert_skipped(&self, run: &Run) -> StoreResult<Run> {
            timed!(
                self,
                "run_insert_skipped",
                self.inner.run_insert_skipped(run)
            )
        }
        async fn run_enqueue(
            &self,
            job: JobId,
            fire: Timestamp,
            now: Timestamp,
        ) -> StoreResult<Run> {
            timed!(self, "run_enqueue", self.inner.run_enqueue(job, fire, now))
        }
        async fn run_set_state_if_running(
            &self,
            id: RunId,
            expected_attempt: u32,
            finish: &RunFinish,
        ) -> StoreResult<Run> {
            timed!(
                self,
                "run_set_state_if_running",
                self.inner
                    .run_set_state_if_running(id, expected_attempt, finish)
            )
        }
        async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
            timed!(self, "run_get", self.inner.run_get(id))
        }
        async fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
            timed!(self, "run_list", self.inner.run_list(filter))
        }
        async fn lease_renew(
            &self,
            node: &NodeId,
            instance: &InstanceId,
            until: Timestamp,
            now: Timestamp,
        ) -> StoreResult<Vec<RunId>> {
            timed!(
                self,
                "lease_renew",
                self.inner.lease_renew(node, instance, until, now)
            )
        }
        async fn run_recover_expired(
            &self,
            now: Timestamp,
            restart: Option<(&NodeId, &InstanceId)>,
        ) -> StoreResult<Vec<Run>> {
            timed!(
                self,
                "run_recover_expired",
                self.inner.run_recover_expired(now, restart)
            )
        }
        async fn node_register(&self, reg: &Registration) -> StoreResult<Registered> {
            timed!(self, "node_register", self.inner.node_register(reg))
        }
        async fn node_stopped(
            &self,
            node: &NodeId,
            instance: &InstanceId,
            now: Timestamp,
        ) -> StoreResult<()> {
            timed!(
                self,
                "node_stopped",
                self.inner.node_stopped(node, instance, now)
            )
        }
        async fn node_list(&self) -> StoreResult<Vec<NodeStatus>> {
            timed!(self, "node_list", self.inner.node_list())
        }
        async fn node_sessions(
            &self,
            from: Timestamp,
            to: Timestamp,
        ) -> StoreResult<Vec<takt_core::node::NodeSession>> {
            timed!(self, "node_sessions", self.inner.node_sessions(from, to))
        }
        async fn runs_between(
            &self,
            job: Option<JobId>,
            from: Timestamp,
            to: Timestamp,
        ) -> StoreResult<Vec<Run>> {
            timed!(self, "runs_between", self.inner.runs_between(job, from, to))
        }
        async fn run_attempts(&self, run: RunId) -> StoreResult<Vec<takt_core::attempt::Attempt>> {
            timed!(self, "run_attempts", self.inner.run_attempts(run))
        }
        async fn attempts_between(
            &self,
            job: Option<JobId>,
            from: Timestamp,
            to: Timestamp,
        ) -> StoreResult<Vec<takt_core::attempt::Attempt>> {
            timed!(
                self,
                "attempts_between",
                self.inner.attempts_between(job, from, to)
            )
        }
        async fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()> {
            timed!(self, "run_progress", self.inner.run_progress(id, progress))
        }
        async fn log_append(&self, run: RunId, lines: &[LogLine]) -> StoreResult<()> {
            timed!(self, "log_append", self.inner.log_append(run, lines))
        }
        async fn log_list(
            &self,
            run: RunId,
            after: Option<u64>,
            limit: usize,
        ) -> StoreResult<Vec<(u64, LogLine)>> {
            timed!(self, "log_list", self.inner.log_list(run, after, limit))
        }
        async fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
            timed!(
                self,
                "retention_purge",
                self.inner.retention_purge(older_than)
            )
        }
        async fn pause(&self, target: &PauseTarget, pause: &Pause) -> StoreResult<Vec<JobId>> {
            timed!(self, "pause", self.inner.pause(target, pause))
        }
        async fn resume(&self, target: &PauseTarget, now: Timestamp) -> StoreResult<Resumed> {
            timed!(self, "resume", self.inner.resume(target, now))
        }
        async fn job_paused(&self, id: JobId) -> StoreResult<Option<(PauseTarget, Pause)>> {
            timed!(self, "job_paused", self.inner.job_paused(id))
        }
        async fn node_paused(&self, node: &NodeId) -> StoreResult<Option<Pause>> {
            timed!(self, "node_paused", self.inner.node_paused(node))
        }
        async fn pause_list(&self) -> StoreResult<Vec<(PauseTarget, Pause)>> {
            timed!(self, "pause_list", self.inner.pause_list())
        }
        async fn group_list(
            &self,
            now: Timestamp,
        ) -> StoreResult<Vec<takt_core::group::GroupStatus>> {
            timed!(self, "group_list", self.inner.group_list(now))
        }
        async fn group_status(
            &self,
            name: &str,
            now: Timestamp,
        ) -> StoreResult<takt_core::group::GroupStatus> {
            timed!(self, "group_status", self.inner.group_status(name, now))
        }
        async fn group_set(
            &self,
            name: &str,
            max_running: Option<u32>,
        ) -> StoreResult<takt_core::group::GroupDef> {
            timed!(self, "group_set", self.inner.group_set(name, max_running))
        }
        async fn run_cancel(
            &self,
            id: RunId,
            by: &str,
            now: Timestamp,
        ) -> StoreResult<CancelOutcome> {
            timed!(self, "run_cancel", self.inner.run_cancel(id, by, now))
        }
        async fn cancel_requests(&self, node: &NodeId) -> StoreResult<Vec<CancelRequest>> {
            timed!(self, "cancel_requests", self.inner.cancel_requests(node))
        }
        async fn cancel_request_of(&self, id: RunId) -> StoreResult<Option<CancelRequest>> {
            timed!(self, "cancel_request_of", self.inner.cancel_request_of(id))
        }
        async fn run_backfill(
            &self,
            id: JobId,
            from: Timestamp,
            to: Timestamp,
            max: usize,
            now: Timestamp,
        ) -> StoreResult<Backfilled> {
            timed!(
                self,
                "run_backfill",
                self.inner.run_backfill(id, from, to, max, now)
            )
        }
        async fn token_insert(
            &self,
            token: &takt_core::store::access::NewToken,
        ) -> StoreResult<takt_core::store::access::ApiToken> {
            timed!(self, "token_insert", self.inner.token_insert(token))
        }
        async fn token_list(&self) -> StoreResult<Vec<takt_core::store::access::ApiToken>> {
            timed!(self, "token_list", self.inner.token_list())
        }
        async fn token_revoke(
            &self,
            name: &str,
            now: Timestamp,
        ) -> StoreResult<takt_core::store::access::ApiToken> {
            timed!(self, "token_revoke", self.inner.token_revoke(name, now))
        }
        async fn action_insert(
            &self,
            action: &takt_core::store::access::OperatorAction,
        ) -> StoreResult<()> {
            timed!(self, "action_insert", self.inner.action_insert(action))
        }
        async fn action_list(
            &self,
            job: Option<&str>,
            limit: usize,
        ) -> StoreResult<Vec<takt_core::store::access::OperatorAction>> {
            timed!(self, "action_list", self.inner.action_list(job, limit))
        }
        async fn alert_open(
            &self,
            key: &takt_core::alert::AlertKey,
            episode: &str,
            now: Timestamp,
        ) -> StoreResult<bool> {
            timed!(self, "alert_open", self.inner.alert_open(key, episode, now))
        }
        async fn alert_close(
            &self,
            key: &takt_core::alert::AlertKey,
            now: Timestamp,
        ) -> StoreResult<bool> {
            timed!(self, "alert_close", self.inner.alert_close(key, now))
        }
        async fn alert_delivery_add(
            &self,
            delivery: &takt_core::alert::AlertDelivery,
        ) -> StoreResult<i64> {
            timed!(
                self,
                "alert_delivery_add",
                self.inner.alert_delivery_add(delivery)
            )
        }
        async fn alert_delivery_list(
            &self,
            limit: usize,
        ) -> StoreResult<Vec<takt_core::alert::AlertDelivery>> {
            timed!(
                self,
                "alert_delivery_list",
                self.inner.alert_delivery_list(limit)
            )
        }
        async fn run_children(&self, parent: RunId) -> StoreResult<Vec<Run>> {
            timed!(self, "run_children", self.inner.run_children(parent))
        }
        async fn run_last_success_fire(
            &self,
            job: JobId,
            before: Timestamp,
        ) -> StoreResult<Option<Timestamp>> {
            timed!(
                self,
                "run_last_success_fire",
                self.inner.run_last_success_fire(job, before)
            )
        }
        async fn run_set_params(
            &self,
            id: RunId,
            attempt: u32,
            params_json: &str,
        ) -> StoreResult<()> {
            timed!(
                self,
                "run_set_params",
                self.inner.run_set_params(id, attempt, params_json)
            )
        }
    }
}

/// PostgreSQL helpers for B5 and B6: the server's per-database counters, waiting until a
/// database has no client left (so that every backend has flushed its statistics), and a
/// counting proxy that tells how many statements a contender sends.
pub mod pg {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_postgres::{Client, NoTls};

    /// Connects to `url` and drives the connection on the current runtime.
    pub async fn connect(url: &str) -> Client {
        let (client, conn) = tokio_postgres::connect(url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                eprintln!("postgres connection ended: {e}");
            }
        });
        client
    }

    /// One reading of `pg_stat_database` for a database.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct DbStats {
        /// Committed transactions, read-only ones included (every statement outside
        /// `BEGIN … COMMIT` is a transaction of its own).
        pub xact_commit: i64,
        /// Rolled-back transactions.
        pub xact_rollback: i64,
        /// Rows inserted, updated and deleted.
        pub tup_written: i64,
    }

    impl DbStats {
        /// `self − before`.
        pub fn since(self, before: DbStats) -> DbStats {
            DbStats {
                xact_commit: self.xact_commit - before.xact_commit,
                xact_rollback: self.xact_rollback - before.xact_rollback,
                tup_written: self.tup_written - before.tup_written,
            }
        }
    }

    /// Reads the counters of `db`. `admin` must be connected to another database, so that its
    /// own queries are not counted. PostgreSQL 15 keeps a backend's counts locally and flushes
    /// them at most once a second and when the backend exits: call [`wait_idle`] first.
    pub async fn db_stats(admin: &Client, db: &str) -> DbStats {
        let row = admin
            .query_one(
                "SELECT xact_commit, xact_rollback, tup_inserted + tup_updated + tup_deleted \
                 FROM pg_stat_database WHERE datname = $1",
                &[&db],
            )
            .await
            .expect("pg_stat_database is readable");
        DbStats {
            xact_commit: row.get(0),
            xact_rollback: row.get(1),
            tup_written: row.get(2),
        }
    }

    /// Waits until no backend is connected to `db` (every client closed and every backend
    /// exited, which flushes its statistics), then 100 ms more. Returns false after `limit`.
    pub async fn wait_idle(admin: &Client, db: &str, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            let n: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                    &[&db],
                )
                .await
                .expect("pg_stat_activity is readable")
                .get(0);
            if n == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the clients of a [`Wire`] proxy sent.
    #[derive(Clone, Debug, Default)]
    pub struct WireTally {
        /// Connections opened through the proxy.
        pub connections: u64,
        /// Simple-protocol queries (`Q`; takt's and sqlx's `BEGIN` / `COMMIT` are sent so).
        pub simple: u64,
        /// Extended-protocol executions (`E`): one per prepared statement run.
        pub executes: u64,
        /// Executions and simple queries by statement text (whitespace collapsed, cut to 90
        /// characters).
        pub by_text: BTreeMap<String, u64>,
    }

    impl WireTally {
        /// All statements: simple queries plus executions.
        pub fn statements(&self) -> u64 {
            self.simple + self.executes
        }

        /// Statements other than `BEGIN`, `COMMIT` and `ROLLBACK`.
        pub fn work_statements(&self) -> u64 {
            self.by_text
                .iter()
                .filter(|(t, _)| !is_tx_control(t))
                .map(|(_, n)| n)
                .sum()
        }
    }

    fn is_tx_control(text: &str) -> bool {
        let t = text.trim().to_ascii_uppercase();
        t.starts_with("BEGIN")
            || t.starts_with("START TRANSACTION")
            || t.starts_with("COMMIT")
            || t.starts_with("ROLLBACK")
    }

    /// A TCP proxy in front of PostgreSQL that parses what clients send (the frontend side of
    /// the wire protocol) and counts statements; the server's replies pass through untouched.
    /// It costs a hop per round trip, so rounds timed for throughput do not go through it.
    pub struct Wire {
        /// The local port to connect to instead of the server's.
        pub port: u16,
        tally: Arc<Mutex<WireTally>>,
    }

    impl Wire {
        /// Listens on a free local port, forwarding to `upstream` (`host:port`).
        pub async fn start(upstream: String) -> Wire {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a local port for the proxy");
            let port = listener.local_addr().expect("bound").port();
            let tally = Arc::new(Mutex::new(WireTally::default()));
            let t = tally.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let upstream = upstream.clone();
                    let t = t.clone();
                    tokio::spawn(async move {
                        if let Err(e) = relay(client, &upstream, t).await {
                            eprintln!("proxy connection ended: {e}");
                        }
                    });
                }
            });
            Wire { port, tally }
        }

        /// The counts since the last call, and starts counting afresh.
        pub fn take(&self) -> WireTally {
            std::mem::take(&mut *self.tally.lock().unwrap_or_else(|e| e.into_inner()))
        }
    }

    /// The wire protocol's `SSLRequest` and `GSSENCRequest` codes.
    const SSL_REQUEST: u32 = 80_877_103;
    const GSS_REQUEST: u32 = 80_877_104;

    async fn relay(
        mut client: TcpStream,
        upstream: &str,
        tally: Arc<Mutex<WireTally>>,
    ) -> std::io::Result<()> {
        client.set_nodelay(true)?;
        let mut server = TcpStream::connect(upstream).await?;
        server.set_nodelay(true)?;
        // Untyped start-up messages: answer an encryption request with "no" (the proxy speaks
        // plain text), forward the startup packet.
        loop {
            let len = client.read_u32().await?;
            let mut body = vec![0; (len as usize).saturating_sub(4)];
            client.read_exact(&mut body).await?;
            let code = u32::from_be_bytes(body[..4].try_into().unwrap_or([0; 4]));
            if code == SSL_REQUEST || code == GSS_REQUEST {
                client.write_all(b"N").await?;
                continue;
            }
            server.write_all(&len.to_be_bytes()).await?;
            server.write_all(&body).await?;
            break;
        }
        tally.lock().unwrap_or_else(|e| e.into_inner()).connections += 1;
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let back = tokio::spawn(async move { tokio::io::copy(&mut sr, &mut cw).await });
        let mut parser = Parser::default();
        let mut buf = vec![0; 64 * 1024];
        loop {
            let n = cr.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            sw.write_all(&buf[..n]).await?;
            parser.feed(&buf[..n], &tally);
        }
        let _ = sw.shutdown().await;
        back.abort();
        Ok(())
    }

    /// Frontend messages of one connection: statement texts by prepared-statement name and
    /// portals by name, to attribute each `Execute` to its SQL.
    #[derive(Default)]
    struct Parser {
        pending: Vec<u8>,
        statements: HashMap<Vec<u8>, String>,
        portals: HashMap<Vec<u8>, Vec<u8>>,
    }

    fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
        match b.iter().position(|&c| c == 0) {
            Some(i) => (&b[..i], &b[i + 1..]),
            None => (b, &[]),
        }
    }

    fn shorten(sql: &[u8]) -> String {
        let s = String::from_utf8_lossy(sql);
        let mut out = String::new();
        for w in s.split_whitespace() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(w);
        }
        if out.chars().count() > 90 {
            out = out.chars().take(90).collect::<String>() + "…";
        }
        out
    }

    impl Parser {
        fn feed(&mut self, data: &[u8], tally: &Mutex<WireTally>) {
            self.pending.extend_from_slice(data);
            let mut at = 0;
            while self.pending.len() - at >= 5 {
                let kind = self.pending[at];
                let len = u32::from_be_bytes(
                    self.pending[at + 1..at + 5].try_into().expect("four bytes"),
                ) as usize;
                if self.pending.len() - at < 1 + len {
                    break;
                }
                let body = self.pending[at + 5..at + 1 + len].to_vec();
                at += 1 + len;
                self.message(kind, &body, tally);
            }
            self.pending.drain(..at);
        }

        fn message(&mut self, kind: u8, body: &[u8], tally: &Mutex<WireTally>) {
            match kind {
                b'P' => {
                    let (name, rest) = cstr(body);
                    let (sql, _) = cstr(rest);
                    self.statements.insert(name.to_vec(), shorten(sql));
                }
                b'B' => {
                    let (portal, rest) = cstr(body);
                    let (stmt, _) = cstr(rest);
                    self.portals.insert(portal.to_vec(), stmt.to_vec());
                }
                b'E' => {
                    let (portal, _) = cstr(body);
                    let text = self
                        .portals
                        .get(portal)
                        .and_then(|s| self.statements.get(s))
                        .cloned()
                        .unwrap_or_else(|| "(unknown statement)".into());
                    let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                    t.executes += 1;
                    *t.by_text.entry(text).or_default() += 1;
                }
                b'Q' => {
                    let (sql, _) = cstr(body);
                    let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                    t.simple += 1;
                    *t.by_text.entry(shorten(sql)).or_default() += 1;
                }
                _ => {}
            }
        }
    }
}

/// A minimal HTTP/1.1 client for timing takt's API and dashboard (B12, scale): one kept-alive
/// connection, requests written by hand so that nothing but the server is measured.
pub mod http {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// One kept-alive HTTP/1.1 connection.
    pub struct Conn {
        tcp: TcpStream,
        buf: Vec<u8>,
    }

    impl Conn {
        /// Connects to `addr` with Nagle off (each request is one small write).
        pub async fn connect(addr: std::net::SocketAddr) -> Conn {
            let tcp = TcpStream::connect(addr).await.expect("connect");
            tcp.set_nodelay(true).expect("nodelay");
            Conn {
                tcp,
                buf: Vec::new(),
            }
        }

        /// Sends `req` and reads one response: its head (lower-cased) and body.
        pub async fn send(&mut self, req: &str) -> (String, Vec<u8>) {
            self.tcp.write_all(req.as_bytes()).await.expect("send");
            self.buf.clear();
            let mut chunk = vec![0u8; 1 << 20];
            let (head_end, length) = loop {
                let n = self.tcp.read(&mut chunk).await.expect("read");
                assert!(n > 0, "the server closed the connection");
                self.buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse().expect("a length"));
                    break (end + 4, length);
                }
            };
            while self.buf.len() < head_end + length {
                let n = self.tcp.read(&mut chunk).await.expect("read");
                assert!(n > 0, "the server closed the connection");
                self.buf.extend_from_slice(&chunk[..n]);
            }
            let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
            (head, self.buf[head_end..head_end + length].to_vec())
        }

        /// A GET that must answer 200, with `cookie` sent when not empty.
        pub async fn get_with(&mut self, path: &str, cookie: &str) -> Vec<u8> {
            let cookie = if cookie.is_empty() {
                String::new()
            } else {
                format!("Cookie: {cookie}\r\n")
            };
            let (head, body) = self
                .send(&format!(
                    "GET {path} HTTP/1.1\r\nHost: bench\r\n{cookie}\r\n"
                ))
                .await;
            assert!(
                head.to_ascii_lowercase().starts_with("http/1.1 200"),
                "{path}: {head}"
            );
            body
        }

        pub async fn get(&mut self, path: &str) -> Vec<u8> {
            self.get_with(path, "").await
        }

        /// Signs in to the dashboard as a loopback user of a host without tokens (the sign-in
        /// form's nonce cookie and field, then the session cookie) and returns the cookies.
        pub async fn sign_in(&mut self) -> String {
            let (head, body) = self
                .send("GET /ui/signin HTTP/1.1\r\nHost: bench\r\n\r\n")
                .await;
            let mut cookies = set_cookies(&head);
            let body = String::from_utf8_lossy(&body);
            let nonce = body
                .split("name=\"nonce\" value=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .expect("the sign-in form has its nonce");
            let form = format!("nonce={nonce}&next=%2Fui%2F&token=");
            let (head, _) = self
                .send(&format!(
                    "POST /ui/signin HTTP/1.1\r\nHost: bench\r\nCookie: {}\r\n\
                     Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
                    cookies.join("; "),
                    form.len()
                ))
                .await;
            assert!(head.starts_with("HTTP/1.1 303"), "sign-in: {head}");
            cookies.extend(set_cookies(&head));
            cookies.join("; ")
        }
    }

    /// The `name=value` of every `Set-Cookie` of a response head.
    pub fn set_cookies(head: &str) -> Vec<String> {
        head.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("set-cookie")
                    .then(|| v.trim().split(';').next().unwrap_or("").to_string())
            })
            .filter(|c| !c.ends_with('='))
            .collect()
    }
}
