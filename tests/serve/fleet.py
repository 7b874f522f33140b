"""A seeded fleet for the dashboard's tests: real `pglock run`s for the runs a person would
look at (output, hostile names, a pause), SQL for the many and for the states a test cannot
wait for (stale, dead, overdue, cleared, held, running), as bench fills its fleet."""

from __future__ import annotations

from conftest import Env

SCRIPT = "<script>alert(1)</script>"
RTL = "\u202eevil-rtl\u202c.sh"
BULK = 120

# The history of `nightly-backup` over 40 days: 3 runs a day, durations growing, a failure
# every 7th, a second attempt after each failure, every 11th timed out.
HISTORY = """
INSERT INTO {schema}.runs (job, mode, holder, holder_pid, fencing_token, command, started_at,
                           finished_at, duration, exit_code, outcome, slot, attempt, error)
SELECT 'nightly-backup', 'lease', 'host-' || mod(g, 3), 100 + g, g, 'backup.sh', s.at,
       s.at + d.took, d.took, CASE o.outcome WHEN 'succeeded' THEN 0 WHEN 'failed' THEN 1 END,
       o.outcome, date_trunc('hour', s.at), CASE WHEN mod(g, 7) = 1 THEN 2 ELSE 1 END,
       CASE o.outcome WHEN 'timed_out' THEN 'timed out after 600s' END
FROM generate_series(1, 120) g,
     LATERAL (SELECT now() - interval '40 days' + interval '8 hours' * g AS at) s,
     LATERAL (SELECT make_interval(secs => 20 + g * 1.5 + mod(g * 37, 23)) AS took) d,
     LATERAL (SELECT CASE WHEN mod(g, 7) = 0 THEN 'failed' WHEN mod(g, 11) = 0 THEN 'timed_out'
                          ELSE 'succeeded' END AS outcome) o
"""
BULK_RUNS = """
INSERT INTO {schema}.runs (job, mode, holder, holder_pid, fencing_token, command, started_at,
                           finished_at, duration, exit_code, outcome)
SELECT 'bulk-' || lpad(k::text, 3, '0'), 'lease', 'host-' || mod(k, 5), 200 + k, 1,
       'true', now() - make_interval(mins => k * 7), now() - make_interval(mins => k * 7)
       + interval '3 seconds', interval '3 seconds', 0, 'succeeded'
FROM generate_series(0, %(bulk)s - 1) k
"""
# A summary row per job that has runs but none (the SQL-made ones), from its newest run.
SUMMARIES = """
INSERT INTO {schema}.jobs (job, mode, last_run_id, last_started_at, last_holder,
                           last_finished_run_id, last_finished_at, last_outcome,
                           last_exit_code, last_duration, last_success_at, outcome_counts,
                           last_attempt)
SELECT DISTINCT ON (r.job) r.job, 'lease', r.id, r.started_at, r.holder, r.id, r.finished_at,
       r.outcome, r.exit_code, r.duration,
       (SELECT max(finished_at) FROM {schema}.runs x
        WHERE x.job = r.job AND x.outcome = 'succeeded'),
       (SELECT jsonb_object_agg(outcome, n) FROM (SELECT outcome, count(*) AS n
        FROM {schema}.runs x WHERE x.job = r.job GROUP BY outcome) c), r.attempt
FROM {schema}.runs r
WHERE NOT EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.job = r.job)
ORDER BY r.job, r.id DESC
"""
LOCK = """
INSERT INTO {schema}.locks (job, mode, holder, holder_pid, holder_id, fencing_token, ttl,
                            acquired_at, renewed_at, expires_at, released_at, cleared_at,
                            cleared_by)
VALUES (%(job)s, 'lease', %(holder)s, 4242, md5(%(job)s), 7, interval '1 minute',
        now() - interval '5 minutes', now(), now() + %(expires)s::interval,
        %(released)s, %(cleared)s, %(cleared_by)s)
"""
OPEN_RUN = """
WITH r AS (
    INSERT INTO {schema}.runs (job, mode, holder, holder_pid, fencing_token, command,
                               started_at, outcome)
    VALUES (%(job)s, 'lease', %(holder)s, 4242, 7, 'sleep 600', now() - interval '5 minutes',
            'running') RETURNING id, started_at)
UPDATE {schema}.jobs j SET last_run_id = r.id, last_started_at = r.started_at FROM r
WHERE j.job = %(job)s
"""


# The census of nightly-backup (every 8 hours): web-1 attends it, old-host too on an older
# pglock, and a host with a hostile name stopped two days ago (as SQL: a test cannot wait
# two slots). tidy-tmp's census comes from real runs on web-1 and web-2 (PGLOCK_HOST).
CENSUS = """
INSERT INTO {schema}.hosts AS h (host, first_seen, version, python, jobs) VALUES
    ('web-1', now() - interval '30 days', '0.1.0', '3.11.7', '{{nightly-backup}}'),
    ('old-host', now() - interval '30 days', '0.0.9', '3.11.2', '{{nightly-backup}}'),
    (%(silent)s, now() - interval '30 days', '0.1.0', '3.12.1', '{{nightly-backup}}')
ON CONFLICT (host) DO UPDATE SET jobs = h.jobs || excluded.jobs
"""
ATTENDANCE = """
INSERT INTO {schema}.attendance (job, host, first_attempt, ttl, outcome, last_attempt, slot,
                                 gaps, roster_key)
SELECT 'nightly-backup', host, now() - interval '30 days', interval '1 minute', 'held',
       date_trunc('hour', now()) - interval '1 hour' + ago,
       date_trunc('hour', now()) - interval '1 hour' + ago, '{{28800,28800}}',
       {schema}.roster_key('nightly-backup', host)
FROM (VALUES ('web-1', interval '0'), ('old-host', interval '0'),
             (%(silent)s, interval '-2 days')) AS v(host, ago)
"""
SILENT_HOST = "<b>gone</b>\u202e"


def seed(env: Env) -> None:
    """The fleet: every state, many idle jobs, hostile names, a long history."""
    assert env.run("init", "-q").returncode == 0
    for job, command in (("tidy-tmp", ["sh", "-c", "echo tidied 3 files"]),
                         (SCRIPT, ["sh", "-c", "echo '<b>bold</b> & <img src=x>'; exit 3"]),
                         (RTL, ["sh", "-c", "printf 'rtl \\342\\200\\256 done\\n'"])):
        done = env.run("run", "--job", job, "--", *command)
        assert done.returncode in (0, 3), done
    for job in ("stale-job", "dead-job", "overdue-job", "cleared-job", "held-job",
                "running-job", "paused-job"):
        assert env.run("run", "--job", job, "--", "true").returncode == 0
    assert env.run("pause", "--job", "paused-job", "--reason", "<i>maintenance</i>"
                   ).returncode == 0
    for host in ("web-1", "web-2"):
        done = env.run("run", "--job", "tidy-tmp", "--min-hold", "0", "--", "true",
                       env={"PGLOCK_HOST": host})
        assert done.returncode in (0, 75), done
    env.query(HISTORY)
    env.query(BULK_RUNS, {"bulk": BULK})
    env.query(SUMMARIES)
    env.query("UPDATE {schema}.jobs SET schedule = '0 */8 * * *', timezone = 'UTC', "
              "last_slot = date_trunc('hour', now()) - interval '1 hour', "
              "next_slot = date_trunc('hour', now()) + interval '8 hours', "
              "grace = interval '10 minutes' WHERE job = 'nightly-backup'")
    env.query("UPDATE {schema}.jobs SET schedule = '0 3 * * *', timezone = 'UTC', "
              "last_slot = now() - interval '3 days', next_slot = now() - interval '2 days', "
              "grace = interval '10 minutes' WHERE job = 'overdue-job'")
    env.query(CENSUS, {"silent": SILENT_HOST})
    env.query(ATTENDANCE, {"silent": SILENT_HOST})
    env.query("UPDATE {schema}.jobs SET dead_slot = now() - interval '1 hour', "
              "dead_attempts = 3, dead_error = 'disk full <oops>' WHERE job = 'dead-job'")
    for job, expires, released, cleared in (
            ("stale-job", "-1 minute", None, None), ("running-job", "1 hour", None, None),
            ("cleared-job", "1 hour", None, "now"), ("held-job", "1 hour", "now", None)):
        env.query("DELETE FROM {schema}.locks WHERE job = %(job)s", {"job": job})
        env.query(LOCK, {"job": job, "holder": f"{job}-host", "expires": expires,
                         "released": released and _now(env), "cleared": cleared and _now(env),
                         "cleared_by": cleared and "ops@bastion"})
        if released is None:
            env.query(OPEN_RUN, {"job": job, "holder": f"{job}-host"})


def _now(env: Env) -> object:
    return env.query("SELECT now()")[0][0]
