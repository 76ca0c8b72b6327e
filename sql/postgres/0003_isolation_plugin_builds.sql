-- takt PostgreSQL schema, migration 0003: process isolation per job, and the plugin build that
-- ran each run (issue 18: plugins in worker processes, hot swaps). By hand:
-- `psql -v ON_ERROR_STOP=1 -1 -f 0003_isolation_plugin_builds.sql`.

-- Where the job's plugin calls run: `in-process` (the default, so existing jobs keep running
-- where they ran) or `process` (a worker child process the host can kill).
ALTER TABLE jobs ADD COLUMN isolation text NOT NULL DEFAULT 'in-process'
    CHECK (isolation IN ('in-process', 'process'));

-- The plugin build that ran the run's latest ended attempt, written with the attempt's end.
-- All NULL when no plugin was called; plugin_sha256 is NULL for a plugin compiled into the
-- host, which has no file.
ALTER TABLE runs ADD COLUMN plugin text;
ALTER TABLE runs ADD COLUMN plugin_version text;
ALTER TABLE runs ADD COLUMN plugin_sha256 text;

INSERT INTO schema_migrations (version, name) VALUES (3, 'isolation_plugin_builds');
