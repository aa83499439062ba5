"""Benchmark of Guard.check and of the engine's memory per remembered call.

Run:  .venv/bin/python tests/bench/bench_engine.py                (add --quick for a fast smoke run)
      .venv/bin/python tests/bench/bench_engine.py --against c81e52c   (also time that commit's engine)

Each timing is printed as median and p99 per call, with the ratio to the floor: the irreducible work
of any exact-match guard on the same args (canonical JSON with sorted keys, then a hash), measured in
the same run, in rounds interleaved with the checks so that a load that comes and goes weighs on both.
`--against COMMIT` loads that commit's `breaker/` from git as a package of its own and times its
Guard in the same rounds: the seed preset's target is to be no slower than it.

Targets (issue 22): under `preset: recommended`, a typical allowed call <= 5x the floor and 1,000
agents interleaved <= 8x; the seed preset no slower than before; <= 120 bytes per remembered call
under recommended (tracemalloc: the bytes Python allocated and still holds, over agents x window
calls). Each target line says `target met` or `NOT met`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from breaker import Config, Guard

ROOT = Path(__file__).resolve().parents[2]

NS = time.perf_counter_ns
ROUNDS_PER_REPEAT = 10  # each case's calls are timed in this many interleaved chunks per repeat
TARGETS = {  # (preset, case) -> the most its median may be, as a multiple of the floor
    ("recommended", "typical"): 5.0,
    ("recommended", "many"): 8.0,
}
MEMORY_TARGET = 120  # bytes per remembered call, under recommended


def stats(samples_ns: list[int]) -> tuple[float, float]:
    s = sorted(samples_ns)
    return statistics.median(s) / 1000, s[min(len(s) - 1, int(len(s) * 0.99))] / 1000


def overhead() -> int:
    """The cost of the timing itself (two perf_counter_ns calls), subtracted from every sample."""
    s = []
    for _ in range(20000):
        t0 = NS()
        s.append(NS() - t0)
    return int(statistics.median(s))


def floor_call(tool: str, args: Any) -> int:
    return hash(orjson.dumps((tool, args), option=orjson.OPT_SORT_KEYS))


def interleaved(runs: list[tuple[Callable[..., Any], list[tuple]]], repeat: int, floor: int) -> list[list[int]]:
    """Time each (function, calls) in turn, chunk by chunk, so that every one sees the same load; the samples
    of each, the timer's overhead taken off. Each chunk begins with the next function of the last one: none is
    always timed first (on what the one before it left in the caches)."""
    out: list[list[int]] = [[] for _ in runs]
    n, k = len(runs[0][1]), len(runs)
    step = max(1, n // ROUNDS_PER_REPEAT)
    turn = 0
    for _ in range(repeat):
        for start in range(0, n, step):
            turn += 1
            for j in [(turn + i) % k for i in range(k)]:
                (fn, calls), samples = runs[j], out[j]
                for args in calls[start : start + step]:
                    t0 = NS()
                    fn(*args)
                    samples.append(max(0, NS() - t0 - floor))
    return out


def verdict(value: float, target: float) -> str:
    return "target met" if value <= target else "NOT met"


def bench_case(
    name: str,
    case: str,
    preset: str,
    calls: list[tuple],
    floor_calls: list[tuple],
    guards: dict[str, Any],
    repeat: int,
    floor: int,
) -> None:
    runs = [(floor_call, floor_calls)] + [(g.check, calls) for g in guards.values()]
    samples = interleaved(runs, repeat, floor)
    fmed, _ = stats(samples[0])
    medians = {}
    for label, got in zip(guards, samples[1:], strict=True):
        med, p99 = stats(got)
        medians[label] = med
        ratio = med / fmed
        line = f"{name + label:<52} median {med:6.2f} us   p99 {p99:6.2f} us   baseline {fmed:6.2f} us"
        line += f"   ratio {ratio:5.2f}x"
        target = TARGETS.get((preset, case))
        if target is not None and not label:
            line += f"   (target <= {target:g}x: {verdict(ratio, target)})"
        print(line)
    if len(medians) > 1:
        base_label = next(k for k in medians if k)
        change = medians[""] / medians[base_label]
        line = f"{'':<4}this engine / the one{base_label}: median {change:5.2f}x"
        if preset == "seed":
            line += f"   (target <= 1x: {verdict(change, 1.0)})"
        print(line)


def bench_checks(n: int, repeat: int, preset: str, floor: int, engines: dict[str, Any]) -> None:
    print(f"-- preset: {preset}")

    def fresh() -> dict[str, Any]:
        return {label: m.Guard(m.Config.with_preset(preset, max_calls_per_agent=0)) for label, m in engines.items()}

    # A healthy agent: distinct searches, cycling through more queries than the window holds.
    typical = [
        ("agent-1", "web_search", {"query": f"gated deltanet repetition {i % 1000}", "max_results": 5, "lang": "en"})
        for i in range(n)
    ]
    strip = [(t, a) for _, t, a in typical]
    bench_case("check, typical 3-key search (allowed)", "typical", preset, typical, strip, fresh(), repeat, floor)

    looping = [("agent-2", "web_search", {"query": "the same query", "max_results": 5, "lang": "en"})] * n
    strip = [(t, a) for _, t, a in looping]
    bench_case("check, a loop of one call (denied)", "loop", preset, looping, strip, fresh(), repeat, floor)

    annotated = [
        ("agent-3", "bash", {"command": "echo cbprobe4", "description": f"Run probe step {i}", "timeout": 30})
        for i in range(n)
    ]
    strip = [(t, {"command": a["command"], "timeout": a["timeout"]}) for _, t, a in annotated]
    name = "check, bash, changing description (denied)"
    bench_case(name, "annotated", preset, annotated, strip, fresh(), repeat, floor)

    many = [(f"agent-{i % 1000}", "read", {"path": f"/src/file_{i}.py"}) for i in range(n)]
    strip = [(t, a) for _, t, a in many]
    bench_case("check, 1,000 agents interleaved (allowed)", "many", preset, many, strip, fresh(), repeat, floor)

    blob = "x" * 100_000
    big = [("agent-4", "write", {"path": f"/tmp/f{i}", "content": blob, "mode": "w"}) for i in range(max(50, n // 50))]
    strip = [(t, a) for _, t, a in big]
    bench_case("check, 100 KB args (hash-bound)", "big", preset, big, strip, fresh(), repeat, floor)


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
    line = (
        f"memory [{preset}]: {agents:,} agents x {window}-call windows of {arg_kb} KB args: "
        f"{total / 2**20:.1f} MiB in all, "
        f"{per_call:.0f} bytes per remembered call (args alone would be {arg_kb * 1024 * calls / 2**20:,.0f} MiB)"
    )
    if preset == "recommended":
        line += f"   (target <= {MEMORY_TARGET}: {verdict(per_call, MEMORY_TARGET)})"
    print(line)


def load_commit(commit: str, into: Path) -> Any:
    """That commit's `breaker/` as a package of its own (`breaker_<commit>`), its imports of itself renamed."""
    name = "breaker_" + re.sub(r"\W", "_", commit)
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "breaker"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar.stdout, check=True)
    (into / "breaker").rename(into / name)
    for path in (into / name).rglob("*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"\bbreaker(?=[. ])", name, text))
    sys.path.insert(0, str(into))
    return importlib.import_module(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    parser.add_argument("--against", metavar="COMMIT", help="also time this commit's engine, in the same rounds")
    parser.add_argument("--no-memory", action="store_true", help="timings only")
    ns = parser.parse_args()
    n, repeat = (2_000, 1) if ns.quick else (20_000, 5)
    print(f"Python {sys.version.split()[0]}, orjson {orjson.__version__}")
    floor = overhead()
    print(f"timer overhead {floor} ns (subtracted)")
    import breaker

    engines: dict[str, Any] = {"": breaker}
    with tempfile.TemporaryDirectory() as tmp:
        if ns.against:
            engines[f" [at {ns.against}]"] = load_commit(ns.against, Path(tmp))
        for preset in ("seed", "recommended"):
            bench_checks(n, repeat, preset, floor, engines)
    if ns.no_memory:
        return
    for preset in ("seed", "recommended"):
        if ns.quick:
            bench_memory(50, 20, 1, preset)
        else:
            bench_memory(1000, 200, 10, preset)


if __name__ == "__main__":
    main()
