"""PROTOCOL.md says what the code does: every op, field, reply field, row field and error code is
documented, and nothing is documented that the code lacks. And the session's replies carry exactly
the fields each op declares."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import orjson
import pytest

from breaker import Config, Guard
from breaker.protocol import _REQUIRED as REQUIRED  # the marker of a required field
from breaker.protocol import (
    ERROR_CODES,
    OPS,
    AgentRow,
    CallRow,
    ConfigFrame,
    GuardStats,
    KeyRow,
    StateFrame,
    TripRow,
)
from breaker.session import ServerSession
from tests.sessionkit import settle

DOC = (Path(__file__).resolve().parents[1] / "PROTOCOL.md").read_text()


def table(heading: str) -> list[list[str]]:
    """The rows of the first table after `heading` (cells stripped), header and rule excluded."""
    start = DOC.index(heading)
    rows = []
    for line in DOC[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[2:]


def names(cell: str) -> list[str]:
    return re.findall(r"`([a-z_]+)`\??", cell)


def test_every_op_its_plane_fields_and_reply_are_documented_and_nothing_else():
    documented = {names(row[0])[0]: row for row in table("## Ops")}
    assert list(documented) == list(OPS)
    for op, cls in OPS.items():
        _op, plane, fields, reply = documented[op]
        assert plane == cls.plane, op
        assert names(fields) == [name for name, _kinds, _default in cls.SPEC], op
        optional = set(re.findall(r"`([a-z_]+)`\?", fields))
        assert optional == {name for name, _k, default in cls.SPEC if default is not REQUIRED}, op
        assert names(reply) == list(cls.REPLY), op


def test_every_error_code_and_whether_it_closes_is_documented_and_nothing_else():
    documented = {names(row[0])[0]: row[2] for row in table("## Errors")}
    assert set(documented) == set(ERROR_CODES)
    for code, (_when, closes) in ERROR_CODES.items():
        assert documented[code] == ("closed" if closes else "kept"), code


@pytest.mark.parametrize(
    ("heading", "cls"),
    [
        ("### Agent row", AgentRow),
        ("### Key row", KeyRow),
        ("### Trip row", TripRow),
        ("### Call row", CallRow),
        ("### Guard stats", GuardStats),
        ("### Config frame", ConfigFrame),
    ],
)
def test_every_row_field_is_documented_in_order_and_nothing_else(heading, cls):
    assert [names(row[0])[0] for row in table(heading)] == [f.name for f in dataclasses.fields(cls)]


def test_the_state_frame_fields_are_documented_and_nothing_else():
    documented = [names(row[0])[0] for row in table("### State frame")]
    frame = StateFrame(seq=1, full=True, stats=GuardStats(), config=ConfigFrame(values={}))
    assert documented == [k for k in frame.to_json() if k != "event"]


# -- the session's replies carry exactly what each op declares -----------------------------------------

REQUESTS = {
    "hello": {"harness": "dsh"},
    "check": {"agent": "a", "tool": "t", "args": {}},
    "result": {"agent": "a", "digest": "d", "call_id": "c"},
    "agent_end": {"agent": "a"},
    "ping": {},
    "subscribe": {},
    "unsubscribe": {},
    "interrupt": {"agent": "a"},
    "uninterrupt": {"agent": "a"},
    "reset": {"agent": "a"},
    "pause": {},
    "resume": {},
    "config_get": {},
    "snapshot": {},
    "stats": {},
}


@pytest.mark.parametrize("op", sorted(REQUESTS))
def test_each_reply_has_exactly_the_fields_its_op_declares(op):
    session = ServerSession(Guard(Config(duplicate_limit=1, duplicate_warn=1)), clock=lambda: 0.0, owner_uid=1, pid=2)
    ch = session.open("operator", 1, 3)
    if op == "check":  # call 0 is allowed with a warning, call 1 denied: together every field
        session.receive(ch, b'{"op":"check","id":0,"agent":"a","tool":"t","args":{}}\n')
    if op == "result":
        session.receive(ch, b'{"op":"check","id":0,"agent":"a","tool":"t","args":{},"call_id":"c"}\n')
    session.receive(ch, orjson.dumps({"op": op, "id": 1, **REQUESTS[op]}) + b"\n")
    settle(session)
    replies = [r for r in map(orjson.loads, ch.take_output().splitlines()) if r.get("id") in (0, 1)]
    reply = replies[-1]
    assert reply["id"] == 1
    if op == "check":
        warned, denied = replies
        assert warned["decision"] == "allow" and warned["warning"] and denied["decision"] == "deny"
        assert sorted({*warned, *denied} - {"id"}) == sorted(OPS[op].REPLY), replies
        return
    assert sorted(k for k in reply if k != "id") == sorted(OPS[op].REPLY), reply


def test_a_config_set_reply_has_exactly_the_fields_it_declares():
    import asyncio
    import tempfile

    from breaker.server import GuardServer

    async def ask() -> dict:
        run = Path(tempfile.mkdtemp()) / "run"
        run.mkdir(mode=0o700)
        server = GuardServer(run / "guard.sock", config=Config())
        await server.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(server.operator_path))
            writer.write(b'{"op":"config_set","id":1,"changes":{"window":50}}\n')
            reply = orjson.loads(await reader.readline())
            writer.close()
            return reply
        finally:
            await server.stop()

    reply = asyncio.run(ask())
    assert sorted(k for k in reply if k != "id") == sorted(OPS["config_set"].REPLY)
    assert reply["written"] is None  # no patch layer: memory only, as documented
