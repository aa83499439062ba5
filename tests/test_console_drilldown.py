"""The drill-down (enter on an agent) and per-agent overrides, in the real console against a real guard."""

from __future__ import annotations

import asyncio

from textual.widgets import Input

from breaker.client import GuardClient
from console.screens.agent import AgentScreen
from console.screens.confirm import ConfirmScreen
from console.screens.help import HelpScreen
from console.screens.main import MainScreen
from console.screens.override import OverrideScreen, parse_limits
from console.widgets.agents import AgentsTable
from console.widgets.calls import CallTail
from console.widgets.detail import AgentDetail
from tests.conftest import request
from tests.test_console_pilot import SIZE, app_for, cell, loop, select, text_of
from tests.waits import eventually_async


def snapshot_row(guard, agent: str) -> dict:
    rows = request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"]
    return next(r for r in rows if r["agent"] == agent)


def tail_lines(screen: AgentScreen) -> list[str]:
    return [c.preview for c in screen.follow.calls]


async def open_agent(pilot, app, agent: str) -> AgentScreen:
    await select(pilot, app, agent)
    await pilot.press("enter")
    await eventually_async(lambda: isinstance(app.screen, AgentScreen), what="the drill-down", pilot=pilot)
    screen = app.screen
    assert isinstance(screen, AgentScreen) and screen.agent == agent
    await eventually_async(lambda: app.session.link.following == agent, what="following the agent", pilot=pilot)
    # The guard pushes a followed agent's first calls event on its next tick once the follow is in force:
    # every call from then on reaches the tail.
    await eventually_async(lambda: screen.follow.events >= 1, what="the follow in force (its first event)", pilot=pilot)
    return screen


async def test_enter_opens_the_agent_its_calls_arrive_live_with_decision_and_escape_returns_to_it(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "quiet", 1, "read", {"path": "q"})
        await asyncio.to_thread(loop, guard, "looper", 2, harness="dsh", parent="root-7")
        screen = await open_agent(pilot, app, "looper")
        assert screen.follow.earlier == 2  # the two calls it made before it was opened come first
        await asyncio.to_thread(loop, guard, "looper", 6, harness="dsh", parent="root-7")
        await eventually_async(lambda: screen.follow.since == 6, what="six calls in the tail", pilot=pilot)
        calls = list(screen.follow.calls)[2:]
        assert [c.decision for c in calls] == ["allow"] * 4 + ["deny", "deny"]
        assert (calls[4].count, calls[4].limit, calls[4].rule) == (6, 6, "duplicate")
        assert calls[0].preview == 'web_search query="the same"'
        assert [(k.count, k.preview) for k in screen.follow.keys] == [(6, 'web_search query="the same"')]
        # the head is redrawn as the stats come: wait for the second deny in it, not only for the count at 6/6
        await eventually_async(
            lambda: "6/6" in text_of(screen.head) and "denies duplicate 2" in text_of(screen.head),
            what="the head redrawn with both denies",
            pilot=pilot,
        )
        head = text_of(screen.head)
        assert "looper" in head and "duplicate" in head and "via dsh" in head
        family = text_of(screen.family)
        assert "parent root-7" in family and "subagents (0) none" in family
        await eventually_async(lambda: screen.keys.row_count == 1, what="the window's repeated call", pilot=pilot)
        assert [c.plain for c in screen.keys.get_row_at(0)] == ["6/6", 'web_search query="the same"']
        await eventually_async(lambda: screen.trips.row_count == 1, what="its trip", pilot=pilot)
        assert [c.plain for c in screen.trips.get_row_at(0)][1:] == ["duplicate", "6/6", "web_search"]
        await pilot.press("escape")
        await eventually_async(lambda: isinstance(app.screen, MainScreen), what="back on the list", pilot=pilot)
        assert app.query_one(AgentsTable).selected == "looper"
        await eventually_async(lambda: app.session.link.following is None, what="no longer following", pilot=pilot)


async def test_the_tail_draws_the_visible_calls_and_the_cursor_leaves_and_rejoins_the_newest(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "busy", 1, "read", {"path": "0"})
        screen = await open_agent(pilot, app, "busy")
        client = GuardClient(guard.socket, timeout=30)
        await asyncio.to_thread(lambda: [client.check("busy", "read", {"path": str(i)}) for i in range(1, 61)])
        client.close()
        await eventually_async(lambda: screen.follow.since == 60, what="sixty calls", pilot=pilot)
        tail = app.screen.query_one(CallTail)
        await eventually_async(
            lambda: "(60 since opened" in str(screen.calls_title.content), what="the sixty calls drawn", pilot=pilot
        )
        visible = [tail.render_line(y).text for y in range(tail.size.height)]
        assert 'read path="60"' in visible[-1]  # the newest at the bottom, in view
        await pilot.press("up", "up")
        assert tail.current is not None and tail.current.preview == 'read path="58"'
        await pilot.press("end")
        assert tail.selected is None and tail.current.preview == 'read path="60"'


async def test_an_override_from_the_drill_down_raises_one_agents_cap_and_shows_in_its_row(guard_factory):
    guard = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    maxCallsPerAgent: 4\n")
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        verdicts = await asyncio.to_thread(loop, guard, "capped", 5, "read", {"path": "x"})
        assert [v.allowed for v in verdicts] == [True] * 4 + [False]
        await asyncio.to_thread(loop, guard, "other", 5, "read", {"path": "x"})
        screen = await open_agent(pilot, app, "capped")
        await pilot.press("o")
        await eventually_async(lambda: isinstance(app.screen, OverrideScreen), what="the override form", pilot=pilot)
        form = app.screen
        form.query_one("#limit-maxCallsPerAgent", Input).value = "10"
        await pilot.press("ctrl+s")
        await eventually_async(lambda: app.screen is screen, what="the form closed", pilot=pilot)
        await eventually_async(
            lambda: snapshot_row(guard, "capped")["override"] == {"maxCallsPerAgent": 10}, pilot=pilot
        )
        more = await asyncio.to_thread(loop, guard, "capped", 7, "read", {"path": "y"})
        assert [v.allowed for v in more] == [True] * 6 + [False]  # 4 + 6 = 10, then capped again
        assert not (await asyncio.to_thread(loop, guard, "other", 1, "read", {"path": "z"}))[0].allowed
        await eventually_async(lambda: "(own cap 10)" in text_of(screen.head), what="the head", pilot=pilot)
        await pilot.press("escape")
        table = app.query_one(AgentsTable)
        await eventually_async(
            lambda: cell(table, "capped", "cap").plain == "10/10*", what="the row's cap cell", pilot=pilot
        )
        assert cell(table, "other", "cap").plain == "4/4"
        assert "own cap 10" in text_of(app.query_one(AgentDetail))
        await pilot.press("r")  # a reset takes the override off with the counts
        await eventually_async(
            lambda: snapshot_row(guard, "capped")["override"] == {}, what="the override cleared", pilot=pilot
        )
        await eventually_async(lambda: cell(table, "capped", "cap").plain == "0/4", what="the row redrawn", pilot=pilot)


async def test_an_override_from_the_list_lowers_one_agents_duplicate_limit(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "strict", 1)
        await select(pilot, app, "strict")
        await pilot.press("o")
        await eventually_async(lambda: isinstance(app.screen, OverrideScreen), what="the override form", pilot=pilot)
        app.screen.query_one("#limit-duplicateLimit", Input).value = "0"
        await pilot.press("ctrl+s")
        error = app.screen.query_one("#error-duplicateLimit")
        assert "duplicateLimit must be an integer from 1" in str(error.content)  # refused in the form, nothing sent
        assert snapshot_row(guard, "strict")["override"] == {}
        app.screen.query_one("#limit-duplicateLimit", Input).value = "2"
        await pilot.press("ctrl+s")
        await eventually_async(lambda: snapshot_row(guard, "strict")["override"] == {"duplicateLimit": 2}, pilot=pilot)
        verdicts = await asyncio.to_thread(loop, guard, "strict", 2)
        assert [v.allowed for v in verdicts] == [True, False]
        table = app.query_one(AgentsTable)
        await eventually_async(
            lambda: cell(table, "strict", "worst").plain.endswith("2/2*"), what="the worst cell", pilot=pilot
        )


async def test_interrupt_and_exempt_from_the_drill_down_act_on_that_agent_and_the_call_under_the_cursor(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "target", 1, "grep", {"p": "x"})
        screen = await open_agent(pilot, app, "target")
        await asyncio.to_thread(loop, guard, "target", 1, "grep", {"p": "y"})
        await eventually_async(lambda: screen.follow.since == 1, what="the call", pilot=pilot)
        await pilot.press("x")
        await eventually_async(
            lambda: isinstance(app.screen, ConfirmScreen), what="the exempt confirmation", pilot=pilot
        )
        assert "Exempt grep" in str(app.screen.query_one("#body").content)
        await pilot.press("y")
        await eventually_async(
            lambda: "grep" in request(guard.operator, {"op": "config_get", "id": 1})["config"]["values"]["exempt"],
            pilot=pilot,
        )
        await pilot.press("i")
        await eventually_async(
            lambda: isinstance(app.screen, ConfirmScreen), what="the interrupt confirmation", pilot=pilot
        )
        assert "target" in str(app.screen.query_one("#body").content)
        await pilot.press("y")
        await eventually_async(
            lambda: snapshot_row(guard, "target")["status"] == "interrupted", what="interrupted", pilot=pilot
        )
        denied = await asyncio.to_thread(loop, guard, "target", 1, "read", {"path": "z"})
        assert denied[0].kind == "interrupted"
        await eventually_async(
            lambda: screen.follow.since == 2 and screen.follow.calls[-1].decision == "deny", pilot=pilot
        )


def test_the_form_sends_only_what_changed_and_an_empty_box_takes_an_override_off():
    assert parse_limits({"maxCallsPerAgent": "1,000", "duplicateLimit": ""}, {}) == ({"maxCallsPerAgent": 1000}, {})
    assert parse_limits(
        {"maxCallsPerAgent": "", "duplicateLimit": "9"}, {"maxCallsPerAgent": 50, "duplicateLimit": 9}
    ) == (
        {"maxCallsPerAgent": None},
        {},
    )
    limits, errors = parse_limits({"maxCallsPerAgent": "lots", "duplicateLimit": "-1"}, {})
    assert limits == {} and set(errors) == {"maxCallsPerAgent", "duplicateLimit"}


async def test_shift_p_opens_the_parent_and_c_copies_the_agents_id(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "root-1", 1, "read", {"path": "r"})
        await asyncio.to_thread(loop, guard, "child-1", 1, "read", {"path": "c"}, parent="root-1")
        screen = await open_agent(pilot, app, "child-1")
        await eventually_async(lambda: "parent root-1" in text_of(screen.family), what="the family line", pilot=pilot)
        await pilot.press("c")
        assert app.clipboard == "child-1"
        await pilot.press("P")
        await eventually_async(
            lambda: isinstance(app.screen, AgentScreen) and app.screen.agent == "root-1", pilot=pilot
        )
        await eventually_async(lambda: app.session.link.following == "root-1", what="following the parent", pilot=pilot)
        parent = app.screen
        await eventually_async(
            lambda: "subagents (1) child-1 (ok)" in text_of(parent.family), what="its subagent", pilot=pilot
        )
        await pilot.press("escape")
        await eventually_async(lambda: isinstance(app.screen, MainScreen), what="back on the list", pilot=pilot)
        assert app.query_one(AgentsTable).selected == "child-1"


async def test_a_read_only_console_follows_an_agent_but_cannot_change_it(guard):
    app = app_for(guard, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "watched", 1)
        screen = await open_agent(pilot, app, "watched")
        await asyncio.to_thread(loop, guard, "watched", 1)
        await eventually_async(lambda: screen.follow.since == 1, what="its call", pilot=pilot)
        for key in ("o", "i", "r", "x"):
            await pilot.press(key, "question_mark")  # keys are handled in order: help opens right on the drill-down
            await eventually_async(lambda: isinstance(app.screen, HelpScreen), what=f"help after {key}", pilot=pilot)
            assert app.screen_stack[-2] is screen, key  # no form, no confirmation
            await pilot.press("escape")
            await eventually_async(lambda: app.screen is screen, what="help closed", pilot=pilot)
        row = snapshot_row(guard, "watched")
        assert (row["calls"], row["override"], row["status"]) == (2, {}, "ok")


async def test_after_the_guard_restarts_the_open_drill_down_follows_the_agent_again(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "survivor", 1, "read", {"path": "0"})
        screen = await open_agent(pilot, app, "survivor")
        old_pid = guard.proc.pid
        await asyncio.to_thread(guard.kill9)
        await asyncio.to_thread(guard.start)
        # The link sees the new guard's frames once subscribed, and says connected once it follows the agent there.
        link = app.session.link
        await eventually_async(
            lambda: app.state.stats is not None and app.state.stats.pid not in (0, old_pid) and link.connected,
            what="reconnected to the new guard and following again",
            pilot=pilot,
        )
        await asyncio.to_thread(loop, guard, "survivor", 1, "read", {"path": "probe"})
        await eventually_async(lambda: screen.follow.since == 1, what="the probe in the tail", pilot=pilot)
        await asyncio.to_thread(loop, guard, "survivor", 3, "grep", {"p": "after"})

        def greps() -> list[tuple[str, int]]:
            return [(c.tool, c.count) for c in screen.follow.calls if c.tool == "grep"]

        await eventually_async(lambda: len(greps()) == 3, timeout=20, what="its calls after the restart", pilot=pilot)
        assert greps() == [("grep", 1), ("grep", 2), ("grep", 3)]
