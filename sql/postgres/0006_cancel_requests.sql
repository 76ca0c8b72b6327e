-- takt PostgreSQL schema, migration 0006: cancel anywhere (issue 15). By hand:
-- `psql -v ON_ERROR_STOP=1 -1 -f 0006_cancel_requests.sql`.
--
-- A cancel of a running run is a request in the database that the node running it obeys (a
-- NOTIFY wakes it; it also polls the requests of its running runs about every second); the
-- row stays as the record of who asked and when.
CREATE TABLE cancel_requests (
    run_id        bigint      PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    requested_by  text        NOT NULL,  -- who asked (user@host by default)
    requested_at  timestamptz NOT NULL
);

INSERT INTO schema_migrations (version, name) VALUES (6, 'cancel_requests');
