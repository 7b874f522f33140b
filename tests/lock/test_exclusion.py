"""Mutual exclusion, proved from the marks real commands leave and from the history rows."""

from __future__ import annotations

import time

import pytest
from conftest import Env
from marks import assert_no_overlap, held_command, intervals, marking_command, race

# Herds of contenders and leases renewed over several ttls: the slow layer.
pytestmark = pytest.mark.slow


def test_many_contenders_many_rounds_never_overlap(env: Env) -> None:
    marks, release = env.tmp / "marks", env.tmp / "release"
    rounds, contenders = 5, 20
    for round_number in range(rounds):
        # Each round is a new trigger, deliberately run inside the last one's hold.
        processes = [env.popen("run", "--job", "shared", "--holder", f"host-{i}", "--rerun",
                               "--", *held_command(marks, release))
                     for i in range(contenders)]
        results = race(processes, release)
        assert results == [(0, "", "")] + [(75, "", "")] * (contenders - 1), round_number
    found = intervals(marks)
    assert len(found) == rounds
    assert_no_overlap(found)
    runs = env.runs("shared")
    assert [r["outcome"] for r in runs] == ["succeeded"] * rounds
    assert [r["fencing_token"] for r in runs] == [i.token for i in found]
    assert sorted(r["fencing_token"] for r in runs) == [r["fencing_token"] for r in runs]


def test_back_to_back_contenders_hand_over_without_overlap(env: Env) -> None:
    """Contenders that wait take turns; each one starts only after the previous one left."""
    marks = env.tmp / "marks"
    processes = [env.popen("run", "--job", "queue", "--wait", "60s", "--holder", f"h{i}", "--",
                           *marking_command(marks, 0.3)) for i in range(12)]
    for process in processes:
        process.communicate(timeout=120)
    assert [p.returncode for p in processes] == [0] * 12
    found = intervals(marks)
    assert len(found) == 12
    assert_no_overlap(found)
    assert len({r["holder"] for r in env.runs("queue")}) == 12


def test_long_command_keeps_its_lock_past_several_ttls(env: Env) -> None:
    holder = env.popen("run", "--job", "long", "--ttl", "5s", "--", "sleep", "17")
    env.wait_for(lambda: env.runs("long"), what="the holder's run row")
    renewals = set()
    for _ in range(3):
        time.sleep(5)
        contender = env.run("run", "--job", "long", "--ttl", "5s", "--", "true")
        assert contender.returncode == 75
        renewals.add(env.query("SELECT renewed_at FROM {schema}.locks WHERE job = 'long'")[0][0])
    holder.communicate(timeout=30)
    assert holder.returncode == 0
    assert len(renewals) == 3, "the lease was not renewed while the command ran"
    assert [r["outcome"] for r in env.runs("long")] == ["succeeded"]
