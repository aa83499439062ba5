"""Per-agent overrides: an operator gives one agent its own cap or duplicate limit, without touching the
global config; a reset clears them; a restart keeps them. Engine, protocol (in process) and a real guard."""

from __future__ import annotations

import pytest

from breaker import Config, Guard
from breaker.session import ServerSession
from tests.conftest import Conn, request
from tests.test_session_protocol import Guardian, check


def guard(**changes) -> Guard:
    return Guard(Config().replace(**changes))


# -- the engine ------------------------------------------------------------------------------------


def test_raising_one_agents_cap_gives_it_more_calls_and_no_other_agent():
    g = guard(max_calls_per_agent=3)
    for agent in ("a", "b"):
        for i in range(3):
            assert g.check(agent, "read", {"path": str(i)}).allowed
        assert g.check(agent, "read", {"path": "x"}).kind == "cap"
    assert g.override("a", {"maxCallsPerAgent": 5}) == {"maxCallsPerAgent": 5}
    assert [g.check("a", "read", {"path": f"n{i}"}).allowed for i in range(3)] == [True, True, False]
    denied = g.check("a", "read", {"path": "y"})
    assert (denied.kind, denied.count, denied.limit) == ("cap", 5, 5)
    assert g.check("b", "read", {"path": "y"}).kind == "cap"
    assert g.config.max_calls_per_agent == 3


def test_a_lower_duplicate_limit_for_one_agent_denies_its_third_identical_call():
    g = guard()
    g.override("a", {})  # not tracked yet: nothing happens
    assert g.override("a", {"duplicateLimit": 2}) is None
    g.check("a", "read", {"path": "p"})
    assert g.override("a", {"duplicateLimit": 2}) == {"duplicateLimit": 2}
    verdicts = [g.check(agent, "read", {"path": "p"}) for agent in ("a", "a", "b", "b")]
    assert [v.allowed for v in verdicts] == [True, False, True, True]
    assert (verdicts[1].kind, verdicts[1].count, verdicts[1].limit) == ("duplicate", 2, 2)


def test_an_agents_duplicate_limit_applies_to_tools_with_their_own_limit_too():
    g = Guard(Config.from_mapping({"tools": {"read": {"duplicateLimit": 10}}}))
    g.check("a", "read", {"path": "p"})
    g.override("a", {"duplicateLimit": 3})
    assert [g.check("a", "read", {"path": "p"}).allowed for _ in range(3)] == [True, True, False]


def test_a_null_takes_one_override_off_and_leaves_the_other():
    g = guard(max_calls_per_agent=3)
    g.check("a", "read", {"path": "0"})
    g.override("a", {"maxCallsPerAgent": 50, "duplicateLimit": 9})
    assert g.override("a", {"maxCallsPerAgent": None}) == {"duplicateLimit": 9}
    view = g.agent_view("a")
    assert (view.cap, view.duplicate_limit, view.override) == (3, 9, {"duplicateLimit": 9})
    assert g.override("a", {"duplicateLimit": None}) == {}
    assert g.agent_view("a").override == {}


def test_the_view_shows_the_limits_in_force_and_the_status_follows_them():
    g = guard()
    for _ in range(3):
        g.check("a", "read", {"path": "p"})
    assert g.agent_view("a").status == "ok"
    g.override("a", {"duplicateLimit": 3, "maxCallsPerAgent": 1000})
    view = g.agent_view("a")
    assert (view.status, view.duplicate_limit, view.cap) == ("duplicate", 3, 1000)
    assert view.override == {"duplicateLimit": 3, "maxCallsPerAgent": 1000}


def test_a_reset_clears_the_override_with_the_counts():
    g = guard(max_calls_per_agent=2)
    g.check("a", "read", {"path": "0"})
    g.override("a", {"maxCallsPerAgent": 100})
    assert g.reset("a")
    view = g.agent_view("a")
    assert (view.override, view.cap) == ({}, 2)


def test_an_override_is_exported_and_restored_with_the_agent():
    g = guard(max_calls_per_agent=2)
    g.check("a", "read", {"path": "0"})
    g.override("a", {"maxCallsPerAgent": 4})
    state = g.export_agent("a")
    assert state is not None and state.limits == {"maxCallsPerAgent": 4}
    h = guard(max_calls_per_agent=2)
    h.restore_agent(state, windows=False)  # another process's hash key: the window goes, the limits stay
    assert [h.check("a", "read", {"path": f"n{i}"}).allowed for i in range(4)] == [True, True, True, False]


def test_a_key_that_is_not_an_agent_limit_is_refused():
    g = guard()
    g.check("a", "read", {})
    with pytest.raises(ValueError, match="window"):
        g.override("a", {"window": 3})


# -- the protocol, in process ----------------------------------------------------------------------


def test_the_override_op_replies_with_the_limits_in_force_and_the_row_carries_them():
    g = Guardian(Config().replace(max_calls_per_agent=3))
    harness, op = g.conn(), g.conn("operator")
    for i in range(4):
        harness.ask(check(i, "a", "t", {"n": i}))
    reply = op.ask({"op": "override", "id": 7, "agent": "a", "limits": {"maxCallsPerAgent": 10}})
    assert reply == {"id": 7, "ok": True, "known": True, "override": {"maxCallsPerAgent": 10}}
    assert harness.ask(check(9, "a", "t", {"n": 9}))["decision"] == "allow"
    (row,) = op.ask({"op": "snapshot", "id": 8})["state"]["agents"]
    assert (row["cap"], row["override"], row["calls"]) == (10, {"maxCallsPerAgent": 10}, 4)


def test_an_override_for_an_unknown_agent_says_so_and_keeps_nothing():
    g = Guardian()
    reply = g.conn("operator").ask({"op": "override", "id": 1, "agent": "ghost", "limits": {"duplicateLimit": 2}})
    assert reply == {"id": 1, "ok": True, "known": False}
    assert "ghost" not in g.session.guard


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"window": 3}, "override: 'window' is not one of maxCallsPerAgent, duplicateLimit"),
        ({"duplicateLimit": 0}, "override: duplicateLimit must be an integer from 1 to 1,000,000,000 or null"),
        ({"maxCallsPerAgent": "9"}, "override: maxCallsPerAgent must be an integer from 0 to 1,000,000,000 or null"),
        ({"maxCallsPerAgent": True}, "override: maxCallsPerAgent must be an integer"),
    ],
    ids=["other-key", "below-range", "string", "boolean"],
)
def test_a_bad_override_is_refused_naming_the_key_and_changes_nothing(limits, message):
    g = Guardian()
    harness, op = g.conn(), g.conn("operator")
    harness.ask(check(1, "a", "t", {}))
    reply = op.ask({"op": "override", "id": 2, "agent": "a", "limits": limits})
    assert reply["error"]["code"] == "bad_request" and reply["error"]["message"].startswith(message)
    assert g.session.guard.agent_view("a").override == {}


def test_the_harness_socket_cannot_override():
    g = Guardian()
    c = g.conn()
    c.ask(check(1, "a", "t", {}))
    reply = c.ask({"op": "override", "id": 2, "agent": "a", "limits": {"maxCallsPerAgent": 0}})
    assert reply["error"]["code"] == "operator_only"
    assert g.session.guard.agent_view("a").override == {}


def test_an_override_is_saved_before_its_reply_like_every_operator_change():
    session = ServerSession(Guard(), clock=lambda: 1.0, owner_uid=1)
    ch = session.open("operator", 1, 2)
    session.receive(ch, b'{"op":"check","id":1,"agent":"a","tool":"t","args":{}}\n')
    session.receive(ch, b'{"op":"override","id":2,"agent":"a","limits":{"duplicateLimit":3}}\n')
    assert b'"id":2' not in ch.take_output()  # held until the state store has it (a DurableJob)
    assert "a" in session.persist.agents
    assert any(type(job).__name__ == "DurableJob" for job in session.jobs)


# -- a real guard ----------------------------------------------------------------------------------


def test_an_override_survives_kill_9_and_a_restart_and_a_reset_clears_it(guard_factory):
    g = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    maxCallsPerAgent: 2\n")
    c = Conn(g.socket)
    for i in range(3):
        c.ask({"op": "check", "id": i, "agent": "worker", "tool": "t", "args": {"n": i}})
    op = Conn(g.operator)
    assert op.ask({"op": "override", "id": 1, "agent": "worker", "limits": {"maxCallsPerAgent": 4}})["known"]
    g.kill9()  # at once: an operator change is saved before its reply
    g.start()
    c = Conn(g.socket)
    decisions = [
        c.ask({"op": "check", "id": 10 + i, "agent": "worker", "tool": "t", "args": {"m": i}}) for i in (1, 2, 3)
    ]
    assert [d["decision"] for d in decisions] == ["allow", "allow", "deny"]
    (row,) = request(g.operator, {"op": "snapshot", "id": 3})["state"]["agents"]
    assert (row["cap"], row["override"]) == (4, {"maxCallsPerAgent": 4})
    assert request(g.operator, {"op": "reset", "id": 4, "agent": "worker"})["known"]
    (row,) = request(g.operator, {"op": "snapshot", "id": 5})["state"]["agents"]
    assert (row["cap"], row["override"]) == (2, {})
