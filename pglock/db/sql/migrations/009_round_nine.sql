-- pglock schema, version 9: no two holders across an asynchronous promotion, round two
-- (docs/ha.md), and a traced run's trace context on its history row (docs/monitoring.md).
-- The rules changed in sql/functions.sql, created after this file:
-- - a row of an older timeline goes back to nobody, its own holder included, before the
--   wait after a promotion has passed (a resent acquire waits like anyone else);
-- - no holder's own write re-stamps a row's timeline (restamp() is gone): only an
--   acquisition does;
-- - a holder keeps (renews, keeps for a retry, starts an attempt under) its own row of an
--   older timeline only until the moment it would have stopped by (keeps());
-- - the wait after a promotion covers the longest ttl granted on the old timeline, per
--   job and, for a job with no row, for the schema (below);
-- - an advisory contender takes the session lock through take(), which ends the
--   session of a holder stopped past its horizon whose session lives on (evict());
-- - a trigger refused by the wait alone learns how long it has left (acquire's new
--   column), waits for it and tries once more; its run says it started late, and a slot
--   given up for it is recorded as missed, with the reason (below);
-- - acquire refuses a slot more than a minute ahead of the server's clock (a host whose
--   clock runs fast), before it takes or records anything (issue 46, N-L12).

-- The longest ttl granted for the job (or seat) on the timeline its row was last taken
-- under: what the wait after the next promotion covers, whatever the ttl of the holder
-- whose acquisition the old primary may have lost (docs/ttl.md, "One ttl per job").
ALTER TABLE {schema}.locks ADD COLUMN longest_ttl interval;
ALTER TABLE {schema}.seats ADD COLUMN longest_ttl interval;
UPDATE {schema}.locks SET longest_ttl = ttl;
UPDATE {schema}.seats SET longest_ttl = ttl;

-- The longest ttl any acquisition on the timeline granted: what a job with no row waits
-- for after the next promotion.
ALTER TABLE {schema}.timelines ADD COLUMN longest_ttl interval;
UPDATE {schema}.timelines t SET longest_ttl = (
    SELECT max(ttl) FROM (SELECT ttl FROM {schema}.locks WHERE timeline = t.timeline
                          UNION ALL
                          SELECT ttl FROM {schema}.seats WHERE timeline = t.timeline) r);

-- Why a run started late ('promotion_wait': it waited out the wait after a promotion),
-- and why a slot was given up without a run (the same); the job's count of such slots.
ALTER TABLE {schema}.runs ADD COLUMN late_reason text
    CHECK (late_reason IN ('promotion_wait'));
ALTER TABLE {schema}.slots ADD COLUMN missed_reason text
    CHECK (missed_reason IN ('promotion_wait'));
ALTER TABLE {schema}.jobs
    ADD COLUMN promotion_missed bigint,
    ADD COLUMN promotion_missed_slot timestamptz;

-- A traced run's W3C trace context (docs/monitoring.md, "Tracing"): the trace it belongs
-- to and the span that stands for it, as lowercase hex (the form TRACEPARENT, the event
-- log and the collectors show). NULL for a run that was not traced. Every attempt of one
-- trigger (its retries) is one span. The checks are NOT VALID: the columns are new, so
-- there is nothing to scan, and an upgrade must not hold the runs table for a scan of ten
-- million rows. The ids ride in the statements that record a start: acquire and
-- record_start take them, and start_run gains an overload beside the one a pglock of
-- version 8 calls while its run goes on through the upgrade.
ALTER TABLE {schema}.runs ADD COLUMN trace_id text, ADD COLUMN span_id text;
ALTER TABLE {schema}.runs
    ADD CONSTRAINT runs_trace_id_hex CHECK (trace_id ~ '^[0-9a-f]{{32}}$') NOT VALID,
    ADD CONSTRAINT runs_span_id_hex CHECK (span_id ~ '^[0-9a-f]{{16}}$') NOT VALID;

-- Signatures that change: acquire (a column and parameters more), record_start
-- (parameters more), sighting (columns more); restamp is gone. (take, and start_run's
-- overload, are new.)
DROP FUNCTION IF EXISTS {schema}.acquire(integer, text, text, text, integer, text, interval,
    timestamptz, bigint, boolean, text, text, text, timestamptz, interval, integer, integer,
    integer, boolean, timestamptz[], text[]);
DROP FUNCTION IF EXISTS {schema}.record_start(text, timestamptz, text, text, integer, text,
    bigint, text, text, text, timestamptz, interval, integer, integer);
DROP FUNCTION IF EXISTS {schema}.sighting();
DROP FUNCTION IF EXISTS {schema}.restamp(bigint, timestamptz);

UPDATE {schema}.meta SET value = '9' WHERE key = 'version';
