"""The command's whole process tree lives and stops with the lock (docs/lease.md, "The
command's process tree"): a SIGKILLed pglock takes every process its command started
along (issue 33), and a stop of pglock's process group (a terminal's Ctrl-Z) never leaves
the command running past the lock's local deadline (issue 37).

The evidence is in marks: each process of the old tree writes its kind and the time
(`date +%s%N`, one machine-wide clock) every 0.2 s, and each test shows that none wrote
after the moment it must have stopped by."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PGLOCK, Env

from pglock.lock import advisory

# Killed and stopped processes waiting out leases: all in the slow layer.
pytestmark = pytest.mark.slow

TTL = 5.0

# A command that leaves its whole zoo behind: a background subshell that ignores SIGTERM,
# a `setsid` daemon, a double-forked `setsid` daemon, and its own process ignoring SIGTERM.
# Each marks "<kind> <ns>" into $1 every 0.2 s; the marks file's name is in each one's
# command line, so that what is left of the tree can be found in /proc.
TREE = r"""
marks=$1
mark() { while :; do echo "$1 $(date +%s%N)" >> "$marks"; sleep 0.2; done; }
( trap '' TERM; mark sub ) &
setsid sh -c 'trap "" TERM; while :; do echo "daemon $(date +%s%N)" >> "$0"; sleep 0.2; done' \
    "$marks" </dev/null >/dev/null 2>&1 &
( setsid sh -c 'trap "" TERM; while :; do echo "double $(date +%s%N)" >> "$0"; sleep 0.2; done' \
    "$marks" </dev/null >/dev/null 2>&1 & )
trap '' TERM
mark leader
"""
KINDS = {"leader", "sub", "daemon", "double"}

# The contender's command: marks its start, lasts long enough for a surviving old tree to
# mark meanwhile (five of its periods), marks its end.
CONTENDER = 'echo "new $(date +%s%N)" >> "$0"; sleep 1; echo "new $(date +%s%N)" >> "$0"'


def _marks(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        kind, _, stamp = line.partition(" ")
        # A line cut by a SIGKILL mid-write is no mark.
        if stamp.isdigit():
            found.append((kind, int(stamp)))
    return found


def _kinds(path: Path) -> set[str]:
    return {kind for kind, _ in _marks(path)}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _left(token: str) -> list[int]:
    """Live processes (zombies are dead) whose command line names `token`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline and _state(int(entry)) not in ("Z", "X"):
            found.append(int(entry))
    return found


def _cleanup(token: str) -> None:
    """Leave no process behind for a later test to find, whatever the code under test did."""
    for pid in _left(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _tree(env: Env) -> tuple[Path, list[str]]:
    script = env.tmp / "tree.sh"
    script.write_text(TREE)
    old = env.tmp / "old-marks"
    return old, ["sh", str(script), str(old)]


# SIGKILL to pglock's pid (an operator's kill -9, the OOM killer), or to its whole process
# group (`kill -KILL -- -PGID`: the watchdog is in a group of its own).
@pytest.mark.parametrize(("mode", "target"),
                         [("lease", "pid"), ("advisory", "pid"), ("lease", "group")])
def test_a_sigkilled_pglock_takes_its_commands_whole_tree_along(env: Env, mode: str,
                                                                 target: str) -> None:
    old, command = _tree(env)
    new = env.tmp / "new-marks"
    job = f"orph-{mode}"
    # Its output is nobody's: the old tree keeps pipes open as long as it lives. A session
    # of its own, so that its group is not the test's.
    holder = env.popen("run", "--job", job, "--mode", mode, "--ttl", f"{TTL:g}s", "--",
                       *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       start_new_session=True)
    try:
        env.wait_for(lambda: _kinds(old) >= KINDS, what="every process of the tree to mark")
        if target == "group":
            os.killpg(holder.pid, signal.SIGKILL)
        else:
            holder.kill()
        killed_at = time.time_ns()
        holder.wait(timeout=30)
        # A contender after the ttl (lease mode: it waits for the lease to run out).
        time.sleep(TTL if mode == "advisory" else 0)
        contender = env.run("run", "--job", job, "--mode", mode, "--ttl", f"{TTL:g}s",
                            "--wait", "30s", "--", "sh", "-c", CONTENDER, str(new))
        assert contender.returncode == 0, contender
        left = _left(str(old))
    finally:
        _cleanup(str(old))
    first_new = min(stamp for _, stamp in _marks(new))
    last_old = max(stamp for kind, stamp in _marks(old))
    assert not left, f"processes of the old tree still run: {left}"
    assert last_old < first_new, (
        f"the old tree marked {(last_old - first_new) / 1e9:.2f}s after the contender started")
    # Stopped at once, not merely by the ttl: pglock's death is when it happens.
    assert last_old < killed_at + TTL * 1e9


def test_a_sigkilled_advisory_holder_whose_command_ignores_sigterm(env: Env) -> None:
    """A contender waits while the holder runs; the holder's pglock is SIGKILLed (its
    session lock freed the moment the kernel closes its socket). Its command's tree is
    dead within the bound the holder's local deadline sets: the last check it confirmed
    came before the kill, and the lock was certainly its own until that check plus the
    horizon, no later; and the contender's command starts only after it (no overlap)."""
    old, command = _tree(env)
    new = env.tmp / "new-marks"
    holder = env.popen("run", "--job", "adv", "--mode", "advisory", "--ttl", f"{TTL:g}s",
                       "--", *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    contender = None
    try:
        env.wait_for(lambda: _kinds(old) >= KINDS, what="every process of the tree to mark")
        contender = env.popen("run", "--job", "adv", "--mode", "advisory", "--ttl",
                              f"{TTL:g}s", "--wait", "60s", "--", "sh", "-c", CONTENDER,
                              str(new))
        # The contender waits on the session lock (its run is not recorded before it).
        time.sleep(1)
        assert contender.poll() is None, contender.communicate()
        holder.kill()
        killed_at = time.time_ns()
        holder.wait(timeout=30)
        bound = killed_at + advisory.horizon(TTL) * 1e9
        _, stderr = contender.communicate(timeout=60)
        assert contender.returncode == 0, stderr
        # Past the bound (and a surviving tree's few marks more), what is left of the tree?
        time.sleep(max(0.0, (bound - time.time_ns()) / 1e9) + 1)
        left = _left(str(old))
    finally:
        _cleanup(str(old))
        if contender is not None and contender.poll() is None:
            contender.kill()
            contender.communicate()
    assert not left, f"processes of the old tree still run: {left}"
    last_old = max(stamp for _, stamp in _marks(old))
    assert last_old < bound, (
        f"the old tree marked {(last_old - killed_at) / 1e9:.2f}s after the kill")
    assert _marks(new), "the contender's command never ran"
    # The lock-delay (docs/advisory.md): the contender takes the row over only once the
    # old holder's recorded horizon has passed, by when its whole tree is gone.
    first_new = min(stamp for _, stamp in _marks(new))
    assert last_old < first_new, (
        f"the old tree marked {(last_old - first_new) / 1e9:.2f}s after the contender started")


# ---------------------------------------------------------------- stops of pglock's group

# The holder's command: marks every 0.2 s, and on SIGTERM marks that too and exits.
HELD = r"""
marks=$1
trap 'echo "term $(date +%s%N)" >> "$marks"; exit 1' TERM
while :; do echo "held $(date +%s%N)" >> "$marks"; sleep 0.2; done
"""


# A terminal's job: pglock run by a job-control shell (bash -m) on a pseudo-terminal of its
# own, as a person types it; its exit code is left in a file, since the shell reaps it.
JOB = 'sh -c \'"$@"; echo $? > "$0"\' "$0" "$@"; sleep 600'


class Terminal:
    """A pseudo-terminal whose shell runs pglock as its foreground job."""

    def __init__(self, env: Env, *args: str) -> None:
        self.code_file = env.tmp / "exit-code"
        self.shown = bytearray()
        self.shell, self.master = pty.fork()
        if self.shell == 0:  # pragma: no cover (the child execs)
            try:
                os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-m", "-c", JOB,
                                        str(self.code_file), PGLOCK, *args], env.env)
            finally:
                os._exit(127)
        env.wait_for(lambda: self._pglock() is not None, what="pglock to start")
        pid = self._pglock()
        assert pid is not None
        self.pid = pid
        # The job's process group, as the shell made it (the wrapper and pglock).
        self.job = os.getpgid(pid)

    def _pglock(self) -> int | None:
        self.drain()
        for pid in _below(self.shell):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:3] == [
                        PGLOCK.encode(), b"run"]:
                    return pid
        return None

    def drain(self) -> None:
        """Read what the terminal shows, so that no write to it ever blocks."""
        while select.select([self.master], [], [], 0)[0]:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            if not data:
                return
            self.shown += data

    def fg(self) -> None:
        """What the shell's `fg` does: the job continued (it stays in the background here,
        which changes nothing for pglock)."""
        os.killpg(self.job, signal.SIGCONT)

    def exit_code(self, env: Env) -> int:
        env.wait_for(lambda: (self.drain(), self.code_file.exists()
                              and self.code_file.read_text().strip())[1],
                     timeout=60, what="pglock to exit")
        self.drain()
        return int(self.code_file.read_text())

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.job, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.shell, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.shell, 0)
        os.close(self.master)


def _below(root: int) -> list[int]:
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, ValueError):
                    kids = [int(c) for c in
                            Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
                    found += kids
                    pending += kids
    return found


def _stopped(pid: int) -> bool:
    return _state(pid) == "T"


# How the stop comes: the terminal's own ^Z (the line discipline sends SIGTSTP to the
# foreground group), or a signal to pglock's process group from outside.
STOPS = ["ctrl-z", "SIGTSTP", "SIGSTOP", "SIGTTIN"]


@pytest.mark.parametrize("stop", STOPS)
def test_a_stop_of_pglocks_group_never_leaves_the_command_running_unlocked(
        env: Env, stop: str) -> None:
    script = env.tmp / "held.sh"
    script.write_text(HELD)
    old = env.tmp / "old-marks"
    new = env.tmp / "new-marks"
    terminal = Terminal(env, "run", "--job", "tstp", "--ttl", "6s", "--kill-after", "1s",
                        "--", "sh", str(script), str(old))
    try:
        env.wait_for(lambda: len(_marks(old)) >= 2, what="the command to mark")
        if stop == "ctrl-z":
            os.write(terminal.master, b"\x1a")
        else:
            os.killpg(terminal.job, getattr(signal, stop))
        env.wait_for(lambda: _stopped(terminal.pid), what="pglock to stop")
        # Another host, once the lease has run out, runs the job.
        contender = env.run("run", "--job", "tstp", "--ttl", "6s", "--wait", "30s", "--",
                            "sh", "-c", CONTENDER, str(new))
        assert contender.returncode == 0, contender
        # fg: pglock goes on, finds its lock lost, says so.
        terminal.fg()
        code = terminal.exit_code(env)
        left = _left(str(old))
    finally:
        _cleanup(str(old))
        terminal.close()
    assert not left, f"processes of the command still run: {left}"
    first_new = min(stamp for _, stamp in _marks(new))
    last_old = max(stamp for _, stamp in _marks(old))
    assert last_old < first_new, (
        f"the stopped holder's command marked {(last_old - first_new) / 1e9:.2f}s after "
        "the contender started")
    assert code == 125, bytes(terminal.shown)
    assert b"lock lost" in terminal.shown, bytes(terminal.shown)
    first, second = env.runs("tstp")
    assert (first["outcome"], second["outcome"]) == ("lock_lost", "succeeded")


def test_ctrl_z_stops_the_command_with_pglock_and_fg_resumes_both(env: Env) -> None:
    """As a shell's job: the command is stopped with pglock, and continued with it while
    the lock is still its own; the run then ends as it would have."""
    release = env.tmp / "release"
    pidfile = env.tmp / "command.pid"
    terminal = Terminal(
        env, "run", "--job", "pause", "--ttl", "60s", "--", "sh", "-c",
        f'echo $$ > {pidfile}; while [ ! -e {release} ]; do sleep 0.05; done')
    try:
        env.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(),
                     what="the command")
        command = int(pidfile.read_text())
        os.write(terminal.master, b"\x1a")
        env.wait_for(lambda: _stopped(terminal.pid) and _stopped(command),
                     what="pglock and its command to stop")
        terminal.fg()
        env.wait_for(lambda: not _stopped(command), what="the command to go on")
        release.touch()
        code = terminal.exit_code(env)
    finally:
        release.touch()
        terminal.close()
    assert code == 0, bytes(terminal.shown)
    assert [r["outcome"] for r in env.runs("pause")] == ["succeeded"]


def _watchdog_of(pglock: int) -> int:
    """pglock's one child: its watchdog (the command is the watchdog's)."""
    [watchdog] = [pid for pid in _below(pglock)
                  if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
                  == str(pglock)]
    return watchdog


def test_a_watchdog_killed_alone_leaves_nothing_of_the_tree_running(env: Env) -> None:
    """`kill -9` of the watchdog's pid: the command's own process dies with it; its
    subshell and daemons, reparented to pglock, ran on with the lock held and renewed,
    a daemon for good (issue 46, D8). They are stopped as a lost lock's are, and the run
    is recorded killed, saying why."""
    old, command = _tree(env)
    holder = env.popen("run", "--job", "wdkill", "--ttl", f"{TTL:g}s", "--kill-after", "1s",
                       "--", *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       start_new_session=True)
    try:
        env.wait_for(lambda: _kinds(old) >= KINDS, what="every process of the tree to mark")
        os.kill(_watchdog_of(holder.pid), signal.SIGKILL)
        code = holder.wait(timeout=20)
        ended_at = time.time_ns()
        time.sleep(0.5)  # more than two periods of the marks
        left = _left(str(old))
    finally:
        _cleanup(str(old))
        with contextlib.suppress(ProcessLookupError):
            holder.kill()
    assert not left, f"processes of the command still run: {left}"
    assert max(stamp for _, stamp in _marks(old)) < ended_at
    assert code == 137
    [run] = env.runs("wdkill")
    assert (run["outcome"], run["exit_code"], run["error"]) == (
        "killed", 137, "its watchdog was killed: the command died with it, and what it left "
                       "running was stopped")


def test_a_watchdog_stopped_alone_holds_nothing_up(env: Env) -> None:
    """`kill -STOP` of the watchdog's pid: it no longer reaped the command or told its
    exit, so after an operator's `pglock stop` pglock waited (renewing the lock) for as long
    as the watchdog stayed stopped, and its thaw was recorded as a lock loss (issue 46, D7).
    pglock continues its watchdog at each renewal."""
    holder, _ = env.start_holder("wdstop", "--ttl", "6s", seconds=60)
    watchdog = _watchdog_of(holder.pid)
    try:
        os.kill(watchdog, signal.SIGSTOP)
        env.wait_for(lambda: _stopped(watchdog), what="the watchdog to stop")
        stop = env.run("stop", "--job", "wdstop", "--reason", "maintenance")
        assert stop.returncode == 0, stop
        holder.communicate(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(watchdog, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            holder.kill()
    assert holder.returncode == 143
    [run] = env.runs("wdstop")
    assert run["outcome"] == "stopped"


# A watchdog stopped while pglock renews, continued past the deadline it had: the renewal
# pglock wrote meanwhile (here without the SIGCONT extend() now sends with it) is read
# before that deadline is acted on. The command exits while the watchdog is stopped, so
# its SIGCHLD cuts the watchdog's wait short at the thaw.
THAW = """
import os, signal, sys, time
from pglock.lock import clock
from pglock.run.watchdog import Command, Watchdog

watchdog = Watchdog(Command(["sleep", "1"], dict(os.environ)), True,
                    (float("inf"), clock.now() + 1.5, 0.5))
os.kill(watchdog.pid, signal.SIGSTOP)
while open(f"/proc/{watchdog.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
    time.sleep(0.01)
watchdog._send(b"D", clock.now() + 30)
time.sleep(2.5)
os.kill(watchdog.pid, signal.SIGCONT)
status = watchdog.exit_status(block=True)
print(os.waitstatus_to_exitcode(status), watchdog.stand_down())
"""


def test_a_watchdog_thawed_past_its_deadline_reads_the_renewals_first(tmp_path: Path) -> None:
    """Its thaw, with renewals queued, made it fire on the stale deadline: pglock then
    recorded a lock loss for a lock never lost (issue 46, D7)."""
    done = subprocess.run([sys.executable, "-c", THAW], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "0 False\n", "")
