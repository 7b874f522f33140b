"""Advisory mode: a session lock on a dedicated connection, plus the same `locks` row.

The session lock ends the moment the holder's backend does (crash, reset, terminate),
so a contender holding it may take the row over at once, if the row was stamped by the
server answering now, in the same life of its lock table (its incarnation: a restart, a
crash or a promoted standby since, and the free lock proves nothing; the row is then a
lease, and its holder takes its session lock back when it reconnects). The row keeps
lease-mode hosts out and shows the holder in `status`. A transaction-pooling
PgBouncer would leave the lock on a server connection other clients then use: the
session is checked against pg_locks at acquisition and at every heartbeat.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import psycopg

from pglock.db import engine, schema
from pglock.db.keys import advisory_key
from pglock.db.schema import query
from pglock.errors import DatabaseError
from pglock.lock import lease, ledger

# How often the holder checks its session (and renews the row): the lock has no minimum
# hold, so a dead session must be noticed within seconds, not a ttl.
CHECK_INTERVAL = 1.5

# The server drops a silent client within idle + interval * count seconds; the session
# also refuses the role's idle timeouts, which would end it (and the lock) while idle.
# The lock is tried by the schema's take(), which ends the session of a holder stopped
# past its horizon first (functions.sql), checks the schema's version as acquire does,
# and records a loser's attempt in the census.
TAKE = """
SELECT t.schema_version, t.taken, t.session_pid,
       set_config('tcp_keepalives_idle', %(idle)s, false),
       set_config('tcp_keepalives_interval', '1', false),
       set_config('tcp_keepalives_count', '3', false),
       set_config('tcp_user_timeout', %(user_timeout)s, false),
       set_config('idle_session_timeout', '0', false),
       set_config('idle_in_transaction_session_timeout', '0', false)
FROM {schema}.take(%(version)s, %(job)s, %(slot)s, %(ttl)s, %(host)s, %(pglock)s,
                   %(python)s, %(due)s) AS t
"""

# A bigint key shows in pg_locks as classid (high half) and objid (low half), objsubid 1.
_HOLDERS = """
SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 1 AND granted
  AND ((classid::bigint << 32) | objid::bigint) = %(key)s
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

# A holder back on a new session: its session lock taken back and its row renewed (and
# stamped with the incarnation answering now) in one statement; the session set up as TAKE's.
RETAKE = """
SELECT r.taken, r.held, r.renewed, r.stop, r.why,
       set_config('tcp_keepalives_idle', %(idle)s, false),
       set_config('tcp_keepalives_interval', '1', false),
       set_config('tcp_keepalives_count', '3', false),
       set_config('tcp_user_timeout', %(user_timeout)s, false),
       set_config('idle_session_timeout', '0', false),
       set_config('idle_in_transaction_session_timeout', '0', false),
       pg_backend_pid()
FROM {schema}.retake(%(job)s, %(holder_id)s, %(fencing_token)s) AS r
"""

CHECK = f"""
SELECT pg_backend_pid(), array(SELECT pid FROM ({_HOLDERS}) AS h)
"""

def horizon(ttl: float) -> float:
    """How long after a confirmed check the session lock is certainly still ours: the ttl,
    or sooner the moment the server drops a silent holder."""
    return min(ttl, server_drop_bound(ttl)[1])


def server_drop_bound(ttl: float) -> tuple[int, int]:
    """(keepalive idle, total): the server drops a silent holder `total` s after its last word.

    The holder stops its command before that (its local deadline counts from this bound,
    not the ttl), since an advisory contender may take over the moment the server lets go.
    """
    idle = max(3, round(ttl / 4))
    return idle, idle + 1 * 3


def take(conn: psycopg.Connection[Any], claim: lease.Claim) -> bool:
    """Try the session lock on `conn`, which must then stay the holder's own. The first
    call on a database creates or upgrades the schema, as acquire's does."""
    idle, total = server_drop_bound(claim.ttl)
    # The claim's own parameters carry what the census records of a loser.
    params = claim.params(version=schema.VERSION, idle=str(idle),
                          user_timeout=str(total * 1000))

    def send() -> tuple[Any, ...]:
        row = conn.execute(query(TAKE, claim.schema), params).fetchone()
        assert row is not None
        return tuple(row)

    row = lease.versioned(conn, claim.schema, send)
    claim.backend_pid = row[2]
    return bool(row[1])


class Contended(DatabaseError):
    """A contender's session holds the lock for the moment, while the row is still ours."""


def retake(conn: psycopg.Connection[Any], claim: lease.Claim,
           ) -> tuple[bool, bool, bool, str | None]:
    """Take the session lock back on a new session and renew the row in one statement:
    (the lock was taken, and held; the row renewed; an operator asked for a stop; why).
    Raises Contended when a contender holds the lock for now and the row is still ours."""
    idle, total = server_drop_bound(claim.ttl)
    row = conn.execute(query(RETAKE, claim.schema), claim.params(
        idle=str(idle), user_timeout=str(total * 1000))).fetchone()
    assert row is not None
    taken, held, renewed, stop, why = row[:5]
    if not taken and renewed:
        raise Contended("a contender holds the advisory lock for the moment")
    if taken and renewed:
        claim.backend_pid = row[-1]
    return bool(taken and held), bool(renewed), bool(stop), why


def give_back(conn: psycopg.Connection[Any], claim: lease.Claim) -> None:
    """Release the session lock (a lost race for the row)."""
    conn.execute("SELECT pg_advisory_unlock(%s)", (advisory_key(claim.schema, claim.job),))


def verify_session(other: psycopg.Connection[Any], claim: lease.Claim) -> None:
    """Our backend, seen from a second connection, must hold the lock alone.

    Behind a transaction pooler `other`'s statement may run on the very session that holds
    the lock. That the holder's own next statement (the acquire) runs on it is checked by
    the acquire itself (lease.POOLED).
    """
    row = other.execute(CHECK, {"key": advisory_key(claim.schema, claim.job)}).fetchone()
    assert row is not None
    other_pid, holders = row
    if holders != [claim.backend_pid] or other_pid == claim.backend_pid:
        raise DatabaseError(lease.POOLED)


class Session(Protocol):
    """The holder's connection, reopened on demand."""

    def get(self) -> psycopg.Connection[Any]: ...

    def usable(self, conn: psycopg.Connection[Any] | None = None) -> bool: ...

    def connect(self) -> psycopg.Connection[Any]: ...

    def close(self) -> None: ...

    def drop(self, conn: psycopg.Connection[Any]) -> None: ...

    def backend_pid(self) -> int | None: ...


class AdvisoryRenewer:
    """Check the session lock every CHECK_INTERVAL and renew the row with it."""

    def __init__(self, claim: lease.Claim, session: Session) -> None:
        self.claim = claim
        self.interval = min(CHECK_INTERVAL, claim.ttl / 3)
        self.horizon = horizon(claim.ttl)
        self._session = session
        self._reason = "the lock was taken over or cleared"
        # The session lock lives on the backend that took it: a session reopened since
        # (the end of an attempt recorded on a new connection, the lock kept for a retry)
        # takes it back at its first renewal.
        self._retake = session.backend_pid() != claim.backend_pid
        self._conn: psycopg.Connection[Any] | None = None

    def renew(self) -> tuple[lease.Renewal, str | None]:
        conn = self._conn = self._session.get()
        if self._retake:
            # The old session ended, and its lock with it: take it back and renew the row in
            # one statement. A contender cannot have taken a row stamped by the old session's
            # server over at once: only after its expiry.
            held, renewed, stop, why = retake(conn, self.claim)
            if not renewed:
                self._reason = "another host took the lock while we were cut off"
                return lease.Renewal.LOST, None
            self._retake = False
        else:
            held, renewed, stop, why = lease.renewal(conn, self.claim)
        if not held:
            self._reason = ("this session no longer holds the advisory lock "
                            "(a transaction-pooling PgBouncer?)")
        if not (held and renewed):
            return lease.Renewal.LOST, None
        return (lease.Renewal.STOP, why) if stop else (lease.Renewal.OURS, None)

    def same_timeline(self) -> bool:
        return self._conn is not None and lease.taken_on_this_timeline(self._conn, self.claim)

    def reset(self) -> None:
        # After a failed renewal. A statement that was cancelled (or timed out) leaves the
        # session, and the lock, alive: closing it would give the lock away while the
        # command runs. Only a broken session is let go, and the lock taken back on a new one.
        # (Its own connection: the run's may be a new one, if this one was abandoned.)
        if self._conn is None or self._session.usable(self._conn):
            return
        self._session.drop(self._conn)
        self._retake = True

    def close(self) -> None:
        # The heartbeat's end: the session stays, holding the lock, until the run's end is
        # recorded (the slot closes it after `finish`).
        pass

    def lost_reason(self) -> str:
        return self._reason


def try_acquire(session: Session, conn: psycopg.Connection[Any],
                 claim: lease.Claim, start: ledger.RunStart | None) -> lease.Attempt:
    """One attempt in advisory mode: the session lock first, then the row. An engine
    whose advisory locks lock nothing is refused first, from what its session said when
    it started (no round trip: tests/lock/test_round_trips.py)."""
    engine.refuse_fake_advisory(conn)
    if not take(conn, claim):
        return lease.Attempt.HELD
    try:
        with session.connect() as other:
            verify_session(other, claim)
        attempt = lease.try_acquire(conn, claim, start)
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            give_back(conn, claim)
        raise
    if attempt is not lease.Attempt.WON:
        # A lease-mode host holds the row, or the slot ran: whatever the session lock says.
        give_back(conn, claim)
    return attempt
