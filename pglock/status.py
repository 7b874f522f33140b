"""`pglock status`: each job's lock, last run and schedule, read from the `jobs` and `locks` rows.

It never reads the history to list the jobs (10,000 jobs cost 10,000 summary rows,
whatever the history holds), and it changes nothing: a run whose holder seems gone
is shown as stale, not marked abandoned, since its holder may merely be cut off.
A scheduled job's standing (next due, missed slots) is monitor's judgement of the same
row: a job that is on time costs no cron arithmetic.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pglock import database, monitor, report, schema
from pglock.errors import UnknownJob
from pglock.monitor import Due

STATUS = """
SELECT coalesce(j.job, l.job), now(),
       l.mode, l.holder, l.holder_pid, l.fencing_token, l.backend_pid, l.acquired_at,
       l.expires_at, extract(epoch FROM l.ttl)::float8, l.released_at, l.cleared_at,
       l.cleared_by,
       j.last_run_id IS NOT NULL AND j.last_run_id IS DISTINCT FROM j.last_finished_run_id,
       j.last_finished_run_id, j.last_outcome, j.last_exit_code, j.last_finished_at,
       extract(epoch FROM j.last_duration)::float8, j.last_success_at,
       coalesce(j.outcome_counts, '{{}}'),
       j.schedule, j.timezone, j.grace, j.last_slot, j.next_slot
FROM {schema}.jobs j FULL JOIN {schema}.locks l ON l.job = j.job
WHERE %(job)s::text IS NULL OR coalesce(j.job, l.job) = %(job)s
ORDER BY 1
"""
RECENT_RUNS = 10


class State(enum.StrEnum):
    """What a job is doing, worst first."""

    # Its lock expired while its last run is still marked running: the holder vanished
    # or is cut off from the database.
    STALE = "stale"
    # Its last finished run did not succeed.
    FAILED = "failed"
    # A slot of its schedule passed more than its grace ago with no run started for it
    # (also while a run that outlasts its interval holds the lock).
    OVERDUE = "overdue"
    # `clear` took the lock; it is free for others once the lock-delay has passed.
    CLEARED = "cleared"
    RUNNING = "running"
    IDLE = "idle"


@dataclass(frozen=True)
class Lock:
    """The job's `locks` row: its holder, or its last one."""

    mode: str
    holder: str
    holder_pid: int
    fencing_token: int
    backend_pid: int | None
    acquired_at: datetime
    expires_at: datetime
    ttl: float
    released_at: datetime | None
    cleared_at: datetime | None
    cleared_by: str | None


@dataclass(frozen=True)
class LastRun:
    """The job's newest finished run."""

    id: int
    outcome: str
    exit_code: int | None
    finished_at: datetime | None
    duration: float | None


@dataclass(frozen=True)
class JobStatus:
    """One job at one moment of the database's clock."""

    job: str
    now: datetime
    state: State
    lock: Lock | None
    run_open: bool
    last_run: LastRun | None
    last_success_at: datetime | None
    counts: dict[str, int]
    # What its lock and last run say, before its schedule is looked at (never OVERDUE):
    # what `clear` goes by.
    lock_state: State
    schedule: str | None = None
    timezone: str | None = None
    # None unless scheduled (and its schedule readable here).
    due: Due | None = None
    # Why its recorded schedule cannot be read here (a zone this host does not know).
    schedule_note: str | None = None

    @property
    def holding(self) -> Lock | None:
        """The lock row when it means something now: held, stale, or in its lock-delay."""
        return None if self.lock_state in (State.IDLE, State.FAILED) else self.lock

    @property
    def overdue(self) -> bool:
        return self.due is not None and self.due.missed > 0

    @property
    def next_due_in(self) -> float | None:
        """Seconds until cron next starts it (scheduled jobs)."""
        return None if self.due is None else (self.due.next_fire - self.now).total_seconds()

    @property
    def running_for(self) -> float | None:
        """Seconds since the holder took the lock, while its run is still marked running."""
        lock = self.holding
        return self.seconds_since(lock.acquired_at) if lock and self.run_open else None

    def seconds_since(self, moment: datetime | None) -> float | None:
        return None if moment is None else (self.now - moment).total_seconds()


@dataclass(frozen=True)
class Status:
    """Every job (or the one asked for, with its recent runs)."""

    now: datetime
    jobs: list[JobStatus]
    runs: list[report.RunRow]
    # The job asked for (--job), if any.
    job: str | None = None


def read(conn: psycopg.Connection[Any], schema_name: str, job: str | None = None) -> Status:
    """All jobs' status, or one job's with its recent runs (UnknownJob if never seen)."""
    with database.translated("cannot read the status"):
        return _read(conn, schema_name, job)


def _read(conn: psycopg.Connection[Any], schema_name: str, job: str | None) -> Status:
    jobs = _jobs(conn, schema_name, job) if schema.readable(conn, schema_name) else []
    if job is not None and not jobs:
        raise UnknownJob(f"no job named {job!r} has run here (schema {schema_name!r})")
    if jobs:
        now = jobs[0].now
    else:
        row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        now = row[0]
    runs = [] if job is None else report.recent(
        conn, schema_name, report.Filters(job=job, limit=RECENT_RUNS))
    return Status(now, jobs, runs, job)


def one(conn: psycopg.Connection[Any], schema_name: str, job: str) -> JobStatus | None:
    """The job's status, or None when it was never seen."""
    if not schema.readable(conn, schema_name):
        return None
    found = _jobs(conn, schema_name, job)
    return found[0] if found else None


def _jobs(conn: psycopg.Connection[Any], schema_name: str, job: str | None) -> list[JobStatus]:
    # Binary rows: with 10,000 jobs, parsing timestamps from text is most of the cost.
    cursor = conn.cursor(binary=True)
    rows = cursor.execute(schema.query(STATUS, schema_name), {"job": job}).fetchall()
    return [_job_status(row) for row in rows]


def _job_status(row: tuple[Any, ...]) -> JobStatus:
    job, now = row[0], row[1]
    lock = Lock(*row[2:13]) if row[2] is not None else None
    run_open = bool(row[13])
    last_run = LastRun(*row[14:19]) if row[14] is not None else None
    counts = {str(name): int(n) for name, n in row[20].items() if n}
    lock_state = classify(now, lock, run_open, last_run)
    expr, zone = row[21], row[22]
    due, note = monitor.standing(expr, zone, row[23], row[24], row[25], now)
    state = overall(lock_state, due)
    return JobStatus(job, now, state, lock, run_open, last_run, row[19], counts, lock_state,
                     expr, zone, due, note)


def overall(lock_state: State, due: Due | None) -> State:
    """The state shown: the worse of the lock's and the schedule's (overdue ranks below
    stale and failed, above cleared, running and idle)."""
    if due is not None and due.missed > 0 and lock_state not in (State.STALE, State.FAILED):
        return State.OVERDUE
    return lock_state


def classify(now: datetime, lock: Lock | None, run_open: bool, last_run: LastRun | None) -> State:
    """The job's state from its lock row and its last runs."""
    live = lock is not None and lock.released_at is None and lock.expires_at > now
    if live:
        return State.CLEARED if lock and lock.cleared_at is not None else State.RUNNING
    if lock is not None and lock.released_at is None and run_open:
        return State.STALE
    if last_run is not None and last_run.outcome != "succeeded":
        return State.FAILED
    return State.IDLE
