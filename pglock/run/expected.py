"""--expect-duration MIN..MAX: a finished run judged against it, and the one moment a
running one passes MAX (docs/monitoring.md, "Expected durations").

Nothing here stops the command (--max-runtime does): a run outside the range keeps its
outcome, and the judgement goes where readers find it: the run's `error` note in words
(ledger.SLOW, SHORTER, LONGER), its side as a fact (RunResult.expected: runs.expected and
the job's counters), the event log and --on-slow.
"""

from __future__ import annotations

import contextlib
import logging
import threading

import psycopg

from pglock.db.database import Reconnecting
from pglock.errors import PglockError
from pglock.lock import clock, lease, ledger
from pglock.lock.heartbeat import Heartbeat
from pglock.lock.ledger import RunResult
from pglock.run.notify import Notifier

log = logging.getLogger(__name__)


def judged(result: RunResult, low: float | None, high: float | None,
           ) -> tuple[RunResult, str | None]:
    """The result with its duration's note added to its error and its side recorded
    (`expected`) when outside MIN..MAX, and which side (`shorter`, `longer`; None: within,
    or no range)."""
    note = ledger.expected_note(result.duration, low, high)
    if note is None:
        return result, None
    error = note if not result.error else f"{result.error}; {note}"
    side = "shorter" if low is not None and result.duration < low else "longer"
    return result._replace(error=error, expected=side), side


class SlowWatch:
    """One attempt's passage of MAX. The heartbeat, which already wakes on the stopwatch to
    renew the lock, wakes at MAX too and calls `passed`; what follows runs on a thread of its
    own, so that neither a slow database nor a slow hook delays a renewal: the open run noted
    slow (on a connection of its own: status, check and metrics on any host see it), the
    `slow` event, then --on-slow."""

    def __init__(self, session: Reconnecting, claim: lease.Claim, notifier: Notifier,
                 limit: float) -> None:
        self.session, self.claim, self.notifier, self.limit = session, claim, notifier, limit
        self.started = 0.0
        self.run_id = 0
        self.env: dict[str, str] = {}
        self._thread: threading.Thread | None = None

    def arm(self, heartbeat: Heartbeat, run_id: int, env: dict[str, str]) -> None:
        """Watch the attempt of run `run_id`, started now."""
        self.started, self.run_id, self.env = clock.now(), run_id, env
        heartbeat.alarm(self.started + self.limit, self.passed)

    def passed(self) -> None:
        self._thread = threading.Thread(target=self._tell, name="pglock-slow", daemon=True)
        self._thread.start()

    def _tell(self) -> None:
        running_for = clock.now() - self.started
        try:
            conn = self.session.connect()
            with contextlib.closing(conn):
                ledger.add_note(conn, self.claim, self.run_id, ledger.slow_note(self.limit))
        except (psycopg.Error, PglockError) as error:
            # Status cannot show it slow then; the event and the hook still tell.
            log.info("job %r: run %d was not noted slow: %s", self.claim.job, self.run_id,
                     error)
        self.notifier.slow(running_for, self.limit, self.env)

    def join(self, timeout: float) -> None:
        """Let a hook that is still running end before pglock does (bounded)."""
        if self._thread is not None:
            self._thread.join(timeout)
