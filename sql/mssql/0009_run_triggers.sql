-- takt SQL Server schema, migration 0009: how a run came to be (issue 15). By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0009_run_triggers.sql
--
-- Every run records its trigger when it is created: 'schedule', 'catch_up' (a missed fire its
-- misfire policy released late) or 'manual' (takt job trigger, the API). Runs recorded before
-- this migration keep NULL, read as unknown: a manual run cannot be told from a scheduled one
-- after the fact.

SET XACT_ABORT ON;
GO

ALTER TABLE runs ADD triggered_by NVARCHAR(20) NULL;
GO

INSERT INTO schema_migrations (version, name) VALUES (9, N'run_triggers');
GO
