"""Many real client processes at once: nothing lost, nothing double-counted; bad clients never hurt good ones."""

from __future__ import annotations

import multiprocessing
import os
import random
import socket
import threading
import time
from pathlib import Path

import orjson
import pytest

from tests.conftest import Conn, request

PROCS = 64
CALLS = 2000


def _worker(path: str, worker: int, out: multiprocessing.Queue) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(path)
    rf = s.makefile("rb")
    decisions = {"own": 0, "shared": 0, "hot_allowed": 0, "hot_denied": 0}
    rid = 0

    def ask(agent: str, args: dict) -> dict:
        nonlocal rid
        rid += 1
        s.sendall(orjson.dumps({"op": "check", "id": rid, "agent": agent, "tool": "read", "args": args}) + b"\n")
        reply = orjson.loads(rf.readline())
        assert reply["id"] == rid, reply
        return reply

    for i in range(CALLS - 20):
        if i % 2:
            decisions["own"] += ask(f"own-{worker}", {"i": i})["decision"] == "allow"
        else:
            decisions["shared"] += ask("shared", {"w": worker, "i": i})["decision"] == "allow"
    for _ in range(20):
        reply = ask("hot", {"path": "/same/file"})
        decisions["hot_allowed" if reply["decision"] == "allow" else "hot_denied"] += 1
    out.put(decisions)
    s.close()


def test_64_client_processes_x_2000_calls_give_exact_counts(guard_factory):
    g = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    maxCallsPerAgent: 0\n    window: 100000\n")
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(g.socket), w, q)) for w in range(PROCS)]
    for p in procs:
        p.start()
    results = [q.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert sum(r["own"] for r in results) == PROCS * (CALLS - 20) // 2  # all distinct: all allowed
    assert sum(r["hot_allowed"] for r in results) == 6  # one key, 1,280 tries from 64 processes: exactly six ran
    assert sum(r["hot_denied"] for r in results) == PROCS * 20 - 6
    state = request(g.socket, {"op": "snapshot", "id": 1, "top": 1})["state"]
    calls = {a["agent"]: a["calls"] for a in state["agents"]}
    assert all(calls[f"own-{w}"] == (CALLS - 20) // 2 for w in range(PROCS))
    assert calls["shared"] == PROCS * (CALLS - 20) // 2
    assert calls["hot"] == 6
    assert state["stats"]["checks"] == PROCS * CALLS


# -- a well-behaved client next to bad ones ------------------------------------------------------------


class Prober(threading.Thread):
    """A well-behaved client that keeps checking and records its worst round trip and any error."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.conn = Conn(path, timeout=10)
        self.stop = threading.Event()
        self.worst = 0.0
        self.errors: list[object] = []
        self.calls = 0

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            t0 = time.monotonic()
            try:
                reply = self.conn.ask(
                    {"op": "check", "id": i, "agent": f"good-{i // 250}", "tool": "read", "args": {"i": i}}
                )
            except Exception as exc:
                self.errors.append(exc)
                return
            self.worst = max(self.worst, time.monotonic() - t0)
            if reply != {"id": i, "decision": "allow"}:
                self.errors.append(reply)
            self.calls += 1
            time.sleep(0.001)

    def finish(self) -> None:
        self.stop.set()
        self.join(15)
        # Generous: this catches a stall (a bad client blocking the loop), not slowness of a busy machine.
        assert self.errors == [] and self.calls > 20 and self.worst < 0.5, (self.errors, self.calls, self.worst)


def abuse(path: Path, payload: bytes) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(str(path))
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
    except OSError:
        pass
    finally:
        s.close()


def test_random_bytes_from_many_clients_never_disturb_a_good_client(guard):
    prober = Prober(guard.socket)
    prober.start()
    rng = random.Random(1)
    deadline = time.monotonic() + 2  # keep it up long enough for the prober to be measured under it
    while time.monotonic() < deadline:
        n = rng.choice([1, 10, 100, 5000, 100_000])
        payload = rng.randbytes(n)
        if rng.random() < 0.5:
            payload = payload.replace(b"\n", b"") + b"\n"
        abuse(guard.socket, payload)
    prober.finish()
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]


def test_structured_junk_never_disturbs_a_good_client(guard):
    prober = Prober(guard.socket)
    prober.start()
    junk = [
        b'{"op":"check"',
        b"[" * 100_000,
        b"{" * 50_000,
        b'{"op":"check","id":1,"agent":"a","tool":"t","args":' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"op":"config_set","id":1,"changes":{"window":"wide"}}',
        b'{"op":"subscribe","id":1,"interval":"fast"}',
        b'{"op":"interrupt","id":1}',
        b"null",
        b"12345",
        b'"\\ud800"',
        b'{"op":"check","id":1,"agent":"a","tool":"t","args":"\\ud800"}',
    ]
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        for frame in junk:
            abuse(guard.socket, frame + b"\n")
    prober.finish()


def test_an_oversized_frame_from_another_client_never_disturbs_a_good_client(guard):
    prober = Prober(guard.socket)
    prober.start()
    for _ in range(3):
        abuse(guard.socket, b'{"op":"check","args":"' + b"z" * (9 * 1024 * 1024))
    prober.finish()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_never_reads_its_replies_is_throttled_not_buffered(guard):
    prober = Prober(guard.socket)
    prober.start()
    rss_before = _rss_kib(guard.pid)
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(guard.socket))
    s.setblocking(False)
    frame = orjson.dumps({"op": "check", "id": 1, "agent": "greedy", "tool": "t", "args": {"pad": "p" * 400}}) + b"\n"
    sent = 0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            sent += s.send(frame * 64)
        except BlockingIOError:
            time.sleep(0.01)  # the server stopped reading us: our socket buffers are full
    prober.finish()
    grew_mib = (_rss_kib(guard.pid) - rss_before) / 1024
    stats = request(guard.socket, {"op": "stats", "id": 1})["stats"]
    s.close()
    answered = stats["checks"] - prober.calls
    assert answered < sent // len(frame)  # the server stopped reading it: its last requests sit unread
    assert grew_mib < 50, f"the server buffered {grew_mib:.0f} MiB for a client that does not read"


def test_a_subscriber_that_never_reads_never_slows_checks(guard):
    slow = socket.socket(socket.AF_UNIX)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(str(guard.socket))
    slow.sendall(b'{"op":"subscribe","id":1}\n')
    prober = Prober(guard.socket)
    prober.start()
    c = Conn(guard.socket)
    for i in range(3000):  # many agents: big state frames that the slow subscriber never takes
        c.ask({"op": "check", "id": i, "agent": f"agent-{i}-{'x' * 200}", "tool": "t", "args": {}})
    prober.finish()
    slow.close()


@pytest.mark.skipif(os.cpu_count() is None, reason="needs cpu count")
def test_many_idle_connections_are_fine(guard):
    conns = [Conn(guard.socket) for _ in range(500)]
    assert all(c.ask({"op": "ping", "id": i})["pong"] for i, c in enumerate(conns[::50]))
    for c in conns:
        c.close()
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]
