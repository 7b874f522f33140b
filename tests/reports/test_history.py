"""`pglock history`, `prune`, job-name completion and bad input, over real runs."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import PGLOCK, Env, one_line
from operating import holding, on_terminal, pglock_json, plain

from pglock.settings.durations import format_duration


def make_runs(env: Env) -> None:
    """timed: three successes and a failure, of growing length; other: one run on web-2."""
    for seconds in ("0.1", "0.3", "0.5"):
        assert env.run("run", "--job", "timed", "--rerun", "--", "sleep",
                       seconds).returncode == 0
    assert env.run("run", "--job", "timed", "--rerun", "--", "sh", "-c",
                   "sleep 0.7; exit 4").returncode == 4
    assert env.run("run", "--job", "other", "--holder", "web-2", "--", "true").returncode == 0


@pytest.mark.slow  # its runs sleep, to differ in length
def test_history_filters_newest_first(env: Env) -> None:
    make_runs(env)
    every = pglock_json(env, "history")["runs"]
    assert [r["job"] for r in every] == ["other", "timed", "timed", "timed", "timed"]
    assert [r["id"] for r in every] == sorted((r["id"] for r in every), reverse=True)
    assert [r["outcome"] for r in pglock_json(env, "history", "--outcome", "failed")["runs"]] == [
        "failed"]
    assert [r["host"] for r in pglock_json(env, "history", "--host", "web-2")["runs"]] == ["web-2"]
    assert len(pglock_json(env, "history", "--limit", "2")["runs"]) == 2
    env.query("UPDATE {schema}.runs SET started_at = started_at - interval '2 hours' "
              "WHERE id = (SELECT min(id) FROM {schema}.runs)")
    assert len(pglock_json(env, "history", "--since", "1h")["runs"]) == 4
    assert len(pglock_json(env, "history", "--job", "timed", "--since", "1h")["runs"]) == 3

    screen = plain(env, "history")
    assert screen.splitlines()[2].split() == ["STARTED", "JOB", "HOST", "OUTCOME", "EXIT",
                                              "DURATION", "NOTE"]
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  other  web-2 +succeeded +0 ", screen,
                     re.MULTILINE), screen


@pytest.mark.slow  # its runs sleep, to differ in length
def test_job_summary_figures_match_the_recorded_runs(env: Env) -> None:
    make_runs(env)
    # An independent computation of the figures: PostgreSQL's own percentile_cont.
    [(p50, p95, longest)] = env.query(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM duration)), "
        "percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM duration)), "
        "max(extract(epoch FROM duration)) FROM {schema}.runs WHERE job = 'timed'")
    summary = pglock_json(env, "history", "--job", "timed")["summary"]
    assert (summary["runs"], summary["finished"], summary["succeeded"]) == (4, 4, 3)
    assert summary["success_rate"] == 0.75
    assert summary["p50"] == pytest.approx(float(p50))
    assert summary["p95"] == pytest.approx(float(p95))
    assert summary["max"] == pytest.approx(float(longest))
    assert 0.6 <= summary["max"] < 5

    screen = plain(env, "history", "--job", "timed")
    assert (f"timed: 4 runs (4 finished), success 75% (3/4), duration p50 "
            f"{format_duration(float(p50))}, p95 {format_duration(float(p95))}, "
            f"max {format_duration(float(longest))}") in screen
    bars = [line.split()[-1] for line in screen.splitlines()[5:]]
    # Newest first: the failure is marked with '!', the successes with '#', each bar as long
    # as its recorded duration over the longest, in 24 cells (on a loaded machine the
    # overhead of a run can make two of them equally long, so lengths come from the rows).
    durations = [float(seconds) for (seconds,) in env.query(
        "SELECT extract(epoch FROM duration) FROM {schema}.runs WHERE job = 'timed' "
        "ORDER BY id DESC")]
    assert bars[0][0] == "!" and set(bars[0]) == {"!"}
    assert all(set(bar) == {"#"} for bar in bars[1:])
    assert [len(bar) for bar in bars] == [
        max(1, round(24 * seconds / max(durations))) for seconds in durations]
    assert len(bars[1]) >= len(bars[2]) >= len(bars[3]) >= 1


def test_prune_keeps_running_rows_and_each_jobs_latest_run(env: Env) -> None:
    for _ in range(3):
        assert env.run("run", "--job", "a", "--rerun", "--", "true").returncode == 0
        assert env.run("run", "--job", "b", "--rerun", "--", "true").returncode == 0
    refused = env.run("prune", "--older-than", "0", stdin=subprocess.DEVNULL)
    assert refused.returncode == 1 and "--yes" in one_line(refused.stderr)
    with holding(env, "b", "--ttl", "5s", "--rerun"):
        nothing = env.run("prune", "--older-than", "1h", "--yes")
        assert (nothing.returncode, nothing.stderr) == (0, "")
        assert nothing.stdout.startswith("deleted 0 runs")
        result = env.run("prune", "--older-than", "0", "--yes")
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout.startswith("deleted 4 runs that finished before ")
        assert [r["outcome"] for r in env.runs("a")] == ["succeeded"]
        assert [r["outcome"] for r in env.runs("b")] == ["succeeded", "running"]
    assert env.run("prune", "--older-than", "0", "--yes").stdout.startswith(
        "deleted 1 run that finished before ")


# Messages that need no database are pinned in-process (tests/unit/test_cli.py).
@pytest.mark.parametrize(("args", "code", "says"), [
    (["history", "--outcome", "exploded"], 2, "--outcome: 'exploded' is not one of"),
    (["history", "--since", "yesterday"], 2, "--since: 'yesterday' is not a duration"),
    (["history", "--limit", "0"], 2, "--limit: 0 is out of range (1 to 100000)"),
    (["history", "--job", "never-seen"], 1, "no job named 'never-seen' has run here"),
    (["status", "--job", "never-seen"], 1, "no job named 'never-seen' has run here"),
    (["status", "--json", "--watch"], 2, "--json and --watch do not go together"),
    (["clear"], 2, "Missing option '--job'"),
    (["clear", "--job", "bad\x01name"], 2, "contains a control character"),
])
def test_bad_input_gets_one_line_and_its_exit_code(env: Env, args: list[str], code: int,
                                                   says: str) -> None:
    result = env.run(*args)
    assert (result.returncode, result.stdout) == (code, "")
    assert says in one_line(result.stderr)


@pytest.mark.slow  # waits out --connect-timeout
def test_unreachable_database_exits_125(env: Env) -> None:
    result = env.run("status", "--dsn", "host=127.0.0.1 port=1 password=hunter2",
                     "--connect-timeout", "1s")
    assert result.returncode == 125
    assert "127.0.0.1:1" in one_line(result.stderr) and "hunter2" not in result.stderr


def complete(env: Env, line: str, dsn: str | None = None) -> subprocess.CompletedProcess[str]:
    words = line.split(" ")
    return subprocess.run(
        [PGLOCK], env={**env.env, "_PGLOCK_COMPLETE": "complete_bash", "COMP_WORDS": line,
             "COMP_CWORD": str(len(words) - 1), **({"PGLOCK_DSN": dsn} if dsn else {})},
        capture_output=True, text=True, timeout=30)


def test_job_names_complete_from_the_database_and_silently_fail(env: Env) -> None:
    for job in ("sync-a", "sync-b", "report"):
        assert env.run("run", "--job", job, "--", "true").returncode == 0
    for command in ("status", "history", "clear", "run"):
        found = complete(env, f"pglock {command} --job sy")
        assert (found.returncode, found.stderr) == (0, "")
        assert found.stdout.split() == ["sync-a", "sync-b"], command
    broken = complete(env, "pglock status --job sy", dsn="host=127.0.0.1 port=1")
    assert (broken.returncode, broken.stdout.strip(), broken.stderr) == (0, "", "")


def test_run_does_not_import_rich(env: Env) -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pglock", "run", "--job", "lean", "--",
         "true"], env=env.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    assert not {name for name in imported if name.split(".")[0] == "rich"}


# What the job prints: UTF-8, bytes that are not, an escape sequence. (One stream: the
# order of chunks from stdout and stderr written at the same moment is not defined.)
PRINTS = r"printf 'first line\nnaïve caf\303\251 \377\376 end\n\033[31mERROR\033[0m: disk full\n'"
KEPT = b"first line\nna\xc3\xafve caf\xc3\xa9 \xff\xfe end\n\x1b[31mERROR\x1b[0m: disk full\n"
SHOWN = "first line\nnaïve café \ufffd\ufffd end\n\x1b[31mERROR\x1b[0m: disk full\n"


def test_history_output_shows_each_runs_kept_tail(env: Env) -> None:
    failing = env.run("run", "--job", "noisy", "--", "sh", "-c", PRINTS + "; exit 2",
                      stdout=subprocess.DEVNULL)
    assert (failing.returncode, failing.stderr) == (2, "")
    assert env.runs("noisy")[0]["output_tail"] == KEPT
    assert env.run("run", "--job", "noisy", "--rerun", "--output-tail", "0", "--",
                   "true").returncode == 0
    assert env.run("run", "--job", "noisy", "--rerun", "--output-tail", "12", "--", "sh", "-c",
                   "printf 'cut here: 0123456789'").returncode == 0
    assert env.run("run", "--job", "quiet", "--", "true").returncode == 0

    newest, untold, failed = pglock_json(env, "history", "--job", "noisy", "--output")["runs"]
    assert failed["output"] == SHOWN and failed["outcome"] == "failed"
    assert untold["output"] is None
    assert newest["output"] == ": 0123456789"  # the last 12 bytes
    assert "output" not in pglock_json(env, "history", "--job", "noisy")["runs"][0]

    screen = plain(env, "history", "--job", "noisy", "--output").splitlines()
    first = next(i for i, line in enumerate(screen) if " failed " in line)
    # Under the run's line, indented; control characters shown as cat -v shows them.
    assert screen[first + 1:first + 4] == [
        "    first line", "    naïve café \ufffd\ufffd end", "    ^[[31mERROR^[[0m: disk full"]
    assert "    (no output kept)" in screen
    assert "    : 0123456789" in screen

    # Without --job, the listed runs carry their output all the same.
    every = plain(env, "history", "--output", "--limit", "2").splitlines()
    assert "quiet" in every[3].split() and every[4] == "    (no output)"
    assert every[5].split()[2] == "noisy" and every[6] == "    : 0123456789"

    code, drawn = on_terminal(env, "history", "--job", "noisy", "--output")
    assert code == 0 and "disk full" in drawn
    # Dim (SGR 2) on a terminal, and no escape of the command's own gets through.
    assert "\x1b[2m" in drawn and "\x1b[31mERROR" not in drawn
