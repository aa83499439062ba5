"""The guard's protocol session in process, without sockets: planes, reply order, flow control, state frames.

`ServerSession` is the server minus I/O, so these run in milliseconds and drive exactly the states a
socket test can only hope to hit (a reply held by a job, a subscriber that reads nothing, a pool full).
"""

from __future__ import annotations

import json

import orjson
import pytest

from breaker import Config, Guard
from breaker.channel import Slot
from breaker.frames import DROP_AFTER, ROWS_PER_PART
from breaker.jobs import ConfigJob, DurableJob, IncidentJob
from breaker.protocol import OPS, ErrorReply, StateFrame
from breaker.session import BATCH, PRIVATE_BUFFER, ServerSession
from tests.sessionkit import settle

UID = 1000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def make(config: Config | None = None, **options) -> ServerSession:
    return ServerSession(Guard(config), clock=Clock(), owner_uid=UID, pid=42, **options)


def frame(**fields) -> bytes:
    return orjson.dumps(fields) + b"\n"


def check(rid, agent="a", tool="t", args=None, **extra) -> bytes:
    return frame(op="check", id=rid, agent=agent, tool=tool, args=args if args is not None else {}, **extra)


def replies(session: ServerSession, ch) -> list[dict]:
    """What the session has for `ch` right now, decoded (and taken)."""
    session.woken.discard(ch)
    return [orjson.loads(line) for line in ch.take_output().splitlines()]


def settle_jobs(session: ServerSession) -> None:
    """Do what the transport does for the jobs that need no I/O here: durable saves complete at once."""
    settle(session)


# -- planes -----------------------------------------------------------------------------------------


OPERATOR_REQUESTS = {
    "subscribe": {},
    "unsubscribe": {},
    "interrupt": {"agent": "a"},
    "uninterrupt": {"agent": "a"},
    "reset": {"agent": "a"},
    "override": {"agent": "a", "limits": {"maxCallsPerAgent": 0}},
    "follow": {"agent": "a"},
    "unfollow": {},
    "pause": {},
    "resume": {},
    "config_get": {},
    "config_set": {"changes": {"enabled": False}},
    "snapshot": {},
    "stats": {},
}


def test_every_op_is_either_a_harness_op_or_tested_here_as_an_operator_op():
    harness_ops = {op for op, cls in OPS.items() if cls.plane == "harness"}
    # `hook`: cbhook's payload, read by the guard into the check, result or agent_end it would have sent itself
    assert harness_ops == {"hello", "check", "result", "agent_end", "hook", "ping"}
    assert set(OPS) == harness_ops | set(OPERATOR_REQUESTS)


def test_the_hook_op_asks_on_its_own_connection_what_cbhook_would_have_sent():
    session = make()
    ch = session.open("harness", UID, 7)
    payload = {"session_id": "s", "permission_mode": "default", "hook_event_name": "PreToolUse"}
    payload |= {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t1"}
    for rid in range(1, 8):
        session.receive(ch, frame(op="hook", id=rid, payload=orjson.dumps(payload).decode()))
    got = replies(session, ch)
    assert [r["id"] for r in got] == list(range(1, 8)) and [r["exit"] for r in got] == [0] * 7
    assert [r["stdout"] for r in got[:6]] == [""] * 6 and got[0]["stderr"] == ""
    deny = orjson.loads(bytes.fromhex(got[6]["stdout"]))
    assert deny["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert session.guard.agent_view("s").calls == 6 and "s" in ch.agents  # its interrupts come to this connection
    assert session.meta["s"].harness == "claude-code"


@pytest.mark.parametrize("op", sorted(OPERATOR_REQUESTS))
def test_the_harness_plane_refuses_every_op_that_changes_the_guard_or_reads_other_agents(op):
    session = make()
    ch = session.open("harness", UID, 7)
    session.receive(ch, check(1))
    session.receive(ch, frame(op=op, id=2, **OPERATOR_REQUESTS[op]))
    settle_jobs(session)
    got = replies(session, ch)
    assert got[1]["error"]["code"] == "operator_only" and got[1]["id"] == 2
    assert not session.guard.paused and session.guard.config.enabled and ch.sub is None
    assert session.guard.agents() == ["a"] and not session.guard.interrupted("a")
    assert session.guard.agent_view("a").override == {} and not session.follows.agents
    assert not any(isinstance(job, ConfigJob) for job in session.jobs)


def test_the_operator_plane_serves_operator_ops_and_checks():
    session = make()
    ch = session.open("operator", UID, 7)
    session.receive(ch, check(1))
    session.receive(ch, frame(op="pause", id=2))
    settle_jobs(session)
    assert [r.get("decision", r.get("paused")) for r in replies(session, ch)] == ["allow", True]
    assert session.guard.paused


def test_a_peer_of_another_user_is_refused_and_one_the_platform_cannot_name_is_served():
    session = make()
    other = session.open("harness", UID + 1, 99)
    assert other.closing and other not in session.channels
    (refusal,) = [orjson.loads(line) for line in other.take_output().splitlines()]
    assert refusal["error"]["code"] == "forbidden"
    unknown = session.open("harness", None, None)  # a platform without peer credentials
    session.receive(unknown, check(1))
    assert replies(session, unknown) == [{"id": 1, "decision": "allow"}]


# -- replies in request order ----------------------------------------------------------------------


def test_requests_after_a_config_set_wait_for_it_and_see_its_effect():
    session = make()
    ch = session.open("operator", UID, 7)
    session.receive(ch, frame(op="config_set", id=1, changes={"duplicateLimit": 1}) + check(2) + check(3))
    (job,) = [j for j in session.jobs if isinstance(j, ConfigJob)]
    assert replies(session, ch) == [] and session.guard.checks == 0  # not even judged yet
    session.guard.config = session.guard.config.replace(duplicate_limit=1)  # what the transport's job does
    assert session.complete(ch, job.slot, b'{"id":1,"ok":true}\n') is True  # "give it a turn"
    session.turn(ch)
    got = replies(session, ch)
    assert [r["id"] for r in got] == [1, 2, 3]
    assert [r.get("decision") for r in got[1:]] == ["allow", "deny"]  # judged under the new limit


def test_replies_to_operator_changes_wait_for_the_save_but_later_requests_do_not():
    session = make()
    ch = session.open("operator", UID, 7)
    session.receive(ch, frame(op="interrupt", id=1, agent="x") + check(2, agent="x"))
    (job,) = [j for j in session.jobs if isinstance(j, DurableJob)]
    assert replies(session, ch) == [] and session.guard.checks == 1  # judged (and denied) already
    session.complete(job.channel, job.slot, job.data)
    got = replies(session, ch)
    assert [r["id"] for r in got] == [1, 2] and got[1]["kind"] == "interrupted"


def test_a_half_close_after_a_config_set_still_gets_its_reply_before_the_close():
    session = make()
    ch = session.open("operator", UID, 7)
    session.receive(ch, frame(op="config_set", id=1, changes={"window": 50}))
    session.eof(ch)
    assert not ch.done  # a reply is still owed
    (job,) = [j for j in session.jobs if isinstance(j, ConfigJob)]
    if session.complete(ch, job.slot, b'{"id":1,"ok":true}\n'):
        session.turn(ch)
    assert replies(session, ch) == [{"id": 1, "ok": True}]
    assert ch.done


def test_a_last_frame_without_its_newline_is_answered_at_eof():
    session = make()
    ch = session.open("harness", UID, 7)
    session.receive(ch, check(1)[:-1])
    assert replies(session, ch) == []
    session.eof(ch)
    assert replies(session, ch) == [{"id": 1, "decision": "allow"}] and ch.done


def test_operator_changes_are_acknowledged_only_after_the_save():
    session = make()
    ch = session.open("operator", UID, 7)
    session.receive(ch, frame(op="interrupt", id=1, agent="a", reason="stop"))
    assert session.guard.interrupted("a")  # in force at once...
    assert replies(session, ch) == []  # ...acknowledged once saved
    (job,) = [j for j in session.jobs if isinstance(j, DurableJob)]
    session.complete(job.channel, job.slot, job.data)
    assert replies(session, ch) == [{"id": 1, "ok": True, "notified": 0}]


def test_a_connection_is_answered_in_turns_of_batch_frames():
    session = make()
    ch = session.open("harness", UID, 7)
    session.receive(ch, b"".join(check(i, args={"i": i}) for i in range(BATCH * 2 + 5)))
    assert len(replies(session, ch)) == BATCH
    assert session.turn(ch) is True  # more waiting: the transport lets others in, then calls again
    assert session.turn(ch) is False
    assert [r["id"] for r in replies(session, ch)] == list(range(BATCH, BATCH * 2 + 5))


# -- ids, config keys --------------------------------------------------------------------------------


def test_ids_beyond_64_bits_are_echoed_exactly():
    session = make()
    ch = session.open("harness", UID, 7)
    big = 2**70 + 1
    session.receive(ch, f'{{"op":"check","id":{big},"agent":"a","tool":"t"}}\n'.encode())
    session.receive(ch, f'{{"op":"ping","id":-{big}}}\n'.encode())
    session.receive(ch, b'{"op":"ping","id":12345678901234567890123.5}\n')
    lines = ch.take_output().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [big, -big, 12345678901234567890123.5]


def test_interrupt_command_can_never_be_set_over_a_socket():
    session = make()
    ch = session.open("operator", UID, 7)
    session.receive(ch, frame(op="config_set", id=1, changes={"interruptCommand": ["/bin/sh", "-c", "id"]}))
    (reply,) = replies(session, ch)
    assert reply["error"]["code"] == "forbidden_key" and "patch file" in reply["error"]["message"]
    assert not session.jobs


def test_a_config_set_names_every_bad_value_at_once():
    session = make()
    ch = session.open("operator", UID, 7)
    session.receive(ch, frame(op="config_set", id=1, changes={"window": 0, "duplicateLimt": 2}))
    (reply,) = replies(session, ch)
    assert reply["error"]["code"] == "bad_config"
    assert sorted(p["key"] for p in reply["error"]["problems"]) == ["duplicateLimt", "window"]


# -- flow control ----------------------------------------------------------------------------------------


def test_an_interrupt_push_to_a_connection_that_reads_nothing_is_dropped_and_counted():
    session = make()
    looper = session.open("harness", UID, 7)
    session.receive(looper, check(1, agent="x"))
    replies(session, looper)
    session.set_backlog(looper, True)  # the transport says: 256 KiB unsent
    operator = session.open("operator", UID, 8)
    for i in range(20_000):
        session.receive(operator, frame(op="interrupt", id=i, agent="x", reason="stop"))
        settle_jobs(session)
    assert looper.urgent == [] and session.stats.events_dropped == 20_000
    session.receive(operator, check(1, agent="x"))
    assert replies(session, operator)[-1]["kind"] == "interrupted"  # the deny says it anyway


def test_large_unfinished_frames_share_a_bounded_pool_and_small_ones_are_never_refused():
    session = make(pool=3 * PRIVATE_BUFFER)
    big = [session.open("harness", UID, i) for i in range(3)]
    chunk = b'{"op":"check","id":1,"agent":"a","tool":"t","args":"' + b"x" * (2 * PRIVATE_BUFFER)
    session.receive(big[0], chunk)  # 1 pool unit
    session.receive(big[1], chunk)  # 2 pool units
    assert not big[0].closing and not big[1].closing
    session.receive(big[2], chunk)  # would be 3+: refused
    assert big[2].closing
    assert orjson.loads(big[2].take_output())["error"]["code"] == "busy"
    small = session.open("harness", UID, 9)
    session.receive(small, check(5))
    assert replies(session, small) == [{"id": 5, "decision": "allow"}]
    session.receive(big[0], b'"}\n')  # its frame completes: its share goes back to the pool
    assert replies(session, big[0])[0]["decision"] == "allow"
    assert session.pooled == big[1].pooled


# -- state frames ---------------------------------------------------------------------------------------


def subscribe(session: ServerSession):
    ch = session.open("operator", UID, 3)
    session.receive(ch, frame(op="subscribe", id=1))
    assert replies(session, ch) == [{"id": 1, "ok": True, "tick": 0.1}]
    return ch


def frames(session: ServerSession, ch, now: float = 0.0, tick: bool = True) -> list[StateFrame]:
    if tick:
        session.tick(now)
    while session.pump():
        pass
    out = []
    for line in ch.take_output().splitlines():
        msg = orjson.loads(line)
        assert msg["event"] == "state"
        out.append(StateFrame.from_json(msg))
    return out


def test_a_full_picture_of_ten_thousand_agents_comes_in_parts_the_loop_can_interleave():
    session = make(Config(max_agents=20_000))
    feeder = session.open("harness", UID, 7)
    session.receive(feeder, b"".join(check(i, agent=f"agent-{i}") for i in range(10_000)))
    while session.turn(feeder):
        pass
    ch = subscribe(session)
    session.tick(0.0)
    steps = 0
    while session.pump():
        steps += 1
    parts = [StateFrame.from_json(orjson.loads(line)) for line in ch.take_output().splitlines()]
    assert steps >= 10_000 // ROWS_PER_PART - 1  # the transport yields to the loop between parts
    assert parts[0].full and all(not p.full for p in parts[1:])
    assert all(len(p.agents) <= ROWS_PER_PART for p in parts)
    assert [p.last for p in parts] == [False] * (len(parts) - 1) + [True]
    assert {a.agent for p in parts for a in p.agents} == {f"agent-{i}" for i in range(10_000)}


def test_three_hundred_checks_between_two_ticks_make_one_frame_with_each_agent_once():
    session = make()
    ch = subscribe(session)
    frames(session, ch)  # the first, full picture
    feeder = session.open("harness", UID, 7)
    session.receive(feeder, b"".join(check(i, agent=f"agent-{i % 3}", args={"q": "loop"}) for i in range(300)))
    while session.turn(feeder):
        pass
    (delta,) = frames(session, ch)
    assert not delta.full and sorted(a.agent for a in delta.agents) == ["agent-0", "agent-1", "agent-2"]
    assert {a.agent: a.calls for a in delta.agents} == {"agent-0": 6, "agent-1": 6, "agent-2": 6}
    assert sorted((t.agent, t.kind) for t in delta.trips) == [(f"agent-{i}", "duplicate") for i in range(3)]


def test_an_agent_that_ends_is_gone_in_the_next_frame():
    session = make()
    feeder = session.open("harness", UID, 7)
    session.receive(feeder, check(1, agent="short-lived"))
    ch = subscribe(session)
    assert [a.agent for a in frames(session, ch)[0].agents] == ["short-lived"]
    session.receive(feeder, frame(op="agent_end", id=2, agent="short-lived"))
    (delta,) = frames(session, ch)
    assert delta.gone == ["short-lived"] and delta.agents == []


def test_a_subscriber_that_reads_nothing_gets_no_frames_then_is_dropped_and_never_costs_a_check():
    session = make()
    ch = subscribe(session)
    frames(session, ch)
    session.set_backlog(ch, True)
    feeder = session.open("harness", UID, 7)
    for i in range(50):
        session.receive(feeder, check(i, agent=f"agent-{i}"))
        assert replies(session, feeder)[-1]["decision"] == "allow"
        assert frames(session, ch, now=i * 0.1) == []
    assert ch.sub is not None and len(ch.sub.agents) == 50  # what it missed, kept as a set, not frames
    session.tick(DROP_AFTER + 5.0)
    assert ch.closing


def test_a_subscriber_that_catches_up_gets_what_changed_while_it_was_behind():
    session = make()
    ch = subscribe(session)
    frames(session, ch)
    session.set_backlog(ch, True)
    feeder = session.open("harness", UID, 7)
    for i in range(5):
        session.receive(feeder, check(i, agent=f"agent-{i}"))
        frames(session, ch)
    session.set_backlog(ch, False)
    caught_up = frames(session, ch, tick=False)
    assert sorted(a.agent for p in caught_up for a in p.agents) == [f"agent-{i}" for i in range(5)]


def test_a_snapshot_of_many_agents_is_built_in_parts_and_answered_once_complete():
    session = make()
    feeder = session.open("harness", UID, 7)
    session.receive(feeder, b"".join(check(i, agent=f"agent-{i}") for i in range(3 * ROWS_PER_PART)))
    while session.turn(feeder):
        pass
    ch = session.open("operator", UID, 8)
    session.receive(ch, frame(op="snapshot", id=9, top=5))
    assert replies(session, ch) == []
    assert session.pump() is True  # more than one part of work
    while session.pump():
        pass
    (reply,) = replies(session, ch)
    assert reply["id"] == 9 and len(reply["state"]["agents"]) == 3 * ROWS_PER_PART


def test_a_trip_asks_the_transport_to_write_the_incident_log():
    session = make(Config(duplicate_limit=1))
    ch = session.open("harness", UID, 7)
    session.receive(ch, check(1) + check(2) + check(3))
    incidents = [j for j in session.jobs if isinstance(j, IncidentJob)]
    assert [(j.agent, j.kind, j.count, j.limit) for j in incidents] == [("a", "duplicate", 1, 1)]


# -- the state store's side --------------------------------------------------------------------------


def test_what_changed_is_handed_to_the_store_and_restores_to_the_same_verdicts():
    a = make(Config(duplicate_limit=3, max_calls_per_agent=5))
    ch = a.open("harness", UID, 7)
    a.receive(ch, check(1, agent="x", args={"q": 1}, harness="dsh", parent="root"))
    a.receive(ch, b"".join(check(i, agent="x", args={"q": 1}) for i in (2, 3, 4)))
    op = a.open("operator", UID, 8)
    a.receive(op, frame(op="interrupt", id=5, agent="y", reason="why"))
    saved, more = a.persist.take(100)
    assert not more and [s[0] for s in saved] == ["x"]
    b = make(Config(duplicate_limit=3, max_calls_per_agent=5))
    b.persist.restore(
        [(state, harness, parent) for _agent, state, harness, parent in saved if state is not None],
        [(agent, reason, denies, "", None) for agent, reason, denies in a.guard.interrupts()],
        paused=False,
        checks=a.guard.checks,
        denies=dict(a.guard.denies),
    )
    for session in (a, b):
        c = session.open("harness", UID, 9)
        session.receive(c, check(10, agent="x", args={"q": 1}) + check(11, agent="x", args={"q": 2}) + check(12, "y"))
    new_a = next(c for c in a.channels if c.peer_pid == 9)
    new_b = next(c for c in b.channels if c.peer_pid == 9)
    assert replies(a, new_a) == replies(b, new_b)
    assert b.meta["x"].harness == "dsh" and b.meta["x"].parent == "root"


def test_slots_start_empty():
    assert Slot().data is None
    assert ErrorReply("busy", "x").closes and not ErrorReply("bad_json", "x").closes


# -- warnings and results (the rules beyond the seed's) --------------------------------------------


def test_an_allow_near_a_limit_carries_the_warning_rule_and_tally_and_a_deny_the_rule_as_kind():
    session = make(Config.with_preset("recommended"))
    ch = session.open("harness", UID, 7)
    session.receive(ch, b"".join(check(i, call_id=f"c{i}") for i in range(3)))
    got = replies(session, ch)
    assert got[0] == {"id": 0, "decision": "allow"}
    assert got[1]["decision"] == "allow" and got[1]["rule"] == "repeat" and (got[1]["count"], got[1]["limit"]) == (2, 2)
    assert "number 2 of the 2 identical calls in a row" in got[1]["warning"]
    assert got[2]["decision"] == "deny" and got[2]["kind"] == "repeat"
    assert session.current_stats().warnings == 1 and session.current_stats().denies["repeat"] == 1


def test_a_result_on_the_harness_socket_is_matched_by_call_id_and_hands_back_the_warning():
    session = make(Config.with_preset("recommended"))
    ch = session.open("harness", UID, 7)
    session.receive(ch, b"".join(check(i, call_id=f"c{i}") for i in range(2)))
    warning = replies(session, ch)[1]["warning"]
    session.receive(ch, frame(op="result", id=9, agent="a", call_id="c1", digest="d1"))
    session.receive(ch, frame(op="result", id=10, agent="a", call_id="nope", digest="d1"))
    session.receive(ch, frame(op="result", id=11, agent="a", tool="t", args={}, digest="d2"))
    assert replies(session, ch) == [
        {"id": 9, "ok": True, "matched": True, "warning": warning},
        {"id": 10, "ok": True, "matched": False, "warning": ""},
        {"id": 11, "ok": True, "matched": True, "warning": ""},
    ]
    assert "a" in session.persist.agents  # a matched result changes what a restart must keep


def test_a_progressing_poll_reported_over_the_wire_is_never_denied():
    session = make(Config.with_preset("recommended"))
    ch = session.open("harness", UID, 7)
    for i in range(20):
        session.receive(ch, check(2 * i, call_id=i))
        session.receive(ch, frame(op="result", id=2 * i + 1, agent="a", call_id=i, digest=f"run {i}"))
    decisions = [r["decision"] for r in replies(session, ch) if "decision" in r]
    assert decisions == ["allow"] * 20


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"agent": "a", "call_id": "c"}, "'digest'"),
        ({"agent": "", "call_id": "c", "digest": "d"}, "'agent'"),
        ({"agent": "a", "digest": "d"}, "'call_id', or 'tool'"),
        ({"agent": "a", "call_id": "c", "digest": "x" * 129}, "'digest' is 129 characters"),
        ({"agent": "a", "call_id": 1.5, "digest": "d"}, "'call_id'"),
        ({"agent": "a", "tool": 3, "digest": "d"}, "'tool'"),
    ],
)
def test_a_bad_result_frame_is_a_bad_request_naming_the_field_and_the_connection_goes_on(fields, named):
    session = make(Config.with_preset("recommended"))
    ch = session.open("harness", UID, 7)
    session.receive(ch, frame(op="result", id=1, **fields) + check(2))
    bad, ok = replies(session, ch)
    assert bad["error"]["code"] == "bad_request" and named in bad["error"]["message"] and bad["id"] == 1
    assert ok == {"id": 2, "decision": "allow"}


def test_agent_rows_carry_warns_and_the_rule_behind_the_status():
    session = make(Config.with_preset("recommended"))
    ch = session.open("harness", UID, 7)
    session.receive(ch, b"".join(check(i) for i in range(2)))
    view = session.guard.agent_view("a")
    assert view is not None
    row = session.frames.row(view).to_json()
    assert (row["status"], row["rule"], row["warns"]) == ("warned", "repeat", {"repeat": 1})


# -- numbers: every valid JSON number is judged, exactly ------------------------------------------------


def raw_check(rid: int, args_json: str, agent: str = "a") -> bytes:
    return f'{{"op":"check","id":{rid},"agent":"{agent}","tool":"t","args":{args_json}}}\n'.encode()


def decisions(session: ServerSession, ch, frames: list[bytes]) -> list[str]:
    for data in frames:
        session.receive(ch, data)
    return [r.get("kind") or r.get("decision") or r["error"]["code"] for r in replies(session, ch)]


@pytest.mark.parametrize(
    "number",
    ["1" * 311, "-" + "9" * 5000, "1e400", "-2.5E+999", str(2**64), str(-(2**63) - 1)],
    ids=["311-digits", "5000-digits-negative", "1e400", "-2.5E+999", "2^64", "-2^63-1"],
)
def test_a_number_orjson_cannot_read_exactly_is_judged_like_any_other(number):
    """A 311-digit integer was `bad_json`, and cbhook allowed it uncounted: no rule ever applied."""
    session = make()
    ch = session.open("harness", UID, 7)
    same = [raw_check(i, f'{{"n":{number},"q":"x"}}') for i in range(7)]
    assert decisions(session, ch, same) == ["allow"] * 6 + ["duplicate"]
    assert session.guard.agent_view("a").calls == 6


def test_distinct_integers_beyond_64_bits_are_distinct_calls():
    """orjson reads 2**64+1 and 2**64+2 as the same float: six of one and one of the other were a duplicate."""
    session = make(Config(duplicate_limit=2))
    ch = session.open("harness", UID, 7)
    calls = [raw_check(i, f"[{2**64 + i}]") for i in range(10)] + [
        raw_check(10 + i, f"[{'7' * 300}{i}]") for i in range(10)
    ]
    assert decisions(session, ch, calls) == ["allow"] * 20


def test_an_exact_number_keys_the_same_call_whatever_the_key_order_and_never_as_a_string():
    session = make(Config(duplicate_limit=2))
    ch = session.open("harness", UID, 7)
    big = "3" * 40
    calls = [
        raw_check(1, f'{{"a":1,"n":{big}}}'),
        raw_check(2, f'{{"n":{big}, "a":1}}'),
        raw_check(3, f'{{"a":1,"n":{big}}}'),
    ]
    assert decisions(session, ch, calls) == ["allow", "allow", "duplicate"]
    assert decisions(session, ch, [raw_check(4, f'{{"a":1,"n":"{big}"}}')]) == ["allow"]


def test_numbers_that_orjson_reads_exactly_key_the_same_on_both_paths():
    """A long digit run elsewhere in the frame (an id, a string) sends it through the exact reader: an
    in-range integer must key the same as when orjson read it, or a duplicate would slip through."""
    session = make(Config(duplicate_limit=2))
    ch = session.open("harness", UID, 7)
    calls = [
        raw_check(1, '{"n":18446744073709551615,"f":0.1,"i":-9223372036854775808}'),
        f'{{"op":"check","id":{"9" * 30},"agent":"a","tool":"t","args":{{"n":18446744073709551615,"f":0.1,'
        '"i":-9223372036854775808}}\n'.encode(),
    ]
    assert decisions(session, ch, calls) == ["allow", "allow"]
    assert decisions(session, ch, [raw_check(3, '{"i":-9223372036854775808,"f":0.1,"n":18446744073709551615}')]) == [
        "duplicate"
    ]


def test_json_that_is_not_json_stays_bad_json():
    session = make()
    ch = session.open("harness", UID, 7)
    frames = [
        raw_check(1, "NaN"),
        raw_check(2, "[Infinity]"),
        raw_check(3, "[1,]"),
        b'{"op":"check","id":4,"args":"\xff"}\n',
    ]
    assert decisions(session, ch, frames) == ["bad_json"] * 4


def test_an_exact_number_nested_past_orjsons_depth_is_judged_too():
    session = make()
    ch = session.open("harness", UID, 7)
    deep = "[" * 300 + "1" * 311 + "]" * 300
    assert decisions(session, ch, [raw_check(i, deep) for i in range(7)]) == ["allow"] * 6 + ["duplicate"]
    other = "[" * 300 + "1" * 310 + "2" + "]" * 300
    assert decisions(session, ch, [raw_check(8, other)]) == ["allow"]


# -- typed both ways ----------------------------------------------------------------------------------


def test_every_op_a_client_builds_by_keyword_comes_back_as_its_reply_type():
    from breaker.protocol import (
        AgentEnd,
        Answer,
        Check,
        ClientSession,
        ConfigGet,
        Follow,
        Hello,
        HookCall,
        Interrupt,
        Override,
        Pause,
        Ping,
        Reset,
        Result,
        Resume,
        Snapshot,
        Stats,
        Subscribe,
        Unfollow,
        Uninterrupt,
        Unsubscribe,
    )

    session = make()
    ch = session.open("operator", UID, 7)
    client = ClientSession(Hello(harness="pytest", role="console"))
    payload = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash", "tool_input": {"c": "ls"}}
    sent = [
        Check(agent="a", tool="t", args={"q": 1}, call_id="c1"),
        Result(agent="a", digest="d", call_id="c1"),
        HookCall(payload=json.dumps(payload), harness="claude-code"),
        Ping(),
        Subscribe(),
        Unsubscribe(),
        Interrupt(agent="b", reason="r"),
        Uninterrupt(agent="b"),
        Reset(agent="s"),
        Override(agent="a", limits={"duplicateLimit": 3}),
        Follow(agent="a"),
        Unfollow(),
        Pause(),
        Resume(),
        ConfigGet(),
        Snapshot(top=1),
        Stats(),
        AgentEnd(agent="a"),
    ]
    session.receive(ch, b"".join(client.send(request) for request in sent))
    settle(session)
    answers = [item for item in client.receive(ch.take_output()) if isinstance(item, Answer)]
    assert [a.id for a in answers] == [r.id for r in sent] and len(set(a.id for a in answers)) == len(sent)
    assert [type(a.reply).__name__ for a in answers] == [r.reply_type.__name__ for r in sent]
    by_op = {r.op: a.reply for r, a in zip(sent, answers, strict=True)}
    assert by_op["check"].allowed and by_op["result"].matched is False  # the default rules await no result
    assert by_op["hook"].exit == 0 and by_op["hook"].stdout == ""
    assert by_op["override"].override == {"duplicateLimit": 3} and by_op["pause"].paused is True
    # The snapshot is built when the session pumps, after `agent_end` let `a` go: `s` is the hook's agent.
    assert [row.agent for row in by_op["snapshot"].state.agents] == ["s"] and by_op["stats"].stats.checks == 2
    assert client.server_info is not None and client.server_info.plane == "operator"


def test_a_reply_that_is_not_what_its_op_answers_is_a_bad_reply_and_an_unplaced_error_answers_the_oldest():
    from breaker.protocol import Answer, ClientSession, ErrorReply, Ping, Stats

    client = ClientSession()
    ping, stats = Ping(), Stats()
    client.send(ping)
    client.send(stats)
    (odd,) = client.receive(frame(id=ping.id, decision="allow"))
    assert isinstance(odd, Answer) and isinstance(odd.reply, ErrorReply) and odd.reply.code == "bad_reply"
    (error,) = client.receive(frame(id=None, error={"code": "bad_json", "message": "no"}))
    assert error == Answer(stats.id, ErrorReply("bad_json", "no")) and client.waiting == 0
