//! The workflow's endpoints (issue 16 item 4): why a job runs or not, the audit of a range,
//! and pause / resume of jobs, groups and nodes — each the same function the CLI calls
//! (`takt why`, `takt audit`, `takt job|group|node pause|resume`), answering the JSON its
//! `--json` prints.
//!
//! A pause is written to the database like the command's, so every node obeys it within its
//! next pass (a node's own pause through the store-polled control of its loop); its `by` is
//! the caller's token name, and each pause and resume is recorded as an operator action.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use takt_core::Timestamp;
use takt_core::pause::{Pause, PauseTarget};
use takt_core::run::NodeId;
use takt_core::store::access::Role;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::jobs::{job_name, load, parse_body, view};
use super::problem::{ApiResult, Problem};
use super::system::record;
use super::{AppState, P, Q};
use crate::cli::pause::{group_json, pause_json, resumed_json};
use crate::inspect::InspectError;
use crate::inspect::audit::AuditRequest;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(why))
        .routes(routes!(audit))
        .routes(routes!(pauses))
        .routes(routes!(pause_job))
        .routes(routes!(resume_job))
        .routes(routes!(pause_group))
        .routes(routes!(resume_group))
        .routes(routes!(groups))
        .routes(routes!(set_group))
        .routes(routes!(pause_node))
        .routes(routes!(resume_node))
}

/// A bad question to `why` / `audit` is the caller's: 400 naming `field`.
pub(super) fn inspect_problem(e: InspectError, field: &str) -> Problem {
    match e {
        InspectError::Invalid(text) => Problem::invalid(field, text),
        InspectError::Store(s) => s.into(),
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct WhyQuery {
    /// Ask about this instant instead of the next fire: RFC 3339, or a wall-clock time in the
    /// job's zone (`2026-03-29T02:30`).
    at: Option<String>,
}

/// Why a job will (not) run next, or what happened at `at`: the report `takt why --json`
/// prints (conclusion, schedule, next fire, reasons that block or delay it, evidence; with
/// `at`: that instant's fires, run and attempts).
#[utoipa::path(get, path = "/api/v1/jobs/{name}/why", tag = "workflow",
    params(("name" = String, Path, description = "the job's name"), WhyQuery),
    responses((status = 200, description = "as `takt why --json` prints it", body = Object),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn why(
    State(st): State<AppState>,
    _caller: Caller,
    P(name): P<String>,
    Q(q): Q<WhyQuery>,
) -> ApiResult<Json<Value>> {
    let job = load(&st, &name).await?;
    let at =
        q.at.as_deref()
            .map(|t| crate::inspect::parse_at("at", t))
            .transpose()
            .map_err(|e| Problem::invalid("at", e))?;
    let report = st
        .backend
        .why(&job.name, at, Timestamp::now())
        .await
        .map_err(|e| inspect_problem(e, "at"))?;
    Ok(Json(serde_json::to_value(&report).map_err(|e| {
        Problem::internal(format!("cannot encode the report: {e}"))
    })?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct AuditQuery {
    /// Fire times from (inclusive): RFC 3339, or a date / date-time taken as UTC.
    from: String,
    /// Fire times to (exclusive): same forms.
    to: String,
    /// Only this job (default: every job).
    job: Option<String>,
}

/// Whether every expected fire of `from .. to` ran exactly once: the report `takt audit
/// --json` prints (per job: expected, ran, skipped, gaps with their evidence, duplicates).
/// 200 either way: the report's `gaps` and `duplicates` say whether it is clean.
#[utoipa::path(get, path = "/api/v1/audit", tag = "workflow", params(AuditQuery),
    responses((status = 200, description = "as `takt audit --json` prints it", body = Object),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn audit(
    State(st): State<AppState>,
    _caller: Caller,
    Q(q): Q<AuditQuery>,
) -> ApiResult<Json<Value>> {
    let from =
        crate::inspect::parse_bound("from", &q.from).map_err(|e| Problem::invalid("from", e))?;
    let to = crate::inspect::parse_bound("to", &q.to).map_err(|e| Problem::invalid("to", e))?;
    if from >= to {
        return Err(Problem::invalid(
            "to",
            format!("from {from} is not before to {to}; give a range whose start comes first"),
        ));
    }
    let job = match q.job.as_deref() {
        Some(n) => {
            let key = job_name(n).map_err(|p| p.at("job"))?;
            if st.backend.job_by_name(&key).await?.is_none() {
                return Err(Problem::not_found(format!(
                    "no job named \"{n}\"; GET /api/v1/jobs lists them"
                ))
                .at("job"));
            }
            Some(key)
        }
        None => None,
    };
    let req = AuditRequest {
        job,
        from,
        to,
        now: Timestamp::now(),
    };
    let report = st
        .backend
        .audit(&req)
        .await
        .map_err(|e| inspect_problem(e, "from"))?;
    Ok(Json(serde_json::to_value(&report).map_err(|e| {
        Problem::internal(format!("cannot encode the report: {e}"))
    })?))
}

/// Every pause: jobs' own, then groups' and nodes', with who paused, when and why.
#[utoipa::path(get, path = "/api/v1/pauses", tag = "workflow",
    responses((status = 200, description = "`target` is job, group or node; `name` the job's, group's or node's", body = Vec<Object>),
              (status = 401, body = Problem)))]
async fn pauses(State(st): State<AppState>, _caller: Caller) -> ApiResult<Json<Vec<Value>>> {
    let list = st.backend.pause_list().await?;
    let jobs = st.backend.job_list().await?;
    Ok(Json(
        list.iter()
            .map(|(t, p)| {
                let mut v = pause_json(p);
                let (target, name) = match t {
                    PauseTarget::Job(id) => {
                        v["job_id"] = json!(id.0);
                        let name = jobs
                            .iter()
                            .find(|j| j.id == Some(*id))
                            .map(|j| j.name.to_string());
                        ("job", json!(name))
                    }
                    PauseTarget::Group(g) => ("group", json!(g)),
                    PauseTarget::Node(n) => ("node", json!(n.0)),
                };
                v["target"] = json!(target);
                v["name"] = name;
                v
            })
            .collect(),
    ))
}

/// Why a pause is made (optional; the body may be empty).
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    /// Shown by the job, the group list and the skipped runs' text.
    reason: Option<String>,
}

/// The pause the caller makes now: `by` is its token name.
fn pause_of(caller: &Caller, body: &[u8]) -> ApiResult<Pause> {
    let body: PauseBody = if body.iter().all(u8::is_ascii_whitespace) {
        PauseBody::default()
    } else {
        parse_body(body)?
    };
    Ok(pause_now(caller, body.reason.as_deref()))
}

/// The pause `caller` makes now with `reason` (blank: none).
pub(super) fn pause_now(caller: &Caller, reason: Option<&str>) -> Pause {
    Pause {
        at: Timestamp::now(),
        by: caller.name.clone(),
        reason: reason
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string),
    }
}

/// Pauses a job (operator), distinct from disable: fires that fall due are recorded skipped
/// (reason paused) when it is resumed, per its misfire policy. 409 when already paused.
#[utoipa::path(post, path = "/api/v1/jobs/{name}/pause", tag = "workflow", request_body = PauseBody,
    params(("name" = String, Path, description = "the job's name")),
    responses((status = 200, description = "the job, paused", body = Object), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, body = Problem)))]
async fn pause_job(
    State(st): State<AppState>,
    caller: Caller,
    P(name): P<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    caller.require(Role::Operator, "pausing a job")?;
    let p = pause_of(&caller, &body)?;
    pause_job_as(&st, &caller, &name, p).await?;
    Ok(Json(view(&st, &load(&st, &name).await?).await?))
}

/// Pauses job `name` with `p` (operator) and records it: the API's and the dashboard's pause.
pub(super) async fn pause_job_as(
    st: &AppState,
    caller: &Caller,
    name: &str,
    p: Pause,
) -> ApiResult<()> {
    caller.require(Role::Operator, "pausing a job")?;
    let job = load(st, name).await?;
    let id = job
        .id
        .ok_or_else(|| Problem::internal("a stored job without an id"))?;
    st.backend.pause(&PauseTarget::Job(id), &p).await?;
    record(st, caller, "pause", Some(name), None, p.reason.clone()).await
}

/// Ends a job's pause (operator): its misfire policy decides what of the paused time runs;
/// the rest is recorded skipped (reason paused). 409 when it is not paused.
#[utoipa::path(post, path = "/api/v1/jobs/{name}/resume", tag = "workflow",
    params(("name" = String, Path, description = "the job's name")),
    responses((status = 200, description = "the job, resumed", body = Object), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)))]
async fn resume_job(
    State(st): State<AppState>,
    caller: Caller,
    P(name): P<String>,
) -> ApiResult<Json<Value>> {
    resume_job_as(&st, &caller, &name).await?;
    Ok(Json(view(&st, &load(&st, &name).await?).await?))
}

/// Resumes job `name` (operator) and records it; how many paused fires were recorded
/// skipped. The API's and the dashboard's resume.
pub(super) async fn resume_job_as(st: &AppState, caller: &Caller, name: &str) -> ApiResult<u64> {
    caller.require(Role::Operator, "resuming a job")?;
    let job = load(st, name).await?;
    let id = job
        .id
        .ok_or_else(|| Problem::internal("a stored job without an id"))?;
    let r = st
        .backend
        .resume(&PauseTarget::Job(id), Timestamp::now())
        .await?;
    record(
        st,
        caller,
        "resume",
        Some(name),
        None,
        Some(format!("{} paused fire(s) recorded skipped", r.skipped)),
    )
    .await?;
    Ok(r.skipped)
}

/// Pauses every job of a group, present and future (operator). 404 for a group no job is in,
/// 409 when already paused.
#[utoipa::path(post, path = "/api/v1/groups/{group}/pause", tag = "workflow", request_body = PauseBody,
    params(("group" = String, Path, description = "the group's name (the `group` of its jobs)")),
    responses((status = 200, description = "as `takt group pause --json` prints it", body = Object),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem), (status = 409, body = Problem)))]
async fn pause_group(
    State(st): State<AppState>,
    caller: Caller,
    P(group): P<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    caller.require(Role::Operator, "pausing a group")?;
    let p = pause_of(&caller, &body)?;
    let held = st
        .backend
        .pause(&PauseTarget::Group(group.clone()), &p)
        .await?;
    record(
        &st,
        &caller,
        "group-pause",
        None,
        None,
        Some(format!("group {group}: {} job(s) held", held.len())),
    )
    .await?;
    let mut v = pause_json(&p);
    v["group"] = json!(group);
    v["jobs"] = json!(held.iter().map(|j| j.0).collect::<Vec<_>>());
    Ok(Json(v))
}

/// Ends a group's pause and its failure hold (operator); members paused on their own stay
/// paused. 404 when the group is neither paused nor held.
#[utoipa::path(post, path = "/api/v1/groups/{group}/resume", tag = "workflow",
    params(("group" = String, Path, description = "the group's name")),
    responses((status = 200, description = "as `takt group resume --json` prints it", body = Object),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn resume_group(
    State(st): State<AppState>,
    caller: Caller,
    P(group): P<String>,
) -> ApiResult<Json<Value>> {
    caller.require(Role::Operator, "resuming a group")?;
    let r = st
        .backend
        .resume(&PauseTarget::Group(group.clone()), Timestamp::now())
        .await?;
    record(
        &st,
        &caller,
        "group-resume",
        None,
        None,
        Some(format!(
            "group {group}: {} job(s) released, {} paused fire(s) recorded skipped{}",
            r.jobs.len(),
            r.skipped,
            r.released
                .as_ref()
                .map_or_else(String::new, |h| format!("; failure hold released ({h})"))
        )),
    )
    .await?;
    Ok(Json(resumed_json(&group, &r)))
}

/// Every group (named by a job or defined): members, `max_running` and running runs, pause,
/// failure hold (the member whose run did not succeed, and how to release it).
#[utoipa::path(get, path = "/api/v1/groups", tag = "workflow",
    responses((status = 200, description = "as `takt group list --json` prints it", body = Vec<Object>),
              (status = 401, body = Problem)))]
async fn groups(State(st): State<AppState>, _caller: Caller) -> ApiResult<Json<Vec<Value>>> {
    let list = st.backend.group_list(Timestamp::now()).await?;
    Ok(Json(list.iter().map(group_json).collect()))
}

/// A group's definition: `max_running` (at least 1; `null` for no limit).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct GroupBody {
    /// The most runs of the group's jobs running at once, on all nodes; `null`: no limit.
    max_running: Option<i64>,
}

/// Sets a group's `max_running` (operator), as `takt group set`. 400 for a limit below 1,
/// 404 for a group no job is in.
#[utoipa::path(put, path = "/api/v1/groups/{group}", tag = "workflow", request_body = GroupBody,
    params(("group" = String, Path, description = "the group's name (the `group` of its jobs)")),
    responses((status = 200, description = "as `takt group set --json` prints it", body = Object),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn set_group(
    State(st): State<AppState>,
    caller: Caller,
    P(group): P<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    caller.require(Role::Operator, "setting a group")?;
    let body: GroupBody = parse_body(&body)?;
    let max = body
        .max_running
        .map(|n| takt_core::group::check_max_running(&group, n))
        .transpose()
        .map_err(|e| Problem::invalid("max_running", e))?;
    st.backend.group_set(&group, max).await?;
    record(
        &st,
        &caller,
        "group-set",
        None,
        None,
        Some(match max {
            Some(n) => format!("group {group}: max_running {n}"),
            None => format!("group {group}: no limit"),
        }),
    )
    .await?;
    let g = st.backend.group_status(&group, Timestamp::now()).await?;
    Ok(Json(group_json(&g)))
}

/// Stops a node from claiming (operator): its running runs go on, other nodes keep running
/// the jobs; the node's loop reads the pause from the store within about a second. 404 for a
/// node never registered, 409 when already paused.
#[utoipa::path(post, path = "/api/v1/nodes/{id}/pause", tag = "workflow", request_body = PauseBody,
    params(("id" = String, Path, description = "the node id (GET /api/v1/nodes lists them)")),
    responses((status = 200, description = "as `takt node pause --json` prints it", body = Object),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem), (status = 409, body = Problem)))]
async fn pause_node(
    State(st): State<AppState>,
    caller: Caller,
    P(id): P<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    caller.require(Role::Operator, "pausing a node")?;
    let p = pause_of(&caller, &body)?;
    st.backend
        .pause(&PauseTarget::Node(NodeId(id.clone())), &p)
        .await?;
    record(
        &st,
        &caller,
        "node-pause",
        None,
        None,
        Some(match &p.reason {
            Some(r) => format!("node {id}: {r}"),
            None => format!("node {id}"),
        }),
    )
    .await?;
    let mut v = pause_json(&p);
    v["node"] = json!(id);
    Ok(Json(v))
}

/// Lets a paused node claim again (operator). 404 when it is not paused.
#[utoipa::path(post, path = "/api/v1/nodes/{id}/resume", tag = "workflow",
    params(("id" = String, Path, description = "the node id")),
    responses((status = 200, description = "as `takt node resume --json` prints it", body = Object),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn resume_node(
    State(st): State<AppState>,
    caller: Caller,
    P(id): P<String>,
) -> ApiResult<Json<Value>> {
    caller.require(Role::Operator, "resuming a node")?;
    let r = st
        .backend
        .resume(&PauseTarget::Node(NodeId(id.clone())), Timestamp::now())
        .await?;
    record(
        &st,
        &caller,
        "node-resume",
        None,
        None,
        Some(format!("node {id}")),
    )
    .await?;
    Ok(Json(resumed_json(&id, &r)))
}
