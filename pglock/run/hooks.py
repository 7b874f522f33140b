"""Hooks: `--on-failure`, `--on-success`, `--on-recovery` commands run after a slot ends,
with the run's outcome in their environment and its output tail on their stdin."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from pglock.run.told import Told

# How much of a failed hook's output is kept for -v and the history note.
HOOK_OUTPUT = 500


def run_hook(name: str, command: str, env: dict[str, str], stdin: bytes,
             timeout: float) -> tuple[Told, int | None]:
    """`sh -c command` in a session of its own, killed (its whole group) at the timeout;
    its output is kept (the end of it) only to say why it failed."""
    what = f"{name} hook"
    try:
        process = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    except OSError as error:
        return Told(what, False, f"could not start: {error.strerror or error}"), None
    try:
        output, _ = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        try:
            process.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            # Something that left the group still holds its output pipe.
            process.wait()
        return Told(what, False, f"killed after --hook-timeout {timeout:g}s"), None
    if process.returncode == 0:
        return Told(what, True, "exited 0"), 0
    said = output[-HOOK_OUTPUT:].decode(errors="replace").strip().replace("\n", " | ")
    code = process.returncode
    detail = f"killed by signal {-code}" if code < 0 else f"exited {code}"
    return Told(what, False, detail + (f": {said}" if said else "")), code
