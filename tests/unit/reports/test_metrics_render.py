"""The Prometheus exposition of jobs: parseable, a sample per job with a value."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families

from pglock.reports import jobs, metrics

from ..jobfactory import NOW, due, job, last, lock

# The schema's bounds (migration 006; tests/reports/test_monitor.py reads them back).
BOUNDS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
          7200.0, 14400.0, 28800.0, 86400.0)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_each_family_once_with_a_sample_per_job_that_has_a_value() -> None:
    odd = 'odd "name" \\ with\nnewline'
    snapshot = jobs.Snapshot(NOW, [
        job("ok", last_run=last(), counts={"succeeded": 4}, last_success_at=NOW),
        job("stale", lock=lock(expires_in=-1), run_open=True),
        job("late", last_run=last("failed", 3), due=due(2), failures=2,
            counts={"failed": 2}),
        job("kept", lock=lock(released=True), last_run=last()),
        job(odd)])
    text = metrics.render(snapshot)
    assert text.endswith("\n")
    found = samples(text)

    def value(name: str, job_name: str, **labels: str) -> float | None:
        return found.get((name, tuple(sorted({"job": job_name, **labels}.items()))))

    assert value("pglock_job_stale", "stale") == 1 and value("pglock_job_stale", "ok") == 0
    assert value("pglock_job_running", "stale") == 1
    assert value("pglock_job_held", "kept") == 1 and value("pglock_job_running", "kept") == 0
    assert value("pglock_job_overdue", "late") == 1
    assert value("pglock_job_missed_slots", "late") == 2
    assert value("pglock_job_missed_slots", "ok") is None
    assert value("pglock_job_last_exit_code", "late") == 3
    assert value("pglock_job_consecutive_failures", "late") == 2
    assert value("pglock_job_last_duration_seconds", "ok") == 3.5
    assert value("pglock_job_last_success_timestamp_seconds", "ok") == NOW.timestamp()
    assert value("pglock_job_last_success_timestamp_seconds", "late") is None
    assert value("pglock_job_runs_total", "ok", outcome="succeeded") == 4
    assert value("pglock_job_runs_total", "ok", outcome="abandoned") == 0
    assert value("pglock_job_runs_total", odd, outcome="failed") == 0
    assert text.count("# TYPE pglock_job_held gauge") == 1


def test_no_jobs_still_declares_every_family() -> None:
    text = metrics.render(jobs.Snapshot(NOW, []))
    names = {f.name for f in text_string_to_metric_families(text)}
    # The parser names a counter's family without its _total.
    assert {f.name.removesuffix("_total") if f.kind == "counter" else f.name
            for f in metrics.FAMILIES} | {
        "pglock_job_runs", "pglock_job_state", "pglock_job_duration_seconds",
        "pglock_job_runs_outside_expected", "pglock_metrics_timestamp_seconds",
        "pglock_host_last_seen_timestamp_seconds"} == names


def test_the_new_series_of_a_slow_run_a_pause_and_the_history() -> None:
    pause = jobs.Pause(NOW - timedelta(days=2), "ops", "disk swap", NOW + timedelta(hours=1),
                       False)
    snapshot = jobs.Snapshot(NOW, [
        job("slow", lock=lock(), run_open=True, slow_after=60.0),
        job("calm", lock=lock(), run_open=True),
        job("off", last_run=last(), pause=pause)])
    durations = {"calm": metrics.Durations(
        (0, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3), 4, 400.25, below=1, above=1)}
    text = metrics.render(metrics.Exposition(snapshot, metrics.Histograms(BOUNDS, durations)))
    found = samples(text)

    def value(name: str, job_name: str | None, **labels: str) -> float | None:
        tags = labels if job_name is None else {"job": job_name, **labels}
        return found.get((name, tuple(sorted(tags.items()))))

    assert value("pglock_job_slow", "slow") == 1 and value("pglock_job_slow", "calm") == 0
    # One state series per job: the one it is in, at 1.
    assert value("pglock_job_state", "slow", state="slow") == 1
    assert value("pglock_job_state", "calm", state="running") == 1
    assert value("pglock_job_state", "off", state="paused") == 1
    states = [(dict(tags)["job"], dict(tags)["state"], v) for (n, tags), v in found.items()
              if n == "pglock_job_state"]
    assert sorted(states) == [("calm", "running", 1), ("off", "paused", 1),
                              ("slow", "slow", 1)]
    started = (NOW - timedelta(minutes=3)).timestamp()
    assert value("pglock_job_running_since_timestamp_seconds", "slow") == started
    assert value("pglock_job_running_since_timestamp_seconds", "off") is None
    assert value("pglock_job_paused_since_timestamp_seconds", "off") == pause.paused_at.timestamp()
    assert value("pglock_job_paused_until_timestamp_seconds", "off") == NOW.timestamp() + 3600
    assert value("pglock_job_duration_seconds_bucket", "calm", le="1.0") == 1
    assert value("pglock_job_duration_seconds_bucket", "calm", le="86400.0") == 3
    assert value("pglock_job_duration_seconds_bucket", "calm", le="+Inf") == 4
    assert value("pglock_job_duration_seconds_count", "calm") == 4
    assert value("pglock_job_duration_seconds_sum", "calm") == 400.25
    # A job with no finished run has its histogram at zero, so increase() sees its first.
    assert value("pglock_job_duration_seconds_bucket", "slow", le="+Inf") == 0
    assert value("pglock_job_runs_outside_expected_total", "calm", bound="max") == 1
    assert value("pglock_job_runs_outside_expected_total", "slow", bound="min") == 0
    assert value("pglock_metrics_timestamp_seconds", None) == NOW.timestamp()


def test_label_values_are_escaped() -> None:
    assert metrics.escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
