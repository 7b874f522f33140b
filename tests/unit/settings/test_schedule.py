"""Slots, due dates and overdue detection: pure time arithmetic, no database."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given

from pglock.errors import UsageError
from pglock.settings import schedule

from .. import strategies

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
    ("61 * * * *", "is not a cron expression cron reads alike"),
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


def test_missed_slots_count_the_repeated_hour_twice() -> None:
    half_past = schedule.parse("*/30 * * * *", "Europe/Berlin")
    due_at = datetime.fromisoformat("2024-10-27T02:00:00+02:00")
    now = datetime.fromisoformat("2024-10-27T02:40:00+01:00")
    found = schedule.due(half_past, due_at, now, 60)
    assert found.missed == 4
    assert found.next_fire.isoformat() == "2024-10-27T03:00:00+01:00"


def iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(("expr", "stored"), [
    ("*/5 * * * *", "*/5 * * * *"),
    ("  0   3 * * *  ", "0 3 * * *"),
    ("0\t3 * *\t*", "0 3 * * *"),
    ("@DAILY", "@daily"),
    ("@Hourly", "@hourly"),
    ("@annually", "@annually"),
    ("0 0 29 2 *", "0 0 29 2 *"),
    ("0 0 * * 7", "0 0 * * 7"),
    ("0 0 1-31/2 * *", "0 0 1-31/2 * *"),
    ("0 9 * * MON-FRI", "0 9 * * MON-FRI"),
])
def test_expressions_are_stored_normalized(expr: str, stored: str) -> None:
    assert schedule.parse(expr, "UTC").expr == stored


@pytest.mark.parametrize(("expr", "reason"), [
    ("0 0 31 4 *", "failed to find next date"),
])
def test_expressions_that_never_fire_or_do_not_parse_say_why(expr: str, reason: str) -> None:
    with pytest.raises(UsageError) as raised:
        schedule.parse(expr, "UTC")
    message = str(raised.value)
    assert message.startswith(f"--schedule: {expr!r} is not a valid cron expression (")
    assert reason in message


# (expression, zone, moment) -> (previous slot, slot, next fire), all as ISO strings.
SLOTS = [
    ("*/5 * * * *", "UTC", "2024-05-01T03:07:59+00:00",
     ("2024-05-01T03:00:00+00:00", "2024-05-01T03:05:00+00:00", "2024-05-01T03:10:00+00:00")),
    ("0 3 * * *", "UTC", "2024-05-01T03:00:00+00:00",
     ("2024-04-30T03:00:00+00:00", "2024-05-01T03:00:00+00:00", "2024-05-02T03:00:00+00:00")),
    ("0 3 * * *", "UTC", "2024-05-01T02:59:59.999999+00:00",
     ("2024-04-29T03:00:00+00:00", "2024-04-30T03:00:00+00:00", "2024-05-01T03:00:00+00:00")),
    ("@monthly", "UTC", "2024-03-15T00:00:00+00:00",
     ("2024-02-01T00:00:00+00:00", "2024-03-01T00:00:00+00:00", "2024-04-01T00:00:00+00:00")),
    ("0 0 29 2 *", "UTC", "2025-06-01T00:00:00+00:00",
     ("2020-02-29T00:00:00+00:00", "2024-02-29T00:00:00+00:00", "2028-02-29T00:00:00+00:00")),
    ("0 9 * * MON-FRI", "UTC", "2024-05-04T12:00:00+00:00",  # a Saturday
     ("2024-05-02T09:00:00+00:00", "2024-05-03T09:00:00+00:00", "2024-05-06T09:00:00+00:00")),
    # The same instant, read in another zone, falls in another day's slot.
    ("0 3 * * *", "Asia/Kolkata", "2024-05-01T20:00:00+00:00",
     ("2024-04-30T03:00:00+05:30", "2024-05-01T03:00:00+05:30", "2024-05-02T03:00:00+05:30")),
    ("0 3 * * *", "America/Los_Angeles", "2024-05-01T20:00:00+00:00",
     ("2024-04-30T03:00:00-07:00", "2024-05-01T03:00:00-07:00", "2024-05-02T03:00:00-07:00")),
    # Spring forward in New York: 02:30 does not exist on 10 March; cron runs it at 03:00.
    ("30 2 * * *", "America/New_York", "2024-03-10T12:00:00+00:00",
     ("2024-03-09T02:30:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-11T02:30:00-04:00")),
    # Autumn in Berlin: the hour from 02:00 comes twice; each is its own slot.
    ("0 * * * *", "Europe/Berlin", "2024-10-27T02:30:00+01:00",
     ("2024-10-27T02:00:00+02:00", "2024-10-27T02:00:00+01:00", "2024-10-27T03:00:00+01:00")),
    ("0 * * * *", "Europe/Berlin", "2024-03-31T03:30:00+02:00",
     ("2024-03-31T01:00:00+01:00", "2024-03-31T03:00:00+02:00", "2024-03-31T04:00:00+02:00")),
]


@pytest.mark.parametrize(("expr", "zone", "moment", "expected"), SLOTS)
def test_slot_info_table(expr: str, zone: str, moment: str,
                         expected: tuple[str, str, str]) -> None:
    plan = schedule.parse(expr, zone)
    info = schedule.slot_info(plan, iso(moment))
    assert (info.previous.isoformat(), info.slot.isoformat(), info.next.isoformat()) == expected
    # The slot is the one of the moment, and the next fire time is strictly after it.
    assert schedule.slot(plan, iso(moment)) == info.slot
    assert schedule.next_after(plan, info.slot) == info.next
    assert schedule.slot(plan, info.slot) == info.slot


@pytest.mark.parametrize(("expr", "grace"), [
    ("* * * * *", 60.0),
    ("*/5 * * * *", 60.0),
    ("*/15 * * * *", 90.0),
    ("@hourly", 360.0),
    ("@daily", 8640.0),
    ("@weekly", 60480.0),
])
def test_default_grace_is_a_tenth_of_the_interval_and_at_least_a_minute(expr: str,
                                                                        grace: float) -> None:
    info = schedule.slot_info(schedule.parse(expr, "UTC"), at(2024, 5, 1, 12, 34))
    assert info.default_grace == grace


@pytest.mark.parametrize("moment", ["2024-10-27T02:30:00+01:00", "2024-03-31T03:30:00+02:00"])
def test_default_grace_across_daylight_saving_changes(moment: str) -> None:
    hourly = schedule.parse("0 * * * *", "Europe/Berlin")
    assert schedule.slot_info(hourly, iso(moment)).default_grace == 360.0


@pytest.mark.parametrize(("now", "grace", "missed", "next_fire"), [
    ("2024-05-01T03:59:59+00:00", 360, 0, "2024-05-01T04:00:00+00:00"),  # before: no croniter
    ("2024-05-01T04:00:00+00:00", 360, 0, "2024-05-01T05:00:00+00:00"),
    ("2024-05-01T04:06:00+00:00", 360, 0, "2024-05-01T05:00:00+00:00"),  # on the grace
    ("2024-05-01T04:06:01+00:00", 360, 1, "2024-05-01T05:00:00+00:00"),
    ("2024-05-01T04:00:01+00:00", 0, 1, "2024-05-01T05:00:00+00:00"),
    ("2024-05-01T05:05:00+00:00", 360, 1, "2024-05-01T06:00:00+00:00"),
    ("2024-05-01T05:06:01+00:00", 360, 2, "2024-05-01T06:00:00+00:00"),
    ("2024-05-02T04:00:00+00:00", 360, 24, "2024-05-02T05:00:00+00:00"),
    ("2024-07-01T00:00:00+00:00", 360, schedule.MISSED_LIMIT, "2024-07-01T01:00:00+00:00"),
    # A moment given in another zone is the same instant.
    ("2024-05-01T06:06:01+02:00", 360, 1, "2024-05-01T05:00:00+00:00"),
])
def test_due_counts_slots_past_their_grace(now: str, grace: float, missed: int,
                                           next_fire: str) -> None:
    hourly = schedule.parse("0 * * * *", "UTC")
    found = schedule.due(hourly, iso("2024-05-01T04:00:00+00:00"), iso(now), grace)
    assert (found.missed, found.overdue) == (missed, missed > 0)
    assert found.next_fire == iso(next_fire)
    assert found.due_at == iso("2024-05-01T04:00:00+00:00")


def test_next_after_is_strictly_after_even_on_a_fire_time() -> None:
    every_5 = schedule.parse("*/5 * * * *", "UTC")
    assert schedule.next_after(every_5, at(2024, 5, 1, 3, 5)) == at(2024, 5, 1, 3, 10)
    assert schedule.next_after(every_5, at(2024, 5, 1, 3, 5) - timedelta(microseconds=1)) == \
        at(2024, 5, 1, 3, 5)


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


@pytest.mark.parametrize(("expr", "slots"), [
    # Fixed-time: the skipped 02:30 runs at the change, as cron runs it.
    ("30 2 * * *", ["2027-03-28T01:00:00+00:00", "2027-03-29T00:30:00+00:00"]),
    # Wildcard (minute or hour starts with *): cron runs the skipped times not at all.
    ("*/20 2 * * *", ["2027-03-29T00:00:00+00:00", "2027-03-29T00:20:00+00:00"]),
    ("15 */2 * * *", ["2027-03-28T02:15:00+00:00", "2027-03-28T04:15:00+00:00"]),
    ("15 * * * *", ["2027-03-28T01:15:00+00:00", "2027-03-28T02:15:00+00:00"]),
])
def test_a_time_the_spring_change_skips(expr: str, slots: list[str]) -> None:
    """Berlin, 28 March 2027, 02:00 -> 03:00 (01:00 UTC). cronie and Vixie cron: fixed-time
    jobs run for each skipped minute, wildcard jobs once at the current time (03:00),
    which `*/20 2` and `15 */2` do not match."""
    plan = schedule.parse(expr, "Europe/Berlin")
    found, moment = [], datetime.fromisoformat("2027-03-28T00:59:00+00:00")
    for _ in range(2):
        moment = schedule.next_after(plan, moment)
        found.append(moment.astimezone(UTC).isoformat())
    assert found == slots
    # Backward too: the slot of a moment just after the change is the one before it.
    after = datetime.fromisoformat("2027-03-28T01:00:30+00:00")
    assert (schedule.slot(plan, after) == datetime.fromisoformat(slots[0])) == (
        expr == "30 2 * * *")


def test_the_zone_comes_from_tz_then_cron_tz_then_the_host() -> None:
    environ = {"CRON_TZ": "Asia/Tokyo", "TZ": "America/New_York"}
    assert schedule.zone_setting("UTC", environ) == ("UTC", "--tz")
    assert schedule.zone_setting(None, environ) == ("Asia/Tokyo", "CRON_TZ")
    assert schedule.zone_setting(None, {"CRON_TZ": ":Asia/Tokyo"}) == ("Asia/Tokyo", "CRON_TZ")
    assert schedule.zone_setting(None, {"TZ": "America/New_York"}) == (None, "TZ")
    with pytest.raises(UsageError, match=r"^CRON_TZ: 'Mars/Olympus' is not a known time zone"):
        schedule.parse("@daily", "Mars/Olympus", zone_source="CRON_TZ")


def _cron_days(field: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    """The values of a day field, expanded as cron's get_list does (a reference of the
    test's own: pglock's answers come from croniter)."""
    def number(text: str) -> int:
        return int(text) if text.isdigit() else names.index(text.lower())

    values: set[int] = set()
    for element in field.split(","):
        span, _, step = element.partition("/")
        first, last = (low, high) if span == "*" else (
            number(span.partition("-")[0]), number(span.partition("-")[2] or span))
        values.update(range(first, last + 1, int(step or 1)))
    return values


def cron_fires_on(dom: str, dow: str, day: datetime) -> bool:
    """Cron's day rule, as cronie's cron.c and Vixie cron's read it: DOM_STAR/DOW_STAR are
    set when the field's first character is `*`; then the day must match both fields, and
    otherwise either."""
    days = _cron_days(dom, 1, 31, ())
    weekdays = {d % 7 for d in _cron_days(dow, 0, 7, ("sun", "mon", "tue", "wed", "thu",
                                                       "fri", "sat"))}
    in_month, in_week = day.day in days, day.isoweekday() % 7 in weekdays
    if dom.startswith("*") or dow.startswith("*"):
        return in_month and in_week
    return in_month or in_week


DAY_OF_MONTH = ["*", "*/2", "*/10", "1", "13", "1-15", "1-31/2", "2,29", "1-31", "5-5"]
DAY_OF_WEEK = ["*", "*/2", "*/3", "1", "mon-fri", "1-5/2", "0", "7", "sun,sat", "0-7", "3-3"]


@pytest.mark.parametrize("dom", DAY_OF_MONTH)
@pytest.mark.parametrize("dow", DAY_OF_WEEK)
def test_day_of_month_and_day_of_week_combine_as_cron_combines_them(dom: str, dow: str) -> None:
    """`0 0 */2 * 1` is odd days that are Mondays for cron (a field starting with `*` makes
    the two AND), where croniter alone read every odd day and every Monday; two restricted
    fields OR. Over a year of days, forward and backward, pglock's slots are cron's days."""
    plan = schedule.parse(f"0 0 {dom} * {dow}", "UTC")
    start = at(2027, 1, 1)
    expected = [start + timedelta(days=n) for n in range(1, 365)
                if cron_fires_on(dom, dow, start + timedelta(days=n))]
    forward, moment = [], start
    while (moment := schedule.next_after(plan, moment)) <= expected[-1]:
        forward.append(moment)
    assert forward == expected
    backward, moment = [], at(2028, 1, 1)
    while (moment := schedule.slot(plan, moment - timedelta(seconds=1))) > start:
        backward.append(moment)
    assert backward[::-1] == expected


@pytest.mark.parametrize(("expr", "minutes"), [
    ("1-1 * * * *", [1, 1]), ("5-5 * * * *", [5, 5]), ("1-1/5 * * * *", [1, 1]),
    ("58-59/5 * * * *", [58, 58]), ("1-3/5,7 * * * *", [1, 7])])
def test_a_one_value_range_is_that_value(expr: str, minutes: list[int]) -> None:
    """croniter alone read `1-1` as `*` and `1-1/5` as `*/5` (every minute, every 5):
    cron reads the one minute."""
    plan = schedule.parse(expr, "UTC")
    first = schedule.next_after(plan, at(2027, 1, 1, 0, 0))
    second = schedule.next_after(plan, first)
    assert [first.minute, second.minute] == minutes
    assert second - first == timedelta(minutes=(minutes[1] - minutes[0]) % 60 or 60)


# What Debian's cron (3.0pl1) and cronie both read, and croniter reads the same way.
CRON_READS = [
    "* * * * *", "*/5 * * * *", "1-5/2 * * * *", "*/100 * * * *", "0 0 * jan *",
    "0 0 * JAN-mar *", "0 0 * jan,feb *", "0 0 * * mon-fri", "0 0 * * sun,sat", "0 0 * * 7",
    "0 0 * * 0-7", "0 0 * * mOn-7", "1,2,3 * * * *", "1-3,5 * * * *", "01 * * * *",
    "1-1 * * * *", "0 0 1-31/10 * *", "0 0 * 1-12/3 *", "0 0 * * */2", "@daily", "@DAILY",
    "@midnight", "@annually",
]


@pytest.mark.parametrize("expr", CRON_READS)
def test_what_cron_reads_is_accepted(expr: str) -> None:
    assert schedule.parse(expr, "UTC").expr == schedule.normal(expr)


# croniter's extensions (and forms Debian's crontab refuses or reads otherwise): refused,
# naming the field. R alone made every run compute a slot of its own.
@pytest.mark.parametrize(("expr", "reason"), [
    ("R * * * *", "the minute field 'R' is not cron's"),
    ("H * * * *", "the minute field 'H' is not cron's"),
    ("0 3 L * *", "the day-of-month field 'L' is not cron's"),
    ("0 0 15W * *", "the day-of-month field '15W' is not cron's"),
    ("0 0 ? * *", "the day-of-month field '?' is not cron's"),
    ("0 0 * * 5#2", "the day-of-week field '5#2' is not cron's"),
    ("0 0 * * 5L", "the day-of-week field '5L' is not cron's"),
    ("0 0 * * 1,5#2", "the day-of-week field '1,5#2' has '5#2', not cron's"),
    ("0 0 ~ * *", "the day-of-month field '~' is not cron's"),
    ("1~5 * * * *", "the minute field '1~5' is not cron's"),
    ("*/5/2 * * * *", "the minute field '*/5/2' is not cron's"),
    ("1-2-3 * * * *", "the minute field '1-2-3' is not cron's"),
    ("*-5 * * * *", "the minute field '*-5' is not cron's"),
    (",1 * * * *", "the minute field ',1' has '', not cron's"),
    ("0/5 * * * *", "a step needs * or a range (0-59/5)"),
    ("0 0 * jan/2 *", "a step needs * or a range (jan-12/2)"),
    ("5-1 * * * *", "the range '5-1' backwards"),
    ("*/0 * * * *", "has a step of 0"),
    ("0 0 * * 1-5/0", "has a step of 0"),
    ("0 24 * * *", "the hour field '24' has 24, out of 0-23"),
    ("0 0 0 * *", "out of 1-31"),
    ("0 0 * * 8", "out of 0-7"),
    ("0 0 * january *", "the month field 'january' is not cron's"),
    ("0 0 * * Monday", "is not cron's"),
    ("0 0 * * jan", "'jan', not a number or a name sun-sat"),
    ("jan * * * *", "'jan', not a number"),
    ("0x1 * * * *", "is not cron's"),
    ("-1 * * * *", "is not cron's"),
    ("1" * 12 + " * * * *", "is not cron's"),
])
def test_croniter_extensions_are_refused(expr: str, reason: str) -> None:
    with pytest.raises(UsageError) as raised:
        schedule.parse(expr, "UTC")
    message = str(raised.value)
    assert message.startswith(f"--schedule: {expr!r} is not a cron expression cron reads "
                              "alike: ")
    assert reason in message
    assert "\n" not in message


@strategies.PURE
@given(strategies.cron_expressions)
def test_a_schedule_is_refused_in_one_line_or_gives_one_slot(expr: str) -> None:
    """Generated expressions: refused with one line, or read the same at every parse (R
    gave every parse a slot of its own), written as cron reads it."""
    try:
        first = schedule.parse(expr, "UTC")
    except UsageError as error:
        assert str(error).startswith("--schedule: ") and "\n" not in str(error)
        return
    schedule._parse.cache_clear()
    again = schedule.parse(expr, "UTC")
    moment = at(2024, 5, 1, 3, 7)
    assert schedule.slot_info(first, moment) == schedule.slot_info(again, moment)
    assert first.expr == schedule.normal(expr)
    assert not first.expr.startswith("@") or first.expr in schedule.KEYWORDS


# ---------------------------------------------------------------- windows and catch-up


@pytest.mark.parametrize(("text", "words"), [
    ("4h", "is not 'CRON DURATION'"),
    ("0 2 * * 6", "lacks a length with its unit"),
    ("0 2 * * 6 four", "is not a duration"),
    ("0 2 * * 6 400d", "out of range"),
    ("0 25 * * * 1h", "--window"),
    ("R 2 * * * 1h", "--window"),
])
def test_bad_windows_are_usage_errors(text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words) as caught:
        schedule.parse_window(text, "UTC")
    assert "--schedule" not in str(caught.value)


def test_a_window_is_an_expression_and_an_elapsed_length() -> None:
    window = schedule.parse_window("0  2 * * 6   4h", "UTC")
    assert (window.text, window.length) == ("0 2 * * 6 4h", 4 * 3600)


@pytest.mark.parametrize(("moment", "end"), [
    ((2024, 5, 4, 1, 59, 59), None),                 # Saturday, before 02:00
    ((2024, 5, 4, 2, 0), (2024, 5, 4, 6, 0)),        # its first instant is inside
    ((2024, 5, 4, 5, 59, 59), (2024, 5, 4, 6, 0)),
    ((2024, 5, 4, 6, 0), None),                      # its end is outside
    ((2024, 5, 5, 3, 0), None),                      # Sunday
])
def test_window_end_on_a_weekly_window(moment: tuple[int, ...],
                                       end: tuple[int, ...] | None) -> None:
    saturdays = schedule.parse_window("0 2 * * 6 4h", "UTC")
    found = schedule.window_end((saturdays,), at(*moment))
    assert found == (None if end is None else at(*end))


def test_windows_that_overlap_or_follow_on_count_as_one() -> None:
    # Every hour for 90 minutes: each runs into the next, so there is no way out.
    hourly = schedule.parse_window("0 * * * * 90m", "UTC")
    end = schedule.window_end((hourly,), at(2024, 5, 4, 2, 10))
    assert end is not None and end > at(2024, 5, 4, 3, 30)
    # Two windows back to back (02:00-04:00 and 04:00-05:00) end at the later one's end.
    first = schedule.parse_window("0 2 * * * 2h", "UTC")
    second = schedule.parse_window("0 4 * * * 1h", "UTC")
    assert schedule.window_end((first, second), at(2024, 5, 4, 3, 0)) == at(2024, 5, 4, 5, 0)


def test_a_window_is_elapsed_time_across_daylight_saving() -> None:
    # 01:00 Berlin on the night clocks go forward (2024-03-31): 3 hours of elapsed time
    # end at 05:00 on the wall clock, not 04:00.
    night = schedule.parse_window("0 1 * * * 3h", "Europe/Berlin")
    end = schedule.window_end((night,), at(2024, 3, 31, 1, 30, tz=BERLIN))
    assert end is not None
    assert end.astimezone(BERLIN).hour == 5


def test_backlog_is_the_slots_before_the_current_oldest_first() -> None:
    hourly = schedule.parse("0 * * * *", "UTC")
    current = at(2024, 5, 4, 10, 0)
    assert schedule.backlog(hourly, current, 3) == [at(2024, 5, 4, h, 0) for h in (7, 8, 9)]
    assert schedule.backlog(hourly, current, 0) == []


def test_backlog_skips_slots_in_a_window_and_stops_at_the_deadline() -> None:
    hourly = schedule.parse("0 * * * *", "UTC")
    current = at(2024, 5, 4, 10, 0)
    night = schedule.parse_window("0 8 * * * 90m", "UTC")  # 08:00 and 09:00 are inside
    assert schedule.backlog(hourly, current, 2, (night,)) == [at(2024, 5, 4, 6, 0),
                                                              at(2024, 5, 4, 7, 0)]
    assert schedule.backlog(hourly, current, 5,
                            not_before=at(2024, 5, 4, 8, 30)) == [at(2024, 5, 4, 9, 0)]
