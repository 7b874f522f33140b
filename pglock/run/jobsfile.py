"""The jobs file: `[jobs.NAME]` tables in the config file, each a job's command and its
`pglock run` options by their long names, written once for every host of a fleet
(docs/jobs-file.md).

A table stands for options on a command line: a bad key or value in it is a usage error
(exit 2) named by file, job and key, found before anything runs. `pglock run --job NAME`
checks only its own table, so that a typo in one job's table stops that job alone;
`pglock crontab` and `pglock jobs` check them all.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglock.errors import PglockError, UsageError
from pglock.run import flags as run_flags
from pglock.settings.config import check_job, read_config_file, shown
from pglock.settings.durations import DURATIONS

# run's options a job's table may not hold, and why (docs/jobs-file.md).
NOT_IN_A_TABLE = {
    "job": "the table's name is the job's",
    "rerun": "a rerun is a deliberate act, never a setting",
    "dsn": "the file's own top-level dsn says where every job's lock lives",
    "schema": "the file's own top-level schema says where every job's lock lives",
}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# A table's placeholder command, and a schedule that surely parses, while one key of it
# is checked alone.
_ANY_COMMAND = ["true"]
_ANY_SCHEDULE = "* * * * *"
SCHEDULE_ONLY = ("tz", "deadline", "grace", "catch_up", "catch_up_limit", "window")
CANDIDATES_ONLY = ("candidate_step", "candidates_refresh")
# What a key checked alone needs beside it (whether the table has it is checked first; a
# table catches up or not is checked with the whole table).
_NEEDED: dict[str, dict[str, object]] = {
    **{key: {"schedule": _ANY_SCHEDULE} for key in SCHEDULE_ONLY},
    "catch_up_limit": {"schedule": _ANY_SCHEDULE, "catch_up": "all"},
    **{key: {"candidates": 1} for key in CANDIDATES_ONLY}}


def table_keys() -> dict[str, tuple[str, str | bool]]:
    """The keys a job's table may hold: run's options by long name, from run_flags (the
    table scripts/gen-docs writes from cli.run), each with its parameter and kind."""
    keys: dict[str, tuple[str, str | bool]] = {"command": ("command", "command")}
    for flag, (param, kind) in run_flags.FLAGS.items():
        # --no-X is the false of X (`X = false`); -j, -v are spellings of --job, --verbose.
        if not flag.startswith("--") or kind is False or param in NOT_IN_A_TABLE:
            continue
        keys[flag[2:]] = (param, kind)
    return keys


@dataclass(frozen=True)
class ConfiguredJob:
    """One `[jobs.NAME]` table, checked: its values as run's parameters would carry them
    (durations and sizes as text, counts as int, flags as bool, the command as argv)."""

    name: str
    path: Path
    values: Mapping[str, Any]

    @property
    def command(self) -> list[str]:
        command: list[str] = self.values["command"]
        return command

    @property
    def schedule(self) -> str | None:
        from pglock.settings.schedule import normal

        value = self.values.get("schedule")
        return None if value is None else normal(str(value))

    @property
    def tz(self) -> str | None:
        value = self.values.get("tz")
        return None if value is None else str(value)


def table_name(name: str) -> str:
    """How the job's table is written in TOML: [jobs.backup], [jobs."a b"]."""
    if _BARE_KEY.fullmatch(name):
        return f"[jobs.{name}]"
    return f'[jobs."{"".join(_escaped(c) for c in name)}"]'


def _escaped(char: str) -> str:
    """A character of a quoted TOML key as shown: control characters, line separators and
    bytes that are not UTF-8 as escapes (text is data, never a line break or an escape)."""
    code = ord(char)
    if char in '"\\':
        return "\\" + char
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if code < 32 or 127 <= code < 160 or char in "\u2028\u2029":
        return f"\\u{code:04X}"
    return char


class _Where:
    """What names a bad value: the file, the job's table, the key."""

    def __init__(self, path: Path, name: str) -> None:
        self.name = name
        self.prefix = f"config file {shown(str(path))}: {table_name(name)}"

    def error(self, message: str, key: str | None = None) -> UsageError:
        if key is None:
            return UsageError(f"{self.prefix}: {message}")
        if not _BARE_KEY.fullmatch(key):
            key = f'"{"".join(_escaped(c) for c in key)}"'

        # run's own message names the option (--ttl: ...); here the key is its name.
        for head in (f"--{key}: ", f"--{key} "):
            if message.startswith(head):
                return UsageError(f"{self.prefix} {key}{head[len(key) + 2:]}"
                                  f"{message[len(head):]}")
        return UsageError(f"{self.prefix} {key}: {message}")


def tables(path: Path, values: Mapping[str, object]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The file's job tables by normalized name: (name as written, table), unchecked."""
    jobs = values.get("jobs")
    if jobs is None:
        return {}
    if not isinstance(jobs, dict):
        raise UsageError(f"config file {shown(str(path))}: jobs must be tables, one per job "
                         "([jobs.NAME])")
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, table in jobs.items():
        where = _Where(path, name)
        if not isinstance(table, dict):
            raise where.error("must be a table of the job's command and options "
                              "(command = [...], schedule = \"...\", ...)")
        try:
            normal = check_job(name)
        except UsageError as error:
            raise where.error(str(error).removeprefix("--job: ")) from None
        if normal in found:
            raise where.error(f"names the same job as {table_name(found[normal][0])} "
                              "(names are compared in Unicode NFC)")
        found[normal] = (name, table)
    return found


def configured(job: str) -> ConfiguredJob | None:
    """The job's table in the config file, checked; None when the file has none for it."""
    path, values = read_config_file()
    if path is None:
        return None
    entry = tables(path, values).get(unicodedata.normalize("NFC", job))
    return None if entry is None else checked(path, *entry)


def refuse_without_command(job: str) -> None:
    """No command given for a job the file has no table for: say so, naming the file, when
    it has tables for other jobs (a typo'd --job, or the wrong host's file)."""
    path, values = read_config_file()
    if path is not None and tables(path, values):
        raise UsageError(f"no command given, and config file {shown(str(path))} has no "
                         f"{table_name(job)} table: pglock run --job NAME -- COMMAND [ARG...]")


def every_job() -> tuple[Path | None, list[ConfiguredJob]]:
    """Every job table of the config file, checked, in the file's order."""
    path, values = read_config_file()
    if path is None:
        return None, []
    return path, [checked(path, name, table) for name, table in tables(path, values).values()]


def checked(path: Path, name: str, table: Mapping[str, object]) -> ConfiguredJob:
    """A job's table, its types and values checked the way run checks its options."""
    where = _Where(path, name)
    keys = table_keys()
    values: dict[str, Any] = {}
    for key, value in table.items():
        spec = keys.get(key)
        if spec is None:
            raise where.error(_unknown(key, keys), key)
        param, kind = spec
        values[param] = _typed(where, key, kind, value)
    if "command" not in values:
        raise where.error("missing: the job's command (command = [\"/path/to/program\", "
                          "\"arg\"], or a string run by /bin/sh -c)", "command")
    for needed, needing in (("schedule", SCHEDULE_ONLY), ("candidates", CANDIDATES_ONLY)):
        for param in needing:
            if param in values and needed not in values:
                raise where.error(f"needs {needed} in the same table", param.replace("_", "-"))
    # Each value alone, so that the message names its key; then all of them together
    # (--ttl against --kill-after, ...).
    for key, (param, _) in keys.items():
        if param in values and param != "command":
            alone = {param: values[param]}
            _check(where, {**alone, **_NEEDED.get(param, {})}, key)
    _check(where, values, None)
    return ConfiguredJob(check_job(name), path, values)


# The keys whose value may be a TOML number, and what they take instead of another type.
_DURATION = 'must be a duration in a string ("90s", "5m", "1h30m") or a number of seconds'
NUMBERS = {**dict.fromkeys((*DURATIONS, "--hook-timeout"), _DURATION),
           "--output-tail": 'must be a size in a string ("4KiB", "1MiB") or a number of bytes'}


def _decimal(value: float) -> str:
    """A TOML float as the command line would type it (150.0 as 150, 1e300 as written)."""
    if not abs(value) < 1e15:
        return repr(value)
    return f"{value:f}".rstrip("0").rstrip(".")


def _unknown(key: str, keys: Mapping[str, object]) -> str:
    if key in NOT_IN_A_TABLE:
        return f"not a job setting: {NOT_IN_A_TABLE[key]}"
    hint = key.replace("_", "-")
    if hint != key and hint in keys:
        return f"unknown key (the option's long name is {hint!r})"
    return "unknown key (a job's table holds command and run's options by their long names: " \
           "ttl, schedule, retries, on-failure, ...)"


def _typed(where: _Where, key: str, kind: str | bool, value: object) -> Any:
    """The value as run's parameter carries it, or a usage error naming its key."""
    if kind == "command":
        return _command(where, key, value)
    if isinstance(kind, bool):
        if not isinstance(value, bool):
            raise where.error("must be true or false", key)
        return value
    if kind == "list":
        return _strings(where, key, value)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise where.error("must be a whole number", key)
        return value
    if f"--{key}" in NUMBERS:
        # A bare number is seconds (bytes for output-tail), on the command line as here;
        # TOML's 90.5 and 1.5e2 are numbers too.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value) if isinstance(value, int) else _decimal(value)
        if not isinstance(value, str):
            raise where.error(NUMBERS[f"--{key}"], key)
        return value
    if not isinstance(value, str):
        raise where.error("must be a string", key)
    return value


def _command(where: _Where, key: str, value: object) -> list[str]:
    if isinstance(value, str) and value.strip():
        # $0 of the shell is the job's name: ps and the shell's messages show it.
        return ["/bin/sh", "-c", value, where.name]
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value) \
            and value[0]:
        return list(value)
    raise where.error("must be a list of strings (the program and its arguments) or a "
                      "non-empty string run by /bin/sh -c", key)


def _strings(where: _Where, key: str, value: object) -> list[str]:
    """A repeatable option (window): one as a string, or several as an array of strings."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise where.error("must be a string or a list of strings", key)
    return list(items)


def _check(where: _Where, values: Mapping[str, Any], key: str | None) -> None:
    """Build run's options from the defaults and `values`, as run would."""
    from pglock.run.options import run_options

    every = {**run_flags.DEFAULTS, "command": _ANY_COMMAND, "job": "x", "schema": "pglock",
             **values}
    try:
        run_options(every)
    except PglockError as error:
        raise where.error(str(error), key) from None
