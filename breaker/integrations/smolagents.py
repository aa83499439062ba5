"""The guard in smolagents: each tool of an agent wrapped in a `Tool` that asks first, and a step callback
that stops the agent on an operator interrupt.

`guard(agent)` wraps the tools of `agent` (and of its managed agents, each a child of it) in place, before
`agent.run(...)`; `ToolCallingAgent` and `CodeAgent` alike (a code agent's code calls the same tools). A
deny is the call's observation: the model reads the deny text and the run goes on (not an exception,
which smolagents shows the model as "Error executing tool … Please try again"). An operator interrupt
calls `agent.interrupt()`: the run ends before its next step with smolagents' `AgentError("Agent
interrupted.")`. `final_answer` is not guarded: it ends the run.

Agent ids: smolagents has no run id; the guard's agent is the smolagents agent (`agent_id`, else
`smolagents-<name>-<random>`), across its runs; a managed agent is `<parent>/<its name>`.
"""

from __future__ import annotations

import uuid
import weakref
from typing import Any

from breaker.integrations._common import AgentInterrupted, Breaker, Call, deny_text, missing

try:
    from smolagents import Tool
    from smolagents.agents import MultiStepAgent
    from smolagents.memory import ActionStep
except ImportError as e:  # pragma: no cover - exercised in a venv without the extra
    raise missing("smolagents", "smolagents", e) from e

__all__ = ["HARNESS", "AgentInterrupted", "GuardedTool", "guard"]

HARNESS = "smolagents"
UNGUARDED = frozenset({"final_answer"})


class GuardedTool(Tool):
    """A tool that asks the guard before it runs the tool it wraps, and reports the result."""

    skip_forward_signature_validation = True  # forward takes the wrapped tool's inputs as **kwargs

    def __init__(self, tool: Tool, breaker: Breaker, agent_id: str, parent: str | None, owner: MultiStepAgent) -> None:
        self.name = tool.name
        self.description = tool.description
        self.inputs = tool.inputs
        self.output_type = tool.output_type
        if getattr(tool, "output_schema", None) is not None:
            self.output_schema = tool.output_schema
        super().__init__()
        self.tool = tool
        self.breaker = breaker
        self.agent_id = agent_id
        self.parent = parent
        self._owner = weakref.ref(owner)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        call = Call(self.agent_id, self.name, kwargs if not args else {"args": list(args), **kwargs}, self.parent)
        decision = self.breaker.check(call)
        if not decision.allowed:
            if decision.kind == "interrupted":
                owner = self._owner()
                if owner is not None:
                    owner.interrupt()
            return deny_text(decision)
        with self.breaker.running(self.agent_id):
            result = self.tool(*args, **kwargs)
        self.breaker.report(call, result)
        return result


def guard(
    agent: MultiStepAgent,
    *,
    agent_id: str | None = None,
    parent: str | None = None,
    harness: str = HARNESS,
    fail_closed: bool = False,
    socket_path: str | None = None,
    timeout: float | None = None,
    breaker: Breaker | None = None,
) -> MultiStepAgent:
    """Guard `agent`'s tools and its managed agents' (in place); returns the agent."""
    if breaker is None:
        breaker = Breaker(harness, fail_closed=fail_closed, socket_path=socket_path, timeout=timeout)
    me = agent_id or f"smolagents-{agent.name or 'agent'}-{uuid.uuid4().hex[:8]}"
    for name, tool in list(agent.tools.items()):
        if name in UNGUARDED or isinstance(tool, GuardedTool):
            continue
        agent.tools[name] = GuardedTool(tool, breaker, me, parent, agent)
    for name, child in (agent.managed_agents or {}).items():
        guard(child, agent_id=f"{me}/{name}", parent=me, breaker=breaker)

    owner = weakref.ref(agent)

    def stop_if_interrupted(step: ActionStep, **_: Any) -> None:
        """After each step: an interrupt the guard pushed meanwhile stops the agent before its next step."""
        found = owner()
        if found is not None and breaker.take_interrupt(me, poll=True) is not None:
            found.interrupt()  # this run stops; a later run asks the guard again

    agent.step_callbacks.register(ActionStep, stop_if_interrupted)
    return agent
