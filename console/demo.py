"""Simulated agents for `cbconsole --demo`: they drive the real guard through the real client library.

Healthy sessions, task after task, each with a subagent looping apart from it; one agent repeating a search like the
seed's 555; one varying its args until the cap; one rewriting `description` on every call like the seed's first bug.
Run as its own process (`python -m console.demo --socket PATH`); it stops when its parent (the console) goes away.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from breaker.client import GuardClient

__all__ = ["SCRIPTS", "TASK_CALLS", "DemoCall", "End", "Script", "main", "timeline"]


@dataclass(frozen=True, slots=True)
class DemoCall:
    """One tool call an agent makes (`parent`: the session a subagent belongs to)."""

    agent: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class End:
    """An agent's session ends: its harness tells the guard, which lets its window go (its row leaves the list)."""

    agent: str


Step = DemoCall | End

# A healthy session's calls: its task, done well under the demo's cap (maxCallsPerAgent 150 in its patch layer). A
# cap is a lifetime budget per session, so a healthy agent that never ended would meet any cap; a real one ends its
# session and the next task is a session of its own.
TASK_CALLS = 100
SUBAGENT_FROM = 10  # the healthy call from which its task's subagent runs (and loops)
_FILES = [f"src/module_{n}.py" for n in range(60)] + ["README.md", "pyproject.toml"]


def healthy() -> Iterator[Step]:
    """Task after task: a session whose calls all differ but for a test run now and then (never near the duplicate
    limit), with a subagent that loops on one read two calls for each of its parent's; both end with the task."""
    for task in range(1, 1_000_000):
        agent = "session-demo-healthy" if task == 1 else f"session-demo-healthy-{task}"
        sub = f"{0x3F2A9C1E + task - 1:08x}-demo-subagent"
        reads = tests = 0
        for i in range(TASK_CALLS):
            kind = i % 10
            if kind < 4:
                yield DemoCall(agent, "read", {"path": _FILES[reads % len(_FILES)]})
                reads += 1
            elif kind < 7:
                yield DemoCall(agent, "web_search", {"query": f"python asyncio unix socket example {task}.{i}"})
            elif kind < 9:
                yield DemoCall(agent, "bash", {"command": f"pytest -q tests/test_{tests % 7}.py", "description": "Run"})
                tests += 1
            else:
                yield DemoCall(agent, "todo_write", {"todos": [{"content": f"step {i}", "status": "in_progress"}]})
            if i >= SUBAGENT_FROM:
                for _ in range(2):  # the seed's subagent: one read, over and over
                    yield DemoCall(sub, "read", {"path": "/workspace/notes/brief.md"}, parent=agent)
        yield End(sub)
        yield End(agent)


def search_loop() -> Iterator[Step]:
    while True:  # the seed's agent A: one query, 555 times
        yield DemoCall("session-demo-searcher", "web_search", {"query": "qwen3.8 gated deltanet repetition fix"})


def varying_args() -> Iterator[Step]:
    page = 0
    while True:  # slips past the duplicate check; only the cap stops it
        page += 1
        yield DemoCall("session-demo-pager", "web_search", {"query": "llama.cpp key_gdiff", "page": page})


def description_rewriter() -> Iterator[Step]:
    step = 0
    while True:  # the seed's first bug: ten identical commands, ten different descriptions
        step += 1
        args = {"command": "echo cbprobe4", "description": f"Run probe step {step}"}
        yield DemoCall("session-demo-prober", "bash", args)


@dataclass(frozen=True, slots=True)
class Script:
    """One simulated harness connection: its harness, its steps per second, its steps."""

    harness: str
    rate: float
    steps: Callable[[], Iterator[Step]]


SCRIPTS: list[Script] = [
    Script("dsh", 6.0, healthy),  # two healthy calls a second, and its subagent's four
    Script("dsh", 12.0, search_loop),
    Script("claude-code", 30.0, varying_args),
    Script("dsh", 3.0, description_rewriter),
]


def timeline(seconds: float, scripts: list[Script] = SCRIPTS) -> Iterator[tuple[float, Script, Step]]:
    """Every step the demo's agents take in their first `seconds`, in order, each at its script's pace (without the
    live demo's jitter): (the demo's clock, the script, the step). What the demo does over an hour, in a moment."""
    queue = [(0.0, n, iter(script.steps())) for n, script in enumerate(scripts)]
    heapq.heapify(queue)
    while queue:
        at, n, steps = heapq.heappop(queue)
        if at > seconds:
            return
        yield at, scripts[n], next(steps)
        heapq.heappush(queue, (at + 1.0 / scripts[n].rate, n, steps))


def run_agent(socket: str, script: Script, stop: threading.Event) -> None:
    client = GuardClient(socket, timeout=1.0, harness=script.harness)
    period = 1.0 / script.rate
    for step in script.steps():
        if stop.is_set():
            break
        if isinstance(step, End):
            client.agent_end(step.agent)
            continue
        extra = {"parent": step.parent} if step.parent else {}
        client.check(step.agent, step.tool, step.args, harness=script.harness, **extra)
        stop.wait(period * random.uniform(0.7, 1.3))
    client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m console.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    ns = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    parent = os.getppid()
    threads = [threading.Thread(target=run_agent, args=(ns.socket, script, stop), daemon=True) for script in SCRIPTS]
    for t in threads:
        t.start()
    while not stop.is_set():
        if os.getppid() != parent:  # the console is gone: so are we
            stop.set()
        stop.wait(0.5)
    for t in threads:
        t.join(2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
