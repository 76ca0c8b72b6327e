-- takt SQLite schema, migration 0014: the recurring reserve (issue 19 item 3). A node keeps
-- slots that only fires of recurring jobs may take. When its other slots are full, it sleeps
-- until the next recurring fire: the earliest next fire of the enabled recurring jobs, which
-- jobs_due (0001) would reach only after every due one-off.

CREATE INDEX jobs_next_fire_recurring ON jobs (enabled, next_fire)
    WHERE next_fire IS NOT NULL AND recurring = 1;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (14, 'recurring_next_due', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
