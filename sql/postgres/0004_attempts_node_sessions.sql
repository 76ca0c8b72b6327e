-- takt PostgreSQL schema, migration 0004: every attempt of a run, every life of a node (issue
-- 16: "did it run, and why not?"). By hand:
-- `psql -v ON_ERROR_STOP=1 -1 -f 0004_attempts_node_sessions.sql`.
--
-- run_attempts: one row per attempt of a run (the first claim, every retry), begun by the
-- claim that set the run running and ended by its finish or by recovery (lease expired, node
-- restarted), in the same transaction or statement as the run's own change. The runs row
-- keeps only the latest attempt; history and `takt audit` (which counts a fire executed more
-- than once from these rows) read this table. Rows go with their run.
CREATE TABLE run_attempts (
    run_id         bigint      NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt        integer     NOT NULL CHECK (attempt >= 1),
    node_id        text        NOT NULL,    -- the node that claimed it
    node_instance  text,                    -- that node's life
    started_at     timestamptz NOT NULL,    -- the claim
    finished_at    timestamptz,             -- NULL while running (or never recorded)
    outcome        text CHECK (outcome IS NULL OR outcome IN
                       ('succeeded', 'failed', 'timed_out', 'cancelled', 'lease_expired',
                        'node_restarted')),
    error          text,
    -- Also the "attempts by run" index.
    PRIMARY KEY (run_id, attempt)
);

-- Runs from before this migration: their latest attempt as the runs row recorded it (earlier
-- attempts of a retried run were never kept).
INSERT INTO run_attempts (run_id, attempt, node_id, node_instance, started_at, finished_at,
                          outcome, error)
SELECT id, attempt, node_id, node_instance, started_at, finished_at,
       CASE WHEN state = 'running' THEN NULL ELSE state END, error
FROM runs
WHERE node_id IS NOT NULL AND started_at IS NOT NULL
  AND state IN ('running', 'succeeded', 'failed', 'timed_out', 'cancelled');

-- node_sessions: one row per life of a node (registration, every heartbeat, the clean stop),
-- so a fire with no record can be explained ("the host was down from ... to ...").
CREATE TABLE node_sessions (
    instance      text        PRIMARY KEY,  -- the life's token (nodes.instance)
    node_id       text        NOT NULL,
    host_name     text        NOT NULL,
    started_at    timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,     -- every lease renewal
    stopped_at    timestamptz               -- NULL while running or after a crash
);

INSERT INTO node_sessions (instance, node_id, host_name, started_at, heartbeat_at, stopped_at)
SELECT instance, id, host_name, started_at, COALESCE(heartbeat_at, started_at), stopped_at
FROM nodes WHERE instance IS NOT NULL AND started_at IS NOT NULL;

-- Lives by start (who was up around an instant).
CREATE INDEX node_sessions_started ON node_sessions (started_at);

INSERT INTO schema_migrations (version, name) VALUES (4, 'attempts_node_sessions');
