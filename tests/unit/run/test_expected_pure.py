"""--expect-duration without a database: the range parsed, a duration judged, the notes a
holder writes and readers find (pglock.settings.durations, pglock.lock.ledger,
pglock.run.expected), the heartbeat's alarm at MAX."""

from __future__ import annotations

import threading

import pytest

from pglock.errors import UsageError
from pglock.lock import clock, heartbeat, lease, ledger
from pglock.lock.ledger import Outcome, RunResult
from pglock.run.expected import judged
from pglock.settings.durations import parse_expected


@pytest.mark.parametrize(("text", "bounds"), [
    ("30s..5m", (30.0, 300.0)), ("1m..", (60.0, None)), ("..2h", (None, 7200.0)),
    (" 1s .. 1s ", (1.0, 1.0)), ("0..1h30m", (0.0, 5400.0)), ("500ms..", (0.5, None)),
])
def test_a_range_has_either_end_or_both(text: str, bounds: tuple[float | None, float | None],
                                        ) -> None:
    assert parse_expected(text) == bounds


@pytest.mark.parametrize(("text", "message"), [
    ("5m", "--expect-duration: '5m' is not a range (examples: 30s..5m, 1m.., ..2h)"),
    ("..", "--expect-duration: '..' is not a range (examples: 30s..5m, 1m.., ..2h)"),
    ("5m..1m", "--expect-duration: 5m..1m: MIN is above MAX"),
    ("..0", "--expect-duration: MAX must be more than 0"),
    ("x..1m", "--expect-duration: 'x' is not a duration (examples: 90, 90s, 5m, 1h30m)"),
    ("..400d", "--expect-duration: ..400d is out of range (each end 0 to 366d)"),
])
def test_a_bad_range_says_why(text: str, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_expected(text)
    assert str(raised.value) == message


@pytest.mark.parametrize(("duration", "error", "side", "note"), [
    (0.25, None, "shorter",
     "ran shorter than expected: 0.25s, less than 1s (--expect-duration)"),
    (1.0, None, None, None), (300.0, None, None, None),
    (312.4, "stopped by --max-runtime", "longer", "stopped by --max-runtime; ran longer than "
     "expected: 312.4s, more than 300s (--expect-duration)"),
])
def test_a_finished_run_is_noted_outside_the_range_and_keeps_its_outcome(
        duration: float, error: str | None, side: str | None, note: str | None) -> None:
    result = RunResult(Outcome.TIMED_OUT, 124, duration, error=error)
    found, said = judged(result, 1.0, 300.0)
    assert said == side and found.outcome is Outcome.TIMED_OUT
    assert found.error == (note if note is not None else error)
    assert found.expected == side


@pytest.mark.parametrize("limit", [300.0, 0.5, 12.345, 86400.0 * 366])
def test_the_slow_note_gives_its_max_back(limit: float) -> None:
    note = ledger.slow_note(limit)
    assert ledger.slow_limit(note) == limit
    # As the error of an open run, after a failed hook's note or before anything.
    assert ledger.slow_limit("on-slow hook exited 1; " + note) == limit
    assert ledger.slow_limit("ran longer than expected: 1s, more than 0.5s "
                             "(--expect-duration)") is None
    assert ledger.slow_limit(None) is None


class Steady:
    """A renewer that always renews."""

    interval = 0.2
    horizon = 30.0

    def renew(self) -> tuple[lease.Renewal, str | None]:
        return lease.Renewal.OURS, None

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass

    def lost_reason(self) -> str:
        return "lost"


def test_the_heartbeat_rings_its_alarm_once_on_time_between_renewals() -> None:
    rung: list[float] = []
    done = threading.Event()
    beat = heartbeat.Heartbeat(Steady(), acquired_sent_at=clock.now(), kill_after=1.0,
                               on_lost=lambda: None)
    at = clock.now() + 0.3
    beat.alarm(at, lambda: (rung.append(clock.now()), done.set()))
    beat.start()
    try:
        assert done.wait(5)
        # Renewals go on after it, and it does not ring again.
        sent = beat.last_sent
        threading.Event().wait(0.5)
        assert beat.last_sent > sent
    finally:
        assert beat.stop()
    assert len(rung) == 1 and at <= rung[0] < at + 0.15
