//! How a primitive fails, and the engine's retry loops.
//!
//! A backend's driver error becomes a [`Fail`]: the [`StoreError`] the caller will see and
//! whether the call may simply run again ([`Retry`]). The engine — not each backend — decides
//! what to do with that: try again after a pause, resolve an unknown commit, or give up. The
//! pauses come from the dialect ([`super::Dialect::pause`]): the core has no timer.

use std::future::Future;
use std::time::Duration;

use super::Dialect;
use crate::store::{StoreError, StoreResult};

/// How often, and after what pauses, a call that failed transiently before committing is
/// tried again: about 3 s in all, after which the caller (the loop) reports the outage and
/// backs off itself.
pub const RETRY_PAUSES_MS: [u64; 6] = [20, 50, 100, 250, 600, 1500];

/// Why a primitive failed, and whether trying the call again is safe.
#[derive(Debug)]
pub struct Fail {
    /// What the caller sees if the call gives up.
    pub error: StoreError,
    /// Whether it may run again.
    pub retry: Retry,
}

/// Whether a failed call may run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Not retryable (a conflict, a missing row, bad data, an embedded database's error).
    No,
    /// Transient, and nothing was committed: the call may simply run again.
    Safe,
    /// The connection failed while committing: the transaction may or may not have
    /// committed. Only a call that can find out (a claim by its token, a finish by reading
    /// the run back) or that is idempotent may run again.
    Unknown,
}

impl From<StoreError> for Fail {
    fn from(error: StoreError) -> Fail {
        Fail {
            error,
            retry: Retry::No,
        }
    }
}

impl Fail {
    /// A transient failure before anything was committed.
    pub fn transient(message: impl Into<String>) -> Fail {
        Fail {
            error: StoreError::transient(message),
            retry: Retry::Safe,
        }
    }

    /// The same failure for an idempotent call, where a lost COMMIT answer is as safe to
    /// try again as a failure before it (the effect applied twice is the effect once).
    pub fn idempotent(self) -> Fail {
        match self.retry {
            Retry::Unknown => Fail {
                retry: Retry::Safe,
                ..self
            },
            _ => self,
        }
    }
}

/// Runs `op` until it succeeds, fails for good, or has failed transiently
/// `RETRY_PAUSES_MS.len() + 1` times. `op` must be safe to run again after a
/// [`Retry::Safe`] failure (nothing of it was committed); an [`Retry::Unknown`] one ends the
/// loop (wrap an idempotent call's failures in [`Fail::idempotent`]).
pub async fn retrying<D, T, F, Fut>(dialect: &D, what: &str, mut op: F) -> StoreResult<T>
where
    D: Dialect,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Fail>>,
{
    let mut pauses = RETRY_PAUSES_MS.iter();
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(f) if f.retry == Retry::Safe => match pauses.next() {
                Some(ms) => {
                    dialect
                        .pause(what, &f.error, Duration::from_millis(*ms))
                        .await
                }
                None => return Err(f.error),
            },
            Err(f) => return Err(f.error),
        }
    }
}

/// The retry loop of a conditional write whose COMMIT may be lost (a run's finish): `op` is
/// told whether an earlier try's outcome is unknown (`resolving`), so that it can recognise
/// its own write already applied instead of reporting a conflict.
pub async fn retrying_resolving<D, T, F, Fut>(dialect: &D, what: &str, mut op: F) -> StoreResult<T>
where
    D: Dialect,
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<T, Fail>>,
{
    let mut pauses = RETRY_PAUSES_MS.iter();
    let mut resolving = false;
    loop {
        match op(resolving).await {
            Ok(v) => return Ok(v),
            Err(f) if f.retry == Retry::No => return Err(f.error),
            Err(f) => {
                resolving |= f.retry == Retry::Unknown;
                let Some(ms) = pauses.next() else {
                    return Err(f.error);
                };
                dialect
                    .pause(what, &f.error, Duration::from_millis(*ms))
                    .await;
            }
        }
    }
}
