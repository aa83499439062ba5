"""The guard server over a real Unix socket, in a real process: protocol, verdicts, operator ops, subscribers."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Conn, request
from tests.waits import eventually


def check(i, agent, tool, args, **extra):
    return {"op": "check", "id": i, "agent": agent, "tool": tool, "args": args, **extra}


# -- the minimum exchange, exactly ------------------------------------------------------------------


def test_allow_reply_is_exactly_id_and_decision(guard):
    assert request(guard.socket, check(1, "a1", "bash", {"command": "ls"})) == {"id": 1, "decision": "allow"}


# -- verdicts equal the engine's --------------------------------------------------------------------


# -- errors: answered, connection kept ---------------------------------------------------------------


def test_an_oversized_frame_gets_an_error_and_a_clean_close(guard):
    c = Conn(guard.socket, timeout=20)
    big = b'{"op":"check","id":1,"agent":"a","tool":"write","args":{"content":"' + b"x" * (9 * 1024 * 1024) + b'"}}\n'
    try:
        c.send(big)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close while we are still sending: also a clean refusal
    reply = c.line()
    assert reply["error"]["code"] == "frame_too_large"
    assert c.closed()
    assert request(guard.socket, check(2, "a", "t", {})) == {"id": 2, "decision": "allow"}


def test_a_big_but_allowed_frame_is_judged(guard):
    content = "y" * (7 * 1024 * 1024)
    reply = request(guard.socket, check(1, "a", "write", {"path": "/x", "content": content}), timeout=20)
    assert reply == {"id": 1, "decision": "allow"}


# -- operator ops ------------------------------------------------------------------------------------


def test_interrupt_pushes_an_event_to_the_connections_that_checked_for_that_agent(guard):
    harness = Conn(guard.socket)
    other = Conn(guard.socket, timeout=0.5)
    harness.ask(check(1, "looper", "web_search", {"q": "x"}))
    other.ask(check(1, "someone-else", "web_search", {"q": "x"}))
    reply = request(guard.operator, {"op": "interrupt", "id": 5, "agent": "looper", "reason": "stuck on one query"})
    assert reply == {"id": 5, "ok": True, "notified": 1}
    assert harness.line() == {"event": "interrupt", "agent": "looper", "reason": "stuck on one query"}
    denied = harness.ask(check(2, "looper", "read", {"path": "a"}))
    assert (denied["decision"], denied["kind"]) == ("deny", "interrupted") and "stuck on one query" in denied["reason"]
    with pytest.raises(TimeoutError):
        other.line()  # nobody else is told


def test_config_set_writes_the_patch_layer_and_applies_at_once(guard_factory):
    layer = "# my layer\n- id: hmr\n  disabled: false\n- id: circuit-breaker\n  config:\n    window: 50   # keep\n"
    g = guard_factory(patch_text=layer)
    c = Conn(g.operator)
    reply = c.ask({"op": "config_set", "id": 1, "changes": {"duplicateLimit": 3}})
    assert reply["ok"] and reply["written"] == str(g.patch)
    assert reply["config"]["values"]["duplicateLimit"] == 3 and reply["config"]["values"]["window"] == 50
    text = g.patch.read_text()
    assert text.startswith("# my layer\n- id: hmr\n  disabled: false\n") and "window: 50   # keep" in text
    assert "duplicateLimit: 3" in text
    results = [c.ask(check(10 + i, "a", "t", {}))["decision"] for i in range(4)]
    assert results == ["allow", "allow", "allow", "deny"]


def test_an_edit_of_the_patch_file_by_hand_applies_live(guard):
    c = Conn(guard.operator)
    guard.patch.write_text("- id: circuit-breaker\n  config:\n    duplicateLimit: 2\n")
    eventually(
        lambda: c.ask({"op": "config_get", "id": 1})["config"]["values"]["duplicateLimit"] == 2, what="the edit applied"
    )
    assert [c.ask(check(i, "a", "t", {}))["decision"] for i in range(3)] == ["allow", "allow", "deny"]


def test_a_broken_patch_file_keeps_the_last_good_config_and_config_get_says_why(guard_factory):
    g = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    duplicateLimit: 2\n")
    c = Conn(g.operator)
    g.patch.write_text("- id: circuit-breaker\n  config:\n    duplicateLimit: banana\n")
    cfg = eventually(
        lambda: (config := c.ask({"op": "config_get", "id": 1})["config"])["error"] and config,
        what="config_get to report the broken file",
    )
    assert "duplicateLimit" in cfg["error"] and cfg["values"]["duplicateLimit"] == 2


def test_trips_are_written_to_the_incident_log_with_the_agents_id(guard_factory, tmp_path):
    log = tmp_path / "incidents.jsonl"
    g = guard_factory(patch_text=f"- id: circuit-breaker\n  config:\n    incidentLog: {log}\n    maxCallsPerAgent: 8\n")
    c = Conn(g.socket)
    for i in range(10):
        c.ask(check(i, "session-7f3a", "web_search", {"query": "same"}))
    for i in range(3):
        c.ask(check(20 + i, "session-7f3a", "read", {"p": i}))
    # a thread of its own writes the log: the line lands just after the deny
    eventually(lambda: log.exists() and len(log.read_text().splitlines()) >= 2, what="two incident lines")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["kind"], r["agent"], r["count"], r["limit"]) for r in records] == [
        ("duplicate", "session-7f3a", 6, 6),
        ("cap", "session-7f3a", 8, 8),
    ]


# -- subscribers ---------------------------------------------------------------------------------------


def test_a_subscriber_gets_a_full_state_then_coalesced_deltas_with_trips(guard):
    sub = Conn(guard.operator)
    assert sub.ask({"op": "subscribe", "id": 1})["ok"]
    first = sub.line()
    assert first["event"] == "state" and first["full"] is True and "config" in first
    c = Conn(guard.socket)
    for i in range(300):
        c.ask(check(i, f"agent-{i % 3}", "web_search", {"q": "loop"}))
    frames = []
    seen_calls = {}
    trips: list[dict] = []

    def read_a_frame() -> bool:
        # the 6th call's counts and the 7th call's trip may come in two frames (a tick can fall between them)
        frames.append(f := sub.line())
        seen_calls.update((a["agent"], a["calls"]) for a in f["agents"])
        trips.extend(f.get("trips", ()))
        return sum(seen_calls.values()) >= 18 and len(trips) >= 3

    eventually(read_a_frame, what="frames with every agent's 6 calls and three trips")
    assert seen_calls == {"agent-0": 6, "agent-1": 6, "agent-2": 6}
    assert sorted((t["agent"], t["kind"]) for t in trips) == [(f"agent-{i}", "duplicate") for i in range(3)]
    assert all(f["full"] is False for f in frames)


def test_a_subscriber_is_told_about_agents_that_are_gone(guard):
    c = Conn(guard.socket)
    c.ask(check(1, "short-lived", "t", {}))
    sub = Conn(guard.operator)
    sub.ask({"op": "subscribe", "id": 1})
    assert any(a["agent"] == "short-lived" for a in sub.line()["agents"])
    c.ask({"op": "agent_end", "id": 2, "agent": "short-lived"})
    eventually(lambda: "short-lived" in sub.line().get("gone", ()), what="a frame saying the agent is gone")


def test_a_subscriber_is_told_when_only_the_guards_stats_change(guard):
    sub = Conn(guard.operator)
    sub.ask({"op": "subscribe", "id": 1})
    assert sub.line()["full"] is True
    c = Conn(guard.socket)
    for i in range(3):
        c.ask(check(i, "planner", "todo_write", {"todos": [i]}))  # exempt: no agent changes, only the counts
    request(guard.operator, {"op": "pause", "id": 9})
    frame = eventually(
        lambda: (f := sub.line()).get("stats") and f["stats"]["paused"] and f["stats"]["checks"] == 3 and f,
        what="a frame with the new stats",
    )
    assert frame["agents"] == []
