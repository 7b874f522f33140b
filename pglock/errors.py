"""Exit statuses and the exceptions that map onto them."""

from __future__ import annotations

import enum
import errno

# The commands that can return an exit status (check answers in PluginStatus instead).
RUN = frozenset({"run"})
REPORTS = frozenset({"status", "history", "clear", "prune", "pause", "resume", "stop",
                     "replay", "forget", "hosts", "forget-host"})
EVERY = frozenset({"run", "init", "status", "history", "clear", "prune", "metrics", "pause",
                   "resume", "stop", "replay", "forget", "crontab", "systemd", "jobs", "serve",
                   "hosts", "forget-host"})


class ExitStatus(enum.IntEnum):
    """Exit codes of pglock itself, each with its meaning and the commands that return it:
    the one source of the README's table and every man page's EXIT STATUS section."""

    meaning: str
    commands: frozenset[str]

    def __new__(cls, code: int, meaning: str, commands: frozenset[str]) -> ExitStatus:
        member = int.__new__(cls, code)
        member._value_ = code
        member.meaning = meaning
        member.commands = commands
        return member

    OK = (0, "success; for run, the command's own exit code is passed through", EVERY)
    FAILURE = (1, "not done: status, history, hosts, pause or forget --job name a job that "
                  "never ran here; clear or prune was not confirmed, or the lock to clear "
                  "changed hands meanwhile; stop found nothing running, or its holder did "
                  "not react within its ttl (stop --wait); forget found the job running; "
                  "forget-host named a host the census does not know; the database role "
                  "lacks a privilege the command needs (docs/security.md; clear --terminate: "
                  "pg_signal_backend)",
               REPORTS)
    USAGE = (2, "usage error: bad option, duration, size, job or host name; no command "
                "given; a bad [jobs.NAME] table in the config file", EVERY)
    CONFLICT = (75, "not run: the lock is held elsewhere (or in the hold of a run that just "
                    "ended), the slot already ran, the job is paused, past --deadline, or a run "
                    "nested in a run of its job whose lock is gone (see --conflict-exit-code)",
                RUN)
    TIMED_OUT = (124, "the command was stopped by --max-runtime, as timeout(1) does", RUN)
    INTERNAL = (125, "pglock itself failed: database unreachable, a schema it cannot use, "
                     "bad configuration, lock lost (or found cleared or taken over when "
                     "released), output that cannot be written; for run, a slot ahead of "
                     "the database's clock (this host's clock runs fast)", EVERY)
    CANNOT_EXECUTE = (126, "the command exists but could not be executed", RUN)
    NOT_FOUND = (127, "the command was not found", RUN)
    # 128+N: the signal's number is added, as a shell reports a process it killed.
    SIGNALLED = (128, "killed by signal N: run's command was (or pglock was, before the "
                      "command started); 130 is Ctrl-C", EVERY)
    # 141 = 128+SIGPIPE, what a shell reports for a C tool whose pipe closed.
    OUTPUT_CLOSED = (141, "standard output was closed early (a pager or head(1) quit) or "
                          "never open (>&-): pglock stops quietly, after the work it was "
                          "asked for", EVERY - RUN)

    @property
    def label(self) -> str:
        """How the docs write the code: `128+N` for the family of signals."""
        return "128+N" if self is ExitStatus.SIGNALLED else str(int(self))


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


# The group role that has what each command needs (`pglock init --print-grants`,
# docs/security.md).
RUNNER, OPERATOR, READER = "pglock_runner", "pglock_operator", "pglock_reader"
ROLE_OF = {"run": RUNNER, "status": READER, "history": READER, "check": READER,
           "metrics": READER, "doctor": READER, "hosts": READER, "clear": OPERATOR,
           "prune": OPERATOR, "pause": OPERATOR, "resume": OPERATOR, "stop": OPERATOR,
           "replay": OPERATOR, "forget": OPERATOR, "forget-host": OPERATOR}


class PrivilegeError(PglockError):
    """The database refused for want of a privilege (SQLSTATE 42501): which role has it."""

    def __init__(self, command: str, detail: str) -> None:
        role = ROLE_OF.get(command)
        who = f"the {role} role" if role else "the schema owner's privileges"
        super().__init__(f"pglock {command} needs {who} ({detail})")
        # An operator's command or a report: not done (1); the others, whose exit statuses
        # have no such meaning (run, check, metrics, init): pglock failed (125).
        self.exit_status = (ExitStatus.FAILURE if command in REPORTS
                            else ExitStatus.INTERNAL)


class LacksRole(PglockError):
    """The database refused for want of a built-in role pglock names itself (clear
    --terminate's pg_signal_backend): not done (1), as any refused privilege of an
    operator's command; the message, not the boundary, says which role."""

    exit_status = ExitStatus.FAILURE


def refused_privilege(error: BaseException) -> str | None:
    """The server's 'permission denied ...' line when `error` (or what caused it) is a
    refused privilege, else None."""
    seen: BaseException | None = error
    for _ in range(5):
        if seen is None:
            return None
        if getattr(seen, "sqlstate", None) == "42501":
            text = str(seen).strip()
            return text.splitlines()[0] if text else "permission denied"
        seen = seen.__cause__ or seen.__context__
    return None


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

    @property
    def exit_code(self) -> int:
        return ExitStatus.SIGNALLED + self.signum


class OutputFailed(PglockError):
    """Standard output cannot be written: closed by its reader (EPIPE) or never open
    (EBADF), or a full disk."""

    def __init__(self, error: OSError) -> None:
        super().__init__(f"cannot write to standard output: {error.strerror or error}")
        # EBADF: started with standard output closed (`>&-`), as good as a closed pipe.
        self.closed = error.errno in (errno.EPIPE, errno.EBADF)
        self.exit_status = ExitStatus.OUTPUT_CLOSED if self.closed else ExitStatus.INTERNAL
