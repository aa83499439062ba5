"""QueueWorker: the thread behind the incident log, the OpenTelemetry export and the state file."""

from __future__ import annotations

import threading

from breaker.worker import QueueWorker
from tests.waits import eventually


def test_what_waits_is_handed_over_as_one_batch_in_order():
    gate, batches = threading.Event(), []

    def work(items: list[int]) -> None:
        batches.append(items)
        gate.wait(10)

    worker: QueueWorker[int] = QueueWorker("test-worker", work)
    worker.put(0)
    eventually(lambda: batches == [[0]])  # the thread holds 0: the rest wait together
    for n in range(1, 5):
        worker.put(n)
    gate.set()
    assert worker.flush(10)
    worker.close(10)
    assert batches == [[0], [1, 2, 3, 4]] and not worker.alive


def test_past_the_limit_items_are_dropped_and_counted_and_the_caller_never_waits():
    gate, taken = threading.Event(), []
    worker: QueueWorker[int] = QueueWorker("test-worker", lambda items: (taken.extend(items), gate.wait(10)), limit=2)
    worker.put(0)
    eventually(lambda: taken == [0])
    assert [worker.put(n) for n in range(1, 5)] == [True, True, False, False]
    assert worker.dropped == 2 and worker.waiting == 2
    gate.set()
    worker.close(10)
    assert taken == [0, 1, 2]


def test_a_batch_that_raises_is_logged_and_the_items_after_it_still_go(caplog):
    done: list[int] = []

    def work(items: list[int]) -> None:
        if 0 in items:
            raise ValueError("boom")
        done.extend(items)

    worker: QueueWorker[int] = QueueWorker("test-worker", work)
    worker.put(0)
    assert worker.flush(10)
    worker.put(1)
    worker.close(10)
    assert done == [1] and "working a batch failed" in caplog.text


def test_close_works_what_is_queued_before_the_thread_stops():
    done: list[int] = []
    worker: QueueWorker[int] = QueueWorker("test-worker", done.extend)
    for n in range(100):
        worker.put(n)
    worker.close(10)
    assert done == list(range(100)) and not worker.alive
