"""The operator's interrupt command: an argv filled in for one agent, run a few at a time from a bounded queue.

For harnesses with no stop signal of their own, the guard runs `interruptCommand` when the operator
interrupts an agent: never through a shell, bounded in time and output, logged, and never able to
affect the guard — a burst of interrupts waits in a queue (or is dropped, and counted) instead of
spawning children until the process runs out of file descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from collections import deque

__all__ = ["AT_ONCE", "QUEUED", "InterruptCommands", "fill_command"]

log = logging.getLogger("cbconsole.guard")

TIMEOUT = 10.0  # seconds a command may run before it is killed with its children
OUTPUT = 4096  # bytes of its output kept for the log (the rest is read and dropped)
AT_ONCE = 4  # children running at once: each costs descriptors the checks need
QUEUED = 256  # waiting beyond this are dropped (and counted)
_PLACEHOLDER = re.compile(r"\{(agent|reason)\}")


def fill_command(template: tuple[str, ...] | list[str], agent: str, reason: str) -> list[str]:
    """The interrupt command's argv: `{agent}` and `{reason}` replaced in each argument, in one pass
    (a reason holding "{agent}" stays as written). Never a shell string: each element is one argument,
    and the program (the first element, which the config keeps free of placeholders) is never filled.
    Both values are untrusted (a harness chose the id): the config refuses a placeholder anywhere in an
    argv that names a shell or another interpreter, and the command also gets them as the environment
    variables CBCONSOLE_AGENT and CBCONSOLE_REASON, which a script can quote safely."""
    values = {"agent": agent, "reason": reason}
    program, *args = template
    return [program, *(_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in args)]


class InterruptCommands:
    """The queue and the running commands (a guard's are `GuardServer.commands`). `timeout`: the seconds a command
    may run before its process group is killed (read when each starts); `in_flight`: commands waiting or running;
    `dropped`: commands the queue had no room for."""

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self.dropped = 0
        self._waiting: deque[tuple[list[str], str, str]] = deque()  # (argv, agent, reason)
        self._running: set[asyncio.Task[None]] = set()
        self._stopped = False

    @property
    def in_flight(self) -> int:
        """Commands waiting or running."""
        return len(self._waiting) + len(self._running)

    def submit(self, argv: list[str], agent: str, reason: str = "") -> None:
        if any(queued == agent for _argv, queued, _reason in self._waiting):
            return  # already waiting for this agent: once is enough
        if len(self._waiting) >= QUEUED:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning(
                    "interrupt command for agent %r dropped: %d commands already wait (%d dropped so far)",
                    agent,
                    len(self._waiting),
                    self.dropped,
                )
            return
        self._waiting.append((argv, agent, reason))
        self._start()

    async def stop(self) -> None:
        """Kill what runs (with its children), forget what waits."""
        self._stopped = True
        self._waiting.clear()
        tasks = list(self._running)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting and len(self._running) < AT_ONCE and not self._stopped:
            argv, agent, reason = self._waiting.popleft()
            task = loop.create_task(self._run(argv, agent, reason), name="interrupt-command")
            self._running.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not self._stopped:
            self._start()

    async def _run(self, argv: list[str], agent: str, reason: str = "") -> None:
        """Run one command (no shell), bounded in time and output; log how it ended."""
        env = {**os.environ, "CBCONSOLE_AGENT": agent, "CBCONSOLE_REASON": reason}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
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
        except ValueError as exc:  # a NUL or a lone surrogate (UnicodeEncodeError) in an argument or the id
            log.warning("interrupt command for agent %r could not start (%s): %s", agent, argv[0], exc)
            return
        kept = bytearray()

        async def drain() -> None:
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(65536):
                kept.extend(chunk[: max(0, OUTPUT - len(kept))])
            await proc.wait()

        try:
            await asyncio.wait_for(drain(), self.timeout)
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            log.warning(
                "interrupt command for agent %r timed out after %g s and was killed; output: %s",
                agent,
                self.timeout,
                _shown(kept),
            )
            return
        except asyncio.CancelledError:  # the guard is stopping
            _kill_group(proc.pid)
            raise
        level = logging.INFO if proc.returncode == 0 else logging.WARNING
        log.log(level, "interrupt command for agent %r exited %s; output: %s", agent, proc.returncode, _shown(kept))


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _shown(output: bytes | bytearray) -> str:
    text = bytes(output).decode("utf-8", "replace").strip()
    if len(output) >= OUTPUT:
        text += " [...]"
    return repr(text) if text else "(none)"
