"""The guard server: the protocol session behind two private Unix sockets, and the guard's I/O.

The harness socket serves what harnesses need (hello, check, agent_end, ping); the operator socket,
in a directory of its own, serves everything. This module is the transport: asyncio protocols that
hand bytes to `ServerSession` (breaker/session.py) and write back what it gives, plus the work it
asks for that needs I/O — the patch layer (read and written off the event loop's thread, one write
at a time), interrupt commands (a bounded queue), the incident log and the state file (threads of
their own). A check never waits on any of them.
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
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from breaker import __version__
from breaker.config import Config, ConfigError
from breaker.engine import Guard
from breaker.incidents import QueuedIncidentLog
from breaker.patch import NO_FILE, Loaded, PatchConflict, PatchSources, clean_stale_temps, load, read_text, write_config
from breaker.paths import (
    OPERATOR_SOCKET_ENV,
    SocketPathError,
    check_length,
    default_operator_socket_path,
    default_socket_path,
    ensure_private_dir,
    peer_ids,
    peer_option,
)
from breaker.protocol import HARNESS, MAX_FRAME, OPERATOR, PROTOCOL_VERSION, ConfigFrame, ConfigReply, ErrorReply
from breaker.reload import ConfigWatcher
from breaker.session import (
    WRITE_HIGH,
    Channel,
    CommandJob,
    ConfigJob,
    DurableJob,
    IncidentJob,
    ServerSession,
)
from breaker.store import GuardRecord, StateStore

__all__ = ["GuardServer", "ServerError", "fill_command", "serve"]

log = logging.getLogger("cbconsole.guard")

INTERRUPT_COMMAND_TIMEOUT = 10.0  # seconds an operator's interrupt command may run before it is killed
INTERRUPT_COMMAND_OUTPUT = 4096  # bytes of its output kept for the log (the rest is read and dropped)
INTERRUPT_COMMANDS_AT_ONCE = 4  # children running at once: each costs descriptors the checks need
INTERRUPT_COMMANDS_QUEUED = 256  # waiting beyond this are dropped (and counted)
SAVE_EVERY = 0.2  # seconds between saves of what changed: what a crash can lose
SAVE_SLICE = 200  # agents exported per slice of a save, between which the event loop runs
CONFIG_WRITE_TRIES = 5  # a hand edit racing a config_set: re-read and apply on top this many times
_PLACEHOLDER = re.compile(r"\{(agent|reason)\}")


class ServerError(RuntimeError):
    """The server cannot start (a socket path is held, unsafe or unusable)."""


class _Conn(asyncio.Protocol):
    """One connection: bytes to the session, its output back to the socket."""

    def __init__(self, server: GuardServer, plane: str) -> None:
        self.server = server
        self.plane = plane
        self.transport: asyncio.Transport | None = None
        self.ch: Channel | None = None
        self.turn_scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, so no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)
        uid, pid = peer_ids(transport.get_extra_info("socket"))
        session = self.server.session
        self.ch = ch = session.open(self.plane, uid, pid)
        if ch.closing:  # refused: say why, and close once it had a moment to read it
            self.transport.write(ch.take_output())
            if self.transport.can_write_eof():
                self.transport.write_eof()
            asyncio.get_running_loop().call_later(1.0, self.transport.close)
            self.ch = None
            return
        self.transport.set_write_buffer_limits(high=WRITE_HIGH)
        self.server.conns[ch] = self

    def data_received(self, data: bytes) -> None:
        if self.ch is not None:
            self.server.session.receive(self.ch, data)
            self._after_turn()

    def eof_received(self) -> bool | None:
        if self.ch is not None:
            if self.server.session.eof(self.ch):
                self.schedule_turn()
            self.server.flush()
        return True  # keep our half open: replies still go out

    def _after_turn(self) -> None:
        ch = self.ch
        if ch is not None and not ch.closing and ch.buf.pending():
            self.schedule_turn()
        self.server.flush()

    def schedule_turn(self) -> None:
        """More frames than one turn: let the other connections in first (fairness), then go on."""
        if self.turn_scheduled or self.transport is None:
            return
        self.turn_scheduled = True
        self.transport.pause_reading()
        asyncio.get_running_loop().call_soon(self._continue)

    def _continue(self) -> None:
        self.turn_scheduled = False
        ch = self.ch
        if ch is None or ch.closing or self.transport is None:
            return
        more = self.server.session.turn(ch)
        if more:
            self.schedule_turn()
        elif not ch.backlog_high:
            self.transport.resume_reading()
        self.server.flush()

    def pause_writing(self) -> None:
        # The client does not read its replies: stop reading its requests until it does.
        if self.ch is not None:
            self.server.session.set_backlog(self.ch, True)
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.ch is None or self.transport is None:
            return
        self.server.session.set_backlog(self.ch, False)
        if not self.ch.closing:
            self.transport.resume_reading()
            self.schedule_turn()
        self.server.wake_pump()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ch is not None:
            self.server.conns.pop(self.ch, None)
            self.server.session.lost(self.ch)
            self.ch = None

    def write_out(self) -> None:
        ch, transport = self.ch, self.transport
        if ch is None or transport is None:
            return
        data = ch.take_output()
        if data:
            transport.write(data)
        if ch.done:
            if transport.can_write_eof():
                with contextlib.suppress(OSError, RuntimeError):
                    transport.write_eof()
            transport.close()


class GuardServer:
    """The guard: one session (the Guard and the protocol), its config, and its I/O."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        sources: PatchSources | None = None,
        *,
        config: Config | None = None,
        operator_socket: str | os.PathLike[str] | None = None,
        state_path: str | os.PathLike[str] | None = None,
        hash_seed: int | None = None,
        max_frame: int = MAX_FRAME,
        tick: float = 0.1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.socket_path = Path(socket_path) if socket_path is not None else default_socket_path()
        if operator_socket is None:
            operator_socket = default_operator_socket_path(self.socket_path)
        self.operator_path = Path(operator_socket)
        self.sources = sources
        self.tick = tick
        self.clock = clock
        self.guard = Guard(config)
        self.session = ServerSession(
            self.guard,
            clock=clock,
            owner_uid=os.getuid(),
            pid=os.getpid(),
            tick=tick,
            max_frame=max_frame,
            fill_command=self._fill_command,
        )
        stats = self.session.stats
        stats.socket, stats.operator_socket = str(self.socket_path), str(self.operator_path)
        self.session.on_stats = self._refresh_stats
        self.conns: dict[Channel, _Conn] = {}
        self.incidents = QueuedIncidentLog(self.guard.config.incident_log, on_error=self._incident_error)
        self.watcher: ConfigWatcher | None = None
        if sources is not None and config is None:
            self.watcher = ConfigWatcher(sources, on_change=self._config_loaded, on_error=self._config_failed)
        self._config_error: str | None = None
        self.store = StateStore(Path(state_path), hash_seed, on_error=self._state_error) if state_path else None
        self._servers: dict[Path, asyncio.AbstractServer] = {}
        self._locks: list[int] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._commands: deque[CommandJob] = deque()
        self._running_commands: set[asyncio.Task[None]] = set()
        self.interrupt_timeout = INTERRUPT_COMMAND_TIMEOUT
        self._config_lock: asyncio.Lock | None = None
        self._pump_scheduled = False
        self._save_wanted: asyncio.Event | None = None
        self._waiting_for_save: list[DurableJob] = []
        self._bound: dict[Path, tuple[int, int]] = {}  # socket path -> (device, inode) as bound
        self.woken_again = False
        self._saved_checks = -1
        self._saved_guard_at = 0.0
        self._stopped = asyncio.Event()

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Take both socket paths (refusing a live holder), load the saved state and the config, listen."""
        self._config_lock = asyncio.Lock()
        self._save_wanted = asyncio.Event()
        env_hint = f"--operator-socket PATH / ${OPERATOR_SOCKET_ENV}"
        for path, hint in ((self.socket_path, None), (self.operator_path, env_hint)):
            try:
                check_length(path)
                if hint is None:
                    ensure_private_dir(path.parent)
                else:
                    ensure_private_dir(path.parent, override=hint)
            except SocketPathError as exc:
                raise ServerError(str(exc)) from None
        if self.operator_path.parent == self.socket_path.parent:
            raise ServerError(
                f"the operator's socket {self.operator_path} is in the harness socket's directory: it needs a "
                "directory of its own, so that reaching one does not reach the other"
            )
        try:
            for path in (self.socket_path, self.operator_path):
                self._take_lock(path)
            if self.watcher is not None and self.sources is not None:
                for removed in clean_stale_temps(self.sources):
                    log.info("removed %s, left by a write that was killed", removed)
                await self.watcher.reload_async()
                if self.watcher.current is None and self.watcher.error is not None:
                    log.error("config not loaded, running with the built-in defaults: %s", self.watcher.error)
            self._restore()
            loop = asyncio.get_running_loop()
            for path, plane in ((self.socket_path, HARNESS), (self.operator_path, OPERATOR)):
                sock = self._bind(path)
                # A burst of hook processes connects at once; the kernel caps this at net.core.somaxconn.
                server = await loop.create_unix_server(self._factory(plane), sock=sock, backlog=4096)
                self._servers[path] = server
        except BaseException:
            self._close_servers()
            self._release_locks()
            if self.store is not None:
                self.store.close()
            raise
        if peer_option() is None:
            log.warning(
                "this platform (%s) cannot name a socket peer's user: only the sockets' private (0700) directories "
                "keep other users out",
                sys.platform,
            )
        if self.watcher is not None:
            self._tasks.append(asyncio.create_task(self.watcher.run(self._stopped, reload=self._reload), name="watch"))
        self._tasks.append(asyncio.create_task(self._ticker(), name="subscriber-tick"))
        if self.store is not None and self.store.running:
            self._tasks.append(asyncio.create_task(self._saver(), name="state-saver"))
        log.info(
            "guard %s listening on %s (harnesses) and %s (operator); pid %d, protocol %d",
            __version__,
            self.socket_path,
            self.operator_path,
            os.getpid(),
            PROTOCOL_VERSION,
        )

    def _factory(self, plane: str) -> Callable[[], _Conn]:
        return lambda: _Conn(self, plane)

    def _bind(self, path: Path) -> socket.socket:
        self._clear_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.setblocking(False)
        st = os.stat(path)
        self._bound[path] = (st.st_dev, st.st_ino)
        return sock

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
        self._locks.append(fd)

    def _release_locks(self) -> None:
        for fd in self._locks:
            os.close(fd)  # closing releases the flock
        self._locks.clear()

    def _close_servers(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()

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
        self._close_servers()
        for conn in list(self.conns.values()):
            if conn.transport is not None:
                conn.transport.close()
        for task in [*self._tasks, *self._running_commands]:
            task.cancel()
        for task in [*self._tasks, *self._running_commands]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.store is not None and self.store.running:
            await self._save(everything=True)
            await asyncio.to_thread(self.store.close)
        await asyncio.to_thread(self.incidents.close)
        for path in (self.socket_path, self.operator_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._release_locks()
        log.info("guard stopped")

    # -- output and jobs ------------------------------------------------------------------------

    def flush(self) -> None:
        """Write every woken connection's output, and start the jobs the session asked for."""
        session = self.session
        self.woken_again = True
        while self.woken_again:
            self.woken_again = False
            while session.woken:
                ch = session.woken.pop()
                conn = self.conns.get(ch)
                if conn is not None:
                    conn.write_out()
            self._start_jobs()

    def _start_jobs(self) -> None:
        session = self.session
        jobs = session.jobs
        while jobs:
            job = jobs.popleft()
            if isinstance(job, IncidentJob):
                if not self.incidents.record(
                    kind=job.kind, tool=job.tool, count=job.count, limit=job.limit, agent=job.agent, when=job.when
                ):
                    session.stats.incidents_dropped = self.incidents.dropped
            elif isinstance(job, DurableJob):
                if self.store is not None and self.store.running and self._save_wanted is not None:
                    self._waiting_for_save.append(job)  # one save answers every change made before it
                    self._save_wanted.set()
                else:
                    session.complete(job.channel, job.slot, job.data)
                    self.woken_again = True
            elif isinstance(job, ConfigJob):
                self._spawn(self._config_set(job))
            elif isinstance(job, CommandJob):
                self._queue_command(job)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._running_commands.add(task)
        task.add_done_callback(self._running_commands.discard)

    def wake_pump(self) -> None:
        """Frames may be waiting for a subscriber that just caught up: build them soon."""
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._spawn(self._pump())

    async def _pump(self) -> None:
        try:
            while True:
                more = self.session.pump()
                self.flush()
                if not more:
                    return
                await asyncio.sleep(0)  # a part at a time: checks are answered in between
        finally:
            self._pump_scheduled = False

    async def _ticker(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(self.tick)
            ticks += 1
            if ticks % 10 == 0:
                await self._check_sockets()
            try:
                self._refresh_stats()
                self.session.tick(time.monotonic())
                self.flush()
                self.wake_pump()
            except Exception:  # never let a display bug stop the guard
                log.exception("publishing state to subscribers failed")

    async def _check_sockets(self) -> None:
        """A socket file removed from under the guard (a tool call in a sandbox that may write the
        directory can) would make every harness fail open: bind it again, and say so. One replaced
        by another process's is never touched: the log says whose it may be."""
        for path, (dev, ino) in list(self._bound.items()):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                log.error("the socket %s was removed while the guard was serving it; listening there again", path)
                self._servers[path].close()
                plane = HARNESS if path == self.socket_path else OPERATOR
                try:
                    sock = self._bind(path)
                    new = await asyncio.get_running_loop().create_unix_server(
                        self._factory(plane), sock=sock, backlog=4096
                    )
                except OSError as exc:
                    log.error("cannot listen on %s again: %s", path, exc)
                    continue
                self._servers[path] = new
                continue
            except OSError:
                continue
            if (st.st_dev, st.st_ino) != (dev, ino):
                log.error(
                    "the socket %s was replaced by another file (owner uid %d) while the guard served it: harnesses "
                    "may be talking to an impostor; the guard leaves it alone",
                    path,
                    st.st_uid,
                )
                self._bound[path] = (st.st_dev, st.st_ino)  # say it once

    def _refresh_stats(self) -> None:
        stats = self.session.stats
        stats.incident_log = self.incidents.path
        stats.incident_log_error = self.incidents.last_error
        stats.incidents_dropped = self.incidents.dropped
        if self.store is not None:
            stats.state_file = str(self.store.path)
            stats.state_error = self.store.error

    # -- config ---------------------------------------------------------------------------------

    def _config_loaded(self, loaded: Loaded) -> None:
        self._apply(loaded.effective)
        self._config_error = None
        for note in loaded.notes:
            log.warning("config: %s", note)
        log.info("config in force from %s", loaded.config_from or "the built-in defaults")
        self.session.set_config_frame(self._config_frame())

    def _config_failed(self, error: ConfigError) -> None:
        self._config_error = str(error)
        self.session.set_config_frame(self._config_frame())

    def _apply(self, config: Config) -> None:
        self.guard.config = config
        self.incidents.path = config.incident_log

    def _incident_error(self, message: str) -> None:
        log.warning("%s (decisions are unaffected)", message)

    def _config_frame(self) -> ConfigFrame:
        loaded = self.watcher.current if self.watcher is not None else None
        target = None
        if loaded is not None:
            with contextlib.suppress(ConfigError):
                target = str(loaded.write_target())
        return ConfigFrame(
            values=self.guard.config.to_mapping(),
            disabled=bool(loaded and loaded.disabled),
            source=str(loaded.config_from.path) if loaded and loaded.config_from else None,
            target=target,
            layers=[str(layer.path) for layer in loaded.layers] if loaded else [],
            notes=list(loaded.notes) if loaded else list(self.guard.config.warnings),
            error=self._config_error,
        )

    async def _reload(self) -> bool:
        """A reload by the file watch: one at a time with config writes, the parse off the loop."""
        assert self._config_lock is not None and self.watcher is not None
        async with self._config_lock:
            return await self.watcher.reload_async()

    def _write_changes(self, changes: dict[str, Any]) -> tuple[Loaded, Path]:
        """On a worker thread: read the layers as they are now, apply `changes` on top, write the target
        layer only if nobody changed it meanwhile (else read again and retry), read back what is in force."""
        assert self.sources is not None
        for _ in range(CONFIG_WRITE_TRIES):
            loaded = load(self.sources)
            target = loaded.write_target()
            base = read_text(target)
            current = load(self.sources)  # read after `base`: a change in between is caught by the write
            new = Config.from_mapping({**current.config.to_mapping(), **changes})
            try:
                write_config(target, new, based_on=NO_FILE if base is None else base)
            except PatchConflict:
                continue
            return load(self.sources), target
        raise ConfigError(f"the patch layer kept changing while it was written ({CONFIG_WRITE_TRIES} tries); try again")

    async def _config_set(self, job: ConfigJob) -> None:
        session = self.session
        try:
            reply = await self._config_change(job.changes)
        except Exception as exc:  # a bug here must not leave the connection's replies stuck
            log.exception("config_set failed")
            reply = ErrorReply("internal", f"config_set failed: {exc}")
        if session.complete(job.channel, job.slot, reply.encode(job.rid)):
            conn = self.conns.get(job.channel)
            if conn is not None:
                conn.schedule_turn()
        self.flush()

    async def _config_change(self, changes: dict[str, Any]) -> ConfigReply | ErrorReply:
        """Validate, write the patch layer (off the loop, one write at a time), apply; the reply comes
        only once the change is on disk and in force."""
        assert self._config_lock is not None
        async with self._config_lock:
            if self.watcher is None:
                try:
                    new = Config.from_mapping({**self.guard.config.to_mapping(), **changes})
                except ConfigError as exc:
                    return _bad_config(exc)
                self._apply(new)
                self.session.set_config_frame(self._config_frame())
                log.info("config set by the operator %s; in memory only (no patch layer)", changes)
                return ConfigReply(self._config_frame(), None, set=True)
            try:
                loaded, target = await asyncio.to_thread(self._write_changes, changes)
            except PatchConflict as exc:
                return ErrorReply("write_failed", f"config not saved: {exc}")
            except ConfigError as exc:
                if self.watcher.current is None and self.watcher.error is not None:
                    return ErrorReply("config_broken", f"fix the patch layer first: {self.watcher.error}")
                if getattr(exc, "path", None) is not None:  # a PatchError: the file, not the values
                    return ErrorReply("write_failed", f"config not saved: {exc}")
                return _bad_config(exc)
            except OSError as exc:
                return ErrorReply("write_failed", f"config not saved: {exc.strerror or exc}")
            self.watcher.accept(loaded)
            log.info("config set by the operator %s; written to %s", changes, target)
            return ConfigReply(self._config_frame(), str(target), set=True)

    # -- interrupt commands ---------------------------------------------------------------------

    def _fill_command(self, agent: str, reason: str) -> list[str] | None:
        template = self.guard.config.interrupt_command
        return fill_command(template, agent, reason) if template else None

    def _queue_command(self, job: CommandJob) -> None:
        if any(queued.agent == job.agent for queued in self._commands):
            return  # already waiting for this agent: once is enough
        if len(self._commands) >= INTERRUPT_COMMANDS_QUEUED:
            self.session.stats.commands_dropped += 1
            if self.session.stats.commands_dropped == 1 or self.session.stats.commands_dropped % 100 == 0:
                log.warning(
                    "interrupt command for agent %r dropped: %d commands already wait (%d dropped so far)",
                    job.agent,
                    len(self._commands),
                    self.session.stats.commands_dropped,
                )
            return
        self._commands.append(job)
        self._start_commands()

    @property
    def commands_in_flight(self) -> int:
        """Interrupt commands waiting or running."""
        running = sum(1 for t in self._running_commands if t.get_name() == "interrupt-command")
        return len(self._commands) + running

    def _start_commands(self) -> None:
        running = sum(1 for t in self._running_commands if t.get_name() == "interrupt-command")
        while self._commands and running < INTERRUPT_COMMANDS_AT_ONCE and not self._stopped.is_set():
            job = self._commands.popleft()
            task = asyncio.get_running_loop().create_task(
                self._interrupt_command(job.argv, job.agent), name="interrupt-command"
            )
            self._running_commands.add(task)
            task.add_done_callback(self._command_done)
            running += 1

    def _command_done(self, task: asyncio.Task[None]) -> None:
        self._running_commands.discard(task)
        if not self._stopped.is_set():
            self._start_commands()

    async def _interrupt_command(self, argv: list[str], agent: str) -> None:
        """Run the operator's interrupt command (no shell), bounded in time and output; log how it ended."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout kills its children too
            )
        except OSError as exc:
            if exc.errno in (24, 23):  # EMFILE, ENFILE
                log.warning(
                    "interrupt command for agent %r could not start: out of file descriptors (%s); checks go on",
                    agent,
                    exc,
                )
            else:
                log.warning("interrupt command for agent %r could not start (%s): %s", agent, argv[0], exc)
            return
        except ValueError as exc:
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

    # -- the state file -------------------------------------------------------------------------

    def _restore(self) -> None:
        if self.store is None:
            return
        loaded = self.store.open()
        for note in loaded.notes:
            log.warning("state: %s", note)
        if loaded.agents or loaded.guard is not None:
            guard_record = loaded.guard or GuardRecord()
            self.session.restore(
                ((r.state, r.harness, r.parent) for r in loaded.agents),
                guard_record.interrupts,
                paused=guard_record.paused,
                checks=guard_record.checks,
                denies=guard_record.denies,
                windows=loaded.windows,
            )
            log.info(
                "state restored from %s: %d agent(s), %d interrupt(s)%s",
                self.store.path,
                len(loaded.agents),
                len(guard_record.interrupts),
                ", guard paused" if guard_record.paused else "",
            )
        self.session.stats.state_file = str(self.store.path)
        self._saved_checks = self.guard.checks

    def _state_error(self, message: str) -> None:
        self.session.stats.state_error = message

    def _guard_record(self) -> GuardRecord:
        interrupts = []
        for agent, reason, denies in self.guard.interrupts():
            meta = self.session.meta.get(agent)
            interrupts.append((agent, reason, denies, meta.harness if meta else "", meta.parent if meta else None))
        return GuardRecord(self.guard.paused, self.guard.checks, dict(self.guard.denies), interrupts)

    async def _save(self, *, everything: bool = False) -> None:
        """Hand what changed to the state file's thread, a slice at a time; returns once it is on disk."""
        store, session = self.store, self.session
        if store is None or not store.running:
            return
        items: list[Any] = []
        while True:
            batch, more = session.take_unsaved(SAVE_SLICE)
            items.extend(batch)
            if not more:
                break
            await asyncio.sleep(0)  # exporting thousands of agents: checks are answered in between
        now = time.monotonic()
        counters_due = self.guard.checks != self._saved_checks and now - self._saved_guard_at > 2.0
        if session.unsaved_guard or counters_due or everything:
            session.unsaved_guard = False
            self._saved_checks, self._saved_guard_at = self.guard.checks, now
            items.append(self._guard_record())
        if not items:
            return
        done = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def settle() -> None:
            if not done.done():
                done.set_result(None)

        def written() -> None:
            loop.call_soon_threadsafe(settle)

        store.save(items, written)
        await done

    async def _saver(self) -> None:
        """Save what changed every SAVE_EVERY seconds, and at once when an operator's change waits
        for it; every change that waited is answered by the save that started after it."""
        assert self._save_wanted is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._save_wanted.wait(), SAVE_EVERY)
            self._save_wanted.clear()
            waiting, self._waiting_for_save = self._waiting_for_save, []
            try:
                await self._save()
            except Exception:
                log.exception("saving the guard's state failed")
            finally:
                for job in waiting:
                    self.session.complete(job.channel, job.slot, job.data)
                if waiting:
                    self.flush()


def _bad_config(exc: ConfigError) -> ErrorReply:
    problems = [{"key": p.key, "expected": p.expected, "found": p.found} for p in exc.problems]
    return ErrorReply("bad_config", str(exc), problems)


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
    """`pid 4242 (cbconsole --headless …)`: the command line where /proc has it, else `ps`, else the pid."""
    try:
        pid = int(text)
    except ValueError:
        return "a process whose pid is unknown"
    cmdline = ""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        import subprocess

        with contextlib.suppress(OSError, subprocess.SubprocessError):
            cmdline = subprocess.run(
                ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=2
            ).stdout.strip()
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
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(server.stop()))
    try:
        await server.serve_forever()
    finally:
        await server.stop()


def serve(server: GuardServer) -> int:
    """Run a guard in this process until SIGINT/SIGTERM/SIGHUP (the headless mode). Returns an exit status."""
    loop_name = _install_uvloop()
    # Threads (the state writer, config parsing) hand the interpreter back within a millisecond, not 5.
    sys.setswitchinterval(0.001)
    log.info("event loop: %s", loop_name)
    try:
        asyncio.run(_run(server))
    except ServerError as exc:
        log.error("%s", exc)
        return 1
    return 0
