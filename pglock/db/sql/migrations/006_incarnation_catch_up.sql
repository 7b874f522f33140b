-- pglock schema, version 6: three changes, each in its own part below: the server
-- incarnation of an advisory lock row (issue 22), schedules, round two (issue 27), and
-- the monitoring kit's run-duration histogram and expected durations (issue 26).

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

-- The monitoring kit (docs/monitoring.md, "The duration histogram"). `pglock metrics`
-- exports each job's run durations as a histogram: its counters live in the job's row,
-- added to by `finish` in the statement that records a run's end, so a scrape reads
-- O(jobs) whatever the history's size, and `pglock prune` (which deletes runs) leaves
-- them alone: Prometheus counters do not go down. The bounds (seconds) are the schema's,
-- read by `finish` and by `metrics` alike; changing them needs a migration that starts
-- the counters anew. Per job: how many runs took at most each bound (cumulative, one
-- element per bound), how many in all, their summed seconds, and how many ran shorter
-- or longer than their --expect-duration. NULL: none yet.
-- The bounds: the durations operators write for cron jobs (--expect-duration,
-- --max-runtime, schedules), from a second to a day, about 2-3x apart. A bound an
-- operator is likely to alert on is a bucket's edge, so a quantile or a count "over 5m"
-- is exact there; 17 buckets keep a fleet's series count within reason.
INSERT INTO {schema}.meta (key, value) VALUES
    ('duration_bounds',
     '{{0.5,1,2.5,5,10,30,60,120,300,600,900,1800,3600,7200,14400,28800,86400}}');
ALTER TABLE {schema}.jobs
    ADD COLUMN duration_buckets bigint[],
    ADD COLUMN duration_count bigint,
    ADD COLUMN duration_sum double precision,
    ADD COLUMN runs_shorter bigint,
    ADD COLUMN runs_longer bigint;

-- A finished run outside its --expect-duration MIN..MAX, as a fact of the run (its
-- `error` still says it in words, for history). NOT VALID spares a scan of every run
-- under this migration's lock: the rows there are all NULL, and new ones are checked.
-- No run recorded by a released pglock has such a note, so there is nothing to carry over.
ALTER TABLE {schema}.runs
    ADD COLUMN expected text,
    ADD CONSTRAINT runs_expected CHECK (expected IN ('shorter', 'longer')) NOT VALID;

-- The counters from the runs the database keeps: those whose holder recorded an end
-- (an abandoned run's duration is only how long until a takeover noticed; it is counted
-- when its holder's end record arrives after all). One scan of `runs`, under the lock
-- of the ALTERs above, so no end is recorded while it counts. An end whose `finish`
-- call began before this transaction commits runs the body it began with, which counts
-- nothing: runs ending while an upgrade runs may be missing from the histogram
-- (docs/monitoring.md says so). Runs still running are counted when they end.
WITH bounds AS (
    SELECT b.upper, cardinality(b.upper) AS n,
           -- width_bucket counts the bounds at or under its operand; a microsecond more
           -- on each makes it those strictly under (durations are whole microseconds).
           ARRAY(SELECT u + interval '1 microsecond' FROM unnest(b.upper) u) AS past
    FROM (SELECT ARRAY(SELECT make_interval(secs => x) FROM unnest(value::float8[]) x)
                 AS upper
          FROM {schema}.meta WHERE key = 'duration_bounds') b
), placed AS (
    -- A run in bucket k (1-based) and every one after it: `below` bounds are under it.
    SELECT r.job, width_bucket(r.duration, b.past) AS below, count(*) AS runs,
           sum(r.duration) AS took
    FROM {schema}.runs r, bounds b
    WHERE r.duration IS NOT NULL AND r.outcome NOT IN ('running', 'cleared', 'abandoned')
    GROUP BY r.job, 2
), cumulative AS (
    SELECT p.job, k, coalesce(sum(p.runs) FILTER (WHERE p.below < k), 0)::bigint AS runs
    FROM placed p, generate_series(1, (SELECT n FROM bounds)) k
    GROUP BY p.job, k
), histogram AS (
    SELECT c.job, array_agg(c.runs ORDER BY c.k) AS buckets
    FROM cumulative c GROUP BY c.job
), totals AS (
    SELECT p.job, sum(p.runs)::bigint AS runs, extract(epoch FROM sum(p.took))::float8 AS seconds
    FROM placed p GROUP BY p.job
)
UPDATE {schema}.jobs j
SET duration_buckets = h.buckets, duration_count = t.runs, duration_sum = t.seconds
FROM histogram h JOIN totals t ON t.job = h.job WHERE j.job = h.job;

-- finish gains the run's --expect-duration side (p_expected), last and with a default:
-- a pglock 5 still running calls it as it did the old one (sql/functions.sql creates it).
DROP FUNCTION IF EXISTS {schema}.finish(bigint, text, text, bigint, interval, boolean,
    interval, integer, integer, text, text, bytea, boolean, boolean, text, text, text);

UPDATE {schema}.meta SET value = '6' WHERE key = 'version';
