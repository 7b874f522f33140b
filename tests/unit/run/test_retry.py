"""The backoff between attempts (--retries, --retry-delay) and what is retried."""

from __future__ import annotations

import pytest

from pglock.lock.ledger import Outcome, RunResult
from pglock.run import retry


@pytest.mark.parametrize(("base", "failed", "expected"), [
    (30.0, 1, 30.0), (30.0, 2, 60.0), (30.0, 3, 120.0), (30.0, 7, 1920.0),
    # Capped at an hour...
    (30.0, 8, 3600.0), (30.0, 100, 3600.0), (30.0, 10_000, 3600.0),
    # ... or at the delay itself, when that is longer.
    (7200.0, 1, 7200.0), (7200.0, 5, 7200.0),
    (0.0, 1, 0.0), (0.0, 50, 0.0), (1.0, 2, 2.0),
])
def test_delays_double_up_to_the_cap(base: float, failed: int, expected: float) -> None:
    assert retry.nominal(base, failed) == expected


@pytest.mark.parametrize("draw", [0.8, 1.0, 1.2])
def test_jitter_moves_a_delay_by_at_most_a_fifth(draw: float) -> None:
    bounds: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        bounds.append((low, high))
        return draw

    assert retry.delay(10.0, 2, uniform) == pytest.approx(20.0 * draw)
    assert bounds == [(0.8, 1.2)]


def test_real_jitter_stays_within_its_bounds_and_delays_grow() -> None:
    for failed in range(1, 12):
        found = retry.delay(1.0, failed)
        assert 0.8 * retry.nominal(1.0, failed) <= found <= 1.2 * retry.nominal(1.0, failed)
    # Even at the extremes of the jitter, the second wait is longer than the first.
    assert 1.2 * retry.nominal(1.0, 1) < 0.8 * retry.nominal(1.0, 2)


@pytest.mark.parametrize(("result", "retryable", "closes", "hopeless"), [
    (RunResult(Outcome.FAILED, 1, 1.0), True, False, False),
    (RunResult(Outcome.TIMED_OUT, 143, 1.0), True, False, False),
    (RunResult(Outcome.FAILED, 126, 0.0), False, True, True),
    (RunResult(Outcome.FAILED, 127, 0.0), False, True, True),
    (RunResult(Outcome.STOPPED, 143, 1.0), False, True, False),
    (RunResult(Outcome.KILLED, 143, 1.0, signal=15), False, False, False),
    (RunResult(Outcome.LOCK_LOST, 143, 1.0), False, False, False),
    (RunResult(Outcome.SUCCEEDED, 0, 1.0), False, False, False),
])
def test_what_is_retried(result: RunResult, retryable: bool, closes: bool,
                         hopeless: bool) -> None:
    assert (result.retryable, result.closes_slot, result.hopeless) == (
        retryable, closes, hopeless)


@pytest.mark.parametrize(("result", "line"), [
    (RunResult(Outcome.FAILED, 4, 1.0, output_tail=b"starting\nERROR: disk full\n\n"),
     "ERROR: disk full"),
    (RunResult(Outcome.FAILED, 127, 0.0, error="command not found: nope\nmore"),
     "command not found: nope"),
    (RunResult(Outcome.FAILED, 3, 1.0), "failed (exit 3)"),
    (RunResult(Outcome.FAILED, 1, 1.0, output_tail=b"\x00" * 100), "failed (exit 1)"),
    (RunResult(Outcome.FAILED, 1, 1.0, output_tail=b"bad\x00 byte\n"), "bad byte"),
    (RunResult(Outcome.ABANDONED, None, 1.0), "abandoned (no exit code)"),
])
def test_the_error_line_of_a_dead_slot(result: RunResult, line: str) -> None:
    assert result.error_line == line
