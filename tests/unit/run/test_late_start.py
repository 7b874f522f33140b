"""The check before the fork (docs/lease.md, "Never outside the lock"): past the lock's
start deadline nothing is forked. Only the refusing side runs here: it forks nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pglock.errors import ExitStatus
from pglock.lock import clock
from pglock.run import reentrant
from pglock.run.child import Child, Deadlines, LateStart


def children() -> set[str]:
    return {child for task in Path(f"/proc/{os.getpid()}/task").iterdir()
            for child in (task / "children").read_text().split()}


@pytest.mark.parametrize("late", [0.0, 0.001, 3.4, 3600.0])
def test_a_command_past_its_start_deadline_is_not_forked(tmp_path: Path, late: float) -> None:
    before = children()
    mark = tmp_path / "ran"
    with pytest.raises(LateStart) as raised:
        Child.spawn(["touch", str(mark)], dict(os.environ),
                    deadlines=Deadlines(clock.now() - late))
    assert str(raised.value).startswith("not started: the lock's deadline to start the "
                                        "command passed ")
    assert raised.value.exit_status == ExitStatus.INTERNAL
    assert children() == before
    assert not mark.exists()


def test_a_nested_run_confirmed_too_long_ago_is_not_started(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    with pytest.raises(LateStart) as raised:
        reentrant.run_directly("j", ["touch", str(mark)], dict(os.environ),
                               confirmed_at=clock.now() - 1.5)
    assert "the lock of job 'j' was confirmed 1.5s before" in str(raised.value)
    assert not mark.exists()
