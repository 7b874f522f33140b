"""Who is asking: HTTP basic auth against a file of hashed passwords, or a header set by a
trusted reverse proxy; and the CSRF token of an identified user.

Passwords are hashed with scrypt (hashlib, no dependency), one `name:hash` line each, as
`pglock serve --hash-password NAME` prints them. A header is believed only from the
proxies named (by default the loopback addresses): anyone else could set it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pglock.errors import UsageError

# scrypt's cost: 2^15 rounds of 8 x 128 bytes blocks, 32 MiB, ~50-100 ms a check.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
_MAXMEM = 64 * 1024**2
SCHEME = "scrypt"
LOOPBACK = ("127.0.0.1", "::1")


def hash_password(password: str, salt: bytes | None = None) -> str:
    """The stored form of a password: scrypt$N$r$p$salt$key (base64)."""
    salt = salt or secrets.token_bytes(16)
    key = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                         maxmem=_MAXMEM)
    return "$".join((SCHEME, str(SCRYPT_N), str(SCRYPT_R), str(SCRYPT_P),
                     base64.b64encode(salt).decode(), base64.b64encode(key).decode()))


def verify(password: str, stored: str) -> bool:
    """Whether `password` is the one `stored` was made from (constant time)."""
    try:
        scheme, n, r, p, salt, key = stored.split("$")
        if scheme != SCHEME:
            return False
        expected = base64.b64decode(key, validate=True)
        found = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt, validate=True),
                               n=int(n), r=int(r), p=int(p), maxmem=_MAXMEM,
                               dklen=len(expected))
    except (ValueError, binascii.Error):
        return False
    return hmac.compare_digest(found, expected)


@functools.cache
def _dummy() -> str:
    """What an unknown user's password is checked against (as long as a known one's)."""
    return hash_password("", b"0" * 16)


def read_users(path: Path) -> dict[str, str]:
    """name -> stored hash, from a file of `name:hash` lines (# comments, blank lines)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as error:
        raise UsageError(f"--users: cannot read {str(path)!r}: "
                         f"{getattr(error, 'strerror', None) or error}") from None
    users = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, stored = line.partition(":")
        if not colon or not name or not stored.startswith(SCHEME + "$"):
            raise UsageError(f"--users: {str(path)!r} line {number} is not NAME:{SCHEME}$... "
                             "(pglock serve --hash-password NAME prints one)")
        users[name] = stored
    if not users:
        raise UsageError(f"--users: {str(path)!r} names no user")
    return users


# Header names the proxy cannot be the only one to set (the client's own would do) or
# that carry something else than a user name.
NOT_AUTH_HEADERS = frozenset({"host", "authorization", "proxy-authorization", "cookie",
                              "content-type", "content-length", "transfer-encoding",
                              "connection", "origin", "referer", "user-agent", "accept",
                              "sec-fetch-site", "upgrade", "te", "expect"})
# What the proxy proves itself with when it shares a secret: this header, with the secret.
PROXY_SECRET_HEADER = "X-Pglock-Proxy-Secret"
MOST_USER = 200
# A header name is an RFC 9110 token.
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
MIN_SECRET = 16


def check_auth_header(name: str) -> str:
    """An --auth-header a proxy can set and no client passes through: a header name, not
    one the client or the HTTP layer owns."""
    if not name or not set(name) <= _TOKEN:
        raise UsageError(f"--auth-header: {name!r} is not an HTTP header name")
    if name.lower() in NOT_AUTH_HEADERS or name.lower() == PROXY_SECRET_HEADER.lower():
        raise UsageError(f"--auth-header: {name!r} is not a header a proxy sets for the "
                         "user alone (e.g. X-Forwarded-User)")
    return name


def read_proxy_secret(path: Path) -> bytes:
    """The secret a trusted proxy sends in PROXY_SECRET_HEADER, from a file (never the
    command line, which any user on the host can read)."""
    try:
        secret = path.read_bytes().strip()
    except OSError as error:
        raise UsageError(f"--proxy-secret-file: cannot read {str(path)!r}: "
                         f"{error.strerror or error}") from None
    if len(secret) < MIN_SECRET or not all(33 <= b < 127 for b in secret):
        raise UsageError(f"--proxy-secret-file: {str(path)!r} holds no secret of at least "
                         f"{MIN_SECRET} printable ASCII characters (a header value)")
    return secret


class Attempts:
    """Wrong passwords over the last `window` seconds, per client and overall: past either
    bound a password is not even checked (scrypt is the costly part of a request), so that
    a flood of wrong ones cannot slow the pages of others. Right ones are remembered
    (under a key of this start) for `window`: a logged-in user is not checked again."""

    def __init__(self, per_client: int = 10, overall: int = 60, window: float = 60.0) -> None:
        self.per_client, self.overall, self.window = per_client, overall, window
        self._failed: dict[str, list[float]] = {}
        self._known: dict[bytes, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _recent(self, times: list[float], now: float) -> list[float]:
        return [t for t in times if now - t < self.window]

    def refused(self, client: str) -> bool:
        now = time.monotonic()
        with self._lock:
            mine = self._recent(self._failed.get(client, []), now)
            total = sum(len(self._recent(v, now)) for v in self._failed.values())
            return len(mine) >= self.per_client or total >= self.overall

    def failed(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._failed[client] = [*self._recent(self._failed.get(client, []), now), now]
            for key in [k for k, v in self._failed.items() if not self._recent(v, now)]:
                del self._failed[key]
            while len(self._failed) > MOST_CLIENTS:
                del self._failed[next(iter(self._failed))]

    def remember(self, key: bytes, user: str) -> None:
        with self._lock:
            self._known[key] = (user, time.monotonic())
            while len(self._known) > MOST_CLIENTS:
                del self._known[next(iter(self._known))]

    def known(self, key: bytes) -> str | None:
        with self._lock:
            found = self._known.get(key)
        if found is None or time.monotonic() - found[1] >= self.window:
            return None
        return found[0]


# Clients (and remembered logins) kept at most: the memory of the bounds is bounded too.
MOST_CLIENTS = 10_000


def _every(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of a header (Starlette's headers keep them all; a plain mapping, one)."""
    getlist = getattr(headers, "getlist", None)
    if getlist is not None:
        return list(getlist(name.lower()))
    return [headers[name.lower()]] if name.lower() in headers else []


@dataclass(frozen=True)
class Auth:
    """How users are identified: none (anonymous, read-only), basic auth, or a header
    that a proxy proves it set (from --trusted-proxy addresses, with the proxy's secret
    when one is given; on a Unix socket, the socket's permissions are the proof)."""

    users: dict[str, str] | None = None
    header: str | None = None
    proxies: tuple[str, ...] = LOOPBACK
    proxy_secret: bytes | None = None
    # Listening on a Unix socket: whoever may connect is the proxy (its permissions).
    unix: bool = False
    # Signs the CSRF tokens: new at each start (a restart asks for a reload of the form).
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    attempts: Attempts = field(default_factory=Attempts)

    @property
    def configured(self) -> bool:
        return self.users is not None or self.header is not None

    def _key(self, authorization: str) -> bytes:
        return hmac.new(self.secret, b"basic:" + authorization.encode("latin-1", "replace"),
                        hashlib.sha256).digest()

    def remembered(self, authorization: str | None) -> str | None:
        """The user of credentials verified a moment ago (no scrypt), else None."""
        return self.attempts.known(self._key(authorization)) if authorization else None

    def basic(self, authorization: str | None, client: str) -> str | None:
        """The user of HTTP basic credentials, or None; blocking (scrypt): called in a
        worker thread, after `attempts.refused(client)` said no."""
        assert self.users is not None
        scheme, _, encoded = (authorization or "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, colon, password = base64.b64decode(encoded.strip(), validate=True) \
                .decode("utf-8").partition(":")
        except (ValueError, binascii.Error):
            return None
        stored = self.users.get(name)
        if not colon or stored is None:
            # As long as a wrong password: whether a name exists is not told by the time.
            verify(password, _dummy())
            self.attempts.failed(client)
            return None
        if not verify(password, stored):
            self.attempts.failed(client)
            return None
        assert authorization is not None
        self.attempts.remember(self._key(authorization), name)
        return name

    def from_header(self, headers: Mapping[str, str],
                    peer: str | None) -> tuple[str | None, str]:
        """The user a trusted proxy names, or None and why not."""
        assert self.header is not None
        if not self.unix and peer not in self.proxies:
            return None, f"the {self.header} header did not come from a trusted proxy"
        for name in (self.header, PROXY_SECRET_HEADER):
            if len(_every(headers, name)) > 1:
                # A proxy that appends its header rather than replace the client's would
                # have the client's believed, whichever came first.
                return None, (f"the {name} header came more than once: the proxy must set "
                              "it, replacing any the client sent")
        if self.proxy_secret is not None:
            given = headers.get(PROXY_SECRET_HEADER.lower(), "").encode("latin-1", "replace")
            if not hmac.compare_digest(given, self.proxy_secret):
                return None, (f"the request does not carry the proxy's secret "
                              f"({PROXY_SECRET_HEADER})")
        raw = headers.get(self.header.lower(), "")
        try:
            # HTTP headers arrive as ISO-8859-1; a proxy sends a UTF-8 name's bytes.
            name = raw.encode("latin-1").decode("utf-8").strip()
        except UnicodeError:
            return None, f"the user in {self.header} is not UTF-8"
        if not name:
            return None, f"the proxy named no user in {self.header}"
        if len(name) > MOST_USER or not name.isprintable():
            return None, (f"the user in {self.header} is longer than {MOST_USER} characters "
                          "or holds a control character")
        return name, ""

    def token(self, user: str) -> str:
        """The CSRF token of the user's forms."""
        return hmac.new(self.secret, b"csrf:" + user.encode(), hashlib.sha256).hexdigest()

    def token_ok(self, user: str, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.token(user), token)
