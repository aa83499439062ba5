"""Benchmark: an honest agent's checks while the guard is under attack from its own harness plane.

Run:  .venv/bin/python tests/bench/bench_adversarial.py        (--quick: a few seconds, a smoke run)

One real guard (`cbconsole --headless`, with its state file and a patch layer). Two phases, each the same
honest Python agent (`GuardClient`, its default timeout and failure mode) making checks in bursts of seven
identical calls under fresh agent ids, so the guard must answer six allows and a `duplicate` deny:

1. baseline: the honest agent alone;
2. under attack: meanwhile 1,000 more harness connections make checks (one process, a check every
   0.5 s each), two operators `config_set` in a loop (each its own key; every acknowledged write is
   read back), and six senders push 6.6 MiB frames of deeply nested lists, the hardest frames to read
   (each a second or more of parsing).

It prints, for each phase: the honest agent's check round trip (median, p99), how many of its checks
its failure mode answered (the guard not asked in time), wrong decisions (a judged answer that differs
from the rules), the operators' writes and lost writes, the attackers' frames answered; and the
ratio of the attacked p99 to the baseline p99.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from breaker.client import GuardClient  # noqa: E402
from tests.conftest import Conn, request  # noqa: E402


def _raise_fd_limit(want: int = 8192) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def start_guard(tmp: Path) -> tuple[subprocess.Popen, Path, Path]:
    run = tmp / "run"
    run.mkdir(mode=0o700)
    socket_path = run / "guard.sock"
    operator = tmp / "run-operator" / "operator.sock"
    patch = tmp / "layer.yml"
    patch.write_text("- id: circuit-breaker\n  config:\n    maxAgents: 20000\n")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp / "state"), "DSH_HOME": str(tmp / "dsh")}
    env.pop("CBCONSOLE_SOCKET", None)
    env.pop("CBCONSOLE_OPERATOR_SOCKET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "breaker.cli", "--headless", "--socket", str(socket_path), "--patch", str(patch)],
        cwd=ROOT,
        env=env,
        stderr=open(tmp / "guard.log", "wb"),
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if request(socket_path, {"op": "ping", "id": 0}, timeout=1).get("pong"):
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError((tmp / "guard.log").read_text())
        time.sleep(0.05)
    return proc, socket_path, operator


# -- the attackers ------------------------------------------------------------------------------------


def crowd(socket_path: str, connections: int, period: float, stop: multiprocessing.synchronize.Event) -> None:
    """`connections` harness connections, each making a check every `period` seconds (one process)."""
    _raise_fd_limit()

    async def one(n: int) -> None:
        reader, writer = await asyncio.open_unix_connection(socket_path, limit=1 << 20)
        i = 0
        await asyncio.sleep((n % 100) * period / 100)
        while not stop.is_set():
            i += 1
            frame = b'{"op":"check","id":%d,"agent":"crowd-%d","tool":"t","args":{"i":%d}}\n' % (i, n, i % 50)
            writer.write(frame)
            await reader.readline()
            await asyncio.sleep(period)
        writer.close()

    async def main() -> None:
        await asyncio.gather(*(one(n) for n in range(connections)), return_exceptions=True)

    asyncio.run(main())


def hard_frame(size: int) -> bytes:
    """A check whose args are deeply nested lists: every bracket an object to build, the slowest to read."""
    block = b"[" * 250 + b"]" * 250
    args = b"[" + b",".join([block] * (size // (len(block) + 1))) + b"]"
    return b'{"op":"check","id":1,"agent":"attacker","tool":"t","args":' + args + b"}\n"


def sender(socket_path: Path, frame: bytes, stop: threading.Event, answered: list[int]) -> None:
    while not stop.is_set():
        try:
            c = Conn(socket_path, timeout=120)
            while not stop.is_set():
                c.send(frame)
                c.line()
                answered[0] += 1
        except OSError:
            time.sleep(0.1)


def operator(operator_path: Path, key: str, stop: threading.Event, counts: dict[str, int]) -> None:
    c = Conn(operator_path, timeout=120)
    n = 0
    while not stop.is_set():
        n += 1
        text = f"Circuit breaker ({key} {n}): {{tool}} {{count}}/{{limit}}"
        reply = c.ask({"op": "config_set", "id": n, "changes": {key: text}})
        if reply.get("error"):
            counts["errors"] += 1
            continue
        counts["writes"] += 1
        got = c.ask({"op": "config_get", "id": -n})["config"]["values"][key]
        if got != text:
            counts["lost"] += 1


# -- the honest agent ---------------------------------------------------------------------------------


def honest(socket_path: Path, seconds: float, tag: str) -> dict[str, float]:
    client = GuardClient(socket_path, harness="python")
    times: list[float] = []
    fallback = wrong = bursts = judged_bursts = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        bursts += 1
        agent = f"honest-{tag}-{bursts}"
        decisions = []
        for _ in range(7):
            t = time.perf_counter()
            d = client.check(agent, "web_search", {"query": "qwen3.8 release notes"})
            times.append(time.perf_counter() - t)
            decisions.append(d)
            time.sleep(0.005)  # a tool call takes a moment
        fallback += sum(d.fallback for d in decisions)
        if not any(d.fallback for d in decisions):
            judged_bursts += 1
            got = [d.allowed for d in decisions] + [decisions[-1].kind == "duplicate"]
            wrong += got != [True] * 6 + [False, True]
    client.close()
    times.sort()
    return {
        "checks": len(times),
        "median_ms": statistics.median(times) * 1000,
        "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))] * 1000,
        "fallback": fallback,
        "wrong": wrong,
        "bursts": judged_bursts,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small and short")
    opts = parser.parse_args()
    seconds = 3.0 if opts.quick else 30.0
    connections = 50 if opts.quick else 1000
    frame_size = 300_000 if opts.quick else int(6.6 * 2**20)
    _raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="cb-bench-") as tmp:
        proc, socket_path, operator_path = start_guard(Path(tmp))
        try:
            base = honest(socket_path, seconds / 2, "base")
            stop_crowd = multiprocessing.Event()
            crowd_proc = multiprocessing.Process(
                target=crowd, args=(str(socket_path), connections, 0.5, stop_crowd), daemon=True
            )
            crowd_proc.start()
            stop = threading.Event()
            answered = [0]
            counts = {"writes": 0, "lost": 0, "errors": 0}
            frame = hard_frame(frame_size)
            threads = [threading.Thread(target=sender, args=(socket_path, frame, stop, answered)) for _ in range(6)]
            threads += [
                threading.Thread(target=operator, args=(operator_path, key, stop, counts))
                for key in ("denyMessage", "warnMessage")
            ]
            for t in threads:
                t.start()
            time.sleep(2 if not opts.quick else 0.5)  # the crowd connected, the senders' first frames in flight
            attacked = honest(socket_path, seconds, "attacked")
            stop.set()
            stop_crowd.set()
            for t in threads:
                t.join(180)
            crowd_proc.join(30)
            stats = request(operator_path, {"op": "stats", "id": 1}, timeout=30)["stats"]
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"honest agent: bursts of 7 identical checks; frames of {frame_size / 2**20:.1f} MiB from 6 senders")
    for name, r in (("baseline", base), ("under attack", attacked)):
        share = 100 * r["fallback"] / max(1, r["checks"])
        print(
            f"{name:13} checks {r['checks']:6d}  median {r['median_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
            f"failure mode {r['fallback']} ({share:.1f}%)  wrong decisions {r['wrong']} of {r['bursts']} bursts"
        )
    print(f"ratio (p99 under attack / baseline p99): {attacked['p99_ms'] / base['p99_ms']:.2f}x")
    print(
        f"operators: {counts['writes']} config writes acknowledged, {counts['lost']} lost, {counts['errors']} refused; "
        f"attackers' frames answered: {answered[0]}; guard checks in all: {stats['checks']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
