"""LangChain's create_agent (the middleware) or a hand-built LangGraph graph (the ToolNode), with a scripted chat
model (a BaseChatModel subclass: LangChain's fake models cannot bind tools)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph

from tests.integrations.agents.common import FINAL, Probe, Record, args_for, finish, options, run_doc

FLAVOUR = sys.argv.pop(1)  # agent | graph
opts = options()
probe = Probe(opts)
record = Record()


class ScriptedChatModel(BaseChatModel):
    """Calls `tool` with `args` until the conversation holds `calls` tool calls, then answers FINAL."""

    calls: int
    tool: str = "probe"
    args: dict[str, Any] = {}

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.tool == "search":
            record.saw([m.content for m in messages if isinstance(m, ToolMessage)])
        made = sum(len(getattr(m, "tool_calls", None) or []) for m in messages)
        if made < self.calls:
            call = {"name": self.tool, "args": self.args or args_for(opts, made), "id": f"call_{self.tool}_{made + 1}"}
            message = AIMessage(content="", tool_calls=[call])
        else:
            message = AIMessage(content=FINAL)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def search(query: str) -> str:
    """Search for the query."""
    return probe(query)


model = ScriptedChatModel(calls=opts.calls, tool="search")
tools = [search]


def build() -> Any:
    if FLAVOUR == "agent":
        if opts.unguarded:
            return create_agent(model, tools)
        if opts.fail_closed:
            from breaker.integrations.langgraph import CircuitBreakerMiddleware

            return create_agent(
                model, tools, middleware=[CircuitBreakerMiddleware(fail_closed=True, socket_path=opts.socket)]
            )
        return run_doc("langgraph", model=model, tools=tools)["agent"]
    if opts.unguarded:
        from langgraph.prebuilt import ToolNode

        tool_node = ToolNode(tools)
    elif opts.fail_closed:
        from breaker.integrations.langgraph import guarded_tool_node

        tool_node = guarded_tool_node(tools, fail_closed=True, socket_path=opts.socket)
    else:
        tool_node = run_doc("langgraph", "setup: graph", tools=tools)["tool_node"]

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", tool_node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


config = {"configurable": {"thread_id": f"thread-{opts.mode}"}} if FLAVOUR == "graph" else {}


def run() -> str:
    if opts.mode == "nested":
        return run_nested()
    agent = build()
    inputs = {"messages": [("user", "Search for cbprobe.")]}
    if opts.mode == "async":
        out = asyncio.run(agent.ainvoke(inputs, config))
    else:
        out = agent.invoke(inputs, config)
    return str(out["messages"][-1].content)


def run_nested() -> str:
    """A parent agent whose `research` tool runs the guarded agent above: its calls are the child's."""
    agent = build()

    @tool
    def research(topic: str) -> str:
        """Research a topic with the research agent."""
        out = agent.invoke({"messages": [("user", topic)]})
        return str(out["messages"][-1].content)

    boss_model = ScriptedChatModel(calls=1, tool="research", args={"topic": "cbprobe"})
    boss = run_doc("langgraph", model=boss_model, tools=[research])["agent"]
    out = boss.invoke({"messages": [("user", "Research cbprobe.")]}, {"configurable": {"thread_id": "boss-thread"}})
    return str(out["messages"][-1].content)


finish(opts, probe, record, run)
