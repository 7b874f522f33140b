"""Statements bounded in time on the client, cancelled on the server when they overrun.

A server-side statement_timeout does not end a commit's wait for a synchronous standby
(wait_event SyncRep): with synchronous_standby_names naming a standby that is not
connected, a write waits for good, and goes on waiting after its client is gone. So the
bound is kept here: every wait of a connection of this class (statement, commit) is
given `bound` seconds, then the statement is cancelled (a cancel request, the one thing
that ends a SyncRep wait), its answer awaited briefly, and the connection closed if none
comes. A stop signal cancels the statement in flight the same way (interrupt()).

A cancelled wait for the standby is not a rollback: the server ends it with a WARNING
("canceling wait for synchronous replication ... the transaction has already committed
locally") and reports success. Such a statement counts as failed here (NotConfirmed),
whoever cancelled it: what it wrote may be lost in a failover, and what it returned is
not acted on (docs/ha.md, "A cancelled write").
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import psycopg
from psycopg import errors
from psycopg.abc import PQGen
from psycopg.errors import Diagnostic

# psycopg's own: how often its wait loop lets Python run signal handlers.
_WAIT_INTERVAL = 0.1
# How long a cancel request may take to be delivered, and the cancelled statement then
# to answer: past that the server is not answering at all, and the connection is closed.
CANCEL_WAIT = 2.0

# The server's words for a SyncRep wait it gave up on (syncrep.c), with the statement
# then reported as succeeded. Only the English text is known: with another lc_messages,
# a wait pglock cancelled itself is still caught (NotConfirmed), one cancelled by
# somebody else (pg_cancel_backend) is not.
_SYNC_CANCELLED = "wait for synchronous replication"

# The connections with a statement in flight on the main thread: what a stop signal
# cancels (its handler runs on the main thread, between two polls of the wait).
_in_flight: set[BoundedConnection] = set()


class StatementTimeout(psycopg.OperationalError):
    """The statement did not answer within its bound; it was cancelled."""


class NotConfirmed(psycopg.OperationalError):
    """The statement committed on the primary alone: its wait for a synchronous standby
    was cancelled (by its bound, a stop signal or somebody else)."""


class Stopped(psycopg.OperationalError):
    """The statement was cancelled because pglock was asked to stop (a signal)."""


class BoundedConnection(psycopg.Connection[Any]):
    """A connection whose every wait ends within `bound` seconds (None: unbounded)."""

    bound: float | None = None
    # Set (from the signal handler) when a stop signal cancelled the statement in flight.
    _stopping = False
    _sync_cancelled = False

    def bounded(self, bound: float | None) -> BoundedConnection:
        self.bound = bound
        self.add_notice_handler(self._notice)
        return self

    def _notice(self, diagnostic: Diagnostic) -> None:
        if (diagnostic.severity_nonlocalized == "WARNING"
                and _SYNC_CANCELLED in (diagnostic.message_primary or "")):
            self._sync_cancelled = True

    def wait(self, gen: PQGen[Any], interval: float = _WAIT_INTERVAL,
             timeout: float | None = None) -> Any:
        if self.bound is None or timeout is not None:
            return super().wait(gen, interval, timeout)
        self._stopping = self._sync_cancelled = False
        main = threading.current_thread() is threading.main_thread()
        if main:
            _in_flight.add(self)
        try:
            try:
                result = super().wait(gen, interval, self.bound)
            except errors._WaitTimeout:
                result = self._cancelled(gen, interval)
            except errors.QueryCanceled as error:
                if self._stopping:
                    raise Stopped("cancelled: pglock was asked to stop") from error
                raise
        finally:
            if main:
                _in_flight.discard(self)
        if self._sync_cancelled:
            raise NotConfirmed(
                "the commit was not confirmed by the synchronous standby (its wait was "
                "cancelled; committed on the primary alone, not acted on)")
        return result

    def _cancelled(self, gen: PQGen[Any], interval: float) -> Any:
        """The statement overran: cancel it, and wait briefly for its end."""
        bound = f"{self.bound:g}s"
        try:
            self.cancel_safe(timeout=CANCEL_WAIT)
            result = super().wait(gen, interval, CANCEL_WAIT)
        except errors.QueryCanceled:
            raise StatementTimeout(
                f"no answer within {bound} (the statement was cancelled)") from None
        except (errors._WaitTimeout, errors.CancellationTimeout, psycopg.OperationalError):
            # The server does not answer even a cancel: the connection is unusable.
            self.pgconn.finish()
            raise StatementTimeout(
                f"no answer within {bound}, not even to a cancel (connection closed)"
            ) from None
        if self._sync_cancelled:
            raise NotConfirmed(
                f"the commit was not confirmed by a synchronous standby within {bound} "
                "(is synchronous_standby_names naming a standby that is not connected?); "
                "it was cancelled, committed on the primary alone, and not acted on")
        # It answered just as it was cancelled: a whole answer, kept.
        return result


def interrupt() -> None:
    """Cancel the statements in flight on the main thread (from a stop signal's handler)."""
    for conn in list(_in_flight):
        conn._stopping = True
        # Unreachable: the statement's own bound ends it.
        with contextlib.suppress(psycopg.Error):
            conn.cancel_safe(timeout=CANCEL_WAIT)
