"""--catch-up: which of the slots before a trigger's own that have no run (every host was
down, the database was, or a run outlasted them) the trigger runs, and which it gives up
(docs/schedules.md, "Catch-up"). The acquire statement said which have no run; Slot.catch_up
runs them oldest first under the one lock, each its own run with its own PGLOCK_SLOT and
attempts, then the trigger's own slot."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import NamedTuple

from pglock.lock.lease import Claim
from pglock.run.options import RunOptions
from pglock.settings import schedule

log = logging.getLogger(__name__)

# How far ahead of the database's clock a caught-up slot may be: a host's clock that NTP
# keeps is within this (doctor warns from 2 s), and it is a fraction of cron's shortest
# interval. A slot further ahead is one the database's clock has not reached: a host whose
# clock runs hours fast would otherwise run every slot between, each before its time.
AHEAD_ALLOWED = timedelta(seconds=60)


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


def not_ahead(planned: Plan, database_now: datetime, job: str) -> Plan:
    """The plan without the slots ahead of the database's clock (by more than
    AHEAD_ALLOWED): they are neither run nor given up; their own triggers run them."""
    limit = database_now + AHEAD_ALLOWED
    kept = [when for when in planned.run if when <= limit]
    if len(kept) < len(planned.run):
        ahead = planned.run[-1] - database_now
        log.warning("job %r: not catching up %d slots ahead of the database's clock (this "
                    "host's clock runs at least %s fast; is NTP running?)", job,
                    len(planned.run) - len(kept), _rounded(ahead))
    return Plan(kept, planned.given_up)


def _rounded(span: timedelta) -> str:
    from pglock.settings.durations import format_duration

    return format_duration(float(int(span.total_seconds())))
