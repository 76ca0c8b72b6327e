-- takt PostgreSQL schema, migration 0007: the HTTP API's access (issue 16: tokens with a
-- role, operator actions recorded with the token's name) and the indexes its run listing
-- pages on. By hand: `psql -v ON_ERROR_STOP=1 -1 -f 0007_api_access.sql`.

-- A token is never stored, only the SHA-256 of it (64 hex digits); `takt token create` shows
-- the token once. A revoked token keeps its row (and its name stays taken): the actions it
-- did name it.
CREATE TABLE api_tokens (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text        NOT NULL UNIQUE,
    role        text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    sha256      text        NOT NULL,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);

-- What an operator did through the API, by whom. The job by name and without a foreign key:
-- the record of a deletion outlives the job.
CREATE TABLE operator_actions (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL,
    actor     text        NOT NULL,
    action    text        NOT NULL,
    job_name  text,
    run_id    bigint,
    detail    text
);

CREATE INDEX operator_actions_by_job ON operator_actions (job_name, id);

-- Run listing (newest fire first, paged by (fire_time, id)): by state across jobs, and by
-- job and state. By job alone pages on the unique (job_id, fire_time) key; unfiltered on
-- runs_recent.
CREATE INDEX runs_state_recent ON runs (state, fire_time, id);
CREATE INDEX runs_job_state_recent ON runs (job_id, state, fire_time);

INSERT INTO schema_migrations (version, name) VALUES (7, 'api_access');
