"""check and metrics over real runs: failed, stale and overdue jobs, exit codes, exposition."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest
from conftest import Env, one_line
from prometheus_client.parser import text_string_to_metric_families

NEW_YEAR = "0 0 1 1 *"


def run_ok(env: Env, job: str, *args: str) -> None:
    assert env.run("run", "--job", job, *args, "--", "true").returncode == 0


def make_overdue(env: Env, job: str) -> None:
    """A yearly job whose last run was for last year's slot: this year's passed with none."""
    run_ok(env, job, "--schedule", NEW_YEAR, "--tz", "UTC", "--grace", "1m")
    env.query("UPDATE {schema}.jobs SET next_slot = last_slot, "
              "last_slot = last_slot - interval '1 year' WHERE job = %s", (job,))


def make_stale(env: Env, job: str) -> None:
    """A run still marked running whose holder vanished: its lock has expired."""
    holder = env.popen("run", "--job", job, "--", "sleep", "30")
    env.wait_for(lambda: env.runs(job), what="the run row")
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    env.query("UPDATE {schema}.locks SET expires_at = clock_timestamp() WHERE job = %s", (job,))


def check(env: Env, *args: str) -> tuple[int, list[str]]:
    result = env.run("check", *args)
    assert result.stderr == ""
    return result.returncode, result.stdout.splitlines()


@pytest.fixture
def jobs(env: Env) -> Env:
    """One job of each kind: healthy and scheduled, failing, overdue, stale."""
    run_ok(env, "healthy", "--schedule", "*/5 * * * *")
    assert env.run("run", "--job", "failing", "--", "sh", "-c", "exit 3").returncode == 3
    make_overdue(env, "overdue")
    make_stale(env, "stale")
    return env


def test_check_returns_each_exit_code(jobs: Env) -> None:
    code, lines = check(jobs, "--job", "healthy")
    assert code == 0
    assert lines[0] == ("PGLOCK OK - 1 job: 1 ok | jobs=1 ok=1 dead=0 failed=0 overdue=0 "
                        "paused=0 silent_host=0 skipped_running=0 slow=0 stale=0")
    assert re.fullmatch(r"OK: healthy: last run succeeded \S+ ago, next due \S+", lines[1])
    code, lines = check(jobs, "--job", "overdue")
    assert code == 1
    assert lines[0].startswith("PGLOCK WARNING - 1 job: 1 overdue, 0 ok")
    assert lines[1].startswith("WARNING: overdue: overdue: 1 slot missed, the first due ")
    assert lines[1].endswith(f"(schedule '{NEW_YEAR}', grace 1m00s)")
    code, lines = check(jobs, "--job", "failing")
    assert code == 2
    assert lines[1].startswith("CRITICAL: failing: last run failed (exit 3), ")
    result = jobs.run("check", "--job", "nobody")
    assert (result.returncode, result.stdout) == (3, "PGLOCK UNKNOWN - no job named 'nobody' "
                                                  "has run\n")
    # Thresholds move the same jobs between levels.
    assert check(jobs, "--job", "failing", "--failures-critical", "2")[0] == 1
    assert check(jobs, "--job", "overdue", "--missed-critical", "1")[0] == 2
    assert check(jobs, "--job", "overdue", "--missed-warning", "2", "--missed-critical", "3")[0] \
        == 0


def test_check_over_all_jobs_reports_the_worst_and_each_problem(jobs: Env) -> None:
    code, lines = check(jobs)
    assert code == 2
    assert lines[0] == ("PGLOCK CRITICAL - 4 jobs: 1 failed, 1 overdue, 1 stale, 1 ok "
                        "| jobs=4 ok=1 dead=0 failed=1 overdue=1 paused=0 silent_host=0 "
                        "skipped_running=0 slow=0 stale=1")
    assert [line.split(":")[:2] for line in lines[1:]] == [
        ["CRITICAL", " failing"], ["WARNING", " overdue"], ["CRITICAL", " stale"]]
    assert "is marked running but its lock expired" in lines[3]
    result = jobs.run("check", "--json")
    report = json.loads(result.stdout)
    assert (result.returncode, report["status"], report["exit_code"]) == (2, "CRITICAL", 2)
    assert report["counts"] == {"jobs": 4, "ok": 1, "dead": 0, "failed": 1, "overdue": 1,
                                "paused": 0, "silent_host": 0, "skipped_running": 0,
                                "slow": 0, "stale": 1}
    by_job = {job["job"]: job for job in report["jobs"]}
    assert by_job["overdue"]["problems"] == ["overdue"]
    assert by_job["overdue"]["missed_slots"] == 1
    assert by_job["failing"]["last_exit_code"] == 3
    assert (by_job["stale"]["problems"], by_job["stale"]["running"]) == (["stale"], True)
    assert by_job["healthy"]["status"] == "OK" and by_job["healthy"]["next_fire"]


@pytest.mark.parametrize(("args", "words"), [
    pytest.param(["--dsn", "host=/nonexistent port=1", "--connect-timeout", "1"],
                 "cannot connect", marks=pytest.mark.slow),  # waits out --connect-timeout
    (["--missed-warning", "3", "--missed-critical", "2"], "--missed-warning (3) is above"),
])
def test_check_cannot_judge_is_unknown(env: Env, args: list[str], words: str) -> None:
    result = env.run("check", *args)
    assert result.returncode == 3
    assert result.stdout.startswith("PGLOCK UNKNOWN - ") and words in result.stdout
    assert words in one_line(result.stderr)


def test_check_bad_option_is_unknown(env: Env) -> None:
    result = env.run("check", "--bogus")
    assert result.returncode == 3
    assert result.stdout.startswith("PGLOCK UNKNOWN - No such option: --bogus")
    assert "--bogus" in one_line(result.stderr)


def test_check_with_no_jobs_is_ok(env: Env) -> None:
    assert check(env) == (
        0, ["PGLOCK OK - 0 jobs: 0 ok | jobs=0 ok=0 dead=0 failed=0 overdue=0 paused=0 "
            "silent_host=0 skipped_running=0 slow=0 stale=0"])


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_metrics_parse_and_show_each_state(jobs: Env) -> None:
    odd = 'odd "name" with \\ backslash'
    run_ok(jobs, odd)
    holder = jobs.popen("run", "--job", "busy", "--", "sleep", "30")
    try:
        jobs.wait_for(lambda: jobs.runs("busy"), what="the busy run")
        result = jobs.run("metrics")
    finally:
        holder.terminate()
        holder.communicate()
    assert (result.returncode, result.stderr) == (0, "")
    found = samples(result.stdout)
    families = {f.name for f in text_string_to_metric_families(result.stdout)}
    assert {"pglock_job_last_run_timestamp_seconds", "pglock_job_last_duration_seconds",
            "pglock_job_last_exit_code", "pglock_job_last_success_timestamp_seconds",
            "pglock_job_runs", "pglock_job_held", "pglock_job_overdue"} <= families

    def value(name: str, job: str, **labels: str) -> float:
        return found[name, tuple(sorted({"job": job, **labels}.items()))]

    assert value("pglock_job_overdue", "overdue") == 1
    assert value("pglock_job_missed_slots", "overdue") == 1
    assert value("pglock_job_overdue", "healthy") == 0
    assert value("pglock_job_last_exit_code", "failing") == 3
    assert value("pglock_job_runs_total", "failing", outcome="failed") == 1
    assert value("pglock_job_runs_total", "failing", outcome="succeeded") == 0
    assert value("pglock_job_held", "busy") == 1 and value("pglock_job_held", "healthy") == 0
    assert value("pglock_job_stale", "stale") == 1
    assert value("pglock_job_runs_total", odd, outcome="succeeded") == 1
    assert value("pglock_job_last_success_timestamp_seconds", "healthy") > 1.7e9
    assert ("pglock_job_last_success_timestamp_seconds", (("job", "failing"),)) not in found


def test_the_duration_histogram_survives_pruning_and_forgetting(env: Env) -> None:
    """Its counters are kept as runs end, not read from the history: pglock prune deletes
    runs and a Prometheus counter must not go down; a forgotten job that runs again goes
    on from its counts."""
    for _ in range(3):
        run_ok(env, "counted", "--min-hold", "0")
    env.query("UPDATE {schema}.runs SET started_at = started_at - interval '2 days', "
              "finished_at = finished_at - interval '2 days'")
    run_ok(env, "counted", "--min-hold", "0")

    def count() -> float:
        result = env.run("metrics", "--job", "counted")
        assert (result.returncode, result.stderr) == (0, ""), result
        return samples(result.stdout)["pglock_job_duration_seconds_count",
                                      (("job", "counted"),)]

    assert count() == 4
    pruned = env.run("prune", "--older-than", "1d", "--yes")
    assert pruned.returncode == 0 and pruned.stdout.startswith("deleted 3 runs"), pruned
    assert len(env.runs("counted")) == 1 and count() == 4
    assert env.run("forget", "--job", "counted", "--reason", "retired").returncode == 0
    run_ok(env, "counted", "--min-hold", "0")
    assert count() == 5


@pytest.mark.slow  # waits out --connect-timeout
def test_metrics_on_an_unreachable_database_fail_with_one_line(env: Env) -> None:
    result = env.run("metrics", "--dsn", "host=/nonexistent port=1", "--connect-timeout", "1")
    assert (result.returncode, result.stdout) == (125, "")
    assert "cannot connect" in one_line(result.stderr)


def test_reading_jobs_that_are_on_time_needs_no_cron_arithmetic(env: Env) -> None:
    """status reads thousands of jobs: on-time ones cost no croniter, not even its import."""
    run_ok(env, "on-time", "--schedule", "*/5 * * * *")
    code = ("import sys, psycopg; from pglock.reports import jobs; "
            f"conn = psycopg.connect({env.dsn!r}, autocommit=True); "
            f"[job] = jobs.read(conn, {env.schema!r}).jobs; "
            "assert job.due and not job.overdue and job.due.missed == 0; "
            "assert 'croniter' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_failures_in_a_row_count_until_a_success(env: Env) -> None:
    for _ in range(2):
        assert env.run("run", "--job", "flaky", "--rerun", "--", "false").returncode == 1
    code, lines = check(env, "--job", "flaky", "--failures-warning", "1",
                        "--failures-critical", "3")
    assert code == 1 and "last run failed (exit 1), 2 in a row" in lines[1]
    assert env.run("run", "--job", "flaky", "--rerun", "--", "false").returncode == 1
    assert check(env, "--job", "flaky", "--failures-critical", "3")[0] == 2
    run_ok(env, "flaky", "--rerun")
    assert check(env, "--job", "flaky")[0] == 0
    assert env.query("SELECT consecutive_failures FROM {schema}.jobs")[0][0] == 0
