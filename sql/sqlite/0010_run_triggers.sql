-- takt SQLite schema, migration 0010: how a run came to be (issue 15). Every run records its
-- trigger when it is created: 'schedule', 'catch_up' (a missed fire its misfire policy
-- released late) or 'manual' (takt job trigger, the API). Runs recorded before this migration
-- keep NULL, read as unknown: a manual run cannot be told from a scheduled one after the fact.
ALTER TABLE runs ADD COLUMN triggered_by TEXT;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (10, 'run_triggers', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
