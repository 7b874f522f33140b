"""`pglock history`: the recorded runs, newest first, and a job's figures over them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import class_row

from pglock.db import database, schema
from pglock.errors import UnknownJob, UsageError
from pglock.lock.ledger import Outcome
from pglock.reports.jobs import Skipped
from pglock.settings.durations import HISTORY_LIMIT, check_count

_SELECT = """
SELECT id, job, started_at, finished_at, holder, holder_pid, mode, outcome, exit_code, signal,
       extract(epoch FROM duration)::float8, fencing_token, error,
       CASE WHEN %(outputs)s THEN output_tail END,
       slot, attempt,
       (SELECT s.attempt_limit FROM {schema}.slots s
        WHERE s.job = runs.job AND s.slot = runs.slot) AS attempt_limit,
       manual,
       coalesce((SELECT s.caught_up FROM {schema}.slots s
                 WHERE s.job = runs.job AND s.slot = runs.slot), false) AS caught_up,
       late_reason, trace_id, span_id, candidate_rank
FROM {schema}.runs
"""
# Each filter is a constant; only the ones asked for are joined in, so every query is one
# the planner can serve from runs_job_started or runs_started.
_FILTERS = {
    "job": "job = %(job)s",
    "since": "started_at >= now() - %(since)s",
    "outcome": "outcome = %(outcome)s",
    "host": "holder = %(host)s",
}
_ORDER = "ORDER BY started_at DESC, id DESC LIMIT %(limit)s"
KNOWN_JOB = """
SELECT EXISTS (SELECT FROM {schema}.jobs WHERE job = %(job)s)
    OR EXISTS (SELECT FROM {schema}.runs WHERE job = %(job)s)
"""
# Operator actions on the job (or on every job: job NULL), newest first.
ACTIONS = """
SELECT id, at, coalesce(job, '') AS job, action, by, reason, detail, host
FROM {schema}.audit
-- A job's actions and those on every job; an action on a host (forget-host) is neither.
WHERE (%(job)s::text IS NULL OR job = %(job)s OR (job IS NULL AND host IS NULL))
  AND (%(since)s::interval IS NULL OR at >= now() - %(since)s::interval)
ORDER BY at DESC, id DESC LIMIT %(limit)s
"""
# A job's slots that no run took, from its summary row (schema version 6).
SKIPPED = """
SELECT coalesce(skipped_running, 0), skipped_running_slot, coalesce(skipped_running_streak, 0),
       coalesce(catch_up_skipped, 0), catch_up_skipped_slot, coalesce(promotion_missed, 0),
       promotion_missed_slot
FROM {schema}.jobs WHERE job = %(job)s
"""
# Audit rows of `clear` are history, but not runs: they count in no figure.
NOT_RUNS = frozenset({Outcome.CLEARED})


@dataclass(frozen=True)
class Filters:
    """What `history` was asked to show."""

    job: str | None = None
    since: float | None = None
    outcome: str | None = None
    host: str | None = None
    limit: int = 50

    def validate(self) -> None:
        """Refuse bad input before anything touches the database."""
        if self.outcome is not None and self.outcome not in {o.value for o in Outcome}:
            raise UsageError(f"--outcome: {self.outcome!r} is not one of "
                             + ", ".join(Outcome))
        check_count(self.limit, "--limit", HISTORY_LIMIT)

    def params(self) -> dict[str, Any]:
        since = None if self.since is None else timedelta(seconds=self.since)
        return {"job": self.job, "since": since, "outcome": self.outcome, "host": self.host,
                "limit": self.limit}


@dataclass(frozen=True)
class RunRow:
    """One recorded run (or a `clear` audit row)."""

    id: int
    job: str
    started_at: datetime
    finished_at: datetime | None
    holder: str
    holder_pid: int
    mode: str
    outcome: str
    exit_code: int | None
    signal: int | None
    duration: float | None
    fencing_token: int | None
    error: str | None
    # The kept tail of its output (None: not kept, or not asked for).
    output: bytes | None = None
    # With --schedule: the slot it was an attempt at, the attempt (1-based; None before
    # schema version 3), and how many attempts the slot may have now.
    slot: datetime | None = None
    attempt: int | None = None
    attempt_limit: int | None = None
    # Run by hand (no --schedule) for a job that has a schedule.
    manual: bool = False
    # Its slot was run by a catch-up (--catch-up), after its time.
    caught_up: bool = False
    # Why it started late ('promotion_wait': it waited out the wait after a promotion).
    late: str | None = None
    # A traced run's W3C trace id and its span's id, in hex (None: not traced).
    trace_id: str | None = None
    span_id: str | None = None
    # --candidates: its host's rank in the slot (1: the first candidate; None: every host
    # contended, or its host had no roster to rank itself over).
    candidate_rank: int | None = None


@dataclass(frozen=True)
class Action:
    """An operator's action: clear, pause, resume, stop, forget (job '' is every job), or
    forget-host (`host` names it; job '')."""

    id: int
    at: datetime
    job: str
    action: str
    by: str
    reason: str | None
    detail: str | None
    host: str | None = None


@dataclass(frozen=True)
class Summary:
    """A job's figures over the runs shown: failures and slowdowns at a glance."""

    runs: int
    finished: int
    succeeded: int
    p50: float | None
    p95: float | None
    max: float | None

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.finished if self.finished else None


@dataclass(frozen=True)
class History:
    """The runs `history` found, newest first, with the job's figures when one was named."""

    now: datetime
    filters: Filters
    runs: list[RunRow]
    summary: Summary | None
    # Whether the runs carry their kept output (`history --output`).
    outputs: bool = False
    # Operator actions in the same window (not filtered by outcome or host).
    actions: list[Action] = field(default_factory=list)
    # With --job: its slots that no run took (skipped while a run went on, given up by a
    # catch-up), from its summary row.
    skipped: Skipped | None = None


def read(conn: psycopg.Connection[Any], schema_name: str, filters: Filters, *,
         outputs: bool = False) -> History:
    """The runs matching `filters`, newest first (with their kept output if `outputs`);
    UnknownJob for a job never seen."""
    with database.translated("cannot read the history"):
        return _read(conn, schema_name, filters, outputs)


def _read(conn: psycopg.Connection[Any], schema_name: str, filters: Filters,
          outputs: bool) -> History:
    now = conn.execute("SELECT now()").fetchone()
    assert now is not None
    if not schema.readable(conn, schema_name):
        if filters.job is not None:
            raise _unknown(filters.job, schema_name)
        return History(now[0], filters, [], None, outputs)
    runs = recent(conn, schema_name, filters, outputs=outputs)
    done = actions(conn, schema_name, filters)
    if filters.job is None:
        return History(now[0], filters, runs, None, outputs, done)
    if not runs and not known(conn, schema_name, filters.job):
        raise _unknown(filters.job, schema_name)
    return History(now[0], filters, runs, summarize(runs), outputs, done,
                   skipped_slots(conn, schema_name, filters.job))


def actions(conn: psycopg.Connection[Any], schema_name: str, filters: Filters) -> list[Action]:
    """Operator actions on the job (and on every job), newest first."""
    params = {**filters.params(), "limit": min(filters.limit, 20)}
    cursor = conn.cursor(row_factory=class_row(Action))
    return cursor.execute(schema.query(ACTIONS, schema_name), params).fetchall()


def recent(conn: psycopg.Connection[Any], schema_name: str, filters: Filters, *,
           outputs: bool = False) -> list[RunRow]:
    """The matching runs, newest first, at most `filters.limit` of them; with `outputs`,
    each with its kept output tail (read in the same statement)."""
    asked = [text for name, text in _FILTERS.items() if getattr(filters, name) is not None]
    where = "WHERE " + " AND ".join(asked) if asked else ""
    statement = schema.query(f"{_SELECT} {where} {_ORDER}", schema_name)
    return [RunRow(*row) for row in conn.execute(statement,
                                                {**filters.params(), "outputs": outputs})]


def known(conn: psycopg.Connection[Any], schema_name: str, job: str) -> bool:
    """Whether the job ever ran (or was ever cleared) in this schema."""
    row = conn.execute(schema.query(KNOWN_JOB, schema_name), {"job": job}).fetchone()
    return bool(row and row[0])


def _unknown(job: str, schema_name: str) -> UnknownJob:
    return UnknownJob(f"no job named {job!r} has run here (schema {schema_name!r})")


def summarize(runs: list[RunRow]) -> Summary:
    """Runs, successes and duration percentiles over the runs given (audit rows left out)."""
    real = [run for run in runs if run.outcome not in NOT_RUNS]
    finished = [run for run in real if run.outcome != Outcome.RUNNING]
    durations = sorted(run.duration for run in finished if run.duration is not None)
    return Summary(
        runs=len(real), finished=len(finished),
        succeeded=sum(run.outcome == Outcome.SUCCEEDED for run in finished),
        p50=percentile(durations, 0.50), p95=percentile(durations, 0.95),
        max=durations[-1] if durations else None)


def percentile(ordered: list[float], fraction: float) -> float | None:
    """Linear interpolation between closest ranks, as PostgreSQL's percentile_cont."""
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def skipped_slots(conn: psycopg.Connection[Any], schema_name: str, job: str) -> Skipped | None:
    """The job's slots skipped while a run went on, given up by catch-up, or lost to the
    wait after a promotion (None: none)."""
    row = conn.execute(schema.query(SKIPPED, schema_name), {"job": job}).fetchone()
    if row is None or not (row[0] or row[3] or row[5]):
        return None
    return Skipped(int(row[0]), row[1], int(row[2]), int(row[3]), row[4], int(row[5]), row[6])
