"""Processes a command leaves running (a daemon, a double fork) are part of the job."""

from __future__ import annotations

from pathlib import Path

from conftest import Env


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet collected, does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _daemonizing(tmp: Path, body: str) -> list[str]:
    """A command that starts `body` in a session of its own (setsid, as a daemon does),
    notes the daemon's pid, marks its own end and exits at once."""
    return ["sh", "-c",
            f"setsid sh -c 'echo $$ > {tmp}/daemon.pid; {body}' >/dev/null 2>&1 < /dev/null & "
            f"while [ ! -s {tmp}/daemon.pid ]; do sleep 0.01; done; touch {tmp}/leader-done"]


def test_the_lock_is_held_until_a_daemon_the_command_started_exits(env: Env) -> None:
    tmp = env.tmp
    holder = env.popen("run", "--job", "daemon", "--", *_daemonizing(
        tmp, f"while [ ! -e {tmp}/go ]; do sleep 0.05; done; touch {tmp}/daemon-done"))
    try:
        env.wait_for(lambda: (tmp / "leader-done").exists(), what="the command's exit")
        daemon = int((tmp / "daemon.pid").read_text())
        # The command has exited; its daemon runs on, so the job is not done.
        other = env.run("run", "--job", "daemon", "--", "touch", str(tmp / "second-ran"))
        assert other.returncode == 75, other
        assert not (tmp / "second-ran").exists()
        assert holder.poll() is None
        assert [r["outcome"] for r in env.runs("daemon")] == ["running"]
        (tmp / "go").touch()
        stdout, stderr = holder.communicate(timeout=30)
        assert (holder.returncode, stdout, stderr) == (0, "", "")
        # pglock ended only once the daemon had done its work and exited.
        assert (tmp / "daemon-done").exists()
        assert not _alive(daemon)
    finally:
        (tmp / "go").touch()
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    assert [r["outcome"] for r in env.runs("daemon")] == ["succeeded"]
    assert env.run("run", "--job", "daemon", "--rerun", "--", "true").returncode == 0


def test_max_runtime_stops_the_daemon_too(env: Env) -> None:
    tmp = env.tmp
    result = env.run("run", "--job", "runaway", "--max-runtime", "2s", "--kill-after", "1s",
                     "--", *_daemonizing(tmp, "trap '' TERM; sleep 300"))
    assert result.returncode == 124, result
    daemon = int((tmp / "daemon.pid").read_text())
    # Killed (it ignored SIGTERM) and collected before pglock exited.
    assert not _alive(daemon)
    [row] = env.runs("runaway")
    assert row["outcome"] == "timed_out"


def test_a_double_fork_is_waited_for(env: Env) -> None:
    tmp = env.tmp
    # The grandchild's parent exits at once: it is reparented to pglock, not to init.
    result = env.run("run", "--job", "double", "--", "sh", "-c",
                     f"(sh -c 'sleep 1; touch {tmp}/grandchild-done' &) ; exit 3")
    assert result.returncode == 3, result
    assert (tmp / "grandchild-done").exists()


def test_leave_descendants_lets_the_daemon_run_on_unlocked(env: Env) -> None:
    tmp = env.tmp
    result = env.run("run", "--job", "leave", "--leave-descendants", "--",
                     *_daemonizing(tmp, f"while [ ! -e {tmp}/go ]; do sleep 0.05; done"))
    daemon = int((tmp / "daemon.pid").read_text())
    try:
        assert (result.returncode, result.stderr) == (0, "")
        assert _alive(daemon)
        [row] = env.runs("leave")
        assert row["outcome"] == "succeeded"
        # As documented: the environment variable does the same.
        again = env.run("run", "--job", "leave", "--rerun", "--", "true",
                        env={"PGLOCK_LEAVE_DESCENDANTS": "1"})
        assert again.returncode == 0
    finally:
        (tmp / "go").touch()


def test_losing_the_lock_stops_the_daemon(env: Env) -> None:
    tmp = env.tmp
    holder = env.popen("run", "--job", "lost", "--ttl", "6s", "--kill-after", "1s", "--",
                       *_daemonizing(tmp, "trap '' TERM; sleep 300"))
    try:
        env.wait_for(lambda: (tmp / "leader-done").exists(), what="the command's exit")
        daemon = int((tmp / "daemon.pid").read_text())
        cleared = env.run("clear", "--job", "lost", "--yes", "--now")
        assert cleared.returncode == 0, cleared
        _, stderr = holder.communicate(timeout=60)
        assert holder.returncode == 125
        assert "lock lost" in stderr
        assert not _alive(daemon)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()


def test_a_stop_signal_reaches_the_daemon_and_sigkill_follows(env: Env) -> None:
    tmp = env.tmp
    holder = env.popen("run", "--job", "stop", "--kill-after", "1s", "--",
                       *_daemonizing(tmp, "trap '' TERM; sleep 300"))
    try:
        env.wait_for(lambda: (tmp / "leader-done").exists(), what="the command's exit")
        daemon = int((tmp / "daemon.pid").read_text())
        holder.terminate()
        holder.communicate(timeout=30)
        assert not _alive(daemon)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    [row] = env.runs("stop")
    assert row["outcome"] == "killed"
