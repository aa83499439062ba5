"""The wire protocol as typed messages — requests, replies, events — each encoding and decoding itself.

Pure: bytes and dicts in, values out; no sockets, no clock. `ServerSession` (breaker/session.py) and
`ClientSession` (below) are built on it; PROTOCOL.md documents it and a test keeps the two equal.

Names on the wire are snake_case; the values of the config (`ConfigFrame.values`, `ConfigSet.changes`)
keep the patch layer's camelCase keys, because they are the user's own setting names.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Generic, TypeVar

import orjson

from breaker.config import AGENT_LIMITS, BY_KEY
from breaker.records import AgentRow, KeyRow, from_json, nested
from breaker.vocab import Plane
from breaker.wire import HOOK_BRACKETS_MAX, HOOK_PAYLOAD_MAX, MAX_FRAME, PROTOCOL_VERSION, FrameBuffer

__all__ = [
    "ERROR_CODES",
    "HARNESS",
    "HOOK_HARNESSES",
    "MAX_DIGEST",
    "MAX_FRAME",
    "MAX_TEXT",
    "OPERATOR",
    "OPS",
    "PROTOCOL_VERSION",
    "AgentEnd",
    "AgentRow",
    "Answer",
    "CallRow",
    "CallsEvent",
    "Check",
    "ClientSession",
    "ConfigFrame",
    "ConfigGet",
    "ConfigReply",
    "ConfigSet",
    "Decision",
    "Done",
    "ErrorReply",
    "Event",
    "Follow",
    "GuardStats",
    "Hello",
    "HelloReply",
    "HookCall",
    "HookReply",
    "Interrupt",
    "InterruptEvent",
    "KeyRow",
    "Override",
    "Pause",
    "Ping",
    "Pong",
    "ProtocolError",
    "Reply",
    "Request",
    "Reset",
    "Result",
    "Resume",
    "Snapshot",
    "SnapshotReply",
    "StateFrame",
    "Stats",
    "StatsReply",
    "Subscribe",
    "TripRow",
    "Unfollow",
    "Uninterrupt",
    "Unsubscribe",
    "decode_request",
    "encode_frame",
]

MAX_TEXT = 4096  # agent ids, tool names, reasons: generous for real ids, fatal to nobody
MAX_DIGEST = 128  # a result's digest: a hash in hex or base64 fits many times over
HARNESS: Plane = "harness"  # the plane harnesses use: hello, check, result, agent_end, ping
OPERATOR: Plane = "operator"  # the operator's plane: everything, including what changes the guard

# Every error code, what it means, and whether the server closes the connection after it.
ERROR_CODES: dict[str, tuple[str, bool]] = {
    "bad_json": ("not JSON, not UTF-8, or nested deeper than 1,024 levels", False),
    "not_object": ("valid JSON, but not an object", False),
    "bad_request": ("a missing or wrongly typed field; the message names it", False),
    "unknown_op": ("`op` is not an op of this protocol", False),
    "operator_only": ("the op changes the guard or reads other agents' calls: operator socket only", False),
    "forbidden_key": ("`config_set` tried to set a key only the patch file may set", False),
    "bad_config": ("`config_set` with invalid values; `problems` lists `{key, expected, found}`", False),
    "config_broken": ("`config_set` while the patch layer does not parse; fix the file first", False),
    "write_failed": ("`config_set` could not write the patch layer", False),
    "internal": ("a bug in an operator op (logged)", False),
    "limit": ("a bound of the guard was reached (the message says which); nothing changed", False),
    "frame_too_large": ("a frame over `max_frame` bytes", True),
    "busy": ("the guard's shared buffer for large frames is full; retry", True),
    "unjudgeable": (
        "the guard could not read a large frame's args in time; ask again with `args_unserializable: true`",
        False,
    ),
    "forbidden": ("the peer runs as another user", True),
}


class ProtocolError(Exception):
    """A frame we cannot act on. `code` is stable for programs; `message` says what was wrong."""

    def __init__(self, code: str, message: str, request_id: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


def encode_frame(obj: dict[str, Any]) -> bytes:
    """One frame: compact JSON plus a newline (JSON never holds a raw newline).

    An id beyond 64 bits (which orjson will not write) goes out through the standard library's
    json, so every id comes back exactly as it was sent."""
    try:
        return orjson.dumps(obj) + b"\n"
    except TypeError:
        import dataclasses
        import json

        def as_dict(value: Any) -> Any:
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            raise TypeError(f"cannot encode {type(value).__name__}")

        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=as_dict).encode() + b"\n"


# -- field checks ----------------------------------------------------------------------------------

_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    list: "a list",
    dict: "an object",
    bool: "true or false",
}


def _found(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _expected(kinds: tuple[type, ...]) -> str:
    return " or ".join("null" if k is type(None) else _TYPE_NAMES.get(k, k.__name__) for k in kinds)


def _field(op: str, msg: dict[str, Any], name: str, kinds: tuple[type, ...], default: Any, rid: Any) -> Any:
    """One request field, type-checked; `default` is `_REQUIRED` for a field that must be there."""
    if name not in msg:
        if default is _REQUIRED:
            raise ProtocolError("bad_request", f"{op}: '{name}' is required", rid)
        return default
    value = msg[name]
    if kinds is _ANY:
        return value
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ProtocolError("bad_request", f"{op}: '{name}' must be {_expected(kinds)}, found {_found(value)}", rid)
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise ProtocolError("bad_request", f"{op}: '{name}' is longer than {MAX_TEXT:,} characters", rid)
    return value


_REQUIRED = object()
_ANY = (object,)
_KINDS = {"str": str, "int": int, "bool": bool, "None": type(None)}


def required(default: Any) -> Any:
    """A request field the frame must have (`default` only fills the dataclass: a frame without it is refused)."""
    return field(default=default, metadata={"required": True})


def _spec(cls: type) -> tuple[tuple[str, tuple[type, ...], Any], ...]:
    """A request's fields as (name, accepted types, default or _REQUIRED), in their order: read from the dataclass
    fields, whose annotations name the types (`str | None`; `dict[...]` accepts any object, `Any` anything)."""
    spec = []
    for f in fields(cls):
        if f.name == "id":
            continue
        names = [n.strip() for n in str(f.type).split("|")]
        if "Any" in names:
            kinds: tuple[type, ...] = _ANY
        elif names[0].startswith("dict["):
            kinds = (dict,)
        else:
            kinds = tuple(_KINDS[n] for n in names)
        if f.metadata.get("required"):
            default = _REQUIRED
        elif f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: an optional request field takes a plain default")
        else:
            default = f.default
        spec.append((f.name, kinds, default))
    return tuple(spec)


# -- requests --------------------------------------------------------------------------------------


R = TypeVar("R")  # the type of a request's reply


@dataclass(slots=True)
class Request(Generic[R]):
    """A request frame: `op` names it, `id` (any JSON value) is echoed in its reply. Its fields are its schema:
    `SPEC` is read from them. A client builds one by keyword and leaves `id` to its session (`ClientSession.send`);
    its reply comes back as an `R` (`reply_type`), or an `ErrorReply`."""

    op: ClassVar[str] = ""
    plane: ClassVar[Plane] = OPERATOR  # the least plane that may send it
    # (name, accepted types, default or _REQUIRED), in the order they are documented: set from the fields (OPS)
    SPEC: ClassVar[tuple[tuple[str, tuple[type, ...], Any], ...]] = ()
    # the fields of its reply besides `id` (PROTOCOL.md documents them; tests hold the session to them)
    REPLY: ClassVar[tuple[str, ...]] = ("ok",)
    reply_type: ClassVar[Any] = None  # the type its reply decodes to (set with OPS, below the replies)

    id: Any = None

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Request[Any]:
        rid = msg.get("id")
        values = {name: _field(cls.op, msg, name, kinds, default, rid) for name, kinds, default in cls.SPEC}
        return cls(rid, **values)

    @classmethod
    def decode_reply(cls, msg: dict[str, Any]) -> R | ErrorReply:
        """This request's reply from its frame: an `R`, or an `ErrorReply` (the guard's, or `bad_reply` for a
        reply that is not what this op answers)."""
        if "error" in msg:
            error = ErrorReply.from_json(msg)
            if error is not None:
                return error
        reply = cls.reply_type.from_json(msg)
        if reply is None:
            return ErrorReply("bad_reply", f"{cls.op}: unexpected reply {msg!r:.200}")
        return reply

    def to_json(self) -> dict[str, Any]:
        """The frame as a dict: `op`, `id`, then each field, an optional one only when it is not its default
        (which the guard would take for it anyway)."""
        out: dict[str, Any] = {"op": self.op, "id": self.id}
        for name, _kinds, default in self.SPEC:
            value = getattr(self, name)
            # `is` and the type first: args may be anything, and only a value of the default's type is compared
            same = value is default or (type(value) is type(default) and value == default)
            if default is _REQUIRED or not same:
                out[name] = value
        return out

    def encode(self) -> bytes:
        return encode_frame(self.to_json())


@dataclass(slots=True)
class Hello(Request["HelloReply"]):
    op: ClassVar[str] = "hello"
    plane: ClassVar[Plane] = HARNESS
    REPLY: ClassVar = ("server", "version", "protocol", "pid", "plane", "max_frame")

    harness: str = ""
    version: str = ""
    pid: int = 0
    role: str = ""  # "harness" or "console"; a console is not counted among the connected harnesses
    protocol: int = PROTOCOL_VERSION


@dataclass(slots=True)
class Check(Request["Decision"]):
    """Ask before a tool call. `args_unserializable`: the harness could not send the args as JSON;
    the guard allows and counts the call, matching nothing."""

    op: ClassVar[str] = "check"
    plane: ClassVar[Plane] = HARNESS
    # an allow has `decision` only, or with a warning `decision`, `warning`, `rule`, `count`, `limit`
    REPLY: ClassVar = ("decision", "kind", "reason", "count", "limit", "warning", "rule")

    agent: str = required("")
    tool: str = required("")
    args: Any = None
    harness: str | None = None
    parent: str | None = None
    call_id: str | int | None = None
    args_unserializable: bool = False

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Check:
        # The hot path: the well-formed frame every harness sends, checked field by field inline.
        get = msg.get
        agent, tool, harness, parent, call_id = get("agent"), get("tool"), get("harness"), get("parent"), get("call_id")
        unjudgeable = get("args_unserializable", False)
        if (
            type(agent) is str
            and 0 < len(agent) <= MAX_TEXT
            and type(tool) is str
            and len(tool) <= MAX_TEXT
            and (harness is None or (type(harness) is str and len(harness) <= MAX_TEXT))
            and (parent is None or (type(parent) is str and len(parent) <= MAX_TEXT))
            and (call_id is None or type(call_id) is int or (type(call_id) is str and len(call_id) <= MAX_TEXT))
            and type(unjudgeable) is bool
        ):
            return cls(get("id"), agent, tool, get("args"), harness, parent, call_id, unjudgeable)
        check = super(Check, cls).decode(msg)  # names what is wrong
        assert isinstance(check, Check)
        if not check.agent:
            raise ProtocolError("bad_request", "check: 'agent' must not be empty", check.id)
        return check


@dataclass(slots=True)
class Result(Request["Done"]):
    """A call's result came back: `digest` is any short text that changes when the result does (a
    hash of it: the guard never needs the content). The call is found by `call_id`, else by `tool`
    and `args` (its latest such call)."""

    op: ClassVar[str] = "result"
    plane: ClassVar[Plane] = HARNESS
    REPLY: ClassVar = ("ok", "matched", "warning")

    agent: str = required("")
    digest: str = required("")
    call_id: str | int | None = None
    tool: str | None = None
    args: Any = None

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Result:
        result = super(Result, cls).decode(msg)
        assert isinstance(result, Result)
        if not result.agent:
            raise ProtocolError("bad_request", "result: 'agent' must not be empty", result.id)
        if len(result.digest) > MAX_DIGEST:
            raise ProtocolError(
                "bad_request", f"result: 'digest' is {len(result.digest)} characters; at most {MAX_DIGEST}", result.id
            )
        if result.call_id is None and result.tool is None:
            raise ProtocolError(
                "bad_request", "result: give 'call_id', or 'tool' and 'args', to name the call", result.id
            )
        return result


@dataclass(slots=True)
class AgentEnd(Request["Done"]):
    op: ClassVar[str] = "agent_end"
    plane: ClassVar[Plane] = HARNESS
    REPLY: ClassVar = ("ok", "known")
    agent: str = required("")


@dataclass(slots=True)
class HookCall(Request["HookReply"]):
    """cbhook's hook payload, forwarded as the harness wrote it: the guard reads it as cbhook would
    (breaker/hookwire.py), asks its own check, result or agent_end, and answers with what cbhook prints."""

    op: ClassVar[str] = "hook"
    plane: ClassVar[Plane] = HARNESS
    REPLY: ClassVar = ("exit", "stdout", "stderr")

    payload: str = required("")
    harness: str | None = None
    fail_closed: bool = False

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> HookCall:
        payload, rid = msg.get("payload"), msg.get("id")
        # The generic field check stops strings at MAX_TEXT: the payload is checked here, the rest there.
        call = super(HookCall, cls).decode({**msg, "payload": ""} if type(payload) is str else msg)
        assert isinstance(call, HookCall) and type(payload) is str
        if len(payload) > HOOK_PAYLOAD_MAX or payload.count("[") + payload.count("{") > HOOK_BRACKETS_MAX:
            raise ProtocolError(
                "bad_request",
                f"hook: 'payload' is over {HOOK_PAYLOAD_MAX:,} characters or {HOOK_BRACKETS_MAX} brackets",
                rid,
            )
        if call.harness is not None and call.harness not in HOOK_HARNESSES:
            raise ProtocolError(
                "bad_request", f"hook: 'harness' must be one of {', '.join(HOOK_HARNESSES)} or null", rid
            )
        call.payload = payload
        return call


HOOK_HARNESSES = ("claude-code", "codex", "gemini-cli", "cursor", "dsh")  # breaker.hookwire.TOOL_EVENTS' keys


@dataclass(slots=True)
class Ping(Request["Pong"]):
    op: ClassVar[str] = "ping"
    plane: ClassVar[Plane] = HARNESS
    REPLY: ClassVar = ("pong",)


@dataclass(slots=True)
class Subscribe(Request["Done"]):
    op: ClassVar[str] = "subscribe"
    REPLY: ClassVar = ("ok", "tick")


@dataclass(slots=True)
class Unsubscribe(Request["Done"]):
    op: ClassVar[str] = "unsubscribe"


@dataclass(slots=True)
class Interrupt(Request["Done"]):
    op: ClassVar[str] = "interrupt"
    REPLY: ClassVar = ("ok", "notified")
    agent: str = required("")
    reason: str = ""


@dataclass(slots=True)
class Uninterrupt(Request["Done"]):
    op: ClassVar[str] = "uninterrupt"
    REPLY: ClassVar = ("ok", "known")
    agent: str = required("")


@dataclass(slots=True)
class Reset(Request["Done"]):
    op: ClassVar[str] = "reset"
    REPLY: ClassVar = ("ok", "known")
    agent: str = required("")


@dataclass(slots=True)
class Follow(Request["Done"]):
    """Follow one agent's calls: `calls` events carry them as they happen (this connection follows one
    agent at a time; a second `follow` replaces the first)."""

    op: ClassVar[str] = "follow"
    REPLY: ClassVar = ("ok", "known", "history")
    agent: str = required("")


@dataclass(slots=True)
class Unfollow(Request["Done"]):
    op: ClassVar[str] = "unfollow"


@dataclass(slots=True)
class Override(Request["Done"]):
    """Give one agent limits of its own: `limits` maps maxCallsPerAgent and/or duplicateLimit to a value in
    the setting's range, or to null to take that override off. The global config is not touched."""

    op: ClassVar[str] = "override"
    REPLY: ClassVar = ("ok", "known", "override")
    agent: str = required("")
    limits: dict[str, int | None] = field(default_factory=dict, metadata={"required": True})

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Override:
        req = super(Override, cls).decode(msg)
        assert isinstance(req, Override)
        for key, value in req.limits.items():
            setting = BY_KEY.get(key)
            if key not in AGENT_LIMITS or setting is None:
                raise ProtocolError(
                    "bad_request", f"override: {key[:64]!r} is not one of {', '.join(AGENT_LIMITS)}", req.id
                )
            if value is not None and (type(value) is not int or not setting.low <= value <= setting.high):
                raise ProtocolError(
                    "bad_request", f"override: {key} must be {setting.expected} or null, found {_found(value)}", req.id
                )
        return req


@dataclass(slots=True)
class Pause(Request["Done"]):
    op: ClassVar[str] = "pause"
    REPLY: ClassVar = ("ok", "paused")


@dataclass(slots=True)
class Resume(Request["Done"]):
    op: ClassVar[str] = "resume"
    REPLY: ClassVar = ("ok", "paused")


@dataclass(slots=True)
class ConfigGet(Request["ConfigReply"]):
    op: ClassVar[str] = "config_get"
    REPLY: ClassVar = ("config",)


@dataclass(slots=True)
class ConfigSet(Request["ConfigReply"]):
    op: ClassVar[str] = "config_set"
    REPLY: ClassVar = ("ok", "config", "written")
    changes: dict[str, Any] = field(default_factory=dict, metadata={"required": True})


@dataclass(slots=True)
class Snapshot(Request["SnapshotReply"]):
    """Every agent the guard knows, in one state frame (`top` repeated keys, clamped to 0 … 1,000)."""

    op: ClassVar[str] = "snapshot"
    REPLY: ClassVar = ("state",)
    top: int = 10

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Snapshot:
        snap = super(Snapshot, cls).decode(msg)
        assert isinstance(snap, Snapshot)
        snap.top = min(max(snap.top, 0), 1000)
        return snap


@dataclass(slots=True)
class Stats(Request["StatsReply"]):
    op: ClassVar[str] = "stats"
    REPLY: ClassVar = ("stats",)


OPS: dict[str, type[Request]] = {
    cls.op: cls
    for cls in (
        Hello,
        Check,
        Result,
        AgentEnd,
        HookCall,
        Ping,
        Subscribe,
        Unsubscribe,
        Interrupt,
        Uninterrupt,
        Reset,
        Override,
        Follow,
        Unfollow,
        Pause,
        Resume,
        ConfigGet,
        ConfigSet,
        Snapshot,
        Stats,
    )
}
HARNESS_OPS = frozenset(op for op, cls in OPS.items() if cls.plane == HARNESS)
for _cls in OPS.values():
    _cls.SPEC = _spec(_cls)


# Numbers: orjson reads an integer beyond 64 bits as a float (rounding distinct integers into one) and
# refuses one beyond a double's range. A frame holding a run of 19 digits or more (any such integer has
# them) is read again by the standard library's json, keeping each such integer as its literal digits: a
# call's key then holds the number exactly, and no frame of valid JSON is refused for its numbers.
_DIGITS_ONLY = bytes(0x39 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))  # digits -> "9", all else " "
_LONG_RUN = b"9" * 19
_INT64 = range(-(2**63), 2**64)  # what orjson itself reads as an int: the same value on both paths


def _exact_int(text: str) -> Any:
    if len(text) <= 18:
        return int(text)
    if len(text) <= 21 and int(text) in _INT64:  # at most 20 digits and a sign: int() is cheap
        return int(text)
    return orjson.Fragment(text.encode())  # written back as the same digits, never converted (no int limit)


def _exact_float(text: str) -> Any:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return orjson.Fragment(text.encode())  # 1e400: a valid JSON number no double holds
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_exact(frame: bytes | memoryview) -> Any:
    """JSON as orjson reads it, except that numbers beyond what it reads exactly stay exact (see above)."""
    import json

    try:
        return json.loads(bytes(frame), parse_int=_exact_int, parse_float=_exact_float, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deep") from None


def decode_request(frame: bytes | memoryview) -> Request:
    """Parse and validate one request frame (without its newline). Raises ProtocolError."""
    try:
        msg = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        try:
            msg = loads_exact(frame)  # a number orjson refuses (311 digits, 1e400); else the frame is not JSON
        except ValueError:
            raise ProtocolError("bad_json", f"not valid JSON: {exc}") from None
    else:
        if _LONG_RUN in bytes(frame).translate(_DIGITS_ONLY):
            msg = loads_exact(frame)  # an integer orjson may have rounded (any id, any args)
    if type(msg) is not dict:
        raise ProtocolError("not_object", f"a request must be a JSON object, found {_found(msg)}")
    if msg.get("op") == "check":
        return Check.decode(msg)  # the hot path: one comparison instead of the lookups below
    rid = msg.get("id")
    op = msg.get("op")
    if type(op) is not str:
        raise ProtocolError("bad_request", f"'op' must be a string, found {_found(op)}", rid)
    cls = OPS.get(op)
    if cls is None:
        raise ProtocolError("unknown_op", f"unknown op {op[:64]!r}; known: {', '.join(OPS)}", rid)
    return cls.decode(msg)


# -- replies ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Reply:
    """A reply to one request. `to_json` gives the fields; the session adds the request's id. `from_json` reads
    them back (None: not this reply), each field by its declared type."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Any:
        return from_json(cls, obj)

    def encode(self, rid: Any) -> bytes:
        return encode_frame({"id": rid, **self.to_json()})


@dataclass(slots=True)
class HelloReply(Reply):
    server: str
    version: str
    protocol: int
    pid: int
    plane: str
    max_frame: int


@dataclass(frozen=True, slots=True)
class Decision:
    """A check's answer: `{"decision":"allow"}`, or a deny with its kind, reason, count and limit.

    `fallback` is never on the wire: a client sets it when the guard could not be asked (or could
    not judge the call) and its failure mode decided instead."""

    allowed: bool
    kind: str | None = None
    reason: str = ""
    count: int = 0
    limit: int = 0
    fallback: bool = False
    warning: str = ""  # an allow near a limit: the text for the model ("" = none)
    rule: str | None = None  # the rule that warned

    def to_json(self) -> dict[str, Any]:
        if self.allowed:
            if self.warning:
                return {
                    "decision": "allow",
                    "warning": self.warning,
                    "rule": self.rule,
                    "count": self.count,
                    "limit": self.limit,
                }
            return {"decision": "allow"}
        return {"decision": "deny", "kind": self.kind, "reason": self.reason, "count": self.count, "limit": self.limit}

    def encode(self, rid: Any) -> bytes:
        return encode_frame({"id": rid, **self.to_json()})

    @staticmethod
    def encode_allow(rid: Any) -> bytes:
        """`ALLOW.encode(rid)`, byte for byte: the check's hot path, which for an id orjson writes as an integer
        builds no dict at all."""
        if type(rid) is int and -(2**63) <= rid < 2**63:
            return b'{"id":%d' % rid + ALLOW_FRAME_TAIL
        return ALLOW.encode(rid)

    @staticmethod
    def encode_deny(rid: Any, kind: str | None, reason: str, count: int, limit: int) -> bytes:
        """`Decision(False, kind=kind, reason=reason, count=count, limit=limit).encode(rid)`, byte for byte,
        without building the Decision: the check's hot path (a frozen dataclass costs ~2.6 us to build)."""
        return encode_frame(
            {"id": rid, "decision": "deny", "kind": kind, "reason": reason, "count": count, "limit": limit}
        )

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Decision | None:
        """The decision in a reply, or None if it is not a well-formed one."""
        decision = obj.get("decision")
        if decision == "allow":
            warning = obj.get("warning")
            if isinstance(warning, str) and warning:
                rule, count, limit = obj.get("rule"), obj.get("count"), obj.get("limit")
                return cls(
                    True,
                    count=count if type(count) is int else 0,
                    limit=limit if type(limit) is int else 0,
                    warning=warning,
                    rule=rule if isinstance(rule, str) else None,
                )
            return ALLOW
        if decision != "deny":
            return None
        kind, reason, count, limit = obj.get("kind"), obj.get("reason"), obj.get("count"), obj.get("limit")
        if not (isinstance(kind, str) and isinstance(reason, str)):
            return None
        return cls(False, kind, reason, count if type(count) is int else 0, limit if type(limit) is int else 0)


ALLOW = Decision(True)
ALLOW_FRAME_TAIL = b',"decision":"allow"}\n'  # the one reply the hot path writes without building a dict


@dataclass(slots=True)
class Done(Reply):
    """`{"ok": true}` plus what the op reports (`known`, `notified`, `paused`, `tick`, `matched`, `warning`,
    `override`, `history`)."""

    known: bool | None = None
    notified: int | None = None
    paused: bool | None = None
    tick: float | None = None
    matched: bool | None = None
    warning: str | None = None
    override: dict[str, int] | None = None
    history: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": True}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value
        return out


@dataclass(slots=True)
class HookReply(Reply):
    """The `hook` op's answer: cbhook's exit status, and the bytes it writes to stdout and to stderr, each as
    hex (UTF-8), so that cbhook reads them without a JSON parser."""

    exit: int
    stdout: str
    stderr: str

    def to_json(self) -> dict[str, Any]:
        return {
            "exit": self.exit,
            "stdout": self.stdout.encode("utf-8", "backslashreplace").hex(),
            "stderr": self.stderr.encode("utf-8", "backslashreplace").hex(),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> HookReply | None:
        status, out, err = obj.get("exit"), obj.get("stdout"), obj.get("stderr")
        if type(status) is not int or type(out) is not str or type(err) is not str:
            return None
        try:
            return cls(
                status, bytes.fromhex(out).decode("utf-8", "replace"), bytes.fromhex(err).decode("utf-8", "replace")
            )
        except ValueError:
            return None


@dataclass(slots=True)
class Pong(Reply):
    def to_json(self) -> dict[str, Any]:
        return {"pong": True}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Pong | None:
        return cls() if obj.get("pong") is True else None


@dataclass(slots=True)
class ErrorReply(Reply):
    code: str
    message: str
    problems: list[dict[str, str]] | None = None  # bad_config: one {key, expected, found} per problem

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.problems is not None:
            error["problems"] = self.problems
        return {"error": error}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ErrorReply | None:
        error = obj.get("error")
        if not isinstance(error, dict):
            return None
        problems = error.get("problems")
        return cls(
            str(error.get("code") or "error"),
            str(error.get("message") or ""),
            problems if isinstance(problems, list) else None,
        )

    @property
    def closes(self) -> bool:
        """The server closes the connection after this error."""
        return ERROR_CODES.get(self.code, ("", False))[1]


# -- the state frame and its rows ------------------------------------------------------------------


@nested
@dataclass(slots=True, kw_only=True)
class TripRow:
    """An agent's first deny of a kind: when, who, which kind, the tool, count and limit."""

    time: float = 0.0
    agent: str
    kind: str = ""
    tool: str = ""
    count: int = 0
    limit: int = 0

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TripRow | None:
        return from_json(cls, obj)


@nested
@dataclass(slots=True)
class GuardStats:
    """The guard's counters and where it listens."""

    checks: int = 0
    denies: dict[str, int] = field(default_factory=dict)
    warnings: int = 0  # calls allowed with a warning
    agents: int = 0
    connections: int = 0
    harnesses: dict[str, int] = field(default_factory=dict)  # harness name -> connections
    paused: bool = False
    uptime: float = 0.0
    pid: int = 0
    host: str = ""  # the machine it runs on (what a console over several guards names it by)
    socket: str = ""
    operator_socket: str = ""
    incident_log: str = ""
    incident_log_error: str | None = None
    incidents_dropped: int = 0  # lines the incident log's queue had no room for
    frames_too_large: int = 0
    events_dropped: int = 0  # interrupt pushes to connections that read nothing
    commands_dropped: int = 0  # interrupt commands the queue had no room for
    state_file: str = ""  # where the guard keeps its state ("" = not kept)
    state_error: str | None = None
    metrics: str = ""  # the URL the Prometheus metrics are served at ("" = not served)
    metrics_error: str | None = None  # why the metrics could not be served where the config says
    otel_events: bool = False  # denies and warnings are exported over OTLP
    otel_error: str | None = None  # why they cannot be

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> GuardStats:
        return from_json(cls, obj) or cls()


@nested
@dataclass(slots=True)
class ConfigFrame:
    """The config in force and where it came from."""

    values: dict[str, Any] = field(default_factory=dict)  # camelCase, as in the patch layer
    disabled: bool = False  # `disabled: true` on the row
    source: str | None = None  # the layer whose config is in force (None = built-in defaults)
    target: str | None = None  # where an edit is written
    layers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why the last reload failed (the last good config stays)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ConfigFrame:
        return from_json(cls, obj) or cls()


@dataclass(slots=True)
class ConfigReply(Reply):
    """`config_get`: the config frame; `config_set`: also `ok` and the file written (None: memory only)."""

    config: ConfigFrame
    written: str | None = None
    set: bool = False

    def to_json(self) -> dict[str, Any]:
        if not self.set:
            return {"config": self.config.to_json()}
        return {"ok": True, "config": self.config.to_json(), "written": self.written}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ConfigReply | None:
        config, written = obj.get("config"), obj.get("written")
        if type(config) is not dict:
            return None
        return cls(ConfigFrame.from_json(config), written if type(written) is str else None, obj.get("ok") is True)


@dataclass(slots=True, kw_only=True)
class StateFrame:
    """What subscribers see. `full`: every known agent (the first frame, or after falling behind);
    otherwise only agents that changed, `gone` ids, and `config` only when it changed. A frame too
    big for one tick's slice comes as several: `part` counts from 0, `last` is true on the final one;
    only part 0 carries `full`, `gone`, `top_keys`, `trips`, `stats` and `config`."""

    seq: int = 0
    full: bool = False
    time: float = 0.0
    agents: list[AgentRow] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    top_keys: list[KeyRow] | None = None
    trips: list[TripRow] = field(default_factory=list)
    stats: GuardStats | None = None
    config: ConfigFrame | None = None
    part: int = 0
    last: bool = True

    def to_json(self, event: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"event": "state"} if event else {}
        out.update(seq=self.seq, full=self.full, time=self.time, part=self.part, last=self.last)
        out["agents"] = self.agents  # dataclasses: orjson writes their fields itself, in C
        if self.part == 0:
            out["gone"] = self.gone
            out["top_keys"] = self.top_keys or []
            out["trips"] = self.trips
            out["stats"] = self.stats
            out["config"] = self.config
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StateFrame:
        return from_json(cls, obj) or cls()


@dataclass(slots=True)
class SnapshotReply(Reply):
    state: StateFrame

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state.to_json(event=False)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SnapshotReply | None:
        state = obj.get("state")
        return cls(StateFrame.from_json(state)) if type(state) is dict else None


@dataclass(slots=True)
class StatsReply(Reply):
    stats: GuardStats

    def to_json(self) -> dict[str, Any]:
        return {"stats": self.stats.to_json()}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StatsReply | None:
        stats = obj.get("stats")
        return cls(GuardStats.from_json(stats)) if type(stats) is dict else None


# Each op's reply type (the requests come before the replies in this file).
for _cls, _reply in {
    Hello: HelloReply,
    Check: Decision,
    HookCall: HookReply,
    Ping: Pong,
    ConfigGet: ConfigReply,
    ConfigSet: ConfigReply,
    Snapshot: SnapshotReply,
    Stats: StatsReply,
}.items():
    _cls.reply_type = _reply
for _cls in OPS.values():
    if _cls.reply_type is None:
        _cls.reply_type = Done


# -- events ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class InterruptEvent:
    """Pushed to every connection that checked for `agent` when the operator interrupts it."""

    agent: str
    reason: str = ""

    def encode(self) -> bytes:
        return encode_frame({"event": "interrupt", "agent": self.agent, "reason": self.reason})

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> InterruptEvent | None:
        return from_json(cls, obj)


@nested
@dataclass(slots=True, kw_only=True)
class CallRow:
    """One call of a followed agent, as the guard decided it."""

    time: float = 0.0
    tool: str
    preview: str = ""
    decision: str = ""  # "allow"; "warn" (allowed with a warning); "deny"; "pass" (allowed without being judged)
    count: int = 0
    limit: int = 0
    rule: str = ""  # the rule that denied or warned ("" otherwise)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CallRow | None:
        return from_json(cls, obj)


@dataclass(slots=True, kw_only=True)
class CallsEvent:
    """Pushed to a connection that follows `agent`: its calls since the last event (oldest first), the
    repeated keys in its window now, how many calls it missed while it read nothing, and (in the first event
    of a follow) how many of `calls` it made before the follow began: its recent calls."""

    agent: str
    calls: list[CallRow] = field(default_factory=list)
    keys: list[KeyRow] = field(default_factory=list)
    distinct: int = 0  # distinct keys in its window
    dropped: int = 0
    earlier: int = 0  # the first `earlier` of `calls` were made before this follow began

    def encode(self) -> bytes:
        return encode_frame(
            {
                "event": "calls",
                "agent": self.agent,
                "calls": self.calls,
                "keys": self.keys,
                "distinct": self.distinct,
                "dropped": self.dropped,
                "earlier": self.earlier,
            }
        )

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CallsEvent | None:
        return from_json(cls, obj)


Event = InterruptEvent | StateFrame | CallsEvent
_EVENTS: dict[str, Any] = {"state": StateFrame, "calls": CallsEvent, "interrupt": InterruptEvent}


# -- the client side -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """A reply matched to its request: the request's `id`, and the reply as that request's op answers it (an
    `ErrorReply` for an error, or for a reply that is not what the op answers: `bad_reply`)."""

    id: Any
    reply: Reply | Decision


class ClientSession:
    """A client's side of one connection, without I/O: requests out as bytes, typed replies and events in.

    `send(request)` gives the bytes to write (with a `hello` in front on the first call: the
    handshake is pipelined and costs no round trip); `receive(data)` takes bytes read and returns
    what completed, in order: an `Answer` per reply (the request's id and its reply, decoded by the
    request's type) and the events (`InterruptEvent`, `StateFrame`, `CallsEvent`). An error the
    server could not tie to a request (`"id": null`) answers the oldest request waiting — replies
    come in request order — or, when the server closes after it, every request waiting.
    """

    def __init__(
        self, hello: Hello | None = None, max_frame: int = 64 * 1024 * 1024, ids: Iterator[int] | None = None
    ) -> None:
        self.hello = hello
        self.server_info: HelloReply | None = None  # the guard's answer to the handshake, once it came
        self._buffer = FrameBuffer(max_frame)
        self._pending: deque[tuple[Any, type[Request[Any]]]] = deque()  # (id, request type) waiting, oldest first
        self._ids = ids if ids is not None else itertools.count(1)  # a client may share one across connections
        self._hello_id: Any = None

    def next_id(self) -> int:
        return next(self._ids)

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def send(self, request: Request[Any], frame: bytes | None = None) -> bytes:
        """The bytes for `request`; one without an id is given the next one. `frame`: the request already
        encoded (a client with an encoding of its own), with the request's id."""
        if request.id is None:
            request.id = self.next_id()
        if frame is None:
            frame = request.encode()
        out = b""
        if self.hello is not None:
            self.hello.id = self._hello_id = self.next_id()
            self._pending.append((self._hello_id, Hello))
            out = self.hello.encode()
            self.hello = None
        self._pending.append((request.id, type(request)))
        return out + frame

    def forget(self, rid: Any) -> None:
        """A request given up on (timed out): its reply, if it ever comes, is dropped."""
        for n, (pending, _kind) in enumerate(self._pending):
            if pending == rid:
                del self._pending[n]
                return

    def _kind(self, rid: Any) -> type[Request[Any]] | None:
        for pending, kind in self._pending:
            if pending == rid:
                return kind
        return None

    def receive(self, data: bytes) -> list[Answer | Event]:
        """Frames in `data` (and before it) decoded. Raises ProtocolError if the stream is not ours
        (not JSON, a frame over the limit): the caller drops the connection."""
        self._buffer.feed(data)
        out: list[Answer | Event] = []
        for frame in self._buffer.frames():
            try:
                msg = orjson.loads(frame)
            except orjson.JSONDecodeError:
                raise ProtocolError("bad_json", "the guard sent something that is not JSON") from None
            if not isinstance(msg, dict):
                continue
            if "event" in msg:
                kind = _EVENTS.get(msg["event"]) if isinstance(msg["event"], str) else None
                event = kind.from_json(msg) if kind is not None else None
                if event is not None:
                    out.append(event)
                continue
            rid = msg.get("id")
            if rid is None and "error" in msg:
                error = ErrorReply.from_json(msg) or ErrorReply("bad_reply", f"unexpected reply {msg!r:.200}")
                targets = [p for p, _k in self._pending] if error.closes else [p for p, _k in self._pending][:1]
                for target in targets:
                    self.forget(target)
                    if target != self._hello_id:
                        out.append(Answer(target, error))
                continue
            request = self._kind(rid)
            if request is None:
                continue  # a reply to a request given up on
            self.forget(rid)
            reply = request.decode_reply(msg)
            if rid == self._hello_id:
                self.server_info = reply if isinstance(reply, HelloReply) else None
                self._hello_id = None
                continue
            out.append(Answer(rid, reply))
        if self._buffer.too_large:
            raise ProtocolError("frame_too_large", "the guard sent a frame over the client's limit")
        return out
