"""What hooks and pings came to is told safely (issue 21, items 4 and 5, N6, N14): a ping
URL's text (its path is the secret) never reaches history, events or -v; a hook's output
is data there."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from conftest import Env, one_line
from endpoints import Quiet, serving

SECRET = "s3cret-ping-key"


@pytest.fixture
def redirecting() -> Iterator[str]:
    """A ping endpoint that redirects every ping to ftp://, with the secret in the path."""

    class Handler(Quiet):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"ftp://127.0.0.1:1{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serving(Handler) as url:
        yield f"{url}/ping/{SECRET}"


def test_a_redirect_to_another_scheme_is_refused_and_the_url_never_shown(
        env: Env, redirecting: str) -> None:
    events = env.tmp / "events"
    result = env.run("run", "--job", "pinged", "-v", "--event-log", str(events),
                     "--ping-url", redirecting, "--", "true")
    assert result.returncode == 0, result
    history = env.run("history", "--job", "pinged", "--json")
    [row] = json.loads(history.stdout)["runs"]
    assert "ping / HTTP 302 refused: a redirect to another scheme" in row["error"], row
    pings = [json.loads(line) for line in events.read_text().splitlines()
             if json.loads(line)["event"] == "ping"]
    assert [p["url"] for p in pings] == ["http://127.0.0.1"] * 2
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


def test_a_hooks_output_is_escaped_in_v_and_the_history_note(env: Env) -> None:
    hook = "printf 'a\\033[2Jb\\rc\\nnext'; exit 3"
    result = env.run("run", "--job", "hooked", "-v", "--on-failure", hook, "--", "false")
    assert result.returncode == 1, result
    said = "on-failure hook exited 3: a^[[2Jb^Mc | next"
    assert said in result.stderr and "\x1b" not in result.stderr, result.stderr
    [row] = env.runs("hooked")
    assert said in row["error"], row
