"""The one error boundary of every command, typer's or run's own parser's: exit codes, one
line on stderr for bad input and for pglock's own failures, never a traceback (but -v).

No typer here: `pglock run` goes through it without importing typer (runline.py).
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable

from pglock.errors import (
    ExitStatus,
    Interrupted,
    LacksRole,
    OutputFailed,
    PglockError,
    PrivilegeError,
    SchemaError,
    UsageError,
    refused_privilege,
)


class _State:
    # Whether the command being run configured the output (errors raised while its
    # options are still being parsed come before that).
    output_configured = False


class ClosedOutput(io.TextIOBase):
    """Standard output for a process started without one: every write is the closed pipe's
    OutputFailed (a quiet exit 141), raised past the libraries that write to it."""

    def write(self, text: str) -> int:
        raise OutputFailed(OSError(errno.EBADF, os.strerror(errno.EBADF)))

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 1


def reset() -> None:
    """Before a command line is parsed (main() may run many times in one process: tests)."""
    _State.output_configured = False
    # Standard output escapes what its encoding cannot carry (PYTHONIOENCODING=ascii, a
    # latin-1 locale), as standard error does: a job's name never ends a command.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):
            reconfigure(errors="backslashreplace")


def output_configured() -> bool:
    return _State.output_configured


def configure_output(verbose: bool, quiet: bool) -> None:
    """pglock's own messages go to stderr as one line; libraries stay silent unless -v."""
    _State.output_configured = True
    root = logging.getLogger()
    own = logging.getLogger("pglock")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pglock: %(message)s"))
    # Configured anew on each call: main() may run many times in one process (tests).
    root.handlers = [handler] if verbose else [logging.NullHandler()]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    own.handlers = [] if verbose else [handler]
    own.propagate = verbose
    own.setLevel(logging.NOTSET if verbose else logging.CRITICAL + 1 if quiet else logging.WARNING)
    if not verbose:
        warnings.simplefilter("ignore")


def say(text: str) -> None:
    """A line on standard output (render.write: a closed or full stdout is an OutputFailed)."""
    from pglock.cli.render import write

    write(text + "\n")


def guarded(command: Callable[[], int], args: list[str], checking: bool,
            passing: tuple[type[BaseException], ...] = ()) -> int:
    """Run `command`; its exit code, whatever it raised (but `passing`, re-raised for the
    caller's own handling: click's usage errors)."""
    try:
        return command()
    except passing:
        raise
    except Interrupted as interrupted:
        # Nothing ran: the signal's code, as if it had ended us, and nothing to say.
        return interrupted.exit_code
    except OutputFailed as error:
        return output_failed(error, args)
    except PglockError as error:
        error = variable_named(privilege_named(error, args), args)
        say_error(str(error), error, args)
        if checking and not _State.output_configured:
            # Refused while its options were parsed (a bad --job): UNKNOWN, as for click's.
            from pglock.reports import check

            report = check.unknown(str(error))
            answer(check.render_json(report) if "--json" in args else check.render_text(report))
            return int(report.status)
        return int(error.exit_status)
    except Exception as error:
        if refused_privilege(error) is not None:
            privilege = privilege_named(error, args)
            say_error(str(privilege), privilege, args)
            if checking:
                answer(f"PGLOCK UNKNOWN - {privilege}")
            return int(privilege.exit_status)
        # A bug of ours: one fixed line (cron mails it). Never the exception's text: it can
        # carry a DSN with its password. The traceback only with -v.
        say_error(f"internal error: {type(error).__name__} (-v shows the traceback)", error,
                  args)
        if checking:
            answer(f"PGLOCK UNKNOWN - internal error: {type(error).__name__}")
        return ExitStatus.INTERNAL


def privilege_named(error: Exception, args: list[str]) -> PglockError:
    """A refused privilege as the one line that names the role that has it; any other
    error (a schema that cannot be created, which says what to ask a DBA, and a role that
    names the built-in role it lacks) as it is."""
    detail = refused_privilege(error)
    if detail is None or isinstance(error, SchemaError | LacksRole):
        return error if isinstance(error, PglockError) else PglockError(str(error))
    privilege = PrivilegeError(args[0] if args else "pglock", detail)
    privilege.__cause__ = error
    return privilege


_OPTION = re.compile(r"(--[a-z][a-z0-9-]*)(?=[: ])")
# The variables not named PGLOCK_<OPTION>.
_VARIABLES = {"--users": "PGLOCK_SERVE_USERS"}


def variable_named(error: PglockError, args: list[str]) -> PglockError:
    """A bad value that came from a PGLOCK_* variable, said under the variable's name: the
    option names it only when the command line gave it (`PGLOCK_TTL: 'bogus' is not a
    duration`, not `--ttl: ...` to an operator whose crontab has no --ttl)."""
    found = _OPTION.match(str(error)) if isinstance(error, UsageError) else None
    if found is None:
        return error
    option = found.group(1)
    variable = _VARIABLES.get(option, "PGLOCK_" + option[2:].upper().replace("-", "_"))
    own = args[: args.index("--")] if "--" in args else args
    if any(arg == option or arg.startswith(option + "=") for arg in own) or \
            not os.environ.get(variable):
        return error
    named = UsageError(variable + str(error)[len(option):])
    named.__cause__ = error
    return named


def answer(text: str) -> None:
    """check's answer after a failure: written if stdout can take it."""
    try:
        say(text)
    except OutputFailed as error:
        output_failed(error, [])


def say_error(line: str, error: BaseException, args: list[str]) -> None:
    """The one line of an error, through pglock's logger (so -q silences it)."""
    if _State.output_configured:
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            import traceback  # only with -v: every run's start-up counts

            traceback.print_exception(error)
        logging.getLogger("pglock").error("%s", line)
    elif not quiet(args):
        # Raised while the options were parsed, before the command configured the output.
        if "-v" in args or "--verbose" in args:
            import traceback

            traceback.print_exception(error)
        print(f"pglock: {line}", file=sys.stderr)


def output_failed(error: OutputFailed, args: list[str]) -> int:
    """A closed pipe ends pglock quietly, as it would end a C tool; a full disk is said."""
    # What is still buffered must not fail again at exit, with Python's own message.
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    if not error.closed:
        say_error(str(error), error, args)
    return int(error.exit_status)


def quiet(args: list[str]) -> bool:
    """Whether -q (or PGLOCK_QUIET) was asked for, on a command line that did not parse."""
    own = args[: args.index("--")] if "--" in args else args
    if "-q" in own or "--quiet" in own:
        return True
    return os.environ.get("PGLOCK_QUIET", "").strip().lower() in ("1", "true", "yes", "on")
