//! `takt job pause|resume NAME`, `takt group pause|resume|list`, `takt node pause|resume ID`:
//! pauses written to the database ([`takt_core::pause`]), so a running `takt run` on any node
//! obeys them within its next pass (a node's own pause within about a second).

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use takt_core::Timestamp;
use takt_core::group::{GroupHold, GroupStatus, check_max_running};
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
    /// End a group's pause and its failure hold (members paused on their own stay paused).
    Resume {
        /// The group's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Set a group's definition: how many of its runs may run at once, on all nodes.
    Set {
        /// The group's name (the `group` of its jobs).
        name: String,
        /// The most runs of the group's jobs running at once (at least 1); fires over it
        /// wait as pending runs and start when a slot frees.
        #[arg(
            long,
            value_name = "N",
            allow_negative_numbers = true,
            conflicts_with = "no_limit"
        )]
        max_running: Option<i64>,
        /// Remove the group's limit.
        #[arg(long)]
        no_limit: bool,
        #[command(flatten)]
        db: DbArg,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// The groups: their jobs, limit and running runs, pause (who, when, why) and failure
    /// hold (which member's run did not succeed).
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
        "released_hold": r.released.as_ref().map(hold_json),
    })
}

fn resumed_text(what: &str, r: &Resumed) -> Result<()> {
    if let Some(h) = &r.released {
        outln!("released the failure hold ({h})")?;
    }
    outln!(
        "resumed {what}: {} job(s) released, {} paused fire(s) recorded skipped",
        r.jobs.len(),
        r.skipped
    )
}

/// A group's failure hold as JSON.
pub(crate) fn hold_json(h: &GroupHold) -> Value {
    json!({
        "member": h.member.as_str(),
        "run": h.run.0,
        "fire_time": h.fire_time.to_string(),
        "state": h.state.name(),
        "release": h.release_hint(),
    })
}

/// A group as `takt group list --json` and the API show it.
pub(crate) fn group_json(g: &GroupStatus) -> Value {
    json!({
        "group": g.name,
        "jobs": g.members.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        "max_running": g.def.max_running,
        "running": g.running,
        "pause": g.pause.as_ref().map(pause_json),
        "hold": g.hold.as_ref().map(hold_json),
        "released_at": g.def.released_at.map(|t| t.to_string()),
    })
}

/// A group's state in one cell: the operator's pause and the failure hold are two
/// different things, each ended by `takt group resume`.
fn group_state(g: &GroupStatus) -> String {
    let mut parts = Vec::new();
    if let Some(p) = &g.pause {
        parts.push(p.to_string());
    }
    if let Some(h) = &g.hold {
        parts.push(format!(
            "held: {}'s run {} {} (fire {})",
            h.member, h.run, h.state, h.fire_time
        ));
    }
    if parts.is_empty() {
        return "active".to_string();
    }
    parts.join("; ")
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
        GroupCmd::Set {
            name,
            max_running,
            no_limit,
            db,
            json,
        } => {
            let limit = match (max_running, no_limit) {
                (Some(n), _) => Some(check_max_running(&name, n).map_err(|e| anyhow!(e))?),
                (None, true) => None,
                (None, false) => {
                    return Err(anyhow!(
                        "takt group set {name}: give --max-running N (at least 1) or --no-limit"
                    ));
                }
            };
            let store = db.open()?;
            let def = block_on(store.group_set(&name, limit))?
                .with_context(|| format!("cannot set group \"{name}\""))?;
            if json {
                let g = block_on(store.group_status(&name, Timestamp::now()))??;
                return outln!("{}", serde_json::to_string_pretty(&group_json(&g))?);
            }
            match def.max_running {
                Some(n) => outln!("group {name}: at most {n} run(s) at once, on all nodes"),
                None => outln!("group {name}: no limit on running runs"),
            }
        }
        GroupCmd::List { db, json } => {
            let store = db.open()?;
            let groups = block_on(store.group_list(Timestamp::now()))??;
            if json {
                let list: Vec<Value> = groups.iter().map(group_json).collect();
                return outln!("{}", serde_json::to_string_pretty(&list)?);
            }
            if groups.is_empty() {
                return outln!("no groups (give jobs a group with --group)");
            }
            let mut t = Table::new(["group", "jobs", "running", "state"]);
            for g in &groups {
                let running = match g.def.max_running {
                    Some(n) => format!("{} of {n}", g.running),
                    None => g.running.to_string(),
                };
                t.row([
                    g.name.clone(),
                    g.members
                        .iter()
                        .map(|m| m.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    running,
                    group_state(g),
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
