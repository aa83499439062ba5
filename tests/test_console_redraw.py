"""How often the main screen redraws what: the agents table every frame, the top repeated calls a few frames in a
row and then at most KEYS_PER_S times a second while they go on changing, caught up once they stop, and at
once for a new theme.

The real app over a session that reaches no guard (the snapshots' `NoGuard`); frames are injected as the link
delivers them, and the redraw budget's clock is a counter the test moves, so what is drawn depends on the
frames and the clock alone, not on how fast this machine is.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator

from textual.pilot import Pilot

from breaker.protocol import StateFrame
from console.app import CBConsole
from console.screens.main import KEYS_BURST, KEYS_PER_S
from console.widgets.agents import AgentsTable
from console.widgets.keys import KeysTable, row_keys
from tests.test_console_snapshots import STATES, frame, make_app, mounted

STEP = 0.1  # s between frames: the console's own flush rate
FRAMES = 40


def looping(count: int) -> tuple[dict, str]:
    """The demo's warned-then-denied state with its worst agent's repeated call at `count`."""
    state = copy.deepcopy(STATES["warned-then-denied"])
    worst = max(state["agents"], key=lambda a: a["worst_count"])
    worst["worst_count"] = count
    worst["calls"] = max(worst["calls"], count)
    return frame(state), worst["agent"]


def row_of(keys: KeysTable, agent: str) -> str:
    """The row key of `agent`'s call in the top repeated calls."""
    rows = list(keys._rows.values())
    for key, row in zip(row_keys(rows), rows, strict=True):
        if row.agent == agent:
            return key
    raise AssertionError(f"no row for {agent!r} in the top repeated calls")


def shown_count(keys: KeysTable, agent: str) -> int:
    """The count the top repeated calls show for `agent`'s call."""
    return int(keys.get_cell(row_of(keys, agent), "count").plain.split("/")[0])


def worst_shown(table: AgentsTable, agent: str) -> str:
    return table.get_cell(agent, "worst").plain


class Clock:
    """The redraw budget's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def main_screen(budget: float = KEYS_BURST) -> AsyncIterator[tuple[CBConsole, Clock, Pilot]]:
    """The app mounted, its main screen's redraw budget `budget` on a clock the test moves (set after the app's
    own flushes ran: under load one may have drawn, and spent, before the test starts)."""
    app = make_app("dark")
    async with app.run_test(size=(150, 40)) as pilot:
        await mounted(pilot)
        clock = Clock()
        app.main.monotonic = clock
        app.main._keys_budget = (budget, clock.now)
        yield app, clock, pilot


def show(app: CBConsole, count: int) -> str:
    """A frame with the worst agent's repeated call at `count`, flushed at once (no await between the two: the
    app's own 10 Hz flush cannot come between); returns that agent."""
    data, agent = looping(count)
    app.state.apply(StateFrame.from_json(data))
    app.state.changed()
    app.main.flush()
    return agent


async def test_a_stream_of_frames_redraws_the_agents_each_frame_and_the_top_calls_a_burst_then_twice_a_second():
    async with main_screen() as (app, clock, _pilot):
        keys, table = app.main.keys_table, app.main.agents_table
        keys_drawn = agents_drawn = 0
        first = 10
        for i in range(FRAMES):
            agent = show(app, first + i)
            keys_drawn += shown_count(keys, agent) == first + i
            agents_drawn += f"{first + i}/" in worst_shown(table, agent)
            clock.now += STEP
        assert agents_drawn == FRAMES
        most = KEYS_BURST + FRAMES * STEP * KEYS_PER_S
        assert KEYS_BURST <= keys_drawn <= most, f"top calls drawn for {keys_drawn} of {FRAMES} frames"
        assert keys_drawn < FRAMES / 2

        # The frames stop: within one refill the last frame's counts are shown, with nothing new from the guard.
        clock.now += 1 / KEYS_PER_S
        app.main.flush()
        assert shown_count(keys, agent) == first + FRAMES - 1


async def test_after_a_quiet_spell_a_change_reaches_the_top_calls_at_once():
    async with main_screen(budget=0.0) as (app, clock, _pilot):  # spent, as at the end of a stream
        clock.now += KEYS_BURST / KEYS_PER_S  # quiet long enough to refill the whole burst
        for count in (7, 8, 9):
            agent = show(app, count)
            assert shown_count(app.main.keys_table, agent) == count


async def test_a_new_theme_recolours_the_top_calls_at_once_even_with_the_redraw_budget_spent():
    async with main_screen() as (app, clock, pilot):
        agent = show(app, 9)
        keys = app.main.keys_table
        key = row_of(keys, agent)
        before = str(keys.get_cell(key, "count").style)
        app.main._keys_budget = (0.0, clock.now)
        app.theme = "cbconsole-light"
        await pilot.pause()
        app.main.flush()
        after = str(keys.get_cell(key, "count").style)
        assert after != before
        assert after == app.main.roles()["trip"]
