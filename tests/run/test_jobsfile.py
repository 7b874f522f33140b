"""The jobs file against a real database: `pglock run --job X` runs the configured command
with the configured options, the command line overrides it, a bad table runs nothing;
`pglock crontab`'s lines, installed with crontab(1), run the jobs; `pglock jobs`; and
reentrant runs (a nested `pglock run` of the job whose lock its caller holds)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import PGLOCK, Env, one_line
from croniter import croniter

JOBS = """
[jobs.sync-invoices]
command = ["sh", "-c", "echo \\"$PGLOCK_JOB $PGLOCK_ATTEMPT\\" >> {marks}"]
ttl = "5m"
retries = 2
"retry-delay" = 1

[jobs.nightly-report]
command = "echo \\"$PGLOCK_JOB $PGLOCK_SLOT\\" >> {marks}"
schedule = "*/5 * * * *"
tz = "Europe/Berlin"
ttl = 300

[jobs.reindex]
command = ["sh", "-c", "echo \\"$PGLOCK_JOB\\" >> {marks}; exit 3"]
"kill-after" = "5s"
"""


def jobs_file(env: Env, text: str = JOBS) -> tuple[Path, Path]:
    """The config file (named by PGLOCK_CONFIG from now on) and the marks its jobs write."""
    marks = env.tmp / "marks"
    path = env.tmp / "config.toml"
    path.write_text(text.format(marks=shlex.quote(str(marks))))
    env.env["PGLOCK_CONFIG"] = str(path)
    return path, marks


def marked(marks: Path) -> list[str]:
    return marks.read_text().splitlines() if marks.exists() else []


def attempt_limit(env: Env, job: str) -> int:
    """How many attempts the job's last run was allowed (1 + retries)."""
    limit: int = env.query("SELECT attempt_limit FROM {schema}.jobs WHERE job = %s",
                           (job,))[0][0]
    return limit


def lock_ttl(env: Env, job: str) -> timedelta:
    ttl: timedelta = env.query("SELECT ttl FROM {schema}.locks WHERE job = %s", (job,))[0][0]
    return ttl


def test_run_job_runs_the_configured_command_with_its_options(env: Env) -> None:
    _, marks = jobs_file(env)
    assert env.run("run", "--job", "sync-invoices").returncode == 0
    assert marked(marks) == ["sync-invoices 1"]
    assert lock_ttl(env, "sync-invoices") == timedelta(minutes=5)
    (run,) = env.runs("sync-invoices")
    assert (run["attempt"], run["command"]) == (1, "sh")
    # retries = 2: three attempts at most.
    assert attempt_limit(env, "sync-invoices") == 3

    assert env.run("run", "--job", "nightly-report").returncode == 0
    (line,) = marked(marks)[1:]
    assert line.startswith("nightly-report 20")
    schedule, zone = env.query("SELECT schedule, timezone FROM {schema}.jobs WHERE job = %s",
                               ("nightly-report",))[0]
    assert (schedule, zone) == ("*/5 * * * *", "Europe/Berlin")
    assert lock_ttl(env, "nightly-report") == timedelta(minutes=5)

    # The command's exit code passes through; retries default to none.
    assert env.run("run", "--job", "reindex").returncode == 3
    assert attempt_limit(env, "reindex") == 1


def test_the_command_line_and_variables_override_the_file(env: Env) -> None:
    _, marks = jobs_file(env)
    result = env.run("run", "--job", "sync-invoices", "--ttl", "90s", "--rerun", "--",
                     "sh", "-c", f"echo mine >> {marks}", env={"PGLOCK_RETRIES": "0"})
    assert result.returncode == 0, result.stderr
    assert marked(marks) == ["mine"]
    assert lock_ttl(env, "sync-invoices") == timedelta(seconds=90)
    assert attempt_limit(env, "sync-invoices") == 1
    # A variable comes before the file.
    assert env.run("run", "--job", "sync-invoices", "--rerun",
                   env={"PGLOCK_TTL": "2m"}).returncode == 0
    assert lock_ttl(env, "sync-invoices") == timedelta(minutes=2)
    assert attempt_limit(env, "sync-invoices") == 3


def test_the_typer_parser_reads_the_file_too(env: Env) -> None:
    # `pglock run` parsed by typer (cli.main), as help and anything unsure are.
    _, marks = jobs_file(env)
    typer_run = [sys.executable, "-c",
                 "import sys; from pglock.cli import app; sys.exit(app.main(sys.argv[1:]))"]
    process = subprocess.run([*typer_run, "run", "--job", "sync-invoices"],
                             env=env.env, capture_output=True, text=True, timeout=60)
    assert process.returncode == 0, process.stderr
    assert marked(marks) == ["sync-invoices 1"]
    assert lock_ttl(env, "sync-invoices") == timedelta(minutes=5)


@pytest.mark.parametrize(("table", "line"), [
    ('ttl = "5m"\nretires = 2', "[jobs.bad] retires: unknown key"),
    ("retries = true", "[jobs.bad] retries: must be a whole number"),
    ('ttl = "five minutes"', "[jobs.bad] ttl: 'five minutes' is not a duration"),
    ("", "[jobs.bad] command: missing: the job's command"),
])
def test_a_bad_table_runs_nothing(env: Env, table: str, line: str) -> None:
    command = "" if line.endswith("command") else 'command = "touch {marks}"\n'
    path, marks = jobs_file(env, f"[jobs.bad]\n{command}{table}\n")
    result = env.run("run", "--job", "bad")
    assert result.returncode == 2
    assert one_line(result.stderr).startswith(f"pglock: config file {path}: {line}")
    assert not marks.exists()
    assert env.runs("bad") == []


CRON_JOBS = """
[jobs.sync-invoices]
command = ["sh", "-c", "echo \\"$PGLOCK_JOB\\" >> {marks}"]
schedule = "* * * * *"

[jobs."50% report"]
command = "echo \\"$PGLOCK_JOB\\" >> {marks}"
schedule = "*/5 * * * *"
tz = "Europe/Berlin"

[jobs.reindex]
command = ["true"]
"""


def _crontab_installed(fragment: Path) -> str:
    """`fragment` installed with crontab(1) into a spool of this test's own (a private
    mount namespace: the host's crontabs are not touched), and read back with crontab -l."""
    spool = "/var/spool/cron/crontabs"
    script = (f"mount -t tmpfs -o mode=1730 pglock-test {spool} && chgrp crontab {spool} && "
              f"crontab {shlex.quote(str(fragment))} && crontab -l")
    process = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True,
                             text=True, timeout=30)
    assert process.returncode == 0, process.stderr
    return process.stdout


def _can_install_crontabs() -> bool:
    if shutil.which("crontab") is None or shutil.which("unshare") is None or os.getuid() != 0:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_install_crontabs(),
                    reason="needs crontab(1) (apt package cron; .ci/run installs it), root "
                           "and unshare for a private crontab spool")
@pytest.mark.parametrize("tz_by", ["cron", "pglock"])
def test_the_crontab_installs_and_its_lines_run_the_jobs(env: Env, tz_by: str) -> None:
    path, marks = jobs_file(env, CRON_JOBS)
    result = env.run("crontab", "--tz-by", tz_by)
    assert result.returncode == 0, result.stderr
    fragment = env.tmp / "fragment"
    fragment.write_text(result.stdout)
    installed = _crontab_installed(fragment)
    assert installed == result.stdout
    zone = None
    ran = []
    for line in installed.splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("CRON_TZ="):
            zone = line.partition("=")[2]
            continue
        fields = line.split(maxsplit=5)
        schedule, command = " ".join(fields[:5]), fields[5]
        assert croniter.is_valid(schedule)
        # As cron runs it: % unescaped, by sh -c, with the crontab's CRON_TZ.
        command = command.replace("\\%", "%")
        job = shlex.split(command)[-1]
        # The line finds the file it came from whatever the cron user's own search finds.
        assert command == f"PGLOCK_CONFIG={path} {PGLOCK} run --job {shlex.quote(job)}"
        variables = {**env.env, **({"CRON_TZ": zone} if zone else {})}
        del variables["PGLOCK_CONFIG"]
        process = subprocess.run(["sh", "-c", command], env=variables,
                                 capture_output=True, text=True, timeout=60)
        assert process.returncode == 0, process.stderr
        ran.append((job, schedule, zone))
    # reindex has no schedule: cron does not start it. The zoned job: in its zone by cronie
    # (CRON_TZ), or every minute on any cron, pglock reading its slot in its zone.
    zoned = (("50% report", "*/5 * * * *", "Europe/Berlin") if tz_by == "cron"
             else ("50% report", "* * * * *", None))
    assert ran == [("sync-invoices", "* * * * *", None), zoned]
    assert sorted(marked(marks)) == ["50% report", "sync-invoices"]
    # The schedule written once: the one cron has is the one the runs recorded.
    recorded = env.query("SELECT job, schedule, timezone FROM {schema}.jobs ORDER BY job")
    assert recorded[0] == ("50% report", "*/5 * * * *", "Europe/Berlin")
    assert recorded[1][:2] == ("sync-invoices", "* * * * *")


def test_jobs_shows_the_file_next_to_the_database(env: Env) -> None:
    jobs_file(env)
    # A host ran nightly-report with another schedule, and a job the file does not have.
    assert env.run("run", "--job", "nightly-report", "--schedule", "*/10 * * * *").returncode == 0
    assert env.run("run", "--job", "old-cleanup", "--", "true").returncode == 0
    assert env.run("run", "--job", "reindex").returncode == 3
    result = env.run("jobs", "--json")
    assert result.returncode == 0, result.stderr
    notes = {job["job"]: job["notes"] for job in json.loads(result.stdout)["jobs"]}
    assert notes == {
        "sync-invoices": ["never run"],
        "nightly-report": ["schedule differs: file '*/5 * * * *' (Europe/Berlin), "
                           "hosts ran '*/10 * * * *' (Europe/Berlin)"],
        "reindex": [],
        "old-cleanup": ["not in the jobs file"]}
    text = env.run("jobs").stdout
    assert "sync-invoices" in text and "never run" in text


# Reentrant runs ------------------------------------------------------------------------


def test_a_nested_run_of_the_same_job_runs_under_the_outer_lock(env: Env) -> None:
    marks = env.tmp / "marks"
    # The outer run's command runs pglock for its own job: without reentrancy, exit 75.
    nested = f'{PGLOCK} run --job nest -- sh -c "echo $PGLOCK_FENCING_TOKEN >> {marks}; exit 7"'
    result = env.run("run", "--job", "nest", "--", "sh", "-c", nested)
    assert (result.returncode, result.stderr) == (7, "")
    # History: the outer run's row alone, with the nested command's exit code.
    (run,) = env.runs("nest")
    assert (run["exit_code"], run["outcome"]) == (7, "failed")
    assert marked(marks) == [str(run["fencing_token"])]
    # A nested run of another job is a run of its own, as ever.
    other = f"{PGLOCK} run --job nest-other -- true"
    assert env.run("run", "--job", "nest", "--rerun", "--", "sh", "-c", other).returncode == 0
    assert len(env.runs("nest-other")) == 1
    assert len(env.runs("nest")) == 2


def test_a_job_whose_command_runs_itself_ends_in_one_line(env: Env) -> None:
    jobs_file(env, f'[jobs.loop]\ncommand = "{PGLOCK} run --job loop"\n')
    result = env.run("run", "--job", "loop")
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        "pglock: job 'loop': nested 10 deep in runs of itself; not running its command "
        "again (does its command call pglock run --job loop without a command?)")


def test_a_nested_run_whose_outer_lock_was_cleared_skips(env: Env) -> None:
    go, started, code = env.tmp / "go", env.tmp / "started", env.tmp / "code"
    script = (f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; "
              f"{PGLOCK} run --job nest -- touch {env.tmp / 'ran'}; echo $? > {code}")
    outer = env.popen("run", "--job", "nest", "--on-lost", "continue", "--", "sh", "-c", script)
    try:
        env.wait_for(started.exists, what="the outer command")
        assert env.run("clear", "--job", "nest", "--yes", "--reason", "test").returncode == 0
        go.touch()
        env.wait_for(code.exists, what="the nested run")
    finally:
        outer.communicate(timeout=60)
    assert code.read_text().strip() == "75"
    assert not (env.tmp / "ran").exists()
