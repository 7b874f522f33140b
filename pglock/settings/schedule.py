"""Cron schedules and their slots: pure time arithmetic, no database, no clock of its own.

A slot is the latest fire time at or before a moment, read in the schedule's zone, as
cron reads its crontab. Everything here takes the moment as an argument, so the same
functions serve `run` (the host's clock: it must agree with the cron daemon that
started pglock) and `status`/`check` (the database's clock).

croniter costs some 60 ms to import: it is imported only once a schedule is parsed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pglock.errors import UsageError
from pglock.settings.durations import DURATIONS, WINDOW_LENGTH, parse_duration

KEYWORDS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# Missed slots are counted up to here: a minutely job down for a year is "1000+", not a loop.
MISSED_LIMIT = 1000
MIN_GRACE = 60.0
_EXPANDED = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
             "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
             "@hourly": "0 * * * *"}
# The syntax both Debian's cron (3.0pl1) and cronie read, field by field (docs/schedules.md):
# name, lowest, highest, the names it takes. croniter reads more (R, L, W, ?, #, H, seconds)
# and would compute slots no cron fires at: those are refused.
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day-of-month", 1, 31, ()),
           ("month", 1, 12, _MONTHS), ("day-of-week", 0, 7, _DAYS))
_ELEMENT = re.compile(r"(?:(\*)|([0-9]{1,9}|[A-Za-z]{3})(?:-([0-9]{1,9}|[A-Za-z]{3}))?)"
                      r"(?:/([0-9]{1,9}))?")
_GRAMMAR = "numbers, *, ranges a-b, steps */n and a-b/n, lists with ','"
# croniter's get_prev is strictly before its start; a hair later makes "at or before".
# Arithmetic and comparisons happen in UTC: in a zone, datetime drops `fold` on addition
# and compares wall clocks, and the repeated hour of autumn would go wrong.
_HAIR = timedelta(microseconds=1)


@dataclass(frozen=True)
class Schedule:
    """A validated cron expression and the zone it is read in."""

    expr: str
    zone: str
    tz: tzinfo

    @property
    def wildcard(self) -> bool:
        """Cron's "wildcard job": its minute or hour field starts with `*` (`*/5` too).

        When the clock falls back, cron runs wildcard jobs again in the repeated hour, and
        fixed-time jobs only in its first pass (Vixie cron, cronie).
        """
        fields = _EXPANDED.get(self.expr, self.expr).split()
        return fields[0].startswith("*") or fields[1].startswith("*")

    @property
    def days_or(self) -> bool:
        """Cron's day rule: a day fires when it matches the day-of-month OR the day-of-week
        field, but only when neither field starts with `*` (`*/2` too); otherwise it must
        match both (cronie's and Vixie cron's DOM_STAR/DOW_STAR). croniter would OR `*/2`
        with a weekday: days cron never fires."""
        return _days_or(self.expr)


def _days_or(expr: str) -> bool:
    """`Schedule.days_or` of an expression."""
    fields = _EXPANDED.get(expr, expr).split()
    return not (fields[2].startswith("*") or fields[4].startswith("*"))


@dataclass(frozen=True)
class SlotInfo:
    """Where a moment falls in a schedule."""

    slot: datetime
    previous: datetime
    next: datetime

    @property
    def default_grace(self) -> float:
        """max(1 minute, 10 % of the interval between the last two slots), in seconds, at
        most --grace's upper bound (a slot every 28 years would otherwise give 2.8)."""
        # In UTC: Python subtracts two times of one zone on the wall clock, which across a
        # DST change is an hour off.
        tenth = (self.slot.astimezone(UTC) - self.previous.astimezone(UTC)).total_seconds() / 10
        return min(max(MIN_GRACE, tenth), DURATIONS["--grace"].high)


@dataclass(frozen=True)
class Due:
    """A scheduled job's standing at a moment."""

    # The first slot after the last run's slot: no run has started for it.
    due_at: datetime
    # The next fire time after the moment (cron's next start).
    next_fire: datetime
    # Slots more than a grace past with no run, counted up to MISSED_LIMIT.
    missed: int

    @property
    def overdue(self) -> bool:
        return self.missed > 0


@dataclass(frozen=True)
class Window:
    """A maintenance window (--window 'CRON DURATION'): from each fire time of its
    expression, for its length (elapsed time: across a DST change it ends an hour later
    or earlier on the wall clock)."""

    text: str
    schedule: Schedule
    length: float


def parse_window(text: str, zone: str | None = None, *, zone_source: str = "--tz") -> Window:
    """'0 2 * * 6 4h' as a Window read in the schedule's zone; UsageError says what is wrong."""
    parts = text.split()
    example = "(for example '0 2 * * 6 4h': Saturdays from 02:00 for 4 hours)"
    if len(parts) < 2:
        raise UsageError(f"--window: {text!r} is not 'CRON DURATION' {example}")
    expr, duration = " ".join(parts[:-1]), parts[-1]
    if not any(c.isalpha() for c in duration):
        # '0 2 * * 6' would read as '0 2 * *' for 6 seconds: a window's length takes a unit.
        raise UsageError(f"--window: {text!r} lacks a length with its unit after the "
                         f"expression {example}")
    try:
        length = parse_duration(duration, option="--window")
    except UsageError:
        raise UsageError(f"--window: {duration!r} is not a duration {example}") from None
    if not WINDOW_LENGTH.admits(length):
        raise UsageError(f"--window: {duration!r} is out of range ({WINDOW_LENGTH.text()})")
    try:
        plan = parse(expr, zone, zone_source=zone_source)
    except UsageError as error:
        raise UsageError(str(error).replace("--schedule:", "--window:", 1)) from None
    return Window(" ".join(parts), plan, length)


def window_end(windows: tuple[Window, ...], at: datetime) -> datetime | None:
    """When the windows `at` falls in end (windows that overlap or follow on without a
    gap count as one, up to MISSED_LIMIT fire times in all); None: `at` is in none."""
    end: datetime | None = None
    moment = _utc(at)
    budget = [MISSED_LIMIT]
    while budget[0] > 0:
        until = _open_until(windows, moment, budget)
        if until is None:
            break
        # Another window may begin at (or before) this end: the way out is after it too.
        end = moment = until
    return end


def _open_until(windows: tuple[Window, ...], moment: datetime,
                budget: list[int]) -> datetime | None:
    """The latest end of the windows open at `moment`, each followed through its own
    fire times that begin before it ends (each one read spends `budget`); None: none is
    open."""
    end: datetime | None = None
    for window in windows:
        length = timedelta(seconds=window.length)
        start = slot(window.schedule, moment)
        until = _utc(start) + length
        if until <= moment:
            continue
        following = _fire_times(window.schedule, start)
        while budget[0] > 0:
            budget[0] -= 1
            after = _utc(next(following))
            if after > until:
                break
            until = max(until, after + length)
        end = until if end is None else max(end, until)
    return end


def backlog(schedule: Schedule, current: datetime, limit: int,
            windows: tuple[Window, ...] = (), not_before: datetime | None = None,
            ) -> list[datetime]:
    """The `limit` fire times before the slot `current` that a catch-up may run, oldest
    first: those in a window are no slot to catch up, nor those before `not_before` (the
    deadline)."""
    found: list[datetime] = []
    times = _fire_times(schedule, _utc(current), backward=True)
    for _ in range(MISSED_LIMIT + limit):
        moment = next(times)
        if len(found) >= limit or (not_before is not None and _utc(moment) < _utc(not_before)):
            break
        if not windows or window_end(windows, moment) is None:
            found.append(moment)
    return found[::-1]


def recent(schedule: Schedule, at: datetime, count: int,
           windows: tuple[Window, ...] = ()) -> list[datetime]:
    """The `count` latest fire times at or before `at`, newest first, those in a window
    left out (no host attempts those); fewer when MISSED_LIMIT of them are in windows."""
    found: list[datetime] = []
    times = _fire_times(schedule, _utc(at) + _HAIR, backward=True)
    for _ in range(MISSED_LIMIT + count):
        if len(found) >= count:
            break
        moment = next(times)
        if not windows or window_end(windows, moment) is None:
            found.append(moment)
    return found


def count_between(schedule: Schedule, after: datetime, before: datetime,
                  windows: tuple[Window, ...] = ()) -> tuple[int, datetime | None]:
    """Fire times strictly between two moments, outside the windows (up to MISSED_LIMIT),
    and the newest of them."""
    count, newest = 0, None
    times = _fire_times(schedule, _utc(after))
    for _ in range(10 * MISSED_LIMIT):
        moment = next(times)
        if _utc(moment) >= _utc(before) or count >= MISSED_LIMIT:
            break
        if not windows or window_end(windows, moment) is None:
            count, newest = count + 1, moment
    return count, newest


def parse(expr: str, zone: str | None = None, *, zone_source: str = "--tz") -> Schedule:
    """Validate a crontab expression and zone (None: the host's); UsageError names the bad one."""
    tz, name = resolve_zone(zone, zone_source)
    return _parse(" ".join(expr.split()), name, tz)


def zone_setting(tz_option: str | None, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The zone a schedule is read in, and where it was set: --tz (PGLOCK_TZ), CRON_TZ.

    (None, ...) leaves it to `local_zone`: TZ, else /etc/localtime. CRON_TZ comes before
    TZ as in cronie, where it sets the zone the crontab's fire times are read in (and is
    passed on to the commands, pglock among them) while TZ only sets theirs.
    """
    if tz_option is not None:
        # An empty --tz (tz = "" in a jobs file) is refused by the zone's check, as in
        # systemd and crontab: not the host's zone, which it would silently be.
        return tz_option, "--tz"
    cron_tz = environ.get("CRON_TZ", "").lstrip(":")
    if cron_tz:
        return cron_tz, "CRON_TZ"
    return None, "TZ"


@lru_cache(maxsize=1024)
def _parse(text: str, zone: str, tz: tzinfo) -> Schedule:
    fields = text.split()
    if not (len(fields) == 5 or (len(fields) == 1 and text.lower() in KEYWORDS)):
        raise UsageError(f"--schedule: {text!r} is not a cron expression (five fields "
                         "'MIN HOUR DAY MONTH WEEKDAY', or @hourly, @daily, @weekly, ...)")
    if len(fields) == 5:
        for field, spec in zip(fields, _FIELDS, strict=True):
            reason = _field_problem(field, *spec)
            if reason:
                raise UsageError(f"--schedule: {text!r} is not a cron expression cron reads "
                                 f"alike: {reason}")
    schedule = Schedule(normal(text), zone, tz)
    from croniter import CroniterError

    try:
        # A valid expression can still never fire (0 0 30 2 *): find one fire time now.
        _iterator(schedule, datetime(2000, 1, 1, tzinfo=tz)).get_next(datetime)
    except (CroniterError, ValueError, KeyError) as error:
        reason = str(error).strip() or type(error).__name__
        raise UsageError(f"--schedule: {text!r} is not a valid cron expression "
                         f"({reason})") from None
    return schedule


def normal(text: str) -> str:
    """The expression as crontab(1) takes it: one space between fields, a keyword in lower
    case (cron knows @daily, not @DAILY)."""
    text = " ".join(text.split())
    return text.lower() if text.startswith("@") else text


def _field_problem(field: str, name: str, low: int, high: int, names: tuple[str, ...],
                   ) -> str | None:
    """Why cron does not read `field` as croniter does, or None."""
    for element in field.split(","):
        match = _ELEMENT.fullmatch(element)
        if match is None:
            named = f", names {names[0]}-{names[-1]}" if names else ""
            where = f"the {name} field {field!r}" + (
                f" has {element!r}," if element != field else " is")
            return f"{where} not cron's ({_GRAMMAR}{named}; cron has no R, L, W, ?, #, H)"
        star, first, last, step = match.groups()
        if first is not None and last is None and step is not None:
            return f"the {name} field {field!r} has {element!r}: a step needs * or a range " \
                   f"({first}-{high}/{step})"
        if step is not None and int(step) == 0:
            return f"the {name} field {field!r} has a step of 0"
        if star:
            continue
        values = []
        for value in (first, last):
            if value is None:
                continue
            if value.isdigit():
                number = int(value)
            elif value.lower() in names:
                number = names.index(value.lower()) + (low if name == "month" else 0)
            else:
                return f"the {name} field {field!r} has {value!r}, not a number" + (
                    f" or a name {names[0]}-{names[-1]}" if names else "")
            if not low <= number <= high:
                return f"the {name} field {field!r} has {value}, out of {low}-{high}"
            values.append(number)
        if len(values) == 2 and values[0] > values[1]:
            return f"the {name} field {field!r} has the range {element!r} backwards"
    return None


def field_values(schedule: Schedule) -> tuple[frozenset[int], ...]:
    """The values of each field (minute, hour, day of month, month, day of week with
    Sunday 0), as cron expands a validated expression (a step counts from the range's
    start, `*` is the field's whole range)."""
    return _values(schedule.expr)


@lru_cache(maxsize=1024)
def _values(expr: str) -> tuple[frozenset[int], ...]:
    fields = _EXPANDED.get(expr, expr).split()
    expanded = []
    for field, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        values: set[int] = set()
        for element in field.split(","):
            match = _ELEMENT.fullmatch(element)
            assert match is not None  # validated by parse
            star, first, last, step = match.groups()
            bounds = (low, high) if star else tuple(
                int(v) if v.isdigit() else names.index(v.lower()) + (low if name == "month"
                                                                     else 0)
                for v in (first, last or first))
            values.update(range(bounds[0], bounds[1] + 1, int(step or 1)))
        expanded.append(frozenset(v % 7 for v in values) if name == "day-of-week"
                        else frozenset(values))
    return tuple(expanded)


def matches(schedule: Schedule, values: tuple[frozenset[int], ...], wall: datetime) -> bool:
    """Whether cron's fields (`field_values`) match a wall-clock minute, with cron's day
    rule (`Schedule.days_or`)."""
    minute, hour, days, months, weekdays = values
    if wall.minute not in minute or wall.hour not in hour or wall.month not in months:
        return False
    in_month, in_week = wall.day in days, wall.isoweekday() % 7 in weekdays
    return (in_month or in_week) if schedule.days_or else (in_month and in_week)


def offset_change(tz: tzinfo, low: datetime, high: datetime, within: timedelta) -> datetime:
    """The first instant (to `within`) after `low` and by `high` whose UTC offset in `tz`
    differs from `low`'s, when exactly one change lies between them (systemd's timers,
    the dashboard's counts around a change)."""
    offset = low.astimezone(tz).utcoffset()
    while high - low > within:
        middle = low + (high - low) / 2
        if middle.astimezone(tz).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return high


def resolve_zone(name: str | None, source: str = "--tz") -> tuple[tzinfo, str]:
    """The zone and the name to store for it; None means the host's zone."""
    if name is None:
        return local_zone()
    try:
        return ZoneInfo(name), name
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise UsageError(f"{source}: {name!r} is not a known time zone "
                         "(examples: UTC, Europe/Berlin, America/New_York)") from None


def local_zone() -> tuple[tzinfo, str]:
    """The host's zone by name (TZ, else /etc/localtime), so another host can read it too."""
    for name in (os.environ.get("TZ", "").lstrip(":"), _localtime_name()):
        if name:
            try:
                return ZoneInfo(name), name
            except (ZoneInfoNotFoundError, ValueError, OSError):
                continue
    try:
        with open("/etc/localtime", "rb") as handle:
            return ZoneInfo.from_file(handle, key="localtime"), "localtime"
    except (OSError, ValueError):
        return ZoneInfo("UTC"), "UTC"


def _localtime_name() -> str:
    """/etc/localtime -> /usr/share/zoneinfo/Europe/Berlin gives Europe/Berlin."""
    parts = Path("/etc/localtime").resolve().parts
    if "zoneinfo" in parts:
        return "/".join(parts[len(parts) - parts[::-1].index("zoneinfo"):])
    try:
        return Path("/etc/timezone").read_text().strip()
    except OSError:
        return ""


def _iterator(schedule: Schedule, start: datetime) -> Any:
    from croniter import croniter

    return croniter(_croniter_text(schedule.expr), start.astimezone(schedule.tz),
                    day_or=schedule.days_or)


@lru_cache(maxsize=1024)
def _croniter_text(expr: str) -> str:
    """The expression as lists of cron's values, which croniter reads as cron does: it
    reads a one-value range `5-5` as `*` and `1-1/5` as `*/5`. Cron's day rule is given
    to it apart (`day_or`), so a day field whose values are every day is written `*`."""
    parts = []
    for values, (name, low, high, _) in zip(_values(expr), _FIELDS, strict=True):
        whole = values == frozenset(range(low, (6 if name == "day-of-week" else high) + 1))
        parts.append("*" if whole else ",".join(map(str, sorted(values))))
    if _days_or(expr) and "*" in parts[2::2]:
        # Cron ORs the two day fields here, and one of them is every day.
        parts[2] = parts[4] = "*"
    return " ".join(parts)


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def fires(schedule: Schedule, at: datetime) -> bool:
    """Whether cron starts the job at fire time `at` (croniter also yields the repeated
    hour's second pass for a fixed-time job, which cron skips, and moves a time the spring
    change skips to the change, where cron starts a fixed-time job but not a wildcard
    one: cronie runs wildcard jobs once "at the current time", which its fields may not
    match, `*/20 2 * * *` at 03:00)."""
    local = _utc(at).astimezone(schedule.tz)
    if schedule.wildcard:
        return matches(schedule, _values(schedule.expr), local)
    return not (local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset())


def _fire_times(schedule: Schedule, start: datetime, *, backward: bool = False,
                ) -> Iterator[datetime]:
    """The fire times cron starts after `start` (before it, backward), nearest first."""
    times = _iterator(schedule, start)
    step = times.get_prev if backward else times.get_next
    while True:
        moment: datetime = step(datetime)
        if fires(schedule, moment):
            yield moment


def slot(schedule: Schedule, at: datetime) -> datetime:
    """The latest fire time at or before `at`, in the schedule's zone."""
    return next(_fire_times(schedule, _utc(at) + _HAIR, backward=True))


def next_after(schedule: Schedule, at: datetime) -> datetime:
    """The first fire time strictly after `at`."""
    return next(_fire_times(schedule, at))


def slot_info(schedule: Schedule, at: datetime) -> SlotInfo:
    """The slot of `at`, the slot before it and the one after (what `run` records)."""
    current = slot(schedule, at)
    previous = next(_fire_times(schedule, current, backward=True))
    return SlotInfo(current, previous, next_after(schedule, current))


def due(schedule: Schedule, due_at: datetime, now: datetime, grace: float,
        windows: tuple[Window, ...] = ()) -> Due:
    """Standing at `now` of a job whose first slot without a run is `due_at`; a slot in
    one of its windows is never missed."""
    if _utc(due_at) > _utc(now):
        # The common case costs no croniter call: status reads thousands of these.
        return Due(due_at, due_at, 0)
    # The slots from due_at (itself included) to those whose grace has not passed yet.
    missed, _ = count_between(schedule, _utc(due_at) - _HAIR,
                              _utc(now) - timedelta(seconds=grace), windows)
    return Due(due_at, next_after(schedule, now), missed)
