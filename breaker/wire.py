"""Framing: newline-delimited frames out of a byte stream. Imports nothing, so `cbhook` can share it (not even
`__future__`, whose import alone costs cbhook 0.2 ms per tool call: every annotation here is valid at run time).

Every piece of the project that reads the guard's socket — the server, both Python clients, cbhook —
splits its stream with `FrameBuffer`; nothing else scans for newlines.
"""

__all__ = ["HOOK_BRACKETS_MAX", "HOOK_PAYLOAD_MAX", "MAX_FRAME", "PROTOCOL_VERSION", "FrameBuffer", "GuardUnavailable"]

PROTOCOL_VERSION = 1
MAX_FRAME = 8 * 1024 * 1024  # a harness may send a whole file write as args

# The `hook` op (cbhook forwards a harness's payload for the guard to read, breaker/hookwire.py) takes a payload
# of at most HOOK_PAYLOAD_MAX characters as escaped in its frame, and HOOK_BRACKETS_MAX `[` and `{`: such a frame
# stays under the size the guard hands to its judge process (breaker/judge.py, JUDGE_FROM), so the guard's loop
# reads it itself, in microseconds. cbhook reads a larger payload itself, as it did before the op.
HOOK_PAYLOAD_MAX = 15 * 1024
HOOK_BRACKETS_MAX = 256


class GuardUnavailable(ConnectionError):
    """The guard could not be asked: no socket, an untrusted socket, refused, timed out, closed.

    One class for every client (the library, cbhook): the failure mode — fail open or closed —
    decides the call, and the message says why."""


class FrameBuffer:
    """Accumulates bytes and hands out complete frames (without their newline; empty lines skipped).

    Each byte is scanned for a newline once, however it is dribbled in: `_scanned` remembers how
    far the unfinished tail has been searched. A frame longer than `limit` sets `too_large`; the
    stream cannot be resynchronised after that, so the caller answers and closes.
    """

    __slots__ = ("_buf", "_scanned", "limit", "too_large")

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._scanned = 0  # leading bytes of _buf known to hold no newline
        self.limit = limit
        self.too_large = False

    def feed(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        if len(buf) > self.limit:  # only then can the unfinished frame be too large: look at the new bytes
            nl = buf.find(b"\n", self._scanned)
            if nl < 0:
                self.too_large = True  # no newline anywhere, and already over the limit
                self._scanned = len(buf)
            else:
                self._scanned = nl

    def __len__(self) -> int:
        return len(self._buf)

    def frames(self, max_frames: int = 1 << 30, max_bytes: int = 1 << 62) -> list[bytes]:
        """Complete frames in order, at most `max_frames` and (after the first) at most `max_bytes` in all;
        the rest stays buffered."""
        buf = self._buf
        out: list[bytes] = []
        start = 0
        scan = self._scanned
        while len(out) < max_frames and start < max_bytes:
            nl = buf.find(b"\n", scan)
            if nl < 0:
                scan = len(buf)
                if scan - start > self.limit:
                    self.too_large = True
                break
            if nl - start > self.limit:
                self.too_large = True
                break
            if nl > start:
                out.append(bytes(buf[start:nl]))
            start = scan = nl + 1
        if start:
            del buf[:start]
            scan -= start
        self._scanned = scan
        return out

    def unread(self, frames: list[bytes]) -> None:
        """Put frames taken by `frames()` back in front, in order (a request that must wait its turn)."""
        if frames:
            self._buf[:0] = b"".join(f + b"\n" for f in frames)
            self._scanned = 0

    def pending(self) -> bool:
        """A complete frame is waiting (after `frames()` stopped at `max_frames`). Scans no byte twice."""
        buf = self._buf
        nl = buf.find(b"\n", self._scanned)
        if nl < 0:
            self._scanned = len(buf)
            return False
        self._scanned = nl  # bytes before the newline hold none
        return True
