"""A ping URL's text (its path is the secret) never reaches history, events or -v (issue
21, item 4, N6, N14)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import Env, one_line

SECRET = "s3cret-ping-key"


@pytest.fixture
def redirecting() -> Iterator[str]:
    """A ping endpoint that redirects every ping to ftp://, with the secret in the path."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"ftp://127.0.0.1:1{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/ping/{SECRET}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_to_another_scheme_is_refused_and_the_url_never_shown(
        env: Env, redirecting: str) -> None:
    events = env.tmp / "events"
    result = env.run("run", "--job", "pinged", "-v", "--event-log", str(events),
                     "--ping-url", redirecting, "--", "true")
    assert result.returncode == 0, result
    history = env.run("history", "--job", "pinged", "--json")
    [row] = json.loads(history.stdout)["runs"]
    assert "ping / HTTP 302 refused: a redirect to another scheme" in row["error"], row
    for text in (result.stderr, history.stdout, events.read_text(),
                 env.run("history", "--job", "pinged").stdout):
        assert SECRET not in text


@pytest.mark.parametrize("url", ["http://[::1/x", f"http://127.0.0.1:1/{SECRET} "])
def test_a_ping_url_that_is_not_one_is_refused_before_the_lock(env: Env, url: str) -> None:
    result = env.run("run", "--job", "bad-url", "--ping-url", url, "--", "true")
    assert (result.returncode, result.stdout) == (2, "")
    line = one_line(result.stderr)
    assert line.startswith("pglock: --ping-url: ") and SECRET not in line
    assert env.runs("bad-url") == []
