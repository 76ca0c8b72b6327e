//! `takt runs`, `takt logs RUN_ID` and `takt cancel RUN_ID`: run history, run logs, and
//! cancelling a run wherever it runs.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::Args;
use serde_json::{Value, json};
use takt_core::job::{JobId, JobName};
use takt_core::run::{Run, RunId, RunState};
use takt_core::store::{CancelOutcome, LogLine, RunCursor, RunFilter, Store};

use super::db::{DbArg, block_on};
use super::table::Table;
use crate::store::AnyStore;

/// The widest error text shown in the table.
const ERROR_CHARS: usize = 60;
/// How often `takt logs --follow` polls.
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// Log lines read per query.
const LOG_PAGE: usize = 1000;

#[derive(Debug, Args)]
pub(super) struct RunsArgs {
    /// Only this job's runs.
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// Only runs in this state: pending, running, succeeded, failed, cancelled, timed_out, skipped.
    #[arg(long, value_name = "STATE")]
    state: Option<String>,
    /// The most runs to print.
    #[arg(
        long,
        default_value = "50",
        value_name = "N",
        allow_hyphen_values = true
    )]
    limit: String,
    /// Only runs whose fire time is at or after this time (RFC 3339, or `2026-12-01[T06:00]`
    /// taken as UTC).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    /// Only runs whose fire time is before this time.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// The next page: the runs after this cursor (printed under a full page, and as each run's
    /// `cursor` in JSON; the API's `next_cursor` is the same text).
    #[arg(long, value_name = "CURSOR", allow_hyphen_values = true)]
    before: Option<String>,
    /// Show this one run in full: its trigger, parent run, continuations, resolved params
    /// and attempts.
    #[arg(long, value_name = "RUN_ID", allow_hyphen_values = true, conflicts_with_all = ["job", "state", "from", "to", "before"])]
    id: Option<String>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

#[derive(Debug, Args)]
pub(super) struct LogsArgs {
    /// The run's id (see `takt runs`).
    #[arg(allow_hyphen_values = true)]
    run_id: String,
    /// Keep printing new lines (polling every 500 ms) until the run reaches a final state.
    #[arg(long)]
    follow: bool,
    /// Print JSON: one document, or with --follow one object per line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

fn truncate(text: &str, max: usize) -> String {
    let one_line = text.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut s: String = one_line.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

fn run_json(r: &Run, job: &str) -> Value {
    json!({
        "id": r.id.map(|i| i.0),
        "job_id": r.job_id.0,
        "job": job,
        "fire_time": r.fire_time.to_string(),
        "state": r.state.name(),
        "attempt": r.attempt,
        // How the run came to be; null for runs recorded before takt kept it (unknown).
        "trigger": r.trigger.map(|t| t.name()),
        "node": r.node_id.as_ref().map(|n| n.0.clone()),
        "created_at": r.created_at.to_string(),
        "started_at": r.started_at.map(|t| t.to_string()),
        "finished_at": r.finished_at.map(|t| t.to_string()),
        "elapsed_ms": r.elapsed.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        // A run waiting for its dependencies: state pending, what it waits for here (the
        // store keeps that text where the error goes, see `Run::waiting_for`).
        "waiting": r.is_waiting(),
        "waiting_for": r.waiting_for(),
        "error": if r.is_waiting() { None } else { r.error.as_deref() },
        "result": r.result_json.as_deref().and_then(|t| serde_json::from_str::<Value>(t).ok()),
        "skip_reason": r.skip_reason.map(|s| s.name()),
        "next_attempt_at": r.next_attempt_at.map(|t| t.to_string()),
        "lease_expires_at": r.lease_expires_at.map(|t| t.to_string()),
        "plugin": r.plugin.as_ref().map(|p| p.name.as_str()),
        "plugin_version": r.plugin.as_ref().map(|p| p.version.as_str()),
        "plugin_sha256": r.plugin.as_ref().and_then(|p| p.sha256.as_deref()),
        // A continuation's parent run; the params as resolved from their templates.
        "parent_run_id": r.parent_run_id.map(|p| p.0),
        "params_resolved": r
            .params_resolved
            .as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok()),
    })
}

/// The trigger column: a continuation names its parent run.
fn trigger_text(r: &Run) -> String {
    match (r.trigger, r.parent_run_id) {
        (Some(t), Some(p)) => format!("{t} of {p}"),
        (Some(t), None) => t.name().to_string(),
        (None, _) => "-".to_string(),
    }
}

fn elapsed_text(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// `takt runs --id RUN_ID`: one run with how it came to be and what it started.
fn one_run(store: &AnyStore, id: RunId, json_out: bool) -> Result<()> {
    let run = block_on(store.run_get(id))??
        .ok_or_else(|| anyhow!("run {id} does not exist; `takt runs` lists the runs"))?;
    let job = job_name(store, run.job_id)?;
    let children = block_on(store.run_children(id))??;
    let attempts = block_on(store.run_attempts(id))??;
    if json_out {
        let mut v = run_json(&run, &job);
        v["attempts"] = attempts
            .iter()
            .map(|a| serde_json::to_value(crate::inspect::AttemptView::from(a)))
            .collect::<Result<Vec<_>, _>>()?
            .into();
        v["continuations"] = children
            .iter()
            .map(
                |c| json!({"id": c.id.map(|i| i.0), "job_id": c.job_id.0, "state": c.state.name()}),
            )
            .collect::<Vec<_>>()
            .into();
        return outln!("{}", serde_json::to_string_pretty(&v)?);
    }
    let mut t = Table::new(["field", "value"]);
    let dash = || "-".to_string();
    t.row(["id".to_string(), id.to_string()]);
    t.row(["job".to_string(), job]);
    t.row(["fire time (UTC)".to_string(), run.fire_time.to_string()]);
    t.row(["state".to_string(), run.state.name().to_string()]);
    t.row(["trigger".to_string(), trigger_text(&run)]);
    t.row([
        "parent run".to_string(),
        run.parent_run_id.map_or_else(dash, |p| p.to_string()),
    ]);
    let kids: Vec<String> = children
        .iter()
        .filter_map(|c| {
            let name = job_name(store, c.job_id).ok()?;
            Some(format!("{} ({name}, {})", c.id?, c.state))
        })
        .collect();
    t.row([
        "continuations".to_string(),
        if kids.is_empty() {
            dash()
        } else {
            kids.join(", ")
        },
    ]);
    t.row(["attempt".to_string(), run.attempt.to_string()]);
    t.row([
        "node".to_string(),
        run.node_id.as_ref().map_or_else(dash, ToString::to_string),
    ]);
    t.row([
        "started".to_string(),
        run.started_at.map_or_else(dash, |t| t.to_string()),
    ]);
    t.row([
        "finished".to_string(),
        run.finished_at.map_or_else(dash, |t| t.to_string()),
    ]);
    t.row([
        "params (resolved)".to_string(),
        run.params_resolved.clone().unwrap_or_else(dash),
    ]);
    t.row(["error".to_string(), run.error.clone().unwrap_or_else(dash)]);
    t.row([
        "result".to_string(),
        run.result_json.clone().unwrap_or_else(dash),
    ]);
    out!("{}", t.render())
}

pub(super) fn runs(a: RunsArgs) -> Result<()> {
    if let Some(text) = &a.id {
        let id = RunId(super::args::number("--id", text, "a run id", 1)?);
        let store = a.db.open()?;
        return one_run(&store, id, a.json);
    }
    let limit = super::args::number("--limit", &a.limit, "a count", 1)?;
    let state = match &a.state {
        Some(s) => Some(RunState::from_name(s).ok_or_else(|| {
            anyhow!("--state: unknown run state \"{s}\"; use one of pending, running, succeeded, failed, cancelled, timed_out, skipped")
        })?),
        None => None,
    };
    let fire_from = a
        .from
        .as_deref()
        .map(|t| super::inspect::parse_bound("--from", t))
        .transpose()?;
    let fire_to =
        a.to.as_deref()
            .map(|t| super::inspect::parse_bound("--to", t))
            .transpose()?;
    if let (Some(f), Some(t)) = (fire_from, fire_to)
        && f >= t
    {
        anyhow::bail!("--from {f} is not before --to {t}; give a range whose start comes first");
    }
    let before = match &a.before {
        Some(c) => Some(RunCursor::parse(c).ok_or_else(|| {
            anyhow!(
                "--before \"{c}\" is not a run cursor; pass the cursor a previous page printed \
                 (<fire time in unix ms>.<run id>)"
            )
        })?),
        None => None,
    };
    let store = a.db.open()?;
    // Names are read per job met on the page, never the whole job list: a page of one job's
    // runs stays one indexed query however many jobs there are.
    let mut names: HashMap<JobId, String> = HashMap::new();
    let job = match &a.job {
        Some(name) => {
            let key = JobName::new(name).map_err(|e| anyhow!("--job: {e}"))?;
            let found = block_on(store.job_get_by_name(&key))??;
            let id = found.and_then(|j| j.id).ok_or_else(|| {
                anyhow!("--job: no job named \"{name}\"; takt job list shows the jobs")
            })?;
            names.insert(id, key.to_string());
            Some(id)
        }
        None => None,
    };
    let filter = RunFilter {
        job,
        state,
        fire_from,
        fire_to,
        before,
        limit,
    };
    let list = block_on(store.run_list(&filter))??;
    for r in &list {
        if let std::collections::hash_map::Entry::Vacant(e) = names.entry(r.job_id) {
            e.insert(job_name(&store, r.job_id)?);
        }
    }
    let name_of = |r: &Run| {
        names
            .get(&r.job_id)
            .cloned()
            .unwrap_or_else(|| r.job_id.to_string())
    };
    let next = (list.len() == limit)
        .then(|| list.last().and_then(RunCursor::of))
        .flatten();
    if a.json {
        let mut all: Vec<Value> = Vec::with_capacity(list.len());
        for r in &list {
            let mut v = run_json(r, &name_of(r));
            v["cursor"] = RunCursor::of(r).map(|c| c.to_string()).into();
            // Every attempt, read along the (run, attempt) key.
            let attempts = match r.id {
                Some(id) => block_on(store.run_attempts(id))??,
                None => Vec::new(),
            };
            v["attempts"] = attempts
                .iter()
                .map(|a| serde_json::to_value(crate::inspect::AttemptView::from(a)))
                .collect::<Result<Vec<_>, _>>()?
                .into();
            // The continuations its final state created, along the (parent run, job) key.
            let children = match r.id {
                Some(id) => block_on(store.run_children(id))??,
                None => Vec::new(),
            };
            v["continuations"] = children
                .iter()
                .filter_map(|c| c.id.map(|i| i.0))
                .collect::<Vec<_>>()
                .into();
            all.push(v);
        }
        outln!("{}", serde_json::to_string_pretty(&all)?)?;
        return Ok(());
    }
    if list.is_empty() {
        outln!("no runs")?;
        return Ok(());
    }
    let mut t = Table::new([
        "id",
        "job",
        "fire time (UTC)",
        "state",
        "trigger",
        "attempt",
        "node",
        "started",
        "elapsed",
        "error",
    ]);
    for r in &list {
        t.row([
            r.id.map_or("-".to_string(), |i| i.to_string()),
            name_of(r),
            r.fire_time.to_string(),
            if r.is_waiting() {
                "waiting".to_string()
            } else {
                r.state.name().to_string()
            },
            trigger_text(r),
            r.attempt.to_string(),
            r.node_id
                .as_ref()
                .map_or("-".to_string(), ToString::to_string),
            r.started_at.map_or("-".to_string(), |t| t.to_string()),
            r.elapsed.map_or("-".to_string(), elapsed_text),
            r.error
                .as_deref()
                .map_or(String::new(), |e| truncate(e, ERROR_CHARS)),
        ]);
    }
    out!("{}", t.render())?;
    if let Some(c) = next {
        outln!("more runs: add --before {c} for the next page")?;
    }
    Ok(())
}

/// The name of job `id` (its id when it is gone).
fn job_name(store: &AnyStore, id: JobId) -> Result<String> {
    Ok(block_on(store.job_get(id))??.map_or_else(|| id.to_string(), |j| j.name.to_string()))
}

fn get_run(store: &AnyStore, id: RunId) -> Result<Run> {
    block_on(store.run_get(id))??.ok_or_else(|| anyhow!("no run with id {id}"))
}

/// Every log line after `after`, in order.
fn read_lines(store: &AnyStore, id: RunId, mut after: Option<u64>) -> Result<Vec<(u64, LogLine)>> {
    let mut out = Vec::new();
    loop {
        let page = block_on(store.log_list(id, after, LOG_PAGE))??;
        let full = page.len() == LOG_PAGE;
        if let Some((seq, _)) = page.last() {
            after = Some(*seq);
        }
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

fn line_json(seq: u64, l: &LogLine) -> Value {
    json!({"seq": seq, "at": l.at.to_string(), "level": l.level.name(), "message": l.message})
}

fn line_text(l: &LogLine) -> String {
    format!("{}  {:<5}  {}", l.at, l.level.name(), l.message)
}

pub(super) fn logs(a: LogsArgs) -> Result<()> {
    let id = RunId(super::args::number("RUN_ID", &a.run_id, "a run id", 1)?);
    let store = a.db.open()?;
    let run = get_run(&store, id)?;
    if !a.follow {
        let lines = read_lines(&store, id, None)?;
        if a.json {
            let all: Vec<Value> = lines.iter().map(|(s, l)| line_json(*s, l)).collect();
            outln!("{}", serde_json::to_string_pretty(&all)?)?;
        } else if lines.is_empty() {
            outln!("no log lines for run {id} ({})", run.state.name())?;
        } else {
            for (_, l) in &lines {
                outln!("{}", line_text(l))?;
            }
        }
        return Ok(());
    }
    let mut after = None;
    loop {
        // Read the state first: lines written before the run became final are then all seen.
        let done = get_run(&store, id)?.state.is_final();
        for (seq, l) in read_lines(&store, id, after)? {
            after = Some(seq);
            if a.json {
                outln!("{}", line_json(seq, &l))?;
            } else {
                outln!("{}", line_text(&l))?;
            }
        }
        if done {
            return Ok(());
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

#[derive(Debug, Args)]
pub(super) struct CancelArgs {
    /// The run's id (see `takt runs`).
    #[arg(allow_hyphen_values = true)]
    run_id: String,
    /// Who asks [default: user@host of this command].
    #[arg(long, value_name = "WHO")]
    by: Option<String>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

/// `takt cancel RUN_ID`: a pending run is cancelled at once; a running one, on whichever node
/// runs it, through a request in the database that node obeys within about a second.
pub(super) fn cancel(a: CancelArgs) -> Result<()> {
    let id = RunId(super::args::number("RUN_ID", &a.run_id, "a run id", 1)?);
    let by = match &a.by {
        Some(b) if b.trim().is_empty() => {
            return Err(anyhow!(
                "--by is empty; give a name, or leave it out for user@host"
            ));
        }
        Some(b) => b.trim().to_string(),
        None => super::pause::operator(),
    };
    let store = a.db.open()?;
    let out = block_on(store.run_cancel(id, &by, takt_core::Timestamp::now()))?
        .map_err(|e| anyhow!("cannot cancel run {id}: {e}"))?;
    match out {
        CancelOutcome::Cancelled(run) => {
            if a.json {
                let job = job_name(&store, run.job_id)?;
                let mut v = run_json(&run, &job);
                v["cancel"] = json!("cancelled");
                return outln!("{}", serde_json::to_string_pretty(&v)?);
            }
            outln!("cancelled run {id} (it was pending; nothing had started)")
        }
        CancelOutcome::Requested { node, request } => {
            let node = node.map_or_else(|| "its node".to_string(), |n| format!("node {n}"));
            if a.json {
                return outln!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "id": id.0,
                        "cancel": "requested",
                        "node": node,
                        "requested_by": request.by,
                        "requested_at": request.at.to_string(),
                    }))?
                );
            }
            outln!(
                "asked {node} to cancel run {id} (requested by {} at {}); it stops within about \
                 a second and is recorded cancelled",
                request.by,
                request.at
            )
        }
    }
}
