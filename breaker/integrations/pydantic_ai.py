"""The guard in pydantic-ai: a capability whose `wrap_tool_execute` asks the guard before every tool call.

`Agent(model, tools=[...], capabilities=[PydanticAIGuard()])`. A deny skips the tool (`SkipToolExecution`)
and the model reads the deny text as the call's return: not a `ModelRetry`, which counts toward the
tool's `max_retries` (1 by default), so a second deny in a row would end the run with
`UnexpectedModelBehavior`. An operator interrupt cancels the run (`RunContext.cancel()`), at once when the
guard pushes it, even in the middle of a model request: the run ends with `RunCancelled`. A later run
asks the guard again: it goes on once the operator lifted the interrupt.

Agent ids: the run's `conversation_id` (kept across runs that continue a `message_history`); an agent run
inside another guarded agent's tool is its child.
"""

from __future__ import annotations

from typing import Any

from breaker.integrations._common import AgentInterrupted, Breaker, Call, deny_text, missing

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import SkipToolExecution
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.tools import RunContext, ToolDefinition
except ImportError as e:  # pragma: no cover - exercised in a venv without the extra
    raise missing("pydantic-ai", "pydantic-ai", e) from e

__all__ = ["HARNESS", "AgentInterrupted", "CircuitBreaker", "PydanticAIGuard"]

HARNESS = "pydantic-ai"


def agent_of(ctx: RunContext[Any]) -> str:
    return str(ctx.conversation_id or ctx.run_id or "pydantic-ai")


class PydanticAIGuard(AbstractCapability[Any]):
    """The guard before every tool call of the agent (pass it in `capabilities=[...]`)."""

    def __init__(
        self,
        *,
        harness: str = HARNESS,
        fail_closed: bool = False,
        socket_path: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.breaker = Breaker(
            harness, on_interrupt=self._interrupted, fail_closed=fail_closed, socket_path=socket_path, timeout=timeout
        )
        self._live: dict[str, list[RunContext[Any]]] = {}  # agent -> its runs in progress

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live client: not built from a spec

    def _interrupted(self, agent: str, reason: str) -> None:
        runs = list(self._live.get(agent, ()))
        for ctx in runs:
            ctx.cancel()  # a no-op once the run has finished
        if runs:  # it stopped the runs it was meant for; with none live, the agent's next run takes it
            self.breaker.forget_interrupt(agent)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        agent = agent_of(ctx)
        runs = self._live.setdefault(agent, [])
        runs.append(ctx)
        try:
            if self.breaker.take_interrupt(agent) is not None:  # pushed while no run of it was live
                ctx.cancel()
            return await handler()
        finally:
            runs.remove(ctx)
            if not runs:
                self._live.pop(agent, None)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        agent = agent_of(ctx)
        guarded = Call(agent, call.tool_name, args, Breaker.parent_of(agent), call.tool_call_id)
        decision = await self.breaker.acheck(guarded)
        if not decision.allowed:
            if decision.kind == "interrupted":
                ctx.cancel()
                self.breaker.forget_interrupt(agent)  # this run stops; the next one asks the guard again
            raise SkipToolExecution(deny_text(decision))
        with self.breaker.running(agent):
            result = await handler(args)
        await self.breaker.areport(guarded, result)
        return result


CircuitBreaker = PydanticAIGuard  # its first name, which the docs gave it: an alias, so code written against it runs
