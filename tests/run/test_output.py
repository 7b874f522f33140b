"""The command's output with real processes: passed through byte for byte, its tail kept in
history, held back until failure (--output-on-failure), left alone on a terminal."""

from __future__ import annotations

import os
import pty
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PGLOCK, Env, one_line

from pglock.run import output


def run_binary(env: Env, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`pglock run` with stdout and stderr on pipes, as under cron."""
    return subprocess.run([PGLOCK, "run", *args], env=env.env, capture_output=True, timeout=60,
                          check=False)


def random_file(path: Path, size: int, seed: int) -> bytes:
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return data


def test_output_passes_through_byte_for_byte_and_the_tail_is_kept(env: Env) -> None:
    out = random_file(env.tmp / "out", 300_000, 1)
    err = random_file(env.tmp / "err", 70_000, 2)
    result = run_binary(env, "--job", "binary", "--output-tail", "1000", "--", "sh", "-c",
                        f"cat {env.tmp / 'err'} >&2; cat {env.tmp / 'out'}")
    assert result.returncode == 0
    assert result.stdout == out
    assert result.stderr == err
    [run] = env.runs("binary")
    # stdout came last and is longer than the tail: the tail is exactly its last bytes.
    assert bytes(run["output_tail"]) == out[-1000:]


def test_the_tail_interleaves_both_streams_in_order(env: Env) -> None:
    result = run_binary(env, "--job", "order", "--", "sh", "-c",
                        "printf one; sleep 0.2; printf two >&2; sleep 0.2; printf three; exit 4")
    assert (result.returncode, result.stdout, result.stderr) == (4, b"onethree", b"two")
    [run] = env.runs("order")
    assert (bytes(run["output_tail"]), run["outcome"]) == (b"onetwothree", "failed")


def test_output_tail_zero_keeps_nothing(env: Env) -> None:
    result = run_binary(env, "--job", "none", "--output-tail", "0", "--", "echo", "hello")
    assert (result.returncode, result.stdout) == (0, b"hello\n")
    assert env.runs("none")[0]["output_tail"] is None


@pytest.mark.parametrize("how", ["closed", "full"])
def test_a_stdout_that_cannot_be_written_does_not_kill_the_command(env: Env,
                                                                    how: str) -> None:
    """pglock started with `>&-` (or on a full disk): the command's output is kept in the
    tail and dropped, and the command goes on, as it would without pglock in between (it
    was killed by SIGPIPE: issue 46, D21). A reader that leaves still means SIGPIPE."""
    script = "echo hello; sleep 0.3; echo again; echo done >&2"
    if how == "closed":
        result = subprocess.run(["sh", "-c", '"$@" >&-', "sh", PGLOCK, "run", "--job", how,
                                 "--", "sh", "-c", script], env=env.env,
                                stderr=subprocess.PIPE, timeout=60, check=False)
    else:
        with open("/dev/full", "wb") as full:
            result = subprocess.run([PGLOCK, "run", "--job", how, "--", "sh", "-c", script],
                                    env=env.env, stdout=full, stderr=subprocess.PIPE,
                                    timeout=60, check=False)
    assert (result.returncode, result.stderr) == (0, b"done\n")
    [run] = env.runs(how)
    assert (run["outcome"], bytes(run["output_tail"])) == ("succeeded", b"hello\nagain\ndone\n")


def test_a_reader_that_leaves_still_ends_the_command_by_sigpipe(env: Env) -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([PGLOCK, "run", "--job", "left", "--", "sh", "-c",
                                 "echo one; sleep 0.3; echo two; echo after >&2"],
                                env=env.env, stdout=write, stderr=subprocess.PIPE,
                                timeout=60, check=False)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (141, b"")
    assert env.runs("left")[0]["outcome"] == "killed"


def test_output_on_failure_is_silent_on_success(env: Env) -> None:
    result = run_binary(env, "--job", "chronic", "--output-on-failure", "--", "sh", "-c",
                        "echo fine; echo noise >&2")
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    assert sorted(bytes(env.runs("chronic")[0]["output_tail"]).splitlines()) == [b"fine",
                                                                                   b"noise"]


def test_output_on_failure_prints_everything_on_failure(env: Env) -> None:
    # More than is held in memory: the spilled part comes back too, byte for byte.
    big = random_file(env.tmp / "big", output.SPOOL * 3, 3)
    result = run_binary(env, "--job", "chronic", "--output-on-failure", "--", "sh", "-c",
                        f"echo starting >&2; cat {env.tmp / 'big'}; echo broken >&2; exit 3")
    assert result.returncode == 3
    assert result.stdout == big
    assert result.stderr == b"starting\nbroken\n"
    assert bytes(env.runs("chronic")[0]["output_tail"]).endswith(b"broken\n")


def test_on_a_terminal_the_command_keeps_it(env: Env) -> None:
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen([PGLOCK, "run", "--job", "tty", "--", "sh", "-c",
                                    "test -t 1 && test -t 2 && echo on-a-terminal"],
                                   env=env.env, stdout=follower, stderr=follower)
        assert process.wait(timeout=60) == 0
        assert b"on-a-terminal" in os.read(leader, 4096)
    finally:
        os.close(leader)
        os.close(follower)
    assert env.runs("tty")[0]["output_tail"] is None


@pytest.mark.parametrize(("size", "words"), [
    ("4 lots", "--output-tail: '4 lots' is not a size"),
    ("2GiB", "--output-tail: at most 1MiB"),
])
def test_bad_sizes_are_usage_errors(env: Env, size: str, words: str) -> None:
    result = env.run("run", "--job", "bad", "--output-tail", size, "--", "true")
    assert result.returncode == 2
    assert words in one_line(result.stderr)


def peak_rss_kib(env: Env, *args: str) -> int:
    """Peak resident memory of one `pglock run` (the largest of a fresh parent's children)."""
    code = ("import resource, subprocess, sys; "
            "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    result = subprocess.run([sys.executable, "-c", code, PGLOCK, "run", *args], env=env.env,
                            capture_output=True, text=True, timeout=60, check=True)
    return int(result.stdout)


def test_capturing_much_output_costs_the_wrapper_little_memory(env: Env) -> None:
    flood = ["--", "sh", "-c", "head -c 10000000 /dev/zero; exit 1"]
    plain = peak_rss_kib(env, "--job", "flood", "--output-tail", "0", *flood)
    tail = peak_rss_kib(env, "--job", "flood", "--rerun", *flood)
    held = peak_rss_kib(env, "--job", "flood", "--rerun", "--output-on-failure", *flood)
    assert [r["output_tail"] is not None for r in env.runs("flood")] == [False, True, True]
    # 10 MB went through, or was held back (spilled to a file): the wrapper did not grow.
    assert tail - plain < 2048 and held - plain < 2048, (plain, tail, held)
