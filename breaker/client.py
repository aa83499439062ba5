"""The client library: ask the guard over its socket (sync or asyncio), with a stated failure mode.

Both clients are thin: the protocol (framing, matching replies to requests, the pipelined hello) is
`breaker.protocol.ClientSession`; here is only the socket. Before sending anything they check the
socket as ssh-agent does (`breaker.paths.check_socket`: its directory and the socket are ours, no one
else can write there; then the listener's uid from the kernel): a socket that fails the check is
never spoken to, and counts as "guard unavailable".

Fail open by default: when the guard cannot be asked within the timeout, the call is allowed
(`Decision.fallback` is True), the miss is counted and logged once per outage. `fail_closed=True`
denies instead, with kind "unavailable". Every call is asked about: a timeout never stops the next
call from asking (one slow answer must not become a second of unjudged calls).

Args go exactly as they are (integers of any size included, which orjson alone refuses). Args the
guard cannot be sent, or that it answers with an error, are asked about again as "unjudgeable"
(`args_unserializable`: the guard allows and counts the call, matching nothing), so such a call is
never let through uncounted; only an error to that second ask leaves it to the failure mode.

Both reconnect by themselves. A connection kept from an earlier call that turns out dead (the guard
restarted since: a write refused, or the connection closed before any reply) is replaced and the
request sent once more at once, within the same timeout. The first send cannot have been answered;
if the guard read it before it died, the call may be counted twice, which errs toward stopping a
loop one call early rather than letting a call through unjudged. A result (waited for, or sent with
`wait=False` along with a later request) goes again only when none of the failed write left this
process: one that may have reached the guard is never sent twice (taken twice, it could count a
stall twice).
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
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import orjson

from breaker.keys import result_digest
from breaker.paths import check_peer, check_socket, default_operator_socket_path, default_socket_path
from breaker.protocol import (
    AgentEnd,
    Answer,
    Check,
    ClientSession,
    Decision,
    Done,
    ErrorReply,
    Event,
    Hello,
    HelloReply,
    InterruptEvent,
    ProtocolError,
    Reply,
    Request,
    Result,
)
from breaker.wire import MAX_FRAME, GuardUnavailable

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
OPERATOR_TIMEOUT = 5.0  # seconds an operator request may wait: no tool call waits on it
DEFERRED_MAX = 64  # requests sent without waiting that wait for the next request to go with it (see `_post`)


R = TypeVar("R")


class GuardError(RuntimeError):
    """The guard answered with an error (`error`: the reply, with `problems` for bad_config), or with a reply that
    is not what the request's op answers (code `bad_reply`); or the request cannot be sent (`bad_request`)."""

    def __init__(self, code: str, message: str, error: ErrorReply | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.error = error if error is not None else ErrorReply(code, message)


class Reported(NamedTuple):
    """The guard's answer to a reported result: whether it found the call, and the warning the
    call's check gave ("" if none) for a harness that shows the model a warning with the result."""

    matched: bool
    warning: str


# -- frames, exactly -------------------------------------------------------------------------------

_ORJSON_INTS = (-(2**63), 2**64 - 1)  # the integers orjson writes by itself
_MAX_DEPTH = 255  # orjson's own nesting limit: deeper is not JSON it can write anyway
_UNENCODABLE = (TypeError, ValueError, ArithmeticError, RecursionError)
_IDS = ("agent", "tool", "harness", "parent", "call_id")


def _digits(n: int) -> str:
    """The exact decimal digits of `n`, however large. `str()` refuses integers past
    `sys.get_int_max_str_digits()` (4,300 digits by default; lifting it is process-wide) and takes
    quadratic time; halves split by bits and joined in `decimal`, whose big multiplication is fast,
    take 0.2 s for 850,000 digits."""
    if n.bit_length() <= 2000:  # about 600 digits: under any limit Python allows (640 at the least)
        return str(n)
    if n < 0:
        return "-" + _digits(-n)
    import decimal  # only for a huge integer: no client pays its import otherwise

    ctx = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[decimal.Inexact])
    powers: dict[int, decimal.Decimal] = {}

    def join(m: int, bits: int) -> decimal.Decimal:
        if bits <= 2000:
            return decimal.Decimal(m)
        half = bits >> 1
        power = powers.get(half)
        if power is None:
            power = powers[half] = ctx.power(decimal.Decimal(2), half)
        return ctx.add(ctx.multiply(join(m >> half, bits - half), power), join(m & ((1 << half) - 1), half))

    return format(join(n, n.bit_length()), "f")


def _exact(value: Any, depth: int = 0) -> Any:
    """`value` for orjson, with each integer beyond 64 bits (which orjson refuses) as its exact digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        if _ORJSON_INTS[0] <= value <= _ORJSON_INTS[1]:
            return value
        return orjson.Fragment(_digits(value))
    if isinstance(value, dict | list | tuple) and depth >= _MAX_DEPTH:
        raise TypeError(f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, dict):
        return {k: _exact(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(v, depth + 1) for v in value]
    return value


def _line(frame: dict[str, Any]) -> bytes:
    """`frame` as one line of JSON, integers of any size exactly as they are. Raises one of
    `_UNENCODABLE` for what JSON cannot carry (bytes, sets, a lone surrogate, a cycle)."""
    try:
        return orjson.dumps(frame, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return orjson.dumps(_exact(frame), option=orjson.OPT_APPEND_NEWLINE)  # the rare path


def _encode(request: Request[Any]) -> bytes:
    """`request`'s frame, integers of any size exactly (see `_line`); GuardError if JSON cannot carry it."""
    try:
        return _line(request.to_json())
    except _UNENCODABLE as exc:
        raise GuardError("bad_request", f"the {request.op} request cannot be sent as JSON ({exc})") from None


def _check_frame(check: Check) -> bytes:
    """A check's frame. Args the guard cannot be sent (not JSON, or over its frame limit) are sent as
    unjudgeable (the guard allows and counts the call, matching nothing): never dropped, never a
    client-side error. Ids JSON cannot carry (a lone surrogate) go escaped, as cbhook sends them."""
    line = b""
    if not check.args_unserializable:
        try:
            line = _line(check.to_json())
        except _UNENCODABLE:
            _escape_ids(check)
            with contextlib.suppress(*_UNENCODABLE):
                line = _line(check.to_json())
        if line and len(line) <= MAX_FRAME:
            return line
    check.args, check.args_unserializable = None, True
    _escape_ids(check)
    return _encode(check)


def _escape_ids(check: Check) -> None:
    """An id with a lone surrogate (which UTF-8 cannot carry) as its backslash escape: stable, and readable."""
    for key in _IDS:
        value = getattr(check, key)
        if isinstance(value, str) and not value.isascii():
            setattr(check, key, value.encode("utf-8", "backslashreplace").decode("utf-8"))


def _frame(request: Request[Any]) -> bytes:
    return _check_frame(request) if isinstance(request, Check) else _encode(request)


def _unjudgeable(check: Check) -> Check:
    """The same check asked again as unjudgeable, with a new id."""
    return replace(check, id=None, args=None, args_unserializable=True)


def _result(
    agent: str, result: Any, digest: str | None, call_id: str | int | None, tool: str | None, args: Any
) -> Result:
    request = Result(agent=agent, digest=digest if digest is not None else result_digest(result), call_id=call_id)
    if tool is not None:
        request.tool = tool
        try:
            _line({"args": args})
            request.args = args
        except _UNENCODABLE:
            pass  # its check went as unjudgeable: nothing could match it anyway
    return request


def _encoded(session: ClientSession, requests: list[Request[Any]]) -> bytes:
    """Posted requests, each with a new id from `session` (see `_post`)."""
    out = []
    for request in requests:
        request.id = session.next_id()
        with contextlib.suppress(GuardError):  # its fields were checked when it was posted
            out.append(session.send(request, _encode(request)))
    return b"".join(out)


def _reported(reply: Done) -> Reported:
    return Reported(reply.matched is True, reply.warning or "")


def _answered(reply: Reply | Decision) -> Any:
    """The reply, or GuardError if the guard answered with an error (or not with this op's reply)."""
    if isinstance(reply, ErrorReply):
        raise GuardError(reply.code, reply.message, reply)
    return reply


def _closes(reply: Reply | Decision) -> bool:
    """The reply is an error after which the guard closes the connection (`frame_too_large`, `busy`)."""
    return isinstance(reply, ErrorReply) and reply.closes


class _Stale(Exception):
    """A connection kept from an earlier call turned out dead before it answered: ask again on a new one."""


_BROKEN = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)  # a dead peer (not GuardUnavailable)
# Requests sent again after a connection closed unanswered only if none of them had left: the guard may
# have read one, and a result taken twice could count a stall twice. Every other op may go twice: a check
# is at worst counted twice; an operator's change, an agent's end and the rest are the same done twice.
_ONCE = (Result,)


class _Health:
    """Counts misses and logs one line when the guard goes away and one when it is back."""

    def __init__(self, path: Path, fail_closed: bool) -> None:
        self.path = path
        self.fail_closed = fail_closed
        self.last_error = ""
        self.misses = 0
        self.down_since: float | None = None

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


def _time_left(sock: socket.socket, deadline: float) -> None:
    """Give the next blocking call on `sock` only what is left of the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    sock.settimeout(left)


class _Unsent(Exception):
    """A write on a dead connection failed; `sent` bytes of it had left (0: none of it reached the guard)."""

    def __init__(self, sent: int, why: str) -> None:
        super().__init__(why)
        self.sent = sent


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    """All of `data`, before `deadline` (TimeoutError). A dead peer raises _Unsent, saying how much had left."""
    view, sent = memoryview(data), 0
    try:
        while sent < len(data):
            _time_left(sock, deadline)
            sent += sock.send(view[sent:])
    except _BROKEN as exc:
        raise _Unsent(sent, exc.strerror or str(exc)) from None


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
        self._deferred: list[Request[Any]] = []  # see `_post`

    @property
    def misses(self) -> int:
        """Calls the guard did not judge (the failure mode decided them)."""
        return self._health.misses

    @property
    def server_info(self) -> HelloReply | None:
        """The guard's answer to the handshake (None until the first reply came)."""
        return self._session.server_info

    # -- public API -----------------------------------------------------------------------------

    def check(
        self,
        agent: str,
        tool: str,
        args: Any,
        *,
        harness: str | None = None,
        parent: str | None = None,
        call_id: str | int | None = None,
        args_unserializable: bool = False,
    ) -> Decision:
        """Ask before a tool call (`harness`: this call's harness, if not the client's). Never raises when the
        guard is unavailable: the failure mode answers.

        Args the guard answers with an error (it could not read them) are asked about again at once
        as unjudgeable, so the call is counted; only an error to that too leaves it to the failure mode."""
        check = Check(
            agent=agent,
            tool=tool,
            args=args,
            harness=harness,
            parent=parent,
            call_id=call_id,
            args_unserializable=args_unserializable,
        )
        try:
            with self._lock:
                reply = self._ask(check)
                if isinstance(reply, ErrorReply):
                    reply = self._ask(_unjudgeable(check))
            return _answered(reply)
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
        request = _result(agent, result, digest, call_id, tool, args)
        if not wait:
            self._post(request)
            return Reported(False, "")
        try:
            return _reported(self.request(request))
        except (GuardUnavailable, GuardError):
            return Reported(False, "")

    def agent_end(self, agent: str) -> bool:
        """Tell the guard an agent is gone (frees its state). False if the guard could not be told."""
        try:
            self.request(AgentEnd(agent=agent))
        except (GuardUnavailable, GuardError):
            return False
        return True

    def request(self, request: Request[R]) -> R:
        """Send one request (its id is given here) and return its reply, typed by its op (`Ping()` gives a `Pong`).
        Raises GuardUnavailable, or GuardError for an error reply."""
        with self._lock:
            return _answered(self._ask(request, idempotent=not isinstance(request, _ONCE)))

    def _post(self, request: Request[Any]) -> None:
        """A request sent without waiting for its reply (read, and dropped, with a later one). It goes with the
        next request, in the same write: one wakeup of the guard per tool call rather than two. Sent at once
        when DEFERRED_MAX wait already, and on `close`."""
        with self._lock:
            self._deferred.append(request)
            if len(self._deferred) >= DEFERRED_MAX:
                self._send_deferred()

    def _send_deferred(self) -> None:
        """Write the waiting requests now; when the guard cannot be reached they are dropped (a result the
        guard cannot be told changes nothing). A kept connection found dead gets them again on a new one
        only when none of them had left."""
        deadline = time.monotonic() + self.timeout
        for first in (True, False):
            retry = first and self._sock is not None
            frames, self._deferred = self._deferred, []
            try:
                sock = self._connect()
                _send(sock, self._encoded(frames), deadline)
                return
            except _Unsent as exc:
                self._drop()
                if not (retry and exc.sent == 0):
                    return
                self._deferred = frames
            except (GuardUnavailable, OSError):
                self._drop()
                return

    def _encoded(self, requests: list[Request[Any]]) -> bytes:
        """`requests` encoded on the current connection (ids from its session)."""
        return _encoded(self._session, requests)

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
            return sum(self._event(item) for item in items if not isinstance(item, Answer))

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

    def _ask(self, request: Request[Any], *, idempotent: bool = True) -> Reply | Decision:
        """Send `request` (with a new id each try), with what waits to go (see `_post`), and return its reply.
        Every call asks: a timeout before never stops this one from trying. A request not `idempotent`
        goes again on a new connection only when none of it had left (see `_exchange`)."""
        deadline = time.monotonic() + self.timeout
        try:
            try:
                reply = self._exchange(request, deadline, first=True, idempotent=idempotent)
            except _Stale:
                self._drop()
                reply = self._exchange(request, deadline, first=False, idempotent=idempotent)
        except TimeoutError:
            self._drop()  # a late reply must not answer a later request; a new connection starts clean
            raise GuardUnavailable(f"no answer within {self.timeout:g} s") from None
        except GuardUnavailable:
            self._drop()
            raise
        except (OSError, ProtocolError, _Unsent) as exc:
            self._drop()
            raise GuardUnavailable(getattr(exc, "strerror", None) or str(exc) or "the connection broke") from None
        self._health.ok()
        return reply

    def _exchange(self, request: Request[Any], deadline: float, *, first: bool, idempotent: bool) -> Reply | Decision:
        """One try of `_ask`. Raises _Stale when a connection kept from before turns out dead before any reply
        (the write refused; or, for an `idempotent` request, closed unanswered after the guard may have read
        it): `_ask` tries once more on a new connection."""
        retry = first and self._sock is not None
        sock = self._connect()
        rid = request.id = self._session.next_id()
        line = _frame(request)
        frames, self._deferred = self._deferred, []
        try:
            _send(sock, self._encoded(frames) + self._session.send(request, line), deadline)
        except _Unsent as exc:
            if exc.sent == 0:
                self._deferred[:0] = frames  # none of it reached the guard: it goes with the next try
            if retry:
                raise _Stale from None
            raise
        reply = self._read(sock, rid, deadline, retry and idempotent)
        if _closes(reply):
            self._drop()
        return reply

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        self._sock = _connect_checked(self.path, self.timeout)
        hello = Hello(harness=self.harness, version=self.version, pid=os.getpid(), role=self.role)
        self._session = ClientSession(hello if self.send_hello else None, ids=self._ids)
        return self._sock

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None

    def _read(self, sock: socket.socket, rid: int, deadline: float, retry: bool = False) -> Reply | Decision:
        """Read until the reply to `rid`; events on the way are handled. With `retry`, a connection that
        ends before any reply came (events aside) raises _Stale."""
        answered = False  # a reply, or part of a frame, came: the guard read what we wrote
        while True:
            _time_left(sock, deadline)
            try:
                data = sock.recv(65536)
            except _BROKEN:
                if retry and not answered:
                    raise _Stale from None
                raise
            if not data:
                if retry and not answered:
                    raise _Stale
                raise ConnectionResetError(0, "the guard closed the connection")
            found = None
            items = self._session.receive(data)
            answered = answered or not items or any(isinstance(item, Answer) for item in items)
            for item in items:
                if isinstance(item, Answer):
                    if item.id == rid:
                        found = item.reply
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


class _Connection:
    """One connection of the asyncio client: its writer, its protocol session, and the replies it owes."""

    __slots__ = ("pending", "reader", "session", "writer")

    def __init__(self, writer: asyncio.StreamWriter, session: ClientSession) -> None:
        self.writer = writer
        self.session = session
        self.pending: dict[int, asyncio.Future[Reply | Decision]] = {}
        self.reader: asyncio.Task[None] | None = None


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
        self._session = ClientSession(ids=self._ids)  # the latest connection's (for `server_info`)
        self._deferred: list[Request[Any]] = []  # see `_post`
        self._conn: _Connection | None = None
        self._connecting: asyncio.Lock | None = None

    @property
    def misses(self) -> int:
        return self._health.misses

    @property
    def connected(self) -> bool:
        return self._conn is not None

    @property
    def server_info(self) -> HelloReply | None:
        """The guard's answer to the handshake on the latest connection (None until it came)."""
        return self._session.server_info

    async def check(
        self,
        agent: str,
        tool: str,
        args: Any,
        *,
        harness: str | None = None,
        parent: str | None = None,
        call_id: str | int | None = None,
        args_unserializable: bool = False,
    ) -> Decision:
        """As GuardClient.check."""
        check = Check(
            agent=agent,
            tool=tool,
            args=args,
            harness=harness,
            parent=parent,
            call_id=call_id,
            args_unserializable=args_unserializable,
        )
        try:
            reply = await self._ask(check, self.timeout)
            if isinstance(reply, ErrorReply):
                reply = await self._ask(_unjudgeable(check), self.timeout)
            return _answered(reply)
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
        request = _result(agent, result, digest, call_id, tool, args)
        if not wait:
            self._post(request)
            return Reported(False, "")
        try:
            return _reported(await self.request(request))
        except (GuardUnavailable, GuardError):
            return Reported(False, "")

    async def agent_end(self, agent: str) -> bool:
        """As GuardClient.agent_end."""
        try:
            await self.request(AgentEnd(agent=agent))
        except (GuardUnavailable, GuardError):
            return False
        return True

    async def request(self, request: Request[R], *, timeout: float | None = None) -> R:
        """As GuardClient.request (`timeout`: this request's own, instead of the client's)."""
        limit = self.timeout if timeout is None else timeout
        reply = await self._ask(request, limit, idempotent=not isinstance(request, _ONCE))
        return _answered(reply)

    async def _ask(self, request: Request[Any], limit: float, *, idempotent: bool = True) -> Reply | Decision:
        """As GuardClient._ask: every call asks, and a kept connection found dead gets the request once more."""
        rid = request.id = next(self._ids)
        line = _frame(request)
        try:
            async with asyncio.timeout(limit):
                try:
                    reply = await self._exchange(request, line, first=True, idempotent=idempotent)
                except _Stale:
                    reply = await self._exchange(request, line, first=False, idempotent=idempotent)
        except TimeoutError:
            # Only this request gives up: the others on the connection wait on (a late reply is dropped).
            self._forget(rid)
            raise GuardUnavailable(f"no answer within {limit:g} s") from None
        except GuardUnavailable:
            self._forget(rid)
            raise
        except (OSError, ProtocolError) as exc:
            self._forget(rid)
            raise GuardUnavailable(getattr(exc, "strerror", None) or str(exc) or "the connection broke") from None
        self._health.ok()
        return reply

    def _forget(self, rid: int) -> None:
        conn = self._conn
        if conn is not None:
            conn.pending.pop(rid, None)
            conn.session.forget(rid)

    async def _exchange(self, request: Request[Any], line: bytes, *, first: bool, idempotent: bool) -> Reply | Decision:
        """One try of `_ask`; raises _Stale as GuardClient._exchange does."""
        retry = first and self._conn is not None
        conn = await self._connect()
        if conn.writer.is_closing():  # it died, and the loop has not run its reader since: use a new one
            await self._drop(conn)
            conn = await self._connect()
            retry = False
        frames, self._deferred = self._deferred, []
        conn.writer.write(self._encoded(conn, frames) + conn.session.send(request, line))
        if conn.writer.is_closing():
            # The write failed at once (the guard is gone): none of it left, so all of it may go again.
            self._deferred[:0] = frames
            await self._drop(conn)
            if retry:
                raise _Stale
            raise ConnectionResetError(0, "the guard closed the connection")
        # No await since the write: its reply cannot have been read yet.
        future: asyncio.Future[Reply | Decision] = asyncio.get_running_loop().create_future()
        rid = request.id
        conn.pending[rid] = future
        try:
            return await future
        except _BROKEN:  # closed before our reply: the guard may have read it, so only the request goes again
            if retry and idempotent:
                raise _Stale from None
            raise
        finally:
            conn.pending.pop(rid, None)

    def _post(self, request: Request[Any]) -> None:
        """A request sent without waiting for its reply (which matches nothing and is dropped): it goes with
        the next request, in the same write (as GuardClient._post). Past DEFERRED_MAX waiting they go at once
        on the open connection, or are dropped when there is none (the guard cannot be told now)."""
        self._deferred.append(request)
        if len(self._deferred) >= DEFERRED_MAX:
            frames, self._deferred = self._deferred, []
            conn = self._conn
            if conn is not None and not conn.writer.is_closing():
                conn.writer.write(self._encoded(conn, frames))

    def _encoded(self, conn: _Connection, requests: list[Request[Any]]) -> bytes:
        return _encoded(conn.session, requests)

    async def connect(self) -> None:
        """Connect now (requests connect lazily); raises GuardUnavailable."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._connect()
        except (OSError, TimeoutError) as exc:
            raise GuardUnavailable(getattr(exc, "strerror", None) or str(exc) or "timed out") from None

    async def _connect(self) -> _Connection:
        if self._conn is not None:
            return self._conn
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._conn is not None:
                return self._conn
            why = check_socket(self.path)
            if why is not None:
                raise GuardUnavailable(why)
            reader, writer = await asyncio.open_unix_connection(str(self.path), limit=self.max_frame)
            why = check_peer(writer.get_extra_info("socket"), self.path)
            if why is not None:
                writer.close()
                raise GuardUnavailable(why)
            hello = Hello(harness=self.harness, version=self.version, pid=os.getpid(), role=self.role)
            conn = self._conn = _Connection(writer, ClientSession(hello, self.max_frame, ids=self._ids))
            self._session = conn.session
            conn.reader = asyncio.create_task(self._read(reader, conn), name="guard-client-reader")
            return conn

    async def _read(self, reader: asyncio.StreamReader, conn: _Connection) -> None:
        try:
            while data := await reader.read(65536):
                for item in conn.session.receive(data):
                    if isinstance(item, Answer):
                        future = conn.pending.get(item.id)
                        if future is not None and not future.done():
                            future.set_result(item.reply)
                        if _closes(item.reply) and self._conn is conn:
                            self._conn = None  # the guard closes it: later requests take a new one
                    else:
                        await self._dispatch(item)
        except (OSError, ProtocolError) as exc:
            log.debug("guard connection lost: %s", exc)
        finally:
            if self._conn is conn:
                self._conn = None
            for f in conn.pending.values():
                if not f.done():
                    f.set_exception(ConnectionResetError(0, "the guard closed the connection"))
            conn.writer.close()

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

    async def _drop(self, conn: _Connection | None = None) -> None:
        conn = conn if conn is not None else self._conn
        if conn is None:
            return
        if self._conn is conn:
            self._conn = None
        conn.writer.close()
        task = conn.reader
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def close(self) -> None:
        conn = self._conn
        if self._deferred and conn is not None:
            frames, self._deferred = self._deferred, []
            with contextlib.suppress(OSError):
                conn.writer.write(self._encoded(conn, frames))  # what was posted still reaches the guard
                await conn.writer.drain()
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
    as a console: it is not counted among the harnesses. Its requests wait up to `OPERATOR_TIMEOUT` (5 s)
    unless `timeout=` says otherwise: no tool call waits on an operator, and a loaded machine may be slow."""
    path = Path(operator_socket) if operator_socket is not None else default_operator_socket_path(harness_socket)
    options.setdefault("role", "console")
    options.setdefault("timeout", OPERATOR_TIMEOUT)
    return AsyncGuardClient(path, **options)
