"""Measure pglock's fault timings on real processes; prints figures, asserts nothing.

1. Takeover after SIGKILL of the holder, lease and advisory mode: from the kill to the
   first contender that runs.
2. A silent advisory holder (its host cut off by blackhole routes, in a network
   namespace of our own): from the cut to the server freeing the lock, and to the
   holder's command being stopped. Needs root and iproute2; skipped with a reason else.
3. Takeover from an advisory holder that died with its server (SIGKILL, then the server
   restarted, or the primary killed and its synchronous standby promoted): from the
   server's return to the first contender that runs (docs/advisory.md: such a row is a
   lease, waited out to its expiry).
4. A failover to an asynchronous standby that never received the acquisition (its WAL
   receiver stopped first): the primary is killed, the standby promoted, another host
   tries there at once (--wait); how long the old holder's command ran on after the new
   holder's started (negative: the gap between them), how long after the promotion the
   new one started (the wait of docs/ha.md), and both tokens, each mode, `--rounds` times.
5. The cost of that wait on a synchronous pair (`--only promotion`): a job whose last run
   ended before the failover, tried at once on the promoted standby (--wait); from the
   promotion to its command's start. `--only trigger`: the same, tried as cron does
   (`--schedule`, no --wait: since schema version 9 it waits for the wait's end and runs
   its slot late).
6. A stopped advisory holder (`--only stopped`: its pglock SIGSTOPped, its session alive):
   from its row's stops_by to a contender's run (since schema version 9 the contender ends
   the stopped holder's session; before, it skipped for as long as the holder stayed
   stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg

from pglock.db.embedded import EmbeddedServer
from pglock.db.keys import advisory_key

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from replication import Pair  # the tests' primary-and-standby helper

PGLOCK = str(Path(sys.executable).with_name("pglock"))
NETNS, HOST_IF, NS_IF = "pglock-measure", "vpglock0", "vpglock1"
SERVER_IP, CLIENT_IP = "10.231.0.1", "10.231.0.2"


def run_ok(*args: str) -> None:
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for_run(dsn: str, schema: str, job: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psycopg.Error), psycopg.connect(dsn, autocommit=True) as conn:
            found = conn.execute(f'SELECT 1 FROM "{schema}".runs WHERE job = %s', (job,))
            if found.fetchone():
                return
        time.sleep(0.05)
    raise SystemExit(f"no run of {job} appeared")


def takeover(dsn: str, mode: str, ttl: int) -> float:
    """Seconds from SIGKILL of the holder to a contender's successful run."""
    env = {**os.environ, "PGLOCK_DSN": dsn, "PGLOCK_SCHEMA": "measure"}
    job = f"takeover-{mode}"
    holder = subprocess.Popen([PGLOCK, "run", "--job", job, "--mode", mode, "--ttl", f"{ttl}s",
                               "--", "sleep", "600"], env=env)
    wait_for_run(dsn, "measure", job)
    holder.kill()
    holder.wait()
    killed = time.monotonic()
    while subprocess.run([PGLOCK, "run", "--job", job, "--mode", mode, "--", "true"],
                         env=env).returncode != 0:
        time.sleep(0.05)
    return time.monotonic() - killed


def stopped_holder(dsn: str, ttl: int) -> float:
    """Seconds from a SIGSTOPped advisory holder's stops_by (server time) to the start of a
    contender's command (server time), the contender trying with --wait."""
    env = {**os.environ, "PGLOCK_DSN": dsn, "PGLOCK_SCHEMA": "measure"}
    job = f"stopped-{time.monotonic_ns()}"
    holder = subprocess.Popen([PGLOCK, "run", "--job", job, "--mode", "advisory", "--ttl",
                               f"{ttl}s", "--", "sleep", "600"], env=env)
    try:
        wait_for_run(dsn, "measure", job)
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(0.5)  # a renewal on its way lands, or does not
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute('SELECT stops_by FROM "measure".locks WHERE job = %s',
                               (job,)).fetchone()
        assert row is not None
        stops_by = row[0]
        subprocess.run([PGLOCK, "run", "--job", job, "--mode", "advisory", "--ttl", f"{ttl}s",
                        "--wait", f"{4 * ttl}s", "--", "true"], env=env, check=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute('SELECT started_at FROM "measure".runs WHERE job = %s '
                               'ORDER BY id DESC LIMIT 1', (job,)).fetchone()
        assert row is not None
        return float((row[0] - stops_by).total_seconds())
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()


def dead_holder(tmp: Path, event: str) -> float:
    """Seconds from the server's return (restarted, or a synchronous standby promoted) to a
    contender's run, for an advisory holder SIGKILLed while the server was down."""
    if event == "restart":
        # One server alone: a synchronous standby's reconnection would be in the figure.
        server = EmbeddedServer(tmp / "single", settings={"fsync": "off"})
        dsn = server.join()
        try:
            return _dead_holder(dsn, dsn, server.stop, server.start)
        finally:
            server.leave()
    pair = Pair(tmp, synchronous=True).start()
    try:
        return _dead_holder(pair.both_dsn, pair.primary_dsn, pair.kill_primary, pair.promote)
    finally:
        pair.close()


def _dead_holder(dsn: str, primary: str, down: Callable[[], None],
                 up: Callable[[], None]) -> float:
    env = {**os.environ, "PGLOCK_DSN": dsn, "PGLOCK_SCHEMA": "measure"}
    holder = subprocess.Popen([PGLOCK, "run", "--job", "dead", "--mode", "advisory",
                               "--ttl", "10s", "--", "sleep", "600"], env=env)
    wait_for_run(primary, "measure", "dead")
    down()
    holder.kill()
    holder.wait()
    up()
    back = time.monotonic()
    # The holder's ttl: after a promotion the wait is the larger of the two (docs/ha.md).
    while subprocess.run([PGLOCK, "run", "--job", "dead", "--mode", "advisory", "--ttl", "10s",
                          "--connect-timeout", "30s", "--", "true"], env=env,
                         stderr=subprocess.DEVNULL).returncode != 0:
        time.sleep(0.05)
    return time.monotonic() - back


@contextlib.contextmanager
def namespace() -> Iterator[None]:
    """A host of our own: a network namespace joined to this one by a veth pair."""
    run_ok("ip", "netns", "add", NETNS)
    try:
        run_ok("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        run_ok("ip", "link", "set", NS_IF, "netns", NETNS)
        run_ok("ip", "addr", "add", f"{SERVER_IP}/24", "dev", HOST_IF)
        run_ok("ip", "link", "set", HOST_IF, "up")
        inside = ("ip", "netns", "exec", NETNS)
        run_ok(*inside, "ip", "addr", "add", f"{CLIENT_IP}/24", "dev", NS_IF)
        run_ok(*inside, "ip", "link", "set", NS_IF, "up")
        run_ok(*inside, "ip", "link", "set", "lo", "up")
        yield
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", f"{CLIENT_IP}/32"],
                       stderr=subprocess.DEVNULL, check=False)
        subprocess.run(["ip", "link", "del", HOST_IF], stderr=subprocess.DEVNULL, check=False)
        subprocess.run(["ip", "netns", "del", NETNS], stderr=subprocess.DEVNULL, check=False)


def silent_holder(tmp: Path, ttl: int) -> tuple[float, float]:
    """(seconds to the server freeing the lock, seconds to the command being stopped)."""
    server = EmbeddedServer(tmp / "tcp", settings={"listen_addresses": SERVER_IP,
                                                   "fsync": "off"})
    local = server.join()
    try:
        with (server.pgdata / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {CLIENT_IP}/32 trust\n")
        with psycopg.connect(local, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        marks = tmp / "stopped"
        remote = f"host={SERVER_IP} port=5432 dbname=postgres user=postgres"
        holder = subprocess.Popen(
            ["ip", "netns", "exec", NETNS, PGLOCK, "run", "--job", "silent", "--mode", "advisory",
             "--ttl", f"{ttl}s", "--dsn", remote, "--schema", "measure", "--",
             "sh", "-c", f"trap 'date +%s%N > {marks}; exit 1' TERM; sleep 600 & wait"],
            stderr=subprocess.DEVNULL)
        wait_for_run(local, "measure", "silent")
        key = advisory_key("measure", "silent")
        time.sleep(2)
        # Drop everything both ways, silently: no RST, no ICMP.
        run_ok("ip", "route", "add", "blackhole", f"{CLIENT_IP}/32")
        run_ok("ip", "netns", "exec", NETNS, "ip", "route", "add", "blackhole", f"{SERVER_IP}/32")
        cut, cut_ns = time.monotonic(), time.time_ns()
        with psycopg.connect(local, autocommit=True) as conn:
            while conn.execute("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                               "AND ((classid::bigint << 32) | objid::bigint) = %s",
                               (key,)).fetchone():
                if time.monotonic() - cut > 120:
                    raise SystemExit("the server never freed the lock")
                time.sleep(0.05)
        freed = time.monotonic() - cut
        deadline = time.monotonic() + 120
        while not marks.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        stopped = (int(marks.read_text()) - cut_ns) / 1e9 if marks.exists() else float("nan")
        holder.kill()
        holder.wait()
        return freed, stopped
    finally:
        server.leave()


# Marks its start, and its end when pglock stops it (SIGTERM to its process group).
STAMPED = ("echo enter $(date +%s%N) $PGLOCK_FENCING_TOKEN > {marks}; "
           "trap 'echo leave $(date +%s%N) >> {marks}; exit 143' TERM; sleep 600 & wait")


def stamps(marks: Path, timeout: float = 120) -> dict[str, list[int]]:
    """{"enter": [ns, token], "leave": [ns]} once the command has been stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {kind: [int(value) for value in values] for kind, *values in
                 (line.split() for line in marks.read_text().splitlines())
                 } if marks.exists() else {}
        if "leave" in found:
            return found
        time.sleep(0.05)
    raise SystemExit(f"{marks.name}: the old holder's command was never stopped")


def asynchronous_failover(tmp: Path, mode: str,
                          ttl: int) -> tuple[float, float, float, list[int]]:
    """(seconds the old command ran on after the new one started, seconds from the kill to
    the old command's end, seconds from the promotion to the new command's start, the old
    and the new holder's fencing tokens)."""
    pair = Pair(tmp, synchronous=False).start()
    try:
        env = {**os.environ, "PGLOCK_DSN": pair.both_dsn, "PGLOCK_SCHEMA": "measure"}
        subprocess.run([PGLOCK, "init", "-q"], env=env, check=True)
        pair.replayed()
        pair.cut_standby()
        old_marks, new_marks = tmp / "old", tmp / "new"
        old = subprocess.Popen([PGLOCK, "run", "--job", "ha", "--mode", mode, "--ttl",
                                f"{ttl}s", "--holder", "old", "--", "sh", "-c",
                                STAMPED.format(marks=old_marks)], env=env,
                               stderr=subprocess.PIPE, text=True)
        wait_for_run(pair.primary_dsn, "measure", "ha")
        # Anywhere in the renewal cycle: the overlap depends on where the failover falls.
        time.sleep(random.uniform(0, ttl / 3 if mode == "lease" else 1.5))
        pair.kill_primary()
        killed = time.time_ns()
        pair.promote()
        promoted = time.time_ns()
        new = subprocess.Popen([PGLOCK, "run", "--job", "ha", "--mode", mode, "--ttl",
                                f"{ttl}s", "--holder", "new", "--wait", f"{3 * ttl}s",
                                "--", "sh", "-c",
                                STAMPED.format(marks=new_marks)], env=env)
        ended = stamps(old_marks)
        old.wait(timeout=60)
        # The new holder waits out the promotion's window (docs/ha.md) before it starts.
        deadline = time.monotonic() + 3 * ttl + 60
        while not new_marks.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        new.terminate()
        new.wait(timeout=60)
        started = stamps(new_marks)
        left = ended["leave"][0]
        return ((left - started["enter"][0]) / 1e9, (left - killed) / 1e9,
                (started["enter"][0] - promoted) / 1e9,
                [ended["enter"][1], started["enter"][1]])
    finally:
        pair.close()


def promotion_wait(tmp: Path, ttl: int, trigger: bool = False) -> float:
    """Seconds from a synchronous standby's promotion to the start of a job that nobody
    held across it, tried with --wait, or (`trigger`) as cron tries a scheduled job."""
    pair = Pair(tmp, synchronous=True).start()
    try:
        env = {**os.environ, "PGLOCK_DSN": pair.both_dsn, "PGLOCK_SCHEMA": "measure"}
        subprocess.run([PGLOCK, "run", "--job", "idle", "--ttl", f"{ttl}s", "--min-hold", "0s",
                        "--", "true"], env=env, check=True)
        pair.kill_primary()
        pair.promote()
        promoted = time.time_ns()
        marks = tmp / "idle"
        how = (["--schedule", "0 0 1 1 *", "--tz", "UTC"] if trigger
               else ["--wait", f"{3 * ttl}s"])
        subprocess.run([PGLOCK, "run", "--job", "idle", "--ttl", f"{ttl}s", *how, "--",
                        "sh", "-c", f"date +%s%N > {marks}"], env=env, check=True)
        return (int(marks.read_text()) - promoted) / 1e9
    finally:
        pair.close()


def takeovers(tmp: Path, ttl: int) -> None:
    server = EmbeddedServer(tmp / "local", settings={"fsync": "off"})
    dsn = server.join()
    try:
        for mode in ("lease", "advisory"):
            print(f"takeover after SIGKILL, {mode:8} mode, ttl {ttl}s: "
                  f"{takeover(dsn, mode, ttl):.2f} s")
    finally:
        server.leave()


def stopped_holders(tmp: Path, ttl: int, rounds: int) -> None:
    server = EmbeddedServer(tmp / "stopped", settings={"fsync": "off"})
    dsn = server.join()
    try:
        for _ in range(rounds):
            print(f"stopped advisory holder, ttl {ttl}s: a contender ran "
                  f"{stopped_holder(dsn, ttl):5.2f} s after its stops_by")
    finally:
        server.leave()


def promotion_waits(tmp: Path, ttl: int, rounds: int, trigger: bool) -> None:
    how = "a cron trigger (no --wait)" if trigger else "--wait"
    for round_number in range(rounds):
        waited = promotion_wait(tmp / f"promotion-{trigger}-{round_number}", ttl, trigger)
        print(f"synchronous failover, ttl {ttl}s, {how}: a job nobody held ran "
              f"{waited:5.2f} s after the promotion")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ttl", type=int, default=10, help="ttl of the holders (seconds)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="asynchronous failovers per mode")
    parser.add_argument("--only", choices=["takeover", "dead", "silent", "async", "promotion",
                                           "trigger", "stopped"],
                        help="one measurement alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        os.chmod(tmp, 0o755)
        if args.only in (None, "takeover"):
            takeovers(tmp, args.ttl)
        if args.only in (None, "dead"):
            for event in ("restart", "failover"):
                print(f"advisory holder dead across a {event:8}, ttl 10s: a contender ran "
                      f"{dead_holder(tmp / f'dead-{event}', event):.2f} s after the server "
                      "was back")
        if args.only in (None, "async"):
            for mode in ("lease", "advisory"):
                for round_number in range(args.rounds):
                    overlap, after_kill, wait, tokens = asynchronous_failover(
                        tmp / f"async-{mode}-{round_number}", mode, args.ttl)
                    print(f"asynchronous failover, {mode:8} mode, ttl {args.ttl}s: the old "
                          f"command ran on {overlap:6.2f} s after the new one started "
                          f"({after_kill:5.2f} s after the kill); the new one started "
                          f"{wait:5.2f} s after the promotion; tokens old {tokens[0]}, "
                          f"new {tokens[1]}")
        for trigger in (False, True):
            if args.only in (None, "trigger" if trigger else "promotion"):
                promotion_waits(tmp, args.ttl, args.rounds, trigger)
        if args.only in (None, "stopped"):
            stopped_holders(tmp, args.ttl, args.rounds)
        if args.only not in (None, "silent"):
            return
        if os.geteuid() != 0 or shutil.which("ip") is None:
            print("silent advisory holder: skipped (needs root and iproute2)")
            return
        with namespace():
            freed, stopped = silent_holder(tmp, args.ttl)
        print(f"silent advisory holder, ttl {args.ttl}s: server freed the lock {freed:.2f} s "
              f"after the cut; the holder's command was stopped {stopped:.2f} s after it")


if __name__ == "__main__":
    main()
