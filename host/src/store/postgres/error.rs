//! PostgreSQL driver errors as the engine's [`Fail`]s: a kind the host can act on, a message
//! saying what and where, and whether the call may run again.

use deadpool_postgres::PoolError;
use takt_core::store::StoreError;
use takt_core::store::engine::{Fail, Retry};
use tokio_postgres::error::SqlState;

/// Maps a driver error to a [`Fail`] whose kind the host can act on; `what` says what the
/// store was doing.
pub(super) fn pg(shown: &str, what: &str, err: tokio_postgres::Error) -> Fail {
    let e = detail(&err);
    let transient = Fail::transient;
    if let Some(code) = err.code() {
        let c = code.code();
        if *code == SqlState::UNIQUE_VIOLATION {
            return StoreError::conflict(format!(
                "{what} in {shown} violates a unique key ({e}); another node may have written \
                 the same row first: reload and decide again"
            ))
            .into();
        }
        if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::LOCK_NOT_AVAILABLE
        {
            return transient(format!(
                "{what} in {shown} lost a race with another transaction ({e}); retry"
            ));
        }
        if *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::TOO_MANY_CONNECTIONS
            || c.starts_with("08")
        {
            return transient(format!(
                "the database {shown} is unavailable ({what}: {e}); check that the server is up and accepting connections"
            ));
        }
        if *code == SqlState::UNDEFINED_TABLE || *code == SqlState::UNDEFINED_COLUMN {
            return StoreError::other(format!(
                "the database {shown} lacks takt's tables ({what}: {e}); run `takt db migrate` \
                 or check the configured schema"
            ))
            .into();
        }
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            return StoreError::other(format!(
                "the database {shown} refused the login ({e}); check the user and password in \
                 the connection string"
            ))
            .into();
        }
        if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            return StoreError::other(format!(
                "the database {shown} refused {what} ({e}); grant the host's login the \
                 privileges listed in sql/README.md"
            ))
            .into();
        }
        return StoreError::other(format!("postgres error on {shown} while {what}: {e}")).into();
    }
    // No SQLSTATE: the connection itself failed (closed, refused, reset, timed out).
    transient(format!(
        "the database {shown} is unreachable ({what}: {e}); check that the server runs and that this machine can reach it"
    ))
}

/// What the server said (SQLSTATE, message, detail), or the driver's error and its cause:
/// `tokio_postgres::Error`'s own text is only "db error" for everything the server reports.
fn detail(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} {}", db.code().code(), db.message());
        if let Some(d) = db.detail() {
            s.push_str(&format!(" ({d})"));
        }
        return s;
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

pub(super) fn pool_error(shown: &str, what: &str, e: PoolError) -> Fail {
    match e {
        PoolError::Backend(e) => pg(shown, what, e),
        PoolError::Timeout(_) => Fail::transient(format!(
            "no connection to {shown} within the connect timeout ({what}); the database is \
             down, unreachable or out of connections"
        )),
        other => StoreError::other(format!(
            "cannot get a connection to {shown} ({what}): {other}"
        ))
        .into(),
    }
}

/// Ends a transaction; a connection that fails during COMMIT leaves its outcome unknown.
pub(super) async fn commit(
    tx: deadpool_postgres::Transaction<'_>,
    shown: &str,
) -> Result<(), Fail> {
    tx.commit().await.map_err(|e| {
        let mut f = pg(shown, "committing", e);
        if f.retry == Retry::Safe {
            // The COMMIT was sent: it may have been applied.
            f.retry = Retry::Unknown;
            f.error = StoreError::transient(format!(
                "the connection to {shown} failed while committing; the outcome is unknown \
                 ({})",
                f.error
            ));
        }
        f
    })
}
