-- Frozen test data (never edit): what pglock's schema version 1 was as released.
-- A new schema of version N was v1.sql, v2.sql, ... vN.sql run in that order.
-- Copied once from git: `git show 4c7cd80:pglock/sql/schema.sql`.

-- pglock schema, version 1. pglock quotes the schema name into each placeholder.
-- Rows of `locks` are never deleted: the fencing token of a job must never go down.
CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE {schema}.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- One row per job ever locked: who holds it (or last held it) and until when.
CREATE TABLE {schema}.locks (
    job           text PRIMARY KEY CHECK (length(job) BETWEEN 1 AND 200),
    mode          text NOT NULL CHECK (mode IN ('lease', 'advisory')),
    holder        text NOT NULL,
    holder_pid    integer NOT NULL,
    holder_id     text NOT NULL,
    fencing_token bigint NOT NULL,
    ttl           interval NOT NULL,
    acquired_at   timestamptz NOT NULL,
    renewed_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    released_at   timestamptz,
    backend_pid   integer,
    cleared_at    timestamptz,
    cleared_by    text
);

-- One row per run that started, written before the command starts.
CREATE TABLE {schema}.runs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job           text NOT NULL,
    slot          timestamptz,
    mode          text NOT NULL,
    holder        text NOT NULL,
    holder_pid    integer NOT NULL,
    fencing_token bigint,
    command       text NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    duration      interval,
    exit_code     integer,
    signal        integer,
    outcome       text NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed', 'timed_out',
                                                  'lock_lost', 'killed', 'abandoned', 'cleared')),
    error         text,
    output_tail   bytea,
    -- Only on the audit rows `pglock clear` writes (outcome 'cleared'): who cleared, and why.
    cleared_by    text,
    reason        text,
    UNIQUE (job, slot)
);
CREATE INDEX runs_job_started ON {schema}.runs (job, started_at DESC);
CREATE INDEX runs_started ON {schema}.runs (started_at DESC);
CREATE INDEX runs_running ON {schema}.runs (job) WHERE outcome = 'running';

-- The summary `status` reads: one row per job, so status costs O(jobs), not O(history).
CREATE TABLE {schema}.jobs (
    job              text PRIMARY KEY,
    mode             text NOT NULL,
    schedule         text,
    timezone         text,
    -- With a schedule: the last run's slot, the first slot after it (so status needs no
    -- cron arithmetic for a job that is on time), and how long past a slot a run may start.
    last_slot        timestamptz,
    next_slot        timestamptz,
    grace            interval,
    -- Finished runs since the last success, for check's thresholds.
    consecutive_failures integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_run_id      bigint,
    last_started_at  timestamptz,
    last_holder      text,
    last_finished_run_id bigint,
    last_finished_at timestamptz,
    last_outcome     text,
    last_exit_code   integer,
    last_duration    interval,
    last_success_at  timestamptz,
    outcome_counts   jsonb NOT NULL DEFAULT '{{}}'
);

INSERT INTO {schema}.meta (key, value) VALUES ('version', '1');
