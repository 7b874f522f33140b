"""Evidence the commands leave: enter/leave marks on one machine-wide clock, and checks on them."""

from __future__ import annotations

import itertools
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# A command for `pglock run`: marks its entry and exit, with the fencing token it was given.
# O_APPEND writes this small are atomic, so concurrent commands can share one file.
MARKING = ('echo "enter $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; sleep {seconds}; '
           'echo "leave $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}')


def marking_command(marks: Path, seconds: float) -> list[str]:
    return ["sh", "-c", MARKING.format(marks=marks, seconds=seconds)]


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


def held_command(marks: Path, release: Path) -> list[str]:
    """Marks entry, holds until `release` exists, marks exit."""
    script = ('echo "enter $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; '
              'while [ ! -e {release} ]; do sleep 0.05; done; '
              'echo "leave $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}')
    return ["sh", "-c", script.format(marks=marks, release=release)]


def race(processes: list[subprocess.Popen[str]], release: Path,
         timeout: float = 120) -> list[tuple[int, str, str]]:
    """Let every contender but one finish, then release the one left; (code, out, err) sorted.

    The winner holds the lock until every loser has given up, so "exactly one winner"
    does not depend on how fast a loaded machine starts twenty interpreters.
    """
    deadline = time.monotonic() + timeout
    while sum(p.poll() is None for p in processes) > 1:
        if time.monotonic() > deadline:
            release.touch()
            running = sum(p.poll() is None for p in processes)
            raise AssertionError(f"{running} contenders still running: more than one winner?")
        time.sleep(0.05)
    release.touch()
    outputs = [p.communicate(timeout=timeout) for p in processes]
    release.unlink()
    ends = zip(processes, outputs, strict=True)
    return sorted((p.returncode, out, err) for p, (out, err) in ends)
