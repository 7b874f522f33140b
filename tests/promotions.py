"""Evidence and staging for the tests of two holders across a promotion
(tests/lock/test_no_two_holders.py, tests/lock/test_kept_lock.py): commands that tick
into a file, the spans of their ticks, and a primary with an asynchronous standby.

Each command appends `TOKEN NANOSECONDS` to one file every 50 ms while it lives, so a
command ended by SIGKILL still leaves its last moment within 50 ms; two commands overlap
when the spans of their tokens' ticks intersect.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from conftest import Env
from marks import Interval
from relay import Relay
from replication import Pair

# Ticks while it lives: a tick every 50 ms, for TICKS ticks (forever: none), then exit.
TICK = 'echo "$PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; sleep 0.05'


def ticking(marks: Path, seconds: int | None = None) -> list[str]:
    """A command that ticks until killed, or for `seconds` and then succeeds."""
    tick = TICK.format(marks=marks)
    if seconds is None:
        return ["sh", "-c", f"while :; do {tick}; done"]
    return ["sh", "-c", f"i=0; while [ $i -lt {seconds * 20} ]; do {tick}; i=$((i+1)); done"]


def spans(marks: Path) -> list[Interval]:
    """Each command's first and last tick, by fencing token, in the order they began."""
    found: dict[int, list[int]] = {}
    for line in marks.read_text().splitlines():
        token, stamp = line.split()
        found.setdefault(int(token), []).append(int(stamp))
    return sorted((Interval(t, min(s), max(s)) for t, s in found.items()),
                  key=lambda s: s.enter)


def assert_apart(found: list[Interval]) -> None:
    """No command ticked while another one was still ticking (50 ms each side). Unlike
    marks.assert_no_overlap, every pair and not only neighbours (a long span may hold
    several later ones), and the overlap said in seconds: the figure docs/ha.md quotes."""
    for i, earlier in enumerate(found):
        for later in found[i + 1:]:
            overlap = earlier.leave + 60_000_000 - later.enter
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


