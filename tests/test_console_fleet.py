"""One console over several guards (`cbconsole --attach A --attach B`): each guard's agents under keys of their
own, a column naming the guard, every action sent to the guard that owns the agent, a guard that goes away shown
as such and back by itself. The state alone first, then real guard processes, then the real command in tmux."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest

from breaker.protocol import AgentRow, KeyRow, StateFrame, TripRow
from console.app import CBConsole
from console.command import _members
from console.screens.config import ConfigScreen
from console.screens.confirm import ConfirmScreen
from console.session import FleetMember, FleetSession, operator_socket_for
from console.state import ConsoleState, agent_key
from console.widgets.agents import AgentsTable
from console.widgets.detail import AgentDetail
from console.widgets.header import GuardHeader
from tests.conftest import ROOT, request
from tests.test_console_pilot import SIZE, loop, text_of
from tests.waits import eventually, eventually_async


def row(agent: str, parent: str | None = None, worst: int = 1, status: str = "ok") -> AgentRow:
    return AgentRow(
        agent=agent, harness="dsh", parent=parent, calls=worst, window_fill=worst, window=200, cap=300,
        worst_count=worst, worst_tool="bash", worst_preview="", duplicate_limit=6,
        denies={status: 1} if status not in ("ok", "warned") else {}, status=status,
        last_tool="bash", last_seen=None, interrupt_reason=None,
    )  # fmt: skip


def full(rows: list[AgentRow], **extra: object) -> StateFrame:
    return StateFrame(seq=0, full=True, time=0.0, agents=rows, gone=[], **extra)  # type: ignore[arg-type]


# -- the state ----------------------------------------------------------------------------------------


def test_the_same_agent_id_on_two_guards_is_two_agents_and_each_full_picture_replaces_only_its_own():
    state = ConsoleState(clock=lambda: 0.0, guards=["", ""])
    state.apply(full([row("session-1"), row("only-a")]), guard=0)
    state.apply(full([row("session-1", worst=5)]), guard=1)
    assert sorted(state.agents) == sorted([agent_key(0, "session-1", fleet=True), agent_key(0, "only-a", fleet=True),
                                           agent_key(1, "session-1", fleet=True)])  # fmt: skip
    a, b = state.agents["0\x1fsession-1"], state.agents["1\x1fsession-1"]
    assert (a.id, a.guard, b.id, b.guard, b.data.worst_count) == ("session-1", 0, "session-1", 1, 5)
    state.apply(full([]), guard=1)  # guard 1 says it has nobody now: guard 0's agents stay
    assert sorted(state.agents) == ["0\x1fonly-a", "0\x1fsession-1"]
    state.apply(StateFrame(seq=1, full=False, time=0.0, agents=[], gone=["only-a"]), guard=0)
    assert list(state.agents) == ["0\x1fsession-1"]


def test_an_agent_id_cannot_take_the_key_of_another_guards_agent():
    state = ConsoleState(clock=lambda: 0.0, guards=["", ""])
    state.apply(full([row("x")]), guard=1)
    state.apply(full([row("x\x1f1"), row("1\x1fx")]), guard=0)  # ids built to look like guard 1's key
    assert len(state.agents) == 3 and state.agents["1\x1fx"].guard == 1
    assert {a.id for a in state.agents.values() if a.guard == 0} == {"x\x1f1", "1\x1fx"}


def test_subagents_hang_under_the_parent_of_their_own_guard_in_the_tree():
    state = ConsoleState(clock=lambda: 0.0, guards=["", ""])
    state.apply(full([row("root"), row("kid", parent="root")]), guard=0)
    state.apply(full([row("kid", parent="root")]), guard=1)  # its parent is not on guard 1
    state.set_tree(True)
    shown = [(s.agent.key, s.glyphs) for s in state.shown()]
    assert ("0\x1fkid", "└─") in shown and ("1\x1fkid", "") in shown  # guard 1's kid is a root there


def test_top_keys_and_trips_of_every_guard_are_shown_by_the_agent_and_its_guard():
    state = ConsoleState(clock=lambda: 0.0, guards=["build", "laptop"])
    key = KeyRow(agent="a", tool="bash", preview='bash command="make"', count=3)
    trip = TripRow(time=1.0, agent="a", kind="duplicate", tool="bash", count=6, limit=6)
    state.apply(full([row("a")], top_keys=[key], trips=[trip]), guard=0)
    state.apply(full([row("a")], top_keys=[KeyRow(agent="a", tool="read", preview='read path="x"', count=5)]), guard=1)
    assert [(k.agent, k.count) for k in state.top_keys] == [("1\x1fa", 5), ("0\x1fa", 3)]
    assert [state.name_of(k.agent) for k in state.top_keys] == ["a@laptop", "a@build"]
    assert [state.name_of(t.agent) for t in state.trips] == ["a@build"]


def test_guards_on_one_host_are_told_apart_by_their_number():
    state = ConsoleState(clock=lambda: 0.0, guards=["", "", "ci"])
    stats = {"checks": 1, "host": "box"}
    for n in range(3):
        state.apply(StateFrame.from_json({"seq": 0, "full": True, "agents": [], "gone": [], "stats": stats}), guard=n)
    assert [v.label for v in state.guards] == ["box #1", "box #2", "ci"]


def test_attach_names_paths_and_refuses_what_cannot_be_right(tmp_path):
    sock = tmp_path / "run" / "guard.sock"
    members = _members(["build=/srv/a/guard.sock", "/home/me/fwd/operator.sock"], sock, None)
    assert members == [
        FleetMember("build", Path("/srv/a-operator/operator.sock")),
        FleetMember("", Path("/home/me/fwd/operator.sock")),
    ]
    assert "the same guard twice" in _members(["/a/guard.sock", "x=/a/guard.sock"], sock, None)
    assert "name before '=' is empty" in _members(["=/a/guard.sock", "/b/guard.sock"], sock, None)
    assert "without a PATH" in _members(["", "/b/guard.sock"], sock, None)
    assert _members(["/a/b=c/guard.sock"], sock, None)[0].name == ""  # a '=' inside the path is the path's


def test_several_attaches_refuse_one_operator_socket_for_all_on_the_command_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "breaker.cli", "--attach", "/a/guard.sock", "--attach", "/b/guard.sock",
         "--operator-socket", str(tmp_path / "o.sock")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "with several --attach, give each its PATH" in out.stderr


# -- real guards, one console ------------------------------------------------------------------------


def fleet_app(*guards) -> CBConsole:
    return CBConsole(FleetSession([FleetMember("", g.operator) for g in guards]))


def key_of(app: CBConsole, guard: int, agent: str) -> str:
    return agent_key(guard, agent, fleet=True)


def snapshot(guard) -> dict[str, dict]:
    return {r["agent"]: r for r in request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"]}


async def test_two_guards_one_console_each_action_goes_to_the_guard_that_owns_the_agent(guard_factory):
    a, b = guard_factory(), guard_factory()
    app = fleet_app(a, b)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(
            lambda: all(v.status == "attached" for v in app.state.guards), what="both attached", pilot=pilot
        )
        await asyncio.to_thread(loop, a, "session-1", 2)
        await asyncio.to_thread(loop, b, "session-1", 7)  # the same id, looping, on the other guard
        table = app.query_one(AgentsTable)
        on_b = key_of(app, 1, "session-1")
        await eventually_async(lambda: table.row_count == 2, what="both agents", pilot=pilot)
        await eventually_async(lambda: table.ordered_keys[0] == on_b, what="the looping one first", pilot=pilot)
        labels = [v.label for v in app.state.guards]
        assert labels[0] != labels[1] and all(labels)  # the same host: told apart
        assert table.get_cell(on_b, "guard").plain == labels[1]
        assert table.get_cell(on_b, "agent").plain == "session-1"

        table.move_cursor(row=table.get_row_index(on_b))
        await eventually_async(
            lambda: f"on {labels[1]}" in text_of(app.query_one(AgentDetail)), what="the detail", pilot=pilot
        )
        await pilot.press("i")
        await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation", pilot=pilot)
        assert f"session-1@{labels[1]}" in str(app.screen.query_one("#body").content)
        await pilot.press("y")
        await eventually_async(
            lambda: snapshot(b)["session-1"]["status"] == "interrupted", what="b's agent interrupted", pilot=pilot
        )
        assert snapshot(a)["session-1"]["status"] == "ok"  # the same id on the other guard: untouched

        await pilot.press("e")  # the config of the selected agent's guard, and only its
        await eventually_async(lambda: isinstance(app.screen, ConfigScreen), what="the config form", pilot=pilot)
        assert labels[1] in str(app.screen.query_one("#heading").content)
        app.screen.query_one("#f-duplicateLimit").value = "3"
        await pilot.press("ctrl+s")
        await eventually_async(
            lambda: app.state.guards[1].values.get("duplicateLimit") == 3, what="b's config", pilot=pilot
        )
        limits = [
            request(g.operator, {"op": "config_get", "id": 1})["config"]["values"]["duplicateLimit"] for g in (a, b)
        ]
        assert limits == [6, 3]


async def test_a_guard_that_goes_away_is_shown_gone_and_comes_back_by_itself(guard_factory):
    a, b = guard_factory(), guard_factory()
    app = fleet_app(a, b)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(
            lambda: all(v.status == "attached" for v in app.state.guards), what="both attached", pilot=pilot
        )
        await asyncio.to_thread(loop, a, "on-a", 1)
        await asyncio.to_thread(loop, b, "on-b", 1)
        table = app.query_one(AgentsTable)
        await eventually_async(lambda: table.row_count == 2, what="both agents", pilot=pilot)
        # an operator's change is saved before its reply, with every call before it: on-a outlives the kill
        assert request(a.operator, {"op": "reset", "id": 1, "agent": "nobody"})["ok"]
        a.kill9()
        await eventually_async(
            lambda: app.state.guards[0].status == "unreachable", what="a shown unreachable", pilot=pilot
        )
        header = app.query_one(GuardHeader)
        await eventually_async(lambda: "unreachable" in text_of(header), what="the header says so", pilot=pilot)
        on_a = key_of(app, 0, "on-a")
        await eventually_async(
            lambda: "strike" in str(table.get_cell(on_a, "guard").style), what="a's rows marked", pilot=pilot
        )
        assert app.state.guards[1].status == "attached" and table.row_count == 2  # b goes on; a's last picture kept
        a.start()  # the same sockets, its state file: the link finds it again
        await eventually_async(lambda: app.state.guards[0].status == "attached", what="a back", timeout=20, pilot=pilot)
        await asyncio.to_thread(loop, a, "after", 1)
        await eventually_async(
            lambda: key_of(app, 0, "after") in table.ordered_keys, what="a's new agent shown", pilot=pilot
        )
        assert "strike" not in str(table.get_cell(on_a, "guard").style)


@pytest.mark.needs("tmux")
def test_the_command_with_two_attaches_shows_both_guards_in_a_real_terminal(guard_factory, tmux):
    a, b = guard_factory(), guard_factory()
    loop(a, "alpha-agent", 1)
    loop(b, "beta-agent", 7)
    command = (
        f"{sys.executable} -m breaker.cli --attach first={a.socket} --attach second={b.operator} --readonly; sleep 30"
    )
    tmux.start(f"cd {ROOT} && {command}", width=160, height=40)
    shown = ("beta-agent", "alpha-agent", "2 guards", "first attached", "second attached")

    def showing() -> str | None:
        screen = tmux.screen()
        return screen if all(needle in screen for needle in shown) else None

    screen = eventually(showing, what=f"both agents and both guards attached: {shown}")
    beta = next(line for line in screen.splitlines() if "beta-agent" in line and "second" in line)
    assert "duplicate" in beta  # its status, on its guard's row


@pytest.mark.parametrize("path", ["operator.sock", "guard.sock"])
def test_an_attach_path_is_an_operator_socket_by_its_name_else_a_harness_socket(tmp_path, path):
    given = tmp_path / "d" / path
    expected = given if path == "operator.sock" else tmp_path / "d-operator" / "operator.sock"
    assert operator_socket_for(given) == expected


def test_an_incident_report_over_several_guards_names_each_guard_and_each_agents_guard():
    from datetime import datetime

    from console.report import report_json

    state = ConsoleState(clock=lambda: 0.0, guards=["build", "laptop"])
    trip = TripRow(time=1.0, agent="a", kind="duplicate", tool="bash", count=6, limit=6)
    state.apply(full([row("a", worst=6, status="duplicate")], trips=[trip]), guard=0)
    state.apply(full([row("a")], top_keys=[KeyRow(agent="a", tool="read", preview='read path="x"', count=2)]), guard=1)
    report = report_json(state, datetime(2026, 12, 1, tzinfo=UTC), selected="1\x1fa")
    assert [g["label"] for g in report["guards"]] == ["build", "laptop"] and "guard" not in report
    assert [(a["agent"], a["guard"]) for a in report["agents"]] == [("a", "build"), ("a", "laptop")]
    assert [(t["agent"], t["guard"]) for t in report["trips"]] == [("a", "build")]
    assert [(k["agent"], k["guard"]) for k in report["top_keys"]] == [("a", "laptop")]
    assert report["selected"] == "a@laptop"
