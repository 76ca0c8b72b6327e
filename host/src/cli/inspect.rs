//! `takt why` and `takt audit`: printers over [`crate::inspect`] (read-only; they open the
//! database like every reading command and create nothing).

use anyhow::{Result, anyhow, bail};
use clap::Args;
use jiff::Timestamp;
use takt_core::job::JobName;

use super::db::{DbArg, block_on};
use super::table::Table;
use crate::inspect::audit::{AuditRequest, audit};
use crate::inspect::why::{At, why};
use crate::store::AnyStore;

#[derive(Debug, Args)]
pub(super) struct WhyArgs {
    /// The job's name.
    job: String,
    /// Ask about this instant instead of the next fire: RFC 3339 (2026-03-29T01:30:00Z,
    /// …+08:00), or a wall-clock time in the job's zone (2026-03-29T02:30).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    at: Option<String>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

#[derive(Debug, Args)]
pub(super) struct AuditArgs {
    /// Only this job (default: every job).
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// Fire times from (inclusive): RFC 3339, or a date / date-time taken as UTC.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: String,
    /// Fire times to (exclusive): RFC 3339, or a date / date-time taken as UTC.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

fn job_name(flag: &str, text: &str) -> Result<JobName> {
    JobName::new(text).map_err(|e| anyhow!("{flag}: {e}"))
}

fn parse_at(text: &str) -> Result<At> {
    crate::inspect::parse_at("--at", text).map_err(anyhow::Error::msg)
}

/// `--from` / `--to`: an instant, or a date(-time) in UTC (the API reads them alike).
pub(super) fn parse_bound(flag: &str, text: &str) -> Result<Timestamp> {
    crate::inspect::parse_bound(flag, text).map_err(anyhow::Error::msg)
}

/// The present: the database's clock where it has one shared by every node.
fn now(store: &AnyStore) -> Result<Timestamp> {
    Ok(block_on(store.database_now())??.unwrap_or_else(Timestamp::now))
}

pub(super) fn why_cmd(a: WhyArgs) -> Result<()> {
    let name = job_name("JOB", &a.job)?;
    let at = a.at.as_deref().map(parse_at).transpose()?;
    let store = a.db.open()?;
    let now = now(&store)?;
    let r = block_on(why(&store, &name, at, now))??;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?)?;
        return Ok(());
    }
    outln!("{}", r.conclusion)?;
    outln!()?;
    outln!(
        "schedule:  {}",
        r.schedule.as_deref().unwrap_or("none (triggered only)")
    )?;
    if let Some(at) = &r.at {
        outln!("asked:     {} ({} UTC)", at.local, at.instant)?;
        for s in &at.schedule {
            outln!("  - {s}")?;
        }
        if let Some(p) = &at.previous_fire {
            outln!("previous fire: {} ({} UTC)", p.local, p.utc)?;
        }
        if let Some(n) = &at.next_fire {
            outln!("next fire:     {} ({} UTC)", n.local, n.utc)?;
        }
        if let Some(run) = &at.run {
            outln!(
                "run {}: {} (attempt {}){}{}",
                run.id,
                run.state,
                run.attempt,
                run.skip_reason
                    .map(|s| format!(", skipped: {s}"))
                    .unwrap_or_default(),
                run.error
                    .as_deref()
                    .map(|e| format!(", {e}"))
                    .unwrap_or_default()
            )?;
        }
        if !at.attempts.is_empty() {
            out!("{}", attempts_table(&at.attempts).render())?;
        }
        return Ok(());
    }
    match &r.next_fire {
        Some(n) => outln!("next fire: {} ({} UTC), zone {}", n.local, n.utc, r.zone)?,
        None => outln!("next fire: none")?,
    }
    if r.reasons.is_empty() {
        outln!("nothing the store records stands in its way")?;
    } else {
        outln!("reasons it might not run:")?;
        for reason in &r.reasons {
            outln!(
                "  - [{}] {}{}",
                reason.code,
                reason.text,
                if reason.blocks {
                    ""
                } else {
                    " (may delay or change it)"
                }
            )?;
        }
    }
    for e in &r.evidence {
        outln!("{e}")?;
    }
    Ok(())
}

fn attempts_table(list: &[crate::inspect::AttemptView]) -> Table {
    let mut t = Table::new([
        "attempt", "node", "instance", "started", "finished", "outcome", "error",
    ]);
    for a in list {
        t.row([
            a.attempt.to_string(),
            a.node.clone(),
            a.instance.clone().unwrap_or_else(|| "-".into()),
            a.started_at.clone(),
            a.finished_at.clone().unwrap_or_else(|| "-".into()),
            a.outcome.unwrap_or("-").to_string(),
            a.error.clone().unwrap_or_default(),
        ]);
    }
    t
}

pub(super) fn audit_cmd(a: AuditArgs) -> Result<()> {
    let job = a.job.as_deref().map(|j| job_name("--job", j)).transpose()?;
    let from = parse_bound("--from", &a.from)?;
    let to = parse_bound("--to", &a.to)?;
    if from >= to {
        bail!("--from {from} is not before --to {to}; give a range whose start comes first");
    }
    let store = a.db.open()?;
    let now = now(&store)?;
    let r = block_on(audit(&store, &AuditRequest { job, from, to, now }))??;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?)?;
    } else {
        outln!(
            "{} in {} .. {}: {} gap{}, {} duplicate{}",
            if r.clean() { "clean" } else { "NOT CLEAN" },
            r.from,
            r.to,
            r.gaps,
            if r.gaps == 1 { "" } else { "s" },
            r.duplicates,
            if r.duplicates == 1 { "" } else { "s" }
        )?;
        let mut t = Table::new([
            "job",
            "expected",
            "ran",
            "skipped",
            "other",
            "gaps",
            "duplicates",
        ]);
        for j in &r.jobs {
            t.row([
                j.job.clone(),
                j.expected.to_string(),
                j.ran.to_string(),
                j.skipped.to_string(),
                j.other_runs.to_string(),
                j.gaps.len().to_string(),
                j.duplicates.len().to_string(),
            ]);
        }
        out!("{}", t.render())?;
        for j in &r.jobs {
            for g in &j.gaps {
                outln!(
                    "gap: {} at {} ({}){}",
                    j.job,
                    g.fire_time,
                    g.local,
                    g.evidence
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                )?;
            }
            for d in &j.duplicates {
                outln!(
                    "duplicate: {} run {} at {}: {}",
                    j.job,
                    d.run_id,
                    d.fire_time,
                    d.why
                )?;
            }
            for n in &j.notes {
                outln!("note: {}: {n}", j.job)?;
            }
        }
        for l in &r.limits {
            outln!("limit: {l}")?;
        }
    }
    if !r.clean() {
        bail!(
            "audit found {} gap{} and {} duplicate{} in {} .. {}",
            r.gaps,
            if r.gaps == 1 { "" } else { "s" },
            r.duplicates,
            if r.duplicates == 1 { "" } else { "s" },
            r.from,
            r.to
        );
    }
    Ok(())
}
