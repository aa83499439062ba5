"""The trips as they happen: newest at the bottom, bounded; scrolled up, it says how many are new."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from rich.text import Text
from textual.widgets import DataTable

from breaker.protocol import TripRow
from console.widgets.cells import clip, kind_color, plain

__all__ = ["TripsTable"]

COLUMNS = (("time", "time", 8), ("agent", "agent", 14), ("kind", "kind", 11), ("tool", "tool", 14), ("n", "count", 7))
MAX_ROWS = 500


class TripsTable(DataTable):
    """Each trip — an agent's first deny of a kind — as a row, in the order they came."""

    DEFAULT_CSS = """
    TripsTable { height: 1fr; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self._next = 0
        self.unseen = 0  # trips added while the user was scrolled away from the bottom
        # Following the newest trip until the user scrolls away (not "at the bottom now": rows added before the
        # last scroll to the end has run would read as scrolled away, and the log would stop following)
        self._following = True

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    @property
    def at_bottom(self) -> bool:
        return self.scroll_y >= self.max_scroll_y

    def add_trips(self, trips: list[TripRow], colors: Mapping[str, str], name_of: Callable[[str], str] = str) -> None:
        if not trips:
            return
        follow = self._following or self.row_count == 0
        if len(trips) >= MAX_ROWS:  # a flood (thousands of agents tripping at once): only the newest are kept
            self.clear()
            trips = trips[-MAX_ROWS:]
        for trip in trips:
            kind = trip.kind
            stamp = time.strftime("%H:%M:%S", time.localtime(trip.time)) if trip.time else "--:--:--"
            self.add_row(
                Text(stamp, style="dim"),
                plain(clip(name_of(trip.agent), 14)),
                plain(kind, style=kind_color(kind, colors)),
                plain(clip(trip.tool, 14)),
                Text(f"{trip.count}/{trip.limit}" if kind != "interrupted" else "—", justify="right"),
                key=str(self._next),
            )
            self._next += 1
        while self.row_count > MAX_ROWS:  # each removal re-indexes the rows: at most a batch's worth, not a flood
            self.remove_row(str(self._next - self.row_count))
        if follow:
            self.unseen = 0
            self.call_after_refresh(self._to_newest)
        else:
            self.unseen += len(trips)

    def _to_newest(self) -> None:
        # Laid out: the newest row can be scrolled to, unless the user scrolled away since it came. At once:
        # scroll_end's own deferral would scroll after a scroll the user made in between, and undo it.
        if self._following:
            self.scroll_end(animate=False, immediate=True)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._following = self.at_bottom
        if self._following:
            self.unseen = 0
