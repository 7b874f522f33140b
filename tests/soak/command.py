"""The command the fleet's pglock runs: it works for a while, and leaves evidence.

    command.py MARKS HOST DSN SECONDS FAIL_CHANCES SEED

Marks (enter, a tick every 0.1 s, fail when it is about to exit 1, done or leave) go
to MARKS with O_APPEND, one unbuffered write per line, read on CLOCK_BOOTTIME. pglock
may run with the wall-clock shim loaded for a clock offset (wallclock.c); this command
is started through
`env -u LD_PRELOAD` so that no faked clock is loaded here at all. Every 0.5 s a thread
writes the fencing token to the guarded resource (soak.fenced_write), which refuses a
stale one. FAIL_CHANCES is a comma-separated chance per attempt (the last for any later
one): with it, decided by the seed, the job, its slot and attempt, the command fails on
purpose: exit 1 after its work.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
import time
from types import FrameType

TICK = 0.1
WRITE_EVERY = 0.5


class Marker:
    def __init__(self, path: str, host: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        env = os.environ
        self.fields = " ".join([
            env["PGLOCK_JOB"], env.get("PGLOCK_SEAT", "0"), env["PGLOCK_FENCING_TOKEN"], host,
            str(os.getpid()), env.get("PGLOCK_SLOT", "-"), env.get("PGLOCK_ATTEMPT", "0")])

    def mark(self, kind: str) -> None:
        at = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        os.write(self.fd, f"{at} {kind} {self.fields}\n".encode())


def writer(dsn: str, host: str, stop: threading.Event) -> None:
    """Write the token to the guarded resource until the command ends; a broken
    connection is retried (the host may be cut off: the tick goes on meanwhile)."""
    import psycopg  # here, so that the enter mark does not wait for the import

    job, token = os.environ["PGLOCK_JOB"], int(os.environ["PGLOCK_FENCING_TOKEN"])
    seat = int(os.environ.get("PGLOCK_SEAT", "0"))
    conn: psycopg.Connection[tuple[object, ...]] | None = None
    while not stop.wait(WRITE_EVERY if conn else 0.0):
        try:
            if conn is None:
                conn = psycopg.connect(dsn, autocommit=True, connect_timeout=3,
                                       tcp_user_timeout=3000, keepalives_idle=2,
                                       keepalives_interval=1, keepalives_count=2)
            conn.execute("SELECT soak.fenced_write(%s, %s, %s, %s)", (job, seat, token, host))
        except psycopg.Error:
            conn = None
            stop.wait(0.5)


def fails(seed: str, chances: list[float]) -> bool:
    attempt = int(os.environ.get("PGLOCK_ATTEMPT", "1"))
    key = f"{seed}:{os.environ['PGLOCK_JOB']}:{os.environ.get('PGLOCK_SLOT', '')}:{attempt}"
    draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return draw < chances[min(attempt, len(chances)) - 1]


def main() -> None:
    marks, host, dsn, seconds, chances, seed = sys.argv[1:7]
    marker = Marker(marks, host)
    marker.mark("enter")

    def stopped(signum: int, frame: FrameType | None) -> None:
        marker.mark("leave")
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stopped)
    stop = threading.Event()
    threading.Thread(target=writer, args=(dsn, host, stop), daemon=True).start()
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        time.sleep(TICK)
        marker.mark("tick")
    stop.set()
    failing = fails(seed, [float(c) for c in chances.split(",")])
    if failing:
        # Said before `done`: a command that worked to its end and exits 0 is a completion
        # (the slot checker finds completions the database lost in a failover).
        marker.mark("fail")
    marker.mark("done")
    # os._exit: the writer may sit in a connect to a host cut off; do not wait for it.
    os._exit(1 if failing else 0)


if __name__ == "__main__":
    main()
