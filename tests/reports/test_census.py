"""The census with real processes as several hosts (PGLOCK_HOST): every run, winner or
loser, is in it; a host that stops is silent after two slots and not before; forget-host
retires one; a host on an older pglock shows as skewed; names are data everywhere.

A minute cannot pass in a test: where the rule needs minutes, the census's rows are moved
back as a job's slots are in test_monitor.make_overdue, and the hosts that go on attempt
again for real (the rule itself, minute by minute: tests/unit/reports/test_census_model.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import PGLOCK, Env, Result, one_line
from operating import pglock_json
from prometheus_client.parser import text_string_to_metric_families
from replication import Pair

from pglock.lock import census

# pglock's own entry point, in a Python that says it is an older release first: a real
# process whose census row carries that version (no test hook in pglock itself).
OLDER = ("import sys, pglock; pglock.__version__ = sys.argv.pop(1); "
         "from pglock.cli.runline import main; sys.argv[0] = 'pglock'; sys.exit(main())")
MINUTELY = ("--schedule", "* * * * *", "--tz", "UTC")


def on(env: Env, host: str, *args: str, version: str | None = None) -> Result:
    """pglock run on `host` (PGLOCK_HOST), winner or loser: exit 0 or 75, nothing said."""
    argv = [sys.executable, "-c", OLDER, version] if version else [PGLOCK]
    done = subprocess.run([*argv, "run", *args], env={**env.env, "PGLOCK_HOST": host},
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode in (0, 75), done.stderr) == (True, ""), done
    return Result(done.returncode, done.stdout, done.stderr)


def standing(env: Env, job: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """The database's now and each host's row of `pglock hosts --job JOB --json`."""
    found = pglock_json(env, "hosts", "--job", job)
    return found["now"], {row["host"]: row for row in found["hosts"]}


def test_the_census_lists_every_host_winner_or_loser(env: Env) -> None:
    for host in ("web-1", "web-2", "web-3"):
        on(env, host, "--job", "sync", "--schedule", "*/5 * * * *", "--", "true")
    for host in ("web-1", "web-2"):
        on(env, host, "--job", "adhoc", "--", "true")
    on(env, "web-3", "--job", "locked", "--mode", "advisory", "--", "true")
    found = pglock_json(env, "hosts")
    assert {h["host"]: sorted(j["job"] for j in h["jobs"]) for h in found["hosts"]} == {
        "web-1": ["adhoc", "sync"], "web-2": ["adhoc", "sync"], "web-3": ["locked", "sync"]}
    assert {h["host"]: (h["version"], h["state"], h["skewed"]) for h in found["hosts"]} == {
        name: ("0.1.0", "attending", False) for name in ("web-1", "web-2", "web-3")}
    _, sync = standing(env, "sync")
    assert sorted(row["outcome"] for row in sync.values()) == ["ran", "slot_done", "slot_done"]
    assert {row["slot"] is not None and row["ttl"] for row in sync.values()} == {60.0}
    _, adhoc = standing(env, "adhoc")
    # The default hold: the second host of an unscheduled job finds the lock held.
    assert sorted(row["outcome"] for row in adhoc.values()) == ["held", "ran"]
    _, locked = standing(env, "locked")
    assert locked["web-3"]["outcome"] == "ran"
    status = env.run("status", "--job", "sync")
    assert "hosts of sync: 3 hosts fire it (web-1, web-2, web-3); none silent" in status.stdout
    checked = env.run("check")
    assert checked.returncode == 0 and "silent_host=0" in checked.stdout, checked
    samples = metric_samples(env)
    assert samples[("pglock_job_hosts", (("job", "sync"),))] == 3
    assert samples[("pglock_job_silent_hosts", (("job", "adhoc"),))] == 0
    assert ("pglock_host_last_seen_timestamp_seconds",
            (("host", "web-2"), ("version", "0.1.0"))) in samples


def metric_samples(env: Env) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    done = env.run("metrics")
    assert (done.returncode, done.stderr) == (0, ""), done
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(done.stdout) for s in family.samples}


def moved_back(env: Env, host: str, job: str, minutes: int) -> str:
    """The host's last attempt of the job as if made `minutes` slots of a minutely job ago
    (in that slot, two seconds in, by the database's clock); the minute it was done in."""
    rows = env.query(
        "UPDATE {schema}.attendance SET "
        "slot = date_trunc('minute', now()) - make_interval(mins => %(m)s), "
        "last_attempt = date_trunc('minute', now()) - make_interval(mins => %(m)s) "
        "+ interval '2 seconds' WHERE host = %(host)s AND job = %(job)s "
        "RETURNING date_trunc('minute', now())::text",
        {"m": minutes, "host": host, "job": job})
    assert rows, (host, job)
    return str(rows[0][0])


def judged_in_the_same_minute(env: Env, host: str, job: str, minutes: int
                              ) -> dict[str, dict[str, Any]]:
    """The hosts of `job` read in the minute `host`'s attempt was moved back from (a read
    in the next minute would count one slot more: then it is done again)."""
    for _ in range(3):
        minute = moved_back(env, host, job, minutes)
        now, rows = standing(env, job)
        if now[:16] == minute.replace(" ", "T")[:16]:
            return rows
    raise AssertionError("three reads in a row fell in the next minute")


def test_a_host_that_stops_is_silent_after_two_slots_and_not_before(env: Env) -> None:
    """A minutely job on three hosts; web-3 stops. Its last attempt two slots back (the
    current one not yet past its grace): attending. Three back (two slots missed past
    their grace): silent, and as a whole, since it attempts nothing else."""
    for _ in range(2):  # twice: a single attempt may be a run by hand
        for host in ("web-1", "web-2", "web-3"):
            on(env, host, "--job", "minutely", *MINUTELY, "--", "true")
        env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - "
                  "interval '1 minute'")
    for host in ("web-1", "web-2"):
        on(env, host, "--job", "minutely", *MINUTELY, "--", "true")
    before = judged_in_the_same_minute(env, "web-3", "minutely", 2)
    assert {h: r["standing"] for h, r in before.items()} == {
        "web-1": "attending", "web-2": "attending", "web-3": "attending"}
    after = judged_in_the_same_minute(env, "web-3", "minutely", 3)
    assert {h: r["standing"] for h, r in after.items()} == {
        "web-1": "attending", "web-2": "attending", "web-3": "silent"}
    assert after["web-3"]["whole"] is True
    checked = env.run("check")
    assert checked.returncode == 1, checked
    assert "silent_host=1" in checked.stdout
    assert ("WARNING: minutely: host stopped attempting it: web-3 (last attempt "
            in checked.stdout), checked.stdout
    assert "hosts of minutely: 2 hosts fire it (web-1, web-2); silent: web-3 (last " \
        "attempt" in env.run("status", "--job", "minutely").stdout
    hosts = pglock_json(env, "hosts")
    assert {h["host"]: (h["state"], h["silent_jobs"]) for h in hosts["hosts"]} == {
        "web-1": ("attending", []), "web-2": ("attending", []),
        "web-3": ("silent", ["minutely"])}
    # --silent-after tunes it: four slots, and web-3 (three back) is not silent yet.
    assert env.run("check", "--silent-after", "4").returncode == 0
    assert metric_samples(env)[("pglock_job_silent_hosts", (("job", "minutely"),))] == 1
    # --hosts min=3: two fire it now; three at --silent-after 4 (web-3 is three back).
    few = env.run("check", "--job", "minutely", "--hosts", "min=3")
    assert few.returncode == 1
    assert "2 hosts fire it (web-1, web-2), fewer than --hosts min=3" in few.stdout
    assert "few_hosts=1" in few.stdout
    enough = env.run("check", "--job", "minutely", "--hosts", "min=3", "--silent-after", "4")
    assert enough.returncode == 0, enough.stdout


def test_an_unscheduled_host_is_silent_past_twice_its_usual_interval(env: Env) -> None:
    """Every minute (its gaps: 60 s): silent after 2 minutes without an attempt."""
    for _ in range(2):
        for host in ("web-1", "web-2"):
            on(env, host, "--job", "loop", "--min-hold", "0", "--", "true")
        env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - "
                  "interval '60 seconds'")
    on(env, "web-1", "--job", "loop", "--min-hold", "0", "--", "true")
    env.query("UPDATE {schema}.attendance SET last_attempt = now() - interval '100 seconds' "
              "WHERE host = 'web-2'")
    _, rows = standing(env, "loop")
    assert {h: r["standing"] for h, r in rows.items()} == {"web-1": "attending",
                                                            "web-2": "attending"}
    assert 60 <= rows["web-2"]["usual_interval"] < 90  # a minute, and the runs between
    # Past twice its usual interval (the runs between, on a loaded machine, lengthen it).
    past = 2 * rows["web-2"]["usual_interval"] + 5
    env.query("UPDATE {schema}.attendance SET last_attempt = now() - %s * interval '1 s' "
              "WHERE host = 'web-2'", (past,))
    _, rows = standing(env, "loop")
    assert {h: r["standing"] for h, r in rows.items()} == {"web-1": "attending",
                                                            "web-2": "silent"}
    # Silent for this job, not as a whole: it attempts another job.
    on(env, "web-2", "--job", "other", "--", "true")
    _, rows = standing(env, "loop")
    assert (rows["web-2"]["standing"], rows["web-2"]["whole"]) == ("silent", False)


def test_forget_host_retires_a_silent_host_and_audits_it(env: Env) -> None:
    for _ in range(2):
        for host in ("web-1", "web-9"):
            on(env, host, "--job", "minutely", *MINUTELY, "--", "true")
        env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - "
                  "interval '1 minute'")
    on(env, "web-1", "--job", "minutely", *MINUTELY, "--", "true")
    judged = judged_in_the_same_minute(env, "web-9", "minutely", 10)
    assert judged["web-9"]["standing"] == "silent"
    assert env.run("check").returncode == 1
    forgot = env.run("forget-host", "web-9", "--reason", "decommissioned, INC-88")
    assert (forgot.returncode, forgot.stderr) == (0, ""), forgot
    assert forgot.stdout.startswith("forgot host web-9 (its attendance of 1 job); audit row ")
    assert env.run("check").returncode == 0
    assert set(standing(env, "minutely")[1]) == {"web-1"}
    assert env.query("SELECT job, host, action, reason FROM {schema}.audit") == [
        (None, "web-9", "forget-host", "decommissioned, INC-88")]
    history = env.run("history")
    assert "forget-host web-9 by " in history.stdout
    # Not an action on every job: a job's status does not list it.
    assert "forget-host" not in env.run("status", "--job", "minutely").stdout
    # Unknown now: one line, exit 1, nothing written.
    again = env.run("forget-host", "web-9", "--reason", "twice")
    assert again.returncode == 1
    assert one_line(again.stderr) == (f"pglock: no host named 'web-9' is in the census here "
                                      f"(schema {env.schema!r}); pglock hosts lists them")
    assert env.query("SELECT count(*) FROM {schema}.audit") == [(1,)]
    # Its next run brings it back, as a host that has attempted once.
    on(env, "web-9", "--job", "minutely", *MINUTELY, "--", "true")
    assert standing(env, "minutely")[1]["web-9"]["repeated"] is False


@pytest.mark.parametrize(("args", "line"), [
    (("forget-host", "", "--reason", "x"), "pglock: forget-host: the host name is empty"),
    (("forget-host", "a\x01b", "--reason", "x"),
     "pglock: forget-host: the host name 'a^Ab' contains a control character"),
    (("forget-host", "h" * 256, "--reason", "x"),
     "pglock: forget-host: the host name is 256 bytes long; the limit is 255"),
    (("forget-host", "web-1"), "pglock: --reason is required: say why, for the audit row"),
])
def test_forget_host_refuses_bad_input_before_any_connection(
        env: Env, args: tuple[str, ...], line: str) -> None:
    done = env.run(*args, env={"PGLOCK_DSN": "host=/nonexistent port=1"})
    assert (done.returncode, one_line(done.stderr)) == (2, line)


def test_a_host_on_an_older_pglock_shows_as_skewed(env: Env) -> None:
    on(env, "web-1", "--job", "sync", "--", "true")
    on(env, "web-old", "--job", "sync", "--", "true", version="0.0.9")
    found = pglock_json(env, "hosts")
    assert found["newest_version"] == "0.1.0" and found["versions"] == {"0.1.0": 1,
                                                                        "0.0.9": 1}
    assert {h["host"]: h["skewed"] for h in found["hosts"]} == {"web-1": False,
                                                                 "web-old": True}
    shown = env.run("hosts")
    assert "0.0.9 (older)" in shown.stdout
    assert "version skew: pglock 0.1.0 on 1, 0.0.9 on 1; older than 0.1.0: web-old" \
        in shown.stdout
    doctor = json.loads(env.run("doctor", "--json").stdout)
    census = next(c for c in doctor["checks"] if c["check"] == "census")
    assert census["status"] == "warn"
    assert "version skew: older than 0.1.0: web-old" in census["detail"]
    # The host upgraded: its first run of the next minute records its new version.
    env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - "
              "interval '1 minute'")
    on(env, "web-old", "--job", "sync", "--", "true")
    assert pglock_json(env, "hosts")["versions"] == {"0.1.0": 2}


def test_a_host_name_is_data_in_every_report(env: Env) -> None:
    hostile = 'web|7 "x" <b>\\'
    for _ in range(2):
        on(env, hostile, "--job", "minutely", *MINUTELY, "--", "true")
        env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - "
                  "interval '1 minute'")
    judged_in_the_same_minute(env, hostile, "minutely", 10)
    checked = env.run("check")
    assert checked.returncode == 1
    # No `|` in the plugin's text: no forged performance data.
    assert 'web¦7 "x" <b>\\ (last attempt' in checked.stdout
    assert checked.stdout.count("|") == 1
    samples = metric_samples(env)
    assert ("pglock_host_last_seen_timestamp_seconds",
            (("host", hostile), ("version", "0.1.0"))) in samples
    assert pglock_json(env, "hosts")["hosts"][0]["host"] == hostile


def test_one_attempt_a_minute_is_recorded_and_a_later_win_in_it_too(env: Env) -> None:
    """The census's throttle: a host's row of a job is rewritten at most once a minute of
    the database's clock; a win after a loss in the same minute (--wait) records it ran."""
    for _ in range(3):
        # Long enough to hold through two losers on a loaded machine.
        holder = env.popen("run", "--job", "waited", "--min-hold", "0", "--", "sleep", "6",
                           env={"PGLOCK_HOST": "web-1"})
        # This try's holder running (an earlier try's rows are there already).
        env.wait_for(lambda: any(r["outcome"] == "running" for r in env.runs("waited")),
                     what="the holder's run")
        on(env, "web-2", "--job", "waited", "--", "true")
        first = env.query("SELECT last_attempt, outcome, xmin::text FROM {schema}.attendance "
                          "WHERE host = 'web-2'")
        on(env, "web-2", "--job", "waited", "--", "true")
        second = env.query("SELECT last_attempt, outcome, xmin::text FROM {schema}.attendance "
                           "WHERE host = 'web-2'")
        on(env, "web-2", "--job", "waited", "--wait", "30s", "--min-hold", "0", "--", "true")
        won = env.query("SELECT last_attempt, outcome, date_trunc('minute', now()) = "
                        "date_trunc('minute', %s::timestamptz) FROM {schema}.attendance "
                        "WHERE host = 'web-2'", (first[0][0],))
        holder.communicate(timeout=30)
        if won[0][2]:  # all in one minute: else the minute turned, and it is done again
            break
        env.query("DELETE FROM {schema}.attendance")
    else:
        raise AssertionError("three tries in a row straddled a minute")
    assert first[0][1] == "held" and second == first
    assert won[0][1] == "ran" and won[0][0] > first[0][0]


def test_forget_of_a_job_takes_its_census_with_it(env: Env) -> None:
    """A job removed from every crontab: its hosts are silent for it no longer, and a run
    that brings it back starts its census afresh."""
    for _ in range(2):
        on(env, "web-1", "--job", "gone", *MINUTELY, "--", "true")
        env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - "
                  "interval '1 minute'")
    on(env, "web-1", "--job", "kept", "--", "true")
    judged_in_the_same_minute(env, "web-1", "gone", 10)
    assert env.run("check").returncode == 1
    forgot = env.run("forget", "--job", "gone", "--reason", "removed from the crontab")
    assert (forgot.returncode, forgot.stderr) == (0, ""), forgot
    assert env.run("check").returncode == 0
    assert env.query("SELECT job FROM {schema}.attendance") == [("kept",)]
    assert env.query("SELECT jobs FROM {schema}.hosts") == [([],)]


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="a UTS namespace of its own needs root and unshare(1)")
def test_a_system_host_name_with_a_control_character_is_refused(env: Env) -> None:
    """The system's host name, unset PGLOCK_HOST: checked as the others, before any
    connection (a UTS namespace of the test's own, with a host name of its own)."""
    script = ("import os, socket, sys; socket.sethostname(sys.argv[1]); "
              "os.execv(sys.argv[2], sys.argv[2:])")
    done = subprocess.run(
        ["unshare", "--uts", sys.executable, "-c", script, "web\x1b[2Jone", PGLOCK, "run",
         "--job", "x", "--", "true"],
        env={**env.env, "PGLOCK_DSN": "host=/nonexistent port=1"}, capture_output=True,
        text=True, timeout=60)
    assert done.returncode == 2, done
    assert one_line(done.stderr) == (
        "pglock: the system's host name (set PGLOCK_HOST): the host name 'web^[[2Jone' "
        "contains a control character")


def test_a_jobs_attending_hosts_are_one_call_away(env: Env) -> None:
    """What a run may ask of the census (issue 47: candidates): the hosts attending a job,
    neither silent nor forgotten, judged by the job's recorded schedule, in one call."""
    for _ in range(2):
        for host in ("web-1", "web-2", "web-3"):
            on(env, host, "--job", "minutely", *MINUTELY, "--", "true")
        env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - "
                  "interval '1 minute'")
    on(env, "web-1", "--job", "minutely", *MINUTELY, "--", "true")
    on(env, "web-2", "--job", "minutely", *MINUTELY, "--", "true")
    moved_back(env, "web-3", "minutely", 10)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        found = census.of_job(conn, env.schema, "minutely")
        assert [a.host for a in found.attending] == ["web-1", "web-2"]
        assert [a.host for a in found.silent] == ["web-3"]
        assert census.of_job(conn, env.schema, "never").hosts == ()


def test_hosts_of_a_job_that_never_ran_is_one_line_exit_1(env: Env) -> None:
    on(env, "web-1", "--job", "sync", "--", "true")
    done = env.run("hosts", "--job", "nope")
    assert done.returncode == 1
    assert one_line(done.stderr) == (f"pglock: no job named 'nope' has run here (schema "
                                     f"{env.schema!r})")


@pytest.mark.slow  # a primary and a standby of the test's own
@pytest.mark.parametrize("event", ["crash", "promote"])
def test_a_crash_or_a_failover_empties_the_attempts_and_forgets_nobody(
        env: Env, tmp_path: Path, event: str) -> None:
    """The attempts are unlogged: a crash's recovery, or a promoted standby, has none. The
    hosts and the jobs each attends are logged: both hosts are still expected, judged from
    the census's restart (attending at first, no false alarm), and the one that attempts
    again has its attempt back."""
    pair = Pair(tmp_path / "ha", synchronous=True).start()
    try:
        env.dsn = pair.primary_dsn
        env.env["PGLOCK_DSN"] = pair.both_dsn
        for _ in range(2):
            for host in ("web-1", "web-2"):
                on(env, host, "--job", "minutely", *MINUTELY, "--", "true")
            env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - "
                      "interval '1 minute'")
        assert env.query("SELECT host, jobs FROM {schema}.hosts ORDER BY host") == [
            ("web-1", ["minutely"]), ("web-2", ["minutely"])]
        pair.kill_primary()
        if event == "crash":
            pair.primary.start()
        else:
            pair.promote()
            env.dsn = pair.standby_dsn
        assert env.query("SELECT count(*) FROM {schema}.attendance") == [(0,)]
        _, rows = standing(env, "minutely")
        assert {h: (r["standing"], r["last_attempt"], r["none_since"] is not None)
                for h, r in rows.items()} == {"web-1": ("attending", None, True),
                                              "web-2": ("attending", None, True)}
        assert env.run("check").returncode == 0
        on(env, "web-1", "--job", "minutely", *MINUTELY, "--", "true")
        _, rows = standing(env, "minutely")
        assert rows["web-1"]["last_attempt"] is not None and rows["web-1"]["repeated"]
        assert rows["web-2"]["last_attempt"] is None
        assert "hosts of minutely: 2 hosts fire it (web-1, web-2); none silent" in env.run(
            "status", "--job", "minutely").stdout
    finally:
        pair.close()
