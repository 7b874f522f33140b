"""Every duration, size and count has a range, refused outside it at parse time."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pglock.errors import UsageError
from pglock.lock import advisory, heartbeat
from pglock.run.options import RunOptions
from pglock.settings import schedule
from pglock.settings.durations import DURATIONS, HISTORY_LIMIT, format_bound, parse_duration

from ..inprocess import UNREACHABLE, invoke

RUN = ["run", "--job", "x", "--dsn", UNREACHABLE, "--connect-timeout", "0"]
# Where each duration option is given, with the rest of a command line that is fine.
WHERE = {
    "--ttl": RUN, "--connect-timeout": ["status"], "--wait": RUN, "--jitter": RUN,
    "--min-hold": RUN, "--max-runtime": RUN, "--kill-after": RUN,
    "--deadline": [*RUN, "--schedule", "* * * * *"], "--grace": [*RUN, "--schedule", "* * * * *"],
    "--since": ["history"], "--older-than": ["prune", "--yes"], "--interval": ["status"],
    "--retry-delay": RUN, "--hook-timeout": RUN,
    "--candidate-step": [*RUN, "--candidates", "3"],
    "--candidates-refresh": [*RUN, "--candidates", "3"],
    "--until": ["pause", "--job", "x", "--reason", "r", "--dsn", UNREACHABLE],
    "--paused-warning": ["check"], "--slow-warning": ["check"], "--slow-critical": ["check"],
}
TOO_BIG = ["106752d", "400000d", "3000000d", "1000000000d", "9" * 400]


def line(command: list[str], option: str, value: str) -> list[str]:
    tail = ["--", "true"] if command[0] == "run" else []
    return [*command, option, value, *tail]


@pytest.mark.parametrize("option", sorted(DURATIONS))
@pytest.mark.parametrize("value", TOO_BIG)
def test_a_duration_beyond_its_range_is_a_usage_error(option: str, value: str) -> None:
    called = invoke(*line(WHERE[option], option, value))
    message = f"{option}: {value} is out of range ({DURATIONS[option].text()})"
    if WHERE[option][0] == "check":
        # A plugin answers UNKNOWN, the reason on stdout and stderr.
        assert (called.code, called.stdout) == (3, f"PGLOCK UNKNOWN - {message}\n")
    else:
        assert (called.code, called.stdout) == (2, "")
    assert called.stderr == f"pglock: {message}\n"


@pytest.mark.parametrize("option", [o for o, b in DURATIONS.items() if b.low > 0 or b.above])
def test_a_duration_below_its_range_is_a_usage_error(option: str) -> None:
    called = invoke(*line(WHERE[option], option, "0"))
    assert called.code == 2
    assert "--ttl" in called.stderr if option == "--ttl" else "out of range" in called.stderr


def test_status_watch_interval_zero_is_refused() -> None:
    called = invoke("status", "--watch", "--interval", "0")
    assert (called.code, called.stderr) == (2, "pglock: --interval: 0 is out of range "
                                               "(500ms to 1h)\n")


@pytest.mark.parametrize("value", ["0", "100001", str(2**63), str(10**30)])
def test_history_limit_has_a_range(value: str) -> None:
    called = invoke("history", "--limit", value)
    assert called.code == 2
    assert called.stderr == f"pglock: --limit: {value} is out of range (1 to 100000)\n"
    assert HISTORY_LIMIT.high == 100_000


@pytest.mark.parametrize(("value", "message"), [
    ("0", "--candidates: 0 is out of range (1 to 1000)"),
    ("-1", "--candidates: -1 is out of range (1 to 1000)"),
    ("1001", "--candidates: 1001 is out of range (1 to 1000)"),
    ("x", "Invalid value for '--candidates': 'x' is not a valid int. (see 'pglock run "
          "--help')"),
    ("1.5", "Invalid value for '--candidates': '1.5' is not a valid int. (see 'pglock run "
            "--help')")])
def test_candidates_has_a_range(value: str, message: str) -> None:
    """--candidates K: 1 to 1000 hosts per slot; anything else is one line, exit 2, before
    any connection (the DSN does not parse)."""
    called = invoke(*line(RUN, "--candidates", value))
    assert (called.code, called.stdout, called.stderr) == (2, "", f"pglock: {message}\n")


@pytest.mark.parametrize(("args", "message"), [
    (["--candidate-step", "5s"], "--candidate-step needs --candidates"),
    (["--candidates-refresh", "1h"], "--candidates-refresh needs --candidates"),
    (["--candidates", "2", "--limit", "3"],
     "--candidates must be at least --limit: a semaphore's seats are taken by candidates "
     "only")])
def test_the_candidates_options_go_together(args: list[str], message: str) -> None:
    called = invoke(*RUN, *args, "--", "true")
    assert (called.code, called.stderr) == (2, f"pglock: {message}\n")


def test_a_crontab_variable_of_the_candidates_applies_only_with_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """PGLOCK_CANDIDATE_STEP set for a whole crontab is ignored by its lines without
    --candidates (as PGLOCK_TZ by those without --schedule): they fail only at the
    unreachable database."""
    monkeypatch.setenv("PGLOCK_CANDIDATE_STEP", "3s")
    called = invoke(*RUN, "--", "true")
    assert called.code == 125, called.stderr


@pytest.mark.parametrize("value", ["2MiB", "99999999999999999999999999", "9" * 5000])
def test_output_tail_has_a_range(value: str) -> None:
    called = invoke(*line(RUN, "--output-tail", value))
    assert called.code == 2
    assert called.stderr.startswith("pglock: --output-tail") and called.stderr.count("\n") == 1


@given(st.sampled_from(sorted(DURATIONS)), st.floats(min_value=0, max_value=1e12))
def test_every_accepted_duration_fits_everything_derived_from_it(option: str,
                                                                 seconds: float) -> None:
    text = f"{seconds:f}"
    try:
        value = parse_duration(text, option=option)
    except UsageError:
        assert not DURATIONS[option].admits(float(text))
        return
    assert math.isfinite(value)
    # A database interval and a timestamp as far out as a reader computes (now + value,
    # twice over) still fit Python's datetime.
    assert datetime.now(UTC) + 2 * timedelta(seconds=value) < datetime(9999, 1, 1, tzinfo=UTC)


def test_the_longest_ttl_gives_timeouts_the_server_accepts() -> None:
    ttl = DURATIONS["--ttl"].high
    idle, total = advisory.server_drop_bound(ttl)
    # tcp_user_timeout is an int of milliseconds, tcp_keepalives_idle of seconds.
    assert total * 1000 < 2**31 - 1 and idle < 2**31 - 1
    heartbeat.check_ttl(ttl, DURATIONS["--kill-after"].high)


def test_the_longest_default_grace_is_within_the_grace_range() -> None:
    slot = datetime(2028, 2, 29, tzinfo=UTC)
    # Every four years: 10% of the interval.
    leap = schedule.slot_info(schedule.parse("0 0 29 2 *", "UTC"), slot + timedelta(days=1))
    assert leap.default_grace == pytest.approx((slot - leap.previous).total_seconds() / 10)
    # A longer interval (a schedule with a year field) stops at --grace's upper bound.
    longer = schedule.SlotInfo(slot, slot - timedelta(days=28 * 365), slot)
    assert longer.default_grace == DURATIONS["--grace"].high


@pytest.mark.parametrize(("field", "value"), [
    ("ttl", 1e9), ("min_hold", 1e12), ("grace", math.inf), ("jitter", -1.0),
    ("connect_timeout", math.nan), ("max_runtime", 0.0)])
def test_options_built_in_code_are_held_to_the_same_ranges(field: str, value: float) -> None:
    with pytest.raises(UsageError, match="out of range"):
        RunOptions(job="x", command=["true"], schedule="* * * * *",
                   **{field: value})  # type: ignore[arg-type]


def test_the_readme_lists_every_range() -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    operators = (Path(__file__).parents[3] / "docs" / "operators.md").read_text()
    for option, bounds in DURATIONS.items():
        low = "more than 0" if bounds.above else format_bound(bounds.low)
        assert f"{low} to {format_bound(bounds.high)}" in readme + operators, option


@pytest.mark.parametrize("value", ["-1", "101", "many"])
def test_retries_out_of_range_are_a_usage_error(value: str) -> None:
    called = invoke("run", "--job", "j", "--retries", value, "--", "true")
    assert called.code == 2, called
    assert called.stderr.count("\n") == 1 and "--retries" in called.stderr, called.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--next"], "--next and --slot need --job NAME"),
    (["--job", "x", "--next", "--slot", "2026-11-22T03:00"], "--next and --slot: give one"),
    (["--job", "x", "--slot", "soon"], "--slot: 'soon' is not a time (2026-11-24T03:00, "
                                       "2026-11-24 03:00+01:00)")])
def test_hosts_next_and_slot_are_refused_in_one_line(args: list[str], message: str) -> None:
    called = invoke("hosts", *args, "--dsn", UNREACHABLE)
    assert (called.code, called.stdout, called.stderr) == (2, "", f"pglock: {message}\n")
