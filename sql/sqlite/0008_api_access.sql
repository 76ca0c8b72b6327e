-- takt SQLite schema, migration 0008: the HTTP API's access (issue 16: tokens with a role,
-- operator actions recorded with the token's name) and the indexes its run listing pages on.
--
-- api_tokens: a token is never stored, only the SHA-256 of it (64 hex digits); `takt token
-- create` shows the token once. A revoked token keeps its row (and its name stays taken):
-- the actions it did name it.
CREATE TABLE api_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL UNIQUE,
    role        TEXT    NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    sha256      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,          -- Unix milliseconds
    revoked_at  INTEGER                    -- NULL while valid
);

-- operator_actions: what an operator did through the API (trigger, enable, disable, cancel,
-- create, update, delete, plugin-reload), by whom. The job by name and without a foreign key:
-- the record of a deletion outlives the job.
CREATE TABLE operator_actions (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        INTEGER NOT NULL,            -- Unix milliseconds
    actor     TEXT    NOT NULL,            -- the token's name
    action    TEXT    NOT NULL,
    job_name  TEXT,
    run_id    INTEGER,
    detail    TEXT
);

CREATE INDEX operator_actions_by_job ON operator_actions (job_name, id);

-- Run listing (newest fire first, paged by (fire_time, id)): by state across jobs, and by
-- job and state. By job alone pages on the unique (job_id, fire_time) key; unfiltered on
-- runs_recent.
CREATE INDEX runs_state_recent ON runs (state, fire_time, id);
CREATE INDEX runs_job_state_recent ON runs (job_id, state, fire_time);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (8, 'api_access', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
