"""The console's tables on their own: reconciled by key, and the one DataTable internal they rely on."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from breaker.protocol import AgentRow, KeyRow
from console.state import ConsoleAgent
from console.themes import THEME_VARIABLES
from console.widgets import rows
from console.widgets.agents import AgentsTable
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


# -- the agents table: a view that draws only the lines on screen ------------------------------------


def _many(n: int) -> dict[str, ConsoleAgent]:
    return {f"r{i:04d}": _agent(f"r{i:04d}", "ok", 1) for i in range(n)}


class AgentsHost(App[None]):
    """The agents table alone, with the theme's colours."""

    def __init__(self, table: AgentsTable) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        yield self.table


def drawn(table: AgentsTable) -> list[str]:
    """The agent ids on the table's lines now (line 0 is the header)."""
    return [table.render_line(y).text.split()[0] for y in range(1, table.scrollable_content_region.height)]


async def test_the_agents_table_renders_only_the_lines_on_screen_and_the_others_as_they_come_into_view(monkeypatch):
    table = AgentsTable()
    rendered: list[str] = []
    real = AgentsTable.render_row
    monkeypatch.setattr(AgentsTable, "render_row", lambda self, a, *rest: rendered.append(a.id) or real(self, a, *rest))
    agents = _many(2000)
    order = list(agents)
    async with AgentsHost(table).run_test(size=(100, 12)) as pilot:
        table.reconcile(order, agents, 0.0, set(), COLORS)
        await pilot.pause()
        assert table.row_count == 2000
        assert 0 < len(rendered) <= 12  # a screen's worth, not 2,000
        assert drawn(table)[:2] == ["r0000", "r0001"]

        rendered.clear()
        agents["r0001"] = replace_agent(agents["r0001"], "duplicate")  # one on screen changes, one off screen too
        agents["r1500"] = replace_agent(agents["r1500"], "duplicate")
        table.reconcile(order, agents, 0.0, set(), COLORS)
        await pilot.pause()
        assert rendered == ["r0001"]

        rendered.clear()
        table.move_cursor(row=1500)  # r1500 into view: rendered as it is drawn
        await pilot.pause()
        assert "r1500" in rendered and len(rendered) <= 12
        assert "r1500" in drawn(table) and table.selected == "r1500"
        assert table.get_cell("r1500", "status").plain == "duplicate"


async def test_the_agents_table_keeps_the_cursor_on_its_agent_as_the_order_changes_and_agents_leave():
    table = AgentsTable()
    agents = _many(500)
    async with AgentsHost(table).run_test(size=(100, 12)) as pilot:
        table.reconcile(list(agents), agents, 0.0, set(), COLORS)
        await pilot.pause()
        await pilot.press("down", "down", "down")
        assert table.selected == "r0003" and table.cursor_row == 3

        order = list(reversed(agents))  # every line moves
        table.reconcile(order, agents, 0.0, set(), COLORS)
        await pilot.pause()
        assert table.current_key() == "r0003" and table.cursor_row == 496
        assert "r0003" in drawn(table)  # scrolled to it

        gone = {f"r{i:04d}" for i in range(100, 400)}
        for key in gone:
            del agents[key]
        order = [k for k in order if k not in gone]
        table.reconcile(order, agents, 0.0, set(), COLORS)
        await pilot.pause()
        assert table.row_count == 200 and table.current_key() == "r0003" and table.cursor_row == 196

        del agents["r0003"]  # the selected agent leaves: the cursor takes the agent now on its line
        order = [k for k in order if k != "r0003"]
        table.reconcile(order, agents, 0.0, set(), COLORS)
        await pilot.pause()
        assert table.row_count == 199 and table.selected == order[196] == table.current_key()

        await pilot.press("end")
        assert table.selected == order[-1] and order[-1] in drawn(table)
        await pilot.press("home")
        assert table.selected == order[0] and table.scroll_offset.y == 0


async def test_a_click_selects_a_line_and_a_click_on_the_selected_line_opens_it():
    table = AgentsTable()
    agents = _many(20)
    opened: list[str] = []

    class Opening(AgentsHost):
        def on_agents_table_opened(self, event: AgentsTable.Opened) -> None:
            opened.append(event.agent)

    async with Opening(table).run_test(size=(100, 12)) as pilot:
        table.reconcile(list(agents), agents, 0.0, set(), COLORS)
        await pilot.pause()
        await pilot.click(AgentsTable, offset=(10, 3))  # the header is line 0: line 3 is the third agent
        assert table.selected == "r0002" and opened == []
        await pilot.click(AgentsTable, offset=(10, 3))
        assert opened == ["r0002"]


# -- the top repeated calls, reconciled by key --------------------------------------------------------


def key(agent: str, query: str, count: int) -> KeyRow:
    return KeyRow(agent=agent, tool="web_search", preview=f'web_search query="{query}"', count=count)


async def test_the_keys_table_keeps_its_rows_and_the_cursor_on_the_same_call_as_counts_move():
    table = KeysTable()
    async with Host(table).run_test(size=(80, 10)) as pilot:
        a, b, c = key("ag-1", "alpha", 5), key("ag-1", "beta", 3), key("ag-2", "gamma", 2)
        table.show([a, b, c], {"ag-1": 6, "ag-2": 6}, {}, COLORS)
        await pilot.pause()
        ka, kb, kc = row_keys([a, b, c])
        table.move_cursor(row=table.get_row_index(kb))
        await pilot.pause()
        assert table.current() == b
        untouched = table.get_row(kc)[0]

        b2 = key("ag-1", "beta", 6)  # beta overtakes alpha: its row moves to the top
        table.show([b2, a, c], {"ag-1": 6, "ag-2": 6}, {}, COLORS)
        await pilot.pause()
        assert [table.get_row_at(i)[-1].plain for i in range(3)] == [b2.preview, a.preview, c.preview]  # the call
        assert table.current() == b2 and table.cursor_row == 0  # the cursor followed beta
        assert table.get_row(kc)[0] is untouched  # a row that did not change was not rebuilt
        assert table.get_row(kb)[0].plain == "6/6"

        exempt = {"web_search"}
        table.show([a, c], {"ag-1": 6, "ag-2": 6}, {"ag-1": exempt, "ag-2": exempt}, COLORS)  # beta left its window
        await pilot.pause()
        assert table.row_count == 2 and table.current() in (a, c)
        assert table.get_cell(ka, "tool").style == COLORS["exempt"]  # exempt now: re-rendered


def test_two_calls_that_look_the_same_get_two_row_keys():
    same = key("ag-1", "cut short…", 4)
    keys = row_keys([same, key("ag-1", "other", 3), same])
    assert len(set(keys)) == 3 and keys == row_keys([same, key("ag-1", "other", 3), same])


def replace_agent(agent: ConsoleAgent, status: str) -> ConsoleAgent:
    """The same agent with a new row (as a state frame brings it): its version moves."""
    row = replace(agent.data, status=status, denies={status: 1})
    return ConsoleAgent(agent.id, row, version=agent.version + 1)


def _agent(agent: str, status: str, worst: int) -> ConsoleAgent:
    row = AgentRow(
        agent=agent, harness="dsh", parent=None, calls=worst, window_fill=worst, window=200, cap=300,
        worst_count=worst, worst_tool="bash", worst_preview="", duplicate_limit=6,
        denies={status: 1} if status not in ("ok", "warned") else {}, status=status,
        last_tool="bash", last_seen=None, interrupt_reason=None,
    )  # fmt: skip
    return ConsoleAgent(agent, row)


def test_every_loop_rule_ranks_and_colours_as_a_loop_caught_above_cap_interrupt_and_warned():
    agents = [
        _agent("warned", "warned", 5),
        _agent("capped", "cap", 1),
        _agent("stalled", "stall", 1),
        _agent("paused", "interrupted", 1),
        _agent("cycling", "cycle", 2),
        _agent("reworded", "reworded", 1),
        _agent("fine", "ok", 5),
    ]
    order = [a.id for a in sorted(agents, key=lambda a: a.danger)]
    assert order == ["cycling", "reworded", "stalled", "capped", "paused", "warned", "fine"]
    roles = dict.fromkeys(THEME_VARIABLES, "x")
    colours = {role: f"#{n:06x}" for n, role in enumerate(["trip", "cap", "interrupted", "ok", "warn"], 1)}
    assert {kind: kind_color(kind, roles | colours) for kind in KIND_ORDER} == {
        "duplicate": colours["trip"],
        "repeat": colours["trip"],
        "cycle": colours["trip"],
        "stall": colours["trip"],
        "reworded": colours["trip"],
        "cap": colours["cap"],
        "interrupted": colours["interrupted"],
    }


async def test_a_line_is_redrawn_only_when_its_text_changes_and_never_asks_for_a_layout(monkeypatch):
    from console.widgets.line import Line

    calls: list[tuple[str, bool]] = []
    real = Line.update
    monkeypatch.setattr(
        Line, "update", lambda self, text, **kw: calls.append((str(text), kw["layout"])) or real(self, text, **kw)
    )

    class Holder(App[None]):
        def compose(self) -> ComposeResult:
            yield Line(Text("first"), id="line")

    async with Holder().run_test(size=(40, 4)) as pilot:
        line = pilot.app.query_one(Line)
        line.show(Text("first"))
        line.show(Text("second"))
        line.show(Text("second"))
        line.show(Text("second", style="bold"))  # the same words, another style: drawn again
        await pilot.pause()
        assert calls == [("second", False), ("second", False)]
        assert str(line.render()) == "second" and line.text.style == "bold"
