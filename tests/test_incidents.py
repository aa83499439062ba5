"""The incident log: the seed's line shape, first deny per kind per agent, fail-open writes, whole lines;
the queued writer the guard uses: in order, bounded, never blocking the caller, drained on close."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import stat
import threading
import time

import pytest

from breaker import Config, Guard, IncidentLog
from breaker.incidents import QueuedIncidentLog, incident_line
from tests.conftest import request
from tests.waits import eventually


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


def test_a_guard_whose_incident_log_cannot_be_written_still_decides_and_says_why(guard_factory, tmp_path):
    # The log is the guard's to write (the engine never touches it): a path that is a directory
    # fails every write, and the server must neither change a decision nor stop serving.
    g = guard_factory(patch_text=f"- id: circuit-breaker\n  config:\n    incidentLog: {tmp_path}\n")
    decisions = []
    for i in range(8):
        reply = request(g.socket, {"op": "check", "id": i, "agent": "a", "tool": "t", "args": {}})
        decisions.append(reply["decision"])
    assert decisions == ["allow"] * 6 + ["deny"] * 2
    eventually(
        lambda: "Is a directory" in (request(g.operator, {"op": "stats", "id": 1})["stats"]["incident_log_error"] or "")
    )
    assert request(g.socket, {"op": "ping", "id": 9})["pong"]


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


# -- QueuedIncidentLog: the writer thread the guard uses ----------------------------------------------


def record(log: QueuedIncidentLog | IncidentLog, n: int) -> bool:
    return log.record(kind="duplicate", tool="t", count=n, limit=6, agent=f"a{n}", when=0)


def written(path) -> list[int]:
    return [json.loads(line)["count"] for line in path.read_text().splitlines()]


def slowed(log: QueuedIncidentLog, gate: threading.Event | None = None, delay: float = 0.0) -> list[int]:
    """Make the writer thread wait on `gate` (or sleep `delay`) before each line; returns the counts it took."""
    write, taken = log.log.record, []

    def slow(**fields):
        taken.append(fields["count"])
        if gate is not None:
            gate.wait(10)
        time.sleep(delay)
        return write(**fields)

    log.log.record = slow  # type: ignore[method-assign]
    return taken


def test_queued_lines_arrive_in_order_and_close_writes_what_is_still_queued(tmp_path):
    path = tmp_path / "inc.jsonl"
    log = QueuedIncidentLog(path)
    slowed(log, delay=0.002)  # the thread stays behind the caller: most lines are still queued at close()
    assert all(record(log, n) for n in range(200))
    log.close(timeout=10)
    assert written(path) == list(range(200)) and log.dropped == 0


def test_a_full_queue_drops_lines_counts_them_and_says_so_once(tmp_path):
    path, errors, gate = tmp_path / "inc.jsonl", [], threading.Event()
    log = QueuedIncidentLog(path, on_error=errors.append, size=3)
    taken = slowed(log, gate)
    assert record(log, 0)
    eventually(lambda: taken == [0])  # the thread holds line 0: the queue is empty again
    assert [record(log, n) for n in range(1, 7)] == [True, True, True, False, False, False]
    assert log.dropped == 3 and len(errors) == 1 and "not keeping up (3 lines waiting)" in errors[0]
    gate.set()
    log.close(timeout=10)
    assert written(path) == [0, 1, 2, 3]


def test_a_fifo_with_no_reader_fails_each_line_at_once_and_never_blocks(tmp_path):
    fifo = tmp_path / "inc.fifo"
    os.mkfifo(fifo)
    errors: list[str] = []
    log = QueuedIncidentLog(fifo, on_error=errors.append)
    start = time.monotonic()
    assert all(record(log, n) for n in range(50))  # queued: the caller never waits for the file
    log.close(timeout=5)
    assert not log.worker.alive, "the writer is stuck opening the FIFO (O_NONBLOCK lost?)"
    assert time.monotonic() - start < 5
    assert log.log.failed == 50 and log.dropped == 0
    assert len(errors) == 1 and "No such device or address" in errors[0] and str(fifo) in errors[0]


def test_a_line_goes_to_the_path_in_force_when_it_was_recorded_and_empty_turns_the_log_off(tmp_path):
    first, second, gate = tmp_path / "one.jsonl", tmp_path / "two.jsonl", threading.Event()
    log = QueuedIncidentLog(first)
    taken = slowed(log, gate)
    record(log, 0)
    eventually(lambda: taken == [0])  # the thread is busy: what follows waits in the queue
    record(log, 1)
    log.path = str(second)  # a config reload
    record(log, 2)
    log.path = ""
    assert record(log, 3) is False
    gate.set()
    log.close(timeout=10)
    assert (written(first), written(second)) == ([0, 1], [2])
