"""The console's tables on their own: reconciled by key, and the one DataTable internal they rely on."""

from __future__ import annotations

import inspect

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from breaker.protocol import AgentRow, KeyRow
from console.state import Agent
from console.themes import THEME_VARIABLES
from console.widgets import rows
from console.widgets.cells import KIND_ORDER, kind_color
from console.widgets.keys import KeysTable, row_keys
from console.widgets.rows import KeyedTable, batched_writes, update_cells, windowed

COLORS = dict(THEME_VARIABLES)


class Host(App[None]):
    """One widget on a screen of its own."""

    def __init__(self, widget: DataTable) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget


def line(table: DataTable, y: int) -> str:
    """What the table draws on its line `y` (0 is the header)."""
    return table.render_line(y).text


# -- the shim -----------------------------------------------------------------------------------------


def test_datatable_still_keeps_the_internals_batched_cell_writes_use():
    """Fails on a Textual whose DataTable changed what `update_cell` does: read the new `update_cell` and
    bring `console.widgets.rows.update_cells` in line before unpinning textual in pyproject.toml."""
    source = inspect.getsource(DataTable.update_cell)
    assert "self._data[row_key][column_key] = value" in source
    assert "self._update_count += 1" in source
    assert "self.refresh()" in source
    assert batched_writes(DataTable())


@pytest.mark.parametrize("batched", [True, False], ids=["internals", "fallback"])
async def test_batched_cell_writes_show_on_screen_at_once(monkeypatch, batched):
    table = DataTable()
    called: list[tuple[str, str]] = []
    if not batched:  # a Textual without the internals: the shim falls back to update_cell, cell by cell
        monkeypatch.setattr(rows, "batched_writes", lambda _table: False)
        real = DataTable.update_cell

        def spy(self, row, column, value, **kw):
            called.append((row, column))
            return real(self, row, column, value, **kw)

        monkeypatch.setattr(DataTable, "update_cell", spy)
    async with Host(table).run_test(size=(40, 6)) as pilot:
        table.add_column("a", key="a", width=6)
        table.add_column("b", key="b", width=6)
        table.add_row("x1", "y1", key="r1")
        table.add_row("x2", "y2", key="r2")
        await pilot.pause()
        assert "x1" in line(table, 1) and "y2" in line(table, 2)  # drawn once: the render caches are warm
        update_cells(table, [("r1", "a", Text("X1")), ("r2", "b", Text("Y2"))])
        await pilot.pause()
        assert [str(c) for c in table.get_row("r1")] == ["X1", "y1"]
        assert "X1" in line(table, 1) and "Y2" in line(table, 2)  # not the cached lines
        assert called == ([] if batched else [("r1", "a"), ("r2", "b")])


def test_datatable_still_keeps_the_internals_the_windowed_table_uses():
    """Fails on a Textual whose DataTable changed what `remove_row` or `_render_cell` do: `KeyedTable.show_window`
    removes rows and draws cells as they do. Read the new ones and bring `console.widgets.rows` in line."""
    remove = inspect.getsource(DataTable.remove_row)
    steps = ("del self.rows[row_key]", "del self._data[row_key]", "self._row_locations", "_require_update_dimensions")
    for step in steps:
        assert step in remove, step
    params = list(inspect.signature(DataTable._render_cell).parameters)
    assert params == ["self", "row_index", "column_index", "base_style", "width", "cursor", "hover"]
    assert windowed(DataTable())


def key_at(table: DataTable, row: int) -> str | None:
    """The key of the row at index `row` (its cells may be the blank stub, off screen)."""
    return table.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value


class Numbers(KeyedTable):
    COLUMNS = (("n", "n", 8), ("tag", "tag", 8))
    KEY_COLUMN = "n"


async def test_a_windowed_table_renders_only_the_rows_on_screen_and_the_rest_as_they_come_into_view():
    table = Numbers()
    rendered: list[str] = []
    tags = {f"r{i:04d}": "a" for i in range(2000)}

    def render(key: str) -> tuple[Text, ...]:
        rendered.append(key)
        return (rows.keyed(Text(key), key), Text(tags[key]))

    async with Host(table).run_test(size=(40, 12)) as pilot:
        order = list(tags)
        table.show_window(order, lambda k: tags[k], render)
        await pilot.pause()
        assert table.row_count == 2000
        assert 0 < len(rendered) <= 12  # a screen's worth, not 2,000
        assert line(table, 1).split()[0] == "r0000" and line(table, 2).split()[:2] == ["r0001", "a"]
        assert table.get_row("r1500")[0].plain == ""  # off screen: the blank stub

        rendered.clear()
        tags["r0001"] = "b"  # one row on screen changed, one off screen too
        tags["r1500"] = "b"
        table.show_window(order, lambda k: tags[k], render)
        await pilot.pause()
        assert rendered == ["r0001"] and line(table, 2).split()[:2] == ["r0001", "b"]

        rendered.clear()
        table.move_cursor(row=1500)  # scrolls r1500 into view: rendered before it is drawn
        await pilot.pause()
        assert "r1500" in rendered and len(rendered) <= 24
        drawn = [line(table, y).split()[:2] for y in range(1, table.size.height)]
        assert ["r1500", "b"] in drawn, drawn
        assert table.get_row("r0001")[0].plain == ""  # left the screen: stub again, nothing kept


async def test_a_windowed_table_reorders_and_removes_rows_with_the_cursor_staying_on_its_key():
    table = Numbers()
    tags = {f"r{i:04d}": "a" for i in range(500)}

    def render(key: str) -> tuple[Text, ...]:
        return (rows.keyed(Text(key), key), Text(tags[key]))

    async with Host(table).run_test(size=(40, 12)) as pilot:
        table.show_window(list(tags), lambda k: tags[k], render)
        await pilot.pause()
        table.move_cursor(row=3)
        await pilot.pause()
        assert table.selected == "r0003"

        order = list(reversed(tags))  # every row moves
        table.show_window(order, lambda k: tags[k], render)
        await pilot.pause()
        assert table.current_key() == "r0003" and table.cursor_row == 496
        assert [key_at(table, i) for i in range(494, 498)] == ["r0005", "r0004", "r0003", "r0002"]

        gone = {f"r{i:04d}" for i in range(100, 400)}  # many at once: one rebuild of the row locations
        order = [k for k in order if k not in gone]
        table.show_window(order, lambda k: tags[k], render)
        await pilot.pause()
        assert table.row_count == 200 and table.current_key() == "r0003"
        assert [key_at(table, i) for i in (0, 99, 100, 199)] == ["r0499", "r0400", "r0099", "r0000"]
        on_screen = [line(table, y).split()[0] for y in range(1, 11)]
        assert "r0003" in on_screen  # the cursor's row is drawn, rendered, not a stub

        order.remove("r0003")  # the selected row leaves: the cursor takes the row now under it
        table.show_window(order, lambda k: tags[k], render)
        await pilot.pause()
        assert table.row_count == 199 and table.current_key() in order


# -- the top repeated calls, reconciled by key --------------------------------------------------------


def key(agent: str, query: str, count: int) -> KeyRow:
    return KeyRow(agent, "web_search", f'web_search query="{query}"', count)


async def test_the_keys_table_keeps_its_rows_and_the_cursor_on_the_same_call_as_counts_move():
    table = KeysTable()
    async with Host(table).run_test(size=(80, 10)) as pilot:
        a, b, c = key("ag-1", "alpha", 5), key("ag-1", "beta", 3), key("ag-2", "gamma", 2)
        table.show([a, b, c], {"ag-1": 6, "ag-2": 6}, (), COLORS)
        await pilot.pause()
        ka, kb, kc = row_keys([a, b, c])
        table.move_cursor(row=table.get_row_index(kb))
        await pilot.pause()
        assert table.current() == b
        untouched = table.get_row(kc)[0]

        b2 = key("ag-1", "beta", 6)  # beta overtakes alpha: its row moves to the top
        table.show([b2, a, c], {"ag-1": 6, "ag-2": 6}, (), COLORS)
        await pilot.pause()
        assert [table.get_row_at(i)[2].plain for i in range(3)] == [b2.preview, a.preview, c.preview]
        assert table.current() == b2 and table.cursor_row == 0  # the cursor followed beta
        assert table.get_row(kc)[0] is untouched  # a row that did not change was not rebuilt
        assert table.get_row(kb)[0].plain == "6/6"

        table.show([a, c], {"ag-1": 6, "ag-2": 6}, {"web_search"}, COLORS)  # beta left its window
        await pilot.pause()
        assert table.row_count == 2 and table.current() in (a, c)
        assert table.get_row(ka)[1].style == COLORS["exempt"]  # exempt now: re-rendered


def test_two_calls_that_look_the_same_get_two_row_keys():
    same = key("ag-1", "cut short…", 4)
    keys = row_keys([same, key("ag-1", "other", 3), same])
    assert len(set(keys)) == 3 and keys == row_keys([same, key("ag-1", "other", 3), same])


def _agent(agent: str, status: str, worst: int) -> Agent:
    row = AgentRow(
        agent=agent, harness="dsh", parent=None, calls=worst, window_fill=worst, window=200, cap=300,
        worst_count=worst, worst_tool="bash", worst_preview="", duplicate_limit=6,
        denies={status: 1} if status not in ("ok", "warned") else {}, status=status,
        last_tool="bash", last_seen=None, interrupt_reason=None,
    )  # fmt: skip
    return Agent(agent, row)


def test_every_loop_rule_ranks_and_colours_as_a_loop_caught_above_cap_interrupt_and_warned():
    agents = [
        _agent("warned", "warned", 5),
        _agent("capped", "cap", 1),
        _agent("stalled", "stall", 1),
        _agent("paused", "interrupted", 1),
        _agent("cycling", "cycle", 2),
        _agent("fine", "ok", 5),
    ]
    order = [a.id for a in sorted(agents, key=lambda a: a.danger)]
    assert order == ["cycling", "stalled", "capped", "paused", "warned", "fine"]
    roles = dict.fromkeys(THEME_VARIABLES, "x")
    colours = {role: f"#{n:06x}" for n, role in enumerate(["trip", "cap", "interrupted", "ok", "warn"], 1)}
    assert {kind: kind_color(kind, roles | colours) for kind in KIND_ORDER} == {
        "duplicate": colours["trip"],
        "repeat": colours["trip"],
        "cycle": colours["trip"],
        "stall": colours["trip"],
        "cap": colours["cap"],
        "interrupted": colours["interrupted"],
    }
