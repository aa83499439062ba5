"""The console against a real guard process: every operator action, asserted on the screen and on the guard."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from textual.command import CommandList, CommandPalette
from textual.coordinate import Coordinate
from textual.widgets import Select, Static, TextArea

from breaker.client import GuardClient
from breaker.config import BY_KEY, PRESETS
from breaker.paths import default_operator_socket_path
from console.app import CBConsole
from console.screens.config import ConfigScreen
from console.screens.confirm import ConfirmScreen
from console.screens.help import HelpScreen
from console.session import AttachedGuard, DemoGuard, GuardOptions, OwnGuard, ReplayGuard
from console.widgets.agents import AgentsTable
from console.widgets.detail import AgentDetail
from console.widgets.header import GuardHeader
from console.widgets.keys import KeysTable
from console.widgets.trips import TripsTable
from tests.conftest import request
from tests.waits import eventually_async

SIZE = (160, 45)


def text_of(widget) -> str:
    return str(widget.content)


def row_text(table, key: str) -> list[str]:
    return [cell.plain for cell in table.get_row(key)]


def cell(table, key: str, column: str):
    """One cell of a table's row, by the column's key (the agents table's columns can move)."""
    return table.get_cell(key, column)


def app_for(guard, **kw) -> CBConsole:
    return CBConsole(AttachedGuard(guard.socket), **kw)


def loop(guard, agent: str, n: int, tool: str = "web_search", args: dict | None = None, **extra) -> list:
    client = GuardClient(guard.socket, harness=extra.pop("harness", "pytest"), timeout=30)
    out = [client.check(agent, tool, args if args is not None else {"query": "the same"}, **extra) for _ in range(n)]
    client.close()
    return out


def owning_console(tmp_path: Path, monkeypatch, patches: tuple[str, ...] = ()) -> tuple[CBConsole, Path]:
    """A console that starts its own guard on a private socket (and DSH_HOME) under tmp_path."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh"))
    sock = run / "guard.sock"
    for patch in patches:
        Path(patch).touch()  # an empty layer: a --patch that does not exist is refused
    options = GuardOptions(patches=patches, log_path=tmp_path / "g.log")
    return CBConsole(OwnGuard(sock, options=options)), sock


def palette_offers(app: CBConsole, title: str) -> bool:
    """The command palette is open, done searching, and its highlighted command is `title`."""
    if not isinstance(app.screen, CommandPalette):
        return False
    commands = app.screen.query_one(CommandList)
    at = commands.highlighted
    return at is not None and str(commands.get_option_at_index(at).prompt).startswith(title)


async def select(pilot, app: CBConsole, agent: str) -> None:
    table = app.query_one(AgentsTable)
    await eventually_async(lambda: agent in table.ordered_keys, what=f"{agent} on screen", pilot=pilot)
    table.move_cursor(row=table.get_row_index(agent))
    await eventually_async(lambda: table.selected == agent, what=f"{agent} selected", pilot=pilot)


async def test_agents_keys_trips_and_header_show_live_state(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: app.state.guard_status == "attached", what="attached", pilot=pilot)
        await asyncio.to_thread(loop, guard, "looper-1", 9, harness="dsh")
        await asyncio.to_thread(loop, guard, "calm-1", 2, "read", {"path": "a"}, harness="claude-code")
        table = app.query_one(AgentsTable)
        await eventually_async(
            lambda: {"looper-1", "calm-1"} <= set(table.ordered_keys), what="both agents", pilot=pilot
        )
        looper = {column: cell(table, "looper-1", column).plain for column, _label, _width in AgentsTable.COLUMNS}
        assert looper["agent"] == "looper-1" and looper["harness"] == "dsh" and looper["calls"] == "6"
        assert looper["worst"].endswith("6/6") and looper["status"] == "duplicate"  # the status word itself
        assert table.get_row_index("looper-1") == 0  # most dangerous first
        keys = app.query_one(KeysTable)
        await eventually_async(lambda: keys.row_count >= 1, pilot=pilot)
        top = {str(column.value): keys.get_cell_at(Coordinate(0, i)).plain for i, column in enumerate(keys.columns)}
        assert (top["count"], top["agent"], top["call"]) == ("6/6", "looper-1", 'web_search query="the same"')
        trips = app.query_one(TripsTable)
        await eventually_async(lambda: trips.row_count == 1, what="one trip", pilot=pilot)
        assert row_text(trips, "0")[1:] == ["looper-1", "duplicate", "web_search", "6/6"]
        await eventually_async(
            lambda: "checks 11" in text_of(app.query_one(GuardHeader)), what="the header redrawn", pilot=pilot
        )
        header = text_of(app.query_one(GuardHeader))
        assert "guard attached" in header and str(guard.socket) in header
        assert "duplicateLimit 6" in header and "window 200" in header and "maxCallsPerAgent 300" in header
        assert "exempt todo_write, ask_user_question, exit_plan_mode" in header
        assert "trips 1" in header and "checks 11" in header
        assert "denies 3 (duplicate 3)   warnings 0" in header  # 9 calls: 6 allowed, 3 denied; no kind at 0


async def test_cursor_stays_on_the_selected_agent_when_rows_reorder(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "a-quiet", 1, "read", {"path": "x"})
        await asyncio.to_thread(loop, guard, "b-quiet", 1, "read", {"path": "y"})
        await select(pilot, app, "b-quiet")
        table = app.query_one(AgentsTable)
        await asyncio.to_thread(loop, guard, "c-looper", 8)  # a new, more dangerous row goes on top
        header = app.query_one(GuardHeader)
        await eventually_async(  # all 10 calls drawn: the header and the table are drawn from the same state
            lambda: "checks 10" in text_of(header) and table.get_row_index("c-looper") == 0,
            what="c-looper on top, every call drawn",
            pilot=pilot,
        )
        assert table.selected == "b-quiet"
        assert table.get_row_index("b-quiet") == table.cursor_row


async def test_interrupt_after_a_confirmation_that_names_the_agent_then_its_calls_are_denied(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "runaway", 3)
        await select(pilot, app, "runaway")
        await pilot.press("i")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation", pilot=pilot)
        body = str(app.screen.query_one("#body").content)
        assert "runaway" in body and "Stop 1 agent" in body
        await pilot.press("enter")  # the focused button is Cancel: enter alone does nothing harmful
        await eventually_async(lambda: not isinstance(app.screen, ConfirmScreen), pilot=pilot)
        assert loop(guard, "runaway", 1, "read", {"p": 1})[0].allowed
        await pilot.press("i")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
        await pilot.press("y")
        table = app.query_one(AgentsTable)
        await eventually_async(
            lambda: cell(table, "runaway", "status").plain == "interrupted", what="status interrupted", pilot=pilot
        )
        d = (await asyncio.to_thread(loop, guard, "runaway", 1, "read", {"p": 2}))[0]
        assert (d.allowed, d.kind) == (False, "interrupted")


async def test_interrupting_marked_agents_names_all_of_them(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        for agent in ("m-1", "m-2", "m-3"):
            await asyncio.to_thread(loop, guard, agent, 1, "read", {"path": agent})
        for agent in ("m-1", "m-3"):
            await select(pilot, app, agent)
            await pilot.press("space")
        assert app.state.marked == {"m-1", "m-3"}
        await pilot.press("i")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
        body = str(app.screen.query_one("#body").content)
        assert "m-1" in body and "m-3" in body and "m-2" not in body and "Stop 2 agents" in body
        await pilot.press("y")
        await eventually_async(lambda: not app.state.marked, pilot=pilot)
        kinds = {
            a: (await asyncio.to_thread(loop, guard, a, 1, "read", {"n": 9}))[0].kind for a in ("m-1", "m-2", "m-3")
        }
        assert kinds == {"m-1": "interrupted", "m-2": None, "m-3": "interrupted"}


async def test_editing_duplicate_limit_writes_the_patch_file_and_applies_live(guard):
    guard.patch.write_text("# operator layer\n- id: circuit-breaker\n  config:\n    window: 80  # keep me\n")
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: app.state.values.get("window") == 80, what="config from the file", pilot=pilot)
        await pilot.press("e")
        await eventually_async(lambda: isinstance(app.screen, ConfigScreen), pilot=pilot)
        box = app.screen.query_one("#f-duplicateLimit")
        box.value = "3"
        await pilot.pause()
        await pilot.press("ctrl+s")
        await eventually_async(
            lambda: app.state.values.get("duplicateLimit") == 3, what="new limit on screen", pilot=pilot
        )
        text = guard.patch.read_text()
        assert "duplicateLimit: 3" in text and "window: 80  # keep me" in text and text.startswith("# operator layer")
        decisions = await asyncio.to_thread(loop, guard, "after-edit", 4)
        assert [d.allowed for d in decisions] == [True, True, True, False]
        header = app.query_one(GuardHeader)
        await eventually_async(lambda: "duplicateLimit 3" in text_of(header), what="the header redrawn", pilot=pilot)


async def test_the_config_form_refuses_bad_values_and_names_the_key(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: bool(app.state.values), pilot=pilot)
        await pilot.press("e")
        await eventually_async(lambda: isinstance(app.screen, ConfigScreen), pilot=pilot)
        form = app.screen
        problem = form.query_one("#p-window")
        form.query_one("#f-window").value = "0"
        await eventually_async(
            lambda: "expected an integer from 1" in str(problem.content), what="the problem shown", pilot=pilot
        )
        await pilot.press("ctrl+s")
        assert app.screen is form and guard.patch.read_text() == ""  # not saved: the form is still open
        form.query_one("#f-window").value = "80"  # corrected, the same form saves
        await eventually_async(lambda: str(problem.content) == "", what="the problem gone", pilot=pilot)
        await pilot.press("ctrl+s")
        await eventually_async(
            lambda: app.state.values.get("window") == 80, what="the corrected value applied", pilot=pilot
        )
        assert "window: 80" in guard.patch.read_text()


RECOMMENDED = "- id: circuit-breaker\n  config:\n    preset: recommended\n"
# The recommended preset with the limits this file's sequences count on, whatever the preset's tuning.
WARN_THEN_DENY = RECOMMENDED + "    repeatLimit: 3\n    repeatWarn: 1\n    cycleLimit: 3\n    cycleWarn: 1\n"


async def choose_preset(pilot, form: ConfigScreen, preset: str) -> None:
    """Pick `preset` from the form's preset select with the keyboard."""
    select = form.query_one("#f-preset", Select)
    select.focus()
    await pilot.press("enter")
    await eventually_async(lambda: select.expanded, what="the preset list open", pilot=pilot)
    await pilot.press("home", *["down"] * BY_KEY["preset"].choices.index(preset), "enter")
    await eventually_async(lambda: select.value == preset, what=f"{preset} chosen", pilot=pilot)


async def test_a_warned_agent_shows_warned_and_the_rule_then_the_deny_of_that_rule(guard):
    guard.patch.write_text(WARN_THEN_DENY)
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(
            lambda: app.state.values.get("preset") == "recommended", what="the preset in force", pilot=pilot
        )
        table = app.query_one(AgentsTable)
        header = app.query_one(GuardHeader)
        # The third identical call in a row is allowed with the repeat rule's warning...
        decisions = await asyncio.to_thread(loop, guard, "poller", 3, "bash", {"command": "gh run view"})
        assert [d.allowed for d in decisions] == [True] * 3 and decisions[-1].warning
        await eventually_async(lambda: "poller" in table.ordered_keys, what="the agent on screen", pilot=pilot)
        await eventually_async(
            lambda: cell(table, "poller", "status").plain == "warned · repeat", what="warned", pilot=pilot
        )
        assert app.main.roles()["warn"].lower() in str(cell(table, "poller", "status").style).lower()
        await select(pilot, app, "poller")
        detail = app.query_one(AgentDetail)
        await eventually_async(
            lambda: "warns repeat 1" in text_of(detail), what="the warning in the detail", pilot=pilot
        )
        await eventually_async(lambda: "warnings 1" in text_of(header), what="the warning in the header", pilot=pilot)
        assert "denies" not in text_of(detail)
        # ...and the fourth is denied by it: the status is the rule's deny kind, its trip is listed.
        (denied,) = await asyncio.to_thread(loop, guard, "poller", 1, "bash", {"command": "gh run view"})
        assert (denied.allowed, denied.kind) == (False, "repeat")
        await eventually_async(
            lambda: cell(table, "poller", "status").plain == "repeat", what="denied by repeat", pilot=pilot
        )
        assert app.main.roles()["trip"].lower() in str(cell(table, "poller", "status").style).lower()
        await eventually_async(
            lambda: "denies repeat 1   warns repeat 1" in text_of(detail), what="both counts", pilot=pilot
        )
        trips = app.query_one(TripsTable)
        await eventually_async(lambda: trips.row_count == 1, what="the trip", pilot=pilot)
        assert row_text(trips, "0")[1:] == ["poller", "repeat", "bash", "3/3"]
        await eventually_async(
            lambda: "denies 1 (repeat 1)   warnings 1" in text_of(header), what="the header's counts", pilot=pilot
        )
        # An A-B-A-B loop: warned by the cycle rule, then denied by it; both denied agents are listed on top.
        calls = [("read", {"path": "a"}), ("read", {"path": "b"})] * 4
        client = GuardClient(guard.socket, harness="pytest", timeout=30)
        verdicts = [await asyncio.to_thread(client.check, "cycler", tool, args) for tool, args in calls[:5]]
        assert verdicts[-1].allowed and verdicts[-1].warning
        await eventually_async(
            lambda: "cycler" in table.ordered_keys and cell(table, "cycler", "status").plain == "warned · cycle",
            pilot=pilot,
        )
        denied = await asyncio.to_thread(client.check, "cycler", *calls[5])  # the call completing the third round
        client.close()
        assert (denied.allowed, denied.kind) == (False, "cycle")
        await eventually_async(
            lambda: cell(table, "cycler", "status").plain == "cycle", what="denied by cycle", pilot=pilot
        )
        await eventually_async(
            lambda: table.get_row_index("poller") < 2 and table.get_row_index("cycler") < 2, pilot=pilot
        )


async def test_a_preset_and_overrides_in_the_patch_file_show_in_the_header_and_read_back_in_the_form(guard):
    guard.patch.write_text(RECOMMENDED + "    tools: {bash: {repeatLimit: 2}, '[red]x': {maxCalls: 50}}\n")
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        header = app.query_one(GuardHeader)
        await eventually_async(
            lambda: "preset recommended" in text_of(header), what="the preset in the header", pilot=pilot
        )
        assert "tools bash, [red]x" in text_of(header)  # a tool name is text, never markup
        await pilot.press("e")
        await eventually_async(lambda: isinstance(app.screen, ConfigScreen), pilot=pilot)
        form = app.screen
        assert form.query_one("#f-preset", Select).value == "recommended"
        assert form.query_one("#f-repeatLimit").value == str(PRESETS["recommended"]["repeatLimit"])
        assert form.query_one("#f-tools", TextArea).text == "bash: {repeatLimit: 2}\n'[red]x': {maxCalls: 50}"
        assert form.validate_form() == {}  # what the guard sent reads back unchanged: nothing to save


async def test_a_bad_per_tool_value_is_named_down_to_its_key_and_nothing_is_saved(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: bool(app.state.values), pilot=pilot)
        await pilot.press("e")
        await eventually_async(lambda: isinstance(app.screen, ConfigScreen), pilot=pilot)
        form = app.screen
        editor = form.query_one("#f-tools", TextArea)
        problem = form.query_one("#p-tools", Static)
        editor.focus()
        await pilot.press(*"bash: {repeatLimit: -1}")  # typed, as an operator does
        expected = BY_KEY["repeatLimit"].expected
        await eventually_async(
            lambda: str(problem.content).startswith(f"tools.bash.repeatLimit: expected {expected}"), pilot=pilot
        )
        await pilot.press("ctrl+s")
        assert app.screen is form and guard.patch.read_text() == ""  # not saved: the form is still open


async def test_choosing_a_preset_in_the_form_saves_only_the_preset_and_the_guard_applies_it(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(
            lambda: app.state.values.get("preset") == "seed", what="the config in force", pilot=pilot
        )
        await pilot.press("e")
        await eventually_async(lambda: isinstance(app.screen, ConfigScreen), pilot=pilot)
        form = app.screen
        await choose_preset(pilot, form, "recommended")
        assert form.query_one("#f-repeatLimit").value == str(PRESETS["recommended"]["repeatLimit"])
        await pilot.press("ctrl+s")
        await eventually_async(
            lambda: app.state.values.get("preset") == "recommended", what="the preset applied", pilot=pilot
        )
        text = guard.patch.read_text()
        # Only the preset is written: the keys it sets keep following it.
        assert "preset: recommended" in text and not any(key in text for key in PRESETS["recommended"])
        assert app.state.values["repeatLimit"] == PRESETS["recommended"]["repeatLimit"]
        limit = PRESETS["recommended"]["repeatLimit"]
        assert isinstance(limit, int) and limit > 0
        decisions = await asyncio.to_thread(loop, guard, "after-preset", limit + 1, "bash", {"command": "ls"})
        assert [d.kind for d in decisions] == [None] * limit + ["repeat"]


async def test_per_tool_overrides_saved_from_the_form_are_written_and_applied(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: bool(app.state.values), pilot=pilot)
        await pilot.press("e")
        await eventually_async(lambda: isinstance(app.screen, ConfigScreen), pilot=pilot)
        form = app.screen
        form.query_one("#f-tools", TextArea).text = "bash: {repeatLimit: 2}\nweb_search: {maxCalls: 50}"
        await eventually_async(lambda: form.validate_form() is not None, what="a valid form", pilot=pilot)
        await pilot.press("ctrl+s")
        tools = {"bash": {"repeatLimit": 2}, "web_search": {"maxCalls": 50}}
        await eventually_async(
            lambda: app.state.values.get("tools") == tools, what="the overrides applied", pilot=pilot
        )
        values = request(guard.operator, {"op": "config_get", "id": 1})["config"]["values"]
        assert values["tools"] == tools and values["preset"] == "seed"  # nothing else was sent
        assert "bash: {repeatLimit: 2}" in guard.patch.read_text()
        decisions = await asyncio.to_thread(loop, guard, "overridden", 3, "bash", {"command": "ls"})
        assert [d.kind for d in decisions] == [None, None, "repeat"]
        await eventually_async(lambda: "tools bash, web_search" in text_of(app.query_one(GuardHeader)), pilot=pilot)


async def test_a_hand_edit_of_the_patch_file_shows_up_live(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: bool(app.state.values), pilot=pilot)
        guard.patch.write_text("- id: circuit-breaker\n  config:\n    maxCallsPerAgent: 42\n")
        header = app.query_one(GuardHeader)
        await eventually_async(lambda: "maxCallsPerAgent 42" in text_of(header), what="the edit on screen", pilot=pilot)


async def test_exempt_then_unexempt_the_selected_keys_tool(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "searcher", 7)
        await select(pilot, app, "searcher")
        await pilot.press("x")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
        assert "web_search" in str(app.screen.query_one("#body").content)
        await pilot.press("y")
        await eventually_async(
            lambda: "web_search" in app.state.values.get("exempt", []), what="exempt on screen", pilot=pilot
        )
        assert "web_search" in guard.patch.read_text()
        assert all(d.allowed for d in await asyncio.to_thread(loop, guard, "searcher", 5))
        await pilot.press("x")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
        assert "Un-exempt" in str(app.screen.query_one("#body").content)
        await pilot.press("y")
        await eventually_async(lambda: "web_search" not in app.state.values.get("exempt", []), pilot=pilot)
        assert not (await asyncio.to_thread(loop, guard, "searcher", 1))[0].allowed


async def test_exempt_from_the_top_keys_table_uses_that_keys_tool(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "r1", 3, "read", {"path": "same"})
        keys = app.query_one(KeysTable)
        await eventually_async(lambda: keys.row_count >= 1, pilot=pilot)
        keys.focus()
        await pilot.press("x")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
        assert "Exempt read" in str(app.screen.query_one("#body").content)
        await pilot.press("n")
        await eventually_async(lambda: not isinstance(app.screen, ConfirmScreen), pilot=pilot)
        assert "read" not in (request(guard.operator, {"op": "config_get", "id": 1})["config"]["values"]["exempt"])


async def test_reset_clears_the_agents_counts(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "resettable", 8)
        await select(pilot, app, "resettable")
        await pilot.press("r")
        table = app.query_one(AgentsTable)
        await eventually_async(
            lambda: cell(table, "resettable", "calls").plain == "0", what="calls back to 0", pilot=pilot
        )
        assert (await asyncio.to_thread(loop, guard, "resettable", 1))[0].allowed


async def test_pause_and_resume_the_guard(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: bool(app.state.stats), pilot=pilot)
        await pilot.press("p")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
        await pilot.press("y")
        header = app.query_one(GuardHeader)
        await eventually_async(lambda: "GUARD PAUSED" in text_of(header), what="paused on screen", pilot=pilot)
        assert all(d.allowed for d in await asyncio.to_thread(loop, guard, "free", 10))
        await pilot.press("p")  # resuming needs no confirmation
        await eventually_async(lambda: "GUARD PAUSED" not in text_of(header), pilot=pilot)
        assert [d.allowed for d in await asyncio.to_thread(loop, guard, "free", 7)] == [True] * 6 + [False]


async def test_freezing_screen_updates_holds_the_picture_until_unfrozen(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "f-1", 1, "read", {"p": 0})
        table = app.query_one(AgentsTable)
        await eventually_async(lambda: "f-1" in table.ordered_keys, pilot=pilot)
        await pilot.press("z")
        assert "screen frozen" in text_of(app.query_one(GuardHeader))
        await asyncio.to_thread(loop, guard, "f-2", 1, "read", {"p": 0})
        await eventually_async(lambda: "f-2" in app.state.agents, what="the state has it", pilot=pilot)
        app.main.flush()  # what the 10 Hz redraw runs
        assert "f-2" not in table.ordered_keys  # the screen does not show it yet
        await pilot.press("z")
        await eventually_async(lambda: "f-2" in table.ordered_keys, pilot=pilot)


async def test_filter_shows_only_matching_agents(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        for agent in ("alpha-1", "beta-1", "alpha-2"):
            await asyncio.to_thread(loop, guard, agent, 1, "read", {"p": agent})
        table = app.query_one(AgentsTable)
        await eventually_async(lambda: table.row_count == 3, pilot=pilot)
        await pilot.press("slash")
        await pilot.press(*"alpha")
        await eventually_async(
            lambda: set(table.ordered_keys) == {"alpha-1", "alpha-2"}, what="filtered rows", pilot=pilot
        )
        await pilot.press("escape")
        await eventually_async(lambda: table.row_count == 3, what="filter cleared", pilot=pilot)


async def test_help_lists_every_key(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await eventually_async(lambda: isinstance(app.screen, HelpScreen), pilot=pilot)
        keys = {k for k, _action, _tip in app.screen.keys}
        assert {"i", "e", "x", "p", "r", "u", "space", "z", "slash", "q"} <= keys
        await pilot.press("escape")
        await eventually_async(lambda: not isinstance(app.screen, HelpScreen), pilot=pilot)


async def test_every_action_is_in_the_command_palette_and_runs_from_it(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for title in (
            "Interrupt",
            "Config",
            "Exempt",
            "Pause guard",
            "Filter",
            "Help",
            "Reset",
            "Uninterrupt",
            "Mark",
            "Freeze",
            "Theme: dark",
            "Theme: light",
            "Theme: high-contrast",
        ):
            assert title in titles
        await eventually_async(lambda: bool(app.state.stats), pilot=pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"Pause guard")
        await eventually_async(lambda: palette_offers(app, "Pause guard"), what="the palette offers it", pilot=pilot)
        await pilot.press("enter")
        await eventually_async(
            lambda: isinstance(app.screen, ConfirmScreen), what="the palette ran the action", pilot=pilot
        )
        assert "Pause the guard?" in str(app.screen.query_one("#title").content)
        await pilot.press("n")
        await pilot.press("ctrl+p")
        await pilot.press(*"Theme: light")
        await eventually_async(lambda: palette_offers(app, "Theme: light"), what="the palette offers it", pilot=pilot)
        await pilot.press("enter")
        await eventually_async(
            lambda: app.theme == "cbconsole-light", what="the theme switched from the palette", pilot=pilot
        )


async def test_themes_switch_live_and_recolour_cells(guard):
    app = app_for(guard, theme="dark")
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "t-loop", 7)
        table = app.query_one(AgentsTable)
        await eventually_async(lambda: "t-loop" in table.ordered_keys, pilot=pilot)
        dark_style = str(cell(table, "t-loop", "status").style)
        app.theme = "cbconsole-light"
        await eventually_async(
            lambda: str(cell(table, "t-loop", "status").style) != dark_style, what="recoloured status", pilot=pilot
        )
        assert app.main.roles()["trip"].lower() in str(cell(table, "t-loop", "status").style).lower()


async def test_readonly_greys_out_every_action_that_changes_the_guard(guard):
    app = app_for(guard, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "ro", 3)
        await select(pilot, app, "ro")
        for action in ("interrupt", "edit_config", "exempt", "pause_guard", "reset", "uninterrupt"):
            assert app.main.check_action(action, ()) is None
        await pilot.press("i", "question_mark")  # keys are handled in order: help opens right on the main screen
        await eventually_async(lambda: isinstance(app.screen, HelpScreen), what="help", pilot=pilot)
        assert not any(isinstance(screen, ConfirmScreen) for screen in app.screen_stack)
        assert "read-only" in text_of(app.query_one(GuardHeader))
        assert (await asyncio.to_thread(loop, guard, "ro", 1))[0].kind != "interrupted"


async def test_trips_log_says_how_many_are_new_when_scrolled_up(guard):
    app = app_for(guard)
    async with app.run_test(size=(160, 30)) as pilot:
        for i in range(20):
            await asyncio.to_thread(loop, guard, f"tr-{i}", 7)
        trips = app.query_one(TripsTable)
        await eventually_async(  # the log follows its newest trip: all 20 rows laid out, scrolled to the bottom
            lambda: trips.row_count == 20 and trips.virtual_size.height > 20 and trips.max_scroll_y and trips.at_bottom,
            what="the 20th trip in view at the bottom",
            pilot=pilot,
        )
        trips.scroll_home(animate=False)
        await eventually_async(
            lambda: trips.scroll_y == 0 and not trips.at_bottom, what="scrolled to the top", pilot=pilot
        )
        for i in range(20, 23):
            await asyncio.to_thread(loop, guard, f"tr-{i}", 7)
        title = app.query_one("#trips-title")
        await eventually_async(lambda: "3 new" in text_of(title), what="the new count", pilot=pilot)


async def test_quit_with_harnesses_connected_asks_and_can_leave_the_guard_running(tmp_path, monkeypatch):
    app, sock = owning_console(tmp_path, monkeypatch, patches=(str(tmp_path / "layer.yml"),))
    harness = None
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: app.state.guard_status == "running", what="our guard running", pilot=pilot)
        harness = GuardClient(sock, harness="dsh", timeout=30)
        harness.check("h-1", "read", {"p": 1})
        await eventually_async(lambda: app.state.harnesses == {"dsh": 1}, what="the harness seen", pilot=pilot)
        await pilot.press("q")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
        assert "dsh (1)" in str(app.screen.query_one("#body").content)
        await pilot.press("l")  # leave it running
    assert harness.check("h-1", "read", {"p": 2}).fallback is False  # the guard outlived the console
    pid = request(default_operator_socket_path(sock), {"op": "stats", "id": 1})["stats"]["pid"]
    harness.close()
    os.kill(pid, signal.SIGTERM)


async def test_quit_without_harnesses_stops_the_guard_it_started(tmp_path, monkeypatch):
    app, sock = owning_console(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: app.state.guard_status == "running", pilot=pilot)
        pid = app.session.supervisor.pid
        await pilot.press("q")
    assert pid is not None

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    await eventually_async(gone, what=f"the guard (pid {pid}) to exit")
    assert not sock.exists()


async def test_a_guard_that_dies_is_restarted_and_the_screen_says_so(tmp_path, monkeypatch):
    app, sock = owning_console(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: app.state.guard_status == "running", pilot=pilot)
        supervisor = app.session.supervisor
        first = supervisor.pid
        os.kill(first, signal.SIGKILL)
        header = app.query_one(GuardHeader)
        await eventually_async(
            lambda: "restarting" in text_of(header) or supervisor.restarts >= 1, what="restart", pilot=pilot
        )
        await eventually_async(
            lambda: app.state.guard_status == "running" and supervisor.pid not in (None, first),
            what="running again",
            pilot=pilot,
        )
        assert supervisor.restarts == 1
        assert GuardClient(sock, timeout=30).check("after-restart", "read", {}).fallback is False
        await pilot.press("q")


async def test_starting_next_to_a_running_guard_attaches_to_it(guard):
    app = CBConsole(OwnGuard(guard.socket, options=GuardOptions(log_path=Path("/dev/null"))))
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: app.state.guard_status == "attached", pilot=pilot)
        assert app.session.supervisor is None
        header = app.query_one(GuardHeader)
        await eventually_async(
            lambda: f"pid {guard.pid}" in text_of(header), what="the guard's pid on screen", pilot=pilot
        )
        await pilot.press("q")
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]  # not ours: left alone


async def test_replay_plays_a_real_transcript_into_the_live_guard(guard):
    sessions = Path(__file__).parent / "fixtures" / "transcripts" / "dsh-zstd" / "sessions"
    app = CBConsole(
        ReplayGuard(guard.socket, [str(sessions)], speed=0, options=GuardOptions(log_path=Path("/dev/null")))
    )
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(AgentsTable)
        await eventually_async(
            lambda: table.row_count == 2, what="both recorded agents on screen", timeout=20, pilot=pilot
        )
        sub = next(a for a in app.state.agents.values() if a.data.parent)
        await eventually_async(
            lambda: app.state.agents[sub.id].data.status == "duplicate", what="the loop", pilot=pilot
        )
        assert app.state.agents[sub.id].data.harness == "dsh"
        assert app.state.agents[sub.id].data.calls == 6  # ten echo cbprobe4: six ran, four denied
        await pilot.press("q")


async def test_demo_shows_every_kind_of_agent_within_seconds(tmp_path):
    demo = DemoGuard(log_path=tmp_path / "g.log")
    app = CBConsole(demo)
    async with app.run_test(size=SIZE) as pilot:

        def statuses() -> dict[str, str]:
            return {a.id: a.data.status for a in app.state.agents.values()}

        expected = {
            "session-demo-pager": "cap",
            "session-demo-searcher": "duplicate",  # the seed's 555 searches
            "session-demo-prober": "duplicate",  # echo cbprobe4 with a new description each time
            "3f2a9c1e-demo-subagent": "duplicate",
        }
        await eventually_async(
            lambda: expected.items() <= statuses().items(),
            timeout=60,
            what="every kind of agent on screen",
            pilot=pilot,
        )
        assert app.state.agents["3f2a9c1e-demo-subagent"].data.parent == "session-demo-healthy"
        assert "session-demo-healthy" in statuses()
        demo_dir = demo.directory
        assert demo_dir is not None  # a private guard: both sockets and its state file in its own directory
        assert demo.socket_path.is_relative_to(demo_dir) and demo.operator_socket.is_relative_to(demo_dir)
        assert app.state.stats.state_file == str(demo_dir / "state.cbstate")
        await pilot.press("q")
    assert not demo_dir.exists()
