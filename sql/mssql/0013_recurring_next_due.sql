-- takt SQL Server schema, migration 0013: the recurring reserve (issue 19 item 3). By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0013_recurring_next_due.sql
--
-- A node keeps slots that only fires of recurring jobs may take. When its other slots are
-- full, it sleeps until the next recurring fire: the earliest next fire of the enabled
-- recurring jobs, which jobs_next_fire (0001) would reach only after every due one-off.

CREATE INDEX jobs_next_fire_recurring ON jobs (next_fire)
    WHERE enabled = 1 AND next_fire IS NOT NULL AND recurring = 1;
GO

INSERT INTO schema_migrations (version, name) VALUES (13, N'recurring_next_due');
GO
