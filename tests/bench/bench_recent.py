"""Benchmark of every agent's recent calls (issue 24: the drill-down opens on an agent's last 20 calls): what they
cost the guard's memory, and what turning them costs the tick, against the check itself.

Run:  .venv/bin/python tests/bench/bench_recent.py          (add --quick for a fast smoke run)

- memory: tracemalloc around N agents (10,000) x 20 checks through `ServerSession._handle`, a tick after each
  round, the agents' rings then as the check left them (calls of a few short args kept as they were); then after
  every agent was opened once (`Follows.recent`: all rows). The baseline is the same session with 1 check an agent
  (its ring holding one call): the figure is what the other 19 calls add, per agent.
- time: the check (`ServerSession._handle`, 50 agents, varied args) and the tick's work per call it turns (the
  worst case: each agent called 20 times between ticks, so every call is turned once), median of samples.
The check's own share is best measured in instructions (docs/scale.md: callgrind), which the load does not move.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from breaker.config import Config
from breaker.engine import Guard
from breaker.follows import RECENT
from breaker.protocol import HARNESS
from breaker.session import ServerSession


def session() -> ServerSession:
    return ServerSession(Guard(Config().replace(max_calls_per_agent=0)), clock=lambda: 1.0, owner_uid=0)


def frame(agent: int, n: int) -> bytes:
    args = {"command": f"grep -rn pattern{n} src/module{agent}", "timeout": 30}
    return orjson.dumps({"op": "check", "id": n, "agent": f"agent-{agent:05d}", "tool": "Bash", "args": args})


def memory(agents: int) -> tuple[float, float]:
    """Bytes an agent that its last RECENT - 1 calls add: kept as the tick left them, and as rows."""
    tracemalloc.start()
    s = session()
    ch = s.open(HARNESS, None, None)
    for a in range(agents):
        s._handle(ch, frame(a, 0))
    ch.out.clear()
    s.tick(0.0)
    gc.collect()
    one = tracemalloc.get_traced_memory()[0]
    for n in range(1, RECENT):
        for a in range(agents):
            s._handle(ch, frame(a, n))
        ch.out.clear()
        s.tick(0.0)
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - one
    for a in range(agents):
        s.follows.recent(f"agent-{a:05d}")
    gc.collect()
    rows = tracemalloc.get_traced_memory()[0] - one
    tracemalloc.stop()
    return kept / agents, rows / agents


def timing(rounds: int) -> tuple[list[float], list[float]]:
    """Per round of 1,000 checks over 50 agents: a check's time, and the tick's time per call it turned."""
    s = session()
    ch = s.open(HARNESS, None, None)
    frames = [frame(i % 50, i) for i in range(1000)]
    checks, ticks = [], []
    for _ in range(rounds + 2):
        start = time.perf_counter()
        for f in frames:
            s._handle(ch, f)
        checks.append((time.perf_counter() - start) / 1000)
        ch.out.clear()
        start = time.perf_counter()
        s.tick(0.0)
        ticks.append((time.perf_counter() - start) / (50 * RECENT))
    return checks[2:], ticks[2:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    quick = ap.parse_args().quick
    agents, rounds = (500, 5) if quick else (10_000, 60)
    print(f"Python {sys.version.split()[0]}; {agents:,} agents x {RECENT} calls; {rounds} rounds of 1,000 checks")
    kept, rows = memory(agents)
    print(
        f"recent calls, {agents:,} agents: {kept:,.0f} bytes an agent as the tick keeps them "
        f"({kept * agents / 2**20:.1f} MiB), {rows:,.0f} bytes an agent once opened (rows)"
    )
    checks, ticks = timing(rounds)
    check, tick = statistics.median(checks), statistics.median(ticks)
    print(
        f"check median {check * 1e6:.2f} us; the tick per call it turns median {tick * 1e6:.2f} us "
        f"p99 {sorted(ticks)[int(len(ticks) * 0.99)] * 1e6:.2f} us; ratio to a check {tick / check:.2f}x"
    )


if __name__ == "__main__":
    main()
