-- takt SQL Server schema, migration 0014: one index fewer on runs (issue 19). By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0014_redundant_run_index.sql
--
-- runs_job_state (job_id, state), from 0001, is the prefix of runs_job_state_recent (job_id,
-- state, fire_time), from 0007: every lookup by job and state (the overlap counts, the claim's
-- "is a run of this job running") is served by the longer index as well. Every run paid for
-- both: an entry at its insert and a move at its finish (the state changes), and the index
-- grew with the whole history.

DROP INDEX runs_job_state ON runs;
GO

INSERT INTO schema_migrations (version, name) VALUES (14, N'redundant_run_index');
GO
