"""`pglock status` over data made by real `pglock run` processes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from conftest import Env
from operating import ANSI, COLOUR, holding, on_terminal, pglock_json, plain, row_of


def test_status_shows_the_holder_while_it_runs_then_its_last_run(env: Env) -> None:
    with holding(env, "busy", "--ttl", "5s", "--holder", "web-1", "--min-hold", "0") as holder:
        screen = plain(env, "status")
        assert f"schema {env.schema}" in screen.splitlines()[0]
        cells = row_of(screen, "busy")
        assert cells[:4] == ["busy", "running", f"web-1:{holder.pid}", "lease"]
        assert cells[4].endswith(("ms", "s"))  # running for
        [job] = pglock_json(env, "status")["jobs"]
        assert (job["job"], job["state"]) == ("busy", "running")
        held = job["holder"]
        assert (held["host"], held["pid"], held["mode"], held["fencing_token"]) == (
            "web-1", holder.pid, "lease", 1)
        assert 0 < held["expires_in"] <= 5 and held["running_for"] >= 0
        assert held["expires_at"].endswith("+00:00") or "T" in held["expires_at"]
        assert job["last_run"] is None and job["last_success_at"] is None
    assert holder.returncode == 0
    [job] = pglock_json(env, "status")["jobs"]
    assert (job["state"], job["holder"]) == ("idle", None)
    last = job["last_run"]
    assert (last["outcome"], last["exit_code"]) == ("succeeded", 0)
    assert last["duration"] > 0 and job["last_success_at"] == last["finished_at"]
    cells = row_of(plain(env, "status"), "busy")
    assert cells[1:3] == ["idle", "-"] and "succeeded" in cells and "0" in cells

    detail = plain(env, "status", "--job", "busy")
    assert "recent runs of busy:" in detail
    assert "succeeded" in detail.splitlines()[-1].split()
    assert [r["outcome"] for r in pglock_json(env, "status", "--job", "busy")["recent_runs"]] == [
        "succeeded"]


def test_failed_last_run_and_stale_lock_are_flagged(env: Env) -> None:
    assert env.run("run", "--job", "ok", "--min-hold", "0", "--", "true").returncode == 0
    assert env.run("run", "--job", "broken", "--", "sh", "-c", "exit 3").returncode == 3
    with holding(env, "vanished", "--ttl", "5s") as holder:
        holder.kill()  # its command dies with it (PDEATHSIG); its run stays marked running
        holder.communicate()
        # Its lease would run out within 5 s; the test does not wait for it.
        env.query("UPDATE {schema}.locks SET expires_at = clock_timestamp() - interval '1s' "
                  "WHERE job = 'vanished'")
    jobs = {job["job"]: job for job in pglock_json(env, "status")["jobs"]}
    assert {name: job["state"] for name, job in jobs.items()} == {
        "broken": "failed", "ok": "idle", "vanished": "stale"}
    assert (jobs["broken"]["last_run"]["outcome"], jobs["broken"]["last_run"]["exit_code"]) == (
        "failed", 3)
    stale = jobs["vanished"]["holder"]
    assert stale["pid"] == holder.pid and stale["expires_in"] < 0

    screen = plain(env, "status")
    body = [line.split()[0] for line in screen.splitlines()[3:6]]
    assert body == ["vanished", "broken", "ok"], screen  # worst first
    assert row_of(screen, "vanished")[1] == "stale"
    assert any(cell.startswith("expired ") for cell in row_of(screen, "vanished"))
    assert row_of(screen, "broken")[1] == "failed"
    assert "3 jobs: 1 stale, 1 failed, 1 idle" in screen
    # Status only reads: the vanished run is still marked running.
    assert [r["outcome"] for r in env.runs("vanished")] == ["running"]


@pytest.mark.slow  # waits for --watch to redraw
def test_status_on_a_terminal_has_colour_unless_no_color_and_watch_redraws(env: Env) -> None:
    assert env.run("run", "--job", "broken", "--", "false").returncode == 1
    code, drawn = on_terminal(env, "status")
    assert code == 0 and "broken" in drawn and COLOUR.search(drawn)
    code, drawn = on_terminal(env, "status", extra_env={"NO_COLOR": "1"})
    assert code == 0 and "x failed" in drawn and not COLOUR.search(drawn)
    code, drawn = on_terminal(env, "status", "--watch", "--interval", "0.5s", until="broken")
    assert code == 0 and drawn.count("broken") >= 2
    # Off a terminal --watch repeats plain screens, without escapes, until Ctrl-C.
    process = env.popen("status", "--watch", "--interval", "0.5s")
    assert process.stdout is not None
    seen = ""
    while seen.count("pglock status:") < 2:
        seen += process.stdout.readline()
    process.send_signal(signal.SIGINT)
    rest, stderr = process.communicate(timeout=10)
    assert (process.returncode, stderr) == (0, "")
    assert not ANSI.search(seen + rest)


def test_status_of_an_empty_schema(env: Env) -> None:
    assert "no job has run here yet" in plain(env, "status")
    assert json.loads(env.run("status", "--json").stdout)["jobs"] == []


def test_status_says_when_the_schema_has_no_pglock_tables(env: Env) -> None:
    """A typo'd PGLOCK_SCHEMA looked like a quiet fleet (docs review, section 3): the line
    says the schema has no tables, and asks; one whose jobs were all forgotten does not."""
    shown = plain(env, "status").splitlines()[-1]
    assert shown == (f"no job has run here yet: schema {env.schema!r} has no pglock tables "
                     "(a job's first run creates them; is --schema or PGLOCK_SCHEMA right?)")
    assert env.run("run", "--job", "once", "--", "true").returncode == 0
    assert env.run("forget", "--job", "once", "--reason", "r").returncode == 0
    assert plain(env, "status").splitlines()[-1] == "no job has run here yet"


@pytest.mark.parametrize("command", [["status"], ["check"], ["run", "--job", "j", "--", "true"],
                                     ["pause", "--all", "--reason", "r"], ["history"]])
def test_a_schema_that_holds_someone_elses_tables_is_refused(env: Env,
                                                            command: list[str]) -> None:
    """A schema with another application's `locks` and no pglock version record read as an
    empty pglock schema (status: nothing, check: OK - 0 jobs), and `run` failed on it with
    "relation "locks" already exists" (issue 46, D22)."""
    env.query("CREATE SCHEMA {schema}")
    env.query("CREATE TABLE {schema}.locks (id int)")
    env.query("CREATE TABLE {schema}.orders (id int)")
    done = env.run(*command)
    line = (f"schema {env.schema!r} holds tables that are not pglock's (locks, orders) and no "
            "pglock version record: give pglock a schema of its own (--schema, "
            "PGLOCK_SCHEMA, or schema in the config file)")
    if command == ["check"]:
        assert done.returncode == 3 and line in done.stdout, done
    else:
        assert (done.returncode, done.stdout) == (125, ""), done
        assert done.stderr.endswith(line + "\n") and done.stderr.count("\n") == 1, done
    assert env.query("SELECT count(*) FROM pg_tables WHERE schemaname = %s",
                     (env.schema,))[0][0] == 2


# A slot long past and stable: 00:00 on 1 January, in UTC.
NEW_YEAR = "0 0 1 1 *"


def new_year(offset: int = 0) -> datetime:
    return datetime(datetime.now(UTC).year + offset, 1, 1, tzinfo=UTC)


def run_yearly(env: Env, job: str, *command: str, code: int = 0) -> None:
    result = env.run("run", "--job", job, "--schedule", NEW_YEAR, "--tz", "UTC", "--grace", "1m",
                     "--", *(command or ("true",)))
    assert result.returncode == code, result


def last_ran_years_ago(env: Env, job: str, years: int) -> None:
    """Make the job's run one of `years` years ago (its slot, and the slots the jobs row
    keeps): the yearly slots since then passed with no run, as if cron had stopped."""
    back = "(slot AT TIME ZONE 'UTC' - make_interval(years => %(years)s)) AT TIME ZONE 'UTC'"
    env.query(f"UPDATE {{schema}}.runs SET slot = {back} WHERE job = %(job)s",
              {"job": job, "years": years})
    env.query("UPDATE {schema}.jobs j SET last_slot = r.slot, "
              "next_slot = (r.slot AT TIME ZONE 'UTC' + interval '1 year') AT TIME ZONE 'UTC' "
              "FROM {schema}.runs r WHERE r.id = j.last_run_id AND j.job = %(job)s",
              {"job": job})


def test_status_shows_next_due_and_flags_overdue_jobs_with_their_missed_slots(env: Env) -> None:
    run_yearly(env, "on-time")
    run_yearly(env, "late")
    last_ran_years_ago(env, "late", 3)
    run_yearly(env, "broken-and-late", "sh", "-c", "exit 3", code=3)
    last_ran_years_ago(env, "broken-and-late", 1)
    assert env.run("run", "--job", "unscheduled", "--min-hold", "0", "--",
                   "true").returncode == 0
    # This year's slot passed with no run, but within its (long) grace: pending.
    run_yearly(env, "pending")
    last_ran_years_ago(env, "pending", 1)
    env.query("UPDATE {schema}.jobs SET grace = interval '400 days' WHERE job = 'pending'")

    jobs = {job["job"]: job for job in pglock_json(env, "status")["jobs"]}
    assert {name: job["state"] for name, job in jobs.items()} == {
        "broken-and-late": "failed", "late": "overdue", "on-time": "idle", "pending": "idle",
        "unscheduled": "idle"}
    pending = jobs["pending"]["schedule"]
    assert (pending["overdue"], pending["missed_slots"]) == (False, 0)
    assert (pending["due_at"], pending["next_due"]) == (new_year().isoformat(),
                                                        new_year(1).isoformat())
    assert jobs["unscheduled"]["schedule"] is None
    on_time = jobs["on-time"]["schedule"]
    assert (on_time["expression"], on_time["timezone"], on_time["grace"]) == (NEW_YEAR, "UTC", 60)
    assert on_time["next_due"] == on_time["due_at"] == new_year(1).isoformat()
    assert (on_time["overdue"], on_time["missed_slots"], on_time["note"]) == (False, 0, None)
    now = datetime.fromisoformat(pglock_json(env, "status")["now"])
    assert abs(on_time["next_due_in"] - (new_year(1) - now).total_seconds()) < 30
    late = jobs["late"]["schedule"]
    # The slots of 2 years ago, last year and this year passed with no run.
    assert (late["overdue"], late["missed_slots"]) == (True, 3)
    assert (late["due_at"], late["next_due"]) == (new_year(-2).isoformat(),
                                                  new_year(1).isoformat())
    broken = jobs["broken-and-late"]["schedule"]
    assert (broken["overdue"], broken["missed_slots"]) == (True, 1)

    screen = plain(env, "status")
    assert screen.splitlines()[2].split()[:9] == [
        "JOB", "STATE", "HOLDER", "MODE", "RUNNING", "FOR", "EXPIRES", "IN", "NEXT"]
    # Worst first: failed, then overdue, then the rest.
    body = [line.split()[0] for line in screen.splitlines()[3:8]]
    assert body == ["broken-and-late", "late", "on-time", "pending", "unscheduled"], screen
    assert row_of(screen, "late")[1:3] == ["overdue", "-"]
    assert re.fullmatch(r"in \d+d\d\dh, 3 missed", row_of(screen, "late")[6]), screen
    assert re.fullmatch(r"in \d+d\d\dh, 1 missed", row_of(screen, "broken-and-late")[6])
    assert re.fullmatch(r"in \d+d\d\dh", row_of(screen, "on-time")[6])
    assert row_of(screen, "unscheduled")[6] == "-"
    assert re.fullmatch(r"due \d+d\d\dh ago", row_of(screen, "pending")[6])
    # The failed job is overdue too: the summary says so.
    assert "5 jobs: 1 failed, 1 overdue, 3 idle (2 overdue in all)" in screen

    detail = plain(env, "status", "--job", "late")
    expected = (r"^schedule '0 0 1 1 \*' \(UTC\), grace 1m00s: next due in \d+d\d\dh "
                rf"\(at {new_year(1).astimezone():%Y-%m-%d %H:%M:%S}\)\n"
                r"overdue: 3 slots missed, the first due \S+ ago "
                rf"\(at {new_year(-2).astimezone():%Y-%m-%d %H:%M:%S}\)$")
    assert re.search(expected, detail, re.MULTILINE), detail
    assert "1 job: 1 overdue" in detail
    [job] = pglock_json(env, "status", "--job", "late")["jobs"]
    assert (job["state"], job["schedule"]["missed_slots"]) == ("overdue", 3)
    assert "; on time" in plain(env, "status", "--job", "on-time")
    assert "\npending: a slot came with no run yet, within its grace, " in plain(
        env, "status", "--job", "pending")

    code, drawn = on_terminal(env, "status", extra_env={"NO_COLOR": "1"})
    assert code == 0 and "@ overdue" in drawn and "3 missed" in drawn


@pytest.mark.slow  # waits for the holder to notice its lost lock
def test_an_overdue_job_still_running_shows_its_holder_and_can_be_cleared(env: Env) -> None:
    """A run that outlasts its interval: the slots after it are missed while it runs."""
    with holding(env, "long", "--schedule", NEW_YEAR, "--tz", "UTC", "--ttl", "5s",
                 "--holder", "web-3") as holder:
        last_ran_years_ago(env, "long", 1)
        cells = row_of(plain(env, "status"), "long")
        assert cells[:4] == ["long", "overdue", f"web-3:{holder.pid}", "lease"]
        assert cells[6].endswith(", 1 missed")
        # Overdue, but held: clear goes by the lock.
        cleared = env.run("clear", "--job", "long", "--yes", "--now")
        assert (cleared.returncode, cleared.stderr) == (0, "")
        assert cleared.stdout.startswith("cleared job 'long'")
        holder.communicate(timeout=20)
    assert holder.returncode == 125


def test_status_imports_croniter_only_for_a_job_that_is_not_on_time(env: Env) -> None:
    run_yearly(env, "on-time")

    def imports() -> set[str]:
        result = subprocess.run([sys.executable, "-X", "importtime", "-m", "pglock", "status"],
                                env=env.env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return {line.rsplit("|", 1)[1].strip().split(".")[0]
                for line in result.stderr.splitlines() if line.startswith("import time:")}

    assert "croniter" not in imports()
    run_yearly(env, "late")
    last_ran_years_ago(env, "late", 1)
    assert "croniter" in imports()


def test_a_large_fleet_lists_what_needs_a_look_and_counts_the_idle_rest(env: Env) -> None:
    assert env.run("run", "--job", "broken", "--", "false").returncode == 1
    assert env.run("run", "--job", "fine", "--min-hold", "0", "--", "true").returncode == 0
    # 60 more jobs that ran and succeeded, as a fleet's many quiet ones.
    env.query("INSERT INTO {schema}.jobs (job, mode, last_outcome, last_finished_run_id)"
              " SELECT 'quiet-' || n, 'lease', 'succeeded', n FROM generate_series(1, 60) n")
    with holding(env, "busy", "--min-hold", "0"):
        screen = plain(env, "status")
        listed = [line.split()[0] for line in screen.splitlines()[3:] if line.strip()]
        assert listed[:2] == ["broken", "busy"], screen
        assert "fine" not in listed and not any(n.startswith("quiet-") for n in listed)
        assert ("63 jobs: 1 failed, 1 running, 61 idle; the 61 idle not listed"
                " (--all lists every job)") in screen
        everything = plain(env, "status", "--all")
        assert row_of(everything, "fine")[1] == "idle" and row_of(everything, "quiet-7")
        assert "63 jobs: 1 failed, 1 running, 61 idle" in everything
        assert "not listed" not in everything
        # JSON is always complete, and one document.
        document = pglock_json(env, "status")
        assert len(document["jobs"]) == 63 and document["schema"] == env.schema
        assert {j["job"]: j["state"] for j in document["jobs"]}["busy"] == "running"
    # Once nothing needs a look: no table, the count alone.
    env.query("DELETE FROM {schema}.jobs WHERE job IN ('broken', 'busy')")
    env.query("DELETE FROM {schema}.locks")
    screen = plain(env, "status")
    assert "no job is running, held, paused or in trouble" in screen
    assert "61 jobs: 61 idle; the 61 idle not listed (--all lists every job)" in screen
