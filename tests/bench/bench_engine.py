"""Benchmark of Guard.check and of the engine's memory per remembered call.

Run:  .venv/bin/python tests/bench/bench_engine.py          (add --quick for a fast smoke run)

Each timing is printed as median and p99 per call, with the ratio to a baseline measured in the
same run: the irreducible work of any exact-match guard on the same args (canonical JSON with
sorted keys, then a hash). Targets (issue 2): typical 3-key search call median <= 4 us; memory per
remembered call <= 200 bytes, so 1,000 agents x 200-call windows of 10 KB args < 64 MiB. Issue 11:
the same with `preset: recommended` (repeats, cycles, warnings, progress): typical call median
<= 2 us, printed beside the seed preset's figure; memory per remembered call stays bounded.
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

from breaker import Config, Guard

NS = time.perf_counter_ns


def stats(samples_ns: list[int]) -> tuple[float, float]:
    s = sorted(samples_ns)
    return statistics.median(s) / 1000, s[min(len(s) - 1, int(len(s) * 0.99))] / 1000


def timed(fn, calls: list, repeat: int) -> list[int]:
    out = []
    for _ in range(repeat):
        for args in calls:
            t0 = NS()
            fn(*args)
            out.append(NS() - t0)
    return out


def overhead() -> int:
    """The cost of the timing itself (two perf_counter_ns calls), subtracted from every sample."""
    s = []
    for _ in range(20000):
        t0 = NS()
        s.append(NS() - t0)
    return int(statistics.median(s))


def baseline(tool, args):
    return hash(orjson.dumps((tool, args), option=orjson.OPT_SORT_KEYS))


def row(name: str, samples: list[int], base: list[int], floor: int) -> None:
    med, p99 = stats([max(0, x - floor) for x in samples])
    bmed, _ = stats([max(0, x - floor) for x in base])
    print(f"{name:<44} median {med:6.2f} us   p99 {p99:6.2f} us   baseline {bmed:6.2f} us   ratio {med / bmed:5.2f}x")


def bench_checks(n: int, repeat: int, preset: str, floor: int) -> None:
    print(f"-- preset: {preset}")
    guard = Guard(Config.with_preset(preset, max_calls_per_agent=0))
    # A healthy agent: distinct searches, cycling through more queries than the window holds.
    typical = [
        ("agent-1", "web_search", {"query": f"gated deltanet repetition {i % 1000}", "max_results": 5, "lang": "en"})
        for i in range(n)
    ]
    base = timed(baseline, [(t, a) for _, t, a in typical], repeat)
    row("check, typical 3-key search (allowed)", timed(guard.check, typical, repeat), base, floor)

    looping = [("agent-2", "web_search", {"query": "the same query", "max_results": 5, "lang": "en"})] * n
    base = timed(baseline, [(t, a) for _, t, a in looping], repeat)
    row("check, a loop of one call (denied)", timed(guard.check, looping, repeat), base, floor)

    annotated = [
        ("agent-3", "bash", {"command": "echo cbprobe4", "description": f"Run probe step {i}", "timeout": 30})
        for i in range(n)
    ]
    stripped = [(t, {"command": a["command"], "timeout": a["timeout"]}) for _, t, a in annotated]
    row(
        "check, bash, changing description (denied)",
        timed(guard.check, annotated, repeat),
        timed(baseline, stripped, repeat),
        floor,
    )

    many = [(f"agent-{i % 1000}", "read", {"path": f"/src/file_{i}.py"}) for i in range(n)]
    base = timed(baseline, [(t, a) for _, t, a in many], repeat)
    row("check, 1,000 agents interleaved (allowed)", timed(guard.check, many, repeat), base, floor)

    blob = "x" * 100_000
    big = [("agent-4", "write", {"path": f"/tmp/f{i}", "content": blob, "mode": "w"}) for i in range(max(50, n // 50))]
    base = timed(baseline, [(t, a) for _, t, a in big], repeat)
    row("check, 100 KB args (hash-bound)", timed(guard.check, big, repeat), base, floor)


def bench_memory(agents: int, window: int, arg_kb: int, preset: str) -> None:
    gc.collect()
    guard = Guard(Config.with_preset(preset, window=window, max_calls_per_agent=0, max_agents=agents))
    pad = "y" * (arg_kb * 1024)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(window):
        for a in range(agents):
            agent = f"agent-{a:04d}"
            guard.check(agent, "write", {"path": f"/f/{i}", "content": pad, "n": i}, call_id=i)
            if preset != "seed":
                guard.result(agent, f"{i:016x}", call_id=i)  # with progress, every result is remembered
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    calls = agents * window
    per_call = (after - before) / calls
    total = after - before
    print(
        f"memory [{preset}]: {agents:,} agents x {window}-call windows of {arg_kb} KB args: "
        f"{total / 2**20:.1f} MiB in all, "
        f"{per_call:.0f} bytes per remembered call (args alone would be {arg_kb * 1024 * calls / 2**20:,.0f} MiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    ns = parser.parse_args()
    n, repeat = (2_000, 1) if ns.quick else (20_000, 5)
    print(f"Python {sys.version.split()[0]}, orjson {orjson.__version__}")
    floor = overhead()
    print(f"timer overhead {floor} ns (subtracted)")
    for preset in ("seed", "recommended"):
        bench_checks(n, repeat, preset, floor)
    for preset in ("seed", "recommended"):
        if ns.quick:
            bench_memory(50, 20, 1, preset)
        else:
            bench_memory(1000, 200, 10, preset)


if __name__ == "__main__":
    main()
