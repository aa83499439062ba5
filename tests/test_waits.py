"""The suite's one wait: it returns what the predicate found, waits no longer than needed, and names what it
waited for when it gives up."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tests.waits import eventually, eventually_async


def test_eventually_returns_the_first_truthy_value_once_the_predicate_holds():
    polls = itertools.count(1)
    assert eventually(lambda: (n := next(polls)) >= 3 and f"poll {n}", timeout=5) == "poll 3"


def test_eventually_names_what_it_waited_for_and_the_last_value_on_timeout():
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"waiting for the pigs to fly; last value: \[\]"):
        eventually(list, timeout=0.1, what="the pigs to fly")
    assert time.monotonic() - started < 5


def test_eventually_treats_an_ignored_error_as_not_yet_and_says_so_and_lets_any_other_through():
    polls = itertools.count()

    def flaky() -> str:
        if next(polls) < 2:
            raise ConnectionRefusedError("not up yet")
        return "up"

    assert eventually(flaky, timeout=5, ignoring=(OSError,)) == "up"

    def down() -> bool:
        raise ConnectionRefusedError("down")

    with pytest.raises(AssertionError, match=r"waiting for the server; last error: ConnectionRefusedError\('down'\)"):
        eventually(down, timeout=0.1, what="the server", ignoring=(OSError,))
    with pytest.raises(ZeroDivisionError):
        eventually(lambda: 1 / 0, timeout=5, ignoring=(OSError,))


async def test_eventually_async_yields_to_the_loop_between_polls_and_awaits_a_coroutine_predicate():
    done = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, done.set)
    assert await eventually_async(done.is_set, timeout=5) is True

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert await eventually_async(answer, timeout=5) == 42
    with pytest.raises(AssertionError, match="waiting for a reply; last value: 0"):
        await eventually_async(lambda: 0, timeout=0.1, what="a reply")


def test_eventually_names_an_unnamed_wait_by_the_lambdas_text():
    with pytest.raises(AssertionError, match=r"waiting for lambda: 1 > 2"):
        eventually(lambda: 1 > 2, timeout=0.05)
