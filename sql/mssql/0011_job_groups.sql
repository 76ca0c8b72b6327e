-- takt SQL Server schema, migration 0011: group definitions (issue 15 item 3; seed 004 item
-- 15 WorkerGroupID, seed 003 s6). By hand:
--
--     sqlcmd -S db,1433 -d mes -U admin -b -I -i 0011_job_groups.sql
--
-- A group is named by its member jobs (jobs.group_name); this table holds what a group is
-- beyond its name: its concurrency limit and its last release. A claim reads a group row
-- WITH (UPDLOCK, HOLDLOCK) before counting the group running runs, so two nodes cannot
-- both take the last slot.

-- One row per defined group (`[groups.NAME]` in takt.toml, `takt group set`, a resume that
-- released a failure hold). A group without a row has no limit and was never released.
CREATE TABLE job_groups (
    name          NVARCHAR(200)  NOT NULL,  -- the group name the member jobs carry
    max_running   INT            NULL CHECK (max_running IS NULL OR max_running >= 1),
                                            -- runs of its members running at once, all nodes; NULL: no limit
    released_at   DATETIME2(3)   NULL,      -- the last takt group resume
    CONSTRAINT job_groups_pk PRIMARY KEY (name)
);
GO

INSERT INTO schema_migrations (version, name) VALUES (11, N'job_groups');
GO
