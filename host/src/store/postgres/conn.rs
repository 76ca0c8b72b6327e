//! The PostgreSQL dialect's sessions and primitives: a pooled connection for a store call, and
//! the statements the engine's rules run on it.
//!
//! Locked reads take `FOR NO KEY UPDATE SKIP LOCKED` (a row another node's claim holds is
//! passed over, not waited for; `NO KEY` so that inserting a run, which takes a key-share lock
//! on its job, is never blocked by it). Batches go as one statement over arrays (`unnest`).
//! `NOTIFY` tells the other nodes' `LISTEN` that something may be due sooner; inside a
//! transaction it is delivered at the commit.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use deadpool_postgres::{GenericClient, Object, Transaction};
use jiff::Timestamp;
use takt_core::alert::{AlertDelivery, AlertKey};
use takt_core::attempt::{Attempt, AttemptEnd};
use takt_core::group::GroupDef;
use takt_core::job::{JobDef, JobId, JobName};
use takt_core::node::{InstanceId, NodeInfo, NodeSession, NodeStatus};
use takt_core::pause::{Hold, Pause, PauseKind};
use takt_core::run::{NodeId, Progress, Run, RunId, RunState};
use takt_core::store::engine::{
    Conn, DueSet, Fail, FinishWrite, NextFireMove, PendingDue, Res, Retry, Session,
    recurring_page_needed,
};
use takt_core::store::{
    CancelRequest, DueJob, JobQuery, LogLevel, LogLine, PurgeCounts, RunFilter, StoreError,
    StoreResult,
};

use super::error::{commit, pg};
use super::rows::{
    CLAIM_JOBS, FINISH, FINISH_MANY, NODE_SELECT, Param, RunBatch, get_job, get_jobs, get_run,
    job_of, job_params, ms_of, node_of, node_row, read_err, refs, run_of, st_opt, ts,
    update_run_if,
};
use crate::store::rows::{
    ACTION_COLUMNS, ATTEMPT_COLUMNS, ActionRow, AttemptRow, DELIVERY_COLUMNS, DeliveryRow, DueRow,
    HOLD_COLUMNS, HoldRow, JOB_COLUMNS, JOB_WRITE_COLUMNS, JobRow, NodeRow, PAUSE_COLUMNS,
    PauseRow, RUN_COLUMNS, SESSION_COLUMNS, SessionRow, TOKEN_COLUMNS, TokenRow, corrupt,
    group_def, to_i64,
};
use takt_core::store::access::{ApiToken, NewToken, OperatorAction};

/// How long finding out whether a claim committed waits for the claim's transaction to end.
const CLAIM_LOCK_WAIT: Duration = Duration::from_secs(10);

/// A pooled connection for one store call.
pub struct PgSession {
    pub(super) client: Object,
    pub(super) shown: Arc<str>,
    pub(super) channel: Arc<str>,
}

impl std::fmt::Debug for PgSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSession")
            .field("database", &self.shown)
            .finish_non_exhaustive()
    }
}

/// The connection a primitive runs on.
enum Client<'a> {
    Auto(&'a Object),
    Tx(Transaction<'a>),
}

/// The primitives on a pooled connection, in a transaction or not.
pub struct PgConn<'a> {
    client: Client<'a>,
    shown: &'a str,
    channel: &'a str,
}

impl Session for PgSession {
    type Conn<'a> = PgConn<'a>;

    fn conn(&mut self) -> PgConn<'_> {
        PgConn {
            client: Client::Auto(&self.client),
            shown: &self.shown,
            channel: &self.channel,
        }
    }

    async fn begin(&mut self, what: &'static str) -> Res<PgConn<'_>> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| pg(&self.shown, &format!("starting a transaction ({what})"), e))?;
        Ok(PgConn {
            client: Client::Tx(tx),
            shown: &self.shown,
            channel: &self.channel,
        })
    }
}

/// Runs `$body` with `$c` bound to the connection (a transaction or not) as a
/// `&impl GenericClient`.
macro_rules! on {
    ($self:ident, |$c:ident| $body:expr) => {
        match &$self.client {
            Client::Auto(o) => {
                let $c: &Object = o;
                $body
            }
            Client::Tx(t) => {
                let $c: &Transaction<'_> = t;
                $body
            }
        }
    };
}

// ---- the statements, on any client -------------------------------------------------------

fn hold_of(r: &tokio_postgres::Row, shown: &str) -> StoreResult<(JobId, Hold)> {
    let bad = read_err(shown, "a job hold");
    let t = |i: usize| -> StoreResult<Option<i64>> {
        Ok(r.try_get::<_, Option<SystemTime>>(i)
            .map_err(&bad)?
            .map(ms_of))
    };
    let job: i64 = r.try_get(0).map_err(&bad)?;
    let row = HoldRow {
        next_fire: t(1)?,
        paused_at: t(2)?,
        paused_by: r.try_get(3).map_err(&bad)?,
        reason: r.try_get(4).map_err(&bad)?,
    };
    Ok((JobId(job), row.into_hold(shown, job)?))
}

fn cancel_of(r: &tokio_postgres::Row, shown: &str) -> StoreResult<CancelRequest> {
    let bad = read_err(shown, "a cancel request");
    let run: i64 = r.try_get(0).map_err(&bad)?;
    let at = ms_of(r.try_get::<_, SystemTime>(2).map_err(&bad)?);
    Ok(CancelRequest {
        run: RunId(run),
        by: r.try_get(1).map_err(&bad)?,
        at: Timestamp::from_millisecond(at).map_err(|e| {
            corrupt(
                shown,
                &format!("the cancel of run {run}"),
                "requested_at",
                e,
            )
        })?,
    })
}

fn group_of(r: &tokio_postgres::Row, shown: &str) -> StoreResult<(String, GroupDef)> {
    let bad = read_err(shown, "a group");
    let name: String = r.try_get(0).map_err(&bad)?;
    let max: Option<i32> = r.try_get(1).map_err(&bad)?;
    let released: Option<SystemTime> = r.try_get(2).map_err(&bad)?;
    let released = released
        .map(|t| {
            Timestamp::from_millisecond(ms_of(t))
                .map_err(|e| corrupt(shown, &format!("group {name}"), "released_at", e))
        })
        .transpose()?;
    let def = group_def(shown, &name, max.map(i64::from), released)?;
    Ok((name, def))
}

fn pause_of(r: &tokio_postgres::Row, shown: &str) -> StoreResult<(PauseKind, String, Pause)> {
    let bad = read_err(shown, "a pause");
    PauseRow {
        kind: r.try_get(0).map_err(&bad)?,
        name: r.try_get(1).map_err(&bad)?,
        paused_at: ms_of(r.try_get::<_, SystemTime>(2).map_err(&bad)?),
        paused_by: r.try_get(3).map_err(&bad)?,
        reason: r.try_get(4).map_err(&bad)?,
    }
    .into_pause(shown)
}

async fn job_by_name(c: &impl GenericClient, shown: &str, name: &JobName) -> Res<Option<JobDef>> {
    let row = c
        .query_opt(
            &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE name = $1"),
            &[&name.as_str()],
        )
        .await
        .map_err(|e| pg(shown, "reading a job", e))?;
    Ok(row.map(|r| job_of(&r, shown)).transpose()?)
}

async fn jobs(c: &impl GenericClient, shown: &str) -> Res<Vec<JobDef>> {
    let rows = c
        .query(&format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY id"), &[])
        .await
        .map_err(|e| pg(shown, "listing jobs", e))?;
    Ok(rows
        .iter()
        .map(|r| job_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

async fn job_count(c: &impl GenericClient, shown: &str) -> Res<u64> {
    let row = c
        .query_one("SELECT COUNT(*) FROM jobs", &[])
        .await
        .map_err(|e| pg(shown, "counting jobs", e))?;
    let n: i64 = row.try_get(0).map_err(|e| pg(shown, "counting jobs", e))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Index `jobs_next_fire` (next_fire, enabled jobs only).
async fn jobs_late(
    c: &impl GenericClient,
    shown: &str,
    before: Timestamp,
    limit: usize,
) -> Res<Vec<JobDef>> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE enabled AND next_fire IS NOT NULL \
         AND next_fire <= $1 ORDER BY next_fire, id LIMIT $2"
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    query_jobs(c, shown, "finding late jobs", &sql, &[&ts(before), &limit]).await
}

/// The jobs `sql` (a prepared, cached statement selecting `JOB_COLUMNS`) reads.
async fn query_jobs(
    c: &impl GenericClient,
    shown: &str,
    what: &str,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Res<Vec<JobDef>> {
    let stmt = c
        .prepare_cached(sql)
        .await
        .map_err(|e| pg(shown, what, e))?;
    let rows = c
        .query(&stmt, params)
        .await
        .map_err(|e| pg(shown, what, e))?;
    Ok(rows
        .iter()
        .map(|r| job_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

async fn job_page(c: &impl GenericClient, shown: &str, query: &JobQuery) -> Res<Vec<JobDef>> {
    let what = "listing a page of jobs";
    // Only the conditions given (as `runs` does), so each shape has its plan: the name's
    // unique index read in order from the cursor, the other conditions filtering it, until
    // the limit.
    let mut cond: Vec<String> = Vec::new();
    let mut params: Vec<Param> = Vec::new();
    let mut add = |sql: &str, values: Vec<Param>| {
        let mut sql = sql.to_string();
        for v in values {
            params.push(v);
            sql = sql.replacen('?', &format!("${}", params.len()), 1);
        }
        cond.push(sql);
    };
    if let Some(after) = &query.after {
        add("name > ?", vec![Box::new(after.as_str().to_string())]);
    }
    if let Some(e) = query.enabled {
        add("enabled = ?", vec![Box::new(e)]);
    }
    if let Some(g) = &query.group {
        add("group_name = ?", vec![Box::new(g.clone())]);
    }
    if let Some(t) = &query.node_tag {
        add("node_tag = ?", vec![Box::new(t.clone())]);
    }
    if let Some(p) = &query.handler_prefix {
        // Not LIKE: `%` and `_` in a prefix would need escaping.
        add(
            "left(handler_type, length(?::text)) = ?::text",
            vec![Box::new(p.clone()), Box::new(p.clone())],
        );
    }
    if let Some(n) = &query.name_contains {
        add(
            "strpos(lower(name), lower(?::text)) > 0",
            vec![Box::new(n.clone())],
        );
    }
    params.push(Box::new(i64::try_from(query.limit + 1).unwrap_or(i64::MAX)));
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs {}{} ORDER BY name LIMIT ${}",
        if cond.is_empty() { "" } else { "WHERE " },
        cond.join(" AND "),
        params.len()
    );
    query_jobs(c, shown, what, &sql, &refs(&params)).await
}

async fn insert_job(
    c: &impl GenericClient,
    shown: &str,
    job: &JobDef,
    now: Timestamp,
) -> Res<Option<JobDef>> {
    let mut row = JobRow::of(job, now)?;
    row.version = 1;
    let params = job_params(row)?;
    let columns = JOB_WRITE_COLUMNS.trim_start_matches("id, ");
    let marks = (1..=params.len())
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let r = c
        .query_opt(
            &format!(
                "INSERT INTO jobs ({columns}) VALUES ({marks}) \
                 ON CONFLICT (name) DO NOTHING RETURNING {JOB_COLUMNS}"
            ),
            &refs(&params),
        )
        .await
        .map_err(|e| pg(shown, &format!("inserting job {}", job.name), e))?;
    Ok(r.map(|r| job_of(&r, shown)).transpose()?)
}

async fn update_job_if_version(
    c: &impl GenericClient,
    shown: &str,
    job: &JobDef,
    now: Timestamp,
) -> Res<Option<JobDef>> {
    let Some(id) = job.id else { return Ok(None) };
    let expected = to_i64(job.version, "job version")?;
    let mut row = JobRow::of(job, now)?;
    row.version = expected + 1;
    let mut params = job_params(row)?;
    let n = params.len();
    let sets = JOB_WRITE_COLUMNS
        .split(", ")
        .skip(1)
        .enumerate()
        .map(|(i, c)| format!("{c} = ${}", i + 1))
        .collect::<Vec<_>>()
        .join(", ");
    params.push(Box::new(id.0));
    params.push(Box::new(expected));
    let r = c
        .query_opt(
            &format!(
                "UPDATE jobs SET {sets} WHERE id = ${} AND version = ${} RETURNING {JOB_COLUMNS}",
                n + 1,
                n + 2
            ),
            &refs(&params),
        )
        .await
        .map_err(|e| pg(shown, &format!("updating job {}", job.name), e))?;
    Ok(r.map(|r| job_of(&r, shown)).transpose()?)
}

async fn delete_job(c: &impl GenericClient, shown: &str, id: JobId) -> Res<bool> {
    // Runs and logs go with it (ON DELETE CASCADE).
    let n = c
        .execute("DELETE FROM jobs WHERE id = $1", &[&id.0])
        .await
        .map_err(|e| pg(shown, "deleting a job", e))?;
    Ok(n > 0)
}

async fn set_enabled(
    c: &impl GenericClient,
    shown: &str,
    id: JobId,
    enabled: bool,
    now: Timestamp,
) -> Res<Option<JobDef>> {
    let row = c
        .query_opt(
            &format!(
                "UPDATE jobs SET enabled = $1, version = version + 1, updated_at = $2 \
                 WHERE id = $3 RETURNING {JOB_COLUMNS}"
            ),
            &[&enabled, &ts(now), &id.0],
        )
        .await
        .map_err(|e| pg(shown, "enabling or disabling a job", e))?;
    Ok(row.map(|r| job_of(&r, shown)).transpose()?)
}

async fn set_next_fire_if(
    c: &impl GenericClient,
    shown: &str,
    id: JobId,
    expected: Option<Timestamp>,
    new: Option<Timestamp>,
) -> Res<bool> {
    let n = c
        .execute(
            "UPDATE jobs SET next_fire = $1 WHERE id = $2 AND next_fire IS NOT DISTINCT FROM $3",
            &[&new.map(ts), &id.0, &expected.map(ts)],
        )
        .await
        .map_err(|e| pg(shown, "setting a job's next fire", e))?;
    Ok(n == 1)
}

/// A pause (every claim reads its node's).
static PAUSE_GET: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT kind, name, {PAUSE_COLUMNS} FROM pauses WHERE kind = $1 AND name = $2")
});

/// The due-jobs query of each [`DueSet`]: the recurring one is the same with `recurring`
/// added, which the partial index `jobs_claim_recurring` answers (a parameter deciding
/// between the two would leave the planner one generic plan for both).
static DUE_JOBS: LazyLock<[String; 2]> = LazyLock::new(|| {
    [DueSet::All, DueSet::Recurring].map(|set| {
        format!(
            "SELECT id, name, next_fire, misfire, overlap, \
               (SELECT COUNT(*) FROM runs r WHERE r.job_id = jobs.id AND r.state = 'running'), \
               (SELECT COUNT(*) FROM runs r WHERE r.job_id = jobs.id AND r.state = 'pending' \
                  AND NOT (r.attempt = 1 AND r.next_attempt_at IS NOT NULL)) \
             FROM jobs WHERE enabled AND next_fire IS NOT NULL AND next_fire <= $1{} \
               AND (node_tag IS NULL OR node_tag = ANY($3)) \
             ORDER BY priority, next_fire, id LIMIT $2",
            recurring_only(set)
        )
    })
});

/// The condition a [`DueSet`] adds to a due query.
pub(super) fn recurring_only(set: DueSet) -> &'static str {
    match set {
        DueSet::All => "",
        DueSet::Recurring => " AND recurring",
    }
}

async fn due_jobs(
    c: &impl GenericClient,
    shown: &str,
    now: Timestamp,
    limit: usize,
    tags: &[String],
    set: DueSet,
) -> Res<Vec<DueJob>> {
    let stmt = c
        .prepare_cached(&DUE_JOBS[usize::from(set == DueSet::Recurring)])
        .await
        .map_err(|e| pg(shown, "finding due jobs", e))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = c
        .query(&stmt, &[&ts(now), &limit, &tags])
        .await
        .map_err(|e| pg(shown, "finding due jobs", e))?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let read = read_err(shown, "a due job");
        let next_fire: SystemTime = r.try_get(2).map_err(&read)?;
        out.push(
            DueRow {
                id: r.try_get(0).map_err(&read)?,
                name: r.try_get(1).map_err(&read)?,
                next_fire: ms_of(next_fire),
                misfire: r.try_get(3).map_err(&read)?,
                overlap: r.try_get(4).map_err(&read)?,
                running: r.try_get(5).map_err(&read)?,
                pending: r.try_get(6).map_err(&read)?,
            }
            .into_due(shown)?,
        );
    }
    Ok(out)
}

/// The next due instant of recurring fires only ([`DueSet::Recurring`]), from the partial
/// index `jobs_next_fire_recurring` (0013): read when a node's only free slots are its
/// recurring reserve, where every due one-off sorts before it in `jobs_next_fire`.
const NEXT_DUE_RECURRING: &str = "SELECT MIN(next_fire) FROM jobs \
     WHERE enabled AND next_fire IS NOT NULL AND recurring \
       AND (node_tag IS NULL OR node_tag = ANY($1))";

async fn next_due_at(
    c: &impl GenericClient,
    shown: &str,
    tags: &[String],
    set: DueSet,
) -> Res<Option<Timestamp>> {
    let stmt = c
        .prepare_cached(if set == DueSet::Recurring {
            NEXT_DUE_RECURRING
        } else {
            "SELECT LEAST( \
               (SELECT MIN(next_fire) FROM jobs WHERE enabled AND next_fire IS NOT NULL \
                  AND (node_tag IS NULL OR node_tag = ANY($1))), \
               (SELECT MIN(r.next_attempt_at) FROM runs r JOIN jobs j ON j.id = r.job_id \
                WHERE r.state = 'pending' AND r.next_attempt_at IS NOT NULL AND j.enabled \
                  AND (j.node_tag IS NULL OR j.node_tag = ANY($1)) \
                  AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id)), \
               (SELECT MIN(r.created_at) FROM runs r JOIN jobs j ON j.id = r.job_id \
                WHERE r.state = 'pending' AND r.next_attempt_at IS NULL AND j.enabled \
                  AND (j.node_tag IS NULL OR j.node_tag = ANY($1)) \
                  AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id) \
                  AND NOT EXISTS (SELECT 1 FROM runs x \
                                  WHERE x.job_id = r.job_id AND x.state = 'running')))"
        })
        .await
        .map_err(|e| pg(shown, "finding the next due time", e))?;
    let at: Option<SystemTime> = c
        .query_one(&stmt, &[&tags])
        .await
        .map_err(|e| pg(shown, "finding the next due time", e))?
        .try_get(0)
        .map_err(read_err(shown, "the next due time"))?;
    Ok(at
        .map(|t| {
            Timestamp::try_from(t).map_err(|e| corrupt(shown, "the next due time", "next_fire", e))
        })
        .transpose()?)
}

async fn claim_lock(c: &impl GenericClient, shown: &str, token: i64) -> Res<()> {
    // The claim's token as a transaction lock: whoever must find out whether this claim
    // committed (its answer lost) waits for this lock first, so it looks only after the
    // transaction has ended, one way or the other (see `claimed_by`).
    // Prepared once per connection: an unprepared statement costs a second round trip.
    let stmt = c
        .prepare_cached("SELECT pg_advisory_xact_lock($1)")
        .await
        .map_err(|e| pg(shown, "starting a claim", e))?;
    c.execute(&stmt, &[&token])
        .await
        .map_err(|e| pg(shown, "starting a claim", e))?;
    Ok(())
}

/// The pause of group or node `name`, if any. Read by every claim: prepared once per
/// connection.
async fn pause_read(
    c: &impl GenericClient,
    shown: &str,
    kind: PauseKind,
    name: &str,
) -> Res<Option<Pause>> {
    let stmt = c
        .prepare_cached(&PAUSE_GET)
        .await
        .map_err(|e| pg(shown, "reading a pause", e))?;
    let rows = c
        .query(&stmt, &[&kind.name(), &name])
        .await
        .map_err(|e| pg(shown, "reading a pause", e))?;
    Ok(rows
        .iter()
        .map(|r| pause_of(r, shown))
        .next()
        .transpose()?
        .map(|(_, _, p)| p))
}

async fn due_fires(
    c: &impl GenericClient,
    shown: &str,
    now: Timestamp,
    limit: usize,
    exclude: &[JobId],
    tags: &[String],
    set: DueSet,
) -> Res<Vec<JobDef>> {
    let stmt = c
        .prepare_cached(&CLAIM_JOBS[usize::from(set == DueSet::Recurring)])
        .await
        .map_err(|e| pg(shown, "finding due jobs", e))?;
    let handled: Vec<i64> = exclude.iter().map(|j| j.0).collect();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = c
        .query(&stmt, &[&ts(now), &handled, &limit, &tags])
        .await
        .map_err(|e| pg(shown, "finding due jobs", e))?;
    Ok(rows
        .iter()
        .map(|r| job_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

async fn due_pending(
    c: &impl GenericClient,
    shown: &str,
    now: Timestamp,
    limit: usize,
    tags: &[String],
) -> Res<Vec<PendingDue>> {
    let stmt = c
        .prepare_cached(
            "SELECT r.id, j.priority, COALESCE(r.next_attempt_at, r.created_at) \
             FROM runs r JOIN jobs j ON j.id = r.job_id \
             WHERE r.state = 'pending' AND COALESCE(r.next_attempt_at, r.created_at) <= $1 \
               AND j.enabled AND (j.node_tag IS NULL OR j.node_tag = ANY($3)) \
               AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id) \
               AND (r.next_attempt_at IS NOT NULL OR NOT EXISTS \
                    (SELECT 1 FROM runs x WHERE x.job_id = r.job_id AND x.state = 'running')) \
             ORDER BY j.priority, COALESCE(r.next_attempt_at, r.created_at), r.id LIMIT $2 \
             FOR NO KEY UPDATE OF r SKIP LOCKED",
        )
        .await
        .map_err(|e| pg(shown, "finding due retries", e))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = c
        .query(&stmt, &[&ts(now), &limit, &tags])
        .await
        .map_err(|e| pg(shown, "finding due retries", e))?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let bad = read_err(shown, "a due retry");
        let id: i64 = r.try_get(0).map_err(&bad)?;
        let priority: i32 = r.try_get(1).map_err(&bad)?;
        let at: SystemTime = r.try_get(2).map_err(&bad)?;
        out.push(PendingDue {
            id: RunId(id),
            priority: u16::try_from(priority)
                .map_err(|_| corrupt(shown, &format!("run {id}"), "priority", priority))?,
            due_at: Timestamp::from_millisecond(ms_of(at))
                .map_err(|e| corrupt(shown, &format!("run {id}"), "due time", e))?,
        });
    }
    Ok(out)
}

async fn advance(c: &impl GenericClient, shown: &str, moves: &[NextFireMove]) -> Res<usize> {
    if moves.is_empty() {
        return Ok(0);
    }
    let ids: Vec<i64> = moves.iter().map(|m| m.job.0).collect();
    let olds: Vec<SystemTime> = moves.iter().map(|m| ts(m.old)).collect();
    let news: Vec<Option<SystemTime>> = moves.iter().map(|m| m.new.map(ts)).collect();
    let stmt = c
        .prepare_cached(
            "UPDATE jobs SET next_fire = v.new FROM unnest($1::bigint[], \
             $2::timestamptz[], $3::timestamptz[]) AS v(id, old, new) \
             WHERE jobs.id = v.id AND jobs.next_fire = v.old",
        )
        .await
        .map_err(|e| pg(shown, "advancing next fires", e))?;
    let n = c
        .execute(&stmt, &[&ids, &olds, &news])
        .await
        .map_err(|e| pg(shown, "advancing next fires", e))?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Inserts `runs`, a running one carrying the claim's `token`; with `begin_attempts`, the
/// running ones' attempts too, in the same statement (`RunBatch::insert`).
async fn insert(
    c: &impl GenericClient,
    shown: &str,
    runs: &[Run],
    token: i64,
    begin_attempts: bool,
) -> Res<Vec<Run>> {
    let mut batch = RunBatch::default();
    for run in runs {
        let t = if run.state == RunState::Running {
            token
        } else {
            0
        };
        batch.push(run, t)?;
    }
    batch.insert(c, shown, begin_attempts).await
}

async fn queued_may_start(c: &impl GenericClient, shown: &str, job: JobId) -> Res<bool> {
    // Its job's row lock serialises this with another node claiming the job's fire (skip if
    // that node holds it), and the check sees a run this claim started earlier.
    let locked = c
        .query_opt(
            "SELECT 1 FROM jobs WHERE id = $1 FOR NO KEY UPDATE SKIP LOCKED",
            &[&job.0],
        )
        .await
        .map_err(|e| pg(shown, "locking a queued run's job", e))?;
    let busy = c
        .query_opt(
            "SELECT 1 FROM runs WHERE job_id = $1 AND state = 'running' LIMIT 1",
            &[&job.0],
        )
        .await
        .map_err(|e| pg(shown, "checking a queued run's job", e))?;
    Ok(locked.is_some() && busy.is_none())
}

async fn claimed_by(
    c: &impl GenericClient,
    shown: &str,
    node: &NodeId,
    token: i64,
) -> Res<Vec<Run>> {
    // The claim's transaction may still be running on the server (its COMMIT not yet
    // processed, or its backend not yet aware that the client is gone): wait until it has
    // ended, by taking its token's lock (each try is a statement of its own that releases it
    // again), at most `CLAIM_LOCK_WAIT`; then its outcome is final. Reading before that could
    // find nothing and claim again while the first claim then commits.
    let started = std::time::Instant::now();
    loop {
        let free: bool = c
            .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&token])
            .await
            .map_err(|e| pg(shown, "waiting for a claim to end", e))?
            .get(0);
        if free {
            break;
        }
        if started.elapsed() >= CLAIM_LOCK_WAIT {
            return Err(Fail {
                error: StoreError::transient(format!(
                    "a claim on {shown} lost its connection while committing and its \
                     transaction has not ended after {}s; the outcome is unknown (a run it \
                     claimed is failed and retried by this node's lease renewal)",
                    CLAIM_LOCK_WAIT.as_secs()
                )),
                retry: Retry::No,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs \
             WHERE node_id = $1 AND state = 'running' AND claim_token = $2 ORDER BY id"
        ))
        .await
        .map_err(|e| pg(shown, "checking a claim", e))?;
    let rows = c
        .query(&stmt, &[&node.0, &token])
        .await
        .map_err(|e| pg(shown, "checking a claim", e))?;
    Ok(rows
        .iter()
        .map(|r| run_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

async fn run_at(
    c: &impl GenericClient,
    shown: &str,
    job: JobId,
    fire: Timestamp,
) -> Res<Option<RunId>> {
    let row = c
        .query_opt(
            "SELECT id FROM runs WHERE job_id = $1 AND fire_time = $2",
            &[&job.0, &ts(fire)],
        )
        .await
        .map_err(|e| pg(shown, "reading a run", e))?;
    Ok(row.map(|r| RunId(r.get(0))))
}

async fn runs(c: &impl GenericClient, shown: &str, filter: &RunFilter) -> Res<Vec<Run>> {
    // Only the conditions given, so that the planner sees the shape and picks its index (a
    // generic `$1 IS NULL OR …` plan is chosen once per prepared statement).
    let mut cond: Vec<String> = Vec::new();
    let mut params: Vec<Param> = Vec::new();
    let mut add = |sql: &str, values: Vec<Param>| {
        let mut sql = sql.to_string();
        for v in values {
            params.push(v);
            sql = sql.replacen('?', &format!("${}", params.len()), 1);
        }
        cond.push(sql);
    };
    if let Some(j) = filter.job {
        add("job_id = ?", vec![Box::new(j.0)]);
    }
    if let Some(s) = filter.state {
        add("state = ?", vec![Box::new(s.name())]);
    }
    if let Some(t) = filter.fire_from {
        add("fire_time >= ?", vec![Box::new(ts(t))]);
    }
    if let Some(t) = filter.fire_to {
        add("fire_time < ?", vec![Box::new(ts(t))]);
    }
    if let Some(cur) = filter.before {
        add(
            "(fire_time, id) < (?, ?)",
            vec![Box::new(ts(cur.fire_time)), Box::new(cur.id.0)],
        );
    }
    params.push(Box::new(i64::try_from(filter.limit).unwrap_or(i64::MAX)));
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs {}{} ORDER BY fire_time DESC, id DESC LIMIT ${}",
        if cond.is_empty() { "" } else { "WHERE " },
        cond.join(" AND "),
        params.len()
    );
    let stmt = c
        .prepare_cached(&sql)
        .await
        .map_err(|e| pg(shown, "listing runs", e))?;
    let rows = c
        .query(&stmt, &refs(&params))
        .await
        .map_err(|e| pg(shown, "listing runs", e))?;
    Ok(rows
        .iter()
        .map(|r| run_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

fn token_of(r: &tokio_postgres::Row, shown: &str) -> StoreResult<ApiToken> {
    let read = read_err(shown, "a token");
    let created: SystemTime = r.try_get(4).map_err(&read)?;
    let revoked: Option<SystemTime> = r.try_get(5).map_err(&read)?;
    TokenRow {
        id: r.try_get(0).map_err(&read)?,
        name: r.try_get(1).map_err(&read)?,
        role: r.try_get(2).map_err(&read)?,
        sha256: r.try_get(3).map_err(&read)?,
        created_at: ms_of(created),
        revoked_at: revoked.map(ms_of),
    }
    .into_token(shown)
}

async fn token_named(c: &impl GenericClient, shown: &str, name: &str) -> Res<Option<ApiToken>> {
    let row = c
        .query_opt(
            &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE name = $1"),
            &[&name],
        )
        .await
        .map_err(|e| pg(shown, "reading a token", e))?;
    Ok(row.map(|r| token_of(&r, shown)).transpose()?)
}

async fn token_insert(c: &impl GenericClient, shown: &str, t: &NewToken) -> Res<Option<ApiToken>> {
    let row = c
        .query_opt(
            &format!(
                "INSERT INTO api_tokens (name, role, sha256, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (name) DO NOTHING RETURNING {TOKEN_COLUMNS}"
            ),
            &[&t.name, &t.role.name(), &t.sha256, &ts(t.created_at)],
        )
        .await
        .map_err(|e| pg(shown, "storing a token", e))?;
    Ok(row.map(|r| token_of(&r, shown)).transpose()?)
}

async fn token_list(c: &impl GenericClient, shown: &str) -> Res<Vec<ApiToken>> {
    let rows = c
        .query(
            &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY name"),
            &[],
        )
        .await
        .map_err(|e| pg(shown, "listing tokens", e))?;
    Ok(rows
        .iter()
        .map(|r| token_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

async fn token_revoke(
    c: &impl GenericClient,
    shown: &str,
    name: &str,
    now: Timestamp,
) -> Res<Option<ApiToken>> {
    c.execute(
        "UPDATE api_tokens SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL",
        &[&name, &ts(now)],
    )
    .await
    .map_err(|e| pg(shown, "revoking a token", e))?;
    token_named(c, shown, name).await
}

async fn action_insert(c: &impl GenericClient, shown: &str, a: &OperatorAction) -> Res<()> {
    c.execute(
        "INSERT INTO operator_actions (at, actor, action, job_name, run_id, detail) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &ts(a.at),
            &a.actor,
            &a.action,
            &a.job,
            &a.run.map(|r| r.0),
            &a.detail,
        ],
    )
    .await
    .map_err(|e| pg(shown, "recording an operator action", e))?;
    Ok(())
}

async fn action_list(
    c: &impl GenericClient,
    shown: &str,
    job: Option<&str>,
    limit: usize,
) -> Res<Vec<OperatorAction>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = format!(
        "SELECT {ACTION_COLUMNS} FROM operator_actions {} ORDER BY id DESC LIMIT $2",
        if job.is_some() {
            "WHERE job_name = $1"
        } else {
            "WHERE $1::text IS NULL"
        }
    );
    let rows = c
        .query(&sql, &[&job, &limit])
        .await
        .map_err(|e| pg(shown, "listing operator actions", e))?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let read = read_err(shown, "an operator action");
        let at: SystemTime = r.try_get(1).map_err(&read)?;
        out.push(
            ActionRow {
                id: r.try_get(0).map_err(&read)?,
                at: ms_of(at),
                actor: r.try_get(2).map_err(&read)?,
                action: r.try_get(3).map_err(&read)?,
                job: r.try_get(4).map_err(&read)?,
                run: r.try_get(5).map_err(&read)?,
                detail: r.try_get(6).map_err(&read)?,
            }
            .into_action(shown)?,
        );
    }
    Ok(out)
}

async fn finish(
    c: &impl GenericClient,
    shown: &str,
    id: RunId,
    attempt: u32,
    write: &FinishWrite,
) -> Res<Option<Run>> {
    // One statement, committed on its own, that writes what the shared rule computes
    // (`FinishWrite`) without reading the run first; its condition is the compare-and-set.
    let stmt = c
        .prepare_cached(&FINISH)
        .await
        .map_err(|e| pg(shown, "finishing a run", e))?;
    let elapsed = write
        .elapsed
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let attempt = i32::try_from(attempt).unwrap_or(i32::MAX);
    let finished_at = write.finished_at.map(ts);
    let plugin = write.plugin.as_ref();
    let row = c
        .query_opt(
            &stmt,
            &[
                &write.state.name(),
                &write.error,
                &write.result_json,
                &elapsed,
                &write.retry,
                &write.next_attempt_at.map(ts),
                &finished_at,
                &id.0,
                &attempt,
                &plugin.map(|p| p.name.as_str()),
                &plugin.map(|p| p.version.as_str()),
                &plugin.and_then(|p| p.sha256.as_deref()),
                &ts(write.attempt_end.at),
                &write.attempt_end.outcome.name(),
            ],
        )
        .await
        .map_err(|e| pg(shown, "finishing a run", e))?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

/// Finishes of distinct runs in one statement ([`FINISH_MANY`]); one answer per finish, in
/// order, matched by the returned run's id.
async fn finish_many(
    c: &impl GenericClient,
    shown: &str,
    finishes: &[(RunId, u32, &FinishWrite)],
) -> Res<Vec<Option<Run>>> {
    if let [(id, attempt, write)] = finishes {
        return Ok(vec![finish(c, shown, *id, *attempt, write).await?]);
    }
    let n = finishes.len();
    let mut id = Vec::with_capacity(n);
    let mut attempt = Vec::with_capacity(n);
    let mut state = Vec::with_capacity(n);
    let mut error = Vec::with_capacity(n);
    let mut result_json = Vec::with_capacity(n);
    let mut elapsed = Vec::with_capacity(n);
    let mut retry = Vec::with_capacity(n);
    let mut next_attempt_at = Vec::with_capacity(n);
    let mut finished_at = Vec::with_capacity(n);
    let mut plugin = Vec::with_capacity(n);
    let mut plugin_version = Vec::with_capacity(n);
    let mut plugin_sha256 = Vec::with_capacity(n);
    let mut end_at = Vec::with_capacity(n);
    let mut outcome = Vec::with_capacity(n);
    for (run, at, w) in finishes {
        id.push(run.0);
        attempt.push(i32::try_from(*at).unwrap_or(i32::MAX));
        state.push(w.state.name());
        error.push(w.error.as_deref());
        result_json.push(w.result_json.as_deref());
        elapsed.push(
            w.elapsed
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        );
        retry.push(w.retry);
        next_attempt_at.push(w.next_attempt_at.map(ts));
        finished_at.push(w.finished_at.map(ts));
        let p = w.plugin.as_ref();
        plugin.push(p.map(|p| p.name.as_str()));
        plugin_version.push(p.map(|p| p.version.as_str()));
        plugin_sha256.push(p.and_then(|p| p.sha256.as_deref()));
        end_at.push(ts(w.attempt_end.at));
        outcome.push(w.attempt_end.outcome.name());
    }
    let what = "finishing runs";
    let stmt = c
        .prepare_cached(&FINISH_MANY)
        .await
        .map_err(|e| pg(shown, what, e))?;
    let rows = c
        .query(
            &stmt,
            &[
                &id,
                &attempt,
                &state,
                &error,
                &result_json,
                &elapsed,
                &retry,
                &next_attempt_at,
                &finished_at,
                &plugin,
                &plugin_version,
                &plugin_sha256,
                &end_at,
                &outcome,
            ],
        )
        .await
        .map_err(|e| pg(shown, what, e))?;
    let mut written = std::collections::HashMap::with_capacity(rows.len());
    for r in &rows {
        let run = run_of(r, shown)?;
        if let Some(id) = run.id {
            written.insert(id, run);
        }
    }
    Ok(finishes
        .iter()
        .map(|(id, _, _)| written.remove(id))
        .collect())
}

async fn set_progress(
    c: &impl GenericClient,
    shown: &str,
    id: RunId,
    progress: &Progress,
) -> Res<bool> {
    let done = to_i64(progress.done, "progress done")?;
    let total = to_i64(progress.total, "progress total")?;
    let n = c
        .execute(
            "UPDATE runs SET progress_done = $1, progress_total = $2, progress_message = $3 \
             WHERE id = $4 AND state = 'running'",
            &[&done, &total, &progress.message, &id.0],
        )
        .await
        .map_err(|e| pg(shown, "recording progress", e))?;
    Ok(n > 0)
}

async fn to_recover(
    c: &impl GenericClient,
    shown: &str,
    now: Timestamp,
    restart: Option<(&NodeId, &InstanceId)>,
) -> Res<Vec<RunId>> {
    // Locked and skipped like claims: two nodes recovering at once split the runs.
    let rows = c
        .query(
            "SELECT id FROM runs WHERE state = 'running' \
             AND (($1::text IS NOT NULL AND node_id = $1 \
                   AND node_instance IS DISTINCT FROM $2::text) \
                  OR lease_expires_at IS NULL OR lease_expires_at <= $3) \
             ORDER BY id FOR NO KEY UPDATE SKIP LOCKED",
            &[
                &restart.map(|(n, _)| n.0.as_str()),
                &restart.map(|(_, i)| i.0.as_str()),
                &ts(now),
            ],
        )
        .await
        .map_err(|e| pg(shown, "finding expired leases", e))?;
    Ok(rows.iter().map(|r| RunId(r.get(0))).collect())
}

async fn renew(
    c: &impl GenericClient,
    shown: &str,
    node: &NodeId,
    instance: &InstanceId,
    until: Timestamp,
    now: Timestamp,
) -> Res<Option<Vec<RunId>>> {
    // One statement: the heartbeat, and the leases only if the heartbeat found this life
    // registered.
    let row = c
        .query_one(
            "WITH beat AS (UPDATE nodes SET heartbeat_at = $3 \
               WHERE id = $1 AND instance = $2 RETURNING 1), \
             life AS (UPDATE node_sessions SET heartbeat_at = $3 \
               WHERE instance = $2 AND EXISTS (SELECT 1 FROM beat)), \
             renewed AS (UPDATE runs SET lease_expires_at = $4 \
               WHERE node_id = $1 AND node_instance = $2 AND state = 'running' \
               AND lease_expires_at > $3 AND EXISTS (SELECT 1 FROM beat) \
               RETURNING id) \
             SELECT (SELECT count(*) FROM beat), ARRAY(SELECT id FROM renewed ORDER BY id)",
            &[&node.0, &instance.0, &ts(now), &ts(until)],
        )
        .await
        .map_err(|e| pg(shown, "renewing leases", e))?;
    let beat: i64 = row.get(0);
    let ids: Vec<i64> = row.get(1);
    Ok((beat > 0).then(|| ids.into_iter().map(RunId).collect()))
}

async fn node_locked(c: &impl GenericClient, shown: &str, id: &NodeId) -> Res<Option<NodeStatus>> {
    let row = c
        .query_opt(
            &format!("{} WHERE n.id = $1 FOR UPDATE OF n", &*NODE_SELECT),
            &[&id.0],
        )
        .await
        .map_err(|e| pg(shown, "reading the node", e))?;
    Ok(row.map(|r| node_of(&r, shown)).transpose()?)
}

async fn put_node(
    c: &impl GenericClient,
    shown: &str,
    node: &NodeInfo,
    now: Timestamp,
    exists: bool,
) -> Res<bool> {
    let r = NodeRow::of(node, now);
    let capacity = i32::try_from(r.capacity).unwrap_or(i32::MAX);
    let at = ts(now);
    let values: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
        &r.id,
        &r.instance,
        &r.host_name,
        &r.pid,
        &r.version,
        &capacity,
        &r.tags,
        &at,
    ];
    let n = if exists {
        c.execute(
            "UPDATE nodes SET instance = $2, host_name = $3, pid = $4, version = $5, \
             capacity = $6, tags = $7, started_at = $8, heartbeat_at = $8, stopped_at = NULL \
             WHERE id = $1",
            &values,
        )
        .await
    } else {
        c.execute(
            "INSERT INTO nodes (id, instance, host_name, pid, version, capacity, tags, \
             started_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) \
             ON CONFLICT (id) DO NOTHING",
            &values,
        )
        .await
    }
    .map_err(|e| pg(shown, "registering the node", e))?;
    if n > 0 {
        c.execute(
            "INSERT INTO node_sessions (instance, node_id, host_name, started_at, heartbeat_at) \
             VALUES ($1, $2, $3, $4, $4) ON CONFLICT (instance) DO UPDATE SET \
             node_id = EXCLUDED.node_id, host_name = EXCLUDED.host_name, \
             started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at, \
             stopped_at = NULL",
            &[&node.instance.0, &node.id.0, &node.host_name, &at],
        )
        .await
        .map_err(|e| pg(shown, "recording the node's life", e))?;
    }
    Ok(n > 0)
}

async fn stop_node(
    c: &impl GenericClient,
    shown: &str,
    node: &NodeId,
    instance: &InstanceId,
    now: Timestamp,
) -> Res<()> {
    c.execute(
        "WITH n AS (UPDATE nodes SET stopped_at = $3 WHERE id = $1 AND instance = $2) \
         UPDATE node_sessions SET stopped_at = $3 WHERE node_id = $1 AND instance = $2",
        &[&node.0, &instance.0, &ts(now)],
    )
    .await
    .map_err(|e| pg(shown, "recording a node stop", e))?;
    Ok(())
}

async fn sessions(
    c: &impl GenericClient,
    shown: &str,
    from: Timestamp,
    to: Timestamp,
) -> Res<Vec<NodeSession>> {
    let rows = c
        .query(
            &format!(
                "SELECT {SESSION_COLUMNS} FROM node_sessions \
                 WHERE started_at < $2 AND COALESCE(stopped_at, heartbeat_at) >= $1 \
                 ORDER BY started_at, instance"
            ),
            &[&ts(from), &ts(to)],
        )
        .await
        .map_err(|e| pg(shown, "listing node lives", e))?;
    let bad = read_err(shown, "a node life");
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let t = |i: usize| -> StoreResult<Option<i64>> {
            Ok(r.try_get::<_, Option<SystemTime>>(i)
                .map_err(&bad)?
                .map(ms_of))
        };
        out.push(
            SessionRow {
                node_id: r.try_get(0).map_err(&bad)?,
                instance: r.try_get(1).map_err(&bad)?,
                host_name: r.try_get(2).map_err(&bad)?,
                started_at: t(3)?.unwrap_or_default(),
                heartbeat_at: t(4)?.unwrap_or_default(),
                stopped_at: t(5)?,
            }
            .into_session(shown)?,
        );
    }
    Ok(out)
}

async fn runs_in(
    c: &impl GenericClient,
    shown: &str,
    job: Option<JobId>,
    from: Timestamp,
    to: Timestamp,
) -> Res<Vec<Run>> {
    // Two statements, so each has its index: (job_id, fire_time) or (fire_time, id).
    let rows = match job {
        Some(job) => {
            c.query(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE job_id = $1 \
                     AND fire_time >= $2 AND fire_time < $3 ORDER BY fire_time, id"
                ),
                &[&job.0, &ts(from), &ts(to)],
            )
            .await
        }
        None => {
            c.query(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs \
                     WHERE fire_time >= $1 AND fire_time < $2 ORDER BY fire_time, id"
                ),
                &[&ts(from), &ts(to)],
            )
            .await
        }
    }
    .map_err(|e| pg(shown, "listing runs by fire time", e))?;
    Ok(rows
        .iter()
        .map(|r| run_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

async fn begin_attempts(c: &impl GenericClient, shown: &str, attempts: &[Attempt]) -> Res<()> {
    let run: Vec<i64> = attempts.iter().map(|a| a.run_id.0).collect();
    let attempt: Vec<i32> = attempts
        .iter()
        .map(|a| i32::try_from(a.attempt).unwrap_or(i32::MAX))
        .collect();
    let node: Vec<&str> = attempts.iter().map(|a| a.node_id.0.as_str()).collect();
    let instance: Vec<Option<&str>> = attempts
        .iter()
        .map(|a| a.node_instance.as_ref().map(|i| i.0.as_str()))
        .collect();
    let started: Vec<SystemTime> = attempts.iter().map(|a| ts(a.started_at)).collect();
    let stmt = c
        .prepare_cached(
            "INSERT INTO run_attempts (run_id, attempt, node_id, node_instance, started_at) \
             SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], \
             $5::timestamptz[]) ON CONFLICT (run_id, attempt) DO NOTHING",
        )
        .await
        .map_err(|e| pg(shown, "recording attempts", e))?;
    c.execute(&stmt, &[&run, &attempt, &node, &instance, &started])
        .await
        .map_err(|e| pg(shown, "recording attempts", e))?;
    Ok(())
}

async fn end_attempt(
    c: &impl GenericClient,
    shown: &str,
    run: RunId,
    attempt: u32,
    end: &AttemptEnd,
) -> Res<bool> {
    let n = c
        .execute(
            "UPDATE run_attempts SET finished_at = $1, outcome = $2, error = $3 \
             WHERE run_id = $4 AND attempt = $5 AND finished_at IS NULL",
            &[
                &ts(end.at),
                &end.outcome.name(),
                &end.error,
                &run.0,
                &i32::try_from(attempt).unwrap_or(i32::MAX),
            ],
        )
        .await
        .map_err(|e| pg(shown, "ending an attempt", e))?;
    Ok(n > 0)
}

async fn outlived(
    c: &impl GenericClient,
    shown: &str,
    run: RunId,
    attempt: u32,
    at: Timestamp,
    error: &str,
) -> Res<bool> {
    let n = c
        .execute(
            "UPDATE run_attempts SET finished_at = $1, error = $2 \
             WHERE run_id = $3 AND attempt = $4 \
             AND outcome IN ('lease_expired', 'node_restarted') AND finished_at < $1",
            &[
                &ts(at),
                &error,
                &run.0,
                &i32::try_from(attempt).unwrap_or(i32::MAX),
            ],
        )
        .await
        .map_err(|e| pg(shown, "recording an attempt's late end", e))?;
    Ok(n > 0)
}

fn attempt_of(r: &tokio_postgres::Row, shown: &str) -> StoreResult<Attempt> {
    let bad = read_err(shown, "an attempt row");
    let t = |i: usize| -> StoreResult<Option<i64>> {
        Ok(r.try_get::<_, Option<SystemTime>>(i)
            .map_err(&bad)?
            .map(ms_of))
    };
    AttemptRow {
        run_id: r.try_get(0).map_err(&bad)?,
        job_id: r.try_get(1).map_err(&bad)?,
        fire_time: t(2)?.unwrap_or_default(),
        attempt: i64::from(r.try_get::<_, i32>(3).map_err(&bad)?),
        node_id: r.try_get(4).map_err(&bad)?,
        node_instance: r.try_get(5).map_err(&bad)?,
        started_at: t(6)?.unwrap_or_default(),
        finished_at: t(7)?,
        outcome: r.try_get(8).map_err(&bad)?,
        error: r.try_get(9).map_err(&bad)?,
    }
    .into_attempt(shown)
}

async fn attempts_run(c: &impl GenericClient, shown: &str, run: RunId) -> Res<Vec<Attempt>> {
    let rows = c
        .query(
            &format!(
                "SELECT {ATTEMPT_COLUMNS} FROM run_attempts a JOIN runs r ON r.id = a.run_id \
                 WHERE a.run_id = $1 ORDER BY a.attempt"
            ),
            &[&run.0],
        )
        .await
        .map_err(|e| pg(shown, "reading a run's attempts", e))?;
    Ok(rows
        .iter()
        .map(|r| attempt_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

async fn attempts_in(
    c: &impl GenericClient,
    shown: &str,
    job: Option<JobId>,
    from: Timestamp,
    to: Timestamp,
) -> Res<Vec<Attempt>> {
    let order = "ORDER BY r.fire_time, r.id, a.attempt";
    let rows = match job {
        Some(job) => {
            c.query(
                &format!(
                    "SELECT {ATTEMPT_COLUMNS} FROM runs r JOIN run_attempts a ON a.run_id = r.id \
                     WHERE r.job_id = $1 AND r.fire_time >= $2 AND r.fire_time < $3 {order}"
                ),
                &[&job.0, &ts(from), &ts(to)],
            )
            .await
        }
        None => {
            c.query(
                &format!(
                    "SELECT {ATTEMPT_COLUMNS} FROM runs r JOIN run_attempts a ON a.run_id = r.id \
                     WHERE r.fire_time >= $1 AND r.fire_time < $2 {order}"
                ),
                &[&ts(from), &ts(to)],
            )
            .await
        }
    }
    .map_err(|e| pg(shown, "listing attempts by fire time", e))?;
    Ok(rows
        .iter()
        .map(|r| attempt_of(r, shown))
        .collect::<StoreResult<_>>()?)
}

async fn nodes(c: &impl GenericClient, shown: &str) -> Res<Vec<NodeStatus>> {
    let rows = c
        .query(&format!("{} ORDER BY n.id", &*NODE_SELECT), &[])
        .await
        .map_err(|e| pg(shown, "listing nodes", e))?;
    Ok(rows
        .iter()
        .map(|r| node_of(r, shown))
        .collect::<StoreResult<Vec<_>>>()?)
}

async fn append_logs(
    c: &impl GenericClient,
    shown: &str,
    run: RunId,
    lines: &[LogLine],
) -> Res<bool> {
    let at: Vec<SystemTime> = lines.iter().map(|l| ts(l.at)).collect();
    let level: Vec<&str> = lines.iter().map(|l| l.level.name()).collect();
    let message: Vec<&str> = lines.iter().map(|l| l.message.as_str()).collect();
    // One statement: the lines go in together or not at all, in order (seq follows the array
    // order); a missing run inserts nothing.
    let stmt = c
        .prepare_cached(
            "WITH r AS (SELECT id FROM runs WHERE id = $1) \
             INSERT INTO run_logs (run_id, at, level, message) \
             SELECT r.id, l.at, l.level, l.message FROM r, \
               unnest($2::timestamptz[], $3::text[], $4::text[]) \
               WITH ORDINALITY AS l(at, level, message, n) ORDER BY l.n",
        )
        .await
        .map_err(|e| pg(shown, "appending log lines", e))?;
    let n = c
        .execute(&stmt, &[&run.0, &at, &level, &message])
        .await
        .map_err(|e| pg(shown, "appending log lines", e))?;
    Ok(n > 0 || get_run(c, shown, run).await?.is_some())
}

async fn logs(
    c: &impl GenericClient,
    shown: &str,
    run: RunId,
    after: Option<u64>,
    limit: usize,
) -> Res<Vec<(u64, LogLine)>> {
    let after = i64::try_from(after.unwrap_or(0)).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = c
        .query(
            "SELECT seq, at, level, message FROM run_logs \
             WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            &[&run.0, &after, &limit],
        )
        .await
        .map_err(|e| pg(shown, "reading a run log", e))?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let read = read_err(shown, "a log line");
        let seq: i64 = r.try_get(0).map_err(&read)?;
        let at: SystemTime = r.try_get(1).map_err(&read)?;
        let level: String = r.try_get(2).map_err(&read)?;
        let row = format!("log line {seq}");
        out.push((
            u64::try_from(seq).map_err(|_| corrupt(shown, &row, "seq", seq))?,
            LogLine {
                at: Timestamp::from_millisecond(ms_of(at))
                    .map_err(|e| corrupt(shown, &row, "at", e))?,
                level: LogLevel::from_name(&level)
                    .ok_or_else(|| corrupt(shown, &row, "level", &level))?,
                message: r.try_get(3).map_err(&read)?,
            },
        ));
    }
    Ok(out)
}

async fn purge(c: &impl GenericClient, shown: &str, older_than: Timestamp) -> Res<PurgeCounts> {
    const OLD: &str = "SELECT id FROM runs WHERE state NOT IN ('pending', 'running') \
                       AND finished_at IS NOT NULL AND finished_at < $1";
    let cut = ts(older_than);
    let log_lines: i64 = c
        .query_one(
            &format!("SELECT COUNT(*) FROM run_logs WHERE run_id IN ({OLD})"),
            &[&cut],
        )
        .await
        .map_err(|e| pg(shown, "counting old log lines", e))?
        .get(0);
    let runs = c
        .execute(&format!("DELETE FROM runs WHERE id IN ({OLD})"), &[&cut])
        .await
        .map_err(|e| pg(shown, "purging old runs", e))?;
    Ok(PurgeCounts {
        runs,
        log_lines: u64::try_from(log_lines).unwrap_or(0),
    })
}

async fn notify(c: &impl GenericClient, shown: &str, channel: &str) -> Res<()> {
    c.execute("SELECT pg_notify($1, '')", &[&channel])
        .await
        .map_err(|e| pg(shown, "notifying other nodes", e))?;
    Ok(())
}

impl Conn for PgConn<'_> {
    async fn commit(self) -> Res<()> {
        match self.client {
            Client::Tx(tx) => commit(tx, self.shown).await,
            Client::Auto(_) => Ok(()),
        }
    }

    async fn job_get(&mut self, id: JobId) -> Res<Option<JobDef>> {
        let s = self.shown;
        on!(self, |c| get_job(c, s, id).await)
    }

    async fn jobs_get(&mut self, ids: &[JobId]) -> Res<Vec<JobDef>> {
        let s = self.shown;
        on!(self, |c| get_jobs(c, s, ids).await)
    }

    async fn job_get_by_name(&mut self, name: &JobName) -> Res<Option<JobDef>> {
        let s = self.shown;
        on!(self, |c| job_by_name(c, s, name).await)
    }

    async fn job_count(&mut self) -> Res<u64> {
        let s = self.shown;
        on!(self, |c| job_count(c, s).await)
    }

    async fn jobs_late(&mut self, before: Timestamp, limit: usize) -> Res<Vec<JobDef>> {
        let s = self.shown;
        on!(self, |c| jobs_late(c, s, before, limit).await)
    }

    async fn job_list(&mut self) -> Res<Vec<JobDef>> {
        let s = self.shown;
        on!(self, |c| jobs(c, s).await)
    }

    async fn job_page(&mut self, query: &JobQuery) -> Res<Vec<JobDef>> {
        let s = self.shown;
        on!(self, |c| job_page(c, s, query).await)
    }

    async fn job_insert(&mut self, job: &JobDef, now: Timestamp) -> Res<Option<JobDef>> {
        let s = self.shown;
        on!(self, |c| insert_job(c, s, job, now).await)
    }

    async fn job_update_if_version(&mut self, job: &JobDef, now: Timestamp) -> Res<Option<JobDef>> {
        let s = self.shown;
        on!(self, |c| update_job_if_version(c, s, job, now).await)
    }

    async fn job_delete(&mut self, id: JobId) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| delete_job(c, s, id).await)
    }

    async fn job_set_enabled(
        &mut self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> Res<Option<JobDef>> {
        let s = self.shown;
        on!(self, |c| set_enabled(c, s, id, enabled, now).await)
    }

    async fn job_set_next_fire_if(
        &mut self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| set_next_fire_if(c, s, id, expected, new).await)
    }

    async fn jobs_due(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
        set: DueSet,
    ) -> Res<Vec<DueJob>> {
        let s = self.shown;
        on!(self, |c| due_jobs(c, s, now, limit, tags, set).await)
    }

    async fn jobs_due_prepare(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> Res<(Vec<DueJob>, Vec<DueJob>)> {
        let s = self.shown;
        // Pipelined as in `claim_start`; the recurring read is dropped unless the first is
        // full (the contract), which costs the server one indexed read and no round trip.
        let (due, recurring) = on!(self, |c| tokio::try_join!(
            due_jobs(c, s, now, limit, tags, DueSet::All),
            due_jobs(c, s, now, limit, tags, DueSet::Recurring)
        ))?;
        if recurring_page_needed(&due, limit) {
            Ok((due, recurring))
        } else {
            Ok((due, Vec::new()))
        }
    }

    async fn next_due(&mut self, tags: &[String], set: DueSet) -> Res<Option<Timestamp>> {
        let s = self.shown;
        on!(self, |c| next_due_at(c, s, tags, set).await)
    }

    async fn claim_begun(&mut self, token: i64) -> Res<()> {
        let s = self.shown;
        on!(self, |c| claim_lock(c, s, token).await)
    }

    async fn claim_start(&mut self, node: &str, token: i64) -> Res<bool> {
        let s = self.shown;
        // Both sent before either answer is read (tokio-postgres pipelines futures polled
        // together on one connection): one round trip instead of two. The server still runs
        // them one after the other, in the order sent.
        on!(self, |c| {
            let (pause, ()) = tokio::try_join!(
                pause_read(c, s, PauseKind::Node, node),
                claim_lock(c, s, token)
            )?;
            Ok(pause.is_some())
        })
    }

    async fn claim_write(
        &mut self,
        moves: &[NextFireMove],
        runs: &[Run],
        token: i64,
    ) -> Res<(usize, Vec<Run>)> {
        let s = self.shown;
        // Pipelined as in `claim_start`: the next fires' moves, then the run inserts with
        // their attempts (one statement).
        on!(self, |c| tokio::try_join!(
            advance(c, s, moves),
            insert(c, s, runs, token, true)
        ))
    }

    async fn claim_due(
        &mut self,
        now: Timestamp,
        fire_limit: usize,
        exclude: &[JobId],
        pending_limit: usize,
        tags: &[String],
    ) -> Res<(Vec<JobDef>, Vec<PendingDue>)> {
        let s = self.shown;
        // Pipelined as in `claim_start`: the fires' read, then the pending runs', in one
        // round trip.
        on!(self, |c| tokio::try_join!(
            due_fires(c, s, now, fire_limit, exclude, tags, DueSet::All),
            due_pending(c, s, now, pending_limit, tags)
        ))
    }

    async fn claim_fires(
        &mut self,
        now: Timestamp,
        limit: usize,
        exclude: &[JobId],
        tags: &[String],
        set: DueSet,
    ) -> Res<Vec<JobDef>> {
        let s = self.shown;
        on!(self, |c| due_fires(c, s, now, limit, exclude, tags, set)
            .await)
    }

    async fn claim_pending(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> Res<Vec<PendingDue>> {
        let s = self.shown;
        on!(self, |c| due_pending(c, s, now, limit, tags).await)
    }

    async fn advance_next_fires(&mut self, moves: &[NextFireMove]) -> Res<usize> {
        let s = self.shown;
        on!(self, |c| advance(c, s, moves).await)
    }

    async fn insert_runs(&mut self, runs: &[Run], token: i64) -> Res<Vec<Run>> {
        let s = self.shown;
        on!(self, |c| insert(c, s, runs, token, false).await)
    }

    async fn queued_may_start(&mut self, job: JobId) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| queued_may_start(c, s, job).await)
    }

    async fn run_update_if(
        &mut self,
        run: &Run,
        expected: (RunState, u32),
        token: i64,
    ) -> Res<Option<Run>> {
        let s = self.shown;
        let Some(id) = run.id else { return Ok(None) };
        on!(self, |c| update_run_if(c, s, run, id, expected, token)
            .await)
    }

    async fn runs_claimed_by(&mut self, node: &NodeId, token: i64) -> Res<Vec<Run>> {
        let s = self.shown;
        on!(self, |c| claimed_by(c, s, node, token).await)
    }

    async fn run_get(&mut self, id: RunId) -> Res<Option<Run>> {
        let s = self.shown;
        on!(self, |c| get_run(c, s, id).await)
    }

    async fn run_id_at(&mut self, job: JobId, fire: Timestamp) -> Res<Option<RunId>> {
        let s = self.shown;
        on!(self, |c| run_at(c, s, job, fire).await)
    }

    async fn run_list(&mut self, filter: &RunFilter) -> Res<Vec<Run>> {
        let s = self.shown;
        on!(self, |c| runs(c, s, filter).await)
    }

    async fn run_finish_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        write: &FinishWrite,
    ) -> Res<Option<Run>> {
        let s = self.shown;
        on!(self, |c| finish(c, s, id, attempt, write).await)
    }

    async fn run_finish_many(
        &mut self,
        finishes: &[(RunId, u32, &FinishWrite)],
    ) -> Res<Vec<Option<Run>>> {
        let s = self.shown;
        on!(self, |c| finish_many(c, s, finishes).await)
    }

    async fn run_set_progress_if_running(&mut self, id: RunId, progress: &Progress) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| set_progress(c, s, id, progress).await)
    }

    async fn runs_to_recover(
        &mut self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> Res<Vec<RunId>> {
        let s = self.shown;
        on!(self, |c| to_recover(c, s, now, restart).await)
    }

    async fn renew(
        &mut self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> Res<Option<Vec<RunId>>> {
        let s = self.shown;
        on!(self, |c| renew(c, s, node, instance, until, now).await)
    }

    async fn node_get(&mut self, id: &NodeId) -> Res<Option<NodeStatus>> {
        let s = self.shown;
        match &self.client {
            Client::Tx(t) => node_locked(t, s, id).await,
            Client::Auto(o) => {
                let o: &Object = o;
                node_row(o, s, id).await
            }
        }
    }

    async fn node_put(&mut self, node: &NodeInfo, now: Timestamp, exists: bool) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| put_node(c, s, node, now, exists).await)
    }

    async fn node_stop(&mut self, node: &NodeId, instance: &InstanceId, now: Timestamp) -> Res<()> {
        let s = self.shown;
        on!(self, |c| stop_node(c, s, node, instance, now).await)
    }

    async fn node_list(&mut self) -> Res<Vec<NodeStatus>> {
        let s = self.shown;
        on!(self, |c| nodes(c, s).await)
    }

    async fn node_sessions(&mut self, from: Timestamp, to: Timestamp) -> Res<Vec<NodeSession>> {
        let s = self.shown;
        on!(self, |c| sessions(c, s, from, to).await)
    }

    async fn runs_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> Res<Vec<Run>> {
        let s = self.shown;
        on!(self, |c| runs_in(c, s, job, from, to).await)
    }

    async fn attempts_begin(&mut self, attempts: &[Attempt]) -> Res<()> {
        let s = self.shown;
        on!(self, |c| begin_attempts(c, s, attempts).await)
    }

    async fn attempt_end(&mut self, run: RunId, attempt: u32, end: &AttemptEnd) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| end_attempt(c, s, run, attempt, end).await)
    }

    async fn attempt_outlived(
        &mut self,
        run: RunId,
        attempt: u32,
        at: Timestamp,
        error: &str,
    ) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| outlived(c, s, run, attempt, at, error).await)
    }

    async fn attempts_of_run(&mut self, run: RunId) -> Res<Vec<Attempt>> {
        let s = self.shown;
        on!(self, |c| attempts_run(c, s, run).await)
    }

    async fn attempts_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> Res<Vec<Attempt>> {
        let s = self.shown;
        on!(self, |c| attempts_in(c, s, job, from, to).await)
    }

    async fn hold_get(&mut self, job: JobId) -> Res<Option<Hold>> {
        let s = self.shown;
        on!(self, |c| {
            let rows = c
                .query(
                    &format!("SELECT job_id, {HOLD_COLUMNS} FROM job_holds WHERE job_id = $1"),
                    &[&job.0],
                )
                .await
                .map_err(|e| pg(s, "reading a job's hold", e))?;
            Ok(rows
                .iter()
                .map(|r| hold_of(r, s))
                .next()
                .transpose()?
                .map(|(_, h)| h))
        })
    }

    async fn hold_insert(&mut self, job: JobId, hold: &Hold) -> Res<()> {
        let s = self.shown;
        let r = HoldRow::of(hold);
        on!(self, |c| {
            c.execute(
                &format!(
                    "INSERT INTO job_holds (job_id, {HOLD_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"
                ),
                &[
                    &job.0,
                    &st_opt(r.next_fire),
                    &st_opt(r.paused_at),
                    &r.paused_by,
                    &r.reason,
                ],
            )
            .await
            .map_err(|e| pg(s, "holding a job", e))?;
            Ok(())
        })
    }

    async fn hold_delete(&mut self, job: JobId) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| {
            let n = c
                .execute("DELETE FROM job_holds WHERE job_id = $1", &[&job.0])
                .await
                .map_err(|e| pg(s, "releasing a job's hold", e))?;
            Ok(n > 0)
        })
    }

    async fn holds_list(&mut self) -> Res<Vec<(JobId, Hold)>> {
        let s = self.shown;
        on!(self, |c| {
            let rows = c
                .query(
                    &format!("SELECT job_id, {HOLD_COLUMNS} FROM job_holds ORDER BY job_id"),
                    &[],
                )
                .await
                .map_err(|e| pg(s, "listing held jobs", e))?;
            Ok(rows
                .iter()
                .map(|r| hold_of(r, s))
                .collect::<StoreResult<_>>()?)
        })
    }

    async fn pause_get(&mut self, kind: PauseKind, name: &str) -> Res<Option<Pause>> {
        let s = self.shown;
        on!(self, |c| pause_read(c, s, kind, name).await)
    }

    async fn pause_insert(&mut self, kind: PauseKind, name: &str, pause: &Pause) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| {
            let n = c
                .execute(
                    &format!(
                        "INSERT INTO pauses (kind, name, {PAUSE_COLUMNS}) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (kind, name) DO NOTHING"
                    ),
                    &[&kind.name(), &name, &ts(pause.at), &pause.by, &pause.reason],
                )
                .await
                .map_err(|e| pg(s, "recording a pause", e))?;
            Ok(n > 0)
        })
    }

    async fn pause_delete(&mut self, kind: PauseKind, name: &str) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| {
            let n = c
                .execute(
                    "DELETE FROM pauses WHERE kind = $1 AND name = $2",
                    &[&kind.name(), &name],
                )
                .await
                .map_err(|e| pg(s, "removing a pause", e))?;
            Ok(n > 0)
        })
    }

    async fn pauses_list(&mut self) -> Res<Vec<(PauseKind, String, Pause)>> {
        let s = self.shown;
        on!(self, |c| {
            let rows = c
                .query(
                    &format!("SELECT kind, name, {PAUSE_COLUMNS} FROM pauses ORDER BY kind, name"),
                    &[],
                )
                .await
                .map_err(|e| pg(s, "listing pauses", e))?;
            Ok(rows
                .iter()
                .map(|r| pause_of(r, s))
                .collect::<StoreResult<_>>()?)
        })
    }

    async fn group_get(&mut self, name: &str, lock: bool) -> Res<Option<GroupDef>> {
        let s = self.shown;
        // FOR UPDATE, not SKIP LOCKED: a second claimer must wait and then count the
        // runs the first one started.
        let sql = if lock {
            "SELECT name, max_running, released_at FROM job_groups WHERE name = $1 FOR UPDATE"
        } else {
            "SELECT name, max_running, released_at FROM job_groups WHERE name = $1"
        };
        on!(self, |c| {
            let rows = c
                .query(sql, &[&name])
                .await
                .map_err(|e| pg(s, "reading a group", e))?;
            Ok(rows
                .iter()
                .map(|r| group_of(r, s).map(|(_, d)| d))
                .next()
                .transpose()?)
        })
    }

    async fn group_put(&mut self, name: &str, def: &GroupDef) -> Res<()> {
        let s = self.shown;
        let max = def.max_running.map(i64::from);
        let released = def.released_at.map(ts);
        on!(self, |c| {
            c.execute(
                "INSERT INTO job_groups (name, max_running, released_at) \
                 VALUES ($1, $2::bigint, $3) ON CONFLICT (name) DO UPDATE \
                 SET max_running = EXCLUDED.max_running, released_at = EXCLUDED.released_at",
                &[&name, &max, &released],
            )
            .await
            .map_err(|e| pg(s, "defining a group", e))?;
            Ok(())
        })
    }

    async fn group_defs(&mut self) -> Res<Vec<(String, GroupDef)>> {
        let s = self.shown;
        on!(self, |c| {
            let rows = c
                .query(
                    "SELECT name, max_running, released_at FROM job_groups ORDER BY name",
                    &[],
                )
                .await
                .map_err(|e| pg(s, "listing groups", e))?;
            Ok(rows
                .iter()
                .map(|r| group_of(r, s))
                .collect::<StoreResult<_>>()?)
        })
    }

    async fn cancel_insert(&mut self, request: &CancelRequest) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| {
            let n = c
                .execute(
                    "INSERT INTO cancel_requests (run_id, requested_by, requested_at) \
                     VALUES ($1, $2, $3) ON CONFLICT (run_id) DO NOTHING",
                    &[&request.run.0, &request.by, &ts(request.at)],
                )
                .await
                .map_err(|e| pg(s, "recording a cancel request", e))?;
            Ok(n > 0)
        })
    }

    async fn cancel_get(&mut self, run: RunId) -> Res<Option<CancelRequest>> {
        let s = self.shown;
        on!(self, |c| {
            let rows = c
                .query(
                    "SELECT run_id, requested_by, requested_at FROM cancel_requests \
                     WHERE run_id = $1",
                    &[&run.0],
                )
                .await
                .map_err(|e| pg(s, "reading a cancel request", e))?;
            Ok(rows.iter().map(|r| cancel_of(r, s)).next().transpose()?)
        })
    }

    async fn cancels_of_node(&mut self, node: &NodeId) -> Res<Vec<CancelRequest>> {
        let s = self.shown;
        on!(self, |c| {
            let rows = c
                .query(
                    "SELECT c.run_id, c.requested_by, c.requested_at \
                     FROM cancel_requests c JOIN runs r ON r.id = c.run_id \
                     WHERE r.state = 'running' AND r.node_id = $1 ORDER BY c.run_id",
                    &[&node.0],
                )
                .await
                .map_err(|e| pg(s, "reading cancel requests", e))?;
            Ok(rows
                .iter()
                .map(|r| cancel_of(r, s))
                .collect::<StoreResult<_>>()?)
        })
    }

    async fn log_append(&mut self, run: RunId, lines: &[LogLine]) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| append_logs(c, s, run, lines).await)
    }

    async fn log_list(
        &mut self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> Res<Vec<(u64, LogLine)>> {
        let s = self.shown;
        on!(self, |c| logs(c, s, run, after, limit).await)
    }

    async fn retention_purge(&mut self, older_than: Timestamp) -> Res<PurgeCounts> {
        let s = self.shown;
        on!(self, |c| purge(c, s, older_than).await)
    }

    async fn token_insert(&mut self, token: &NewToken) -> Res<Option<ApiToken>> {
        let s = self.shown;
        on!(self, |c| token_insert(c, s, token).await)
    }

    async fn token_list(&mut self) -> Res<Vec<ApiToken>> {
        let s = self.shown;
        on!(self, |c| token_list(c, s).await)
    }

    async fn token_revoke(&mut self, name: &str, now: Timestamp) -> Res<Option<ApiToken>> {
        let s = self.shown;
        on!(self, |c| token_revoke(c, s, name, now).await)
    }

    async fn action_insert(&mut self, action: &OperatorAction) -> Res<()> {
        let s = self.shown;
        on!(self, |c| action_insert(c, s, action).await)
    }

    async fn action_list(&mut self, job: Option<&str>, limit: usize) -> Res<Vec<OperatorAction>> {
        let s = self.shown;
        on!(self, |c| action_list(c, s, job, limit).await)
    }

    async fn alert_reopen(&mut self, key: &AlertKey, episode: &str, now: Timestamp) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| {
            let n = c
                .execute(
                    "UPDATE alert_episodes SET episode = $1, opened_at = $2, closed_at = NULL \
                     WHERE subject = $3 AND condition = $4 AND closed_at IS NOT NULL",
                    &[&episode, &ts(now), &key.subject, &key.condition],
                )
                .await
                .map_err(|e| pg(s, "reopening an alert episode", e))?;
            Ok(n == 1)
        })
    }

    async fn alert_insert(&mut self, key: &AlertKey, episode: &str, now: Timestamp) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| {
            let n = c
                .execute(
                    "INSERT INTO alert_episodes (subject, condition, episode, opened_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (subject, condition) DO NOTHING",
                    &[&key.subject, &key.condition, &episode, &ts(now)],
                )
                .await
                .map_err(|e| pg(s, "opening an alert episode", e))?;
            Ok(n == 1)
        })
    }

    async fn alert_close(&mut self, key: &AlertKey, now: Timestamp) -> Res<bool> {
        let s = self.shown;
        on!(self, |c| {
            let n = c
                .execute(
                    "UPDATE alert_episodes SET closed_at = $1 \
                     WHERE subject = $2 AND condition = $3 AND closed_at IS NULL",
                    &[&ts(now), &key.subject, &key.condition],
                )
                .await
                .map_err(|e| pg(s, "closing an alert episode", e))?;
            Ok(n == 1)
        })
    }

    async fn alert_delivery_insert(&mut self, d: &AlertDelivery) -> Res<i64> {
        let s = self.shown;
        on!(self, |c| {
            let row = c
                .query_one(
                    "INSERT INTO alert_deliveries \
                     (at, node, channel, subject, condition, kind, run_id, outcome, detail) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
                    &[
                        &ts(d.at),
                        &d.node,
                        &d.channel,
                        &d.key.subject,
                        &d.key.condition,
                        &d.kind,
                        &d.run,
                        &d.outcome.name(),
                        &d.detail,
                    ],
                )
                .await
                .map_err(|e| pg(s, "recording an alert delivery", e))?;
            Ok(row.get::<_, i64>(0))
        })
    }

    async fn runs_of_parent(&mut self, parent: RunId) -> Res<Vec<Run>> {
        let s = self.shown;
        on!(self, |c| {
            let rows = c
                .query(
                    &format!("SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = $1 ORDER BY id"),
                    &[&parent.0],
                )
                .await
                .map_err(|e| pg(s, "listing a run's continuations", e))?;
            Ok(rows
                .iter()
                .map(|r| run_of(r, s))
                .collect::<StoreResult<Vec<_>>>()?)
        })
    }

    async fn last_success_fire(&mut self, job: JobId, before: Timestamp) -> Res<Option<Timestamp>> {
        let s = self.shown;
        on!(self, |c| {
            let row = c
                .query_one(
                    "SELECT MAX(fire_time) FROM runs \
                     WHERE job_id = $1 AND state = 'succeeded' AND fire_time < $2",
                    &[&job.0, &ts(before)],
                )
                .await
                .map_err(|e| pg(s, "finding a job's last success", e))?;
            let at: Option<SystemTime> = row
                .try_get(0)
                .map_err(|e| pg(s, "finding a job's last success", e))?;
            Ok(at
                .map(|t| {
                    Timestamp::from_millisecond(ms_of(t))
                        .map_err(|e| StoreError::other(format!("a fire time in {s}: {e}")))
                })
                .transpose()?)
        })
    }

    async fn run_set_params_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        params_json: &str,
    ) -> Res<bool> {
        let s = self.shown;
        let attempt = i32::try_from(attempt).unwrap_or(i32::MAX);
        on!(self, |c| {
            let n = c
                .execute(
                    "UPDATE runs SET params_resolved = $1 \
                     WHERE id = $2 AND state = 'running' AND attempt = $3",
                    &[&params_json, &id.0, &attempt],
                )
                .await
                .map_err(|e| pg(s, "recording a run's resolved params", e))?;
            Ok(n > 0)
        })
    }

    async fn alert_delivery_list(&mut self, limit: usize) -> Res<Vec<AlertDelivery>> {
        let s = self.shown;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        on!(self, |c| {
            let rows = c
                .query(
                    &format!(
                        "SELECT {DELIVERY_COLUMNS} FROM alert_deliveries ORDER BY id DESC LIMIT $1"
                    ),
                    &[&limit],
                )
                .await
                .map_err(|e| pg(s, "listing alert deliveries", e))?;
            Ok(rows
                .iter()
                .map(|r| {
                    DeliveryRow {
                        id: r.get(0),
                        at_ms: ms_of(r.get::<_, SystemTime>(1)),
                        node: r.get(2),
                        channel: r.get(3),
                        subject: r.get(4),
                        condition: r.get(5),
                        kind: r.get(6),
                        run: r.get(7),
                        outcome: r.get(8),
                        detail: r.get(9),
                    }
                    .into_delivery(s)
                })
                .collect::<StoreResult<Vec<_>>>()?)
        })
    }

    async fn notify_due_sooner(&mut self) -> Res<()> {
        let (s, ch) = (self.shown, self.channel);
        on!(self, |c| notify(c, s, ch).await)
    }
}
