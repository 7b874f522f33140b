"""Hooks: `--on-failure`, `--on-success`, `--on-recovery` commands run after a slot ends,
with the run's outcome in their environment and its output tail on their stdin."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
from typing import Any

from pglock.lock import clock
from pglock.run.told import Told
from pglock.settings.text import escaped

# How much of a failed hook's output is kept for -v and the history note: only the end of
# it is ever kept in memory, however much the hook writes.
HOOK_OUTPUT = 500
# After the hook exits, how long its output is read on for what a child it left behind
# (holding the pipe) still writes: pglock does not wait for that child.
HOOK_DRAIN = 0.5
_CHUNK = 65536
# A hook that pglock's own end cuts short: how long its SIGTERM is given before SIGKILL.
HOOK_GRACE = 1.0


def run_hook(name: str, command: str, env: dict[str, str], stdin: bytes,
             timeout: float) -> tuple[Told, int | None]:
    """`sh -c command` in a session of its own, killed (its whole group) at the timeout;
    the end of its output is kept only to say why it failed."""
    what = f"{name} hook"
    process: _Hook | None = None
    try:
        process = _Hook(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                        start_new_session=True)
        output, timed_out = _exchange(process, stdin, clock.now() + timeout)
    except (OSError, ValueError) as error:
        if process is not None:
            _ended(process)
            raise
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        return Told(what, False, f"could not start: {reason}"), None
    except BaseException:
        # pglock is going (a SIGTERM, Ctrl-C): its hook, in a session of its own that no
        # signal to pglock's group reaches, goes with it.
        if process is not None:
            _ended(process)
        raise
    finally:
        if process is not None:
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
    if timed_out:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return Told(what, False, f"killed after --hook-timeout {timeout:g}s"), None
    code = process.wait()
    if code == 0:
        return Told(what, True, "exited 0"), 0
    # Its output is data in -v and the history note: no escape sequence, no line break.
    said = escaped(output.decode(errors="replace").strip().replace("\n", " | "))
    detail = f"killed by signal {-code}" if code < 0 else f"exited {code}"
    return Told(what, False, detail + (f": {said}" if said else "")), code


class _Hook(subprocess.Popen[bytes]):
    """The hook's process. A stop signal that lands while Popen is still setting it up
    (after the fork: the hook may already run) is raised out of __init__, and no caller
    ever gets the process to end: its whole group is killed here then."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            pid = getattr(self, "pid", None)
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            raise


def _ended(process: subprocess.Popen[bytes]) -> None:
    """The hook's whole group ended: SIGTERM, then SIGKILL after HOOK_GRACE."""
    for signum, grace in ((signal.SIGTERM, HOOK_GRACE), (signal.SIGKILL, HOOK_GRACE)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
            return


def _exchange(process: subprocess.Popen[bytes], stdin: bytes,
              deadline: float) -> tuple[bytes, bool]:
    """Feed `stdin` and read the output in one loop, keeping its last HOOK_OUTPUT bytes,
    until the hook has exited and its output closed (or HOOK_DRAIN after its exit), or the
    deadline; the output's end, and whether the deadline came first."""
    assert process.stdin is not None and process.stdout is not None
    reader: int | None = process.stdout.fileno()
    writer: int | None = process.stdin.fileno()
    pending = memoryview(stdin)
    if not pending:
        process.stdin.close()
        writer = None
    else:
        os.set_blocking(process.stdin.fileno(), False)
    kept = bytearray()
    exited_at: float | None = None
    while True:
        now = clock.now()
        if exited_at is None and process.poll() is not None:
            exited_at = now
        if exited_at is not None and reader is None:
            return bytes(kept), False
        limit = deadline if exited_at is None else min(deadline, exited_at + HOOK_DRAIN)
        if now >= limit:
            return bytes(kept), exited_at is None
        readable, writable, _ = select.select([reader] if reader is not None else [],
                                              [writer] if writer is not None else [], [],
                                              min(0.1, limit - now))
        if writable and writer is not None:
            try:
                pending = pending[os.write(writer, pending[:_CHUNK]):]
            except BlockingIOError:
                pass
            except OSError:
                # The hook does not read its stdin: what it did not take is dropped.
                pending = pending[:0]
            if not pending:
                process.stdin.close()
                writer = None
        if readable and reader is not None:
            chunk = os.read(reader, _CHUNK)
            if not chunk:
                process.stdout.close()
                reader = None
            else:
                kept += chunk
                del kept[:-HOOK_OUTPUT]
