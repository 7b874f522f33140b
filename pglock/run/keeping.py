"""Keeping the lock: the renewer of each mode, the command supervised to its end with the
lock renewed, and the lock held through the backoff between two attempts."""

from __future__ import annotations

import os
import select

import psycopg

from pglock.db.database import Reconnecting
from pglock.errors import ExitStatus, PglockError
from pglock.lock import advisory, clock, lease
from pglock.lock.heartbeat import (
    RETRY_INTERVAL,
    LeaseRenewer,
    Renewer,
    in_time,
    late_but_kept,
    slack,
)
from pglock.lock.ledger import Outcome, RunResult
from pglock.run import output
from pglock.run.supervise import SignalGate, Supervision


def renewer(session: Reconnecting, claim: lease.Claim) -> Renewer:
    """How the lock is kept in its mode: the lease row on a connection of its own, or the
    advisory session lock (with its row) on the session."""
    if claim.mode == "advisory":
        return advisory.AdvisoryRenewer(claim, session)
    # One attempt per renewal: the heartbeat's own 1 s cadence is the retry (docs/ttl.md).
    return LeaseRenewer(claim, lambda: session.connect(claim.ttl / 3, claim.ttl / 3, once=True))


def horizon(claim: lease.Claim) -> float:
    """How long after a confirmed acquire or renewal the lock is certainly ours, in its
    mode (the renewer's horizon, known before any renewer exists)."""
    return advisory.horizon(claim.ttl) if claim.mode == "advisory" else claim.ttl


def supervise(supervision: Supervision, capture: output.Capture | None,
              session: Reconnecting) -> tuple[RunResult, int]:
    """Run to the end with the lease renewed; the result (with the output tail) and exit code."""
    if capture is not None:
        capture.start()
    supervision.heartbeat.start()
    try:
        result, code = supervision.result(supervision.wait())
        if capture is not None:
            # Still renewing: helpers the command left behind may be finishing their output.
            result = result._replace(output_tail=capture.finish())
    finally:
        if not supervision.heartbeat.stop():
            session.abandon()
    if supervision.child.stand_down() and result.outcome is not Outcome.LOCK_LOST:
        result = result._replace(
            outcome=Outcome.LOCK_LOST,
            error="lock lost: pglock was stopped past the lock's deadline, and its watchdog "
                  "stopped the command")
        code = ExitStatus.INTERNAL
    return result, code


def hold_through(renewer: Renewer, gate: SignalGate, kill_after: float, wait: float,
                 renewed_at: float) -> tuple[str | None, float, str | None]:
    """Hold the lock through the wait before the next attempt, renewing it on this thread;
    why the wait ended early ('signal', 'stop', 'lost'; None: it did not), the stopwatch
    time the last renewal was sent (the next attempt's heartbeat counts from it), and an
    operator's stop's reason."""
    # The same local deadline the heartbeat keeps while a command runs.
    lost_before = slack(renewer.horizon, kill_after)
    end = clock.now() + wait
    next_renewal = renewed_at + renewer.interval
    gate.between = True
    try:
        while True:
            now = clock.now()
            if gate.stop_signal is not None:
                return "signal", renewed_at, None
            if now >= renewed_at + renewer.horizon - lost_before:
                return "lost", renewed_at, None
            if now >= end:
                return None, renewed_at, None
            if now >= next_renewal:
                try:
                    renewal, reason = renewer.renew()
                except (psycopg.Error, PglockError):
                    renewer.reset()
                    next_renewal = now + RETRY_INTERVAL
                    continue
                if renewal is lease.Renewal.LOST or not (in_time(
                        clock.now(), renewed_at, renewer.horizon, kill_after)
                        or late_but_kept(renewer)):
                    return "lost", renewed_at, None
                if renewal is lease.Renewal.STOP:
                    return "stop", renewed_at, reason
                renewed_at, next_renewal = now, now + renewer.interval
            ready, _, _ = select.select([gate.wake_r], [], [],
                                        max(0.0, min(end, next_renewal) - clock.now()))
            if ready:
                os.read(gate.wake_r, 512)
    finally:
        gate.between = False
