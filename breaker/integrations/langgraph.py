"""The guard in LangChain agents (agent middleware) and hand-built LangGraph graphs (a ToolNode's tool-call wrapper).

`create_agent(model, tools, middleware=[CircuitBreakerMiddleware()])` asks the guard before every tool
call (`wrap_tool_call` / `awrap_tool_call`); a deny is the tool's error message (`ToolMessage`,
`status="error"`) and the run goes on; an operator interrupt raises `AgentInterrupted` out of the run at
the agent's next tool call, as LangChain's own `ToolCallLimitMiddleware(exit_behavior="error")` stops
one. `guarded_tool_node(tools)` is a `ToolNode` with the same wrapper for graphs built by hand.

Only the tool call is wrapped: a `before_model` hook (one more graph node per step) or a
`wrap_model_call` would stop an interrupted agent one model call sooner, but cost every step of every
agent 1.5-3 ms more here (docs/performance.md).

Agent ids: the run's `thread_id`; without one, a new id per invocation (kept in the agent's state, and
ended with the run). An agent run inside another guarded agent's tool is its child, `<parent>/<name>`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, NotRequired

from breaker.integrations._common import AgentInterrupted, Breaker, Call, deny_text, missing

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain_core.messages import ToolMessage
    from langgraph.config import get_config
    from langgraph.prebuilt import ToolNode
    from langgraph.types import Command
except ImportError as e:  # pragma: no cover - exercised in a venv without the extra
    raise missing("LangChain and LangGraph", "langgraph", e) from e

__all__ = ["HARNESS", "AgentInterrupted", "CircuitBreakerMiddleware", "LangGraphGuard", "guarded_tool_node"]

HARNESS = "langgraph"
STATE_KEY = "cbconsole_agent"  # the per-invocation agent id, for runs without a thread_id


class CircuitBreakerState(AgentState[Any]):
    cbconsole_agent: NotRequired[Annotated[str, PrivateStateAttr]]  # type: ignore[valid-type]  # AgentState is a TypedDict; mypy sees Any here


def _config_of(request: ToolCallRequest) -> dict[str, Any]:
    runtime = request.runtime
    config = getattr(runtime, "config", None) if runtime is not None else None
    return dict(config or {})


def _thread_of(config: dict[str, Any]) -> str | None:
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread is not None else None


def _name_of(config: dict[str, Any]) -> str:
    return str((config.get("metadata") or {}).get("lc_agent_name") or "agent")


class LangGraphGuard:
    """The tool-call wrapper both entry points share: `wrap_tool_call(request, handler)` and its async twin,
    as `ToolNode(wrap_tool_call=…, awrap_tool_call=…)` takes them."""

    def __init__(self, breaker: Breaker, agent_id: str | None = None) -> None:
        self.breaker = breaker
        self.default_agent = agent_id or f"langgraph-{uuid.uuid4().hex[:12]}"

    def agent_of(self, config: dict[str, Any], state: Any) -> tuple[str, str | None]:
        """(agent, parent) for a call made under `config` with the agent's `state`."""
        own = _thread_of(config)
        if own is None and isinstance(state, dict):
            own = state.get(STATE_KEY)
        parent = Breaker.around()
        if parent is not None:  # a nested run inherits its parent's config (its thread included)
            return f"{parent}/{_name_of(config)}", parent
        return own or self.default_agent, None

    def _call(self, request: ToolCallRequest) -> Call:
        agent, parent = self.agent_of(_config_of(request), request.state)
        tc = request.tool_call
        return Call(agent, tc["name"], tc.get("args"), parent, tc.get("id"))

    def _denied(self, call: Call, request: ToolCallRequest, text: str) -> ToolMessage:
        tc = request.tool_call
        return ToolMessage(content=text, tool_call_id=tc.get("id") or "", name=tc["name"], status="error")

    def _stop(self, call: Call, reason: str) -> None:
        raise AgentInterrupted(call.agent, reason)

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        call = self._call(request)
        decision = self.breaker.check(call)
        if not decision.allowed:
            if decision.kind == "interrupted":
                self._stop(call, decision.reason)
            return self._denied(call, request, deny_text(decision))
        with self.breaker.running(call.agent):
            out = handler(request)
        if isinstance(out, ToolMessage):
            self.breaker.report(call, out.content)
        return out

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
    ) -> ToolMessage | Command[Any]:
        call = self._call(request)
        decision = await self.breaker.acheck(call)
        if not decision.allowed:
            if decision.kind == "interrupted":
                self._stop(call, decision.reason)
            return self._denied(call, request, deny_text(decision))
        with self.breaker.running(call.agent):
            out = await handler(request)
        if isinstance(out, ToolMessage):
            await self.breaker.areport(call, out.content)
        return out


def guarded_tool_node(
    tools: Sequence[Any],
    *,
    agent_id: str | None = None,
    harness: str = HARNESS,
    fail_closed: bool = False,
    socket_path: str | None = None,
    timeout: float | None = None,
    **tool_node_options: Any,
) -> ToolNode:
    """A `ToolNode` that asks the guard before each call. The agent is the run's `thread_id`, else
    `agent_id` (one id for every run of this node, made up when not given). An operator interrupt raises
    `AgentInterrupted` out of the graph's run."""
    guard = LangGraphGuard(
        Breaker(harness, fail_closed=fail_closed, socket_path=socket_path, timeout=timeout), agent_id
    )
    return ToolNode(
        tools, wrap_tool_call=guard.wrap_tool_call, awrap_tool_call=guard.awrap_tool_call, **tool_node_options
    )


class CircuitBreakerMiddleware(AgentMiddleware[CircuitBreakerState, Any]):
    """Agent middleware for `langchain.agents.create_agent`: the guard before every tool call.

    A deny is the tool's error (`ToolMessage`, status `error`) and the model reads it; an operator
    interrupt raises `AgentInterrupted` out of the run at the agent's next tool call.
    """

    state_schema = CircuitBreakerState

    def __init__(
        self,
        *,
        harness: str = HARNESS,
        fail_closed: bool = False,
        socket_path: str | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__()
        self.breaker = Breaker(harness, fail_closed=fail_closed, socket_path=socket_path, timeout=timeout)
        self.guard = LangGraphGuard(self.breaker)

    # -- the agent's id -----------------------------------------------------------------------------

    def before_agent(self, state: CircuitBreakerState, runtime: Any) -> dict[str, Any] | None:
        if _thread_of(dict(get_config())) is None and not state.get(STATE_KEY):
            return {STATE_KEY: f"langgraph-{uuid.uuid4().hex[:12]}"}
        return None

    async def abefore_agent(self, state: CircuitBreakerState, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    def _invocation_agent(self, state: CircuitBreakerState) -> str | None:
        """The agent id this invocation made up (no thread_id), which ends with it."""
        config = dict(get_config())
        if _thread_of(config) is not None or not state.get(STATE_KEY):
            return None
        return self.guard.agent_of(config, state)[0]

    def after_agent(self, state: CircuitBreakerState, runtime: Any) -> dict[str, Any] | None:
        agent = self._invocation_agent(state)
        if agent is not None:
            self.breaker.end(agent)
        return None

    async def aafter_agent(self, state: CircuitBreakerState, runtime: Any) -> dict[str, Any] | None:
        agent = self._invocation_agent(state)
        if agent is not None:
            await self.breaker.aend(agent)
        return None

    # -- every tool call ----------------------------------------------------------------------------

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        return self.guard.wrap_tool_call(request, handler)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
    ) -> ToolMessage | Command[Any]:
        return await self.guard.awrap_tool_call(request, handler)
