"""`pglock check`: the jobs' health as a monitoring plugin reports it (Nagios convention).

Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one summary line with performance data,
then a line per job that is not OK. A stale lock is always CRITICAL; failed runs in a
row and missed slots are compared with thresholds.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pglock.errors import UsageError
from pglock.lock.census import SILENT_AFTER, Attendance
from pglock.reports.jobs import Job, Problem, Snapshot, Weight
from pglock.settings.durations import format_duration
from pglock.settings.text import escaped


class PluginStatus(enum.IntEnum):
    """A monitoring plugin's exit code (Nagios convention), not pglock's ExitStatus; each
    with its meaning, the source of check's documented EXIT STATUS."""

    meaning: str

    def __new__(cls, code: int, meaning: str) -> PluginStatus:
        member = int.__new__(cls, code)
        member._value_ = code
        member.meaning = meaning
        return member

    OK = (0, "OK: no job has a problem (or there are no jobs yet)")
    WARNING = (1, "WARNING: failed runs in a row or missed slots reached a warning threshold, "
                  "a pause is older than --paused-warning, a run is past its "
                  "--expect-duration (--slow-warning), slots skipped while a run went on "
                  "reached --skipped-warning, a host stopped attempting a job "
                  "(--silent-after), or fewer hosts fire a job than --hosts min=N")
    CRITICAL = (2, "CRITICAL: a stale lock, or failed runs in a row, missed slots or a slow "
                   "run reached a critical threshold")
    UNKNOWN = (3, "UNKNOWN: the jobs could not be judged: bad options, no database, a schema "
                  "pglock cannot read, a job that never ran, a schedule this host cannot "
                  "read, output that cannot be written; never another code")


# --silent-after and --hosts min=N: at most these.
SILENT_AFTER_MOST = 1000
HOSTS_MOST = 100_000


def parse_hosts(text: str | None) -> int | None:
    """--hosts min=N: the hosts a job must keep firing it (None: not asked)."""
    if text is None:
        return None
    name, equals, value = text.strip().partition("=")
    if name.strip() != "min" or not equals or not value.strip().isdigit():
        raise UsageError(f"--hosts: {text!r} is not min=N (the hosts each job must keep, "
                         "such as min=2)")
    return int(value)


# A problem found outranks not knowing about one job.
_RANK = {PluginStatus.OK: 0, PluginStatus.UNKNOWN: 1, PluginStatus.WARNING: 2,
         PluginStatus.CRITICAL: 3}


@dataclass(frozen=True)
class Thresholds:
    """At how many failed runs in a row, or missed slots, a job is WARNING or CRITICAL."""

    failures_warning: int = 1
    failures_critical: int = 1
    missed_warning: int = 1
    missed_critical: int = 2
    # Seconds a pause may last before check warns that it may have been forgotten.
    paused_warning: float = 86400.0
    # Seconds a run may go on past its --expect-duration MAX before it is WARNING (0: at
    # once) or CRITICAL (None: never).
    slow_warning: float = 0.0
    slow_critical: float | None = None
    # Slots skipped in a row while a run of an earlier slot went on (runs that outlast
    # their interval) before check warns.
    skipped_warning: int = 1
    # The census: slots (or usual intervals) without an attempt after which a host is
    # silent for a job, and how many hosts each job must keep firing it (None: any).
    silent_after: int = SILENT_AFTER
    hosts_min: int | None = None

    def validate(self) -> None:
        """Refuse thresholds that cannot be met in order."""
        if self.slow_critical is not None and self.slow_warning > self.slow_critical:
            raise UsageError(f"--slow-warning ({format_duration(self.slow_warning)}) is above "
                             f"--slow-critical ({format_duration(self.slow_critical)})")
        if self.skipped_warning < 1:
            raise UsageError("--skipped-warning must be 1 or more")
        if not 1 <= self.silent_after <= SILENT_AFTER_MOST:
            raise UsageError(f"--silent-after must be 1 to {SILENT_AFTER_MOST} slots")
        if self.hosts_min is not None and not 1 <= self.hosts_min <= HOSTS_MOST:
            raise UsageError(f"--hosts: min must be 1 to {HOSTS_MOST}")
        for name in ("failures", "missed"):
            warning, critical = getattr(self, f"{name}_warning"), getattr(self, f"{name}_critical")
            if warning < 1 or critical < 1:
                raise UsageError(f"--{name}-warning and --{name}-critical must be 1 or more")
            if warning > critical:
                raise UsageError(f"--{name}-warning ({warning}) is above "
                                 f"--{name}-critical ({critical})")

    def level(self, value: int, name: str) -> PluginStatus:
        if value >= getattr(self, f"{name}_critical"):
            return PluginStatus.CRITICAL
        if value >= getattr(self, f"{name}_warning"):
            return PluginStatus.WARNING
        return PluginStatus.OK


@dataclass(frozen=True)
class Verdict:
    """One job's status and the reasons for it."""

    job: Job
    status: PluginStatus
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    """What check prints and exits with."""

    status: PluginStatus
    summary: str
    counts: dict[str, int] = field(default_factory=dict)
    verdicts: tuple[Verdict, ...] = ()
    only_job: str | None = None
    now: datetime | None = None


def worst(statuses: list[PluginStatus]) -> PluginStatus:
    return max(statuses, key=_RANK.__getitem__, default=PluginStatus.OK)


def _stale(job: Job, now: datetime) -> str:
    expired = _ago(job.lock.expires_at if job.lock else None, now)
    return (f"run {job.last_run_id} is marked running but its lock expired {expired} "
            "(its holder vanished)")


def _dead(job: Job, now: datetime) -> str:
    dead = job.dead
    assert dead is not None
    attempts = "1 attempt" if dead.attempts == 1 else f"{dead.attempts} attempts"
    error = f": {dead.error}" if dead.error else ""
    return (f"dead: slot {dead.slot.isoformat()} failed after {attempts}{error} "
            f"(pglock replay --job {job.name} --reason ...)")


def _failed(job: Job, now: datetime) -> str:
    last = job.last_run
    assert last is not None
    in_row = f", {job.failures} in a row" if job.failures > 1 else ""
    exit_code = "" if last.exit_code is None else f" (exit {last.exit_code})"
    return f"last run {last.outcome}{exit_code}{in_row}, {_ago(last.finished_at, now)}"


def _overdue(job: Job, now: datetime) -> str:
    assert job.due is not None
    missed = job.due.missed
    slots = "1 slot" if missed == 1 else f"{missed} slots"
    return (f"overdue: {slots} missed, the first due {_ago(job.due.due_at, now)} "
            f"(schedule '{job.schedule}', grace {format_duration(job.due.grace)})")


def _slow(job: Job, now: datetime) -> str:
    assert job.slow_after is not None
    over = format_duration(job.slow_for or 0.0)
    holder = f" on {job.lock.holder}" if job.lock is not None else ""
    return (f"slow: run {job.last_run_id}{holder} has run {over} past its expected "
            f"{format_duration(job.slow_after)} (--expect-duration; pglock status --job "
            f"{job.name})")


def _unreadable(job: Job, now: datetime) -> str:
    return job.schedule_note or "its schedule cannot be read here"


def _paused(job: Job, now: datetime) -> str:
    pause = job.pause
    assert pause is not None
    scope = "every job paused" if pause.everywhere else "paused"
    until = f", until {pause.until.isoformat()}" if pause.until else ""
    return f"{scope} {_ago(pause.paused_at, now)} by {pause.paused_by}: {pause.reason}{until}"


def _skipped_running(job: Job, now: datetime) -> str:
    found = job.skipped
    latest = f", the latest {found.running_slot.isoformat()}" if found.running_slot else ""
    plural = "slot" if found.streak == 1 else "slots"
    return (f"{found.streak} {plural} in a row skipped while a run of an earlier slot was "
            f"still going{latest} (runs outlast their interval; --catch-up runs them later)")


def _silent_host(job: Job, now: datetime) -> str:
    assert job.census is not None
    silent = job.census.silent
    names = ", ".join(_silence(found, now) for found in silent)
    return (f"{'host' if len(silent) == 1 else 'hosts'} stopped attempting it: {names} "
            f"(pglock hosts --job {job.name}; pglock forget-host for a host retired)")


def _silence(found: Attendance, now: datetime) -> str:
    whole = ", and every other job" if found.whole else ""
    when = (f"none since the census restarted {_ago(found.last_attempt, now)}" if found.lost
            else f"last attempt {_ago(found.last_attempt, now)}")
    return f"{found.host} ({when}{whole})"


def _ttl_drift(job: Job, now: datetime) -> str:
    assert job.census is not None
    return (f"its hosts run it with different ttls: {ttl_drift(job)} (the wait after a "
            "promotion is the longest: give every host one ttl; docs/ha.md)")


def ttl_drift(job: Job) -> str:
    """`30s on web-1, web-2; 45s on web-3`: the ttls the job's hosts ran it with."""
    assert job.census is not None
    return "; ".join(f"{format_duration(ttl)} on {', '.join(hosts)}"
                     for ttl, hosts in job.census.ttls.items())


# Each problem's reason, as the line under the summary says it.
REASONS: dict[Problem, Callable[[Job, datetime], str]] = {
    Problem.DEAD: _dead, Problem.STALE: _stale, Problem.FAILED: _failed, Problem.OVERDUE: _overdue,
    Problem.SLOW: _slow, Problem.UNREADABLE: _unreadable, Problem.PAUSED: _paused,
    Problem.SKIPPED_RUNNING: _skipped_running, Problem.SILENT_HOST: _silent_host,
    Problem.TTL_DRIFT: _ttl_drift,
}


def level(job: Job, problem: Problem, thresholds: Thresholds) -> PluginStatus:
    """The plugin status one problem of the job earns under the thresholds."""
    match problem.weight:
        case Weight.CRITICAL:
            return PluginStatus.CRITICAL
        case Weight.FAILURES:
            return thresholds.level(job.failures, "failures")
        case Weight.MISSED:
            return thresholds.level(job.due.missed if job.due else 0, "missed")
        case Weight.UNKNOWN:
            return PluginStatus.UNKNOWN
        case Weight.PAUSED:
            paused_for = job.paused_for or 0.0
            return (PluginStatus.WARNING if paused_for >= thresholds.paused_warning
                    else PluginStatus.OK)
        case Weight.SLOW:
            over = job.slow_for or 0.0
            if thresholds.slow_critical is not None and over >= thresholds.slow_critical:
                return PluginStatus.CRITICAL
            return PluginStatus.WARNING if over >= thresholds.slow_warning else PluginStatus.OK
        case Weight.SKIPPED:
            return (PluginStatus.WARNING if job.skipped.streak >= thresholds.skipped_warning
                    else PluginStatus.OK)
        case Weight.SILENT | Weight.DRIFT:
            return PluginStatus.WARNING


def judge(job: Job, thresholds: Thresholds, now: datetime) -> Verdict:
    """The job's status under the thresholds."""
    found = [(level(job, problem, thresholds), REASONS[problem](job, now))
             for problem in job.problems]
    if few_hosts(job, thresholds):
        found.append((PluginStatus.WARNING, _few_hosts(job, thresholds)))
    reasons = tuple(reason for status, reason in found if status is not PluginStatus.OK)
    return Verdict(job, worst([status for status, _ in found]), reasons)


def few_hosts(job: Job, thresholds: Thresholds) -> bool:
    """Whether fewer hosts fire the job than --hosts min=N asks."""
    return (thresholds.hosts_min is not None and job.census is not None
            and len(job.census.attending) < thresholds.hosts_min)


def _few_hosts(job: Job, thresholds: Thresholds) -> str:
    assert job.census is not None
    attending = [found.host for found in job.census.attending]
    which = f" ({', '.join(attending)})" if attending else ""
    count = "1 host fires it" if len(attending) == 1 else f"{len(attending)} hosts fire it"
    return f"{count}{which}, fewer than --hosts min={thresholds.hosts_min}"


def evaluate(snapshot: Snapshot, thresholds: Thresholds, job: str | None = None) -> Report:
    """All jobs judged; a named job that never ran is UNKNOWN."""
    if job is not None and not snapshot.jobs:
        return unknown(snapshot.unknown(job))
    verdicts = tuple(judge(health, thresholds, snapshot.now) for health in snapshot.jobs)
    status = worst([v.status for v in verdicts])
    counted = sorted(problem for problem in Problem if problem.counted)
    counts = {problem: sum(problem in v.job.problems for v in verdicts) for problem in counted}
    # A job counted under a problem (a young pause, one failure below its threshold) is
    # not counted ok too: ok and the problems count each job once, unless it has several.
    ok = sum(v.status is PluginStatus.OK and not any(p.counted for p in v.job.problems)
             for v in verdicts)
    numbers = {"jobs": len(verdicts), "ok": ok, **{str(p): n for p, n in counts.items()}}
    if thresholds.hosts_min is not None:
        # Not a problem of the job model: a count this check was asked to hold the jobs to.
        numbers["few_hosts"] = sum(few_hosts(v.job, thresholds) for v in verdicts)
    jobs = "1 job" if len(verdicts) == 1 else f"{len(verdicts)} jobs"
    parts = ", ".join(f"{n} {name}" for name, n in numbers.items()
                      if n and name not in ("jobs", "ok"))
    summary = f"{jobs}: {parts + ', ' if parts else ''}{ok} ok"
    return Report(status, summary, numbers, verdicts, job, snapshot.now)


def unknown(reason: str) -> Report:
    """The report when the jobs could not be judged at all."""
    return Report(PluginStatus.UNKNOWN, reason)


def render_text(report: Report) -> str:
    """The summary line, then a line per job that is not OK (or the one job asked about)."""
    perfdata = " ".join(f"{perf_label(name)}={value}" for name, value in report.counts.items())
    lines = [f"PGLOCK {report.status.name} - {plugin_text(report.summary)}"
             + (f" | {perfdata}" if perfdata else "")]
    for verdict in report.verdicts:
        if verdict.status is PluginStatus.OK and report.only_job is None:
            continue
        reasons = "; ".join(verdict.reasons) or _healthy(verdict.job, report.now)
        lines.append(f"{verdict.status.name}: {plugin_text(f'{verdict.job.name}: {reasons}')}")
    return "\n".join(lines)


# What stands for `|` in a plugin's text: a monitor reads performance data after the
# first `|` of the summary and of each line that follows it (Nagios plugin guidelines).
PIPE_SHOWN = "\u00a6"


def plugin_text(text: str) -> str:
    """Text in the plugin's output as data: one line, escaped as status escapes it (a
    reason's newline cannot start a plugin line), no `|` (no forged performance data)."""
    return escaped(text).replace("|", PIPE_SHOWN)


def perf_label(name: str) -> str:
    """A performance data label as the plugin guidelines allow it: no `=` (it ends the
    label), `|` as in the text, a quote doubled, the label quoted when it has a space or
    a quote."""
    label = plugin_text(name).replace("=", "_").replace("'", "''")
    return f"'{label}'" if " " in label or "'" in label else label


def render_json(report: Report) -> str:
    """Everything, for machines."""
    return json.dumps({
        "status": report.status.name, "exit_code": int(report.status),
        "summary": report.summary, "counts": report.counts,
        "jobs": [_job_json(verdict) for verdict in report.verdicts]}, indent=2)


def _job_json(verdict: Verdict) -> dict[str, Any]:
    job, due, last = verdict.job, verdict.job.due, verdict.job.last_run
    return {
        "job": job.name, "status": verdict.status.name, "reasons": list(verdict.reasons),
        "problems": [str(p) for p in job.problems], "state": str(job.state),
        "schedule": job.schedule, "timezone": job.timezone,
        "last_outcome": None if last is None else last.outcome,
        "last_exit_code": None if last is None else last.exit_code,
        "consecutive_failures": job.failures,
        "last_started_at": _iso(job.last_started_at),
        "last_success_at": _iso(job.last_success_at), "running": job.run_open,
        "held": job.held, "held_until": _iso(job.held_until),
        "paused": None if job.pause is None else {
            "since": _iso(job.pause.paused_at), "by": job.pause.paused_by,
            "reason": job.pause.reason, "until": _iso(job.pause.until),
            "every_job": job.pause.everywhere},
        "running_since": _iso(job.running_since),
        "slow": None if job.slow_for is None else {
            "expected_max": job.slow_after, "over_by": job.slow_for},
        "due_at": None if due is None else _iso(due.due_at),
        "next_fire": None if due is None else _iso(due.next_fire),
        "missed_slots": 0 if due is None else due.missed,
        "hosts": None if job.census is None else {
            "attending": len(job.census.attending),
            "silent": [{"host": found.host, "last_attempt": None if found.lost
                        else _iso(found.last_attempt),
                        "whole": found.whole} for found in job.census.silent]}}


def _healthy(job: Job, now: datetime | None) -> str:
    last = job.last_run
    if job.run_open and job.lock is not None:
        state = f"running on {job.lock.holder}"
    elif last is None:
        state = "no run has finished yet"
    else:
        state = f"last run {last.outcome}"
        if now is not None:
            state += f" {_ago(last.finished_at, now)}"
    if job.held_until is not None:
        state += f", lock held until {_iso(job.held_until)} (--min-hold)"
    if job.due is not None:
        state += f", next due {job.due.next_fire.isoformat()}"
    return state


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "at an unknown time"
    return f"{format_duration(max(0.0, (now - moment).total_seconds()))} ago"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
