"""`pglock metrics`: the jobs' health in the Prometheus text exposition format (0.0.4).

Every series carries a `job` label, the pglock job name. A Prometheus server attaches
its own `job` label to what it scrapes: with `honor_labels: true` ours is kept, and
otherwise it arrives as `exported_job`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from pglock.reports.jobs import FINISHED, Job, Problem, Snapshot


@dataclass(frozen=True)
class Family:
    """One metric: its name, type, help, and how to read a job's value (None: no sample)."""

    name: str
    kind: str
    help: str
    value: Callable[[Job], float | None]


def _stamp(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _flag(value: bool) -> float:
    return 1.0 if value else 0.0


FAMILIES = (
    Family("pglock_job_last_run_timestamp_seconds", "gauge",
           "When the job's last run started (Unix time).",
           lambda j: _stamp(j.last_started_at)),
    Family("pglock_job_last_duration_seconds", "gauge",
           "How long the job's last finished run took.",
           lambda j: j.last_run.duration if j.last_run else None),
    Family("pglock_job_last_exit_code", "gauge",
           "Exit status of the job's last finished run (128+N: killed by signal N).",
           lambda j: None if j.last_run is None or j.last_run.exit_code is None
           else float(j.last_run.exit_code)),
    Family("pglock_job_last_success_timestamp_seconds", "gauge",
           "When the job's last successful run finished (Unix time).",
           lambda j: _stamp(j.last_success_at)),
    Family("pglock_job_consecutive_failures", "gauge",
           "Finished runs since the job's last success.",
           lambda j: float(j.consecutive_failures)),
    Family("pglock_job_held", "gauge",
           "1 while the job's lock is held (by a run, a clear's lock-delay, or --min-hold).",
           lambda j: _flag(j.held)),
    Family("pglock_job_paused", "gauge",
           "1 while an operator's pause (pglock pause) makes every host skip the job.",
           lambda j: _flag(j.pause is not None)),
    Family("pglock_job_running", "gauge",
           "1 while the job's last run is marked running.", lambda j: _flag(j.run_open)),
    Family("pglock_job_stale", "gauge",
           "1 when the last run is marked running but its lock expired (holder vanished).",
           lambda j: _flag(Problem.STALE in j.problems)),
    Family("pglock_job_dead", "gauge",
           "1 while a slot of the job spent its attempts (--retries) without success, until "
           "a later success or pglock replay.",
           lambda j: _flag(Problem.DEAD in j.problems)),
    Family("pglock_job_attempt", "gauge",
           "The attempt (1-based) of the job's newest run at its slot.",
           lambda j: None if j.attempt is None else float(j.attempt)),
    Family("pglock_job_attempt_limit", "gauge",
           "How many attempts the slot of the job's newest run may have (1 + --retries).",
           lambda j: None if j.attempt_limit is None else float(j.attempt_limit)),
    Family("pglock_job_dead_attempts", "gauge",
           "Attempts the job's dead slot had (0: no dead slot).",
           lambda j: float(j.dead.attempts) if j.dead else 0.0),
    Family("pglock_job_overdue", "gauge",
           "1 when a slot of the job's schedule passed its grace with no run started.",
           lambda j: _flag(j.overdue)),
    Family("pglock_job_missed_slots", "gauge",
           "Slots of the job's schedule past their grace with no run (counted up to 1000).",
           lambda j: None if j.due is None else float(j.due.missed)),
    Family("pglock_job_slots_skipped_running_total", "counter",
           "Slots of the job skipped because a run of an earlier slot was still going.",
           lambda j: None if j.schedule is None else float(j.skipped.running)),
    Family("pglock_job_slots_skipped_running_in_a_row", "gauge",
           "Slots skipped while a run went on since a run ended having skipped none.",
           lambda j: None if j.schedule is None else float(j.skipped.streak)),
    Family("pglock_job_slots_skipped_catch_up_total", "counter",
           "Missed slots a catch-up gave up (older than --catch-up-limit or --deadline).",
           lambda j: None if j.schedule is None else float(j.skipped.catch_up)),
    Family("pglock_job_in_window", "gauge",
           "1 while the job is inside one of its maintenance windows (--window).",
           lambda j: None if j.schedule is None else _flag(j.window_until is not None)),
    Family("pglock_job_next_due_timestamp_seconds", "gauge",
           "The first slot of the job's schedule with no run yet (Unix time).",
           lambda j: None if j.due is None else j.due.due_at.timestamp()),
)

RUNS = Family("pglock_job_runs_total", "counter",
              "Finished runs of the job, by outcome.", lambda j: None)


def escape_label(value: str) -> str:
    """A label value as the exposition format quotes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _header(family: Family) -> Iterator[str]:
    yield f"# HELP {family.name} {family.help}"
    yield f"# TYPE {family.name} {family.kind}"


def render(snapshot: Snapshot) -> str:
    """The whole exposition: every family once, with a sample per job that has a value."""
    lines: list[str] = []
    for family in FAMILIES:
        lines.extend(_header(family))
        for job in snapshot.jobs:
            value = family.value(job)
            if value is not None:
                lines.append(f'{family.name}{{job="{escape_label(job.name)}"}} {_number(value)}')
    lines.extend(_header(RUNS))
    for job in snapshot.jobs:
        # Every outcome from zero, so that rate() and increase() see the first one.
        for outcome in FINISHED:
            count = job.counts.get(outcome, 0)
            lines.append(f'{RUNS.name}{{job="{escape_label(job.name)}",outcome="{outcome}"}} '
                         f"{count}")
    return "\n".join(lines) + "\n"
