"""Checker 2, slots: every scheduled slot of every job was done exactly once.

In the manner of Jepsen's Chronos checker: each expected slot is matched to the runs
that carry it. A slot is

- `ran`: exactly one `succeeded` run (after failed attempts too, with --retries);
- `dead`: its attempts were spent without a success (allowed: the command failed, or a
  fault cut an attempt short; an attempt cut short by no fault is a defect);
- `duplicate`: more than one `succeeded` run (a defect);
- `lost-completion` (a soak with an asynchronous standby only): a command of the slot
  worked to its end and exited 0 (its marks say so), but no `succeeded` run of it is
  recorded, and a failover came as it ended: the new primary never got the record of
  its end (the slot may have run again). Counted on its own line with the failover that
  lost it, as docs/ha.md says it may happen;
- `missed`: none of the above; `explained` when every host's part in it is accounted
  for by a fault, else `unexplained` (a defect).

A host's part in a missed slot is accounted for when its invocation for the slot:

- ran an attempt that a fault cut short (a fault on that host or on the server during
  the attempt; a fault aimed at one pglock counts for its own job only): with one
  trigger per host per slot, nobody retries it; or ran an attempt that failed, and a
  fault then ended its pglock (exit 125, a signal) before the next attempt started;
- failed to reach the database or to run (exit 125, a signal) while a fault touched that
  host or the server;
- was refused (exit 75, held elsewhere) while a run of the job held the lock (any slot's:
  a run that outlasts its interval makes the next slots miss, docs/schedules.md), or
  while the server had a fault other than a promotion: a trigger refused by the wait
  after a promotion waits for its end and runs the slot late (docs/ha.md), so a slot
  lost to that wait is a defect;
- never happened because the host was frozen when cron would have fired it;
- (`--candidates`) was no candidate of the slot and asked nothing (its event log says
  so): the slot's candidates were the others; a miss with such parts is explained only
  when a fault took at least K of the other parts (every candidate dead); fewer is a
  defect (a live candidate that did not try its turn, or rosters that disagree).

Clock offsets never account for anything: they stay within the documented bound, where
pglock promises the same slot on every host (docs/schedules.md).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from .history import FAILOVERS, NS, Fault, History, Invocation, JobSpec, Mark, Run, processes

# Outcomes a fault leaves (a run the fleet's command itself ended is `succeeded` or
# `failed` with the command's own exit code).
CUT_SHORT = frozenset({"abandoned", "lock_lost", "killed", "running", "failed", "timed_out"})
# Exit codes of pglock that say the database or the lock failed it, or that it was killed.
CONFLICT = 75
# The largest clock offset the nemesis gives a host (seconds): cron fires that early or late.
MAX_OFFSET = 10.0
# How long before an asynchronous failover began a completion may still have been on its
# way to the standby (seconds): the end record follows the command's exit, and the
# standby replays behind the primary on a loaded machine.
REPLICATION_LAG = 5.0


@dataclass(frozen=True)
class Completion:
    """A command of a slot that worked to its end and exited 0 (its marks)."""

    host: str
    pid: int
    token: int
    attempt: int
    done: int  # its `done` mark (CLOCK_BOOTTIME ns)


@dataclass
class SlotVerdict:
    job: str
    slot: float
    state: str  # ran, dead, duplicate, missed-explained, missed-unexplained
    why: list[str] = field(default_factory=list)

    @property
    def by_stall(self) -> bool:
        """Explained only with the help of a stall of the machine (not injected)."""
        return any(reason.endswith(": observed-stall") for reason in self.why)


def check(history: History) -> list[SlotVerdict]:
    runs: dict[tuple[str, float], list[Run]] = defaultdict(list)
    for run in history.runs:
        if run.slot is not None and run.outcome != "cleared":
            runs[(run.job, run.slot)].append(run)
    invocations: dict[tuple[str, float], list[Invocation]] = defaultdict(list)
    for invocation in history.invocations:
        if invocation.slot is not None:
            invocations[(invocation.job, invocation.slot)].append(invocation)
    dead = {(row.job, row.slot) for row in history.slots
            if row.succeeded_run_id is None
            and (row.attempts >= row.attempt_limit or row.closed)}
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in history.runs:
        by_job[run.job].append(run)
    completed = completions(history.marks)
    verdicts = []
    for spec in history.jobs.values():
        if spec.schedule is None:
            continue
        for slot in history.expected_slots:
            key = (spec.name, slot)
            lost = lost_completions(runs[key], completed[key], history)
            if lost and sum(r.outcome == "succeeded" for r in runs[key]) <= 1:
                verdicts.append(SlotVerdict(spec.name, slot, "lost-completion", lost))
                continue
            verdicts.append(judge(spec, slot, runs[key], invocations[key], key in dead,
                                  history, by_job[spec.name]))
    return verdicts


def completions(marks: list[Mark]) -> dict[tuple[str, float], list[Completion]]:
    """The commands of each (job, slot) that worked to their end and exited 0."""
    found: dict[tuple[str, float], list[Completion]] = defaultdict(list)
    for process in processes(marks):
        first, kinds = process[0], {m.kind for m in process}
        if first.slot and "done" in kinds and "fail" not in kinds:
            done = max(m.at for m in process if m.kind == "done")
            found[(first.job, datetime.fromisoformat(first.slot).timestamp())].append(
                Completion(first.host, first.pid, first.token, first.attempt, done))
    return found


def lost_completions(runs: list[Run], completed: list[Completion],
                     history: History) -> list[str]:
    """With an asynchronous standby: the slot's completions that no succeeded run records,
    each lost with the old primary in a failover that came as it ended, one line each
    (empty unless every unrecorded completion is so lost)."""
    if history.replication != "async":
        return []
    recorded = {(r.holder, r.token, r.attempt) for r in runs if r.outcome == "succeeded"}
    unrecorded = [c for c in completed if (c.host, c.token, c.attempt) not in recorded]
    lines = []
    for c in unrecorded:
        failover = next((f for f in history.faults if f.kind in FAILOVERS
                         and f.start - REPLICATION_LAG * NS <= c.done <= f.end + NS), None)
        if failover is None:
            return []
        again = [r for r in runs if r.outcome == "succeeded"]
        lines.append(f"attempt {c.attempt} on {c.host} (token {c.token}, pid {c.pid}) "
                     f"succeeded, its end lost with the old primary in {failover.kind} "
                     f"({failover.detail})"
                     + (f"; ran again: run {again[0].id} on {again[0].holder}" if again
                        else ""))
    return lines


def judge(spec: JobSpec, slot: float, runs: list[Run], invocations: list[Invocation],
          dead: bool, history: History, job_runs: list[Run] | None = None) -> SlotVerdict:
    successes = [r for r in runs if r.outcome == "succeeded"]
    if len(successes) > 1:
        return SlotVerdict(spec.name, slot, "duplicate",
                           [f"runs {', '.join(str(r.id) for r in successes)} succeeded"])
    if successes:
        return SlotVerdict(spec.name, slot, "ran")
    if dead and runs:
        # Spent: attempts the command failed, or that a fault cut short (they count).
        burned = [r for r in runs if r.outcome not in ("failed", "timed_out")
                  and _cutting(r, spec, history.faults) is None]
        if not burned:
            return SlotVerdict(spec.name, slot, "dead")
        return SlotVerdict(spec.name, slot, "missed-unexplained", [
            f"attempt #{r.attempt} (run {r.id}) ended {r.outcome} on {r.holder}, cut short "
            "by no fault" for r in burned])
    reasons, unexplained = explain_miss(spec, slot, runs, invocations, history, job_runs)
    state = "missed-unexplained" if unexplained else "missed-explained"
    return SlotVerdict(spec.name, slot, state, unexplained or reasons)


def explain_miss(spec: JobSpec, slot: float, runs: list[Run], invocations: list[Invocation],
                 history: History, job_runs: list[Run] | None = None
                 ) -> tuple[list[str], list[str]]:
    """(reasons, unexplained): what accounts for each host's part, and what does not.

    Of the slot's runs only the last attempt needs a fault: earlier attempts that failed
    were retried in place (their failures are the command's own)."""
    reasons: list[str] = []
    unexplained: list[str] = []
    by_host = {i.host: i for i in invocations}
    if runs:
        ordered = sorted(runs, key=lambda r: (r.attempt or 0, r.id))
        last = ordered[-1]
        attempts = ", ".join(f"#{r.attempt} {r.outcome} on {r.holder}" for r in ordered)
        fault = _cutting(last, spec, history.faults)
        between = None if fault is not None else _between(last, by_host.get(last.holder),
                                                          spec, history.faults)
        if fault is not None:
            reasons.append(f"run {last.id} on {last.holder}: {fault.kind}")
        elif between is not None:
            invocation = by_host[last.holder]
            reasons.append(f"run {last.id} on {last.holder}, then its pglock ended between "
                           f"attempts (exit {invocation.code}): {between.kind}")
        else:
            unexplained.append(f"attempts {attempts}: the last one (run {last.id}) was cut "
                               "short by no fault")
    ran_on = {run.holder for run in runs}
    standing_by = []
    for host in history.hosts:
        if host in ran_on:
            continue
        invocation = by_host.get(host)
        rank = history.stood_by.get((host, spec.name, slot))
        if invocation is not None and invocation.code == CONFLICT and rank is not None:
            standing_by.append(f"{host}: not a candidate (rank {rank})")
            continue
        cause: Fault | Run | None = (_unfired(host, slot, history.faults) if invocation is None
                 else _refusing(invocation, spec, history.faults, job_runs or runs))
        what = "not fired" if invocation is None else f"exit {invocation.code}"
        if cause is None:
            unexplained.append(f"{host}: {what}, no fault")
        elif isinstance(cause, Run):
            reasons.append(f"{host}: {what}: held by run {cause.id} ({cause.outcome})")
        else:
            reasons.append(f"{host}: {what}: {cause.kind}")
    # Each host that stood by ranked K others above it: the slot is missed only if a fault
    # took K hosts' parts (every candidate dead, docs/fleet.md); fewer, and a live
    # candidate did not try its turn (rosters that disagree, a step not taken): a defect.
    k = min(spec.candidates or 1, len(history.hosts))
    if standing_by and not unexplained and len(reasons) < k:
        unexplained.append(f"{len(standing_by)} host(s) not candidates of the slot, and a "
                           f"fault took {len(reasons)} of its {k} candidates' parts")
    return reasons + standing_by, unexplained


def _cutting(run: Run, spec: JobSpec, faults: list[Fault]) -> Fault | None:
    """A fault on the run's host or the server while it ran (until it ended, or for a
    run left `running`, a ttl after its start at least)."""
    if run.outcome not in CUT_SHORT:
        return None
    end = run.finished_wall if run.finished_wall is not None else run.started_wall + spec.ttl
    return next((f for f in faults if _aimed(f, run.holder, spec)
                 and f.start_wall <= end + 1 and f.end_wall >= run.started_wall - 1), None)


def _between(run: Run, invocation: Invocation | None, spec: JobSpec,
             faults: list[Fault]) -> Fault | None:
    """A fault that ended the pglock of a slot's last recorded attempt before it made the
    next one (its attempts were not spent): on its host or the server, from that attempt's
    end to the pglock's, which failed (exit 125, a signal)."""
    if (invocation is None or invocation.code in (0, CONFLICT) or run.finished_wall is None
            or run.outcome not in ("failed", "timed_out")):
        return None
    return next((f for f in faults if _aimed(f, run.holder, spec)
                 and f.start_wall <= invocation.ended_wall + 1
                 and f.end_wall >= run.finished_wall - 1), None)


def _aimed(fault: Fault, host: str, spec: JobSpec) -> bool:
    """The fault could have hit this job on this host: not a clock offset; on the host or
    the server; and, for a fault aimed at one pglock (a kill, a pause, a terminated
    session), at one of this job."""
    return (fault.kind != "clock" and fault.touches(host)
            and (fault.job is None or fault.job == spec.name))


def _refusing(invocation: Invocation, spec: JobSpec, faults: list[Fault],
              job_runs: list[Run]) -> Fault | Run | None:
    """A fault (or, for a refusal, the run holding the lock) that explains why this
    invocation ran nothing."""
    if invocation.code == CONFLICT:
        holder = next((r for r in job_runs if r.started_wall <= invocation.ended_wall + 1
                       and (r.finished_wall is None
                            or r.finished_wall >= invocation.fired_wall - 1)), None)
        if holder is not None:
            return holder
        since = invocation.fired_wall - 1.5 * spec.ttl
        return next((f for f in faults if f.host is None and f.kind not in FAILOVERS
                     and f.start_wall <= invocation.ended_wall and f.end_wall >= since), None)
    return next((f for f in faults if _aimed(f, invocation.host, spec)
                 and f.start_wall <= invocation.ended_wall + 1
                 and f.end_wall >= invocation.fired_wall - 1), None)


def _unfired(host: str, slot: float, faults: list[Fault]) -> Fault | None:
    """Cron did not fire on this host: it was frozen (the soak's cron with it) when the
    slot came, and thawed only after the next one."""
    return next((f for f in faults if f.kind == "freeze-host" and f.host == host
                 and f.start_wall <= slot + MAX_OFFSET and f.end_wall >= slot - MAX_OFFSET),
                None)
