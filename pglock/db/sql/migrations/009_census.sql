-- pglock schema, version 9: the fleet census (issue 44; docs/operators.md, "The census").
-- Every `pglock run`, winner or loser, records its host and its attempt of the job, in the
-- acquire statement it sends anyway (attend, sql/functions.sql): the losers are the
-- fleet's attendance, which nothing recorded before. From it, status, check, metrics,
-- `pglock hosts` and the dashboard tell a host that stopped attempting a job (a lost
-- crontab, a removed pglock, one too old for the schema) while another host still runs
-- it. Both tables start empty; the next runs fill them.

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
    outcome       text NOT NULL CHECK (outcome IN ('ran', 'held', 'paused', 'slot_done')),
    last_attempt  timestamptz NOT NULL,
    slot          timestamptz,
    gaps          integer[] NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (job, host)
) WITH (fillfactor = 50, autovacuum_analyze_scale_factor = 100);
-- A host's rows (its last attempt of any job; forget-host). host never changes in a row:
-- the rewrites stay HOT.
CREATE INDEX attendance_host ON {schema}.attendance (host);

-- An operator's action on a host (`pglock forget-host`): the host it was about. Such a
-- row has no job, and is no action on every job.
ALTER TABLE {schema}.audit ADD COLUMN host text;

-- acquire gains the census (the caller's host, pglock and Python versions), last: the old
-- one goes first (sql/functions.sql creates the new one). A pglock 8 that then finds no
-- acquire of its own reads the version and refuses, as it does any newer schema's.
DROP FUNCTION IF EXISTS {schema}.acquire(integer, text, text, text, integer, text,
    interval, timestamptz, bigint, boolean, text, text, text, timestamptz, interval,
    integer, integer, integer, boolean, timestamptz[], text[]);

UPDATE {schema}.meta SET value = '9' WHERE key = 'version';
