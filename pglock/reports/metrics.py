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
    Family("pglock_job_slots_missed_promotion_wait_total", "counter",
           "Slots of the job given up because the wait after a promotion ended past the "
           "trigger's --deadline.",
           lambda j: None if j.schedule is None else float(j.skipped.promotion)),
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
    Family("pglock_job_hosts", "gauge",
           "Hosts that fire the job: attempted it within its last two slots (unscheduled: "
           "twice their usual interval), winners and losers alike (the census).",
           lambda j: None if j.census is None else float(len(j.census.attending))),
    Family("pglock_job_silent_hosts", "gauge",
           "Hosts that attempted the job before and stopped: no attempt for more than two "
           "of its slots (unscheduled: twice their usual interval), and at least 2 minutes.",
           lambda j: None if j.census is None else float(len(j.census.silent))),
)

STATES = Family("pglock_job_state", "gauge",
                "The job's state as pglock status shows it: one sample per job, value 1, "
                "labelled with that state.", lambda j: None)
DURATION = Family("pglock_job_duration_seconds", "histogram",
                  "How long the job's runs took, every run whose end its holder recorded "
                  "(pglock prune leaves it as it is).", lambda j: None)
OUTSIDE = Family("pglock_job_runs_outside_expected_total", "counter",
                 "Finished runs that took less than --expect-duration's MIN (bound=min) or "
                 "more than its MAX (bound=max).", lambda j: None)
HOST_SEEN = Family("pglock_host_last_seen_timestamp_seconds", "gauge",
                   "When the host last attempted any job (Unix time; the census rewrites it "
                   "at most once a minute), labelled with the pglock version it runs.",
                   lambda j: None)
GENERATED = Family("pglock_metrics_timestamp_seconds", "gauge",
                   "When this exposition was read from the database (its clock; Unix time).",
                   lambda j: None)

# The schema's histogram bounds, seconds (migration 006: `finish` counts against them).
BOUNDS = "SELECT value::float8[] FROM {schema}.meta WHERE key = 'duration_bounds'"
# Every job's (or the one named) run-duration histogram, kept in its `jobs` row by
# `finish` (sql/functions.sql) as each run ends: O(jobs), whatever the history's size.
# A job with no run counted yet has NULL counters, and no row here.
DURATIONS = """
SELECT j.job, j.duration_buckets, j.duration_count, j.duration_sum, j.runs_shorter,
       j.runs_longer
FROM {schema}.jobs j
WHERE j.duration_count IS NOT NULL AND j.forgotten_at IS NULL
  AND (%(job)s::text IS NULL OR j.job = %(job)s::text)
"""


@dataclass(frozen=True)
class Durations:
    """A job's runs by duration: cumulative counts per bound, the count, the sum, and the
    runs below MIN / above MAX of their --expect-duration."""

    buckets: tuple[int, ...]
    count: int
    total: float
    below: int = 0
    above: int = 0


@dataclass(frozen=True)
class Histograms:
    """The schema's histogram bounds (seconds) and the jobs' counters, by job name."""

    bounds: tuple[float, ...] = ()
    jobs: dict[str, Durations] = field(default_factory=dict)


@dataclass(frozen=True)
class Exposition:
    """What metrics renders: the job model's snapshot (with its census), the jobs' duration
    histograms, and the census's hosts (HOSTS rows of reports/hosts.py)."""

    snapshot: Snapshot
    histograms: Histograms = field(default_factory=Histograms)
    hosts: list[tuple[Any, ...]] = field(default_factory=list)


def read_durations(conn: psycopg.Connection[Any], schema_name: str, job: str | None = None,
                   ) -> Histograms:
    """Every job's (or the one named) duration histogram, as its runs' ends counted it."""
    with database.translated(f"cannot read the run durations of schema {schema_name!r}"):
        if not schema.readable(conn, schema_name):
            return Histograms()
        cursor = conn.cursor(binary=True)
        bounds = cursor.execute(schema.query(BOUNDS, schema_name)).fetchone()
        rows = cursor.execute(schema.query(DURATIONS, schema_name), {"job": job}).fetchall()
    assert bounds is not None
    return Histograms(tuple(bounds[0]), {
        name: Durations(tuple(buckets), count, total, below or 0, above or 0)
        for name, buckets, count, total, below, above in rows})


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
    return "".join(chunks(found))


def chunks(found: Snapshot | Exposition) -> Iterator[str]:
    """The exposition in pieces of whole lines, to be written as they come: with 10,000
    jobs it is some 25 MB, which need not be held at once."""
    exposition = found if isinstance(found, Exposition) else Exposition(found)
    snapshot = exposition.snapshot
    # Each job's name escaped once, not once per series.
    names = [escape_label(job.name) for job in snapshot.jobs]
    for family in FAMILIES:
        lines = list(_header(family))
        for job, name in zip(snapshot.jobs, names, strict=True):
            value = family.value(job)
            if value is not None:
                lines.append(f'{family.name}{{job="{name}"}} {_number(value)}')
        yield "\n".join(lines) + "\n"
    lines = list(_header(RUNS))
    for job, name in zip(snapshot.jobs, names, strict=True):
        # Every outcome from zero, so that rate() and increase() see the first one.
        lines.extend(f'{RUNS.name}{{job="{name}",outcome="{outcome}"}} '
                     f"{job.counts.get(outcome, 0)}" for outcome in FINISHED)
    yield "\n".join(lines) + "\n"
    # Only the state the job is in, value 1 (as kube-state-metrics does for a container's
    # waiting reason): one series per job, not one per state and job. `sum by (state)`
    # still counts the fleet; a job's series changes its label when its state changes.
    lines = list(_header(STATES))
    lines.extend(f'{STATES.name}{{job="{name}",state="{job.state}"}} 1'
                 for job, name in zip(snapshot.jobs, names, strict=True))
    yield "\n".join(lines) + "\n"
    yield from _durations(exposition, names)
    lines = list(_header(HOST_SEEN))
    lines.extend(f'{HOST_SEEN.name}{{host="{escape_label(host)}",version="'
                 f'{escape_label(version)}"}} {_number(seen.timestamp())}'
                 for host, version, _, _, seen in exposition.hosts if seen is not None)
    yield "\n".join(lines) + "\n"
    lines = list(_header(GENERATED))
    lines.append(f"{GENERATED.name} {_number(snapshot.now.timestamp())}")
    yield "\n".join(lines) + "\n"


def _durations(exposition: Exposition, names: list[str]) -> Iterator[str]:
    # A job with no run counted yet has its histogram at zero, so increase() sees its first.
    histograms, jobs = exposition.histograms, exposition.snapshot.jobs
    bounds = [f'",le="{_bound(bound)}"}} ' for bound in histograms.bounds]
    empty = Durations((0,) * len(bounds), 0, 0.0)
    found = [histograms.jobs.get(job.name, empty) for job in jobs]
    yield "\n".join(_header(DURATION)) + "\n"
    for name, counts in zip(names, found, strict=True):
        prefix = f'{DURATION.name}_bucket{{job="{name}'
        lines = [f"{prefix}{bound}{count}"
                 for bound, count in zip(bounds, counts.buckets, strict=True)]
        lines.append(f'{prefix}",le="+Inf"}} {counts.count}')
        lines.append(f'{DURATION.name}_sum{{job="{name}"}} {_number(counts.total)}')
        lines.append(f'{DURATION.name}_count{{job="{name}"}} {counts.count}')
        yield "\n".join(lines) + "\n"
    lines = list(_header(OUTSIDE))
    for name, counts in zip(names, found, strict=True):
        lines.append(f'{OUTSIDE.name}{{job="{name}",bound="min"}} {counts.below}')
        lines.append(f'{OUTSIDE.name}{{job="{name}",bound="max"}} {counts.above}')
    yield "\n".join(lines) + "\n"
