"""Benchmark of the protocol's decode on both sides, in process: each against orjson.loads of the same bytes.

Run:  .venv/bin/python tests/bench/bench_protocol.py          (add --quick for a fast smoke run)

- the guard's side: `decode_request` of a typical check frame (what every check pays before the engine), and
  a check answered by `ServerSession` from the frame's bytes to the reply's (an allow, its agent one of 50);
- a client's side: a state frame of 1,000 agents read into its typed rows (what a console reads per tick);
- when msgspec is importable (it is not a dependency): the same check frame decoded by msgspec Structs in a
  union tagged by `op`, for the question of issue 22 (is it faster than the inlined decode?).
Each sample is the mean of a batch of calls; the lines print the median and p99 of the samples.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Union

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from breaker.config import Config
from breaker.engine import Guard
from breaker.protocol import HARNESS, MAX_TEXT, StateFrame, decode_request
from breaker.session import ServerSession

try:  # msgspec Structs in a union tagged by `op`, as issue 22 asks about (msgspec is not a dependency)
    import msgspec
except ImportError:
    msgspec = None
else:
    Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]

    class MsgCheck(msgspec.Struct, tag_field="op", tag="check"):
        agent: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT)]
        tool: Text
        id: Any = None
        args: Any = None
        harness: Union[Text, None] = None  # noqa: UP007
        parent: Union[Text, None] = None  # noqa: UP007
        call_id: Union[Text, int, None] = None  # noqa: UP007
        args_unserializable: bool = False

    class MsgAgentEnd(msgspec.Struct, tag_field="op", tag="agent_end"):
        agent: Text
        id: Any = None

    class MsgPing(msgspec.Struct, tag_field="op", tag="ping"):
        id: Any = None


CHECK = (
    b'{"op":"check","id":17,"agent":"session-1234","tool":"Bash","args":{"command":"ls -la /tmp","timeout":30},'
    b'"harness":"claude-code","call_id":"toolu_01"}'
)
ROW = {
    "agent": "session-1234",
    "harness": "claude-code",
    "parent": None,
    "calls": 120,
    "window_fill": 120,
    "window": 200,
    "cap": 300,
    "worst_count": 4,
    "worst_tool": "bash",
    "worst_preview": 'bash command="make"',
    "duplicate_limit": 6,
    "denies": {"duplicate": 2},
    "status": "ok",
    "last_tool": "bash",
    "last_seen": 1700000000.5,
    "interrupt_reason": None,
    "warns": {},
    "rule": "",
    "override": {},
}


def samples(fn: Callable[[], Any], batch: int, count: int) -> list[float]:
    """`count` samples, each the mean time of `batch` calls, in seconds."""
    for _ in range(batch):
        fn()
    out = []
    for _ in range(count):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        out.append((time.perf_counter() - start) / batch)
    return out


def p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * 0.99))]


def line(name: str, got: list[float], base: list[float], unit: str, scale: float, baseline: str) -> None:
    median, floor = statistics.median(got), statistics.median(base)
    print(
        f"{name}: median {median * scale:8.2f} {unit}  p99 {p99(got) * scale:8.2f} {unit}  "
        f"baseline ({baseline}) median {floor * scale:8.2f} {unit}  ratio {median / floor:5.2f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    quick = ap.parse_args().quick
    batch, count = (50, 20) if quick else (2000, 200)
    print(f"Python {sys.version.split()[0]}, {batch} calls a sample, {count} samples")

    loads = samples(lambda: orjson.loads(CHECK), batch, count)
    line(
        "check frame decoded (decode_request)",
        samples(lambda: decode_request(CHECK), batch, count),
        loads,
        "us",
        1e6,
        "orjson.loads",
    )

    session = ServerSession(Guard(Config()), clock=lambda: 1.0, owner_uid=0)
    channel = session.open(HARNESS, None, None)
    frames = [
        b'{"op":"check","id":%d,"agent":"a%d","tool":"Read","args":{"path":"/x/%d"}}' % (n, n % 50, n)
        for n in range(4096)
    ]
    turn = iter(range(10**9))
    handled = samples(lambda: session._handle(channel, frames[next(turn) % 4096]), batch, count)
    line("check answered in process (ServerSession)", handled, loads, "us", 1e6, "orjson.loads of a check")

    agents = 100 if quick else 1000
    state = orjson.dumps(
        {
            "event": "state",
            "seq": 1,
            "full": True,
            "time": 1.0,
            "agents": [{**ROW, "agent": f"a{n}"} for n in range(agents)],
        }
    )
    rows = samples(lambda: StateFrame.from_json(orjson.loads(state)), 2, count // 2)
    base = samples(lambda: orjson.loads(state), 2, count // 2)
    line(f"state frame of {agents:,} agents read (StateFrame.from_json)", rows, base, "ms", 1e3, "orjson.loads")

    if msgspec is None:
        print("msgspec: not installed (not a dependency); skipped")
        return
    decoder = msgspec.json.Decoder(Union[MsgCheck, MsgAgentEnd, MsgPing])  # noqa: UP007
    ours = samples(lambda: decode_request(CHECK), batch, count)
    theirs = samples(lambda: decoder.decode(CHECK), batch, count)
    line("check frame decoded (msgspec tagged union)", theirs, ours, "us", 1e6, "decode_request")


if __name__ == "__main__":
    main()
