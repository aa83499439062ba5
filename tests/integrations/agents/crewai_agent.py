"""CrewAI with a scripted OpenAI-compatible model server on 127.0.0.1 (tests/e2e/fakemodel.py; CrewAI's LLM
speaks the chat-completions dialect to it)."""

from __future__ import annotations

import asyncio
import contextlib

from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool

from tests.e2e.fakemodel import FakeModel, ModelRequest, Reply, Text, ToolCall
from tests.integrations.agents.common import FINAL, Probe, Record, args_for, finish, options, run_doc

opts = options()
probe = Probe(opts)
record = Record()


def script(req: ModelRequest) -> Reply:
    record.saw(req.tool_results)
    if req.prior_calls < opts.calls:
        return ToolCall("search", args_for(opts, req.prior_calls))
    return Text(FINAL)


@tool("search")
def search(query: str) -> str:
    """Search for the query."""
    return probe(query)


def setup(stack: contextlib.ExitStack) -> Crew:
    fm = stack.enter_context(FakeModel(script))
    llm = LLM(model="openai/scripted", base_url=f"{fm.url}/v1", api_key="dummy")
    if opts.fail_closed:
        from breaker.integrations.crewai import install

        stack.callback(install(fail_closed=True, socket_path=opts.socket).uninstall)
    elif not opts.unguarded:
        stack.callback(run_doc("crewai")["guard"].uninstall)
    agent = Agent(
        role="searcher",
        goal="Find cbprobe.",
        backstory="You search.",
        tools=[search],
        llm=llm,
        cache=False,  # else CrewAI answers a repeated call from its cache and the tool's runs are not the calls
        max_iter=50,
    )
    task = Task(description="Search for cbprobe.", expected_output="What you found.", agent=agent)
    return Crew(agents=[agent], tasks=[task])


def kickoff(crew: Crew) -> str:
    if opts.mode == "async":
        return str(asyncio.run(crew.kickoff_async()))
    return str(crew.kickoff())


with contextlib.ExitStack() as kept:  # with --again, the model and the hooks stay for the second kickoff
    built: dict[str, Crew] = {}

    def run() -> str:
        if opts.again:
            crew = built["crew"] = setup(kept)
            return kickoff(crew)
        with contextlib.ExitStack() as stack:  # each run its own model and hooks (bench: unguarded runs too)
            return kickoff(setup(stack))

    def again(error: BaseException | None) -> str:
        """The same crew kicked off once more: the same agent (`<crew id>/<role>`) to the guard."""
        return kickoff(built["crew"])

    finish(opts, probe, record, run, again)
