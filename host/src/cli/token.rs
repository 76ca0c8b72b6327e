//! `takt token create|list|revoke`: the HTTP API's bearer tokens, in the database (so every
//! node of a shared database knows them). A token is shown once, by `create`; the database
//! keeps its SHA-256 only (see [`crate::http::auth`]).

use anyhow::Result;
use clap::{Args, Subcommand};
use jiff::Timestamp;
use serde_json::json;
use takt_core::store::Store;
use takt_core::store::access::{NewToken, Role};

use super::db::{DbArg, block_on};
use super::table::Table;
use crate::http::auth::new_token;

#[derive(Debug, Subcommand)]
pub(super) enum TokenCmd {
    /// Make a token for the HTTP API and print it (the only time it is shown).
    Create(CreateArgs),
    /// List the tokens (names, roles, when made and revoked; never the tokens).
    List {
        #[command(flatten)]
        db: DbArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: it is refused from then on (within 2 s on a running host) and stays
    /// listed, since recorded actions name it.
    Revoke {
        /// The token's name.
        name: String,
        #[command(flatten)]
        db: DbArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub(super) struct CreateArgs {
    /// viewer (read), operator (also trigger, enable/disable, cancel, reload plugins) or admin
    /// (also create, edit and delete jobs, manage tokens).
    #[arg(long, value_name = "viewer|operator|admin")]
    role: String,
    /// A unique name, recorded with every action done with the token [default: the role and
    /// the time, e.g. operator-20261201T060000].
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    db: DbArg,
    /// Print `{"name": …, "role": …, "token": …}` instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(cmd: TokenCmd) -> Result<()> {
    match cmd {
        TokenCmd::Create(a) => create(a),
        TokenCmd::List { db, json } => list(&db, json),
        TokenCmd::Revoke { name, db, json } => revoke(&db, &name, json),
    }
}

fn create(a: CreateArgs) -> Result<()> {
    let role = a
        .role
        .parse::<Role>()
        .map_err(|e| anyhow::anyhow!("--role: {e}"))?;
    let now = Timestamp::now();
    let name = a
        .name
        .unwrap_or_else(|| format!("{role}-{}", now.strftime("%Y%m%dT%H%M%S")));
    let (token, sha256) = new_token().map_err(|e| anyhow::anyhow!(e))?;
    let store = a.db.open()?;
    let stored = block_on(store.token_insert(&NewToken {
        name,
        role,
        sha256,
        created_at: now,
    }))??;
    if a.json {
        return outln!(
            "{}",
            json!({"name": stored.name, "role": role.name(), "token": token})
        );
    }
    outln!("token {} ({role}):", stored.name)?;
    outln!("{token}")?;
    outln!("shown once: keep it now. send it as `Authorization: Bearer <token>`.")
}

fn list(db: &DbArg, json: bool) -> Result<()> {
    let store = db.open()?;
    let tokens = block_on(store.token_list())??;
    if json {
        let doc: Vec<_> = tokens
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "role": t.role.name(),
                    "created_at": t.created_at.to_string(),
                    "revoked_at": t.revoked_at.map(|r| r.to_string()),
                })
            })
            .collect();
        return outln!("{}", serde_json::to_string_pretty(&doc)?);
    }
    if tokens.is_empty() {
        return outln!(
            "no tokens: the http api serves only loopback callers, as admin; make one with \
             `takt token create --role viewer|operator|admin`"
        );
    }
    let mut t = Table::new(["NAME", "ROLE", "CREATED", "REVOKED"]);
    for tok in &tokens {
        t.row([
            tok.name.clone(),
            tok.role.to_string(),
            tok.created_at.to_string(),
            tok.revoked_at.map_or("-".into(), |r| r.to_string()),
        ]);
    }
    out!("{}", t.render())
}

fn revoke(db: &DbArg, name: &str, json: bool) -> Result<()> {
    let store = db.open()?;
    let t = block_on(store.token_revoke(name, Timestamp::now()))??;
    let at = t.revoked_at.map(|r| r.to_string()).unwrap_or_default();
    if json {
        return outln!("{}", json!({"name": t.name, "revoked_at": at}));
    }
    outln!("revoked {} (at {at})", t.name)
}
