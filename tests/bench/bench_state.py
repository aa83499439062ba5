"""Benchmark: what keeping state across restarts costs a check, and a check's p99 with a console at 10,000 agents.

Run:  .venv/bin/python tests/bench/bench_state.py          (add --quick for a fast smoke run)

1. Persistence. Two real guards (`cbconsole --headless`), one with `--state none`, one keeping its
   state file; one client process sends checks one at a time (100 agents, repeated keys, so windows
   fill and loops trip) to each in alternating rounds. Printed: p50 and p99 of each, and the p50
   ratio (target: within 10% of without, i.e. ratio <= 1.10).
2. Scale. One guard with 10,000 agents, each with repeated keys in its window (the default
   `maxAgents`). Then checks at a steady rate from one client, first with no subscriber, then with a
   console-like subscriber reading every state frame. Printed: p50/p99 of each and the p99 ratio
   (target: check p99 <= 2 ms with the subscriber).
3. Size. A guard keeping its state file, fed 1,000 then 10,000 agents with full windows (200 calls each,
   the defaults), two ways: every call different (no previews), and every call made twice (100 repeated
   keys per agent, each with a full preview: the fullest record the defaults allow). Printed: the file's
   size after a clean stop, and what its last records weigh (the size right after a compaction), per
   agent and in all: what the state file's limit (breaker.store.MAX_STATE_BYTES) is measured against.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def pct(samples: list[int], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * q))] / 1000


def start_guard(d: Path, name: str, *args: str) -> tuple[subprocess.Popen, Path, Path]:
    run = d / name
    run.mkdir(mode=0o700)
    sock = run / "guard.sock"
    operator = d / f"{name}-operator" / "operator.sock"
    env = {**os.environ, "DSH_HOME": str(d / "dsh"), "XDG_STATE_HOME": str(d / f"{name}-state")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "breaker.cli", "--headless", "--socket", str(sock), "--log-level", "warning", *args],
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(operator))
                break
        except OSError:
            time.sleep(0.05)
    else:
        raise RuntimeError(f"guard {name} did not start")
    return proc, sock, operator


class Line:
    """One connection, a request at a time."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.file = self.sock.makefile("rb")

    def ask(self, frame: bytes) -> None:
        self.sock.sendall(frame)
        self.file.readline()

    def pipeline(self, frames: list[bytes]) -> None:
        for i in range(0, len(frames), 500):
            chunk = frames[i : i + 500]
            self.sock.sendall(b"".join(chunk))
            for _ in chunk:
                self.file.readline()


def check(i: int, agent: str, args: dict) -> bytes:
    return orjson.dumps({"op": "check", "id": i, "agent": agent, "tool": "web_search", "args": args}) + b"\n"


def persistence(rounds: int, per_round: int) -> None:
    rng = random.Random(3)
    frames = [check(i, f"agent-{rng.randrange(100)}", {"query": f"q{rng.randrange(30)}"}) for i in range(per_round)]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        off, off_sock, _ = start_guard(d, "off", "--state", "none")
        on, on_sock, _ = start_guard(d, "on")
        lat: dict[str, list[int]] = {"off": [], "on": []}
        try:
            lines = {"off": Line(off_sock), "on": Line(on_sock)}
            for line in lines.values():
                line.pipeline(frames[:200])  # warm up
            for r in range(rounds):
                for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    line, out = lines[name], lat[name]
                    for frame in frames:
                        t0 = time.perf_counter_ns()
                        line.ask(frame)
                        out.append(time.perf_counter_ns() - t0)
            size = sum(f.stat().st_size for f in (d / "on-state").rglob("*.cbstate"))
        finally:
            for proc in (off, on):
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
    off50, off99, on50, on99 = pct(lat["off"], 0.5), pct(lat["off"], 0.99), pct(lat["on"], 0.5), pct(lat["on"], 0.99)
    print(
        f"persistence: {rounds} alternating rounds of {per_round:,} checks each (100 agents); state file {size:,} bytes"
    )
    print(f"  check, no state file:    p50 {off50:7.1f} us  p99 {off99:8.1f} us")
    print(f"  check, state kept:       p50 {on50:7.1f} us  p99 {on99:8.1f} us")
    print(f"  ratio p50 {on50 / off50:5.2f}x  p99 {on99 / off99:5.2f}x   target p50 ratio <= 1.10")


def drain(path: str, seconds: float, out: multiprocessing.Queue) -> None:
    """A console-like subscriber in a process of its own: reads and decodes every state frame."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(b'{"op":"subscribe","id":1}\n')
    s.settimeout(0.2)
    frames, buf = 0, b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            chunk = s.recv(1 << 20)
        except TimeoutError:
            continue
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            orjson.loads(line)
            frames += 1
    s.close()
    out.put(frames)


def scale(agents: int, seconds: float, rate: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        proc, sock, operator = start_guard(d, "big", "--state", "none")
        try:
            feed = Line(sock)
            frames = [check(i, f"agent-{i % agents}", {"query": f"q{(i // agents) % 4}"}) for i in range(agents * 8)]
            feed.pipeline(frames)  # each agent: 4 keys, each twice: repeated keys everywhere
            rng = random.Random(5)

            def measure() -> list[int]:
                out = []
                period = 1 / rate
                start = time.perf_counter()
                n = 0
                while time.perf_counter() - start < seconds:
                    due = start + n * period
                    now = time.perf_counter()
                    if due > now:
                        time.sleep(due - now)
                    a = rng.randrange(agents)
                    frame = check(n, f"agent-{a}", {"query": f"q{rng.randrange(6)}"})
                    t0 = time.perf_counter_ns()
                    feed.ask(frame)
                    out.append(time.perf_counter_ns() - t0)
                    n += 1
                return out

            alone = measure()
            ctx = multiprocessing.get_context("fork")
            frames_out: multiprocessing.Queue = ctx.Queue()
            reader = ctx.Process(target=drain, args=(str(operator), seconds + 2.0, frames_out))
            reader.start()
            time.sleep(1.0)  # the first, full picture (10,000 rows, in parts)
            watched = measure()
            frames = frames_out.get(timeout=60)
            reader.join(10)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    a50, a99, w50, w99 = pct(alone, 0.5), pct(alone, 0.99), pct(watched, 0.5), pct(watched, 0.99)
    print(f"scale: {agents:,} agents with repeated keys; {rate:,} checks/s for {seconds:.0f} s per phase")
    print(f"  check, no subscriber:    p50 {a50:7.1f} us  p99 {a99:8.1f} us  ({len(alone):,} checks)")
    print(
        f"  check, console attached: p50 {w50:7.1f} us  p99 {w99:8.1f} us  ({len(watched):,} checks, {frames} frames)"
    )
    print(f"  ratio p99 {w99 / a99:5.2f}x   target p99 <= 2000 us with the console attached")


def size(agents: int, repeated: bool) -> None:
    from breaker.store import _last_spans

    window = 200
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        path = d / "size.cbstate"
        proc, sock, _ = start_guard(d, "size", "--state", str(path))
        try:
            feed = Line(sock)
            pad = "x" * 90  # each preview at its full 100 characters
            for start in range(0, agents, 100):
                frames = []
                for a in range(start, min(agents, start + 100)):
                    for n in range(window):
                        key = n // 2 if repeated else n
                        frames.append(check(n, f"agent-{a:05d}", {"query": f"{key} {pad}"}))
                feed.pipeline(frames)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        data = path.read_bytes()
        weight = sum(end - at for at, end in _last_spans(data))
    how = "every call twice (100 previews)" if repeated else "every call different"
    print(
        f"  {agents:6,} agents, {how:32}: file {len(data) / 2**20:7.1f} MiB; last records {weight / 2**20:7.1f} MiB "
        f"({weight / agents:7,.0f} bytes per agent)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scale-only", action="store_true", help="only the second part")
    ap.add_argument("--size-only", action="store_true", help="only the third part")
    args = ap.parse_args()
    quick = args.quick
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    if not args.scale_only and not args.size_only:
        persistence(rounds=2 if quick else 6, per_round=1_000 if quick else 5_000)
    if not args.size_only:
        scale(agents=1_000 if quick else 10_000, seconds=1.0 if quick else 8.0, rate=1_000 if quick else 2_000)
    if not args.scale_only:
        print("size: the state file with full windows (window 200)")
        for agents in (100,) if quick else (1_000, 10_000):
            for repeated in (False, True):
                size(agents, repeated)


if __name__ == "__main__":
    main()
