-- pglock schema, version 6: two changes, each in its own part below: the server
-- incarnation of an advisory lock row (issue 22), and schedules, round two (issue 27).

-- The server incarnation of an advisory lock row
-- (docs/advisory.md, "Restarts and failovers"). A free session lock proves an advisory
-- holder gone only on the server that granted it, in the life of its lock table: the row
-- records which one that was (incarnation(), sql/functions.sql), stamped by acquire,
-- renew and retake while the caller's session holds the lock. A contender takes an
-- advisory row over at once only when it was stamped by the server answering now; any
-- other (a restart, a crash, a promoted standby since) is a lease, waited out to its
-- expiry or until its holder takes its session lock back. NULL (a row of an older
-- pglock, until its holder's next renewal) is never the current one.
ALTER TABLE {schema}.locks ADD COLUMN incarnation text;

-- Schedules, round two (docs/schedules.md). A trigger may catch
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
