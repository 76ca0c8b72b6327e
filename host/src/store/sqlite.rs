//! [`SqliteStore`]: the core's [`Store`] contract on one SQLite file.
//!
//! The schema is `sql/sqlite/` ([`mod@super::migrate`]); read `0001_init.sql` for the tables and
//! the storage conventions (instants as Unix milliseconds, policies in their text forms,
//! schedules as [`ScheduleSpec`] JSON). The semantics mirror the reference store,
//! [`takt_core::store::memory::MemoryStore`], method by method, and the core's conformance
//! suite checks that they agree.
//!
//! Connections: the file is opened in WAL mode (readers never block the writer),
//! `synchronous = NORMAL` (durable across a process crash; a power cut may lose the last
//! transactions, never corrupt the file), `foreign_keys = ON` (deleting a job deletes its runs
//! and their logs) and a busy timeout (a writer waits that long for another process's write
//! lock before the call fails as [`takt_core::store::StoreErrorKind::Transient`]).
//!
//! Every write is one short transaction; those that read before they write (claiming, finishing,
//! recovery) start with `BEGIN IMMEDIATE`, which takes the write lock first, so two processes on
//! one file serialise instead of deadlocking on a lock upgrade. Claiming is one such
//! transaction: pick the due jobs and retries, insert runs under the unique (job, fire time)
//! key with `ON CONFLICT DO NOTHING`, and advance each job's next fire with a conditional
//! `UPDATE … WHERE next_fire IS old`.

use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, OnceLock, Weak, mpsc};
use std::time::Duration;

use jiff::Timestamp;
use rusqlite::types::Value;
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior,
    params,
};
use takt_core::job::{JobDef, JobId, JobName};
use takt_core::policy::{MisfirePolicy, OverlapPolicy};
use takt_core::run::{NodeId, Progress, Run, RunId, RunState};
use takt_core::store::backend::{
    add, apply_finish, check_skipped, fire_taken, job_missing, name_taken, next_firing,
    recovery_event, run_missing, show,
};
use takt_core::store::{
    Capabilities, ClaimParams, ClaimedRun, DueJob, LogLevel, LogLine, PurgeCounts, RunFilter,
    RunFinish, Store, StoreError, StoreResult,
};

use tokio::sync::oneshot;

use super::migrate::{self, AppliedMigration, MigrationObserver};
use super::rows::{JOB_COLUMNS, JobRow, RUN_COLUMNS, RunRow, corrupt, to_i64};

/// The most finishes the finishing thread commits in one transaction.
const MAX_FINISH_BATCH: usize = 256;

/// How a [`SqliteStore`] opens its file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How long a write waits for another connection's write lock before failing as
    /// [`takt_core::store::StoreErrorKind::Transient`]. Default 5 s.
    pub busy_timeout: Duration,
    /// Told what the migrations applied at open are doing (none by default).
    pub on_migration: Option<MigrationObserver>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            on_migration: None,
        }
    }
}

impl SqliteOptions {
    /// The same options with another busy timeout.
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// The same options reporting migration progress to `observer`.
    pub fn with_migration_observer(mut self, observer: MigrationObserver) -> Self {
        self.on_migration = Some(observer);
        self
    }
}

/// A [`Store`] on one SQLite file; cheap to clone (clones share one connection).
///
/// Every method but one runs synchronously inside its future — one short transaction on the
/// connection — and is ready on the first poll, so the futures need no reactor. A host loop
/// that must never block its runtime's threads on disk I/O (or on the busy timeout) can call
/// them from `tokio::task::spawn_blocking` (the handle is `Send + Sync + 'static`). Two
/// [`SqliteStore::open`] calls on one file are two connections, like two nodes on one database.
///
/// The exception is [`Store::run_set_state_if_running`], the one write every run makes at its
/// end, from its own task: called on a tokio runtime, it is queued to a *finishing thread* (started on the first
/// finish, ended when the last clone is dropped) and its future waits for the answer without
/// blocking the caller's thread. The thread commits whatever finishes have queued up in one
/// `BEGIN IMMEDIATE` transaction (group commit), each one still its own compare-and-set on
/// (state running, attempt) with its own answer; a future resolves only after the
/// transaction holding its finish committed, so an `Ok` is as durable as before. Any driver
/// failure inside a batch rolls the whole batch back and retries each finish in a
/// transaction of its own, so one bad finish never decides another's answer. Why: with one
/// write transaction per finished run, a burst of short runs spends most of its time
/// committing (and, synchronously, blocks the runtime's worker threads meanwhile; B3).
#[derive(Clone, Debug)]
pub struct SqliteStore {
    inner: Arc<Shared>,
    path: Arc<str>,
}

/// What the clones of a store share: the connection and the finishing thread's queue (the
/// thread holds only a [`Weak`] reference, so dropping the last clone closes both).
#[derive(Debug)]
struct Shared {
    path: Arc<str>,
    db: Mutex<Db>,
    finisher: OnceLock<Option<mpsc::Sender<FinishReq>>>,
}

/// One finish waiting for the finishing thread.
#[derive(Debug)]
struct FinishReq {
    id: RunId,
    attempt: u32,
    finish: RunFinish,
    reply: oneshot::Sender<StoreResult<Run>>,
}

#[derive(Debug)]
struct Db {
    conn: Connection,
    path: Arc<str>,
    /// The checkpointing thread ([`checkpoint_in_background`]), if it runs.
    checkpointer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Db {
    /// Ends the checkpointing thread (and closes its connection) before `conn` closes, so
    /// that `conn` is the file's last connection when it does: SQLite then checkpoints the
    /// whole WAL and removes it, and a stopped host leaves a self-contained database file, as
    /// without the thread (a copy of `takt.db` alone is a complete backup).
    fn drop(&mut self) {
        if let Some(thread) = self.checkpointer.take() {
            // Dropping the hook drops the thread's sender: its wait ends.
            let _ = self
                .conn
                .wal_hook(None::<fn(&mut rusqlite::hooks::Wal, i32) -> rusqlite::Result<()>>);
            let _ = thread.join();
        }
    }
}

impl SqliteStore {
    /// Opens (creating) the database at `path`, sets WAL, `synchronous = NORMAL`,
    /// `foreign_keys = ON` and the busy timeout, and applies the migrations it lacks.
    ///
    /// A file that is not a SQLite database (or is corrupt), a read-only file and a database
    /// migrated by a newer takt are refused with an error saying what to do; such a file is
    /// left untouched.
    pub fn open(path: impl AsRef<Path>, options: &SqliteOptions) -> StoreResult<SqliteStore> {
        let path = path.as_ref();
        let mut conn = connect(path, options)?;
        let shown: Arc<str> = path.display().to_string().into();
        migrate::apply(&mut conn, &shown, options.on_migration.as_ref())?;
        let checkpointer = checkpoint_in_background(&mut conn, path, options, &shown);
        Ok(SqliteStore::from_conn(conn, shown, checkpointer))
    }

    /// A private in-memory database (for tests; clones share it, other opens do not).
    pub fn open_in_memory() -> StoreResult<SqliteStore> {
        let shown: Arc<str> = ":memory:".into();
        let mut conn = Connection::open_in_memory().map_err(|e| sql_error(&shown, "opening", e))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| sql_error(&shown, "enabling foreign keys", e))?;
        migrate::apply(&mut conn, &shown, None)?;
        Ok(SqliteStore::from_conn(conn, shown, None))
    }

    fn from_conn(
        conn: Connection,
        path: Arc<str>,
        checkpointer: Option<std::thread::JoinHandle<()>>,
    ) -> SqliteStore {
        SqliteStore {
            inner: Arc::new(Shared {
                path: path.clone(),
                db: Mutex::new(Db {
                    conn,
                    path: path.clone(),
                    checkpointer,
                }),
                finisher: OnceLock::new(),
            }),
            path,
        }
    }

    /// The database file as given to [`SqliteStore::open`] (`:memory:` for an in-memory one).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The schema version of the database (the last migration applied).
    pub fn schema_version(&self) -> StoreResult<u32> {
        let db = self.lock()?;
        migrate::current_version(&db.conn, &db.path)
    }

    /// Applies migrations this binary knows and the database lacks (none after a successful
    /// [`SqliteStore::open`], unless another process rolled the file back).
    pub fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        let mut db = self.lock()?;
        let Db { conn, path, .. } = &mut *db;
        migrate::apply(conn, path, None)
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, Db>> {
        lock_db(&self.inner)
    }

    /// Queues a finish to the finishing thread (started on first use); gives the request
    /// back when there is no thread to take it.
    fn queue_finish(&self, req: FinishReq) -> Result<(), Box<FinishReq>> {
        let sender = self.inner.finisher.get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            let shared = Arc::downgrade(&self.inner);
            let started = std::thread::Builder::new()
                .name("takt-sqlite-finish".into())
                .spawn(move || finish_loop(&shared, &rx));
            match started {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(
                        "cannot start the sqlite finishing thread ({e}); finishes run on the \
                         caller's thread"
                    );
                    None
                }
            }
        });
        match sender {
            Some(sender) => sender.send(req).map_err(|e| Box::new(e.0)),
            None => Err(Box::new(req)),
        }
    }

    /// Runs `f` with the connection (synchronously; see the type's docs).
    fn with<T>(&self, f: impl FnOnce(&mut Db) -> StoreResult<T>) -> StoreResult<T> {
        let mut db = self.lock()?;
        f(&mut db)
    }
}

fn lock_db(shared: &Shared) -> StoreResult<MutexGuard<'_, Db>> {
    shared.db.lock().map_err(|_| {
        StoreError::other(format!(
            "the connection to {} is poisoned: a thread panicked while using it; open the \
                 store again",
            shared.path
        ))
    })
}

/// The finishing thread: takes the first queued finish and every one queued behind it (up to
/// [`MAX_FINISH_BATCH`]) and commits them together; ends when every store clone is gone.
fn finish_loop(shared: &Weak<Shared>, rx: &mpsc::Receiver<FinishReq>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_FINISH_BATCH {
            match rx.try_recv() {
                Ok(req) => batch.push(req),
                Err(_) => break,
            }
        }
        // Every clone gone (the queue outlives them only by this batch): nobody waits.
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match lock_db(&shared) {
            Ok(mut db) => db.finish_batch(batch),
            Err(e) => {
                for req in batch {
                    let _ = req.reply.send(Err(same_error(&e)));
                }
            }
        }
    }
}

/// The WAL size, in pages, at which a commit asks the checkpointing thread to run (SQLite's
/// own automatic checkpoint threshold).
const CHECKPOINT_PAGES: i32 = 1000;

/// Moves WAL checkpoints off the store's connection onto a thread of their own.
///
/// SQLite checkpoints automatically inside the commit that grows the WAL past 1 000 pages:
/// that commit copies the WAL into the database file and syncs both, a few milliseconds
/// (B4: one due run in ~50 took 5–7 ms instead of ~1 ms, always a claim or finish that
/// happened to checkpoint; the fire's start waited for it). Here `conn` keeps no automatic
/// checkpoint; its commits only signal the thread when the WAL has passed the threshold,
/// and the thread runs a PASSIVE checkpoint on a second connection, which waits for
/// nobody and holds up no writer. The WAL stays bounded as before.
///
/// If the second connection or the thread cannot be had, `conn` keeps SQLite's automatic
/// checkpoints (slower fires, nothing lost). Returns the thread, which ends when the hook
/// is removed or `conn` is closed (see `Db`'s `Drop`).
fn checkpoint_in_background(
    conn: &mut Connection,
    path: &Path,
    options: &SqliteOptions,
    shown: &str,
) -> Option<std::thread::JoinHandle<()>> {
    let checkpointer = match connect(path, options) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("{e}; checkpoints stay in the commits of {shown}");
            return None;
        }
    };
    let (tx, rx) = mpsc::sync_channel::<()>(1);
    let thread_path = shown.to_string();
    let started = std::thread::Builder::new()
        .name("takt-sqlite-checkpoint".into())
        .spawn(move || checkpoint_loop(&checkpointer, &rx, &thread_path));
    let thread = match started {
        Ok(thread) => thread,
        Err(e) => {
            tracing::warn!(
                "cannot start the sqlite checkpointing thread ({e}); checkpoints stay in the \
                 commits of {shown}"
            );
            return None;
        }
    };
    // Replaces SQLite's automatic checkpoint, which is itself a WAL hook. A full channel
    // means a checkpoint is already asked for.
    let hooked = conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
        if pages >= CHECKPOINT_PAGES {
            let _ = tx.try_send(());
        }
        Ok(())
    }));
    if let Err(e) = hooked {
        // The hook, and with it the thread's sender, is dropped: the thread ends on its own.
        tracing::warn!("cannot hook the WAL of {shown} ({e}); checkpoints stay in its commits");
        drop(thread);
        return None;
    }
    Some(thread)
}

/// The checkpointing thread: a PASSIVE checkpoint each time a commit asks for one; ends when
/// the store's connection (and with it the hook holding the sender) is closed.
fn checkpoint_loop(conn: &Connection, asks: &mpsc::Receiver<()>, path: &str) {
    let mut failing = false;
    while asks.recv().is_ok() {
        match conn.wal_checkpoint_v2(None::<&str>, rusqlite::wal::CheckpointMode::PASSIVE) {
            Ok(_) => failing = false,
            // Another connection (another process) is checkpointing: it does the work.
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {}
            Err(e) => {
                // Once per streak: the next commit past the threshold asks again.
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!("checkpointing the WAL of {path} failed: {e}");
                }
            }
        }
    }
}

/// A copy of `e` (kind and message) for each caller of a failed batch.
fn same_error(e: &StoreError) -> StoreError {
    StoreError::new(e.kind(), e.to_string())
}

/// Opens a connection to `path` with the store's settings, refusing corrupt, foreign and
/// read-only files before anything is written.
pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> StoreResult<Connection> {
    let shown = path.display().to_string();
    if let Ok(meta) = std::fs::metadata(path)
        && meta.is_file()
        && meta.permissions().readonly()
    {
        return Err(read_only(&shown));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| sql_error(&shown, "opening", e))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(|e| sql_error(&shown, "setting the busy timeout", e))?;
    // Every statement of the loop's passes and of a fire's path stays prepared (the default
    // cache of 16 would evict some of them each pass).
    conn.set_prepared_statement_cache_capacity(64);
    // Read the header first: a file that is not a database fails here, before any write.
    conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_err(|e| sql_error(&shown, "reading the schema", e))?;
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| sql_error(&shown, "opening", e))?
    {
        return Err(read_only(&shown));
    }
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| sql_error(&shown, "enabling foreign keys", e))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| sql_error(&shown, "switching to WAL", e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::other(format!(
            "the database {shown} refused WAL journaling (it stays in {mode} mode); put it on a \
             local file system that supports shared memory (not a network share)"
        )));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(|e| sql_error(&shown, "setting synchronous", e))?;
    Ok(conn)
}

fn read_only(path: &str) -> StoreError {
    StoreError::other(format!(
        "the database file {path} is read-only; give the host's account write access to it and \
         to its directory (SQLite writes -wal and -shm files beside it)"
    ))
}

/// Maps a driver error to a [`StoreError`] whose kind the host can act on; `what` says what
/// the store was doing.
pub(crate) fn sql_error(path: &str, what: &str, e: rusqlite::Error) -> StoreError {
    let code = e.sqlite_error_code();
    let message = match code {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            return StoreError::transient(format!(
                "the database {path} is busy ({what}): another connection held its write lock \
                 longer than the busy timeout; retry"
            ))
            .with_source(e);
        }
        Some(ErrorCode::ConstraintViolation) => {
            return StoreError::conflict(format!(
                "{what} in {path} violates a constraint ({e}); another node may have written \
                 the same row first: reload and decide again"
            ))
            .with_source(e);
        }
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => format!(
            "the file {path} is not a takt SQLite database or is corrupt ({e}); restore it from \
             a backup or point the store to another file (takt left this one untouched)"
        ),
        Some(ErrorCode::ReadOnly) => return read_only(path).with_source(e),
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => format!(
            "cannot open the database file {path} ({e}); check that its directory exists and \
             that the host's account may read and write there"
        ),
        Some(ErrorCode::DiskFull) => {
            format!("the disk holding the database {path} is full ({what}); free space, then retry")
        }
        Some(ErrorCode::SystemIoFailure) => format!(
            "i/o error on the database {path} while {what} ({e}); check the disk and the file \
             system"
        ),
        _ => format!("sqlite error on {path} while {what}: {e}"),
    };
    StoreError::other(message).with_source(e)
}

// ---- conversions -------------------------------------------------------------------------

fn ms(t: Timestamp) -> i64 {
    t.as_millisecond()
}

fn opt_ms(t: Option<Timestamp>) -> Option<i64> {
    t.map(ms)
}

impl JobRow {
    fn read(r: &Row<'_>) -> rusqlite::Result<JobRow> {
        Ok(JobRow {
            id: r.get(0)?,
            name: r.get(1)?,
            group: r.get(2)?,
            handler_type: r.get(3)?,
            params_json: r.get(4)?,
            schedule_json: r.get(5)?,
            enabled: r.get(6)?,
            effective_from: r.get(7)?,
            expires_at: r.get(8)?,
            timeout_ms: r.get(9)?,
            retry_max: r.get(10)?,
            retry_backoff: r.get(11)?,
            retry_timeouts: r.get(12)?,
            misfire: r.get(13)?,
            overlap: r.get(14)?,
            priority: r.get(15)?,
            dependencies: r.get(16)?,
            node_tag: r.get(17)?,
            application: r.get(18)?,
            owner: r.get(19)?,
            description: r.get(20)?,
            isolation: r.get(21)?,
            next_fire: r.get(22)?,
            version: r.get(23)?,
            updated_at: r.get(24)?,
        })
    }
}

/// The column values of a job's definition (everything but id, version, updated_at and
/// next fire), in `JOB_COLUMNS` order from `group_name` to `isolation`.
fn job_values(job: &JobDef) -> StoreResult<Vec<Value>> {
    let r = JobRow::of(job, Timestamp::UNIX_EPOCH)?;
    let text = |v: Option<String>| v.map_or(Value::Null, Value::Text);
    let int = |v: Option<i64>| v.map_or(Value::Null, Value::Integer);
    Ok(vec![
        text(r.group),
        Value::Text(r.handler_type),
        Value::Text(r.params_json),
        text(r.schedule_json),
        Value::Integer(i64::from(r.enabled)),
        int(r.effective_from),
        int(r.expires_at),
        int(r.timeout_ms),
        Value::Integer(r.retry_max),
        Value::Text(r.retry_backoff),
        Value::Integer(i64::from(r.retry_timeouts)),
        Value::Text(r.misfire),
        Value::Text(r.overlap),
        Value::Integer(r.priority),
        Value::Text(r.dependencies),
        text(r.node_tag),
        text(r.application),
        text(r.owner),
        text(r.description),
        Value::Text(r.isolation),
    ])
}

impl RunRow {
    fn read(r: &Row<'_>) -> rusqlite::Result<RunRow> {
        Ok(RunRow {
            id: r.get(0)?,
            job_id: r.get(1)?,
            fire_time: r.get(2)?,
            state: r.get(3)?,
            attempt: r.get(4)?,
            created_at: r.get(5)?,
            started_at: r.get(6)?,
            finished_at: r.get(7)?,
            node_id: r.get(8)?,
            lease_expires_at: r.get(9)?,
            error: r.get(10)?,
            result_json: r.get(11)?,
            elapsed_ms: r.get(12)?,
            progress_done: r.get(13)?,
            progress_total: r.get(14)?,
            progress_message: r.get(15)?,
            skip_reason: r.get(16)?,
            next_attempt_at: r.get(17)?,
            plugin: r.get(18)?,
            plugin_version: r.get(19)?,
            plugin_sha256: r.get(20)?,
        })
    }
}

/// The values of every column of `run` but `id`, `job_id` and `fire_time`, in `RUN_COLUMNS`
/// order from `state`.
fn run_values(run: &Run) -> StoreResult<Vec<Value>> {
    let r = RunRow::of(run)?;
    let text = |v: Option<String>| v.map_or(Value::Null, Value::Text);
    let int = |v: Option<i64>| v.map_or(Value::Null, Value::Integer);
    Ok(vec![
        Value::Text(r.state),
        Value::Integer(r.attempt),
        Value::Integer(r.created_at),
        int(r.started_at),
        int(r.finished_at),
        text(r.node_id),
        int(r.lease_expires_at),
        text(r.error),
        text(r.result_json),
        int(r.elapsed_ms),
        int(r.progress_done),
        int(r.progress_total),
        text(r.progress_message),
        text(r.skip_reason),
        int(r.next_attempt_at),
        text(r.plugin),
        text(r.plugin_version),
        text(r.plugin_sha256),
    ])
}

// ---- the queries -------------------------------------------------------------------------

/// What one claim call may pick: a job's fire or a pending retry, with its sort key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    priority: i64,
    at: i64,
    id: i64,
    retry: bool,
}

// The statements of the per-fire path, built once: `prepare_cached` keys its cache by the SQL
// text, and parsing dominated a claim before (B7).
static GET_JOB: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"));
static GET_RUN: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"));
static INSERT_RUN: LazyLock<String> = LazyLock::new(|| {
    let columns = RUN_COLUMNS.trim_start_matches("id, ");
    let marks = vec!["?"; columns.split(", ").count()].join(", ");
    format!(
        "INSERT INTO runs ({columns}) VALUES ({marks}) ON CONFLICT (job_id, fire_time) DO NOTHING"
    )
});
static UPDATE_RUN_IF: LazyLock<String> = LazyLock::new(|| {
    let columns: Vec<&str> = RUN_COLUMNS.split(", ").skip(3).collect();
    let n = columns.len();
    let sets = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = ?{}", i + 1))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "UPDATE runs SET {sets} WHERE id = ?{} AND state = ?{} AND attempt = ?{}",
        n + 1,
        n + 2,
        n + 3
    )
});

fn get_job(tx: &Connection, path: &str, id: JobId) -> StoreResult<Option<JobDef>> {
    tx.prepare_cached(&GET_JOB)
        .and_then(|mut stmt| stmt.query_row([id.0], JobRow::read))
        .optional()
        .map_err(|e| sql_error(path, "reading a job", e))?
        .map(|r| r.into_job(path))
        .transpose()
}

fn need_job(tx: &Connection, path: &str, id: JobId) -> StoreResult<JobDef> {
    get_job(tx, path, id)?.ok_or_else(|| job_missing(id))
}

fn get_run(tx: &Connection, path: &str, id: RunId) -> StoreResult<Option<Run>> {
    tx.prepare_cached(&GET_RUN)
        .and_then(|mut stmt| stmt.query_row([id.0], RunRow::read))
        .optional()
        .map_err(|e| sql_error(path, "reading a run", e))?
        .map(|r| r.into_run(path))
        .transpose()
}

fn need_run(tx: &Connection, path: &str, id: RunId) -> StoreResult<Run> {
    get_run(tx, path, id)?.ok_or_else(|| run_missing(id))
}

fn job_id_by_name(tx: &Connection, path: &str, name: &JobName) -> StoreResult<Option<JobId>> {
    tx.query_row(
        "SELECT id FROM jobs WHERE name = ?1",
        [name.as_str()],
        |r| r.get(0),
    )
    .optional()
    .map(|id| id.map(JobId))
    .map_err(|e| sql_error(path, "looking a job up by name", e))
}

/// Inserts `run` under its (job, fire time) key; `None` when the key is taken.
///
/// The key is looked up first (callers hold the write lock, so the answer stands): an
/// `INSERT` that hits `ON CONFLICT DO NOTHING` still consumes an AUTOINCREMENT id, and ids
/// without gaps read better. The `ON CONFLICT` clause stays as the guarantee.
fn insert_run(tx: &Connection, path: &str, run: &Run) -> StoreResult<Option<RunId>> {
    let taken: Option<i64> = tx
        .prepare_cached("SELECT id FROM runs WHERE job_id = ?1 AND fire_time = ?2")
        .and_then(|mut stmt| stmt.query_row(params![run.job_id.0, ms(run.fire_time)], |r| r.get(0)))
        .optional()
        .map_err(|e| sql_error(path, "looking a run up by fire time", e))?;
    if taken.is_some() {
        return Ok(None);
    }
    let mut values = vec![
        Value::Integer(run.job_id.0),
        Value::Integer(ms(run.fire_time)),
    ];
    values.extend(run_values(run)?);
    let n = tx
        .prepare_cached(&INSERT_RUN)
        .and_then(|mut stmt| stmt.execute(rusqlite::params_from_iter(values)))
        .map_err(|e| sql_error(path, "inserting a run", e))?;
    Ok((n == 1).then(|| RunId(tx.last_insert_rowid())))
}

/// Writes every mutable column of `run` if the stored run is still in `state` with `attempt`;
/// false when it is not.
fn update_run_if(
    tx: &Connection,
    path: &str,
    run: &Run,
    id: RunId,
    state: RunState,
    attempt: u32,
) -> StoreResult<bool> {
    let mut values = run_values(run)?;
    values.extend([
        Value::Integer(id.0),
        Value::Text(state.name().to_string()),
        Value::Integer(i64::from(attempt)),
    ]);
    let changed = tx
        .prepare_cached(&UPDATE_RUN_IF)
        .and_then(|mut stmt| stmt.execute(rusqlite::params_from_iter(values)))
        .map_err(|e| sql_error(path, "updating a run", e))?;
    Ok(changed == 1)
}

fn immediate<'c>(conn: &'c mut Connection, path: &str) -> StoreResult<Transaction<'c>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| sql_error(path, "starting a transaction", e))
}

fn commit(tx: Transaction<'_>, path: &str) -> StoreResult<()> {
    tx.commit()
        .map_err(|e| sql_error(path, "committing a transaction", e))
}

/// The due candidates after the `skip` job ids already handled, at most `need` of each
/// kind, merged in claim order (priority, due time, id: the memory store's order).
fn due(
    conn: &Connection,
    path: &str,
    now: i64,
    need: usize,
    skip: &[i64],
    tags: &str,
) -> StoreResult<Vec<Due>> {
    let limit = i64::try_from(need.saturating_add(skip.len())).unwrap_or(i64::MAX);
    let mut due: Vec<Due> = due_jobs(conn, path, now, limit, tags)?
        .into_iter()
        .filter(|(_, _, id)| !skip.contains(id))
        .take(need)
        .map(|(priority, at, id)| Due {
            priority,
            at,
            id,
            retry: false,
        })
        .collect();
    // Pending runs (retries and queued fires) are few; their query needs no per-level walk.
    let failed = |e| sql_error(path, "finding due runs", e);
    let mut retries = conn
        .prepare_cached(
            "SELECT j.priority, COALESCE(r.next_attempt_at, r.created_at) AS due_at, r.id \
             FROM runs r JOIN jobs j ON j.id = r.job_id \
             WHERE r.state = 'pending' AND COALESCE(r.next_attempt_at, r.created_at) <= ?1 \
               AND j.enabled = 1 \
               AND (j.node_tag IS NULL OR j.node_tag IN (SELECT value FROM json_each(?3))) \
               AND (r.next_attempt_at IS NOT NULL OR NOT EXISTS \
                    (SELECT 1 FROM runs x WHERE x.job_id = r.job_id AND x.state = 'running')) \
             ORDER BY j.priority, due_at, r.id LIMIT ?2",
        )
        .map_err(failed)?;
    let rows = retries
        .query_map(params![now, limit, tags], |r| {
            Ok(Due {
                priority: r.get(0)?,
                at: r.get(1)?,
                id: r.get(2)?,
                retry: true,
            })
        })
        .map_err(failed)?;
    for row in rows.take(need) {
        due.push(row.map_err(failed)?);
    }
    due.sort();
    due.truncate(need);
    Ok(due)
}

/// A node's tags as the JSON array the queries read with `json_each`.
fn tags_json(tags: &[String]) -> String {
    serde_json::to_string(tags).unwrap_or_else(|_| "[]".to_string())
}

/// The due jobs (enabled, next fire at or before `now`, served by `tags`) in claim order —
/// priority, next fire, id — at most `limit` of them, as (priority, next fire, id).
///
/// One query per priority level that has jobs, each a range of the `jobs_claim` index
/// (enabled, priority, next fire, id) that is already in claim order and stops at the limit,
/// and one index seek to the next level. Asked as one query, `ORDER BY priority, next_fire,
/// id LIMIT n` can either walk `jobs_claim` in order and filter (then, with few jobs due, it
/// reads every job that is not) or, as SQLite chooses, read every due job from `jobs_due`
/// and sort them all for the first `n`: 1.6–2 ms per call with 20 000 due (B7; 8 ms with
/// SQLite 3.40), paid by each claim and each pass. This way a call costs the rows it returns
/// plus two seeks per priority level, whether one job is due or a million.
fn due_jobs(
    conn: &Connection,
    path: &str,
    now: i64,
    limit: i64,
    tags: &str,
) -> StoreResult<Vec<(i64, i64, i64)>> {
    let failed = |e| sql_error(path, "finding due jobs", e);
    let mut next_level = conn
        .prepare_cached(
            "SELECT priority FROM jobs \
             WHERE enabled = 1 AND next_fire IS NOT NULL AND priority > ?1 \
             ORDER BY priority LIMIT 1",
        )
        .map_err(failed)?;
    let mut level = conn
        .prepare_cached(
            "SELECT priority, next_fire, id FROM jobs INDEXED BY jobs_claim \
             WHERE enabled = 1 AND priority = ?1 AND next_fire IS NOT NULL AND next_fire <= ?2 \
               AND (node_tag IS NULL OR node_tag IN (SELECT value FROM json_each(?4))) \
             ORDER BY next_fire, id LIMIT ?3",
        )
        .map_err(failed)?;
    let mut out = Vec::new();
    let mut after = i64::MIN;
    while (out.len() as i64) < limit {
        let Some(priority) = next_level
            .query_row([after], |r| r.get::<_, i64>(0))
            .optional()
            .map_err(failed)?
        else {
            break;
        };
        let left = limit - out.len() as i64;
        let rows = level
            .query_map(params![priority, now, left, tags], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(failed)?;
        for row in rows {
            out.push(row.map_err(failed)?);
        }
        after = priority;
    }
    Ok(out)
}

/// The body of [`Store::run_claim_due`], inside its `BEGIN IMMEDIATE` transaction.
///
/// Candidates are read in rounds of at most the remaining capacity: a fire whose (job, fire
/// time) key is already taken claims nothing, so the next round reads further. Jobs handled in
/// an earlier round are left out, so each job advances at most once per call even when its
/// new next fire is due too (the memory store picks its due set once).
fn claim_in_tx(
    conn: &Connection,
    path: &str,
    p: &ClaimParams,
    lease_until: Timestamp,
) -> StoreResult<Vec<ClaimedRun>> {
    let now = ms(p.now);
    let tags = tags_json(&p.tags);
    let mut claimed = Vec::new();
    let mut handled: Vec<i64> = Vec::new();
    while claimed.len() < p.limit {
        let candidates = due(conn, path, now, p.limit - claimed.len(), &handled, &tags)?;
        if candidates.is_empty() {
            break;
        }
        for d in candidates {
            if d.retry {
                claimed.extend(claim_retry(conn, path, RunId(d.id), p, lease_until)?);
            } else {
                handled.push(d.id);
                let fire = Timestamp::from_millisecond(d.at)
                    .map_err(|e| corrupt(path, &format!("job {}", d.id), "next_fire", e))?;
                claimed.extend(claim_fire(conn, path, JobId(d.id), fire, p, lease_until)?);
            }
        }
    }
    Ok(claimed)
}

/// Claims the fire of job `id` at `fire` (its current next fire).
fn claim_fire(
    conn: &Connection,
    path: &str,
    id: JobId,
    fire: Timestamp,
    p: &ClaimParams,
    lease_until: Timestamp,
) -> StoreResult<Option<ClaimedRun>> {
    let mut job = need_job(conn, path, id)?;
    let (next, skips) = match &job.schedule {
        Some(s) => next_firing(s, fire),
        None => (None, Vec::new()),
    };
    // The conditional advance: the next fire must still be the one being claimed.
    let n = conn
        .prepare_cached("UPDATE jobs SET next_fire = ?1 WHERE id = ?2 AND next_fire IS ?3")
        .and_then(|mut stmt| stmt.execute(params![opt_ms(next), id.0, ms(fire)]))
        .map_err(|e| sql_error(path, "advancing a job's next fire", e))?;
    if n != 1 {
        return Err(StoreError::conflict(format!(
            "job {} next fire moved while claiming; claim again",
            job.name
        )));
    }
    for (at, reason) in skips {
        insert_run(conn, path, &Run::skipped(id, at, reason, None, p.now))?;
    }
    let run = p.new_run(id, fire, lease_until, &job.retry)?;
    let Some(run_id) = insert_run(conn, path, &run)? else {
        return Ok(None);
    };
    // The job as stored now, without reading it (and parsing its schedule) again: the
    // advance above changed only its next fire, which the column holds in milliseconds.
    job.next_fire = next
        .map(|t| Timestamp::from_millisecond(ms(t)))
        .transpose()
        .map_err(|e| corrupt(path, &format!("job {}", id.0), "next_fire", e))?;
    Ok(Some(ClaimedRun {
        run: need_run(conn, path, run_id)?,
        job,
    }))
}

/// Claims the due retry `id`.
fn claim_retry(
    conn: &Connection,
    path: &str,
    id: RunId,
    p: &ClaimParams,
    lease_until: Timestamp,
) -> StoreResult<Option<ClaimedRun>> {
    let mut run = need_run(conn, path, id)?;
    // A queued run (no retry time) whose job started running earlier in this same claim
    // waits: the due query saw the job idle, the claim has changed that since.
    if run.next_attempt_at.is_none() {
        let busy: Option<i64> = conn
            .query_row(
                "SELECT 1 FROM runs WHERE job_id = ?1 AND state = 'running' LIMIT 1",
                params![run.job_id.0],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| sql_error(path, "checking a queued run's job", e))?;
        if busy.is_some() {
            return Ok(None);
        }
    }
    let job = need_job(conn, path, run.job_id)?;
    let (state, attempt) = (run.state, run.attempt);
    p.claim(&mut run, lease_until, &job.retry)?;
    if !update_run_if(conn, path, &run, id, state, attempt)? {
        return Err(StoreError::conflict(format!(
            "run {id} changed while claiming its retry; claim again"
        )));
    }
    Ok(Some(ClaimedRun {
        run: need_run(conn, path, id)?,
        job,
    }))
}

/// One finish inside an open write transaction. The outer error is a driver failure (the
/// transaction must be rolled back); the inner result is this finish's own answer, and when
/// it is an error nothing was written.
fn finish_in_tx(
    conn: &Connection,
    path: &str,
    id: RunId,
    expected_attempt: u32,
    finish: &RunFinish,
) -> StoreResult<StoreResult<Run>> {
    let Some(mut run) = get_run(conn, path, id)? else {
        return Ok(Err(run_missing(id)));
    };
    if let Err(e) = apply_finish(&mut run, id, expected_attempt, finish) {
        return Ok(Err(e));
    }
    if !update_run_if(conn, path, &run, id, RunState::Running, expected_attempt)? {
        return Ok(Err(StoreError::conflict(format!(
            "run {id} changed while finishing it; reload it"
        ))));
    }
    Ok(Ok(need_run(conn, path, id)?))
}

impl Db {
    fn job_insert(&mut self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        job.validate()?;
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        if job_id_by_name(&tx, path, &job.name)?.is_some() {
            return Err(name_taken(&job.name));
        }
        let mut values = vec![Value::Text(job.name.as_str().to_string())];
        values.extend(job_values(job)?);
        values.extend([
            opt_ms(job.next_fire).map_or(Value::Null, Value::Integer),
            Value::Integer(1),
            Value::Integer(ms(now)),
        ]);
        let columns = JOB_COLUMNS.trim_start_matches("id, ");
        let marks = vec!["?"; values.len()].join(", ");
        tx.execute(
            &format!("INSERT INTO jobs ({columns}) VALUES ({marks})"),
            rusqlite::params_from_iter(values),
        )
        .map_err(|e| sql_error(path, &format!("inserting job {}", job.name), e))?;
        let id = JobId(tx.last_insert_rowid());
        let stored = need_job(&tx, path, id)?;
        commit(tx, path)?;
        Ok(stored)
    }

    fn job_update(&mut self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        job.validate()?;
        let id = job.id.ok_or_else(|| {
            StoreError::invalid(format!(
                "job {} has no id; insert it first, or load it to update it",
                job.name
            ))
        })?;
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        let (name, version): (String, i64) = tx
            .query_row(
                "SELECT name, version FROM jobs WHERE id = ?1",
                [id.0],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| sql_error(path, "reading a job", e))?
            .ok_or_else(|| job_missing(id))?;
        let expected = to_i64(job.version, "job version")?;
        if version != expected {
            return Err(StoreError::conflict(format!(
                "job {name} was changed by someone else (stored version {version}, yours {}); \
                 reload it and apply your change again",
                job.version
            )));
        }
        if job_id_by_name(&tx, path, &job.name)?.is_some_and(|other| other != id) {
            return Err(name_taken(&job.name));
        }
        let mut values = vec![Value::Text(job.name.as_str().to_string())];
        values.extend(job_values(job)?);
        values.extend([
            opt_ms(job.next_fire).map_or(Value::Null, Value::Integer),
            Value::Integer(expected + 1),
            Value::Integer(ms(now)),
        ]);
        let sets = JOB_COLUMNS
            .split(", ")
            .skip(1)
            .enumerate()
            .map(|(i, c)| format!("{c} = ?{}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let n = values.len();
        values.extend([Value::Integer(id.0), Value::Integer(expected)]);
        let changed = tx
            .execute(
                &format!(
                    "UPDATE jobs SET {sets} WHERE id = ?{} AND version = ?{}",
                    n + 1,
                    n + 2
                ),
                rusqlite::params_from_iter(values),
            )
            .map_err(|e| sql_error(path, &format!("updating job {}", job.name), e))?;
        if changed != 1 {
            return Err(StoreError::conflict(format!(
                "job {} changed while updating it; reload it and apply your change again",
                job.name
            )));
        }
        let stored = need_job(&tx, path, id)?;
        commit(tx, path)?;
        Ok(stored)
    }

    fn job_list(&self) -> StoreResult<Vec<JobDef>> {
        let path = &*self.path;
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY id"))
            .map_err(|e| sql_error(path, "listing jobs", e))?;
        let rows = stmt
            .query_map([], JobRow::read)
            .map_err(|e| sql_error(path, "listing jobs", e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| sql_error(path, "listing jobs", e))?;
        rows.into_iter().map(|r| r.into_job(path)).collect()
    }

    fn job_set_enabled(&mut self, id: JobId, enabled: bool, now: Timestamp) -> StoreResult<JobDef> {
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        let n = tx
            .execute(
                "UPDATE jobs SET enabled = ?1, version = version + 1, updated_at = ?2 \
                 WHERE id = ?3",
                params![enabled, ms(now), id.0],
            )
            .map_err(|e| sql_error(path, "enabling or disabling a job", e))?;
        if n == 0 {
            return Err(job_missing(id));
        }
        let stored = need_job(&tx, path, id)?;
        commit(tx, path)?;
        Ok(stored)
    }

    fn job_set_next_fire(
        &mut self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> StoreResult<()> {
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        let n = tx
            .execute(
                "UPDATE jobs SET next_fire = ?1 WHERE id = ?2 AND next_fire IS ?3",
                params![opt_ms(new), id.0, opt_ms(expected)],
            )
            .map_err(|e| sql_error(path, "setting a job's next fire", e))?;
        if n == 0 {
            let job = need_job(&tx, path, id)?;
            return Err(StoreError::conflict(format!(
                "job {} next fire is {}, not {}; another node moved it first: reload the job",
                job.name,
                show(job.next_fire),
                show(expected)
            )));
        }
        commit(tx, path)
    }

    fn run_claim_due(&mut self, p: &ClaimParams) -> StoreResult<Vec<ClaimedRun>> {
        let lease_until = add(p.now, p.lease, "run lease")?;
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        let claimed = claim_in_tx(&tx, path, p, lease_until)?;
        commit(tx, path)?;
        Ok(claimed)
    }

    fn run_insert_skipped(&mut self, run: &Run) -> StoreResult<Run> {
        check_skipped(run)?;
        self.insert_keyed(run)
    }

    fn run_enqueue(&mut self, job: JobId, fire: Timestamp, now: Timestamp) -> StoreResult<Run> {
        self.insert_keyed(&Run::pending(job, fire, now))
    }

    /// Inserts a run under its (job, fire time) key in its own transaction: a taken key is a
    /// Conflict naming the run that holds it.
    fn insert_keyed(&mut self, run: &Run) -> StoreResult<Run> {
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        need_job(&tx, path, run.job_id)?;
        let Some(id) = insert_run(&tx, path, run)? else {
            let other: i64 = tx
                .query_row(
                    "SELECT id FROM runs WHERE job_id = ?1 AND fire_time = ?2",
                    params![run.job_id.0, ms(run.fire_time)],
                    |r| r.get(0),
                )
                .map_err(|e| sql_error(path, "reading a run", e))?;
            return Err(fire_taken(run.job_id, run.fire_time, RunId(other)));
        };
        let stored = need_run(&tx, path, id)?;
        commit(tx, path)?;
        Ok(stored)
    }

    fn job_due(&self, now: Timestamp, limit: usize, tags: &[String]) -> StoreResult<Vec<DueJob>> {
        let path = &*self.path;
        // The due ids in claim order (`due_jobs`: what is due, not how many jobs exist); the
        // other columns and the two counts are read for those rows only. Asked in one flat
        // query, SQLite computes both counts for *every* due job and sorts them: ~3 ms per
        // pass with 20 000 due (B3).
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let due = due_jobs(&self.conn, path, ms(now), limit, &tags_json(tags))?;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT j.id, j.name, j.next_fire, j.misfire, j.overlap, \
                   (SELECT COUNT(*) FROM runs r WHERE r.job_id = j.id AND r.state = 'running'), \
                   (SELECT COUNT(*) FROM runs r WHERE r.job_id = j.id AND r.state = 'pending') \
                 FROM jobs j WHERE j.id = ?1",
            )
            .map_err(|e| sql_error(path, "finding due jobs", e))?;
        let mut rows = Vec::with_capacity(due.len());
        for (_, _, id) in due {
            let row = stmt
                .query_row([id], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, u32>(5)?,
                        r.get::<_, u32>(6)?,
                    ))
                })
                .map_err(|e| sql_error(path, "finding due jobs", e))?;
            rows.push(row);
        }
        rows.into_iter()
            .map(
                |(id, name, next_fire, misfire, overlap, running, pending)| {
                    let row = format!("job {id}");
                    let bad = |column: &str, detail: &dyn std::fmt::Display| {
                        corrupt(path, &row, column, detail)
                    };
                    Ok(DueJob {
                        id: JobId(id),
                        name: JobName::new(&name).map_err(|e| bad("name", &e))?,
                        next_fire: Timestamp::from_millisecond(next_fire)
                            .map_err(|e| bad("next_fire", &e))?,
                        misfire: misfire
                            .parse::<MisfirePolicy>()
                            .map_err(|e| bad("misfire", &e))?,
                        overlap: overlap
                            .parse::<OverlapPolicy>()
                            .map_err(|e| bad("overlap", &e))?,
                        running,
                        pending,
                    })
                },
            )
            .collect()
    }

    fn next_due(&self, tags: &[String]) -> StoreResult<Option<Timestamp>> {
        let path = &*self.path;
        // Three indexed MINs (jobs_due, runs_retry_due, runs_retry_due + runs_job_state).
        let at: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT MIN(at) FROM ( \
                   SELECT MIN(next_fire) AS at FROM jobs \
                   WHERE enabled = 1 AND next_fire IS NOT NULL \
                     AND (node_tag IS NULL OR node_tag IN (SELECT value FROM json_each(?1))) \
                   UNION ALL \
                   SELECT MIN(r.next_attempt_at) FROM runs r JOIN jobs j ON j.id = r.job_id \
                   WHERE r.state = 'pending' AND r.next_attempt_at IS NOT NULL AND j.enabled = 1 \
                     AND (j.node_tag IS NULL OR j.node_tag IN (SELECT value FROM json_each(?1))) \
                   UNION ALL \
                   SELECT MIN(r.created_at) FROM runs r JOIN jobs j ON j.id = r.job_id \
                   WHERE r.state = 'pending' AND r.next_attempt_at IS NULL AND j.enabled = 1 \
                     AND (j.node_tag IS NULL OR j.node_tag IN (SELECT value FROM json_each(?1))) \
                     AND NOT EXISTS (SELECT 1 FROM runs x \
                                     WHERE x.job_id = r.job_id AND x.state = 'running'))",
            )
            .and_then(|mut stmt| stmt.query_row([tags_json(tags)], |r| r.get(0)))
            .map_err(|e| sql_error(path, "finding the next due time", e))?;
        at.map(|at| {
            Timestamp::from_millisecond(at)
                .map_err(|e| corrupt(path, "the next due time", "next_fire", e))
        })
        .transpose()
    }

    fn run_set_state_if_running(
        &mut self,
        id: RunId,
        expected_attempt: u32,
        finish: &RunFinish,
    ) -> StoreResult<Run> {
        finish.validate()?;
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        let answer = finish_in_tx(&tx, path, id, expected_attempt, finish)?;
        // A refused finish wrote nothing; committing the empty transaction is harmless.
        commit(tx, path)?;
        answer
    }

    /// The finishing thread's body for one batch: every finish in one transaction, each
    /// answered after the commit. A driver failure anywhere (or at the commit) rolls the batch
    /// back and each finish is retried alone, so every caller gets its own, true answer.
    fn finish_batch(&mut self, batch: Vec<FinishReq>) {
        let path = self.path.clone();
        let tx = match immediate(&mut self.conn, &path) {
            Ok(tx) => tx,
            Err(e) => {
                // Nothing was done: the lock is held elsewhere past the busy timeout (or
                // the file is gone); every caller gets that answer, none waits again.
                for req in batch {
                    let _ = req.reply.send(Err(same_error(&e)));
                }
                return;
            }
        };
        let answers = batch
            .iter()
            .map(|r| finish_in_tx(&tx, &path, r.id, r.attempt, &r.finish))
            .collect::<StoreResult<Vec<_>>>()
            .and_then(|answers| commit(tx, &path).map(|()| answers));
        match answers {
            Ok(answers) => {
                for (req, answer) in batch.into_iter().zip(answers) {
                    let _ = req.reply.send(answer);
                }
            }
            // The transaction was dropped (rolled back) or its commit failed.
            Err(e) => {
                if batch.len() > 1 {
                    tracing::warn!(
                        "a batch of {} run finishes failed ({e}); recording each alone",
                        batch.len()
                    );
                }
                for req in batch {
                    let answer = self.run_set_state_if_running(req.id, req.attempt, &req.finish);
                    let _ = req.reply.send(answer);
                }
            }
        }
    }

    fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        let path = &*self.path;
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs \
                 WHERE (?1 IS NULL OR job_id = ?1) AND (?2 IS NULL OR state = ?2) \
                 ORDER BY fire_time DESC, id DESC LIMIT ?3"
            ))
            .map_err(|e| sql_error(path, "listing runs", e))?;
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(
                params![
                    filter.job.map(|j| j.0),
                    filter.state.map(|s| s.name()),
                    limit
                ],
                RunRow::read,
            )
            .map_err(|e| sql_error(path, "listing runs", e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| sql_error(path, "listing runs", e))?;
        rows.into_iter().map(|r| r.into_run(path)).collect()
    }

    fn lease_renew(
        &mut self,
        node: &NodeId,
        until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<Vec<RunId>> {
        let path = &*self.path;
        let mut stmt = self
            .conn
            .prepare_cached(
                "UPDATE runs SET lease_expires_at = ?1 \
                 WHERE node_id = ?2 AND state = 'running' AND lease_expires_at > ?3 \
                 RETURNING id",
            )
            .map_err(|e| sql_error(path, "renewing leases", e))?;
        stmt.query_map(params![ms(until), node.0, ms(now)], |r| r.get(0).map(RunId))
            .map_err(|e| sql_error(path, "renewing leases", e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| sql_error(path, "renewing leases", e))
    }

    fn run_recover_expired(
        &mut self,
        now: Timestamp,
        node: Option<&NodeId>,
    ) -> StoreResult<Vec<Run>> {
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        let ids: Vec<i64> = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT id FROM runs WHERE state = 'running' \
                     AND ((?1 IS NOT NULL AND node_id = ?1) \
                          OR lease_expires_at IS NULL OR lease_expires_at <= ?2) \
                     ORDER BY id",
                )
                .map_err(|e| sql_error(path, "finding expired leases", e))?;
            stmt.query_map(params![node.map(|n| n.0.as_str()), ms(now)], |r| r.get(0))
                .map_err(|e| sql_error(path, "finding expired leases", e))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(|e| sql_error(path, "finding expired leases", e))?
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids.into_iter().map(RunId) {
            let mut run = need_run(&tx, path, id)?;
            let event = recovery_event(&run, node);
            let retry = need_job(&tx, path, run.job_id)?.retry;
            let attempt = run.attempt;
            run.apply(event, now, &retry)?;
            if !update_run_if(&tx, path, &run, id, RunState::Running, attempt)? {
                return Err(StoreError::conflict(format!(
                    "run {id} changed while recovering it; recover again"
                )));
            }
            out.push(need_run(&tx, path, id)?);
        }
        commit(tx, path)?;
        Ok(out)
    }

    fn run_progress(&mut self, id: RunId, progress: &Progress) -> StoreResult<()> {
        let path = &*self.path;
        let n = self
            .conn
            .execute(
                "UPDATE runs SET progress_done = ?1, progress_total = ?2, progress_message = ?3 \
                 WHERE id = ?4 AND state = 'running'",
                params![
                    to_i64(progress.done, "progress done")?,
                    to_i64(progress.total, "progress total")?,
                    progress.message,
                    id.0
                ],
            )
            .map_err(|e| sql_error(path, "recording progress", e))?;
        if n == 0 {
            let run = need_run(&self.conn, path, id)?;
            return Err(StoreError::conflict(format!(
                "run {id} is {}, not running; progress is recorded only while it runs",
                run.state
            )));
        }
        Ok(())
    }

    fn log_append(&mut self, run: RunId, lines: &[LogLine]) -> StoreResult<()> {
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        let exists: Option<i64> = tx
            .query_row("SELECT 1 FROM runs WHERE id = ?1", [run.0], |r| r.get(0))
            .optional()
            .map_err(|e| sql_error(path, "reading a run", e))?;
        if exists.is_none() {
            return Err(run_missing(run));
        }
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO run_logs (run_id, at, level, message) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(|e| sql_error(path, "appending log lines", e))?;
            for l in lines {
                stmt.execute(params![run.0, ms(l.at), l.level.name(), l.message])
                    .map_err(|e| sql_error(path, "appending log lines", e))?;
            }
        }
        commit(tx, path)
    }

    fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<(u64, LogLine)>> {
        let path = &*self.path;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, at, level, message FROM run_logs \
                 WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )
            .map_err(|e| sql_error(path, "reading a run log", e))?;
        let after = i64::try_from(after.unwrap_or(0)).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![run.0, after, limit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| sql_error(path, "reading a run log", e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| sql_error(path, "reading a run log", e))?;
        rows.into_iter()
            .map(|(seq, at, level, message)| {
                let row = format!("log line {seq}");
                Ok((
                    u64::try_from(seq).map_err(|_| corrupt(path, &row, "seq", seq))?,
                    LogLine {
                        at: Timestamp::from_millisecond(at)
                            .map_err(|e| corrupt(path, &row, "at", e))?,
                        level: LogLevel::from_name(&level)
                            .ok_or_else(|| corrupt(path, &row, "level", &level))?,
                        message,
                    },
                ))
            })
            .collect()
    }

    fn retention_purge(&mut self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
        let path = &*self.path;
        let tx = immediate(&mut self.conn, path)?;
        const OLD: &str = "SELECT id FROM runs WHERE state NOT IN ('pending', 'running') \
                           AND finished_at IS NOT NULL AND finished_at < ?1";
        let cut = ms(older_than);
        let log_lines: i64 = tx
            .query_row(
                &format!("SELECT COUNT(*) FROM run_logs WHERE run_id IN ({OLD})"),
                [cut],
                |r| r.get(0),
            )
            .map_err(|e| sql_error(path, "counting old log lines", e))?;
        // Logs go with their runs (ON DELETE CASCADE).
        let runs = tx
            .execute(&format!("DELETE FROM runs WHERE id IN ({OLD})"), [cut])
            .map_err(|e| sql_error(path, "purging old runs", e))?;
        commit(tx, path)?;
        Ok(PurgeCounts {
            runs: runs as u64,
            log_lines: u64::try_from(log_lines).unwrap_or(0),
        })
    }
}

impl Store for SqliteStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn job_insert(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        self.with(|db| db.job_insert(job, now))
    }

    async fn job_update(&self, job: &JobDef, now: Timestamp) -> StoreResult<JobDef> {
        self.with(|db| db.job_update(job, now))
    }

    async fn job_get(&self, id: JobId) -> StoreResult<Option<JobDef>> {
        self.with(|db| get_job(&db.conn, &db.path, id))
    }

    async fn job_get_by_name(&self, name: &JobName) -> StoreResult<Option<JobDef>> {
        self.with(|db| match job_id_by_name(&db.conn, &db.path, name)? {
            Some(id) => get_job(&db.conn, &db.path, id),
            None => Ok(None),
        })
    }

    async fn job_list(&self) -> StoreResult<Vec<JobDef>> {
        self.with(|db| db.job_list())
    }

    async fn job_delete(&self, id: JobId) -> StoreResult<()> {
        self.with(|db| {
            let n = db
                .conn
                .execute("DELETE FROM jobs WHERE id = ?1", [id.0])
                .map_err(|e| sql_error(&db.path, "deleting a job", e))?;
            if n == 0 {
                return Err(job_missing(id));
            }
            Ok(())
        })
    }

    async fn job_set_enabled(
        &self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> StoreResult<JobDef> {
        self.with(|db| db.job_set_enabled(id, enabled, now))
    }

    async fn job_set_next_fire(
        &self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> StoreResult<()> {
        self.with(|db| db.job_set_next_fire(id, expected, new))
    }

    async fn run_claim_due(&self, params: &ClaimParams) -> StoreResult<Vec<ClaimedRun>> {
        self.with(|db| db.run_claim_due(params))
    }

    async fn run_insert_skipped(&self, run: &Run) -> StoreResult<Run> {
        self.with(|db| db.run_insert_skipped(run))
    }

    async fn run_enqueue(&self, job: JobId, fire: Timestamp, now: Timestamp) -> StoreResult<Run> {
        self.with(|db| db.run_enqueue(job, fire, now))
    }

    async fn job_due(
        &self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> StoreResult<Vec<DueJob>> {
        self.with(|db| db.job_due(now, limit, tags))
    }

    async fn next_due(&self, tags: &[String]) -> StoreResult<Option<Timestamp>> {
        self.with(|db| db.next_due(tags))
    }

    async fn run_set_state_if_running(
        &self,
        id: RunId,
        expected_attempt: u32,
        finish: &RunFinish,
    ) -> StoreResult<Run> {
        // Refused before queuing: a finish that cannot be valid never reaches a batch.
        finish.validate()?;
        // Outside a tokio runtime (a plain executor, a CLI command, the conformance suite)
        // the caller's thread would only park while the finishing thread works: run it here
        // and save the hop (B7 finishes one run at a time this way).
        if tokio::runtime::Handle::try_current().is_err() {
            return self.with(|db| db.run_set_state_if_running(id, expected_attempt, finish));
        }
        let (reply, answer) = oneshot::channel();
        let req = FinishReq {
            id,
            attempt: expected_attempt,
            finish: finish.clone(),
            reply,
        };
        match self.queue_finish(req) {
            Ok(()) => answer.await.unwrap_or_else(|_| {
                Err(StoreError::other(format!(
                    "the finishing thread of {} stopped before recording run {id}; its end \
                     may not be recorded: reload the run",
                    self.path
                )))
            }),
            Err(req) => {
                self.with(|db| db.run_set_state_if_running(req.id, req.attempt, &req.finish))
            }
        }
    }

    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        self.with(|db| get_run(&db.conn, &db.path, id))
    }

    async fn run_list(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        self.with(|db| db.run_list(filter))
    }

    async fn lease_renew(
        &self,
        node: &NodeId,
        until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<Vec<RunId>> {
        self.with(|db| db.lease_renew(node, until, now))
    }

    async fn run_recover_expired(
        &self,
        now: Timestamp,
        node: Option<&NodeId>,
    ) -> StoreResult<Vec<Run>> {
        self.with(|db| db.run_recover_expired(now, node))
    }

    async fn run_progress(&self, id: RunId, progress: &Progress) -> StoreResult<()> {
        self.with(|db| db.run_progress(id, progress))
    }

    async fn log_append(&self, run: RunId, lines: &[LogLine]) -> StoreResult<()> {
        self.with(|db| db.log_append(run, lines))
    }

    async fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<(u64, LogLine)>> {
        self.with(|db| db.log_list(run, after, limit))
    }

    async fn retention_purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
        self.with(|db| db.retention_purge(older_than))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use takt_core::store::StoreErrorKind;

    #[test]
    fn error_kinds_follow_the_sqlite_code() {
        let failure =
            |code: i32| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        let kind = |code| sql_error("/x/takt.db", "testing", failure(code)).kind();
        assert_eq!(kind(rusqlite::ffi::SQLITE_BUSY), StoreErrorKind::Transient);
        assert_eq!(
            kind(rusqlite::ffi::SQLITE_LOCKED),
            StoreErrorKind::Transient
        );
        assert_eq!(
            kind(rusqlite::ffi::SQLITE_CONSTRAINT),
            StoreErrorKind::Conflict
        );
        assert_eq!(kind(rusqlite::ffi::SQLITE_CORRUPT), StoreErrorKind::Other);
        let e = sql_error(
            "/x/takt.db",
            "testing",
            failure(rusqlite::ffi::SQLITE_READONLY),
        );
        assert!(e.to_string().contains("/x/takt.db is read-only"), "{e}");
        let e = sql_error(
            "/x/takt.db",
            "testing",
            failure(rusqlite::ffi::SQLITE_NOTADB),
        );
        assert!(e.to_string().contains("restore it from a backup"), "{e}");
    }
}
