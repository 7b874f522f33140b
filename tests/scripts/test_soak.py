"""The fleet soak in the suite: a short run with a fixed seed (issue 23, docs/soak.md), and
the defect the soak found, reproduced alone.

The short run is the long one's program (`scripts/soak`) for 2.5 minutes: five hosts in
network namespaces, a primary and a synchronous standby, the nemesis (failovers
included), both checkers. It needs root and iproute2, and a C compiler for its clock
faults (.ci/run installs them). Its three promises are three tests, so that a known
defect marks one of them and not the others.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SEED = 23
MINUTES = 2.5
# Synchronous: the run the suite has time for (2.5 minutes) is proven green so; the
# asynchronous one (seed 23's first failover is then a lagged one) is run by hand
# (docs/soak.md) until a suite run of it has been shown to pass from a fresh clone.
REPLICATION = "sync"

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="the soak needs root and iproute2")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("soak")
    # Its own addresses and names: a soak run by hand may be going on beside the suite.
    done = subprocess.run(
        [sys.executable, "-m", "soak", "--minutes", str(MINUTES), "--seed", str(SEED),
         "--replication", REPLICATION, "--net", "10.201", "--prefix", "st", "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")}, capture_output=True, text=True,
        timeout=900, check=False)
    print(done.stdout)
    assert done.returncode in (0, 1), done.stderr
    found: dict[str, Any] = json.loads((out / "report.json").read_text())
    return found


@needs_root
@pytest.mark.timeout(900)
def test_the_short_soak_checked_a_fleet_under_faults(report: dict[str, Any]) -> None:
    figures = report["figures"]
    assert figures["hosts"] == 5
    assert sum(n for kind, n in figures["faults"].items() if not kind.startswith("observed")) >= 5
    assert figures["slots_checked"] >= 8
    assert figures["commands"] >= 20
    assert figures["failovers"] >= 1, figures["faults"]


@needs_root
@pytest.mark.timeout(900)
def test_no_two_holders_at_once(report: dict[str, Any]) -> None:
    figures = report["figures"]
    assert figures["overlaps"] == 0, [d for d in report["defects"] if "ran together" in d]
    assert figures["repeated_tokens"] == 0, [d for d in report["defects"] if "repeated" in d]
    assert not [d for d in report["defects"] if "below one accepted" in d]


@needs_root
@pytest.mark.timeout(900)
def test_no_slot_ran_twice(report: dict[str, Any]) -> None:
    assert report["figures"]["duplicate_slots"] == 0


# The job that meets defect 1 of docs/soak.md; its misses are tested apart.
ADVISORY_RETRIED = "cron-retry-adv"


@needs_root
@pytest.mark.timeout(900)
def test_every_missed_slot_is_explained_by_a_fault(report: dict[str, Any]) -> None:
    by_job = dict(report["figures"]["unexplained_misses_by_job"])
    by_job.pop(ADVISORY_RETRIED, None)
    assert by_job == {}, report["defects"]


@needs_root
@pytest.mark.timeout(900)
# Found by the soak (seeds 1, 2, 5, 23, 1124, 2311; docs/soak.md, defect 1): an advisory
# retry in place ran without its session lock; fixed by keeping the session until the
# run's end is recorded (issue 22).
def test_every_missed_slot_of_the_advisory_retried_job_is_explained(
        report: dict[str, Any]) -> None:
    assert ADVISORY_RETRIED not in report["figures"]["unexplained_misses_by_job"], \
        report["defects"]


ATTEMPT_1_FAILS = ["sh", "-c", 'sleep 1; [ "$PGLOCK_ATTEMPT" -ge 2 ] || exit 1']


def retried(env: Env, mode: str) -> list[tuple[int, str]]:
    job = f"retry-{mode}"
    env.run("run", "--job", job, "--mode", mode, "--schedule", "0 0 1 1 *", "--retries", "2",
            "--retry-delay", "1s", "--ttl", "10s", "--", *ATTEMPT_1_FAILS)
    return [(run["attempt"], run["outcome"]) for run in env.runs(job)]


def test_a_lease_retry_in_place_keeps_its_lock(env: Env) -> None:
    assert retried(env, "lease") == [(1, "failed"), (2, "succeeded")]


def test_an_advisory_retry_in_place_keeps_its_lock(env: Env) -> None:
    assert retried(env, "advisory") == [(1, "failed"), (2, "succeeded")]
