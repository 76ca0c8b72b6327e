-- takt SQLite schema, migration 0005: every attempt of a run, every life of a node (issue 16:
-- "did it run, and why not?").
--
-- run_attempts: one row per attempt of a run (the first claim, every retry), begun by the
-- claim that set the run running and ended by its finish or by recovery (lease expired, node
-- restarted), in the same transaction as the run's own change. The runs row keeps only the
-- latest attempt; history, `takt runs`, `takt why` and `takt audit` (which counts a fire
-- executed more than once from these rows) read this table. Rows go with their run.
CREATE TABLE run_attempts (
    run_id         INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt        INTEGER NOT NULL CHECK (attempt >= 1),
    node_id        TEXT    NOT NULL,       -- the node that claimed it
    node_instance  TEXT,                   -- that node's life
    started_at     INTEGER NOT NULL,       -- Unix ms: the claim
    finished_at    INTEGER,                -- Unix ms; NULL while running (or never recorded)
    outcome        TEXT CHECK (outcome IS NULL OR outcome IN
                       ('succeeded', 'failed', 'timed_out', 'cancelled', 'lease_expired',
                        'node_restarted')),
    error          TEXT,
    -- Also the "attempts by run" index.
    PRIMARY KEY (run_id, attempt)
) WITHOUT ROWID;

-- Runs from before this migration: their latest attempt as the runs row recorded it (earlier
-- attempts of a retried run were never kept). A pending retry's last attempt failed.
INSERT INTO run_attempts (run_id, attempt, node_id, node_instance, started_at, finished_at,
                          outcome, error)
SELECT id, attempt, node_id, node_instance, started_at, finished_at,
       CASE WHEN state = 'running' THEN NULL ELSE state END, error
FROM runs
WHERE node_id IS NOT NULL AND started_at IS NOT NULL
  AND state IN ('running', 'succeeded', 'failed', 'timed_out', 'cancelled');

-- node_sessions: one row per life of a node (registration, every heartbeat, the clean stop).
-- The nodes row holds only the current life; these say when some node was up, so a fire with
-- no record can be explained ("the host was down from ... to ...").
CREATE TABLE node_sessions (
    instance      TEXT    PRIMARY KEY,     -- the life's token (nodes.instance)
    node_id       TEXT    NOT NULL,
    host_name     TEXT    NOT NULL,
    started_at    INTEGER NOT NULL,        -- Unix ms
    heartbeat_at  INTEGER NOT NULL,        -- Unix ms; every lease renewal
    stopped_at    INTEGER                  -- Unix ms; NULL while running or after a crash
);

-- The current life of every node known so far.
INSERT INTO node_sessions (instance, node_id, host_name, started_at, heartbeat_at, stopped_at)
SELECT instance, id, host_name, started_at, COALESCE(heartbeat_at, started_at), stopped_at
FROM nodes WHERE instance IS NOT NULL AND started_at IS NOT NULL;

-- Lives by start (`takt why --at`, `takt audit`: who was up around an instant).
CREATE INDEX node_sessions_started ON node_sessions (started_at);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (5, 'attempts_node_sessions', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
