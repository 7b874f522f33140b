"""The table drawing: columns that line up whatever the characters, fitting that never
looks up a column a screen does not have."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rich.cells import cell_len

from pglock.cli import render
from pglock.cli.render import Grid, Screen
from pglock.cli.screens import runs_grid
from pglock.reports.history import RunRow

NAMES = ["plain", "漢字ジョブ", "emoji-🚀-job", "cafe\u0301", "\uff57\uff49\uff44\uff45"]


def test_plain_columns_line_up_in_terminal_cells() -> None:
    grid = Grid(("JOB", "STATE"))
    for name in NAMES:
        grid.add([name, "idle"])
    lines = render.plain(Screen("header", [grid])).splitlines()[2:]
    # Each row's STATE starts in the same terminal column.
    assert len({cell_len(line[: line.index("idle" if "idle" in line else "STATE")])
                for line in lines}) == 1, lines


def _run(job: str, slotted: bool) -> RunRow:
    now = datetime(2026, 11, 26, tzinfo=UTC)
    return RunRow(1, job, now, now, "host", 1, "lease", "succeeded", 0, None, 1.0, 1, None,
                  slot=now if slotted else None, attempt=1)


@pytest.mark.parametrize("with_job", [True, False])
@pytest.mark.parametrize("bars", [True, False])
@pytest.mark.parametrize("slotted", [True, False])
@pytest.mark.parametrize("width", [20, 60, 80, 200])
def test_every_runs_grid_fits_any_width(with_job: bool, bars: bool, slotted: bool,
                                        width: int) -> None:
    """status --job's recent runs (no JOB column, no bars) once looked up JOB to drop it."""
    grid = runs_grid([_run(name, slotted) for name in NAMES], datetime.now(UTC),
                     with_job=with_job, bars=bars)
    shown, hidden = render.fitting(grid, width)
    assert sorted([grid.headers[i] for i in shown] + hidden) == sorted(grid.headers)
    if with_job:
        # Across jobs, the job's name is what a row is about: never dropped.
        assert grid.headers.index("JOB") in shown
