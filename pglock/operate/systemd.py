"""`pglock systemd`: the timer and service units that start the jobs of the jobs file, as
`pglock crontab` writes its cron lines (docs/fleet.md, "systemd timers").

Each scheduled job gets a `pglock-NAME.service` (oneshot, `pglock run --job NAME` with
PGLOCK_CONFIG naming the file, the skip code a success) and a `pglock-NAME.timer` whose
`OnCalendar=` lines fire at exactly the job's slots, or the job is refused in one line.
Where cron and a timer part (docs/fleet.md has the list): cron ORs the day of month with
the day of week when neither starts with `*` (two `OnCalendar=` lines); a timer skips a
time that a spring change skips, where cron and pglock run a fixed-time job at the change,
and fires the repeated autumn hour once, where cron and pglock run a wildcard job in both
passes. Each expression is checked against the zone's changes up to 2199, systemd's last
year: one that meets such a change is refused, but for an expression that fires at the
same instants in UTC (`*/5 * * * *`), whose timer is then written in UTC.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from pathlib import Path

from pglock.errors import UsageError
from pglock.operate.crontab import check_user, one_line
from pglock.run.jobsfile import ConfiguredJob, table_name
from pglock.settings import schedule as schedules
from pglock.settings.config import shown

# The first line of every unit pglock writes: --dir overwrites and --prune removes only
# files that start with it.
MARKER = "# Written by `pglock systemd`: edit the jobs file and run it again, not this file."
_SOURCE = "# Jobs file: "
PREFIX = "pglock-"
# systemd's UNIT_NAME_MAX (256 with the NUL).
UNIT_NAME_MAX = 255
# Zones that count leap seconds: systemd applies them, pglock does not (leap_refusal).
LEAP_ZONES = ("right/",)
# systemd's calendar ends with the year 2199: its last elapse is before this.
CALENDAR_END = datetime(2200, 1, 1, tzinfo=UTC)
SKIP_CODE = 75
_VALID = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.")
_WEEKDAYS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")


def escape(name: str) -> str:
    """A job name as `systemd-escape NAME` writes it: `/` becomes `-`; `-`, `\\`, a
    leading `.` and every byte outside [A-Za-z0-9:_.] become \\xNN."""
    out = []
    for index, char in enumerate(name):
        if char == "/":
            out.append("-")
        elif char in _VALID and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogateescape"))
    return "".join(out)


def unit_base(job: str) -> str:
    """`pglock-NAME` (the units are it plus .service and .timer): a name that can be a
    unit name as it is, any other as `systemd-escape` writes it; UsageError: too long."""
    plain = job and job[0] != "." and all(char in _VALID or char == "-" for char in job)
    base = PREFIX + (job if plain else escape(job))
    if len(base) + len(".service") > UNIT_NAME_MAX:
        raise UsageError(f"{table_name(job)}: the unit name {base}.service is "
                         f"{len(base) + 8} characters long (systemd-escape's form of the job "
                         f"name); systemd's limit is {UNIT_NAME_MAX}: shorten the name")
    return base


# ------------------------------------------------------------------ schedules

def _component(values: frozenset[int], low: int, high: int, *, repeat: bool = False,
               width: int = 2) -> str:
    """A set of values as an OnCalendar= component: `*`; with `repeat`, `LOW/STEP` for a
    progression from the range's start whose step divides the range; else a list of
    values and ranges `A..B`.

    systemd's repetitions part from cron's lists wherever a step carries into the next
    hour, day, month or year (systemd-analyze calendar, systemd 252): `*:00/7` runs 23:56
    then 00:07 (cron: 00:00), `00/7:00` runs 21:00 on the 30th then 07:00 on the 1st, and
    a month's repetition in a zone finds no elapse at all. A step that divides the range
    lands on its start again, which systemd gets right: those alone are written as one
    (minutes and hours; a month's days have no one length)."""
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    if repeat and len(ordered) > 2:
        step = ordered[1] - ordered[0]
        if (high - low + 1) % step == 0 and ordered == list(range(low, high + 1, step)):
            return f"{low:0{width}d}/{step}"
    parts, start = [], ordered[0]
    for previous, value in zip(ordered, [*ordered[1:], None], strict=True):
        if value != previous + 1:
            parts.append(f"{start:0{width}d}" if start == previous
                         else f"{start:0{width}d}..{previous:0{width}d}")
            start = value if value is not None else start
    return ",".join(parts)


def _weekdays(values: frozenset[int]) -> str:
    return ",".join(_WEEKDAYS[(day % 7)] for day in [1, 2, 3, 4, 5, 6, 0] if day in values)


def calendar(plan: schedules.Schedule, zone: str | None) -> list[str]:
    """The OnCalendar= values that fire where cron's fields match, read in `zone` (None:
    the host's); the DST changes are `translate`'s."""
    minute, hour, days, months, weekdays = schedules.field_values(plan)
    hours, minutes = _component(hour, 0, 23, repeat=True), _component(minute, 0, 59, repeat=True)
    time = f"{hours}:{minutes}:00"
    month = _component(months, 1, 12)
    suffix = f" {zone}" if zone else ""
    all_days, all_weekdays = len(days) == 31, len(weekdays) == 7
    if plan.days_or and not all_days and not all_weekdays:
        # Cron's OR: one line for the days of the month, one for the days of the week.
        return [f"*-{month}-{_component(days, 1, 31)} {time}{suffix}",
                f"{_weekdays(weekdays)} *-{month}-* {time}{suffix}"]
    if plan.days_or:
        # One of them is whole: OR with it is every day.
        days, weekdays = frozenset(range(1, 32)), frozenset(range(7))
    week = "" if len(weekdays) == 7 else _weekdays(weekdays) + " "
    return [f"{week}*-{month}-{_component(days, 1, 31)} {time}{suffix}"]


# How far around a change cron and a timer may part: no zone shifts by more than 2 hours.
_MARGIN = timedelta(hours=3)


@dataclass(frozen=True)
class Change:
    """A change of the zone's offset: the instant and the offsets before and after."""

    at: datetime
    before: timedelta
    after: timedelta


def changes(tz: tzinfo, start: datetime, end: datetime = CALENDAR_END) -> Iterator[Change]:
    """The zone's offset changes between two instants (sampled weekly, then bisected to
    the second: no zone's rules change its offset and back within a week)."""
    def offset(moment: datetime) -> timedelta:
        found = moment.astimezone(tz).utcoffset()
        return found if found is not None else timedelta(0)

    day = timedelta(days=7)
    moment, current = start, offset(start)
    while moment < end:
        following = moment + day
        if offset(following) != current:
            at = schedules.offset_change(tz, moment, following, timedelta(seconds=1))
            yield Change(at.replace(microsecond=0), current, offset(following))
            current = offset(following)
        moment = following


def _timer_fires(plan: schedules.Schedule, values: tuple[frozenset[int], ...], tz: tzinfo,
                 start: datetime, end: datetime) -> list[datetime]:
    """Where a timer fires between two instants: each matching wall-clock minute, at its
    first instant (none for a wall time a spring change skips, the first pass only of the
    repeated hour), as systemd-analyze calendar shows."""
    found = []
    moment = start.replace(second=0, microsecond=0)
    while moment < end:
        wall = moment.astimezone(tz)
        if moment >= start and wall.fold == 0 and schedules.matches(plan, values, wall):
            found.append(moment)
        moment += timedelta(minutes=1)
    return found


def _slots(plan: schedules.Schedule, start: datetime, end: datetime) -> list[datetime]:
    """pglock's fire times from `start` (inclusive) to `end`, in UTC."""
    found, moment = [], start - timedelta(microseconds=1)
    while (moment := schedules.next_after(plan, moment).astimezone(UTC)) < end:
        found.append(moment)
    return found


def _parting(plan: schedules.Schedule, values: tuple[frozenset[int], ...], tz: tzinfo,
             change: Change) -> str | None:
    """Why pglock's slots and a timer's elapses part at this change (None: they agree)."""
    start, end = change.at - _MARGIN, change.at + _MARGIN
    # The common case first: no wall-clock minute near the change matches at all.
    wall, last = (start + change.before).replace(tzinfo=None), (end + change.after).replace(
        tzinfo=None)
    while wall <= last and not schedules.matches(plan, values, wall):
        wall += timedelta(minutes=1)
    if wall > last:
        return None
    slots, timer = _slots(plan, start, end), _timer_fires(plan, values, tz, start, end)
    if slots == timer:
        return None
    extra = sorted(set(slots) - set(timer))
    local = change.at.astimezone(tz)
    if change.after > change.before:
        what = (f"the clock jumps from {(change.at + change.before).strftime('%H:%M')} to "
                f"{local.strftime('%H:%M')} on {local.date()}")
    else:
        what = (f"the hour before {(change.at + change.before).strftime('%H:%M')} comes "
                f"twice on {local.date()}")
    if extra:
        when = extra[0].astimezone(tz)
        return (f"{what}: pglock has a slot at {when.strftime('%H:%M')} "
                f"(UTC{when.strftime('%z')}), a timer would not fire")
    when = sorted(set(timer) - set(slots))[0].astimezone(tz)
    return (f"{what}: a timer would fire at {when.strftime('%H:%M')} "
            f"(UTC{when.strftime('%z')}), pglock has no slot there")


def _wall(moment: datetime) -> tuple[int, ...]:
    return (moment.month, moment.day, moment.isoweekday(), moment.hour, moment.minute)


@dataclass(frozen=True)
class Calendar:
    """A job's OnCalendar= values, or why it has none."""

    lines: tuple[str, ...]
    refused: str | None = None


def translate(plan: schedules.Schedule, zone: str | None, now: datetime) -> Calendar:
    """The OnCalendar= lines that fire at exactly pglock's slots from `now` to the end of
    systemd's calendar, in `zone` (None: the host's, as pglock reads it); or why not."""
    values = schedules.field_values(plan)
    zone_changes = _changes(plan.tz, now.replace(hour=0, minute=0, second=0, microsecond=0))
    reason, agreed = None, set()
    for change in zone_changes:
        # Cron's fields see a wall clock's month, day, weekday, hour and minute only: a
        # change whose window shows the same walls as one that agreed agrees too (the
        # yearly rule repeats them: a dozen windows to compute, not 350).
        key = (change.before, change.after, *(_wall(change.at + change.before + edge)
                                               for edge in (-_MARGIN, _MARGIN)))
        if key in agreed:
            continue
        reason = _parting(plan, values, plan.tz, change)
        if reason is not None:
            break
        agreed.add(key)
    if reason is None:
        return Calendar(tuple(calendar(plan, zone)))
    if _same_in_utc(plan, values, zone_changes, now):
        return Calendar(tuple(calendar(plan, "UTC")))
    return Calendar((), f"{plan.expr!r} in {plan.zone} has no exact OnCalendar=: {reason} "
                        "(move it out of the hours the zone changes in, or give the job "
                        "tz = \"UTC\")")


@lru_cache(maxsize=64)
def _changes(tz: tzinfo, start: datetime) -> tuple[Change, ...]:
    return tuple(changes(tz, start))


def _same_in_utc(plan: schedules.Schedule, values: tuple[frozenset[int], ...],
                 zone_changes: tuple[Change, ...], now: datetime) -> bool:
    """Whether the expression fires at the same instants in its zone as in UTC: a
    wildcard job (both passes of the repeated hour) on every hour of every day, whose
    minutes are the same under each of the zone's offsets (`*/5`, not `0` in +05:30)."""
    minute, hour, days, months, weekdays = values
    if not plan.wildcard or (len(hour), len(months)) != (24, 12):
        return False
    if not (len(days) == 31 and len(weekdays) == 7):
        return False
    offsets = {change.after for change in zone_changes}
    offsets.add(now.astimezone(plan.tz).utcoffset() or timedelta(0))
    for offset in offsets:
        seconds = int(offset.total_seconds())
        if seconds % 60 or {(m + seconds // 60) % 60 for m in minute} != minute:
            return False
    return True


# ------------------------------------------------------------------ units

def _quoted(word: str, *, dollar: bool = True) -> str:
    """A word as ExecStart= (dollar: $ expands there) or Environment= reads it: in double
    quotes, with \\ and " escaped and % doubled (a specifier otherwise)."""
    word = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return '"' + (word.replace("$", "$$") if dollar else word) + '"'


@dataclass(frozen=True)
class Unit:
    """A unit file to write: its name and text."""

    name: str
    text: str


def units(path: Path, jobs: Sequence[ConfiguredJob], pglock: str, now: datetime,
          user: str | None = None) -> list[Unit]:
    """The .service and .timer of every scheduled job of `path`; UsageError names the
    first job that has none (its name, its schedule) before anything is written."""
    check_user(user, uid=True)
    config = one_line(spelled(path), "the config file's path", "a unit file")
    pglock = one_line(pglock, "pglock's path", "a unit file")
    written: list[Unit] = []
    bases: dict[str, str] = {}
    for job in jobs:
        if job.schedule is None:
            continue
        base = unit_base(job.name)
        if base in bases:
            raise UsageError(f"{table_name(job.name)} and {table_name(bases[base])} would both "
                             f"be {base}.service (systemd-escape writes / as -): rename one")
        bases[base] = job.name
        try:
            plan = schedules.parse(job.schedule, job.tz, zone_source="tz")
        except UsageError as error:
            raise UsageError(f"{table_name(job.name)}: {error}") from None
        if plan.zone.startswith(LEAP_ZONES):
            raise UsageError(f"{table_name(job.name)}: {leap_refusal(plan.zone, job.tz)}")
        found = translate(plan, job.tz, now)
        if found.refused is not None:
            raise UsageError(f"{table_name(job.name)}: {found.refused}")
        header = [MARKER, f"{_SOURCE}{config}",
                  f"# [jobs.{shown(job.name)}] schedule = {job.schedule!r}"
                  + (f", tz = {job.tz!r}" if job.tz else "")]
        description = f"pglock job {shown(job.name)}".replace("%", "%%")
        skip = int(job.values.get("conflict_exit_code", SKIP_CODE))
        service = [*header, "[Unit]", f"Description={description}", "",
                   "[Service]", "Type=oneshot",
                   *([f"User={user}"] if user else []),
                   f"Environment={_quoted('PGLOCK_CONFIG=' + config, dollar=False)}",
                   f"ExecStart={_quoted(pglock)} run --job {_quoted(job.name)}",
                   "# A host that loses the race (or finds the slot done) exits with the "
                   "skip code: no failure.",
                   f"SuccessExitStatus={skip}"]
        catch_up = str(job.values.get("catch_up", "none"))
        timer = [*header, "[Unit]", f"Description={description} (schedule)", "",
                 "[Timer]", *(f"OnCalendar={line}" for line in found.lines),
                 # The default is a minute; pglock's slot is read to the second.
                 "AccuracySec=1s",
                 # A start at boot for an elapse missed while down only with catch-up;
                 # deadline still bounds how late it runs. No RandomizedDelaySec=: pglock's
                 # --jitter spreads the hosts.
                 f"Persistent={'false' if catch_up == 'none' else 'true'}", "",
                 "[Install]", "WantedBy=timers.target"]
        written += [Unit(f"{base}.service", "\n".join(service) + "\n"),
                    Unit(f"{base}.timer", "\n".join(timer) + "\n")]
    return written


def leap_refusal(zone: str, tz: str | None) -> str:
    """Why a zone that counts leap seconds (`right/...`) has no timer: systemd reads it
    through the C library, which counts them (27 s since 1972), and pglock, as cron's
    Python reader, does not: every elapse would come that much after pglock's slot."""
    where = "its tz" if tz else "the host's zone (no tz)"
    plain = zone.removeprefix("right/")
    return (f"{where} {zone!r} counts leap seconds: a timer would fire about 27 s after "
            f"each of pglock's slots; give the job tz = {plain!r}")


def spelled(path: Path) -> str:
    """The jobs file's path as a unit names it: absolute and without `.`, `..` or `//`
    (PGLOCK_CONFIG=../w/jobs.toml), unless that would name another file (a symbolic link
    before a `..`): --prune then finds the units of any spelling of it."""
    given = path.absolute()
    normal = Path(os.path.normpath(given))
    try:
        if normal != given and os.path.samefile(normal, given):
            return str(normal)
    except OSError:
        pass
    return str(given)


def printed(written: Sequence[Unit]) -> str:
    """The units as `pglock systemd` prints them without --dir: each after a header."""
    return "\n".join(f"# ==> {unit.name} <==\n{unit.text}" for unit in written)


def ours(path: Path, config: str | None = None) -> bool:
    """Whether a unit file is one `pglock systemd` wrote (of the jobs file `config`)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            first, second = handle.readline(), handle.readline()
    except OSError:
        return False
    if first.rstrip("\n") != MARKER:
        return False
    if config is None or second.rstrip("\n") == f"{_SOURCE}{config}":
        return True
    # Written under another spelling of the jobs file's path (a relative one, a link).
    source = second.rstrip("\n").removeprefix(_SOURCE)
    try:
        return second.startswith(_SOURCE) and os.path.samefile(source, config)
    except OSError:
        return False


def install(directory: Path, written: Sequence[Unit], config: Path, prune: bool) -> list[str]:
    """Write the units into `directory`, each whole or not at all (a temporary file
    renamed), never over a file pglock did not write; with `prune`, remove the units it
    wrote for this jobs file whose jobs are gone. The names removed."""
    if not directory.is_dir():
        raise UsageError(f"--dir: {shown(str(directory))!r} is not a directory")
    source = spelled(config)
    for unit in written:
        target = directory / unit.name
        if (target.exists() or target.is_symlink()) and not ours(target):
            raise UsageError(f"--dir: {shown(str(target))} exists and was not written by "
                             "pglock systemd: move it away first")
    staged: list[tuple[str, Path]] = []
    try:
        for unit in written:
            handle, name = tempfile.mkstemp(prefix=f".{PREFIX}", suffix=".tmp", dir=directory)
            staged.append((name, directory / unit.name))
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(unit.text)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(name, 0o644)
        for name, target in staged:
            os.replace(name, target)
    except OSError as error:
        for name, _ in staged:
            Path(name).unlink(missing_ok=True)
        raise UsageError(f"--dir: cannot write in {shown(str(directory))}: "
                         f"{error.strerror or error}") from None
    removed: list[str] = []
    if prune:
        keep = {unit.name for unit in written}
        for candidate in sorted(directory.glob(f"{PREFIX}*")):
            if candidate.suffix in (".service", ".timer") and candidate.name not in keep \
                    and ours(candidate, source):
                try:
                    candidate.unlink()
                except OSError as error:
                    raise UsageError(f"--prune: cannot remove {shown(str(candidate))}: "
                                     f"{error.strerror or error}") from None
                removed.append(candidate.name)
    return removed
