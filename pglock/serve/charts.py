"""The dashboard's charts as inline SVG, drawn on the server: no script, no library.

Every text that came from a user (a job name, a holder) goes through `_text`, and every
class an outcome gives is one of OUTCOMES: nothing from the database reaches the markup
as markup. Colours live in static/pglock.css (by class), so the page's strict CSP needs
no inline style.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from html import escape
from urllib.parse import urlencode

from markupsafe import Markup

from pglock.cli.render import escaped
from pglock.lock.ledger import Outcome
from pglock.reports.dashboard import Day, Timeline
from pglock.reports.history import RunRow

# The classes a run's outcome may give (anything else is drawn as "other").
OUTCOMES = frozenset({str(o) for o in Outcome} | {"dead", "missed", "none"})

WIDTH = 960
CHART_HEIGHT = 260
LANE = 18
LABEL = 200
PAD = 36


def _text(value: object) -> str:
    """User text for SVG: control characters shown, then escaped as XML."""
    return escape(escaped(str(value)), quote=True)


def look(outcome: str) -> str:
    return outcome if outcome in OUTCOMES else "other"


def took(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def job_href(name: str) -> str:
    return "/job?" + urlencode({"name": name})


def host_id(name: str) -> str:
    """A host's row on the hosts page, as an id and a fragment: a name is data (spaces,
    quotes, anything), its digest is not."""
    import hashlib

    return "host-" + hashlib.sha256(name.encode(errors="surrogateescape")).hexdigest()[:16]


def durations(runs: Sequence[RunRow], now: datetime, p50: float | None,
              p95: float | None) -> Markup:
    """The last runs' durations, oldest left: a bar per run coloured by outcome, a ring
    above a retry (attempt > 1), a line at p50 and one at p95; a running run is drawn
    up to now."""
    shown = [run for run in reversed(runs) if run.outcome != Outcome.CLEARED]
    if not shown:
        return Markup('<p class="empty">no runs yet</p>')
    lengths = [_length(run, now) for run in shown]
    top = max([v for v in lengths if v is not None] + [p95 or 0, 0.001]) * 1.1
    left, bottom, right = PAD + 24, CHART_HEIGHT - PAD, WIDTH - 96
    height = bottom - PAD
    step = (right - left) / len(shown)
    parts = [f'<svg class="chart durations" viewBox="0 0 {WIDTH} {CHART_HEIGHT}" '
             f'role="img" aria-label="durations of the last {_runs(len(shown))}">',
             f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
             f'<text class="tick" x="{left - 4}" y="{bottom}" text-anchor="end">0</text>',
             f'<text class="tick" x="{left - 4}" y="{PAD + 4}" text-anchor="end">'
             f'{took(top)}</text>']
    for i, (run, length) in enumerate(zip(shown, lengths, strict=True)):
        x = left + i * step
        h = 0.0 if length is None else max(1.0, height * length / top)
        what = (f"run {run.id} at {run.started_at:%Y-%m-%d %H:%M:%S}: {run.outcome}, "
                f"{took(length)}" + (f", attempt {run.attempt}" if run.attempt else "")
                + f" on {run.holder}")
        parts.append(f'<rect class="run o-{look(run.outcome)}" x="{x + step * 0.1:.1f}" '
                     f'y="{bottom - h:.1f}" width="{max(1.0, step * 0.8):.1f}" '
                     f'height="{h:.1f}"><title>{_text(what)}</title></rect>')
        if run.attempt is not None and run.attempt > 1:
            parts.append(f'<circle class="retry" cx="{x + step / 2:.1f}" '
                         f'cy="{bottom - h - 6:.1f}" r="3.5"><title>retry: attempt '
                         f'{run.attempt}</title></circle>')
    for name, value in (("p50", p50), ("p95", p95)):
        if value is not None:
            y = bottom - height * value / top
            parts.append(f'<line class="{name}" x1="{left}" y1="{y:.1f}" x2="{right}" '
                         f'y2="{y:.1f}"/><text class="tick {name}" x="{right + 4}" '
                         f'y="{y + 4:.1f}">{name} {took(value)}</text>')
    first, last = shown[0].started_at, shown[-1].started_at
    parts.append(f'<text class="tick" x="{left}" y="{bottom + 16}">{first:%Y-%m-%d %H:%M}</text>'
                 f'<text class="tick" x="{right}" y="{bottom + 16}" text-anchor="end">'
                 f'{last:%Y-%m-%d %H:%M}</text></svg>')
    return Markup("".join(parts))


def _length(run: RunRow, now: datetime) -> float | None:
    if run.duration is not None:
        return run.duration
    if run.outcome == Outcome.RUNNING:
        return max(0.0, (now - run.started_at).total_seconds())
    return None


def timeline(found: Timeline) -> Markup:
    """One lane per job, a bar per run from its start to its end (or now), coloured by
    outcome; ticks along the window."""
    if not found.lanes:
        return Markup('<p class="empty">no runs in this range</p>')
    span = (found.until - found.since).total_seconds()
    inner = WIDTH - LABEL - PAD
    height = PAD + LANE * len(found.lanes) + PAD
    row = {job: i for i, job in enumerate(found.lanes)}

    def x(moment: datetime) -> float:
        offset = (moment - found.since).total_seconds() / span
        return LABEL + inner * min(1.0, max(0.0, offset))

    parts = [f'<svg class="chart timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="runs of {len(found.lanes)} jobs over time">']
    for job, i in row.items():
        y = PAD + i * LANE
        parts.append(f'<rect class="lane" x="{LABEL}" y="{y}" width="{inner}" '
                     f'height="{LANE - 2}"/><a href="{escape(job_href(job))}">'
                     f'<text class="label" x="{LABEL - 6}" y="{y + LANE - 6}" '
                     f'text-anchor="end">{_text(_clipped(job))}</text></a>')
    for bar in found.bars:
        if bar.job not in row:
            continue
        y = PAD + row[bar.job] * LANE
        start, end = x(bar.started_at), x(bar.finished_at or found.now)
        what = (f"{bar.job}: run {bar.id} at {bar.started_at:%Y-%m-%d %H:%M:%S}, "
                f"{bar.outcome}, {took(bar.duration)} on {bar.holder}"
                + (f", attempt {bar.attempt}" if bar.attempt and bar.attempt > 1 else ""))
        parts.append(f'<rect class="run o-{look(bar.outcome)}" x="{start:.1f}" y="{y + 2}" '
                     f'width="{max(1.5, end - start):.1f}" height="{LANE - 6}">'
                     f'<title>{_text(what)}</title></rect>')
    for i in range(7):
        moment = found.since + timedelta(seconds=span * i / 6)
        tx = LABEL + inner * i / 6
        label = f"{moment:%H:%M}" if span <= 86400 else f"{moment:%m-%d %H:%M}"
        parts.append(f'<line class="grid" x1="{tx:.1f}" y1="{PAD - 4}" x2="{tx:.1f}" '
                     f'y2="{height - PAD + 4}"/><text class="tick" x="{tx:.1f}" '
                     f'y="{height - PAD + 18}" text-anchor="middle">{label}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _clipped(name: str, width: int = 28) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


# A calendar's cells are of one size whatever the window, as a contribution graph draws
# them: 30 days or 366, a cell is CELL pixels, and the drawing is as wide as its weeks.
CELL, GAP = 12, 3
DAY_LABELS = 30
MONTH_LABELS = 16


def calendar(days: Sequence[Day], title: str) -> Markup:
    """A cell per day (UTC), a column per week (Monday on top), coloured by the worst of
    the day; the month above the week it begins in; the date and counts on hover."""
    if not days:
        return Markup("")
    step = CELL + GAP
    offset = days[0].day.weekday()
    weeks = (offset + len(days) + 6) // 7
    width, height = DAY_LABELS + weeks * step, MONTH_LABELS + 7 * step
    parts = [f'<svg class="chart calendar" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_text(title)}">']
    for i, name in enumerate(("Mon", "", "Wed", "", "Fri", "", "Sun")):
        if name:
            parts.append(f'<text class="tick" x="{DAY_LABELS - 4}" '
                         f'y="{MONTH_LABELS + i * step + CELL - 2}" '
                         f'text-anchor="end">{name}</text>')
    for i, day in enumerate(days):
        where = offset + i
        x = DAY_LABELS + (where // 7) * step
        y = MONTH_LABELS + (where % 7) * step
        if day.day.day == 1 or (i == 0 and day.day.day < 22):
            parts.append(f'<text class="tick month" x="{x}" y="{MONTH_LABELS - 4}">'
                         f'{day.day:%b}</text>')
        counts = ", ".join(f"{n} {o}" for o, n in sorted(day.outcomes.items())) or "no runs"
        extra = (f", {day.dead} dead slots" if day.dead else "") + (
            f", {day.missed} missed slots" if day.missed else "")
        parts.append(f'<rect class="day o-{look(day.look)}" x="{x}" y="{y}" width="{CELL}" '
                     f'height="{CELL}" rx="2"><title>{day.day:%a %Y-%m-%d}: '
                     f'{_text(counts + extra)}</title></rect>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _runs(count: int) -> str:
    return "run" if count == 1 else f"{count} runs"
