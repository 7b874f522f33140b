"""`pglock serve` as a process: where it listens and says so, what it refuses at start,
a DSN's password kept out of pages and logs, and `pglock run` paying nothing for it."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import Env, fetched, free_port, one_line

STACK = ("starlette", "uvicorn", "jinja2", "markupsafe", "anyio", "h11", "pglock.serve")


@contextmanager
def serving(env: Env, *args: str) -> Iterator[tuple[str, subprocess.Popen[str], str]]:
    """A real `pglock serve` on a free port: its URL, the process, its first line."""
    port = free_port()
    process = env.popen("serve", "--listen", f"127.0.0.1:{port}", *args)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        while line.startswith("pglock: "):  # -v says more before it
            line = process.stderr.readline()
        assert line.startswith("pglock serve: listening"), (line, process.poll())
        url = f"http://127.0.0.1:{port}"
        fetched(url + "/static/pglock.css")
        yield url, process, line
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_it_listens_on_the_loopback_says_so_and_stops_on_sigterm(env: Env) -> None:
    assert env.run("run", "--job", "hello", "--", "true").returncode == 0
    with serving(env) as (url, process, line):
        assert "(this host only; read-only)" in line and url in line
        status, page = fetch(url + "/")
        assert status == 200 and "hello" in page
        assert fetch(url + "/api/fleet")[0] == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_the_dsns_password_reaches_no_page_and_no_log(env: Env) -> None:
    dsn = f"{env.dsn} password=sekrit-pw"
    assert env.run("run", "--job", "hello", "--", "true").returncode == 0
    with serving(env, "--dsn", dsn, "-v") as (url, process, line):
        pages = [fetch(url + path)[1] for path in ("/", "/api/fleet", "/job?name=hello",
                                                    "/job?name=nope", "/audit")]
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert all("sekrit" not in text for text in [*pages, line, err])


def test_a_database_it_cannot_reach_is_one_line_at_start(env: Env) -> None:
    done = env.run("serve", "--listen", f"127.0.0.1:{free_port()}", "--dsn",
                   "host=127.0.0.1 port=1 password=sekrit-pw", "--connect-timeout", "1s")
    assert done.returncode == 125
    assert "sekrit" not in done.stderr and one_line(done.stderr).startswith("pglock: ")


@pytest.mark.parametrize(("args", "line"), [
    (["--allow-actions"], "pglock: --allow-actions needs a user for the audit log: --users "
                          "FILE or --auth-header NAME (docs/serve.md)"),
    (["--users", "/nonexistent", "--auth-header", "X-User"],
     "pglock: --users and --auth-header: one source of users at a time"),
    (["--listen", "nowhere"], "pglock: --listen: 'nowhere' is not HOST:PORT or unix:PATH "
                              "(e.g. 127.0.0.1:8434)"),
    (["--users", "/nonexistent"], "pglock: --users: cannot read '/nonexistent': No such file "
                                  "or directory"),
    (["--trusted-proxy", "10.0.0.1"], "pglock: --trusted-proxy goes with --auth-header"),
    (["--listen", "127.0.0.1:\u00b9\u2078\u2074\u2075\u2070"],
     "pglock: --listen: '127.0.0.1:\u00b9\u2078\u2074\u2075\u2070' is not HOST:PORT or "
     "unix:PATH (e.g. 127.0.0.1:8434)"),
    (["--listen", "127.0.0.1:\u0661\u0668\u0664\u0665\u0660"],
     "pglock: --listen: '127.0.0.1:\u0661\u0668\u0664\u0665\u0660' is not HOST:PORT or "
     "unix:PATH (e.g. 127.0.0.1:8434)"),
    (["--listen", "127.0.0.1:" + "9" * 5000], "pglock: --listen: '127.0.0.1:" + "9" * 5000
     + "' is not HOST:PORT or unix:PATH (e.g. 127.0.0.1:8434)"),
    (["--auth-header", "X-Forwarded-User"],
     "pglock: --auth-header needs the proxy to prove itself: --proxy-secret-file FILE (a "
     "header only the proxy sends) or --listen unix:PATH (a socket only the proxy may open); "
     "any process on this host could send the header otherwise (docs/serve.md)"),
    (["--proxy-secret-file", "/nonexistent"],
     "pglock: --proxy-secret-file goes with --auth-header"),
    (["--auth-header", "X-User", "--proxy-secret-file", "/nonexistent"],
     "pglock: --proxy-secret-file: cannot read '/nonexistent': No such file or directory"),
    (["--auth-header", "X-User", "--listen", "unix:"],
     "pglock: --listen: 'unix:' names no path (unix:/run/pglock/serve.sock)"),
])
def test_bad_options_are_refused_at_start(env: Env, args: list[str], line: str) -> None:
    done = env.run("serve", *args)
    assert (done.returncode, one_line(done.stderr)) == (2, line)


@pytest.mark.parametrize(("header", "line"), [
    ("", "pglock: --auth-header: '' is not an HTTP header name"),
    ("X User", "pglock: --auth-header: 'X User' is not an HTTP header name"),
    ("X:U", "pglock: --auth-header: 'X:U' is not an HTTP header name"),
    ("Host", "pglock: --auth-header: 'Host' is not a header a proxy sets for the user alone "
             "(e.g. X-Forwarded-User)"),
    ("authorization", "pglock: --auth-header: 'authorization' is not a header a proxy sets "
                      "for the user alone (e.g. X-Forwarded-User)"),
    ("X-Pglock-Proxy-Secret", "pglock: --auth-header: 'X-Pglock-Proxy-Secret' is not a "
                              "header a proxy sets for the user alone (e.g. X-Forwarded-User)"),
])
def test_an_auth_header_no_request_carries_or_anyone_sets_is_refused(
        env: Env, tmp_path: Path, header: str, line: str) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123\n")
    done = env.run("serve", "--auth-header", header, "--proxy-secret-file", str(secret))
    assert (done.returncode, one_line(done.stderr)) == (2, line)


def test_a_trusted_proxy_and_a_secret_are_checked_at_start(env: Env, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123")
    base = ("serve", "--auth-header", "X-User", "--proxy-secret-file", str(secret))
    done = env.run(*base, "--trusted-proxy", "not-an-ip")
    assert (done.returncode, one_line(done.stderr)) == (
        2, "pglock: --trusted-proxy: 'not-an-ip' is not an IP address")
    secret.write_text("short")
    done = env.run(*base)
    assert (done.returncode, one_line(done.stderr)) == (
        2, f"pglock: --proxy-secret-file: {str(secret)!r} holds no secret of at least 16 "
           "printable ASCII characters (a header value)")
    done = env.run("serve", "--allowed-host", "evil host/")
    assert (done.returncode, one_line(done.stderr)) == (
        2, "pglock: --allowed-host: 'evil host/' is not a host name")


def test_a_port_taken_is_one_line(env: Env) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = env.run("serve", "--listen", f"127.0.0.1:{port}")
    assert done.returncode == 2
    assert one_line(done.stderr) == (f"pglock: --listen: cannot listen on 127.0.0.1:{port}: "
                                     "Address already in use")


def test_hash_password_prints_a_users_line(env: Env) -> None:
    from pglock.serve.auth import verify

    with env.popen("serve", "--hash-password", "alice", stdin=subprocess.PIPE) as process:
        out, _ = process.communicate("pw\n", timeout=60)
    assert process.returncode == 0 and out.startswith("alice:scrypt$")
    assert verify("pw", out.strip().split(":", 1)[1])


@pytest.mark.parametrize(("stdin", "stdout", "line", "code"), [
    ("closed", None, "pglock: --hash-password: no password on standard input (it is closed)",
     2),
    (b"p\xffw\n", None, "pglock: --hash-password: the password is not valid UTF-8", 2),
    (b"pw\n", "/dev/full", "pglock: cannot write to standard output: No space left on "
                           "device", 125),
])
def test_hash_password_refuses_in_one_line(env: Env, stdin: object, stdout: str | None,
                                           line: str, code: int) -> None:
    import os

    command = [sys.executable, "-m", "pglock", "serve", "--hash-password", "alice"]
    with open(stdout or os.devnull, "wb") as out:
        if stdin == "closed":
            # <&- : no standard input at all (Python's sys.stdin is None).
            done = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", *command], env=env.env,
                                  stdout=out, stderr=subprocess.PIPE, timeout=60, check=False)
        else:
            done = subprocess.run(command, env=env.env, input=stdin, stdout=out,
                                  stderr=subprocess.PIPE, timeout=60, check=False)
    assert (done.returncode, one_line(done.stderr.decode())) == (code, line)


def _imported(*argv: str, env: Env) -> set[str]:
    """Top-level and pglock modules a pglock process imported (python -X importtime)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pglock", *argv],
                          env=env.env, capture_output=True, text=True, timeout=60, check=False)
    names = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")}
    return {name for name in names if name.split(".")[0] in STACK[:-1]
            or name.startswith("pglock.serve")}


def test_run_and_help_import_nothing_of_the_web_stack(env: Env) -> None:
    assert _imported("run", "--job", "lean", "--", "true", env=env) == set()
    assert _imported("status", env=env) == set()
    # --help registers serve's command (its module), not its stack.
    assert _imported("--help", env=env) <= {"pglock.serve", "pglock.serve.command"}
