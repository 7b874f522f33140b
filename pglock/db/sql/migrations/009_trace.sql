-- pglock schema, version 9 (issue 45): a traced run's W3C trace context on its history row
-- (docs/monitoring.md, "Tracing"): the trace it belongs to and the span that stands for
-- it, as lowercase hex (the form TRACEPARENT, the event log and the collectors show). NULL
-- for a run that was not traced. Every attempt of one trigger (its retries) is one span.
-- The checks are NOT VALID: the columns are new, so there is nothing to scan, and an
-- upgrade must not hold the runs table for a scan of ten million rows.
ALTER TABLE {schema}.runs ADD COLUMN trace_id text, ADD COLUMN span_id text;
ALTER TABLE {schema}.runs
    ADD CONSTRAINT runs_trace_id_hex CHECK (trace_id ~ '^[0-9a-f]{{32}}$') NOT VALID,
    ADD CONSTRAINT runs_span_id_hex CHECK (span_id ~ '^[0-9a-f]{{16}}$') NOT VALID;

-- The ids ride in the statements that record a start (sql/functions.sql): acquire and
-- record_start take two parameters more, at their end; start_run gains an overload beside
-- the one a pglock of version 8 calls while its run goes on through the upgrade.
DROP FUNCTION IF EXISTS {schema}.acquire(
    integer, text, text, text, integer, text, interval, timestamptz, bigint, boolean, text,
    text, text, timestamptz, interval, integer, integer, integer, boolean, timestamptz[],
    text[]);
DROP FUNCTION IF EXISTS {schema}.record_start(
    text, timestamptz, text, text, integer, text, bigint, text, text, text, timestamptz,
    interval, integer, integer);

UPDATE {schema}.meta SET value = '9' WHERE key = 'version';
