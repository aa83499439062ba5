"""The client library: ask the guard over its socket (sync or asyncio), with a stated failure mode.

Both clients are thin: the protocol (framing, matching replies to requests, the pipelined hello) is
`breaker.protocol.ClientSession`; here is only the socket. Before sending anything they check the
socket as ssh-agent does (`breaker.paths.check_socket`: its directory and the socket are ours, no one
else can write there; then the listener's uid from the kernel): a socket that fails the check is
never spoken to, and counts as "guard unavailable".

Fail open by default: when the guard cannot be asked within the timeout, the call is allowed
(`Decision.fallback` is True), the miss is counted and logged once per outage. `fail_closed=True`
denies instead, with kind "unavailable". When the guard answers with an error (it could not judge
the call), the same failure mode applies, logged as what it is. Both reconnect by themselves.
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
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from breaker.keys import result_digest
from breaker.paths import check_peer, check_socket, default_operator_socket_path, default_socket_path
from breaker.protocol import (
    ClientSession,
    Decision,
    ErrorReply,
    Event,
    Hello,
    InterruptEvent,
    ProtocolError,
)
from breaker.wire import GuardUnavailable

__all__ = [
    "AsyncGuardClient",
    "Decision",
    "GuardClient",
    "GuardError",
    "GuardUnavailable",
    "Reported",
    "operator_client",
    "result_digest",
]

log = logging.getLogger("cbconsole.client")

DEFAULT_TIMEOUT = 0.5  # seconds a tool call may wait for the guard before the failure mode applies
RETRY_AFTER_TIMEOUT = 1.0  # after a timeout (a hung guard), skip asking for this long: fail fast instead
DEFERRED_MAX = 64  # requests sent without waiting that wait for the next request to go with it (see `_post`)


class GuardError(RuntimeError):
    """The guard answered with an error."""

    def __init__(self, code: str, message: str, reply: dict[str, Any] | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reply = reply or {}


class Reported(NamedTuple):
    """The guard's answer to a reported result: whether it found the call, and the warning the
    call's check gave ("" if none) for a harness that shows the model a warning with the result."""

    matched: bool
    warning: str


def _result_fields(
    agent: str, result: Any, digest: str | None, call_id: str | int | None, tool: str | None, args: Any
) -> dict[str, Any]:
    fields: dict[str, Any] = {"agent": agent, "digest": digest if digest is not None else result_digest(result)}
    if call_id is not None:
        fields["call_id"] = call_id
    if tool is not None:
        fields["tool"] = tool
        try:
            orjson.dumps(args)
            fields["args"] = args
        except TypeError:
            fields["args"] = None
    return fields


def _reported(msg: dict[str, Any]) -> Reported:
    warning = msg.get("warning")
    return Reported(msg.get("matched") is True, warning if isinstance(warning, str) else "")


def _check_frame(rid: int, fields: dict[str, Any]) -> dict[str, Any]:
    """A check request. Args JSON cannot carry are sent as unjudgeable (the engine allows and counts
    them, matching nothing), never dropped and never a client-side error."""
    frame = {"op": "check", "id": rid, **fields}
    try:
        orjson.dumps(frame.get("args"))
    except TypeError:
        frame.update(args=None, args_unserializable=True)
    return frame


def _reply(msg: dict[str, Any]) -> dict[str, Any]:
    """The reply, or GuardError if the guard answered with an error."""
    error = ErrorReply.from_json(msg)
    if error is not None:
        raise GuardError(error.code, error.message, msg)
    return msg


def _decision(msg: dict[str, Any]) -> Decision:
    decision = Decision.from_json(_reply(msg))
    if decision is None:
        raise GuardError("bad_reply", f"unexpected reply {msg!r:.200}", msg)
    return decision


class _Health:
    """Counts misses and logs one line when the guard goes away and one when it is back."""

    def __init__(self, path: Path, fail_closed: bool) -> None:
        self.path = path
        self.fail_closed = fail_closed
        self.last_error = ""
        self.misses = 0
        self.down_since: float | None = None
        self.retry_at = 0.0

    def decide(self, exc: GuardUnavailable | GuardError) -> Decision:
        """The failure mode's decision for a call the guard did not judge; one log line per outage."""
        self.misses += 1
        mode = "denying tool calls (fail closed)" if self.fail_closed else "allowing tool calls (fail open)"
        if isinstance(exc, GuardError):
            if str(exc) != self.last_error:  # a harness sending a bad frame would say so on every call
                self.last_error = str(exc)
                log.warning("the guard at %s answered an error, not a decision (%s): %s", self.path, exc, mode)
            text = f"Circuit breaker could not judge this call (the guard answered {exc}); it is denied."
        else:
            if self.down_since is None:
                self.down_since = time.monotonic()
                log.warning("guard unavailable at %s (%s): %s until it is back", self.path, exc, mode)
            text = f"Circuit breaker unavailable ({exc}); tool calls are denied until it is back."
        if self.fail_closed:
            return Decision(False, "unavailable", text, fallback=True)
        return Decision(True, fallback=True)

    def ok(self) -> None:
        if self.down_since is not None:
            log.warning(
                "circuit breaker back at %s after %.1f s; %d call(s) were not checked",
                self.path,
                time.monotonic() - self.down_since,
                self.misses,
            )
            self.down_since = None


def _connect_checked(path: Path, timeout: float) -> socket.socket:
    """A connected socket to `path`, after checking who owns it (and, after connecting, who listens)."""
    why = check_socket(path)
    if why is not None:
        raise GuardUnavailable(why)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                sock.connect(str(path))
                break
            except BlockingIOError:  # the listen backlog is full for a moment (a burst of hooks)
                if time.monotonic() >= deadline:
                    raise TimeoutError from None
                time.sleep(0.001)
        why = check_peer(sock, path)
        if why is not None:
            raise GuardUnavailable(why)
    except BaseException:
        sock.close()
        raise
    return sock


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
        role: str = "harness",
        on_interrupt: Callable[[str, str], Any] | None = None,
        hello: bool = True,
    ) -> None:
        self.path = Path(socket_path) if socket_path is not None else default_socket_path()
        self.timeout = timeout
        self.fail_closed = fail_closed
        self.harness = harness
        self.version = version
        self.role = role
        self.on_interrupt = on_interrupt
        self.send_hello = hello
        self._health = _Health(self.path, fail_closed)
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)  # shared by every connection's session: an id is never reused
        self._session = ClientSession(ids=self._ids)
        self._lock = threading.Lock()
        self._deferred: list[dict[str, Any]] = []  # see `_post`

    @property
    def misses(self) -> int:
        """Calls the guard did not judge (the failure mode decided them)."""
        return self._health.misses

    @property
    def server_info(self) -> dict[str, Any]:
        """The guard's answer to the handshake (empty until the first reply came)."""
        return self._session.server_info

    # -- public API -----------------------------------------------------------------------------

    def check(self, agent: str, tool: str, args: Any, **extra: Any) -> Decision:
        """Ask before a tool call. Never raises when the guard is unavailable: the failure mode answers."""
        try:
            with self._lock:
                reply = self._ask(lambda rid: _check_frame(rid, {"agent": agent, "tool": tool, "args": args, **extra}))
            return _decision(reply)
        except (GuardUnavailable, GuardError) as exc:
            return self._health.decide(exc)

    def result(
        self,
        agent: str,
        result: Any = None,
        *,
        digest: str | None = None,
        call_id: str | int | None = None,
        tool: str | None = None,
        args: Any = None,
        wait: bool = True,
    ) -> Reported:
        """Report a call's result (after it ran): its `digest` (or the `result` itself, digested
        here with `result_digest`; only the digest is sent). Name the call by the `call_id` given
        to `check`, else by its `tool` and `args`. A repeat whose result changed counts as progress
        under rules with `progress`. Never raises: when the guard cannot be told, nothing happens
        (the call counts as one whose result never came). `wait=False` sends it and returns at once
        (`Reported(False, "")`): it goes with this client's next request, in the same write, so the guard
        has it before that request and the call costs neither a round trip nor a write of its own."""
        fields = _result_fields(agent, result, digest, call_id, tool, args)
        if not wait:
            self._post({"op": "result", **fields})
            return Reported(False, "")
        try:
            return _reported(self.request("result", **fields))
        except (GuardUnavailable, GuardError):
            return Reported(False, "")

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
            return _reply(self._ask(lambda rid: {"op": op, "id": rid, **fields}))

    def _post(self, frame: dict[str, Any]) -> None:
        """A request sent without waiting for its reply (read, and dropped, with a later one). It goes with the
        next request, in the same write: one wakeup of the guard per tool call rather than two. Sent at once
        when DEFERRED_MAX wait already, and on `close`."""
        with self._lock:
            if time.monotonic() < self._health.retry_at:
                return
            self._deferred.append(frame)
            if len(self._deferred) >= DEFERRED_MAX:
                self._send_deferred()

    def _send_deferred(self) -> None:
        try:
            sock = self._connect()
            sock.sendall(self._take_deferred())
        except (GuardUnavailable, OSError):
            self._drop()

    def _take_deferred(self) -> bytes:
        """The waiting requests, encoded on the current connection (ids from its session), and no longer waiting."""
        frames, self._deferred = self._deferred, []
        session = self._session
        return b"".join(session.send({**frame, "id": session.next_id()}) for frame in frames)

    def poll_events(self) -> int:
        """Read pushed events (interrupts) without blocking; returns how many were handled."""
        with self._lock:
            sock = self._sock
            if sock is None:
                return 0
            data = b""
            try:
                sock.setblocking(False)
                try:
                    while chunk := sock.recv(65536):
                        data += chunk
                    self._drop()  # an empty read: the guard closed
                except (BlockingIOError, InterruptedError):
                    pass
                finally:
                    if self._sock is not None:
                        self._sock.settimeout(self.timeout)
            except OSError:
                self._drop()
            try:
                items = self._session.receive(data)
            except ProtocolError:
                self._drop()
                return 0
            return sum(self._event(item) for item in items if not isinstance(item, tuple))

    def close(self) -> None:
        with self._lock:
            if self._deferred and self._sock is not None:
                self._send_deferred()  # what was posted still reaches the guard
            self._drop()

    def __enter__(self) -> GuardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _ask(self, build: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
        if time.monotonic() < self._health.retry_at:
            raise GuardUnavailable("the guard timed out recently; not asking again yet")
        deadline = time.monotonic() + self.timeout
        try:
            sock = self._connect()
            deferred = self._take_deferred() if self._deferred else b""
            rid = self._session.next_id()
            sock.sendall(deferred + self._session.send(build(rid)))
            reply = self._read(sock, rid, deadline)
        except TimeoutError:
            self._drop()
            self._health.retry_at = time.monotonic() + RETRY_AFTER_TIMEOUT
            raise GuardUnavailable(f"no answer within {self.timeout:g} s") from None
        except GuardUnavailable:
            self._drop()
            raise
        except (OSError, ProtocolError) as exc:
            self._drop()
            raise GuardUnavailable(getattr(exc, "strerror", None) or str(exc)) from None
        self._health.ok()
        return reply

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        self._sock = _connect_checked(self.path, self.timeout)
        hello = Hello(0, self.harness, self.version, os.getpid(), self.role) if self.send_hello else None
        self._session = ClientSession(hello, ids=self._ids)
        return self._sock

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None

    def _read(self, sock: socket.socket, rid: int, deadline: float) -> dict[str, Any]:
        """Read until the reply to `rid`; events on the way are handled."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                raise ConnectionResetError(0, "the guard closed the connection")
            found = None
            for item in self._session.receive(data):
                if isinstance(item, tuple):
                    if item[0] == rid:
                        found = item[1]
                else:
                    self._event(item)
            if found is not None:
                return found

    def _event(self, event: Event) -> int:
        if isinstance(event, InterruptEvent) and self.on_interrupt is not None:
            try:
                self.on_interrupt(event.agent, event.reason)
            except Exception:
                log.exception("on_interrupt callback failed")
        return 1


class AsyncGuardClient:
    """asyncio client: concurrent requests on one connection, pushed events delivered as they arrive.

    `on_interrupt(agent, reason)` and `on_event(event)` (an InterruptEvent, a StateFrame or a CallsEvent) may be
    plain functions or coroutines.
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
        on_interrupt: Callable[[str, str], Any] | None = None,
        on_event: Callable[[Event], Any] | None = None,
        max_frame: int = 64 * 1024 * 1024,
    ) -> None:
        self.path = Path(socket_path) if socket_path is not None else default_socket_path()
        self.timeout = timeout
        self.fail_closed = fail_closed
        self.harness = harness
        self.version = version
        self.role = role
        self.on_interrupt = on_interrupt
        self.on_event = on_event
        self.max_frame = max_frame
        self._health = _Health(self.path, fail_closed)
        self._ids = itertools.count(1)  # shared by every connection's session: an id is never reused
        self._session = ClientSession(ids=self._ids)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._deferred: list[dict[str, Any]] = []  # see `_post`
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None

    @property
    def misses(self) -> int:
        return self._health.misses

    @property
    def connected(self) -> bool:
        return self._writer is not None

    @property
    def server_info(self) -> dict[str, Any]:
        return self._session.server_info

    async def check(self, agent: str, tool: str, args: Any, **extra: Any) -> Decision:
        try:
            frame = _check_frame(next(self._ids), {"agent": agent, "tool": tool, "args": args, **extra})
            return _decision(await self._ask(frame, self.timeout))
        except (GuardUnavailable, GuardError) as exc:
            return self._health.decide(exc)

    async def result(
        self,
        agent: str,
        result: Any = None,
        *,
        digest: str | None = None,
        call_id: str | int | None = None,
        tool: str | None = None,
        args: Any = None,
        wait: bool = True,
    ) -> Reported:
        """As GuardClient.result."""
        fields = _result_fields(agent, result, digest, call_id, tool, args)
        if not wait:
            self._post({"op": "result", **fields})
            return Reported(False, "")
        try:
            return _reported(await self.request("result", **fields))
        except (GuardUnavailable, GuardError):
            return Reported(False, "")

    async def agent_end(self, agent: str) -> bool:
        try:
            await self.request("agent_end", agent=agent)
        except (GuardUnavailable, GuardError):
            return False
        return True

    async def request(self, op: str, *, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """One request/reply. Raises GuardUnavailable or GuardError."""
        frame = {"op": op, "id": next(self._ids), **fields}
        return _reply(await self._ask(frame, self.timeout if timeout is None else timeout))

    async def _ask(self, frame: dict[str, Any], limit: float) -> dict[str, Any]:
        if time.monotonic() < self._health.retry_at:
            raise GuardUnavailable("the guard timed out recently; not asking again yet")
        rid = frame["id"]
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            async with asyncio.timeout(limit):
                writer = await self._connect()
                writer.write(
                    self._take_deferred() + self._session.send(frame) if self._deferred else self._session.send(frame)
                )
                reply = await future
        except TimeoutError:
            self._health.retry_at = time.monotonic() + RETRY_AFTER_TIMEOUT
            await self._drop()
            raise GuardUnavailable(f"no answer within {limit:g} s") from None
        except GuardUnavailable:
            raise
        except OSError as exc:
            await self._drop()
            raise GuardUnavailable(exc.strerror or str(exc)) from None
        finally:
            self._pending.pop(rid, None)
        self._health.ok()
        return reply

    def _post(self, frame: dict[str, Any]) -> None:
        """A request sent without waiting for its reply (which matches nothing and is dropped): it goes with
        the next request, in the same write (as GuardClient._post). Past DEFERRED_MAX waiting, and on `close`,
        they go on a connection already open."""
        if time.monotonic() < self._health.retry_at:
            return
        self._deferred.append(frame)
        if len(self._deferred) >= DEFERRED_MAX and self._writer is not None:
            self._writer.write(self._take_deferred())

    def _take_deferred(self) -> bytes:
        frames, self._deferred = self._deferred, []
        return b"".join(self._session.send({**frame, "id": next(self._ids)}) for frame in frames)

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
            why = check_socket(self.path)
            if why is not None:
                raise GuardUnavailable(why)
            reader, writer = await asyncio.open_unix_connection(str(self.path), limit=self.max_frame)
            why = check_peer(writer.get_extra_info("socket"), self.path)
            if why is not None:
                writer.close()
                raise GuardUnavailable(why)
            hello = Hello(0, self.harness, self.version, os.getpid(), self.role)
            self._session = ClientSession(hello, self.max_frame, ids=self._ids)
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read(reader, writer), name="guard-client-reader")
            return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = self._session
        try:
            while data := await reader.read(65536):
                for item in session.receive(data):
                    if isinstance(item, tuple):
                        future = self._pending.get(item[0])
                        if future is not None and not future.done():
                            future.set_result(item[1])
                    else:
                        await self._dispatch(item)
        except (OSError, ProtocolError) as exc:
            log.debug("guard connection lost: %s", exc)
        finally:
            if self._writer is writer:
                self._writer = None
            for f in self._pending.values():
                if not f.done():
                    f.set_exception(ConnectionResetError(0, "the guard closed the connection"))
            writer.close()

    async def _dispatch(self, event: Event) -> None:
        try:
            if isinstance(event, InterruptEvent) and self.on_interrupt is not None:
                result = self.on_interrupt(event.agent, event.reason)
                if isinstance(result, Awaitable):
                    await result
            if self.on_event is not None:
                result = self.on_event(event)
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
        if self._deferred and self._writer is not None:
            with contextlib.suppress(OSError):
                self._writer.write(self._take_deferred())  # what was posted still reaches the guard
                await self._writer.drain()
        await self._drop()

    async def __aenter__(self) -> AsyncGuardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def operator_client(
    harness_socket: str | os.PathLike[str] | None = None,
    operator_socket: str | os.PathLike[str] | None = None,
    **options: Any,
) -> AsyncGuardClient:
    """An asyncio client on the operator's socket (beside `harness_socket`'s directory by default),
    as a console: it is not counted among the harnesses."""
    path = Path(operator_socket) if operator_socket is not None else default_operator_socket_path(harness_socket)
    options.setdefault("role", "console")
    return AsyncGuardClient(path, **options)
