"""Hooks and pings with real processes: a local HTTP server records the pings, hooks
leave files behind; only the host that ran tells anyone."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import Env
from endpoints import Quiet, serving

from run.test_run_basics import holding


@dataclass
class PingServer:
    """What a healthchecks-like endpoint received: (path, rid, body) in arrival order."""

    url: str
    pings: list[tuple[str, str, bytes]] = field(default_factory=list)

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.pings]


@pytest.fixture
def ping_server() -> Iterator[PingServer]:
    received: list[tuple[str, str, bytes]] = []

    class Handler(Quiet):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = urlsplit(self.path)
            received.append((parts.path, parse_qs(parts.query).get("rid", [""])[0], body))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")

    with serving(Handler) as url:
        yield PingServer(f"{url}/ping/abc", received)


# Pings -------------------------------------------------------------------------------------


def test_a_success_pings_start_then_the_url(env: Env, ping_server: PingServer) -> None:
    result = env.run("run", "--job", "pinged", "--ping-url", ping_server.url, "--",
                     "echo", "hello")
    assert (result.returncode, result.stdout, result.stderr) == (0, "hello\n", "")
    assert ping_server.paths() == ["/ping/abc/start", "/ping/abc"]
    (_, start_rid, start_body), (_, end_rid, end_body) = ping_server.pings
    assert start_rid == end_rid and len(start_rid) == 36
    assert (start_body, end_body) == (b"", b"hello\n")
    [row] = env.runs("pinged")
    assert row["error"] is None


def test_a_failure_pings_the_exit_code_with_the_output_tail(env: Env,
                                                             ping_server: PingServer) -> None:
    script = "head -c 20000 /dev/zero | tr '\\0' x; echo; echo the-end; exit 3"
    result = env.run("run", "--job", "failing", "--output-tail", "64KiB",
                     "--ping-url", ping_server.url + "/", "--", "sh", "-c", script)
    assert (result.returncode, result.stderr) == (3, "")
    assert ping_server.paths() == ["/ping/abc/start", "/ping/abc/3"]
    body = ping_server.pings[1][2]
    assert len(body) == 10 * 1024
    assert body.endswith(b"xxx\nthe-end\n")


def test_ping_url_from_the_environment(env: Env, ping_server: PingServer) -> None:
    result = env.run("run", "--job", "by-env", "--", "sh", "-c", "exit 0",
                     env={"PGLOCK_PING_URL": ping_server.url})
    assert result.returncode == 0
    assert ping_server.paths() == ["/ping/abc/start", "/ping/abc"]


def test_a_skipped_host_pings_nothing_and_runs_no_hook(env: Env,
                                                        ping_server: PingServer) -> None:
    hooked = env.tmp / "hooked"
    with holding(env, "contended", command=["sleep", "60"]):
        result = env.run("run", "--job", "contended", "--ping-url", ping_server.url,
                         "--on-failure", f"touch {hooked}", "--on-success", f"touch {hooked}",
                         "--", "true")
    assert (result.returncode, result.stdout, result.stderr) == (75, "", "")
    assert ping_server.pings == []
    assert not hooked.exists()


@pytest.mark.slow
def test_an_unreachable_ping_url_keeps_the_exit_code(env: Env) -> None:
    # A refused port, and a listener that never answers (reads time out).
    with socket.socket() as refused:
        refused.bind(("127.0.0.1", 0))
        closed_port = refused.getsockname()[1]
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        for url in (f"http://127.0.0.1:{closed_port}/x",
                    f"http://127.0.0.1:{silent.getsockname()[1]}/x"):
            job = f"unreachable-{url.rsplit(':', 1)[1].split('/')[0]}"
            result = env.run("run", "--job", job, "--ping-url", url, "--",
                             "sh", "-c", "echo out; exit 4", timeout=90)
            assert (result.returncode, result.stdout, result.stderr) == (4, "out\n", "")
            [row] = env.runs(job)
            assert row["outcome"] == "failed"
            assert "ping /4 failed: " in row["error"], row["error"]
    finally:
        silent.close()


# Hooks -------------------------------------------------------------------------------------


def test_on_failure_gets_the_environment_and_the_output_tail(env: Env) -> None:
    seen, stdin = env.tmp / "env", env.tmp / "stdin"
    result = env.run("run", "--job", "hooked", "--holder", "web-1",
                     "--on-failure", f"env > {seen}; cat > {stdin}",
                     "--on-success", f"touch {env.tmp / 'success'}",
                     "--", "sh", "-c", "echo first; echo second >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, "first\n", "second\n")
    variables = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    [row] = env.runs("hooked")
    assert variables["PGLOCK_OUTCOME"] == "failed"
    assert variables["PGLOCK_EXIT_CODE"] == "3"
    assert float(variables["PGLOCK_DURATION"]) >= 0
    assert variables["PGLOCK_JOB"] == "hooked"
    assert variables["PGLOCK_HOOK"] == "on-failure"
    assert variables["PGLOCK_HOLDER"] == "web-1"
    assert variables["PGLOCK_RUN_ID"] == str(row["id"])
    assert variables["PGLOCK_FENCING_TOKEN"] == str(row["fencing_token"])
    assert variables["PGLOCK_PREVIOUS_OUTCOME"] == ""
    assert stdin.read_bytes() == b"first\nsecond\n"
    assert not (env.tmp / "success").exists()
    assert row["error"] is None


def test_a_failed_hook_is_recorded_and_said_only_with_verbose(env: Env) -> None:
    quiet = env.run("run", "--job", "bad-hook", "--on-success", "echo oops; exit 7",
                    "--", "true")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    [row] = env.runs("bad-hook")
    assert (row["outcome"], row["error"]) == ("succeeded", "on-success hook exited 7: oops")
    loud = env.run("run", "--job", "bad-hook", "--rerun", "-v", "--on-success", "exit 7", "--",
                   "true")
    assert loud.returncode == 0
    assert "on-success hook exited 7" in loud.stderr


@pytest.mark.slow
def test_a_hanging_hook_is_killed_at_the_hook_timeout(env: Env) -> None:
    pidfile = env.tmp / "hook.pid"
    result = env.run("run", "--job", "hanging", "--hook-timeout", "1s",
                     "--on-success", f"sleep 600 & echo $! > {pidfile}; wait", "--", "true")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    [row] = env.runs("hanging")
    assert row["error"] == "on-success hook killed after --hook-timeout 1s"
    sleeper = int(pidfile.read_text())
    # The hook's whole group was killed, its background sleep included (reaped by init,
    # or a zombie until then: either way not running).
    assert not Path(f"/proc/{sleeper}").exists() or "State:\tZ" in Path(
        f"/proc/{sleeper}/status").read_text()


@pytest.mark.slow
def test_a_sigterm_during_a_hook_ends_the_hook_too(env: Env) -> None:
    """The hook runs in a session of its own (a timeout kills its group): a SIGTERM to
    pglock meanwhile must not leave it running on past pglock (sweep L21)."""
    pidfile, done = env.tmp / "hook.pid", env.tmp / "hook.done"
    holder = env.popen("run", "--job", "hooked", "--on-failure",
                       f"sleep 30 & echo $! > {pidfile}; wait; touch {done}", "--", "false")
    env.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the hook")
    sleeper = int(pidfile.read_text())
    holder.send_signal(signal.SIGTERM)
    holder.communicate(timeout=30)
    assert holder.returncode == 143

    def gone() -> bool:
        status = Path(f"/proc/{sleeper}/status")
        return not status.exists() or "State:\tZ" in status.read_text()

    env.wait_for(gone, timeout=10, what="the hook's child to end")
    assert not done.exists()


def test_recovery_fires_once_after_a_failure(env: Env) -> None:
    recovered = env.tmp / "recovered"
    hook = f'echo "$PGLOCK_PREVIOUS_OUTCOME $PGLOCK_RUN_ID" >> {recovered}'

    def run(code: int) -> int:
        result = env.run("run", "--job", "flaky", "--rerun", "--on-recovery", hook,
                         "--", "sh", "-c", f"exit {code}")
        assert result.returncode == code
        return int(env.runs("flaky")[-1]["id"])

    run(0)  # a first success recovers from nothing
    assert not recovered.exists()
    run(1)
    first_success = run(0)
    run(0)
    run(2)
    run(0)
    lines = recovered.read_text().splitlines()
    assert lines[0] == f"failed {first_success}"
    assert len(lines) == 2


def test_recovery_after_a_timed_out_run(env: Env) -> None:
    recovered = env.tmp / "recovered"
    timed_out = env.run("run", "--job", "slow", "--max-runtime", "1s", "--kill-after", "1s",
                        "--", "sleep", "30")
    assert timed_out.returncode == 124
    result = env.run("run", "--job", "slow", "--rerun", "--on-recovery",
                     f'echo "$PGLOCK_PREVIOUS_OUTCOME" > {recovered}', "--", "true")
    assert result.returncode == 0
    assert recovered.read_text() == "timed_out\n"


def test_hooks_read_their_options_from_the_environment(env: Env) -> None:
    marker = env.tmp / "marker"
    result = env.run("run", "--job", "env-hook", "--", "sh", "-c", "exit 5", env={
        "PGLOCK_ON_FAILURE": f'echo "$PGLOCK_EXIT_CODE" > {marker}',
        "PGLOCK_HOOK_TIMEOUT": "10s"})
    assert result.returncode == 5
    assert marker.read_text() == "5\n"


def test_a_command_that_cannot_start_fires_on_failure(env: Env) -> None:
    marker = env.tmp / "marker"
    result = env.run("run", "--job", "missing", "--on-failure",
                     f'echo "$PGLOCK_OUTCOME $PGLOCK_EXIT_CODE" > {marker}',
                     "--", "pglock-test-no-such-command")
    assert result.returncode == 127
    assert marker.read_text() == "failed 127\n"


def _limited_memory() -> None:
    import resource

    # 2 GiB of address space: `yes` fills more than that in the hook's timeout when its
    # output is kept whole.
    resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))


@pytest.mark.slow
def test_a_hook_that_writes_without_end_keeps_only_a_tail(env: Env) -> None:
    with env.popen("run", "--job", "yes-hook", "--hook-timeout", "3s", "--on-success",
                   "yes", "--", "true", preexec_fn=_limited_memory) as process:
        stdout, stderr = process.communicate(timeout=60)
    assert (process.returncode, stdout, stderr) == (0, "", "")
    [row] = env.runs("yes-hook")
    assert row["error"] == "on-success hook killed after --hook-timeout 3s"


def test_a_hook_whose_child_keeps_its_output_does_not_hold_pglock(env: Env) -> None:
    pidfile = env.tmp / "child.pid"
    began = time.monotonic()
    result = env.run("run", "--job", "left-child", "--hook-timeout", "60s", "--on-success",
                     f"sleep 30 & echo $! > {pidfile}; echo bye; exit 3", "--", "true")
    elapsed = time.monotonic() - began
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert (result.returncode, result.stderr) == (0, "")
    assert elapsed < 10, elapsed
    [row] = env.runs("left-child")
    assert row["error"] == "on-success hook exited 3: bye"
