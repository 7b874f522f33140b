"""pglock's CLI called in this process, for messages and exit codes (no database needed)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from pglock.cli import app as cli

# An address where nothing listens: every command fails to connect, at once.
UNREACHABLE = "host=127.0.0.1 port=1"


@dataclass
class Called:
    code: int
    stdout: str
    stderr: str

    @property
    def printed(self) -> str:
        return self.stdout + self.stderr


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """`run` installs signal handlers and a wake-up fd; logging gains handlers per call."""
    handlers = {signum: signal.getsignal(signum) for signum in
                (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                 signal.SIGUSR1, signal.SIGUSR2)}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    loggers = [logging.getLogger(), logging.getLogger("pglock")]
    before = [(lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(wakeup)
        for lg, (kept, level, propagate) in zip(loggers, before, strict=True):
            lg.handlers[:] = kept
            lg.setLevel(level)
            lg.propagate = propagate


def invoke(*argv: str, env: dict[str, str] | None = None) -> Called:
    """pglock.cli.app.main(argv) with stdout and stderr captured and `env` added."""
    out, err = io.StringIO(), io.StringIO()
    saved = {name: os.environ.get(name) for name in env or {}}
    os.environ.update(env or {})
    try:
        with process_state_kept(), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return Called(code, out.getvalue(), err.getvalue())
