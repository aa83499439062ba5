"""Benchmark of the agent-framework integrations: one agent step (the model's tool call, the framework around
it, a tool that sleeps 1 ms) with the guard against the same agent without it, per framework.

Run:  .venv/bin/python tests/bench/bench_integrations.py          (add --quick for a fast smoke run)

Each framework runs in its venv (`python -m tests.integrations.frameworks install` makes them; this
installs what is missing) against a real guard process (`cbconsole --headless`, no cap). The scenario
(tests/integrations/agents/) times the gaps between the scripted model's requests: one step each.
Guarded and unguarded runs alternate in one process, each a fresh agent making `--calls` distinct calls
(nothing is denied). Target (issue 15): median <= 1.2x the baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.conftest import GuardProcess  # noqa: E402
from tests.integrations import frameworks  # noqa: E402

AGENTS = ROOT / "tests" / "integrations" / "agents"
CASES = [  # (label, extra, scenario, its arguments)
    ("langgraph", "langgraph", "langgraph_agent.py", ["agent"]),
    ("openai-agents", "openai-agents", "openai_agents_agent.py", []),
    ("pydantic-ai", "pydantic-ai", "pydantic_ai_agent.py", []),
    ("smolagents", "smolagents", "smolagents_agent.py", []),
    ("crewai", "crewai", "crewai_agent.py", []),
]


def p99(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * 0.99))]


def bare_check_after(sock: Path, gap: float, n: int) -> float:
    """The median round trip of a bare `GuardClient.check` made `gap` seconds after the last one, in ms: the
    least a guarded step can cost more than an unguarded one. On a VM whose idle vCPUs sleep, a round trip
    after a pause costs several times one made back to back (waking both processes' vCPUs)."""
    from breaker.client import GuardClient

    lat = []
    with GuardClient(sock, timeout=5.0, harness="floor") as client:
        for i in range(n):
            time.sleep(gap)
            t0 = time.perf_counter()
            client.check(f"floor-{i % 10}", "read", {"n": i})
            lat.append(time.perf_counter() - t0)
    return statistics.median(lat) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few calls: a smoke run, no figures")
    ap.add_argument("--calls", type=int, default=40, help="calls per run (within every framework's default limits)")
    ap.add_argument("--rounds", type=int, default=8, help="pairs of runs (guarded, unguarded) per framework")
    ap.add_argument("--only", nargs="*", help="these frameworks only")
    a = ap.parse_args()
    calls, rounds = (6, 1) if a.quick else (a.calls, a.rounds)
    with tempfile.TemporaryDirectory(prefix="cbbench-") as tmp:
        t = Path(tmp)
        run = t / "run"
        run.mkdir(mode=0o700)
        (t / "home").mkdir()
        patch = t / "layer.yml"
        patch.write_text("- id: circuit-breaker\n  config:\n    maxCallsPerAgent: 0\n")
        guard = GuardProcess(run / "guard.sock", t / "home", patch, t / "guard.log", ["--state", "none"]).start()
        try:
            print(f"{calls} calls a run, {rounds} guarded and {rounds} unguarded runs per framework; a 1 ms tool")
            for label, extra, script, argv in CASES:
                if a.only and label not in a.only:
                    continue
                fw = frameworks.ensure(extra)
                out = t / f"{label}.json"
                cmd = [str(fw.python), str(AGENTS / script), *argv, "bench", "--calls", str(calls)]
                cmd += ["--rounds", str(rounds), "--out", str(out), "--results", "counter"]
                subprocess.run(
                    cmd,
                    env=fw.env({"CBCONSOLE_SOCKET": str(guard.socket)}),
                    cwd=t,
                    check=True,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=600,
                )
                got = json.loads(out.read_text())
                g = [s * 1000 for s in got["guarded"]]
                b = [s * 1000 for s in got["baseline"]]
                gm, bm = statistics.median(g), statistics.median(b)
                floor = bare_check_after(guard.socket, bm / 1000, 20 if a.quick else 200)
                print(
                    f"{label:14} per call: median {gm:7.2f} ms  p99 {p99(g):7.2f} ms  "
                    f"baseline median {bm:7.2f} ms  p99 {p99(b):7.2f} ms  ratio {gm / bm:.2f}x  "
                    f"(floor: one bare check a step apart {floor:.2f} ms, {(bm + floor) / bm:.2f}x)"
                )
        finally:
            guard.stop()


if __name__ == "__main__":
    main()
