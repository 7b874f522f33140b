"""`pglock status` over data made by real `pglock run` processes."""

from __future__ import annotations

import json
import signal

from conftest import Env
from operating import ANSI, COLOUR, holding, on_terminal, pglock_json, plain, row_of


def test_status_shows_the_holder_while_it_runs_then_its_last_run(env: Env) -> None:
    with holding(env, "busy", "--ttl", "5s", "--holder", "web-1") as holder:
        screen = plain(env, "status")
        assert f"schema {env.schema}" in screen.splitlines()[0]
        cells = row_of(screen, "busy")
        assert cells[:4] == ["busy", "running", f"web-1:{holder.pid}", "lease"]
        assert cells[4].endswith(("ms", "s"))  # running for
        [job] = pglock_json(env, "status")["jobs"]
        assert (job["job"], job["state"]) == ("busy", "running")
        held = job["holder"]
        assert (held["host"], held["pid"], held["mode"], held["fencing_token"]) == (
            "web-1", holder.pid, "lease", 1)
        assert 0 < held["expires_in"] <= 5 and held["running_for"] >= 0
        assert held["expires_at"].endswith("+00:00") or "T" in held["expires_at"]
        assert job["last_run"] is None and job["last_success_at"] is None
    assert holder.returncode == 0
    [job] = pglock_json(env, "status")["jobs"]
    assert (job["state"], job["holder"]) == ("idle", None)
    last = job["last_run"]
    assert (last["outcome"], last["exit_code"]) == ("succeeded", 0)
    assert last["duration"] > 0 and job["last_success_at"] == last["finished_at"]
    cells = row_of(plain(env, "status"), "busy")
    assert cells[1:3] == ["idle", "-"] and "succeeded" in cells and "0" in cells

    detail = plain(env, "status", "--job", "busy")
    assert "recent runs of busy:" in detail
    assert "succeeded" in detail.splitlines()[-1].split()
    assert [r["outcome"] for r in pglock_json(env, "status", "--job", "busy")["recent_runs"]] == [
        "succeeded"]


def test_failed_last_run_and_stale_lock_are_flagged(env: Env) -> None:
    assert env.run("run", "--job", "ok", "--", "true").returncode == 0
    assert env.run("run", "--job", "broken", "--", "sh", "-c", "exit 3").returncode == 3
    with holding(env, "vanished", "--ttl", "5s") as holder:
        holder.kill()  # its command dies with it (PDEATHSIG); its run stays marked running
        holder.communicate()
        # Its lease would run out within 5 s; the test does not wait for it.
        env.query("UPDATE {schema}.locks SET expires_at = clock_timestamp() - interval '1s' "
                  "WHERE job = 'vanished'")
    jobs = {job["job"]: job for job in pglock_json(env, "status")["jobs"]}
    assert {name: job["state"] for name, job in jobs.items()} == {
        "broken": "failed", "ok": "idle", "vanished": "stale"}
    assert (jobs["broken"]["last_run"]["outcome"], jobs["broken"]["last_run"]["exit_code"]) == (
        "failed", 3)
    stale = jobs["vanished"]["holder"]
    assert stale["pid"] == holder.pid and stale["expires_in"] < 0

    screen = plain(env, "status")
    body = [line.split()[0] for line in screen.splitlines()[3:6]]
    assert body == ["vanished", "broken", "ok"], screen  # worst first
    assert row_of(screen, "vanished")[1] == "stale"
    assert any(cell.startswith("expired ") for cell in row_of(screen, "vanished"))
    assert row_of(screen, "broken")[1] == "failed"
    assert "3 jobs: 1 stale, 1 failed, 1 idle" in screen
    # Status only reads: the vanished run is still marked running.
    assert [r["outcome"] for r in env.runs("vanished")] == ["running"]


def test_status_on_a_terminal_has_colour_unless_no_color_and_watch_redraws(env: Env) -> None:
    assert env.run("run", "--job", "broken", "--", "false").returncode == 1
    code, drawn = on_terminal(env, "status")
    assert code == 0 and "broken" in drawn and COLOUR.search(drawn)
    code, drawn = on_terminal(env, "status", extra_env={"NO_COLOR": "1"})
    assert code == 0 and "x failed" in drawn and not COLOUR.search(drawn)
    code, drawn = on_terminal(env, "status", "--watch", "--interval", "0.2s", until="broken")
    assert code == 0 and drawn.count("broken") >= 2
    # Off a terminal --watch repeats plain screens, without escapes, until Ctrl-C.
    process = env.popen("status", "--watch", "--interval", "0.2s")
    assert process.stdout is not None
    seen = ""
    while seen.count("pglock status:") < 2:
        seen += process.stdout.readline()
    process.send_signal(signal.SIGINT)
    rest, stderr = process.communicate(timeout=10)
    assert (process.returncode, stderr) == (0, "")
    assert not ANSI.search(seen + rest)


def test_status_of_an_empty_schema(env: Env) -> None:
    assert "no job has run here yet" in plain(env, "status")
    assert json.loads(env.run("status", "--json").stdout)["jobs"] == []
