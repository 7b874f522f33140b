"""An operator's stop is no failure of the job (docs/operators.md): no --on-failure hook,
the final ping is /log; a stop during a retry delay is the next attempt's, recorded
`stopped`, and `stop --wait` waits for the holder to let the lock go (issue 21, item 7;
sweep N13)."""

from __future__ import annotations

from conftest import Env, one_line

from run.test_notify import PingServer, ping_server  # noqa: F401 (a fixture)


def _hooked(env: Env, ping_server: PingServer) -> list[str]:  # noqa: F811
    hooks = env.tmp / "hooks"
    return ["--on-failure", f"echo failure >> {hooks}", "--on-success", f"echo success >> {hooks}",
            "--ping-url", ping_server.url, "--ttl", "6s"]


def test_a_stop_during_the_retry_delay_is_recorded_and_waited_for(
        env: Env, ping_server: PingServer) -> None:  # noqa: F811
    marks = env.tmp / "attempts"
    holder = env.popen("run", "--job", "retrying", "--retries", "2", "--retry-delay", "1h",
                       *_hooked(env, ping_server), "--",
                       "sh", "-c", f"echo attempt >> {marks}; exit 3")
    env.wait_for(lambda: [r["outcome"] for r in env.runs("retrying")] == ["failed"],
                 what="the first attempt to fail")
    stop = env.run("stop", "--job", "retrying", "--reason", "enough", "--wait")
    # Answered once the holder let the lock go, with the stop's own record.
    assert (stop.returncode, stop.stderr) == (0, ""), stop
    assert stop.stdout.splitlines()[-1] == "job retrying ended: stopped"
    out, err = holder.communicate(timeout=60)
    assert (holder.returncode, out, err) == (143, "", "")
    rows = env.runs("retrying")
    assert [(r["attempt"], r["outcome"], r["exit_code"]) for r in rows] == [
        (1, "failed", 3), (2, "stopped", None)]
    assert "enough" in rows[1]["error"]
    assert marks.read_text() == "attempt\n"  # the second attempt never ran
    # Released at once: the next run does not wait out a hold or the ttl.
    assert env.run("run", "--job", "retrying", "--", "true").returncode == 0
    # No failure: no on-failure hook; the ping service hears /log, not /3 or /fail.
    assert not (env.tmp / "hooks").exists()
    assert ping_server.paths()[:2] == ["/ping/abc/start", "/ping/abc/log"]


def test_a_stopped_command_fires_no_failure_hook_and_pings_log(
        env: Env, ping_server: PingServer) -> None:  # noqa: F811
    started = env.tmp / "started"
    holder = env.popen("run", "--job", "stopped", *_hooked(env, ping_server), "--",
                       "sh", "-c", f"touch {started}; exec sleep 60")
    env.wait_for(started.exists, what="the command")
    assert env.run("stop", "--job", "stopped", "--reason", "r", "--wait").returncode == 0
    holder.communicate(timeout=60)
    assert holder.returncode == 143
    assert [r["outcome"] for r in env.runs("stopped")] == ["stopped"]
    assert not (env.tmp / "hooks").exists()
    assert ping_server.paths() == ["/ping/abc/start", "/ping/abc/log"]
    # A failure still fires its hook.
    assert env.run("run", "--job", "stopped", "--on-failure",
                   f"echo failure >> {env.tmp / 'hooks'}", "--", "false").returncode == 1
    assert (env.tmp / "hooks").read_text() == "failure\n"


def test_a_stop_with_nothing_running_is_still_exit_1(env: Env) -> None:
    assert env.run("run", "--job", "idle", "--", "true").returncode == 0
    stop = env.run("stop", "--job", "idle", "--reason", "r", "--wait")
    assert stop.returncode == 1
    assert "not running" in one_line(stop.stderr)
