"""The nemesis: faults on a seeded random schedule, each logged with its start and end.

The seed fixes when each fault comes, its kind, its host and its length. Which pglock a
process fault hits is whatever runs on that host at that moment (the first one the
seeded generator picks), so two runs with one seed inject the same faults but not
always into the same runs. With a standby (`--replication`, cluster.py) it fails over
too: a planned switchover, an unplanned failover, and (asynchronous only) a failover
that loses the last transactions; a run without one draws the faults it always drew.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .cron import Cron, Launch
from .fleet import Host
from .history import Fault, append, now_ns
from .server import Server

if TYPE_CHECKING:
    from .cluster import Cluster

WEIGHTS = {"partition": 2, "pause-pglock": 2, "freeze-host": 2, "kill-pglock": 2,
           "kill-command": 1, "restart-fast": 1, "restart-immediate": 1, "terminate": 2,
           "clock": 1}
# With a standby, besides: the failovers (history.FAILOVERS). The lagged one (the WAL
# receiver held back, then the primary killed) loses transactions: asynchronous only.
FAILOVER_WEIGHTS = {"sync": {"switchover": 1, "failover": 2},
                    "async": {"switchover": 1, "failover": 1, "failover-lagged": 1}}
# How long an asynchronous primary runs on alone before it dies (seconds).
LAG = (1.0, 5.0)
# docs/lease.md: hosts' clocks within 10 s of each other are what a trigger tolerates.
MAX_OFFSET = 9


@dataclass(frozen=True)
class Planned:
    at: float  # seconds after the start
    kind: str
    host: int  # index into the fleet
    seconds: float  # how long it lasts (a partition, a pause, a freeze, an offset, downtime)
    offset: int  # a clock fault's offset (seconds)
    pick: int  # which target, when there are several


def plan(seed: int, seconds: float, hosts: int, ttl: float, gap: tuple[float, float],
         warmup: float = 10.0, clock: bool = True, replication: str = "none",
         ) -> list[Planned]:
    """The faults, drawn from the seed (without clock faults when `clock` is false: the
    same draws, a clock fault's turn left empty). With a standby, failovers among them."""
    rng = random.Random(f"{seed}:nemesis")
    kinds, weights = zip(*{**WEIGHTS, **FAILOVER_WEIGHTS.get(replication, {})}.items(),
                         strict=True)
    schedule: list[Planned] = []
    at = warmup
    while True:
        at += rng.uniform(*gap)
        if at >= seconds:
            return schedule
        kind = rng.choices(kinds, weights)[0]
        length = {"partition": rng.uniform(1, 2 * ttl), "pause-pglock": rng.uniform(1, 2 * ttl),
                  "freeze-host": rng.uniform(1, 2 * ttl), "clock": rng.uniform(20, 90),
                  "restart-fast": rng.uniform(0, 3),
                  "restart-immediate": rng.uniform(0, 3)}.get(kind, 0.0)
        if replication != "none":
            # Drawn with a standby only: a run without one keeps its seeds' schedules.
            lag = rng.uniform(*LAG)
            if kind == "failover-lagged":
                length = lag
        offset = rng.choice([s * v for v in range(1, MAX_OFFSET + 1) for s in (-1, 1)])
        planned = Planned(at, kind, rng.randrange(hosts), length, offset,
                          rng.randrange(1 << 30))
        if clock or kind != "clock":
            schedule.append(planned)


class Nemesis:
    def __init__(self, cron: Cron, server: Server | Cluster, hosts: list[Host],
                 out: Path) -> None:
        self.cron = cron
        self.server = server
        self.hosts = hosts
        self.log = out / "faults.jsonl"
        self.busy: set[str] = set()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.skipped = 0
        self.stopped = threading.Event()

    def run(self, schedule: list[Planned], started: float) -> None:
        """Inject each planned fault at its time, each in a thread of its own."""
        for planned in schedule:
            if self.stopped.wait(max(0.0, started + planned.at - time.monotonic())):
                return
            thread = threading.Thread(target=self.inject, args=(planned,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        """No new faults; wait for the running ones to end (each heals itself)."""
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def inject(self, planned: Planned) -> None:
        host = self.hosts[planned.host]
        claim = _claim(planned.kind, host)
        with self.lock:
            if claim in self.busy:
                self.skipped += 1
                return
            if claim:
                self.busy.add(claim)
        try:
            action: Callable[[Planned, Host], Fault | None] = getattr(
                self, planned.kind.replace("-", "_"))
            fault = action(planned, host)
        finally:
            with self.lock:
                self.busy.discard(claim)
        if fault is None:
            self.skipped += 1
        else:
            append(fault, self.log)

    # Each fault: do it, undo it, return its record (None: nothing to hit).

    def partition(self, p: Planned, host: Host) -> Fault:
        start, wall = now_ns(), time.time()
        host.cut()
        try:
            time.sleep(p.seconds)
        finally:
            host.heal()
        return Fault("partition", host.name, start, now_ns(), wall, time.time(),
                     detail=f"{p.seconds:.1f}s")

    def pause_pglock(self, p: Planned, host: Host) -> Fault | None:
        target = self._target(p, host)
        if target is None:
            return None
        start, wall = now_ns(), time.time()
        _signal(target.process.pid, signal.SIGSTOP)
        try:
            time.sleep(p.seconds)
        finally:
            _signal(target.process.pid, signal.SIGCONT)
        return Fault("pause-pglock", host.name, start, now_ns(), wall, time.time(),
                     target.job, f"pid {target.process.pid} {p.seconds:.1f}s")

    def freeze_host(self, p: Planned, host: Host) -> Fault:
        with self.cron.lock:
            self.cron.frozen.add(host.name)
            start, wall = now_ns(), time.time()
            host.freeze()
        try:
            time.sleep(p.seconds)
        finally:
            with self.cron.lock:
                host.thaw()
                self.cron.frozen.discard(host.name)
        return Fault("freeze-host", host.name, start, now_ns(), wall, time.time(),
                     detail=f"{p.seconds:.1f}s")

    def kill_pglock(self, p: Planned, host: Host) -> Fault | None:
        target = self._target(p, host)
        if target is None:
            return None
        start, wall = now_ns(), time.time()
        _signal(target.process.pid, signal.SIGKILL)
        # Stamped before and after: a starved nemesis may take a while between the two.
        return Fault("kill-pglock", host.name, start, now_ns(), wall, time.time(), target.job,
                     f"pid {target.process.pid}")

    def kill_command(self, p: Planned, host: Host) -> Fault | None:
        launches = self.cron.running_on(host)
        commands = [(launch, pid) for launch in launches
                    for pid in _children(launch.process.pid) if _is_command(pid)]
        if not commands:
            return None
        launch, pid = commands[p.pick % len(commands)]
        start, wall = now_ns(), time.time()
        _signal(pid, signal.SIGKILL)
        return Fault("kill-command", host.name, start, now_ns(), wall, time.time(), launch.job,
                     f"pid {pid}")

    def restart_fast(self, p: Planned, host: Host) -> Fault:
        return self._restart("fast", p)

    def restart_immediate(self, p: Planned, host: Host) -> Fault:
        return self._restart("immediate", p)

    def _restart(self, mode: str, p: Planned) -> Fault:
        start, wall = now_ns(), time.time()
        self.server.stop(mode)
        time.sleep(p.seconds)
        self.server.restart()
        return Fault(f"restart-{mode}", None, start, now_ns(), wall, time.time(),
                     detail=f"down {p.seconds:.1f}s more")

    # Failovers (a standby in the soak: cluster.py). The fault lasts from the first act
    # (the primary stopped or killed, or the standby held back) until the new primary
    # takes writes; the old primary is then rebuilt as the new standby, under the same
    # claim, so that no other fault of the server comes meanwhile.

    def switchover(self, p: Planned, host: Host) -> Fault | None:
        return self._failover("switchover", p)

    def failover(self, p: Planned, host: Host) -> Fault | None:
        return self._failover("failover", p)

    def failover_lagged(self, p: Planned, host: Host) -> Fault | None:
        return self._failover("failover-lagged", p)

    def _failover(self, kind: str, p: Planned) -> Fault | None:
        cluster = self.server
        assert not isinstance(cluster, Server)
        if cluster.streaming() is None:
            return None  # no standby to promote (its rebuild failed)
        start, wall = now_ns(), time.time()
        if kind == "switchover":
            moved = cluster.switchover()
        else:
            if kind == "failover-lagged":
                cluster.hold_back()
                time.sleep(p.seconds)
            moved = cluster.failover()
        fault = Fault(kind, None, start, now_ns(), wall, time.time(), detail=(
            f"{moved}" + (f", WAL held back {p.seconds:.1f}s" if kind == "failover-lagged"
                          else "")))
        began = time.monotonic()
        try:
            cluster.rebuild()
        except Exception as error:  # no standby from now on: no further failover
            with (self.log.parent / "cluster.log").open("a") as log:
                log.write(f"{time.time():.3f} rebuild after {kind} failed: {error}\n")
            return replace(fault, detail=f"{fault.detail}, rebuild failed")
        # The rebuild loads the machine (a base backup, a server started): said, not excused.
        return replace(fault, detail=f"{fault.detail}, standby rebuilt in "
                                     f"{time.monotonic() - began:.1f}s")

    def terminate(self, p: Planned, host: Host) -> Fault | None:
        start, wall = now_ns(), time.time()
        try:
            hit = self.server.terminate(random.Random(p.pick))
        except Exception:  # the server is restarting: nothing to terminate
            return None
        if hit is None:
            return None
        address, job = hit
        name = next((h.name for h in self.hosts if h.ip == address), address)
        return Fault("terminate", name, start, now_ns(), wall, time.time(), job or None)

    def clock(self, p: Planned, host: Host) -> Fault:
        start, wall = now_ns(), time.time()
        self.cron.offsets[host.name] = p.offset
        try:
            self.stopped.wait(p.seconds)
        finally:
            self.cron.offsets[host.name] = 0
        return Fault("clock", host.name, start, now_ns(), wall, time.time(),
                     detail=f"{p.offset:+d}s for {p.seconds:.0f}s")

    def _target(self, p: Planned, host: Host) -> Launch | None:
        """A pglock of the host, a holder (its command running) when there is one: a fault
        on a pglock that is about to lose its race tells little."""
        launches = self.cron.running_on(host)
        holders = [launch for launch in launches
                   if any(_is_command(pid) for pid in _children(launch.process.pid))]
        chosen = holders or launches
        return chosen[p.pick % len(chosen)] if chosen else None


def _claim(kind: str, host: Host) -> str:
    """What a lasting fault holds, so that two of a kind never undo each other (a thaw
    resuming a paused pglock, two restarts at once); "" for an instant fault."""
    return {"partition": f"net:{host.name}", "pause-pglock": f"process:{host.name}",
            "freeze-host": f"process:{host.name}", "clock": f"clock:{host.name}",
            "restart-fast": "server", "restart-immediate": "server", "switchover": "server",
            "failover": "server", "failover-lagged": "server"}.get(kind, "")


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _children(pid: int) -> list[int]:
    """pglock's children and theirs: the command is its watchdog's child."""
    try:
        direct = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    below = []
    for child in direct:
        with contextlib.suppress(OSError):
            below += [int(c) for c in
                      Path(f"/proc/{child}/task/{child}/children").read_text().split()]
    return direct + below


def _is_command(pid: int) -> bool:
    try:
        # The command's own process (python command.py ...), not pglock or its watchdog,
        # whose command lines name command.py too.
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1].endswith(b"command.py")
    except (OSError, IndexError):
        return False
