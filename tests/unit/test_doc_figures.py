"""scripts/doc_figures.py: the figures gen-docs writes into the docs, and its markers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "scripts" / "doc_figures.py"
    spec = importlib.util.spec_from_file_location("doc_figures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


figures = _load()


def test_the_default_ttl_row_is_lease_mds_example() -> None:
    # ttl 60 s, kill-after 10 s: margin 6 s, grace 10 s, renewals every 20 s; the outage
    # begins 0-20 s after the last renewal.
    row = next(line for line in figures.outage_table().splitlines() if "(default)" in line)
    assert row == "| 1m (default) | 20 s | 24-44 s | 34-54 s | 69 s | 40-60 s |"


def test_the_exit_bound_covers_a_blackhole() -> None:
    """Issue 38: at ttl 10 s a blackhole outage exited 125 at 20.9 s (12.1 s after the
    SIGKILL: a 10 s statement bound, then a cancel the server never answered), past the
    table's "by 20 s". The writer of the end is waited for --connect-timeout plus the
    cancel's own waits; the table must say as much."""
    row = next(line for line in figures.outage_table().splitlines() if line.startswith("| 10s"))
    exits = float(row.split("|")[5].strip().removesuffix(" s"))
    assert exits >= 20.9
    sigkill = 10 - 1  # the latest SIGKILL at ttl 10 s: the ttl less the margin
    assert exits - sigkill >= 12.1


def test_a_stale_figure_is_rewritten_and_the_rest_kept() -> None:
    text = "a <!-- gen:range:--ttl -->1s to 2s<!-- /gen --> b <!-- gen:NAME -->x<!-- /gen -->"
    assert figures.fill(text, "t") == (
        "a <!-- gen:range:--ttl -->5s to 7d<!-- /gen --> b <!-- gen:NAME -->x<!-- /gen -->")


def test_an_unknown_figure_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown figure 'nothing'"):
        figures.fill("<!-- gen:nothing -->1<!-- /gen -->", "t")


def test_status_help_lists_every_state_worst_first() -> None:
    """One list of states (reports/jobs.py State): the docs' copies are generated from it;
    status's help, which typer takes from a docstring, is held to it here."""
    import re

    from pglock.cli.operator import status
    from pglock.reports.jobs import STATE_MEANINGS, State

    assert status.__doc__ is not None
    said = re.search(r"States, worst first: (.*?)\(docs/operators", " ".join(
        status.__doc__.split()))
    assert said is not None
    names = [re.sub(r"\s*\(.*", "", part).strip() for part in said[1].split(",")]
    assert names == list(State)
    assert list(STATE_MEANINGS) == list(State)
