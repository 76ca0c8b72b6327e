-- takt SQLite schema, migration 0017: the CHECKs on runs.state, run_attempts.outcome and
-- run_logs.level say the same thing with `=` and `OR` instead of `IN (…)` (issue 19).
--
-- SQLite evaluates `x IN (three or more constants)` by building a temporary B-tree of the
-- list and probing it, and builds it afresh at each execution of each statement that checks
-- the constraint: every run insert, every state change, every attempt's end and every log
-- batch paid it on the one writing connection (EXPLAIN shows the OpenEphemeral; a profile of
-- B3 on SQLite put a quarter of a run insert's samples there). The same test written as a
-- chain of equalities compiles to plain comparisons. PostgreSQL and SQL Server test an IN
-- list in place, so only SQLite's schema changes.
--
-- SQLite cannot alter a CHECK. Its documented way for a change that leaves every stored row
-- valid and the file's format unchanged (ALTER TABLE, "making other kinds of table schema
-- changes", the simpler procedure) is to edit the table's text in sqlite_master under
-- `writable_schema`: nothing is copied, so a history of millions of runs upgrades at once.
-- The two forms accept exactly the same values, so no row needs checking. `RESET` reloads
-- the schema inside this transaction: a text SQLite could not parse fails the migration's
-- next statement and rolls it back, never a database left unreadable. Each replace() names
-- the whole CHECK as 0001 and 0005 wrote it; a table whose text differs (made by hand from
-- another text) keeps its IN list, which is only slower. The schema cookie is not bumped
-- (SQL cannot compute it): a connection of another process that still holds the old text
-- checks the same values, and every connection takt opens reads the schema after this.

PRAGMA writable_schema = ON;

UPDATE sqlite_master
SET sql = replace(sql,
'CHECK (state IN
                          (''pending'', ''running'', ''succeeded'', ''failed'', ''timed_out'',
                           ''cancelled'', ''skipped''))',
'CHECK (state = ''pending'' OR state = ''running'' OR state = ''succeeded''
                          OR state = ''failed'' OR state = ''timed_out''
                          OR state = ''cancelled'' OR state = ''skipped'')')
WHERE type = 'table' AND name = 'runs';

UPDATE sqlite_master
SET sql = replace(sql,
'CHECK (outcome IS NULL OR outcome IN
                       (''succeeded'', ''failed'', ''timed_out'', ''cancelled'', ''lease_expired'',
                        ''node_restarted''))',
'CHECK (outcome IS NULL OR outcome = ''succeeded'' OR outcome = ''failed''
                       OR outcome = ''timed_out'' OR outcome = ''cancelled''
                       OR outcome = ''lease_expired'' OR outcome = ''node_restarted'')')
WHERE type = 'table' AND name = 'run_attempts';

UPDATE sqlite_master
SET sql = replace(sql,
'CHECK (level IN (''trace'', ''debug'', ''info'', ''warn'', ''error''))',
'CHECK (level = ''trace'' OR level = ''debug'' OR level = ''info'' OR level = ''warn''
                                   OR level = ''error'')')
WHERE type = 'table' AND name = 'run_logs';

PRAGMA writable_schema = RESET;

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (17, 'checks_without_in_lists', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
