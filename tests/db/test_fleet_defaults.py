"""The literal crontab line is safe: one trigger runs once, no silent private database,
and a lock lost before its release is told as lost."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from conftest import PGLOCK, Env, one_line
from operating import holding

from pglock.db.embedded import EmbeddedServer


def _marks(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_host_whose_cron_fires_a_second_later_does_not_rerun_the_trigger(env: Env) -> None:
    """Two hosts, the literal line (no --schedule, no --min-hold), a 0.1 s command."""
    marks = env.tmp / "marks"
    command = ["--", "sh", "-c", f'echo "$PGLOCK_HOLDER" >> {marks}; sleep 0.1']
    first = env.popen("run", "--job", "nightly", "--holder", "web-1", *command)
    time.sleep(1.0)  # web-2's clock is a second behind: its cron fires the same minute later
    second = env.popen("run", "--job", "nightly", "--holder", "web-2", *command)
    outputs = [process.communicate(timeout=60) for process in (first, second)]
    assert sorted([first.returncode, second.returncode]) == [0, 75], outputs
    assert outputs == [("", "")] * 2
    assert len(_marks(marks)) == 1
    [run] = env.runs("nightly")
    assert run["outcome"] == "succeeded"
    # The lock is still held (its hold) though the command ended: that is what stopped web-2.
    assert env.query("SELECT released_at IS NOT NULL AND expires_at > clock_timestamp() "
                     "FROM {schema}.locks WHERE job = 'nightly'") == [(True,)]


def test_a_deliberate_rerun_takes_a_lock_in_its_hold_but_never_a_running_one(env: Env) -> None:
    assert env.run("run", "--job", "report", "--", "true").returncode == 0
    again = env.run("run", "--job", "report", "--", "true")
    assert (again.returncode, again.stderr) == (75, "")
    rerun = env.run("run", "--job", "report", "--rerun", "--", "true")
    assert (rerun.returncode, rerun.stderr) == (0, "")
    with holding(env, "report", "--rerun"):
        assert env.run("run", "--job", "report", "--rerun", "--", "true").returncode == 75
    assert [run["outcome"] for run in env.runs("report")] == ["succeeded"] * 3


def test_min_hold_0_releases_at_once(env: Env) -> None:
    assert env.run("run", "--job", "quick", "--min-hold", "0", "--", "true").returncode == 0
    assert env.run("run", "--job", "quick", "--", "true").returncode == 0
    assert len(env.runs("quick")) == 2


def test_wait_is_a_handover_and_a_fresh_trigger_is_not(env: Env) -> None:
    # A hold far longer than the waits below: only a handover can get in before it ends.
    stop = env.tmp / "stop"
    holder = env.popen("run", "--job", "serial", "--min-hold", "10m", "--", "sh", "-c",
                       f"while [ ! -e {stop} ]; do sleep 0.05; done")
    env.wait_for(lambda: env.runs("serial"), what="the holder's run")
    # Already waiting while the holder runs: it gets the lock when the holder releases.
    waiter = env.popen("run", "--job", "serial", "--wait", "60s", "--min-hold", "0", "--",
                       "true")
    # Its first attempt (the acquire statement, the last its session ran) found it held;
    # the holder's session, idle while its command runs, last ran its own acquire.
    env.wait_for(lambda: env.query(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pglock run serial%%'"
        " AND state = 'idle' AND query LIKE '%%.acquire(%%'")[0][0] > 1, what="the waiter")
    stop.touch()
    assert holder.communicate(timeout=30) == ("", "") and holder.returncode == 0
    assert waiter.communicate(timeout=60) == ("", "") and waiter.returncode == 0
    assert [run["outcome"] for run in env.runs("serial")] == ["succeeded"] * 2

    # A fresh trigger after a run with a hold: not a handover, even when it waits a while.
    assert env.run("run", "--job", "after", "--min-hold", "10m", "--", "true").returncode == 0
    late = env.run("run", "--job", "after", "--wait", "2s", "--", "true")
    assert (late.returncode, late.stderr) == (75, "")
    assert len(env.runs("after")) == 1


def test_the_hold_holds_in_advisory_mode_too(env: Env) -> None:
    assert env.run("run", "--job", "adv", "--mode", "advisory", "--", "true").returncode == 0
    assert env.run("run", "--job", "adv", "--mode", "advisory", "--", "true").returncode == 75
    assert env.run("run", "--job", "adv", "--mode", "advisory", "--rerun", "--",
                   "true").returncode == 0
    assert len(env.runs("adv")) == 2


def test_a_lock_cleared_before_the_release_is_recorded_lost(env: Env) -> None:
    """clear --now while the command runs, which ends before its holder's next renewal."""
    started, stop = env.tmp / "started", env.tmp / "stop"
    holder = env.popen("run", "--job", "cleared", "--ttl", "60s", "--", "sh", "-c",
                       f"touch {started}; while [ ! -e {stop} ]; do sleep 0.05; done")
    env.wait_for(started.exists, what="the command")
    cleared = env.run("clear", "--job", "cleared", "--yes", "--now", "--reason", "test")
    assert cleared.returncode == 0, cleared
    other = env.run("run", "--job", "cleared", "--min-hold", "0", "--", "true")
    assert other.returncode == 0
    stop.touch()  # the first renewal is 20 s away: only the release can find out
    _, stderr = holder.communicate(timeout=30)
    assert holder.returncode == 125
    assert "lock lost" in one_line(stderr) and "releasing" in stderr
    lost, _audit, after = env.runs("cleared")
    assert (lost["outcome"], lost["exit_code"]) == ("lock_lost", 0)
    assert after["outcome"] == "succeeded"
    summary = env.query("SELECT outcome_counts FROM {schema}.jobs WHERE job = 'cleared'")
    assert "succeeded" in summary[0][0] and summary[0][0]["succeeded"] == 1


@pytest.mark.slow
def test_the_watchdog_sends_no_second_sigterm_while_pglock_is_healthy(
        env: Env, private_server: EmbeddedServer) -> None:
    """The lock runs out with the database; pglock itself stops the command, and the
    watchdog, which would act half a margin later, leaves the SIGTERM to it."""
    env.dsn = env.env["PGLOCK_DSN"] = private_server.conninfo
    terms = env.tmp / "terms"
    holder = env.popen("run", "--job", "patient", "--ttl", "6s", "--connect-timeout", "2s",
                       "--", "sh", "-c",
                       f"exec 2>/dev/null; trap 'echo TERM >> {terms}' TERM; "
                       "while :; do sleep 0.05; done")
    env.wait_for(lambda: env.runs("patient"), what="the run row")
    private_server.stop()
    try:
        _, stderr = holder.communicate(timeout=60)
    finally:
        private_server.start()
    assert holder.returncode == 125
    line = one_line(stderr)
    assert "lock lost" in line and "could not be recorded" in line
    # Killed by pglock's own SIGKILL after one SIGTERM, never a second.
    assert _marks(terms) == ["TERM"]


def _no_database_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGLOCK_", "PG"))}
    # Stopped with its last user unless a test asks for a linger: no server left behind.
    env["PGLOCK_EMBEDDED_LINGER"] = "0"
    return {**env, "XDG_DATA_HOME": str(tmp_path / "data"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"), **extra}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PGLOCK, *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize(("setting", "named"), [
    ({"PGLOCK_EMBEDDED": "0"}, "PGLOCK_EMBEDDED=0"),
    ({"PGLOCK_EMBEDDED": "off"}, "PGLOCK_EMBEDDED=off"),
    ({"PGLOCK_CONFIG": "file"}, "embedded = false in"),
])
def test_a_fleet_can_forbid_the_embedded_fallback(tmp_path: Path, setting: dict[str, str],
                                                 named: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text("embedded = false\n")
    if "PGLOCK_CONFIG" in setting:
        setting = {"PGLOCK_CONFIG": str(config)}
    result = _run(_no_database_env(tmp_path, **setting), "run", "--job", "x", "--",
                  "touch", str(tmp_path / "ran"))
    assert result.returncode == 125 and result.stdout == ""
    line = one_line(result.stderr)
    # The config file named is the one read: PGLOCK_CONFIG's, else the default path.
    read = str(config) if "PGLOCK_CONFIG" in setting else "/etc/pglock/config.toml"
    assert named in line and "PGLOCK_DSN" in line and read in line
    assert not (tmp_path / "ran").exists() and not (tmp_path / "data").exists()


@pytest.mark.parametrize(("setting", "complaint"), [
    ({"PGLOCK_EMBEDDED": "maybe"}, "PGLOCK_EMBEDDED: 'maybe' is not 0 or 1"),
    ({"PGLOCK_CONFIG": 'embedded = "no"'}, "embedded must be true or false"),
    ({"PGLOCK_EMBEDDED_LINGER": "soon"}, "PGLOCK_EMBEDDED_LINGER: 'soon' is not a duration"),
    ({"PGLOCK_EMBEDDED_LINGER": "8d"}, "PGLOCK_EMBEDDED_LINGER: 8d is out of range (0 to 7d)"),
    # A number is seconds (README: 0 stops it with its last user); out of range, refused.
    ({"PGLOCK_CONFIG": "embedded_linger = -1"}, "embedded_linger: -1 is out of range (0 to 7d)"),
    ({"PGLOCK_CONFIG": "embedded_linger = true"},
     'embedded_linger must be a duration ("10m") or a number of seconds'),
    ({"PGLOCK_CONFIG": 'embedded_linger = "1y"'}, "embedded_linger: '1y' is not a duration"),
])
def test_bad_embedded_settings_are_one_line(tmp_path: Path, setting: dict[str, str],
                                            complaint: str) -> None:
    if "PGLOCK_CONFIG" in setting:
        config = tmp_path / "config.toml"
        config.write_text(setting["PGLOCK_CONFIG"] + "\n")
        # An empty variable is unset: the file's value counts.
        setting = {"PGLOCK_CONFIG": str(config), "PGLOCK_EMBEDDED_LINGER": ""}
    result = _run(_no_database_env(tmp_path, **setting), "run", "--job", "x", "--", "true")
    assert result.returncode == 125
    assert complaint in one_line(result.stderr)


@pytest.mark.slow
def test_the_first_use_of_the_embedded_server_is_said_once(tmp_path: Path) -> None:
    env = _no_database_env(tmp_path, PGLOCK_EMBEDDED_LINGER="0")
    first = _run(env, "run", "--job", "hello", "--", "echo", "hello")
    assert (first.returncode, first.stdout) == (0, "hello\n")
    line = one_line(first.stderr)
    assert line == (f"pglock: using an embedded PostgreSQL private to this host under "
                    f"{tmp_path / 'data' / 'pglock'}; set PGLOCK_DSN for a fleet")
    second = _run(env, "run", "--job", "hello", "--rerun", "--", "echo", "hello")
    assert (second.returncode, second.stdout, second.stderr) == (0, "hello\n", "")
    # A linger of 0: stopped with its last user.
    assert _postmaster(tmp_path / "data" / "pglock") is None


def _postmaster(data_dir: Path) -> int | None:
    """The embedded server's live postmaster pid, or None."""
    try:
        pid = int((data_dir / "pgdata" / "postmaster.pid").read_text().split("\n")[0])
        os.kill(pid, 0)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return pid


def _reaper_waiting(data_dir: Path) -> bool:
    """Whether a reaper holds reaper.lock (it does for as long as it lives)."""
    fd = os.open(data_dir / "reaper.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@pytest.mark.slow  # waits for the linger to run out
def test_the_embedded_server_lingers_warm_then_its_reaper_stops_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data" / "pglock"
    env = _no_database_env(tmp_path, PGLOCK_EMBEDDED_LINGER="3s")
    try:
        assert _run(env, "run", "--job", "warm", "--min-hold", "0", "--", "true").returncode == 0
        server = _postmaster(data_dir)
        assert server is not None and _reaper_waiting(data_dir)
        # The next run finds it up: the same postmaster, and still one reaper.
        assert _run(env, "run", "--job", "warm", "--min-hold", "0", "--", "true").returncode == 0
        assert _postmaster(data_dir) == server and _reaper_waiting(data_dir)
        # Then nobody comes: the reaper stops it after the linger, and is gone itself.
        deadline = time.monotonic() + 30
        while _postmaster(data_dir) is not None or _reaper_waiting(data_dir):
            assert time.monotonic() < deadline, "the reaper did not stop the server"
            time.sleep(0.1)
    finally:
        EmbeddedServer(data_dir).stop()


def test_cron_tz_sets_the_zone_of_the_slot(env: Env) -> None:
    result = env.run("run", "--job", "zoned", "--schedule", "0 3 * * *", "--", "true",
                     env={"CRON_TZ": "Asia/Kathmandu", "TZ": "America/New_York"})
    assert (result.returncode, result.stderr) == (0, "")
    assert env.query("SELECT timezone FROM {schema}.jobs") == [("Asia/Kathmandu",)]
    [run] = env.runs("zoned")
    slot = run["slot"].astimezone(ZoneInfo("Asia/Kathmandu"))
    assert (slot.hour, slot.minute) == (3, 0)
    # --tz (or PGLOCK_TZ) comes first.
    explicit = env.run("run", "--job", "utc", "--schedule", "0 3 * * *", "--", "true",
                       env={"CRON_TZ": "Asia/Kathmandu", "PGLOCK_TZ": "UTC"})
    assert explicit.returncode == 0
    assert env.query("SELECT timezone FROM {schema}.jobs WHERE job = 'utc'") == [("UTC",)]


def test_a_bad_cron_tz_is_named(env: Env) -> None:
    result = env.run("run", "--job", "z", "--schedule", "@daily", "--", "true",
                     env={"CRON_TZ": "Mars/Olympus"})
    assert result.returncode == 2
    assert "CRON_TZ: 'Mars/Olympus' is not a known time zone" in one_line(result.stderr)


def test_schedule_reads_pglock_schedule(env: Env) -> None:
    result = env.run("run", "--job", "from-env", "--", "true",
                     env={"PGLOCK_SCHEDULE": "*/5 * * * *", "PGLOCK_TZ": "UTC"})
    assert result.returncode == 0
    assert env.query("SELECT schedule FROM {schema}.jobs") == [("*/5 * * * *",)]


@pytest.mark.slow  # starts the embedded server three times
def test_a_reaper_that_cannot_be_started_is_said_once(tmp_path: Path) -> None:
    """pglock run by an interpreter it cannot execute again (a venv under /root, run as
    another user) could start no reaper: the server stopped at every exit and the warm
    linger was silently off (docs review, section 3 item 5). Said once, until a reaper
    starts again. Here the interpreter is a copy that loses its execute bits while the
    run goes on (root too needs one of them to execute a file)."""
    data_dir = tmp_path / "data" / "pglock"
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    shutil.copy2(os.path.realpath(sys.executable), python)
    python.chmod(0o755)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = _no_database_env(tmp_path, PGLOCK_EMBEDDED_LINGER="30s",
                           PYTHONPATH=f"{Path(__file__).parents[2]}:{site}")
    go, started = tmp_path / "go", tmp_path / "started"
    command = ["sh", "-c", f'touch {started}; while [ ! -e {go} ]; do sleep 0.05; done']

    def run_losing_its_interpreter() -> subprocess.CompletedProcess[str]:
        go.unlink(missing_ok=True)
        started.unlink(missing_ok=True)
        process = subprocess.Popen([str(python), "-m", "pglock", "run", "--job", "cold",
                                    "--min-hold", "0", "--", *command], env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline and process.poll() is None, "no start"
            time.sleep(0.05)
        python.chmod(0o644)
        go.touch()
        out, err = process.communicate(timeout=120)
        python.chmod(0o755)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    try:
        first = run_losing_its_interpreter()
        assert first.returncode == 0, first
        lines = [line for line in first.stderr.splitlines()
                 if not line.startswith("pglock: using an embedded PostgreSQL")]
        assert lines == [f"pglock: the embedded server's linger is off: its reaper could not "
                         f"be started ({python}: Permission denied), so the server stops "
                         "with its last user and each command starts it again; said once"]
        assert _postmaster(data_dir) is None
        second = run_losing_its_interpreter()
        assert (second.returncode, second.stderr) == (0, "")
        # A reaper that starts again: the linger is on, and a later failure is said again.
        third = subprocess.run([str(python), "-m", "pglock", "run", "--job", "warm",
                                "--min-hold", "0", "--", "true"], env=env, text=True,
                               capture_output=True, timeout=120, check=False)
        assert (third.returncode, third.stderr) == (0, "")
        assert _postmaster(data_dir) is not None and _reaper_waiting(data_dir)
        assert not (data_dir / "no-reaper").exists()
    finally:
        python.chmod(0o755)
        EmbeddedServer(data_dir).stop()
