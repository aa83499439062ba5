"""What the guard remembers for a console that comes late (issue 24): every agent's last RECENT calls, sent when a
console opens the agent, and the last RECENT_TRIPS trips, sent when a console subscribes; the trips survive a restart.
In process (ServerSession) but for the restart, which runs a real guard and kills it."""

from __future__ import annotations

import json

from breaker import Config
from breaker.follows import RECENT
from breaker.frames import RECENT_TRIPS
from breaker.protocol import CallRow
from breaker.store import load
from tests.conftest import Conn
from tests.test_session_protocol import Guardian, check
from tests.waits import eventually


def events(wire, kind: str) -> list[dict]:
    """The events of `kind` waiting for `wire`, after one tick."""
    wire.session.tick(0.0)
    wire.guardian.settle()
    return [m for m in map(json.loads, wire.ch.take_output().splitlines()) if m.get("event") == kind]


def first_frame_trips(wire) -> list[dict]:
    """Subscribe on `wire`; the trips of the first state frame (the full picture's first part)."""
    wire.send({"op": "subscribe", "id": 90})  # the first frame is built at once (the transport's pump)
    frames = [m for m in map(json.loads, wire.ch.take_output().splitlines()) if m.get("event") == "state"]
    assert frames[0]["full"] is True and frames[0]["part"] == 0
    return frames[0]["trips"]


# -- every agent's recent calls --------------------------------------------------------------------------------------


def test_an_agent_opened_after_it_looped_shows_its_last_calls_with_their_decisions_in_the_first_event():
    g = Guardian(Config().replace(duplicate_limit=3))
    harness, op = g.conn(), g.conn("operator")
    for i in range(RECENT + 5):  # nobody follows it while it loops
        harness.ask(check(i, "looper", "web_search", {"query": "same"}))
    harness.ask(check(99, "looper", "read", {"path": "/etc/hosts"}))
    g.session.tick(0.0)
    op.ask({"op": "follow", "id": 1, "agent": "looper"})
    (event,) = events(op, "calls")
    assert event["earlier"] == RECENT and len(event["calls"]) == RECENT
    calls = [(c["tool"], c["preview"], c["decision"], c["count"], c["limit"], c["rule"]) for c in event["calls"]]
    assert calls[-2:] == [
        ("web_search", 'web_search query="same"', "deny", 3, 3, "duplicate"),
        ("read", 'read path="/etc/hosts"', "allow", 1, 3, ""),
    ]
    assert {c[2] for c in calls[:-1]} == {"deny"}  # the 6th to the 25th identical calls: all denied
    assert [(k["tool"], k["count"]) for k in event["keys"]] == [("web_search", 3)]
    harness.ask(check(100, "looper", "grep", {"p": "x"}))
    (later,) = events(op, "calls")
    assert later["earlier"] == 0 and [c["tool"] for c in later["calls"]] == ["grep"]


def test_an_agent_with_fewer_calls_than_recent_sends_them_all_oldest_first_even_before_a_tick():
    g = Guardian()
    harness, op = g.conn(), g.conn("operator")
    for i in range(3):
        harness.ask(check(i, "a", "read", {"path": f"/{i}"}))
    op.ask({"op": "follow", "id": 1, "agent": "a"})  # no tick since the calls: they are made rows now
    (event,) = events(op, "calls")
    assert event["earlier"] == 3
    assert [c["preview"] for c in event["calls"]] == ['read path="/0"', 'read path="/1"', 'read path="/2"']


def test_exempt_calls_are_in_the_recent_calls_as_passed():
    g = Guardian(Config().replace(exempt=["todo"]))
    harness, op = g.conn(), g.conn("operator")
    harness.ask(check(1, "a", "todo", {}))
    harness.ask(check(2, "a", "read", {}))
    op.ask({"op": "follow", "id": 1, "agent": "a"})
    (event,) = events(op, "calls")
    assert [(c["tool"], c["decision"]) for c in event["calls"]] == [("todo", "pass"), ("read", "allow")]


def test_a_second_console_on_an_agent_already_followed_is_told_which_calls_came_before_it():
    g = Guardian()
    harness, first, second = g.conn(), g.conn("operator"), g.conn("operator")
    harness.ask(check(1, "a", "t", {"n": 1}))
    first.ask({"op": "follow", "id": 1, "agent": "a"})
    harness.ask(check(2, "a", "t", {"n": 2}))
    assert [e["earlier"] for e in events(first, "calls")] == [1]
    second.ask({"op": "follow", "id": 1, "agent": "a"})
    (event,) = events(second, "calls")
    assert (len(event["calls"]), event["earlier"]) == (2, 2)


def test_the_check_only_puts_what_it_holds_in_the_ring_and_the_tick_makes_rows_of_large_args_only():
    g = Guardian(Config().replace(max_calls_per_agent=0))
    harness = g.conn()
    for i in range(RECENT * 3):
        harness.send(check(i, "big", "write", {"path": f"/{i}", "content": "x" * 5000}))
        harness.send(check(i, "small", "read", {"path": f"/{i}", "limit": 10}))
    big, small = g.session.meta["big"], g.session.meta["small"]
    assert len(big.recent) == len(small.recent) == RECENT
    assert not any(isinstance(e, CallRow) for e in big.recent + small.recent)  # no preview on the check's path
    g.session.tick(0.0)
    assert all(isinstance(e, CallRow) for e in big.recent)  # large args are not kept: a preview of them is
    assert max(len(e.preview) for e in big.recent) == 100
    assert not any(isinstance(e, CallRow) for e in small.recent)  # a few short args: kept until someone looks
    rows = g.session.follows.recent("small")
    assert [r.preview for r in rows][-1] == f'read path="/{RECENT * 3 - 1}" limit=10'
    assert all(isinstance(e, CallRow) for e in small.recent)  # made rows once


def test_a_looping_agents_identical_calls_share_one_preview_in_memory():
    g = Guardian(Config().replace(max_calls_per_agent=0, duplicate_limit=1000))
    harness = g.conn()
    for i in range(RECENT):
        harness.send(check(i, "a", "web_search", {"query": "qwen loops"}))
    g.session.tick(0.0)
    rows = g.session.follows.recent("a")
    assert len({id(r.preview) for r in rows}) == 1 and rows[-1].preview == 'web_search query="qwen loops"'
    assert [r.count for r in rows] == list(range(1, RECENT + 1))


def test_a_call_with_args_the_harness_could_not_send_shows_so_in_the_recent_calls():
    g = Guardian()
    harness, op = g.conn(), g.conn("operator")
    harness.ask(check(1, "a", "t", None, args_unserializable=True))
    harness.ask(check(2, "a", "t", [1, 2, 3]))
    op.ask({"op": "follow", "id": 3, "agent": "a"})
    (event,) = events(op, "calls")
    assert [c["preview"] for c in event["calls"]] == ["(args that could not be serialized)", "t [1,2,3]"]


def test_an_agent_the_guard_forgets_takes_its_recent_calls_with_it():
    g = Guardian()
    harness, op = g.conn(), g.conn("operator")
    harness.ask(check(1, "gone", "t", {}))
    assert harness.ask({"op": "agent_end", "id": 2, "agent": "gone"})["known"]
    assert "gone" not in g.session.meta
    op.ask({"op": "follow", "id": 3, "agent": "gone"})
    assert [e["calls"] for e in events(op, "calls")] == [[]]


# -- the recent trips ------------------------------------------------------------------------------------------------


def test_a_console_that_subscribes_after_agents_tripped_gets_their_trips_in_its_first_frame():
    g = Guardian(Config().replace(duplicate_limit=2))
    harness, early = g.conn(), g.conn("operator")
    assert first_frame_trips(early) == []
    for agent in ("a", "b"):
        for i in range(4):
            harness.ask(check(i, agent, "t", {}))
    assert [t["agent"] for f in events(early, "state") for t in f["trips"]] == ["a", "b"]  # as they happened
    late = g.conn("operator")
    trips = first_frame_trips(late)
    assert [(t["agent"], t["kind"], t["tool"], t["count"], t["limit"]) for t in trips] == [
        ("a", "duplicate", "t", 2, 2),
        ("b", "duplicate", "t", 2, 2),
    ]
    harness.ask(check(9, "c", "t", {}))
    assert [t for f in events(late, "state") for t in f["trips"]] == []  # nothing new: sent once


def test_a_trip_between_a_subscribe_and_the_next_tick_reaches_the_new_subscriber_once():
    g = Guardian(Config().replace(duplicate_limit=1))
    harness, op = g.conn(), g.conn("operator")
    harness.ask(check(1, "a", "t", {}))
    harness.ask(check(2, "a", "t", {}))  # a's trip, not yet ticked
    assert op.ask({"op": "subscribe", "id": 1})["ok"]
    trips = [t["agent"] for f in events(op, "state") for t in f["trips"]]
    assert trips == ["a"]


def test_the_guard_keeps_the_last_recent_trips_trips_for_a_late_console():
    g = Guardian(Config().replace(duplicate_limit=1))
    harness = g.conn()
    for n in range(RECENT_TRIPS + 30):
        harness.send(check(2 * n, f"agent-{n}", "t", {}))
        harness.send(check(2 * n + 1, f"agent-{n}", "t", {}))
        if n % 100 == 0:
            g.session.tick(0.0)
    g.session.tick(0.0)
    trips = first_frame_trips(g.conn("operator"))
    assert len(trips) == RECENT_TRIPS
    assert (trips[0]["agent"], trips[-1]["agent"]) == ("agent-30", f"agent-{RECENT_TRIPS + 29}")


def test_the_recent_trips_survive_a_kill_and_a_restart_of_the_guard(guard):
    harness = Conn(guard.socket)
    for i in range(7):
        harness.ask(check(i, "looper", "web_search", {"query": "same"}))
    harness.close()

    def saved() -> bool:  # saved within 200 ms of the trip: the state file's guard record holds it
        files = list(guard.state_home.rglob("*.cbstate"))
        record = load(files[0])[0].guard if files else None
        return record is not None and [t[1:3] for t in record.trips] == [("looper", "duplicate")]

    eventually(saved, what="the state saved")
    guard.kill9()
    guard.start()
    sub = Conn(guard.operator)
    assert sub.ask({"op": "subscribe", "id": 1})["ok"]
    first = sub.line()
    assert first["full"] is True
    assert [(t["agent"], t["kind"], t["count"], t["limit"]) for t in first["trips"]] == [("looper", "duplicate", 6, 6)]
    sub.close()
