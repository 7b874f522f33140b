"""scripts/loadgen against the test server: its loads run, and its evidence can tell."""

from __future__ import annotations

import importlib.util
import sys
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest
from conftest import Env

# A herd of threads for a second, and a storm whose winners hold a moment.
pytestmark = pytest.mark.slow


def _loadgen() -> ModuleType:
    path = Path(__file__).parents[2] / "scripts" / "loadgen.py"
    spec = importlib.util.spec_from_file_location("loadgen", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["loadgen"] = module
    spec.loader.exec_module(module)
    return module


loadgen = _loadgen()


def test_acquisitions_contended_never_overlap(env: Env) -> None:
    server = loadgen.Server(env.dsn, env.dsn)
    result = loadgen.acquisitions(server, env.schema, workers=4, jobs=2, seconds=1.0,
                                  reuse=False)
    assert (result["errors"], result["first_errors"]) == (0, {})
    assert result["wins"] > 0
    assert result["overlaps"] == []
    assert result["runs_table"] == []
    assert len(env.query("SELECT 1 FROM {schema}.runs")) == result["wins"]


def test_storm_runs_each_job_once(env: Env) -> None:
    server = loadgen.Server(env.dsn, env.dsn)
    result = loadgen.storm(server, env.schema, hosts=5, jobs=3, jitter=0.0,
                           command_seconds=0.2)
    assert (result["errors"], result["first_errors"]) == (0, {})
    assert (result["wins"], result["losses"]) == (3, 12)
    assert result["jobs_not_run_once"] == []
    assert result["overlaps"] == [] and result["runs_table"] == []
    assert result["peak_client_connections"] >= 1


def test_a_warm_held_storm_is_all_losers_with_the_census_due(env: Env) -> None:
    """--warm --held (docs/scale.md, "The census"): storms first until every host attends
    every job, then a holder on each job; every contender of the storm measured loses."""
    server = loadgen.Server(env.dsn, env.dsn)
    result = loadgen.storm(server, env.schema, hosts=3, jobs=2, jitter=0.0,
                           command_seconds=0.1, held=True, warm=True)
    assert (result["errors"], result["first_errors"]) == (0, {})
    assert (result["wins"], result["losses"]) == (0, 6)
    assert result["jobs_not_run_once"] == []
    assert result["overlaps"] == [] and result["runs_table"] == []
    assert loadgen._attended(env.dsn, env.schema) == 6
    # The storm measured rewrote each host's row (the census was moved a minute back).
    assert env.query("SELECT count(*) FROM {schema}.attendance WHERE host LIKE 'host-%%' "
                     "AND cardinality(gaps) >= 2") == [(6,)]


def test_a_storm_of_candidates_asks_k_hosts_per_job(env: Env) -> None:
    """--candidates (docs/scale.md, "Candidates"): after the warm-up storms, each job's K
    candidates ask and the other hosts stand by; each job runs once."""
    server = loadgen.Server(env.dsn, env.dsn)
    result = loadgen.storm(server, env.schema, hosts=5, jobs=3, jitter=0.0,
                           command_seconds=0.1, gate=loadgen.Candidates(2, 0.5))
    assert (result["errors"], result["first_errors"]) == (0, {})
    assert (result["contenders"], result["stood_by"]) == (6, 9)
    assert (result["wins"], result["losses"]) == (3, 3)
    assert result["jobs_not_run_once"] == []
    assert result["overlaps"] == [] and result["runs_table"] == []
    assert result["last_answer_s"] >= 0.5 > result["last_answer_less_steps_s"]


def test_a_refresh_reads_the_rosters_size_not_the_fleets(env: Env) -> None:
    server = loadgen.Server(env.dsn, env.dsn)
    result = loadgen.refreshes(server, env.schema, hosts=2, jobs=2, census_hosts=100, k=3)
    assert (result["errors"], result["count"]) == (0, 4)
    assert result["roster_p50"] == result["roster_size"] == 64
    assert env.query("SELECT count(*) FROM {schema}.attendance WHERE outcome = 'standby' "
                     "AND host LIKE 'host-%%'") == [(4,)]


def test_the_evidence_catches_an_overlap(env: Env) -> None:
    """The checks can fail: two tenures of one job that overlap, and a runs table that
    shows a run started inside another's."""
    tenures = [loadgen.Tenure("j", 1, 0.0, 2.0), loadgen.Tenure("j", 2, 1.0, 3.0),
               loadgen.Tenure("k", 1, 0.0, 1.0), loadgen.Tenure("k", 2, 2.0, 3.0)]
    assert len(loadgen.overlaps(tenures)) == 1
    assert loadgen.overlaps(tenures[2:]) == []
    server = loadgen.Server(env.dsn, env.dsn)
    result = loadgen.acquisitions(server, env.schema, workers=1, jobs=1, seconds=0.2,
                                  reuse=True)
    assert result["runs_table"] == []
    [(job, token, started, finished)] = env.query(
        "SELECT job, fencing_token, started_at, finished_at FROM {schema}.runs "
        "ORDER BY id DESC LIMIT 1")
    env.query("INSERT INTO {schema}.runs (job, mode, holder, holder_pid, fencing_token, command,"
              " started_at, finished_at, outcome) VALUES (%s, 'lease', 'x', 1, %s, 'true', %s, %s,"
              " 'succeeded')", (job, token + 1, started + (finished - started) / 2,
                                finished + timedelta(seconds=1)))
    problems = loadgen.runs_table_problems(env.dsn, env.schema, _tenures(env))
    assert any("started before" in problem for problem in problems), problems


def _tenures(env: Env) -> list[object]:
    return [loadgen.Tenure(job, token, 0.0, 0.0)
            for job, token in env.query("SELECT job, fencing_token FROM {schema}.runs")]
