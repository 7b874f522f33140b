"""Retries of a failed attempt: how long to wait before the next one.

Delays grow D, 2D, 4D ... (D is --retry-delay) up to a cap, then each is moved by a
random ±20 %, so that jobs that failed together (a database down for all of them) do
not come back together. The cap is an hour, or D itself when D is longer: a daily job
retried three times is still done the same morning.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# The longest nominal delay (before jitter), unless --retry-delay is itself longer.
CAP = 3600.0
JITTER = 0.2


def nominal(base: float, failed: int) -> float:
    """The delay after attempt `failed` (1-based) failed, before jitter."""
    cap = max(base, CAP)
    # 2**n overflows nothing below the cap's exponent; past it the cap holds anyway.
    return min(base * 2.0 ** min(failed - 1, 64), cap)


def delay(base: float, failed: int,
          uniform: Callable[[float, float], float] = random.uniform) -> float:
    """The delay after attempt `failed` failed: nominal, moved by at most ±JITTER."""
    return nominal(base, failed) * uniform(1.0 - JITTER, 1.0 + JITTER)
