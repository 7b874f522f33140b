"""Generated input for the property tests, kept in one place (issue 21): hostile strings,
every TOML value type for every jobs-file key, commands' argv, cron expressions.

A new option of `run` is covered by the jobs-file strategies without an edit here: the keys
come from `jobsfile.table_keys()`. The settings every property test uses are `PURE` (the
unit layer: parse only, many examples) and `PROCESS` (real processes: few examples).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# The unit layer's properties: pure parsing, cheap; derandomized so that a failure is
# reproduced by the next run (CI and a laptop see the same examples).
PURE = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
# Process-level properties (a real pglock, a real server): few examples, marked slow.
PROCESS = settings(max_examples=25, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow,
                                          HealthCheck.function_scoped_fixture])

# Text as a hostile operator types it: NUL, control characters, escapes, bytes that are
# not UTF-8 (as Python keeps them: lone surrogates), line separators, huge.
HOSTILE_PIECES = ["\x00", "\n", "\r", "\t", "\x1b[2J", "\x7f", "\x85", "\u2028", "\udcff",
                  "|", "%", "'", '"', "\\", "$(id)", "`id`", " ", "=", "#", "@", "é", "x" * 5000]
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(max_size=8)),
                        max_size=4).map("".join)

# Every TOML value type tomllib gives back.
toml_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
              st.floats(allow_nan=True), hostile_text, st.sampled_from(["", "5m", "1h", "0"]),
              st.datetimes(timezones=st.just(UTC)),
              st.just(datetime(2024, 1, 1)), st.dates(), st.times()),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=4), inner, max_size=2)),
    max_leaves=4)

# A command's argv: a program and arguments, any of them hostile.
argv = st.lists(st.one_of(st.sampled_from(["true", "/bin/echo", "sh"]), hostile_text),
                min_size=1, max_size=4)


def jobs_file_tables() -> st.SearchStrategy[dict[str, Any]]:
    """A job's table: a command, and one or two keys of run's options with any value."""
    from pglock.run.jobsfile import table_keys

    keys = sorted(table_keys())
    command = st.one_of(argv, hostile_text, toml_values)
    others = st.dictionaries(st.one_of(st.sampled_from(keys), st.sampled_from(keys), hostile_text),
                             st.one_of(toml_values, hostile_text),
                             max_size=2)
    return st.tuples(command, others).map(lambda pair: {"command": pair[0], **pair[1]})


# Cron expressions: cron's own syntax, croniter's extensions, and junk, field by field.
_MONTHS = ["jan", "FEB", "Mar", "dec"]
_DAYS = ["sun", "MON", "Fri", "sat"]
_EXTENSIONS = ["R", "H", "L", "W", "?", "#", "15W", "5L", "5#2", "H/5", "~", "1~5", "LW",
               "*/5/2", "1-2-3", "*-5", "0/5", ",", "", "-1", "0x1", "60", "32", "99999"]


def _number(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(min_value=low, max_value=high + 1).map(str)


def _element(low: int, high: int, names: list[str]) -> st.SearchStrategy[str]:
    value = st.one_of(_number(low, high), st.sampled_from(names)) if names \
        else _number(low, high)
    step = st.integers(min_value=0, max_value=high + 2).map(lambda n: f"/{n}")
    return st.one_of(
        st.just("*"),
        st.tuples(st.just("*"), step).map("".join),
        value,
        st.tuples(value, st.just("-"), value).map("".join),
        st.tuples(value, st.just("-"), value, step).map("".join),
        st.sampled_from(_EXTENSIONS))


def _field(low: int, high: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    return st.lists(_element(low, high, names or []), min_size=1, max_size=3).map(",".join)


cron_expressions = st.one_of(
    st.tuples(_field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12, _MONTHS),
              _field(0, 7, _DAYS)).map(" ".join),
    st.sampled_from(["@daily", "@DAILY", "@Hourly", "@reboot", "@every", "@yearly",
                     "* * * * * *", "* * * *", "0 0 1 1 * 2020"]),
)
