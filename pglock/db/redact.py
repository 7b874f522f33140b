"""Passwords out of any text that may hold a DSN, and the parts of a DSN safe to show.

pglock never builds a message from a whole DSN; this is the second line of defence for
text it does not build itself (a library's error message), and the one place that
knows which parts of a DSN are safe to name.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

HIDDEN = "***"

# The patterns are compiled on first use (re's own cache): a run that says nothing about
# a DSN does not pay for them.
# Keyword form: password=secret, password = 'it''s', password='a b\' c' (quotes may not
# close: the rest of the text goes with it). Also a URI's ?password=... parameter.
_KEYWORD = r"(?is)(?P<key>\bpassword\s*=\s*)(?:'(?:\\.|[^'\\])*(?:'|$)|\S+)"
# URI form: scheme://user:pass@host. A password may hold unencoded / @ : (base64 ones
# hold /), so the user information runs to the last @ before any white space.
_URI = r"(?i)(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<userinfo>\S*@)"


def redact(text: str) -> str:
    """`text` with the password of every DSN fragment in it replaced by ***."""
    text = re.sub(_URI, _hide_userinfo, text)
    return re.sub(_KEYWORD, lambda m: m.group("key") + HIDDEN, text)


def _hide_userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match.group("userinfo")[:-1].partition(":")
    # A user name cannot hold an unencoded ":", so what follows the first one is secret.
    return match.group("scheme") + user + (":" + HIDDEN if colon else "") + "@"


class Place(NamedTuple):
    """Where a DSN points, from fields that cannot carry a password."""

    host: str
    port: str
    dbname: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}" + (f"/{self.dbname}" if self.dbname else "")


_URI_PREFIX = r"(?i)postgres(?:ql)?://"
# What a host, port or database name holds; anything else is shown by nobody. An @ (a
# database named "app@eu") is safe once misread() has ruled out a URI password.
_SAFE_FIELD = r"[\w.\-,\[\]:%/@]*"


def _userinfo(conninfo: str) -> str | None:
    """A URI's user information as a human reads it (up to the last @), or None."""
    stripped = conninfo.strip()
    prefix = re.match(_URI_PREFIX, stripped)
    if prefix is None:
        return None
    rest = stripped[prefix.end():]
    authority, slash, path = rest.partition("/")
    if slash and "@" in path.partition("?")[0] and not re.search("[@:]", authority):
        # The @ is in the database name: before it is a bare host or nothing (no "user:",
        # so no password). With user information or a port, "user:pass/word@host" reads
        # the same as "host:port/db@x": that stays refused (percent-encode the @).
        return None
    if slash and re.fullmatch(r"[^@:]+@[^@:/]+(?::\d+)?", authority):
        # user@host[:port]/db@x: libpq reads the user information up to the first @ (no
        # ":", no password); the other reading needs an @ in the user name and a password
        # of digits followed by a "/", which percent-encoding is there for.
        return authority.partition("@")[0]
    userinfo, at, _ = rest.rpartition("@")
    return userinfo if at else None


def misread(conninfo: str) -> bool:
    """A URI whose user information holds an unencoded / or @: libpq reads it only up to
    the first of them, so part of the password lands in host, port or database name."""
    userinfo = _userinfo(conninfo)
    return userinfo is not None and ("/" in userinfo or "@" in userinfo)


def secrets(conninfo: str, parsed: dict[str, str]) -> list[str]:
    """Every password the DSN and the environment may carry, longest first."""
    found = [parsed.get("password") or "", os.environ.get("PGPASSWORD") or ""]
    userinfo = _userinfo(conninfo)
    if userinfo is not None:
        found.append(userinfo.partition(":")[2])
    return sorted({s for s in found if s}, key=len, reverse=True)


def place(conninfo: str, parsed: dict[str, str]) -> Place | None:
    """host:port/dbname of a DSN libpq parsed as `parsed` (libpq's variables filling the
    gaps, as libpq does); None when unsure they carry no part of a password."""
    if misread(conninfo):
        return None
    env = os.environ
    host = (parsed.get("host") or parsed.get("hostaddr") or env.get("PGHOST")
            or env.get("PGHOSTADDR") or "localhost")
    port = parsed.get("port") or env.get("PGPORT") or "5432"
    dbname = (parsed.get("dbname") or env.get("PGDATABASE") or parsed.get("user")
              or env.get("PGUSER") or "")
    fields = (host, port, dbname)
    if not all(re.fullmatch(_SAFE_FIELD, f) for f in fields):
        return None
    if any(s in f for s in secrets(conninfo, parsed) for f in fields):
        return None
    return Place(host, port, dbname)


def scrubbed(text: str, conninfo: str, parsed: dict[str, str]) -> str:
    """A library's message about this DSN with every password it may quote hidden."""
    for secret in secrets(conninfo, parsed):
        text = text.replace(secret, HIDDEN)
    return redact(text)
