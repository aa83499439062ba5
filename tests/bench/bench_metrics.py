"""Benchmark of what the Prometheus metrics and the OpenTelemetry export cost a check, against the same
guard without them, measured in the same run.

Run:  .venv/bin/python tests/bench/bench_metrics.py          (add --quick for a fast smoke run)

Three real guards (`cbconsole --headless`): metrics off, `--metrics 127.0.0.1:0`, and `--otel` exporting to
an OTLP receiver in this process. One client process sends checks one at a time; the rounds alternate
between the guards so that the machine's load falls on each alike. It prints check p50/p99 with metrics
off, on, and on while scraped every 50 ms (300x a usual 15 s scrape interval), the ratio to off; the
scrape's own time and size and the series a guard serves; denied checks with the export off and on; the
guard's CPU per check; and its RSS with many agents. Target (issue 13): p50 with metrics on within 5% of off.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
from bench_server import fill_agents, pct, rss_mib, wait_for_socket

ROOT = Path(__file__).resolve().parents[2]
SCRAPE_EVERY = 0.05  # seconds: 300x a usual 15 s scrape interval, so that rounds of a second or two see dozens


def start_guard(
    d: str, name: str, *flags: str, env: dict[str, str] | None = None, procs: list[subprocess.Popen]
) -> tuple[subprocess.Popen, str]:
    run = os.path.join(d, name)
    os.mkdir(run, 0o700)
    path = os.path.join(run, "guard.sock")
    environ = {**os.environ, "DSH_HOME": os.path.join(d, f"{name}-dsh"), "XDG_STATE_HOME": os.path.join(d, "state")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "breaker.cli", "--headless", "--socket", path, "--log-level", "warning", *flags],
        cwd=ROOT,
        env={**environ, **(env or {})},
        stdout=subprocess.DEVNULL,
    )
    procs.append(proc)
    wait_for_socket(path)
    return proc, path


def ask(path: str, message: dict) -> dict:
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(orjson.dumps(message) + b"\n")
        return orjson.loads(s.makefile("rb").readline())


def operator(path: str) -> str:
    run = os.path.dirname(path)
    return os.path.join(run + "-operator", "operator.sock")


def metrics_url(path: str) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        url = ask(operator(path), {"op": "stats", "id": 1})["stats"]["metrics"]
        if url:
            return url
        time.sleep(0.05)
    raise RuntimeError("the guard never served its metrics")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Scraper:
    """Scrapes a URL every `interval` seconds on a thread; keeps each scrape's time and size."""

    def __init__(self, url: str, interval: float) -> None:
        self.url, self.interval = url, interval
        self.times: list[float] = []
        self.size = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=5) as reply:
                body = reply.read()
            self.times.append(time.perf_counter() - t0)
            self.size = len(body)
            self._stop.wait(self.interval)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class Receiver:
    """An OTLP/HTTP endpoint that answers 200 to everything (the export's cost is the guard's side)."""

    def __init__(self) -> None:
        self.posts = 0

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.posts += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def line(label: str, lat: list[int], base: list[int] | None = None) -> str:
    out = f"{label:<40} p50 {pct(lat, 0.5):6.1f} us  p99 {pct(lat, 0.99):7.1f} us"
    if base is not None:
        out += f"  | ratio p50 {pct(lat, 0.5) / pct(base, 0.5):4.2f}x  p99 {pct(lat, 0.99) / pct(base, 0.99):4.2f}x"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ns = ap.parse_args()
    calls, rounds = (300, 1) if ns.quick else (1500, 12)
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {rounds} rounds of {calls} checks per guard")
    receiver = Receiver()
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        otel_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BLRP_SCHEDULE_DELAY": "200"}
        procs: list[subprocess.Popen] = []  # each guard stopped on the way out, however the run ends
        try:
            off, off_path = start_guard(d, "off", procs=procs)
            on, on_path = start_guard(d, "on", "--metrics", "127.0.0.1:0", procs=procs)
            _otel, otel_path = start_guard(d, "otel", "--otel", env=otel_env, procs=procs)
            url = metrics_url(on_path)
            lat: dict[str, list[int]] = {"off": [], "on": [], "scraped": []}
            cpu: dict[str, list[float]] = {"off": [], "on": []}
            scrapes: list[float] = []
            size = 0
            paired: dict[str, list[float]] = {"on": [], "scraped": []}  # each round's p50 over the same round's off
            for _ in range(rounds):
                p50: dict[str, float] = {}
                for name, path, proc in (("off", off_path, off), ("on", on_path, on)):
                    before = cpu_seconds(proc.pid)
                    samples = measure(path, calls)
                    cpu[name].append(cpu_seconds(proc.pid) - before)
                    lat[name] += samples
                    p50[name] = pct(samples, 0.5)
                with Scraper(url, SCRAPE_EVERY) as scraper:
                    samples = measure(on_path, calls)
                    lat["scraped"] += samples
                    p50["scraped"] = pct(samples, 0.5)
                scrapes += scraper.times
                size = scraper.size or size
                for name in paired:
                    paired[name].append(p50[name] / p50["off"])
            print(line("check, metrics off:", lat["off"]))
            print(line("check, metrics on:", lat["on"], lat["off"]))
            print(line(f"check, metrics on, scraped every {SCRAPE_EVERY} s:", lat["scraped"], lat["off"]))
            on_ratio, scraped_ratio = statistics.median(paired["on"]), statistics.median(paired["scraped"])
            print(
                f"paired rounds: median of each round's p50 ratio to off: metrics on {on_ratio:.2f}x,"
                f" scraped {scraped_ratio:.2f}x ({rounds} rounds)"
            )
            with urllib.request.urlopen(url, timeout=5) as reply:
                text = reply.read().decode()
            scrape_ms = sorted(t * 1000 for t in scrapes) or [0.0]
            p99 = scrape_ms[int(len(scrape_ms) * 0.99)]
            print(
                f"scrape: median {statistics.median(scrape_ms):.2f} ms  p99 {p99:.2f} ms"
                f"  {size:,} bytes  {series(text)} series ({len(scrapes)} scrapes)"
            )
            print(
                f"guard CPU per check: metrics off {sum(cpu['off']) / len(lat['off']) * 1e6:.1f} us, "
                f"on {sum(cpu['on']) / len(lat['on']) * 1e6:.1f} us"
            )

            # Denied checks: the same call again and again, every one past the sixth denied.
            deny: dict[str, list[int]] = {"off": [], "otel": []}
            deny_paired = []
            for _ in range(rounds):
                round_p50 = {}
                for name, path in (("off", off_path), ("otel", otel_path)):
                    samples = measure(path, calls, same=True)
                    deny[name] += samples
                    round_p50[name] = pct(samples, 0.5)
                deny_paired.append(round_p50["otel"] / round_p50["off"])
            print(line("denied check, export off:", deny["off"]))
            print(line("denied check, export on:", deny["otel"], deny["off"]))
            print(f"paired rounds: denied p50 ratio, export on {statistics.median(deny_paired):.2f}x")
            print(f"OTLP requests received: {receiver.posts}")

            agents, window = (200, 10) if ns.quick else (5000, 20)
            idle = rss_mib(on.pid)
            fill_agents(on_path, agents, window)
            full = rss_mib(on.pid)
            print(
                f"guard RSS: {idle:.1f} MiB before, {full:.1f} MiB with {agents:,} more agents at "
                f"{window}-call windows = {(full - idle) * 1024 / agents:.1f} KiB per agent"
            )
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
            receiver.server.shutdown()


def measure(path: str, calls: int, same: bool = False) -> list[int]:
    """Round trips of `calls` checks from one client process, one at a time. Allowed calls (distinct args,
    a fresh agent every 250 calls so that no cap is reached), or `same`: one call again and again (every
    one past the sixth denied)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue = ctx.Queue()
    p = ctx.Process(target=_client, args=(path, calls, same, q))
    p.start()
    lat = q.get(timeout=120)
    p.join()
    return lat


def _client(path: str, calls: int, same: bool, out: object) -> None:
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    rf = s.makefile("rb")
    pid = os.getpid()

    def frame(i: int) -> bytes:
        agent = f"looper-{pid}" if same else f"agent-{pid}-{i // 250}"
        args = {"q": "same"} if same else {"query": f"gated deltanet repetition {i}", "max_results": 5}
        return orjson.dumps({"op": "check", "id": i, "agent": agent, "tool": "web_search", "args": args}) + b"\n"

    frames = [frame(i) for i in range(calls + 50)]
    for f in frames[:50]:
        s.sendall(f)
        rf.readline()
    lat = []
    for f in frames[50:]:
        t0 = time.perf_counter_ns()
        s.sendall(f)
        rf.readline()
        lat.append(time.perf_counter_ns() - t0)
    out.put(lat)  # type: ignore[attr-defined]
    s.close()


if __name__ == "__main__":
    main()
