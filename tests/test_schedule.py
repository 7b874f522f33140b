"""Slots, due dates and overdue detection: pure time arithmetic, no database."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from pglock import schedule
from pglock.errors import UsageError

UTC = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")


def at(*args: int, tz: ZoneInfo = UTC) -> datetime:
    return datetime(*args, tzinfo=tz)  # type: ignore[misc]


def test_slot_is_the_latest_fire_time_at_or_before() -> None:
    every_5 = schedule.parse("*/5 * * * *", "UTC")
    assert schedule.slot(every_5, at(2024, 5, 1, 3, 7, 59)) == at(2024, 5, 1, 3, 5)
    # A start exactly on a fire time belongs to that slot, not the one before.
    assert schedule.slot(every_5, at(2024, 5, 1, 3, 5)) == at(2024, 5, 1, 3, 5)
    assert schedule.slot(every_5, at(2024, 5, 1, 3, 4, 59, 999999)) == at(2024, 5, 1, 3, 0)


def test_slot_is_read_in_the_zone() -> None:
    daily = schedule.parse("0 3 * * *", "Europe/Berlin")
    found = schedule.slot(daily, at(2024, 7, 1, 2, 0))  # 04:00 in Berlin (UTC+2)
    assert found == at(2024, 7, 1, 1, 0)
    assert found.isoformat() == "2024-07-01T03:00:00+02:00"


def test_slots_across_daylight_saving_changes() -> None:
    half_past = schedule.parse("*/30 * * * *", "Europe/Berlin")
    # Autumn: the hour 02:00-03:00 happens twice; each half hour is its own slot.
    info = schedule.slot_info(half_past, at(2024, 10, 27, 2, 10, tz=BERLIN).replace(fold=1))
    assert info.slot.isoformat() == "2024-10-27T02:00:00+01:00"
    assert info.previous.isoformat() == "2024-10-27T02:30:00+02:00"
    # Spring: 02:30 does not exist; the fire time moves to 03:00 as cron moves it.
    nightly = schedule.parse("30 2 * * *", "Europe/Berlin")
    assert schedule.slot(nightly, at(2024, 3, 31, 12, 0, tz=BERLIN)).isoformat() == \
        "2024-03-31T03:00:00+02:00"


def test_slot_info_and_default_grace() -> None:
    hourly = schedule.parse("@hourly", "UTC")
    info = schedule.slot_info(hourly, at(2024, 5, 1, 3, 30))
    assert (info.previous, info.slot, info.next) == (
        at(2024, 5, 1, 2), at(2024, 5, 1, 3), at(2024, 5, 1, 4))
    assert info.default_grace == 360.0
    minutely = schedule.slot_info(schedule.parse("* * * * *", "UTC"), at(2024, 5, 1))
    assert minutely.default_grace == 60.0


def test_due_and_missed_slots() -> None:
    hourly = schedule.parse("0 * * * *", "UTC")
    due_at = at(2024, 5, 1, 4)
    assert schedule.due(hourly, due_at, at(2024, 5, 1, 3, 30), 360) == \
        schedule.Due(due_at, due_at, 0)
    # Within the grace after a slot: pending, not overdue.
    within = schedule.due(hourly, due_at, at(2024, 5, 1, 4, 5), 360)
    assert (within.missed, within.overdue, within.next_fire) == (0, False, at(2024, 5, 1, 5))
    late = schedule.due(hourly, due_at, at(2024, 5, 1, 6, 7), 360)
    assert (late.missed, late.overdue, late.next_fire) == (3, True, at(2024, 5, 1, 7))
    assert schedule.due(hourly, due_at, at(2025, 5, 1), 360).missed == schedule.MISSED_LIMIT


def test_overdue_only_past_the_grace_of_the_slot_after_the_last() -> None:
    daily = schedule.parse("0 3 * * *", "UTC")
    due_at = schedule.next_after(daily, at(2024, 5, 1, 3))

    def overdue(now: datetime) -> bool:
        return schedule.due(daily, due_at, now, 60).overdue

    assert not overdue(at(2024, 5, 2, 2))
    assert not overdue(at(2024, 5, 2, 3, 1))
    assert overdue(at(2024, 5, 2, 3, 1, 1))


@pytest.mark.parametrize(("expr", "words"), [
    ("bad", "is not a cron expression"),
    ("* * * *", "is not a cron expression"),
    ("* * * * * *", "is not a cron expression"),
    ("@reboot", "is not a cron expression"),
    ("61 * * * *", "is not a valid cron expression"),
    ("0 0 30 2 *", "is not a valid cron expression"),
])
def test_bad_expressions_are_usage_errors(expr: str, words: str) -> None:
    with pytest.raises(UsageError, match=words) as raised:
        schedule.parse(expr, "UTC")
    assert str(raised.value).startswith("--schedule: ")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("zone", ["Nowhere/City", "Europe", "", "../etc/passwd", "/etc/passwd"])
def test_bad_zones_are_usage_errors(zone: str) -> None:
    with pytest.raises(UsageError, match="is not a known time zone"):
        schedule.parse("* * * * *", zone)


def test_local_zone_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    assert schedule.parse("* * * * *").zone == "America/New_York"
    monkeypatch.setenv("TZ", ":Asia/Tokyo")
    assert schedule.local_zone()[1] == "Asia/Tokyo"
    monkeypatch.delenv("TZ")
    tz, name = schedule.local_zone()
    assert name and datetime(2024, 1, 1, tzinfo=tz).utcoffset() is not None


def test_croniter_is_imported_only_for_a_schedule() -> None:
    code = ("import sys, pglock.schedule as s; assert 'croniter' not in sys.modules; "
            "s.parse('* * * * *', 'UTC'); assert 'croniter' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missed_slots_count_the_repeated_hour_twice() -> None:
    half_past = schedule.parse("*/30 * * * *", "Europe/Berlin")
    due_at = datetime.fromisoformat("2024-10-27T02:00:00+02:00")
    now = datetime.fromisoformat("2024-10-27T02:40:00+01:00")
    found = schedule.due(half_past, due_at, now, 60)
    assert found.missed == 4
    assert found.next_fire.isoformat() == "2024-10-27T03:00:00+01:00"


def test_a_fixed_time_job_fires_once_in_the_repeated_hour() -> None:
    """Cron starts `30 2 * * *` in the first 02:30 of the autumn night only; croniter
    yields both: the second is no slot, and its absence is no miss."""
    nightly = schedule.parse("30 2 * * *", "Europe/Berlin")
    first = datetime.fromisoformat("2024-10-27T02:30:00+02:00")
    second_pass = datetime.fromisoformat("2024-10-27T02:45:00+01:00")
    # isoformat: an ambiguous wall time never compares equal across zones (PEP 495).
    assert schedule.slot(nightly, second_pass).isoformat() == first.isoformat()
    assert schedule.next_after(nightly, first).isoformat() == "2024-10-28T02:30:00+01:00"
    info = schedule.slot_info(nightly, second_pass)
    assert (info.slot.isoformat(), info.next.isoformat()) == (
        first.isoformat(), "2024-10-28T02:30:00+01:00")
    # The run of the first 02:30 leaves the next day's slot due: nothing missed meanwhile.
    due = schedule.due(nightly, info.next, datetime.fromisoformat("2024-10-27T23:00:00+01:00"),
                       info.default_grace)
    assert not due.overdue
    # A night without a run misses one slot, not two.
    missed = schedule.due(nightly, first, datetime.fromisoformat("2024-10-27T12:00:00+01:00"),
                          info.default_grace)
    assert missed.missed == 1


@pytest.mark.parametrize("expr", ["0 * * * *", "*/20 2 * * *", "@hourly"])
def test_wildcard_jobs_fire_in_both_passes_of_the_repeated_hour(expr: str) -> None:
    plan = schedule.parse(expr, "Europe/Berlin")
    found = schedule.slot(plan, datetime.fromisoformat("2024-10-27T02:45:00+01:00"))
    assert found.astimezone(BERLIN).utcoffset().total_seconds() == 3600  # type: ignore[union-attr]


def test_the_zone_comes_from_tz_then_cron_tz_then_the_host() -> None:
    environ = {"CRON_TZ": "Asia/Tokyo", "TZ": "America/New_York"}
    assert schedule.zone_setting("UTC", environ) == ("UTC", "--tz")
    assert schedule.zone_setting(None, environ) == ("Asia/Tokyo", "CRON_TZ")
    assert schedule.zone_setting(None, {"CRON_TZ": ":Asia/Tokyo"}) == ("Asia/Tokyo", "CRON_TZ")
    assert schedule.zone_setting(None, {"TZ": "America/New_York"}) == (None, "TZ")
    with pytest.raises(UsageError, match=r"^CRON_TZ: 'Mars/Olympus' is not a known time zone"):
        schedule.parse("@daily", "Mars/Olympus", zone_source="CRON_TZ")
