"""How often the main screen redraws what: the agents table every frame, the top repeated calls a few frames in a
row and then at most KEYS_PER_S times a second while they go on changing, caught up once they stop, and at
once for a new theme.

The real app over a session that reaches no guard (the snapshots' `NoGuard`); frames are injected as the link
delivers them, and the redraw budget's clock is a counter the test moves, so what is drawn depends on the
frames and the clock alone, not on how fast this machine is.
"""

from __future__ import annotations

import copy

from breaker.protocol import StateFrame
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


async def test_a_stream_of_frames_redraws_the_agents_each_frame_and_the_top_calls_a_burst_then_twice_a_second():
    app = make_app("dark")
    async with app.run_test(size=(150, 40)) as pilot:
        await mounted(pilot)
        main = app.main
        now = [1000.0]
        main.monotonic = lambda: now[0]
        main._keys_budget = (KEYS_BURST, now[0])
        keys, table = main.keys_table, main.agents_table
        keys_drawn = agents_drawn = 0
        first = 10
        for i in range(FRAMES):
            data, agent = looping(first + i)
            app.state.apply(StateFrame.from_json(data))
            app.state.changed()
            main.flush()  # no await between the frame and its flush: the app's own 10 Hz flush cannot come between
            keys_drawn += shown_count(keys, agent) == first + i
            agents_drawn += f"{first + i}/" in worst_shown(table, agent)
            now[0] += STEP
        assert agents_drawn == FRAMES
        most = KEYS_BURST + FRAMES * STEP * KEYS_PER_S
        assert KEYS_BURST <= keys_drawn <= most, f"top calls drawn for {keys_drawn} of {FRAMES} frames"
        assert keys_drawn < FRAMES / 2

        # The frames stop: within one refill the last frame's counts are shown, with nothing new from the guard.
        now[0] += 1 / KEYS_PER_S
        main.flush()
        assert shown_count(keys, agent) == first + FRAMES - 1


async def test_after_a_quiet_spell_a_change_reaches_the_top_calls_at_once():
    app = make_app("dark")
    async with app.run_test(size=(150, 40)) as pilot:
        await mounted(pilot)
        main = app.main
        now = [1000.0]
        main.monotonic = lambda: now[0]
        main._keys_budget = (0.0, now[0])  # spent, as at the end of a stream
        now[0] += KEYS_BURST / KEYS_PER_S  # quiet long enough to refill the whole burst
        for count in (7, 8, 9):
            data, agent = looping(count)
            app.state.apply(StateFrame.from_json(data))
            app.state.changed()
            main.flush()
            assert shown_count(main.keys_table, agent) == count


async def test_a_new_theme_recolours_the_top_calls_at_once_even_with_the_redraw_budget_spent():
    app = make_app("dark")
    async with app.run_test(size=(150, 40)) as pilot:
        await mounted(pilot)
        main = app.main
        now = [1000.0]
        main.monotonic = lambda: now[0]
        main._keys_budget = (KEYS_BURST, now[0])  # the app's own flushes may have drawn (and spent) since it mounted
        data, agent = looping(9)
        app.state.apply(StateFrame.from_json(data))
        app.state.changed()
        main.flush()
        keys = main.keys_table
        key = row_of(keys, agent)
        before = str(keys.get_cell(key, "count").style)
        main._keys_budget = (0.0, now[0])
        app.theme = "cbconsole-light"
        await pilot.pause()
        main.flush()
        after = str(keys.get_cell(key, "count").style)
        assert after != before
        assert after == main.roles()["trip"]
