"""The lease: an expiring row per job, timed by the database clock alone.

Acquire inserts the job's row, or takes it over where it has expired or is already
ours, in one statement; each acquisition bumps the fencing token, and the row is never
deleted, so the token never goes down. Renew pushes the expiry out only while the row
still carries our holder id and token and has not been cleared: zero rows means lost.
Release expires the row (after --min-hold) instead of deleting it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg

from pglock.schema import query

ACQUIRE = """
INSERT INTO {schema}.locks AS l
    (job, mode, holder, holder_pid, holder_id, fencing_token, ttl,
     acquired_at, renewed_at, expires_at, backend_pid)
VALUES (%(job)s, %(mode)s, %(holder)s, %(holder_pid)s, %(holder_id)s, 1, %(ttl)s,
        clock_timestamp(), clock_timestamp(), clock_timestamp() + %(ttl)s, %(backend_pid)s)
ON CONFLICT (job) DO UPDATE SET
    mode = excluded.mode, holder = excluded.holder, holder_pid = excluded.holder_pid,
    holder_id = excluded.holder_id, fencing_token = l.fencing_token + 1, ttl = excluded.ttl,
    acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at, released_at = NULL, backend_pid = excluded.backend_pid,
    cleared_at = NULL, cleared_by = NULL
WHERE l.expires_at <= clock_timestamp() OR l.holder_id = excluded.holder_id
   -- Holding the advisory lock proves an advisory row's holder is gone.
   OR (%(advisory_held)s AND l.mode = 'advisory' AND l.cleared_at IS NULL)
RETURNING fencing_token
"""

RENEW = """
UPDATE {schema}.locks
SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + ttl
WHERE job = %(job)s AND holder_id = %(holder_id)s AND fencing_token = %(fencing_token)s
  AND cleared_at IS NULL
RETURNING expires_at
"""

RELEASE = """
UPDATE {schema}.locks
SET expires_at = greatest(clock_timestamp(), acquired_at + %(min_hold)s),
    released_at = clock_timestamp()
WHERE job = %(job)s AND holder_id = %(holder_id)s AND fencing_token = %(fencing_token)s
  AND cleared_at IS NULL
"""


@dataclass
class Lease:
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

    def params(self, **extra: Any) -> dict[str, Any]:
        """The lease as query parameters."""
        return {"job": self.job, "mode": self.mode, "holder": self.holder,
                "holder_pid": self.holder_pid, "holder_id": self.holder_id,
                "fencing_token": self.fencing_token, "ttl": timedelta(seconds=self.ttl),
                "backend_pid": self.backend_pid, **extra}


def try_acquire(conn: psycopg.Connection[Any], lease: Lease, *,
                advisory_held: bool = False) -> bool:
    """Take the job's lock if it is free (or expired); sets the lease's fencing token."""
    row = conn.execute(query(ACQUIRE, lease.schema),
                       lease.params(advisory_held=advisory_held)).fetchone()
    if row is None:
        return False
    lease.fencing_token = row[0]
    return True


def renew(conn: psycopg.Connection[Any], lease: Lease) -> bool:
    """Extend the lease by its ttl from now; False means it is no longer ours."""
    return conn.execute(query(RENEW, lease.schema), lease.params()).fetchone() is not None


def release(conn: psycopg.Connection[Any], lease: Lease, min_hold: float = 0) -> None:
    """Let the lease expire now, or at acquisition + min_hold if that is later."""
    conn.execute(query(RELEASE, lease.schema),
                 lease.params(min_hold=timedelta(seconds=min_hold)))
