-- takt SQL Server schema, migration 0001: jobs, runs, run logs, nodes. SQL Server 2017 or newer
-- (Azure SQL too).
--
-- Applied by the host at start and by `takt db migrate` (the whole file in one transaction,
-- under the application lock 'takt_migrate' (sp_getapplock) so that nodes starting together
-- apply it once). A DBA may also run it by hand, in the database that will hold takt's tables:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0001_init.sql
--
-- (-b stops at the first error; -I sets QUOTED_IDENTIFIER, which the filtered indexes need.)
-- `GO` separates batches for sqlcmd; the host splits on the same lines. The file records
-- itself in schema_migrations (last batch). Never edit a released migration: add the next
-- numbered file instead.
--
-- Conventions (the same model as sql/postgres, in SQL Server's types):
--   * Instants are DATETIME2(3) in UTC (the server's zone plays no part); takt writes them to
--     the millisecond. Fire times are whole seconds.
--   * Durations are BIGINT milliseconds (columns ending in _ms).
--   * Text is NVARCHAR: policies and enumerations in the text forms the core parses and prints
--     (`fire-all:10@5m`, `queue-one`, `exp:1s..5m x2`, `timed_out`, `dst_gap` ...), so a row
--     reads like the config file it came from. Columns in an index have a bounded length
--     (names and node ids: 200 characters, as the core allows).
--   * Ids are BIGINT IDENTITY: never reused, so a node holding an old id can never reach
--     another job's or run's row.
--   * Parameters, results and schedules are NVARCHAR(MAX) holding JSON, exactly as given.

SET XACT_ABORT ON;
GO

IF OBJECT_ID(N'schema_migrations', N'U') IS NULL
CREATE TABLE schema_migrations (
    version     INT            NOT NULL PRIMARY KEY,  -- the file's number: 1 for 0001_init.sql
    name        NVARCHAR(200)  NOT NULL,              -- the rest of the file name: init
    applied_at  DATETIME2(3)   NOT NULL DEFAULT SYSUTCDATETIME()
);
GO

-- Job definitions (takt_core::job::JobDef).
CREATE TABLE jobs (
    id              BIGINT IDENTITY(1, 1) NOT NULL PRIMARY KEY,
    name            NVARCHAR(200)  NOT NULL,
    group_name      NVARCHAR(200)  NULL,      -- seed 004 WorkerGroupID
    handler_type    NVARCHAR(400)  NOT NULL,  -- plugin::handler, or Namespace.Class, Assembly
    params_json     NVARCHAR(MAX)  NOT NULL DEFAULT N'{}',
    schedule_json   NVARCHAR(MAX)  NULL,      -- the ScheduleSpec JSON; NULL: runs only when triggered
    enabled         BIT            NOT NULL DEFAULT 1,
    effective_from  DATETIME2(3)   NULL,      -- no fires before
    expires_at      DATETIME2(3)   NULL,      -- no fires at or after
    timeout_ms      BIGINT         NULL CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    retry_max       INT            NOT NULL DEFAULT 0 CHECK (retry_max >= 0),
    retry_backoff   NVARCHAR(400)  NOT NULL DEFAULT N'10s,30s,60s',
    retry_timeouts  BIT            NOT NULL DEFAULT 0,
    misfire         NVARCHAR(100)  NOT NULL DEFAULT N'skip',
    overlap         NVARCHAR(100)  NOT NULL DEFAULT N'skip',
    priority        INT            NOT NULL DEFAULT 500 CHECK (priority BETWEEN 0 AND 999),
    dependencies    NVARCHAR(MAX)  NOT NULL DEFAULT N'[]',   -- JSON array of job names
    node_tag        NVARCHAR(200)  NULL,      -- seed 004 DispatcherID: only nodes with this tag run it
    application     NVARCHAR(200)  NULL,
    owner           NVARCHAR(200)  NULL,
    description     NVARCHAR(4000) NULL,
    next_fire       DATETIME2(3)   NULL,      -- the store's bookkeeping; NULL: nothing due
    version         BIGINT         NOT NULL DEFAULT 1,       -- compare-and-set for edits
    updated_at      DATETIME2(3)   NOT NULL,
    CONSTRAINT jobs_name UNIQUE (name)
);
GO

-- Claiming reads due jobs in claim order and locks them (UPDLOCK, READPAST, ROWLOCK); the
-- filtered index gives that order, so a claim reads (and locks) only the rows it takes.
CREATE INDEX jobs_claim ON jobs (priority, next_fire, id)
    WHERE enabled = 1 AND next_fire IS NOT NULL;
-- The loop's sleep: the earliest next fire.
CREATE INDEX jobs_next_fire ON jobs (next_fire) WHERE enabled = 1 AND next_fire IS NOT NULL;
GO

-- Runs (takt_core::run::Run): one row per (job, fire time); retries re-use the row.
CREATE TABLE runs (
    id                BIGINT IDENTITY(1, 1) NOT NULL PRIMARY KEY,
    job_id            BIGINT         NOT NULL,
    fire_time         DATETIME2(3)   NOT NULL,  -- the scheduled fire; unchanged by retries
    state             NVARCHAR(20)   NOT NULL CHECK (state IN
                          (N'pending', N'running', N'succeeded', N'failed', N'timed_out',
                           N'cancelled', N'skipped')),
    attempt           INT            NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    created_at        DATETIME2(3)   NOT NULL,
    started_at        DATETIME2(3)   NULL,      -- when the latest attempt was claimed
    finished_at       DATETIME2(3)   NULL,      -- when the run reached a final state
    node_id           NVARCHAR(200)  NULL,      -- the node running (or that last ran) it
    lease_expires_at  DATETIME2(3)   NULL,      -- after this another node may recover it
    error             NVARCHAR(MAX)  NULL,      -- the latest error (kept on a retry)
    result_json       NVARCHAR(MAX)  NULL,
    elapsed_ms        BIGINT         NULL,      -- how long the latest attempt ran
    progress_done     BIGINT         NULL,      -- latest progress report; all three NULL when none
    progress_total    BIGINT         NULL,
    progress_message  NVARCHAR(MAX)  NULL,
    skip_reason       NVARCHAR(100)  NULL,      -- misfire | overlap | paused | dst_gap | ... (skipped only)
    next_attempt_at   DATETIME2(3)   NULL,      -- when a pending retry may be claimed
    claim_token       BIGINT         NOT NULL DEFAULT 0,  -- which claim call took the latest
                                                 -- attempt: lets a node whose connection failed
                                                 -- during COMMIT find out what it claimed
    CONSTRAINT runs_job FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE
);
GO

-- A fire is recorded once: nodes claiming it race on this key, and a skipped fire can never be
-- claimed later (seed 003: 37 duplicated runs without it).
CREATE UNIQUE INDEX runs_job_fire ON runs (job_id, fire_time);
-- Claiming retries and queued runs; the loop's sleep.
CREATE INDEX runs_pending ON runs (next_attempt_at, created_at) WHERE state = N'pending';
-- Recovery of expired leases.
CREATE INDEX runs_lease ON runs (lease_expires_at) WHERE state = N'running';
-- Lease renewal and restart recovery: a node's running runs.
CREATE INDEX runs_node ON runs (node_id) WHERE state = N'running';
-- Per-job counts of running and pending runs (overlap decisions, queued runs).
CREATE INDEX runs_job_state ON runs (job_id, state);
-- Listing, newest fire first.
CREATE INDEX runs_recent ON runs (fire_time, id);
-- Retention: final runs that finished before a cut-off.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
GO

-- Run logs, appended in batches; seq increases across the table, so within a run too.
CREATE TABLE run_logs (
    seq      BIGINT IDENTITY(1, 1) NOT NULL PRIMARY KEY,
    run_id   BIGINT         NOT NULL,
    at       DATETIME2(3)   NOT NULL,
    level    NVARCHAR(10)   NOT NULL CHECK (level IN
                 (N'trace', N'debug', N'info', N'warn', N'error')),
    message  NVARCHAR(MAX)  NOT NULL,
    CONSTRAINT run_logs_run FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE
);
GO

CREATE INDEX run_logs_by_run ON run_logs (run_id, seq);
GO

-- Host nodes on this database (seed 000 §7): each registers at start and heartbeats; its
-- running runs hold leases that the heartbeat renews.
CREATE TABLE nodes (
    id            NVARCHAR(200)  NOT NULL PRIMARY KEY,  -- the configured node id
    host_name     NVARCHAR(400)  NOT NULL,
    version       NVARCHAR(100)  NOT NULL,              -- the takt version it runs
    capacity      INT            NOT NULL CHECK (capacity > 0),
    tags          NVARCHAR(MAX)  NOT NULL DEFAULT N'[]', -- JSON array of node tags it serves
    started_at    DATETIME2(3)   NOT NULL,
    heartbeat_at  DATETIME2(3)   NOT NULL,
    stopped_at    DATETIME2(3)   NULL                   -- set by a clean shutdown
);
GO

INSERT INTO schema_migrations (version, name) VALUES (1, N'init');
GO
