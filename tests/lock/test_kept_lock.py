"""A lock kept for the next attempt (--retries) or the next slot (--catch-up), across an
asynchronous promotion that lost another host's takeover (docs/ha.md, "Version 9: the
four paths", cases 2 and 4), on real servers; the evidence as tests/promotions.py says.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import Env
from promotions import (
    TICK,
    assert_apart,
    ended,
    only_primary,
    pair,
    promoted,
    spans,
    through,
    ticking,
)
from relay import Relay
from replication import Pair

pytestmark = pytest.mark.slow

__all__ = ["pair"]  # the fixture, used by name


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


