"""The incident log: the seed's line shape, first deny per kind per agent, fail-open writes, whole lines."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import stat

import pytest

from breaker import Config, Guard, IncidentLog
from breaker.incidents import incident_line


def test_line_has_the_seeds_exact_shape_and_key_order():
    line = incident_line("cap", "bash", 300, 300, "agent-007", when=1788304207.9)
    assert (
        line
        == b'{"time":"2026-09-01T23:10:07Z","kind":"cap","tool":"bash","count":300,"limit":300,"agent":"agent-007"}\n'
    )


def test_time_is_utc_with_a_z_whatever_the_local_timezone(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    import time

    time.tzset()
    try:
        line = json.loads(incident_line("duplicate", "t", 6, 6, "a", when=0))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert line["time"] == "1970-01-01T00:00:00Z"


def test_first_deny_of_each_kind_per_agent_is_logged_once(tmp_path):
    path = tmp_path / "inc.jsonl"
    g = Guard(Config(duplicate_limit=1, max_calls_per_agent=3))
    log = IncidentLog(path)

    def call(agent, tool, args):
        log.record_verdict(agent, tool, g.check(agent, tool, args), when=0)

    for agent in ("a", "b"):
        for _ in range(5):
            call(agent, "web_search", {"q": "same"})  # duplicate from the 2nd
        call(agent, "read", {"p": 1})
        call(agent, "read", {"p": 2})
        for _ in range(5):
            call(agent, "read", {"p": "n"})  # cap
    g.interrupt("a", "stop")
    for _ in range(3):
        call("a", "bash", {})
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["agent"], r["kind"], r["count"], r["limit"]) for r in records] == [
        ("a", "duplicate", 1, 1),
        ("a", "cap", 3, 3),
        ("b", "duplicate", 1, 1),
        ("b", "cap", 3, 3),
        ("a", "interrupted", 3, 0),
    ]


def test_empty_path_means_off():
    log = IncidentLog("")
    assert not log.enabled
    assert log.record(kind="cap", tool="t", count=1, limit=1, agent="a") is False
    assert log.last_error is None


def test_file_is_created_private_to_its_user(tmp_path):
    path = tmp_path / "inc.jsonl"
    IncidentLog(path).record(kind="cap", tool="t", count=1, limit=1, agent="a")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_bad_path_fails_open_and_says_why_once(tmp_path):
    errors = []
    log = IncidentLog(tmp_path / "no" / "such" / "dir" / "inc.jsonl", on_error=errors.append)
    for _ in range(3):
        assert log.record(kind="cap", tool="t", count=1, limit=1, agent="a") is False
    assert log.failed == 3 and len(errors) == 1
    assert "No such file or directory" in errors[0] and "inc.jsonl" in errors[0]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_fails_open():
    log = IncidentLog("/dev/full")
    assert log.record(kind="cap", tool="t", count=1, limit=1, agent="a") is False
    assert "No space left" in log.last_error


def test_an_on_error_callback_that_raises_is_contained(tmp_path):
    def boom(message):
        raise RuntimeError("callback broke")

    log = IncidentLog(tmp_path, on_error=boom)  # a directory: open fails
    assert log.record(kind="cap", tool="t", count=1, limit=1, agent="a") is False


def test_decisions_are_unaffected_by_a_broken_log(tmp_path):
    g = Guard(Config(duplicate_limit=2))
    log = IncidentLog("/proc/definitely/not/writable")
    verdicts = []
    for _ in range(4):
        v = g.check("a", "t", {})
        log.record_verdict("a", "t", v)
        verdicts.append(v.allowed)
    assert verdicts == [True, True, False, False]


def test_untrusted_strings_are_escaped_json_and_huge_ones_clipped(tmp_path):
    path = tmp_path / "inc.jsonl"
    log = IncidentLog(path)
    log.record(kind="duplicate", tool='we"ird\n{tool}', count=6, limit=6, agent="x" * 100_000)
    (line,) = path.read_text().splitlines()
    record = json.loads(line)
    assert record["tool"] == 'we"ird\n{tool}' and len(record["agent"]) == 4096


def _writer(path: str, worker: int, n: int) -> None:
    log = IncidentLog(path)
    for i in range(n):
        log.record(kind="duplicate", tool="t" * (i % 700), count=i, limit=6, agent=f"w{worker}-{i}")


def test_lines_stay_whole_with_concurrent_writer_processes(tmp_path):
    path = str(tmp_path / "inc.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, 400)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    assert lines[-1] == b""
    records = [json.loads(line) for line in lines[:-1]]
    assert len(records) == 8 * 400
    assert {r["agent"] for r in records} == {f"w{w}-{i}" for w in range(8) for i in range(400)}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["time"]) for r in records)
