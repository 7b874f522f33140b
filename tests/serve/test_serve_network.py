"""`pglock serve` against raw HTTP, as a hostile client on the network talks to it: a body
refused from its headers (and never read past the form's limit), a client that breaks
off, a Unix socket for the proxy."""

from __future__ import annotations

import base64
import os
import signal
import socket
import stat
import subprocess
from pathlib import Path

from conftest import Env

from pglock.serve.actions import MOST_FORM
from pglock.serve.auth import hash_password
from serve.test_serve_command import serving

AUTH = "Basic " + base64.b64encode(b"alice:pw").decode()


def _users(tmp_path: Path) -> str:
    path = tmp_path / "users"
    path.write_text(f"alice:{hash_password('pw')}\n")
    return str(path)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _answer(conn: socket.socket) -> bytes:
    """What the server says (up to the end of its headers and a little of its body)."""
    conn.settimeout(30)
    got = b""
    while b"\r\n\r\n" not in got:
        piece = conn.recv(65536)
        if not piece:
            break
        got += piece
    return got


def _post_head(port: int, length: str | None, extra: str = "") -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (f"POST /action HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n" + extra
            + (f"Content-Length: {length}\r\n" if length is not None
               else "Transfer-Encoding: chunked\r\n") + "\r\n")
    conn.sendall(head.encode())
    return conn


def test_a_body_is_refused_from_its_headers(env: Env, tmp_path: Path) -> None:
    """400 MiB announced, none sent: the answer comes at once, read-only or too large."""
    with serving(env) as (url, _, _):
        with _post_head(_port(url), str(400 * 1024**2)) as conn:
            answer = _answer(conn)
        assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
    with serving(env, "--users", _users(tmp_path), "--allow-actions") as (url, _, _):
        with _post_head(_port(url), str(MOST_FORM + 1), f"Authorization: {AUTH}\r\n") as conn:
            answer = _answer(conn)
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


def test_a_chunked_body_is_read_no_further_than_the_limit(env: Env, tmp_path: Path) -> None:
    with serving(env, "--users", _users(tmp_path), "--allow-actions") as (url, _, _):
        conn = _post_head(_port(url), None, f"Authorization: {AUTH}\r\n")
        chunk = b"%x\r\n%s\r\n" % (4096, b"a" * 4096)
        sent, answer = 0, b""
        conn.settimeout(0.2)
        with conn:
            while sent < 64 * MOST_FORM:  # an endless body, as far as the server knows
                try:
                    conn.sendall(chunk)
                except OSError:
                    break
                sent += 4096
                try:
                    answer = conn.recv(65536)
                except TimeoutError:
                    continue
                break
            if not answer:
                answer = _answer(conn)
        assert answer.startswith(b"HTTP/1.1 413 "), (sent, answer[:200])
        assert sent <= 8 * MOST_FORM


def test_a_client_that_breaks_off_its_body_is_no_internal_error(env: Env,
                                                                   tmp_path: Path) -> None:
    with serving(env, "--users", _users(tmp_path), "--allow-actions", "-v") as (
            url, process, _):
        for _ in range(3):
            conn = _post_head(_port(url), "100", f"Authorization: {AUTH}\r\n")
            conn.sendall(b"csrf=abcd")
            conn.close()
        conn = _post_head(_port(url), None, f"Authorization: {AUTH}\r\n")
        conn.sendall(b"zz\r\nnot a chunk")
        conn.close()
        assert subprocess.run(["curl", "-sf", url + "/static/pglock.css", "-o", os.devnull],
                              check=False, timeout=30).returncode == 0
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert "internal error" not in err and "ClientDisconnect" not in err, err


def test_a_unix_socket_is_the_proxys_proof(env: Env, tmp_path: Path) -> None:
    path = tmp_path / "serve.sock"
    assert env.run("run", "--job", "hello", "--", "true").returncode == 0
    process = env.popen("serve", "--listen", f"unix:{path}", "--auth-header",
                        "X-Forwarded-User", "--allow-actions")
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith(f"pglock serve: listening on unix:{path} "), line
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(path))
            conn.sendall(b"GET / HTTP/1.1\r\nHost: pglock.example\r\n"
                         b"X-Forwarded-User: carol\r\nConnection: close\r\n\r\n")
            conn.settimeout(30)
            page = b""
            while piece := conn.recv(65536):
                page += piece
        assert page.startswith(b"HTTP/1.1 200 ") and b"carol" in page and b"hello" in page
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0 and not path.exists()
