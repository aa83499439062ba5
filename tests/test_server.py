"""The guard server over a real Unix socket, in a real process: protocol, verdicts, operator ops, subscribers."""

from __future__ import annotations

import json
import random
import time

import pytest

from breaker import Config, Guard
from tests.conftest import Conn, request


def check(i, agent, tool, args, **extra):
    return {"op": "check", "id": i, "agent": agent, "tool": tool, "args": args, **extra}


# -- the minimum exchange, exactly ------------------------------------------------------------------


def test_allow_reply_is_exactly_id_and_decision(guard):
    assert request(guard.socket, check(1, "a1", "bash", {"command": "ls"})) == {"id": 1, "decision": "allow"}


def test_deny_reply_carries_kind_reason_count_and_limit(guard):
    c = Conn(guard.socket)
    for i in range(6):
        assert (
            c.ask(check(i, "a1", "bash", {"command": "echo cbprobe4", "description": f"Run probe step {i}"}))[
                "decision"
            ]
            == "allow"
        )
    reply = c.ask(check(7, "a1", "bash", {"command": "echo cbprobe4", "description": "Run probe step 7"}))
    assert set(reply) == {"id", "decision", "kind", "reason", "count", "limit"}
    assert (reply["id"], reply["decision"], reply["kind"], reply["count"], reply["limit"]) == (
        7,
        "deny",
        "duplicate",
        6,
        6,
    )
    assert "bash" in reply["reason"]


def test_request_ids_of_any_json_type_are_echoed(guard):
    c = Conn(guard.socket)
    for rid in ("abc", 2**40, None, [1, "x"], {"k": 1}, 1.5):
        assert c.ask(check(rid, "a", "t", {}))["id"] == rid


def test_extra_fields_such_as_harness_parent_and_call_id_are_accepted(guard):
    reply = request(
        guard.socket, check(3, "sub-1", "read", {"path": "x"}, harness="dsh", parent="session-1", call_id="c9")
    )
    assert reply == {"id": 3, "decision": "allow"}
    agent = next(
        a for a in request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"] if a["agent"] == "sub-1"
    )
    assert (agent["harness"], agent["parent"]) == ("dsh", "session-1")


def test_agent_end_frees_the_agents_state(guard):
    c = Conn(guard.socket)
    for i in range(6):
        c.ask(check(i, "a1", "t", {}))
    assert c.ask(check(6, "a1", "t", {}))["decision"] == "deny"
    assert c.ask({"op": "agent_end", "id": 7, "agent": "a1"}) == {"id": 7, "ok": True, "known": True}
    assert c.ask(check(8, "a1", "t", {}))["decision"] == "allow"
    assert c.ask({"op": "agent_end", "id": 9, "agent": "never-seen"})["known"] is False


def test_hello_reports_server_version_protocol_and_pid(guard):
    reply = request(
        guard.socket,
        {"op": "hello", "id": 1, "harness": "dsh", "version": "0.1", "pid": 42, "capabilities": ["interrupt"]},
    )
    assert reply["server"] == "cbconsole-guard" and reply["protocol"] == 1 and reply["pid"] == guard.pid


def test_pipelined_requests_are_answered_in_order(guard):
    c = Conn(guard.socket)
    c.send(b"".join(json.dumps(check(i, "a", "t", {"i": i})).encode() + b"\n" for i in range(500)))
    assert [c.line()["id"] for _ in range(500)] == list(range(500))


# -- verdicts equal the engine's --------------------------------------------------------------------


def test_verdicts_over_the_socket_equal_the_engines_for_the_same_sequence(guard_factory):
    patch = "- id: circuit-breaker\n  config:\n    duplicateLimit: 3\n    window: 20\n    maxCallsPerAgent: 150\n"
    g = guard_factory(patch_text=patch)
    local = Guard(Config(duplicate_limit=3, window=20, max_calls_per_agent=150))
    rng = random.Random(7)
    c = Conn(g.socket)
    tools = ["bash", "web_search", "todo_write", "read"]
    for i in range(3000):
        agent = f"agent-{rng.randrange(6)}"
        tool = rng.choice(tools)
        args = {"q": rng.randrange(12), "description": str(rng.random())}
        if rng.random() < 0.1:
            args = {"q": [rng.randrange(3), {"b": 1, "a": 2}]}
        v = local.check(agent, tool, args)
        reply = c.ask(check(i, agent, tool, args))
        if v.allowed:
            assert reply == {"id": i, "decision": "allow"}
        else:
            assert (reply["kind"], reply["reason"], reply["count"], reply["limit"]) == (
                v.kind,
                v.reason,
                v.count,
                v.limit,
            )


# -- errors: answered, connection kept ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"not json at all", "bad_json"),
        (b'{"op":"check","id":1,"agent":"a"', "bad_json"),
        (b"[1,2,3]", "not_object"),
        (b'"a string"', "not_object"),
        (b'{"id":1}', "bad_request"),
        (b'{"op":"check","id":1,"agent":5,"tool":"t"}', "bad_request"),
        (b'{"op":"check","id":1,"agent":"a"}', "bad_request"),
        (b'{"op":"check","id":1,"agent":"","tool":"t"}', "bad_request"),
        (b'{"op":"check","id":1,"agent":"a","tool":"t","parent":7}', "bad_request"),
        (b'{"op":"launch_missiles","id":1}', "unknown_op"),
        (b"\xff\xfe\x00garbage", "bad_json"),
        (b"[" * 100_000, "bad_json"),
    ],
    ids=[
        "garbage",
        "truncated",
        "list",
        "string",
        "no-op",
        "agent-int",
        "no-tool",
        "empty-agent",
        "parent-int",
        "unknown-op",
        "binary",
        "deep-nesting",
    ],
)
def test_bad_frames_get_an_error_reply_and_the_connection_stays_usable(guard, frame, code):
    c = Conn(guard.socket)
    c.send(frame + b"\n")
    reply = c.line()
    assert reply["error"]["code"] == code and reply["error"]["message"]
    assert c.ask(check(99, "a", "t", {})) == {"id": 99, "decision": "allow"}


def test_an_error_names_what_was_wrong_and_echoes_the_id(guard):
    reply = request(guard.socket, {"op": "check", "id": 41, "agent": "a", "tool": ["x"]})
    assert reply["id"] == 41
    assert reply["error"] == {"code": "bad_request", "message": "check: 'tool' must be a string, found a list"}


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


def test_uninterrupt_reset_pause_and_resume(guard):
    c = Conn(guard.operator)  # the operator's socket serves checks too
    c.ask({"op": "interrupt", "id": 1, "agent": "a"})
    assert c.ask(check(2, "a", "t", {}))["kind"] == "interrupted"
    assert c.ask({"op": "uninterrupt", "id": 3, "agent": "a"})["known"] is True
    for i in range(6):
        c.ask(check(10 + i, "a", "t", {}))
    assert c.ask(check(20, "a", "t", {}))["kind"] == "duplicate"
    assert c.ask({"op": "reset", "id": 21, "agent": "a"}) == {"id": 21, "ok": True, "known": True}
    assert c.ask(check(22, "a", "t", {}))["decision"] == "allow"
    assert c.ask({"op": "pause", "id": 23})["paused"] is True
    assert all(c.ask(check(30 + i, "a", "t", {}))["decision"] == "allow" for i in range(20))
    assert c.ask({"op": "stats", "id": 50})["stats"]["paused"] is True
    c.ask({"op": "resume", "id": 51})
    results = [c.ask(check(60 + i, "a", "t", {}))["decision"] for i in range(6)]
    assert results == ["allow"] * 5 + ["deny"]  # 1 before the pause + 5 = 6: paused calls were not counted


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


def test_config_set_with_a_bad_value_is_refused_naming_the_key(guard):
    reply = request(guard.operator, {"op": "config_set", "id": 1, "changes": {"window": 0, "duplicateLimt": 2}})
    assert reply["error"]["code"] == "bad_config"
    assert sorted(p["key"] for p in reply["error"]["problems"]) == ["duplicateLimt", "window"]
    assert not guard.patch.exists()


def test_an_edit_of_the_patch_file_by_hand_applies_live(guard):
    c = Conn(guard.operator)
    guard.patch.write_text("- id: circuit-breaker\n  config:\n    duplicateLimit: 2\n")
    deadline = time.monotonic() + 10
    while c.ask({"op": "config_get", "id": 1})["config"]["values"]["duplicateLimit"] != 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert [c.ask(check(i, "a", "t", {}))["decision"] for i in range(3)] == ["allow", "allow", "deny"]


def test_a_broken_patch_file_keeps_the_last_good_config_and_config_get_says_why(guard_factory):
    g = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    duplicateLimit: 2\n")
    c = Conn(g.operator)
    g.patch.write_text("- id: circuit-breaker\n  config:\n    duplicateLimit: banana\n")
    deadline = time.monotonic() + 10
    while not (cfg := c.ask({"op": "config_get", "id": 1})["config"])["error"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert "duplicateLimit" in cfg["error"] and cfg["values"]["duplicateLimit"] == 2


def test_trips_are_written_to_the_incident_log_with_the_agents_id(guard_factory, tmp_path):
    log = tmp_path / "incidents.jsonl"
    g = guard_factory(patch_text=f"- id: circuit-breaker\n  config:\n    incidentLog: {log}\n    maxCallsPerAgent: 8\n")
    c = Conn(g.socket)
    for i in range(10):
        c.ask(check(i, "session-7f3a", "web_search", {"query": "same"}))
    for i in range(3):
        c.ask(check(20 + i, "session-7f3a", "read", {"p": i}))
    deadline = time.monotonic() + 10  # a thread of its own writes the log: the line lands just after the deny
    while len(log.read_text().splitlines() if log.exists() else ()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["kind"], r["agent"], r["count"], r["limit"]) for r in records] == [
        ("duplicate", "session-7f3a", 6, 6),
        ("cap", "session-7f3a", 8, 8),
    ]


def test_stats_count_checks_denies_connections_and_harnesses(guard):
    c = Conn(guard.socket)
    c.ask({"op": "hello", "id": 0, "harness": "claude-code"})
    for i in range(8):
        c.ask(check(i + 1, "a", "t", {}))
    stats = request(guard.operator, {"op": "stats", "id": 9})["stats"]
    assert stats["checks"] == 8 and stats["denies"]["duplicate"] == 2
    assert stats["harnesses"] == {"claude-code": 1} and stats["connections"] >= 1


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
    deadline = time.monotonic() + 5
    seen_calls = {}
    while time.monotonic() < deadline and sum(seen_calls.values()) < 18:
        f = sub.line()
        frames.append(f)
        for a in f["agents"]:
            seen_calls[a["agent"]] = a["calls"]
    assert seen_calls == {"agent-0": 6, "agent-1": 6, "agent-2": 6}
    trips = [t for f in frames for t in f.get("trips", ())]
    assert sorted((t["agent"], t["kind"]) for t in trips) == [(f"agent-{i}", "duplicate") for i in range(3)]
    assert all(f["full"] is False for f in frames)


def test_a_subscriber_is_told_about_agents_that_are_gone(guard):
    c = Conn(guard.socket)
    c.ask(check(1, "short-lived", "t", {}))
    sub = Conn(guard.operator)
    sub.ask({"op": "subscribe", "id": 1})
    assert any(a["agent"] == "short-lived" for a in sub.line()["agents"])
    c.ask({"op": "agent_end", "id": 2, "agent": "short-lived"})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        f = sub.line()
        if "short-lived" in f.get("gone", ()):
            break
    else:
        pytest.fail("the subscriber was never told the agent is gone")


def test_snapshot_gives_agents_top_keys_and_stats(guard):
    c = Conn(guard.socket)
    for i in range(9):
        c.ask(check(i, "looper", "web_search", {"query": "qwen loop", "description": str(i)}))
    state = request(guard.operator, {"op": "snapshot", "id": 100})["state"]
    (agent,) = state["agents"]
    assert (agent["agent"], agent["calls"], agent["worst_count"], agent["status"]) == ("looper", 6, 6, "duplicate")
    assert agent["worst_preview"] == 'web_search query="qwen loop"'
    assert state["top_keys"][0] == {
        "agent": "looper",
        "tool": "web_search",
        "preview": 'web_search query="qwen loop"',
        "count": 6,
    }
    assert state["stats"]["checks"] == 9


def test_a_subscriber_is_told_when_only_the_guards_stats_change(guard):
    sub = Conn(guard.operator)
    sub.ask({"op": "subscribe", "id": 1})
    assert sub.line()["full"] is True
    c = Conn(guard.socket)
    for i in range(3):
        c.ask(check(i, "planner", "todo_write", {"todos": [i]}))  # exempt: no agent changes, only the counts
    request(guard.operator, {"op": "pause", "id": 9})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        f = sub.line()
        if f.get("stats") and f["stats"]["paused"] and f["stats"]["checks"] == 3:
            assert f["agents"] == []
            break
    else:
        pytest.fail("no frame carried the new stats")
