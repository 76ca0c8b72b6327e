-- takt SQLite schema, migration 0011: continuations and dynamic parameters (issue 15).
--
-- jobs.on_success / jobs.on_failure: JSON arrays of job names that each get one run when a
-- run of the job succeeds / fails or times out. runs.parent_run_id: the run whose final state
-- created this one (trigger 'continuation'); unique together with job_id, so a parent starts
-- each continuation once. runs.params_resolved: the job's params with their templates
-- resolved for the latest attempt (NULL when they held no template).
ALTER TABLE jobs ADD COLUMN on_success TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN on_failure TEXT NOT NULL DEFAULT '[]';
ALTER TABLE runs ADD COLUMN parent_run_id INTEGER;
ALTER TABLE runs ADD COLUMN params_resolved TEXT;

CREATE UNIQUE INDEX runs_parent_job ON runs (parent_run_id, job_id) WHERE parent_run_id IS NOT NULL;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (11, 'continuations', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
