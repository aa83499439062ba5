"""Many real client processes at once: nothing lost, nothing double-counted; bad clients never hurt good ones."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import select
import socket
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
    state = request(g.operator, {"op": "snapshot", "id": 1, "top": 1})["state"]
    calls = {a["agent"]: a["calls"] for a in state["agents"]}
    assert all(calls[f"own-{w}"] == (CALLS - 20) // 2 for w in range(PROCS))
    assert calls["shared"] == PROCS * (CALLS - 20) // 2
    assert calls["hot"] == 6
    assert state["stats"]["checks"] == PROCS * CALLS


# -- a well-behaved client next to bad ones ------------------------------------------------------------
#
# The good client checks between the steps of each abuse, while the bad connections are open with their
# bytes sent: a fixed number of probes, each of which must get the right reply. A guard that a bad client
# blocks never answers the probe (the probe's 10 s socket timeout ends the test); one that a bad client
# confuses answers it wrongly. How fast anything runs is not measured.


class Prober:
    """A well-behaved client; `probe()` sends one check and records any reply that is not the right one."""

    def __init__(self, path: Path) -> None:
        self.conn = Conn(path, timeout=10)
        self.probes = 0
        self.wrong: list[object] = []

    def probe(self) -> None:
        self.probes += 1
        i = self.probes
        reply = self.conn.ask({"op": "check", "id": i, "agent": f"good-{i // 250}", "tool": "read", "args": {"i": i}})
        if reply != {"id": i, "decision": "allow"}:
            self.wrong.append(reply)

    def finish(self, probes: int) -> None:
        assert (self.wrong, self.probes) == ([], probes)
        self.conn.close()


class Abuser:
    """A bad client's connection: bytes sent in steps, then its end closed and whatever comes back drained."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(10)
        self.sock.connect(str(path))
        self.open = True

    def send(self, data: bytes) -> None:
        if not self.open:
            return
        try:
            self.sock.sendall(data)
        except OSError:  # the guard closed us (an oversized frame): that is its answer
            self.open = False

    def finish(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        finally:
            self.sock.close()


def abuse_while_probing(path: Path, prober: Prober, payloads: list[bytes], pieces: int = 2) -> None:
    """Open a connection per payload, send each in `pieces` steps with a probe after every step, then close."""
    abusers = [Abuser(path) for _ in payloads]
    for step in range(pieces):
        for abuser, payload in zip(abusers, payloads, strict=True):
            size = -(-len(payload) // pieces)
            abuser.send(payload[step * size : (step + 1) * size])
        prober.probe()
    for abuser in abusers:
        abuser.finish()
    prober.probe()


def test_random_bytes_from_many_clients_never_disturb_a_good_client(guard):
    prober = Prober(guard.socket)
    rng = random.Random(1)
    for _ in range(20):  # 20 rounds of 5 clients at once
        payloads = []
        for _ in range(5):
            payload = rng.randbytes(rng.choice([1, 10, 100, 5000, 100_000]))
            if rng.random() < 0.5:
                payload = payload.replace(b"\n", b"") + b"\n"
            payloads.append(payload)
        abuse_while_probing(guard.socket, prober, payloads)
    prober.finish(probes=20 * 3)
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]


def test_structured_junk_never_disturbs_a_good_client(guard):
    prober = Prober(guard.socket)
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
    for _ in range(2):
        for frame in junk:  # three clients at once send each
            abuse_while_probing(guard.socket, prober, [frame + b"\n"] * 3)
    prober.finish(probes=2 * len(junk) * 3)
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]


def test_an_oversized_frame_from_another_client_never_disturbs_a_good_client(guard):
    prober = Prober(guard.socket)
    frame = b'{"op":"check","args":"' + b"z" * (9 * 1024 * 1024)
    for _ in range(3):  # probed after every MiB of it, and after the guard has closed the connection
        abuse_while_probing(guard.socket, prober, [frame], pieces=9)
    prober.finish(probes=3 * 10)
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_never_reads_its_replies_is_throttled_not_buffered(guard):
    prober = Prober(guard.socket)
    rss_before = _rss_kib(guard.pid)
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(guard.socket))
    s.setblocking(False)
    frame = orjson.dumps({"op": "check", "id": 1, "agent": "greedy", "tool": "t", "args": {"pad": "p" * 400}}) + b"\n"

    def answered() -> int:  # the greedy client's checks the guard has read and answered
        return request(guard.operator, {"op": "stats", "id": 1})["stats"]["checks"] - prober.probes

    # Send until the guard stops reading us: our socket stays full and its count stops moving. A guard
    # that keeps reading fails at 64 MiB (a throttled client gets a few MiB in) or after two minutes.
    sent = rounds = 0
    deadline = time.monotonic() + 120
    while True:
        assert sent < 64 << 20 and time.monotonic() < deadline, f"the guard kept reading: {sent:,} bytes"
        with contextlib.suppress(BlockingIOError):
            while True:
                sent += s.send(frame * 64)
        prober.probe()  # the good client is served all along
        rounds += 1
        before = answered()
        _, room, _ = select.select([], [s], [], 0.5)
        if not room and answered() == before:
            break
    greedy_sent = sent // len(frame)
    greedy_answered = answered()
    prober.probe()
    prober.finish(probes=rounds + 1)
    grew_mib = (_rss_kib(guard.pid) - rss_before) / 1024
    s.close()
    assert greedy_answered < greedy_sent  # it stopped reading us: our last requests sit unread
    assert grew_mib < 50, f"the server buffered {grew_mib:.0f} MiB for a client that does not read"


def test_a_subscriber_that_never_reads_never_slows_checks(guard):
    slow = socket.socket(socket.AF_UNIX)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(str(guard.socket))
    slow.sendall(b'{"op":"subscribe","id":1}\n')
    prober = Prober(guard.socket)
    c = Conn(guard.socket)
    for i in range(3000):  # many agents: big state frames that the slow subscriber never takes
        c.ask({"op": "check", "id": i, "agent": f"agent-{i}-{'x' * 200}", "tool": "t", "args": {}})
        if i % 100 == 0:
            prober.probe()
    prober.finish(probes=30)
    slow.close()


@pytest.mark.skipif(os.cpu_count() is None, reason="needs cpu count")
def test_many_idle_connections_are_fine(guard):
    conns = [Conn(guard.socket) for _ in range(500)]
    assert all(c.ask({"op": "ping", "id": i})["pong"] for i, c in enumerate(conns[::50]))
    for c in conns:
        c.close()
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]
