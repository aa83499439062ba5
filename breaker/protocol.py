"""The wire protocol: newline-delimited JSON frames, their validation and error codes. Pure: bytes in, values out."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "MAX_FRAME",
    "OPS",
    "PROTOCOL_VERSION",
    "FrameBuffer",
    "FrameTooLarge",
    "ProtocolError",
    "decode",
    "encode",
    "error_reply",
]

PROTOCOL_VERSION = 1
MAX_FRAME = 8 * 1024 * 1024  # a harness may send a whole file write as args
MAX_ID_LEN = 4096  # agent ids, tool names: generous for real ids, fatal to nobody

# op -> {field: (type or types, required)}. Only these fields are checked; extra fields are allowed.
_STR = str
OPS: dict[str, dict[str, tuple[Any, bool]]] = {
    "hello": {
        "harness": (_STR, False),
        "version": (_STR, False),
        "pid": (int, False),
        "capabilities": (list, False),
        "role": (_STR, False),
        "protocol": (int, False),
    },
    "check": {
        "agent": (_STR, True),
        "tool": (_STR, True),
        "harness": (_STR, False),
        "parent": ((_STR, type(None)), False),
        "call_id": ((_STR, int, type(None)), False),
    },
    "agent_end": {"agent": (_STR, True)},
    "subscribe": {"interval": ((int, float), False)},
    "unsubscribe": {},
    "interrupt": {"agent": (_STR, True), "reason": (_STR, False)},
    "uninterrupt": {"agent": (_STR, True)},
    "reset": {"agent": (_STR, True)},
    "pause": {},
    "resume": {},
    "config_get": {},
    "config_set": {"changes": (dict, True)},
    "snapshot": {"top": (int, False)},
    "stats": {},
    "ping": {},
}


class ProtocolError(Exception):
    """A frame we cannot act on. `code` is stable for programs; `message` says what was wrong."""

    def __init__(self, code: str, message: str, request_id: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


class FrameTooLarge(ProtocolError):
    def __init__(self, limit: int):
        super().__init__("frame_too_large", f"a frame is larger than the {limit:,}-byte limit; closing")


def encode(message: dict[str, Any]) -> bytes:
    """One frame: compact JSON plus a newline (JSON never contains a raw newline)."""
    return orjson.dumps(message) + b"\n"


def error_reply(request_id: Any, code: str, message: str) -> bytes:
    return orjson.dumps({"id": request_id, "error": {"code": code, "message": message}}) + b"\n"


def _type_name(t: Any) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    if isinstance(t, tuple):
        return " or ".join(names.get(x, x.__name__) for x in t)
    return names.get(t, t.__name__)


def _found(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def decode(frame: bytes | memoryview) -> dict[str, Any]:
    """Parse and validate one request frame (without its newline). Raises ProtocolError."""
    try:
        msg = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("bad_json", f"not valid JSON: {exc}") from None
    if type(msg) is not dict:
        raise ProtocolError("not_object", f"a request must be a JSON object, found {_found(msg)}")
    op = msg.get("op")
    rid = msg.get("id")
    if type(op) is not str:
        raise ProtocolError("bad_request", f"'op' must be a string, found {_found(op)}", rid)
    schema = OPS.get(op)
    if schema is None:
        raise ProtocolError("unknown_op", f"unknown op {op[:64]!r}; known: {', '.join(OPS)}", rid)
    for name, (kind, required) in schema.items():
        value = msg.get(name)
        if value is None and name not in msg:
            if required:
                raise ProtocolError("bad_request", f"{op}: '{name}' is required", rid)
            continue
        if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int, float))):
            raise ProtocolError("bad_request", f"{op}: '{name}' must be {_type_name(kind)}, found {_found(value)}", rid)
        if kind is _STR and len(value) > MAX_ID_LEN:
            raise ProtocolError("bad_request", f"{op}: '{name}' is longer than {MAX_ID_LEN} characters", rid)
    if op == "check" and not msg["agent"]:
        raise ProtocolError("bad_request", "check: 'agent' must not be empty", rid)
    return msg


class FrameBuffer:
    """Accumulates bytes from a stream and hands out complete frames; flags a frame over `limit` bytes.

    After `too_large` is set the stream cannot be resynchronised: the caller answers and closes.
    """

    __slots__ = ("_buf", "_scanned", "limit", "too_large")

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._scanned = 0  # leading bytes already known to hold no newline
        self.limit = limit
        self.too_large = False

    def feed(self, data: bytes) -> None:
        self._buf += data

    def __len__(self) -> int:
        return len(self._buf)

    def frames(self, max_frames: int = 1 << 30) -> list[bytes]:
        """Complete frames in order (empty lines skipped), at most `max_frames`."""
        buf = self._buf
        out: list[bytes] = []
        start = 0
        while len(out) < max_frames:
            nl = buf.find(b"\n", start + self._scanned)
            if nl < 0:
                self._scanned = len(buf) - start
                break
            self._scanned = 0
            if nl - start > self.limit:
                self.too_large = True
                break
            if nl > start:
                out.append(bytes(buf[start:nl]))
            start = nl + 1
        if start:
            del buf[:start]
        if len(buf) > self.limit and buf.find(b"\n") < 0:
            self.too_large = True
        return out

    def pending(self) -> bool:
        """A complete frame is waiting (after `frames()` stopped at `max_frames`)."""
        return self._buf.find(b"\n") >= 0
