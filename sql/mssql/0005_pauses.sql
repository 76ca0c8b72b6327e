-- takt SQL Server schema, migration 0005: pause and resume of jobs, groups and nodes (issue
-- 15, seed 004's workflow). By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0005_pauses.sql
--
-- A pause is distinct from disabling: the schedule stays, and what fell due while paused is
-- recorded (skip reason `paused`) when it is resumed.

SET XACT_ABORT ON;
GO

-- Held jobs: a paused job (or a member of a paused group) keeps its next fire here and its
-- jobs.next_fire is NULL, so no due query or claim sees it. paused_* hold the job's own pause
-- (all NULL when only its group's pause holds it). The store deletes a job's hold with it.
CREATE TABLE job_holds (
    job_id        BIGINT         NOT NULL,
    next_fire     DATETIME2(3)   NULL,
    paused_at     DATETIME2(3)   NULL,
    paused_by     NVARCHAR(200)  NULL,
    pause_reason  NVARCHAR(4000) NULL,
    CONSTRAINT job_holds_pk PRIMARY KEY (job_id),
    CONSTRAINT job_holds_job FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE
);
GO

-- Pauses of groups (every member held, present and future) and nodes (the node claims
-- nothing), by name.
CREATE TABLE pauses (
    kind          NVARCHAR(10)   NOT NULL CHECK (kind IN (N'group', N'node')),
    name          NVARCHAR(200)  NOT NULL,
    paused_at     DATETIME2(3)   NOT NULL,
    paused_by     NVARCHAR(200)  NOT NULL,
    pause_reason  NVARCHAR(4000) NULL,
    CONSTRAINT pauses_pk PRIMARY KEY (kind, name)
);
GO

INSERT INTO schema_migrations (version, name) VALUES (5, N'pauses');
GO
