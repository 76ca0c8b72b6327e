-- takt SQLite schema, migration 0009: alerts.
--
-- One row per (subject, condition) says whether an alert episode is open: opening one is
-- conditional on the row being absent or closed, closing one on it being open, so of several
-- nodes exactly one sends each alert and each "recovered" notice. Deliveries are the record
-- of what each channel was given: sent, failed (with the reason) or suppressed (and why).

CREATE TABLE alert_episodes (
    subject    TEXT    NOT NULL,  -- job:<name>, node:<id>
    condition  TEXT    NOT NULL,  -- failed, timed_out, skipped, long_running, node_down
    episode    TEXT    NOT NULL,  -- what opened it (the run, the last heartbeat)
    opened_at  INTEGER NOT NULL,  -- Unix ms
    closed_at  INTEGER,           -- Unix ms; NULL while open
    PRIMARY KEY (subject, condition)
);

CREATE TABLE alert_deliveries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,  -- Unix ms
    node       TEXT    NOT NULL,
    channel    TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    condition  TEXT    NOT NULL,
    kind       TEXT    NOT NULL,  -- firing, recovered, digest
    run_id     INTEGER,           -- no foreign key: the record outlives the run's retention
    outcome    TEXT    NOT NULL CHECK (outcome IN ('sent', 'failed', 'suppressed')),
    detail     TEXT    NOT NULL
);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (9, 'alerts', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
