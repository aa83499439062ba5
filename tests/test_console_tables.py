"""The console's tables on their own: reconciled by key, and the one DataTable internal they rely on."""

from __future__ import annotations

import inspect

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from breaker.protocol import AgentRow, KeyRow
from console.state import Agent
from console.themes import THEME_VARIABLES
from console.widgets import rows
from console.widgets.cells import KIND_ORDER, kind_color
from console.widgets.keys import KeysTable, row_keys
from console.widgets.rows import batched_writes, update_cells

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
