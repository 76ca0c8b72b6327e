-- takt SQLite schema, migration 0016: the runs' pending and running indexes hold only pending
-- and running runs, and the finished one only finished runs, as they do on PostgreSQL and SQL
-- Server since their first migration (issue 19).
--
-- runs_retry_due (state, next_attempt_at), runs_lease (state, lease_expires_at) and
-- runs_node (node_id, state) were whole-table indexes, though every query they serve asks
-- for pending runs (the claim of retries and queued runs, the next due instant) or running
-- ones (lease recovery, renewal, a node's runs at restart), and says so with a literal
-- `state = 'pending'` / `state = 'running'` term, which is what lets SQLite use a partial
-- index. So every run paid an entry in each at its insert and a delete and an insert in
-- each at its finish (its state, lease and node columns change), all on the one writing
-- connection, and all three grew with the whole history. Partial, a run enters the two
-- running ones when claimed and leaves them when it ends, and the pending one only while
-- it waits: at any time they hold what is in flight, not what ever ran. runs_finished
-- (finished_at) likewise held a NULL entry for every run until its end moved it; retention,
-- its one reader, asks for `finished_at IS NOT NULL`.

DROP INDEX runs_retry_due;
DROP INDEX runs_lease;
DROP INDEX runs_node;
DROP INDEX runs_finished;

CREATE INDEX runs_pending ON runs (next_attempt_at, created_at) WHERE state = 'pending';
CREATE INDEX runs_lease ON runs (lease_expires_at) WHERE state = 'running';
CREATE INDEX runs_node ON runs (node_id) WHERE state = 'running';
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (16, 'partial_run_state_indexes', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
