"""Evidence the commands leave: enter/leave marks on one machine-wide clock, and checks on them."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

# A command for `pglock run`: marks its entry and exit, with the fencing token it was given.
# O_APPEND writes this small are atomic, so concurrent commands can share one file.
MARKING = ('echo "enter $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; sleep {seconds}; '
           'echo "leave $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}')


# The same, but the command stays until the test creates the gate file.
GATED = ('echo "enter $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; '
         'while [ ! -e {gate} ]; do sleep 0.02; done; '
         'echo "leave $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}')


def marking_command(marks: Path, seconds: float) -> list[str]:
    return ["sh", "-c", MARKING.format(marks=marks, seconds=seconds)]


def gated_command(marks: Path, gate: Path) -> list[str]:
    return ["sh", "-c", GATED.format(marks=marks, gate=gate)]


@dataclass(frozen=True)
class Interval:
    token: int
    enter: int
    leave: int


def intervals(marks: Path) -> list[Interval]:
    """Each command's [enter, leave] in nanoseconds, by fencing token; all must be complete."""
    enters: dict[int, int] = {}
    leaves: dict[int, int] = {}
    for line in marks.read_text().splitlines():
        kind, token, stamp = line.split()
        (enters if kind == "enter" else leaves)[int(token)] = int(stamp)
    assert enters.keys() == leaves.keys(), f"unfinished commands: {enters.keys() ^ leaves.keys()}"
    return sorted((Interval(t, enters[t], leaves[t]) for t in enters), key=lambda i: i.enter)


def assert_no_overlap(found: list[Interval]) -> None:
    """No command entered before the previous one left."""
    for earlier, later in itertools.pairwise(found):
        assert later.enter > earlier.leave, f"overlap: {earlier} and {later}"
