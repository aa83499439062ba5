"""The records the wire carries, read back by the one decoder written from their fields' types."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from breaker.protocol import (
    AgentRow,
    CallRow,
    CallsEvent,
    ConfigFrame,
    Done,
    GuardStats,
    InterruptEvent,
    KeyRow,
    StateFrame,
    TripRow,
)

AGENT = AgentRow(
    agent="a",
    harness="dsh",
    parent="root",
    calls=7,
    window_fill=7,
    window=200,
    cap=300,
    worst_count=6,
    worst_tool="bash",
    worst_preview='bash command="make"',
    duplicate_limit=6,
    denies={"duplicate": 1},
    status="duplicate",
    last_tool="bash",
    last_seen=12.5,
    interrupt_reason="stop",
    warns={"duplicate": 1},
    rule="duplicate",
    override={"duplicateLimit": 6},
)
KEY = KeyRow(agent="a", tool="bash", preview='bash command="make"', count=6)
TRIP = TripRow(time=3.0, agent="a", kind="duplicate", tool="bash", count=6, limit=6)
CALL = CallRow(time=4.0, tool="bash", preview="p", decision="deny", count=6, limit=6, rule="duplicate")
STATS = GuardStats(checks=9, denies={"cap": 2}, harnesses={"dsh": 1}, uptime=1.5, state_error="disk full")
CONFIG = ConfigFrame(values={"window": 50}, disabled=True, source="s", target="t", layers=["x"], notes=["n"])


def wire(obj: object) -> dict:
    """What a client reads: the record as orjson writes it (dataclasses by their fields), parsed again."""
    return orjson.loads(orjson.dumps(obj))


@pytest.mark.parametrize("record", [AGENT, KEY, TRIP, CALL, STATS, CONFIG, InterruptEvent(agent="a", reason="r")])
def test_every_record_reads_back_equal_to_what_was_sent(record):
    assert type(record).from_json(wire(record)) == record


def test_a_state_frame_and_a_calls_event_read_back_with_their_rows():
    frame = StateFrame(
        seq=3, full=True, time=9.0, agents=[AGENT], gone=["b"], top_keys=[KEY], trips=[TRIP], stats=STATS,
        config=CONFIG, part=0, last=False,
    )  # fmt: skip
    assert StateFrame.from_json(wire(frame.to_json())) == frame
    event = CallsEvent(agent="a", calls=[CALL], keys=[KEY], distinct=4, dropped=2)
    assert CallsEvent.from_json(orjson.loads(event.encode())) == event


def test_a_field_of_another_type_takes_its_default_and_a_bad_row_in_a_list_is_skipped():
    sent = {**wire(AGENT), "calls": "7", "last_seen": True, "parent": 5, "denies": {"cap": 1, "x": "y"}, "window": 2}
    row = AgentRow.from_json(sent)
    assert row == dataclasses.replace(AGENT, calls=0, last_seen=None, parent=None, denies={"cap": 1}, window=2)
    frame = StateFrame.from_json({"agents": [wire(AGENT), {"agent": 1}, "x", {"calls": 1}], "time": 2})
    assert frame.agents == [AGENT] and frame.time == 2.0 and type(frame.time) is float


@pytest.mark.parametrize("cls", [AgentRow, KeyRow, TripRow, InterruptEvent, CallsEvent])
def test_a_record_without_its_agent_is_none(cls):
    assert cls.from_json({"agent": None, "tool": "t"}) is None
    assert cls.from_json({}) is None
    assert CallRow.from_json({"tool": 3}) is None


def test_a_reply_reads_only_what_its_op_reports():
    assert Done.from_json({"ok": True, "known": True, "override": {"cap": 3, "x": None}}) == Done(
        known=True, override={"cap": 3}
    )
    assert Done.from_json({"ok": True, "known": "yes", "tick": 1}) == Done(tick=1.0)
