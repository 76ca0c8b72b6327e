//! What the server stores (PostgreSQL, SQL Server) share about failing calls: whether a
//! failed call may run again ([`Retry`]), the pauses between tries, and the two retry loops
//! every store call goes through. The drivers differ; the decision does not.

use std::future::Future;
use std::time::Duration;

use takt_core::store::{StoreError, StoreResult};

/// How often, and after what pauses, a call that failed transiently before committing is
/// tried again: about 3 s in all, after which the caller (the loop) reports the outage and
/// backs off itself.
pub(crate) const RETRY_PAUSES_MS: [u64; 6] = [20, 50, 100, 250, 600, 1500];

/// Why a call failed, and whether trying it again is safe.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) error: StoreError,
    pub(crate) retry: Retry,
}

/// Whether a failed call may run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Not retryable (a conflict, a missing row, bad data).
    No,
    /// Transient, and nothing was committed: the call may simply run again.
    Safe,
    /// The connection failed while committing: the transaction may or may not have committed.
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
    pub(crate) fn transient(message: String) -> Fail {
        Fail {
            error: StoreError::transient(message),
            retry: Retry::Safe,
        }
    }
}

/// `f` for a call that is idempotent: a COMMIT whose answer was lost is as safe to try again
/// as a failure before it (the call's effect, applied twice, is its effect once).
pub(crate) fn idempotent(f: Fail) -> Fail {
    match f.retry {
        Retry::Unknown => Fail {
            retry: Retry::Safe,
            ..f
        },
        _ => f,
    }
}

/// Runs `op` until it succeeds, fails for good, or has failed transiently
/// `RETRY_PAUSES_MS.len() + 1` times. `op` must be safe to run again after a
/// [`Retry::Safe`] failure (nothing of it was committed).
pub(crate) async fn retrying<T, F, Fut>(what: &str, mut op: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Fail>>,
{
    let mut pauses = RETRY_PAUSES_MS.iter();
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(f) if f.retry == Retry::Safe => match pauses.next() {
                Some(ms) => {
                    tracing::debug!("{what}: {}; retrying in {ms} ms", f.error);
                    tokio::time::sleep(Duration::from_millis(*ms)).await;
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
pub(crate) async fn retrying_resolving<T, F, Fut>(mut op: F) -> StoreResult<T>
where
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
                tokio::time::sleep(Duration::from_millis(*ms)).await;
            }
        }
    }
}
