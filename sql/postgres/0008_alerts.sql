-- takt PostgreSQL schema, migration 0008: alerts.
--
-- One row per (subject, condition) says whether an alert episode is open: opening one is
-- conditional on the row being absent (the primary key decides between concurrent inserts)
-- or closed, closing one on it being open, so of several nodes exactly one sends each alert
-- and each "recovered" notice. Deliveries are the record of what each channel was given.

CREATE TABLE alert_episodes (
    subject    text        NOT NULL,
    condition  text        NOT NULL,
    episode    text        NOT NULL,
    opened_at  timestamptz NOT NULL,
    closed_at  timestamptz,
    PRIMARY KEY (subject, condition)
);

CREATE TABLE alert_deliveries (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    node       text        NOT NULL,
    channel    text        NOT NULL,
    subject    text        NOT NULL,
    condition  text        NOT NULL,
    kind       text        NOT NULL,
    run_id     bigint,
    outcome    text        NOT NULL CHECK (outcome IN ('sent', 'failed', 'suppressed')),
    detail     text        NOT NULL
);

INSERT INTO schema_migrations (version, name) VALUES (8, 'alerts');
