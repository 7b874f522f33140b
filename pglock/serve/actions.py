"""The dashboard's actions (with --allow-actions): pause, resume, stop, replay, clear.

Each is refused unless actions are on, the user is identified (auth configured), the
form carries the user's CSRF token, and a reason is given; then it is the operator
command's own core function (operate/), writing its audit row under the web user's name.
The database role has the last word: a reader's connection is refused by the server.
There is no "run now": pglock runs on the hosts' cron (replay re-opens a dead slot).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from pglock.cli import screens
from pglock.errors import NothingDone
from pglock.operate import admin, control
from pglock.reports import status
from pglock.serve.site import Denied, Site, page
from pglock.settings.config import check_job, shown
from pglock.settings.durations import check_reason

ACTIONS = ("pause", "resume", "stop", "replay", "clear")
MOST_FORM = 16 * 1024
MOST_REASON = 500


def by(user: str) -> str:
    """Who the audit row names: the web user, on this host, through the dashboard."""
    return f"{user}@{socket.gethostname()} (pglock serve)"


def _form(body: bytes) -> dict[str, str]:
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeError:
        raise Denied(400, "the form is not UTF-8") from None
    return {name: values[0] for name, values in fields.items()}


def _same_origin(request: Request) -> None:
    """A browser says where a post comes from: refuse another site's (the token would
    refuse it too; this says why). Its Origin must name the request's own Host, or, behind
    a proxy that keeps a Host of its own (docs/serve.md), one of the dashboard's public
    names, given with --allowed-host: the browser sets Origin, and no page of another site
    can make it name this dashboard."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        site: Site = request.app.state.site
        netloc, name = _origin_names(origin)
        if netloc != request.headers.get("host") and name not in site.origins:
            hint = "" if site.origins else (
                "; behind a proxy, give the dashboard's public name with --allowed-host")
            raise Denied(403, "refused: the form was posted from another site "
                              f"({shown(origin[:100])}{hint})")
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise Denied(403, "refused: the form was posted from another site")


def _origin_names(origin: str) -> tuple[str | None, str | None]:
    """An Origin's host and port as a Host header gives them, and its host name alone
    (the Host check sets the port aside too); None for what it does not name."""
    try:
        parts = urlsplit(origin)
        return parts.netloc, parts.hostname
    except ValueError:
        return None, None


def admitted(request: Request) -> str:
    """The user of an action that passed every check the headers allow: made before a
    byte of the body is read, so that a refused post costs nothing."""
    site: Site = request.app.state.site
    if not site.allow_actions:
        raise Denied(403, "actions are off: this dashboard is read-only (pglock serve "
                          "--allow-actions turns them on)")
    user: str | None = request.scope.get("pglock.user")
    if not user:
        raise Denied(403, "actions need a user: start pglock serve with --users FILE or "
                          "--auth-header NAME")
    _same_origin(request)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Denied(415, "an action is a form post (application/x-www-form-urlencoded)")
    length = request.headers.get("content-length")
    if length is not None and (len(length) > 9 or not length.isascii()
                               or not length.isdigit() or int(length) > MOST_FORM):
        raise Denied(413, "the form is too large")
    return user


async def body(request: Request) -> bytes:
    """The form's bytes, MOST_FORM at most: no more is read (a chunked body that goes on
    is refused as soon as it passes the limit)."""
    read = bytearray()
    async for chunk in request.stream():
        read += chunk
        if len(read) > MOST_FORM:
            raise Denied(413, "the form is too large")
    return bytes(read)


def checked(request: Request, user: str, body: bytes) -> dict[str, str]:
    """The form of an action that passed every check before the database."""
    site: Site = request.app.state.site
    form = _form(body)
    if not site.auth.token_ok(user, form.get("csrf")):
        raise Denied(403, "refused: the form's CSRF token is missing or stale (reload the "
                          "page)")
    if form.get("action") not in ACTIONS:
        raise Denied(400, f"action: one of {', '.join(ACTIONS)}")
    reason = " ".join(form.get("reason", "").split())
    if not reason:
        raise Denied(400, "a reason is required: say why, for the audit log")
    if len(reason) > MOST_REASON:
        raise Denied(400, f"the reason is longer than {MOST_REASON} characters")
    check_reason(reason, None, "reason")
    return {**form, "reason": reason, "job": check_job(form.get("job", ""), "job")}


async def act(request: Request) -> Response:
    """POST /action: do it, and say what was done (or why not) in one line."""
    user = admitted(request)
    form = checked(request, user, await body(request))
    said = await run_in_threadpool(perform, request.app.state.site, form, by(user))
    return page(request, "done.html", job=form["job"], action=form["action"], said=said)


def perform(site: Site, form: dict[str, str], who: str) -> str:
    """The action on the database; the line that says what it did."""
    job, reason, action = form["job"], form["reason"], form["action"]
    with site.pool.connection() as conn:
        if action == "pause":
            control.pause(conn, site.schema, [job], every=False, reason=reason, until=None,
                          by=who)
            return f"paused {job}: every host skips it until resumed"
        if action == "resume":
            done = control.resume(conn, site.schema, [job], every=False, reason=reason, by=who)
            if not done.resumed:
                raise NothingDone(f"job {job!r} was not paused; nothing to resume")
            return f"resumed {job}"
        if action == "stop":
            asked = control.stop(conn, site.schema, job, reason=reason, by=who)
            return (f"asked {asked.holder}:{asked.holder_pid} to stop {job}; it stops its "
                    "command at its next renewal")
        if action == "replay":
            replayed = control.replay(conn, site.schema, job, slot=None, reason=reason, by=who)
            return (f"replaying slot {replayed.slot.isoformat()} of {job}: attempts "
                    f"{replayed.first_attempt} to {replayed.last_attempt}, made by the next "
                    "run on any host")
        return _clear(site, conn, job, reason, who)


def _clear(site: Site, conn: psycopg.Connection[Any], job: str, reason: str, who: str) -> str:
    shown = status.one(conn, site.schema, job)
    # The command's judgement and words; a lock cleared already may be cleared again
    # (with this reason), as the dashboard always allowed.
    nothing = screens.nothing_to_clear(job, shown, now=True)
    if nothing is not None:
        raise NothingDone(nothing)
    assert shown is not None
    done = admin.clear(conn, site.schema, shown, reason=reason, now=False, by=who)
    if done is None:
        raise NothingDone(screens.CHANGED_HANDS.format(job=job))
    return (f"cleared {job} from {done.lock.holder}:{done.lock.holder_pid}; free for others "
            f"in {done.free_in:.0f}s")
