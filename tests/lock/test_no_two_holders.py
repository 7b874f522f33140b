"""No two holders across an asynchronous promotion, on real servers (docs/ha.md, issue 42):
a primary and an asynchronous standby, the fault staged deterministically (a relay that
loses a statement's reply or cuts a holder off, the standby's WAL receiver stopped, the
primary killed, the standby promoted), and the commands' ticks proving no overlap.

Each command appends `TOKEN NANOSECONDS` to one file every 50 ms while it lives, so a
command ended by SIGKILL still leaves its last moment within 50 ms; two commands overlap
when the spans of their tokens' ticks intersect.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import Env
from relay import Relay
from replication import Pair

pytestmark = pytest.mark.slow

# Ticks while it lives: a tick every 50 ms, for TICKS ticks (forever: none), then exit.
TICK = 'echo "$PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; sleep 0.05'


def ticking(marks: Path, seconds: int | None = None) -> list[str]:
    """A command that ticks until killed, or for `seconds` and then succeeds."""
    tick = TICK.format(marks=marks)
    if seconds is None:
        return ["sh", "-c", f"while :; do {tick}; done"]
    return ["sh", "-c", f"i=0; while [ $i -lt {seconds * 20} ]; do {tick}; i=$((i+1)); done"]


@dataclass(frozen=True)
class Span:
    token: int
    first: int
    last: int


def spans(marks: Path) -> list[Span]:
    """Each command's first and last tick, by fencing token, in the order they began."""
    found: dict[int, list[int]] = {}
    for line in marks.read_text().splitlines():
        token, stamp = line.split()
        found.setdefault(int(token), []).append(int(stamp))
    return sorted((Span(t, min(s), max(s)) for t, s in found.items()), key=lambda s: s.first)


def assert_apart(found: list[Span]) -> None:
    """No command ticked while another one was still ticking (50 ms each side)."""
    for i, earlier in enumerate(found):
        for later in found[i + 1:]:
            overlap = earlier.last + 60_000_000 - later.first
            assert overlap < 0, (f"two commands at once for {overlap / 1e9:.2f} s: "
                                 f"tokens {earlier.token} and {later.token}")


@pytest.fixture
def pair(env: Env, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Pair]:
    """An asynchronous pair (the standby's clock shifted by the test's `standby_clock`
    parameter, if any); `env` queries the primary and runs pglock against both nodes."""
    clock = getattr(request, "param", None)
    nodes = Pair(tmp_path / "ha", synchronous=False, standby_clock=clock).start()
    env.dsn = nodes.primary_dsn
    env.env["PGLOCK_DSN"] = nodes.both_dsn
    yield nodes
    nodes.close()


def through(relay: Relay) -> str:
    return f"host=127.0.0.1 port={relay.port} dbname=postgres user=postgres"


def only_primary(pair: Pair) -> str:
    """A DSN that knows the old primary alone: its holder cannot reach the new one, so it
    runs until its local deadline (the longest a lost holder can run)."""
    return pair.primary_dsn


def promoted(env: Env, pair: Pair) -> None:
    pair.kill_primary()
    pair.promote()
    env.dsn = pair.standby_dsn


def first_seen(env: Env) -> datetime:
    [(seen,)] = env.query("SELECT first_seen FROM {schema}.timelines ORDER BY timeline DESC "
                          "LIMIT 1")
    return seen  # type: ignore[no-any-return]


def started_at(env: Env, job: str, token: int) -> datetime:
    [run] = [r for r in env.runs(job) if r["fencing_token"] == token]
    return run["started_at"]  # type: ignore[no-any-return]


def ended(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err


# ------------------------------------------------------------------------ case 1

def test_a_resent_advisory_acquire_waits_like_anyone_after_a_promotion(
        env: Env, pair: Pair) -> None:
    """host1's advisory acquire commits and replicates, its reply is lost and its session
    ends; host0 takes the job over at host1's stops_by (the session lock proves host1
    gone) and runs; the standby, which has host1's row but not host0's takeover, is
    promoted; host1's acquire, sent again within --connect-timeout, reaches it and finds
    its own row. Before version 9 it took that row at once, its expiry not yet reached,
    and ran beside host0 (6.0 s of two commands at once, as a new user met it). Now a row
    of an older timeline goes back to nobody before the wait after the promotion: host1
    waits it out, then runs."""
    marks = env.tmp / "ticks"
    assert env.run("init", "-q").returncode == 0
    relay = Relay(pair.primary_socket)
    relay.mute_after(b"acquire(")
    host1 = env.popen("run", "--job", "j", "--mode", "advisory", "--ttl", "15s",
                      "--connect-timeout", "60s", "--holder", "host1", "--dsn", through(relay),
                      "--", *ticking(marks, 4))
    host0: subprocess.Popen[str] | None = None
    try:
        env.wait_for(relay.muted.is_set, what="host1's acquire")
        env.wait_for(lambda: env.query("SELECT holder FROM {schema}.locks") == [("host1",)],
                     what="host1's row, committed")
        pair.replayed()
        pair.cut_standby()
        relay.cut(reset=True)
        host0 = env.popen("run", "--job", "j", "--mode", "advisory", "--ttl", "15s",
                          "--wait", "30s", "--holder", "host0", "--dsn", only_primary(pair),
                          "--", *ticking(marks))
        env.wait_for(lambda: marks.exists(), timeout=40, what="host0's command")
        promoted(env, pair)
        relay.target = pair.standby_socket
        relay.restore()
        code1, err1 = ended(host1)
        code0, err0 = ended(host0)
    finally:
        relay.close()
        for process in (host1, host0):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    assert (code1, err1) == (0, ""), err1
    assert code0 == 125 and "lock" in err0, err0
    found = spans(marks)
    assert_apart(found)
    # host1 ran after the wait: a ttl after the new timeline was first seen, a new token.
    assert [s.token for s in found] == [2, (1 << 32) + 1]
    assert started_at(env, "j", (1 << 32) + 1) >= first_seen(env) + timedelta(seconds=15)
    [late] = env.query("SELECT late_reason FROM {schema}.runs WHERE fencing_token = %s",
                       ((1 << 32) + 1,))
    assert late == ("promotion_wait",)


# ------------------------------------------------------------------------ cases 2 and 4

def first_then(marks: Path, seen: Path, end: Path, first: int) -> list[str]:
    """The first attempt (or the first slot caught up) ticks until `end` exists, then exits
    `first` (1: a failure, retried; 0: a success, the catch-up's next slot follows); any
    later one ticks 2 s and succeeds."""
    tick = TICK.format(marks=marks)
    later = ticking(marks, 2)[2]
    return ["sh", "-c", f'if [ ! -e {seen} ]; then touch {seen}; while [ ! -e {end} ]; do '
                        f'{tick}; done; exit {first}; fi; {later}']


@pytest.mark.parametrize("mode, how, pair", [
    ("lease", "retries", None),
    ("advisory", "retries", None),
    ("lease", "catch-up", None),
    # The new primary's clock two minutes behind the old one's: by its clock the holder's
    # row has not expired, so the server's own rule (keeps()) lets the keep through; the
    # holder, answered past its local deadline, does not act on it.
    ("lease", "retries", "-120s"),
], ids=["lease-retries", "advisory-retries", "lease-catch-up", "lease-retries-clock-behind"],
   indirect=["pair"])
def test_a_lock_kept_for_the_next_attempt_is_not_kept_across_a_lost_takeover(
        env: Env, pair: Pair, mode: str, how: str) -> None:
    """The holder's attempt ends while it is cut off: its end, with the lock kept for the
    next attempt (--retries) or the next slot (--catch-up), does not reach the old
    primary; its row expires there and host0 takes it over and runs, in a write the
    promotion then loses; the holder's end, sent again, lands on the new primary, which
    has the holder's expired row of the old timeline. Before version 9 the keep renewed it
    and the next attempt forked beside host0. Now the row is not kept (the server's rule,
    and the holder's own: an answer past its local deadline is not acted on), the lock is
    released and the retry left to the next trigger: no overlap."""
    marks, seen, end = env.tmp / "ticks", env.tmp / "seen", env.tmp / "end"
    assert env.run("init", "-q").returncode == 0
    schedule: list[str] = []
    if how == "catch-up":
        # Two slots missed before this trigger's: the holder catches them up, keeping the
        # lock from one slot's run to the next.
        env.query("INSERT INTO {schema}.jobs (job, mode, schedule, timezone, last_slot, "
                  "next_slot) VALUES ('k', 'lease', '* * * * *', 'UTC', "
                  "date_trunc('minute', now()) - interval '3 min', "
                  "date_trunc('minute', now()) - interval '2 min')")
        schedule = ["--schedule", "* * * * *", "--tz", "UTC", "--catch-up", "all"]
    else:
        schedule = ["--retries", "1", "--retry-delay", "1s"]
    first = 0 if how == "catch-up" else 1
    relay = Relay(pair.primary_socket)
    holder = env.popen("run", "--job", "k", "--mode", mode, "--ttl", "10s",
                       "--connect-timeout", "60s", "--holder", "holder", *schedule,
                       "--dsn", through(relay), "--", *first_then(marks, seen, end, first))
    host0: subprocess.Popen[str] | None = None
    try:
        env.wait_for(lambda: marks.exists(), what="the holder's command")
        pair.replayed()
        pair.cut_standby()
        # The holder is cut off, and its address now leads to the standby (a virtual IP
        # moved early, or a DSN listing both nodes): each try is refused at once as
        # read-only, until the promotion lets one through.
        relay.cut(reset=True)
        relay.target = pair.standby_socket
        relay.restore()
        end.touch()
        # Only now: the holder's end is sent while it is cut off.
        host0 = env.popen("run", "--job", "k", "--mode", mode, "--ttl", "10s", "--wait",
                          "40s", "--holder", "host0", *schedule[:4],
                          "--dsn", only_primary(pair), "--", *ticking(marks))
        env.wait_for(lambda: len(spans(marks)) == 2, timeout=50, what="host0's command")
        promoted(env, pair)
        code, err = ended(holder)
        code0, _ = ended(host0)
    finally:
        relay.close()
        for process in (holder, host0):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    found = spans(marks)
    assert_apart(found)
    # No further attempt (or slot) here: the holder's one command, then host0's.
    assert len(found) == 2, found
    assert code == first and code0 == 125, (code, err)


# ------------------------------------------------------------------------ case 3

@pytest.mark.parametrize("row", ["a row", "no row"])
def test_a_longer_ttl_whose_acquisition_was_lost_is_waited_out(
        env: Env, pair: Pair, row: str) -> None:
    """Two hosts of one job with different ttls (30 s and 10 s, as a crontab's PGLOCK_TTL
    beside a jobs file's would give). The long one's acquisition is lost in the
    promotion; the short one, on the new primary, waits the longest ttl the old timeline
    granted (for the job's row, or the schema's with no row), not its own: before version 9
    it waited 10 s and ran while the lost holder still did."""
    marks = env.tmp / "ticks"
    job = "t"
    if row == "a row":
        for ttl in ("30s", "10s"):
            done = env.run("run", "--job", job, "--ttl", ttl, "--min-hold", "0s", "--", "true")
            assert (done.returncode, done.stderr) == (0, ""), done
    else:
        # Another job granted 30 s on this timeline; this one never ran.
        done = env.run("run", "--job", "other", "--ttl", "30s", "--", "true")
        assert (done.returncode, done.stderr) == (0, ""), done
        done = env.run("run", "--job", "third", "--ttl", "10s", "--", "true")
        assert (done.returncode, done.stderr) == (0, ""), done
    pair.replayed()
    pair.cut_standby()
    lost = env.popen("run", "--job", job, "--ttl", "30s", "--holder", "long",
                     "--dsn", only_primary(pair), "--", *ticking(marks))
    try:
        env.wait_for(lambda: marks.exists(), what="the long holder's command")
        promoted(env, pair)
        # --wait, as a contender on the new primary that keeps trying: it used to run as
        # soon as its own 10 s had passed since the first sighting.
        short = env.run("run", "--job", job, "--ttl", "10s", "--wait", "60s", "--holder",
                        "short", "--", *ticking(marks, 2), timeout=120)
        code, err = ended(lost)
    finally:
        if lost.poll() is None:
            lost.kill()
            lost.communicate()
    assert (short.returncode, short.stderr) == (0, ""), short
    assert code == 125, err
    found = spans(marks)
    assert_apart(found)
    assert found[-1].token == (1 << 32) + 1
    assert started_at(env, job, (1 << 32) + 1) >= first_seen(env) + timedelta(seconds=30)


# ------------------------------------------------------------------------ D1

def test_a_stopped_advisory_holder_is_taken_over_once_it_has_stopped_its_command(
        env: Env) -> None:
    """An advisory holder whose pglock is stopped (Ctrl-Z, kill -STOP) keeps its session,
    and its session lock, for as long as it stays stopped: every contender used to skip,
    fleet-wide. Its watchdog stops the command by the row's stops_by; past it, a contender
    ends the stopped holder's session and takes the job over. Thawed, the holder finds its
    lock lost (exit 125)."""
    marks = env.tmp / "ticks"
    holder = env.popen("run", "--job", "d", "--mode", "advisory", "--ttl", "6s", "--",
                       *ticking(marks))
    try:
        env.wait_for(lambda: marks.exists(), what="the holder's command")
        os.kill(holder.pid, signal.SIGSTOP)
        contender = env.run("run", "--job", "d", "--mode", "advisory", "--ttl", "6s",
                            "--wait", "20s", "--", *ticking(marks, 1), timeout=60)
        assert (contender.returncode, contender.stderr) == (0, ""), contender
        os.kill(holder.pid, signal.SIGCONT)
        code, err = ended(holder)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.communicate()
    assert code == 125 and "lock" in err, err
    found = spans(marks)
    assert_apart(found)
    assert [s.token for s in found] == [1, 2]


def test_clear_terminate_ends_a_stopped_advisory_holders_session(env: Env) -> None:
    """`clear --terminate` of a job whose advisory holder is stopped past its lock's
    expiry: its session, which still holds the session lock, is ended (it used to say
    nobody held the job and leave the session), with an audit row; the next run takes the
    job at once."""
    marks = env.tmp / "ticks"
    holder = env.popen("run", "--job", "e", "--mode", "advisory", "--ttl", "6s", "--",
                       *ticking(marks))
    try:
        env.wait_for(lambda: marks.exists(), what="the holder's command")
        os.kill(holder.pid, signal.SIGSTOP)
        env.wait_for(lambda: env.query("SELECT expires_at < clock_timestamp() "
                                       "FROM {schema}.locks") == [(True,)],
                     timeout=20, what="the stopped holder's lock to expire")
        cleared = env.run("clear", "--job", "e", "--terminate", "--yes", "--reason", "ctrl-z")
        assert cleared.returncode == 0, cleared
        assert "session" in cleared.stdout and "terminated" in cleared.stdout, cleared.stdout
        assert env.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == [(0,)]
        [(action, reason)] = env.query("SELECT action, reason FROM {schema}.audit")
        assert (action, reason) == ("clear", "ctrl-z")
        started = time.monotonic()
        after = env.run("run", "--job", "e", "--mode", "advisory", "--ttl", "6s", "--",
                        *ticking(marks, 1))
        assert (after.returncode, after.stderr) == (0, ""), after
        assert time.monotonic() - started < 5
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
    assert_apart(spans(marks))
