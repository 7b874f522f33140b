"""The census's and the candidates' screens as an operator sees them, on a real terminal
at several widths: `pglock hosts` (the fleet), `hosts --job J` (a job's hosts),
`hosts --job J --next` (the slot's candidates in rank order), and `history`'s rank beside
the host that ran a slot."""

from __future__ import annotations

import re

import pytest
from conftest import Env
from operating import on_terminal, pglock_json

HOSTS = ("web-frontend-eu-west-1a", "web-frontend-eu-west-1b", "batch-02", "batch-03")
# Each test's hosts wait out a candidate step: the slow layer.
pytestmark = pytest.mark.slow

ANSI_CODES = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


@pytest.fixture
def fired(env: Env) -> Env:
    """Four hosts fired the job `sync` with --candidates 2, one after another, twice: the
    first triggers contend (no host has a roster yet) and teach each host its roster, the
    second ones rank the slot (a candidate that runs records its rank)."""
    for _ in range(2):
        for host in HOSTS:
            done = env.run("run", "--job", "sync", "--candidates", "2", "--candidate-step",
                           "1s", "--candidates-refresh", "1s", "--min-hold", "0", "--",
                           "true", env={"PGLOCK_HOST": host})
            assert done.returncode in (0, 75), done
    return env


@pytest.mark.parametrize("columns", [50, 160])
@pytest.mark.parametrize("args", [(), ("--job", "sync")], ids=["fleet", "job"])
def test_the_census_on_a_terminal(fired: Env, args: tuple[str, ...], columns: int) -> None:
    code, drawn = on_terminal(fired, "hosts", *args, columns=columns,
                              extra_env={"NO_COLOR": "1"})
    plain = ANSI_CODES.sub("", drawn)
    assert code == 0, plain
    assert all(host in plain for host in HOSTS), plain  # every name whole, at any width
    assert all(len(line) <= columns for line in plain.splitlines()), plain


@pytest.mark.parametrize("columns", [50, 80, 160])
def test_hosts_next_on_a_terminal(fired: Env, columns: int) -> None:
    code, drawn = on_terminal(fired, "hosts", "--job", "sync", "--next", columns=columns,
                              extra_env={"NO_COLOR": "1"})
    plain = ANSI_CODES.sub("", drawn)
    assert code == 0, plain
    assert "candidates of sync" in plain and "RANK" in plain, plain
    # What the screen shows is what --json says (the roster: the hosts not silent and
    # not past their turn, which the triggers' timing decides): the first K whole, in
    # rank order, and a count of the rest.
    ranked = [row["host"] for row in pglock_json(fired, "hosts", "--job", "sync", "--next")[
        "ranked"]]
    shown = sorted((plain.index(host), host) for host in HOSTS if host in plain)
    assert [host for _, host in shown] == ranked[:2], plain
    rest, said = len(ranked) - 2, " ".join(plain.split())
    if rest > 0:
        assert (f"{rest} more host{'s' if rest != 1 else ''} of its roster "
                f"ask{'' if rest != 1 else 's'} nothing for this slot") in said, plain
    assert all(len(line) <= columns for line in plain.splitlines()), plain


@pytest.mark.parametrize("columns", [120, 160])
def test_history_shows_the_rank_of_the_host_that_ran(fired: Env, columns: int) -> None:
    code, drawn = on_terminal(fired, "history", "--job", "sync", columns=columns,
                              extra_env={"NO_COLOR": "1"})
    plain = ANSI_CODES.sub("", drawn)
    assert code == 0, plain
    assert re.search(r"\(rank [12]\)", plain), plain
    assert all(len(line) <= columns for line in plain.splitlines()), plain
