-- Frozen test data (never edit): what pglock's schema version 2 was as released.
-- The DDL of version 2 is v1.sql .. v2.sql run in that order; this file upgraded 1 to 2.
-- Copied once from git: `git show 4c7cd80:pglock/sql/migrations/002_control.sql`.

-- pglock schema, version 2: operators in control (pause, resume, stop, forget) and their
-- audit.

-- A paused job is skipped by every host's `pglock run` (exit 75, nothing recorded) until
-- it is resumed or `until` passes (database time). The row of the empty job name (which
-- no job can have) pauses every job, known or not.
CREATE TABLE {schema}.pauses (
    job       text PRIMARY KEY CHECK (length(job) <= 200),
    paused_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    paused_by text NOT NULL,
    reason    text NOT NULL,
    until     timestamptz
);

-- Every operator action that changes a job: clear, pause, resume, stop, forget (job NULL:
-- every job).
CREATE TABLE {schema}.audit (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    job    text,
    action text NOT NULL,
    by     text NOT NULL,
    reason text,
    detail text
);
CREATE INDEX audit_job_at ON {schema}.audit (job, at DESC);

-- `pglock stop`: the holder sees the request at its next renewal, stops its command and
-- releases normally. A new acquisition clears it.
ALTER TABLE {schema}.locks
    ADD COLUMN stop_requested_at timestamptz,
    ADD COLUMN stop_requested_by text,
    ADD COLUMN stop_reason text;

-- `pglock forget`: a retired job leaves status, check and metrics (its history stays until
-- pruned); a new run of it brings it back.
ALTER TABLE {schema}.jobs ADD COLUMN forgotten_at timestamptz;

-- A new outcome, `stopped`. NOT VALID: the rows already there passed the narrower check,
-- and a 10-million-row history is not rescanned under an exclusive lock.
ALTER TABLE {schema}.runs DROP CONSTRAINT runs_outcome_check;
ALTER TABLE {schema}.runs ADD CONSTRAINT runs_outcome_check CHECK (outcome IN (
    'running', 'succeeded', 'failed', 'timed_out', 'lock_lost', 'killed', 'abandoned',
    'cleared', 'stopped')) NOT VALID;

UPDATE {schema}.meta SET value = '2' WHERE key = 'version';
