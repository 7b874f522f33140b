"""The monitoring kit with Prometheus's own tools: promtool checks the exposition of a
database with a job in every state, checks the rules and runs their unit tests;
node_exporter's textfile collector reads what the documented cron line writes.

promtool comes with Debian's `prometheus` package, node_exporter with
`prometheus-node-exporter` (.ci/run installs both); without them these tests skip.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PGLOCK, Env, fetched, free_port
from operating import holding, pglock_json
from prometheus_client.parser import text_string_to_metric_families

from pglock.reports.jobs import State
from reports.test_monitor import make_overdue, make_stale, run_ok

KIT = Path(__file__).resolve().parents[2] / "monitoring"
PROMTOOL = shutil.which("promtool")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed "
                                    "(Debian: apt-get install prometheus)")


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True,
                          cwd=KIT, timeout=60)


@contextlib.contextmanager
def every_state(env: Env) -> Iterator[None]:
    """A job in each state status knows, held so while the block runs."""
    run_ok(env, "idle", "--min-hold", "0")
    run_ok(env, "held", "--min-hold", "1h")
    assert env.run("run", "--job", "failed", "--", "false").returncode == 1
    assert env.run("run", "--job", "dead", "--schedule", "* * * * *", "--retries", "1",
                   "--retry-delay", "0", "--", "false").returncode == 1
    make_overdue(env, "overdue")
    make_stale(env, "stale")
    run_ok(env, "paused", "--min-hold", "0")
    assert env.run("pause", "--job", "paused", "--reason", "kit test").returncode == 0
    # In a maintenance window now: its windows as a run would have stored them.
    run_ok(env, "window", "--min-hold", "0")
    env.query("UPDATE {schema}.jobs SET windows = %s WHERE job = 'window'", (["* * * * * 1h"],))
    with contextlib.ExitStack() as stack:
        stack.enter_context(holding(env, "running"))
        stack.enter_context(holding(env, "cleared"))
        assert env.run("clear", "--job", "cleared", "--yes").returncode == 0
        noted = env.tmp / "slow-noted"
        stack.enter_context(holding(env, "slow", "--expect-duration", "..500ms",
                                    "--on-slow", f"touch {noted}"))
        env.wait_for(noted.exists, what="the slow run's hook")
        yield


@needs_promtool
@pytest.mark.slow  # waits for a run to pass its expected MAX; a clear's holder stops
def test_promtool_finds_the_exposition_of_every_state_clean(env: Env) -> None:
    with every_state(env):
        states = {job["job"]: job["state"] for job in pglock_json(env, "status", "--all")["jobs"]}
        assert set(states.values()) == {str(state) for state in State}, states
        result = env.run("metrics")
    assert (result.returncode, result.stderr) == (0, "")
    checked = promtool("check", "metrics", stdin=result.stdout)
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", "")
    families = {f.name for f in text_string_to_metric_families(result.stdout)}
    assert {"pglock_job_duration_seconds", "pglock_job_state", "pglock_job_slow"} <= families


@needs_promtool
def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    checked = promtool("check", "rules", "pglock.rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 11 rules found" in checked.stdout
    tested = promtool("test", "rules", "pglock.rules.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


@pytest.mark.skipif(NODE_EXPORTER is None, reason="node_exporter is not installed "
                    "(Debian: apt-get install prometheus-node-exporter)")
@pytest.mark.slow  # a server of its own
def test_node_exporter_reads_the_textfile_the_cron_line_writes(env: Env) -> None:
    assert NODE_EXPORTER is not None
    run_ok(env, "nightly", "--min-hold", "0", "--expect-duration", "1h..")
    textfiles = env.tmp / "textfile"
    textfiles.mkdir()
    # The cron line of docs/monitoring.md, as cron's sh runs it.
    line = (f"{PGLOCK} metrics > {textfiles}/pglock.prom.tmp && "
            f"mv {textfiles}/pglock.prom.tmp {textfiles}/pglock.prom")
    cron = subprocess.run(["sh", "-c", line], env=env.env, capture_output=True, text=True,
                          timeout=60)
    assert (cron.returncode, cron.stdout, cron.stderr) == (0, "", "")
    assert [p.name for p in textfiles.iterdir()] == ["pglock.prom"]
    port = free_port()
    exporter = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
         "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textfiles}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        text = fetched(f"http://127.0.0.1:{port}/metrics")
    finally:
        exporter.terminate()
        _, stderr = exporter.communicate(timeout=10)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("node_textfile_scrape_error", ())] == 0, stderr
    assert samples[("pglock_job_runs_total", (("job", "nightly"),
                                              ("outcome", "succeeded")))] == 1
    assert samples[("pglock_job_runs_outside_expected_total", (("bound", "min"),
                                                               ("job", "nightly")))] == 1
    assert ("pglock_job_duration_seconds_count", (("job", "nightly"),)) in samples
    assert ("pglock_metrics_timestamp_seconds", ()) in samples
