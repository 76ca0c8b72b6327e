-- takt SQLite schema, migration 0013: the claim's fairness rule (issue 19 item 3). A burst of
-- due one-off fires must not hold back recurring schedules: a full claim gives at least half
-- its room to due jobs whose schedule recurs, read apart in claim order from their own index.

-- Whether the job's schedule recurs (cron, calendar or interval): written by takt with every
-- insert and update of the job (JobDef::is_recurring), never read back. Rows written before
-- this migration are classified from their schedule: a one-shot `at` schedule is stored as
-- JSON that begins with its `at` field; no schedule (runs only when triggered) is not
-- recurring.
ALTER TABLE jobs ADD COLUMN recurring INTEGER NOT NULL DEFAULT 0 CHECK (recurring IN (0, 1));
UPDATE jobs SET recurring = 1
 WHERE schedule_json IS NOT NULL AND schedule_json NOT LIKE '{"at":%';

-- The recurring half of jobs_claim (0002): the due recurring jobs in claim order.
CREATE INDEX jobs_claim_recurring ON jobs (enabled, priority, next_fire, id)
    WHERE next_fire IS NOT NULL AND recurring = 1;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (13, 'recurring_jobs', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
