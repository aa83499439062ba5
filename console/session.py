"""The guard a console runs against, from start to end: found or started, restarted, fed, stopped.

One class per way of running — `AttachedGuard`, `OwnGuard`, `ReplayGuard`, `DemoGuard` — behind the
interface of `GuardSession`, which is all the app uses: `open` reaches the guard and feeds its state
frames to the console's state; `on_quit` says what quitting does to the guard; `close` ends what this
console started, once; `end_on_signal` applies the quit policy without asking. No Textual here: the app
hands over the state to feed and a way to tell the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from breaker.paths import default_operator_socket_path, python_child
from breaker.protocol import StateFrame
from console.link import GuardLink, LinkError
from console.state import ConsoleState
from console.supervisor import GuardSupervisor, default_log_path, live_guard, stop_process

__all__ = [
    "AttachedGuard",
    "DemoGuard",
    "Feeder",
    "FleetMember",
    "FleetSession",
    "GuardOptions",
    "GuardSession",
    "OnQuit",
    "OwnGuard",
    "ReplayGuard",
    "Tell",
    "ending_note",
    "operator_socket_for",
]

DEMO_PATCH = """\
# The demo's own patch layer (a temporary file): edit it from the console, or by hand.
- id: circuit-breaker
  config:
    duplicateLimit: 6
    window: 200
    maxCallsPerAgent: 150
"""


class Tell(Protocol):
    """How a session tells the operator something (the app shows it as plain text, never markup)."""

    def __call__(
        self, message: str, *, title: str = "", severity: str = "information", timeout: float | None = None
    ) -> None: ...


class OnQuit(enum.Enum):
    """What quitting does to the guard."""

    STOP = "stop"  # stop whatever this console started (a guard it attached to is never its to stop)
    LEAVE = "leave"  # leave the guard this console started serving
    ASK = "ask"  # harnesses use the guard this console started: the operator chooses


@dataclass(frozen=True)
class GuardOptions:
    """How the console starts a guard: the flags it passes to `python -m breaker.headless`."""

    state: str | None = None  # --state PATH or "none"; None: the guard's default state file
    patches: tuple[str, ...] = ()
    profile: str | None = None
    log_path: Path = field(default_factory=default_log_path)  # the child's stderr, and the console's notes
    temporary_dir: Path | None = None  # everything of a guard that ends with the console (the demo's)


class GuardSession:
    """A guard reached over its operator socket. The base starts nothing and drives nothing; subclasses
    start a guard (`_reach`), feed it (`_feed`), and choose what quitting does (`on_quit`)."""

    socket_path: Path  # the harness socket
    operator_socket: Path  # the operator's socket: the only one the console talks to
    leave_running = False  # a guard this console starts outlives it (--leave-running): it does not watch the console
    keeps_used_guard = False  # ending without asking leaves a guard it started serving the harnesses that use it
    _state: ConsoleState
    _tell: Tell

    def __init__(self) -> None:
        self.link: GuardLink | None = None
        self.supervisor: GuardSupervisor | None = None  # set when this console started the guard
        self.feeder: Feeder | None = None
        self.ending = False  # set once the console is ending: nothing more is started (nor drawn)
        self._opened = False
        self._settled = asyncio.Event()  # open() is done: every child it starts is started (or never will be)
        self._closing: asyncio.Future[bool] | None = None

    @property
    def owns_guard(self) -> bool:
        return self.supervisor is not None

    def link_for(self, guard: int) -> GuardLink | None:
        """The link to guard number `guard` of the console's state (a session of one guard has one)."""
        return self.link if guard == 0 else None

    def guard_names(self) -> list[str] | None:
        """The operator's names for the guards of a console over several (see FleetSession); None: one guard."""
        return None

    # -- start --------------------------------------------------------------------------------------

    async def open(self, state: ConsoleState, tell: Tell) -> None:
        """Reach the guard (starting it if this session does), subscribe to its frames, start its feeder."""
        self._state, self._tell = state, tell
        self._opened = True
        try:
            await self._reach()
            if self.ending:
                return  # ended while the guard was starting: close() stops it
            self.link = GuardLink(self.operator_socket, on_frame=state.apply, on_status=self._link_status)
            self.link.start()
            self.feeder = self._feed()
            if self.feeder is not None:
                self.feeder.start(self.link, tell)
        finally:
            self._settled.set()

    async def _reach(self) -> None:
        """Find or start the guard. The base starts none: the link waits for a guard to answer."""

    def _feed(self) -> Feeder | None:
        """What drives the guard beside its harnesses, if anything."""
        return None

    async def _attach_or_start(self, options: GuardOptions, env: Mapping[str, str] | None = None) -> None:
        """Attach to the guard answering on the socket, else start one as this console's child."""
        pid = await asyncio.to_thread(live_guard, self.socket_path)
        if self.ending:
            return  # ended while looking for a guard: start nothing
        if pid is not None:
            self._state.set_guard_status("attached", f"already running (pid {pid})")
            self._tell(f"Attached to the guard already running on {self.socket_path} (pid {pid}).")
            return
        await self._start(options, env)

    async def _start(self, options: GuardOptions, env: Mapping[str, str] | None = None) -> None:
        self.supervisor = GuardSupervisor(
            self.socket_path,
            operator_socket=self.operator_socket,
            state=options.state,
            patches=list(options.patches),
            profile=options.profile,
            log_path=options.log_path,
            on_status=self._supervisor_status,
            env=dict(env) if env is not None else None,
            leave_running=self.leave_running,
            keep_if_used=self.keeps_used_guard,
            temporary_dir=options.temporary_dir,
        )
        await self.supervisor.start()

    def _supervisor_status(self, status: str, note: str) -> None:
        self._state.set_guard_status(status, note)
        if status in ("restarting", "stopped"):
            severity = "warning" if status == "restarting" else "error"
            self._tell(note, title="Guard", severity=severity, timeout=10)

    def _link_status(self, status: str, note: str) -> None:
        state = self._state
        if status == "connected":
            owned = self.owns_guard
            state.set_guard_status("running" if owned else "attached", "" if owned else state.guard_note)
        elif not (self.owns_guard and state.guard_status in ("starting", "restarting", "stopped")):
            state.set_guard_status(status, note)  # the supervisor's word on its own guard wins (starting: binding)

    # -- end ----------------------------------------------------------------------------------------

    def on_quit(self, harnesses: Mapping[str, int], *, asking: bool = True) -> OnQuit:
        """What quitting does to the guard, given the harnesses using it; never ASK without `asking`."""
        return OnQuit.STOP

    async def close(self, leave_running: bool = False) -> bool:
        """Stop the feeder, close the link, stop (or leave) the guard this console started: once, whoever
        asks first (a quit and a signal may both ask). Returns whether the guard was left running."""
        self.ending = True
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(leave_running))
        return await asyncio.shield(self._closing)

    async def _close(self, leave_running: bool) -> bool:
        if self._opened:
            await self._settled.wait()  # `ending` is set: open() starts nothing more, and soon returns
        if self.feeder is not None:
            await self.feeder.stop()
        if self.link is not None:
            await self.link.close()
        if self.supervisor is None:
            return False
        left = leave_running and self.supervisor.pid is not None
        if leave_running:
            self.supervisor.detach()
        else:
            await self.supervisor.stop()
        return left

    async def end_on_signal(self, sig: signal.Signals) -> None:
        """The quit policy without asking (the terminal may be gone): `on_quit(…, asking=False)` with
        the harnesses using the guard now; the guard's log says what became of it."""
        self.ending = True
        if self._opened:
            await self._settled.wait()
        harnesses = await self._harnesses_now()
        leave = self.on_quit(harnesses, asking=False) is OnQuit.LEAVE
        pid = self.supervisor.pid if self.supervisor is not None else None
        left = await self.close(leave_running=leave)
        if self.supervisor is not None and pid is not None:
            self.supervisor.note(ending_note(sig.name, pid, left, harnesses))

    async def _harnesses_now(self) -> Mapping[str, int]:
        """Who uses the guard, if that decides anything here (the base's answer never depends on it)."""
        return {}


class AttachedGuard(GuardSession):
    """`cbconsole --attach`: a guard someone else runs. Never started, never stopped; the link waits for it."""

    def __init__(self, socket_path: Path, operator_socket: Path | None = None) -> None:
        super().__init__()
        self.socket_path = socket_path
        self.operator_socket = operator_socket or default_operator_socket_path(socket_path)
        self._told_absent = False  # that no guard answers there: said once (the header goes on counting seconds)

    def _link_status(self, status: str, note: str) -> None:
        super()._link_status(status, note)
        if status == "connected":
            self._told_absent = True  # a guard that goes away later is the header's to show
        elif status == "unreachable" and not self._told_absent:
            self._told_absent = True
            of = f" (the operator socket of {self.socket_path})" if self.socket_path != self.operator_socket else ""
            self._tell(
                f"No guard answers at {self.operator_socket}{of}. cbconsole keeps trying, and attaches as soon as "
                "one does.",
                title="No guard there",
                severity="warning",
                timeout=20,
            )


@dataclass(frozen=True)
class FleetMember:
    """One guard of a console over several: the operator's name for it ("" = its host) and its operator socket."""

    name: str
    operator_socket: Path


def operator_socket_for(path: Path) -> Path:
    """What `--attach PATH` names: an operator socket (a file named `operator.sock`: a guard's own, or one SSH
    forwards), else a guard's harness socket, whose operator socket is beside it (`-operator`)."""
    path = path.expanduser()
    return path if path.name == "operator.sock" else default_operator_socket_path(path, environ={})


class FleetSession(GuardSession):
    """`cbconsole --attach A --attach B …`: several guards someone else runs, each on a link of its own. Each
    guard's frames land in the console's state under its number; its link says when it goes and comes back.
    Never started, never stopped."""

    def __init__(self, members: list[FleetMember]) -> None:
        super().__init__()
        self.members = list(members)
        self.links: list[GuardLink] = []
        self.socket_path = members[0].operator_socket  # a fleet has no harness socket of its own
        self.operator_socket = members[0].operator_socket

    def guard_names(self) -> list[str]:
        return [m.name for m in self.members]

    def link_for(self, guard: int) -> GuardLink | None:
        return self.links[guard] if 0 <= guard < len(self.links) else None

    async def open(self, state: ConsoleState, tell: Tell) -> None:
        self._state, self._tell = state, tell
        self._opened = True
        try:
            for number, member in enumerate(self.members):
                state.set_guard_status("starting", f"reaching {member.operator_socket}", number)

                def on_frame(frame: StateFrame, number: int = number) -> None:
                    state.apply(frame, number)

                def on_status(status: str, note: str, number: int = number) -> None:
                    state.set_guard_status("attached" if status == "connected" else status, note, number)

                link = GuardLink(member.operator_socket, on_frame=on_frame, on_status=on_status)
                self.links.append(link)
                link.start()
            self.link = self.links[0]
        finally:
            self._settled.set()

    async def _close(self, leave_running: bool) -> bool:
        if self._opened:
            await self._settled.wait()
        for link in self.links:
            await link.close()
        return False


class OwnGuard(GuardSession):
    """`cbconsole`: the guard as the console's child (restarted if it dies), or the one already answering
    on the socket. Quitting stops the guard it started — asking first if harnesses use it — unless
    `leave_running`; on a signal, harnesses using it keep it running, and so they do if the console dies
    (the guard itself sees to that: `keeps_used_guard`)."""

    keeps_used_guard = True

    def __init__(
        self,
        socket_path: Path,
        operator_socket: Path | None = None,
        options: GuardOptions | None = None,
        *,
        leave_running: bool = False,
    ) -> None:
        super().__init__()
        self.socket_path = socket_path
        self.operator_socket = operator_socket or default_operator_socket_path(socket_path)
        self.options = options or GuardOptions()
        self.leave_running = leave_running

    async def _reach(self) -> None:
        await self._attach_or_start(self.options)

    def on_quit(self, harnesses: Mapping[str, int], *, asking: bool = True) -> OnQuit:
        if not self.owns_guard:
            return OnQuit.STOP  # attached to a guard already running: nothing of ours to stop
        if self.leave_running:
            return OnQuit.LEAVE
        if harnesses:
            return OnQuit.ASK if asking else OnQuit.LEAVE
        return OnQuit.STOP

    async def _harnesses_now(self) -> Mapping[str, int]:
        """The guard's own count at this moment; the last state frame's if it cannot say within a second."""
        if self.owns_guard and self.link is not None and self.link.connected:
            with contextlib.suppress(LinkError):
                stats = await self.link.stats(timeout=1.0)
                if stats is not None:
                    return stats.harnesses
        return self._state.harnesses if self.owns_guard else {}


class ReplayGuard(GuardSession):
    """`cbconsole --replay PATH…`: transcripts played into the guard answering on the socket (or one
    this console starts) by `cbreplay --feed`. Quitting stops the feeder and a guard it started."""

    def __init__(
        self,
        socket_path: Path,
        paths: list[str],
        *,
        speed: float = 1.0,
        operator_socket: Path | None = None,
        options: GuardOptions | None = None,
    ) -> None:
        super().__init__()
        self.socket_path = socket_path
        self.operator_socket = operator_socket or default_operator_socket_path(socket_path)
        self.options = options or GuardOptions()
        self.paths = list(paths)
        self.speed = speed

    async def _reach(self) -> None:
        await self._attach_or_start(self.options)

    def _feed(self) -> Feeder:
        command = [*self.paths, "--feed", "--socket", str(self.socket_path), "--speed", str(self.speed)]
        return Feeder("breaker.replaycli", command, name="replay", says_when_done=True)


class DemoGuard(GuardSession):
    """`cbconsole --demo`: a private guard driven by simulated agents. Everything of it lives in one
    temporary directory — both sockets, its patch layer, its state file, its dsh home — which quitting
    (or a signal) removes with the guard and the agents."""

    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__()
        self.log_path = log_path or default_log_path()
        self.directory: Path | None = None  # made when the session opens, so nothing is left if it never does

    async def _reach(self) -> None:
        self.directory = directory = Path(tempfile.mkdtemp(prefix="cbconsole-demo-"))
        self.socket_path = directory / "h" / "guard.sock"  # short names: a long $TMPDIR still fits
        self.operator_socket = directory / "o" / "operator.sock"
        patch = directory / "cordis.patch.yml"
        patch.write_text(DEMO_PATCH)
        options = GuardOptions(
            state=str(directory / "state.cbstate"),
            patches=(str(patch),),
            log_path=self.log_path,
            temporary_dir=directory,
        )
        await self._start(options, env={**os.environ, "DSH_HOME": str(directory / "dsh")})

    def _feed(self) -> Feeder:
        return Feeder("console.demo", ["--socket", str(self.socket_path)], name="demo")

    async def _close(self, leave_running: bool) -> bool:
        await super()._close(leave_running=False)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        return False


class Feeder:
    """A child process that drives the guard through its harness socket (the demo's agents, or
    `cbreplay --feed`): started once the link is up, stopped when the session closes."""

    def __init__(self, module: str, args: list[str], *, name: str, says_when_done: bool = False) -> None:
        self.command, self.env = python_child(module)  # `python -P`: nothing is imported from the current directory
        self.command += args
        self.name = name
        self.says_when_done = says_when_done  # tell the operator when it ends by itself, and how
        self.proc: asyncio.subprocess.Process | None = None
        self._stopping = False
        self._spawning = asyncio.Lock()  # held while the process is being started
        self._task: asyncio.Task[None] | None = None

    def start(self, link: GuardLink, tell: Tell) -> None:
        self._task = asyncio.create_task(self._run(link, tell), name=f"feeder-{self.name}")

    async def _run(self, link: GuardLink, tell: Tell) -> None:
        for _ in range(100):  # the guard may still be starting; feed it once it answers (or after 10 s)
            if link.connected:
                break
            await asyncio.sleep(0.1)
        try:
            async with self._spawning:  # so that stop() sees either no process or a started one, never half of one
                if self._stopping:
                    return
                self.proc = await asyncio.create_subprocess_exec(
                    *self.command,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                    env=self.env,
                )
        except OSError as exc:
            tell(f"Could not start the {self.name}: {exc}", severity="error", timeout=10)
            return
        _out, err = await self.proc.communicate()
        if self._stopping or not self.says_when_done:
            return
        if self.proc.returncode == 0:
            tell(f"{self.name.capitalize()} finished.", timeout=10)
        else:
            why = " | ".join(err.decode(errors="replace").strip().splitlines()[-3:])
            tell(f"{self.name.capitalize()} failed: {why}", severity="error", timeout=10)

    async def stop(self) -> None:
        self._stopping = True
        async with self._spawning:
            proc = self.proc
        if proc is not None:
            await stop_process(proc)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def ending_note(signal_name: str, pid: int, left: bool, harnesses: Mapping[str, int]) -> str:
    """The line the guard's log gets when the console ends on a signal."""
    if not left:
        return f"cbconsole exited on {signal_name}; it stopped the guard it started (pid {pid})"
    if harnesses:
        names = ", ".join(f"{name} {count}" for name, count in sorted(harnesses.items()))
        serving = f"{sum(harnesses.values())} harness connection(s) ({names})"
    else:
        serving = "(--leave-running)"
    return f"cbconsole exited on {signal_name}; the guard keeps serving {serving}; stop it with kill {pid}"
