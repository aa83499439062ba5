"""What every framework integration shares: the guard's clients, an agent's parent, the deny text, interrupts.

A framework module turns its own ids into a `Call` and the guard's `Decision` into the framework's tool
error or stop; everything else is here once: the clients (the library's own `GuardClient` and
`AsyncGuardClient`, which check the socket's owner and apply the failure mode), the interrupts seen
(pushed by the guard, or met as an `interrupted` deny), and which agent's tool is running now, so an
agent started inside another agent's tool is shown as its child.

The guard is the source of truth on interrupts. An interrupt seen here is remembered only until it
has stopped the run it was meant for (`take_interrupt`), or until the guard judges one of the agent's
calls (an answer other than `interrupted` says the operator lifted it). An `uninterrupt` is never
pushed: a run started later asks the guard again, and its first call is denied if the agent is still
interrupted (then that run stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from breaker.client import DEFAULT_TIMEOUT, AsyncGuardClient, GuardClient
from breaker.protocol import Decision

__all__ = ["AgentInterrupted", "Breaker", "Call", "deny_text", "missing"]

# The guarded agent whose tool is running in this context (tasks and executor threads copy contexts):
# an agent that checks a call while another agent's tool runs is that agent's child.
_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar("cbconsole_running_agent", default=None)


class AgentInterrupted(RuntimeError):
    """The operator interrupted this agent; raised to stop its run where the framework stops runs with an
    exception."""

    def __init__(self, agent: str, reason: str) -> None:
        super().__init__(f"agent {agent!r} interrupted by the operator: {reason or 'no reason given'}")
        self.agent = agent
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call as the guard is asked about it."""

    agent: str
    tool: str
    args: Any
    parent: str | None = None
    call_id: str | int | None = None


def deny_text(decision: Decision) -> str:
    """What the model reads instead of the tool's result."""
    return decision.reason or f"Circuit breaker ({decision.kind or 'deny'}): this call was not run."


def missing(framework: str, extra: str, error: ImportError) -> ImportError:
    """The error for an integration imported without its framework: which extra to install."""
    return ImportError(
        f"breaker.integrations.{extra.replace('-', '_')} needs {framework}: pip install 'cbconsole[{extra}]' ({error})"
    )


class Breaker:
    """The guard as every integration asks it: sync and async checks, results, agent ends, interrupts.

    `harness` is the name the console shows; `fail_closed`, `timeout` and `socket_path` are the client
    library's. `on_interrupt(agent, reason)` is called once per agent the operator interrupts.
    """

    def __init__(
        self,
        harness: str,
        *,
        socket_path: str | os.PathLike[str] | None = None,
        timeout: float | None = None,
        fail_closed: bool = False,
        results: bool = True,
        on_interrupt: Callable[[str, str], Any] | None = None,
    ) -> None:
        self.harness = harness
        self.socket_path = socket_path
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout  # None: the client library's default
        self.fail_closed = fail_closed
        self.results = results  # report each call's result (for the rules with `progress`, and `stall`)
        self.on_interrupt = on_interrupt
        self._interrupts: dict[str, str] = {}
        self._lock = threading.Lock()
        self._sync: GuardClient | None = None
        # AsyncGuardClient lives on one event loop: one per loop (frameworks start loops of their own).
        self._async: dict[asyncio.AbstractEventLoop, AsyncGuardClient] = {}

    # -- clients ------------------------------------------------------------------------------------

    @property
    def client(self) -> GuardClient:
        """The blocking client (created on first use)."""
        with self._lock:
            if self._sync is None:
                self._sync = GuardClient(
                    self.socket_path,
                    timeout=self.timeout,
                    fail_closed=self.fail_closed,
                    harness=self.harness,
                    on_interrupt=self._interrupted,
                )
            return self._sync

    def aclient(self) -> AsyncGuardClient:
        """The asyncio client of the running loop (created on first use in each loop)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                for old in [old for old in self._async if old.is_closed()]:
                    del self._async[old]
                client = self._async[loop] = AsyncGuardClient(
                    self.socket_path,
                    timeout=self.timeout,
                    fail_closed=self.fail_closed,
                    harness=self.harness,
                    on_interrupt=self._interrupted,
                )
            return client

    @property
    def misses(self) -> int:
        """Calls the guard did not judge (the failure mode decided them), over every client."""
        with self._lock:
            clients: list[GuardClient | AsyncGuardClient] = [*self._async.values()]
            if self._sync is not None:
                clients.append(self._sync)
        return sum(c.misses for c in clients)

    def close(self) -> None:
        """Close the blocking client (asyncio clients close with their loop)."""
        with self._lock:
            sync, self._sync = self._sync, None
        if sync is not None:
            sync.close()

    # -- asking -------------------------------------------------------------------------------------

    def _fields(self, call: Call) -> dict[str, Any]:
        fields: dict[str, Any] = {"harness": self.harness}
        if call.parent is not None:
            fields["parent"] = call.parent
        if call.call_id is not None:
            fields["call_id"] = call.call_id
        return fields

    def _decided(self, call: Call, decision: Decision) -> Decision:
        if decision.fallback:
            return decision  # the guard did not answer: it said nothing about an interrupt
        if not decision.allowed and decision.kind == "interrupted":
            self._interrupted(call.agent, decision.reason)
        else:
            self.forget_interrupt(call.agent)  # judged, and not as interrupted: the operator lifted it
        return decision

    def check(self, call: Call) -> Decision:
        """Ask before the call runs. Never raises: an unavailable guard gets the failure mode's answer."""
        return self._decided(call, self.client.check(call.agent, call.tool, call.args, **self._fields(call)))

    async def acheck(self, call: Call) -> Decision:
        return self._decided(call, await self.aclient().check(call.agent, call.tool, call.args, **self._fields(call)))

    def report(self, call: Call, result: Any) -> None:
        """The call ran: its result's digest goes to the guard (never the content), without waiting for
        the answer (the guard has it before this connection's next check)."""
        if self.results:
            self.client.result(call.agent, result, wait=False, **self._named(call))

    async def areport(self, call: Call, result: Any) -> None:
        if self.results:
            await self.aclient().result(call.agent, result, wait=False, **self._named(call))

    @staticmethod
    def _named(call: Call) -> dict[str, Any]:
        if call.call_id is not None:
            return {"call_id": call.call_id}
        return {"tool": call.tool, "args": call.args}

    def end(self, agent: str) -> None:
        """The agent is gone: the guard forgets its counts (not an interrupt)."""
        self.client.agent_end(agent)

    async def aend(self, agent: str) -> None:
        await self.aclient().agent_end(agent)

    # -- interrupts ---------------------------------------------------------------------------------

    def _interrupted(self, agent: str, reason: str) -> None:
        with self._lock:
            first = agent not in self._interrupts
            self._interrupts[agent] = reason
        if first and self.on_interrupt is not None:
            self.on_interrupt(agent, reason)

    def interrupt_reason(self, agent: str, *, poll: bool = False) -> str | None:
        """The operator's reason if `agent` was seen interrupted (and not forgotten since), else None. `poll`
        first reads the interrupts the guard pushed to the blocking client (a read that never waits)."""
        if poll and self._sync is not None:
            self._sync.poll_events()
        return self._interrupts.get(agent)

    def take_interrupt(self, agent: str, *, poll: bool = False) -> str | None:
        """As `interrupt_reason`, and forget it: for the framework that stops a run with it. The run after
        that asks the guard again (which denies its first call if the agent is still interrupted)."""
        if poll and self._sync is not None:
            self._sync.poll_events()
        with self._lock:
            return self._interrupts.pop(agent, None)

    def forget_interrupt(self, agent: str) -> None:
        """Forget an interrupt seen for `agent` (the guard said otherwise, or it stopped its run)."""
        if agent in self._interrupts:
            with self._lock:
                self._interrupts.pop(agent, None)

    # -- parents ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def running(self, agent: str) -> Iterator[None]:
        """While `agent`'s tool runs: an agent that asks meanwhile (in this context) is its child."""
        token = _RUNNING.set(agent)
        try:
            yield
        finally:
            _RUNNING.reset(token)

    @staticmethod
    def around() -> str | None:
        """The guarded agent whose tool is running around this code, if any."""
        return _RUNNING.get()

    @staticmethod
    def parent_of(agent: str, known: str | None = None) -> str | None:
        """`known` if the framework said, else the agent whose tool is running around this one."""
        if known is not None:
            return known
        around = _RUNNING.get()
        return around if around != agent else None
