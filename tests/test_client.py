"""The client library (sync and asyncio) against a real guard process."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import orjson
import pytest

from breaker import client as client_module
from breaker.client import AsyncGuardClient, Decision, GuardClient, GuardError
from breaker.protocol import ConfigSet, Pause, Ping, Pong, Reset, StateFrame, Subscribe
from tests.conftest import request
from tests.guardproxy import GuardProxy, is_check
from tests.waits import eventually, eventually_async


def test_sync_client_gets_allow_then_a_duplicate_deny(guard):
    with GuardClient(guard.socket, harness="pytest", timeout=30) as client:
        decisions = [client.check("a", "bash", {"command": "make"}) for _ in range(7)]
    assert decisions[:6] == [Decision(True)] * 6
    deny = decisions[6]
    assert (deny.allowed, deny.kind, deny.count, deny.limit, deny.fallback) == (False, "duplicate", 6, 6, False)
    assert deny.reason


def test_the_handshake_is_sent_with_the_first_request_and_recorded(guard):
    client = GuardClient(guard.socket, harness="my-harness", version="9.9", timeout=30)
    client.check("a", "t", {})
    client.check("a", "t", {"x": 1})
    info = client.server_info
    assert info is not None and (info.server, info.pid, info.plane) == ("cbconsole-guard", guard.pid, "harness")
    stats = request(guard.operator, {"op": "stats", "id": 1})["stats"]
    assert stats["harnesses"] == {"my-harness": 1}
    client.close()


def test_an_unavailable_guard_fails_open_counts_misses_and_logs_once(tmp_path, caplog):
    client = GuardClient(tmp_path / "nobody.sock", timeout=0.2)
    with caplog.at_level(logging.WARNING, logger="cbconsole.client"):
        decisions = [client.check("a", "t", {"i": i}) for i in range(5)]
    assert all(d.allowed and d.fallback for d in decisions)
    assert client.misses == 5
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "guard unavailable" in lines[0] and "fail open" in lines[0]


def test_an_unavailable_guard_with_fail_closed_denies_with_kind_unavailable(tmp_path):
    d = GuardClient(tmp_path / "nobody.sock", fail_closed=True, timeout=30).check("a", "t", {})
    assert (d.allowed, d.kind, d.fallback) == (False, "unavailable", True)


def test_the_client_logs_when_the_guard_is_back(guard, caplog):
    client = GuardClient(guard.socket, timeout=0.3)
    guard.stop()
    with caplog.at_level(logging.WARNING, logger="cbconsole.client"):
        assert client.check("a", "t", {}).fallback
        guard.start()
        assert not client.check("a", "t", {"n": 1}).fallback
    assert any("back at" in r.getMessage() and "1 call(s) were not checked" in r.getMessage() for r in caplog.records)


def test_args_json_cannot_carry_are_allowed_and_counted_by_the_guard(guard):
    client = GuardClient(guard.socket, fail_closed=True, timeout=30)
    decisions = [client.check("a", "write", {"data": b"\x00\x01"}) for _ in range(8)]
    assert all(d.allowed and not d.fallback for d in decisions)  # never duplicates: they match nothing
    state = request(guard.operator, {"op": "snapshot", "id": 1})["state"]
    assert state["agents"][0]["calls"] == 8


def test_a_sync_client_is_safe_to_share_between_threads(guard):
    client = GuardClient(guard.socket, timeout=30)
    results: list[bool] = []

    def worker(n: int) -> None:
        for i in range(200):
            results.append(client.check(f"t{n}", "read", {"i": i}).allowed)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 1600 and all(results)
    assert request(guard.operator, {"op": "stats", "id": 1})["stats"]["checks"] == 1600


def test_sync_client_interrupt_callback_fires_on_poll_and_later_calls_are_denied(guard):
    told: list[tuple[str, str]] = []
    client = GuardClient(guard.socket, on_interrupt=lambda agent, reason: told.append((agent, reason)), timeout=30)
    client.check("worker-1", "web_search", {"q": "x"})
    request(guard.operator, {"op": "interrupt", "id": 1, "agent": "worker-1", "reason": "operator says stop"})
    eventually(lambda: client.poll_events() or told, what="the interrupt read by poll_events")
    assert told == [("worker-1", "operator says stop")]
    d = client.check("worker-1", "read", {"p": 1})
    assert (d.allowed, d.kind) == (False, "interrupted")


def test_sync_client_sees_an_interrupt_pushed_before_its_next_reply(guard):
    told: list[str] = []
    client = GuardClient(guard.socket, on_interrupt=lambda agent, reason: told.append(agent), timeout=30)
    client.check("w", "t", {})
    # The operator's reply comes after the push is queued on the client's connection, which sends it before any
    # later reply: nothing to wait for.
    request(guard.operator, {"op": "interrupt", "id": 1, "agent": "w"})
    assert client.check("w", "t", {"n": 2}).kind == "interrupted"
    assert told == ["w"]


def test_operator_requests_raise_guard_error_with_the_code(guard):
    client = GuardClient(guard.operator, timeout=30)
    with pytest.raises(GuardError) as info:
        client.request(ConfigSet(changes={"window": -1}))
    assert info.value.code == "bad_config"
    assert client.request(Ping()) == Pong()


def test_the_harness_socket_refuses_operator_requests_with_operator_only(guard):
    client = GuardClient(guard.socket, timeout=30)
    for req in (Pause(), ConfigSet(changes={"enabled": False}), Reset(agent="a")):
        with pytest.raises(GuardError) as info:
            client.request(req)
        assert info.value.code == "operator_only"
    assert request(guard.operator, {"op": "stats", "id": 1})["stats"]["paused"] is False


def test_agent_end_through_the_client(guard, tmp_path):
    client = GuardClient(guard.socket, timeout=30)
    for _ in range(6):
        client.check("a", "t", {})
    assert not client.check("a", "t", {}).allowed
    assert client.agent_end("a")
    assert client.check("a", "t", {}).allowed
    assert not GuardClient(tmp_path / "none.sock", timeout=0.1).agent_end("a")


# -- asyncio ------------------------------------------------------------------------------------------


def test_async_client_checks_concurrently_on_one_connection(guard):
    async def main() -> list[Decision]:
        async with AsyncGuardClient(guard.socket, harness="async-test", timeout=30) as client:
            return await asyncio.gather(*(client.check(f"a{i % 4}", "read", {"i": i}) for i in range(400)))

    decisions = asyncio.run(main())
    assert len(decisions) == 400 and all(d.allowed and not d.fallback for d in decisions)
    stats = request(guard.operator, {"op": "stats", "id": 1})["stats"]
    assert stats["checks"] == 400


def test_async_client_gets_the_interrupt_push_without_asking(guard):
    async def main() -> tuple[str, str]:
        got: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()

        async def on_interrupt(agent: str, reason: str) -> None:
            got.set_result((agent, reason))

        async with AsyncGuardClient(guard.socket, on_interrupt=on_interrupt, timeout=30) as client:
            await client.check("async-agent", "t", {})
            await asyncio.to_thread(
                request, guard.operator, {"op": "interrupt", "id": 9, "agent": "async-agent", "reason": "r"}
            )
            return await asyncio.wait_for(got, 5)

    assert asyncio.run(main()) == ("async-agent", "r")


def test_async_client_fails_open_then_reconnects_by_itself(guard):
    async def main() -> None:
        client = AsyncGuardClient(guard.socket, timeout=0.3)
        assert not (await client.check("a", "t", {})).fallback
        guard.kill9()
        d = await client.check("a", "t", {"n": 1})
        assert d.allowed and d.fallback and client.misses == 1
        await asyncio.to_thread(guard.start)

        async def answered() -> bool:
            return not (await client.check("a", "t", {"n": 2})).fallback

        await eventually_async(answered, what="a check answered by the restarted guard")
        await client.close()

    asyncio.run(main())


def test_async_client_fail_closed(tmp_path):
    async def main() -> Decision:
        return await AsyncGuardClient(tmp_path / "none.sock", fail_closed=True, timeout=0.2).check("a", "t", {})

    d = asyncio.run(main())
    assert (d.allowed, d.kind) == (False, "unavailable")


def test_async_client_subscribes_to_state_events(guard):
    async def main() -> StateFrame:
        events: asyncio.Queue = asyncio.Queue()
        async with AsyncGuardClient(guard.operator, role="console", on_event=events.put_nowait, timeout=2) as client:
            await client.request(Subscribe())
            return await asyncio.wait_for(events.get(), 5)

    first = asyncio.run(main())
    assert isinstance(first, StateFrame) and first.full is True and first.config is not None


RECOMMENDED = "- id: circuit-breaker\n  config:\n    preset: recommended\n"


def _allowed_with_results(check, report, results: list[str]) -> list[bool]:
    """Identical calls, each one's result reported without waiting before the next call."""
    out = []
    for n, text in enumerate(results):
        d = check(n)
        out.append(d.allowed)
        if d.allowed:
            report(n, text)
    return out


def test_a_result_sent_without_waiting_is_in_force_for_the_next_check(guard_factory):
    g = guard_factory(patch_text=RECOMMENDED)
    with GuardClient(g.socket, timeout=30) as c:

        def check(n: int, agent: str) -> Decision:
            return c.check(agent, "poll", {"ci": 1}, call_id=f"{agent}-{n}")

        def report(agent: str):
            return lambda n, text: c.result(agent, text, call_id=f"{agent}-{n}", wait=False)

        # a result that changes is progress: the third identical call in a row is allowed only because
        # each result was in force before the next check
        moving = _allowed_with_results(lambda n: check(n, "moving"), report("moving"), ["1", "2", "3"])
        assert moving == [True, True, True]
        # the control: the same result each time is no progress, and the third is denied (repeat)
        stuck = _allowed_with_results(lambda n: check(n, "stuck"), report("stuck"), ["x", "x", "x"])
        assert stuck == [True, True, False]


def test_the_async_client_sends_a_result_without_waiting_in_order_with_its_checks(guard_factory):
    g = guard_factory(patch_text=RECOMMENDED)

    async def main() -> list[bool]:
        async with AsyncGuardClient(g.socket, timeout=30) as c:
            out = []
            for n, text in enumerate(["1", "2", "3"]):
                d = await c.check("a", "poll", {"ci": 1}, call_id=n)
                out.append(d.allowed)
                assert (await c.result("a", text, call_id=n, wait=False)) == (False, "")
            return out

    assert asyncio.run(main()) == [True, True, True]


def test_a_result_sent_without_waiting_still_reaches_the_guard_when_the_client_closes_first(guard_factory):
    g = guard_factory(patch_text=RECOMMENDED)
    for n, text in enumerate(["1", "2", "3"]):  # each call on a client of its own, closed right after its result
        with GuardClient(g.socket, timeout=30) as c:
            assert c.check("closing", "poll", {"ci": 1}, call_id=n).allowed, n  # progress: each result got there
            c.result("closing", text, call_id=n, wait=False)

    async def main() -> list[bool]:
        out = []
        for n, text in enumerate(["1", "2", "3"]):
            async with AsyncGuardClient(g.socket, timeout=30) as c:
                out.append((await c.check("closing-async", "poll", {"ci": 1}, call_id=n)).allowed)
                await c.result("closing-async", text, call_id=n, wait=False)
        return out

    assert asyncio.run(main()) == [True, True, True]


# -- every call judged: big numbers, error replies, slow answers, a restarted guard (issue 20) ----------

BIG = 10**310 + 1  # 311 digits: orjson reads it as a float beyond a double's range
HUGE = 10**4999 + 7  # 5,000 digits: past what str() writes and int() reads by default (4,300)
CAPPED = "- id: circuit-breaker\n  config:\n    maxCallsPerAgent: 3\n"


@pytest.fixture
def proxy(guard, tmp_path) -> Iterator[GuardProxy]:
    p = GuardProxy(guard.socket, tmp_path / "proxy" / "guard.sock")
    yield p
    p.close()


def snapshot_agents(guard) -> dict[str, dict]:
    return {a["agent"]: a for a in request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"]}


def checks_sync(path, agent: str, args_list: list) -> list[Decision]:
    with GuardClient(path, timeout=30) as client:
        return [client.check(agent, "compute", args) for args in args_list]


def checks_async(path, agent: str, args_list: list) -> list[Decision]:
    async def main() -> list[Decision]:
        async with AsyncGuardClient(path, timeout=30) as client:
            return [await client.check(agent, "compute", args) for args in args_list]

    return asyncio.run(main())


CHECKS = {"sync": checks_sync, "async": checks_async}


def test_integers_of_any_size_are_written_exactly():
    for n in (2**64 - 1, 2**64, 2**64 + 1, -(2**63) - 1, BIG, -BIG, HUGE, 3**20000):
        line = client_module._line({"n": n, "in": [n, {"deep": n}]})
        digits = line.decode().split(",")[0][len('{"n":') :]
        if abs(n) < 10**4000:
            assert digits == str(n), n
        assert line == b'{"n":%s,"in":[%s,{"deep":%s}]}\n' % ((digits.encode(),) * 3)
    assert client_module._line({"n": HUGE}) == b'{"n":1' + b"0" * 4998 + b"7}\n"
    assert client_module._line({"n": -HUGE}) == b'{"n":-1' + b"0" * 4998 + b"7}\n"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("n", [BIG, HUGE], ids=["311-digits", "5000-digits"])
def test_a_call_with_a_big_integer_in_its_args_is_counted_and_the_cap_applies(guard_factory, mode, n):
    g = guard_factory(patch_text=CAPPED)
    decisions = CHECKS[mode](g.socket, "big", [{"n": n, "i": i} for i in range(4)])
    assert [(d.allowed, d.kind, d.fallback) for d in decisions] == [(True, None, False)] * 3 + [(False, "cap", False)]
    assert snapshot_agents(g)["big"]["calls"] == 3


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("n", [BIG, HUGE], ids=["311-digits", "5000-digits"])
def test_the_seventh_identical_call_with_a_big_integer_is_denied_as_a_duplicate(guard, mode, n):
    decisions = CHECKS[mode](guard.socket, "big", [{"n": n}] * 7)
    assert [d.allowed for d in decisions] == [True] * 6 + [False]
    assert decisions[6].kind == "duplicate"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("a", "b"), [(2**64 + 1, 2**64 + 2), (BIG, BIG + 1), (HUGE, HUGE + 1)], ids=["2**64", "311-digits", "5000-digits"]
)
def test_args_differing_only_in_a_big_integer_are_not_duplicates(guard, mode, a, b):
    decisions = CHECKS[mode](guard.socket, "exact", [{"n": a}] * 6 + [{"n": b}, {"n": a}])
    assert [d.allowed for d in decisions] == [True] * 7 + [False]  # b is new; a's 7th is a duplicate
    assert decisions[7].kind == "duplicate" and not any(d.fallback for d in decisions)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_check_the_guard_answers_with_an_error_is_asked_again_as_unjudgeable_and_counted(guard, proxy, mode):
    proxy.answer_next({"error": {"code": "bad_json", "message": "not valid JSON: injected"}})
    decisions = CHECKS[mode](proxy.path, "retried", [{"q": "x"}, {"q": "y"}])
    assert [(d.allowed, d.fallback) for d in decisions] == [(True, False)] * 2
    assert snapshot_agents(guard)["retried"]["calls"] == 2
    checks = [f for f in proxy.frames if is_check(f)]
    first = orjson.loads(checks[0])
    assert len(checks) == 2 and first.get("args") is None and first["args_unserializable"] is True


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_to_the_unjudgeable_ask_too_leaves_the_call_to_the_failure_mode(guard, proxy, mode):
    error = {"error": {"code": "bad_request", "message": "check: 'agent' is longer than 4,096 characters"}}
    proxy.answer_next(error)
    proxy.answer_next(error)
    (d,) = CHECKS[mode](proxy.path, "a", [{"q": "x"}])
    assert (d.allowed, d.fallback) == (True, True)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_after_one_answer_came_too_late_the_next_check_is_judged_by_the_guard(guard, proxy, mode):
    proxy.hold_next_reply()

    # The held check gives up after 0.3 s; the two after it may take as long as a loaded machine needs (10 s):
    # what is asserted is that they are judged, not how fast.
    def run_sync() -> list[Decision]:
        with GuardClient(proxy.path, timeout=0.3) as client:
            first = client.check("slow", "t", {"i": 0})
            client.timeout = 10
            return [first] + [client.check("slow", "t", {"i": i}) for i in (1, 2)]

    async def run_async() -> list[Decision]:
        async with AsyncGuardClient(proxy.path, timeout=0.3) as client:
            first = await client.check("slow", "t", {"i": 0})
            client.timeout = 10
            return [first] + [await client.check("slow", "t", {"i": i}) for i in (1, 2)]

    decisions = run_sync() if mode == "sync" else asyncio.run(run_async())
    assert [d.fallback for d in decisions] == [True, False, False]  # one late answer, then judged at once
    assert snapshot_agents(guard)["slow"]["calls"] == 3  # the late one was counted by the guard too


def test_after_a_guard_restart_the_first_sync_check_is_judged_by_the_new_guard(guard):
    with GuardClient(guard.socket, timeout=5) as client:
        assert not client.check("r", "t", {"n": 1}).fallback
        guard.kill9()
        guard.start()
        d = client.check("r", "t", {"n": 2})
    assert (d.allowed, d.fallback) == (True, False) and client.misses == 0


def test_after_a_guard_restart_the_first_async_check_is_judged_by_the_new_guard(guard):
    async def main() -> tuple[Decision, int]:
        async with AsyncGuardClient(guard.socket, timeout=5) as client:
            assert not (await client.check("r", "t", {"n": 1})).fallback
            guard.kill9()  # while the loop runs nothing: the client has not seen its connection die
            guard.start()
            return await client.check("r", "t", {"n": 2}), client.misses

    d, misses = asyncio.run(main())
    assert (d.allowed, d.fallback, misses) == (True, False, 0)


def posted_then_checked(proxy: GuardProxy, mode: str, death: str) -> Decision:
    """A check, its result posted (wait=False), the connection killed the way `death` says, the next check."""
    kill = proxy.drop_all if death == "dead-before-the-write" else proxy.swallow_next

    async def run_async() -> Decision:
        async with AsyncGuardClient(proxy.path, timeout=5) as client:
            await client.check("p", "t", {}, call_id="c1")
            await client.result("p", "out", call_id="c1", wait=False)
            kill()
            return await client.check("p", "t", {"n": 2})

    if mode == "async":
        return asyncio.run(run_async())
    with GuardClient(proxy.path, timeout=5) as client:
        client.check("p", "t", {}, call_id="c1")
        client.result("p", "out", call_id="c1", wait=False)
        kill()
        return client.check("p", "t", {"n": 2})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_result_posted_before_the_connection_died_reaches_the_guard_once_with_the_next_check(guard, proxy, mode):
    d = posted_then_checked(proxy, mode, "dead-before-the-write")  # as a guard restarting would leave it
    assert not d.fallback
    assert proxy.sent(b'"op":"result"') == 1 and proxy.sent(b'"n":2') == 1  # nothing had left: all of it again


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_connection_closed_unanswered_after_the_write_gets_the_check_again_but_never_the_result(guard, proxy, mode):
    d = posted_then_checked(proxy, mode, "closed-unanswered")  # the guard read the result and the check
    assert not d.fallback
    assert proxy.sent(b'"op":"result"') == 1  # it may have counted: never sent twice
    assert proxy.sent(b'"n":2') == 2  # the check, sent again on a new connection


def test_a_result_waited_for_is_never_sent_twice_when_its_connection_closes_unanswered(guard, proxy):
    with GuardClient(proxy.path, timeout=5) as client:
        client.check("p", "t", {}, call_id="c1")
        proxy.swallow_next(b'"op":"result"')  # the guard reads it; no reply comes back
        assert client.result("p", "out", call_id="c1") == (False, "")  # not known to be reported
        assert not client.check("p", "t", {"n": 2}).fallback  # and the client goes on, on a new connection
    assert proxy.sent(b'"op":"result"') == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_agent_id_json_cannot_carry_goes_escaped_and_its_calls_are_judged_by_their_args(guard, mode):
    decisions = CHECKS[mode](guard.socket, "agent-\ud800", [{"q": "same"}] * 7)
    assert [(d.allowed, d.fallback) for d in decisions] == [(True, False)] * 6 + [(False, False)]
    assert decisions[6].kind == "duplicate"
    assert "agent-\\ud800" in snapshot_agents(guard)  # the id as cbhook sends it: escaped, the same each time


def test_an_operator_client_waits_longer_than_a_tool_call_unless_told_otherwise(tmp_path) -> None:
    # No agent waits on an operator's request, and a loaded machine may take more than a tool call's 0.5 s.
    harness = tmp_path / "run" / "guard.sock"
    operator = client_module.operator_client(operator_socket=tmp_path / "op.sock")
    assert operator.timeout == client_module.OPERATOR_TIMEOUT > client_module.DEFAULT_TIMEOUT
    assert operator.path == tmp_path / "op.sock"
    assert client_module.operator_client(harness, timeout=0.25).timeout == 0.25
