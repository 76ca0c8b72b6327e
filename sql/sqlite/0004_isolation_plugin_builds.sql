-- takt SQLite schema, migration 0004: process isolation per job, and the plugin build that ran
-- each run (issue 18: plugins in worker processes, hot swaps).
--
-- jobs.isolation: where the job's plugin calls run, `in-process` (the default: existing jobs
-- keep running where they ran) or `process` (a worker child process the host can kill).
ALTER TABLE jobs ADD COLUMN isolation TEXT NOT NULL DEFAULT 'in-process'
    CHECK (isolation IN ('in-process', 'process'));

-- The plugin build that ran the run's latest ended attempt, written with the attempt's end:
-- after a hot swap an operator can tell which runs the old and which the new version served.
-- All NULL when no plugin was called (an unresolvable handler, a skipped fire, an older takt);
-- plugin_sha256 is NULL for a plugin compiled into the host, which has no file.
ALTER TABLE runs ADD COLUMN plugin TEXT;
ALTER TABLE runs ADD COLUMN plugin_version TEXT;
ALTER TABLE runs ADD COLUMN plugin_sha256 TEXT;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (4, 'isolation_plugin_builds', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
