"""How the operator commands print: rich on a terminal, plain aligned text when piped, JSON.

rich is imported only inside the functions that draw on a terminal, so that `pglock run`
never pays for it. Plain text carries no escape sequence: it lands in mail and in files.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pglock.errors import OutputFailed, PglockError
from pglock.settings.durations import format_duration
from pglock.settings.text import escaped as escaped  # status's, kept below check and hooks

NONE = "-"
NOTE_WIDTH = 70
# stream_json writes once this many characters of items are ready.
STREAM_CHUNK = 1 << 16


@dataclass
class Grid:
    """A table in the making: headers, rows of cells, a style per row for the terminal,
    and lines to show under a row (dim on a terminal), such as a run's output."""

    headers: Sequence[str]
    rows: list[list[str]] = field(default_factory=list)
    styles: list[str] = field(default_factory=list)
    details: list[list[str] | None] = field(default_factory=list)
    # Cells of this column get the row's style on a terminal; the others stay plain.
    styled_column: int = 0
    # Headers of the columns a narrow terminal may drop, least needed first.
    optional: Sequence[str] = ()
    # The header of the column a narrow terminal must never cut (the job's name): the
    # other columns wrap first.
    whole: str | None = None

    def add(self, cells: list[str], style: str = "", detail: list[str] | None = None) -> None:
        self.rows.append(cells)
        self.styles.append(style)
        self.details.append(detail)


@dataclass
class Screen:
    """What one command prints: a header line, tables, and lines of text, in order."""

    header: str
    parts: list[Grid | str] = field(default_factory=list)


def on_terminal() -> bool:
    return sys.stdout.isatty()


def show(screen: Screen) -> None:
    """Print the screen: rich tables on a terminal, aligned plain text otherwise."""
    if on_terminal():
        from rich.console import Console

        console = Console(highlight=False)
        with _writing():
            console.print(renderable(screen, console.width))
    else:
        write(plain(screen))


def folded(line: str, indent: int) -> str:
    """On a terminal, `line` folded at words to the terminal's width, each further line
    indented by `indent` (a long finding reads as a paragraph beside its label, not as a
    line the terminal breaks anywhere); elsewhere, as it is (one line for grep and mail)."""
    if not on_terminal():
        return line
    import shutil
    import textwrap

    width = shutil.get_terminal_size().columns
    return "\n".join(textwrap.wrap(line, width=max(width, indent + 20),
                                   subsequent_indent=" " * indent,
                                   break_on_hyphens=False)) or line


def show_json(document: dict[str, Any]) -> None:
    write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def stream_json(head: dict[str, Any], key: str, items: Iterable[dict[str, Any]],
                tail: dict[str, Any]) -> None:
    """One JSON object written as it is made: `head`'s keys, then `key`'s list with one
    item a line (each encoded as it comes, in compact form: with 10,000 items the indented
    encoder alone would cost half a second), then `tail`'s keys."""
    def encoded(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    buffer = [encoded(head)[:-1] + (", " if head else "") + f"{encoded(key)}: ["]
    size = 0
    first = True
    for item in items:
        text = encoded(item)
        buffer.append(("\n" if first else ",\n") + text)
        first = False
        size += len(text)
        if size > STREAM_CHUNK:
            write("".join(buffer))
            buffer, size = [], 0
    buffer.append("\n]" if not first else "]")
    buffer.append(", " + encoded(tail)[1:] if tail else "}")
    write("".join(buffer) + "\n")


def write(text: str) -> None:
    """Write to standard output now; OutputFailed if its reader went away or the disk is
    full (the CLI says so in one line, or nothing for a closed pipe)."""
    with _writing():
        sys.stdout.write(text)
        sys.stdout.flush()


def write_pieces(pieces: Iterable[str]) -> None:
    """As write(), a piece at a time: a large output is never held whole."""
    with _writing():
        for piece in pieces:
            sys.stdout.write(piece)
        sys.stdout.flush()


@contextlib.contextmanager
def _writing() -> Iterator[None]:
    try:
        yield
    except OSError as error:
        raise OutputFailed(error) from error


def plain(screen: Screen) -> str:
    """The screen as plain text with columns aligned by spaces."""
    lines = [screen.header, ""]
    for part in screen.parts:
        lines.extend(_plain_grid(part) if isinstance(part, Grid) else [part])
    return "\n".join(lines) + "\n"


def _plain_grid(grid: Grid) -> list[str]:
    shown = list(range(len(grid.headers)))
    widths = _widths(grid)
    lines = [_aligned(list(grid.headers), shown, widths)]
    for row, detail in zip(grid.rows, grid.details, strict=True):
        lines.append(_aligned(row, shown, widths))
        lines.extend(detail or ())
    return lines


def cells(text: str) -> int:
    """How many terminal columns `text` takes: a CJK character or an emoji takes two,
    a combining mark none (rich's measure, the one its tables use)."""
    from rich.cells import cell_len

    return cell_len(text)


def _widths(grid: Grid) -> list[int]:
    """Each column's widest cell in terminal columns, header included."""
    return [max(cells(row[i]) for row in [grid.headers, *grid.rows])
            for i in range(len(grid.headers))]


def _padded(text: str, width: int) -> str:
    return text + " " * (width - cells(text))


def _aligned(row: list[str], shown: list[int], widths: list[int]) -> str:
    """One row of the `shown` columns, each padded to its width, two spaces apart."""
    return "  ".join(_padded(row[i], widths[i]) for i in shown).rstrip()


def renderable(screen: Screen, width: int) -> Any:
    """The screen as a rich renderable for a terminal `width` columns wide."""
    from rich.console import Group
    from rich.text import Text

    items: list[Any] = [Text(screen.header, style="bold")]
    for part in screen.parts:
        if not isinstance(part, Grid):
            items.append(Text(part))
            continue
        shown, hidden = fitting(part, width)
        if any(part.details):
            items.extend(_detailed(part, shown))
        else:
            items.append(_table(part, shown, width))
        if hidden:
            items.append(Text(f"(too narrow for {', '.join(hidden)}: widen the terminal, "
                              "pipe the output, or use --json)", style="dim"))
    return Group(*items)


def _table(part: Grid, shown: list[int], width: int) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold")
    widths = _widths(part)
    for i in shown:
        if part.headers[i] != part.whole:
            # Beside a column kept whole, the others are the ones rich may narrow.
            table.add_column(part.headers[i], no_wrap=part.whole is None, overflow="ellipsis")
        elif widths[i] + 4 <= width:
            table.add_column(part.headers[i], no_wrap=True, width=widths[i])
        else:
            # A terminal narrower than the name itself: folded onto more lines, never cut.
            table.add_column(part.headers[i], overflow="fold")
    for row, style in zip(part.rows, part.styles, strict=True):
        table.add_row(*(Text(row[i], style=style if i == part.styled_column else "")
                        for i in shown))
    return table


def _detailed(part: Grid, shown: list[int]) -> list[Any]:
    """A grid with lines under its rows: aligned as in plain text (a rich table has no cell
    spanning the row), the styled column in the row's style, the lines under a row dim."""
    from rich.text import Text

    widths = _widths(part)
    # The blank line a table's box would draw above its headers.
    lines = [Text(""), Text(_aligned(list(part.headers), shown, widths), style="bold",
                            no_wrap=True, overflow="ellipsis")]
    for row, style, detail in zip(part.rows, part.styles, part.details, strict=True):
        line = Text(no_wrap=True, overflow="ellipsis")
        for n, i in enumerate(shown):
            line.append("  " if n else "")
            line.append(row[i], style=style if i == part.styled_column else "")
            line.append(" " * (widths[i] - cells(row[i])))
        line.rstrip()
        lines.append(line)
        lines.extend(Text(text, style="dim") for text in detail or ())
    return lines


def fitting(grid: Grid, width: int) -> tuple[list[int], list[str]]:
    """The columns that fit in `width`, dropping the optional ones in their order, then (for
    a grid with a column kept whole) the others from the right but that one and the styled
    one; and the headers dropped. A narrow terminal loses whole columns, not the ends of
    every cell."""
    widths = [w + 3 for w in _widths(grid)]
    shown = list(range(len(grid.headers)))
    hidden: list[str] = []
    droppable = [grid.headers.index(title) for title in grid.optional]
    if grid.whole is not None:
        kept = (grid.headers.index(grid.whole), grid.styled_column)
        droppable += [i for i in reversed(shown) if i not in kept and i not in droppable]
    for i in droppable:
        if sum(widths[j] for j in shown) <= width:
            break
        shown.remove(i)
        hidden.append(grid.headers[i])
    return shown, hidden


def watch(build: Callable[[], Screen], interval: float) -> int:
    """Redraw the screen every `interval` seconds until Ctrl-C (in place on a terminal)."""
    try:
        good = build()
        if not on_terminal():
            shown = good
            while True:
                show(shown)
                time.sleep(interval)
                good, shown = _refreshed(build, good)
        from rich.live import Live

        with Live(auto_refresh=False, redirect_stderr=False) as live:
            shown = good
            while True:
                live.update(renderable(shown, live.console.width), refresh=True)
                time.sleep(interval)
                good, shown = _refreshed(build, good)
    except KeyboardInterrupt:
        return 0


def _refreshed(build: Callable[[], Screen], good: Screen) -> tuple[Screen, Screen]:
    """(last good screen, screen to show): a failed refresh keeps the last good screen
    on show, with the reason under it, so a database blip does not end the watch."""
    try:
        fresh = build()
        return fresh, fresh
    except PglockError as error:
        moment = when(datetime.now().astimezone())
        return good, Screen(good.header, [*good.parts, f"\nrefresh failed at {moment}: {error}"])


def header(command: str, place: str, schema: str, now: datetime) -> str:
    return (f"pglock {command}: {escaped(place)}, schema {escaped(schema)}, "
            f"at {when(now, zone=True)}")


def when(moment: datetime | None, *, zone: bool = False) -> str:
    """A timestamp in the operator's local time."""
    if moment is None:
        return NONE
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S" + (" %Z" if zone else ""))


def ago(seconds: float | None, never: str = NONE) -> str:
    return never if seconds is None else f"{format_duration(max(0.0, seconds))} ago"


def took(seconds: float | None) -> str:
    return NONE if seconds is None else format_duration(seconds)


def clip(text: str | None, width: int = NOTE_WIDTH) -> str:
    """One line of at most `width` characters, escaped."""
    if not text:
        return ""
    line = escaped(" ".join(text.split()))
    return line if len(line) <= width else line[: width - 3] + "..."


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
