-- takt PostgreSQL schema, migration 0009: how a run came to be (issue 15). By hand:
-- `psql -v ON_ERROR_STOP=1 -1 -f 0009_run_triggers.sql`.
--
-- Every run records its trigger when it is created: 'schedule', 'catch_up' (a missed fire its
-- misfire policy released late) or 'manual' (takt job trigger, the API). Runs recorded before
-- this migration keep NULL, read as unknown: a manual run cannot be told from a scheduled one
-- after the fact.
ALTER TABLE runs ADD COLUMN triggered_by text;

INSERT INTO schema_migrations (version, name) VALUES (9, 'run_triggers');
