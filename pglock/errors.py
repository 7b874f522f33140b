"""Exit statuses and the exceptions that map onto them."""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    """Exit codes of pglock itself (a command that ran passes its own through)."""

    OK = 0
    # A monitoring-style "not OK" from commands that report, never from `run`.
    FAILURE = 1
    # Bad command line: unknown option, malformed duration, bad job name.
    USAGE = 2
    # Not run: the lock is held elsewhere, the slot already ran, or past --deadline.
    CONFLICT = 75
    # Stopped by --max-runtime, as timeout(1) does.
    TIMED_OUT = 124
    # pglock itself failed: database unreachable, bad configuration, lock lost.
    INTERNAL = 125
    # The command exists but could not be executed.
    CANNOT_EXECUTE = 126
    # The command was not found.
    NOT_FOUND = 127


class PglockError(Exception):
    """pglock failed; str(error) is the one line the operator sees."""

    exit_status: ExitStatus = ExitStatus.INTERNAL


class UsageError(PglockError):
    """The command line or configuration is malformed."""

    exit_status = ExitStatus.USAGE


class UnknownJob(PglockError):
    """A report was asked about a job that never ran here (maybe a typo, or another schema)."""

    exit_status = ExitStatus.FAILURE


class NothingDone(PglockError):
    """An operator command changed nothing: not confirmed, or the state moved meanwhile."""

    exit_status = ExitStatus.FAILURE


class ConfigError(PglockError):
    """The configuration (file, DSN) cannot be used."""


class DatabaseError(PglockError):
    """The database could not be reached or refused what pglock asked."""


class SchemaError(PglockError):
    """The pglock schema is missing, newer than this pglock, or cannot be created."""


class Interrupted(PglockError):
    """A signal arrived before the command started; nothing ran, nothing was recorded."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum} before the command started")
        self.signum = signum
