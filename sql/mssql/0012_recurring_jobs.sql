-- takt SQL Server schema, migration 0012: the claim's fairness rule (issue 19 item 3). By
-- hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0012_recurring_jobs.sql
--
-- A burst of due one-off fires must not hold back recurring schedules: a full claim gives at
-- least half its room to due jobs whose schedule recurs, read apart in claim order from their
-- own filtered index.

-- Whether the job's schedule recurs (cron, calendar or interval): written by takt with every
-- insert and update of the job (JobDef::is_recurring), never read back. Rows written before
-- this migration are classified from their schedule: a one-shot `at` schedule is stored as
-- JSON that begins with its `at` field; no schedule (runs only when triggered) is not
-- recurring. The column is used by the next batch, hence the GO.
ALTER TABLE jobs ADD recurring BIT NOT NULL CONSTRAINT jobs_recurring_default DEFAULT 0;
GO

UPDATE jobs SET recurring = 1
 WHERE schedule_json IS NOT NULL AND schedule_json NOT LIKE N'{"at":%';
GO

-- The recurring part of jobs_claim (0001): the due recurring jobs in claim order.
CREATE INDEX jobs_claim_recurring ON jobs (priority, next_fire, id)
    WHERE enabled = 1 AND next_fire IS NOT NULL AND recurring = 1;
GO

INSERT INTO schema_migrations (version, name) VALUES (12, N'recurring_jobs');
GO
