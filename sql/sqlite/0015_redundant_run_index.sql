-- takt SQLite schema, migration 0015: one index fewer on runs (issue 19).
--
-- runs_job_state (job_id, state), from 0002, is the prefix of runs_job_state_recent (job_id,
-- state, fire_time), from 0008: every lookup by job and state (the overlap counts, the claim's
-- "is a run of this job running") is served by the longer index as well. Every run paid for
-- both: an entry at its insert, and a delete and an insert at its finish (the state changes),
-- all on the one writing connection, and the index grew with the whole history.

DROP INDEX runs_job_state;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (15, 'redundant_run_index', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
