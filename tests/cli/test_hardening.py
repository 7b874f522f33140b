"""Hostile and odd input against a real server: never a lock left behind, text shown as data."""

from __future__ import annotations

import os
import re

from conftest import Env, one_line

ESCAPE = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def test_a_non_utf8_command_path_runs_and_is_recorded_escaped(env: Env) -> None:
    missing = os.fsdecode(b"/nonexistent/caf\xe9")
    result = env.run("run", "--job", "latin", "--", missing)
    assert result.returncode == 127, result
    assert "caf\\xe9" in one_line(result.stderr)
    script = env.tmp / os.fsdecode(b"caf\xe9.sh")
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    # The lock was released at once: a deliberate rerun does not wait out a ttl.
    result = env.run("run", "--job", "latin", "--rerun", "--", str(script))
    assert (result.returncode, result.stdout, result.stderr) == (0, "ran\n", "")
    rows = env.runs("latin")
    assert [(r["outcome"], r["exit_code"]) for r in rows] == [("failed", 127), ("succeeded", 0)]
    assert rows[0]["command"] == "/nonexistent/caf\\xe9"
    assert rows[1]["command"].endswith("caf\\xe9.sh")


def test_an_empty_command_name_is_not_found(env: Env) -> None:
    result = env.run("run", "--job", "empty", "--", "")
    assert result.returncode == 127, result
    assert "command not found" in one_line(result.stderr)
    assert [(r["outcome"], r["exit_code"]) for r in env.runs("empty")] == [("failed", 127)]


def test_holder_and_reason_are_shown_escaped(env: Env) -> None:
    forged = "web-1\nforged  running  \x1b[2J"
    # A short ttl: the cleared holder notices at its next renewal (ttl/3), not 20 s later.
    holder, _ = env.start_holder("held", "--holder", forged, "--ttl", "6s")
    try:
        status = env.run("status")
        assert status.returncode == 0
        assert not ESCAPE.search(status.stdout)
        assert "web-1^Jforged  running  ^[[2J" in status.stdout
        cleared = env.run("clear", "--job", "held", "--yes", "--reason", "oops\x1b]0;pwned\x07")
        assert cleared.returncode == 0, cleared
        assert not ESCAPE.search(cleared.stdout)
        assert "web-1^Jforged" in cleared.stdout
    finally:
        holder.communicate(timeout=60)
    history = env.run("history", "--job", "held")
    assert not ESCAPE.search(history.stdout)
    assert "oops^[]0;pwned^G" in history.stdout
    assert "web-1^Jforged" in history.stdout


def test_names_that_look_identical_are_one_job(env: Env) -> None:
    decomposed, composed = "caf" + "e\u0301", "caf\u00e9"
    assert env.run("run", "--job", decomposed, "--", "true").returncode == 0
    assert env.run("run", "--job", composed, "--rerun", "--", "true").returncode == 0
    assert env.query("SELECT job, fencing_token FROM {schema}.locks") == [(composed, 2)]
    status = env.run("status", "--job", decomposed, "--json")
    assert status.returncode == 0, status


def test_advisory_mode_with_the_longest_ttl_is_accepted_by_the_server(env: Env) -> None:
    result = env.run("run", "--job", "long", "--mode", "advisory", "--ttl", "7d", "--",
                     "echo", "ok")
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok\n", "")


def test_every_command_finds_a_job_by_any_spelling_of_its_name(env: Env) -> None:
    decomposed, composed = "caf" + "e\u0301", "caf\u00e9"
    assert env.run("run", "--job", composed, "--", "false").returncode == 1
    for command in (["status"], ["history"], ["check"]):
        result = env.run(*command, "--job", decomposed)
        assert composed in result.stdout, (command, result)
    assert 'job="café"' in env.run("metrics", "--job", decomposed).stdout


def test_standard_output_escapes_what_its_encoding_cannot_carry(env: Env) -> None:
    assert env.run("run", "--job", "ジョブ", "--", "false").returncode == 1
    for encoding in ("ascii", "latin-1"):
        narrow = {"PYTHONIOENCODING": encoding}
        for args, code in ((("status",), 0), (("status", "--job", "ジョブ"), 0),
                           (("check",), 2), (("history",), 0), (("jobs",), 0)):
            result = env.run(*args, env=narrow)
            assert (result.returncode, result.stderr) == (code, ""), (encoding, args, result)
            assert "\\u30b8\\u30e7\\u30d6" in result.stdout, (encoding, args, result.stdout)
