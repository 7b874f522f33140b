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
), opened AS (
    -- A slot's attempt: one more on its row, which its CHECK keeps within the limit. A
    -- slot that succeeded, or that an attempt closed, is pushed past the limit instead,
    -- so that its start fails in the same way.
    INSERT INTO {schema}.slots AS s (job, slot, attempts, attempt_limit, retries)
    SELECT %(job)s, %(slot)s::timestamptz, 1, 1 + %(retries)s::integer, %(retries)s::integer
    WHERE %(slot)s::timestamptz IS NOT NULL
    ON CONFLICT (job, slot) DO UPDATE SET attempts = CASE
        WHEN s.succeeded_run_id IS NULL AND s.closed_at IS NULL THEN s.attempts + 1
        ELSE s.attempt_limit + 1 END
    RETURNING attempts, attempt_limit
), started AS (
    INSERT INTO {schema}.runs
        (job, slot, mode, holder, holder_pid, fencing_token, command, started_at, outcome,
         attempt, manual)
    SELECT %(job)s, %(slot)s, %(mode)s, %(holder)s, %(holder_pid)s, %(fencing_token)s,
           %(command)s, clock_timestamp(), 'running',
           coalesce((SELECT attempts FROM opened), %(attempt)s::integer),
           %(slot)s::timestamptz IS NULL AND EXISTS (
               SELECT 1 FROM {schema}.jobs WHERE job = %(job)s AND schedule IS NOT NULL)
    RETURNING id, started_at, attempt,
              coalesce((SELECT attempt_limit FROM opened), 1 + %(retries)s::integer) AS limit_
), latest_abandoned AS (
    SELECT * FROM abandoned ORDER BY id DESC LIMIT 1
), summary AS (
    INSERT INTO {schema}.jobs AS j
        (job, mode, schedule, timezone, last_slot, next_slot, grace, last_run_id,
         last_started_at, last_holder, last_finished_run_id, last_finished_at, last_outcome,
         last_duration, outcome_counts, consecutive_failures, last_attempt, attempt_limit)
    SELECT %(job)s, %(mode)s, %(schedule)s, %(timezone)s, %(slot)s, %(next_slot)s, %(grace)s,
           s.id, s.started_at, %(holder)s,
           a.id, a.finished_at, CASE WHEN a.id IS NOT NULL THEN 'abandoned' END, a.duration,
           CASE WHEN a.id IS NOT NULL
                THEN jsonb_build_object('abandoned', (SELECT count(*) FROM abandoned))
                ELSE '{{}}' END,
           (SELECT count(*) FROM abandoned), s.attempt, s.limit_
    FROM started s LEFT JOIN latest_abandoned a ON true
    ON CONFLICT (job) DO UPDATE SET
        mode = excluded.mode,
        -- A run without --schedule (by hand) leaves the job's schedule and slots alone:
        -- overdue detection goes on.
        schedule = CASE WHEN excluded.last_slot IS NULL THEN j.schedule
                        ELSE excluded.schedule END,
        timezone = CASE WHEN excluded.last_slot IS NULL THEN j.timezone
                        ELSE excluded.timezone END,
        -- A run of an older slot that got the lock late (--wait) must not move the slots
        -- back, unless the schedule itself changed.
        last_slot = CASE WHEN excluded.last_slot IS NULL THEN j.last_slot
                         WHEN excluded.last_slot < j.last_slot
                          AND (j.schedule, j.timezone) = (excluded.schedule, excluded.timezone)
                         THEN j.last_slot ELSE excluded.last_slot END,
        next_slot = CASE WHEN excluded.last_slot IS NULL THEN j.next_slot
                         WHEN excluded.last_slot < j.last_slot
                          AND (j.schedule, j.timezone) = (excluded.schedule, excluded.timezone)
                         THEN j.next_slot ELSE excluded.next_slot END,
        grace = CASE WHEN excluded.last_slot IS NULL THEN j.grace ELSE excluded.grace END,
        forgotten_at = NULL,
        last_attempt = excluded.last_attempt, attempt_limit = excluded.attempt_limit,
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
SELECT id, started_at, attempt, limit_ FROM started, durable
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
    RETURNING r.id, r.job, r.slot, r.finished_at, r.duration, r.exit_code, r.outcome,
              p.outcome AS was, r.id >= coalesce(j.last_finished_run_id, 0) AS newer
), slot_end AS (
    -- The slot is dead when this attempt failed and no other may follow: its attempts are
    -- spent, or it ended in a way no retry fixes. Without retries, a failure is only that.
    UPDATE {schema}.slots s SET
        succeeded_run_id = CASE WHEN f.outcome = 'succeeded' THEN f.id
                                ELSE s.succeeded_run_id END,
        closed_at = CASE WHEN %(closes)s THEN clock_timestamp() ELSE s.closed_at END
    FROM finished f WHERE s.job = f.job AND s.slot = f.slot
    RETURNING s.job, s.slot, s.attempts,
              f.outcome NOT IN ('succeeded', 'stopped') AND s.attempt_limit > 1
              AND (s.attempts >= s.attempt_limit OR %(hopeless)s) AS dead
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
                ELSE %(empty)s END,
    -- Dead until a later success or a replay.
    dead_slot = CASE WHEN NOT f.newer THEN j.dead_slot WHEN d.dead THEN d.slot
                     WHEN f.outcome = 'succeeded' THEN NULL ELSE j.dead_slot END,
    dead_attempts = CASE WHEN NOT f.newer THEN j.dead_attempts WHEN d.dead THEN d.attempts
                         WHEN f.outcome = 'succeeded' THEN NULL ELSE j.dead_attempts END,
    dead_error = CASE WHEN NOT f.newer THEN j.dead_error WHEN d.dead THEN %(error_line)s
                      WHEN f.outcome = 'succeeded' THEN NULL ELSE j.dead_error END
FROM finished f JOIN before b ON b.job = f.job LEFT JOIN slot_end d ON d.job = f.job, durable
WHERE j.job = f.job
RETURNING b.last_outcome, f.newer
"""

# An operator's stop between two attempts: no attempt of the slot follows.
CLOSE_SLOT = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true))
UPDATE {schema}.slots SET closed_at = clock_timestamp() FROM durable
WHERE job = %(job)s AND slot = %(slot)s AND closed_at IS NULL
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
    # 1-based; with --schedule, counted over every host's attempts at the slot.
    attempt: int = 1
    # How many attempts the slot (or, unscheduled, this invocation) may have.
    attempt_limit: int = 1


@dataclass(frozen=True)
class RunResult:
    """How a run ended, as recorded."""

    outcome: Outcome
    exit_code: int | None
    duration: float
    signal: int | None = None
    error: str | None = None
    output_tail: bytes | None = None

    @property
    def error_line(self) -> str:
        """One line that says why it failed: the last line of its output, else its error,
        else its exit code (what check names for a dead slot)."""
        if self.output_tail:
            # A text column takes no NUL byte, and the output is anybody's bytes.
            text = self.output_tail.decode(errors="replace").replace("\x00", "")
            lines = text.strip().splitlines()
            if lines and lines[-1].strip():
                return lines[-1].strip()[:500]
        if self.error:
            return self.error.splitlines()[0][:500]
        code = "no exit code" if self.exit_code is None else f"exit {self.exit_code}"
        return f"{self.outcome} ({code})"

    @property
    def hopeless(self) -> bool:
        """Whether no retry can fix it: the command cannot be executed (126) or found (127)."""
        return self.outcome is Outcome.FAILED and self.exit_code in (126, 127)

    @property
    def retryable(self) -> bool:
        """Whether another attempt may fix it: a failure or a timeout of the command, not
        126/127, an operator's stop or signal, or a lost lock."""
        return self.outcome in (Outcome.FAILED, Outcome.TIMED_OUT) and not self.hopeless

    @property
    def closes_slot(self) -> bool:
        """Whether it ends its slot whatever attempts are left: hopeless, or an operator's
        stop."""
        return self.outcome is Outcome.STOPPED or self.hopeless


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
          scheduled: Scheduled | None = None, retries: int = 0,
          attempt: int = 1) -> StartedRun:
    """Record a run as started (and any run its vanished predecessor left as abandoned).

    With a schedule, the attempt is the slot's next (`attempt` is for unscheduled runs)
    and a start of a slot that is done (succeeded, closed, or its attempts spent) raises
    psycopg.errors.CheckViolation (UniqueViolation from a racing start).
    """
    row = conn.execute(query(START, schema), {
        "job": job, "mode": mode, "holder": holder, "holder_pid": holder_pid,
        "fencing_token": fencing_token, "command": command, "retries": retries,
        "attempt": attempt,
        "slot": scheduled and scheduled.slot, "next_slot": scheduled and scheduled.next_slot,
        "schedule": scheduled and scheduled.schedule,
        "timezone": scheduled and scheduled.timezone,
        "grace": scheduled and timedelta(seconds=scheduled.grace)}).fetchone()
    assert row is not None
    return StartedRun(id=row[0], started_at=row[1], attempt=row[2], attempt_limit=row[3])


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
           result: RunResult, *, closes: bool | None = None) -> Finished:
    """Complete the run's row and the job's summary (and its slot's: `closes` says whether
    no attempt may follow, by default as the result says); repeating it changes nothing."""
    row = conn.execute(query(FINISH, schema), {
        "run_id": run_id, "duration": timedelta(seconds=result.duration),
        "exit_code": result.exit_code, "signal": result.signal, "outcome": str(result.outcome),
        "error": result.error, "output_tail": result.output_tail, "empty": Jsonb({}),
        "closes": result.closes_slot if closes is None else closes,
        "hopeless": result.hopeless, "error_line": result.error_line}).fetchone()
    if row is None:
        return Finished(previous_outcome=None, newest=False, recorded=False)
    return Finished(previous_outcome=row[0], newest=bool(row[1]))


def add_note(conn: psycopg.Connection[Any], schema: str, run_id: int, note: str) -> None:
    """Append to a recorded run's error (what its hooks or pings came to)."""
    conn.execute(query(NOTE, schema), {"run_id": run_id, "note": note})


def close_slot(conn: psycopg.Connection[Any], schema: str, job: str, slot: datetime) -> None:
    """No further attempt of the slot, whatever attempts are left."""
    conn.execute(query(CLOSE_SLOT, schema), {"job": job, "slot": slot})
