"""pydantic-ai with its own test model (`FunctionModel`, scripted from the messages it is sent)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, repair_messages
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.integrations.agents.common import FINAL, PROBE_ARGS, Probe, Record, args_for, finish, options, run_doc

opts = options()
probe = Probe(opts)
record = Record()
built: dict[str, Agent[Any, str]] = {}


def scripted(tool: str, args: dict[str, Any], calls: int, *, log: bool) -> FunctionModel:
    """Calls `tool` until its conversation holds `calls` tool calls, then answers FINAL."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [p for m in messages for p in m.parts]
        if log:
            record.saw([str(p.content) for p in parts if isinstance(p, ToolReturnPart)])
        made = sum(1 for p in parts if isinstance(p, ToolCallPart))
        if made < calls:
            call_args = args_for(opts, made) if log else dict(args)
            return ModelResponse(parts=[ToolCallPart(tool, call_args, tool_call_id=f"call_{tool}_{made + 1}")])
        return ModelResponse(parts=[TextPart(FINAL)])

    return FunctionModel(respond)


def search(query: str) -> str:
    """Search for the query."""
    return probe(query)


def build(model: FunctionModel, tools: list[Any]) -> Agent[Any, str]:
    if opts.unguarded:
        return Agent(model, tools=tools)
    if opts.fail_closed:
        from breaker.integrations.pydantic_ai import PydanticAIGuard

        return Agent(model, tools=tools, capabilities=[PydanticAIGuard(fail_closed=True, socket_path=opts.socket)])
    return run_doc("pydantic-ai", model=model, tools=tools)["agent"]


def run() -> str:
    agent = built["agent"] = build(scripted("search", PROBE_ARGS, opts.calls, log=True), [search])
    if opts.mode == "nested":
        return run_nested(agent)
    if opts.mode == "async":
        return asyncio.run(agent.run("Search for cbprobe.")).output
    return agent.run_sync("Search for cbprobe.").output


def run_nested(searcher: Agent[Any, str]) -> str:
    """Agent delegation: the boss's `research` tool runs the searcher, which is shown as its child."""

    async def research(ctx: RunContext[Any], topic: str) -> str:
        """Research a topic with the search agent."""
        return (await searcher.run(topic, usage=ctx.usage)).output

    boss = build(scripted("research", {"topic": "cbprobe"}, 1, log=False), [research])
    return boss.run_sync("Research cbprobe.").output


def again(error: BaseException | None) -> str:
    """The same conversation goes on (its messages so far as the history): the same agent to the guard. The cancel
    may land between the model's tool call and the tool: the history is repaired as docs/integrations/pydantic-ai.md
    says (a tool call left unanswered makes `Agent.run` refuse the new prompt)."""
    history = repair_messages(error.all_messages()) if isinstance(error, RunCancelled) else None
    agent = built["agent"]
    if opts.mode == "async":
        return asyncio.run(agent.run("Go on.", message_history=history)).output
    return agent.run_sync("Go on.", message_history=history).output


finish(opts, probe, record, run, again)
