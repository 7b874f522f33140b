"""The simulated hosts: one network namespace each, joined to this one by a veth pair.

Host i is `<prefix>-h<i>` with address <net>.<i>.2; the server listens on <net>.<i>.1,
the other end of its veth. Nothing is routed anywhere else: the addresses exist only on
links made here, so no packet leaves the machine. A partition is a pair of blackhole
routes (silent: no RST, no ICMP), as in scripts/measure_faults.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path


def ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


@dataclass(frozen=True)
class Host:
    index: int
    prefix: str
    net: str  # the first two octets, e.g. "10.200"
    # The server's ports on the link: one, or a primary's and a standby's (cluster.py).
    ports: tuple[int, ...] = (5432,)

    @property
    def name(self) -> str:
        return f"h{self.index}"

    @property
    def netns(self) -> str:
        return f"{self.prefix}-h{self.index}"

    @property
    def server_ip(self) -> str:
        return f"{self.net}.{self.index}.1"

    @property
    def ip(self) -> str:
        return f"{self.net}.{self.index}.2"

    @property
    def outer_if(self) -> str:
        return f"{self.prefix}{self.index}o"

    @property
    def dsn(self) -> str:
        if len(self.ports) == 1:
            return f"host={self.server_ip} port={self.ports[0]} dbname=postgres user=postgres"
        # A primary and a standby: the fleet finds the primary as docs/ha.md tells it to.
        return (f"host={','.join([self.server_ip] * len(self.ports))} "
                f"port={','.join(map(str, self.ports))} dbname=postgres user=postgres "
                "target_session_attrs=read-write")

    def exec_prefix(self) -> list[str]:
        """Argv prefix that runs a program on this host (it execs: same pid)."""
        return ["ip", "netns", "exec", self.netns]

    def create(self) -> None:
        self.destroy()  # a soak killed earlier may have left it
        inner = f"{self.prefix}{self.index}i"
        ip("netns", "add", self.netns)
        ip("link", "add", self.outer_if, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", self.netns)
        ip("addr", "add", f"{self.server_ip}/24", "dev", self.outer_if)
        ip("link", "set", self.outer_if, "up")
        inside = ("netns", "exec", self.netns, "ip")
        ip(*inside, "addr", "add", f"{self.ip}/24", "dev", inner)
        ip(*inside, "link", "set", inner, "up")
        ip(*inside, "link", "set", "lo", "up")

    def destroy(self) -> None:
        """Undo create(), ending whatever still runs on the host (a soak stopped half-way
        may leave it frozen)."""
        for pid in self.pids():
            _signal(pid, signal.SIGKILL)
            _signal(pid, signal.SIGCONT)
        self.heal()
        ip("link", "del", self.outer_if, check=False)
        ip("netns", "del", self.netns, check=False)

    def cut(self) -> None:
        """Drop everything between this host and the server, both ways."""
        ip("route", "add", "blackhole", f"{self.ip}/32")
        ip("netns", "exec", self.netns, "ip", "route", "add", "blackhole", f"{self.server_ip}/32")

    def heal(self) -> None:
        ip("route", "del", "blackhole", f"{self.ip}/32", check=False)
        ip("netns", "exec", self.netns, "ip", "route", "del", "blackhole",
           f"{self.server_ip}/32", check=False)

    def pids(self) -> list[int]:
        """Every process in this host's network namespace."""
        try:
            ours = os.stat(f"/run/netns/{self.netns}").st_ino
        except OSError:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.stat(entry / "ns" / "net").st_ino == ours:
                    found.append(int(entry.name))
            except OSError:
                continue  # gone, or a kernel thread
        return found

    def freeze(self) -> None:
        """SIGSTOP every process of the host, until a pass finds none left running (a
        process may fork between the listing and its stop)."""
        stopped: set[int] = set()
        while True:
            fresh = [pid for pid in self.pids() if pid not in stopped]
            if not fresh:
                return
            for pid in fresh:
                _signal(pid, signal.SIGSTOP)
                stopped.add(pid)

    def thaw(self) -> None:
        for pid in self.pids():
            _signal(pid, signal.SIGCONT)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def hosts(count: int, prefix: str, net: str, ports: tuple[int, ...] = (5432,)) -> list[Host]:
    return [Host(i, prefix, net, ports) for i in range(1, count + 1)]
