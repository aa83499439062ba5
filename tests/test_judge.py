"""Expensive frames never stall the guard: large frames are read by the judge process, in cost order,
each within a time limit; the loop's turns are bounded in bytes; and a large frame is judged exactly as
the loop would judge it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import orjson

from breaker import Config
from breaker.engine import Guard
from breaker.jobs import JudgeJob
from breaker.judge import JUDGE_FROM, Judge, JudgeAnswer, judge_frame
from breaker.session import ServerSession
from tests.conftest import Conn, request
from tests.waits import eventually, eventually_async

UID = 1000


class Clock:
    now = 1_000.0

    def __call__(self) -> float:
        return self.now


def make(config: Config | None = None, judge: bool = True) -> ServerSession:
    session = ServerSession(Guard(config), clock=Clock(), owner_uid=UID, pid=42)
    session.judge_from = JUDGE_FROM if judge else None
    return session


def run_judge_jobs(session: ServerSession) -> None:
    """The transport's part, without the process: each JudgeJob is read by `judge_frame` itself."""
    while session.jobs:
        job = session.jobs.popleft()
        if isinstance(job, JudgeJob):
            answer = judge_frame(job.frame, frozenset(job.ignore))
            if session.judged(job.channel, job.slot, len(job.frame), answer):
                session.turn(job.channel)


def replies(session: ServerSession, ch) -> list[dict]:
    return [orjson.loads(line) for line in ch.take_output().splitlines()]


def check(rid, agent="a", tool="write", args=None, **extra) -> bytes:
    frame = {"op": "check", "id": rid, "agent": agent, "tool": tool, "args": args, **extra}
    return json.dumps(frame, separators=(",", ":")).encode() + b"\n"  # integers of any size, as a harness sends them


def deep(levels: int = 250, copies: int = 100) -> list:
    item: list = []
    for _ in range(levels):
        item = [item]
    return [item] * copies


CASES = [
    {"content": "x" * 40_000, "path": "/a"},
    {"content": "x" * 40_000, "path": "/a", "description": "rewritten each time"},  # ignoreArgs
    {"content": "y" * 40_000, "path": "/a"},
    {"rows": [{"k": i, "v": [i, str(i)]} for i in range(3000)]},
    {"n": int("1" * 311), "pad": "z" * 20_000},
    deep(300, 80),  # past orjson's depth: the slow canonical path
]


def test_a_large_frame_is_judged_exactly_as_the_loop_would_judge_it():
    """Same replies, same counts, same top keys, with and without the judge, over every kind of args."""
    frames = [check(i, args=CASES[i % len(CASES)]) for i in range(40)]
    frames += [check(100 + i, args={"small": i % 3}) for i in range(10)]
    assert all(len(f) >= JUDGE_FROM for f in frames[:40])
    outputs = []
    for judge in (True, False):
        session = make(Config(duplicate_limit=3), judge=judge)
        ch = session.open("harness", UID, 7)
        for data in frames:
            session.receive(ch, data)
            run_judge_jobs(session)
        outputs.append((replies(session, ch), session.guard.agent_view("a"), session.guard.top_keys(5)))
        assert not session.jobs and session.judging == 0
    assert outputs[0] == outputs[1]
    kinds = [r.get("kind") for r in outputs[0][0]]
    assert "duplicate" in kinds and kinds.count(None) >= 6


def test_a_connections_requests_keep_their_order_around_a_judged_frame():
    session = make()
    ch = session.open("harness", UID, 7)
    session.receive(ch, check(1, args={"content": "x" * JUDGE_FROM}) + check(2, args={}) + b'{"op":"ping","id":3}\n')
    assert ch.take_output() == b""  # the large frame waits for the judge, and the two behind it too
    assert len(session.jobs) == 1
    run_judge_jobs(session)
    assert [r["id"] for r in replies(session, ch)] == [1, 2, 3]


def test_a_large_frame_of_any_op_goes_to_the_judge_and_is_answered_as_usual():
    session = make()
    ch = session.open("harness", UID, 7)
    pad = "p" * JUDGE_FROM
    session.receive(ch, orjson.dumps({"op": "ping", "id": 1, "pad": pad}) + b"\n")
    session.receive(ch, orjson.dumps({"op": "pause", "id": 2, "pad": pad}) + b"\n")
    session.receive(ch, orjson.dumps({"op": "check", "id": 3, "agent": "a", "pad": pad}) + b"\n")
    session.receive(ch, b"[" * 20_000 + b"\n")
    run_judge_jobs(session)
    got = replies(session, ch)
    assert got[0] == {"id": 1, "pong": True}
    assert got[1]["error"]["code"] == "operator_only"  # the plane is checked after the judge too
    assert got[2]["error"]["code"] == "bad_request" and "tool" in got[2]["error"]["message"]
    assert got[3]["error"]["code"] == "bad_json"
    assert not session.guard.paused


def test_a_turn_ends_after_its_bytes_not_only_after_its_frames():
    """Sixty-four 60 KiB frames in one turn held every other connection up for all of them."""
    session = make(judge=False)
    ch = session.open("harness", UID, 7)
    frame = check(1, args={"content": "x" * 15_000})
    session.receive(ch, frame * 20)
    first_turn = len(ch.take_output().splitlines())
    assert 1 <= first_turn <= 5
    while session.turn(ch):
        pass
    assert first_turn + len(ch.take_output().splitlines()) == 20


def test_large_frames_past_the_pool_close_their_connection_as_busy():
    session = ServerSession(Guard(), clock=Clock(), owner_uid=UID, pool=3 * JUDGE_FROM)
    session.judge_from = JUDGE_FROM
    channels = [session.open("harness", UID, n) for n in range(5)]
    for ch in channels:
        session.receive(ch, check(1, args={"content": "x" * JUDGE_FROM}))
    assert len(session.jobs) == 2  # the third would take the judge's bytes past the pool
    assert all(ch.closing for ch in channels[2:])
    assert replies(session, channels[2])[0]["error"]["code"] == "busy"
    run_judge_jobs(session)
    assert session.judging == 0 and [replies(session, ch)[0]["decision"] for ch in channels[:2]] == ["allow"] * 2


# -- the judge process --------------------------------------------------------------------------------


async def test_the_judge_answers_the_cheapest_frame_first_and_one_too_slow_as_unjudgeable():
    judge = Judge(limit=30)
    try:
        first = await judge.ask(check(1, args={"content": "x" * JUDGE_FROM}), ())
        assert first.reply is None and first.keyed and first.key is not None
        assert judge.pid is not None
        os.kill(judge.pid, signal.SIGSTOP)  # busy: everything asked now waits
        done: list[int] = []

        async def ask(rid: int, args) -> JudgeAnswer:
            answer = await judge.ask(check(rid, args=args), ())
            done.append(rid)
            return answer

        held = asyncio.ensure_future(ask(1, {"content": "held"}))
        await asyncio.sleep(0)
        costly = asyncio.ensure_future(ask(2, deep(250, 40)))
        cheap = asyncio.ensure_future(ask(3, {"content": "x" * 100}))
        await asyncio.sleep(0)
        os.kill(judge.pid, signal.SIGCONT)
        await asyncio.gather(held, costly, cheap)
        assert done == [1, 3, 2]
    finally:
        await judge.close()


async def test_a_frame_the_judge_cannot_read_in_time_is_unjudgeable_with_its_id_and_the_judge_restarts():
    judge = Judge(limit=0.2)
    try:
        await judge.ask(check(0, args={}), ())
        assert judge.pid is not None
        stopped = judge.pid
        os.kill(stopped, signal.SIGSTOP)  # a frame that never finishes
        answer = await judge.ask(check(41, args={"content": "x"}), ())
        assert answer.reply is not None
        reply = orjson.loads(answer.reply)
        assert reply["id"] == 41 and reply["error"]["code"] == "unjudgeable"
        assert "args_unserializable" in reply["error"]["message"] and judge.killed == 1
        judge.limit = 30  # the new judge's frame: judged however loaded the machine is (not a timing assertion)
        again = await judge.ask(check(42, args={"content": "y"}), ())
        assert again.keyed and judge.pid != stopped
    finally:
        await judge.close()


# -- a real guard -------------------------------------------------------------------------------------


def judge_pid(guard_pid: int) -> int | None:
    children = Path(f"/proc/{guard_pid}/task/{guard_pid}/children").read_text().split()
    for pid in children:
        if b"breaker.judge" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return int(pid)
    return None


def test_a_stalled_judge_holds_up_only_the_large_frames_connection(guard):
    big = Conn(guard.socket, timeout=60)
    assert (
        big.ask({"op": "check", "id": 1, "agent": "w", "tool": "write", "args": {"c": "x" * JUDGE_FROM}})["decision"]
        == "allow"
    )
    pid = eventually(lambda: judge_pid(guard.pid), what="the judge process")
    os.kill(pid, signal.SIGSTOP)
    try:
        big.send({"op": "check", "id": 2, "agent": "w", "tool": "write", "args": {"c": "y" * JUDGE_FROM}})
        big.send({"op": "ping", "id": 3})
        others = Conn(guard.socket)
        for i in range(20):  # every other connection is served while the judge is stopped
            assert (
                others.ask({"op": "check", "id": i, "agent": f"o{i % 3}", "tool": "t", "args": {"i": i}})["decision"]
                == "allow"
            )
        assert request(guard.operator, {"op": "ping", "id": 1})["pong"]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert [big.line()["id"], big.line()["id"]] == [2, 3]  # then the large frame's connection, in order


def test_a_judge_killed_between_frames_is_started_again_and_the_next_frame_judged(guard):
    c = Conn(guard.socket, timeout=60)
    payload = {"c": "x" * JUDGE_FROM}
    assert c.ask({"op": "check", "id": 1, "agent": "w", "tool": "write", "args": payload})["decision"] == "allow"
    pid = eventually(lambda: judge_pid(guard.pid), what="the judge process")
    os.kill(pid, signal.SIGKILL)
    for i in range(2, 8):  # a new judge: the same call is judged, and the duplicate rule applies
        reply = c.ask({"op": "check", "id": i, "agent": "w", "tool": "write", "args": payload})
    assert (reply["kind"], reply["count"]) == ("duplicate", 6)
    assert eventually(lambda: judge_pid(guard.pid)) != pid


# A judge process that is ready, then ends on the first frame it is given.
DYING_JUDGE = ("sh", "-c", "printf +; head -c 1 >/dev/null")


async def test_a_frame_that_ends_its_judge_is_tried_once_more_and_only_then_unjudgeable():
    judge = Judge(limit=60, command=DYING_JUDGE)
    try:
        answer = await judge.ask(check(41, args={"content": "x"}), ())
        assert answer.reply is not None and judge.killed == 1
        reply = orjson.loads(answer.reply)
        assert reply["id"] == 41 and reply["error"]["code"] == "unjudgeable"
        assert "args_unserializable" in reply["error"]["message"]
    finally:
        await judge.close()


async def test_a_frame_whose_judge_ended_once_is_judged_by_the_next():
    judge = Judge(limit=60)
    try:
        await judge.ask(check(0, args={}), ())
        first = judge.pid
        assert first is not None
        os.kill(first, signal.SIGSTOP)
        pending = asyncio.ensure_future(judge.ask(check(41, args={"content": "x"}), ()))
        await eventually_async(lambda: judge.busy, what="the frame in the judge's hands")
        os.kill(first, signal.SIGKILL)
        answer = await pending
        assert answer.reply is None and answer.keyed and judge.killed == 0 and judge.pid != first
    finally:
        await judge.close()
