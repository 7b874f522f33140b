"""The dashboard's pure parts: passwords, who a request comes from, the listen address,
the charts' escaping, and where its web stack may be imported."""

from __future__ import annotations

import ast
import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pglock.errors import UsageError
from pglock.reports.dashboard import Bar, Day, Timeline
from pglock.reports.history import RunRow
from pglock.serve import charts
from pglock.serve.auth import Auth, hash_password, verify
from pglock.serve.command import _hosts, _named, listen_address, loopback
from pglock.serve.web import host_allowed

PACKAGE = Path(__file__).resolve().parents[3] / "pglock"
STACK = ("starlette", "uvicorn", "jinja2", "markupsafe", "httpx", "httpx2", "anyio")
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
HOSTILE = "<script>alert(1)</script>\u202e"


def test_the_web_stack_is_imported_in_the_serve_wing_only() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.is_relative_to(PACKAGE / "serve"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in STACK]
    assert found == []


def test_a_password_is_verified_against_its_hash_only() -> None:
    stored = hash_password("s3cret")
    assert stored.startswith("scrypt$32768$8$1$") and "s3cret" not in stored
    assert verify("s3cret", stored) and not verify("s3cret!", stored)
    assert hash_password("s3cret") != stored  # salted
    assert not verify("s3cret", "scrypt$bad") and not verify("x", "md5$1$2$3$4$5")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_names_the_user_of_a_right_password_only() -> None:
    auth = Auth(users={"alice": hash_password("pw")})
    assert auth.basic(_basic("alice", "pw"), "1.2.3.4") == "alice"
    assert auth.remembered(_basic("alice", "pw")) == "alice"
    for header in (_basic("alice", "no"), _basic("bob", "pw"), "Basic !!!", "Bearer x", None):
        assert auth.basic(header, "127.0.0.1") is None
        assert auth.remembered(header) is None


def test_a_header_is_believed_from_the_trusted_proxies_only() -> None:
    auth = Auth(header="X-User")
    assert auth.from_header({"x-user": "bob"}, "127.0.0.1") == ("bob", "")
    assert auth.from_header({"x-user": "bob"}, "10.0.0.5")[0] is None
    assert auth.from_header({"x-user": " "}, "::1")[0] is None
    assert auth.from_header({"x-user": "bo\nb"}, "::1")[0] is None
    assert Auth(header="X-User", unix=True).from_header({"x-user": "bob"}, None) == ("bob", "")
    assert not Auth().configured and auth.configured


def test_a_proxy_header_that_came_twice_is_believed_never() -> None:
    """A proxy that appends its X-Forwarded-User to the client's made the first one win:
    the client's own (issue 46, D20). Twice is refused, whatever the values."""
    from starlette.datastructures import Headers

    def raw(*pairs: tuple[str, str]) -> Headers:
        return Headers(raw=[(k.encode(), v.encode()) for k, v in pairs])

    auth = Auth(header="X-User", proxy_secret=b"s" * 16)
    secret = ("x-pglock-proxy-secret", "s" * 16)
    assert auth.from_header(raw(("x-user", "alice"), secret), "127.0.0.1") == ("alice", "")
    for pairs in ([("x-user", "mallory"), ("x-user", "alice"), secret],
                  [("x-user", "alice"), ("x-user", "alice"), secret],
                  [("x-user", "alice"), ("x-pglock-proxy-secret", "wrong"), secret],
                  [("x-user", "alice"), secret, ("x-pglock-proxy-secret", "wrong")]):
        user, why = auth.from_header(raw(*pairs), "127.0.0.1")
        assert user is None
        assert why.endswith("header came more than once: the proxy must set it, replacing "
                            "any the client sent"), why


@pytest.mark.parametrize(("given", "bare"), [("example.com:8080", "example.com"),
                                             ("[::1]:8434", "::1"),
                                             ("10.0.0.1:80", "10.0.0.1")])
def test_an_allowed_host_with_a_port_is_refused(given: str, bare: str) -> None:
    """The request's port is set aside before the comparison: a name with one never
    matched, and every request through it got 421 (issue 46, D19)."""
    with pytest.raises(UsageError) as raised:
        _named([given])
    assert str(raised.value) == (f"--allowed-host: {given!r} names a port; give the host "
                                 f"alone ({bare}): the port a request names is not compared")


def test_allowed_hosts_without_a_port_are_taken() -> None:
    hosts = _hosts(_named(["Example.COM", "[::1]", "fe80::1", "10.0.0.1"]), "0.0.0.0")
    assert hosts == frozenset({"example.com", "::1", "fe80::1", "10.0.0.1"})
    assert host_allowed("example.com:8080", hosts) and host_allowed("[fe80::1]:1", hosts)


def test_a_csrf_token_is_the_users_and_the_servers() -> None:
    one, other = Auth(), Auth()
    assert one.token_ok("alice", one.token("alice"))
    assert not one.token_ok("bob", one.token("alice"))
    assert not other.token_ok("alice", one.token("alice"))
    assert not one.token_ok("alice", None)


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:8434", ("127.0.0.1", 8434)), ("[::1]:80", ("::1", 80)),
    ("0.0.0.0:9000", ("0.0.0.0", 9000)), ("localhost:1", ("localhost", 1)),
])
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert listen_address(text) == expected


@pytest.mark.parametrize("text", ["8434", ":8434", "host:", "host:x", "host:70000", "h:0",
                                  "h:\u00b9\u2078", "h:\u0661\u0668", "h:" + "9" * 5000,
                                  "h:\uff18\uff14"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(UsageError, match=r"--listen: .* is not HOST:PORT"):
        listen_address(text)


def test_the_proxy_secrets_header_is_named_alike_in_help_and_check() -> None:
    from pglock.serve import auth, command

    assert command.PROXY_SECRET_HEADER == auth.PROXY_SECRET_HEADER


def test_loopback() -> None:
    assert loopback("127.0.0.1") and loopback("::1") and loopback("localhost")
    assert not loopback("0.0.0.0") and not loopback("192.0.2.1") and not loopback("example")


def _run(i: int, outcome: str, attempt: int = 1, job: str = HOSTILE) -> RunRow:
    start = NOW - timedelta(hours=i)
    return RunRow(i, job, start, start + timedelta(seconds=10 + i), HOSTILE, 1, "lease",
                  outcome, 0, None, 10.0 + i, 1, None, attempt=attempt)


def test_the_duration_chart_escapes_and_marks_retries() -> None:
    runs = [_run(1, "succeeded"), _run(2, "failed", attempt=2), _run(3, "<evil>")]
    svg = str(charts.durations(runs, NOW, 11.0, 12.9))
    assert "<script>" not in svg and "\u202e" not in svg and "<evil>" not in svg
    assert svg.count("<rect class=\"run") == 3 and 'class="run o-other"' in svg
    assert svg.count('<circle class="retry"') == 1
    assert '<line class="p50"' in svg and '<line class="p95"' in svg
    assert "no runs yet" in str(charts.durations([], NOW, None, None))


def test_the_timeline_and_calendar_escape_names() -> None:
    bar = Bar(1, HOSTILE, NOW - timedelta(minutes=30), None, HOSTILE, "running", None, None,
              None, None)
    found = Timeline(NOW - timedelta(hours=1), NOW, NOW, [HOSTILE], [bar], False)
    svg = str(charts.timeline(found))
    assert "<script>" not in svg and "\u202e" not in svg and "&lt;script&gt;" in svg
    assert 'href="/job?name=%3Cscript%3E' in svg
    days = [Day(NOW, {"succeeded": 2}), Day(NOW, {"failed": 1}), Day(NOW, {}, dead=1),
            Day(NOW, {}, missed=2), Day(NOW, {})]
    assert [day.look for day in days] == ["succeeded", "failed", "dead", "missed", "none"]
    assert str(charts.calendar(days, HOSTILE)).count('<rect class="day') == 5
