//! `/api/v1/jobs`: jobs by name — list, read, create, replace (with `If-Match` on the job's
//! version), delete, trigger, enable, disable, and their operator actions.
//!
//! A job reads as `takt job show --json` prints it (the CLI's own function), with secret
//! params masked; a job is written in that same shape (read-only fields such as `id`,
//! `version` and `next_fire` are accepted and ignored), so what was read can be edited and
//! sent back. Jobs declared in takt.toml are refused for edits and deletion (409): `takt run`
//! puts the file's definition back at its next start.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::{Value, json};
use takt_core::job::{Isolation, JobDef, JobName, Priority};
use takt_core::policy::{Backoff, MisfirePolicy, OverlapPolicy, RetryPolicy};
use takt_core::store::access::Role;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::mask::{mask, unmask};
use super::problem::{ApiResult, Problem};
use super::system::{ActionView, LimitQuery, limit_of, record};
use super::{AppState, P, Q};
use crate::config::CONFIG_APPLICATION;
use crate::spec::ScheduleSpec;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_jobs, create_job))
        .routes(routes!(get_job, replace_job, delete_job))
        .routes(routes!(trigger_job))
        .routes(routes!(enable_job))
        .routes(routes!(disable_job))
        .routes(routes!(job_actions))
}

/// Parses a JSON body, naming the field at fault (`params.url`, `retries`).
pub(super) fn parse_body<T: DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let field = if path == "." { String::new() } else { path };
        let p = Problem::invalid(field.clone(), format!("the body: {inner}"));
        if field.is_empty() {
            Problem { field: None, ..p }
        } else {
            p
        }
    })
}

/// The job as the API shows it: the CLI's JSON (its state, pause included) with masked params.
pub(super) async fn view(st: &AppState, job: &JobDef) -> ApiResult<Value> {
    let paused = match job.id {
        Some(id) => st.backend.job_paused(id).await?,
        None => None,
    };
    Ok(view_paused(job, &paused))
}

/// [`view`] with the job's pause already known (a list reads every pause once).
pub(super) fn view_paused(job: &JobDef, paused: &crate::cli::job::Paused) -> Value {
    let fires = crate::cli::job::upcoming(job, Timestamp::now());
    let mut v = crate::cli::job::job_json(job, &fires, paused);
    if let Some(p) = v.get("params") {
        v["params"] = mask(p);
    }
    v
}

fn etag(job: &JobDef) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{}\"", job.version))
        .unwrap_or(HeaderValue::from_static("\"0\""))
}

fn with_etag(status: StatusCode, job: &JobDef, body: Value) -> Response {
    let mut r = (status, Json(body)).into_response();
    r.headers_mut().insert(header::ETAG, etag(job));
    r
}

pub(super) fn job_name(name: &str) -> ApiResult<JobName> {
    JobName::new(name).map_err(|e| Problem::invalid("name", e.to_string()))
}

/// The job named `name`, or 404.
pub(super) async fn load(st: &AppState, name: &str) -> ApiResult<JobDef> {
    let key = job_name(name)?;
    st.backend.job_by_name(&key).await?.ok_or_else(|| {
        Problem::not_found(format!(
            "no job named \"{name}\"; GET /api/v1/jobs lists them"
        ))
    })
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct JobListQuery {
    /// Only enabled (true) or disabled (false) jobs.
    enabled: Option<bool>,
    /// Only jobs of this group.
    group: Option<String>,
    /// Only jobs with this node tag.
    node_tag: Option<String>,
    /// Only jobs whose handler type starts with this (`exe::`, `sql::proc`).
    handler: Option<String>,
    /// Only jobs whose name contains this, ignoring the case of ASCII letters.
    q: Option<String>,
    /// How many jobs one page holds (1–1000, default 100).
    limit: Option<usize>,
    /// The cursor: only jobs named after this one. Pass the previous page's `X-Next-Cursor`
    /// (or follow its `Link: rel="next"`); leave it out for the first page.
    after: Option<String>,
}

/// The jobs of one page when `limit` is not given: a screenful, and a response that stays
/// small with a million jobs.
const DEFAULT_PAGE: usize = 100;

/// The header that carries the next page's cursor: the last name of this page,
/// percent-encoded ([`query_value`]), to append as `after=<cursor>`.
const NEXT_CURSOR: &str = "x-next-cursor";

/// `text` as one query-string value: every byte but RFC 3986's unreserved characters
/// percent-encoded, so a name with `&`, `=`, `#`, `+`, a space or any other character comes
/// back unchanged from the `Link` a client follows.
fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A page's `after` cursor (the previous page's last job name), or why it is not one. The
/// API and the dashboard's jobs page read it alike.
pub(super) fn page_cursor(a: &str) -> ApiResult<JobName> {
    JobName::new(a).map_err(|e| {
        Problem::invalid(
            "after",
            format!(
                "\"{a}\" is not a job name ({e}); pass the X-Next-Cursor of the previous page, \
                 or leave after out for the first page"
            ),
        )
    })
}

/// The `Link` header of the page after `next`: this request's filters and limit with the
/// cursor, so following it continues the same listing.
fn next_link(q: &JobListQuery, limit: usize, next: &JobName) -> String {
    let mut url = format!(
        "/api/v1/jobs?after={}&limit={limit}",
        query_value(next.as_str())
    );
    if let Some(e) = q.enabled {
        url.push_str(&format!("&enabled={e}"));
    }
    for (key, value) in [
        ("group", &q.group),
        ("node_tag", &q.node_tag),
        ("handler", &q.handler),
        ("q", &q.q),
    ] {
        if let Some(v) = value {
            url.push_str(&format!("&{key}={}", query_value(v)));
        }
    }
    format!("<{url}>; rel=\"next\"")
}

/// One page of jobs by name, filtered. The body is a JSON array as it always was (a client
/// that read every job now reads the first page and, to read on, follows the headers); when
/// more jobs follow, the `X-Next-Cursor` header holds the cursor (percent-encoded) to pass as
/// `after` and `Link` (`rel="next"`) the whole URL of the next page. The last page has
/// neither. A page reads only its jobs from the store
/// ([`takt_core::store::Store::job_page`]), so its cost follows the page size, not the number
/// of jobs.
#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs", params(JobListQuery),
    responses((status = 200, description = "one page of jobs by name, as `takt job show --json` prints them",
                body = Vec<Object>,
                headers(("X-Next-Cursor" = String, description = "the next page's `after`, percent-encoded (append as `after=<cursor>`); absent on the last page"),
                        ("Link" = String, description = "`<…/api/v1/jobs?after=…&limit=…>; rel=\"next\"` with the same filters; absent on the last page"))),
              (status = 400, body = Problem),
              (status = 401, body = Problem)))]
async fn list_jobs(
    State(st): State<AppState>,
    _caller: Caller,
    Q(q): Q<JobListQuery>,
) -> ApiResult<Response> {
    let limit = limit_of(q.limit, DEFAULT_PAGE)?;
    let after = q.after.as_deref().map(page_cursor).transpose()?;
    let query = takt_core::store::JobQuery {
        after,
        limit,
        enabled: q.enabled,
        group: q.group.clone(),
        node_tag: q.node_tag.clone(),
        handler_prefix: q.handler.clone(),
        name_contains: q.q.clone(),
    };
    let page = st.backend.job_page(&query).await?;
    let pauses = st.backend.pause_list().await?;
    let body: Vec<Value> = page
        .jobs
        .iter()
        .map(|j| view_paused(j, &crate::cli::job::pause_in(&pauses, j)))
        .collect();
    let mut r = Json(body).into_response();
    if let Some(next) = &page.next {
        // Percent-encoded, so the header is ASCII whatever the name (a browser reads header
        // bytes as Latin-1) and goes into a query string as it is.
        for (name, value) in [
            (
                HeaderName::from_static(NEXT_CURSOR),
                query_value(next.as_str()),
            ),
            (header::LINK, next_link(&q, limit, next)),
        ] {
            if let Ok(v) = HeaderValue::from_str(&value) {
                r.headers_mut().insert(name, v);
            }
        }
    }
    Ok(r)
}

/// A job with its next fires and its latest operator actions; the `ETag` is its version.
#[utoipa::path(get, path = "/api/v1/jobs/{name}", tag = "jobs",
    params(("name" = String, Path, description = "the job's name")),
    responses((status = 200, description = "the job; ETag: its version", body = Object),
              (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn get_job(
    State(st): State<AppState>,
    _caller: Caller,
    P(name): P<String>,
) -> ApiResult<Response> {
    let job = load(&st, &name).await?;
    let actions = st.backend.action_list(Some(job.name.as_str()), 10).await?;
    let mut body = view(&st, &job).await?;
    body["recent_actions"] = json!(
        actions
            .into_iter()
            .map(ActionView::from)
            .collect::<Vec<_>>()
    );
    Ok(with_etag(StatusCode::OK, &job, body))
}

/// A job definition as the API takes it: `takt job show --json`'s shape.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct JobBody {
    /// The unique name (on a replace: the path's, or absent).
    name: Option<String>,
    /// `plugin::handler` or `Namespace.Class, Assembly`.
    handler: String,
    /// The handler's parameters (a JSON object or array; default `{}`).
    #[schema(value_type = Object)]
    params: Option<Value>,
    /// The schedule (`cron`, `calendar`, `every`, `at`, `tz`, `dst_gap`, `dst_fold`,
    /// `day_match`, `anchor`); absent or null: runs only when triggered.
    #[schema(value_type = Object)]
    schedule: Option<ScheduleSpec>,
    /// Seconds an attempt may run.
    timeout_secs: Option<u64>,
    /// Retries after a failed attempt (default 0).
    retries: Option<u32>,
    /// `10s,30s,60s` or `exp:1s..5m x2 jitter 0.2`.
    retry_delays: Option<String>,
    /// Whether timeouts are retried too.
    retry_timeouts: Option<bool>,
    /// skip, fire-once, fire-all:N, each optionally @LATENESS.
    misfire: Option<String>,
    /// skip, queue-one, allow, cancel-running.
    overlap: Option<String>,
    /// 0 (first) to 999; default 500.
    priority: Option<u16>,
    group: Option<String>,
    node_tag: Option<String>,
    owner: Option<String>,
    description: Option<String>,
    /// in-process or process.
    isolation: Option<String>,
    /// Default true.
    enabled: Option<bool>,
    // Read-only fields of the shown form, accepted so a job read can be sent back.
    #[schema(ignore)]
    id: Option<IgnoredAny>,
    #[schema(ignore)]
    version: Option<IgnoredAny>,
    #[schema(ignore)]
    next_fire: Option<IgnoredAny>,
    #[schema(ignore)]
    next_fires: Option<IgnoredAny>,
    #[schema(ignore)]
    updated_at: Option<IgnoredAny>,
    #[schema(ignore)]
    schedule_short: Option<IgnoredAny>,
    #[schema(ignore)]
    schedule_description: Option<IgnoredAny>,
    #[schema(ignore)]
    application: Option<IgnoredAny>,
    #[schema(ignore)]
    recent_actions: Option<IgnoredAny>,
    /// No fires before this instant (RFC 3339, or a local time in the schedule's zone);
    /// absent or null: none. A replace sets it to what is given, like every other field.
    effective_from: Option<String>,
    /// No fires at or after this instant; past it the job is expired. Same forms.
    expires_at: Option<String>,
    /// Jobs whose run for the same period must succeed first (each must exist; no cycles).
    /// Also accepted as `depends_on`, the config file's key. Absent or null: none.
    #[serde(alias = "depends_on")]
    dependencies: Option<Vec<String>>,
    /// How long a fire waits for its dependencies' runs to end, e.g. `30m`; absent or null:
    /// until the job's next fire.
    dependency_wait: Option<String>,
    #[schema(ignore)]
    state: Option<IgnoredAny>,
    #[schema(ignore)]
    pause: Option<IgnoredAny>,
    #[schema(ignore)]
    expired: Option<IgnoredAny>,
    /// Jobs that each get one run when a run of this job succeeds (continuations; names of
    /// existing jobs, no cycle). Absent: none.
    on_success: Option<Vec<String>>,
    /// Jobs that each get one run when a run of this job fails or times out. Absent: none.
    on_failure: Option<Vec<String>>,
}

impl JobBody {
    /// The job it defines (named `name`), `stored` params filling in masked values.
    fn into_job(self, name: &str, stored: Option<&JobDef>) -> ApiResult<JobDef> {
        let _ = (
            &self.id,
            &self.version,
            &self.next_fire,
            &self.next_fires,
            &self.updated_at,
            &self.schedule_short,
            &self.schedule_description,
            &self.application,
            &self.recent_actions,
            &self.state,
            &self.pause,
            &self.expired,
        );
        let mut job = JobDef::new(name, &self.handler).map_err(|e| {
            let field = if JobName::new(name).is_err() {
                "name"
            } else {
                "handler"
            };
            Problem::invalid(field, e.to_string())
        })?;
        if let Some(mut params) = self.params {
            if !(params.is_object() || params.is_array()) {
                return Err(Problem::invalid("params", "must be a JSON object or array"));
            }
            if let Some(old) =
                stored.and_then(|j| serde_json::from_str::<Value>(&j.params_json).ok())
            {
                unmask(&mut params, &old);
            }
            job.params_json = params.to_string();
        }
        if let Some(spec) = &self.schedule {
            job.schedule = Some(
                spec.to_schedule()
                    .map_err(|e| Problem::invalid("schedule", e.to_string()))?,
            );
        }
        if let Some(t) = self.timeout_secs {
            if t == 0 {
                return Err(Problem::invalid("timeout_secs", "must be at least 1"));
            }
            job.timeout = Some(Duration::from_secs(t));
        }
        let backoff = match &self.retry_delays {
            Some(text) => text
                .parse::<Backoff>()
                .map_err(|e| Problem::invalid("retry_delays", e.to_string()))?,
            None => Backoff::seed_default(),
        };
        job.retry = RetryPolicy::new(self.retries.unwrap_or(0), backoff);
        job.retry.retry_timeouts = self.retry_timeouts.unwrap_or(false);
        if let Some(m) = &self.misfire {
            job.misfire = m
                .parse::<MisfirePolicy>()
                .map_err(|e| Problem::invalid("misfire", e.to_string()))?;
        }
        if let Some(o) = &self.overlap {
            job.overlap = o
                .parse::<OverlapPolicy>()
                .map_err(|e| Problem::invalid("overlap", e.to_string()))?;
        }
        if let Some(p) = self.priority {
            job.priority =
                Priority::new(p).map_err(|e| Problem::invalid("priority", e.to_string()))?;
        }
        if let Some(i) = &self.isolation {
            job.isolation = i
                .parse::<Isolation>()
                .map_err(|e| Problem::invalid("isolation", e.to_string()))?;
        }
        job.group = self.group.filter(|g| !g.is_empty());
        job.node_tag = self.node_tag.filter(|t| !t.is_empty());
        job.owner = self.owner;
        job.description = self.description;
        job.enabled = self.enabled.unwrap_or(true);
        if let Some(old) = stored {
            job.application = old.application.clone();
        }
        for (i, d) in self.dependencies.iter().flatten().enumerate() {
            job.dependencies.push(
                JobName::new(d)
                    .map_err(|e| Problem::invalid(format!("dependencies[{i}]"), e.to_string()))?,
            );
        }
        if let Some(w) = &self.dependency_wait {
            let secs = takt_core::schedule::parse_duration(w)
                .map_err(|e| Problem::invalid("dependency_wait", format!("\"{w}\": {e}")))?;
            if secs == 0 {
                return Err(Problem::invalid(
                    "dependency_wait",
                    "must be longer than 0s; leave it out to wait until the job's next fire",
                ));
            }
            job.dependency_wait = Some(Duration::from_secs(secs));
        }
        // Local times are read in the schedule's zone (UTC for a manual job), as the CLI does.
        let zone = job
            .schedule
            .as_ref()
            .map_or_else(takt_core::schedule::Zone::utc, |s| s.zone().clone());
        for (field, given, slot) in [
            (
                "effective_from",
                &self.effective_from,
                &mut job.effective_from,
            ),
            ("expires_at", &self.expires_at, &mut job.expires_at),
        ] {
            *slot = match given.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(text) => Some(
                    crate::spec::parse_instant(text, &zone)
                        .map_err(|e| Problem::invalid(field, e))?,
                ),
            };
        }
        for (field, given, slot) in [
            ("on_success", &self.on_success, &mut job.on_success),
            ("on_failure", &self.on_failure, &mut job.on_failure),
        ] {
            *slot = given
                .iter()
                .flatten()
                .map(|n| {
                    JobName::new(n).map_err(|e| Problem::invalid(field, format!("\"{n}\": {e}")))
                })
                .collect::<ApiResult<_>>()?;
        }
        job.validate().map_err(|e| {
            let text = e.to_string();
            let field = if text.contains("effective_from") {
                "effective_from"
            } else if text.contains("on_success") {
                "on_success"
            } else if text.contains("on_failure") {
                "on_failure"
            } else {
                ""
            };
            Problem::invalid(field, text)
        })?;
        crate::dynparams::check(&job.params_json).map_err(|e| Problem::invalid("params", e))?;
        Ok(job)
    }
}

fn refuse_file_job(job: &JobDef, what: &str) -> ApiResult<()> {
    if job.application.as_deref() == Some(CONFIG_APPLICATION) {
        return Err(Problem::conflict(format!(
            "job \"{}\" is declared in takt.toml; {what} it there (takt run puts the file's \
             definition back at its next start)",
            job.name
        )));
    }
    Ok(())
}

/// Creates a job (admin). 201 with the job and its `ETag`; 409 when the name is taken.
#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs", request_body = JobBody,
    responses((status = 201, body = Object), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 409, body = Problem)))]
async fn create_job(
    State(st): State<AppState>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    caller.require(Role::Admin, "creating a job")?;
    let body: JobBody = parse_body(&body)?;
    let Some(name) = body.name.clone() else {
        return Err(Problem::invalid("name", "a new job needs a name"));
    };
    let job = body.into_job(&name, None)?;
    let stored = st.backend.job_add(job).await.map_err(Problem::from)?;
    record(
        &st,
        &caller,
        "create",
        Some(stored.name.as_str()),
        None,
        None,
    )
    .await?;
    Ok(with_etag(
        StatusCode::CREATED,
        &stored,
        view(&st, &stored).await?,
    ))
}

/// The version `If-Match` names (`"3"`, `W/"3"` or `3`).
fn if_match(headers: &HeaderMap) -> ApiResult<u64> {
    let Some(v) = headers.get(header::IF_MATCH) else {
        return Err(Problem::new(
            StatusCode::PRECONDITION_REQUIRED,
            "precondition-required",
            "If-Match is required",
            "send the job's ETag (its version, from GET) as If-Match, so that an edit made \
             meanwhile is not overwritten",
        )
        .at("If-Match"));
    };
    let text = v.to_str().unwrap_or_default().trim();
    let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
    text.parse::<u64>().map_err(|_| {
        Problem::invalid(
            "If-Match",
            format!("\"{text}\" is not a job version; send the ETag of GET"),
        )
    })
}

fn stale(name: &str, asked: u64, current: u64) -> Problem {
    Problem::new(
        StatusCode::PRECONDITION_FAILED,
        "stale-version",
        "the job changed meanwhile",
        format!(
            "job \"{name}\" is at version {current}, not {asked}: someone changed it since you \
             read it; GET it again, reapply the edit and send the new ETag"
        ),
    )
    .at("If-Match")
}

/// Replaces a job (admin): the whole definition, with `If-Match` on its version — 412 when
/// it changed meanwhile, 428 without `If-Match`. Masked params sent back keep their values.
#[utoipa::path(put, path = "/api/v1/jobs/{name}", tag = "jobs", request_body = JobBody,
    params(("name" = String, Path, description = "the job's name"),
           ("If-Match" = String, Header, description = "the job's ETag (its version)")),
    responses((status = 200, body = Object), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem),
              (status = 412, body = Problem), (status = 428, body = Problem)))]
async fn replace_job(
    State(st): State<AppState>,
    caller: Caller,
    P(name): P<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    caller.require(Role::Admin, "editing a job")?;
    let version = if_match(&headers)?;
    let stored = replace(&st, &caller, &name, version, &body).await?;
    Ok(with_etag(
        StatusCode::OK,
        &stored,
        view(&st, &stored).await?,
    ))
}

/// Replaces job `name` at `version` with the definition in `body` (admin), recording the
/// edit: what `PUT /api/v1/jobs/{name}` and the dashboard's edit form both do.
pub(super) async fn replace(
    st: &AppState,
    caller: &Caller,
    name: &str,
    version: u64,
    body: &[u8],
) -> ApiResult<JobDef> {
    caller.require(Role::Admin, "editing a job")?;
    let body: JobBody = parse_body(body)?;
    if let Some(n) = &body.name
        && n != name
    {
        return Err(Problem::invalid(
            "name",
            format!(
                "\"{n}\" is not the job of the path (\"{name}\"); a job cannot be renamed here"
            ),
        ));
    }
    let current = load(st, name).await?;
    refuse_file_job(&current, "edit")?;
    if current.version != version {
        return Err(stale(name, version, current.version));
    }
    let mut job = body.into_job(name, Some(&current))?;
    job.id = current.id;
    job.version = version;
    let stored = match st.backend.job_update(job).await {
        Ok(j) => j,
        Err(crate::scheduler::SchedulerError::Store(e))
            if e.kind() == takt_core::store::StoreErrorKind::Conflict =>
        {
            let now = load(st, name)
                .await
                .map(|j| j.version)
                .unwrap_or(version + 1);
            return Err(stale(name, version, now));
        }
        Err(e) => return Err(e.into()),
    };
    record(
        st,
        caller,
        "update",
        Some(name),
        None,
        Some(format!("version {} -> {}", version, stored.version)),
    )
    .await?;
    Ok(stored)
}

/// Deletes a job with its runs and logs (admin); runs of it on this node are cancelled first.
/// `If-Match` is honoured when sent.
#[utoipa::path(delete, path = "/api/v1/jobs/{name}", tag = "jobs",
    params(("name" = String, Path, description = "the job's name")),
    responses((status = 204, description = "deleted"), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem), (status = 409, body = Problem), (status = 412, body = Problem)))]
async fn delete_job(
    State(st): State<AppState>,
    caller: Caller,
    P(name): P<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    caller.require(Role::Admin, "deleting a job")?;
    let current = load(&st, &name).await?;
    refuse_file_job(&current, "remove")?;
    if headers.contains_key(header::IF_MATCH) {
        let v = if_match(&headers)?;
        if v != current.version {
            return Err(stale(&name, v, current.version));
        }
    }
    let id = current
        .id
        .ok_or_else(|| Problem::internal("a stored job without an id"))?;
    st.backend.job_remove(id).await?;
    record(&st, &caller, "delete", Some(&name), None, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Runs a job now (operator): its fire time is the current second; a disabled job is refused
/// (409).
#[utoipa::path(post, path = "/api/v1/jobs/{name}/trigger", tag = "jobs",
    params(("name" = String, Path, description = "the job's name")),
    responses((status = 202, description = "due now; the fire time", body = Object),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, body = Problem)))]
async fn trigger_job(
    State(st): State<AppState>,
    caller: Caller,
    P(name): P<String>,
) -> ApiResult<Response> {
    let fire = trigger(&st, &caller, &name).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"job": name, "fire_time": fire.to_string()})),
    )
        .into_response())
}

/// Runs job `name` now (operator), recording it; its fire time. The API's and the
/// dashboard's trigger.
pub(super) async fn trigger(st: &AppState, caller: &Caller, name: &str) -> ApiResult<Timestamp> {
    caller.require(Role::Operator, "triggering a job")?;
    let job = load(st, name).await?;
    if !job.enabled {
        return Err(Problem::conflict(format!(
            "job \"{name}\" is disabled; enable it first (POST …/enable)"
        )));
    }
    let id = job
        .id
        .ok_or_else(|| Problem::internal("a stored job without an id"))?;
    let fire = st.backend.job_trigger(id).await?;
    record(
        st,
        caller,
        "trigger",
        Some(name),
        None,
        Some(format!("fire {fire}")),
    )
    .await?;
    Ok(fire)
}

async fn set_enabled(
    st: &AppState,
    caller: &Caller,
    name: &str,
    enabled: bool,
) -> ApiResult<Response> {
    let stored = enable(st, caller, name, enabled).await?;
    Ok(with_etag(StatusCode::OK, &stored, view(st, &stored).await?))
}

/// Enables or disables job `name` (operator), recording it. The API's and the dashboard's.
pub(super) async fn enable(
    st: &AppState,
    caller: &Caller,
    name: &str,
    enabled: bool,
) -> ApiResult<JobDef> {
    let what = if enabled { "enable" } else { "disable" };
    caller.require(Role::Operator, &format!("{what} a job"))?;
    let job = load(st, name).await?;
    let id = job
        .id
        .ok_or_else(|| Problem::internal("a stored job without an id"))?;
    let stored = st.backend.job_enable(id, enabled).await?;
    record(st, caller, what, Some(name), None, None).await?;
    Ok(stored)
}

/// Enables a job (operator); its next fire is computed from now.
#[utoipa::path(post, path = "/api/v1/jobs/{name}/enable", tag = "jobs",
    params(("name" = String, Path, description = "the job's name")),
    responses((status = 200, body = Object), (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn enable_job(
    State(st): State<AppState>,
    caller: Caller,
    P(name): P<String>,
) -> ApiResult<Response> {
    set_enabled(&st, &caller, &name, true).await
}

/// Disables a job (operator): it fires no more until enabled.
#[utoipa::path(post, path = "/api/v1/jobs/{name}/disable", tag = "jobs",
    params(("name" = String, Path, description = "the job's name")),
    responses((status = 200, body = Object), (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn disable_job(
    State(st): State<AppState>,
    caller: Caller,
    P(name): P<String>,
) -> ApiResult<Response> {
    set_enabled(&st, &caller, &name, false).await
}

/// The operator actions done to a job (kept after it is deleted), newest first.
#[utoipa::path(get, path = "/api/v1/jobs/{name}/actions", tag = "jobs",
    params(("name" = String, Path, description = "the job's name"), LimitQuery),
    responses((status = 200, body = Vec<ActionView>), (status = 400, body = Problem), (status = 401, body = Problem)))]
async fn job_actions(
    State(st): State<AppState>,
    _caller: Caller,
    P(name): P<String>,
    Q(q): Q<LimitQuery>,
) -> ApiResult<Json<Vec<ActionView>>> {
    job_name(&name)?;
    let limit = limit_of(q.limit, 50)?;
    let list = st.backend.action_list(Some(&name), limit).await?;
    Ok(Json(list.into_iter().map(ActionView::from).collect()))
}
