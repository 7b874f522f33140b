"""No window for a second holder (docs/ha.md, docs/advisory.md): the pure parts of schema
7's rules on one server. A promotion itself is tested on real servers in
test_failover.py; here a row is made to look written under an older timeline, and this
timeline first seen just now, which is what the new primary of a failover shows."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from conftest import Env

from pglock.lock import advisory, lease


def test_the_sql_horizon_is_never_earlier_than_the_holders(env: Env) -> None:
    """stops_by is computed in SQL from the row's ttl (an older pglock renewing through
    the upgrade passes no horizon): never before the holder's own horizon, at most 1 s
    after it (Python rounds half to even, SQL half up)."""
    assert env.run("init", "-q").returncode == 0
    ttls = [t / 2 for t in range(10, 7201)]
    found = env.query("SELECT extract(epoch FROM {schema}.advisory_horizon("
                      "make_interval(secs => t)))::float8 FROM unnest(%s::float8[]) t", (ttls,))
    for ttl, (horizon,) in zip(ttls, found, strict=True):
        assert advisory.horizon(ttl) <= horizon <= advisory.horizon(ttl) + 1, ttl


def test_tokens_carry_the_timeline_in_their_high_bits(env: Env) -> None:
    assert env.run("init", "-q").returncode == 0
    cases = [(None, 1, 1), (1, 1, 2), (41, 1, 42), (None, 2, (1 << 32) + 1),
             (7, 3, (2 << 32) + 1), ((2 << 32) + 5, 3, (2 << 32) + 6),
             ((1 << 32) + 9, 2, (1 << 32) + 10)]
    for previous, timeline, expected in cases:
        assert env.query("SELECT {schema}.next_token(%s, %s)", (previous, timeline)) == [
            (expected,)], (previous, timeline)


def test_a_schema_on_its_first_timeline_waits_for_nothing(env: Env) -> None:
    first = env.run("run", "--job", "fresh", "--ttl", "60s", "--min-hold", "0s", "--",
                    "true")
    again = env.run("run", "--job", "fresh", "--ttl", "60s", "--min-hold", "0s", "--",
                    "true")
    assert (first.returncode, again.returncode) == (0, 0), (first, again)
    assert env.query("SELECT timeline FROM {schema}.timelines") == [(1,)]
    assert env.query("SELECT fencing_token, timeline FROM {schema}.locks") == [(2, 1)]


def test_a_holder_keeps_a_row_of_an_older_timeline_only_until_it_would_have_stopped(
        env: Env) -> None:
    """Version 9: no holder's own write re-stamps a row's timeline (only an acquisition
    does), and its own row of an older timeline is renewed only before the moment its
    holder stops by (the expiry; an advisory row's stops_by): past it, the old primary may
    have let another host take it over in a write lost with it. On the current timeline an
    expired row is still its holder's (a takeover would have changed it)."""
    assert env.run("init", "-q").returncode == 0
    # job: (the row's timeline, its expiry from now, its stops_by from now)
    cases = {"live": (0, "4 s", None), "expired": (0, "-1 s", None),
             "stopped": (0, "5 s", "-1 s"), "current": (1, "-1 s", None)}
    claims = {}
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        for job, (timeline, expiry, stops_by) in cases.items():
            claims[job] = claim = lease.Claim(job=job, schema=env.schema, ttl=5)
            assert lease.try_acquire(conn, claim) is lease.Attempt.WON
            env.query("UPDATE {schema}.locks SET timeline = %s, "
                      "expires_at = clock_timestamp() + %s::interval, "
                      "stops_by = clock_timestamp() + %s::interval WHERE job = %s",
                      (timeline, expiry, stops_by, job))
        renewed = {job: lease.renew(conn, claim)[0] for job, claim in claims.items()}
    assert renewed == {"live": lease.Renewal.OURS, "expired": lease.Renewal.LOST,
                       "stopped": lease.Renewal.LOST, "current": lease.Renewal.OURS}
    assert env.query("SELECT job, timeline FROM {schema}.locks ORDER BY job") == [
        ("current", 1), ("expired", 0), ("live", 0), ("stopped", 0)]


def test_a_run_abandoned_across_a_promotion_says_its_end_may_have_been_lost(
        env: Env) -> None:
    """Told by the tokens: the run that abandons it holds a token of a later timeline.
    Here the lock row's token is set where a promotion would have put the next one."""
    holder, _ = env.start_holder("lost", "--ttl", "5s", "--min-hold", "0s")
    holder.kill()
    holder.communicate()
    env.query("UPDATE {schema}.locks SET fencing_token = %s, expires_at = clock_timestamp()"
              " WHERE job = 'lost'", ((1 << 32),))
    after = env.run("run", "--job", "lost", "--", "true")
    assert (after.returncode, after.stderr) == (0, ""), after
    first, second = env.runs("lost")
    assert (first["outcome"], second["fencing_token"]) == ("abandoned", (1 << 32) + 1)
    assert first["error"].startswith("its end may have been lost in a failover")
    # A run abandoned on the same timeline says what it always said.
    again, _ = env.start_holder("gone", "--ttl", "5s", "--min-hold", "0s")
    again.kill()
    again.communicate()
    env.query("UPDATE {schema}.locks SET expires_at = clock_timestamp() WHERE job = 'gone'")
    assert env.run("run", "--job", "gone", "--", "true").returncode == 0
    assert env.runs("gone")[0]["error"] == "its holder vanished without recording an end"


def looks_promoted(env: Env, job: str, table: str = "locks") -> None:
    """The job's rows as a new primary shows them right after a failover: last written
    under an older timeline, this one first seen now."""
    env.query(f"UPDATE {{schema}}.{table} SET timeline = 0 WHERE job = %s", (job,))
    env.query("UPDATE {schema}.timelines SET first_seen = clock_timestamp()")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lease", "advisory"])
def test_a_row_from_an_older_timeline_is_taken_only_a_ttl_after_the_sighting(
        env: Env, mode: str) -> None:
    """Released, so free by every other rule: still nobody takes it before the larger of
    its ttl and the contender's has passed since the timeline was first seen; a trigger
    refused by that wait alone waits for its end and runs late (version 9)."""
    done = env.run("run", "--job", "old", "--mode", mode, "--ttl", "6s", "--min-hold", "0s",
                   "--", "true")
    assert done.returncode == 0, done
    looks_promoted(env, "old")
    # No --wait: refused by the wait alone, the trigger waits for its end and runs late.
    waited = env.run("run", "--job", "old", "--mode", mode, "--ttl", "5s", "--", "true")
    assert (waited.returncode, waited.stderr) == (0, ""), waited
    [(first_seen,)] = env.query("SELECT first_seen FROM {schema}.timelines")
    second = env.runs("old")[-1]
    assert second["started_at"] >= first_seen + timedelta(seconds=6)
    assert second["late_reason"] == "promotion_wait"
    assert env.query("SELECT fencing_token, timeline FROM {schema}.locks") == [(2, 1)]


@pytest.mark.slow
def test_a_semaphores_seats_from_an_older_timeline_are_waited_out(env: Env) -> None:
    holders = [env.popen("run", "--job", "sem", "--limit", "2", "--ttl", "5s",
                         "--min-hold", "0s", "--", "sleep", "2") for _ in range(2)]
    for holder in holders:
        holder.communicate(timeout=30)
        assert holder.returncode == 0
    assert env.query("SELECT count(*) FROM {schema}.seats") == [(2,)]
    env.wait_for(lambda: env.query("SELECT count(*) FROM {schema}.seats "
                                   "WHERE released_at IS NULL") == [(0,)])
    looks_promoted(env, "sem", "seats")
    waited = env.run("run", "--job", "sem", "--limit", "2", "--ttl", "5s", "--", "true")
    assert (waited.returncode, waited.stderr) == (0, ""), waited
    [(first_seen,)] = env.query("SELECT first_seen FROM {schema}.timelines")
    assert env.runs("sem")[-1]["started_at"] >= first_seen + timedelta(seconds=5)
    assert env.runs("sem")[-1]["late_reason"] == "promotion_wait"
