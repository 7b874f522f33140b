"""The soak's schedule and expectations, without a fleet: the seed fixes the faults, and
the expected slots are the minutes every host's cron reached (tests/soak)."""

from __future__ import annotations

from soak.main import expected_slots
from soak.nemesis import MAX_OFFSET, plan


def test_one_seed_one_schedule_of_faults() -> None:
    first = plan(7, 600, 5, 10.0, (4.0, 12.0))
    assert first == plan(7, 600, 5, 10.0, (4.0, 12.0))
    assert first != plan(8, 600, 5, 10.0, (4.0, 12.0))
    assert all(10 < p.at < 600 and 0 <= p.host < 5 for p in first)
    assert all(1 <= p.seconds <= 20 for p in first if p.kind in ("partition", "freeze-host"))
    assert all(1 <= abs(p.offset) <= MAX_OFFSET for p in first)


def test_without_a_compiler_the_same_faults_less_the_clock_ones() -> None:
    every = plan(7, 600, 5, 10.0, (4.0, 12.0))
    assert [p for p in every if p.kind != "clock"] == plan(7, 600, 5, 10.0, (4.0, 12.0),
                                                            clock=False)


def test_expected_slots_leave_a_clock_offset_of_margin_at_both_ends() -> None:
    # Fired for 3 minutes from 5 s before a minute boundary: that first minute is out (a
    # host whose clock ran 9 s fast would have fired it before the start), the next two
    # are in, and the one after the end never came.
    start = 1_800_000_000 - 5.0
    assert expected_slots(start, start + 180) == [1_800_000_060.0, 1_800_000_120.0]
