-- takt SQLite schema, migration 0003: node identity (one process per node id).
--
-- Every start of a host registers a fresh instance token for its node id in `nodes`, and
-- every run records the instance that claimed it. Restart recovery fails only runs of the
-- node's *earlier* instances, and lease renewal (which is also the node's heartbeat) renews
-- only the runs of the renewing instance, so a second process with the same node id can
-- never fail or renew a live process's runs. On SQLite `takt run` also holds an OS lock on
-- `<database>.lock` for its whole life: one host per file.

-- Host nodes that used this file: the registered life of each node id.
CREATE TABLE nodes (
    id            TEXT    PRIMARY KEY,   -- the configured node id
    instance      TEXT,                  -- the token of its current (or last) life
    host_name     TEXT    NOT NULL,
    pid           INTEGER,               -- that life's process id on host_name
    version       TEXT    NOT NULL,      -- the takt version it runs
    capacity      INTEGER NOT NULL CHECK (capacity > 0),
    tags          TEXT    NOT NULL DEFAULT '[]',  -- JSON array of node tags it serves
    started_at    INTEGER,               -- Unix ms
    heartbeat_at  INTEGER,               -- Unix ms; every lease renewal is a heartbeat
    stopped_at    INTEGER                -- Unix ms; set by a clean stop
);

-- The life of the node that claimed a run's latest attempt (NULL on runs from before).
ALTER TABLE runs ADD COLUMN node_instance TEXT;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (3, 'node_identity', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
