"""--catch-up: which of the slots before a trigger's own that have no run (every host was
down, the database was, or a run outlasted them) the trigger runs, and which it gives up
(docs/schedules.md, "Catch-up"). The acquire statement said which have no run; Slot.catch_up
runs them oldest first under the one lock, each its own run with its own PGLOCK_SLOT and
attempts, then the trigger's own slot."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from pglock.lock.lease import Claim
from pglock.run.options import RunOptions
from pglock.settings import schedule


class Plan(NamedTuple):
    """What a catch-up does: the slots it runs (oldest first), and those it gives up (how
    many, the newest of them)."""

    run: list[datetime]
    given_up: tuple[int, datetime | None]


def plan(options: RunOptions, claim: Claim, expr: str) -> Plan:
    """`all` runs every missed slot, `latest` the newest; the ones older than the look-back
    (--catch-up-limit, --deadline), and with `latest` those before the newest, are given
    up."""
    missed = list(claim.missed)
    to_run = missed if options.catch_up == "all" else missed[-1:]
    not_run = missed[:len(missed) - len(to_run)]
    prior = claim.prior_slot
    if prior is None:
        return Plan(to_run, (0, None))
    oldest = claim.backlog[0] if claim.backlog else claim.slot
    assert oldest is not None
    count, newest = schedule.count_between(_schedule(options, expr), prior, oldest,
                                           options.parsed_windows())
    if not_run:
        count, newest = count + len(not_run), not_run[-1]
    return Plan(to_run, (count, newest))


def next_slot(options: RunOptions, expr: str, when: datetime) -> datetime:
    """The first fire time after a caught-up slot (its run records it, as any run does)."""
    return schedule.next_after(_schedule(options, expr), when)


def _schedule(options: RunOptions, expr: str) -> schedule.Schedule:
    zone, source = options.zone()
    return schedule.parse(expr, zone, zone_source=source)
