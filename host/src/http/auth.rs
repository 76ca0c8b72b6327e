//! Who is calling: bearer tokens with a role, compared in constant time, with repeated
//! failures from one address refused for a while.
//!
//! **Tokens.** `takt_` + 64 hex digits of 32 random bytes from the OS ([`new_token`]). The
//! store keeps the SHA-256 of it only. A plain hash is enough for a random 256-bit secret: salts
//! and slow hashes (bcrypt, argon2) exist to stop dictionary attacks on passwords people
//! choose, and there is no dictionary of random tokens; a stolen table of hashes cannot be
//! turned back into tokens.
//!
//! **Checking.** The presented token is hashed and compared with *every* valid hash with
//! [`subtle::ConstantTimeEq`], without stopping at a match, so the time taken says nothing
//! about which hash or how much of it matched. The tokens are read from the store at most
//! every [`TOKEN_CACHE`]: a token made or revoked with the CLI (on any node of a shared
//! database) takes effect within that time.
//!
//! **Without tokens.** While the store holds no token at all (none was ever made), a request
//! from a loopback address is served as the local administrator (`local`): on one machine,
//! whoever can reach 127.0.0.1 can also open the database. A non-loopback listen address is
//! refused at start in that case ([`super::HttpServer::start`]). Once a token exists (revoked
//! ones count), every request but `/healthz`, `/readyz` (and `/metrics` with
//! `metrics_public`) needs one.
//!
//! **Failures.** [`FAILURES_ALLOWED`] bad tokens from one IP address within
//! [`FAILURE_WINDOW`] lock that address out (429 with `Retry-After`) for a time that doubles
//! with each further lockout, up to [`MAX_LOCKOUT`]; a good token ends the count.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use takt_core::store::access::{ApiToken, Role};

use super::problem::Problem;

/// How long the token list read from the store is reused.
pub const TOKEN_CACHE: Duration = Duration::from_secs(2);
/// Bad tokens from one address allowed within [`FAILURE_WINDOW`] before a lockout.
pub const FAILURES_ALLOWED: u32 = 5;
/// The window the failures of one address are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// The longest lockout.
pub const MAX_LOCKOUT: Duration = Duration::from_secs(300);
/// The first lockout.
const FIRST_LOCKOUT: Duration = Duration::from_secs(10);
/// The actor recorded for the local administrator of a host without tokens.
pub const LOCAL_ACTOR: &str = "local";

/// A new token and the SHA-256 (lowercase hex) the store keeps of it.
pub fn new_token() -> Result<(String, String), String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("cannot read random bytes from the os: {e}"))?;
    let token = format!("takt_{}", hex(&bytes));
    let hash = token_hash(&token);
    Ok((token, hash))
}

/// Lowercase hex SHA-256 of `token`.
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The caller of one request: a token's name and role, or the local administrator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The token's name (what actions record).
    pub name: String,
    /// What it may do.
    pub role: Role,
}

impl Caller {
    /// Refuses (403) a caller whose role is below `needed`; `what` names the request.
    pub fn require(&self, needed: Role, what: &str) -> Result<(), Problem> {
        if self.role.allows(needed) {
            return Ok(());
        }
        Err(Problem::forbidden(format!(
            "{what} needs the {needed} role; token \"{}\" is {}; ask an admin for a token \
             with that role (`takt token create --role {needed}`)",
            self.name, self.role
        )))
    }
}

#[derive(Debug, Default)]
struct Failures {
    count: u32,
    since: Option<Instant>,
    locked_until: Option<Instant>,
    lockouts: u32,
}

/// The token checks of one server.
#[derive(Debug, Default)]
pub struct Gate {
    tokens: Mutex<Option<(Instant, Arc<Vec<ApiToken>>)>>,
    failures: Mutex<HashMap<IpAddr, Failures>>,
}

/// What the gate needs to know of the tokens: the store's list, when stale.
pub type TokenList = Arc<Vec<ApiToken>>;

impl Gate {
    /// The cached token list, if still fresh.
    pub fn cached(&self) -> Option<TokenList> {
        let g = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        g.as_ref()
            .filter(|(at, _)| at.elapsed() < TOKEN_CACHE)
            .map(|(_, t)| t.clone())
    }

    /// Keeps `tokens` as the fresh list.
    pub fn remember(&self, tokens: Vec<ApiToken>) -> TokenList {
        let tokens = Arc::new(tokens);
        *self.tokens.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((Instant::now(), tokens.clone()));
        tokens
    }

    /// Forgets the cached list (after this server made or revoked a token).
    pub fn forget(&self) {
        *self.tokens.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Who the request from `peer` with `headers` is, against `tokens`.
    pub fn check(
        &self,
        peer: IpAddr,
        headers: &HeaderMap,
        tokens: &[ApiToken],
    ) -> Result<Caller, Problem> {
        if let Some(wait) = self.locked(peer) {
            let secs = wait.as_secs().max(1);
            return Err(Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-requests",
                "too many failed sign-ins",
                format!("{FAILURES_ALLOWED} bad tokens came from {peer}; try again in {secs} s"),
            )
            .header(header::RETRY_AFTER, secs.to_string()));
        }
        let presented = match headers.get(header::AUTHORIZATION) {
            None if tokens.is_empty() && peer.is_loopback() => {
                return Ok(Caller {
                    name: LOCAL_ACTOR.into(),
                    role: Role::Admin,
                });
            }
            None => {
                return Err(unauthorized(
                    "no token given: send `Authorization: Bearer <token>`",
                ));
            }
            Some(v) => v,
        };
        let Some(token) = presented
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
        else {
            return Err(
                unauthorized("the Authorization header is not `Bearer <token>`")
                    .at("Authorization"),
            );
        };
        let hash = token_hash(token);
        let mut found: Option<&ApiToken> = None;
        for t in tokens.iter().filter(|t| t.revoked_at.is_none()) {
            // Every valid hash is compared, in constant time, whatever matched before.
            let equal: bool = t.sha256.as_bytes().ct_eq(hash.as_bytes()).into();
            if equal {
                found = Some(t);
            }
        }
        match found {
            Some(t) => {
                self.failures
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&peer);
                Ok(Caller {
                    name: t.name.clone(),
                    role: t.role,
                })
            }
            None => {
                self.failed(peer);
                let revoked = tokens
                    .iter()
                    .any(|t| t.revoked_at.is_some() && t.sha256 == hash);
                Err(unauthorized(if revoked {
                    "the token was revoked; ask an admin for a new one"
                } else {
                    "the token is not known to this host; check it, or make one with `takt token create`"
                }))
            }
        }
    }

    fn locked(&self, peer: IpAddr) -> Option<Duration> {
        let g = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let until = g.get(&peer)?.locked_until?;
        until.checked_duration_since(Instant::now())
    }

    fn failed(&self, peer: IpAddr) {
        let mut g = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        // Bounded memory: forget addresses whose window and lockout have passed.
        if g.len() > 10_000 {
            g.retain(|_, f| {
                f.locked_until.is_some_and(|u| u > Instant::now())
                    || f.since.is_some_and(|s| s.elapsed() < FAILURE_WINDOW)
            });
        }
        let f = g.entry(peer).or_default();
        if f.since.is_none_or(|s| s.elapsed() > FAILURE_WINDOW) {
            f.since = Some(Instant::now());
            f.count = 0;
        }
        f.count += 1;
        if f.count >= FAILURES_ALLOWED {
            let lockout = FIRST_LOCKOUT
                .saturating_mul(1 << f.lockouts.min(10))
                .min(MAX_LOCKOUT);
            f.locked_until = Some(Instant::now() + lockout);
            f.lockouts += 1;
            f.count = 0;
            f.since = None;
            tracing::warn!(
                "{FAILURES_ALLOWED} bad api tokens from {peer}: refusing it for {} s",
                lockout.as_secs()
            );
        }
    }
}

fn unauthorized(detail: &str) -> Problem {
    Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "a valid token is needed",
        detail,
    )
    .header(header::WWW_AUTHENTICATE, "Bearer realm=\"takt\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn token(name: &str, role: Role, secret: &str) -> ApiToken {
        ApiToken {
            id: 1,
            name: name.into(),
            role,
            sha256: token_hash(secret),
            created_at: jiff::Timestamp::UNIX_EPOCH,
            revoked_at: None,
        }
    }

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
        );
        h
    }

    #[test]
    fn tokens_roles_and_lockouts() {
        let (t, hash) = new_token().unwrap();
        assert!(t.starts_with("takt_") && t.len() == 69 && hash.len() == 64);
        assert_eq!(token_hash(&t), hash);
        let gate = Gate::default();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let far: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(
            gate.check(local, &HeaderMap::new(), &[]).unwrap().role,
            Role::Admin
        );
        assert_eq!(
            gate.check(far, &HeaderMap::new(), &[]).unwrap_err().status,
            401
        );
        let tokens = [token("ops", Role::Operator, "s1")];
        assert_eq!(
            gate.check(local, &HeaderMap::new(), &tokens)
                .unwrap_err()
                .status,
            401
        );
        let ops = gate.check(far, &bearer("s1"), &tokens).unwrap();
        assert_eq!(ops.name, "ops");
        assert!(ops.require(Role::Operator, "x").is_ok());
        assert_eq!(
            ops.require(Role::Admin, "editing a job")
                .unwrap_err()
                .status,
            403
        );
        for _ in 0..FAILURES_ALLOWED {
            assert_eq!(
                gate.check(far, &bearer("nope"), &tokens)
                    .unwrap_err()
                    .status,
                401
            );
        }
        let locked = gate.check(far, &bearer("s1"), &tokens).unwrap_err();
        assert_eq!(
            locked.status, 429,
            "even a good token waits out the lockout"
        );
        assert!(
            gate.check(local, &bearer("s1"), &tokens).is_ok(),
            "per address"
        );
    }
}
