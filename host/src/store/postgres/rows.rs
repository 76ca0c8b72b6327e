//! The PostgreSQL forms of the shared rows (`store/rows.rs`): instants as `timestamptz`,
//! parameters for the statements, the `unnest` batch of run inserts, and the reads every
//! primitive shares.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::GenericClient;
use jiff::Timestamp;
use takt_core::job::{JobDef, JobId};
use takt_core::node::NodeStatus;
use takt_core::run::{NodeId, Run, RunId, RunState};
use takt_core::store::engine::{DueSet, Fail};
use takt_core::store::{StoreError, StoreResult};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::error::pg;
use crate::store::rows::{JOB_COLUMNS, JobRow, NODE_COLUMNS, NodeRow, RUN_COLUMNS, RunRow};

/// Unix milliseconds as the driver's timestamp.
pub(super) fn st(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

pub(super) fn st_opt(ms: Option<i64>) -> Option<SystemTime> {
    ms.map(st)
}

pub(super) fn ts(t: Timestamp) -> SystemTime {
    st(t.as_millisecond())
}

/// A stored timestamp as Unix milliseconds (truncated: takt writes whole milliseconds).
pub(super) fn ms_of(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            -i64::try_from(d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0))
                .unwrap_or(i64::MAX)
        }
    }
}

pub(super) fn i32_of(v: i64, what: &str) -> StoreResult<i32> {
    i32::try_from(v).map_err(|_| {
        StoreError::invalid(format!(
            "{what} {v} is too large for the database (at most {}); use a smaller value",
            i32::MAX
        ))
    })
}

pub(super) fn read_err(shown: &str, what: &str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| {
        StoreError::other(format!(
            "{what} in {shown} has an unexpected column type ({e}); the schema was changed by \
             hand: compare it with sql/postgres/"
        ))
    }
}

fn job_row(r: &Row, shown: &str) -> StoreResult<JobRow> {
    let bad = read_err(shown, "a job row");
    let t = |i: usize| -> StoreResult<Option<i64>> {
        Ok(r.try_get::<_, Option<SystemTime>>(i)
            .map_err(&bad)?
            .map(ms_of))
    };
    Ok(JobRow {
        id: r.try_get(0).map_err(&bad)?,
        name: r.try_get(1).map_err(&bad)?,
        group: r.try_get(2).map_err(&bad)?,
        handler_type: r.try_get(3).map_err(&bad)?,
        params_json: r.try_get(4).map_err(&bad)?,
        schedule_json: r.try_get(5).map_err(&bad)?,
        enabled: r.try_get(6).map_err(&bad)?,
        effective_from: t(7)?,
        expires_at: t(8)?,
        timeout_ms: r.try_get(9).map_err(&bad)?,
        retry_max: i64::from(r.try_get::<_, i32>(10).map_err(&bad)?),
        retry_backoff: r.try_get(11).map_err(&bad)?,
        retry_timeouts: r.try_get(12).map_err(&bad)?,
        misfire: r.try_get(13).map_err(&bad)?,
        overlap: r.try_get(14).map_err(&bad)?,
        priority: i64::from(r.try_get::<_, i32>(15).map_err(&bad)?),
        dependencies: r.try_get(16).map_err(&bad)?,
        node_tag: r.try_get(17).map_err(&bad)?,
        application: r.try_get(18).map_err(&bad)?,
        owner: r.try_get(19).map_err(&bad)?,
        description: r.try_get(20).map_err(&bad)?,
        isolation: r.try_get(21).map_err(&bad)?,
        next_fire: t(22)?,
        version: r.try_get(23).map_err(&bad)?,
        updated_at: t(24)?.unwrap_or_default(),
        on_success: r.try_get(25).map_err(&bad)?,
        on_failure: r.try_get(26).map_err(&bad)?,
        recurring: false,
    })
}

pub(super) fn job_of(r: &Row, shown: &str) -> StoreResult<JobDef> {
    job_row(r, shown)?.into_job(shown)
}

pub(super) fn run_of(r: &Row, shown: &str) -> StoreResult<Run> {
    let bad = read_err(shown, "a run row");
    let t = |i: usize| -> StoreResult<Option<i64>> {
        Ok(r.try_get::<_, Option<SystemTime>>(i)
            .map_err(&bad)?
            .map(ms_of))
    };
    RunRow {
        id: r.try_get(0).map_err(&bad)?,
        job_id: r.try_get(1).map_err(&bad)?,
        fire_time: t(2)?.unwrap_or_default(),
        state: r.try_get(3).map_err(&bad)?,
        attempt: i64::from(r.try_get::<_, i32>(4).map_err(&bad)?),
        created_at: t(5)?.unwrap_or_default(),
        started_at: t(6)?,
        finished_at: t(7)?,
        node_id: r.try_get(8).map_err(&bad)?,
        lease_expires_at: t(9)?,
        error: r.try_get(10).map_err(&bad)?,
        result_json: r.try_get(11).map_err(&bad)?,
        elapsed_ms: r.try_get(12).map_err(&bad)?,
        progress_done: r.try_get(13).map_err(&bad)?,
        progress_total: r.try_get(14).map_err(&bad)?,
        progress_message: r.try_get(15).map_err(&bad)?,
        skip_reason: r.try_get(16).map_err(&bad)?,
        next_attempt_at: t(17)?,
        node_instance: r.try_get(18).map_err(&bad)?,
        plugin: r.try_get(19).map_err(&bad)?,
        plugin_version: r.try_get(20).map_err(&bad)?,
        plugin_sha256: r.try_get(21).map_err(&bad)?,
        trigger: r.try_get(22).map_err(&bad)?,
        parent_run_id: r.try_get(23).map_err(&bad)?,
        params_resolved: r.try_get(24).map_err(&bad)?,
    }
    .into_run(shown)
}

pub(super) type Param = Box<dyn ToSql + Sync + Send>;

pub(super) fn refs(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect()
}

/// The parameters of a job's columns after `id`, in `JOB_WRITE_COLUMNS` order.
pub(super) fn job_params(r: JobRow) -> StoreResult<Vec<Param>> {
    Ok(vec![
        Box::new(r.name),
        Box::new(r.group),
        Box::new(r.handler_type),
        Box::new(r.params_json),
        Box::new(r.schedule_json),
        Box::new(r.enabled),
        Box::new(st_opt(r.effective_from)),
        Box::new(st_opt(r.expires_at)),
        Box::new(r.timeout_ms),
        Box::new(i32_of(r.retry_max, "retry count")?),
        Box::new(r.retry_backoff),
        Box::new(r.retry_timeouts),
        Box::new(r.misfire),
        Box::new(r.overlap),
        Box::new(i32_of(r.priority, "priority")?),
        Box::new(r.dependencies),
        Box::new(r.node_tag),
        Box::new(r.application),
        Box::new(r.owner),
        Box::new(r.description),
        Box::new(r.isolation),
        Box::new(st_opt(r.next_fire)),
        Box::new(r.version),
        Box::new(st(r.updated_at)),
        Box::new(r.on_success),
        Box::new(r.on_failure),
        Box::new(r.recurring),
    ])
}

/// The parameters of a run's mutable columns (from `state`), in `RUN_COLUMNS` order.
fn run_params(r: RunRow) -> StoreResult<Vec<Param>> {
    Ok(vec![
        Box::new(r.state),
        Box::new(i32_of(r.attempt, "attempt")?),
        Box::new(st(r.created_at)),
        Box::new(st_opt(r.started_at)),
        Box::new(st_opt(r.finished_at)),
        Box::new(r.node_id),
        Box::new(st_opt(r.lease_expires_at)),
        Box::new(r.error),
        Box::new(r.result_json),
        Box::new(r.elapsed_ms),
        Box::new(r.progress_done),
        Box::new(r.progress_total),
        Box::new(r.progress_message),
        Box::new(r.skip_reason),
        Box::new(st_opt(r.next_attempt_at)),
        Box::new(r.node_instance),
    ])
}

/// Runs to insert in one statement, column by column (`unnest` turns the arrays back into
/// rows), each with the claim token of the claim that writes it (0 outside claims).
#[derive(Default)]
pub(super) struct RunBatch {
    job_id: Vec<i64>,
    fire_time: Vec<SystemTime>,
    state: Vec<String>,
    attempt: Vec<i32>,
    created_at: Vec<SystemTime>,
    started_at: Vec<Option<SystemTime>>,
    finished_at: Vec<Option<SystemTime>>,
    node_id: Vec<Option<String>>,
    lease_expires_at: Vec<Option<SystemTime>>,
    error: Vec<Option<String>>,
    result_json: Vec<Option<String>>,
    elapsed_ms: Vec<Option<i64>>,
    progress_done: Vec<Option<i64>>,
    progress_total: Vec<Option<i64>>,
    progress_message: Vec<Option<String>>,
    skip_reason: Vec<Option<String>>,
    next_attempt_at: Vec<Option<SystemTime>>,
    node_instance: Vec<Option<String>>,
    trigger: Vec<Option<String>>,
    claim_token: Vec<i64>,
    parent_run_id: Vec<Option<i64>>,
}

const INSERT_RUNS: &str = "INSERT INTO runs (job_id, fire_time, state, attempt, created_at, \
     started_at, finished_at, node_id, lease_expires_at, error, result_json, elapsed_ms, \
     progress_done, progress_total, progress_message, skip_reason, next_attempt_at, \
     node_instance, triggered_by, claim_token, parent_run_id) \
     SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::integer[], \
     $5::timestamptz[], $6::timestamptz[], $7::timestamptz[], $8::text[], $9::timestamptz[], \
     $10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::bigint[], $15::text[], \
     $16::text[], $17::timestamptz[], $18::text[], $19::text[], $20::bigint[], $21::bigint[]) \
     ON CONFLICT (job_id, fire_time) DO NOTHING";

/// [`RunBatch::insert`]'s two statements, without and with the attempts begun (built once:
/// a claim round sends one).
static INSERT_RUNS_RETURNING: LazyLock<[String; 2]> = LazyLock::new(|| {
    [
        format!("{INSERT_RUNS} RETURNING {RUN_COLUMNS}"),
        format!(
            "WITH inserted AS ({INSERT_RUNS} RETURNING {RUN_COLUMNS}), begun AS (\
             INSERT INTO run_attempts (run_id, attempt, node_id, node_instance, started_at) \
             SELECT id, attempt, node_id, node_instance, started_at FROM inserted \
             WHERE state = 'running' AND node_id IS NOT NULL AND started_at IS NOT NULL \
             ON CONFLICT (run_id, attempt) DO NOTHING) \
             SELECT {RUN_COLUMNS} FROM inserted"
        ),
    ]
});

impl RunBatch {
    pub(super) fn push(&mut self, run: &Run, token: i64) -> StoreResult<()> {
        let r = RunRow::of(run)?;
        self.job_id.push(r.job_id);
        self.fire_time.push(st(r.fire_time));
        self.state.push(r.state);
        self.attempt.push(i32_of(r.attempt, "attempt")?);
        self.created_at.push(st(r.created_at));
        self.started_at.push(st_opt(r.started_at));
        self.finished_at.push(st_opt(r.finished_at));
        self.node_id.push(r.node_id);
        self.lease_expires_at.push(st_opt(r.lease_expires_at));
        self.error.push(r.error);
        self.result_json.push(r.result_json);
        self.elapsed_ms.push(r.elapsed_ms);
        self.progress_done.push(r.progress_done);
        self.progress_total.push(r.progress_total);
        self.progress_message.push(r.progress_message);
        self.skip_reason.push(r.skip_reason);
        self.next_attempt_at.push(st_opt(r.next_attempt_at));
        self.node_instance.push(r.node_instance);
        self.trigger.push(r.trigger);
        self.claim_token.push(token);
        self.parent_run_id.push(r.parent_run_id);
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.job_id.is_empty()
    }

    /// Inserts the batch (a taken (job, fire time) key is left out); the rows inserted. With
    /// `begin_attempts`, the same statement also begins the attempt of every inserted run
    /// that is running, as [`Conn::attempts_begin`](takt_core::store::engine::Conn::attempts_begin)
    /// would: a claim round's writes then take one round trip less. (The attempts' foreign
    /// key sees the runs: it is checked at the end of the whole statement.)
    pub(super) async fn insert(
        &self,
        c: &impl GenericClient,
        shown: &str,
        begin_attempts: bool,
    ) -> Result<Vec<Run>, Fail> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let stmt = c
            .prepare_cached(&INSERT_RUNS_RETURNING[usize::from(begin_attempts)])
            .await
            .map_err(|e| pg(shown, "inserting runs", e))?;
        let rows = c
            .query(
                &stmt,
                &[
                    &self.job_id,
                    &self.fire_time,
                    &self.state,
                    &self.attempt,
                    &self.created_at,
                    &self.started_at,
                    &self.finished_at,
                    &self.node_id,
                    &self.lease_expires_at,
                    &self.error,
                    &self.result_json,
                    &self.elapsed_ms,
                    &self.progress_done,
                    &self.progress_total,
                    &self.progress_message,
                    &self.skip_reason,
                    &self.next_attempt_at,
                    &self.node_instance,
                    &self.trigger,
                    &self.claim_token,
                    &self.parent_run_id,
                ],
            )
            .await
            .map_err(|e| pg(shown, "inserting runs", e))?;
        Ok(rows
            .iter()
            .map(|r| run_of(r, shown))
            .collect::<StoreResult<_>>()?)
    }
}

static GET_JOB: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"));
static GET_JOBS: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ANY($1)"));
static GET_RUN: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"));
/// The claim's read of due fires, for each [`DueSet`] (`[All, Recurring]`).
pub(super) static CLAIM_JOBS: LazyLock<[String; 2]> = LazyLock::new(|| {
    [DueSet::All, DueSet::Recurring].map(|set| {
        format!(
            "SELECT {JOB_COLUMNS} FROM jobs \
             WHERE enabled AND next_fire IS NOT NULL AND next_fire <= $1{} AND id <> ALL($2) \
               AND (node_tag IS NULL OR node_tag = ANY($4)) \
             ORDER BY priority, next_fire, id LIMIT $3 FOR NO KEY UPDATE SKIP LOCKED",
            super::conn::recurring_only(set)
        )
    })
});
/// The finish: the run's compare-and-set and, only if it matched, the end of the attempt's
/// row, in one statement.
pub(super) static FINISH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH f AS (UPDATE runs SET state = $1, error = $2, result_json = $3, elapsed_ms = $4, \
           lease_expires_at = NULL, \
           attempt = attempt + CASE WHEN $5 THEN 1 ELSE 0 END, \
           next_attempt_at = $6, \
           finished_at = CASE WHEN $5 THEN finished_at ELSE $7 END, \
           plugin = $10, plugin_version = $11, plugin_sha256 = $12 \
         WHERE id = $8 AND state = 'running' AND attempt = $9 \
         RETURNING {RUN_COLUMNS}), \
         a AS (UPDATE run_attempts SET finished_at = $13, outcome = $14, error = $2 \
           WHERE run_id = $8 AND attempt = $9 AND finished_at IS NULL \
           AND EXISTS (SELECT 1 FROM f)) \
         SELECT * FROM f"
    )
});

/// Finishes in one statement over arrays (a batch, [`takt_core::store::engine::FinishQueue`]):
/// for each, what [`FINISH`] writes — the run's compare-and-set (running, with the finish's
/// attempt) and, only where it matched, the end of that attempt's row. The runs are distinct
/// (the queue puts a second finish of a run in the next batch); the answers come back by id.
pub(super) static FINISH_MANY: LazyLock<String> = LazyLock::new(|| {
    let returned = RUN_COLUMNS
        .split(", ")
        .map(|c| format!("runs.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "WITH i AS (SELECT * FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::text[], \
           $5::text[], $6::bigint[], $7::boolean[], $8::timestamptz[], $9::timestamptz[], \
           $10::text[], $11::text[], $12::text[], $13::timestamptz[], $14::text[]) \
           AS i(id, attempt, state, error, result_json, elapsed_ms, retry, next_attempt_at, \
           finished_at, plugin, plugin_version, plugin_sha256, end_at, outcome)), \
         f AS (UPDATE runs SET state = i.state, error = i.error, result_json = i.result_json, \
           elapsed_ms = i.elapsed_ms, lease_expires_at = NULL, \
           attempt = runs.attempt + CASE WHEN i.retry THEN 1 ELSE 0 END, \
           next_attempt_at = i.next_attempt_at, \
           finished_at = CASE WHEN i.retry THEN runs.finished_at ELSE i.finished_at END, \
           plugin = i.plugin, plugin_version = i.plugin_version, \
           plugin_sha256 = i.plugin_sha256 \
         FROM i WHERE runs.id = i.id AND runs.state = 'running' AND runs.attempt = i.attempt \
         RETURNING {returned}), \
         a AS (UPDATE run_attempts SET finished_at = i.end_at, outcome = i.outcome, \
           error = i.error \
           FROM i JOIN f ON f.id = i.id \
           WHERE run_attempts.run_id = i.id AND run_attempts.attempt = i.attempt \
           AND run_attempts.finished_at IS NULL) \
         SELECT * FROM f"
    )
});

/// A node row with its running runs (of any of its lives).
pub(super) static NODE_SELECT: LazyLock<String> = LazyLock::new(|| {
    let columns = NODE_COLUMNS
        .split(", ")
        .map(|c| format!("n.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT {columns}, (SELECT count(*) FROM runs r WHERE r.node_id = n.id \
         AND r.state = 'running') FROM nodes n"
    )
});

pub(super) fn node_of(r: &Row, shown: &str) -> StoreResult<NodeStatus> {
    let bad = read_err(shown, "a node row");
    let t = |i: usize| -> StoreResult<Option<i64>> {
        Ok(r.try_get::<_, Option<SystemTime>>(i)
            .map_err(&bad)?
            .map(ms_of))
    };
    NodeRow {
        id: r.try_get(0).map_err(&bad)?,
        instance: r.try_get(1).map_err(&bad)?,
        host_name: r.try_get(2).map_err(&bad)?,
        pid: r.try_get(3).map_err(&bad)?,
        version: r.try_get(4).map_err(&bad)?,
        capacity: i64::from(r.try_get::<_, i32>(5).map_err(&bad)?),
        tags: r.try_get(6).map_err(&bad)?,
        started_at: t(7)?,
        heartbeat_at: t(8)?,
        stopped_at: t(9)?,
    }
    .into_status(shown, r.try_get(10).map_err(&bad)?)
}

pub(super) async fn node_row(
    c: &impl GenericClient,
    shown: &str,
    node: &NodeId,
) -> Result<Option<NodeStatus>, Fail> {
    let row = c
        .query_opt(&format!("{} WHERE n.id = $1", &*NODE_SELECT), &[&node.0])
        .await
        .map_err(|e| pg(shown, "reading a node", e))?;
    Ok(row.map(|r| node_of(&r, shown)).transpose()?)
}

pub(super) async fn get_job(
    c: &impl GenericClient,
    shown: &str,
    id: JobId,
) -> Result<Option<JobDef>, Fail> {
    let stmt = c
        .prepare_cached(&GET_JOB)
        .await
        .map_err(|e| pg(shown, "reading a job", e))?;
    let row = c
        .query_opt(&stmt, &[&id.0])
        .await
        .map_err(|e| pg(shown, "reading a job", e))?;
    Ok(row.map(|r| job_of(&r, shown)).transpose()?)
}

/// The jobs of `ids` that exist, in one statement.
pub(super) async fn get_jobs(
    c: &impl GenericClient,
    shown: &str,
    ids: &[JobId],
) -> Result<Vec<JobDef>, Fail> {
    let what = "reading jobs";
    let stmt = c
        .prepare_cached(&GET_JOBS)
        .await
        .map_err(|e| pg(shown, what, e))?;
    let ids: Vec<i64> = ids.iter().map(|id| id.0).collect();
    let rows = c
        .query(&stmt, &[&ids])
        .await
        .map_err(|e| pg(shown, what, e))?;
    Ok(rows
        .iter()
        .map(|r| job_of(r, shown))
        .collect::<Result<_, _>>()?)
}

pub(super) async fn get_run(
    c: &impl GenericClient,
    shown: &str,
    id: RunId,
) -> Result<Option<Run>, Fail> {
    let stmt = c
        .prepare_cached(&GET_RUN)
        .await
        .map_err(|e| pg(shown, "reading a run", e))?;
    let row = c
        .query_opt(&stmt, &[&id.0])
        .await
        .map_err(|e| pg(shown, "reading a run", e))?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

/// Writes every mutable column of `run` if the stored run is still in `state` with `attempt`
/// (and sets its claim token); the stored run, or `None` when it is not.
pub(super) async fn update_run_if(
    c: &impl GenericClient,
    shown: &str,
    run: &Run,
    id: RunId,
    (state, attempt): (RunState, u32),
    token: i64,
) -> Result<Option<Run>, Fail> {
    let sql = format!(
        "UPDATE runs SET state = $1, attempt = $2, created_at = $3, started_at = $4, \
         finished_at = $5, node_id = $6, lease_expires_at = $7, error = $8, result_json = $9, \
         elapsed_ms = $10, progress_done = $11, progress_total = $12, progress_message = $13, \
         skip_reason = $14, next_attempt_at = $15, node_instance = $16, claim_token = $17 \
         WHERE id = $18 AND state = $19 AND attempt = $20 RETURNING {RUN_COLUMNS}"
    );
    let mut params = run_params(RunRow::of(run)?)?;
    params.push(Box::new(token));
    params.push(Box::new(id.0));
    params.push(Box::new(state.name().to_string()));
    params.push(Box::new(i64::from(attempt) as i32));
    let stmt = c
        .prepare_cached(&sql)
        .await
        .map_err(|e| pg(shown, "updating a run", e))?;
    let row = c
        .query_opt(&stmt, &refs(&params))
        .await
        .map_err(|e| pg(shown, "updating a run", e))?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}
