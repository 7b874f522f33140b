"""A DSN that reaches a standby never takes a lock there."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Env, one_line

from pglock.db.embedded import SERVER_USER, EmbeddedServer, _install_dir

# A private primary and a streaming standby of it: the slow layer.
pytestmark = pytest.mark.slow


@pytest.fixture
def primary_and_standby(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A private primary and a streaming standby of it; their DSNs."""
    # A base backup needs full_page_writes, which the other tests turn off.
    primary = EmbeddedServer(tmp_path / "primary", settings={"fsync": "off"})
    primary_dsn = primary.join()
    standby = tmp_path / "standby"
    standby.mkdir(mode=0o700)
    user = None
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_USER)
        os.chown(standby, account.pw_uid, account.pw_gid)
        user = SERVER_USER
    binaries = _install_dir() / "bin"
    socket_dir = primary_dsn.split("host=")[1].split()[0]

    def run(*args: str) -> None:
        # The group too: root's group would meet the tmp directories' empty group bits.
        ids = {"user": user, "group": user, "extra_groups": []} if user else {}
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, **ids)
        assert done.returncode == 0, done.stderr

    run(str(binaries / "pg_basebackup"), "-D", str(standby), "-R", "-h", socket_dir,
        "-U", "postgres", "-X", "stream")
    # The primary's socket lives in its pgdata, so the backup carries its socket lock file.
    (standby / ".s.PGSQL.5432.lock").unlink(missing_ok=True)
    options = f"-c listen_addresses='' -k {standby} -c hot_standby=on"
    run(str(binaries / "pg_ctl"), "-D", str(standby), "-l", str(standby / "standby.log"),
        "-o", options, "-w", "start")
    yield primary_dsn, f"host={standby} port=5432 dbname=postgres user=postgres"
    run(str(binaries / "pg_ctl"), "-D", str(standby), "-m", "immediate", "-w", "stop")
    primary.leave()


def test_standby_alone_is_refused(env: Env, primary_and_standby: tuple[str, str]) -> None:
    _, standby = primary_and_standby
    ran = env.tmp / "ran"
    result = env.run("run", "--job", "replica", "--dsn", standby, "--connect-timeout", "2s",
                     "--", "touch", str(ran))
    assert result.returncode == 125
    assert "read-only" in one_line(result.stderr) or "standby" in result.stderr
    assert not ran.exists()


def test_monitoring_pointed_at_a_standby_is_told_why(
        env: Env, primary_and_standby: tuple[str, str]) -> None:
    """A monitoring host given a reader endpoint got libpq's bare "session is read-only"
    (docs review, section 3): the line says it is a standby, and that pglock needs the
    primary for the reports too."""
    _, standby = primary_and_standby
    for command in ("status", "check", "metrics"):
        result = env.run(command, "--dsn", standby, "--connect-timeout", "2s")
        said = result.stdout if command == "check" else result.stderr
        assert result.returncode == (3 if command == "check" else 125), result
        assert said.rstrip("\n").endswith("session is read-only (a standby or read replica: "
                                           "pglock needs the primary, for status, check and "
                                           "metrics too)"), result


def test_standby_listed_first_is_passed_over(env: Env,
                                            primary_and_standby: tuple[str, str]) -> None:
    primary, standby = primary_and_standby
    standby_host = standby.split("host=")[1].split()[0]
    primary_host = primary.split("host=")[1].split()[0]
    both = f"host={standby_host},{primary_host} port=5432,5432 dbname=postgres user=postgres"
    env.dsn = primary
    result = env.run("run", "--job", "replica", "--dsn", both, "--", "true")
    assert (result.returncode, result.stderr) == (0, "")
    [run] = env.runs("replica")
    assert run["outcome"] == "succeeded"
