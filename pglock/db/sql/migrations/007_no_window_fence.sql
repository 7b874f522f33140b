-- pglock schema, version 7: two changes. No window for a second holder (issue 33;
-- docs/ha.md, "Asynchronous replication", and docs/advisory.md, "The lock-delay"): the
-- tables below. And two new functions in sql/functions.sql, created after this file
-- (issue 38): the fencing guard `fence`, which the least-privileged roles may call
-- (docs/lease.md), and `note_windows` (a trigger skipped inside a --window records the
-- job's windows, so a window added while inside it is not reported overdue).

-- The WAL timelines this schema has seen, each with the server's clock when a pglock
-- first met it: one row per timeline, inserted conflict-free by whoever sees it first.
-- A promotion always starts a new timeline. On a primary whose timeline is newer than
-- the one a lock row (or seat) was last written under, that row may belong to a past
-- whose last writes were lost with the old primary: nobody takes it until the larger of
-- its ttl and the contender's has passed since the current timeline was first seen (nor
-- a job that has no row at all, when this timeline is not the first the schema saw: a
-- lost first acquisition leaves none). The holder an old primary lost stops at its next
-- renewal, and its local deadline falls before that (acquire, sql/functions.sql).
CREATE TABLE {schema}.timelines (
    timeline   bigint PRIMARY KEY CHECK (timeline >= 1),
    first_seen timestamptz NOT NULL
);

-- The timeline a lock row or seat was last written under (acquire, renew, release and
-- finish stamp it); and, for an advisory row, the server time by which its holder has
-- stopped its command if it hears nothing more (its last confirmed check + the horizon it
-- stops by): a contender holding the session lock takes the row over only after it. NULL
-- stops_by reads as the row's expiry (lease mode stops by then).
ALTER TABLE {schema}.locks ADD COLUMN timeline bigint, ADD COLUMN stops_by timestamptz;
ALTER TABLE {schema}.seats ADD COLUMN timeline bigint;

-- The timeline this schema is created (or upgraded) on is its first: no job waits on it.
-- Rows from before the upgrade count as written under it (a v6 row does not say).
INSERT INTO {schema}.timelines (timeline, first_seen)
VALUES (('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint,
        clock_timestamp());
UPDATE {schema}.locks SET timeline = (SELECT max(timeline) FROM {schema}.timelines);
UPDATE {schema}.seats SET timeline = (SELECT max(timeline) FROM {schema}.timelines);

UPDATE {schema}.meta SET value = '7' WHERE key = 'version';
