"""The guard server: the asyncio transport between two private Unix sockets and the protocol session.

The harness socket serves what harnesses need (hello, check, agent_end, ping); the operator socket,
in a directory of its own, serves everything. This module only moves bytes: asyncio protocols hand
what they read to `ServerSession` (breaker/session.py) and write back what it gives, and the jobs the
session asks for go to the parts that do that I/O — the patch layer (breaker/reload.py: read and
written off the event loop's thread, one write at a time), interrupt commands (breaker/commands.py),
the incident log (a thread of its own), the state file (breaker/keeper.py, breaker/store.py), and the
outputs that run beside the guard (breaker/outputs.py: the Prometheus metrics, fed a copy each tick, and
the OpenTelemetry export). The sockets on disk are breaker/listen.py's. A check never waits on any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from breaker import __version__
from breaker.channel import WRITE_HIGH, Channel
from breaker.commands import InterruptCommands, fill_command
from breaker.config import Config, ConfigError
from breaker.engine import Guard
from breaker.incidents import QueuedIncidentLog
from breaker.jobs import CommandJob, ConfigJob, DecisionJob, DurableJob, IncidentJob, JudgeJob
from breaker.judge import JUDGE_FROM, Judge
from breaker.keeper import StateKeeper
from breaker.listen import Listener, ServerError
from breaker.outputs import Outputs
from breaker.patch import Loaded, PatchSources, clean_stale_temps
from breaker.paths import OPERATOR_SOCKET_ENV, default_operator_socket_path, default_socket_path, peer_ids, peer_option
from breaker.protocol import HARNESS, MAX_FRAME, OPERATOR, PROTOCOL_VERSION, ConfigFrame, ConfigReply, ErrorReply
from breaker.reload import ConfigWatcher, config_frame, write_changes
from breaker.session import ServerSession
from breaker.store import StateLocked, StateStore
from breaker.vocab import Plane

if TYPE_CHECKING:  # imported only once the metrics are switched on
    from breaker.metrics import MetricsView

__all__ = ["GuardServer", "ServerError", "fill_command", "serve"]

log = logging.getLogger("cbconsole.guard")


class _Conn(asyncio.Protocol):
    """One connection: bytes to the session, its output back to the socket."""

    def __init__(self, server: GuardServer, plane: Plane) -> None:
        self.server = server
        self.plane = plane
        self.transport: asyncio.Transport | None = None
        self.ch: Channel | None = None
        self.turn_scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, so no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)
        uid, pid = peer_ids(transport.get_extra_info("socket"))
        self.ch = ch = self.server.session.open(self.plane, uid, pid)
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
            if not self.ch.closing and self.ch.buf.pending():
                self.schedule_turn()
            self.server.flush()

    def eof_received(self) -> bool | None:
        if self.ch is not None:
            if self.server.session.eof(self.ch):
                self.schedule_turn()
            self.server.flush()
        return True  # keep our half open: replies still go out

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
        if self.server.session.turn(ch):
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
        metrics: str | None = None,
        otel: bool = False,
    ) -> None:
        """`metrics` (HOST:PORT, `cbconsole --headless --metrics`) serves them there for the process's life,
        whatever the `metrics` setting says; None follows the setting. `otel` exports denies and warnings
        whatever the `otelEvents` setting says."""
        self.socket_path = Path(socket_path) if socket_path is not None else default_socket_path()
        if operator_socket is None:
            operator_socket = default_operator_socket_path(self.socket_path)
        self.operator_path = Path(operator_socket)
        self.listeners = {
            HARNESS: Listener(self.socket_path),
            OPERATOR: Listener(self.operator_path, f"--operator-socket PATH / ${OPERATOR_SOCKET_ENV}"),
        }
        self.sources = sources
        self.tick = tick
        self.guard = Guard(config)
        self.commands = InterruptCommands()
        self.session = ServerSession(
            self.guard,
            clock=clock,
            owner_uid=os.getuid(),
            pid=os.getpid(),
            tick=tick,
            max_frame=max_frame,
            fill_command=self._fill_command,
        )
        self.judge = Judge()
        self.session.judge_from = JUDGE_FROM
        self.conns: dict[Channel, _Conn] = {}
        self.incidents = QueuedIncidentLog(self.guard.config.incident_log, on_error=self._incident_error)
        self.watcher: ConfigWatcher | None = None
        if sources is not None and config is None:
            self.watcher = ConfigWatcher(sources, on_change=self._config_loaded, on_error=self._config_failed)
        self._config_error: str | None = None
        self._reloads_failed = 0
        self._config_lock = asyncio.Lock()  # one patch-layer write (or reload) at a time
        store = StateStore(Path(state_path), hash_seed, on_error=self._state_error) if state_path else None
        self.keeper = StateKeeper(self.session, store, self._saved) if store is not None else None
        self.outputs = Outputs(self.session, metrics_flag=metrics, otel_flag=otel, view=self._metrics_view)
        board = self.session.stats  # the stats read these parts whenever they are asked for
        board.socket, board.operator_socket = str(self.socket_path), str(self.operator_path)
        board.host = platform.node()
        board.incidents, board.commands, board.state, board.outputs = (
            self.incidents,
            self.commands,
            self.keeper,
            self.outputs,
        )
        self._tasks: list[asyncio.Task[Any]] = []
        self._jobs: set[asyncio.Task[Any]] = set()
        self._pump_scheduled = False
        self._woken_again = False
        self._stopped = asyncio.Event()
        self._stopping: asyncio.Future[None] | None = None
        self._started = False

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Take both socket paths (refusing a live holder), load the saved state and the config, listen."""
        if self.operator_path.parent == self.socket_path.parent:
            raise ServerError(
                f"the operator's socket {self.operator_path} is in the harness socket's directory: it needs a "
                "directory of its own, so that reaching one does not reach the other"
            )
        try:
            for listener in self.listeners.values():
                listener.prepare()
            if self.watcher is not None and self.sources is not None:
                for removed in clean_stale_temps(self.sources):
                    log.info("removed %s, left by a write that was killed", removed)
                await self.watcher.reload_async()
                if self.watcher.current is None and self.watcher.error is not None:
                    log.error("config not loaded, running with the built-in defaults: %s", self.watcher.error)
            if self.keeper is not None:
                try:
                    self.keeper.restore()
                except StateLocked as exc:
                    raise ServerError(str(exc)) from None
            await self.outputs.follow(self.guard.config, fatal=True)
            for plane, listener in self.listeners.items():
                await listener.listen(self._factory(plane))
        except BaseException:
            for listener in self.listeners.values():
                listener.release()
            if self.keeper is not None:
                self.keeper.store.close()
            await self.outputs.close()
            raise
        self._started = True
        if peer_option() is None:
            log.warning(
                "this platform (%s) cannot name a socket peer's user: only the sockets' private (0700) directories "
                "keep other users out",
                sys.platform,
            )
        if self.watcher is not None:
            self._tasks.append(asyncio.create_task(self.watcher.run(self._stopped, reload=self._reload), name="watch"))
        self._tasks.append(asyncio.create_task(self._ticker(), name="subscriber-tick"))
        if self.keeper is not None and self.keeper.store.running:
            self._tasks.append(asyncio.create_task(self.keeper.run(), name="state-saver"))
        log.info(
            "guard %s listening on %s (harnesses) and %s (operator); pid %d, protocol %d",
            __version__,
            self.socket_path,
            self.operator_path,
            os.getpid(),
            PROTOCOL_VERSION,
        )

    def _factory(self, plane: Plane) -> Callable[[], _Conn]:
        return lambda: _Conn(self, plane)

    async def serve_forever(self) -> None:
        await self._stopped.wait()

    async def stop(self) -> None:
        """Stop once; whoever asks (a signal's handler, then `serve`'s own) waits for that stop to end: a
        second stop that returned at once let the loop end and cancel the first before it removed the
        sockets."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        self._stopped.set()
        for listener in self.listeners.values():
            listener.close()
        for conn in list(self.conns.values()):
            if conn.transport is not None:
                conn.transport.close()
        for task in [*self._tasks, *self._jobs]:
            task.cancel()
        for task in [*self._tasks, *self._jobs]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.commands.stop()
        await self.judge.close()
        await self.outputs.close()
        if self.keeper is not None and self.keeper.store.running:
            await self.keeper.save(everything=True)
            await asyncio.to_thread(self.keeper.store.close)
        await asyncio.to_thread(self.incidents.close)
        for listener in self.listeners.values():
            listener.release()
        log.info("guard stopped")

    # -- output and jobs ------------------------------------------------------------------------

    def flush(self) -> None:
        """Write every woken connection's output, and start the jobs the session asked for."""
        session = self.session
        self._woken_again = True
        while self._woken_again:
            self._woken_again = False
            while session.woken:
                conn = self.conns.get(session.woken.pop())
                if conn is not None:
                    conn.write_out()
            self._start_jobs()

    def _start_jobs(self) -> None:
        session = self.session
        jobs = session.jobs
        while jobs:
            job = jobs.popleft()
            if isinstance(job, IncidentJob):
                self.incidents.record(
                    kind=job.kind, tool=job.tool, count=job.count, limit=job.limit, agent=job.agent, when=job.when
                )
            elif isinstance(job, DurableJob):
                if self.keeper is not None and self.keeper.store.running:
                    self.keeper.wait_for_save(job)  # one save answers every change made before it
                else:
                    session.complete(job.channel, job.slot, job.data)
                    self._woken_again = True
            elif isinstance(job, ConfigJob):
                self._spawn(self._config_set(job))
            elif isinstance(job, CommandJob):
                self.commands.submit(job.argv, job.agent, job.reason)
            elif isinstance(job, DecisionJob):
                self.outputs.emit(job)
            elif isinstance(job, JudgeJob):
                self._spawn(self._judge(job))

    async def _judge(self, job: JudgeJob) -> None:
        answer = await self.judge.ask(job.frame, job.ignore)
        if self.session.judged(job.channel, job.slot, len(job.frame), answer):
            conn = self.conns.get(job.channel)
            if conn is not None:
                conn.schedule_turn()  # its requests that waited for the frame go on
        self.flush()

    def _saved(self, jobs: list[DurableJob]) -> None:
        for job in jobs:
            self.session.complete(job.channel, job.slot, job.data)
        self.flush()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

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
            if ticks % 10 == 0:  # about once a second: is each socket file still ours?
                for plane, listener in self.listeners.items():
                    await listener.recheck(self._factory(plane))
            try:
                self.outputs.publish()
                self.session.tick(time.monotonic())
                self.flush()
                self.wake_pump()
            except Exception:  # never let a display bug stop the guard
                log.exception("publishing state to subscribers failed")

    def _fill_command(self, agent: str, reason: str) -> list[str] | None:
        template = self.guard.config.interrupt_command
        return fill_command(template, agent, reason) if template else None

    def _incident_error(self, message: str) -> None:
        log.warning("%s (decisions are unaffected)", message)

    def _state_error(self, message: str) -> None:
        if self.keeper is not None:
            self.keeper.failed(message)

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
        self._reloads_failed += 1
        self.session.set_config_frame(self._config_frame())

    def _apply(self, config: Config) -> None:
        self.guard.config = config
        self.incidents.path = config.incident_log
        if self._started and not self._stopped.is_set():
            self._spawn(self.outputs.follow(config, fatal=False))

    # -- the metrics' view ---------------------------------------------------------------------

    def _metrics_view(self) -> MetricsView:
        """A fresh copy of the counts for the metrics thread (only asked for while the metrics are served)."""
        from breaker.metrics import MetricsView

        session, guard = self.session, self.guard
        planes: dict[Plane, int] = {HARNESS: 0, OPERATOR: 0}
        for ch in session.channels:
            planes[ch.plane] = planes.get(ch.plane, 0) + 1
        loaded = self.watcher.current if self.watcher is not None else None
        return MetricsView(
            taken=time.monotonic(),
            tally=session.tally.copy(),
            agents=len(guard),
            interrupted=guard.interrupted_count,
            connections=tuple(planes.items()),
            paused=guard.paused,
            enabled=guard.config.enabled and not (loaded is not None and loaded.disabled),
            reloads_ok=self.watcher.reloads if self.watcher is not None else 0,
            reloads_failed=self._reloads_failed,
            config_ok=self.watcher is None or self.watcher.error is None,
            state_ok=None if self.keeper is None else not self.keeper.state_error,
            incidents_dropped=self.incidents.dropped,
            commands_dropped=self.commands.dropped,
        )

    def _config_frame(self) -> ConfigFrame:
        loaded = self.watcher.current if self.watcher is not None else None
        return config_frame(self.guard.config, loaded, self._config_error)

    async def _reload(self) -> bool:
        """A reload by the file watch: one at a time with config writes, the parse off the loop."""
        assert self.watcher is not None
        async with self._config_lock:
            return await self.watcher.reload_async()

    async def _config_set(self, job: ConfigJob) -> None:
        try:
            reply = await self._config_change(job.changes)
        except Exception as exc:  # a bug here must not leave the connection's replies stuck
            log.exception("config_set failed")
            reply = ErrorReply("internal", f"config_set failed: {exc}")
        if self.session.complete(job.channel, job.slot, reply.encode(job.rid)):
            conn = self.conns.get(job.channel)
            if conn is not None:
                conn.schedule_turn()  # its requests that waited for the change go on
        self.flush()

    async def _config_change(self, changes: dict[str, Any]) -> ConfigReply | ErrorReply:
        """Write the patch layer (off the loop, one write at a time) and apply; the reply comes only
        once the change is on disk and in force."""
        async with self._config_lock:
            if self.watcher is None or self.sources is None:
                try:
                    new = self.guard.config.updated(changes)
                except ConfigError as exc:
                    return _bad_config(exc)
                self._apply(new)
                self.session.set_config_frame(self._config_frame())
                log.info("config set by the operator %s; in memory only (no patch layer)", changes)
                return ConfigReply(self._config_frame(), None, set=True)
            try:
                loaded, target = await asyncio.to_thread(write_changes, self.sources, changes)
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


def _bad_config(exc: ConfigError) -> ErrorReply:
    problems = [{"key": p.key, "expected": p.expected, "found": p.found} for p in exc.problems]
    return ErrorReply("bad_config", str(exc), problems)


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
