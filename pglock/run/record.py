"""The end of a run, written whatever the database does: retried across reconnects for as
long as the lease lasts anyway, and given up on at that deadline (a server that stopped
answering would block a statement for good; pglock still exits)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple

import psycopg

from pglock.db import bounded, database
from pglock.db.database import Reconnecting
from pglock.errors import PglockError
from pglock.lock import clock, lease, ledger
from pglock.lock.ledger import Outcome, RunResult

log = logging.getLogger(__name__)

# What follows a run's recorded end: the lock released at the end of its hold, renewed
# for another attempt, or released with the write given --connect-timeout only (pglock
# was asked to stop).
Then = Literal["release", "keep", "hurry"]


class Recorded(NamedTuple):
    """What writing a run's end came to."""

    # The result as recorded (lock_lost when the release found the lock no longer ours).
    result: RunResult
    # What recording it learned of the job (None: nothing was written by this call).
    finished: ledger.Finished | None
    # Why the write never took (None: it did).
    failure: str | None
    # When the lock was kept: the stopwatch time its renewal was sent (None: released,
    # lost, or an operator asked it to stop).
    kept_at: float | None
    # When the answer that kept it came (a keep answered past the lock's local deadline
    # is not acted on: docs/ha.md, "Late answers").
    answered: float | None = None


def record_end(session: Reconnecting, claim: lease.Claim, run_id: int, result: RunResult, *,
               then: Then = "release") -> Recorded:
    """Write the end of the run and release the lock at the end of its hold (`keep`: renew
    it for another attempt instead), retrying across reconnects (`hurry`: pglock was asked
    to stop, for --connect-timeout only)."""
    keep = then == "keep"
    # A run that lost its lock to an outage has waited long enough: the lock is gone,
    # and the next acquirer marks the run abandoned. Otherwise a blip at the end of a
    # run is ridden out for up to a ttl, the time the lease lasts anyway.
    hurried = then == "hurry" or result.outcome is Outcome.LOCK_LOST
    patience = session.timeout if hurried else max(session.timeout, claim.ttl)
    deadline = clock.now() + patience
    outcome = Recorded(result, None, "the database did not answer", None)

    def attempt() -> None:
        nonlocal outcome
        sent = clock.now()
        with _within(session.get(), deadline, session.timeout) as conn:
            # One statement: nobody sees the lock free before the run has ended.
            done = ledger.finish(conn, claim, run_id, result, keep=keep)
        # Nothing written: an earlier attempt of ours did commit, before the connection
        # broke, and its release found the lock ours.
        outcome = Recorded(done.result or result if done.recorded else result,
                           done if done.recorded else None, None,
                           sent if done.kept else None, clock.now())

    def failed(failure: str) -> None:
        nonlocal outcome
        outcome = Recorded(outcome.result, outcome.finished, failure, None)

    _bounded(session, attempt, failed, deadline, patience + CANCELLED)
    return outcome


def add_note(session: Reconnecting, claim: lease.Claim, run_id: int, note: str) -> None:
    """Record what the hooks and pings came to with the run, bounded as its end was."""
    def attempt() -> None:
        with _within(session.get(), clock.now() + session.timeout, session.timeout) as conn:
            ledger.add_note(conn, claim, run_id, note)

    def failed(failure: str) -> None:
        log.info("job %r: the note of run %d was not recorded: %s", claim.job, run_id, failure)

    _bounded(session, attempt, failed, clock.now(), session.timeout + CANCELLED)


# How long past its bound a statement may take to be cancelled and answer (or have its
# connection closed): the writer thread is waited for that much longer, so that no
# statement of ours is left waiting on the server when pglock exits.
CANCELLED = 2 * bounded.CANCEL_WAIT + 1.0


@contextlib.contextmanager
def _within(conn: psycopg.Connection[Any], deadline: float,
            bound: float) -> Iterator[psycopg.Connection[Any]]:
    """`conn`, its statements in the section bounded to end by `deadline` (and `bound`)."""
    if not isinstance(conn, bounded.BoundedConnection):
        yield conn
        return
    was, conn.bound = conn.bound, max(0.5, min(bound, deadline - clock.now()))
    try:
        yield conn
    finally:
        conn.bound = was


def unrecorded(run_id: int, failure: str) -> str:
    return f"the end of run {run_id} could not be recorded ({failure}); it stays marked running"


def _bounded(session: Reconnecting, attempt: Callable[[], None],
             failed: Callable[[str], None], deadline: float, wait: float) -> None:
    """`attempt` on a thread, retried every second across reconnects until `deadline`
    (each failure told to `failed`); waited for `wait` seconds, then given up on."""
    def attempts() -> None:
        while True:
            try:
                attempt()
                return
            except (psycopg.Error, PglockError) as error:
                failed(database.first_line(error))
                session.close()
                if clock.now() >= deadline:
                    return
                time.sleep(1.0)

    writer = threading.Thread(target=attempts, name="pglock-record", daemon=True)
    writer.start()
    writer.join(wait)
