"""Checker 1, held by two: no two commands of a job ran at once (no more than --limit of a
semaphore, and never two on one seat), and the guarded resource took no stale write.

A command's interval runs from its `enter` mark to its last mark: it ticks every 0.1 s,
so the last mark is the last moment it is known to have been alive and acting; a
command that was SIGKILLed leaves no `leave`, and one that was frozen and thawed ticks
again (and so stretches its interval) the moment it runs. Intervals are compared on
CLOCK_BOOTTIME (history.py).

An overlap is a defect unless a fault outside pglock's promise explains it:

- `frozen-host`: the earlier command's whole host was stopped (SIGSTOP of every process:
  a VM freeze) long enough for its lease to run out, and thawed after the later one
  started. docs/lease.md, "What it does not promise": nothing local can act while
  paused; only a fencing token protects the resource (and the guard below refused the
  stale writes).

An advisory overlap is a defect whatever broke the holder's session (a terminated
backend, a reset connection, a restart): a contender takes an advisory row only once its
holder has stopped its command (the row's stops_by: docs/advisory.md, "The lock-delay";
issue 33 ended the `advisory-window` excuse).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from .history import FAILOVERS, NS, Fault, JobSpec, Mark, Run, Write, processes


@dataclass(frozen=True)
class Interval:
    job: str
    seat: int
    token: int
    host: str
    pid: int
    enter: int
    last: int
    # The command worked to its end (a `done` mark): nothing cut it short.
    done: bool
    # Its slot (PGLOCK_SLOT, "" without one) and attempt: one run's attempts share a token.
    slot: str = ""
    attempt: int = 0


@dataclass(frozen=True)
class Overlap:
    first: Interval
    second: Interval
    verdict: str  # "defect" or "frozen-host"

    @property
    def seconds(self) -> float:
        return (min(self.first.last, self.second.last) - self.second.enter) / NS


@dataclass(frozen=True)
class StaleWrites:
    refused: int
    # Accepted writes whose token was lower than one accepted before: the guard failed.
    accepted_lower: list[Write]


def intervals(marks: Iterable[Mark]) -> list[Interval]:
    """One interval per command process, from its marks."""
    found = []
    for process_marks in processes(marks):
        first = process_marks[0]
        found.append(Interval(first.job, first.seat, first.token, first.host, first.pid,
                              first.at, process_marks[-1].at,
                              any(m.kind == "done" for m in process_marks),
                              first.slot, first.attempt))
    return sorted(found, key=lambda i: i.enter)


def overlaps(found: list[Interval], jobs: dict[str, JobSpec],
             faults: list[Fault]) -> list[Overlap]:
    """Every pair of commands that broke a job's limit, with its verdict."""
    by_job: dict[str, list[Interval]] = defaultdict(list)
    for interval in found:
        by_job[interval.job].append(interval)
    result: list[Overlap] = []
    for job, job_intervals in by_job.items():
        spec = jobs.get(job, JobSpec(job))
        for first, second in _conflicts(job_intervals, spec.limit):
            result.append(Overlap(first, second, verdict(first, second, spec, faults)))
    return result


def _conflicts(job_intervals: list[Interval],
               limit: int) -> Iterable[tuple[Interval, Interval]]:
    """(running, entering) pairs: the entering command found its seat taken, or the
    job's limit reached. Sweep over enters: O(n * limit)."""
    active: list[Interval] = []
    for entering in sorted(job_intervals, key=lambda i: i.enter):
        active = [a for a in active if a.last > entering.enter]
        same_seat = [a for a in active if a.seat == entering.seat]
        if same_seat:
            yield from ((a, entering) for a in same_seat)
        elif len(active) >= limit:
            # One pair per excess entry: the oldest running command is named.
            yield active[0], entering
        active.append(entering)


def verdict(first: Interval, second: Interval, spec: JobSpec, faults: list[Fault]) -> str:
    if _frozen_past_lease(first, second, spec, faults):
        return "frozen-host"
    return "defect"


def _frozen_past_lease(first: Interval, second: Interval, spec: JobSpec,
                       faults: list[Fault]) -> bool:
    """The first command's host was frozen, from inside its run until after the second
    one started, for longer than its lease can outlast."""
    return any(f.kind == "freeze-host" and f.host == first.host
               and first.enter <= f.end and f.start <= second.enter
               and (f.end - f.start) / NS >= spec.safe_freeze()
               for f in faults)


def stale_writes(writes: Iterable[Write]) -> StaleWrites:
    """Refused writes, and any accepted write with a token below one accepted before it
    (per job and seat: a seat's token says nothing of another's)."""
    highest: dict[tuple[str, int], int] = {}
    refused = 0
    lower: list[Write] = []
    for write in sorted(writes, key=lambda w: w.id):
        key = (write.job, write.seat)
        if not write.accepted:
            refused += 1
            continue
        if write.token < highest.get(key, write.token):
            lower.append(write)
        highest[key] = max(highest.get(key, write.token), write.token)
    return StaleWrites(refused, lower)


@dataclass(frozen=True)
class Repeat:
    """Two holders given one fencing token (of a job's seat): the later one's writes pass
    the guard as the earlier one's did, so the token fences nothing between them."""

    first: Interval
    second: Interval
    # The latest failover before the second started, since shortly before the first did
    # (None: none).
    failover: Fault | None


# The first holder's token was given at its acquire, before its command entered: on a
# loaded machine, up to this many seconds before (seed 23, async: 9 s).
TOKEN_LOOKBACK = 30.0


def lost_start(repeat: Repeat, runs: Iterable[Run]) -> bool:
    """Whether a repeat is one holder running an attempt again because the old primary
    lost that attempt's start record in an asynchronous failover (docs/ha.md, "What
    asynchronous replication still cannot give"): the same host, token, slot and attempt
    number, a lagged failover between the two commands, and one run recorded for the two.
    Nobody else got the token: it fences nothing less than before."""
    a, b = repeat.first, repeat.second
    if (a.host != b.host or (a.slot, a.attempt) != (b.slot, b.attempt)
            or repeat.failover is None or repeat.failover.kind != "failover-lagged"):
        return False
    recorded = [r for r in runs if (r.job, r.holder, r.token, r.attempt)
                == (a.job, a.host, a.token, a.attempt)]
    return len(recorded) == 1


def repeated_tokens(found: list[Interval], faults: list[Fault]) -> list[Repeat]:
    """Commands of one job and seat under one token that are not one run's attempts: on
    two hosts, or twice the same attempt on one host. A defect whatever explains it (a
    failover that lost the token's last increment included: issue 33)."""
    by_token: dict[tuple[str, int, int], list[Interval]] = defaultdict(list)
    for interval in found:
        by_token[(interval.job, interval.seat, interval.token)].append(interval)
    failovers = sorted((f for f in faults if f.kind in FAILOVERS), key=lambda f: f.start)
    repeats = []
    for group in by_token.values():
        seen: list[Interval] = []
        for later in sorted(group, key=lambda i: i.enter):
            earlier = next((i for i in seen if i.host != later.host
                            or (i.slot, i.attempt) == (later.slot, later.attempt)), None)
            if earlier is not None:
                between = [f for f in failovers
                           if earlier.enter - TOKEN_LOOKBACK * NS <= f.end
                           and f.start <= later.enter]
                repeats.append(Repeat(earlier, later, between[-1] if between else None))
            seen.append(later)
    return repeats
