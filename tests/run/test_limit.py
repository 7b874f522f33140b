"""`pglock run --limit N`, a counting semaphore, with real processes: at most N commands at
once (their marks prove it), the rest skip with 75, each seat's fencing token goes up, and
status, clear and the history see the seats."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import Env

# Marks entry and exit with the seat and its fencing token; holds until `release` exists.
SEATED = ('echo "enter $PGLOCK_SEAT $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; '
          'while [ ! -e {release} ]; do sleep 0.05; done; '
          'echo "leave $PGLOCK_SEAT $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}')


def seated(marks: Path, release: Path) -> list[str]:
    return ["sh", "-c", SEATED.format(marks=marks, release=release)]


def spans(marks: Path) -> list[tuple[int, int, int, int]]:
    """(enter, leave, seat, token) of each command; every one must have left."""
    enters: dict[tuple[int, int], int] = {}
    leaves: dict[tuple[int, int], int] = {}
    for line in marks.read_text().splitlines():
        kind, seat, token, stamp = line.split()
        key = (int(seat), int(token))
        assert key not in (enters if kind == "enter" else leaves), f"seat and token twice: {key}"
        (enters if kind == "enter" else leaves)[key] = int(stamp)
    assert enters.keys() == leaves.keys(), f"unfinished: {enters.keys() ^ leaves.keys()}"
    return sorted((enters[k], leaves[k], *k) for k in enters)


def most_at_once(found: list[tuple[int, int, int, int]]) -> int:
    """The largest number of commands between their enter and leave at one moment."""
    events = sorted(itertools.chain(((enter, 1) for enter, *_ in found),
                                    ((leave, -1) for _, leave, *_ in found)),
                    key=lambda e: (e[0], e[1]))
    inside = top = 0
    for _, step in events:
        inside += step
        top = max(top, inside)
    return top


def contend(env: Env, n: int, limit: int, marks: Path,
            release: Path) -> tuple[list[subprocess.Popen[str]], list[int]]:
    """n contenders for `sem` with --limit; returns them once all but `limit` have exited,
    and the exit codes of those."""
    processes = [env.popen("run", "--job", "sem", "--limit", str(limit), "--min-hold", "0",
                           "--", *seated(marks, release)) for _ in range(n)]
    deadline = time.monotonic() + 120
    while sum(p.poll() is None for p in processes) > limit:
        if time.monotonic() > deadline:
            release.touch()
            raise AssertionError("more contenders ran than the limit lets")
        time.sleep(0.05)
    # The winners are in: each has marked its entry before the losers are counted.
    env.wait_for(lambda: marks.exists() and len(marks.read_text().splitlines()) == limit,
                 what="the winners' marks")
    return processes, [p.returncode for p in processes if p.poll() is not None]


def ended(processes: list[subprocess.Popen[str]]) -> list[int]:
    """Every contender's exit code once it has ended, and its pipes closed."""
    for process in processes:
        process.communicate(timeout=60)
    return sorted(p.returncode for p in processes)


@pytest.mark.slow
def test_limit_two_of_ten_runs_two_at_once_and_tokens_per_seat_increase(env: Env) -> None:
    marks, release = env.tmp / "marks", env.tmp / "release"
    processes, losers = contend(env, 10, 2, marks, release)
    assert losers == [75] * 8
    status = env.run("status", "--job", "sem")
    assert status.returncode == 0, status
    assert "running 2/2" in status.stdout, status.stdout
    shown = json.loads(env.run("status", "--job", "sem", "--json").stdout)
    assert [(s["seat"], s["fencing_token"]) for s in shown["jobs"][0]["seats"]["holders"]] == [
        (1, 1), (2, 1)]
    release.touch()
    assert ended(processes) == [0, 0] + [75] * 8
    first = spans(marks)
    assert most_at_once(first) == 2
    assert [(seat, token) for *_, seat, token in first] in ([(1, 1), (2, 1)],
                                                            [(2, 1), (1, 1)])
    release.unlink()

    # A second round: the same seats, each with its next token.
    again = env.tmp / "marks-again"
    processes, losers = contend(env, 3, 2, again, release)
    assert losers == [75]
    release.touch()
    assert ended(processes) == [0, 0, 75]
    second = spans(again)
    assert most_at_once(second) == 2
    assert sorted((seat, token) for *_, seat, token in second) == [(1, 2), (2, 2)]
    # Each run's history row says its seat and that seat's token.
    assert sorted((r["seat"], r["fencing_token"], r["outcome"]) for r in env.runs("sem")) == [
        (1, 1, "succeeded"), (1, 2, "succeeded"), (2, 1, "succeeded"), (2, 2, "succeeded")]


def test_a_plain_run_and_a_semaphore_of_the_same_job_exclude_each_other(env: Env) -> None:
    """A job is a lock or a semaphore at one time: each treats the other's holders as the
    job held, so a host whose command line lost --limit cannot run beside the seats."""
    seats, _ = env.start_holder("mixed", "--limit", "3")
    plain = env.run("run", "--job", "mixed", "--", "true")
    assert (plain.returncode, plain.stderr) == (75, ""), plain
    seats.terminate()
    seats.communicate(timeout=60)
    lock, _ = env.start_holder("plain", "--min-hold", "0")
    semaphore = env.run("run", "--job", "plain", "--limit", "3", "--", "true")
    assert (semaphore.returncode, semaphore.stderr) == (75, ""), semaphore
    lock.terminate()
    lock.communicate(timeout=60)


@pytest.mark.slow
def test_clear_takes_every_seat_and_each_holder_stops(env: Env) -> None:
    holding = ["--limit", "3", "--ttl", "5s", "--", "sleep", "60"]
    first = env.popen("run", "--job", "sem", *holding)
    env.wait_for(lambda: "running 1/3" in env.run("status").stdout, what="the first seat")
    second = env.popen("run", "--job", "sem", *holding)
    env.wait_for(lambda: "running 2/3" in env.run("status").stdout, what="the second seat")
    shown = env.run("status", "--job", "sem")
    assert "seat 1: " in shown.stdout and "seat 2: " in shown.stdout, shown.stdout
    # stop and forget see the seats: stop sends the operator to clear, forget refuses.
    stop = env.run("stop", "--job", "sem", "--reason", "maintenance")
    assert stop.returncode == 1, stop
    assert re.fullmatch(r"pglock: job 'sem' runs as a semaphore \(--limit\) on \S+:\d+, \S+:\d+; "
                        r"pglock stop acts on a single lock: pglock clear --job sem takes "
                        r"every seat\n", stop.stderr), stop
    forget = env.run("forget", "--job", "sem", "--reason", "retired")
    assert forget.returncode == 1 and "is running on" in forget.stderr, forget
    cleared = env.run("clear", "--job", "sem", "--yes", "--now", "--reason", "stuck")
    assert cleared.returncode == 0, cleared
    assert cleared.stdout.startswith("cleared job 'sem': seats 1, 2 of its semaphore"), cleared
    # Each holder finds its seat cleared at its next renewal and stops its command.
    for holder in (first, second):
        holder.communicate(timeout=60)
        assert holder.returncode == 125
    assert sorted((r["seat"], r["outcome"]) for r in env.runs("sem")) == [
        (1, "cleared"), (1, "lock_lost"), (2, "cleared"), (2, "lock_lost")]
    assert env.query("SELECT count(*) FROM {schema}.audit WHERE action = 'clear'") == [(2,)]
    # Free at once (--now): the next run takes seat 1 with its next token.
    again = env.run("run", "--job", "sem", "--limit", "3", "--",
                    "sh", "-c", 'echo "$PGLOCK_SEAT $PGLOCK_FENCING_TOKEN"')
    assert (again.returncode, again.stdout) == (0, "1 2\n"), again
