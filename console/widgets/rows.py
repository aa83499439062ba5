"""Tables of entities reconciled by row key, and the one use of DataTable internals: batched cell writes."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, ColumnKey, RowDoesNotExist, RowKey

__all__ = ["KeyedTable", "KeyedText", "batched_writes", "keyed", "same_cell", "update_cells"]


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
    changed, and keeps the cursor on the selected key, not on an index."""

    COLUMNS: tuple[tuple[str, str, int], ...] = ()  # (key, label, width): fixed, so nothing is re-measured
    KEY_COLUMN = ""  # the column whose cells are KeyedText (what sorting reads)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._inputs: dict[str, Hashable] = {}  # what each row was last rendered from
        self._order: list[str] = []
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
                changed.extend(
                    (key, column, new)
                    for (column, _label, _width), new, before in zip(self.COLUMNS, cells, old, strict=True)
                    if not same_cell(new, before)
                )
            self._cells[key] = cells
        update_cells(self, changed)
        order = [key for key, _inputs in rows]
        if order != self._order:
            rank = {key: i for i, key in enumerate(order)}
            self.sort(self.KEY_COLUMN, key=lambda cell: rank[cell.row_key])
            self._order = order
        self._anchor()

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
