"""check's plain output keeps text as data (issue 21, N7): a reason, a holder, a job name
cannot add a plugin line, forge performance data or carry an escape sequence."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given

from pglock.reports import check, jobs
from pglock.reports.check import PluginStatus, Thresholds

from ..jobfactory import NOW, dead, job, last, lock
from ..strategies import PURE, hostile_text


def paused(reason: str, by: str = "ops@admin", name: str = "sync") -> jobs.Job:
    pause = jobs.Pause(paused_at=NOW - timedelta(days=2), paused_by=by, reason=reason,
                       until=None, everywhere=False)
    return job(name, last_run=last(), pause=pause)


def test_a_reason_cannot_forge_a_plugin_line_or_perfdata() -> None:
    report = check.evaluate(jobs.Snapshot(NOW, [paused("maint\nFAKE|perf=1 \x1b[2J")]),
                            Thresholds())
    assert report.status is PluginStatus.WARNING
    summary, line = check.render_text(report).split("\n")
    assert summary.count("|") == 1
    assert line == ("WARNING: sync: paused 2d00h ago by ops@admin: "
                    "maint^JFAKE\u00a6perf=1 ^[[2J")


def test_a_job_name_and_holder_are_escaped_as_status_escapes_them() -> None:
    stale = job("a|b\r", lock=lock(expires_in=-1, holder="h\x1b]0;x\x07"), run_open=True)
    text = check.render_text(check.evaluate(jobs.Snapshot(NOW, [stale]), Thresholds()))
    assert text.split("\n")[1].startswith("CRITICAL: a\u00a6b^M: run 42 is marked running")
    assert "\x1b" not in text and "\r" not in text


@pytest.mark.parametrize(("name", "label"), [
    ("ok", "ok"), ("a=b", "a_b"), ("a|b", "a\u00a6b"), ("it's", "'it''s'"),
    ("two words", "'two words'"), ("nl\nx", "nl^Jx")])
def test_perfdata_labels_follow_the_plugin_guidelines(name: str, label: str) -> None:
    assert check.perf_label(name) == label


@PURE
@given(hostile_text, hostile_text, hostile_text, hostile_text)
def test_any_text_stays_data_in_checks_output(reason: str, by: str, name: str,
                                               error: str) -> None:
    snapshot = jobs.Snapshot(NOW, [
        paused(reason, by, name or "x"),
        job(name + "2", last_run=last("failed", 1), failures=3, dead=dead(error=error))])
    report = check.evaluate(snapshot, Thresholds())
    text = check.render_text(report)
    lines = text.split("\n")
    # The summary and one line per job not OK, whatever the text held.
    assert len(lines) == 1 + sum(v.status is not PluginStatus.OK for v in report.verdicts)
    assert lines[0].count("|") == 1 and all("|" not in line for line in lines[1:])
    assert all(line.isprintable() for line in lines), text
