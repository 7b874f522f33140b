"""No claim for a run that cannot start (issue 21): what would make the start fail is
refused before the acquire (exit 2, nothing recorded); what can still fail between the
acquire and the fork records the run failed with one line and releases the lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import Env, one_line

# Each step between the acquire and the fork, a failure injected there (the attribute is
# replaced, failing at its first call, in a real pglock process before `run` starts), the
# exit code and the words of its one line.
NOT_STARTED = (125, "the command was not started: pglock failed before the fork")
STEPS = [
    ("pglock.run.notify.Notifier.acquired", "OSError(28, 'No space left on device')",
     *NOT_STARTED),
    ("pglock.run.output.Capture.__init__", "OSError(24, 'Too many open files')", *NOT_STARTED),
    ("pglock.run.keeping.horizon", "RuntimeError('boom')", 125, "not started: pglock failed"),
    ("pglock.lock.heartbeat.start_deadline", "ValueError('boom')", 125,
     "not started: pglock failed"),
    ("pglock.run.environment.command_environment",
     "UnicodeEncodeError('utf-8', 'x', 0, 1, 'x')", 125, "not started: pglock failed"),
    ("pglock.run.child.become_subreaper", "OSError(1, 'Operation not permitted')", 125,
     "not started: pglock failed"),
    ("pglock.run.watchdog.child_setup", "MemoryError()", 125, "not started: pglock failed"),
    ("pglock.run.watchdog.subprocess.Popen", "ValueError('embedded null byte')", 125,
     "not started: pglock failed"),
    ("pglock.run.watchdog.subprocess.Popen", "OSError(7, 'Argument list too long')", 126,
     "cannot execute true: Argument list too long"),
]

DRIVER = """
import importlib, sys
target, failure = sys.argv[1], sys.argv[2]
module_name, _, attribute = target.rpartition(".")
try:
    owner = importlib.import_module(module_name)
except ModuleNotFoundError:
    module_name, _, klass = module_name.rpartition(".")
    owner = getattr(importlib.import_module(module_name), klass)
original = getattr(owner, attribute)
calls = []
def fail(*args, **kwargs):
    calls.append(1)
    if len(calls) == 1:
        raise eval(failure)
    return original(*args, **kwargs)
setattr(owner, attribute, fail)
from pglock.cli.runline import main
sys.exit(main(sys.argv[3:]))
"""


def _injected(env: Env, target: str, failure: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(DRIVER), target, failure,
                           "run", *args], env=env.env, capture_output=True, text=True,
                          timeout=60)


def _nothing_held(env: Env, job: str) -> None:
    assert all(run["outcome"] != "running" for run in env.runs(job)), env.runs(job)
    # The lock is free at once: another run takes it.
    again = env.run("run", "--job", job, "--min-hold", "0", "--", "true")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize(("target", "failure", "code", "words"), STEPS)
def test_a_failure_between_acquire_and_fork_holds_no_lock(env: Env, target: str, failure: str,
                                                          code: int, words: str) -> None:
    events = env.tmp / "events"
    done = _injected(env, target, failure, "--job", "inj", "--output-on-failure",
                     "--event-log", str(events), "--", "true")
    line = one_line(done.stderr)
    assert done.returncode == code, line
    assert "internal error" not in line and words in line, line
    runs = env.runs("inj")
    assert [run["outcome"] for run in runs] == ["failed"], runs
    _nothing_held(env, "inj")


# The jobs file is the one input that can carry a NUL, or an argv too big to exec.
@pytest.mark.parametrize(("table", "words"), [
    ('command = ["echo", "a\\u0000b"]', "command: argument 1 contains a NUL character"),
    ('command = "echo a\\u0000b"', "command: argument 2 contains a NUL character"),
    ('command = ["true"]\n"on-failure" = "x\\u0000"', "on-failure: contains a NUL"),
    ('command = ["true"]\n"on-success" = "x\\u0000"', "on-success: contains a NUL"),
    ('command = ["true"]\nholder = "h\\u0000"', "holder: contains a NUL"),
    ('command = ["true"]\n"event-log" = "/tmp/e\\u0000"', "event-log: contains a NUL"),
    ('command = ["true"]\n"ping-url" = "http://h/\\u0000"', "ping-url"),
    ('command = ["echo", "' + "x" * (200 * 1024) + '"]', "the system takes at most"),
    ("command = [" + ", ".join(['"' + "x" * 100_000 + '"'] * 40) + "]",
     "more than the system takes"),
])
def test_what_cannot_start_is_refused_before_the_acquire(env: Env, table: str,
                                                         words: str) -> None:
    config = env.tmp / "config.toml"
    config.write_text(f"[jobs.bad]\n{table}\n")
    done = env.run("run", "--job", "bad", env={"PGLOCK_CONFIG": str(config)})
    line = one_line(done.stderr)
    assert done.returncode == 2, line
    assert "[jobs.bad]" in line and words in line, line
    assert env.runs("bad") == []


def test_a_command_path_not_utf8_with_an_event_log_runs(env: Env) -> None:
    events = env.tmp / "events"
    program = env.tmp / "caf\udce9"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    done = env.run("run", "--job", "latin1", "--event-log", str(events), "--", str(program))
    assert (done.returncode, done.stderr) == (0, "")
    assert "caf\\udce9" in events.read_text()
    assert [run["outcome"] for run in env.runs("latin1")] == ["succeeded"]
