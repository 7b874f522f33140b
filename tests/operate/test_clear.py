"""`pglock clear` against live holders: it stops them, holds others off, leaves an audit row."""

from __future__ import annotations

import getpass
import socket
import subprocess

import pytest
from conftest import PGLOCK, Env, one_line
from operating import holding, on_terminal, pglock_json


def lock_free(env: Env, job: str) -> bool:
    rows = env.query("SELECT expires_at <= clock_timestamp() FROM {schema}.locks WHERE job = %s",
                     (job,))
    return bool(rows[0][0])


@pytest.mark.slow  # waits out the lock-delay
def test_clear_stops_the_holder_and_holds_others_off_for_a_lock_delay(env: Env) -> None:
    # 10 s: the clear and the refused run are two pglock processes, which a loaded machine
    # (load 30) took more than a 5 s lock-delay to start.
    with holding(env, "stuck", "--ttl", "10s", "--holder", "web-1") as holder:
        refused = env.run("clear", "--job", "stuck", stdin=subprocess.DEVNULL)
        assert refused.returncode == 1 and refused.stdout == ""
        assert "--yes" in one_line(refused.stderr) and f"web-1:{holder.pid}" in refused.stderr
        assert env.query("SELECT cleared_at FROM {schema}.locks")[0][0] is None

        result = env.run("clear", "--job", "stuck", "--yes", "--reason", "hung on NFS")
        assert (result.returncode, result.stderr) == (0, "")
        assert "cleared job 'stuck'" in result.stdout and "free for others in" in result.stdout
        # The holder's lease is gone, but the lock is not free until it had time to stop.
        assert env.run("run", "--job", "stuck", "--", "true").returncode == 75
        assert pglock_json(env, "status")["jobs"][0]["state"] == "cleared"
        _, stderr = holder.communicate(timeout=20)
    assert holder.returncode == 125
    assert "lock lost" in one_line(stderr)
    env.wait_for(lambda: lock_free(env, "stuck"), timeout=20, what="the lock-delay to pass")
    assert env.run("run", "--job", "stuck", "--", "true").returncode == 0

    lost, audit, after = env.runs("stuck")
    assert lost["outcome"] == "lock_lost" and after["outcome"] == "succeeded"
    assert after["fencing_token"] == lost["fencing_token"] + 1
    clearer = f"{getpass.getuser()}@{socket.gethostname()}"
    assert (audit["outcome"], audit["cleared_by"], audit["reason"]) == (
        "cleared", clearer, "hung on NFS")
    assert (audit["holder"], audit["holder_pid"], audit["fencing_token"]) == (
        "web-1", holder.pid, lost["fencing_token"])
    assert audit["error"] == (f"hung on NFS; cleared web-1:{holder.pid} token 1 by {clearer}")
    counts = env.query("SELECT outcome_counts FROM {schema}.jobs WHERE job = 'stuck'")[0][0]
    assert counts["cleared"] == 1


@pytest.mark.slow  # waits for the holder to notice its lost lock
def test_clear_now_frees_the_lock_at_once(env: Env) -> None:
    with holding(env, "urgent", "--ttl", "5s") as holder:
        result = env.run("clear", "--job", "urgent", "--yes", "--now", "--terminate")
        assert (result.returncode, result.stderr) == (0, "")
        assert "free for others now" in result.stdout
        assert "lease mode: there is no backend to terminate" in result.stdout
        assert env.run("run", "--job", "urgent", "--", "true").returncode == 0
        holder.communicate(timeout=20)
    assert holder.returncode == 125
    outcomes = sorted(run["outcome"] for run in env.runs("urgent"))
    assert outcomes == ["cleared", "lock_lost", "succeeded"]


def test_clear_when_nobody_holds_the_job(env: Env) -> None:
    # On a schema that exists: a missing one is an error (test_operator_semantics.py).
    assert env.run("init", "-q").returncode == 0
    never = env.run("clear", "--job", "ghost", "--yes")
    assert (never.returncode, never.stderr) == (0, "")
    assert "nobody holds job 'ghost'" in never.stdout
    assert env.run("run", "--job", "done", "--min-hold", "0", "--", "true").returncode == 0
    finished = env.run("clear", "--job", "done", stdin=subprocess.DEVNULL)
    assert (finished.returncode, finished.stderr) == (0, "")
    assert "nobody holds job 'done'" in finished.stdout
    assert [run["outcome"] for run in env.runs("done")] == ["succeeded"]


@pytest.mark.slow  # waits for the holder to notice its lost lock
def test_clear_asks_on_a_terminal(env: Env) -> None:
    with holding(env, "asked", "--ttl", "5s") as holder:
        code, drawn = on_terminal(env, "clear", "--job", "asked", answer="n")
        assert code == 1 and "is held by" in drawn and "nothing changed" in drawn
        code, drawn = on_terminal(env, "clear", "--job", "asked", answer="y")
        assert code == 0 and "cleared job 'asked'" in drawn
        holder.communicate(timeout=20)
    assert holder.returncode == 125


@pytest.mark.parametrize("args", [["clear", "--job", "shut"],
                                  ["prune", "--older-than", "3650d"]], ids=" ".join)
def test_a_closed_stdin_is_no_terminal(env: Env, args: list[str]) -> None:
    """`<&-` leaves Python no sys.stdin at all: refused as off a terminal (sweep D6)."""
    holder, _ = env.start_holder("shut", "--ttl", "6s")
    try:
        closed = subprocess.run(["sh", "-c", '"$@" <&-', "sh", PGLOCK, *args], env=env.env,
                                capture_output=True, text=True, timeout=60, check=False)
    finally:
        holder.terminate()
        holder.communicate(timeout=60)
    assert (closed.returncode, closed.stdout) == (1, ""), closed
    assert "refusing to" in one_line(closed.stderr) and "without --yes" in closed.stderr
