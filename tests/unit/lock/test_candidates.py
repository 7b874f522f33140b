"""The ranking of a slot's candidates (--candidates): a rendezvous hash of (job, slot, host),
stable, spread over the hosts, and moved only where a host joins or leaves."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

import pytest

from pglock.lock import candidates

SLOT = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
HOSTS = [f"web-{i}" for i in range(1, 21)]


def slots(count: int) -> list[datetime]:
    return [SLOT + timedelta(minutes=i) for i in range(count)]


def test_the_ranking_is_the_same_whatever_order_the_hosts_come_in() -> None:
    first = candidates.ranked("sync", SLOT, HOSTS)
    assert sorted(first) == sorted(HOSTS)
    assert candidates.ranked("sync", SLOT, list(reversed(HOSTS))) == first
    # The same instant in another zone is the same slot.
    east = SLOT.astimezone(timezone(timedelta(hours=5)))
    assert candidates.ranked("sync", east, HOSTS) == first
    # A known figure: any change of the hash changes who runs every slot of a fleet
    # whose hosts run two pglock versions.
    assert candidates.score("sync", SLOT, "web-1") == int.from_bytes(
        __import__("hashlib").sha256(b"sync\x1f2026-11-22T03:00:00Z\x1fweb-1").digest()[:8],
        "big")


def test_the_first_rank_spreads_over_the_hosts() -> None:
    """Over 2,000 minutely slots of 20 hosts each host ranks first about 100 times."""
    firsts = Counter(candidates.ranked("sync", at, HOSTS)[0] for at in slots(2000))
    assert set(firsts) == set(HOSTS)
    assert min(firsts.values()) > 50 and max(firsts.values()) < 160, firsts
    # Another job's slots go to other hosts.
    other = [candidates.ranked("report", at, HOSTS)[0] for at in slots(50)]
    assert other != [candidates.ranked("sync", at, HOSTS)[0] for at in slots(50)]


def test_a_host_that_leaves_moves_only_the_slots_it_ranked_in() -> None:
    """Rendezvous hashing: without web-7, every slot keeps its order of the others; the
    slots web-7 was first in go to its second, and no other slot changes hands."""
    without = [h for h in HOSTS if h != "web-7"]
    for at in slots(300):
        before = candidates.ranked("sync", at, HOSTS)
        after = candidates.ranked("sync", at, without)
        assert after == [h for h in before if h != "web-7"]


def test_a_host_ranks_itself_in_the_roster_unless_it_is_full() -> None:
    k = 3
    rank = candidates.rank("sync", SLOT, "web-1", HOSTS, k)
    assert rank == candidates.ranked("sync", SLOT, HOSTS).index("web-1") + 1
    # A host the roster does not name yet (new, or its roster learnt before it joined)
    # ranks itself among it.
    assert candidates.rank("sync", SLOT, "new", HOSTS, k) == candidates.ranked(
        "sync", SLOT, [*HOSTS, "new"]).index("new") + 1
    # A full roster without it: the job's slots go to the roster's hosts.
    full = [f"h{i}" for i in range(candidates.roster_size(k))]
    assert candidates.rank("sync", SLOT, "new", full, k) is None
    assert candidates.roster_size(3) == candidates.ROSTER_SIZE
    assert candidates.roster_size(1000) == 2000


@pytest.mark.parametrize(("moment", "minute"), [
    (datetime(2026, 11, 22, 3, 0, 0, 100, tzinfo=UTC), datetime(2026, 11, 22, 3, 0, tzinfo=UTC)),
    (datetime(2026, 11, 22, 3, 0, 59, 999999, tzinfo=UTC),
     datetime(2026, 11, 22, 3, 0, tzinfo=UTC)),
    (datetime(2026, 11, 22, 4, 30, 5, tzinfo=timezone(timedelta(hours=1, minutes=30))),
     datetime(2026, 11, 22, 3, 0, tzinfo=UTC))])
def test_a_literal_crontab_line_ranks_its_triggers_minute(moment: datetime,
                                                          minute: datetime) -> None:
    assert candidates.turn_of(moment) == minute


def test_a_candidate_tries_a_step_after_the_one_above_it() -> None:
    assert candidates.attempt_at(SLOT, 1, 10.0) == SLOT
    assert candidates.attempt_at(SLOT, 3, 10.0) == SLOT + timedelta(seconds=20)
