"""smolagents' ToolCallingAgent with a scripted `Model` subclass (smolagents' documented way to bring a model)."""

from __future__ import annotations

from typing import Any

from smolagents import ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model

from tests.integrations.agents.common import FINAL, PROBE_ARGS, Probe, Record, args_for, finish, options, run_doc

opts = options()
probe = Probe(opts)
record = Record()
built: dict[str, ToolCallingAgent] = {}


def _text(message: Any) -> str:
    content = message.content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content or "")


class ScriptedModel(Model):
    """Calls `tool` until its conversation holds `calls` observations, then calls final_answer."""

    def __init__(self, tool: str, args: dict[str, Any], calls: int, *, log: bool) -> None:
        super().__init__(model_id="scripted")
        self.tool, self.args, self.calls, self.log = tool, args, calls, log

    def generate(
        self,
        messages: list[Any],
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kw: Any,
    ) -> ChatMessage:
        observed = [_text(m) for m in messages if getattr(m, "role", None) == MessageRole.TOOL_RESPONSE]
        if self.log:
            record.saw(observed)
        made = len(observed)
        args = args_for(opts, made) if self.log else dict(self.args)
        name, args = (self.tool, args) if made < self.calls else ("final_answer", {"answer": FINAL})
        call = ChatMessageToolCall(ChatMessageToolCallFunction(args, name), f"call_{name}_{made + 1}", "function")
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


@tool
def search(query: str) -> str:
    """Search for the query.

    Args:
        query: what to search for.
    """
    return probe(query)


def build(model: Model, tools: list[Any]) -> ToolCallingAgent:
    if opts.unguarded:
        return ToolCallingAgent(tools=tools, model=model)
    if opts.fail_closed:
        from breaker.integrations.smolagents import guard

        return guard(ToolCallingAgent(tools=tools, model=model), fail_closed=True, socket_path=opts.socket)
    return run_doc("smolagents", model=model, tools=tools)["agent"]


def run() -> str:
    model = ScriptedModel("search", PROBE_ARGS, opts.calls, log=True)
    if opts.mode == "nested":
        return run_nested(model)
    agent = built["agent"] = build(model, [search])
    return str(agent.run("Search for cbprobe."))


def run_nested(model: Model) -> str:
    """A manager agent with the searcher as its managed agent: the searcher is shown as its child."""
    searcher = ToolCallingAgent(tools=[search], model=model, name="searcher", description="Searches.", max_steps=50)
    boss_model = ScriptedModel("searcher", {"task": "Search for cbprobe."}, 1, log=False)
    from breaker.integrations.smolagents import guard

    boss = guard(ToolCallingAgent(tools=[], model=boss_model, managed_agents=[searcher]))
    return str(boss.run("Find cbprobe."))


def again(error: BaseException | None) -> str:
    """The same agent runs once more (smolagents has no run id: it is the same agent to the guard)."""
    return str(built["agent"].run("Search for cbprobe again."))


finish(opts, probe, record, run, again)
