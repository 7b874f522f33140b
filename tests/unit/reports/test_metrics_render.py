"""The Prometheus exposition of jobs: parseable, a sample per job with a value."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pglock.reports import jobs, metrics

from ..jobfactory import NOW, due, job, last, lock


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
            for f in metrics.FAMILIES} | {"pglock_job_runs"} == names


def test_label_values_are_escaped() -> None:
    assert metrics.escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
