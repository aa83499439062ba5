"""Faults: a guard killed or frozen under load, restarts, socket permissions, other users, a second server."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import pytest

from breaker.client import GuardClient
from tests.conftest import Conn, request
from tests.waits import eventually

TIMEOUT = 0.5


class Load(threading.Thread):
    """A harness thread checking in a loop with the real client; records every call's outcome and time."""

    def __init__(self, path, name: str) -> None:
        super().__init__(daemon=True)
        self.client = GuardClient(path, timeout=TIMEOUT, harness="load")
        self.name_ = name
        self.stop = threading.Event()
        self.records: list[tuple[float, float, bool, bool]] = []  # (start, duration, allowed, fallback)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            t0 = time.monotonic()
            d = self.client.check(f"{self.name_}-{i // 200}", "read", {"i": i})
            self.records.append((t0, time.monotonic() - t0, d.allowed, d.fallback))
            time.sleep(0.002)  # paces the load (some 6 × 400 calls/s): not a wait for anything

    def finish(self) -> None:
        self.stop.set()
        self.join(10)
        assert not self.is_alive(), "a client hung"
        self.client.close()


def test_kill_9_under_load_clients_fail_open_while_it_is_down_then_reconnect_by_themselves(guard):
    loads = [Load(guard.socket, f"h{i}") for i in range(6)]
    for load in loads:
        load.start()
    eventually(lambda: all(len(ld.records) > 20 for ld in loads))
    killed_at = time.monotonic()
    guard.kill9()
    assert guard.socket.exists()  # a stale socket file is left behind, as after any crash

    def fallbacks_since_the_kill(load: Load) -> int:
        return sum(1 for r in list(load.records) if r[0] > killed_at and r[3])

    # Down, and staying down until every client has had several answers: none of them waits for it.
    eventually(lambda: all(fallbacks_since_the_kill(ld) >= 5 for ld in loads), timeout=60)
    guard.start()  # the new server cleans up the stale socket and takes the path
    restarted_at = time.monotonic()
    eventually(lambda: all(any(r[0] > restarted_at and not r[3] for r in ld.records) for ld in loads), timeout=60)
    for load in loads:
        load.finish()
    records = [r for ld in loads for r in ld.records]
    outage = [r for r in records if killed_at < r[0] < restarted_at]
    assert outage and all(r[2] for r in outage)  # fail open: every call allowed, by the guard or as a fallback
    assert sum(r[3] for r in outage) >= 5 * len(loads)
    assert all(ld.client.misses > 0 for ld in loads)


def test_a_frozen_guard_makes_clients_fail_open_at_the_timeout_and_recover_when_it_thaws(guard):
    client = GuardClient(guard.socket, timeout=TIMEOUT)
    assert not client.check("before", "t", {}).fallback
    answers: list = []
    os.kill(guard.pid, signal.SIGSTOP)
    try:
        # Both answers come while the guard is still frozen: the client gave up at its timeout, not when
        # the guard came back. (The join's deadline only ends a client that would wait for ever.)
        asking = threading.Thread(
            target=lambda: answers.extend(
                [client.check("sent-then-timed-out", "t", {}), client.check("asked-right-after", "t", {})]
            ),
            daemon=True,
        )
        asking.start()
        asking.join(60)
        assert not asking.is_alive(), "the client waited on a frozen guard past its timeout"
    finally:
        os.kill(guard.pid, signal.SIGCONT)
    assert [(d.allowed, d.fallback) for d in answers] == [(True, True), (True, True)]
    eventually(lambda: not client.check("after", "t", {}).fallback)

    def agents() -> set[str]:
        return {a["agent"] for a in request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"]}

    eventually(lambda: "sent-then-timed-out" in agents())  # the guard read the call it was frozen on,
    eventually(lambda: "asked-right-after" in agents())  # and the next: a timeout never stops a call from asking


def test_fail_closed_client_denies_explicitly_when_the_guard_is_gone(guard):
    client = GuardClient(guard.socket, timeout=TIMEOUT, fail_closed=True)
    assert client.check("a", "t", {}).allowed
    guard.stop()
    d = client.check("a", "t", {})
    assert (d.allowed, d.kind, d.fallback) == (False, "unavailable", True)
    assert "unavailable" in d.reason


def test_socket_is_0600_in_a_0700_directory(guard):
    assert stat.S_IMODE(os.stat(guard.socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(guard.socket.parent).st_mode) == 0o700
    assert stat.S_ISSOCK(os.stat(guard.socket).st_mode)


def test_default_socket_directory_is_created_private(tmp_path):
    runtime = tmp_path / "xdg"
    runtime.mkdir()
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "DSH_HOME": str(tmp_path / "dsh")}
    env.pop("CBCONSOLE_SOCKET", None)
    proc = subprocess.Popen([sys.executable, "-m", "breaker.cli", "--headless"], env=env, stderr=subprocess.PIPE)
    try:
        sock = runtime / "cbconsole" / "guard.sock"
        eventually(lambda: sock.exists())
        assert stat.S_IMODE(os.stat(sock.parent).st_mode) == 0o700
        assert request(sock, {"op": "ping", "id": 1})["pong"]
    finally:
        proc.terminate()
        proc.wait(10)
    assert not sock.exists()  # a clean stop removes it


def test_socket_path_from_the_environment(tmp_path):
    run = tmp_path / "r"
    run.mkdir(mode=0o700)
    env = {**os.environ, "CBCONSOLE_SOCKET": str(run / "env.sock"), "DSH_HOME": str(tmp_path / "dsh")}
    proc = subprocess.Popen([sys.executable, "-m", "breaker.cli", "--headless"], env=env, stderr=subprocess.DEVNULL)
    try:
        eventually(lambda: (run / "env.sock").exists())
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_second_server_on_the_same_path_refuses_and_says_who_holds_it(guard, guard_factory):
    second = guard_factory(start=False)
    second.socket = guard.socket
    second.start(wait=False)
    assert second.proc.wait(15) == 1
    log = second.log.read_text()
    assert "another guard is already serving" in log and f"pid {guard.pid}" in log
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]  # the first one is untouched


def test_a_live_foreign_listener_on_the_path_is_never_replaced(guard_factory, tmp_path):
    g = guard_factory(start=False)
    foreign = socket.socket(socket.AF_UNIX)
    foreign.bind(str(g.socket))
    foreign.listen(1)
    try:
        g.start(wait=False)
        assert g.proc.wait(15) == 1
        assert "held by a live process" in g.log.read_text()
    finally:
        foreign.close()


def test_a_stale_socket_file_is_cleaned_up(guard_factory):
    g = guard_factory(start=False)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(g.socket))
    dead.close()  # a socket file with nobody listening, as a crash leaves it
    g.start()
    assert request(g.socket, {"op": "ping", "id": 1})["pong"]


def test_a_regular_file_at_the_socket_path_is_not_deleted(guard_factory):
    g = guard_factory(start=False)
    g.socket.write_text("precious")
    g.start(wait=False)
    assert g.proc.wait(15) == 1
    assert g.socket.read_text() == "precious"
    assert "is not a socket" in g.log.read_text()


def test_a_socket_directory_open_to_others_is_refused(guard_factory):
    g = guard_factory(start=False)
    os.chmod(g.socket.parent, 0o755)
    g.start(wait=False)
    assert g.proc.wait(15) == 1
    assert "open to other users" in g.log.read_text()


def test_a_socket_path_too_long_for_unix_sockets_is_a_clear_error(guard_factory, tmp_path):
    g = guard_factory(start=False)
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True, mode=0o700)
    g.socket = deep / "guard.sock"
    g.start(wait=False)
    assert g.proc.wait(15) == 1
    assert "over the 107-byte limit" in g.log.read_text()


def _connect_as(uid: int, path: str) -> subprocess.CompletedProcess:
    code = f"""
import os, socket, sys
os.setgid({uid}); os.setuid({uid})
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({path!r})
except PermissionError:
    print("permission-denied"); sys.exit(0)
s.sendall(b'{{"op":"ping","id":1}}\\n')
s.settimeout(5)
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk: break
    data += chunk
print(data.decode())
"""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root (CI runs as root)")


@needs_root
def test_another_user_cannot_reach_the_socket(guard):
    result = _connect_as(65534, str(guard.socket))
    assert result.stdout.strip() == "permission-denied", result


@needs_root
def test_another_users_connection_is_refused_by_peer_credentials_even_if_the_socket_is_opened_up(guard_factory):
    guard = guard_factory(start=False)
    run = tempfile.mkdtemp(prefix="cb-peercred-")  # under /tmp: pytest's own tmp tree is closed to others
    guard.socket = Path(run) / "guard.sock"
    guard.start()
    os.chmod(run, 0o755)  # a misconfiguration (or a bug) that lets others reach it
    os.chmod(guard.socket, 0o666)
    result = _connect_as(65534, str(guard.socket))
    assert result.stdout.strip(), result
    reply = orjson.loads(result.stdout.strip().splitlines()[0])
    assert reply["error"]["code"] == "forbidden"
    assert "socket from uid 65534" in guard.log.read_text()
    assert Conn(guard.socket).ask({"op": "ping", "id": 2})["pong"]  # its own user is still served
    guard.stop()
    shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(guard.operator.parent, ignore_errors=True)


def test_sigterm_stops_cleanly_and_removes_the_socket(guard):
    assert guard.stop() == 0
    assert not guard.socket.exists()
