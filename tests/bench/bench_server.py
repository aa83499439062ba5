"""Benchmark of the guard server's check round trip, against a raw Unix-socket echo measured in the same run.

Run:  .venv/bin/python tests/bench/bench_server.py          (add --quick for a fast smoke run)

For 1, 8 and 32 concurrent client processes, each sending checks one at a time (send a frame,
wait for the reply), it prints p50 and p99 of the round trip and the throughput, first for an echo
server (asyncio, same event loop, no work: the transport's floor), then for a real guard
(`cbconsole --headless`). Then the guard's RSS with 1,000 agents at full 200-call windows.
Targets (issue 3): single client p50 <= 80 us, p99 <= 500 us; >= 15,000 checks/s with 32 clients;
RSS <= 100 MiB with 1,000 agents at full windows.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]

ECHO_SERVER = textwrap.dedent("""
    import asyncio, os, sys
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    class Echo(asyncio.Protocol):
        def connection_made(self, t): self.t = t
        def data_received(self, d): self.t.write(d)
    async def main(path):
        server = await asyncio.get_running_loop().create_unix_server(Echo, path)
        print("ready", flush=True)
        await asyncio.Event().wait()
    asyncio.run(main(sys.argv[1]))
""")


def wait_for_socket(path: str, timeout: float = 60.0) -> None:  # a deadline: a loaded machine starts slowly
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"no server on {path}")


def client(path: str, worker: int, calls: int, distinct: bool, out: multiprocessing.Queue) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(path)
    rf = s.makefile("rb")
    lat = []
    agent = f"agent-{worker}"
    frames = [
        orjson.dumps(
            {
                "op": "check",
                "id": i,
                "agent": agent,
                "tool": "web_search",
                "args": {"query": f"gated deltanet repetition {i if distinct else 0}", "max_results": 5, "lang": "en"},
            }
        )
        + b"\n"
        for i in range(calls)
    ]
    for frame in frames[:50]:  # warm up
        s.sendall(frame)
        rf.readline()
    t_start = time.perf_counter()
    for frame in frames:
        t0 = time.perf_counter_ns()
        s.sendall(frame)
        rf.readline()
        lat.append(time.perf_counter_ns() - t0)
    out.put((lat, t_start, time.perf_counter()))
    s.close()


def run_clients(path: str, n: int, calls: int) -> tuple[list[int], float]:
    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue = ctx.Queue()
    procs = [ctx.Process(target=client, args=(path, w, calls, True, q)) for w in range(n)]
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    lat = [x for r in results for x in r[0]]
    start = min(r[1] for r in results)
    end = max(r[2] for r in results)
    return lat, len(lat) / (end - start)


def pct(samples: list[int], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * q))] / 1000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fill_agents(path: str, agents: int, window: int) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    rf = s.makefile("rb")
    pad = "x" * 200
    batch = []
    for i in range(window):
        for a in range(agents):
            batch.append(
                orjson.dumps(
                    {
                        "op": "check",
                        "id": i,
                        "agent": f"agent-{a:04d}",
                        "tool": "read",
                        "args": {"path": f"/f/{i}", "pad": pad},
                    }
                )
                + b"\n"
            )
            if len(batch) == 200:
                s.sendall(b"".join(batch))
                for _ in batch:
                    rf.readline()
                batch = []
    s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ns = ap.parse_args()
    calls = 300 if ns.quick else 4000
    counts = [1, 8] if ns.quick else [1, 8, 32]
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    print(f"Python {sys.version.split()[0]}, event loop {loop}, {os.cpu_count()} CPUs, {calls} calls per client")
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        echo_path = os.path.join(d, "echo.sock")
        os.mkdir(os.path.join(d, "run"), 0o700)
        guard_path = os.path.join(d, "run", "guard.sock")  # the operator's socket goes beside run/, inside d
        echo = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, echo_path], stdout=subprocess.DEVNULL)
        env = {**os.environ, "DSH_HOME": os.path.join(d, "dsh"), "XDG_STATE_HOME": os.path.join(d, "state")}
        guard = subprocess.Popen(
            [sys.executable, "-m", "breaker.cli", "--headless", "--socket", guard_path, "--log-level", "warning"],
            cwd=ROOT,
            env=env,
        )
        try:
            wait_for_socket(echo_path)
            wait_for_socket(guard_path)
            for n in counts:
                base, base_tput = run_clients(echo_path, n, calls)
                lat, tput = run_clients(guard_path, n, calls)
                print(
                    f"{n:>2} client(s): echo p50 {pct(base, 0.5):6.1f} us p99 {pct(base, 0.99):7.1f} us "
                    f"{base_tput:8,.0f}/s | "
                    f"guard check p50 {pct(lat, 0.5):6.1f} us p99 {pct(lat, 0.99):7.1f} us {tput:8,.0f} checks/s | "
                    f"ratio p50 {pct(lat, 0.5) / pct(base, 0.5):4.2f}x"
                )
            agents, window = (100, 20) if ns.quick else (1000, 200)
            before = rss_mib(guard.pid)
            fill_agents(guard_path, agents, window)
            print(
                f"guard RSS: {before:.1f} MiB idle, {rss_mib(guard.pid):.1f} MiB with {agents:,} agents "
                f"at full {window}-call windows"
            )
        finally:
            for p in (echo, guard):
                p.send_signal(signal.SIGTERM)
                p.wait(10)


if __name__ == "__main__":
    main()
