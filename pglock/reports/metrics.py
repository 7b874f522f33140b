"""`pglock metrics`: the jobs' health in the Prometheus text exposition format (0.0.4).

Every series carries a `job` label, the pglock job name. A Prometheus server attaches
its own `job` label to what it scrapes: with `honor_labels: true` ours is kept, and
otherwise it arrives as `exported_job`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from pglock.db import database, schema
from pglock.reports.jobs import FINISHED, Job, Problem, Snapshot, State


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
    Family("pglock_job_running_since_timestamp_seconds", "gauge",
           "When the job's running run started (Unix time; no sample when none runs).",
           lambda j: _stamp(j.running_since)),
    Family("pglock_job_slow", "gauge",
           "1 while the job's run has gone on past its --expect-duration MAX.",
           lambda j: _flag(Problem.SLOW in j.problems)),
    Family("pglock_job_paused_since_timestamp_seconds", "gauge",
           "When the pause in force on the job began (Unix time; no sample unless paused).",
           lambda j: None if j.pause is None else j.pause.paused_at.timestamp()),
    Family("pglock_job_paused_until_timestamp_seconds", "gauge",
           "When the pause in force on the job ends (Unix time; no sample unless paused "
           "with --until).",
           lambda j: None if j.pause is None else _stamp(j.pause.until)),
)

STATES = Family("pglock_job_state", "gauge",
                "1 for the job's state as pglock status shows it, 0 for the others.",
                lambda j: None)
DURATION = Family("pglock_job_duration_seconds", "histogram",
                  "How long the job's finished runs took, over the history the database "
                  "keeps (pglock prune lowers it: a counter reset).", lambda j: None)
OUTSIDE = Family("pglock_job_runs_outside_expected_total", "counter",
                 "Finished runs that took less than --expect-duration's MIN (bound=min) or "
                 "more than its MAX (bound=max), over the history the database keeps.",
                 lambda j: None)
GENERATED = Family("pglock_metrics_timestamp_seconds", "gauge",
                   "When this exposition was read from the database (its clock; Unix time).",
                   lambda j: None)

# The histogram's upper bounds (seconds): the durations operators write for cron jobs
# (--expect-duration, --max-runtime, schedules), from a second to a day, about 2-3x apart.
# A bound an operator is likely to alert on is a bucket's edge, so a quantile or a count
# "over 5m" is exact there; 17 buckets keep a fleet's series count within reason.
BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
           7200.0, 14400.0, 28800.0, 86400.0)

# Every finished run of the history with a duration, by job: a count per bucket, the
# count, the sum, and those outside their --expect-duration (ledger.SHORTER, LONGER).
# A scan of `runs` (O(history), unlike the job model's O(jobs)): pglock prune bounds it.
DURATIONS = """
SELECT r.job, ARRAY[{buckets}]::bigint[], count(*),
       coalesce(sum(extract(epoch FROM r.duration)), 0)::float8,
       count(*) FILTER (WHERE r.error LIKE '%%ran shorter than expected: %%'),
       count(*) FILTER (WHERE r.error LIKE '%%ran longer than expected: %%')
FROM {{schema}}.runs r
WHERE r.duration IS NOT NULL AND r.outcome NOT IN ('running', 'cleared')
  AND (%(job)s::text IS NULL OR r.job = %(job)s::text)
GROUP BY r.job
""".format(buckets=", ".join(
    f"count(*) FILTER (WHERE r.duration <= interval '{bound:g} seconds')" for bound in BUCKETS))


@dataclass(frozen=True)
class Durations:
    """A job's finished runs by duration: cumulative counts per BUCKETS bound, the count,
    the sum, and the runs below MIN / above MAX of their --expect-duration."""

    buckets: tuple[int, ...]
    count: int
    total: float
    below: int = 0
    above: int = 0


@dataclass(frozen=True)
class Exposition:
    """What metrics renders: the job model's snapshot and the history's durations."""

    snapshot: Snapshot
    durations: dict[str, Durations] = field(default_factory=dict)


def read_durations(conn: psycopg.Connection[Any], schema_name: str, job: str | None = None,
                   ) -> dict[str, Durations]:
    """Every job's (or the one named) duration histogram from the runs it keeps."""
    with database.translated(f"cannot read the run durations of schema {schema_name!r}"):
        if not schema.readable(conn, schema_name):
            return {}
        rows = conn.execute(schema.query(DURATIONS, schema_name), {"job": job}).fetchall()
    return {name: Durations(tuple(buckets), count, total, below, above)
            for name, buckets, count, total, below, above in rows}

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


def _bound(value: float) -> str:
    """A bucket's `le` as Prometheus's clients write it (0.5, 1.0, 300.0)."""
    return repr(float(value))


def render(found: Snapshot | Exposition) -> str:
    """The whole exposition: every family once, with a sample per job that has a value."""
    exposition = found if isinstance(found, Exposition) else Exposition(found)
    snapshot = exposition.snapshot
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
    lines.extend(_states(snapshot))
    lines.extend(_durations(exposition))
    lines.extend(_header(GENERATED))
    lines.append(f"{GENERATED.name} {_number(snapshot.now.timestamp())}")
    return "\n".join(lines) + "\n"


def _states(snapshot: Snapshot) -> Iterator[str]:
    # Every state from zero, as kube-state-metrics does for a pod's phase: `sum by (state)`
    # counts the fleet, and a job's series do not come and go with its state.
    yield from _header(STATES)
    for job in snapshot.jobs:
        for state in State:
            yield (f'{STATES.name}{{job="{escape_label(job.name)}",state="{state}"}} '
                   f"{int(job.state is state)}")


def _durations(exposition: Exposition) -> Iterator[str]:
    # A job with no finished run yet has its histogram at zero, so increase() sees its first.
    empty = Durations((0,) * len(BUCKETS), 0, 0.0)
    yield from _header(DURATION)
    for job in exposition.snapshot.jobs:
        found, name = exposition.durations.get(job.name, empty), escape_label(job.name)
        for bound, count in zip(BUCKETS, found.buckets, strict=True):
            yield f'{DURATION.name}_bucket{{job="{name}",le="{_bound(bound)}"}} {count}'
        yield f'{DURATION.name}_bucket{{job="{name}",le="+Inf"}} {found.count}'
        yield f'{DURATION.name}_sum{{job="{name}"}} {_number(found.total)}'
        yield f'{DURATION.name}_count{{job="{name}"}} {found.count}'
    yield from _header(OUTSIDE)
    for job in exposition.snapshot.jobs:
        found, name = exposition.durations.get(job.name, empty), escape_label(job.name)
        yield f'{OUTSIDE.name}{{job="{name}",bound="min"}} {found.below}'
        yield f'{OUTSIDE.name}{{job="{name}",bound="max"}} {found.above}'
