-- pglock schema, version 9: no two holders across an asynchronous promotion, round two
-- (docs/ha.md), the fleet census (docs/operators.md, "The census"), and a traced run's
-- trace context on its history row (docs/monitoring.md).
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
--   clock runs fast), before it takes or records anything (issue 46, N-L12);
-- - candidates (issue 47): with --candidates K only the first K hosts of a slot's ranking
--   contend, the others ask nothing; a host learns the ranking's hosts (the job's roster)
--   from acquire or, when it has not connected for a while, from members().

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

-- The fleet census (issue 44). Every `pglock run`, winner or loser, records its host and
-- its attempt of the job, in the statement it sends anyway (attend, in acquire or, for an
-- advisory loser, take): the losers are the fleet's attendance, which nothing recorded
-- before. From it, status, check, metrics, `pglock hosts` and the dashboard tell a host
-- that stopped attempting a job (a lost crontab, a removed pglock, one too old for the
-- schema) while another host still runs it. Both tables start empty; the next runs fill
-- them.

-- One row per host that ran pglock: its name (PGLOCK_HOST, `host =` in the config file,
-- else the system's host name), the pglock and Python it runs, when it was first seen, and
-- the jobs it attempted more than once (the jobs it attends, which a crash or a failover
-- must not make the census forget). Written when the host is first seen, when its versions
-- change and when it attends a job anew: seldom, so it is an ordinary (logged) table.
-- `pglock forget-host` deletes the row and the host's attendance; the host's next run
-- brings it back.
CREATE TABLE {schema}.hosts (
    host       text PRIMARY KEY CHECK (octet_length(host) BETWEEN 1 AND 255),
    first_seen timestamptz NOT NULL,
    version    text NOT NULL,
    python     text NOT NULL,
    jobs       text[] NOT NULL DEFAULT '{{}}'
) WITH (fillfactor = 50);

-- One row per job and host that attempted it: its last recorded attempt (database time),
-- how it came out, the slot (with --schedule) and ttl it was for, and the seconds between
-- its last recorded attempts (the newest last, at most 5; their median is the host's
-- usual interval for an unscheduled job). Rewritten at most once a minute of the
-- database's clock (a winner that lost earlier in the same minute, --wait, records that
-- it ran). Every loser of a minutely fleet rewrites its row at each :00, so the table is
-- UNLOGGED: those rewrites cost no WAL and no flush (docs/scale.md, "The census"). A
-- crash or a promoted standby empties it; the hosts' `jobs` above keep whom to expect,
-- and a host that does not attempt again is silent as before (lock/census.py). Its
-- fillfactor leaves each page room for its rows' next versions: the rewrites are HOT.
-- Its rows change every minute, their spread hardly ever: autovacuum analyzes it (which
-- writes its statistics, logged) once a hundred times its rows changed, not at every
-- storm of a minutely fleet (docs/scale.md, "The census").
CREATE UNLOGGED TABLE {schema}.attendance (
    job           text NOT NULL,
    host          text NOT NULL,
    first_attempt timestamptz NOT NULL,
    ttl           interval NOT NULL,
    outcome       text NOT NULL
                  CHECK (outcome IN ('ran', 'held', 'paused', 'slot_done', 'standby')),
    last_attempt  timestamptz NOT NULL,
    slot          timestamptz,
    gaps          integer[] NOT NULL DEFAULT '{{}}',
    -- Candidates (issue 47, docs/fleet.md "Candidates"): a host that contends only in its
    -- turns (--candidates) promises to be seen again within `due` (its
    -- --candidates-refresh plus the job's interval), and is silent past twice that
    -- (NULL: it contends at every trigger; the census's rule). `passed_at`: when a
    -- candidate ranked below it ran a slot it did not attempt (it is left out of the
    -- job's roster until it is seen again). `roster_key` orders a job's hosts for its
    -- roster (roster_key()), fixed when the row is made.
    due           interval,
    passed_at     timestamptz,
    roster_key    bigint NOT NULL,
    PRIMARY KEY (job, host)
) WITH (fillfactor = 50, autovacuum_analyze_scale_factor = 100);
-- A host's rows (its last attempt of any job; forget-host). host never changes in a row:
-- the rewrites stay HOT.
CREATE INDEX attendance_host ON {schema}.attendance (host);
-- A job's roster (roster()): its first hosts by roster_key, read in that order and
-- stopped at the roster's size. roster_key never changes in a row: the rewrites stay HOT.
CREATE INDEX attendance_roster ON {schema}.attendance (job, roster_key);

-- An operator's action on a host (`pglock forget-host`): the host it was about. Such a
-- row has no job, and is no action on every job.
ALTER TABLE {schema}.audit ADD COLUMN host text;

-- Candidates (issue 47): the rank of the host that ran a run in its slot's turns (1: the
-- first candidate; NULL: the run was not limited to candidates, or its host did not know
-- its rank), and a job's candidates as its last run was given them (--candidates K and
-- --candidate-step; NULL: every host contends), which status shows.
ALTER TABLE {schema}.runs ADD COLUMN candidate_rank integer;
ALTER TABLE {schema}.jobs ADD COLUMN candidates integer, ADD COLUMN candidate_step interval;

-- Signatures that change: acquire (columns and parameters more: the trace ids, the
-- census's host and versions, the candidates), record_start (parameters more), sighting
-- (columns more); restamp is gone. (take, attend, start_run's overload, roster_key,
-- roster and members are new.) A pglock 8 that then
-- finds no acquire of its own reads the version and refuses, as it does any newer
-- schema's.
DROP FUNCTION IF EXISTS {schema}.acquire(integer, text, text, text, integer, text, interval,
    timestamptz, bigint, boolean, text, text, text, timestamptz, interval, integer, integer,
    integer, boolean, timestamptz[], text[]);
DROP FUNCTION IF EXISTS {schema}.record_start(text, timestamptz, text, text, integer, text,
    bigint, text, text, text, timestamptz, interval, integer, integer);
DROP FUNCTION IF EXISTS {schema}.sighting();
DROP FUNCTION IF EXISTS {schema}.restamp(bigint, timestamptz);

UPDATE {schema}.meta SET value = '9' WHERE key = 'version';
