//! Dynamic parameters (issue 15 item 7, seed 004 "动态设置执行参数"): a job's params are JSON
//! whose string values may be templates (minijinja), resolved by the host when a run's attempt
//! starts, before its handler is called, with the job's zone.
//!
//! * **Which strings.** Only string *values* (never keys) that contain `{{`, `{%` or `{#`; any
//!   other string, number or structure is passed on exactly as written (no escaping, no
//!   reformatting). A template always yields a string. A literal `{{` inside a template
//!   string is written `{{ "{{" }}` or inside `{% raw %}…{% endraw %}`.
//! * **Values** ([`Values`]): `fire_time`, `prev_fire_time` (the schedule's previous
//!   occurrence before the fire time), `last_success_fire_time` (the fire time of this job's
//!   latest succeeded run before this one — the start of an incremental data-sync window),
//!   `job`, `run_id`, `attempt`, and for a continuation `parent.run_id`, `parent.state`,
//!   `parent.result` (the parent's result JSON, parsed) and `parent.error`. Times are RFC 3339
//!   text in the job's zone (`2026-06-01T08:00:00+08:00`). A value that does not exist for
//!   this run (no previous fire, no success yet, not a continuation) is *undefined*: using it
//!   fails the run unless a `default` gives one (`{{ last_success_fire_time |
//!   default(fire_time | add("-1d")) }}`).
//! * **Filters** on times: `fmt("%Y-%m-%d %H:%M:%S")` (strftime, jiff's directives), `utc`
//!   (the same instant in UTC, written with `Z`; later filters stay in UTC), `add("-1h")`
//!   (a signed span in jiff's friendly form: `90s`, `-1h 30m`, `1d`, `-1 month`; days and
//!   longer are calendar units in the time's zone), `ms` (Unix milliseconds, as text).
//! * **Errors.** A syntax error is refused when the job is added or updated ([`check`]); an
//!   undefined value or a failing filter fails the run, not retried (the same params fail
//!   the same way), with the key path: `params.window.from: undefined value prev_fire_time2
//!   in template "{{ prev_fire_time2 }}"`.
//!
//! Why minijinja: it is already the alert webhooks' template engine (one syntax to learn),
//! pure Rust, sandboxed (no file or network access from a template), with a strict undefined
//! mode and the list of a template's undeclared variables, which the precise errors need.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, ZonedDateTime as Zoned};
use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior};
use serde_json::Value as Json;

/// What a template may use, for one attempt of one run.
#[derive(Clone, Debug)]
pub struct Values {
    /// The job's zone (times are shown and formatted in it).
    pub zone: TimeZone,
    /// The run's fire time.
    pub fire_time: Timestamp,
    /// The schedule's occurrence before the fire time, if any.
    pub prev_fire_time: Option<Timestamp>,
    /// The fire time of the job's latest succeeded run before this fire, if any.
    pub last_success_fire_time: Option<Timestamp>,
    /// The job's name.
    pub job: String,
    /// The run's id.
    pub run_id: i64,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// The parent run, for a continuation.
    pub parent: Option<Parent>,
}

/// The parent run of a continuation, as its template sees it.
#[derive(Clone, Debug)]
pub struct Parent {
    /// Its id.
    pub run_id: i64,
    /// Its final state (`succeeded`, `failed`, `timed_out`).
    pub state: String,
    /// Its result JSON, parsed (the text itself when it is not JSON).
    pub result: Option<Json>,
    /// Its error text.
    pub error: Option<String>,
}

/// The names a template may use at the top level.
const NAMES: [&str; 8] = [
    "fire_time",
    "prev_fire_time",
    "last_success_fire_time",
    "job",
    "run_id",
    "attempt",
    "parent",
    // Built-in functions a template may call.
    "range",
];

/// Whether `s` holds template syntax (and is therefore rendered).
pub fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

/// Whether any string value of `params_json` is a template (cheap test before any work).
pub fn has_templates(params_json: &str) -> bool {
    is_template(params_json)
}

/// Checks the syntax of every template in `params_json` (when a job is added or updated):
/// the first error names its key path.
pub fn check(params_json: &str) -> Result<(), String> {
    if !has_templates(params_json) {
        return Ok(());
    }
    let json: Json = serde_json::from_str(params_json)
        .map_err(|e| format!("params are not valid JSON ({e})"))?;
    let env = environment(TimeZone::UTC);
    walk(&json, &mut String::from("params"), &mut |path, s| {
        env.template_from_str(s)
            .map(|_| ())
            .map_err(|e| format!("{path}: {} in template {s:?}", describe(&e)))
    })
}

/// [`check`] for a job about to be stored: the error names the job.
pub fn check_job(job: &takt_core::job::JobDef) -> Result<(), String> {
    check(&job.params_json).map_err(|e| format!("job {}: {e}; fix the template", job.name))
}

/// The params with their templates resolved, or `None` when they hold none (the handler gets
/// the params as written). The error names the key path and what failed.
pub fn resolve(params_json: &str, values: &Values) -> Result<Option<String>, String> {
    if !has_templates(params_json) {
        return Ok(None);
    }
    let mut json: Json = serde_json::from_str(params_json)
        .map_err(|e| format!("params are not valid JSON ({e})"))?;
    let env = environment(values.zone.clone());
    let ctx = context(values);
    let mut changed = false;
    let mut path = String::from("params");
    render_all(&mut json, &mut path, &mut |path, s| {
        let tmpl = env
            .template_from_str(s)
            .map_err(|e| format!("{path}: {} in template {s:?}", describe(&e)))?;
        changed = true;
        tmpl.render(&ctx).map_err(|e| {
            // Strict mode says only "undefined value": name the first value this run lacks.
            match first_undefined(&tmpl.undeclared_variables(true), values) {
                Some(name) if e.kind() == ErrorKind::UndefinedError => format!(
                    "{path}: undefined value {name} in template {s:?}{}",
                    hint(&name)
                ),
                _ => format!("{path}: {} in template {s:?}", describe(&e)),
            }
        })
    })?;
    if !changed {
        return Ok(None);
    }
    serde_json::to_string(&json)
        .map(Some)
        .map_err(|e| format!("the resolved params cannot be written as JSON ({e})"))
}

/// The params of attempt `run.attempt` of run `id` of `job` with their templates resolved
/// (`Ok(None)`: no template, the params as written). Reads what the values need from `store`
/// only when there is a template. The error says whether trying again may help: a template
/// that fails fails the same way next time (not retryable); a store that could not be read
/// may answer next time (retryable).
pub async fn resolve_for_run<S: takt_core::store::Store>(
    store: &S,
    job: &takt_core::job::JobDef,
    run: &takt_core::run::Run,
    id: takt_core::run::RunId,
) -> Result<Option<String>, (String, bool)> {
    if !has_templates(&job.params_json) {
        return Ok(None);
    }
    let unreadable = |what: &str, e: takt_core::store::StoreError| {
        let retryable = e.is_retryable();
        (
            format!("the dynamic params could not be resolved: reading {what} failed ({e})"),
            retryable,
        )
    };
    let zone = job
        .schedule
        .as_ref()
        .map_or(TimeZone::UTC, |s| s.zone().time_zone().clone());
    // The previous occurrence that fires (skips of a DST gap passed over, bounded).
    let prev_fire_time = job.schedule.as_ref().and_then(|s| {
        let mut before = run.fire_time;
        for _ in 0..8 {
            let o = s.prev_before(before)?;
            if o.fires() {
                return Some(o.at);
            }
            before = o.at;
        }
        None
    });
    let last_success_fire_time = match job.id {
        Some(job_id) => store
            .run_last_success_fire(job_id, run.fire_time)
            .await
            .map_err(|e| unreadable("the job's last success", e))?,
        None => None,
    };
    let parent = match run.parent_run_id {
        Some(pid) => store
            .run_get(pid)
            .await
            .map_err(|e| unreadable("the parent run", e))?
            .map(|p| Parent {
                run_id: pid.0,
                state: p.state.name().to_string(),
                result: p.result_json.as_deref().map(|r| {
                    serde_json::from_str(r).unwrap_or_else(|_| Json::String(r.to_string()))
                }),
                error: p.error,
            }),
        None => None,
    };
    let values = Values {
        zone,
        fire_time: run.fire_time,
        prev_fire_time,
        last_success_fire_time,
        job: job.name.to_string(),
        run_id: id.0,
        attempt: run.attempt,
        parent,
    };
    resolve(&job.params_json, &values).map_err(|e| (e, false))
}

/// A template environment: strict about undefined values, with the time filters in `zone`.
fn environment(zone: TimeZone) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    let z = zone.clone();
    env.add_filter(
        "fmt",
        move |t: String, format: String| -> Result<String, Error> {
            let zoned = time_of(&t, &z)?;
            let mut out = String::new();
            write!(out, "{}", zoned.strftime(&format)).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    format!("fmt: {format:?} is not a valid strftime format"),
                )
            })?;
            Ok(out)
        },
    );
    let z = zone.clone();
    env.add_filter("utc", move |t: String| -> Result<String, Error> {
        Ok(utc_text(time_of(&t, &z)?.timestamp()))
    });
    let z = zone.clone();
    env.add_filter(
        "add",
        move |t: String, span: String| -> Result<String, Error> {
            let zoned = time_of(&t, &z)?;
            let parsed: Span = span.trim().parse().map_err(|e| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "add: {span:?} is not a span ({e}); write e.g. \"-1h\", \"90s\", \"1d\""
                    ),
                )
            })?;
            let moved = zoned.checked_add(parsed).map_err(|e| {
                Error::new(ErrorKind::InvalidOperation, format!("add: {span:?} ({e})"))
            })?;
            Ok(if t.ends_with('Z') {
                utc_text(moved.timestamp())
            } else {
                zone_text(&moved)
            })
        },
    );
    let z = zone;
    env.add_filter("ms", move |t: String| -> Result<String, Error> {
        Ok(time_of(&t, &z)?.timestamp().as_millisecond().to_string())
    });
    env
}

/// A time value (RFC 3339) in its zone: UTC when written with `Z` (after `utc`), else the
/// job's zone.
fn time_of(t: &str, zone: &TimeZone) -> Result<Zoned, Error> {
    let ts: Timestamp = t.parse().map_err(|e| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "{t:?} is not a time ({e}); time filters apply to fire_time and the other times"
            ),
        )
    })?;
    Ok(if t.ends_with('Z') {
        ts.to_zoned_datetime(TimeZone::UTC)
    } else {
        ts.to_zoned_datetime(zone.clone())
    })
}

fn utc_text(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn zone_text(z: &Zoned) -> String {
    z.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
}

/// The template context of `values` (absent values left out: undefined).
fn context(values: &Values) -> Value {
    let at = |t: Timestamp| Value::from(zone_text(&t.to_zoned_datetime(values.zone.clone())));
    let mut map = std::collections::BTreeMap::new();
    map.insert("fire_time", at(values.fire_time));
    if let Some(t) = values.prev_fire_time {
        map.insert("prev_fire_time", at(t));
    }
    if let Some(t) = values.last_success_fire_time {
        map.insert("last_success_fire_time", at(t));
    }
    map.insert("job", Value::from(values.job.clone()));
    map.insert("run_id", Value::from(values.run_id));
    map.insert("attempt", Value::from(values.attempt));
    if let Some(p) = &values.parent {
        let mut parent = std::collections::BTreeMap::new();
        parent.insert("run_id", Value::from(p.run_id));
        parent.insert("state", Value::from(p.state.clone()));
        if let Some(r) = &p.result {
            parent.insert("result", Value::from_serialize(r));
        }
        if let Some(e) = &p.error {
            parent.insert("error", Value::from(e.clone()));
        }
        map.insert("parent", Value::from_serialize(&parent));
    }
    Value::from_serialize(&map)
}

/// The first name a template uses that this run does not define (`parent.run_id` style for
/// the parent's fields), if any.
fn first_undefined(used: &std::collections::HashSet<String>, values: &Values) -> Option<String> {
    let used: BTreeSet<&String> = used.iter().collect();
    for name in used {
        let top = name.split('.').next().unwrap_or(name);
        let defined = match top {
            "fire_time" | "job" | "run_id" | "attempt" | "range" => true,
            "prev_fire_time" => values.prev_fire_time.is_some(),
            "last_success_fire_time" => values.last_success_fire_time.is_some(),
            "parent" => match (&values.parent, name.split('.').nth(1)) {
                (None, _) => false,
                (Some(_), None | Some("run_id" | "state")) => true,
                (Some(p), Some("result")) => p.result.is_some(),
                (Some(p), Some("error")) => p.error.is_some(),
                (Some(_), Some(_)) => false,
            },
            _ => false,
        };
        if !defined {
            return Some(name.clone());
        }
    }
    None
}

/// Why a name may be undefined, for the error.
fn hint(name: &str) -> String {
    let top = name.split('.').next().unwrap_or(name);
    match top {
        "prev_fire_time" => {
            "; this run has no previous scheduled fire: give one with | default(…)".into()
        }
        "last_success_fire_time" => {
            "; the job has no successful run before this one yet: give one with | default(…)".into()
        }
        "parent" => {
            "; only a continuation run (on_success / on_failure of another job) has a parent \
             with run_id, state and, when recorded, result and error"
                .into()
        }
        _ if NAMES.contains(&top) => String::new(),
        _ => format!("; the values are {}", NAMES[..7].join(", ")),
    }
}

/// An error's kind and detail, lowercase, without minijinja's template name.
fn describe(e: &Error) -> String {
    let mut text = match e.detail() {
        Some(d) => format!("{}: {d}", kind_text(e.kind())),
        None => kind_text(e.kind()).to_string(),
    };
    if let Some(line) = e.line() {
        let _ = write!(text, " (line {line})");
    }
    text
}

fn kind_text(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::SyntaxError => "template syntax error",
        ErrorKind::UndefinedError => "undefined value",
        ErrorKind::UnknownFilter => "unknown filter (the time filters are fmt, utc, add, ms)",
        ErrorKind::UnknownFunction => "unknown function",
        ErrorKind::InvalidOperation => "invalid operation",
        ErrorKind::MissingArgument => "missing argument",
        ErrorKind::TooManyArguments => "too many arguments",
        ErrorKind::BadSerialization => "value cannot be written",
        _ => "template error",
    }
}

/// Calls `f` on every string value of `json` with its key path (`params.a.b[2]`).
fn walk(
    json: &Json,
    path: &mut String,
    f: &mut dyn FnMut(&str, &str) -> Result<(), String>,
) -> Result<(), String> {
    match json {
        Json::String(s) if is_template(s) => f(path, s),
        Json::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                walk(item, path, f)?;
                path.truncate(len);
            }
            Ok(())
        }
        Json::Object(map) => {
            for (k, v) in map {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                walk(v, path, f)?;
                path.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Replaces every template string of `json` with what `f` renders from it.
fn render_all(
    json: &mut Json,
    path: &mut String,
    f: &mut dyn FnMut(&str, &str) -> Result<String, String>,
) -> Result<(), String> {
    match json {
        Json::String(s) if is_template(s) => {
            *s = f(path, s)?;
            Ok(())
        }
        Json::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                render_all(item, path, f)?;
                path.truncate(len);
            }
            Ok(())
        }
        Json::Object(map) => {
            for (k, v) in map.iter_mut() {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                render_all(v, path, f)?;
                path.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn values() -> Values {
        Values {
            zone: TimeZone::get("Asia/Shanghai").unwrap(),
            fire_time: ts("2026-06-01T00:00:00Z"),
            prev_fire_time: Some(ts("2026-05-31T23:00:00Z")),
            last_success_fire_time: None,
            job: "sync".into(),
            run_id: 42,
            attempt: 2,
            parent: None,
        }
    }

    fn one(template: &str, v: &Values) -> Result<String, String> {
        let json = serde_json::json!({ "v": template }).to_string();
        let out = resolve(&json, v)?.expect("a template");
        let parsed: Json = serde_json::from_str(&out).unwrap();
        Ok(parsed["v"].as_str().unwrap().to_string())
    }

    #[test]
    fn values_and_filters_in_the_jobs_zone() {
        let v = values();
        assert_eq!(
            one("{{ fire_time }}", &v).unwrap(),
            "2026-06-01T08:00:00+08:00"
        );
        assert_eq!(
            one("{{ fire_time | fmt('%Y-%m-%d %H:%M:%S') }}", &v).unwrap(),
            "2026-06-01 08:00:00"
        );
        assert_eq!(
            one("{{ fire_time | utc }}", &v).unwrap(),
            "2026-06-01T00:00:00Z"
        );
        assert_eq!(
            one("{{ fire_time | utc | fmt('%H:%M') }}", &v).unwrap(),
            "00:00",
            "after utc, formatting stays in UTC"
        );
        assert_eq!(
            one("{{ fire_time | add('-1h') | fmt('%H') }}", &v).unwrap(),
            "07"
        );
        assert_eq!(
            one("{{ fire_time | add('-1d') | fmt('%Y-%m-%d') }}", &v).unwrap(),
            "2026-05-31"
        );
        assert_eq!(
            one("{{ prev_fire_time | fmt('%H:%M') }}", &v).unwrap(),
            "07:00"
        );
        assert_eq!(one("{{ fire_time | ms }}", &v).unwrap(), "1780272000000");
        assert_eq!(
            one("{{ job }}#{{ run_id }}/{{ attempt }}", &v).unwrap(),
            "sync#42/2"
        );
        assert_eq!(
            one(
                "{{ last_success_fire_time | default(fire_time | add('-1d')) | fmt('%d') }}",
                &v
            )
            .unwrap(),
            "31",
            "an absent value with a default"
        );
        assert_eq!(
            one("{{ '{{' }} x }}", &v).unwrap(),
            "{{ x }}",
            "a literal {{"
        );
        assert_eq!(
            one("{% raw %}{{ x }}{% endraw %}", &v).unwrap(),
            "{{ x }}",
            "raw blocks"
        );
    }

    #[test]
    fn strings_without_templates_and_other_values_are_untouched() {
        let v = values();
        let json = r#"{"a":"<b>&amp;</b>","n":1.50,"l":[true,null]}"#;
        assert_eq!(resolve(json, &v).unwrap(), None, "nothing to resolve");
        let json = r#"{"a":"<b>&</b> {{ job }}","k{{x}}":"plain","n":[1,"{{ attempt }}"]}"#;
        let out: Json = serde_json::from_str(&resolve(json, &v).unwrap().unwrap()).unwrap();
        assert_eq!(out["a"], "<b>&</b> sync", "no html escaping");
        assert_eq!(out["k{{x}}"], "plain", "keys are never templates");
        assert_eq!(out["n"], serde_json::json!([1, "2"]));
    }

    #[test]
    fn continuation_values() {
        let mut v = values();
        v.parent = Some(Parent {
            run_id: 7,
            state: "succeeded".into(),
            result: Some(serde_json::json!({"rows": 12})),
            error: None,
        });
        assert_eq!(
            one(
                "{{ parent.run_id }} {{ parent.state }} {{ parent.result.rows }}",
                &v
            )
            .unwrap(),
            "7 succeeded 12"
        );
        let e = one("{{ parent.error }}", &v).unwrap_err();
        assert!(
            e.starts_with("params.v: undefined value parent.error"),
            "{e}"
        );
    }

    #[test]
    fn undefined_values_name_the_key_path_and_the_value() {
        let v = values();
        let json = r#"{"window":{"from":"{{ prev_fire_time2 }}"}}"#;
        let e = resolve(json, &v).unwrap_err();
        assert!(
            e.starts_with(
                "params.window.from: undefined value prev_fire_time2 in template \"{{ prev_fire_time2 }}\""
            ),
            "{e}"
        );
        assert!(e.contains("the values are fire_time"), "{e}");
        let e = resolve(r#"{"a":["x","{{ last_success_fire_time }}"]}"#, &v).unwrap_err();
        assert!(
            e.starts_with("params.a[1]: undefined value last_success_fire_time"),
            "{e}"
        );
        assert!(e.contains("default("), "{e}");
        let e = resolve(r#"{"p":"{{ parent.run_id }}"}"#, &v).unwrap_err();
        assert!(e.contains("only a continuation run"), "{e}");
    }

    #[test]
    fn template_errors_name_the_key_path() {
        let v = values();
        let e = resolve(r#"{"a":"{{ fire_time | add('soon') }}"}"#, &v).unwrap_err();
        assert!(
            e.starts_with("params.a: invalid operation: add: \"soon\" is not a span"),
            "{e}"
        );
        let e = resolve(r#"{"a":"{{ job | fmt('%Y') }}"}"#, &v).unwrap_err();
        assert!(e.contains("\"sync\" is not a time"), "{e}");
        let e = resolve(r#"{"a":"{{ fire_time | nope }}"}"#, &v).unwrap_err();
        assert!(e.starts_with("params.a: unknown filter"), "{e}");
    }

    #[test]
    fn syntax_is_checked_when_a_job_is_stored() {
        assert_eq!(
            check(r#"{"a":"plain","b":"{{ fire_time | fmt('%H') }}"}"#),
            Ok(())
        );
        let e = check(r#"{"x":{"y":"{{ fire_time "}}"#).unwrap_err();
        assert!(e.starts_with("params.x.y: template syntax error"), "{e}");
        let e = check(r#"{"l":["{% if %}"]}"#).unwrap_err();
        assert!(e.starts_with("params.l[0]: template syntax error"), "{e}");
    }
}
