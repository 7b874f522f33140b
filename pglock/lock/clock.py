"""The local stopwatch: it decides nothing about who holds a lock, only how long we waited."""

from __future__ import annotations

import time

# CLOCK_BOOTTIME keeps counting through suspend, so a laptop lid or a paused VM cannot
# make a lease look younger than it is; elsewhere monotonic is the best there is.
_CLOCK = getattr(time, "CLOCK_BOOTTIME", None)


def now() -> float:
    """Seconds on a clock that never goes back."""
    if _CLOCK is not None:
        return time.clock_gettime(_CLOCK)
    return time.monotonic()
