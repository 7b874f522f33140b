"""Operator commands through the binary (issue 21, N7, N10, N11): text is data in check,
a LOGNAME that is not UTF-8 is written escaped, moments out of range are usage errors."""

from __future__ import annotations

import pytest
from conftest import Env, one_line
from hypothesis import given
from hypothesis import strategies as st
from unit import strategies


def test_a_logname_not_utf8_is_written_escaped(env: Env) -> None:
    assert env.run("run", "--job", "j", "--", "true").returncode == 0
    paused = env.run("pause", "--job", "j", "--reason", "r", env={"LOGNAME": "r\udcffoot"})
    assert (paused.returncode, paused.stderr) == (0, ""), paused
    [(by,)] = env.query("SELECT by FROM {schema}.audit")
    assert by.startswith("r\\xffoot@")
    status = env.run("status", "--job", "j")
    assert status.returncode == 0 and "by r\\xffoot@" in status.stdout, status


def test_a_reason_cannot_forge_plugin_lines_or_perfdata_in_check(env: Env) -> None:
    assert env.run("run", "--job", "j", "--", "true").returncode == 0
    reason = "maint\nFAKE|perf=1 \x1b[2J"
    assert env.run("pause", "--job", "j", "--reason", reason).returncode == 0
    checked = env.run("check", "--paused-warning", "0")
    assert checked.returncode == 1, checked
    summary, line = checked.stdout.splitlines()
    assert summary.count("|") == 1 and summary.startswith("PGLOCK WARNING - 1 job: ")
    assert line.startswith("WARNING: j: paused ")
    assert line.endswith(": maint^JFAKE\u00a6perf=1 ^[[2J")


@pytest.mark.parametrize(("args", "zone", "message"), [
    (["pause", "--job", "j", "--until", "1000000000d"], "UTC",
     "--until: 1000000000d is out of range (more than 0 to 366d)"),
    (["pause", "--job", "j", "--until", "9999-12-31T23:59"], "America/Los_Angeles",
     "--until: 9999-12-31T23:59 is more than 366d ahead"),
    (["replay", "--job", "j", "--slot", "0001-01-01T00:00"], "Asia/Tokyo",
     "--slot: 0001-01-01T00:00 is more than 36500d in the past"),
    (["replay", "--job", "j", "--slot", "9999-12-31T23:59"], "America/Los_Angeles",
     "--slot: 9999-12-31T23:59 is more than 1d ahead"),
])
def test_a_moment_out_of_range_is_a_usage_error(env: Env, args: list[str], zone: str,
                                                message: str) -> None:
    called = env.run(*args, "--reason", "r", env={"TZ": zone})
    assert (called.returncode, called.stdout) == (2, "")
    assert one_line(called.stderr) == f"pglock: {message}"
    assert env.query("SELECT to_regclass(%s)", [f"{env.schema}.audit"]) == [(None,)]


# The server's side of the generated values: a moment or duration the parse lets through
# must be one the database takes (exit 0, or 1 for a slot that is not there), never 125 or
# "internal error". Values that need no server are covered in tests/unit/cli.
# The ends first: few examples reach the server, so they go where the failures were.
AT_THE_SERVER = {"--until": st.one_of(strategies.edge_moments, strategies.edge_durations),
                 "--slot": strategies.edge_moments,
                 "--reason": strategies.hostile_text}


@pytest.mark.slow
@strategies.PROCESS
@given(st.sampled_from(sorted(AT_THE_SERVER)).flatmap(
    lambda option: st.tuples(st.just(option), AT_THE_SERVER[option])))
def test_any_value_the_parse_takes_the_database_takes(env: Env,
                                                      given_value: tuple[str, str]) -> None:
    option, value = given_value
    before, _, _ = strategies.OPTION_VALUES[option]
    if "\0" in value:
        return  # no process can be given a NUL (the unit layer covers it)
    # Operator commands never create the schema (docs/operators.md): a job's first run or
    # init does; idempotent, so once per example is cheap.
    assert env.run("init", "-q").returncode == 0
    called = env.run(*before, f"{option}={value}")
    assert called.returncode in (0, 1, 2), called
    assert "internal error" not in called.stderr and "Traceback" not in called.stderr
    if called.returncode:
        one_line(called.stderr)
