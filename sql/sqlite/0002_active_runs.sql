-- takt SQLite schema, migration 0002: finding a job's runs in flight.
--
-- The loop asks, for each due job, how many of its runs are running or pending (the overlap
-- policy decides on those counts), and the claim leaves a queued run (overlap `queue-one`:
-- pending with no next_attempt_at) alone while a run of its job is running. Both read runs by
-- (job_id, state); without this index each would scan every run of the job.
CREATE INDEX runs_job_state ON runs (job_id, state);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (2, 'active_runs', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
