"""Parse the durations and sizes operators type: 90, 90s, 5m, 1h30m, 4KiB."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import NamedTuple

from pglock.errors import UsageError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", re.ASCII)
_SIZE = re.compile(r"(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?", re.IGNORECASE | re.ASCII)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024,
               "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
               "g": 1024**3, "gb": 1000**3, "gib": 1024**3}


MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


class Bounds(NamedTuple):
    """The values an option accepts, both ends included unless `above` (more than `low`)."""

    low: float
    high: float
    above: bool = False

    def text(self) -> str:
        low = "more than 0" if self.above and self.low == 0 else format_bound(self.low)
        return f"{low} to {format_bound(self.high)}"

    def admits(self, value: float) -> bool:
        return (value > self.low if self.above else value >= self.low) and value <= self.high


# Every duration pglock accepts, and its range: refused at parse time, so no timeout,
# thread join or database interval derived from one can overflow, and no row written
# with one can break a reader (a timestamp past year 9999 does not fit Python).
# README.md and docs/operators.md list the same ranges.
DURATIONS: dict[str, Bounds] = {
    "--ttl": Bounds(5, 7 * DAY),
    "--connect-timeout": Bounds(0, HOUR),
    "--wait": Bounds(0, 7 * DAY),
    "--jitter": Bounds(0, DAY),
    "--min-hold": Bounds(0, 7 * DAY),
    "--max-runtime": Bounds(0, 366 * DAY, above=True),
    "--kill-after": Bounds(0, HOUR),
    "--deadline": Bounds(0, 366 * DAY, above=True),
    "--grace": Bounds(0, 366 * DAY),
    "--since": Bounds(0, 36500 * DAY),
    "--older-than": Bounds(0, 36500 * DAY),
    "--interval": Bounds(0.5, HOUR),
    "--retry-delay": Bounds(0, DAY),
    # Candidates' turns (docs/fleet.md, "Candidates").
    "--candidate-step": Bounds(0, HOUR),
    "--candidates-refresh": Bounds(1, 7 * DAY),
    "--hook-timeout": Bounds(0, DAY, above=True),
    # pause --until as a span from now: a pause, not a decommission (forget is that).
    "--until": Bounds(0, 366 * DAY, above=True),
    # check's thresholds.
    "--paused-warning": Bounds(0, 36500 * DAY),
    "--slow-warning": Bounds(0, 366 * DAY),
    "--slow-critical": Bounds(0, 366 * DAY),
}
# The moments operators type (ISO 8601, or HH:MM): how far before now (`low`) and after
# now (`high`) each may be, by this host's clock. Refused at parse time, so that no zone's
# offset carries one past year 9999 or before year 1, in Python or in the database. A
# pause ends in the future (the database's clock judges the past); a slot replayed is at
# most as old as the history --since reads, and not much ahead of a skewed clock.
MOMENTS: dict[str, Bounds] = {
    "--until": Bounds(366 * DAY, 366 * DAY),
    "--slot": Bounds(36500 * DAY, DAY),
    # The end of the dashboard's timeline (pglock serve, /timeline?end=).
    "end": Bounds(36500 * DAY, 366 * DAY),
}
# Either end of --expect-duration MIN..MAX (a range, so not in DURATIONS, whose options
# each take one duration).
EXPECTED = Bounds(0, 366 * DAY)
# Sizes and counts, likewise.
OUTPUT_TAIL = Bounds(0, 1024**2)
HISTORY_LIMIT = Bounds(1, 100_000)
RETRIES = Bounds(0, 100)
# --limit: the seats of a semaphore.
SEATS = Bounds(1, 1000)
# --candidates: how many hosts contend for a slot.
CANDIDATES = Bounds(1, 1000)
# --catch-up-limit: how many missed slots one trigger may run before its own.
CATCH_UP_LIMIT = Bounds(1, 1000)
# A --window's length: not in DURATIONS, where a jobs-file key of that name would be read
# as a duration (a window is a cron expression and a duration).
WINDOW_LENGTH = Bounds(0, 366 * DAY, above=True)
# --reason of the operator commands, in characters: an audit row's note, not a document.
REASON_LENGTH = Bounds(1, 1000)
# The embedded server's linger (PGLOCK_EMBEDDED_LINGER, embedded_linger): not an option.
EMBEDDED_LINGER = Bounds(0, 7 * DAY)
# How long the embedded server stays up after its last user left, unless configured:
# a job every few minutes finds it warm.
DEFAULT_LINGER = 600.0


def format_bound(seconds: float) -> str:
    """A range's end as an operator types it: 0, 500ms, 5s, 1h, 7d."""
    for unit, size in (("d", DAY), ("h", HOUR), ("m", MINUTE), ("s", 1.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return "0" if seconds == 0 else f"{seconds * 1000:g}ms"


def parse_duration(text: str, *, option: str = "duration") -> float:
    """Seconds in `text`: a bare number is seconds; units ms, s, m, h, d combine (1h30m).

    An option listed in DURATIONS must fall within its range.
    """
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value, re.ASCII):
        seconds = float(value)
    else:
        parts = _PART.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise UsageError(f"{option}: {text!r} is not a duration "
                             "(examples: 90, 90s, 5m, 1h30m)")
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    bounds = DURATIONS.get(option)
    if bounds is not None and not (math.isfinite(seconds) and bounds.admits(seconds)):
        raise UsageError(f"{option}: {text.strip()} is out of range ({bounds.text()})")
    return seconds


def parse_expected(text: str, *, option: str = "--expect-duration",
                   ) -> tuple[float | None, float | None]:
    """`MIN..MAX` as (MIN, MAX) seconds, either side optional (`5m..`, `..1h`), not both."""
    low, dots, high = text.strip().partition("..")
    if not dots or not (low.strip() or high.strip()):
        raise UsageError(f"{option}: {text!r} is not a range (examples: 30s..5m, 1m.., ..2h)")
    bounds = (None if not low.strip() else parse_duration(low, option=option),
              None if not high.strip() else parse_duration(high, option=option))
    for end in bounds:
        if end is not None and not (math.isfinite(end) and EXPECTED.admits(end)):
            raise UsageError(f"{option}: {text.strip()} is out of range (each end "
                             f"{EXPECTED.text()})")
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        raise UsageError(f"{option}: {text.strip()}: MIN is above MAX")
    if bounds[1] == 0:
        raise UsageError(f"{option}: MAX must be more than 0")
    return bounds
def check_moment(moment: datetime, option: str, text: str) -> datetime:
    """`moment` (naive: local time) as an aware time, refused outside MOMENTS[option]."""
    bounds = MOMENTS[option]
    try:
        aware = moment if moment.tzinfo else moment.astimezone()
        if not moment.tzinfo and aware.astimezone().replace(tzinfo=None) != moment:
            # A local time the clocks skip (spring forward): Python would take it an hour
            # early, without a word.
            raise UsageError(f"{option}: {text.strip()} is not a time here: the clocks skip "
                             "it (daylight saving time begins); give a time after the change")
        ahead = (aware - datetime.now(UTC)).total_seconds()
    except (OverflowError, OSError, ValueError):
        # The local zone's offset carried it past year 1 or year 9999.
        ahead = -math.inf if moment.year < 5000 else math.inf
    if ahead < -bounds.low:
        raise UsageError(f"{option}: {text.strip()} is more than {format_bound(bounds.low)} "
                         "in the past")
    if ahead > bounds.high:
        raise UsageError(f"{option}: {text.strip()} is more than {format_bound(bounds.high)} "
                         "ahead")
    return aware


def check_reason(reason: str | None, required: str | None,
                 what: str = "--reason") -> str | None:
    """An operator's --reason: given when `required` (the message if not), within
    REASON_LENGTH characters, without NUL (no database column takes one). `what` names
    it in the message: the option, or the dashboard's form field."""
    if reason is None or not reason.strip():
        if required is not None:
            raise UsageError(required)
        return reason
    if len(reason) > REASON_LENGTH.high:
        raise UsageError(f"{what}: {len(reason)} characters; at most "
                         f"{REASON_LENGTH.high:g}")
    if "\0" in reason:
        raise UsageError(f"{what}: contains a NUL character")
    return reason


def check_count(value: int, option: str, bounds: Bounds) -> int:
    """Refuse a count or size outside its range."""
    if not bounds.admits(value):
        raise UsageError(f"{option}: {value} is out of range ({bounds.low:g} to "
                         f"{bounds.high:g})")
    return value


def parse_size(text: str, *, option: str = "size") -> int:
    """Bytes in `text`: 4096, 4KiB, 4k, 1MB."""
    match = _SIZE.fullmatch(text.strip())
    if not match or len(match.group(1)) > 20:
        raise UsageError(f"{option}: {text!r} is not a size (examples: 0, 4096, 4KiB, 1MiB)")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]


def format_duration(seconds: float) -> str:
    """A short human form: 850ms, 42s, 3m05s, 2h01m, 3d04h."""
    # Each unit is chosen by the value as it will be shown: 0.9996 is "1.0s", not "1000ms".
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f}ms"
    if round(seconds, 1) < 10:
        return f"{seconds:.1f}s"
    if round(seconds) < 60:
        return f"{seconds:.0f}s"
    # Only the carry from seconds into minutes rounds; longer spans are cut, as a clock is.
    minutes, secs = divmod(max(60, int(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
