"""The agents table: one line per agent, most dangerous first (or as a tree), as many columns as fit; a view over
the console's order that draws only the lines on screen, however many agents the guard knows."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.state import ConsoleAgent
from console.widgets.agent_columns import (
    AGENT_WIDTH,
    COLUMNS,
    PADDING,
    agent_cell,
    agent_cells,
    fit_columns,
)

__all__ = ["AgentsTable"]


class _Row:
    """A line on screen as last drawn: what its cells were rendered from (`inputs`), its cells (every column, in
    COLUMNS order), the columns and agent width it was laid out for (`look`), and its strip without the cursor."""

    __slots__ = ("cells", "final", "inputs", "look", "strip")

    def __init__(self, inputs: Hashable, cells: tuple[Text, ...], look: tuple[object, ...], strip: Strip) -> None:
        self.inputs = inputs
        self.cells = cells
        self.look = look
        self.strip = strip
        self.final: tuple[Hashable, Strip] | None = None  # (its token, the line as drawn on screen) — see render_line


class AgentsTable(ScrollView, can_focus=True):
    """Agents with live counts, one line each, in the order `reconcile` is given. The cursor stays on the
    selected agent as the order changes, not on a line.

    A view, not a store of rows (Textual's line API): the order is the console's own list of ids, and a line is
    rendered when it is on screen and what it shows changed, so a frame costs the lines in view whether the
    guard knows 100 agents or 10,000 (a DataTable of 10,000 rows re-derived its row order and offsets, O(rows),
    on every cell write). The columns that do not fit the width are left out (`hidden`; the detail line shows
    them) and come back when the terminal widens."""

    DEFAULT_CSS = """
    AgentsTable {
        height: 1fr;
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .agents-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: bold;
            }
            & > .agents-table--header { background-tint: $foreground 5%; }
        }
        & > .agents-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .agents-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .agents-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: bold;
        }
    }
    """
    COMPONENT_CLASSES = {"agents-table--header", "agents-table--cursor"}
    BINDINGS = [  # the cursor's own keys, like DataTable's and the call tail's: no ids, never rebound
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
        Binding("left", "scroll_left", "Left", show=False),
        Binding("right", "scroll_right", "Right", show=False),
    ]
    COLUMNS = COLUMNS
    _INDEX = {key: i for i, (key, _label, _width) in enumerate(COLUMNS)}
    _META = tuple(Style.from_meta({"column": key}) for key, _label, _width in COLUMNS)  # see `_strip`

    def __init__(self, *, fleet: bool = False, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.fleet = fleet  # over several guards: the guard column is one of the columns
        self.agent_width = AGENT_WIDTH
        self.selected: str | None = None  # the agent under the cursor
        self.cursor_row = 0
        self._shown: tuple[str, ...] = tuple(k for k, _l, _w in self.COLUMNS if fleet or k != "guard")  # in order
        self._order: Sequence[str] = ()
        self._agents: Mapping[str, ConsoleAgent] = {}
        self._tree: Mapping[str, tuple[str, bool]] = {}  # each tree row's glyphs and context flag (see ShownAgent)
        self._marked: set[str] = set()
        self._guards: Sequence[tuple[str, bool]] = ()  # each guard's label, and whether it is reachable
        self._colors: Mapping[str, str] = {}
        self._now = 0.0
        self._index: dict[str, int] | None = None  # `_order` as id -> line; built when asked for
        self._rows: dict[str, _Row] = {}  # the lines last drawn (on screen, and the cursor's)
        self._look: tuple[object, ...] = (self._shown, self.agent_width)  # what every line's layout depends on
        self._header: Strip | None = None
        self._style: tuple[Style, Style, Style, Style] | None = None  # see `_styles`
        self._cells_drawn: dict[tuple[object, ...], list[Segment]] = {}  # see `_strip`
        self._epoch = 0  # bumped when the styles change: every line drawn before is out of date
        self._drawn: dict[int, Hashable] = {}  # screen line -> the token it was last drawn with

    # -- what it shows ------------------------------------------------------------------------------------

    @property
    def shown(self) -> tuple[str, ...]:
        """The keys of the columns on screen, in table order."""
        return self._shown

    @property
    def hidden(self) -> frozenset[str]:
        """The keys of the columns left out for want of width."""
        return frozenset(k for k, _l, _w in self.COLUMNS if k not in self._shown and (self.fleet or k != "guard"))

    @property
    def row_count(self) -> int:
        return len(self._order)

    @property
    def ordered_keys(self) -> Sequence[str]:
        """The agents in the order shown (the list `reconcile` was given: read it, do not change it)."""
        return self._order

    def current_key(self) -> str | None:
        """The agent on the cursor's line."""
        return self._order[self.cursor_row] if 0 <= self.cursor_row < len(self._order) else None

    def get_row_index(self, key: str) -> int:
        """The line `key` is on; KeyError if it is not shown."""
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self._order)}
        return self._index[key]

    def get_row(self, key: str) -> list[Text]:
        """The cells of `key`'s line in the columns on screen, as they are drawn now."""
        cells = self._row(key).cells
        return [cells[self._INDEX[column]] for column in self._shown]

    def get_cell(self, key: str, column: str) -> Text:
        """One cell of `key`'s line, by the column's key (shown or not)."""
        return self._row(key).cells[self._INDEX[column]]

    def agent_cell(self, key: str, glyphs: str = "", context: bool = False) -> Text:
        """The id cut to what the agent column leaves beside the tree glyphs; dim when shown only as context."""
        return agent_cell(key, self.agent_width, glyphs, context)

    def render_row(
        self,
        agent: ConsoleAgent,
        now: float,
        marked: bool,
        colors: Mapping[str, str],
        glyphs: str = "",
        context: bool = False,
        guard: tuple[str, bool] = ("", True),
    ) -> tuple[Text, ...]:
        """An agent's cells, one per column in COLUMNS order; `guard`: its guard's label and whether it answers."""
        return agent_cells(agent, now, marked, colors, self.agent_width, glyphs, context, guard)

    def reconcile(
        self,
        order: Sequence[str],
        agents: Mapping[str, ConsoleAgent],
        now: float,
        marked: set[str],
        colors: Mapping[str, str],
        tree: Mapping[str, tuple[str, bool]] | None = None,
        guards: Sequence[tuple[str, bool]] = (),
    ) -> None:
        """Show the agents `order` names, in that order (`agents` has each; `tree` the glyphs of tree rows; `guards`
        each guard's label and whether it answers). The list is kept, not copied: the caller hands a new one when
        the order changes. Nothing is rendered here: the lines on screen are, when drawn, each only if what it
        shows changed."""
        if order is not self._order:
            self._order = order
            self._index = None
        self._agents, self._tree, self._marked, self._now = agents, tree or {}, marked, now
        self._guards = guards
        if colors != self._colors:
            self._colors = dict(colors)
            self._restyle()
        self._anchor()
        self._resize_virtual()
        if len(self._rows) > 2 * max(self.scrollable_content_region.height, 50):
            self.forget_hidden_rows()
        self._refresh_changed()

    # -- the cursor -----------------------------------------------------------------------------------------

    def move_cursor(self, *, row: int) -> None:
        """Put the cursor on line `row` (clamped), and that line in view."""
        order = self._order
        if not order:
            return
        row = min(max(row, 0), len(order) - 1)
        key = order[row]
        moved = key != self.selected
        self.cursor_row, self.selected = row, key
        self._reveal()
        self._refresh_changed()  # the line it left and the line it is on (scrolling redraws them all)
        if moved:
            self.post_message(self.Selected(key))

    def _anchor(self) -> None:
        """After the order changed: the cursor back on the selected agent, or, if it left, on the agent now on the
        cursor's line."""
        order = self._order
        if not order:
            if self.selected is not None:
                self.selected, self.cursor_row = None, 0
                self.post_message(self.Selected(None))
            return
        key = self.selected
        row = self.cursor_row
        if key is not None and row < len(order) and order[row] == key:
            return  # where it was
        if key is not None and key in self._agents:
            try:
                self.cursor_row = self._index[key] if self._index is not None else order.index(key)
            except (KeyError, ValueError):
                pass  # filtered out: it leaves the cursor's line to the agent there
            else:
                self._reveal()
                return
        self.cursor_row = min(row, len(order) - 1)
        self.selected = order[self.cursor_row]
        self.post_message(self.Selected(self.selected))

    def _reveal(self) -> None:
        """Scroll the cursor's line into view (the header line stays on top)."""
        self.scroll_to_region(  # the header covers the top line of the window: the cursor's line must be below it
            Region(0, self.cursor_row + 1, 1, 1),
            spacing=Spacing(1, 0, 0, 0),
            animate=False,
            immediate=True,
            force=True,
            x_axis=False,
        )

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 2)

    def action_move(self, by: int) -> None:
        self.move_cursor(row=self.cursor_row + by)

    def action_page(self, by: int) -> None:
        self.move_cursor(row=self.cursor_row + by * self._page())

    def action_first(self) -> None:
        self.move_cursor(row=0)

    def action_last(self) -> None:
        self.move_cursor(row=len(self._order) - 1)

    def on_click(self, event: events.Click) -> None:
        """A click selects its line; a click on the cursor's line opens it (as DataTable's does)."""
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return
        row = int(self.scroll_offset.y) + offset.y - 1
        if not 0 <= row < len(self._order):
            return
        if row == self.cursor_row:
            self.post_message(self.Opened(self._order[row]))
        else:
            self.move_cursor(row=row)

    # -- fitting the width ----------------------------------------------------------------------------------

    def on_resize(self) -> None:
        # Also on a change of the scrollable size: the vertical scrollbar coming or going changes the width.
        self.fit(self.scrollable_content_region.width)

    def fit(self, width: int) -> None:
        """Show the columns that fit in `width` cells, by ROOM_ORDER."""
        if width <= 0:
            return  # not laid out yet
        keys, agent_width = fit_columns(width, PADDING, self.fleet)
        shown = tuple(key for key, _label, _width in self.COLUMNS if key in keys)
        if shown == self._shown and agent_width == self.agent_width:
            return
        changed_columns = shown != self._shown
        self._shown, self.agent_width = shown, agent_width
        self._look = (shown, agent_width)  # each line is laid out again from the cells it has (`_row`)
        self._header = None
        self._resize_virtual()
        self.refresh()
        if changed_columns:
            self.post_message(self.ColumnsChanged(self.hidden))

    def _widths(self) -> list[tuple[int, int]]:
        """(index in COLUMNS, width) of each column on screen."""
        return [(self._INDEX[key], self.agent_width if key == "agent" else w) for key, _l, w in self._columns()]

    def _columns(self) -> list[tuple[str, str, int]]:
        shown = set(self._shown)
        return [c for c in self.COLUMNS if c[0] in shown]

    def _table_width(self) -> int:
        return sum(w + 2 * PADDING for _i, w in self._widths())

    def _resize_virtual(self) -> None:
        size = Size(self._table_width(), len(self._order) + 1)  # the header is line 0
        if size != self.virtual_size:
            self.virtual_size = size

    # -- drawing --------------------------------------------------------------------------------------------

    def _restyle(self) -> None:
        """Forget every drawn line: the palette changed."""
        self._rows.clear()
        self._cells_drawn.clear()
        self._header = None
        self._epoch += 1

    def notify_style_update(self) -> None:
        self._style = None  # a new theme or CSS, or focus: the component styles may have changed
        self._epoch += 1
        super().notify_style_update()

    def _inputs(self, key: str) -> Hashable:
        a = self._agents[key]
        glyphs, context = self._tree.get(key, ("", False))
        last_seen = a.data.last_seen
        return (
            a.version,
            key in self._marked,
            int(self._now - last_seen) if last_seen else None,  # ages show whole seconds
            tuple(a.rate),
            glyphs,
            context,
            self._guard(a.guard),
        )

    def _guard(self, number: int) -> tuple[str, bool]:
        return self._guards[number] if number < len(self._guards) else ("", True)

    def _row(self, key: str) -> _Row:
        """`key`'s line, its cells rendered again only if what they show changed since, and laid out again if the
        columns or the agent column's width changed (a resize renders no cell but the agent's)."""
        inputs = self._inputs(key)
        look = self._look
        row = self._rows.get(key)
        if row is not None and row.inputs == inputs:
            if row.look != look:
                cells = row.cells
                if row.look[1] != look[1]:  # the ids are cut to the new width
                    glyphs, context = self._tree.get(key, ("", False))
                    index = self._INDEX["agent"]
                    agent_id = self._agents[key].id
                    cells = (*cells[:index], self.agent_cell(agent_id, glyphs, context), *cells[index + 1 :])
                row.cells, row.look, row.strip, row.final = cells, look, self._strip(cells), None
            return row
        glyphs, context = self._tree.get(key, ("", False))
        agent = self._agents[key]
        marked = key in self._marked
        cells = self.render_row(agent, self._now, marked, self._colors, glyphs, context, self._guard(agent.guard))
        row = _Row(inputs, cells, look, self._strip(cells))
        self._rows[key] = row
        return row

    def _strip(self, cells: Sequence[Text]) -> Strip:
        """The cells of the columns on screen as one line, each padded and cut to its width. Each column's
        segments carry its key as meta, as DataTable's cells do: a screenshot draws each column as text of its
        own, placed at its column, rather than one run for the line whose spaces a viewer may narrow. A cell that
        reads as one drawn before (its column, text, styles and width) reuses those segments: when every agent
        changes each frame, most of a line's cells (status, tool, harness, parent) do not."""
        drawn = self._cells_drawn
        segments: list[Segment] = []
        for index, width in self._widths():
            cell = cells[index]
            key = (index, width, cell.plain, cell.style, tuple(cell.spans), cell.justify)
            column = drawn.get(key)
            if column is None:
                column = drawn[key] = self._segments(cell, index, width)
            segments.extend(column)
        if len(drawn) > 4096:  # bounded: a new frame's cells are drawn again, at worst
            drawn.clear()
        return Strip(segments)

    def _segments(self, cell: Text, index: int, width: int) -> list[Segment]:
        console = self.app.console
        if cell.cell_len > width:
            cell = cell.copy()
            cell.truncate(width, overflow=cell.overflow or "ellipsis")
        # A Text without spans renders without its own style (its console render adds it): add it here.
        line = list(cell.render(console)) if cell.spans else [Segment(cell.plain, console.get_style(cell.style))]
        room = width - cell.cell_len
        left = PADDING + (room if room > 0 and cell.justify == "right" else 0)
        right = PADDING + (room if room > 0 and cell.justify != "right" else 0)
        return list(
            Segment.apply_style([Segment(" " * left), *line, Segment(" " * right)], post_style=self._META[index])
        )

    def _header_strip(self) -> Strip:
        if self._header is None:
            labels = [Text(label) for _key, label, _width in self._columns()]
            cells: list[Text] = [Text()] * len(self.COLUMNS)
            for (index, _width), label in zip(self._widths(), labels, strict=True):
                cells[index] = label
            self._header = self._strip(cells)
        return self._header

    def _styles(self) -> tuple[Style, Style, Style, Style]:
        """The widget's style, the header's, the cursor's, and the cursor's colours that go over the cells' own (as
        DataTable's cursor does by default): kept until the styles change (focus, a theme)."""
        if self._style is None:
            base = self.rich_style
            cursor = self.get_component_rich_style("agents-table--cursor")
            over = Style(color=cursor.color, bgcolor=cursor.bgcolor, bold=cursor.bold)
            self._style = (base, base + self.get_component_rich_style("agents-table--header"), base + cursor, over)
        return self._style

    def _token(self, row: int, x: int, width: int) -> Hashable:
        """Everything line `row` is drawn from: if it is what a screen line was drawn with, that line stands."""
        key = self._order[row]
        return (key, self._inputs(key), self._look, row == self.cursor_row, x, width, self._epoch)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        x = int(self.scroll_offset.x)
        base, header, cursor, over = self._styles()
        if y == 0:
            strip = self._header_strip()
            return (
                Strip(Segment.apply_style(strip, header), strip.cell_length)
                .extend_cell_length(x + width, header)
                .crop(x, x + width)
            )
        row = int(self.scroll_offset.y) + y - 1
        if not 0 <= row < len(self._order) or not self._colors:
            self._drawn[y] = None
            return Strip.blank(width, base)
        token = self._token(row, x, width)
        line = self._row(self._order[row])
        if line.final is None or line.final[0] != token:
            strip = line.strip
            if row == self.cursor_row:
                strip = Strip(Segment.apply_style(strip, cursor, over), strip.cell_length)
                strip = strip.extend_cell_length(x + width, cursor)
            else:
                strip = Strip(Segment.apply_style(strip, base), strip.cell_length).extend_cell_length(x + width, base)
            line.final = (token, strip.crop(x, x + width))
        self._drawn[y] = token
        return line.final[1]

    def _refresh_changed(self) -> None:
        """Refresh the screen lines whose agent, or what it shows, changed since they were drawn; not the others
        (a whole refresh has Textual draw every line of the widget again)."""
        top, n, drawn = int(self.scroll_offset.y), len(self._order), self._drawn
        x, width = int(self.scroll_offset.x), self.scrollable_content_region.width
        changed = [
            y
            for y in range(1, self.scrollable_content_region.height)
            if drawn.get(y, ()) != (self._token(top + y - 1, x, width) if top + y - 1 < n else None)
        ]
        while changed:  # consecutive lines in one region
            first = last = changed.pop(0)
            while changed and changed[0] == last + 1:
                last = changed.pop(0)
            self.refresh_lines(top + first, last - first + 1)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def forget_hidden_rows(self) -> None:
        """Drop the lines no longer on screen (the cursor's is kept): bounded by the screen, not the agents."""
        top = int(self.scroll_offset.y)
        keep = set(self._order[top : top + self.scrollable_content_region.height])
        if self.selected is not None:
            keep.add(self.selected)
        for key in [k for k in self._rows if k not in keep]:
            del self._rows[key]

    # -- messages -------------------------------------------------------------------------------------------

    class Selected(Message):
        """The operator moved to another agent (the detail line follows at once, not at the next tick)."""

        def __init__(self, agent: str | None) -> None:
            super().__init__()
            self.agent = agent

    class Opened(Message):
        """A click on the cursor's line: open that agent."""

        def __init__(self, agent: str) -> None:
            super().__init__()
            self.agent = agent

    class ColumnsChanged(Message):
        """Columns were taken out or put back: the detail line shows the hidden ones."""

        def __init__(self, hidden: frozenset[str]) -> None:
            super().__init__()
            self.hidden = hidden
