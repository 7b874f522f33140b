"""No password in any message: the redactor, and every command fed DSNs full of @ / : ' = %."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pglock.db import database, redact

from ..inprocess import invoke

# Every password starts so: it then cannot turn up in a message by coincidence (as a
# password "db" would in the host name), only by a leak.
MARK = "S3cr"
SPECIALS = "@/:'=% \\\"?&#"
password_chars = st.sampled_from(SPECIALS) | st.characters(
    min_codepoint=33, max_codepoint=0x2FF, exclude_characters="\x7f")
passwords = st.builds(lambda tail: MARK + tail, st.text(password_chars, min_size=1, max_size=24))
url_passwords = st.builds(lambda tail: MARK + tail, st.text(
    st.sampled_from("@/:'=%?&#") | st.characters(min_codepoint=48, max_codepoint=122),
    min_size=1, max_size=24))
names = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz"), min_size=1, max_size=8)


def keyword_quoted(value: str) -> str:
    """A libpq keyword value, quoted and escaped as libpq reads it."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@st.composite
def keyword_dsns(draw: st.DrawFn, host: str | None = None,
                 port: str | None = None) -> tuple[str, str]:
    password = draw(passwords)
    user = draw(names)
    parts = [f"host={host or draw(names)}", f"port={port or '5432'}", f"user={user}",
             f"password={keyword_quoted(password)}", f"dbname={draw(names)}"]
    return " ".join(draw(st.permutations(parts))), password


@st.composite
def url_dsns(draw: st.DrawFn, host: str | None = None,
             port: str | None = None) -> tuple[str, str]:
    """URIs as operators type them: the password unencoded, / @ : and all."""
    password = draw(url_passwords)
    scheme = draw(st.sampled_from(["postgresql", "postgres"]))
    query = draw(st.sampled_from(["", "?sslmode=disable", "?connect_timeout=1"]))
    return (f"{scheme}://{draw(names)}:{password}@{host or draw(names)}:{port or '5432'}"
            f"/{draw(names)}{query}"), password


any_dsn = keyword_dsns() | url_dsns()
unreachable_dsn = keyword_dsns("127.0.0.1", "1") | url_dsns("127.0.0.1", "1")


@given(any_dsn, st.sampled_from(["{}", "cannot connect to {}: refused", "a\n{}\nb", "{} {}"]))
def test_redact_removes_the_password_of_any_dsn_fragment(dsn_password: tuple[str, str],
                                                           around: str) -> None:
    dsn, password = dsn_password
    assert password not in redact.redact(around.format(dsn, dsn))


@given(any_dsn)
def test_the_place_shown_never_holds_the_password(dsn_password: tuple[str, str]) -> None:
    dsn, password = dsn_password
    try:
        parsed = {k: str(v) for k, v in database.libpq_conninfo.conninfo_to_dict(dsn).items()}
    except Exception:
        parsed = {}
    where = redact.place(dsn, parsed)
    assert where is None or password not in str(where)


def test_redact_keeps_what_is_not_a_password() -> None:
    assert redact.redact("postgresql://app@db/x") == "postgresql://app@db/x"
    assert redact.redact("postgresql://app:pw@db/x") == "postgresql://app:***@db/x"
    assert redact.redact("host=db password='a b' user=x") == "host=db password=*** user=x"
    assert redact.redact("host=db password = 'unterminated") == "host=db password = ***"
    assert redact.redact("no dsn here") == "no dsn here"


def test_a_url_with_an_unencoded_slash_names_no_part_of_the_password() -> None:
    # libpq reads this as host "app", port "Zm9v" and database "YmFy+cXV4@db:5432/app".
    dsn = "postgresql://app:Zm9v/YmFy+cXV4@db:5432/app"
    called = invoke("run", "--job", "x", "--dsn", dsn, "--connect-timeout", "0", "--", "true")
    assert called.code == 125
    assert "Zm9v" not in called.printed and "YmFy" not in called.printed
    assert "percent-encode" in called.stderr


def test_pghost_and_pgport_are_named_as_libpq_uses_them() -> None:
    called = invoke("status", "--connect-timeout", "0",
                    env={"PGHOST": "127.0.0.1", "PGPORT": "1"})
    assert called.code == 125
    assert "cannot connect to 127.0.0.1:1" in called.stderr
    assert "localhost:5432" not in called.stderr


COMMANDS = [
    ["run", "--job", "x", "--", "true"],
    ["run", "--job", "x", "--mode", "advisory", "--", "true"],
    ["init"],
    ["status"],
    ["status", "--json"],
    ["history"],
    ["clear", "--job", "x", "--yes"],
    ["prune", "--older-than", "1d", "--yes"],
    ["check"],
    ["check", "--json"],
    ["metrics"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dsn_password=unreachable_dsn, how=st.sampled_from(["--dsn", "PGLOCK_DSN", "config"]))
def test_no_command_prints_the_password(command: list[str], dsn_password: tuple[str, str],
                                        how: str, tmp_path: Path) -> None:
    dsn, password = dsn_password
    args, env = [*command], {}
    if how == "--dsn":
        args[1:1] = ["--dsn", dsn]
    elif how == "PGLOCK_DSN":
        env["PGLOCK_DSN"] = dsn
    else:
        config = tmp_path / "config.toml"
        config.write_text(f"dsn = {toml_string(dsn)}\n")
        env["PGLOCK_CONFIG"] = str(config)
    args[1:1] = ["--connect-timeout", "0"]
    called = invoke(*args, env=env)
    assert called.code != 0
    assert password not in called.printed
    assert MARK not in called.printed


def toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.mark.parametrize("command", [["run", "--job", "x", "--", "true"], ["check"]],
                         ids=" ".join)
def test_a_config_file_that_is_not_utf8_is_named_never_shown(command: list[str],
                                                             tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b"# caf\xe9\ndsn = 'postgresql://postgres:hunter2@db/postgres'\n")
    called = invoke(*command, env={"PGLOCK_CONFIG": str(config)})
    assert "hunter2" not in called.printed
    assert str(config) in called.printed
    assert "not valid UTF-8" in called.printed
    if command[0] == "run":
        assert (called.code, called.stdout) == (125, "")
    else:
        assert called.code == 3


@pytest.mark.parametrize("where", ["--job", "--holder", "PGLOCK_HOLDER"])
def test_a_name_that_is_not_utf8_is_refused_without_the_password(where: str) -> None:
    dsn = "postgresql://postgres:hunter2@127.0.0.1:1/postgres"
    bad = os.fsdecode(b"bad\xffname")
    args = ["run", "--job", bad if where == "--job" else "x", "--dsn", dsn,
            "--connect-timeout", "0"]
    if where == "--holder":
        args += ["--holder", bad]
    called = invoke(*args, "--", "true", env={"PGLOCK_HOLDER": bad} if where.isupper() else {})
    assert called.code == 2
    assert "hunter2" not in called.printed
    assert "not valid UTF-8" in called.stderr
    assert called.stderr.count("\n") == 1
