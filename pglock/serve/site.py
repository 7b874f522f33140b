"""What every page shares: the site (database, schema, who may do what), the strict
headers, the templates (autoescaped), and the two ways a page answers, HTML and JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse

from pglock.cli import census_screens, render, screens
from pglock.serve import charts
from pglock.serve.auth import Auth
from pglock.serve.pool import Pool

HERE = Path(__file__).parent

# No inline script or style, nothing from elsewhere, no framing, forms post here only.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "Cross-Origin-Opener-Policy": "same-origin"}


@dataclass(frozen=True)
class Site:
    """What every request needs: the database, the schema, who may do what."""

    pool: Pool
    schema: str
    place: str
    auth: Auth
    allow_actions: bool = False
    # The names a request's Host may give (None: any): --allowed-host.
    hosts: frozenset[str] | None = None
    # The names a browser's Origin may give besides the request's own Host: those of
    # --allowed-host, the dashboard's public names behind a proxy (actions.py).
    origins: frozenset[str] = frozenset()


class Denied(Exception):
    """A request refused before any work: its status and the one line to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    environment.filters.update({
        "text": lambda v: "" if v is None else render.escaped(str(v)),
        "when": lambda m: render.when(m) if m is not None else "-",
        "ago": render.ago, "took": charts.took, "job_href": charts.job_href,
        "host_id": charts.host_id, "outcome": census_screens.outcome_text,
        "look": charts.look, "percent": lambda v: "-" if v is None else f"{100 * v:.0f}%",
        "output": lambda tail: "\n".join(screens.printable(line) for line in
                                         screens.decoded(tail).splitlines())})
    return environment


TEMPLATES = templates()


def page(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    site: Site = request.app.state.site
    user = request.scope.get("pglock.user")
    body = TEMPLATES.get_template(template).render(
        place=site.place, schema=site.schema, user=user, actions=site.allow_actions,
        token=site.auth.token(user) if user else "", path=request.url.path, **values)
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def as_json(document: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(document, status_code=status, headers=HEADERS)
