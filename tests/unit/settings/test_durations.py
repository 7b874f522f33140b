"""Durations and sizes as operators type them, and durations as pglock prints them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from pglock.errors import ExitStatus, UsageError
from pglock.settings.durations import check_moment, format_duration, parse_duration, parse_size


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0),
    ("90", 90.0),
    ("1.5", 1.5),
    (" 90 ", 90.0),
    ("90s", 90.0),
    ("90S", 90.0),
    ("250ms", 0.25),
    ("5m", 300.0),
    ("2h", 7200.0),
    ("1d", 86400.0),
    ("1h30m", 5400.0),
    ("1d2h3m4s", 93784.0),
    ("1m500ms", 60.5),
    ("1.5h", 5400.0),
    ("0.5s", 0.5),
    ("10m10m", 1200.0),
])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [
    "", " ", "s", "5x", "-5s", "-5", "+5", "1e3", "inf", "nan", "5 m", "1h 30m", "1h30",
    "m5", "5mm", ".5s", "5.s", "1,5s", "1_000", "five", "5sec", "5min", "PT5M",
    # ARABIC-INDIC DIGIT FIVE: \d alone would read it as 5.
    pytest.param("\u0665m", id="arabic-indic-digit"),
])
def test_bad_durations_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_duration(text, option="--ttl")
    assert str(raised.value) == (f"--ttl: {text!r} is not a duration "
                                 "(examples: 90, 90s, 5m, 1h30m)")
    assert raised.value.exit_status is ExitStatus.USAGE


@pytest.mark.parametrize(("text", "size"), [
    ("0", 0),
    ("4096", 4096),
    ("4k", 4096),
    ("4K", 4096),
    ("4KiB", 4096),
    ("4kb", 4000),
    ("4KB", 4000),
    ("1m", 1024**2),
    ("1MiB", 1024**2),
    ("1MB", 1000**2),
    ("1g", 1024**3),
    ("1GiB", 1024**3),
    ("2GB", 2 * 1000**3),
    ("12b", 12),
    ("4 KiB", 4096),
    (" 4KiB ", 4096),
])
def test_sizes_parse(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "KiB", "-1", "1.5MiB", "4 lots", "4TiB", "4KiBs", "0x10",
                                  "4 4"])
def test_bad_sizes_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_size(text, option="--output-tail")
    assert str(raised.value) == (f"--output-tail: {text!r} is not a size "
                                 "(examples: 0, 4096, 4KiB, 1MiB)")


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0ms"),
    (0.0004, "0ms"),
    (0.85, "850ms"),
    (1, "1.0s"),
    (9.94, "9.9s"),
    (10, "10s"),
    (42.4, "42s"),
    (59.4, "59s"),
    (60, "1m00s"),
    (185, "3m05s"),
    (3599.9, "59m59s"),
    (3600, "1h00m"),
    (7260, "2h01m"),
    (86399, "23h59m"),
    (86400, "1d00h"),
    (273600, "3d04h"),
    (400 * 86400, "400d00h"),
])
def test_durations_format(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize(("seconds", "shown"), [(0.9996, "1.0s"), (59.6, "1m00s")])
def test_rounding_up_moves_to_the_next_unit(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


def _next_spring_forward() -> datetime:
    """02:30 on the next last Sunday of March: a local time Europe/Berlin skips."""
    today = datetime.now()
    for year in (today.year, today.year + 1):
        day = datetime(year, 3, 31, 2, 30)
        day -= timedelta(days=(day.weekday() + 1) % 7)
        if day > today + timedelta(days=1):
            return day
    raise AssertionError("no spring forward ahead")


@pytest.fixture
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("berlin")
def test_a_local_time_the_clocks_skip_is_refused() -> None:
    gap = _next_spring_forward()
    text = gap.isoformat(timespec="minutes")
    with pytest.raises(UsageError) as raised:
        check_moment(gap, "--until", text)
    assert str(raised.value) == (f"--until: {text} is not a time here: the clocks skip it "
                                 "(daylight saving time begins); give a time after the change")
    # An hour later exists, and an hour earlier: taken as written.
    for hours in (-1, 1):
        moment = gap + timedelta(hours=hours)
        assert check_moment(moment, "--until", "x").replace(tzinfo=None) == moment
