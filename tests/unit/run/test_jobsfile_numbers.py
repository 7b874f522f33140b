"""Numbers in the jobs file: every duration key takes a number of seconds, as the README and
docs/jobs-file.md say, and output-tail a number of bytes (issue 21, item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pglock.errors import UsageError
from pglock.run import jobsfile
from pglock.settings.durations import DURATIONS

# Every duration key of a job's table: DURATIONS' options that run has, and --hook-timeout.
DURATION_KEYS = sorted(
    key for key, (_, kind) in jobsfile.table_keys().items()
    if f"--{key}" in DURATIONS or key == "hook-timeout")


def test_every_duration_key_is_listed() -> None:
    assert {"ttl", "hook-timeout", "retry-delay", "kill-after", "connect-timeout"} <= set(
        DURATION_KEYS)


@pytest.mark.parametrize("key", DURATION_KEYS)
@pytest.mark.parametrize(("number", "text"), [(30, "30"), (30.5, "30.5"), (1.5e2, "150")])
def test_a_duration_key_takes_a_number_of_seconds(key: str, number: float, text: str) -> None:
    table = {"command": ["true"], "schedule": "* * * * *", "candidates": 3, key: number}
    job = jobsfile.checked(Path("config.toml"), "j", table)
    assert job.values[key.replace("-", "_")] == text


def test_output_tail_takes_a_number_of_bytes() -> None:
    job = jobsfile.checked(Path("config.toml"), "j", {"command": ["true"], "output-tail": 512})
    assert job.values["output_tail"] == "512"


@pytest.mark.parametrize(("key", "value", "line"), [
    ("ttl", -5.0, "config file config.toml: [jobs.j] ttl: '-5' is not a duration "
                  "(examples: 90, 90s, 5m, 1h30m)"),
    ("ttl", 1e300, "config file config.toml: [jobs.j] ttl: '1e+300' is not a duration "
                   "(examples: 90, 90s, 5m, 1h30m)"),
    ("hook-timeout", True, 'config file config.toml: [jobs.j] hook-timeout: must be a '
                           'duration in a string ("90s", "5m", "1h30m") or a number of seconds'),
    ("output-tail", [1], 'config file config.toml: [jobs.j] output-tail: must be a size in a '
                         'string ("4KiB", "1MiB") or a number of bytes'),
])
def test_a_number_that_is_no_duration_is_refused_naming_its_key(key: str, value: object,
                                                                line: str) -> None:
    with pytest.raises(UsageError) as refused:
        jobsfile.checked(Path("config.toml"), "j", {"command": ["true"], key: value})
    assert str(refused.value) == line
