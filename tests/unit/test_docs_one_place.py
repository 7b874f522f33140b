"""One place per concept (issue 28): each concept an operator sizes or looks up is said
on one page, and every other page links there instead of restating it, so that the
pages cannot contradict each other again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text()
         for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}

# (concept, the page that says it, a pattern that restates it). Each pattern is the shape
# a restatement took before: a table, a list or a sentence with the figures in it.
CONCEPTS = [
    ("the zone a schedule is read in", "docs/timezones.md",
     r"else `CRON_TZ`|`CRON_TZ`, else `TZ`|^\d\. `CRON_TZ`"),
    ("daylight saving time", "docs/timezones.md", r"Spring forward|fires in both passes"),
    ("what an outage does at each ttl", "docs/ttl.md",
     r"^\|[^\n]*SIGTERM[^\n]*\|[^\n]*SIGKILL|SIGTERM at \d+ ?s|\b24-44 ?s\b"),
    ("connections per running job", "docs/connections.md",
     r"running lease-mode job\W+(?:2|two)\b"),
    ("the exit codes", "README.md", r"^\| 125 \|"),
    # (`chmod 600 /etc/pglock/web-users` in serve.md is another file's.)
    ("the config file's mode", "docs/security.md", r"`chmod 6[04]0`"),
]


@pytest.mark.parametrize(("concept", "owner", "pattern"), CONCEPTS,
                         ids=[c[0] for c in CONCEPTS])
def test_a_concept_is_said_on_one_page(concept: str, owner: str, pattern: str) -> None:
    found = {name for name, text in PAGES.items()
             if re.search(pattern, text, re.MULTILINE | re.IGNORECASE)}
    assert found == {owner}, f"{concept}: said on {sorted(found)}, one place is {owner}"


@pytest.mark.parametrize("page", ["docs/ttl.md", "docs/connections.md", "docs/timezones.md"])
def test_the_one_page_is_linked_from_the_readme(page: str) -> None:
    assert f"]({page})" in PAGES["README.md"], page
