"""The lease: an expiring row per job, timed by the database clock alone.

Acquire inserts the job's row, or takes it over where it has expired or is already
ours, in one statement (with a schedule, only while the slot has no run), which also
records the run as started; each acquisition bumps the fencing token, and the row is
never deleted, so the token never goes down. Renew pushes the expiry out only while the
row still carries our holder id and token and has not been cleared: zero rows means lost.
Release expires the row at the end of its hold instead of deleting it: until then a
fresh trigger (a host whose cron fired the same minute a little later) finds the lock
held, while a contender that was waiting for this holder (`--wait`) or asks for a
deliberate rerun (`--rerun`) may take it over.
"""

from __future__ import annotations

import enum
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pglock.db import schema
from pglock.db.schema import query
from pglock.errors import DatabaseError, PglockError, SchemaError
from pglock.lock import ledger

# Each step is one call of a function of the schema (db/sql/functions.sql): one
# statement, one round trip, and, being SECURITY DEFINER, the only way a runner role
# writes the lock (docs/security.md). The functions set synchronous_commit = on for their
# own transaction: a role or database default of off/local must not make an acknowledged
# lock losable in a failover.

# Takes the lock by the rules of docs/lease.md (with a limit above 1, the lowest free seat
# of the job's semaphore) and, when taken, records the run as started (with `start`);
# the schema's version is checked in the same statement, and the host's attempt recorded
# in the census (winner or loser: docs/operators.md, "The census").
ACQUIRE = """
SELECT * FROM {schema}.acquire(
    %(version)s, %(job)s, %(mode)s, %(holder)s, %(holder_pid)s, %(holder_id)s, %(ttl)s,
    %(slot)s, %(handover_from)s, %(rerun)s, %(command)s, %(schedule)s, %(timezone)s,
    %(next_slot)s, %(grace)s, %(retries)s, %(attempt)s, %(limit)s, %(final)s,
    %(backlog)s, %(windows)s, %(late)s, %(trace_id)s, %(span_id)s, %(host)s, %(pglock)s,
    %(python)s, %(candidates)s, %(step)s, %(due)s, %(roster)s, %(rank)s, %(passed)s)
"""

# A winner that catches up (--catch-up): the slots it will run marked, the ones it gives
# up counted, under the lock it holds.
CATCH_UP = """
SELECT {schema}.catch_up(%(job)s, %(holder_id)s, %(fencing_token)s, %(slots)s, %(retries)s,
                         %(skipped)s, %(skipped_latest)s)
"""

# The first holder a contender that starts waiting now may take over from at its
# release: the one running, or (a lock released and in its hold, so that run was a
# trigger before ours) whoever takes the lock next.
HANDOVER_FROM = """
SELECT CASE WHEN released_at IS NULL THEN fencing_token ELSE fencing_token + 1 END
FROM {schema}.locks WHERE job = %(job)s
"""

RENEW = """
SELECT * FROM {schema}.renew(%(job)s, %(holder_id)s, %(fencing_token)s, %(advisory)s)
"""

HOLDER = """
SELECT holder FROM {schema}.locks
WHERE job = %(job)s AND expires_at > clock_timestamp()
"""

# Whether a claim (holder id and fencing token, as a nested `pglock run` inherits them)
# still holds the job's lock: not released, cleared or expired. What a reentrant run
# checks before running its command under that lock.
HELD_BY = """
SELECT {schema}.holds(%(job)s, %(holder_id)s, %(fencing_token)s)
"""

# A trigger skipped inside a --window records the job's windows (status reads them).
NOTE_WINDOWS = """
SELECT {schema}.note_windows(%(job)s, %(windows)s)
"""

# A scheduled slot a trigger gives up without a run, and why (the wait after a promotion
# ending past --deadline).
MISSED = """
SELECT {schema}.missed(%(job)s, %(slot)s, %(reason)s, %(retries)s)
"""

RELEASE = """
SELECT {schema}.release(%(job)s, %(holder_id)s, %(fencing_token)s, %(min_hold)s,
                        %(close_slot)s)
"""

# The acquire statement's failure when the schema is missing or older than this pglock
# (its functions do not exist yet): then the schema is created or upgraded, and the
# statement sent again. A newer schema answers with its version alone.
_NO_SCHEMA = (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName,
              psycopg.errors.UndefinedTable)

# Said when the acquire statement ran on a session other than the one holding the
# advisory lock.
POOLED = ("advisory mode needs a session of its own, and this connection is pooled "
          "(PgBouncer in transaction or statement pooling?): connect directly or through "
          "session pooling, or use --mode lease")


@dataclass(eq=False)
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
    # The run the winning acquire statement recorded as started (taken by its starter).
    run: ledger.StartedRun | None = None
    # Who held the lock when an acquire lost (None: nobody, or not known).
    held_by: str | None = None
    # --limit: how many holders may run the job at once (1: the job's lock, no seats).
    limit: int = 1
    # The semaphore's seat the acquire took (None: the job's lock). Renew, release and
    # finish find it by the holder id, as they find a lock.
    seat: int | None = None
    # How long after its acquisition the lock stays held once released (the run's end
    # releases it at acquisition + hold; docs/lease.md, "The hold"). Set once won.
    hold: float = 0.0
    # With --catch-up: the slots before this one that may be caught up, oldest first
    # (None: no catch-up); what a winning acquire found of them without a run (`missed`),
    # and the job's last slot before (`prior_slot`).
    backlog: list[datetime] | None = None
    missed: list[datetime] = field(default_factory=list)
    prior_slot: datetime | None = None
    # --window, as the job's row keeps them (status reads them).
    windows: list[str] | None = None
    # This try is the trigger's last (no --wait left): a loss then counts a slot skipped
    # while the previous run is still going. `was_running`: the loss was that.
    final: bool = True
    was_running: bool = False
    # Refused by the wait after a promotion alone: how long it has left (seconds), as the
    # server said; None: refused for another reason, or won.
    promotion_wait: float | None = None
    # Why this claim's run starts late ('promotion_wait': it waited that wait out), for
    # its start record.
    late: str | None = None
    # The host in the census (settings/config.py's host_name; None: none is recorded).
    host: str | None = None
    # --candidates: this host's turn in the slot (None: every host contends).
    turn: Turn | None = None
    # The job's roster as the winning or losing acquire answered it (with a turn).
    roster: list[str] | None = None

    def params(self, **extra: Any) -> dict[str, Any]:
        """The lease as query parameters."""
        return {"job": self.job, "mode": self.mode, "holder": self.holder,
                "holder_pid": self.holder_pid, "holder_id": self.holder_id,
                "fencing_token": self.fencing_token, "ttl": timedelta(seconds=self.ttl),
                "backend_pid": self.backend_pid, "slot": self.slot,
                "handover_from": self.handover_from, "rerun": self.rerun,
                "limit": self.limit, "final": self.final, "backlog": self.backlog,
                "windows": self.windows, "late": self.late, "host": self.host, **attendee(),
                **_turn_params(self.turn), **extra}


@dataclass(frozen=True)
class Turn:
    """What a host that contends only in its turns (--candidates) tells acquire."""

    # K, and the delay between two ranks (seconds).
    candidates: int
    step: float
    # It promises to be seen again within this (seconds): the census's silence for it.
    due: float
    # How many hosts of the job's roster to return (None: none, the host's is fresh).
    roster: int | None
    # Its rank in the slot (None: it did not know it: no roster yet, or a stale one).
    rank: int | None = None
    # The hosts ranked above it.
    passed: tuple[str, ...] = ()


def _turn_params(turn: Turn | None) -> dict[str, Any]:
    if turn is None:
        return {"candidates": None, "step": None, "due": None, "roster": None, "rank": None,
                "passed": None}
    return {"candidates": turn.candidates, "step": timedelta(seconds=turn.step),
            "due": timedelta(seconds=turn.due), "roster": turn.roster, "rank": turn.rank,
            "passed": list(turn.passed)}


# How far ahead of the database's clock a trigger's slot may be (acquire's SLOT_AHEAD
# refusal, in functions.sql: the same figure): a host's clock that NTP keeps is within it
# (doctor warns from 2 s), and it is a fraction of cron's shortest interval.
AHEAD_ALLOWED = timedelta(seconds=60)
SLOT_AHEAD = "PGL01"


class SlotAhead(PglockError):
    """The trigger's slot is ahead of the database's clock: this host's clock runs fast.
    Nothing was taken or recorded; the slot's own trigger (on a host whose clock is right,
    or this one once its clock is) runs it in its time."""

    def __init__(self, lease: Claim, ahead: str | None) -> None:
        from pglock.settings.durations import format_duration

        try:
            seconds = float(ahead or "nan")
        except ValueError:
            seconds = float("nan")
        by = format_duration(float(int(seconds))) if seconds == seconds else "more than 1m"
        slot = lease.slot.isoformat() if lease.slot is not None else "?"
        super().__init__(f"job {lease.job!r}: slot {slot} not run: it is {by} ahead of the "
                         f"database's clock (this host's clock runs at least {by} fast; is "
                         "NTP running?)")


def attendee() -> dict[str, str]:
    """What a run tells the census of itself besides its host's name (lock/census.py):
    its pglock (read now: a test may run pglock as an older release) and its Python."""
    import pglock

    return {"pglock": pglock.__version__, "python": PYTHON}


# The Python a run is, as the census records it.
PYTHON = ".".join(map(str, sys.version_info[:3]))


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


def try_acquire(conn: psycopg.Connection[Any], lease: Claim,
                start: ledger.RunStart | None = None) -> Attempt:
    """Take the job's lock if it is free (or expired) and its slot is not done; with
    `start`, record the run as started in the same statement (lease.run). In advisory mode
    this session must hold the job's session lock (advisory.take).

    The first call on a database creates or upgrades the schema when it is missing or
    older, and refuses a newer one.
    """
    params = lease.params(version=schema.VERSION, **_start_params(start))
    row = versioned(conn, lease.schema, lambda: _acquire(conn, lease, params))
    (_, session_held, ran, paused, token, handover_from, held_by, run_id, started_at,
     attempt, attempt_limit, seat, was_running, missed, prior_slot, promotion_wait,
     roster) = row
    if not session_held:
        raise DatabaseError(POOLED)
    if roster is not None:
        lease.roster = list(roster)
    if ran:
        return Attempt.SLOT_RAN
    if paused:
        return Attempt.PAUSED
    if token is None:
        if lease.handover_from is None:
            lease.handover_from = handover_from
        lease.held_by = held_by
        lease.was_running = bool(was_running)
        lease.promotion_wait = (None if promotion_wait is None
                                else promotion_wait.total_seconds())
        return Attempt.HELD
    lease.fencing_token = token
    lease.seat = seat
    lease.missed, lease.prior_slot = list(missed or ()), prior_slot
    if run_id is not None:
        lease.run = ledger.StartedRun(id=run_id, started_at=started_at, attempt=attempt,
                                      attempt_limit=attempt_limit)
    return Attempt.WON


def versioned(conn: psycopg.Connection[Any], schema_name: str,
              send: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """The answer of a run's first statement (`send`), whose first column is the schema's
    version: on a database where the schema is missing or older, it is created or
    upgraded and the statement sent again; a newer one is refused."""
    try:
        row = send()
    except _NO_SCHEMA:
        schema.ensure(conn, schema_name)
        row = send()
    if row[0] != schema.VERSION:
        # Older (or no version record): upgrade, then ask again; newer: refused.
        schema.ensure(conn, schema_name)
        row = send()
        if row[0] != schema.VERSION:
            raise SchemaError(f"schema {schema_name!r} is version {row[0]}, not "
                              f"{schema.VERSION}")
    return row


def _acquire(conn: psycopg.Connection[Any], lease: Claim,
             params: dict[str, Any]) -> tuple[Any, ...]:
    try:
        row = conn.execute(query(ACQUIRE, lease.schema), params).fetchone()
    except (psycopg.errors.CheckViolation, psycopg.errors.UniqueViolation):
        # The start of a slot that another host's run made done since the statement's own
        # check (the slot's CHECK, the unique attempt): nothing was taken.
        return (schema.VERSION, True, True, False, None, None, None, None, None, None, None,
                None, False, None, None, None, None)
    except psycopg.Error as error:
        if error.sqlstate == SLOT_AHEAD:
            raise SlotAhead(lease, error.diag.message_detail) from None
        raise
    assert row is not None
    return tuple(row)


def _start_params(start: ledger.RunStart | None) -> dict[str, Any]:
    if start is None:
        return {"command": None, "schedule": None, "timezone": None, "next_slot": None,
                "grace": None, "retries": 0, "attempt": 1, "trace_id": None, "span_id": None}
    return ledger.start_params(start)


def renew(conn: psycopg.Connection[Any], lease: Claim) -> tuple[Renewal, str | None]:
    """Extend the lease by its ttl from now; whether it is still ours, and why to stop."""
    held, renewed, stop, why = renewal(conn, lease)
    if not (held and renewed):
        return Renewal.LOST, None
    return (Renewal.STOP, why) if stop else (Renewal.OURS, None)


def renewal(conn: psycopg.Connection[Any], lease: Claim) -> tuple[bool, bool, bool, str | None]:
    """One renewal: (this session holds the advisory lock, or lease mode; the row was
    renewed; an operator asked for a stop; why)."""
    row = conn.execute(query(RENEW, lease.schema),
                       lease.params(advisory=lease.mode == "advisory")).fetchone()
    assert row is not None
    held, renewed, _, stop, why = row
    return bool(held), bool(renewed), bool(stop), why


# The WAL timeline of the server answering, read as the schema's timeline() reads it (a
# promotion always starts a new one); any role may read it.
TIMELINE = "SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint"


def taken_on_this_timeline(conn: psycopg.Connection[Any], lease: Claim) -> bool:
    """Whether the server answering writes the WAL timeline the claim's lock was taken
    on, read from its fencing token's high bits (next_token()): False once a promotion
    came between, when a write of the old primary may have been lost."""
    if lease.fencing_token is None:
        return False
    row = conn.execute(TIMELINE).fetchone()
    return row is not None and row[0] == (lease.fencing_token >> 32) + 1


def note_waiting(conn: psycopg.Connection[Any], lease: Claim) -> None:
    """Remember whom we wait for, when the acquire statement did not run (advisory mode)."""
    if lease.handover_from is None:
        row = conn.execute(query(HANDOVER_FROM, lease.schema), lease.params()).fetchone()
        lease.handover_from = None if row is None else row[0]


def release(conn: psycopg.Connection[Any], lease: Claim, min_hold: float = 0, *,
            close_slot: datetime | None = None) -> bool:
    """Let the lease expire now, or at acquisition + min_hold if that is later; with
    `close_slot`, no further attempt of that slot (in the same statement).

    False: the lock was no longer ours (cleared, or taken over after it expired).
    """
    row = conn.execute(query(RELEASE, lease.schema), lease.params(
        min_hold=timedelta(seconds=min_hold), close_slot=close_slot)).fetchone()
    return bool(row and row[0])


def missed(conn: psycopg.Connection[Any], lease: Claim, reason: str, retries: int) -> None:
    """Record the claim's slot as given up without a run, and why."""
    conn.execute(query(MISSED, lease.schema), {"job": lease.job, "slot": lease.slot,
                                              "reason": reason, "retries": retries})


def note_windows(conn: psycopg.Connection[Any], lease: Claim) -> None:
    """Record the job's windows as this trigger gives them (it skips inside one)."""
    conn.execute(query(NOTE_WINDOWS, lease.schema), {"job": lease.job, "windows": lease.windows})


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


def catch_up(conn: psycopg.Connection[Any], lease: Claim, slots: list[datetime], retries: int,
             given_up: tuple[int, datetime | None]) -> bool:
    """Mark the slots a catch-up will run and count those it gives up (how many, the newest
    of them); False: the lock is no longer ours."""
    row = conn.execute(query(CATCH_UP, lease.schema), lease.params(
        slots=slots, retries=retries, skipped=given_up[0],
        skipped_latest=given_up[1])).fetchone()
    return bool(row and row[0])
