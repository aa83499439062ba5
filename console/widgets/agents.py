"""The agents table: one row per agent, most dangerous first (or as a tree), reconciled by row key; as many
columns as fit."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import CellType, ColumnKey, RowKey

from console.state import Agent, ShownAgent
from console.widgets.cells import age, clip, gauge, plain, ratio_color, sparkline, status_text
from console.widgets.rows import KeyedTable, KeyedText, batched_writes, keyed, update_cells

__all__ = [
    "AGENT_MIN_WIDTH",
    "AGENT_WIDTH",
    "ALWAYS",
    "ROOM_ORDER",
    "STATUS_WIDTH",
    "TOOL_WIDTH",
    "AgentsTable",
    "fit_columns",
    "resizable",
]

AGENT_WIDTH = 24
AGENT_MIN_WIDTH = 16  # an id cut to 16 still shows both ends (clip keeps them); narrower, ids blur together
TOOL_WIDTH = 13
STATUS_WIDTH = 18  # "warned · duplicate"

# Who, its status and how close its worst repeat is to the limit: shown at any width.
ALWAYS = ("mark", "agent", "status", "worst")
# What gets room next, in this order; on a narrowing terminal the last goes first. `cap` (calls against
# maxCallsPerAgent, which also says the calls) is the other limit; then the id in full ("agent"); `calls`
# alone; the last tool (what it is doing); the age of its last call (whether it still runs); the window's
# fill; the calls/s sparkline; harness and parent, which the detail line shows anyway.
ROOM_ORDER = ("cap", "agent", "calls", "tool", "age", "window", "rate", "harness", "parent")


def fit_columns(width: int, padding: int = 1) -> tuple[frozenset[str], int]:
    """The columns that fit in `width` cells without scrolling sideways, and the agent column's width.

    ALWAYS are shown (below ~55 cells they scroll); the others are given room in ROOM_ORDER, stopping at
    the first that does not fit, so a narrower terminal drops the lowest first and never skips one."""
    widths = {key: w for key, _label, w in AgentsTable.COLUMNS}
    pad = 2 * padding
    agent = AGENT_MIN_WIDTH
    room = width - sum(widths[key] + pad for key in ALWAYS if key != "agent") - (agent + pad)
    shown = set(ALWAYS)
    for key in ROOM_ORDER:
        if key == "agent":
            grow = max(0, min(AGENT_WIDTH - agent, room))
            agent += grow
            room -= grow
            if agent < AGENT_WIDTH:
                break
            continue
        if widths[key] + pad > room:
            break
        shown.add(key)
        room -= widths[key] + pad
    return frozenset(shown), agent


def resizable(table: DataTable) -> bool:
    """Whether `table` keeps, besides what `batched_writes` needs, the two DataTable 8.2 internals a column
    change uses: `_updated_cells` (cells whose width `add_column` has measured on idle: at 10k rows a
    re-added column costs O(rows²) measures) and `_require_update_dimensions` (re-derive the scrollable
    width after a column's width changed). Pinned by a test; without them a change takes the slow path."""
    return (
        batched_writes(table)
        and isinstance(getattr(table, "_updated_cells", None), set)
        and isinstance(getattr(table, "_require_update_dimensions", None), bool)
    )


class AgentsTable(KeyedTable):
    """Agents with live counts, keyed by agent id. The cursor follows the selected agent, not a row index.

    The columns that do not fit the width are taken out (`hidden`; the detail line shows them) and put
    back when the terminal widens, from the cells the table already keeps: a resize renders no row."""

    DEFAULT_CSS = """
    AgentsTable { height: 1fr; }
    AgentsTable > .datatable--cursor { text-style: bold; }
    """
    COLUMNS = (
        ("mark", " ", 1),
        ("agent", "agent", AGENT_WIDTH),
        ("status", "status", STATUS_WIDTH),  # the status word itself, and for `warned` the rule that warned
        ("calls", "calls", 5),
        ("worst", "worst repeat", 12),
        ("cap", "cap", 8),
        ("window", "window", 8),
        ("tool", "last tool", TOOL_WIDTH),
        ("age", "age", 5),
        ("rate", "calls/s", 12),
        ("harness", "harness", 10),
        ("parent", "parent", 10),
    )
    KEY_COLUMN = "agent"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.agent_width = AGENT_WIDTH
        self._tree: dict[str, tuple[str, bool]] = {}  # each tree row's glyphs and context flag (see ShownAgent)
        self._shown: tuple[str, ...] = tuple(key for key, _label, _width in self.COLUMNS)  # in table order

    @property
    def shown(self) -> tuple[str, ...]:
        """The keys of the columns on screen, in table order."""
        return self._shown

    @property
    def hidden(self) -> frozenset[str]:
        """The keys of the columns taken out for want of width."""
        return frozenset(key for key, _label, _width in self.COLUMNS if key not in self._shown)

    def agent_cell(self, key: str, glyphs: str = "", context: bool = False) -> KeyedText:
        """The id cut to what the agent column leaves beside the tree glyphs; dim when shown only as context."""
        cell = plain(clip(key, self.agent_width - len(glyphs)), style="dim" if context else "")
        if glyphs:
            cell = Text.assemble((glyphs, "dim"), cell, no_wrap=True, overflow="ellipsis")
        return keyed(cell, key)

    def render_row(
        self,
        agent: Agent,
        now: float,
        marked: bool,
        colors: Mapping[str, str],
        glyphs: str = "",
        context: bool = False,
    ) -> tuple[Text, ...]:
        d = agent.data
        cap = d.cap
        calls = d.calls
        if cap:
            cap_cell = Text(f"{calls}/{cap}", style=ratio_color(calls / cap, colors) if calls / cap >= 0.5 else "")
        else:
            cap_cell = Text(f"{calls}/∞", style="dim")
        worst = gauge(d.worst_count, d.duplicate_limit or 1, colors, width=4)
        if d.override:  # the operator gave it limits of its own: the cell of each says so with a `*`
            if "maxCallsPerAgent" in d.override:
                cap_cell.append("*", style=f"bold {colors['warn']}")
            if "duplicateLimit" in d.override:
                worst.append("*", style=f"bold {colors['warn']}")
        last_seen = d.last_seen
        rate_color = colors["ok"] if d.status == "ok" else colors["warn"] if d.status == "warned" else colors["trip"]
        return (
            Text("●" if marked else " ", style=colors["warn"]),
            self.agent_cell(agent.id, glyphs, context),
            status_text(d.status, d.rule, colors),
            Text(str(calls), justify="right"),
            worst,
            cap_cell,
            Text(f"{d.window_fill}/{d.window}", style="dim" if not d.window_fill else ""),
            plain(clip(d.last_tool, TOOL_WIDTH)),
            age(now - last_seen if last_seen else None),
            sparkline(agent.rate, rate_color),
            plain(clip(d.harness, 10)),
            plain(clip(d.parent or "", 10), style=colors["muted"]),
        )

    def reconcile(self, shown: list[ShownAgent], now: float, marked: set[str], colors: Mapping[str, str]) -> None:
        """Make the table show these agents in this order, touching only what changed and rendering only the rows
        on screen (`show_window`): a row whose tree glyphs changed re-renders, and only its agent cell is written.
        At 10,000 agents every row rendered once a second (the ages move) took the console's whole time."""
        by_id = {s.agent.id: s for s in shown}
        self._tree = {s.agent.id: (s.glyphs, s.context) for s in shown if s.glyphs or s.context}
        palette = tuple(colors.values())

        def inputs(key: str) -> tuple[object, ...]:
            s = by_id[key]
            a = s.agent
            return (
                a.version,
                key in marked,
                int(now - a.data.last_seen) if a.data.last_seen else None,  # ages show whole seconds
                tuple(a.rate),
                palette,
                s.glyphs,
                s.context,
            )

        def render(key: str) -> tuple[Text, ...]:
            s = by_id[key]
            return self.render_row(s.agent, now, key in marked, colors, s.glyphs, s.context)

        self.show_window(list(by_id), inputs, render)

    # -- fitting the width ------------------------------------------------------------------------------

    def add_row(
        self, *cells: CellType, height: int | None = 1, key: str | None = None, label: str | Text | None = None
    ) -> RowKey:
        # `show_rows` hands a cell for every column; a hidden column's waits in `_cells` until it is back.
        if len(cells) == len(self.COLUMNS) and len(self._shown) < len(cells):
            index = {column: i for i, (column, _label, _width) in enumerate(self.COLUMNS)}
            cells = tuple(cells[index[column]] for column in self._shown)
        return super().add_row(*cells, height=height, key=key, label=label)

    def update_cell(
        self, row_key: RowKey | str, column_key: ColumnKey | str, value: CellType, *, update_width: bool = False
    ) -> None:
        column = column_key.value if isinstance(column_key, ColumnKey) else column_key
        if column in self.hidden:
            return  # kept in `_cells`, written when its column is back
        super().update_cell(row_key, column_key, value, update_width=update_width)

    def on_resize(self) -> None:
        # Also on a change of the scrollable size: the vertical scrollbar coming or going changes the width.
        self.fit(self.scrollable_content_region.width)

    def fit(self, width: int) -> None:
        """Show the columns that fit in `width` cells, by ROOM_ORDER."""
        if width <= 0 or not self.columns:
            return  # not laid out yet, or the columns are not added yet
        keys, agent_width = fit_columns(width, self.cell_padding)
        shown = tuple(key for key, _label, _width in self.COLUMNS if key in keys)
        if shown == self._shown and agent_width == self.agent_width:
            return
        keep = min(len(shown), len(self._shown))  # how many columns, from the left, stay as they are
        for i, (old, new) in enumerate(zip(self._shown, shown, strict=False)):
            if old != new:
                keep = i
                break
        if agent_width != self.agent_width:
            self._set_agent_width(agent_width)
            if not resizable(self):
                keep = min(keep, self._shown.index("agent"))  # the slow path: the agent column is re-added
        changed_columns = shown != self._shown
        self._replace_columns(shown, keep)
        if changed_columns:
            self.post_message(self.ColumnsChanged(self.hidden))

    def _set_agent_width(self, width: int) -> None:
        """Cut the ids to `width` (both ends kept) and size the agent column to it."""
        self.agent_width = width
        changed: list[tuple[str, str, Text]] = []
        for key in self._inputs:  # the rows rendered (on screen, for `show_window`); the others hold the stub
            cells = self._cells[key]
            cell = self.agent_cell(key, *self._tree.get(key, ("", False)))
            self._cells[key] = (cells[0], cell, *cells[2:])
            changed.append((key, "agent", cell))
        column = self.columns.get(ColumnKey("agent"))
        if column is None or not resizable(self):
            return  # the agent column is re-added, with these cells
        column.width = width
        update_cells(self, changed)
        self._require_update_dimensions = True  # the scrollable width, re-derived on idle
        self.check_idle()

    def _replace_columns(self, shown: tuple[str, ...], keep: int) -> None:
        """Take out the columns after the first `keep` and add `shown[keep:]` with their cells."""
        for key in self._shown[keep:]:
            self.remove_column(key)
        self._shown = shown
        spec = {key: (i, label, width) for i, (key, label, width) in enumerate(self.COLUMNS)}
        changed: list[tuple[str, str, Text]] = []
        for key in shown[keep:]:
            i, label, width = spec[key]
            self.add_column(label, key=key, width=self.agent_width if key == "agent" else width)
            changed.extend((row, key, cells[i]) for row, cells in self._cells.items())
        if not changed:
            return
        if resizable(self):
            self._updated_cells.clear()  # every column has a fixed width: nothing to measure
        update_cells(self, changed)

    # -- messages ---------------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # KeyedTable's handler (which Textual calls too) keeps `selected`.
        self.post_message(self.Selected(event.row_key.value))

    class Selected(Message):
        """The operator moved to another agent (the detail line follows at once, not at the next tick)."""

        def __init__(self, agent: str | None) -> None:
            super().__init__()
            self.agent = agent

    class ColumnsChanged(Message):
        """Columns were taken out or put back: the detail line shows the hidden ones."""

        def __init__(self, hidden: frozenset[str]) -> None:
            super().__init__()
            self.hidden = hidden
