-- takt SQLite schema, migration 0002: indexes for the scheduling loop's per-pass queries.
--
-- The claim reads due jobs in claim order (priority, next fire, id); jobs_due (0001) finds
-- them but cannot give that order, so every claim sorted every due job (B7: ~2 ms per claim
-- with 20 000 due). The partial index gives the order directly, so a claim reads only the
-- rows it takes.
CREATE INDEX jobs_claim ON jobs (enabled, priority, next_fire, id) WHERE next_fire IS NOT NULL;

-- The loop asks, for each due job, how many of its runs are running or pending (the overlap
-- policy decides on those counts), and the claim leaves a queued run (overlap `queue-one`:
-- pending with no next_attempt_at) alone while a run of its job is running. Both read runs by
-- (job_id, state); without this index each would scan every run of the job.
CREATE INDEX runs_job_state ON runs (job_id, state);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (2, 'claim_indexes', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
