-- takt SQL Server schema, migration 0010: continuations and dynamic parameters (issue 15).
-- By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0010_continuations.sql
--
-- jobs.on_success / jobs.on_failure: JSON arrays of job names that each get one run when a
-- run of the job succeeds / fails or times out. runs.parent_run_id: the run whose final state
-- created this one (trigger 'continuation'); unique together with job_id (a filtered index:
-- SQL Server counts NULLs as equal in a unique index), so a parent starts each continuation
-- once. runs.params_resolved: the job's params with their templates resolved for the latest
-- attempt (NULL when they held no template).

SET XACT_ABORT ON;
GO

ALTER TABLE jobs ADD on_success NVARCHAR(MAX) NOT NULL DEFAULT N'[]';
GO

ALTER TABLE jobs ADD on_failure NVARCHAR(MAX) NOT NULL DEFAULT N'[]';
GO

ALTER TABLE runs ADD parent_run_id BIGINT NULL;
GO

ALTER TABLE runs ADD params_resolved NVARCHAR(MAX) NULL;
GO

CREATE UNIQUE INDEX runs_parent_job ON runs (parent_run_id, job_id) WHERE parent_run_id IS NOT NULL;
GO

INSERT INTO schema_migrations (version, name) VALUES (10, N'continuations');
GO
