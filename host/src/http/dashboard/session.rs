//! Dashboard sessions: a token typed into the sign-in form becomes a server-side session
//! named by a random id in an `HttpOnly; SameSite=Strict` cookie, with a CSRF token of its
//! own that every form posts back.
//!
//! **Why server-side.** A session is a row in this process's memory, not a signed cookie:
//! signing out, an expiry or a revoked token ends it at once, and the cookie holds nothing
//! but 256 random bits. The price: a session lives on the node that made it and not past a
//! restart of `takt run` (the user signs in again), which suits a dashboard each node serves.
//!
//! **Re-checked every request.** A session remembers the SHA-256 of the token it was opened
//! with; each request checks that hash is still a valid (not revoked) token of the store's
//! list (the [`super::super::auth::Gate`]'s cache, at most [`super::super::auth::TOKEN_CACHE`]
//! old), so `takt token revoke` ends the token's sessions too. A session of the local
//! administrator (a host without tokens, reached over loopback) ends once any token exists.
//! When the store cannot be read, the session stands as last checked: the dashboard then
//! shows its outage banner, and nothing can be revoked meanwhile anyway.
//!
//! **Expiry.** [`IDLE`] without a request, or [`LIFETIME`] after sign-in, whichever comes
//! first; the live pages' refreshes count as requests, so a workshop screen stays signed in
//! for a shift but not for ever.
//!
//! **CSRF.** Each session has a random CSRF token; every POST must carry it in the `csrf`
//! field, compared in constant time, or is refused with 403. The sign-in form, before any
//! session, carries a double-submit token: the same random value in a short-lived
//! `SameSite=Strict` cookie and in the form. SameSite=Strict alone already keeps other sites'
//! forms from sending the cookie; the token keeps a same-site page (another application on the
//! same host name) from posting as the user too.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use cookie::{Cookie, SameSite};
use subtle::ConstantTimeEq;
use takt_core::store::access::{ApiToken, Role};

use crate::http::auth::{Caller, token_hash};

/// A session ends after this long without a request.
pub const IDLE: Duration = Duration::from_secs(60 * 60);
/// A session ends this long after sign-in, however busy.
pub const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// The most sessions kept; the oldest is dropped beyond (bounded memory against a flood of
/// sign-ins).
pub const MAX_SESSIONS: usize = 10_000;
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "takt_session";
/// The sign-in form's double-submit cookie.
pub const SIGNIN_COOKIE: &str = "takt_signin";
/// Where the dashboard's cookies apply.
pub const COOKIE_PATH: &str = "/ui";

/// One signed-in user.
#[derive(Clone, Debug)]
pub struct Session {
    /// Who, as the API would see the token.
    pub caller: Caller,
    /// The SHA-256 of the token signed in with; `None` for the local administrator.
    pub token_sha256: Option<String>,
    /// What every form of this session posts back.
    pub csrf: String,
    created: Instant,
    seen: Instant,
}

/// The sessions of one server.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

/// 32 random bytes from the OS, hex.
pub fn random_hex() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("cannot read random bytes from the os: {e}"))?;
    Ok(bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// Whether two secrets are equal, in constant time.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl Sessions {
    /// Opens a session for `caller` (signed in with `token`, or `None` for the local
    /// administrator); its id, for the cookie.
    pub fn open(&self, caller: Caller, token: Option<&str>) -> Result<(String, Session), String> {
        let id = random_hex()?;
        let now = Instant::now();
        let s = Session {
            caller,
            token_sha256: token.map(token_hash),
            csrf: random_hex()?,
            created: now,
            seen: now,
        };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, s| alive(s, now));
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.seen)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(id.clone(), s.clone());
        Ok((id, s))
    }

    /// The live session named `id`, checked against `tokens` (the store's list, `None` when
    /// it cannot be read); touching it. An expired or no longer valid session is removed.
    pub fn get(&self, id: &str, tokens: Option<&[ApiToken]>, loopback: bool) -> Option<Session> {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let s = map.get_mut(id)?;
        let valid = alive(s, now)
            && match (tokens, &s.token_sha256) {
                (None, _) => true,
                (Some(list), Some(hash)) => list.iter().any(|t| {
                    t.revoked_at.is_none()
                        && t.role == s.caller.role
                        && same_secret(&t.sha256, hash)
                }),
                (Some(list), None) => list.is_empty() && loopback,
            };
        if !valid {
            map.remove(id);
            return None;
        }
        s.seen = now;
        Some(s.clone())
    }

    /// Ends session `id` (signing out).
    pub fn close(&self, id: &str) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// How many sessions are open (tests).
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn alive(s: &Session, now: Instant) -> bool {
    now.duration_since(s.seen) < IDLE && now.duration_since(s.created) < LIFETIME
}

/// A dashboard cookie: HttpOnly, SameSite=Strict, path `/ui`, Secure over TLS; `max_age`
/// `None` for a browser-session cookie, zero to delete it.
pub fn cookie(
    name: &'static str,
    value: String,
    secure: bool,
    max_age: Option<Duration>,
) -> String {
    let mut c = Cookie::build((name, value))
        .http_only(true)
        .same_site(SameSite::Strict)
        .path(COOKIE_PATH)
        .secure(secure);
    if let Some(age) = max_age {
        c = c.max_age(cookie::time::Duration::seconds(
            i64::try_from(age.as_secs()).unwrap_or(i64::MAX),
        ));
    }
    c.build().to_string()
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie_value(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_string())
}

/// Whether `role` may use the operator's buttons.
pub fn can_operate(role: Role) -> bool {
    role.allows(Role::Operator)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(secret: &str, role: Role, revoked: bool) -> ApiToken {
        ApiToken {
            id: 1,
            name: "t".into(),
            role,
            sha256: token_hash(secret),
            created_at: jiff::Timestamp::UNIX_EPOCH,
            revoked_at: revoked.then_some(jiff::Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn sessions_follow_their_token_and_end_on_sign_out() {
        let sessions = Sessions::default();
        let caller = Caller {
            name: "t".into(),
            role: Role::Operator,
        };
        let (id, s) = sessions.open(caller.clone(), Some("s1")).unwrap();
        assert_eq!(id.len(), 64);
        assert_eq!(s.csrf.len(), 64);
        assert_ne!(id, s.csrf);
        let live = [tok("s1", Role::Operator, false)];
        assert!(sessions.get(&id, Some(&live), false).is_some());
        assert!(sessions.get("nope", Some(&live), false).is_none());
        // The store unreachable: the session stands as last checked.
        assert!(sessions.get(&id, None, false).is_some());
        // Revoked: the session ends with its token, for good.
        let revoked = [tok("s1", Role::Operator, true)];
        assert!(sessions.get(&id, Some(&revoked), false).is_none());
        assert!(sessions.get(&id, Some(&live), false).is_none());

        let (id, _) = sessions.open(caller, Some("s1")).unwrap();
        sessions.close(&id);
        assert!(sessions.get(&id, Some(&live), false).is_none());

        // The local administrator: only while no token exists, only over loopback.
        let local = Caller {
            name: "local".into(),
            role: Role::Admin,
        };
        let (id, _) = sessions.open(local, None).unwrap();
        assert!(sessions.get(&id, Some(&[]), true).is_some());
        assert!(sessions.get(&id, Some(&live), true).is_none());
    }

    #[test]
    fn cookies_are_http_only_strict_and_scoped() {
        let c = cookie(SESSION_COOKIE, "abc".into(), true, None);
        assert!(c.contains("HttpOnly"), "{c}");
        assert!(c.contains("SameSite=Strict"), "{c}");
        assert!(c.contains("Path=/ui"), "{c}");
        assert!(c.contains("Secure"), "{c}");
        let gone = cookie(SESSION_COOKIE, String::new(), false, Some(Duration::ZERO));
        assert!(
            gone.contains("Max-Age=0") && !gone.contains("Secure"),
            "{gone}"
        );
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            "a=1; takt_session=xyz; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_value(&h, SESSION_COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie_value(&h, "c"), None);
        assert!(same_secret("abc", "abc") && !same_secret("abc", "abd") && !same_secret("a", "ab"));
    }
}
