"""Tests for the embedded PostgreSQL server, with real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import psycopg
import pytest

from pglock.db.embedded import EmbeddedError, EmbeddedServer

# Every test starts (and stops) a server of its own: the slow layer.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

# Joins, prints the conninfo, waits for a line on stdin, then leaves.
CHILD = """
import sys
from pathlib import Path
from typing import ClassVar
from pglock.db.embedded import EmbeddedError, EmbeddedServer
server = EmbeddedServer(Path(sys.argv[1]), settings=dict(fsync="off"))
print(server.join(), flush=True)
sys.stdin.readline()
server.leave()
"""


class Child:
    """A separate python process that uses the server."""

    spawned: ClassVar[list[Child]] = []

    def __init__(self, data_dir: Path) -> None:
        self.spawned.append(self)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(data_dir)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def joined(self) -> str:
        """Wait until the child has joined; return its conninfo."""
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def release(self) -> None:
        """Tell the child to leave, without waiting."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        self.released = True

    def leave(self) -> None:
        """Make the child leave and check it printed nothing else."""
        if not getattr(self, "released", False):
            self.release()
        out, err = self.proc.communicate(timeout=30)
        assert (self.proc.returncode, out, err) == (0, "", "")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=30)


def server_pid(server: EmbeddedServer) -> int | None:
    """Return the live postmaster's pid, or None."""
    try:
        pid = int((server.pgdata / "postmaster.pid").read_text().split("\n")[0])
        os.kill(pid, 0)
    except (FileNotFoundError, ProcessLookupError):
        return None
    return pid


def select_one(conninfo: str) -> int:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("select 1").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    server = EmbeddedServer(tmp_path / "pglock", settings=FAST)
    yield server
    for child in Child.spawned:
        if child.proc.returncode is None:
            child.kill()
    Child.spawned.clear()
    server.stop()


def test_join_gives_a_working_conninfo(server: EmbeddedServer) -> None:
    conninfo = server.join()
    assert conninfo == f"host={server.pgdata} port=5432 dbname=postgres user=postgres"
    assert select_one(conninfo) == 1
    assert server.join() == server.conninfo == conninfo
    server.leave()
    assert server_pid(server) is None


def test_processes_share_one_server(server: EmbeddedServer) -> None:
    first = Child(server.data_dir)
    conninfo = first.joined()
    second = Child(server.data_dir)
    assert second.joined() == conninfo
    pid = server_pid(server)
    assert pid is not None
    first.leave()
    assert server_pid(server) == pid
    assert select_one(conninfo) == 1
    second.leave()
    assert server_pid(server) is None


def test_concurrent_first_joins_share_one_server(server: EmbeddedServer) -> None:
    children = [Child(server.data_dir) for _ in range(4)]
    conninfos = {child.joined() for child in children}
    assert len(conninfos) == 1
    assert select_one(conninfos.pop()) == 1
    for child in children:
        child.release()
    for child in children:
        child.leave()
    assert server_pid(server) is None


def test_killed_user_does_not_keep_server_alive(server: EmbeddedServer) -> None:
    child = Child(server.data_dir)
    child.joined()
    child.kill()
    assert server_pid(server) is not None
    assert select_one(server.join()) == 1
    server.leave()
    assert server_pid(server) is None


def test_long_data_dir_uses_short_socket_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(str(data_dir)) > 110
    server = EmbeddedServer(data_dir, settings=FAST)
    try:
        conninfo = server.join()
        assert conninfo.startswith("host=/tmp/pglock-")
        assert select_one(conninfo) == 1
    finally:
        server.leave()
    assert server_pid(server) is None
    Path(conninfo.split()[0].removeprefix("host=")).rmdir()


def test_stop_and_start_keep_data(server: EmbeddedServer) -> None:
    with psycopg.connect(server.join(), autocommit=True) as conn:
        conn.execute("create table kept (v text); insert into kept values ('x')")
    server.stop()
    assert server_pid(server) is None
    server.start()
    with psycopg.connect(server.conninfo) as conn:
        assert conn.execute("select v from kept").fetchall() == [("x",)]
    server.leave()
    assert server_pid(server) is None


def test_failed_start_names_the_log(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "pglock", settings={"no_such_setting": "1"})
    with pytest.raises(EmbeddedError, match=r"did not start \(see .*server\.log\)"):
        server.join()
    assert "no_such_setting" in server.log_path.read_text()
    assert server_pid(server) is None
