"""Renew the lock from a thread, and know locally when it must count as lost.

The server's expiry cannot come before the moment the last successful renewal was
*sent* plus the ttl, so that moment, read on the local stopwatch, anchors the local
deadline. Past `sent + ttl - margin - grace` the lock counts as lost: the command gets
SIGTERM, and SIGKILL `grace` later, still `margin` before anyone else can take over.

A renewal answered after that deadline ran at a moment nothing bounds: perhaps on a
promoted standby, after another host took the lock over on the old primary in a write
the promotion lost. So it counts only if the server still writes the timeline the lock
was taken on (no promotion came between, and none of its writes can have been lost);
else the lock is lost (`late`; docs/ha.md, "Late answers"). Answered in time, it ran
while no other holder could exist, whatever the servers' clocks say.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from pglock.errors import PglockError, UsageError
from pglock.lock import clock, lease

# A renewal that fails is retried at this pace until the local deadline.
RETRY_INTERVAL = 1.0
# The smallest margin any lock keeps.
MIN_MARGIN = 1.0
# Why a confirmation answered after the local deadline is a lost lock.
LATE = ("the database confirmed the lock only after its local deadline, on a primary "
        "promoted since it was taken (another host may hold it by now)")


def margin(ttl: float) -> float:
    """Allowance for scheduling stalls and clock-rate error."""
    return max(MIN_MARGIN, ttl / 10)


def grace(ttl: float, kill_after: float) -> float:
    """Time between SIGTERM and SIGKILL when the lock is lost."""
    return min(kill_after, ttl / 4)


def start_deadline(confirmed_at: float, horizon: float) -> float:
    """The last stopwatch time a command may be forked under a lock that a statement sent
    at `confirmed_at` (the acquire, or a renewal) confirmed: past it, the lock may expire
    before the command has its heartbeat and watchdog, so it is not started at all. The
    margin is the heartbeat's own, for stalls and clock-rate error."""
    return confirmed_at + horizon - margin(horizon)


def watched(confirmed_at: float, horizon: float, kill_after: float) -> tuple[float, float]:
    """The watchdog's deadline and grace for a lock a statement sent at `confirmed_at`
    confirmed: its turn after the heartbeat's own local deadline."""
    return (watchdogs_turn(confirmed_at + horizon - slack(horizon, kill_after),
                           margin(horizon)),
            grace(horizon, kill_after))


def watchdogs_turn(at: float, margin: float) -> float:
    """When the watchdog acts on a moment pglock itself acts at (a deadline, a SIGKILL):
    half a margin later, so that it only acts when pglock cannot (stopped, or stuck)."""
    return at + margin / 2


def slack(horizon: float, kill_after: float) -> float:
    """How long before the horizon the lock counts as lost: the margin, then the grace
    the command gets to stop."""
    return margin(horizon) + grace(horizon, kill_after)


def in_time(answered: float, confirmed_at: float, horizon: float, kill_after: float) -> bool:
    """Whether a confirmation of the lock (a renewal, a keep, a retake) answered at
    `answered` came before the local deadline of the confirmation sent at
    `confirmed_at`. One that came later is acted on only if no promotion came between
    (Renewer.same_timeline)."""
    return answered < confirmed_at + horizon - slack(horizon, kill_after)


def late_but_kept(renewer: Renewer) -> bool:
    """A confirmation answered past its deadline counts only when the server still writes
    the lock's timeline; not knowing (the question failed) is a lost lock."""
    try:
        return renewer.same_timeline()
    except (psycopg.Error, PglockError):
        return False


def rides_out(ttl: float, kill_after: float) -> float:
    """The longest outage (a failover) a running lease-mode job rides out for sure: it
    may begin just before a renewal is due (ttl/3 after the last), and it must end, and a
    retried renewal (every RETRY_INTERVAL) land, before the SIGTERM (docs/ttl.md's table;
    doctor holds each platform's failover time against it)."""
    return ttl - slack(ttl, kill_after) - ttl / 3 - RETRY_INTERVAL


def ttl_for(outage: float, kill_after: float) -> float:
    """The shortest ttl, in whole 5 s, whose running jobs ride out an outage (a failover)
    this long (rides_out)."""
    ttl = 5.0
    while rides_out(ttl, kill_after) < outage:
        ttl += 5.0
    return ttl


def check_ttl(ttl: float, kill_after: float) -> None:
    """Refuse a ttl that leaves no room for a retried renewal before the local deadline."""
    if ttl - margin(ttl) - grace(ttl, kill_after) < ttl / 3 + RETRY_INTERVAL:
        raise UsageError(f"--ttl {ttl:g}s is too short: a renewal every ttl/3 and one retry "
                         "must fit before the lock counts as lost (use 5s or more)")


class Renewer(Protocol):
    """One way of keeping a lock: renew() says whether it is still ours (and whether an
    operator asked for the command to stop); it raises when unsure."""

    # Seconds between renewals, and how long after a successful renewal was sent the
    # lock is certainly still ours.
    interval: float
    horizon: float

    def renew(self) -> tuple[lease.Renewal, str | None]: ...

    def same_timeline(self) -> bool: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...

    def lost_reason(self) -> str: ...


class LeaseRenewer:
    """Lease mode: renew the row every ttl/3 on a connection of the heartbeat's own."""

    def __init__(self, claim: lease.Claim,
                 connect: Callable[[], psycopg.Connection[Any]]) -> None:
        self.claim = claim
        self.interval = claim.ttl / 3
        self.horizon = claim.ttl
        self._connect = connect
        self._conn: psycopg.Connection[Any] | None = None

    def renew(self) -> tuple[lease.Renewal, str | None]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return lease.renew(self._conn, self.claim)

    def same_timeline(self) -> bool:
        return self._conn is not None and lease.taken_on_this_timeline(self._conn, self.claim)

    def reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self.reset()

    def lost_reason(self) -> str:
        return "the lock was taken over or cleared"


class Heartbeat:
    """A renewal thread with a stop event; `lost_at` is the local deadline."""

    def __init__(self, renewer: Renewer, *, acquired_sent_at: float, kill_after: float,
                 on_lost: Callable[[], None],
                 on_renewed: Callable[[float], None] | None = None) -> None:
        self.renewer = renewer
        self._on_lost = on_lost
        self._on_renewed = on_renewed
        self.last_sent = acquired_sent_at
        self.kill_after = kill_after
        self.grace = grace(renewer.horizon, kill_after)
        self.margin = margin(renewer.horizon)
        self._slack = slack(renewer.horizon, kill_after)
        self.lost_reason: str | None = None
        # Set once an operator's `pglock stop` is seen: why, and by whom.
        self.stop_requested: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pglock-heartbeat", daemon=True)
        # One wake-up besides the renewals (--expect-duration's MAX): when, and what to call.
        self._alarm: tuple[float, Callable[[], None]] | None = None

    def alarm(self, at: float, call: Callable[[], None]) -> None:
        """Call `call` once, from this thread, at stopwatch time `at` while it still renews
        (it must return at once: a renewal waits for it). Set before start()."""
        self._alarm = (at, call)

    def lost_at(self) -> float:
        """Stopwatch time at which the lock counts as lost without a renewal."""
        return self.last_sent + self.renewer.horizon - self._slack

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> bool:
        """Stop renewing; False if a renewal is stuck on the network (it is abandoned)."""
        self._stop.set()
        self._thread.join(timeout=0.5)
        return not self._thread.is_alive()

    def _wake(self, next_at: float) -> float:
        """The next renewal, or the alarm if it comes first."""
        return next_at if self._alarm is None else min(next_at, self._alarm[0])

    def _loop(self) -> None:
        next_at = self.last_sent + self.renewer.interval
        while not self._stop.wait(max(0.0, self._wake(next_at) - clock.now())):
            if self._alarm is not None and clock.now() >= self._alarm[0]:
                call, self._alarm = self._alarm[1], None
                call()
            if clock.now() < next_at:
                continue
            sent = clock.now()
            try:
                renewal, why = self.renewer.renew()
            except (psycopg.Error, PglockError):
                self.renewer.reset()
                next_at = clock.now() + RETRY_INTERVAL
                continue
            if renewal is lease.Renewal.LOST:
                self.lost_reason = self.renewer.lost_reason()
                self._on_lost()
                return
            if not (in_time(clock.now(), self.last_sent, self.renewer.horizon,
                            self.kill_after) or late_but_kept(self.renewer)):
                self.lost_reason = LATE
                self._on_lost()
                return
            if renewal is lease.Renewal.STOP and self.stop_requested is None:
                # Keep renewing while the command stops: the lock is released normally after.
                self.stop_requested = why or "pglock stop"
                self._on_lost()
            self.last_sent = sent
            if self._on_renewed is not None:
                self._on_renewed(self.lost_at())
            next_at = sent + self.renewer.interval
        # Not reset(): in advisory mode that would end the session holding the lock, and
        # the run's end is not recorded yet (a contender would take the lock and the row
        # in the gap, and the finished run would be recorded lock_lost).
        self.renewer.close()
