"""The guard in the OpenAI Agents SDK: a tool input guardrail on every function tool (and a tool output guardrail
that reports results).

`OpenAIAgentsGuard().guard(agent)` adds both to each `FunctionTool` of the agent and of the agents it hands
off to (`FunctionTool.tool_input_guardrails` / `tool_output_guardrails`, the SDK's own fields). A deny is
`reject_content`: the model reads the deny text as the call's output and the run goes on. An operator
interrupt is `raise_exception`: the run ends with `ToolInputGuardrailTripwireTriggered`.

Agent ids: `<run>/<agent name>`, where the run is the `RunConfig.group_id` (a conversation) if set, else
the run's trace id; an agent handed off to (or run as another agent's tool in the same trace) is the
child of the first agent of that run.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from breaker.integrations._common import AgentInterrupted, Breaker, Call, deny_text, missing

try:
    from agents import Agent, FunctionTool, Handoff
    from agents.tool_guardrails import (
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
        ToolOutputGuardrail,
        ToolOutputGuardrailData,
    )
    from agents.tracing import get_current_trace
except ImportError as e:  # pragma: no cover - exercised in a venv without the extra
    raise missing("the OpenAI Agents SDK", "openai-agents", e) from e

__all__ = ["HARNESS", "AgentInterrupted", "CircuitBreaker", "OpenAIAgentsGuard"]

HARNESS = "openai-agents"
MAX_RUNS = 4096  # runs whose first agent is remembered (for parents), oldest forgotten first


class OpenAIAgentsGuard:
    """Guardrails that ask the guard before each function tool call and report each result."""

    def __init__(
        self,
        *,
        harness: str = HARNESS,
        fail_closed: bool = False,
        socket_path: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.breaker = Breaker(harness, fail_closed=fail_closed, socket_path=socket_path, timeout=timeout)
        self.default_run = f"openai-agents-{uuid.uuid4().hex[:12]}"  # when a run has neither group nor trace
        self._first: dict[str, str] = {}  # run -> its first agent
        self._lock = threading.Lock()
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(self._before, name="cbconsole")
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(self._after, name="cbconsole")

    def guard(self, agent: Agent[Any]) -> Agent[Any]:
        """Add the guardrails to every function tool of `agent` and of the agents it hands off to; returns it."""
        seen: set[int] = set()
        todo: list[Any] = [agent]
        while todo:
            current = todo.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            for tool in getattr(current, "tools", None) or []:
                if isinstance(tool, FunctionTool):
                    self._add(tool)
            for handoff in getattr(current, "handoffs", None) or []:
                if isinstance(handoff, Agent):
                    todo.append(handoff)
                elif isinstance(handoff, Handoff):
                    target = getattr(handoff, "agent", None)  # set by handoff(agent) in recent SDKs
                    if target is not None:
                        todo.append(target)
        return agent

    def _add(self, tool: FunctionTool) -> None:
        inputs = tool.tool_input_guardrails = list(tool.tool_input_guardrails or [])
        if self.input_guardrail not in inputs:
            inputs.insert(0, self.input_guardrail)  # first: a denied call runs no other guardrail
        outputs = tool.tool_output_guardrails = list(tool.tool_output_guardrails or [])
        if self.output_guardrail not in outputs:
            outputs.append(self.output_guardrail)

    # -- ids ----------------------------------------------------------------------------------------

    def _run_of(self, data: ToolInputGuardrailData) -> str:
        config = getattr(data.context, "run_config", None)
        group = getattr(config, "group_id", None)
        if group:
            return str(group)
        trace = get_current_trace()
        trace_id = getattr(trace, "trace_id", None)
        if trace_id and trace_id != "no-op":
            return str(trace_id)
        return self.default_run

    def call_of(self, data: ToolInputGuardrailData) -> Call:
        run = self._run_of(data)
        agent = f"{run}/{data.agent.name}"
        with self._lock:
            first = self._first.setdefault(run, agent)
            while len(self._first) > MAX_RUNS:
                del self._first[next(iter(self._first))]
        parent = Breaker.parent_of(agent, first if first != agent else None)
        ctx = data.context
        try:
            args: Any = json.loads(ctx.tool_arguments) if ctx.tool_arguments else {}
        except ValueError:
            args = ctx.tool_arguments  # the model's text as it is: the same text is the same call
        return Call(agent, ctx.tool_name, args, parent, ctx.tool_call_id)

    # -- the guardrails -----------------------------------------------------------------------------

    async def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        call = self.call_of(data)
        decision = await self.breaker.acheck(call)
        if decision.allowed:
            return ToolGuardrailFunctionOutput.allow()
        info = {"agent": call.agent, "kind": decision.kind, "reason": decision.reason}
        if decision.kind == "interrupted":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
        return ToolGuardrailFunctionOutput.reject_content(deny_text(decision), output_info=info)

    async def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        await self.breaker.areport(self.call_of(data), data.output)
        return ToolGuardrailFunctionOutput.allow()


CircuitBreaker = OpenAIAgentsGuard  # its first name, which the docs gave it: an alias, so code written against it runs
