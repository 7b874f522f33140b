"""Reentrant runs: `pglock run --job X` inside the command of the run that holds X's lock.

The nested pglock knows it is inside that run by what it inherited (PGLOCK_JOB names its
job, PGLOCK_HOLDER_ID and PGLOCK_FENCING_TOKEN name the claim), and believes it only once
the lock row agrees: the same holder id and token, still held. It then runs its command
directly, under the outer lock, as flock(1)'s FLOCKER idiom does: no lock of its own, no
history row (the outer run's row covers it), its exit code passed through. A nested run
whose outer lock is gone (cleared, expired, taken over) skips, as a held lock would make
it: it must not take a lock its own caller may still believe it holds.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

from pglock.db import database
from pglock.errors import ExitStatus, UsageError
from pglock.lock import clock, lease
from pglock.lock.heartbeat import MIN_MARGIN
from pglock.run.child import CannotStart, LateStart
from pglock.settings.config import normalized_job, shown

log = logging.getLogger(__name__)

# How deep reentrant runs of one job may nest: deeper, its command most likely calls
# itself (a table whose command is `pglock run --job` of its own job).
MAX_DEPTH = 10
# The largest fencing token a lock row can hold (PostgreSQL's bigint).
BIGINT_MAX = 2**63 - 1
# The depth, passed on to the command of a reentrant run.
DEPTH_VARIABLE = "PGLOCK_REENTERED"

# Signals the nested pglock passes on to its command, as the outer one does.
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
              signal.SIGUSR2)


class Inherited(NamedTuple):
    """The claim a command's environment says its run holds."""

    holder_id: str
    # None: the variable is not a number (then no lock row can agree).
    fencing_token: int | None


def inherited(job: str, environ: Mapping[str, str]) -> Inherited | None:
    """The claim of the run this pglock is nested in, if that run is of the same job."""
    holder_id = environ.get("PGLOCK_HOLDER_ID", "")
    if not holder_id or normalized_job(environ.get("PGLOCK_JOB", "")) != job:
        return None
    return Inherited(holder_id, _bigint(environ.get("PGLOCK_FENCING_TOKEN", "").strip()))


def _bigint(text: str) -> int | None:
    """The fencing token `text` names: a non-negative bigint, as the lock row keeps it
    (None for anything else: no lock row can agree, so the run skips as for any claim
    that does not hold; the length checked first, as int() refuses 4,300 digits)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(BIGINT_MAX)):
        return None
    value = int(text)
    return value if value <= BIGINT_MAX else None


def confirmed(conninfo: str, schema: str, job: str, claim: Inherited,
              timeout: float) -> float | None:
    """The stopwatch time the statement that found `claim` holding the job's lock was sent
    (None: the lock row does not agree)."""
    if claim.fencing_token is None:
        return None
    session = database.Reconnecting(conninfo, application_name=f"pglock run {job} (nested)",
                                    timeout=timeout)
    try:
        with database.translated(f"cannot check the lock of job {job!r}"):
            conn = session.get()
            sent = clock.now()
            held = lease.held_by(conn, schema, job, claim.holder_id, claim.fencing_token)
            return sent if held else None
    finally:
        session.close()


def run_directly(job: str, argv: Sequence[str], environ: Mapping[str, str],
                 confirmed_at: float) -> int:
    """Run the command in this process group (the outer run's, which it stops as one)
    and wait for it: its exit code, 128+N when a signal ended it.

    The confirmation proves the lock valid when it was sent, not for how long after: the
    command is forked only within the smallest margin any lock keeps from then (the outer
    run's heartbeat and watchdog protect it once it runs, as they protect the outer
    command); later, it is not started (LateStart, 125)."""
    text = environ.get(DEPTH_VARIABLE, "0")
    # More digits than MAX_DEPTH has is as deep as MAX_DEPTH (never int() of 5,000 digits).
    depth = (1 if not (text.isascii() and text.isdigit()) else
             MAX_DEPTH if len(text) > len(str(MAX_DEPTH)) else int(text) + 1)
    if depth >= MAX_DEPTH:
        raise UsageError(f"job {job!r}: nested {depth} deep in runs of itself; not running its "
                         f"command again (does its command call pglock run --job {job} "
                         "without a command?)")
    if not argv or not argv[0]:
        raise CannotStart("command not found: ''", ExitStatus.NOT_FOUND)
    environment = {**environ, DEPTH_VARIABLE: str(depth)}
    late = clock.now() - (confirmed_at + MIN_MARGIN)
    if late >= 0:
        raise LateStart(f"not started: the lock of job {job!r} was confirmed "
                        f"{late + MIN_MARGIN:.1f}s before the nested command could be forked "
                        "(pglock was held up); it may have expired since")
    try:
        process = subprocess.Popen(list(argv), env=environment)
    except FileNotFoundError:
        raise CannotStart(f"command not found: {shown(argv[0])}", ExitStatus.NOT_FOUND) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise CannotStart(f"cannot execute {shown(argv[0])}: {reason}",
                          ExitStatus.CANNOT_EXECUTE) from None
    with _forwarding(process):
        code = process.wait()
    return 128 - code if code < 0 else code


@contextlib.contextmanager
def _forwarding(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """Signals sent to this pglock alone reach the command too; it decides how to end."""
    def forward(signum: int, _: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in _FORWARDED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
