//! The SQLite dialect's sessions and primitives: the store's one connection, checked out for
//! a store call, and the statements the engine's rules run on it.
//!
//! Transactions are `BEGIN IMMEDIATE` (the write lock first, so two processes on one file
//! serialise instead of deadlocking on a lock upgrade); a transaction dropped without a commit
//! rolls back. Locked reads need no hints: a transaction already holds the file's write lock.

use std::sync::LazyLock;

use jiff::Timestamp;
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params};
use takt_core::alert::{AlertDelivery, AlertKey};
use takt_core::attempt::{Attempt, AttemptEnd};
use takt_core::group::GroupDef;
use takt_core::job::{JobDef, JobId, JobName};
use takt_core::node::{InstanceId, NodeInfo, NodeSession, NodeStatus};
use takt_core::pause::{Hold, Pause, PauseKind};
use takt_core::run::{NodeId, Progress, Run, RunId, RunState};
use takt_core::store::access::{ApiToken, NewToken, OperatorAction};
use takt_core::store::backend::{job_missing, run_missing};
use takt_core::store::engine::{
    Checkout, Conn, DueSet, FinishWrite, NextFireMove, PendingDue, Res, Session,
};
use takt_core::store::{
    CancelRequest, DueJob, JobQuery, LogLevel, LogLine, PurgeCounts, RunFilter, StoreResult,
};

use super::connect::{Db, sql_error};
use crate::store::rows::{
    ACTION_COLUMNS, ATTEMPT_COLUMNS, ActionRow, AttemptRow, DELIVERY_COLUMNS, DeliveryRow, DueRow,
    HOLD_COLUMNS, HoldRow, JOB_COLUMNS, JOB_WRITE_COLUMNS, JobRow, NODE_COLUMNS, NodeRow,
    PAUSE_COLUMNS, PauseRow, RUN_COLUMNS, RunRow, SESSION_COLUMNS, SessionRow, TOKEN_COLUMNS,
    TokenRow, continuation_names, corrupt, group_def, to_i64,
};

/// The store's connection for one store call.
#[derive(Debug)]
pub struct SqliteSession {
    pub(super) db: Checkout<Db>,
}

impl Session for SqliteSession {
    type Conn<'a> = SqliteConn<'a>;

    fn conn(&mut self) -> SqliteConn<'_> {
        SqliteConn {
            db: &mut self.db,
            tx: false,
        }
    }

    async fn begin(&mut self, what: &'static str) -> Res<SqliteConn<'_>> {
        let db = &mut *self.db;
        db.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| sql_error(&db.path, &format!("starting a transaction ({what})"), e))?;
        Ok(SqliteConn { db, tx: true })
    }
}

/// The primitives on the store's connection, in a transaction or not.
#[derive(Debug)]
pub struct SqliteConn<'a> {
    pub(super) db: &'a mut Db,
    pub(super) tx: bool,
}

impl Drop for SqliteConn<'_> {
    /// A transaction dropped without a commit rolls back.
    fn drop(&mut self) {
        if self.tx && !self.db.conn.is_autocommit() {
            let _ = self.db.conn.execute_batch("ROLLBACK");
        }
    }
}

// ---- conversions -------------------------------------------------------------------------

/// A `job_groups` row read from SQLite (times in Unix ms).
fn group_row(
    path: &str,
    name: &str,
    max: Option<i64>,
    released: Option<i64>,
) -> StoreResult<GroupDef> {
    let released = released
        .map(|at| {
            Timestamp::from_millisecond(at)
                .map_err(|e| corrupt(path, &format!("group {name}"), "released_at", e))
        })
        .transpose()?;
    group_def(path, name, max, released)
}

pub(super) fn ms(t: Timestamp) -> i64 {
    t.as_millisecond()
}

fn opt_ms(t: Option<Timestamp>) -> Option<i64> {
    t.map(ms)
}

fn cancel_row(r: &Row<'_>) -> rusqlite::Result<(i64, String, i64)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
}

fn cancel_of(path: &str, (run, by, at): (i64, String, i64)) -> StoreResult<CancelRequest> {
    Ok(CancelRequest {
        run: RunId(run),
        by,
        at: Timestamp::from_millisecond(at)
            .map_err(|e| corrupt(path, &format!("the cancel of run {run}"), "requested_at", e))?,
    })
}

fn pause_row(r: &Row<'_>) -> rusqlite::Result<PauseRow> {
    Ok(PauseRow {
        kind: r.get(0)?,
        name: r.get(1)?,
        paused_at: r.get(2)?,
        paused_by: r.get(3)?,
        reason: r.get(4)?,
    })
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
            on_success: r.get(25)?,
            on_failure: r.get(26)?,
            recurring: false,
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

/// The values of a job's `on_success`, `on_failure` (last in `JOB_COLUMNS`) and `recurring`
/// (last in `JOB_WRITE_COLUMNS`) columns.
fn continuation_values(job: &JobDef) -> StoreResult<[Value; 3]> {
    let r = JobRow::of(job, Timestamp::UNIX_EPOCH)?;
    Ok([
        Value::Text(r.on_success),
        Value::Text(r.on_failure),
        Value::Integer(i64::from(r.recurring)),
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
            node_instance: r.get(18)?,
            plugin: r.get(19)?,
            plugin_version: r.get(20)?,
            plugin_sha256: r.get(21)?,
            trigger: r.get(22)?,
            parent_run_id: r.get(23)?,
            params_resolved: r.get(24)?,
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
        text(r.node_instance),
        text(r.plugin),
        text(r.plugin_version),
        text(r.plugin_sha256),
        text(r.trigger),
        int(r.parent_run_id),
        text(r.params_resolved),
    ])
}

// ---- the queries -------------------------------------------------------------------------

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

fn read_node(r: &Row<'_>) -> rusqlite::Result<NodeRow> {
    Ok(NodeRow {
        id: r.get(0)?,
        instance: r.get(1)?,
        host_name: r.get(2)?,
        pid: r.get(3)?,
        version: r.get(4)?,
        capacity: r.get(5)?,
        tags: r.get(6)?,
        started_at: r.get(7)?,
        heartbeat_at: r.get(8)?,
        stopped_at: r.get(9)?,
    })
}

/// A node row with its running runs (of any of its lives).
static NODE_SELECT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {NODE_COLUMNS}, (SELECT COUNT(*) FROM runs r WHERE r.node_id = n.id \
         AND r.state = 'running') FROM nodes n"
    )
});

fn nodes(conn: &Connection, path: &str, one: Option<&NodeId>) -> StoreResult<Vec<NodeStatus>> {
    let failed = |e| sql_error(path, "reading nodes", e);
    let rows = match one {
        Some(id) => conn
            .prepare_cached(&format!("{} WHERE n.id = ?1", &*NODE_SELECT))
            .map_err(failed)?
            .query_map([&id.0], |r| Ok((read_node(r)?, r.get::<_, i64>(10)?)))
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>(),
        None => conn
            .prepare_cached(&format!("{} ORDER BY n.id", &*NODE_SELECT))
            .map_err(failed)?
            .query_map([], |r| Ok((read_node(r)?, r.get::<_, i64>(10)?)))
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>(),
    }
    .map_err(failed)?;
    rows.into_iter()
        .map(|(row, running)| row.into_status(path, running))
        .collect()
}

fn get_job(tx: &Connection, path: &str, id: JobId) -> StoreResult<Option<JobDef>> {
    tx.prepare_cached(&GET_JOB)
        .and_then(|mut stmt| stmt.query_row([id.0], JobRow::read))
        .optional()
        .map_err(|e| sql_error(path, "reading a job", e))?
        .map(|r| r.into_job(path))
        .transpose()
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
///
/// [`DueSet::Recurring`] reads the recurring jobs alone the same way, from
/// `jobs_claim_recurring` (the claim's fairness rule).
fn due_jobs(
    conn: &Connection,
    path: &str,
    now: i64,
    limit: i64,
    tags: &str,
    set: DueSet,
) -> StoreResult<Vec<(i64, i64, i64)>> {
    let failed = |e| sql_error(path, "finding due jobs", e);
    let (next_level, level) = match set {
        DueSet::All => (
            "SELECT priority FROM jobs \
             WHERE enabled = 1 AND next_fire IS NOT NULL AND priority > ?1 \
             ORDER BY priority LIMIT 1",
            "SELECT priority, next_fire, id FROM jobs INDEXED BY jobs_claim \
             WHERE enabled = 1 AND priority = ?1 AND next_fire IS NOT NULL AND next_fire <= ?2 \
               AND (node_tag IS NULL OR node_tag IN (SELECT value FROM json_each(?4))) \
             ORDER BY next_fire, id LIMIT ?3",
        ),
        DueSet::Recurring => (
            "SELECT priority FROM jobs INDEXED BY jobs_claim_recurring \
             WHERE enabled = 1 AND next_fire IS NOT NULL AND recurring = 1 AND priority > ?1 \
             ORDER BY priority LIMIT 1",
            "SELECT priority, next_fire, id FROM jobs INDEXED BY jobs_claim_recurring \
             WHERE enabled = 1 AND priority = ?1 AND next_fire IS NOT NULL AND next_fire <= ?2 \
               AND recurring = 1 \
               AND (node_tag IS NULL OR node_tag IN (SELECT value FROM json_each(?4))) \
             ORDER BY next_fire, id LIMIT ?3",
        ),
    };
    let mut next_level = conn.prepare_cached(next_level).map_err(failed)?;
    let mut level = conn.prepare_cached(level).map_err(failed)?;
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

/// The finish `write` of attempt `attempt` of run `id`, in one conditional statement, and the
/// end of that attempt's row, both or neither: the stored run, or `None` when the run is not
/// running that attempt (nothing written). Shared by the primitive and the finishing thread's
/// batches.
///
/// The stored run is read back by its key after the update, not with `RETURNING`: SQLite
/// answers a `RETURNING` from an ephemeral table it builds for each execution (a B-tree, its
/// pager and page cache, made and dropped every time), on the writing connection; a read by
/// rowid is one seek in a page the update has just touched (B3 on SQLite: +10 %).
///
/// Outside a transaction the two statements run under a savepoint, which is then a
/// transaction of their own. Inside one (a batch of the finishing thread, an engine
/// transaction) they run bare: every caller there answers an error by rolling the whole
/// transaction back (the batch retries each finish alone), so a savepoint would add nothing
/// but its statement journal — SQLite copies each page the savepoint changes into a temporary
/// file first, some 26 pages per finish in B3, a file opened and written for every batch.
pub(super) fn finish_row(
    conn: &Connection,
    path: &str,
    id: RunId,
    attempt: u32,
    write: &FinishWrite,
) -> StoreResult<Option<Run>> {
    const FINISH: &str = "UPDATE runs SET state = ?1, error = ?2, result_json = ?3, \
           elapsed_ms = ?4, lease_expires_at = NULL, attempt = attempt + ?5, \
           next_attempt_at = ?6, finished_at = COALESCE(?7, finished_at), \
           plugin = ?10, plugin_version = ?11, plugin_sha256 = ?12 \
         WHERE id = ?8 AND state = 'running' AND attempt = ?9";
    let elapsed = write
        .elapsed
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let plugin = write.plugin.as_ref();
    // The run and its attempt together: inside a transaction, the caller's rollback on an
    // error; outside one, a savepoint (a transaction of its own).
    let own = conn.is_autocommit();
    if own {
        conn.execute_batch("SAVEPOINT finish")
            .map_err(|e| sql_error(path, "finishing a run", e))?;
    }
    let written = (|| {
        let changed = conn.prepare_cached(FINISH).and_then(|mut stmt| {
            stmt.execute(params![
                write.state.name(),
                write.error,
                write.result_json,
                elapsed,
                i64::from(write.retry),
                opt_ms(write.next_attempt_at),
                opt_ms(write.finished_at),
                id.0,
                i64::from(attempt),
                plugin.map(|p| p.name.as_str()),
                plugin.map(|p| p.version.as_str()),
                plugin.and_then(|p| p.sha256.as_deref())
            ])
        })?;
        if changed == 0 {
            return Ok(None);
        }
        end_attempt(conn, id, attempt, &write.attempt_end)?;
        conn.prepare_cached(&GET_RUN)
            .and_then(|mut stmt| stmt.query_row([id.0], RunRow::read))
            .map(Some)
    })();
    match written {
        Ok(row) => {
            if own {
                conn.execute_batch("RELEASE finish")
                    .map_err(|e| sql_error(path, "finishing a run", e))?;
            }
            row.map(|r| r.into_run(path)).transpose()
        }
        Err(e) => {
            if own {
                let _ = conn.execute_batch("ROLLBACK TO finish; RELEASE finish");
            }
            Err(sql_error(path, "finishing a run", e))
        }
    }
}

/// Ends the open attempt `attempt` of run `id` with `end`; whether it was open.
fn end_attempt(
    conn: &Connection,
    id: RunId,
    attempt: u32,
    end: &AttemptEnd,
) -> rusqlite::Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE run_attempts SET finished_at = ?1, outcome = ?2, error = ?3 \
             WHERE run_id = ?4 AND attempt = ?5 AND finished_at IS NULL",
        )?
        .execute(params![
            ms(end.at),
            end.outcome.name(),
            end.error,
            id.0,
            i64::from(attempt)
        ])?;
    Ok(n > 0)
}

fn read_attempt(r: &Row<'_>) -> rusqlite::Result<AttemptRow> {
    Ok(AttemptRow {
        run_id: r.get(0)?,
        job_id: r.get(1)?,
        fire_time: r.get(2)?,
        attempt: r.get(3)?,
        node_id: r.get(4)?,
        node_instance: r.get(5)?,
        started_at: r.get(6)?,
        finished_at: r.get(7)?,
        outcome: r.get(8)?,
        error: r.get(9)?,
    })
}

fn read_session(r: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        node_id: r.get(0)?,
        instance: r.get(1)?,
        host_name: r.get(2)?,
        started_at: r.get(3)?,
        heartbeat_at: r.get(4)?,
        stopped_at: r.get(5)?,
    })
}

impl SqliteConn<'_> {
    fn path(&self) -> &str {
        &self.db.path
    }
}

impl Conn for SqliteConn<'_> {
    async fn commit(mut self) -> Res<()> {
        if self.tx {
            self.tx = false;
            self.db
                .conn
                .execute_batch("COMMIT")
                .map_err(|e| sql_error(&self.db.path, "committing a transaction", e))?;
        }
        Ok(())
    }

    // ---- jobs ------------------------------------------------------------------------

    async fn job_get(&mut self, id: JobId) -> Res<Option<JobDef>> {
        Ok(get_job(&self.db.conn, self.path(), id)?)
    }

    async fn job_count(&mut self) -> Res<u64> {
        let path = self.path();
        let n: i64 = self
            .db
            .conn
            .prepare_cached("SELECT COUNT(*) FROM jobs")
            .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)))
            .map_err(|e| sql_error(path, "counting jobs", e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn jobs_late(&mut self, before: Timestamp, limit: usize) -> Res<Vec<JobDef>> {
        let path = self.path();
        let what = "finding late jobs";
        // Index `jobs_due` (enabled, next_fire).
        let mut stmt = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE enabled = 1 AND next_fire IS NOT NULL \
                 AND next_fire <= ?1 ORDER BY next_fire, id LIMIT ?2"
            ))
            .map_err(|e| sql_error(path, what, e))?;
        let rows = stmt
            .query_map(
                params![ms(before), i64::try_from(limit).unwrap_or(i64::MAX)],
                JobRow::read,
            )
            .map_err(|e| sql_error(path, what, e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| sql_error(path, what, e))?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_job(path))
            .collect::<StoreResult<_>>()?)
    }

    async fn job_continuations(&mut self, id: JobId, state: RunState) -> Res<Option<Vec<JobName>>> {
        // The two columns, not the whole job: every finish asks, and a job read parses its
        // schedule (a cron expression, a zone) and every text column.
        let path = self.path();
        let row = self
            .db
            .conn
            .prepare_cached("SELECT on_success, on_failure FROM jobs WHERE id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([id.0], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })
            })
            .optional()
            .map_err(|e| sql_error(path, "reading a job's continuations", e))?;
        let Some((on_success, on_failure)) = row else {
            return Ok(None);
        };
        let columns = [("on_success", on_success), ("on_failure", on_failure)];
        let picked = takt_core::job::continuations_in(state, &columns[..1], &columns[1..]);
        Ok(Some(match picked.first() {
            Some((column, text)) => continuation_names(path, id.0, column, text)?,
            None => Vec::new(),
        }))
    }

    async fn job_get_by_name(&mut self, name: &JobName) -> Res<Option<JobDef>> {
        let path = self.path();
        Ok(self
            .db
            .conn
            .prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?1"))
            .and_then(|mut stmt| stmt.query_row([name.as_str()], JobRow::read))
            .optional()
            .map_err(|e| sql_error(path, "reading a job", e))?
            .map(|r| r.into_job(path))
            .transpose()?)
    }

    async fn job_list(&mut self) -> Res<Vec<JobDef>> {
        let path = self.path();
        let mut stmt = self
            .db
            .conn
            .prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY id"))
            .map_err(|e| sql_error(path, "listing jobs", e))?;
        let rows = stmt
            .query_map([], JobRow::read)
            .map_err(|e| sql_error(path, "listing jobs", e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| sql_error(path, "listing jobs", e))?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_job(path))
            .collect::<StoreResult<_>>()?)
    }

    async fn job_page(&mut self, query: &JobQuery) -> Res<Vec<JobDef>> {
        let path = self.path();
        let failed = |e| sql_error(path, "listing a page of jobs", e);
        // Only the conditions given, each shape one cached statement. The filters other than
        // the cursor are written `+column` so that SQLite never answers them from another
        // index (`jobs_due` starts with `enabled`) and sorts: the name's unique index, read
        // in order from the cursor, stops after the limit.
        let mut cond = Vec::new();
        let mut values: Vec<Value> = Vec::new();
        let mut add = |sql: &str, v: Vec<Value>| {
            let mut parts = sql.split('?');
            let mut out = parts.next().unwrap_or_default().to_string();
            for (part, v) in parts.zip(v) {
                values.push(v);
                out.push_str(&format!("?{}{part}", values.len()));
            }
            cond.push(out);
        };
        let text = |t: &str| Value::Text(t.to_string());
        if let Some(after) = &query.after {
            add("name > ?", vec![text(after.as_str())]);
        }
        if let Some(e) = query.enabled {
            add("+enabled = ?", vec![Value::Integer(i64::from(e))]);
        }
        if let Some(g) = &query.group {
            add("+group_name = ?", vec![text(g)]);
        }
        if let Some(t) = &query.node_tag {
            add("+node_tag = ?", vec![text(t)]);
        }
        if let Some(p) = &query.handler_prefix {
            // Not LIKE: it ignores ASCII case and would need `%` and `_` escaped.
            add(
                "substr(handler_type, 1, length(?)) = ?",
                vec![text(p), text(p)],
            );
        }
        if let Some(n) = &query.name_contains {
            // SQLite's lower() folds ASCII letters only, as JobQuery::matches does.
            add("instr(lower(name), lower(?)) > 0", vec![text(n)]);
        }
        values.push(Value::Integer(
            i64::try_from(query.limit + 1).unwrap_or(i64::MAX),
        ));
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs {}{} ORDER BY name LIMIT ?{}",
            if cond.is_empty() { "" } else { "WHERE " },
            cond.join(" AND "),
            values.len()
        );
        let mut stmt = self.db.conn.prepare_cached(&sql).map_err(failed)?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(values), JobRow::read)
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_job(path))
            .collect::<StoreResult<_>>()?)
    }

    async fn job_insert(&mut self, job: &JobDef, now: Timestamp) -> Res<Option<JobDef>> {
        let path = self.path();
        let mut values = vec![Value::Text(job.name.as_str().to_string())];
        values.extend(job_values(job)?);
        values.extend([
            opt_ms(job.next_fire).map_or(Value::Null, Value::Integer),
            Value::Integer(1),
            Value::Integer(ms(now)),
        ]);
        values.extend(continuation_values(job)?);
        let columns = JOB_WRITE_COLUMNS.trim_start_matches("id, ");
        let marks = vec!["?"; values.len()].join(", ");
        let name = values.len() + 1;
        values.push(Value::Text(job.name.as_str().to_string()));
        // One statement, without taking an id when the name is taken (an INSERT that
        // meets its unique key still consumes an AUTOINCREMENT id; ids without gaps read
        // better).
        let n = self
            .db
            .conn
            .execute(
                &format!(
                    "INSERT INTO jobs ({columns}) SELECT {marks} \
                     WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE name = ?{name})"
                ),
                rusqlite::params_from_iter(values),
            )
            .map_err(|e| sql_error(path, &format!("inserting job {}", job.name), e))?;
        if n == 0 {
            return Ok(None);
        }
        let id = JobId(self.db.conn.last_insert_rowid());
        Ok(Some(
            get_job(&self.db.conn, path, id)?.ok_or_else(|| job_missing(id))?,
        ))
    }

    async fn job_update_if_version(&mut self, job: &JobDef, now: Timestamp) -> Res<Option<JobDef>> {
        let path = self.path();
        let Some(id) = job.id else { return Ok(None) };
        let expected = to_i64(job.version, "job version")?;
        let mut values = vec![Value::Text(job.name.as_str().to_string())];
        values.extend(job_values(job)?);
        values.extend([
            opt_ms(job.next_fire).map_or(Value::Null, Value::Integer),
            Value::Integer(expected + 1),
            Value::Integer(ms(now)),
        ]);
        values.extend(continuation_values(job)?);
        let sets = JOB_WRITE_COLUMNS
            .split(", ")
            .skip(1)
            .enumerate()
            .map(|(i, c)| format!("{c} = ?{}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let n = values.len();
        values.extend([Value::Integer(id.0), Value::Integer(expected)]);
        let changed = self
            .db
            .conn
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
            return Ok(None);
        }
        Ok(get_job(&self.db.conn, path, id)?)
    }

    async fn job_delete(&mut self, id: JobId) -> Res<bool> {
        // Runs and logs go with it (ON DELETE CASCADE).
        let n = self
            .db
            .conn
            .execute("DELETE FROM jobs WHERE id = ?1", [id.0])
            .map_err(|e| sql_error(self.path(), "deleting a job", e))?;
        Ok(n > 0)
    }

    async fn job_set_enabled(
        &mut self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> Res<Option<JobDef>> {
        let path = self.path();
        let n = self
            .db
            .conn
            .execute(
                "UPDATE jobs SET enabled = ?1, version = version + 1, updated_at = ?2 \
                 WHERE id = ?3",
                params![enabled, ms(now), id.0],
            )
            .map_err(|e| sql_error(path, "enabling or disabling a job", e))?;
        if n == 0 {
            return Ok(None);
        }
        Ok(get_job(&self.db.conn, path, id)?)
    }

    async fn job_set_next_fire_if(
        &mut self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached("UPDATE jobs SET next_fire = ?1 WHERE id = ?2 AND next_fire IS ?3")
            .and_then(|mut stmt| stmt.execute(params![opt_ms(new), id.0, opt_ms(expected)]))
            .map_err(|e| sql_error(self.path(), "setting a job's next fire", e))?;
        Ok(n == 1)
    }

    async fn jobs_due(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
        set: DueSet,
    ) -> Res<Vec<DueJob>> {
        Ok(self.due_rows(now, limit, tags, set)?)
    }

    async fn next_due(&mut self, tags: &[String], set: DueSet) -> Res<Option<Timestamp>> {
        Ok(self.next_due_at(tags, set)?)
    }

    // ---- claiming --------------------------------------------------------------------

    async fn claim_fires(
        &mut self,
        now: Timestamp,
        limit: usize,
        exclude: &[JobId],
        tags: &[String],
        set: DueSet,
    ) -> Res<Vec<JobDef>> {
        let path = self.path();
        let want = i64::try_from(limit.saturating_add(exclude.len())).unwrap_or(i64::MAX);
        let due = due_jobs(&self.db.conn, path, ms(now), want, &tags_json(tags), set)?;
        let mut out = Vec::new();
        for (_, _, id) in due {
            if out.len() >= limit {
                break;
            }
            let id = JobId(id);
            if exclude.contains(&id) {
                continue;
            }
            out.push(get_job(&self.db.conn, path, id)?.ok_or_else(|| job_missing(id))?);
        }
        Ok(out)
    }

    async fn claim_pending(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> Res<Vec<PendingDue>> {
        let path = self.path();
        // Pending runs (retries and queued fires) are few; their query needs no per-level
        // walk.
        let failed = |e| sql_error(path, "finding due runs", e);
        let mut stmt = self
            .db
            .conn
            .prepare_cached(
                "SELECT j.priority, COALESCE(r.next_attempt_at, r.created_at) AS due_at, r.id \
                 FROM runs r JOIN jobs j ON j.id = r.job_id \
                 WHERE r.state = 'pending' AND COALESCE(r.next_attempt_at, r.created_at) <= ?1 \
                   AND j.enabled = 1 \
                   AND (j.node_tag IS NULL OR j.node_tag IN (SELECT value FROM json_each(?3))) \
                   AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id) \
                   AND (r.next_attempt_at IS NOT NULL OR NOT EXISTS \
                        (SELECT 1 FROM runs x WHERE x.job_id = r.job_id AND x.state = 'running')) \
                 ORDER BY j.priority, due_at, r.id LIMIT ?2",
            )
            .map_err(failed)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![ms(now), limit, tags_json(tags)], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|(priority, at, id)| {
                let bad =
                    |c: &str, d: &dyn std::fmt::Display| corrupt(path, &format!("run {id}"), c, d);
                Ok(PendingDue {
                    id: RunId(id),
                    priority: u16::try_from(priority).map_err(|_| bad("priority", &priority))?,
                    due_at: Timestamp::from_millisecond(at).map_err(|e| bad("due time", &e))?,
                })
            })
            .collect::<StoreResult<_>>()?)
    }

    async fn advance_next_fires(&mut self, moves: &[NextFireMove]) -> Res<usize> {
        let path = self.path();
        let mut stmt = self
            .db
            .conn
            .prepare_cached("UPDATE jobs SET next_fire = ?1 WHERE id = ?2 AND next_fire IS ?3")
            .map_err(|e| sql_error(path, "advancing next fires", e))?;
        let mut n = 0;
        for m in moves {
            n += stmt
                .execute(params![opt_ms(m.new), m.job.0, ms(m.old)])
                .map_err(|e| sql_error(path, "advancing next fires", e))?;
        }
        Ok(n)
    }

    async fn insert_runs(&mut self, runs: &[Run], _token: i64) -> Res<Vec<Run>> {
        // No claim token: a SQLite COMMIT's answer is never lost (the file is local).
        let path = self.path();
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            if let Some(id) = insert_run(&self.db.conn, path, run)? {
                out.push(need_run(&self.db.conn, path, id)?);
            }
        }
        Ok(out)
    }

    async fn queued_may_start(&mut self, job: JobId) -> Res<bool> {
        let busy: Option<i64> = self
            .db
            .conn
            .prepare_cached("SELECT 1 FROM runs WHERE job_id = ?1 AND state = 'running' LIMIT 1")
            .and_then(|mut stmt| stmt.query_row([job.0], |r| r.get(0)))
            .optional()
            .map_err(|e| sql_error(self.path(), "checking a queued run's job", e))?;
        Ok(busy.is_none())
    }

    async fn run_update_if(
        &mut self,
        run: &Run,
        expected: (RunState, u32),
        _token: i64,
    ) -> Res<Option<Run>> {
        let path = self.path();
        let Some(id) = run.id else { return Ok(None) };
        if !update_run_if(&self.db.conn, path, run, id, expected.0, expected.1)? {
            return Ok(None);
        }
        Ok(get_run(&self.db.conn, path, id)?)
    }

    async fn runs_claimed_by(&mut self, _node: &NodeId, _token: i64) -> Res<Vec<Run>> {
        // Never asked: a SQLite COMMIT's outcome is always known.
        Ok(Vec::new())
    }

    // ---- runs ------------------------------------------------------------------------

    async fn run_get(&mut self, id: RunId) -> Res<Option<Run>> {
        Ok(get_run(&self.db.conn, self.path(), id)?)
    }

    async fn run_id_at(&mut self, job: JobId, fire: Timestamp) -> Res<Option<RunId>> {
        let id: Option<i64> = self
            .db
            .conn
            .prepare_cached("SELECT id FROM runs WHERE job_id = ?1 AND fire_time = ?2")
            .and_then(|mut stmt| stmt.query_row(params![job.0, ms(fire)], |r| r.get(0)))
            .optional()
            .map_err(|e| sql_error(self.path(), "reading a run", e))?;
        Ok(id.map(RunId))
    }

    async fn run_list(&mut self, filter: &RunFilter) -> Res<Vec<Run>> {
        Ok(self.list_runs(filter)?)
    }

    async fn runs_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> Res<Vec<Run>> {
        let path = self.path();
        let failed = |e| sql_error(path, "listing runs by fire time", e);
        // Two statements, so each has its index: (job_id, fire_time) or (fire_time, id).
        let rows = match job {
            Some(job) => self
                .db
                .conn
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE job_id = ?1 \
                     AND fire_time >= ?2 AND fire_time < ?3 ORDER BY fire_time, id"
                ))
                .map_err(failed)?
                .query_map(params![job.0, ms(from), ms(to)], RunRow::read)
                .map_err(failed)?
                .collect::<rusqlite::Result<Vec<_>>>(),
            None => self
                .db
                .conn
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM runs \
                     WHERE fire_time >= ?1 AND fire_time < ?2 ORDER BY fire_time, id"
                ))
                .map_err(failed)?
                .query_map(params![ms(from), ms(to)], RunRow::read)
                .map_err(failed)?
                .collect::<rusqlite::Result<Vec<_>>>(),
        }
        .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_run(path))
            .collect::<StoreResult<_>>()?)
    }

    async fn attempts_begin(&mut self, attempts: &[Attempt]) -> Res<()> {
        let path = self.path();
        let failed = |e| sql_error(path, "recording an attempt", e);
        let mut stmt = self
            .db
            .conn
            .prepare_cached(
                "INSERT INTO run_attempts (run_id, attempt, node_id, node_instance, started_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (run_id, attempt) DO NOTHING",
            )
            .map_err(failed)?;
        for a in attempts {
            stmt.execute(params![
                a.run_id.0,
                i64::from(a.attempt),
                a.node_id.0,
                a.node_instance.as_ref().map(|i| i.0.as_str()),
                ms(a.started_at)
            ])
            .map_err(failed)?;
        }
        Ok(())
    }

    async fn attempt_end(&mut self, run: RunId, attempt: u32, end: &AttemptEnd) -> Res<bool> {
        Ok(end_attempt(&self.db.conn, run, attempt, end)
            .map_err(|e| sql_error(self.path(), "ending an attempt", e))?)
    }

    async fn attempt_outlived(
        &mut self,
        run: RunId,
        attempt: u32,
        at: Timestamp,
        error: &str,
    ) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached(
                "UPDATE run_attempts SET finished_at = ?1, error = ?2 \
                 WHERE run_id = ?3 AND attempt = ?4 \
                 AND outcome IN ('lease_expired', 'node_restarted') AND finished_at < ?1",
            )
            .and_then(|mut stmt| stmt.execute(params![ms(at), error, run.0, i64::from(attempt)]))
            .map_err(|e| sql_error(self.path(), "recording an attempt's late end", e))?;
        Ok(n > 0)
    }

    async fn attempts_of_run(&mut self, run: RunId) -> Res<Vec<Attempt>> {
        let path = self.path();
        let failed = |e| sql_error(path, "reading a run's attempts", e);
        let rows = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {ATTEMPT_COLUMNS} FROM run_attempts a JOIN runs r ON r.id = a.run_id \
                 WHERE a.run_id = ?1 ORDER BY a.attempt"
            ))
            .map_err(failed)?
            .query_map([run.0], read_attempt)
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_attempt(path))
            .collect::<StoreResult<_>>()?)
    }

    async fn attempts_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> Res<Vec<Attempt>> {
        let path = self.path();
        let failed = |e| sql_error(path, "listing attempts by fire time", e);
        let order = "ORDER BY r.fire_time, r.id, a.attempt";
        let rows = match job {
            Some(job) => self
                .db
                .conn
                .prepare_cached(&format!(
                    "SELECT {ATTEMPT_COLUMNS} FROM runs r JOIN run_attempts a ON a.run_id = r.id \
                     WHERE r.job_id = ?1 AND r.fire_time >= ?2 AND r.fire_time < ?3 {order}"
                ))
                .map_err(failed)?
                .query_map(params![job.0, ms(from), ms(to)], read_attempt)
                .map_err(failed)?
                .collect::<rusqlite::Result<Vec<_>>>(),
            None => self
                .db
                .conn
                .prepare_cached(&format!(
                    "SELECT {ATTEMPT_COLUMNS} FROM runs r JOIN run_attempts a ON a.run_id = r.id \
                     WHERE r.fire_time >= ?1 AND r.fire_time < ?2 {order}"
                ))
                .map_err(failed)?
                .query_map(params![ms(from), ms(to)], read_attempt)
                .map_err(failed)?
                .collect::<rusqlite::Result<Vec<_>>>(),
        }
        .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_attempt(path))
            .collect::<StoreResult<_>>()?)
    }

    async fn run_finish_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        write: &FinishWrite,
    ) -> Res<Option<Run>> {
        Ok(finish_row(&self.db.conn, self.path(), id, attempt, write)?)
    }

    async fn run_set_progress_if_running(&mut self, id: RunId, progress: &Progress) -> Res<bool> {
        let n = self
            .db
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
            .map_err(|e| sql_error(self.path(), "recording progress", e))?;
        Ok(n > 0)
    }

    async fn runs_to_recover(
        &mut self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> Res<Vec<RunId>> {
        let path = self.path();
        let failed = |e| sql_error(path, "finding expired leases", e);
        let mut stmt = self
            .db
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE state = 'running' \
                 AND ((?1 IS NOT NULL AND node_id = ?1 AND node_instance IS NOT ?2) \
                      OR lease_expires_at IS NULL OR lease_expires_at <= ?3) \
                 ORDER BY id",
            )
            .map_err(failed)?;
        let ids = stmt
            .query_map(
                params![
                    restart.map(|(n, _)| n.0.as_str()),
                    restart.map(|(_, i)| i.0.as_str()),
                    ms(now)
                ],
                |r| r.get(0).map(RunId),
            )
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed)?;
        Ok(ids)
    }

    // ---- nodes and leases --------------------------------------------------------------

    async fn renew(
        &mut self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> Res<Option<Vec<RunId>>> {
        let path = self.path();
        let beat = self
            .db
            .conn
            .prepare_cached("UPDATE nodes SET heartbeat_at = ?1 WHERE id = ?2 AND instance = ?3")
            .and_then(|mut stmt| stmt.execute(params![ms(now), node.0, instance.0]))
            .map_err(|e| sql_error(path, "recording a heartbeat", e))?;
        if beat == 0 {
            return Ok(None);
        }
        self.db
            .conn
            .prepare_cached("UPDATE node_sessions SET heartbeat_at = ?1 WHERE instance = ?2")
            .and_then(|mut stmt| stmt.execute(params![ms(now), instance.0]))
            .map_err(|e| sql_error(path, "recording a heartbeat", e))?;
        let failed = |e| sql_error(path, "renewing leases", e);
        let mut stmt = self
            .db
            .conn
            .prepare_cached(
                "UPDATE runs SET lease_expires_at = ?1 \
                 WHERE node_id = ?2 AND node_instance = ?3 AND state = 'running' \
                 AND lease_expires_at > ?4 RETURNING id",
            )
            .map_err(failed)?;
        let mut ids = stmt
            .query_map(params![ms(until), node.0, instance.0, ms(now)], |r| {
                r.get(0).map(RunId)
            })
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed)?;
        ids.sort_unstable();
        Ok(Some(ids))
    }

    async fn node_get(&mut self, id: &NodeId) -> Res<Option<NodeStatus>> {
        Ok(nodes(&self.db.conn, self.path(), Some(id))?.pop())
    }

    async fn node_put(&mut self, node: &NodeInfo, now: Timestamp, _exists: bool) -> Res<bool> {
        let r = NodeRow::of(node, now);
        self.db
            .conn
            .prepare_cached(
                "INSERT INTO nodes (id, instance, host_name, pid, version, capacity, tags, \
                 started_at, heartbeat_at, stopped_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, \
                 ?9, NULL) ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, \
                 host_name = excluded.host_name, pid = excluded.pid, version = excluded.version, \
                 capacity = excluded.capacity, tags = excluded.tags, \
                 started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, \
                 stopped_at = NULL",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    r.id,
                    r.instance,
                    r.host_name,
                    r.pid,
                    r.version,
                    r.capacity,
                    r.tags,
                    r.started_at,
                    r.heartbeat_at
                ])
            })
            .map_err(|e| sql_error(self.path(), "registering the node", e))?;
        self.db
            .conn
            .prepare_cached(
                "INSERT INTO node_sessions (instance, node_id, host_name, started_at, \
                 heartbeat_at, stopped_at) VALUES (?1, ?2, ?3, ?4, ?4, NULL) \
                 ON CONFLICT (instance) DO UPDATE SET node_id = excluded.node_id, \
                 host_name = excluded.host_name, started_at = excluded.started_at, \
                 heartbeat_at = excluded.heartbeat_at, stopped_at = NULL",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![node.instance.0, node.id.0, node.host_name, ms(now)])
            })
            .map_err(|e| sql_error(self.path(), "recording the node's life", e))?;
        Ok(true)
    }

    async fn node_stop(&mut self, node: &NodeId, instance: &InstanceId, now: Timestamp) -> Res<()> {
        self.db
            .conn
            .prepare_cached("UPDATE nodes SET stopped_at = ?1 WHERE id = ?2 AND instance = ?3")
            .and_then(|mut stmt| stmt.execute(params![ms(now), node.0, instance.0]))
            .map_err(|e| sql_error(self.path(), "recording a node stop", e))?;
        self.db
            .conn
            .prepare_cached(
                "UPDATE node_sessions SET stopped_at = ?1 WHERE node_id = ?2 AND instance = ?3",
            )
            .and_then(|mut stmt| stmt.execute(params![ms(now), node.0, instance.0]))
            .map_err(|e| sql_error(self.path(), "recording a node stop", e))?;
        Ok(())
    }

    async fn node_list(&mut self) -> Res<Vec<NodeStatus>> {
        Ok(nodes(&self.db.conn, self.path(), None)?)
    }

    async fn node_sessions(&mut self, from: Timestamp, to: Timestamp) -> Res<Vec<NodeSession>> {
        let path = self.path();
        let failed = |e| sql_error(path, "listing node lives", e);
        let rows = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM node_sessions \
                 WHERE started_at < ?2 AND COALESCE(stopped_at, heartbeat_at) >= ?1 \
                 ORDER BY started_at, instance"
            ))
            .map_err(failed)?
            .query_map(params![ms(from), ms(to)], read_session)
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_session(path))
            .collect::<StoreResult<_>>()?)
    }

    // ---- pauses ------------------------------------------------------------------------

    async fn hold_get(&mut self, job: JobId) -> Res<Option<Hold>> {
        let path = self.path();
        let row = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {HOLD_COLUMNS} FROM job_holds WHERE job_id = ?1"
            ))
            .and_then(|mut stmt| {
                stmt.query_row([job.0], |r| {
                    Ok(HoldRow {
                        next_fire: r.get(0)?,
                        paused_at: r.get(1)?,
                        paused_by: r.get(2)?,
                        reason: r.get(3)?,
                    })
                })
                .optional()
            })
            .map_err(|e| sql_error(path, "reading a job's hold", e))?;
        Ok(row.map(|r| r.into_hold(path, job.0)).transpose()?)
    }

    async fn hold_insert(&mut self, job: JobId, hold: &Hold) -> Res<()> {
        let r = HoldRow::of(hold);
        self.db
            .conn
            .prepare_cached(&format!(
                "INSERT INTO job_holds (job_id, {HOLD_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)"
            ))
            .and_then(|mut stmt| {
                stmt.execute(params![
                    job.0,
                    r.next_fire,
                    r.paused_at,
                    r.paused_by,
                    r.reason
                ])
            })
            .map_err(|e| sql_error(self.path(), "holding a job", e))?;
        Ok(())
    }

    async fn hold_delete(&mut self, job: JobId) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached("DELETE FROM job_holds WHERE job_id = ?1")
            .and_then(|mut stmt| stmt.execute([job.0]))
            .map_err(|e| sql_error(self.path(), "releasing a job's hold", e))?;
        Ok(n > 0)
    }

    async fn holds_list(&mut self) -> Res<Vec<(JobId, Hold)>> {
        let path = self.path();
        let rows = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT job_id, {HOLD_COLUMNS} FROM job_holds ORDER BY job_id"
            ))
            .and_then(|mut stmt| {
                stmt.query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        HoldRow {
                            next_fire: r.get(1)?,
                            paused_at: r.get(2)?,
                            paused_by: r.get(3)?,
                            reason: r.get(4)?,
                        },
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| sql_error(path, "listing held jobs", e))?;
        Ok(rows
            .into_iter()
            .map(|(id, r)| Ok((JobId(id), r.into_hold(path, id)?)))
            .collect::<StoreResult<_>>()?)
    }

    async fn pause_get(&mut self, kind: PauseKind, name: &str) -> Res<Option<Pause>> {
        let path = self.path();
        let row = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT kind, name, {PAUSE_COLUMNS} FROM pauses WHERE kind = ?1 AND name = ?2"
            ))
            .and_then(|mut stmt| stmt.query_row([kind.name(), name], pause_row).optional())
            .map_err(|e| sql_error(path, "reading a pause", e))?;
        Ok(row
            .map(|r| r.into_pause(path).map(|(_, _, p)| p))
            .transpose()?)
    }

    async fn pause_insert(&mut self, kind: PauseKind, name: &str, pause: &Pause) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached(&format!(
                "INSERT INTO pauses (kind, name, {PAUSE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)                  ON CONFLICT (kind, name) DO NOTHING"
            ))
            .and_then(|mut stmt| {
                stmt.execute(params![kind.name(), name, ms(pause.at), pause.by, pause.reason])
            })
            .map_err(|e| sql_error(self.path(), "recording a pause", e))?;
        Ok(n > 0)
    }

    async fn pause_delete(&mut self, kind: PauseKind, name: &str) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached("DELETE FROM pauses WHERE kind = ?1 AND name = ?2")
            .and_then(|mut stmt| stmt.execute([kind.name(), name]))
            .map_err(|e| sql_error(self.path(), "removing a pause", e))?;
        Ok(n > 0)
    }

    async fn pauses_list(&mut self) -> Res<Vec<(PauseKind, String, Pause)>> {
        let path = self.path();
        let rows = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT kind, name, {PAUSE_COLUMNS} FROM pauses ORDER BY kind, name"
            ))
            .and_then(|mut stmt| {
                stmt.query_map([], pause_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| sql_error(path, "listing pauses", e))?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_pause(path))
            .collect::<StoreResult<_>>()?)
    }

    // ---- cancel requests ---------------------------------------------------------------

    async fn group_get(&mut self, name: &str, _lock: bool) -> Res<Option<GroupDef>> {
        // The claim's transaction is BEGIN IMMEDIATE: it holds the write lock already.
        let path = self.path();
        let row: Option<(Option<i64>, Option<i64>)> = self
            .db
            .conn
            .prepare_cached("SELECT max_running, released_at FROM job_groups WHERE name = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(|e| sql_error(path, "reading a group", e))?;
        Ok(row
            .map(|(max, released)| group_row(path, name, max, released))
            .transpose()?)
    }

    async fn group_put(&mut self, name: &str, def: &GroupDef) -> Res<()> {
        self.db
            .conn
            .prepare_cached(
                "INSERT INTO job_groups (name, max_running, released_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running, \
                 released_at = excluded.released_at",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![name, def.max_running, opt_ms(def.released_at)])
            })
            .map_err(|e| sql_error(self.path(), "defining a group", e))?;
        Ok(())
    }

    async fn group_defs(&mut self) -> Res<Vec<(String, GroupDef)>> {
        let path = self.path();
        let rows: Vec<(String, Option<i64>, Option<i64>)> = self
            .db
            .conn
            .prepare_cached("SELECT name, max_running, released_at FROM job_groups ORDER BY name")
            .and_then(|mut stmt| {
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .map_err(|e| sql_error(path, "listing groups", e))?;
        Ok(rows
            .into_iter()
            .map(|(name, max, released)| {
                let def = group_row(path, &name, max, released)?;
                Ok((name, def))
            })
            .collect::<StoreResult<_>>()?)
    }

    async fn cancel_insert(&mut self, request: &CancelRequest) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached(
                "INSERT INTO cancel_requests (run_id, requested_by, requested_at) \
                 VALUES (?1, ?2, ?3) ON CONFLICT (run_id) DO NOTHING",
            )
            .and_then(|mut stmt| stmt.execute(params![request.run.0, request.by, ms(request.at)]))
            .map_err(|e| sql_error(self.path(), "recording a cancel request", e))?;
        Ok(n > 0)
    }

    async fn cancel_get(&mut self, run: RunId) -> Res<Option<CancelRequest>> {
        let path = self.path();
        let row = self
            .db
            .conn
            .prepare_cached(
                "SELECT run_id, requested_by, requested_at FROM cancel_requests WHERE run_id = ?1",
            )
            .and_then(|mut stmt| stmt.query_row([run.0], cancel_row).optional())
            .map_err(|e| sql_error(path, "reading a cancel request", e))?;
        Ok(row.map(|r| cancel_of(path, r)).transpose()?)
    }

    async fn cancels_of_node(&mut self, node: &NodeId) -> Res<Vec<CancelRequest>> {
        let path = self.path();
        let rows = self
            .db
            .conn
            .prepare_cached(
                "SELECT c.run_id, c.requested_by, c.requested_at \
                 FROM cancel_requests c JOIN runs r ON r.id = c.run_id \
                 WHERE r.state = 'running' AND r.node_id = ?1 ORDER BY c.run_id",
            )
            .and_then(|mut stmt| {
                stmt.query_map([&node.0], cancel_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| sql_error(path, "reading cancel requests", e))?;
        Ok(rows
            .into_iter()
            .map(|r| cancel_of(path, r))
            .collect::<StoreResult<_>>()?)
    }

    // ---- logs, retention ---------------------------------------------------------------

    async fn log_append(&mut self, run: RunId, lines: &[LogLine]) -> Res<bool> {
        let path = self.path();
        let conn = &self.db.conn;
        let exists: Option<i64> = conn
            .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")
            .and_then(|mut stmt| stmt.query_row([run.0], |r| r.get(0)))
            .optional()
            .map_err(|e| sql_error(path, "reading a run", e))?;
        if exists.is_none() {
            return Ok(false);
        }
        // All lines or none: inside a savepoint (a transaction of its own outside one).
        conn.execute_batch("SAVEPOINT log_append")
            .map_err(|e| sql_error(path, "appending log lines", e))?;
        let written = (|| {
            let mut stmt = conn.prepare_cached(
                "INSERT INTO run_logs (run_id, at, level, message) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for l in lines {
                stmt.execute(params![run.0, ms(l.at), l.level.name(), l.message])?;
            }
            Ok::<_, rusqlite::Error>(())
        })();
        match written {
            Ok(()) => conn
                .execute_batch("RELEASE log_append")
                .map_err(|e| sql_error(path, "appending log lines", e))?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK TO log_append; RELEASE log_append");
                return Err(sql_error(path, "appending log lines", e).into());
            }
        }
        Ok(true)
    }

    async fn log_list(
        &mut self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> Res<Vec<(u64, LogLine)>> {
        Ok(self.list_logs(run, after, limit)?)
    }

    async fn retention_purge(&mut self, older_than: Timestamp) -> Res<PurgeCounts> {
        Ok(self.purge(older_than)?)
    }

    async fn token_insert(&mut self, token: &NewToken) -> Res<Option<ApiToken>> {
        let path = self.path();
        let n = self
            .db
            .conn
            .execute(
                "INSERT INTO api_tokens (name, role, sha256, created_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (name) DO NOTHING",
                params![
                    token.name,
                    token.role.name(),
                    token.sha256,
                    ms(token.created_at)
                ],
            )
            .map_err(|e| sql_error(path, "storing a token", e))?;
        if n == 0 {
            return Ok(None);
        }
        Ok(self.token_named(&token.name)?)
    }

    async fn token_list(&mut self) -> Res<Vec<ApiToken>> {
        let path = self.path();
        let failed = |e| sql_error(path, "listing tokens", e);
        let mut stmt = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY name"
            ))
            .map_err(failed)?;
        let rows = stmt
            .query_map([], token_row)
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_token(path))
            .collect::<StoreResult<_>>()?)
    }

    async fn token_revoke(&mut self, name: &str, now: Timestamp) -> Res<Option<ApiToken>> {
        let path = self.path();
        self.db
            .conn
            .execute(
                "UPDATE api_tokens SET revoked_at = ?2 WHERE name = ?1 AND revoked_at IS NULL",
                params![name, ms(now)],
            )
            .map_err(|e| sql_error(path, "revoking a token", e))?;
        Ok(self.token_named(name)?)
    }

    async fn action_insert(&mut self, action: &OperatorAction) -> Res<()> {
        let path = self.path();
        self.db
            .conn
            .execute(
                "INSERT INTO operator_actions (at, actor, action, job_name, run_id, detail) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    ms(action.at),
                    action.actor,
                    action.action,
                    action.job,
                    action.run.map(|r| r.0),
                    action.detail
                ],
            )
            .map_err(|e| sql_error(path, "recording an operator action", e))?;
        Ok(())
    }

    async fn action_list(&mut self, job: Option<&str>, limit: usize) -> Res<Vec<OperatorAction>> {
        let path = self.path();
        let failed = |e| sql_error(path, "listing operator actions", e);
        let filter = if job.is_some() {
            "WHERE job_name = ?1"
        } else {
            "WHERE ?1 IS NULL"
        };
        let mut stmt = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {ACTION_COLUMNS} FROM operator_actions {filter} ORDER BY id DESC LIMIT ?2"
            ))
            .map_err(failed)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![job, limit], |r| {
                Ok(ActionRow {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    actor: r.get(2)?,
                    action: r.get(3)?,
                    job: r.get(4)?,
                    run: r.get(5)?,
                    detail: r.get(6)?,
                })
            })
            .map_err(failed)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_action(path))
            .collect::<StoreResult<_>>()?)
    }
    // ---- alerts ------------------------------------------------------------------------

    async fn alert_reopen(&mut self, key: &AlertKey, episode: &str, now: Timestamp) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached(
                "UPDATE alert_episodes SET episode = ?1, opened_at = ?2, closed_at = NULL \
                 WHERE subject = ?3 AND condition = ?4 AND closed_at IS NOT NULL",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![episode, ms(now), key.subject, key.condition])
            })
            .map_err(|e| sql_error(self.path(), "reopening an alert episode", e))?;
        Ok(n == 1)
    }

    async fn alert_insert(&mut self, key: &AlertKey, episode: &str, now: Timestamp) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached(
                "INSERT INTO alert_episodes (subject, condition, episode, opened_at) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (subject, condition) DO NOTHING",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![key.subject, key.condition, episode, ms(now)])
            })
            .map_err(|e| sql_error(self.path(), "opening an alert episode", e))?;
        Ok(n == 1)
    }

    async fn alert_close(&mut self, key: &AlertKey, now: Timestamp) -> Res<bool> {
        let n = self
            .db
            .conn
            .prepare_cached(
                "UPDATE alert_episodes SET closed_at = ?1 \
                 WHERE subject = ?2 AND condition = ?3 AND closed_at IS NULL",
            )
            .and_then(|mut stmt| stmt.execute(params![ms(now), key.subject, key.condition]))
            .map_err(|e| sql_error(self.path(), "closing an alert episode", e))?;
        Ok(n == 1)
    }

    async fn alert_delivery_insert(&mut self, d: &AlertDelivery) -> Res<i64> {
        let conn = &self.db.conn;
        conn.prepare_cached(
            "INSERT INTO alert_deliveries \
             (at, node, channel, subject, condition, kind, run_id, outcome, detail) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                ms(d.at),
                d.node,
                d.channel,
                d.key.subject,
                d.key.condition,
                d.kind,
                d.run,
                d.outcome.name(),
                d.detail
            ])
        })
        .map_err(|e| sql_error(self.path(), "recording an alert delivery", e))?;
        Ok(conn.last_insert_rowid())
    }

    async fn runs_of_parent(&mut self, parent: RunId) -> Res<Vec<Run>> {
        let path = self.path();
        let rows = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = ?1 ORDER BY id"
            ))
            .and_then(|mut stmt| {
                stmt.query_map([parent.0], RunRow::read)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| sql_error(path, "listing a run's continuations", e))?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_run(path))
            .collect::<StoreResult<Vec<_>>>()?)
    }

    async fn last_success_fire(&mut self, job: JobId, before: Timestamp) -> Res<Option<Timestamp>> {
        let path = self.path();
        let at: Option<i64> = self
            .db
            .conn
            .prepare_cached(
                "SELECT MAX(fire_time) FROM runs \
                 WHERE job_id = ?1 AND state = 'succeeded' AND fire_time < ?2",
            )
            .and_then(|mut stmt| stmt.query_row(params![job.0, ms(before)], |r| r.get(0)))
            .map_err(|e| sql_error(path, "finding a job's last success", e))?;
        Ok(at
            .map(|v| {
                Timestamp::from_millisecond(v)
                    .map_err(|e| corrupt(path, &format!("a run of job {job}"), "fire_time", e))
            })
            .transpose()?)
    }

    async fn run_set_params_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        params_json: &str,
    ) -> Res<bool> {
        let n = self
            .db
            .conn
            .execute(
                "UPDATE runs SET params_resolved = ?1 \
                 WHERE id = ?2 AND state = 'running' AND attempt = ?3",
                params![params_json, id.0, i64::from(attempt)],
            )
            .map_err(|e| sql_error(self.path(), "recording a run's resolved params", e))?;
        Ok(n > 0)
    }

    async fn alert_delivery_list(&mut self, limit: usize) -> Res<Vec<AlertDelivery>> {
        let path = self.path();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {DELIVERY_COLUMNS} FROM alert_deliveries ORDER BY id DESC LIMIT ?1"
            ))
            .and_then(|mut stmt| {
                stmt.query_map([limit], |r| {
                    Ok(DeliveryRow {
                        id: r.get(0)?,
                        at_ms: r.get(1)?,
                        node: r.get(2)?,
                        channel: r.get(3)?,
                        subject: r.get(4)?,
                        condition: r.get(5)?,
                        kind: r.get(6)?,
                        run: r.get(7)?,
                        outcome: r.get(8)?,
                        detail: r.get(9)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| sql_error(path, "listing alert deliveries", e))?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_delivery(path))
            .collect::<StoreResult<Vec<_>>>()?)
    }
}

fn token_row(r: &Row<'_>) -> rusqlite::Result<TokenRow> {
    Ok(TokenRow {
        id: r.get(0)?,
        name: r.get(1)?,
        role: r.get(2)?,
        sha256: r.get(3)?,
        created_at: r.get(4)?,
        revoked_at: r.get(5)?,
    })
}

impl SqliteConn<'_> {
    fn due_rows(
        &self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
        set: DueSet,
    ) -> StoreResult<Vec<DueJob>> {
        let path = &*self.db.path;
        // The due ids in claim order (`due_jobs`: what is due, not how many jobs exist); the
        // other columns and the two counts are read for those rows only. Asked in one flat
        // query, SQLite computes both counts for *every* due job and sorts them: ~3 ms per
        // pass with 20 000 due (B3).
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let due = due_jobs(&self.db.conn, path, ms(now), limit, &tags_json(tags), set)?;
        let mut stmt = self
            .db
            .conn
            .prepare_cached(
                "SELECT j.id, j.name, j.next_fire, j.misfire, j.overlap, \
                   (SELECT COUNT(*) FROM runs r WHERE r.job_id = j.id AND r.state = 'running'), \
                   (SELECT COUNT(*) FROM runs r WHERE r.job_id = j.id AND r.state = 'pending' \
                  AND NOT (r.attempt = 1 AND r.next_attempt_at IS NOT NULL)) \
                 FROM jobs j WHERE j.id = ?1",
            )
            .map_err(|e| sql_error(path, "finding due jobs", e))?;
        let mut rows = Vec::with_capacity(due.len());
        for (_, _, id) in due {
            let row = stmt
                .query_row([id], |r| {
                    Ok(DueRow {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        next_fire: r.get(2)?,
                        misfire: r.get(3)?,
                        overlap: r.get(4)?,
                        running: r.get(5)?,
                        pending: r.get(6)?,
                    })
                })
                .map_err(|e| sql_error(path, "finding due jobs", e))?;
            rows.push(row.into_due(path)?);
        }
        Ok(rows)
    }

    fn next_due_at(&self, tags: &[String], set: DueSet) -> StoreResult<Option<Timestamp>> {
        let path = &*self.db.path;
        // Three indexed MINs (jobs_due, runs_pending, runs_pending +
        // runs_job_state_recent); the recurring fires' own from jobs_next_fire_recurring
        // (0014), where no due one-off sorts before them.
        let sql = if set == DueSet::Recurring {
            "SELECT MIN(next_fire) FROM jobs \
             WHERE enabled = 1 AND next_fire IS NOT NULL AND recurring = 1 \
               AND (node_tag IS NULL OR node_tag IN (SELECT value FROM json_each(?1)))"
        } else {
            "SELECT MIN(at) FROM ( \
                   SELECT MIN(next_fire) AS at FROM jobs \
                   WHERE enabled = 1 AND next_fire IS NOT NULL \
                     AND (node_tag IS NULL OR node_tag IN (SELECT value FROM json_each(?1))) \
                   UNION ALL \
                   SELECT MIN(r.next_attempt_at) FROM runs r JOIN jobs j ON j.id = r.job_id \
                   WHERE r.state = 'pending' AND r.next_attempt_at IS NOT NULL AND j.enabled = 1 \
                     AND (j.node_tag IS NULL OR j.node_tag IN (SELECT value FROM json_each(?1))) \
                     AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id) \
                   UNION ALL \
                   SELECT MIN(r.created_at) FROM runs r JOIN jobs j ON j.id = r.job_id \
                   WHERE r.state = 'pending' AND r.next_attempt_at IS NULL AND j.enabled = 1 \
                     AND (j.node_tag IS NULL OR j.node_tag IN (SELECT value FROM json_each(?1))) \
                     AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id) \
                     AND NOT EXISTS (SELECT 1 FROM runs x \
                                     WHERE x.job_id = r.job_id AND x.state = 'running'))"
        };
        let at: Option<i64> = self
            .db
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.query_row([tags_json(tags)], |r| r.get(0)))
            .map_err(|e| sql_error(path, "finding the next due time", e))?;
        at.map(|at| {
            Timestamp::from_millisecond(at)
                .map_err(|e| corrupt(path, "the next due time", "next_fire", e))
        })
        .transpose()
    }

    fn token_named(&self, name: &str) -> StoreResult<Option<ApiToken>> {
        let path = &*self.db.path;
        let row = self
            .db
            .conn
            .prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE name = ?1"
            ))
            .and_then(|mut stmt| stmt.query_row([name], token_row))
            .optional()
            .map_err(|e| sql_error(path, "reading a token", e))?;
        row.map(|r| r.into_token(path)).transpose()
    }

    fn list_runs(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        let path = &*self.db.path;
        // Only the conditions given, so that SQLite picks the index for that shape (a
        // `?1 IS NULL OR …` condition would hide every index from the planner); each shape
        // is one cached statement.
        let mut cond = Vec::new();
        let mut values: Vec<Value> = Vec::new();
        // Each `?` of a condition becomes the number of the value it takes.
        let mut add = |sql: &str, v: Vec<Value>| {
            let mut parts = sql.split('?');
            let mut out = parts.next().unwrap_or_default().to_string();
            for (part, v) in parts.zip(v) {
                values.push(v);
                out.push_str(&format!("?{}{part}", values.len()));
            }
            cond.push(out);
        };
        if let Some(j) = filter.job {
            add("job_id = ?", vec![Value::Integer(j.0)]);
        }
        if let Some(s) = filter.state {
            add("state = ?", vec![Value::Text(s.name().into())]);
        }
        if let Some(t) = filter.fire_from {
            add("fire_time >= ?", vec![Value::Integer(ms(t))]);
        }
        if let Some(t) = filter.fire_to {
            add("fire_time < ?", vec![Value::Integer(ms(t))]);
        }
        if let Some(c) = filter.before {
            add(
                "(fire_time, id) < (?, ?)",
                vec![Value::Integer(ms(c.fire_time)), Value::Integer(c.id.0)],
            );
        }
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        values.push(Value::Integer(limit));
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs {}{} ORDER BY fire_time DESC, id DESC LIMIT ?{}",
            if cond.is_empty() { "" } else { "WHERE " },
            cond.join(" AND "),
            values.len()
        );
        let mut stmt = self
            .db
            .conn
            .prepare_cached(&sql)
            .map_err(|e| sql_error(path, "listing runs", e))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(values), RunRow::read)
            .map_err(|e| sql_error(path, "listing runs", e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| sql_error(path, "listing runs", e))?;
        rows.into_iter().map(|r| r.into_run(path)).collect()
    }

    fn list_logs(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<(u64, LogLine)>> {
        let path = &*self.db.path;
        let mut stmt = self
            .db
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

    fn purge(&self, older_than: Timestamp) -> StoreResult<PurgeCounts> {
        let path = &*self.db.path;
        let tx = &self.db.conn;
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
        Ok(PurgeCounts {
            runs: runs as u64,
            log_lines: u64::try_from(log_lines).unwrap_or(0),
        })
    }
}
