"""A job's figures over its runs (report.summarize, percentile) and the duration bar."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pglock.cli.screens import BAR_WIDTH, bar, summary_line
from pglock.lock.ledger import Outcome
from pglock.reports.history import RunRow, Summary, percentile, summarize

START = datetime(2024, 5, 1, tzinfo=UTC)


def run(outcome: str, duration: float | None = None, run_id: int = 1) -> RunRow:
    finished = None if outcome == Outcome.RUNNING else START
    return RunRow(id=run_id, job="j", started_at=START, finished_at=finished, holder="h",
                  holder_pid=1, mode="lease", outcome=outcome, exit_code=0, signal=None,
                  duration=duration, fencing_token=1, error=None)


# PostgreSQL's percentile_cont over the same values gives these (linear interpolation
# between the closest ranks); test_history checks the two agree on real rows.
@pytest.mark.parametrize(("values", "fraction", "expected"), [
    ([], 0.5, None),
    ([7.0], 0.5, 7.0),
    ([7.0], 0.95, 7.0),
    ([1.0, 2.0], 0.5, 1.5),
    ([1.0, 2.0, 3.0], 0.5, 2.0),
    ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
    ([1.0, 2.0, 3.0, 4.0], 0.95, 3.85),
    ([1.0, 2.0, 3.0, 4.0], 0.0, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 1.0, 4.0),
    ([0.1, 0.3, 0.5, 0.7], 0.95, 0.67),
    ([5.0] * 10, 0.95, 5.0),
    (list(map(float, range(101))), 0.95, 95.0),
])
def test_percentile(values: list[float], fraction: float, expected: float | None) -> None:
    assert percentile(values, fraction) == pytest.approx(expected)


@pytest.mark.parametrize(("runs", "expected"), [
    pytest.param([], Summary(0, 0, 0, None, None, None), id="none"),
    pytest.param([run("succeeded", 2.0)], Summary(1, 1, 1, 2.0, 2.0, 2.0), id="one"),
    pytest.param([run("succeeded", 1.0), run("failed", 3.0), run("succeeded", 2.0)],
                 Summary(3, 3, 2, 2.0, 2.9, 3.0), id="unsorted"),
    pytest.param([run("running"), run("succeeded", 1.0)], Summary(2, 1, 1, 1.0, 1.0, 1.0),
                 id="running-is-a-run-not-finished"),
    pytest.param([run("cleared"), run("succeeded", 1.0)], Summary(1, 1, 1, 1.0, 1.0, 1.0),
                 id="clear-audit-rows-are-not-runs"),
    pytest.param([run("abandoned"), run("lock_lost", 4.0), run("killed", 2.0)],
                 Summary(3, 3, 0, 3.0, 3.9, 4.0), id="no-duration-counts-but-has-no-figure"),
    pytest.param([run("timed_out", 9.0), run("succeeded", 1.0)],
                 Summary(2, 2, 1, 5.0, 8.6, 9.0), id="failures-count-in-the-figures"),
])
def test_summarize(runs: list[RunRow], expected: Summary) -> None:
    found = summarize(runs)
    assert (found.runs, found.finished, found.succeeded) == (
        expected.runs, expected.finished, expected.succeeded)
    assert (found.p50, found.p95, found.max) == (
        pytest.approx(expected.p50), pytest.approx(expected.p95), pytest.approx(expected.max))


@pytest.mark.parametrize(("finished", "succeeded", "rate"), [(0, 0, None), (4, 3, 0.75),
                                                             (2, 2, 1.0), (3, 0, 0.0)])
def test_success_rate(finished: int, succeeded: int, rate: float | None) -> None:
    assert Summary(finished, finished, succeeded, None, None, None).success_rate == rate


@pytest.mark.parametrize(("outcome", "length", "longest", "drawn"), [
    ("succeeded", 10.0, 10.0, "#" * BAR_WIDTH),
    ("succeeded", 5.0, 10.0, "#" * (BAR_WIDTH // 2)),
    ("succeeded", 0.001, 10.0, "#"),  # never shorter than one cell
    ("succeeded", 0.0, 10.0, ""),
    ("running", 10.0, 10.0, ">" * BAR_WIDTH),
    ("failed", 10.0, 10.0, "!" * BAR_WIDTH),
    ("timed_out", 2.5, 10.0, "!" * 6),
    ("killed", 1.0, 3.0, "!" * 8),
    ("succeeded", None, 10.0, ""),
    ("succeeded", 1.0, 0.0, ""),
])
def test_bar(outcome: str, length: float | None, longest: float, drawn: str) -> None:
    assert bar(outcome, length, longest) == drawn


def test_the_summary_line_counts_one_run_in_the_singular() -> None:
    assert summary_line("j", summarize([run("succeeded", 2.0)])) == (
        "j: 1 run (1 finished), success 100% (1/1), duration p50 2.0s, p95 2.0s, max 2.0s")
    assert summary_line("j", summarize([run(Outcome.RUNNING)])) == "j: 1 run, none finished"
    assert summary_line("j", summarize([run(Outcome.RUNNING), run(Outcome.RUNNING, run_id=2)])
                        ) == "j: 2 runs, none finished"
