"""A command run by hand has the terminal as a shell's job has it (docs/lease.md, "The
command's process tree"; sweep D2): it reads the line typed, Ctrl-C ends it at once
with the run recorded and the lock released, Ctrl-Z stops it with pglock and `fg` gives
the terminal back to it, and the terminal is pglock's job's again after.

Each test types into an interactive bash on a pseudo-terminal of its own, as a person
does; a subshell `( ... )` is the job, so that what the job does after pglock (a `read`)
needs the terminal back from the command."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import time
from pathlib import Path

import pytest
from conftest import PGLOCK, Env

from run.test_tree import _below, _state

# Interactive shells, stops, and a lock released or not: real processes and the clock.
pytestmark = pytest.mark.slow


class Shell:
    """An interactive bash on a pseudo-terminal of its own."""

    def __init__(self, env: Env) -> None:
        self.shown = bytearray()
        self.pid, self.master = pty.fork()
        if self.pid == 0:  # pragma: no cover (the child execs)
            try:
                os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"],
                          {**env.env, "PS1": "$ ", "TERM": "dumb"})
            finally:
                os._exit(127)
        self.env = env
        self.wait_for(lambda: b"$ " in self.shown, "the prompt")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

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

    def wait_for(self, predicate: object, what: str, timeout: float = 30) -> None:
        def ready() -> bool:
            self.drain()
            return bool(predicate())  # type: ignore[operator]
        try:
            self.env.wait_for(ready, timeout=timeout, what=what)
        except AssertionError as error:
            raise AssertionError(f"{error}; the terminal shows {bytes(self.shown)!r}") from None

    def text(self, path: Path, what: str, timeout: float = 30) -> str:
        """A file's text once the job wrote it (its line complete)."""
        self.wait_for(lambda: path.exists() and path.read_text().endswith("\n"), what,
                      timeout)
        return path.read_text().strip()

    def close(self) -> None:
        left = _below(self.pid)
        for pid in [self.pid, *left]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        os.close(self.master)


def _reading(env: Env, pidfile: Path) -> int:
    """The command's pid once it waits in its read (state S: not stopped, T)."""
    env.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the command")
    pid = int(pidfile.read_text())
    env.wait_for(lambda: _state(pid) == "S", what="the command to wait for its line")
    # Still waiting a moment later: not on its way to a stop.
    time.sleep(0.3)
    assert _state(pid) == "S"
    return pid


def test_the_command_reads_the_line_typed_and_the_job_gets_the_terminal_back(
        env: Env) -> None:
    got, pidfile, after = env.tmp / "got", env.tmp / "pid", env.tmp / "after"
    shell = Shell(env)
    try:
        shell.type(f"({PGLOCK} run --job asks --ttl 6s -- sh -c 'echo $$ > {pidfile}; read x; "
                   f"echo \"got=$x\" > {got}'; read y; echo \"$?:$y\" > {after})\n")
        _reading(env, pidfile)
        shell.type("hello\n")
        assert shell.text(got, "the command's line") == "got=hello"
        # pglock's exit code, and the job's own read after it: the terminal is back.
        shell.type("world\n")
        assert shell.text(after, "the job's line after pglock") == "0:world"
    finally:
        shell.close()
    assert [r["outcome"] for r in env.runs("asks")] == ["succeeded"]


def test_ctrl_c_ends_a_reading_command_at_once_recorded_and_released(env: Env) -> None:
    pidfile, code, after = env.tmp / "pid", env.tmp / "code", env.tmp / "after"
    shell = Shell(env)
    try:
        # --kill-after 30s: a SIGINT that reached a stopped command only would take that.
        shell.type(f"({PGLOCK} run --job intr --ttl 6s --min-hold 0 --kill-after 30s -- "
                   f"sh -c 'echo $$ > {pidfile}; read x'; echo $? > {code}; read y; "
                   f"echo \"$y\" > {after})\n")
        _reading(env, pidfile)
        pressed = time.monotonic()
        shell.type("\x03")
        assert shell.text(code, "pglock to exit") == "130"
        took = time.monotonic() - pressed
        # Released: the lock's ttl has not passed, and another run takes it at once.
        assert env.run("run", "--job", "intr", "--", "true").returncode == 0
        shell.type("again\n")
        assert shell.text(after, "the job's line after pglock") == "again"
    finally:
        shell.close()
    assert took < 5, f"pglock exited {took:.1f}s after Ctrl-C"
    first, second = env.runs("intr")
    assert (first["outcome"], first["exit_code"], first["signal"]) == ("killed", 130, 2)
    assert second["outcome"] == "succeeded"


def test_ctrl_z_bg_and_fg_move_the_terminal_as_a_shell_does(env: Env) -> None:
    """Ctrl-Z stops the command and pglock; `bg` continues them, and the command's read in
    the background stops the job again (SIGTTIN); `fg` gives it the terminal."""
    got, pidfile, code = env.tmp / "got", env.tmp / "pid", env.tmp / "code"
    shell = Shell(env)
    try:
        shell.type(f"{PGLOCK} run --job paused --ttl 60s -- sh -c 'echo $$ > {pidfile}; "
                   f"read x; echo \"got=$x\" > {got}'\n")
        command = _reading(env, pidfile)
        shell.type("\x1a")
        shell.wait_for(lambda: b"Stopped" in shell.shown, "the shell to see its job stop")
        assert _state(command) == "T"
        assert _state(_pglock(shell)) == "T"
        shell.type("bg\n")
        # bash tells of a stop at its next prompt: one is asked for until it does.
        def stopped_for_input() -> bool:
            # (pglock stops itself with SIGSTOP, whatever stopped its command: "Stopped".)
            if shell.shown.count(b"Stopped") == 2:
                return True
            shell.type("\n")
            time.sleep(0.2)
            return False
        shell.wait_for(stopped_for_input, "the job to stop for its read in the background")
        shell.type("fg\n")
        shell.type("later\n")
        assert shell.text(got, "the command's line") == "got=later"
        shell.type(f"echo $? > {code}\n")
        assert shell.text(code, "pglock to exit") == "0"
    finally:
        shell.close()
    assert [r["outcome"] for r in env.runs("paused")] == ["succeeded"]


def _pglock(shell: Shell) -> int:
    return next(pid for pid in _below(shell.pid)
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:3] == [
                    PGLOCK.encode(), b"run"])


def test_a_stop_of_pglocks_group_from_outside_and_fg_stop_nothing_twice(env: Env) -> None:
    """pglock stops the command with itself (SIGSTOP) and continues it on `fg`: that stop,
    over by then, is not taken for a new one of the command's (which would stop the job
    again at every `fg`)."""
    got, pidfile = env.tmp / "got", env.tmp / "pid"
    shell = Shell(env)
    try:
        shell.type(f"{PGLOCK} run --job outside --ttl 60s -- sh -c 'echo $$ > {pidfile}; "
                   f"read x; echo \"got=$x\" > {got}'\n")
        command = _reading(env, pidfile)
        os.killpg(os.getpgid(_pglock(shell)), signal.SIGTSTP)
        shell.wait_for(lambda: b"Stopped" in shell.shown, "the shell to see its job stop")
        assert _state(command) == "T"
        shell.type("fg\n")
        env.wait_for(lambda: _state(command) == "S", what="the command to read again")
        time.sleep(1)
        assert _state(command) == "S" and shell.shown.count(b"Stopped") == 1, bytes(
            shell.shown)
        shell.type("line\n")
        assert shell.text(got, "the command's line") == "got=line"
        # Recorded before the shell (and its terminal) goes: pglock writes the end after
        # the command's.
        env.wait_for(lambda: [r["outcome"] for r in env.runs("outside")] == ["succeeded"],
                     what="the run's end")
    finally:
        shell.close()


def test_a_stop_signal_reaches_a_stopped_command_with_sigcont(env: Env) -> None:
    """A SIGINT forwarded to a command stopped on its own (`kill -STOP` of its pid) came
    without SIGCONT: it died only at --kill-after's SIGKILL (sweep D2)."""
    holder, command = env.start_holder("frozen", "--kill-after", "30s")
    env.wait_for(lambda: _state(command) == "S", what="the command to sleep")
    os.kill(command, signal.SIGSTOP)
    env.wait_for(lambda: _state(command) == "T", what="the command to stop")
    sent = time.monotonic()
    holder.send_signal(signal.SIGINT)
    holder.communicate(timeout=60)
    took = time.monotonic() - sent
    assert holder.returncode == 130 and took < 5, (holder.returncode, took)
    assert [(r["outcome"], r["signal"]) for r in env.runs("frozen")] == [("killed", 2)]
