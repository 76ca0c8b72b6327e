-- takt SQL Server schema, migration 0007: the HTTP API's access (issue 16: tokens with a
-- role, operator actions recorded with the token's name) and the indexes its run listing
-- pages on. By hand: `sqlcmd -b -i 0007_api_access.sql` (batches separated by GO).

-- A token is never stored, only the SHA-256 of it (64 hex digits); `takt token create` shows
-- the token once. A revoked token keeps its row (and its name stays taken): the actions it
-- did name it.
CREATE TABLE api_tokens (
    id          BIGINT IDENTITY(1, 1) NOT NULL PRIMARY KEY,
    name        NVARCHAR(200)  NOT NULL,
    role        NVARCHAR(10)   NOT NULL CHECK (role IN (N'viewer', N'operator', N'admin')),
    sha256      NVARCHAR(64)   NOT NULL,
    created_at  DATETIME2(3)   NOT NULL,
    revoked_at  DATETIME2(3)   NULL,
    CONSTRAINT api_tokens_name UNIQUE (name)
);
GO

-- What an operator did through the API, by whom. The job by name and without a foreign key:
-- the record of a deletion outlives the job.
CREATE TABLE operator_actions (
    id        BIGINT IDENTITY(1, 1) NOT NULL PRIMARY KEY,
    at        DATETIME2(3)   NOT NULL,
    actor     NVARCHAR(200)  NOT NULL,
    action    NVARCHAR(40)   NOT NULL,
    job_name  NVARCHAR(200)  NULL,
    run_id    BIGINT         NULL,
    detail    NVARCHAR(MAX)  NULL
);
GO

CREATE INDEX operator_actions_by_job ON operator_actions (job_name, id);
GO

-- Run listing (newest fire first, paged by (fire_time, id)): by state across jobs, and by
-- job and state. By job alone pages on the unique (job_id, fire_time) index; unfiltered on
-- runs_recent.
CREATE INDEX runs_state_recent ON runs (state, fire_time, id);
GO
CREATE INDEX runs_job_state_recent ON runs (job_id, state, fire_time);
GO

INSERT INTO schema_migrations (version, name) VALUES (7, N'api_access');
GO
