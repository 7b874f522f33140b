"""A closed standard output (`>&-`) or a pipe whose reader left: every command that writes
to it ends with one quiet 141, after doing its work (issue 21, item 8)."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import PGLOCK, Env

JOBS_FILE = '[jobs.filed]\ncommand = ["true"]\nschedule = "*/5 * * * *"\n'

# Each command that writes to stdout, with arguments that make it write.
COMMANDS = [
    ["status"], ["history"], ["metrics"], ["crontab"], ["systemd"], ["jobs"], ["doctor"],
    ["init"],
    ["pause", "--job", "seen", "--reason", "r"], ["resume", "--job", "seen"],
    ["stop", "--job", "seen", "--reason", "r"],
    ["forget", "--job", "seen", "--reason", "r"],
    ["--version"], ["--help"], ["status", "--help"],
]


def _closed(env: Env, args: list[str], how: str) -> subprocess.CompletedProcess[str]:
    environ = {**env.env, "PGLOCK_CONFIG": str(env.tmp / "config.toml")}
    if how == "closed":
        # What a shell's `>&-` gives: no file descriptor 1 at all.
        command = [PGLOCK, *args]
        return subprocess.run(["sh", "-c", '"$@" >&-', "sh", *command], env=environ,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([PGLOCK, *args], env=environ, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write)


@pytest.mark.parametrize("how", ["closed", "pipe"])
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_closed_stdout_is_one_quiet_141(env: Env, args: list[str], how: str) -> None:
    (env.tmp / "config.toml").write_text(JOBS_FILE)
    if args[0] == "stop":
        holder, _ = env.start_holder("seen", "--ttl", "6s")
    else:
        holder = None
        assert env.run("run", "--job", "seen", "--", "true").returncode == 0
    try:
        result = _closed(env, args, how)
        assert (result.returncode, result.stderr) == (141, ""), result
    finally:
        if holder is not None:
            holder.communicate(timeout=60)
    if args[0] == "pause":
        # The action was done before the answer could not be written.
        assert env.query("SELECT count(*) FROM {schema}.pauses")[0][0] == 1
    if args[0] == "stop":
        assert holder is not None and holder.returncode == 143


@pytest.mark.parametrize("args", [["--help"], ["status", "--help"], ["run", "--help"],
                                  ["systemd", "-h"], ["--version"]], ids=" ".join)
def test_a_full_stdout_is_one_line_and_125(args: list[str]) -> None:
    """click prints the help itself: its write to a full disk is said as pglock's own
    writes are, not as an internal error (issue 46, D15)."""
    with open("/dev/full", "w") as full:
        result = subprocess.run([PGLOCK, *args], stdout=full, stderr=subprocess.PIPE,
                                text=True, timeout=60, check=False)
    assert (result.returncode, result.stderr) == (
        125, "pglock: cannot write to standard output: No space left on device\n")
