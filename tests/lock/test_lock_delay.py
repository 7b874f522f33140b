"""The advisory lock-delay (docs/advisory.md, "The lock-delay"): whatever ends an
advisory holder's session while the holder lives, a contender that gets the session lock
takes the row over only once the holder has stopped its command (the row's stops_by),
so two commands never run at once. The holder's command ignores SIGTERM, as many jobs
do: only the SIGKILL at its local deadline ends it.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from conftest import Env
from marks import marking_command
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from relay import Relay

pytestmark = pytest.mark.slow

# Ticks every 0.1 s with its token, ignoring SIGTERM (the sleeps inherit that), for at
# most `seconds`: its last tick is the last moment it was alive.
TICKING = ('trap "" TERM; end=$(( $(date +%s) + {seconds} )); '
           'while [ "$(date +%s)" -lt "$end" ]; do '
           'echo "tick $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; sleep 0.1; done')


def spans(marks: Path) -> dict[int, tuple[int, int]]:
    """Each command's (first, last) mark in ns, by token (ticks, enter and leave alike)."""
    found: dict[int, list[int]] = {}
    for line in marks.read_text().splitlines():
        _, token, stamp = line.split()
        found.setdefault(int(token), []).append(int(stamp))
    return {token: (min(s), max(s)) for token, s in found.items()}


def holder_backend(env: Env) -> int:
    [(pid,)] = env.query("SELECT backend_pid FROM {schema}.locks WHERE job = 'cut'")
    return int(pid)


@pytest.mark.parametrize("fault", ["reset by a relay", "terminated backend", "SIGKILLed pglock"])
def test_a_contender_waiting_takes_over_only_once_the_holder_has_stopped(
        env: Env, fault: str) -> None:
    marks = env.tmp / "marks"
    options = conninfo_to_dict(env.dsn)
    relay = Relay(f"{options['host']}/.s.PGSQL.{options.get('port', 5432)}")
    through = make_conninfo(env.dsn, host="127.0.0.1", port=str(relay.port))
    holder = env.popen("run", "--job", "cut", "--mode", "advisory", "--ttl", "10s",
                       "--min-hold", "0s", "--dsn", through, "--",
                       "sh", "-c", TICKING.format(marks=marks, seconds=25))
    env.wait_for(lambda: marks.exists(), what="the holder's command")
    contender = env.popen("run", "--job", "cut", "--mode", "advisory", "--ttl", "10s",
                          "--min-hold", "0s", "--wait", "60s", "--",
                          *marking_command(marks, 0.2))
    if fault == "reset by a relay":
        # Every connection reset, no new one accepted: a restarting HAProxy or sidecar.
        relay.close(reset=True)
        # Nothing of the holder's reaches the server now: its row's stops_by is final.
        [(stops_by,)] = env.query("SELECT stops_by FROM {schema}.locks WHERE job = 'cut'")
    elif fault == "terminated backend":
        with psycopg.connect(env.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (holder_backend(env),))
    else:
        # The session lock goes with the socket at once; the command's tree is `tree`'s
        # (issue 33, item 3): here the command is one process.
        holder.kill()
    assert contender.communicate(timeout=90) == ("", "")
    assert contender.returncode == 0
    holder.communicate(timeout=60)
    (old_token, old), (new_token, new) = sorted(spans(marks).items())
    assert new[0] > old[1], f"overlap: {old} and {new}"
    assert new_token == old_token + 1
    if fault == "reset by a relay":
        # The holder could not reconnect: it lost the lock at its local deadline, and the
        # contender took the row at its stops_by, after that.
        assert holder.returncode == 125
        [run] = [r for r in env.runs("cut") if r["fencing_token"] == new_token]
        assert run["started_at"] >= stops_by
