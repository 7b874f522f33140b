"""Who is asking: HTTP basic auth against a file of hashed passwords, or a header set by a
trusted reverse proxy; and the CSRF token of an identified user.

Passwords are hashed with scrypt (hashlib, no dependency), one `name:hash` line each, as
`pglock serve --hash-password NAME` prints them. A header is believed only from the
proxies named (by default the loopback addresses): anyone else could set it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
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


@dataclass(frozen=True)
class Auth:
    """How users are identified: none (anonymous, read-only), basic auth, or a header."""

    users: dict[str, str] | None = None
    header: str | None = None
    proxies: tuple[str, ...] = LOOPBACK
    # Signs the CSRF tokens: new at each start (a restart asks for a reload of the form).
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def configured(self) -> bool:
        return self.users is not None or self.header is not None

    def identify(self, authorization: str | None, headers: dict[str, str],
                 peer: str | None) -> str | None:
        """The user a request comes from, or None (anonymous or not believed)."""
        if self.users is not None:
            return self._basic(authorization)
        if self.header is not None and peer in self.proxies:
            name = headers.get(self.header.lower(), "").strip()
            return name if name and name.isprintable() and len(name) <= 200 else None
        return None

    def _basic(self, authorization: str | None) -> str | None:
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
            verify(password, hash_password("", b"0" * 16))
            return None
        return name if verify(password, stored) else None

    def token(self, user: str) -> str:
        """The CSRF token of the user's forms."""
        return hmac.new(self.secret, b"csrf:" + user.encode(), hashlib.sha256).hexdigest()

    def token_ok(self, user: str, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.token(user), token)
