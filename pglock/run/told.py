"""What a hook or a ping came to: said with -v, and noted on the run's history row when
it failed."""

from __future__ import annotations

from typing import NamedTuple


class Told(NamedTuple):
    """One hook or ping and what it came to."""

    what: str
    ok: bool
    detail: str

    def note(self) -> str:
        return f"{self.what} {self.detail}"
