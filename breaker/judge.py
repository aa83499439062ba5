"""The judge: a child process that reads and keys the large frames, so that no frame's cost holds up the loop.

What a frame costs to read and key grows with its shape, not only its size: a 2.4 MiB frame of deeply
nested lists took the loop 360 ms (every bracket is an object to build), a file of text of the same size
3 ms. Frames of `JUDGE_FROM` bytes or more (a harness's big file writes, and anything hostile) are read
here instead: the judge process decodes the frame, makes the canonical bytes of the call's key and its
preview, and hands back the request without its args. The guard's loop only hashes those bytes (a few
milliseconds for the largest frame) and decides as for any call, in the connection's order. Small frames
never come here: their reading is cheap, and the loop's turns are bounded in bytes too
(breaker/session.py).

The guard sends the judge one frame at a time, cheapest first (by a count of its brackets and its size,
which costs a memchr-like scan), so a frame that costs seconds delays the frames waiting behind it by
at most one frame's time: an honest agent's file write is not starved by a sender of pathological
frames. A frame the judge cannot read within `JUDGE_LIMIT` seconds, or that ends two judge processes in
a row, is answered with the error `unjudgeable`; every client then asks again with its args marked
unserializable, so the call is still counted. The judge is started on the first large frame and again after it dies.

Run as `python -P -m breaker.judge` (never the current directory on its path); it reads requests on
stdin and writes answers on stdout, each a few length-prefixed parts, and exits at end of input.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import os
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any

import orjson

from breaker.keys import key_bytes, preview, strip_ignored
from breaker.protocol import Check, ErrorReply, ProtocolError, Result, decode_request, encode_frame

__all__ = ["JUDGE_FROM", "JUDGE_LIMIT", "Judge", "JudgeAnswer", "judge_frame"]

log = logging.getLogger("cbconsole.guard")

JUDGE_FROM = 16 * 1024  # frames this long or longer are read by the judge (the loop's worst case: ~5 ms each)
JUDGE_LIMIT = 5.0  # seconds the judge may spend on one frame before it is killed and the frame is unjudgeable
_LEN = struct.Struct("<I")
_ID = re.compile(rb'"id"\s*:\s*')


@dataclass(frozen=True, slots=True)
class JudgeAnswer:
    """What the judge made of a frame: a reply to send as is (`reply`, an error), or the request without
    its args (`request`, a frame) with, when its args were keyed (`keyed`), their canonical bytes
    (`key`: None = unjudgeable) and their preview."""

    reply: bytes | None = None
    request: bytes = b""
    keyed: bool = False
    key: bytes | None = None
    preview: str = ""


def judge_frame(frame: bytes, ignore: frozenset[str]) -> JudgeAnswer:
    """Read one frame as the guard would, and key its args. Pure: the judge process's work, and the
    loop's own when there is no judge."""
    try:
        req = decode_request(frame)
    except ProtocolError as exc:
        return JudgeAnswer(reply=ErrorReply(exc.code, exc.message).encode(exc.request_id))
    body = req.to_json()
    keyed = isinstance(req, Check) or (isinstance(req, Result) and req.call_id is None and req.tool is not None)
    if not keyed:
        return JudgeAnswer(request=encode_frame(body).rstrip(b"\n"))
    tool: str = req.tool or ""  # type: ignore[attr-defined]
    args = req.args  # type: ignore[attr-defined]
    unserializable = isinstance(req, Check) and req.args_unserializable
    body["args"] = None
    data = None if unserializable else key_bytes(tool, args, ignore)
    shown = "" if unserializable else preview(tool, strip_ignored(args, ignore))
    return JudgeAnswer(request=encode_frame(body).rstrip(b"\n"), keyed=True, key=data, preview=shown)


def unjudgeable(frame: bytes, why: str) -> JudgeAnswer:
    """The answer for a frame the judge could not read: the error `unjudgeable`, with the frame's id if
    it stands near the front as every client writes it (a client then asks again, args unserializable)."""
    rid: Any = None
    found = _ID.search(frame, 0, 256)
    if found is not None:
        with contextlib.suppress(ValueError):
            rid, _end = json.JSONDecoder().raw_decode(frame[found.end() : found.end() + 128].decode("utf-8", "replace"))
            if isinstance(rid, (dict, list)):
                rid = None
    message = f"the guard could not read this frame's args ({why}); ask again with args_unserializable: true"
    return JudgeAnswer(reply=ErrorReply("unjudgeable", message).encode(rid))


def cost(frame: bytes) -> int:
    """What a frame is likely to cost the judge: its bytes, plus 64 for each bracket (each an object to build)."""
    return len(frame) + 64 * (frame.count(b"[") + frame.count(b"{"))


# -- the process ------------------------------------------------------------------------------------


def _encode_answer(answer: JudgeAnswer) -> bytes:
    shown = answer.preview.encode("utf-8", "surrogatepass")
    parts = [
        b"E" if answer.reply is not None else (b"K" if answer.keyed else b"R"),
        _LEN.pack(len(answer.reply if answer.reply is not None else answer.request)),
        answer.reply if answer.reply is not None else answer.request,
        b"\x01" if answer.key is not None else b"\x00",
        _LEN.pack(len(answer.key or b"")),
        answer.key or b"",
        _LEN.pack(len(shown)),
        shown,
    ]
    return b"".join(parts)


async def _read_answer(reader: asyncio.StreamReader) -> JudgeAnswer:
    kind = await reader.readexactly(1)
    (n,) = _LEN.unpack(await reader.readexactly(4))
    payload = await reader.readexactly(n)
    has_key = await reader.readexactly(1) == b"\x01"
    (n,) = _LEN.unpack(await reader.readexactly(4))
    key = await reader.readexactly(n)
    (n,) = _LEN.unpack(await reader.readexactly(4))
    shown = (await reader.readexactly(n)).decode("utf-8", "surrogatepass")
    if kind == b"E":
        return JudgeAnswer(reply=payload)
    return JudgeAnswer(request=payload, keyed=kind == b"K", key=key if has_key else None, preview=shown)


def main() -> int:
    """The judge process: requests on stdin (the ignored arg names as JSON, then the frame), answers on stdout."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(b"+")  # ready: its imports are done, so that no frame's time limit pays for them
    stdout.flush()
    ignores: dict[bytes, frozenset[str]] = {}
    while True:
        head = stdin.read(4)
        if len(head) < 4:
            return 0
        names = stdin.read(_LEN.unpack(head)[0])
        (n,) = _LEN.unpack(stdin.read(4))
        frame = stdin.read(n)
        if len(frame) < n:
            return 0
        ignore = ignores.get(names)
        if ignore is None:
            ignores.clear()
            ignore = ignores[names] = frozenset(orjson.loads(names))
        try:
            answer = judge_frame(frame, ignore)
        except (MemoryError, RecursionError) as exc:
            answer = unjudgeable(frame, type(exc).__name__)
        stdout.write(_encode_answer(answer))
        stdout.flush()


# -- the guard's side -------------------------------------------------------------------------------


class Judge:
    """The guard's handle on its judge process: `await ask(frame, ignore)` answers in cost order."""

    def __init__(self, limit: float = JUDGE_LIMIT, command: tuple[str, ...] | None = None) -> None:
        """`limit`: seconds per frame. `command`: the judge process's argv (default: this module, run by
        this interpreter with `-P`); another program must speak the same protocol (see `main`)."""
        self.limit = limit
        self.command = command or (sys.executable, "-P", "-m", "breaker.judge")
        self.killed = 0  # frames the judge could not read within the limit (or died on)
        self.pid: int | None = None
        self.busy = False  # a frame is in the judge process's hands (written, its answer not yet read)
        self._proc: asyncio.subprocess.Process | None = None
        self._heap: list[tuple[int, int, bytes, bytes, asyncio.Future[JudgeAnswer]]] = []
        self._seq = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def ask(self, frame: bytes, ignore: tuple[str, ...]) -> JudgeAnswer:
        if self._closed:
            raise RuntimeError("the judge is closed")
        future: asyncio.Future[JudgeAnswer] = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._heap, (cost(frame), self._seq, frame, orjson.dumps(sorted(ignore)), future))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="judge")
        return await future

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._stop_process()
        for *_rest, future in self._heap:
            if not future.done():
                future.cancel()
        self._heap.clear()

    async def _run(self) -> None:
        while True:
            while not self._heap:
                self._wake.clear()
                await self._wake.wait()
            _cost, _seq, frame, names, future = heapq.heappop(self._heap)
            if future.done():
                continue
            # A judge that ended (killed between frames, or by this one) gets one more try with a new judge:
            # only a frame that ends two judges is unjudgeable for it.
            for tries_left in (1, 0):
                try:
                    if self._proc is None or self._proc.returncode is not None:
                        self._proc = await self._start()  # its start does not count against the frame's limit
                    answer = await asyncio.wait_for(self._judge(frame, names), self.limit)
                except asyncio.CancelledError:
                    if not future.done():
                        future.cancel()
                    raise
                except TimeoutError:
                    answer = self._failed(frame, f"more than {self.limit:g} s")
                except (OSError, asyncio.IncompleteReadError, ValueError, struct.error):
                    if tries_left:
                        self._ended()
                        continue
                    answer = self._failed(frame, "the judge process ended twice on it")
                break
            if not future.done():
                future.set_result(answer)

    def _ended(self) -> None:
        log.warning("the judge process ended (pid %s); a new one takes the frame", self.pid)
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def _failed(self, frame: bytes, why: str) -> JudgeAnswer:
        self.killed += 1
        log.warning("a %d-byte frame was not judged (%s): answered unjudgeable; the judge restarts", len(frame), why)
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        return unjudgeable(frame, why)

    async def _judge(self, frame: bytes, names: bytes) -> JudgeAnswer:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"".join((_LEN.pack(len(names)), names, _LEN.pack(len(frame)), frame)))
        await proc.stdin.drain()
        self.busy = True
        try:
            return await _read_answer(proc.stdout)
        finally:
            self.busy = False

    async def _start(self) -> asyncio.subprocess.Process:
        # -P: never the current directory on its path (an agent may have written an orjson.py there);
        # the root as its directory, and the guard's environment (its PYTHONPATH finds this package).
        proc = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd="/",
            limit=2**32,
        )
        assert proc.stdout is not None
        try:
            ready = await asyncio.wait_for(proc.stdout.readexactly(1), 60)
        except (TimeoutError, asyncio.IncompleteReadError):
            ready = b""
        if ready != b"+":
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise OSError("the judge process did not start")
        self.pid = proc.pid
        log.info("judge process started (pid %d) for frames of %d bytes or more", proc.pid, JUDGE_FROM)
        return proc

    async def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 2)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        sys.exit(main())
    os._exit(0)
