"""Replay's clock (issue 23): a trace without times is judged as the live guard judges the same calls. A check after
a separate `sleep 30` call comes 30 s after it live, which makes it a poll; replay puts it there too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from breaker import Config
from breaker.normalise import slept
from breaker.replay import replay
from breaker.transcripts import read

REC = Config.with_preset("recommended")
CHECK = {"command": "gh run view 4242 --json status,conclusion"}
SLEEP = {"command": "sleep 30"}


def trace(path: Path, calls: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in calls))
    return path


def verdicts(path: Path, config: Config) -> str:
    """'.' allowed, 'w' warned, else the deny's kind's first letter in capitals, one per call."""
    done = replay(read([str(path)]), config, verdicts=True)
    assert done.verdicts is not None
    return "".join(("w" if v.warned else ".") if v.allowed else (v.kind or "?")[0].upper() for v in done.verdicts)


def ci_wait(rounds: int, times: list[float] | None = None) -> list[dict[str, Any]]:
    """An agent waiting on CI: the check, then `sleep 30` as a call of its own, again and again; the status stays."""
    calls: list[dict[str, Any]] = []
    for _ in range(rounds):
        calls.append({"agent": "w", "tool": "bash", "args": CHECK, "result": "in_progress"})
        calls.append({"agent": "w", "tool": "bash", "args": SLEEP, "result": ""})
    if times is not None:
        calls = [{**c, "t": t} for c, t in zip(calls, times, strict=True)]
    return calls


def as_live(rounds: int) -> list[float]:
    """The times a live guard sees: each check 2 s after it starts the sleep's call, which ends 30 s later."""
    times, t = [], 1000.0
    for _ in range(rounds):
        times += [t, t + 2.0]
        t += 2.0 + 30.0 + 1.0
    return times


def test_without_times_a_check_after_a_separate_sleep_call_is_a_poll_as_it_is_live(tmp_path: Path):
    untimed = trace(tmp_path / "untimed.jsonl", ci_wait(12))
    timed = trace(tmp_path / "timed.jsonl", ci_wait(12, as_live(12)))
    live = verdicts(timed, REC)
    assert live == "." * 24  # twelve polls with the same answer: under pollLimit (30), no warning
    assert verdicts(untimed, REC) == live  # was ..........w.D.D.D.D.D.D. (the checks counted as duplicates)


def test_without_times_polls_after_separate_sleeps_still_stop_at_poll_limit(tmp_path: Path):
    config = REC.updated({"pollLimit": 4})
    untimed = trace(tmp_path / "untimed.jsonl", ci_wait(4))
    timed = trace(tmp_path / "timed.jsonl", ci_wait(4, as_live(4)))
    # the first check and sleep are no repeats; polls 1-4 (the 4th warned); the 5th and 6th denied
    assert verdicts(untimed, config) == verdicts(timed, config) == ".....wRR"


def test_the_seed_preset_replays_the_same_with_or_without_the_clock(tmp_path: Path):
    untimed = trace(tmp_path / "untimed.jsonl", ci_wait(8))
    timed = trace(tmp_path / "timed.jsonl", ci_wait(8, as_live(8)))
    assert verdicts(untimed, Config()) == verdicts(timed, Config()) == "." * 12 + "D" * 4


def test_a_sleep_the_guard_denied_never_ran_so_the_next_check_comes_at_once(tmp_path: Path):
    # the agent's shell may run once (a per-tool cap): its later `sleep 30` calls are denied and sleep no time
    config = REC.updated({"tools": {"bash": {"maxCalls": 1}}})
    calls = [
        {"agent": "w", "tool": "BashOutput", "args": {"bash_id": "b1"}},
        {"agent": "w", "tool": "bash", "args": SLEEP},
    ]
    untimed = trace(tmp_path / "untimed.jsonl", calls * 4)
    # live: the first sleep runs (30 s); each later one is denied at once and the check follows 2 s later
    times = [0.0, 2.0, 33.0, 35.0, 37.0, 39.0, 41.0, 43.0]
    timed = trace(tmp_path / "timed.jsonl", [{**c, "t": t} for c, t in zip(calls * 4, times, strict=True)])
    live = verdicts(timed, config)
    assert live == "...C" + "wCRC"  # the check after the sleep that ran is a poll; after a denied one, a repeat
    assert verdicts(untimed, config) == live


def test_a_trace_with_times_keeps_them(tmp_path: Path):
    # each call 5 s after the one before: the recorded times say the sleeps were cut short, so no check is a poll
    times = [1000.0 + 5.0 * i for i in range(16)]
    assert "D" in verdicts(trace(tmp_path / "timed.jsonl", ci_wait(8, times)), REC)
    assert verdicts(trace(tmp_path / "untimed.jsonl", ci_wait(8)), REC) == "." * 16


@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        ({"command": "sleep 30"}, 30.0),
        ({"command": "sleep 30 && gh run view 1"}, 30.0),
        ({"command": "sleep 1m; sleep 5"}, 65.0),
        ({"command": ["bash", "-lc", "sleep 45"]}, 45.0),
        ({"code": "import time; time.sleep(20)"}, 20.0),
        ({"command": "Start-Sleep -Seconds 10"}, 10.0),
        ({"command": "timeout /t 15"}, 15.0),
        ({"command": "timeout 600 npm test"}, 0.0),  # GNU timeout: a limit on the command, not a sleep
        ({"command": "kubectl wait --for=condition=ready pod/api-0"}, 0.0),  # how long, the text does not say
        ({"description": "sleep 30 then check", "command": "gh run view 1"}, 0.0),  # only the command runs
        ({"path": "src/sleep 30"}, 0.0),
        (None, 0.0),
    ],
)
def test_the_seconds_a_call_sleeps_are_read_from_its_command(args, seconds):
    assert slept(args) == seconds
