"""The guard's protocol, in process: ServerSession driven frame by frame, no socket, no process.

What tests/test_server.py once checked over real sockets for every rule — exact replies, ids, errors,
operator ops, stats, snapshots — runs here in milliseconds; tests/test_server.py keeps what needs the
real transport (the socket, the patch file, the incident log, frame limits at the socket).
"""

from __future__ import annotations

import json
import random

import orjson
import pytest

from breaker import Config, Guard
from breaker.protocol import Decision
from breaker.session import ServerSession
from tests.sessionkit import settle


def check(i, agent, tool, args, **extra):
    return {"op": "check", "id": i, "agent": agent, "tool": tool, "args": args, **extra}


class Guardian:
    """One ServerSession, and connections to it that behave like tests/conftest.py's `Conn`."""

    def __init__(self, config: Config | None = None) -> None:
        self.session = ServerSession(Guard(config), clock=lambda: 1_000.0, owner_uid=1, pid=4242)
        self.pids = iter(range(100, 10_000))

    def conn(self, plane: str = "harness") -> Wire:
        return Wire(self, plane)

    def settle(self) -> None:
        settle(self.session)


class Wire:
    """A connection to the session: bytes in through `receive`, lines out of `take_output`."""

    def __init__(self, guardian: Guardian, plane: str) -> None:
        self.guardian = guardian
        self.session = guardian.session
        self.ch = self.session.open(plane, 1, next(guardian.pids))
        self.lines: list[dict] = []

    def send(self, data: bytes | dict) -> None:
        self.session.receive(self.ch, data if isinstance(data, bytes) else orjson.dumps(data) + b"\n")
        while self.session.turn(self.ch):
            pass
        self.guardian.settle()

    def line(self) -> dict:
        if not self.lines:
            self.lines = [json.loads(line) for line in self.ch.take_output().splitlines()]
        assert self.lines, "nothing to read"
        return self.lines.pop(0)

    def ask(self, message: dict) -> dict:
        self.send(message)
        while True:
            msg = self.line()
            if "event" not in msg:
                return msg


@pytest.fixture
def g() -> Guardian:
    return Guardian()


def test_deny_reply_carries_kind_reason_count_and_limit(g):
    c = g.conn()
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


@pytest.mark.parametrize("rid", [7, "call-7", None, 2**70, -(2**63), 1.5, {"nested": [1]}])
def test_a_deny_written_on_the_hot_path_is_the_decisions_own_encoding_byte_for_byte(rid):
    reason = 'tool "bash" called 6 times with the same args — "quoted", \\ and ünïcode'
    fast = Decision.encode_deny(rid, "duplicate", reason, 6, 6)
    assert fast == Decision(False, kind="duplicate", reason=reason, count=6, limit=6).encode(rid)


def test_request_ids_of_any_json_type_are_echoed(g):
    c = g.conn()
    for rid in ("abc", 2**40, None, [1, "x"], {"k": 1}, 1.5):
        assert c.ask(check(rid, "a", "t", {}))["id"] == rid


def test_extra_fields_such_as_harness_parent_and_call_id_are_accepted(g):
    reply = g.conn().ask(check(3, "sub-1", "read", {"path": "x"}, harness="dsh", parent="session-1", call_id="c9"))
    assert reply == {"id": 3, "decision": "allow"}
    agent = next(
        a for a in g.conn("operator").ask({"op": "snapshot", "id": 1})["state"]["agents"] if a["agent"] == "sub-1"
    )
    assert (agent["harness"], agent["parent"]) == ("dsh", "session-1")


def test_agent_end_frees_the_agents_state(g):
    c = g.conn()
    for i in range(6):
        c.ask(check(i, "a1", "t", {}))
    assert c.ask(check(6, "a1", "t", {}))["decision"] == "deny"
    assert c.ask({"op": "agent_end", "id": 7, "agent": "a1"}) == {"id": 7, "ok": True, "known": True}
    assert c.ask(check(8, "a1", "t", {}))["decision"] == "allow"
    assert c.ask({"op": "agent_end", "id": 9, "agent": "never-seen"})["known"] is False


def test_hello_reports_server_version_protocol_and_pid(g):
    reply = g.conn().ask(
        {"op": "hello", "id": 1, "harness": "dsh", "version": "0.1", "pid": 42, "capabilities": ["interrupt"]},
    )
    assert (
        reply["server"] == "cbconsole-guard"
        and reply["protocol"] == 1
        and reply["pid"] == 4242
        and reply["plane"] == "harness"
    )


def test_pipelined_requests_are_answered_in_order(g):
    c = g.conn()
    c.send(b"".join(json.dumps(check(i, "a", "t", {"i": i})).encode() + b"\n" for i in range(500)))
    assert [c.line()["id"] for _ in range(500)] == list(range(500))


def test_verdicts_through_the_protocol_equal_the_engines_for_the_same_sequence():
    g = Guardian(Config(duplicate_limit=3, window=20, max_calls_per_agent=150))
    local = Guard(Config(duplicate_limit=3, window=20, max_calls_per_agent=150))
    rng = random.Random(7)
    c = g.conn()
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
def test_bad_frames_get_an_error_reply_and_the_connection_stays_usable(g, frame, code):
    c = g.conn()
    c.send(frame + b"\n")
    reply = c.line()
    assert reply["error"]["code"] == code and reply["error"]["message"]
    assert c.ask(check(99, "a", "t", {})) == {"id": 99, "decision": "allow"}


def test_an_error_names_what_was_wrong_and_echoes_the_id(g):
    reply = g.conn().ask({"op": "check", "id": 41, "agent": "a", "tool": ["x"]})
    assert reply["id"] == 41
    assert reply["error"] == {"code": "bad_request", "message": "check: 'tool' must be a string, found a list"}


def test_uninterrupt_reset_pause_and_resume(g):
    c = g.conn("operator")  # the operator's plane serves checks too
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


def test_config_set_with_a_bad_value_is_refused_naming_the_key(g):
    reply = g.conn("operator").ask({"op": "config_set", "id": 1, "changes": {"window": 0, "duplicateLimt": 2}})
    assert reply["error"]["code"] == "bad_config"
    assert sorted(p["key"] for p in reply["error"]["problems"]) == ["duplicateLimt", "window"]
    assert not g.session.jobs  # nothing to write


def test_stats_count_checks_denies_connections_and_harnesses(g):
    c = g.conn()
    c.ask({"op": "hello", "id": 0, "harness": "claude-code"})
    for i in range(8):
        c.ask(check(i + 1, "a", "t", {}))
    stats = g.conn("operator").ask({"op": "stats", "id": 9})["stats"]
    assert stats["checks"] == 8 and stats["denies"]["duplicate"] == 2
    assert stats["harnesses"] == {"claude-code": 1} and stats["connections"] >= 1


def test_snapshot_gives_agents_top_keys_and_stats(g):
    c = g.conn()
    for i in range(9):
        c.ask(check(i, "looper", "web_search", {"query": "qwen loop", "description": str(i)}))
    state = g.conn("operator").ask({"op": "snapshot", "id": 100})["state"]
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
