"""Generated input over the dashboard's routes (Hypothesis), as raw as HTTP carries it:
query strings of any bytes, forms, headers. Whatever comes: never a 5xx but a database
error, never a byte of the input unescaped in a page, never an action without a user
and the user's CSRF token."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote_from_bytes

import anyio
import pytest
from conftest import Env
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from unit import strategies

from pglock.serve.actions import ACTIONS
from pglock.serve.auth import Attempts, Auth, hash_password
from pglock.serve.pool import Pool
from pglock.serve.site import Site
from pglock.serve.web import build
from serve.conftest import POOLS
from serve.fleet import SCRIPT

ROUTES = ["/", "/job", "/run", "/timeline", "/calendar", "/audit", "/hosts"]
KEYS = ["name", "job", "runs", "id", "range", "end", "days", "before", "all", "csrf"]
# What must never come back as markup: it would be an element or break out of an
# attribute. (`<x-evil` and `"x-evil` never occur in a page of its own.)
MARKERS = ["<x-evil>", '"x-evil="1', "'x-evil", "\x1b[2J", "\x00", "\u202e"]
VALUES = st.one_of(
    st.sampled_from(["nightly-backup", "stale-job", SCRIPT, "bulk-001", "0", "1", "-1", "7",
                     "1d", "7d", "30", "366", "9" * 30, "2026-01-01T00:00:00+00:00", ""]),
    st.sampled_from(MARKERS), strategies.hostile_text,
).map(lambda text: text.encode("utf-8", "surrogateescape")) | st.binary(max_size=12)
QUERY = st.lists(st.tuples(st.sampled_from(KEYS).map(str.encode) | st.binary(max_size=4),
                           VALUES), max_size=4)
HEADER_VALUE = st.binary(max_size=20).map(lambda b: bytes(c for c in b if c not in b"\r\n"))
HEADERS = st.lists(st.tuples(st.sampled_from([b"x-forwarded-user", b"origin", b"cookie",
                                              b"accept", b"sec-fetch-site", b"referer",
                                              b"authorization", b"content-type"]),
                             HEADER_VALUE), max_size=3)
PROPERTIES = settings(parent=strategies.PROCESS, max_examples=150)
USERS = {"alice": hash_password("pw")}


def call(app: Any, method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]],
         body: bytes = b"") -> tuple[int, dict[bytes, bytes], bytes]:
    """One request through the application, as the server hands it on (ASGI)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": query, "root_path": "",
             "headers": [(b"host", b"127.0.0.1:8434"), *headers],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8434)}
    sent: list[dict[str, Any]] = []
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop() if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(app, scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return (start["status"], dict(start["headers"]),
            b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


def encoded(pairs: list[tuple[bytes, bytes]]) -> bytes:
    return "&".join(f"{quote_from_bytes(k)}={quote_from_bytes(v)}" for k, v in pairs).encode()


def sound(status: int, body: bytes, json_route: bool) -> None:
    """A 5xx only for a database error; no raw control byte; in a page, each hostile
    marker escaped."""
    assert status < 500 or (status == 503 and b"database error" in body), (status, body[:300])
    text = body.decode("utf-8")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    if json_route:  # data as data: valid JSON (its strings escaped by the encoder)
        json.loads(body)
        return
    for marker in MARKERS:
        assert marker not in text, marker


@pytest.fixture(scope="module")
def apps(fleet: Env) -> dict[str, Any]:
    def site(auth: Auth, actions: bool) -> Any:
        pool = Pool(fleet.dsn, timeout=3)
        POOLS.append(pool)
        return build(Site(pool, fleet.schema, "test-db", auth, actions,
                          frozenset({"127.0.0.1"})))

    attempts = Attempts(per_client=10**6, overall=10**6)
    return {"anonymous": site(Auth(), False),
            "users": site(Auth(users=USERS, attempts=attempts), True)}


@pytest.mark.slow
@PROPERTIES
@given(route=st.sampled_from(ROUTES), api=st.booleans(), query=QUERY, headers=HEADERS)
def test_any_query_and_headers_get_a_sound_answer(
        apps: dict[str, Any], route: str, api: bool, query: list[tuple[bytes, bytes]],
        headers: list[tuple[bytes, bytes]]) -> None:
    path = ("/api" + (route if route != "/" else "/fleet")) if api else route
    status, _, body = call(apps["anonymous"], "GET", path, encoded(query), headers)
    sound(status, body, api)


def _audit_rows(fleet: Env) -> int:
    return int(fleet.query("SELECT count(*) FROM {schema}.audit")[0][0])


GOOD = {"action": "pause", "job": "bulk-020", "reason": "why"}
FORM = b"application/x-www-form-urlencoded"


@pytest.mark.slow
@PROPERTIES
@example(login="right", csrf="right", form=GOOD, headers=[], kind=FORM)
# Weighted to the right login, token and form: the property is about the few that act.
@given(login=st.sampled_from(["right", "right", "right", "none", "wrong", "garbage"]),
       csrf=st.sampled_from(["right", "right", "right", "none", "other", "junk"]),
       form=st.fixed_dictionaries({
           "action": st.sampled_from(ACTIONS) | st.sampled_from(ACTIONS) | VALUES.map(
               lambda b: b.decode("latin-1")),
           "job": st.sampled_from(["bulk-020", "bulk-021", "stale-job", SCRIPT]) | VALUES.map(
               lambda b: b.decode("latin-1")),
           "reason": st.sampled_from(["why", "why", "", "a\x00b"]) | strategies.hostile_text}),
       headers=st.just([]) | HEADERS,
       kind=st.sampled_from([b"application/x-www-form-urlencoded"] * 3
                            + [b"text/plain", b"multipart/form-data"]))
def test_no_action_without_a_user_and_the_users_token(
        fleet: Env, apps: dict[str, Any], login: str, csrf: str, form: dict[str, str],
        headers: list[tuple[bytes, bytes]], kind: bytes) -> None:
    import base64

    app = apps["users"]
    auth = {"none": None, "right": b"alice:pw", "wrong": b"alice:nope",
            "garbage": b"\xff:\x00"}[login]
    sent = [(k, v) for k, v in headers if k not in (b"authorization", b"content-type")]
    if auth is not None:
        sent.append((b"authorization", b"Basic " + base64.b64encode(auth)))
    sent.append((b"content-type", kind))
    token = {"none": None, "right": app.state.site.auth.token("alice"),
             "other": app.state.site.auth.token("mallory"), "junk": "zz"}[csrf]
    fields = {**form, **({"csrf": token} if token else {})}
    body = "&".join(f"{quote_from_bytes(k.encode())}="
                    f"{quote_from_bytes(v.encode('utf-8', 'surrogateescape'))}"
                    for k, v in fields.items()).encode()
    before = _audit_rows(fleet)
    status, _, page = call(app, "POST", "/action", b"", sent, body)
    sound(status, page, False)
    acted = _audit_rows(fleet) > before
    event(f"answered {status}" + (", acted" if acted else ""))
    if acted or status == 200:
        assert login == "right" and csrf == "right", (status, page[:300])
    if (login, csrf, form, headers, kind) == ("right", "right", GOOD, [], FORM):
        assert acted and status == 200, (status, page[:300])  # the property is not vacuous
