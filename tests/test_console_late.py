"""A console that attaches after agents looped (issue 24): its header and trips list show the trips made before it
came, and `enter` on an agent shows its last calls with their decisions at once. The real console against a real
guard; the tmux test of the same is in tests/test_console_tmux.py."""

from __future__ import annotations

import asyncio

from console.screens.agent import AgentScreen
from console.widgets.header import GuardHeader
from console.widgets.trips import TripsTable
from tests.test_console_drilldown import open_agent
from tests.test_console_pilot import SIZE, app_for, loop, row_text, text_of
from tests.waits import eventually_async


async def test_a_console_attached_after_agents_tripped_shows_their_trips_in_its_header_and_list(guard):
    loop(guard, "looper-a", 9)  # two agents trip before any console is there
    loop(guard, "looper-b", 8, "read", {"path": "/etc/hosts"})
    loop(guard, "calm", 2, "grep", {"p": "x"})
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        trips = app.query_one(TripsTable)
        await eventually_async(lambda: trips.row_count == 2, what="the two trips made before", pilot=pilot)
        assert row_text(trips, "0")[1:] == ["looper-a", "duplicate", "web_search", "6/6"]
        assert row_text(trips, "1")[1:] == ["looper-b", "duplicate", "read", "6/6"]
        header = app.query_one(GuardHeader)
        await eventually_async(lambda: "trips 2" in text_of(header), what="the header's trips", pilot=pilot)
        assert "denies 5 (duplicate 5)" in text_of(header)
        assert app.state.trips_seen == 2


async def test_enter_on_an_agent_that_looped_before_it_was_opened_shows_its_last_calls_and_trip_at_once(guard):
    loop(guard, "looper", 25)  # 6 allowed, then 19 denied: the last 20 are what it was doing
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_agent(pilot, app, "looper")
        assert isinstance(screen, AgentScreen)
        calls = list(screen.follow.calls)
        assert (len(calls), screen.follow.earlier, screen.follow.since) == (20, 20, 0)
        assert [c.decision for c in calls] == ["allow"] + ["deny"] * 19
        assert (calls[-1].rule, calls[-1].count, calls[-1].limit) == ("duplicate", 6, 6)
        assert calls[-1].preview == 'web_search query="the same"'
        await eventually_async(
            lambda: "(0 since opened, 20 from before" in text_of(screen.calls_title), what="the title", pilot=pilot
        )
        await eventually_async(lambda: screen.trips.row_count == 1, what="its trip", pilot=pilot)
        assert [c.plain for c in screen.trips.get_row_at(0)][1:] == ["duplicate", "6/6", "web_search"]
        await asyncio.to_thread(loop, guard, "looper", 1, "read", {"path": "new"})
        await eventually_async(lambda: screen.follow.since == 1, what="a call after it was opened", pilot=pilot)
        assert screen.follow.calls[-1].preview == 'read path="new"' and len(screen.follow.calls) == 21


async def test_a_console_that_reconnects_to_a_restarted_guard_does_not_count_its_trips_twice(guard):
    loop(guard, "looper", 7)
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        trips = app.query_one(TripsTable)
        await eventually_async(lambda: trips.row_count == 1, what="the trip", pilot=pilot)
        old_pid = guard.proc.pid
        await asyncio.to_thread(guard.kill9)
        await asyncio.to_thread(guard.start)
        await eventually_async(
            lambda: (
                app.state.stats is not None and app.state.stats.pid not in (0, old_pid) and app.session.link.connected
            ),
            what="reconnected to the restarted guard",
            pilot=pilot,
        )
        await asyncio.to_thread(loop, guard, "other", 7)  # a new trip after the restart: counted
        await eventually_async(lambda: trips.row_count == 2, what="the new trip", pilot=pilot)
        assert [row_text(trips, str(i))[1] for i in range(2)] == ["looper", "other"]
        assert app.state.trips_seen == 2 and "trips 2" in text_of(app.query_one(GuardHeader))
