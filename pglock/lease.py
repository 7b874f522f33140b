"""The lease: an expiring row per job, timed by the database clock alone.

Acquire inserts the job's row, or takes it over where it has expired or is already
ours, in one statement (with a schedule, only while the slot has no run); each
acquisition bumps the fencing token, and the row is never deleted, so the token never
goes down. Renew pushes the expiry out only while the row still carries our holder id
and token and has not been cleared: zero rows means lost.
Release expires the row at the end of its hold instead of deleting it: until then a
fresh trigger (a host whose cron fired the same minute a little later) finds the lock
held, while a contender that was waiting for this holder (`--wait`) or asks for a
deliberate rerun (`--rerun`) may take it over.
"""

from __future__ import annotations

import enum
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pglock.schema import query

# Every write sets synchronous_commit = on for its own transaction: a role or database
# default of off/local must not make an acknowledged lock losable in a failover. The
# setting rides in the statement (no round trip, no startup parameter a pooler refuses,
# nothing left on a pooled session), in a CTE the statement reads: PostgreSQL skips an
# unreferenced SELECT CTE, and a row written implies the CTE's row was read.

# A slot that is done (it succeeded, its attempts are spent, or an attempt closed it) is
# done even after its last run released the lock: the loser of a scheduled race costs one
# statement, and learns why it lost. A slot whose attempt was abandoned or lost its lock
# with attempts left is open: any host may take the next (docs/schedules.md, "Delivery").
# A run without an attempt number is an older pglock's, still running through an upgrade:
# for those, one run per slot. A paused job (or every job paused, the empty name) is
# skipped in the same statement.
ACQUIRE = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)), slot_ran AS (
    SELECT EXISTS (SELECT 1 FROM {schema}.slots WHERE job = %(job)s AND slot = %(slot)s
                   AND (succeeded_run_id IS NOT NULL OR closed_at IS NOT NULL
                        OR attempts >= attempt_limit))
        OR EXISTS (SELECT 1 FROM {schema}.runs WHERE job = %(job)s AND slot = %(slot)s
                   AND attempt IS NULL) AS ran
), paused AS (
    SELECT EXISTS (SELECT 1 FROM {schema}.pauses WHERE job IN (%(job)s, '')
                   AND (until IS NULL OR until > clock_timestamp())) AS is_paused
), taken AS (
    INSERT INTO {schema}.locks AS l
        (job, mode, holder, holder_pid, holder_id, fencing_token, ttl,
         acquired_at, renewed_at, expires_at, backend_pid)
    SELECT %(job)s::text, %(mode)s::text, %(holder)s::text, %(holder_pid)s::integer,
           %(holder_id)s::text, 1, %(ttl)s::interval, clock_timestamp(), clock_timestamp(),
           clock_timestamp() + %(ttl)s::interval, %(backend_pid)s::integer
    FROM slot_ran, paused WHERE NOT slot_ran.ran AND NOT paused.is_paused
    ON CONFLICT (job) DO UPDATE SET
        mode = excluded.mode, holder = excluded.holder, holder_pid = excluded.holder_pid,
        holder_id = excluded.holder_id, fencing_token = l.fencing_token + 1,
        ttl = excluded.ttl, acquired_at = excluded.acquired_at,
        renewed_at = excluded.renewed_at, expires_at = excluded.expires_at,
        released_at = NULL, backend_pid = excluded.backend_pid,
        cleared_at = NULL, cleared_by = NULL,
        stop_requested_at = NULL, stop_requested_by = NULL, stop_reason = NULL
    WHERE l.expires_at <= clock_timestamp() OR l.holder_id = excluded.holder_id
       -- Holding the advisory lock proves an unreleased advisory row's holder is gone.
       OR (%(advisory_held)s AND l.mode = 'advisory' AND l.cleared_at IS NULL
           AND l.released_at IS NULL)
       -- Released but in its hold: only a handover to a contender that waited for this
       -- holder (or an earlier one), or a deliberate rerun.
       OR (l.released_at IS NOT NULL
           AND (%(rerun)s OR l.fencing_token >= %(handover_from)s::bigint))
    RETURNING fencing_token
)
SELECT (SELECT ran FROM slot_ran), (SELECT is_paused FROM paused),
       (SELECT fencing_token FROM taken),
       (SELECT CASE WHEN released_at IS NULL THEN fencing_token ELSE fencing_token + 1 END
        FROM {schema}.locks WHERE job = %(job)s)
FROM durable
"""

# The first holder a contender that starts waiting now may take over from at its
# release: the one running, or (a lock released and in its hold, so that run was a
# trigger before ours) whoever takes the lock next.
HANDOVER_FROM = """
SELECT CASE WHEN released_at IS NULL THEN fencing_token ELSE fencing_token + 1 END
FROM {schema}.locks WHERE job = %(job)s
"""

RENEW = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true))
UPDATE {schema}.locks
SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + ttl
FROM durable
WHERE job = %(job)s AND holder_id = %(holder_id)s AND fencing_token = %(fencing_token)s
  AND cleared_at IS NULL
RETURNING expires_at, stop_requested_at IS NOT NULL,
          coalesce(stop_reason, 'no reason given') || ' (by ' || stop_requested_by || ')'
"""

HOLDER = """
SELECT holder FROM {schema}.locks
WHERE job = %(job)s AND expires_at > clock_timestamp()
"""

# Whether a claim (holder id and fencing token, as a nested `pglock run` inherits them)
# still holds the job's lock: not released, cleared or expired. What a reentrant run
# checks before running its command under that lock.
HELD_BY = """
SELECT EXISTS (SELECT 1 FROM {schema}.locks
               WHERE job = %(job)s AND holder_id = %(holder_id)s
                 AND fencing_token = %(fencing_token)s AND cleared_at IS NULL
                 AND released_at IS NULL AND expires_at > clock_timestamp())
"""

RELEASE = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true))
UPDATE {schema}.locks
SET expires_at = greatest(clock_timestamp(), acquired_at + %(min_hold)s),
    released_at = clock_timestamp()
FROM durable
WHERE job = %(job)s AND holder_id = %(holder_id)s AND fencing_token = %(fencing_token)s
  AND cleared_at IS NULL
RETURNING released_at
"""


@dataclass
class Claim:
    """One process's claim on one job."""

    job: str
    schema: str
    ttl: float
    mode: str = "lease"
    holder: str = field(default_factory=socket.gethostname)
    holder_pid: int = field(default_factory=os.getpid)
    # Random per process: a pid alone repeats across containers and reboots.
    holder_id: str = field(default_factory=lambda: os.urandom(8).hex())
    fencing_token: int | None = None
    backend_pid: int | None = None
    # With --schedule: the slot this claim is for.
    slot: datetime | None = None
    # While waiting (--wait): the first fencing token whose holder may hand the lock
    # over at its release, inside its hold. None: not waiting yet.
    handover_from: int | None = None
    # --rerun: a deliberate run that may take a released lock inside its hold.
    rerun: bool = False

    def params(self, **extra: Any) -> dict[str, Any]:
        """The lease as query parameters."""
        return {"job": self.job, "mode": self.mode, "holder": self.holder,
                "holder_pid": self.holder_pid, "holder_id": self.holder_id,
                "fencing_token": self.fencing_token, "ttl": timedelta(seconds=self.ttl),
                "backend_pid": self.backend_pid, "slot": self.slot,
                "handover_from": self.handover_from, "rerun": self.rerun, **extra}


class Attempt(enum.Enum):
    """What one try for the lock came to."""

    WON = "won"
    HELD = "held elsewhere"
    SLOT_RAN = "this slot is done (it succeeded or its attempts are spent)"
    PAUSED = "the job is paused (pglock status says by whom and why)"


class Renewal(enum.Enum):
    """What one renewal came to."""

    OURS = "ours"
    LOST = "lost"
    # Still ours, and an operator asked (`pglock stop`) that the command be stopped.
    STOP = "stop requested"


def try_acquire(conn: psycopg.Connection[Any], lease: Claim, *,
                advisory_held: bool = False) -> Attempt:
    """Take the job's lock if it is free (or expired) and its slot has not run yet."""
    row = conn.execute(query(ACQUIRE, lease.schema),
                       lease.params(advisory_held=advisory_held)).fetchone()
    assert row is not None
    ran, paused, token, handover_from = row
    if ran:
        return Attempt.SLOT_RAN
    if paused:
        return Attempt.PAUSED
    if token is None:
        if lease.handover_from is None:
            lease.handover_from = handover_from
        return Attempt.HELD
    lease.fencing_token = token
    return Attempt.WON


def renew(conn: psycopg.Connection[Any], lease: Claim) -> tuple[Renewal, str | None]:
    """Extend the lease by its ttl from now; whether it is still ours, and why to stop."""
    row = conn.execute(query(RENEW, lease.schema), lease.params()).fetchone()
    if row is None:
        return Renewal.LOST, None
    return (Renewal.STOP, row[2]) if row[1] else (Renewal.OURS, None)


def note_waiting(conn: psycopg.Connection[Any], lease: Claim) -> None:
    """Remember whom we wait for, when the acquire statement did not run (advisory mode)."""
    if lease.handover_from is None:
        row = conn.execute(query(HANDOVER_FROM, lease.schema), lease.params()).fetchone()
        lease.handover_from = None if row is None else row[0]


def release(conn: psycopg.Connection[Any], lease: Claim, min_hold: float = 0) -> bool:
    """Let the lease expire now, or at acquisition + min_hold if that is later.

    False: the lock was no longer ours (cleared, or taken over after it expired).
    """
    return conn.execute(query(RELEASE, lease.schema),
                        lease.params(min_hold=timedelta(seconds=min_hold))).fetchone() is not None


def holder_of(conn: psycopg.Connection[Any], lease: Claim) -> str | None:
    """Who holds the job's lock now (None: nobody, it has just been let go)."""
    row = conn.execute(query(HOLDER, lease.schema), lease.params()).fetchone()
    return None if row is None else str(row[0])


def held_by(conn: psycopg.Connection[Any], schema: str, job: str, holder_id: str,
            fencing_token: int) -> bool:
    """Whether the holder with this id and token holds the job's lock now."""
    row = conn.execute(query(HELD_BY, schema), {
        "job": job, "holder_id": holder_id, "fencing_token": fencing_token}).fetchone()
    return row is not None and bool(row[0])
