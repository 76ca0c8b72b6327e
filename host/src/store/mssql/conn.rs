//! The SQL Server store's plumbing: connections (a small pool of tiberius clients), the
//! mapping of driver errors to store errors, and the conversions between instants and
//! `DATETIME2` without a date-time crate.
//!
//! Why an own pool: tiberius is a plain client, and what the store needs from a pool is small
//! (a bounded number of connections, a wait with a timeout, and *never* reusing a connection
//! that failed or was left inside a transaction). A connection that saw a driver error is
//! dropped, not recycled: the server then rolls back whatever it had open.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use takt_core::store::StoreError;
use tiberius::time::{Date, DateTime2, Time};
use tiberius::{Client, ColumnData, Config, Row, ToSql};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::compat::{Compat, TokioAsyncWriteCompatExt};

/// A tiberius client on a tokio TCP stream.
pub(crate) type Conn = Client<Compat<TcpStream>>;

pub(crate) use takt_core::store::engine::{Fail, Retry};

/// SQL Server error numbers the store acts on.
mod code {
    pub(super) const DEADLOCK_VICTIM: u32 = 1205;
    pub(super) const LOCK_TIMEOUT: u32 = 1222;
    pub(super) const UNIQUE_INDEX: u32 = 2601;
    pub(super) const UNIQUE_CONSTRAINT: u32 = 2627;
    pub(super) const INVALID_OBJECT: u32 = 208;
    pub(super) const INVALID_COLUMN: u32 = 207;
    pub(super) const PERMISSION_DENIED: u32 = 229;
    pub(super) const PERMISSION_DENIED_DB: u32 = 262;
    pub(super) const CANNOT_OPEN_DATABASE: u32 = 4060;
    pub(super) const LOGIN_FAILED: u32 = 18456;
    /// What the iridium emulator raises for most of its own errors (`THROW`'s default).
    pub(super) const EMULATOR_GENERIC: u32 = 50000;
    /// Azure SQL and failover: the database is moving or busy; the documented advice is retry.
    pub(super) const TRANSIENT: [u32; 9] =
        [40613, 40197, 40501, 49918, 49919, 49920, 4221, 10928, 10929];
}

/// Maps a driver error to a [`Fail`] whose kind the host can act on; `what` says what the
/// store was doing, `shown` where (never with the password).
pub(crate) fn ms(shown: &str, what: &str, err: tiberius::error::Error) -> Fail {
    use tiberius::error::Error as E;
    match &err {
        E::Server(t) => {
            let n = t.code();
            let e = format!("error {n}: {}", t.message());
            match n {
                code::UNIQUE_INDEX | code::UNIQUE_CONSTRAINT => StoreError::conflict(format!(
                    "{what} in {shown} violates a unique key ({e}); another node may have \
                     written the same row first: reload and decide again"
                ))
                .into(),
                // The emulator takes its locks without waiting and reports a conflict as a
                // generic error 50000: what a real server reports as a lock timeout.
                n if n == code::DEADLOCK_VICTIM
                    || n == code::LOCK_TIMEOUT
                    || (n == code::EMULATOR_GENERIC && t.message().contains("lock conflict")) =>
                {
                    Fail::transient(format!(
                        "{what} in {shown} lost a race with another transaction ({e}); retry"
                    ))
                }
                n if code::TRANSIENT.contains(&n) => Fail::transient(format!(
                    "the database {shown} is unavailable ({what}: {e}); check that the server is up and accepting connections"
                )),
                code::INVALID_OBJECT | code::INVALID_COLUMN => StoreError::other(format!(
                    "the database {shown} lacks takt's tables ({what}: {e}); run `takt db \
                     migrate` or check Database= in the connection string"
                ))
                .into(),
                // The emulator reports a refused login as a generic error 50000.
                n if n == code::LOGIN_FAILED
                    || n == code::CANNOT_OPEN_DATABASE
                    || t.message().contains("Login failed") =>
                {
                    StoreError::other(format!(
                        "the server {shown} refused the login ({e}); check User Id, Password and \
                     Database in the connection string, and that the login may open that \
                     database"
                    ))
                    .into()
                }
                code::PERMISSION_DENIED | code::PERMISSION_DENIED_DB => StoreError::other(format!(
                    "the database {shown} refused {what} ({e}); grant the host's login the \
                         permissions listed in sql/README.md"
                ))
                .into(),
                _ => StoreError::other(format!("sql server error on {shown} while {what}: {e}"))
                    .into(),
            }
        }
        E::Io { .. } => Fail::transient(format!(
            "the database {shown} is unreachable ({what}: {err}); check that the server runs and that this machine can reach it"
        )),
        E::Tls(m) => StoreError::other(format!(
            "tls with {shown} failed ({what}: {m}); install the server's certificate as trusted, \
             or set TrustServerCertificate=True (only on a trusted network), or \
             Encrypt=False if the server does not offer tls"
        ))
        .into(),
        E::Routing { host, port } => Fail::transient(format!(
            "the server {shown} redirected the connection to {host}:{port} ({what}); connect \
             to the server it redirects to directly"
        )),
        _ => StoreError::other(format!(
            "sql server driver error on {shown} while {what}: {err}"
        ))
        .into(),
    }
}

/// Opens one connection, following one server redirect (Azure SQL gateways route a login to
/// the database's node).
pub(crate) async fn open(config: &Config, shown: &str, timeout: Duration) -> Result<Conn, Fail> {
    let attempt = async {
        let mut config = config.clone();
        for _ in 0..2 {
            let addr = config.get_addr();
            let tcp = TcpStream::connect(&addr).await.map_err(|e| {
                Fail::transient(format!(
                    "cannot reach the database server {shown} ({e}); check Server=host,port \
                     in the connection string and that sql server listens on tcp there"
                ))
            })?;
            tcp.set_nodelay(true).ok();
            match Client::connect(config.clone(), tcp.compat_write()).await {
                Ok(c) => return Ok(c),
                Err(tiberius::error::Error::Routing { host, port }) => {
                    config.host(&host);
                    config.port(port);
                }
                Err(e) => return Err(ms(shown, "logging in", e)),
            }
        }
        Err(Fail::transient(format!(
            "the server {shown} redirected the login more than once; connect to the server it redirects to directly"
        )))
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(Fail::transient(format!(
            "no connection to {shown} within {timeout:?}; the server is down, unreachable or \
             overloaded"
        ))),
    }
}

/// A bounded set of connections. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    config: Config,
    shown: Arc<str>,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
    timeout: Duration,
    /// Statements run on every new connection (session settings).
    setup: Vec<&'static str>,
    /// The peer is the emulator: instants travel as BIGINT Unix milliseconds.
    emulator: bool,
}

impl Pool {
    pub(crate) fn new(
        config: Config,
        shown: Arc<str>,
        size: usize,
        timeout: Duration,
        setup: Vec<&'static str>,
        emulator: bool,
    ) -> Pool {
        Pool {
            inner: Arc::new(PoolInner {
                config,
                shown,
                idle: Mutex::new(Vec::new()),
                permits: Arc::new(Semaphore::new(size.max(1))),
                timeout,
                setup,
                emulator,
            }),
        }
    }

    /// A connection: an idle one, or a new one while fewer than the pool's size are out.
    pub(crate) async fn get(&self, what: &str) -> Result<Pooled, Fail> {
        let p = &self.inner;
        let permit = match tokio::time::timeout(p.timeout, p.permits.clone().acquire_owned()).await
        {
            Ok(Ok(permit)) => permit,
            _ => {
                return Err(Fail::transient(format!(
                    "no free connection to {} within {:?} ({what}); every connection is \
                         busy (raise the pool size, or look for long transactions)",
                    p.shown, p.timeout
                )));
            }
        };
        let idle = p.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let conn = match idle {
            Some(c) => c,
            None => {
                let mut c = open(&p.config, &p.shown, p.timeout).await?;
                for s in &p.setup {
                    c.simple_query(*s)
                        .await
                        .map_err(|e| ms(&p.shown, "setting up a connection", e))?
                        .into_results()
                        .await
                        .map_err(|e| ms(&p.shown, "setting up a connection", e))?;
                }
                c
            }
        };
        Ok(Pooled {
            conn: Some(conn),
            pool: self.inner.clone(),
            _permit: permit,
            keep: true,
            in_tx: false,
        })
    }
}

/// A connection out of the pool; back into it on drop unless it failed or is inside a
/// transaction (then it is closed, and the server rolls the transaction back).
pub(crate) struct Pooled {
    conn: Option<Conn>,
    pool: Arc<PoolInner>,
    _permit: OwnedSemaphorePermit,
    keep: bool,
    in_tx: bool,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take()
            && self.keep
            && !self.in_tx
        {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(c);
        }
    }
}

/// Parameters of one statement, named `@P1`, `@P2`, … in the order they are added.
#[derive(Default)]
pub(crate) struct Params {
    values: Vec<Box<dyn ToSql>>,
    /// Instants as BIGINT milliseconds (the emulator's schema) instead of `datetime2`.
    emulator: bool,
}

impl Params {
    /// Adds `v` and returns its placeholder.
    pub(crate) fn add(&mut self, v: impl ToSql + 'static) -> String {
        self.values.push(Box::new(v));
        format!("@P{}", self.values.len())
    }

    /// Adds an instant (Unix milliseconds, or NULL) in the peer's form and returns its
    /// placeholder.
    pub(crate) fn at(&mut self, ms: Option<i64>) -> String {
        if self.emulator {
            self.add(ms)
        } else {
            self.add(Dt(ms))
        }
    }

    /// `IN`-list placeholders for `values` (the caller handles an empty list).
    pub(crate) fn list(&mut self, values: &[String]) -> String {
        values
            .iter()
            .map(|v| self.add(v.clone()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn refs(&self) -> Vec<&dyn ToSql> {
        self.values.iter().map(|p| &**p).collect()
    }
}

impl Pooled {
    /// An empty parameter list for this peer.
    pub(crate) fn params(&self) -> Params {
        Params {
            values: Vec::new(),
            emulator: self.pool.emulator,
        }
    }

    fn conn(&mut self) -> &mut Conn {
        self.conn
            .as_mut()
            .expect("a pooled connection is present until dropped")
    }

    fn failed(&mut self, what: &str, e: tiberius::error::Error) -> Fail {
        self.keep = false;
        ms(&self.pool.shown, what, e)
    }

    /// The rows of the first result of `sql`.
    pub(crate) async fn rows(
        &mut self,
        what: &str,
        sql: &str,
        params: &Params,
    ) -> Result<Vec<Row>, Fail> {
        let refs = params.refs();
        let r = match self.conn().query(sql, &refs).await {
            Ok(stream) => stream.into_first_result().await,
            Err(e) => Err(e),
        };
        r.map_err(|e| self.failed(what, e))
    }

    /// The first row of `sql`'s first result, if any.
    pub(crate) async fn row(
        &mut self,
        what: &str,
        sql: &str,
        params: &Params,
    ) -> Result<Option<Row>, Fail> {
        Ok(self.rows(what, sql, params).await?.into_iter().next())
    }

    /// Runs `sql`; the rows it affected (all statements together).
    pub(crate) async fn exec(
        &mut self,
        what: &str,
        sql: &str,
        params: &Params,
    ) -> Result<u64, Fail> {
        let refs = params.refs();
        let r = self.conn().execute(sql, &refs).await;
        match r {
            Ok(r) => Ok(r.total()),
            Err(e) => Err(self.failed(what, e)),
        }
    }

    /// Runs `sql` (no parameters, several statements allowed) and drains its results.
    pub(crate) async fn batch(&mut self, what: &str, sql: &str) -> Result<(), Fail> {
        let r = match self.conn().simple_query(sql).await {
            Ok(stream) => stream.into_results().await.map(drop),
            Err(e) => Err(e),
        };
        r.map_err(|e| self.failed(what, e))
    }

    /// Starts a transaction. Until [`Pooled::commit`], dropping the connection closes it.
    pub(crate) async fn begin(&mut self, what: &str) -> Result<(), Fail> {
        self.in_tx = true;
        self.batch(what, "BEGIN TRANSACTION").await
    }

    /// Commits. A connection that fails here leaves the outcome unknown ([`Retry::Unknown`]).
    pub(crate) async fn commit(&mut self) -> Result<(), Fail> {
        let shown = self.pool.shown.clone();
        match self.batch("committing", "COMMIT TRANSACTION").await {
            Ok(()) => {
                self.in_tx = false;
                Ok(())
            }
            Err(mut f) => {
                if f.retry == Retry::Safe {
                    // The COMMIT was sent: it may have been applied.
                    f.retry = Retry::Unknown;
                    f.error = StoreError::transient(format!(
                        "the connection to {shown} failed while committing; the outcome is \
                         unknown ({})",
                        f.error
                    ));
                }
                Err(f)
            }
        }
    }

    /// Rolls back the transaction [`Pooled::begin`] started (a connection that fails here is
    /// closed, which rolls back too).
    pub(crate) async fn rollback(&mut self) -> Result<(), Fail> {
        self.batch("rolling back", "ROLLBACK TRANSACTION").await?;
        self.in_tx = false;
        Ok(())
    }
}

// ---- values ------------------------------------------------------------------------------

/// Days from 0001-01-01 (DATETIME2's day 0) to 1970-01-01.
const DATETIME2_EPOCH_DAYS: i64 = 719_162;
/// Days from 1900-01-01 (DATETIME's day 0) to 1970-01-01.
const DATETIME_EPOCH_DAYS: i64 = 25_567;
const DAY_MS: i64 = 86_400_000;

/// An instant (Unix milliseconds, or NULL) as a `datetime2` parameter.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dt(pub(crate) Option<i64>);

impl ToSql for Dt {
    fn to_sql(&self) -> ColumnData<'_> {
        ColumnData::DateTime2(self.0.map(|ms| {
            let days = ms.div_euclid(DAY_MS) + DATETIME2_EPOCH_DAYS;
            let rem = ms.rem_euclid(DAY_MS);
            // Scale 7 (100 ns), the precision of the `datetime2` the parameter is declared as.
            DateTime2::new(
                Date::new(u32::try_from(days).unwrap_or(0)),
                Time::new(u64::try_from(rem).unwrap_or(0) * 10_000, 7),
            )
        }))
    }
}

/// An owned text parameter that may be NULL.
pub(crate) fn text(v: Option<String>) -> Option<Cow<'static, str>> {
    v.map(Cow::Owned)
}

/// A cell's value could not be read as the type asked: a hand-changed schema.
pub(crate) fn bad_cell(shown: &str, what: &str, i: usize, got: &ColumnData<'_>) -> StoreError {
    StoreError::other(format!(
        "{what} in {shown} has an unexpected type in column {} ({}); the schema was changed \
         by hand: compare it with sql/mssql/",
        i + 1,
        kind(got)
    ))
}

/// The variant's name, for messages (tiberius keeps its type names private).
fn kind(c: &ColumnData<'_>) -> String {
    let d = format!("{c:?}");
    d.split('(')
        .next()
        .unwrap_or("unknown")
        .to_ascii_lowercase()
}

fn cell(row: &Row, i: usize) -> Option<&ColumnData<'static>> {
    row.cells().nth(i).map(|(_, c)| c)
}

/// Reads cells of one row, naming the row in errors.
pub(crate) struct Cells<'r> {
    pub(crate) row: &'r Row,
    pub(crate) shown: &'r str,
    pub(crate) what: &'r str,
}

impl Cells<'_> {
    /// The cell, `None` when it is NULL (of whatever type: the emulator sends NULLs of
    /// `OUTPUT` columns as text).
    fn value(&self, i: usize) -> Result<Option<&ColumnData<'static>>, StoreError> {
        let c = self.get(i)?;
        let null = matches!(
            c,
            ColumnData::String(None)
                | ColumnData::I64(None)
                | ColumnData::I32(None)
                | ColumnData::I16(None)
                | ColumnData::U8(None)
                | ColumnData::Bit(None)
                | ColumnData::F32(None)
                | ColumnData::F64(None)
                | ColumnData::Numeric(None)
                | ColumnData::Binary(None)
                | ColumnData::Guid(None)
                | ColumnData::DateTime(None)
                | ColumnData::SmallDateTime(None)
                | ColumnData::DateTime2(None)
                | ColumnData::DateTimeOffset(None)
        );
        Ok(if null { None } else { Some(c) })
    }

    fn get(&self, i: usize) -> Result<&ColumnData<'static>, StoreError> {
        cell(self.row, i).ok_or_else(|| {
            StoreError::other(format!(
                "{} in {} has too few columns; the schema was changed by hand: compare it \
                 with sql/mssql/",
                self.what, self.shown
            ))
        })
    }

    /// An integer of any width (`BIGINT`, `INT`, `COUNT(*)`), or NULL.
    pub(crate) fn int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        let Some(c) = self.value(i)? else {
            return Ok(None);
        };
        Ok(match c {
            ColumnData::I64(v) => *v,
            ColumnData::I32(v) => v.map(i64::from),
            ColumnData::I16(v) => v.map(i64::from),
            ColumnData::U8(v) => v.map(i64::from),
            ColumnData::Numeric(v) => v.map(|n| n.value() as i64 / 10_i64.pow(n.scale().into())),
            other => return Err(bad_cell(self.shown, self.what, i, other)),
        })
    }

    pub(crate) fn int_req(&self, i: usize) -> Result<i64, StoreError> {
        self.int(i)?.ok_or_else(|| self.null(i))
    }

    fn null(&self, i: usize) -> StoreError {
        StoreError::other(format!(
            "{} in {} has NULL in column {} where takt never writes one; fix the row or \
             restore a backup",
            self.what,
            self.shown,
            i + 1
        ))
    }

    /// Text, or NULL.
    pub(crate) fn text(&self, i: usize) -> Result<Option<String>, StoreError> {
        let Some(c) = self.value(i)? else {
            return Ok(None);
        };
        Ok(match c {
            ColumnData::String(v) => v.as_ref().map(|s| s.to_string()),
            other => return Err(bad_cell(self.shown, self.what, i, other)),
        })
    }

    pub(crate) fn text_req(&self, i: usize) -> Result<String, StoreError> {
        self.text(i)?.ok_or_else(|| self.null(i))
    }

    /// A `BIT` (or an integer 0/1, as some servers return for expressions).
    pub(crate) fn bool(&self, i: usize) -> Result<bool, StoreError> {
        match self.value(i)? {
            Some(ColumnData::Bit(Some(b))) => Ok(*b),
            None => Err(self.null(i)),
            _ => Ok(self.int_req(i)? != 0),
        }
    }

    /// An instant as Unix milliseconds (truncated to the millisecond), or NULL.
    pub(crate) fn instant(&self, i: usize) -> Result<Option<i64>, StoreError> {
        let Some(c) = self.value(i)? else {
            return Ok(None);
        };
        Ok(match c {
            // The emulator's schema keeps instants as BIGINT Unix milliseconds.
            ColumnData::I64(v) => *v,
            ColumnData::DateTime2(v) => v.map(dt2_ms),
            ColumnData::DateTimeOffset(v) => v.map(|d| dt2_ms(d.datetime2())),
            ColumnData::DateTime(v) => v.map(|d| {
                (i64::from(d.days()) - DATETIME_EPOCH_DAYS) * DAY_MS
                    + i64::from(d.seconds_fragments()) * 10 / 3
            }),
            ColumnData::SmallDateTime(v) => v.map(|d| {
                (i64::from(d.days()) - DATETIME_EPOCH_DAYS) * DAY_MS
                    + i64::from(d.seconds_fragments()) * 60_000
            }),
            other => return Err(bad_cell(self.shown, self.what, i, other)),
        })
    }

    pub(crate) fn instant_req(&self, i: usize) -> Result<i64, StoreError> {
        self.instant(i)?.ok_or_else(|| self.null(i))
    }
}

fn dt2_ms(d: DateTime2) -> i64 {
    let days = i64::from(d.date().days()) - DATETIME2_EPOCH_DAYS;
    let t = d.time();
    let inc = i64::try_from(t.increments()).unwrap_or(0);
    let scale = i32::from(t.scale());
    let ms = if scale >= 3 {
        inc / 10_i64.pow((scale - 3).unsigned_abs())
    } else {
        inc * 10_i64.pow((3 - scale).unsigned_abs())
    };
    days * DAY_MS + ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime2_round_trips_milliseconds() {
        for ms in [0, 1, 86_399_999, 1_780_000_000_123, -1, -86_400_001] {
            let ColumnData::DateTime2(Some(d)) = Dt(Some(ms)).to_sql() else {
                panic!("a datetime2")
            };
            assert_eq!(dt2_ms(d), ms, "{ms}");
        }
        assert!(matches!(Dt(None).to_sql(), ColumnData::DateTime2(None)));
    }
}
