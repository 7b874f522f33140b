"""Where the database is, and which schema and job names are usable (pglock.settings.config)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pglock.errors import ConfigError, ExitStatus, UsageError
from pglock.settings import config

from ..inprocess import UNREACHABLE, invoke

ConfigFile = Callable[[str], Path]


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConfigFile:
    """Write the config file PGLOCK_CONFIG names."""
    path = tmp_path / "pglock.toml"
    monkeypatch.setenv("PGLOCK_CONFIG", str(path))

    def write(text: str) -> Path:
        path.write_text(text)
        return path

    return write


# resolve_target: the first DSN found wins ------------------------------------------------


@pytest.mark.parametrize(("option", "variables", "file", "expected"), [
    pytest.param("host=cli", {}, 'dsn = "host=file"', ("host=cli", "--dsn"), id="option"),
    pytest.param("host=env", {"PGLOCK_DSN": "host=env"}, 'dsn = "host=file"',
                 ("host=env", "PGLOCK_DSN"), id="pglock-dsn-variable"),
    pytest.param(None, {"PGHOST": "db1"}, 'dsn = "host=file"',
                 ("host=file", "config file {path}"), id="file-before-libpq"),
    pytest.param(None, {"PGHOST": "db1"}, "", ("", "libpq environment (PGHOST, PGSERVICE, ...)"),
                 id="libpq-host"),
    pytest.param(None, {"PGSERVICE": "app"}, 'schema = "s"',
                 ("", "libpq environment (PGHOST, PGSERVICE, ...)"), id="libpq-service"),
    pytest.param(None, {"PGHOST": ""}, "", (None, "embedded"), id="empty-pghost-is-unset"),
    pytest.param(None, {"PGUSER": "me", "PGPORT": "6432"}, "", (None, "embedded"),
                 id="user-and-port-alone-are-not-a-server"),
    pytest.param(None, {}, "", (None, "embedded"), id="nothing"),
])
def test_dsn_precedence(option: str | None, variables: dict[str, str], file: str,
                        expected: tuple[str | None, str], config_file: ConfigFile,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    path = config_file(file)
    target = config.resolve_target(option)
    conninfo, source = expected
    assert (target.conninfo, target.source) == (conninfo, source.format(path=path))
    assert target.embedded is (conninfo is None)


def test_config_file_is_searched_under_xdg_then_etc(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGLOCK_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config.config_paths() == [tmp_path / "pglock" / "config.toml",
                                     Path("/etc/pglock/config.toml")]
    (tmp_path / "pglock").mkdir()
    (tmp_path / "pglock" / "config.toml").write_text('dsn = "host=xdg"\nschema = "jobs"\n')
    assert config.resolve_target(None) == config.Target(
        "host=xdg", f"config file {tmp_path / 'pglock' / 'config.toml'}")
    assert config.configured_schema(None) == "jobs"


def test_without_xdg_the_home_config_is_searched(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.delenv("PGLOCK_CONFIG")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config.config_paths()[0] == tmp_path / ".config" / "pglock" / "config.toml"


@pytest.mark.parametrize(("text", "says"), [
    pytest.param('dsn = ""', "dsn must be a non-empty string", id="empty-dsn"),
    pytest.param("dsn = 5", "dsn must be a non-empty string", id="number-dsn"),
    pytest.param('dsn = ["host=a"]', "dsn must be a non-empty string", id="list-dsn"),
])
def test_bad_config_files_are_config_errors(text: str, says: str,
                                            config_file: ConfigFile) -> None:
    path = config_file(text)
    with pytest.raises(ConfigError) as raised:
        config.resolve_target(None)
    assert str(raised.value) == f"config file {path}: {says}"
    assert raised.value.exit_status is ExitStatus.INTERNAL


@pytest.mark.parametrize("text", ["dsn = ", 'dsn = "a"\ndsn = "b"', "[pglock\ndsn = 1"])
def test_config_files_that_are_not_toml_are_config_errors(text: str,
                                                          config_file: ConfigFile) -> None:
    path = config_file(text)
    with pytest.raises(ConfigError) as raised:
        config.resolve_target(None)
    # tomllib's own words (they vary between Python versions) on one line, after the path.
    assert str(raised.value).startswith(f"config file {path}: ")
    assert "\n" not in str(raised.value)


def test_a_named_config_file_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere.toml"
    monkeypatch.setenv("PGLOCK_CONFIG", str(missing))
    with pytest.raises(ConfigError) as raised:
        config.resolve_target(None)
    assert str(raised.value) == f"config file {missing} (PGLOCK_CONFIG) does not exist"


def test_an_unreadable_config_file_says_why(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGLOCK_CONFIG", str(tmp_path))  # a directory
    with pytest.raises(ConfigError) as raised:
        config.resolve_target(None)
    assert str(raised.value) == f"config file {tmp_path}: Is a directory"


def test_the_dsn_option_never_reads_the_config_file(config_file: ConfigFile) -> None:
    config_file("this is not toml")
    assert config.resolve_target("host=cli").conninfo == "host=cli"


def test_an_empty_pglock_config_is_refused_with_a_dsn_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` with PGLOCK_DSN and PGLOCK_SCHEMA set read no file, and took the empty
    PGLOCK_CONFIG that `run` of the same crontab refuses (issue 46)."""
    monkeypatch.setenv("PGLOCK_CONFIG", " ")
    with pytest.raises(ConfigError, match=r"^PGLOCK_CONFIG: empty; unset it"):
        config.resolve_target("host=cli")
    called = invoke("status", env={"PGLOCK_CONFIG": "", "PGLOCK_SCHEMA": "s",
                                   "PGLOCK_DSN": UNREACHABLE})
    assert (called.code, called.stdout) == (125, "")
    assert called.stderr == ("pglock: PGLOCK_CONFIG: empty; unset it to read the default "
                             "config files\n")


def test_a_fifo_nothing_writes_is_refused_not_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config file that is a FIFO with no writer held every command at its open (D16)."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    monkeypatch.setenv("PGLOCK_CONFIG", str(fifo))
    monkeypatch.setattr(config, "FIFO_WAIT", 0.2)
    with pytest.raises(ConfigError) as raised:
        config.resolve_target(None)
    assert str(raised.value) == (f"config file {fifo}: a FIFO that nothing wrote to the end "
                                 "within 0.2s; not a config file")


def test_a_fifo_is_read_once_and_its_text_kept(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """As a shell's <(...) gives it: written a moment after the open, read by a command
    more than once (its jobs table, its schema, its DSN)."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    monkeypatch.setenv("PGLOCK_CONFIG", str(fifo))

    def write() -> None:
        time.sleep(0.1)
        fifo.write_text('dsn = "host=fifo"\nschema = "s"\n')

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert config.resolve_target(None).conninfo == "host=fifo"
    finally:
        writer.join()
    assert config.configured_schema(None) == "s"


# configured_schema ---------------------------------------------------------------------


@pytest.mark.parametrize(("option", "file", "schema"), [
    pytest.param(None, "", "pglock", id="default"),
    pytest.param(None, 'schema = "jobs"', "jobs", id="file"),
    pytest.param("cli", 'schema = "jobs"', "cli", id="option-wins"),
    pytest.param("x" * 63, "", "x" * 63, id="63-bytes"),
    pytest.param("ü" * 31 + "x", "", "ü" * 31 + "x", id="63-bytes-multibyte"),
    pytest.param('odd "name"; --', "", 'odd "name"; --', id="any-characters"),
])
def test_schema_name(option: str | None, file: str, schema: str,
                     config_file: ConfigFile) -> None:
    config_file(file)
    assert config.configured_schema(option) == schema


@pytest.mark.parametrize(("name", "shown"), [
    ("", "''"), (" ", "' '"), ("\t", "'^I'"), ("x" * 64, repr("x" * 64)),
    ("ü" * 32, repr("ü" * 32)), ("a\x00b", "'a^@b'"), ("fz4_\x1b[31mred", "'fz4_^[[31mred'"),
    ("fz4_\nX", "'fz4_^JX'"), ("a\x85b", "'a\\x85b'"),
])
def test_unusable_schema_names_are_usage_errors(name: str, shown: str) -> None:
    with pytest.raises(UsageError) as raised:
        config.configured_schema(name)
    assert str(raised.value) == (f"--schema: {shown} is not a usable schema name (1-63 bytes, "
                                 "no control characters)")


@pytest.mark.parametrize("name", ["public", "information_schema", "pg_catalog", "pg_x"])
def test_postgresqls_own_schemas_are_refused(name: str) -> None:
    with pytest.raises(UsageError) as raised:
        config.configured_schema(name)
    assert str(raised.value) == (f"--schema: {name!r} is PostgreSQL's own schema; pglock "
                                 "needs one of its own (the default is pglock)")


@pytest.mark.parametrize(("value", "seconds"), [
    ("0", 0.0), ("90", 90.0), ("2.5", 2.5), ('"10m"', 600.0), ('"0"', 0.0)])
def test_embedded_linger_is_a_duration_or_a_number_of_seconds(
        value: str, seconds: float, config_file: ConfigFile,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGLOCK_EMBEDDED_LINGER", raising=False)
    path = config_file(f"embedded_linger = {value}")
    assert config.embedded_linger(*config.read_config_file()) == seconds
    assert config.read_config_file()[0] == path


@pytest.mark.parametrize("value", ["-1", "nan", "inf", str(8 * 86400)])
def test_embedded_linger_out_of_range_is_refused(value: str, config_file: ConfigFile,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGLOCK_EMBEDDED_LINGER", raising=False)
    config_file(f"embedded_linger = {value}")
    with pytest.raises(ConfigError, match=r"embedded_linger: .* is out of range"):
        config.embedded_linger(*config.read_config_file())


def test_an_unusable_schema_in_the_config_file_is_refused(config_file: ConfigFile) -> None:
    config_file('schema = ""')
    with pytest.raises(ConfigError, match="schema must be a non-empty string"):
        config.configured_schema(None)


def test_a_schema_that_is_not_a_string_in_the_config_file_is_refused(
        config_file: ConfigFile) -> None:
    config_file("schema = 5")
    with pytest.raises(ConfigError):
        config.configured_schema(None)


# check_job -----------------------------------------------------------------------------


@pytest.mark.parametrize("job", [
    "a", "sync-invoices", "j" * 200, "ü" * 199 + "日", "with space", "x'; DROP TABLE runs; --",
    "nbsp\u00a0ok", "tab-free", "%s {schema}",
])
def test_usable_job_names(job: str) -> None:
    assert config.check_job(job) == job


@pytest.mark.parametrize(("job", "says"), [
    ("", "--job: the job name is empty"),
    ("j" * 201, "--job: the job name is 201 characters long; the limit is 200"),
    ("a\nb", "--job: the job name 'a\\nb' contains a control character"),
    ("a\tb", "--job: the job name 'a\\tb' contains a control character"),
    ("bell\x07", "--job: the job name 'bell\\x07' contains a control character"),
    ("nul\x00", "--job: the job name 'nul\\x00' contains a control character"),
    ("del\x7f", "--job: the job name 'del\\x7f' contains a control character"),
    ("c1\x85", "--job: the job name 'c1\\x85' contains a control character"),
    ("c1\x9f", "--job: the job name 'c1\\x9f' contains a control character"),
])
def test_unusable_job_names_are_usage_errors(job: str, says: str) -> None:
    with pytest.raises(UsageError) as raised:
        config.check_job(job)
    assert str(raised.value) == says


def test_a_build_without_the_embedded_server_says_so_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "has_embedded", lambda: False)
    with pytest.raises(ConfigError, match="this build of pglock has no embedded server: set "
                                          "PGLOCK_DSN"):
        config.resolve_target(None)
    assert config.resolve_target("host=db").conninfo == "host=db"


def test_the_embedded_refusal_names_the_config_file_pglock_read(
        config_file: ConfigFile, monkeypatch: pytest.MonkeyPatch) -> None:
    path = config_file("embedded = false\n")
    with pytest.raises(ConfigError) as raised:
        config.resolve_target(None)
    assert str(raised.value) == (f"no database configured, and embedded = false in {path} "
                                 f"forbids the embedded one: set PGLOCK_DSN, or dsn in {path}")
    monkeypatch.setattr(config, "has_embedded", lambda: False)
    config_file('schema = "ops"\n')
    with pytest.raises(ConfigError, match=f"set PGLOCK_DSN, or dsn in {path}$"):
        config.resolve_target(None)
