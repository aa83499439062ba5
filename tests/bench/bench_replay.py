"""Benchmark of cbreplay: calls replayed per second through the engine, and reading a zstd dsh session.

Run:  .venv/bin/python tests/bench/bench_replay.py          (add --quick for a fast smoke run)

1. Replay: `breaker.replay.replay` over parsed calls (the engine's check plus the table's tallies),
   timed per run and printed per call (median and p99 over the runs) and as calls per second.
   Target (issue 6): >= 200,000 calls/s. Baselines measured in the same run: a bare loop over the
   same parsed calls, and `Guard.check` alone over them (the engine without the tallies).
2. Read: `breaker.transcripts.read` of a 5,000-call dsh session as dsh writes it (concatenated zstd
   frames, header frame first; records of every kind, packed chunk rows), against a baseline of
   just reading the file and decompressing it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_replay import dsh_lines, zstd_frames  # the tests' builder of dsh sessions

from breaker import Config, Guard
from breaker.replay import replay
from breaker.transcripts import Reading, RecordedCall, read

NS = time.perf_counter_ns


def stats(samples: list[float]) -> tuple[float, float]:
    s = sorted(samples)
    return statistics.median(s), s[min(len(s) - 1, int(len(s) * 0.99))]


def mixed_calls(n: int, agents: int, seed: int = 1) -> Reading:
    """A realistic mix: healthy agents (varied reads and searches), a search loop, a description-rewriting loop."""
    rng = random.Random(seed)
    reading = Reading()
    for a in range(agents):
        reading.agent(f"agent-{a:03d}", None, "calls", "bench")
    for i in range(n):
        agent = f"agent-{rng.randrange(agents):03d}"
        r = rng.random()
        if r < 0.4:
            tool, args = "read", {"path": f"/src/mod_{rng.randrange(400)}.py", "offset": 0, "limit": 200}
        elif r < 0.6:
            tool, args = "web_search", {"queries": [f"gated deltanet repetition {rng.randrange(300)}"]}
        elif r < 0.8:
            tool, args = "web_search", {"queries": ["the same query"]}
        else:
            tool, args = "bash", {"command": "echo cbprobe4", "description": f"Run probe step {i}", "timeout": 30}
        reading.add(reading.agents[agent], tool, args, 1_790_000_000.0 + i * 0.5)
    return reading


def bench_replay(n: int, runs: int) -> None:
    reading = mixed_calls(n, agents=50)
    calls: list[RecordedCall] = reading.calls
    config = Config(max_calls_per_agent=0)  # no cap: every agent keeps being judged, the costlier path
    replay(reading, config)  # warm up

    per_call, bare, engine = [], [], []
    for _ in range(runs):
        t0 = NS()
        replay(reading, config)
        per_call.append((NS() - t0) / n / 1000)

        t0 = NS()
        for _agent, _tool, _args, _t in calls:
            pass
        bare.append((NS() - t0) / n / 1000)

        guard = Guard(config)
        check = guard.check
        t0 = NS()
        for agent, tool, args, t in calls:
            check(agent, tool, args, t)
        engine.append((NS() - t0) / n / 1000)

    med, p99 = stats(per_call)
    bmed, _ = stats(bare)
    emed, _ = stats(engine)
    print(
        f"replay, {n:,} calls x {runs} runs   median {med:6.3f} us/call   p99 {p99:6.3f} us/call   "
        f"= {1e6 / med / 1000:,.0f}k calls/s median, {1e6 / p99 / 1000:,.0f}k/s p99 (target >= 200k/s)"
    )
    print(f"  baseline: bare loop over the parsed calls   median {bmed:6.3f} us/call   ratio {med / bmed:6.1f}x")
    print(f"  baseline: Guard.check alone                  median {emed:6.3f} us/call   ratio {med / emed:6.2f}x")


def session_bytes(calls: int, seed: int = 2) -> bytes:
    """A dsh session of `calls` tool calls with per-step reasoning and text records, in ~calls/2 zstd frames."""
    rng = random.Random(seed)
    work = []
    for i in range(calls):
        r = rng.random()
        if r < 0.5:
            work.append(("web_search", {"queries": [f"qwen loop topic {rng.randrange(80)}"]}))
        elif r < 0.8:
            work.append(("read", {"path": f"/work/src/file_{rng.randrange(200)}.py"}))
        else:
            work.append(("bash", {"command": f"grep -rn pattern{i % 40} src", "description": "search the source"}))
    lines = dsh_lines("session-3f1c9a2e-8b4d-4e6f-9a1b-2c3d4e5f6a7b", work)
    out = [lines[0]]
    for line in lines[1:]:
        out.append(line)
        if line.startswith(b'{"type":"step/start"'):
            step = orjson.loads(line)
            t = step["time"]
            words = [f"thinking about step {step['seq']} part {k} " for k in range(30)]
            out.append(
                orjson.dumps(
                    {"type": "reasoning-chunks", "seq0": 0, "time0": t, "data": {"turn": 1, "step": 1, "texts": words}}
                )
            )
            out.append(
                orjson.dumps(
                    {
                        "type": "assistant/message",
                        "seq": 0,
                        "time": t,
                        "data": {"turn": 1, "step": 1, "message": {"role": "assistant", "content": words[:8]}},
                    }
                )
            )
    return zstd_frames(out, frames=max(2, calls // 2))


def bench_read(calls: int, runs: int) -> None:
    data = session_bytes(calls)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "session-3f1c9a2e" / "session.jsonl.zstd"
        path.parent.mkdir()
        path.write_bytes(data)
        plain = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(data)
        reading = read([path])
        assert len(reading.calls) == calls, len(reading.calls)
        got, base = [], []
        for _ in range(runs):
            t0 = NS()
            read([path])
            got.append((NS() - t0) / 1e6)
            t0 = NS()
            zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(path.read_bytes())
            base.append((NS() - t0) / 1e6)
    med, p99 = stats(got)
    bmed, _ = stats(base)
    records = plain.count(b"\n")
    print(
        f"read a {calls:,}-call zstd dsh session ({len(data) / 1024:,.0f} KiB, {records:,} records, "
        f"{max(2, calls // 2):,} frames)"
    )
    print(
        f"  read + parse   median {med:7.2f} ms   p99 {p99:7.2f} ms   "
        f"baseline (read + decompress only) {bmed:6.2f} ms   ratio {med / bmed:5.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    ns = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, orjson {orjson.__version__}, zstandard {zstandard.__version__}")
    if ns.quick:
        bench_replay(1_000, 3)
        bench_read(200, 3)
    else:
        bench_replay(100_000, 30)
        bench_read(5_000, 20)


if __name__ == "__main__":
    main()
