"""The records of a soak, and the one clock they share.

Every time the checkers compare is read on CLOCK_BOOTTIME, which no fault here can skew:
the hosts are network namespaces of one machine, so they share it, and the wall-clock
shim of a clock fault (wallclock.c) is loaded only into pglock, never into the command
that writes the marks nor into the soak itself. Wall times (`*_wall`, seconds since the
epoch) are kept beside them only to line records up with slots and with the database's
`runs` rows.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

NS = 1_000_000_000
# The faults that promote the standby (a soak with --replication): the lagged one held the
# standby's WAL receiver back first, so the new primary lacks the old one's last commits.
FAILOVERS = frozenset({"switchover", "failover", "failover-lagged"})


def now_ns() -> int:
    """The soak's clock: CLOCK_BOOTTIME, shared by every simulated host."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


@dataclass(frozen=True)
class JobSpec:
    """How the fleet runs one job (the same on every host, as one crontab would)."""

    name: str
    mode: str = "lease"
    schedule: str | None = None
    limit: int = 1
    # --candidates K: only each slot's first K hosts contend (docs/fleet.md).
    candidates: int | None = None
    retries: int = 0
    ttl: float = 10.0
    wait: float = 0.0
    # Seconds the command works, drawn uniformly from this range.
    seconds: tuple[float, float] = (0.5, 3.0)
    # Chance that attempt 1, 2, ... fails on purpose (exit 1; the last figure for any
    # later attempt), to make retries and dead slots.
    fail: tuple[float, ...] = (0.0,)

    def safe_freeze(self) -> float:
        """The shortest whole-host freeze that can outlast this job's lease.

        The lease was renewed at most ttl/3 before the freeze began and runs ttl from
        there, less the margin the holder keeps (docs/lease.md): a shorter freeze cannot
        let another host in, so an overlap after one is not excused by it.
        """
        return self.ttl * 2 / 3 - max(1.0, self.ttl / 10)


@dataclass(frozen=True)
class Mark:
    """One line a command wrote: `enter`, `tick` (every 0.1 s), `fail` (about to exit 1 on
    purpose, written before its `done`), `done` (worked to the end, about to exit) or
    `leave` (stopped by SIGTERM)."""

    at: int
    kind: str
    job: str
    seat: int
    token: int
    host: str
    pid: int
    slot: str = ""
    attempt: int = 0

    def line(self) -> str:
        return (f"{self.at} {self.kind} {self.job} {self.seat} {self.token} {self.host} "
                f"{self.pid} {self.slot or '-'} {self.attempt}\n")

    @classmethod
    def parse(cls, line: str) -> Mark:
        at, kind, job, seat, token, host, pid, slot, attempt = line.split()
        return cls(int(at), kind, job, int(seat), int(token), host, int(pid),
                   "" if slot == "-" else slot, int(attempt))


def processes(marks: Iterable[Mark]) -> list[list[Mark]]:
    """The marks of each command process, in time order."""
    # By every field a command writes, not its pid alone: pids wrap in a long soak.
    by_process: dict[tuple[str, int, int, str, int, str, int], list[Mark]] = defaultdict(list)
    for m in marks:
        by_process[(m.job, m.seat, m.token, m.host, m.pid, m.slot, m.attempt)].append(m)
    return [sorted(process, key=lambda m: m.at) for process in by_process.values()]


@dataclass(frozen=True)
class Fault:
    """One fault the nemesis injected, from start to end (equal for an instant one).
    `host` is None for a fault of the server, which every host meets."""

    kind: str
    host: str | None
    start: int
    end: int
    start_wall: float
    end_wall: float
    job: str | None = None
    detail: str = ""

    def touches(self, host: str) -> bool:
        return self.host is None or self.host == host


@dataclass(frozen=True)
class Invocation:
    """One `pglock run` the fleet's cron started, and how it ended."""

    host: str
    job: str
    # The slot cron fired it for (epoch seconds), None for an unscheduled job.
    slot: float | None
    fired: int
    fired_wall: float
    ended: int
    ended_wall: float
    code: int


@dataclass(frozen=True)
class Run:
    """A row of pglock's `runs` table."""

    id: int
    job: str
    slot: float | None
    attempt: int | None
    seat: int | None
    holder: str
    token: int | None
    outcome: str
    started_wall: float
    finished_wall: float | None


@dataclass(frozen=True)
class SlotRow:
    """A row of pglock's `slots` table."""

    job: str
    slot: float
    attempts: int
    attempt_limit: int
    succeeded_run_id: int | None
    closed: bool


@dataclass(frozen=True)
class Write:
    """One write to the guarded resource, in the order the resource took them."""

    id: int
    job: str
    seat: int
    token: int
    host: str
    accepted: bool


@dataclass
class History:
    """Everything the checkers read."""

    jobs: dict[str, JobSpec]
    hosts: list[str]
    marks: list[Mark] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    invocations: list[Invocation] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    slots: list[SlotRow] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    # The scheduled slots the checkers expect (epoch seconds): every fire time cron
    # reached on every host while the fleet was firing.
    expected_slots: list[float] = field(default_factory=list)
    # The server: "none" (one), or a primary and a standby, "sync" or "async".
    replication: str = "none"
    # (host, job, slot) of the triggers that were no candidate of their slot (--candidates)
    # and asked nothing, from the hosts' event logs; with the rank each had.
    stood_by: dict[tuple[str, str, float], int] = field(default_factory=dict)


def read_stood_by(paths: Iterable[Path]) -> dict[tuple[str, str, float], int]:
    """The `skipped` events with reason `not_candidate` of the hosts' event logs."""
    found: dict[tuple[str, str, float], int] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("reason") == "not_candidate" and event.get("slot"):
                slot = datetime.fromisoformat(event["slot"]).timestamp()
                found[(event["holder"], event["job"], slot)] = int(
                    event.get("candidate_rank") or 0)
    return found


T = TypeVar("T")


def dump(records: Iterable[Any], path: Path) -> None:
    """Dataclass records as JSON lines."""
    with path.open("w") as out:
        for record in records:
            out.write(json.dumps(asdict(record)) + "\n")


def append(record: Any, path: Path) -> None:
    """One record, appended as a JSON line (one write: logs survive a killed soak)."""
    with path.open("a") as out:
        out.write(json.dumps(asdict(record)) + "\n")


def load(kind: type[T], path: Path) -> list[T]:
    if not path.exists():
        return []
    return [kind(**_tuples(json.loads(line))) for line in path.read_text().splitlines()
            if line.strip()]


def _tuples(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


def read_marks(paths: Iterable[Path]) -> Iterator[Mark]:
    """Every complete line of the marks files (a command killed mid-write leaves at most
    a torn last line, skipped)."""
    for path in paths:
        for line in path.read_text().splitlines():
            if len(line.split()) == 9:
                yield Mark.parse(line)
