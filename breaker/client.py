"""The client library: ask the guard over its socket (sync or asyncio), with a stated failure mode.

Fail open by default: when the guard cannot be asked within the timeout, the call is allowed
(`Decision.fallback` is True), the miss is counted and logged once per outage. `fail_closed=True`
denies instead, with kind "unavailable". Both reconnect by themselves when the guard comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from breaker.paths import default_socket_path
from breaker.protocol import PROTOCOL_VERSION

__all__ = ["AsyncGuardClient", "Decision", "GuardClient", "GuardError", "GuardUnavailable"]

log = logging.getLogger("cbconsole.client")

DEFAULT_TIMEOUT = 0.5  # seconds a tool call may wait for the guard before the failure mode applies
RETRY_AFTER_TIMEOUT = 1.0  # after a timeout (a hung guard), skip asking for this long: fail fast instead


class GuardUnavailable(ConnectionError):
    """The guard could not be asked (no socket, refused, timed out, closed mid-request)."""


class GuardError(RuntimeError):
    """The guard answered with an error."""

    def __init__(self, code: str, message: str, reply: dict[str, Any] | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reply = reply or {}


@dataclass(frozen=True, slots=True)
class Decision:
    """The guard's answer for one tool call (or the failure mode's, when `fallback` is True)."""

    allowed: bool
    kind: str | None = None
    reason: str = ""
    count: int = 0
    limit: int = 0
    fallback: bool = False

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> Decision:
        if reply.get("decision") == "allow":
            return _ALLOW
        if reply.get("decision") == "deny":
            return cls(
                False, reply.get("kind"), reply.get("reason") or "", reply.get("count") or 0, reply.get("limit") or 0
            )
        error = reply.get("error") or {}
        raise GuardError(error.get("code", "bad_reply"), error.get("message", f"unexpected reply {reply!r}"), reply)


_ALLOW = Decision(True)


def _frame(op: str, rid: int, fields: dict[str, Any]) -> bytes:
    """Encode a request. Check args that JSON cannot carry are sent as unjudgeable (the engine allows
    and counts them, matching nothing), never dropped and never a client-side error."""
    try:
        return orjson.dumps({"op": op, "id": rid, **fields}) + b"\n"
    except TypeError as exc:
        if op != "check" or "args" not in fields:
            raise GuardError("bad_request", f"cannot serialize the request: {exc}") from None
        try:
            return orjson.dumps({"op": op, "id": rid, **fields, "args": None, "args_unserializable": True}) + b"\n"
        except TypeError as exc2:
            raise GuardError("bad_request", f"cannot serialize the request: {exc2}") from None


def _hello_frame(rid: int, harness: str, version: str, capabilities: list[str], role: str) -> bytes:
    hello = {
        "op": "hello",
        "id": rid,
        "harness": harness,
        "version": version,
        "pid": os.getpid(),
        "capabilities": capabilities,
        "role": role,
        "protocol": PROTOCOL_VERSION,
    }
    return orjson.dumps(hello) + b"\n"


def _raise_for_error(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply, or GuardError if the guard answered with an error."""
    if "error" in reply:
        error = reply["error"] if isinstance(reply["error"], dict) else {}
        raise GuardError(error.get("code", "error"), error.get("message", ""), reply)
    return reply


def _unavailable_decision(fail_closed: bool, why: str) -> Decision:
    if fail_closed:
        return Decision(
            False,
            "unavailable",
            f"Circuit breaker unreachable ({why}); tool calls are denied until it is back.",
            fallback=True,
        )
    return Decision(True, None, "", fallback=True)


class _Health:
    """Counts misses and logs one line when the guard goes away and one when it is back."""

    def __init__(self, path: Path, fail_closed: bool) -> None:
        self.path = path
        self.fail_closed = fail_closed
        self.misses = 0
        self.down_since: float | None = None
        self.retry_at = 0.0

    def miss(self, why: str) -> None:
        self.misses += 1
        if self.down_since is None:
            self.down_since = time.monotonic()
            mode = "denying tool calls (fail closed)" if self.fail_closed else "allowing tool calls (fail open)"
            log.warning("circuit breaker unreachable at %s (%s): %s until it is back", self.path, why, mode)

    def ok(self) -> None:
        if self.down_since is not None:
            log.warning(
                "circuit breaker back at %s after %.1f s; %d call(s) were not checked",
                self.path,
                time.monotonic() - self.down_since,
                self.misses,
            )
            self.down_since = None


class GuardClient:
    """Blocking client, safe to share between threads (one request at a time on one connection).

    `on_interrupt(agent, reason)` is called (in the calling thread) when the guard pushes an
    operator interrupt; it is read with the next reply, or by `poll_events()`.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        fail_closed: bool = False,
        harness: str = "python",
        version: str = "",
        capabilities: tuple[str, ...] = ("interrupt",),
        on_interrupt: Callable[[str, str], Any] | None = None,
        hello: bool = True,
    ) -> None:
        self.path = Path(socket_path) if socket_path is not None else default_socket_path()
        self.timeout = timeout
        self.fail_closed = fail_closed
        self.harness = harness
        self.version = version
        self.capabilities = list(capabilities)
        self.on_interrupt = on_interrupt
        self.send_hello = hello
        self.server_info: dict[str, Any] = {}
        self._health = _Health(self.path, fail_closed)
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._ids = itertools.count(1)
        self._hello_id: int | None = None
        self._lock = threading.Lock()

    @property
    def misses(self) -> int:
        """Calls that could not be checked (the failure mode decided them)."""
        return self._health.misses

    # -- public API -----------------------------------------------------------------------------

    def check(self, agent: str, tool: str, args: Any, **extra: Any) -> Decision:
        """Ask before a tool call. Never raises for an unreachable guard: the failure mode answers."""
        try:
            return Decision.from_reply(self.request("check", agent=agent, tool=tool, args=args, **extra))
        except (GuardUnavailable, GuardError) as exc:
            self._health.miss(str(exc))
            return _unavailable_decision(self.fail_closed, str(exc))

    def agent_end(self, agent: str) -> bool:
        """Tell the guard an agent is gone (frees its state). False if the guard could not be told."""
        try:
            self.request("agent_end", agent=agent)
        except (GuardUnavailable, GuardError):
            return False
        return True

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return its reply. Raises GuardUnavailable or GuardError."""
        with self._lock:
            if time.monotonic() < self._health.retry_at:
                raise GuardUnavailable("the guard timed out recently; not asking again yet")
            rid = next(self._ids)
            frame = _frame(op, rid, fields)
            try:
                sock = self._connect()
                sock.sendall(frame)
                reply = self._read_reply(sock, rid)
            except TimeoutError:
                self._drop()
                self._health.retry_at = time.monotonic() + RETRY_AFTER_TIMEOUT
                raise GuardUnavailable(f"no answer within {self.timeout:g} s") from None
            except OSError as exc:
                self._drop()
                raise GuardUnavailable(exc.strerror or str(exc)) from None
            self._health.ok()
        return _raise_for_error(reply)

    def poll_events(self) -> int:
        """Read pushed events (interrupts) without blocking; returns how many were handled."""
        with self._lock:
            if self._sock is None:
                return 0
            handled = 0
            try:
                self._sock.setblocking(False)
                try:
                    while True:
                        data = self._sock.recv(65536)
                        if not data:
                            self._drop()
                            break
                        self._buf += data
                except (BlockingIOError, InterruptedError):
                    pass
                finally:
                    if self._sock is not None:
                        self._sock.settimeout(self.timeout)
            except OSError:
                self._drop()
            while self._sock is not None or self._buf:
                frame = self._next_frame()
                if frame is None:
                    break
                msg = orjson.loads(frame)
                if isinstance(msg, dict) and "event" in msg:
                    self._event(msg)
                    handled += 1
            return handled

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self) -> GuardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                try:
                    sock.connect(str(self.path))
                    break
                except BlockingIOError:  # the listen backlog is full for a moment (a burst of hooks)
                    if time.monotonic() >= deadline:
                        raise TimeoutError from None
                    time.sleep(0.001)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._buf.clear()
        if self.send_hello:
            # Pipelined with the first request: the handshake costs no round trip.
            self._hello_id = next(self._ids)
            sock.sendall(_hello_frame(self._hello_id, self.harness, self.version, self.capabilities, "harness"))
        return sock

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        self._buf.clear()

    def _next_frame(self) -> bytes | None:
        nl = self._buf.find(b"\n")
        if nl < 0:
            return None
        frame = bytes(self._buf[:nl])
        del self._buf[: nl + 1]
        return frame

    def _read_reply(self, sock: socket.socket, rid: int) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            frame = self._next_frame()
            while frame is not None:
                msg = orjson.loads(frame)
                if isinstance(msg, dict):
                    if "event" in msg:
                        self._event(msg)
                    elif msg.get("id") == rid:
                        return msg
                    elif msg.get("id") == self._hello_id and self._hello_id is not None:
                        self.server_info = msg
                        self._hello_id = None
                    elif msg.get("id") is None and "error" in msg:
                        return msg  # a connection-level error (e.g. forbidden) answers this request
                frame = self._next_frame()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                raise ConnectionResetError(0, "the guard closed the connection")
            self._buf += data

    def _event(self, msg: dict[str, Any]) -> None:
        if msg.get("event") == "interrupt" and self.on_interrupt is not None:
            try:
                self.on_interrupt(str(msg.get("agent", "")), str(msg.get("reason", "")))
            except Exception:
                log.exception("on_interrupt callback failed")


class AsyncGuardClient:
    """asyncio client: concurrent requests on one connection, pushed events delivered as they arrive.

    `on_interrupt(agent, reason)` and `on_event(msg)` may be plain functions or coroutines.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        fail_closed: bool = False,
        harness: str = "python",
        version: str = "",
        role: str = "harness",
        capabilities: tuple[str, ...] = ("interrupt",),
        on_interrupt: Callable[[str, str], Any] | None = None,
        on_event: Callable[[dict[str, Any]], Any] | None = None,
        max_frame: int = 64 * 1024 * 1024,
    ) -> None:
        self.path = Path(socket_path) if socket_path is not None else default_socket_path()
        self.timeout = timeout
        self.fail_closed = fail_closed
        self.harness = harness
        self.version = version
        self.role = role
        self.capabilities = list(capabilities)
        self.on_interrupt = on_interrupt
        self.on_event = on_event
        self.max_frame = max_frame
        self.server_info: dict[str, Any] = {}
        self._health = _Health(self.path, fail_closed)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None
        self._closed = False

    @property
    def misses(self) -> int:
        return self._health.misses

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def check(self, agent: str, tool: str, args: Any, **extra: Any) -> Decision:
        try:
            return Decision.from_reply(await self.request("check", agent=agent, tool=tool, args=args, **extra))
        except (GuardUnavailable, GuardError) as exc:
            self._health.miss(str(exc))
            return _unavailable_decision(self.fail_closed, str(exc))

    async def agent_end(self, agent: str) -> bool:
        try:
            await self.request("agent_end", agent=agent)
        except (GuardUnavailable, GuardError):
            return False
        return True

    async def request(self, op: str, *, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """One request/reply. Raises GuardUnavailable or GuardError."""
        if time.monotonic() < self._health.retry_at:
            raise GuardUnavailable("the guard timed out recently; not asking again yet")
        rid = next(self._ids)
        frame = _frame(op, rid, fields)
        limit = self.timeout if timeout is None else timeout
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            async with asyncio.timeout(limit):
                writer = await self._connect()
                writer.write(frame)
                reply = await future
        except TimeoutError:
            self._health.retry_at = time.monotonic() + RETRY_AFTER_TIMEOUT
            await self._drop()
            raise GuardUnavailable(f"no answer within {limit:g} s") from None
        except OSError as exc:
            await self._drop()
            raise GuardUnavailable(exc.strerror or str(exc)) from None
        finally:
            self._pending.pop(rid, None)
        self._health.ok()
        return _raise_for_error(reply)

    async def connect(self) -> None:
        """Connect now (requests connect lazily); raises GuardUnavailable."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._connect()
        except (OSError, TimeoutError) as exc:
            raise GuardUnavailable(getattr(exc, "strerror", None) or str(exc) or "timed out") from None

    async def _connect(self) -> asyncio.StreamWriter:
        if self._writer is not None:
            return self._writer
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is not None:
                return self._writer
            reader, writer = await asyncio.open_unix_connection(str(self.path), limit=self.max_frame)
            hello_id = next(self._ids)
            writer.write(_hello_frame(hello_id, self.harness, self.version, self.capabilities, self.role))
            future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self._pending[hello_id] = future
            future.add_done_callback(lambda f: self._hello_done(hello_id, f))
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read(reader, writer), name="guard-client-reader")
            return writer

    def _hello_done(self, hello_id: int, future: asyncio.Future[dict[str, Any]]) -> None:
        self._pending.pop(hello_id, None)
        if not future.cancelled() and future.exception() is None:
            self.server_info = future.result()

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                msg = orjson.loads(line)
                if not isinstance(msg, dict):
                    continue
                if "event" in msg:
                    await self._dispatch(msg)
                    continue
                future = self._pending.get(msg.get("id"))  # type: ignore[arg-type]
                if future is not None and not future.done():
                    future.set_result(msg)
                elif msg.get("id") is None and "error" in msg:
                    for f in self._pending.values():  # a connection-level error answers everyone
                        if not f.done():
                            f.set_result(msg)
        except (OSError, ValueError, orjson.JSONDecodeError) as exc:
            log.debug("guard connection lost: %s", exc)
        finally:
            if self._writer is writer:
                self._writer = None
            for f in self._pending.values():
                if not f.done():
                    f.set_exception(ConnectionResetError(0, "the guard closed the connection"))
            writer.close()

    async def _dispatch(self, msg: dict[str, Any]) -> None:
        try:
            if msg.get("event") == "interrupt" and self.on_interrupt is not None:
                result = self.on_interrupt(str(msg.get("agent", "")), str(msg.get("reason", "")))
                if isinstance(result, Awaitable):
                    await result
            if self.on_event is not None:
                result = self.on_event(msg)
                if isinstance(result, Awaitable):
                    await result
        except Exception:
            log.exception("event callback failed")

    async def _drop(self) -> None:
        writer, self._writer = self._writer, None
        task, self._reader_task = self._reader_task, None
        if writer is not None:
            writer.close()
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def close(self) -> None:
        self._closed = True
        await self._drop()

    async def __aenter__(self) -> AsyncGuardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
