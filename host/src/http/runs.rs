//! `/api/v1/runs`: runs newest first, by job, state and fire-time range, paged by a cursor
//! that stays stable while runs are inserted (see [`takt_core::store::RunFilter`]); one run;
//! cancelling a running run; its log, paged and live over Server-Sent Events.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use takt_core::job::JobId;
use takt_core::run::{Run, RunId, RunState};
use takt_core::store::access::Role;
use takt_core::store::{CancelOutcome, LogLine, RunCursor, RunFilter};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::mask::mask_text;
use super::problem::{ApiResult, Problem};
use super::system::record;
use super::{AppState, P, Q};

/// How often a live log stream looks for new lines (the run may be on another node, whose
/// lines arrive through the database).
const STREAM_POLL: Duration = Duration::from_millis(250);

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_runs))
        .routes(routes!(get_run))
        .routes(routes!(cancel_run))
        .routes(routes!(run_logs))
        .routes(routes!(stream_logs))
}

/// A run as the API shows it (secret-looking result values masked).
#[derive(Serialize, ToSchema)]
pub(super) struct RunView {
    id: i64,
    pub(super) job: Option<String>,
    job_id: i64,
    fire_time: String,
    /// pending, running, succeeded, failed, timed_out, cancelled, skipped.
    state: String,
    attempt: u32,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    node: Option<String>,
    node_instance: Option<String>,
    lease_expires_at: Option<String>,
    /// Whether the run (state pending) waits for its job's dependencies.
    waiting: bool,
    /// What it waits for ("waiting for extract (its run of … is running); gives up at …").
    waiting_for: Option<String>,
    error: Option<String>,
    #[schema(value_type = Object)]
    result: Option<Value>,
    elapsed_ms: Option<u64>,
    #[schema(value_type = Object)]
    progress: Option<Value>,
    skip_reason: Option<String>,
    next_attempt_at: Option<String>,
    plugin: Option<String>,
    plugin_version: Option<String>,
    plugin_sha256: Option<String>,
    /// How the run came to be: schedule, catch_up, manual, backfill, continuation; null for
    /// runs recorded before takt kept it.
    trigger: Option<String>,
    /// For a continuation: the run whose final state created it.
    parent_run_id: Option<i64>,
    /// The params with their templates resolved for the latest attempt (secret-looking
    /// values masked); null when the job's params hold no template.
    #[schema(value_type = Object)]
    params_resolved: Option<Value>,
    /// The ids of the continuation runs this run's final state created (single-run reads
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    continuations: Option<Vec<i64>>,
    /// Every attempt (node, life, start, end, outcome, error), oldest first: on `GET
    /// /api/v1/runs/{id}` only, so a page of runs stays one query.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub(super) attempts: Option<Vec<crate::inspect::AttemptView>>,
}

pub(super) fn view(run: &Run, job: Option<String>) -> RunView {
    let ts = |t: Option<Timestamp>| t.map(|t| t.to_string());
    RunView {
        id: run.id.map_or(0, |r| r.0),
        job,
        job_id: run.job_id.0,
        fire_time: run.fire_time.to_string(),
        state: run.state.name().to_string(),
        attempt: run.attempt,
        created_at: run.created_at.to_string(),
        started_at: ts(run.started_at),
        finished_at: ts(run.finished_at),
        node: run.node_id.as_ref().map(|n| n.0.clone()),
        node_instance: run.node_instance.as_ref().map(ToString::to_string),
        lease_expires_at: ts(run.lease_expires_at),
        waiting: run.is_waiting(),
        waiting_for: run.waiting_for().map(str::to_string),
        error: if run.is_waiting() {
            None
        } else {
            run.error.clone()
        },
        result: run.result_json.as_deref().map(mask_text),
        elapsed_ms: run
            .elapsed
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        progress: run
            .progress
            .as_ref()
            .map(|p| json!({"done": p.done, "total": p.total, "message": p.message})),
        skip_reason: run.skip_reason.map(|r| r.name().to_string()),
        next_attempt_at: ts(run.next_attempt_at),
        plugin: run.plugin.as_ref().map(|p| p.name.clone()),
        plugin_version: run.plugin.as_ref().map(|p| p.version.clone()),
        plugin_sha256: run.plugin.as_ref().and_then(|p| p.sha256.clone()),
        trigger: run.trigger.map(|t| t.name().to_string()),
        parent_run_id: run.parent_run_id.map(|p| p.0),
        params_resolved: run.params_resolved.as_deref().map(mask_text),
        continuations: None,
        attempts: None,
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct RunQuery {
    /// Only this job's runs (by name).
    pub(super) job: Option<String>,
    /// Only runs in this state.
    pub(super) state: Option<String>,
    /// Only runs whose fire time is at or after this instant (RFC 3339).
    pub(super) from: Option<String>,
    /// Only runs whose fire time is before this instant (RFC 3339).
    pub(super) to: Option<String>,
    /// The `next_cursor` of the previous page.
    pub(super) cursor: Option<String>,
    /// Runs per page (1–1000, default 100).
    pub(super) limit: Option<usize>,
}

/// A page of runs.
#[derive(Serialize, ToSchema)]
pub(super) struct RunPage {
    pub(super) items: Vec<RunView>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub(super) next_cursor: Option<String>,
}

fn instant(field: &str, text: &str) -> ApiResult<Timestamp> {
    text.parse::<Timestamp>().map_err(|e| {
        Problem::invalid(
            field,
            format!("\"{text}\" is not an RFC 3339 instant ({e}); write e.g. 2026-12-01T06:00:00Z"),
        )
    })
}

/// A cursor: [`RunCursor`]'s text (opaque to clients; `takt runs --before` takes it too).
fn cursor_text(c: RunCursor) -> String {
    c.to_string()
}

fn cursor_of(text: &str) -> ApiResult<RunCursor> {
    RunCursor::parse(text).ok_or_else(|| {
        Problem::invalid(
            "cursor",
            format!("\"{text}\" is not a cursor of this api; pass next_cursor as it came"),
        )
    })
}

fn state_of(text: &str) -> ApiResult<RunState> {
    RunState::ALL
        .into_iter()
        .find(|s| s.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = RunState::ALL.iter().map(|s| s.name()).collect();
            Problem::invalid(
                "state",
                format!("unknown state \"{text}\"; use one of {}", names.join(", ")),
            )
        })
}

/// The names of the jobs of `runs`: one read of the page's distinct jobs (at most the page's
/// limit; one statement on a server store, B12), never a read of every job, so a page costs
/// the same with a thousand jobs or a million (the scale bench). A run whose job is gone has
/// no name.
pub(super) async fn job_names(
    st: &AppState,
    runs: impl IntoIterator<Item = &Run>,
) -> ApiResult<HashMap<JobId, String>> {
    let mut ids: Vec<JobId> = runs.into_iter().map(|r| r.job_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let jobs = st.backend.jobs_get(&ids).await?;
    Ok(jobs
        .into_iter()
        .filter_map(|j| Some((j.id?, j.name.to_string())))
        .collect())
}

/// Runs, newest fire time first, filtered by job, state and fire-time range, paged by cursor.
#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", params(RunQuery),
    responses((status = 200, body = RunPage), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 404, description = "no such job", body = Problem)))]
async fn list_runs(
    State(st): State<AppState>,
    _caller: Caller,
    Q(q): Q<RunQuery>,
) -> ApiResult<Json<RunPage>> {
    Ok(Json(run_page(&st, &q).await?))
}

/// The page of runs `q` asks for: what `GET /api/v1/runs` answers and the dashboard's runs
/// page shows.
pub(super) async fn run_page(st: &AppState, q: &RunQuery) -> ApiResult<RunPage> {
    let limit = super::system::limit_of(q.limit, 100)?;
    let mut filter = RunFilter {
        limit,
        ..RunFilter::default()
    };
    if let Some(name) = &q.job {
        let job = super::jobs::load(st, name).await.map_err(|p| p.at("job"))?;
        filter.job = job.id;
    }
    if let Some(s) = &q.state {
        filter.state = Some(state_of(s)?);
    }
    if let Some(f) = &q.from {
        filter.fire_from = Some(instant("from", f)?);
    }
    if let Some(t) = &q.to {
        filter.fire_to = Some(instant("to", t)?);
    }
    if let Some(c) = &q.cursor {
        filter.before = Some(cursor_of(c)?);
    }
    let runs = st.backend.run_list(&filter).await?;
    let names = job_names(st, &runs).await?;
    let next_cursor = if runs.len() == limit {
        runs.last().and_then(RunCursor::of).map(cursor_text)
    } else {
        None
    };
    Ok(RunPage {
        items: runs
            .iter()
            .map(|r| view(r, names.get(&r.job_id).cloned()))
            .collect(),
        next_cursor,
    })
}

pub(super) async fn load_run(st: &AppState, id: i64) -> ApiResult<Run> {
    st.backend
        .run_get(RunId(id))
        .await?
        .ok_or_else(|| Problem::not_found(format!("no run {id}; GET /api/v1/runs lists them")))
}

/// One run.
#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs",
    params(("id" = i64, Path, description = "the run's id")),
    responses((status = 200, body = RunView), (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn get_run(
    State(st): State<AppState>,
    _caller: Caller,
    P(id): P<i64>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(run_with_attempts(&st, id).await?))
}

/// Run `id` with its job's name and its attempts: the API's `GET /api/v1/runs/{id}` and the
/// dashboard's run page.
pub(super) async fn run_with_attempts(st: &AppState, id: i64) -> ApiResult<RunView> {
    let run = load_run(st, id).await?;
    let job = st
        .backend
        .job_get(run.job_id)
        .await?
        .map(|j| j.name.to_string());
    let children = st.backend.run_children(RunId(id)).await?;
    let attempts = st.backend.run_attempts(RunId(id)).await?;
    let mut v = view(&run, job);
    v.continuations = Some(children.iter().filter_map(|c| c.id.map(|i| i.0)).collect());
    v.attempts = Some(
        attempts
            .iter()
            .map(crate::inspect::AttemptView::from)
            .collect(),
    );
    Ok(v)
}

/// Why a cancel is asked for.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    /// Written into the run's log with the caller's name.
    reason: Option<String>,
}

/// Cancels a run on any node (operator), through the database as `takt cancel` does: a
/// pending run (queued, or waiting for a retry) is cancelled at once (200); a running one
/// gets a request that the node running it obeys within about a second (202). When this
/// node runs it, it is also told at once, so the stop does not wait for the poll.
#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = i64, Path, description = "the run's id")),
    request_body(content = CancelBody, description = "optional"),
    responses((status = 200, description = "it was pending and is now cancelled", body = Object),
              (status = 202, description = "asked to stop; the node running it ends it cancelled once the plugin returns or the grace passes", body = Object),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, body = Problem)))]
async fn cancel_run(
    State(st): State<AppState>,
    caller: Caller,
    P(id): P<i64>,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    caller.require(Role::Operator, "cancelling a run")?;
    let body: CancelBody = if body.is_empty() {
        CancelBody::default()
    } else {
        super::jobs::parse_body(&body)?
    };
    let answer = cancel(&st, &caller, id, body.reason).await?;
    let status = if answer["cancelling"] == json!(true) {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(answer)).into_response())
}

/// Cancels run `id` for `caller` (operator) and records it: the API's and the dashboard's
/// cancel. The answer says whether it was cancelled at once or asked to stop
/// (`cancelling`).
pub(super) async fn cancel(
    st: &AppState,
    caller: &Caller,
    id: i64,
    reason: Option<String>,
) -> ApiResult<Value> {
    caller.require(Role::Operator, "cancelling a run")?;
    let run = load_run(st, id).await?;
    let by = caller.name.to_string();
    let outcome = st
        .backend
        .run_cancel(RunId(id), &by, Timestamp::now())
        .await?;
    let answer = match outcome {
        CancelOutcome::Cancelled(_) => {
            json!({"run": id, "cancel": "cancelled", "cancelling": false})
        }
        CancelOutcome::Requested { node, request } => {
            let why = format!(
                "by {by}{}",
                reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
            // Best effort: the request on record is what every node obeys.
            let _ = st.backend.cancel_run(RunId(id), &why).await;
            json!({
                "run": id,
                "cancel": "requested",
                "cancelling": true,
                "node": node.map(|n| n.0),
                "requested_by": request.by,
                "requested_at": request.at.to_string(),
            })
        }
    };
    let job = st
        .backend
        .job_get(run.job_id)
        .await?
        .map(|j| j.name.to_string());
    record(
        st,
        caller,
        "cancel",
        job.as_deref(),
        Some(RunId(id)),
        reason,
    )
    .await?;
    Ok(answer)
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct LogQuery {
    /// Lines after this sequence number (the `next_after` of the previous page).
    after: Option<u64>,
    /// Lines per page (1–1000, default 500).
    limit: Option<usize>,
}

/// A log line.
#[derive(Serialize, ToSchema)]
struct LineView {
    seq: u64,
    at: String,
    level: String,
    message: String,
}

fn line_view(seq: u64, l: &LogLine) -> LineView {
    LineView {
        seq,
        at: l.at.to_string(),
        level: l.level.name().to_string(),
        message: l.message.clone(),
    }
}

/// A page of a run's log.
#[derive(Serialize, ToSchema)]
struct LogPage {
    lines: Vec<LineView>,
    /// Pass as `after` for the next page (the last line's seq; `after` again when empty).
    next_after: Option<u64>,
    /// Whether the run is final (no more lines will come).
    done: bool,
}

/// A page of a run's log, oldest first.
#[utoipa::path(get, path = "/api/v1/runs/{id}/logs", tag = "runs",
    params(("id" = i64, Path, description = "the run's id"), LogQuery),
    responses((status = 200, body = LogPage), (status = 400, body = Problem), (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn run_logs(
    State(st): State<AppState>,
    _caller: Caller,
    P(id): P<i64>,
    Q(q): Q<LogQuery>,
) -> ApiResult<Json<LogPage>> {
    let limit = super::system::limit_of(q.limit.or(Some(500)), 500)?;
    let run = load_run(&st, id).await?;
    let lines = st.backend.log_list(RunId(id), q.after, limit).await?;
    Ok(Json(LogPage {
        next_after: lines.last().map(|(s, _)| *s).or(q.after),
        lines: lines.iter().map(|(s, l)| line_view(*s, l)).collect(),
        done: run.state.is_final(),
    }))
}

/// The run's log live, as Server-Sent Events: every line as a `log` event (`id` = its seq,
/// so a reconnecting client's `Last-Event-ID` resumes after it), then one `end` event with
/// the final state once the run is final and its last line sent.
#[utoipa::path(get, path = "/api/v1/runs/{id}/logs/stream", tag = "runs",
    params(("id" = i64, Path, description = "the run's id"),
           ("after" = Option<u64>, Query, description = "start after this seq"),
           ("Last-Event-ID" = Option<String>, Header, description = "resume after this seq")),
    responses((status = 200, description = "text/event-stream of `log` and `end` events", content_type = "text/event-stream", body = String),
              (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn stream_logs(
    State(st): State<AppState>,
    _caller: Caller,
    P(id): P<i64>,
    Q(q): Q<LogQuery>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    load_run(&st, id).await?;
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    Ok(log_stream(st, RunId(id), resume.or(q.after)))
}

/// The live log of `run` after line `after` as Server-Sent Events (`log` events, then one
/// `end`): what the API's stream and the dashboard's log tail both serve.
pub(super) fn log_stream(
    st: AppState,
    run: RunId,
    after: Option<u64>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    struct Tail {
        st: AppState,
        run: RunId,
        after: Option<u64>,
        buffered: std::collections::VecDeque<Event>,
        ended: bool,
    }
    let tail = Tail {
        st,
        run,
        after,
        buffered: Default::default(),
        ended: false,
    };
    let events = stream::unfold(tail, |mut t| async move {
        loop {
            if let Some(e) = t.buffered.pop_front() {
                return Some((Ok(e), t));
            }
            if t.ended {
                return None;
            }
            // The state first, then the lines: a run that is final now has written its last
            // line already, so the lines read next are all there will be.
            let state = match t.st.backend.run_get(t.run).await {
                Ok(Some(r)) => Some(r.state),
                Ok(None) => None,
                Err(e) => {
                    t.buffered
                        .push_back(Event::default().event("error").data(e.to_string()));
                    tokio::time::sleep(STREAM_POLL).await;
                    continue;
                }
            };
            match t.st.backend.log_list(t.run, t.after, 500).await {
                Ok(lines) => {
                    for (seq, l) in &lines {
                        let data = serde_json::to_string(&line_view(*seq, l)).unwrap_or_default();
                        t.buffered.push_back(
                            Event::default().event("log").id(seq.to_string()).data(data),
                        );
                        t.after = Some(*seq);
                    }
                    let more = lines.len() == 500;
                    match state {
                        None => {
                            t.buffered.push_back(
                                Event::default()
                                    .event("end")
                                    .data(json!({"state": "deleted"}).to_string()),
                            );
                            t.ended = true;
                        }
                        Some(s) if s.is_final() && !more => {
                            t.buffered.push_back(
                                Event::default()
                                    .event("end")
                                    .data(json!({"state": s.name()}).to_string()),
                            );
                            t.ended = true;
                        }
                        _ if t.buffered.is_empty() => tokio::time::sleep(STREAM_POLL).await,
                        _ => {}
                    }
                }
                Err(e) => {
                    t.buffered
                        .push_back(Event::default().event("error").data(e.to_string()));
                    tokio::time::sleep(STREAM_POLL).await;
                }
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
