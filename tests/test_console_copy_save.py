"""Copy and save: the selected agent's id and worst call to the clipboard, the state and the screen to a report."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import orjson
from textual.widgets._toast import Toast

from console.report import reports_dir
from console.widgets.keys import KeysTable
from tests.conftest import request
from tests.test_console_pilot import SIZE, app_for, loop, select
from tests.waits import eventually_async


def notices(app, severity: str | None = None) -> list:
    return [n for n in app._notifications if severity is None or n.severity == severity]


def toasts_text(app) -> str:
    return "\n".join(str(toast.render()) for toast in app.screen.query(Toast))


async def test_c_copies_exactly_the_selected_agents_id(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "copy-a", 2, "read", {"path": "a"})
        await asyncio.to_thread(loop, guard, "copy-b", 7)
        await select(pilot, app, "copy-a")
        await pilot.press("c")
        await eventually_async(lambda: app.clipboard == "copy-a", what="the id on the clipboard", pilot=pilot)
        await select(pilot, app, "copy-b")
        await pilot.press("c")
        await eventually_async(lambda: app.clipboard == "copy-b", what="the other id on the clipboard", pilot=pilot)
        assert [n.message for n in notices(app) if n.message.startswith("Copied")] == [
            "Copied the agent id: copy-a",
            "Copied the agent id: copy-b",
        ]


async def test_shift_c_copies_the_worst_calls_preview_and_from_the_keys_table_the_call_under_its_cursor(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "worst", 2, "read", {"path": "once"})
        await asyncio.to_thread(loop, guard, "worst", 5)
        await select(pilot, app, "worst")
        await eventually_async(
            lambda: app.state.agents["worst"].data.worst_count == 5, what="the worst call counted", pilot=pilot
        )
        await pilot.press("C")
        await eventually_async(
            lambda: app.clipboard == 'web_search query="the same"', what="the worst call copied", pilot=pilot
        )
        assert 'Copied the call worst repeated 5 times: web_search query="the same"' in [
            n.message for n in notices(app)
        ]
        keys = app.query_one(KeysTable)
        await eventually_async(lambda: keys.row_count == 2, what="both repeated calls listed", pilot=pilot)
        keys.focus()
        keys.move_cursor(row=1)
        await eventually_async(
            lambda: keys.current() is not None and keys.current().tool == "read", what="read selected", pilot=pilot
        )
        await pilot.press("C")
        await eventually_async(
            lambda: app.clipboard == 'read path="once"', what="the call under the cursor copied", pilot=pilot
        )


async def test_an_id_with_markup_is_copied_verbatim_and_shown_as_text(guard):
    agent = "[bold]x[/]"
    app = app_for(guard)
    async with app.run_test(size=SIZE, notifications=True) as pilot:  # toasts drawn, as in a terminal
        await asyncio.to_thread(loop, guard, agent, 1, "read", {"path": "m"})
        await select(pilot, app, agent)
        await pilot.press("c")
        await eventually_async(lambda: app.clipboard == agent, what="the id copied verbatim", pilot=pilot)
        [notice] = [n for n in notices(app) if n.message.startswith("Copied")]
        assert notice.message == f"Copied the agent id: {agent}" and notice.markup is False
        await eventually_async(lambda: agent in toasts_text(app), what="the toast shows the brackets", pilot=pilot)


async def test_copying_with_no_agent_warns_and_copies_nothing(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: app.state.stats is not None, what="the guard's first frame", pilot=pilot)
        await pilot.press("c", "C")
        await eventually_async(lambda: len(notices(app, "warning")) == 2, what="two warnings", pilot=pilot)
        assert app.clipboard == ""


async def test_save_writes_the_state_as_json_and_the_screen_as_svg_privately(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "saved-loop", 8)
        await asyncio.to_thread(loop, guard, "saved-calm", 2, "read", {"path": "c"})
        await select(pilot, app, "saved-calm")
        guard_has = {
            row["agent"]: row["calls"]
            for row in (await asyncio.to_thread(request, guard.operator, {"op": "snapshot", "id": 1}))["state"][
                "agents"
            ]
        }
        assert guard_has == {"saved-loop": 6, "saved-calm": 2}
        await eventually_async(
            lambda: {a.id: a.data.calls for a in app.state.agents.values()} == guard_has,
            what="the console caught up with the guard",
            pilot=pilot,
        )
        await pilot.press("S")
        await eventually_async(lambda: any(n.title == "Report saved" for n in notices(app)), what="saved", pilot=pilot)
        directory = reports_dir()
        files = sorted(directory.iterdir())
        assert [f.suffix for f in files] == [".json", ".svg"] and files[0].stem == files[1].stem
        assert files[0].name.startswith("cbconsole-") and not list(directory.glob(".*"))  # no temporary file left
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
        [notice] = [n for n in notices(app) if n.title == "Report saved"]
        assert str(files[0]) in notice.message and str(files[1]) in notice.message
        report = orjson.loads(files[0].read_bytes())
        assert {row["agent"]: row["calls"] for row in report["agents"]} == guard_has
        assert [row["agent"] for row in report["agents"]] == ["saved-loop", "saved-calm"]  # most dangerous first
        assert report["guard"]["pid"] == guard.pid and report["guard"]["socket"] == str(guard.socket)
        assert report["saved_at"] and report["selected"] == "saved-calm"
        assert report["stats"]["checks"] == 10 and report["config"]["values"]["duplicateLimit"] == 6
        assert [(t["agent"], t["kind"]) for t in report["trips"]] == [("saved-loop", "duplicate")]
        assert report["top_keys"][0]["agent"] == "saved-loop" and report["top_keys"][0]["count"] == 6
        svg = files[1].read_text()
        assert svg.lstrip().startswith("<svg") and svg.rstrip().endswith("</svg>") and "saved-calm" in svg


async def test_two_saves_in_one_second_keep_both_reports(guard):
    app = app_for(guard, clock=lambda: 1_700_000_000.0)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: app.state.stats is not None, what="the guard's first frame", pilot=pilot)
        await pilot.press("S", "S")
        await eventually_async(
            lambda: sum(n.title == "Report saved" for n in notices(app)) == 2, what="two saves", pilot=pilot
        )
        names = sorted(f.name for f in reports_dir().iterdir())
        assert len(names) == 4 and len({Path(n).stem for n in names}) == 2


async def test_saving_where_no_directory_can_be_made_says_where_and_why_and_the_console_goes_on(
    guard, tmp_path, monkeypatch
):
    blocker = tmp_path / "file"
    blocker.write_text("a regular file where a directory should be\n")  # root can write anywhere, not under a file
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker / "sub"))
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "still-here", 1, "read", {"path": "x"})
        await select(pilot, app, "still-here")
        await pilot.press("S")
        await eventually_async(lambda: bool(notices(app, "error")), what="the error", pilot=pilot)
        [error] = notices(app, "error")
        assert error.title == "Saving the report failed"
        assert error.message == f"{blocker}/sub/cbconsole/reports: Not a directory"
        await pilot.press("c")  # still running, still answering keys
        await eventually_async(lambda: app.clipboard == "still-here", what="the console still works", pilot=pilot)
        assert blocker.read_text().startswith("a regular file")
