-- takt PostgreSQL schema, migration 0002: node identity (one process per node id).
--
-- Every start of a host registers a fresh instance token for its node id, refused while
-- another instance of the id has a heartbeat younger than the lease; every run records the
-- instance that claimed it. Restart recovery fails only runs of the node's earlier instances,
-- and lease renewal (which is also the node's heartbeat) renews only the renewing instance's
-- runs, so a second process with the same node id can never fail or renew a live process's
-- runs.

ALTER TABLE nodes ADD COLUMN instance text;   -- the token of the node's current (or last) life
ALTER TABLE nodes ADD COLUMN pid bigint;      -- that life's process id on host_name

-- The life of the node that claimed a run's latest attempt (NULL on runs from before).
ALTER TABLE runs ADD COLUMN node_instance text;

INSERT INTO schema_migrations (version, name) VALUES (2, 'node_identity');
