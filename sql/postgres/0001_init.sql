-- takt PostgreSQL schema, migration 0001: jobs, runs, run logs, nodes.
--
-- Applied by the host at start and by `takt db migrate` (each migration in its own
-- transaction, under an advisory lock so that nodes starting together apply it once). A DBA
-- may also run it by hand with psql (`psql -v ON_ERROR_STOP=1 -1 -f 0001_init.sql`): the file
-- records itself in schema_migrations (last statement). Never edit a released migration: add
-- the next numbered file instead.
--
-- Conventions (the same model as sql/sqlite, in PostgreSQL's types):
--   * Instants are timestamptz; takt writes them to the millisecond. Fire times are whole
--     seconds.
--   * Durations are bigint milliseconds (columns ending in _ms).
--   * Policies and enumerations are stored in the text forms the core parses and prints
--     (`fire-all:10@5m`, `queue-one`, `exp:1s..5m x2`, `timed_out`, `dst_gap` ...), so a row
--     reads like the config file it came from.
--   * Ids are identity columns: never reused, so a node holding an old id can never reach
--     another job's or run's row.
--   * Parameters, results and schedules are text holding JSON, exactly as given (jsonb would
--     reorder keys and drop duplicates a handler may rely on).

CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer     PRIMARY KEY,   -- the file's number: 1 for 0001_init.sql
    name        text        NOT NULL,      -- the rest of the file name: init
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- Job definitions (takt_core::job::JobDef).
CREATE TABLE jobs (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL UNIQUE,
    group_name      text,                  -- seed 004 WorkerGroupID
    handler_type    text        NOT NULL,  -- plugin::handler, or Namespace.Class, Assembly
    params_json     text        NOT NULL DEFAULT '{}',
    schedule_json   text,                  -- the ScheduleSpec JSON; NULL: runs only when triggered
    enabled         boolean     NOT NULL DEFAULT true,
    effective_from  timestamptz,           -- no fires before
    expires_at      timestamptz,           -- no fires at or after
    timeout_ms      bigint      CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    retry_max       integer     NOT NULL DEFAULT 0 CHECK (retry_max >= 0),
    retry_backoff   text        NOT NULL DEFAULT '10s,30s,60s',
    retry_timeouts  boolean     NOT NULL DEFAULT false,
    misfire         text        NOT NULL DEFAULT 'skip',
    overlap         text        NOT NULL DEFAULT 'skip',
    priority        integer     NOT NULL DEFAULT 500 CHECK (priority BETWEEN 0 AND 999),
    dependencies    text        NOT NULL DEFAULT '[]',   -- JSON array of job names
    node_tag        text,                  -- seed 004 DispatcherID: only nodes with this tag run it
    application     text,
    owner           text,
    description     text,
    next_fire       timestamptz,           -- the store's bookkeeping; NULL: nothing due
    version         bigint      NOT NULL DEFAULT 1,      -- compare-and-set for edits
    updated_at      timestamptz NOT NULL
);

-- Claiming reads due jobs in claim order and locks them (FOR NO KEY UPDATE SKIP LOCKED); the
-- partial index gives that order, so a claim reads only the rows it takes.
CREATE INDEX jobs_claim ON jobs (priority, next_fire, id)
    WHERE enabled AND next_fire IS NOT NULL;
-- The loop's sleep: the earliest next fire.
CREATE INDEX jobs_next_fire ON jobs (next_fire) WHERE enabled AND next_fire IS NOT NULL;

-- Runs (takt_core::run::Run): one row per (job, fire time); retries re-use the row.
CREATE TABLE runs (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id            bigint      NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    fire_time         timestamptz NOT NULL,  -- the scheduled fire; unchanged by retries
    state             text        NOT NULL CHECK (state IN
                          ('pending', 'running', 'succeeded', 'failed', 'timed_out',
                           'cancelled', 'skipped')),
    attempt           integer     NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    created_at        timestamptz NOT NULL,
    started_at        timestamptz,           -- when the latest attempt was claimed
    finished_at       timestamptz,           -- when the run reached a final state
    node_id           text,                  -- the node running (or that last ran) it
    lease_expires_at  timestamptz,           -- after this another node may recover it
    error             text,                  -- the latest error (kept on a retry)
    result_json       text,
    elapsed_ms        bigint,                -- how long the latest attempt ran
    progress_done     bigint,                -- latest progress report; all three NULL when none
    progress_total    bigint,
    progress_message  text,
    skip_reason       text,                  -- misfire | overlap | paused | dst_gap | ... (skipped only)
    next_attempt_at   timestamptz,           -- when a pending retry may be claimed
    claim_token       bigint      NOT NULL DEFAULT 0,  -- which claim call took the latest
                                             -- attempt: lets a node whose connection failed
                                             -- during COMMIT find out what it claimed
    -- A fire is recorded once: nodes claiming it race on this key, and a skipped fire can
    -- never be claimed later (seed 003: 37 duplicated runs without it).
    CONSTRAINT runs_job_fire UNIQUE (job_id, fire_time)
);

-- Claiming retries and queued runs; the loop's sleep.
CREATE INDEX runs_pending ON runs (next_attempt_at, created_at) WHERE state = 'pending';
-- Recovery of expired leases.
CREATE INDEX runs_lease ON runs (lease_expires_at) WHERE state = 'running';
-- Lease renewal and restart recovery: a node's running runs.
CREATE INDEX runs_node ON runs (node_id) WHERE state = 'running';
-- Per-job counts of running and pending runs (overlap decisions, queued runs).
CREATE INDEX runs_job_state ON runs (job_id, state);
-- Listing, newest fire first.
CREATE INDEX runs_recent ON runs (fire_time, id);
-- Retention: final runs that finished before a cut-off.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- Run logs, appended in batches; seq increases across the table, so within a run too.
CREATE TABLE run_logs (
    seq      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id   bigint      NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at       timestamptz NOT NULL,
    level    text        NOT NULL CHECK (level IN ('trace', 'debug', 'info', 'warn', 'error')),
    message  text        NOT NULL
);

CREATE INDEX run_logs_by_run ON run_logs (run_id, seq);

-- Host nodes on this database (seed 000 §7): each registers at start and heartbeats; its
-- running runs hold leases that the heartbeat renews.
CREATE TABLE nodes (
    id            text        PRIMARY KEY,  -- the configured node id
    host_name     text        NOT NULL,
    version       text        NOT NULL,     -- the takt version it runs
    capacity      integer     NOT NULL CHECK (capacity > 0),
    tags          text        NOT NULL DEFAULT '[]',  -- JSON array of node tags it serves
    started_at    timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,
    stopped_at    timestamptz               -- set by a clean shutdown
);

INSERT INTO schema_migrations (version, name) VALUES (1, 'init');
