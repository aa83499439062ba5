"""The guard in CrewAI: its before/after tool-call hooks, and a before-LLM-call hook that stops an interrupted agent.

`install()` registers the hooks for every crew and agent of the process (CrewAI's global hooks;
`uninstall()` removes them). A deny blocks the call (the before hook returns False) and the after hook,
which CrewAI runs for blocked calls too, puts the deny text where the tool's result would be, so the
model reads it instead of CrewAI's "Tool execution blocked by hook". An operator interrupt aborts the
agent's next model call (`HookAborted`, CrewAI's own way for a hook to stop an operation): the kickoff
ends with that error. A later kickoff asks the guard again: it runs once the operator lifted the
interrupt, and is aborted after its first call's deny while it stands. CrewAI hooks are synchronous,
in `kickoff()` and `kickoff_async()` alike: they use the blocking client (a check is well under a
millisecond).

CrewAI stops a run by itself at the 5th identical call that got the same result
(`ToolExecutionFailedError`); the guard counts calls by their args alone, within a window, with a cap,
and shows them on the console.

Agent ids: `<crew id>/<agent role>` (`<agent id>` for an agent outside a crew); an agent working inside
another guarded agent's tool call (a delegation) is its child.
"""

from __future__ import annotations

import threading
from typing import Any

from breaker.integrations._common import _RUNNING, AgentInterrupted, Breaker, Call, deny_text, missing

try:
    from crewai.hooks import (
        HookAborted,
        LLMCallHookContext,
        ToolCallHookContext,
        register_after_tool_call_hook,
        register_before_llm_call_hook,
        register_before_tool_call_hook,
        unregister_after_tool_call_hook,
        unregister_before_llm_call_hook,
        unregister_before_tool_call_hook,
    )
except ImportError as e:  # pragma: no cover - exercised in a venv without the extra
    raise missing("CrewAI", "crewai", e) from e

__all__ = ["HARNESS", "AgentInterrupted", "CrewAIGuard", "install"]

HARNESS = "crewai"


def agent_of(agent: Any, crew: Any) -> str:
    if agent is None:
        return f"crewai-{crew.id}" if crew is not None else "crewai"
    if crew is not None:
        return f"{crew.id}/{getattr(agent, 'role', None) or agent.id}"
    return str(agent.id)


class CrewAIGuard:
    """The three hooks, bound to one guard connection."""

    def __init__(self, breaker: Breaker) -> None:
        self.breaker = breaker
        self._local = threading.local()  # per thread: the calls between their before and after hooks

    def _pending(self) -> list[tuple[Call, str | None, Any]]:
        stack = getattr(self._local, "calls", None)
        if stack is None:
            stack = self._local.calls = []
        return stack

    def _call(self, ctx: ToolCallHookContext) -> Call:
        agent = agent_of(ctx.agent, ctx.crew)
        return Call(agent, ctx.tool_name, dict(ctx.tool_input or {}), Breaker.parent_of(agent))

    def before_tool_call(self, ctx: ToolCallHookContext) -> bool | None:
        call = self._call(ctx)
        decision = self.breaker.check(call)
        if not decision.allowed:
            self._pending().append((call, deny_text(decision), None))
            return False
        # While the tool runs, an agent working for this one (a delegation) is its child.
        self._pending().append((call, None, _RUNNING.set(call.agent)))
        return None

    def after_tool_call(self, ctx: ToolCallHookContext) -> str | None:
        stack = self._pending()
        if not stack:
            return None
        call, denied, token = stack.pop()
        if token is not None:
            try:
                _RUNNING.reset(token)
            except ValueError:  # set in another context: nothing of ours to undo here
                pass
        if denied is not None:
            return denied  # in place of "Tool execution blocked by hook"
        self.breaker.report(call, ctx.raw_tool_result if ctx.raw_tool_result is not None else ctx.tool_result)
        return None

    def before_llm_call(self, ctx: LLMCallHookContext) -> bool | None:
        agent = agent_of(getattr(ctx, "agent", None), getattr(ctx, "crew", None))
        reason = self.breaker.take_interrupt(agent, poll=True)  # it stops this kickoff; a later one asks again
        if reason is not None:
            raise HookAborted(f"the operator interrupted agent {agent!r}: {reason or 'no reason given'}", "cbconsole")
        return None

    def uninstall(self) -> None:
        """Remove the hooks (and close the connection)."""
        unregister_before_tool_call_hook(self.before_tool_call)
        unregister_after_tool_call_hook(self.after_tool_call)
        unregister_before_llm_call_hook(self.before_llm_call)
        self.breaker.close()


def install(
    *,
    harness: str = HARNESS,
    fail_closed: bool = False,
    socket_path: str | None = None,
    timeout: float | None = None,
) -> CrewAIGuard:
    """Register the guard's hooks for every crew of this process; returns them (`.uninstall()` removes them)."""
    guard = CrewAIGuard(Breaker(harness, fail_closed=fail_closed, socket_path=socket_path, timeout=timeout))
    register_before_tool_call_hook(guard.before_tool_call)
    register_after_tool_call_hook(guard.after_tool_call)
    register_before_llm_call_hook(guard.before_llm_call)
    return guard
