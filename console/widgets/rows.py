"""Tables of entities reconciled by row key, and the uses of DataTable internals: batched cell writes, and a table
of thousands of rows that renders only the rows on screen."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, CellKey, ColumnKey, RowDoesNotExist, RowKey

__all__ = ["KeyedTable", "KeyedText", "batched_writes", "keyed", "same_cell", "update_cells", "windowed"]


def batched_writes(table: DataTable) -> bool:
    """Whether `table` keeps what `DataTable.update_cell` writes in Textual 8.2: `_data` (row key ->
    column key -> cell) and `_update_count` (the key of its render caches). The test that pins this
    fails on a Textual that changed them; until then a change falls back to `update_cell`."""
    return isinstance(getattr(table, "_data", None), dict) and isinstance(getattr(table, "_update_count", None), int)


def update_cells(table: DataTable, changed: Sequence[tuple[str, str, Text]]) -> None:
    """Write many cells (row key, column key, value) with one refresh: what `update_cell` does per cell,
    once. At 100 busy agents, `update_cell` per cell cost 25 ms of every 100 ms frame (measured)."""
    if not changed:
        return
    if not batched_writes(table):
        for row, column, value in changed:
            table.update_cell(row, column, value)
        return
    data = table._data
    for row, column, value in changed:
        data[RowKey(row)][ColumnKey(column)] = value
    table._update_count += 1
    table.refresh()


def windowed(table: DataTable) -> bool:
    """Whether `table` keeps, besides what `batched_writes` needs, the DataTable 8.2 internals `show_window` uses:
    `_row_locations` (row key <-> index, a TwoWayDict: set from the order in one pass instead of `sort`'s key
    function over every row, and rebuilt once after many removals where `remove_row` rebuilds it per row, 20 ms
    each at 10,000 rows), `rows` (row key -> Row), `_new_rows` (rows `_on_idle` measures cell by cell: 2 s for
    10,000 new rows, for columns whose width is fixed) and `_updated_cells`. Without them `show_window` renders
    and sorts every row (`show_rows`)."""
    return (
        batched_writes(table)
        and isinstance(getattr(table, "_row_locations", None), TwoWayDict)
        and isinstance(getattr(table, "rows", None), dict)
        and isinstance(getattr(table, "_new_rows", None), set)
        and isinstance(getattr(table, "_updated_cells", None), set)
    )


def same_cell(a: Text, b: Text) -> bool:
    """Rich's Text equality ignores the base style; a theme switch changes only that."""
    return a.plain == b.plain and a.style == b.style and a.spans == b.spans


class KeyedText(Text):
    """A cell that knows its row's key: `DataTable.sort` hands its key function cells, not row keys."""

    row_key: str = ""


def keyed(cell: Text, row_key: str) -> KeyedText:
    """`cell` as a KeyedText of `row_key`."""
    out = KeyedText(
        cell.plain,
        style=cell.style,
        justify=cell.justify,
        overflow=cell.overflow,
        no_wrap=cell.no_wrap,
        end=cell.end,
        spans=list(cell.spans),
    )
    out.row_key = row_key
    return out


class KeyedTable(DataTable):
    """Rows are entities with a key. `show_rows` removes stale rows, renders only rows whose inputs
    changed, writes only the cells that differ (one refresh), adds new rows, sorts only when the order
    changed, and keeps the cursor on the selected key, not on an index. `show_window` does the same for a
    table of thousands of rows, rendering only the rows on screen."""

    COLUMNS: tuple[tuple[str, str, int], ...] = ()  # (key, label, width): fixed, so nothing is re-measured
    KEY_COLUMN = ""  # the column whose cells are KeyedText (what sorting reads)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self._cells: dict[str, tuple[Text, ...]] = {}  # every row's cells (`stub` for a row off screen)
        self._inputs: dict[str, Hashable] = {}  # what each row was last rendered from (`show_window`: on screen)
        self._order: list[str] = []
        self._row_keys: dict[str, RowKey] = {}  # `show_window`'s rows: each one's key in the DataTable
        self._window: tuple[Callable[[str], Hashable], Callable[[str], tuple[Text, ...]]] | None = None
        self._stub: tuple[Text, ...] | None = None
        # Each cell as last drawn: (the cell object, how it was drawn, its lines). See `_render_cell`.
        self._drawn: LRUCache[tuple[RowKey, ColumnKey], tuple[object, tuple[object, ...], list[list[Segment]]]]
        self._drawn = LRUCache(4096)
        self.selected: str | None = None  # the key under the cursor

    def on_mount(self) -> None:
        for key, label, width in self.COLUMNS:
            self.add_column(label, key=key, width=width)

    def show_rows(self, rows: Sequence[tuple[str, Hashable]], render: Callable[[str], tuple[Text, ...]]) -> None:
        """Show `rows` — (row key, everything the row is rendered from) — in this order; `render(key)`
        gives a row's cells, and is called only for a new row or one whose inputs changed."""
        self._follow_cursor()
        wanted = {key for key, _inputs in rows}
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key]
            self._inputs.pop(key, None)
        changed: list[tuple[str, str, Text]] = []
        for key, inputs in rows:
            if key in self._cells and self._inputs.get(key) == inputs:
                continue  # nothing it shows can have changed
            self._inputs[key] = inputs
            cells = render(key)
            old = self._cells.get(key)
            if old is None:
                self.add_row(*cells, key=key)
            else:
                changed.extend(self._diff(key, old, cells))
            self._cells[key] = cells
        update_cells(self, changed)
        order = [key for key, _inputs in rows]
        if order != self._order:
            rank = {key: i for i, key in enumerate(order)}
            self.sort(self.KEY_COLUMN, key=lambda cell: rank[cell.row_key])
            self._order = order
        self._anchor()

    def show_window(
        self, order: list[str], inputs: Callable[[str], Hashable], render: Callable[[str], tuple[Text, ...]]
    ) -> None:
        """Show the rows `order` names, in that order (the list is kept: do not change it after), rendering only
        the rows on screen: `inputs(key)` is everything row `key` is rendered from, `render(key)` its cells,
        called for a row on screen whose inputs changed since it was last rendered. A row off screen holds blank
        cells (`stub`), never seen, until it scrolls into view (`freshen`): a flush costs the rows on screen and
        a pass over the keys, not a render of every row, and rows off screen keep no rendered cells. Without the
        DataTable internals this needs (`windowed`), every row is rendered, as `show_rows` does."""
        if not windowed(self):
            self._window = None
            self.show_rows([(key, inputs(key)) for key in order], render)
            return
        self._follow_cursor()
        wanted = set(order)
        gone = [key for key in self._cells if key not in wanted]
        if gone:
            self._remove_rows(gone)
        new = [key for key in order if key not in self._cells]
        if new:
            stub = self.stub()
            for key in new:
                self._row_keys[key] = self.add_row(*stub, key=key)
                self._cells[key] = stub
            # Height 1, no label, every column of a fixed width: `_on_idle` has nothing to measure in them.
            self._new_rows.difference_update(self._row_keys[key] for key in new)
        if order != self._order:
            self._place(order, rebuild=bool(new or gone))
        self._window = (inputs, render)
        self._anchor()
        self.freshen()

    def stub(self) -> tuple[Text, ...]:
        """The cells of a row off screen (`show_window`): blank, one object for every such row."""
        if self._stub is None or len(self._stub) != len(self.COLUMNS):
            self._stub = tuple(Text() for _column in self.COLUMNS)
        return self._stub

    def freshen(self) -> None:
        """`show_window`'s rows on screen up to date: render each whose inputs changed (or that holds the stub),
        and give the rows that left the screen the stub back. Called after each `show_window`, and when the
        table scrolls or changes size (the renderers of the last `show_window` are kept for that)."""
        if self._window is None or not self._order:
            return
        inputs_of, render = self._window
        height = self.size.height or self.app.size.height  # not laid out yet: a screen's worth
        top = max(0, int(self.scroll_y))
        on_screen = self._order[top : top + height]  # the header takes a line: one row to spare
        visible = set(on_screen)
        stub = self.stub()
        changed: list[tuple[str, str, Text]] = []
        for key in [k for k in self._inputs if k not in visible]:
            del self._inputs[key]
            changed.extend(self._diff(key, self._cells[key], stub))
            self._cells[key] = stub
        for key in on_screen:
            inputs = inputs_of(key)
            if key in self._inputs and self._inputs[key] == inputs:
                continue  # nothing it shows can have changed
            self._inputs[key] = inputs
            cells = render(key)
            changed.extend(self._diff(key, self._cells[key], cells))
            self._cells[key] = cells
        update_cells(self, changed)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._window is not None and int(old_value) != int(new_value):
            self.freshen()  # rows scrolled into view: rendered before the screen shows them

    def on_resize(self) -> None:
        self.freshen()  # a taller table shows more rows

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        # DataTable's own cache of drawn cells is keyed by `_update_count`, which any cell write or move bumps:
        # every cell on screen was drawn again ten times a second (most of the console's time at 1,000 agents).
        # Here a cell is drawn again only when its object, its place or how it is drawn changed.
        if row_index < 0 or column_index < 0 or not windowed(self):
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        row = self._data.get(row_key) if row_key is not None else None
        if row is None or column_key is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cell = row.get(column_key)
        how = (
            row_index,  # the row's place is in the drawn cell (the mouse's meta)
            column_index,
            base_style,
            width,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
            self.show_cursor,
            self.cell_padding,
            self.fixed_rows,
            self.fixed_columns,
        )
        drawn = self._drawn.get((row_key, column_key))
        if drawn is not None and drawn[0] is cell and drawn[1] == how:
            return drawn[2]
        lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        self._drawn[(row_key, column_key)] = (cell, how, lines)  # holding the cell: its id is not reused
        return lines

    def notify_style_update(self) -> None:
        if (drawn := getattr(self, "_drawn", None)) is not None:
            drawn.clear()  # a new theme or CSS: the component styles changed
        super().notify_style_update()

    def _diff(self, key: str, old: tuple[Text, ...], new: tuple[Text, ...]) -> list[tuple[str, str, Text]]:
        """The cells of row `key` that differ, as `update_cells` takes them."""
        return [
            (key, column, cell)
            for (column, _label, _width), cell, before in zip(self.COLUMNS, new, old, strict=True)
            if cell is not before and not same_cell(cell, before)
        ]

    def _place(self, order: list[str], rebuild: bool) -> None:
        """Put the rows in `order`: what `sort` does, in one pass (no key function over every row); only the
        places that changed are written unless rows came or went (`rebuild`)."""
        keys = self._row_keys
        if rebuild or len(order) != len(self._order):
            self._row_locations = TwoWayDict({keys[key]: i for i, key in enumerate(order)})
        else:  # the same rows: the keys at the places that changed are a permutation of each other
            locations = self._row_locations
            for i, (was, now) in enumerate(zip(self._order, order, strict=True)):
                if was != now:
                    locations[keys[now]] = i
        self._order = order
        self._update_count += 1
        self.refresh()

    def _remove_rows(self, gone: list[str]) -> None:
        """What `remove_row` does for each of `gone`, with the row locations rebuilt once, not once per row."""
        out = set(gone)
        columns = list(self.columns)
        for key in gone:
            row_key = self._row_keys.pop(key)
            del self.rows[row_key]
            del self._data[row_key]
            self._new_rows.discard(row_key)
            for column in columns:
                self._updated_cells.discard(CellKey(row_key, column))
            del self._cells[key]
            self._inputs.pop(key, None)
        self._order = [key for key in self._order if key not in out]
        self._row_locations = TwoWayDict({self._row_keys[key]: i for i, key in enumerate(self._order)})
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate  # clamped to the rows left
        self.hover_coordinate = self.hover_coordinate
        self._update_count += 1
        self.refresh(layout=True)
        self.check_idle()

    def _follow_cursor(self) -> None:
        """Take the key under the cursor as the selected one before rows move. A key press moves the cursor at once
        but tells `selected` by a message (RowHighlighted): rows re-sorted before that message is handled would
        put the cursor back on the row it left, and the press would be lost."""
        if self._order and (key := self.current_key()) is not None:
            self.selected = key

    def _anchor(self) -> None:
        """Put the cursor back on the selected key after rows moved (or take the row under it if that key left)."""
        if self.selected is None or self.selected not in self._cells:
            if self._order:
                self.selected = self.current_key()
            return
        try:
            index = self.get_row_index(self.selected)
        except RowDoesNotExist:
            return
        if index != self.cursor_row:
            self.move_cursor(row=index, animate=False, scroll=False)

    def current_key(self) -> str | None:
        """The key of the row under the cursor."""
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
        except CellDoesNotExist:
            return None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.selected = event.row_key.value
