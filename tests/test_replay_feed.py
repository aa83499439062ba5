"""`cbreplay --feed`: a recorded transcript played into a live guard, as its agents made the calls."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, request

SESSIONS = Path(__file__).parent / "fixtures" / "transcripts" / "dsh-zstd" / "sessions"


def feed(socket, speed: str = "0", check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "breaker.replay", str(SESSIONS), "--feed", "--socket", str(socket), "--speed", speed],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=check,
    )


def test_feed_sends_each_agents_calls_to_the_guard_with_its_parent(guard):
    result = feed(guard.socket)
    assert result.returncode == 0, result.stderr
    assert "fed 14 calls to the guard; 4 denied; 0 not checked" in result.stderr
    agents = {a["agent"]: a for a in request(guard.socket, {"op": "snapshot", "id": 1})["state"]["agents"]}
    assert len(agents) == 2
    root = next(a for a in agents.values() if a["parent"] is None)
    sub = next(a for a in agents.values() if a["parent"] is not None)
    assert sub["parent"] == root["agent"] and sub["harness"] == "dsh"
    assert (root["calls"], sub["calls"], sub["status"]) == (4, 6, "duplicate")


def test_feed_paces_calls_by_their_recorded_times(guard):
    t0 = time.monotonic()
    feed(guard.socket, "1", check=True)
    slow = time.monotonic() - t0
    t0 = time.monotonic()
    feed(guard.socket, "0", check=True)
    fast = time.monotonic() - t0
    assert slow > fast + 1.0  # the recording spans 1.6 s; at speed 0 it is sent at once


def test_feed_without_a_guard_says_so_and_fails(tmp_path):
    result = feed(tmp_path / "none.sock")
    assert result.returncode == 1
    assert "14 not checked" in result.stderr and "unreachable" in result.stderr
