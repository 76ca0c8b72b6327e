//! The SQL Server forms of the shared rows (`store/rows.rs`): parameters for the statements
//! (`@P1`, `@P2` … through [`Params`]), `OUTPUT` columns, and the reads every primitive shares.

use takt_core::job::{JobDef, JobId};
use takt_core::run::{Run, RunId, RunState};
use takt_core::store::{StoreError, StoreResult};
use tiberius::Row;

use super::conn::{Cells, Fail, Params, Pooled, text};
use takt_core::store::access::ApiToken;

use crate::store::rows::{JOB_COLUMNS, JobRow, RUN_COLUMNS, RunRow, TokenRow};

/// `cols` prefixed for an `OUTPUT` clause (`INSERTED.id, INSERTED.name, …`).
pub(super) fn inserted(cols: &str) -> String {
    cols.split(", ")
        .map(|c| format!("INSERTED.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The node-tag filter on a job column (`node_tag IS NULL OR node_tag IN (…)`).
pub(super) fn tag_filter(p: &mut Params, column: &str, tags: &[String]) -> String {
    if tags.is_empty() {
        format!("{column} IS NULL")
    } else {
        format!("({column} IS NULL OR {column} IN ({}))", p.list(tags))
    }
}

pub(super) fn job_of(r: &Row, shown: &str) -> StoreResult<JobDef> {
    let c = Cells {
        row: r,
        shown,
        what: "a job row",
    };
    JobRow {
        id: c.int_req(0)?,
        name: c.text_req(1)?,
        group: c.text(2)?,
        handler_type: c.text_req(3)?,
        params_json: c.text_req(4)?,
        schedule_json: c.text(5)?,
        enabled: c.bool(6)?,
        effective_from: c.instant(7)?,
        expires_at: c.instant(8)?,
        timeout_ms: c.int(9)?,
        retry_max: c.int_req(10)?,
        retry_backoff: c.text_req(11)?,
        retry_timeouts: c.bool(12)?,
        misfire: c.text_req(13)?,
        overlap: c.text_req(14)?,
        priority: c.int_req(15)?,
        dependencies: c.text_req(16)?,
        node_tag: c.text(17)?,
        application: c.text(18)?,
        owner: c.text(19)?,
        description: c.text(20)?,
        isolation: c.text_req(21)?,
        next_fire: c.instant(22)?,
        version: c.int_req(23)?,
        updated_at: c.instant_req(24)?,
        on_success: c.text_req(25)?,
        on_failure: c.text_req(26)?,
        recurring: false,
    }
    .into_job(shown)
}

pub(super) fn run_of(r: &Row, shown: &str) -> StoreResult<Run> {
    let c = Cells {
        row: r,
        shown,
        what: "a run row",
    };
    RunRow {
        id: c.int_req(0)?,
        job_id: c.int_req(1)?,
        fire_time: c.instant_req(2)?,
        state: c.text_req(3)?,
        attempt: c.int_req(4)?,
        created_at: c.instant_req(5)?,
        started_at: c.instant(6)?,
        finished_at: c.instant(7)?,
        node_id: c.text(8)?,
        lease_expires_at: c.instant(9)?,
        error: c.text(10)?,
        result_json: c.text(11)?,
        elapsed_ms: c.int(12)?,
        progress_done: c.int(13)?,
        progress_total: c.int(14)?,
        progress_message: c.text(15)?,
        skip_reason: c.text(16)?,
        next_attempt_at: c.instant(17)?,
        node_instance: c.text(18)?,
        plugin: c.text(19)?,
        plugin_version: c.text(20)?,
        plugin_sha256: c.text(21)?,
        trigger: c.text(22)?,
        parent_run_id: c.int(23)?,
        params_resolved: c.text(24)?,
    }
    .into_run(shown)
}

pub(super) fn i32_of(v: i64, what: &str) -> StoreResult<i32> {
    i32::try_from(v).map_err(|_| {
        StoreError::invalid(format!(
            "{what} {v} is too large for the database (at most {}); use a smaller value",
            i32::MAX
        ))
    })
}

/// Adds a job's columns after `id` (in `JOB_WRITE_COLUMNS` order) to `p`; their placeholders.
pub(super) fn job_params(p: &mut Params, r: JobRow) -> StoreResult<Vec<String>> {
    Ok(vec![
        p.add(r.name),
        p.add(text(r.group)),
        p.add(r.handler_type),
        p.add(r.params_json),
        p.add(text(r.schedule_json)),
        p.add(r.enabled),
        p.at(r.effective_from),
        p.at(r.expires_at),
        p.add(r.timeout_ms),
        p.add(i32_of(r.retry_max, "retry count")?),
        p.add(r.retry_backoff),
        p.add(r.retry_timeouts),
        p.add(r.misfire),
        p.add(r.overlap),
        p.add(i32_of(r.priority, "priority")?),
        p.add(r.dependencies),
        p.add(text(r.node_tag)),
        p.add(text(r.application)),
        p.add(text(r.owner)),
        p.add(text(r.description)),
        p.add(r.isolation),
        p.at(r.next_fire),
        p.add(r.version),
        p.at(Some(r.updated_at)),
        p.add(r.on_success),
        p.add(r.on_failure),
        p.add(r.recurring),
    ])
}

/// Adds a run's mutable columns (from `state`, in `RUN_COLUMNS` order) to `p`.
pub(super) fn run_params(p: &mut Params, r: RunRow) -> StoreResult<Vec<String>> {
    Ok(vec![
        p.add(r.state),
        p.add(i32_of(r.attempt, "attempt")?),
        p.at(Some(r.created_at)),
        p.at(r.started_at),
        p.at(r.finished_at),
        p.add(text(r.node_id)),
        p.at(r.lease_expires_at),
        p.add(text(r.error)),
        p.add(text(r.result_json)),
        p.add(r.elapsed_ms),
        p.add(r.progress_done),
        p.add(r.progress_total),
        p.add(text(r.progress_message)),
        p.add(text(r.skip_reason)),
        p.at(r.next_attempt_at),
        p.add(text(r.node_instance)),
        p.add(text(r.plugin)),
        p.add(text(r.plugin_version)),
        p.add(text(r.plugin_sha256)),
        p.add(text(r.trigger)),
        p.add(r.parent_run_id),
        p.add(text(r.params_resolved)),
    ])
}

/// Inserts `run` (with `token`) unless its (job, fire time) key is taken; the stored run, or
/// `None` when the key was taken.
pub(super) async fn insert_run(
    c: &mut Pooled,
    shown: &str,
    run: &Run,
    token: i64,
) -> Result<Option<Run>, Fail> {
    let r = RunRow::of(run)?;
    let mut p = c.params();
    let job = p.add(r.job_id);
    let fire = p.at(Some(r.fire_time));
    let mut values = vec![job.clone(), fire.clone()];
    values.extend(run_params(&mut p, r)?);
    values.push(p.add(token));
    let cols = RUN_COLUMNS.trim_start_matches("id, ");
    let sql = format!(
        "INSERT INTO runs ({cols}, claim_token) OUTPUT {} SELECT {} \
         WHERE NOT EXISTS (SELECT 1 FROM runs WITH (UPDLOCK, HOLDLOCK) \
                           WHERE job_id = {job} AND fire_time = {fire})",
        inserted(RUN_COLUMNS),
        values.join(", ")
    );
    let row = c.row("inserting a run", &sql, &p).await?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

pub(super) async fn get_job(
    c: &mut Pooled,
    shown: &str,
    id: JobId,
) -> Result<Option<JobDef>, Fail> {
    let mut p = c.params();
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = {}", p.add(id.0));
    let row = c.row("reading a job", &sql, &p).await?;
    Ok(row.map(|r| job_of(&r, shown)).transpose()?)
}

pub(super) async fn get_run(c: &mut Pooled, shown: &str, id: RunId) -> Result<Option<Run>, Fail> {
    let mut p = c.params();
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = {}", p.add(id.0));
    let row = c.row("reading a run", &sql, &p).await?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

/// Writes every mutable column of `run` if the stored run is still in `state` with `attempt`
/// (and sets its claim token); the stored run, or `None` when it is not.
pub(super) async fn update_run_if(
    c: &mut Pooled,
    shown: &str,
    run: &Run,
    id: RunId,
    (state, attempt): (RunState, u32),
    token: i64,
) -> Result<Option<Run>, Fail> {
    let mut p = c.params();
    let values = run_params(&mut p, RunRow::of(run)?)?;
    let sets = RUN_COLUMNS
        .split(", ")
        .skip(3)
        .zip(values)
        .map(|(col, v)| format!("{col} = {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "UPDATE runs SET {sets}, claim_token = {} OUTPUT {} \
         WHERE id = {} AND state = {} AND attempt = {}",
        p.add(token),
        inserted(RUN_COLUMNS),
        p.add(id.0),
        p.add(state.name()),
        p.add(i64::from(attempt)),
    );
    let row = c.row("updating a run", &sql, &p).await?;
    Ok(row.map(|r| run_of(&r, shown)).transpose()?)
}

/// An `api_tokens` row (in `TOKEN_COLUMNS` order) as a token.
pub(super) fn token_of(r: &Row, shown: &str) -> StoreResult<ApiToken> {
    let c = Cells {
        row: r,
        shown,
        what: "a token",
    };
    TokenRow {
        id: c.int_req(0)?,
        name: c.text_req(1)?,
        role: c.text_req(2)?,
        sha256: c.text_req(3)?,
        created_at: c.instant_req(4)?,
        revoked_at: c.instant(5)?,
    }
    .into_token(shown)
}
