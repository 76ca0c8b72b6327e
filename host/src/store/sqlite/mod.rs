//! [`SqliteStore`]: the core's [`Store`](takt_core::store::Store) contract on one SQLite
//! file — the [engine](takt_core::store::engine) over the SQLite dialect.
//!
//! The schema is `sql/sqlite/` ([`mod@migrate`]); read `0001_init.sql` for the tables and the
//! storage conventions (instants as Unix milliseconds, policies in their text forms,
//! schedules as `ScheduleSpec` JSON). The rules (what is claimed, what a finish changes, what
//! recovery does) are the engine's; this module holds what is SQLite's own:
//!
//! * `connect.rs` — the connection: WAL mode (readers never block the writer), `synchronous =
//!   NORMAL` (durable across a process crash; a power cut may lose the last transactions,
//!   never corrupt the file), `foreign_keys = ON` (deleting a job deletes its runs and their
//!   logs), a busy timeout (a writer waits that long for another process's write lock before
//!   the call fails as transient), the checkpointing thread, the error mapping.
//! * `conn.rs` — the primitives: `BEGIN IMMEDIATE` transactions (the write lock first, so two
//!   processes on one file serialise instead of deadlocking on a lock upgrade), the
//!   per-priority due query, keyed inserts.
//! * `finish.rs` — the finishing thread (group commit of run ends).
//! * `migrate.rs` — the numbered migrations of `sql/sqlite/`.
//! * the host lock (`store/host_lock.rs`): one host per file.

mod conn;
mod connect;
mod finish;
pub mod migrate;

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};
use std::time::Duration;

use rusqlite::Connection;
use takt_core::node::Registration;
use takt_core::run::{Run, RunId};
use takt_core::store::engine::{Dialect, DialectStore, Engine, Fail, FinishWrite, Res, Slot};
use takt_core::store::{Capabilities, StoreError, StoreResult};

pub use conn::{SqliteConn, SqliteSession};
use connect::{Db, checkpoint_in_background, connect, keep_plans, open_reader, sql_error};
use finish::FinishReq;
pub use migrate::{MIGRATIONS, latest_version, migrate};

use super::migrate::{AppliedMigration, MigrationObserver};

/// How a [`SqliteStore`] opens its file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How long a write waits for another connection's write lock before failing as
    /// [`takt_core::store::StoreErrorKind::Transient`]. Default 5 s.
    pub busy_timeout: Duration,
    /// Told what the migrations applied at open are doing (none by default).
    pub on_migration: Option<MigrationObserver>,
    /// Create the file and apply the migrations it lacks (the default: a host and `takt db
    /// migrate`). `false` opens only an existing takt database at this binary's schema and
    /// refuses anything else, creating and changing nothing: what read-only commands use.
    pub migrate: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            on_migration: None,
            migrate: true,
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
    engine: Engine<SqliteDialect>,
}

/// The SQLite dialect: the one connection, its finishing thread and the host lock.
#[derive(Clone, Debug)]
pub struct SqliteDialect {
    shared: Arc<Shared>,
}

/// What the clones of a store share: the connection (checked out by one session at a time),
/// the reading connection and the finishing thread's queue (the thread holds only a `Weak`
/// reference, so dropping the last clone closes them all).
#[derive(Debug)]
struct Shared {
    path: Arc<str>,
    /// The reading connection of a file-backed store (`SqliteDialect::read_session`).
    /// Declared before `slot` so it closes first and the writer is still the file's last
    /// connection, as `Db`'s `Drop` arranges: the last to close checkpoints the WAL into the
    /// file and removes it.
    reader: Option<Arc<Slot<Db>>>,
    slot: Arc<Slot<Db>>,
    finisher: OnceLock<Option<mpsc::Sender<FinishReq>>>,
    /// The host lock on `<file>.lock`, taken by the first node registration of a
    /// file-backed store and held until the last clone is dropped (or the process dies: the
    /// OS releases it, so a `kill -9` never leaves it stuck).
    host_lock: Mutex<Option<File>>,
}

impl SqliteStore {
    /// Opens (creating) the database at `path`, sets WAL, `synchronous = NORMAL`,
    /// `foreign_keys = ON` and the busy timeout, and applies the migrations it lacks (with
    /// `options.migrate` false: only an existing takt database at this schema is opened).
    ///
    /// A file that is not a SQLite database (or is corrupt), a read-only file and a database
    /// migrated by a newer takt are refused with an error saying what to do; such a file is
    /// left untouched.
    pub fn open(path: impl AsRef<Path>, options: &SqliteOptions) -> StoreResult<SqliteStore> {
        let path = path.as_ref();
        let shown: Arc<str> = path.display().to_string().into();
        if !options.migrate && !path.is_file() {
            return Err(super::migrate::no_database(&shown));
        }
        // Without `migrate`, `connect` has refused anything but the current schema.
        let mut conn = connect(path, options)?;
        if options.migrate {
            migrate::apply(&mut conn, &shown, options.on_migration.as_ref())?;
        }
        let checkpointer = checkpoint_in_background(&mut conn, path, options, &shown);
        let reader = open_reader(path, options, &shown);
        Ok(SqliteStore::from_conn(conn, shown, checkpointer, reader))
    }

    /// A private in-memory database (for tests; clones share it, other opens do not).
    pub fn open_in_memory() -> StoreResult<SqliteStore> {
        let shown: Arc<str> = ":memory:".into();
        let mut conn = Connection::open_in_memory().map_err(|e| sql_error(&shown, "opening", e))?;
        keep_plans(&conn, &shown)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| sql_error(&shown, "enabling foreign keys", e))?;
        migrate::apply(&mut conn, &shown, None)?;
        // A private in-memory database has no second connection: reads share the writer's.
        Ok(SqliteStore::from_conn(conn, shown, None, None))
    }

    fn from_conn(
        conn: Connection,
        path: Arc<str>,
        checkpointer: Option<std::thread::JoinHandle<()>>,
        reader: Option<Db>,
    ) -> SqliteStore {
        let db = Db {
            conn,
            path: path.clone(),
            checkpointer,
        };
        SqliteStore {
            engine: Engine::new(SqliteDialect {
                shared: Arc::new(Shared {
                    path,
                    reader: reader.map(|r| Arc::new(Slot::new(r))),
                    slot: Arc::new(Slot::new(db)),
                    finisher: OnceLock::new(),
                    host_lock: Mutex::new(None),
                }),
            }),
        }
    }

    /// The database file as given to [`SqliteStore::open`] (`:memory:` for an in-memory one).
    pub fn path(&self) -> &str {
        &self.engine.dialect().shared.path
    }

    /// The schema version recorded in the file.
    pub fn schema_version(&self) -> StoreResult<u32> {
        let db = self.engine.dialect().shared.slot.check_out();
        migrate::current_version(&db.conn, &db.path)
    }

    /// Applies migrations this binary knows and the database lacks (none after a successful
    /// [`SqliteStore::open`], unless another process rolled the file back).
    pub fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        let mut db = self.engine.dialect().shared.slot.check_out();
        let Db { conn, path, .. } = &mut *db;
        migrate::apply(conn, path, None)
    }
}

impl DialectStore for SqliteStore {
    type Dialect = SqliteDialect;

    fn engine(&self) -> &Engine<SqliteDialect> {
        &self.engine
    }
}

impl SqliteDialect {
    /// Queues a finish to the finishing thread (started on first use); gives the request
    /// back when there is no thread to take it.
    fn queue_finish(&self, req: FinishReq) -> Result<(), Box<FinishReq>> {
        let sender = self.shared.finisher.get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            let shared = Arc::downgrade(&self.shared);
            let started = std::thread::Builder::new()
                .name("takt-sqlite-finish".into())
                .spawn(move || finish::finish_loop(&shared, &rx));
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

    /// One finish on the caller's thread, in a session of its own.
    fn finish_here(&self, id: RunId, attempt: u32, write: &FinishWrite) -> Res<Option<Run>> {
        let mut db = self.shared.slot.check_out();
        Ok(finish::finish_alone(&mut db, id, attempt, write)?)
    }
}

impl Dialect for SqliteDialect {
    type Session = SqliteSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn session(&self, _what: &'static str) -> Res<SqliteSession> {
        Ok(SqliteSession {
            db: self.shared.slot.check_out(),
        })
    }

    /// A read on the reading connection, when the store has one: in WAL mode a reader
    /// neither waits for the writer nor holds it up, so the loop's due reads and the API's
    /// pages do not queue behind a claim or a batch of finishes on the one writing connection
    /// (B3 on SQLite: the loop's `job_due` spent most of its 1.9 ms waiting for the
    /// finishing thread's commits). It sees every transaction committed before it began.
    async fn read_session(&self, _what: &'static str) -> Res<SqliteSession> {
        let slot = self.shared.reader.as_ref().unwrap_or(&self.shared.slot);
        Ok(SqliteSession {
            db: slot.check_out(),
        })
    }

    async fn pause(&self, _what: &str, _error: &StoreError, _pause: Duration) {
        // Never asked: the busy timeout is this backend's wait, and its errors are final.
    }

    /// Takes the file's host lock unless this store holds it already; true when it was
    /// taken now (every life recorded before is then gone). An in-memory database has no
    /// file and no other process: nothing to lock.
    fn before_register(&self, reg: &Registration) -> Res<bool> {
        if &*self.shared.path == ":memory:" {
            return Ok(false);
        }
        let mut held = self
            .shared
            .host_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if held.is_some() {
            return Ok(false);
        }
        *held = Some(
            super::host_lock::acquire(Path::new(&*self.shared.path), &reg.node, reg.now)
                .map_err(Fail::from)?,
        );
        Ok(true)
    }

    /// The end of every run: on a tokio runtime, queued to the finishing thread, which
    /// commits the finishes queued together in one transaction (see [`SqliteStore`]);
    /// outside one (a plain executor, a CLI command, the conformance suite) the caller's
    /// thread would only park while the finishing thread works, so it runs here and saves
    /// the hop (B7 finishes one run at a time this way).
    async fn finish(&self, id: RunId, attempt: u32, write: &FinishWrite) -> Res<Option<Run>> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.finish_here(id, attempt, write);
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let req = FinishReq {
            id,
            attempt,
            write: write.clone(),
            reply,
        };
        match self.queue_finish(req) {
            Ok(()) => answer.await.unwrap_or_else(|_| {
                Err(StoreError::other(format!(
                    "the finishing thread of {} stopped before recording run {id}; its end \
                     may not be recorded: reload the run",
                    self.shared.path
                ))
                .into())
            }),
            Err(req) => self.finish_here(req.id, req.attempt, &req.write),
        }
    }
}
