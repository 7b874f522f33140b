"""A Patroni cluster in asynchronous mode (its default: no synchronous_mode,
maximum_lag_on_failover 1 MB), two nodes and an etcd, with contenders of a lease job and
an advisory job trying throughout a switchover, a SIGKILL of the leader's postmaster
(patroni restarts it: no promotion) and the loss of the leader's whole node (an
unplanned failover): no two commands of a job ever run at once, and every token is new.
And a scheduled job triggered (as cron would, without --wait) right after each promotion:
its slot runs, late by the wait after the promotion at most, never lost to it.

Debian's patroni (3.0) and etcd-server, with Debian's PostgreSQL 15 (the newest that
patroni 3.0 knows); skipped where they are missing. Patroni runs its servers as the
embedded server's account when the tests run as root.
"""

from __future__ import annotations

import itertools
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Env, free_port

from pglock.db.embedded import SERVER_USER

pytestmark = pytest.mark.slow

BIN = Path("/usr/lib/postgresql/15/bin")

NODE = """\
scope: pglock-test
name: {name}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    postgresql:
      use_pg_rewind: false
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 5
        max_replication_slots: 5
        fsync: "off"
  initdb:
  - encoding: UTF8
  pg_hba:
  - local all all trust
  - local replication all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{port}
  connect_address: 127.0.0.1:{port}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {data}.pgpass
  authentication:
    superuser:
      username: {user}
    replication:
      username: {user}
  parameters:
    unix_socket_directories: {sockets}
"""

# Marks each tick with the run's token and pid for about a second, then ends.
TICKS = ('i=0; while [ $i -lt 10 ]; do echo "$PGLOCK_FENCING_TOKEN $$ $(date +%s%N)" '
         '>> {marks}; sleep 0.1; i=$((i + 1)); done')


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.user = SERVER_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self.etcd_port = free_port()
        self.nodes = {name: (free_port(), free_port()) for name in ("n1", "n2")}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.patroni: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def dsn(self) -> str:
        ports = ",".join(str(port) for port, _ in self.nodes.values())
        return (f"host=127.0.0.1,127.0.0.1 port={ports} dbname=postgres user={self.user} "
                "target_session_attrs=read-write")

    def start(self) -> Cluster:
        self.directory.mkdir(mode=0o755, exist_ok=True)
        self.processes.append(subprocess.Popen(
            ["etcd", "--data-dir", str(self.directory / "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{free_port()}", "--enable-v2=true"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for name, (port, api) in self.nodes.items():
            config = self.directory / f"{name}.yml"
            config.write_text(NODE.format(
                name=name, api=api, etcd=self.etcd_port, port=port, bin=BIN,
                data=self.directory / name, user=self.user, sockets=self.directory))
            if os.geteuid() == 0:
                shutil.chown(self.directory, self.user, self.user)
                shutil.chown(config, self.user, self.user)
            ids: dict[str, Any] = ({"user": self.user, "group": self.user, "extra_groups": []}
                                   if os.geteuid() == 0 else {})
            with (self.directory / f"{name}.log").open("wb") as log:
                self.patroni[name] = subprocess.Popen(
                    ["patroni", str(config)], stdout=log, stderr=subprocess.STDOUT, **ids)
            self.processes.append(self.patroni[name])
            self.wait_for(lambda node=name: self.running(node), f"{name} running")
        return self

    def members(self, via: str) -> dict[str, dict[str, Any]]:
        api = self.nodes[via][1]
        with urllib.request.urlopen(f"http://127.0.0.1:{api}/cluster", timeout=5) as answer:
            found = json.load(answer)
        return {m["name"]: m for m in found["members"]}

    def running(self, name: str) -> bool:
        return (self.role(name) in ("leader", "replica")
                and self.members(name)[name]["state"] in ("running", "streaming"))

    def role(self, name: str) -> str | None:
        try:
            return str(self.members(name)[name]["role"])
        except (OSError, KeyError, ValueError):
            return None

    def leader(self) -> str:
        for name in self.nodes:
            if self.role(name) == "leader":
                return name
        raise AssertionError("no leader")

    def switchover(self) -> str:
        old = self.leader()
        new = next(name for name in self.nodes if name != old)
        done = subprocess.run(["patronictl", "-c", str(self.directory / f"{old}.yml"),
                               "switchover", "--leader", old, "--candidate", new, "--force"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        self.wait_for(lambda: self.role(new) == "leader", f"{new} the leader")
        return new

    def kill_postmaster(self, name: str) -> None:
        pid = int((self.directory / name / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)

    def lose_node(self, name: str) -> str:
        """The node dies whole (its patroni and its postmaster SIGKILLed): the other is
        promoted once the leader key expires, an unplanned failover. The new leader."""
        self.patroni[name].kill()
        self.patroni[name].wait()
        self.kill_postmaster(name)
        other = next(node for node in self.nodes if node != name)
        self.wait_for(lambda: self.role(other) == "leader", f"{other} promoted")
        return other

    def wait_for(self, predicate: Any, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if predicate():
                    return
            except (OSError, KeyError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.5)

    def close(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def cluster(env: Env) -> Iterator[Cluster]:
    missing = [tool for tool in ("patroni", "patronictl", "etcd") if not shutil.which(tool)]
    if missing or not (BIN / "postgres").exists():
        pytest.skip(f"needs Debian's patroni, etcd-server and PostgreSQL 15: missing "
                    f"{missing or [str(BIN / 'postgres')]}")
    # Not under pytest's tmp_path, which the servers' account may not enter.
    directory = Path(tempfile.mkdtemp(prefix="pglock-patroni-"))
    directory.chmod(0o755)
    nodes = Cluster(directory)
    try:
        nodes.start()
        env.env["PGLOCK_DSN"] = env.dsn = nodes.dsn
        yield nodes
    finally:
        nodes.close()
        shutil.rmtree(directory, ignore_errors=True)


def spans(marks: Path) -> list[tuple[int, int, int, int]]:
    """(first tick, last tick, token, pid) of each command, by its first tick."""
    found: dict[tuple[int, int], list[int]] = {}
    for line in marks.read_text().splitlines():
        token, pid, stamp = map(int, line.split())
        found.setdefault((token, pid), []).append(stamp)
    return sorted((min(s), max(s), token, pid) for (token, pid), s in found.items())


def test_contenders_never_overlap_through_a_switchover_a_killed_postmaster_and_a_failover(
        env: Env, cluster: Cluster) -> None:
    stop = threading.Event()
    codes: dict[str, list[int]] = {"lease": [], "advisory": []}

    def contend(mode: str) -> None:
        marks = env.tmp / mode
        while not stop.is_set():
            done = env.run("run", "--job", f"patroni-{mode}", "--mode", mode, "--ttl", "5s",
                           "--min-hold", "0s", "--wait", "20s", "--connect-timeout", "20s",
                           "--", "sh", "-c", TICKS.format(marks=marks), timeout=120)
            codes[mode].append(done.returncode)

    triggered: list[tuple[str, int, float]] = []

    def trigger(event: str) -> None:
        """A scheduled job of each mode, fired once right after a promotion: its slot (a
        job of its own per event, so each trigger has a slot of its own) runs late, not
        lost."""
        def fire(mode: str) -> None:
            fired = time.monotonic()
            done = env.run("run", "--job", f"cron-{mode}-{event}", "--mode", mode,
                           "--ttl", "5s", "--schedule", "0 0 1 1 *", "--tz", "UTC",
                           "--connect-timeout", "20s", "--", "true", timeout=120)
            triggered.append((f"{mode} after the {event}", done.returncode,
                              time.monotonic() - fired))
        firing = [threading.Thread(target=fire, args=(mode,)) for mode in ("lease", "advisory")]
        for thread in firing:
            thread.start()
        threads.extend(firing)

    threads = [threading.Thread(target=contend, args=(mode,))
               for mode in ("lease", "advisory") for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(8)
    cluster.switchover()
    trigger("switchover")
    time.sleep(15)
    cluster.kill_postmaster(cluster.leader())
    time.sleep(20)
    cluster.lose_node(cluster.leader())
    trigger("failover")
    time.sleep(20)
    stop.set()
    for thread in threads:
        thread.join()
    # Each ran its slot (exit 0), within the wait (ttl 5 s, a jitter of up to 5 s) and the
    # time to reach the new primary (--connect-timeout 20s).
    assert sorted(code for _, code, _ in triggered) == [0, 0, 0, 0], triggered
    assert all(took < 35 for _, _, took in triggered), triggered
    for mode in ("lease", "advisory"):
        found = spans(env.tmp / mode)
        for earlier, later in itertools.pairwise(found):
            assert later[0] > earlier[1], f"{mode}: overlap: {earlier} and {later}"
        tokens = [token for _, _, token, _ in found]
        assert len(set(tokens)) == len(tokens), tokens
        # Runs on three timelines: each promotion raised the tokens.
        assert min(tokens) < 1 << 32 < (2 << 32) < max(tokens), tokens
        assert codes[mode].count(0) >= 3, codes
