"""The record of runs: a `runs` row per started run, and the `jobs` summary status reads."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pglock.schema import query


class Outcome(enum.StrEnum):
    """How a run ended (or that it has not)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LOCK_LOST = "lock_lost"
    KILLED = "killed"
    # Its holder vanished without recording an end; set by the next acquirer.
    ABANDONED = "abandoned"
    # An audit row written by `pglock clear`.
    CLEARED = "cleared"
    # An operator asked for it to stop (`pglock stop`), and it did.
    STOPPED = "stopped"


# `durable`: synchronous_commit = on for this write alone (see lease.py).

# Any other run of the job still marked running belongs to a holder that vanished:
# we hold the lock now, so it cannot be alive and holding it.
START = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)), abandoned AS (
    UPDATE {schema}.runs r
    SET outcome = 'abandoned', finished_at = clock_timestamp(),
        duration = clock_timestamp() - r.started_at,
        error = 'its holder vanished without recording an end'
    WHERE r.job = %(job)s AND r.outcome = 'running'
    RETURNING r.id, r.finished_at, r.duration
), started AS (
    INSERT INTO {schema}.runs
        (job, slot, mode, holder, holder_pid, fencing_token, command, started_at, outcome)
    VALUES (%(job)s, %(slot)s, %(mode)s, %(holder)s, %(holder_pid)s, %(fencing_token)s,
            %(command)s, clock_timestamp(), 'running')
    RETURNING id, started_at
), latest_abandoned AS (
    SELECT * FROM abandoned ORDER BY id DESC LIMIT 1
), summary AS (
    INSERT INTO {schema}.jobs AS j
        (job, mode, schedule, timezone, last_slot, next_slot, grace, last_run_id,
         last_started_at, last_holder, last_finished_run_id, last_finished_at, last_outcome,
         last_duration, outcome_counts, consecutive_failures)
    SELECT %(job)s, %(mode)s, %(schedule)s, %(timezone)s, %(slot)s, %(next_slot)s, %(grace)s,
           s.id, s.started_at, %(holder)s,
           a.id, a.finished_at, CASE WHEN a.id IS NOT NULL THEN 'abandoned' END, a.duration,
           CASE WHEN a.id IS NOT NULL
                THEN jsonb_build_object('abandoned', (SELECT count(*) FROM abandoned))
                ELSE '{{}}' END,
           (SELECT count(*) FROM abandoned)
    FROM started s LEFT JOIN latest_abandoned a ON true
    ON CONFLICT (job) DO UPDATE SET
        mode = excluded.mode, schedule = excluded.schedule, timezone = excluded.timezone,
        -- A run of an older slot that got the lock late (--wait) must not move the slots
        -- back, unless the schedule itself changed.
        last_slot = CASE WHEN excluded.last_slot < j.last_slot
                          AND (j.schedule, j.timezone) = (excluded.schedule, excluded.timezone)
                         THEN j.last_slot ELSE excluded.last_slot END,
        next_slot = CASE WHEN excluded.last_slot < j.last_slot
                          AND (j.schedule, j.timezone) = (excluded.schedule, excluded.timezone)
                         THEN j.next_slot ELSE excluded.next_slot END,
        grace = excluded.grace, forgotten_at = NULL,
        consecutive_failures = j.consecutive_failures + (SELECT count(*) FROM abandoned),
        last_run_id = excluded.last_run_id, last_started_at = excluded.last_started_at,
        last_holder = excluded.last_holder,
        last_finished_run_id = coalesce(excluded.last_finished_run_id, j.last_finished_run_id),
        last_finished_at = coalesce(excluded.last_finished_at, j.last_finished_at),
        last_outcome = coalesce(excluded.last_outcome, j.last_outcome),
        last_exit_code = CASE WHEN excluded.last_finished_run_id IS NOT NULL THEN NULL
                              ELSE j.last_exit_code END,
        last_duration = coalesce(excluded.last_duration, j.last_duration),
        outcome_counts = CASE WHEN excluded.last_finished_run_id IS NULL THEN j.outcome_counts
            ELSE j.outcome_counts || jsonb_build_object('abandoned',
                coalesce((j.outcome_counts ->> 'abandoned')::bigint, 0)
                + (SELECT count(*) FROM abandoned)) END
)
SELECT id, started_at FROM started, durable
"""

# A run marked abandoned by a takeover may still finish and tell the truth; its
# abandoned count is then taken back. Only the newest finished run sets the last_* fields.
# It returns the job's last outcome as it was before (every part of the statement reads
# the same snapshot), so a recovery is known without another round trip.
FINISH = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)), previous AS (
    SELECT id, job, outcome FROM {schema}.runs
    WHERE id = %(run_id)s AND outcome IN ('running', 'abandoned')
    FOR UPDATE
), before AS (
    SELECT j.job, j.last_outcome FROM {schema}.jobs j JOIN previous p ON j.job = p.job
), finished AS (
    UPDATE {schema}.runs r
    SET finished_at = r.started_at + %(duration)s, duration = %(duration)s,
        exit_code = %(exit_code)s, signal = %(signal)s, outcome = %(outcome)s,
        error = %(error)s, output_tail = %(output_tail)b
    FROM previous p, {schema}.jobs j WHERE r.id = p.id AND j.job = r.job
    RETURNING r.id, r.job, r.finished_at, r.duration, r.exit_code, r.outcome, p.outcome AS was,
              r.id >= coalesce(j.last_finished_run_id, 0) AS newer
)
UPDATE {schema}.jobs j SET
    last_finished_run_id = CASE WHEN f.newer THEN f.id ELSE j.last_finished_run_id END,
    last_finished_at = CASE WHEN f.newer THEN f.finished_at ELSE j.last_finished_at END,
    last_outcome = CASE WHEN f.newer THEN f.outcome ELSE j.last_outcome END,
    last_exit_code = CASE WHEN f.newer THEN f.exit_code ELSE j.last_exit_code END,
    last_duration = CASE WHEN f.newer THEN f.duration ELSE j.last_duration END,
    -- An abandoned run was counted as a failure when it was marked so.
    consecutive_failures = CASE WHEN NOT f.newer THEN j.consecutive_failures
                                WHEN f.outcome = 'succeeded' THEN 0
                                WHEN f.was = 'abandoned' THEN j.consecutive_failures
                                ELSE j.consecutive_failures + 1 END,
    last_success_at = CASE WHEN f.outcome = 'succeeded'
                           THEN greatest(f.finished_at, j.last_success_at)
                           ELSE j.last_success_at END,
    outcome_counts = j.outcome_counts
        || jsonb_build_object(f.outcome, coalesce((j.outcome_counts ->> f.outcome)::bigint, 0) + 1)
        || CASE WHEN f.was = 'abandoned'
                THEN jsonb_build_object('abandoned', greatest(0,
                         coalesce((j.outcome_counts ->> 'abandoned')::bigint, 0) - 1))
                ELSE %(empty)s END
FROM finished f JOIN before b ON b.job = f.job, durable
WHERE j.job = f.job
RETURNING b.last_outcome, f.newer
"""

# Notes of what happened after the end was recorded (a failed hook), added to its error.
NOTE = """
UPDATE {schema}.runs SET error = concat_ws('; ', error, %(note)s::text) WHERE id = %(run_id)s
"""


@dataclass(frozen=True)
class StartedRun:
    """The row written before the command starts."""

    id: int
    started_at: datetime


@dataclass(frozen=True)
class RunResult:
    """How a run ended, as recorded."""

    outcome: Outcome
    exit_code: int | None
    duration: float
    signal: int | None = None
    error: str | None = None
    output_tail: bytes | None = None


@dataclass(frozen=True)
class Scheduled:
    """What a scheduled run records about its schedule."""

    schedule: str
    timezone: str
    slot: datetime
    next_slot: datetime
    grace: float


def start(conn: psycopg.Connection[Any], schema: str, *, job: str, mode: str, holder: str,
          holder_pid: int, fencing_token: int | None, command: str,
          scheduled: Scheduled | None = None) -> StartedRun:
    """Record a run as started (and any run its vanished predecessor left as abandoned).

    With a schedule, a second run of the same slot raises psycopg.errors.UniqueViolation.
    """
    row = conn.execute(query(START, schema), {
        "job": job, "mode": mode, "holder": holder, "holder_pid": holder_pid,
        "fencing_token": fencing_token, "command": command,
        "slot": scheduled and scheduled.slot, "next_slot": scheduled and scheduled.next_slot,
        "schedule": scheduled and scheduled.schedule,
        "timezone": scheduled and scheduled.timezone,
        "grace": scheduled and timedelta(seconds=scheduled.grace)}).fetchone()
    assert row is not None
    return StartedRun(id=row[0], started_at=row[1])


@dataclass(frozen=True)
class Finished:
    """What recording a run's end learned about the job."""

    # The job's last outcome before this run's (None: no run of it had finished).
    previous_outcome: str | None
    # This run is the job's newest finished one (not a run abandoned and finishing late).
    newest: bool
    # This call recorded its end (False: a repeat found nothing left to record).
    recorded: bool = True


def finish(conn: psycopg.Connection[Any], schema: str, run_id: int,
           result: RunResult) -> Finished:
    """Complete the run's row and the job's summary; repeating it changes nothing."""
    row = conn.execute(query(FINISH, schema), {
        "run_id": run_id, "duration": timedelta(seconds=result.duration),
        "exit_code": result.exit_code, "signal": result.signal, "outcome": str(result.outcome),
        "error": result.error, "output_tail": result.output_tail, "empty": Jsonb({})}).fetchone()
    if row is None:
        return Finished(previous_outcome=None, newest=False, recorded=False)
    return Finished(previous_outcome=row[0], newest=bool(row[1]))


def add_note(conn: psycopg.Connection[Any], schema: str, run_id: int, note: str) -> None:
    """Append to a recorded run's error (what its hooks or pings came to)."""
    conn.execute(query(NOTE, schema), {"run_id": run_id, "note": note})
