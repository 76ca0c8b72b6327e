-- takt SQL Server schema, migration 0004: every attempt of a run, every life of a node (issue
-- 16: "did it run, and why not?"). By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0004_attempts_node_sessions.sql

SET XACT_ABORT ON;
GO

-- One row per attempt of a run (the first claim, every retry), begun by the claim that set
-- the run running and ended by its finish or by recovery (lease expired, node restarted), in
-- the same transaction as the run's own change. Rows go with their run (the store also
-- deletes them itself, for servers without the cascade).
CREATE TABLE run_attempts (
    run_id         BIGINT         NOT NULL,
    attempt        INT            NOT NULL CHECK (attempt >= 1),
    node_id        NVARCHAR(200)  NOT NULL,   -- the node that claimed it
    node_instance  NVARCHAR(100)  NULL,       -- that node's life
    started_at     DATETIME2(3)   NOT NULL,   -- the claim
    finished_at    DATETIME2(3)   NULL,       -- NULL while running (or never recorded)
    outcome        NVARCHAR(20)   NULL CHECK (outcome IS NULL OR outcome IN
                       (N'succeeded', N'failed', N'timed_out', N'cancelled', N'lease_expired',
                        N'node_restarted')),
    error          NVARCHAR(MAX)  NULL,
    -- Also the "attempts by run" index.
    CONSTRAINT run_attempts_key PRIMARY KEY (run_id, attempt),
    CONSTRAINT run_attempts_run FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE
);
GO

-- Runs from before this migration: their latest attempt as the runs row recorded it.
INSERT INTO run_attempts (run_id, attempt, node_id, node_instance, started_at, finished_at,
                          outcome, error)
SELECT id, attempt, node_id, node_instance, started_at, finished_at,
       CASE WHEN state = N'running' THEN NULL ELSE state END, error
FROM runs
WHERE node_id IS NOT NULL AND started_at IS NOT NULL
  AND state IN (N'running', N'succeeded', N'failed', N'timed_out', N'cancelled');
GO

-- One row per life of a node (registration, every heartbeat, the clean stop), so a fire with
-- no record can be explained ("the host was down from ... to ...").
CREATE TABLE node_sessions (
    instance      NVARCHAR(100)  NOT NULL PRIMARY KEY,  -- the life's token (nodes.instance)
    node_id       NVARCHAR(200)  NOT NULL,
    host_name     NVARCHAR(400)  NOT NULL,
    started_at    DATETIME2(3)   NOT NULL,
    heartbeat_at  DATETIME2(3)   NOT NULL,   -- every lease renewal
    stopped_at    DATETIME2(3)   NULL        -- NULL while running or after a crash
);
GO

INSERT INTO node_sessions (instance, node_id, host_name, started_at, heartbeat_at, stopped_at)
SELECT instance, id, host_name, started_at, COALESCE(heartbeat_at, started_at), stopped_at
FROM nodes WHERE instance IS NOT NULL AND started_at IS NOT NULL;
GO

-- Lives by start (who was up around an instant).
CREATE INDEX node_sessions_started ON node_sessions (started_at);
GO

INSERT INTO schema_migrations (version, name) VALUES (4, N'attempts_node_sessions');
GO
