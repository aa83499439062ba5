"""A thread that works through what the event loop queues for it: the incident log, the OTel export, the state file."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["QueueWorker"]

log = logging.getLogger("cbconsole.guard")

T = TypeVar("T")


class _Mark:
    """A place in the queue: `event` is set once everything queued before it is worked (None: stop there)."""

    __slots__ = ("event",)

    def __init__(self, event: threading.Event | None) -> None:
        self.event = event


_STOP = _Mark(None)


class QueueWorker(Generic[T]):
    """A daemon thread that hands `work` every item waiting, in order, as one list (a state file writes
    them with one fsync; a log writes them a line at a time). `put` never waits: past `limit` items
    waiting (None: no limit) an item is dropped and counted in `dropped`. `flush` waits until what is
    queued is worked; `close` works what is queued and stops."""

    def __init__(self, name: str, work: Callable[[list[T]], object], *, limit: int | None = None) -> None:
        self.work = work
        self.limit = limit
        self.dropped = 0
        self._queue: queue.SimpleQueue[T | _Mark] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """The thread still runs (False once `close` saw it stop)."""
        return self._thread.is_alive()

    @property
    def waiting(self) -> int:
        """Items queued and not yet taken by the thread."""
        return self._queue.qsize()

    def put(self, item: T) -> bool:
        """Queue `item`; False if `limit` items already wait (it is dropped and counted)."""
        if self.limit is not None and self._queue.qsize() >= self.limit:
            self.dropped += 1
            return False
        self._queue.put(item)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait (at most `timeout` s) until everything queued so far is worked; False if it was not."""
        done = threading.Event()
        self._queue.put(_Mark(done))
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Work what is queued, then stop the thread (waiting at most `timeout` s: a blocked one is given up on)."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            item = get()
            batch: list[T] = []
            while not isinstance(item, _Mark):
                batch.append(item)
                try:
                    item = get_nowait()
                except queue.Empty:
                    break
            if batch:
                try:
                    self.work(batch)
                except Exception:  # a bug in one batch must not stop the thread: later items still go
                    log.exception("%s: working a batch failed", self._thread.name)
            if isinstance(item, _Mark):
                if item.event is None:
                    return
                item.event.set()
