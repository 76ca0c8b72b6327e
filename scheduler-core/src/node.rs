//! Host nodes and the one-process-per-node-identity rule.
//!
//! A node id (`node_id` in `takt.toml`) is what the runs of a node are recorded under and what
//! its restart recovery looks for. Two processes using one id at once would each take the
//! other's live runs for leftovers of a crash (seed 003 §5.2's zombie runs, turned against a
//! live process), so every start registers a fresh [`InstanceId`] for its node id, and
//! [`registration`] refuses a start while another instance of the same id has a live
//! heartbeat. Runs record the instance that claimed them; lease renewal and restart recovery
//! act on instances, never on the bare id, so a run a live process holds is never failed as
//! "node restarted".
//!
//! What the rules need from a store is small: the node's row (heartbeat, instance, host, pid),
//! written under a compare-and-set. The decisions are here, once, for every backend.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

use crate::run::NodeId;

/// The token of one life of a node: written at each start, recorded on every run the life
/// claims. Random, so that two starts never share one; opaque to the core.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId(pub String);

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A host node as it registers itself: who it is, and where to find the process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The configured node id.
    pub id: NodeId,
    /// This life's token ([`InstanceId`]).
    pub instance: InstanceId,
    /// The machine's name.
    pub host_name: String,
    /// The process id on that machine (0 when unknown): lets a restart on the same machine
    /// tell a crashed predecessor from a live one before its heartbeat goes stale.
    pub pid: u32,
    /// The takt version it runs.
    pub version: String,
    /// The most runs it runs at once.
    pub capacity: usize,
    /// The node tags it serves.
    pub tags: Vec<String>,
}

/// One life of a node as the store remembers it after the node row has moved on to a later
/// life: when it started, its last heartbeat, and its clean stop. Written by registration,
/// every heartbeat and the stop, so a history of lives says when *some* node was up — the
/// evidence `takt why` and `takt audit` give for a fire that has no record ("the host was
/// down from … to …").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSession {
    /// The node id.
    pub node_id: NodeId,
    /// The life.
    pub instance: InstanceId,
    /// The machine it ran on.
    pub host_name: String,
    /// When it started.
    pub started_at: Timestamp,
    /// Its last heartbeat.
    pub heartbeat_at: Timestamp,
    /// When it stopped cleanly (`None`: still running, or it crashed after `heartbeat_at`).
    pub stopped_at: Option<Timestamp>,
}

impl NodeSession {
    /// The last instant it is known to have been up: its stop, else its last heartbeat.
    pub fn last_seen(&self) -> Timestamp {
        self.stopped_at.unwrap_or(self.heartbeat_at)
    }
}

/// A registered node as a store lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// What the node's current (or last) life registered.
    pub info: NodeInfo,
    /// When that life started.
    pub started_at: Option<Timestamp>,
    /// Its last heartbeat (every lease renewal is one).
    pub heartbeat_at: Option<Timestamp>,
    /// When it stopped cleanly (`None` while it runs, or after a crash).
    pub stopped_at: Option<Timestamp>,
    /// Its runs in state running, of any of its lives.
    pub running: u64,
}

impl NodeStatus {
    /// How long before `now` the last heartbeat was (zero when in the future or unknown).
    pub fn heartbeat_age(&self, now: Timestamp) -> Duration {
        self.heartbeat_at
            .and_then(|h| Duration::try_from(now.duration_since(h)).ok())
            .unwrap_or(Duration::ZERO)
    }

    /// Whether this life is still alive as far as the database can tell at `now`: it has not
    /// stopped cleanly and its last heartbeat is younger than `live_for` (the lease: a node
    /// renews its leases, and so its heartbeat, well within it).
    pub fn is_live(&self, now: Timestamp, live_for: Duration) -> bool {
        self.stopped_at.is_none()
            && self
                .heartbeat_at
                .is_some_and(|h| h.checked_add(live_for).is_ok_and(|until| now < until))
    }
}

/// What [`crate::store::Store::node_register`] needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The node and its new life.
    pub node: NodeInfo,
    /// The instant of the registration (the database's clock on a shared database).
    pub now: Timestamp,
    /// How long a heartbeat keeps a life alive: the lease.
    pub live_for: Duration,
    /// Take over this life even if it looks alive: the previous process is known to be dead
    /// (same machine, its pid gone; the SQLite file lock acquired), or the operator said so
    /// (`--takeover`). A compare-and-set: when the row holds another instance by then, the
    /// registration is refused again.
    pub replace: Option<InstanceId>,
}

/// How a registration went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registered {
    /// This life is now the node's. `previous` is the life it follows (`None` on the first
    /// start of this id).
    Yes {
        /// The node's row before, if there was one.
        previous: Option<NodeStatus>,
    },
    /// Another life of this node id is alive; nothing was written.
    Refused {
        /// That life.
        live: NodeStatus,
    },
}

/// The rule, for a store inside its transaction: given the node's row as it is (`current`),
/// may `reg` take the node id? A live other instance refuses it unless `reg.replace` names
/// exactly that instance.
pub fn registration(current: Option<&NodeStatus>, reg: &Registration) -> Registered {
    match current {
        Some(c)
            if c.info.instance != reg.node.instance
                && c.is_live(reg.now, reg.live_for)
                && reg.replace.as_ref() != Some(&c.info.instance) =>
        {
            Registered::Refused { live: c.clone() }
        }
        _ => Registered::Yes {
            previous: current.cloned(),
        },
    }
}

/// The message for a start refused because `live` holds the node id (what, where, what to do).
pub fn refusal_message(live: &NodeStatus, now: Timestamp, live_for: Duration) -> String {
    let age = live.heartbeat_age(now);
    let wait = live_for.saturating_sub(age);
    let pid = if live.info.pid == 0 {
        String::new()
    } else {
        format!(" (pid {})", live.info.pid)
    };
    format!(
        "node id {} is in use by a running takt on {}{pid}, last heartbeat {}s ago; two \
         processes with one node id would take each other's runs for leftovers of a crash. \
         give this process its own node id (node_id / TAKT_NODE_ID), stop the other one, or \
         if it is gone for good start with --takeover (or wait {}s until its heartbeat is \
         older than the lease)",
        live.info.id,
        live.info.host_name,
        age.as_secs(),
        wait.as_secs().max(1),
    )
}

/// The message of a renewal or heartbeat by a life that another life replaced.
pub fn taken_over_message(node: &NodeId, instance: &InstanceId, now_held_by: &str) -> String {
    format!(
        "node id {node} was taken over by another process ({now_held_by}); this process \
         (instance {instance}) stops claiming, and its runs are recovered once their leases \
         expire"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(instance: &str) -> NodeInfo {
        NodeInfo {
            id: NodeId("n1".into()),
            instance: InstanceId(instance.into()),
            host_name: "box".into(),
            pid: 42,
            version: "0.1.0".into(),
            capacity: 4,
            tags: vec![],
        }
    }

    fn status(instance: &str, heartbeat: &str, stopped: bool) -> NodeStatus {
        let hb: Timestamp = heartbeat.parse().unwrap();
        NodeStatus {
            info: info(instance),
            started_at: Some(hb),
            heartbeat_at: Some(hb),
            stopped_at: stopped.then_some(hb),
            running: 0,
        }
    }

    fn reg(instance: &str, now: &str, replace: Option<&str>) -> Registration {
        Registration {
            node: info(instance),
            now: now.parse().unwrap(),
            live_for: Duration::from_secs(60),
            replace: replace.map(|r| InstanceId(r.into())),
        }
    }

    #[test]
    fn a_live_other_instance_refuses_unless_replaced_by_name() {
        let live = status("a", "2026-01-01T00:00:00Z", false);
        let at = "2026-01-01T00:00:59Z";
        assert!(matches!(
            registration(Some(&live), &reg("b", at, None)),
            Registered::Refused { .. }
        ));
        assert!(matches!(
            registration(Some(&live), &reg("b", at, Some("x"))),
            Registered::Refused { .. }
        ));
        assert!(matches!(
            registration(Some(&live), &reg("b", at, Some("a"))),
            Registered::Yes { previous: Some(_) }
        ));
        // The same instance registering again (a retried call) is itself.
        assert!(matches!(
            registration(Some(&live), &reg("a", at, None)),
            Registered::Yes { .. }
        ));
    }

    #[test]
    fn a_stale_or_stopped_life_is_followed() {
        let stale = status("a", "2026-01-01T00:00:00Z", false);
        assert!(matches!(
            registration(Some(&stale), &reg("b", "2026-01-01T00:01:00Z", None)),
            Registered::Yes { previous: Some(_) }
        ));
        let stopped = status("a", "2026-01-01T00:00:00Z", true);
        assert!(matches!(
            registration(Some(&stopped), &reg("b", "2026-01-01T00:00:01Z", None)),
            Registered::Yes { previous: Some(_) }
        ));
        assert_eq!(
            registration(None, &reg("b", "2026-01-01T00:00:01Z", None)),
            Registered::Yes { previous: None }
        );
    }

    #[test]
    fn the_refusal_says_who_and_what_to_do() {
        let live = status("a", "2026-01-01T00:00:00Z", false);
        let m = refusal_message(
            &live,
            "2026-01-01T00:00:20Z".parse().unwrap(),
            Duration::from_secs(60),
        );
        assert!(m.contains("node id n1"), "{m}");
        assert!(m.contains("on box (pid 42)"), "{m}");
        assert!(m.contains("20s ago"), "{m}");
        assert!(m.contains("--takeover"), "{m}");
        assert!(m.contains("wait 40s"), "{m}");
    }
}
