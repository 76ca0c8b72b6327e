//! The dashboard's pages. Each gathers its data through the API's own functions (see the
//! module doc of [`super`]) and renders one template; a store failure becomes the outage
//! page, a bad filter the page with its error.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use takt_core::job::{JobDef, JobId};
use takt_core::pause::PauseTarget;
use takt_core::run::{Run, RunId, RunState};
use takt_core::schedule::Zone;
use takt_core::store::RunFilter;

use super::super::AppState;
use super::super::jobs::{load, view, view_paused};
use super::super::problem::{ApiResult, Problem};
use super::super::runs::{RunQuery, load_run, log_stream, run_page, run_with_attempts};
use super::super::system::{node_views, plugins_view};
use super::i18n::Lang;
use super::session::{SIGNIN_COOKIE, cookie, random_hex};
use super::{Viewer, page, problem_page};
use crate::inspect::audit::AuditRequest;

/// Catalogue keys the Rust code of the pages uses (checked by the catalogue test).
#[cfg(test)]
pub(super) const KEYS: &[&str] = &["err.not_found"];

/// Runs counted per state on the overview; a state with more in 24 h shows `1000+`.
const STATE_CAP: usize = 1000;
/// The runs of a job's strip on the jobs page.
const STRIP: usize = 20;
/// Jobs on one jobs page.
const JOBS_PAGE: usize = 100;
/// Days in a job's grid.
const GRID_DAYS: i64 = 7;
/// The runs a job's grid reads (a job firing more often shows hours, capped).
const GRID_RUNS: usize = 2000;
/// A fire this far past with no claim is late.
const LATE: SignedDuration = SignedDuration::from_secs(60);
/// The most late jobs (next fire passed, not claimed) the overview reads.
const LATE_JOBS: usize = 200;
/// A node's heartbeat older than this is shown as stale: the slack `takt why` allows a
/// live node ([`crate::inspect::HEARTBEAT_SLACK`]), so the two never disagree.
const STALE_HEARTBEAT_SECS: f64 = crate::inspect::HEARTBEAT_SLACK.as_secs_f64();

/// Serializes `v` for a template.
fn value<T: serde::Serialize>(v: &T) -> ApiResult<Value> {
    serde_json::to_value(v).map_err(|e| Problem::internal(format!("cannot encode a page: {e}")))
}

/// Renders the result of `data` as `tpl`, or its problem.
async fn show(st: &AppState, v: &Viewer, nav: &str, tpl: &str, data: ApiResult<Value>) -> Response {
    match data {
        Ok(d) => page(st, v, nav, tpl, StatusCode::OK, d),
        Err(p) => problem_page(st, v, nav, p).await,
    }
}

use crate::inspect::zone_of;

/// The job names a job field suggests (its `<datalist>`): the first
/// [`JobQuery::MAX_LIMIT`](takt_core::store::JobQuery::MAX_LIMIT) by name, one page read, so a
/// page with a job field costs the same with a million jobs; any other name can be typed.
async fn job_choices(st: &AppState) -> ApiResult<Vec<String>> {
    let first = takt_core::store::JobQuery::first(takt_core::store::JobQuery::MAX_LIMIT);
    let page = st.backend.job_page(&first).await?;
    Ok(page.jobs.into_iter().map(|j| j.name.to_string()).collect())
}

/// A query-string field as a page reads it: trimmed, and absent when empty (an empty form
/// field means "any").
fn given(q: &HashMap<String, String>, k: &str) -> Option<String> {
    q.get(k)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn run_json(r: &Run, names: &HashMap<JobId, String>) -> ApiResult<Value> {
    value(&super::super::runs::view(r, names.get(&r.job_id).cloned()))
}

/// `GET /ui/signin`: the token form (with its double-submit CSRF cookie).
pub(super) async fn signin_form(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    signin_page(&st, Lang::of(&headers), &q, None, StatusCode::OK).await
}

/// The sign-in page, with `error` (a catalogue key or text) when the last try failed.
pub(super) async fn signin_page(
    st: &AppState,
    lang: Lang,
    q: &HashMap<String, String>,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    let Ok(nonce) = random_hex() else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "no randomness").into_response();
    };
    let no_tokens = super::tokens(st).await.is_some_and(|t| t.is_empty());
    let ctx = json!({
        "lang": lang.code(),
        "langs": Lang::ALL.iter().map(|l| l.code()).collect::<Vec<_>>(),
        "path": "/ui/signin",
        "nonce": nonce,
        "next": q.get("next").filter(|n| super::actions::safe_next(n)).cloned().unwrap_or_else(|| "/ui/".into()),
        "error": error,
        "no_tokens": no_tokens,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let mut r = match st.dashboard.render("signin.html", &ctx) {
        Ok(body) => super::html(status, body),
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    if let Ok(c) = cookie(
        SIGNIN_COOKIE,
        nonce,
        st.dashboard.secure,
        Some(std::time::Duration::from_secs(3600)),
    )
    .parse()
    {
        r.headers_mut().append(axum::http::header::SET_COOKIE, c);
    }
    r
}

/// `GET /ui/`: the overview.
pub(super) async fn overview(State(st): State<AppState>, v: Viewer) -> Response {
    let data = overview_data(&st).await;
    show(&st, &v, "overview", "overview.html", data).await
}

async fn overview_data(st: &AppState) -> ApiResult<Value> {
    let now = Timestamp::now();
    let from = now - SignedDuration::from_hours(24);
    let mut by_state = Vec::new();
    let mut skipped_by = BTreeMap::<String, usize>::new();
    let mut failed_jobs = BTreeSet::new();
    for state in RunState::ALL {
        let runs = st
            .backend
            .run_list(&RunFilter {
                state: Some(state),
                fire_from: Some(from),
                limit: STATE_CAP,
                ..RunFilter::default()
            })
            .await?;
        if state == RunState::Skipped {
            for r in &runs {
                *skipped_by
                    .entry(r.skip_reason.map_or("unknown", |s| s.name()).to_string())
                    .or_default() += 1;
            }
        }
        if matches!(state, RunState::Failed | RunState::TimedOut) {
            failed_jobs.extend(runs.iter().map(|r| r.job_id));
        }
        by_state.push(json!({
            "state": state.name(),
            "count": runs.len(),
            "capped": runs.len() == STATE_CAP,
        }));
    }
    let running = st
        .backend
        .run_list(&RunFilter {
            state: Some(RunState::Running),
            limit: 50,
            ..RunFilter::default()
        })
        .await?;
    // Failing: the job's latest finished (not skipped) run failed or timed out.
    let mut failing = Vec::new();
    for id in failed_jobs {
        let recent = st
            .backend
            .run_list(&RunFilter {
                job: Some(id),
                limit: 10,
                ..RunFilter::default()
            })
            .await?;
        if let Some(last) = recent
            .into_iter()
            .find(|r| r.state.is_final() && r.state != RunState::Skipped)
            && matches!(last.state, RunState::Failed | RunState::TimedOut)
        {
            failing.push(last);
        }
    }
    // Late: a pending run whose fire (or retry) time passed a minute ago, or an enabled,
    // unpaused job whose next fire passed without being claimed.
    let pending = st
        .backend
        .run_list(&RunFilter {
            state: Some(RunState::Pending),
            limit: 200,
            ..RunFilter::default()
        })
        .await?;
    let late_runs: Vec<&Run> = pending
        .iter()
        .filter(|r| r.next_attempt_at.unwrap_or(r.fire_time) < now - LATE)
        .collect();
    // The jobs of the runs shown, in one read (never every job: the page costs the same with
    // a million of them).
    let shown = running
        .iter()
        .chain(&failing)
        .chain(late_runs.iter().copied());
    let names = super::super::runs::job_names(st, shown).await?;
    let mut late = Vec::new();
    for r in late_runs {
        let due = r.next_attempt_at.unwrap_or(r.fire_time);
        late.push(json!({
            "job": names.get(&r.job_id),
            "due": due.to_string(),
            "run": r.id.map(|i| i.0),
            "late_secs": now.duration_since(due).as_secs_f64(),
        }));
    }
    let failing = failing
        .iter()
        .map(|r| run_json(r, &names))
        .collect::<ApiResult<Vec<_>>>()?;
    let pauses = st.backend.pause_list().await?;
    // Late jobs through the next-fire index, at most LATE_JOBS of them (paused ones are
    // dropped after the read).
    let late_jobs = st.backend.jobs_late(now - LATE, LATE_JOBS).await?;
    for j in &late_jobs {
        let paused = crate::cli::job::pause_in(&pauses, j).is_some();
        if let Some(nf) = j.next_fire
            && j.enabled
            && !paused
            && nf < now - LATE
            && !late.iter().any(|l| l["job"] == json!(j.name.as_str()))
        {
            late.push(json!({
                "job": j.name.as_str(),
                "due": nf.to_string(),
                "run": null,
                "late_secs": now.duration_since(nf).as_secs_f64(),
            }));
        }
    }
    let nodes = value(&node_views(st).await?)?;
    let nodes: Vec<Value> = nodes
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut n| {
            let stale = n["stopped_at"].is_null()
                && n["heartbeat_age_secs"]
                    .as_f64()
                    .is_none_or(|a| a > STALE_HEARTBEAT_SECS);
            n["stale"] = json!(stale);
            n
        })
        .collect();
    Ok(json!({
        "now": now.to_string(),
        "by_state": by_state,
        "cap": STATE_CAP,
        "running": running.iter().map(|r| run_json(r, &names)).collect::<ApiResult<Vec<_>>>()?,
        "failing": failing,
        "late": late,
        "skipped_by": skipped_by,
        "nodes": nodes,
        "jobs": st.backend.job_count().await?,
        "paused": pauses.len(),
    }))
}

/// `GET /ui/jobs`: the jobs by name, [`JOBS_PAGE`] at a time (`after`: the previous page's
/// last name; `q`: only names containing it), each with its next fire (its zone and the
/// browser's), its last state and its last runs as a strip. Paged, because every job on the
/// page costs a read of its runs: a plant whose one-off jobs pile up into the thousands
/// still gets its page at once.
pub(super) async fn jobs(
    State(st): State<AppState>,
    v: Viewer,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let given = |k: &str| given(&q, k);
    let data = jobs_data(&st, given("after"), given("q")).await;
    show(&st, &v, "jobs", "jobs.html", data).await
}

async fn jobs_data(st: &AppState, after: Option<String>, q: Option<String>) -> ApiResult<Value> {
    let query = takt_core::store::JobQuery {
        after: after
            .as_deref()
            .map(super::super::jobs::page_cursor)
            .transpose()?,
        name_contains: q.clone(),
        ..takt_core::store::JobQuery::first(JOBS_PAGE)
    };
    let page = st.backend.job_page(&query).await?;
    let next = page.next.as_ref().map(|n| {
        let mut parts = vec![format!("after={}", super::encode(n.as_str()))];
        if let Some(q) = &q {
            parts.push(format!("q={}", super::encode(q)));
        }
        parts.join("&")
    });
    let pauses = st.backend.pause_list().await?;
    let mut rows = Vec::new();
    for j in &page.jobs {
        let mut jv = view_paused(j, &crate::cli::job::pause_in(&pauses, j));
        let runs = st
            .backend
            .run_list(&RunFilter {
                job: j.id,
                limit: STRIP,
                ..RunFilter::default()
            })
            .await?;
        jv["zone"] = json!(zone_of(j).name());
        jv["last"] = runs.first().map_or(Value::Null, |r| {
            json!({"state": r.state.name(), "id": r.id.map(|i| i.0), "fire_time": r.fire_time.to_string()})
        });
        jv["strip"] = json!(
            runs.iter()
                .rev()
                .map(|r| json!({
                    "id": r.id.map(|i| i.0),
                    "state": r.state.name(),
                    "fire_time": r.fire_time.to_string(),
                    "skip_reason": r.skip_reason.map(|s| s.name()),
                }))
                .collect::<Vec<_>>()
        );
        rows.push(jv);
    }
    Ok(json!({"jobs": rows, "q": q, "next": next, "paged": after.is_some()}))
}

/// `GET /ui/jobs/{name}`: the job, its schedule explained with the next 10 fires and their
/// DST notes, the grid of its fires over the last days, the why trail, its recent runs, its
/// actions and their history.
pub(super) async fn job(
    State(st): State<AppState>,
    v: Viewer,
    Path(name): Path<String>,
) -> Response {
    let data = job_data(&st, &name).await;
    show(&st, &v, "jobs", "job.html", data).await
}

async fn job_data(st: &AppState, name: &str) -> ApiResult<Value> {
    let job = load(st, name).await?;
    let now = Timestamp::now();
    let mut jv = view(st, &job).await?;
    let zone = zone_of(&job);
    jv["zone"] = json!(zone.name());
    let preview = job.schedule.as_ref().map(|s| {
        let occ: Vec<_> = s.iter_after(now).take(10).collect();
        crate::cli::schedule::as_json(s, now, &occ)
    });
    let why = match st.backend.why(&job.name, None, now).await {
        Ok(r) => value(&r)?,
        Err(e) => return Err(super::super::workflow::inspect_problem(e, "name")),
    };
    let actions = st.backend.action_list(Some(job.name.as_str()), 20).await?;
    let runs = st
        .backend
        .run_list(&RunFilter {
            job: job.id,
            limit: 20,
            ..RunFilter::default()
        })
        .await?;
    let names: HashMap<JobId, String> = job
        .id
        .map(|id| (id, job.name.to_string()))
        .into_iter()
        .collect();
    let grid = grid(st, &job, &zone, now).await?;
    Ok(json!({
        "job": jv,
        "preview": preview,
        "why": why,
        "actions": actions.into_iter().map(super::super::system::ActionView::from).collect::<Vec<_>>(),
        "runs": runs.iter().map(|r| run_json(r, &names)).collect::<ApiResult<Vec<_>>>()?,
        "grid": grid,
        "file_job": job.application.as_deref() == Some(crate::config::CONFIG_APPLICATION),
    }))
}

/// A cell of the grid: its worst state, how many marks, a run to open, the first titles.
type Cell = (String, usize, Option<i64>, Vec<String>);

/// How bad a cell's state is: the worst of a cell is what it shows.
fn severity(state: &str) -> u8 {
    match state {
        "gap" | "duplicate" => 9,
        "failed" | "timed_out" => 8,
        "cancelled" => 6,
        "skipped" => 5,
        "running" => 4,
        "pending" => 3,
        "succeeded" => 1,
        _ => 0,
    }
}

/// The grid of fire times × days (Airflow's grid, by time of day): the job's runs of the last
/// [`GRID_DAYS`] days in its zone, and the gaps and duplicates the audit finds there, so a
/// missing or doubled fire stands out as its own cell. A job firing at more than 24 distinct
/// times a day is shown by hour, a cell holding the worst of its hour.
async fn grid(st: &AppState, job: &JobDef, zone: &Zone, now: Timestamp) -> ApiResult<Value> {
    let tz = zone.time_zone().clone();
    let local = |t: Timestamp| tz.to_offset(t).to_datetime(t);
    let today = local(now).date();
    let first = today
        .checked_sub(jiff::Span::new().days(GRID_DAYS - 1))
        .map_err(|e| Problem::internal(e.to_string()))?;
    let from = tz
        .to_timestamp(first.to_datetime(jiff::civil::Time::midnight()))
        .map_err(|e| Problem::internal(e.to_string()))?;
    let runs = st
        .backend
        .run_list(&RunFilter {
            job: job.id,
            fire_from: Some(from),
            limit: GRID_RUNS,
            ..RunFilter::default()
        })
        .await?;
    let mut marks: Vec<(Timestamp, String, Option<i64>, String)> = runs
        .iter()
        .map(|r| {
            let title = match r.skip_reason {
                Some(s) => format!("{} ({})", r.state.name(), s.name()),
                None => r.state.name().to_string(),
            };
            (
                r.fire_time,
                r.state.name().to_string(),
                r.id.map(|i| i.0),
                title,
            )
        })
        .collect();
    if job.schedule.is_some() && from < now {
        let req = AuditRequest {
            job: Some(job.name.clone()),
            from,
            to: now,
            now,
        };
        match st.backend.audit(&req).await {
            Ok(report) => {
                for j in &report.jobs {
                    for g in &j.gaps {
                        if let Ok(t) = g.fire_time.parse::<Timestamp>() {
                            let why = g.evidence.clone().unwrap_or_default();
                            marks.push((t, "gap".into(), None, format!("gap {why}")));
                        }
                    }
                    for d in &j.duplicates {
                        if let Ok(t) = d.fire_time.parse::<Timestamp>() {
                            marks.push((
                                t,
                                "duplicate".into(),
                                Some(d.run_id),
                                format!("duplicate: {}", d.why),
                            ));
                        }
                    }
                }
            }
            Err(crate::inspect::InspectError::Store(e)) => return Err(e.into()),
            // The audit cannot judge this range (a schedule it cannot expand): the runs
            // are still shown.
            Err(crate::inspect::InspectError::Invalid(_)) => {}
        }
    }
    let slots: BTreeSet<String> = marks
        .iter()
        .map(|m| local(m.0).strftime("%H:%M").to_string())
        .collect();
    let hourly = slots.len() > 24;
    let slot_of = |t: Timestamp| {
        let z = local(t);
        if hourly {
            z.strftime("%H:00").to_string()
        } else {
            z.strftime("%H:%M").to_string()
        }
    };
    let days: Vec<jiff::civil::Date> = (0..GRID_DAYS)
        .filter_map(|i| first.checked_add(jiff::Span::new().days(i)).ok())
        .collect();
    let mut cells: BTreeMap<(String, usize), Cell> = BTreeMap::new();
    for (t, state, run, title) in &marks {
        let Some(day) = days.iter().position(|d| *d == local(*t).date()) else {
            continue;
        };
        let cell = cells
            .entry((slot_of(*t), day))
            .or_insert_with(|| (String::new(), 0, None, Vec::new()));
        if severity(state) > severity(&cell.0) {
            cell.0 = state.clone();
            cell.2 = *run;
        }
        if cell.2.is_none() {
            cell.2 = *run;
        }
        cell.1 += 1;
        if cell.3.len() < 5 {
            cell.3.push(format!(
                "{} {title}",
                local(*t).strftime("%Y-%m-%d %H:%M:%S")
            ));
        }
    }
    let slot_list: BTreeSet<String> = cells.keys().map(|(s, _)| s.clone()).collect();
    let rows: Vec<Value> = slot_list
        .iter()
        .map(|slot| {
            let row: Vec<Value> = (0..days.len())
                .map(|d| match cells.get(&(slot.clone(), d)) {
                    Some((state, count, run, titles)) => json!({
                        "state": state, "count": count, "run": run, "title": titles.join("\n"),
                    }),
                    None => Value::Null,
                })
                .collect();
            json!({"slot": slot, "cells": row})
        })
        .collect();
    Ok(json!({
        "days": days.iter().map(|d| d.strftime("%m-%d %a").to_string()).collect::<Vec<_>>(),
        "rows": rows,
        "hourly": hourly,
        "capped": runs.len() == GRID_RUNS,
        "zone": zone.name(),
    }))
}

/// `GET /ui/runs`: runs newest first, filtered by job, state and fire-time range, paged by
/// the API's cursor.
pub(super) async fn runs(
    State(st): State<AppState>,
    v: Viewer,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let given = |k: &str| given(&q, k);
    let mut error = None;
    let mut bound = |k: &str| {
        given(k).and_then(|t| match crate::inspect::parse_bound(k, &t) {
            Ok(ts) => Some(ts.to_string()),
            Err(e) => {
                error = Some(e);
                None
            }
        })
    };
    let (from, to) = (bound("from"), bound("to"));
    let query = RunQuery {
        job: given("job"),
        state: given("state"),
        from,
        to,
        cursor: given("cursor"),
        limit: Some(50),
    };
    let filters = json!({
        "job": given("job"), "state": given("state"), "from": given("from"), "to": given("to"),
    });
    let jobs = match job_choices(&st).await {
        Ok(j) => j,
        Err(p) => return problem_page(&st, &v, "runs", p).await,
    };
    let states: Vec<&str> = RunState::ALL.iter().map(|s| s.name()).collect();
    let mut next_query = None;
    let (status, items) = match (&error, run_page(&st, &query).await) {
        (Some(_), _) => (StatusCode::BAD_REQUEST, Vec::new()),
        (None, Ok(p)) => {
            if let Some(c) = &p.next_cursor {
                let mut parts: Vec<String> = ["job", "state", "from", "to"]
                    .iter()
                    .filter_map(|k| given(k).map(|v| format!("{k}={}", super::encode(&v))))
                    .collect();
                parts.push(format!("cursor={}", super::encode(c)));
                next_query = Some(parts.join("&"));
            }
            match value(&p.items) {
                Ok(Value::Array(a)) => (StatusCode::OK, a),
                _ => (StatusCode::OK, Vec::new()),
            }
        }
        (None, Err(p)) if p.status >= 500 => return problem_page(&st, &v, "runs", p).await,
        (None, Err(p)) => {
            error = Some(p.detail);
            (
                StatusCode::from_u16(p.status).unwrap_or(StatusCode::BAD_REQUEST),
                Vec::new(),
            )
        }
    };
    page(
        &st,
        &v,
        "runs",
        "runs.html",
        status,
        json!({
            "runs": items, "filters": filters, "jobs": jobs, "states": states,
            "error": error, "next": next_query, "paged": given("cursor").is_some(),
        }),
    )
}

/// `GET /ui/runs/{id}`: a run with its attempts, its job's params (masked), result, error,
/// progress and its log, live while it runs.
pub(super) async fn run(State(st): State<AppState>, v: Viewer, Path(id): Path<i64>) -> Response {
    let data = run_data(&st, id).await;
    show(&st, &v, "runs", "run.html", data).await
}

async fn run_data(st: &AppState, id: i64) -> ApiResult<Value> {
    let rv = run_with_attempts(st, id).await?;
    let run = value(&rv)?;
    let job = match st.backend.run_get(RunId(id)).await? {
        Some(r) => match st.backend.job_get(r.job_id).await? {
            Some(j) => {
                let mut jv = view(st, &j).await?;
                jv["zone"] = json!(zone_of(&j).name());
                jv
            }
            None => Value::Null,
        },
        None => Value::Null,
    };
    let lines = st.backend.log_list(RunId(id), None, 1000).await?;
    let last = lines.last().map(|(s, _)| *s);
    Ok(json!({
        "run": run,
        "job": job,
        "log": lines.iter().map(|(seq, l)| json!({
            "seq": seq, "at": l.at.to_string(), "level": l.level.name(), "message": l.message,
        })).collect::<Vec<_>>(),
        "log_after": last,
        "final": run["state"].as_str().and_then(RunState::from_name).is_some_and(RunState::is_final),
    }))
}

/// `GET /ui/runs/{id}/log`: the run's live log for the page's `EventSource` (the API's
/// stream, with the session for its credentials).
pub(super) async fn log_tail(
    State(st): State<AppState>,
    _v: Viewer,
    Path(id): Path<i64>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(p) = load_run(&st, id).await {
        return p.into_response();
    }
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let after = resume.or_else(|| q.get("after").and_then(|a| a.parse().ok()));
    log_stream(st, RunId(id), after).into_response()
}

/// `GET /ui/nodes`: nodes, their heartbeats, their pauses.
pub(super) async fn nodes(State(st): State<AppState>, v: Viewer) -> Response {
    let data = async {
        let nodes = value(&node_views(&st).await?)?;
        let pauses: Vec<Value> = st
            .backend
            .pause_list()
            .await?
            .into_iter()
            .filter_map(|(t, p)| match t {
                PauseTarget::Node(n) => Some(json!({
                    "node": n.0, "by": p.by, "at": p.at.to_string(), "reason": p.reason,
                })),
                _ => None,
            })
            .collect();
        let nodes: Vec<Value> = nodes
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|mut n| {
                n["stale"] = json!(
                    n["stopped_at"].is_null()
                        && n["heartbeat_age_secs"]
                            .as_f64()
                            .is_none_or(|a| a > STALE_HEARTBEAT_SECS)
                );
                n["pause"] = pauses
                    .iter()
                    .find(|p| p["node"] == n["id"])
                    .cloned()
                    .unwrap_or(Value::Null);
                n
            })
            .collect();
        Ok(json!({"nodes": nodes}))
    }
    .await;
    show(&st, &v, "nodes", "nodes.html", data).await
}

/// `GET /ui/plugins`: versions, handlers, refused files.
pub(super) async fn plugins(State(st): State<AppState>, v: Viewer) -> Response {
    let data = value(&plugins_view(&st)).map(|p| json!({"plugins": p}));
    show(&st, &v, "plugins", "plugins.html", data).await
}

/// `GET /ui/audit`: the audit of a range (default: the last 24 hours), every job or one.
pub(super) async fn audit(
    State(st): State<AppState>,
    v: Viewer,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let now = Timestamp::now();
    let given = |k: &str| given(&q, k);
    let from_text = given("from").unwrap_or_else(|| {
        (now - SignedDuration::from_hours(24))
            .strftime("%Y-%m-%dT%H:%M")
            .to_string()
    });
    let to_text = given("to").unwrap_or_else(|| now.strftime("%Y-%m-%dT%H:%M:%S").to_string());
    let job = given("job");
    let mut form = json!({"from": from_text, "to": to_text, "job": job});
    let parsed = (|| -> Result<AuditRequest, String> {
        let from = crate::inspect::parse_bound("from", &from_text)?;
        let to = crate::inspect::parse_bound("to", &to_text)?;
        if from >= to {
            return Err(format!(
                "from {from} is not before to {to}; give a range whose start comes first"
            ));
        }
        let job = job
            .as_deref()
            .map(|n| takt_core::job::JobName::new(n).map_err(|e| e.to_string()))
            .transpose()?;
        Ok(AuditRequest { job, from, to, now })
    })();
    let jobs = match job_choices(&st).await {
        Ok(j) => j,
        Err(p) => return problem_page(&st, &v, "audit", p).await,
    };
    form["jobs"] = json!(jobs);
    let (status, report, error) = match parsed {
        Err(e) => (StatusCode::BAD_REQUEST, Value::Null, Some(e)),
        Ok(req) => match st.backend.audit(&req).await {
            Ok(r) => match value(&r) {
                Ok(r) => (StatusCode::OK, r, None),
                Err(p) => return problem_page(&st, &v, "audit", p).await,
            },
            Err(crate::inspect::InspectError::Store(e)) => {
                return problem_page(&st, &v, "audit", e.into()).await;
            }
            Err(crate::inspect::InspectError::Invalid(e)) => {
                (StatusCode::BAD_REQUEST, Value::Null, Some(e))
            }
        },
    };
    page(
        &st,
        &v,
        "audit",
        "audit.html",
        status,
        json!({"form": form, "report": report, "error": error}),
    )
}

/// `GET /ui/jobs/{name}/edit`: the job's definition as JSON, for an admin to edit and send
/// back with the version it was read at.
pub(super) async fn edit_form(
    State(st): State<AppState>,
    v: Viewer,
    Path(name): Path<String>,
) -> Response {
    if let Err(p) = v
        .caller
        .require(takt_core::store::access::Role::Admin, "editing a job")
    {
        return problem_page(&st, &v, "jobs", p).await;
    }
    let data = async {
        let job = load(&st, &name).await?;
        Ok(edit_context(&job, &view(&st, &job).await?, None, None))
    }
    .await;
    show(&st, &v, "jobs", "edit.html", data).await
}

/// What the edit page shows: the definition (or the text sent back with `error`).
pub(super) fn edit_context(
    job: &JobDef,
    shown: &Value,
    text: Option<String>,
    error: Option<Value>,
) -> Value {
    let mut def = shown.clone();
    if let Some(o) = def.as_object_mut() {
        for k in [
            "id",
            "version",
            "next_fire",
            "next_fires",
            "updated_at",
            "schedule_short",
            "schedule_description",
            "application",
            "recent_actions",
            "dependencies",
            "state",
            "pause",
            "expired",
        ] {
            o.remove(k);
        }
    }
    json!({
        "name": job.name.as_str(),
        "version": job.version,
        "text": text.unwrap_or_else(|| serde_json::to_string_pretty(&def).unwrap_or_default()),
        "error": error,
        "file_job": job.application.as_deref() == Some(crate::config::CONFIG_APPLICATION),
    })
}

/// Any other `/ui/…` path.
pub(super) async fn not_found(State(st): State<AppState>, v: Viewer) -> Response {
    let detail = v.lang.t("err.not_found").to_string();
    page(
        &st,
        &v,
        "",
        "error.html",
        StatusCode::NOT_FOUND,
        json!({"status": 404, "detail": detail}),
    )
}
