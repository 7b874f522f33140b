"""Actions from the dashboard: refused without --allow-actions, without a user, without
the CSRF token, without a reason, and for a database role without the privilege; done
and audited under the web user's name with all of them."""

from __future__ import annotations

import base64
import html
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import Env
from starlette.testclient import TestClient

from pglock.serve.auth import Auth, hash_password
from serve.conftest import client

PASSWORD = "correct horse"


@pytest.fixture(scope="module")
def alice() -> Auth:
    return Auth(users={"alice": hash_password(PASSWORD)})


def basic(name: str = "alice", password: str = PASSWORD) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


def token(web: TestClient, job: str, headers: dict[str, str]) -> str:
    page = web.get("/job", params={"name": job}, headers=headers).text
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


def post(web: TestClient, headers: dict[str, str], **form: str) -> tuple[int, str]:
    response = web.post("/action", data=form, headers=headers)
    said = re.search(r'class="(?:done|error)"[^>]*>([^<]*)<', response.text)
    return response.status_code, html.unescape(said.group(1)) if said else response.text


def audit(env: Env, job: str) -> list[tuple[str, str, str]]:
    return [tuple(row) for row in env.query(
        "SELECT action, by, reason FROM {schema}.audit WHERE job = %s ORDER BY id", (job,))]


WEB_USER = f"alice@{socket.gethostname()} (pglock serve)"


def test_read_only_by_default_offers_and_takes_no_action(fleet: Env, alice: Auth) -> None:
    web = client(fleet, alice)
    page = web.get("/job?name=tidy-tmp", headers=basic()).text
    assert "<form" not in page and "read-only" in page
    status, said = post(web, basic(), action="pause", job="tidy-tmp", reason="r",
                        csrf=alice.token("alice"))
    assert (status, said) == (403, "actions are off: this dashboard is read-only (pglock "
                                   "serve --allow-actions turns them on)")
    assert audit(fleet, "tidy-tmp") == []


def test_with_auth_every_page_asks_for_a_user(fleet: Env, alice: Auth) -> None:
    web = client(fleet, alice, actions=True)
    for headers in ({}, basic(password="wrong"), basic(name="mallory")):
        response = web.get("/", headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith('Basic realm="pglock"')
    assert web.get("/api/fleet").status_code == 401
    status, _ = post(web, {}, action="pause", job="tidy-tmp", reason="r",
                     csrf=alice.token("alice"))
    assert status == 401 and audit(fleet, "tidy-tmp") == []


@pytest.mark.parametrize(("form", "status", "line"), [
    ({"csrf": ""}, 403, "refused: the form's CSRF token is missing or stale (reload the page)"),
    ({"csrf": "0" * 64}, 403, "refused: the form's CSRF token is missing or stale (reload "
                              "the page)"),
    ({"reason": "   "}, 400, "a reason is required: say why, for the audit log"),
    ({"reason": "x" * 501}, 400, "the reason is longer than 500 characters"),
    ({"action": "run"}, 400, "action: one of pause, resume, stop, replay, clear"),
    ({"job": "a\x01b"}, 400, "job: the job name 'a\\x01b' contains a control character"),
])
def test_an_action_is_refused_without_each_of_its_conditions(
        fleet: Env, alice: Auth, form: dict[str, str], status: int, line: str) -> None:
    web = client(fleet, alice, actions=True)
    good = {"action": "pause", "job": "tidy-tmp", "reason": "why",
            "csrf": token(web, "tidy-tmp", basic())}
    assert post(web, basic(), **{**good, **form}) == (status, line)
    assert audit(fleet, "tidy-tmp") == []


def test_a_post_from_another_site_is_refused(fleet: Env, alice: Auth) -> None:
    web = client(fleet, alice, actions=True)
    csrf = token(web, "tidy-tmp", basic())
    status, said = post(web, {**basic(), "Origin": "https://evil.example"}, action="pause",
                        job="tidy-tmp", reason="why", csrf=csrf)
    assert (status, said) == (403, "refused: the form was posted from another site "
                                   "(https://evil.example; behind a proxy, give the "
                                   "dashboard's public name with --allowed-host)")


@pytest.mark.parametrize(("origin", "status"), [
    ("https://pglock.example.internal", 200), ("http://PGLOCK.example.internal:8443", 200),
    ("https://evil.example", 403), ("https://pglock.example.internal.evil.example", 403),
    ("https://evil.example/pglock.example.internal", 403), ("https://[::1", 403)])
def test_behind_a_proxy_the_origin_may_name_an_allowed_host(
        fleet: Env, alice: Auth, origin: str, status: int) -> None:
    """The proxy keeps its own Host (127.0.0.1:8434); the browser's Origin is the public
    name, given with --allowed-host (sweep D3: every post was 403)."""
    web = client(fleet, alice, actions=True, origins=frozenset({"pglock.example.internal"}))
    csrf = token(web, "tidy-tmp", basic())
    got, said = post(web, {**basic(), "Origin": origin}, action="resume", job="tidy-tmp",
                     reason="why", csrf=csrf)
    # 409: let through, and nothing to resume.
    assert (got, said.startswith("refused: the form was posted from another site")) == (
        409 if status == 200 else 403, status == 403), said


def test_pause_resume_clear_and_stop_are_done_and_audited_under_the_web_user(
        fleet: Env, alice: Auth) -> None:
    web = client(fleet, alice, actions=True)
    csrf = token(web, "bulk-001", basic())
    assert post(web, basic(), action="pause", job="bulk-001", reason="disk <b>swap</b>",
                csrf=csrf) == (200, "paused bulk-001: every host skips it until resumed")
    assert "pause" in web.get("/api/job?name=bulk-001", headers=basic()).json()["jobs"][0][
        "state"]
    assert post(web, basic(), action="resume", job="bulk-001", reason="done",
                csrf=csrf) == (200, "resumed bulk-001")
    assert audit(fleet, "bulk-001") == [("pause", WEB_USER, "disk <b>swap</b>"),
                                        ("resume", WEB_USER, "done")]
    assert post(web, basic(), action="resume", job="bulk-001", reason="again",
                csrf=csrf) == (409, "job 'bulk-001' was not paused; nothing to resume")
    status, said = post(web, basic(), action="stop", job="running-job", reason="runaway",
                        csrf=csrf)
    assert (status, said) == (200, "asked running-job-host:4242 to stop running-job; it "
                                   "stops its command at its next renewal")
    status, said = post(web, basic(), action="clear", job="cleared-job", reason="stuck",
                        csrf=csrf)
    assert status == 200 and said.startswith("cleared cleared-job from cleared-job-host:4242")
    assert audit(fleet, "running-job")[-1] == ("stop", WEB_USER, "runaway")
    assert fleet.query("SELECT count(*) FROM {schema}.runs WHERE job = 'cleared-job' "
                       "AND outcome = 'cleared' AND reason = 'stuck'")[0][0] == 1
    status, said = post(web, basic(), action="replay", job="tidy-tmp", reason="again",
                        csrf=csrf)
    assert status == 409 and "has no slot to replay" in said


def test_a_trusted_proxys_header_names_the_user_and_no_one_elses(fleet: Env) -> None:
    trusted = Auth(header="X-Forwarded-User", proxies=("testclient",))
    web = client(fleet, trusted, actions=True)
    user = {"X-Forwarded-User": "bob"}
    assert web.get("/", headers=user).status_code == 200
    assert web.get("/").status_code == 403
    csrf = token(web, "bulk-002", user)
    assert post(web, user, action="pause", job="bulk-002", reason="proxy", csrf=csrf)[0] == 200
    assert audit(fleet, "bulk-002")[0][1] == f"bob@{socket.gethostname()} (pglock serve)"
    elsewhere = client(fleet, Auth(header="X-Forwarded-User", proxies=("10.9.9.9",)),
                       actions=True)
    response = elsewhere.get("/", headers=user)
    assert response.status_code == 403 and "did not come from a trusted proxy" in response.text


@pytest.fixture
def reader(fleet: Env) -> Iterator[str]:
    """A DSN of a login role that is a pglock_reader only."""
    name = f"{fleet.schema}_web_reader"[:63]
    fleet.query(f'CREATE ROLE "{name}" LOGIN')
    printed = fleet.run("init", "--print-grants", "--reader-role", name)
    assert printed.returncode == 0, printed
    with psycopg.connect(fleet.dsn, autocommit=True) as conn:
        conn.execute(printed.stdout.encode())
    try:
        yield f"{fleet.dsn} user={name}"
    finally:
        fleet.query(f'DROP OWNED BY "{name}"')
        fleet.query(f'DROP ROLE "{name}"')


def test_the_database_role_has_the_last_word(fleet: Env, alice: Auth, reader: str) -> None:
    web = client(fleet, alice, actions=True, conninfo=reader)
    assert web.get("/", headers=basic()).status_code == 200
    assert web.get("/job?name=nightly-backup", headers=basic()).status_code == 200
    csrf = token(web, "bulk-003", basic())
    status, said = post(web, basic(), action="pause", job="bulk-003", reason="try",
                        csrf=csrf)
    assert status == 503 and "permission denied" in said
    assert audit(fleet, "bulk-003") == []


def test_a_users_file_is_read_and_checked(tmp_path: Path) -> None:
    from pglock.errors import UsageError
    from pglock.serve.auth import read_users

    good = tmp_path / "users"
    good.write_text(f"# web users\nalice:{hash_password('x')}\n\n")
    assert list(read_users(good)) == ["alice"]
    bad = tmp_path / "bad"
    bad.write_text("alice:plaintext\n")
    with pytest.raises(UsageError, match="line 1 is not NAME:scrypt"):
        read_users(bad)


def test_replay_of_a_dead_slot_is_done_audited_and_made_by_the_next_run(
        env: Env, alice: Auth) -> None:
    run = ("run", "--job", "nightly", "--schedule", "0 3 * * *", "--tz", "UTC",
           "--deadline", "1d", "--min-hold", "0", "--")
    assert env.run(*run, "false").returncode == 1  # its one attempt failed: the slot is dead
    web = client(env, alice, actions=True)
    csrf = token(web, "nightly", basic())
    status, said = post(web, basic(), action="replay", job="nightly", reason="disk fixed",
                        csrf=csrf)
    assert status == 200 and said.startswith("replaying slot ") and said.endswith(
        "of nightly: attempts 2 to 2, made by the next run on any host"), said
    assert audit(env, "nightly")[-1] == ("replay", WEB_USER, "disk fixed")
    assert env.run(*run, "true").returncode == 0
    outcomes = env.query("SELECT attempt, outcome FROM {schema}.runs WHERE job = 'nightly' "
                         "ORDER BY id")
    assert [tuple(row) for row in outcomes] == [(1, "failed"), (2, "succeeded")]
