"""--expect-duration with real runs: below, inside and above the range, and a run going on
past MAX as status, check, metrics, the event log and --on-slow see it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Env
from operating import holding, pglock_json
from prometheus_client.parser import text_string_to_metric_families


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def metric(env: Env, name: str, **labels: str) -> float | None:
    result = env.run("metrics")
    assert (result.returncode, result.stderr) == (0, "")
    for family in text_string_to_metric_families(result.stdout):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def test_a_run_below_inside_and_above_the_range_keeps_its_outcome_and_is_noted(env: Env,
                                                                                ) -> None:
    log = env.tmp / "events.log"
    for command in (["true"], ["sleep", "0.6"], ["sh", "-c", "sleep 1.2; exit 3"]):
        result = env.run("run", "--job", "timed", "--expect-duration", "300ms..1s",
                         "--min-hold", "0", "--event-log", str(log), "--", *command)
        # Nothing of its own on stderr: a duration is no error of pglock's.
        assert (result.stdout, result.stderr) == ("", "")
    below, inside, above = env.runs("timed")
    assert (below["outcome"], inside["outcome"], above["outcome"]) == (
        "succeeded", "succeeded", "failed")
    assert below["error"].startswith("ran shorter than expected: ")
    assert below["error"].endswith("s, less than 0.3s (--expect-duration)")
    assert inside["error"] is None
    assert above["error"].startswith("ran longer than expected: ")
    assert above["error"].endswith("s, more than 1s (--expect-duration)")
    # The side is a fact of the run, not read back from its words.
    assert [r["expected"] for r in (below, inside, above)] == ["shorter", None, "longer"]
    finished = [e for e in events(log) if e["event"] == "finished"]
    assert [e.get("expected") for e in finished] == ["shorter", None, "longer"]
    # The third passed MAX while it ran: slow then, once.
    slow = [e for e in events(log) if e["event"] == "slow"]
    assert [e["run_id"] for e in slow] == [above["id"]]
    # history shows the note; metrics counts them and has the three in its histogram.
    assert "ran longer than expected" in env.run("history", "--job", "timed").stdout
    assert metric(env, "pglock_job_runs_outside_expected_total", job="timed", bound="min") == 1
    assert metric(env, "pglock_job_runs_outside_expected_total", job="timed", bound="max") == 1
    assert metric(env, "pglock_job_duration_seconds_count", job="timed") == 3
    assert metric(env, "pglock_job_duration_seconds_bucket", job="timed", le="0.5") == 1
    assert metric(env, "pglock_job_duration_seconds_bucket", job="timed", le="1.0") == 2
    assert metric(env, "pglock_job_duration_seconds_bucket", job="timed", le="2.5") == 3


@pytest.mark.slow  # waits for the run to pass its MAX on the wall clock
def test_a_run_past_max_is_slow_everywhere_and_fires_on_slow_once(env: Env) -> None:
    log, fired = env.tmp / "events.log", env.tmp / "fired"
    hook = f'echo "$PGLOCK_HOOK $PGLOCK_RUN_ID $PGLOCK_EXPECTED_MAX" >> {fired}'
    with holding(env, "long", "--expect-duration", "..1s", "--on-slow", hook,
                 "--event-log", str(log), "--ttl", "5s") as holder:
        assert pglock_json(env, "status", "--job", "long")["jobs"][0]["state"] == "running"
        env.wait_for(fired.exists, timeout=20, what="the on-slow hook")
        [job] = pglock_json(env, "status", "--job", "long")["jobs"]
        assert job["state"] == "slow"
        assert job["slow"]["expected_max"] == 1.0 and job["slow"]["over_by"] >= 0
        check = env.run("check", "--job", "long")
        assert check.returncode == 1
        assert check.stdout.splitlines()[1].startswith(
            "WARNING: long: slow: run 1 on ")
        assert "pglock status --job long" in check.stdout
        assert env.run("check", "--job", "long", "--slow-critical", "0").returncode == 2
        assert env.run("check", "--job", "long", "--slow-warning", "1h").returncode == 0
        assert metric(env, "pglock_job_slow", job="long") == 1
        assert metric(env, "pglock_job_state", job="long", state="slow") == 1
        assert metric(env, "pglock_job_running_since_timestamp_seconds", job="long")
        # Nothing is stopped: the command is still running.
        assert holder.poll() is None
    assert holder.returncode == 0
    [run] = env.runs("long")
    assert run["outcome"] == "succeeded"
    assert run["error"].startswith("ran longer than expected: ")
    assert fired.read_text() == f"on-slow {run['id']} 1\n"
    slow = [e for e in events(log) if e["event"] == "slow"]
    assert len(slow) == 1 and slow[0]["expected_max"] == 1 and slow[0]["running_for"] >= 1
    assert slow[0]["run_id"] == run["id"]
    assert [e.get("expected") for e in events(log) if e["event"] == "finished"] == ["longer"]
    # Ended: no longer slow.
    assert pglock_json(env, "status", "--job", "long")["jobs"][0]["state"] != "slow"
    assert metric(env, "pglock_job_slow", job="long") == 0


@pytest.mark.parametrize(("args", "line"), [
    (["--expect-duration", "5m"], "pglock: --expect-duration: '5m' is not a range "
                                  "(examples: 30s..5m, 1m.., ..2h)"),
    (["--expect-duration", "5m..1m"], "pglock: --expect-duration: 5m..1m: MIN is above MAX"),
    (["--expect-duration", "1m..", "--on-slow", "true"],
     "pglock: --on-slow needs --expect-duration with a MAX (..MAX)"),
])
def test_a_bad_range_is_a_usage_error(env: Env, args: list[str], line: str) -> None:
    result = env.run("run", "--job", "x", *args, "--", "true")
    assert (result.returncode, result.stderr) == (2, line + "\n")
    assert env.runs("x") == []
