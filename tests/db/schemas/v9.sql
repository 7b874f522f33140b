-- Frozen test data (never edit): what pglock's schema version 9 was as released.
-- The DDL of version 9 is v1.sql .. v9.sql run in that order; this file upgraded 8 to 9.
-- Copied once from git: `git show dc3ec25:pglock/db/sql/migrations/009_promotions_census_tracing.sql
-- dc3ec25:pglock/db/sql/functions.sql`.

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

-- pglock's SQL functions, each written once: the current body of every function of the
-- schema, and who may call it. Tables change through the numbered migrations
-- (sql/migrations/); this file is run whole after them by every creation and every
-- upgrade, in the same transaction as the version bump, so a database of any version
-- ends with exactly these bodies.
--
-- The run path as functions: each step of `pglock run` is one call (one statement, one
-- round trip). They are SECURITY DEFINER, so a role granted only EXECUTE on them
-- (pglock_runner, `pglock init --print-grants`) can take, renew and release its own
-- claims and record its own runs, and write nothing else. A claim is its random holder
-- id: no function lets a caller act on a lock, seat or run whose holder id it does not
-- know, and the runner cannot read the holder_id column. Every function pins its
-- search_path and names every table with its schema. Each write sets synchronous_commit
-- = on for its own transaction with set_config(..., true): a function's own SET clause
-- would be undone when it returns, before the commit.
--
-- Changing a function (docs/development.md, "The schema"):
-- - Any change here is a new schema version (a migration, if only its version bump): an
--   upgrade runs only on a database older than pglock, so one already at this version
--   would keep the old body. A test compares a new schema with the released one.
-- - CREATE OR REPLACE keeps a function's grants, and replaces its body, volatility and
--   settings. It cannot change its return type (for RETURNS TABLE: the columns' names
--   and types), rename a parameter or drop a default; other parameter types make a
--   second function beside the first. Such a change needs a migration that drops the old
--   signature first (DROP FUNCTION IF EXISTS: a database older than the function never
--   had it); the grants go with it (operators run `pglock init --print-grants` again),
--   and the REVOKE below and pglock/operate/roles.py name the new one.
-- - A signature is also a promise to an older pglock still running through an upgrade:
--   a holder that started before it calls start_run, renew, release, finish, note and
--   holds by their old signatures until it ends. Only acquire, which starts a run, may
--   change its own (an older pglock that finds none of its signature finds the schema
--   newer than itself and refuses).
-- - A function no longer wanted: dropped by a migration, deleted here.

-- advisory_key: the advisory-lock key of a job.
-- pglock/db/keys.py's (the first 8 bytes of sha256("pglock:" + schema + ":" + job)),
-- computed here so that no caller can claim to hold the session lock of a job by naming
-- another key.
CREATE OR REPLACE FUNCTION {schema}.advisory_key(p_job text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || left(encode(sha256(convert_to(
        'pglock:' || replace(replace({schema_name}, '\', '\\'), ':', '\:') || ':' || p_job,
        'UTF8')), 'hex'), 16))::bit(64)::bigint
$$;

-- session_holds: whether the caller's own backend holds the job's advisory lock.
CREATE OR REPLACE FUNCTION {schema}.session_holds(p_job text) RETURNS boolean
LANGUAGE sql STABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks
        WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = pg_backend_pid()
          AND ((classid::bigint << 32) | objid::bigint) = {schema}.advisory_key(p_job)
          AND database = (SELECT oid FROM pg_catalog.pg_database
                          WHERE datname = current_database()))
$$;

-- incarnation: which server answers, in which life of its lock table; what an advisory
-- lock row records (docs/advisory.md, "Restarts and failovers"). Advisory locks live in
-- the server's shared memory: they are all gone when the postmaster restarts (a stop and
-- start, an immediate stop and crash recovery), when it reinitializes shared memory after
-- a backend crashed (restart_after_crash: the postmaster, and its start time, stay), and
-- on another server (a promoted standby). Three values, read from memory, cheap inside
-- the acquire statement (tens of microseconds):
-- - the timeline of the WAL being written: a promotion always starts a new one (the
--   checkpoint's timeline, pg_control_checkpoint(), lags a fast promotion);
-- - pg_postmaster_start_time(): every postmaster start, and no two servers alike;
-- - the shared statistics' reset time: shared memory reinitialized after a crash
--   discards the statistics and stamps it anew, which the start time misses. An
--   operator's pg_stat_reset_shared() changes it too: then advisory rows are leases
--   until their holders' next renewal (seconds), which is safe.
-- The system identifier is left out: a standby shares its primary's.
CREATE OR REPLACE FUNCTION {schema}.incarnation() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT left(pg_walfile_name(pg_current_wal_lsn()), 8)
        || '/' || extract(epoch FROM pg_postmaster_start_time())::text
        || '/' || coalesce(extract(epoch FROM pg_stat_get_bgwriter_stat_reset_time())::text, '')
$$;

-- timeline: the WAL timeline this primary writes; a promotion always starts a new one.
CREATE OR REPLACE FUNCTION {schema}.timeline() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint
$$;

-- sighting: this timeline, when a pglock first saw it (recorded now if nobody had: one row
-- per timeline, conflict-free), whether the schema saw an earlier one (a promotion since
-- its creation), the longest ttl granted on this timeline so far, the schema's first
-- timeline (that of a row an older pglock wrote with none), and the longest granted
-- on the newest earlier one (what a job with no row waits for after a promotion: a lost
-- first acquisition's ttl cannot be read, only the longest the old primary had
-- replicated; docs/ha.md, "One ttl per job"). Called by acquire with synchronous_commit
-- on: the sighting is durable before any lock is taken under it; and by a holder's renew,
-- finish or release that finds its row of an older timeline, so that the wait after a
-- promotion counts from the first statement of any pglock on the new primary.
CREATE OR REPLACE FUNCTION {schema}.sighting()
RETURNS TABLE (timeline bigint, first_seen timestamptz, promoted boolean,
               longest_ttl interval, prior_longest_ttl interval, first_timeline bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_timeline bigint := {schema}.timeline();
    v_seen record;
BEGIN
    SELECT t.first_seen, t.longest_ttl INTO v_seen FROM {schema}.timelines t
    WHERE t.timeline = v_timeline;
    IF v_seen.first_seen IS NULL THEN
        INSERT INTO {schema}.timelines (timeline, first_seen)
        VALUES (v_timeline, clock_timestamp()) ON CONFLICT DO NOTHING;
        SELECT t.first_seen, t.longest_ttl INTO v_seen FROM {schema}.timelines t
        WHERE t.timeline = v_timeline;
    END IF;
    RETURN QUERY SELECT v_timeline, v_seen.first_seen, p.timeline IS NOT NULL,
                        v_seen.longest_ttl, p.longest_ttl,
                        (SELECT min(t.timeline) FROM {schema}.timelines t)
    FROM (SELECT 1) one LEFT JOIN LATERAL (
        SELECT t.timeline, t.longest_ttl FROM {schema}.timelines t
        WHERE t.timeline < v_timeline ORDER BY t.timeline DESC LIMIT 1) p ON true;
END
$$;

-- granted: a ttl this timeline has just granted, kept as its longest when it is longer
-- (written only then: rarely). Never lowered, so a write lost in a failover can only lose
-- the newest raise.
CREATE OR REPLACE FUNCTION {schema}.granted(p_timeline bigint, p_ttl interval)
RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {schema}.timelines SET longest_ttl = p_ttl
    WHERE timeline = p_timeline AND (longest_ttl IS NULL OR longest_ttl < p_ttl);
$$;

-- keeps: whether a holder may go on under its own row (renew it, keep it for another
-- attempt, start an attempt under it, fence a write with it). On the current timeline,
-- always: a takeover would have changed the holder id. On an older one, only until the
-- row's holder would have stopped its command (stops_by, else the expiry): past that, the
-- old primary may have let another host take the row, in a write lost with it, whose
-- holder still runs (docs/ha.md, "Asynchronous replication"). This compares the old
-- primary's timestamps with this server's clock; pglock itself also acts on a
-- confirmation only when its answer came before its previous local deadline, which
-- needs no clock of the servers at all (docs/ha.md, "Late answers").
CREATE OR REPLACE FUNCTION {schema}.keeps(p_timeline bigint, p_expires timestamptz,
                                          p_stops_by timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    -- A row with no timeline (an older pglock's write through an upgrade) is of the
    -- schema's first one.
    SELECT coalesce(p_timeline, (SELECT min(t.timeline) FROM {schema}.timelines t), 0)
               >= {schema}.timeline()
        OR coalesce(p_stops_by, p_expires) > clock_timestamp()
$$;

-- evict: end the session of an advisory holder that is stopped or cut off (a Ctrl-Z, a
-- debugger, a frozen VM whose kernel still answers keepalives), so that the job can be
-- taken over: only when its row, stamped by this server in this life of its lock table,
-- is past the horizon by which its holder has stopped its command (stops_by: its
-- watchdog's deadline has passed), and its recorded backend still holds the session
-- lock. False when there is nobody to evict, or the schema's owner may not end that
-- backend (it lacks pg_signal_backend: pglock doctor says so); the contender then skips.
CREATE OR REPLACE FUNCTION {schema}.evict(p_job text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_pid integer;
BEGIN
    SELECT l.backend_pid INTO v_pid FROM {schema}.locks l
    WHERE l.job = p_job AND l.mode = 'advisory' AND l.released_at IS NULL
      AND l.cleared_at IS NULL AND l.stops_by <= clock_timestamp()
      AND l.incarnation = {schema}.incarnation()
      AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks k
                  WHERE k.locktype = 'advisory' AND k.objsubid = 1 AND k.granted
                    AND k.pid = l.backend_pid
                    AND ((k.classid::bigint << 32) | k.objid::bigint)
                        = {schema}.advisory_key(p_job)
                    AND k.database = (SELECT oid FROM pg_catalog.pg_database
                                      WHERE datname = current_database()));
    IF v_pid IS NULL OR v_pid = pg_backend_pid() THEN
        RETURN false;
    END IF;
    RETURN pg_terminate_backend(v_pid, 1000);
EXCEPTION WHEN insufficient_privilege THEN
    RETURN false;
END
$$;

-- next_token: the fencing token after p_previous (NULL: none yet) on timeline p_timeline.
-- The timeline minus one is in the high 32 bits: every token handed out on a timeline is
-- above every token of an earlier one, even one whose write was lost with its primary
-- (as long as a job takes fewer than 2^32 tokens on one timeline). On timeline 1 the
-- tokens are 1, 2, 3...; tokens from before version 7 stay valid, and lower.
CREATE OR REPLACE FUNCTION {schema}.next_token(p_previous bigint, p_timeline bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT greatest(coalesce(p_previous, 0) + 1, ((p_timeline - 1) << 32) + 1)
$$;

-- advisory_horizon: how long after a confirmed check an advisory holder with this ttl
-- has certainly stopped its command if it hears nothing more: pglock/lock/advisory.py's
-- horizon(), min(ttl, keepalive idle + 3) with idle = max(3, round(ttl / 4)), rounding
-- half up where Python rounds half to even (never earlier: a test compares the two).
CREATE OR REPLACE FUNCTION {schema}.advisory_horizon(p_ttl interval) RETURNS interval
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
    SELECT least(p_ttl, make_interval(
        secs => greatest(3, round(extract(epoch FROM p_ttl) / 4)) + 3))
$$;

-- record_start: a run's start record, and any run its vanished predecessor left as
-- abandoned. Called by acquire and start_run once the caller's claim is known to hold
-- the lock or a seat. Any other run of the job still marked running (for a seat's
-- holder: of that seat, or the lock's) belongs to a holder that vanished. A slot's
-- attempt is one more on its row, which its CHECK keeps within the limit; a slot that
-- succeeded, or that an attempt closed, is pushed past the limit instead, so that its
-- start fails in the same way (check_violation; unique_violation from a racing start).
-- Never below the caller's own number (version 8): a holder that kept its lock across an
-- asynchronous failover knows of an attempt whose start the old primary took with it,
-- and counting from the row would run that attempt again, one more than --retries. (A
-- new row is attempt 1 whatever the caller says: the first attempt's start commits with
-- the lock, so a holder whose slot row was lost has lost its lock too; and the CHECK
-- applies to the row proposed, before the conflict, whose limit a replay may have
-- raised on the existing one.) p_late: why the run starts late (version 9:
-- 'promotion_wait', it waited out the wait after a promotion), shown by history. A traced
-- run's trace and span ids go on the row (version 9; NULL: not traced). Candidates
-- (version 9): the rank of the winner in its slot's turns goes on the row (a further
-- attempt, which start_run starts without one, keeps its claim's first), and the job's
-- candidates and step on the job's (a further attempt leaves them).
CREATE OR REPLACE FUNCTION {schema}.record_start(
    p_job text, p_slot timestamptz, p_mode text, p_holder text, p_holder_pid integer,
    p_holder_id text, p_fencing_token bigint, p_command text, p_schedule text,
    p_timezone text, p_next_slot timestamptz, p_grace interval, p_retries integer,
    p_attempt integer, p_late text, p_trace_id text, p_span_id text,
    p_rank integer DEFAULT NULL, p_candidates integer DEFAULT NULL,
    p_step interval DEFAULT NULL)
RETURNS TABLE (run_id bigint, started_at timestamptz, attempt integer, attempt_limit integer)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
WITH claim AS (
    SELECT seat FROM {schema}.seats WHERE job = p_job AND holder_id = p_holder_id
), abandoned AS (
    UPDATE {schema}.runs r
    SET outcome = 'abandoned', finished_at = clock_timestamp(),
        duration = clock_timestamp() - r.started_at,
        -- A token of a later timeline (its high bits: next_token) abandons a run of an
        -- earlier one: a promotion came between, and may have lost the run's end.
        error = CASE WHEN (p_fencing_token >> 32) > (coalesce(r.fencing_token, 0) >> 32)
                     THEN 'its end may have been lost in a failover: it started before '
                          'a promotion, and no end was recorded after it'
                     ELSE 'its holder vanished without recording an end' END
    WHERE r.job = p_job AND r.outcome = 'running'
      -- A seat's run abandons only its seat's (and a lock's, which is free).
      AND (r.seat IS NULL OR r.seat IS NOT DISTINCT FROM (SELECT seat FROM claim)
           OR NOT EXISTS (SELECT 1 FROM claim))
    RETURNING r.id, r.finished_at, r.duration
), opened AS (
    INSERT INTO {schema}.slots AS s (job, slot, attempts, attempt_limit, retries)
    SELECT p_job, p_slot, 1, 1 + p_retries, p_retries
    WHERE p_slot IS NOT NULL
    ON CONFLICT (job, slot) DO UPDATE SET attempts = CASE
        WHEN s.succeeded_run_id IS NULL AND s.closed_at IS NULL
            THEN greatest(s.attempts + 1, p_attempt)
        ELSE s.attempt_limit + 1 END
    RETURNING attempts, attempt_limit
), started AS (
    INSERT INTO {schema}.runs
        (job, slot, mode, holder, holder_pid, fencing_token, command, started_at, outcome,
         attempt, manual, claim_digest, seat, late_reason, trace_id, span_id,
         candidate_rank)
    SELECT p_job, p_slot, p_mode, p_holder, p_holder_pid, p_fencing_token,
           p_command, clock_timestamp(), 'running',
           coalesce((SELECT attempts FROM opened), p_attempt),
           p_slot IS NULL AND EXISTS (
               SELECT 1 FROM {schema}.jobs WHERE job = p_job AND schedule IS NOT NULL),
           sha256(convert_to(p_holder_id, 'UTF8')), (SELECT seat FROM claim), p_late,
           p_trace_id, p_span_id,
           CASE WHEN p_rank IS NOT NULL OR p_attempt <= 1 THEN p_rank
                ELSE (SELECT r.candidate_rank FROM {schema}.runs r
                      WHERE r.job = p_job AND r.fencing_token = p_fencing_token
                        AND r.claim_digest = sha256(convert_to(p_holder_id, 'UTF8'))
                      ORDER BY r.id LIMIT 1) END
    RETURNING id, started_at, attempt,
              coalesce((SELECT attempt_limit FROM opened), 1 + p_retries) AS limit_
), latest_abandoned AS (
    SELECT * FROM abandoned ORDER BY id DESC LIMIT 1
), summary AS (
    INSERT INTO {schema}.jobs AS j
        (job, mode, schedule, timezone, last_slot, next_slot, grace, last_run_id,
         last_started_at, last_holder, last_finished_run_id, last_finished_at, last_outcome,
         last_duration, outcome_counts, consecutive_failures, last_attempt, attempt_limit,
         candidates, candidate_step)
    SELECT p_job, p_mode, p_schedule, p_timezone, p_slot, p_next_slot, p_grace,
           s.id, s.started_at, p_holder,
           a.id, a.finished_at, CASE WHEN a.id IS NOT NULL THEN 'abandoned' END, a.duration,
           CASE WHEN a.id IS NOT NULL
                THEN jsonb_build_object('abandoned', (SELECT count(*) FROM abandoned))
                ELSE '{{}}' END,
           (SELECT count(*) FROM abandoned), s.attempt, s.limit_, p_candidates, p_step
    FROM started s LEFT JOIN latest_abandoned a ON true
    ON CONFLICT (job) DO UPDATE SET
        mode = excluded.mode,
        candidates = CASE WHEN p_attempt > 1 AND excluded.candidates IS NULL
                          THEN j.candidates ELSE excluded.candidates END,
        candidate_step = CASE WHEN p_attempt > 1 AND excluded.candidates IS NULL
                              THEN j.candidate_step ELSE excluded.candidate_step END,
        -- A run without --schedule (by hand) leaves the job's schedule and slots alone.
        schedule = CASE WHEN excluded.last_slot IS NULL THEN j.schedule
                        ELSE excluded.schedule END,
        timezone = CASE WHEN excluded.last_slot IS NULL THEN j.timezone
                        ELSE excluded.timezone END,
        -- A run of an older slot that got the lock late (--wait) must not move the slots
        -- back, unless the schedule itself changed.
        last_slot = CASE WHEN excluded.last_slot IS NULL THEN j.last_slot
                         WHEN excluded.last_slot < j.last_slot
                          AND (j.schedule, j.timezone) = (excluded.schedule, excluded.timezone)
                         THEN j.last_slot ELSE excluded.last_slot END,
        next_slot = CASE WHEN excluded.last_slot IS NULL THEN j.next_slot
                         WHEN excluded.last_slot < j.last_slot
                          AND (j.schedule, j.timezone) = (excluded.schedule, excluded.timezone)
                         THEN j.next_slot ELSE excluded.next_slot END,
        grace = CASE WHEN excluded.last_slot IS NULL THEN j.grace ELSE excluded.grace END,
        forgotten_at = NULL,
        last_attempt = excluded.last_attempt, attempt_limit = excluded.attempt_limit,
        consecutive_failures = j.consecutive_failures + (SELECT count(*) FROM abandoned),
        last_run_id = excluded.last_run_id, last_started_at = excluded.last_started_at,
        last_holder = excluded.last_holder,
        last_finished_run_id = coalesce(excluded.last_finished_run_id, j.last_finished_run_id),
        last_finished_at = coalesce(excluded.last_finished_at, j.last_finished_at),
        last_outcome = coalesce(excluded.last_outcome, j.last_outcome),
        last_exit_code = CASE WHEN excluded.last_finished_run_id IS NOT NULL THEN NULL
                              ELSE j.last_exit_code END,
        last_duration = coalesce(excluded.last_duration, j.last_duration),
        outcome_counts = CASE WHEN excluded.last_finished_run_id IS NULL THEN j.outcome_counts
            ELSE j.outcome_counts || jsonb_build_object('abandoned',
                coalesce((j.outcome_counts ->> 'abandoned')::bigint, 0)
                + (SELECT count(*) FROM abandoned)) END
)
SELECT id, started_at, attempt, limit_ FROM started
$$;

-- attend: the census (docs/operators.md, "The census"): this host attempted the job, and
-- how the attempt came out (won: it ran; else the slot was done, the job paused, or the
-- lock held; p_standby: it was not among the slot's candidates and only asked for the
-- job's roster, members()). Called by acquire once the outcome is known, inside its
-- statement: a loser still sends one. The attempt is rewritten at most once a minute of
-- the database's clock (a winner that lost earlier in the same minute, with --wait,
-- records that it ran), in an unlogged table: no WAL. The host's row (logged) is read
-- only when the attempt was written, and written only when the host is new, its versions
-- changed, or it attempted this job a second time (the job joins those it attends). An
-- unnamed host (NULL, as a pglock of an older version sends none) is none. p_due: a host
-- that contends only in its turns (--candidates) is seen again within it (NULL: at every
-- trigger); a host seen again is back in the job's roster if it had passed its turn.
CREATE OR REPLACE FUNCTION {schema}.attend(
    p_host text, p_pglock text, p_python text, p_job text, p_slot timestamptz,
    p_ttl interval, p_won boolean, p_slot_ran boolean, p_paused boolean,
    p_due interval DEFAULT NULL, p_standby boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_minute timestamptz := date_trunc('minute', clock_timestamp());
    v_outcome text := CASE WHEN p_won THEN 'ran' WHEN p_slot_ran THEN 'slot_done'
                           WHEN p_paused THEN 'paused' WHEN p_standby THEN 'standby'
                           ELSE 'held' END;
    v_gaps integer;
    v_host record;
BEGIN
    IF p_host IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO {schema}.attendance AS a
        (job, host, first_attempt, ttl, outcome, last_attempt, slot, due, roster_key)
    VALUES (p_job, p_host, v_now, p_ttl, v_outcome, v_now, p_slot, p_due,
            {schema}.roster_key(p_job, p_host))
    ON CONFLICT (job, host) DO UPDATE SET
        ttl = excluded.ttl, outcome = excluded.outcome, last_attempt = excluded.last_attempt,
        slot = excluded.slot, due = excluded.due,
        -- The seconds since the last recorded attempt, the newest last (5 kept); not for
        -- a win recorded in the minute of its own earlier try.
        gaps = CASE WHEN date_trunc('minute', a.last_attempt) < v_minute
                    THEN (a.gaps || round(extract(epoch FROM v_now - a.last_attempt))::int)
                         [greatest(1, cardinality(a.gaps) - 3):]
                    ELSE a.gaps END
    WHERE date_trunc('minute', a.last_attempt) < v_minute OR (p_won AND a.outcome <> 'ran')
          -- Seen again after passing its turn: back in the roster at once; a promise that
          -- changed (the host's options did) counts at once too.
          OR a.passed_at >= a.last_attempt OR a.due IS DISTINCT FROM excluded.due
    RETURNING cardinality(a.gaps) INTO v_gaps;
    IF v_gaps IS NULL THEN
        -- Recorded already this minute.
        RETURN;
    END IF;
    SELECT h.version, h.python, p_job = ANY(h.jobs) AS attends INTO v_host
    FROM {schema}.hosts h WHERE h.host = p_host;
    IF NOT FOUND THEN
        INSERT INTO {schema}.hosts (host, first_seen, version, python)
        VALUES (p_host, v_now, p_pglock, p_python) ON CONFLICT (host) DO NOTHING;
    ELSIF (v_host.version, v_host.python) IS DISTINCT FROM (p_pglock, p_python)
          OR (v_gaps > 0 AND NOT v_host.attends) THEN
        UPDATE {schema}.hosts SET version = p_pglock, python = p_python,
            jobs = CASE WHEN v_gaps > 0 AND NOT p_job = ANY(jobs) THEN jobs || p_job
                        ELSE jobs END
        WHERE host = p_host;
    END IF;
END
$$;

-- roster_key: where a host stands in a job's roster (roster()): the first 8 bytes of
-- sha256(job, U+001F, host) as a signed bigint. Any order that is the same on every
-- server and spread across hosts would do; this one is FIPS-safe and stable across
-- PostgreSQL versions.
CREATE OR REPLACE FUNCTION {schema}.roster_key(p_job text, p_host text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || left(encode(sha256(convert_to(p_job || chr(31) || p_host, 'UTF8')),
                               'hex'), 16))::bit(64)::bigint
$$;

-- roster: the hosts a slot of the job is ranked over (docs/fleet.md, "Candidates"): those
-- of its census seen lately (within twice their promise, p_due, for a host that contends
-- only in its turns; else twice their usual interval, at least 2 minutes), that have not
-- passed a turn since, and not forgotten; at most p_size of them, the first by
-- roster_key (an index range read: the cost of a refresh does not grow with the fleet).
-- The ranking itself, a rendezvous hash of (job, slot, host), is the client's
-- (pglock/lock/candidates.py).
CREATE OR REPLACE FUNCTION {schema}.roster(p_job text, p_size integer) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(array_agg(r.host ORDER BY r.roster_key, r.host), '{{}}')
    FROM (SELECT a.host, a.roster_key FROM {schema}.attendance a
          WHERE a.job = p_job
            AND (a.passed_at IS NULL OR a.passed_at < a.last_attempt)
            AND a.last_attempt >= clock_timestamp() - CASE
                WHEN a.due IS NOT NULL THEN 2 * a.due
                ELSE greatest(interval '2 minutes',
                              2 * (SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY g)
                                   FROM unnest(a.gaps) g) * interval '1 second') END
          ORDER BY a.roster_key, a.host
          LIMIT p_size) r
$$;

-- members: a host that contends only in its turns and has not connected for a while
-- (--candidates-refresh) asks for the rosters of its jobs, in one statement: each job's
-- attendance is recorded (standby, with its promise) and its roster returned. It acts
-- only when the caller's version is the schema's (as acquire: the version alone
-- otherwise).
CREATE OR REPLACE FUNCTION {schema}.members(
    p_version integer, p_host text, p_pglock text, p_python text, p_jobs text[],
    p_slots timestamptz[], p_ttls interval[], p_dues interval[], p_sizes integer[])
RETURNS TABLE (schema_version integer, job text, roster text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_index integer;
BEGIN
    SELECT value::integer INTO schema_version FROM {schema}.meta WHERE key = 'version';
    IF schema_version IS DISTINCT FROM p_version THEN
        RETURN NEXT;
        RETURN;
    END IF;
    FOR v_index IN 1 .. coalesce(cardinality(p_jobs), 0) LOOP
        job := p_jobs[v_index];
        PERFORM {schema}.attend(p_host, p_pglock, p_python, job, p_slots[v_index],
                                p_ttls[v_index], false, false, false, p_dues[v_index],
                                true);
        roster := {schema}.roster(job, p_sizes[v_index]);
        RETURN NEXT;
    END LOOP;
END
$$;

-- takeable: whether a contender may take the job's lock row over, by the rules of
-- docs/lease.md, the wait after a promotion aside: the row has expired, or is the
-- caller's own (an acquire sent again), or (advisory) its holder provably lost its
-- session and has stopped its command, or it is released and in its hold for a contender
-- that waited for this holder (or an earlier one) or a deliberate rerun. acquire's
-- takeover, and its telling whether the wait alone refused one.
CREATE OR REPLACE FUNCTION {schema}.takeable(
    l {schema}.locks, p_holder_id text, p_mode text, p_incarnation text, p_rerun boolean,
    p_handover_from bigint)
RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT l.expires_at <= clock_timestamp() OR l.holder_id = p_holder_id
        -- Holding the advisory lock proves an unreleased advisory row's holder has lost
        -- its session, on the server (and in the life of its lock table) that granted
        -- and last confirmed it; the row is taken once that holder has stopped its
        -- command too (stops_by: docs/advisory.md, "The lock-delay"). Stamped by any
        -- other server, the row is a lease: its holder may be alive, reconnecting to
        -- take its session lock back (retake).
        OR (p_mode = 'advisory' AND l.mode = 'advisory' AND l.cleared_at IS NULL
            AND l.released_at IS NULL AND l.incarnation = p_incarnation
            AND coalesce(l.stops_by, l.expires_at) <= clock_timestamp())
        -- Released but in its hold: only a handover to a contender that waited for this
        -- holder (or an earlier one), or a deliberate rerun.
        OR (l.released_at IS NOT NULL AND (p_rerun OR l.fencing_token >= p_handover_from))
$$;

-- seat_takeable: takeable, for a semaphore's seat (any waiter may take a seat in its hold).
CREATE OR REPLACE FUNCTION {schema}.seat_takeable(
    s {schema}.seats, p_holder_id text, p_rerun boolean, p_handover_from bigint)
RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.expires_at <= clock_timestamp() OR s.holder_id = p_holder_id
        OR (s.released_at IS NOT NULL AND (p_rerun OR p_handover_from IS NOT NULL))
$$;

-- take: an advisory contender's first statement (a loser sends no other): the job's
-- session lock, tried without waiting, on the caller's session, which must then stay
-- the holder's own. Session locks stack: one this session holds already (a holder's own
-- statement sent again) is not taken twice. A holder stopped or cut off past its
-- horizon, whose session lives on, is ended first (evict), so that its job is taken over
-- (version 9). A loser records its host's attempt in the census (attend), as acquire
-- does (p_due: as acquire's). It acts only when the caller's version is the schema's (as
-- acquire).
CREATE OR REPLACE FUNCTION {schema}.take(
    p_version integer, p_job text, p_slot timestamptz, p_ttl interval, p_host text,
    p_pglock text, p_python text, p_due interval)
RETURNS TABLE (schema_version integer, taken boolean, session_pid integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    SELECT value::integer INTO schema_version FROM {schema}.meta WHERE key = 'version';
    session_pid := pg_backend_pid();
    taken := false;
    IF schema_version IS DISTINCT FROM p_version THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- Nested: the order matters (an expression's parts may be evaluated in any order).
    taken := {schema}.session_holds(p_job);
    IF NOT taken THEN
        taken := pg_try_advisory_lock({schema}.advisory_key(p_job));
        IF NOT taken THEN
            IF {schema}.evict(p_job) THEN
                taken := pg_try_advisory_lock({schema}.advisory_key(p_job));
            END IF;
        END IF;
        IF NOT taken THEN
            -- The census: a loser to another session's lock sends no other statement.
            PERFORM {schema}.attend(p_host, p_pglock, p_python, p_job, p_slot, p_ttl,
                                    false, false, false, p_due);
        END IF;
    END IF;
    RETURN NEXT;
END
$$;

-- acquire: take the job's lock, or with p_limit > 1 the lowest free of its seats, and
-- record the run's start.
-- The rules of docs/lease.md ("Semaphores" for the seats); when taken and p_command is
-- not NULL, the run is recorded as started: one statement for a winner, and for a loser,
-- which learns why it lost and whom it waits for. A slot that is done is done even after
-- its last run released the lock; a paused job (or every job paused, the empty name) is
-- skipped. In advisory mode the caller's session must hold the job's session lock
-- (take), which proves an unreleased advisory row's holder gone. It acts only when the
-- caller's version is the schema's: an older pglock asks for an upgrade, a newer schema
-- refuses an older pglock (it returns the version alone).
-- Schedules, round two (docs/schedules.md): a final loser of a slot (p_final: it will not
-- try again) that finds the lock held by a run of an older slot counts the slot as
-- skipped while running, once per slot however many hosts lose it (was_running says so
-- to each of them). A winner given catch-up candidates (p_backlog, oldest first) learns
-- which have no run yet since the job's last slot (missed_slots) and that slot
-- (prior_slot); it then records no start of its own slot, whose run comes after them.
-- Slots that went by while the job was paused are not caught up.
-- After a promotion (version 9, docs/ha.md): a loser refused by the wait alone (the row,
-- or its absence, would be taken but for it) learns how long the wait has left
-- (promotion_wait), so that a trigger can wait for it and try once more (p_late then
-- says so on its run). A traced run's trace and span ids (version 9) go on the start it
-- records.
-- The census (version 9): every caller of this version, winner or loser, records its
-- host's attempt (attend), named by p_host, with its pglock and Python versions (an
-- advisory loser, in take).
-- Candidates (version 9, docs/fleet.md "Candidates"): a host that contends only in its
-- turns (p_candidates: K, p_step: the delay between two ranks) records its promise
-- (p_due) with its attempt and learns the job's roster (roster of p_roster hosts), which
-- it ranks its next slots over without connecting; its run records its rank (p_rank).
-- A winner of rank r > 1 names the candidates above it (p_passed): those not seen since
-- the slot's first turn are left out of the roster until they are seen again (a dead
-- first candidate costs one slot one step, not every slot of the roster's lifetime).
CREATE OR REPLACE FUNCTION {schema}.acquire(
    p_version integer, p_job text, p_mode text, p_holder text, p_holder_pid integer,
    p_holder_id text, p_ttl interval, p_slot timestamptz, p_handover_from bigint,
    p_rerun boolean, p_command text, p_schedule text, p_timezone text,
    p_next_slot timestamptz, p_grace interval, p_retries integer, p_attempt integer,
    p_limit integer, p_final boolean, p_backlog timestamptz[], p_windows text[],
    p_late text, p_trace_id text, p_span_id text, p_host text, p_pglock text,
    p_python text, p_candidates integer, p_step interval, p_due interval,
    p_roster integer, p_rank integer, p_passed text[])
RETURNS TABLE (schema_version integer, session_held boolean, slot_ran boolean,
               is_paused boolean, token bigint, first_handover bigint, held_by text,
               run_id bigint, run_started_at timestamptz, run_attempt integer,
               run_attempt_limit integer, seat integer, was_running boolean,
               missed_slots timestamptz[], prior_slot timestamptz,
               promotion_wait interval, roster text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_version integer;
    v_held boolean := p_mode = 'lease';
    v_tried boolean := false;
    v_seat integer;
    v_own integer;
    v_incarnation text;
    v_timeline record;
    -- A job (or seat) with no row waits out a promotion's window too (docs/ha.md), for
    -- the longest ttl the newest earlier timeline granted, or the contender's own.
    v_no_row_ttl interval;
    v_no_row_waits boolean;
    v_wait_until timestamptz;
BEGIN
    SELECT value::integer INTO v_version FROM {schema}.meta WHERE key = 'version';
    schema_version := v_version;
    IF v_version IS DISTINCT FROM p_version THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- A slot more than a minute ahead of this server's clock (lease.AHEAD_ALLOWED): the
    -- caller's clock runs fast, and the slot's time has not come. Nothing is taken nor
    -- recorded (a recorded start would spend the slot before its time): the caller says
    -- so, and the slot's own trigger runs it (docs/schedules.md, "The slot").
    IF p_slot > clock_timestamp() + interval '60 seconds' THEN
        RAISE EXCEPTION 'slot % is ahead of the database''s clock', p_slot
            USING ERRCODE = 'PGL01',
                  DETAIL = extract(epoch FROM p_slot - clock_timestamp())::text;
    END IF;
    IF p_mode = 'advisory' THEN
        v_held := {schema}.session_holds(p_job);
        v_incarnation := {schema}.incarnation();
    END IF;
    session_held := v_held;
    IF NOT v_held THEN
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'on', true);
    -- After a promotion (docs/ha.md, "Asynchronous replication"): a row last written
    -- under an older timeline may hide a holder whose writes the old primary lost, so it
    -- is taken by nobody, its own holder included, until the longest ttl granted for it
    -- (or the contender's, if longer) has passed since this timeline was first seen;
    -- that holder stops by then. A job with no row waits as long (a lost first
    -- acquisition leaves none), unless the schema never saw a promotion. On the first
    -- timeline, and after a restart, nothing waits.
    SELECT * INTO v_timeline FROM {schema}.sighting();
    v_no_row_ttl := greatest(p_ttl, v_timeline.prior_longest_ttl);
    v_no_row_waits := v_timeline.promoted
                      AND clock_timestamp() < v_timeline.first_seen + v_no_row_ttl;
    -- A run without an attempt number is an older pglock's: for those, one run per slot.
    slot_ran := p_slot IS NOT NULL AND (
        EXISTS (SELECT 1 FROM {schema}.slots WHERE job = p_job AND slot = p_slot
                AND (succeeded_run_id IS NOT NULL OR closed_at IS NOT NULL
                     OR attempts >= attempt_limit))
        OR EXISTS (SELECT 1 FROM {schema}.runs WHERE job = p_job AND slot = p_slot
                   AND attempt IS NULL));
    is_paused := EXISTS (SELECT 1 FROM {schema}.pauses WHERE job IN (p_job, '')
                         AND (until IS NULL OR until > clock_timestamp()));
    IF NOT slot_ran AND NOT is_paused AND p_limit > 1 THEN
        -- A semaphore: the lowest seat free (or expired, or in its hold for a
        -- contender that waited or a rerun), while no plain lock of the job is held.
        -- Contenders try the seats in the same order, so they queue on a row each.
        IF NOT EXISTS (SELECT 1 FROM {schema}.locks WHERE job = p_job
                       AND expires_at > clock_timestamp()) THEN
            v_tried := true;
            -- A claim that holds a seat already (a resent statement) keeps that one.
            SELECT s.seat INTO v_own FROM {schema}.seats s
            WHERE s.job = p_job AND s.holder_id = p_holder_id AND s.cleared_at IS NULL
              AND s.expires_at > clock_timestamp();
            FOR v_seat IN SELECT g FROM generate_series(1, p_limit) g
                          WHERE v_own IS NULL OR g = v_own ORDER BY g LOOP
                INSERT INTO {schema}.seats AS s
                    (job, seat, seat_limit, mode, holder, holder_pid, holder_id,
                     fencing_token, ttl, acquired_at, renewed_at, expires_at, timeline,
                     longest_ttl)
                SELECT p_job, v_seat, p_limit, p_mode, p_holder, p_holder_pid,
                       p_holder_id, {schema}.next_token(NULL, v_timeline.timeline), p_ttl,
                       clock_timestamp(), clock_timestamp(), clock_timestamp() + p_ttl,
                       v_timeline.timeline, p_ttl
                WHERE NOT v_no_row_waits OR EXISTS (
                    SELECT 1 FROM {schema}.seats WHERE job = p_job AND seat = v_seat)
                ON CONFLICT (job, seat) DO UPDATE SET
                    seat_limit = excluded.seat_limit, mode = excluded.mode,
                    holder = excluded.holder, holder_pid = excluded.holder_pid,
                    holder_id = excluded.holder_id,
                    fencing_token = {schema}.next_token(s.fencing_token, excluded.timeline),
                    ttl = excluded.ttl, acquired_at = excluded.acquired_at,
                    renewed_at = excluded.renewed_at, expires_at = excluded.expires_at,
                    released_at = NULL, cleared_at = NULL, cleared_by = NULL,
                    stop_requested_at = NULL, stop_requested_by = NULL,
                    stop_reason = NULL, timeline = excluded.timeline,
                    longest_ttl = CASE WHEN coalesce(s.timeline, 0) >= excluded.timeline
                                       THEN greatest(s.longest_ttl, s.ttl, excluded.ttl)
                                       ELSE excluded.ttl END
                WHERE {schema}.seat_takeable(s, p_holder_id, p_rerun, p_handover_from)
                  -- A seat from before a promotion: as the lock below.
                  AND (coalesce(s.timeline, v_timeline.first_timeline) >= excluded.timeline
                       OR clock_timestamp() >= v_timeline.first_seen
                                               + greatest(s.longest_ttl, s.ttl, p_ttl))
                RETURNING s.fencing_token INTO token;
                IF token IS NOT NULL THEN
                    seat := v_seat;
                    EXIT;
                END IF;
            END LOOP;
        END IF;
        IF token IS NULL THEN
            PERFORM {schema}.attend(p_host, p_pglock, p_python, p_job, p_slot, p_ttl,
                                    false, false, false, p_due);
            IF p_roster IS NOT NULL THEN
                roster := {schema}.roster(p_job, p_roster);
            END IF;
            -- Any value lets a waiter take a seat in its hold on its next try.
            first_handover := 0;
            SELECT string_agg(s.holder, ', ' ORDER BY s.seat) INTO held_by
            FROM {schema}.seats s
            WHERE s.job = p_job AND s.expires_at > clock_timestamp();
            IF v_tried THEN
                -- The first seat free but for the wait (none: all held).
                SELECT min(CASE WHEN s.seat IS NULL AND v_no_row_waits
                                THEN v_timeline.first_seen + v_no_row_ttl
                                WHEN coalesce(s.timeline, v_timeline.first_timeline)
                                     < v_timeline.timeline
                                 AND {schema}.seat_takeable(s, p_holder_id, p_rerun,
                                                            p_handover_from)
                                THEN v_timeline.first_seen
                                     + greatest(s.longest_ttl, s.ttl, p_ttl) END)
                INTO v_wait_until
                FROM generate_series(1, p_limit) g
                LEFT JOIN {schema}.seats s ON s.job = p_job AND s.seat = g;
                IF v_wait_until > clock_timestamp() THEN
                    promotion_wait := v_wait_until - clock_timestamp();
                END IF;
            END IF;
            RETURN NEXT;
            RETURN;
        END IF;
    ELSIF NOT slot_ran AND NOT is_paused
          -- A semaphore's seats held: a plain run of the job waits for them.
          AND NOT EXISTS (SELECT 1 FROM {schema}.seats WHERE job = p_job
                           AND expires_at > clock_timestamp()) THEN
        v_tried := true;
        INSERT INTO {schema}.locks AS l
            (job, mode, holder, holder_pid, holder_id, fencing_token, ttl,
             acquired_at, renewed_at, expires_at, backend_pid, incarnation, timeline,
             stops_by, longest_ttl)
        SELECT p_job, p_mode, p_holder, p_holder_pid, p_holder_id,
               {schema}.next_token(NULL, v_timeline.timeline), p_ttl,
               clock_timestamp(), clock_timestamp(), clock_timestamp() + p_ttl,
               CASE WHEN p_mode = 'advisory' THEN pg_backend_pid() END, v_incarnation,
               v_timeline.timeline,
               CASE WHEN p_mode = 'advisory'
                    THEN clock_timestamp() + {schema}.advisory_horizon(p_ttl) END,
               p_ttl
        WHERE NOT v_no_row_waits OR EXISTS (SELECT 1 FROM {schema}.locks WHERE job = p_job)
        ON CONFLICT (job) DO UPDATE SET
            mode = excluded.mode, holder = excluded.holder, holder_pid = excluded.holder_pid,
            holder_id = excluded.holder_id,
            fencing_token = {schema}.next_token(l.fencing_token, excluded.timeline),
            ttl = excluded.ttl, acquired_at = excluded.acquired_at,
            renewed_at = excluded.renewed_at, expires_at = excluded.expires_at,
            released_at = NULL, backend_pid = excluded.backend_pid,
            incarnation = excluded.incarnation, cleared_at = NULL, cleared_by = NULL,
            stop_requested_at = NULL, stop_requested_by = NULL, stop_reason = NULL,
            timeline = excluded.timeline, stops_by = excluded.stops_by,
            -- The longest ttl granted on the row's timeline: what the next promotion waits.
            longest_ttl = CASE WHEN coalesce(l.timeline, 0) >= excluded.timeline
                               THEN greatest(l.longest_ttl, l.ttl, excluded.ttl)
                               ELSE excluded.ttl END
        WHERE {schema}.takeable(l, p_holder_id, p_mode, v_incarnation, p_rerun,
                                p_handover_from)
          -- Last written under an older timeline: nobody before the window's end, its own
          -- holder (an acquire sent again after a cut) neither: whatever its expiry says,
          -- the old primary may have let another host take it over in a write lost with
          -- it, and an old timestamp read on a new clock proves nothing (found by the
          -- model: docs/model.md, mutants RESEND_ANYTIME and RESEND_UNEXPIRED). A row
          -- with no timeline (written by a pglock older than version 7 through an
          -- upgrade) is of the schema's first one.
          AND (coalesce(l.timeline, v_timeline.first_timeline) >= excluded.timeline
               OR clock_timestamp() >= v_timeline.first_seen
                                       + greatest(l.longest_ttl, l.ttl, p_ttl))
        RETURNING l.fencing_token INTO token;
    END IF;
    -- The census: who attempted, and how it came out (a won seat comes here too).
    PERFORM {schema}.attend(p_host, p_pglock, p_python, p_job, p_slot, p_ttl,
                            token IS NOT NULL, slot_ran, is_paused, p_due);
    IF token IS NOT NULL AND cardinality(p_passed) > 0 THEN
        -- Candidates above this winner that were not seen since the slot's first turn
        -- (this winner tries r-1 steps after it; with half a step of slack) passed it: by
        -- the database's clock alone.
        UPDATE {schema}.attendance SET passed_at = clock_timestamp()
        WHERE job = p_job AND host = ANY(p_passed)
          AND last_attempt < clock_timestamp() - (p_rank - 0.5) * p_step;
    END IF;
    IF p_roster IS NOT NULL THEN
        roster := {schema}.roster(p_job, p_roster);
    END IF;
    IF token IS NULL THEN
        -- The first holder a contender that starts waiting now may take over from at its
        -- release: the one running, or (released, in its hold) whoever takes it next.
        SELECT CASE WHEN l.released_at IS NULL THEN l.fencing_token
                    ELSE l.fencing_token + 1 END,
               CASE WHEN l.expires_at > clock_timestamp() THEN l.holder END,
               -- Free but for the wait after a promotion: when the wait ends.
               CASE WHEN v_tried AND p_limit <= 1
                         AND coalesce(l.timeline, v_timeline.first_timeline)
                             < v_timeline.timeline
                         AND {schema}.takeable(l, p_holder_id, p_mode, v_incarnation, p_rerun,
                                               p_handover_from)
                    THEN v_timeline.first_seen + greatest(l.longest_ttl, l.ttl, p_ttl) END
        INTO first_handover, held_by, v_wait_until
        FROM {schema}.locks l WHERE l.job = p_job;
        IF NOT FOUND AND v_tried AND p_limit <= 1 AND v_no_row_waits THEN
            v_wait_until := v_timeline.first_seen + v_no_row_ttl;
        END IF;
        IF v_wait_until > clock_timestamp() THEN
            promotion_wait := v_wait_until - clock_timestamp();
        END IF;
        IF p_slot IS NOT NULL AND NOT slot_ran AND NOT is_paused AND held_by IS NOT NULL THEN
            -- Held by a run of an older slot (or its retries): this slot is skipped while
            -- running. Counted by the first final loser only (the others find the slot
            -- counted, after waiting for its row): one index lookup for the rest.
            -- (Not when the holder catches up before running this very slot: its acquire
            -- opened this slot's row.)
            was_running := EXISTS (SELECT 1 FROM {schema}.jobs
                                   WHERE job = p_job AND last_slot < p_slot)
                AND NOT EXISTS (SELECT 1 FROM {schema}.slots
                                WHERE job = p_job AND slot = p_slot);
            IF was_running AND p_final THEN
                UPDATE {schema}.jobs SET
                    skipped_running = coalesce(skipped_running, 0) + 1,
                    skipped_running_slot = p_slot,
                    skipped_running_streak = coalesce(skipped_running_streak, 0) + 1
                WHERE job = p_job AND last_slot < p_slot
                  AND (skipped_running_slot IS NULL OR skipped_running_slot < p_slot);
            END IF;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_timeline.longest_ttl IS NULL OR v_timeline.longest_ttl < p_ttl THEN
        PERFORM {schema}.granted(v_timeline.timeline, p_ttl);
    END IF;
    IF p_backlog IS NOT NULL THEN
        -- Only against the same schedule: a new expression starts afresh.
        SELECT j.last_slot INTO prior_slot FROM {schema}.jobs j
        WHERE j.job = p_job AND j.schedule = p_schedule AND j.timezone = p_timezone;
        missed_slots := ARRAY(
            SELECT c FROM unnest(p_backlog) c
            WHERE c > prior_slot AND c < p_slot
              AND NOT EXISTS (SELECT 1 FROM {schema}.slots s
                              WHERE s.job = p_job AND s.slot = c AND s.attempts > 0)
              AND NOT EXISTS (SELECT 1 FROM {schema}.runs r
                              WHERE r.job = p_job AND r.slot = c)
              -- Not while paused (an expired pause's row stays), nor before a resume.
              AND NOT EXISTS (SELECT 1 FROM {schema}.pauses p
                              WHERE p.job IN (p_job, '') AND c >= p.paused_at
                                AND (p.until IS NULL OR c < p.until))
              AND c > coalesce((SELECT max(a.at) FROM {schema}.audit a
                                WHERE (a.job = p_job OR a.job IS NULL)
                                  AND a.action = 'resume'), '-infinity')
            ORDER BY c);
        IF cardinality(missed_slots) > 0 THEN
            -- This slot's run comes after the catch-up: its row, opened with the lock,
            -- tells the hosts that lose meanwhile that it is not skipped.
            INSERT INTO {schema}.slots (job, slot, attempts, attempt_limit, retries)
            VALUES (p_job, p_slot, 0, 1 + p_retries, p_retries)
            ON CONFLICT (job, slot) DO NOTHING;
        END IF;
    END IF;
    IF p_command IS NOT NULL AND coalesce(cardinality(missed_slots), 0) = 0 THEN
        SELECT s.run_id, s.started_at, s.attempt, s.attempt_limit
        INTO run_id, run_started_at, run_attempt, run_attempt_limit
        FROM {schema}.record_start(p_job, p_slot, p_mode, p_holder, p_holder_pid,
                                   p_holder_id, token, p_command, p_schedule, p_timezone,
                                   p_next_slot, p_grace, p_retries, p_attempt, p_late,
                                   p_trace_id, p_span_id, p_rank, p_candidates, p_step) s;
    END IF;
    IF p_slot IS NOT NULL THEN
        -- The job's windows as this run gives them (status reads them); written only when
        -- they change.
        UPDATE {schema}.jobs SET windows = p_windows
        WHERE job = p_job AND windows IS DISTINCT FROM p_windows;
    END IF;
    RETURN NEXT;
END
$$;

-- catch_up: what a winner that catches up (--catch-up) records before its first run: the
-- slots it will run, marked caught up (their rows open with no attempt yet, so that
-- history tells them apart), and the slots it gives up, older than its limit or
-- deadline (a count, and the newest of them). Only under the lock the caller holds.
CREATE OR REPLACE FUNCTION {schema}.catch_up(
    p_job text, p_holder_id text, p_fencing_token bigint, p_slots timestamptz[],
    p_retries integer, p_skipped integer, p_skipped_latest timestamptz)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM 1 FROM {schema}.locks
    WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
      AND cleared_at IS NULL AND released_at IS NULL AND expires_at > clock_timestamp()
      AND {schema}.keeps(timeline, expires_at, stops_by);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM set_config('synchronous_commit', 'on', true);
    INSERT INTO {schema}.slots (job, slot, attempts, attempt_limit, retries, caught_up)
    SELECT p_job, c, 0, 1 + p_retries, p_retries, true FROM unnest(p_slots) c
    ON CONFLICT (job, slot) DO UPDATE SET caught_up = true;
    IF p_skipped > 0 THEN
        UPDATE {schema}.jobs SET
            catch_up_skipped = coalesce(catch_up_skipped, 0) + p_skipped,
            catch_up_skipped_slot = greatest(catch_up_skipped_slot, p_skipped_latest)
        WHERE job = p_job;
    END IF;
    RETURN true;
END
$$;

-- start_run: the start of a further attempt (--retries) under a lock or seat the caller
-- still holds. Sent again after a cut (a restart, a failover, a terminated backend), it
-- returns the start that committed unseen: a run of the caller's claim and of this
-- attempt still running is that one (each earlier attempt's end was recorded before it),
-- which a second start record would mark abandoned, spending one of the slot's attempts
-- on nothing. A traced run's trace and span ids (version 9) go on the start.
CREATE OR REPLACE FUNCTION {schema}.start_run(
    p_job text, p_holder_id text, p_fencing_token bigint, p_command text,
    p_slot timestamptz, p_schedule text, p_timezone text, p_next_slot timestamptz,
    p_grace interval, p_retries integer, p_attempt integer, p_trace_id text,
    p_span_id text)
RETURNS TABLE (run_id bigint, started_at timestamptz, attempt integer, attempt_limit integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_lock record;
BEGIN
    SELECT mode, holder, holder_pid INTO v_lock FROM {schema}.locks
    WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
      AND cleared_at IS NULL AND released_at IS NULL AND expires_at > clock_timestamp()
      AND {schema}.keeps(timeline, expires_at, stops_by);
    IF NOT FOUND THEN
        SELECT mode, holder, holder_pid INTO v_lock FROM {schema}.seats
        WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
          AND cleared_at IS NULL AND released_at IS NULL
          AND expires_at > clock_timestamp() AND {schema}.keeps(timeline, expires_at, NULL);
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the lock of this job is no longer held by this run'
            USING ERRCODE = 'P0002';
    END IF;
    RETURN QUERY
        SELECT r.id, r.started_at, r.attempt,
               coalesce((SELECT s.attempt_limit FROM {schema}.slots s
                         WHERE s.job = r.job AND s.slot = r.slot), 1 + p_retries)
        FROM {schema}.runs r
        WHERE r.job = p_job AND r.outcome = 'running' AND r.attempt = p_attempt
          AND r.slot IS NOT DISTINCT FROM p_slot AND r.fencing_token = p_fencing_token
          AND r.claim_digest = sha256(convert_to(p_holder_id, 'UTF8'));
    IF FOUND THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'on', true);
    RETURN QUERY SELECT * FROM {schema}.record_start(
        p_job, p_slot, v_lock.mode, v_lock.holder, v_lock.holder_pid, p_holder_id,
        p_fencing_token, p_command, p_schedule, p_timezone, p_next_slot, p_grace,
        p_retries, p_attempt, NULL, p_trace_id, p_span_id);
END
$$;

-- start_run as version 8 called it, for a pglock of that version whose run goes on
-- through the upgrade to 9: its starts carry no trace.
CREATE OR REPLACE FUNCTION {schema}.start_run(
    p_job text, p_holder_id text, p_fencing_token bigint, p_command text,
    p_slot timestamptz, p_schedule text, p_timezone text, p_next_slot timestamptz,
    p_grace interval, p_retries integer, p_attempt integer)
RETURNS TABLE (run_id bigint, started_at timestamptz, attempt integer, attempt_limit integer)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM {schema}.start_run(p_job, p_holder_id, p_fencing_token, p_command, p_slot,
                                     p_schedule, p_timezone, p_next_slot, p_grace, p_retries,
                                     p_attempt, NULL::text, NULL::text)
$$;

-- renew: push the expiry out by the ttl while the lock or seat is still the caller's.
-- Only while the row still carries the caller's claim and has not been cleared (in
-- advisory mode, only while this very session holds the session lock), and, last written
-- under an older timeline, only while no takeover can have been lost with the old
-- primary (keeps); says whether an operator asked for the command to stop (`pglock
-- stop`). The row keeps the timeline it has (version 9): only an acquisition stamps one,
-- so the wait after a promotion covers a row whose holder carried on, and the first
-- renewal on a new timeline records its sighting.
CREATE OR REPLACE FUNCTION {schema}.renew(
    p_job text, p_holder_id text, p_fencing_token bigint, p_advisory boolean)
RETURNS TABLE (held boolean, renewed boolean, expires timestamptz, stop boolean, why text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_timeline bigint;
BEGIN
    held := NOT p_advisory OR {schema}.session_holds(p_job);
    renewed := false;
    stop := false;
    IF held THEN
        PERFORM set_config('synchronous_commit', 'on', true);
        -- In advisory mode this session holds the lock: on this server, in this life.
        UPDATE {schema}.locks
        SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + ttl,
            incarnation = CASE WHEN p_advisory THEN {schema}.incarnation()
                               ELSE incarnation END,
            stops_by = CASE WHEN p_advisory
                            THEN clock_timestamp() + {schema}.advisory_horizon(ttl) END
        WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
          AND cleared_at IS NULL AND {schema}.keeps(timeline, expires_at, stops_by)
        RETURNING expires_at, stop_requested_at IS NOT NULL,
                  coalesce(stop_reason, 'no reason given') || ' (by ' || stop_requested_by
                  || ')', timeline
        INTO expires, stop, why, v_timeline;
        renewed := FOUND;
        IF NOT renewed THEN
            UPDATE {schema}.seats
            SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + ttl
            WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
              AND cleared_at IS NULL AND {schema}.keeps(timeline, expires_at, NULL)
            RETURNING expires_at, stop_requested_at IS NOT NULL,
                      coalesce(stop_reason, 'no reason given') || ' (by ' || stop_requested_by
                      || ')', timeline
            INTO expires, stop, why, v_timeline;
            renewed := FOUND;
        END IF;
        IF renewed AND coalesce(v_timeline, 0) < {schema}.timeline() THEN
            PERFORM {schema}.sighting();
        END IF;
        stop := coalesce(stop, false);
    END IF;
    RETURN NEXT;
END
$$;

-- retake: an advisory holder whose session ended (a restart, a crash, a failover, a
-- broken connection) takes its session lock back on its new session and renews its row
-- (stamping the incarnation answering now), in one statement. Not taken: a contender's
-- session holds the lock for the moment (it gives it back, finding the row ours), and
-- `renewed` says whether the row is still the caller's (then: try again), or not (lost).
-- A lock taken for a row no longer the caller's is given back at once.
CREATE OR REPLACE FUNCTION {schema}.retake(
    p_job text, p_holder_id text, p_fencing_token bigint)
RETURNS TABLE (taken boolean, held boolean, renewed boolean, expires timestamptz,
               stop boolean, why text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    -- Session locks stack: taken once.
    taken := {schema}.session_holds(p_job)
             OR pg_try_advisory_lock({schema}.advisory_key(p_job));
    IF NOT taken THEN
        held := false;
        renewed := {schema}.holds(p_job, p_holder_id, p_fencing_token);
        stop := false;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT r.held, r.renewed, r.expires, r.stop, r.why INTO held, renewed, expires, stop, why
    FROM {schema}.renew(p_job, p_holder_id, p_fencing_token, true) r;
    IF renewed THEN
        UPDATE {schema}.locks SET backend_pid = pg_backend_pid()
        WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token;
    ELSE
        PERFORM pg_advisory_unlock({schema}.advisory_key(p_job));
    END IF;
    RETURN NEXT;
END
$$;

-- release: let the lock or seat expire now, or at acquisition + p_min_hold if later.
-- With p_close_slot, no further attempt of that slot (an operator's stop between
-- attempts). False: it was no longer the caller's (cleared, or taken over after it
-- expired).
CREATE OR REPLACE FUNCTION {schema}.release(
    p_job text, p_holder_id text, p_fencing_token bigint, p_min_hold interval,
    p_close_slot timestamptz)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_ours boolean;
    v_timeline bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    UPDATE {schema}.locks
    SET expires_at = greatest(clock_timestamp(), acquired_at + p_min_hold),
        released_at = clock_timestamp()
    WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
      AND cleared_at IS NULL
    RETURNING timeline INTO v_timeline;
    v_ours := FOUND;
    IF NOT v_ours THEN
        UPDATE {schema}.seats
        SET expires_at = greatest(clock_timestamp(), acquired_at + p_min_hold),
            released_at = clock_timestamp()
        WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
          AND cleared_at IS NULL
        RETURNING timeline INTO v_timeline;
        v_ours := FOUND;
    END IF;
    IF v_ours AND coalesce(v_timeline, 0) < {schema}.timeline() THEN
        PERFORM {schema}.sighting();
    END IF;
    IF v_ours AND p_close_slot IS NOT NULL THEN
        UPDATE {schema}.slots SET closed_at = clock_timestamp()
        WHERE job = p_job AND slot = p_close_slot AND closed_at IS NULL;
    END IF;
    RETURN v_ours;
END
$$;

-- finish: the end of a run and the release of its lock or seat, in one transaction.
-- Nobody sees the lock free before the run has ended. With p_keep, the lock is renewed
-- for the next attempt instead, unless an operator asked for a stop (then it goes at once
-- and the slot closes), or the row, last written under an older timeline, is past the
-- moment its holder stops by (keeps: then it is released, and the retry is left to the
-- next trigger). A release that finds the lock no longer the caller's records the
-- run as lock_lost. A run marked abandoned by a takeover may still finish and tell the
-- truth; its abandoned count is then taken back. Only the newest finished run sets the
-- summary's last_*. It returns the job's last outcome as it was before, so a recovery is
-- known at once.
CREATE OR REPLACE FUNCTION {schema}.finish(
    p_run_id bigint, p_job text, p_holder_id text, p_fencing_token bigint,
    p_min_hold interval, p_keep boolean, p_duration interval, p_exit_code integer,
    p_signal integer, p_outcome text, p_error text, p_output_tail bytea, p_closes boolean,
    p_hopeless boolean, p_error_line text, p_lost_error text, p_lost_error_line text,
    p_expected text DEFAULT NULL)
RETURNS TABLE (ours boolean, kept boolean, recorded boolean, previous_outcome text,
               newest boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_stop boolean := false;
    v_outcome text := p_outcome;
    v_error text := p_error;
    v_closes boolean := p_closes;
    v_hopeless boolean := p_hopeless;
    v_error_line text := p_error_line;
    v_timeline bigint;
    -- The duration histogram's bounds (seconds; migration 006).
    v_bounds float8[] := (SELECT value::float8[] FROM {schema}.meta
                          WHERE key = 'duration_bounds');
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    kept := false;
    IF p_keep THEN
        UPDATE {schema}.locks
        SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + ttl,
            stops_by = CASE WHEN mode = 'advisory'
                            THEN clock_timestamp() + {schema}.advisory_horizon(ttl) END
        WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
          AND cleared_at IS NULL AND {schema}.keeps(timeline, expires_at, stops_by)
        RETURNING stop_requested_at IS NOT NULL, timeline INTO v_stop, v_timeline;
        ours := FOUND;
        IF NOT ours THEN
            UPDATE {schema}.seats
            SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + ttl
            WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
              AND cleared_at IS NULL AND {schema}.keeps(timeline, expires_at, NULL)
            RETURNING stop_requested_at IS NOT NULL, timeline INTO v_stop, v_timeline;
            ours := FOUND;
        END IF;
        kept := ours AND NOT v_stop;
    END IF;
    -- Not kept: released (a row past keeps() too, which is still the caller's).
    IF NOT kept THEN
        UPDATE {schema}.locks
        SET expires_at = greatest(clock_timestamp(),
                                  acquired_at + CASE WHEN v_stop THEN interval '0'
                                                     ELSE p_min_hold END),
            released_at = clock_timestamp()
        WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
          AND cleared_at IS NULL
        RETURNING timeline INTO v_timeline;
        ours := FOUND;
        IF NOT ours THEN
            UPDATE {schema}.seats
            SET expires_at = greatest(clock_timestamp(),
                                      acquired_at + CASE WHEN v_stop THEN interval '0'
                                                         ELSE p_min_hold END),
                released_at = clock_timestamp()
            WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
              AND cleared_at IS NULL
            RETURNING timeline INTO v_timeline;
            ours := FOUND;
        END IF;
        IF v_stop THEN
            v_closes := true;
        END IF;
    END IF;
    IF ours AND coalesce(v_timeline, 0) < {schema}.timeline() THEN
        PERFORM {schema}.sighting();
    END IF;
    IF NOT ours AND p_outcome <> 'lock_lost' THEN
        v_outcome := 'lock_lost';
        v_error := p_lost_error;
        v_closes := false;
        v_hopeless := false;
        v_error_line := p_lost_error_line;
    END IF;
    recorded := false;
    newest := false;
    WITH previous AS (
        SELECT id, job, outcome FROM {schema}.runs
        WHERE id = p_run_id AND job = p_job
          AND claim_digest = sha256(convert_to(p_holder_id, 'UTF8'))
          AND outcome IN ('running', 'abandoned')
        FOR UPDATE
    ), before AS (
        SELECT j.job, j.last_outcome FROM {schema}.jobs j JOIN previous p ON j.job = p.job
    ), finished AS (
        UPDATE {schema}.runs r
        SET finished_at = r.started_at + p_duration, duration = p_duration,
            exit_code = p_exit_code, signal = p_signal, outcome = v_outcome,
            error = v_error, output_tail = p_output_tail, expected = p_expected
        FROM previous p, {schema}.jobs j WHERE r.id = p.id AND j.job = r.job
        RETURNING r.id, r.job, r.slot, r.finished_at, r.duration, r.exit_code, r.outcome,
                  p.outcome AS was, r.id >= coalesce(j.last_finished_run_id, 0) AS newer
    ), slot_end AS (
        -- The slot is dead when this attempt failed and no other may follow: its attempts
        -- are spent, or it ended in a way no retry fixes.
        UPDATE {schema}.slots s SET
            succeeded_run_id = CASE WHEN f.outcome = 'succeeded' THEN f.id
                                    ELSE s.succeeded_run_id END,
            closed_at = CASE WHEN v_closes THEN clock_timestamp() ELSE s.closed_at END
        FROM finished f WHERE s.job = f.job AND s.slot = f.slot
        RETURNING s.job, s.slot, s.attempts,
                  f.outcome NOT IN ('succeeded', 'stopped') AND s.attempt_limit > 1
                  AND (s.attempts >= s.attempt_limit OR v_hopeless) AS dead
    )
    UPDATE {schema}.jobs j SET
        last_finished_run_id = CASE WHEN f.newer THEN f.id ELSE j.last_finished_run_id END,
        last_finished_at = CASE WHEN f.newer THEN f.finished_at ELSE j.last_finished_at END,
        last_outcome = CASE WHEN f.newer THEN f.outcome ELSE j.last_outcome END,
        last_exit_code = CASE WHEN f.newer THEN f.exit_code ELSE j.last_exit_code END,
        last_duration = CASE WHEN f.newer THEN f.duration ELSE j.last_duration END,
        -- An abandoned run was counted as a failure when it was marked so.
        consecutive_failures = CASE WHEN NOT f.newer THEN j.consecutive_failures
                                    WHEN f.outcome = 'succeeded' THEN 0
                                    WHEN f.was = 'abandoned' THEN j.consecutive_failures
                                    ELSE j.consecutive_failures + 1 END,
        last_success_at = CASE WHEN f.outcome = 'succeeded'
                               THEN greatest(f.finished_at, j.last_success_at)
                               ELSE j.last_success_at END,
        outcome_counts = j.outcome_counts
            || jsonb_build_object(f.outcome,
                                  coalesce((j.outcome_counts ->> f.outcome)::bigint, 0) + 1)
            || CASE WHEN f.was = 'abandoned'
                    THEN jsonb_build_object('abandoned', greatest(0,
                             coalesce((j.outcome_counts ->> 'abandoned')::bigint, 0) - 1))
                    ELSE '{{}}'::jsonb END,
        -- Dead until a later success or a replay.
        dead_slot = CASE WHEN NOT f.newer THEN j.dead_slot WHEN d.dead THEN d.slot
                         WHEN f.outcome = 'succeeded' THEN NULL ELSE j.dead_slot END,
        dead_attempts = CASE WHEN NOT f.newer THEN j.dead_attempts WHEN d.dead THEN d.attempts
                             WHEN f.outcome = 'succeeded' THEN NULL ELSE j.dead_attempts END,
        dead_error = CASE WHEN NOT f.newer THEN j.dead_error WHEN d.dead THEN v_error_line
                          WHEN f.outcome = 'succeeded' THEN NULL ELSE j.dead_error END,
        -- Slots skipped in a row while runs outlasted their interval: back to none once
        -- a run ends that skipped no slot (none newer than its own was skipped).
        skipped_running_streak = CASE WHEN f.newer AND f.slot IS NOT NULL
                                       AND (j.skipped_running_slot IS NULL
                                            OR j.skipped_running_slot <= f.slot)
                                      THEN 0 ELSE j.skipped_running_streak END,
        -- The duration histogram (metrics): every run whose end its holder records, once
        -- (an abandoned one, not counted when marked so, when its end arrives late).
        -- Counters: pglock prune, which deletes runs, leaves them as they are.
        duration_buckets = CASE WHEN f.duration IS NULL THEN j.duration_buckets ELSE ARRAY(
            SELECT coalesce(u.runs, 0) + (f.duration <= make_interval(secs => u.bound))::int
            FROM unnest(j.duration_buckets, v_bounds) WITH ORDINALITY AS u(runs, bound, k)
            ORDER BY u.k) END,
        duration_count = CASE WHEN f.duration IS NULL THEN j.duration_count
                              ELSE coalesce(j.duration_count, 0) + 1 END,
        duration_sum = CASE WHEN f.duration IS NULL THEN j.duration_sum
                            ELSE coalesce(j.duration_sum, 0)
                                 + extract(epoch FROM f.duration)::float8 END,
        runs_shorter = coalesce(j.runs_shorter, 0)
                       + coalesce(p_expected = 'shorter', false)::int,
        runs_longer = coalesce(j.runs_longer, 0) + coalesce(p_expected = 'longer', false)::int
    FROM finished f JOIN before b ON b.job = f.job LEFT JOIN slot_end d ON d.job = f.job
    WHERE j.job = f.job
    RETURNING true, b.last_outcome, f.newer INTO recorded, previous_outcome, newest;
    recorded := coalesce(recorded, false);
    newest := coalesce(newest, false);
    RETURN NEXT;
END
$$;

-- missed: a scheduled slot that a trigger gave up without a run, and why (version 9:
-- 'promotion_wait', the wait after a promotion would have ended past --deadline). The
-- slot's row, opened with no attempt, says so to history and the dashboard, and the job's
-- summary counts it (once per slot, however many hosts give it up); a catch-up may still
-- run it. Nothing is written for a slot that has an attempt or a reason already.
CREATE OR REPLACE FUNCTION {schema}.missed(
    p_job text, p_slot timestamptz, p_reason text, p_retries integer)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    INSERT INTO {schema}.slots AS s (job, slot, attempts, attempt_limit, retries, missed_reason)
    VALUES (p_job, p_slot, 0, 1 + p_retries, p_retries, p_reason)
    ON CONFLICT (job, slot) DO UPDATE SET missed_reason = excluded.missed_reason
    WHERE s.attempts = 0 AND s.missed_reason IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE {schema}.jobs SET
        promotion_missed = coalesce(promotion_missed, 0) + 1,
        promotion_missed_slot = greatest(promotion_missed_slot, p_slot)
    WHERE job = p_job;
    RETURN true;
END
$$;

-- note: what happened after the end was recorded (a failed hook), added to its error.
CREATE OR REPLACE FUNCTION {schema}.note(p_run_id bigint, p_holder_id text, p_note text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE {schema}.runs SET error = concat_ws('; ', error, p_note)
    WHERE id = p_run_id AND claim_digest = sha256(convert_to(p_holder_id, 'UTF8'));
    RETURN FOUND;
END
$$;

-- holds: whether a claim still holds the job's lock or one of its seats.
-- The claim is a holder id and fencing token, as a nested `pglock run` inherits them;
-- held means not released, cleared or expired. A reentrant run asks it before running
-- its command under that lock; a runner cannot read holder ids itself.
CREATE OR REPLACE FUNCTION {schema}.holds(
    p_job text, p_holder_id text, p_fencing_token bigint)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM {schema}.locks
                   WHERE job = p_job AND holder_id = p_holder_id
                     AND fencing_token = p_fencing_token AND cleared_at IS NULL
                     AND released_at IS NULL AND expires_at > clock_timestamp()
                     AND {schema}.keeps(timeline, expires_at, stops_by))
        OR EXISTS (SELECT 1 FROM {schema}.seats
                   WHERE job = p_job AND holder_id = p_holder_id
                     AND fencing_token = p_fencing_token AND cleared_at IS NULL
                     AND released_at IS NULL AND expires_at > clock_timestamp()
                     AND {schema}.keeps(timeline, expires_at, NULL))
$$;

-- note_windows: the job's --window list, recorded by a trigger that skips inside one (as
-- acquire records it for a trigger that runs), so that status and check know a window
-- from its first trigger, even one added while inside it. Writes only on a change.
CREATE OR REPLACE FUNCTION {schema}.note_windows(p_job text, p_windows text[])
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {schema}.jobs SET windows = p_windows
    WHERE job = p_job AND windows IS DISTINCT FROM p_windows;
$$;

-- fence: the fencing guard of a command that writes to this database (docs/lease.md,
-- "Fencing"), run first in its own transaction: whether its claim (the holder id and
-- token in its environment) still holds the job's lock or a seat, the row then
-- share-locked until that transaction ends, so a takeover, a clear (and the holder's own
-- renewal) waits for the command's writes to commit. FOR SHARE needs UPDATE on the
-- table, which pglock_runner and pglock_reader lack: hence a function, SECURITY DEFINER.
CREATE OR REPLACE FUNCTION {schema}.fence(
    p_job text, p_holder_id text, p_fencing_token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM 1 FROM {schema}.locks
    WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
      AND cleared_at IS NULL AND released_at IS NULL AND expires_at > clock_timestamp()
      AND {schema}.keeps(timeline, expires_at, stops_by)
    FOR SHARE;
    IF FOUND THEN
        RETURN true;
    END IF;
    PERFORM 1 FROM {schema}.seats
    WHERE job = p_job AND holder_id = p_holder_id AND fencing_token = p_fencing_token
      AND cleared_at IS NULL AND released_at IS NULL AND expires_at > clock_timestamp()
      AND {schema}.keeps(timeline, expires_at, NULL)
    FOR SHARE;
    RETURN FOUND;
END
$$;

-- Functions are executable by PUBLIC by default: none of these is. (Run on every upgrade:
-- revoking what is already revoked changes nothing, and a function this file creates
-- anew is covered.)
REVOKE ALL ON FUNCTION {schema}.advisory_key(text), {schema}.session_holds(text),
    {schema}.record_start(text, timestamptz, text, text, integer, text, bigint, text, text,
                          text, timestamptz, interval, integer, integer, text, text, text,
                          integer, integer, interval),
    {schema}.acquire(integer, text, text, text, integer, text, interval, timestamptz, bigint,
                     boolean, text, text, text, timestamptz, interval, integer, integer,
                     integer, boolean, timestamptz[], text[], text, text, text, text, text,
                     text, integer, interval, interval, integer, integer, text[]),
    {schema}.attend(text, text, text, text, timestamptz, interval, boolean, boolean,
                    boolean, interval, boolean),
    {schema}.roster_key(text, text), {schema}.roster(text, integer),
    {schema}.members(integer, text, text, text, text[], timestamptz[], interval[],
                     interval[], integer[]),
    {schema}.catch_up(text, text, bigint, timestamptz[], integer, integer, timestamptz),
    {schema}.start_run(text, text, bigint, text, timestamptz, text, text, timestamptz,
                       interval, integer, integer),
    {schema}.start_run(text, text, bigint, text, timestamptz, text, text, timestamptz,
                       interval, integer, integer, text, text),
    {schema}.renew(text, text, bigint, boolean),
    {schema}.retake(text, text, bigint),
    {schema}.incarnation(), {schema}.timeline(), {schema}.sighting(),
    {schema}.next_token(bigint, bigint), {schema}.advisory_horizon(interval),
    {schema}.granted(bigint, interval), {schema}.keeps(bigint, timestamptz, timestamptz),
    {schema}.evict(text), {schema}.missed(text, timestamptz, text, integer),
    {schema}.take(integer, text, timestamptz, interval, text, text, text, interval),
    {schema}.takeable({schema}.locks, text, text, text, boolean, bigint),
    {schema}.seat_takeable({schema}.seats, text, boolean, bigint),
    {schema}.release(text, text, bigint, interval, timestamptz),
    {schema}.finish(bigint, text, text, bigint, interval, boolean, interval, integer, integer,
                    text, text, bytea, boolean, boolean, text, text, text, text),
    {schema}.note(bigint, text, text),
    {schema}.holds(text, text, bigint),
    {schema}.fence(text, text, bigint),
    {schema}.note_windows(text, text[])
FROM PUBLIC;
