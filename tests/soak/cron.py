"""The fleet's cron: every host fires every job, as its crontab line would.

Scheduled jobs fire when the host's own clock (true time plus the offset the nemesis
gave it) reaches each minute, as cron does on a host whose clock is off; a frozen host
fires nothing (its cron is frozen too) and on thaw fires the slot it is in, once, as
cronie does after a short time jump. Unscheduled jobs fire every `period` seconds or so
(0.5 to 1.5 of it, drawn per host) so that hosts contend for them all the time.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .fleet import Host
from .history import Invocation, JobSpec, append, now_ns

PGLOCK = str(Path(sys.executable).with_name("pglock"))
COMMAND = str(Path(__file__).with_name("command.py"))
SHIM_SOURCE = Path(__file__).with_name("wallclock.c")
NAP = 0.05


@dataclass
class Launch:
    host: Host
    job: str
    slot: float | None
    process: subprocess.Popen[bytes]
    fired: int
    fired_wall: float


class Cron:
    def __init__(self, hosts: list[Host], jobs: list[JobSpec], out: Path, seed: int,
                 period: float, shim: Path | None = None) -> None:
        self.hosts = hosts
        self.jobs = jobs
        self.out = out
        self.seed = seed
        self.period = period
        # The wall-clock shim (wallclock.c, built by build_shim); None: no clock faults.
        self.shim = shim
        self.rng = {h.name: random.Random(f"{seed}:cron:{h.name}") for h in hosts}
        self.offsets = {h.name: 0 for h in hosts}
        self.frozen: set[str] = set()
        # Held while a launch is decided and started, and while a host is frozen, so that
        # nothing starts on a host being frozen.
        self.lock = threading.Lock()
        self.running: dict[int, Launch] = {}
        self.invocations = out / "invocations.jsonl"
        self.stopped = threading.Event()

    def host_time(self, host: Host) -> float:
        return time.time() + self.offsets[host.name]

    def run(self, until: float) -> None:
        """Fire until time.time() reaches `until`, reaping as it goes."""
        now = time.time()
        next_slot = {h.name: math.floor(self.host_time(h) / 60) * 60 + 60.0 for h in self.hosts}
        next_fire = {(h.name, j.name): now + self.rng[h.name].uniform(0, self.period)
                     for h in self.hosts for j in self.jobs if j.schedule is None}
        while time.time() < until and not self.stopped.is_set():
            for host in self.hosts:
                with self.lock:
                    if host.name in self.frozen:
                        continue
                    self._scheduled(host, next_slot)
                    self._unscheduled(host, next_fire)
            time.sleep(NAP)

    def _scheduled(self, host: Host, next_slot: dict[str, float]) -> None:
        clock = self.host_time(host)
        if clock < next_slot[host.name]:
            return
        slot = math.floor(clock / 60) * 60
        next_slot[host.name] = slot + 60
        for job in self.jobs:
            if job.schedule is not None:
                self.launch(host, job, slot)

    def _unscheduled(self, host: Host, next_fire: dict[tuple[str, str], float]) -> None:
        now = time.time()
        for job in self.jobs:
            key = (host.name, job.name)
            if job.schedule is None and now >= next_fire[key]:
                next_fire[key] = now + self.rng[host.name].uniform(0.5, 1.5) * self.period
                self.launch(host, job, None)

    def argv(self, host: Host, job: JobSpec) -> list[str]:
        options = ["--job", job.name, "--holder", host.name, "--mode", job.mode,
                   "--ttl", f"{job.ttl:g}s"]
        if job.schedule:
            options += ["--schedule", job.schedule, "--tz", "UTC"]
        else:
            # Without a schedule a released lock is held 20 s against a late host's rerun
            # of the same trigger (docs/lease.md); the soak wants contention instead.
            options += ["--min-hold", "0"]
        if job.limit > 1:
            options += ["--limit", str(job.limit)]
        if job.retries:
            options += ["--retries", str(job.retries), "--retry-delay", "1s"]
        if job.wait:
            options += ["--wait", f"{job.wait:g}s"]
        if job.candidates:
            # The event log says which triggers were no candidate (the slots checker).
            options += ["--candidates", str(job.candidates), "--candidate-step", "3s",
                        "--event-log", str(self.out / f"events-{host.name}.jsonl")]
        seconds = self.rng[host.name].uniform(*job.seconds)
        command = ["env", "-u", "LD_PRELOAD", "-u", "SOAK_CLOCK_OFFSET", sys.executable, COMMAND,
                   str(self.out / f"marks-{host.name}"), host.name, host.dsn,
                   f"{seconds:.2f}", ",".join(f"{c:g}" for c in job.fail), str(self.seed)]
        return [*host.exec_prefix(), PGLOCK, "run", *options, "--", *command]

    def environment(self, host: Host) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "LD_PRELOAD"))}
        # Verbose: a pglock that fails leaves its traceback in the host's log (it says
        # nothing more when all goes well).
        env.update(PGLOCK_DSN=host.dsn, PGLOCK_SCHEMA="pglock", PGLOCK_VERBOSE="1",
                   # Each host its own name in the census (the namespaces share the
                   # machine's host name: as one host, every trigger of cron-candidates
                   # ranked itself first) and its own state (--candidates' rosters).
                   PGLOCK_HOST=host.name, XDG_DATA_HOME=str(self.out / f"state-{host.name}"))
        offset = self.offsets[host.name]
        if offset and self.shim is not None:
            # The wall clock only: pglock's stopwatch (CLOCK_BOOTTIME) is the kernel's.
            env.update(LD_PRELOAD=str(self.shim), SOAK_CLOCK_OFFSET=str(offset))
        return env

    def launch(self, host: Host, job: JobSpec, slot: float | None) -> None:
        fired, fired_wall = now_ns(), time.time()
        with (self.out / f"pglock-{host.name}.log").open("ab") as log:
            process = subprocess.Popen(self.argv(host, job), env=self.environment(host),
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        launch = Launch(host, job.name, slot, process, fired, fired_wall)
        self.running[process.pid] = launch
        # A waiter per pglock: its end is stamped when it happens, whatever the loop does.
        threading.Thread(target=self._wait, args=(launch,), daemon=True).start()

    def _wait(self, launch: Launch) -> None:
        code = launch.process.wait()
        append(Invocation(launch.host.name, launch.job, launch.slot, launch.fired,
                          launch.fired_wall, now_ns(), time.time(),
                          code if code >= 0 else 128 - code), self.invocations)
        self.running.pop(launch.process.pid, None)

    def running_on(self, host: Host) -> list[Launch]:
        return [launch for launch in list(self.running.values())
                if launch.host == host and launch.process.poll() is None]

    def drain(self, timeout: float) -> int:
        """Wait for every pglock started to end; SIGKILL what is left; how many were."""
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            time.sleep(NAP)
        left = list(self.running.values())
        for launch in left:
            launch.process.kill()
        while self.running and time.monotonic() < deadline + 10:
            time.sleep(NAP)
        return len(left)


def build_shim(out: Path) -> Path | None:
    """Compile wallclock.c into out/; None when there is no C compiler (no clock faults)."""
    target = out / "wallclock.so"
    compiler = next((c for c in ("cc", "gcc") if shutil.which(c)), None)
    if compiler is None:
        return None
    done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(target),
                           str(SHIM_SOURCE), "-ldl"], capture_output=True, check=False)
    return target if done.returncode == 0 else None
