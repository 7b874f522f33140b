"""The soak's report: what was injected, what was checked, what was found.

`takeover` is the time from a fault's start to the next run of the struck job (on the
same seat) under a newer fencing token, by the `runs` table (the database's clock of the
same machine), for each run the fault cut short: holding the lock when the fault began,
and ending other than `succeeded`. Only the unscheduled jobs count: they are fired every
few seconds, so the figure is pglock's, not the next minute's; it includes the wait for
the next trigger (up to the firing period) and, where the holder was silenced, the ttl.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from . import overlap, slots
from .history import FAILOVERS, NS, Fault, History, Run

STRIKES_HOLDERS = frozenset({"partition", "pause-pglock", "freeze-host", "kill-pglock",
                             "kill-command", "restart-fast", "restart-immediate",
                             "terminate"})


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)
    # Defects, one line each: any makes the soak fail.
    defects: list[str] = field(default_factory=list)
    # Overlaps outside pglock's promise, one line each.
    excused: list[str] = field(default_factory=list)
    # Missed slots a fault explains, one line each with what accounts for each host.
    explained: list[str] = field(default_factory=list)
    # Slots whose completion, and attempts whose start, a failover lost with the old
    # primary (asynchronous standby).
    lost: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.defects


def build(history: History) -> Report:
    report = Report()
    found = overlap.intervals(history.marks)
    pairs = overlap.overlaps(found, history.jobs, history.faults)
    for pair in pairs:
        line = _describe(pair)
        (report.defects if pair.verdict == "defect" else report.excused).append(line)
    repeats, lost_starts = [], []
    for repeat in overlap.repeated_tokens(found, history.faults):
        (lost_starts if overlap.lost_start(repeat, history.runs) else repeats).append(repeat)
    report.defects += [_repeat(r) for r in repeats]
    report.lost += [_lost_start(r) for r in lost_starts]
    stale = overlap.stale_writes(history.writes)
    report.defects += [f"write {w.id} of {w.job} seat {w.seat} accepted token {w.token} "
                       f"below one accepted before" for w in stale.accepted_lower]
    verdicts = slots.check(history)
    states = Counter(v.state for v in verdicts)
    for v in verdicts:
        if v.state == "missed-explained":
            report.explained.append(f"slot {_slot(v.slot)} of {v.job}: " + "; ".join(v.why))
        if v.state == "lost-completion":
            report.lost.append(f"slot {_slot(v.slot)} of {v.job}: " + "; ".join(v.why))
        if v.state in ("duplicate", "missed-unexplained"):
            report.defects.append(f"slot {_slot(v.slot)} of {v.job}: {v.state}: "
                                  + "; ".join(v.why))
    verdict_counts = Counter(p.verdict for p in pairs)
    report.figures = {
        "hosts": len(history.hosts),
        "faults": dict(sorted(Counter(f.kind for f in history.faults).items())),
        "invocations": len(history.invocations),
        "runs": len(history.runs),
        "runs_by_outcome": dict(sorted(Counter(r.outcome for r in history.runs).items())),
        "commands": len(found),
        "overlaps": verdict_counts["defect"],
        "overlaps_frozen_host": verdict_counts["frozen-host"],
        "repeated_tokens": len(repeats),
        "lost_starts": len(lost_starts),
        "replication": history.replication,
        "failovers": sum(f.kind in FAILOVERS for f in history.faults),
        "slots_checked": len(verdicts),
        "slots_ran": states["ran"],
        "slots_dead": states["dead"],
        "duplicate_slots": states["duplicate"],
        "lost_completions": states["lost-completion"],
        "unexplained_misses": states["missed-unexplained"],
        "unexplained_misses_by_job": dict(sorted(Counter(
            v.job for v in verdicts if v.state == "missed-unexplained").items())),
        "explained_misses": states["missed-explained"],
        "explained_misses_by_stall": sum(v.state == "missed-explained" and v.by_stall
                                         for v in verdicts),
        "writes_accepted": sum(w.accepted for w in history.writes),
        "stale_writes_refused": stale.refused,
        "takeover": takeover(history),
        "takeover_after_failover": failover_takeover(history, found),
        "ttl": max((spec.ttl for spec in history.jobs.values()), default=0.0),
    }
    return report


def failover_takeover(history: History,
                      found: list[overlap.Interval]) -> dict[str, dict[str, float]]:
    """p50/p95/max seconds from a failover's start (for a lagged one: the primary's death,
    its lag later) to the next command of each job it struck (an unscheduled job with a
    command running then, or a run recorded as holding its lock), by kind: by the marks,
    which a failover cannot lose."""
    exclusion = {name for name, spec in history.jobs.items() if spec.schedule is None}
    by_job: dict[str, list[overlap.Interval]] = defaultdict(list)
    for interval in found:
        by_job[interval.job].append(interval)
    samples: dict[str, list[float]] = defaultdict(list)
    for fault in history.faults:
        if fault.kind not in FAILOVERS:
            continue
        # A lagged failover strikes when the primary dies, its lag after the fault began.
        lag = re.search(r"held back ([0-9.]+)s", fault.detail)
        struck = fault.start + (int(float(lag.group(1)) * NS) if lag else 0)
        struck_wall = fault.start_wall + (struck - fault.start) / NS
        holding = {r.job for r in history.runs if r.started_wall <= struck_wall
                   and (r.finished_wall is None or r.finished_wall >= struck_wall)}
        for job in sorted(exclusion):
            commands = by_job[job]
            if job not in holding and not any(i.enter <= struck <= i.last for i in commands):
                continue
            later = [i.enter for i in commands if i.enter > struck]
            if later:
                samples[fault.kind].append((min(later) - struck) / NS)
    return {kind: _spread(values) for kind, values in sorted(samples.items())}


def _repeat(repeat: overlap.Repeat) -> str:
    a, b, failover = repeat.first, repeat.second, repeat.failover
    across = ("no failover between" if failover is None else
              f"across {failover.kind} ({failover.detail}) at {_clock(failover.start_wall)}")
    return (f"repeated token: {a.job} seat {a.seat}: token {a.token} on {a.host} (pid {a.pid}) "
            f"and on {b.host} (pid {b.pid}), {across}")


def _lost_start(repeat: overlap.Repeat) -> str:
    a, b, failover = repeat.first, repeat.second, repeat.failover
    assert failover is not None
    return (f"attempt {a.attempt} of {a.job} on {a.host} (token {a.token}, pid {a.pid}): its "
            f"start lost with the old primary in {failover.kind} ({failover.detail}) at "
            f"{_clock(failover.start_wall)}; its holder ran that attempt again (pid {b.pid})")


def _clock(wall: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(wall, datetime.UTC).strftime("%H:%M:%S")


def takeover(history: History) -> dict[str, dict[str, float]]:
    """p50/p95/max seconds from a fault to the struck job's next holder, by fault kind."""
    exclusion = {name for name, spec in history.jobs.items() if spec.schedule is None}
    by_seat: dict[tuple[str, int | None], list[Run]] = defaultdict(list)
    for run in history.runs:
        by_seat[(run.job, run.seat)].append(run)
    samples: dict[str, list[float]] = defaultdict(list)
    for fault in history.faults:
        if fault.kind not in STRIKES_HOLDERS:
            continue
        for victim in _struck(fault, history.runs):
            if victim.job not in exclusion or victim.token is None:
                continue
            later = [r.started_wall for r in by_seat[(victim.job, victim.seat)]
                     if (r.token or 0) > victim.token and r.started_wall > fault.start_wall]
            if later:
                samples[fault.kind].append(min(later) - fault.start_wall)
    return {kind: _spread(values) for kind, values in sorted(samples.items())}


def _struck(fault: Fault, runs: list[Run]) -> list[Run]:
    """The runs a fault cut short: holding the lock at its start (by the database's
    record) on its host (any host for a server fault), on its job when it aimed at one
    pglock, and ending other than succeeded."""
    return [r for r in runs if r.started_wall <= fault.start_wall
            and (r.finished_wall is None or r.finished_wall >= fault.start_wall)
            and r.outcome != "succeeded" and fault.touches(r.holder)
            and (fault.job is None or fault.job == r.job)]


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def rank(p: float) -> float:
        return round(ordered[max(0, math.ceil(p * len(ordered)) - 1)], 2)

    return {"n": len(ordered), "p50": rank(0.5), "p95": rank(0.95),
            "max": round(ordered[-1], 2)}


def _describe(pair: overlap.Overlap) -> str:
    a, b = pair.first, pair.second
    return (f"{pair.verdict}: {a.job} seat {a.seat}: token {a.token} on {a.host} (pid {a.pid}) "
            f"and token {b.token} on {b.host} (pid {b.pid}) ran together {pair.seconds:.2f} s")


def _slot(slot: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(slot, datetime.UTC).strftime("%H:%M")


def text(report: Report, header: list[str]) -> str:
    """The report as an operator reads it."""
    f = report.figures
    lines = [*header, ""]
    injected = {k: v for k, v in f["faults"].items() if not k.startswith("observed")}
    lines.append(f"faults injected: {sum(injected.values())} "
                 f"({', '.join(f'{k} {v}' for k, v in injected.items()) or 'none'}); "
                 f"stalls of the machine observed: {f['faults'].get('observed-stall', 0)}")
    lines.append(f"invocations of pglock run: {f['invocations']}; runs recorded: {f['runs']} "
                 f"({', '.join(f'{k} {v}' for k, v in f['runs_by_outcome'].items())}); "
                 f"commands seen: {f['commands']}")
    lines.append(f"overlaps (held by two): {f['overlaps']}; repeated fencing tokens: "
                 f"{f.get('repeated_tokens', 0)}")
    lines.append(f"overlaps outside the promise: host frozen past its lease "
                 f"{f['overlaps_frozen_host']}")
    lines.append(f"slots checked: {f['slots_checked']} (ran {f['slots_ran']}, dead "
                 f"{f['slots_dead']}); duplicate slots: {f['duplicate_slots']}; "
                 f"unexplained misses: {f['unexplained_misses']}; explained misses: "
                 f"{f['explained_misses']} ({f['explained_misses_by_stall']} of them with a "
                 f"stall of the machine)"
                 + (f"; completions lost with the old primary: {f['lost_completions']}; "
                    f"attempt starts lost with it: {f.get('lost_starts', 0)}"
                    if f.get("replication", "none") != "none" else ""))
    lines.append(f"guarded writes: accepted {f['writes_accepted']}, stale writes refused "
                 f"{f['stale_writes_refused']}")
    lines.append("takeover after a fault (s):")
    for kind, spread in f["takeover"].items():
        lines.append(f"  {kind:18} n={spread['n']:<4} p50={spread['p50']:<6} "
                     f"p95={spread['p95']:<6} max={spread['max']}")
    if f.get("replication", "none") != "none":
        lines.append(f"takeover after a failover (s), replication {f['replication']}, "
                     f"{f['failovers']} failovers, ttl {f['ttl']:g} s:")
        for kind, spread in f["takeover_after_failover"].items():
            lines.append(f"  {kind:18} n={spread['n']:<4} p50={spread['p50']:<6} "
                         f"p95={spread['p95']:<6} max={spread['max']}")
    if report.lost:
        lines.append("completions and attempt starts lost with the old primary "
                     "(asynchronous standby):")
        lines += [f"  {line}" for line in report.lost]
    if report.excused:
        lines.append("outside the promise:")
        lines += [f"  {line}" for line in report.excused]
    if report.explained:
        lines.append("explained misses:")
        lines += [f"  {line}" for line in report.explained]
    lines.append(f"defects: {len(report.defects)}")
    lines += [f"  {line}" for line in report.defects]
    lines.append("PASS" if report.passed else "FAIL")
    return "\n".join(lines)
