//! The SQL Server dialect's sessions and primitives: a pooled connection for a store call, and
//! the statements the engine's rules run on it.
//!
//! Locked reads take `WITH (UPDLOCK, READPAST, ROWLOCK)` (a row another node's claim holds is
//! passed over, not waited for); keyed inserts are guarded by `NOT EXISTS … WITH (UPDLOCK,
//! HOLDLOCK)` under the unique index. Row counts come from `OUTPUT` rows, not the driver's
//! affected counts (the emulator reports 0). A connection dropped inside a transaction is
//! closed, never reused, which rolls the transaction back.

use std::sync::Arc;

use jiff::Timestamp;
use takt_core::alert::{AlertDelivery, AlertKey};
use takt_core::attempt::{Attempt, AttemptEnd};
use takt_core::group::GroupDef;
use takt_core::job::{JobDef, JobId, JobName};
use takt_core::node::{InstanceId, NodeInfo, NodeSession, NodeStatus};
use takt_core::pause::{Hold, Pause, PauseKind};
use takt_core::run::{NodeId, Progress, Run, RunId, RunState};
use takt_core::store::engine::{
    Conn, DueSet, Fail, FinishWrite, NextFireMove, PendingDue, Res, Retry, Session,
};
use takt_core::store::{
    CancelRequest, DueJob, JobQuery, LogLevel, LogLine, PurgeCounts, RunFilter, StoreError,
    StoreErrorKind,
};

use super::conn::{Cells, Params, Pooled, text};
use super::dialect;
use super::rows::{
    get_job, get_run, insert_run, inserted, job_of, job_params, run_of, tag_filter, token_of,
    update_run_if,
};
use crate::store::rows::{
    ACTION_COLUMNS, ATTEMPT_COLUMNS, ActionRow, AttemptRow, DELIVERY_COLUMNS, DeliveryRow, DueRow,
    HOLD_COLUMNS, HoldRow, JOB_COLUMNS, JOB_WRITE_COLUMNS, JobRow, NODE_COLUMNS, NodeRow,
    PAUSE_COLUMNS, PauseRow, RUN_COLUMNS, SESSION_COLUMNS, SessionRow, TOKEN_COLUMNS, corrupt,
    group_def, to_i64,
};
use takt_core::store::access::{ApiToken, NewToken, OperatorAction};

/// The most log lines one `INSERT … VALUES` carries (SQL Server allows 2 100 parameters).
const LOG_CHUNK: usize = 500;

/// The most ids one `IN (…)` list carries (within SQL Server's 2 100 parameters).
const ID_CHUNK: usize = 1_000;

/// A finish's run time in whole milliseconds, as `runs.elapsed_ms` stores it.
fn elapsed_ms(write: &FinishWrite) -> Option<i64> {
    write
        .elapsed
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The most finishes one `UPDATE … FROM (VALUES …)` carries: 12 parameters each, within SQL
/// Server's 2 100 per request. A batch of the engine's 256 is two statements.
const FINISH_CHUNK: usize = 128;

/// A pooled connection for one store call.
pub struct MssqlSession {
    pub(super) pooled: Pooled,
    pub(super) shown: Arc<str>,
    pub(super) emulator: bool,
}

impl std::fmt::Debug for MssqlSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MssqlSession")
            .field("database", &self.shown)
            .finish_non_exhaustive()
    }
}

/// The primitives on a pooled connection, in a transaction or not.
pub struct MssqlConn<'a> {
    c: &'a mut Pooled,
    shown: &'a str,
    emulator: bool,
    tx: bool,
}

impl Session for MssqlSession {
    type Conn<'a> = MssqlConn<'a>;

    fn conn(&mut self) -> MssqlConn<'_> {
        MssqlConn {
            c: &mut self.pooled,
            shown: &self.shown,
            emulator: self.emulator,
            tx: false,
        }
    }

    async fn begin(&mut self, what: &'static str) -> Res<MssqlConn<'_>> {
        self.pooled.begin(what).await?;
        Ok(MssqlConn {
            c: &mut self.pooled,
            shown: &self.shown,
            emulator: self.emulator,
            tx: true,
        })
    }
}

fn top(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl MssqlConn<'_> {
    async fn token_named(&mut self, name: &str) -> Res<Option<ApiToken>> {
        let what = "reading a token";
        let mut p = self.c.params();
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE name = {}",
            p.add(name.to_string())
        );
        let row = self.c.row(what, &sql, &p).await?;
        Ok(row.map(|r| token_of(&r, self.shown)).transpose()?)
    }
}

impl MssqlConn<'_> {
    /// The nodes (all, or the one named) with their running runs; `lock` takes the row's
    /// update lock (and its key range while it is missing) to the end of the transaction.
    ///
    /// Two plain statements rather than one with a join or a correlated count: the emulator
    /// returns no rows for `JOIN … ON`, and the node table is small.
    /// The cancel requests `sql` selects (run id, by, at).
    async fn cancels(&mut self, sql: &str, p: &Params) -> Res<Vec<CancelRequest>> {
        let shown = self.shown;
        let rows = self.c.rows("reading cancel requests", sql, p).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown,
                what: "a cancel request",
            };
            let run = c.int_req(0)?;
            let at = c.instant_req(2)?;
            out.push(CancelRequest {
                run: RunId(run),
                by: c.text_req(1)?,
                at: Timestamp::from_millisecond(at).map_err(|e| {
                    corrupt(
                        shown,
                        &format!("the cancel of run {run}"),
                        "requested_at",
                        e,
                    )
                })?,
            });
        }
        Ok(out)
    }

    /// The holds of `only` (or every job), by job id.
    async fn holds(&mut self, only: Option<JobId>) -> Res<Vec<(JobId, Hold)>> {
        let shown = self.shown;
        let what = "reading job holds";
        let mut p = self.c.params();
        let filter = match only {
            Some(j) => format!(" WHERE job_id = {}", p.add(j.0)),
            None => String::new(),
        };
        let rows = self
            .c
            .rows(
                what,
                &format!("SELECT job_id, {HOLD_COLUMNS} FROM job_holds{filter} ORDER BY job_id"),
                &p,
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown,
                what: "a job hold",
            };
            let job = c.int_req(0)?;
            let hold = HoldRow {
                next_fire: c.instant(1)?,
                paused_at: c.instant(2)?,
                paused_by: c.text(3)?,
                reason: c.text(4)?,
            }
            .into_hold(shown, job)?;
            out.push((JobId(job), hold));
        }
        Ok(out)
    }

    /// The pauses of `only` (or every group and node), by kind then name.
    /// A `job_groups` row (name, max_running, released_at).
    fn group_of(&self, r: &tiberius::Row) -> takt_core::store::StoreResult<(String, GroupDef)> {
        let c = Cells {
            row: r,
            shown: self.shown,
            what: "a group",
        };
        let name = c.text_req(0)?;
        let released = c
            .instant(2)?
            .map(|at| {
                Timestamp::from_millisecond(at)
                    .map_err(|e| corrupt(self.shown, &format!("group {name}"), "released_at", e))
            })
            .transpose()?;
        let def = group_def(self.shown, &name, c.int(1)?, released)?;
        Ok((name, def))
    }

    async fn pauses(
        &mut self,
        only: Option<(PauseKind, &str)>,
    ) -> Res<Vec<(PauseKind, String, Pause)>> {
        let shown = self.shown;
        let what = "reading pauses";
        let mut p = self.c.params();
        let filter = match only {
            Some((k, n)) => format!(
                " WHERE kind = {} AND name = {}",
                p.add(k.name()),
                p.add(n.to_string())
            ),
            None => String::new(),
        };
        let rows = self
            .c
            .rows(
                what,
                &format!(
                    "SELECT kind, name, {PAUSE_COLUMNS} FROM pauses{filter} ORDER BY kind, name"
                ),
                &p,
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown,
                what: "a pause",
            };
            out.push(
                PauseRow {
                    kind: c.text_req(0)?,
                    name: c.text_req(1)?,
                    paused_at: c.instant_req(2)?,
                    paused_by: c.text_req(3)?,
                    reason: c.text(4)?,
                }
                .into_pause(shown)?,
            );
        }
        Ok(out)
    }

    async fn node_rows(&mut self, only: Option<&NodeId>, lock: bool) -> Res<Vec<NodeStatus>> {
        let shown = self.shown;
        let what = "listing nodes";
        let mut p = self.c.params();
        let filter = match only {
            Some(n) => format!(" WHERE id = {}", p.add(n.0.clone())),
            None => String::new(),
        };
        let hint = if lock {
            " WITH (UPDLOCK, HOLDLOCK)"
        } else {
            ""
        };
        let rows = self
            .c
            .rows(
                what,
                &format!("SELECT {NODE_COLUMNS} FROM nodes{hint}{filter} ORDER BY id"),
                &p,
            )
            .await?;
        let running = self
            .c
            .rows(
                what,
                "SELECT node_id FROM runs WHERE state = 'running' AND node_id IS NOT NULL",
                &Params::default(),
            )
            .await?;
        let mut per_node: std::collections::HashMap<String, i64> = Default::default();
        for r in &running {
            let cells = Cells {
                row: r,
                shown,
                what: "a running run's node",
            };
            if let Some(id) = cells.text(0)? {
                *per_node.entry(id).or_default() += 1;
            }
        }
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown,
                what: "a node row",
            };
            let row = NodeRow {
                id: c.text_req(0)?,
                instance: c.text(1)?,
                host_name: c.text(2)?.unwrap_or_default(),
                pid: c.int(3)?,
                version: c.text(4)?.unwrap_or_default(),
                capacity: c.int(5)?.unwrap_or(0),
                tags: c.text(6)?.unwrap_or_else(|| "[]".to_string()),
                started_at: c.instant(7)?,
                heartbeat_at: c.instant(8)?,
                stopped_at: c.instant(9)?,
            };
            let running = per_node.get(&row.id).copied().unwrap_or(0);
            out.push(row.into_status(shown, running)?);
        }
        Ok(out)
    }

    /// Ends the open attempt `attempt` of run `id` with `end`; whether it was open.
    async fn end_attempt(&mut self, id: RunId, attempt: u32, end: &AttemptEnd) -> Res<bool> {
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE run_attempts SET finished_at = {}, outcome = {}, error = {} \
             OUTPUT INSERTED.run_id WHERE run_id = {} AND attempt = {} AND finished_at IS NULL",
            p.at(Some(end.at.as_millisecond())),
            p.add(end.outcome.name()),
            p.add(text(end.error.clone())),
            p.add(id.0),
            p.add(i64::from(attempt)),
        );
        Ok(!self.c.rows("ending an attempt", &sql, &p).await?.is_empty())
    }

    /// Ends the open attempts of several runs in one statement ([`Self::end_attempt`] for
    /// each); nothing to do for none.
    async fn end_attempts(&mut self, ends: &[(RunId, u32, &AttemptEnd)]) -> Res<()> {
        if ends.is_empty() {
            return Ok(());
        }
        let mut p = self.c.params();
        let values = ends
            .iter()
            .map(|(id, attempt, end)| {
                format!(
                    "({}, {}, {}, {}, {})",
                    p.add(id.0),
                    p.add(i64::from(*attempt)),
                    p.at(Some(end.at.as_millisecond())),
                    p.add(end.outcome.name()),
                    p.add(text(end.error.clone())),
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "UPDATE a SET finished_at = i.end_at, outcome = i.outcome, error = i.error \
             OUTPUT INSERTED.run_id \
             FROM run_attempts a, (VALUES {values}) AS i (run_id, attempt, end_at, outcome, \
               error) \
             WHERE a.run_id = i.run_id AND a.attempt = i.attempt AND a.finished_at IS NULL"
        );
        self.c.rows("ending attempts", &sql, &p).await?;
        Ok(())
    }

    /// The attempts `sql` (selecting [`ATTEMPT_COLUMNS`]) returns.
    async fn attempt_rows(&mut self, what: &str, sql: &str, p: &Params) -> Res<Vec<Attempt>> {
        let shown = self.shown;
        let rows = self.c.rows(what, sql, p).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown,
                what: "an attempt row",
            };
            out.push(
                AttemptRow {
                    run_id: c.int_req(0)?,
                    job_id: c.int_req(1)?,
                    fire_time: c.instant_req(2)?,
                    attempt: c.int_req(3)?,
                    node_id: c.text_req(4)?,
                    node_instance: c.text(5)?,
                    started_at: c.instant_req(6)?,
                    finished_at: c.instant(7)?,
                    outcome: c.text(8)?,
                    error: c.text(9)?,
                }
                .into_attempt(shown)?,
            );
        }
        Ok(out)
    }

    /// The ids a statement's `OUTPUT INSERTED.id` returned.
    fn ids(&self, rows: &[tiberius::Row], what: &'static str) -> Res<Vec<i64>> {
        Ok(rows
            .iter()
            .map(|r| {
                Cells {
                    row: r,
                    shown: self.shown,
                    what,
                }
                .int_req(0)
            })
            .collect::<Result<Vec<_>, _>>()?)
    }
}

impl Conn for MssqlConn<'_> {
    async fn commit(self) -> Res<()> {
        if self.tx {
            self.c.commit().await?;
        }
        Ok(())
    }

    // ---- jobs ------------------------------------------------------------------------

    async fn job_get(&mut self, id: JobId) -> Res<Option<JobDef>> {
        get_job(self.c, self.shown, id).await
    }

    async fn jobs_get(&mut self, ids: &[JobId]) -> Res<Vec<JobDef>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(ID_CHUNK) {
            let mut p = self.c.params();
            let list = chunk
                .iter()
                .map(|id| p.add(id.0))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id IN ({list})");
            for r in &self.c.rows("reading jobs", &sql, &p).await? {
                out.push(job_of(r, self.shown)?);
            }
        }
        Ok(out)
    }

    async fn job_count(&mut self) -> Res<u64> {
        let p = self.c.params();
        // COUNT's int holds 2^31 jobs, far beyond any plant (the iridium emulator has no
        // ungrouped COUNT_BIG).
        let row = self
            .c
            .row("counting jobs", "SELECT COUNT(*) FROM jobs", &p)
            .await?;
        let n = match &row {
            Some(r) => Cells {
                row: r,
                shown: self.shown,
                what: "the job count",
            }
            .int(0)?
            .unwrap_or(0),
            None => 0,
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn jobs_late(&mut self, before: Timestamp, limit: usize) -> Res<Vec<JobDef>> {
        let mut p = self.c.params();
        let at = p.at(Some(before.as_millisecond()));
        let sql = format!(
            "SELECT TOP ({}) {JOB_COLUMNS} FROM jobs WHERE enabled = 1 AND next_fire IS NOT NULL \
             AND next_fire <= {at} ORDER BY next_fire, id",
            top(limit)
        );
        let mut out = Vec::new();
        for r in &self.c.rows("finding late jobs", &sql, &p).await? {
            out.push(job_of(r, self.shown)?);
        }
        Ok(out)
    }

    async fn job_get_by_name(&mut self, name: &JobName) -> Res<Option<JobDef>> {
        let mut p = self.c.params();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE name = {}",
            p.add(name.as_str().to_string())
        );
        let row = self.c.row("reading a job", &sql, &p).await?;
        Ok(row.map(|r| job_of(&r, self.shown)).transpose()?)
    }

    async fn job_list(&mut self) -> Res<Vec<JobDef>> {
        let rows = self
            .c
            .rows(
                "listing jobs",
                &format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY id"),
                &Params::default(),
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| job_of(r, self.shown))
            .collect::<Result<_, _>>()?)
    }

    async fn job_page(&mut self, query: &JobQuery) -> Res<Vec<JobDef>> {
        // `TOP … ORDER BY name` over the `jobs_name` unique index from the cursor on; the
        // other conditions filter that scan. Plain T-SQL the emulator also speaks (no
        // OFFSET/FETCH, no LIKE escapes).
        let mut p = self.c.params();
        let mut cond = vec!["1 = 1".to_string()];
        if let Some(after) = &query.after {
            cond.push(format!("name > {}", p.add(after.as_str().to_string())));
        }
        if let Some(e) = query.enabled {
            cond.push(format!("enabled = {}", p.add(e)));
        }
        if let Some(g) = &query.group {
            cond.push(format!("group_name = {}", p.add(g.clone())));
        }
        if let Some(t) = &query.node_tag {
            cond.push(format!("node_tag = {}", p.add(t.clone())));
        }
        if let Some(prefix) = &query.handler_prefix {
            // DATALENGTH / 2: the characters of an NVARCHAR, counting trailing spaces (LEN
            // drops them).
            let a = p.add(prefix.clone());
            let b = p.add(prefix.clone());
            cond.push(format!("LEFT(handler_type, DATALENGTH({a}) / 2) = {b}"));
        }
        if let Some(n) = &query.name_contains {
            cond.push(format!(
                "CHARINDEX(LOWER({}), LOWER(name)) > 0",
                p.add(n.clone())
            ));
        }
        let sql = format!(
            "SELECT TOP ({}) {JOB_COLUMNS} FROM jobs WHERE {} ORDER BY name",
            top(query.limit + 1),
            cond.join(" AND ")
        );
        let rows = self.c.rows("listing a page of jobs", &sql, &p).await?;
        Ok(rows
            .iter()
            .map(|r| job_of(r, self.shown))
            .collect::<Result<_, _>>()?)
    }

    async fn job_insert(&mut self, job: &JobDef, now: Timestamp) -> Res<Option<JobDef>> {
        let what = format!("inserting job {}", job.name);
        let mut row = JobRow::of(job, now)?;
        row.version = 1;
        let mut p = self.c.params();
        let values = job_params(&mut p, row)?;
        let columns = JOB_WRITE_COLUMNS.trim_start_matches("id, ");
        let sql = format!(
            "INSERT INTO jobs ({columns}) OUTPUT {} SELECT {} \
             WHERE NOT EXISTS (SELECT 1 FROM jobs WITH (UPDLOCK, HOLDLOCK) WHERE name = {})",
            inserted(JOB_COLUMNS),
            values.join(", "),
            values[0]
        );
        match self.c.row(&what, &sql, &p).await {
            Ok(r) => Ok(r.map(|r| job_of(&r, self.shown)).transpose()?),
            // The unique index: another process inserted the name between guard and insert.
            Err(f) if f.error.kind() == StoreErrorKind::Conflict => Ok(None),
            Err(f) => Err(f),
        }
    }

    async fn job_update_if_version(&mut self, job: &JobDef, now: Timestamp) -> Res<Option<JobDef>> {
        let Some(id) = job.id else { return Ok(None) };
        let what = format!("updating job {}", job.name);
        let expected = to_i64(job.version, "job version")?;
        let mut row = JobRow::of(job, now)?;
        row.version = expected + 1;
        let mut p = self.c.params();
        let values = job_params(&mut p, row)?;
        let sets = JOB_WRITE_COLUMNS
            .split(", ")
            .skip(1)
            .zip(&values)
            .map(|(col, v)| format!("{col} = {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "UPDATE jobs SET {sets} OUTPUT {} WHERE id = {} AND version = {}",
            inserted(JOB_COLUMNS),
            p.add(id.0),
            p.add(expected),
        );
        let r = self.c.row(&what, &sql, &p).await?;
        Ok(r.map(|r| job_of(&r, self.shown)).transpose()?)
    }

    async fn job_delete(&mut self, id: JobId) -> Res<bool> {
        let what = "deleting a job";
        // Explicit rather than relying on ON DELETE CASCADE alone: the same statements work
        // on a database whose foreign keys a DBA created without cascades (and on the
        // emulator, which has none).
        let mut p = self.c.params();
        let j = p.add(id.0);
        self.c
            .exec(
                what,
                &format!(
                    "DELETE FROM run_logs WHERE run_id IN (SELECT id FROM runs WHERE job_id = {j}); \
                     DELETE FROM run_attempts WHERE run_id IN (SELECT id FROM runs WHERE job_id = {j}); \
                     DELETE FROM cancel_requests WHERE run_id IN \
                     (SELECT id FROM runs WHERE job_id = {j}); \
                     DELETE FROM runs WHERE job_id = {j}; DELETE FROM job_holds WHERE job_id = {j}"
                ),
                &p,
            )
            .await?;
        let n = self
            .c
            .rows(
                what,
                &format!("DELETE FROM jobs OUTPUT DELETED.id WHERE id = {j}"),
                &p,
            )
            .await?
            .len();
        Ok(n > 0)
    }

    async fn job_set_enabled(
        &mut self,
        id: JobId,
        enabled: bool,
        now: Timestamp,
    ) -> Res<Option<JobDef>> {
        let what = "enabling or disabling a job";
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE jobs SET enabled = {}, version = version + 1, updated_at = {} \
             OUTPUT {} WHERE id = {}",
            p.add(enabled),
            p.at(Some(now.as_millisecond())),
            inserted(JOB_COLUMNS),
            p.add(id.0)
        );
        let r = self.c.row(what, &sql, &p).await?;
        Ok(r.map(|r| job_of(&r, self.shown)).transpose()?)
    }

    async fn job_set_next_fire_if(
        &mut self,
        id: JobId,
        expected: Option<Timestamp>,
        new: Option<Timestamp>,
    ) -> Res<bool> {
        let what = "setting a job's next fire";
        let mut p = self.c.params();
        let new = p.at(new.map(Timestamp::as_millisecond));
        let cond = match expected {
            Some(e) => format!("next_fire = {}", p.at(Some(e.as_millisecond()))),
            None => "next_fire IS NULL".to_string(),
        };
        let sql = format!(
            "UPDATE jobs SET next_fire = {new} OUTPUT INSERTED.id WHERE id = {} AND {cond}",
            p.add(id.0)
        );
        Ok(!self.c.rows(what, &sql, &p).await?.is_empty())
    }

    async fn jobs_due(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
        set: DueSet,
    ) -> Res<Vec<DueJob>> {
        let what = "finding due jobs";
        let shown = self.shown;
        let mut p = self.c.params();
        let at = p.at(Some(now.as_millisecond()));
        let tags = tag_filter(&mut p, "node_tag", tags);
        let sql = format!(
            "SELECT TOP ({}) id, name, next_fire, misfire, overlap, \
               (SELECT COUNT(*) FROM runs r WHERE r.job_id = jobs.id AND r.state = N'running'), \
               (SELECT COUNT(*) FROM runs r WHERE r.job_id = jobs.id AND r.state = N'pending' \
                  AND NOT (r.attempt = 1 AND r.next_attempt_at IS NOT NULL)) \
             FROM jobs WHERE enabled = 1 AND next_fire IS NOT NULL AND next_fire <= {at}{} \
               AND {tags} \
             ORDER BY priority, next_fire, id",
            top(limit),
            recurring_only(set)
        );
        let rows = self.c.rows(what, &sql, &p).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let cells = Cells {
                row: r,
                shown,
                what: "a due job",
            };
            out.push(
                DueRow {
                    id: cells.int_req(0)?,
                    name: cells.text_req(1)?,
                    next_fire: cells.instant_req(2)?,
                    misfire: cells.text_req(3)?,
                    overlap: cells.text_req(4)?,
                    running: cells.int_req(5)?,
                    pending: cells.int_req(6)?,
                }
                .into_due(shown)?,
            );
        }
        Ok(out)
    }

    async fn next_due(&mut self, tags: &[String], set: DueSet) -> Res<Option<Timestamp>> {
        let what = "finding the next due time";
        let shown = self.shown;
        let mut p = self.c.params();
        let jt = tag_filter(&mut p, "node_tag", tags);
        // The recurring fires' own minimum, from the filtered index jobs_next_fire_recurring
        // (0013), where no due one-off sorts before them.
        let sql = if set == DueSet::Recurring {
            format!(
                "SELECT (SELECT MIN(next_fire) FROM jobs WHERE enabled = 1 \
                   AND next_fire IS NOT NULL AND recurring = 1 AND {jt})"
            )
        } else {
            let rt = tag_filter(&mut p, "j.node_tag", tags);
            // Three minima, combined here: LEAST() exists only from SQL Server 2022.
            format!(
                "SELECT \
               (SELECT MIN(next_fire) FROM jobs WHERE enabled = 1 AND next_fire IS NOT NULL \
                  AND {jt}), \
               (SELECT MIN(r.next_attempt_at) FROM runs r, jobs j \
                WHERE j.id = r.job_id AND r.state = N'pending' AND r.next_attempt_at IS NOT NULL \
                  AND j.enabled = 1 AND {rt} \
                  AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id)), \
               (SELECT MIN(r.created_at) FROM runs r, jobs j \
                WHERE j.id = r.job_id AND r.state = N'pending' AND r.next_attempt_at IS NULL AND j.enabled = 1 \
                  AND {rt} AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id) \
                  AND NOT EXISTS (SELECT 1 FROM runs x \
                                 WHERE x.job_id = r.job_id AND x.state = N'running'))"
            )
        };
        let row = self.c.row(what, &sql, &p).await?;
        let Some(r) = row else { return Ok(None) };
        let cells = Cells {
            row: &r,
            shown,
            what: "the next due time",
        };
        let mut min: Option<i64> = None;
        for i in 0..r.len() {
            if let Some(t) = cells.instant(i)? {
                min = Some(min.map_or(t, |m| m.min(t)));
            }
        }
        Ok(min
            .map(|t| {
                Timestamp::from_millisecond(t)
                    .map_err(|e| corrupt(shown, "the next due time", "next_fire", e))
            })
            .transpose()?)
    }

    // ---- claiming --------------------------------------------------------------------

    async fn claim_fires(
        &mut self,
        now: Timestamp,
        limit: usize,
        exclude: &[JobId],
        tags: &[String],
        set: DueSet,
    ) -> Res<Vec<JobDef>> {
        let mut q = self.c.params();
        let at = q.at(Some(now.as_millisecond()));
        let tags = tag_filter(&mut q, "node_tag", tags);
        let not_handled = if exclude.is_empty() {
            String::new()
        } else {
            format!(
                " AND id NOT IN ({})",
                exclude
                    .iter()
                    .map(|h| h.0.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let sql = format!(
            "SELECT TOP ({}) {JOB_COLUMNS} FROM jobs {} \
             WHERE enabled = 1 AND next_fire IS NOT NULL AND next_fire <= {at}{} \
               AND {tags}{not_handled} \
             ORDER BY priority, next_fire, id",
            top(limit),
            dialect::claim_hint(self.emulator),
            recurring_only(set)
        );
        let rows = self.c.rows("finding due jobs", &sql, &q).await?;
        Ok(rows
            .iter()
            .map(|r| job_of(r, self.shown))
            .collect::<Result<_, _>>()?)
    }

    async fn claim_pending(
        &mut self,
        now: Timestamp,
        limit: usize,
        tags: &[String],
    ) -> Res<Vec<PendingDue>> {
        let shown = self.shown;
        let mut q = self.c.params();
        let at = q.at(Some(now.as_millisecond()));
        let tags = tag_filter(&mut q, "j.node_tag", tags);
        let sql = format!(
            "SELECT TOP ({}) r.id, j.priority, \
               COALESCE(r.next_attempt_at, r.created_at) \
             FROM runs r {}, jobs j \
             WHERE j.id = r.job_id AND r.state = N'pending' AND COALESCE(r.next_attempt_at, r.created_at) <= {at} \
               AND j.enabled = 1 AND {tags} \
               AND NOT EXISTS (SELECT 1 FROM job_holds h WHERE h.job_id = r.job_id) \
               AND (r.next_attempt_at IS NOT NULL OR NOT EXISTS \
                    (SELECT 1 FROM runs x WHERE x.job_id = r.job_id AND x.state = N'running')) \
             ORDER BY j.priority, COALESCE(r.next_attempt_at, r.created_at), r.id",
            top(limit),
            dialect::claim_hint(self.emulator)
        );
        let rows = self.c.rows("finding due retries", &sql, &q).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let cells = Cells {
                row: r,
                shown,
                what: "a due retry",
            };
            let id = cells.int_req(0)?;
            let priority = cells.int_req(1)?;
            let at = cells.instant_req(2)?;
            out.push(PendingDue {
                id: RunId(id),
                priority: u16::try_from(priority)
                    .map_err(|_| corrupt(shown, &format!("run {id}"), "priority", priority))?,
                due_at: Timestamp::from_millisecond(at)
                    .map_err(|e| corrupt(shown, &format!("run {id}"), "due time", e))?,
            });
        }
        Ok(out)
    }

    async fn advance_next_fires(&mut self, moves: &[NextFireMove]) -> Res<usize> {
        let mut n = 0;
        for m in moves {
            let mut q = self.c.params();
            let sql = format!(
                "UPDATE jobs SET next_fire = {} OUTPUT INSERTED.id \
                 WHERE id = {} AND next_fire = {}",
                q.at(m.new.map(Timestamp::as_millisecond)),
                q.add(m.job.0),
                q.at(Some(m.old.as_millisecond())),
            );
            n += self.c.rows("advancing next fires", &sql, &q).await?.len();
        }
        Ok(n)
    }

    async fn insert_runs(&mut self, runs: &[Run], token: i64) -> Res<Vec<Run>> {
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            let t = if run.state == RunState::Running {
                token
            } else {
                0
            };
            match insert_run(self.c, self.shown, run, t).await {
                Ok(Some(stored)) => out.push(stored),
                Ok(None) => {}
                // A unique-key violation means another node inserted the same fire between
                // the guard and the insert: the transaction was rolled back whole (XACT_ABORT),
                // so the whole call may run again and will see that node's run.
                Err(f) if self.tx && f.error.kind() == StoreErrorKind::Conflict => {
                    return Err(Fail {
                        retry: Retry::Safe,
                        ..f
                    });
                }
                Err(f) => return Err(f),
            }
        }
        Ok(out)
    }

    async fn queued_may_start(&mut self, job: JobId) -> Res<bool> {
        // Its job's row lock serialises this with another node claiming the job's fire (skip
        // if that node holds it), and the check sees a run this claim started earlier.
        let mut q = self.c.params();
        let sql = format!(
            "SELECT id FROM jobs {} WHERE id = {}",
            dialect::claim_hint(self.emulator),
            q.add(job.0)
        );
        let locked = self.c.row("locking a queued run's job", &sql, &q).await?;
        let mut q = self.c.params();
        let sql = format!(
            "SELECT TOP (1) 1 FROM runs WHERE job_id = {} AND state = N'running'",
            q.add(job.0)
        );
        let busy = self.c.row("checking a queued run's job", &sql, &q).await?;
        Ok(locked.is_some() && busy.is_none())
    }

    async fn run_update_if(
        &mut self,
        run: &Run,
        expected: (RunState, u32),
        token: i64,
    ) -> Res<Option<Run>> {
        let Some(id) = run.id else { return Ok(None) };
        update_run_if(self.c, self.shown, run, id, expected, token).await
    }

    async fn runs_claimed_by(&mut self, node: &NodeId, token: i64) -> Res<Vec<Run>> {
        // No wait for the claim's transaction: a real server's row locks make this read wait
        // for it; the emulator takes none (its concurrent claims are not proven anyway).
        let mut q = self.c.params();
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs \
             WHERE node_id = {} AND state = N'running' AND claim_token = {} ORDER BY id",
            q.add(node.0.clone()),
            q.add(token)
        );
        let rows = self.c.rows("checking a claim", &sql, &q).await?;
        Ok(rows
            .iter()
            .map(|r| run_of(r, self.shown))
            .collect::<Result<_, _>>()?)
    }

    // ---- runs ------------------------------------------------------------------------

    async fn run_get(&mut self, id: RunId) -> Res<Option<Run>> {
        get_run(self.c, self.shown, id).await
    }

    async fn run_id_at(&mut self, job: JobId, fire: Timestamp) -> Res<Option<RunId>> {
        let mut q = self.c.params();
        let sql = format!(
            "SELECT id FROM runs WHERE job_id = {} AND fire_time = {}",
            q.add(job.0),
            q.at(Some(fire.as_millisecond()))
        );
        let row = self.c.row("reading a run", &sql, &q).await?;
        Ok(row
            .map(|r| {
                Cells {
                    row: &r,
                    shown: self.shown,
                    what: "a run row",
                }
                .int_req(0)
                .map(RunId)
            })
            .transpose()?)
    }

    async fn run_list(&mut self, filter: &RunFilter) -> Res<Vec<Run>> {
        let what = "listing runs";
        let mut p = self.c.params();
        let mut cond = vec!["1 = 1".to_string()];
        if let Some(j) = filter.job {
            cond.push(format!("job_id = {}", p.add(j.0)));
        }
        if let Some(s) = filter.state {
            cond.push(format!("state = {}", p.add(s.name())));
        }
        if let Some(t) = filter.fire_from {
            cond.push(format!("fire_time >= {}", p.at(Some(t.as_millisecond()))));
        }
        if let Some(t) = filter.fire_to {
            cond.push(format!("fire_time < {}", p.at(Some(t.as_millisecond()))));
        }
        if let Some(c) = filter.before {
            // No row values in T-SQL: the keyset condition written out.
            let f = p.at(Some(c.fire_time.as_millisecond()));
            let f2 = p.at(Some(c.fire_time.as_millisecond()));
            cond.push(format!(
                "(fire_time < {f} OR (fire_time = {f2} AND id < {}))",
                p.add(c.id.0)
            ));
        }
        let sql = format!(
            "SELECT TOP ({}) {RUN_COLUMNS} FROM runs WHERE {} \
             ORDER BY fire_time DESC, id DESC",
            top(filter.limit),
            cond.join(" AND ")
        );
        let rows = self.c.rows(what, &sql, &p).await?;
        Ok(rows
            .iter()
            .map(|r| run_of(r, self.shown))
            .collect::<Result<_, _>>()?)
    }

    async fn run_finish_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        write: &FinishWrite,
    ) -> Res<Option<Run>> {
        // The run's compare-and-set, then (only if it matched) the end of its attempt's row,
        // in one transaction: its own when the engine did not open one.
        let what = "finishing a run";
        let own = !self.tx;
        if own {
            self.c.begin(what).await?;
        }
        let mut p = self.c.params();
        let elapsed = elapsed_ms(write);
        let finished = match write.finished_at {
            Some(at) => p.at(Some(at.as_millisecond())),
            None => "finished_at".to_string(),
        };
        let plugin = write.plugin.as_ref();
        let sql = format!(
            "UPDATE runs SET state = {}, error = {}, result_json = {}, elapsed_ms = {}, \
               lease_expires_at = NULL, attempt = attempt + {}, next_attempt_at = {}, \
               finished_at = {finished}, plugin = {}, plugin_version = {}, plugin_sha256 = {} \
             OUTPUT {} WHERE id = {} AND state = N'running' AND attempt = {}",
            p.add(write.state.name()),
            p.add(text(write.error.clone())),
            p.add(text(write.result_json.clone())),
            p.add(elapsed),
            p.add(i64::from(write.retry)),
            p.at(write.next_attempt_at.map(Timestamp::as_millisecond)),
            p.add(text(plugin.map(|b| b.name.clone()))),
            p.add(text(plugin.map(|b| b.version.clone()))),
            p.add(text(plugin.and_then(|b| b.sha256.clone()))),
            inserted(RUN_COLUMNS),
            p.add(id.0),
            p.add(i64::from(attempt)),
        );
        let row = self.c.row(what, &sql, &p).await?;
        if row.is_some() {
            self.end_attempt(id, attempt, &write.attempt_end).await?;
        }
        if own {
            self.c.commit().await?;
        }
        Ok(row.map(|r| run_of(&r, self.shown)).transpose()?)
    }

    /// A batch's finishes ([`takt_core::store::engine::FinishQueue`]) as one `UPDATE … FROM
    /// (VALUES …)` per [`FINISH_CHUNK`] (SQL Server has no arrays, and a request holds at most
    /// 2 100 parameters), then one for the attempts of the runs that matched: what
    /// [`Conn::run_finish_if_running`] writes for each, in two statements instead of two per
    /// run. The answers are matched back by id (`OUTPUT` returns the updated rows in no
    /// promised order); the runs are distinct, as the queue guarantees.
    async fn run_finish_many(
        &mut self,
        finishes: &[(RunId, u32, &FinishWrite)],
    ) -> Res<Vec<Option<Run>>> {
        if finishes.len() == 1 || !dialect::joined_updates(self.emulator) {
            // One statement pair per finish, in the batch's transaction: still one COMMIT.
            let mut out = Vec::with_capacity(finishes.len());
            for &(id, attempt, write) in finishes {
                out.push(self.run_finish_if_running(id, attempt, write).await?);
            }
            return Ok(out);
        }
        let what = "finishing runs";
        let own = !self.tx;
        if own {
            self.c.begin(what).await?;
        }
        let mut out = Vec::with_capacity(finishes.len());
        for chunk in finishes.chunks(FINISH_CHUNK) {
            let mut p = self.c.params();
            let values = chunk
                .iter()
                .map(|(id, attempt, w)| {
                    let elapsed = elapsed_ms(w);
                    let plugin = w.plugin.as_ref();
                    format!(
                        "({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                        p.add(id.0),
                        p.add(i64::from(*attempt)),
                        p.add(w.state.name()),
                        p.add(text(w.error.clone())),
                        p.add(text(w.result_json.clone())),
                        p.add(elapsed),
                        p.add(i64::from(w.retry)),
                        p.at(w.next_attempt_at.map(Timestamp::as_millisecond)),
                        p.at(w.finished_at.map(Timestamp::as_millisecond)),
                        p.add(text(plugin.map(|b| b.name.clone()))),
                        p.add(text(plugin.map(|b| b.version.clone()))),
                        p.add(text(plugin.and_then(|b| b.sha256.clone()))),
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            // `COALESCE` keeps a retry's stored `finished_at`, as the single statement does.
            let sql = format!(
                "UPDATE r SET state = i.state, error = i.error, result_json = i.result_json, \
                   elapsed_ms = i.elapsed_ms, lease_expires_at = NULL, \
                   attempt = r.attempt + i.retry, next_attempt_at = i.next_attempt_at, \
                   finished_at = COALESCE(i.finished_at, r.finished_at), \
                   plugin = i.plugin, plugin_version = i.plugin_version, \
                   plugin_sha256 = i.plugin_sha256 \
                 OUTPUT {} \
                 FROM runs r, (VALUES {values}) AS i (id, attempt, state, error, result_json, \
                   elapsed_ms, retry, next_attempt_at, finished_at, plugin, plugin_version, \
                   plugin_sha256) \
                 WHERE r.id = i.id AND r.state = N'running' AND r.attempt = i.attempt",
                inserted(RUN_COLUMNS),
            );
            let mut stored = std::collections::HashMap::with_capacity(chunk.len());
            for r in &self.c.rows(what, &sql, &p).await? {
                let run = run_of(r, self.shown)?;
                if let Some(id) = run.id {
                    stored.insert(id, run);
                }
            }
            let ended: Vec<_> = chunk
                .iter()
                .filter(|(id, ..)| stored.contains_key(id))
                .map(|&(id, attempt, w)| (id, attempt, &w.attempt_end))
                .collect();
            self.end_attempts(&ended).await?;
            out.extend(chunk.iter().map(|(id, ..)| stored.remove(id)));
        }
        if own {
            self.c.commit().await?;
        }
        Ok(out)
    }

    async fn runs_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> Res<Vec<Run>> {
        let mut p = self.c.params();
        let only = match job {
            Some(j) => format!("job_id = {} AND ", p.add(j.0)),
            None => String::new(),
        };
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE {only}fire_time >= {} AND fire_time < {} \
             ORDER BY fire_time, id",
            p.at(Some(from.as_millisecond())),
            p.at(Some(to.as_millisecond())),
        );
        let rows = self.c.rows("listing runs by fire time", &sql, &p).await?;
        Ok(rows
            .iter()
            .map(|r| run_of(r, self.shown))
            .collect::<Result<_, _>>()?)
    }

    async fn attempts_begin(&mut self, attempts: &[Attempt]) -> Res<()> {
        for a in attempts {
            let mut p = self.c.params();
            let (run, n) = (p.add(a.run_id.0), p.add(i64::from(a.attempt)));
            let sql = format!(
                "INSERT INTO run_attempts (run_id, attempt, node_id, node_instance, started_at) \
                 SELECT {run}, {n}, {}, {}, {} WHERE NOT EXISTS (SELECT 1 FROM run_attempts \
                 WITH (UPDLOCK, HOLDLOCK) WHERE run_id = {run} AND attempt = {n})",
                p.add(a.node_id.0.clone()),
                p.add(text(a.node_instance.as_ref().map(|i| i.0.clone()))),
                p.at(Some(a.started_at.as_millisecond())),
            );
            self.c.exec("recording an attempt", &sql, &p).await?;
        }
        Ok(())
    }

    async fn attempt_end(&mut self, run: RunId, attempt: u32, end: &AttemptEnd) -> Res<bool> {
        self.end_attempt(run, attempt, end).await
    }

    async fn attempt_outlived(
        &mut self,
        run: RunId,
        attempt: u32,
        at: Timestamp,
        error: &str,
    ) -> Res<bool> {
        let mut p = self.c.params();
        let end = p.at(Some(at.as_millisecond()));
        let sql = format!(
            "UPDATE run_attempts SET finished_at = {end}, error = {} OUTPUT INSERTED.run_id \
             WHERE run_id = {} AND attempt = {} \
             AND outcome IN (N'lease_expired', N'node_restarted') AND finished_at < {end}",
            p.add(error.to_string()),
            p.add(run.0),
            p.add(i64::from(attempt)),
        );
        Ok(!self
            .c
            .rows("recording an attempt's late end", &sql, &p)
            .await?
            .is_empty())
    }

    async fn attempts_of_run(&mut self, run: RunId) -> Res<Vec<Attempt>> {
        let mut p = self.c.params();
        // `FROM a, b WHERE`: the emulator returns no rows for `JOIN … ON`.
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM run_attempts a, runs r \
             WHERE r.id = a.run_id AND a.run_id = {} ORDER BY a.attempt",
            p.add(run.0)
        );
        self.attempt_rows("reading a run's attempts", &sql, &p)
            .await
    }

    async fn attempts_between(
        &mut self,
        job: Option<JobId>,
        from: Timestamp,
        to: Timestamp,
    ) -> Res<Vec<Attempt>> {
        let mut p = self.c.params();
        let only = match job {
            Some(j) => format!("r.job_id = {} AND ", p.add(j.0)),
            None => String::new(),
        };
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM runs r, run_attempts a \
             WHERE a.run_id = r.id AND {only}r.fire_time >= {} AND r.fire_time < {} \
             ORDER BY r.fire_time, r.id, a.attempt",
            p.at(Some(from.as_millisecond())),
            p.at(Some(to.as_millisecond())),
        );
        self.attempt_rows("listing attempts by fire time", &sql, &p)
            .await
    }

    async fn run_set_progress_if_running(&mut self, id: RunId, progress: &Progress) -> Res<bool> {
        let done = to_i64(progress.done, "progress done")?;
        let total = to_i64(progress.total, "progress total")?;
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE runs SET progress_done = {}, progress_total = {}, \
             progress_message = {} OUTPUT INSERTED.id WHERE id = {} AND state = N'running'",
            p.add(done),
            p.add(total),
            p.add(progress.message.clone()),
            p.add(id.0)
        );
        Ok(!self
            .c
            .rows("recording progress", &sql, &p)
            .await?
            .is_empty())
    }

    async fn runs_to_recover(
        &mut self,
        now: Timestamp,
        restart: Option<(&NodeId, &InstanceId)>,
    ) -> Res<Vec<RunId>> {
        // Locked and skipped like claims: two nodes recovering at once split the runs.
        let mut q = self.c.params();
        let mine = match restart {
            Some((n, i)) => format!(
                "(node_id = {} AND (node_instance IS NULL OR node_instance <> {})) OR ",
                q.add(n.0.clone()),
                q.add(i.0.clone())
            ),
            None => String::new(),
        };
        let sql = format!(
            "SELECT id FROM runs {} WHERE state = N'running' \
             AND ({mine}lease_expires_at IS NULL OR lease_expires_at <= {}) ORDER BY id",
            dialect::claim_hint(self.emulator),
            q.at(Some(now.as_millisecond()))
        );
        let rows = self.c.rows("finding expired leases", &sql, &q).await?;
        Ok(self
            .ids(&rows, "an expired run")?
            .into_iter()
            .map(RunId)
            .collect())
    }

    // ---- nodes and leases --------------------------------------------------------------

    async fn renew(
        &mut self,
        node: &NodeId,
        instance: &InstanceId,
        until: Timestamp,
        now: Timestamp,
    ) -> Res<Option<Vec<RunId>>> {
        let what = "renewing leases";
        let mut p = self.c.params();
        let (id, life, at) = (
            p.add(node.0.clone()),
            p.add(instance.0.clone()),
            p.at(Some(now.as_millisecond())),
        );
        let until = p.at(Some(until.as_millisecond()));
        let beat = self
            .c
            .rows(
                what,
                &format!(
                    "UPDATE nodes SET heartbeat_at = {at} OUTPUT INSERTED.id \
                     WHERE id = {id} AND instance = {life}"
                ),
                &p,
            )
            .await?;
        if beat.is_empty() {
            return Ok(None);
        }
        self.c
            .exec(
                "recording a heartbeat",
                &format!("UPDATE node_sessions SET heartbeat_at = {at} WHERE instance = {life}"),
                &p,
            )
            .await?;
        let rows = self
            .c
            .rows(
                what,
                &format!(
                    "UPDATE runs SET lease_expires_at = {until} OUTPUT INSERTED.id \
                     WHERE node_id = {id} AND node_instance = {life} AND state = N'running' \
                     AND lease_expires_at > {at}"
                ),
                &p,
            )
            .await?;
        let mut ids: Vec<RunId> = self
            .ids(&rows, "a renewed run")?
            .into_iter()
            .map(RunId)
            .collect();
        ids.sort_unstable();
        Ok(Some(ids))
    }

    async fn node_get(&mut self, id: &NodeId) -> Res<Option<NodeStatus>> {
        let lock = self.tx;
        Ok(self.node_rows(Some(id), lock).await?.pop())
    }

    async fn node_put(&mut self, node: &NodeInfo, now: Timestamp, exists: bool) -> Res<bool> {
        let r = NodeRow::of(node, now);
        let mut p = self.c.params();
        let (id, inst, host, pid, version, cap, tags, now) = (
            p.add(r.id),
            p.add(text(r.instance)),
            p.add(r.host_name),
            p.add(r.pid),
            p.add(r.version),
            p.add(i32::try_from(r.capacity).unwrap_or(i32::MAX)),
            p.add(r.tags),
            p.at(Some(now.as_millisecond())),
        );
        let sql = if exists {
            format!(
                "UPDATE nodes SET instance = {inst}, host_name = {host}, pid = {pid}, \
                 version = {version}, capacity = {cap}, tags = {tags}, started_at = {now}, \
                 heartbeat_at = {now}, stopped_at = NULL OUTPUT INSERTED.id WHERE id = {id}"
            )
        } else {
            format!(
                "INSERT INTO nodes (id, instance, host_name, pid, version, capacity, tags, \
                 started_at, heartbeat_at) OUTPUT INSERTED.id \
                 SELECT {id}, {inst}, {host}, {pid}, {version}, {cap}, {tags}, {now}, {now} \
                 WHERE NOT EXISTS (SELECT 1 FROM nodes WITH (UPDLOCK, HOLDLOCK) WHERE id = {id})"
            )
        };
        let written = !self
            .c
            .rows("registering the node", &sql, &p)
            .await?
            .is_empty();
        if written {
            let sql = format!(
                "DELETE FROM node_sessions WHERE instance = {inst}; \
                 INSERT INTO node_sessions (instance, node_id, host_name, started_at, \
                 heartbeat_at) VALUES ({inst}, {id}, {host}, {now}, {now})"
            );
            self.c.exec("recording the node's life", &sql, &p).await?;
        }
        Ok(written)
    }

    async fn node_stop(&mut self, node: &NodeId, instance: &InstanceId, now: Timestamp) -> Res<()> {
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE nodes SET stopped_at = {} WHERE id = {} AND instance = {}",
            p.at(Some(now.as_millisecond())),
            p.add(node.0.clone()),
            p.add(instance.0.clone())
        );
        self.c.exec("recording a node stop", &sql, &p).await?;
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE node_sessions SET stopped_at = {} WHERE node_id = {} AND instance = {}",
            p.at(Some(now.as_millisecond())),
            p.add(node.0.clone()),
            p.add(instance.0.clone())
        );
        self.c.exec("recording a node stop", &sql, &p).await?;
        Ok(())
    }

    async fn node_list(&mut self) -> Res<Vec<NodeStatus>> {
        self.node_rows(None, false).await
    }

    async fn node_sessions(&mut self, from: Timestamp, to: Timestamp) -> Res<Vec<NodeSession>> {
        let shown = self.shown;
        let mut p = self.c.params();
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM node_sessions \
             WHERE started_at < {} AND COALESCE(stopped_at, heartbeat_at) >= {} \
             ORDER BY started_at, instance",
            p.at(Some(to.as_millisecond())),
            p.at(Some(from.as_millisecond())),
        );
        let rows = self.c.rows("listing node lives", &sql, &p).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown,
                what: "a node life",
            };
            out.push(
                SessionRow {
                    node_id: c.text_req(0)?,
                    instance: c.text_req(1)?,
                    host_name: c.text(2)?.unwrap_or_default(),
                    started_at: c.instant_req(3)?,
                    heartbeat_at: c.instant_req(4)?,
                    stopped_at: c.instant(5)?,
                }
                .into_session(shown)?,
            );
        }
        Ok(out)
    }

    // ---- logs, retention ---------------------------------------------------------------

    async fn hold_get(&mut self, job: JobId) -> Res<Option<Hold>> {
        Ok(self
            .holds(Some(job))
            .await?
            .into_iter()
            .next()
            .map(|(_, h)| h))
    }

    async fn hold_insert(&mut self, job: JobId, hold: &Hold) -> Res<()> {
        let r = HoldRow::of(hold);
        let mut p = self.c.params();
        let sql = format!(
            "INSERT INTO job_holds (job_id, {HOLD_COLUMNS}) VALUES ({}, {}, {}, {}, {})",
            p.add(job.0),
            p.at(r.next_fire),
            p.at(r.paused_at),
            p.add(text(r.paused_by)),
            p.add(text(r.reason))
        );
        self.c.exec("holding a job", &sql, &p).await?;
        Ok(())
    }

    async fn hold_delete(&mut self, job: JobId) -> Res<bool> {
        let mut p = self.c.params();
        let sql = format!(
            "DELETE FROM job_holds OUTPUT DELETED.job_id WHERE job_id = {}",
            p.add(job.0)
        );
        Ok(!self
            .c
            .rows("releasing a job's hold", &sql, &p)
            .await?
            .is_empty())
    }

    async fn holds_list(&mut self) -> Res<Vec<(JobId, Hold)>> {
        self.holds(None).await
    }

    async fn pause_get(&mut self, kind: PauseKind, name: &str) -> Res<Option<Pause>> {
        Ok(self
            .pauses(Some((kind, name)))
            .await?
            .into_iter()
            .next()
            .map(|(_, _, p)| p))
    }

    async fn pause_insert(&mut self, kind: PauseKind, name: &str, pause: &Pause) -> Res<bool> {
        let mut p = self.c.params();
        let (k, n) = (p.add(kind.name()), p.add(name.to_string()));
        let sql = format!(
            "INSERT INTO pauses (kind, name, {PAUSE_COLUMNS}) OUTPUT INSERTED.kind \
             SELECT {k}, {n}, {}, {}, {} WHERE NOT EXISTS \
             (SELECT 1 FROM pauses WITH (UPDLOCK, HOLDLOCK) WHERE kind = {k} AND name = {n})",
            p.at(Some(pause.at.as_millisecond())),
            p.add(pause.by.clone()),
            p.add(text(pause.reason.clone()))
        );
        Ok(!self.c.rows("recording a pause", &sql, &p).await?.is_empty())
    }

    async fn pause_delete(&mut self, kind: PauseKind, name: &str) -> Res<bool> {
        let mut p = self.c.params();
        let sql = format!(
            "DELETE FROM pauses OUTPUT DELETED.kind WHERE kind = {} AND name = {}",
            p.add(kind.name()),
            p.add(name.to_string())
        );
        Ok(!self.c.rows("removing a pause", &sql, &p).await?.is_empty())
    }

    async fn pauses_list(&mut self) -> Res<Vec<(PauseKind, String, Pause)>> {
        self.pauses(None).await
    }

    async fn group_get(&mut self, name: &str, lock: bool) -> Res<Option<GroupDef>> {
        // UPDLOCK, HOLDLOCK (no READPAST): a second claimer waits for the first to commit
        // and then counts the runs it started.
        let hint = if lock {
            " WITH (UPDLOCK, HOLDLOCK)"
        } else {
            ""
        };
        let mut p = self.c.params();
        let sql = format!(
            "SELECT name, max_running, released_at FROM job_groups{hint} WHERE name = {}",
            p.add(name.to_string())
        );
        let rows = self.c.rows("reading a group", &sql, &p).await?;
        Ok(rows
            .iter()
            .map(|r| self.group_of(r).map(|(_, d)| d))
            .next()
            .transpose()?)
    }

    async fn group_put(&mut self, name: &str, def: &GroupDef) -> Res<()> {
        let what = "defining a group";
        let max = def.max_running.map(i64::from);
        let released = def.released_at.map(Timestamp::as_millisecond);
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE job_groups SET max_running = {}, released_at = {} WHERE name = {}",
            p.add(max),
            p.at(released),
            p.add(name.to_string())
        );
        if self.c.exec(what, &sql, &p).await? > 0 {
            return Ok(());
        }
        let mut p = self.c.params();
        let n = p.add(name.to_string());
        let sql = format!(
            "INSERT INTO job_groups (name, max_running, released_at) SELECT {n}, {}, {} \
             WHERE NOT EXISTS (SELECT 1 FROM job_groups WITH (UPDLOCK, HOLDLOCK) WHERE name = {n})",
            p.add(max),
            p.at(released)
        );
        self.c.exec(what, &sql, &p).await?;
        Ok(())
    }

    async fn group_defs(&mut self) -> Res<Vec<(String, GroupDef)>> {
        let p = self.c.params();
        let rows = self
            .c
            .rows(
                "listing groups",
                "SELECT name, max_running, released_at FROM job_groups ORDER BY name",
                &p,
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| self.group_of(r))
            .collect::<takt_core::store::StoreResult<_>>()?)
    }

    async fn cancel_insert(&mut self, request: &CancelRequest) -> Res<bool> {
        let mut p = self.c.params();
        let r = p.add(request.run.0);
        let sql = format!(
            "INSERT INTO cancel_requests (run_id, requested_by, requested_at) \
             OUTPUT INSERTED.run_id SELECT {r}, {}, {} WHERE NOT EXISTS \
             (SELECT 1 FROM cancel_requests WITH (UPDLOCK, HOLDLOCK) WHERE run_id = {r})",
            p.add(request.by.clone()),
            p.at(Some(request.at.as_millisecond()))
        );
        Ok(!self
            .c
            .rows("recording a cancel request", &sql, &p)
            .await?
            .is_empty())
    }

    async fn cancel_get(&mut self, run: RunId) -> Res<Option<CancelRequest>> {
        let mut p = self.c.params();
        let sql = format!(
            "SELECT run_id, requested_by, requested_at FROM cancel_requests WHERE run_id = {}",
            p.add(run.0)
        );
        Ok(self.cancels(&sql, &p).await?.pop())
    }

    async fn cancels_of_node(&mut self, node: &NodeId) -> Res<Vec<CancelRequest>> {
        let mut p = self.c.params();
        // `FROM a, b WHERE`: the emulator returns no rows for `JOIN … ON`.
        let sql = format!(
            "SELECT c.run_id, c.requested_by, c.requested_at FROM cancel_requests c, runs r \
             WHERE r.id = c.run_id AND r.state = 'running' AND r.node_id = {} ORDER BY c.run_id",
            p.add(node.0.clone())
        );
        self.cancels(&sql, &p).await
    }

    async fn log_append(&mut self, run: RunId, lines: &[LogLine]) -> Res<bool> {
        let what = "appending log lines";
        // One transaction: the lines go in together or not at all, in order.
        let own = !self.tx;
        if own {
            self.c.begin(what).await?;
        }
        if get_run(self.c, self.shown, run).await?.is_none() {
            if own {
                self.c.rollback().await?;
            }
            return Ok(false);
        }
        for chunk in lines.chunks(LOG_CHUNK) {
            let mut p = self.c.params();
            let r = p.add(run.0);
            let mut rows = Vec::with_capacity(chunk.len());
            for (n, l) in chunk.iter().enumerate() {
                rows.push(format!(
                    "({}, {}, {}, {n})",
                    p.at(Some(l.at.as_millisecond())),
                    p.add(l.level.name()),
                    p.add(l.message.clone())
                ));
            }
            self.c
                .exec(what, &dialect::insert_logs(&r, &rows), &p)
                .await?;
        }
        if own {
            self.c.commit().await?;
        }
        Ok(true)
    }

    async fn log_list(
        &mut self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> Res<Vec<(u64, LogLine)>> {
        let what = "reading a run log";
        let shown = self.shown;
        let after = i64::try_from(after.unwrap_or(0)).unwrap_or(i64::MAX);
        let mut p = self.c.params();
        let sql = format!(
            "SELECT TOP ({}) seq, at, level, message FROM run_logs \
             WHERE run_id = {} AND seq > {} ORDER BY seq",
            top(limit),
            p.add(run.0),
            p.add(after)
        );
        let rows = self.c.rows(what, &sql, &p).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let cells = Cells {
                row: r,
                shown,
                what: "a log line",
            };
            let seq = cells.int_req(0)?;
            let row = format!("log line {seq}");
            let level = cells.text_req(2)?;
            out.push((
                u64::try_from(seq).map_err(|_| corrupt(shown, &row, "seq", seq))?,
                LogLine {
                    at: Timestamp::from_millisecond(cells.instant_req(1)?)
                        .map_err(|e| corrupt(shown, &row, "at", e))?,
                    level: LogLevel::from_name(&level)
                        .ok_or_else(|| corrupt(shown, &row, "level", &level))?,
                    message: cells.text_req(3)?,
                },
            ));
        }
        Ok(out)
    }

    async fn token_insert(&mut self, token: &NewToken) -> Res<Option<ApiToken>> {
        let what = "storing a token";
        let mut p = self.c.params();
        let sql = format!(
            "INSERT INTO api_tokens (name, role, sha256, created_at) OUTPUT INSERTED.id \
             SELECT {n}, {}, {}, {} WHERE NOT EXISTS \
               (SELECT 1 FROM api_tokens WITH (UPDLOCK, HOLDLOCK) WHERE name = {n2})",
            p.add(token.role.name()),
            p.add(token.sha256.clone()),
            p.at(Some(token.created_at.as_millisecond())),
            n = p.add(token.name.clone()),
            n2 = p.add(token.name.clone()),
        );
        if self.c.rows(what, &sql, &p).await?.is_empty() {
            return Ok(None);
        }
        self.token_named(&token.name).await
    }

    async fn token_list(&mut self) -> Res<Vec<ApiToken>> {
        let what = "listing tokens";
        let p = self.c.params();
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY name");
        let rows = self.c.rows(what, &sql, &p).await?;
        Ok(rows
            .iter()
            .map(|r| token_of(r, self.shown))
            .collect::<Result<_, _>>()?)
    }

    async fn token_revoke(&mut self, name: &str, now: Timestamp) -> Res<Option<ApiToken>> {
        let what = "revoking a token";
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE api_tokens SET revoked_at = {} WHERE name = {} AND revoked_at IS NULL",
            p.at(Some(now.as_millisecond())),
            p.add(name.to_string())
        );
        self.c.exec(what, &sql, &p).await?;
        self.token_named(name).await
    }

    async fn action_insert(&mut self, action: &OperatorAction) -> Res<()> {
        let what = "recording an operator action";
        let mut p = self.c.params();
        let sql = format!(
            "INSERT INTO operator_actions (at, actor, action, job_name, run_id, detail) \
             VALUES ({}, {}, {}, {}, {}, {})",
            p.at(Some(action.at.as_millisecond())),
            p.add(action.actor.clone()),
            p.add(action.action.clone()),
            p.add(text(action.job.clone())),
            p.add(action.run.map(|r| r.0)),
            p.add(text(action.detail.clone())),
        );
        self.c.exec(what, &sql, &p).await?;
        Ok(())
    }

    async fn action_list(&mut self, job: Option<&str>, limit: usize) -> Res<Vec<OperatorAction>> {
        let what = "listing operator actions";
        let mut p = self.c.params();
        let filter = match job {
            Some(j) => format!("WHERE job_name = {}", p.add(j.to_string())),
            None => String::new(),
        };
        let sql = format!(
            "SELECT TOP ({}) {ACTION_COLUMNS} FROM operator_actions {filter} ORDER BY id DESC",
            top(limit)
        );
        let rows = self.c.rows(what, &sql, &p).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown: self.shown,
                what: "an operator action",
            };
            out.push(
                ActionRow {
                    id: c.int_req(0)?,
                    at: c.instant_req(1)?,
                    actor: c.text_req(2)?,
                    action: c.text_req(3)?,
                    job: c.text(4)?,
                    run: c.int(5)?,
                    detail: c.text(6)?,
                }
                .into_action(self.shown)?,
            );
        }
        Ok(out)
    }

    async fn retention_purge(&mut self, older_than: Timestamp) -> Res<PurgeCounts> {
        let what = "purging old runs";
        let mut p = self.c.params();
        let cut = p.at(Some(older_than.as_millisecond()));
        let old = format!(
            "SELECT id FROM runs WHERE state NOT IN (N'pending', N'running') \
             AND finished_at IS NOT NULL AND finished_at < {cut}"
        );
        // Counted first, in the same transaction: affected-row counts are not reliable on
        // every peer, and OUTPUT would send every deleted id back.
        let counts = self
            .c
            .row(
                "counting old runs",
                &format!(
                    "SELECT (SELECT COUNT(*) FROM runs WHERE id IN ({old})), \
                     (SELECT COUNT(*) FROM run_logs WHERE run_id IN ({old}))"
                ),
                &p,
            )
            .await?;
        let (runs, log_lines) = match &counts {
            Some(r) => {
                let cells = Cells {
                    row: r,
                    shown: self.shown,
                    what: "old run counts",
                };
                (cells.int(0)?.unwrap_or(0), cells.int(1)?.unwrap_or(0))
            }
            None => (0, 0),
        };
        self.c
            .exec(
                "purging old log lines",
                &format!("DELETE FROM run_logs WHERE run_id IN ({old})"),
                &p,
            )
            .await?;
        self.c
            .exec(
                "purging old attempts",
                &format!("DELETE FROM run_attempts WHERE run_id IN ({old})"),
                &p,
            )
            .await?;
        self.c
            .exec(
                what,
                &format!("DELETE FROM cancel_requests WHERE run_id IN ({old})"),
                &p,
            )
            .await?;
        self.c
            .exec(what, &format!("DELETE FROM runs WHERE id IN ({old})"), &p)
            .await?;
        Ok(PurgeCounts {
            runs: u64::try_from(runs).unwrap_or(0),
            log_lines: u64::try_from(log_lines).unwrap_or(0),
        })
    }

    // ---- alerts ------------------------------------------------------------------------
    // Affected-row counts are not reliable on every peer: each conditional write OUTPUTs the
    // key, and what it returns is what it changed.

    async fn alert_reopen(&mut self, key: &AlertKey, episode: &str, now: Timestamp) -> Res<bool> {
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE alert_episodes SET episode = {}, opened_at = {}, closed_at = NULL \
             OUTPUT INSERTED.subject WHERE subject = {} AND condition = {} \
             AND closed_at IS NOT NULL",
            p.add(episode.to_string()),
            p.at(Some(now.as_millisecond())),
            p.add(key.subject.clone()),
            p.add(key.condition.clone())
        );
        Ok(!self
            .c
            .rows("reopening an alert episode", &sql, &p)
            .await?
            .is_empty())
    }

    async fn alert_insert(&mut self, key: &AlertKey, episode: &str, now: Timestamp) -> Res<bool> {
        let mut p = self.c.params();
        let subject = p.add(key.subject.clone());
        let condition = p.add(key.condition.clone());
        let sql = format!(
            "INSERT INTO alert_episodes (subject, condition, episode, opened_at) \
             OUTPUT INSERTED.subject SELECT {subject}, {condition}, {}, {} \
             WHERE NOT EXISTS (SELECT 1 FROM alert_episodes WITH (UPDLOCK, HOLDLOCK) \
             WHERE subject = {subject} AND condition = {condition})",
            p.add(episode.to_string()),
            p.at(Some(now.as_millisecond()))
        );
        match self.c.rows("opening an alert episode", &sql, &p).await {
            Ok(rows) => Ok(!rows.is_empty()),
            // A concurrent insert of the same key that got there first.
            Err(e) if e.error.kind() == StoreErrorKind::Conflict => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn alert_close(&mut self, key: &AlertKey, now: Timestamp) -> Res<bool> {
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE alert_episodes SET closed_at = {} OUTPUT INSERTED.subject \
             WHERE subject = {} AND condition = {} AND closed_at IS NULL",
            p.at(Some(now.as_millisecond())),
            p.add(key.subject.clone()),
            p.add(key.condition.clone())
        );
        Ok(!self
            .c
            .rows("closing an alert episode", &sql, &p)
            .await?
            .is_empty())
    }

    async fn alert_delivery_insert(&mut self, d: &AlertDelivery) -> Res<i64> {
        let what = "recording an alert delivery";
        let mut p = self.c.params();
        let sql = format!(
            "INSERT INTO alert_deliveries \
             (at, node, channel, subject, condition, kind, run_id, outcome, detail) \
             OUTPUT INSERTED.id VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {})",
            p.at(Some(d.at.as_millisecond())),
            p.add(d.node.clone()),
            p.add(d.channel.clone()),
            p.add(d.key.subject.clone()),
            p.add(d.key.condition.clone()),
            p.add(d.kind.clone()),
            p.add(d.run),
            p.add(d.outcome.name()),
            p.add(d.detail.clone())
        );
        let row = self.c.row(what, &sql, &p).await?;
        let row = row.ok_or_else(|| StoreError::other(format!("{what}: no id came back")))?;
        Ok(Cells {
            row: &row,
            shown: self.shown,
            what: "an alert delivery",
        }
        .int_req(0)?)
    }

    async fn runs_of_parent(&mut self, parent: RunId) -> Res<Vec<Run>> {
        let mut p = self.c.params();
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = {} ORDER BY id",
            p.add(parent.0)
        );
        let rows = self
            .c
            .rows("listing a run's continuations", &sql, &p)
            .await?;
        Ok(rows
            .iter()
            .map(|r| run_of(r, self.shown))
            .collect::<takt_core::store::StoreResult<Vec<_>>>()?)
    }

    async fn last_success_fire(&mut self, job: JobId, before: Timestamp) -> Res<Option<Timestamp>> {
        let mut p = self.c.params();
        let sql = format!(
            "SELECT MAX(fire_time) FROM runs \
             WHERE job_id = {} AND state = N'succeeded' AND fire_time < {}",
            p.add(job.0),
            p.at(Some(before.as_millisecond()))
        );
        let row = self.c.row("finding a job's last success", &sql, &p).await?;
        let Some(row) = row else { return Ok(None) };
        let at = Cells {
            row: &row,
            shown: self.shown,
            what: "a run's fire time",
        }
        .instant(0)?;
        Ok(at
            .map(|v| {
                Timestamp::from_millisecond(v).map_err(|e| {
                    corrupt(self.shown, &format!("a run of job {job}"), "fire_time", e)
                })
            })
            .transpose()?)
    }

    async fn run_set_params_if_running(
        &mut self,
        id: RunId,
        attempt: u32,
        params_json: &str,
    ) -> Res<bool> {
        let mut p = self.c.params();
        let sql = format!(
            "UPDATE runs SET params_resolved = {} OUTPUT INSERTED.id \
             WHERE id = {} AND state = N'running' AND attempt = {}",
            p.add(params_json.to_string()),
            p.add(id.0),
            p.add(i64::from(attempt))
        );
        Ok(!self
            .c
            .rows("recording a run's resolved params", &sql, &p)
            .await?
            .is_empty())
    }

    async fn alert_delivery_list(&mut self, limit: usize) -> Res<Vec<AlertDelivery>> {
        let shown = self.shown;
        let p = self.c.params();
        let sql = format!(
            "SELECT TOP ({}) {DELIVERY_COLUMNS} FROM alert_deliveries ORDER BY id DESC",
            top(limit)
        );
        let rows = self.c.rows("listing alert deliveries", &sql, &p).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let c = Cells {
                row: r,
                shown,
                what: "an alert delivery",
            };
            out.push(
                DeliveryRow {
                    id: c.int_req(0)?,
                    at_ms: c.instant_req(1)?,
                    node: c.text_req(2)?,
                    channel: c.text_req(3)?,
                    subject: c.text_req(4)?,
                    condition: c.text_req(5)?,
                    kind: c.text_req(6)?,
                    run: c.int(7)?,
                    outcome: c.text_req(8)?,
                    detail: c.text_req(9)?,
                }
                .into_delivery(shown)?,
            );
        }
        Ok(out)
    }
}

/// The condition a [`DueSet`] adds to a due query (`jobs_claim_recurring` is the filtered
/// index that answers the recurring one).
fn recurring_only(set: DueSet) -> &'static str {
    match set {
        DueSet::All => "",
        DueSet::Recurring => " AND recurring = 1",
    }
}
