-- takt SQLite schema, migration 0001: jobs, runs, run logs.
--
-- Applied by the host at start and by `takt db migrate`, each migration in its own
-- transaction; it may also be run by hand (`sqlite3 takt.db < 0001_init.sql`), since the file
-- records itself in schema_migrations (last statement). Never edit a released migration: add
-- the next numbered file instead.
--
-- Conventions:
--   * Instants are INTEGER Unix milliseconds, UTC (fire times are whole seconds, so they are
--     exact; a sub-millisecond part of any other instant is truncated).
--   * Durations are INTEGER milliseconds (columns ending in _ms).
--   * Booleans are INTEGER 0 / 1.
--   * Policies and enumerations are stored in the text forms the core parses and prints
--     (`fire-all:10@5m`, `queue-one`, `exp:1s..5m x2`, `timed_out`, `dst_gap` ...), so a row
--     reads like the config file it came from.
--   * Ids are AUTOINCREMENT: an id is never reused after a delete or a retention purge, so a
--     node holding an old id can never reach another job's or run's row.

-- Which migrations have been applied (the migrator also creates it before the first one).
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INTEGER PRIMARY KEY,       -- the file's number: 1 for 0001_init.sql
    name        TEXT    NOT NULL,          -- the rest of the file name: init
    applied_at  INTEGER NOT NULL           -- Unix milliseconds
);

-- Job definitions (takt_core::job::JobDef).
CREATE TABLE jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT    NOT NULL UNIQUE,
    group_name      TEXT,                  -- seed 004 WorkerGroupID
    handler_type    TEXT    NOT NULL,      -- plugin::handler, or Namespace.Class, Assembly
    params_json     TEXT    NOT NULL DEFAULT '{}',
    schedule_json   TEXT,                  -- the ScheduleSpec JSON; NULL: runs only when triggered
    enabled         INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    effective_from  INTEGER,               -- no fires before (ms)
    expires_at      INTEGER,               -- no fires at or after (ms)
    timeout_ms      INTEGER CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    retry_max       INTEGER NOT NULL DEFAULT 0 CHECK (retry_max >= 0),   -- retries after the first attempt
    retry_backoff   TEXT    NOT NULL DEFAULT '10s,30s,60s',              -- none | 10s,30s,60s | exp:1s..5m x2 jitter 0.2
    retry_timeouts  INTEGER NOT NULL DEFAULT 0 CHECK (retry_timeouts IN (0, 1)),
    misfire         TEXT    NOT NULL DEFAULT 'skip',       -- skip | fire-once | fire-all:N, optional @lateness
    overlap         TEXT    NOT NULL DEFAULT 'skip',       -- skip | queue-one | allow | cancel-running
    priority        INTEGER NOT NULL DEFAULT 500 CHECK (priority BETWEEN 0 AND 999),  -- 0 runs first
    dependencies    TEXT    NOT NULL DEFAULT '[]',         -- JSON array of job names
    node_tag        TEXT,                  -- seed 004 DispatcherID
    application     TEXT,
    owner           TEXT,
    description     TEXT,
    next_fire       INTEGER,               -- the store's bookkeeping (ms); NULL: nothing due
    version         INTEGER NOT NULL DEFAULT 1,            -- compare-and-set for edits
    updated_at      INTEGER NOT NULL
);

-- Claiming: enabled jobs whose next fire has come.
CREATE INDEX jobs_due ON jobs (enabled, next_fire);

-- Runs (takt_core::run::Run): one row per (job, fire time); retries re-use the row.
CREATE TABLE runs (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id            INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    fire_time         INTEGER NOT NULL,    -- the scheduled fire (ms); unchanged by retries
    state             TEXT    NOT NULL CHECK (state IN
                          ('pending', 'running', 'succeeded', 'failed', 'timed_out',
                           'cancelled', 'skipped')),
    attempt           INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    created_at        INTEGER NOT NULL,
    started_at        INTEGER,             -- when the latest attempt was claimed
    finished_at       INTEGER,             -- when the run reached a final state
    node_id           TEXT,                -- the node running (or that last ran) it
    lease_expires_at  INTEGER,             -- after this another node may recover it
    error             TEXT,                -- the latest error (kept on a retry)
    result_json       TEXT,
    elapsed_ms        INTEGER,             -- how long the latest attempt ran
    progress_done     INTEGER,             -- latest progress report; all three NULL when none
    progress_total    INTEGER,
    progress_message  TEXT,
    skip_reason       TEXT,                -- misfire | overlap | paused | dst_gap | ... (skipped only)
    next_attempt_at   INTEGER,             -- when a pending retry may be claimed
    -- A fire is recorded once: two nodes claiming it race on this key, and a skipped fire
    -- can never be claimed later.
    UNIQUE (job_id, fire_time)
);

-- Claiming due retries: state = 'pending' AND next_attempt_at <= now.
CREATE INDEX runs_retry_due ON runs (state, next_attempt_at);
-- Recovery of expired leases: state = 'running' AND lease_expires_at <= now.
CREATE INDEX runs_lease ON runs (state, lease_expires_at);
-- Lease renewal and restart recovery: node_id = ? AND state = 'running'.
CREATE INDEX runs_node ON runs (node_id, state);
-- Listing, newest fire first.
CREATE INDEX runs_recent ON runs (fire_time, id);
-- Retention: final runs that finished before a cut-off.
CREATE INDEX runs_finished ON runs (finished_at);

-- Run logs, appended in batches; seq increases across the table, so within a run too.
CREATE TABLE run_logs (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id   INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at       INTEGER NOT NULL,             -- when the line was written (ms)
    level    TEXT    NOT NULL CHECK (level IN ('trace', 'debug', 'info', 'warn', 'error')),
    message  TEXT    NOT NULL
);

-- Reading one run's log in order, paged by seq.
CREATE INDEX run_logs_by_run ON run_logs (run_id, seq);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (1, 'init', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
