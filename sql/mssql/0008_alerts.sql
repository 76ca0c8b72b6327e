-- takt SQL Server schema, migration 0008: alerts.
--
-- One row per (subject, condition) says whether an alert episode is open: opening one is
-- conditional on the row being absent (the primary key decides between concurrent inserts)
-- or closed, closing one on it being open, so of several nodes exactly one sends each alert
-- and each "recovered" notice. Deliveries are the record of what each channel was given.

CREATE TABLE alert_episodes (
    subject    NVARCHAR(200)  NOT NULL,
    condition  NVARCHAR(40)   NOT NULL,
    episode    NVARCHAR(2000) NOT NULL,
    opened_at  DATETIME2(3)   NOT NULL,
    closed_at  DATETIME2(3)   NULL,
    CONSTRAINT alert_episodes_key PRIMARY KEY (subject, condition)
);
GO

CREATE TABLE alert_deliveries (
    id         BIGINT IDENTITY(1, 1) NOT NULL PRIMARY KEY,
    at         DATETIME2(3)   NOT NULL,
    node       NVARCHAR(200)  NOT NULL,
    channel    NVARCHAR(200)  NOT NULL,
    subject    NVARCHAR(200)  NOT NULL,
    condition  NVARCHAR(40)   NOT NULL,
    kind       NVARCHAR(40)   NOT NULL,
    run_id     BIGINT         NULL,
    outcome    NVARCHAR(10)   NOT NULL CHECK (outcome IN (N'sent', N'failed', N'suppressed')),
    detail     NVARCHAR(2000) NOT NULL
);
GO

INSERT INTO schema_migrations (version, name) VALUES (8, N'alerts');
GO
