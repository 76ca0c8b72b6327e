//! Health, readiness, metrics, the OpenAPI document, nodes, plugins (and their reload),
//! schedule previews, operator actions and tokens.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use takt_core::store::access::{NewToken, OperatorAction, Role};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{Caller, new_token};
use super::problem::{ApiResult, Problem};
use super::{AppState, P, Q};
use crate::plugins::{PluginVersion, ReloadError, ReloadReport};
use crate::spec::{ScheduleSpec, parse_instant};

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi_json))
        .routes(routes!(nodes))
        .routes(routes!(plugins))
        .routes(routes!(reload_plugins))
        .routes(routes!(schedule_preview))
        .routes(routes!(actions))
        .routes(routes!(alerts))
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(revoke_token))
}

/// The process is alive (no dependency checked).
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "alive", body = Object)))]
async fn healthz() -> Json<Value> {
    Json(json!({"status": "alive", "version": env!("CARGO_PKG_VERSION")}))
}

/// Ready to serve: the database answers and the plugins are loaded.
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "ready", body = Object),
        (status = 503, description = "not ready: the body says which check failed", body = Object)))]
async fn readyz(State(st): State<AppState>) -> Response {
    let database = match st.backend.node_list().await {
        Ok(_) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "error": e.to_string()}),
    };
    let set = st.backend.plugins();
    let plugins = json!({
        "ok": true,
        "loaded": set.plugins().len(),
        "refused": set.refusals().len(),
    });
    let ready = database["ok"] == json!(true);
    let body = json!({"ready": ready, "database": database, "plugins": plugins});
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Prometheus metrics (OpenMetrics text). Needs a token unless `[http] metrics_public`.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String),
              (status = 401, body = Problem)))]
async fn metrics(
    State(st): State<AppState>,
    caller: Result<Caller, Problem>,
) -> ApiResult<Response> {
    if !st.metrics_public {
        caller?;
    }
    st.metrics.refresh(st.backend.snapshot().await);
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.metrics.encode(),
    )
        .into_response())
}

/// This document.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "health", security(()),
    responses((status = 200, description = "the OpenAPI 3.1 document", body = Object)))]
async fn openapi_json(State(st): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        st.openapi.as_str().to_string(),
    )
        .into_response()
}

/// A node of the database, with its heartbeat.
#[derive(Serialize, ToSchema)]
pub(super) struct NodeView {
    id: String,
    instance: String,
    host_name: String,
    pid: u32,
    version: String,
    capacity: usize,
    tags: Vec<String>,
    started_at: Option<String>,
    heartbeat_at: Option<String>,
    /// Seconds since the last heartbeat.
    heartbeat_age_secs: Option<f64>,
    stopped_at: Option<String>,
    running: u64,
}

/// The host nodes registered on this database.
#[utoipa::path(get, path = "/api/v1/nodes", tag = "nodes",
    responses((status = 200, body = Vec<NodeView>), (status = 401, body = Problem)))]
async fn nodes(State(st): State<AppState>, _caller: Caller) -> ApiResult<Json<Vec<NodeView>>> {
    Ok(Json(node_views(&st).await?))
}

/// The nodes with their heartbeat ages: the API's list and the dashboard's.
pub(super) async fn node_views(st: &AppState) -> ApiResult<Vec<NodeView>> {
    let now = Timestamp::now();
    let nodes = st.backend.node_list().await?;
    Ok(nodes
        .into_iter()
        .map(|n| NodeView {
            id: n.info.id.0,
            instance: n.info.instance.to_string(),
            host_name: n.info.host_name,
            pid: n.info.pid,
            version: n.info.version,
            capacity: n.info.capacity,
            tags: n.info.tags,
            started_at: n.started_at.map(|t| t.to_string()),
            heartbeat_age_secs: n
                .heartbeat_at
                .map(|h| now.duration_since(h).as_secs_f64().max(0.0)),
            heartbeat_at: n.heartbeat_at.map(|t| t.to_string()),
            stopped_at: n.stopped_at.map(|t| t.to_string()),
            running: n.running,
        })
        .collect())
}

/// One plugin version (serving, draining or drained).
#[derive(Serialize, ToSchema)]
pub(super) struct VersionView {
    name: String,
    version: String,
    sha256: Option<String>,
    file: String,
    isolated: bool,
    /// serving, draining or drained.
    state: String,
    /// Runs in flight on it.
    runs: usize,
    /// Its worker processes alive.
    workers: usize,
}

impl From<&PluginVersion> for VersionView {
    fn from(v: &PluginVersion) -> VersionView {
        VersionView {
            name: v.name.clone(),
            version: v.version.clone(),
            sha256: v.sha256.clone(),
            file: v.file.display().to_string(),
            isolated: v.isolated,
            state: v.state.name().to_string(),
            runs: v.runs,
            workers: v.workers,
        }
    }
}

/// A handler a serving plugin provides.
#[derive(Serialize, ToSchema)]
struct HandlerView {
    handler_type: String,
    plugin: String,
    description: String,
    default_timeout_secs: Option<u64>,
}

/// A plugin file refused, and why.
#[derive(Serialize, ToSchema)]
struct RefusalView {
    file: String,
    reason: String,
    fix: String,
}

/// Plugins: versions, handlers, refused files.
#[derive(Serialize, ToSchema)]
pub(super) struct PluginsView {
    versions: Vec<VersionView>,
    handlers: Vec<HandlerView>,
    refusals: Vec<RefusalView>,
}

/// The plugin versions (serving, draining, drained), the handlers served, the refused files.
#[utoipa::path(get, path = "/api/v1/plugins", tag = "plugins",
    responses((status = 200, body = PluginsView), (status = 401, body = Problem)))]
async fn plugins(State(st): State<AppState>, _caller: Caller) -> Json<PluginsView> {
    Json(plugins_view(&st))
}

/// The plugin versions, handlers and refusals: the API's and the dashboard's.
pub(super) fn plugins_view(st: &AppState) -> PluginsView {
    let set = st.backend.plugins();
    PluginsView {
        versions: st
            .backend
            .plugin_versions()
            .iter()
            .map(VersionView::from)
            .collect(),
        handlers: set
            .plugins()
            .iter()
            .flat_map(|p| {
                p.handlers.iter().map(|h| HandlerView {
                    handler_type: h.handler_type.clone(),
                    plugin: p.name.clone(),
                    description: h.description.clone(),
                    default_timeout_secs: h.default_timeout.map(|d| d.as_secs()),
                })
            })
            .collect(),
        refusals: set
            .refusals()
            .iter()
            .map(|r| RefusalView {
                file: r.file.display().to_string(),
                reason: r.reason.clone(),
                fix: r.fix.clone(),
            })
            .collect(),
    }
}

/// A refusal of a reload, and the version kept serving.
#[derive(Serialize, ToSchema)]
struct ReloadRefusalView {
    file: String,
    reason: String,
    fix: String,
    kept: Option<VersionView>,
}

/// What a reload did.
#[derive(Serialize, ToSchema)]
pub(super) struct ReloadView {
    loaded: Vec<VersionView>,
    unchanged: Vec<VersionView>,
    retired: Vec<VersionView>,
    refused: Vec<ReloadRefusalView>,
    warnings: Vec<String>,
}

impl From<&ReloadReport> for ReloadView {
    fn from(r: &ReloadReport) -> ReloadView {
        let v = |l: &[PluginVersion]| l.iter().map(VersionView::from).collect();
        ReloadView {
            loaded: v(&r.loaded),
            unchanged: v(&r.unchanged),
            retired: v(&r.retired),
            refused: r
                .refused
                .iter()
                .map(|x| ReloadRefusalView {
                    file: x.refusal.file.display().to_string(),
                    reason: x.refusal.reason.clone(),
                    fix: x.refusal.fix.clone(),
                    kept: x.kept.as_ref().map(VersionView::from),
                })
                .collect(),
            warnings: r.warnings.clone(),
        }
    }
}

/// Reloads the plugin directory: changed files load beside the old versions, new runs go to
/// them, running runs finish on the old ones (draining, then drained); a refused file keeps
/// its old version serving. Operator.
#[utoipa::path(post, path = "/api/v1/plugins/reload", tag = "plugins",
    responses((status = 200, body = ReloadView), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 409, description = "no plugin directory", body = Problem)))]
async fn reload_plugins(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<ReloadView>> {
    caller.require(Role::Operator, "reloading plugins")?;
    let report = st.backend.reload_plugins().await.map_err(|e| match e {
        ReloadError::NoPluginDirectory => Problem::conflict(e.to_string()),
    })?;
    let loaded: Vec<String> = report.loaded.iter().map(PluginVersion::label).collect();
    let detail = format!(
        "{} loaded{}{}, {} retired, {} refused",
        loaded.len(),
        if loaded.is_empty() { "" } else { ": " },
        loaded.join(", "),
        report.retired.len(),
        report.refused.len()
    );
    record(&st, &caller, "plugin-reload", None, None, Some(detail)).await?;
    Ok(Json(ReloadView::from(&report)))
}

/// Records an operator action; the action already happened, so a failure to record it is
/// logged and answered as an error the caller sees (the change stands).
pub(super) async fn record(
    st: &AppState,
    caller: &Caller,
    action: &str,
    job: Option<&str>,
    run: Option<takt_core::run::RunId>,
    detail: Option<String>,
) -> ApiResult<()> {
    let a = OperatorAction {
        id: 0,
        at: Timestamp::now(),
        actor: caller.name.clone(),
        action: action.to_string(),
        job: job.map(str::to_string),
        run,
        detail,
    };
    st.backend.action_insert(&a).await.map_err(|e| {
        tracing::error!(
            "cannot record the operator action {action} by {}: {e}",
            caller.name
        );
        Problem::internal(format!(
            "the {action} was done, but recording it failed: {e}; it is not in the job's history"
        ))
    })
}

/// A schedule to preview.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PreviewRequest {
    /// The schedule as in a job (`cron`, `calendar`, `every`, `at`, `tz`, `dst_gap`, …).
    #[schema(value_type = Object)]
    schedule: ScheduleSpec,
    /// How many occurrences (1–1000, default 10).
    count: Option<usize>,
    /// From this instant (RFC 3339, or a wall-clock time in the schedule's zone; default now).
    after: Option<String>,
}

/// The next occurrences of a schedule with their DST notes (shifted fires, skipped times),
/// as `takt schedule next --json` prints them.
#[utoipa::path(post, path = "/api/v1/schedule/preview", tag = "schedules",
    request_body = PreviewRequest,
    responses((status = 200, body = Object), (status = 400, body = Problem), (status = 401, body = Problem)))]
async fn schedule_preview(_caller: Caller, body: axum::body::Bytes) -> ApiResult<Json<Value>> {
    let req: PreviewRequest = super::jobs::parse_body(&body)?;
    let count = req.count.unwrap_or(10);
    if !(1..=1000).contains(&count) {
        return Err(Problem::invalid(
            "count",
            format!("{count} is not between 1 and 1000"),
        ));
    }
    let schedule = req
        .schedule
        .to_schedule()
        .map_err(|e| Problem::invalid("schedule", e.to_string()))?;
    let after = match &req.after {
        Some(a) => parse_instant(a, schedule.zone()).map_err(|e| Problem::invalid("after", e))?,
        None => Timestamp::now(),
    };
    let occ: Vec<_> = schedule.iter_after(after).take(count).collect();
    Ok(Json(crate::cli::schedule::as_json(&schedule, after, &occ)))
}

/// A recorded operator action.
#[derive(Serialize, ToSchema)]
pub(super) struct ActionView {
    id: i64,
    at: String,
    /// The token's name (`local`: the local administrator of a host without tokens).
    actor: String,
    action: String,
    job: Option<String>,
    run: Option<i64>,
    detail: Option<String>,
}

impl From<OperatorAction> for ActionView {
    fn from(a: OperatorAction) -> ActionView {
        ActionView {
            id: a.id,
            at: a.at.to_string(),
            actor: a.actor,
            action: a.action,
            job: a.job,
            run: a.run.map(|r| r.0),
            detail: a.detail,
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct LimitQuery {
    /// How many (1–1000, default 50).
    pub(super) limit: Option<usize>,
}

pub(super) fn limit_of(limit: Option<usize>, default: usize) -> ApiResult<usize> {
    let n = limit.unwrap_or(default);
    if !(1..=1000).contains(&n) {
        return Err(Problem::invalid(
            "limit",
            format!("{n} is not between 1 and 1000"),
        ));
    }
    Ok(n)
}

/// Every recorded operator action, newest first.
#[utoipa::path(get, path = "/api/v1/actions", tag = "actions", params(LimitQuery),
    responses((status = 200, body = Vec<ActionView>), (status = 400, body = Problem), (status = 401, body = Problem)))]
async fn actions(
    State(st): State<AppState>,
    _caller: Caller,
    Q(q): Q<LimitQuery>,
) -> ApiResult<Json<Vec<ActionView>>> {
    let limit = limit_of(q.limit, 50)?;
    let list = st.backend.action_list(None, limit).await?;
    Ok(Json(list.into_iter().map(ActionView::from).collect()))
}

/// One recorded alert delivery (what `takt alerts` lists).
#[derive(Serialize, ToSchema)]
struct AlertView {
    id: Option<i64>,
    at: String,
    /// The node that delivered (or suppressed) it.
    node: String,
    channel: String,
    /// `job:<name>` or `node:<id>`.
    subject: String,
    /// failed, timed_out, skipped, long_running, node_down, db_outage.
    condition: String,
    /// firing, recovered or digest.
    kind: String,
    run: Option<i64>,
    /// sent, failed or suppressed.
    outcome: String,
    /// The alert's summary, and for a failure or a suppression why.
    detail: String,
}

/// Every recorded alert delivery, newest first: sent, failed with the reason, or suppressed
/// (a duplicate of an open episode, held back by the rate limit, dropped from a full queue).
#[utoipa::path(get, path = "/api/v1/alerts", tag = "alerts", params(LimitQuery),
    responses((status = 200, body = Vec<AlertView>), (status = 400, body = Problem), (status = 401, body = Problem)))]
async fn alerts(
    State(st): State<AppState>,
    _caller: Caller,
    Q(q): Q<LimitQuery>,
) -> ApiResult<Json<Vec<AlertView>>> {
    let limit = limit_of(q.limit, 50)?;
    let list = st.backend.alert_delivery_list(limit).await?;
    Ok(Json(
        list.into_iter()
            .map(|d| AlertView {
                id: d.id,
                at: d.at.to_string(),
                node: d.node,
                channel: d.channel,
                subject: d.key.subject,
                condition: d.key.condition,
                kind: d.kind,
                run: d.run,
                outcome: d.outcome.name().to_string(),
                detail: d.detail,
            })
            .collect(),
    ))
}

/// A token as listed (never the token itself).
#[derive(Serialize, ToSchema)]
struct TokenView {
    name: String,
    role: String,
    created_at: String,
    revoked_at: Option<String>,
}

/// Every token, revoked ones included. Admin.
#[utoipa::path(get, path = "/api/v1/tokens", tag = "tokens",
    responses((status = 200, body = Vec<TokenView>), (status = 401, body = Problem), (status = 403, body = Problem)))]
async fn list_tokens(
    State(st): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<TokenView>>> {
    caller.require(Role::Admin, "listing tokens")?;
    let list = st.backend.token_list().await?;
    Ok(Json(
        list.into_iter()
            .map(|t| TokenView {
                name: t.name,
                role: t.role.name().to_string(),
                created_at: t.created_at.to_string(),
                revoked_at: t.revoked_at.map(|r| r.to_string()),
            })
            .collect(),
    ))
}

/// A token to make.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    /// Unique name, recorded with every action it does.
    name: String,
    /// viewer, operator or admin.
    role: String,
}

/// Makes a token; the answer is the only time it is shown. Admin.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "tokens", request_body = TokenRequest,
    responses((status = 201, body = Object), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 409, body = Problem)))]
async fn create_token(
    State(st): State<AppState>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    caller.require(Role::Admin, "making tokens")?;
    let req: TokenRequest = super::jobs::parse_body(&body)?;
    let role = req
        .role
        .parse::<Role>()
        .map_err(|e| Problem::invalid("role", e))?;
    let (token, sha256) = new_token().map_err(Problem::internal)?;
    let stored = st
        .backend
        .token_insert(&NewToken {
            name: req.name.clone(),
            role,
            sha256,
            created_at: Timestamp::now(),
        })
        .await
        .map_err(|e| Problem::from(e).at("name"))?;
    st.gate.forget();
    record(
        &st,
        &caller,
        "token-create",
        None,
        None,
        Some(format!("{} ({role})", stored.name)),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"name": stored.name, "role": role.name(), "token": token})),
    )
        .into_response())
}

/// Revokes a token (it stays listed; its name stays taken). Admin.
#[utoipa::path(delete, path = "/api/v1/tokens/{name}", tag = "tokens",
    params(("name" = String, Path, description = "the token's name")),
    responses((status = 200, body = Object), (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn revoke_token(
    State(st): State<AppState>,
    caller: Caller,
    P(name): P<String>,
) -> ApiResult<Json<Value>> {
    caller.require(Role::Admin, "revoking tokens")?;
    let t = st.backend.token_revoke(&name, Timestamp::now()).await?;
    st.gate.forget();
    record(&st, &caller, "token-revoke", None, None, Some(name)).await?;
    Ok(Json(
        json!({"name": t.name, "revoked_at": t.revoked_at.map(|r| r.to_string())}),
    ))
}
