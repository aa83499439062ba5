"""Following one agent (the console's drill-down): the guard keeps a bounded history of its calls only while
a connection follows it, and pushes them with the repeated keys of its window. In process: ServerSession."""

from __future__ import annotations

import pytest

from breaker import Config
from breaker.follows import HISTORY, MAX_FOLLOWED
from breaker.protocol import CallsEvent, ClientSession
from tests.test_session_protocol import Guardian, check


def events(wire) -> list[dict]:
    """The calls events waiting for `wire`, after one tick."""
    wire.session.tick(0.0)
    wire.guardian.settle()
    out = []
    for line in wire.ch.take_output().splitlines():
        import json

        msg = json.loads(line)
        if msg.get("event") == "calls":
            out.append(msg)
    return out


def test_a_followed_agents_calls_come_with_decision_count_limit_rule_and_its_window_keys():
    g = Guardian(Config().replace(duplicate_limit=3))
    harness, op = g.conn(), g.conn("operator")
    assert op.ask({"op": "follow", "id": 1, "agent": "a"}) == {"id": 1, "ok": True, "known": False, "history": HISTORY}
    for i in range(4):
        harness.ask(check(10 + i, "a", "web_search", {"query": "same"}))
    harness.ask(check(20, "a", "read", {"path": "/x"}))
    harness.ask(check(21, "b", "read", {"path": "/x"}))  # another agent: not followed
    (event,) = events(op)
    assert event["agent"] == "a" and event["dropped"] == 0 and event["distinct"] == 2
    calls = [(c["tool"], c["decision"], c["count"], c["limit"], c["rule"]) for c in event["calls"]]
    assert calls == [
        ("web_search", "allow", 1, 3, ""),
        ("web_search", "allow", 2, 3, ""),
        ("web_search", "allow", 3, 3, ""),
        ("web_search", "deny", 3, 3, "duplicate"),
        ("read", "allow", 1, 3, ""),
    ]
    assert event["calls"][0]["preview"] == 'web_search query="same"'
    assert [(k["tool"], k["count"]) for k in event["keys"]] == [("web_search", 3)]
    assert events(op) == []  # nothing new, nothing sent


def test_exempt_calls_show_as_passed_and_warned_calls_as_warnings():
    g = Guardian(Config().replace(exempt=["todo"], duplicate_limit=3, duplicate_warn=1))
    harness, op = g.conn(), g.conn("operator")
    op.ask({"op": "follow", "id": 1, "agent": "a"})
    harness.ask(check(1, "a", "todo", {}))
    for i in range(3):
        harness.ask(check(2 + i, "a", "grep", {"p": 1}))
    (event,) = events(op)
    assert [(c["decision"], c["rule"]) for c in event["calls"]] == [
        ("pass", ""),
        ("allow", ""),
        ("allow", ""),
        ("warn", "duplicate"),
    ]


def test_the_history_is_bounded_and_a_follower_that_fell_behind_is_told_how_many_it_missed():
    g = Guardian(Config().replace(max_calls_per_agent=0))
    harness, op = g.conn(), g.conn("operator")
    op.ask({"op": "follow", "id": 1, "agent": "a"})
    harness.ask(check(0, "a", "t", {"n": -1}))
    assert len(events(op)[0]["calls"]) == 1
    for i in range(HISTORY + 300):
        harness.ask(check(i + 1, "a", "t", {"n": i}))
    assert len(g.session.follows.agents["a"].calls) == HISTORY
    (event,) = events(op)
    assert (len(event["calls"]), event["dropped"]) == (HISTORY, 300)
    assert event["calls"][-1]["preview"] == f"t n={HISTORY + 299}"


def test_a_second_console_following_the_same_agent_gets_the_history_so_far():
    g = Guardian()
    harness, first, second = g.conn(), g.conn("operator"), g.conn("operator")
    first.ask({"op": "follow", "id": 1, "agent": "a"})
    for i in range(5):
        harness.ask(check(i, "a", "t", {"n": i}))
    events(first)
    second.ask({"op": "follow", "id": 1, "agent": "a"})
    (event,) = events(second)
    assert [c["preview"] for c in event["calls"]] == [f"t n={i}" for i in range(5)]


def test_no_history_is_kept_for_an_agent_nobody_follows_any_more():
    g = Guardian()
    harness, op, other = g.conn(), g.conn("operator"), g.conn("operator")
    op.ask({"op": "follow", "id": 1, "agent": "a"})
    other.ask({"op": "follow", "id": 1, "agent": "b"})
    harness.ask(check(1, "a", "t", {}))
    assert op.ask({"op": "unfollow", "id": 2}) == {"id": 2, "ok": True}
    assert "a" not in g.session.follows.agents
    harness.ask(check(2, "a", "t", {}))
    assert events(op) == []
    other.ask({"op": "follow", "id": 3, "agent": "c"})  # a new follow replaces the old one
    assert set(g.session.follows.agents) == {"c"}
    g.session.lost(other.ch)  # a connection that goes away stops following
    assert g.session.follows.agents == {}


def test_a_reset_sends_the_emptied_window_without_a_new_call():
    g = Guardian()
    harness, op = g.conn(), g.conn("operator")
    op.ask({"op": "follow", "id": 1, "agent": "a"})
    for i in range(3):
        harness.ask(check(i, "a", "t", {}))
    assert events(op)[0]["keys"][0]["count"] == 3
    op.ask({"op": "reset", "id": 2, "agent": "a"})
    (event,) = events(op)
    assert (event["calls"], event["keys"], event["distinct"]) == ([], [], 0)


def test_at_most_max_followed_agents_are_followed_at_once():
    g = Guardian()
    wires = [g.conn("operator") for _ in range(MAX_FOLLOWED + 1)]
    for i, wire in enumerate(wires[:-1]):
        assert wire.ask({"op": "follow", "id": 1, "agent": f"a{i}"})["ok"]
    reply = wires[-1].ask({"op": "follow", "id": 1, "agent": "one-too-many"})
    assert reply["error"]["code"] == "limit" and str(MAX_FOLLOWED) in reply["error"]["message"]
    assert wires[-1].ask({"op": "follow", "id": 2, "agent": "a0"})["ok"]  # an agent already followed: fine
    assert wires[1].ask({"op": "follow", "id": 3, "agent": "a-new"})["ok"]  # replacing its own follow: fine
    shared = wires[0].ask({"op": "follow", "id": 4, "agent": "another"})  # a0 stays followed by the last wire
    assert shared["error"]["code"] == "limit"
    assert len(g.session.follows.agents) == MAX_FOLLOWED


def test_the_harness_socket_cannot_follow_another_agents_calls():
    g = Guardian()
    reply = g.conn().ask({"op": "follow", "id": 1, "agent": "a"})
    assert reply["error"]["code"] == "operator_only"
    assert g.session.follows.agents == {}


def test_a_follower_that_reads_nothing_is_skipped_and_catches_up_later():
    g = Guardian()
    harness, op = g.conn(), g.conn("operator")
    op.ask({"op": "follow", "id": 1, "agent": "a"})
    g.session.set_backlog(op.ch, True)
    harness.ask(check(1, "a", "t", {}))
    assert events(op) == []
    g.session.set_backlog(op.ch, False)
    assert len(events(op)[0]["calls"]) == 1


@pytest.mark.parametrize("garbage", [{"calls": "x"}, {"calls": [1, {"tool": 3}]}, {"keys": None}])
def test_the_client_reads_a_calls_event_with_wrong_fields_as_what_it_can(garbage):
    client = ClientSession()
    frame = {"event": "calls", "agent": "a", "calls": [{"tool": "t", "decision": "deny"}], **garbage}
    import orjson

    (event,) = client.receive(orjson.dumps(frame) + b"\n")
    assert isinstance(event, CallsEvent) and event.agent == "a"


def test_the_guard_keeps_at_most_max_followed_times_history_calls_each_with_a_preview_of_at_most_100_characters():
    g = Guardian(Config().replace(max_calls_per_agent=0))
    harness = g.conn()
    for i in range(MAX_FOLLOWED):
        g.conn("operator").ask({"op": "follow", "id": 1, "agent": f"a{i}"})
    for n in range(HISTORY + 50):
        for i in range(MAX_FOLLOWED):
            harness.send(check(n, f"a{i}", "web_search", {"query": "x" * 500, "n": n}))
    calls = [c for f in g.session.follows.agents.values() for c in f.calls]
    assert len(calls) == MAX_FOLLOWED * HISTORY
    assert max(len(c.preview) for c in calls) == 100
