//! `takt nodes`: the host nodes registered on a shared database, with their heartbeats.

use anyhow::Result;
use clap::Args;
use serde_json::json;

use takt_core::store::Store;

use super::db::{DbArg, block_on};
use super::table::Table;

#[derive(Debug, Args)]
pub(super) struct NodesArgs {
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

pub(super) fn nodes(a: NodesArgs) -> Result<()> {
    let store = a.db.open()?;
    let nodes = block_on(store.node_list())??;
    // Ages by the database's clock where it has one all nodes share.
    let now = block_on(store.database_now())??.unwrap_or_else(jiff::Timestamp::now);
    let state = |n: &takt_core::node::NodeStatus| match n.stopped_at {
        Some(_) => "stopped".to_string(),
        None => format!("heartbeat {}s ago", n.heartbeat_age(now).as_secs()),
    };
    if a.json {
        let list: Vec<_> = nodes
            .iter()
            .map(|n| {
                json!({
                    "id": n.info.id.0,
                    "instance": n.info.instance.0,
                    "host_name": n.info.host_name,
                    "pid": n.info.pid,
                    "version": n.info.version,
                    "capacity": n.info.capacity,
                    "tags": n.info.tags,
                    "started_at": n.started_at.map(|t| t.to_string()),
                    "heartbeat_at": n.heartbeat_at.map(|t| t.to_string()),
                    "heartbeat_age_ms": u64::try_from(n.heartbeat_age(now).as_millis()).unwrap_or(u64::MAX),
                    "stopped_at": n.stopped_at.map(|t| t.to_string()),
                    "running": n.running,
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(());
    }
    if nodes.is_empty() {
        outln!("no node has registered on {} yet", a.db.database()?)?;
        return Ok(());
    }
    let mut t = Table::new([
        "node", "host", "pid", "version", "capacity", "running", "tags", "started", "state",
    ]);
    for n in &nodes {
        t.row([
            n.info.id.0.clone(),
            n.info.host_name.clone(),
            n.info.pid.to_string(),
            n.info.version.clone(),
            n.info.capacity.to_string(),
            n.running.to_string(),
            n.info.tags.join(","),
            n.started_at.map_or("-".to_string(), |t| t.to_string()),
            state(n),
        ]);
    }
    out!("{}", t.render())?;
    Ok(())
}
