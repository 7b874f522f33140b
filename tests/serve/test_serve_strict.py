"""The dashboard as strict as a server on a network, in process: what a hostile client
sends (a wrong password again and again, a header of its own, another site's Host, a
NUL) is refused in one line, and what the command line would say, the page says."""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass

import pytest
from conftest import Env
from starlette.testclient import TestClient

from pglock.serve.auth import Attempts, Auth, hash_password
from pglock.serve.pool import Pool
from pglock.serve.site import Site
from pglock.serve.web import build, host_allowed
from serve.conftest import POOLS, client
from serve.test_serve_actions import PASSWORD, audit, basic, post, token

HEADER = "X-Forwarded-User"
SECRET = b"s3cret-of-the-proxy-0123"


def said(response: object) -> str:
    import html

    found = re.search(r'class="error"[^>]*>([^<]*)<', response.text)  # type: ignore[attr-defined]
    return html.unescape(found.group(1)) if found else response.text  # type: ignore[attr-defined]


# ---------------------------------------------------------------- M9, M10: one check, one message


def test_a_nul_in_the_reason_is_refused_as_the_command_refuses_it(fleet: Env) -> None:
    alice = Auth(users={"alice": hash_password(PASSWORD)})
    web = client(fleet, alice, actions=True)
    csrf = token(web, "bulk-010", basic())
    assert post(web, basic(), action="pause", job="bulk-010", reason="a\x00b", csrf=csrf) == (
        400, "reason: contains a NUL character")
    assert audit(fleet, "bulk-010") == []


def test_clear_of_a_stale_lock_says_what_the_command_says(fleet: Env) -> None:
    alice = Auth(users={"alice": hash_password(PASSWORD)})
    web = client(fleet, alice, actions=True)
    csrf = token(web, "stale-job", basic())
    status, line = post(web, basic(), action="clear", job="stale-job", reason="x", csrf=csrf)
    done = fleet.run("clear", "--job", "stale-job", "-y", "--reason", "x")
    assert done.returncode == 0, done
    ago = re.compile(r"expired \S+ ago")  # a second apart
    assert status == 409
    assert ago.sub("expired T ago", line) == ago.sub("expired T ago", done.stdout.strip())
    assert line.startswith("nobody holds job 'stale-job': its lock expired ")


# ---------------------------------------------------------------- messages, 404s, redirects


@pytest.mark.parametrize(("path", "status", "line"), [
    ("/job?name=", 400, "name: the job name is empty"),
    ("/job?name=a%01b", 400, "name: the job name 'a\\x01b' contains a control character"),
    ("/run", 400, "name the run: /run?id=ID"),
    ("/timeline?job=no-such-job", 404, "no job named 'no-such-job' has run here"),
    ("/calendar?job=", 200, ""),
])
def test_web_messages_name_no_option_and_no_phantom_run(
        web: TestClient, path: str, status: int, line: str) -> None:
    response = web.get(path)
    assert response.status_code == status
    assert line in said(response) and "--" not in said(response)[:2]


def test_an_unknown_job_is_a_404_on_every_page(web: TestClient) -> None:
    for path in ("/job?name=nope", "/calendar?job=nope", "/timeline?job=nope",
                 "/api/timeline?job=nope&job=nightly-backup"):
        assert web.get(path).status_code == 404, path
    assert web.get("/timeline?job=nightly-backup").status_code == 200


def test_no_redirect_takes_its_host_from_the_request(web: TestClient) -> None:
    for path in ("/job/", "/static", "/audit/"):
        response = web.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
        assert response.status_code == 404 and "location" not in response.headers, path


# ---------------------------------------------------------------- allowed hosts (DNS rebinding)


def test_a_host_not_allowed_is_refused_before_anything(fleet: Env) -> None:
    pool = Pool(fleet.dsn, timeout=3)
    POOLS.append(pool)
    trusted = Auth(header=HEADER, proxies=("testclient",), proxy_secret=SECRET)
    site = Site(pool, fleet.schema, "test-db", trusted, True,
                frozenset({"127.0.0.1", "localhost", "::1", "testserver"}))
    web = TestClient(build(site))
    user = {HEADER: "bob", "X-Pglock-Proxy-Secret": SECRET.decode()}
    csrf = token(web, "bulk-011", user)
    rebound = {**user, "Host": "evil.example:8434", "Origin": "http://evil.example:8434"}
    response = web.post("/action", headers=rebound,
                        data={"action": "pause", "job": "bulk-011", "reason": "r", "csrf": csrf})
    assert response.status_code == 421 and "Host" in response.text
    assert response.headers["x-frame-options"] == "DENY"
    assert web.get("/static/pglock.css", headers={"Host": "evil.example"}).status_code == 421
    assert audit(fleet, "bulk-011") == []
    for host in ("127.0.0.1:8434", "localhost:8434", "[::1]:8434", "LOCALHOST"):
        assert web.get("/static/pglock.css", headers={"Host": host}).status_code == 200, host


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.1:8434", True), ("[::1]:1", True), ("localhost", True), ("", False),
    ("evil.example", False), ("127.0.0.1.evil.example:8434", False), ("[::1", False),
    ("::1", True)])
def test_host_allowed_reads_a_host_header(host: str, allowed: bool) -> None:
    assert host_allowed(host, frozenset({"127.0.0.1", "localhost", "::1"})) is allowed
    assert host_allowed(host, None)


# ---------------------------------------------------------------- --auth-header


def test_a_proxy_proves_itself_with_its_secret(fleet: Env) -> None:
    web = client(fleet, Auth(header=HEADER, proxies=("testclient",), proxy_secret=SECRET))
    response = web.get("/", headers={HEADER: "carol"})
    assert response.status_code == 403
    assert said(response) == ("no user: the request does not carry the proxy's secret "
                              "(X-Pglock-Proxy-Secret)")
    wrong = web.get("/", headers={HEADER: "carol", "X-Pglock-Proxy-Secret": "x" * 24})
    assert wrong.status_code == 403
    right = web.get("/", headers={HEADER: "carol", "X-Pglock-Proxy-Secret": SECRET.decode()})
    assert right.status_code == 200 and "carol" in right.text


def test_a_utf8_user_from_the_proxy_is_read_as_utf8(fleet: Env) -> None:
    web = client(fleet, Auth(header=HEADER, proxies=("testclient",), proxy_secret=SECRET),
                 actions=True)
    user = {HEADER: "José Ñandú".encode(), "X-Pglock-Proxy-Secret": SECRET}
    page = web.get("/job?name=bulk-012", headers=user)  # type: ignore[arg-type]
    assert page.status_code == 200 and "José Ñandú" in page.text and "Ã" not in page.text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)  # type: ignore[union-attr]
    assert post(web, user, action="pause", job="bulk-012", reason="r",  # type: ignore[arg-type]
                csrf=csrf)[0] == 200
    assert audit(fleet, "bulk-012")[0][1] == f"José Ñandú@{socket.gethostname()} (pglock serve)"


@pytest.mark.parametrize(("value", "why"), [
    (b"", "the proxy named no user in X-Forwarded-User"),
    (b"a" * 201, "the user in X-Forwarded-User is longer than 200 characters or holds a "
                 "control character"),
    (b"a\tb", "the user in X-Forwarded-User is longer than 200 characters or holds a "
              "control character"),
])
def test_a_refused_user_is_not_blamed_on_the_proxy(fleet: Env, value: bytes, why: str) -> None:
    web = client(fleet, Auth(header=HEADER, proxies=("testclient",), proxy_secret=SECRET))
    response = web.get("/", headers={HEADER: value, "X-Pglock-Proxy-Secret": SECRET})  # type: ignore[dict-item]
    assert (response.status_code, said(response)) == (403, f"no user: {why}")


def test_a_user_in_bytes_that_are_not_utf8_is_refused_as_such() -> None:
    auth = Auth(header=HEADER, proxies=("10.0.0.1",), proxy_secret=SECRET)
    # A header's bytes, as the HTTP layer hands them on: one character per byte.
    headers = {"x-forwarded-user": "\xff\xfe", "x-pglock-proxy-secret": SECRET.decode()}
    assert auth.from_header(headers, "10.0.0.1") == (
        None, "the user in X-Forwarded-User is not UTF-8")
    assert auth.from_header({**headers, "x-forwarded-user": "Ã©"}, "10.0.0.1") == ("é", "")


# ---------------------------------------------------------------- M2: passwords


@dataclass(frozen=True)
class _Watched(Auth):
    """Auth that notes whether its password check ran on an event loop's thread."""

    on_loop: list[bool] | None = None

    def basic(self, authorization: str | None, client: str) -> str | None:
        try:
            asyncio.get_running_loop()
            running = True
        except RuntimeError:
            running = False
        assert self.on_loop is not None
        self.on_loop.append(running)
        return super().basic(authorization, client)


def test_a_password_is_checked_off_the_event_loop(fleet: Env) -> None:
    seen: list[bool] = []
    web = client(fleet, _Watched(users={"alice": hash_password(PASSWORD)}, on_loop=seen))
    assert web.get("/static/pglock.css").status_code == 200
    assert web.get("/", headers=basic()).status_code == 200
    assert web.get("/", headers=basic(password="wrong")).status_code == 401
    assert seen == [False, False]
    # A login checked a moment ago is not checked again (scrypt is the cost).
    assert web.get("/api/fleet", headers=basic()).status_code == 200
    assert seen == [False, False]


def test_wrong_passwords_are_bounded_per_client(fleet: Env) -> None:
    seen: list[bool] = []
    attempts = Attempts(per_client=3, overall=100, window=3600)
    web = client(fleet, _Watched(users={"alice": hash_password(PASSWORD)}, on_loop=seen,
                                 attempts=attempts))
    for _ in range(3):
        assert web.get("/", headers=basic(password="wrong")).status_code == 401
    for headers in (basic(password="wrong"), basic(name="nobody"), basic()):
        response = web.get("/", headers=headers)
        assert response.status_code == 429 and response.headers["retry-after"] == "60"
    assert len(seen) == 3  # the refused ones cost no check
    assert web.get("/static/pglock.css").status_code == 200


def test_wrong_passwords_are_bounded_overall() -> None:
    attempts = Attempts(per_client=5, overall=8, window=3600)
    for i in range(8):
        assert not attempts.refused(f"10.0.0.{i}")
        attempts.failed(f"10.0.0.{i}")
    assert attempts.refused("10.0.0.99") and attempts.refused("10.0.0.1")
    assert not Attempts(window=0.0).refused("x")
