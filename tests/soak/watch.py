"""What the soak sees of the machine it runs on, beside the faults it injects.

The fleet shares a machine (2 cores in CI, other work beside it). A stall of that machine
is a fault too: a pglock starved of CPU cannot renew in time and gives its lock up (safely:
it stops its command first), and a slot can be missed for it. So the soak watches itself:
a thread that should wake every 0.2 s and wakes much later saw the machine stall, and the
stall goes to the fault log as an `observed-stall` of every host. It may explain a missed
slot, never an overlap. The load average is sampled for the report.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from .history import Fault, append, now_ns

NAP = 0.2
# A wake-up this late counts as a stall (a renewal statement that takes this long is
# already a third of the way to a 10 s lease's deadline).
STALL = 1.0


class Watch:
    def __init__(self, out: Path) -> None:
        self.log = out / "faults.jsonl"
        self.loads: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        last, last_wall = now_ns(), time.time()
        while not self.stopped.wait(NAP):
            now, wall = now_ns(), time.time()
            if (now - last) / 1e9 > NAP + STALL:
                append(Fault("observed-stall", None, last, now, last_wall, wall,
                             detail=f"woke {(now - last) / 1e9 - NAP:.1f}s late"), self.log)
            if len(self.loads) < 100_000:
                self.loads.append(os.getloadavg()[0])
            last, last_wall = now, wall

    def load(self) -> dict[str, float]:
        values = sorted(self.loads) or [0.0]
        return {"median": round(values[len(values) // 2], 1), "max": round(values[-1], 1)}
