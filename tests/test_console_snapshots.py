"""Snapshots of the main screen in the demo's states, for each theme; and the markup-injection regression.

The real app runs over a session that connects to nothing (`NoGuard`, a fake at the edge); frames are
injected into its state as the link delivers them, the clock is frozen and the zone is UTC, so a
screenshot depends only on what the console draws. Update after an intended change:
`pytest tests/test_console_snapshots.py --snapshot-update`, then look at the SVGs (tests/__snapshots__/)
before committing them.
"""

from __future__ import annotations

import os
import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, Select, TextArea

from breaker.config import PRESETS
from breaker.protocol import CallRow, CallsEvent, KeyRow, StateFrame
from console.app import CBConsole
from console.screens.agent import AgentScreen
from console.screens.config import ConfigScreen
from console.screens.override import OverrideScreen
from console.session import GuardSession
from console.state import ACTIVITY_SECONDS, RATE_SLOTS, ConsoleState
from console.widgets.agent_columns import AGENT_WIDTH, TOOL_WIDTH
from console.widgets.agents import AgentsTable
from console.widgets.cells import clip
from console.widgets.detail import AgentDetail
from console.widgets.header import GuardHeader
from console.widgets.keys import KeysTable
from console.widgets.trips import TripsTable
from tests.waits import eventually_async

T0 = 1_800_000_000.0
SIZE = (150, 40)
THEMES = ["dark", "light", "high-contrast"]

CONFIG = {
    "values": {
        "enabled": True,
        "duplicateLimit": 6,
        "window": 200,
        "maxCallsPerAgent": 150,
        "exempt": ["todo_write", "ask_user_question", "exit_plan_mode"],
        "only": [],
        "ignoreArgs": ["description", "explanation", "reason", "thought", "purpose"],
        "denyMessage": "…",
        "incidentLog": "",
        "maxAgents": 10000,
    },
    "disabled": False,
    "source": "/tmp/cbconsole-demo/cordis.patch.yml",
    "target": "/tmp/cbconsole-demo/cordis.patch.yml",
    "layers": [],
    "notes": [],
    "error": None,
}


def agent(
    name: str,
    calls: int,
    worst: int,
    status: str,
    tool: str,
    *,
    harness: str = "dsh",
    parent: str | None = None,
    preview: str = "",
    denies: dict | None = None,
    age: float = 0.2,
    reason: str | None = None,
    warns: dict | None = None,
    rule: str | None = None,
    limit: int = 6,
) -> dict[str, Any]:
    return {
        "agent": name,
        "harness": harness,
        "parent": parent,
        "calls": calls,
        "window_fill": min(calls, 200),
        "window": 200,
        "cap": 150,
        "worst_count": worst,
        "worst_tool": tool if worst > 1 else "",
        "worst_preview": preview if worst > 1 else "",
        "duplicate_limit": limit,
        "denies": denies or {},
        "status": status,
        "last_tool": tool,
        "last_seen": T0 - age,
        "interrupt_reason": reason,
        "warns": warns or {},
        "rule": ("" if status == "ok" else status) if rule is None else rule,
    }


HEALTHY = ("session-demo-healthy", 'read path="src/module_7.py"')
STATES: dict[str, dict[str, Any]] = {
    "starting": {
        "agents": [
            agent("session-demo-healthy", 6, 1, "ok", "read"),
            agent(
                "session-demo-searcher",
                4,
                4,
                "ok",
                "web_search",
                preview='web_search query="qwen3.8 gated deltanet repetition fix"',
            ),
            agent("session-demo-pager", 18, 1, "ok", "web_search", harness="claude-code"),
            agent("session-demo-prober", 2, 2, "ok", "bash", preview='bash command="echo cbprobe4"'),
        ],
        "trips": [],
        "checks": 30,
        "denies": {"duplicate": 0, "cap": 0, "interrupted": 0},
    },
    "looping": {
        "agents": [
            agent("session-demo-healthy", 40, 3, "ok", "web_search", preview='read path="src/module_7.py"'),
            agent(
                "session-demo-searcher",
                6,
                6,
                "duplicate",
                "web_search",
                denies={"duplicate": 74},
                preview='web_search query="qwen3.8 gated deltanet repetition fix"',
            ),
            agent("session-demo-pager", 120, 1, "ok", "web_search", harness="claude-code"),
            agent(
                "session-demo-prober",
                6,
                6,
                "duplicate",
                "bash",
                denies={"duplicate": 9},
                preview='bash command="echo cbprobe4"',
            ),
            agent(
                "3f2a9c1e-demo-subagent",
                6,
                6,
                "duplicate",
                "read",
                parent="session-demo-healthy",
                denies={"duplicate": 31},
                preview='read path="/workspace/notes/brief.md"',
            ),
        ],
        "trips": [
            {
                "time": T0 - 9,
                "agent": "session-demo-searcher",
                "kind": "duplicate",
                "tool": "web_search",
                "count": 6,
                "limit": 6,
            },
            {
                "time": T0 - 7,
                "agent": "3f2a9c1e-demo-subagent",
                "kind": "duplicate",
                "tool": "read",
                "count": 6,
                "limit": 6,
            },
            {
                "time": T0 - 4,
                "agent": "session-demo-prober",
                "kind": "duplicate",
                "tool": "bash",
                "count": 6,
                "limit": 6,
            },
        ],
        "checks": 410,
        "denies": {"duplicate": 114, "cap": 0, "interrupted": 0},
    },
    "capped-and-interrupted": {
        "agents": [
            agent("session-demo-healthy", 77, 4, "ok", "bash", preview='read path="src/module_7.py"'),
            agent(
                "session-demo-searcher",
                6,
                6,
                "duplicate",
                "web_search",
                denies={"duplicate": 160},
                preview='web_search query="qwen3.8 gated deltanet repetition fix"',
            ),
            agent("session-demo-pager", 150, 1, "cap", "web_search", harness="claude-code", denies={"cap": 88}),
            agent(
                "session-demo-prober",
                6,
                6,
                "duplicate",
                "bash",
                denies={"duplicate": 23},
                preview='bash command="echo cbprobe4"',
            ),
            agent(
                "3f2a9c1e-demo-subagent",
                6,
                6,
                "interrupted",
                "read",
                parent="session-demo-healthy",
                denies={"duplicate": 55, "interrupted": 12},
                preview='read path="/workspace/notes/brief.md"',
                reason="interrupted by the operator from cbconsole",
            ),
        ],
        "trips": [
            {
                "time": T0 - 30,
                "agent": "session-demo-searcher",
                "kind": "duplicate",
                "tool": "web_search",
                "count": 6,
                "limit": 6,
            },
            {
                "time": T0 - 28,
                "agent": "3f2a9c1e-demo-subagent",
                "kind": "duplicate",
                "tool": "read",
                "count": 6,
                "limit": 6,
            },
            {
                "time": T0 - 25,
                "agent": "session-demo-prober",
                "kind": "duplicate",
                "tool": "bash",
                "count": 6,
                "limit": 6,
            },
            {
                "time": T0 - 20,
                "agent": "session-demo-pager",
                "kind": "cap",
                "tool": "web_search",
                "count": 150,
                "limit": 150,
            },
            {
                "time": T0 - 3,
                "agent": "3f2a9c1e-demo-subagent",
                "kind": "interrupted",
                "tool": "read",
                "count": 6,
                "limit": 0,
            },
        ],
        "checks": 1260,
        "denies": {"duplicate": 238, "cap": 88, "interrupted": 12},
    },
    # The recommended preset: warnings before denies, and the rules beyond the seed's (repeat, cycle).
    "warned-then-denied": {
        "config": {"preset": "recommended", "repeatLimit": 3, "cycleLimit": 3},
        "agents": [
            agent("session-demo-healthy", 40, 2, "ok", "read", preview='read path="src/module_7.py"'),
            agent(
                "session-demo-searcher",
                5,
                5,
                "warned",
                "web_search",
                rule="duplicate",
                warns={"duplicate": 1, "repeat": 1},
                preview='web_search query="qwen3.8 gated deltanet repetition fix"',
            ),
            agent(
                "session-demo-poller",
                9,
                3,
                "warned",
                "bash",
                rule="repeat",
                warns={"repeat": 1},
                preview='bash command="gh run view 4242"',
            ),
            agent(
                "session-demo-prober",
                3,
                3,
                "repeat",
                "bash",
                warns={"repeat": 1},
                denies={"repeat": 4},
                preview='bash command="echo cbprobe4"',
            ),
            agent(
                "3f2a9c1e-demo-subagent",
                12,
                4,
                "cycle",
                "read",
                parent="session-demo-healthy",
                warns={"cycle": 1},
                denies={"cycle": 2},
                preview='read path="/workspace/notes/brief.md"',
            ),
        ],
        "trips": [
            {"time": T0 - 6, "agent": "session-demo-prober", "kind": "repeat", "tool": "bash", "count": 3, "limit": 3},
            {
                "time": T0 - 2,
                "agent": "3f2a9c1e-demo-subagent",
                "kind": "cycle",
                "tool": "read",
                "count": 3,
                "limit": 3,
            },
        ],
        "checks": 180,
        "denies": {"duplicate": 0, "repeat": 4, "cycle": 2, "cap": 0, "interrupted": 0},
        "warnings": 5,
    },
}
RATES = {
    "session-demo-healthy": [3, 4, 5, 4, 3, 4, 5, 4, 4, 3, 5, 4],
    "session-demo-searcher": [12, 11, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    "session-demo-pager": [25, 30, 29, 31, 30, 28, 30, 29, 18, 0, 0, 0],
    "session-demo-prober": [3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    "3f2a9c1e-demo-subagent": [6, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    "session-demo-poller": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
}


# The recommended preset as these screens show it: tuning the preset's values must not change a screenshot
# (test_console_form.py checks the form against the preset's values in force).
RECOMMENDED = {"duplicateWarn": 2, "repeatLimit": 3, "repeatWarn": 1, "cycleLimit": 3, "cycleWarn": 1, "capWarn": 30}


@pytest.fixture(autouse=True)
def fixed_presets(monkeypatch):
    monkeypatch.setitem(PRESETS, "recommended", RECOMMENDED)


@pytest.fixture(autouse=True)
def utc():
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def frame(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "event": "state",
        "full": True,
        "time": T0,
        "agents": state["agents"],
        "gone": [],
        "top_keys": sorted(
            (
                {"agent": a["agent"], "tool": a["worst_tool"], "preview": a["worst_preview"], "count": a["worst_count"]}
                for a in state["agents"]
                if a["worst_count"] > 1
            ),
            key=lambda k: -k["count"],
        ),
        "trips": state["trips"],
        "stats": {
            "checks": state["checks"],
            "denies": state["denies"],
            "warnings": state.get("warnings", 0),
            "agents": len(state["agents"]),
            "connections": 5,
            "harnesses": {"claude-code": 1, "dsh": 4},
            "paused": False,
            "uptime": 60.0,
            "pid": 4242,
            "socket": "/tmp/cbconsole-demo/guard.sock",
        },
        "config": {**CONFIG, "values": {**CONFIG["values"], **state.get("config", {})}},
    }


class NoGuard(GuardSession):
    """A session that reaches no guard: the app's state gets only the frames a test injects."""

    def __init__(self) -> None:
        super().__init__()
        self.socket_path = Path("/tmp/cbconsole-demo/guard.sock")
        self.operator_socket = Path("/tmp/cbconsole-demo-operator/operator.sock")

    async def open(self, state: ConsoleState, tell) -> None:
        """Nothing to reach: `link` stays None, as for a console whose guard has not answered yet."""


def make_app(theme: str) -> CBConsole:
    return CBConsole(NoGuard(), theme=theme, clock=lambda: T0)


def steady_cursors(app: CBConsole) -> None:
    """A form's text cursor shown without blinking: drawn or not, at the moment of the screenshot, by the clock."""
    for box in (*app.screen.query(Input), *app.screen.query(TextArea)):
        box.cursor_blink = False


async def mounted(pilot) -> None:
    """The main screen and its tables are mounted (`app.run`'s autopilot, which snap_compare uses, starts
    before they are; `run_test` waits for them)."""
    while not pilot.app.main.is_mounted:
        await pilot.pause()


def counters(checks: int, denies: int) -> list[tuple[int, int]]:
    """The guard's cumulative (checks, denies) at each second of the activity chart's span, ending at `checks`
    and `denies`: a steady trickle, then a loop forming in the last minute, denied in its last half."""
    n = ACTIVITY_SECONDS
    check_weights = [1 + (i % 9 == 0) + (i % 23 == 0) + max(0, i - (n - 60)) // 4 for i in range(n)]
    deny_weights = [max(0, i - (n - 30)) for i in range(n)]
    out, seen_checks, seen_denies = [], 0, 0
    for i in range(n):
        seen_checks += check_weights[i]
        seen_denies += deny_weights[i]
        out.append((checks * seen_checks // sum(check_weights), denies * seen_denies // sum(deny_weights)))
    return out


def inject(app: CBConsole, frame_: dict[str, Any], rates: dict[str, list[int]] | None = None, marked=()) -> None:
    stats = frame_["stats"]
    app.state.activity.record(T0 - ACTIVITY_SECONDS - 1, 0, 0)  # the chart's seconds before the frame
    for i, (checks, denies) in enumerate(counters(stats["checks"], sum(stats["denies"].values()))):
        app.state.activity.record(T0 - ACTIVITY_SECONDS + i, checks, denies)
    app.state.apply(StateFrame.from_json(frame_))  # decoded as the console's link decodes it
    app.state.set_guard_status("running")
    for name, values in (rates or {}).items():
        if name in app.state.agents:
            app.state.agents[name].rate = deque(values, maxlen=RATE_SLOTS)
    for name in marked:
        app.state.toggle_mark(name)
    app.state.guards[0].checks_per_s = 47.0  # what the frozen clock cannot sample
    app.state.changed()
    app.main.flush()


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("state", list(STATES))
def test_main_screen_snapshot(snap_compare, theme, state):
    app = make_app(theme)

    async def run_before(pilot) -> None:
        await mounted(pilot)
        inject(
            app,
            frame(STATES[state]),
            RATES,
            marked=("session-demo-prober",) if state == "capped-and-interrupted" else (),
        )
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# Enough agents to fill a tall table: the rows a size shows, and the vertical scrollbar's two cells.
CROWDED = {
    **STATES["warned-then-denied"],
    "agents": [
        *STATES["warned-then-denied"]["agents"],
        *(agent(f"session-demo-worker-{i:02}", 3 + i, 1, "ok", "read", age=1.0 + i) for i in range(25)),
    ],
}
TERMINAL_SIZES = [(80, 24), (120, 40), (200, 50)]


@pytest.mark.parametrize("size", TERMINAL_SIZES, ids=[f"{w}x{h}" for w, h in TERMINAL_SIZES])
def test_terminal_size_snapshot(snap_compare, size):
    """Each agent's id, status and worst repeat in view at any size, without scrolling sideways; the other
    columns by priority as the width allows (the detail line shows the hidden ones); at 24 rows the agents
    table takes the height the top repeated calls and the trips give up."""
    app = make_app("dark")

    async def run_before(pilot) -> None:
        await mounted(pilot)
        inject(app, frame(CROWDED), RATES)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


# Subagents two and five levels down, a subagent whose parent the console does not know, and a cycle of parents.
FAMILY = {
    **STATES["warned-then-denied"],
    "agents": [
        *STATES["warned-then-denied"]["agents"],
        agent("session-demo-reader-1", 7, 1, "ok", "read", parent="3f2a9c1e-demo-subagent"),
        agent("session-demo-reader-2", 4, 2, "ok", "read", parent="session-demo-reader-1"),
        agent("session-demo-reader-3", 3, 1, "ok", "grep", parent="session-demo-reader-2"),
        agent("session-demo-reader-4", 2, 1, "ok", "grep", parent="session-demo-reader-3"),
        agent("session-demo-helper", 9, 3, "ok", "bash", parent="session-demo-healthy"),
        agent("session-demo-orphan", 5, 1, "ok", "read", parent="session-gone"),
        agent("cycle-a", 2, 1, "ok", "read", parent="cycle-b"),
        agent("cycle-b", 3, 3, "ok", "read", parent="cycle-a"),
    ],
}


def test_tree_snapshot(snap_compare):
    """`t`: each session followed by its subagents with tree glyphs, a root ranked by its worst subagent, depth
    indented at most three levels (`└…` deeper), an unknown parent and a cycle of parents shown as roots."""
    app = make_app("dark")

    async def run_before(pilot) -> None:
        await mounted(pilot)
        inject(app, frame(FAMILY), RATES)
        await pilot.press("t")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_config_form_after_choosing_a_preset_snapshot(snap_compare):
    """The form over the seed's config once `recommended` is chosen: the note says what it sets, the fields moved."""
    app = make_app("dark")

    async def run_before(pilot) -> None:
        await mounted(pilot)
        inject(app, frame(STATES["looping"]), RATES)
        await pilot.press("e")
        while not isinstance(app.screen, ConfigScreen):
            await pilot.pause()
        app.screen.query_one("#f-preset", Select).value = "recommended"
        steady_cursors(app)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 40), run_before=run_before)


async def test_status_is_the_status_word_and_the_header_names_trips_and_denies_apart():
    app = make_app("dark")
    async with app.run_test(size=SIZE) as pilot:
        inject(app, frame(STATES["capped-and-interrupted"]))
        await pilot.pause()
        table = app.query_one(AgentsTable)
        status = {name: table.get_cell(name, "status").plain for name in app.state.agents}
        assert status == {
            "session-demo-healthy": "ok",
            "session-demo-searcher": "duplicate",
            "session-demo-pager": "cap",
            "session-demo-prober": "duplicate",
            "3f2a9c1e-demo-subagent": "interrupted",
        }
        header = str(app.query_one(GuardHeader).content)
        assert "trips 5" in header  # the trips list: first denies
        assert "denies 338 (duplicate 238 · cap 88 · interrupted 12)" in header  # every denied call
        assert "tripped" not in header and "capped" not in header


async def test_a_warned_agent_shows_warned_and_its_rule_and_a_denied_one_its_deny_kind():
    app = make_app("dark")
    async with app.run_test(size=SIZE) as pilot:
        inject(app, frame(STATES["warned-then-denied"]))
        await pilot.pause()
        table = app.query_one(AgentsTable)
        colors = app.main.roles()
        status = {name: table.get_cell(name, "status") for name in app.state.agents}
        assert {name: cell.plain for name, cell in status.items()} == {
            "session-demo-healthy": "ok",
            "session-demo-searcher": "warned · duplicate",
            "session-demo-poller": "warned · repeat",
            "session-demo-prober": "repeat",
            "3f2a9c1e-demo-subagent": "cycle",
        }
        assert colors["warn"] in str(status["session-demo-poller"].style)
        assert colors["trip"] in str(status["session-demo-prober"].style)
        assert colors["trip"] in str(status["3f2a9c1e-demo-subagent"].style)
        # Denied first (cycle before repeat: its worst repeat is closer to the limit), then warned, then ok.
        order = [table.get_row(key)[1].plain for key in table.ordered_keys]
        assert order == [
            "3f2a9c1e-demo-subagent",
            "session-demo-prober",
            "session-demo-searcher",
            "session-demo-poller",
            "session-demo-healthy",
        ]
        header = str(app.query_one(GuardHeader).content)
        assert "trips 2   denies 6 (repeat 4 · cycle 2)   warnings 5" in header
        assert "config preset recommended · duplicateLimit 6 · repeatLimit 3 · cycleLimit 3 · window 200" in header
        detail = app.query_one(AgentDetail)
        for name, counts in {
            "session-demo-searcher": "warns duplicate 1 · repeat 1   worst repeat 5×",
            "session-demo-prober": "denies repeat 4   warns repeat 1   worst repeat 3×",
            "3f2a9c1e-demo-subagent": "denies cycle 2   warns cycle 1   worst repeat 4×",
            "session-demo-healthy": "worst repeat 2×",
        }.items():
            table.move_cursor(row=table.get_row_index(name))
            await pilot.pause()
            assert str(detail.content).splitlines()[1].startswith(counts), name


async def test_the_header_fits_its_counts_to_the_width_dropping_the_least_needed_first():
    app = make_app("dark")
    async with app.run_test(size=(80, 24)) as pilot:
        inject(app, frame(STATES["warned-then-denied"]))
        await pilot.pause()
        counts = str(app.query_one(GuardHeader).content).splitlines()[1]
        # No room for the split by kind, the checks' total or the harnesses' names: the numbers that matter stay.
        assert counts == "harnesses 5   agents 5   47 checks/s   trips 2   denies 6   warnings 5"
        await pilot.resize_terminal(150, 40)
        await pilot.pause()
        counts = str(app.query_one(GuardHeader).content).splitlines()[1]
        assert counts.startswith("harnesses claude-code 1, dsh 4   agents 5   47 checks/s   checks 180")
        assert counts.endswith("denies 6 (repeat 4 · cycle 2)   warnings 5")


# -- every terminal size -----------------------------------------------------------------------------

ALL_COLUMNS = tuple(key for key, _label, _width in AgentsTable.COLUMNS if key != "guard")  # one guard: no column
SHOWN_AT = {  # terminal width -> the agents table's columns (5 agents: no vertical scrollbar)
    80: ("mark", "agent", "status", "calls", "worst", "cap"),
    120: ("mark", "agent", "status", "calls", "worst", "cap", "window", "tool", "age"),
    200: ALL_COLUMNS,
}


def no_sideways_scroll(table: AgentsTable) -> bool:
    return table.virtual_size.width <= table.scrollable_content_region.width and table.max_scroll_x == 0


async def test_the_agents_table_drops_columns_by_priority_as_the_terminal_narrows_and_restores_them():
    app = make_app("dark")
    async with app.run_test(size=(200, 50)) as pilot:
        inject(app, frame(STATES["capped-and-interrupted"]), RATES)
        await pilot.pause()
        table = app.query_one(AgentsTable)
        before = {name: [c.plain for c in table.get_row(name)] for name in app.state.agents}
        for width in (80, 120, 200, 120, 80, 200):
            await pilot.resize_terminal(width, 40)
            await pilot.pause()
            assert table.shown == SHOWN_AT[width], width
            assert {"agent", "status", "worst"} <= set(table.shown)
            assert table.hidden == set(ALL_COLUMNS) - set(SHOWN_AT[width])
            assert no_sideways_scroll(table), width
            header = table.render_line(0).text.split()  # the header line as drawn
            assert header[:3] == ["agent", "status", "calls"], width  # the columns keep their order
        # Back at full width: every cell is what it was, taken from the table's own cells, not re-rendered.
        assert {name: [c.plain for c in table.get_row(name)] for name in app.state.agents} == before
        assert table.get_cell("session-demo-pager", "cap").plain == "150/150"


async def test_a_resize_renders_no_row_and_a_narrow_table_cuts_ids_keeping_both_ends(monkeypatch):
    app = make_app("dark")
    async with app.run_test(size=(200, 50)) as pilot:
        inject(app, frame(STATES["looping"]), RATES)
        await pilot.pause()
        table = app.query_one(AgentsTable)
        rendered: list[str] = []
        real = AgentsTable.render_row
        monkeypatch.setattr(
            AgentsTable, "render_row", lambda self, a, *rest: rendered.append(a.id) or real(self, a, *rest)
        )
        for width in (120, 80, 68, 200):
            await pilot.resize_terminal(width, 40)
            await pilot.pause()
            if width == 68:  # the always-shown columns and cap, with the id cut to what is left
                assert table.shown == ("mark", "agent", "status", "worst", "cap")
                assert table.agent_width == 19
                subagent = table.get_cell("3f2a9c1e-demo-subagent", "agent").plain
                assert subagent == clip("3f2a9c1e-demo-subagent", 19) == "3f2a9c1e-dem…bagent"
                assert no_sideways_scroll(table)
        assert rendered == []
        assert table.get_cell("3f2a9c1e-demo-subagent", "agent").plain == "3f2a9c1e-demo-subagent"


async def test_the_detail_line_shows_the_columns_the_table_hides():
    app = make_app("dark")
    async with app.run_test(size=(200, 50)) as pilot:
        inject(app, frame(STATES["capped-and-interrupted"]), RATES)
        await pilot.pause()
        table = app.query_one(AgentsTable)
        table.move_cursor(row=table.get_row_index("session-demo-healthy"))
        await pilot.pause()
        detail = app.query_one(AgentDetail)
        assert len(str(detail.content).splitlines()) == 2  # nothing hidden
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        lines = str(detail.content).splitlines()
        assert lines[0] == "session-demo-healthy  via dsh"  # harness and parent: the first line, always
        assert lines[2].startswith("window 77/200   last tool bash   age <1s   calls/s ")
        await pilot.resize_terminal(60, 24)  # no room for cap: the calls against the cap move here
        await pilot.pause()
        assert str(detail.content).splitlines()[2].startswith("calls 77/150   window 77/200")


@pytest.mark.parametrize(
    ("height", "screen_class", "bottom"), [(16, "-tiny", 0), (24, "-short", 6), (40, "-tall", 13), (50, "-tall", 13)]
)
async def test_a_short_terminal_gives_the_agents_table_the_height_of_the_bottom_panels(height, screen_class, bottom):
    app = make_app("dark")
    async with app.run_test(size=(80, height)) as pilot:
        inject(app, frame(CROWDED), RATES)
        await pilot.pause()
        screen, table = app.main, app.query_one(AgentsTable)
        assert screen.has_class(screen_class)
        panels = screen.query_one("#bottom")
        assert (panels.outer_size.height if panels.display else 0) == bottom
        assert app.query_one(AgentDetail).outer_size.height == 3  # the detail lines stay (with the hidden columns)
        assert table.outer_size.height > height // 3
        if height == 24:
            assert table.outer_size.height == 9  # the column names and eight agents (the activity chart takes a line)
        assert no_sideways_scroll(table)


# -- untrusted strings are never markup -------------------------------------------------------------

HOSTILE = ["[/x]", "[@click=app.quit]x[/]", "[red]", "[bold]bold?[/bold]", "\x1b[31mansi", "{tool}"]


def hostile_frame() -> dict[str, Any]:
    agents = [
        agent(
            name,
            7,
            6,
            "duplicate",
            tool,
            parent=HOSTILE[(i + 1) % len(HOSTILE)],
            harness=HOSTILE[(i + 2) % len(HOSTILE)],
            preview=f"{tool} q={name!r}",
            denies={"duplicate": 1},
        )
        for i, (name, tool) in enumerate(zip(HOSTILE, reversed(HOSTILE), strict=True))
    ]
    f = frame(
        {
            "agents": agents,
            "trips": [
                {"time": T0, "agent": a["agent"], "kind": "duplicate", "tool": a["last_tool"], "count": 6, "limit": 6}
                for a in agents
            ],
            "checks": 42,
            "denies": {"duplicate": 6, "cap": 0, "interrupted": 0},
        }
    )
    # a rule, and the keys of warns and denies (a newer guard's rule, say)
    agents[0].update(status="warned", rule=HOSTILE[1], warns={HOSTILE[2]: 2}, denies={HOSTILE[3]: 1})
    f["stats"]["harnesses"] = {h: 1 for h in HOSTILE}
    f["stats"]["socket"] = "/tmp/[red]sock"
    f["stats"]["denies"] = {"duplicate": 6, HOSTILE[3]: 1}
    tools = {HOSTILE[1]: {"maxCalls": 5}}  # per-tool overrides name tools too
    f["config"] = {**CONFIG, "values": {**CONFIG["values"], "exempt": HOSTILE, "tools": tools}, "source": "[/x]"}
    return f


async def test_markup_in_agent_ids_tool_names_and_args_is_shown_literally_and_breaks_nothing():
    app = make_app("dark")
    async with app.run_test(size=SIZE) as pilot:
        inject(app, hostile_frame())
        await pilot.pause()
        table = app.query_one(AgentsTable)
        assert app.is_running  # `[@click=app.quit]` did not quit, `[/x]` did not raise
        for name in HOSTILE:
            cells = [c.plain for c in table.get_row(name)]
            assert cells[1] == clip(name, AGENT_WIDTH)
        tools = {table.get_cell(n, "tool").plain for n in HOSTILE}
        assert tools == {clip(t, TOOL_WIDTH) for t in HOSTILE}  # clip() escapes control characters too
        assert table.get_cell(HOSTILE[0], "status").plain == f"warned · {HOSTILE[1]}"
        header = str(app.query_one(GuardHeader).content)
        assert "/tmp/[red]sock" in header and "[@click=app.quit]x[/]" in header
        assert f"tools {HOSTILE[1]}" in header
        keys = app.query_one(KeysTable)
        assert any("[@click=app.quit]x[/]" in keys.get_row_at(i)[-1].plain for i in range(keys.row_count))  # the call
        assert app.query_one(TripsTable).row_count == len(HOSTILE)
        for name in HOSTILE:  # the detail line too, for each selected agent
            table.move_cursor(row=table.get_row_index(name))
            await eventually_async(lambda name=name: table.selected == name, what=f"{name!r} selected", pilot=pilot)
            app.state.changed()
            app.main.flush()
            assert name.replace("\x1b", "\\x1b") in str(app.query_one("#detail").content)
            if name == HOSTILE[0]:
                assert f"denies {HOSTILE[3]} 1   warns {HOSTILE[2]} 2" in str(app.query_one("#detail").content)
        await pilot.press("i")  # the confirmation names a hostile id literally
        await pilot.pause()
        assert app.is_running
        await pilot.press("n", "e")  # the config form shows a hostile tool name in the overrides as text
        await pilot.pause()
        assert isinstance(app.screen, ConfigScreen) and app.is_running
        assert app.screen.query_one("#f-tools", TextArea).text == f"'{HOSTILE[1]}': {{maxCalls: 5}}"


def test_markup_injection_snapshot(snap_compare):
    app = make_app("dark")

    async def run_before(pilot) -> None:
        await mounted(pilot)
        inject(app, hostile_frame())
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# -- the drill-down ------------------------------------------------------------------------------------


def searcher_calls() -> CallsEvent:
    """What the guard sends for the looping searcher: a few other calls, then its loop, warned and denied."""
    query = 'web_search query="qwen3.8 gated deltanet repetition fix"'
    calls = [
        CallRow(
            time=T0 - 30, tool="read", preview='read path="notes/plan.md"', decision="allow", count=1, limit=6, rule=""
        ),
        CallRow(time=T0 - 29, tool="todo_write", preview="todo_write", decision="pass", count=0, limit=0, rule=""),
        *(
            CallRow(time=T0 - 28 + i, tool="web_search", preview=query, decision="allow", count=i + 1, limit=6, rule="")
            for i in range(5)
        ),
        CallRow(time=T0 - 22, tool="web_search", preview=query, decision="warn", count=6, limit=6, rule="duplicate"),
        *(
            CallRow(
                time=T0 - 21 + i, tool="web_search", preview=query, decision="deny", count=6, limit=6, rule="duplicate"
            )
            for i in range(12)
        ),
    ]
    keys = [
        KeyRow(agent="session-demo-searcher", tool="web_search", preview=query, count=6),
        KeyRow(agent="session-demo-searcher", tool="read", preview='read path="notes/plan.md"', count=2),
    ]
    return CallsEvent(agent="session-demo-searcher", calls=calls, keys=keys, distinct=4)


DRILL = {
    **STATES["looping"],
    "agents": [
        *(a for a in STATES["looping"]["agents"] if a["agent"] != "session-demo-searcher"),
        {
            **agent(
                "session-demo-searcher",
                7,
                6,
                "duplicate",
                "web_search",
                denies={"duplicate": 12},
                warns={"duplicate": 1},
                preview='web_search query="qwen3.8 gated deltanet repetition fix"',
            ),
            "cap": 300,
            "override": {"maxCallsPerAgent": 300},
        },
        agent("session-demo-searcher-sub-1", 3, 1, "ok", "read", parent="session-demo-searcher"),
        agent("session-demo-searcher-sub-2", 6, 6, "duplicate", "grep", parent="session-demo-searcher"),
    ],
}
DRILL_SIZES = [(80, 24), (120, 40)]


@pytest.mark.parametrize("size", DRILL_SIZES, ids=[f"{w}x{h}" for w, h in DRILL_SIZES])
def test_drilldown_snapshot(snap_compare, size):
    """enter on an agent: who it is and its limits (an override marked), its family, its calls as they came
    (the newest at the bottom), the calls repeated in its window and its trips; at 80x24 too."""
    app = make_app("dark")

    async def run_before(pilot) -> None:
        await mounted(pilot)
        inject(app, frame(DRILL), RATES)
        table = app.query_one(AgentsTable)
        table.move_cursor(row=table.get_row_index("session-demo-searcher"))
        await pilot.pause()
        await pilot.press("enter")
        while not isinstance(app.screen, AgentScreen):
            await pilot.pause()
        app.screen.follow.apply(searcher_calls())
        app.screen.flush()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_override_form_snapshot(snap_compare):
    """o: the agent's own cap and duplicate limit, the config's values beside them, an empty box for none."""
    app = make_app("dark")

    async def run_before(pilot) -> None:
        await mounted(pilot)
        inject(app, frame(DRILL), RATES)
        table = app.query_one(AgentsTable)
        table.move_cursor(row=table.get_row_index("session-demo-searcher"))
        await pilot.pause()
        await pilot.press("o")
        while not isinstance(app.screen, OverrideScreen):
            await pilot.pause()
        steady_cursors(app)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
