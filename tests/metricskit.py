"""Reading a real guard's /metrics: the helpers the metrics, Prometheus and benchmark tests share."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import GuardProcess, request

T = TypeVar("T")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def stats(guard: GuardProcess) -> dict[str, Any]:
    return request(guard.operator, {"op": "stats", "id": 1})["stats"]


def metrics_url(guard: GuardProcess, timeout: float = 15.0) -> str:
    """The URL the guard says it serves its metrics at (once it does)."""
    return wait_for(lambda: stats(guard)["metrics"] or None, timeout, "the guard never served its metrics")


def scrape_text(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.read().decode()


def parse(text: str) -> Samples:
    """Every sample as (name, labels) -> value."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def scrape(url: str) -> Samples:
    return parse(scrape_text(url))


def scrape_until(url: str, done: Callable[[Samples], bool], timeout: float = 15.0) -> Samples:
    """Scrape until `done(samples)` (the guard publishes its counts each tick): the samples that passed."""

    def attempt() -> Samples | None:
        samples = scrape(url)
        return samples if done(samples) else None

    return wait_for(attempt, timeout, f"{url} never showed what was waited for")


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def wait_for(condition: Callable[[], T | None], timeout: float = 15.0, message: str = "condition not met") -> T:
    """Poll `condition` until it returns something truthy (a generous deadline, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
        except (OSError, KeyError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"{message} within {timeout} s (last error: {last})")


def free_port() -> int:
    """A port nothing listens on right now (for tests that must name one in advance)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, method: str = "GET", data: bytes | None = None) -> tuple[int, str]:
    """Status and body of one request (an error status is returned, not raised)."""
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
