//! The dashboard's POSTs: sign-in and sign-out, and the buttons, each checking the
//! session's CSRF token first (403 otherwise) and then calling the API's own action
//! function, which checks the role (403 for a viewer's hand-made form) and records the
//! action. A done action comes back to its page (303) with a notice; a refused one shows the
//! API's problem.

use std::collections::HashMap;

use axum::Form;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use takt_core::store::access::Role;

use super::super::AppState;
use super::super::auth::{Caller, LOCAL_ACTOR};
use super::i18n::{LANG_COOKIE, Lang};
use super::session::{SESSION_COOKIE, SIGNIN_COOKIE, cookie, cookie_value, same_secret};
use super::{Viewer, csrf_ok, encode, page, problem_page, refusal};

/// Catalogue keys the Rust code of the actions uses (checked by the catalogue test).
#[cfg(test)]
pub(super) const KEYS: &[&str] = &[
    "err.no_session",
    "err.csrf",
    "err.signin_csrf",
    "err.bad_token",
    "err.no_such_action",
    "err.bad_version",
    "err.store",
];

/// Whether `next` is a dashboard path to come back to (never another site: `//host`,
/// `/\host` and absolute URLs are refused).
pub(super) fn safe_next(next: &str) -> bool {
    next.starts_with("/ui")
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control)
}

fn set_cookie(r: &mut Response, c: String) {
    if let Ok(v) = HeaderValue::from_str(&c) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// `POST /ui/signin`: a token (or, on a host without tokens, over loopback, nothing: the
/// local administrator) opens a session. Bad tokens count against the address like the
/// API's, with the same lockout.
pub(super) async fn signin(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let lang = Lang::of(&headers);
    let nonce = cookie_value(&headers, SIGNIN_COOKIE);
    let sent = form.get("nonce").map(String::as_str).unwrap_or_default();
    if !nonce.is_some_and(|n| same_secret(&n, sent)) {
        return refusal(&st, lang, StatusCode::FORBIDDEN, "err.signin_csrf");
    }
    let mut q = HashMap::new();
    if let Some(n) = form.get("next") {
        q.insert("next".to_string(), n.clone());
    }
    let token = form
        .get("token")
        .map(|t| t.trim())
        .filter(|t| !t.is_empty());
    let Some(tokens) = super::tokens(&st).await else {
        return super::pages::signin_page(
            &st,
            lang,
            &q,
            Some("err.store".into()),
            StatusCode::SERVICE_UNAVAILABLE,
        )
        .await;
    };
    let mut auth = HeaderMap::new();
    if let Some(t) = token
        && let Ok(v) = HeaderValue::from_str(&format!("Bearer {t}"))
    {
        auth.insert(header::AUTHORIZATION, v);
    }
    let caller: Caller = match st.gate.check(peer.ip(), &auth, &tokens) {
        Ok(c) => c,
        Err(p) => {
            let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::UNAUTHORIZED);
            let text = if status == StatusCode::TOO_MANY_REQUESTS {
                p.detail
            } else {
                "err.bad_token".to_string()
            };
            return super::pages::signin_page(&st, lang, &q, Some(text), status).await;
        }
    };
    let local = caller.name == LOCAL_ACTOR && token.is_none();
    let (id, _) = match st
        .dashboard
        .sessions
        .open(caller, if local { None } else { token })
    {
        Ok(s) => s,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    };
    let next = form
        .get("next")
        .filter(|n| safe_next(n))
        .map_or("/ui/", String::as_str);
    let mut r = Redirect::to(next).into_response();
    set_cookie(
        &mut r,
        cookie(SESSION_COOKIE, id, st.dashboard.secure, None),
    );
    set_cookie(
        &mut r,
        cookie(
            SIGNIN_COOKIE,
            String::new(),
            st.dashboard.secure,
            Some(std::time::Duration::ZERO),
        ),
    );
    r
}

/// `POST /ui/signout`: ends the session.
pub(super) async fn signout(
    State(st): State<AppState>,
    v: Viewer,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if !csrf_ok(&v, &form) {
        return refusal(&st, v.lang, StatusCode::FORBIDDEN, "err.csrf");
    }
    st.dashboard.sessions.close(&v.session_id);
    let mut r = Redirect::to("/ui/signin").into_response();
    set_cookie(
        &mut r,
        cookie(
            SESSION_COOKIE,
            String::new(),
            st.dashboard.secure,
            Some(std::time::Duration::ZERO),
        ),
    );
    r
}

/// `GET /ui/lang/{code}?back=/ui/…`: the language switch (a year-long cookie); a preference,
/// not a change to the host, so a link rather than a form.
pub(super) async fn switch_language(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(code): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(lang) = Lang::from_code(&code) else {
        return refusal(
            &st,
            Lang::of(&headers),
            StatusCode::NOT_FOUND,
            "err.not_found",
        );
    };
    let back = q
        .get("back")
        .filter(|b| safe_next(b))
        .map_or("/ui/", String::as_str);
    let mut r = Redirect::to(back).into_response();
    set_cookie(
        &mut r,
        cookie(
            LANG_COOKIE,
            lang.code().to_string(),
            st.dashboard.secure,
            Some(std::time::Duration::from_secs(365 * 86_400)),
        ),
    );
    r
}

/// Back to `to` with notice `done` (a catalogue key the page shows).
fn done(to: &str, notice: &str) -> Response {
    let sep = if to.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{to}{sep}done={notice}")).into_response()
}

/// `POST /ui/jobs/{name}/do/{action}`: trigger, pause, resume, enable, disable (operator).
pub(super) async fn job_action(
    State(st): State<AppState>,
    v: Viewer,
    Path((name, action)): Path<(String, String)>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if !csrf_ok(&v, &form) {
        return refusal(&st, v.lang, StatusCode::FORBIDDEN, "err.csrf");
    }
    let back = format!("/ui/jobs/{}", encode(&name));
    let c = &v.caller;
    let result = match action.as_str() {
        "trigger" => super::super::jobs::trigger(&st, c, &name)
            .await
            .map(|fire| format!("trigger&fire={}", encode(&fire.to_string()))),
        "pause" => {
            let p = super::super::workflow::pause_now(c, form.get("reason").map(String::as_str));
            super::super::workflow::pause_job_as(&st, c, &name, p)
                .await
                .map(|()| "pause".to_string())
        }
        "resume" => super::super::workflow::resume_job_as(&st, c, &name)
            .await
            .map(|n| format!("resume&skipped={n}")),
        "enable" => super::super::jobs::enable(&st, c, &name, true)
            .await
            .map(|_| "enable".to_string()),
        "disable" => super::super::jobs::enable(&st, c, &name, false)
            .await
            .map(|_| "disable".to_string()),
        _ => {
            return refusal(&st, v.lang, StatusCode::NOT_FOUND, "err.no_such_action");
        }
    };
    match result {
        Ok(notice) => done(&back, &notice),
        Err(p) => problem_page(&st, &v, "jobs", p).await,
    }
}

/// `POST /ui/runs/{id}/cancel` (operator).
pub(super) async fn cancel(
    State(st): State<AppState>,
    v: Viewer,
    Path(id): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if !csrf_ok(&v, &form) {
        return refusal(&st, v.lang, StatusCode::FORBIDDEN, "err.csrf");
    }
    let reason = form
        .get("reason")
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    match super::super::runs::cancel(&st, &v.caller, id, reason).await {
        Ok(a) => {
            let notice = if a["cancelling"] == serde_json::json!(true) {
                "cancel_requested"
            } else {
                "cancelled"
            };
            done(&format!("/ui/runs/{id}"), notice)
        }
        Err(p) => problem_page(&st, &v, "runs", p).await,
    }
}

/// `POST /ui/jobs/{name}/edit` (admin): the edited JSON at the version it was read at —
/// the API's replace, so a stale version is refused (412) and shown with the text kept.
pub(super) async fn edit(
    State(st): State<AppState>,
    v: Viewer,
    Path(name): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if !csrf_ok(&v, &form) {
        return refusal(&st, v.lang, StatusCode::FORBIDDEN, "err.csrf");
    }
    if let Err(p) = v.caller.require(Role::Admin, "editing a job") {
        return problem_page(&st, &v, "jobs", p).await;
    }
    let text = form.get("definition").cloned().unwrap_or_default();
    let Some(version) = form
        .get("version")
        .and_then(|s| s.trim().parse::<u64>().ok())
    else {
        return refusal(&st, v.lang, StatusCode::BAD_REQUEST, "err.bad_version");
    };
    match super::super::jobs::replace(&st, &v.caller, &name, version, text.as_bytes()).await {
        Ok(_) => done(&format!("/ui/jobs/{}", encode(&name)), "edit"),
        Err(p) if p.status >= 500 => problem_page(&st, &v, "jobs", p).await,
        Err(p) => {
            let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::BAD_REQUEST);
            let job = match super::super::jobs::load(&st, &name).await {
                Ok(j) => j,
                Err(e) => return problem_page(&st, &v, "jobs", e).await,
            };
            let shown = match super::super::jobs::view(&st, &job).await {
                Ok(s) => s,
                Err(e) => return problem_page(&st, &v, "jobs", e).await,
            };
            let mut ctx = super::pages::edit_context(
                &job,
                &shown,
                Some(text),
                Some(serde_json::json!({
                    "status": p.status, "title": p.title, "detail": p.detail, "field": p.field,
                })),
            );
            // A stale edit keeps the version it was made at, so sending it again is refused
            // again until the user reloads the current definition.
            ctx["version"] = serde_json::json!(version);
            ctx["current_version"] = serde_json::json!(job.version);
            page(&st, &v, "jobs", "edit.html", status, ctx)
        }
    }
}
