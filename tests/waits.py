"""The suite's one way to wait: poll what is observable until it holds, with a deadline, never a fixed sleep.

`eventually` for plain tests and threads, `eventually_async` for asyncio and Textual Pilot tests. Both return
the predicate's first truthy value, and on timeout raise AssertionError naming what was waited for and the last
value seen. The default deadline is generous: a loaded 2-core machine is slow, not wrong. Standard library only:
the framework scenarios import it from their own venvs.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["TIMEOUT", "eventually", "eventually_async"]

T = TypeVar("T")

TIMEOUT = 30.0  # seconds: what a busy machine needs for a guard to start, a file watch to fire, a console to redraw
INTERVAL = 0.02  # seconds between polls: a poll's step, not a wait for anything


def _describe(predicate: Callable[..., object]) -> str:
    """What a predicate waits for, when the caller did not say: a function's name, or a lambda's own text."""
    name = getattr(predicate, "__qualname__", repr(predicate))
    if "<lambda>" not in name:
        return name
    try:
        source = " ".join(inspect.getsource(predicate).split())
    except (OSError, TypeError):
        return name
    return source[source.find("lambda") :][:200]


def _timed_out(what: str, timeout: float, last: object, error: BaseException | None) -> AssertionError:
    seen = f"; last error: {error!r}" if error is not None else f"; last value: {last!r}"
    if len(seen) > 500:
        seen = seen[:500] + "…"
    return AssertionError(f"timed out after {timeout:g} s waiting for {what}{seen}")


def eventually(
    predicate: Callable[[], T],
    *,
    timeout: float = TIMEOUT,
    what: str | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
    interval: float = INTERVAL,
) -> T:
    """Call `predicate` until it returns something truthy, and return that. An exception of a type in
    `ignoring` counts as not yet (e.g. OSError while a server starts); any other propagates at once, so an
    assertion inside the predicate fails the wait straight away. `what` names the wait in the timeout's
    message (by default, the predicate's name or the lambda's text)."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            last, error = predicate(), None
        except ignoring as exc:
            last, error = None, exc
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise _timed_out(what or _describe(predicate), timeout, last, error)
        time.sleep(interval)


async def eventually_async(
    predicate: Callable[[], T | Awaitable[T]],
    *,
    pilot: Any = None,
    timeout: float = TIMEOUT,
    what: str | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
    interval: float = INTERVAL,
) -> T:
    """As `eventually`, yielding to the event loop between polls: with `pilot`, through `pilot.pause` (the app
    handles its pending messages and redraws); else through `asyncio.sleep`. `predicate` may be a coroutine
    function (e.g. a client's request)."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            value = predicate()
            last, error = (await value if inspect.isawaitable(value) else value), None
        except ignoring as exc:
            last, error = None, exc
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise _timed_out(what or _describe(predicate), timeout, last, error)
        if pilot is not None:
            await pilot.pause(interval)
        else:
            await asyncio.sleep(interval)
