"""Benchmark: consoles over many guards — what each console following a guard costs that guard, and what one
console over several guards costs itself.

Run:  .venv/bin/python tests/bench/bench_fleet.py          (add --quick for a fast smoke run)

Part 1, the guard's side: one guard with 1,000 agents under 1,000 checks/s of background load (2 client
processes), and 0, 1, 4 and 16 followers — processes that subscribe on the operator socket and read every
state frame, as a console does, without drawing anything. Printed per count: the check round trip of a probe
client (p50, p99) and the ratio of its p99 to no follower's, and the frames each follower read per second.

Part 2, the console's side: one console (the real app, headless, in a child process) attached to 1, 4 and 8
guards with 500 agents each under 100 checks/s each. Printed per count: its RSS, the event-loop lag and the
key-press-to-screen latency (median, p95), each with its ratio to the one-guard run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_console_scale import load, pct, populate, rss_now, start_guard  # noqa: E402

from breaker.client import GuardClient  # noqa: E402
from breaker.paths import default_operator_socket_path  # noqa: E402
from breaker.protocol import Subscribe  # noqa: E402


def follower(operator: str, seconds: float, out: Any) -> None:
    """Subscribe and read every frame for `seconds`, as a console does (decoding each); how many it read."""
    frames = 0
    client = GuardClient(operator, timeout=5.0, harness="follower")
    client.request(Subscribe())
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        frames += client.poll_events()  # each frame decoded, as a console's link does
        time.sleep(0.01)
    client.close()
    out.put(frames)


def probe(sock: str, seconds: float) -> list[float]:
    client = GuardClient(sock, timeout=5.0, harness="probe")
    lat: list[float] = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        t0 = time.perf_counter()
        client.check(f"probe-{n % 50}", "read", {"path": f"f{n}"})
        lat.append(time.perf_counter() - t0)
        n += 1
        time.sleep(0.002)
    client.close()
    return lat


def guard_side(counts: list[int], agents: int, rate: float, seconds: float) -> None:
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        guard, sock = start_guard(d)
        operator = str(default_operator_socket_path(sock, environ={}))
        try:
            populate(sock, agents)
            stop = ctx.Event()
            loaders = [ctx.Process(target=load, args=(sock, w, agents, rate / 2, stop)) for w in range(2)]
            for p in loaders:
                p.start()
            base: float | None = None
            for n in counts:
                q = ctx.Queue()
                followers = [ctx.Process(target=follower, args=(operator, seconds + 1.0, q)) for _ in range(n)]
                for p in followers:
                    p.start()
                time.sleep(0.5)  # subscribed, the first full picture read
                lat = probe(sock, seconds)
                read = [q.get(timeout=60) for _ in followers]
                for p in followers:
                    p.join(10)
                p50, p99 = statistics.median(lat) * 1e6, pct(lat, 0.99) * 1e6
                base = base or p99
                per = f"{statistics.mean(read) / (seconds + 1.0):5.1f} frames/s each" if read else "—"
                print(
                    f"guard with {n:>2} follower(s): check p50 {p50:7.1f} us  p99 {p99:8.1f} us  "
                    f"ratio p99 {p99 / base:5.2f}x  ({per})",
                    flush=True,
                )
            stop.set()
            for p in loaders:
                p.join(10)
        finally:
            guard.send_signal(signal.SIGTERM)
            guard.wait(10)


def console_child(operators: list[str], total: int, presses: int) -> None:
    import gc

    from textual import events

    from console.app import CBConsole
    from console.session import FleetMember, FleetSession
    from console.widgets.agents import AgentsTable

    gc.collect()
    report: dict[str, Any] = {"baseline_mib": rss_now()}

    async def run() -> None:
        from console.session import AttachedGuard

        session = (
            FleetSession([FleetMember("", Path(o)) for o in operators])
            if len(operators) > 1
            else AttachedGuard(Path(operators[0]), Path(operators[0]))
        )
        app = CBConsole(session)
        lags: list[float] = []
        times: list[float] = []
        async with app.run_test(size=(160, 45)):
            table = app.query_one(AgentsTable)
            while table.row_count < total:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            stop = asyncio.Event()

            async def lag() -> None:
                last = time.perf_counter()
                while not stop.is_set():
                    await asyncio.sleep(0.02)
                    now = time.perf_counter()
                    lags.append(max(0.0, now - last - 0.02))
                    last = now

            prober = asyncio.create_task(lag())
            for _ in range(presses):
                await asyncio.sleep(0.25)
                before = table.selected
                t0 = time.perf_counter()
                driver = app._driver
                assert driver is not None
                driver.send_message(events.Key("down" if table.cursor_row < table.row_count - 2 else "up", None))
                while table.selected == before and time.perf_counter() - t0 < 2:
                    await asyncio.sleep(0.001)
                times.append(time.perf_counter() - t0)
            stop.set()
            await prober
            report["rss_mib"] = rss_now()
            await app.shutdown()
        report.update(lags=lags, presses=times)

    asyncio.run(run())
    print(json.dumps(report), flush=True)


def console_side(counts: list[int], agents: int, rate: float, presses: int, timeout: float) -> None:
    ctx = multiprocessing.get_context("fork")
    base: dict[str, float] = {}
    for n in counts:
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o700)
            guards, operators, stop, loaders = [], [], ctx.Event(), []
            try:
                for i in range(n):
                    sub = os.path.join(d, f"g{i}")
                    os.mkdir(sub, 0o700)
                    guard, sock = start_guard(sub)
                    guards.append(guard)
                    operators.append(str(default_operator_socket_path(sock, environ={})))
                    populate(sock, agents)
                    loaders.append(ctx.Process(target=load, args=(sock, i, agents, rate, stop)))
                for p in loaders:
                    p.start()
                cmd = [sys.executable, __file__, "--child", json.dumps(operators), "--agents", str(n * agents)]
                out = subprocess.run(
                    [*cmd, "--presses", str(presses)], cwd=ROOT, capture_output=True, text=True, timeout=timeout
                )
                line = next((x for x in reversed(out.stdout.splitlines()) if x.startswith("{")), None)
                if line is None:
                    print(f"console over {n} guard(s): ERROR {out.stderr.strip()[-1500:]}", flush=True)
                    continue
                report = json.loads(line)
            finally:
                stop.set()
                for p in loaders:
                    p.join(10)
                for guard in guards:
                    guard.send_signal(signal.SIGTERM)
                    guard.wait(10)
        lag50, lag_max = statistics.median(report["lags"]) * 1e3, max(report["lags"]) * 1e3
        key50, key95 = statistics.median(report["presses"]) * 1e3, pct(report["presses"], 0.95) * 1e3
        rss = report["rss_mib"]
        base = base or {"rss": rss, "key": key50, "lag": max(lag50, 0.1)}
        print(
            f"console over {n} guard(s), {n * agents:,} agents: RSS {rss:6.1f} MiB ({rss / base['rss']:4.2f}x)  "
            f"event-loop lag median {lag50:6.1f} ms max {lag_max:6.1f} ms  "
            f"key press median {key50:6.1f} ms p95 {key95:6.1f} ms  ratio {key50 / base['key']:5.2f}x",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--agents", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--presses", type=int, default=30)
    args = ap.parse_args()
    if args.child:
        console_child(json.loads(args.child), args.agents, args.presses)
        return
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs", flush=True)
    if args.quick:
        guard_side([0, 2], agents=50, rate=100.0, seconds=1.0)
        console_side([1, 2], agents=20, rate=20.0, presses=4, timeout=60.0)
    else:
        guard_side([0, 1, 4, 16], agents=1000, rate=1000.0, seconds=8.0)
        console_side([1, 4, 8], agents=500, rate=100.0, presses=args.presses, timeout=300.0)


if __name__ == "__main__":
    main()
