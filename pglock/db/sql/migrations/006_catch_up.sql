-- pglock schema, version 6: schedules, round two (docs/schedules.md). A trigger may catch
-- up the slots its job missed (--catch-up), skips inside maintenance windows (--window),
-- and a slot whose trigger found the job's previous run still going is counted.

-- The job's summary: its windows as the last run gave them (status says "in window until
-- HH:MM" and counts no missed slot in one); slots skipped while a run of an older slot
-- held the lock (the total, the newest such slot, and how many in a row: since a run
-- ended having skipped none); slots given up by catch-up (older than --catch-up-limit
-- or --deadline), their total and the newest of them. Nullable: a row of an older pglock
-- reads as none.
ALTER TABLE {schema}.jobs
    ADD COLUMN windows text[],
    ADD COLUMN skipped_running bigint,
    ADD COLUMN skipped_running_slot timestamptz,
    ADD COLUMN skipped_running_streak integer,
    ADD COLUMN catch_up_skipped bigint,
    ADD COLUMN catch_up_skipped_slot timestamptz;

-- A slot run by catch-up, after its time (history marks it).
ALTER TABLE {schema}.slots ADD COLUMN caught_up boolean;

-- acquire gains the catch-up candidates and whether a lost trigger is final (it then
-- counts a slot skipped while running), and says which candidates have no run: the old
-- one goes first (sql/functions.sql creates the new one). A pglock 5 that then finds no
-- acquire of its own reads the version and refuses, as it does any newer schema's.
DROP FUNCTION IF EXISTS {schema}.acquire(integer, text, text, text, integer, text,
    interval, timestamptz, bigint, boolean, text, text, text, timestamptz, interval,
    integer, integer, integer);

UPDATE {schema}.meta SET value = '6' WHERE key = 'version';
