"""Benchmark of hot reload: from an editor-style save (write + rename) to the new config in force.

Run:  .venv/bin/python tests/bench/bench_reload.py          (add --quick for a fast smoke run)

Baseline, measured in the same run: the same save seen by a bare watchfiles watch with a 1 ms
debounce — the operating system's notification floor. Target (issue 2): within a second.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import watchfiles

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from breaker.patch import PatchSources
from breaker.reload import ConfigWatcher

ROW = "- id: circuit-breaker\n  config:\n    duplicateLimit: {}\n"


def save(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.swp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def measure_watcher(path: Path, rounds: int) -> list[float]:
    watcher = ConfigWatcher(PatchSources(patches=(path,)))
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    await asyncio.sleep(0.3)
    out = []
    for i in range(rounds):
        want = 2 + i % 5
        if watcher.config.duplicate_limit == want:
            want += 10
        t0 = time.perf_counter()
        save(path, ROW.format(want))
        while watcher.config.duplicate_limit != want:
            await asyncio.sleep(0.001)
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(0.05)
    stop.set()
    await task
    return out


async def measure_floor(path: Path, rounds: int) -> list[float]:
    stop = asyncio.Event()
    seen = asyncio.Queue()

    async def watch() -> None:
        async for _ in watchfiles.awatch(path.parent, debounce=1, step=1, stop_event=stop, recursive=False):
            seen.put_nowait(time.perf_counter())

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.3)
    out = []
    for i in range(rounds):
        t0 = time.perf_counter()
        save(path, ROW.format(i))
        t1 = await seen.get()
        out.append(t1 - t0)
        await asyncio.sleep(0.05)
        while not seen.empty():
            seen.get_nowait()
    stop.set()
    await task
    return out


def summary(samples: list[float]) -> tuple[float, float]:
    s = sorted(samples)
    return statistics.median(s) * 1000, s[min(len(s) - 1, int(len(s) * 0.99))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    rounds = 5 if parser.parse_args().quick else 40
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "cordis.patch.yml"
        path.write_text(ROW.format(6))
        floor = asyncio.run(measure_floor(path, rounds))
        ours = asyncio.run(measure_watcher(path, rounds))
    fmed, fp99 = summary(floor)
    med, p99 = summary(ours)
    print(f"baseline: bare watchfiles sees the save   median {fmed:7.1f} ms   p99 {fp99:7.1f} ms")
    print(
        f"save -> new config in force (ConfigWatcher) median {med:7.1f} ms   p99 {p99:7.1f} ms   "
        f"ratio {med / fmed:5.1f}x   target 1000 ms"
    )


if __name__ == "__main__":
    main()
