//! `takt schedule next` and `takt cron explain`.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use takt_core::Timestamp;
use takt_core::schedule::{
    FoldPolicy, GapPolicy, Occurrence, OccurrenceKind, Rule, Schedule, SkipReason, format_duration,
    format_offset, tzdb_version,
};

use super::table::Table;
use crate::spec::{CalendarSpec, ScheduleSpec, parse_instant};

/// The most occurrences one call prints; enough for a year of hourly fires.
const MAX_COUNT: usize = 10_000;

#[derive(Debug, Subcommand)]
pub(super) enum ScheduleCmd {
    /// Print the next fire times of a schedule (UTC and local) and its description.
    Next(NextArgs),
}

#[derive(Debug, Subcommand)]
pub(super) enum CronCmd {
    /// Print the next fire times of a cron expression and its description.
    Explain {
        /// The cron expression (5, 6 or 7 fields, or a macro such as @daily).
        expr: String,
        #[command(flatten)]
        opts: Options,
    },
}

#[derive(Debug, Args)]
pub(super) struct NextArgs {
    #[command(flatten)]
    rule: RuleArgs,
    #[command(flatten)]
    opts: Options,
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct RuleArgs {
    /// A cron expression: `*/5 * * * *`, `0 30 9 * * MON-FRI`, `0 2 L * *`, `@daily`.
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,
    /// A calendar schedule: `weekly mon-fri every 1h between 06:00-22:30`.
    #[arg(long, value_name = "SPEC")]
    calendar: Option<String>,
    /// A fixed interval of elapsed time: `90s`, `5m`, `1h30m`.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    every: Option<String>,
    /// Once, at an instant (`2026-12-01T06:00:00Z`) or a wall-clock time in --tz.
    #[arg(long, value_name = "INSTANT")]
    at: Option<String>,
    /// A whole schedule as JSON or TOML text, or `@FILE` to read it from a file.
    #[arg(long, value_name = "JSON|TOML|@FILE")]
    spec: Option<String>,
}

#[derive(Debug, Args)]
pub(super) struct Options {
    /// IANA time zone the schedule is read in [default: UTC].
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// Start after this instant (or wall-clock time in --tz) [default: now].
    #[arg(long, value_name = "INSTANT")]
    from: Option<String>,
    /// How many occurrences to print (1 to 10000).
    #[arg(
        short = 'n',
        long = "count",
        default_value = "10",
        value_name = "N",
        allow_hyphen_values = true
    )]
    count: String,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Cron only: how day-of-month and day-of-week combine when both are set.
    #[arg(long, value_name = "or|and")]
    day_match: Option<String>,
    /// Wall-clock times in a DST gap: shift to the end of the gap, or skip (reported).
    #[arg(long, value_name = "shift|skip")]
    dst_gap: Option<String>,
    /// Wall-clock times in a DST fold: auto (fixed times once, intervals both), once, both.
    #[arg(long, value_name = "auto|once|both")]
    dst_fold: Option<String>,
    /// --every only: the instant the interval counts from [default: the Unix epoch].
    #[arg(long, value_name = "INSTANT")]
    anchor: Option<String>,
}

pub(super) fn run(cmd: ScheduleCmd) -> Result<()> {
    match cmd {
        ScheduleCmd::Next(args) => {
            if let Some(e) = &args.rule.every {
                super::args::not_negative("--every", e)?;
            }
            let mut spec = match &args.rule.spec {
                Some(text) => read_spec(text)?,
                None => ScheduleSpec {
                    cron: args.rule.cron.clone(),
                    calendar: args.rule.calendar.clone().map(CalendarSpec::Text),
                    every: args.rule.every.clone(),
                    at: args.rule.at.clone(),
                    ..ScheduleSpec::default()
                },
            };
            apply_options(&mut spec, &args.opts);
            next(&spec, &args.opts)
        }
    }
}

pub(super) fn run_cron(cmd: CronCmd) -> Result<()> {
    match cmd {
        CronCmd::Explain { expr, opts } => {
            let mut spec = ScheduleSpec {
                cron: Some(expr),
                ..ScheduleSpec::default()
            };
            apply_options(&mut spec, &opts);
            next(&spec, &opts)
        }
    }
}

fn read_spec(text: &str) -> Result<ScheduleSpec> {
    let body = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read schedule spec file {path}"))?,
        None => text.to_string(),
    };
    Ok(ScheduleSpec::parse(&body)?)
}

/// Command-line flags win over the same keys in a --spec document.
fn apply_options(spec: &mut ScheduleSpec, o: &Options) {
    let set = |slot: &mut Option<String>, v: &Option<String>| {
        if v.is_some() {
            slot.clone_from(v);
        }
    };
    set(&mut spec.tz, &o.tz);
    set(&mut spec.day_match, &o.day_match);
    set(&mut spec.dst_gap, &o.dst_gap);
    set(&mut spec.dst_fold, &o.dst_fold);
    set(&mut spec.anchor, &o.anchor);
}

fn next(spec: &ScheduleSpec, o: &Options) -> Result<()> {
    let count = super::args::number("-n", &o.count, "a count", 0)?;
    if count == 0 || count > MAX_COUNT {
        bail!("-n must be between 1 and {MAX_COUNT}, got {count}");
    }
    let schedule = spec.to_schedule().context("invalid schedule")?;
    let from = match &o.from {
        Some(f) => parse_instant(f, schedule.zone()).map_err(|e| anyhow::anyhow!("--from: {e}"))?,
        None => Timestamp::now(),
    };
    let occurrences: Vec<Occurrence> = schedule.iter_after(from).take(count).collect();
    if o.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&as_json(&schedule, from, &occurrences))?
        )?;
    } else {
        out!("{}", as_text(&schedule, from, &occurrences))?;
    }
    Ok(())
}

fn rule_text(s: &Schedule) -> (&'static str, String) {
    match s.rule() {
        Rule::Cron(c) => ("cron", c.to_string()),
        Rule::Calendar(c) => ("calendar", c.to_string()),
        // `describe` says "every 5m": the kind already says "every".
        Rule::Interval(i) if i.anchor() == Timestamp::UNIX_EPOCH => {
            ("every", format_duration(i.period_seconds()))
        }
        Rule::Interval(i) => (
            "every",
            format!(
                "{} from {}",
                format_duration(i.period_seconds()),
                i.anchor()
            ),
        ),
        Rule::Once(t) => ("at", t.to_string()),
        _ => ("rule", String::new()),
    }
}

fn interval_like(s: &Schedule) -> Option<bool> {
    match s.rule() {
        Rule::Cron(c) => Some(c.is_interval_like()),
        Rule::Calendar(c) => Some(c.is_interval_like()),
        _ => None,
    }
}

/// How the fold policy resolves for this schedule, in words.
fn fold_effect(s: &Schedule) -> &'static str {
    match (s.dst().fold, interval_like(s)) {
        (_, None) => "not applicable (elapsed time)",
        (FoldPolicy::Once, _) | (FoldPolicy::Auto, Some(false)) => "fire once (first pass)",
        (FoldPolicy::Both, _) | (FoldPolicy::Auto, Some(true)) => "fire in both passes",
    }
}

fn gap_effect(s: &Schedule) -> &'static str {
    match (s.dst().gap, interval_like(s)) {
        (_, None) => "not applicable (elapsed time)",
        (GapPolicy::Shift, _) => "shift to the first instant after the gap",
        (GapPolicy::Skip, _) => "skip, and report the skip",
    }
}

fn kind_str(o: &Occurrence) -> &'static str {
    match o.kind {
        OccurrenceKind::Fire => "fire",
        OccurrenceKind::FireShifted => "shifted",
        OccurrenceKind::Skipped(_) => "skipped",
    }
}

fn note(o: &Occurrence) -> String {
    match o.kind {
        OccurrenceKind::Fire => String::new(),
        OccurrenceKind::FireShifted => {
            format!(
                "shifted from {} (dst gap)",
                o.nominal.to_string().replace('T', " ")
            )
        }
        OccurrenceKind::Skipped(SkipReason::DstGap) => format!(
            "skipped {}: does not exist (dst gap)",
            o.nominal.to_string().replace('T', " ")
        ),
        OccurrenceKind::Skipped(_) => format!("skipped {}", o.nominal),
    }
}

fn local_text(o: &Occurrence) -> String {
    format!(
        "{} {}",
        o.local().to_string().replace('T', " "),
        format_offset(o.offset_seconds)
    )
}

fn as_text(s: &Schedule, from: Timestamp, occ: &[Occurrence]) -> String {
    let (kind, text) = rule_text(s);
    let mut head = Table::new(["schedule", &format!("{kind} {text}")]);
    head.row(["meaning", &s.describe()]);
    head.row(["zone", &format!("{} (tzdb {})", s.zone(), tzdb_version())]);
    head.row(["dst gaps", gap_effect(s)]);
    head.row(["dst folds", fold_effect(s)]);
    head.row(["from", &from.to_string()]);
    let mut out = head.render();
    out.push('\n');
    if occ.is_empty() {
        out.push_str("no further fire times: the schedule has ended or can never fire again\n");
        return out;
    }
    let mut t = Table::new(["#", "utc", &format!("local ({})", s.zone()), "note"]);
    for (i, o) in occ.iter().enumerate() {
        t.row([
            (i + 1).to_string(),
            o.at.to_string(),
            local_text(o),
            note(o),
        ]);
    }
    out.push_str(&t.render());
    out
}

pub(crate) fn as_json(s: &Schedule, from: Timestamp, occ: &[Occurrence]) -> serde_json::Value {
    let (kind, text) = rule_text(s);
    let dst = s.dst();
    json!({
        "rule": kind,
        "spec": text,
        "description": s.describe(),
        "tz": s.zone().name(),
        "tzdb": tzdb_version(),
        "dst": {
            "gap": match dst.gap { GapPolicy::Shift => "shift", GapPolicy::Skip => "skip" },
            "fold": match dst.fold {
                FoldPolicy::Auto => "auto",
                FoldPolicy::Once => "once",
                FoldPolicy::Both => "both",
            },
            "interval_like": interval_like(s),
        },
        "from": from.to_string(),
        "occurrences": occ.iter().map(|o| json!({
            "utc": o.at.to_string(),
            "local": format!("{}{}", o.local(), format_offset(o.offset_seconds)),
            "nominal": o.nominal.to_string(),
            "kind": kind_str(o),
            "fires": o.fires(),
            "reason": match o.kind {
                OccurrenceKind::Skipped(SkipReason::DstGap) | OccurrenceKind::FireShifted => Some("dst_gap"),
                _ => None,
            },
        })).collect::<Vec<_>>(),
    })
}
