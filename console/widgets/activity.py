"""The last minutes at a glance: the guard's checks per second as bars, the seconds with denies in the trip colour."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.widgets import Static

from console.state import Activity, ActivitySecond

__all__ = ["ActivityChart", "activity_label", "bars"]

_LEVELS = "▁▂▃▄▅▆▇█"  # an eighth of a row to a full row
_ROOM = 12  # the fewest columns of bars worth drawing after the label, on one line


def _span(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def activity_label(tallies: Sequence[ActivitySecond], colors: Mapping[str, str]) -> Text:
    """`activity · last 5 min · peak 47 checks/s · 12 denies`: the busiest second and the denies over the span."""
    peak = max((t.checks for t in tallies), default=0)
    denies = sum(t.denies for t in tallies)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"activity · last {_span(len(tallies))} · peak ", style=colors["muted"])
    text.append(f"{peak:,} checks/s", style="bold" if peak else colors["muted"])
    text.append(" · ", style=colors["muted"])
    text.append(f"{denies:,} denies", style=f"bold {colors['trip']}" if denies else colors["muted"])
    return text


def bars(tallies: Sequence[ActivitySecond], width: int, rows: int, colors: Mapping[str, str]) -> Text:
    """`rows` lines of bars `width` cells wide, newest on the right: each column the checks per second of its
    seconds (all of them: a column stands for several seconds when the width is less than their number),
    scaled to the busiest column. A column's cells that its denies reach are in the trip colour, at least
    its lowest: a burst of denies shows however few checks are denied. An idle column is a muted baseline."""
    n = len(tallies)
    cols = min(width, n)
    if cols <= 0 or rows <= 0:
        return Text()
    checks: list[float] = []
    denies: list[float] = []
    for c in range(cols):
        part = tallies[c * n // cols : (c + 1) * n // cols]
        checks.append(sum(t.checks for t in part) / len(part))
        denies.append(sum(t.denies for t in part) / len(part))
    top = max(checks) or 1.0
    levels = rows * 8

    def height(value: float) -> int:
        return 0 if value <= 0 else max(1, min(levels, round(value / top * levels)))

    heights = [height(v) for v in checks]
    deny_heights = [height(v) for v in denies]
    lines: list[Text] = []
    for row in reversed(range(rows)):  # the top row first
        line = Text(" " * (width - cols), no_wrap=True)
        run, run_style = "", ""
        floor = row * 8
        for h, d in zip(heights, deny_heights, strict=True):
            fill = h - floor
            if h == 0:
                char, style = ("▁", colors["muted"]) if row == 0 else (" ", "")
            elif fill <= 0:
                char, style = " ", ""
            else:
                char, style = _LEVELS[min(fill, 8) - 1], colors["trip"] if d > floor else colors["ok"]
            if style != run_style and run:
                line.append(run, style=run_style)
                run = ""
            run, run_style = run + char, style
        line.append(run, style=run_style)
        lines.append(line)
    return Text("\n", no_wrap=True).join(lines)


class ActivityChart(Static):
    """The label over two lines of bars; on a short terminal one line, the bars after the label (the agents
    table keeps its rows). Drawn when what it shows changed: a second passed, the guard's counters moved
    into a new second, the size or the colours changed."""

    DEFAULT_CSS = """
    ActivityChart { height: 3; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    _shown: tuple[Activity, float, Mapping[str, str]] | None = None  # what show() was last given
    _key: tuple[object, ...] = ()

    def show(self, activity: Activity, now: float, colors: Mapping[str, str]) -> None:
        """Draw the seconds before `now` (the state's clock: a screenshot with a frozen clock is the same)."""
        self._shown = (activity, now, colors)
        width, height = self.content_size
        key = (int(now), activity.second, width, height, tuple(colors.items()))
        if key == self._key:
            return
        self._key = key
        tallies = activity.last(now)
        text = activity_label(tallies, colors)
        if height > 1:
            text = Text("\n", no_wrap=True).join([text, bars(tallies, width, height - 1, colors)])
        elif width - text.cell_len > _ROOM:
            text.append(" ")
            text.append_text(bars(tallies, width - text.cell_len, 1, colors))
        self.update(text, layout=False)  # its height is its CSS's

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)
