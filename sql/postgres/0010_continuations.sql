-- takt PostgreSQL schema, migration 0010: continuations and dynamic parameters (issue 15).
-- By hand: `psql -v ON_ERROR_STOP=1 -1 -f 0010_continuations.sql`.
--
-- jobs.on_success / jobs.on_failure: JSON arrays of job names that each get one run when a
-- run of the job succeeds / fails or times out. runs.parent_run_id: the run whose final state
-- created this one (trigger 'continuation'); unique together with job_id, so a parent starts
-- each continuation once. runs.params_resolved: the job's params with their templates
-- resolved for the latest attempt (NULL when they held no template).
ALTER TABLE jobs ADD COLUMN on_success text NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN on_failure text NOT NULL DEFAULT '[]';
ALTER TABLE runs ADD COLUMN parent_run_id bigint;
ALTER TABLE runs ADD COLUMN params_resolved text;

CREATE UNIQUE INDEX runs_parent_job ON runs (parent_run_id, job_id) WHERE parent_run_id IS NOT NULL;

INSERT INTO schema_migrations (version, name) VALUES (10, 'continuations');
