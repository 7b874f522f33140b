"""docs/ttl.md's "an outage or failover shorter than this stops no running command",
at its boundary: an outage that refuses connections, starting just before a renewal is
due and ending a little before the table's figure, is ridden out (issue 38: at ttl 10 s
a 2.0 s outage, which the table says is ridden out, stopped the command in 2 of 6 tries,
when the heartbeat's reconnects backed off up to 2 s)."""

from __future__ import annotations

import time

import pytest
from conftest import Env
from psycopg import conninfo as libpq_conninfo
from relay import Relay

from pglock.lock import heartbeat

pytestmark = pytest.mark.slow

TTL = 10.0
# The table's figure at ttl 10 s less a margin for a loaded machine (the renewal must be
# answered, not only sent, before the deadline).
OUTAGE = heartbeat.rides_out(TTL, 10.0) - 0.6


def test_an_outage_just_shorter_than_the_table_says_is_ridden_out(env: Env) -> None:
    fields = libpq_conninfo.conninfo_to_dict(env.dsn)
    if not str(fields.get("host", "")).startswith("/"):
        pytest.skip("needs the embedded test server's Unix socket")
    # A server that restarts: its open connections closed, new ones refused.
    outage = Relay(f"{fields['host']}/.s.PGSQL.{fields.get('port', 5432)}")
    marks = env.tmp / "term"
    assert env.run("init", "-q").returncode == 0
    try:
        proxied = libpq_conninfo.make_conninfo(env.dsn, host="127.0.0.1", port=str(outage.port))
        holder = env.popen("run", "--dsn", proxied, "--job", "boundary", "--ttl", f"{TTL:g}s",
                           "--", "sh", "-c", f"trap 'echo TERM >> {marks}; exit 1' TERM; "
                           "sleep 13 & wait")

        def renewed_at() -> object:
            rows = env.query("SELECT renewed_at FROM {schema}.locks WHERE job = 'boundary'")
            return rows[0][0] if rows else None

        env.wait_for(renewed_at, what="the acquisition")
        acquired = renewed_at()
        # The first renewal (ttl/3 after the acquisition), seen here within a poll.
        env.wait_for(lambda: renewed_at() != acquired, timeout=10, what="a renewal")
        seen = time.monotonic()
        # The next renewal is due ttl/3 after that one was sent: cut just before.
        time.sleep(max(0.0, seen + TTL / 3 - 0.25 - time.monotonic()))
        before = renewed_at()
        outage.cut()
        time.sleep(OUTAGE)
        outage.restore()
        _, stderr = holder.communicate(timeout=40)
    finally:
        outage.close()
    assert (holder.returncode, stderr) == (0, ""), stderr
    assert not marks.exists(), "the command got SIGTERM"
    # Renewed after the outage, by the heartbeat's retries.
    assert env.query("SELECT renewed_at > %s FROM {schema}.locks WHERE job = 'boundary'",
                     (before,)) == [(True,)]
