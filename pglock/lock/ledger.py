"""The record of runs: a `runs` row per started run, and the `jobs` summary status reads."""

from __future__ import annotations

import enum
import re
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

import psycopg

from pglock.db.schema import query


class Claim(Protocol):
    """What the record needs of the claim it writes under (lease.Claim): the record is
    written by the lock's holder alone, so each statement names the holder's lock."""

    schema: str
    holder_id: str
    hold: float

    def params(self, **extra: Any) -> dict[str, Any]: ...


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


# Each write is one call of a function of the schema (db/sql/functions.sql),
# SECURITY DEFINER: a run row is written only under a lock the caller holds, and finished
# or noted only by the claim that started it (see lease.py).

# The start of a further attempt (--retries) under the lock the caller still holds; the
# first attempt's start rides in the acquire statement (lease.ACQUIRE). Both carry a
# traced run's ids (NULL: not traced).
START = """
SELECT * FROM {schema}.start_run(
    %(job)s, %(holder_id)s, %(fencing_token)s, %(command)s, %(slot)s, %(schedule)s,
    %(timezone)s, %(next_slot)s, %(grace)s, %(retries)s, %(attempt)s, %(trace_id)s,
    %(span_id)s)
"""

# The end of the run and the release of its lock (or, `keep`, its renewal for the next
# attempt) in one statement; lock_lost when the release finds the lock no longer ours.
FINISH = """
SELECT * FROM {schema}.finish(
    %(run_id)s, %(job)s, %(holder_id)s, %(fencing_token)s, %(min_hold)s, %(keep)s,
    %(duration)s, %(exit_code)s, %(signal)s, %(outcome)s, %(error)s, %(output_tail)b,
    %(closes)s, %(hopeless)s, %(error_line)s, %(lost_error)s, %(lost_error_line)s,
    %(expected)s)
"""

# Notes of what happened after the end was recorded (a failed hook), added to its error.
NOTE = "SELECT {schema}.note(%(run_id)s, %(holder_id)s, %(note)s)"


# --expect-duration's judgement, in words in the run's `error` column (what history shows,
# docs/monitoring.md, "Expected durations"). The holder writes SLOW on its open run when
# it passes MAX (`note`, which appends; reports/jobs.py reads it back from the open run);
# its end replaces the error with the finished run's own note, SHORTER or LONGER, next to
# any other (`; `), and records the side as a fact (RunResult.expected: runs.expected and
# the job's counters, which metrics exports), never read back from the text.
SLOW = "running longer than expected: more than {limit}s (--expect-duration)"
SHORTER = "ran shorter than expected: {took}s, less than {limit}s (--expect-duration)"
LONGER = "ran longer than expected: {took}s, more than {limit}s (--expect-duration)"
_SLOW = re.compile(r"running longer than expected: more than ([0-9]+(?:\.[0-9]+)?)s "
                   r"\(--expect-duration\)")


def seconds_text(seconds: float) -> str:
    """Seconds as a note says them: 300, 0.25, 12.345 (no exponent, no trailing zeros)."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def slow_note(limit: float) -> str:
    return SLOW.format(limit=seconds_text(limit))


def slow_limit(error: str | None) -> float | None:
    """The MAX an open run's holder said it passed (None: it has not said so)."""
    found = None if error is None else _SLOW.search(error)
    return None if found is None else float(found.group(1))


def expected_note(duration: float, low: float | None, high: float | None) -> str | None:
    """What a finished run's duration says against MIN..MAX (None: within it)."""
    if low is not None and duration < low:
        return SHORTER.format(took=seconds_text(duration), limit=seconds_text(low))
    if high is not None and duration > high:
        return LONGER.format(took=seconds_text(duration), limit=seconds_text(high))
    return None


class StartedRun(NamedTuple):
    """The row written before the command starts."""

    id: int
    started_at: datetime
    # 1-based; with --schedule, counted over every host's attempts at the slot.
    attempt: int = 1
    # How many attempts the slot (or, unscheduled, this invocation) may have.
    attempt_limit: int = 1


class RunResult(NamedTuple):
    """How a run ended, as recorded."""

    outcome: Outcome
    exit_code: int | None
    duration: float
    signal: int | None = None
    error: str | None = None
    output_tail: bytes | None = None
    # Outside --expect-duration's range: `shorter` or `longer` (None: within, or no range).
    expected: str | None = None

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

    def lost_at_release(self) -> RunResult:
        """This result as recorded when the lock was cleared or taken over before the
        release (a run that lost its lock while running is already lock_lost)."""
        if self.outcome is Outcome.LOCK_LOST:
            return self
        return self._replace(
            outcome=Outcome.LOCK_LOST,
            error="lock lost: it was cleared or taken over before the command ended")

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


class Scheduled(NamedTuple):
    """What a scheduled run records about its schedule."""

    schedule: str
    timezone: str
    slot: datetime
    next_slot: datetime
    grace: float


class RunStart(NamedTuple):
    """What a run's start record says, beyond its claim."""

    command: str
    scheduled: Scheduled | None = None
    retries: int = 0
    # Numbers an unscheduled run's attempts; a scheduled one gets its slot's next.
    attempt: int = 1
    # A traced run's W3C trace id and the id of its span, in hex (None: not traced).
    trace_id: str | None = None
    span_id: str | None = None


def start_params(run: RunStart) -> dict[str, Any]:
    """A start as query parameters (of the acquire and start statements)."""
    scheduled = run.scheduled
    slot = {} if scheduled is None else {"slot": scheduled.slot}
    return {**slot, "command": run.command, "retries": run.retries, "attempt": run.attempt,
            "trace_id": run.trace_id, "span_id": run.span_id,
            "next_slot": scheduled and scheduled.next_slot,
            "schedule": scheduled and scheduled.schedule,
            "timezone": scheduled and scheduled.timezone,
            "grace": scheduled and timedelta(seconds=scheduled.grace)}


def start(conn: psycopg.Connection[Any], claim: Claim, run: RunStart) -> StartedRun:
    """Record a further attempt as started under the lock `claim` holds (and any run its
    vanished predecessor left as abandoned); the first one is recorded by the acquire.

    With a schedule, the attempt is the slot's next and a start of a slot that is done
    (succeeded, closed, or its attempts spent) raises psycopg.errors.CheckViolation
    (UniqueViolation from a racing start); a claim that no longer holds the lock raises
    psycopg.errors.NoDataFound.
    """
    row = conn.execute(query(START, claim.schema),
                       claim.params(**start_params(run))).fetchone()
    assert row is not None
    return StartedRun(id=row[0], started_at=row[1], attempt=row[2], attempt_limit=row[3])


class Finished(NamedTuple):
    """What recording a run's end (and letting its lock go) came to."""

    # The job's last outcome before this run's (None: no run of it had finished).
    previous_outcome: str | None
    # This run is the job's newest finished one (not a run abandoned and finishing late).
    newest: bool
    # This call recorded its end (False: a repeat found nothing left to record).
    recorded: bool = True
    # The lock was still ours when released (or renewed): else the run is lock_lost.
    ours: bool = True
    # The lock was renewed for another attempt (not released).
    kept: bool = False
    # The result as recorded (lock_lost when the lock was no longer ours).
    result: RunResult | None = None


def finish(conn: psycopg.Connection[Any], claim: Claim, run_id: int, result: RunResult, *,
           keep: bool = False) -> Finished:
    """Complete the run's row and the job's summary (and its slot's, when no attempt may
    follow), and release the lock at acquisition + the claim's hold (or, `keep`, renew it
    for another attempt: an operator's stop seen there releases it at once and closes the
    slot); repeating it changes nothing."""
    lost = result.lost_at_release()
    # An operator stopped it: the lock goes to the next contender at once, no hold.
    hold = 0.0 if result.outcome is Outcome.STOPPED else claim.hold
    row = conn.execute(query(FINISH, claim.schema), claim.params(
        run_id=run_id, min_hold=timedelta(seconds=hold), keep=keep,
        duration=timedelta(seconds=result.duration), exit_code=result.exit_code,
        signal=result.signal, outcome=str(result.outcome), error=result.error,
        output_tail=result.output_tail,
        closes=result.closes_slot,
        hopeless=result.hopeless, error_line=result.error_line,
        lost_error=lost.error, lost_error_line=lost.error_line,
        expected=result.expected)).fetchone()
    assert row is not None
    ours, kept, recorded, previous, newest = row
    return Finished(previous_outcome=previous, newest=bool(newest), recorded=bool(recorded),
                    ours=bool(ours), kept=bool(kept), result=result if ours else lost)


def add_note(conn: psycopg.Connection[Any], claim: Claim, run_id: int, note: str) -> None:
    """Append to a recorded run's error (what its hooks or pings came to)."""
    conn.execute(query(NOTE, claim.schema),
                 {"run_id": run_id, "holder_id": claim.holder_id, "note": note})
