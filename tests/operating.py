"""Helpers for the operator-command tests: holders that stop on cue, JSON, a terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from conftest import PGLOCK, Env

# Any escape sequence at all: piped output must carry none.
ANSI = re.compile(r"\x1b\[")
# A colour (foreground 30-37/90-97, or 38;...), as rich writes it.
COLOUR = re.compile(r"\x1b\[(?:\d+;)*(?:3[0-8]|9[0-7])[;m]")


@contextmanager
def holding(env: Env, job: str, *args: str,
            command: Sequence[str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A real `pglock run` holding the job until the block ends.

    By default its command exits 0 when the block ends. With `command`, that command runs
    instead and is stopped with SIGTERM (which pglock forwards) when the block ends; the
    holder is then waited for until its run is recorded as started, so a contender that
    starts slowly on a loaded machine still finds the lock held.
    """
    started, stop = env.tmp / f"{job}.started", env.tmp / f"{job}.stop"
    own = command is None
    argv = (["sh", "-c", f"touch {started}; while [ ! -e {stop} ]; do sleep 0.05; done"]
            if command is None else list(command))
    process = env.popen("run", "--job", job, *args, "--", *argv)
    try:
        if own:
            env.wait_for(lambda: started.exists() or process.poll() is not None,
                         what=f"the command of {job!r}")
        else:
            env.wait_for(lambda: process.poll() is not None or _running(env, job),
                         timeout=60, what=f"the run of {job!r} to start")
        assert process.poll() is None, process.communicate()
        yield process
    finally:
        stop.touch()
        if not own and process.poll() is None:
            process.terminate()
        if not own or process.poll() is None:
            process.communicate(timeout=30)


def _running(env: Env, job: str) -> bool:
    rows = env.query("SELECT count(*) FROM {schema}.runs WHERE job = %s AND outcome = 'running'",
                     (job,)) if _has_runs(env) else [(0,)]
    return bool(rows[0][0] == 1)


def _has_runs(env: Env) -> bool:
    return bool(env.query("SELECT to_regclass(%s) IS NOT NULL",
                          (f'"{env.schema}".runs',))[0][0])


def pglock_json(env: Env, *args: str) -> Any:
    result = env.run(*args, "--json")
    assert (result.returncode, result.stderr) == (0, ""), result
    return json.loads(result.stdout)


def plain(env: Env, *args: str) -> str:
    """A command's piped output, which must be free of escape sequences."""
    result = env.run(*args)
    assert (result.returncode, result.stderr) == (0, ""), result
    assert not ANSI.search(result.stdout), result.stdout
    return result.stdout


def row_of(screen: str, first: str) -> list[str]:
    """The cells of the plain-text row starting with `first` (cells are 2+ spaces apart)."""
    for line in screen.splitlines():
        if line.startswith(first + " "):
            return re.split(r"\s{2,}", line.strip())
    raise AssertionError(f"no row {first!r} in:\n{screen}")


def on_terminal(env: Env, *args: str, answer: str | None = None, until: str | None = None,
                extra_env: dict[str, str] | None = None, timeout: float = 20,
                columns: int = 200) -> tuple[int, str]:
    """Run pglock on a pseudo-terminal `columns` wide; (exit status, everything it drew).

    With `answer`, type it once a question shows; with `until`, press Ctrl-C once that
    text has been drawn twice (a redraw happened).
    """
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    # The terminal's own size and colours, not the ones of the shell that runs the tests.
    environment = {key: value for key, value in env.env.items()
                   if key not in ("COLUMNS", "LINES", "NO_COLOR")}
    process = subprocess.Popen([PGLOCK, *args], stdin=secondary, stdout=secondary,
                               stderr=secondary, env={**environment, **(extra_env or {})},
                               start_new_session=True)
    os.close(secondary)
    drawn, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                drawn += chunk
            text = drawn.decode(errors="replace")
            if answer is not None and "?" in text:
                os.write(primary, answer.encode() + b"\r")
                answer = None
            if until is not None and text.count(until) >= 2:
                process.send_signal(signal.SIGINT)
                until = None
        return process.wait(timeout=10), drawn.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)
