"""Each job's health from one read of `jobs` (with its lock and last run): what `check`,
`metrics` and `status` report.

A job is failed when its last finished run did not succeed, stale when its last run is
still marked running but its lock has expired (the holder vanished), and overdue when
a slot of its schedule passed more than its grace ago with no run started for it. The
database's clock is "now": the same for every reader, whatever host it runs on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pglock.errors import UsageError
from pglock.schema import query

# Outcomes of a finished run that count as a failure ('cleared' is an audit row).
FAILURES = ("failed", "timed_out", "lock_lost", "killed", "abandoned")
FINISHED = ("succeeded", *FAILURES)

# The clock is read in the same statement, so even no jobs at all give a row.
HEALTH = """
SELECT now.at AS now, j.job, j.schedule, j.timezone, j.grace, j.last_slot, j.next_slot,
       j.last_run_id, j.last_started_at, j.last_holder, j.last_finished_at, j.last_outcome,
       j.last_exit_code, j.last_duration, j.last_success_at, j.outcome_counts,
       j.consecutive_failures, r.outcome = 'running' AS running,
       l.holder AS lock_holder, l.expires_at AS lock_expires_at,
       coalesce(l.expires_at > now.at, false) AS held
FROM (SELECT clock_timestamp() AS at) now
LEFT JOIN {schema}.jobs j ON %(job)s::text IS NULL OR j.job = %(job)s::text
LEFT JOIN {schema}.runs r ON r.id = j.last_run_id
LEFT JOIN {schema}.locks l ON l.job = j.job
ORDER BY j.job
"""


class Problem(enum.StrEnum):
    """What can be wrong with a job, most severe first."""

    STALE = "stale"
    FAILED = "failed"
    OVERDUE = "overdue"
    # Its recorded schedule cannot be read here (a zone this host does not know).
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Due:
    """Where a scheduled job stands against its schedule."""

    # The first slot with no run yet: in the past while pending (within grace) or overdue.
    due_at: datetime
    # When cron next starts it.
    next_fire: datetime
    # Slots past their grace with no run (counted up to schedule.MISSED_LIMIT).
    missed: int
    grace: float


@dataclass(frozen=True)
class JobHealth:
    """One job's summary row, judged."""

    job: str
    schedule: str | None
    timezone: str | None
    last_run_id: int | None
    last_started_at: datetime | None
    last_holder: str | None
    last_slot: datetime | None
    last_finished_at: datetime | None
    last_outcome: str | None
    last_exit_code: int | None
    last_duration: float | None
    last_success_at: datetime | None
    outcome_counts: dict[str, int]
    consecutive_failures: int
    running: bool
    held: bool
    lock_holder: str | None
    lock_expires_at: datetime | None
    due: Due | None = None
    problems: tuple[Problem, ...] = field(default=())
    note: str | None = None

    @property
    def overdue(self) -> bool:
        return self.due is not None and self.due.missed > 0


@dataclass(frozen=True)
class Snapshot:
    """All jobs' health at one moment of the database's clock."""

    now: datetime
    jobs: list[JobHealth]


def read_health(conn: psycopg.Connection[Any], schema: str, job: str | None = None) -> Snapshot:
    """Every job's health (or one job's), from one statement; no schema yet means no jobs."""
    try:
        cursor = conn.cursor(row_factory=dict_row)
        rows = cursor.execute(query(HEALTH, schema), {"job": job}).fetchall()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        now = conn.execute("SELECT clock_timestamp()").fetchone()
        assert now is not None
        return Snapshot(now[0], [])
    now = rows[0]["now"]
    return Snapshot(now, [judge(row, now) for row in rows if row["job"] is not None])


def judge(row: dict[str, Any], now: datetime) -> JobHealth:
    """A jobs row (as HEALTH selects it) with its problems found."""
    health = JobHealth(
        job=row["job"], schedule=row["schedule"], timezone=row["timezone"],
        last_run_id=row["last_run_id"], last_started_at=row["last_started_at"],
        last_holder=row["last_holder"], last_slot=row["last_slot"],
        last_finished_at=row["last_finished_at"], last_outcome=row["last_outcome"],
        last_exit_code=row["last_exit_code"], last_duration=_seconds(row["last_duration"]),
        last_success_at=row["last_success_at"],
        outcome_counts={k: int(v) for k, v in (row["outcome_counts"] or {}).items()},
        consecutive_failures=row["consecutive_failures"] or 0, running=bool(row["running"]),
        held=row["held"], lock_holder=row["lock_holder"],
        lock_expires_at=row["lock_expires_at"])
    due, note = _due(row, now)
    problems = []
    if health.running and not health.held:
        problems.append(Problem.STALE)
    if health.last_outcome in FAILURES:
        problems.append(Problem.FAILED)
    if due is not None and due.missed > 0:
        problems.append(Problem.OVERDUE)
    if note is not None:
        problems.append(Problem.UNREADABLE)
    return replace(health, due=due, problems=tuple(problems), note=note)


def _due(row: dict[str, Any], now: datetime) -> tuple[Due | None, str | None]:
    return standing(row["schedule"], row["timezone"], row["grace"], row["last_slot"],
                    row["next_slot"], now)


def standing(expr: str | None, zone: str | None, grace_interval: timedelta | None,
             last_slot: datetime | None, next_slot: datetime | None,
             now: datetime) -> tuple[Due | None, str | None]:
    """A job's standing against its schedule, from its `jobs` row's schedule columns:
    (Due, None), (None, why its schedule cannot be read), or (None, None) unscheduled."""
    if expr is None or last_slot is None:
        return None, None
    grace = _seconds(grace_interval)
    if next_slot is not None and next_slot > now and grace is not None:
        # On time: no cron arithmetic, not even croniter's import, for the common case.
        return Due(next_slot, next_slot, 0, grace), None
    return _counted(expr, zone, grace, last_slot, next_slot, now)


# Jobs of one read share the clock, and many share a schedule and the slots they
# missed: after a fleet-wide outage, 10,000 overdue jobs cost a few distinct countings.
@lru_cache(maxsize=1024)
def _counted(expr: str, zone: str | None, grace: float | None, last_slot: datetime,
             next_slot: datetime | None, now: datetime) -> tuple[Due | None, str | None]:
    from pglock import schedule

    try:
        # A run host whose zone had no name stored "localtime": read it as ours.
        plan = schedule.parse(expr, None if zone == "localtime" else zone)
    except UsageError as error:
        return None, f"its schedule cannot be read here: {error}"
    if grace is None:
        grace = schedule.slot_info(plan, last_slot).default_grace
    due_at = next_slot or schedule.next_after(plan, last_slot)
    found = schedule.due(plan, due_at, now, grace)
    return Due(found.due_at, found.next_fire, found.missed, grace), None


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def failures(health: JobHealth) -> int:
    """Finished runs since the last success (at least 1 when the last one failed)."""
    if health.last_outcome in FAILURES:
        return max(1, health.consecutive_failures)
    return 0
