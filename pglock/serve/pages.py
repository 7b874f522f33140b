"""The pages and their JSON: each reads once through reports/, then renders (HTML) or
encodes (JSON) the same thing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from pglock.cli import census_screens, screens
from pglock.cli.render import iso
from pglock.errors import UnknownJob, UsageError
from pglock.reports import dashboard, history, hosts, status
from pglock.reports.jobs import Job, State
from pglock.serve import charts
from pglock.serve.site import Site, as_json, page
from pglock.settings.config import check_job
from pglock.settings.durations import check_moment, parse_duration

# What the job page's chart and table show by default, and at most.
RUNS, MOST_RUNS = 100, 1000
RANGES = ("1h", "6h", "1d", "7d")
DAYS = (30, 90)
AUDIT_PAGE = 100
ORDER = {state: i for i, state in enumerate(State)}


def _site(request: Request) -> Site:
    site: Site = request.app.state.site
    return site


def _number(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{name}: {text!r} is not a whole number") from None
    if not low <= value <= high:
        raise UsageError(f"{name}: {value} is not within {low}..{high}")
    return value


def _job_name(request: Request) -> str:
    name = request.query_params.get("name")
    if name is None:
        raise UsageError("name the job: /job?name=NAME")
    return check_job(name, "name")


def worst_first(jobs: list[Job]) -> list[Job]:
    """As status lists them: worst state first, then by name."""
    return sorted(jobs, key=lambda job: (ORDER[job.state], job.name))


# ---------------------------------------------------------------- fleet


def fleet(request: Request) -> Response:
    site = _site(request)
    everything = request.query_params.get("all") == "1"
    with site.pool.connection() as conn:
        report = status.read(conn, site.schema, everything=everything)
        rates = dashboard.rates(conn, site.schema, [job.name for job in report.jobs])
    counts = Counter(str(job.state) for job in report.jobs)
    if report.unlisted:
        counts[str(State.IDLE)] += report.unlisted
    return page(request, "fleet.html", now=report.now, jobs=worst_first(report.jobs),
                rates=rates, counts=[(str(s), counts[str(s)]) for s in State if counts[str(s)]],
                total=sum(counts.values()), unlisted=report.unlisted, everything=everything,
                refresh=True)


def fleet_json(request: Request) -> Response:
    """Exactly `pglock status --json`: every job."""
    site = _site(request)
    with site.pool.connection() as conn:
        report = status.read(conn, site.schema)
    head, key, jobs, tail = screens.status_json_parts(report, site.place, site.schema)
    return as_json({**head, key: list(jobs), **tail})


# ---------------------------------------------------------------- one job


@dataclass(frozen=True)
class JobView:
    report: status.Status
    job: Job
    runs: list[history.RunRow]
    summary: history.Summary
    actions: list[history.Action]
    fires: list[datetime]


def _job_view(request: Request) -> JobView:
    site = _site(request)
    name = _job_name(request)
    count = _number(request, "runs", RUNS, 1, MOST_RUNS)
    with site.pool.connection() as conn:
        report = status.read(conn, site.schema, name)
        runs = history.recent(conn, site.schema, history.Filters(job=name, limit=count))
        actions = dashboard.audit(conn, site.schema, job=name, limit=20)
    job = report.jobs[0]
    fires = dashboard.next_fires(dashboard.plan_of(job.schedule, job.timezone), report.now)
    return JobView(report, job, runs, history.summarize(runs), actions, fires)


def job(request: Request) -> Response:
    view = _job_view(request)
    chart = charts.durations(view.runs, view.report.now, view.summary.p50, view.summary.p95)
    census = view.job.census
    line = (census_screens.census_line(view.job.name, census, view.report.now)
            if census is not None else "")
    return page(request, "job.html", now=view.report.now, job=view.job, runs=view.runs,
                summary=view.summary, audit=view.actions, fires=view.fires, chart=chart,
                state_order=ORDER, census_line=line)


def job_json(request: Request) -> Response:
    """`status --job --json`'s fields, with the runs and figures of `history --json`."""
    site, view = _site(request), _job_view(request)
    head, key, jobs, tail = screens.status_json_parts(view.report, site.place, site.schema)
    summary = view.summary
    return as_json({
        **head, key: list(jobs), **tail,
        "actions": [screens.action_json(action) for action in view.actions],
        "runs": [screens.run_json(run) for run in view.runs],
        "summary": {"runs": summary.runs, "finished": summary.finished,
                    "succeeded": summary.succeeded, "success_rate": summary.success_rate,
                    "p50": summary.p50, "p95": summary.p95, "max": summary.max},
        "next_slots": [iso(moment) for moment in view.fires]})


def _output(request: Request) -> tuple[int, str, bytes | None]:
    site = _site(request)
    if request.query_params.get("id") is None:
        raise UsageError("name the run: /run?id=ID")
    run_id = _number(request, "id", 0, 1, 2**63 - 1)
    with site.pool.connection() as conn:
        found = dashboard.output(conn, site.schema, run_id)
    if found is None:
        raise UnknownJob(f"no run {run_id} here (schema {site.schema!r})")
    return run_id, *found


def run(request: Request) -> Response:
    run_id, name, tail = _output(request)
    return page(request, "run.html", run_id=run_id, name=name, tail=tail)


def run_json(request: Request) -> Response:
    run_id, name, tail = _output(request)
    return as_json({"id": run_id, "job": name,
                    "output": None if tail is None else screens.decoded(tail)})


# ---------------------------------------------------------------- hosts


def _hosts(request: Request) -> tuple[Site, hosts.Roll]:
    site = _site(request)
    with site.pool.connection() as conn:
        return site, hosts.read(conn, site.schema)


def hosts_page(request: Request) -> Response:
    """Every host of the census, silent ones first, each with its jobs' last attempts."""
    _, found = _hosts(request)
    order = {"silent": 0, "stopping": 1, "attending": 2}
    states = {host.name: census_screens.host_state(host) for host in found.hosts}
    shown = sorted(found.hosts, key=lambda h: (order[states[h.name]], h.name))
    return page(request, "hosts.html", found=found, hosts=shown, states=states,
                refresh=True)


def hosts_json(request: Request) -> Response:
    """Exactly `pglock hosts --json`."""
    site, found = _hosts(request)
    return as_json(census_screens.hosts_json(found, site.place, site.schema))


# ---------------------------------------------------------------- timeline


def _timeline(request: Request) -> tuple[str, dashboard.Timeline]:
    site = _site(request)
    shown = request.query_params.get("range", "1d")
    span = parse_duration(shown, option="range")
    if not 60 <= span <= 31 * 86400:
        raise UsageError(f"range: {shown!r} is not within 1m..31d")
    end = request.query_params.get("end")
    until = None
    if end:
        try:
            until = datetime.fromisoformat(end)
        except ValueError:
            raise UsageError(f"end: {end!r} is not an ISO 8601 time") from None
        if until.tzinfo is None:
            raise UsageError(f"end: {end!r} has no time zone")
        until = check_moment(until, "end", end)
    jobs = list(dict.fromkeys(check_job(name, "job")
                              for name in request.query_params.getlist("job")))
    jobs = jobs[:dashboard.MOST_LANES]
    with site.pool.connection() as conn:
        for name in jobs:  # as /job and /calendar: a job never seen is a 404
            if status.one(conn, site.schema, name) is None:
                raise UnknownJob(f"no job named {name!r} has run here (schema "
                                 f"{site.schema!r})")
        found = dashboard.timeline(conn, site.schema, span, jobs=jobs or None, until=until)
    return shown, found


def timeline(request: Request) -> Response:
    shown, found = _timeline(request)
    span = found.until - found.since
    return page(request, "timeline.html", now=found.now, found=found, shown=shown,
                ranges=RANGES, chart=charts.timeline(found),
                earlier=iso(found.until - span), later=iso(found.until + span)
                if found.until + span <= found.now else None,
                selected=request.query_params.getlist("job"))


def timeline_json(request: Request) -> Response:
    _, found = _timeline(request)
    return as_json({"since": iso(found.since), "until": iso(found.until), "now": iso(found.now),
                    "lanes": found.lanes, "clipped": found.clipped,
                    "runs": [_bar_json(bar) for bar in found.bars]})


def _bar_json(bar: dashboard.Bar) -> dict[str, Any]:
    return {"id": bar.id, "job": bar.job, "started_at": iso(bar.started_at),
            "finished_at": iso(bar.finished_at), "host": bar.holder, "outcome": bar.outcome,
            "exit_code": bar.exit_code, "duration": bar.duration, "slot": iso(bar.slot),
            "attempt": bar.attempt}


# ---------------------------------------------------------------- calendar


def _calendar(request: Request) -> tuple[str | None, int, list[dashboard.Day]]:
    site = _site(request)
    days = _number(request, "days", DAYS[0], 7, 366)
    name = request.query_params.get("job") or None
    plan = None
    with site.pool.connection() as conn:
        if name is not None:
            name = check_job(name, "job")
            found = status.read(conn, site.schema, name).jobs[0]
            plan = dashboard.plan_of(found.schedule, found.timezone)
        return name, days, dashboard.calendar(conn, site.schema, days, job=name, plan=plan)


def calendar(request: Request) -> Response:
    name, days, found = _calendar(request)
    title = f"{name}: the last {days} days" if name else f"the fleet: the last {days} days"
    return page(request, "calendar.html", name=name, days=days, choices=DAYS,
                chart=charts.calendar(found, title), found=found)


def calendar_json(request: Request) -> Response:
    name, _, found = _calendar(request)
    return as_json({"job": name, "days": [
        {"day": day.day.date().isoformat(), "outcomes": day.outcomes, "dead": day.dead,
         "missed": day.missed, "look": day.look} for day in found]})


# ---------------------------------------------------------------- audit


def _audit(request: Request) -> tuple[str | None, list[history.Action]]:
    site = _site(request)
    name = request.query_params.get("job") or None
    before = _number(request, "before", 0, 1, 2**63 - 1) or None
    job = check_job(name, "job") if name else None
    with site.pool.connection() as conn:
        return name, dashboard.audit(conn, site.schema, job=job, before=before,
                                     limit=AUDIT_PAGE)


def audit(request: Request) -> Response:
    name, actions = _audit(request)
    return page(request, "audit.html", name=name, audit=actions,
                older=actions[-1].id if len(actions) == AUDIT_PAGE else None)


def audit_json(request: Request) -> Response:
    _, actions = _audit(request)
    return as_json({"actions": [screens.action_json(action) for action in actions]})
