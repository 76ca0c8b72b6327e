-- takt SQLite schema, migration 0007: cancel anywhere (issue 15). A cancel of a running run
-- is a request in the database that the node running it obeys (it polls the requests of its
-- running runs about every second); the row stays as the record of who asked and when.
CREATE TABLE cancel_requests (
    run_id        INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    requested_by  TEXT    NOT NULL,      -- who asked (user@host by default)
    requested_at  INTEGER NOT NULL       -- Unix ms
);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (7, 'cancel_requests', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
