"""Fleet control: pause and resume from any host, stop a running command cleanly."""

from __future__ import annotations

import json
import time

import pytest
from conftest import Env, one_line
from operating import holding


def audit(env: Env) -> list[tuple[str | None, str, str | None]]:
    return env.query("SELECT job, action, reason FROM {schema}.audit ORDER BY id")


@pytest.mark.slow
def test_pause_skips_every_host_silently_until_resumed(env: Env) -> None:
    assert env.run("run", "--job", "inv", "--min-hold", "0", "--", "true").returncode == 0
    paused = env.run("pause", "--job", "inv", "--reason", "invoice DB migration")
    assert (paused.returncode, paused.stderr) == (0, ""), paused
    assert paused.stdout == "paused inv until resumed\n"
    marks = env.tmp / "ran"
    hosts = [env.popen("run", "--job", "inv", "--holder", f"web-{n}", "--", "sh", "-c",
                       f"echo {n} >> {marks}") for n in range(5)]
    results = [(p.wait(timeout=60), p.communicate()) for p in hosts]
    assert [(code, out, err) for code, (out, err) in results] == [(75, "", "")] * 5
    assert not marks.exists()
    assert [r["outcome"] for r in env.runs("inv")] == ["succeeded"]
    verbose = env.run("run", "--job", "inv", "-v", "--", "true")
    assert verbose.returncode == 75 and "paused" in verbose.stderr, verbose
    resumed = env.run("resume", "--job", "inv", "--reason", "done")
    assert (resumed.returncode, resumed.stdout, resumed.stderr) == (0, "resumed inv\n", "")
    again = env.run("run", "--job", "inv", "--", "sh", "-c", f"echo again >> {marks}")
    assert again.returncode == 0, again
    assert marks.read_text() == "again\n"
    assert audit(env) == [("inv", "pause", "invoice DB migration"), ("inv", "resume", "done")]


def test_pause_until_ends_by_itself(env: Env) -> None:
    assert env.run("run", "--job", "j", "--min-hold", "0", "--", "true").returncode == 0
    assert env.run("pause", "--job", "j", "--reason", "r", "--until", "2s").returncode == 0
    assert env.run("run", "--job", "j", "--min-hold", "0", "--", "true").returncode == 75
    env.wait_for(lambda: env.run("run", "--job", "j", "--min-hold", "0", "--",
                                 "true").returncode == 0, what="the pause to end")


def test_pause_all_covers_jobs_never_seen_and_resume_all_undoes_it(env: Env) -> None:
    # Operator commands never create the schema (a typo'd --schema would get a new one).
    assert env.run("init").returncode == 0
    paused = env.run("pause", "--all", "--reason", "database migration")
    assert (paused.returncode, paused.stdout, paused.stderr) == (
        0, "paused every job until resumed\n", "")
    assert env.run("run", "--job", "brand-new", "--", "true").returncode == 75
    one = env.run("resume", "--job", "brand-new")
    assert one.returncode == 0
    assert "every job is still paused" in one.stdout
    assert env.run("resume", "--all").returncode == 0
    assert env.run("run", "--job", "brand-new", "--", "true").returncode == 0
    assert audit(env) == [(None, "pause", "database migration"), (None, "resume", None)]


def test_resume_all_names_the_jobs_paused_one_by_one(env: Env) -> None:
    for job in ("inv", "sync", "free"):
        assert env.run("run", "--job", job, "--min-hold", "0", "--", "true").returncode == 0
    for job in ("sync", "inv"):
        assert env.run("pause", "--job", job, "--reason", "own").returncode == 0
    assert env.run("pause", "--all", "--reason", "migration").returncode == 0
    resumed = env.run("resume", "--all")
    assert (resumed.returncode, resumed.stderr) == (0, ""), resumed
    assert resumed.stdout == ("resumed every job\n"
                              "still paused one by one: inv, sync (pglock resume --job NAME)\n")
    assert env.run("run", "--job", "free", "--min-hold", "0", "--", "true").returncode == 0
    assert env.run("run", "--job", "inv", "--min-hold", "0", "--", "true").returncode == 75


def test_pause_while_running_lets_the_run_finish(env: Env) -> None:
    with holding(env, "long") as holder:
        paused = env.run("pause", "--job", "long", "--reason", "window")
        assert paused.returncode == 0, paused
        assert "long is running on" in paused.stdout
        assert "it will finish; later runs are skipped" in paused.stdout
    assert holder.returncode == 0
    assert env.run("run", "--job", "long", "--min-hold", "0", "--", "true").returncode == 75
    assert [r["outcome"] for r in env.runs("long")] == ["succeeded"]


@pytest.mark.parametrize(("args", "message"), [
    (("pause", "--reason", "r"), "name the jobs (--job NAME, repeatable) or --all"),
    (("pause", "--all", "--job", "x", "--reason", "r"), "--job and --all do not go together"),
    (("pause", "--job", "x"), "--reason is required"),
    (("pause", "--job", "never-ran", "--reason", "r"), "no job named 'never-ran' has run here"),
    (("pause", "--all", "--reason", "r", "--until", "2001-01-01T00:00:00+00:00"), "in the past"),
    (("pause", "--all", "--reason", "r", "--until", "soon"), "is neither a duration"),
    (("stop", "--job", "idle-job", "--reason", "r"), "is not running; nothing to stop"),
])
def test_bad_control_input_is_one_line(env: Env, args: tuple[str, ...], message: str) -> None:
    assert env.run("run", "--job", "idle-job", "--", "true").returncode == 0
    result = env.run(*args)
    assert result.returncode in (1, 2), result
    assert result.stdout == ""
    assert message in one_line(result.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lease", "advisory"])
def test_stop_ends_the_command_cleanly(env: Env, mode: str) -> None:
    marks = env.tmp / "marks"
    # The command notes the SIGTERM it gets, then exits as a well-behaved one does.
    script = (f"trap 'echo term >> {marks}; exit 0' TERM; echo started >> {marks}; "
              "while :; do sleep 0.05; done")
    holder = env.popen("run", "--job", "s", "--mode", mode, "--ttl", "6s", "--", "sh", "-c",
                       script)
    env.wait_for(lambda: marks.exists(), what="the command")
    asked = time.monotonic()
    stop = env.run("stop", "--job", "s", "--reason", "runaway", "--wait")
    latency = time.monotonic() - asked
    assert (stop.returncode, stop.stderr) == (0, ""), stop
    assert "ended: stopped" in stop.stdout
    out, err = holder.communicate(timeout=30)
    # The shell may say its sleep was terminated; pglock itself says nothing.
    assert (holder.returncode, out) == (143, ""), err
    assert "pglock" not in err
    assert marks.read_text() == "started\nterm\n"
    run = env.runs("s")[-1]
    assert run["outcome"] == "stopped"
    assert "runaway" in run["error"]
    # Released normally: a contender runs at once, no lock-delay.
    contender = env.run("run", "--job", "s", "--mode", mode, "--", "true")
    assert contender.returncode == 0, contender
    assert ("s", "stop", "runaway") in audit(env)
    print(f"stop latency ({mode}, ttl 6s): {latency:.2f}s")


@pytest.mark.slow
def test_stop_of_a_wedged_holder_says_so(env: Env) -> None:
    holder, _ = env.start_holder("w", "--ttl", "6s")
    holder.send_signal(19)  # SIGSTOP: it cannot renew, so it cannot see the request
    try:
        stop = env.run("stop", "--job", "w", "--reason", "r", "--wait")
        assert stop.returncode == 1, stop
        assert "pglock clear --job w" in one_line(stop.stderr)
    finally:
        holder.send_signal(18)
        holder.communicate(timeout=30)


def test_status_json_lists_audit_rows(env: Env) -> None:
    assert env.run("run", "--job", "a", "--", "true").returncode == 0
    assert env.run("pause", "--job", "a", "--reason", "why").returncode == 0
    result = env.run("status", "--job", "a", "--json")
    assert result.returncode == 0, result
    document = json.loads(result.stdout)
    assert document["jobs"][0]["state"] == "paused"


def test_forget_retires_a_job_until_it_runs_again(env: Env) -> None:
    assert env.run("run", "--job", "old", "--", "false").returncode == 1
    assert env.run("run", "--job", "kept", "--", "true").returncode == 0
    forgot = env.run("forget", "--job", "old", "--reason", "removed from the crontab")
    assert (forgot.returncode, forgot.stderr) == (0, ""), forgot
    jobs = json.loads(env.run("status", "--json").stdout)["jobs"]
    assert [j["job"] for j in jobs] == ["kept"]
    check = env.run("check")
    assert check.returncode == 0, check
    assert 'job="old"' not in env.run("metrics").stdout
    assert [r["outcome"] for r in env.runs("old")] == ["failed"]
    assert ("old", "forget", "removed from the crontab") in audit(env)
    # Asked for by name, a forgotten job is said to be forgotten, not never to have run.
    status = env.run("status", "--job", "old")
    assert status.returncode == 1, status
    assert "job 'old' was forgotten (pglock forget) at " in one_line(status.stderr)
    checked = env.run("check", "--job", "old")
    assert checked.returncode == 3, checked
    assert checked.stdout.startswith("PGLOCK UNKNOWN - job 'old' was forgotten (pglock forget) at ")
    assert env.run("run", "--job", "old", "--rerun", "--", "true").returncode == 0
    jobs = json.loads(env.run("status", "--json").stdout)["jobs"]
    assert [j["job"] for j in jobs] == ["kept", "old"]


def test_forget_is_refused_while_the_job_runs(env: Env) -> None:
    with holding(env, "busy"):
        result = env.run("forget", "--job", "busy", "--reason", "r")
        assert result.returncode == 1, result
        assert "is running on" in one_line(result.stderr)
    unknown = env.run("forget", "--job", "nope", "--reason", "r")
    assert unknown.returncode == 1
    assert "no job named 'nope'" in one_line(unknown.stderr)


def test_clear_writes_an_audit_row_too(env: Env) -> None:
    with holding(env, "c"):
        result = env.run("clear", "--job", "c", "--reason", "wedged", "--yes", "--now")
        assert result.returncode == 0, result
    assert ("c", "clear", "wedged") in audit(env)
    history = json.loads(env.run("history", "--job", "c", "--json").stdout)
    assert [(a["action"], a["reason"]) for a in history["actions"]] == [("clear", "wedged")]


def test_check_metrics_and_status_with_paused_jobs(env: Env) -> None:
    # A failed job that is paused is neither failed nor overdue while the pause lasts.
    assert env.run("run", "--job", "broken", "--", "false").returncode == 1
    assert env.run("run", "--job", "fine", "--", "true").returncode == 0
    assert env.run("pause", "--job", "broken", "--reason", "fixing it").returncode == 0
    check = env.run("check")
    assert check.returncode == 0, check
    assert check.stdout.splitlines()[0] == (
        "PGLOCK OK - 2 jobs: 1 paused, 1 ok | jobs=2 ok=1 dead=0 failed=0 overdue=0 paused=1 "
        "silent_host=0 skipped_running=0 slow=0 stale=0")
    # A pause older than --paused-warning is a forgotten one.
    old = env.run("check", "--paused-warning", "0")
    assert old.returncode == 1, old
    assert "WARNING: broken: paused" in old.stdout and "fixing it" in old.stdout
    metrics = env.run("metrics").stdout
    assert 'pglock_job_paused{job="broken"} 1' in metrics
    assert 'pglock_job_paused{job="fine"} 0' in metrics
    document = json.loads(env.run("status", "--json").stdout)
    paused = {j["job"]: j["paused"] for j in document["jobs"]}
    assert paused["fine"] is None
    assert (paused["broken"]["reason"], paused["broken"]["every_job"]) == ("fixing it", False)
    assert {j["job"]: j["state"] for j in document["jobs"]} == {"broken": "paused",
                                                               "fine": "held"}
    screen = env.run("status").stdout
    assert "broken is paused since" in screen and "fixing it" in screen
    one = json.loads(env.run("status", "--job", "broken", "--json").stdout)
    assert [(a["action"], a["reason"]) for a in one["actions"]] == [("pause", "fixing it")]
