"""A Unix socket in front of a real guard, for the client tests: it passes every frame both ways and
can change one thing on cue — hold back one check's reply, answer one check in the guard's place, or
close its clients' connections as a guard restarting would — and it records the frames that reached
the guard. The guard behind it is the real process; only the path between is the test's.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _id_of(frame: bytes) -> Any:
    try:
        return json.loads(frame).get("id")
    except (ValueError, AttributeError):
        return None


CHECK = b'"op":"check"'
HOOK = b'"op":"hook"'


def is_check(frame: bytes) -> bool:
    return CHECK in frame


@dataclass
class _Pipe:
    """One client connection and the proxy's own connection to the guard for it."""

    client: socket.socket
    guard: socket.socket
    reads: int = 0  # reads from the client so far (a close counts as one)
    spoke: threading.Condition = field(default_factory=threading.Condition)  # notified at each
    held: dict[Any, int] = field(default_factory=dict)  # id of a check whose reply is held -> `reads` then
    closed: bool = False

    def read_once(self) -> None:
        with self.spoke:
            self.reads += 1
            self.spoke.notify_all()

    def wait_past(self, reads: int, timeout: float = 60) -> None:
        """Until the client sent more than it had after `reads` reads, or closed."""
        with self.spoke:
            self.spoke.wait_for(lambda: self.reads > reads or self.closed, timeout)


class GuardProxy:
    """`path` listens; each connection is passed to the guard at `guard_socket`, frame by frame.

    Cues, each for the next check only (or the next frame holding `op`'s bytes): `hold_next_reply()`
    keeps its reply until the client sends more on that connection or closes it; `answer_next(fields)`
    answers it with `fields` (and its id) and never passes it on; `swallow_next()` passes it (and what
    came with it) to the guard, then closes the client's connection without a reply. `drop_all()`
    closes every open connection now. `frames` lists every frame passed to the guard, in order.

    cbhook's `hook` op (its payload, for the guard to read) is answered `unknown_op`, as a guard from before
    the op would, unless `hook_op`: cbhook then reads the payload itself and sends its check, result or
    agent_end as frames the proxy sees and can cue (breaker/hookwire.py runs the same code in the guard).
    """

    def __init__(self, guard_socket: Path, path: Path, *, hook_op: bool = False) -> None:
        self.guard_socket = guard_socket
        self.path = path
        self.hook_op = hook_op
        self.frames: list[bytes] = []
        self.connections = 0
        self._cues: list[tuple[str, Any, bytes]] = []
        self._pipes: list[_Pipe] = []
        self._lock = threading.Lock()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(path))
        self._server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    # -- cues ---------------------------------------------------------------------------------------

    def hold_next_reply(self, op: bytes = CHECK) -> None:
        with self._lock:
            self._cues.append(("hold", None, op))

    def answer_next(self, fields: dict[str, Any], op: bytes = CHECK) -> None:
        with self._lock:
            self._cues.append(("answer", fields, op))

    def swallow_next(self, op: bytes = CHECK) -> None:
        with self._lock:
            self._cues.append(("swallow", None, op))

    def drop_all(self) -> None:
        with self._lock:
            pipes = list(self._pipes)
        for pipe in pipes:
            self._close(pipe)

    def sent(self, marker: bytes) -> int:
        """How many frames passed to the guard contain `marker` (e.g. b'"op":"result"')."""
        with self._lock:
            return sum(marker in f for f in self.frames)

    def close(self) -> None:
        self._server.close()
        self.drop_all()

    # -- the pipes ----------------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            guard = socket.socket(socket.AF_UNIX)
            try:
                guard.connect(str(self.guard_socket))
            except OSError:
                client.close()
                guard.close()
                continue
            pipe = _Pipe(client, guard)
            with self._lock:
                self._pipes.append(pipe)
                self.connections += 1
            threading.Thread(target=self._upstream, args=(pipe,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(pipe,), daemon=True).start()

    def _close(self, pipe: _Pipe) -> None:
        with self._lock:
            pipe.closed = True
            if pipe in self._pipes:
                self._pipes.remove(pipe)
        pipe.read_once()
        for s in (pipe.client, pipe.guard):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _cue(self, frame: bytes) -> tuple[str, Any, bytes] | None:
        """The first cue waiting, if `frame` is what it waits for."""
        with self._lock:
            if self._cues and self._cues[0][2] in frame:
                return self._cues.pop(0)
            return None

    def _batches(self, pipe: _Pipe, sock: socket.socket) -> Iterator[list[bytes]]:
        """The complete frames of each read from `sock` (a read from the client is counted), until it ends."""
        buf = b""
        while True:
            try:
                data = sock.recv(1 << 20)
            except OSError:
                data = b""
            if sock is pipe.client:
                pipe.read_once()
            if not data:
                self._close(pipe)
                return
            *frames, buf = (buf + data).split(b"\n")
            yield frames

    def _upstream(self, pipe: _Pipe) -> None:
        """Client to guard, a frame at a time (a check may be cued)."""
        for frames in self._batches(pipe, pipe.client):
            out, swallow = b"", False
            for frame in frames:
                if not self.hook_op and HOOK in frame[:32]:
                    error = {"code": "unknown_op", "message": "unknown op 'hook' (a guard from before the op)"}
                    self._send(pipe, json.dumps({"id": _id_of(frame), "error": error}).encode() + b"\n")
                    continue
                cue = self._cue(frame)
                if cue is not None and cue[0] == "answer":
                    self._send(pipe, json.dumps({"id": _id_of(frame), **cue[1]}).encode() + b"\n")
                    continue
                if cue is not None and cue[0] == "hold":
                    with pipe.spoke:
                        pipe.held[_id_of(frame)] = pipe.reads
                swallow = swallow or (cue is not None and cue[0] == "swallow")
                with self._lock:
                    self.frames.append(frame)
                out += frame + b"\n"
            if swallow:  # no reply to these frames may reach the client, even one the guard sends before the close
                pipe.closed = True
            try:
                if out:
                    pipe.guard.sendall(out)
            except OSError:
                self._close(pipe)
                return
            if swallow:  # the guard has the frames; the client's connection closes before any reply
                self._close(pipe)
                return

    def _downstream(self, pipe: _Pipe) -> None:
        """Guard to client, a frame at a time (the reply to a held check waits)."""
        for frames in self._batches(pipe, pipe.guard):
            out = b""
            for frame in frames:
                rid = _id_of(frame) if pipe.held else None
                if rid is not None and rid in pipe.held:
                    self._send(pipe, out)
                    out = b""
                    pipe.wait_past(pipe.held.pop(rid))  # the client sent more or closed: it gave up on it
                out += frame + b"\n"
            self._send(pipe, out)

    def _send(self, pipe: _Pipe, data: bytes) -> None:
        if data and not pipe.closed:
            try:
                pipe.client.sendall(data)
            except OSError:
                pass
