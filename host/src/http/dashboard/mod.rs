//! The web dashboard (`/ui/…`), served by the API's server: server-rendered HTML
//! (minijinja templates), one small stylesheet and one small vanilla script, every byte
//! compiled into the binary (factory networks are offline: no CDN, no build step).
//!
//! - [`session`]: sign-in with a token into a server-side session (HttpOnly,
//!   SameSite=Strict cookie), expiry, sign-out, CSRF tokens.
//! - [`i18n`]: English and Simplified Chinese catalogues; `Accept-Language` decides, the
//!   switch's cookie overrides.
//! - `pages`: the pages (overview, jobs, job, runs, run, nodes, plugins, audit, edit).
//! - `actions`: the forms' POSTs (trigger, pause, resume, enable, disable, cancel, edit).
//!
//! **One source of truth.** Every page reads through the functions the JSON API's handlers
//! call (`jobs::view`, `runs::run_page`, `system::node_views`, the backend's `why` and
//! `audit`), and every button calls the API's own action functions (`jobs::trigger`,
//! `workflow::pause_job_as`, `runs::cancel`, `jobs::replace` …), which check the caller's
//! role and record the action: the dashboard has no SQL and no rule of its own, so what it
//! shows and does is exactly what `curl` against `/api/v1` would.
//!
//! **Roles.** A page shows only the buttons the session's role may use; the server checks
//! the role again on every POST (the action functions' `Caller::require`), so a hand-made
//! form gets 403 all the same.
//!
//! **Outage.** When the store cannot be read, a page is answered 503 with a banner saying
//! so (and what this node still knows: its running count and capacity), never a 500 page.

pub mod i18n;
pub mod session;

mod actions;
mod pages;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use minijinja::value::Kwargs;
use minijinja::{Environment, State};
use serde_json::{Value, json};
use takt_core::store::access::{ApiToken, Role};

use self::i18n::Lang;
use self::session::{SESSION_COOKIE, Session, Sessions, cookie_value};
use super::AppState;
use super::auth::Caller;
use super::problem::Problem;

/// The dashboard's part of a server: its templates and its sessions.
pub struct Dashboard {
    env: Environment<'static>,
    pub(crate) sessions: Sessions,
    /// Whether cookies are marked `Secure` (the server speaks TLS).
    secure: bool,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("sessions", &self.sessions.len())
            .field("secure", &self.secure)
            .finish()
    }
}

/// The templates, by name (the name's `.html` turns HTML escaping on).
const TEMPLATES: [(&str, &str); 13] = [
    ("base.html", include_str!("templates/base.html")),
    ("macros.html", include_str!("templates/macros.html")),
    ("signin.html", include_str!("templates/signin.html")),
    ("overview.html", include_str!("templates/overview.html")),
    ("jobs.html", include_str!("templates/jobs.html")),
    ("job.html", include_str!("templates/job.html")),
    ("edit.html", include_str!("templates/edit.html")),
    ("runs.html", include_str!("templates/runs.html")),
    ("run.html", include_str!("templates/run.html")),
    ("nodes.html", include_str!("templates/nodes.html")),
    ("plugins.html", include_str!("templates/plugins.html")),
    ("audit.html", include_str!("templates/audit.html")),
    ("error.html", include_str!("templates/error.html")),
];

/// The stylesheet and the script, served under `/ui/assets/`.
const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");

impl Dashboard {
    /// The dashboard of a server; `secure` when it serves HTTPS.
    pub fn new(secure: bool) -> Dashboard {
        let mut env = Environment::new();
        for (name, text) in TEMPLATES {
            // Compiled in and rendered by the tests: a template that does not parse is a
            // build defect, never a user's input.
            env.add_template(name, text)
                .unwrap_or_else(|e| panic!("the dashboard template {name} does not parse: {e}"));
        }
        env.add_function("t", translate);
        env.add_filter("seg", |s: String| encode(&s));
        env.add_filter("when", when);
        env.add_filter("clip", clip);
        env.add_filter("in_zone", in_zone);
        env.add_filter("dur", duration_ms);
        env.add_filter("age", age_secs);
        env.add_filter("pretty", |v: minijinja::Value| {
            serde_json::to_string_pretty(&v).unwrap_or_default()
        });
        Dashboard {
            env,
            sessions: Sessions::default(),
            secure,
        }
    }

    /// Renders template `name` with `ctx` (the page's data and the common parts).
    pub(crate) fn render(&self, name: &str, ctx: &Value) -> Result<String, minijinja::Error> {
        self.env.get_template(name)?.render(ctx)
    }
}

/// `t("key", n=3)`: the text of `key` in the page's language, `{n}` replaced.
fn translate(state: &State<'_, '_>, key: &str, args: Kwargs) -> Result<String, minijinja::Error> {
    let lang = state
        .lookup("lang")
        .and_then(|l| l.as_str().and_then(Lang::from_code))
        .unwrap_or(Lang::En);
    let mut text = lang.t(key).to_string();
    for name in args.args() {
        let v: minijinja::Value = args.get(name)?;
        text = text.replace(&format!("{{{name}}}"), &v.to_string());
    }
    Ok(text)
}

/// Percent-encodes `s` for a path segment or a query value (everything but unreserved).
pub(crate) fn encode(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// At most `n` characters of `s`, `…` marking a cut (the full text is on the detail page).
fn clip(s: Option<String>, n: usize) -> String {
    let s = s.unwrap_or_default();
    if s.chars().count() <= n {
        return s;
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `2026-12-02T06:00:00Z` → `2026-12-02 06:00:00 UTC` (the browser adds its own zone).
fn when(v: Option<String>) -> String {
    match v.as_deref().map(str::parse::<jiff::Timestamp>) {
        Some(Ok(t)) => t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        Some(Err(_)) => v.unwrap_or_default(),
        None => "–".to_string(),
    }
}

/// An instant in zone `tz`, with its offset: `2026-03-29 03:00:00 +02:00`.
fn in_zone(v: Option<String>, tz: Option<String>) -> String {
    let Some(Ok(t)) = v.as_deref().map(str::parse::<jiff::Timestamp>) else {
        return "–".to_string();
    };
    let zone = tz
        .as_deref()
        .and_then(|z| takt_core::schedule::Zone::get(z).ok())
        .unwrap_or_else(takt_core::schedule::Zone::utc);
    crate::inspect::local(t, &zone)
}

/// Milliseconds as `1.2 s`, `3 min 4 s`, `2 h 5 min`.
fn duration_ms(ms: Option<u64>) -> String {
    match ms {
        None => "–".to_string(),
        Some(ms) if ms < 1000 => format!("{ms} ms"),
        Some(ms) if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => age_secs(Some(ms as f64 / 1000.0)),
    }
}

/// Seconds as `4 s`, `3 min 4 s`, `2 h 5 min`, `3 d 2 h`.
fn age_secs(s: Option<f64>) -> String {
    let Some(s) = s else {
        return "–".to_string();
    };
    let s = s.max(0.0) as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The peer's address (unspecified when unknown, which is not loopback).
fn peer(parts: &Parts) -> IpAddr {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

/// The store's token list (through the gate's cache); `None` when the store cannot be read.
pub(crate) async fn tokens(st: &AppState) -> Option<Arc<Vec<ApiToken>>> {
    if let Some(t) = st.gate.cached() {
        return Some(t);
    }
    match st.backend.token_list().await {
        Ok(list) => Some(st.gate.remember(list)),
        Err(e) => {
            tracing::warn!("dashboard: cannot read the api tokens: {e}");
            None
        }
    }
}

/// A signed-in request: who, its session's CSRF token, its language and path.
pub(crate) struct Viewer {
    pub(crate) caller: Caller,
    pub(crate) session_id: String,
    pub(crate) csrf: String,
    pub(crate) lang: Lang,
    /// The path and query asked for (the language switch comes back to it).
    pub(crate) path: String,
}

impl Viewer {
    fn of(session_id: String, s: Session, lang: Lang, path: String) -> Viewer {
        Viewer {
            caller: s.caller,
            session_id,
            csrf: s.csrf,
            lang,
            path,
        }
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Viewer, Response> {
        let lang = Lang::of(&parts.headers);
        let path = parts
            .uri
            .path_and_query()
            .map_or("/ui/", |p| p.as_str())
            .to_string();
        let session = match cookie_value(&parts.headers, SESSION_COOKIE) {
            Some(id) => {
                let list = tokens(st).await;
                let loopback = peer(parts).is_loopback();
                st.dashboard
                    .sessions
                    .get(&id, list.as_deref().map(Vec::as_slice), loopback)
                    .map(|s| (id, s))
            }
            None => None,
        };
        match session {
            Some((id, s)) => Ok(Viewer::of(id, s, lang, path)),
            None if parts.method == Method::GET => {
                Err(Redirect::to(&format!("/ui/signin?next={}", encode(&path))).into_response())
            }
            None => Err(refusal(st, lang, StatusCode::FORBIDDEN, "err.no_session")),
        }
    }
}

/// The notices an action's redirect may ask a page to show (`?done=…`).
const NOTICES: [&str; 8] = [
    "trigger",
    "pause",
    "resume",
    "enable",
    "disable",
    "cancelled",
    "cancel_requested",
    "edit",
];

/// The `done` notice of a path's query, if it is one of [`NOTICES`].
fn notice_of(path: &str) -> Option<&'static str> {
    let query = path.split_once('?')?.1;
    let asked = query.split('&').find_map(|kv| kv.strip_prefix("done="))?;
    NOTICES.into_iter().find(|n| *n == asked)
}

/// The common part of every page's context.
fn base(v: &Viewer, nav: &str) -> Value {
    json!({
        "done": notice_of(&v.path),
        "lang": v.lang.code(),
        "langs": Lang::ALL.iter().map(|l| l.code()).collect::<Vec<_>>(),
        "me": {"name": v.caller.name, "role": v.caller.role.name()},
        "can_operate": v.caller.role.allows(Role::Operator),
        "can_admin": v.caller.role.allows(Role::Admin),
        "csrf": v.csrf,
        "path": v.path,
        "nav": nav,
        "version": env!("CARGO_PKG_VERSION"),
    })
}

/// Merges `data` into the common context.
fn context(v: &Viewer, nav: &str, data: Value) -> Value {
    let mut ctx = base(v, nav);
    if let (Some(c), Value::Object(d)) = (ctx.as_object_mut(), data) {
        c.extend(d);
    }
    ctx
}

/// An HTML answer with the dashboard's headers.
fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Renders page `tpl` for `v` (status `status`); a template error is logged and answered
/// as a plain 500 (it is a defect of takt, which the tests render every page to catch).
pub(crate) fn page(
    st: &AppState,
    v: &Viewer,
    nav: &str,
    tpl: &str,
    status: StatusCode,
    data: Value,
) -> Response {
    match st.dashboard.render(tpl, &context(v, nav, data)) {
        Ok(body) => html(status, body),
        Err(e) => {
            tracing::error!("dashboard: cannot render {tpl}: {e:#}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the dashboard page {tpl} could not be rendered: {e}"),
            )
                .into_response()
        }
    }
}

/// A problem as a page: 5xx (the store unreachable) as the outage banner with what this node
/// still knows, anything else as the problem's status with its detail.
pub(crate) async fn problem_page(st: &AppState, v: &Viewer, nav: &str, p: Problem) -> Response {
    let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if status.is_server_error() {
        let snap = st.backend.snapshot().await;
        return page(
            st,
            v,
            nav,
            "error.html",
            StatusCode::SERVICE_UNAVAILABLE,
            json!({
                "outage": p.detail,
                "running": snap.running,
                "capacity": snap.capacity,
            }),
        );
    }
    page(
        st,
        v,
        nav,
        "error.html",
        status,
        json!({"status": p.status, "title": p.title, "detail": p.detail}),
    )
}

/// A refusal before any session (no session, a bad CSRF token): a small page in `lang`.
pub(crate) fn refusal(st: &AppState, lang: Lang, status: StatusCode, key: &str) -> Response {
    let ctx = json!({
        "lang": lang.code(),
        "langs": Lang::ALL.iter().map(|l| l.code()).collect::<Vec<_>>(),
        "path": "/ui/",
        "status": status.as_u16(),
        "detail": lang.t(key),
        "version": env!("CARGO_PKG_VERSION"),
    });
    match st.dashboard.render("error.html", &ctx) {
        Ok(body) => html(status, body),
        Err(e) => (status, e.to_string()).into_response(),
    }
}

/// Whether a form's `csrf` field is the session's token (constant time).
pub(crate) fn csrf_ok(v: &Viewer, form: &std::collections::HashMap<String, String>) -> bool {
    form.get("csrf")
        .is_some_and(|c| session::same_secret(c, &v.csrf))
}

/// The dashboard's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(pages::overview))
        .route("/ui/signin", get(pages::signin_form).post(actions::signin))
        .route("/ui/signout", post(actions::signout))
        .route("/ui/lang/{code}", get(actions::switch_language))
        .route("/ui/assets/{file}", get(asset))
        .route("/ui/jobs", get(pages::jobs))
        .route("/ui/jobs/{name}", get(pages::job))
        .route(
            "/ui/jobs/{name}/edit",
            get(pages::edit_form).post(actions::edit),
        )
        .route("/ui/jobs/{name}/do/{action}", post(actions::job_action))
        .route("/ui/runs", get(pages::runs))
        .route("/ui/runs/{id}", get(pages::run))
        .route("/ui/runs/{id}/log", get(pages::log_tail))
        .route("/ui/runs/{id}/cancel", post(actions::cancel))
        .route("/ui/nodes", get(pages::nodes))
        .route("/ui/plugins", get(pages::plugins))
        .route("/ui/audit", get(pages::audit))
        .route("/ui/{*rest}", get(pages::not_found))
        .layer(axum::middleware::map_response(security_headers))
}

/// What every dashboard answer carries: no framing by other sites, no inline script or
/// style, nothing loaded from elsewhere, no referrer leaving the host.
async fn security_headers(mut r: Response) -> Response {
    let h: &mut HeaderMap = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// `/ui/assets/app.css` and `/ui/assets/app.js`, cached for a day (their URLs carry the
/// version, so an upgrade is fetched anew).
async fn asset(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    let (kind, body) = match file.as_str() {
        "app.css" => ("text/css; charset=utf-8", CSS),
        "app.js" => ("text/javascript; charset=utf-8", JS),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_the_templates_ask_for_is_in_the_catalogues() {
        let mut missing = Vec::new();
        // (The script shows no text of its own: the page gives it its words in data-*.)
        for (name, text) in TEMPLATES {
            for part in text.split("t(\"").skip(1) {
                let Some((key, _)) = part.split_once('"') else {
                    continue;
                };
                // `t("state." ~ s)`: a family, checked below.
                if !key.ends_with('.') && !Lang::En.catalogue().contains_key(key) {
                    missing.push(format!("{name}: {key}"));
                }
            }
        }
        // Keys the Rust code asks for.
        for key in actions::KEYS.iter().chain(pages::KEYS) {
            if !Lang::En.catalogue().contains_key(*key) {
                missing.push(format!("rust: {key}"));
            }
        }
        // The families the templates build keys of: every value they can meet.
        use takt_core::run::{RunState, SkipReason, Trigger};
        let mut family: Vec<String> = Vec::new();
        family.extend(RunState::ALL.iter().map(|s| format!("state.{}", s.name())));
        family.extend(SkipReason::ALL.iter().map(|s| format!("skip.{}", s.name())));
        family.extend(Trigger::ALL.iter().map(|t| format!("trigger.{}", t.name())));
        family.extend(
            [Role::Viewer, Role::Operator, Role::Admin]
                .iter()
                .map(|r| format!("role.{}", r.name())),
        );
        family.extend(Lang::ALL.iter().map(|l| format!("lang.{}", l.code())));
        family.extend(NOTICES.iter().map(|n| format!("done.{n}")));
        for s in [
            "enabled",
            "disabled",
            "paused",
            "expired",
            "not yet effective",
        ] {
            family.push(format!("jobstate.{s}"));
        }
        for s in ["serving", "draining", "drained"] {
            family.push(format!("plugin.{s}"));
        }
        for s in ["lease_expired", "node_restarted", "gap", "duplicate"] {
            family.push(format!("state.{s}"));
        }
        family.push("skip.unknown".into());
        for key in family {
            if !Lang::En.catalogue().contains_key(&key) {
                missing.push(format!("family: {key}"));
            }
        }
        assert!(missing.is_empty(), "keys missing from en.json: {missing:?}");
    }

    #[test]
    fn templates_parse_and_filters_format() {
        let _ = Dashboard::new(false);
        assert_eq!(encode("a b/c?d=é"), "a%20b%2Fc%3Fd%3D%C3%A9");
        assert_eq!(
            when(Some("2026-12-02T06:00:00Z".into())),
            "2026-12-02 06:00:00 UTC"
        );
        assert_eq!(
            in_zone(
                Some("2026-03-29T01:00:00Z".into()),
                Some("Europe/Berlin".into())
            ),
            "2026-03-29 03:00:00 +02:00"
        );
        assert_eq!(duration_ms(Some(250)), "250 ms");
        assert_eq!(clip(Some("abcdef".into()), 4), "abc…");
        assert_eq!(clip(Some("日报".into()), 4), "日报");
        assert_eq!(duration_ms(Some(1500)), "1.5 s");
        assert_eq!(age_secs(Some(3725.0)), "1 h 2 min");
    }
}
