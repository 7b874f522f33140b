"""`pglock clear` and `pglock prune`: the two commands that change what others see.

Clear never deletes the lock row (the fencing token must survive): it marks it cleared,
which makes the holder's next renewal match nothing, and pushes its expiry to one ttl
from now, the time the holder needs to notice and stop its command (a lock-delay).
"""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pglock.db import database, schema
from pglock.db.keys import advisory_key
from pglock.errors import DatabaseError, LacksRole
from pglock.reports.jobs import Job, Lock
from pglock.settings import config

# `durable`: synchronous_commit = on for this write alone (see lease.py).

# Only the holder the operator was shown (its fencing token) is cleared: if the lock
# changed hands while they read the prompt, the newcomer is left alone.
CLEAR = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)), cleared AS (
    UPDATE {schema}.locks l
    SET cleared_at = coalesce(l.cleared_at, clock_timestamp()), cleared_by = %(by)s,
        expires_at = CASE WHEN %(now)s THEN clock_timestamp()
                          WHEN l.cleared_at IS NOT NULL THEN l.expires_at
                          ELSE clock_timestamp() + l.ttl END
    WHERE l.job = %(job)s AND l.fencing_token = %(fencing_token)s
      AND l.released_at IS NULL AND l.expires_at > clock_timestamp()
    RETURNING l.job, l.mode, l.holder, l.holder_pid, l.fencing_token, l.expires_at
), audit AS (
    INSERT INTO {schema}.runs (job, mode, holder, holder_pid, fencing_token, command,
                               started_at, finished_at, duration, outcome, error,
                               cleared_by, reason)
    SELECT job, mode, holder, holder_pid, fencing_token, 'pglock clear', clock_timestamp(),
           clock_timestamp(), interval '0', 'cleared', %(note)s, %(by)s, %(reason)s
    FROM cleared
    RETURNING id
), action AS (
    INSERT INTO {schema}.audit (job, action, by, reason, detail)
    SELECT job, 'clear', %(by)s, %(reason)s, %(note)s FROM cleared
), counted AS (
    UPDATE {schema}.jobs j
    SET outcome_counts = j.outcome_counts || jsonb_build_object(
        'cleared', coalesce((j.outcome_counts ->> 'cleared')::bigint, 0) + 1)
    FROM cleared c WHERE j.job = c.job
)
SELECT a.id, c.expires_at, greatest(0, extract(epoch FROM c.expires_at - clock_timestamp()))
FROM cleared c, audit a, durable
"""
# A semaphore job (--limit): every seat whose holder the operator was shown (its seat and
# fencing token) and that still runs, each with its history row and audit row.
CLEAR_SEATS = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)), cleared AS (
    UPDATE {schema}.seats s
    SET cleared_at = coalesce(s.cleared_at, clock_timestamp()), cleared_by = %(by)s,
        expires_at = CASE WHEN %(now)s THEN clock_timestamp()
                          WHEN s.cleared_at IS NOT NULL THEN s.expires_at
                          ELSE clock_timestamp() + s.ttl END
    FROM unnest(%(seats)s::integer[], %(tokens)s::bigint[]) AS shown(seat, fencing_token)
    WHERE s.job = %(job)s AND s.seat = shown.seat AND s.fencing_token = shown.fencing_token
      AND s.released_at IS NULL AND s.expires_at > clock_timestamp()
    RETURNING s.job, s.seat, s.mode, s.holder, s.holder_pid, s.fencing_token, s.expires_at
), audit AS (
    INSERT INTO {schema}.runs (job, mode, holder, holder_pid, fencing_token, command,
                               started_at, finished_at, duration, outcome, error,
                               cleared_by, reason, seat)
    SELECT job, mode, holder, holder_pid, fencing_token, 'pglock clear', clock_timestamp(),
           clock_timestamp(), interval '0', 'cleared',
           %(note)s || '; seat ' || seat || ': ' || holder || ':' || holder_pid || ' token '
           || fencing_token, %(by)s, %(reason)s, seat
    FROM cleared
    RETURNING id
), action AS (
    INSERT INTO {schema}.audit (job, action, by, reason, detail)
    SELECT job, 'clear', %(by)s, %(reason)s,
           %(note)s || '; seat ' || seat || ': ' || holder || ':' || holder_pid || ' token '
           || fencing_token
    FROM cleared
), counted AS (
    UPDATE {schema}.jobs j
    SET outcome_counts = j.outcome_counts || jsonb_build_object(
        'cleared', coalesce((j.outcome_counts ->> 'cleared')::bigint, 0)
                   + (SELECT count(*) FROM cleared))
    WHERE j.job = %(job)s AND EXISTS (SELECT 1 FROM cleared)
)
SELECT (SELECT min(id) FROM audit), max(c.expires_at),
       greatest(0, extract(epoch FROM max(c.expires_at) - clock_timestamp())),
       array_agg(c.seat ORDER BY c.seat)
FROM cleared c, durable
HAVING count(*) > 0
"""
TERMINATE = "SELECT pg_terminate_backend(%(pid)s, 5000)"
# Whether a backend still holds the job's session lock (a bigint key shows in pg_locks as
# classid, the high half, and objid, objsubid 1).
SESSION_HELD = """
SELECT EXISTS (SELECT 1 FROM pg_locks
               WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = %(pid)s
                 AND ((classid::bigint << 32) | objid::bigint) = %(key)s
                 AND database = (SELECT oid FROM pg_database
                                 WHERE datname = current_database()))
"""
# What an operator did to a job besides clearing its lock, for the audit log.
AUDIT = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true))
INSERT INTO {schema}.audit (job, action, by, reason, detail)
SELECT %(job)s, %(action)s, %(by)s, %(reason)s, %(detail)s FROM durable
"""
PRUNE_CUTOFF = "SELECT now() - %(older_than)s"
# started_at < cutoff is implied by finished_at < cutoff; it lets runs_started find the
# batch. A job's latest run stays, whatever its age, so status still has a last run.
PRUNE_BATCH = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true))
DELETE FROM {schema}.runs USING durable WHERE id IN (
    SELECT r.id FROM {schema}.runs r
    WHERE r.started_at < %(cutoff)s AND r.finished_at < %(cutoff)s AND r.outcome <> 'running'
      AND r.id NOT IN (SELECT last_run_id FROM {schema}.jobs WHERE last_run_id IS NOT NULL
                       UNION ALL
                       SELECT last_finished_run_id FROM {schema}.jobs
                       WHERE last_finished_run_id IS NOT NULL)
    ORDER BY r.started_at
    LIMIT %(batch)s)
"""
PRUNE_BATCH_SIZE = 5000


class CannotTerminate(DatabaseError):
    """The holder's backend could not be ended."""


@dataclass(frozen=True)
class Cleared:
    """What `clear` did."""

    job: str
    lock: Lock
    audit_id: int
    free_at: datetime
    free_in: float
    by: str
    # A semaphore job's seats cleared (its first audit row is audit_id); empty for a lock.
    seats: tuple[int, ...] = ()


def operator() -> str:
    """user@host of whoever runs pglock, for the audit row."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = f"uid{os.getuid()}"
    # LOGNAME is any bytes: those that are not UTF-8 are written as \xNN, as shown.
    return f"{config.shown(user)}@{config.shown(socket.gethostname())}"


def existing(conn: psycopg.Connection[Any], schema_name: str) -> None:
    """Before an operator command reads what to act on: a schema that is not there is an
    error naming it (a typo'd --schema), never created."""
    with database.translated("cannot read the schema"):
        schema.existing(conn, schema_name)


def clear(conn: psycopg.Connection[Any], schema_name: str, shown: Job, *,
          reason: str | None, now: bool, by: str) -> Cleared | None:
    """Take the lock from the holder shown (a semaphore job's: every seat running, as
    shown); None if it was released or changed hands."""
    lock = shown.holding
    assert lock is not None
    if shown.seats is not None:
        return _clear_seats(conn, schema_name, shown, lock, reason=reason, now=now, by=by)
    note = (f"{reason or 'no reason given'}; cleared {lock.holder}:{lock.holder_pid} "
            f"token {lock.fencing_token} by {by}")
    params = {"job": shown.name, "fencing_token": lock.fencing_token, "now": now, "by": by,
              "note": note, "reason": reason}
    with database.translated(f"cannot clear job {shown.name!r}"):
        row = conn.execute(schema.query(CLEAR, schema_name), params).fetchone()
    if row is None:
        return None
    return Cleared(shown.name, lock, row[0], row[1], float(row[2]), by)


def _clear_seats(conn: psycopg.Connection[Any], schema_name: str, shown: Job, lock: Lock, *,
                 reason: str | None, now: bool, by: str) -> Cleared | None:
    assert shown.seats is not None
    running = [seat for seat in shown.seats.holders if seat.lock.released_at is None]
    params = {"job": shown.name, "seats": [seat.seat for seat in running],
              "tokens": [seat.lock.fencing_token for seat in running], "now": now, "by": by,
              "note": f"{reason or 'no reason given'}; cleared by {by}", "reason": reason}
    with database.translated(f"cannot clear job {shown.name!r}"):
        row = conn.execute(schema.query(CLEAR_SEATS, schema_name), params).fetchone()
    if row is None:
        return None
    return Cleared(shown.name, lock, row[0], row[1], float(row[2]), by, tuple(row[3]))


def terminate(conn: psycopg.Connection[Any], lock: Lock) -> str:
    """End an advisory holder's backend; what happened, for the operator."""
    if lock.mode != "advisory" or lock.backend_pid is None:
        return (f"the holder uses {lock.mode} mode: there is no backend to terminate "
                "(it stops at its next renewal)")
    try:
        row = conn.execute(TERMINATE, {"pid": lock.backend_pid}).fetchone()
    except psycopg.errors.InsufficientPrivilege as error:
        # The lock is cleared already; only the session lives on until its holder notices.
        raise LacksRole(
            f"cleared, but cannot terminate backend {lock.backend_pid}: this role lacks "
            f"pg_signal_backend (a DBA can GRANT pg_signal_backend TO it): "
            f"{database.first_line(error)}") from error
    except psycopg.Error as error:
        raise CannotTerminate(f"cannot terminate backend {lock.backend_pid}: "
                              f"{database.first_line(error)}") from error
    if row and row[0]:
        return f"backend {lock.backend_pid} of the holder was terminated"
    return f"backend {lock.backend_pid} did not end within 5s (or was already gone)"


def end_session(conn: psycopg.Connection[Any], schema_name: str, shown: Job, *,
                reason: str | None, by: str) -> str | None:
    """`clear --terminate` of a job nobody holds by its lock row (it expired), whose
    advisory holder's session still holds the session lock: a pglock stopped (Ctrl-Z, a
    debugger) or cut off. Its session is ended, with an audit row; what happened, or None
    when there is no such session."""
    lock = shown.lock
    if (lock is None or lock.mode != "advisory" or lock.backend_pid is None
            or lock.released_at is not None):
        return None
    with database.translated(f"cannot end the session of job {shown.name!r}"):
        row = conn.execute(SESSION_HELD, {"pid": lock.backend_pid,
                                          "key": advisory_key(schema_name, shown.name)}
                           ).fetchone()
    if not (row and row[0]):
        return None
    said = terminate(conn, lock)
    detail = (f"ended the session of {lock.holder}:{lock.holder_pid} (token "
              f"{lock.fencing_token}), which held the job's session lock past its lock's "
              f"expiry: {said}")
    with database.translated(f"cannot record the end of job {shown.name!r}'s session"):
        conn.execute(schema.query(AUDIT, schema_name), {
            "job": shown.name, "action": "clear", "by": by, "reason": reason,
            "detail": detail})
    return (f"job {shown.name!r}: its lock had expired, but its holder's session still held "
            f"the advisory lock (stopped or cut off): {said}; the job is free")


def prune(conn: psycopg.Connection[Any], schema_name: str, older_than: float,
          batch: int = PRUNE_BATCH_SIZE) -> tuple[int, datetime]:
    """Delete finished runs older than `older_than` seconds in batches; (count, cutoff)."""
    with database.translated("cannot prune the history"):
        schema.existing(conn, schema_name)
        row = conn.execute(PRUNE_CUTOFF, {"older_than": timedelta(seconds=older_than)}).fetchone()
        assert row is not None
        cutoff = row[0]
        deleted = 0
        # One short transaction per batch: no long lock on runs, and vacuum keeps up.
        while True:
            cursor = conn.execute(schema.query(PRUNE_BATCH, schema_name),
                                  {"cutoff": cutoff, "batch": batch})
            deleted += cursor.rowcount
            if cursor.rowcount < batch:
                return deleted, cutoff

