"""Reading a real guard's /metrics: the helpers the metrics, Prometheus and benchmark tests share."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import GuardProcess, request
from tests.waits import TIMEOUT, eventually

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def stats(guard: GuardProcess) -> dict[str, Any]:
    return request(guard.operator, {"op": "stats", "id": 1})["stats"]


def metrics_url(guard: GuardProcess, timeout: float = TIMEOUT) -> str:
    """The URL the guard says it serves its metrics at (once it does)."""
    return eventually(
        lambda: stats(guard)["metrics"] or None,
        timeout=timeout,
        what="the guard to serve its metrics",
        ignoring=(OSError, KeyError),
    )


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


def scrape_until(url: str, done: Callable[[Samples], bool], timeout: float = TIMEOUT) -> Samples:
    """Scrape until `done(samples)` (the guard publishes its counts each tick): the samples that passed."""

    def attempt() -> Samples | None:
        samples = scrape(url)
        return samples if done(samples) else None

    return eventually(attempt, timeout=timeout, what=f"{url} to show what was waited for", ignoring=(OSError, KeyError))


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


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
