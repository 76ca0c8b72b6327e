//! `takt job pause|resume NAME`, `takt group pause|resume|list`, `takt node pause|resume ID`:
//! pauses written to the database ([`takt_core::pause`]), so a running `takt run` on any node
//! obeys them within its next pass (a node's own pause within about a second).

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use takt_core::Timestamp;
use takt_core::pause::{Pause, PauseTarget, Resumed};
use takt_core::run::NodeId;
use takt_core::store::Store;

use super::db::{DbArg, block_on};
use super::table::Table;

/// Who pauses: `--by`, else `user@host` of this process.
#[derive(Debug, Args)]
pub(super) struct PauseOpts {
    /// Why (shown by `job show`, `group list` and in the skipped runs' text).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Who pauses [default: user@host of this command].
    #[arg(long, value_name = "WHO")]
    by: Option<String>,
}

impl PauseOpts {
    pub(super) fn pause(&self, now: Timestamp) -> Result<Pause> {
        let by = match &self.by {
            Some(b) if b.trim().is_empty() => {
                return Err(anyhow!(
                    "--by is empty; give a name, or leave it out for user@host"
                ));
            }
            Some(b) => b.trim().to_string(),
            None => operator(),
        };
        let reason = self
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        Ok(Pause {
            at: now,
            by,
            reason,
        })
    }
}

/// `user@host` of this process (the user from `USER`, else `USERNAME`).
pub(super) fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "unknown".to_string());
    format!("{user}@{}", crate::config::host_name())
}

/// A pause as JSON.
pub(crate) fn pause_json(p: &Pause) -> Value {
    json!({"paused_at": p.at.to_string(), "paused_by": p.by, "reason": p.reason})
}

#[derive(Debug, Subcommand)]
pub(super) enum GroupCmd {
    /// Pause every job of a group, present and future: fires that fall due are recorded
    /// skipped (reason paused) when the group is resumed, per each job's misfire policy.
    Pause {
        /// The group's name (the `group` of its jobs).
        name: String,
        #[command(flatten)]
        opts: PauseOpts,
        #[command(flatten)]
        db: DbArg,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// End a group's pause (members paused on their own stay paused).
    Resume {
        /// The group's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// The groups: their jobs, and who paused them, when and why.
    List {
        #[command(flatten)]
        db: DbArg,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum NodeCmd {
    /// Stop a node from claiming (its running runs go on; other nodes keep running the jobs).
    Pause {
        /// The node id (`takt nodes` lists them).
        id: String,
        #[command(flatten)]
        opts: PauseOpts,
        #[command(flatten)]
        db: DbArg,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Let a paused node claim again.
    Resume {
        /// The node id.
        id: String,
        #[command(flatten)]
        db: DbArg,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn resumed_json(what: &str, r: &Resumed) -> Value {
    json!({
        "resumed": what,
        "jobs": r.jobs.iter().map(|j| j.0).collect::<Vec<_>>(),
        "skipped": r.skipped,
    })
}

fn resumed_text(what: &str, r: &Resumed) -> Result<()> {
    outln!(
        "resumed {what}: {} job(s) released, {} paused fire(s) recorded skipped",
        r.jobs.len(),
        r.skipped
    )
}

pub(super) fn run_group(cmd: GroupCmd) -> Result<()> {
    match cmd {
        GroupCmd::Pause {
            name,
            opts,
            db,
            json,
        } => {
            let store = db.open()?;
            let p = opts.pause(Timestamp::now())?;
            let held = block_on(store.pause(&PauseTarget::Group(name.clone()), &p))?
                .with_context(|| format!("cannot pause group \"{name}\""))?;
            if json {
                let mut v = pause_json(&p);
                v["group"] = json!(name);
                v["jobs"] = json!(held.iter().map(|j| j.0).collect::<Vec<_>>());
                return outln!("{}", serde_json::to_string_pretty(&v)?);
            }
            outln!("paused group {name} ({} job(s) held)", held.len())
        }
        GroupCmd::Resume { name, db, json } => {
            let store = db.open()?;
            let r = block_on(store.resume(&PauseTarget::Group(name.clone()), Timestamp::now()))?
                .with_context(|| format!("cannot resume group \"{name}\""))?;
            if json {
                return outln!(
                    "{}",
                    serde_json::to_string_pretty(&resumed_json(&name, &r))?
                );
            }
            resumed_text(&format!("group {name}"), &r)
        }
        GroupCmd::List { db, json } => {
            let store = db.open()?;
            let jobs = block_on(store.job_list())??;
            let pauses = block_on(store.pause_list())??;
            let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            for j in &jobs {
                if let Some(g) = &j.group {
                    groups
                        .entry(g.clone())
                        .or_default()
                        .push(j.name.to_string());
                }
            }
            let paused = |g: &str| {
                pauses.iter().find_map(|(t, p)| match t {
                    PauseTarget::Group(n) if n == g => Some(p.clone()),
                    _ => None,
                })
            };
            if json {
                let list: Vec<Value> = groups
                    .iter()
                    .map(|(g, members)| {
                        json!({
                            "group": g,
                            "jobs": members,
                            "pause": paused(g).as_ref().map(pause_json),
                        })
                    })
                    .collect();
                return outln!("{}", serde_json::to_string_pretty(&list)?);
            }
            if groups.is_empty() {
                return outln!("no groups (give jobs a group with --group)");
            }
            let mut t = Table::new(["group", "jobs", "state"]);
            for (g, members) in &groups {
                t.row([
                    g.clone(),
                    members.join(", "),
                    paused(g).map_or_else(|| "active".to_string(), |p| p.to_string()),
                ]);
            }
            out!("{}", t.render())
        }
    }
}

pub(super) fn run_node(cmd: NodeCmd) -> Result<()> {
    match cmd {
        NodeCmd::Pause { id, opts, db, json } => {
            let store = db.open()?;
            let p = opts.pause(Timestamp::now())?;
            block_on(store.pause(&PauseTarget::Node(NodeId(id.clone())), &p))?
                .with_context(|| format!("cannot pause node \"{id}\""))?;
            if json {
                let mut v = pause_json(&p);
                v["node"] = json!(id);
                return outln!("{}", serde_json::to_string_pretty(&v)?);
            }
            outln!("paused node {id}: it claims nothing until `takt node resume {id}`")
        }
        NodeCmd::Resume { id, db, json } => {
            let store = db.open()?;
            let r =
                block_on(store.resume(&PauseTarget::Node(NodeId(id.clone())), Timestamp::now()))?
                    .with_context(|| format!("cannot resume node \"{id}\""))?;
            if json {
                return outln!("{}", serde_json::to_string_pretty(&resumed_json(&id, &r))?);
            }
            outln!("resumed node {id}: it claims again")
        }
    }
}
