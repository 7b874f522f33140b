"""Generated values for the options that take a URL, a moment, a duration or an operator's
text (issue 21, items 4-6; the table is strategies.OPTION_VALUES): every value gets 0 or
a documented exit code and at most one line on stderr, never "internal error"."""

from __future__ import annotations

from hypothesis import given

from ..inprocess import UNREACHABLE, invoke
from ..strategies import OPTION_VALUES, PURE, option_values


@PURE
@given(option_values)
def test_any_value_of_these_options_is_taken_or_refused_in_one_line(
        given_value: tuple[str, str]) -> None:
    option, value = given_value
    before, _, codes = OPTION_VALUES[option]
    tail = ["--", "true"] if before[0] == "run" else []
    called = invoke(*before, "--dsn", UNREACHABLE, "--connect-timeout", "0",
                    f"{option}={value}", *tail)
    assert called.code in codes, called
    assert "internal error" not in called.printed and "Traceback" not in called.printed
    assert called.stderr.count("\n") <= 1 and called.stderr.startswith("pglock: "), called
    if called.code == 2:
        # Refused: the option is named, and a ping URL's text is never repeated.
        assert option in called.stderr or "argument" in called.stderr, called
