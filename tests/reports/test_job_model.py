"""One job model over real runs: --min-hold shown as held, schemas check and metrics
cannot read, a closed or full stdout, and the job name on a narrow terminal."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from conftest import PGLOCK, Env, one_line
from operating import on_terminal, pglock_json, plain, row_of


def test_a_lock_kept_by_min_hold_is_held_everywhere_until_the_hold_ends(env: Env) -> None:
    result = env.run("run", "--job", "brief", "--min-hold", "1h", "--holder", "web-2", "--",
                     "true")
    assert result.returncode == 0
    [job] = pglock_json(env, "status")["jobs"]
    assert job["state"] == "held"
    assert (job["holder"]["host"], job["holder"]["released_at"] is not None) == ("web-2", True)
    cells = row_of(plain(env, "status"), "brief")
    assert cells[1] == "held" and cells[2].startswith("web-2:")
    assert re.fullmatch(r"held until \d\d:\d\d:\d\d \(min-hold\)", cells[5]), cells
    # check: healthy, and says why the lock is taken; metrics: held, not running.
    checked = env.run("check", "--job", "brief")
    assert checked.returncode == 0
    assert "lock held until " in checked.stdout and "(--min-hold)" in checked.stdout
    report = json.loads(env.run("check", "--json").stdout)
    assert (report["jobs"][0]["held"], report["jobs"][0]["state"]) == (True, "held")
    exposition = env.run("metrics").stdout
    assert 'pglock_job_held{job="brief"} 1' in exposition
    assert 'pglock_job_running{job="brief"} 0' in exposition
    # Another host cannot take it meanwhile, and clear says why there is nothing to clear.
    assert env.run("run", "--job", "brief", "--", "true").returncode == 75
    cleared = env.run("clear", "--job", "brief", "--yes")
    assert cleared.returncode == 0 and "--min-hold keeps its lock taken until" in cleared.stdout
    # Once the hold ends, idle again.
    env.query("UPDATE {schema}.locks SET expires_at = clock_timestamp() WHERE job = 'brief'")
    [job] = pglock_json(env, "status")["jobs"]
    assert (job["state"], job["holder"]) == ("idle", None)


@pytest.mark.parametrize(("damage", "words"), [
    ("UPDATE {schema}.meta SET value = '99' WHERE key = 'version'", "newer than this pglock"),
    ("DELETE FROM {schema}.meta", "has no version record"),
    # (CASCADE: the functions that take its rows, takeable() among them, go with it.)
    ("DROP TABLE {schema}.locks CASCADE", "does not exist"),
])
def test_check_and_metrics_refuse_a_schema_that_run_refuses(env: Env, damage: str,
                                                             words: str) -> None:
    assert env.run("run", "--job", "one", "--", "true").returncode == 0
    env.query(damage)
    checked = env.run("check")
    assert checked.returncode == 3
    assert checked.stdout.startswith("PGLOCK UNKNOWN - ") and words in checked.stdout
    assert words in one_line(checked.stderr)
    answered = json.loads(env.run("check", "--json").stdout)
    assert (answered["status"], answered["exit_code"]) == ("UNKNOWN", 3)
    exposed = env.run("metrics")
    assert (exposed.returncode, exposed.stdout) == (125, "")
    assert words in one_line(exposed.stderr)
    assert env.run("status").returncode == 125


def test_a_closed_stdout_ends_quietly_and_a_full_one_says_so(env: Env) -> None:
    assert env.run("run", "--job", "one", "--", "true").returncode == 0
    for args in (["status"], ["history"], ["metrics"], ["status", "--json"]):
        read, write = os.pipe()
        os.close(read)
        with env.popen(*args, stdout=write) as process:
            os.close(write)
            _, stderr = process.communicate(timeout=60)
        assert (process.returncode, stderr) == (141, ""), args
        with open("/dev/full", "w") as full:
            result = subprocess.run([PGLOCK, *args], stdout=full, stderr=subprocess.PIPE,
                                    env=env.env, text=True, timeout=60)
        assert result.returncode == 125, args
        assert one_line(result.stderr) == ("pglock: cannot write to standard output: "
                                           "No space left on device")
    with open("/dev/full", "w") as full:
        result = subprocess.run([PGLOCK, "check"], stdout=full, stderr=subprocess.PIPE,
                                env=env.env, text=True, timeout=60)
    assert result.returncode == 3


def test_a_narrow_terminal_never_cuts_the_job_name(env: Env) -> None:
    name = "nightly-invoice-reconciliation-for-emea"
    assert env.run("run", "--job", name, "--", "false").returncode == 1
    for columns in ("80", "45"):
        code, drawn = on_terminal(env, "status", extra_env={"COLUMNS": columns,
                                                            "NO_COLOR": "1"})
        assert code == 0 and name in drawn and "failed" in drawn, drawn
        assert "too narrow for" in drawn
