-- takt PostgreSQL schema, migration 0005: pause and resume of jobs, groups and nodes (issue
-- 15, seed 004's workflow). By hand: `psql -v ON_ERROR_STOP=1 -1 -f 0005_pauses.sql`.
--
-- A pause is distinct from disabling: the schedule stays, and what fell due while paused is
-- recorded (skip reason `paused`) when it is resumed.

-- Held jobs: a paused job (or a member of a paused group) keeps its next fire here and its
-- jobs.next_fire is NULL, so no due query or claim sees it. paused_* hold the job's own pause
-- (all NULL when only its group's pause holds it).
CREATE TABLE job_holds (
    job_id        bigint      PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    next_fire     timestamptz,           -- the next fire kept aside; NULL: none
    paused_at     timestamptz,
    paused_by     text,                  -- who paused it (user@host by default)
    pause_reason  text
);

-- Pauses of groups (every member held, present and future) and nodes (the node claims
-- nothing), by name.
CREATE TABLE pauses (
    kind          text        NOT NULL CHECK (kind IN ('group', 'node')),
    name          text        NOT NULL,  -- the group name or node id
    paused_at     timestamptz NOT NULL,
    paused_by     text        NOT NULL,
    pause_reason  text,
    PRIMARY KEY (kind, name)
);

INSERT INTO schema_migrations (version, name) VALUES (5, 'pauses');
