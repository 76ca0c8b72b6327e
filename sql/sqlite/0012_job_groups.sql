-- takt SQLite schema, migration 0012: group definitions (issue 15 item 3; seed 004 item 15
-- WorkerGroupID, seed 003 §6). A group is named by its member jobs (jobs.group_name); this
-- table holds what a group is beyond its name: its concurrency limit and its last release.

-- One row per defined group (`[groups.NAME]` in takt.toml, `takt group set`, a resume that
-- released a failure hold). A group without a row has no limit and was never released.
CREATE TABLE job_groups (
    name          TEXT    PRIMARY KEY,   -- the group name the members' jobs carry
    max_running   INTEGER CHECK (max_running IS NULL OR max_running >= 1),
                                         -- runs of its members running at once, all nodes; NULL: no limit
    released_at   INTEGER                -- Unix ms of the last `takt group resume`: member failures
                                         -- finished by then no longer hold the group
);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (12, 'job_groups', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
