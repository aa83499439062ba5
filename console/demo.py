"""Simulated agents for `cbconsole --demo`: they drive the real guard through the real client library.

A healthy agent; one repeating a search like the seed's 555; one varying its args until the cap;
one rewriting `description` on every call like the seed's first bug; a subagent looping apart from
its parent. Run as its own process (`python -m console.demo --socket PATH`); it stops when its
parent (the console) goes away.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from breaker.client import GuardClient

__all__ = ["SCRIPTS", "main"]

Call = tuple[str, dict[str, Any]]


def healthy() -> Iterator[Call]:
    rng = random.Random(1)
    files = [f"src/module_{n}.py" for n in range(60)] + ["README.md", "pyproject.toml"]
    i = 0
    while True:
        i += 1
        roll = rng.random()
        if roll < 0.4:
            yield "read", {"path": rng.choice(files)}
        elif roll < 0.7:
            yield "web_search", {"query": f"python asyncio unix socket example {i}"}
        elif roll < 0.9:
            yield "bash", {"command": f"pytest -q tests/test_{i % 7}.py", "description": "Run the tests"}
        else:
            yield "todo_write", {"todos": [{"content": f"step {i}", "status": "in_progress"}]}


def search_loop() -> Iterator[Call]:
    while True:  # the seed's agent A: one query, 555 times
        yield "web_search", {"query": "qwen3.8 gated deltanet repetition fix"}


def varying_args() -> Iterator[Call]:
    page = 0
    while True:  # slips past the duplicate check; only the cap stops it
        page += 1
        yield "web_search", {"query": "llama.cpp key_gdiff", "page": page}


def description_rewriter() -> Iterator[Call]:
    step = 0
    while True:  # the seed's first bug: ten identical commands, ten different descriptions
        step += 1
        yield "bash", {"command": "echo cbprobe4", "description": f"Run probe step {step}"}


def subagent_loop() -> Iterator[Call]:
    while True:
        yield "read", {"path": "/workspace/notes/brief.md"}


# agent id, parent, harness, calls per second, script
SCRIPTS: list[tuple[str, str | None, str, float, Callable[[], Iterator[Call]]]] = [
    ("session-demo-healthy", None, "dsh", 4.0, healthy),
    ("session-demo-searcher", None, "dsh", 12.0, search_loop),
    ("session-demo-pager", None, "claude-code", 30.0, varying_args),
    ("session-demo-prober", None, "dsh", 3.0, description_rewriter),
    ("3f2a9c1e-demo-subagent", "session-demo-healthy", "dsh", 6.0, subagent_loop),
]


def run_agent(
    socket: str,
    agent: str,
    parent: str | None,
    harness: str,
    rate: float,
    script: Callable[[], Iterator[Call]],
    stop: threading.Event,
) -> None:
    client = GuardClient(socket, timeout=1.0, harness=harness)
    period = 1.0 / rate
    for tool, args in script():
        if stop.is_set():
            break
        extra = {"parent": parent} if parent else {}
        client.check(agent, tool, args, harness=harness, **extra)
        stop.wait(period * random.uniform(0.7, 1.3))
    client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m console.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    ns = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    parent = os.getppid()
    threads = [threading.Thread(target=run_agent, args=(ns.socket, *spec, stop), daemon=True) for spec in SCRIPTS]
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
