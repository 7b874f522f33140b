-- pglock schema, version 5: counting semaphores (`pglock run --limit N`). Up to N holders
-- run a job at once, each on one of its N seats: a seat is a row of its own, an ordinary
-- lease (the rules of docs/lease.md: free, expired, ours, or in its hold for a waiter or
-- a rerun) with its own fencing token. A job without --limit never touches this table.
-- acquire with a limit takes the lowest free seat in its one statement; renew, release,
-- finish, start_run and holds find a claim on a seat by its holder id as they find one on
-- a lock (their bodies: sql/functions.sql). A plain run of the job and a semaphore's
-- seats exclude each other: each treats the other's live rows as the job held
-- (docs/lease.md, "Semaphores").
CREATE TABLE {schema}.seats (
    job               text NOT NULL CHECK (length(job) BETWEEN 1 AND 200),
    seat              integer NOT NULL CHECK (seat >= 1),
    -- The --limit of the run that took it.
    seat_limit        integer NOT NULL CHECK (seat_limit >= 1),
    mode              text NOT NULL CHECK (mode IN ('lease', 'advisory')),
    holder            text NOT NULL,
    holder_pid        integer NOT NULL,
    holder_id         text NOT NULL,
    fencing_token     bigint NOT NULL,
    ttl               interval NOT NULL,
    acquired_at       timestamptz NOT NULL,
    renewed_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    released_at       timestamptz,
    cleared_at        timestamptz,
    cleared_by        text,
    stop_requested_at timestamptz,
    stop_requested_by text,
    stop_reason       text,
    PRIMARY KEY (job, seat)
);

-- The seat a run held (NULL: the job's lock).
ALTER TABLE {schema}.runs ADD COLUMN seat integer;

-- acquire gains the limit (and says which seat it took): the old one goes before
-- sql/functions.sql creates the new one, since another signature is another function
-- beside it. IF EXISTS: a database older than version 4 never had it. A pglock 4 that
-- then finds no acquire of its own reads the schema's version and refuses, as it does
-- any newer schema's.
DROP FUNCTION IF EXISTS {schema}.acquire(integer, text, text, text, integer, text,
    interval, timestamptz, bigint, boolean, text, text, text, timestamptz, interval,
    integer, integer);

UPDATE {schema}.meta SET value = '5' WHERE key = 'version';
