"""Generated input for the property tests, kept in one place (issue 21): hostile strings,
every TOML value type for every jobs-file key, commands' argv, cron expressions, and the
values of the options that take a URL, a moment, a duration or an operator's text
(OPTION_VALUES: a row per option, with where it is given and the exit codes it documents).

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


# The values of the options that take a URL, a moment, a duration or an operator's text
# (issue 21, items 4-6), each with where it is given: a new option of these kinds is
# covered by adding a row to OPTION_VALUES.
_UNITS = ["", "ms", "s", "m", "h", "d", "D", "w", "x"]
durations_text = st.one_of(
    st.tuples(st.integers(min_value=0, max_value=10**12).map(str),
              st.sampled_from(_UNITS)).map("".join),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["0", "1h30m", "366d", "367d", "106752d", "1000000000d", "9" * 400,
                     "-5m", "5 m", "1e9", ""]),
    hostile_text)
_OFFSETS = ["", "Z", "+00:00", "-08:00", "+14:00", "-12:00", "+23:59"]
# The ends of what Python and PostgreSQL hold, in the zones furthest from UTC.
edge_moments = st.tuples(
    st.sampled_from(["0001-01-01T00:00", "0001-01-02T00:00", "9999-12-31T23:59",
                     "9999-12-30T00:00", "1970-01-01T00:00", "2026-11-24T03:00"]),
    st.sampled_from(_OFFSETS)).map("".join)
edge_durations = st.sampled_from(["0", "1s", "366d", "367d", "106752d", "1000000000d",
                                  "9" * 400])
moments_text = st.one_of(
    edge_moments,
    st.tuples(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59))
              .map(lambda moment: moment.isoformat(timespec="minutes")),
              st.sampled_from(_OFFSETS)).map("".join),
    st.sampled_from(["0001-01-01T00:00", "9999-12-31T23:59", "9999-12-31T23:59-12:00",
                     "0001-01-01T00:00+14:00", "23:59", "24:00", "2026-02-30T00:00"]),
    hostile_text)
_HOSTS = ["example.com", "EXAMPLE.com", "127.0.0.1", "[::1]", "[::1", "::1]", "[zz]",
          "h:80", "h:99999", "h:x", "user:pw@h", "", "h\u00e9"]
ping_urls = st.one_of(
    st.tuples(st.sampled_from(["http", "HTTPS", "Http", "ftp", "file", "javascript", ""]),
              st.sampled_from(["://", ":", ":///", "//"]), st.sampled_from(_HOSTS),
              st.sampled_from(["", "/", "/key", "/key/", "/k?create=1", "/k#f"]),
              st.one_of(st.just(""), hostile_text)).map("".join),
    hostile_text)

# option: (the command line before it, the values to give it, the exit codes it documents
# besides 0: 2 a usage error, 125 the database (unreachable in the unit layer), 3 check's
# UNKNOWN).
RUN = ["run", "--job", "x"]
OPTION_VALUES: dict[str, tuple[list[str], st.SearchStrategy[str], frozenset[int]]] = {
    "--ping-url": (RUN, ping_urls, frozenset({2, 125})),
    "--hook-timeout": (RUN, durations_text, frozenset({2, 125})),
    "--until": (["pause", "--job", "x", "--reason", "r"], st.one_of(moments_text,
                                                                   durations_text),
                frozenset({2, 125})),
    "--slot": (["replay", "--job", "x", "--reason", "r"], moments_text, frozenset({2, 125})),
    "--reason": (["pause", "--job", "x"], hostile_text, frozenset({2, 125})),
    "--paused-warning": (["check"], durations_text, frozenset({3})),
    "--slow-warning": (["check"], durations_text, frozenset({3})),
    "--slow-critical": (["check"], durations_text, frozenset({3})),
}
option_values = st.sampled_from(sorted(OPTION_VALUES)).flatmap(
    lambda option: st.tuples(st.just(option), OPTION_VALUES[option][1]))
