"""Lease mode under faults: a lost lock, a killed wrapper, signals, runaway commands."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import Env, one_line

from pglock.db.embedded import EmbeddedServer

# Killed, stopped and signalled processes, lost locks, servers stopped mid-run:
# each waits on the wall clock, so all are in the slow layer.
pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes: it runs nothing. It may also be reaped between the
    # signal and the read (ESRCH on the read, or no file at all).
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def test_lock_taken_over_stops_the_command(env: Env) -> None:
    holder, command_pid = env.start_holder("stolen", "--ttl", "6s")
    # Another host takes the lock as if the lease had run out.
    env.query("UPDATE {schema}.locks SET expires_at = clock_timestamp() WHERE job = 'stolen'")
    thief = env.run("run", "--job", "stolen", "--", "true")
    assert thief.returncode == 0
    _, stderr = holder.communicate(timeout=20)
    assert holder.returncode == 125
    # The shell may report its job's death ("Terminated"): pglock's own is one line.
    own = [line for line in stderr.splitlines() if line.startswith("pglock")]
    assert len(own) == 1 and "lock lost" in own[0], stderr
    assert not _alive(command_pid)
    first, second = env.runs("stolen")
    assert first["outcome"] == "lock_lost" and first["signal"] == signal.SIGTERM
    assert second["outcome"] == "succeeded"
    assert second["fencing_token"] == first["fencing_token"] + 1


def test_on_lost_continue_lets_the_command_finish(env: Env) -> None:
    holder = env.popen("run", "--job", "lenient", "--ttl", "6s", "--on-lost", "continue", "--",
                       "sleep", "4")
    env.wait_for(lambda: env.runs("lenient"), what="the run row")
    env.query("UPDATE {schema}.locks SET fencing_token = fencing_token + 1 WHERE job = 'lenient'")
    _, stderr = holder.communicate(timeout=20)
    assert holder.returncode == 125
    assert "continue" in one_line(stderr)
    [run] = env.runs("lenient")
    assert (run["outcome"], run["exit_code"], run["signal"]) == ("lock_lost", 0, None)


def test_sigkilled_wrapper_takes_its_command_along(env: Env) -> None:
    holder, command_pid = env.start_holder("crash", "--ttl", "5s")
    holder.kill()
    holder.communicate()
    env.wait_for(lambda: not _alive(command_pid), timeout=2, what="the orphaned command to die")
    # The lease is still valid: nobody may run until it expires.
    assert env.run("run", "--job", "crash", "--", "true").returncode == 75
    env.wait_for(lambda: env.query(
        "SELECT expires_at < clock_timestamp() FROM {schema}.locks WHERE job = 'crash'")[0][0],
        timeout=10, what="the lease to expire")
    assert env.run("run", "--job", "crash", "--", "true").returncode == 0
    first, second = env.runs("crash")
    assert first["outcome"] == "abandoned" and first["finished_at"] is not None
    assert second["outcome"] == "succeeded"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_stop_signals_are_forwarded(env: Env, signum: int) -> None:
    holder, command_pid = env.start_holder("signalled")
    holder.send_signal(signum)
    stdout, stderr = holder.communicate(timeout=20)
    assert holder.returncode == 128 + signum
    assert (stdout, stderr) == ("", "")
    assert not _alive(command_pid)
    [run] = env.runs("signalled")
    assert (run["outcome"], run["exit_code"], run["signal"]) == ("killed", 128 + signum, signum)
    # The lock was released: a rerun does not wait for the ttl.
    assert env.run("run", "--job", "signalled", "--rerun", "--", "true").returncode == 0


def test_usr1_is_forwarded_and_the_command_goes_on(env: Env) -> None:
    got = env.tmp / "got-usr1"
    holder = env.popen("run", "--job", "usr1", "--", "sh", "-c",
                       f"trap 'echo usr1 > {got}' USR1; echo $$ > {env.tmp}/pid; "
                       "while [ ! -e " + str(got) + " ]; do sleep 0.1; done")
    env.wait_for(lambda: (env.tmp / "pid").exists(), what="the command")
    time.sleep(0.2)
    holder.send_signal(signal.SIGUSR1)
    holder.communicate(timeout=20)
    assert holder.returncode == 0
    assert got.read_text() == "usr1\n"
    assert env.runs("usr1")[0]["outcome"] == "succeeded"


def test_command_ignoring_sigterm_is_killed_after_grace(env: Env) -> None:
    holder = env.popen("run", "--job", "stubborn", "--kill-after", "1s", "--",
                       "sh", "-c", f"trap '' TERM; echo $$ > {env.tmp}/pid; sleep 60")
    env.wait_for(lambda: (env.tmp / "pid").exists(), what="the command")
    started = time.monotonic()
    holder.terminate()
    holder.communicate(timeout=20)
    assert holder.returncode == 128 + signal.SIGKILL
    assert time.monotonic() - started >= 1.0
    [run] = env.runs("stubborn")
    assert (run["outcome"], run["signal"]) == ("killed", signal.SIGKILL)


def test_max_runtime_stops_the_command(env: Env) -> None:
    result = env.run("run", "--job", "slow", "--max-runtime", "1s", "--", "sleep", "30")
    assert result.returncode == 124
    assert (result.stdout, result.stderr) == ("", "")
    [run] = env.runs("slow")
    assert (run["outcome"], run["signal"]) == ("timed_out", signal.SIGTERM)
    assert 1.0 <= run["duration"].total_seconds() < 10


def test_stopped_process_is_resumed_so_it_can_die(env: Env) -> None:
    holder, command_pid = env.start_holder("frozen", "--max-runtime", "2s")
    os.kill(command_pid, signal.SIGSTOP)
    holder.communicate(timeout=20)
    assert holder.returncode == 124
    assert not _alive(command_pid)


def test_unreachable_database_stops_the_command_before_the_lease_runs_out(
        env: Env, private_server: EmbeddedServer) -> None:
    env.dsn = env.env["PGLOCK_DSN"] = private_server.conninfo
    marks = env.tmp / "marks"
    holder = env.popen("run", "--job", "cut-off", "--ttl", "6s", "--connect-timeout", "20s",
                       "--", "sh", "-c", f"trap 'date +%s%N > {marks}; exit 1' TERM; "
                       "sleep 60 & wait")
    env.wait_for(lambda: env.runs("cut-off"), what="the run row")
    time.sleep(0.5)
    private_server.stop()
    stopped_at = time.time_ns()
    # The shell creates the file before `date` writes to it: wait for the line itself.
    env.wait_for(lambda: marks.exists() and marks.read_text().endswith("\n"), timeout=10,
                 what="SIGTERM to the command")
    killed_after = (int(marks.read_text()) - stopped_at) / 1e9
    # The last renewal was sent at most ttl/3 before the stop; the server's expiry is at
    # least a ttl after that send, so the command must have been told to stop sooner.
    assert killed_after < 6 - 1
    private_server.start()
    _, stderr = holder.communicate(timeout=30)
    assert holder.returncode == 125
    # The shell may report its job's death ("Terminated"): pglock's own is one line.
    own = [line for line in stderr.splitlines() if line.startswith("pglock")]
    assert len(own) == 1 and "lock lost" in own[0], stderr
    [run] = env.runs("cut-off")
    assert run["outcome"] == "lock_lost"


def test_end_written_after_the_database_comes_back(env: Env,
                                                   private_server: EmbeddedServer) -> None:
    env.dsn = env.env["PGLOCK_DSN"] = private_server.conninfo
    holder = env.popen("run", "--job", "late-record", "--ttl", "30s", "--connect-timeout", "20s",
                       "--", "sleep", "2")
    env.wait_for(lambda: env.runs("late-record"), what="the run row")
    private_server.stop()
    time.sleep(4)  # the command ends while the server is down; its end is retried
    private_server.start()
    stdout, stderr = holder.communicate(timeout=60)
    assert (holder.returncode, stdout, stderr) == (0, "", "")
    [run] = env.runs("late-record")
    assert (run["outcome"], run["exit_code"]) == ("succeeded", 0)


def test_end_never_written_is_said_and_the_exit_code_kept(env: Env,
                                                         private_server: EmbeddedServer) -> None:
    env.dsn = env.env["PGLOCK_DSN"] = private_server.conninfo
    holder = env.popen("run", "--job", "no-record", "--ttl", "5s", "--connect-timeout", "2s",
                       "--", "sh", "-c", "sleep 1; exit 3")
    env.wait_for(lambda: env.runs("no-record"), what="the run row")
    private_server.stop()
    _, stderr = holder.communicate(timeout=60)
    assert holder.returncode == 3
    assert "could not be recorded" in one_line(stderr)
    private_server.start()
    [run] = env.runs("no-record")
    assert run["outcome"] == "running"
    # The next acquirer, once the lease has run out, tells the story.
    env.wait_for(lambda: env.run("run", "--job", "no-record", "--", "true").returncode == 0,
                 timeout=30, what="a takeover")
    assert [r["outcome"] for r in env.runs("no-record")] == ["abandoned", "succeeded"]


def test_stopped_wrapper_cannot_outlive_its_lease(env: Env) -> None:
    """SIGSTOP to pglock alone: its watchdog stops the command before the lease runs out."""
    marks = env.tmp / "stopped"
    ready = env.tmp / "ready"
    holder = env.popen("run", "--job", "frozen-wrapper", "--ttl", "6s", "--",
                       "sh", "-c", f"trap 'date +%s%N > {marks}; exit 1' TERM; touch {ready}; "
                       "sleep 60 & wait")
    # Frozen only once the command has its trap (the watchdog forks it, so the watchdog
    # is there). The run row alone is written by the acquire, before either exists.
    env.wait_for(ready.exists, what="the command and the watchdog")
    os.kill(holder.pid, signal.SIGSTOP)
    frozen_at = time.time_ns()
    try:
        env.wait_for(marks.exists, timeout=10, what="the watchdog to stop the command")
        env.wait_for(lambda: marks.read_text().strip(), timeout=5, what="the mark")
        # The last renewal was sent before the freeze; the lease lasts 6 s from it.
        assert (int(marks.read_text()) - frozen_at) / 1e9 < 6
        # Once the lease has run out, another host runs; the frozen one is no threat.
        env.wait_for(lambda: env.run("run", "--job", "frozen-wrapper", "--", "true")
                     .returncode == 0, timeout=20, what="a takeover")
    except BaseException:
        # Leave no process behind for a later test to find (and warn about).
        holder.kill()
        holder.communicate(timeout=30)
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder.pid, signal.SIGCONT)
    _, stderr = holder.communicate(timeout=30)
    assert holder.returncode == 125
    # The shell may report its job's death ("Terminated"): pglock's own is one line.
    own = [line for line in stderr.splitlines() if line.startswith("pglock")]
    assert len(own) == 1 and "lock lost" in own[0], stderr
    first, second = env.runs("frozen-wrapper")
    assert (first["outcome"], second["outcome"]) == ("lock_lost", "succeeded")


@pytest.mark.slow
@pytest.mark.parametrize("pglock_thaws", [True, False])
def test_a_thawed_host_kills_its_command_at_once(env: Env, pglock_thaws: bool) -> None:
    """pglock and its command frozen (a paused VM) past the deadline and the grace after
    it: on the thaw the command that ignores SIGTERM is killed at once, not a grace later
    (issue 38; docs/ttl.md, "A frozen host"). By pglock, or by its watchdog alone when
    pglock stays stopped (it used to give the command its whole grace then)."""
    ticks = env.tmp / "ticks"
    # ttl 12s: SIGTERM 7.8 s after the last renewal (renewed every 4 s), SIGKILL a grace
    # of 3 s later; a 12 s freeze passes both whenever the last renewal was.
    holder = env.popen("run", "--job", "thawed", "--ttl", "12s", "--",
                       "sh", "-c", "trap '' TERM; "
                       f"while :; do date +%s%N >> {ticks}; sleep 0.05; done")
    def tree() -> list[int]:
        """pglock, its watchdog, and the command (the watchdog's child)."""
        found, level = [holder.pid], [holder.pid]
        while level:
            level = [int(child) for pid in level for child in
                     Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            found += level
        return found

    # Its first tick, not only its start: frozen before one, and killed at once on the
    # thaw, it would leave no tick to measure by.
    env.wait_for(lambda: ticks.exists() and ticks.read_text().strip() != "" and len(tree()) >= 3,
                 what="the watchdog and the command's first tick")
    # pglock shares the test's process group: it is stopped by its pid; the watchdog's
    # group and the command's own group as a whole (its sleep too).
    pids = tree()
    targets = [(os.kill, pid) if os.getpgid(pid) == os.getpgrp() else (os.killpg, os.getpgid(pid))
               for pid in pids]
    for send, target in targets:
        send(target, signal.SIGSTOP)
    try:
        time.sleep(12)
    finally:
        thawed_at = time.time_ns()
        for send, target in targets if pglock_thaws else targets[1:]:
            with contextlib.suppress(ProcessLookupError):
                send(target, signal.SIGCONT)
    if not pglock_thaws:
        try:
            time.sleep(4)
        finally:
            send, target = targets[0]
            send(target, signal.SIGCONT)
    _, stderr = holder.communicate(timeout=30)
    assert holder.returncode == 125, stderr
    last_tick = int(ticks.read_text().split()[-1])
    # The grace is 3 s; at once means well under it (the margin is for a loaded machine).
    assert (last_tick - thawed_at) / 1e9 < 1.5
