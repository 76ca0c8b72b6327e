-- takt SQL Server schema, migration 0006: cancel anywhere (issue 15). By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0006_cancel_requests.sql
--
-- A cancel of a running run is a request in the database that the node running it obeys (it
-- polls the requests of its running runs about every second); the row stays as the record of
-- who asked and when. The store deletes it with its run.

SET XACT_ABORT ON;
GO

CREATE TABLE cancel_requests (
    run_id        BIGINT         NOT NULL,
    requested_by  NVARCHAR(200)  NOT NULL,
    requested_at  DATETIME2(3)   NOT NULL,
    CONSTRAINT cancel_requests_pk PRIMARY KEY (run_id),
    CONSTRAINT cancel_requests_run FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE
);
GO

INSERT INTO schema_migrations (version, name) VALUES (6, N'cancel_requests');
GO
