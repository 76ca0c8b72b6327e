//! Who may use a host's HTTP API, and what operators did through it: API tokens with a role,
//! and the record of operator actions. The store keeps both (every backend, one schema per
//! backend in `sql/<backend>/`), so that a token made with `takt token create` on one machine
//! is known to every node of a shared database, and an action is shown on the job whichever
//! node served it.
//!
//! The store never sees a token itself: only the SHA-256 of it ([`ApiToken::sha256`]). A
//! token is 32 random bytes, so a hash of it cannot be reversed or guessed, and no salt or slow
//! hash is needed (those protect *low-entropy* passwords from dictionary attacks; a random
//! 256-bit token has no dictionary).

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;

use crate::run::RunId;

/// What a token may do through the API. Ordered: each role may do everything of the ones
/// before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Read everything (jobs, runs, logs, nodes, plugins, metrics), change nothing.
    Viewer,
    /// Also trigger, enable and disable jobs, cancel runs, reload plugins.
    Operator,
    /// Also create, edit and delete jobs (a job definition can start programs and stored
    /// procedures, so editing one is the most powerful right), and manage tokens.
    Admin,
}

impl Role {
    /// Every role, least powerful first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    /// `viewer`, `operator` or `admin`: the stored and shown name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Whether this role may do what `needed` may.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| format!("unknown role \"{s}\"; use viewer, operator or admin"))
    }
}

/// A token as the store keeps it (never the token itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiToken {
    /// The store's id.
    pub id: i64,
    /// The unique name: what operator actions record as their actor.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// Lowercase hex SHA-256 of the token.
    pub sha256: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it was revoked; a revoked token is refused but stays listed (actions name it).
    pub revoked_at: Option<Timestamp>,
}

/// A token to store ([`crate::store::Store::token_insert`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewToken {
    /// The unique name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Lowercase hex SHA-256 of the token.
    pub sha256: String,
    /// When it is made.
    pub created_at: Timestamp,
}

/// One thing an operator did through the API (trigger, enable, disable, cancel, create,
/// edit, delete, reload), recorded with the token's name. Kept after the job is deleted:
/// `job` is the job's name, not a reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorAction {
    /// The store's id (ignored on insert).
    pub id: i64,
    /// When it was done.
    pub at: Timestamp,
    /// The token's name (or `local` for a host without tokens, reached over loopback).
    pub actor: String,
    /// What was done: `trigger`, `enable`, `disable`, `cancel`, `create`, `update`,
    /// `delete`, `plugin-reload`.
    pub action: String,
    /// The job it was done to, by name.
    pub job: Option<String>,
    /// The run it was done to.
    pub run: Option<RunId>,
    /// Anything else worth keeping (a trigger's fire time, what a reload loaded).
    pub detail: Option<String>,
}
