-- takt PostgreSQL schema, migration 0011: group definitions (issue 15 item 3; seed 004 item
-- 15 WorkerGroupID, seed 003 §6). By hand: `psql -v ON_ERROR_STOP=1 -1 -f 0011_job_groups.sql`.
--
-- A group is named by its member jobs (jobs.group_name); this table holds what a group is
-- beyond its name: its concurrency limit and its last release. A claim locks a group's row
-- (FOR UPDATE) before counting the group's running runs, so two nodes cannot both take the
-- last slot.

-- One row per defined group (`[groups.NAME]` in takt.toml, `takt group set`, a resume that
-- released a failure hold). A group without a row has no limit and was never released.
CREATE TABLE job_groups (
    name          text        PRIMARY KEY,  -- the group name the members' jobs carry
    max_running   integer     CHECK (max_running IS NULL OR max_running >= 1),
                                            -- runs of its members running at once, all nodes; NULL: no limit
    released_at   timestamptz               -- the last `takt group resume`: member failures finished
                                            -- by then no longer hold the group
);

INSERT INTO schema_migrations (version, name) VALUES (11, 'job_groups');
