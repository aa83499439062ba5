"""The OpenAI Agents SDK with its own test model (`agents.testing.ScriptedModel`), tracing off."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from tests.integrations.agents.common import FINAL, PROBE_ARGS, Probe, Record, args_for, finish, options, run_doc

opts = options()
probe = Probe(opts)
record = Record()


def scripted(tool: str, args: dict[str, Any], calls: int, *, log: bool) -> ScriptedModel:
    """Calls `tool` until its conversation holds `calls` tool calls, then answers FINAL."""

    def respond(call: Any) -> list[Any]:
        items = call.input if isinstance(call.input, list) else []
        made = sum(1 for i in items if _kind(i) == "function_call" and _name(i) == tool)
        if log:
            record.saw([_output(i) for i in items if _kind(i) == "function_call_output"])
        if made < calls:
            return [function_call(tool, args_for(opts, made) if log else args, call_id=f"call_{tool}_{made + 1}")]
        return [assistant_message(FINAL)]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(calls + 2)])


def _kind(item: Any) -> str:
    return item.get("type", "") if isinstance(item, dict) else getattr(item, "type", "")


def _name(item: Any) -> str:
    return item.get("name", "") if isinstance(item, dict) else getattr(item, "name", "")


def _output(item: Any) -> str:
    out = item.get("output") if isinstance(item, dict) else getattr(item, "output", "")
    return out if isinstance(out, str) else str(out)


@function_tool
def search(query: str) -> str:
    """Search for the query."""
    return probe(query)


def build(model: ScriptedModel, tools: list[Any], name: str = "searcher") -> Agent[Any]:
    if opts.unguarded:
        return Agent(name=name, model=model, tools=tools)
    if opts.fail_closed:
        from breaker.integrations.openai_agents import OpenAIAgentsGuard

        return OpenAIAgentsGuard(fail_closed=True, socket_path=opts.socket).guard(
            Agent(name=name, model=model, tools=tools)
        )
    return run_doc("openai-agents", model=model, tools=tools, name=name)["agent"]


def run() -> str:
    model = scripted("search", PROBE_ARGS, opts.calls, log=True)
    if opts.mode == "nested":
        return run_nested(model)
    agent = build(model, [search])
    if opts.mode == "async":
        result = asyncio.run(Runner.run(agent, "Search for cbprobe.", max_turns=opts.calls + 10))
    else:
        result = Runner.run_sync(agent, "Search for cbprobe.", max_turns=opts.calls + 10)
    return str(result.final_output)


def run_nested(model: ScriptedModel) -> str:
    """A triage agent hands off to the searcher: the searcher is the child of the run's first agent."""
    searcher = Agent(name="searcher", model=model, tools=[search])

    @function_tool
    def plan(topic: str) -> str:
        """Plan the search."""
        return "plan: search for it"

    handoff_tool = "transfer_to_searcher"

    def triage_respond(call: Any) -> list[Any]:
        items = call.input if isinstance(call.input, list) else []
        made = sum(1 for i in items if _kind(i) == "function_call")
        if made == 0:
            return [function_call("plan", {"topic": "cbprobe"}, call_id="call_plan_1")]
        return [function_call(handoff_tool, {}, call_id="call_handoff_1")]

    triage_model = ScriptedModel([ModelStep.respond(triage_respond) for _ in range(3)])
    from breaker.integrations.openai_agents import OpenAIAgentsGuard

    agent = OpenAIAgentsGuard().guard(Agent(name="triage", model=triage_model, tools=[plan], handoffs=[searcher]))
    result = Runner.run_sync(agent, "Find cbprobe.", max_turns=50, run_config=RunConfig(group_id="conversation-1"))
    return str(result.final_output)


finish(opts, probe, record, run)
