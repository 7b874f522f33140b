-- Frozen test data (never edit): what pglock's schema version 3 was as released.
-- The DDL of version 3 is v1.sql .. v3.sql run in that order; this file upgraded 2 to 3.
-- Copied once from git: `git show 4c7cd80:pglock/sql/migrations/003_delivery.sql`.

-- pglock schema, version 3: delivery. A scheduled slot is retried (--retries) until it
-- succeeds or its attempts are spent, across hosts; a slot spent without success is dead
-- until a later success or `pglock replay`.

-- One row per slot of a scheduled job that was ever started: how many attempts it had,
-- how many it may have, and how it ended. The CHECK is what keeps any number of racing
-- hosts within the limit: the start of every attempt adds one to `attempts` in the same
-- statement that writes its run, and a start past the limit fails there.
CREATE TABLE {schema}.slots (
    job              text NOT NULL,
    slot             timestamptz NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    attempt_limit    integer NOT NULL CHECK (attempt_limit >= 1),
    -- The --retries of the run that opened it: a replay gives it 1 + retries more.
    retries          integer NOT NULL DEFAULT 0 CHECK (retries >= 0),
    succeeded_run_id bigint,
    -- Set when an attempt ended in a way no retry fixes (exit 126/127, `pglock stop`).
    closed_at        timestamptz,
    replays          integer NOT NULL DEFAULT 0,
    PRIMARY KEY (job, slot),
    CHECK (attempts <= attempt_limit)
);

-- Slots that ran before this version are done: each had its one run.
INSERT INTO {schema}.slots (job, slot, attempts, attempt_limit, succeeded_run_id)
SELECT job, slot, count(*), count(*),
       max(id) FILTER (WHERE outcome = 'succeeded')
FROM {schema}.runs WHERE slot IS NOT NULL AND outcome <> 'cleared'
GROUP BY job, slot;

-- Each attempt is its own run: (job, slot) is no longer unique, (job, slot, attempt) is.
-- Rows written before this version (and by an older pglock still running through the
-- upgrade) have no attempt number: for them, one run per slot still holds.
ALTER TABLE {schema}.runs
    ADD COLUMN attempt integer CHECK (attempt >= 1),
    -- A run without --schedule of a job that has one: an operator's run by hand.
    ADD COLUMN manual boolean NOT NULL DEFAULT false;
ALTER TABLE {schema}.runs DROP CONSTRAINT runs_job_slot_key;
CREATE UNIQUE INDEX runs_slot_attempt ON {schema}.runs (job, slot, attempt);
CREATE UNIQUE INDEX runs_slot_unnumbered ON {schema}.runs (job, slot) WHERE attempt IS NULL;

-- The summary: the newest run's attempt and its limit, and the dead slot, if any.
ALTER TABLE {schema}.jobs
    ADD COLUMN last_attempt integer,
    ADD COLUMN attempt_limit integer,
    ADD COLUMN dead_slot timestamptz,
    ADD COLUMN dead_attempts integer,
    ADD COLUMN dead_error text;

UPDATE {schema}.meta SET value = '3' WHERE key = 'version';
