"""The console's line to the guard: subscribe to state frames, send operator ops, reconnect by itself.

This is the edge: op replies are decoded here, once, into values and the protocol's types.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from breaker import __version__
from breaker.client import AsyncGuardClient, GuardError, GuardUnavailable
from breaker.protocol import (
    CallsEvent,
    ConfigFrame,
    ConfigSet,
    Event,
    Follow,
    GuardStats,
    Interrupt,
    Override,
    Pause,
    Request,
    Reset,
    Resume,
    StateFrame,
    Stats,
    Subscribe,
    Unfollow,
    Uninterrupt,
)

__all__ = ["ConfigSaved", "GuardLink", "LinkError"]

log = logging.getLogger("cbconsole.console")


class LinkError(RuntimeError):
    """An operator op failed; the message is for the operator."""


@dataclass(frozen=True, slots=True)
class ConfigSaved:
    """The reply to `config_set`: the config now in force (None if the reply had none) and the file written."""

    config: ConfigFrame | None
    written: str | None  # None: applied in memory only (no patch layer to write)


R = TypeVar("R")


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
        self.following: str | None = None  # the agent whose calls come to `on_calls` (followed again on reconnect)
        self.on_calls: Callable[[CallsEvent], None] | None = None
        self._task: asyncio.Task[None] | None = None

    def _event(self, event: Event) -> None:
        if isinstance(event, StateFrame):
            self.on_frame(event)
        elif isinstance(event, CallsEvent) and event.agent == self.following and self.on_calls is not None:
            self.on_calls(event)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="guard-link")

    async def _run(self) -> None:
        """Subscribe; when the connection drops, say so and subscribe again as soon as the guard is back. Until a
        guard answers, each failed attempt says why, where, and for how long it has been retrying."""
        loop = asyncio.get_running_loop()
        failing_since: float | None = None
        gone = "no guard at"  # "lost the guard at" once one answered
        while True:
            if not self.client.connected:
                if self.connected:
                    self.connected = False
                    gone = "lost the guard at"
                    self.on_status("unreachable", f"{gone} {self.socket_path}; reconnecting")
                try:
                    await self.client.request(Subscribe(), timeout=2.0)
                    if self.following is not None:  # a new connection follows nothing yet
                        await self.client.request(Follow(agent=self.following), timeout=2.0)
                except (GuardUnavailable, GuardError) as exc:
                    failing_since = loop.time() if failing_since is None else failing_since
                    waited = loop.time() - failing_since
                    self.on_status("unreachable", f"retrying {waited:.0f} s: {gone} {self.socket_path} ({exc})")
                    await asyncio.sleep(0.3)
                    continue
                failing_since = None
                self.connected = True
                self.on_status("connected", "")
            await asyncio.sleep(0.2)

    # -- operator ops: each raises LinkError with a message for the operator -------------------------

    async def interrupt(self, agent: str, reason: str) -> int:
        """Stop `agent`; how many harness connections were told."""
        return (await self._request(Interrupt(agent=agent, reason=reason))).notified or 0

    async def uninterrupt(self, agent: str) -> bool:
        """Lift `agent`'s interrupt; whether the guard knew the agent."""
        return (await self._request(Uninterrupt(agent=agent))).known is True

    async def reset(self, agent: str) -> bool:
        """Clear `agent`'s counts; whether the guard knew the agent."""
        return (await self._request(Reset(agent=agent))).known is True

    async def override(self, agent: str, limits: dict[str, int | None]) -> dict[str, int] | None:
        """Give `agent` limits of its own (None takes one off); its limits now, or None for an agent not tracked."""
        reply = await self._request(Override(agent=agent, limits=limits))
        if reply.known is not True:
            return None
        return reply.override or {}

    async def follow(self, agent: str, on_calls: Callable[[CallsEvent], None]) -> None:
        """Have `agent`'s calls sent to `on_calls` as they happen (one agent at a time), until `unfollow`."""
        self.following, self.on_calls = agent, on_calls
        await self._request(Follow(agent=agent))

    async def unfollow(self) -> None:
        self.following, self.on_calls = None, None
        if self.client.connected:
            await self._request(Unfollow())

    async def set_paused(self, paused: bool) -> bool:
        """Pause or resume the guard; whether it is paused now."""
        reply = await self._request(Pause() if paused else Resume())
        return paused if reply.paused is None else reply.paused

    async def config_set(self, changes: dict[str, Any]) -> ConfigSaved:
        """Validate, write to the patch layer and apply `changes` (camelCase keys)."""
        reply = await self._request(ConfigSet(changes=changes))
        return ConfigSaved(reply.config, reply.written)

    async def stats(self, timeout: float = 10.0) -> GuardStats | None:
        """The guard's counters now."""
        return (await self._request(Stats(), timeout=timeout)).stats

    async def _request(self, request: Request[R], timeout: float = 10.0) -> R:
        try:
            return await self.client.request(request, timeout=timeout)
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
