"""check's judgement of jobs: each problem's level under the thresholds, the summary, JSON."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from pglock.errors import UsageError
from pglock.reports import check, jobs
from pglock.reports.check import PluginStatus, Thresholds

from ..jobfactory import NOW, due, job, last, lock

DEFAULT = Thresholds()


@pytest.mark.parametrize(("built", "thresholds", "status", "reason"), [
    (job(last_run=last()), DEFAULT, PluginStatus.OK, None),
    (job(lock=lock(expires_in=-65), run_open=True), DEFAULT, PluginStatus.CRITICAL,
     "run 42 is marked running but its lock expired 1m05s ago (its holder vanished)"),
    (job(last_run=last("failed", 3), failures=1), DEFAULT, PluginStatus.CRITICAL,
     "last run failed (exit 3), 2m00s ago"),
    (job(last_run=last("failed", 3), failures=2), Thresholds(1, 3, 1, 2),
     PluginStatus.WARNING, "last run failed (exit 3), 2 in a row, 2m00s ago"),
    (job(last_run=last("killed", None), failures=0), Thresholds(1, 3, 1, 2),
     PluginStatus.WARNING, "last run killed, 2m00s ago"),
    (job(last_run=last(), due=due(1)), DEFAULT, PluginStatus.WARNING,
     "overdue: 1 slot missed, the first due 10m00s ago (schedule '*/5 * * * *', grace 1m00s)"),
    (job(last_run=last(), due=due(2)), DEFAULT, PluginStatus.CRITICAL, "overdue: 2 slots"),
    (job(last_run=last(), due=due(2)), Thresholds(1, 1, 3, 4), PluginStatus.OK, None),
    (job(last_run=last(), note="its schedule cannot be read here: unknown zone"), DEFAULT,
     PluginStatus.UNKNOWN, "its schedule cannot be read here: unknown zone"),
    (job(lock=lock(released=True), last_run=last()), DEFAULT, PluginStatus.OK, None),
])
def test_judge(built: jobs.Job, thresholds: Thresholds, status: PluginStatus,
               reason: str | None) -> None:
    verdict = check.judge(built, thresholds, NOW)
    assert verdict.status is status
    if reason is None:
        assert verdict.reasons == ()
    else:
        assert verdict.reasons[0].startswith(reason), verdict.reasons


def test_worst_ranks_critical_over_warning_over_unknown_over_ok() -> None:
    s = PluginStatus
    assert check.worst([s.OK, s.UNKNOWN, s.WARNING]) is s.WARNING
    assert check.worst([s.UNKNOWN, s.CRITICAL]) is s.CRITICAL
    assert check.worst([s.OK, s.UNKNOWN]) is s.UNKNOWN
    assert check.worst([]) is s.OK


def test_the_summary_counts_each_problem_and_the_ok_jobs() -> None:
    snapshot = jobs.Snapshot(NOW, [
        job("a", last_run=last()), job("b", last_run=last("failed", 1), due=due(1)),
        job("c", lock=lock(expires_in=-1), run_open=True)])
    report = check.evaluate(snapshot, DEFAULT)
    assert report.status is PluginStatus.CRITICAL
    lines = check.render_text(report).splitlines()
    assert lines[0] == ("PGLOCK CRITICAL - 3 jobs: 1 failed, 1 overdue, 1 stale, 1 ok "
                        "| jobs=3 ok=1 dead=0 failed=1 overdue=1 paused=0 silent_host=0 "
                        "skipped_running=0 slow=0 stale=1")
    assert lines[1].startswith("CRITICAL: b: last run failed (exit 1), 2m00s ago; overdue: ")
    assert lines[2].startswith("CRITICAL: c: run 42 is marked running")


def test_a_young_pause_is_counted_paused_not_ok_as_well() -> None:
    pause = jobs.Pause(NOW - timedelta(hours=1), "ops", "migration", None, False)
    snapshot = jobs.Snapshot(NOW, [job("a", last_run=last()),
                                   job("b", last_run=last(), pause=pause)])
    report = check.evaluate(snapshot, DEFAULT)
    assert report.status is PluginStatus.OK
    assert report.summary == "2 jobs: 1 paused, 1 ok"
    assert (report.counts["jobs"], report.counts["ok"], report.counts["paused"]) == (2, 1, 1)


def test_one_job_asked_for_is_shown_even_when_ok() -> None:
    kept = job("brief", lock=lock(released=True, expires_in=600), last_run=last())
    report = check.evaluate(jobs.Snapshot(NOW, [kept]), DEFAULT, "brief")
    line = check.render_text(report).splitlines()[1]
    assert line.startswith("OK: brief: last run succeeded 2m00s ago, lock held until ")
    assert line.endswith("(--min-hold)")
    [answer] = json.loads(check.render_json(report))["jobs"]
    assert (answer["state"], answer["held"], answer["running"]) == ("held", True, False)


def test_no_jobs_is_ok_and_a_job_never_seen_is_unknown() -> None:
    empty = jobs.Snapshot(NOW, [])
    assert check.render_text(check.evaluate(empty, DEFAULT)) == (
        "PGLOCK OK - 0 jobs: 0 ok | jobs=0 ok=0 dead=0 failed=0 overdue=0 paused=0 "
        "silent_host=0 skipped_running=0 slow=0 stale=0")
    report = check.evaluate(empty, DEFAULT, "nobody")
    assert (report.status, check.render_text(report)) == (
        PluginStatus.UNKNOWN, "PGLOCK UNKNOWN - no job named 'nobody' has run")
    assert json.loads(check.render_json(report)) == {
        "status": "UNKNOWN", "exit_code": 3, "summary": "no job named 'nobody' has run",
        "counts": {}, "jobs": []}


@pytest.mark.parametrize(("thresholds", "words"), [
    (Thresholds(0, 1, 1, 2), "--failures-warning and --failures-critical must be 1 or more"),
    (Thresholds(1, 1, 3, 2), "--missed-warning (3) is above --missed-critical (2)"),
])
def test_thresholds_out_of_order_are_usage_errors(thresholds: Thresholds, words: str) -> None:
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        thresholds.validate()


def test_plugin_statuses_are_the_nagios_codes_each_with_its_meaning() -> None:
    assert [(int(s), s.name) for s in PluginStatus] == [
        (0, "OK"), (1, "WARNING"), (2, "CRITICAL"), (3, "UNKNOWN")]
    assert all(s.meaning.startswith(s.name + ":") for s in PluginStatus)


@pytest.mark.parametrize(("over_by", "thresholds", "status"), [
    (0.0, Thresholds(), PluginStatus.WARNING),
    (3600.0, Thresholds(), PluginStatus.WARNING),
    (60.0, Thresholds(slow_warning=120.0), PluginStatus.OK),
    (180.0, Thresholds(slow_warning=120.0), PluginStatus.WARNING),
    (180.0, Thresholds(slow_critical=180.0), PluginStatus.CRITICAL),
])
def test_a_slow_run_is_judged_by_how_far_past_its_max(over_by: float, thresholds: Thresholds,
                                                     status: PluginStatus) -> None:
    # The factory's run started 3 minutes before NOW.
    built = job(lock=lock(), run_open=True, slow_after=180.0 - over_by)
    verdict = check.judge(built, thresholds, NOW)
    assert verdict.status is status
    if status is not PluginStatus.OK:
        assert verdict.reasons[0].startswith("slow: run 42 on web-1 has run ")
        assert verdict.reasons[0].endswith("(--expect-duration; pglock status --job sync)")


def test_slow_thresholds_out_of_order_are_refused() -> None:
    with pytest.raises(UsageError) as raised:
        Thresholds(slow_warning=600.0, slow_critical=60.0).validate()
    assert str(raised.value) == "--slow-warning (10m00s) is above --slow-critical (1m00s)"
