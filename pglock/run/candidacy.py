"""A trigger of a job run with --candidates: its rank in the slot, from the roster this host
keeps (run/membership.py), decided before anything connects (docs/fleet.md,
"Candidates"). A host outside the slot's first K exits 75 at once without connecting,
unless its roster is due for a refresh (one statement, then it decides again); a
candidate of rank r tries at the slot plus r-1 steps; a host without a roster to trust
contends at once. The ranking itself: lock/candidates.py."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from pglock.lock import candidates as ranking
from pglock.lock import clock
from pglock.lock.lease import Turn
from pglock.run import membership
from pglock.run.options import RunOptions
from pglock.settings.config import Target

if TYPE_CHECKING:
    from pglock.lock import ledger
    from pglock.run.supervise import SignalGate

log = logging.getLogger(__name__)

# The interval assumed of a job run without --schedule (a literal crontab line, most often
# minutely) when it promises to be seen again: its refresh plus this.
UNSCHEDULED_INTERVAL = 60.0


@dataclass(eq=False)
class Candidacy:
    """This trigger's place among its slot's candidates."""

    options: RunOptions
    file: Path
    # The slot ranked (the trigger's minute without --schedule), and the trigger's slot.
    at: datetime
    scheduled: ledger.Scheduled | None
    start_by: float
    # The stopwatch when pglock started: the hold counts from it.
    started: float
    # The job's interval, as this host knows it (its promise to the census).
    interval: float
    roster: membership.Roster | None = None
    # The hosts of the slot in rank order (this one included); empty without a roster.
    order: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, options: RunOptions, target: Target,
           planned: tuple[ledger.Scheduled | None, float], started: float) -> Candidacy:
        """Read this host's roster of the job and rank the trigger's slot (`planned`: the
        trigger's slot and its start-by, slot.plan_slot's; `started`: the stopwatch when
        pglock started)."""
        scheduled, start_by = planned
        if scheduled is not None:
            at = scheduled.slot
            interval = max(1.0, (scheduled.next_slot - scheduled.slot).total_seconds())
        else:
            at = ranking.turn_of(datetime.now(UTC))
            interval = UNSCHEDULED_INTERVAL
        file = membership.path(target, options.schema, options.host, options.job)
        found = cls(options, file, at, scheduled, start_by, started, interval)
        found.learn(membership.read(file, job=options.job, host=options.host,
                                    refresh=options.candidates_refresh))
        membership.fired(file)
        return found

    def learn(self, roster: membership.Roster | None) -> None:
        """Rank the slot over `roster` (None: no roster to trust)."""
        self.roster = roster
        self.order = [] if roster is None else ranking.ranked(
            self.options.job, self.at, [*self.within(roster.hosts)])

    def within(self, hosts: tuple[str, ...] | list[str]) -> list[str]:
        """The hosts this one ranks itself among: the roster and itself, unless the roster
        is full without it (then it is in no slot's ranking)."""
        assert self.options.candidates is not None
        if self.options.host in hosts or (
                len(hosts) < ranking.roster_size(self.options.candidates)):
            return [*hosts, self.options.host]
        return list(hosts)

    @property
    def rank(self) -> int | None:
        """This host's rank in the slot (None: no roster, or outside a full one)."""
        if self.options.host not in self.order:
            return None
        return self.order.index(self.options.host) + 1

    @property
    def candidate(self) -> bool:
        """Whether this trigger contends: among the slot's first K, or without a roster."""
        assert self.options.candidates is not None
        if self.roster is None:
            return True
        rank = self.rank
        return rank is not None and rank <= self.options.candidates

    @property
    def due(self) -> bool:
        """Whether the roster is due for a refresh (or missing)."""
        return self.roster is None or time.time() >= self.roster.refresh_at

    @property
    def promise(self) -> float:
        """Within how long the census sees this host again for the job: its next refresh
        comes at the first trigger after its --candidates-refresh."""
        return self.options.candidates_refresh + self.interval

    def turn(self) -> Turn:
        """What the acquire statement is told."""
        assert self.options.candidates is not None
        rank = self.rank if self.roster is not None else None
        above = tuple(self.order[:rank - 1]) if rank is not None else ()
        # The roster only when this host's is due: a fresh one would be read for nothing.
        size = ranking.roster_size(self.options.candidates) if self.due else None
        return Turn(self.options.candidates, self.options.candidate_step, self.promise,
                    size, rank, above)

    def wait(self, gate: SignalGate) -> None:
        """Wait for this candidate's attempt: a step per rank above it after the trigger
        (cron starts every host's at the slot), on the stopwatch; a stop signal cuts it
        short, and is raised. A trigger that started late tries as late, after the ranks
        above it, which started late alike."""
        rank = self.rank if self.roster is not None else None
        if rank is None or rank == 1:
            return
        until = self.started + (rank - 1) * self.options.candidate_step
        log.debug("job %r: candidate %d of the slot: trying in %.1fs", self.options.job,
                  rank, until - clock.now())
        while clock.now() < until:
            gate.pause(until - clock.now())

    def refresh(self, conninfo: str) -> bool:
        """Learn the job's roster in one statement on a connection of its own (a trigger
        that is no candidate by a roster due for a refresh); False when the database could
        not be asked (the roster in hand stands until it is stale)."""
        from pglock.db import database
        from pglock.errors import PglockError

        try:
            session = database.Reconnecting(
                conninfo, application_name=f"pglock run {self.options.job} on "
                                           f"{self.options.holder}",
                timeout=self.options.connect_timeout)
            try:
                self.refreshed(session.get())
            finally:
                session.close()
        except (psycopg.Error, PglockError) as error:
            log.info("job %r: the roster could not be refreshed (%s)", self.options.job,
                     database.first_line(error))
            return False
        return True

    def refreshed(self, conn: psycopg.Connection[object]) -> None:
        """Ask for the job's roster on `conn` (members(), recording this host's standby),
        with those of this host's other jobs that are due within half a refresh and still
        fired here: one statement for a host's jobs, not one per job. Keep them, and rank
        the slot again. A trigger of another job refreshing at this moment does it for
        this one too: then nothing is asked (the roster in hand is due, not stale)."""
        options = self.options
        with membership.refreshing(self.file) as alone:
            if not alone:
                return
            learnt_at = time.time()
            others = membership.others(self.file, options.host, learnt_at,
                                       options.candidates_refresh / 2)
            mine = {"job": options.job, "slot": None if self.scheduled is None else self.at,
                    "ttl": options.ttl, "due": self.promise,
                    "size": ranking.roster_size(options.candidates or 1)}
            found = ranking.members(conn, options.schema, options.host, [mine, *[
                {"job": due.job, "slot": None, "ttl": due.roster.ttl,
                 "due": due.roster.promise, "size": due.roster.size} for due in others]])
            refresh_at = self.keep(found.get(options.job, []), learnt_at)
            for due in others:
                membership.write(due.file, due.job, options.host, replace(
                    due.roster, hosts=tuple(found.get(due.job, [])), learnt_at=learnt_at,
                    refresh_at=refresh_at), fired_at=due.fired_at)

    def keep(self, hosts: list[str], learnt_at: float) -> float:
        """Keep the roster learnt at `learnt_at` (the statement's send time), and rank the
        slot over it; when it is to be learnt again."""
        options = self.options
        roster = membership.Roster(
            tuple(hosts), learnt_at, membership.next_refresh(
                learnt_at, options.candidates_refresh, first=self.roster is None),
            options.ttl, self.promise, ranking.roster_size(options.candidates or 1))
        membership.write(self.file, options.job, options.host, roster)
        self.learn(roster)
        return roster.refresh_at
