-- takt PostgreSQL schema, migration 0012: the claim's fairness rule (issue 19 item 3). By
-- hand: `psql -v ON_ERROR_STOP=1 -1 -f 0012_recurring_jobs.sql`.
--
-- A burst of due one-off fires must not hold back recurring schedules: a full claim gives at
-- least half its room to due jobs whose schedule recurs, read apart in claim order from their
-- own partial index.

-- Whether the job's schedule recurs (cron, calendar or interval): written by takt with every
-- insert and update of the job (JobDef::is_recurring), never read back. Rows written before
-- this migration are classified from their schedule: a one-shot `at` schedule is stored as
-- JSON that begins with its `at` field; no schedule (runs only when triggered) is not
-- recurring.
ALTER TABLE jobs ADD COLUMN recurring boolean NOT NULL DEFAULT false;
UPDATE jobs SET recurring = true
 WHERE schedule_json IS NOT NULL AND schedule_json NOT LIKE '{"at":%';

-- The recurring part of jobs_claim (0001): the due recurring jobs in claim order.
CREATE INDEX jobs_claim_recurring ON jobs (priority, next_fire, id)
    WHERE enabled AND next_fire IS NOT NULL AND recurring;

INSERT INTO schema_migrations (version, name) VALUES (12, 'recurring_jobs');
