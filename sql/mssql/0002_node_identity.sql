-- takt SQL Server schema, migration 0002: node identity (one process per node id).
--
-- Every start of a host registers a fresh instance token for its node id, refused while
-- another instance of the id has a heartbeat younger than the lease; every run records the
-- instance that claimed it. Restart recovery fails only runs of the node's earlier instances,
-- and lease renewal (which is also the node's heartbeat) renews only the renewing instance's
-- runs, so a second process with the same node id can never fail or renew a live process's
-- runs.

ALTER TABLE nodes ADD instance NVARCHAR(100) NULL;  -- the token of the node's current life
GO
ALTER TABLE nodes ADD pid BIGINT NULL;              -- that life's process id on host_name
GO
-- The life of the node that claimed a run's latest attempt (NULL on runs from before).
ALTER TABLE runs ADD node_instance NVARCHAR(100) NULL;
GO

INSERT INTO schema_migrations (version, name) VALUES (2, N'node_identity');
GO
