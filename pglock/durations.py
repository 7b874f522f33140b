"""Parse the durations and sizes operators type: 90, 90s, 5m, 1h30m, 4KiB."""

from __future__ import annotations

import re

from pglock.errors import UsageError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_SIZE = re.compile(r"(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024,
               "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
               "g": 1024**3, "gb": 1000**3, "gib": 1024**3}


def parse_duration(text: str, *, option: str = "duration") -> float:
    """Seconds in `text`: a bare number is seconds; units ms, s, m, h, d combine (1h30m)."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    parts = _PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise UsageError(f"{option}: {text!r} is not a duration (examples: 90, 90s, 5m, 1h30m)")
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


def parse_size(text: str, *, option: str = "size") -> int:
    """Bytes in `text`: 4096, 4KiB, 4k, 1MB."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise UsageError(f"{option}: {text!r} is not a size (examples: 0, 4096, 4KiB, 1MiB)")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]


def format_duration(seconds: float) -> str:
    """A short human form: 850ms, 42s, 3m05s, 2h01m, 3d04h."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
