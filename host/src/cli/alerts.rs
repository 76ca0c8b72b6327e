//! `takt alerts`: the alert deliveries recorded in the database, newest first — what each
//! channel was sent, what failed and why, what was suppressed (a duplicate of an open
//! episode, the rate limit, a full queue).

use anyhow::Result;
use clap::Args;
use serde_json::json;

use takt_core::store::Store;

use super::db::{DbArg, block_on};
use super::table::Table;

#[derive(Debug, Args)]
pub(super) struct AlertsArgs {
    /// Show this many deliveries at most.
    #[arg(long, default_value_t = 50, value_name = "N")]
    limit: usize,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

pub(super) fn alerts(a: AlertsArgs) -> Result<()> {
    if a.limit == 0 {
        anyhow::bail!("--limit 0: give at least 1");
    }
    let store = a.db.open()?;
    let list = block_on(store.alert_delivery_list(a.limit))??;
    if a.json {
        let list: Vec<_> = list
            .iter()
            .map(|d| {
                json!({
                    "id": d.id,
                    "at": d.at.to_string(),
                    "node": d.node,
                    "channel": d.channel,
                    "subject": d.key.subject,
                    "condition": d.key.condition,
                    "kind": d.kind,
                    "run": d.run,
                    "outcome": d.outcome.name(),
                    "detail": d.detail,
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(());
    }
    if list.is_empty() {
        outln!("no alert has been delivered from {} yet", a.db.database()?)?;
        return Ok(());
    }
    let mut t = Table::new([
        "at",
        "channel",
        "subject",
        "condition",
        "kind",
        "outcome",
        "node",
        "detail",
    ]);
    for d in &list {
        t.row([
            d.at.strftime("%Y-%m-%d %H:%M:%S").to_string(),
            d.channel.clone(),
            d.key.subject.clone(),
            d.key.condition.clone(),
            d.kind.clone(),
            d.outcome.name().to_string(),
            d.node.clone(),
            d.detail.lines().next().unwrap_or("").to_string(),
        ]);
    }
    out!("{}", t.render())?;
    Ok(())
}
