"""The lock's local deadline: margin, grace, the shortest ttl, lost_at (pglock.lock.heartbeat)."""

from __future__ import annotations

import pytest

from pglock.errors import ExitStatus, UsageError
from pglock.lock import heartbeat


@pytest.mark.parametrize(("ttl", "margin"), [(1, 1.0), (5, 1.0), (10, 1.0), (30, 3.0),
                                             (60, 6.0), (3600, 360.0)])
def test_margin_is_a_tenth_of_the_ttl_and_at_least_a_second(ttl: float, margin: float) -> None:
    assert heartbeat.margin(ttl) == margin


@pytest.mark.parametrize(("ttl", "kill_after", "grace"), [(60, 10, 10.0), (20, 10, 5.0),
                                                          (5, 10, 1.25), (60, 0, 0.0),
                                                          (3600, 10, 10.0)])
def test_grace_is_kill_after_but_at_most_a_quarter_ttl(ttl: float, kill_after: float,
                                                       grace: float) -> None:
    assert heartbeat.grace(ttl, kill_after) == grace


@pytest.mark.parametrize(("ttl", "kill_after"), [(4.9, 10), (5, 10), (60, 10), (3600, 3600),
                                                 (4, 0.5), (3, 0)])
def test_ttls_that_leave_room_for_a_retried_renewal(ttl: float, kill_after: float) -> None:
    heartbeat.check_ttl(ttl, kill_after)
    slack = heartbeat.margin(ttl) + heartbeat.grace(ttl, kill_after)
    # The invariant check_ttl guards: a renewal every ttl/3, one retry, then the deadline.
    assert ttl - slack >= ttl / 3 + heartbeat.RETRY_INTERVAL


@pytest.mark.parametrize(("ttl", "kill_after"), [(4.7, 10), (4, 10), (2, 10), (1, 0), (0, 10),
                                                 (3, 1)])
def test_ttls_too_short_are_usage_errors(ttl: float, kill_after: float) -> None:
    with pytest.raises(UsageError) as raised:
        heartbeat.check_ttl(ttl, kill_after)
    assert str(raised.value) == (
        f"--ttl {ttl:g}s is too short: a renewal every ttl/3 and one retry must fit before "
        "the lock counts as lost (use 5s or more)")
    assert raised.value.exit_status is ExitStatus.USAGE


class Renewals:
    """A Renewer that is never asked to renew (the thread is not started)."""

    def __init__(self, horizon: float) -> None:
        self.horizon = horizon
        self.interval = horizon / 3

    def renew(self) -> bool:
        raise AssertionError("not started")

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass

    def lost_reason(self) -> str:
        return "lost"


@pytest.mark.parametrize(("ttl", "kill_after", "sent", "lost_at"), [
    (60, 10, 100.0, 100 + 60 - 6 - 10),
    (5, 10, 0.0, 5 - 1 - 1.25),
    (30, 2, 7.5, 7.5 + 30 - 3 - 2),
])
def test_the_lock_counts_as_lost_margin_and_grace_before_the_server_expiry(
        ttl: float, kill_after: float, sent: float, lost_at: float) -> None:
    beat = heartbeat.Heartbeat(Renewals(ttl), acquired_sent_at=sent, kill_after=kill_after,
                               on_lost=lambda: None)
    assert beat.lost_at() == pytest.approx(lost_at)
    # SIGKILL follows SIGTERM `grace` later, still `margin` before anyone can take over.
    assert beat.lost_at() + beat.grace + beat.margin == pytest.approx(sent + ttl)
    beat.last_sent = sent + 20
    assert beat.lost_at() == pytest.approx(lost_at + 20)


@pytest.mark.parametrize(("sent", "horizon", "deadline"), [
    (100.0, 60.0, 154.0),   # ttl 60s: margin 6s
    (100.0, 6.0, 105.0),    # margin at least a second
    (0.0, 3600.0, 3240.0),  # a tenth of an hour
])
def test_the_start_deadline_is_the_horizon_less_the_margin(sent: float, horizon: float,
                                                           deadline: float) -> None:
    assert heartbeat.start_deadline(sent, horizon) == deadline
    # At least a second of the lock is left for the fork and the watchdog's start.
    assert sent + horizon - heartbeat.start_deadline(sent, horizon) >= heartbeat.MIN_MARGIN


@pytest.mark.parametrize(("outage", "ttl"), [(10, 35), (45, 100), (60, 130), (120, 235)])
def test_the_ttl_for_an_outage_is_the_shortest_that_rides_it_out(outage: float,
                                                                 ttl: float) -> None:
    # ha.md's Patroni rule gives 100 s for a 45 s failover; RDS Multi-AZ's 120 s needs 235 s.
    assert heartbeat.ttl_for(outage, 10) == ttl
    assert heartbeat.rides_out(ttl, 10) >= outage > heartbeat.rides_out(ttl - 5, 10)
