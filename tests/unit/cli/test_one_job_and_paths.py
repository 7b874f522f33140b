"""Small refusals of issue 21, item 8: a second --job on a one-job command (exit 2, where
click kept the last silently); an unusable XDG_DATA_HOME named in the one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pglock.cli import runline

from ..inprocess import UNREACHABLE, invoke

ONE_JOB = [
    ("run", "--job", "a", "--job", "b", "--", "true"),
    ("run", "-j", "a", "-jb", "--", "true"),
    ("status", "--job", "a", "--job=b"),
    ("history", "-j", "a", "-j", "b"),
    ("clear", "-j", "a", "-j", "b", "--yes"),
    ("stop", "-j", "a", "--reason", "r", "-j", "b"),
    ("forget", "-j", "a", "-j", "b", "--reason", "r"),
    ("replay", "-j", "a", "-j", "b", "--reason", "r"),
    ("metrics", "-j", "a", "-j", "b"),
]


@pytest.mark.parametrize("argv", ONE_JOB, ids=" ".join)
def test_a_repeated_job_on_a_one_job_command_is_refused(argv: tuple[str, ...]) -> None:
    called = invoke(*argv, env={"PGLOCK_DSN": UNREACHABLE})
    assert (called.code, called.stdout) == (2, "")
    assert called.stderr == f"pglock: --job: given 2 times; pglock {argv[0]} takes one job\n"


def test_runline_leaves_a_repeated_job_to_typer_which_refuses_it() -> None:
    assert runline.parse(["--job", "x", "--job", "y", "--", "true"], {}) is None


def test_check_answers_unknown_for_a_repeated_job() -> None:
    called = invoke("check", "-j", "a", "-j", "b", env={"PGLOCK_DSN": UNREACHABLE})
    assert called.code == 3
    assert called.stdout == "PGLOCK UNKNOWN - --job: given 2 times; pglock check takes one job\n"


@pytest.mark.parametrize("argv", [
    ("pause", "-j", "a", "-j", "b", "--reason", "r"),   # several jobs: no refusal
    ("run", "-j", "a", "--", "echo", "-j", "b"),        # the command's own -j
    ("stop", "--reason", "-j", "--job", "a"),           # -j as a value
])
def test_a_job_given_once_or_to_a_many_job_command_passes(argv: tuple[str, ...]) -> None:
    called = invoke(*argv, env={"PGLOCK_DSN": UNREACHABLE, "PGLOCK_CONNECT_TIMEOUT": "0"})
    assert called.code == 125, called  # past parsing, to the database that is not there
    assert "--job: given" not in called.stderr


def test_an_unusable_data_home_is_named(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    called = invoke("status", env={"XDG_DATA_HOME": str(not_a_directory)})
    assert called.code == 125
    assert called.stderr == (
        f"pglock: cannot use {not_a_directory}/pglock for the embedded PostgreSQL: Not a "
        "directory (set XDG_DATA_HOME to a writable directory, or PGLOCK_DSN)\n")


@pytest.mark.parametrize(("argv", "variables", "line"), [
    (("run", "-j", "x", "--limit", "x", "--", "true"), {},
     "Invalid value for '--limit': 'x' is not a valid int. (see 'pglock run --help')"),
    (("history", "--limit", "1.5"), {},
     "Invalid value for '--limit': '1.5' is not a valid int. (see 'pglock history --help')"),
    # From the environment: the variable is what to fix, and it is named.
    (("run", "-j", "x", "--", "true"), {"PGLOCK_LIMIT": "x"},
     "Invalid value for '--limit' (env var: 'PGLOCK_LIMIT'): 'x' is not a valid int. "
     "(see 'pglock run --help')"),
    # Digits of other scripts: int() reads them, no one means them (issue 46, D18).
    *((argv, variables, f"{line} (see 'pglock {argv[0]} --help')")
      for argv, variables, line in [
        (("run", "-j", "x", "--retries", "\u0661", "--", "true"), {},
         "Invalid value for '--retries': '\u0661' is not a valid int (digits 0-9)."),
        (("run", "-j", "x", "--conflict-exit-code=\u0667\u0665", "--", "true"), {},
         "Invalid value for '--conflict-exit-code': '\u0667\u0665' is not a valid int "
         "(digits 0-9)."),
        (("run", "-j", "x", "--schedule", "* * * * *", "--catch-up", "all",
          "--catch-up-limit", "\u0663", "--", "true"), {},
         "Invalid value for '--catch-up-limit': '\u0663' is not a valid int (digits 0-9)."),
        (("history", "--limit", "\u0663"), {},
         "Invalid value for '--limit': '\u0663' is not a valid int (digits 0-9)."),
        (("run", "-j", "x", "--", "true"), {"PGLOCK_LIMIT": "\u0662"},
         "Invalid value for '--limit' (env var: 'PGLOCK_LIMIT'): '\u0662' is not a valid "
         "int (digits 0-9)."),
        (("run", "-j", "x", "--", "true"), {"PGLOCK_RETRIES": "\uff11"},
         "Invalid value for '--retries' (env var: 'PGLOCK_RETRIES'): '\uff11' is not a "
         "valid int (digits 0-9)."),
    ]),
])
def test_a_bad_value_names_the_option_as_it_was_given(
        argv: tuple[str, ...], variables: dict[str, str], line: str) -> None:
    called = invoke(*argv, env={"PGLOCK_DSN": UNREACHABLE, **variables})
    assert (called.code, called.stderr) == (2, f"pglock: {line}\n")
