"""Advisory mode: exclusion (alone and mixed with lease mode), fast takeover, restarts."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from conftest import Env, one_line
from marks import assert_no_overlap, held_command, intervals, marking_command, race
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from relay import Relay

from pglock.db.embedded import EmbeddedServer
from pglock.db.keys import advisory_key

# Herds of contenders, killed holders, server restarts: the slow layer.
pytestmark = pytest.mark.slow


def _rounds(env: Env, modes: list[str], rounds: int = 3) -> None:
    marks, release = env.tmp / "marks", env.tmp / "release"
    for round_number in range(rounds):
        # Each round is a new trigger, deliberately run inside the last one's hold.
        processes = [env.popen("run", "--job", "mixed", "--mode", mode, "--holder", f"h{i}",
                               "--rerun", "--", *held_command(marks, release))
                     for i, mode in enumerate(modes)]
        results = race(processes, release)
        assert results == [(0, "", "")] + [(75, "", "")] * (len(modes) - 1), round_number
    found = intervals(marks)
    assert len(found) == rounds
    assert_no_overlap(found)


def test_advisory_contenders_never_overlap(env: Env) -> None:
    _rounds(env, ["advisory"] * 20)


def test_half_advisory_half_lease_never_overlap(env: Env) -> None:
    _rounds(env, ["advisory", "lease"] * 10)
    assert {r["mode"] for r in env.runs("mixed")} <= {"advisory", "lease"}


def test_a_herd_looping_on_a_short_job_records_no_false_lock_lost(env: Env) -> None:
    """The session holding the lock lives until the run's end is recorded: a contender
    never finds the lock free (and takes the row) while the finished run is still running."""
    marks = env.tmp / "marks"
    codes: list[tuple[int, str]] = []
    until = time.monotonic() + 20

    def loop() -> None:
        while time.monotonic() < until:
            done = env.run("run", "--job", "herd", "--mode", "advisory", "--ttl", "15s",
                           "--min-hold", "0s", "--", *marking_command(marks, 0.5))
            codes.append((done.returncode, done.stderr))

    threads = [threading.Thread(target=loop) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {code for code, _ in codes} <= {0, 75}, [c for c in codes if c[0] not in (0, 75)]
    runs = env.runs("herd")
    assert len(runs) >= 5
    assert {r["outcome"] for r in runs} == {"succeeded"}
    assert_no_overlap(intervals(marks))


def test_the_session_lock_is_held_until_the_end_is_recorded(env: Env) -> None:
    """Polled every millisecond from another session, the advisory lock is never free while
    the run is still marked running (the gap a contender took the row in)."""
    key = advisory_key(env.schema, "gap")
    with psycopg.connect(env.dsn, autocommit=True) as thief:
        for number in range(1, 4):
            holder = env.popen("run", "--job", "gap", "--mode", "advisory", "--min-hold", "0s",
                               "--", "sleep", "0.5")
            # From the holder's start on: before it, the poll would beat it to the lock.
            env.wait_for(lambda n=number: len(env.runs("gap")) == n, what="the run row")
            free_while_running = 0
            while holder.poll() is None:
                [(took, running)] = thief.execute(
                    "SELECT pg_try_advisory_lock(%s), EXISTS (SELECT 1 FROM "
                    f'"{env.schema}".runs WHERE job = %s AND outcome = \'running\')',
                    (key, "gap")).fetchall()
                if took:
                    thief.execute("SELECT pg_advisory_unlock(%s)", (key,))
                    free_while_running += running
            assert (holder.communicate(), holder.returncode, free_while_running) == (
                ("", ""), 0, 0)
    assert {r["outcome"] for r in env.runs("gap")} == {"succeeded"}


def test_holder_shows_in_pg_locks_under_the_documented_key(env: Env) -> None:
    holder = env.popen("run", "--job", "visible", "--mode", "advisory", "--", "sleep", "3")
    env.wait_for(lambda: env.runs("visible"), what="the run row")
    key = advisory_key(env.schema, "visible")
    [(pid, name)] = env.query(
        "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
        " WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted"
        " AND ((l.classid::bigint << 32) | l.objid::bigint) = %s", (key,))
    assert name.startswith("pglock run visible on ")
    [(mode, backend_pid)] = env.query(
        "SELECT mode, backend_pid FROM {schema}.locks WHERE job = 'visible'")
    assert (mode, backend_pid) == ("advisory", pid)
    holder.communicate(timeout=20)
    assert holder.returncode == 0


def test_sigkilled_advisory_holder_is_replaced_once_it_has_stopped_not_after_the_ttl(
        env: Env) -> None:
    """The session lock is free the moment the kernel closes the dead holder's socket, but
    its command may still be stopping: the row is taken at its stops_by (its last check +
    the horizon it stops its command by: 18 s at a ttl of 60 s), not at once and not
    after the ttl (docs/advisory.md, "The lock-delay")."""
    holder, _ = env.start_holder("gone", "--mode", "advisory", "--ttl", "60s")
    holder.kill()
    holder.communicate()
    killed = time.monotonic()
    [(stops_by, expires_at)] = env.query(
        "SELECT stops_by, expires_at FROM {schema}.locks WHERE job = 'gone'")
    while env.run("run", "--job", "gone", "--mode", "advisory", "--", "true").returncode != 0:
        assert time.monotonic() - killed < 40, "no takeover"
        time.sleep(0.2)
    first, second = env.runs("gone")
    assert first["outcome"] == "abandoned"
    assert second["outcome"] == "succeeded"
    assert second["fencing_token"] == first["fencing_token"] + 1
    # By the server's clock: after the holder's horizon, well before its row's expiry.
    assert stops_by <= second["started_at"] < expires_at - timedelta(seconds=30)


def test_lease_contender_still_waits_for_an_advisory_rows_expiry(env: Env) -> None:
    holder, _ = env.start_holder("strict", "--mode", "advisory", "--ttl", "60s")
    holder.kill()
    holder.communicate()
    time.sleep(0.5)
    assert env.run("run", "--job", "strict", "--", "true").returncode == 75


@pytest.mark.parametrize("mode", ["lease", "advisory"])
def test_server_restart_mid_run_is_survived(env: Env, private_server: EmbeddedServer,
                                            mode: str) -> None:
    env.dsn = env.env["PGLOCK_DSN"] = private_server.conninfo
    holder = env.popen("run", "--job", "restart", "--mode", mode, "--ttl", "30s", "--",
                       "sleep", "6")
    env.wait_for(lambda: env.runs("restart"), what="the run row")
    time.sleep(1)
    private_server.stop()
    time.sleep(1)
    private_server.start()
    stdout, stderr = holder.communicate(timeout=30)
    assert (holder.returncode, stdout, stderr) == (0, "", "")
    [run] = env.runs("restart")
    assert run["outcome"] == "succeeded"


def test_advisory_lock_held_by_another_after_a_restart_stops_the_run_at_its_deadline(
        env: Env, private_server: EmbeddedServer) -> None:
    env.dsn = env.env["PGLOCK_DSN"] = private_server.conninfo
    holder = env.popen("run", "--job", "race", "--mode", "advisory", "--ttl", "10s", "--",
                       "sleep", "30")
    env.wait_for(lambda: env.runs("race"), what="the run row")
    private_server.stop()
    private_server.start()
    # Right after the restart the session lock is free, and another session takes it
    # before the holder's next heartbeat can. The row, stamped by the server's previous
    # life, stays the holder's (it is a lease now): the holder keeps trying to take its
    # lock back, and stops its command at its local deadline.
    with psycopg.connect(private_server.conninfo, autocommit=True) as thief:
        [(taken,)] = thief.execute("SELECT pg_try_advisory_lock(%s)",
                                   (advisory_key(env.schema, "race"),)).fetchall()
        assert taken
        _, stderr = holder.communicate(timeout=30)
    assert holder.returncode == 125
    assert "lock lost: no renewal succeeded in time" in one_line(stderr)
    [run] = env.runs("race")
    assert (run["outcome"], run["signal"]) == ("lock_lost", 15)


def test_clear_terminate_ends_an_advisory_holders_session(env: Env) -> None:
    holder = env.popen("run", "--job", "wedged", "--mode", "advisory", "--", "sleep", "60")
    env.wait_for(lambda: env.runs("wedged"), what="the run row")
    [(backend_pid,)] = env.query("SELECT backend_pid FROM {schema}.locks WHERE job = 'wedged'")
    cleared = env.run("clear", "--job", "wedged", "--reason", "incident 42", "--terminate",
                      "--now", "--yes")
    assert cleared.returncode == 0, cleared.stderr
    _, stderr = holder.communicate(timeout=30)
    assert holder.returncode == 125
    assert "lock lost" in one_line(stderr)
    assert env.query("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend_pid,)) == []
    assert env.run("run", "--job", "wedged", "--mode", "advisory", "--", "true").returncode == 0
    outcomes = [(r["outcome"], r["reason"]) for r in env.runs("wedged")]
    assert outcomes == [("lock_lost", None), ("cleared", "incident 42"), ("succeeded", None)]


def test_a_holder_cut_off_at_an_attempts_end_keeps_its_lock_for_the_next(env: Env) -> None:
    """The soak's seed 3433 (asynchronous, slots 01:51 and 01:58 of cron-retry-adv): the
    network drops everything for 2 s while a renewal is on its way, and the retried slot's
    first attempt ends meanwhile. Its end is recorded, the lock kept, on a new session once
    the network is back; the old session, abandoned under its stuck renewal, must not keep
    the session lock from the new one (it did: it stayed open, idle, holding the lock, and
    the second attempt's renewals, finding it held, lost the lock: exit 125). Exit 0,
    attempts failed then succeeded, nothing said."""
    options = conninfo_to_dict(env.dsn)
    relay = Relay(f"{options['host']}/.s.PGSQL.{options.get('port', 5432)}")
    through = make_conninfo(env.dsn, host="127.0.0.1", port=str(relay.port))
    process = env.popen(
        "run", "--job", "abandoned", "--mode", "advisory", "--ttl", "10s", "--dsn", through,
        "--schedule", "0 0 1 1 *", "--tz", "UTC", "--retries", "1", "--retry-delay", "1s",
        "--", "sh", "-c", '[ "$PGLOCK_ATTEMPT" -ge 2 ] && sleep 4 && exit 0; sleep 3.6; exit 1')
    try:
        env.wait_for(lambda: env.runs("abandoned") or process.poll() is not None,
                     what="the first attempt's start")
        # Renewals go every 1.5 s: the one at 3 s is on its way when the command ends.
        time.sleep(2.5)
        relay.hold()
        time.sleep(2.0)
        relay.flow()
        assert process.communicate(timeout=60) == ("", "")
    finally:
        relay.flow()
        if process.poll() is None:
            process.kill()
            process.wait()
        relay.close()
    assert process.returncode == 0
    runs = env.runs("abandoned")
    assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "failed"), (2, "succeeded")]


def test_a_restart_under_an_attempt_leaves_the_next_one_its_lock(
        env: Env, private_server: EmbeddedServer) -> None:
    """The soak's seed 3433 (asynchronous, slot 01:51 of cron-retry-adv): the server
    restarts while a retried slot's first attempt runs, and the attempt ends while it is
    down. Two threads then wait for the server, each to open the run's session: the
    heartbeat's last renewal and the end's record. The one that opened second used to
    replace the first's session, on which the renewal had taken the session lock back, so
    the second attempt's renewals found the lock held by that forgotten session and lost
    it (exit 125). Now the second closes its own: exit 0."""
    env.dsn = env.env["PGLOCK_DSN"] = private_server.conninfo
    process = env.popen(
        "run", "--job", "restarted", "--mode", "advisory", "--ttl", "10s",
        "--schedule", "0 0 1 1 *", "--tz", "UTC", "--retries", "1", "--retry-delay", "1s",
        "--connect-timeout", "20s", "--",
        "sh", "-c", '[ "$PGLOCK_ATTEMPT" -ge 2 ] && sleep 4 && exit 0; sleep 2.5; exit 1')
    try:
        env.wait_for(lambda: env.runs("restarted") or process.poll() is not None,
                     what="the first attempt's start")
        time.sleep(1.0)
        private_server.stop()
        time.sleep(3.0)
        private_server.start()
        assert process.communicate(timeout=60) == ("", "")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    runs = env.runs("restarted")
    assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "failed"), (2, "succeeded")]
