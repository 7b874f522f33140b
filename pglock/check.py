"""`pglock check`: the jobs' health as a monitoring plugin reports it (Nagios convention).

Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one summary line with performance data,
then a line per job that is not OK. A stale lock is always CRITICAL; failed runs in a
row and missed slots are compared with thresholds.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pglock.durations import format_duration
from pglock.errors import UsageError
from pglock.monitor import JobHealth, Problem, Snapshot, failures


class Status(enum.IntEnum):
    """A plugin's exit code."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


# A problem found outranks not knowing about one job.
_RANK = {Status.OK: 0, Status.UNKNOWN: 1, Status.WARNING: 2, Status.CRITICAL: 3}


@dataclass(frozen=True)
class Thresholds:
    """At how many failed runs in a row, or missed slots, a job is WARNING or CRITICAL."""

    failures_warning: int = 1
    failures_critical: int = 1
    missed_warning: int = 1
    missed_critical: int = 2

    def validate(self) -> None:
        """Refuse thresholds that cannot be met in order."""
        for name in ("failures", "missed"):
            warning, critical = getattr(self, f"{name}_warning"), getattr(self, f"{name}_critical")
            if warning < 1 or critical < 1:
                raise UsageError(f"--{name}-warning and --{name}-critical must be 1 or more")
            if warning > critical:
                raise UsageError(f"--{name}-warning ({warning}) is above "
                                 f"--{name}-critical ({critical})")

    def level(self, value: int, name: str) -> Status:
        if value >= getattr(self, f"{name}_critical"):
            return Status.CRITICAL
        return Status.WARNING if value >= getattr(self, f"{name}_warning") else Status.OK


@dataclass(frozen=True)
class Verdict:
    """One job's status and the reasons for it."""

    job: JobHealth
    status: Status
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    """What check prints and exits with."""

    status: Status
    summary: str
    counts: dict[str, int] = field(default_factory=dict)
    verdicts: tuple[Verdict, ...] = ()
    only_job: str | None = None
    now: datetime | None = None


def worst(statuses: list[Status]) -> Status:
    return max(statuses, key=_RANK.__getitem__, default=Status.OK)


def judge(job: JobHealth, thresholds: Thresholds, now: datetime) -> Verdict:
    """The job's status under the thresholds."""
    found: list[tuple[Status, str]] = []
    if Problem.STALE in job.problems:
        found.append((Status.CRITICAL, f"run {job.last_run_id} is marked running but its lock "
                      f"expired {_ago(job.lock_expires_at, now)} (its holder vanished)"))
    if Problem.FAILED in job.problems:
        count = failures(job)
        in_row = f", {count} in a row" if count > 1 else ""
        exit_code = "" if job.last_exit_code is None else f" (exit {job.last_exit_code})"
        found.append((thresholds.level(count, "failures"),
                      f"last run {job.last_outcome}{exit_code}{in_row}, "
                      f"{_ago(job.last_finished_at, now)}"))
    if Problem.OVERDUE in job.problems and job.due is not None:
        missed = job.due.missed
        slots = "1 slot" if missed == 1 else f"{missed} slots"
        found.append((thresholds.level(missed, "missed"),
                      f"overdue: {slots} missed, the first due {_ago(job.due.due_at, now)} "
                      f"(schedule '{job.schedule}', grace {format_duration(job.due.grace)})"))
    if job.note is not None:
        found.append((Status.UNKNOWN, job.note))
    reasons = tuple(reason for status, reason in found if status is not Status.OK)
    return Verdict(job, worst([status for status, _ in found]), reasons)


def evaluate(snapshot: Snapshot, thresholds: Thresholds, job: str | None = None) -> Report:
    """All jobs judged; a named job that never ran is UNKNOWN."""
    if job is not None and not snapshot.jobs:
        return unknown(f"no job named {job!r} has run")
    verdicts = tuple(judge(health, thresholds, snapshot.now) for health in snapshot.jobs)
    status = worst([v.status for v in verdicts])
    counts = {problem: sum(problem in v.job.problems for v in verdicts)
              for problem in (Problem.FAILED, Problem.OVERDUE, Problem.STALE)}
    ok = sum(v.status is Status.OK for v in verdicts)
    jobs = "1 job" if len(verdicts) == 1 else f"{len(verdicts)} jobs"
    parts = ", ".join(f"{n} {problem}" for problem, n in counts.items() if n)
    summary = f"{jobs}: {parts + ', ' if parts else ''}{ok} ok"
    numbers = {"jobs": len(verdicts), "ok": ok, **{str(p): n for p, n in counts.items()}}
    return Report(status, summary, numbers, verdicts, job, snapshot.now)


def unknown(reason: str) -> Report:
    """The report when the jobs could not be judged at all."""
    return Report(Status.UNKNOWN, reason)


def render_text(report: Report) -> str:
    """The summary line, then a line per job that is not OK (or the one job asked about)."""
    perfdata = " ".join(f"{name}={value}" for name, value in report.counts.items())
    lines = [f"PGLOCK {report.status.name} - {report.summary}"
             + (f" | {perfdata}" if perfdata else "")]
    for verdict in report.verdicts:
        if verdict.status is Status.OK and report.only_job is None:
            continue
        reasons = "; ".join(verdict.reasons) or _healthy(verdict.job, report.now)
        lines.append(f"{verdict.status.name}: {verdict.job.job}: {reasons}")
    return "\n".join(lines)


def render_json(report: Report) -> str:
    """Everything, for machines."""
    return json.dumps({
        "status": report.status.name, "exit_code": int(report.status),
        "summary": report.summary, "counts": report.counts,
        "jobs": [_job_json(verdict) for verdict in report.verdicts]}, indent=2)


def _job_json(verdict: Verdict) -> dict[str, Any]:
    job = verdict.job
    due = job.due
    return {
        "job": job.job, "status": verdict.status.name, "reasons": list(verdict.reasons),
        "problems": [str(p) for p in job.problems], "schedule": job.schedule,
        "timezone": job.timezone, "last_outcome": job.last_outcome,
        "last_exit_code": job.last_exit_code, "consecutive_failures": failures(job),
        "last_started_at": _iso(job.last_started_at),
        "last_success_at": _iso(job.last_success_at), "running": job.running,
        "held": job.held, "due_at": None if due is None else _iso(due.due_at),
        "next_fire": None if due is None else _iso(due.next_fire),
        "missed_slots": 0 if due is None else due.missed}


def _healthy(job: JobHealth, now: datetime | None) -> str:
    if job.running:
        state = f"running on {job.lock_holder}"
    elif job.last_outcome is None:
        state = "no run has finished yet"
    else:
        state = f"last run {job.last_outcome}"
        if now is not None:
            state += f" {_ago(job.last_finished_at, now)}"
    if job.due is not None:
        state += f", next due {job.due.next_fire.isoformat()}"
    return state


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "at an unknown time"
    return f"{format_duration(max(0.0, (now - moment).total_seconds()))} ago"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
