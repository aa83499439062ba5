"""The guard as the console's child process: started, watched, restarted if it dies, stopped on quit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

from breaker.client import GuardClient, GuardError, GuardUnavailable
from breaker.paths import python_child
from breaker.protocol import Hello

__all__ = ["GuardSupervisor", "live_guard", "stop_process"]

MAX_QUICK_RESTARTS = 5  # deaths within QUICK seconds of a start before we stop trying
QUICK = 5.0
LEAVE = b"L"  # written on the parent pipe before the console exits leaving its guard running (breaker.headless)


def live_guard(socket_path: Path) -> int | None:
    """The pid of a guard answering on `socket_path` (0 if it did not say), or None if none answers."""
    client = GuardClient(socket_path, timeout=0.5, hello=False)
    try:
        hello = client.request(Hello(harness="cbconsole-probe", role="console"))
    except (GuardUnavailable, GuardError):
        return None
    finally:
        client.close()
    return hello.pid


async def stop_process(proc: asyncio.subprocess.Process, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it is still there after `grace` seconds; returns once it is gone."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


def remove_left_socket(path: Path) -> None:
    """Remove the socket file a killed guard left at `path`: only a socket of ours that nobody listens on."""
    try:
        info = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        return
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            with contextlib.suppress(OSError):
                os.unlink(path)
        except OSError:
            pass  # a listener that is slow to answer, or a path we cannot reach: not ours to remove


class GuardSupervisor:
    """Runs the headless guard with the console's flags; `on_status(status, note)` reports to the screen.

    The guard is a `python -P` child (breaker.paths.python_child): nothing in the directory the console runs in,
    an agent's workspace perhaps, is ever imported by it. Unless `leave_running`, it holds the read end of a
    pipe whose write end only this console holds (`--parent-fd`): however the console ends, `kill -9` too, the
    kernel closes it, and the guard stops as the console would on a signal: with `keep_if_used`, unless harnesses
    are connected then; with `temporary_dir` (the demo's), removing the directory."""

    def __init__(
        self,
        socket_path: Path,
        *,
        operator_socket: Path,
        patches: list[str],
        profile: str | None,
        log_path: Path,
        on_status: Callable[[str, str], None],
        state: str | None = None,
        env: dict[str, str] | None = None,
        leave_running: bool = False,
        keep_if_used: bool = False,
        temporary_dir: Path | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.operator_socket = operator_socket
        self.state = state
        self.patches = patches
        self.profile = profile
        self.log_path = log_path
        self.on_status = on_status
        self.env = env
        self.temporary_dir = temporary_dir
        self.leave_running = leave_running
        self.keep_if_used = keep_if_used
        self._pipe: tuple[int, int] | None = None  # the parent pipe (read end, write end): one for every restart
        self.proc: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self._stopping = False
        self._watch: asyncio.Task[None] | None = None
        self._quick_deaths = 0

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The guard's command line and environment."""
        cmd, env = python_child("breaker.headless", self.env)
        cmd += ["--socket", str(self.socket_path), "--operator-socket", str(self.operator_socket)]
        if self.state:
            cmd += ["--state", self.state]
        for patch in self.patches:
            cmd += ["--patch", patch]
        if self.profile:
            cmd += ["--profile", self.profile]
        if self._pipe is not None:
            cmd += ["--parent-fd", str(self._pipe[0])]
            if self.keep_if_used:
                cmd += ["--if-orphaned", "keep-if-used"]
            if self.temporary_dir is not None:
                cmd += ["--temporary-dir", str(self.temporary_dir)]
        return cmd, env

    async def start(self) -> None:
        await self._spawn()
        self._watch = asyncio.create_task(self._supervise(), name="guard-supervisor")

    async def _spawn(self) -> None:
        if self._pipe is None and not self.leave_running:
            self._pipe = os.pipe()  # neither end inheritable: the guard is handed the read end alone (pass_fds)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting the guard ---\n".encode())
            log.flush()
            command, env = self.command()
            self.proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
                env=env,
                pass_fds=self._pipe[:1] if self._pipe is not None else (),
                start_new_session=True,  # the terminal's signals are the console's, not the guard's
            )
        self._started_at = time.monotonic()

    async def _supervise(self) -> None:
        while not self._stopping:
            assert self.proc is not None
            code = await self.proc.wait()
            if self._stopping:
                return
            quick = time.monotonic() - self._started_at < QUICK
            self._quick_deaths = self._quick_deaths + 1 if quick else 0
            tail = self.log_tail()
            if self._quick_deaths >= MAX_QUICK_RESTARTS:
                self.on_status("stopped", f"the guard keeps dying (exit {code}); not restarting. {tail}")
                return
            self.restarts += 1
            self.on_status("restarting", f"the guard exited (code {code}); restarting (#{self.restarts}). {tail}")
            await asyncio.sleep(min(2.0, 0.2 * 2**self._quick_deaths))
            await self._spawn()

    def log_tail(self, lines: int = 1) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None

    async def stop(self) -> None:
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self.proc is not None:
            await stop_process(self.proc)
            if self.proc.returncode == -signal.SIGKILL:  # it had no time to take its sockets away
                self.note("the guard did not stop within 5 s of SIGTERM; it was killed")
                for path in (self.socket_path, self.operator_socket):
                    remove_left_socket(path)
        self._close_pipe()

    def detach(self) -> None:
        """Leave the guard running when the console exits (its parent pipe says so: it stops watching it)."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
        self._close_pipe(LEAVE)

    def _close_pipe(self, word: bytes = b"") -> None:
        if self._pipe is None:
            return
        read, write = self._pipe
        self._pipe = None
        with contextlib.suppress(OSError):
            if word:
                os.write(write, word)
        for fd in (read, write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def note(self, line: str) -> None:
        """Append a line of the console's own to the guard's log: the operator reads both in one place."""
        with contextlib.suppress(OSError), open(self.log_path, "a") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {line} ---\n")


def default_log_path() -> Path:
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return state / "cbconsole" / "guard.log"
