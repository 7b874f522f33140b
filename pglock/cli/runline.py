"""`pglock run`'s command line without typer, the entry point of every cron run.

typer's import and the building of its parser cost more than the rest of a short run
that loses. So `pglock run` is parsed here, from a table that scripts/gen-docs generates
from the typer declaration (run_flags.py; tests/test_docs.py fails on drift), and
started by the same `start()` the typer command calls. Anything this parser is not sure
of (help, an unknown or abbreviated option, a missing or odd value, a value from the
environment it would have to interpret, a shell's completion request) goes to typer
(cli.main), so that every message stays typer's own, word for word.
"""

from __future__ import annotations

import gc
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from pglock.cli import boundary
from pglock.run import flags as run_flags
from pglock.settings.text import WINDOW_SEPARATOR

# Digits 0-9 only: int() reads every script's digits (anything else goes to typer, which
# refuses it: cli.app._unicode_number).
_INTEGER = r"\s*[+-]?[0-9]+\s*"
# Booleans from the environment as click reads them, the unambiguous spellings only.
_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True,
             "0": False, "false": False, "no": False, "off": False}


def main(argv: list[str] | None = None) -> int:
    """The `pglock` program: `run` parsed here when this parser is sure of it, anything
    else through typer (cli.main)."""
    args = sys.argv[1:] if argv is None else argv
    parsed = None
    if args[:1] == ["run"] and not os.environ.get("_PGLOCK_COMPLETE"):
        if argv is None:
            # A cron run's own work is mostly imports, which allocate without making
            # garbage: the collector waits until the command is forked (Slot.supervised).
            gc.disable()
        parsed = parse(args[1:], os.environ)
    if parsed is None:
        from pglock.cli import app as cli

        gc.enable()
        return cli.main(argv)
    values, from_environment = parsed
    given = _options(args[1:])
    defaulted = set(run_flags.DEFAULTS) - from_environment - set(given[0] if given else ())
    from pglock.cli.starting import start

    boundary.reset()
    code = boundary.guarded(lambda: start(values, from_environment, defaulted), args, False)
    if argv is not None:
        return code
    sys.exit(code)


def parse(args: list[str], environ: Mapping[str, str],
          ) -> tuple[dict[str, Any], set[str]] | None:
    """run's parameters from its arguments (after `run`) and the environment, as typer
    would make them, and the names of those that came from the environment; None for
    anything typer should see (it then says what is wrong, or prints the help)."""
    given = _options(args)
    if given is None:
        return None
    values, command = given
    from_environment = set()
    for param, variable in run_flags.ENVIRONMENT.items():
        # click takes an empty variable for an unset one.
        if param in values or not environ.get(variable):
            continue
        kind = run_flags.KINDS[param]
        if kind == "list":
            # As click splits a repeatable option's variable (cli/app.py's _Windows): a
            # trailing or doubled separator, or blanks alone, add no window.
            values[param] = tuple(item.strip() for item
                                  in environ[variable].split(WINDOW_SEPARATOR) if item.strip())
            from_environment.add(param)
            continue
        converted = _converted(environ[variable], kind)
        if converted is None:
            return None
        values[param] = converted
        from_environment.add(param)
    for param, default in run_flags.DEFAULTS.items():
        values.setdefault(param, default)
    values[run_flags.ARGUMENT] = command or None
    for param in run_flags.CALLBACKS:
        callback = _CALLBACKS.get(param)
        if callback is None:
            return None  # a callback this parser does not know: typer's to run
        try:
            values[param] = callback(values[param])
        except Exception:
            return None  # typer says what is wrong, in its words
    return values, from_environment


def _options(args: list[str]) -> tuple[dict[str, Any], list[str]] | None:
    """The options given and the command (what follows them), or None if unsure."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return values, args[i + 1:]
        if not arg.startswith("-") or arg == "-":
            # Options end at the first argument (allow_interspersed_args is off).
            return values, args[i:]
        name, equals, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        spec = run_flags.FLAGS.get(name)
        if spec is None or undecodable(arg):
            return None
        param, kind = spec
        if param in values and kind != "list" and not isinstance(kind, bool):
            return None  # given twice: typer's parser refuses it (cli._repeated_option)
        if isinstance(kind, bool):
            if equals:
                return None
            values[param] = kind
            i += 1
            continue
        if equals:
            value = attached
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            i += 1
            value = args[i]
        else:
            return None
        converted = None if undecodable(value) else _converted(value, kind)
        if converted is None:
            return None
        if kind == "list":
            # As click gives a repeatable option: a tuple, one item each time it is given.
            values[param] = (*values.get(param, ()), converted)
        else:
            values[param] = converted
        i += 1
    return values, []


def _converted(text: str, kind: str | bool) -> Any:
    """A value as click converts it for `kind`, or None when unsure."""
    if kind in ("text", "list"):
        return text
    if kind == "int":
        return int(text) if re.fullmatch(_INTEGER, text) else None
    if isinstance(kind, bool):
        return _BOOLEANS.get(text.strip().lower())
    return None


def undecodable(text: str) -> bool:
    return any(0xDC80 <= ord(c) <= 0xDCFF for c in text)


def _job(job: str) -> str:
    from pglock.settings.config import check_job

    return check_job(job)


_CALLBACKS = {"job": _job}
