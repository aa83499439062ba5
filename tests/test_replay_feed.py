"""`cbreplay --feed`: a recorded transcript played into a live guard, as its agents made the calls."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

from breaker.replaycli import MAX_GAP
from breaker.transcripts import read
from tests.conftest import ROOT, request
from tests.test_replay import write_dsh

SESSIONS = Path(__file__).parent / "fixtures" / "transcripts" / "dsh-zstd" / "sessions"


def feed(socket, speed: str = "0", check: bool = False, path: Path = SESSIONS) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "breaker.replaycli", str(path), "--feed", "--socket", str(socket), "--speed", speed],
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
    agents = {a["agent"]: a for a in request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"]}
    assert len(agents) == 2
    root = next(a for a in agents.values() if a["parent"] is None)
    sub = next(a for a in agents.values() if a["parent"] is not None)
    assert sub["parent"] == root["agent"] and sub["harness"] == "dsh"
    assert (root["calls"], sub["calls"], sub["status"]) == (4, 6, "duplicate")


def played_span(paths: list[Path]) -> float:
    """Seconds from the first call to the last as a feed at speed 1 plays them (long pauses shortened)."""
    times = sorted(call.t for call in read(paths).calls if call.t is not None)
    return sum(min(b - a, MAX_GAP) for a, b in itertools.pairwise(times))


def test_feed_paces_calls_by_their_recorded_times(guard):
    span = played_span([SESSIONS])
    assert span > 1.0  # 1.4 s between its first call and its last
    t0 = time.monotonic()
    feed(guard.socket, "1", check=True)
    assert time.monotonic() - t0 >= span  # paced: the last call waited for its time (a busy machine only adds)


def test_feed_at_speed_0_sends_at_once_however_long_the_recording(guard, tmp_path):
    write_dsh(tmp_path, "patient-agent", [("read", {"path": f"f{i}"}) for i in range(15)], gap_ms=60_000)
    assert played_span([tmp_path]) == 14 * MAX_GAP  # 70 s even with every pause shortened
    result = feed(guard.socket, "0", check=True, path=tmp_path)  # fails at the 60 s timeout if it waited
    assert "fed 15 calls to the guard; 0 denied; 0 not checked" in result.stderr


def test_feed_without_a_guard_says_so_and_fails(tmp_path):
    result = feed(tmp_path / "none.sock")
    assert result.returncode == 1
    assert "14 not checked" in result.stderr and "guard unavailable" in result.stderr


def test_feed_names_each_harness_as_cbhook_does_and_its_subagents_by_their_live_ids(guard, tmp_path):
    claude = Path(__file__).parent / "fixtures" / "transcripts" / "claude"
    (main_file,) = sorted(claude.glob("projects/*/*.jsonl"))
    (sub_file,) = main_file.parent.glob(f"{main_file.stem}/subagents/agent-*.jsonl")
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"agent": "by-hand", "tool": "bash", "args": {}}\n')
    for path in (claude, calls):
        assert feed(guard.socket, path=path).returncode == 0
    agents = {a["agent"]: a for a in request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"]}
    sub_id = f"{main_file.stem}/{sub_file.stem.removeprefix('agent-')}"  # what cbhook sends for this subagent
    assert {a: (v["harness"], v["parent"]) for a, v in agents.items()} == {
        main_file.stem: ("claude-code", None),
        sub_id: ("claude-code", main_file.stem),
        "by-hand": ("cbreplay", None),  # calls JSONL names no harness: the feeding connection's own
    }


def test_feed_reports_each_allowed_calls_recorded_result_so_progress_counts(guard_factory):
    corpus = Path(__file__).parent / "fixtures" / "replay_compare"
    rules = "- id: circuit-breaker\n  config: {repeatLimit: 3, progress: true}\n"  # 3 in a row allowed
    # The same poll ten times; its result changes each time: progress, never a repeat deny.
    progressing = feed(guard_factory(patch_text=rules).socket, path=corpus / "healthy-poll.jsonl")
    assert "fed 10 calls to the guard; 0 denied; 0 not checked" in progressing.stderr, progressing.stderr
    # The same poll whose result never changes: denied from its fourth call.
    constant = feed(guard_factory(patch_text=rules).socket, path=corpus / "loop-poll.jsonl")
    assert "fed 8 calls to the guard; 5 denied; 0 not checked" in constant.stderr, constant.stderr
