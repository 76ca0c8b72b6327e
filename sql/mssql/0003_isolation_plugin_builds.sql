-- takt SQL Server schema, migration 0003: process isolation per job, and the plugin build that
-- ran each run (issue 18: plugins in worker processes, hot swaps). By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0003_isolation_plugin_builds.sql

SET XACT_ABORT ON;
GO

-- Where the job's plugin calls run: `in-process` (the default, so existing jobs keep running
-- where they ran) or `process` (a worker child process the host can kill).
ALTER TABLE jobs ADD isolation NVARCHAR(20) NOT NULL DEFAULT N'in-process'
    CHECK (isolation IN (N'in-process', N'process'));
GO

-- The plugin build that ran the run's latest ended attempt, written with the attempt's end.
-- All NULL when no plugin was called; plugin_sha256 is NULL for a plugin compiled into the
-- host, which has no file.
ALTER TABLE runs ADD plugin NVARCHAR(200) NULL;
GO
ALTER TABLE runs ADD plugin_version NVARCHAR(200) NULL;
GO
ALTER TABLE runs ADD plugin_sha256 NVARCHAR(64) NULL;
GO

INSERT INTO schema_migrations (version, name) VALUES (3, N'isolation_plugin_builds');
GO
