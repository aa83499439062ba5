"""The console's lifecycle objects and state without a screen: what quitting does to each kind of guard,
and the one way the state says it changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from breaker.protocol import AgentRow, ConfigFrame, GuardStats, StateFrame
from console.session import AttachedGuard, DemoGuard, OnQuit, OwnGuard, ReplayGuard
from console.state import ConsoleState

SOCKET = Path("/nonexistent/cbconsole/guard.sock")
USED = {"dsh": 2}


class StartedGuard:
    """Stands in for a GuardSupervisor: this console started the guard."""

    pid = 4242


def started(session):
    session.supervisor = StartedGuard()
    return session


@pytest.mark.parametrize(
    ("session", "harnesses", "asking", "expected"),
    [
        (AttachedGuard(SOCKET), USED, True, OnQuit.STOP),  # stops only its own link
        (OwnGuard(SOCKET), USED, True, OnQuit.STOP),  # found a guard already running: not its to stop
        (started(OwnGuard(SOCKET)), {}, True, OnQuit.STOP),
        (started(OwnGuard(SOCKET)), USED, True, OnQuit.ASK),
        (started(OwnGuard(SOCKET)), USED, False, OnQuit.LEAVE),  # a signal: harnesses keep it running
        (started(OwnGuard(SOCKET, leave_running=True)), {}, True, OnQuit.LEAVE),
        (started(OwnGuard(SOCKET, leave_running=True)), {}, False, OnQuit.LEAVE),
        (started(ReplayGuard(SOCKET, ["t.jsonl"])), USED, True, OnQuit.STOP),
        (started(ReplayGuard(SOCKET, ["t.jsonl"])), USED, False, OnQuit.STOP),
        (started(DemoGuard()), USED, True, OnQuit.STOP),
        (started(DemoGuard()), USED, False, OnQuit.STOP),
    ],
    ids=[
        "attached",
        "own-found-running",
        "own-unused",
        "own-used-quit",
        "own-used-signal",
        "own-leave-running-quit",
        "own-leave-running-signal",
        "replay-quit",
        "replay-signal",
        "demo-quit",
        "demo-signal",
    ],
)
def test_what_quitting_does_to_the_guard_for_each_way_of_running(session, harnesses, asking, expected):
    assert session.on_quit(harnesses, asking=asking) is expected


def test_the_operator_socket_is_beside_the_harness_sockets_directory_unless_given():
    assert AttachedGuard(SOCKET).operator_socket == Path("/nonexistent/cbconsole-operator/operator.sock")
    assert OwnGuard(SOCKET, Path("/run/o.sock")).operator_socket == Path("/run/o.sock")


def row(agent: str, calls: int = 1) -> AgentRow:
    return AgentRow.from_json({"agent": agent, "calls": calls})


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("a state frame", lambda s: s.apply(StateFrame(seq=2, full=False, time=0.0, agents=[row("b")]))),
        ("the guard's status", lambda s: s.set_guard_status("running")),
        ("the config", lambda s: s.set_config(ConfigFrame(values={"window": 80}))),
        ("the pause", lambda s: s.set_paused(True)),
        ("the filter", lambda s: s.set_filter("a")),
        ("a mark", lambda s: s.toggle_mark("a")),
        ("the marks cleared", lambda s: (s.toggle_mark("a"), s.clear_marks())),
    ],
)
def test_every_change_the_screen_shows_moves_the_version(what, change):
    state = ConsoleState(clock=lambda: 0.0)
    state.apply(StateFrame(seq=1, full=True, time=0.0, agents=[row("a")], stats=GuardStats()))
    before = state.version
    change(state)
    assert state.version > before, what


def test_what_changes_nothing_leaves_the_version_alone():
    state = ConsoleState(clock=lambda: 0.0)
    state.set_guard_status("running")
    before = state.version
    state.set_guard_status("running")
    state.set_filter("")
    state.clear_marks()
    assert state.version == before


def test_the_config_values_are_decoded_once_and_a_bad_one_is_named():
    state = ConsoleState()
    state.set_config(ConfigFrame(values={"duplicateLimit": 3, "exempt": ["read"], "aNewerKey": 1}))
    assert state.settings is not None and state.settings.duplicate_limit == 3 and state.exempt == ("read",)
    assert state.values["duplicateLimit"] == 3 and state.values["window"] == 200  # the form gets every setting
    state.set_config(ConfigFrame(values={"window": 0}))
    assert state.settings is None and "window" in state.settings_error
    state.set_config(ConfigFrame(values={}))
    assert state.settings is None and state.settings_error == "" and state.exempt == ()


def test_a_socket_a_killed_guard_left_is_removed_and_a_live_one_never(tmp_path):
    import socket as sockets

    from console.supervisor import remove_left_socket

    left, live, other = tmp_path / "left.sock", tmp_path / "live.sock", tmp_path / "file"
    for path in (left, live):
        s = sockets.socket(sockets.AF_UNIX)
        s.bind(str(path))
        if path == live:
            s.listen()
            keep = s
        else:
            s.close()  # bound, never listening: what a killed guard leaves
    other.write_text("not a socket")
    for path in (left, live, other, tmp_path / "missing.sock"):
        remove_left_socket(path)
    assert not left.exists() and live.exists() and other.exists()
    keep.close()
