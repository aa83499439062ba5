"""Benchmark: the console at scale — key-press latency and memory with 1,000 and 10,000 agents.

Run:  .venv/bin/python tests/bench/bench_console_scale.py          (add --quick for a fast smoke run)

For each size a fresh guard (`cbconsole --headless`) is populated with N agents (several client
processes, one connection each), then background load spreads checks over the agents (repeats trip and
every call changes a rate, so the rows re-sort while keys are pressed). The console runs in a child
process of its own (the real app, headless via `App.run_test()`) so that only its memory is counted; it
reports on stdout as JSON: its RSS with only Python and the imports (the baseline), its RSS and peak
with the table full, how long the first full table took, the event loop's lag, and each key press.

Key-press-to-screen: from the driver delivering `down` until the agents table's cursor has moved and the
detail line shows that agent. A press whose cursor is later found back on the agent it left is counted
as reverted (a lost key); one that never reaches the screen within 2 s as timed out. Targets (issue 12):
key-press p95 <= 150 ms and console RSS <= 150 MiB at 10,000 agents. The first, small size is the
baseline of the key-press ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
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

from breaker.client import GuardClient  # noqa: E402
from breaker.protocol import Ping  # noqa: E402

POPULATORS = 4  # client processes that create the agents, one connection each
LOADERS = 2  # client processes of the background load
MIB = 1024 * 1024


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * q))]


def agent_id(i: int) -> str:
    return f"agent-{i:05d}"


# -- the parent: guard, agents, load --------------------------------------------------------------------


def start_guard(d: str) -> tuple[subprocess.Popen[bytes], str]:
    os.mkdir(os.path.join(d, "run"), 0o700)
    sock = os.path.join(d, "run", "guard.sock")
    open(os.path.join(d, "layer.yml"), "a").close()  # an empty layer (a --patch that does not exist is refused)
    env = {**os.environ, "DSH_HOME": os.path.join(d, "dsh"), "XDG_STATE_HOME": os.path.join(d, "state")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "breaker.cli",
            "--headless",
            "--socket",
            sock,
            "--log-level",
            "warning",
            "--patch",
            os.path.join(d, "layer.yml"),
        ],
        cwd=ROOT,
        env=env,
    )
    client = GuardClient(sock, timeout=0.5, hello=False)
    for _ in range(200):
        try:
            client.request(Ping())
            break
        except Exception:
            time.sleep(0.05)
    client.close()
    return proc, sock


def populate_part(path: str, worker: int, agents: range) -> None:
    client = GuardClient(path, timeout=5.0, harness=f"pop-{worker}")
    for i in agents:
        client.check(agent_id(i), "web_search", {"query": f"start {i}"})
    client.close()


def populate(path: str, n: int) -> float:
    """Create agents 0..n-1 (one check each) from POPULATORS processes; the seconds it took."""
    ctx = multiprocessing.get_context("fork")
    t0 = time.perf_counter()
    procs = [ctx.Process(target=populate_part, args=(path, w, range(w, n, POPULATORS))) for w in range(POPULATORS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    return time.perf_counter() - t0


def load(path: str, worker: int, n: int, rate: float, stop: Any) -> None:
    """Checks spread at random over the n agents, paced to `rate` per second, until `stop` is set. Args
    come from a small set, so agents repeat calls, warn and trip (their status and rank change)."""
    client = GuardClient(path, timeout=5.0, harness=f"load-{worker}")
    rnd = random.Random(worker)
    period = 1 / rate
    start = time.perf_counter()
    k = 0
    while not stop.is_set():
        due = start + k * period
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        client.check(agent_id(rnd.randrange(n)), "web_search", {"query": f"q{rnd.randrange(3)}"})
        k += 1
    client.close()


def run_child(sock: str, n: int, presses: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", sock, "--agents", str(n), "--presses", str(presses)]
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"the console did not finish within {timeout:.0f} s"}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": f"no report (exit {out.returncode}): {out.stderr.strip()[-2000:]}"}


def measure(n: int, presses: int, rate: float, timeout: float) -> tuple[dict[str, Any], float]:
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        guard, sock = start_guard(d)
        try:
            populated = populate(sock, n)
            ctx = multiprocessing.get_context("fork")
            stop = ctx.Event()
            loaders = [ctx.Process(target=load, args=(sock, w, n, rate / LOADERS, stop)) for w in range(LOADERS)]
            for p in loaders:
                p.start()
            try:
                report = run_child(sock, n, presses, timeout)
            finally:
                stop.set()
                for p in loaders:
                    p.join(10)
        finally:
            guard.send_signal(signal.SIGTERM)
            guard.wait(10)
    return report, populated


# -- the child: the console alone -----------------------------------------------------------------------


def rss_now() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / MIB
    return 0.0


def child(sock: str, n: int, presses: int) -> None:
    import gc

    from textual import events

    from console.app import CBConsole
    from console.session import AttachedGuard
    from console.widgets.agents import AgentsTable

    gc.collect()
    baseline = rss_now()  # Python and every import the console needs, no app
    report: dict[str, Any] = {"baseline_mib": baseline}

    async def run() -> None:
        app = CBConsole(AttachedGuard(Path(sock)))
        lags: list[float] = []
        times: list[float] = []
        outcomes = {"moved": 0, "timed_out": 0, "reverted": 0}
        t_start = time.perf_counter()
        async with app.run_test(size=(160, 45)):
            table = app.query_one(AgentsTable)
            while table.row_count < n:
                await asyncio.sleep(0.05)
            report["first_full_s"] = time.perf_counter() - t_start
            await asyncio.sleep(1.0)  # a few frames of the load: the rows re-sort from here on
            report["rss_full_mib"] = rss_now()
            stop = asyncio.Event()

            async def probe() -> None:
                tick = 0.02
                last = time.perf_counter()
                while not stop.is_set():
                    await asyncio.sleep(tick)
                    now = time.perf_counter()
                    lags.append(max(0.0, now - last - tick))
                    last = now

            prober = asyncio.create_task(probe())
            left: str | None = None  # the agent the last press moved the cursor away from
            for _ in range(presses):
                await asyncio.sleep(0.25)
                if left is not None and table.selected == left:
                    outcomes["reverted"] += 1  # the cursor went back: that press was lost
                    outcomes["moved"] -= 1
                key = "down" if table.cursor_row < table.row_count - 2 else "up"
                before = table.selected
                t0 = time.perf_counter()
                driver = app._driver
                assert driver is not None
                driver.send_message(events.Key(key, None))  # as the terminal driver delivers a key
                while True:
                    selected = table.selected
                    if (
                        selected != before
                        and selected
                        and table.current_key() == selected
                        and str(app.main.detail.content).startswith(selected[:20])
                    ):
                        outcomes["moved"] += 1
                        times.append(time.perf_counter() - t0)
                        left = before
                        break
                    if time.perf_counter() - t0 > 2:
                        outcomes["timed_out"] += 1
                        left = None
                        break
                    await asyncio.sleep(0.001)
            await asyncio.sleep(0.25)
            if left is not None and table.selected == left:
                outcomes["reverted"] += 1
                outcomes["moved"] -= 1
            stop.set()
            await prober
            report["rss_end_mib"] = rss_now()
            report["rows"] = table.row_count
            await app.shutdown()
        report.update(presses=times, lags=lags, outcomes=outcomes)

    asyncio.run(run())
    report["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(report), flush=True)


# -- output ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help="e.g. 100,1000,10000")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--agents", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--presses", type=int, default=40)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.agents, args.presses)
        return
    if args.quick:
        sizes, presses, rate, timeout = args.sizes or [20, 200], 8, 200.0, 40.0
    else:
        sizes, presses, rate, timeout = args.sizes or [100, 1000, 10000], args.presses, 600.0, 240.0
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; sizes {', '.join(f'{n:,}' for n in sizes)} agents; "
        f"{rate:,.0f} checks/s of background load; {presses} presses per size; the first size is the baseline",
        flush=True,
    )
    base_median: float | None = None
    for n in sizes:
        report, populated = measure(n, presses, rate, timeout)
        print(f"{n:>6,} agents: populated in {populated:.1f} s", flush=True)
        if "error" in report:
            print(f"{n:>6,} agents: ERROR {report['error']}", flush=True)
            continue
        times = report["presses"]
        out = report["outcomes"]
        if times:
            med = statistics.median(times) * 1e3
            base_median = base_median or med
            print(
                f"{n:>6,} agents: key-press to screen  median {med:7.1f} ms  p95 {pct(times, 0.95) * 1e3:7.1f} ms  "
                f"p99 {pct(times, 0.99) * 1e3:7.1f} ms  ratio {med / base_median:5.2f}x  target p95 <= 150 ms  "
                f"(moved {out['moved']}, reverted {out['reverted']}, timed out {out['timed_out']})",
                flush=True,
            )
        lags = report["lags"]
        if lags:
            print(
                f"{n:>6,} agents: event-loop lag      median {statistics.median(lags) * 1e3:7.1f} ms  "
                f"p99 {pct(lags, 0.99) * 1e3:7.1f} ms  max {max(lags) * 1e3:7.1f} ms",
                flush=True,
            )
        base = report["baseline_mib"]
        full = max(report["rss_full_mib"], report["rss_end_mib"])
        print(
            f"{n:>6,} agents: console RSS {full:6.1f} MiB  peak {report['peak_mib']:6.1f} MiB  "
            f"baseline {base:5.1f} MiB  ratio {full / base:5.2f}x  target <= 150 MiB  "
            f"(first full table in {report['first_full_s']:.1f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
