"""The calendar's missed slots: the fire times of a job's schedule counted a day at a time
(exactly as the schedule module steps through them, over DST changes too), for a year
of a minutely job as for a month of a daily one; and cells of one size whatever the
window."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit import strategies

from pglock.reports import dashboard
from pglock.reports.dashboard import Day
from pglock.serve import charts
from pglock.settings import schedule


def stepped(plan: schedule.Schedule, first: datetime, now: datetime) -> dict[date, int]:
    """The fire times one at a time (what the calendar counted before, unbounded here)."""
    counts: dict[date, int] = {}
    moment, end = first - timedelta(microseconds=1), now - timedelta(minutes=10)
    while (moment := schedule.next_after(plan, moment)) <= end:
        counts[moment.astimezone(UTC).date()] = counts.get(moment.astimezone(UTC).date(), 0) + 1
    return counts


EXPRESSIONS = ["* * * * *", "*/7 * * * *", "30 2 * * *", "0 */3 * * 1-5", "15,45 1-3 * * *",
               "@daily", "@hourly", "0 0 1 * *", "5 23 * * 0", "*/20 0-4 29 2,3 *",
               "0 0 */2 * 1", "59 23 31 12 *", "0,30 0-2 * 3,10,11 *",
               # One-value ranges, which croniter's own reading takes for `*` (sweep D5).
               "0 1-1 * * *", "5-5,40 2-2/3 * * *", "1-1/5 * * * *"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
         "America/Santiago", "Pacific/Chatham", "America/Havana"]


# Each example steps through up to 6,000 fire times the slow way: fewer examples.
@settings(parent=strategies.PURE, max_examples=60)
@given(expr=st.sampled_from(EXPRESSIONS), zone=st.sampled_from(ZONES),
       first=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 1),
                          timezones=st.just(UTC)),
       span=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=4)))
def test_fire_times_by_day_are_those_the_schedule_steps_through(
        expr: str, zone: str, first: datetime, span: timedelta) -> None:
    plan = schedule.parse(expr, zone)
    assert dashboard._fires_by_day(plan, first, first + span) == stepped(plan, first,
                                                                         first + span)


@pytest.mark.parametrize(("expr", "daily"), [
    ("0 1-1 * * *", 1), ("5-5 * * * *", 24), ("1-1/5 3-3 * * *", 1), ("0-0 0-23/12 * * *", 2)])
def test_one_value_ranges_are_read_as_run_reads_them(expr: str, daily: int) -> None:
    """`1-1` is the one value 1, not `*` as croniter reads it: a healthy job's calendar
    showed 22 missed slots a day (sweep D5)."""
    first, now = datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 11, 28, tzinfo=UTC)
    counts = dashboard._fires_by_day(schedule.parse(expr, "UTC"), first, now)
    assert set(counts.values()) == {daily} and len(counts) == 8


def test_a_minutely_jobs_year_is_counted_to_its_end() -> None:
    """Before, the count stopped after 20,000 fire times: 351 days of a year were 'none'."""
    first, now = datetime(2025, 11, 27, tzinfo=UTC), datetime(2026, 11, 27, 12, tzinfo=UTC)
    counts = dashboard._fires_by_day(schedule.parse("* * * * *", "UTC"), first, now)
    assert len(counts) == 366 and counts[date(2026, 11, 26)] == 1440
    assert counts[now.date()] == 12 * 60 - 10 + 1  # up to the grace of 10 minutes
    berlin = schedule.parse("* * * * *", "Europe/Berlin")
    year = dashboard._fires_by_day(berlin, first, now)
    assert len(year) == 366 and set(year.values()) == {1440, counts[now.date()]}
    for change in (datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 10, 24, tzinfo=UTC)):
        around = change, change + timedelta(days=3)
        assert dashboard._fires_by_day(berlin, *around) == stepped(berlin, *around)


@pytest.mark.slow
def test_dst_days_of_fixed_time_jobs_are_counted_as_cron_fires_them() -> None:
    for expr in ("30 2 * * *", "0,30 1-3 * * *", "*/15 * * * *"):
        for zone in ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe"):
            plan = schedule.parse(expr, zone)
            for start in (datetime(2026, 3, 6, tzinfo=UTC), datetime(2026, 3, 26, tzinfo=UTC),
                          datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 23, tzinfo=UTC),
                          datetime(2026, 10, 30, tzinfo=UTC), datetime(2026, 4, 3, tzinfo=UTC)):
                around = start, start + timedelta(days=6)
                assert dashboard._fires_by_day(plan, *around) == stepped(plan, *around), (
                    expr, zone, start)


def _days(count: int) -> list[Day]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [Day(start + timedelta(days=i), {"succeeded": 2}, 0, 0) for i in range(count)]


def test_calendar_cells_have_one_size_whatever_the_window() -> None:
    sizes = set()
    for count in (7, 30, 90, 366):
        drawn = str(charts.calendar(_days(count), "t"))
        cells = re.findall(r'<rect class="day [^"]+" x="\d+" y="\d+" width="(\d+)" '
                           r'height="(\d+)"', drawn)
        assert len(cells) == count
        sizes |= set(cells)
        width = int(re.search(r'<svg [^>]*width="(\d+)"', drawn).group(1))  # type: ignore[union-attr]
        assert width == charts.DAY_LABELS + ((count + 3 + 6) // 7) * (charts.CELL + charts.GAP)
        assert "<title>Thu 2026-01-01: 2 succeeded</title>" in drawn
        assert ">Jan</text>" in drawn
    assert sizes == {(str(charts.CELL), str(charts.CELL))}
