"""The drill-down's live call tail: one line per call, newest at the bottom, drawn only where visible.

A ScrollView over the FollowState's calls (Textual's line API): at 1,000 calls a second the screen
renders the lines in view, never a row per call. The cursor follows the newest call until the operator
moves it; `end` follows again."""

from __future__ import annotations

import time
from collections.abc import Mapping

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from breaker.protocol import CallRow
from console.follow import FollowState
from console.widgets.cells import plain

__all__ = ["HEADER", "CallTail", "call_line"]

HEADER = f"{'time':<8}  {'call':<5} {'n/limit':>9} {'rule':<9}  tool and args"
_WORDS = {"allow": "allow", "warn": "warn", "deny": "DENY", "pass": "pass"}


def call_line(call: CallRow, colors: Mapping[str, str]) -> Text:
    """`12:03:04  DENY      6/6 duplicate  web_search query="x"`: the preview is untrusted, so plain text."""
    color = {"deny": colors["trip"], "warn": colors["warn"], "pass": colors["muted"]}.get(call.decision, colors["ok"])
    tally = f"{call.count}/{call.limit}" if call.limit else ("—" if call.decision == "pass" else str(call.count))
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    text.append(time.strftime("%H:%M:%S", time.localtime(call.time)) if call.time else " " * 8, style=colors["muted"])
    text.append("  ")
    text.append_text(plain(f"{_WORDS.get(call.decision, call.decision[:5]):<5}", style=f"bold {color}"))
    text.append(f" {tally:>9} ")
    text.append_text(plain(f"{call.rule[:9]:<9}", style=color if call.rule else ""))
    text.append("  ")
    text.append_text(plain(call.preview))
    return text


class CallTail(ScrollView, can_focus=True):
    """The followed agent's calls. `selected` is the number of the call under the cursor (None: the newest)."""

    DEFAULT_CSS = """
    CallTail { height: 1fr; min-height: 3; overflow-x: hidden; }
    """
    BINDINGS = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "move(-10)", "Page up", show=False),
        Binding("pagedown", "move(10)", "Page down", show=False),
        Binding("home", "first", "Oldest", show=False),
        Binding("end", "follow", "Follow", show=False),
    ]

    def __init__(self, follow: FollowState, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.follow = follow
        self.palette: Mapping[str, str] = {}
        self.selected: int | None = None
        self._lines: dict[int, Strip] = {}  # call number -> its line, rendered once (calls never change)

    # -- data -----------------------------------------------------------------------------------

    def show(self, colors: Mapping[str, str]) -> None:
        """Draw the calls as they are now."""
        if colors != self.palette:
            self.palette = dict(colors)
            self._lines.clear()
        follow = self.follow
        first = follow.first
        for number in [n for n in self._lines if n < first]:
            del self._lines[number]
        if self.selected is not None and self.selected < first:
            self.selected = first if follow.calls else None
        self.virtual_size = Size(0, len(follow.calls))  # lines are cut to the width: nothing to scroll sideways
        if self.selected is None:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
        self.refresh()

    @property
    def current(self) -> CallRow | None:
        """The call under the cursor: the selected one, or the newest."""
        calls = self.follow.calls
        if not calls:
            return None
        if self.selected is None:
            return calls[-1]
        return calls[self.selected - self.follow.first]

    # -- drawing --------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        follow = self.follow
        index = self.scroll_offset.y + y
        width = self.size.width
        if not 0 <= index < len(follow.calls) or not self.palette:
            return Strip.blank(width, self.rich_style)
        number = follow.first + index
        strip = self._lines.get(number)
        if strip is None:
            text = call_line(follow.calls[index], self.palette)
            strip = self._lines[number] = Strip(list(text.render(self.app.console)))
        cursor = number == (self.selected if self.selected is not None else follow.received)
        line = strip.crop(self.scroll_offset.x, self.scroll_offset.x + width).extend_cell_length(width)
        line = line.apply_style(self.rich_style)
        if cursor and (self.has_focus or self.selected is not None):
            line = Strip(Segment.apply_style(line, post_style=Style(reverse=True)), width)  # type: ignore[arg-type]
        return line

    # -- keys -----------------------------------------------------------------------------------

    def action_move(self, by: int) -> None:
        follow = self.follow
        if not follow.calls:
            return
        current = self.selected if self.selected is not None else follow.received
        self.selected = min(max(current + by, follow.first), follow.received)
        self._reveal()

    def action_first(self) -> None:
        if self.follow.calls:
            self.selected = self.follow.first
            self._reveal()

    def action_follow(self) -> None:
        self.selected = None
        self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
        self.refresh()

    def _reveal(self) -> None:
        assert self.selected is not None
        row = self.selected - self.follow.first
        self.scroll_to_region(Region(0, row, 1, 1), animate=False, immediate=True, force=True)
        self.refresh()
