"""The guard server: the engine behind a private Unix socket, with event subscribers and operator ops.

Every request is answered on the event loop's thread, synchronously, from plain Python state: a
check never waits on a file, a subscriber or another client. Subscribers get one coalesced state
frame per tick; one that cannot keep up skips ticks (and gets a full frame when it catches up) and
is dropped if it stays stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import signal
import socket
import stat
import struct
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson

from breaker import __version__
from breaker.config import Config, ConfigError
from breaker.engine import AgentView, Guard
from breaker.incidents import IncidentLog
from breaker.patch import Loaded, PatchSources, write_config
from breaker.paths import SocketPathError, check_length, default_socket_path, ensure_private_dir
from breaker.protocol import MAX_FRAME, PROTOCOL_VERSION, FrameBuffer, ProtocolError, decode, error_reply
from breaker.reload import ConfigWatcher

__all__ = ["GuardServer", "ServerError", "serve"]

log = logging.getLogger("cbconsole.guard")

_dumps = orjson.dumps
_PEERCRED = struct.Struct("3i")
BATCH = 64  # frames handled per turn before letting other connections in
WRITE_HIGH = 256 * 1024  # per-connection output buffered before we stop reading that client
SLOW_SUBSCRIBER = 1024 * 1024  # a subscriber this far behind skips ticks
DROP_AFTER = 10.0  # seconds a subscriber may stay behind before it is dropped
MAX_TRIPS_PER_TICK = 500
INTERRUPT_COMMAND_TIMEOUT = 10.0  # seconds an operator's interrupt command may run before it is killed
INTERRUPT_COMMAND_OUTPUT = 4096  # bytes of its output kept for the log (the rest is read and dropped)
_PLACEHOLDER = re.compile(r"\{(agent|reason)\}")


_UNJUDGEABLE = object()  # stands for args a client could not serialize: allowed, counted, matching nothing


class ServerError(RuntimeError):
    """The server cannot start (the socket path is held, unsafe or unusable)."""


class _Conn(asyncio.Protocol):
    """One client connection."""

    def __init__(self, server: GuardServer) -> None:
        self.server = server
        self.buf = FrameBuffer(server.max_frame)
        self.transport: asyncio.Transport | None = None
        self.peer_pid = 0
        self.harness = ""
        self.role = ""
        self.capabilities: list[str] = []
        self.agents: set[str] = set()  # agents this connection checked for: interrupt pushes go here
        self.subscribed = False
        self.needs_full = True
        self.behind_since: float | None = None
        self.write_paused = False
        self.turn_scheduled = False
        self.closing = False
        self.eof = False

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, so no isinstance check here.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        uid = -1
        try:
            pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
            self.peer_pid = pid
        except (OSError, AttributeError):
            pass
        if uid != os.getuid():
            log.warning(
                "refused a connection from uid %s (pid %s): the guard serves only uid %s",
                uid,
                self.peer_pid,
                os.getuid(),
            )
            self.refuse(error_reply(None, "forbidden", "this guard serves only its own user"))
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        self.server._conns.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.buf.feed(data)
        self._turn()

    def eof_received(self) -> bool | None:
        # The client is done sending; answer what it sent (in fair turns), then close.
        self.eof = True
        self._turn()
        return True

    def pause_writing(self) -> None:
        # The client does not read its replies: stop reading its requests until it does.
        self.write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()
            self._turn()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server._forget(self)

    # -- request handling ---------------------------------------------------------------------

    def _turn(self) -> None:
        """Answer up to BATCH complete frames, then yield to other connections if more are waiting."""
        self.turn_scheduled = False
        transport = self.transport
        if transport is None or self.closing or self.write_paused:
            return
        frames = self.buf.frames(BATCH)
        if frames:
            handle = self.server._handle
            out = [r for r in (handle(self, f) for f in frames) if r is not None]
            if out and not self.closing:
                transport.write(out[0] if len(out) == 1 else b"".join(out))
        if self.buf.too_large:
            self.server.stats_frame_too_large += 1
            transport.write(
                error_reply(None, "frame_too_large", f"a frame is over the {self.buf.limit:,}-byte limit; closing")
            )
            self.close()
        elif self.buf.pending() and not self.turn_scheduled and not self.closing:
            self.turn_scheduled = True
            if not self.eof:
                transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._continue)
        elif self.eof and not self.turn_scheduled:
            self.close()

    def _continue(self) -> None:
        if self.transport is not None and not self.closing and not self.write_paused and not self.eof:
            self.transport.resume_reading()
        self._turn()

    def send(self, frame: bytes) -> None:
        if self.transport is not None and not self.closing:
            self.transport.write(frame)

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def refuse(self, frame: bytes) -> None:
        """Say why, half-close, and discard input for a moment before closing: closing with unread
        input would reset the connection before the peer could read why."""
        transport = self.transport
        if transport is None:
            return
        self.closing = True
        self.buf = FrameBuffer(self.buf.limit)
        transport.write(frame)
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(1.0, transport.close)

    def backlog(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport is not None else 0


class GuardServer:
    """The guard: one Guard, its config (watched patch layers), the incident log, and the socket."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        sources: PatchSources | None = None,
        *,
        config: Config | None = None,
        max_frame: int = MAX_FRAME,
        tick: float = 0.1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.socket_path = Path(socket_path) if socket_path is not None else default_socket_path()
        self.sources = sources
        self.max_frame = max_frame
        self.tick = tick
        self.clock = clock
        self.guard = Guard(config)
        self.incidents = IncidentLog(self.guard.config.incident_log, on_error=self._incident_error)
        self.watcher: ConfigWatcher | None = None
        if sources is not None and config is None:
            self.watcher = ConfigWatcher(sources, on_change=self._config_loaded, on_error=self._config_failed)
        self.started = self.clock()
        self.stats_frame_too_large = 0
        self._conns: set[_Conn] = set()
        self._meta: dict[str, list[Any]] = {}  # agent -> [harness, parent, set of _Conn]
        self._dirty: set[str] = set()
        self._known: set[str] = set()  # agents the subscribers know about
        self._trips: deque[dict[str, Any]] = deque(maxlen=MAX_TRIPS_PER_TICK)
        self._config_dirty = True
        self._config_error: str | None = None
        self._seq = 0
        self._stats_sent: tuple[Any, ...] = ()
        self._server: asyncio.AbstractServer | None = None
        self._lock_fd: int | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._commands: set[asyncio.Task[None]] = set()  # running interrupt commands
        self.interrupt_timeout = INTERRUPT_COMMAND_TIMEOUT
        self._stopped = asyncio.Event()
        self._ops: dict[str, Callable[[_Conn, dict[str, Any]], dict[str, Any] | None]] = {
            "hello": self._op_hello,
            "agent_end": self._op_agent_end,
            "subscribe": self._op_subscribe,
            "unsubscribe": self._op_unsubscribe,
            "interrupt": self._op_interrupt,
            "uninterrupt": self._op_uninterrupt,
            "reset": self._op_reset,
            "pause": self._op_pause,
            "resume": self._op_resume,
            "config_get": self._op_config_get,
            "snapshot": self._op_snapshot,
            "stats": self._op_stats,
            "ping": lambda conn, msg: {"pong": True},
        }

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Take the socket path (refusing a live holder), bind it 0600, start watching the config."""
        path = self.socket_path
        try:
            check_length(path)
            ensure_private_dir(path.parent)
        except SocketPathError as exc:
            raise ServerError(str(exc)) from None
        self._take_lock(path)
        try:
            self._clear_stale(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)
            try:
                sock.bind(str(path))
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            # A burst of hook processes connects at once; the kernel caps this at net.core.somaxconn.
            self._server = await loop.create_unix_server(lambda: _Conn(self), sock=sock, backlog=4096)
        except BaseException:
            self._release_lock()
            raise
        if self.watcher is not None:
            self.watcher.reload()
            if self.watcher.current is None and self.watcher.error is not None:
                log.error("config not loaded, running with the built-in defaults: %s", self.watcher.error)
            self._tasks.append(asyncio.create_task(self.watcher.run(self._stopped), name="config-watch"))
        self._tasks.append(asyncio.create_task(self._ticker(), name="subscriber-tick"))
        log.info("guard %s listening on %s (pid %d, protocol %d)", __version__, path, os.getpid(), PROTOCOL_VERSION)

    def _take_lock(self, path: Path) -> None:
        lock_path = path.with_name(path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip()
            os.close(fd)
            raise ServerError(f"another guard is already serving {path}: {_describe_pid(holder)}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    @staticmethod
    def _clear_stale(path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ServerError(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            log.info("removed a stale socket at %s", path)
            os.unlink(path)
            return
        else:
            raise ServerError(f"{path} is held by a live process that is not a guard of ours; refusing to replace it")
        finally:
            probe.close()

    async def serve_forever(self) -> None:
        await self._stopped.wait()

    async def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.close()
        for task in [*self._tasks, *self._commands]:
            task.cancel()
        for task in [*self._tasks, *self._commands]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        self._release_lock()
        log.info("guard stopped")

    # -- config -------------------------------------------------------------------------------

    def _config_loaded(self, loaded: Loaded) -> None:
        self._apply(loaded.effective)
        self._config_error = None
        for note in loaded.notes:
            log.warning("config: %s", note)
        log.info("config in force from %s", loaded.config_from or "the built-in defaults")

    def _config_failed(self, error: ConfigError) -> None:
        self._config_error = str(error)
        self._config_dirty = True

    def _apply(self, config: Config) -> None:
        self.guard.config = config
        self.incidents.path = config.incident_log
        self._config_dirty = True
        self._dirty.update(self.guard.agents())  # window, limits and status of every agent may change

    def _incident_error(self, message: str) -> None:
        log.warning("%s (decisions are unaffected)", message)

    # -- the hot path -------------------------------------------------------------------------

    def _handle(self, conn: _Conn, frame: bytes) -> bytes | None:
        try:
            msg = decode(frame)
        except ProtocolError as exc:
            return error_reply(exc.request_id, exc.code, exc.message)
        op = msg["op"]
        rid = msg.get("id")
        if op == "check":
            return self._check(conn, rid, msg)
        if op == "config_set":
            asyncio.get_running_loop().create_task(self._config_set(conn, rid, msg["changes"]))
            return None
        try:
            reply = self._ops[op](conn, msg)
        except Exception as exc:  # a bug in an operator op must not take the connection down
            log.exception("op %s failed", op)
            return error_reply(rid, "internal", f"{op} failed: {exc}")
        if reply is None:
            return None
        reply["id"] = rid
        return _dumps(reply) + b"\n"

    def _check(self, conn: _Conn, rid: Any, msg: dict[str, Any]) -> bytes:
        agent = msg["agent"]
        tool = msg["tool"]
        now = self.clock()
        meta = self._meta.get(agent)
        if meta is None:
            meta = self._meta[agent] = [msg.get("harness") or conn.harness, msg.get("parent"), set()]
            if len(self._meta) > 2 * self.guard.config.max_agents:
                self._prune_meta()
        if conn not in meta[2]:
            meta[2].add(conn)
            conn.agents.add(agent)
        args = _UNJUDGEABLE if msg.get("args_unserializable") is True else msg.get("args")
        v = self.guard.check(agent, tool, args, now)
        if v.counted or not v.allowed:
            self._dirty.add(agent)
        if v.allowed:
            return _dumps({"id": rid, "decision": "allow"}) + b"\n"
        if v.first:
            self._trip(agent, tool, v.kind or "", v.count, v.limit, now)
        return (
            _dumps(
                {"id": rid, "decision": "deny", "kind": v.kind, "reason": v.reason, "count": v.count, "limit": v.limit}
            )
            + b"\n"
        )

    def _trip(self, agent: str, tool: str, kind: str, count: int, limit: int, now: float) -> None:
        self.incidents.record(kind=kind, tool=tool, count=count, limit=limit, agent=agent, when=now)
        self._trips.append({"time": now, "agent": agent, "kind": kind, "tool": tool, "count": count, "limit": limit})
        log.info("trip %s: agent %r, tool %r, %d/%d", kind, agent, tool, count, limit)

    def _prune_meta(self) -> None:
        keep = set(self.guard.agents()) | set(self.guard.interrupted_agents())
        for agent in [a for a in self._meta if a not in keep]:
            self._drop_meta(agent)

    def _drop_meta(self, agent: str) -> None:
        meta = self._meta.pop(agent, None)
        if meta is not None:
            for conn in meta[2]:
                conn.agents.discard(agent)

    def _forget(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        for agent in conn.agents:
            meta = self._meta.get(agent)
            if meta is not None:
                meta[2].discard(conn)
        conn.agents.clear()

    # -- operator and lifecycle ops -----------------------------------------------------------

    def _op_hello(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        conn.harness = msg.get("harness") or ""
        conn.role = msg.get("role") or "harness"
        conn.capabilities = [c for c in msg.get("capabilities") or [] if isinstance(c, str)][:32]
        return {
            "server": "cbconsole-guard",
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "socket": str(self.socket_path),
            "max_frame": self.max_frame,
        }

    def _op_agent_end(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        agent = msg["agent"]
        known = self.guard.end_agent(agent)
        self._drop_meta(agent)
        self._dirty.discard(agent)
        return {"ok": True, "known": known}

    def _op_subscribe(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        conn.subscribed = True
        conn.needs_full = True
        conn.role = conn.role or "console"
        return {"ok": True, "tick": self.tick}

    def _op_unsubscribe(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        conn.subscribed = False
        return {"ok": True}

    def _op_interrupt(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        agent = msg["agent"]
        reason = msg.get("reason") or ""
        self.guard.interrupt(agent, reason)
        self._dirty.add(agent)
        frame = _dumps({"event": "interrupt", "agent": agent, "reason": reason}) + b"\n"
        meta = self._meta.get(agent)
        targets = list(meta[2]) if meta is not None else []
        for target in targets:
            target.send(frame)
        log.info("interrupt: agent %r (%s); told %d connection(s)", agent, reason or "no reason given", len(targets))
        if self.guard.config.interrupt_command:
            argv = fill_command(self.guard.config.interrupt_command, agent, reason)
            task = asyncio.get_running_loop().create_task(self._interrupt_command(argv, agent))
            self._commands.add(task)
            task.add_done_callback(self._commands.discard)
        return {"ok": True, "notified": len(targets)}

    async def _interrupt_command(self, argv: list[str], agent: str) -> None:
        """Run the operator's interrupt command (no shell), bounded in time and output; log how it
        ended. Whatever happens to it, the guard goes on: this is a task of its own."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout kills its children too
            )
        except (OSError, ValueError) as exc:
            log.warning("interrupt command for agent %r could not start (%s): %s", agent, argv[0], exc)
            return
        kept = bytearray()

        async def drain() -> None:
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(65536):
                kept.extend(chunk[: max(0, INTERRUPT_COMMAND_OUTPUT - len(kept))])
            await proc.wait()

        try:
            await asyncio.wait_for(drain(), self.interrupt_timeout)
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            log.warning(
                "interrupt command for agent %r timed out after %g s and was killed; output: %s",
                agent,
                self.interrupt_timeout,
                _shown(kept),
            )
            return
        except asyncio.CancelledError:  # the guard is stopping
            _kill_group(proc.pid)
            raise
        level = logging.INFO if proc.returncode == 0 else logging.WARNING
        log.log(level, "interrupt command for agent %r exited %s; output: %s", agent, proc.returncode, _shown(kept))

    def _op_uninterrupt(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        self._dirty.add(msg["agent"])
        return {"ok": True, "known": self.guard.uninterrupt(msg["agent"])}

    def _op_reset(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        self._dirty.add(msg["agent"])
        return {"ok": True, "known": self.guard.reset(msg["agent"])}

    def _op_pause(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        self.guard.pause()
        log.info("guard paused: every call is allowed and not recorded")
        return {"ok": True, "paused": True}

    def _op_resume(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        self.guard.resume()
        log.info("guard resumed")
        return {"ok": True, "paused": False}

    def _op_config_get(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        return {"config": self._config_frame()}

    def _op_snapshot(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        return {"state": self._state(full=True, top=min(max(msg.get("top", 10), 0), 1000))}

    def _op_stats(self, conn: _Conn, msg: dict[str, Any]) -> dict[str, Any]:
        return {"stats": self._stats()}

    async def _config_set(self, conn: _Conn, rid: Any, changes: dict[str, Any]) -> None:
        """Validate, write the patch layer (off the loop's thread), apply, answer."""
        try:
            mapping = {**self.guard.config.to_mapping(), **changes}
            if self.watcher is not None and self.watcher.current is not None:
                # Write what the layer says, not the effective config (`disabled: true` stays the row's business).
                mapping = {**self.watcher.current.config.to_mapping(), **changes}
            new = Config.from_mapping(mapping)
        except ConfigError as exc:
            problems = [{"key": p.key, "expected": p.expected, "found": p.found} for p in exc.problems]
            conn.send(
                _dumps({"id": rid, "error": {"code": "bad_config", "message": str(exc), "problems": problems}}) + b"\n"
            )
            return
        written: str | None = None
        if self.watcher is not None:
            loaded = self.watcher.current
            if loaded is None:
                conn.send(error_reply(rid, "config_broken", f"fix the patch layer first: {self.watcher.error}"))
                return
            try:
                written = str(await asyncio.to_thread(write_config, loaded.write_target(), new))
            except (ConfigError, OSError) as exc:
                conn.send(error_reply(rid, "write_failed", f"config not saved: {exc}"))
                return
            self.watcher.reload()  # apply now; the file watch will see the same file
        else:
            self._apply(new)
        log.info("config set by a client %s; written to %s", changes, written or "(no patch layer: memory only)")
        conn.send(_dumps({"id": rid, "ok": True, "config": self._config_frame(), "written": written}) + b"\n")

    # -- state for subscribers ----------------------------------------------------------------

    def _config_frame(self) -> dict[str, Any]:
        loaded = self.watcher.current if self.watcher is not None else None
        target = None
        if loaded is not None:
            with contextlib.suppress(ConfigError):
                target = str(loaded.write_target())
        return {
            "values": self.guard.config.to_mapping(),
            "disabled": bool(loaded and loaded.disabled),
            "source": str(loaded.config_from.path) if loaded and loaded.config_from else None,
            "target": target,
            "layers": [str(layer.path) for layer in loaded.layers] if loaded else [],
            "notes": list(loaded.notes) if loaded else list(self.guard.config.warnings),
            "error": self._config_error,
        }

    def _stats(self) -> dict[str, Any]:
        harnesses: dict[str, int] = {}
        for conn in self._conns:
            # A harness: said hello as one, or asked for a check. Consoles and one-off queries are not.
            if not conn.subscribed and conn.role != "console" and (conn.harness or conn.agents):
                name = conn.harness or "unknown"
                harnesses[name] = harnesses.get(name, 0) + 1
        return {
            "checks": self.guard.checks,
            "denies": dict(self.guard.denies),
            "agents": len(self.guard),
            "connections": len(self._conns),
            "harnesses": harnesses,
            "paused": self.guard.paused,
            "uptime": self.clock() - self.started,
            "pid": os.getpid(),
            "socket": str(self.socket_path),
            "incident_log": self.incidents.path,
            "incident_log_error": self.incidents.last_error,
            "frames_too_large": self.stats_frame_too_large,
        }

    def _agent_frame(self, view: AgentView) -> dict[str, Any]:
        meta = self._meta.get(view.agent)
        return {
            "agent": view.agent,
            "harness": meta[0] if meta else "",
            "parent": meta[1] if meta else None,
            "calls": view.calls,
            "window_fill": view.window_fill,
            "window": view.window,
            "cap": view.cap,
            "worst_count": view.worst_count,
            "worst_tool": view.worst_tool,
            "worst_preview": view.worst_preview,
            "duplicate_limit": view.duplicate_limit,
            "trips": view.trips,
            "status": view.status,
            "last_tool": view.last_tool,
            "last_seen": view.last_seen,
            "interrupt_reason": view.interrupt_reason,
        }

    def _state(self, *, full: bool, top: int = 10) -> dict[str, Any]:
        guard = self.guard
        ids = set(guard.agents()) | set(guard.interrupted_agents())
        wanted = ids if full else (self._dirty & ids)
        views = [guard.agent_view(a) for a in wanted]
        return {
            "full": full,
            "time": self.clock(),
            "agents": [self._agent_frame(v) for v in views if v is not None],
            "gone": [] if full else sorted(self._known - ids),
            "top_keys": [
                {"agent": k.agent, "tool": k.tool, "preview": k.preview, "count": k.count} for k in guard.top_keys(top)
            ],
            "stats": self._stats(),
        }

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            try:
                self._publish()
            except Exception:  # never let a display bug stop the guard
                log.exception("publishing state to subscribers failed")

    def _publish(self) -> None:
        subscribers = [c for c in self._conns if c.subscribed and not c.closing]
        if not subscribers:
            self._dirty.clear()
            self._trips.clear()
            self._known = set()
            return
        now = time.monotonic()
        trips = list(self._trips)
        self._trips.clear()
        config = self._config_frame() if self._config_dirty else None
        self._config_dirty = False
        delta: bytes | None = None
        full: bytes | None = None
        self._seq += 1
        for conn in subscribers:
            if conn.backlog() > SLOW_SUBSCRIBER:
                conn.needs_full = True  # it misses this delta; it gets the whole state when it catches up
                if conn.behind_since is None:
                    conn.behind_since = now
                elif now - conn.behind_since > DROP_AFTER:
                    log.warning("dropped a subscriber (pid %s) that read nothing for %.0f s", conn.peer_pid, DROP_AFTER)
                    conn.close()
                continue
            conn.behind_since = None
            if conn.needs_full:
                if full is None:
                    state = self._state(full=True)
                    state.update(event="state", seq=self._seq, trips=trips, config=self._config_frame())
                    full = _dumps(state) + b"\n"
                conn.send(full)
                conn.needs_full = False
            else:
                if delta is None:
                    stats_changed = self._stats_signature() != self._stats_sent
                    if not (self._dirty or trips or config or stats_changed or self._known_changed()):
                        delta = b""
                    else:
                        state = self._state(full=False)
                        state.update(event="state", seq=self._seq, trips=trips, config=config)
                        delta = _dumps(state) + b"\n"
                if delta:
                    conn.send(delta)
        self._dirty.clear()
        self._known = set(self.guard.agents()) | set(self.guard.interrupted_agents())
        self._stats_sent = self._stats_signature()

    def _stats_signature(self) -> tuple[Any, ...]:
        """What the header shows, cheaply: a change here is worth a frame even if no agent changed."""
        guard = self.guard
        return (guard.checks, tuple(guard.denies.values()), guard.paused, len(self._conns), self.incidents.last_error)

    def _known_changed(self) -> bool:
        return len(self._known) != len(self.guard) + len(self.guard.interrupted_agents())


def fill_command(template: tuple[str, ...] | list[str], agent: str, reason: str) -> list[str]:
    """The interrupt command's argv: `{agent}` and `{reason}` replaced in each argument, in one pass
    (a reason holding "{agent}" stays as written). Never a shell string: each element is one argument,
    and the program (the first element, which the config keeps free of placeholders) is never filled."""
    values = {"agent": agent, "reason": reason}
    program, *args = template
    return [program, *(_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in args)]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _shown(output: bytes | bytearray) -> str:
    text = bytes(output).decode("utf-8", "replace").strip()
    if len(output) >= INTERRUPT_COMMAND_OUTPUT:
        text += " [...]"
    return repr(text) if text else "(none)"


def _describe_pid(text: str) -> str:
    try:
        pid = int(text)
    except ValueError:
        return "a process whose pid is unknown"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmdline = ""
    return f"pid {pid}" + (f" ({cmdline})" if cmdline else "")


def _install_uvloop() -> str:
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


async def _run(server: GuardServer) -> None:
    loop = asyncio.get_running_loop()
    await server.start()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(server.stop()))
    try:
        await server.serve_forever()
    finally:
        await server.stop()


def serve(
    socket_path: str | os.PathLike[str] | None = None,
    sources: PatchSources | None = None,
    *,
    config: Config | None = None,
) -> int:
    """Run a guard in this process until SIGINT/SIGTERM (the headless mode). Returns an exit status."""
    loop_name = _install_uvloop()
    server = GuardServer(socket_path, sources, config=config)
    log.info("event loop: %s", loop_name)
    try:
        asyncio.run(_run(server))
    except ServerError as exc:
        log.error("%s", exc)
        return 1
    return 0
