-- takt SQLite schema, migration 0006: pause and resume of jobs, groups and nodes (issue 15,
-- seed 004's workflow). A pause is distinct from disabling: the schedule stays, and what fell
-- due while paused is recorded (skip reason `paused`) when it is resumed.

-- Held jobs: a paused job (or a member of a paused group) keeps its next fire here and its
-- jobs.next_fire is NULL, so no due query or claim sees it. paused_* hold the job's own pause
-- (all NULL when only its group's pause holds it).
CREATE TABLE job_holds (
    job_id        INTEGER PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    next_fire     INTEGER,               -- the next fire kept aside (ms); NULL: none
    paused_at     INTEGER,               -- Unix ms
    paused_by     TEXT,                  -- who paused it (user@host by default)
    pause_reason  TEXT
);

-- Pauses of groups (every member held, present and future) and nodes (the node claims
-- nothing), by name.
CREATE TABLE pauses (
    kind          TEXT    NOT NULL CHECK (kind IN ('group', 'node')),
    name          TEXT    NOT NULL,      -- the group name or node id
    paused_at     INTEGER NOT NULL,      -- Unix ms
    paused_by     TEXT    NOT NULL,
    pause_reason  TEXT,
    PRIMARY KEY (kind, name)
);

INSERT INTO schema_migrations (version, name, applied_at)
VALUES (6, 'pauses', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
