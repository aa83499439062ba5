"""The console's line to the guard: subscribe to state frames, send operator ops, reconnect by itself."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from breaker import __version__
from breaker.client import AsyncGuardClient, GuardError, GuardUnavailable
from breaker.protocol import InterruptEvent, StateFrame

__all__ = ["GuardLink", "LinkError"]

log = logging.getLogger("cbconsole.console")


class LinkError(RuntimeError):
    """An operator op failed; the message is for the operator."""


class GuardLink:
    """Keeps one subscribed connection to the guard's operator socket and feeds its frames to `on_frame`."""

    def __init__(
        self,
        socket_path: Path,
        on_frame: Callable[[StateFrame], None],
        on_status: Callable[[str, str], None],
    ) -> None:
        self.socket_path = socket_path  # the operator's socket
        self.on_frame = on_frame
        self.on_status = on_status
        self.client = AsyncGuardClient(
            socket_path,
            timeout=5.0,
            harness="cbconsole",
            version=__version__,
            role="console",
            on_event=self._event,
        )
        self.connected = False
        self._task: asyncio.Task[None] | None = None

    def _event(self, event: InterruptEvent | StateFrame) -> None:
        if isinstance(event, StateFrame):
            self.on_frame(event)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="guard-link")

    async def _run(self) -> None:
        """Subscribe; when the connection drops, say so and subscribe again as soon as the guard is back."""
        while True:
            if not self.client.connected:
                if self.connected:
                    self.connected = False
                    self.on_status("unreachable", f"lost the guard at {self.socket_path}; reconnecting")
                try:
                    await self.client.request("subscribe", timeout=2.0)
                except (GuardUnavailable, GuardError):
                    await asyncio.sleep(0.3)
                    continue
                self.connected = True
                self.on_status("connected", "")
            await asyncio.sleep(0.2)

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """An operator op; raises LinkError with a message for the operator."""
        try:
            return await self.client.request(op, timeout=10.0, **fields)
        except GuardUnavailable as exc:
            raise LinkError(f"the guard is unreachable ({exc})") from None
        except GuardError as exc:
            raise LinkError(exc.message or exc.code) from None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.client.close()
