"""The top repeated keys: how many times in its window, by which agent, which call."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import Any

from rich.text import Text
from textual import events

from breaker.protocol import KeyRow
from console.widgets.cells import clip, plain, ratio_color
from console.widgets.rows import KeyedTable, keyed

__all__ = ["KeysTable", "fit_columns", "row_keys"]


def row_keys(keys: list[KeyRow]) -> list[str]:
    """A stable row key per repeated call: its agent, tool and preview (a second call with the same
    three, possible when previews are cut short, gets `#2`)."""
    seen: Counter[str] = Counter()
    out = []
    for k in keys:
        base = f"{k.agent}\x00{k.tool}\x00{k.preview}"
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base}\x00#{seen[base]}")
    return out


COUNT_WIDTH = 7
TOOL_WIDTH = 12
PAD = 2  # a DataTable cell's padding: a blank each side
SCROLLBAR = 2  # kept free for the vertical scrollbar, so that its coming and going moves no column


def fit_columns(width: int) -> tuple[tuple[str, str, int], ...]:
    """The columns of a table `width` cells wide: the count, whose call it is, the tool when there is room (the
    call's preview starts with it anyway), then the call, which takes the rest. The agent gets two fifths of what
    the count and the tool leave (10 to 40 cells, ids clipped keeping both ends), so it is readable at 80 columns
    and no narrow column sits beside a wide blank at 200."""
    room = max(0, width - SCROLLBAR) - (COUNT_WIDTH + PAD)
    tool = room - (TOOL_WIDTH + PAD) >= 48
    if tool:
        room -= TOOL_WIDTH + PAD
    agent = min(40, max(10, room * 2 // 5))
    call = max(12, room - (agent + PAD) - PAD)
    columns = [("count", "count", COUNT_WIDTH), ("agent", "agent", agent)]
    if tool:
        columns.append(("tool", "tool", TOOL_WIDTH))
    columns.append(("call", "call", call))
    return tuple(columns)


class KeysTable(KeyedTable):
    """Reconciled by key like the agents table: the cursor stays on the same call as counts move. Its columns fit
    its width (`fit_columns`), fitted again when the width changes."""

    DEFAULT_CSS = """
    KeysTable { height: 1fr; }
    """
    COLUMNS = fit_columns(60)  # until it has a width of its own
    KEY_COLUMN = "call"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._rows: dict[str, KeyRow] = {}
        self._shown: tuple[Any, ...] | None = None  # what show() was last given: shown again in new columns

    def on_resize(self, event: events.Resize) -> None:
        columns = fit_columns(event.size.width)
        if columns == self.COLUMNS:
            return
        self.COLUMNS = columns
        self.clear(columns=True)  # a few dozen rows at most: drawn again in the new columns
        for key, label, width in columns:
            self.add_column(label, key=key, width=width)
        self._cells.clear()
        self._inputs.clear()
        self._order = []
        if self._shown is not None:
            self.show(*self._shown)

    def show(
        self,
        keys: list[KeyRow],
        limit_of: Mapping[str, int],
        exempt_of: Mapping[str, Collection[str]],
        colors: Mapping[str, str],
        name_of: Callable[[str], str] = str,
    ) -> None:
        """`keys` as rows; by each key's agent: its duplicate limit, the tools its guard exempts, how it is named."""
        self._shown = (keys, limit_of, exempt_of, colors, name_of)
        palette = tuple(colors.values())
        self._rows = dict(zip(row_keys(keys), keys, strict=True))
        limits = {key: limit_of.get(k.agent) or 1 for key, k in self._rows.items()}  # 1: its agent is gone
        exempt = {key: k.tool in exempt_of.get(k.agent, ()) for key, k in self._rows.items()}
        widths = {key: width for key, _label, width in self.COLUMNS}
        tool_shown = "tool" in widths

        def render(key: str) -> tuple[Text, ...]:
            k, limit = self._rows[key], limits[key]
            exempt_style = colors["exempt"] if exempt[key] else ""
            cells = {
                "count": Text(f"{k.count}/{limit}", style=ratio_color(k.count / limit, colors), justify="right"),
                "agent": plain(clip(name_of(k.agent), widths["agent"]), style=colors["muted"]),
                "tool": plain(clip(k.tool, TOOL_WIDTH), style=exempt_style),
                "call": keyed(plain(k.preview, style="" if tool_shown else exempt_style), key),
            }
            return tuple(cells[column] for column in widths)

        rows = [(key, (k.count, limits[key], exempt[key], palette)) for key, k in self._rows.items()]
        self.show_rows(rows, render)

    def current(self) -> KeyRow | None:
        """The repeated call under the cursor."""
        return self._rows.get(self.selected) if self.selected is not None else None
